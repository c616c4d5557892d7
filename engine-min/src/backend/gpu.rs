//! The GPU backend: the engine's matmuls on an OpenCL device through `hetero-opencl-kernels`
//! (PoCL here; any OpenCL GPU). `prepare` uploads each weight once as its GGUF bytes (kernels
//! with fused dequantization for every type of `hetero_opencl_kernels::COMPUTABLE`: F16, Q4_0,
//! Q4_1, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) and returns its id; `reserve` sizes the
//! staging buffers and prepares each weight's one-row GEMV launch. A one-row matmul (decode)
//! writes the row, runs that launch and reads the result back; several rows (prefill) run one
//! small-M GEMM launch over all of them.

use std::sync::{Arc, Mutex};

use hetero_opencl_kernels::{check_computable, Buffer, Device, Kernels, Launch};
use hetero_uma::ColumnsMut;

use super::{check_ld, Backend, BackendError, WeightId, WeightView};
use crate::gguf::GgmlType;

/// Why the GPU backend could not be opened.
pub type OpenError = hetero_opencl_kernels::Error;

/// Opens the OpenCL device chosen by the environment (`HETERO_OPENCL_PLATFORM`,
/// `HETERO_OPENCL_DEVICE`), with a profiling queue when `profiling`. One opening at a time in a
/// process: PoCL's first device enumeration is not safe to run from several threads at once
/// (seen here: `clGetDeviceIDs` returning -1, or a crash, when three test threads opened
/// devices together).
pub fn open_device(profiling: bool) -> Result<Arc<Device>, OpenError> {
    static OPEN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    Device::from_env_with(profiling)
}

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

/// One uploaded weight.
struct GpuWeight {
    buf: Buffer,
    fmt: GgmlType,
    n: usize,
    k: usize,
}

/// Rows from which a matmul runs one GEMM launch instead of one GEMV per row.
const GEMM_MIN_ROWS: usize = 2;

/// Matmuls on an OpenCL device.
pub struct GpuBackend {
    /// The one-row GEMV of each weight, by id (built in `reserve`; each launch owns references
    /// to its weight and x/y buffers).
    gemvs: Mutex<Vec<Option<Launch>>>,
    dev: Arc<Device>,
    kernels: Box<Kernels>,
    weights: Vec<GpuWeight>,
    bufs: Mutex<Bufs>,
    max_k: usize,
    max_n: usize,
    name: String,
}

/// `ty` when the OpenCL kernels compute it (`hetero_opencl_kernels::COMPUTABLE`), else `None`.
pub(crate) fn format(ty: GgmlType) -> Option<GgmlType> {
    check_computable(ty).ok().map(|()| ty)
}

impl GpuBackend {
    /// Opens the OpenCL device chosen by the environment (`HETERO_OPENCL_PLATFORM`,
    /// `HETERO_OPENCL_DEVICE`) and builds the kernels; the error says why OpenCL is unusable.
    pub fn open() -> Result<Self, OpenError> {
        Self::with_device(open_device(false)?)
    }

