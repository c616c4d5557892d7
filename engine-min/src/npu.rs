//! The NPU backend: the engine's matmuls on the Qualcomm HTP through `qnn-sys` (the x86 HTP
//! simulator here), with HeteroInfer's activation-centric row split.
//!
//! * `prepare` dequantizes each weight once to FP16 and builds one static FP16 MatMul graph
//!   for it at one standard sequence length `S` ([`NpuOptions::seq`], default 32). Weights of
//!   more than [`NpuOptions::max_graph_elems`] elements (the LM head, 49152 x 576) get no
//!   graph and always run on the partner: building them is slow on the simulator.
//! * `matmul` of `m` rows: the first `floor(m / S) * S` rows run on the NPU in chunks of `S`
//!   rows (each chunk's output rows are contiguous in `out`, so no concat copy), the last
//!   `m mod S` rows on the partner backend (CPU, or GPU). Decode (`m < S`) is all partner.
//!   The two parts run one after the other (not overlapped yet).
//! * Activations are converted to FP16 into a staging buffer and the FP16 output back to f32,
//!   both sized in `reserve`: no allocation per call.

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
}

impl Default for NpuOptions {
    fn default() -> Self {
        Self {
            seq: 32,
            max_graph_elems: 1 << 22,
            soc_model: 69,
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
}

/// Matmuls on the NPU in chunks of `S` rows, the remainder (and decode) on a partner backend.
pub struct NpuBackend {
    session: Arc<Session>,
    partner: Box<dyn Backend>,
    opts: NpuOptions,
    /// Graphs keyed by the address and length of the weight's bytes.
    graphs: HashMap<(usize, usize), MatMulGraph<f16>>,
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
        let name = format!("npu (S={}) + {}", opts.seq, partner.name());
        Ok(Self {
            session,
            partner,
            opts,
            graphs: HashMap::new(),
            staging: Mutex::new(Staging {
                x: Vec::new(),
                y: Vec::new(),
            }),
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
        if self.graphs.contains_key(&key(w)) {
            m / self.opts.seq * self.opts.seq
        } else {
            0
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

impl Backend for NpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        self.partner.prepare(w)?;
        let (n, k) = (w.n, w.k);
        if n * k > self.opts.max_graph_elems || self.graphs.contains_key(&key(w)) {
            return Ok(());
        }
        let rb = quant::row_bytes(w.ty, k).ok_or(BackendError::Unsupported(w.ty))?;
        if w.data.len() != n * rb {
            return Err(BackendError::Shape("weight bytes"));
        }
        // Wᵀ[N,K] (GGUF layout) in FP16, dequantized once.
        let mut w16 = vec![f16::ZERO; n * k];
        let mut row = vec![0f32; k];
        for r in 0..n {
            quant::dequantize_row(w.ty, &w.data[r * rb..(r + 1) * rb], &mut row);
            w16[r * k..(r + 1) * k].convert_from_f32_slice(&row);
        }
        let shape = MatMulShape {
            m: self.opts.seq,
            k,
            n,
        };
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
        self.graphs.insert(key(w), g);
        self.max_k = self.max_k.max(k);
        self.max_n = self.max_n.max(n);
        Ok(())
    }

    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        self.partner.reserve(max_tokens, max_k);
        let (s, k, n) = (self.opts.seq, self.max_k.max(max_k), self.max_n);
        self.stage(s, k, n);
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
        let s = self.opts.seq;
        let graph = self.graphs.get(&key(w)).filter(|_| m >= s);
        let npu_rows = if graph.is_some() { m / s * s } else { 0 };
        if let Some(g) = graph {
            let t0 = Instant::now();
            let mut st = self.staging.lock().unwrap_or_else(|e| e.into_inner());
            let st = &mut *st;
            if st.x.len() < s * k || st.y.len() < s * n {
                // Only when `reserve` was not called: sized once, then reused.
                st.x.resize(st.x.len().max(s * k), f16::ZERO);
                st.y.resize(st.y.len().max(s * n), f16::ZERO);
            }
            let (sx, sy) = (&mut st.x[..s * k], &mut st.y[..s * n]);
            for c in 0..m / s {
                sx.convert_from_f32_slice(&x[c * s * k..(c + 1) * s * k]);
                g.execute(sx, sy).map_err(qerr)?;
                sy.convert_to_f32_slice(&mut out[c * s * n..(c + 1) * s * n]);
            }
            self.stats
                .npu_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if npu_rows < m {
            self.partner.matmul(
                w,
                &x[npu_rows * k..],
                m - npu_rows,
                &mut out[npu_rows * n..],
            )?;
        }
        Ok(())
    }
}
