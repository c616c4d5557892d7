//! Packed Q4_0 / Q4_1 GEMV with the dequantize + multiply-add in FP16 arithmetic (AVX512-FP16:
//! 32 lanes per zmm), on the packed format the FP32 kernel reads (`QPackedRef`, see
//! `src/quant.rs`: per 64-byte vector, dword lane `r` = row `r`'s values `8j..8j+8`).
//!
//! Seen as 32 words, a vector holds per row two words: word `2r` = values `8j..8j+4`, word
//! `2r+1` = values `8j+4..8j+8`, one nibble each. For nibble position `p` (0..4) one `vpermw`
//! against a 32-entry table (`t[i] = q(i mod 16)` as FP16: `q - 8` for Q4_0, `q` for Q4_1)
//! turns the word's low 5 bits into the weight: positions 0 and 2 straight from a load at byte
//! offset 0 and 1 (the offset load moves each word's high byte down), positions 1 and 3 after a
//! `vpsrlw` by 4 — so lane `2r` holds row `r`'s value `8j+p` and lane `2r+1` its value `8j+4+p`.
//! The activations are prepared per block as 16 FP16 pairs `(x̃[8j+p], x̃[8j+4+p])`, one dword
//! each, so one `vpbroadcastd` feeds the matching FMA: per block and x row 16 `vfmadd231ph`
//! (4 chains of 4, one per vector), 3 `vaddph`; then the even and odd lanes of the FP16 sum
//! (the row's two halves) are widened to FP32 and added, and the FP32 epilogue applies the
//! block scale: `acc = fma(S, d·2^e, acc)` (Q4_1: `+ fma(m, Σx, acc)`), as the FP32 kernel.
//!
//! FP16 range and precision: each x block is scaled by a power of two `2^-e` (`e` = the
//! exponent of its largest |x|, clamped to -100..=126) so `|x̃| < 2` and every FP16 partial sum
//! stays below 32 · 15 · 2 = 960 (FP16's largest finite value is 65504); `2^e` returns in the
//! FP32 epilogue, exactly. Per block the error against the exact `Σ w·x` is at most
//! `2^-8 · |d| · Σ|q·x| + 2^-15 · |d| · max|x|` (FP16 rounding of x̃, 4 FMA roundings and 2
//! addition roundings along the longest path: 7 roundings of 2^-11, under 8; plus FP16 underflow,
//! at most 2^-25 per rounding, relative to `2^e ≤ 2 max|x|`), then the FP32 accumulation as in
//! the FP32 kernel. Q8_0 is not covered (its byte layout would need a different pairing).
//!
//! The FP16 operations go through [`hfma`]/[`hmul`]/[`hadd`]: native instructions (inline
//! `asm!`, since Rust's FP16 intrinsics are unstable) or, for CPUs without AVX512-FP16 (the
//! tests on this project's dev machine), an emulation that computes each in FP32 and rounds to
//! FP16 — the same program and the same bound (the FP32 step adds 2^-24 relative, well inside
//! the margin), not the same bits.

use core::arch::asm;
use core::arch::x86_64::*;

use super::amx::cpuid7_edx;
use crate::quant::{PCtx, QType, GEMV_TILE_ROWS, QK, QPACK_ROWS};

/// CPUID leaf 7 EDX bit 23: AVX512-FP16.
const AVX512_FP16_BIT: u32 = 1 << 23;

/// Capability token for the FP16-arithmetic packed Q4 GEMV: native (the CPU has AVX512-FP16,
/// plus AVX-512F/BW and F16C) or emulated (AVX-512F/BW and F16C only; for testing the program on
/// CPUs without AVX512-FP16, several times slower than the FP32 kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avx512Fp16 {
    native: bool,
}

fn base_features() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("f16c")
}

impl Avx512Fp16 {
    /// `Some` when CPUID reports AVX512-FP16 and the OS enabled the AVX-512 state (with
    /// AVX-512F/BW and F16C): FP16 arithmetic in hardware.
    pub fn try_new() -> Option<Self> {
        (base_features() && cpuid7_edx() & AVX512_FP16_BIT != 0).then_some(Self { native: true })
    }

