//! The engine against the plain f32 reference forward on the real model (needs
//! `HETERO_MODEL`; backend name `model`), and greedy generation of " Paris".

use std::sync::Arc;

use engine_min::backend::CpuKernel;
use engine_min::compose::{ComposeOptions, GpuPath, PlanChoice};
use engine_min::engine::{Engine, EngineError, EngineOptions};
use engine_min::exec::Kind;
use engine_min::model::Model;
use engine_min::reference;
use engine_min::sample::argmax;
use hetero_partition::Backend as Pb;
use hetero_sme::ThreadPool as Pool;

mod common;

use common::{max_diff, tv};

fn load() -> Option<Arc<Model>> {
    let path = hetero_tests::require("model", common::model_path())?;
    Some(Arc::new(Model::load(&path).expect("model loads")))
}

fn engine(model: &Arc<Model>, kernel: CpuKernel, threads: usize, max_batch: usize) -> Engine {
    let pool = Arc::new(Pool::new(threads).expect("pool"));
    let exec = engine_min::compose::cpu_executor(model, pool, kernel, max_batch).expect("exec");
    Engine::new(
        Arc::clone(model),
        exec,
        EngineOptions {
            context: 256,
            kv: engine_min::kv::KvType::F32,
        },
    )
    .expect("engine")
}

/// An engine running `plan` (16-row chunks, context 64) with `kernel` on 2 CPU threads.
fn plan_engine(
    model: &Arc<Model>,
    plan: PlanChoice,
    kernel: CpuKernel,
    profile: Option<hetero_partition::Profile>,
) -> Result<Engine, String> {
    plan_engine_with(model, plan, kernel, profile, GpuPath::Resident)
}

fn plan_engine_with(
    model: &Arc<Model>,
    plan: PlanChoice,
    kernel: CpuKernel,
    profile: Option<hetero_partition::Profile>,
    gpu_path: GpuPath,
) -> Result<Engine, String> {
    let opts = ComposeOptions {
        gpu_path,
        context: 64,
        plan,
        profile,
        threads: 2,
        kernel,
        max_batch: 16,
        ..ComposeOptions::default()
    };
    let c = engine_min::compose::executor(model, &opts).map_err(|e| e.to_string())?;
    Engine::new(
        Arc::clone(model),
        c.exec,
        EngineOptions {
            context: 64,
            kv: engine_min::kv::KvType::F32,
        },
    )
    .map_err(|e| e.to_string())
}

/// The most exact CPU kernel this machine has with f32 activations.
fn f32_kernel() -> CpuKernel {
    CpuKernel::available()
        .into_iter()
        .rfind(|&k| tol(k) == TOL_F32)
        .unwrap_or(CpuKernel::Portable)
}

/// Whether OpenCL is usable (`GpuBackend::open` serializes device enumeration itself).
fn gpu_usable() -> Result<(), String> {
    engine_min::backend::gpu::GpuBackend::open()
        .map(drop)
        .map_err(|e| e.to_string())
}

// Tolerance on logits (magnitude ~10-30): the f32 kernels use exactly the reference's
// dequantized weight values and differ only by f32 (vs f64) accumulation and summation order
// over 30 residual layers; measured max differences are 1e-5..4e-5. 1e-3 keeps a 25x margin,
// while any real mistake (a wrong RoPE pair, a wrong KV head, a stale cache row, a missing
// norm) moves logits by whole units.
const TOL_F32: f32 = 1e-3;
/// The f32 kernels over an f16 KV cache (the resident GPU decoder's default): each cached k and
/// v is rounded by <= 2^-11 of itself, which moves SmolLM2's logits (magnitudes ~20, so
/// 2^-11 of one is 1e-2) by about that after 30 layers (measured on PoCL: 5.9e-3 to 1.2e-2 at
/// positions 16-20), and the softmax by a total variation of up to about that times the top
/// token's share (measured 2e-7 to 2.8e-4): 5e-2 and 2e-3 keep a 4-7x margin; a structural
/// mistake (a wrong row, head or position) moves logits by whole units and the TV by O(0.1).
const TOL_KV16: f32 = 5e-2;
const TOL_TV_KV16: f64 = 2e-3;

