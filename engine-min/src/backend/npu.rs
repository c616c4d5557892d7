//! The NPU backend: matmuls on the Qualcomm HTP through `qnn-sys` (the x86 HTP simulator
//! here) as HeteroInfer's static graphs.
//!
//! * `prepare` dequantizes a weight (or a column range of one: the executor prepares each piece
//!   a plan gives the NPU) once to FP16 with hetero-sme's dequantizer and builds one static
//!   FP16 MatMul graph for it at each standard sequence length ([`NpuOptions::seq`], default
//!   32, plus [`NpuOptions::extra_seqs`], e.g. 128). Weights of more than
//!   [`NpuOptions::max_graph_elems`] elements (the LM head, 49152 x 576) are refused
//!   ([`NpuBackend::accepts`] says so beforehand): building them is slow on the simulator.
//! * `matmul` runs `m` rows that are a whole number of standard chunks (largest first, each
//!   chunk's output rows contiguous in `out`); any other `m` is [`BackendError::NpuRows`]. Which
//!   rows go to the NPU and which to its partner is the plan's choice, made by the executor.
//! * Activations are converted to FP16 into a staging buffer and the FP16 output back to f32,
//!   both sized in `reserve` (for the largest length): nothing is allocated per call.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use half::f16;
use half::slice::HalfFloatSliceExt;
use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order, WeightLayout};
use qnn_sys::{BackendLibrary, Session, SessionOptions};

use hetero_uma::ColumnsMut;

use super::{check_ld, Backend, BackendError, WeightId, WeightView};

/// Settings of the NPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpuOptions {
    /// The standard sequence length `S` every graph is built for (rows per NPU chunk).
    pub seq: usize,
    /// Largest weight (`n * k` elements) that gets an NPU graph; larger ones (the LM head)
    /// are refused. Default 4 Mi elements: every SmolLM2-135M layer weight (at most
    /// 1536 x 576) fits, its 49152 x 576 output head does not.
    pub max_graph_elems: usize,
    /// HTP SoC model of the session's device config (69 = SM8750, as qnn-sys's tests use).
    pub soc_model: u32,
    /// More standard lengths (0 = unused), e.g. `[128, 0, 0]`: each weight gets a graph at
    /// `seq` and at each of these (HeteroInfer's multi-size static graphs).
    pub extra_seqs: [usize; 3],
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
    /// they cover (the rest is left over).
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
        }
    }
}

/// Why the NPU backend could not be opened.
#[derive(Debug, Clone, PartialEq)]
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

impl std::error::Error for NpuError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::BadSeq(_) => None,
            Self::Qnn(e) => Some(e),
        }
    }
}

/// Counters of an [`NpuBackend`], shared (an `Arc`) so they stay readable after the backend
/// is moved into an executor.
#[derive(Debug, Default)]
pub struct NpuStats {
    graphs: AtomicUsize,
    prepare_ns: AtomicU64,
    npu_ns: AtomicU64,
}

impl NpuStats {
    /// Number of prepared weights (each with one graph per standard length).
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
}

/// One prepared weight: its graphs, one per standard length (largest first, as `lengths`).
struct Prepared {
    n: usize,
    k: usize,
    graphs: Vec<(usize, MatMulGraph<f16>)>,
}

/// Matmuls on the NPU in chunks of its standard lengths.
pub struct NpuBackend {
    session: Arc<Session>,
    opts: NpuOptions,
    prepared: Vec<Prepared>,
    staging: Mutex<Staging>,
    max_k: usize,
    max_n: usize,
    stats: Arc<NpuStats>,
    name: String,
}

impl NpuBackend {
    /// Loads the HTP backend from `$QNN_HTP_LIB` and opens a session (device config SoC
    /// `opts.soc_model`). Only one session per process: a process that needs several NPU
    /// backends shares one session through [`NpuBackend::with_session`].
    pub fn open(opts: NpuOptions) -> Result<Self, NpuError> {
        let lib = Arc::new(BackendLibrary::load_htp().map_err(NpuError::Qnn)?);
        let session = Session::new(
            lib,
            &SessionOptions {
                soc_model: Some(opts.soc_model),
                ..Default::default()
            },
        )
        .map_err(NpuError::Qnn)?;
        Self::with_session(session, opts)
    }

