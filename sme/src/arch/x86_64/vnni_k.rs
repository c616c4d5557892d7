//! AVX-512 VNNI int8 GEMM micro-kernel for the K-quants (Q4_K, Q5_K, Q6_K) on
//! [`crate::Int8Weight`], reproducing `src/int8.rs`'s arithmetic bit for bit.
//!
//! `MR` (≤ 6) activation rows × one 16-row weight group, over all of K. Per super-block and
//! 32-k chunk: 4 nibble vectors (plus the Q5_K bit-4 plane or the two Q6_K bits-4..5 planes,
//! merged with a shift, an AND and a `vpternlogd`) feed 8·MR `vpdpbusd` into two i32 chains per
//! row: the chunk's low-nibble operands (k 0..16) and high-nibble ones (k 16..32). Q4_K/Q5_K
//! add the two chains (one 32-value sub-block) and multiply by the sub-block's 6-bit scales
//! (`vpmovzxbd` + `vpmulld`); Q6_K starts each chain at the activation's `−32 Σq_x` of its
//! 16-value sub-block and multiplies each by its i8 scales. After the super-block: one
//! `vcvtdq2ps` + FMA with `d·d_x`, and for Q4_K/Q5_K the minimum term `Σ m_j·Σq_x`: 4
//! `vpdpwssd` of the pair-interleaved minimums with the activation's 32-sums, converted, one
//! FNMA with `dmin·d_x`. Lanes are outputs: no horizontal sums.

use core::arch::x86_64::*;

use super::vnni::{bcast4, merge_bit4};
use crate::blocks::QK_K;
use crate::int8::{Ctx, INT8_GROUP};
use crate::quant::QK;
use crate::SuperMeta;

/// Rows per micro-kernel: 4 i32/f32 vectors per row plus 7 for decoding fit the 32 registers.
const MR_MAX: usize = 6;

/// `F`: 0 = Q4_K, 1 = Q5_K, 2 = Q6_K.
///
/// # Safety
/// As [`super::Vnni::tile`], with `ctx.fmt` the K-quant `F` names; the CPU has AVX-512F/BW and
/// VNNI (the caller holds the `Vnni` token).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn tile_k<const F: u8>(ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
    let end = r0 + rows;
    for g in g0..g1 {
        let lanes = (ctx.n - g * INT8_GROUP).min(INT8_GROUP);
        let mask: __mmask16 = if lanes >= 16 {
            0xFFFF
        } else {
            ((1u32 << lanes) - 1) as __mmask16
        };
        let mut r = r0;
        // SAFETY: every call has r + MR <= end <= m and g < ng (the tile contract), and forwards
        // the exclusive access to these outputs.
        unsafe {
            while end - r >= MR_MAX {
                micro_k::<MR_MAX, F>(ctx, g, r, mask);
                r += MR_MAX;
            }
            match end - r {
                0 => {}
                1 => micro_k::<1, F>(ctx, g, r, mask),
                2 => micro_k::<2, F>(ctx, g, r, mask),
                3 => micro_k::<3, F>(ctx, g, r, mask),
                4 => micro_k::<4, F>(ctx, g, r, mask),
                _ => micro_k::<5, F>(ctx, g, r, mask),
            }
        }
    }
}

/// Adds bits 4..5 to the nibble operands of vector `v` of a Q6_K chunk from its planes (`p0`
/// for the low-nibble elements, `p1` for the high ones; byte `4j + i` holds vector v's element
/// at bits `2v..2v+2`): a 16-bit shift brings them to bits 4..5 without crossing bytes.
///
/// # Safety
/// AVX-512F/BW (the caller's target features).
#[inline(always)]
unsafe fn merge_bits45(
    lo: __m512i,
    hi: __m512i,
    p0: __m512i,
    p1: __m512i,
    v: usize,
) -> (__m512i, __m512i) {
    // SAFETY: register-only intrinsics; AVX-512F/BW are the caller's.
    unsafe {
        let m30 = _mm512_set1_epi8(0x30);
        let (a, b) = match v {
            0 => (_mm512_slli_epi16::<4>(p0), _mm512_slli_epi16::<4>(p1)),
            1 => (_mm512_slli_epi16::<2>(p0), _mm512_slli_epi16::<2>(p1)),
            2 => (p0, p1),
            _ => (_mm512_srli_epi16::<2>(p0), _mm512_srli_epi16::<2>(p1)),
        };
        // 0xF8: A | (B & C).
        (
            _mm512_ternarylogic_epi32::<0xF8>(lo, a, m30),
            _mm512_ternarylogic_epi32::<0xF8>(hi, b, m30),
        )
    }
}

