//! `engine-min profile`: measures each processor through the code `run` executes for each
//! kind of plan, at the row counts the executor uses, and writes a partition [`Profile`].
//!
//! - **CPU**: the [`Executor`] on a CPU table (the CPU backend's code, the executor's
//!   lookup and timing), paths `executor` for decode (`m` = 1..=4: a token and its draft
//!   rows) and prefill (`m` = 8, 16, 32, 64, 128: `Engine::forward`'s chunks and a last short
//!   one).
//! - **GPU**, two data paths: `resident` (one per phase: whole steps on the resident decoder,
//!   attributed to the matmul shapes, [`resident`]) and `per-matmul` (no phase: the GPU
//!   backend through the executor, staging included: what a GPU piece of a mixed plan costs).
//!   `shares_cores_with: "cpu"` when the OpenCL device is the CPU (PoCL).
//! - **pair cpu–gpu**: `split_us` (a column split of a tiny matmul through the executor minus
//!   its slower side alone), `overlap` (a split of `ffn_gate` at 16 rows), `concurrent_gbps`
//!   (both streaming decode GEMVs over their own weights at once); solo `bandwidth_gbps` per
//!   backend, `memory_gbps` (every CPU thread reading), `weight_bytes` (the model's).
//! - **NPU** (QNN HTP; on x86 the simulator: simulator times): the executor on an NPU table at
//!   its standard lengths, path `graphs` for prefill.
//!
//! Every CPU and GPU per-matmul latency point is the mean [`Executor::matmul`] call of its
//! weight shape inside a real engine step ([`Engine::forward`] of `m` tokens, the host ops
//! between the matmuls on the same pool as in `run`), the median over the timed steps
//! (`steps`); each curve stops growing in `m` before it would overrun the time budget, and the
//! profile's notes say which row counts were left out (the planner extrapolates them, and
//! warns when far).

mod calls;
mod error;
mod pairs;
pub mod resident;
mod steps;

pub use error::ProfilerError;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hetero_partition::{
    Backend as Pb, BackendProfile, LatencyPoint, PairProfile, PathProfile, Phase, Policy, Profile,
};
use hetero_sme::ThreadPool as Pool;

use crate::backend::gpu::GpuBackend;
use crate::backend::npu::{NpuBackend, NpuOptions};
use crate::backend::{CpuBackend, CpuKernel, WeightView};
use crate::engine::{Engine, EngineOptions};
use crate::exec::{Backends, Executor};
use crate::model::Model;
use crate::phases::PhasePlans;
use calls::Bench;

pub use pairs::{overlap, split_cost_us};

/// Decode row counts profiled: one token and up to three draft tokens.
pub const DECODE_M: [u32; 4] = [1, 2, 3, 4];

/// Prefill row counts profiled (those up to the largest chunk, and the largest chunk itself).
pub const PREFILL_M: [u32; 5] = [8, 16, 32, 64, 128];

/// The NPU's standard graph lengths profiled (HeteroInfer's multi-size static graphs).
pub const NPU_M: [u32; 2] = [32, 128];

/// Name of the CPU's paths and of the GPU's per-matmul path.
pub const EXECUTOR_PATH: &str = "executor";
/// Name of the GPU path of pieces run matmul by matmul.
pub const PER_MATMUL_PATH: &str = "per-matmul";

/// What to measure and how long to try.
#[derive(Clone, Debug)]
pub struct ProfileOptions {
    /// CPU threads (the pool `run` would use).
    pub threads: usize,
    /// The CPU kernel.
    pub kernel: CpuKernel,
    /// Timed steps per point (the median over steps is kept), after one warm-up step.
    pub reps: usize,
    /// Largest prompt chunk (`run`'s `MAX_BATCH`).
    pub max_batch: u32,
    /// Time budget of each curve set (CPU decode, CPU prefill, GPU per-matmul, GPU resident,
    /// NPU): larger row counts are left out once the next would overrun it.
    pub budget: Duration,
    /// Measure the GPU when OpenCL is usable.
    pub gpu: bool,
    /// Measure the NPU (QNN HTP from `$QNN_HTP_LIB`).
    pub npu: bool,
    /// The KV cache type of the host engines the curves are measured in (the resident GPU
    /// decoder's is f32 whatever this says).
    pub kv: crate::kv::KvType,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            kernel: CpuKernel::default_for_run(),
            reps: 3,
            max_batch: 128,
            budget: Duration::from_secs(10),
            gpu: true,
            npu: std::env::var_os("QNN_HTP_LIB").is_some(),
            kv: crate::kv::KvType::default(),
        }
    }
}