    /// As [`open`](Self::open) on an existing session (pass `session.new_context()` to keep
    /// the graphs of several backends in separate contexts).
    pub fn with_session(session: Arc<Session>, opts: NpuOptions) -> Result<Self, NpuError> {
        if opts.seq == 0 {
            return Err(NpuError::BadSeq(0));
        }
        let lens: Vec<String> = opts.lengths().map(|s| s.to_string()).collect();
        Ok(Self {
            session,
            opts,
            prepared: Vec::new(),
            staging: Mutex::new(Staging {
                x: Vec::new(),
                y: Vec::new(),
            }),
            max_k: 0,
            max_n: 0,
            stats: Arc::default(),
            name: format!("npu (S={})", lens.join(",")),
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

    /// The options it was opened with.
    pub fn options(&self) -> &NpuOptions {
        &self.opts
    }

    /// Whether `prepare` takes a weight of `n` x `k` elements.
    pub fn accepts(&self, n: usize, k: usize) -> bool {
        n.checked_mul(k)
            .is_some_and(|e| e > 0 && e <= self.opts.max_graph_elems)
    }
}

impl Backend for NpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> hetero_partition::Backend {
        hetero_partition::Backend::Npu
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<WeightId, BackendError> {
        let (n, k) = (w.n, w.k);
        if !self.accepts(n, k) {
            return Err(BackendError::TooWide {
                k: n.saturating_mul(k),
                max: self.opts.max_graph_elems,
            });
        }
        let id = WeightId::new(self.prepared.len())?;
        let rb = w.row_bytes()?;
        // Wᵀ[N,K] (GGUF layout) in FP16, dequantized once.
        let mut w16 = vec![f16::ZERO; n * k];
        let mut row = vec![0f32; k];
        for r in 0..n {
            hetero_sme::dequantize_row(w.ty, &w.data[r * rb..(r + 1) * rb], &mut row)?;
            w16[r * k..(r + 1) * k].convert_from_f32_slice(&row);
        }
        let mut graphs = Vec::new();
        for s in self.opts.lengths() {
            let g = MatMulGraph::new(
                &self.session,
                MatMulShape { m: s, k, n },
                &w16,
                Order::Direct,
                &GraphOptions {
                    weights: WeightLayout::NxK,
                    ..GraphOptions::default()
                },
            )?;
            self.stats
                .prepare_ns
                .fetch_add(g.build_time().as_nanos() as u64, Ordering::Relaxed);
            graphs.push((s, g));
        }
        self.stats.graphs.fetch_add(1, Ordering::Relaxed);
        self.prepared.push(Prepared { n, k, graphs });
        self.max_k = self.max_k.max(k);
        self.max_n = self.max_n.max(n);
        Ok(id)
    }

    fn reserve(&mut self, _max_rows: usize, max_k: usize) -> Result<(), BackendError> {
        let s = self.opts.lengths().next().unwrap_or(self.opts.seq);
        let (k, n) = (self.max_k.max(max_k), self.max_n);
        let st = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
        st.x.resize(st.x.len().max(s * k), f16::ZERO);
        st.y.resize(st.y.len().max(s * n), f16::ZERO);
        Ok(())
    }

    fn matmul(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) -> Result<(), BackendError> {
        let n = self.get(id)?.n;
        check_ld(out, m, n, ldo)?;
        self.run(id, x, m, |t, row| {
            row.convert_to_f32_slice(&mut out[t * ldo..t * ldo + n]);
            Ok(())
        })
    }

    fn matmul_view(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        out: &mut ColumnsMut<'_>,
    ) -> Result<(), BackendError> {
        if out.rows() != m || out.cols().len() != self.get(id)?.n {
            return Err(BackendError::Shape("view"));
        }
        self.run(id, x, m, |t, row| {
            let o = out.row_f32_mut(t).ok_or(BackendError::Shape("view"))?;
            row.convert_to_f32_slice(o);
            Ok(())
        })
    }
}

impl NpuBackend {
    fn get(&self, id: WeightId) -> Result<&Prepared, BackendError> {
        self.prepared
            .get(id.index())
            .ok_or(BackendError::UnknownWeight(id))
    }

    /// Runs the `m` rows (whole standard chunks, largest first) and hands each FP16 output
    /// row to `put(t, row)` (which converts it into its place).
    fn run(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        mut put: impl FnMut(usize, &[f16]) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let p = self.get(id)?;
        let (n, k) = (p.n, p.k);
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        let (chunks, covered) = self.opts.cover(m);
        if covered != m {
            return Err(BackendError::NpuRows(m));
        }
        let t0 = Instant::now();
        let mut st = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        let smax = chunks[0].0;
        if st.x.len() < smax * k || st.y.len() < smax * n {
            return Err(BackendError::NotReserved {
                rows: smax,
                reserved: st.x.len() / k.max(1),
            });
        }
        let mut r0 = 0;
        for &(s, count) in chunks.iter().filter(|c| c.0 > 0 && c.1 > 0) {
            let g = p
                .graphs
                .iter()
                .find(|(gs, _)| *gs == s)
                .map(|(_, g)| g)
                .ok_or(BackendError::NpuRows(m))?;
            let (sx, sy) = (&mut st.x[..s * k], &mut st.y[..s * n]);
            for _ in 0..count {
                sx.convert_from_f32_slice(&x[r0 * k..(r0 + s) * k]);
                g.execute(sx, sy)?;
                for (t, row) in sy.chunks_exact(n.max(1)).enumerate() {
                    put(r0 + t, row)?;
                }
                r0 += s;
            }
        }
        self.stats
            .npu_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }
}
