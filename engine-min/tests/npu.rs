//! The `npu` plan (HeteroInfer's activation-centric row split: chunks of S rows on the QNN
//! HTP, the rest on the CPU) against the f32 reference forward on the real model. Needs
//! `QNN_HTP_LIB` (backend name `qnn`) and `HETERO_MODEL` (`model`).
//!
//! One test function: qnn-sys allows one session per process, and the 210 graphs are built
//! once (a few seconds on the simulator) and reused for every prompt.

use std::sync::Arc;

use engine_min::backend::npu::{NpuBackend, NpuOptions};
use engine_min::backend::{CpuBackend, CpuKernel, WeightView};
use engine_min::compose::{ComposeOptions, PlanChoice};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::exec::{Backends, Executor, Kind};
use engine_min::gguf::GgmlType;
use engine_min::model::Model;
use engine_min::reference;
use engine_min::sample::argmax;
use hetero_partition::{Backend as Pb, PlanTable, Policy, Profile};
use hetero_sme::ThreadPool as Pool;
use rand::{Rng, SeedableRng};

mod common;

const S: usize = 32;

/// The CPU partner's kernel: an f32 one (exact dequantized weights, f32 activations), so the
/// only reduced precision in the plan is the NPU's FP16.
fn f32_kernel() -> CpuKernel {
    #[cfg(target_arch = "x86_64")]
    if CpuKernel::available().contains(&CpuKernel::Avx512) {
        return CpuKernel::Avx512;
    }
    CpuKernel::Portable
}

/// An engine on `plan` (profile `profile` for auto) sharing the test's QNN `session`.
fn engine(
    model: &Arc<Model>,
    plan: PlanChoice,
    profile: Option<Profile>,
    session: &Arc<qnn_sys::Session>,
) -> Engine {
    let opts = ComposeOptions {
        plan,
        profile,
        threads: 2,
        kernel: f32_kernel(),
        max_batch: 128,
        npu: NpuOptions {
            seq: S,
            ..NpuOptions::default()
        },
        npu_session: Some(Arc::clone(session)),
        ..ComposeOptions::default()
    };
    let c = engine_min::compose::executor(model, &opts).expect("executor");
    Engine::new(
        Arc::clone(model),
        c.exec,
        EngineOptions {
            context: 256,
            kv: engine_min::kv::KvType::F32,
        },
    )
    .expect("engine")
}

/// Runs weight 0 of `exec` on `m` rows of `x` into a NaN-poisoned uma slot; returns the
/// output (`m x n`).
fn run(exec: &Executor, x: &[f32], m: usize, n: usize) -> Vec<f32> {
    let uma = hetero_uma::Pool::new(hetero_uma::PoolConfig {
        slots: 1,
        slot_size: hetero_uma::round_slot_size(m * n * 4).expect("size"),
    })
    .expect("uma");
    let mut h = uma.acquire().expect("slot");
    uma.f32s_mut(&mut h).expect("f32s").fill(f32::NAN);
    exec.matmul(0, x, m, &uma, &mut h).expect("matmul");
    let out = uma.f32s(&h).expect("f32s")[..m * n].to_vec();
    uma.release(h).expect("release");
    out
}

/// An executor of one weight under `policy` on a nominal profile with the NPU's `lengths`.
fn one_weight(
    w: &WeightView<'_>,
    policy: Policy,
    npu: NpuBackend,
    pool: &Arc<Pool>,
    max_m: u32,
) -> Executor {
    let lens: Vec<u32> = npu.options().lengths().map(|s| s as u32).collect();
    let p = Profile::nominal(&[Pb::Cpu, Pb::Npu], &lens)
        .check()
        .expect("profile");
    let table = PlanTable::build(&p, policy, &[(w.k as u32, w.n as u32)], max_m).expect("table");
    Executor::new(
        table,
        Backends {
            cpu: CpuBackend::new(Arc::clone(pool), f32_kernel()),
            gpu: None,
            npu: Some(npu),
        },
        std::slice::from_ref(w),
    )
    .expect("executor")
}

/// max |a - b| / max |b| over one logit row.
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let s = b.iter().map(|y| y.abs()).fold(0.0, f32::max);
    d / s.max(1e-30)
}

// Tolerance on logits, relative to the row's largest |logit| (~15-25 here). The NPU computes
// every layer matmul with FP16 weights (rounding each dequantized weight by up to 2^-11
// relative) and FP16 activations and outputs (the same again per element), so each of the 7
// matmuls of a layer carries ~1e-3 relative error, compounded through 30 residual layers.
// Measured: 2.2e-3 on both prompts (the f32 plans: ~1e-6), so 0.05 leaves a 20x margin.
// Structural mistakes (a wrong row chunk, a stale staging
// buffer, a misplaced remainder) move logits by whole units (> 10 % relative).
const TOL_REL: f32 = 0.05;