    /// `Some` on any CPU with AVX-512F/BW and F16C: the same program with every FP16 operation
    /// emulated (FP32 operation, then rounding to FP16).
    pub fn emulated() -> Option<Self> {
        base_features().then_some(Self { native: false })
    }

    /// # Safety
    /// The CPU must support AVX512-FP16, AVX-512F/BW and F16C, with AVX-512 state enabled.
    pub unsafe fn new_unchecked() -> Self {
        Self { native: true }
    }

    /// Whether the FP16 operations run in hardware (false: emulated).
    pub fn is_native(self) -> bool {
        self.native
    }

    /// The implementation's name.
    pub fn name(self) -> &'static str {
        if self.native {
            "avx512-fp16"
        } else {
            "avx512-fp16-emulated"
        }
    }

    /// Groups `g0..g1` (at most 4) against every x row.
    ///
    /// # Safety
    /// `ctx` validated, Q4_0 or Q4_1; `g0 < g1 <= ceil(n/16)`, `g1 - g0 <= 4`; exclusive access
    /// to the y columns of those groups.
    pub(crate) unsafe fn packed_groups(self, ctx: &PCtx, g0: usize, g1: usize) {
        // SAFETY: forwarded; the token proves the features each variant uses.
        unsafe {
            if self.native {
                groups::<true>(ctx, g0, g1)
            } else {
                groups::<false>(ctx, g0, g1)
            }
        }
    }
}

/// Blocks of x prepared per chunk (16 dwords each: 4 KiB per x row and chunk).
const CB: usize = 64;
/// Most groups per call (a tile is 64 rows).
const TG: usize = GEMV_TILE_ROWS / QPACK_ROWS;
/// Software prefetch distances along a group's quant stream (as the FP32 kernel).
const PF: usize = 1024;
const PF2: usize = 4096;

/// # Safety
/// As [`Avx512Fp16::packed_groups`]; `NATIVE` needs AVX512-FP16.
unsafe fn groups<const NATIVE: bool>(ctx: &PCtx, g0: usize, g1: usize) {
    let mut m0 = 0;
    while m0 < ctx.m {
        let g = (ctx.m - m0).min(4);
        // SAFETY: forwarded; x rows m0..m0+g <= m.
        unsafe {
            match (ctx.ty == QType::Q4_1, g) {
                (false, 1) => run::<NATIVE, 1, 0>(ctx, m0, g0, g1),
                (false, 2) => run::<NATIVE, 2, 0>(ctx, m0, g0, g1),
                (false, 3) => run::<NATIVE, 3, 0>(ctx, m0, g0, g1),
                (false, _) => run::<NATIVE, 4, 0>(ctx, m0, g0, g1),
                (true, 1) => run::<NATIVE, 1, 1>(ctx, m0, g0, g1),
                (true, 2) => run::<NATIVE, 2, 1>(ctx, m0, g0, g1),
                (true, 3) => run::<NATIVE, 3, 1>(ctx, m0, g0, g1),
                (true, _) => run::<NATIVE, 4, 1>(ctx, m0, g0, g1),
            }
        }
        m0 += g;
    }
}

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// Rounds 16 FP32 lanes to FP16 (nearest even).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
fn to_h(v: __m512) -> __m256i {
    _mm512_cvtps_ph::<RNE>(v)
}

/// FP16 lanes 0..16 (`HI` = false) or 16..32 of `v` widened to FP32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
fn widen<const HI: bool>(v: __m512i) -> __m512 {
    _mm512_cvtph_ps(if HI {
        _mm512_extracti64x4_epi64::<1>(v)
    } else {
        _mm512_castsi512_si256(v)
    })
}

/// One half of the emulation: FP32 `OP` (0 fma `a·b + c`, 1 mul, 2 add) rounded to FP16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
fn emulate_half<const OP: u8, const HI: bool>(a: __m512i, b: __m512i, c: __m512i) -> __m256i {
    let (x, y) = (widen::<HI>(a), widen::<HI>(b));
    to_h(match OP {
        0 => _mm512_fmadd_ps(x, y, widen::<HI>(c)),
        1 => _mm512_mul_ps(x, y),
        _ => _mm512_add_ps(x, y),
    })
}

