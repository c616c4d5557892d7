//! NEON GEMV on the packed quantized format (included from `quant.rs`; reached through the
//! [`crate::arch::aarch64::Neon`] token).
//!
//! A 16-row group is four `float32x4_t` of 4 rows. Per block and x row: Q4 quant vector j (64
//! bytes = four `uint32x4_t`, lane = row, 8 nibbles) gives value 8j+p by `vshrq` + `vandq` +
//! `vcvtq_f32_u32`, then `vfmaq_n_f32` with x[k]; 4 chains (one per j) summed
//! `(c0 + c1) + (c2 + c3)`; Q4_0 subtracts `8·Σx`; one FMA with the 16 scales (FP16 widened by
//! integer ops, no FP16 arithmetic needed); Q4_1 adds `m·Σx`. Q8: `vmovl` to i32 + convert.
//! One x row at a time (the group's quants are re-read from cache for the next row), so a row's
//! result is the same operation sequence whatever M: bit-identical (batch invariance).

use core::arch::aarch64::*;

use super::{packed_groups_portable, PCtx, QFmt, QK, QPACK_ROWS};

/// Groups `g0..g1` against every x row.
///
/// # Safety
/// `ctx` validated; `g0 < g1 <= ceil(n/16)`; exclusive access to the y columns of those
/// groups; the CPU has NEON (the caller holds the `Neon` token).
pub(super) unsafe fn packed_groups(ctx: &PCtx, g0: usize, g1: usize) {
    if !matches!(ctx.fmt, QFmt::Q4_0 | QFmt::Q4_1 | QFmt::Q8_0) {
        // No NEON kernel for the 5/6-bit and K-quant layouts: the portable one serves aarch64.
        // SAFETY: forwarded.
        unsafe { packed_groups_portable(ctx, g0, g1) };
        return;
    }
    for grp in g0..g1 {
        for i in 0..ctx.m {
            // SAFETY: forwarded; x row i < m.
            unsafe {
                match ctx.fmt {
                    QFmt::Q4_0 => row::<0>(ctx, grp, i),
                    QFmt::Q4_1 => row::<1>(ctx, grp, i),
                    _ => row::<2>(ctx, grp, i),
                }
            }
        }
    }
}

/// Four FP16 values (bits) to FP32, exactly (normals, subnormals, zeros, inf, NaN), by integer
/// ops: magnitude shifted into an FP32 and scaled by 2^112; inf/NaN get the FP32 exponent.
#[inline]
#[target_feature(enable = "neon")]
fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let hx = vmovl_u16(h);
    let sign = vshlq_n_u32::<16>(vandq_u32(hx, vdupq_n_u32(0x8000)));
    let mag = vandq_u32(hx, vdupq_n_u32(0x7fff));
    let shifted = vshlq_n_u32::<13>(mag);
    let scaled = vreinterpretq_u32_f32(vmulq_f32(
        vreinterpretq_f32_u32(shifted),
        vdupq_n_f32(f32::from_bits(0x7780_0000)), // 2^112
    ));
    let special = vcgeq_u32(mag, vdupq_n_u32(0x7c00));
    let infnan = vorrq_u32(shifted, vdupq_n_u32(0x7f80_0000));
    vreinterpretq_f32_u32(vorrq_u32(sign, vbslq_u32(special, infnan, scaled)))
}

