//! Every CPU kernel against a naive f64 reference, on random data over edge shapes and every
//! supported tensor type. Outputs are poisoned with NaN before each run.

use std::sync::Arc;

use engine_min::backend::{Backend, CpuBackend, CpuKernel, WeightView};
use engine_min::gguf::GgmlType;
use engine_min::pool::Pool;
use engine_min::reference::dequantize_bytes;
use engine_min::sample::{argmax, Sampler, SamplerOptions};
use half::{bf16, f16};
use rand::{Rng, SeedableRng};

fn random_weight(rng: &mut impl Rng, ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let f16b = |v: f32| f16::from_f32(v).to_le_bytes();
    for _ in 0..n {
        match ty {
            GgmlType::F32 => {
                (0..k).for_each(|_| out.extend(rng.gen_range(-1.0f32..1.0).to_le_bytes()))
            }
            GgmlType::F16 => (0..k).for_each(|_| out.extend(f16b(rng.gen_range(-1.0..1.0)))),
            GgmlType::BF16 => (0..k)
                .for_each(|_| out.extend(bf16::from_f32(rng.gen_range(-1.0..1.0)).to_le_bytes())),
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => {
                for _ in 0..k / 32 {
                    out.extend(f16b(rng.gen_range(-0.1..0.1)));
                    match ty {
                        GgmlType::Q4_0 => (0..16).for_each(|_| out.push(rng.gen())),
                        GgmlType::Q4_1 => {
                            out.extend(f16b(rng.gen_range(-0.5..0.5)));
                            (0..16).for_each(|_| out.push(rng.gen()));
                        }
                        _ => (0..32).for_each(|_| out.push(rng.gen())),
                    }
                }
            }
            _ => unreachable!(),
        }
    }
    out
}

