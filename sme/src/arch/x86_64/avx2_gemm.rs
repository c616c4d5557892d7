//! AVX2 + FMA + F16C GEMM on the packed FP16/BF16 panels: the FP16 GEMM (and so the FP16 decode
//! GEMV, which is the GEMM at M ≤ 16) for x86-64 CPUs without AVX-512 (Zen 1-3, Intel client
//! cores), which ran the portable scalar tile before.
//!
//! A k-pair row of 4 columns is 8 elements = one ymm of FP32 after `vcvtph2ps` (BF16: a
//! zero-extension and a shift), lanes `[c0k0, c0k1, c1k0, c1k1, ...]`; an A row's pair
//! `(a[2q], a[2q+1])` is broadcast as one 64-bit value, so one FMA per ymm accumulates both k
//! of the pair in adjacent lanes, and the two lanes of a column are added once at the end
//! (`vhaddps` + a 64-bit permute). Micro-kernels: 3 rows × 16 columns (12 accumulators, 4
//! weight vectors, 16 ymm in all) for prefill; 1 row × 32 columns and 2 rows × 16 columns for
//! the decode case (rows ≤ 2), whose weight vectors are used as they are converted. K is cut
//! into chunks of 128 k-pairs so the panel chunk (32 KiB) stays in L1 while the tile's row
//! groups reuse it. FP32 accumulation: the same arithmetic as the AVX-512 kernel (per column,
//! per lane the pair products in k order, the two lanes added at the end).

use core::arch::x86_64::*;

use super::Avx2;
use crate::gemm::{APtr, Ctx};
use crate::pack::{PackedFormat, PAIR_ELEMS, PANEL_COLS};

/// Rows of A per tile (16 groups of the 3-row micro-kernel reuse each L1-resident chunk).
pub(crate) const AVX2_TILE_ROWS: usize = 48;
/// k-pairs per K chunk.
const KC: usize = 128;
/// Rows of the prefill micro-kernel.
const MR: usize = 3;

impl Avx2 {
    /// # Safety
    /// As [`crate::Kernel::tile`] for one panel `p`.
    pub(crate) unsafe fn gemm_tile(self, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
        // SAFETY: the token proves avx2+fma+f16c; the rest is forwarded.
        unsafe {
            match ctx.format {
                PackedFormat::F16 => tile::<false>(ctx, row0, rows, p),
                PackedFormat::Bf16 => tile::<true>(ctx, row0, rows, p),
            }
        }
    }
}

/// # Safety
/// As [`Avx2::gemm_tile`], with the features present.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const BF16: bool>(ctx: &Ctx, row0: usize, rows: usize, p: usize) {
    let cols = ctx.panel_cols(p);
    let panel = ctx.panel_ptr(p);
    let mut abuf = [0f32; MR * 2 * KC];
    // Columns per micro-kernel call: 32 for one row, 16 otherwise.
    let width = if rows == 1 { 32 } else { 16 };
    let mut q0 = 0;
    // At least one pass, so K = 0 still writes C = bias (or leaves C + bias).
    loop {
        let qn = (ctx.kp - q0).min(KC);
        let last = q0 + qn >= ctx.kp;
        let first = q0 == 0;
        let mut c0 = 0;
        while c0 < cols {
            let ccols = (cols - c0).min(width);
            // Column c0 of the panel starts at element 2·c0 of each k-pair row.
            let w = panel.wrapping_add(q0 * PAIR_ELEMS + 2 * c0);
            let col = p * PANEL_COLS + c0;
            let bias = if first && !ctx.bias.is_null() {
                ctx.bias.wrapping_add(col)
            } else {
                core::ptr::null()
            };
            let load_c = !first || ctx.accumulate;
            let mut i = row0;
            while i < row0 + rows {
                let r = (row0 + rows - i).min(if rows <= 2 { 2 } else { MR });
                let odd_tail = last && ctx.k % 2 == 1;
                let (a, lda, pairs, tail) = match ctx.a {
                    APtr::F32(a) => (
                        a.wrapping_add(i * ctx.lda + 2 * q0),
                        ctx.lda,
                        qn - odd_tail as usize,
                        odd_tail,
                    ),
                    APtr::F16(a) => {
                        // The r × (2 qn) block in FP32, zero past K (then every pair is whole).
                        let kk0 = 2 * q0;
                        let kn = (ctx.k - kk0).min(2 * qn);
                        for rr in 0..r {
                            let dst = &mut abuf[rr * 2 * KC..(rr + 1) * 2 * KC];
                            // SAFETY: row i+rr < m, columns kk0..kk0+kn <= k: inside A.
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
                let args = Uk {
                    a,
                    lda,
                    pairs,
                    tail,
                    w,
                    c: ctx.c.wrapping_add(i * ctx.ldc + col),
                    ldc: ctx.ldc,
                    cols: ccols,
                    load_c,
                    bias,
                };
                // SAFETY: a covers r rows of `pairs` pairs (+1 element when tail) inside A or
                // abuf; w covers qn k-pair rows of columns c0..c0+width of the panel (inside
                // the panel's 64); c covers r rows × ccols columns of the caller's tile; bias
                // (if non-null) covers ccols elements.
                unsafe {
                    match (rows, r) {
                        (1, _) => uk::<1, 8, BF16>(&args),
                        (_, 1) => uk::<1, 4, BF16>(&args),
                        (_, 2) => uk::<2, 4, BF16>(&args),
                        _ => uk::<3, 4, BF16>(&args),
                    }
                }
                i += r;
            }
            c0 += width;
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
/// F16C and AVX present; `dst.len() >= src.len()`.
#[target_feature(enable = "avx2,f16c")]
unsafe fn cvt_f16_row(src: &[u16], dst: &mut [f32]) {
    let n = src.len();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n elements are inside both slices.
        unsafe {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(src.as_ptr().add(i) as *const __m128i));
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), v);
        }
        i += 8;
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

/// 8 packed elements (4 columns × 2 k) to FP32.
///
/// # Safety
/// 8 readable u16 at `p`; avx2 + f16c enabled by the caller.
#[inline(always)]
unsafe fn load_w<const BF16: bool>(p: *const u16) -> __m256 {
    // SAFETY: the caller guarantees 8 readable u16 at p.
    unsafe {
        let v = _mm_loadu_si128(p as *const __m128i);
        if BF16 {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v)))
        } else {
            _mm256_cvtph_ps(v)
        }
    }
}

