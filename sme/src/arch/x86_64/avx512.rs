//! AVX-512 kernels: GEMM on the packed FP16/BF16 panels and the quantized GEMV.
//!
//! GEMM micro-kernel: up to 6 rows × 32 columns (half a panel). One k-pair row of a half panel is
//! 32 columns × 2 k = 64 elements = four zmm of FP32 after `vcvtph2ps`, lanes ordered
//! `[c0k0, c0k1, c1k0, c1k1, ...]`; each A row contributes the pair `(a[2q], a[2q+1])` broadcast
//! as one 64-bit value, so one FMA per zmm accumulates both k of a pair in adjacent lanes; the
//! two lanes of a column are summed once at the end (`vpermt2ps` even/odd + add). Registers: 24
//! accumulators, 4 weight vectors and 1 broadcast, 29 of the 32 zmm. K is cut into chunks of 128 k-pairs so
//! a half-panel chunk (16 KiB) stays in L1 while the row groups of the tile reuse it.

use core::arch::x86_64::*;

use super::Avx512;
use crate::gemm::{APtr, Ctx};
use crate::pack::{PackedFormat, PAIR_ELEMS, PANEL_COLS};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QCtx, WPtr, QK};

/// Rows of A per tile.
pub(crate) const AVX512_TILE_ROWS: usize = 48;
const MR: usize = 6;
const KC: usize = 128;

impl Avx512 {
    /// # Safety
    /// As [`crate::Kernel::tile`].
    pub(crate) unsafe fn gemm_tile(self, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
        // SAFETY: the token proves avx512f+f16c+fma; the rest is forwarded.
        unsafe {
            match ctx.format {
                PackedFormat::F16 => tile::<false>(ctx, row0, rows, p),
                PackedFormat::Bf16 => tile::<true>(ctx, row0, rows, p),
            }
        }
    }

    /// # Safety
    /// As [`crate::Kernel::gemv_rows`].
    pub(crate) unsafe fn gemv_rows(self, ctx: &QCtx, n0: usize, n1: usize) {
        // SAFETY: the token proves the features; the rest is forwarded.
        unsafe { qgemv_dispatch(ctx, n0, n1) }
    }
}

#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn tile<const BF16: bool>(ctx: &Ctx, row0: usize, rows: usize, p: usize) {
    let cols = ctx.panel_cols(p);
    let panel = ctx.panel_ptr(p);
    let mut abuf = [0f32; MR * 2 * KC];
    let mut q0 = 0;
    loop {
        let qn = (ctx.kp - q0).min(KC);
        let last = q0 + qn >= ctx.kp;
        let first = q0 == 0;
        // Up to 2 rows: one pass over whole 256-byte k-pair rows (8 weight vectors, a plain
        // stream for the prefetcher; the decode / GEMV case). More rows: half panels, 6 rows.
        let full = rows <= 2;
        for half in 0..(if full { 1 } else { 2 }) {
            let hcols = if full {
                cols
            } else {
                cols.saturating_sub(32 * half).min(32)
            };
            if hcols == 0 {
                continue;
            }
            let w = panel.wrapping_add(q0 * PAIR_ELEMS + half * 64);
            let col0 = p * PANEL_COLS + half * 32;
            let bias = if first && !ctx.bias.is_null() {
                ctx.bias.wrapping_add(col0)
            } else {
                core::ptr::null()
            };
            let load_c = !first || ctx.accumulate;
            let mut i = row0;
            while i < row0 + rows {
                let r = (row0 + rows - i).min(MR);
                // Pairs whose both k are inside K; the odd last k (if any) is the tail.
                let odd_tail = last && ctx.k % 2 == 1;
                let (a, lda, pairs, tail) = match ctx.a {
                    APtr::F32(a) => (
                        a.wrapping_add(i * ctx.lda + 2 * q0),
                        ctx.lda,
                        qn - odd_tail as usize,
                        odd_tail,
                    ),
                    APtr::F16(a) => {
                        // Convert the r × (2 qn) block to FP32, zero past K.
                        let kk0 = 2 * q0;
                        let kn = (ctx.k - kk0).min(2 * qn);
                        for rr in 0..r {
                            let dst = &mut abuf[rr * 2 * KC..(rr + 1) * 2 * KC];
                            // SAFETY: row i+rr < m, columns kk0..kk0+kn < k: inside A.
                            let src = unsafe {
                                core::slice::from_raw_parts(a.add((i + rr) * ctx.lda + kk0), kn)
                            };
                            // SAFETY: f16c is enabled for this function.
                            unsafe { cvt_f16_row(src, &mut dst[..kn]) };
                            dst[kn..2 * qn].fill(0.0);
                        }
                        (abuf.as_ptr(), 2 * KC, qn, false)
                    }
                };
                let c = ctx.c.wrapping_add(i * ctx.ldc + col0);
                let args = Uk {
                    a,
                    lda,
                    pairs,
                    tail,
                    w,
                    c,
                    ldc: ctx.ldc,
                    cols: hcols,
                    load_c,
                    bias,
                };
                // SAFETY: a covers r rows of `pairs` pairs (+1 element when tail) inside A or
                // abuf; w covers qn k-pairs of this half panel; c covers r rows × hcols columns
                // of the caller's tile; bias (if non-null) covers hcols elements.
                unsafe {
                    match (full, r) {
                        (true, 1) => uk::<1, 8, BF16>(&args),
                        (true, _) => uk::<2, 8, BF16>(&args),
                        (false, 1) => uk::<1, 4, BF16>(&args),
                        (false, 2) => uk::<2, 4, BF16>(&args),
                        (false, 3) => uk::<3, 4, BF16>(&args),
                        (false, 4) => uk::<4, 4, BF16>(&args),
                        (false, 5) => uk::<5, 4, BF16>(&args),
                        (false, _) => uk::<6, 4, BF16>(&args),
                    }
                }
                i += r;
            }
        }
        q0 += qn;
        if q0 >= ctx.kp {
            break;
        }
    }
}

