//! AVX2 int8 GEMM on [`crate::Int8Weight`] (the same packed weight and the same arithmetic as
//! the VNNI kernel, see `src/int8.rs`): for CPUs without AVX-512 (Zen 1-3, Intel client cores
//! before and after AVX-512's removal).
//!
//! A 512-bit `vpdpbusd` operand of the packed weight (lane `j` = output row `j`, its 4 bytes =
//! 4 consecutive k) is two 256-bit halves (rows 0..8, 8..16). AVX2 has no `vpdpbusd`: the dot
//! product is `vpmaddubsw` (u8 × i8 pairs into **saturating** i16) then `vpmaddwd` (i16 pairs
//! into i32). The integer must equal the oracle's exactly, so no i16 may saturate. The bounds
//! (activations `|q_x| <= 127`, `quantize_block` clamps; weights `u` as below):
//! - 4-bit `u <= 15`: one `vpmaddubsw` word is at most `2·15·127 = 3810`; the 8 operands of a
//!   32-k chunk summed in i16 reach `30480 < 32767`;
//! - 5-bit `u <= 31`: `2·31·127 = 7874` per word, sums of 4 operands `31496`;
//! - 6-bit `u <= 63` (Q6_K): `2·63·127 = 16002`, sums of 2 operands `32004`;
//! - Q8_0 `u = q + 128 <= 255` would saturate (`2·255·127`), so Q8_0 uses the signed weight
//!   `q = u ^ 0x80` and the sign trick: `vpmaddubsw(|q|, sign(q_x, q))`, `|q| <= 128` as u8,
//!   `|q_x| <= 127` so its negation is exact, one word at most `2·128·127 = 32512`, widened to
//!   i32 after every operand. `Σ q·q_x` equals the oracle's `n128 + Σ u·q_x` exactly.
//!
//! K-quants: Q4_K / Q5_K fold the sub-block scale into the widening step (`vpmaddwd` of the i16
//! sums with the scale in both words of each lane: `sc·(w0 + w1)`, exact, `sc <= 63`); Q6_K
//! (signed scales, the `-32·Σq_x` offset per 16) widens with ones, adds the offset and multiplies
//! by the scale with `vpmulld`. Integer sums are exact, so their order is free; the f32 steps are
//! the oracle's, in its order (`fma(f32(i), d_w·d_x, acc)`, then the offset FMA), so results are
//! bit-identical to [`crate::Int8Kernel::Portable`] and batch invariant.

use core::arch::x86_64::*;

use crate::blocks::QK_K;
use crate::int8::{Ctx, Int8Fmt, INT8_GROUP};
use crate::quant::QK;
use crate::{BlockMeta, SuperMeta};

/// Capability token: proves AVX2, FMA and F16C (the AVX2 int8 GEMM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avx2 {
    _p: (),
}

impl Avx2 {
    /// `Some` when the CPU (and OS, through XCR0) supports AVX2, FMA and F16C.
    pub fn try_new() -> Option<Self> {
        (std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c"))
        .then_some(Self { _p: () })
    }

    /// # Safety
    /// The CPU must support AVX2, FMA and F16C, with AVX state enabled by the OS.
    pub unsafe fn new_unchecked() -> Self {
        Self { _p: () }
    }

    /// Rows `r0..r0+rows` × groups `g0..g1` of the int8 GEMM.
    ///
    /// # Safety
    /// `ctx` validated; `r0 + rows <= ctx.m`; `g0 <= g1 <= ceil(n/16)`; exclusive access to that
    /// region of y.
    pub(crate) unsafe fn int8_tile(self, ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
        // SAFETY: the token proves the features; the rest is forwarded.
        unsafe {
            match ctx.fmt {
                Int8Fmt::Q4_0 => tile_impl::<Q4_0>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q4_1 => tile_impl::<Q4_1>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q8_0 => tile_impl::<Q8_0>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q5_0 => tile_impl::<Q5_0>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q5_1 => tile_impl::<Q5_1>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q4K => tile_impl::<Q4K>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q5K => tile_impl::<Q5K>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q6K => tile_impl::<Q6K>(ctx, r0, rows, g0, g1),
            }
        }
    }
}

// Format codes of the const generic parameter.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const Q5_0: u8 = 3;
const Q5_1: u8 = 4;
const Q4K: u8 = 5;
const Q5K: u8 = 6;
const Q6K: u8 = 7;

const fn is_k(f: u8) -> bool {
    f >= Q4K
}

/// Bits of `u` above the nibble: 1 (5-bit types), 2 (Q6_K), else 0.
const fn high_bits(f: u8) -> u8 {
    match f {
        Q5_0 | Q5_1 | Q5K => 1,
        Q6K => 2,
        _ => 0,
    }
}

/// Activation rows per micro-kernel call: the weight operands of a half-group are unpacked once
/// and reused for this many rows.
const MR: usize = 4;

/// # Safety
/// As [`Avx2::int8_tile`], with `F` the code of `ctx.fmt`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_impl<const F: u8>(ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
    for g in g0..g1 {
        let mut r = r0;
        while r < r0 + rows {
            let mr = (r0 + rows - r).min(MR);
            // SAFETY: forwarded; rows r..r+mr lie inside r0..r0+rows.
            unsafe {
                match mr {
                    1 => group_rows::<F, 1>(ctx, r, g),
                    2 => group_rows::<F, 2>(ctx, r, g),
                    3 => group_rows::<F, 3>(ctx, r, g),
                    _ => group_rows::<F, 4>(ctx, r, g),
                }
            }
            r += mr;
        }
    }
}

