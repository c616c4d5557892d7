//! The profiler and the solver front end: measure the engine's backends on the model's matmul
//! shapes (a `hetero_partition::Profile`), and ask the partition planner for per-op plans.
//!
//! `profile` measures the CPU, the GPU (when OpenCL is usable) and the NPU (when the QNN HTP
//! library is found; the x86 simulator here, so its times are simulator times);
//! hand-written profiles (any of cpu/gpu/npu) plan as the partition crate allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hetero_partition::{
    plan_op, BackendProfile, CheckedProfile, LatencyPoint, OpPlan, Order, PlanError, Profile,
};

use crate::backend::{Backend, CpuBackend, CpuKernel};
use crate::model::{Config, Model};
use hetero_sme::ThreadPool as Pool;

/// Sequence lengths (activation rows) profiled: decode, speculative drafts and prefill chunks.
pub const STANDARD_M: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// The model's distinct matmul shapes: (name, k = reduction, n = output columns).
pub fn model_shapes(c: &Config) -> Vec<(&'static str, u32, u32)> {
    let (d, kv, ff) = (c.d_model as u32, c.kv_dim() as u32, c.d_ff as u32);
    vec![
        ("attn_q / attn_output", d, d),
        ("attn_k / attn_v", d, kv),
        ("ffn_gate / ffn_up", d, ff),
        ("ffn_down", ff, d),
        ("output", d, c.vocab as u32),
    ]
}

/// Measures the CPU backend (best kernel, `threads` threads) on every model shape at every
/// [`STANDARD_M`], keeping the best of `reps` runs; `progress(done, total, line)` is called
/// after each point.
pub fn measure_cpu(
    model: &Model,
    threads: usize,
    reps: usize,
    progress: impl FnMut(usize, usize, &str),
) -> Result<BackendProfile, String> {
    let pool = Arc::new(Pool::new(threads).map_err(|e| e.to_string())?);
    let mut be = CpuBackend::new(Arc::clone(&pool), CpuKernel::best());
    let points = measure(model, &mut be, "cpu", &STANDARD_M, reps, progress)?;
    Ok(BackendProfile {
        backend: "cpu".into(),
        points,
        sync_us: 0.0,
        copy_gbps: None,
        bandwidth_gbps: Some(measure_bandwidth_gbps()),
        standard_m: Vec::new(),
        graph_prepare_us: None,
        ..BackendProfile::default()
    })
}

/// Row counts profiled on the GPU backend (one GEMV per row, so latency is linear in m and a
/// few points describe it).
pub const GPU_M: [u32; 4] = [1, 4, 16, 32];

/// Measures the GPU backend on every model shape at [`GPU_M`]; its `sync_us` is the latency of
/// a tiny matmul (64 x 64, one row): the fixed cost of a round trip to the device.
pub fn measure_gpu(
    model: &Model,
    gpu: &mut crate::backend::gpu::GpuBackend,
    reps: usize,
    progress: impl FnMut(usize, usize, &str),
) -> Result<BackendProfile, String> {
    let points = measure(model, gpu, "gpu", &GPU_M, reps, progress)?;
    // Round-trip cost: a 64 x 64 F16 weight of zeros.
    let zeros = vec![0u8; 64 * 64 * 2];
    let w = crate::backend::WeightView {
        ty: crate::gguf::GgmlType::F16,
        n: 64,
        k: 64,
        data: &zeros,
    };
    let id = gpu.prepare(&w).map_err(|e| e.to_string())?;
    gpu.reserve(1, 64).map_err(|e| e.to_string())?;
    let (x, mut y) = (vec![0f32; 64], vec![0f32; 64]);
    let mut best = Duration::MAX;
    for _ in 0..reps.max(1) * 3 {
        let t0 = Instant::now();
        gpu.matmul(id, &x, 1, &mut y, 64)
            .map_err(|e| e.to_string())?;
        best = best.min(t0.elapsed());
    }
    Ok(BackendProfile {
        backend: "gpu".into(),
        points,
        sync_us: best.as_secs_f64() * 1e6,
        copy_gbps: None,
        bandwidth_gbps: None,
        standard_m: Vec::new(),
        graph_prepare_us: None,
        ..BackendProfile::default()
    })
}

/// Standard NPU graph lengths profiled (HeteroInfer's multi-size static graphs).
pub const NPU_M: [u32; 2] = [32, 128];

/// Measures the NPU backend (QNN HTP; the x86 simulator here, so the times are **simulator
/// times**, not an NPU's) on the model's layer weight shapes at each of [`NPU_M`] (rows that
/// are exactly a standard length, so every row runs on the NPU), with one static graph per
/// weight and length prepared first; `graph_prepare_us` is the mean preparation time of one
/// graph (build + finalize). The LM head (over `max_graph_elems`) is not measured: it never
/// gets a graph. `sync_us` is 0 and `copy_gbps` absent: the FP16 staging conversions are
/// inside the measured times.
pub fn measure_npu(
    model: &Model,
    reps: usize,
    progress: impl FnMut(usize, usize, &str),
) -> Result<BackendProfile, String> {
    let opts = crate::backend::npu::NpuOptions {
        seq: NPU_M[0] as usize,
        extra_seqs: [NPU_M[1] as usize, 0, 0],
        ..Default::default()
    };
    let mut npu = crate::backend::npu::NpuBackend::open(opts).map_err(|e| e.to_string())?;
    let stats = npu.stats();
    let l0 = model.layers.first().ok_or("the model has no layers")?;
    let weights = [
        (l0.wq, "attn_q"),
        (l0.wk, "attn_k"),
        (l0.gate, "ffn_gate"),
        (l0.down, "ffn_down"),
    ];
    let points = measure_weights(model, &mut npu, "npu", &weights, &NPU_M, reps, progress)?;
    let graphs = stats.graphs().max(1);
    Ok(BackendProfile {
        backend: "npu".into(),
        points,
        sync_us: 0.0,
        copy_gbps: None,
        bandwidth_gbps: None,
        standard_m: NPU_M.to_vec(),
        graph_prepare_us: Some(stats.prepare_time().as_secs_f64() * 1e6 / graphs as f64),
        ..BackendProfile::default()
    })
}

