//! Latency models, the plan of one matmul, its cost, and the solver.

use core::fmt;
use core::ops::Range;

use crate::profile::{Backend, CheckedProfile, Curve, Order, MAX_STANDARD};

/// Rows per CPU tile: CPU latency steps every 16 rows.
pub const CPU_ROW_TILE: u32 = 16;
/// Columns per CPU tile, and the granularity of every column (weight) split.
pub const COL_TILE: u32 = 64;
/// Rows per NPU tile: NPU latency steps every 32 rows (HeteroInfer's NPU-1).
pub const NPU_ROW_TILE: u32 = 32;
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

/// Predicted cost of a plan, µs: `total = max(a, b) + sync`, where `a` and `b` include each
/// side's copies (a copy runs on that backend's own timeline, before and after its compute).
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
    /// `max(a_us, b_us) + sync_us`.
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

fn ceil_to(x: u32, t: u32) -> u64 {
    (x as u64).div_ceil(t as u64) * t as u64
}

/// `x` rounded up to a multiple of `t`, saturating at `u32::MAX`.
fn ceil_sat(x: u32, t: u32) -> u32 {
    ceil_to(x, t).min(u32::MAX as u64) as u32
}

fn classify(s: &Split, m: u32, n: u32) -> Strategy {
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

/// Per-op view of the profile: the curves for this weight shape, found once.
pub(crate) struct OpModel<'p> {
    k: u32,
    n: u32,
    m: u32,
    /// `1 / m`.
    inv_m: f64,
    /// `1 / n`.
    inv_n: f64,
    /// `1 / ceil64(n)`.
    inv_n64: f64,
    cpu: Option<Side<'p>>,
    gpu: Option<Side<'p>>,
    npu: Option<NpuSide<'p>>,
}

#[derive(Clone, Copy)]
struct Side<'p> {
    curve: &'p Curve,
    scale: f64,
    sync_us: f64,
    copy: f64,
    /// Latency of all `m` rows (cached).
    full_us: f64,
    /// A lower bound of `latency(q rows) / q` for every `1 <= q <= m` (for pruning).
    per_row_lb: f64,
}