// The VNNI kernel quantizes activations to 8 bits per 32-element block before every matmul
// (as llama.cpp does for Q4_1 x Q8_1); each activation moves by up to half a step (~0.4% of
// its block's max), and these errors compound over 30 layers. Measured max logit differences
// are 0.5-2.1; 2.5 absolute still catches structural mistakes (they move logits by several
// units and flip the top token).
const TOL_Q8: f32 = 2.5;

/// Total-variation distance allowed between the engine's and the reference's next-token
/// distributions: 1e-4 for f32 kernels (measured <= 2e-6), 0.08 for the 8-bit-activation
/// kernel (measured 1e-4..0.032 on these prompts; the kernel itself is checked against a
/// rigorous rounding bound in `cpu_kernels.rs`, so this only guards the composition).
fn tol_tv(kernel: CpuKernel) -> f64 {
    if tol(kernel) == TOL_F32 {
        1e-4
    } else {
        0.08
    }
}

fn tol(kernel: CpuKernel) -> f32 {
    match kernel {
        CpuKernel::Portable => TOL_F32,
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx512 => TOL_F32,
        // 8-bit activations (the `sme` kernel uses the int8 GEMM for prompts of 4+ tokens);
        // `sme-dq` is the int8 GEMM below its crossover and BF16 weights and activations
        // (2^-8 relative each) above it: the same accuracy class.
        CpuKernel::Int8 | CpuKernel::Sme | CpuKernel::Dq => TOL_Q8,
        // f32 activations, weights dequantized exactly: same accuracy class as the f32 kernels.
        CpuKernel::SmeGemv => TOL_F32,
    }
}

/// The 33-token test prompt and the reference's logits at every position (computed once per
/// test binary; the model is causal, so position t holds the logits of the prefix ..=t).
fn reference_logits(model: &Model) -> &'static (Vec<u32>, Vec<f32>) {
    static REF: std::sync::OnceLock<(Vec<u32>, Vec<f32>)> = std::sync::OnceLock::new();
    REF.get_or_init(|| {
        let text = "The capital of France is Paris, and the capital of Germany is Berlin. Rivers \
                    such as the Seine and the Rhine flow through them, carrying boats and barges";
        let mut ids = model.tokenizer.encode(text, false);
        assert!(ids.len() >= 33, "{}", ids.len());
        ids.truncate(33);
        let want = reference::forward(model, &ids);
        (ids, want)
    })
}

/// The all-GPU plan (every matmul on the OpenCL device; PoCL here) against the reference.
/// Prefill of 17 tokens (chunked by the engine's max_batch of 16), then one-token decode steps
/// up to position `last`, each position's logits (NaN-poisoned before every step) held to the
/// f32 kernels' tolerances against the reference's: max |diff| <= TOL_F32 and TV <= 1e-4.
fn check_f32_prefill_then_decode(
    e: &mut Engine,
    ids: &[u32],
    want: &[f32],
    last: usize,
    what: &str,
) {
    check_prefill_then_decode(e, ids, want, last, what, (TOL_F32, 1e-4))
}

/// [`check_f32_prefill_then_decode`] with the bounds `(max |diff|, TV)`.
fn check_prefill_then_decode(
    e: &mut Engine,
    ids: &[u32],
    want: &[f32],
    last: usize,
    what: &str,
    (tol, tol_tv): (f32, f64),
) {
    let vocab = want.len() / ids.len();
    let mut logits = vec![f32::NAN; vocab];
    e.forward(&ids[..17], &mut logits).expect("prefill");
    for t in 16..=last {
        if t > 16 {
            logits.fill(f32::NAN);
            e.forward(&ids[t..t + 1], &mut logits).expect("decode");
        }
        let w = &want[t * vocab..(t + 1) * vocab];
        let (d, tvd) = (max_diff(&logits, w), tv(&logits, w));
        eprintln!("{what} pos {t}: max |logit diff| {d:e}, TV {tvd:e}");
        assert!(
            d <= tol && tvd <= tol_tv,
            "{what} pos {t}: max diff {d}, TV {tvd}"
        );
    }
}

