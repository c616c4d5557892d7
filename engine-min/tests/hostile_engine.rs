//! Issue 17 (hostile input), phase 2, the engine's side: a NaN or an infinity planted in a
//! weight stops generation with an error naming the layer and op where non-finite values first
//! appeared (never empty text), and the sequence is left as it was; the engines refuse buffers
//! that exceed the memory budget before allocating them. Each mutation runs on a tiny synthetic
//! Llama and, when `HETERO_MODEL` is set (backend name `model`), on a mutated copy of SmolLM2.

use std::sync::{Arc, LazyLock};

use engine_min::backend::CpuKernel;
use engine_min::batch::{BatchEngine, BatchError, BatchOptions, Logits, SeqTokens};
use engine_min::compose::cpu_executor;
use engine_min::engine::{Engine, EngineError, EngineOptions};
use engine_min::guard::{LayerOp, NonFinite, Site};
use engine_min::limits::{self, BudgetError, EngineSize, MemoryBudget, Processors};
use engine_min::model::Model;
use hetero_sme::ThreadPool as Pool;

mod common;
mod synth;

static TINY: LazyLock<Vec<u8>> = LazyLock::new(synth::tiny_llama);

static REAL: LazyLock<Option<Vec<u8>>> = LazyLock::new(|| {
    let path = hetero_tests::require("model", common::model_path())?;
    Some(std::fs::read(path).expect("read the model"))
});

/// A base model: its bytes, the block the weight mutations go into, and the CPU kernels run
/// on it (every kernel on the tiny model; the default and an f32 one on SmolLM2, whose
/// weights take a while to repack).
struct Base {
    name: &'static str,
    bytes: &'static [u8],
    layer: usize,
    kernels: Vec<CpuKernel>,
}

fn bases() -> Vec<Base> {
    let mut v = vec![Base {
        name: "tiny",
        bytes: TINY.as_slice(),
        layer: 1,
        kernels: CpuKernel::all(),
    }];
    if let Some(real) = REAL.as_ref() {
        v.push(Base {
            name: "SmolLM2",
            bytes: real.as_slice(),
            layer: 12,
            kernels: vec![CpuKernel::best(), CpuKernel::Portable],
        });
    }
    v
}

/// `base` with block 0's scale of `tensor` set to `bits`.
fn with_scale(base: &[u8], tensor: &str, bits: u16) -> Arc<Model> {
    let mut b = base.to_vec();
    synth::poke_scale(&mut b, tensor, 0, bits);
    // The loader does not read quantized weights (that would page in the whole file): the
    // mutated model loads, and the engine's guard must catch it.
    Arc::new(Model::from_bytes(&b).expect("a model with a NaN weight scale loads"))
}

fn engine(model: &Arc<Model>, kernel: CpuKernel) -> Engine {
    let pool = Arc::new(Pool::new(2).expect("pool"));
    let exec = cpu_executor(model, pool, kernel, 16).expect("executor");
    Engine::new(
        Arc::clone(model),
        exec,
        EngineOptions {
            context: 64,
            ..Default::default()
        },
    )
    .expect("engine")
}

