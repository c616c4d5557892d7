//! Executing the planner's per-op plan (`run --plan auto`): for every matmul shape of the model
//! and every row count `m` up to the batch size, `hetero_partition::plan_op` picks a plan at
//! start-up; its pieces (`OpPlan::pieces()`) are mapped onto the backends this engine has, and
//! each matmul call runs the mapped plan for its `(k, n, m)`.
//!
//! Mapping ([`Exec`]):
//! - one piece on the CPU or the GPU → that backend alone;
//! - a CPU–GPU column split (weight-centric) → [`crate::split::SplitBackend`] with the planned
//!   number of CPU columns (one output, no concat copy, released by the barrier; if the plan
//!   puts the GPU on the left, the CPU still takes the left columns — the same amounts);
//! - NPU row plans (single, NPU pipe, activation-centric, multi-tensor) →
//!   [`crate::npu::NpuBackend`]: chunks of its standard lengths on the NPU (largest first),
//!   the remaining rows on its CPU partner, concurrently; padding and online preparation run
//!   the same way and are marked *approximated*;
//! - NPU column blocks (an NPU weight-centric split, a hybrid L-shape) → the plan's partner
//!   (CPU or GPU) runs the whole op, marked *approximated*: the NPU backend builds graphs of
//!   whole weights only.
//!
//! Non-matmul ops (norms, RoPE, attention, SwiGLU) stay on the CPU pool: the planner's layer
//! placement of them (GPU when there is one) is printed, not executed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hetero_partition::{plan_op, Backend as Pb, CheckedProfile, OpPlan, Strategy};

use crate::act::UmaActs;
use crate::backend::{Backend, BackendError, CpuBackend, WeightView};
use crate::gpu::GpuBackend;
use crate::npu::NpuBackend;
use crate::split::SplitBackend;
use hetero_sme::ThreadPool as Pool;

/// How one planned matmul is executed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exec {
    /// All on the CPU.
    Cpu,
    /// All on the GPU.
    Gpu,
    /// CPU columns `0..cpu_cols`, GPU the rest.
    CpuGpu {
        /// Columns the CPU computes.
        cpu_cols: usize,
    },
    /// NPU chunks of standard rows, the rest on the NPU backend's CPU partner.
    Npu,
}

impl Exec {
    fn index(self) -> usize {
        match self {
            Exec::Cpu => 0,
            Exec::Gpu => 1,
            Exec::CpuGpu { .. } => 2,
            Exec::Npu => 3,
        }
    }
}

/// Names of the [`Exec`] kinds, in [`PlanBackend::time_ns`] order.
pub const EXEC_NAMES: [&str; 4] = ["cpu", "gpu", "cpu+gpu", "npu+cpu"];

/// The plan of one `(k, n, m)` and how it runs here.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// The planner's plan.
    pub plan: OpPlan,
    /// What runs.
    pub exec: Exec,
    /// The execution differs from the plan (see the module docs).
    pub approximated: bool,
}

/// Maps one plan onto the available backends.
pub fn map_plan(p: &OpPlan, have_gpu: bool, have_npu: bool) -> (Exec, bool) {
    let s = &p.split;
    let pieces = p.pieces();
    let uses = |b: Pb| pieces.as_slice().iter().any(|x| x.backend == b);
    let n = p.n as usize;
    if uses(Pb::Npu) {
        // An NPU column block (weight-centric or hybrid L-shape) needs graphs of part of a
        // weight, which the NPU backend does not build: the partner runs the whole op.
        if matches!(p.strategy, Strategy::WeightCentric | Strategy::Hybrid) {
            return match s.b {
                Some(Pb::Gpu) if have_gpu => (Exec::Gpu, true),
                _ => (Exec::Cpu, true),
            };
        }
        if have_npu {
            // Exact when the backend runs what the plan says: whole standard chunks (a pipe
            // whose last chunk is not padded), the remainder rows on the CPU.
            let whole_chunks = s
                .npu
                .is_some_and(|e| e.graph_m > 0 && p.m.is_multiple_of(e.graph_m) && !e.online);
            let exact = match p.strategy {
                Strategy::Single
                | Strategy::ActivationCentric
                | Strategy::MultiTensorActivation => true,
                Strategy::NpuPipe => whole_chunks,
                _ => false,
            } && s.b.is_none_or(|b| b == Pb::Cpu);
            return (Exec::Npu, !exact);
        }
        return (Exec::Cpu, true);
    }
    match (s.a, s.b) {
        (Pb::Gpu, None) if have_gpu => (Exec::Gpu, false),
        (Pb::Cpu, None) => (Exec::Cpu, false),
        (Pb::Cpu, Some(Pb::Gpu)) | (Pb::Gpu, Some(Pb::Cpu)) if have_gpu => {
            let a_cols = s.cols as usize;
            let by_cols = s.rows == p.m;
            let cpu_cols = if s.a == Pb::Cpu {
                a_cols
            } else {
                n - a_cols.min(n)
            };
            (Exec::CpuGpu { cpu_cols }, !by_cols)
        }
        _ => (Exec::Cpu, true),
    }
}

