//! The CPU backend: hetero-sme's quantized kernels on weights repacked once at `prepare`,
//! their tiles spread over the thread pool by work stealing; F16/BF16 weights are packed once
//! into hetero-sme's FP16/BF16 panels and take its tile GEMM (at any K); F32 weights (and
//! every weight under the portable/avx512 oracle kernels) are dequantized once to f32 and take
//! a small f32 micro-kernel.

use std::sync::{Arc, Mutex};

use hetero_sme::{GgmlType, OutMut};
use hetero_uma::ColumnsMut;

use super::prepare::{Planned, PrepareReport, PrepareSource, Section, Views};
use super::{check_ld, Backend, BackendError, WeightId, WeightView};
use hetero_sme::ThreadPool as Pool;

/// Weight rows dequantized together by the f32 fallback (its micro-kernel's row block).
const NR: usize = 4;
/// Tokens per f32 micro-kernel call.
const MR: usize = 4;
/// Weight rows per pool task of the f32 fallback.
const ROWS_PER_TASK: usize = 32;
/// Most matmuls [`CpuBackend::matmul_group`] runs as one pool job (a layer's Q, K and V).
pub const MAX_GROUP: usize = 3;
/// Rows above which a matmul takes every pool thread; at or below it (decode, small batches)
/// the threads it wakes follow the weight bytes it streams ([`CpuBackend::threads_for`]).
const SIZED_ROWS: usize = 16;
/// `r·c` of the thread-count model in [`CpuBackend::threads_for`], bytes: one thread streams a
/// packed weight at `r` ≈ 10-14 GB/s (benches/results/sme.md), and each thread a job wakes
/// costs `c` ≈ 0.1-0.2 µs (its seat store, its wake-up, its seat read at the close).
const BYTES_PER_WAKE: usize = 2048;
/// From this many rows (tokens) on, [`CpuKernel::Sme`] runs the int8 GEMM instead of the GEMV:
/// below it the GEMV's f32 activations cost nothing extra (decode streams the weight once
/// either way); above it the GEMV re-reads the weight for every 16 tokens while the int8 GEMM
/// does four multiply-adds per instruction per lane.
pub const SME_GEMM_MIN_ROWS: usize = 4;

/// Rows (tokens) from which [`CpuKernel::Dq`] runs hetero-sme's decompression GEMM instead of
/// the int8 GEMM, per decompression kernel, as measured (`sme/examples/dq_gemm.rs`,
/// benches/results/sme.md): `None` where it never wins. AVX512-BF16 on Zen 4 (the dev VM):
/// never — `vdpbf16ps` peaks at ~150-180 GFLOP/s per core there against the VNNI int8 GEMM's
/// ~280-340 GOP/s at every M. AMX-BF16: see [`DQ_MIN_ROWS_AMX`].
/// `threads`: the pool's; with many threads a small M is cut into few-row chunks, each
/// dequantizing its weight panel again, so the crossover moves up (AMX: at least 8 rows a
/// thread, see [`DQ_MIN_ROWS_AMX`]).
/// The environment variable `HETERO_DQ_MIN_ROWS=N` (read once) overrides it for every kernel
/// and thread count (`off`: never), to measure the crossover on another CPU or to test the
/// path where it does not win.
pub fn dq_min_rows(kernel: hetero_sme::DqKernel, threads: usize) -> Option<usize> {
    static OVERRIDE: std::sync::OnceLock<Option<Option<usize>>> = std::sync::OnceLock::new();
    let o = OVERRIDE.get_or_init(|| {
        let v = std::env::var("HETERO_DQ_MIN_ROWS").ok()?;
        Some(v.trim().parse().ok())
    });
    if let Some(o) = o {
        return *o;
    }
    match kernel.name() {
        "amx-bf16" => Some(DQ_MIN_ROWS_AMX.max(8 * threads)),
        _ => None,
    }
}

