//! The cost of one split of one matmul: the profile's curves for one weight shape and phase
//! ([`ShapeModel`], found once per shape), read at one row count ([`OpModel`]).

use crate::checked::{pair_index, CheckedProfile, MAX_STANDARD};
use crate::curve::{ceil_to, Curve};
use crate::plan::{Cost, Extrapolation, PlanError, Split, COL_TILE, ELEM_BYTES, FAR};
use crate::profile::{Backend, Order, Phase};

/// A CPU or GPU backend's curve for one shape.
#[derive(Clone, Copy)]
pub(crate) struct SideShape<'p> {
    pub curve: &'p Curve,
    pub scale: f64,
    pub sync_us: f64,
    /// µs per byte copied (0: zero copy).
    pub copy: f64,
    /// Bytes per weight element streamed.
    pub wbytes: f64,
}

/// The NPU's curves for one shape.
pub(crate) struct NpuShape<'p> {
    pub curves: [Option<(&'p Curve, f64)>; 2],
    pub sync_us: f64,
    pub copy: f64,
    pub wbytes: f64,
    pub standard: &'p [u32],
    pub prepare: Option<f64>,
    /// Latency of each standard graph in each order (INFINITY without a curve), scaled.
    pub std_us: [[f64; 2]; MAX_STANDARD],
    /// Per standard graph: its faster order and time, and the solver's row-independent
    /// family constants (found once per shape, used at every row count).
    pub fams: [StdFamily; MAX_STANDARD],
}

/// What the solver needs about one standard NPU graph of one shape, whatever the row count.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StdFamily {
    /// The faster order (ActivationFirst on ties) and its time per run, µs.
    pub order: Order,
    pub t: f64,
    /// One chunk in a row split: run plus its rows' copies in and out, µs.
    pub chunk_us: f64,
    /// Hybrid: the NPU's fixed copy-in of its rows, µs, and its µs per full-width row's worth
    /// of output (run per row plus output copy).
    pub hyb_p: f64,
    pub hyb_rho: f64,
}

/// Everything about one weight shape in one phase that does not depend on the row count.
pub(crate) struct ShapeModel<'p> {
    pub p: &'p CheckedProfile,
    pub phase: Phase,
    pub k: u32,
    pub n: u32,
    /// `1 / n`.
    pub inv_n: f64,
    /// `1 / ceil64(n)`.
    pub inv_n64: f64,
    pub cpu: Option<SideShape<'p>>,
    pub gpu: Option<SideShape<'p>>,
    pub npu: Option<NpuShape<'p>>,
}

impl<'p> ShapeModel<'p> {
    pub(crate) fn new(
        p: &'p CheckedProfile,
        phase: Phase,
        k: u32,
        n: u32,
    ) -> Result<Self, PlanError> {
        if k == 0 || n == 0 {
            return Err(PlanError::ZeroShape);
        }
        let side = |b: Backend| {
            p.model(b).and_then(|bm| {
                bm.curve(phase, k, n, Order::ActivationFirst)
                    .map(|(curve, scale)| SideShape {
                        curve,
                        scale,
                        sync_us: bm.sync_us,
                        copy: bm.copy_us_per_byte,
                        wbytes: bm.weight_bytes,
                    })
            })
        };
        let npu = p.model(Backend::Npu).and_then(|bm| {
            let curves = Order::ALL.map(|o| bm.curve(phase, k, n, o));
            if curves.iter().all(Option::is_none) {
                return None;
            }
            let mut std_us = [[f64::INFINITY; 2]; MAX_STANDARD];
            for (o, c) in curves.iter().enumerate() {
                if let Some((c, scale)) = c {
                    for (t, &u) in std_us.iter_mut().zip(&c.std_us) {
                        t[o] = u * scale;
                    }
                }
            }
            let copy = ELEM_BYTES * bm.copy_us_per_byte;
            let (kf, nf) = (k as f64, n as f64);
            let mut fams = [StdFamily {
                order: Order::ActivationFirst,
                t: f64::INFINITY,
                chunk_us: f64::INFINITY,
                hyb_p: 0.0,
                hyb_rho: f64::INFINITY,
            }; MAX_STANDARD];
            for ((f, st), &sz) in fams.iter_mut().zip(&std_us).zip(&bm.standard_m) {
                let (order, t) = if st[1] < st[0] {
                    (Order::WeightFirst, st[1])
                } else {
                    (Order::ActivationFirst, st[0])
                };
                let sf = sz as f64;
                *f = StdFamily {
                    order,
                    t,
                    chunk_us: t + sf * (kf + nf) * copy,
                    hyb_p: sf * kf * copy,
                    hyb_rho: t / sf + nf * copy,
                };
            }
            Some(NpuShape {
                curves,
                sync_us: bm.sync_us,
                copy: bm.copy_us_per_byte,
                wbytes: bm.weight_bytes,
                standard: &bm.standard_m,
                prepare: bm.prepare_us,
                std_us,
                fams,
            })
        });
        Ok(ShapeModel {
            p,
            phase,
            k,
            n,
            inv_n: 1.0 / n as f64,
            inv_n64: 1.0 / ceil_to(n, COL_TILE) as f64,
            cpu: side(Backend::Cpu),
            gpu: side(Backend::Gpu),
            npu,
        })
    }

