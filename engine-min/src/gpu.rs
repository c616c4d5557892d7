//! The GPU backend: the engine's matmuls on an OpenCL device through `hetero-opencl-kernels`
//! (PoCL here; any OpenCL GPU). Weights are uploaded once in `prepare` as the GGUF bytes
//! (F16, Q4_0, Q4_1, Q8_0 kernels with fused dequantization). A one-row matmul (decode) runs
//! the weight's GEMV, whose launch is prepared once in `reserve`; several rows (prefill) run
//! one small-M GEMM launch over all of them. Activations are written to and outputs read back
//! from device buffers here (the zero-copy path over uma slots is `crate::split`'s).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hetero_opencl_kernels::{check_computable, Buffer, Device, Kernels, Launch};

use crate::backend::{Backend, BackendError, WeightView};
use crate::gguf::GgmlType;

struct Bufs {
    /// One activation row and one output row (the GEMV's arguments).
    x: Option<Buffer>,
    y: Option<Buffer>,
    /// `max_m` activation rows and output rows (the GEMM's), sized in `reserve`.
    xm: Option<Buffer>,
    ym: Option<Buffer>,
    /// Host staging of the GEMM's output, `max_m * max_n`.
    host: Vec<f32>,
    /// Rows `xm`/`ym`/`host` hold.
    max_m: usize,
}

/// Rows from which a matmul runs one GEMM launch instead of one GEMV per row.
const GEMM_MIN_ROWS: usize = 2;

/// Matmuls on an OpenCL device.
pub struct GpuBackend {
    // Prepared GEMVs (each owns references to its weight and x/y buffers).
    gemvs: Mutex<HashMap<(usize, usize), Launch>>,
    dev: Arc<Device>,
    kernels: Box<Kernels>,
    weights: HashMap<(usize, usize), Buffer>,
    /// Format and shape of each uploaded weight (for the prepared GEMVs).
    shapes: HashMap<(usize, usize), (GgmlType, usize, usize)>,
    bufs: Mutex<Bufs>,
    max_k: usize,
    max_n: usize,
    name: String,
}

/// `ty` when the OpenCL kernels compute it (F16, Q4_0, Q4_1, Q8_0), else `None`.
pub(crate) fn format(ty: GgmlType) -> Option<GgmlType> {
    check_computable(ty).ok().map(|()| ty)
}

pub(crate) fn kerr(e: impl std::fmt::Debug) -> BackendError {
    BackendError::Kernel(format!("opencl: {e:?}"))
}

impl GpuBackend {
    /// Opens the OpenCL device chosen by the environment (`HETERO_OPENCL_PLATFORM`,
    /// `HETERO_OPENCL_DEVICE`) and builds the kernels; an error says why OpenCL is unusable.
    pub fn open() -> Result<Self, String> {
        let dev = Device::from_env().map_err(|e| format!("{e}"))?;
        let kernels = Box::new(Kernels::new(&dev).map_err(|e| format!("{e}"))?);
        let name = format!("gpu ({})", dev.info().name.trim());
        Ok(Self {
            dev,
            kernels,
            gemvs: Mutex::new(HashMap::new()),
            weights: HashMap::new(),
            shapes: HashMap::new(),
            bufs: Mutex::new(Bufs {
                x: None,
                y: None,
                xm: None,
                ym: None,
                host: Vec::new(),
                max_m: 0,
            }),
            max_k: 0,
            max_n: 0,
            name,
        })
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        let fmt = format(w.ty).ok_or(BackendError::Unsupported(w.ty))?;
        let key = (w.data.as_ptr() as usize, w.data.len());
        self.shapes.insert(key, (fmt, w.n, w.k));
        if let std::collections::hash_map::Entry::Vacant(e) = self.weights.entry(key) {
            e.insert(self.dev.upload(w.data).map_err(kerr)?);
        }
        if w.k > self.max_k || w.n > self.max_n {
            // The prepared GEMVs point at the buffers about to be replaced.
            self.gemvs
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        }
        let bufs = self.bufs.get_mut().unwrap_or_else(|e| e.into_inner());
        if w.k > self.max_k {
            self.max_k = w.k;
            bufs.x = Some(self.dev.alloc(w.k * 4).map_err(kerr)?);
        }
        if w.n > self.max_n {
            self.max_n = w.n;
            bufs.y = Some(self.dev.alloc(w.n * 4).map_err(kerr)?);
        }
        Ok(())
    }

