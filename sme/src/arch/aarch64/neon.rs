//! NEON kernels for every aarch64 CPU (with or without SME):
//!
//! * decode GEMV (M ≤ 16) on GGUF block-quantized weights: each 32-value block is dequantized in
//!   registers (nibbles/bytes → i32 → f32, times the FP16 scale, plus the offset for Q4_1) and
//!   multiplied into FP32 accumulators for every activation row while it is live, so the weights
//!   stream from memory once per call;
//! * GEMM (and so FP16 GEMV) on the packed panels (FP16 or BF16), 4 rows × 16 columns per
//!   register block, weights widened with `fcvtl` (BF16: shift), FP32 accumulation.

use core::arch::aarch64::*;
use core::arch::asm;

use super::Neon;
use crate::gemm::{validate, APtr, Ctx};
use crate::quant::{validate as qvalidate, QCtx, WPtr};
use crate::{
    BlockQ4_0, BlockQ4_1, BlockQ8_0, Error, Gemm, Kernel, KernelKind, PackedFormat, QGemv,
    QWeights, GEMV_MAX_ROWS, QK,
};

/// FP16 bits → f32 with the base-ARMv8 `fcvt` (no FEAT_FP16 needed).
#[inline(always)]
fn h2f(bits: u16) -> f32 {
    let out: f32;
    // SAFETY: FCVT (half to single) is part of the base aarch64 FP unit; it reads one register and
    // writes one, touching no memory.
    unsafe {
        asm!("fcvt {o:s}, {i:h}", i = in(vreg) bits, o = lateout(vreg) out,
             options(pure, nomem, nostack, preserves_flags))
    };
    out
}

/// Eight f32x4 vectors = the 32 values of one block, in element order.
type Deq = [float32x4_t; 8];

/// One GGUF block type, dequantized with NEON.
trait NeonBlock {
    /// # Safety
    /// `b` points to a readable block.
    unsafe fn deq(b: *const Self) -> Deq;
}

/// Widens 16 unsigned-or-signed bytes already as i8 into four f32x4.
#[inline]
#[target_feature(enable = "neon")]
fn i8x16_to_f32(v: int8x16_t) -> [float32x4_t; 4] {
    let lo = vmovl_s8(vget_low_s8(v));
    let hi = vmovl_high_s8(v);
    [
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
        vcvtq_f32_s32(vmovl_high_s16(lo)),
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
        vcvtq_f32_s32(vmovl_high_s16(hi)),
    ]
}

impl NeonBlock for BlockQ4_0 {
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn deq(b: *const Self) -> Deq {
        // SAFETY: `b` is readable (caller); `qs` is 16 bytes at any alignment, `d` is a u16 field.
        let (q, d) = unsafe { (vld1q_u8((*b).qs.as_ptr()), h2f((*b).d)) };
        let eight = vdupq_n_s8(8);
        let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), eight);
        let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight);
        let (l, h) = (i8x16_to_f32(lo), i8x16_to_f32(hi));
        let mut out = [vdupq_n_f32(0.0); 8];
        for i in 0..4 {
            out[i] = vmulq_n_f32(l[i], d);
            out[i + 4] = vmulq_n_f32(h[i], d);
        }
        out
    }
}

impl NeonBlock for BlockQ4_1 {
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn deq(b: *const Self) -> Deq {
        // SAFETY: as for Q4_0.
        let (q, d, m) = unsafe { (vld1q_u8((*b).qs.as_ptr()), h2f((*b).d), h2f((*b).m)) };
        // Nibbles 0..15 fit i8, so the signed widening path is exact.
        let lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
        let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q));
        let (l, h) = (i8x16_to_f32(lo), i8x16_to_f32(hi));
        let (dv, mv) = (vdupq_n_f32(d), vdupq_n_f32(m));
        let mut out = [mv; 8];
        for i in 0..4 {
            // q*d + m (fused; the portable reference rounds q*d first: within 1 ulp).
            out[i] = vfmaq_f32(mv, l[i], dv);
            out[i + 4] = vfmaq_f32(mv, h[i], dv);
        }
        out
    }
}