    /// The GPU backend on an open device (builds the kernels).
    pub fn with_device(dev: Arc<Device>) -> Result<Self, OpenError> {
        let kernels = Box::new(Kernels::new(&dev)?);
        let name = format!("gpu ({})", dev.info().name.trim());
        Ok(Self {
            dev,
            kernels,
            gemvs: Mutex::new(Vec::new()),
            weights: Vec::new(),
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

    /// The OpenCL device.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    fn get(&self, id: WeightId) -> Result<&GpuWeight, BackendError> {
        self.weights
            .get(id.index())
            .ok_or(BackendError::UnknownWeight(id))
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> hetero_partition::Backend {
        hetero_partition::Backend::Gpu
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<WeightId, BackendError> {
        let fmt = format(w.ty).ok_or(BackendError::Unsupported(w.ty))?;
        w.row_bytes()?;
        let id = WeightId::new(self.weights.len())?;
        let buf = self.dev.upload(w.data)?;
        self.weights.push(GpuWeight {
            buf,
            fmt,
            n: w.n,
            k: w.k,
        });
        self.max_k = self.max_k.max(w.k);
        self.max_n = self.max_n.max(w.n);
        Ok(id)
    }

    /// Sizes the staging buffers for `max_rows` rows and prepares every weight's GEMV launch,
    /// so neither path creates buffers or (for decode) kernels per call.
    fn reserve(&mut self, max_rows: usize, max_k: usize) -> Result<(), BackendError> {
        let max_k = max_k.max(self.max_k).max(1);
        let max_n = self.max_n.max(1);
        let gemvs = self.gemvs.get_mut().unwrap_or_else(|e| e.into_inner());
        // The cached launches point at the buffers about to be replaced.
        gemvs.clear();
        let bufs = self.bufs.get_mut().unwrap_or_else(|e| e.into_inner());
        bufs.x = Some(self.dev.alloc(max_k * 4)?);
        bufs.y = Some(self.dev.alloc(max_n * 4)?);
        if max_rows >= GEMM_MIN_ROWS {
            bufs.xm = Some(self.dev.alloc(max_rows * max_k * 4)?);
            bufs.ym = Some(self.dev.alloc(max_rows * max_n * 4)?);
            bufs.host = vec![0.0; max_rows * max_n];
            bufs.max_m = max_rows;
        }
        let (Some(xb), Some(yb)) = (&bufs.x, &bufs.y) else {
            return Ok(());
        };
        for w in &self.weights {
            // The launch owns references to the weight and x/y buffers; `reserve` clears the
            // cache before replacing x/y, so no launch keeps a stale one.
            gemvs.push(Some(self.kernels.gemv(w.fmt, &w.buf, xb, yb, w.n, w.k)?));
        }
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
        // `max(1)`: a zero-column weight has `ldo == 0`, and every row is then empty.
        let mut rows = out.chunks_mut(ldo.max(1));
        self.matmul_rows(id, x, m, |_| match rows.next() {
            Some(r) => Ok(&mut r[..n]),
            None => Err(BackendError::Shape("out")),
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
        // Each row's columns of the shared output, in place (no scratch, no concat).
        let out: *mut ColumnsMut<'_> = out;
        self.matmul_rows(id, x, m, |t| {
            // SAFETY: `matmul_rows` holds one row at a time (it copies into it before asking
            // for the next), so the `&mut` re-borrows of the view never overlap; the view
            // outlives the call.
            unsafe { &mut *out }
                .row_f32_mut(t)
                .ok_or(BackendError::Shape("view"))
        })
    }
}

impl GpuBackend {
    /// `out_row(t) = W x_t` for each of the `m` rows, written straight into the slice
    /// `out_row(t)` gives (e.g. the row's columns of a shared output): one GEMV through the
    /// device's staging buffers per row, or one GEMM launch over all rows for several.
    fn matmul_rows<'o>(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        mut out_row: impl FnMut(usize) -> Result<&'o mut [f32], BackendError>,
    ) -> Result<(), BackendError> {
        let w = self.get(id)?;
        let (n, k) = (w.n, w.k);
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        let mut bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        if m >= GEMM_MIN_ROWS {
            let b = &mut *bufs;
            if m > b.max_m {
                return Err(BackendError::NotReserved {
                    rows: m,
                    reserved: b.max_m,
                });
            }
            let (Some(xm), Some(ym)) = (&b.xm, &b.ym) else {
                return Err(BackendError::NotReserved {
                    rows: m,
                    reserved: 0,
                });
            };
            xm.write(x)?;
            let mut launch = self.kernels.gemm(w.fmt, &w.buf, xm, ym, m, n, k)?;
            launch.enqueue()?;
            // Blocking read: waits for the GEMM.
            let host = &mut b.host[..m * n];
            ym.read(host)?;
            for (t, row) in host.chunks_exact(n.max(1)).enumerate().take(m) {
                let o = out_row(t)?;
                if o.len() != n {
                    return Err(BackendError::Shape("out"));
                }
                o.copy_from_slice(&row[..n]);
            }
            return Ok(());
        }
        let (Some(xb), Some(yb)) = (&bufs.x, &bufs.y) else {
            return Err(BackendError::NotReserved {
                rows: m,
                reserved: 0,
            });
        };
        let mut gemvs = self.gemvs.lock().unwrap_or_else(|e| e.into_inner());
        let launch = gemvs.get_mut(id.index()).and_then(Option::as_mut).ok_or(
            BackendError::NotReserved {
                rows: m,
                reserved: 0,
            },
        )?;
        for t in 0..m {
            xb.write(&x[t * k..(t + 1) * k])?;
            launch.enqueue()?;
            // Blocking read: waits for the GEMV.
            let o = out_row(t)?;
            if o.len() != n {
                return Err(BackendError::Shape("out"));
            }
            yb.read(o)?;
        }
        Ok(())
    }
}