/// FP16 → FP32 for a short row.
///
/// # Safety
/// F16C must be available; `dst.len() >= src.len()`.
#[target_feature(enable = "avx512f,f16c")]
unsafe fn cvt_f16_row(src: &[u16], dst: &mut [f32]) {
    let n = src.len();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n elements are inside both slices.
        unsafe {
            let v = _mm512_cvtph_ps(_mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i));
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), v);
        }
        i += 16;
    }
    while i < n {
        dst[i] = crate::portable::f16_to_f32(src[i]);
        i += 1;
    }
}

struct Uk {
    a: *const f32,
    lda: usize,
    pairs: usize,
    tail: bool,
    w: *const u16,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    load_c: bool,
    bias: *const f32,
}

/// 16 packed elements (8 columns × 2 k) to FP32.
#[inline(always)]
unsafe fn load_w<const BF16: bool>(p: *const u16) -> __m512 {
    // SAFETY: the caller guarantees 16 readable u16 at p; features enabled by the caller.
    unsafe {
        let v = _mm256_loadu_si256(p as *const __m256i);
        if BF16 {
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
        } else {
            _mm512_cvtph_ps(v)
        }
    }
}

/// # Safety
/// See the call site in `tile`: `a` readable for R rows (stride lda) of `2*pairs` (+1 if tail)
/// f32; `w` readable for `pairs + tail` k-pair rows (stride 128) of `16 * NW` u16; `c` writable (and
/// readable if load_c) for R rows (stride ldc) of `cols` f32; bias null or `cols` readable f32.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn uk<const R: usize, const NW: usize, const BF16: bool>(u: &Uk) {
    let mut acc = [[_mm512_setzero_ps(); NW]; R];
    // SAFETY: every pointer offset below stays inside the extents in this function's contract.
    unsafe {
        for q in 0..u.pairs {
            let wp = u.w.add(q * PAIR_ELEMS);
            let mut ws = [_mm512_setzero_ps(); NW];
            for (j, wv) in ws.iter_mut().enumerate() {
                *wv = load_w::<BF16>(wp.add(16 * j));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let pair = core::ptr::read_unaligned(u.a.add(r * u.lda + 2 * q) as *const f64);
                let av = _mm512_castpd_ps(_mm512_set1_pd(pair));
                for j in 0..NW {
                    acc_r[j] = _mm512_fmadd_ps(av, ws[j], acc_r[j]);
                }
            }
        }
        if u.tail {
            let q = u.pairs;
            let wp = u.w.add(q * PAIR_ELEMS);
            let mut ws = [_mm512_setzero_ps(); NW];
            for (j, wv) in ws.iter_mut().enumerate() {
                *wv = load_w::<BF16>(wp.add(16 * j));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // Only a[2q] exists; the pair is (a[2q], 0).
                let a0 = *u.a.add(r * u.lda + 2 * q);
                let av = _mm512_castsi512_ps(_mm512_set1_epi64(a0.to_bits() as i64));
                for j in 0..NW {
                    acc_r[j] = _mm512_fmadd_ps(av, ws[j], acc_r[j]);
                }
            }
        }
        let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        for (r, acc_r) in acc.iter().enumerate() {
            for h in 0..NW / 2 {
                let cnt = u.cols.saturating_sub(16 * h).min(16);
                if cnt == 0 {
                    continue;
                }
                let mask: __mmask16 = ((1u32 << cnt) - 1) as u16;
                let (x0, x1) = (acc_r[2 * h], acc_r[2 * h + 1]);
                let mut s = _mm512_add_ps(
                    _mm512_permutex2var_ps(x0, even, x1),
                    _mm512_permutex2var_ps(x0, odd, x1),
                );
                if !u.bias.is_null() {
                    s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, u.bias.add(16 * h)));
                }
                let dst = u.c.add(r * u.ldc + 16 * h);
                if u.load_c {
                    s = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), s);
                }
                _mm512_mask_storeu_ps(dst, mask, s);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Quantized GEMV.

