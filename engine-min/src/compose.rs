//! Composition: from what the user chose (a plan, a profile, threads, a CPU kernel) to an
//! [`Executor`] — open the processors the plan needs, build its partition [`PlanTable`](hetero_partition::PlanTable)
//! (forced plans on placeholder costs, `auto` on the measured profile), prepare the model's
//! weights on each. Every `--plan` value goes through here, so there is one plan path.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use hetero_partition::{Backend as Pb, Policy, Profile, ProfileError, TableError};

use crate::auto::{AutoError, Decision, Mode, Workload};

use crate::backend::gpu::GpuBackend;
use crate::backend::npu::{NpuBackend, NpuError, NpuOptions};
use crate::backend::{BackendError, CpuBackend, CpuKernel};
use crate::exec::{Backends, Executor};
use crate::kv::KvType;
use crate::model::Model;
use crate::phases::PhasePlans;
use crate::prepared::CacheSetting;
use hetero_sme::ThreadPool as Pool;

/// A `--plan` value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PlanChoice {
    /// Every matmul on the CPU.
    Cpu,
    /// Every matmul on the GPU.
    Gpu,
    /// The CPU takes this share (0..=1) of every matmul's columns, the GPU the rest.
    CpuGpu(f64),
    /// Rows in whole chunks of the NPU's standard lengths on the NPU, the rest (and decode) on
    /// the CPU.
    Npu,
    /// The same with the GPU as partner.
    NpuGpu,
    /// Weight-centric: the NPU takes this share (0 < R <= 1) of every matmul's columns, the CPU
    /// the rest, at the same time.
    NpuW(f64),
    /// The same with the GPU as partner.
    NpuGpuW(f64),
    /// The planner's per-op plan on a measured profile.
    Auto,
}

/// Why a `--plan` value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadPlan {
    /// Not one of the plan names (the text given).
    Unknown(String),
    /// A share that is not a number.
    NotANumber {
        /// Whose share (`CPU`, `NPU`).
        who: &'static str,
        /// The text given.
        text: String,
    },
    /// A share outside its range: `0..=1` for the CPU's, `(0, 1]` for the NPU's.
    OutOfRange {
        /// Whose share.
        who: &'static str,
        /// The text given.
        text: String,
        /// Whether 0 is allowed.
        zero_ok: bool,
    },
}

impl fmt::Display for BadPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(s) => write!(f, "unknown plan `{s}`"),
            Self::NotANumber { who, text } => write!(f, "{who} share `{text}` is not a number"),
            Self::OutOfRange { who, text, zero_ok } => {
                let range = if *zero_ok { "0..=1" } else { "(0, 1]" };
                write!(f, "{who} share {text} is outside {range}")
            }
        }?;
        f.write_str(
            "; plans: auto, cpu, gpu, cpu-gpu:R (CPU share R in 0..=1), npu, npu-gpu, \
             npu-w:R, npu-gpu-w:R (NPU share R in (0, 1])",
        )
    }
}

impl std::error::Error for BadPlan {}

fn share(s: &str, who: &'static str, zero_ok: bool) -> Result<f64, BadPlan> {
    let v: f64 = s.parse().map_err(|_| BadPlan::NotANumber {
        who,
        text: s.to_owned(),
    })?;
    let ok = v.is_finite() && v <= 1.0 && (if zero_ok { v >= 0.0 } else { v > 0.0 });
    if !ok {
        return Err(BadPlan::OutOfRange {
            who,
            text: s.to_owned(),
            zero_ok,
        });
    }
    Ok(v)
}

impl FromStr for PlanChoice {
    type Err = BadPlan;

    fn from_str(s: &str) -> Result<Self, BadPlan> {
        Ok(match s {
            "cpu" => Self::Cpu,
            "gpu" => Self::Gpu,
            "npu" => Self::Npu,
            "npu-gpu" => Self::NpuGpu,
            "auto" => Self::Auto,
            _ => {
                if let Some(r) = s.strip_prefix("cpu-gpu:") {
                    Self::CpuGpu(share(r, "CPU", true)?)
                } else if let Some(r) = s.strip_prefix("npu-gpu-w:") {
                    Self::NpuGpuW(share(r, "NPU", false)?)
                } else if let Some(r) = s.strip_prefix("npu-w:") {
                    Self::NpuW(share(r, "NPU", false)?)
                } else {
                    return Err(BadPlan::Unknown(s.to_owned()));
                }
            }
        })
    }
}