/// The 8 `vpmaddubsw` weight operands of half `h` of one 32-k chunk at `ub`: operand `o`
/// multiplies activations `4o..4o+4` (4-bit types: operands 0..3 the low nibbles of the chunk's
/// vectors 0..3, k = 4v.., operands 4..7 the high nibbles, k = 16 + 4v..). Q8_0: the signed
/// weights `u ^ 0x80`.
///
/// # Safety
/// `ub` points at a whole chunk of the packed weight (`Int8Fmt::chunk_bytes` readable bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack<const F: u8>(ub: *const u8, h: usize) -> [__m256i; 8] {
    // SAFETY: (whole body) every load lies inside the chunk: vector v at 64v + 32h, 32 bytes,
    // v < 8 for Q8_0 (512 bytes), v < 4 plus the bit planes at 256 + 64p + 32h otherwise.
    unsafe {
        let ld = |off: usize| _mm256_loadu_si256(ub.add(off + 32 * h) as *const __m256i);
        let mut op = [_mm256_setzero_si256(); 8];
        if F == Q8_0 {
            let flip = _mm256_set1_epi8(-128);
            for (o, w) in op.iter_mut().enumerate() {
                *w = _mm256_xor_si256(ld(64 * o), flip);
            }
            return op;
        }
        let nib = _mm256_set1_epi8(0x0F);
        for v in 0..4 {
            let raw = ld(64 * v);
            op[v] = _mm256_and_si256(raw, nib);
            op[4 + v] = _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nib);
        }
        match high_bits(F) {
            1 => {
                // Bit (v + 4·hi) of the plane byte is bit 4 of the operand (hi: high nibble).
                let plane = ld(256);
                let b4 = _mm256_set1_epi8(0x10);
                for v in 0..4 {
                    let lo = _mm256_sll_epi16(plane, _mm_cvtsi32_si128(4 - v as i32));
                    let hi = _mm256_srl_epi16(plane, _mm_cvtsi32_si128(v as i32));
                    op[v] = _mm256_or_si256(op[v], _mm256_and_si256(lo, b4));
                    op[4 + v] = _mm256_or_si256(op[4 + v], _mm256_and_si256(hi, b4));
                }
            }
            2 => {
                // Bits 2v..2v+2 of plane p (p: low / high nibbles) are bits 4..6 of the operand.
                let b45 = _mm256_set1_epi8(0x30);
                for p in 0..2 {
                    let plane = ld(256 + 64 * p);
                    for v in 0..4 {
                        let t = if v < 2 {
                            _mm256_sll_epi16(plane, _mm_cvtsi32_si128(4 - 2 * v as i32))
                        } else {
                            _mm256_srl_epi16(plane, _mm_cvtsi32_si128(2 * v as i32 - 4))
                        };
                        op[4 * p + v] = _mm256_or_si256(op[4 * p + v], _mm256_and_si256(t, b45));
                    }
                }
            }
            _ => {}
        }
        op
    }
}

/// The activation bytes `4o..4o+4` of a 32-value chunk at `xq`, in every lane.
///
/// # Safety
/// `xq` readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn xb(xq: *const i8, o: usize) -> __m256i {
    // SAFETY: o < 8, so bytes 4o..4o+4 lie inside the caller's 32.
    _mm256_set1_epi32(unsafe { (xq.add(4 * o) as *const i32).read_unaligned() })
}

