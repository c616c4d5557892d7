//! The GPU backend: the engine's matmuls on an OpenCL device through `hetero-opencl-kernels`
//! (PoCL here; any OpenCL GPU). Weights are uploaded once in `prepare` as the GGUF bytes
//! (F16, Q4_0, Q4_1, Q8_0 GEMV kernels with fused dequantization); each token's row runs one
//! GEMV (activations written, GEMV enqueued, outputs read back: a copy per call, not zero-copy
//! yet).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hetero_opencl_kernels::{Buffer, Device, Kernels, WeightFormat};

use crate::backend::{Backend, BackendError, WeightView};
use crate::gguf::GgmlType;

struct Bufs {
    x: Option<Buffer>,
    y: Option<Buffer>,
}

/// Matmuls on an OpenCL device.
pub struct GpuBackend {
    dev: Arc<Device>,
    // Boxed: prepared launches (crate::split) keep a reference to it across moves.
    kernels: Box<Kernels>,
    weights: HashMap<(usize, usize), Buffer>,
    bufs: Mutex<Bufs>,
    max_k: usize,
    max_n: usize,
    name: String,
}

pub(crate) fn format(ty: GgmlType) -> Option<WeightFormat> {
    Some(match ty {
        GgmlType::F16 => WeightFormat::F16,
        GgmlType::Q4_0 => WeightFormat::Q4_0,
        GgmlType::Q4_1 => WeightFormat::Q4_1,
        GgmlType::Q8_0 => WeightFormat::Q8_0,
        _ => return None,
    })
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
            weights: HashMap::new(),
            bufs: Mutex::new(Bufs { x: None, y: None }),
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
        format(w.ty).ok_or(BackendError::Unsupported(w.ty))?;
        let key = (w.data.as_ptr() as usize, w.data.len());
        if let std::collections::hash_map::Entry::Vacant(e) = self.weights.entry(key) {
            e.insert(self.dev.upload(w.data).map_err(kerr)?);
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
        let n = w.n;
        let mut rest = Some(out);
        self.matmul_rows(w, x, m, |_| {
            let (row, tail) = rest.take().unwrap_or_default().split_at_mut(n);
            rest = Some(tail);
            row
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

    /// `out_row(t) = W x_t` for each of the `m` rows: one GEMV per row through the device's
    /// staging buffers (activation row written, GEMV enqueued, outputs read back straight into
    /// the slice `out_row(t)` gives, e.g. the row's column range of a shared output).
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
        let bufs = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
        let (Some(xb), Some(yb)) = (&bufs.x, &bufs.y) else {
            return Err(BackendError::Kernel("GPU buffers not allocated".into()));
        };
        let mut launch = self.kernels.gemv(fmt, wb, xb, yb, n, k).map_err(kerr)?;
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
    }
}
