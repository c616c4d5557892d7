//! The one executor: runs every matmul of the model as a partition [`PlanTable`](hetero_partition::PlanTable) says —
//! whichever `--plan` the user chose (a forced plan is a table built under a forced
//! [`hetero_partition::Policy`], `auto` a table built by the solver on a measured profile).
//!
//! At start-up, for every weight of the model, the executor looks at the table's plans for that
//! weight's shape at every row count and prepares, once per backend, each piece of the weight a
//! plan gives that backend (all columns, or a column range: a sub-weight of its own). Each
//! matmul then looks up its plan for `(k, n, m)` and runs its pieces:
//!
//! - one piece on the CPU: straight into the output slot;
//! - pieces on two processors: the output slot is split into disjoint blocks
//!   ([`hetero_uma::Pool::split_blocks_flag`]: a column split, a row split or an L-shape), the
//!   offloaded processor's blocks run on its persistent host thread (the private `helper`
//!   module) while the other's run here, both writing their blocks of the ONE output (no
//!   scratch, no concat);
//!   the helper publishes the slot's `CompletionFlag` when done, and the consumer waits on it.
//!
//! Where the plan asks for something this machine cannot do exactly, the executor runs the
//! nearest thing and marks the plan *approximated* in [`Executor::describe`]: an NPU row count
//! that is not a whole number of the NPU's standard graphs (padding, online preparation) gives
//! the uncovered rows to the plan's other processor (or the CPU); a weight the NPU refuses (the
//! LM head) or a processor that is not open runs on the CPU.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hetero_partition::{Backend as Pb, OpPlan, Phase, Prediction};
use hetero_uma::{Block, ColumnsMut, Handle, MatrixLayout, Pool as UmaPool};

use crate::backend::cpu::MAX_GROUP;
use crate::backend::gpu::GpuBackend;
use crate::backend::npu::NpuBackend;
use crate::backend::{Backend, BackendError, CpuBackend, PrepareSource, WeightId, WeightView};
use crate::helper::Helper;
use crate::phases::PhasePlans;

/// Most blocks one matmul's output is split into (an L-shape plus an NPU remainder).
const MAX_PARTS: usize = 4;

/// The backends an executor runs on: always the CPU, the GPU and NPU when open.
pub struct Backends {
    /// The CPU (also runs every host op of the engine on its pool).
    pub cpu: CpuBackend,
    /// The GPU, if open.
    pub gpu: Option<GpuBackend>,
    /// The NPU, if open.
    pub npu: Option<NpuBackend>,
}

/// One block of a matmul's output and the processor that computes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The processor.
    pub who: Pb,
    /// Output rows.
    pub rows: Range<usize>,
    /// Output columns.
    pub cols: Range<usize>,
}

/// How one `(k, n, m)` runs here.
#[derive(Clone, Debug)]
pub struct Exec {
    /// The blocks, each processor's together (the first processor's run on the caller).
    pub parts: Vec<Part>,
    /// What runs differs from the plan (see the module docs).
    pub approximated: bool,
    /// The processors used.
    pub kind: Kind,
    /// The phase whose table planned it (see [`PhasePlans`]).
    pub phase: Phase,
    /// The plan's predicted time, µs.
    pub predicted_us: f64,
}

/// The processors a matmul used, for the time report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// CPU alone.
    Cpu,
    /// GPU alone.
    Gpu,
    /// NPU alone.
    Npu,
    /// CPU and GPU.
    CpuGpu,
    /// NPU and CPU.
    NpuCpu,
    /// NPU and GPU.
    NpuGpu,
}

impl Kind {
    /// All kinds, in [`ExecTimes`] order.
    pub const ALL: [Kind; 6] = [
        Kind::Cpu,
        Kind::Gpu,
        Kind::Npu,
        Kind::CpuGpu,
        Kind::NpuCpu,
        Kind::NpuGpu,
    ];

