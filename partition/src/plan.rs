//! Latency models, the plan of one matmul, its cost, and the solver.

use core::fmt;
use core::ops::Range;

use crate::checked::CheckedProfile;
use crate::model::Policy;
use crate::opmodel::{OpModel, ShapeModel};
use crate::profile::{Backend, Order, Phase};
use crate::solver::{Best, Families};

/// Columns per CPU tile, and the granularity of every column (weight) split.
pub const COL_TILE: u32 = 64;
/// Bytes per activation / output element copied to or from a backend with `copy_gbps` (FP16).
pub const ELEM_BYTES: f64 = 2.0;

/// Why a plan could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// `k`, `n` or `m` is zero.
    ZeroShape,
    /// The plan needs a backend the profile does not have.
    MissingBackend(Backend),
    /// The NPU has no latency point in this operand order.
    NoCurve(Backend, Order),
    /// A [`Split`] that is not a valid two-way partition (see [`Split`]).
    InvalidSplit,
    /// A ratio that is NaN or outside `[0, 1]`.
    BadRatio,
    /// No plan of the requested kind exists for this shape (e.g. an activation-centric split
    /// when `m` is not larger than the smallest standard shape).
    Infeasible,
    /// The backend is in the profile but has no data path for this phase.
    NoPath(Backend, Phase),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::ZeroShape => f.write_str("k, n and m must be > 0"),
            PlanError::MissingBackend(b) => write!(f, "profile has no {b} backend"),
            PlanError::NoCurve(b, o) => write!(f, "{b} has no latency points in order {o:?}"),
            PlanError::InvalidSplit => f.write_str("split is not a valid two-way partition"),
            PlanError::BadRatio => f.write_str("ratio must be within [0, 1]"),
            PlanError::Infeasible => f.write_str("no plan of that kind fits this shape"),
            PlanError::NoPath(b, p) => write!(f, "{b} has no data path for {p}"),
        }
    }
}

impl std::error::Error for PlanError {}

/// How the NPU runs its rows: `chunks` runs of a static graph of `graph_m` rows, the last one
/// padded; `chunks * graph_m >= rows`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NpuExec {
    /// Rows of the graph run (a standard shape, or a new shape when `online`).
    pub graph_m: u32,
    /// How many times it runs, in sequence.
    pub chunks: u32,
    /// The graph is prepared at run time for this shape (pays `graph_prepare_us`).
    pub online: bool,
    /// Operand order.
    pub order: Order,
}

/// A two-way partition of the output `[m, n]` of one matmul.
///
/// Backend `a` computes rows `0..rows` x columns `0..cols`. Backend `b`, when present, computes
/// every other element: rows `0..rows` x columns `cols..n` (a column / weight split) and rows
/// `rows..m` x all columns (a row / activation split); both at once is the hybrid. Without `b`,
/// `rows == m` and `cols == n`. When the NPU takes part it is always `a`, and `npu` says how it
/// runs; otherwise `npu` is `None`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Split {
    /// First backend.
    pub a: Backend,
    /// Second backend, if any.
    pub b: Option<Backend>,
    /// Rows of `a`'s block.
    pub rows: u32,
    /// Columns of `a`'s block.
    pub cols: u32,
    /// How the NPU runs its block, when `a` is the NPU.
    pub npu: Option<NpuExec>,
}

/// Predicted cost of a plan, µs. One backend: `total = a + sync`. Two backends:
/// `total = max(max(a, b) + (1 − overlap)·min(a, b), bus) + sync + split`, where `a` and `b`
/// include each side's copies (a copy runs on that backend's own timeline, before and after its
/// compute), `overlap` is the pair's (1 for independent processors, 0 for two that share cores)
/// and `bus` is the time the shared memory bus needs for both sides' bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Backend `a`'s time: compute, graph preparation, copies.
    pub a_us: f64,
    /// Backend `b`'s time (0 without `b`).
    pub b_us: f64,
    /// The copy part of `a_us + b_us` (T_copy).
    pub copy_us: f64,
    /// Sum of the used backends' `sync_us` (T_sync).
    pub sync_us: f64,
    /// The pair's fixed cost of a split (0 for one backend).
    pub split_us: f64,
    /// Time the shared bus needs for both sides' bytes at the pair's concurrent bandwidth (0
    /// for one backend, or without a bus term).
    pub bus_us: f64,
    /// The predicted time (see [`Cost`]).
    pub total_us: f64,
}

