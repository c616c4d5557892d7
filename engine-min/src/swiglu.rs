//! SwiGLU, `g = silu(g) · u = g / (1 + e^-g) · u`, with an `exp` the compiler can vectorize
//! (glibc's `expf` is a call per element): decode runs 1536 of them a layer on one thread.
//!
//! Numerics: [`exp`] is Cephes' `expf` scheme — `n = round(x·log2 e)` (by the 1.5·2²³ addition
//! trick, round to nearest even), `r = x − n·ln2` in two parts (Cody–Waite, exact product for
//! |n| < 2⁹), a degree-6 polynomial for `e^r` on |r| ≤ ln2/2, then `2ⁿ` through the exponent
//! bits — relative error below 2⁻²² (about 2 ulp) for x in [−87, 88] (`tests` check it against
//! f64 over that range), against glibc's < 1 ulp: the SwiGLU outputs move by a few ulp, far
//! inside the forward tests' tolerance against the f64 reference. Outside the range the
//! argument is clamped (e^x then ~1.7e-38 or ~1.6e38 instead of 0 or infinity: silu of a huge
//! negative `g` is then ~−0 instead of −0, of a huge positive one `g`); a NaN `g` stays NaN
//! (it is the numerator). Every element is computed alone, in the same way for any batch, so
//! the batch engine's row invariance holds. On x86-64 with AVX2 the same code runs compiled for
//! 256-bit vectors, with the same IEEE operations in the same order (the same bits; tested).

/// `g[i] = g[i] / (1 + exp(-g[i])) * u[i]` over the common length.
pub(crate) fn swiglu(g: &mut [f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above; std caches the answer).
        unsafe { swiglu_avx2(g, u) };
        return;
    }
    swiglu_body(g, u);
}

/// [`swiglu_body`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn swiglu_avx2(g: &mut [f32], u: &[f32]) {
    swiglu_body(g, u);
}

#[inline(always)]
fn swiglu_body(g: &mut [f32], u: &[f32]) {
    for (g, u) in g.iter_mut().zip(u) {
        *g = *g / (1.0 + exp(-*g)) * u;
    }
}

/// `e^x` (see the module docs for its error and range).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for |n| < 2⁹ (LN2_HI has 9 trailing zero bits).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Cephes expf's minimax coefficients for e^r = 1 + r + r²·P(r), |r| ≤ ln2/2.
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5; // Cephes: 5.0000001201e-1, which rounds to 0.5 in f32
    let e = (p * (r * r) + r) + 1.0;
    // 2ⁿ from the exponent bits: n in [-126, 127] after the clamp.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    e * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`exp`] against f64 over [−87, 88] on a dense grid plus the integers' neighbourhoods:
    /// relative error below 2⁻²² (the module docs' bound).
    #[test]
    fn exp_is_within_2_pow_minus_22() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            for d in [0.0f32, 1e-3, 0.346_573_6, 0.5] {
                let v = (x + d).min(88.0);
                let got = f64::from(exp(v));
                let want = f64::from(v).exp();
                worst = worst.max(((got - want) / want).abs());
            }
            x += 0.0137;
        }
        assert!(worst < 2f64.powi(-22), "worst relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) > 0.0 && exp(1000.0).is_finite());
    }

    /// SwiGLU against f64, NaN kept, and the AVX2 build bit for bit with the baseline.
    #[test]
    fn swiglu_matches_f64_and_builds_agree() {
        let n = 1537;
        let g0: Vec<f32> = (0..n)
            .map(|i| ((i as f32) * 0.731).sin() * 30.0)
            .chain([f32::NAN, -200.0, 200.0, 0.0, -0.0])
            .collect();
        let u: Vec<f32> = (0..g0.len()).map(|i| ((i as f32) * 0.37).cos()).collect();
        let mut g = g0.clone();
        swiglu_body(&mut g, &u);
        for ((&a, &gi), &ui) in g.iter().zip(&g0).zip(&u) {
            if gi.is_nan() {
                assert!(a.is_nan());
                continue;
            }
            let (gd, ud) = (f64::from(gi), f64::from(ui));
            let want = gd / (1.0 + (-gd).exp()) * ud;
            // A few ulp of the result (exp's 2⁻²², then three roundings), plus an absolute
            // 1e-30 for the clamped tails.
            assert!(
                (f64::from(a) - want).abs() <= 1e-6 * want.abs() + 1e-30,
                "g {gi} u {ui}: {a} vs {want}"
            );
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            let mut g2 = g0.clone();
            // SAFETY: AVX2 checked above.
            unsafe { swiglu_avx2(&mut g2, &u) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&g), bits(&g2));
        } else {
            eprintln!("SKIP swiglu avx2: this CPU lacks AVX2");
        }
    }
}
