//! AVX-512 GEMV on the packed quantized format for Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (included
//! from `qpacked.rs`; reached through [`crate::arch::x86_64::Avx512`]; Q4_0/Q4_1/Q8_0 are in
//! `qgemv.rs`).
//!
//! One zmm lane = one weight row of a 16-row group, as in `qgemv.rs`, whose nibble decoding
//! this reuses (even nibbles by an offset load + `vpermps`, odd ones by AND + convert against x
//! pre-scaled by 2^-4p; 4 FMA chains per 32-value chunk, one per nibble vector).
//!
//! The bits above the nibble cost one `vpermps` and one add per 4 values (bit 4 of the 5-bit
//! types) or per 2 values (bits 4..5 of Q6_K) instead of a decode and an FMA per value: for
//! each x row and 4 (2) consecutive values the kernel first builds a 16-entry FP32 table of
//! the partial sums `Σ bits·16·x` over every bit pattern; the plane's dword of a row holds those
//! patterns as consecutive nibbles, so `vpsrld` by 4t puts pattern t in bits 0..3 of every lane,
//! which is all `vpermps` reads. Tables depend only on x, so they are built once per x row and
//! window of 8 chunks and serve every group of the tile.
//!
//! Scales per 32-value chunk (16 for Q6_K): Q5_0 `d·(Σ q·x − 16 Σx)`, Q5_1 `d·Σ q·x + m·Σx`,
//! Q4_K/Q5_K `(d·sc_j)·Σ q·x − (dmin·m_j)·Σx`, Q6_K `(d·sc_j)·(Σ q·x − 32 Σx)`; the offsets
//! (−16, −32) start the chains. Every (x row, lane) sees the same operation sequence for any M,
//! so a row's result is bit-identical whatever M (batch invariance).

use core::arch::x86_64::*;

use super::{PCtx, QFmt, QK, QPACK_ROWS};

const P4: f32 = 1.0 / 16.0;
const P12: f32 = P4 * P4 * P4;
const P20: f32 = P12 * P4 * P4;
const P28: f32 = P20 * P4 * P4;

/// 32-value chunks per x window: prescaled x, sums and tables of a window stay in L1.
const CC: usize = 8;
/// Most groups per call (a tile is 64 rows).
const TG: usize = crate::quant::GEMV_TILE_ROWS / QPACK_ROWS;
/// Software prefetch distances along a group's quant stream (as in `qgemv.rs`).
const PF: usize = 1024;
const PF2: usize = 4096;

/// Groups `g0..g1` (at most 4) against every x row, for the formats this file handles.
///
/// # Safety
/// `ctx` validated with one of Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; `g0 < g1 <= ceil(n/16)`,
/// `g1 - g0 <= 4`; exclusive access to the y columns of those groups; the CPU has AVX-512F,
/// F16C and FMA (the caller holds the `Avx512` token).
pub(super) unsafe fn packed_groups(ctx: &PCtx, g0: usize, g1: usize) {
    let mut m0 = 0;
    while m0 < ctx.m {
        let g = (ctx.m - m0).min(4);
        // SAFETY: forwarded; x rows m0..m0+g <= m.
        unsafe {
            match g {
                1 => by_fmt::<1>(ctx, m0, g0, g1),
                2 => by_fmt::<2>(ctx, m0, g0, g1),
                3 => by_fmt::<3>(ctx, m0, g0, g1),
                _ => by_fmt::<4>(ctx, m0, g0, g1),
            }
        }
        m0 += g;
    }
}

/// # Safety
/// As [`packed_groups`], with `m0 + G <= ctx.m`.
unsafe fn by_fmt<const G: usize>(ctx: &PCtx, m0: usize, g0: usize, g1: usize) {
    // SAFETY: forwarded.
    unsafe {
        match ctx.fmt {
            QFmt::Q5_0 => run::<G, 0>(ctx, m0, g0, g1),
            QFmt::Q5_1 => run::<G, 1>(ctx, m0, g0, g1),
            QFmt::Q4K => run::<G, 2>(ctx, m0, g0, g1),
            QFmt::Q5K => run::<G, 3>(ctx, m0, g0, g1),
            QFmt::Q6K => run::<G, 4>(ctx, m0, g0, g1),
            // The caller routes only the formats above here.
            _ => super::packed_groups_portable(ctx, g0, g1),
        }
    }
}

