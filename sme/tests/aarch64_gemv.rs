//! NEON quantized GEMV (Q4_0, Q4_1, Q8_0; M = 1..=16) against an f64 reference built from the
//! blocks' own dequantized values, and against the portable implementation; y poisoned with NaN,
//! guard columns (ldy > N) checked untouched; bad input refused with nothing written.
//! NEON is architectural on aarch64, so these run under every emulator configuration.
#![cfg(target_arch = "aarch64")]

mod aarch64_common;

use aarch64_common::{f16, Rng};
use hetero_sme::arch::aarch64::Neon;
use hetero_sme::{
    BlockQ4_0, BlockQ4_1, BlockQ8_0, Error, Kernel, KernelKind, QGemv, QWeights, QuantBlock, QK,
};

const GUARD: u32 = 0x7fc0_beef;
const KS: [usize; 4] = [32, 96, 576, 1536];
const NS: [usize; 9] = [1, 2, 15, 16, 17, 63, 64, 65, 129];

fn q4_0(rng: &mut Rng, n: usize) -> Vec<BlockQ4_0> {
    (0..n)
        .map(|_| BlockQ4_0 {
            d: f16(rng.unit() * 0.1),
            qs: core::array::from_fn(|_| rng.next_u64() as u8),
        })
        .collect()
}

fn q4_1(rng: &mut Rng, n: usize) -> Vec<BlockQ4_1> {
    (0..n)
        .map(|_| BlockQ4_1 {
            d: f16(rng.unit() * 0.1),
            m: f16(rng.unit() * 0.5),
            qs: core::array::from_fn(|_| rng.next_u64() as u8),
        })
        .collect()
}

fn q8_0(rng: &mut Rng, n: usize) -> Vec<BlockQ8_0> {
    (0..n)
        .map(|_| BlockQ8_0 {
            d: f16(rng.unit() * 0.01),
            qs: core::array::from_fn(|_| rng.next_u64() as i8),
        })
        .collect()
}

/// y = x · W^T in f64 from each block's FP32 dequantized values, and Σ|x·w| per output.
fn reference<B: QuantBlock>(x: &[f32], m: usize, k: usize, w: &[B]) -> (Vec<f64>, Vec<f64>) {
    let nb = k / QK;
    let n = w.len() / nb;
    let mut out = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for j in 0..n {
        let wrow: Vec<f32> = w[j * nb..(j + 1) * nb]
            .iter()
            .flat_map(|b| b.dequantize())
            .collect();
        for i in 0..m {
            let (mut s, mut g) = (0.0f64, 0.0f64);
            for kk in 0..k {
                let p = x[i * k + kk] as f64 * wrow[kk] as f64;
                s += p;
                g += p.abs();
            }
            out[i * n + j] = s;
            mag[i * n + j] = g;
        }
    }
    (out, mag)
}

/// FP32 accumulation of K products (each rounded once, 2^-24 relative, or fused) plus Q4_1's
/// fused q*d+m (within one rounding of the portable q*d then +m): (K+4)·2^-23·Σ|x·w|.
fn tol(k: usize, mag: f64) -> f64 {
    (k as f64 + 4.0) * f64::powi(2.0, -23) * mag + 1e-30
}

fn run(w: QWeights<'_>, x: &[f32], m: usize, k: usize, n: usize, what: &str) {
    let ldy = n + 3;
    let fresh = || {
        let mut y = vec![f32::from_bits(GUARD); m * ldy + 5];
        for i in 0..m {
            y[i * ldy..i * ldy + n].fill(f32::NAN);
        }
        y
    };
    let g = QGemv { x, m, k, w };
    let mut y = fresh();
    Neon::new().qgemv(&g, &mut y, ldy).unwrap();
    let mut yp = fresh();
    Kernel::new(KernelKind::Portable)
        .unwrap()
        .qgemv(&g, &mut yp, ldy)
        .unwrap();
    let (want, mag) = match w {
        QWeights::Q4_0(b) => reference(x, m, k, b),
        QWeights::Q4_1(b) => reference(x, m, k, b),
        QWeights::Q8_0(b) => reference(x, m, k, b),
    };
    for i in 0..m {
        for j in 0..ldy {
            let (got, port) = (y[i * ldy + j], yp[i * ldy + j]);
            if j >= n {
                assert_eq!(
                    got.to_bits(),
                    GUARD,
                    "{what} m{m} k{k} n{n}: guard ({i},{j})"
                );
                continue;
            }
            let t = tol(k, mag[i * n + j]);
            let wv = want[i * n + j];
            assert!(
                (got as f64 - wv).abs() <= t,
                "{what} m{m} k{k} n{n} y[{i}][{j}] = {got}, want {wv} (tol {t:e})"
            );
            assert!(
                (got as f64 - port as f64).abs() <= 2.0 * t,
                "{what}: NEON {got} vs portable {port}"
            );
        }
    }
    assert!(
        y[m * ldy..].iter().all(|v| v.to_bits() == GUARD),
        "{what}: tail guard"
    );
}