#[test]
fn npu_plan_matches_reference_forward() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let pool = Arc::new(Pool::new(2).expect("pool"));
    let opts = NpuOptions {
        seq: S,
        ..NpuOptions::default()
    };
    let Some(npu) = hetero_tests::require("qnn", NpuBackend::open(opts)) else {
        return;
    };
    let session = Arc::clone(npu.session());
    drop(npu);
    random_matmuls(&session, &pool);
    weight_split_matmuls(&session, &pool);
    let model = Arc::new(Model::load(&path).expect("model loads"));
    let vocab = model.config.vocab;
    let t0 = std::time::Instant::now();
    let mut e = engine(&model, PlanChoice::Npu, None, &session);
    eprintln!(
        "engine with NPU graphs ready in {:.2} s",
        t0.elapsed().as_secs_f64()
    );

    let text = "The capital of France is Paris, and the capital of Germany is Berlin. Rivers \
                such as the Seine and the Rhine flow through them, carrying boats and barges \
                along their banks to the sea, past old towns, green fields and quiet \
                villages";
    let mut ids = model.tokenizer.encode(text, false);
    assert!(ids.len() >= 40, "{}", ids.len());
    ids.truncate(40);
    let want = reference::forward(&model, &ids);

    // 40 tokens = one NPU chunk of 32 + 8 CPU rows; then exactly S = 32 (all NPU).
    for len in [40, S] {
        e.reset();
        let mut logits = vec![f32::NAN; len * vocab];
        e.forward(&ids[..len], &mut logits).expect("prefill");
        let mut worst = 0f32;
        for t in 0..len {
            let (g, w) = (
                &logits[t * vocab..(t + 1) * vocab],
                &want[t * vocab..(t + 1) * vocab],
            );
            let r = rel_err(g, w);
            worst = worst.max(r);
            assert!(r <= TOL_REL, "len {len} pos {t}: relative logit error {r}");
        }
        // The next-token choice after the whole prompt and the last NPU row agree.
        for t in [S - 1, len - 1] {
            let (g, w) = (
                &logits[t * vocab..(t + 1) * vocab],
                &want[t * vocab..(t + 1) * vocab],
            );
            assert_eq!(argmax(g), argmax(w), "len {len} pos {t}: argmax differs");
        }
        eprintln!("npu plan, {len} tokens: worst relative logit error {worst:e}");
    }

    // A 5-token prompt runs entirely on the partner: greedy " Paris".
    e.reset();
    let tok = &model.tokenizer;
    let p = tok.encode_prompt("The capital of France is");
    assert!(p.len() < S);
    let mut logits = vec![f32::NAN; vocab];
    e.forward(&p, &mut logits).expect("prefill");
    let mut out = Vec::new();
    tok.decode_token(argmax(&logits), false, &mut out);
    assert_eq!(String::from_utf8_lossy(&out), " Paris");

    // Greedy continuation of the 40-token prompt (NPU prefill, CPU decode) equals the CPU
    // plan's for a few tokens.
    let greedy = |e: &mut Engine| {
        e.reset();
        let mut logits = vec![f32::NAN; vocab];
        e.forward(&ids, &mut logits).expect("prefill");
        let mut got = vec![argmax(&logits)];
        for _ in 0..4 {
            e.forward(&got[got.len() - 1..], &mut logits)
                .expect("decode");
            got.push(argmax(&logits));
        }
        got
    };
    let from_npu = greedy(&mut e);
    let from_cpu = greedy(&mut engine(&model, PlanChoice::Cpu, None, &session));
    assert_eq!(from_npu, from_cpu);
    drop(e);

    // `--plan auto` with an NPU: a hand-written CPU+NPU profile in which the NPU is far faster
    // at its standard length, so the planner puts the layer matmuls' rows on the NPU; the
    // executed plan (NPU chunks + CPU remainder rows) against the reference as above.
    auto_plan_with_npu(&session, &model, &ids, &want);
}

