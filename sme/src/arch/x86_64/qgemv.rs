//! AVX-512 GEMV on the packed quantized format (included from `quant.rs`; reached through the
//! [`crate::arch::x86_64::Avx512`] token).
//!
//! One zmm lane = one weight row of a 16-row group, so no horizontal reduction is ever needed.
//! Q4 per 64-byte vector (16 rows × 8 nibbles, dword lane = 8 values of one row), no shuffle
//! but the lookups, no horizontal sums:
//! - even nibble positions p = 2o (the low nibble of byte o): a load at byte offset o puts it in
//!   bits 0..3 of every lane, and one `vpermps` with the table [0..15] turns it into `q` (it
//!   reads only those 4 bits, so no shift and no mask);
//! - odd positions p = 2o + 1: one `vpandd` with `0xF << 4p` and one `vcvtudq2ps`, exact
//!   `q·2^4p`, multiplied by x pre-scaled by 2^-4p (x is scaled once per chunk of blocks into a
//!   stack buffer; powers of two, so each product equals `q·x` exactly unless |x| < 2^-98
//!   underflows);
//! - one FMA per x row and value, x[k] broadcast from memory.
//!
//! The mix spreads the work over Zen 4's pipes (permutes on the shuffle pipes, AND anywhere,
//! converts and FMAs elsewhere). Measured on an L3-resident weight at M = 1: `vpsrld` +
//! `vpermps` for every nibble ran no faster than the GGUF-layout kernel (shifts and permutes
//! share two pipes), AND + convert for every nibble 1.7× it, this mix 1.85×.
//! Q8 per k: `vpmovsxbd` of 16 bytes (one per row), `vcvtdq2ps`, FMA.
//! Per block and x row the 32 products go into 4 chains (one per 8-value dword, so the FMA
//! latency is hidden), summed `(c0 + c1) + (c2 + c3)`, then one FMA with the 16 rows' scales
//! (FP16, one `vcvtph2ps` per block). Q4_0 starts chain 0 at `-8·Σx` (its `q - 8` offset);
//! Q4_1 adds `m·Σx` per block (Σx of the unscaled x, once per chunk and x row).
//! The quant stream of each group is software-prefetched [`PF`] bytes ahead into L1 and [`PF2`]
//! bytes ahead into L2.
//!
//! Batch invariance: every (x row, lane) sees the same operation sequence for any M, any tile
//! split and any x-row group size, so a row's result is bit-identical whatever M.

use core::arch::x86_64::*;

use super::{PCtx, QFmt, QK, QPACK_ROWS};

const P4: f32 = 1.0 / 16.0;
const P8: f32 = P4 * P4;
const P12: f32 = P8 * P4;
const P16: f32 = P8 * P8;
const P20: f32 = P16 * P4;
const P24: f32 = P16 * P8;
const P28: f32 = P16 * P12;

/// Software prefetch distance in bytes along a group's quant stream (0: none).
const PF: usize = 1024;
/// Second, farther prefetch into L2 (0: none). Two levels measured best on the 66 MB case
/// (noisy: T0 1 KiB alone ≈ 10.4, with T1 4 KiB 12-13 GiB/s; no prefetch 5-8).
const PF2: usize = 4096;

/// Even nibbles through unaligned loads + `vpermps`, odd ones through AND + convert.
const HYB: bool = true;

/// Blocks per chunk: accumulators of the tile's groups wait on the stack between chunks.
const CB: usize = 128;
/// Most groups per call (a tile is 64 rows).
const TG: usize = crate::quant::GEMV_TILE_ROWS / QPACK_ROWS;