/// The plans of every planned shape at rows `1..=max_m`.
#[derive(Clone, Debug, Default)]
pub struct PlanTable {
    map: HashMap<(usize, usize), Vec<Entry>>,
    max_m: usize,
}

impl PlanTable {
    /// The plan entry for a `(k, n)` shape at `m` rows.
    pub fn entry(&self, k: usize, n: usize, m: usize) -> Option<&Entry> {
        self.map.get(&(k, n))?.get(m.checked_sub(1)?)
    }

    /// One line per shape at `m` rows: the planner's strategy and split, and what runs.
    pub fn describe(&self, shapes: &[(&str, usize, usize)], m: usize) -> Vec<String> {
        shapes
            .iter()
            .map(|&(name, k, n)| match self.entry(k, n, m.min(self.max_m)) {
                Some(e) => format!(
                    "{name:<22} {:?} -> runs {}{}; predicted {:.1} us",
                    e.plan.strategy,
                    match e.exec {
                        Exec::CpuGpu { cpu_cols } => {
                            format!("cpu cols 0..{cpu_cols} + gpu cols {cpu_cols}..{n}")
                        }
                        Exec::Npu => "npu chunks + cpu remainder rows".into(),
                        other => format!("{other:?}").to_lowercase(),
                    },
                    if e.approximated {
                        " (approximated)"
                    } else {
                        ""
                    },
                    e.plan.cost.total_us
                ),
                None => format!("{name:<22} not planned"),
            })
            .collect()
    }
}

/// Matmul time per executed kind ([`EXEC_NAMES`] order), in ns.
#[derive(Debug, Default)]
pub struct ExecTimes(pub [AtomicU64; 4]);

