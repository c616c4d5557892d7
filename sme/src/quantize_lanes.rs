//! The scale searches of [`super`] run on `L` blocks (or sub-blocks) at once, one per lane,
//! **bit for bit** the scalar searches: every lane performs exactly the scalar sequence of f32
//! operations on its own block (the same expressions, the same summation order), so only the
//! independent blocks are interleaved, never one block's sums reordered. The scalar searches
//! are serial chains of dependent f32 additions (one per value, per candidate scale: ~40 a
//! value for Q4_0, ~60 for Q4_1); interleaving `L` blocks lets the compiler keep a lane of a
//! vector register per block. `tests` below checks the identity on random and edge rows.
//!
//! Values are transposed: `x[i][j]` is value `i` of block `j`.

// `!(a <= b)` is the scalar searches' `if a <= b { continue }` exactly, NaN included.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

/// Whether the AVX2 copies run (checked once; cached by the standard library). x86-64 only:
/// elsewhere the dispatch below compiles to the plain body.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Defines `$name`, which runs `$body` compiled for AVX2 where the CPU has it, else as built.
macro_rules! dispatched {
    ($(#[$m:meta])* fn $name:ident / $avx2:ident = $body:ident
        <$($c:ident),*> ($($a:ident : $t:ty),*) -> $r:ty) => {
        $(#[$m])*
        pub(super) fn $name<$(const $c: usize,)* W: Weights<N, L>>($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            if avx2() {
                // SAFETY: AVX2 is present (checked just above).
                return unsafe { $avx2($($a),*) };
            }
            $body($($a),*)
        }

        /// # Safety
        /// The CPU must have AVX2.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2<$(const $c: usize,)* W: Weights<N, L>>($($a: $t),*) -> $r {
            $body($($a),*)
        }
    };
}

dispatched! {
    /// `super::fit_symmetric` on `L` blocks.
    fn fit_symmetric / fit_symmetric_avx2 = fit_symmetric_body
        <N, L>(x: &[[f32; L]; N], w: &W, lo: i32, hi: i32) -> [f32; L]
}

dispatched! {
    /// `super::fit_affine` on `L` blocks: `(scales, minimums)`.
    fn fit_affine / fit_affine_avx2 = fit_affine_body
        <N, L>(x: &[[f32; L]; N], w: &W, nmax: i32, nonpositive_min: bool) -> ([f32; L], [f32; L])
}

dispatched! {
    /// `super::fit_scale_given_min` on `L` sub-blocks, minimum `m[j]` each.
    fn fit_scale_given_min / fit_scale_given_min_avx2 = fit_scale_given_min_body
        <N, L>(x: &[[f32; L]; N], w: &W, nmax: i32, m: &[f32; L]) -> [f32; L]
}

/// `nearest(v).clamp(lo, hi) as f32` (for `lo <= 0 <= hi`), the same value for every `v`,
/// NaN (0) included, in operations that vectorize: the clamp in f32 before the conversion
/// makes the conversion exact, where the saturating `as i32` becomes a scalar branch per
/// lane.
#[inline(always)]
fn grid(v: f32, lo: i32, hi: i32) -> f32 {
    let u = v + 0.5f32.copysign(v);
    // `max` with a non-NaN bound gives the bound for a NaN `u`: the lane is zeroed below.
    let c = u.max(lo as f32).min(hi as f32);
    // SAFETY: `c` is in lo..=hi, finite and within i32's range.
    let l = unsafe { c.to_int_unchecked::<i32>() } as f32;
    if u.is_nan() {
        0.0
    } else {
        l
    }
}

/// The weights of a search: all ones (folded away) or per value.
pub(super) trait Weights<const N: usize, const L: usize> {
    fn w(&self, i: usize, j: usize) -> f32;
}

/// Unit weights (the 32-value block types).
pub(super) struct Ones;

impl<const N: usize, const L: usize> Weights<N, L> for Ones {
    #[inline(always)]
    fn w(&self, _: usize, _: usize) -> f32 {
        1.0
    }
}

impl<const N: usize, const L: usize> Weights<N, L> for [[f32; L]; N] {
    #[inline(always)]
    fn w(&self, i: usize, j: usize) -> f32 {
        self[i][j]
    }
}

/// `x[i][j] = src[N·j + i]`: `L` consecutive blocks of `N` values, transposed.
#[inline(always)]
pub(super) fn transpose<const N: usize, const L: usize>(src: &[f32]) -> [[f32; L]; N] {
    let mut x = [[0f32; L]; N];
    for (j, b) in src.chunks_exact(N).take(L).enumerate() {
        for (i, &v) in b.iter().enumerate() {
            x[i][j] = v;
        }
    }
    x
}

/// `super::fit_symmetric` on `L` blocks.
#[inline(always)]
fn fit_symmetric_body<const N: usize, const L: usize>(
    x: &[[f32; L]; N],
    w: &impl Weights<N, L>,
    lo: i32,
    hi: i32,
) -> [f32; L] {
    let (mut amax, mut max) = ([0f32; L], [0f32; L]);
    for xi in x {
        for j in 0..L {
            let v = xi[j];
            if v.abs() > amax[j] {
                amax[j] = v.abs();
                max[j] = v;
            }
        }
    }
    let (mut best_e, mut best_s) = ([f32::INFINITY; L], [0f32; L]);
    for t in -9..=9 {
        let mut iscale = [0f32; L];
        for j in 0..L {
            iscale[j] = (lo as f32 - 0.1 * t as f32) / max[j];
        }
        let (mut sxl, mut sll) = ([0f32; L], [0f32; L]);
        for (i, xi) in x.iter().enumerate() {
            for j in 0..L {
                let (v, wi) = (xi[j], w.w(i, j));
                let l = grid(iscale[j] * v, lo, hi);
                sxl[j] += wi * v * l;
                sll[j] += wi * l * l;
            }
        }
        let (mut s, mut is) = ([0f32; L], [0f32; L]);
        for j in 0..L {
            (s[j], is[j]) = (sxl[j] / sll[j], sll[j] / sxl[j]);
        }
        // `Iterator::sum` of f32 folds from -0.0.
        let mut err = [-0.0f32; L];
        for (i, xi) in x.iter().enumerate() {
            for j in 0..L {
                let (v, wi) = (xi[j], w.w(i, j));
                let e = v - grid(v * is[j], lo, hi) * s[j];
                err[j] += wi * e * e;
            }
        }
        for j in 0..L {
            // The scalar search skips a candidate with `sll <= 0` before its error.
            if !(sll[j] <= 0.0) && err[j] < best_e[j] {
                (best_e[j], best_s[j]) = (err[j], s[j]);
            }
        }
    }
    for j in 0..L {
        if amax[j] == 0.0 {
            best_s[j] = 0.0;
        }
    }
    best_s
}

/// `super::fit_affine` on `L` blocks: `(scales, minimums)`.
#[inline(always)]
fn fit_affine_body<const N: usize, const L: usize>(
    x: &[[f32; L]; N],
    w: &impl Weights<N, L>,
    nmax: i32,
    nonpositive_min: bool,
) -> ([f32; L], [f32; L]) {
    let (mut min, mut max) = ([f32::INFINITY; L], [f32::NEG_INFINITY; L]);
    for xi in x {
        for j in 0..L {
            min[j] = f32::min(min[j], xi[j]);
        }
    }
    for xi in x {
        for j in 0..L {
            max[j] = f32::max(max[j], xi[j]);
        }
    }
    if nonpositive_min {
        for m in &mut min {
            if *m > 0.0 {
                *m = 0.0;
            }
        }
    }
    let quant = |v: f32, is: f32, m: f32| -> f32 { grid((v - m) * is, 0, nmax) };
    // The starting point: the min/max grid.
    let mut s0 = [0f32; L];
    for j in 0..L {
        s0[j] = (max[j] - min[j]) / nmax as f32;
    }
    let mut best_e = [-0.0f32; L];
    for (i, xi) in x.iter().enumerate() {
        for j in 0..L {
            let (v, wi) = (xi[j], w.w(i, j));
            let e = v - (quant(v, 1.0 / s0[j], min[j]) * s0[j] + min[j]);
            best_e[j] += wi * e * e;
        }
    }
    let (mut best_s, mut best_m) = (s0, min);
    // Σw and Σw·x are the same for every candidate (the scalar search sums them in each, with
    // the same operations in the same order, so once is the same value).
    let (mut sw, mut sx) = ([0f32; L], [0f32; L]);
    for (i, xi) in x.iter().enumerate() {
        for j in 0..L {
            let (v, wi) = (xi[j], w.w(i, j));
            sw[j] += wi;
            sx[j] += wi * v;
        }
    }
    for t in 0..=20 {
        let mut iscale = [0f32; L];
        for j in 0..L {
            iscale[j] = (nmax as f32 - 1.0 + 0.1 * t as f32) / (max[j] - min[j]);
        }
        let (mut sl, mut sll, mut sxl) = ([0f32; L], [0f32; L], [0f32; L]);
        for (i, xi) in x.iter().enumerate() {
            for j in 0..L {
                let (v, wi) = (xi[j], w.w(i, j));
                let l = grid(iscale[j] * (v - min[j]), 0, nmax);
                sl[j] += wi * l;
                sll[j] += wi * l * l;
                sxl[j] += wi * v * l;
            }
        }
        let (mut s, mut m, mut ok) = ([0f32; L], [0f32; L], [false; L]);
        for j in 0..L {
            let det = sw[j] * sll[j] - sl[j] * sl[j];
            let mut sj = (sw[j] * sxl[j] - sx[j] * sl[j]) / det;
            let mut mj = (sll[j] * sx[j] - sl[j] * sxl[j]) / det;
            if nonpositive_min && mj > 0.0 {
                mj = 0.0;
                sj = sxl[j] / sll[j];
            }
            // The scalar search skips `det <= 0`, then `s <= 0`.
            ok[j] = !(det <= 0.0) && !(sj <= 0.0);
            (s[j], m[j]) = (sj, mj);
        }
        let mut is = [0f32; L];
        for j in 0..L {
            is[j] = 1.0 / s[j];
        }
        let mut err = [-0.0f32; L];
        for (i, xi) in x.iter().enumerate() {
            for j in 0..L {
                let (v, wi) = (xi[j], w.w(i, j));
                let e = v - (quant(v, is[j], m[j]) * s[j] + m[j]);
                err[j] += wi * e * e;
            }
        }
        for j in 0..L {
            if ok[j] && err[j] < best_e[j] {
                (best_e[j], best_s[j], best_m[j]) = (err[j], s[j], m[j]);
            }
        }
    }
    for j in 0..L {
        // A flat block: the scalar search returns (0, min) before any candidate.
        if max[j] <= min[j] {
            (best_s[j], best_m[j]) = (0.0, min[j]);
        }
    }
    (best_s, best_m)
}

/// `super::fit_scale_given_min` on `L` sub-blocks, minimum `m[j]` each.
#[inline(always)]
fn fit_scale_given_min_body<const N: usize, const L: usize>(
    x: &[[f32; L]; N],
    w: &impl Weights<N, L>,
    nmax: i32,
    m: &[f32; L],
) -> [f32; L] {
    let mut ymax = [0f32; L];
    for xi in x {
        for j in 0..L {
            ymax[j] = ymax[j].max(xi[j] + m[j]);
        }
    }
    let (mut best_e, mut best_s) = ([f32::INFINITY; L], [0f32; L]);
    for t in -9..=9 {
        let mut iscale = [0f32; L];
        for j in 0..L {
            iscale[j] = (nmax as f32 + 0.1 * t as f32) / ymax[j];
        }
        let (mut syl, mut sll) = ([0f32; L], [0f32; L]);
        for (i, xi) in x.iter().enumerate() {
            for j in 0..L {
                let (v, wi) = (xi[j], w.w(i, j));
                let l = grid(iscale[j] * (v + m[j]), 0, nmax);
                syl[j] += wi * (v + m[j]) * l;
                sll[j] += wi * l * l;
            }
        }
        let (mut s, mut is) = ([0f32; L], [0f32; L]);
        for j in 0..L {
            (s[j], is[j]) = (syl[j] / sll[j], sll[j] / syl[j]);
        }
        let mut err = [-0.0f32; L];
        for (i, xi) in x.iter().enumerate() {
            for j in 0..L {
                let (v, wi) = (xi[j], w.w(i, j));
                let e = v - (grid((v + m[j]) * is[j], 0, nmax) * s[j] - m[j]);
                err[j] += wi * e * e;
            }
        }
        for j in 0..L {
            if !(sll[j] <= 0.0 || syl[j] <= 0.0) && err[j] < best_e[j] {
                (best_e[j], best_s[j]) = (err[j], s[j]);
            }
        }
    }
    for j in 0..L {
        if ymax[j] <= 0.0 {
            best_s[j] = 0.0;
        }
    }
    best_s
}

#[cfg(test)]
mod tests {
    //! Bit identity with the scalar searches on the inputs each quantizer gives them: random
    //! rows at several scales and the edge blocks (zeros of both signs, constants, one spike,
    //! subnormal values, values near FP16's limit, all positive, all negative).
    use super::super::{fit_affine as affine1, fit_scale_given_min as given1};
    use super::super::{fit_symmetric as symmetric1, kweights, ONES};
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    /// Blocks of `n` values: random ones and every edge case, `count` in all.
    fn blocks(n: usize, count: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut r = Rng(seed);
        let mut out: Vec<Vec<f32>> = vec![
            vec![0.0; n],
            (0..n)
                .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
                .collect(),
            vec![-0.0; n],
            vec![0.75; n],
            vec![-3.0; n],
            (0..n).map(|i| if i == n / 3 { 5.0 } else { 0.0 }).collect(),
            (0..n).map(|i| if i == 1 { -5.0 } else { 1e-3 }).collect(),
            (0..n).map(|_| r.unit() * 1e-40).collect(),
            (0..n).map(|_| r.unit() * 6.5e4).collect(),
            (0..n).map(|_| r.unit().abs() + 0.5).collect(),
            (0..n).map(|_| -(r.unit().abs()) - 0.5).collect(),
            (0..n).map(|i| (i as f32 - 7.5) * 0.25).collect(),
        ];
        while out.len() < count {
            let scale = [1e-6f32, 0.02, 1.0, 300.0][out.len() % 4];
            out.push((0..n).map(|_| r.unit() * scale).collect());
        }
        out
    }

    fn same(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Every group of `L` consecutive blocks (and one group of each block alone, repeated, so
    /// every edge block meets every lane position).
    fn groups<const N: usize, const L: usize>(bs: &[Vec<f32>]) -> Vec<[usize; L]> {
        let mut g: Vec<[usize; L]> = (0..bs.len() / L)
            .map(|k| core::array::from_fn(|j| k * L + j))
            .collect();
        for b in 0..bs.len().min(16) {
            g.push(core::array::from_fn(|j| {
                if j == b % L {
                    b
                } else {
                    (b + j) % bs.len()
                }
            }));
        }
        g
    }

    fn gather<const N: usize, const L: usize>(bs: &[Vec<f32>], g: &[usize; L]) -> Vec<f32> {
        g.iter().flat_map(|&b| bs[b].iter().copied()).collect()
    }

    fn check_symmetric<const N: usize, const L: usize>(weighted: bool, lo: i32, hi: i32) {
        let bs = blocks(N, 64 * L, 0x5eed + N as u64);
        for g in groups::<N, L>(&bs) {
            let src = gather::<N, L>(&bs, &g);
            let x = transpose::<N, L>(&src);
            let w: [[f32; L]; N] =
                core::array::from_fn(|i| core::array::from_fn(|j| x[i][j] * x[i][j]));
            // The dispatched search (AVX2 here) and the one built for the baseline.
            let (got, base) = if weighted {
                (
                    fit_symmetric(&x, &w, lo, hi),
                    fit_symmetric_body(&x, &w, lo, hi),
                )
            } else {
                (
                    fit_symmetric(&x, &Ones, lo, hi),
                    fit_symmetric_body(&x, &Ones, lo, hi),
                )
            };
            assert!(same(&got, &base), "N={N} L={L}: {got:?} vs {base:?}");
            let want: Vec<f32> = (0..L)
                .map(|j| {
                    let b = &src[N * j..N * j + N];
                    let wj: Vec<f32> = b.iter().map(|v| v * v).collect();
                    symmetric1(b, if weighted { &wj } else { &ONES[..N] }, lo, hi)
                })
                .collect();
            assert!(
                same(&got, &want),
                "N={N} L={L} {lo}..{hi}: {got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn symmetric_search_is_bit_identical() {
        check_symmetric::<32, 8>(false, -8, 7); // Q4_0
        check_symmetric::<32, 8>(false, -16, 15); // Q5_0
        check_symmetric::<16, 16>(true, -32, 31); // Q6_K
        check_symmetric::<16, 16>(true, -4, 3); // Q3_K
    }

    /// `weights`: 0 ones, 1 `kweights` (Q4_K, Q5_K), 2 `|x|` (Q2_K).
    fn check_affine<const N: usize, const L: usize>(weights: u8, nmax: i32, nonpos: bool) {
        let bs = blocks(N, 64 * L, 0xaff1 + N as u64 + nmax as u64);
        let wfn = |b: &[f32]| -> Vec<f32> {
            match weights {
                0 => vec![1.0; N],
                1 => kweights::<N>(b).to_vec(),
                _ => b.iter().map(|v| v.abs()).collect(),
            }
        };
        for g in groups::<N, L>(&bs) {
            let src = gather::<N, L>(&bs, &g);
            let x = transpose::<N, L>(&src);
            let wj: Vec<Vec<f32>> = (0..L).map(|j| wfn(&src[N * j..N * j + N])).collect();
            let w: [[f32; L]; N] = core::array::from_fn(|i| core::array::from_fn(|j| wj[j][i]));
            let ((s, m), (bs, bm)) = if weights == 0 {
                (
                    fit_affine(&x, &Ones, nmax, nonpos),
                    fit_affine_body(&x, &Ones, nmax, nonpos),
                )
            } else {
                (
                    fit_affine(&x, &w, nmax, nonpos),
                    fit_affine_body(&x, &w, nmax, nonpos),
                )
            };
            assert!(
                same(&s, &bs) && same(&m, &bm),
                "N={N} nmax={nmax}: baseline build"
            );
            for j in 0..L {
                let (ws, wm) = affine1(&src[N * j..N * j + N], &wj[j], nmax, nonpos);
                assert!(
                    same(&[s[j], m[j]], &[ws, wm]),
                    "N={N} nmax={nmax} lane {j}: ({}, {}) vs ({ws}, {wm})",
                    s[j],
                    m[j]
                );
            }
            if nonpos {
                // The scale search given a minimum: the fitted ones negated, and others.
                let mut r = Rng(g[0] as u64 + 1);
                let mins: [f32; L] = core::array::from_fn(|j| match j % 3 {
                    0 => -m[j],
                    1 => 0.0,
                    _ => r.unit().abs() * 2.0,
                });
                let s = fit_scale_given_min(&x, &w, nmax, &mins);
                let base = fit_scale_given_min_body(&x, &w, nmax, &mins);
                assert!(same(&s, &base), "given min N={N}: baseline build");
                for j in 0..L {
                    let want = given1(&src[N * j..N * j + N], &wj[j], nmax, mins[j]);
                    assert!(
                        same(&[s[j]], &[want]),
                        "given min N={N} lane {j}: {} vs {want}",
                        s[j]
                    );
                }
            }
        }
    }

    #[test]
    fn affine_searches_are_bit_identical() {
        check_affine::<32, 8>(0, 15, false); // Q4_1
        check_affine::<32, 8>(0, 31, false); // Q5_1
        check_affine::<32, 8>(1, 15, true); // Q4_K
        check_affine::<32, 8>(1, 31, true); // Q5_K
        check_affine::<16, 16>(2, 3, true); // Q2_K
    }

    #[test]
    fn grouped_rows_match_block_by_block() {
        use crate::GgmlType;
        let mut r = Rng(99);
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            // 18 blocks: two groups of 8 and a scalar rest of 2.
            for k in [32usize, 256, 576, 2048] {
                let row: Vec<f32> = (0..k).map(|_| r.unit()).collect();
                let rb = ty.row_bytes(k).unwrap();
                let mut got = vec![0u8; rb];
                crate::quantize_row(ty, &row, &mut got).unwrap();
                let mut want = vec![0u8; rb];
                let bb = rb / (k / 32);
                for (x, d) in row.chunks_exact(32).zip(want.chunks_exact_mut(bb)) {
                    let mut one = vec![0u8; bb];
                    super::super::quantize_block_scalar(ty, x, &mut one);
                    d.copy_from_slice(&one);
                }
                assert_eq!(got, want, "{ty} k={k}");
            }
        }
    }
}