/// R rows × 4·NW columns over `pairs` k-pairs (+ the odd tail).
///
/// # Safety
/// `a` readable for R rows (stride lda) of `2*pairs` (+1 if tail) f32; `w` readable for
/// `pairs + tail` k-pair rows (stride 128 u16) of `8 * NW` u16; `c` writable (and readable if
/// load_c) for R rows (stride ldc) of `cols <= 4·NW` f32; bias null or `cols` readable f32.
#[allow(clippy::needless_range_loop)] // acc[r][j] pairs two arrays' indices
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn uk<const R: usize, const NW: usize, const BF16: bool>(u: &Uk) {
    let mut acc = [[_mm256_setzero_ps(); NW]; R];
    // SAFETY: every pointer offset below stays inside the extents in this function's contract.
    unsafe {
        let steps = u.pairs + u.tail as usize;
        for q in 0..steps {
            let wp = u.w.add(q * PAIR_ELEMS);
            let mut av = [_mm256_setzero_ps(); R];
            for (r, v) in av.iter_mut().enumerate() {
                *v = if q < u.pairs {
                    let pair = core::ptr::read_unaligned(u.a.add(r * u.lda + 2 * q) as *const f64);
                    _mm256_castpd_ps(_mm256_set1_pd(pair))
                } else {
                    // Only a[2q] exists (odd K): the pair is (a[2q], 0).
                    let a0 = *u.a.add(r * u.lda + 2 * q);
                    _mm256_castsi256_ps(_mm256_set1_epi64x(a0.to_bits() as i64))
                };
            }
            for j in 0..NW {
                let wv = load_w::<BF16>(wp.add(8 * j));
                for r in 0..R {
                    acc[r][j] = _mm256_fmadd_ps(av[r], wv, acc[r][j]);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for h in 0..NW / 2 {
                let cnt = u.cols.saturating_sub(8 * h).min(8);
                if cnt == 0 {
                    continue;
                }
                // Lanes (k0, k1) of 4 + 4 columns → 8 column sums in order.
                let s = _mm256_hadd_ps(acc_r[2 * h], acc_r[2 * h + 1]);
                let mut s =
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(s)));
                let mut tmp = [0f32; 8];
                if !u.bias.is_null() {
                    core::ptr::copy_nonoverlapping(u.bias.add(8 * h), tmp.as_mut_ptr(), cnt);
                    s = _mm256_add_ps(s, _mm256_loadu_ps(tmp.as_ptr()));
                }
                let dst = u.c.add(r * u.ldc + 8 * h);
                if cnt == 8 {
                    if u.load_c {
                        s = _mm256_add_ps(_mm256_loadu_ps(dst), s);
                    }
                    _mm256_storeu_ps(dst, s);
                } else {
                    _mm256_storeu_ps(tmp.as_mut_ptr(), s);
                    for (e, v) in tmp.iter().enumerate().take(cnt) {
                        let d = dst.add(e);
                        *d = if u.load_c { *d + *v } else { *v };
                    }
                }
            }
        }
    }
}
