//! The backend trait the engine runs its matmuls through, and the CPU backend.
//!
//! A backend computes `out[m x n] = x[m x k] * W^T` for a quantized weight `W` of `n` rows of
//! `k` elements (ggml layout: each row contiguous). Everything else in a layer (norms, RoPE,
//! attention, SwiGLU) is done by the engine on the CPU pool.

use std::fmt;
use std::sync::Arc;

use crate::gguf::GgmlType;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::pool::{Pool, SharedMut};
use crate::qkernel::{PackedWeight, QuantActs, PAIR};
use crate::quant;

/// A quantized weight matrix: `n` rows of `k` elements of type `ty`, rows contiguous.
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    /// Element type.
    pub ty: GgmlType,
    /// Rows (output features).
    pub n: usize,
    /// Columns (input features).
    pub k: usize,
    /// `n * row_bytes(ty, k)` bytes.
    pub data: &'a [u8],
}

/// Why a backend could not run an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// Buffer lengths do not match the shapes.
    Shape(&'static str),
    /// The backend cannot compute with this tensor type.
    Unsupported(GgmlType),
    /// `k` exceeds what the backend's scratch allows.
    TooWide(usize),
    /// A kernel from another crate refused the call.
    Kernel(String),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(w) => write!(f, "shape mismatch: {w}"),
            Self::Unsupported(t) => write!(f, "tensor type {t:?} unsupported by this backend"),
            Self::TooWide(k) => write!(f, "row length {k} exceeds the backend's limit {MAX_K}"),
            Self::Kernel(e) => write!(f, "kernel error: {e}"),
        }
    }
}

impl std::error::Error for BackendError {}

/// A device that runs the engine's matmuls.
pub trait Backend: Send + Sync {
    /// Short name shown in the time shares (e.g. `cpu`).
    fn name(&self) -> &str;
    /// Called once per weight before any `matmul` on it (start-up: repacking, uploads, graph
    /// preparation). The default does nothing.
    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        let _ = w;
        Ok(())
    }
    /// Sizes scratch for up to `max_tokens` rows of up to `max_k` columns so `matmul` does not
    /// allocate. The default does nothing.
    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        let _ = (max_tokens, max_k);
    }
    /// `out[m x n] = x[m x k] * W^T` (row-major `x` and `out`).
    fn matmul(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<(), BackendError>;
}

/// Longest row the CPU backend handles (its per-task scratch lives on the stack).
pub const MAX_K: usize = 4096;
/// Weight rows dequantized together (the micro-kernel's row block).
const NR: usize = 4;
/// Tokens per micro-kernel call.
const MR: usize = 4;
/// Weight rows per pool task.
const ROWS_PER_TASK: usize = 32;

/// The CPU micro-kernel implementations; all are public so tests can run every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuKernel {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 AVX-512F 4x4 f32 dot block.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// x86-64 AVX-512 VNNI on weights repacked at `prepare` (Q4_0, Q4_1, Q8_0 with rows a
    /// multiple of 64) and activations quantized to 8 bits per 32-element block; other weights
    /// take the AVX-512 f32 path.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// The `hetero-sme` crate's quantized decode GEMV (`gemv_q4_0/q4_1/q8_0`, f32 activations,
    /// dequantized in registers, its own dispatch) on row ranges spread over the pool, tokens
    /// in groups of `hetero_sme::GEMV_MAX_ROWS`; other tensor types take the best f32 path. Not
    /// batch-invariant (the GEMV's per-row result depends on M), so only in [`CpuKernel::all`].
    SmeGemv,
}