impl ExecTimes {
    /// A snapshot, in ns.
    pub fn get(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// The planner's whole-model plan (`hetero_partition::plan_model`, `Policy::Auto`) for `c`
/// at `m` rows, summarized: where it places the non-matmul ops (this engine runs them on
/// the CPU pool regardless) and its predicted matmul time for the model.
pub fn model_plan_summary(
    profile: &CheckedProfile,
    c: &crate::model::Config,
    m: usize,
    decode: bool,
) -> String {
    use hetero_partition::{plan_model, ModelDesc, Phase, Placement, Policy};
    let desc = ModelDesc::llama(
        c.d_model as u32,
        c.d_ff as u32,
        c.n_head as u32,
        c.n_kv_head as u32,
        c.head_dim as u32,
        c.n_layer as u32,
        c.vocab as u32,
    );
    let phase = if decode {
        Phase::Decode
    } else {
        Phase::Prefill
    };
    let plan = match desc {
        Ok(d) => plan_model(profile, &d, m.max(1) as u32, phase, Policy::Auto),
        Err(e) => return format!("no model plan: {e:?}"),
    };
    match plan {
        Ok(p) => {
            let mut others: Vec<String> = Vec::new();
            for (op, pl) in desc.iter().flat_map(|d| d.ops()).zip(p.placements()) {
                let what = match pl {
                    Placement::MatMul(_) => continue,
                    Placement::On(b) => format!("{b:?}").to_lowercase(),
                    Placement::HeadSplit {
                        cpu_heads,
                        gpu_heads,
                    } => format!("heads cpu {cpu_heads} / gpu {gpu_heads}"),
                };
                let name = format!("{op:?}");
                let name = name.split([' ', '{']).next().unwrap_or("op").to_owned();
                others.push(format!("{name} {what}"));
            }
            format!(
                "planner's layer placement of non-matmul ops: {} (run on the CPU pool here); \
                 predicted model matmul time {:.2} ms",
                others.join(", "),
                p.predicted_us / 1e3
            )
        }
        Err(e) => format!("no model plan: {e:?}"),
    }
}

/// A backend that runs the planner's plan for each matmul.
pub struct PlanBackend {
    split: Option<SplitBackend>,
    cpu: Option<CpuBackend>,
    npu: Option<NpuBackend>,
    table: PlanTable,
    profile: CheckedProfile,
    times: Arc<ExecTimes>,
    name: String,
}

impl PlanBackend {
    /// Plans on `profile` for rows `1..=max_m`; `gpu` and `npu` are used when given (and the
    /// plan wants them), the CPU always (`cpu` runs CPU-only matmuls; with a GPU the split
    /// backend's CPU side does). `shapes` (`(k, n)`) are planned now; others at `prepare`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        profile: CheckedProfile,
        max_m: usize,
        pool: Arc<Pool>,
        cpu: CpuBackend,
        gpu: Option<GpuBackend>,
        npu: Option<NpuBackend>,
        acts: Option<Arc<UmaActs>>,
        shapes: &[(usize, usize)],
    ) -> Result<Self, BackendError> {
        let (split, cpu) = match gpu {
            Some(g) => (
                Some(SplitBackend::with_acts(cpu, g, 1.0, acts, Some(pool))?),
                None,
            ),
            None => (None, Some(cpu)),
        };
        let mut me = Self {
            split,
            cpu,
            npu,
            table: PlanTable {
                map: HashMap::new(),
                max_m: max_m.max(1),
            },
            profile,
            times: Arc::default(),
            name: "auto".into(),
        };
        for &(k, n) in shapes {
            me.plan_shape(k, n)?;
        }
        Ok(me)
    }

    fn cpu(&self) -> Result<&CpuBackend, BackendError> {
        match (&self.split, &self.cpu) {
            (Some(s), _) => Ok(s.cpu()),
            (None, Some(c)) => Ok(c),
            _ => Err(BackendError::Kernel("no CPU backend".into())),
        }
    }

    /// Plans every row count for `(k, n)` (once per shape).
    fn plan_shape(&mut self, k: usize, n: usize) -> Result<(), BackendError> {
        if self.table.map.contains_key(&(k, n)) {
            return Ok(());
        }
        let (have_gpu, have_npu) = (self.split.is_some(), self.npu.is_some());
        let mut v = Vec::with_capacity(self.table.max_m);
        for m in 1..=self.table.max_m {
            let plan = plan_op(&self.profile, k as u32, n as u32, m as u32).map_err(|e| {
                BackendError::Kernel(format!("planner: no plan for k={k} n={n} m={m}: {e:?}"))
            })?;
            let (exec, approximated) = map_plan(&plan, have_gpu, have_npu);
            v.push(Entry {
                plan,
                exec,
                approximated,
            });
        }
        self.table.map.insert((k, n), v);
        Ok(())
    }

    /// The checked profile the plans come from.
    pub fn profile(&self) -> &CheckedProfile {
        &self.profile
    }

    /// The plans (a copy, e.g. to print after the backend moved into an engine).
    pub fn table(&self) -> PlanTable {
        self.table.clone()
    }

    /// Matmul time per executed kind, shared (readable after the backend moved).
    pub fn times(&self) -> Arc<ExecTimes> {
        Arc::clone(&self.times)
    }
}

impl Backend for PlanBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        self.plan_shape(w.k, w.n)?;
        let mut execs: Vec<Exec> = self.table.map[&(w.k, w.n)].iter().map(|e| e.exec).collect();
        execs.sort_by_key(|e| match e {
            Exec::CpuGpu { cpu_cols } => (2, *cpu_cols),
            o => (o.index(), 0),
        });
        execs.dedup();
        for e in execs {
            match e {
                Exec::Cpu => match (&mut self.split, &mut self.cpu) {
                    (Some(s), _) => s.prepare_cols(w, w.n)?,
                    (None, Some(c)) => c.prepare(w)?,
                    _ => {}
                },
                Exec::Gpu => {
                    if let Some(s) = &mut self.split {
                        s.prepare_cols(w, 0)?;
                    }
                }
                Exec::CpuGpu { cpu_cols } => {
                    if let Some(s) = &mut self.split {
                        s.prepare_cols(w, cpu_cols)?;
                    }
                }
                Exec::Npu => {
                    if let Some(npu) = &mut self.npu {
                        npu.prepare(w)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        if let Some(s) = &mut self.split {
            s.reserve(max_tokens, max_k);
        }
        if let Some(c) = &mut self.cpu {
            c.reserve(max_tokens, max_k);
        }
        if let Some(n) = &mut self.npu {
            n.reserve(max_tokens, max_k);
        }
    }

    fn matmul(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        let exec = self
            .table
            .entry(w.k, w.n, m)
            .map(|e| e.exec)
            // Beyond the planned rows (not reached: the engine chunks by max_batch): CPU.
            .unwrap_or(Exec::Cpu);
        let t0 = Instant::now();
        let r = match (exec, &self.split, &self.npu) {
            (Exec::Gpu, Some(s), _) => s.matmul_cols(w, x, m, out, 0),
            (Exec::CpuGpu { cpu_cols }, Some(s), _) => s.matmul_cols(w, x, m, out, cpu_cols),
            (Exec::Npu, _, Some(npu)) => npu.matmul(w, x, m, out),
            _ => self.cpu()?.matmul(w, x, m, out),
        };
        self.times.0[exec.index()].fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }
}