    /// Short name (`cpu`, `cpu+gpu`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cpu => "cpu",
            Kind::Gpu => "gpu",
            Kind::Npu => "npu",
            Kind::CpuGpu => "cpu+gpu",
            Kind::NpuCpu => "npu+cpu",
            Kind::NpuGpu => "npu+gpu",
        }
    }

    fn of(parts: &[Part]) -> Kind {
        let has = |b: Pb| {
            parts
                .iter()
                .any(|p| p.who == b && !p.rows.is_empty() && !p.cols.is_empty())
        };
        match (has(Pb::Cpu), has(Pb::Gpu), has(Pb::Npu)) {
            (_, false, true) if has(Pb::Cpu) => Kind::NpuCpu,
            (false, false, true) => Kind::Npu,
            (_, true, true) => Kind::NpuGpu,
            (true, true, false) => Kind::CpuGpu,
            (false, true, false) => Kind::Gpu,
            _ => Kind::Cpu,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Matmul time and count per [`Kind`] (ns), readable while the executor runs.
#[derive(Debug, Default)]
pub struct ExecTimes {
    ns: [AtomicU64; 6],
    calls: [AtomicU64; 6],
}

impl ExecTimes {
    /// `(kind, total time, calls)` for every kind that ran.
    pub fn snapshot(&self) -> Vec<(Kind, std::time::Duration, u64)> {
        Kind::ALL
            .iter()
            .map(|&k| {
                (
                    k,
                    std::time::Duration::from_nanos(self.ns[k.index()].load(Ordering::Relaxed)),
                    self.calls[k.index()].load(Ordering::Relaxed),
                )
            })
            .filter(|x| x.2 > 0)
            .collect()
    }

    /// Sets every counter to zero.
    pub fn reset(&self) {
        for i in 0..6 {
            self.ns[i].store(0, Ordering::Relaxed);
            self.calls[i].store(0, Ordering::Relaxed);
        }
    }
}

/// One weight of the model and the ids of its prepared pieces.
struct Prepared {
    k: usize,
    n: usize,
    /// `(processor, columns) -> id` of every piece some plan gives a processor.
    pieces: Vec<(Pb, Range<usize>, WeightId)>,
}

impl Prepared {
    fn id(&self, who: Pb, cols: &Range<usize>) -> Result<WeightId, BackendError> {
        self.pieces
            .iter()
            .find(|(b, c, _)| *b == who && c == cols)
            .map(|p| p.2)
            .ok_or(BackendError::MissingBackend(who))
    }
}

/// Matmul time, count and predicted time per weight shape and phase: entry `2 * shape +
/// phase` (the plan table's shape order; prefill 0, decode 1).
#[derive(Debug, Default)]
struct ShapeTimes {
    ns: Vec<AtomicU64>,
    calls: Vec<AtomicU64>,
    /// Sum of the executed plans' predicted times, ns.
    predicted_ns: Vec<AtomicU64>,
}

impl ShapeTimes {
    fn new(shapes: usize) -> ShapeTimes {
        let zeros = || (0..2 * shapes).map(|_| AtomicU64::new(0)).collect();
        ShapeTimes {
            ns: zeros(),
            calls: zeros(),
            predicted_ns: zeros(),
        }
    }

    fn index(shape: usize, phase: Phase) -> usize {
        2 * shape
            + match phase {
                Phase::Prefill => 0,
                Phase::Decode => 1,
            }
    }

    fn reset(&self) {
        for v in [&self.ns, &self.calls, &self.predicted_ns] {
            for a in v {
                a.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Runs a model's matmuls by its plan tables ([`PhasePlans`]).
pub struct Executor {
    plans: PhasePlans,
    shape_times: ShapeTimes,
    /// Per planned shape (the table's order), the execution at `m = 1..=max_m`.
    execs: Execs,
    weights: Vec<Prepared>,
    cpu: CpuBackend,
    gpu: Option<GpuBackend>,
    npu: Option<NpuBackend>,
    gpu_helper: Option<Helper>,
    npu_helper: Option<Helper>,
    times: ExecTimes,
    /// Whole steps on the GPU (every matmul of the plan is the GPU's): the decoder.
    resident: Option<std::sync::Mutex<hetero_opencl_kernels::decoder::Decoder>>,
}

/// Maps one plan onto the processors at hand.
fn map_plan(p: &OpPlan, phase: Phase, k: usize, have_gpu: bool, npu: Option<&NpuBackend>) -> Exec {
    let (m, n) = (p.m as usize, p.n as usize);
    let partner = match p.split.b {
        Some(b) if b != Pb::Npu => b,
        _ => Pb::Cpu,
    };
    let mut approximated = false;
    let mut parts: Vec<Part> = Vec::with_capacity(MAX_PARTS);
    let push = |parts: &mut Vec<Part>, who: Pb, rows: Range<usize>, cols: Range<usize>| {
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        // Merge with a block of the same processor that continues it downwards.
        if let Some(q) = parts
            .iter_mut()
            .find(|q| q.who == who && q.cols == cols && q.rows.end == rows.start)
        {
            q.rows.end = rows.end;
            return;
        }
        parts.push(Part { who, rows, cols });
    };
    for piece in p.pieces().as_slice() {
        let rows = piece.rows.start as usize..piece.rows.end as usize;
        let cols = piece.cols.start as usize..piece.cols.end as usize;
        match piece.backend {
            Pb::Npu => match npu {
                Some(npu) if npu.accepts(cols.len(), k) => {
                    let covered = npu.options().cover(rows.len()).1;
                    if covered < rows.len() {
                        approximated = true;
                    }
                    push(
                        &mut parts,
                        Pb::Npu,
                        rows.start..rows.start + covered,
                        cols.clone(),
                    );
                    push(&mut parts, partner, rows.start + covered..rows.end, cols);
                }
                _ => {
                    approximated = true;
                    push(&mut parts, partner, rows, cols);
                }
            },
            Pb::Gpu if !have_gpu => {
                approximated = true;
                push(&mut parts, Pb::Cpu, rows, cols);
            }
            b => push(&mut parts, b, rows, cols),
        }
    }
    // A processor the plan names twice for one block shape stays as separate calls; order the
    // blocks so each processor's come together, rows ascending.
    parts.sort_by_key(|q| (q.who, q.rows.start, q.cols.start));
    if parts.is_empty() {
        parts.push(Part {
            who: Pb::Cpu,
            rows: 0..m,
            cols: 0..n,
        });
    }
    let kind = Kind::of(&parts);
    Exec {
        parts,
        approximated,
        kind,
        phase,
        predicted_us: p.predicted_us(),
    }
}

/// Every plan of `plans`, per shape (the tables' order), mapped at `m = 1..=max_m`.
type Execs = Vec<((usize, usize), Vec<Exec>)>;

fn map_plans(
    plans: &PhasePlans,
    have_gpu: bool,
    npu: Option<&NpuBackend>,
) -> Result<Execs, BackendError> {
    let mut execs = Vec::with_capacity(plans.shapes().len());
    for &(k, n) in plans.shapes() {
        let v = (1..=plans.max_m())
            .map(|m| {
                let p = plans.get(k, n, m).ok_or(BackendError::NoPlan {
                    k: k as usize,
                    n: n as usize,
                    m: m as usize,
                })?;
                Ok(map_plan(p, plans.phase_of(m), k as usize, have_gpu, npu))
            })
            .collect::<Result<Vec<Exec>, BackendError>>()?;
        execs.push(((k as usize, n as usize), v));
    }
    Ok(execs)
}

impl Executor {
    /// Prepares `weights` (the model's matmul weights, indexed as [`Executor::matmul`] names
    /// them) for the plans of `plans` (one [`hetero_partition::PlanTable`], or one per phase),
    /// on the processors in `backends`, and sizes every processor for `plans.max_m()` rows.
    /// Each piece of each weight is prepared once per processor that some plan gives it to.
    pub fn new(
        plans: impl Into<PhasePlans>,
        backends: Backends,
        weights: &[WeightView<'_>],
    ) -> Result<Executor, BackendError> {
        Self::with_source(plans, backends, weights, PrepareSource::default())
    }

    /// [`Executor::new`] with the CPU's pieces prepared all at once from `source`: mapped
    /// from the prepared-weights cache when it holds them (a warm start), else packed in
    /// parallel on the pool into the cache file or memory
    /// ([`CpuBackend::prepare_all`]; its report: [`Executor::prepare_report`]).
    pub fn with_source(
        plans: impl Into<PhasePlans>,
        backends: Backends,
        weights: &[WeightView<'_>],
        source: PrepareSource<'_>,
    ) -> Result<Executor, BackendError> {
        let plans = plans.into();
        let Backends {
            mut cpu,
            mut gpu,
            mut npu,
        } = backends;
        let max_m = plans.max_m() as usize;
        let execs = map_plans(&plans, gpu.is_some(), npu.as_ref())?;
        let mut prepared = Vec::with_capacity(weights.len());
        // The CPU's pieces are prepared together after the loop (in parallel, or mapped from
        // the cache): (weight, piece) of each, and its view.
        let mut cpu_pieces: Vec<(usize, usize)> = Vec::new();
        let mut cpu_views: Vec<WeightView<'_>> = Vec::new();
        let mut max_k = 1;
        for w in weights {
            max_k = max_k.max(w.k);
            let ex = &execs
                .iter()
                .find(|e| e.0 == (w.k, w.n))
                .ok_or(BackendError::NoPlan {
                    k: w.k,
                    n: w.n,
                    m: 1,
                })?
                .1;
            let mut pieces: Vec<(Pb, Range<usize>, WeightId)> = Vec::new();
            for part in ex.iter().flat_map(|e| e.parts.iter()) {
                if pieces
                    .iter()
                    .any(|(b, c, _)| *b == part.who && *c == part.cols)
                {
                    continue;
                }
                let view = w.rows(part.cols.clone())?;
                let id = match part.who {
                    Pb::Cpu => {
                        cpu_pieces.push((prepared.len(), pieces.len()));
                        cpu_views.push(view);
                        // Replaced by the id `prepare_all` gives it below.
                        WeightId::new(0)?
                    }
                    Pb::Gpu => gpu
                        .as_mut()
                        .ok_or(BackendError::MissingBackend(Pb::Gpu))?
                        .prepare(&view)?,
                    Pb::Npu => npu
                        .as_mut()
                        .ok_or(BackendError::MissingBackend(Pb::Npu))?
                        .prepare(&view)?,
                };
                pieces.push((part.who, part.cols.clone(), id));
            }
            prepared.push(Prepared {
                k: w.k,
                n: w.n,
                pieces,
            });
        }
        let ids = cpu.prepare_all(&cpu_views, source)?;
        for ((w, i), id) in cpu_pieces.into_iter().zip(ids) {
            prepared[w].pieces[i].2 = id;
        }
        cpu.reserve(max_m, max_k)?;
        if let Some(g) = &mut gpu {
            g.reserve(max_m, max_k)?;
        }
        if let Some(n) = &mut npu {
            n.reserve(max_m, max_k)?;
        }
        let spawn = |name: &str| Helper::spawn(name).map_err(|e| BackendError::Spawn(e.kind()));
        let gpu_helper = gpu.as_ref().map(|_| spawn("engine-min-gpu")).transpose()?;
        let npu_helper = npu.as_ref().map(|_| spawn("engine-min-npu")).transpose()?;
        Ok(Executor {
            resident: None,
            shape_times: ShapeTimes::new(execs.len()),
            plans,
            execs,
            weights: prepared,
            cpu,
            gpu,
            npu,
            gpu_helper,
            npu_helper,
            times: ExecTimes::default(),
        })
    }

    /// An executor whose plan gives every matmul to the GPU, running whole steps on `decoder`
    /// (weights, KV cache and activations resident on the device) instead of matmul by matmul;
    /// the CPU backend only lends its pool (host work stays empty). Refused unless every plan
    /// of `plans` is the GPU alone.
    pub fn resident(
        plans: impl Into<PhasePlans>,
        cpu: CpuBackend,
        decoder: hetero_opencl_kernels::decoder::Decoder,
    ) -> Result<Executor, BackendError> {
        let plans = plans.into();
        if plans.backends() != [Pb::Gpu] {
            return Err(BackendError::MissingBackend(Pb::Gpu));
        }
        let execs = map_plans(&plans, true, None)?;
        Ok(Executor {
            resident: Some(std::sync::Mutex::new(decoder)),
            shape_times: ShapeTimes::new(execs.len()),
            plans,
            execs,
            weights: Vec::new(),
            cpu,
            gpu: None,
            npu: None,
            gpu_helper: None,
            npu_helper: None,
            times: ExecTimes::default(),
        })
    }

    /// The processors back (with every weight they prepared), to build another executor on
    /// them without opening them again (the profiler times several plans on one device).
    /// The helper threads end; a resident decoder is dropped.
    pub fn into_backends(self) -> Backends {
        Backends {
            cpu: self.cpu,
            gpu: self.gpu,
            npu: self.npu,
        }
    }

    /// The resident decoder, when this executor runs whole steps on the GPU.
    pub fn resident_decoder(&mut self) -> Option<&mut hetero_opencl_kernels::decoder::Decoder> {
        self.resident
            .as_mut()
            .map(|d| d.get_mut().unwrap_or_else(|e| e.into_inner()))
    }

    /// The device memory the resident decoder allocated (weights, KV cache, scratch), when this
    /// executor runs whole steps on the GPU.
    pub fn resident_memory(&self) -> Option<hetero_opencl_kernels::decoder::MemoryPlan> {
        self.resident
            .as_ref()
            .map(|d| *d.lock().unwrap_or_else(|e| e.into_inner()).plan())
    }

    /// Where building the resident decoder's time went (programs, weights re-laid and
    /// written), when this executor runs whole steps on the GPU.
    pub fn resident_build_times(&self) -> Option<hetero_opencl_kernels::decoder::BuildTimes> {
        self.resident
            .as_ref()
            .map(|d| *d.lock().unwrap_or_else(|e| e.into_inner()).build_times())
    }

    /// Whether this executor runs whole steps on the GPU.
    pub fn is_resident(&self) -> bool {
        self.resident.is_some()
    }

    /// The plan tables.
    pub fn plans(&self) -> &PhasePlans {
        &self.plans
    }

    /// Largest row count of one matmul.
    pub fn max_m(&self) -> usize {
        self.plans.max_m() as usize
    }

    /// The CPU backend (its pool runs the engine's host ops).
    pub fn cpu(&self) -> &CpuBackend {
        &self.cpu
    }

    /// What preparing the CPU's weights did (cache mapped or written, notes, times).
    pub fn prepare_report(&self) -> &crate::backend::PrepareReport {
        self.cpu.prepare_report()
    }

    /// The reduction length of the model's weight `w`.
    pub fn weight_k(&self, w: usize) -> Result<usize, BackendError> {
        self.weights
            .get(w)
            .map(|p| p.k)
            .ok_or(BackendError::Shape("weight index"))
    }

    /// The NPU backend, if open.
    pub fn npu(&self) -> Option<&NpuBackend> {
        self.npu.as_ref()
    }

    /// Matmul time per kind of execution.
    pub fn times(&self) -> &ExecTimes {
        &self.times
    }

    /// Sets the matmul times (per kind, per shape, and the predictions) to zero.
    pub fn reset_times(&self) {
        self.times.reset();
        self.shape_times.reset();
    }

    /// Names of the processors open, e.g. `cpu, gpu (NVIDIA H200)`.
    pub fn backend_names(&self) -> String {
        let mut v = vec![self.cpu.name().to_owned()];
        v.extend(self.gpu.as_ref().map(|g| g.name().to_owned()));
        if let Some(d) = &self.resident {
            let d = d.lock().unwrap_or_else(|e| e.into_inner());
            v.push(format!(
                "gpu resident ({}, {} launches a decode token)",
                d.device().info().name.trim(),
                d.launches_per_token(hetero_opencl_kernels::decoder::Readout::Logits)
            ));
        }
        v.extend(self.npu.as_ref().map(|n| n.name().to_owned()));
        v.join(", ")
    }

    /// How a matmul of weight shape `(k, n)` on `m` rows runs.
    pub fn exec(&self, k: usize, n: usize, m: usize) -> Result<&Exec, BackendError> {
        self.exec_at(k, n, m).map(|x| x.1)
    }

    /// [`Executor::exec`] and the shape's index.
    fn exec_at(&self, k: usize, n: usize, m: usize) -> Result<(usize, &Exec), BackendError> {
        self.execs
            .iter()
            .enumerate()
            .find(|e| e.1 .0 == (k, n))
            .and_then(|(i, e)| Some((i, e.1.get(m.checked_sub(1)?)?)))
            .ok_or(BackendError::NoPlan { k, n, m })
    }

    /// `((k, n), time, calls)` of every weight shape that ran (both phases).
    pub fn shape_times(&self) -> Vec<((usize, usize), std::time::Duration, u64)> {
        let st = &self.shape_times;
        let load = |v: &[AtomicU64], i: usize| {
            Phase::ALL
                .iter()
                .map(|&ph| v[ShapeTimes::index(i, ph)].load(Ordering::Relaxed))
                .sum::<u64>()
        };
        self.execs
            .iter()
            .enumerate()
            .map(|(i, e)| {
                (
                    e.0,
                    std::time::Duration::from_nanos(load(&st.ns, i)),
                    load(&st.calls, i),
                )
            })
            .filter(|x| x.2 > 0)
            .collect()
    }

    /// Predicted against measured time of every op class (weight shape) and phase that ran
    /// since the last [`Executor::reset_times`]: the sums of the executed plans' predictions
    /// and of the times [`Executor::matmul`] measured around each call (a split's join
    /// included). The phase is the table's that planned the call ([`PhasePlans`]).
    pub fn predictions(&self) -> Vec<Prediction> {
        let st = &self.shape_times;
        let mut out = Vec::new();
        for (i, e) in self.execs.iter().enumerate() {
            for ph in Phase::ALL {
                let j = ShapeTimes::index(i, ph);
                let calls = st.calls[j].load(Ordering::Relaxed);
                if calls == 0 {
                    continue;
                }
                out.push(Prediction {
                    k: e.0 .0 as u32,
                    n: e.0 .1 as u32,
                    phase: ph,
                    calls,
                    predicted_us: st.predicted_ns[j].load(Ordering::Relaxed) as f64 / 1e3,
                    measured_us: st.ns[j].load(Ordering::Relaxed) as f64 / 1e3,
                });
            }
        }
        out
    }

    fn backend(&self, who: Pb) -> Result<&dyn Backend, BackendError> {
        Ok(match who {
            Pb::Cpu => &self.cpu,
            Pb::Gpu => self.gpu.as_ref().ok_or(BackendError::MissingBackend(who))?,
            Pb::Npu => self.npu.as_ref().ok_or(BackendError::MissingBackend(who))?,
        })
    }

    /// `out[m x n] = x[m x k] · W_wᵀ` for the model's weight `w`, into the output slot `out`
    /// of `uma` (row-major, `n` floats a row) as the plan for `(k, n, m)` says.
    pub fn matmul(
        &self,
        w: usize,
        x: &[f32],
        m: usize,
        uma: &UmaPool,
        out: &mut Handle,
    ) -> Result<(), BackendError> {
        if self.resident.is_some() {
            return Err(BackendError::Resident);
        }
        let p = self
            .weights
            .get(w)
            .ok_or(BackendError::Shape("weight index"))?;
        let (k, n) = (p.k, p.n);
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        if m == 0 {
            return Ok(());
        }
        let (si, ex) = self.exec_at(k, n, m)?;
        let t0 = Instant::now();
        let r = self.run(p, ex, x, m, uma, out);
        let ns = t0.elapsed().as_nanos() as u64;
        let i = ex.kind.index();
        self.times.ns[i].fetch_add(ns, Ordering::Relaxed);
        self.times.calls[i].fetch_add(1, Ordering::Relaxed);
        let j = ShapeTimes::index(si, ex.phase);
        let st = &self.shape_times;
        st.ns[j].fetch_add(ns, Ordering::Relaxed);
        st.calls[j].fetch_add(1, Ordering::Relaxed);
        st.predicted_ns[j].fetch_add((ex.predicted_us * 1e3) as u64, Ordering::Relaxed);
        r
    }

    /// `out_i[m x n_i] = x[m x k] · W_{w_i}ᵀ` for up to [`MAX_GROUP`] of the model's weights
    /// that share the input `x` (a layer's Q, K and V; gate and up), each into its own output
    /// slot. When the plan gives every one of them to the CPU alone at `m` rows, the CPU runs
    /// them as one pool job ([`CpuBackend::matmul_group`]: one dispatch, activations quantized
    /// once); otherwise each runs as [`Executor::matmul`] would. The outputs are bit-identical
    /// either way. The group's time is shared among its shapes in proportion to their columns.
    pub fn matmul_group(
        &self,
        group: &mut [(usize, &mut Handle)],
        x: &[f32],
        m: usize,
        uma: &UmaPool,
    ) -> Result<(), BackendError> {
        if self.resident.is_some() {
            return Err(BackendError::Resident);
        }
        if group.len() > MAX_GROUP {
            return Err(BackendError::Shape(
                "more matmuls in a group than MAX_GROUP",
            ));
        }
        // Per member, when it runs on the CPU alone: its shape's index, its exec (the phase
        // and prediction its time is recorded under), its CPU weight id and its columns.
        let mut cpu: [Option<(usize, &Exec, WeightId, usize)>; MAX_GROUP] = [None; MAX_GROUP];
        for (slot, (w, _)) in cpu.iter_mut().zip(group.iter()) {
            let p = self
                .weights
                .get(*w)
                .ok_or(BackendError::Shape("weight index"))?;
            if x.len() != m * p.k {
                return Err(BackendError::Shape("x"));
            }
            if m == 0 {
                continue;
            }
            let (si, ex) = self.exec_at(p.k, p.n, m)?;
            if let [only] = ex.parts.as_slice() {
                if only.who == Pb::Cpu && only.cols == (0..p.n) {
                    *slot = Some((si, ex, p.id(Pb::Cpu, &only.cols)?, p.n));
                }
            }
        }
        let n = group.len();
        if m == 0 || n < 2 || cpu[..n].iter().any(Option::is_none) {
            for (w, out) in group.iter_mut() {
                self.matmul(*w, x, m, uma, out)?;
            }
            return Ok(());
        }
        let mut outs = group.iter_mut();
        let mut calls: [Option<(WeightId, &mut [f32])>; MAX_GROUP] = Default::default();
        for (c, member) in calls.iter_mut().zip(&cpu[..n]) {
            let (Some((_, _, id, cols)), Some((_, h))) = (member, outs.next()) else {
                continue;
            };
            let o = uma
                .f32s_mut(h)?
                .get_mut(..m * cols)
                .ok_or(BackendError::Shape("output slot too small"))?;
            *c = Some((*id, o));
        }
        let t0 = Instant::now();
        let r = match calls {
            [Some(a), Some(b), None] => self.cpu.matmul_group(&mut [a, b], x, m),
            [Some(a), Some(b), Some(c)] => self.cpu.matmul_group(&mut [a, b, c], x, m),
            _ => Err(BackendError::Shape("group")),
        };
        let ns = t0.elapsed().as_nanos() as u64;
        let total_cols: usize = cpu.iter().flatten().map(|c| c.3).sum();
        let i = Kind::Cpu.index();
        self.times.ns[i].fetch_add(ns, Ordering::Relaxed);
        self.times.calls[i].fetch_add(n as u64, Ordering::Relaxed);
        // Each member is recorded as `matmul` records it: under its shape *and phase*, with
        // its plan's prediction (without both, a grouped shape's time landed in another
        // shape's or phase's entry with no prediction: "predicted 0.0 us", -100%).
        let st = &self.shape_times;
        for (si, ex, _, cols) in cpu.iter().flatten() {
            let share = ns * *cols as u64 / total_cols.max(1) as u64;
            let j = ShapeTimes::index(*si, ex.phase);
            st.ns[j].fetch_add(share, Ordering::Relaxed);
            st.calls[j].fetch_add(1, Ordering::Relaxed);
            st.predicted_ns[j].fetch_add((ex.predicted_us * 1e3) as u64, Ordering::Relaxed);
        }
        r
    }

    fn run(
        &self,
        p: &Prepared,
        ex: &Exec,
        x: &[f32],
        m: usize,
        uma: &UmaPool,
        out: &mut Handle,
    ) -> Result<(), BackendError> {
        let (k, n) = (p.k, p.n);
        if let [only] = ex.parts.as_slice() {
            // One processor for the whole output: no views, no helper.
            let id = p.id(only.who, &only.cols)?;
            let o = uma
                .f32s_mut(out)?
                .get_mut(..m * n)
                .ok_or(BackendError::Shape("output slot too small"))?;
            return self.backend(only.who)?.matmul(id, x, m, o, n);
        }
        let blocks: [Block; MAX_PARTS] = std::array::from_fn(|i| match ex.parts.get(i) {
            Some(q) => Block {
                rows: q.rows.clone(),
                cols: q.cols.clone(),
            },
            None => Block::default(),
        });
        let (views, flag) = uma.split_blocks_flag(out, MatrixLayout::dense(m, n, 4), blocks)?;
        // The first processor's blocks run here, the other's on its helper thread.
        let here = ex.parts[0].who;
        let there = ex.parts.iter().map(|q| q.who).find(|&b| b != here);
        let mut mine: [Option<(Part, ColumnsMut<'_>)>; MAX_PARTS] = Default::default();
        let mut theirs: [Option<(Part, ColumnsMut<'_>)>; MAX_PARTS] = Default::default();
        for (i, v) in views.into_iter().enumerate() {
            if let Some(q) = ex.parts.get(i) {
                let dst = if q.who == here {
                    &mut mine
                } else {
                    &mut theirs
                };
                dst[i] = Some((q.clone(), v));
            }
        }
        let run_parts = |parts: &mut [Option<(Part, ColumnsMut<'_>)>]| -> Result<(), BackendError> {
            for (q, v) in parts.iter_mut().flatten() {
                let be = self.backend(q.who)?;
                let id = p.id(q.who, &q.cols)?;
                be.matmul_view(id, &x[q.rows.start * k..q.rows.end * k], q.rows.len(), v)?;
            }
            Ok(())
        };
        let Some(there) = there else {
            // One processor in several blocks (an NPU with its own remainder never happens,
            // but a plan may): all here.
            run_parts(&mut mine)?;
            return run_parts(&mut theirs);
        };
        let helper = match there {
            Pb::Gpu => self.gpu_helper.as_ref(),
            Pb::Npu => self.npu_helper.as_ref(),
            Pb::Cpu => None,
        };
        let epoch = hetero_sync::next_epoch(flag.epoch());
        match helper {
            Some(h) => {
                let (r_there, r_here) = h.join(
                    flag,
                    epoch,
                    || run_parts(&mut theirs),
                    || run_parts(&mut mine),
                );
                r_here?;
                r_there??;
                Ok(())
            }
            None => {
                // The CPU is the offloaded side: run it here too, after the other's blocks
                // (the other processor is then driven from this thread).
                run_parts(&mut mine)?;
                run_parts(&mut theirs)
            }
        }
    }

    /// One line per `(name, k, n)` shape at `m` rows: the planner's strategy and split, what
    /// runs where, and the predicted time.
    pub fn describe(&self, shapes: &[(&str, usize, usize)], m: usize) -> Vec<String> {
        let m = m.clamp(1, self.max_m());
        shapes
            .iter()
            .map(|&(name, k, n)| {
                let plan = self.plans.get(k as u32, n as u32, m as u32);
                match (plan, self.exec(k, n, m)) {
                    (Some(plan), Ok(ex)) => {
                        let parts: Vec<String> = ex
                            .parts
                            .iter()
                            .map(|q| {
                                format!(
                                    "{} rows {}..{} cols {}..{}",
                                    q.who, q.rows.start, q.rows.end, q.cols.start, q.cols.end
                                )
                            })
                            .collect();
                        format!(
                            "{name:<22} {:?} -> {}{}; predicted {:.1} us",
                            plan.strategy,
                            parts.join(" | "),
                            if ex.approximated {
                                " (approximated)"
                            } else {
                                ""
                            },
                            plan.cost.total_us
                        )
                    }
                    _ => format!("{name:<22} not planned"),
                }
            })
            .collect()
    }
}