/// The strategy a plan uses, derived from its [`Split`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// One backend on the op's own shape.
    Single,
    /// NPU alone, rows padded up to the next standard shape.
    Padding,
    /// NPU alone, a graph prepared at run time for the op's row count.
    OnlinePrepare,
    /// NPU alone, several standard chunks in sequence (last one padded).
    NpuPipe,
    /// One standard chunk of rows on the NPU, the remaining rows on the other backend.
    ActivationCentric,
    /// Several standard chunks on the NPU, the small remainder on the other backend.
    MultiTensorActivation,
    /// Columns (weight) split between two backends; all rows on both.
    WeightCentric,
    /// A standard chunk of rows on the NPU for part of the columns; the other backend takes the
    /// rest of those rows' columns and all remaining rows.
    Hybrid,
}

/// One rectangular block of the output and the backend that computes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Output rows.
    pub rows: Range<u32>,
    /// Output columns.
    pub cols: Range<u32>,
    /// Who computes it.
    pub backend: Backend,
}

/// The (at most three) pieces of a plan; see [`OpPlan::pieces`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pieces {
    items: [Piece; 3],
    len: usize,
}

impl Pieces {
    /// The pieces as a slice.
    pub fn as_slice(&self) -> &[Piece] {
        &self.items[..self.len]
    }
}

impl<'a> IntoIterator for &'a Pieces {
    type Item = &'a Piece;
    type IntoIter = core::slice::Iter<'a, Piece>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

/// The plan of one matmul (weight `[k, n]`, `m` activation rows): a small `Copy` value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpPlan {
    /// Reduction dimension.
    pub k: u32,
    /// Output columns.
    pub n: u32,
    /// Activation rows.
    pub m: u32,
    /// The partition.
    pub split: Split,
    /// Its strategy.
    pub strategy: Strategy,
    /// Its predicted cost.
    pub cost: Cost,
    /// The farthest the plan's latencies were extrapolated beyond measured points, when more
    /// than [`FAR`] times (a warning for whoever trusts the prediction).
    pub extrapolation: Option<Extrapolation>,
}

/// How far beyond measured points (in rows, or in `k·n` for an unmeasured shape) a latency
/// may be read before a plan carries an [`Extrapolation`] warning.
pub const FAR: f64 = 4.0;

/// A plan leans on a latency read far outside what was measured: `rows` rows of a curve
/// measured nearest at `nearest_m` rows, and/or shape `k x n` scaled from the nearest measured
/// shape `nearest_k x nearest_n`. Row tiles are part of the model, not extrapolation: the
/// rows are those the curve is read at (a CPU block of 1 row read at a measured 16-row point
/// is not extrapolated).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Extrapolation {
    /// The backend whose latency is extrapolated.
    pub backend: Backend,
    /// Rows the curve is read at.
    pub rows: u32,
    /// The nearest measured row count of that curve.
    pub nearest_m: u32,
    /// Reduction dimension of the op.
    pub k: u32,
    /// Output columns of the op.
    pub n: u32,
    /// Reduction dimension of the measured shape used.
    pub nearest_k: u32,
    /// Output columns of the measured shape used.
    pub nearest_n: u32,
    /// The larger of the row ratio and the `k·n` ratio (each taken >= 1); > [`FAR`].
    pub factor: f64,
}

impl fmt::Display for Extrapolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} latency for k={} n={} read at {} rows from a curve measured at k={} n={}, \
             nearest m={} ({:.1}x beyond)",
            self.backend,
            self.k,
            self.n,
            self.rows,
            self.nearest_k,
            self.nearest_n,
            self.nearest_m,
            self.factor
        )
    }
}