/// Groups `g0..g1` (at most 4) against every x row.
///
/// # Safety
/// `ctx` validated; `g0 < g1 <= ceil(n/16)`, `g1 - g0 <= 4`; exclusive access to the y columns of
/// those groups; the CPU has AVX-512F, F16C and FMA (the caller holds the `Avx512` token).
pub(super) unsafe fn packed_groups(ctx: &PCtx, g0: usize, g1: usize) {
    let mut m0 = 0;
    while m0 < ctx.m {
        let g = (ctx.m - m0).min(4);
        // SAFETY: forwarded; x rows m0..m0+g <= m.
        unsafe {
            match (ctx.fmt, g) {
                (QFmt::Q4_0, 1) => run::<1, 0>(ctx, m0, g0, g1),
                (QFmt::Q4_0, 2) => run::<2, 0>(ctx, m0, g0, g1),
                (QFmt::Q4_0, 3) => run::<3, 0>(ctx, m0, g0, g1),
                (QFmt::Q4_0, _) => run::<4, 0>(ctx, m0, g0, g1),
                (QFmt::Q4_1, 1) => run::<1, 1>(ctx, m0, g0, g1),
                (QFmt::Q4_1, 2) => run::<2, 1>(ctx, m0, g0, g1),
                (QFmt::Q4_1, 3) => run::<3, 1>(ctx, m0, g0, g1),
                (QFmt::Q4_1, _) => run::<4, 1>(ctx, m0, g0, g1),
                (QFmt::Q8_0, 1) => run::<1, 2>(ctx, m0, g0, g1),
                (QFmt::Q8_0, 2) => run::<2, 2>(ctx, m0, g0, g1),
                (QFmt::Q8_0, 3) => run::<3, 2>(ctx, m0, g0, g1),
                (QFmt::Q8_0, _) => run::<4, 2>(ctx, m0, g0, g1),
                _ => {
                    super::qgemv_x86_hi::packed_groups(ctx, g0, g1);
                    return;
                }
            }
        }
        m0 += g;
    }
}

