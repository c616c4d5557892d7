//! Quantizers: one f32 row → GGUF blocks of any type [`crate::dequantize_row`] reads.
//!
//! Our own, after the ideas of llama.cpp's reference quantizers (read, not copied): each block
//! (or K-quant sub-block) searches a handful of candidate scales around the min/max one and keeps
//! the least-squares best ([`fit_symmetric`], [`fit_affine`]); K-quants then quantize the
//! sub-block scales (and minimums) themselves to 4/6/8 bits against one FP16 super-scale, and the
//! quants are recomputed against the scales exactly as stored, so what [`crate::dequantize_row`]
//! returns is the closest value on the stored grid. Not bit-identical to llama.cpp's output; the
//! round-trip error is bounded and tested (`tests/quantize.rs`). A load-time / offline step:
//! correct and decent, not fast.

use crate::blocks::{
    pack_scale_min_k4, pack_scales_q3k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0,
    BlockQ5_1, BlockQ6K, QK_K,
};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock, QK};
use crate::{Error, GgmlType};

#[path = "quantize_lanes.rs"]
mod lanes;

/// Blocks (of the 32-value types) whose scale searches run interleaved, one per lane
/// ([`lanes`]); a row's last blocks short of a group take the scalar search, which gives the
/// same bytes.
const LANES: usize = 8;

/// Round half away from zero (`f32::round` without target features is a libm call, and this
/// runs on every candidate of every block). Saturates outside the i32 range.
#[inline]
fn nearest(v: f32) -> i32 {
    (v + 0.5f32.copysign(v)) as i32
}

/// The largest finite FP16.
const FP16_MAX: f32 = 65504.0;

fn f16r(x: f32) -> (u16, f32) {
    let h = half::f16::from_f32(x);
    (h.to_bits(), h.to_f32())
}

/// `x` rounded to FP16 with the magnitude rounded up (never down), so a super-scale chosen to
/// map the largest value to the end of the grid does not clip it; matters where FP16 is coarse
/// (subnormal scales of tiny blocks).
fn f16_up(x: f32) -> (u16, f32) {
    let (mut b, mut r) = f16r(x);
    if r.abs() < x.abs() && r.is_finite() {
        // The next FP16 of larger magnitude: the bit pattern's magnitude plus one.
        b += 1;
        r = half::f16::from_bits(b).to_f32();
    }
    (b, r)
}

/// Copies a block's bytes into `dst` (exactly `B::BYTES` long).
fn put<B: QuantBlock>(b: &B, dst: &mut [u8]) {
    // SAFETY: the block types are repr(C) structs of u8/i8/u16 fields without padding (sizes
    // asserted where they are defined), so their `size_of` bytes are initialized; `dst` holds
    // exactly `B::BYTES == size_of::<B>()` bytes (the callers cut it with chunks_exact).
    let bytes = unsafe {
        core::slice::from_raw_parts((b as *const B).cast::<u8>(), core::mem::size_of::<B>())
    };
    dst.copy_from_slice(bytes);
}

/// Whether [`quantize_row`] writes this type: every type [`crate::dequantize_row`] reads.
pub fn can_quantize(ty: GgmlType) -> bool {
    ty.can_dequantize()
}