impl fmt::Display for PlanChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Gpu => f.write_str("gpu"),
            Self::CpuGpu(r) => write!(f, "cpu-gpu:{r}"),
            Self::Npu => f.write_str("npu"),
            Self::NpuGpu => f.write_str("npu-gpu"),
            Self::NpuW(r) => write!(f, "npu-w:{r}"),
            Self::NpuGpuW(r) => write!(f, "npu-gpu-w:{r}"),
            Self::Auto => f.write_str("auto"),
        }
    }
}

impl PlanChoice {
    /// The partition policy of the plan.
    pub fn policy(self) -> Policy {
        match self {
            Self::Cpu => Policy::Single(Pb::Cpu),
            Self::Gpu => Policy::Single(Pb::Gpu),
            Self::CpuGpu(r) => Policy::WeightCentric(Pb::Cpu, Pb::Gpu, r),
            Self::Npu => Policy::NpuActivation(Pb::Cpu),
            Self::NpuGpu => Policy::NpuActivation(Pb::Gpu),
            Self::NpuW(r) => Policy::WeightCentric(Pb::Npu, Pb::Cpu, r),
            Self::NpuGpuW(r) => Policy::WeightCentric(Pb::Npu, Pb::Gpu, r),
            Self::Auto => Policy::Auto,
        }
    }

    /// The processors a forced plan needs (the CPU always runs the host ops); `auto` needs
    /// what its profile lists.
    pub fn needs(self) -> (bool, bool) {
        match self {
            Self::Cpu | Self::Auto => (false, false),
            Self::Gpu | Self::CpuGpu(_) => (true, false),
            Self::Npu | Self::NpuW(_) => (false, true),
            Self::NpuGpu | Self::NpuGpuW(_) => (true, true),
        }
    }
}

/// Everything composition needs besides the model.
#[derive(Clone, Debug)]
pub struct ComposeOptions {
    /// The plan.
    pub plan: PlanChoice,
    /// The measured profile (`auto` needs one).
    pub profile: Option<Profile>,
    /// CPU threads (the pool runs the CPU's matmuls and every host op).
    pub threads: usize,
    /// The CPU kernel.
    pub kernel: CpuKernel,
    /// Most rows of one matmul (longer prompts are processed in chunks of this many).
    pub max_batch: usize,
    /// NPU settings (its standard lengths come from the profile under `auto`).
    pub npu: NpuOptions,
    /// An open QNN session to use for the NPU (QNN allows one per process: several executors
    /// in one process share it, each in a context of its own); `None` opens one.
    pub npu_session: Option<Arc<qnn_sys::Session>>,
    /// KV-cache positions the engine will use (the resident GPU decoder sizes its cache by it).
    pub context: usize,
    /// How a forced plan that gives every matmul to the GPU runs (`auto` decides itself).
    pub gpu_path: GpuPath,
    /// What the run will do: `auto` weighs prefill and decode by it.
    pub workload: Workload,
    /// Where the CPU's prepared (repacked) weights are kept between runs; default
    /// [`CacheSetting::Off`] (the command line defaults to [`CacheSetting::default_dir`]).
    pub prepared: CacheSetting,
    /// Open the GPU with a profiling queue (per-launch device times, for `bench --breakdown`).
    pub gpu_profiling: bool,
    /// The KV cache's element type the run asks for; `None`: f16 (llama.cpp's default), on
    /// every path (the host's cache, and the resident GPU decoder's on the device).
    /// [`Composed::kv`] is the one to build the engine with.
    pub kv: Option<KvType>,
}

/// The fewest rows a prompt chunk of the GPU-resident decoder has (`max_batch` when larger).
pub const RESIDENT_ROWS: usize = 512;

/// How an all-GPU plan runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GpuPath {
    /// Whole steps on the device (weights, KV cache, activations resident; one readback a
    /// step): hetero-opencl-kernels' decoder.
    #[default]
    Resident,
    /// Matmul by matmul through the GPU backend, host ops on the CPU (a round trip per matmul;
    /// kept to compare).
    PerMatmul,
}