    /// Sizes the GEMM's buffers for `max_tokens` rows and prepares every prepared weight's
    /// GEMV launch, so neither path creates buffers or (for decode) kernels per call. A
    /// failure leaves the per-call fallbacks in place.
    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        let max_k = max_k.max(self.max_k);
        let gemvs = self.gemvs.get_mut().unwrap_or_else(|e| e.into_inner());
        gemvs.clear();
        let bufs = self.bufs.get_mut().unwrap_or_else(|e| e.into_inner());
        if max_tokens >= GEMM_MIN_ROWS && max_tokens > bufs.max_m {
            let (xm, ym) = (
                self.dev.alloc(max_tokens * max_k * 4),
                self.dev.alloc(max_tokens * self.max_n.max(1) * 4),
            );
            if let (Ok(xm), Ok(ym)) = (xm, ym) {
                bufs.xm = Some(xm);
                bufs.ym = Some(ym);
                bufs.host = vec![0.0; max_tokens * self.max_n];
                bufs.max_m = max_tokens;
            }
        }
        let (Some(xb), Some(yb)) = (&bufs.x, &bufs.y) else {
            return;
        };
        for (&(ptr, len), wb) in &self.weights {
            let Some((fmt, n, k)) = self.shapes.get(&(ptr, len)).copied() else {
                continue;
            };
            // The launch owns references to the weight and x/y buffers; `prepare` and
            // `reserve` clear the cache when they replace x/y, so no launch keeps a stale one.
            if let Ok(l) = self.kernels.gemv(fmt, wb, xb, yb, n, k) {
                gemvs.insert((ptr, len), l);
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
        if out.len() != m * w.n {
            return Err(BackendError::Shape("out"));
        }
        self.matmul_ld(w, x, m, out, w.n)
    }

    fn matmul_ld(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) -> Result<(), BackendError> {
        crate::backend::check_ld(out, m, w.n, ldo)?;
        let n = w.n;
        // `max(1)`: a zero-column weight has `ldo == 0`, and every row is then empty.
        let mut rows = out.chunks_mut(ldo.max(1));
        self.matmul_rows(w, x, m, |_| match rows.next() {
            Some(r) => &mut r[..n],
            None => &mut [],
        })
    }
}

impl GpuBackend {
    /// The OpenCL device.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// The built kernels (boxed: their address is stable while `self` lives).
    pub(crate) fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// The device copy of a prepared weight.
    pub(crate) fn weight(&self, w: &WeightView<'_>) -> Result<&Buffer, BackendError> {
        self.weights
            .get(&(w.data.as_ptr() as usize, w.data.len()))
            .ok_or(BackendError::Kernel(
                "weight was not prepared for the GPU".into(),
            ))
    }

    /// `out_row(t) = W x_t` for each of the `m` rows, written straight into the slice
    /// `out_row(t)` gives (e.g. the row's column range of a shared output): one GEMV through
    /// the device's staging buffers for one row, one GEMM launch over all rows for several
    /// (when `reserve` sized the buffers for them).
    pub(crate) fn matmul_rows<'o>(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        mut out_row: impl FnMut(usize) -> &'o mut [f32],
    ) -> Result<(), BackendError> {
        let (n, k) = (w.n, w.k);
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        let fmt = format(w.ty).ok_or(BackendError::Unsupported(w.ty))?;
        let wb = self.weight(w)?;
        let mut bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        if m >= GEMM_MIN_ROWS && m <= bufs.max_m && n <= self.max_n {
            let b = &mut *bufs;
            let (Some(xm), Some(ym)) = (&b.xm, &b.ym) else {
                return Err(BackendError::Kernel("GPU buffers not allocated".into()));
            };
            xm.write(x).map_err(kerr)?;
            let mut launch = self.kernels.gemm(fmt, wb, xm, ym, m, n, k).map_err(kerr)?;
            launch.enqueue().map_err(kerr)?;
            // Blocking read: waits for the GEMM.
            let host = &mut b.host[..m * n];
            ym.read(host).map_err(kerr)?;
            for (t, row) in host.chunks_exact(n).enumerate() {
                let o = out_row(t);
                if o.len() != n {
                    return Err(BackendError::Shape("out"));
                }
                o.copy_from_slice(row);
            }
            return Ok(());
        }
        let (Some(xb), Some(yb)) = (&bufs.x, &bufs.y) else {
            return Err(BackendError::Kernel("GPU buffers not allocated".into()));
        };
        let mut rows = |launch: &mut Launch| -> Result<(), BackendError> {
            for t in 0..m {
                xb.write(&x[t * k..(t + 1) * k]).map_err(kerr)?;
                launch.enqueue().map_err(kerr)?;
                // Blocking read: waits for the GEMV.
                let o = out_row(t);
                if o.len() != n {
                    return Err(BackendError::Shape("out"));
                }
                yb.read(o).map_err(kerr)?;
            }
            Ok(())
        };
        let mut gemvs = self.gemvs.lock().unwrap_or_else(|e| e.into_inner());
        match gemvs.get_mut(&(w.data.as_ptr() as usize, w.data.len())) {
            Some(c) => rows(c),
            None => {
                // Weights prepared after `reserve` (not on the engine's path).
                let mut l = self.kernels.gemv(fmt, wb, xb, yb, n, k).map_err(kerr)?;
                rows(&mut l)
            }
        }
    }
}