/// Decodes one block into two zmm of 16 scaled FP32 values (elements 0..15, 16..31).
trait Dec {
    type B;
    /// # Safety
    /// `b` points to a readable block; avx512f+f16c+fma enabled by the caller.
    unsafe fn dec(b: *const Self::B) -> (__m512, __m512);
}

/// The FP16 scale broadcast to 16 lanes: `vpbroadcastw` + `vcvtph2ps zmm`. (Converting one
/// lane and broadcasting it made LLVM merge into a live register with `vpinsrw`, a false
/// dependency that chained every block's scale conversion: about 4x slower GEMV.)
#[inline(always)]
unsafe fn scale(d: u16) -> __m512 {
    // SAFETY: f16c/avx512f (which implies AVX2) enabled by the caller.
    unsafe { _mm512_cvtph_ps(_mm256_set1_epi16(d as i16)) }
}

struct D40;
impl Dec for D40 {
    type B = BlockQ4_0;
    #[inline(always)]
    unsafe fn dec(b: *const BlockQ4_0) -> (__m512, __m512) {
        // SAFETY: b readable (caller); 16 bytes of qs inside the block.
        unsafe {
            let d = scale((*b).d);
            let md = _mm512_mul_ps(d, _mm512_set1_ps(-8.0));
            let q = _mm512_cvtepu8_epi32(_mm_loadu_si128((*b).qs.as_ptr() as *const __m128i));
            let lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0xF)));
            let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(q));
            (_mm512_fmadd_ps(lo, d, md), _mm512_fmadd_ps(hi, d, md))
        }
    }
}

struct D41;
impl Dec for D41 {
    type B = BlockQ4_1;
    #[inline(always)]
    unsafe fn dec(b: *const BlockQ4_1) -> (__m512, __m512) {
        // SAFETY: as D40.
        unsafe {
            let d = scale((*b).d);
            let m = scale((*b).m);
            let q = _mm512_cvtepu8_epi32(_mm_loadu_si128((*b).qs.as_ptr() as *const __m128i));
            let lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(0xF)));
            let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(q));
            (_mm512_fmadd_ps(lo, d, m), _mm512_fmadd_ps(hi, d, m))
        }
    }
}

struct D80;
impl Dec for D80 {
    type B = BlockQ8_0;
    #[inline(always)]
    unsafe fn dec(b: *const BlockQ8_0) -> (__m512, __m512) {
        // SAFETY: b readable; 32 bytes of qs inside the block.
        unsafe {
            let d = scale((*b).d);
            let p = (*b).qs.as_ptr() as *const __m128i;
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(1))));
            (_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d))
        }
    }
}

