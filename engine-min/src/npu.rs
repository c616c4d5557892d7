//! The NPU backend: the engine's matmuls on the Qualcomm HTP through `qnn-sys` (the x86 HTP
//! simulator here), with HeteroInfer's activation-centric row split.
//!
//! * `prepare` dequantizes each weight once to FP16 and builds one static FP16 MatMul graph
//!   for it at each standard sequence length (`S` = [`NpuOptions::seq`], default 32, plus
//!   [`NpuOptions::extra_seqs`], e.g. 128). Weights of more than
//!   [`NpuOptions::max_graph_elems`] elements (the LM head, 49152 x 576) get no graph and
//!   always run on the partner: building them is slow on the simulator.
//! * `matmul` of `m` rows: the first rows are covered by as many chunks of the largest length
//!   as fit, then of the next one, ... (each chunk's output rows are contiguous in `out`, so
//!   no concat copy); the remaining rows (fewer than the smallest `S`) go to the partner
//!   backend (CPU, or GPU). Decode (`m < S`) is all partner. The NPU chunks (on a helper
//!   thread) and the partner's rows (on the caller) run concurrently into disjoint row ranges
//!   of the one output; a `hetero_sync::DependencyBarrier` of the two releases the caller.
//! * Activations are converted to FP16 into a staging buffer and the FP16 output back to f32,
//!   both sized in `reserve` (for the largest length). A call with both an NPU and a partner
//!   part spawns its helper thread (scoped): that allocates per prefill call; decode calls
//!   (all partner) do not.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use half::f16;
use half::slice::HalfFloatSliceExt;
use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order, WeightLayout};
use qnn_sys::{BackendLibrary, Session, SessionOptions};

use crate::backend::{Backend, BackendError, WeightView};
use crate::quant;

/// Settings of the NPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpuOptions {
    /// The standard sequence length `S` every graph is built for (rows per NPU chunk).
    pub seq: usize,
    /// Largest weight (`n * k` elements) that gets an NPU graph; larger ones (the LM head)
    /// stay on the partner. Default 4 Mi elements: every SmolLM2-135M layer weight (at most
    /// 1536 x 576) fits, its 49152 x 576 output head does not.
    pub max_graph_elems: usize,
    /// HTP SoC model of the session's device config (69 = SM8750, as qnn-sys's tests use).
    pub soc_model: u32,
    /// More standard lengths (0 = unused), e.g. `[128, 0, 0]`: each weight gets a graph at
    /// `seq` and at each of these; an `m`-row matmul is covered by the largest graphs first,
    /// then smaller ones, and the remainder goes to the partner (HeteroInfer's multi-size
    /// static graphs).
    pub extra_seqs: [usize; 3],
    /// HeteroInfer's weight-centric split: the NPU's share of every weight's output columns in
    /// thousandths (0 = off, the activation-centric split: whole weights on the NPU). With a
    /// share, each graph holds the first `hetero_partition::ratio_cols(n, share)` columns
    /// (64-column grid) and the partner computes the others for the same rows at the same
    /// time, writing its columns of the one output in place (`Backend::matmul_ld`); rows not
    /// covered by graphs run wholly on the partner.
    pub weight_share_permille: u16,
}

impl NpuOptions {
    /// The standard lengths in use, largest first (at most 4).
    pub fn lengths(&self) -> impl Iterator<Item = usize> {
        let mut v = [
            self.seq,
            self.extra_seqs[0],
            self.extra_seqs[1],
            self.extra_seqs[2],
        ];
        v.sort_unstable_by(|a, b| b.cmp(a));
        let mut last = 0;
        v.into_iter().filter(move |&s| {
            let keep = s > 0 && s != last;
            last = s;
            keep
        })
    }

    /// How many chunks of each standard length (largest first) cover `m` rows, and the rows
    /// they cover; the remaining `m - covered` rows go to the partner.
    pub fn cover(&self, m: usize) -> ([(usize, usize); 4], usize) {
        let mut out = [(0, 0); 4];
        let mut rem = m;
        for (i, s) in self.lengths().enumerate() {
            out[i] = (s, rem / s);
            rem %= s;
        }
        (out, m - rem)
    }
}

