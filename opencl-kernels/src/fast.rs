//! The decoder's fast matmuls on their own (`kernels/mm.cl`): a matrix uploaded once in its
//! device layout (Q4_0/Q4_1: the T layout; Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: the split
//! layout of [`crate::relayout_split`]; F16 as stored), an x-stationary GEMV (f32 or int8
//! activations) and a register-tiled GEMM, each a prepared [`Launch`] that stores `y = W x`
//! (optionally `y = W (x g) / rms(x)`, the RMSNorm fused). The decoder runs the same kernels
//! with its epilogues (RoPE, residual add, SwiGLU).
//!
//! ```no_run
//! use hetero_opencl_kernels::fast::{FastKernels, FastMatrix};
//! use hetero_opencl_kernels::{matrix_bytes, Device, GgmlType};
//! let dev = Device::from_env()?;
//! let (n, k) = (4096, 4096);
//! let gguf = vec![0u8; matrix_bytes(GgmlType::Q4K, n, k)?];
//! let w = FastMatrix::upload(&dev, GgmlType::Q4K, &gguf, n, k)?; // re-laid once
//! let fk = FastKernels::new(&dev, &[GgmlType::Q4K], None)?;      // int8 where the device dots
//! let (x, y) = (dev.alloc(k * 4)?, dev.alloc(n * 4)?);
//! let mut gemv = fk.gemv(&w, &x, &y, None)?;
//! gemv.enqueue()?;
//! dev.finish()?;
//! # Ok::<(), hetero_opencl_kernels::Error>(())
//! ```

use crate::caps::{int_dot, IntDot};
use crate::decoder::mm::MmSet;
use crate::decoder::ops::{self, Cols, Epi, Mat, Shared};
use crate::decoder::prepare::{to_device_layout, MatKind};
use crate::decoder::OpKind;
use crate::device::{Buffer, Device};
use crate::error::{Error, Result};
use crate::format::{matrix_bytes, GgmlType};
use crate::kernels::Launch;
use std::sync::Arc;

/// A weight matrix on the device in the layout the fast kernels read.
pub struct FastMatrix {
    mat: Mat,
    /// Bytes of the second plane (0 when the layout has one plane).
    plane1: usize,
}

impl FastMatrix {
    /// Re-lays the GGUF bytes of an `n x k` matrix of `ty` (one of [`crate::COMPUTABLE`]) into
    /// its device layout and uploads it.
    pub fn upload(
        dev: &Arc<Device>,
        ty: GgmlType,
        gguf: &[u8],
        n: usize,
        k: usize,
    ) -> Result<FastMatrix> {
        let need = matrix_bytes(ty, n, k)?;
        if gguf.len() != need {
            return Err(Error::BadShape(format!(
                "{} bytes for a {n} x {k} {ty} matrix, which needs {need}",
                gguf.len()
            )));
        }
        let kind = MatKind::of_layout(ty, true)?;
        let h = to_device_layout(kind, gguf.to_vec(), n, k)?;
        let plane1 = h.plane1.len();
        let w0 = dev.upload(&h.plane0)?;
        let w1 = if h.plane1.is_empty() {
            dev.upload(&[0u32; 4])?
        } else {
            dev.upload(&h.plane1)?
        };
        Ok(FastMatrix {
            mat: Mat { kind, n, k, w0, w1 },
            plane1,
        })
    }

    /// Rows (outputs) and columns.
    pub fn shape(&self) -> (usize, usize) {
        (self.mat.n, self.mat.k)
    }

    /// Device bytes of the matrix (both planes).
    pub fn bytes(&self) -> usize {
        self.mat.w0.len() + self.plane1
    }
}

/// The built fast kernels for a set of weight types.
pub struct FastKernels {
    dev: Arc<Device>,
    shared: Shared,
}

/// A shape override for measurements: GEMM tile rows (128 or 64) and GEMV steps of four rows
/// a team (1, 2, 4, ...); 0 = the default choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    /// GEMM tile rows.
    pub gemm_rows: usize,
    /// GEMV steps.
    pub gemv_steps: usize,
}