impl NeonBlock for BlockQ8_0 {
    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn deq(b: *const Self) -> Deq {
        // SAFETY: as for Q4_0; `qs` is 32 bytes.
        let (q0, q1, d) = unsafe {
            let p = (*b).qs.as_ptr();
            (vld1q_s8(p), vld1q_s8(p.add(16)), h2f((*b).d))
        };
        let (a, c) = (i8x16_to_f32(q0), i8x16_to_f32(q1));
        let mut out = [vdupq_n_f32(0.0); 8];
        for i in 0..4 {
            out[i] = vmulq_n_f32(a[i], d);
            out[i + 4] = vmulq_n_f32(c[i], d);
        }
        out
    }
}

/// Rows `n0..n1` of W for exactly `M` activation rows.
///
/// # Safety
/// `ctx` validated (x: M×K, W: N×K/32 blocks, y: M rows of ldy ≥ N); `n0 <= n1 <= ctx.n`;
/// exclusive access to y columns `n0..n1`; `ctx.m == M`.
#[target_feature(enable = "neon")]
unsafe fn rows_m<const M: usize, B: NeonBlock>(ctx: &QCtx, w: *const B, n0: usize, n1: usize) {
    let nb = ctx.k / QK;
    for n in n0..n1 {
        // Two accumulators per row: halves the FMA dependency chain for small M.
        let mut acc = [[vdupq_n_f32(0.0); 2]; M];
        for b in 0..nb {
            // SAFETY: n < N, b < K/32: inside the validated block array.
            let v = unsafe { B::deq(w.add(n * nb + b)) };
            for (m, a) in acc.iter_mut().enumerate() {
                // SAFETY: m < M, b*32 + 32 <= K: 32 floats inside x.
                let xp = unsafe { ctx.x.add(m * ctx.k + b * QK) };
                for i in 0..4 {
                    // SAFETY: xp + 4i + 3 and xp + 16 + 4i + 3 are within the 32 floats above.
                    let (x0, x1) =
                        unsafe { (vld1q_f32(xp.add(4 * i)), vld1q_f32(xp.add(16 + 4 * i))) };
                    a[0] = vfmaq_f32(a[0], x0, v[i]);
                    a[1] = vfmaq_f32(a[1], x1, v[i + 4]);
                }
            }
        }
        for (m, a) in acc.iter().enumerate() {
            // SAFETY: m < M, n < N: inside y; the caller owns column n.
            unsafe { *ctx.y.add(m * ctx.ldy + n) = vaddvq_f32(vaddq_f32(a[0], a[1])) };
        }
    }
}

/// # Safety
/// As [`rows_m`] without the `M` constraint (`1 <= ctx.m <= 16`; 0 does nothing).
#[target_feature(enable = "neon")]
unsafe fn rows<B: NeonBlock>(ctx: &QCtx, w: *const B, n0: usize, n1: usize) {
    macro_rules! by_m {
        ($($m:literal)*) => {
            match ctx.m {
                $($m => {
                    // SAFETY: ctx.m == M in this arm; the rest forwarded from the caller.
                    unsafe { rows_m::<$m, B>(ctx, w, n0, n1) }
                })*
                _ => {}
            }
        };
    }
    by_m!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
}

impl Neon {
    /// NEON quantized GEMV of columns `n0..n1` of y (rows `n0..n1` of W).
    ///
    /// # Safety
    /// `ctx` validated by `quant::validate`; `n0 <= n1 <= ctx.n`; exclusive access to y columns
    /// `n0..n1`.
    pub(crate) unsafe fn gemv_rows(self, ctx: &QCtx, n0: usize, n1: usize) {
        debug_assert!(ctx.m <= GEMV_MAX_ROWS && n0 <= n1 && n1 <= ctx.n);
        // SAFETY: forwarded; NEON is architectural on aarch64 (the token).
        unsafe {
            match ctx.w {
                WPtr::Q4_0(w) => rows(ctx, w, n0, n1),
                WPtr::Q4_1(w) => rows(ctx, w, n0, n1),
                WPtr::Q8_0(w) => rows(ctx, w, n0, n1),
            }
        }
    }

    /// `y[M×N] = x[M×K] · W^T` for the quantized weight in `g` (see [`QGemv`]), single-threaded,
    /// with NEON dequantization in registers. Same checks and errors as
    /// [`crate::Kernel::qgemv`]; on error nothing is written.
    pub fn qgemv(self, g: &QGemv<'_>, y: &mut [f32], ldy: usize) -> Result<(), Error> {
        let ctx = qvalidate(g, y, ldy)?;
        // SAFETY: ctx validated against `y`, which we borrow exclusively; the full column range.
        unsafe { self.gemv_rows(&ctx, 0, ctx.n) };
        Ok(())
    }