/// Quantizes one row `src` (its length a multiple of the type's block) into `dst`, exactly
/// [`GgmlType::row_bytes`]`(src.len())` bytes of GGUF blocks of type `ty` (F32/F16/BF16 are
/// plain conversions, round to nearest even). No scratch: everything per block lives on the
/// stack.
///
/// Errors (nothing written): [`Error::UnsupportedFormat`] for types it cannot write,
/// [`Error::ShapeMismatch`] when the row is not whole blocks or `dst` is not the row's size,
/// [`Error::NonFinite`] when `src` holds a NaN or an infinity, [`Error::ValueOutOfRange`] when
/// a value exceeds FP16's ±65504 (every type but F32 and BF16: the block scales are FP16).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), Error> {
    if !can_quantize(ty) {
        return Err(Error::UnsupportedFormat { format: ty });
    }
    let need = ty.row_bytes(src.len()).ok_or(Error::ShapeMismatch {
        what: "row length modulo the type's block",
        expected: 0,
        got: src.len() % ty.block().map_or(1, |b| b.0),
    })?;
    if dst.len() != need {
        return Err(Error::ShapeMismatch {
            what: "row bytes",
            expected: need,
            got: dst.len(),
        });
    }
    if let Some(index) = src.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFinite { what: "row", index });
    }
    // Block formats store FP16 scales (and minimums): values beyond FP16's range could need a
    // scale FP16 cannot hold. F16 itself saturates the same way; F32 and BF16 hold any finite.
    if !matches!(ty, GgmlType::F32 | GgmlType::BF16) {
        if let Some(index) = src.iter().position(|v| v.abs() > FP16_MAX) {
            return Err(Error::ValueOutOfRange { what: "row", index });
        }
    }
    match ty {
        GgmlType::F32 => {
            for (d, v) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (d, v) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::bf16::from_f32(*v).to_bits().to_le_bytes());
            }
        }
        GgmlType::Q4_0 => grouped::<BlockQ4_0>(src, dst, q4_0, q4_0_lanes),
        GgmlType::Q4_1 => grouped::<BlockQ4_1>(src, dst, q4_1, q4_1_lanes),
        GgmlType::Q5_0 => grouped::<BlockQ5_0>(src, dst, q5_0, q5_0_lanes),
        GgmlType::Q5_1 => grouped::<BlockQ5_1>(src, dst, q5_1, q5_1_lanes),
        GgmlType::Q8_0 => each::<BlockQ8_0>(src, dst, q8_0),
        GgmlType::Q2K => each::<BlockQ2K>(src, dst, q2_k),
        GgmlType::Q3K => each::<BlockQ3K>(src, dst, q3_k),
        GgmlType::Q4K => each::<BlockQ4K>(src, dst, q4_k),
        GgmlType::Q5K => each::<BlockQ5K>(src, dst, q5_k),
        GgmlType::Q6K => each::<BlockQ6K>(src, dst, q6_k),
        // `can_quantize` admitted only the types above.
        _ => return Err(Error::UnsupportedFormat { format: ty }),
    }
    Ok(())
}

fn each<B: QuantBlock>(src: &[f32], dst: &mut [u8], f: fn(&[f32]) -> B) {
    for (x, d) in src
        .chunks_exact(B::ELEMS)
        .zip(dst.chunks_exact_mut(B::BYTES))
    {
        put(&f(x), d);
    }
}

/// As [`each`], [`LANES`] blocks at a time through `group` (the same bytes as `one`), the
/// rest through `one`.
fn grouped<B: QuantBlock>(
    src: &[f32],
    dst: &mut [u8],
    one: fn(&[f32]) -> B,
    group: fn(&[f32]) -> [B; LANES],
) {
    let whole = src.len() / (B::ELEMS * LANES);
    let (src_g, src_r) = src.split_at(whole * B::ELEMS * LANES);
    let (dst_g, dst_r) = dst.split_at_mut(whole * B::BYTES * LANES);
    for (x, d) in src_g
        .chunks_exact(B::ELEMS * LANES)
        .zip(dst_g.chunks_exact_mut(B::BYTES * LANES))
    {
        for (b, db) in group(x).iter().zip(d.chunks_exact_mut(B::BYTES)) {
            put(b, db);
        }
    }
    each(src_r, dst_r, one);
}

// ---------------------------------------------------------------------------------------------
// Scale searches.

/// Signed quants `L` in `lo..=hi` (`lo = -hi - 1`) and a scale `s` so that `x ≈ s·L`: the
/// value of largest magnitude first maps to `lo` (the side with one more level), then 19
/// candidate scales around it are tried, each with its least-squares scale for its quants
/// under the weights `w`; the least weighted error wins. Returns the scale (0 for an all-zero
/// block).
fn fit_symmetric(x: &[f32], w: &[f32], lo: i32, hi: i32) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return 0.0;
    }
    let mut best = (f32::INFINITY, 0f32);
    for t in -9..=9 {
        let iscale = (lo as f32 - 0.1 * t as f32) / max;
        let (mut sxl, mut sll) = (0f32, 0f32);
        for (&v, &wi) in x.iter().zip(w) {
            let l = nearest(iscale * v).clamp(lo, hi) as f32;
            sxl += wi * v * l;
            sll += wi * l * l;
        }
        if sll <= 0.0 {
            continue;
        }
        let (s, is) = (sxl / sll, sll / sxl);
        let err = weighted_err(x, w, |v| nearest(v * is).clamp(lo, hi) as f32 * s);
        if err < best.0 {
            best = (err, s);
        }
    }
    best.1
}