impl OpPlan {
    /// Predicted time, µs.
    pub fn predicted_us(&self) -> f64 {
        self.cost.total_us
    }

    /// The backends used: `a`, then `b` if any.
    pub fn backends(&self) -> (Backend, Option<Backend>) {
        (self.split.a, self.split.b)
    }

    /// The blocks of the output and who computes each: they tile `[0, m) x [0, n)` exactly once.
    pub fn pieces(&self) -> Pieces {
        pieces_of(&self.split, self.m, self.n)
    }
}

fn pieces_of(s: &Split, m: u32, n: u32) -> Pieces {
    let empty = Piece {
        rows: 0..0,
        cols: 0..0,
        backend: s.a,
    };
    let mut items = [empty.clone(), empty.clone(), empty];
    items[0] = Piece {
        rows: 0..s.rows,
        cols: 0..s.cols,
        backend: s.a,
    };
    let mut len = 1;
    if let Some(b) = s.b {
        if s.cols < n {
            items[len] = Piece {
                rows: 0..s.rows,
                cols: s.cols..n,
                backend: b,
            };
            len += 1;
        }
        if s.rows < m {
            items[len] = Piece {
                rows: s.rows..m,
                cols: 0..n,
                backend: b,
            };
            len += 1;
        }
    }
    Pieces { items, len }
}

pub(crate) fn classify(s: &Split, m: u32, n: u32) -> Strategy {
    match (s.b, s.npu) {
        (None, Some(e)) => {
            if e.online {
                Strategy::OnlinePrepare
            } else if e.chunks > 1 {
                Strategy::NpuPipe
            } else if e.graph_m > m {
                Strategy::Padding
            } else {
                Strategy::Single
            }
        }
        (None, None) => Strategy::Single,
        (Some(_), e) => {
            if s.rows < m && s.cols < n {
                Strategy::Hybrid
            } else if s.rows < m {
                if e.is_some_and(|e| e.chunks > 1) {
                    Strategy::MultiTensorActivation
                } else {
                    Strategy::ActivationCentric
                }
            } else {
                Strategy::WeightCentric
            }
        }
    }
}

impl OpModel<'_, '_> {
    /// The plan of a split assumed valid: strategy, cost, extrapolation warning.
    pub(crate) fn plan(&self, s: Split) -> OpPlan {
        self.plan_with_cost(s, self.cost(&s))
    }

    pub(crate) fn plan_with_cost(&self, s: Split, cost: Cost) -> OpPlan {
        OpPlan {
            k: self.s.k,
            n: self.s.n,
            m: self.m,
            split: s,
            strategy: classify(&s, self.m, self.s.n),
            cost,
            extrapolation: self.extrapolation(&s),
        }
    }
}

impl CheckedProfile {
    /// Latency model of one backend alone on a full `[k, n]` weight and `m` rows in `phase`,
    /// µs, compute only (no sync, no copy): the phase's path, the curve of the measured shape
    /// (or the nearest one scaled by `k·n`, NPU-3), read with the backend's row tile — CPU 16,
    /// GPU 1 (linear, GPU-1), NPU 32 in `order` (a step function, NPU-1; what graph actually
    /// runs is the solver's business, [`NpuExec`]). See the crate README for the row model.
    pub fn latency_us_in(
        &self,
        b: Backend,
        phase: Phase,
        k: u32,
        n: u32,
        m: u32,
        order: Order,
    ) -> Result<f64, PlanError> {
        let sm = ShapeModel::new(self, phase, k, n)?;
        let om = OpModel::new(&sm, m)?;
        if !self.has(b) {
            return Err(PlanError::MissingBackend(b));
        }
        if !sm.present(b) {
            return Err(PlanError::NoPath(b, phase));
        }
        let t = match b {
            Backend::Npu => om.npu_graph_us(m, order),
            _ => om.rows_us(b, m),
        };
        if t.is_finite() {
            Ok(t)
        } else {
            Err(PlanError::NoCurve(b, order))
        }
    }