/// Prefill chunks the resident GPU decoder is also measured at beyond `max_batch`: `bench`
/// runs a whole prompt as one chunk (pp512 is one 512-row step), and the resident path gets
/// cheaper per row well past 128 rows (weights read once for more rows, fewer launches per
/// row): read beyond its last point the curve is proportional to the rows, which at 1B
/// predicted pp512 20% slow from a 128-row point (3,607 vs 4,512 tok/s measured on the H200).
pub const RESIDENT_EXTRA_M: [u32; 2] = [256, 512];

/// The prefill row counts measured for chunks of up to `max_batch` rows.
pub fn prefill_rows(max_batch: u32) -> Vec<u32> {
    let mut v: Vec<u32> = PREFILL_M
        .iter()
        .copied()
        .filter(|&m| m < max_batch)
        .collect();
    if max_batch > crate::phases::DECODE_ROWS {
        v.push(max_batch);
    }
    v
}

/// The prefill row counts the resident GPU decoder is measured at: [`prefill_rows`] and
/// [`RESIDENT_EXTRA_M`] above `max_batch` (each left out once the time budget would not hold
/// it, see `resident::measure`).
pub fn resident_prefill_rows(max_batch: u32) -> Vec<u32> {
    let mut v = prefill_rows(max_batch);
    v.extend(RESIDENT_EXTRA_M.iter().filter(|&&m| m > max_batch));
    v
}

fn path(name: &str, phase: Option<Phase>, points: Vec<LatencyPoint>) -> PathProfile {
    PathProfile {
        name: name.into(),
        phase,
        points,
    }
}

