//! The CPU backend: hetero-sme's quantized kernels on weights repacked once at `prepare`,
//! their tiles spread over the thread pool by work stealing; F32/F16/BF16 weights are
//! dequantized once to f32 and take a small f32 micro-kernel.

use std::sync::{Arc, Mutex};

use hetero_sme::{GgmlType, OutMut};
use hetero_uma::ColumnsMut;

use super::{check_ld, Backend, BackendError, WeightId, WeightView};
use hetero_sme::ThreadPool as Pool;

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

/// A weight's CPU form, made once at `prepare`.
enum Form {
    /// hetero-sme's forms of a block-quantized weight: the packed GEMV's and/or the int8
    /// GEMM's.
    Quant {
        gemv: Option<(Aligned64, hetero_sme::QType)>,
        int8: Option<hetero_sme::Int8Weight>,
    },
    /// The rows dequantized to f32 (F32/F16/BF16 weights, and quantized ones under the
    /// portable/avx512 kernels).
    F32(Vec<f32>),
}

struct Prepared {
    n: usize,
    k: usize,
    form: Form,
}

impl Prepared {
    fn new(w: &WeightView<'_>, kernel: CpuKernel) -> Result<Self, BackendError> {
        use hetero_sme::{
            BlockQ4_0, BlockQ4_1, BlockQ8_0, Int8Format, Int8Weight, QType, QuantBlock,
        };
        let (n, k) = (w.n, w.k);
        let rb = w.row_bytes()?;
        let qty = match w.ty {
            GgmlType::Q4_0 => Some(QType::Q4_0),
            GgmlType::Q4_1 => Some(QType::Q4_1),
            GgmlType::Q8_0 => Some(QType::Q8_0),
            _ => None,
        };
        let (gemv, int8) = (kernel.uses_gemv(), kernel.uses_int8());
        let form = match qty {
            Some(ty) if gemv || int8 => {
                let gemv = if gemv {
                    let len = hetero_sme::qpacked_len(ty, k, n)?;
                    let mut buf = Aligned64::zeroed(len);
                    let dst = buf.bytes_mut();
                    match ty {
                        QType::Q4_0 => BlockQ4_0::slice_from_bytes(w.data)
                            .and_then(|b| hetero_sme::pack_q4_0(b, k, n, 0..n, dst)),
                        QType::Q4_1 => BlockQ4_1::slice_from_bytes(w.data)
                            .and_then(|b| hetero_sme::pack_q4_1(b, k, n, 0..n, dst)),
                        QType::Q8_0 => BlockQ8_0::slice_from_bytes(w.data)
                            .and_then(|b| hetero_sme::pack_q8_0(b, k, n, 0..n, dst)),
                    }?;
                    Some((buf, ty))
                } else {
                    None
                };
                let int8 = if int8 {
                    let format = match ty {
                        QType::Q4_0 => Int8Format::Q4_0,
                        QType::Q4_1 => Int8Format::Q4_1,
                        QType::Q8_0 => Int8Format::Q8_0,
                    };
                    Some(Int8Weight::pack_gguf(format, w.data, n, k)?)
                } else {
                    None
                };
                Form::Quant { gemv, int8 }
            }
            _ => {
                if k > MAX_K {
                    return Err(BackendError::TooWide { k, max: MAX_K });
                }
                let mut f = vec![0f32; n * k];
                for (r, row) in f.chunks_exact_mut(k.max(1)).enumerate() {
                    hetero_sme::dequantize_row(w.ty, &w.data[r * rb..(r + 1) * rb], row)?;
                }
                Form::F32(f)
            }
        };
        Ok(Prepared { n, k, form })
    }
}