#[test]
fn gpu_plan_matches_reference_forward() {
    let Some(model) = load() else { return };
    if hetero_tests::require("opencl", gpu_usable()).is_none() {
        return;
    }
    let (ids, want) = reference_logits(&model);
    // Whole steps resident on the device (the default for an all-GPU plan).
    let mut e = plan_engine(&model, PlanChoice::Gpu, f32_kernel(), None).expect("gpu engine");
    assert!(e.executor().is_resident());
    // Prefill 17 (chunked by 16), then 4 decode steps, each checked. f32 kernels over exactly
    // dequantized weights and the resident decoder's default f16 KV cache: TOL_KV16 (the
    // decoder's paths at the f32 bounds with an f32 cache: gpu_resident.rs).
    check_prefill_then_decode(
        &mut e,
        ids,
        want,
        20,
        "gpu resident",
        (TOL_KV16, TOL_TV_KV16),
    );
    assert!(
        e.executor().times().snapshot().is_empty(),
        "no per-matmul calls"
    );
    assert!(!e.timings().resident.is_zero());
    // Greedy through the device's argmax equals the argmax of the read-back logits.
    let vocab = model.config.vocab;
    let mut logits = vec![f32::NAN; vocab];
    e.reset();
    e.forward(&ids[..5], &mut logits).expect("prefill");
    let mut scratch = vec![f32::NAN; vocab];
    let id = e
        .forward_argmax(&ids[5..6], &mut scratch)
        .expect("argmax step");
    assert!(
        scratch.iter().all(|v| v.is_nan()),
        "only the argmax was read back"
    );
    e.reset();
    e.forward(&ids[..6], &mut logits).expect("forward");
    assert_eq!(id, argmax(&logits));
    // Matmul by matmul (host ops on the CPU), as before the resident path.
    let mut e = plan_engine_with(
        &model,
        PlanChoice::Gpu,
        f32_kernel(),
        None,
        GpuPath::PerMatmul,
    )
    .expect("gpu engine");
    assert!(!e.executor().is_resident());
    check_f32_prefill_then_decode(&mut e, ids, want, 18, "gpu per matmul");
    let kinds = e.executor().times().snapshot();
    assert!(
        !kinds.is_empty() && kinds.iter().all(|k| k.0 == Kind::Gpu),
        "every matmul on the GPU: {kinds:?}"
    );
}

/// Forced CPU–GPU column splits (CPU share 0.25 and 0.5 of every matmul's columns, the two
/// parts computed concurrently into disjoint blocks of one uma output slot, the GPU's on its
/// helper thread, released by the slot's completion flag) against the reference. The CPU side
/// uses an f32 kernel, so the f32 tolerances apply.
#[test]
fn cpu_gpu_split_plan_matches_reference_forward() {
    let Some(model) = load() else { return };
    if hetero_tests::require("opencl", gpu_usable()).is_none() {
        return;
    }
    let (ids, want) = reference_logits(&model);
    for share in [0.25, 0.5] {
        let mut e =
            plan_engine(&model, PlanChoice::CpuGpu(share), f32_kernel(), None).expect("split");
        for m in [1, 16] {
            let x = e.executor().exec(576, 192, m).expect("planned");
            let cpu_cols = if share == 0.25 { 64 } else { 128 };
            assert_eq!(x.kind, Kind::CpuGpu, "{x:?}");
            assert!(
                x.parts
                    .iter()
                    .any(|p| p.who == Pb::Cpu && p.cols == (0..cpu_cols)),
                "{x:?}"
            );
            assert!(
                x.parts
                    .iter()
                    .any(|p| p.who == Pb::Gpu && p.cols == (cpu_cols..192)),
                "{x:?}"
            );
        }
        check_f32_prefill_then_decode(&mut e, ids, want, 18, &format!("split {share}"));
        let kinds = e.executor().times().snapshot();
        eprintln!("split {share}: {kinds:?}");
        assert!(
            kinds.iter().any(|k| k.0 == Kind::CpuGpu && k.2 > 0),
            "{kinds:?}"
        );
    }
}