fn auto_plan_with_npu(
    session: &Arc<qnn_sys::Session>,
    model: &Arc<Model>,
    ids: &[u32],
    want: &[f32],
) {
    let pts = |m0: u32, t: f64| {
        [(576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152)]
            .iter()
            .map(|(k, n)| {
                format!(
                    r#"{{ "k": {k}, "n": {n}, "m": {m0}, "us": {t} }}, {{ "k": {k}, "n": {n}, "m": 128, "us": {} }}"#,
                    t * 4.0
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let json = format!(
        r#"{{ "backends": [
          {{ "backend": "cpu", "points": [ {} ] }},
          {{ "backend": "npu", "standard_m": [32], "graph_prepare_us": 50000,
             "points": [ {} ] }} ] }}"#,
        pts(16, 100.0),
        pts(32, 1.0)
    );
    let prof: Profile = serde_json::from_str(&json).expect("profile json");
    let vocab = model.config.vocab;
    let mut e = engine(model, PlanChoice::Auto, Some(prof), session);
    for (k, n) in [(576, 576), (576, 192), (576, 1536), (1536, 576)] {
        let x = e.executor().exec(k, n, ids.len()).expect("planned");
        assert_eq!(x.kind, Kind::NpuCpu, "k={k} n={n}: {x:?}");
    }
    let len = ids.len();
    let mut logits = vec![f32::NAN; len * vocab];
    e.forward(ids, &mut logits).expect("prefill");
    let mut worst = 0f32;
    for t in 0..len {
        let r = rel_err(
            &logits[t * vocab..(t + 1) * vocab],
            &want[t * vocab..(t + 1) * vocab],
        );
        worst = worst.max(r);
        assert!(
            r <= TOL_REL,
            "auto with npu, pos {t}: relative logit error {r}"
        );
    }
    eprintln!("auto plan with npu, {len} tokens: worst relative logit error {worst:e}");
    let kinds = e.executor().times().snapshot();
    assert!(
        kinds.iter().any(|k| k.0 == Kind::NpuCpu),
        "the NPU plan ran: {kinds:?}"
    );
}

/// The `npu` plan's execution (NPU chunks of its standard lengths, the remainder rows on the
/// CPU concurrently, into one uma output) on random F32 weights against the CPU backend alone,
/// for m around multiples of the lengths; outputs NaN-poisoned. Rows past the covered ones and
/// every row of a weight over the graph-size threshold must equal the CPU's bit for bit (same
/// batch-invariant kernel); NPU rows are held to the FP16 bound below.
fn random_matmuls(session: &Arc<qnn_sys::Session>, pool: &Arc<Pool>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let (n, k) = (96, 128);
    let big = (128, 128);
    let weight = |rng: &mut rand::rngs::StdRng, n: usize, k: usize| -> (Vec<f32>, Vec<u8>) {
        let w: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        (w, b)
    };
    let (w, wb) = weight(&mut rng, n, k);
    let (_, bb) = weight(&mut rng, big.0, big.1);
    let wv = WeightView {
        ty: GgmlType::F32,
        n,
        k,
        data: &wb,
    };
    let bv = WeightView {
        ty: GgmlType::F32,
        n: big.0,
        k: big.1,
        data: &bb,
    };
    let opts = NpuOptions {
        seq: 8,
        // Two standard lengths: m is covered by 24-row graphs first, then 8-row ones, the
        // remainder (< 8 rows) on the partner, concurrently with the NPU chunks.
        extra_seqs: [24, 0, 0],
        // 96 x 128 gets a graph, 128 x 128 does not.
        max_graph_elems: 96 * 128,
        ..NpuOptions::default()
    };
    assert_eq!(opts.cover(40), ([(24, 1), (8, 2), (0, 0), (0, 0)], 40));
    assert_eq!(opts.cover(33), ([(24, 1), (8, 1), (0, 0), (0, 0)], 32));
    let mut worst = 0f32;
    let cpu_exec = |v: &WeightView<'_>| {
        let p = Profile::nominal(&[Pb::Cpu], &[]).check().expect("profile");
        let t = PlanTable::build(&p, Policy::Single(Pb::Cpu), &[(v.k as u32, v.n as u32)], 40)
            .expect("table");
        let cpu = CpuBackend::new(Arc::clone(pool), f32_kernel());
        Executor::new(
            t,
            Backends {
                cpu,
                gpu: None,
                npu: None,
            },
            std::slice::from_ref(v),
        )
        .expect("cpu executor")
    };
    for (v, graph) in [(&wv, true), (&bv, false)] {
        let npu =
            NpuBackend::with_session(session.new_context().expect("context"), opts).expect("npu");
        let stats = npu.stats();
        let exec = one_weight(v, Policy::NpuActivation(Pb::Cpu), npu, pool, 40);
        assert_eq!(
            stats.graphs(),
            usize::from(graph),
            "a graph iff under the threshold"
        );
        let cpu = cpu_exec(v);
        for m in [1, 7, 8, 9, 16, 23, 24, 25, 33, 40] {
            let x: Vec<f32> = (0..m * v.k).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let got = run(&exec, &x, m, v.n);
            let want = run(&cpu, &x, m, v.n);
            // Greedy cover: 24-row chunks, then 8-row chunks (here always m / 8 * 8 rows).
            let on_npu = if graph { m / 8 * 8 } else { 0 };
            let x_kind = exec.exec(v.k, v.n, m).expect("planned").kind;
            let want_kind = match (on_npu, on_npu == m) {
                (0, _) => Kind::Cpu,
                (_, true) => Kind::Npu,
                _ => Kind::NpuCpu,
            };
            assert_eq!(x_kind, want_kind, "m {m} graph {graph}");
            for t in 0..m {
                for j in 0..v.n {
                    let (g, c) = (got[t * v.n + j], want[t * v.n + j]);
                    if t >= on_npu {
                        assert_eq!(
                            g.to_bits(),
                            c.to_bits(),
                            "m {m} row {t} col {j}: partner row"
                        );
                        continue;
                    }
                    // FP16 rounding of each weight, each activation and each output: at most
                    // 2^-11 relative each, so 3 * 2^-11 * sum |w x| in all, plus the
                    // accumulation, which the HTP does wider than FP16 (measured worst
                    // 1.9e-4 * sum |w x|, under 2^-11): bound 4 * 2^-11 (a 10x margin), with
                    // 1e-6 absolute slack. A wrong row or column is off by ~0.2 * sum |w x|.
                    let xr = &x[t * k..(t + 1) * k];
                    let s: f32 = xr
                        .iter()
                        .zip(&w[j * k..(j + 1) * k])
                        .map(|(a, b)| (a * b).abs())
                        .sum();
                    let bound = 4.0 * f32::powi(2.0, -11) * s + 1e-6;
                    worst = worst.max((g - c).abs() / s);
                    assert!(
                        (g - c).abs() <= bound,
                        "m {m} row {t} col {j}: npu {g} vs cpu {c} (bound {bound})"
                    );
                }
            }
        }
    }
    eprintln!("random matmuls: worst |npu - cpu| / sum |w x| = {worst:e}");
}

