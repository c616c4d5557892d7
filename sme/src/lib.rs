#![doc = include_str!("../README.md")]

#[cfg(target_arch = "x86_64")]
mod amx_int8;
pub mod arch;
mod blocks;
#[cfg(feature = "capi")]
pub mod capi;
mod dq;
mod error;
mod f16out;
mod format;
mod gemm;
mod int8;
mod int8_acts;
mod int8_unpack;
mod out;
mod pack;
mod parallel;
mod plans;
pub mod pool;
mod portable;
mod primitive;
#[cfg(target_arch = "x86_64")]
mod qgemv_fp16;
mod qpacked;
mod quant;
mod quantize;
#[cfg(target_arch = "aarch64")]
mod sme_driver;

pub use blocks::{
    scale_min_k4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, QK_K,
};
pub use dq::{dq_acts_len, DqActs, DqKernel, DqPlan, DQ_GROUP, DQ_KB, DQ_ROW_ALIGN};
pub use error::Error;
pub use format::{dequantize_row, GgmlType};
pub use gemm::{Gemm, GemmPlan, Lhs};
pub use int8::{
    int8_gemm, quantize_acts, quantize_acts_for, Int8Kernel, Int8Layout, Int8Plan, Int8Weight,
    Int8WeightRef, SharedBytes, INT8_GROUP, INT8_LAYOUT_VERSION, INT8_TILE_ROWS, INT8_TYPES,
};
pub use int8_acts::{quantize_acts_len, ActBlocks, BlockMeta, QActs, SuperMeta};
pub use out::OutMut;
pub use pack::{
    k_pairs, pack_f16, pack_f32, pack_gguf, packed_len, packed_len_checked, panels, Layout,
    PackedFormat, PackedRef, WeightSource, PAIR_ELEMS, PANEL_COLS,
};
pub use parallel::StealState;
pub use plans::{PlanSet, TiledPlan};
pub use pool::{ColumnBlock, PoolError, PoolWorker, ThreadPool};
pub use portable::Portable;
#[cfg(target_arch = "x86_64")]
pub use qgemv_fp16::QPackedFp16Plan;
pub use qpacked::{
    gemv_qpacked, pack_q4_0, pack_q4_1, pack_q8_0, qpack_gguf, qpacked_len, QPackedPlan,
    QPackedRef, QPACK_LAYOUT_VERSION, QPACK_ROWS,
};
pub use quant::{
    BlockQ4_0, BlockQ4_1, BlockQ8_0, QGemv, QGemvPlan, QWeights, QuantBlock, GEMV_MAX_ROWS,
    GEMV_TILE_ROWS, QK,
};
pub use quantize::{can_quantize, quantize_row};

#[cfg(target_arch = "aarch64")]
use arch::aarch64::{Neon, Sme1, Sme2};
#[cfg(target_arch = "x86_64")]
use arch::x86_64::{Amx, Avx2, Avx512};

/// Names of the implementations, for asking for one explicitly with [`Kernel::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// Plain Rust, every CPU.
    Portable,
    /// x86-64 AVX2 + FMA + F16C (CPUs without AVX-512).
    Avx2,
    /// x86-64 AVX-512F + F16C + FMA.
    Avx512,
    /// x86-64 AMX-BF16 (reads [`PackedFormat::Bf16`] weights only).
    Amx,
    /// aarch64 NEON: quantized GEMV and an FP32-FMA GEMM tile on the packed panels.
    Neon,
    /// aarch64 SME1 (FEAT_SME + F16F32 widening FMOPA), F16 weights only.
    Sme1,
    /// aarch64 SME2, F16 weights only.
    Sme2,
}

/// Every kind, worst to best.
const KINDS: [KernelKind; 7] = [
    KernelKind::Portable,
    KernelKind::Avx2,
    KernelKind::Neon,
    KernelKind::Avx512,
    KernelKind::Amx,
    KernelKind::Sme1,
    KernelKind::Sme2,
];