impl Default for NpuOptions {
    fn default() -> Self {
        Self {
            seq: 32,
            max_graph_elems: 1 << 22,
            soc_model: 69,
            extra_seqs: [0; 3],
            weight_share_permille: 0,
        }
    }
}

/// Why the NPU backend could not be opened.
#[derive(Debug)]
pub enum NpuError {
    /// The sequence length is zero.
    BadSeq(usize),
    /// The HTP backend library (`QNN_HTP_LIB`) could not be loaded or the session failed.
    Qnn(qnn_sys::Error),
}

impl fmt::Display for NpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSeq(s) => write!(f, "NPU sequence length {s} must be at least 1"),
            Self::Qnn(e) => write!(f, "QNN HTP backend unavailable: {e}"),
        }
    }
}

impl std::error::Error for NpuError {}

/// Counters of an [`NpuBackend`], shared (an `Arc`) so they stay readable after the backend
/// is moved into an engine.
#[derive(Debug, Default)]
pub struct NpuStats {
    graphs: AtomicUsize,
    prepare_ns: AtomicU64,
    npu_ns: AtomicU64,
}

impl NpuStats {
    /// Number of weights with an NPU graph.
    pub fn graphs(&self) -> usize {
        self.graphs.load(Ordering::Relaxed)
    }

    /// Total graph preparation time: `build_time()` (graph build + `graphFinalize`) summed
    /// over all graphs; the weights' dequantization to FP16 is not included.
    pub fn prepare_time(&self) -> Duration {
        Duration::from_nanos(self.prepare_ns.load(Ordering::Relaxed))
    }

    /// Wall time spent in NPU chunks (FP16 conversions and graph executions) so far.
    pub fn npu_time(&self) -> Duration {
        Duration::from_nanos(self.npu_ns.load(Ordering::Relaxed))
    }
}

struct Staging {
    x: Vec<f16>,
    y: Vec<f16>,
    /// The weight-centric split's NPU outputs for every covered row (`rows * cols`), kept until
    /// the partner's columns are written.
    yw: Vec<f16>,
}

/// Matmuls on the NPU in chunks of `S` rows, the remainder (and decode) on a partner backend.
pub struct NpuBackend {
    session: Arc<Session>,
    partner: Box<dyn Backend>,
    opts: NpuOptions,
    /// Graphs keyed by the address and length of the weight's bytes and the graph's rows.
    graphs: HashMap<(usize, usize, usize), MatMulGraph<f16>>,
    /// Columns each weight's graphs hold (its `n` without a weight-centric split).
    npu_cols: HashMap<(usize, usize), usize>,
    /// The NPU's side of a concurrent call arrives here (producer 0), the partner's too (1).
    barrier: hetero_sync::DependencyBarrier,
    staging: Mutex<Staging>,
    max_k: usize,
    max_n: usize,
    stats: Arc<NpuStats>,
    name: String,
}

fn qerr(e: qnn_sys::Error) -> BackendError {
    BackendError::Kernel(format!("qnn: {e}"))
}

impl NpuBackend {
    /// Loads the HTP backend from `$QNN_HTP_LIB`, opens a session (device config SoC
    /// `opts.soc_model`) and wraps `partner`. Only one session per process: a process that
    /// needs several NPU backends shares one session through [`NpuBackend::with_session`].
    pub fn open(partner: Box<dyn Backend>, opts: NpuOptions) -> Result<Self, NpuError> {
        let lib = Arc::new(BackendLibrary::load_htp().map_err(NpuError::Qnn)?);
        let session = Session::new(
            lib,
            &SessionOptions {
                soc_model: Some(opts.soc_model),
                ..Default::default()
            },
        )
        .map_err(NpuError::Qnn)?;
        Self::with_session(session, partner, opts)
    }