#[test]
fn neon_quantized_gemv_matches_reference() {
    let mut rng = Rng::new(0x9e3779b97f4a7c15);
    let mut case = 0usize;
    for &k in &KS {
        for &n in &NS {
            // Every M in 1..=16 over the cases, cycling.
            for _ in 0..2 {
                let m = case % 16 + 1;
                case += 1;
                let x = rng.vec(m * k);
                let nb = n * (k / QK);
                run(QWeights::Q4_0(&q4_0(&mut rng, nb)), &x, m, k, n, "Q4_0");
                run(QWeights::Q4_1(&q4_1(&mut rng, nb)), &x, m, k, n, "Q4_1");
                run(QWeights::Q8_0(&q8_0(&mut rng, nb)), &x, m, k, n, "Q8_0");
            }
        }
    }
    // Every M once at a mid shape.
    for m in 1..=16 {
        let (k, n) = (64, 33);
        let x = rng.vec(m * k);
        run(
            QWeights::Q4_1(&q4_1(&mut rng, n * 2)),
            &x,
            m,
            k,
            n,
            "Q4_1 all-M",
        );
    }
}

#[test]
fn neon_gemv_wrappers_and_bad_input() {
    let mut rng = Rng::new(7);
    let (m, k, n) = (3, 64, 5);
    let x = rng.vec(m * k);
    let w = q4_0(&mut rng, n * 2);
    let mut y = vec![f32::NAN; m * n];
    Neon::new().gemv_q4_0(&x, m, k, &w, &mut y, n).unwrap();
    assert!(y.iter().all(|v| v.is_finite()));
    let w1 = q4_1(&mut rng, n * 2);
    Neon::new().gemv_q4_1(&x, m, k, &w1, &mut y, n).unwrap();
    let w8 = q8_0(&mut rng, n * 2);
    Neon::new().gemv_q8_0(&x, m, k, &w8, &mut y, n).unwrap();

    // Bad input: typed errors, nothing written.
    let mut y = vec![f32::from_bits(GUARD); 17 * n];
    let x17 = rng.vec(17 * k);
    let e = Neon::new()
        .gemv_q4_0(&x17, 17, k, &w, &mut y, n)
        .unwrap_err();
    assert!(matches!(e, Error::TooManyRows { .. }), "{e:?}");
    let e = Neon::new().gemv_q4_0(&x, m, 48, &w, &mut y, n).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    let e = Neon::new()
        .gemv_q4_0(&x[..10], m, k, &w, &mut y, n)
        .unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
    let e = Neon::new()
        .gemv_q4_0(&x, m, k, &w, &mut y[..5], n)
        .unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e:?}");
    assert!(y.iter().all(|v| v.to_bits() == GUARD), "written on error");
    // M = 0: nothing to do, nothing written.
    Neon::new().gemv_q4_0(&[], 0, k, &w, &mut y, n).unwrap();
    assert!(y.iter().all(|v| v.to_bits() == GUARD));
}