/// The engine's error for `tokens`, which must be [`EngineError::NonFinite`]; the engine's
/// position must not have moved.
fn non_finite(e: &mut Engine, tokens: &[u32], all: bool) -> NonFinite {
    let vocab = e.model().config.vocab;
    let pos = e.pos();
    let mut logits = vec![0f32; if all { tokens.len() * vocab } else { vocab }];
    let err = e
        .forward(tokens, &mut logits)
        .expect_err("non-finite values must be an error");
    assert_eq!(e.pos(), pos, "the failed call left the position alone");
    match err {
        EngineError::NonFinite(nf) => nf,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_nan_or_inf_in_a_weight_names_the_layer_and_op() {
    // Block 0 of weight row 0 feeds output column 0 of every row: the first non-finite value
    // is element 0 of position 0 (the first token), right after the matmul of that weight.
    let cases = [
        ("ffn_down", LayerOp::FfnDown, synth::F16_NAN),
        ("attn_q", LayerOp::AttnQ, synth::F16_NAN),
        ("attn_v", LayerOp::AttnV, synth::F16_INF),
        ("ffn_gate", LayerOp::FfnGate, synth::F16_NAN),
    ];
    for base in bases() {
        for (tensor, op, bits) in cases {
            let name = format!("blk.{}.{tensor}.weight", base.layer);
            let model = with_scale(base.bytes, &name, bits);
            for &kernel in &base.kernels {
                let mut e = engine(&model, kernel);
                let what = format!("{}: {name} = {bits:#x}, {}", base.name, kernel.name());
                for all in [false, true] {
                    let nf = non_finite(&mut e, &[1, 2, 3, 4, 5], all);
                    let site = Site::Layer {
                        layer: base.layer,
                        op,
                    };
                    assert_eq!(nf.site, Some(site), "{what}: {nf}");
                    assert_eq!((nf.seq, nf.pos, nf.index), (0, 0, 0), "{what}: {nf}");
                    assert!(!nf.value.is_finite(), "{what}: {nf}");
                    let msg = EngineError::NonFinite(nf).to_string();
                    let want = format!(
                        "non-finite values first appear in layer {} after {}",
                        base.layer,
                        op.name()
                    );
                    assert!(msg.starts_with(&want), "{what}: {msg}");
                    if !all && kernel == CpuKernel::best() {
                        println!("{what}: {msg}");
                    }
                }
            }
        }
    }
}

/// `base` with a NaN in the scale of block 0 of token `tok`'s embedding row.
fn nan_embedding(base: &[u8], tok: usize) -> Arc<Model> {
    let d = Model::from_bytes(base).expect("loads").config.d_model;
    let mut b = base.to_vec();
    // Rows of d_model / 32 blocks.
    synth::poke_scale(&mut b, "token_embd.weight", tok * d / 32, synth::F16_NAN);
    Arc::new(Model::from_bytes(&b).expect("loads"))
}

#[test]
fn a_nan_met_in_decode_names_its_position_and_the_sequence_goes_on() {
    // An untied output head: token 200's NaN embedding row is met only when token 200 is fed.
    let model = nan_embedding(&synth::tiny_llama_untied(), 200);
    assert!(!model.tied_output);
    let vocab = model.config.vocab;
    for kernel in CpuKernel::all() {
        let mut e = engine(&model, kernel);
        let mut logits = vec![0f32; vocab];
        e.forward(&[1, 2, 3], &mut logits).expect("a clean prompt");
        assert_eq!(e.pos(), 3);
        let nf = non_finite(&mut e, &[200], false);
        assert_eq!(nf.site, Some(Site::Embedding), "{}: {nf}", kernel.name());
        assert_eq!((nf.pos, nf.index), (3, 0), "{nf}");
        let msg = EngineError::NonFinite(nf).to_string();
        assert!(
            msg.starts_with("non-finite values first appear in the token embedding (token_embd)"),
            "{msg}"
        );
        // The failed step changed nothing: the next clean token continues the sequence, with
        // the logits a clean engine gives.
        e.forward(&[4], &mut logits)
            .expect("a clean token after the failure");
        assert_eq!(e.pos(), 4);
        // (Chunked alike: the `sme` kernel's numerics depend on the rows per call.)
        let mut clean = engine(&model, kernel);
        let mut want = vec![0f32; vocab];
        clean.forward(&[1, 2, 3], &mut want).expect("clean");
        clean.forward(&[4], &mut want).expect("clean");
        assert_eq!(logits, want, "{}", kernel.name());
    }
}

#[test]
fn a_nan_in_a_tied_embedding_row_shows_in_the_output_head() {
    // Tied: the row is also the output head's row of token 200, so every step's logit 200 is
    // NaN (found after the output head, at the last prompt position).
    for base in bases() {
        let model = nan_embedding(base.bytes, 200);
        assert!(model.tied_output);
        let mut e = engine(&model, CpuKernel::best());
        let nf = non_finite(&mut e, &[1, 2, 3], false);
        assert_eq!(nf.site, Some(Site::Output), "{}: {nf}", base.name);
        assert_eq!((nf.pos, nf.index), (2, 200), "{}: {nf}", base.name);
        let msg = EngineError::NonFinite(nf).to_string();
        assert!(
            msg.starts_with("non-finite values first appear in the output head"),
            "{msg}"
        );
        println!("{}: {msg}", base.name);
        assert_eq!(e.pos(), 0);
    }
}

#[test]
fn the_batch_engine_names_the_sequence_and_changes_no_length() {
    for base in bases() {
        let name = format!("blk.{}.ffn_down.weight", base.layer);
        let model = with_scale(base.bytes, &name, synth::F16_NAN);
        let vocab = model.config.vocab;
        let pool = Arc::new(Pool::new(2).expect("pool"));
        let exec = cpu_executor(&model, pool, CpuKernel::best(), 16).expect("executor");
        let mut e = BatchEngine::new(
            Arc::clone(&model),
            exec,
            BatchOptions {
                context: 32,
                sequences: 2,
                kv: Default::default(),
            },
        )
        .expect("engine");
        let batch = [
            SeqTokens {
                seq: 1,
                tokens: &[7, 8],
            },
            SeqTokens {
                seq: 0,
                tokens: &[9],
            },
        ];
        for (which, rows) in [(Logits::Last, 2), (Logits::All, 3)] {
            let mut logits = vec![0f32; rows * vocab];
            let err = e.forward(&batch, which, &mut logits).expect_err("NaN");
            let BatchError::NonFinite(nf) = err else {
                panic!("{err:?}")
            };
            let site = Site::Layer {
                layer: base.layer,
                op: LayerOp::FfnDown,
            };
            // Row 0 of the batch is sequence 1's first token.
            assert_eq!(nf.site, Some(site), "{}: {nf}", base.name);
            assert_eq!((nf.seq, nf.pos, nf.index), (1, 0, 0), "{}: {nf}", base.name);
            let msg = BatchError::NonFinite(nf).to_string();
            assert!(
                msg.starts_with("sequence 1: non-finite values first appear in layer"),
                "{msg}"
            );
            assert_eq!((e.len(0), e.len(1)), (0, 0), "no sequence grew");
        }
    }
}

#[test]
fn engines_refuse_buffers_over_the_budget_before_allocating() {
    for base in bases() {
        // A model claiming a million positions loads; an engine of that context is refused
        // (43 GiB on SmolLM2) instead of aborting in the allocator.
        let mut b = base.bytes.to_vec();
        synth::set_number(&mut b, "llama.context_length", 1_000_000.0);
        let model = Arc::new(Model::from_bytes(&b).expect("loads"));
        let c = &model.config;
        let exec = || {
            let pool = Arc::new(Pool::new(2).expect("pool"));
            cpu_executor(&model, pool, CpuKernel::best(), 16).expect("executor")
        };
        let limit = MemoryBudget::with_limit(64 << 20);
        let size = EngineSize {
            ctx: 1_000_000,
            max_batch: 16,
            threads: 2,
            sequences: 1,
            processors: Processors::default(),
            kv: engine_min::kv::KvType::F32,
        };
        let need = size.bytes(c).expect("counts");
        assert!(need > 64 << 20, "{need}");
        let err = Engine::with_budget(
            Arc::clone(&model),
            exec(),
            EngineOptions {
                context: 1_000_000,
                kv: engine_min::kv::KvType::F32,
            },
            &limit,
        )
        .err()
        .expect("refused");
        let EngineError::Memory(BudgetError::OverBudget {
            need: got,
            limit: l,
            ..
        }) = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!((*got, *l), (need, 64 << 20));
        let msg = err.to_string();
        assert!(
            msg.starts_with("KV cache and work buffers needs ") && msg.contains("limit 64.00 MiB"),
            "{msg}"
        );
        println!("{}: {msg}", base.name);
        // Under the machine's available memory too, on the real model (43 GiB).
        if base.name == "SmolLM2" {
            let err = Engine::new(
                Arc::clone(&model),
                exec(),
                EngineOptions {
                    context: 1_000_000,
                    kv: engine_min::kv::KvType::F32,
                },
            )
            .err()
            .expect("43 GiB refused");
            assert!(matches!(err, EngineError::Memory(_)), "{err:?}");
            println!("{}: {err}", base.name);
        }
        // A small context fits a budget of exactly its size, and not one byte less.
        let small = EngineOptions {
            context: 32,
            kv: engine_min::kv::KvType::F32,
        };
        let exact = EngineSize { ctx: 32, ..size }.bytes(c).unwrap();
        let fits = MemoryBudget::with_limit(exact);
        assert!(Engine::with_budget(Arc::clone(&model), exec(), small, &fits).is_ok());
        let short = MemoryBudget::with_limit(exact - 1);
        assert!(Engine::with_budget(Arc::clone(&model), exec(), small, &short).is_err());
        // The batched engine counts one KV cache per sequence.
        let per_seq = limits::kv_cache_bytes_of(c, 32, 1, Default::default()).unwrap();
        let budget = MemoryBudget::with_limit(per_seq * 1000);
        let err = BatchEngine::with_budget(
            Arc::clone(&model),
            exec(),
            BatchOptions {
                context: 32,
                sequences: 1000,
                kv: Default::default(),
            },
            &budget,
        )
        .err()
        .expect("1000 caches refused");
        assert!(
            matches!(err, BatchError::Memory(BudgetError::OverBudget { need, .. }) if need > per_seq * 1000),
            "{err:?}"
        );
        println!("{}: {err}", base.name);
    }
}

#[test]
fn the_budget_counts_what_the_processors_reserve() {
    let model = Model::from_bytes(&TINY).expect("loads");
    let c = &model.config;
    let cpu = limits::scratch_bytes(c, 128, &Processors::default()).unwrap();
    // hetero-sme's QActs for 128 rows of the widest k: one byte per element, one BlockMeta
    // per 32 elements.
    let k = c.d_model.max(c.d_ff) as u64;
    let meta = std::mem::size_of::<hetero_sme::BlockMeta>() as u64;
    assert_eq!(cpu, 128 * k + 128 * k / 32 * meta);
    let gpu = Processors {
        gpu: true,
        npu_seq: None,
    };
    let npu = Processors {
        gpu: false,
        npu_seq: Some(32),
    };
    let with_gpu = limits::scratch_bytes(c, 128, &gpu).unwrap();
    let with_npu = limits::scratch_bytes(c, 128, &npu).unwrap();
    assert!(with_gpu > cpu + 128 * 4 * c.vocab as u64, "{with_gpu}");
    assert!(with_npu > cpu && with_npu < with_gpu, "{with_npu}");
    // Overflow is an error, not a wrapped number.
    assert!(matches!(
        limits::scratch_bytes(c, usize::MAX, &gpu),
        Err(BudgetError::Overflow { .. })
    ));
    // A CPU executor holds no other processor.
    let pool = Arc::new(Pool::new(1).expect("pool"));
    let exec = cpu_executor(&model, pool, CpuKernel::Portable, 4).expect("executor");
    assert_eq!(Processors::of(&exec), Processors::default());
}