    /// [`CheckedProfile::latency_us_in`] in the phase [`Phase::of_rows`] gives `m`.
    pub fn latency_us(
        &self,
        b: Backend,
        k: u32,
        n: u32,
        m: u32,
        order: Order,
    ) -> Result<f64, PlanError> {
        self.latency_us_in(b, Phase::of_rows(m), k, n, m, order)
    }

    /// Cost of an arbitrary split of the op `[k, n]` x `m` rows in `phase` (validated first).
    pub fn cost_in(
        &self,
        phase: Phase,
        k: u32,
        n: u32,
        m: u32,
        split: &Split,
    ) -> Result<Cost, PlanError> {
        let sm = ShapeModel::new(self, phase, k, n)?;
        let om = OpModel::new(&sm, m)?;
        om.validate(split)?;
        Ok(om.cost(split))
    }

    /// [`CheckedProfile::cost_in`] in the phase [`Phase::of_rows`] gives `m`.
    pub fn cost(&self, k: u32, n: u32, m: u32, split: &Split) -> Result<Cost, PlanError> {
        self.cost_in(Phase::of_rows(m), k, n, m, split)
    }

    /// Builds the plan of an arbitrary split in `phase` (validated; strategy derived from the
    /// split).
    pub fn plan_split_in(
        &self,
        phase: Phase,
        k: u32,
        n: u32,
        m: u32,
        split: Split,
    ) -> Result<OpPlan, PlanError> {
        let sm = ShapeModel::new(self, phase, k, n)?;
        let om = OpModel::new(&sm, m)?;
        om.validate(&split)?;
        Ok(om.plan(split))
    }

    /// [`CheckedProfile::plan_split_in`] in the phase [`Phase::of_rows`] gives `m`.
    pub fn plan_split(&self, k: u32, n: u32, m: u32, split: Split) -> Result<OpPlan, PlanError> {
        self.plan_split_in(Phase::of_rows(m), k, n, m, split)
    }
}

/// Plans one matmul (weight `[k, n]`, `m` rows) in `phase`: the cheapest of every strategy and
/// split the profile allows, except that a two-backend split is kept only when it predicts
/// less than `(1 − min_split_gain)` times the best single-backend plan (hysteresis). Does not
/// allocate.
pub fn plan_op_in(
    p: &CheckedProfile,
    phase: Phase,
    k: u32,
    n: u32,
    m: u32,
) -> Result<OpPlan, PlanError> {
    plan_with(p, phase, Policy::Auto, k, n, m)
}

/// [`plan_op_in`] in the phase [`Phase::of_rows`] gives `m` (1 row: decode).
pub fn plan_op(p: &CheckedProfile, k: u32, n: u32, m: u32) -> Result<OpPlan, PlanError> {
    plan_op_in(p, Phase::of_rows(m), k, n, m)
}

/// Plans one matmul in `phase` under `policy`: `Auto` is [`plan_op_in`]; the others are the
/// forced plans of [`OpPlan`] (no hysteresis: the user chose them). `NpuActivation(other)`
/// runs on `other` alone when no row split fits, and on the NPU alone when `m` is a whole number
/// of standard chunks and that is cheaper. Does not allocate.
pub fn plan_with(
    p: &CheckedProfile,
    phase: Phase,
    policy: Policy,
    k: u32,
    n: u32,
    m: u32,
) -> Result<OpPlan, PlanError> {
    let sm = ShapeModel::new(p, phase, k, n)?;
    plan_policy(&OpModel::new(&sm, m)?, policy)
}