fn weighted_err(x: &[f32], w: &[f32], approx: impl Fn(f32) -> f32) -> f32 {
    x.iter()
        .zip(w)
        .map(|(&v, &wi)| {
            let e = v - approx(v);
            wi * e * e
        })
        .sum()
}

/// Unsigned quants `L` in `0..=nmax` with `x ≈ s·L + m` (s ≥ 0): starting from the min/max
/// grid, 21 candidate steps `(nmax + t/10 − 1) / (max − min)`, each refit by weighted least
/// squares for (s, m); the least weighted error wins. `nonpositive_min` keeps `m ≤ 0` (K-quants
/// store `−m` as an unsigned 6-bit number).
fn fit_affine(x: &[f32], w: &[f32], nmax: i32, nonpositive_min: bool) -> (f32, f32) {
    let mut min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if nonpositive_min && min > 0.0 {
        min = 0.0;
    }
    if max <= min {
        return (0.0, min);
    }
    let quant = |v: f32, is: f32, m: f32| -> f32 { nearest((v - m) * is).clamp(0, nmax) as f32 };
    let s0 = (max - min) / nmax as f32;
    let mut best = (
        weighted_err(x, w, |v| quant(v, 1.0 / s0, min) * s0 + min),
        s0,
        min,
    );
    for t in 0..=20 {
        let iscale = (nmax as f32 - 1.0 + 0.1 * t as f32) / (max - min);
        let (mut sw, mut sl, mut sll, mut sx, mut sxl) = (0f32, 0f32, 0f32, 0f32, 0f32);
        for (&v, &wi) in x.iter().zip(w) {
            let l = nearest(iscale * (v - min)).clamp(0, nmax) as f32;
            sw += wi;
            sl += wi * l;
            sll += wi * l * l;
            sx += wi * v;
            sxl += wi * v * l;
        }
        let det = sw * sll - sl * sl;
        if det <= 0.0 {
            continue;
        }
        let mut s = (sw * sxl - sx * sl) / det;
        let mut m = (sll * sx - sl * sxl) / det;
        if nonpositive_min && m > 0.0 {
            m = 0.0;
            s = sxl / sll;
        }
        if s <= 0.0 {
            continue;
        }
        let is = 1.0 / s;
        let err = weighted_err(x, w, |v| quant(v, is, m) * s + m);
        if err < best.0 {
            best = (err, s, m);
        }
    }
    (best.1, best.2)
}

/// The scalar reference of the search `affine_super` runs interleaved
/// (`lanes::fit_scale_given_min`, tested bit for bit against this).
///
/// The scale `s ≥ 0` of `x ≈ s·L − m` (L in `0..=nmax`) once the minimum `m` is fixed (already
/// on its stored grid): least squares over 19 candidate grids. Returns 0 when nothing is above
/// `−m`.
#[cfg(test)]
fn fit_scale_given_min(x: &[f32], w: &[f32], nmax: i32, m: f32) -> f32 {
    let ymax = x.iter().fold(0f32, |a, &v| a.max(v + m));
    if ymax <= 0.0 {
        return 0.0;
    }
    let mut best = (f32::INFINITY, 0f32);
    for t in -9..=9 {
        let iscale = (nmax as f32 + 0.1 * t as f32) / ymax;
        let (mut syl, mut sll) = (0f32, 0f32);
        for (&v, &wi) in x.iter().zip(w) {
            let l = nearest(iscale * (v + m)).clamp(0, nmax) as f32;
            syl += wi * (v + m) * l;
            sll += wi * l * l;
        }
        if sll <= 0.0 || syl <= 0.0 {
            continue;
        }
        let (s, is) = (syl / sll, sll / syl);
        let err = weighted_err(x, w, |v| {
            nearest((v + m) * is).clamp(0, nmax) as f32 * s - m
        });
        if err < best.0 {
            best = (err, s);
        }
    }
    best.1
}