impl CpuKernel {
    /// Every batch-invariant kernel this CPU can run, best last (a token's result does not
    /// depend on the other tokens of the call).
    pub fn available() -> Vec<CpuKernel> {
        let mut v = vec![CpuKernel::Portable];
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512f") {
            v.push(CpuKernel::Avx512);
        }
        #[cfg(target_arch = "x86_64")]
        if crate::qkernel::vnni::available() {
            v.push(CpuKernel::Avx512Vnni);
        }
        v
    }

    /// [`available`](Self::available) plus the kernels that are not batch-invariant (a token's
    /// result may depend on how many tokens share the call), which batched engines must not
    /// use: [`CpuKernel::SmeGemv`]. Tests and `run --kernel` go through this list.
    pub fn all() -> Vec<CpuKernel> {
        let mut v = Self::available();
        v.push(CpuKernel::SmeGemv);
        v
    }

    /// The kernel a single sequence runs by default (`run`, `bench`): hetero-sme's GEMV with
    /// f32 activations. The 8-bit-activation VNNI kernel is visibly less accurate on the 135M
    /// model (a chat answer derails, see the README), and one sequence needs no batch
    /// invariance.
    pub fn default_for_run() -> CpuKernel {
        CpuKernel::SmeGemv
    }

    /// The best batch-invariant kernel this CPU can run.
    pub fn best() -> CpuKernel {
        Self::available().pop().unwrap_or(CpuKernel::Portable)
    }
}

/// The CPU backend: dequantize a block of weight rows into stack scratch, multiply by a block
/// of tokens with an f32 micro-kernel; tasks of row blocks spread over the pool.
pub struct CpuBackend {
    pool: Arc<Pool>,
    kernel: CpuKernel,
    /// Repacked weights, keyed by the address and length of their original bytes.
    packed: HashMap<(usize, usize), PackedWeight>,
    acts: Mutex<QuantActs>,
}

impl CpuBackend {
    /// A CPU backend on `pool` using `kernel` (which must be in [`CpuKernel::available`]; an
    /// unavailable one is replaced by the portable kernel).
    pub fn new(pool: Arc<Pool>, kernel: CpuKernel) -> Self {
        let kernel = if CpuKernel::all().contains(&kernel) {
            kernel
        } else {
            CpuKernel::Portable
        };
        Self {
            pool,
            kernel,
            packed: HashMap::new(),
            acts: Mutex::new(QuantActs::default()),
        }
    }

    /// Number of weights repacked for the quantized kernel.
    pub fn packed_count(&self) -> usize {
        self.packed.len()
    }

    /// The kernel in use.
    pub fn kernel(&self) -> CpuKernel {
        self.kernel
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        #[cfg(target_arch = "x86_64")]
        if self.kernel == CpuKernel::Avx512Vnni {
            let key = (w.data.as_ptr() as usize, w.data.len());
            if let std::collections::hash_map::Entry::Vacant(e) = self.packed.entry(key) {
                if let Some(p) = PackedWeight::pack(w.ty, w.n, w.k, w.data) {
                    e.insert(p);
                    self.reserve(1, w.k);
                }
            }
        }
        let _ = w;
        Ok(())
    }