/// [`dq_min_rows`] for AMX-BF16, and 8 rows a thread above 8 threads: measured with
/// `dq_gemm threads T q4_0 8b M` (8B shapes, wall clock; H200 machine's Xeon, 2026-12-04): at
/// 16 threads the int8 GEMM was 1.29× faster at M = 64 and the decompression GEMM 1.13× at
/// M = 128; on the 2-vCPU AMX dev VM the decompression GEMM already won at M = 64 (1.2×).
pub const DQ_MIN_ROWS_AMX: usize = 64;

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
    /// has it, else AVX2, else hetero-sme's portable integer kernel) for Q4_0, Q4_1 and Q8_0
    /// weights.
    Int8,
    /// hetero-sme's packed quantized GEMV ([`hetero_sme::QPackedRef`] repacked at `prepare`, f32
    /// activations dequantizing the weights in registers), tokens in groups of 16.
    SmeGemv,
    /// [`CpuKernel::SmeGemv`] below [`SME_GEMM_MIN_ROWS`] rows (decode, f32 activations),
    /// [`CpuKernel::Int8`] from there (prefill). A token's result depends on how many tokens
    /// share its call, so it is not batch-invariant.
    Sme,
    /// [`CpuKernel::Int8`] below [`dq_min_rows`] rows, hetero-sme's decompression GEMM
    /// ([`hetero_sme::DqPlan`]: the int8 weight dequantized once per matmul into BF16/FP16
    /// panels, BF16 activations, AMX-BF16 or AVX512-BF16 tiles) from there: prefill on the
    /// matrix units. Not batch-invariant. Where the decompression GEMM never wins on this CPU
    /// it is the int8 GEMM at every row count.
    Dq,
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
        v.push(CpuKernel::Dq);
        v
    }

    /// The kernel a single sequence runs by default (`run`, `bench`): [`CpuKernel::best`]. With
    /// VNNI that is the int8 GEMM for every row count: on the dev VM's one thread it decodes
    /// 2.7x faster than the f32-activation GEMV (170 vs 62 tok/s), at llama.cpp's numerics.
    pub fn default_for_run() -> CpuKernel {
        match Self::best() {
            CpuKernel::Int8 if dq_min_rows(hetero_sme::DqKernel::best(), 1).is_some() => {
                CpuKernel::Dq
            }
            k => k,
        }
    }

    /// The best batch-invariant kernel (the batched agents engine, `profile`): the int8 GEMM
    /// where it has a vector kernel (AVX-512 VNNI, AMX-INT8 or AVX2), else the f32-activation
    /// GEMV.
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
            CpuKernel::Dq => "sme-dq",
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
        matches!(self, CpuKernel::Int8 | CpuKernel::Sme | CpuKernel::Dq)
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

/// A weight's CPU form, made once at `prepare` (in the arena [`super::prepare`] fills: the
/// mapped prepared-weights cache or memory).
enum Form {
    /// hetero-sme's forms of a block-quantized weight: the packed GEMV's and/or the int8
    /// GEMM's.
    Quant {
        gemv: Option<(Section, GgmlType)>,
        int8: Option<hetero_sme::Int8Weight>,
    },
    /// F16/BF16 weights under the hetero-sme kernels: packed once into 64-column panels of
    /// their own format (the bits copied, exact), run by hetero-sme's tile GEMM on the best
    /// kernel for the format (AVX-512, AVX2+F16C, AMX-BF16 for BF16, SME on aarch64); at M ≤ 16
    /// that GEMM is the FP16 decode GEMV. Any K: the kernels cut K into chunks.
    Packed {
        data: Section,
        format: hetero_sme::PackedFormat,
    },
    /// The rows dequantized to f32 (F32 weights, and every weight under the portable/avx512
    /// kernels).
    F32(Section),
}

struct Prepared {
    n: usize,
    k: usize,
    form: Form,
}