/// Affine K-quant super-blocks (Q2_K, Q4_K, Q5_K): each sub-block of `SUB` values fitted as
/// `x ≈ s·L − m` (s, m ≥ 0); the minimums quantized to `0..=smax` against FP16 `dmin`; each
/// scale refitted against its stored minimum, then quantized against FP16 `d`; the quants
/// recomputed against the stored grid. Returns `(d, dmin, scales, minimums, quants)`.
#[allow(clippy::type_complexity)]
fn affine_super<const SUB: usize, const NS: usize>(
    x: &[f32],
    nmax: i32,
    smax: i32,
    weights: fn(&[f32]) -> [f32; SUB],
) -> (u16, u16, [u8; NS], [u8; NS], [u8; QK_K]) {
    let w: [[f32; SUB]; NS] = core::array::from_fn(|j| weights(&x[SUB * j..SUB * j + SUB]));
    // The searches run on the sub-blocks interleaved (bit for bit `fit_affine` and
    // `fit_scale_given_min` on each).
    let xt = lanes::transpose::<SUB, NS>(x);
    let wt: [[f32; NS]; SUB] = core::array::from_fn(|i| core::array::from_fn(|j| w[j][i]));
    let fitted_min = lanes::fit_affine(&xt, &wt, nmax, true).1;
    let mn: [f32; NS] = core::array::from_fn(|j| -fitted_min[j]);
    let (dmin, mr, mut m) = quantize_scales(&mn, smax);
    // Minimums round up (the grid then still reaches the sub-block's lowest value; the scale
    // refit below absorbs the shift at the top).
    for (mj, &v) in m.iter_mut().zip(&mn) {
        if mr > 0.0 && (*mj as f32) * mr < v && (*mj as i32) < smax {
            *mj += 1;
        }
    }
    let mins: [f32; NS] = core::array::from_fn(|j| mr * m[j] as f32);
    let s: [f32; NS] = lanes::fit_scale_given_min(&xt, &wt, nmax, &mins);
    let (d, dr, mut sc) = quantize_scales(&s, smax);
    // The 4/6-bit scale rounds by up to half a level, which for a small scale is a large
    // relative change (and clips the top of its grid): keep the neighbour that fits best.
    for j in 0..NS {
        let (xs, mj) = (&x[SUB * j..SUB * j + SUB], mr * m[j] as f32);
        let err = |c: u8| {
            let st = dr * c as f32;
            weighted_err(xs, &w[j], |v| qaff(v, st, -mj, nmax) as f32 * st - mj)
        };
        let lo = sc[j].saturating_sub(1).max(u8::from(s[j] > 0.0));
        let hi = (sc[j] + 1).min(smax as u8);
        sc[j] = (lo..=hi)
            .map(|c| (err(c), c))
            .fold((f32::INFINITY, sc[j]), |a, b| if b.0 < a.0 { b } else { a })
            .1;
    }
    let q = core::array::from_fn(|e| {
        let j = e / SUB;
        qaff(x[e], dr * sc[j] as f32, -(mr * m[j] as f32), nmax)
    });
    (d, dmin, sc, m, q)
}

/// K-quant weights: `rms + |x|` (large values count more, but every value counts).
fn kweights<const N: usize>(x: &[f32]) -> [f32; N] {
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    core::array::from_fn(|i| rms + x[i].abs())
}

const ONES: [f32; QK] = [1.0; QK];

/// Symmetric quants against a stored scale `d`: `clamp(round(x/d), lo, hi) + off`.
fn qsym(v: f32, d: f32, lo: i32, hi: i32, off: i32) -> u8 {
    let l = if d != 0.0 { nearest(v / d) } else { 0 };
    (l.clamp(lo, hi) + off) as u8
}

/// Affine quants against a stored scale and offset: `clamp(round((x − m)/d), 0, nmax)`.
fn qaff(v: f32, d: f32, m: f32, nmax: i32) -> u8 {
    let l = if d != 0.0 { nearest((v - m) / d) } else { 0 };
    l.clamp(0, nmax) as u8
}

// ---------------------------------------------------------------------------------------------
// 32-value blocks.

fn nibbles(q: &[u8; QK]) -> [u8; 16] {
    core::array::from_fn(|j| (q[j] & 15) | (q[j + 16] & 15) << 4)
}