/// FP32 `OP` on the two 16-lane halves of FP16 vectors, rounded back to FP16 (the emulation).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
fn emulate<const OP: u8>(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    let lo = emulate_half::<OP, false>(a, b, c);
    let hi = emulate_half::<OP, true>(a, b, c);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// `c + a·b` on 32 FP16 lanes, one rounding (emulated: two).
///
/// # Safety
/// `NATIVE` needs AVX512-FP16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn hfma<const NATIVE: bool>(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    if NATIVE {
        let mut c = c;
        // SAFETY: register-only; the caller guarantees AVX512-FP16.
        unsafe {
            asm!(
                "vfmadd231ph {c}, {a}, {b}",
                c = inout(zmm_reg) c,
                a = in(zmm_reg) a,
                b = in(zmm_reg) b,
                options(pure, nomem, nostack),
            );
        }
        c
    } else {
        emulate::<0>(a, b, c)
    }
}

/// `a·b` on 32 FP16 lanes.
///
/// # Safety
/// As [`hfma`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn hmul<const NATIVE: bool>(a: __m512i, b: __m512i) -> __m512i {
    if NATIVE {
        let d: __m512i;
        // SAFETY: register-only; the caller guarantees AVX512-FP16.
        unsafe {
            asm!(
                "vmulph {d}, {a}, {b}",
                d = lateout(zmm_reg) d,
                a = in(zmm_reg) a,
                b = in(zmm_reg) b,
                options(pure, nomem, nostack),
            );
        }
        d
    } else {
        emulate::<1>(a, b, a)
    }
}

/// `a + b` on 32 FP16 lanes.
///
/// # Safety
/// As [`hfma`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn hadd<const NATIVE: bool>(a: __m512i, b: __m512i) -> __m512i {
    if NATIVE {
        let d: __m512i;
        // SAFETY: register-only; the caller guarantees AVX512-FP16.
        unsafe {
            asm!(
                "vaddph {d}, {a}, {b}",
                d = lateout(zmm_reg) d,
                a = in(zmm_reg) a,
                b = in(zmm_reg) b,
                options(pure, nomem, nostack),
            );
        }
        d
    } else {
        emulate::<2>(a, b, a)
    }
}

/// `2^-e` and `2^e` for a block whose largest |x| is `amax` (`e` its exponent, clamped to
/// -100..=126; 0 for an all-zero block), both exact powers of two in FP32.
fn block_scale(amax: f32) -> (f32, f32) {
    let e = if amax > 0.0 && amax.is_finite() {
        ((amax.to_bits() >> 23) as i32 - 127).clamp(-100, 126)
    } else {
        0
    };
    let pow2 = |e: i32| f32::from_bits(((127 + e) as u32) << 23);
    (pow2(-e), pow2(e))
}

/// FP16 table for `vpermw`: entry `i` = `q(i mod 16)` (`q - 8` for Q4_0, `q` for Q4_1).
fn table(q4_0: bool) -> [u16; 32] {
    core::array::from_fn(|i| {
        let q = (i % 16) as f32 - if q4_0 { 8.0 } else { 0.0 };
        half::f16::from_f32(q).to_bits()
    })
}