impl Prepared {
    fn from_views(plan: &Planned, v: Views) -> Result<Self, BackendError> {
        let form = match (v.f32, v.packed, v.int8, v.gemv) {
            (Some(f), _, _, _) => Form::F32(f),
            (None, Some((data, format)), _, _) => Form::Packed { data, format },
            (None, None, int8, gemv) => Form::Quant {
                gemv: gemv.map(|g| (g, plan.ty)),
                int8,
            },
        };
        Ok(Prepared {
            n: plan.n,
            k: plan.k,
            form,
        })
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
    /// BF16 activations of the decompression GEMM ([`CpuKernel::Dq`]), sized in `reserve`.
    dq_acts: Mutex<hetero_sme::DqActs>,
    /// What the last [`CpuBackend::prepare_all`] did.
    report: PrepareReport,
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
            dq_acts: Mutex::new(hetero_sme::DqActs::default()),
            report: PrepareReport::default(),
        }
    }

    /// Prepares `views` at once: every weight's forms sized first, then mapped from the
    /// prepared-weights cache when `source` allows and its file passes every check (a warm
    /// start), else packed now on the pool (into the cache file when it can be written, else
    /// into memory; each weight's source pages in the model file given back once it is
    /// packed). The ids are in `views` order. Equivalent to [`Backend::prepare`] on each view in
    /// turn (the same bytes; `tests/prepared_cache.rs`).
    pub fn prepare_all(
        &mut self,
        views: &[WeightView<'_>],
        source: PrepareSource<'_>,
    ) -> Result<Vec<WeightId>, BackendError> {
        if views.is_empty() {
            return Ok(Vec::new());
        }
        let (gemv, int8) = (self.kernel.uses_gemv(), self.kernel.uses_int8());
        let plans = views
            .iter()
            .map(|w| Planned::of(w, gemv, int8))
            .collect::<Result<Vec<_>, _>>()?;
        let first = self.prepared.len();
        WeightId::new(first + views.len())?;
        let (forms, report) =
            super::prepare::prepare_all(&self.pool, self.kernel.name(), views, &plans, source)?;
        let mut ids = Vec::with_capacity(views.len());
        for (plan, v) in plans.iter().zip(forms) {
            ids.push(WeightId::new(self.prepared.len())?);
            self.prepared.push(Prepared::from_views(plan, v)?);
        }
        self.report = report;
        Ok(ids)
    }

    /// What the last [`CpuBackend::prepare_all`] (or `prepare`) did: cache mapped or written,
    /// notes, times.
    pub fn prepare_report(&self) -> &PrepareReport {
        &self.report
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
        match self.path(p, m) {
            Path::Int8(iw) => self.matmul_int8([(iw, out, ldo)], x, m),
            Path::Dq(iw) => self.matmul_dq([(iw, out, ldo)], x, m),
            Path::Gemv(pw) => self.matmul_gemv([(pw?, out, ldo)], x, m),
            Path::F32(w) => {
                self.matmul_f32(w, n, k, x, m, out.as_mut_ptr(), ldo);
                Ok(())
            }
            Path::Packed(w) => self.matmul_packed([(w?, out, ldo)], x, m),
            Path::Empty => Err(BackendError::Shape("empty CPU form")),
        }
    }

    /// Which kernel runs weight `p` on `m` rows.
    fn path<'p>(&self, p: &'p Prepared, m: usize) -> Path<'p> {
        match &p.form {
            Form::Quant { gemv, int8 } => {
                let use_int8 = match self.kernel {
                    CpuKernel::Int8 | CpuKernel::Dq => true,
                    CpuKernel::Sme => m >= SME_GEMM_MIN_ROWS,
                    _ => false,
                };
                let dq = self.kernel == CpuKernel::Dq
                    && dq_min_rows(hetero_sme::DqKernel::best(), self.pool.threads())
                        .is_some_and(|t| m >= t);
                match (use_int8, int8, gemv) {
                    (_, Some(iw), _) if dq => Path::Dq(iw),
                    (true, Some(iw), _) | (false, Some(iw), None) => Path::Int8(iw),
                    (_, _, Some((buf, ty))) => Path::Gemv(
                        hetero_sme::QPackedRef::new(buf.bytes(), *ty, p.k, p.n)
                            .map_err(BackendError::from),
                    ),
                    (_, None, None) => Path::Empty,
                }
            }
            Form::Packed { data, format } => Path::Packed(
                hetero_sme::PackedRef::new(data.u16s(), p.k, p.n, *format)
                    .map_err(BackendError::from),
            ),
            Form::F32(w) => Path::F32(w.f32s()),
        }
    }

    /// `out_i[m x n_i] = x[m x k] · W_iᵀ` for up to [`MAX_GROUP`] weights that share their
    /// input (a layer's Q, K and V; gate and up), each output dense (`n_i` floats a row). When
    /// every weight takes the same quantized kernel, they run as ONE pool job (the activations
    /// quantized once, the plans' tiles in one [`hetero_sme::PlanSet`]); otherwise one after
    /// the other. Either way each output is bit-identical to [`Backend::matmul`] on its own
    /// (same kernel, same tiles: only who runs them differs).
    pub fn matmul_group(
        &self,
        group: &mut [(WeightId, &mut [f32])],
        x: &[f32],
        m: usize,
    ) -> Result<(), BackendError> {
        if group.len() > MAX_GROUP {
            return Err(BackendError::Shape(
                "more matmuls in a group than MAX_GROUP",
            ));
        }
        let mut prepared: [Option<&Prepared>; MAX_GROUP] = [None; MAX_GROUP];
        for (slot, (id, out)) in prepared.iter_mut().zip(group.iter()) {
            let p = self.get(*id)?;
            if x.len() != m * p.k {
                return Err(BackendError::Shape("x"));
            }
            check_ld(out, m, p.n, p.n)?;
            *slot = Some(p);
        }
        let ps = &prepared[..group.len()];
        if m == 0 || group.is_empty() {
            return Ok(());
        }
        let paths: [Option<Path<'_>>; MAX_GROUP] =
            std::array::from_fn(|i| ps.get(i).copied().flatten().map(|p| self.path(p, m)));
        let paths = &paths[..group.len()];
        let int8: [Option<&hetero_sme::Int8Weight>; MAX_GROUP] =
            std::array::from_fn(|i| match paths.get(i) {
                Some(Some(Path::Int8(w))) => Some(*w),
                _ => None,
            });
        let gemv: [Option<hetero_sme::QPackedRef<'_>>; MAX_GROUP] =
            std::array::from_fn(|i| match paths.get(i) {
                Some(Some(Path::Gemv(Ok(w)))) => Some(*w),
                _ => None,
            });
        let packed: [Option<hetero_sme::PackedRef<'_>>; MAX_GROUP] =
            std::array::from_fn(|i| match paths.get(i) {
                Some(Some(Path::Packed(Ok(w)))) => Some(*w),
                _ => None,
            });
        let dq: [Option<&hetero_sme::Int8Weight>; MAX_GROUP] =
            std::array::from_fn(|i| match paths.get(i) {
                Some(Some(Path::Dq(w))) => Some(*w),
                _ => None,
            });
        let n = group.len();
        if n > 1 && dq[..n].iter().all(Option::is_some) {
            let jobs = dq.into_iter().flatten().zip(group.iter_mut());
            return self.matmul_dq(jobs.map(|(w, o)| (w, OutMut::new(o.1), w.n())), x, m);
        }
        if n > 1 && packed[..n].iter().all(Option::is_some) {
            let jobs = packed.into_iter().flatten().zip(group.iter_mut());
            return self.matmul_packed(jobs.map(|(w, o)| (w, OutMut::new(o.1), w.n())), x, m);
        }
        if n > 1 && int8[..n].iter().all(Option::is_some) {
            let jobs = int8.into_iter().flatten().zip(group.iter_mut());
            return self.matmul_int8(jobs.map(|(w, o)| (w, OutMut::new(o.1), w.n())), x, m);
        }
        if n > 1 && gemv[..n].iter().all(Option::is_some) {
            let jobs = gemv.into_iter().flatten().zip(group.iter_mut());
            return self.matmul_gemv(jobs.map(|(w, o)| (w, OutMut::new(o.1), w.n())), x, m);
        }
        for (id, out) in group.iter_mut() {
            let p = self.get(*id)?;
            self.run(p, x, m, OutMut::new(out), p.n)?;
        }
        Ok(())
    }

    /// The threads a job of `tiles` tiles streaming `bytes` of weight on `m` rows wakes: every
    /// pool thread above `SIZED_ROWS` rows; at decode sizes `⌈√(bytes / BYTES_PER_WAKE)⌉`,
    /// the `p` that minimizes `bytes / (p·r) + p·c` (streaming time plus wake-ups, see
    /// `BYTES_PER_WAKE`): e.g. 10 threads for SmolLM2's 576×576 Q4_1 (207 KB), 13 for its
    /// fused Q/K/V (345 KB), every thread of a 16-thread pool for gate/up and down.
    pub fn threads_for(&self, bytes: usize, m: usize, tiles: usize) -> usize {
        let all = self.pool.threads();
        let p = if m > SIZED_ROWS {
            all
        } else {
            ((bytes / BYTES_PER_WAKE) as f64).sqrt().ceil() as usize
        };
        p.clamp(1, all).min(tiles.max(1))
    }
}

/// The kernel a weight takes for a row count (see [`CpuBackend::path`]).
enum Path<'p> {
    Int8(&'p hetero_sme::Int8Weight),
    Dq(&'p hetero_sme::Int8Weight),
    Gemv(Result<hetero_sme::QPackedRef<'p>, BackendError>),
    Packed(Result<hetero_sme::PackedRef<'p>, BackendError>),
    F32(&'p [f32]),
    Empty,
}

/// The items of `jobs` in an array of [`MAX_GROUP`] (the rest `None`); more is an error.
fn up_to_group<T>(
    jobs: impl IntoIterator<Item = T>,
) -> Result<[Option<T>; MAX_GROUP], BackendError> {
    let mut it = jobs.into_iter();
    let out: [Option<T>; MAX_GROUP] = std::array::from_fn(|_| it.next());
    match it.next() {
        Some(_) => Err(BackendError::Shape(
            "more matmuls in a group than MAX_GROUP",
        )),
        None => Ok(out),
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
        let ids = self.prepare_all(std::slice::from_ref(w), PrepareSource::default())?;
        ids.first()
            .copied()
            .ok_or(BackendError::Shape("prepare returned no id"))
    }

    fn reserve(&mut self, max_rows: usize, max_k: usize) -> Result<(), BackendError> {
        let need = max_rows
            .checked_mul(max_k)
            .ok_or(BackendError::Shape("reserve"))?;
        let a = self.acts.get_mut().unwrap_or_else(|e| e.into_inner());
        if a.capacity() < need {
            *a = hetero_sme::QActs::with_capacity(max_rows, max_k);
        }
        if self.kernel == CpuKernel::Dq {
            let d = self.dq_acts.get_mut().unwrap_or_else(|e| e.into_inner());
            let need =
                hetero_sme::dq_acts_len(max_rows, max_k).ok_or(BackendError::Shape("reserve"))?;
            // With an accumulator slot per pool thread (the AMX kernel's C between K blocks).
            if d.capacity() < need || d.workers() < self.pool.threads() {
                *d = hetero_sme::DqActs::with_workers(max_rows, max_k, self.pool.threads());
            }
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
    /// hetero-sme's packed GEMV for each `(weight, out, ldo)` of `jobs` (all on the input `x`),
    /// tokens in groups of `GEMV_MAX_ROWS`; per token group, the 64-row tiles of every weight
    /// in one pool job. Results land straight in the outputs.
    fn matmul_gemv<'o>(
        &self,
        jobs: impl IntoIterator<Item = (hetero_sme::QPackedRef<'o>, OutMut<'o>, usize)>,
        x: &[f32],
        m: usize,
    ) -> Result<(), BackendError> {
        let mut jobs = up_to_group(jobs)?;
        let kernel = hetero_sme::Kernel::best_gemv();
        let g = hetero_sme::GEMV_MAX_ROWS;
        let mut t0 = 0;
        while t0 < m {
            let mm = (m - t0).min(g);
            let mut plans: [Option<hetero_sme::QPackedPlan<'_>>; MAX_GROUP] = Default::default();
            let mut bytes = 0;
            for (plan, job) in plans.iter_mut().zip(jobs.iter_mut()) {
                let Some((w, out, ldo)) = job else { continue };
                let (k, n, ldo) = (w.k(), w.n(), *ldo);
                if x.len() != m * k || (ldo < n || out.len() < (m - 1) * ldo + n) {
                    return Err(BackendError::Shape("x or out"));
                }
                // SAFETY: `out` claims rows `t < m` at `t * ldo`, columns `0..n` (checked
                // span); this group's rows `t0..t0 + mm` are a part of that claim, used by one
                // plan at a time (the token groups run one after the other).
                let part = unsafe {
                    OutMut::from_raw_parts(out.as_mut_ptr().add(t0 * ldo), (mm - 1) * ldo + n)
                };
                *plan = Some(hetero_sme::QPackedPlan::with_out(
                    kernel,
                    &x[t0 * k..(t0 + mm) * k],
                    mm,
                    k,
                    *w,
                    part,
                    ldo,
                )?);
                bytes += hetero_sme::qpacked_len(w.ty(), k, n)?;
            }
            self.run_set(&plans, bytes, mm)?;
            t0 += mm;
        }
        Ok(())
    }

    /// hetero-sme's int8 GEMM for each `(weight, out, ldo)` of `jobs` (all on the input `x`):
    /// the activations quantized once into the reserved scratch (in every scheme the weights
    /// need), then every weight's tiles in one pool job.
    fn matmul_int8<'o>(
        &self,
        jobs: impl IntoIterator<Item = (&'o hetero_sme::Int8Weight, OutMut<'o>, usize)>,
        x: &[f32],
        m: usize,
    ) -> Result<(), BackendError> {
        let mut jobs = up_to_group(jobs)?;
        let Some(k) = jobs.iter().flatten().map(|j| j.0.k()).next() else {
            return Ok(());
        };
        if jobs.iter().flatten().any(|j| j.0.k() != k) {
            return Err(BackendError::Shape("x"));
        }
        let blocks = jobs.iter().flatten().map(|j| j.0.act_blocks()).fold(
            hetero_sme::ActBlocks::default(),
            hetero_sme::ActBlocks::union,
        );
        let kernel = hetero_sme::Int8Kernel::best();
        let mut acts = self.acts.lock().unwrap_or_else(|e| e.into_inner());
        if acts.capacity() < m * k {
            // Only when `reserve` was not told about this size (not on the engine's path).
            *acts = hetero_sme::QActs::with_capacity(m, k);
        }
        // The activation scheme(s) these weights' formats need (per 32, or per 256 for the
        // K-quants), rows spread over the pool (a prompt chunk's are as many as its matmul's).
        kernel.quantize_acts_on(&self.pool, x, m, k, blocks, &mut acts)?;
        let threads = self.pool.threads();
        let mut plans: [Option<hetero_sme::Int8Plan<'_>>; MAX_GROUP] = Default::default();
        let mut bytes = 0;
        for (plan, job) in plans.iter_mut().zip(jobs.iter_mut()) {
            let Some((w, out, ldo)) = job.take() else {
                continue;
            };
            bytes += w.quant_bytes().len() + 2 * w.scale_words().len();
            // Decode tiles sized to the pool (a 12-group k/v projection would otherwise use
            // three threads).
            *plan = Some(
                hetero_sme::Int8Plan::with_out(kernel, w, &acts, out, ldo)?.with_workers(threads),
            );
        }
        self.run_set(&plans, bytes, m)
    }

    /// hetero-sme's decompression GEMM for each `(weight, out, ldo)` of `jobs` (all on the
    /// input `x`): the activations converted once, in parallel on the pool, into the reserved
    /// BF16 scratch, then every weight's tiles (64-column panels × row chunks) in one pool job.
    fn matmul_dq<'o>(
        &self,
        jobs: impl IntoIterator<Item = (&'o hetero_sme::Int8Weight, OutMut<'o>, usize)>,
        x: &[f32],
        m: usize,
    ) -> Result<(), BackendError> {
        let mut jobs = up_to_group(jobs)?;
        let Some(k) = jobs.iter().flatten().map(|j| j.0.k()).next() else {
            return Ok(());
        };
        if jobs.iter().flatten().any(|j| j.0.k() != k) {
            return Err(BackendError::Shape("x"));
        }
        let kernel = hetero_sme::DqKernel::best();
        let mut acts = self.dq_acts.lock().unwrap_or_else(|e| e.into_inner());
        let need = hetero_sme::dq_acts_len(m, k).ok_or(BackendError::Shape("x"))?;
        if acts.capacity() < need {
            // Only when `reserve` was not told about this size (not on the engine's path).
            *acts = hetero_sme::DqActs::with_workers(m, k, self.pool.threads());
        }
        acts.convert_on(kernel, x, m, k, &self.pool)?;
        let threads = self.pool.threads();
        let mut plans: [Option<hetero_sme::DqPlan<'_>>; MAX_GROUP] = Default::default();
        let mut bytes = 0;
        for (plan, job) in plans.iter_mut().zip(jobs.iter_mut()) {
            let Some((w, out, ldo)) = job.take() else {
                continue;
            };
            bytes += w.packed_bytes();
            *plan = Some(hetero_sme::DqPlan::new(kernel, w, x, &acts, out, ldo)?);
        }
        // M cut for the set's tiles together (one job), not for each weight alone.
        let groups: usize = plans.iter().flatten().map(|p| p.col_groups()).sum();
        for plan in &mut plans {
            *plan = plan.take().map(|p| p.with_workers_in_set(threads, groups));
        }
        self.run_set(&plans, bytes, m)
    }

    /// hetero-sme's tile GEMM on packed FP16/BF16 panels for each `(weight, out, ldo)` of
    /// `jobs` (all on the input `x`), the best kernel for each weight's format, every plan's
    /// tiles in one pool job.
    fn matmul_packed<'o>(
        &self,
        jobs: impl IntoIterator<Item = (hetero_sme::PackedRef<'o>, OutMut<'o>, usize)>,
        x: &[f32],
        m: usize,
    ) -> Result<(), BackendError> {
        let mut jobs = up_to_group(jobs)?;
        let mut plans: [Option<hetero_sme::GemmPlan<'_>>; MAX_GROUP] = Default::default();
        let mut bytes = 0;
        for (plan, job) in plans.iter_mut().zip(jobs.iter_mut()) {
            let Some((w, out, ldo)) = job.take() else {
                continue;
            };
            let g = hetero_sme::Gemm {
                a: hetero_sme::Lhs::F32(x),
                m,
                lda: w.k(),
                w,
                bias: None,
                accumulate: false,
            };
            bytes += 2 * w.data().len();
            let kernel = hetero_sme::Kernel::best(w.format());
            *plan = Some(hetero_sme::GemmPlan::with_out(kernel, &g, out, ldo)?);
        }
        self.run_set(&plans, bytes, m)
    }

    /// Runs the plans of a group as one job on the pool, on as many threads as
    /// [`CpuBackend::threads_for`] gives `bytes` of weight on `m` rows.
    fn run_set<P: hetero_sme::TiledPlan>(
        &self,
        plans: &[Option<P>],
        bytes: usize,
        m: usize,
    ) -> Result<(), BackendError> {
        let mut refs: [Option<&dyn hetero_sme::TiledPlan>; MAX_GROUP] = [None; MAX_GROUP];
        let mut n = 0;
        for p in plans.iter().flatten() {
            *refs.get_mut(n).ok_or(BackendError::Shape("group"))? = Some(p);
            n += 1;
        }
        let Some(first) = refs[0] else { return Ok(()) };
        let dense: [&dyn hetero_sme::TiledPlan; MAX_GROUP] =
            std::array::from_fn(|i| refs[i].unwrap_or(first));
        let set = hetero_sme::PlanSet::new(&dense[..n])?;
        let threads = self.threads_for(bytes, m, set.tiles());
        self.run_plan(set.tiles(), threads, &|st, th| set.run_worker(st, th))
    }

    /// Runs a hetero-sme plan's tiles on `threads` pool threads through the pool's work
    /// stealing.
    fn run_plan(
        &self,
        tiles: usize,
        threads: usize,
        worker: &(dyn Fn(&hetero_sme::StealState, usize) -> Result<(), hetero_sme::Error> + Sync),
    ) -> Result<(), BackendError> {
        let failed: Mutex<Option<hetero_sme::Error>> = Mutex::new(None);
        self.pool
            .run_workers_on(tiles, threads, &|st: &hetero_sme::StealState, th| {
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