fn plans(
    backends: &[Pb],
    policy: Policy,
    ws: &[WeightView<'_>],
    max_m: u32,
) -> Result<PhasePlans, ProfilerError> {
    let checked = Profile::nominal(backends, &[])
        .check()
        .map_err(ProfilerError::Nominal)?;
    let mut shapes: Vec<(u32, u32)> = ws.iter().map(|w| (w.k as u32, w.n as u32)).collect();
    shapes.sort_unstable();
    shapes.dedup();
    Ok(PhasePlans::build(&checked, policy, &shapes, max_m)?)
}

/// Bytes per weight element of `ws` as stored (and streamed).
fn weight_bytes(ws: &[WeightView<'_>]) -> f64 {
    let bytes: f64 = ws.iter().map(|w| w.data.len() as f64).sum();
    let elems: f64 = ws.iter().map(|w| (w.k * w.n) as f64).sum();
    bytes / elems.max(1.0)
}

/// The layer weights of every `parity` (0: even, 1: odd) layer, with their executor indices.
fn layers_of<'a>(
    ws: &[WeightView<'a>],
    n_layer: usize,
    parity: usize,
) -> Vec<(usize, WeightView<'a>)> {
    let per = crate::layer::LAYER_MATMULS;
    (0..n_layer)
        .filter(|l| l % 2 == parity)
        .flat_map(|l| (l * per..(l + 1) * per).map(|i| (i, ws[i])))
        .collect()
}

/// Measures every available processor on `model` (see the module docs); `progress` gets one
/// line per measured curve or figure.
pub fn measure(
    model: &Arc<Model>,
    o: &ProfileOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Profile, ProfilerError> {
    let t_all = Instant::now();
    let c = &model.config;
    let pool = Arc::new(Pool::new(o.threads.max(1))?);
    let ws = crate::engine::matmul_weights(model);
    let layer_ws = &ws[..crate::layer::output_weight(c.n_layer).min(ws.len())];
    let wbytes = weight_bytes(layer_ws);
    let max_m = o.max_batch.max(1);
    let bench = Bench::new(&ws, max_m as usize, 2)?;
    let prefill_m = prefill_rows(max_m);
    let decode_m: Vec<u32> = DECODE_M.iter().copied().filter(|&m| m <= max_m).collect();
    let mut notes = vec![format!(
        "measured by engine-min profile ({} threads, cpu kernel {}, {} timed steps per point, \
         budget {:.0} s per curve set, load average {}): every point is the mean \
         Executor::matmul call of its weight shape inside an engine step (Engine::forward of m \
         tokens, host ops between the matmuls as in run), median over the timed steps",
        o.threads,
        o.kernel.name(),
        o.reps,
        o.budget.as_secs_f64(),
        load_average()
    )];

    // CPU.
    let t_step = Instant::now();
    let cpu_exec = Executor::new(
        plans(&[Pb::Cpu], Policy::Single(Pb::Cpu), &ws, max_m)?,
        Backends {
            cpu: CpuBackend::new(Arc::clone(&pool), o.kernel),
            gpu: None,
            npu: None,
        },
        &ws,
    )?;
    let mut engine = engine_on(model, cpu_exec, max_m, o.kv)?;
    progress(&format!(
        "cpu weights prepared in {:.1} s",
        t_step.elapsed().as_secs_f64()
    ));
    let dec = steps::curves(
        &mut engine,
        &decode_m,
        o.reps,
        o.budget,
        "cpu decode",
        progress,
    )?;
    let pre = steps::curves(
        &mut engine,
        &prefill_m,
        o.reps,
        o.budget,
        "cpu prefill",
        progress,
    )?;
    let cpu_exec = engine.into_executor();
    for (name, cv) in [("decode", &dec), ("prefill", &pre)] {
        if !cv.skipped.is_empty() {
            notes.push(format!(
                "cpu {name}: rows {:?} left out (time budget)",
                cv.skipped
            ));
        }
    }
    let mut cpu = BackendProfile {
        backend: "cpu".into(),
        paths: vec![
            path(EXECUTOR_PATH, Some(Phase::Decode), dec.points),
            path(EXECUTOR_PATH, Some(Phase::Prefill), pre.points),
        ],
        weight_bytes: Some(wbytes),
        ..BackendProfile::default()
    };
    let memory = pairs::memory_gbps(&pool);
    progress(&format!(
        "memory read bandwidth, {} threads: {memory:.1} GB/s",
        pool.threads()
    ));
    let mut backends = Vec::new();
    let mut pair_list = Vec::new();
    let mut device = cpu_name();

    // GPU, per matmul, then the pair, then resident.
    let dev = if o.gpu {
        match crate::backend::gpu::open_device(false) {
            Ok(d) => Some(d),
            Err(e) => {
                notes.push(format!("gpu: not measured (OpenCL is not usable: {e})"));
                progress(&format!("gpu: not measured (OpenCL is not usable: {e})"));
                None
            }
        }
    } else {
        None
    };
    match &dev {
        None => {
            let window = Duration::from_millis(400);
            let all = layers_of(&ws, c.n_layer, 0)
                .into_iter()
                .chain(layers_of(&ws, c.n_layer, 1))
                .collect::<Vec<_>>();
            let bw = pairs::solo_gbps(&cpu_exec, &all, &bench, window)?;
            cpu.bandwidth_gbps = Some(bw);
            progress(&format!("cpu decode streaming: {bw:.1} GB/s"));
        }
        Some(dev) => {
            let info = dev.info().clone();
            device = format!(
                "{device} + {} ({})",
                info.name.trim(),
                info.platform_name.trim()
            );
            progress(&format!(
                "gpu: {} ({}){}",
                info.name.trim(),
                info.platform_name.trim(),
                if info.is_cpu {
                    ", a CPU device: shares the CPU backend's cores"
                } else {
                    ""
                }
            ));
            let t_step = Instant::now();
            let gpu_exec = Executor::new(
                plans(&[Pb::Cpu, Pb::Gpu], Policy::Single(Pb::Gpu), &ws, max_m)?,
                Backends {
                    cpu: CpuBackend::new(Arc::clone(&pool), o.kernel),
                    gpu: Some(GpuBackend::with_device(Arc::clone(dev))?),
                    npu: None,
                },
                &ws,
            )?;
            let all_m: Vec<u32> = decode_m.iter().chain(&prefill_m).copied().collect();
            let mut engine = engine_on(model, gpu_exec, max_m, o.kv)?;
            progress(&format!(
                "gpu backend built in {:.1} s (per-matmul: OpenCL programs, weights uploaded)",
                t_step.elapsed().as_secs_f64()
            ));
            let per = steps::curves(
                &mut engine,
                &all_m,
                o.reps,
                o.budget,
                "gpu per-matmul",
                progress,
            )?;
            let gpu_exec = engine.into_executor();
            if !per.skipped.is_empty() {
                notes.push(format!(
                    "gpu per-matmul: rows {:?} left out (time budget; the planner extrapolates \
                     linearly from the last measured rows)",
                    per.skipped
                ));
            }
            let window = Duration::from_millis(400);
            let bw = pairs::bandwidth(
                &cpu_exec,
                &layers_of(&ws, c.n_layer, 0),
                &gpu_exec,
                &layers_of(&ws, c.n_layer, 1),
                &bench,
                window,
            )?;
            progress(&format!(
                "decode streaming: cpu {:.1} GB/s, gpu {:.1} GB/s, both at once {:.1} GB/s",
                bw.a, bw.b, bw.both
            ));
            cpu.bandwidth_gbps = Some(bw.a);
            let (split_us, ov) = split_and_overlap(
                model,
                &pool,
                o.kernel,
                gpu_exec.into_backends(),
                info.is_cpu,
            )?;
            progress(&format!(
                "cpu+gpu split: {split_us:.1} us fixed cost, overlap {ov:.2}"
            ));
            pair_list.push(PairProfile {
                backends: ["cpu".into(), "gpu".into()],
                split_us,
                concurrent_gbps: Some(bw.both),
                overlap: Some(ov),
            });
            notes.push(format!(
                "pair cpu-gpu: split_us = a 64/64-column split of attn_k's first 128 columns at \
                 one row minus its slower side alone; overlap from ffn_gate split 768/768 at 16 \
                 rows, (T_cpu + T_gpu - (T_split - split_us)) / min{}; concurrent_gbps: both \
                 streaming one-row GEMVs over their own layers' weights (even / odd) for {} ms",
                if info.is_cpu {
                    " in process CPU time (the GPU shares the CPU's cores)"
                } else {
                    " in wall time"
                },
                window.as_millis()
            ));
            let mut paths = Vec::new();
            match measure_resident(model, o, &resident_prefill_rows(max_m), progress) {
                Ok((r, skipped)) => {
                    if !skipped.is_empty() {
                        notes.push(format!(
                            "gpu resident prefill: chunks {skipped:?} left out (time budget)"
                        ));
                    }
                    paths.push(path(crate::auto::RESIDENT_PATH, Some(Phase::Decode), r.0));
                    paths.push(path(crate::auto::RESIDENT_PATH, Some(Phase::Prefill), r.1));
                    notes.push(
                        "gpu resident: whole steps on the resident decoder (a decode token after \
                         a full chunk; prefill chunks from position 0, logits of the last row), \
                         each step's median wall time attributed to the matmul shapes by the \
                         device time of the op kinds holding them (k*n shares), non-matmul ops \
                         and host overhead spread in proportion: one step's matmul latencies \
                         sum to the step (engine-min README, Profile)"
                            .into(),
                    );
                }
                Err(e) => {
                    notes.push(format!("gpu resident: not measured ({e})"));
                    progress(&format!("gpu resident: not measured ({e})"));
                }
            }
            paths.push(path(PER_MATMUL_PATH, None, per.points));
            backends.push(BackendProfile {
                backend: "gpu".into(),
                paths,
                bandwidth_gbps: Some(bw.b),
                weight_bytes: Some(wbytes),
                shares_cores_with: info.is_cpu.then(|| "cpu".into()),
                ..BackendProfile::default()
            });
        }
    }
    backends.insert(0, cpu);
    drop(cpu_exec);

    if o.npu {
        match measure_npu(model, &pool, o, progress) {
            Ok(n) => {
                notes.push(
                    "npu: QNN HTP x86 simulator: its latencies are simulator times, not an NPU's \
                     (left out of speed goals); off Arm it runs on the CPU's cores \
                     (shares_cores_with cpu); path graphs (prefill) at the standard lengths \
                     32 and 128; the LM head gets no graph; no pair measured with it"
                        .into(),
                );
                backends.push(n);
            }
            Err(e) => {
                notes.push(format!("npu: not measured ({e})"));
                progress(&format!("npu: not measured ({e})"));
            }
        }
    }
    notes.push(format!(
        "profile measured in {:.1} s",
        t_all.elapsed().as_secs_f64()
    ));
    let p = Profile {
        device,
        notes,
        memory_gbps: Some(memory),
        backends,
        pairs: pair_list,
        ..Profile::default()
    };
    p.check().map_err(ProfilerError::Invalid)?;
    Ok(p)
}

/// An engine of `max_m`-row steps (and that many positions) on `exec`, its KV cache in `kv`.
fn engine_on(
    model: &Arc<Model>,
    exec: Executor,
    max_m: u32,
    kv: crate::kv::KvType,
) -> Result<Engine, ProfilerError> {
    Ok(Engine::new(
        Arc::clone(model),
        exec,
        EngineOptions {
            context: max_m as usize,
            kv,
        },
    )?)
}

/// The cpu+gpu pair's `split_us` and `overlap`, through executors on the backends of a
/// finished GPU executor (no second device, no kernel rebuild). When the GPU shares the CPU's
/// cores (`shared`), the overlap is measured in process CPU time instead of wall time: on a
/// machine shared with other processes, a split's extra thread wins a larger share of the
/// cores, which wall time would read as overlap although no more compute exists.
fn split_and_overlap(
    model: &Model,
    pool: &Arc<Pool>,
    kernel: CpuKernel,
    b: Backends,
    shared: bool,
) -> Result<(f64, f64), ProfilerError> {
    let l0 = model.layers.first().ok_or(ProfilerError::NoLayers)?;
    let tiny = model.view(&l0.wk).rows(0..128.min(l0.wk.n))?;
    let gate = model.view(&l0.gate);
    let (tc, gc) = (tiny.n / 2 / 64 * 64, gate.n / 2 / 64 * 64);
    let bench = Bench::new(&[tiny, gate], 16, 1)?;
    let exec = |policy: Policy, ws: &[WeightView<'_>], b: Backends| {
        Ok::<_, ProfilerError>(Executor::new(
            plans(&[Pb::Cpu, Pb::Gpu], policy, ws, 16)?,
            b,
            ws,
        )?)
    };
    let times = |x: &Executor, bench: &Bench| -> Result<(f64, f64), ProfilerError> {
        let tiny_us = pairs::median_call_us(x, bench, 0, tiny.k, 1, 101)?;
        let gate_us = if shared {
            pairs::cpu_per_call_us(x, bench, 1, gate.k, 16, 21)?
        } else {
            pairs::median_call_us(x, bench, 1, gate.k, 16, 21)?
        };
        Ok((tiny_us, gate_us))
    };
    let cpu = |b: Backends| Backends {
        cpu: CpuBackend::new(Arc::clone(pool), kernel),
        ..b
    };
    let split = exec(
        Policy::WeightCentric(Pb::Cpu, Pb::Gpu, 0.5),
        &[tiny, gate],
        cpu(b),
    )?;
    for (w, c) in [(&tiny, tc), (&gate, gc)] {
        let n = w.n;
        let parts = &split.exec(w.k, n, 1)?.parts;
        if parts.len() != 2 || parts[0].cols != (0..c) {
            return Err(ProfilerError::SplitMismatch { n, at: c });
        }
    }
    let (s_tiny, s_gate) = times(&split, &bench)?;
    let halves = |r: std::ops::Range<usize>, r2: std::ops::Range<usize>| {
        Ok::<_, ProfilerError>([tiny.rows(r)?, gate.rows(r2)?])
    };
    let lo = halves(0..tc, 0..gc)?;
    let hi = halves(tc..tiny.n, gc..gate.n)?;
    let ec = exec(Policy::Single(Pb::Cpu), &lo, cpu(split.into_backends()))?;
    let (c_tiny, c_gate) = times(&ec, &bench)?;
    let eg = exec(Policy::Single(Pb::Gpu), &hi, cpu(ec.into_backends()))?;
    let (g_tiny, g_gate) = times(&eg, &bench)?;
    let split_us = split_cost_us(s_tiny, c_tiny, g_tiny);
    // CPU seconds have no fixed split cost to take out.
    let fixed = if shared { 0.0 } else { split_us };
    Ok((split_us, overlap(s_gate, fixed, c_gate, g_gate)))
}

/// The resident paths' points (decode, prefill) and the prefill chunks left out.
type ResidentPoints = ((Vec<LatencyPoint>, Vec<LatencyPoint>), Vec<u32>);

fn measure_resident(
    model: &Model,
    o: &ProfileOptions,
    prefill_m: &[u32],
    progress: &mut dyn FnMut(&str),
) -> Result<ResidentPoints, ProfilerError> {
    let t0 = Instant::now();
    let dev = crate::backend::gpu::open_device(true)?;
    let c = &model.config;
    let max_m = o.max_batch.max(1) as usize;
    // A decode token at position max_m (after one full chunk), prefill chunks from 0 of up to
    // the largest row count measured.
    let rows = prefill_m
        .iter()
        .map(|&m| m as usize)
        .max()
        .unwrap_or(1)
        .max(max_m);
    let ctx = (rows + 16).min(c.context.max(1));
    let pos = max_m.min(ctx - 1);
    let prefill_m: Vec<u32> = prefill_m
        .iter()
        .copied()
        .filter(|&m| m as usize <= ctx)
        .collect();
    let mut dec = crate::backend::resident::build(&dev, model, ctx, rows.min(ctx))?;
    let bt = *dec.build_times();
    progress(&format!(
        "gpu decoder built in {:.1} s (resident: OpenCL programs {:.1} s, weights uploaded {:.1} s on {} threads; {} launches a decode token)",
        t0.elapsed().as_secs_f64(),
        bt.programs.as_secs_f64(),
        bt.weights.as_secs_f64(),
        bt.threads,
        dec.launches_per_token(hetero_opencl_kernels::decoder::Readout::Logits)
    ));
    let r = resident::measure(&mut dec, c, pos, &prefill_m, o.reps, o.budget, progress)?;
    Ok(((r.decode, r.prefill), r.skipped))
}

fn measure_npu(
    model: &Model,
    pool: &Arc<Pool>,
    o: &ProfileOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<BackendProfile, ProfilerError> {
    let t0 = Instant::now();
    let opts = NpuOptions {
        seq: NPU_M[0] as usize,
        extra_seqs: [NPU_M[1] as usize, 0, 0],
        ..Default::default()
    };
    let npu = NpuBackend::open(opts)?;
    let stats = npu.stats();
    let l0 = model.layers.first().ok_or(ProfilerError::NoLayers)?;
    let ws: Vec<WeightView<'_>> = [&l0.wq, &l0.wk, &l0.gate, &l0.down]
        .iter()
        .map(|w| model.view(w))
        .collect();
    let max_m = NPU_M[1];
    let checked = Profile::nominal(&[Pb::Cpu, Pb::Npu], &NPU_M)
        .check()
        .map_err(ProfilerError::Nominal)?;
    let shapes: Vec<(u32, u32)> = ws.iter().map(|w| (w.k as u32, w.n as u32)).collect();
    let table = PhasePlans::build(&checked, Policy::NpuActivation(Pb::Cpu), &shapes, max_m)?;
    let exec = Executor::new(
        table,
        Backends {
            cpu: CpuBackend::new(Arc::clone(pool), o.kernel),
            gpu: None,
            npu: Some(npu),
        },
        &ws,
    )?;
    progress(&format!(
        "npu graphs prepared in {:.1} s ({} weights)",
        t0.elapsed().as_secs_f64(),
        stats.graphs()
    ));
    let bench = Bench::new(&ws, max_m as usize, 1)?;
    let mut points = Vec::new();
    for (w, v) in ws.iter().enumerate() {
        for m in NPU_M {
            if t0.elapsed() > o.budget * 2 {
                break;
            }
            let us = pairs::median_call_us(&exec, &bench, w, v.k, m as usize, o.reps)?;
            progress(&format!(
                "npu k={} n={} m={m}: {us:.1} us (simulated)",
                v.k, v.n
            ));
            points.push(LatencyPoint {
                k: v.k as u32,
                n: v.n as u32,
                m,
                us: us.max(0.01),
                order: hetero_partition::Order::ActivationFirst,
            });
        }
    }
    let graphs = stats.graphs().max(1);
    Ok(BackendProfile {
        backend: "npu".into(),
        paths: vec![path("graphs", Some(Phase::Prefill), points)],
        standard_m: NPU_M.to_vec(),
        graph_prepare_us: Some(stats.prepare_time().as_secs_f64() * 1e6 / graphs as f64),
        // Off Arm, QNN's HTP is the simulator, running on this CPU's cores: a cpu+npu split
        // there only shares them (overlap 0 in the planner), never two processors.
        shares_cores_with: cfg!(not(target_arch = "aarch64")).then(|| "cpu".into()),
        ..BackendProfile::default()
    })
}

/// The CPU's model name (`/proc/cpuinfo`), or "this machine".
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "this machine".into())
}

/// `/proc/loadavg`'s first three figures, or "unknown".
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}
