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

    /// As [`matmul`](Self::matmul) with output rows `ldo >= n` floats apart: row `t` of the
    /// result lands in `out[t * ldo..t * ldo + n]` and the floats between rows are untouched
    /// (one side of a column split writing its columns of a shared output in place). The
    /// default handles `ldo == n` only.
    fn matmul_ld(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) -> Result<(), BackendError> {
        if ldo != w.n {
            return Err(BackendError::Shape(
                "this backend writes contiguous rows only",
            ));
        }
        let len = m * w.n;
        let out = out.get_mut(..len).ok_or(BackendError::Shape("out"))?;
        self.matmul(w, x, m, out)
    }
}

/// Checks an output of `m` rows of `n` floats, `ldo` apart.
pub(crate) fn check_ld(out: &[f32], m: usize, n: usize, ldo: usize) -> Result<(), BackendError> {
    if ldo < n {
        return Err(BackendError::Shape("ldo below n"));
    }
    let need = match m {
        0 => 0,
        _ => (m - 1)
            .checked_mul(ldo)
            .and_then(|v| v.checked_add(n))
            .ok_or(BackendError::Shape("out"))?,
    };
    if out.len() < need {
        return Err(BackendError::Shape("out"));
    }
    Ok(())
}

/// Longest row the f32 fallback path handles (its per-task scratch lives on the stack).
pub const MAX_K: usize = 4096;
/// Weight rows dequantized together by the f32 fallback (its micro-kernel's row block).
const NR: usize = 4;
/// Tokens per f32 micro-kernel call.
const MR: usize = 4;
/// Weight rows per pool task of the f32 fallback.
const ROWS_PER_TASK: usize = 32;
/// From this many rows (tokens) on, [`CpuKernel::Sme`] runs the int8 GEMM instead of the GEMV:
/// below it the GEMV's f32 activations cost nothing extra (decode streams the weight once
/// either way); above it the GEMV re-reads the weight for every 16 tokens while the int8 GEMM
/// does four multiply-adds per instruction per lane.
pub const SME_GEMM_MIN_ROWS: usize = 4;

/// The CPU kernels; all are public so tests can run every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuKernel {
    /// Weights dequantized to f32 in stack scratch, plain-Rust 4x4 f32 micro-kernel: the
    /// oracle, any CPU.
    Portable,
    /// As `Portable` with an AVX-512F micro-kernel.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// hetero-sme's int8 GEMM ([`hetero_sme::Int8Weight`] repacked at `prepare`, activations
    /// quantized per 32-element block to 8 bits: llama.cpp's scheme; AVX-512 VNNI where the CPU
    /// has it, else hetero-sme's portable integer kernel) for Q4_0, Q4_1 and Q8_0 weights.
    Int8,
    /// hetero-sme's packed quantized GEMV ([`hetero_sme::QPackedRef`] repacked at `prepare`, f32
    /// activations dequantizing the weights in registers), tokens in groups of 16.
    SmeGemv,
    /// [`CpuKernel::SmeGemv`] below [`SME_GEMM_MIN_ROWS`] rows (decode, f32 activations),
    /// [`CpuKernel::Int8`] from there (prefill). A token's result depends on how many tokens
    /// share its call, so it is not batch-invariant.
    Sme,
}

impl CpuKernel {
    /// Every batch-invariant kernel this CPU can run (a token's result does not depend on the
    /// other tokens of the call), the oracle first.
    pub fn available() -> Vec<CpuKernel> {
        let mut v = vec![CpuKernel::Portable];
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512f") {
            v.push(CpuKernel::Avx512);
        }
        v.push(CpuKernel::SmeGemv);
        v.push(CpuKernel::Int8);
        v
    }

    /// [`available`](Self::available) plus the kernels that are not batch-invariant, which
    /// batched engines must not use: [`CpuKernel::Sme`]. Tests and `run --kernel` go through
    /// this list.
    pub fn all() -> Vec<CpuKernel> {
        let mut v = Self::available();
        v.push(CpuKernel::Sme);
        v
    }

    /// The kernel a single sequence runs by default (`run`, `bench`): [`CpuKernel::best`]. With
    /// VNNI that is the int8 GEMM for every row count: on the dev VM's one thread it decodes
    /// 2.7x faster than the f32-activation GEMV (170 vs 62 tok/s), at llama.cpp's numerics.
    pub fn default_for_run() -> CpuKernel {
        Self::best()
    }

    /// The best batch-invariant kernel (the batched agents engine, `profile`): the int8 GEMM
    /// where it has a vector kernel, else the f32-activation GEMV.
    pub fn best() -> CpuKernel {
        if hetero_sme::Int8Kernel::best() == hetero_sme::Int8Kernel::Portable {
            CpuKernel::SmeGemv
        } else {
            CpuKernel::Int8
        }
    }

    /// The name `run --kernel` takes.
    pub fn name(self) -> &'static str {
        match self {
            CpuKernel::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            CpuKernel::Avx512 => "avx512",
            CpuKernel::Int8 => "sme-int8",
            CpuKernel::SmeGemv => "sme-gemv",
            CpuKernel::Sme => "sme",
        }
    }

    /// The kernel called `name` (see [`CpuKernel::name`]) if this CPU can run it.
    pub fn from_name(name: &str) -> Option<CpuKernel> {
        Self::all().into_iter().find(|k| k.name() == name)
    }

    fn uses_gemv(self) -> bool {
        matches!(self, CpuKernel::SmeGemv | CpuKernel::Sme)
    }

    fn uses_int8(self) -> bool {
        matches!(self, CpuKernel::Int8 | CpuKernel::Sme)
    }

    /// The f32 micro-kernel for weights without a hetero-sme form (F32, F16, BF16 tensors).
    fn f32_kernel(self) -> CpuKernel {
        match self {
            CpuKernel::Portable => CpuKernel::Portable,
            #[cfg(target_arch = "x86_64")]
            _ if std::is_x86_feature_detected!("avx512f") => CpuKernel::Avx512,
            _ => CpuKernel::Portable,
        }
    }
}