struct NpuSide<'p> {
    curves: [Option<(&'p Curve, f64)>; 2],
    sync_us: f64,
    copy: f64,
    standard: &'p [u32],
    /// `1 / standard[i]`.
    inv_standard: &'p [f64],
    prepare: Option<f64>,
    /// Latency of each standard graph in each order (INFINITY without a curve), cached.
    std_us: [[f64; 2]; MAX_STANDARD],
}

impl<'p> OpModel<'p> {
    pub(crate) fn new(p: &'p CheckedProfile, k: u32, n: u32, m: u32) -> Result<Self, PlanError> {
        if k == 0 || n == 0 || m == 0 {
            return Err(PlanError::ZeroShape);
        }
        let inv_m = 1.0 / m as f64;
        let side = |b: Backend| {
            p.model(b).and_then(|bm| {
                bm.curve(k, n, Order::ActivationFirst)
                    .map(|(curve, scale)| {
                        let q = if b == Backend::Cpu {
                            ceil_sat(m, CPU_ROW_TILE)
                        } else {
                            m
                        };
                        // The CPU's 16-row steps only raise the latency, so the unstepped
                        // curve's bound holds for it too.
                        let lb = curve.per_row_lb(m, inv_m);
                        Side {
                            curve,
                            scale,
                            sync_us: bm.sync_us,
                            copy: bm.copy_us_per_byte,
                            full_us: curve.at(q) * scale,
                            per_row_lb: lb * scale,
                        }
                    })
            })
        };
        let npu = p.model(Backend::Npu).map(|bm| {
            let curves = Order::ALL.map(|o| bm.curve(k, n, o));
            let mut std_us = [[f64::INFINITY; 2]; MAX_STANDARD];
            for (o, c) in curves.iter().enumerate() {
                if let Some((c, scale)) = c {
                    for (t, &u) in std_us.iter_mut().zip(&c.std_us) {
                        t[o] = u * scale;
                    }
                }
            }
            NpuSide {
                curves,
                sync_us: bm.sync_us,
                copy: bm.copy_us_per_byte,
                standard: &bm.standard_m,
                inv_standard: &bm.inv_standard_m,
                prepare: bm.prepare_us,
                std_us,
            }
        });
        Ok(OpModel {
            k,
            n,
            m,
            inv_m,
            inv_n: 1.0 / n as f64,
            inv_n64: 1.0 / ceil_to(n, COL_TILE) as f64,
            cpu: side(Backend::Cpu),
            gpu: side(Backend::Gpu),
            npu,
        })
    }

    fn side(&self, b: Backend) -> Option<&Side<'p>> {
        match b {
            Backend::Cpu => self.cpu.as_ref(),
            Backend::Gpu => self.gpu.as_ref(),
            Backend::Npu => None,
        }
    }

    /// Full-width latency of `rows` rows on CPU or GPU (the CPU and GPU models).
    fn rows_us(&self, b: Backend, rows: u32) -> f64 {
        match (b, self.side(b)) {
            (_, Some(s)) if rows == self.m => s.full_us,
            (Backend::Cpu, Some(s)) => s.curve.at(ceil_sat(rows, CPU_ROW_TILE)) * s.scale,
            (_, Some(s)) => s.curve.at(rows) * s.scale,
            _ => f64::INFINITY,
        }
    }

    /// Fraction of the full-width time a block of `cols` columns costs on `b`.
    fn col_frac(&self, b: Backend, cols: u32) -> f64 {
        if cols == self.n {
            return 1.0;
        }
        match b {
            Backend::Cpu => ceil_to(cols, COL_TILE) as f64 * self.inv_n64,
            _ => cols as f64 * self.inv_n,
        }
    }

    /// NPU latency of one run of a `graph_m`-row graph, full width (NPU-1 step, NPU-3 shape).
    fn npu_graph_us(&self, graph_m: u32, order: Order) -> f64 {
        if let Some(npu) = self.npu.as_ref() {
            if let Ok(i) = npu.standard.binary_search(&graph_m) {
                return npu.std_us[i][order as usize];
            }
        }
        match self.npu.as_ref().and_then(|n| n.curves[order as usize]) {
            Some((c, scale)) => c.at(ceil_sat(graph_m, NPU_ROW_TILE)) * scale,
            None => f64::INFINITY,
        }
    }

    fn copy_us(&self, b: Backend, in_rows: u32, out_elems: u64) -> f64 {
        let rate = match b {
            Backend::Npu => self.npu.as_ref().map_or(0.0, |s| s.copy),
            _ => self.side(b).map_or(0.0, |s| s.copy),
        };
        if rate == 0.0 {
            return 0.0;
        }
        (in_rows as f64 * self.k as f64 + out_elems as f64) * ELEM_BYTES * rate
    }

    fn sync(&self, b: Backend) -> f64 {
        match b {
            Backend::Npu => self.npu.as_ref().map_or(0.0, |s| s.sync_us),
            _ => self.side(b).map_or(0.0, |s| s.sync_us),
        }
    }

    /// Time of `a`'s block (compute + prep, copy).
    fn a_time(&self, s: &Split) -> (f64, f64) {
        let frac = self.col_frac(s.a, s.cols);
        let compute = match (s.a, s.npu) {
            (Backend::Npu, Some(e)) => {
                let prep = if e.online {
                    self.npu
                        .as_ref()
                        .and_then(|n| n.prepare)
                        .unwrap_or(f64::INFINITY)
                } else {
                    0.0
                };
                prep + e.chunks as f64 * self.npu_graph_us(e.graph_m, e.order) * frac
            }
            (b, _) => self.rows_us(b, s.rows) * frac,
        };
        let copy = self.copy_us(s.a, s.rows, s.rows as u64 * s.cols as u64);
        (compute, copy)
    }

    /// Time of `b`'s (possibly L-shaped) block.
    fn b_time(&self, s: &Split) -> (f64, f64) {
        let Some(b) = s.b else { return (0.0, 0.0) };
        let mut compute = 0.0;
        let mut out = 0u64;
        if s.cols < self.n {
            compute += self.rows_us(b, s.rows) * self.col_frac(b, self.n - s.cols);
            out += s.rows as u64 * (self.n - s.cols) as u64;
        }
        if s.rows < self.m {
            compute += self.rows_us(b, self.m - s.rows);
            out += (self.m - s.rows) as u64 * self.n as u64;
        }
        let in_rows = if s.cols < self.n {
            self.m
        } else {
            self.m - s.rows
        };
        (compute, self.copy_us(b, in_rows, out))
    }

    /// Checks a split against the shape and the profile.
    fn validate(&self, s: &Split) -> Result<(), PlanError> {
        let (m, n) = (self.m, self.n);
        if s.rows == 0 || s.rows > m || s.cols == 0 || s.cols > n {
            return Err(PlanError::InvalidSplit);
        }
        match s.b {
            None if s.rows != m || s.cols != n => return Err(PlanError::InvalidSplit),
            Some(b) if b == s.a || b == Backend::Npu || (s.rows == m && s.cols == n) => {
                return Err(PlanError::InvalidSplit)
            }
            _ => {}
        }
        for b in [Some(s.a), s.b].into_iter().flatten() {
            let present = match b {
                Backend::Npu => self.npu.is_some(),
                _ => self.side(b).is_some(),
            };
            if !present {
                return Err(PlanError::MissingBackend(b));
            }
        }
        match (s.a, s.npu) {
            (Backend::Npu, Some(e)) => {
                let npu = self
                    .npu
                    .as_ref()
                    .ok_or(PlanError::MissingBackend(Backend::Npu))?;
                if npu.curves[e.order as usize].is_none() {
                    return Err(PlanError::NoCurve(Backend::Npu, e.order));
                }
                if e.chunks == 0 || (e.chunks as u64) * (e.graph_m as u64) < s.rows as u64 {
                    return Err(PlanError::InvalidSplit);
                }
                let standard = npu.standard.binary_search(&e.graph_m).is_ok();
                if e.online && (standard || npu.prepare.is_none() || e.chunks != 1) {
                    return Err(PlanError::InvalidSplit);
                }
                if !e.online && !standard {
                    return Err(PlanError::InvalidSplit);
                }
                Ok(())
            }
            (Backend::Npu, None) => Err(PlanError::InvalidSplit),
            (_, Some(_)) => Err(PlanError::InvalidSplit),
            (_, None) => Ok(()),
        }
    }

    /// Cost of a split assumed valid.
    fn cost(&self, s: &Split) -> Cost {
        let (ca, pa) = self.a_time(s);
        let (cb, pb) = self.b_time(s);
        let a_us = ca + pa;
        let b_us = cb + pb;
        let sync_us = self.sync(s.a) + s.b.map_or(0.0, |b| self.sync(b));
        Cost {
            a_us,
            b_us,
            copy_us: pa + pb,
            sync_us,
            total_us: a_us.max(b_us) + sync_us,
        }
    }

    fn plan(&self, s: Split) -> OpPlan {
        OpPlan {
            k: self.k,
            n: self.n,
            m: self.m,
            split: s,
            strategy: classify(&s, self.m, self.n),
            cost: self.cost(&s),
        }
    }
}