/// `Σ_{o in os} u·q_x` of operands `os` as i16 words (the caller bounds `os` so none saturates).
///
/// # Safety
/// `xq` readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot16(op: &[__m256i; 8], xq: *const i8, os: core::ops::Range<usize>) -> __m256i {
    let mut s = _mm256_setzero_si256();
    for o in os {
        // SAFETY: forwarded.
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(op[o], unsafe { xb(xq, o) }));
    }
    s
}

/// `Σ u·q_x` over a whole 32-k chunk as i32 lanes, exact (bounds in the module doc).
///
/// # Safety
/// `xq` readable for 32 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32<const F: u8>(op: &[__m256i; 8], xq: *const i8) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: (whole body) forwarded.
    unsafe {
        match F {
            Q8_0 => {
                let mut s = _mm256_setzero_si256();
                for (o, &w) in op.iter().enumerate() {
                    let x = _mm256_sign_epi8(xb(xq, o), w);
                    let p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), x);
                    s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
                }
                s
            }
            Q5_0 | Q5_1 | Q5K => _mm256_add_epi32(
                _mm256_madd_epi16(dot16(op, xq, 0..4), ones),
                _mm256_madd_epi16(dot16(op, xq, 4..8), ones),
            ),
            _ => _mm256_madd_epi16(dot16(op, xq, 0..8), ones),
        }
    }
}