fn high_bits(q: &[u8; QK]) -> [u8; 4] {
    let mut h = 0u32;
    for (e, &v) in q.iter().enumerate() {
        h |= ((v as u32 >> 4) & 1) << e;
    }
    h.to_le_bytes()
}

fn q4_0(x: &[f32]) -> BlockQ4_0 {
    q4_0_with(x, fit_symmetric(x, &ONES, -8, 7))
}

fn q4_0_with(x: &[f32], s: f32) -> BlockQ4_0 {
    let (d, dr) = f16r(s);
    let q: [u8; QK] = core::array::from_fn(|i| qsym(x[i], dr, -8, 7, 8));
    BlockQ4_0 { d, qs: nibbles(&q) }
}

fn q4_0_lanes(x: &[f32]) -> [BlockQ4_0; LANES] {
    let s = lanes::fit_symmetric(&lanes::transpose::<QK, LANES>(x), &lanes::Ones, -8, 7);
    core::array::from_fn(|j| q4_0_with(&x[QK * j..QK * j + QK], s[j]))
}

fn q5_0(x: &[f32]) -> BlockQ5_0 {
    q5_0_with(x, fit_symmetric(x, &ONES, -16, 15))
}

fn q5_0_lanes(x: &[f32]) -> [BlockQ5_0; LANES] {
    let s = lanes::fit_symmetric(&lanes::transpose::<QK, LANES>(x), &lanes::Ones, -16, 15);
    core::array::from_fn(|j| q5_0_with(&x[QK * j..QK * j + QK], s[j]))
}

fn q5_0_with(x: &[f32], s: f32) -> BlockQ5_0 {
    let (d, dr) = f16r(s);
    let q: [u8; QK] = core::array::from_fn(|i| qsym(x[i], dr, -16, 15, 16));
    BlockQ5_0 {
        d,
        qh: high_bits(&q),
        qs: nibbles(&q),
    }
}

fn q8_0(x: &[f32]) -> BlockQ8_0 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let (d, dr) = f16_up(amax / 127.0);
    BlockQ8_0 {
        d,
        qs: core::array::from_fn(|i| qsym(x[i], dr, -127, 127, 0) as i8),
    }
}

/// Affine 32-value blocks: the fit, then scale and offset rounded to FP16 and the quants
/// recomputed against the rounded pair.
fn affine32(x: &[f32], (s, m): (f32, f32), nmax: i32) -> (u16, u16, [u8; QK]) {
    let ((d, dr), (mb, mr)) = (f16r(s), f16r(m));
    (d, mb, core::array::from_fn(|i| qaff(x[i], dr, mr, nmax)))
}

/// `fit_affine` on [`LANES`] 32-value blocks at once.
fn affine32_lanes(x: &[f32], nmax: i32) -> [(f32, f32); LANES] {
    let (s, m) = lanes::fit_affine(&lanes::transpose::<QK, LANES>(x), &lanes::Ones, nmax, false);
    core::array::from_fn(|j| (s[j], m[j]))
}

fn q4_1(x: &[f32]) -> BlockQ4_1 {
    q4_1_with(x, fit_affine(x, &ONES, 15, false))
}

fn q4_1_lanes(x: &[f32]) -> [BlockQ4_1; LANES] {
    let fits = affine32_lanes(x, 15);
    core::array::from_fn(|j| q4_1_with(&x[QK * j..QK * j + QK], fits[j]))
}

fn q4_1_with(x: &[f32], fit: (f32, f32)) -> BlockQ4_1 {
    let (d, m, q) = affine32(x, fit, 15);
    BlockQ4_1 {
        d,
        m,
        qs: nibbles(&q),
    }
}

fn q5_1(x: &[f32]) -> BlockQ5_1 {
    q5_1_with(x, fit_affine(x, &ONES, 31, false))
}

fn q5_1_lanes(x: &[f32]) -> [BlockQ5_1; LANES] {
    let fits = affine32_lanes(x, 31);
    core::array::from_fn(|j| q5_1_with(&x[QK * j..QK * j + QK], fits[j]))
}

fn q5_1_with(x: &[f32], fit: (f32, f32)) -> BlockQ5_1 {
    let (d, m, q) = affine32(x, fit, 31);
    BlockQ5_1 {
        d,
        m,
        qh: high_bits(&q),
        qs: nibbles(&q),
    }
}