    fn reserve(&mut self, m: usize, k: usize) {
        let a = self.acts.get_mut().unwrap_or_else(|e| e.into_inner());
        if !a.fits(m, k) {
            *a = QuantActs::with_capacity(m, k);
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
        let rb = quant::row_bytes(w.ty, k).ok_or(BackendError::Unsupported(w.ty))?;
        if k > MAX_K {
            return Err(BackendError::TooWide(k));
        }
        if w.data.len() != n * rb {
            return Err(BackendError::Shape("weight bytes"));
        }
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        if out.len() != m * n {
            return Err(BackendError::Shape("out"));
        }
        if let Some(p) = self.packed.get(&(w.data.as_ptr() as usize, w.data.len())) {
            if p.n == n && p.k == k {
                self.matmul_packed(p, x, m, out);
                return Ok(());
            }
        }
        if self.kernel == CpuKernel::SmeGemv
            && matches!(w.ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
        {
            // Tokens in groups of at most GEMV_MAX_ROWS: every token takes the same kernel
            // whatever the batch size (results do not depend on batching).
            let g = hetero_sme::GEMV_MAX_ROWS;
            let mut t0 = 0;
            while t0 < m {
                let mm = (m - t0).min(g);
                self.matmul_sme(
                    w,
                    rb,
                    &x[t0 * k..(t0 + mm) * k],
                    mm,
                    &mut out[t0 * n..(t0 + mm) * n],
                )?;
                t0 += mm;
            }
            return Ok(());
        }
        // The f32 fallback of the SME-GEMV kernel: the best f32 kernel this CPU has.
        let base = match self.kernel {
            CpuKernel::SmeGemv => CpuKernel::available()
                .into_iter()
                .find(|&c| c != CpuKernel::Portable)
                .unwrap_or(CpuKernel::Portable),
            other => other,
        };
        let kernel = if k % 16 == 0 {
            base
        } else {
            CpuKernel::Portable
        };
        let outs = SharedMut::new(out);
        let n_tasks = n.div_ceil(ROWS_PER_TASK);
        let task = |t: usize, _thread: usize| {
            let mut panel = [0f32; NR * MAX_K];
            let r_end = ((t + 1) * ROWS_PER_TASK).min(n);
            let mut r0 = t * ROWS_PER_TASK;
            while r0 < r_end {
                let nr = (r_end - r0).min(NR);
                for i in 0..nr {
                    let src = &w.data[(r0 + i) * rb..(r0 + i + 1) * rb];
                    quant::dequantize_row(w.ty, src, &mut panel[i * k..(i + 1) * k]);
                }
                let mut t0 = 0;
                while t0 < m {
                    let mr = (m - t0).min(MR);
                    let mut acc = [[0f32; NR]; MR];
                    let xs = &x[t0 * k..(t0 + mr) * k];
                    dot_block(kernel, &panel[..nr * k], nr, xs, mr, k, &mut acc);
                    for (ti, row) in acc.iter().enumerate().take(mr) {
                        // SAFETY: tasks cover disjoint row ranges [r0, r0 + nr) of each output
                        // row, so no two live slices overlap.
                        let o = unsafe { outs.slice((t0 + ti) * n + r0, nr) };
                        o.copy_from_slice(&row[..nr]);
                    }
                    t0 += mr;
                }
                r0 += nr;
            }
        };
        self.pool.run(n_tasks, &task);
        Ok(())
    }
}

/// Output rows per pool task of the SME GEMV (its tiles are 64 columns).
const SME_ROWS_PER_TASK: usize = 64;

impl CpuBackend {
    fn matmul_sme(
        &self,
        w: &WeightView<'_>,
        rb: usize,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        use hetero_sme::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock};
        let (n, k) = (w.n, w.k);
        let outs = SharedMut::new(out);
        let failed: Mutex<Option<String>> = Mutex::new(None);
        let task = |t: usize, _thread: usize| {
            let r0 = t * SME_ROWS_PER_TASK;
            let nr = (n - r0).min(SME_ROWS_PER_TASK);
            let bytes = &w.data[r0 * rb..(r0 + nr) * rb];
            // Results for this row range: straight into `out` for one token, else through a
            // local buffer (the rows of several tokens are not contiguous in `out`).
            let mut local = [0f32; hetero_sme::GEMV_MAX_ROWS * SME_ROWS_PER_TASK];
            let (y, ldy): (&mut [f32], usize) = if m == 1 {
                // SAFETY: tasks own disjoint row ranges [r0, r0 + nr) of the single output row.
                (unsafe { outs.slice(r0, nr) }, nr)
            } else {
                (&mut local[..m * nr], nr)
            };
            let r = match w.ty {
                GgmlType::Q4_0 => BlockQ4_0::slice_from_bytes(bytes)
                    .and_then(|b| hetero_sme::gemv_q4_0(x, m, k, b, y, ldy)),
                GgmlType::Q4_1 => BlockQ4_1::slice_from_bytes(bytes)
                    .and_then(|b| hetero_sme::gemv_q4_1(x, m, k, b, y, ldy)),
                _ => BlockQ8_0::slice_from_bytes(bytes)
                    .and_then(|b| hetero_sme::gemv_q8_0(x, m, k, b, y, ldy)),
            };
            if let Err(e) = r {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{e:?}"));
                return;
            }
            if m > 1 {
                for tok in 0..m {
                    // SAFETY: tasks own disjoint row ranges [r0, r0 + nr) of every output row.
                    let o = unsafe { outs.slice(tok * n + r0, nr) };
                    o.copy_from_slice(&local[tok * nr..(tok + 1) * nr]);
                }
            }
        };
        self.pool.run(n.div_ceil(SME_ROWS_PER_TASK), &task);
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(BackendError::Kernel(format!("hetero-sme: {e}"))),
            None => Ok(()),
        }
    }

