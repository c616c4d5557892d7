//! The engine against the plain f32 reference forward on the real model (needs
//! `HETERO_MODEL`; backend name `model`), and greedy generation of " Paris".

use std::sync::Arc;

use engine_min::backend::{CpuBackend, CpuKernel};
use engine_min::engine::{Engine, EngineError, EngineOptions};
use engine_min::model::Model;
use engine_min::reference;
use engine_min::sample::argmax;
use hetero_sme::ThreadPool;

mod common;

fn load() -> Option<Arc<Model>> {
    let path = hetero_tests::require("model", common::model_path())?;
    Some(Arc::new(Model::load(&path).expect("model loads")))
}

fn engine(model: &Arc<Model>, kernel: CpuKernel, threads: usize, max_batch: usize) -> Engine {
    let pool = Arc::new(ThreadPool::new(threads).expect("pool"));
    let be = Box::new(CpuBackend::new(Arc::clone(&pool), kernel));
    Engine::new(
        Arc::clone(model),
        be,
        pool,
        EngineOptions {
            context: 256,
            max_batch,
        },
    )
    .expect("engine")
}

/// Total-variation distance between the softmax distributions of two logit rows.
fn tv(a: &[f32], b: &[f32]) -> f64 {
    let sm = |x: &[f32]| {
        let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = x.iter().map(|&v| f64::from(v - mx).exp()).collect();
        let z: f64 = e.iter().sum();
        e.into_iter().map(move |v| v / z)
    };
    sm(a).zip(sm(b)).map(|(p, q)| (p - q).abs()).sum::<f64>() / 2.0
}

/// Opens the OpenCL device, one test thread at a time: PoCL's first device enumeration is
/// not safe to run from several threads at once (seen here: `clGetDeviceIDs` returning -1 or a
/// crash when three tests opened devices together).
fn open_gpu() -> Result<engine_min::gpu::GpuBackend, String> {
    static OPEN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    engine_min::gpu::GpuBackend::open()
}

/// Largest |a - b| over two logit rows.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

// Tolerance on logits (magnitude ~10-30): the f32 kernels use exactly the reference's
// dequantized weight values and differ only by f32 (vs f64) accumulation and summation order
// over 30 residual layers; measured max differences are 1e-5..4e-5. 1e-3 keeps a 25x margin,
// while any real mistake (a wrong RoPE pair, a wrong KV head, a stale cache row, a missing
// norm) moves logits by whole units.
const TOL_F32: f32 = 1e-3;

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
        // 8-bit activations (the `sme` kernel uses the int8 GEMM for prompts of 4+ tokens).
        CpuKernel::Int8 | CpuKernel::Sme => TOL_Q8,
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
            d <= TOL_F32 && tvd <= 1e-4,
            "{what} pos {t}: max diff {d}, TV {tvd}"
        );
    }
}

#[test]
fn gpu_plan_matches_reference_forward() {
    let Some(model) = load() else { return };
    let Some(gpu) = hetero_tests::require("opencl", open_gpu()) else {
        return;
    };
    let (ids, want) = reference_logits(&model);
    let pool = Arc::new(ThreadPool::new(2).expect("pool"));
    let mut e = Engine::new(
        Arc::clone(&model),
        Box::new(gpu),
        pool,
        EngineOptions {
            context: 64,
            max_batch: 16,
        },
    )
    .expect("engine on the GPU");
    // Prefill 17 (chunked by 16), then 4 decode steps, each checked. f32 GEMVs over exactly
    // dequantized weights: the f32 kernels' tolerances.
    check_f32_prefill_then_decode(&mut e, ids, want, 20, "gpu");
    let share = &e.timings().matmul;
    assert!(share[0].0.starts_with("gpu"), "{share:?}");
}

