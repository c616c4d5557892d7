//! Quantized and FP16 GEMV, every implementation, against an f64 reference.
//!
//! Tolerance: the reference dequantizes each block exactly as GGUF defines it (in f64 from the
//! FP16 scale) and sums in f64; the kernels dequantize in FP32 (one rounding per value, the
//! Q4 `q*d+m` form may fuse) and accumulate K terms in FP32, so the error is at most about
//! (K+2)·u·Σ|x w| with u = 2^-24; we allow twice that.

mod common;

use common::*;
use hetero_sme::*;

fn f16v(x: u16) -> f64 {
    half::f16::from_bits(x).to_f64()
}

fn ref_q40(b: &BlockQ4_0) -> [f64; 32] {
    let d = f16v(b.d);
    let mut o = [0f64; 32];
    for i in 0..16 {
        o[i] = ((b.qs[i] & 15) as f64 - 8.0) * d;
        o[i + 16] = ((b.qs[i] >> 4) as f64 - 8.0) * d;
    }
    o
}

fn ref_q41(b: &BlockQ4_1) -> [f64; 32] {
    let (d, m) = (f16v(b.d), f16v(b.m));
    let mut o = [0f64; 32];
    for i in 0..16 {
        o[i] = (b.qs[i] & 15) as f64 * d + m;
        o[i + 16] = (b.qs[i] >> 4) as f64 * d + m;
    }
    o
}

fn ref_q80(b: &BlockQ8_0) -> [f64; 32] {
    let d = f16v(b.d);
    let mut o = [0f64; 32];
    for (o, &q) in o.iter_mut().zip(b.qs.iter()) {
        *o = q as f64 * d;
    }
    o
}

#[allow(clippy::too_many_arguments)]
fn check(
    name: &str,
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    wdeq: &dyn Fn(usize, usize) -> [f64; 32],
    y: &[f32],
    ldy: usize,
) {
    let u = 2f64.powi(-24);
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0f64, 0f64);
            for b in 0..k / 32 {
                let w = wdeq(j, b);
                for t in 0..32 {
                    let p = x[i * k + b * 32 + t] as f64 * w[t];
                    s += p;
                    mag += p.abs();
                }
            }
            let tol = 2.0 * (k as f64 + 2.0) * u * mag + 1e-30;
            let got = y[i * ldy + j] as f64;
            assert!(
                (got - s).abs() <= tol,
                "{name} m{m} k{k} n{n}: y[{i}][{j}] = {got}, want {s} (tol {tol})"
            );
        }
        for j in n..ldy {
            assert!(
                y[i * ldy + j].is_nan(),
                "{name}: padding y[{i}][{j}] written"
            );
        }
    }
}

fn rand_d(rng: &mut Rng) -> u16 {
    f16_bits(rng.f32() * 0.05)
}

#[test]
fn quantized_every_kernel() {
    let ms = [1, 2, 3, 4, 5, 8, 9, 15, 16];
    let ks = [32, 64, 96, 576, 1536];
    let ns = [1, 2, 15, 17, 64, 65, 129];
    let mut rng = Rng::new(3);
    for kernel in kernels() {
        for (ci, &m) in ms.iter().enumerate() {
            for (ck, &k) in ks.iter().enumerate() {
                let n = ns[(ci + ck) % ns.len()];
                let ldy = n + (ci % 2) * 3;
                let x = rng.vec(m * k);
                let nb = k / 32;
                let w40: Vec<BlockQ4_0> = (0..n * nb)
                    .map(|_| BlockQ4_0 {
                        d: rand_d(&mut rng),
                        qs: core::array::from_fn(|_| rng.next_u64() as u8),
                    })
                    .collect();
                let w41: Vec<BlockQ4_1> = (0..n * nb)
                    .map(|_| BlockQ4_1 {
                        d: rand_d(&mut rng),
                        m: rand_d(&mut rng),
                        qs: core::array::from_fn(|_| rng.next_u64() as u8),
                    })
                    .collect();
                let w80: Vec<BlockQ8_0> = (0..n * nb)
                    .map(|_| BlockQ8_0 {
                        d: rand_d(&mut rng),
                        qs: core::array::from_fn(|_| rng.next_u64() as i8),
                    })
                    .collect();
                let mut y = vec![f32::NAN; m * ldy];
                let g = QGemv {
                    x: &x,
                    m,
                    k,
                    w: QWeights::Q4_0(&w40),
                };
                kernel.qgemv(&g, &mut y, ldy).unwrap();
                check(
                    kernel.name(),
                    &x,
                    m,
                    k,
                    n,
                    &|j, b| ref_q40(&w40[j * nb + b]),
                    &y,
                    ldy,
                );
                y.fill(f32::NAN);
                let g = QGemv {
                    x: &x,
                    m,
                    k,
                    w: QWeights::Q4_1(&w41),
                };
                kernel.qgemv(&g, &mut y, ldy).unwrap();
                check(
                    kernel.name(),
                    &x,
                    m,
                    k,
                    n,
                    &|j, b| ref_q41(&w41[j * nb + b]),
                    &y,
                    ldy,
                );
                y.fill(f32::NAN);
                let g = QGemv {
                    x: &x,
                    m,
                    k,
                    w: QWeights::Q8_0(&w80),
                };
                kernel.qgemv(&g, &mut y, ldy).unwrap();
                check(
                    kernel.name(),
                    &x,
                    m,
                    k,
                    n,
                    &|j, b| ref_q80(&w80[j * nb + b]),
                    &y,
                    ldy,
                );
            }
        }
    }
}