/// The CPU backend: hetero-sme's quantized kernels on weights repacked at `prepare`, spread over
/// the pool by work stealing; weights of other types take an f32 path (rows dequantized once,
/// a block of rows times a block of tokens).
pub struct CpuBackend {
    pool: Arc<Pool>,
    kernel: CpuKernel,
    prepared: Vec<Prepared>,
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
            prepared: Vec::new(),
            acts: Mutex::new(hetero_sme::QActs::default()),
        }
    }

    /// Number of weights prepared.
    pub fn prepared_count(&self) -> usize {
        self.prepared.len()
    }

    /// The kernel in use.
    pub fn kernel(&self) -> CpuKernel {
        self.kernel
    }

    /// The thread pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn get(&self, id: WeightId) -> Result<&Prepared, BackendError> {
        self.prepared
            .get(id.index())
            .ok_or(BackendError::UnknownWeight(id))
    }

    /// The matmul into `out` (an exclusive claim on rows `t < m` at `t * ldo`, columns `0..n`).
    fn run(
        &self,
        p: &Prepared,
        x: &[f32],
        m: usize,
        mut out: OutMut<'_>,
        ldo: usize,
    ) -> Result<(), BackendError> {
        let (n, k) = (p.n, p.k);
        if x.len() != m * k {
            return Err(BackendError::Shape("x"));
        }
        if m > 0 && (ldo < n || out.len() < (m - 1) * ldo + n) {
            return Err(BackendError::Shape("out"));
        }
        match &p.form {
            Form::Quant { gemv, int8 } => {
                let use_int8 = match self.kernel {
                    CpuKernel::Int8 => true,
                    CpuKernel::Sme => m >= SME_GEMM_MIN_ROWS,
                    _ => false,
                };
                match (use_int8, int8, gemv) {
                    (true, Some(iw), _) | (false, Some(iw), None) => {
                        self.matmul_int8(iw, x, m, out, ldo)
                    }
                    (_, _, Some((buf, ty))) => {
                        let pw = hetero_sme::QPackedRef::new(buf.bytes(), *ty, k, n)?;
                        self.matmul_gemv(pw, x, m, out, ldo)
                    }
                    (_, None, None) => Err(BackendError::Shape("empty CPU form")),
                }
            }
            Form::F32(w) => {
                self.matmul_f32(w, n, k, x, m, out.as_mut_ptr(), ldo);
                Ok(())
            }
        }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn kind(&self) -> hetero_partition::Backend {
        hetero_partition::Backend::Cpu
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<WeightId, BackendError> {
        let id = WeightId::new(self.prepared.len())?;
        let p = Prepared::new(w, self.kernel)?;
        self.prepared.push(p);
        Ok(id)
    }

    fn reserve(&mut self, max_rows: usize, max_k: usize) -> Result<(), BackendError> {
        let need = max_rows
            .checked_mul(max_k)
            .ok_or(BackendError::Shape("reserve"))?;
        let a = self.acts.get_mut().unwrap_or_else(|e| e.into_inner());
        if a.capacity() < need {
            *a = hetero_sme::QActs::with_capacity(max_rows, max_k);
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
        let p = self.get(id)?;
        check_ld(out, m, p.n, ldo)?;
        self.run(p, x, m, OutMut::new(out), ldo)
    }

    fn matmul_view(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        out: &mut ColumnsMut<'_>,
    ) -> Result<(), BackendError> {
        let p = self.get(id)?;
        let stride = out.row_stride();
        if out.rows() != m || out.cols().len() != p.n || !stride.is_multiple_of(4) {
            return Err(BackendError::Shape("view"));
        }
        if m == 0 {
            return Ok(());
        }
        let ldo = stride / 4;
        let span = (m - 1) * ldo + p.n;
        // SAFETY: the view is uma's exclusive claim on columns `cols` of rows `0..m` (row `t`
        // at `t * stride` bytes from its first float, disjoint from every other view of the
        // slot, 4-aligned: the slot is 4096-aligned and stride and column offset are whole
        // floats), valid while `out` is borrowed; the plan writes only rows `t < m`, columns
        // `0..n` of it, which is `span` floats from the first.
        let o = unsafe { OutMut::from_raw_parts(out.as_mut_ptr().cast::<f32>(), span) };
        self.run(p, x, m, o, ldo)
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
        mut out: OutMut<'_>,
        ldo: usize,
    ) -> Result<(), BackendError> {
        let (n, k) = (w.n(), w.k());
        let kernel = hetero_sme::Kernel::best_gemv();
        let g = hetero_sme::GEMV_MAX_ROWS;
        let base = out.as_mut_ptr();
        let mut t0 = 0;
        while t0 < m {
            let mm = (m - t0).min(g);
            // SAFETY: `out` claims rows `t < m` at `t * ldo`, columns `0..n` (checked span);
            // this group's rows `t0..t0 + mm` are a part of that claim, used by one plan at a
            // time (the loop runs the plans one after the other).
            let part = unsafe { OutMut::from_raw_parts(base.add(t0 * ldo), (mm - 1) * ldo + n) };
            let plan = hetero_sme::QPackedPlan::with_out(
                kernel,
                &x[t0 * k..(t0 + mm) * k],
                mm,
                k,
                w,
                part,
                ldo,
            )?;
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
        out: OutMut<'_>,
        ldo: usize,
    ) -> Result<(), BackendError> {
        let kernel = hetero_sme::Int8Kernel::best();
        let mut acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        if acts.capacity() < m * w.k() {
            // Only when `reserve` was not told about this size (not on the engine's path).
            *acts = hetero_sme::QActs::with_capacity(m, w.k());
        }
        kernel.quantize_acts(x, m, w.k(), &mut acts)?;
        // Decode tiles sized to the pool (a 12-group k/v projection would otherwise use three
        // threads).
        let plan = hetero_sme::Int8Plan::with_out(kernel, w, &acts, out, ldo)?
            .with_workers(self.pool.threads());
        self.run_plan(plan.tiles(), &|st, th| plan.run_worker(st, th))
    }

    /// Runs a hetero-sme plan's tiles on every pool thread through the pool's work stealing.
    fn run_plan(
        &self,
        tiles: usize,
        worker: &(dyn Fn(&hetero_sme::StealState, usize) -> Result<(), hetero_sme::Error> + Sync),
    ) -> Result<(), BackendError> {
        let failed: Mutex<Option<hetero_sme::Error>> = Mutex::new(None);
        self.pool
            .run_workers(tiles, &|st: &hetero_sme::StealState, th| {
                if let Err(e) = worker(st, th) {
                    *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                }
            })?;
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// The f32 path: `NR` dequantized weight rows times `MR` tokens at a time.
    #[allow(clippy::too_many_arguments)]
    fn matmul_f32(
        &self,
        w: &[f32],
        n: usize,
        k: usize,
        x: &[f32],
        m: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        let kernel = if k.is_multiple_of(16) {
            self.kernel.f32_kernel()
        } else {
            CpuKernel::Portable
        };
        let out = SendPtr(out);
        let n_tasks = n.div_ceil(ROWS_PER_TASK);
        let task = |t: usize, _thread: usize| {
            let out = &out;
            let r_end = ((t + 1) * ROWS_PER_TASK).min(n);
            let mut r0 = t * ROWS_PER_TASK;
            while r0 < r_end {
                let nr = (r_end - r0).min(NR);
                let panel = &w[r0 * k..(r0 + nr) * k];
                let mut t0 = 0;
                while t0 < m {
                    let mr = (m - t0).min(MR);
                    let mut acc = [[0f32; NR]; MR];
                    let xs = &x[t0 * k..(t0 + mr) * k];
                    dot_block(kernel, panel, nr, xs, mr, k, &mut acc);
                    for (ti, row) in acc.iter().enumerate().take(mr) {
                        // SAFETY: the caller's output claim covers rows `< m` at `ldo`,
                        // columns `0..n`; tasks write disjoint column ranges `[r0, r0 + nr)`
                        // of it, so no two writes overlap.
                        let o = unsafe {
                            std::slice::from_raw_parts_mut(out.0.add((t0 + ti) * ldo + r0), nr)
                        };
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

/// The f32 path's output pointer, shared by its tasks (each writes its own columns).
struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint column ranges through it (see `matmul_f32`).
unsafe impl Sync for SendPtr {}

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