fn measure(
    model: &Model,
    be: &mut dyn Backend,
    label: &str,
    ms: &[u32],
    reps: usize,
    progress: impl FnMut(usize, usize, &str),
) -> Result<Vec<LatencyPoint>, String> {
    let l0 = model.layers.first().ok_or("the model has no layers")?;
    let weights = [
        (l0.wq, "attn_q"),
        (l0.wk, "attn_k"),
        (l0.gate, "ffn_gate"),
        (l0.down, "ffn_down"),
        (model.output, "output"),
    ];
    measure_weights(model, be, label, &weights, ms, reps, progress)
}

#[allow(clippy::too_many_arguments)]
fn measure_weights(
    model: &Model,
    be: &mut dyn Backend,
    label: &str,
    weights: &[(crate::model::WeightRef, &str)],
    ms: &[u32],
    reps: usize,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Vec<LatencyPoint>, String> {
    let c = &model.config;
    let max_m = ms.iter().copied().max().unwrap_or(1) as usize;
    let mut ids = Vec::with_capacity(weights.len());
    for (w, _) in weights {
        ids.push(be.prepare(&model.view(w)).map_err(|e| e.to_string())?);
    }
    be.reserve(max_m, c.d_model.max(c.d_ff))
        .map_err(|e| e.to_string())?;
    let total = weights.len() * ms.len();
    let mut points = Vec::with_capacity(total);
    let mut x = vec![0f32; max_m * c.d_model.max(c.d_ff)];
    for (i, v) in x.iter_mut().enumerate() {
        *v = ((i * 7919) % 1000) as f32 / 500.0 - 1.0;
    }
    let mut out = vec![0f32; max_m * c.vocab.max(c.d_ff)];
    for ((w, name), &id) in weights.iter().zip(&ids) {
        for &m in ms {
            let mu = m as usize;
            let mut best = Duration::MAX;
            for _ in 0..reps.max(1) {
                let t0 = Instant::now();
                be.matmul(id, &x[..mu * w.k], mu, &mut out[..mu * w.n], w.n)
                    .map_err(|e| e.to_string())?;
                best = best.min(t0.elapsed());
            }
            let us = (best.as_secs_f64() * 1e6).max(0.01);
            points.push(LatencyPoint {
                k: w.k as u32,
                n: w.n as u32,
                m,
                us,
                order: Order::ActivationFirst,
            });
            progress(
                points.len(),
                total,
                &format!("{label} {name} k={} n={} m={m}: {us:.1} us", w.k, w.n),
            );
        }
    }
    Ok(points)
}

/// Streaming read bandwidth of one thread over 64 MiB, GB/s (best of 3).
pub fn measure_bandwidth_gbps() -> f64 {
    let buf = vec![1u64; 8 << 20];
    let mut best = f64::MAX;
    let mut sink = 0u64;
    for _ in 0..3 {
        let t0 = Instant::now();
        sink = sink.wrapping_add(buf.iter().fold(0u64, |a, &v| a.wrapping_add(v)));
        best = best.min(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    (buf.len() * 8) as f64 / best / 1e9
}

/// Builds a profile from measured backends.
pub fn profile(device: &str, backends: Vec<BackendProfile>) -> Profile {
    Profile {
        device: device.into(),
        backends,
        ..Profile::default()
    }
}

/// Plans every model shape at `m` rows.
pub fn plan_model_ops(
    p: &CheckedProfile,
    c: &Config,
    m: u32,
) -> Vec<(&'static str, Result<OpPlan, PlanError>)> {
    model_shapes(c)
        .into_iter()
        .map(|(name, k, n)| (name, plan_op(p, k, n, m)))
        .collect()
}

/// One line describing a plan: strategy, split and predicted time.
pub fn describe(p: &OpPlan) -> String {
    let s = &p.split;
    let split = match s.b {
        Some(b) => format!(
            "{} takes rows 0..{} x cols 0..{}, {} the rest",
            s.a, s.rows, s.cols, b
        ),
        None => format!("{} takes all {} x {}", s.a, p.m, p.n),
    };
    let npu = s
        .npu
        .as_ref()
        .map(|e| format!(", npu exec {e:?}"))
        .unwrap_or_default();
    format!(
        "k={} n={} m={}: {:?}; {split}{npu}; predicted {:.1} us (a {:.1}, b {:.1}, sync {:.1}, copy {:.1})",
        p.k, p.n, p.m, p.strategy, p.cost.total_us, p.cost.a_us, p.cost.b_us, p.cost.sync_us,
        p.cost.copy_us
    )
}