/// Forced CPU–GPU column splits (CPU share 0.25 and 0.5 of every matmul's columns, the two
/// halves computed concurrently and written into one output) against the reference, with the
/// activations in uma slots (decode steps take the zero-copy path: the GPU writes its columns
/// of the slot in place and signals a completion flag) and without (every matmul staged). The
/// CPU side uses an f32 kernel (or hetero-sme's f32-activation GEMV for prefill rows), so the
/// f32 tolerances apply.
#[test]
fn cpu_gpu_split_plan_matches_reference_forward() {
    let Some(model) = load() else { return };
    if hetero_tests::require("opencl", open_gpu().map(|_| ())).is_none() {
        return;
    }
    let (ids, want) = reference_logits(&model);
    let f32_kernel = CpuKernel::available()
        .into_iter()
        .rfind(|&k| tol(k) == TOL_F32)
        .unwrap_or(CpuKernel::Portable);
    for (share, uma) in [(0.25, true), (0.5, true), (0.5, false)] {
        let pool = Arc::new(ThreadPool::new(2).expect("pool"));
        let gpu = open_gpu().expect("opencl");
        let cpu = CpuBackend::new(Arc::clone(&pool), f32_kernel);
        let acts =
            uma.then(|| engine_min::act::UmaActs::for_model(&model.config, 16).expect("uma pool"));
        let split = engine_min::split::SplitBackend::with_acts(
            cpu,
            gpu,
            share,
            acts.clone(),
            Some(Arc::clone(&pool)),
        )
        .expect("split");
        assert_eq!(split.cpu_cols(192), if share == 0.25 { 64 } else { 128 });
        let stats = split.stats();
        let mut e = Engine::with_acts(
            Arc::clone(&model),
            Box::new(split),
            pool,
            EngineOptions {
                context: 64,
                max_batch: 16,
            },
            acts,
        )
        .expect("engine");
        check_f32_prefill_then_decode(&mut e, ids, want, 18, &format!("split {share} uma {uma}"));
        let (zc, st) = (
            stats.zero_copy.load(std::sync::atomic::Ordering::Relaxed),
            stats.staged.load(std::sync::atomic::Ordering::Relaxed),
        );
        eprintln!("split {share} uma {uma}: {zc} zero-copy matmuls, {st} staged");
        // One-row steps (the 17th prompt token, a chunk of its own, and 2 decode steps) x 30
        // layers x 7 matmuls in place; the 16-row chunk and the LM heads are staged.
        if uma {
            assert_eq!(
                zc,
                3 * 30 * 7,
                "decode matmuls must take the zero-copy path"
            );
        } else {
            assert_eq!(zc, 0);
        }
    }
}

/// A hand-written CPU+GPU profile for SmolLM2's shapes that makes the planner choose each
/// kind of execution: q/o and down (CPU and GPU equally fast) → CPU–GPU column splits, k/v
/// (GPU far faster) → all-GPU, gate/up and the LM head (CPU far faster) → all-CPU.
fn auto_profile() -> hetero_partition::CheckedProfile {
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
    let p: hetero_partition::Profile = serde_json::from_str(&json).expect("profile json");
    p.check().expect("valid profile")
}

/// `run --plan auto`'s backend: the planner's per-op plan (all-CPU, all-GPU and CPU–GPU column
/// splits at the planned column, mapped from `OpPlan::pieces()`), activations in uma slots,
/// against the reference with the f32 tolerances (the CPU side uses an f32 kernel).
#[test]
fn auto_plan_matches_reference_forward() {
    use engine_min::exec::{Exec, PlanBackend};
    let Some(model) = load() else { return };
    let Some(gpu) = hetero_tests::require("opencl", open_gpu()) else {
        return;
    };
    let (ids, want) = reference_logits(&model);
    let f32_kernel = CpuKernel::available()
        .into_iter()
        .rfind(|&k| tol(k) == TOL_F32)
        .unwrap_or(CpuKernel::Portable);
    let pool = Arc::new(ThreadPool::new(2).expect("pool"));
    let acts = engine_min::act::UmaActs::for_model(&model.config, 16).expect("uma pool");
    let shapes: Vec<(usize, usize)> = engine_min::planning::model_shapes(&model.config)
        .into_iter()
        .map(|(_, k, n)| (k as usize, n as usize))
        .collect();
    let pb = PlanBackend::new(
        auto_profile(),
        16,
        Arc::clone(&pool),
        CpuBackend::new(Arc::clone(&pool), f32_kernel),
        Some(gpu),
        None,
        Some(Arc::clone(&acts)),
        &shapes,
    )
    .expect("plan backend");
    let table = pb.table();
    // The plan really mixes the executions this test is about, for decode and prefill rows.
    for m in [1, 16] {
        let e = |k, n| table.entry(k, n, m).expect("planned").exec;
        assert!(
            matches!(e(576, 576), Exec::CpuGpu { cpu_cols } if cpu_cols > 0 && cpu_cols < 576),
            "{:?}",
            e(576, 576)
        );
        assert_eq!(e(576, 192), Exec::Gpu);
        assert_eq!(e(576, 1536), Exec::Cpu);
        assert!(matches!(e(1536, 576), Exec::CpuGpu { .. }));
        assert_eq!(e(576, 49152), Exec::Cpu);
    }
    let times = pb.times();
    let mut e = Engine::with_acts(
        Arc::clone(&model),
        Box::new(pb),
        pool,
        EngineOptions {
            context: 64,
            max_batch: 16,
        },
        Some(acts),
    )
    .expect("engine");
    check_f32_prefill_then_decode(&mut e, ids, want, 18, "auto");
    let t = times.get();
    eprintln!("auto time by exec (ns): {t:?}");
    assert!(
        t[0] > 0 && t[1] > 0 && t[2] > 0,
        "every planned kind ran: {t:?}"
    );
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