    /// [`crate::gemv_q4_0`] on NEON.
    pub fn gemv_q4_0(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        w: &[BlockQ4_0],
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        self.qgemv(
            &QGemv {
                x,
                m,
                k,
                w: QWeights::Q4_0(w),
            },
            y,
            ldy,
        )
    }

    /// [`crate::gemv_q4_1`] on NEON.
    pub fn gemv_q4_1(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        w: &[BlockQ4_1],
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        self.qgemv(
            &QGemv {
                x,
                m,
                k,
                w: QWeights::Q4_1(w),
            },
            y,
            ldy,
        )
    }

    /// [`crate::gemv_q8_0`] on NEON.
    pub fn gemv_q8_0(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        w: &[BlockQ8_0],
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        self.qgemv(
            &QGemv {
                x,
                m,
                k,
                w: QWeights::Q8_0(w),
            },
            y,
            ldy,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// FP16 / BF16 packed-panel GEMM (and so GEMV, M <= 16) for aarch64 CPUs without SME.
// ---------------------------------------------------------------------------------------------

/// FP16 → f32 of the low four lanes (`fcvtl`, base ARMv8 FP/SIMD).
#[inline]
#[target_feature(enable = "neon")]
fn cvt_lo(v: uint16x8_t) -> float32x4_t {
    let o: float32x4_t;
    // SAFETY: FCVTL is base Advanced SIMD; register-only.
    unsafe {
        asm!("fcvtl {o:v}.4s, {i:v}.4h", i = in(vreg) v, o = lateout(vreg) o,
             options(pure, nomem, nostack, preserves_flags))
    };
    o
}

/// FP16 → f32 of the high four lanes (`fcvtl2`).
#[inline]
#[target_feature(enable = "neon")]
fn cvt_hi(v: uint16x8_t) -> float32x4_t {
    let o: float32x4_t;
    // SAFETY: FCVTL2 is base Advanced SIMD; register-only.
    unsafe {
        asm!("fcvtl2 {o:v}.4s, {i:v}.8h", i = in(vreg) v, o = lateout(vreg) o,
             options(pure, nomem, nostack, preserves_flags))
    };
    o
}

/// Eight packed weights (FP16 or BF16 bits) → two f32x4.
#[inline]
#[target_feature(enable = "neon")]
fn widen<const BF16: bool>(v: uint16x8_t) -> [float32x4_t; 2] {
    if BF16 {
        [
            vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(v))),
            vreinterpretq_f32_u32(vshll_high_n_u16::<16>(v)),
        ]
    } else {
        [cvt_lo(v), cvt_hi(v)]
    }
}

/// A[i][kk] as f32.
///
/// # Safety
/// `i < ctx.m`, `kk < ctx.k`.
#[inline(always)]
unsafe fn a_at(ctx: &Ctx, i: usize, kk: usize) -> f32 {
    // SAFETY: the validated A holds rows 0..m of k elements at stride lda.
    unsafe {
        match ctx.a {
            APtr::F32(a) => *a.add(i * ctx.lda + kk),
            APtr::F16(a) => h2f(*a.add(i * ctx.lda + kk)),
        }
    }
}

/// Rows `row0..row0 + R` × columns `c0..c0 + 16` (clipped to the panel's `cols`) of panel `p`.
///
/// # Safety
/// `ctx` validated; `row0 + R <= ctx.m`; `p < ctx.np`; `c0 < ctx.panel_cols(p)`, `c0 % 16 == 0`;
/// exclusive access to that region of C.
#[target_feature(enable = "neon")]
unsafe fn block16<const R: usize, const BF16: bool>(ctx: &Ctx, row0: usize, p: usize, c0: usize) {
    let panel = ctx.panel_ptr(p);
    let mut acc = [[vdupq_n_f32(0.0); 4]; R];
    let full = ctx.k / 2; // k-pairs with both k inside K
    for q in 0..ctx.kp {
        // SAFETY: q < kp and c0 + 16 <= 64: 32 u16 inside panel p's row q.
        let (v0, v1) = unsafe {
            let wp = panel.add(q * 128 + c0 * 2);
            (vld2q_u16(wp), vld2q_u16(wp.add(16)))
        };
        // w0[j]: k = 2q for columns c0 + 4j..; w1[j]: k = 2q + 1.
        let (a, b) = (widen::<BF16>(v0.0), widen::<BF16>(v1.0));
        let w0 = [a[0], a[1], b[0], b[1]];
        let (a, b) = (widen::<BF16>(v0.1), widen::<BF16>(v1.1));
        let w1 = [a[0], a[1], b[0], b[1]];
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: row0 + r < m; 2q < k, and 2q + 1 < k when q < full.
            let (x0, x1) = unsafe {
                let x0 = a_at(ctx, row0 + r, 2 * q);
                (
                    x0,
                    if q < full {
                        a_at(ctx, row0 + r, 2 * q + 1)
                    } else {
                        0.0
                    },
                )
            };
            for j in 0..4 {
                acc[j] = vfmaq_n_f32(acc[j], w0[j], x0);
                acc[j] = vfmaq_n_f32(acc[j], w1[j], x1);
            }
        }
    }
    let cols = ctx.panel_cols(p);
    let col = p * 64 + c0;
    for (r, acc) in acc.iter().enumerate() {
        let mut vals = [0f32; 16];
        for (j, &v) in acc.iter().enumerate() {
            // SAFETY: 4 floats at vals[4j..], j < 4.
            unsafe { vst1q_f32(vals.as_mut_ptr().add(4 * j), v) };
        }
        for (j, &v) in vals.iter().enumerate().take(cols - c0) {
            // SAFETY: row0 + r < m, col + j < n: inside the validated C (and bias).
            unsafe {
                let cp = ctx.c.add((row0 + r) * ctx.ldc + col + j);
                let mut s = v;
                if !ctx.bias.is_null() {
                    s += *ctx.bias.add(col + j);
                }
                *cp = if ctx.accumulate { *cp + s } else { s };
            }
        }
    }
}