impl Default for ComposeOptions {
    fn default() -> Self {
        ComposeOptions {
            plan: PlanChoice::Cpu,
            profile: None,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            kernel: CpuKernel::default_for_run(),
            max_batch: 128,
            npu: NpuOptions::default(),
            npu_session: None,
            context: 2048,
            gpu_path: GpuPath::Resident,
            workload: Workload::default(),
            prepared: CacheSetting::Off,
            gpu_profiling: false,
            kv: None,
        }
    }
}

/// Why composition failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ComposeError {
    /// The plan needs the GPU and OpenCL is not usable.
    Gpu(hetero_opencl_kernels::Error),
    /// The GPU-resident decoder could not be built (the device lacks memory for the model or
    /// the KV cache — the message names the sizes —, a kernel did not build — the message holds
    /// the build log —, ...).
    Resident(hetero_opencl_kernels::Error),
    /// The plan needs the NPU and QNN is not usable.
    Npu(NpuError),
    /// `auto` without a profile.
    NoProfile,
    /// The profile was rejected.
    Profile(ProfileError),
    /// The planner could not plan a shape.
    Table(TableError),
    /// `auto` could not decide.
    Auto(AutoError),
    /// Threads, preparation or sizing failed.
    Backend(BackendError),
}

impl fmt::Display for ComposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gpu(e) => write!(f, "the plan needs the GPU, but OpenCL is not usable: {e}"),
            Self::Resident(e) => write!(f, "the GPU-resident decoder could not be built: {e}"),
            Self::Npu(e) => write!(f, "the plan needs the NPU: {e}"),
            Self::NoProfile => f.write_str(
                "--plan auto needs --profile FILE (write one with `engine-min profile`)",
            ),
            Self::Profile(e) => write!(f, "profile rejected: {e}"),
            Self::Table(e) => write!(f, "planner: {e}"),
            Self::Auto(e) => write!(f, "--plan auto: {e}"),
            Self::Backend(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ComposeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Gpu(e) | Self::Resident(e) => Some(e),
            Self::Npu(e) => Some(e),
            Self::NoProfile => None,
            Self::Profile(e) => Some(e),
            Self::Table(e) => Some(e),
            Self::Auto(e) => Some(e),
            Self::Backend(e) => Some(e),
        }
    }
}

impl From<BackendError> for ComposeError {
    fn from(e: BackendError) -> Self {
        Self::Backend(e)
    }
}

/// An executor and what the user should be told about how it was made.
pub struct Composed {
    /// The executor.
    pub exec: Executor,
    /// Things said along the way (a processor the profile lists but this machine lacks, ...).
    pub notes: Vec<String>,
    /// What `auto` decided and predicted (`None` for a forced plan).
    pub decision: Option<Decision>,
    /// The KV cache's element type to build the engine with: the one asked for, or f32 where
    /// the executor's path keeps its cache in f32 only (with a note).
    pub kv: KvType,
}

/// The model's distinct matmul shapes `(k, n)`.
pub fn model_shapes(model: &Model) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = crate::engine::matmul_weights(model)
        .iter()
        .map(|w| (w.k as u32, w.n as u32))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Builds the executor for `model` under `opts`.