    /// As [`open`](Self::open) on an existing session (pass `session.new_context()` to keep
    /// the graphs of several backends in separate contexts).
    pub fn with_session(
        session: Arc<Session>,
        partner: Box<dyn Backend>,
        opts: NpuOptions,
    ) -> Result<Self, NpuError> {
        if opts.seq == 0 {
            return Err(NpuError::BadSeq(0));
        }
        if opts.weight_share_permille > 1000 {
            return Err(NpuError::BadSeq(opts.seq));
        }
        let lens: Vec<String> = opts.lengths().map(|s| s.to_string()).collect();
        let name = match opts.weight_share_permille {
            0 => format!("npu (S={}) + {}", lens.join(","), partner.name()),
            p => format!(
                "npu (S={}, {:.1}% of columns) + {}",
                lens.join(","),
                f64::from(p) / 10.0,
                partner.name()
            ),
        };
        Ok(Self {
            session,
            partner,
            opts,
            graphs: HashMap::new(),
            barrier: hetero_sync::DependencyBarrier::new(2)
                .map_err(|_| NpuError::BadSeq(opts.seq))?,
            staging: Mutex::new(Staging {
                x: Vec::new(),
                y: Vec::new(),
                yw: Vec::new(),
            }),
            npu_cols: HashMap::new(),
            max_k: 0,
            max_n: 0,
            stats: Arc::default(),
            name,
        })
    }

    /// The session the graphs live in.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The backend's counters (graphs, preparation time, NPU time).
    pub fn stats(&self) -> Arc<NpuStats> {
        Arc::clone(&self.stats)
    }

    /// Rows of an `m`-row matmul on `w` that run on the NPU.
    pub fn npu_rows(&self, w: &WeightView<'_>, m: usize) -> usize {
        let (k0, k1) = key(w);
        if self.graphs.contains_key(&(k0, k1, self.opts.seq)) {
            self.opts.cover(m).1
        } else {
            0
        }
    }

    /// Columns of `w` whose graphs hold (`n` without a weight-centric split).
    fn cols_for(&self, n: usize) -> usize {
        match self.opts.weight_share_permille {
            0 => n,
            p => hetero_partition::ratio_cols(n as u32, f64::from(p) / 1000.0)
                .map_or(n, |c| c as usize),
        }
    }

    fn stage(&mut self, rows: usize, k: usize, n: usize) {
        let s = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
        if s.x.len() < rows * k {
            s.x.resize(rows * k, f16::ZERO);
        }
        if s.y.len() < rows * n {
            s.y.resize(rows * n, f16::ZERO);
        }
    }
}

fn key(w: &WeightView<'_>) -> (usize, usize) {
    (w.data.as_ptr() as usize, w.data.len())
}

/// Rows `c..n` of `w` (output columns `c..n`; `rb` bytes per row).
fn sub_weight<'a>(w: &WeightView<'a>, rb: usize, c: usize) -> WeightView<'a> {
    WeightView {
        n: w.n - c,
        data: &w.data[c * rb..],
        ..*w
    }
}

impl NpuBackend {
    /// Runs `npu` on a scoped helper thread and `partner` on this one; each arrives at the
    /// backend's `DependencyBarrier` when its part of the output is written, and this returns
    /// once the barrier has released (both parts done) with the first error, if any.
    fn concurrently(
        &self,
        npu: impl FnOnce() -> Result<(), BackendError> + Send,
        partner: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let epoch = hetero_sync::next_epoch(self.barrier.completed_epoch());
        let berr = |e: hetero_sync::SyncError| BackendError::Kernel(format!("barrier: {e}"));
        let barrier = &self.barrier;
        let (rn, rp) = std::thread::scope(|sc| {
            let h = sc.spawn(move || {
                let r = npu();
                (r, barrier.arrive(0, epoch))
            });
            let rp = partner();
            let ap = barrier.arrive(1, epoch);
            let waited = barrier.wait(
                epoch,
                &hetero_sync::WaitConfig {
                    timeout: std::time::Duration::from_secs(600),
                    ..Default::default()
                },
                None,
            );
            let (rn, an) = h.join().unwrap_or_else(|_| {
                (
                    Err(BackendError::Kernel("NPU thread panicked".into())),
                    Ok(hetero_sync::Arrival::Completed),
                )
            });
            (
                rn.and(an.map(|_| ()).map_err(berr)),
                rp.and(ap.map(|_| ()).map_err(berr))
                    .and(waited.map(|_| ()).map_err(berr)),
            )
        });
        rn?;
        rp?;
        Ok(())
    }