impl CheckedProfile {
    /// Latency model of one backend alone on a full `[k, n]` weight and `m` rows, µs, compute
    /// only (no sync, no copy):
    /// - CPU: the curve at `m` rounded up to 16 rows (16-row tiles);
    /// - GPU: the curve interpolated linearly in `m` (GPU-1);
    /// - NPU: the curve in `order` at `m` rounded up to 32 rows (NPU-1), i.e. a step function;
    ///   what graph actually runs is the solver's business ([`NpuExec`]).
    ///
    /// Every curve is flat below its first point, linear between points, proportional to `m`
    /// beyond its last. An unmeasured weight shape uses the nearest measured shape's curve
    /// scaled by the ratio of `k·n` (same efficiency: NPU-3).
    pub fn latency_us(
        &self,
        b: Backend,
        k: u32,
        n: u32,
        m: u32,
        order: Order,
    ) -> Result<f64, PlanError> {
        let om = OpModel::new(self, k, n, m)?;
        let t = match b {
            Backend::Npu => {
                if om.npu.is_none() {
                    return Err(PlanError::MissingBackend(b));
                }
                om.npu_graph_us(m, order)
            }
            _ => {
                if om.side(b).is_none() {
                    return Err(PlanError::MissingBackend(b));
                }
                om.rows_us(b, m)
            }
        };
        if t.is_finite() {
            Ok(t)
        } else {
            Err(PlanError::NoCurve(b, order))
        }
    }