/// NEON GEMM/GEMV on packed FP16 and BF16 panels vs an f64 reference from the rounded weights
/// (A is used in FP32 as given: the NEON kernel does not round it) and vs the portable kernel.
#[test]
fn neon_packed_gemm_matches_reference() {
    use hetero_sme::{
        pack_f32, packed_len, Gemm, Layout, Lhs, PackedFormat, PackedRef, WeightSource,
    };
    let mut rng = Rng::new(0x5151);
    let ms = [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33];
    let ns = [1, 2, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129];
    let ks = [1, 2, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129];
    let mut idx = 0usize;
    for &n in &ns {
        for &k in &ks {
            let m = ms[idx % ms.len()];
            let format = [PackedFormat::F16, PackedFormat::Bf16][idx % 2];
            let (bias_on, acc) = ((idx / 2) % 2 == 1, (idx / 4) % 2 == 1);
            let f16_lhs = idx % 3 == 2;
            idx += 1;
            let (lda, ldc) = (k + 2, n + 1);
            let a = rng.vec(m * lda);
            let a16: Vec<u16> = a.iter().map(|&x| f16(x)).collect();
            let w = rng.vec(k * n);
            let bias = rng.vec(n);
            let mut packed = vec![0u16; packed_len(k, n)];
            let src = WeightSource {
                data: &w,
                k,
                n,
                ld: n,
                layout: Layout::RowMajor,
            };
            pack_f32(&src, 0..n, format, &mut packed).unwrap();
            let wr: Vec<f64> = w
                .iter()
                .map(|&x| match format {
                    PackedFormat::Bf16 => half::bf16::from_f32(x).to_f64(),
                    _ => half::f16::from_f32(x).to_f64(),
                })
                .collect();
            let ar: Vec<f64> = if f16_lhs {
                a16.iter()
                    .map(|&x| half::f16::from_bits(x).to_f64())
                    .collect()
            } else {
                a.iter().map(|&x| x as f64).collect()
            };
            let mut c = vec![f32::from_bits(GUARD); m * ldc];
            for i in 0..m {
                for j in 0..n {
                    c[i * ldc + j] = if acc { rng.unit() } else { f32::NAN };
                }
            }
            let c_old = c.clone();
            let g = Gemm {
                a: if f16_lhs {
                    Lhs::F16(&a16)
                } else {
                    Lhs::F32(&a)
                },
                m,
                lda,
                w: PackedRef::new(&packed, k, n, format).unwrap(),
                bias: bias_on.then_some(&bias[..]),
                accumulate: acc,
            };
            let mut cp = c.clone();
            Neon::new().gemm(&g, &mut c, ldc).unwrap();
            Kernel::new(KernelKind::Portable)
                .unwrap()
                .gemm(&g, &mut cp, ldc)
                .unwrap();
            for i in 0..m {
                for j in 0..ldc {
                    let got = c[i * ldc + j];
                    if j >= n {
                        assert_eq!(got.to_bits(), GUARD, "guard ({i},{j}) m{m} n{n} k{k}");
                        continue;
                    }
                    let (mut s, mut mag) = (0.0f64, 0.0f64);
                    if bias_on {
                        s += bias[j] as f64;
                        mag += (bias[j] as f64).abs();
                    }
                    if acc {
                        s += c_old[i * ldc + j] as f64;
                        mag += (c_old[i * ldc + j] as f64).abs();
                    }
                    for kk in 0..k {
                        let p = ar[i * lda + kk] * wr[kk * n + j];
                        s += p;
                        mag += p.abs();
                    }
                    // FP32 FMA accumulation of K products plus bias and C, one rounding each.
                    let t = tol(k, mag);
                    assert!(
                        (got as f64 - s).abs() <= t,
                        "{format:?} m{m} n{n} k{k} bias={bias_on} acc={acc}: C[{i}][{j}] = {got}, want {s}"
                    );
                    let port = cp[i * ldc + j];
                    assert!(
                        (got - port).abs() as f64 <= 2.0 * t,
                        "NEON {got} vs portable {port}"
                    );
                }
            }
        }
    }
}

#[test]
fn neon_gemm_degenerate_shapes_and_bad_input() {
    use hetero_sme::{Gemm, Lhs, PackedFormat, PackedRef};
    let n = 70;
    let bias: Vec<f32> = (0..n).map(|j| j as f32).collect();
    // K = 0: an empty packed weight; C = bias, or C + bias when accumulating.
    let w = PackedRef::new(&[], 0, n, PackedFormat::F16).unwrap();
    let mut c = vec![f32::NAN; 3 * n];
    let mut g = Gemm {
        a: Lhs::F32(&[]),
        m: 3,
        lda: 0,
        w,
        bias: Some(&bias),
        accumulate: false,
    };
    Neon::new().gemm(&g, &mut c, n).unwrap();
    assert!(c.iter().enumerate().all(|(i, &v)| v == (i % n) as f32));
    g.accumulate = true;
    Neon::new().gemm(&g, &mut c, n).unwrap();
    assert!(c
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 2.0 * (i % n) as f32));
    // M = 0 writes nothing; bad shapes are typed errors and write nothing.
    let packed = vec![0u16; hetero_sme::packed_len(4, n)];
    let w = PackedRef::new(&packed, 4, n, PackedFormat::F16).unwrap();
    let a = [1.0f32; 8];
    let mut c = vec![f32::from_bits(GUARD); 2 * n];
    let g0 = Gemm {
        a: Lhs::F32(&a),
        m: 0,
        lda: 4,
        w,
        bias: None,
        accumulate: false,
    };
    Neon::new().gemm(&g0, &mut c, n).unwrap();
    let bad_lda = Gemm { m: 2, lda: 3, ..g0 };
    assert!(matches!(
        Neon::new().gemm(&bad_lda, &mut c, n),
        Err(Error::BadStride { .. })
    ));
    let short_a = Gemm {
        a: Lhs::F32(&a[..5]),
        m: 2,
        ..g0
    };
    assert!(matches!(
        Neon::new().gemm(&short_a, &mut c, n),
        Err(Error::BufferTooSmall { .. })
    ));
    let ok = Gemm { m: 2, ..g0 };
    assert!(matches!(
        Neon::new().gemm(&ok, &mut c[..n + 5], n),
        Err(Error::BufferTooSmall { .. })
    ));
    let short_bias = Gemm {
        bias: Some(&bias[..5]),
        ..ok
    };
    assert!(matches!(
        Neon::new().gemm(&short_bias, &mut c, n),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(c.iter().all(|v| v.to_bits() == GUARD), "written on error");
}