/// One implementation, carrying the capability token that proves the CPU can run it.
///
#[doc = include_str!("../docs/kernels.md")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kernel {
    /// See [`Portable`].
    Portable(Portable),
    /// See [`arch::x86_64::Avx2`] (the FP16 GEMM in `src/arch/x86_64/avx2_gemm.rs`).
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    /// See [`arch::x86_64::Avx512`].
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    /// See [`arch::x86_64::Amx`].
    #[cfg(target_arch = "x86_64")]
    Amx(Amx),
    /// See [`arch::aarch64::Neon`].
    #[cfg(target_arch = "aarch64")]
    Neon(Neon),
    /// See [`arch::aarch64::Sme1`].
    #[cfg(target_arch = "aarch64")]
    Sme1(Sme1),
    /// See [`arch::aarch64::Sme2`].
    #[cfg(target_arch = "aarch64")]
    Sme2(Sme2),
}

impl Kernel {
    /// The implementation named `kind`, or [`Error::Unsupported`] when this CPU (or OS) lacks it.
    pub fn new(kind: KernelKind) -> Result<Kernel, Error> {
        let k = match kind {
            KernelKind::Portable => Some(Kernel::Portable(Portable)),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Avx2 => Avx2::try_new().map(Kernel::Avx2),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Avx512 => Avx512::try_new().map(Kernel::Avx512),
            #[cfg(target_arch = "x86_64")]
            KernelKind::Amx => Amx::try_new().map(Kernel::Amx),
            #[cfg(target_arch = "aarch64")]
            KernelKind::Neon => Neon::try_new().map(Kernel::Neon),
            #[cfg(target_arch = "aarch64")]
            KernelKind::Sme1 => Sme1::try_new().map(Kernel::Sme1),
            #[cfg(target_arch = "aarch64")]
            KernelKind::Sme2 => Sme2::try_new().map(Kernel::Sme2),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        k.ok_or(Error::Unsupported {
            kernel: kind_name(kind),
        })
    }

    /// Every implementation this CPU supports, best last.
    pub fn available() -> Vec<Kernel> {
        KINDS
            .into_iter()
            .filter_map(|k| Kernel::new(k).ok())
            .collect()
    }

    /// The best GEMM implementation for weights packed as `format` on this CPU, chosen once
    /// (per format) and cached: AMX for BF16 panels where the CPU has it (its test suite passes
    /// on an AMX Xeon, run by hand: CI machines have no AMX), else the best vector kernel.
    pub fn best(format: PackedFormat) -> Kernel {
        static F16: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        static BF16: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        let cell = match format {
            PackedFormat::F16 => &F16,
            PackedFormat::Bf16 => &BF16,
        };
        *cell.get_or_init(|| {
            Kernel::available()
                .into_iter()
                .rev()
                .find(|k| k.supports(format))
                .unwrap_or(Kernel::Portable(Portable))
        })
    }

    /// The best quantized-GEMV implementation on this CPU (cached).
    pub fn best_gemv() -> Kernel {
        static K: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *K.get_or_init(|| {
            Kernel::available()
                .into_iter()
                .rev()
                .find(|k| k.has_qgemv())
                .unwrap_or(Kernel::Portable(Portable))
        })
    }

    /// The implementation's name.
    pub fn name(&self) -> &'static str {
        kind_name(self.kind())
    }

    /// Which implementation this is.
    pub fn kind(&self) -> KernelKind {
        match self {
            Kernel::Portable(_) => KernelKind::Portable,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2(_) => KernelKind::Avx2,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(_) => KernelKind::Avx512,
            #[cfg(target_arch = "x86_64")]
            Kernel::Amx(_) => KernelKind::Amx,
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon(_) => KernelKind::Neon,
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme1(_) => KernelKind::Sme1,
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme2(_) => KernelKind::Sme2,
        }
    }

    /// Whether this implementation reads packed weights of `format`.
    pub fn supports(&self, format: PackedFormat) -> bool {
        match self {
            Kernel::Portable(_) => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2(_) | Kernel::Avx512(_) => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Amx(_) => format == PackedFormat::Bf16,
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme1(_) | Kernel::Sme2(_) => format == PackedFormat::F16,
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon(_) => true,
        }
    }

    /// Whether this implementation has its own quantized GEMV (others fall back to portable).
    fn has_qgemv(&self) -> bool {
        match self {
            Kernel::Portable(_) => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(_) => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2(_) | Kernel::Amx(_) => false,
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme1(_) | Kernel::Sme2(_) => false,
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon(_) => true,
        }
    }