pub fn executor(model: &Model, opts: &ComposeOptions) -> Result<Composed, ComposeError> {
    let mut notes = Vec::new();
    let pool = Arc::new(Pool::new(opts.threads.max(1)).map_err(BackendError::from)?);
    let cpu = CpuBackend::new(pool, opts.kernel);
    let (mut profile, want_gpu, want_npu) = match (opts.plan, &opts.profile) {
        (PlanChoice::Auto, None) => return Err(ComposeError::NoProfile),
        (PlanChoice::Auto, Some(p)) => {
            let has = |b: &str| p.backends.iter().any(|x| x.backend.eq_ignore_ascii_case(b));
            (Some(p.clone()), has("gpu"), has("npu"))
        }
        (plan, _) => {
            let (g, n) = plan.needs();
            (None, g, n)
        }
    };
    let forced = profile.is_none();
    let gpu = if want_gpu {
        match crate::backend::gpu::open_device(opts.gpu_profiling) {
            Ok(g) => Some(g),
            Err(e) if forced => return Err(ComposeError::Gpu(e)),
            Err(e) => {
                notes.push(format!(
                    "the profile has a GPU but OpenCL is not usable ({e}): planned without it"
                ));
                None
            }
        }
    } else {
        None
    };
    let mut npu_opts = opts.npu;
    if let Some(p) = &profile {
        // The profile's standard lengths are the graphs the planner assumes.
        let mut lens: Vec<usize> = p
            .backends
            .iter()
            .filter(|b| b.backend.eq_ignore_ascii_case("npu"))
            .flat_map(|b| b.standard_m.iter().map(|&m| m as usize))
            .filter(|&m| m > 0)
            .collect();
        lens.sort_unstable();
        lens.dedup();
        lens.truncate(4);
        if let Some((&first, rest)) = lens.split_first() {
            npu_opts.seq = first;
            npu_opts.extra_seqs = [0; 3];
            for (d, s) in npu_opts.extra_seqs.iter_mut().zip(rest) {
                *d = *s;
            }
        }
    }
    let npu = if want_npu {
        let opened = match &opts.npu_session {
            Some(s) => s
                .new_context()
                .map_err(NpuError::Qnn)
                .and_then(|ctx| NpuBackend::with_session(ctx, npu_opts)),
            None => NpuBackend::open(npu_opts),
        };
        match opened {
            Ok(n) => Some(n),
            Err(e) if forced => return Err(ComposeError::Npu(e)),
            Err(e) => {
                notes.push(format!(
                    "the profile has an NPU but it is not usable ({e}): planned without it"
                ));
                None
            }
        }
    } else {
        None
    };
    let (has_gpu, has_npu) = (gpu.is_some(), npu.is_some());
    let max_m = opts.max_batch.max(1) as u32;
    let shapes = model_shapes(model);
    let mut decision = None;
    let plans = match &mut profile {
        Some(p) => {
            keep_backends(p, |b| match b {
                Pb::Cpu => true,
                Pb::Gpu => has_gpu,
                Pb::Npu => has_npu,
            });
            let d =
                crate::auto::decide(p, model, max_m, opts.workload).map_err(ComposeError::Auto)?;
            let plans = match d.mode {
                // The resident decoder runs every matmul: its table is the GPU alone.
                Mode::Resident => gpu_alone(&shapes, max_m)?,
                Mode::Table => d.plans.clone(),
            };
            decision = Some(d);
            plans
        }
        None => {
            let mut bs = vec![Pb::Cpu];
            bs.extend(has_gpu.then_some(Pb::Gpu));
            bs.extend(has_npu.then_some(Pb::Npu));
            let lens: Vec<u32> = npu_opts.lengths().map(|s| s as u32).collect();
            let checked = Profile::nominal(&bs, &lens)
                .check()
                .map_err(ComposeError::Profile)?;
            PhasePlans::build(&checked, opts.plan.policy(), &shapes, max_m)
                .map_err(ComposeError::Table)?
        }
    };
    // A processor no plan uses is not kept (no uploads, no helper thread).
    let used = plans.backends();
    let dev = gpu.filter(|_| used.contains(&Pb::Gpu));
    let npu = npu.filter(|_| used.contains(&Pb::Npu));
    // Whole steps on the device: `auto` when it predicted the resident decoder faster; a
    // forced all-GPU plan unless `--gpu-path per-matmul`.
    let resident = match &decision {
        Some(d) => d.mode == Mode::Resident,
        None => used == [Pb::Gpu] && opts.gpu_path == GpuPath::Resident,
    };
    if let (Some(dev), true) = (&dev, resident) {
        // Prompt chunks of at least RESIDENT_ROWS rows: the decoder's GEMM tiles are 128 rows,
        // and 512-row chunks keep a device of ~100 compute units busy on 4096-wide matrices.
        let rows = opts.max_batch.max(RESIDENT_ROWS);
        let plans = gpu_alone(&shapes, rows as u32)?;
        let kv = opts.kv.unwrap_or_default();
        let dec = crate::backend::resident::build_with(
            dev,
            model,
            opts.context.clamp(1, model.config.context.max(1)),
            rows,
            hetero_opencl_kernels::decoder::DecoderOptions {
                kv: resident_kv(kv),
                prepare_threads: prepare_threads_from_env(),
                one_allocation: one_allocation_from_env(),
                ..Default::default()
            },
        )
        .map_err(ComposeError::Resident)?;
        let exec = Executor::resident(plans, cpu, dec)?;
        return Ok(Composed {
            exec,
            notes,
            decision,
            kv,
        });
    }
    let gpu = dev
        .map(GpuBackend::with_device)
        .transpose()
        .map_err(ComposeError::Gpu)?;
    let exec = Executor::with_source(
        plans,
        Backends { cpu, gpu, npu },
        &crate::engine::matmul_weights(model),
        crate::backend::PrepareSource {
            file: Some(model.file()),
            cache: Some(&opts.prepared),
        },
    )?;
    Ok(Composed {
        exec,
        notes,
        decision,
        kv: opts.kv.unwrap_or_default(),
    })
}