    fn matmul_packed(&self, w: &PackedWeight, x: &[f32], m: usize, out: &mut [f32]) {
        let (n, k) = (w.n, w.k);
        let mut acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        if !acts.fits(m, k) {
            *acts = QuantActs::with_capacity(m, k);
        }
        acts.k = k;
        acts.m = m;
        {
            let ds = crate::qkernel::dstride(k);
            let a = &mut *acts;
            let (q, d, s, e) = (
                SharedMut::new(&mut a.q[..]),
                SharedMut::new(&mut a.d[..]),
                SharedMut::new(&mut a.s[..]),
                SharedMut::new(&mut a.dexp[..]),
            );
            let quant_task = |t: usize, _thread: usize| {
                // SAFETY: each task quantizes its own token `t`, so the ranges are disjoint.
                unsafe {
                    crate::qkernel::quantize_token(
                        &x[t * k..(t + 1) * k],
                        q.slice(t * k, k),
                        d.slice(t * ds, ds),
                        s.slice(t * ds, ds),
                        e.slice(t * (k / PAIR) * 16, k / PAIR * 16),
                    )
                };
            };
            if m >= 8 {
                self.pool.run(m, &quant_task);
            } else {
                (0..m).for_each(|t| quant_task(t, 0));
            }
        }
        let acts: &QuantActs = &acts;
        let kernel = self.kernel;
        let outs = SharedMut::new(out);
        let n_tasks = n.div_ceil(ROWS_PER_TASK);
        let task = |t: usize, _thread: usize| {
            let r_end = ((t + 1) * ROWS_PER_TASK).min(n);
            let mut r0 = t * ROWS_PER_TASK;
            while r0 < r_end {
                let nr = (r_end - r0).min(NR);
                let mut t0 = 0;
                while t0 < m {
                    let mr = (m - t0).min(MR);
                    let mut acc = [[0f32; NR]; MR];
                    qdot(kernel, w, r0, nr, acts, t0, mr, &mut acc);
                    for (ti, row) in acc.iter().enumerate().take(mr) {
                        // SAFETY: tasks cover disjoint row ranges [r0, r0 + nr) of each output
                        // row, so no two live slices overlap.
                        let o = unsafe { outs.slice((t0 + ti) * n + r0, nr) };
                        o.copy_from_slice(&row[..nr]);
                    }
                    t0 += mr;
                }
                r0 += nr;
            }
        };
        self.pool.run(n_tasks, &task);
    }
}