/// HeteroInfer's weight-centric split (`--plan npu-w:R`): the NPU's graphs hold the first
/// `ratio_cols(n, R)` columns, the CPU computes the other columns of the same rows
/// concurrently, both into one uma output, and rows no graph covers go wholly to the CPU.
/// Random F32 weights, NaN-poisoned outputs, m around multiples of the length: CPU columns and
/// uncovered rows equal the CPU alone bit for bit; NPU columns obey the FP16 bound of
/// `random_matmuls`.
fn weight_split_matmuls(session: &Arc<qnn_sys::Session>, pool: &Arc<Pool>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let (n, k) = (200, 96);
    let w: Vec<f32> = (0..n * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let wv = WeightView {
        ty: GgmlType::F32,
        n,
        k,
        data: &wb,
    };
    let opts = NpuOptions {
        seq: 8,
        ..NpuOptions::default()
    };
    let npu = NpuBackend::with_session(session.new_context().expect("context"), opts).expect("npu");
    let exec = one_weight(
        &wv,
        Policy::WeightCentric(Pb::Npu, Pb::Cpu, 0.4),
        npu,
        pool,
        40,
    );
    let cpu = CpuBackend::new(Arc::clone(pool), f32_kernel());
    let cpu_only = {
        let p = Profile::nominal(&[Pb::Cpu], &[]).check().expect("profile");
        let t = PlanTable::build(&p, Policy::Single(Pb::Cpu), &[(k as u32, n as u32)], 40)
            .expect("table");
        Executor::new(
            t,
            Backends {
                cpu,
                gpu: None,
                npu: None,
            },
            std::slice::from_ref(&wv),
        )
        .expect("cpu executor")
    };
    // 40% of 200 columns on the 64-column grid.
    let c = hetero_partition::ratio_cols(n as u32, 0.4).expect("ratio") as usize;
    assert!(c > 0 && c < n, "c = {c}");
    for m in [1, 7, 8, 9, 17, 24, 33, 40] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let got = run(&exec, &x, m, n);
        let want = run(&cpu_only, &x, m, n);
        let on_npu = m / 8 * 8;
        for t in 0..m {
            for j in 0..n {
                let (g, e) = (got[t * n + j], want[t * n + j]);
                if t >= on_npu || j >= c {
                    assert_eq!(g.to_bits(), e.to_bits(), "m {m} row {t} col {j}: partner");
                    continue;
                }
                let s: f32 = x[t * k..(t + 1) * k]
                    .iter()
                    .zip(&w[j * k..(j + 1) * k])
                    .map(|(a, b)| (a * b).abs())
                    .sum();
                let bound = 4.0 * f32::powi(2.0, -11) * s + 1e-6;
                assert!(
                    (g - e).abs() <= bound,
                    "m {m} row {t} col {j}: npu {g} vs cpu {e} (bound {bound})"
                );
            }
        }
    }
}