/// x rows `m0..m0+G` × groups `g0..g1`; `T`: 0 = Q4_0, 1 = Q4_1, 2 = Q8_0.
///
/// # Safety
/// As [`packed_groups`], with `m0 + G <= ctx.m`.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn run<const G: usize, const T: u8>(ctx: &PCtx, m0: usize, g0: usize, g1: usize) {
    let nb = ctx.k / QK;
    let mut acc = [[_mm512_setzero_ps(); G]; TG];
    let mut sx = [[0f32; CB]; G];
    let mut xs = [[0f32; CB * QK]; G];
    let table = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    let (db, sb) = (ctx.fmt.data_bytes(), ctx.fmt.scale_bytes());
    // SAFETY: (whole body) x row m0+g < m, values 32b..32b+32 with b < nb: inside x. Group data
    // and scale regions of g < ceil(n/16) lie inside the validated buffer; a Q4 data vector
    // `64j` of block b < nb reads 64 bytes inside the group's data region, and the loads at byte
    // offsets 1..3 reach at most 3 bytes past block b's 256 bytes: into block b+1 or, for the
    // last block, into the scale region that follows (at least 64 bytes); y lanes are stored
    // masked to the group's real rows, inside the validated y, in columns the caller owns.
    unsafe {
        let mut b0 = 0;
        while b0 < nb {
            let cnt = (nb - b0).min(CB);
            // Per x row and block: Σx (Q4 offsets), and for Q4 the x values pre-scaled by
            // 2^-4p for the element in nibble p (exact powers of two), so the masked nibble
            // `q·2^4p` converted to FP32 times the scaled x is exactly the product `q·x`.
            if T != 2 {
                let pat = if HYB {
                    _mm512_setr_ps(
                        1.0, P4, 1.0, P12, 1.0, P20, 1.0, P28, 1.0, P4, 1.0, P12, 1.0, P20, 1.0,
                        P28,
                    )
                } else {
                    _mm512_setr_ps(
                        1.0, P4, P8, P12, P16, P20, P24, P28, 1.0, P4, P8, P12, P16, P20, P24, P28,
                    )
                };
                for (g, (sxg, xsg)) in sx.iter_mut().zip(xs.iter_mut()).enumerate() {
                    for (j, sxj) in sxg[..cnt].iter_mut().enumerate() {
                        let xp = ctx.x.add((m0 + g) * ctx.k + (b0 + j) * QK);
                        let (x0, x1) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
                        *sxj = _mm512_reduce_add_ps(_mm512_add_ps(x0, x1));
                        let o = xsg.as_mut_ptr().add(j * QK);
                        _mm512_storeu_ps(o, _mm512_mul_ps(x0, pat));
                        _mm512_storeu_ps(o.add(16), _mm512_mul_ps(x1, pat));
                    }
                }
            }
            for (gi, ag) in acc[..g1 - g0].iter_mut().enumerate() {
                let grp = g0 + gi;
                let data = ctx.data(grp);
                let scales = ctx.scales(grp);
                for j in 0..cnt {
                    let b = b0 + j;
                    let dq = data.add(b * db);
                    let mut part = [[_mm512_setzero_ps(); 4]; G];
                    if T == 2 {
                        for e in 0..QK {
                            let q = _mm512_cvtepi8_epi32(_mm_loadu_si128(dq.add(16 * e) as _));
                            let w = _mm512_cvtepi32_ps(q);
                            for (g, pg) in part.iter_mut().enumerate() {
                                let xv = _mm512_set1_ps(*ctx.x.add((m0 + g) * ctx.k + b * QK + e));
                                pg[e % 4] = if e < 4 {
                                    _mm512_mul_ps(w, xv)
                                } else {
                                    _mm512_fmadd_ps(w, xv, pg[e % 4])
                                };
                            }
                        }
                    } else {
                        // Q4_0 starts chain 0 at -8·Σx (the offset of `q - 8`).
                        let mut init = [_mm512_setzero_ps(); G];
                        if T == 0 {
                            for (g, i) in init.iter_mut().enumerate() {
                                *i = _mm512_set1_ps(-8.0 * sx[g][j]);
                            }
                        }
                        for c in 0..4 {
                            if PF > 0 {
                                _mm_prefetch::<_MM_HINT_T0>(dq.wrapping_add(64 * c + PF) as _);
                            }
                            if PF2 > 0 {
                                _mm_prefetch::<_MM_HINT_T1>(dq.wrapping_add(64 * c + PF2) as _);
                            }
                            let v = _mm512_loadu_si512(dq.add(64 * c) as _);
                            for p in 0..8 {
                                let w = if HYB && p % 2 == 0 {
                                    // Low nibble of byte p/2: a load at that byte offset puts it
                                    // in bits 0..3 of each lane, which is all `vpermps` reads.
                                    let u = _mm512_loadu_si512(dq.add(64 * c + p / 2) as _);
                                    _mm512_permutexvar_ps(u, table)
                                } else {
                                    let m = _mm512_set1_epi32(0xF << (4 * p));
                                    _mm512_cvtepu32_ps(_mm512_and_si512(v, m))
                                };
                                for (g, pg) in part.iter_mut().enumerate() {
                                    let xv = _mm512_set1_ps(xs[g][j * QK + 8 * c + p]);
                                    pg[c] = if p > 0 {
                                        _mm512_fmadd_ps(w, xv, pg[c])
                                    } else if c == 0 && T == 0 {
                                        _mm512_fmadd_ps(w, xv, init[g])
                                    } else {
                                        _mm512_mul_ps(w, xv)
                                    };
                                }
                            }
                        }
                    }
                    let sp = scales.add(b * sb);
                    let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp as _));
                    for (g, (a, pg)) in ag.iter_mut().zip(&part).enumerate() {
                        let s =
                            _mm512_add_ps(_mm512_add_ps(pg[0], pg[1]), _mm512_add_ps(pg[2], pg[3]));
                        *a = _mm512_fmadd_ps(s, d, *a);
                        if T == 1 {
                            let mv = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32) as _));
                            *a = _mm512_fmadd_ps(mv, _mm512_set1_ps(sx[g][j]), *a);
                        }
                    }
                }
            }
            b0 += cnt;
        }
        for (gi, ag) in acc[..g1 - g0].iter().enumerate() {
            let grp = g0 + gi;
            let rows = (ctx.n - grp * QPACK_ROWS).min(QPACK_ROWS);
            let mask: __mmask16 = ((1u32 << rows) - 1) as u16;
            for (g, a) in ag.iter().enumerate() {
                let yp = ctx.y.add((m0 + g) * ctx.ldy + grp * QPACK_ROWS);
                _mm512_mask_storeu_ps(yp, mask, *a);
            }
        }
    }
}
