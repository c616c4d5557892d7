//! A forced CPU–GPU column split (EdgeAgent's tensor parallelism): each matmul's output
//! columns (weight rows) `0..c` run on the CPU backend and `c..n` on the GPU backend at the
//! same time, `c = hetero_partition::ratio_cols(n, cpu_share)` (64-column tiles). Each side
//! writes its own scratch and the parts are then copied into the output rows (a concat copy:
//! the uma-slot version without it is not done yet).

use std::sync::Mutex;

use crate::backend::{Backend, BackendError, CpuBackend, WeightView};
use crate::gpu::GpuBackend;
use crate::quant;

/// CPU and GPU sharing every matmul by columns.
pub struct SplitBackend {
    cpu: CpuBackend,
    gpu: GpuBackend,
    cpu_share: f64,
    scratch: Mutex<(Vec<f32>, Vec<f32>)>,
    name: String,
}

impl SplitBackend {
    /// Splits with the CPU taking `cpu_share` (0..=1) of each matmul's columns.
    pub fn new(cpu: CpuBackend, gpu: GpuBackend, cpu_share: f64) -> Result<Self, BackendError> {
        if !(0.0..=1.0).contains(&cpu_share) {
            return Err(BackendError::Kernel(format!(
                "cpu share {cpu_share} outside 0..=1"
            )));
        }
        let name = format!("cpu+gpu columns ({:.0}% cpu)", cpu_share * 100.0);
        Ok(Self {
            cpu,
            gpu,
            cpu_share,
            scratch: Mutex::new((Vec::new(), Vec::new())),
            name,
        })
    }

    /// Columns of `w` that go to the CPU.
    pub fn cpu_cols(&self, n: usize) -> usize {
        hetero_partition::ratio_cols(n as u32, self.cpu_share).map_or(n, |c| c as usize)
    }

    fn parts<'a>(
        &self,
        w: &WeightView<'a>,
    ) -> Result<(WeightView<'a>, WeightView<'a>), BackendError> {
        let rb = quant::row_bytes(w.ty, w.k).ok_or(BackendError::Unsupported(w.ty))?;
        if w.data.len() != w.n * rb {
            return Err(BackendError::Shape("weight bytes"));
        }
        let c = self.cpu_cols(w.n);
        let (a, b) = w.data.split_at(c * rb);
        Ok((
            WeightView {
                n: c,
                data: a,
                ..*w
            },
            WeightView {
                n: w.n - c,
                data: b,
                ..*w
            },
        ))
    }
}

impl Backend for SplitBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        let (a, b) = self.parts(w)?;
        if a.n > 0 {
            self.cpu.prepare(&a)?;
        }
        if b.n > 0 {
            self.gpu.prepare(&b)?;
        }
        Ok(())
    }

    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        self.cpu.reserve(max_tokens, max_k);
        self.gpu.reserve(max_tokens, max_k);
    }

    fn matmul(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        let (a, b) = self.parts(w)?;
        if out.len() != m * w.n {
            return Err(BackendError::Shape("out"));
        }
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let (sa, sb) = &mut *s;
        // Sized once per shape; the engine's shapes repeat, so this settles after the first
        // token.
        if sa.len() < m * a.n {
            sa.resize(m * a.n, 0.0);
        }
        if sb.len() < m * b.n {
            sb.resize(m * b.n, 0.0);
        }
        let (oa, ob) = (&mut sa[..m * a.n], &mut sb[..m * b.n]);
        let (ra, rb) = std::thread::scope(|sc| {
            let gpu = &self.gpu;
            let hb = (b.n > 0).then(|| sc.spawn(move || gpu.matmul(&b, x, m, ob)));
            let ra = if a.n > 0 {
                self.cpu.matmul(&a, x, m, oa)
            } else {
                Ok(())
            };
            let rb = match hb {
                Some(h) => h
                    .join()
                    .unwrap_or_else(|_| Err(BackendError::Kernel("GPU thread panicked".into()))),
                None => Ok(()),
            };
            (ra, rb)
        });
        ra?;
        rb?;
        for t in 0..m {
            out[t * w.n..t * w.n + a.n].copy_from_slice(&sa[t * a.n..(t + 1) * a.n]);
            out[t * w.n + a.n..(t + 1) * w.n].copy_from_slice(&sb[t * b.n..(t + 1) * b.n]);
        }
        Ok(())
    }
}