/// A hand-written CPU+GPU profile for SmolLM2's shapes that makes the planner choose each
/// kind of execution: q/o and down (CPU and GPU equally fast) → CPU–GPU column splits, k/v
/// (GPU far faster) → all-GPU, gate/up and the LM head (CPU far faster) → all-CPU.
fn auto_profile() -> hetero_partition::Profile {
    // CPU points at 16 rows (the planner rounds CPU rows up to 16-row tiles), GPU at 1; both
    // at 128 rows with 8x the time.
    let pts = |m0: u32, k: u32, n: u32, t: f64| {
        format!(
            r#"{{ "k": {k}, "n": {n}, "m": {m0}, "us": {t} }}, {{ "k": {k}, "n": {n}, "m": 128, "us": {} }}"#,
            t * 8.0
        )
    };
    let json = format!(
        r#"{{ "device": "test", "backends": [
          {{ "backend": "cpu", "points": [ {}, {}, {}, {}, {} ] }},
          {{ "backend": "gpu", "points": [ {}, {}, {}, {}, {} ] }} ] }}"#,
        pts(16, 576, 576, 100.0),
        pts(16, 576, 192, 1000.0),
        pts(16, 576, 1536, 10.0),
        pts(16, 1536, 576, 100.0),
        pts(16, 576, 49152, 10.0),
        pts(1, 576, 576, 100.0),
        pts(1, 576, 192, 1.0),
        pts(1, 576, 1536, 1000.0),
        pts(1, 1536, 576, 100.0),
        pts(1, 576, 49152, 100000.0),
    );
    serde_json::from_str(&json).expect("profile json")
}

/// `run --plan auto`: the planner's per-op plan (all-CPU, all-GPU and CPU–GPU column splits
/// at the planned column) through the same executor as every forced plan, against the
/// reference with the f32 tolerances (the CPU side uses an f32 kernel).
#[test]
fn auto_plan_matches_reference_forward() {
    let Some(model) = load() else { return };
    if hetero_tests::require("opencl", gpu_usable()).is_none() {
        return;
    }
    let (ids, want) = reference_logits(&model);
    let mut e = plan_engine(&model, PlanChoice::Auto, f32_kernel(), Some(auto_profile()))
        .expect("auto engine");
    // The plan really mixes the executions this test is about, for decode and prefill rows.
    for m in [1, 16] {
        let kind = |k, n| e.executor().exec(k, n, m).expect("planned").kind;
        assert_eq!(kind(576, 576), Kind::CpuGpu);
        assert_eq!(kind(576, 192), Kind::Gpu);
        assert_eq!(kind(576, 1536), Kind::Cpu);
        assert_eq!(kind(1536, 576), Kind::CpuGpu);
        assert_eq!(kind(576, 49152), Kind::Cpu);
    }
    check_f32_prefill_then_decode(&mut e, ids, want, 18, "auto");
    let kinds = e.executor().times().snapshot();
    eprintln!("auto time by kind: {kinds:?}");
    for k in [Kind::Cpu, Kind::Gpu, Kind::CpuGpu] {
        assert!(kinds.iter().any(|x| x.0 == k), "{k:?} ran: {kinds:?}");
    }
}