/// A buffer whose usable part starts on a 64-byte boundary (the packed GEMV's fastest case).
struct Aligned64 {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned64 {
    fn zeroed(len: usize) -> Self {
        let buf = vec![0u8; len + 63];
        let off = buf.as_ptr().align_offset(64).min(63);
        Self { buf, off, len }
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// A weight's hetero-sme forms, made once at `prepare`.
struct Prepared {
    n: usize,
    k: usize,
    /// The packed GEMV form.
    gemv: Option<(Aligned64, GgmlType)>,
    /// The int8 GEMM form.
    int8: Option<hetero_sme::Int8Weight>,
}

fn sme_err(e: hetero_sme::Error) -> BackendError {
    BackendError::Kernel(format!("hetero-sme: {e}"))
}

impl Prepared {
    fn new(w: &WeightView<'_>, gemv: bool, int8: bool) -> Result<Option<Self>, BackendError> {
        let (n, k, ty) = (w.n, w.k, w.ty);
        // The types both hetero-sme forms compute (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
        // Q6_K); the others take the f32 path.
        if hetero_sme::qpacked_len(ty, k, n).is_err() {
            return Ok(None);
        }
        let mut p = Prepared {
            n,
            k,
            gemv: None,
            int8: None,
        };
        if gemv {
            let len = hetero_sme::qpacked_len(ty, k, n).map_err(sme_err)?;
            let mut buf = Aligned64::zeroed(len);
            hetero_sme::qpack_gguf(ty, w.data, k, n, 0..n, buf.bytes_mut()).map_err(sme_err)?;
            p.gemv = Some((buf, ty));
        }
        if int8 {
            p.int8 = Some(hetero_sme::Int8Weight::pack_gguf(ty, w.data, n, k).map_err(sme_err)?);
        }
        Ok(Some(p))
    }
}

/// The CPU backend: hetero-sme's quantized kernels on weights repacked at `prepare`, spread over
/// the pool by work stealing; weights of other types take an f32 path (dequantize a block of
/// rows into stack scratch, multiply by a block of tokens).
pub struct CpuBackend {
    pool: Arc<Pool>,
    kernel: CpuKernel,
    /// Repacked weights, keyed by the address and length of their original bytes.
    prepared: HashMap<(usize, usize), Prepared>,
    /// Quantized activations of the int8 GEMM, sized in `reserve`.
    acts: Mutex<hetero_sme::QActs>,
}

impl CpuBackend {
    /// A CPU backend on `pool` using `kernel` (which must be in [`CpuKernel::all`]; an
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
            prepared: HashMap::new(),
            acts: Mutex::new(hetero_sme::QActs::default()),
        }
    }

    /// Number of weights repacked for hetero-sme's kernels.
    pub fn packed_count(&self) -> usize {
        self.prepared.len()
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
        let (gemv, int8) = (self.kernel.uses_gemv(), self.kernel.uses_int8());
        if !gemv && !int8 {
            return Ok(());
        }
        let key = (w.data.as_ptr() as usize, w.data.len());
        if let std::collections::hash_map::Entry::Vacant(e) = self.prepared.entry(key) {
            if let Some(p) = Prepared::new(w, gemv, int8)? {
                e.insert(p);
                if int8 {
                    self.reserve(1, w.k);
                }
            }
        }
        Ok(())
    }