/// # Safety
/// As [`crate::Kernel::gemv_rows`], with the AVX-512 features present.
unsafe fn qgemv_dispatch(ctx: &QCtx, n0: usize, n1: usize) {
    // SAFETY: forwarded; m <= 16 was validated.
    unsafe {
        match ctx.w {
            WPtr::Q4_0(w) => qrows::<D40>(ctx, w, n0, n1),
            WPtr::Q4_1(w) => qrows::<D41>(ctx, w, n0, n1),
            WPtr::Q8_0(w) => qrows::<D80>(ctx, w, n0, n1),
        }
    }
}

/// Rows `n0..n1` of W against the M rows of x, in register blocks of up to 4 rows of x × 4 rows
/// of W: each x vector loaded feeds 4 weight rows and each dequantized weight vector feeds up to
/// 4 x rows (so x, which is re-read per weight row group from L1/L2, costs a quarter of what a
/// row-at-a-time loop costs); the weight rows of a group stay in L1 across x-row groups, so
/// memory sees each weight byte once.
///
/// # Safety
/// `w` is ctx's validated block pointer; `n0 <= n1 <= ctx.n`; exclusive access to y columns
/// `n0..n1`; avx512f+f16c+fma present.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn qrows<D: Dec>(ctx: &QCtx, w: *const D::B, n0: usize, n1: usize) {
    macro_rules! by_g {
        ($r:literal, $g:expr, $m0:expr, $n:expr) => {
            match $g {
                1 => blk::<1, $r, D>(ctx, w, $m0, $n),
                2 => blk::<2, $r, D>(ctx, w, $m0, $n),
                3 => blk::<3, $r, D>(ctx, w, $m0, $n),
                _ => blk::<4, $r, D>(ctx, w, $m0, $n),
            }
        };
    }
    let mut n = n0;
    while n < n1 {
        let four = n1 - n >= 4;
        let mut m0 = 0;
        while m0 < ctx.m {
            let g = (ctx.m - m0).min(4);
            // SAFETY: rows n..n+R <= n1 and x rows m0..m0+g <= m; forwarded otherwise.
            unsafe {
                if four {
                    by_g!(4, g, m0, n)
                } else {
                    by_g!(1, g, m0, n)
                }
            }
            m0 += g;
        }
        n += if four { 4 } else { 1 };
    }
}

/// One register block: x rows `m0..m0+G` × weight rows `n..n+R`, over all of K. With few
/// accumulators (G·R ≤ 8) the low and high halves of a block go to separate accumulators, so
/// enough FMA chains are in flight to hide their latency.
///
/// # Safety
/// `m0 + G <= ctx.m`, `n + R <= ctx.n`; the rest as [`qrows`].
#[inline]
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn blk<const G: usize, const R: usize, D: Dec>(
    ctx: &QCtx,
    w: *const D::B,
    m0: usize,
    n: usize,
) {
    let nb = ctx.k / QK;
    let split = G * R <= 8;
    let mut lo = [[_mm512_setzero_ps(); R]; G];
    let mut hi = [[_mm512_setzero_ps(); R]; G];
    // SAFETY: block (n+r)*nb + b < N*nb; x offsets (m0+g)*k + 32b + 32 <= M*k; y (m0+g, n+r)
    // inside the validated y, in columns the caller owns.
    unsafe {
        for b in 0..nb {
            let mut wl = [_mm512_setzero_ps(); R];
            let mut wh = [_mm512_setzero_ps(); R];
            for r in 0..R {
                let (l, h) = D::dec(w.add((n + r) * nb + b));
                wl[r] = l;
                wh[r] = h;
            }
            for g in 0..G {
                let xp = ctx.x.add((m0 + g) * ctx.k + b * QK);
                let x0 = _mm512_loadu_ps(xp);
                let x1 = _mm512_loadu_ps(xp.add(16));
                for r in 0..R {
                    lo[g][r] = _mm512_fmadd_ps(wl[r], x0, lo[g][r]);
                    if split {
                        hi[g][r] = _mm512_fmadd_ps(wh[r], x1, hi[g][r]);
                    } else {
                        lo[g][r] = _mm512_fmadd_ps(wh[r], x1, lo[g][r]);
                    }
                }
            }
        }
        for g in 0..G {
            for r in 0..R {
                let s = _mm512_add_ps(lo[g][r], hi[g][r]);
                *ctx.y.add((m0 + g) * ctx.ldy + n + r) = _mm512_reduce_add_ps(s);
            }
        }
    }
}