    /// Rows of A per GEMM tile (the parallel driver's grain is this many rows × one panel).
    pub fn tile_rows(&self) -> usize {
        match self {
            Kernel::Portable(_) => 16,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2(_) => arch::x86_64::AVX2_TILE_ROWS,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(_) => arch::x86_64::AVX512_TILE_ROWS,
            #[cfg(target_arch = "x86_64")]
            Kernel::Amx(t) => t.blocking().rows(),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon(_) => 16,
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme1(t) => t.tile_rows(),
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme2(t) => t.tile_rows(),
        }
    }

    /// 64-column panels per GEMM tile: AMX converts each k-chunk of A to BF16 once for a group
    /// of panels; the other kernels take one panel at a time.
    pub(crate) fn tile_panels(&self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kernel::Amx(_) => arch::x86_64::AMX_GROUP,
            #[cfg(target_arch = "aarch64")]
            Kernel::Sme1(_) | Kernel::Sme2(_) => sme_driver::SME_GROUP,
            _ => 1,
        }
    }

    /// Rows `row0..row0+rows` × panels `p0..p1` (at most [`Self::tile_panels`] panels).
    ///
    /// # Safety
    /// `ctx` validated for this kernel; `row0 + rows <= ctx.m`, `p0 < p1 <= ctx.np`; exclusive
    /// access to the tile's region of C.
    pub(crate) unsafe fn tile(
        &self,
        ctx: &gemm::Ctx,
        row0: usize,
        rows: usize,
        p0: usize,
        p1: usize,
    ) {
        if !ctx.c16.is_null() {
            // SAFETY: forwarded; an FP16 C runs the kernel into FP32 scratch, then converts.
            unsafe { gemm::tile_f16_out(*self, ctx, row0, rows, p0, p1) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if let Kernel::Amx(t) = self {
            // SAFETY: all obligations forwarded; the token proves AMX.
            unsafe { t.gemm_tiles(ctx, row0, rows, p0, p1) };
            return;
        }
        #[cfg(target_arch = "aarch64")]
        if let Kernel::Sme1(_) | Kernel::Sme2(_) = self {
            let tok = match *self {
                Kernel::Sme2(t) => sme_driver::SmeTok::S2(t),
                Kernel::Sme1(t) => sme_driver::SmeTok::S1(t),
                _ => return,
            };
            // SAFETY: all obligations forwarded; the token proves SME (SME2 for S2).
            unsafe { sme_driver::sme_tile(tok, ctx, row0, rows, p0, p1) };
            return;
        }
        for p in p0..p1 {
            // SAFETY: forwarded for each panel of the range.
            unsafe { self.panel_tile(ctx, row0, rows, p) };
        }
    }

    /// # Safety
    /// `ctx` validated for this kernel; `row0 + rows <= ctx.m`, `p < ctx.np`; exclusive access to
    /// the tile's region of C.
    unsafe fn panel_tile(&self, ctx: &gemm::Ctx, row0: usize, rows: usize, p: usize) {
        // SAFETY: all obligations forwarded; each token proves its CPU feature.
        unsafe {
            match self {
                Kernel::Portable(_) => portable::gemm_tile(ctx, row0, rows, p),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2(t) => t.gemm_tile(ctx, row0, rows, p),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512(t) => t.gemm_tile(ctx, row0, rows, p),
                #[cfg(target_arch = "x86_64")]
                Kernel::Amx(t) => t.gemm_tile(ctx, row0, rows, p),
                #[cfg(target_arch = "aarch64")]
                Kernel::Neon(t) => t.gemm_tile(ctx, row0, rows, p),
                #[cfg(target_arch = "aarch64")]
                Kernel::Sme1(t) => {
                    sme_driver::sme_tile(sme_driver::SmeTok::S1(*t), ctx, row0, rows, p, p + 1)
                }
                #[cfg(target_arch = "aarch64")]
                Kernel::Sme2(t) => {
                    sme_driver::sme_tile(sme_driver::SmeTok::S2(*t), ctx, row0, rows, p, p + 1)
                }
            }
        }
    }

    /// # Safety
    /// `ctx` validated; `n0 <= n1 <= ctx.n`; exclusive access to y columns `n0..n1`.
    pub(crate) unsafe fn gemv_rows(&self, ctx: &quant::QCtx, n0: usize, n1: usize) {
        // SAFETY: obligations forwarded; each token proves its CPU feature.
        unsafe {
            match self {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512(t) => t.gemv_rows(ctx, n0, n1),
                #[cfg(target_arch = "aarch64")]
                Kernel::Neon(t) => t.gemv_rows(ctx, n0, n1),
                _ => quant::gemv_rows_portable(ctx, n0, n1),
            }
        }
    }

    /// Runs `g` single-threaded on this implementation. On error nothing is written to `c`.
    pub fn gemm(self, g: &Gemm<'_>, c: &mut [f32], ldc: usize) -> Result<(), Error> {
        GemmPlan::new(self, g, c, ldc)?.run_all();
        Ok(())
    }

    /// As [`Kernel::gemm`] with C in FP16 (IEEE binary16 bits): see [`GemmPlan::new_f16`].
    pub fn gemm_f16(self, g: &Gemm<'_>, c: &mut [u16], ldc: usize) -> Result<(), Error> {
        GemmPlan::new_f16(self, g, c, ldc)?.run_all();
        Ok(())
    }

    /// Runs the quantized GEMV `g` single-threaded on this implementation (implementations
    /// without their own quantized GEMV use the portable one).
    pub fn qgemv(self, g: &QGemv<'_>, y: &mut [f32], ldy: usize) -> Result<(), Error> {
        QGemvPlan::new(self, g, y, ldy)?.run_all();
        Ok(())
    }
}

fn kind_name(k: KernelKind) -> &'static str {
    match k {
        KernelKind::Portable => "portable",
        KernelKind::Avx2 => "avx2",
        KernelKind::Avx512 => "avx512",
        KernelKind::Amx => "amx-bf16",
        KernelKind::Neon => "neon",
        KernelKind::Sme1 => "sme1",
        KernelKind::Sme2 => "sme2",
    }
}