    /// Cost of an arbitrary split of the op `[k, n]` x `m` rows (validated first).
    pub fn cost(&self, k: u32, n: u32, m: u32, split: &Split) -> Result<Cost, PlanError> {
        let om = OpModel::new(self, k, n, m)?;
        om.validate(split)?;
        Ok(om.cost(split))
    }

    /// Builds the plan of an arbitrary split (validated; strategy derived from the split).
    pub fn plan_split(&self, k: u32, n: u32, m: u32, split: Split) -> Result<OpPlan, PlanError> {
        let om = OpModel::new(self, k, n, m)?;
        om.validate(&split)?;
        Ok(om.plan(split))
    }
}

/// Keeps the cheapest candidate; the first one wins ties (determinism).
struct Best {
    best: Option<(Split, f64)>,
    /// The cost of `best`.
    cost: Option<Cost>,
}

impl Best {
    fn offer(&mut self, om: &OpModel<'_>, s: Split) -> Cost {
        let c = om.cost(&s);
        let t = c.total_us;
        if t.is_finite() && self.best.is_none_or(|(_, bt)| t < bt) {
            self.best = Some((s, t));
            self.cost = Some(c);
        }
        c
    }
}

/// Which families of candidates the solver may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Families {
    pub single: [bool; 3],
    pub npu_rows_with: [bool; 3],
    pub hybrid_with: [bool; 3],
    /// Weight-centric pairs: (cpu,gpu), (npu,cpu), (npu,gpu).
    pub columns: [bool; 3],
}

impl Families {
    pub(crate) const ALL: Families = Families {
        single: [true; 3],
        npu_rows_with: [true; 3],
        hybrid_with: [true; 3],
        columns: [true; 3],
    };
    pub(crate) const NONE: Families = Families {
        single: [false; 3],
        npu_rows_with: [false; 3],
        hybrid_with: [false; 3],
        columns: [false; 3],
    };
}