pub(crate) fn plan_policy(om: &OpModel<'_, '_>, policy: Policy) -> Result<OpPlan, PlanError> {
    match policy {
        Policy::Auto => solve_op(om, Families::ALL, om.s.p.min_split_gain),
        Policy::Single(b) => single(om, b),
        Policy::NpuActivation(other) => {
            let rows = match npu_activation(om, other) {
                Err(PlanError::Infeasible) => single(om, other),
                r => r,
            }?;
            // Rows that are a whole number of standard chunks leave nothing for the partner:
            // the NPU alone (its pipe), when that is cheaper.
            if om.s.p.standard_m().iter().any(|&s| om.m.is_multiple_of(s)) {
                let npu = single(om, Backend::Npu)?;
                if npu.predicted_us() < rows.predicted_us() {
                    return Ok(npu);
                }
            }
            Ok(rows)
        }
        Policy::WeightCentric(a, b, r) => weight_centric(om, a, b, r),
        Policy::CpuGpuColumns => cpu_gpu_columns(om),
    }
}

fn solve_op(om: &OpModel<'_, '_>, fam: Families, gain: f64) -> Result<OpPlan, PlanError> {
    om.solve(fam, gain)
        .map(|(s, cost)| om.plan_with_cost(s, cost))
        .ok_or(PlanError::Infeasible)
}

/// `MissingBackend` when the profile lacks `b`, `NoPath` when `b` has no path in this phase.
fn require(om: &OpModel<'_, '_>, b: Backend) -> Result<(), PlanError> {
    if !om.s.p.has(b) {
        return Err(PlanError::MissingBackend(b));
    }
    if !om.s.present(b) {
        return Err(PlanError::NoPath(b, om.s.phase));
    }
    Ok(())
}

fn single(om: &OpModel<'_, '_>, b: Backend) -> Result<OpPlan, PlanError> {
    require(om, b)?;
    let mut f = Families::NONE;
    f.single[b.index()] = true;
    solve_op(om, f, 0.0)
}

fn npu_activation(om: &OpModel<'_, '_>, other: Backend) -> Result<OpPlan, PlanError> {
    for b in [Backend::Npu, other] {
        require(om, b)?;
    }
    if other == Backend::Npu {
        return Err(PlanError::InvalidSplit);
    }
    let mut f = Families::NONE;
    f.npu_rows_with[other.index()] = true;
    solve_op(om, f, 0.0)
}

fn weight_centric(
    om: &OpModel<'_, '_>,
    a: Backend,
    b: Backend,
    ratio: f64,
) -> Result<OpPlan, PlanError> {
    if a == b {
        return Err(PlanError::InvalidSplit);
    }
    // The NPU is always the split's first backend.
    let (a, b, ratio) = if b == Backend::Npu {
        (b, a, 1.0 - ratio)
    } else {
        (a, b, ratio)
    };
    let (m, n) = (om.m, om.n());
    let cols = ratio_cols(n, ratio)?;
    if cols == 0 {
        return single(om, b);
    }
    if cols >= n {
        return single(om, a);
    }
    for x in [a, b] {
        require(om, x)?;
    }
    let npu = if a == Backend::Npu {
        let [st, on] = om.npu_full_execs();
        // Pick the cheaper way to run the NPU's block at this width.
        let mut best = Best::EMPTY;
        for e in [st, on].into_iter().flatten() {
            best.offer(
                om,
                Split {
                    a,
                    b: Some(b),
                    rows: m,
                    cols,
                    npu: Some(e),
                },
            );
        }
        Some(
            best.best
                .ok_or(PlanError::Infeasible)?
                .0
                .npu
                .ok_or(PlanError::Infeasible)?,
        )
    } else {
        None
    };
    let s = Split {
        a,
        b: Some(b),
        rows: m,
        cols,
        npu,
    };
    om.validate(&s)?;
    Ok(om.plan(s))
}

fn edge_cols(om: &OpModel<'_, '_>) -> Result<u32, PlanError> {
    for b in [Backend::Cpu, Backend::Gpu] {
        require(om, b)?;
    }
    let t_cpu = om.rows_us(Backend::Cpu, om.m);
    let t_gpu = om.rows_us(Backend::Gpu, om.m);
    let (r_cpu, r_gpu) = (1.0 / t_cpu, 1.0 / t_gpu);
    ratio_cols(om.n(), r_cpu / (r_cpu + r_gpu))
}