/// `C (= or +=) A·W (+ bias)` on the best implementation for `g.w`'s format, single-threaded.
pub fn gemm(g: &Gemm<'_>, c: &mut [f32], ldc: usize) -> Result<(), Error> {
    Kernel::best(g.w.format()).gemm(g, c, ldc)
}

/// As [`gemm`] with C in FP16 (IEEE binary16 bits, row stride `ldc`): FP32 accumulation, one
/// FP16 rounding per output (see [`GemmPlan::new_f16`]).
pub fn gemm_f16(g: &Gemm<'_>, c: &mut [u16], ldc: usize) -> Result<(), Error> {
    Kernel::best(g.w.format()).gemm_f16(g, c, ldc)
}

/// Decode GEMV on packed FP16 (or BF16) panels: `y[M×N] = x[M×K] · W`, x FP32 row-major
/// (stride K), M ≤ 16. It is the GEMM on the same packed weight.
pub fn gemv_packed(
    x: &[f32],
    m: usize,
    w: PackedRef<'_>,
    y: &mut [f32],
    ldy: usize,
) -> Result<(), Error> {
    if m > GEMV_MAX_ROWS {
        return Err(Error::TooManyRows {
            max: GEMV_MAX_ROWS,
            got: m,
        });
    }
    gemm(
        &Gemm {
            a: Lhs::F32(x),
            m,
            lda: w.k(),
            w,
            bias: None,
            accumulate: false,
        },
        y,
        ldy,
    )
}

/// `y[M×N] = x[M×K] · W^T` with Q4_0 weights (N rows of K/32 blocks), on the best implementation.
pub fn gemv_q4_0(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[BlockQ4_0],
    y: &mut [f32],
    ldy: usize,
) -> Result<(), Error> {
    let g = QGemv {
        x,
        m,
        k,
        w: QWeights::Q4_0(w),
    };
    Kernel::best_gemv().qgemv(&g, y, ldy)
}

/// As [`gemv_q4_0`] with Q4_1 weights.
pub fn gemv_q4_1(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[BlockQ4_1],
    y: &mut [f32],
    ldy: usize,
) -> Result<(), Error> {
    let g = QGemv {
        x,
        m,
        k,
        w: QWeights::Q4_1(w),
    };
    Kernel::best_gemv().qgemv(&g, y, ldy)
}

/// As [`gemv_q4_0`] with Q8_0 weights.
pub fn gemv_q8_0(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[BlockQ8_0],
    y: &mut [f32],
    ldy: usize,
) -> Result<(), Error> {
    let g = QGemv {
        x,
        m,
        k,
        w: QWeights::Q8_0(w),
    };
    Kernel::best_gemv().qgemv(&g, y, ldy)
}