/// Rows `r0..r0+MR` × group `g`, all of K; stores the group's valid lanes (`mask`).
///
/// # Safety
/// `r0 + MR <= ctx.m`, `g < ceil(n/16)`, `mask` has only lanes `< n - 16g`; `ctx.fmt` is the
/// K-quant `F` names; exclusive access to those outputs; AVX-512F/BW/VNNI (guaranteed by the
/// caller's target features).
#[inline(always)]
unsafe fn micro_k<const MR: usize, const F: u8>(ctx: &Ctx, g: usize, r0: usize, mask: __mmask16) {
    let nb = ctx.nb;
    let (cb, sw) = match F {
        0 => (256, 2 * INT8_GROUP + 128),
        1 => (320, 2 * INT8_GROUP + 128),
        _ => (384, INT8_GROUP + 128),
    };
    let qb = cb * (QK_K / QK);
    // SAFETY: every pointer below stays inside the validated buffers: the group's nb records of
    // qb bytes and sw words, rows r0..r0+MR of qk (k bytes each) and kmeta (nb records each),
    // and the masked lanes of rows r0..r0+MR of y. Aligned loads of u: the storage is 64-byte
    // aligned and cb is a multiple of 64.
    unsafe {
        let u = ctx.u.add(g * nb * qb);
        let s = ctx.s.add(g * nb * sw);
        let xq: [*const i8; MR] = core::array::from_fn(|i| ctx.qk.add((r0 + i) * ctx.k));
        let meta: [*const SuperMeta; MR] = core::array::from_fn(|i| ctx.kmeta.add((r0 + i) * nb));
        let m0f = _mm512_set1_epi8(15);
        let mut acc = [_mm512_setzero_ps(); MR];
        for b in 0..nb {
            let ub = u.add(b * qb);
            let sb = s.add(b * sw);
            let sbytes = sb.cast::<u8>();
            let mut i1 = [_mm512_setzero_si512(); MR];
            for c in 0..QK_K / QK {
                let cp = ub.add(c * cb);
                let xb = b * QK_K + c * QK;
                let mut ca = [_mm512_setzero_si512(); MR];
                let mut ch = [_mm512_setzero_si512(); MR];
                if F == 2 {
                    for i in 0..MR {
                        let n32 = (*meta[i].add(b)).n32.as_ptr();
                        ca[i] = _mm512_set1_epi32(*n32.add(2 * c));
                        ch[i] = _mm512_set1_epi32(*n32.add(2 * c + 1));
                    }
                }
                let p0 = if F != 0 {
                    _mm512_load_si512(cp.add(256).cast())
                } else {
                    _mm512_setzero_si512()
                };
                let p1 = if F == 2 {
                    _mm512_load_si512(cp.add(320).cast())
                } else {
                    _mm512_setzero_si512()
                };
                for v in 0..4 {
                    let raw = _mm512_load_si512(cp.add(v * 64).cast());
                    let mut lo = _mm512_and_si512(raw, m0f);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), m0f);
                    if F == 1 {
                        (lo, hi) = merge_bit4(lo, hi, p0, v);
                    } else if F == 2 {
                        (lo, hi) = merge_bits45(lo, hi, p0, p1, v);
                    }
                    for i in 0..MR {
                        let xa = bcast4(xq[i].add(xb + 4 * v));
                        let xh = bcast4(xq[i].add(xb + 16 + 4 * v));
                        ca[i] = _mm512_dpbusd_epi32(ca[i], lo, xa);
                        ch[i] = _mm512_dpbusd_epi32(ch[i], hi, xh);
                    }
                }
                if F == 2 {
                    let sa = _mm512_cvtepi8_epi32(_mm_loadu_si128(sbytes.add(32 + 32 * c).cast()));
                    let sh =
                        _mm512_cvtepi8_epi32(_mm_loadu_si128(sbytes.add(32 + 32 * c + 16).cast()));
                    for i in 0..MR {
                        let t = _mm512_add_epi32(
                            _mm512_mullo_epi32(ca[i], sa),
                            _mm512_mullo_epi32(ch[i], sh),
                        );
                        i1[i] = _mm512_add_epi32(i1[i], t);
                    }
                } else {
                    let sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(sbytes.add(64 + 16 * c).cast()));
                    for i in 0..MR {
                        let t = _mm512_mullo_epi32(_mm512_add_epi32(ca[i], ch[i]), sc);
                        i1[i] = _mm512_add_epi32(i1[i], t);
                    }
                }
            }
            // Same order as the portable oracle: (d · d_x), fma; then (dmin · d_x), fnma.
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(sb.cast()));
            for i in 0..MR {
                let sc = _mm512_mul_ps(d, _mm512_set1_ps((*meta[i].add(b)).d));
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[i]), sc, acc[i]);
            }
            if F != 2 {
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(sb.add(INT8_GROUP).cast()));
                let mut i2 = [_mm512_setzero_si512(); MR];
                for t in 0..4 {
                    let mv =
                        _mm512_cvtepu8_epi16(_mm256_loadu_si256(sbytes.add(192 + 32 * t).cast()));
                    for i in 0..MR {
                        let bs = (*meta[i].add(b)).bsums32.as_ptr().add(2 * t);
                        let pair = _mm512_set1_epi32(bs.cast::<i32>().read_unaligned());
                        i2[i] = _mm512_dpwssd_epi32(i2[i], mv, pair);
                    }
                }
                for i in 0..MR {
                    let sc = _mm512_mul_ps(dmin, _mm512_set1_ps((*meta[i].add(b)).d));
                    acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(i2[i]), sc, acc[i]);
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(ctx.y.add((r0 + i) * ctx.ldy + g * INT8_GROUP), mask, *a);
        }
    }
}