    fn reserve(&mut self, m: usize, k: usize) {
        let a = self.acts.get_mut().unwrap_or_else(|e| e.into_inner());
        if a.capacity() < m.saturating_mul(k) {
            *a = hetero_sme::QActs::with_capacity(m, k);
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
        let (n, k) = (w.n, w.k);
        let rb = quant::row_bytes(w.ty, k).ok_or(BackendError::Unsupported(w.ty))?;
        if w.data.len() != n * rb {
            return Err(BackendError::Shape("weight bytes"));
        }
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        check_ld(out, m, n, ldo)?;
        if let Some(p) = self.prepared.get(&(w.data.as_ptr() as usize, w.data.len())) {
            if p.n == n && p.k == k {
                let int8 = match self.kernel {
                    CpuKernel::Int8 => true,
                    CpuKernel::Sme => m >= SME_GEMM_MIN_ROWS,
                    _ => false,
                };
                if let (true, Some(iw)) = (int8, &p.int8) {
                    return self.matmul_int8(iw, x, m, out, ldo);
                }
                if let Some((buf, ty)) = &p.gemv {
                    let pw =
                        hetero_sme::QPackedRef::new(buf.bytes(), *ty, k, n).map_err(sme_err)?;
                    return self.matmul_gemv(pw, x, m, out, ldo);
                }
                if let Some(iw) = &p.int8 {
                    return self.matmul_int8(iw, x, m, out, ldo);
                }
            }
        }
        if k > MAX_K {
            return Err(BackendError::TooWide(k));
        }
        self.matmul_f32(w, rb, x, m, out, ldo);
        Ok(())
    }
}

impl CpuBackend {
    /// hetero-sme's packed GEMV, tokens in groups of `GEMV_MAX_ROWS`, each group's 64-row tiles
    /// spread over the pool; results land straight in `out`.
    fn matmul_gemv(
        &self,
        w: hetero_sme::QPackedRef<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) -> Result<(), BackendError> {
        let (n, k) = (w.n(), w.k());
        let kernel = hetero_sme::Kernel::best_gemv();
        let g = hetero_sme::GEMV_MAX_ROWS;
        let mut t0 = 0;
        while t0 < m {
            let mm = (m - t0).min(g);
            let plan = hetero_sme::QPackedPlan::new(
                kernel,
                &x[t0 * k..(t0 + mm) * k],
                mm,
                k,
                w,
                &mut out[t0 * ldo..(t0 + mm - 1) * ldo + n],
                ldo,
            )
            .map_err(sme_err)?;
            self.run_plan(plan.tiles(), &|st, th| plan.run_worker(st, th))?;
            t0 += mm;
        }
        Ok(())
    }

    /// hetero-sme's int8 GEMM: activations quantized into the reserved scratch, then the
    /// GEMM's tiles spread over the pool.
    fn matmul_int8(
        &self,
        w: &hetero_sme::Int8Weight,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) -> Result<(), BackendError> {
        let kernel = hetero_sme::Int8Kernel::best();
        let mut acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        if acts.capacity() < m * w.k() {
            // Only when `reserve` was not told about this size (not on the engine's path).
            *acts = hetero_sme::QActs::with_capacity(m, w.k());
        }
        kernel
            .quantize_acts_for(x, m, w.k(), w.act_blocks(), &mut acts)
            .map_err(sme_err)?;
        let plan = hetero_sme::Int8Plan::new(kernel, w, &acts, out, ldo).map_err(sme_err)?;
        self.run_plan(plan.tiles(), &|st, th| plan.run_worker(st, th))
    }

    /// Runs a hetero-sme plan's tiles on every pool thread through the pool's work stealing.
    fn run_plan(
        &self,
        tiles: usize,
        worker: &(dyn Fn(&hetero_sme::StealState, usize) -> Result<(), hetero_sme::Error> + Sync),
    ) -> Result<(), BackendError> {
        let failed: Mutex<Option<hetero_sme::Error>> = Mutex::new(None);
        self.pool.run_workers(tiles, &|st, th| {
            if let Err(e) = worker(st, th) {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        });
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(sme_err(e)),
            None => Ok(()),
        }
    }

    /// The f32 path: dequantize `NR` weight rows into stack scratch, multiply by `MR` tokens.
    fn matmul_f32(
        &self,
        w: &WeightView<'_>,
        rb: usize,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) {
        let (n, k) = (w.n, w.k);
        let kernel = if k % 16 == 0 {
            self.kernel.f32_kernel()
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
                        let o = unsafe { outs.slice((t0 + ti) * ldo + r0, nr) };
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
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx512 => {
            assert!(
                k.is_multiple_of(16)
                    && w.len() >= nr * k
                    && x.len() >= mr * k
                    && nr >= 1
                    && mr >= 1
            );
            // SAFETY: `Avx512` is only chosen when the CPU reports AVX-512F
            // (`CpuKernel::available`, `f32_kernel`), the target feature the function enables; the
            // assert above establishes the slice-length preconditions it reads within.
            unsafe { avx512::dot_block(w, nr, x, mr, k, acc) }
        }
        _ => dot_block_portable(w, nr, x, mr, k, acc),
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