// ---------------------------------------------------------------------------------------------
// K-quants.

/// Quantizes non-negative sub-block values `v` to `0..=nmax` against one super-scale
/// `max(v)/nmax` (FP16-rounded). A positive value never becomes 0: a sub-block whose scale
/// vanished would collapse to one value. Returns the scale bits, the rounded scale and the
/// integers.
fn quantize_scales<const N: usize>(v: &[f32; N], nmax: i32) -> (u16, f32, [u8; N]) {
    let max = v.iter().copied().fold(0f32, f32::max);
    let (d, dr) = f16_up(max / nmax as f32);
    let q = core::array::from_fn(|j| {
        let q = qaff(v[j], dr, 0.0, nmax);
        if v[j] > 0.0 && dr > 0.0 {
            q.max(1)
        } else {
            q
        }
    });
    (d, dr, q)
}

/// Signed sub-block scales (16 sub-blocks of 16 values `x`, fitted scales `s`) quantized
/// against `d` (FP16-rounded) to `lo..=hi`: a non-zero scale never to 0 (see
/// [`quantize_scales`]), and of the rounded integer and its two neighbours the one whose
/// sub-block (quants `qlo..=qhi`, weights `w`) fits best.
fn quantize_signed_scales(
    x: &[f32],
    w: &[[f32; 16]; 16],
    s: &[f32; 16],
    dr: f32,
    (lo, hi): (i32, i32),
    (qlo, qhi): (i32, i32),
) -> [i32; 16] {
    let first = signed_scales_nearest(s, dr, lo, hi);
    core::array::from_fn(|j| {
        let xs = &x[16 * j..16 * j + 16];
        let err = |c: i32| {
            let st = dr * c as f32;
            weighted_err(xs, &w[j], |v| {
                (qsym(v, st, qlo, qhi, 0) as i8 as i32) as f32 * st
            })
        };
        let c0 = first[j];
        (c0 - 1..=c0 + 1)
            .filter(|&c| {
                (lo..=hi).contains(&c) && (c != 0 || c0 == 0) && c.signum() * c0.signum() >= 0
            })
            .map(|c| (err(c), c))
            .fold((f32::INFINITY, c0), |a, b| if b.0 < a.0 { b } else { a })
            .1
    })
}

fn signed_scales_nearest(s: &[f32; 16], dr: f32, lo: i32, hi: i32) -> [i32; 16] {
    core::array::from_fn(|j| {
        let q = qsym(s[j], dr, lo, hi, 0) as i8 as i32;
        if q == 0 && s[j] != 0.0 && dr != 0.0 {
            // Same sign as s / d, magnitude 1.
            if (s[j] > 0.0) == (dr > 0.0) {
                1
            } else {
                -1
            }
        } else {
            q
        }
    })
}

/// Q4_K / Q5_K: eight sub-blocks of 32 (weights `rms + |x|`), 6-bit scales and minimums.
/// Returns `(d, dmin, packed scales, quants)`.
fn affine_k(x: &[f32], nmax: i32) -> (u16, u16, [u8; 12], [u8; QK_K]) {
    let (d, dmin, sc, m, q) = affine_super::<32, 8>(x, nmax, 63, kweights::<32>);
    (d, dmin, pack_scale_min_k4(&sc, &m), q)
}

fn q4_k(x: &[f32]) -> BlockQ4K {
    let (d, dmin, scales, q) = affine_k(x, 15);
    let mut qs = [0u8; 128];
    for (e, &qe) in q.iter().enumerate() {
        let (j, l) = (e / 32, e % 32);
        qs[32 * (j / 2) + l] |= qe << (4 * (j % 2));
    }
    BlockQ4K {
        d,
        dmin,
        scales,
        qs,
    }
}

fn q5_k(x: &[f32]) -> BlockQ5K {
    let (d, dmin, scales, q) = affine_k(x, 31);
    let (mut qs, mut qh) = ([0u8; 128], [0u8; 32]);
    for (e, &qe) in q.iter().enumerate() {
        let (j, l) = (e / 32, e % 32);
        qs[32 * (j / 2) + l] |= (qe & 15) << (4 * (j % 2));
        qh[l] |= (qe >> 4) << j;
    }
    BlockQ5K {
        d,
        dmin,
        scales,
        qh,
        qs,
    }
}