fn cpu_gpu_columns(om: &OpModel<'_, '_>) -> Result<OpPlan, PlanError> {
    let (m, n) = (om.m, om.n());
    let cols = edge_cols(om)?;
    if cols == 0 {
        return single(om, Backend::Gpu);
    }
    if cols >= n {
        return single(om, Backend::Cpu);
    }
    let s = Split {
        a: Backend::Cpu,
        b: Some(Backend::Gpu),
        rows: m,
        cols,
        npu: None,
    };
    om.validate(&s)?;
    Ok(om.plan(s))
}

/// Column count for the first of two backends sharing `n` columns at `ratio` (its share),
/// rounded to the nearest multiple of 64 and clamped to `[0, n]`.
pub fn ratio_cols(n: u32, ratio: f64) -> Result<u32, PlanError> {
    if !(0.0..=1.0).contains(&ratio) {
        return Err(PlanError::BadRatio);
    }
    let tiles = (n as f64 * ratio / COL_TILE as f64).round();
    Ok(((tiles as u64) * COL_TILE as u64).min(n as u64) as u32)
}

/// EdgeAgent's CPU–GPU column split of one projection: the CPU takes
/// `n · r_cpu / (r_cpu + r_gpu)` columns rounded to the 64-column tile, where each rate is the
/// inverse of that backend's predicted latency on the whole op (in the phase
/// [`Phase::of_rows`] gives `m`). Columns `0..cols` go to the CPU.
pub fn edge_cpu_cols(p: &CheckedProfile, k: u32, n: u32, m: u32) -> Result<u32, PlanError> {
    let sm = ShapeModel::new(p, Phase::of_rows(m), k, n)?;
    edge_cols(&OpModel::new(&sm, m)?)
}

/// Forced plans for engines that want to execute (or compare) a fixed policy, in the phase
/// [`Phase::of_rows`] gives `m` ([`plan_with`] takes the phase).
impl OpPlan {
    /// Everything on one backend (the NPU picks its best of padding, pipe, online preparation).
    pub fn single(
        p: &CheckedProfile,
        b: Backend,
        k: u32,
        n: u32,
        m: u32,
    ) -> Result<OpPlan, PlanError> {
        plan_with(p, Phase::of_rows(m), Policy::Single(b), k, n, m)
    }

    /// The NPU with activation-centric or multi-tensor row splits, the rest on `other`
    /// (CPU or GPU): the best such split. `Infeasible` when `m` is not above the smallest
    /// standard shape.
    pub fn npu_activation(
        p: &CheckedProfile,
        other: Backend,
        k: u32,
        n: u32,
        m: u32,
    ) -> Result<OpPlan, PlanError> {
        let sm = ShapeModel::new(p, Phase::of_rows(m), k, n)?;
        npu_activation(&OpModel::new(&sm, m)?, other)
    }

    /// Weight-centric split at a given ratio: `a` takes `ratio` of the columns (rounded to 64),
    /// `b` the rest. A ratio that rounds to 0 or all columns gives a single-backend plan.
    /// The NPU, when involved, takes its best static or online way to run all rows.
    pub fn weight_centric(
        p: &CheckedProfile,
        a: Backend,
        b: Backend,
        ratio: f64,
        k: u32,
        n: u32,
        m: u32,
    ) -> Result<OpPlan, PlanError> {
        plan_with(
            p,
            Phase::of_rows(m),
            Policy::WeightCentric(a, b, ratio),
            k,
            n,
            m,
        )
    }

    /// EdgeAgent's CPU–GPU column split ([`edge_cpu_cols`]); all on one backend when the
    /// rounded share is 0 or everything.
    pub fn cpu_gpu_columns(
        p: &CheckedProfile,
        k: u32,
        n: u32,
        m: u32,
    ) -> Result<OpPlan, PlanError> {
        plan_with(p, Phase::of_rows(m), Policy::CpuGpuColumns, k, n, m)
    }
}