#[test]
fn every_kernel_matches_reference() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let pool = Arc::new(Pool::new(2));
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ];
    for kernel in CpuKernel::all() {
        let be = CpuBackend::new(Arc::clone(&pool), kernel);
        assert_eq!(be.kernel(), kernel);
        for ty in types {
            for &(n, k) in &[
                (1, 32),
                (3, 64),
                (4, 96),
                (5, 576),
                (33, 64),
                (70, 1536),
                (129, 32),
            ] {
                let data = random_weight(&mut rng, ty, n, k);
                let wf = dequantize_bytes(ty, n * k, &data);
                let w = WeightView {
                    ty,
                    n,
                    k,
                    data: &data,
                };
                for m in [1, 2, 3, 4, 5, 9] {
                    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
                    let mut out = vec![f32::NAN; m * n];
                    be.matmul(&w, &x, m, &mut out).expect("matmul");
                    for t in 0..m {
                        for r in 0..n {
                            let (mut s, mut mag) = (0f64, 0f64);
                            for i in 0..k {
                                let p = f64::from(wf[r * k + i]) * f64::from(x[t * k + i]);
                                s += p;
                                mag += p.abs();
                            }
                            // f32 accumulation of k products: error below k * eps * sum|p|
                            // in the worst case, far less in practice; 1e-5 * sum|p| (k <= 1536)
                            // leaves room for reordering while catching any wrong element.
                            let got = f64::from(out[t * n + r]);
                            assert!(
                                (got - s).abs() <= 1e-5 * mag + 1e-6,
                                "{kernel:?} {ty:?} n={n} k={k} m={m} t={t} r={r}: {got} vs {s}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_rejects_bad_shapes() {
    let pool = Arc::new(Pool::new(1));
    let be = CpuBackend::new(pool, CpuKernel::Portable);
    let data = vec![0u8; 20];
    let w = WeightView {
        ty: GgmlType::Q4_1,
        n: 1,
        k: 32,
        data: &data,
    };
    let mut out = vec![0f32; 1];
    assert!(be.matmul(&w, &[0.0; 31], 1, &mut out).is_err());
    assert!(be.matmul(&w, &[0.0; 32], 1, &mut [0.0; 2]).is_err());
    let w2 = WeightView {
        ty: GgmlType::Q4K,
        n: 1,
        k: 256,
        data: &[0u8; 144],
    };
    assert!(be.matmul(&w2, &[0.0; 256], 1, &mut out).is_err());
    let w3 = WeightView {
        ty: GgmlType::Q4_1,
        n: 2,
        k: 32,
        data: &data,
    };
    assert!(be.matmul(&w3, &[0.0; 32], 1, &mut [0.0; 2]).is_err());
}

#[test]
fn pool_runs_every_task_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for threads in 1..=3 {
        let pool = Pool::new(threads);
        for n in [0, 1, 2, 7, 100] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|t, th| {
                assert!(th < threads);
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }
}

#[test]
fn sampler_greedy_and_seeded() {
    let logits = [0.1f32, 3.0, f32::NAN, 2.9, -1.0];
    assert_eq!(argmax(&logits), 1);
    let mut g = Sampler::new(5, SamplerOptions::default());
    assert_eq!(g.sample(&logits), 1);
    // A tiny nucleus keeps only the top token.
    let mut s = Sampler::new(
        5,
        SamplerOptions {
            temperature: 1.0,
            top_p: 0.01,
            seed: 3,
        },
    );
    for _ in 0..20 {
        assert_eq!(s.sample(&logits), 1);
    }
    // Same seed, same draws; draws follow the softmax roughly.
    let opts = SamplerOptions {
        temperature: 1.0,
        top_p: 1.0,
        seed: 9,
    };
    let (mut a, mut b) = (Sampler::new(5, opts), Sampler::new(5, opts));
    let mut counts = [0usize; 5];
    for _ in 0..4000 {
        let x = a.sample(&logits);
        assert_eq!(x, b.sample(&logits));
        counts[x as usize] += 1;
    }
    assert_eq!(counts[2], 0, "NaN logit never sampled");
    // p(1) = e^3 / (e^0.1 + e^3 + e^2.9 + e^-1) ~ 0.50; p(3) ~ 0.45.
    assert!((1700..2300).contains(&counts[1]), "{counts:?}");
    assert!((1500..2100).contains(&counts[3]), "{counts:?}");
}

/// The quantized path: weights repacked, activations rounded to 8 bits per block. Checked
/// against the exact f64 product with the rigorous rounding bound, and every quantized kernel
/// against the portable integer loop.
#[test]
fn quantized_kernels_match() {
    use engine_min::backend::qdot;
    use engine_min::qkernel::{PackedWeight, QuantActs};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let pool = Arc::new(Pool::new(2));
    let kernels: Vec<CpuKernel> = CpuKernel::all();
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        for &(n, k) in &[(1, 64), (3, 128), (4, 576), (5, 64), (33, 1536), (70, 576)] {
            let data = random_weight(&mut rng, ty, n, k);
            let wf = dequantize_bytes(ty, n * k, &data);
            let packed = PackedWeight::pack(ty, n, k, &data).expect("packs");
            // Packing is lossless: d * u + m reproduces every weight.
            for r in 0..n {
                for i in 0..k {
                    let b = i / 32;
                    // f32 evaluation of d*u + m, as the reference evaluates it.
                    let v = packed.d_at(r, b) * f32::from(packed.u_at(r, i)) + packed.m_at(r, b);
                    let want = wf[r * k + i];
                    assert!(
                        (v - want).abs() <= 1e-6 * want.abs().max(1.0),
                        "{ty:?} pack"
                    );
                }
            }
            let w = WeightView {
                ty,
                n,
                k,
                data: &data,
            };
            for m in [1, 2, 3, 4, 5, 9] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
                let mut acts = QuantActs::with_capacity(m, k);
                acts.quantize(&x, m, k);
                for &kernel in &kernels {
                    let mut be = CpuBackend::new(Arc::clone(&pool), kernel);
                    engine_min::backend::Backend::prepare(&mut be, &w).expect("prepare");
                    let mut out = vec![f32::NAN; m * n];
                    be.matmul(&w, &x, m, &mut out).expect("matmul");
                    let quantized = be.packed_count() == 1;
                    for t in 0..m {
                        for r in 0..n {
                            let (mut s, mut mag, mut bound) = (0f64, 0f64, 0f64);
                            for i in 0..k {
                                let wi = f64::from(wf[r * k + i]);
                                let p = wi * f64::from(x[t * k + i]);
                                s += p;
                                mag += p.abs();
                                // |x - dx * qx| <= dx / 2 per element.
                                let dx =
                                    f64::from(acts.d[t * engine_min::qkernel::dstride(k) + i / 32]);
                                bound += wi.abs() * dx / 2.0;
                            }
                            let got = f64::from(out[t * n + r]);
                            let allowed = if quantized { bound } else { 0.0 } + 1e-5 * mag + 1e-5;
                            assert!(
                                (got - s).abs() <= allowed,
                                "{kernel:?} {ty:?} n={n} k={k} m={m}: {got} vs {s} (bound {allowed})"
                            );
                        }
                    }
                    if quantized {
                        // Same integers as the portable loop: agreement to float rounding.
                        for t0 in (0..m).step_by(4) {
                            let mr = (m - t0).min(4);
                            for r0 in (0..n).step_by(4) {
                                let nr = (n - r0).min(4);
                                let mut a = [[f32::NAN; 4]; 4];
                                let mut b = [[f32::NAN; 4]; 4];
                                qdot(CpuKernel::Portable, &packed, r0, nr, &acts, t0, mr, &mut a);
                                qdot(kernel, &packed, r0, nr, &acts, t0, mr, &mut b);
                                for t in 0..mr {
                                    for r in 0..nr {
                                        // Both sum the same integers; they differ only in the
                                        // order of f32 operations over terms d*u*x and m*x
                                        // that cancel (Q8_0's m = -128 d): allow 1e-5 of the
                                        // terms' magnitude.
                                        let (row, tok) = (r0 + r, t0 + t);
                                        let mag: f32 = (0..k)
                                            .map(|i| {
                                                (packed.d_at(row, i / 32).abs()
                                                    * f32::from(packed.u_at(row, i))
                                                    + packed.m_at(row, i / 32).abs())
                                                    * x[tok * k + i].abs()
                                            })
                                            .sum();
                                        let tol = 1e-5 * mag + 1e-6;
                                        assert!((a[t][r] - b[t][r]).abs() <= tol, "{kernel:?} {ty:?} n={n} k={k} m={m} r0={r0} t0={t0} t={t} r={r}: {} vs {}", a[t][r], b[t][r]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