/// `fit_symmetric` on each of the 16 sub-blocks of 16 values (weights `w`), interleaved.
fn sub_scales_symmetric(x: &[f32], w: &[[f32; 16]; 16], lo: i32, hi: i32) -> [f32; 16] {
    let wt: [[f32; 16]; 16] = core::array::from_fn(|i| core::array::from_fn(|j| w[j][i]));
    lanes::fit_symmetric(&lanes::transpose::<16, 16>(x), &wt, lo, hi)
}

fn q6_k(x: &[f32]) -> BlockQ6K {
    // Sixteen signed sub-block scales, then one FP16 super-scale mapping the largest-magnitude
    // one to -128 (the side with one more level), sub-scales rounded to i8.
    let w: [[f32; 16]; 16] =
        core::array::from_fn(|j| core::array::from_fn(|i| x[16 * j + i] * x[16 * j + i]));
    let s = sub_scales_symmetric(x, &w, -32, 31);
    let smax = s
        .iter()
        .copied()
        .fold(0f32, |a, v| if v.abs() > a.abs() { v } else { a });
    let (d, dr) = f16_up(smax / -128.0);
    let sc = quantize_signed_scales(x, &w, &s, dr, (-128, 127), (-32, 31));
    let scales: [i8; 16] = core::array::from_fn(|j| sc[j] as i8);
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for e in 0..QK_K {
        let q = qsym(x[e], dr * scales[e / 16] as f32, -32, 31, 32);
        let (h, r) = (e / 128, e % 128);
        ql[64 * h + r % 64] |= (q & 15) << (4 * (r / 64));
        qh[32 * h + r % 32] |= (q >> 4) << (2 * (r / 32));
    }
    BlockQ6K { ql, qh, scales, d }
}

fn q2_k(x: &[f32]) -> BlockQ2K {
    let (d, dmin, sc, m, q) =
        affine_super::<16, 16>(x, 3, 15, |xs| core::array::from_fn(|i| xs[i].abs()));
    let mut qs = [0u8; 64];
    for (e, &qe) in q.iter().enumerate() {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        qs[32 * h + l] |= qe << (2 * j);
    }
    BlockQ2K {
        scales: core::array::from_fn(|j| sc[j] | m[j] << 4),
        qs,
        d,
        dmin,
    }
}

fn q3_k(x: &[f32]) -> BlockQ3K {
    let w: [[f32; 16]; 16] =
        core::array::from_fn(|j| core::array::from_fn(|i| x[16 * j + i] * x[16 * j + i]));
    let s = sub_scales_symmetric(x, &w, -4, 3);
    let smax = s
        .iter()
        .copied()
        .fold(0f32, |a, v| if v.abs() > a.abs() { v } else { a });
    let (d, dr) = f16_up(smax / -32.0);
    let sq = quantize_signed_scales(x, &w, &s, dr, (-32, 31), (-4, 3));
    let sc: [u8; 16] = core::array::from_fn(|j| (sq[j] + 32) as u8);
    let (mut qs, mut hmask) = ([0u8; 64], [0u8; 32]);
    for e in 0..QK_K {
        let q = qsym(x[e], dr * (sc[e / 16] as i32 - 32) as f32, -4, 3, 4);
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        qs[32 * h + l] |= (q & 3) << (2 * j);
        hmask[e % 32] |= (q >> 2) << (e / 32);
    }
    BlockQ3K {
        hmask,
        qs,
        scales: pack_scales_q3k(&sc),
        d,
    }
}

/// One 32-value block of Q4_0/Q4_1/Q5_0/Q5_1 through the scalar search (the lanes' tests).
#[cfg(test)]
fn quantize_block_scalar(ty: GgmlType, x: &[f32], dst: &mut [u8]) {
    match ty {
        GgmlType::Q4_0 => put(&q4_0(x), dst),
        GgmlType::Q4_1 => put(&q4_1(x), dst),
        GgmlType::Q5_0 => put(&q5_0(x), dst),
        GgmlType::Q5_1 => put(&q5_1(x), dst),
        _ => unreachable!("32-value searched types only"),
    }
}