impl FastKernels {
    /// Builds the kernels of `types` for `dev`. `int8`: the GEMVs' activations in int8
    /// (`None`: where the device has a hardware int8 dot product, see [`crate::caps`]).
    pub fn new(dev: &Arc<Device>, types: &[GgmlType], int8: Option<bool>) -> Result<FastKernels> {
        let kinds = types
            .iter()
            .map(|&t| MatKind::of_layout(t, true))
            .collect::<Result<Vec<_>>>()?;
        let (dot, _) = int_dot(dev);
        let i8 = int8.unwrap_or(dot != IntDot::Portable);
        let mm = MmSet::build(dev, &kinds, dot, i8, crate::KvType::F32)?;
        let dummy = dev.upload(&[0u32; 4])?;
        Ok(FastKernels {
            dev: dev.clone(),
            shared: Shared {
                mm,
                rope: dev.upload(&[1.0f32, 0.0])?,
                dummy,
                dq: 0,
                dkv: 0,
                hd: 2,
                npairs: 0,
                max_wg: dev.info().max_work_group_size,
                min_groups: dev.info().compute_units.max(1),
            },
        })
    }

    /// Overrides the shape choice (measurements).
    pub fn set_tuning(&mut self, t: Tuning) {
        self.shared.mm.force_mt = t.gemm_rows;
        self.shared.mm.force_steps = t.gemv_steps;
    }

    /// Whether the GEMVs use int8 activations, and the dot product.
    pub fn int8(&self) -> Option<IntDot> {
        self.shared.mm.i8.then_some(self.shared.mm.dot)
    }

    fn check(
        &self,
        w: &FastMatrix,
        x: &Buffer,
        xlen: usize,
        y: &Buffer,
        ylen: usize,
    ) -> Result<()> {
        if self.shared.mm.program(w.mat.kind).is_none() {
            return Err(Error::NotApplicable(
                "FastKernels was built without this matrix's type",
            ));
        }
        for (what, b, need) in [("x", x, xlen * 4), ("y", y, ylen * 4)] {
            if b.len() < need {
                return Err(Error::BufferTooSmall {
                    what,
                    needed: need,
                    got: b.len(),
                });
            }
        }
        Ok(())
    }

    /// `y[0..n] = W x[0..k]` (with `norm = (g, eps)`: `W (x g) rsqrt(mean x^2 + eps)`).
    /// `NotApplicable` where the row is too long for one work-group of the device.
    pub fn gemv(
        &self,
        w: &FastMatrix,
        x: &Buffer,
        y: &Buffer,
        norm: Option<(&Buffer, f32)>,
    ) -> Result<Launch> {
        let (n, k) = w.shape();
        self.check(w, x, k, y, n)?;
        self.matmul(w, x, k, y, norm, None)
    }

    /// `Y[m][..n] = X[m][..k] W^T` for `m` rows (row-major, `k` and `n` floats a row), the
    /// norm fused per row as in [`FastKernels::gemv`].
    pub fn gemm(
        &self,
        w: &FastMatrix,
        x: &Buffer,
        m: usize,
        y: &Buffer,
        norm: Option<(&Buffer, f32)>,
    ) -> Result<Launch> {
        let (n, k) = w.shape();
        if m == 0 {
            return Err(Error::BadShape("GEMM of 0 rows".into()));
        }
        self.check(w, x, m * k, y, m * n)?;
        self.matmul(w, x, k, y, norm, Some(m))
    }

    fn matmul(
        &self,
        w: &FastMatrix,
        x: &Buffer,
        k: usize,
        y: &Buffer,
        norm: Option<(&Buffer, f32)>,
        m: Option<usize>,
    ) -> Result<Launch> {
        let n = w.mat.n;
        if let Some((g, _)) = norm {
            if g.len() < k * 4 {
                return Err(Error::BufferTooSmall {
                    what: "g",
                    needed: k * 4,
                    got: g.len(),
                });
            }
        }
        let op = ops::mm_matmul(
            &self.dev,
            OpKind::Matmul,
            &w.mat,
            Cols::all(n),
            (x, k),
            norm,
            &Epi::Store { y, ld: n },
            m.is_some(),
            m.unwrap_or(1),
            &self.shared,
        )?
        .ok_or(Error::NotApplicable(
            "this shape does not fit the device's work-group or local memory",
        ))?;
        Ok(op.launch)
    }
}