impl OpModel<'_> {
    /// Best order for a standard graph of `graph_m` rows (ActivationFirst wins ties).
    fn best_order(&self, graph_m: u32) -> Option<(Order, f64)> {
        let mut best: Option<(Order, f64)> = None;
        for o in Order::ALL {
            let t = self.npu_graph_us(graph_m, o);
            if t.is_finite() && best.is_none_or(|(_, bt)| t < bt) {
                best = Some((o, t));
            }
        }
        best
    }

    /// The NPU's ways of running all `m` rows alone: the best static one (padding to the next
    /// standard shape, or a pipe of one standard shape) and the online one.
    fn npu_full_execs(&self) -> [Option<NpuExec>; 2] {
        let Some(npu) = self.npu.as_ref() else {
            return [None, None];
        };
        let m = self.m;
        let mut static_best: Option<(NpuExec, f64)> = None;
        for (&s, st) in npu.standard.iter().zip(&npu.std_us) {
            let chunks = m.div_ceil(s);
            // ActivationFirst wins ties.
            let (order, t) = if st[1] < st[0] {
                (Order::WeightFirst, st[1])
            } else {
                (Order::ActivationFirst, st[0])
            };
            if t.is_finite() {
                let t = t * chunks as f64;
                if static_best.is_none_or(|(_, bt)| t < bt) {
                    static_best = Some((
                        NpuExec {
                            graph_m: s,
                            chunks,
                            online: false,
                            order,
                        },
                        t,
                    ));
                }
            }
            if s >= m {
                // Larger standard shapes only pad more (curves are non-decreasing).
                break;
            }
        }
        let online = match (npu.prepare, npu.standard.binary_search(&m)) {
            (Some(_), Err(_)) => self.best_order(m).map(|(order, _)| NpuExec {
                graph_m: m,
                chunks: 1,
                online: true,
                order,
            }),
            _ => None,
        };
        [static_best.map(|(e, _)| e), online]
    }

    /// Best column split for a family where `a`'s block has `rows` rows: the objective is
    /// `max(f(c), g(c))` with `f` affine increasing and `g` affine decreasing in `c` on the
    /// 64-column grid, so the grid points around the crossing (and the two ends) contain the
    /// minimum.
    fn offer_columns(&self, best: &mut Best, base: Split) {
        let n = self.n;
        if n <= COL_TILE {
            return;
        }
        let c_lo = COL_TILE;
        let c_hi = (n - 1) / COL_TILE * COL_TILE;
        let at = |c: u32| Split { cols: c, ..base };
        let lo = best.offer(self, at(c_lo));
        if c_hi == c_lo {
            return;
        }
        let hi = best.offer(self, at(c_hi));
        let (h_lo, h_hi) = (lo.a_us - lo.b_us, hi.a_us - hi.b_us);
        if !(h_lo < 0.0 && h_hi > 0.0) {
            return;
        }
        let x = c_lo as f64 + (c_hi - c_lo) as f64 * (-h_lo / (h_hi - h_lo));
        // x >= c_lo > 0 here: the saturating cast truncates, i.e. floors.
        let tiles = (x * (1.0 / COL_TILE as f64)) as u32;
        let below = tiles.saturating_mul(COL_TILE).clamp(c_lo, c_hi);
        for c in [below, below.saturating_add(COL_TILE)] {
            if (c_lo..=c_hi).contains(&c) {
                best.offer(self, at(c));
            }
        }
    }

    /// Runs the solver over the allowed families.
    ///
    /// Single backends and the CPU–GPU column split are evaluated first. Every family that
    /// pairs the NPU with X (a row split or hybrid on standard shape `s`, or a column split with
    /// one way of running all rows) has a lower bound: the NPU side costs at least `ρ·r` for
    /// the `r` rows' worth of output it computes (compute and output copy) and X at least
    /// `β·(m − r)`, so
    /// `max >= ρβm/(ρ+β)`, plus both syncs. Families are visited in increasing bound and the
    /// search stops once the bound reaches the best cost found.
    pub(crate) fn solve(&self, fam: Families) -> Option<(Split, Cost)> {
        let (m, n) = (self.m, self.n);
        let mut best = Best {
            best: None,
            cost: None,
        };
        for b in [Backend::Cpu, Backend::Gpu] {
            if fam.single[b.index()] && self.side(b).is_some() {
                best.offer(
                    self,
                    Split {
                        a: b,
                        b: None,
                        rows: m,
                        cols: n,
                        npu: None,
                    },
                );
            }
        }
        let npu_full = self.npu_full_execs();
        if fam.single[Backend::Npu.index()] {
            for e in npu_full.into_iter().flatten() {
                best.offer(
                    self,
                    Split {
                        a: Backend::Npu,
                        b: None,
                        rows: m,
                        cols: n,
                        npu: Some(e),
                    },
                );
            }
        }
        // Families: (lower bound, x, kind). kind = ROW + i / HYB + i: NPU row split / hybrid on
        // standard shape i with X; WC + i: NPU column split with X, the NPU running all rows
        // with `npu_full[i]`; CPU_GPU: the CPU–GPU column split.
        const ROW: usize = 0;
        const HYB: usize = MAX_STANDARD;
        const WC: usize = 2 * MAX_STANDARD;
        const CPU_GPU: usize = 2 * MAX_STANDARD + 2;
        const CAP: usize = 2 * (2 * MAX_STANDARD + 2) + 1;
        let mut fams = [(f64::INFINITY, Backend::Cpu, 0usize); CAP];
        let mut len = 0;
        // Families whose bound already reaches the best single-backend plan are never visited.
        let cutoff = best.best.map_or(f64::INFINITY, |(_, bt)| bt);
        let mut push = |lb: f64, x: Backend, kind: usize| {
            // A small margin keeps rounding in the bound from cutting a tie-level candidate.
            if lb * (1.0 - 1e-9) < cutoff {
                fams[len] = (lb, x, kind);
                len += 1;
            }
        };
        let mf = m as f64;
        let inv_m = self.inv_m;
        // Lower bound of max(p + ρ·a, β·(m − a)) over a in [0, a_max] (a: full-width rows'
        // worth of output on the first backend): convex in a, least at the crossing.
        let bound = |p: f64, rho: f64, beta: f64, a_max: f64| {
            let a = ((beta * mf - p) / (rho + beta)).clamp(0.0, a_max);
            let v = (p + rho * a).max(beta * (mf - a));
            if v.is_nan() {
                0.0
            } else {
                v
            }
        };
        if let (true, Some(cpu), Some(gpu)) = (fam.columns[0], self.cpu, self.gpu) {
            // The CPU block of c columns (c a multiple of 64) costs full · c / ceil64(n).
            let tiles = if n % COL_TILE == 0 {
                1.0
            } else {
                n as f64 / ceil_to(n, COL_TILE) as f64
            };
            let rho = cpu.full_us * inv_m * tiles;
            let lb = bound(0.0, rho, gpu.full_us * inv_m, mf) + cpu.sync_us + gpu.sync_us;
            push(lb, Backend::Gpu, CPU_GPU);
        }
        if let Some(npu) = self.npu.as_ref() {
            let copy = ELEM_BYTES * npu.copy;
            for x in [Backend::Cpu, Backend::Gpu] {
                let Some(side) = self.side(x) else { continue };
                let beta = side.per_row_lb;
                let syncs = npu.sync_us + side.sync_us;
                for (i, &s) in npu.standard.iter().enumerate() {
                    if s >= m {
                        break;
                    }
                    let t = npu.std_us[i][0].min(npu.std_us[i][1]);
                    if !t.is_finite() {
                        continue;
                    }
                    let sf = s as f64;
                    let inv_s = npu.inv_standard[i];
                    if fam.npu_rows_with[x.index()] {
                        // j chunks cost exactly j·A on the NPU; X at least β·(m − j·s).
                        let a1 = t + sf * (self.k as f64 + n as f64) * copy;
                        let j_max = ((m - 1) / s) as f64;
                        let jc = (beta * mf / (a1 + beta * sf)).clamp(1.0, j_max);
                        let at = |j: f64| (j * a1).max(beta * (mf - j * sf));
                        // jc >= 1: truncation floors; floor + 1 covers the ceiling.
                        let j0 = (jc as u32) as f64;
                        let lb = at(j0).min(at((j0 + 1.0).min(j_max)));
                        push(lb + syncs, x, ROW + i);
                    }
                    if fam.hybrid_with[x.index()] {
                        // NPU: s rows on c columns, a = s·c/n rows' worth, a <= s.
                        let p = sf * self.k as f64 * copy;
                        let rho = t * inv_s + n as f64 * copy;
                        push(bound(p, rho, beta, sf) + syncs, x, HYB + i);
                    }
                }
                let col = if x == Backend::Cpu { 1 } else { 2 };
                if fam.columns[col] {
                    for (i, e) in npu_full.iter().enumerate() {
                        if let Some(e) = e {
                            let t = e.chunks as f64 * self.npu_graph_us(e.graph_m, e.order);
                            let prep = if e.online {
                                npu.prepare.unwrap_or(0.0)
                            } else {
                                0.0
                            };
                            let p = prep + mf * self.k as f64 * copy;
                            let rho = t * inv_m + n as f64 * copy;
                            let lb = bound(p, rho, side.full_us * inv_m, mf) + syncs;
                            push(lb, x, WC + i);
                        }
                    }
                }
            }
        }
        // Visit in increasing (bound, kind, backend); selection, as few are usually visited.
        let mut done = [false; CAP];
        let key = |e: &(f64, Backend, usize), f: &(f64, Backend, usize)| {
            e.0.total_cmp(&f.0).then(e.2.cmp(&f.2)).then(e.1.cmp(&f.1))
        };
        loop {
            let mut pick: Option<usize> = None;
            for i in 0..len {
                if !done[i] && pick.is_none_or(|p| key(&fams[i], &fams[p]).is_lt()) {
                    pick = Some(i);
                }
            }
            let Some(i) = pick else { break };
            done[i] = true;
            let (lb, x, kind) = fams[i];
            // A small margin keeps rounding in the bound from cutting a tie-level candidate.
            if best.best.is_some_and(|(_, bt)| lb * (1.0 - 1e-9) >= bt) {
                break;
            }
            if kind == CPU_GPU {
                let base = Split {
                    a: Backend::Cpu,
                    b: Some(Backend::Gpu),
                    rows: m,
                    cols: n,
                    npu: None,
                };
                self.offer_columns(&mut best, base);
                continue;
            }
            let Some(npu) = self.npu.as_ref() else { break };
            if kind >= WC {
                let base = Split {
                    a: Backend::Npu,
                    b: Some(x),
                    rows: m,
                    cols: n,
                    npu: npu_full[kind - WC],
                };
                self.offer_columns(&mut best, base);
                continue;
            }
            let idx = kind % MAX_STANDARD;
            let s = npu.standard[idx];
            let order = if npu.std_us[idx][1] < npu.std_us[idx][0] {
                Order::WeightFirst
            } else {
                Order::ActivationFirst
            };
            let split = |j: u32| Split {
                a: Backend::Npu,
                b: Some(x),
                rows: j * s,
                cols: n,
                npu: Some(NpuExec {
                    graph_m: s,
                    chunks: j,
                    online: false,
                    order,
                }),
            };
            if kind >= HYB {
                self.offer_columns(&mut best, split(1));
                continue;
            }
            // Smallest j with NPU time >= other time; the optimum is j or j - 1. The NPU
            // side is j runs of one chunk, chunk copies included: j times the one-chunk time
            // (to rounding; the candidates are then costed exactly).
            let (c1, p1) = self.a_time(&split(1));
            let per_chunk = c1 + p1;
            let j_max = (m - 1) / s;
            let pred = |j: u32| {
                let (cb, pb) = self.b_time(&split(j));
                j as f64 * per_chunk >= cb + pb
            };
            // Below the crossing of j·A with β·(m − j·s) the NPU side is surely shorter
            // (X costs at least β per row), so the search starts there and gallops up.
            let beta = self.side(x).map_or(0.0, |sd| sd.per_row_lb);
            let jc = beta * m as f64 / (per_chunk + beta * s as f64);
            let mut lo = if jc.is_finite() && jc >= 2.0 {
                ((jc as u32) - 1).clamp(1, j_max)
            } else {
                1
            };
            let mut step = 1u32;
            let mut hi = j_max + 1;
            while lo < hi {
                let probe = lo.saturating_add(step - 1);
                if probe >= hi {
                    break;
                }
                if pred(probe) {
                    hi = probe;
                    break;
                }
                lo = probe + 1;
                step = step.saturating_mul(2);
            }
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if pred(mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            for j in [lo.saturating_sub(1), lo] {
                if (1..=j_max).contains(&j) {
                    best.offer(self, split(j));
                }
            }
        }
        best.best.map(|(s, _)| s).zip(best.cost)
    }
}