    /// The weight-centric split: for the first `rows` rows the graphs compute columns `0..c`
    /// (into FP16 staging, on a helper thread) while the partner writes columns `c..n` of the
    /// same rows straight into `out` (strided, no scratch); the partner then computes the rows
    /// the graphs do not cover, whole. Both sides arrive at the barrier; once it releases, the
    /// NPU's columns leave their staging for `out`.
    fn matmul_weight_split(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        rows: usize,
        c: usize,
    ) -> Result<(), BackendError> {
        let (n, k) = (w.n, w.k);
        let rb = quant::row_bytes(w.ty, k).ok_or(BackendError::Unsupported(w.ty))?;
        let (k0, k1) = key(w);
        let (chunks, _) = self.opts.cover(m);
        let part = sub_weight(w, rb, c);
        let mut st = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        let smax = chunks[0].0;
        if st.x.len() < smax * k || st.y.len() < smax * c || st.yw.len() < rows * c {
            // Only when `reserve` was not called: sized once, then reused.
            st.x.resize(st.x.len().max(smax * k), f16::ZERO);
            st.y.resize(st.y.len().max(smax * c), f16::ZERO);
            st.yw.resize(st.yw.len().max(rows * c), f16::ZERO);
        }
        let (sx, yw) = (&mut st.x, &mut st.yw[..rows * c]);
        let xn = &x[..rows * k];
        let npu_part = move || -> Result<(), BackendError> {
            let t0 = Instant::now();
            let mut r0 = 0;
            for &(s, count) in chunks.iter().filter(|ch| ch.0 > 0) {
                let g = self
                    .graphs
                    .get(&(k0, k1, s))
                    .ok_or(BackendError::Kernel(format!("no NPU graph of {s} rows")))?;
                for _ in 0..count {
                    let sx = &mut sx[..s * k];
                    sx.convert_from_f32_slice(&xn[r0 * k..(r0 + s) * k]);
                    g.execute(sx, &mut yw[r0 * c..(r0 + s) * c]).map_err(qerr)?;
                    r0 += s;
                }
            }
            self.stats
                .npu_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Ok(())
        };
        self.concurrently(npu_part, || {
            // The partner: columns c..n of the covered rows in place, then the other rows.
            self.partner.matmul_ld(&part, xn, rows, &mut out[c..], n)?;
            if rows < m {
                self.partner
                    .matmul(w, &x[rows * k..], m - rows, &mut out[rows * n..])?;
            }
            Ok(())
        })?;
        // The barrier released: the NPU's columns into each covered row.
        for (r, y) in st.yw[..rows * c].chunks_exact(c).enumerate() {
            y.convert_to_f32_slice(&mut out[r * n..r * n + c]);
        }
        Ok(())
    }
}