#[test]
fn top_level_gemv_matches_kernel_and_packed_gemv() {
    let mut rng = Rng::new(4);
    let (m, k, n) = (3, 64, 70);
    let x = rng.vec(m * k);
    let w: Vec<BlockQ4_0> = (0..n * 2)
        .map(|_| BlockQ4_0 {
            d: rand_d(&mut rng),
            qs: core::array::from_fn(|_| rng.next_u64() as u8),
        })
        .collect();
    let mut y = vec![f32::NAN; m * n];
    gemv_q4_0(&x, m, k, &w, &mut y, n).unwrap();
    check(
        "top-level",
        &x,
        m,
        k,
        n,
        &|j, b| ref_q40(&w[j * 2 + b]),
        &y,
        n,
    );
    // The same weight dequantized, as FP16 column-major (GGUF layout), packed: gemv_packed.
    let mut deq = vec![0u16; n * k];
    for j in 0..n {
        for b in 0..2 {
            for (t, v) in w[j * 2 + b].dequantize().iter().enumerate() {
                deq[j * k + b * 32 + t] = f16_bits(*v);
            }
        }
    }
    let mut packed = vec![0u16; packed_len(k, n)];
    let src = WeightSource {
        data: &deq,
        k,
        n,
        ld: k,
        layout: Layout::ColMajor,
    };
    pack_f16(&src, 0..n, PackedFormat::F16, &mut packed).unwrap();
    let mut y2 = vec![f32::NAN; m * n];
    gemv_packed(
        &x,
        m,
        PackedRef::new(&packed, k, n, PackedFormat::F16).unwrap(),
        &mut y2,
        n,
    )
    .unwrap();
    for (a, b) in y.iter().zip(&y2) {
        // FP16 rounding of the dequantized weights (Q4 values are d*small-int; the product
        // is exact in FP16 only when d's mantissa is short), so compare loosely.
        assert!((a - b).abs() <= 1e-2 * (1.0 + a.abs()), "{a} vs {b}");
    }
}

#[test]
fn block_bytes_roundtrip_and_alignment() {
    let mut bytes = [0u8; 2 * 18 + 1];
    bytes[1] = 0x3c; // d = 1.0 (0x3c00) little-endian at offset 0..2 of the aligned view
    let base = if (bytes.as_ptr() as usize).is_multiple_of(2) {
        0
    } else {
        1
    };
    let ok = &bytes[base..base + 36];
    let blocks = BlockQ4_0::slice_from_bytes(ok).unwrap();
    assert_eq!(blocks.len(), 2);
    let bad = &bytes[1 - base..1 - base + 36];
    assert!(matches!(
        BlockQ4_0::slice_from_bytes(bad),
        Err(Error::Misaligned { align: 2, .. })
    ));
    assert!(matches!(
        BlockQ8_0::slice_from_bytes(&ok[..35]),
        Err(Error::ShapeMismatch { .. })
    ));
}

/// Batch invariance: a row's result must not depend on how many other rows share the call
/// (engine-min's agents test compares decode results across batch sizes bit for bit). For every
/// kernel and quant type, row i of an M-row GEMV (M = 1..16) is bitwise equal to the M = 1 GEMV
/// of that row alone. K covers a partial scale chunk (96 = 3 blocks), a full chunk plus one
/// block (544 = 17) and 48 blocks; N = 37 covers 8-, 4- and 1-row weight groups.
#[test]
fn quantized_rows_independent_of_m() {
    let mut rng = Rng::new(11);
    let n = 37;
    for kernel in kernels() {
        for k in [96, 544, 1536] {
            let nb = k / 32;
            let x = rng.vec(16 * k);
            let w40: Vec<BlockQ4_0> = (0..n * nb)
                .map(|_| BlockQ4_0 {
                    d: rand_d(&mut rng),
                    qs: core::array::from_fn(|_| rng.next_u64() as u8),
                })
                .collect();
            let w41: Vec<BlockQ4_1> = (0..n * nb)
                .map(|_| BlockQ4_1 {
                    d: rand_d(&mut rng),
                    m: rand_d(&mut rng),
                    qs: core::array::from_fn(|_| rng.next_u64() as u8),
                })
                .collect();
            let w80: Vec<BlockQ8_0> = (0..n * nb)
                .map(|_| BlockQ8_0 {
                    d: rand_d(&mut rng),
                    qs: core::array::from_fn(|_| rng.next_u64() as i8),
                })
                .collect();
            for w in [
                QWeights::Q4_0(&w40),
                QWeights::Q4_1(&w41),
                QWeights::Q8_0(&w80),
            ] {
                // Each row alone (M = 1).
                let mut single = vec![f32::NAN; 16 * n];
                for i in 0..16 {
                    let g = QGemv {
                        x: &x[i * k..(i + 1) * k],
                        m: 1,
                        k,
                        w,
                    };
                    kernel
                        .qgemv(&g, &mut single[i * n..(i + 1) * n], n)
                        .unwrap();
                }
                for m in 1..=16 {
                    let mut y = vec![f32::NAN; m * n];
                    let g = QGemv {
                        x: &x[..m * k],
                        m,
                        k,
                        w,
                    };
                    kernel.qgemv(&g, &mut y, n).unwrap();
                    for (i, (a, b)) in y.iter().zip(&single).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{} k={k} m={m} row {} col {}: {a} (batched) vs {b} (alone)",
                            kernel.name(),
                            i / n,
                            i % n
                        );
                    }
                }
            }
        }
    }
}