/// The resident GPU decoder's own name for the KV type `kv` (it holds all three on the
/// device; hetero-opencl-kernels does not depend on this crate, so the type is mapped here).
fn resident_kv(kv: KvType) -> hetero_opencl_kernels::KvType {
    match kv {
        KvType::F32 => hetero_opencl_kernels::KvType::F32,
        KvType::F16 => hetero_opencl_kernels::KvType::F16,
        KvType::Q8_0 => hetero_opencl_kernels::KvType::Q8_0,
    }
}

/// Keeps the backends of `p` that `keep` says this machine has, and the pairs and sharing
/// entries that name only those.
fn keep_backends(p: &mut Profile, keep: impl Fn(Pb) -> bool) {
    let kept = |name: &str| Pb::from_name(name).is_some_and(&keep);
    p.backends.retain(|b| kept(&b.backend));
    p.pairs.retain(|pair| pair.backends.iter().all(|b| kept(b)));
    for b in &mut p.backends {
        if b.shares_cores_with.as_deref().is_some_and(|s| !kept(s)) {
            b.shares_cores_with = None;
        }
    }
}

/// Every shape on the GPU alone (placeholder costs): the table of the resident decoder.
fn gpu_alone(shapes: &[(u32, u32)], max_m: u32) -> Result<PhasePlans, ComposeError> {
    let checked = Profile::nominal(&[Pb::Cpu, Pb::Gpu], &[])
        .check()
        .map_err(ComposeError::Profile)?;
    PhasePlans::build(&checked, Policy::Single(Pb::Gpu), shapes, max_m).map_err(ComposeError::Table)
}

/// A CPU-only executor (the agents' verifier, tests): every matmul on `kernel` over `pool`.
pub fn cpu_executor(
    model: &Model,
    pool: Arc<Pool>,
    kernel: CpuKernel,
    max_batch: usize,
) -> Result<Executor, ComposeError> {
    let checked = Profile::nominal(&[Pb::Cpu], &[])
        .check()
        .map_err(ComposeError::Profile)?;
    let plans = PhasePlans::build(
        &checked,
        Policy::Single(Pb::Cpu),
        &model_shapes(model),
        max_batch.max(1) as u32,
    )
    .map_err(ComposeError::Table)?;
    Ok(Executor::new(
        plans,
        Backends {
            cpu: CpuBackend::new(pool, kernel),
            gpu: None,
            npu: None,
        },
        &crate::engine::matmul_weights(model),
    )?)
}

/// `HETERO_GPU_PREPARE_THREADS` (a measurement knob, see the README): host threads that
/// re-lay and write the resident decoder's weights; unset or unparsable: 0 (the decoder's
/// default, the host's cores up to 8).
fn prepare_threads_from_env() -> usize {
    std::env::var("HETERO_GPU_PREPARE_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `HETERO_GPU_ONE_ALLOCATION` (a measurement knob, see the README): `1` puts the resident
/// decoder's weights and caches in one allocation each, `0` in one per part; unset: the
/// decoder's choice.
fn one_allocation_from_env() -> Option<bool> {
    match std::env::var("HETERO_GPU_ONE_ALLOCATION").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}