/// 16 bytes at `p` (unsigned, or signed when `SIGNED`) widened to FP32.
///
/// # Safety
/// `p` readable for 16 bytes; AVX-512F (the caller's target features).
#[inline(always)]
unsafe fn bytes_f32<const SIGNED: bool>(p: *const u8) -> __m512 {
    // SAFETY: forwarded.
    unsafe {
        let b = _mm_loadu_si128(p as _);
        _mm512_cvtepi32_ps(if SIGNED {
            _mm512_cvtepi8_epi32(b)
        } else {
            _mm512_cvtepu8_epi32(b)
        })
    }
}

/// Tables per 32-value chunk: 8 (one per 4 values, bit 4) or 16 (one per 2 values, bits 4..5).
const fn tables(t: u8) -> usize {
    match t {
        0 | 1 | 3 => 8,
        4 => 16,
        _ => 0,
    }
}

/// x rows `m0..m0+G` × groups `g0..g1`; `T`: 0 = Q5_0, 1 = Q5_1, 2 = Q4_K, 3 = Q5_K, 4 = Q6_K.
///
/// # Safety
/// As [`packed_groups`], with `m0 + G <= ctx.m` and `ctx.fmt` the format `T` names.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn run<const G: usize, const T: u8>(ctx: &PCtx, m0: usize, g0: usize, g1: usize) {
    let f = ctx.fmt;
    let nchunks = ctx.k / QK;
    let per_block = f.block() / QK;
    let (db, sb, cbytes) = (f.data_bytes(), f.scale_bytes(), f.chunk_bytes());
    let nt = tables(T);
    let mut acc = [[_mm512_setzero_ps(); G]; TG];
    // Per x row and window: x pre-scaled for the odd nibbles, sums per 16 values, tables.
    let mut xs = [[0f32; CC * QK]; G];
    let mut sx = [[0f32; 2 * CC]; G];
    let mut tb = [[[0f32; 16]; 16 * CC]; G];
    let table = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    // Table basis: entry b of bit-pattern vector i is 16·(bit i of b) (Q5) or 16·(2-bit field
    // i of b) (Q6_K).
    let bit = |i: i32| {
        let mut v = [0f32; 16];
        for (b, e) in v.iter_mut().enumerate() {
            *e = if T == 4 {
                16.0 * ((b as i32 >> (2 * i)) & 3) as f32
            } else {
                16.0 * ((b as i32 >> i) & 1) as f32
            };
        }
        v
    };
    let basis = [bit(0), bit(1), bit(2), bit(3)];
    // SAFETY: (whole body) x row m0+g < m, values 32c..32c+32 with c < nchunks: inside x. Group
    // data and scale regions of g < ceil(n/16) lie inside the validated buffer; chunk c of a
    // group starts at (c / per_block)·db + (c % per_block)·cbytes of its data region and holds
    // cbytes bytes; nibble loads at byte offsets 1..3 reach at most 3 bytes past the 256 nibble
    // bytes: into the chunk's planes, the next chunk, or (after a group's last chunk) the scale
    // region, at least 64 bytes long. Scale reads stay in the block's sb bytes. y lanes are
    // stored masked to the group's real rows, inside the validated y, in columns the caller
    // owns.
    unsafe {
        // (No closures around intrinsics: they would not inherit the target features.)
        let bvec = [
            _mm512_loadu_ps(basis[0].as_ptr()),
            _mm512_loadu_ps(basis[1].as_ptr()),
            _mm512_loadu_ps(basis[2].as_ptr()),
            _mm512_loadu_ps(basis[3].as_ptr()),
        ];
        let pat = _mm512_setr_ps(
            1.0, P4, 1.0, P12, 1.0, P20, 1.0, P28, 1.0, P4, 1.0, P12, 1.0, P20, 1.0, P28,
        );
        let mut c0 = 0;
        while c0 < nchunks {
            let cnt = (nchunks - c0).min(CC);
            for g in 0..G {
                for j in 0..cnt {
                    let xp = ctx.x.add((m0 + g) * ctx.k + (c0 + j) * QK);
                    let (x0, x1) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
                    sx[g][2 * j] = _mm512_reduce_add_ps(x0);
                    sx[g][2 * j + 1] = _mm512_reduce_add_ps(x1);
                    let o = xs[g].as_mut_ptr().add(j * QK);
                    _mm512_storeu_ps(o, _mm512_mul_ps(x0, pat));
                    _mm512_storeu_ps(o.add(16), _mm512_mul_ps(x1, pat));
                    // Table t of the chunk covers values (32/nt)·t.. of it.
                    let per = QK / nt.max(1);
                    for t in 0..nt {
                        let xt = xp.add(per * t);
                        let mut v = _mm512_mul_ps(_mm512_set1_ps(*xt), bvec[0]);
                        v = _mm512_fmadd_ps(_mm512_set1_ps(*xt.add(1)), bvec[1], v);
                        if per == 4 {
                            v = _mm512_fmadd_ps(_mm512_set1_ps(*xt.add(2)), bvec[2], v);
                            v = _mm512_fmadd_ps(_mm512_set1_ps(*xt.add(3)), bvec[3], v);
                        }
                        _mm512_storeu_ps(tb[g][j * nt + t].as_mut_ptr(), v);
                    }
                }
            }
            for (gi, ag) in acc[..g1 - g0].iter_mut().enumerate() {
                let grp = g0 + gi;
                let data = ctx.data(grp);
                let scales = ctx.scales(grp);
                for j in 0..cnt {
                    let c = c0 + j;
                    let (b, ci) = (c / per_block, c % per_block);
                    let dq = data.add(b * db + ci * cbytes);
                    let sp = scales.add(b * sb);
                    let mut part = [[_mm512_setzero_ps(); 4]; G];
                    // Offsets start chains: Q5_0 chain 0 at −16·Σx; Q6_K chains 0 and 2 (values
                    // 0..16 and 16..32) at −32·Σx of their 16 values.
                    let mut init = [[_mm512_setzero_ps(); 4]; G];
                    for (g, i) in init.iter_mut().enumerate() {
                        if T == 0 {
                            i[0] = _mm512_set1_ps(-16.0 * (sx[g][2 * j] + sx[g][2 * j + 1]));
                        } else if T == 4 {
                            i[0] = _mm512_set1_ps(-32.0 * sx[g][2 * j]);
                            i[2] = _mm512_set1_ps(-32.0 * sx[g][2 * j + 1]);
                        }
                    }
                    let starts =
                        |cv: usize| (T == 0 && cv == 0) || (T == 4 && cv.is_multiple_of(2));
                    for cv in 0..4 {
                        _mm_prefetch::<_MM_HINT_T0>(dq.wrapping_add(64 * cv + PF) as _);
                        _mm_prefetch::<_MM_HINT_T1>(dq.wrapping_add(64 * cv + PF2) as _);
                        let v = _mm512_loadu_si512(dq.add(64 * cv) as _);
                        for p in 0..8 {
                            let w = if p % 2 == 0 {
                                let u = _mm512_loadu_si512(dq.add(64 * cv + p / 2) as _);
                                _mm512_permutexvar_ps(u, table)
                            } else {
                                let mk = _mm512_set1_epi32(0xF << (4 * p));
                                _mm512_cvtepu32_ps(_mm512_and_si512(v, mk))
                            };
                            for (g, pg) in part.iter_mut().enumerate() {
                                let xv = _mm512_set1_ps(xs[g][j * QK + 8 * cv + p]);
                                pg[cv] = if p > 0 {
                                    _mm512_fmadd_ps(w, xv, pg[cv])
                                } else if starts(cv) {
                                    _mm512_fmadd_ps(w, xv, init[g][cv])
                                } else {
                                    _mm512_mul_ps(w, xv)
                                };
                            }
                        }
                    }
                    // The high bits: one table lookup and add per 4 (or 2) values.
                    for h in 0..nt / 8 {
                        let plane = _mm512_loadu_si512(dq.add(256 + 64 * h) as _);
                        for t in 0..8 {
                            let idx = match t {
                                0 => plane,
                                1 => _mm512_srli_epi32::<4>(plane),
                                2 => _mm512_srli_epi32::<8>(plane),
                                3 => _mm512_srli_epi32::<12>(plane),
                                4 => _mm512_srli_epi32::<16>(plane),
                                5 => _mm512_srli_epi32::<20>(plane),
                                6 => _mm512_srli_epi32::<24>(plane),
                                _ => _mm512_srli_epi32::<28>(plane),
                            };
                            // Q5: table t covers values 4t..4t+4 (nibble vector t/2); Q6_K:
                            // plane h, table t covers values 16h + 2t.. (vector 2h + t/4).
                            let chain = if T == 4 { 2 * h + t / 4 } else { t / 2 };
                            for (g, pg) in part.iter_mut().enumerate() {
                                let tv = _mm512_loadu_ps(tb[g][j * nt + 8 * h + t].as_ptr());
                                pg[chain] =
                                    _mm512_add_ps(pg[chain], _mm512_permutexvar_ps(idx, tv));
                            }
                        }
                    }
                    let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp as _));
                    match T {
                        0 | 1 => {
                            let mv = if T == 1 {
                                _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32) as _))
                            } else {
                                _mm512_setzero_ps()
                            };
                            for (g, (a, pg)) in ag.iter_mut().zip(&part).enumerate() {
                                let s = _mm512_add_ps(
                                    _mm512_add_ps(pg[0], pg[1]),
                                    _mm512_add_ps(pg[2], pg[3]),
                                );
                                *a = _mm512_fmadd_ps(s, d, *a);
                                if T == 1 {
                                    let sxj = sx[g][2 * j] + sx[g][2 * j + 1];
                                    *a = _mm512_fmadd_ps(mv, _mm512_set1_ps(sxj), *a);
                                }
                            }
                        }
                        2 | 3 => {
                            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32) as _));
                            let sc = _mm512_mul_ps(d, bytes_f32::<false>(sp.add(64 + 16 * ci)));
                            let mn = _mm512_mul_ps(dmin, bytes_f32::<false>(sp.add(192 + 16 * ci)));
                            for (g, (a, pg)) in ag.iter_mut().zip(&part).enumerate() {
                                let s = _mm512_add_ps(
                                    _mm512_add_ps(pg[0], pg[1]),
                                    _mm512_add_ps(pg[2], pg[3]),
                                );
                                *a = _mm512_fmadd_ps(s, sc, *a);
                                let sxj = sx[g][2 * j] + sx[g][2 * j + 1];
                                *a = _mm512_fnmadd_ps(mn, _mm512_set1_ps(sxj), *a);
                            }
                        }
                        _ => {
                            let s0 = _mm512_mul_ps(d, bytes_f32::<true>(sp.add(32 + 32 * ci)));
                            let s1 = _mm512_mul_ps(d, bytes_f32::<true>(sp.add(48 + 32 * ci)));
                            for (a, pg) in ag.iter_mut().zip(&part) {
                                *a = _mm512_fmadd_ps(_mm512_add_ps(pg[0], pg[1]), s0, *a);
                                *a = _mm512_fmadd_ps(_mm512_add_ps(pg[2], pg[3]), s1, *a);
                            }
                        }
                    }
                }
            }
            c0 += cnt;
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