    pub(crate) fn side(&self, b: Backend) -> Option<&SideShape<'p>> {
        match b {
            Backend::Cpu => self.cpu.as_ref(),
            Backend::Gpu => self.gpu.as_ref(),
            Backend::Npu => None,
        }
    }

    /// Whether `b` can run in this phase.
    pub(crate) fn present(&self, b: Backend) -> bool {
        match b {
            Backend::Npu => self.npu.is_some(),
            _ => self.side(b).is_some(),
        }
    }
}

/// A CPU or GPU backend at the op's row count.
#[derive(Clone, Copy)]
pub(crate) struct SideAt {
    /// Latency of all `m` rows, full width.
    pub full_us: f64,
    /// A lower bound of `latency(q rows) / q` for every `1 <= q <= m` (for pruning the NPU
    /// families; 0 without an NPU).
    pub per_row_lb: f64,
    pub sync_us: f64,
}

/// One matmul: a shape at a row count.
pub(crate) struct OpModel<'s, 'p> {
    pub s: &'s ShapeModel<'p>,
    pub m: u32,
    /// `1 / m`.
    pub inv_m: f64,
    cpu: Option<SideAt>,
    gpu: Option<SideAt>,
}

impl<'s, 'p> OpModel<'s, 'p> {
    pub(crate) fn new(s: &'s ShapeModel<'p>, m: u32) -> Result<Self, PlanError> {
        if m == 0 {
            return Err(PlanError::ZeroShape);
        }
        // The per-row bound only serves the NPU families' pruning.
        let npu = s.npu.is_some();
        let at = |sd: &Option<SideShape<'p>>| {
            sd.map(|sd| SideAt {
                full_us: sd.curve.lat(m) * sd.scale,
                per_row_lb: if npu {
                    sd.curve.per_row_lb(m) * sd.scale
                } else {
                    0.0
                },
                sync_us: sd.sync_us,
            })
        };
        Ok(OpModel {
            s,
            m,
            inv_m: 1.0 / m as f64,
            cpu: at(&s.cpu),
            gpu: at(&s.gpu),
        })
    }

    pub(crate) fn n(&self) -> u32 {
        self.s.n
    }

    pub(crate) fn side(&self, b: Backend) -> Option<&SideAt> {
        match b {
            Backend::Cpu => self.cpu.as_ref(),
            Backend::Gpu => self.gpu.as_ref(),
            Backend::Npu => None,
        }
    }

    pub(crate) fn npu(&self) -> Option<&NpuShape<'p>> {
        self.s.npu.as_ref()
    }

    /// What two backends share when they split this op.
    pub(crate) fn pair(&self, a: Backend, b: Backend) -> crate::checked::PairModel {
        self.s.p.pairs[pair_index(a, b)]
    }

    /// Full-width latency of `rows` rows on CPU or GPU (the CPU and GPU models).
    pub(crate) fn rows_us(&self, b: Backend, rows: u32) -> f64 {
        if rows == self.m {
            if let Some(sd) = self.side(b) {
                return sd.full_us;
            }
        }
        match self.s.side(b) {
            Some(sd) => sd.curve.lat(rows) * sd.scale,
            None => f64::INFINITY,
        }
    }

    /// Fraction of the full-width time a block of `cols` columns costs on `b`.
    pub(crate) fn col_frac(&self, b: Backend, cols: u32) -> f64 {
        if cols == self.s.n {
            return 1.0;
        }
        match b {
            Backend::Cpu => ceil_to(cols, COL_TILE) as f64 * self.s.inv_n64,
            _ => cols as f64 * self.s.inv_n,
        }
    }

    /// NPU latency of one run of a `graph_m`-row graph, full width (NPU-1 step, NPU-3 shape).
    pub(crate) fn npu_graph_us(&self, graph_m: u32, order: Order) -> f64 {
        let Some(npu) = self.npu() else {
            return f64::INFINITY;
        };
        if let Ok(i) = npu.standard.binary_search(&graph_m) {
            return npu.std_us[i][order as usize];
        }
        match npu.curves[order as usize] {
            Some((c, scale)) => c.lat(graph_m) * scale,
            None => f64::INFINITY,
        }
    }

    fn copy_rate(&self, b: Backend) -> f64 {
        match b {
            Backend::Npu => self.npu().map_or(0.0, |s| s.copy),
            _ => self.s.side(b).map_or(0.0, |s| s.copy),
        }
    }

    fn copy_us(&self, b: Backend, in_rows: u32, out_elems: u64) -> f64 {
        let rate = self.copy_rate(b);
        if rate == 0.0 {
            return 0.0;
        }
        (in_rows as f64 * self.s.k as f64 + out_elems as f64) * ELEM_BYTES * rate
    }

    pub(crate) fn sync(&self, b: Backend) -> f64 {
        match b {
            Backend::Npu => self.npu().map_or(0.0, |s| s.sync_us),
            _ => self.s.side(b).map_or(0.0, |s| s.sync_us),
        }
    }

    fn wbytes(&self, b: Backend) -> f64 {
        match b {
            Backend::Npu => self.npu().map_or(0.0, |s| s.wbytes),
            _ => self.s.side(b).map_or(0.0, |s| s.wbytes),
        }
    }

    /// Time of `a`'s block (compute + prep, copy).
    pub(crate) fn a_time(&self, s: &Split) -> (f64, f64) {
        let frac = self.col_frac(s.a, s.cols);
        let compute = match (s.a, s.npu) {
            (Backend::Npu, Some(e)) => {
                let prep = if e.online {
                    self.npu().and_then(|n| n.prepare).unwrap_or(f64::INFINITY)
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
    pub(crate) fn b_time(&self, s: &Split) -> (f64, f64) {
        let Some(b) = s.b else { return (0.0, 0.0) };
        let n = self.s.n;
        let mut compute = 0.0;
        let mut out = 0u64;
        if s.cols < n {
            compute += self.rows_us(b, s.rows) * self.col_frac(b, n - s.cols);
            out += s.rows as u64 * (n - s.cols) as u64;
        }
        if s.rows < self.m {
            compute += self.rows_us(b, self.m - s.rows);
            out += (self.m - s.rows) as u64 * n as u64;
        }
        let in_rows = if s.cols < n { self.m } else { self.m - s.rows };
        (compute, self.copy_us(b, in_rows, out))
    }

    /// Bytes a two-backend split streams: each piece reads its weight columns once (at its
    /// backend's `weight_bytes`) and its activation rows, and writes its output block
    /// (activations and outputs at [`ELEM_BYTES`]). Affine in the column split, constant in
    /// the row split: what keeps the solver's searches exact with the shared-bus term.
    pub(crate) fn bytes(&self, s: &Split) -> f64 {
        let Some(b) = s.b else { return 0.0 };
        let (k, n, m) = (self.s.k as f64, self.s.n as f64, self.m as f64);
        let (r, c, e) = (s.rows as f64, s.cols as f64, ELEM_BYTES);
        let (wa, wb) = (self.wbytes(s.a), self.wbytes(b));
        let mut t = k * c * wa + r * (k + c) * e;
        if s.cols < self.s.n {
            t += k * (n - c) * wb + r * (k + n - c) * e;
        }
        if s.rows < self.m {
            t += k * n * wb + (m - r) * (k + n) * e;
        }
        t
    }

    /// Checks a split against the shape, the profile and the phase.
    pub(crate) fn validate(&self, s: &Split) -> Result<(), PlanError> {
        let (m, n) = (self.m, self.s.n);
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
            if !self.s.p.has(b) {
                return Err(PlanError::MissingBackend(b));
            }
            if !self.s.present(b) {
                return Err(PlanError::NoPath(b, self.s.phase));
            }
        }
        match (s.a, s.npu) {
            (Backend::Npu, Some(e)) => {
                let npu = self.npu().ok_or(PlanError::MissingBackend(Backend::Npu))?;
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

    /// Cost of a split assumed valid. One backend: its time plus its sync. Two: the pair's
    /// concurrent time `max(a, b) + (1 − overlap)·min(a, b)`, at least the time the bus needs
    /// for both sides' bytes, plus both syncs and the pair's split cost.
    pub(crate) fn cost(&self, s: &Split) -> Cost {
        let (ca, pa) = self.a_time(s);
        let (cb, pb) = self.b_time(s);
        let (a_us, b_us) = (ca + pa, cb + pb);
        let mut sync_us = self.sync(s.a);
        let (mut split_us, mut bus_us, mut run) = (0.0, 0.0, a_us);
        if let Some(b) = s.b {
            sync_us += self.sync(b);
            let pair = self.pair(s.a, b);
            split_us = pair.split_us;
            let (hi, lo) = if a_us >= b_us {
                (a_us, b_us)
            } else {
                (b_us, a_us)
            };
            run = if pair.overlap >= 1.0 {
                hi
            } else {
                hi + (1.0 - pair.overlap) * lo
            };
            if pair.bus_us_per_byte > 0.0 {
                bus_us = self.bytes(s) * pair.bus_us_per_byte;
                run = run.max(bus_us);
            }
            if !(a_us.is_finite() && b_us.is_finite()) {
                run = f64::INFINITY;
            }
        }
        Cost {
            a_us,
            b_us,
            copy_us: pa + pb,
            sync_us,
            split_us,
            bus_us,
            total_us: run + sync_us + split_us,
        }
    }

    /// The farthest extrapolation a split's pieces lean on, if more than [`FAR`].
    pub(crate) fn extrapolation(&self, s: &Split) -> Option<Extrapolation> {
        let mut worst: Option<Extrapolation> = None;
        let mut consider = |backend: Backend, curve: &Curve, scale: f64, rows: u32| {
            let (q, near) = curve.read_at(rows);
            let rf = q.max(near) as f64 / q.min(near).max(1) as f64;
            let factor = rf.max(scale).max(1.0 / scale);
            if factor > FAR && worst.is_none_or(|w| factor > w.factor) {
                worst = Some(Extrapolation {
                    backend,
                    rows: q,
                    nearest_m: near,
                    k: self.s.k,
                    n: self.s.n,
                    nearest_k: curve.k,
                    nearest_n: curve.n,
                    factor,
                });
            }
        };
        match (s.a, s.npu) {
            (Backend::Npu, Some(e)) => {
                if let Some((c, sc)) = self.npu().and_then(|n| n.curves[e.order as usize]) {
                    consider(Backend::Npu, c, sc, e.graph_m);
                }
            }
            (b, _) => {
                if let Some(sd) = self.s.side(b) {
                    consider(b, sd.curve, sd.scale, s.rows);
                }
            }
        }
        if let Some(sd) = s.b.and_then(|b| self.s.side(b).map(|sd| (b, sd))) {
            let (b, sd) = sd;
            if s.cols < self.s.n {
                consider(b, sd.curve, sd.scale, s.rows);
            }
            if s.rows < self.m {
                consider(b, sd.curve, sd.scale, self.m - s.rows);
            }
        }
        worst
    }
}