/// Plans one matmul (weight `[k, n]`, `m` rows): the cheapest of every strategy and split the
/// profile allows. Does not allocate.
pub fn plan_op(p: &CheckedProfile, k: u32, n: u32, m: u32) -> Result<OpPlan, PlanError> {
    solve_with(p, k, n, m, Families::ALL)
}

pub(crate) fn solve_with(
    p: &CheckedProfile,
    k: u32,
    n: u32,
    m: u32,
    fam: Families,
) -> Result<OpPlan, PlanError> {
    let om = OpModel::new(p, k, n, m)?;
    om.solve(fam)
        .map(|(s, cost)| OpPlan {
            k,
            n,
            m,
            split: s,
            strategy: classify(&s, m, n),
            cost,
        })
        .ok_or(PlanError::Infeasible)
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
/// inverse of that backend's predicted latency on the whole op. Columns `0..cols` go to the CPU.
pub fn edge_cpu_cols(p: &CheckedProfile, k: u32, n: u32, m: u32) -> Result<u32, PlanError> {
    let t_cpu = p.latency_us(Backend::Cpu, k, n, m, Order::ActivationFirst)?;
    let t_gpu = p.latency_us(Backend::Gpu, k, n, m, Order::ActivationFirst)?;
    let (r_cpu, r_gpu) = (1.0 / t_cpu, 1.0 / t_gpu);
    ratio_cols(n, r_cpu / (r_cpu + r_gpu))
}

/// Forced plans for engines that want to execute (or compare) a fixed policy.
impl OpPlan {
    /// Everything on one backend (the NPU picks its best of padding, pipe, online preparation).
    pub fn single(
        p: &CheckedProfile,
        b: Backend,
        k: u32,
        n: u32,
        m: u32,
    ) -> Result<OpPlan, PlanError> {
        if !p.has(b) {
            return Err(PlanError::MissingBackend(b));
        }
        let mut f = Families::NONE;
        f.single[b.index()] = true;
        solve_with(p, k, n, m, f)
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
        for b in [Backend::Npu, other] {
            if !p.has(b) {
                return Err(PlanError::MissingBackend(b));
            }
        }
        if other == Backend::Npu {
            return Err(PlanError::InvalidSplit);
        }
        let mut f = Families::NONE;
        f.npu_rows_with[other.index()] = true;
        solve_with(p, k, n, m, f)
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
        if a == b {
            return Err(PlanError::InvalidSplit);
        }
        // The NPU is always the split's first backend.
        let (a, b, ratio) = if b == Backend::Npu {
            (b, a, 1.0 - ratio)
        } else {
            (a, b, ratio)
        };
        let cols = ratio_cols(n, ratio)?;
        if cols == 0 {
            return OpPlan::single(p, b, k, n, m);
        }
        if cols >= n {
            return OpPlan::single(p, a, k, n, m);
        }
        let om = OpModel::new(p, k, n, m)?;
        let npu = if a == Backend::Npu {
            let [st, on] = om.npu_full_execs();
            // Pick the cheaper way to run the NPU's block at this width.
            let mut best = Best {
                best: None,
                cost: None,
            };
            for e in [st, on].into_iter().flatten() {
                best.offer(
                    &om,
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

    /// EdgeAgent's CPU–GPU column split ([`edge_cpu_cols`]); all on one backend when the
    /// rounded share is 0 or everything.
    pub fn cpu_gpu_columns(
        p: &CheckedProfile,
        k: u32,
        n: u32,
        m: u32,
    ) -> Result<OpPlan, PlanError> {
        let cols = edge_cpu_cols(p, k, n, m)?;
        if cols == 0 {
            return OpPlan::single(p, Backend::Gpu, k, n, m);
        }
        if cols >= n {
            return OpPlan::single(p, Backend::Cpu, k, n, m);
        }
        p.plan_split(
            k,
            n,
            m,
            Split {
                a: Backend::Cpu,
                b: Some(Backend::Gpu),
                rows: m,
                cols,
                npu: None,
            },
        )
    }
}