#[test]
fn engine_matches_reference_forward() {
    let Some(model) = load() else { return };
    let (ids, want) = reference_logits(&model);
    let vocab = model.config.vocab;
    for kernel in CpuKernel::all() {
        let tol = tol(kernel);
        for &len in &[1usize, 5, 17, 33] {
            let mut e = engine(&model, kernel, 2, 128);
            let mut logits = vec![f32::NAN; vocab];
            e.forward(&ids[..len], &mut logits).expect("forward");
            let w = &want[(len - 1) * vocab..len * vocab];
            let d = max_diff(&logits, w);
            let tvd = tv(&logits, w);
            eprintln!("{kernel:?} len {len}: max |logit diff| {d:e}, softmax TV distance {tvd:e}");
            assert!(tvd <= tol_tv(kernel), "{kernel:?} len {len}: TV {tvd}");
            assert!(d <= tol, "{kernel:?} len {len}: max diff {d}");
            // The top token must agree wherever the reference's top-2 gap exceeds the tolerance.
            let top = argmax(w) as usize;
            let second = w
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != top)
                .map(|(_, &v)| v)
                .fold(f32::NEG_INFINITY, f32::max);
            if w[top] - second > 2.0 * tol {
                assert_eq!(argmax(&logits) as usize, top, "{kernel:?} len {len}");
            }
        }
        // All positions at once, prefill chunked by 8 (odd chunk boundaries).
        let mut e = engine(&model, kernel, 2, 8);
        let mut logits = vec![f32::NAN; 33 * vocab];
        e.forward(ids, &mut logits).expect("forward");
        let d = max_diff(&logits, want);
        eprintln!("{kernel:?} all positions, chunks of 8: max |logit diff| {d:e}");
        assert!(d <= tol, "{kernel:?} all positions chunked: max diff {d}");
        // Prefill 17 then decode one token at a time through the KV cache.
        let mut e = engine(&model, kernel, 1, 128);
        let mut logits = vec![f32::NAN; vocab];
        e.forward(&ids[..17], &mut logits).expect("prefill");
        for t in 17..33 {
            logits.fill(f32::NAN);
            e.forward(&ids[t..t + 1], &mut logits).expect("decode");
            let d = max_diff(&logits, &want[t * vocab..(t + 1) * vocab]);
            assert!(d <= tol, "{kernel:?} decode pos {t}: max diff {d}");
        }
    }
}

#[test]
fn greedy_paris() {
    let Some(model) = load() else { return };
    let tok = &model.tokenizer;
    let ids = tok.encode_prompt("The capital of France is");
    let mut e = engine(&model, CpuKernel::best(), 2, 128);
    let mut logits = vec![f32::NAN; model.config.vocab];
    e.forward(&ids, &mut logits).expect("forward");
    let mut out = vec![argmax(&logits)];
    for _ in 0..3 {
        e.forward(&out[out.len() - 1..], &mut logits)
            .expect("forward");
        out.push(argmax(&logits));
    }
    let text = tok.decode(&out, false);
    assert!(text.starts_with(" Paris"), "generated {text:?}");
}

#[test]
fn engine_errors_are_typed() {
    let Some(model) = load() else { return };
    let mut e = engine(&model, CpuKernel::Portable, 1, 16);
    let vocab = model.config.vocab;
    let mut logits = vec![0f32; vocab];
    assert_eq!(
        e.forward(&[vocab as u32], &mut logits),
        Err(EngineError::BadToken(vocab as u32))
    );
    assert!(matches!(
        e.forward(&[1, 2], &mut logits[..10]),
        Err(EngineError::LogitsLen { .. })
    ));
    let long = vec![1u32; 257];
    assert!(matches!(
        e.forward(&long, &mut logits),
        Err(EngineError::ContextFull { .. })
    ));
    assert_eq!(e.pos(), 0, "failed calls leave the cache untouched");
}