impl Backend for NpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        self.partner.prepare(w)?;
        let (n, k) = (w.n, w.k);
        let (k0, k1) = key(w);
        if n * k > self.opts.max_graph_elems || self.graphs.contains_key(&(k0, k1, self.opts.seq)) {
            return Ok(());
        }
        let rb = quant::row_bytes(w.ty, k).ok_or(BackendError::Unsupported(w.ty))?;
        if w.data.len() != n * rb {
            return Err(BackendError::Shape("weight bytes"));
        }
        // Weight-centric: the graphs hold the first c columns, the partner the rest.
        let c = self.cols_for(n);
        if c == 0 {
            return Ok(());
        }
        if c < n {
            self.partner.prepare(&sub_weight(w, rb, c))?;
        }
        self.npu_cols.insert((k0, k1), c);
        let n = c;
        // Wᵀ[N,K] (GGUF layout) in FP16, dequantized once.
        let mut w16 = vec![f16::ZERO; n * k];
        let mut row = vec![0f32; k];
        for r in 0..n {
            quant::dequantize_row(w.ty, &w.data[r * rb..(r + 1) * rb], &mut row);
            w16[r * k..(r + 1) * k].convert_from_f32_slice(&row);
        }
        for s in self.opts.lengths() {
            let shape = MatMulShape { m: s, k, n };
            let g = MatMulGraph::new(
                &self.session,
                shape,
                &w16,
                Order::Direct,
                &GraphOptions {
                    weights: WeightLayout::NxK,
                    ..GraphOptions::default()
                },
            )
            .map_err(qerr)?;
            let st = &self.stats;
            st.prepare_ns
                .fetch_add(g.build_time().as_nanos() as u64, Ordering::Relaxed);
            st.graphs.fetch_add(1, Ordering::Relaxed);
            self.graphs.insert((k0, k1, s), g);
        }
        self.max_k = self.max_k.max(k);
        self.max_n = self.max_n.max(n);
        Ok(())
    }

    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        self.partner.reserve(max_tokens, max_k);
        let s = self.opts.lengths().next().unwrap_or(self.opts.seq);
        let (k, n) = (self.max_k.max(max_k), self.max_n);
        self.stage(s, k, n);
        if self.opts.weight_share_permille > 0 {
            let st = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
            if st.yw.len() < max_tokens * n {
                st.yw.resize(max_tokens * n, f16::ZERO);
            }
        }
    }

    fn matmul(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        let (n, k) = (w.n, w.k);
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        if out.len() != m * n {
            return Err(BackendError::Shape("out"));
        }
        let (k0, k1) = key(w);
        let (chunks, covered) = self.opts.cover(m);
        let npu_rows = if self.graphs.contains_key(&(k0, k1, self.opts.seq)) {
            covered
        } else {
            0
        };
        if npu_rows == 0 {
            return self.partner.matmul(w, x, m, out);
        }
        let c = self.npu_cols.get(&(k0, k1)).copied().unwrap_or(n);
        if c < n {
            return self.matmul_weight_split(w, x, m, out, npu_rows, c);
        }
        // Disjoint row ranges of the one output: NPU rows 0..npu_rows, partner rows after.
        let (xn, xp) = x.split_at(npu_rows * k);
        let (on, op) = out.split_at_mut(npu_rows * n);
        let npu_part = |on: &mut [f32]| -> Result<(), BackendError> {
            let t0 = Instant::now();
            let mut st = self.staging.lock().unwrap_or_else(|e| e.into_inner());
            let st = &mut *st;
            let smax = chunks[0].0;
            if st.x.len() < smax * k || st.y.len() < smax * n {
                // Only when `reserve` was not called: sized once, then reused.
                st.x.resize(st.x.len().max(smax * k), f16::ZERO);
                st.y.resize(st.y.len().max(smax * n), f16::ZERO);
            }
            let mut r0 = 0;
            for &(s, count) in chunks.iter().filter(|c| c.0 > 0) {
                let g = self
                    .graphs
                    .get(&(k0, k1, s))
                    .ok_or(BackendError::Kernel(format!("no NPU graph of {s} rows")))?;
                let (sx, sy) = (&mut st.x[..s * k], &mut st.y[..s * n]);
                for _ in 0..count {
                    sx.convert_from_f32_slice(&xn[r0 * k..(r0 + s) * k]);
                    g.execute(sx, sy).map_err(qerr)?;
                    sy.convert_to_f32_slice(&mut on[r0 * n..(r0 + s) * n]);
                    r0 += s;
                }
            }
            self.stats
                .npu_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Ok(())
        };
        if npu_rows == m {
            return npu_part(on);
        }
        // Both sides at once: the NPU chunks on a helper thread, the partner's rows here; each
        // arrives at the barrier when its rows are written, and the barrier releases the
        // consumer.
        self.concurrently(
            move || npu_part(on),
            || self.partner.matmul(w, xp, m - npu_rows, op),
        )?;
        Ok(())
    }
}