/// # Safety
/// As [`block16`] with `1 <= rows <= 4` in place of `R`.
#[target_feature(enable = "neon")]
unsafe fn block16_rows<const BF16: bool>(ctx: &Ctx, row0: usize, rows: usize, p: usize, c0: usize) {
    // SAFETY: every arm calls block16 with R == rows; the rest is forwarded from the caller.
    unsafe {
        match rows {
            1 => block16::<1, BF16>(ctx, row0, p, c0),
            2 => block16::<2, BF16>(ctx, row0, p, c0),
            3 => block16::<3, BF16>(ctx, row0, p, c0),
            4 => block16::<4, BF16>(ctx, row0, p, c0),
            _ => {}
        }
    }
}

impl Neon {
    /// One GEMM tile on NEON: rows `row0..row0 + rows` × panel `p` (any `rows`; processed four
    /// rows × 16 columns at a time, weights widened in registers, FP32 accumulation).
    ///
    /// # Safety
    /// `ctx` validated (`crate::gemm::validate`); `row0 + rows <= ctx.m`; `p < ctx.np`; exclusive
    /// access to the tile's region of C.
    pub(crate) unsafe fn gemm_tile(self, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
        let bf16 = ctx.format == PackedFormat::Bf16;
        let mut c0 = 0;
        while c0 < ctx.panel_cols(p) {
            let mut r = row0;
            while r < row0 + rows {
                let rn = (row0 + rows - r).min(4);
                // SAFETY: r + rn <= row0 + rows <= m; c0 < panel cols, multiple of 16; the rest
                // forwarded; NEON is architectural on aarch64.
                unsafe {
                    if bf16 {
                        block16_rows::<true>(ctx, r, rn, p, c0)
                    } else {
                        block16_rows::<false>(ctx, r, rn, p, c0)
                    }
                }
                r += rn;
            }
            c0 += 16;
        }
    }

    /// `C (= or +=) A·W (+ bias)` on NEON for either packed format, single-threaded; the same
    /// checks and errors as [`crate::Kernel::gemm`] (on error nothing is written). For decode
    /// (M ≤ 16) this is the FP16 GEMV on aarch64 CPUs without SME.
    pub fn gemm(self, g: &Gemm<'_>, c: &mut [f32], ldc: usize) -> Result<(), Error> {
        // The portable kernel accepts both formats, so this validates shapes only.
        let mut ctx = validate(Kernel::new(KernelKind::Portable)?, g, c.len(), ldc)?;
        // Derived from the exclusive borrow: the tiles write through it.
        ctx.c = c.as_mut_ptr();
        for p in 0..ctx.np {
            // SAFETY: ctx validated against `c`, borrowed exclusively here; all rows, panel p.
            unsafe { self.gemm_tile(&ctx, 0, ctx.m, p) };
        }
        Ok(())
    }
}