/// Rows `r..r+M` × group `g` over all of K: each half-group's weight operands are unpacked once
/// per chunk and used for the M rows.
///
/// # Safety
/// As [`Avx2::int8_tile`], with `r + M <= ctx.m` and `g < ceil(n/16)`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_rows<const F: u8, const M: usize>(ctx: &Ctx, r: usize, g: usize) {
    let nb = ctx.nb;
    let f = ctx.fmt;
    let (qb, sw, cb) = (f.quant_bytes(), f.scale_words(), f.chunk_bytes());
    let mut acc = [[_mm256_setzero_ps(); 2]; M];
    let sign = _mm256_set1_ps(-0.0);
    // SAFETY: (whole body) group g < ceil(n/16) and block b < nb index inside the packed
    // weight's quants (qb bytes per (group, block)) and scale records (sw words); rows r + i <
    // m and block b < nb index inside the validated activations (per-32: m·k bytes, m·nb
    // records; per-256 likewise) and y columns 16g + lane < n (stores are masked to n).
    unsafe {
        for b in 0..nb {
            let ub = ctx.u.add((g * nb + b) * qb);
            let sc = ctx.s.add((g * nb + b) * sw);
            let scb = sc as *const u8;
            for h in 0..2 {
                let dw = _mm256_cvtph_ps(_mm_loadu_si128(sc.add(8 * h) as *const __m128i));
                if !is_k(F) {
                    let op = unpack::<F>(ub, h);
                    let mw = if F == Q4_1 || F == Q5_1 {
                        _mm256_cvtph_ps(_mm_loadu_si128(
                            sc.add(INT8_GROUP + 8 * h) as *const __m128i
                        ))
                    } else {
                        _mm256_setzero_ps()
                    };
                    for (i, a) in acc.iter_mut().enumerate() {
                        let meta: BlockMeta = *ctx.meta.add((r + i) * nb + b);
                        let xq = ctx.q.add((r + i) * ctx.k + b * QK);
                        let init = match F {
                            Q4_0 => meta.n8,
                            Q5_0 => 2 * meta.n8,
                            _ => 0,
                        };
                        let isum = _mm256_add_epi32(dot32::<F>(&op, xq), _mm256_set1_epi32(init));
                        let s = _mm256_mul_ps(dw, _mm256_set1_ps(meta.d));
                        a[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, a[h]);
                        if F == Q4_1 || F == Q5_1 {
                            a[h] = _mm256_fmadd_ps(mw, _mm256_set1_ps(meta.s), a[h]);
                        }
                    }
                    continue;
                }
                let mut i1 = [_mm256_setzero_si256(); M];
                let mut i2 = [_mm256_setzero_si256(); M];
                for c in 0..QK_K / QK {
                    let op = unpack::<F>(ub.add(c * cb), h);
                    if F == Q6K {
                        // Sub-blocks 2c (operands 0..4) and 2c + 1 (4..8) of 16 values.
                        let ones = _mm256_set1_epi16(1);
                        let scs = [0, 1].map(|t| {
                            let at = scb.add(32 + 16 * (2 * c + t) + 8 * h);
                            _mm256_cvtepi8_epi32(_mm_loadl_epi64(at as *const __m128i))
                        });
                        for (i, iv) in i1.iter_mut().enumerate() {
                            let meta: &SuperMeta = &*ctx.kmeta.add((r + i) * nb + b);
                            let xq = ctx.qk.add((r + i) * ctx.k + b * QK_K + c * QK);
                            for (t, &s_t) in scs.iter().enumerate() {
                                let o = 4 * t;
                                let s = _mm256_add_epi32(
                                    _mm256_madd_epi16(dot16(&op, xq, o..o + 2), ones),
                                    _mm256_madd_epi16(dot16(&op, xq, o + 2..o + 4), ones),
                                );
                                let s = _mm256_add_epi32(s, _mm256_set1_epi32(meta.n32[2 * c + t]));
                                *iv = _mm256_add_epi32(*iv, _mm256_mullo_epi32(s_t, s));
                            }
                        }
                    } else {
                        // Sub-block c: its 6-bit scale in both i16 words of each lane, so the
                        // widening `vpmaddwd` multiplies by it.
                        let at = scb.add(64 + 16 * c + 8 * h);
                        let s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(at as *const __m128i));
                        let scp = _mm256_or_si256(s32, _mm256_slli_epi32::<16>(s32));
                        for (i, iv) in i1.iter_mut().enumerate() {
                            let xq = ctx.qk.add((r + i) * ctx.k + b * QK_K + c * QK);
                            let p = if F == Q5K {
                                _mm256_add_epi32(
                                    _mm256_madd_epi16(dot16(&op, xq, 0..4), scp),
                                    _mm256_madd_epi16(dot16(&op, xq, 4..8), scp),
                                )
                            } else {
                                _mm256_madd_epi16(dot16(&op, xq, 0..8), scp)
                            };
                            *iv = _mm256_add_epi32(*iv, p);
                        }
                    }
                }
                if F != Q6K {
                    // I2 = Σ_j m_j·Σq_x: minimums of sub-blocks 2p, 2p+1 sit in adjacent bytes
                    // (byte 192 + 32p + 2·lane + parity), so one `vpmaddwd` against the pair
                    // (bsums32[2p], bsums32[2p+1]) adds both.
                    for p in 0..4 {
                        let at = scb.add(192 + 32 * p + 16 * h);
                        let m16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(at as *const __m128i));
                        for (i, iv) in i2.iter_mut().enumerate() {
                            let meta: &SuperMeta = &*ctx.kmeta.add((r + i) * nb + b);
                            let pair = (meta.bsums32[2 * p] as u16 as u32)
                                | (meta.bsums32[2 * p + 1] as u16 as u32) << 16;
                            let bs = _mm256_set1_epi32(pair as i32);
                            *iv = _mm256_add_epi32(*iv, _mm256_madd_epi16(m16, bs));
                        }
                    }
                }
                let dmin = if F != Q6K {
                    _mm256_cvtph_ps(_mm_loadu_si128(sc.add(INT8_GROUP + 8 * h) as *const __m128i))
                } else {
                    _mm256_setzero_ps()
                };
                for (i, a) in acc.iter_mut().enumerate() {
                    let dx = _mm256_set1_ps((*ctx.kmeta.add((r + i) * nb + b)).d);
                    let s = _mm256_mul_ps(dw, dx);
                    a[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1[i]), s, a[h]);
                    if F != Q6K {
                        let neg = _mm256_xor_ps(_mm256_cvtepi32_ps(i2[i]), sign);
                        a[h] = _mm256_fmadd_ps(neg, _mm256_mul_ps(dmin, dx), a[h]);
                    }
                }
            }
        }
        let lanes = (ctx.n - g * INT8_GROUP).min(INT8_GROUP);
        for (i, a) in acc.iter().enumerate() {
            let yp = ctx.y.add((r + i) * ctx.ldy + g * INT8_GROUP);
            if lanes == INT8_GROUP {
                _mm256_storeu_ps(yp, a[0]);
                _mm256_storeu_ps(yp.add(8), a[1]);
            } else {
                let mut t = [0f32; INT8_GROUP];
                _mm256_storeu_ps(t.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(t.as_mut_ptr().add(8), a[1]);
                core::ptr::copy_nonoverlapping(t.as_ptr(), yp, lanes);
            }
        }
    }
}