/// x rows `m0..m0+G` × groups `g0..g1`; `T`: 0 = Q4_0, 1 = Q4_1.
///
/// # Safety
/// As [`groups`], with `m0 + G <= ctx.m`.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
unsafe fn run<const NATIVE: bool, const G: usize, const T: u8>(
    ctx: &PCtx,
    m0: usize,
    g0: usize,
    g1: usize,
) {
    let nb = ctx.k / QK;
    let (db, sb) = (ctx.ty.data_bytes(), ctx.ty.scale_bytes());
    let mut acc = [[_mm512_setzero_ps(); G]; TG];
    // Per x row and block of the chunk: 16 FP16 pairs, 2^e, Σx.
    let mut xp = [[0u32; CB * 16]; G];
    let mut esc = [[0f32; CB]; G];
    let mut sx = [[0f32; CB]; G];
    let tab = table(T == 0);
    // Pair order within a 16-float half block: (0,4) (1,5) (2,6) (3,7) (8,12) ... (11,15).
    let pairs = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    // SAFETY: (whole body) x row m0+g < m, values of block b < nb: inside x. Group data and
    // scale regions of groups < ceil(n/16) lie inside the validated buffer; the load at byte
    // offset 1 of a data vector reads one byte past it: into the next vector, the next block
    // or, for the last block, the scale region that follows (at least 64 bytes). y lanes are
    // stored masked to the group's rows, inside the validated y, in columns the caller owns.
    unsafe {
        let tab = _mm512_loadu_si512(tab.as_ptr().cast());
        let mut b0 = 0;
        while b0 < nb {
            let cnt = (nb - b0).min(CB);
            for g in 0..G {
                for j in 0..cnt {
                    let xr = ctx.x.add((m0 + g) * ctx.k + (b0 + j) * QK);
                    let (xa, xb) = (_mm512_loadu_ps(xr), _mm512_loadu_ps(xr.add(16)));
                    let amax =
                        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(xa), _mm512_abs_ps(xb)));
                    let (down, up) = block_scale(amax);
                    esc[g][j] = up;
                    sx[g][j] = _mm512_reduce_add_ps(_mm512_add_ps(xa, xb));
                    let s = _mm512_set1_ps(down);
                    let lo = to_h(_mm512_mul_ps(_mm512_permutexvar_ps(pairs, xa), s));
                    let hi = to_h(_mm512_mul_ps(_mm512_permutexvar_ps(pairs, xb), s));
                    let o = xp[g].as_mut_ptr().add(16 * j);
                    _mm256_storeu_si256(o.cast(), lo);
                    _mm256_storeu_si256(o.add(8).cast(), hi);
                }
            }
            for (gi, ag) in acc[..g1 - g0].iter_mut().enumerate() {
                let grp = g0 + gi;
                let data = ctx.data(grp);
                let scales = ctx.scales(grp);
                for j in 0..cnt {
                    let b = b0 + j;
                    let dq = data.add(b * db);
                    // w[v][p]: lane 2r = row r's value 8v+p, lane 2r+1 its value 8v+4+p.
                    let mut w = [[_mm512_setzero_si512(); 4]; 4];
                    for (v, wv) in w.iter_mut().enumerate() {
                        _mm_prefetch::<_MM_HINT_T0>(dq.wrapping_add(64 * v + PF).cast());
                        _mm_prefetch::<_MM_HINT_T1>(dq.wrapping_add(64 * v + PF2).cast());
                        let raw = _mm512_loadu_si512(dq.add(64 * v).cast());
                        let up1 = _mm512_loadu_si512(dq.add(64 * v + 1).cast());
                        wv[0] = _mm512_permutexvar_epi16(raw, tab);
                        wv[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16::<4>(raw), tab);
                        wv[2] = _mm512_permutexvar_epi16(up1, tab);
                        wv[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16::<4>(up1), tab);
                    }
                    let sp = scales.add(b * sb);
                    let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast()));
                    for (g, a) in ag.iter_mut().enumerate() {
                        let xq = xp[g].as_ptr().add(16 * j);
                        let mut c = [_mm512_setzero_si512(); 4];
                        for (v, cv) in c.iter_mut().enumerate() {
                            // The pair for nibble position p of vector v: dword 4v + p.
                            let x0 = _mm512_set1_epi32(*xq.add(4 * v) as i32);
                            *cv = hmul::<NATIVE>(w[v][0], x0);
                            for (p, &wp) in w[v].iter().enumerate().skip(1) {
                                let xv = _mm512_set1_epi32(*xq.add(4 * v + p) as i32);
                                *cv = hfma::<NATIVE>(wp, xv, *cv);
                            }
                        }
                        let s =
                            hadd::<NATIVE>(hadd::<NATIVE>(c[0], c[1]), hadd::<NATIVE>(c[2], c[3]));
                        // The row's two halves: even lanes (low words) and odd lanes.
                        let even = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(s));
                        let odd =
                            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(s)));
                        let t = _mm512_add_ps(even, odd);
                        let sc = _mm512_mul_ps(d, _mm512_set1_ps(esc[g][j]));
                        *a = _mm512_fmadd_ps(t, sc, *a);
                        if T == 1 {
                            let mv = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32).cast()));
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
                _mm512_mask_storeu_ps(ctx.y.add((m0 + g) * ctx.ldy + grp * QPACK_ROWS), mask, *a);
            }
        }
    }
}
