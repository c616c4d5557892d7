//! The solver: the cheapest split of one matmul over the strategy families a policy allows,
//! found without scanning every split, and the hysteresis that keeps a single backend unless a
//! split clearly wins.

use crate::checked::MAX_STANDARD;
use crate::curve::ceil_to;
use crate::opmodel::OpModel;
use crate::plan::{Cost, NpuExec, Split, COL_TILE, ELEM_BYTES};
use crate::profile::{Backend, Order};

/// Keeps the cheapest candidate; the first one wins ties (determinism).
pub(crate) struct Best {
    pub best: Option<(Split, Cost)>,
}

impl Best {
    pub(crate) const EMPTY: Best = Best { best: None };

    /// Costs `s`, keeps it if cheaper than the best so far, returns its cost.
    pub(crate) fn offer(&mut self, om: &OpModel<'_, '_>, s: Split) -> Cost {
        let c = om.cost(&s);
        let t = c.total_us;
        if t.is_finite() && self.best.is_none_or(|(_, bc)| t < bc.total_us) {
            self.best = Some((s, c));
        }
        c
    }

    fn total(&self) -> f64 {
        self.best.map_or(f64::INFINITY, |(_, c)| c.total_us)
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

/// Where an affine function with values `d0` at `x0` and `d1` at `x1` crosses zero, if strictly
/// between them.
fn zero_between(x0: f64, x1: f64, d0: f64, d1: f64) -> Option<f64> {
    let opposite = (d0 < 0.0 && d1 > 0.0) || (d0 > 0.0 && d1 < 0.0);
    opposite.then(|| x0 + (x1 - x0) * (d0 / (d0 - d1)))
}

impl OpModel<'_, '_> {
    /// Best order for a graph of `graph_m` rows (ActivationFirst wins ties).
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
    pub(crate) fn npu_full_execs(&self) -> [Option<NpuExec>; 2] {
        [self.npu_static_exec(), self.npu_online_exec(f64::INFINITY)]
    }

    /// The NPU's best static way to run all `m` rows: padding to the next standard shape, or a
    /// pipe of one standard shape (ties: the smaller shape).
    fn npu_static_exec(&self) -> Option<NpuExec> {
        let npu = self.npu()?;
        let m = self.m;
        let mut best: Option<(NpuExec, f64)> = None;
        for (&s, f) in npu.standard.iter().zip(&npu.fams) {
            let chunks = m.div_ceil(s);
            let t = f.t * chunks as f64;
            if t.is_finite() && best.is_none_or(|(_, bt)| t < bt) {
                let e = NpuExec {
                    graph_m: s,
                    chunks,
                    online: false,
                    order: f.order,
                };
                best = Some((e, t));
            }
            if s >= m {
                // Larger standard shapes only pad more (curves are non-decreasing).
                break;
            }
        }
        best.map(|(e, _)| e)
    }

    /// The NPU's graph prepared online for `m` rows, unless `m` is standard, preparation is not
    /// offered, or preparation alone costs `cutoff` or more (it cannot win then).
    fn npu_online_exec(&self, cutoff: f64) -> Option<NpuExec> {
        let npu = self.npu()?;
        let p = npu.prepare?;
        if p >= cutoff || npu.standard.binary_search(&self.m).is_ok() {
            return None;
        }
        self.best_order(self.m).map(|(order, _)| NpuExec {
            graph_m: self.m,
            chunks: 1,
            online: true,
            order,
        })
    }

    /// Best column split for a family where `a`'s block has `base.rows` rows. On the 64-column
    /// grid `a`'s time `A(c)`, `b`'s time `B(c)` and the bus time `K(c)` are affine in `c`, `A`
    /// increasing and `B` decreasing; the objective `max(g, K)` with
    /// `g = max(A, B) + (1 − overlap)·min(A, B)` is convex and piecewise affine, its pieces
    /// meeting where `A = B` and where `K` crosses either piece of `g`. The grid points around
    /// those crossings and the two ends therefore hold the minimum.
    pub(crate) fn offer_columns(&self, best: &mut Best, base: Split) {
        let n = self.n();
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
        let (x0, x1) = (c_lo as f64, c_hi as f64);
        let fin = |c: &Cost| c.a_us.is_finite() && c.b_us.is_finite() && c.bus_us.is_finite();
        if !(fin(&lo) && fin(&hi)) {
            return;
        }
        let mut cross = [None; 3];
        cross[0] = zero_between(x0, x1, lo.a_us - lo.b_us, hi.a_us - hi.b_us);
        if lo.bus_us > 0.0 || hi.bus_us > 0.0 {
            let free = 1.0 - base.b.map_or(1.0, |b| self.pair(base.a, b).overlap);
            // g where A <= B, and where A >= B (each affine).
            let g1 = |c: &Cost| c.b_us + free * c.a_us;
            let g2 = |c: &Cost| c.a_us + free * c.b_us;
            cross[1] = zero_between(x0, x1, g1(&lo) - lo.bus_us, g1(&hi) - hi.bus_us);
            cross[2] = zero_between(x0, x1, g2(&lo) - lo.bus_us, g2(&hi) - hi.bus_us);
        }
        for x in cross.into_iter().flatten() {
            // x > c_lo > 0 here: the saturating cast truncates, i.e. floors.
            let tiles = (x * (1.0 / COL_TILE as f64)) as u32;
            let below = tiles.saturating_mul(COL_TILE).clamp(c_lo, c_hi);
            for c in [below, below.saturating_add(COL_TILE)] {
                if c > c_lo && c < c_hi {
                    best.offer(self, at(c));
                }
            }
        }
    }

    /// Runs the solver over the allowed families; `gain` is the hysteresis (a split must cost
    /// less than `(1 − gain)` times the best single-backend plan).
    ///
    /// Single backends are evaluated first. Every two-backend family (the CPU–GPU column split;
    /// a row split or hybrid of the NPU on standard shape `s` with X; a column split of the NPU
    /// running all rows one way, with X) has a lower bound: the first side costs at least `ρ·r`
    /// for the `r` rows' worth of output it computes and the other at least `β·(m − r)`, so the
    /// concurrent time is at least `max` of the two at their crossing, plus both syncs and the
    /// pair's split cost. Families are visited in increasing bound and the search stops once
    /// the bound reaches the best split found or the hysteresis gate.
    pub(crate) fn solve(&self, fam: Families, gain: f64) -> Option<(Split, Cost)> {
        let (m, n) = (self.m, self.n());
        let mut single = Best::EMPTY;
        for b in [Backend::Cpu, Backend::Gpu] {
            if fam.single[b.index()] && self.side(b).is_some() {
                single.offer(
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
        // Static NPU graphs first, so that the online one is costed only when its preparation
        // alone is below the best single plan so far (and, for column splits, below the gate).
        let static_exec = self.npu_static_exec();
        if fam.single[Backend::Npu.index()] {
            if let Some(e) = static_exec {
                single.offer(
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
        let cutoff = if fam.single[Backend::Npu.index()] {
            single.total()
        } else {
            single.total() * (1.0 - gain)
        };
        let npu_full = [static_exec, self.npu_online_exec(cutoff)];
        if fam.single[Backend::Npu.index()] {
            if let Some(e) = npu_full[1] {
                single.offer(
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
        // A split is kept only below the gate: the hysteresis.
        let gate = single.total() * (1.0 - gain);
        let mut split = Best::EMPTY;
        self.search_splits(fam, gate, &npu_full, &mut split);
        match (split.best, single.best) {
            (Some(s), _) if s.1.total_us < gate => Some(s),
            (s, None) => s,
            (_, Some(one)) => Some(one),
        }
    }

    /// The cheapest two-backend split below `gate`, into `best`.
    fn search_splits(
        &self,
        fam: Families,
        gate: f64,
        npu_full: &[Option<NpuExec>; 2],
        best: &mut Best,
    ) {
        let (m, n) = (self.m, self.n());
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
        // A small margin keeps rounding in the bound from cutting a tie-level candidate.
        let below = |lb: f64, cut: f64| lb * (1.0 - 1e-9) < cut;
        let mut push = |lb: f64, x: Backend, kind: usize| {
            // Families whose bound already reaches the gate are never visited.
            if below(lb, gate) {
                fams[len] = (lb, x, kind);
                len += 1;
            }
        };
        let mf = m as f64;
        let inv_m = self.inv_m;
        // Lower bound of max(p + ρ·a, β·(m − a)) over a in [0, a_max] (a: full-width rows'
        // worth of output on the first backend): convex in a, least at the crossing.
        let bound = |p: f64, rho: f64, beta: f64, a_max: f64| {
            // max/min rather than clamp: no assertion on the hot path (NaN is caught below).
            let a = ((beta * mf - p) / (rho + beta)).max(0.0).min(a_max);
            let v = (p + rho * a).max(beta * (mf - a));
            if v.is_nan() {
                0.0
            } else {
                v
            }
        };
        if let (true, Some(cpu), Some(gpu)) = (
            fam.columns[0],
            self.side(Backend::Cpu),
            self.side(Backend::Gpu),
        ) {
            // The CPU block of c columns (c a multiple of 64) costs full · c / ceil64(n).
            let tiles = if n % COL_TILE == 0 {
                1.0
            } else {
                n as f64 / ceil_to(n, COL_TILE) as f64
            };
            let rho = cpu.full_us * inv_m * tiles;
            let fixed = cpu.sync_us + gpu.sync_us + self.pair(Backend::Cpu, Backend::Gpu).split_us;
            let lb = bound(0.0, rho, gpu.full_us * inv_m, mf) + fixed;
            push(lb, Backend::Gpu, CPU_GPU);
        }
        if let Some(npu) = self.npu() {
            let copy = ELEM_BYTES * npu.copy;
            for x in [Backend::Cpu, Backend::Gpu] {
                let Some(side) = self.side(x) else { continue };
                let beta = side.per_row_lb;
                let fixed = npu.sync_us + side.sync_us + self.pair(Backend::Npu, x).split_us;
                for (i, (&s, f)) in npu.standard.iter().zip(&npu.fams).enumerate() {
                    if s >= m {
                        break;
                    }
                    if !f.t.is_finite() {
                        continue;
                    }
                    let sf = s as f64;
                    if fam.npu_rows_with[x.index()] {
                        // j chunks cost exactly j·A on the NPU; X at least β·(m − j·s).
                        let a1 = f.chunk_us;
                        let j_max = ((m - 1) / s) as f64;
                        let jc = (beta * mf / (a1 + beta * sf)).max(1.0).min(j_max);
                        let at = |j: f64| (j * a1).max(beta * (mf - j * sf));
                        // jc >= 1: truncation floors; floor + 1 covers the ceiling.
                        let j0 = (jc as u32) as f64;
                        let lb = at(j0).min(at((j0 + 1.0).min(j_max)));
                        push(lb + fixed, x, ROW + i);
                    }
                    if fam.hybrid_with[x.index()] {
                        // NPU: s rows on c columns, a = s·c/n rows' worth, a <= s.
                        push(bound(f.hyb_p, f.hyb_rho, beta, sf) + fixed, x, HYB + i);
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
                            let p = prep + mf * self.s.k as f64 * copy;
                            let rho = t * inv_m + n as f64 * copy;
                            let lb = bound(p, rho, side.full_us * inv_m, mf) + fixed;
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
            if !below(lb, gate.min(best.total())) {
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
                self.offer_columns(best, base);
                continue;
            }
            let Some(npu) = self.npu() else { break };
            if kind >= WC {
                let base = Split {
                    a: Backend::Npu,
                    b: Some(x),
                    rows: m,
                    cols: n,
                    npu: npu_full[kind - WC],
                };
                self.offer_columns(best, base);
                continue;
            }
            let idx = kind % MAX_STANDARD;
            let s = npu.standard[idx];
            let order = npu.fams[idx].order;
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
                self.offer_columns(best, split(1));
                continue;
            }
            self.offer_rows(best, x, s, &split);
        }
    }

    /// Best NPU row split on standard shape `s` with partner `x` (`split(j)`: `j` chunks).
    fn offer_rows(&self, best: &mut Best, x: Backend, s: u32, split: &dyn Fn(u32) -> Split) {
        let m = self.m;
        let j_max = (m - 1) / s;
        if self.pair(Backend::Npu, x).overlap < 1.0 {
            // Not fully concurrent: max(A, B) + (1 − overlap)·min(A, B) need not be unimodal
            // in j (B is a curve), so every j is costed.
            for j in 1..=j_max {
                best.offer(self, split(j));
            }
            return;
        }
        // Concurrent: the NPU time grows and X's shrinks with j, and the bus time is the same
        // for every j, so the minimum is at the smallest j with NPU time >= X's, or j - 1.
        // The NPU side is j runs of one chunk, chunk copies included: j times the one-chunk
        // time (to rounding; the candidates are then costed exactly).
        let (c1, p1) = self.a_time(&split(1));
        let per_chunk = c1 + p1;
        let pred = |j: u32| {
            let (cb, pb) = self.b_time(&split(j));
            j as f64 * per_chunk >= cb + pb
        };
        // Below the crossing of j·A with β·(m − j·s) the NPU side is surely shorter (X costs
        // at least β per row), so the search starts there and gallops up.
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
}