/// The quantized dot block with `kernel` (the portable integer loop for non-VNNI kernels).
#[allow(clippy::too_many_arguments)]
pub fn qdot(
    kernel: CpuKernel,
    w: &PackedWeight,
    r0: usize,
    nr: usize,
    a: &QuantActs,
    t0: usize,
    mr: usize,
    acc: &mut [[f32; NR]; MR],
) {
    assert!(
        (1..=NR).contains(&nr)
            && r0 + nr <= w.n
            && (1..=MR).contains(&mr)
            && t0 + mr <= a.m
            && a.k == w.k
    );
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Avx512Vnni` is only selectable when `vnni::available()` (see
        // `CpuKernel::available` and `CpuBackend::new`); the assert above checks the index
        // preconditions, and `PackedWeight`/`QuantActs` keep their buffer lengths consistent.
        CpuKernel::Avx512Vnni => unsafe {
            use crate::qkernel::vnni::dot;
            use crate::qkernel::UKind;
            // Decode (one token): 4 rows at once. More tokens: 2 rows x up to 4 tokens per
            // call (register budget), twice for a 4-row group.
            macro_rules! go {
                ($nib:expr) => {
                    match mr {
                        1 => dot::<1, 4, $nib>(w, r0, nr, a, t0, acc),
                        _ => {
                            let mut hi = [[0f32; 4]; 4];
                            let n1 = nr.min(2);
                            match mr {
                                2 => dot::<2, 2, $nib>(w, r0, n1, a, t0, acc),
                                3 => dot::<3, 2, $nib>(w, r0, n1, a, t0, acc),
                                _ => dot::<4, 2, $nib>(w, r0, n1, a, t0, acc),
                            }
                            if nr > 2 {
                                match mr {
                                    2 => dot::<2, 2, $nib>(w, r0 + 2, nr - 2, a, t0, &mut hi),
                                    3 => dot::<3, 2, $nib>(w, r0 + 2, nr - 2, a, t0, &mut hi),
                                    _ => dot::<4, 2, $nib>(w, r0 + 2, nr - 2, a, t0, &mut hi),
                                }
                                for t in 0..mr {
                                    acc[t][2] = hi[t][0];
                                    acc[t][3] = hi[t][1];
                                }
                            }
                        }
                    }
                };
            }
            if w.kind == UKind::Nib4 {
                go!(true)
            } else {
                go!(false)
            }
        },
        _ => crate::qkernel::dot_portable(w, r0, nr, a, t0, mr, acc),
    }
}

/// `acc[t][r] = dot(x[t], w[r])` for `t < mr`, `r < nr` (rows of length `k`).
pub fn dot_block(
    kernel: CpuKernel,
    w: &[f32],
    nr: usize,
    x: &[f32],
    mr: usize,
    k: usize,
    acc: &mut [[f32; NR]; MR],
) {
    match kernel {
        CpuKernel::Portable | CpuKernel::SmeGemv => dot_block_portable(w, nr, x, mr, k, acc),
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx512 | CpuKernel::Avx512Vnni => {
            assert!(
                k.is_multiple_of(16)
                    && w.len() >= nr * k
                    && x.len() >= mr * k
                    && nr >= 1
                    && mr >= 1
            );
            // SAFETY: `Avx512` and `Avx512Vnni` are only chosen when the CPU reports AVX-512F
            // (`CpuKernel::available`), which is the target feature the function enables; the
            // assert above establishes the slice-length preconditions it reads within.
            unsafe { avx512::dot_block(w, nr, x, mr, k, acc) }
        }
    }
}

fn dot_block_portable(
    w: &[f32],
    nr: usize,
    x: &[f32],
    mr: usize,
    k: usize,
    acc: &mut [[f32; NR]; MR],
) {
    for t in 0..mr {
        let xr = &x[t * k..(t + 1) * k];
        for r in 0..nr {
            let wr = &w[r * k..(r + 1) * k];
            // Eight partial sums so the compiler can vectorize without reassociating.
            let mut s = [0f32; 8];
            let mut xc = xr.chunks_exact(8);
            let mut wc = wr.chunks_exact(8);
            for (a, b) in (&mut xc).zip(&mut wc) {
                for j in 0..8 {
                    s[j] += a[j] * b[j];
                }
            }
            let mut tail = 0f32;
            for (a, b) in xc.remainder().iter().zip(wc.remainder()) {
                tail += a * b;
            }
            acc[t][r] = s.iter().sum::<f32>() + tail;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512F; `k % 16 == 0`, `1 <= nr <= NR`, `1 <= mr <= MR`,
    /// `w.len() >= nr * k`, `x.len() >= mr * k`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_block(
        w: &[f32],
        nr: usize,
        x: &[f32],
        mr: usize,
        k: usize,
        acc: &mut [[f32; NR]; MR],
    ) {
        // Missing rows/tokens alias the last real one; their results are discarded.
        let wp: [*const f32; NR] = std::array::from_fn(|r| w[r.min(nr - 1) * k..].as_ptr());
        let xp: [*const f32; MR] = std::array::from_fn(|t| x[t.min(mr - 1) * k..].as_ptr());
        let mut a = [[_mm512_setzero_ps(); NR]; MR];
        let mut i = 0;
        while i < k {
            // SAFETY: i + 16 <= k and every pointer starts a row of at least k elements.
            unsafe {
                let wv: [__m512; NR] = std::array::from_fn(|r| _mm512_loadu_ps(wp[r].add(i)));
                for t in 0..MR {
                    let xv = _mm512_loadu_ps(xp[t].add(i));
                    for r in 0..NR {
                        a[t][r] = _mm512_fmadd_ps(xv, wv[r], a[t][r]);
                    }
                }
            }
            i += 16;
        }
        for t in 0..mr {
            for r in 0..nr {
                acc[t][r] = _mm512_reduce_add_ps(a[t][r]);
            }
        }
    }
}