/// x row `i` × group `grp`; `T`: 0 = Q4_0, 1 = Q4_1, 2 = Q8_0.
///
/// # Safety
/// As [`packed_groups`], with `i < ctx.m`.
#[target_feature(enable = "neon")]
unsafe fn row<const T: u8>(ctx: &PCtx, grp: usize, i: usize) {
    let nb = ctx.k / QK;
    let (db, sb) = (ctx.fmt.data_bytes(), ctx.fmt.scale_bytes());
    let mut acc = [vdupq_n_f32(0.0); 4];
    // SAFETY: (whole body) x row i < m, values 32b..32b+32 with b < nb: inside x. Group data and
    // scale regions of grp < ceil(n/16) lie inside the validated buffer (block b's quants are
    // db bytes at data + b·db, its scales sb bytes at scales + b·sb). y lanes are stored only
    // for the group's real rows, inside the validated y, in columns the caller owns.
    unsafe {
        let data = ctx.data(grp);
        let scales = ctx.scales(grp);
        let x = ctx.x.add(i * ctx.k);
        for b in 0..nb {
            let dq = data.add(b * db);
            let xb = x.add(b * QK);
            let mut part = [[vdupq_n_f32(0.0); 4]; 4];
            if T == 2 {
                for e in 0..QK {
                    let q = vld1q_s8(dq.add(16 * e) as *const i8);
                    let lo = vmovl_s8(vget_low_s8(q));
                    let hi = vmovl_s8(vget_high_s8(q));
                    let w = [
                        vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))),
                        vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))),
                        vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))),
                        vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))),
                    ];
                    let xv = *xb.add(e);
                    for (pq, wq) in part[e % 4].iter_mut().zip(w) {
                        *pq = vfmaq_n_f32(*pq, wq, xv);
                    }
                }
            } else {
                let mask = vdupq_n_u32(0xF);
                for (c, pc) in part.iter_mut().enumerate() {
                    let v = [
                        vld1q_u32(dq.add(64 * c) as *const u32),
                        vld1q_u32(dq.add(64 * c + 16) as *const u32),
                        vld1q_u32(dq.add(64 * c + 32) as *const u32),
                        vld1q_u32(dq.add(64 * c + 48) as *const u32),
                    ];
                    for p in 0..8 {
                        let xv = *xb.add(8 * c + p);
                        for (pq, &vq) in pc.iter_mut().zip(&v) {
                            let nib = match p {
                                0 => vq,
                                1 => vshrq_n_u32::<4>(vq),
                                2 => vshrq_n_u32::<8>(vq),
                                3 => vshrq_n_u32::<12>(vq),
                                4 => vshrq_n_u32::<16>(vq),
                                5 => vshrq_n_u32::<20>(vq),
                                6 => vshrq_n_u32::<24>(vq),
                                _ => vshrq_n_u32::<28>(vq),
                            };
                            let w = vcvtq_f32_u32(vandq_u32(nib, mask));
                            *pq = vfmaq_n_f32(*pq, w, xv);
                        }
                    }
                }
            }
            let sx = if T != 2 {
                let mut s = vdupq_n_f32(0.0);
                for t in 0..8 {
                    s = vaddq_f32(s, vld1q_f32(xb.add(4 * t)));
                }
                vaddvq_f32(s)
            } else {
                0.0
            };
            let sp = scales.add(b * sb) as *const u16;
            for (q, a) in acc.iter_mut().enumerate() {
                let mut s = vaddq_f32(
                    vaddq_f32(part[0][q], part[1][q]),
                    vaddq_f32(part[2][q], part[3][q]),
                );
                if T == 0 {
                    s = vfmaq_n_f32(s, vdupq_n_f32(-8.0), sx);
                }
                let d = f16x4_to_f32(vld1_u16(sp.add(4 * q)));
                *a = vfmaq_f32(*a, s, d);
                if T == 1 {
                    let m = f16x4_to_f32(vld1_u16(sp.add(16 + 4 * q)));
                    *a = vfmaq_n_f32(*a, m, sx);
                }
            }
        }
        let rows = (ctx.n - grp * QPACK_ROWS).min(QPACK_ROWS);
        let mut out = [0f32; QPACK_ROWS];
        for (q, a) in acc.iter().enumerate() {
            vst1q_f32(out.as_mut_ptr().add(4 * q), *a);
        }
        let y = ctx.y.add(i * ctx.ldy + grp * QPACK_ROWS);
        for (r, &v) in out[..rows].iter().enumerate() {
            *y.add(r) = v;
        }
    }
}
