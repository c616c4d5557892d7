//! Every CPU kernel against a naive f64 reference, on random data over edge shapes and every
//! supported tensor type. Outputs are poisoned with NaN before each run.

use std::sync::Arc;

use engine_min::backend::{Backend, CpuBackend, CpuKernel, WeightView};
use engine_min::gguf::GgmlType;
use engine_min::reference::dequantize_bytes;
use engine_min::sample::{argmax, Sampler, SamplerOptions};
use half::{bf16, f16};
use hetero_sme::ThreadPool as Pool;
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
            // The other block types: random values through hetero-sme's quantizer.
            t => {
                let x: Vec<f32> = (0..k).map(|_| rng.gen_range(-0.5f32..0.5)).collect();
                let mut row = vec![0u8; t.row_bytes(k).expect("whole blocks")];
                hetero_sme::quantize_row(t, &x, &mut row).expect("quantizable type");
                out.extend(row);
            }
        }
    }
    out
}

#[test]
fn every_kernel_matches_reference() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let pool = Arc::new(Pool::new(2).expect("pool"));
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ];
    for kernel in CpuKernel::all() {
        let mut be = CpuBackend::new(Arc::clone(&pool), kernel);
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
                let id = be.prepare(&w).expect("prepare");
                be.reserve(9, k).expect("reserve");
                for m in [1, 2, 3, 4, 5, 9] {
                    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
                    let mut out = vec![f32::NAN; m * n];
                    be.matmul(id, &x, m, &mut out, n).expect("matmul");
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
                            // leaves room for reordering while catching any wrong element. The
                            // int8 path also rounds each activation to its block's 8-bit grid
                            // (step d = amax/127): it moves by at most d/2, so the product by
                            // at most sum_i |w_i| d_i / 2.
                            // The decompression GEMM rounds each weight and activation to
                            // BF16 (2^-8 relative each; FP16 is finer): 2^-7 * sum|p| covers
                            // both, and the f32 sum beside it.
                            // BF16 weights under the hetero-sme kernels run on the packed tile
                            // GEMM, which on AMX rounds the activations to BF16 too (as
                            // llama.cpp's BF16 dot products do): 2^-9 relative each, so
                            // 2^-8 * sum|p| with room for the f32 sums.
                            let q8 = quantized(ty) && uses_int8(kernel, m);
                            let bound = if (quantized(ty) && uses_dq(kernel, m))
                                || (ty == GgmlType::BF16 && packed_rounds_a(kernel))
                            {
                                mag / 128.0
                            } else if q8 {
                                (0..k)
                                    .map(|i| {
                                        f64::from(wf[r * k + i]).abs() * block_step(&x[t * k..], i)
                                            / 2.0
                                    })
                                    .sum::<f64>()
                            } else {
                                0.0
                            };
                            let got = f64::from(out[t * n + r]);
                            assert!(
                                (got - s).abs() <= bound + 1e-5 * mag + 1e-6,
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
fn bad_weights_and_shapes_are_typed_errors() {
    use engine_min::backend::BackendError;
    let pool = Arc::new(Pool::new(1).expect("pool"));
    let mut be = CpuBackend::new(pool, CpuKernel::Portable);
    let data = vec![0u8; 20];
    let w = WeightView {
        ty: GgmlType::Q4_1,
        n: 1,
        k: 32,
        data: &data,
    };
    let id = be.prepare(&w).expect("prepare");
    let mut out = vec![0f32; 1];
    assert!(matches!(
        be.matmul(id, &[0.0; 31], 1, &mut out, 1),
        Err(BackendError::Shape(_))
    ));
    assert!(be.matmul(id, &[0.0; 64], 2, &mut [0.0; 1], 1).is_err());
    assert!(
        be.matmul(id, &[0.0; 64], 2, &mut [0.0; 2], 0).is_err(),
        "ldo below n"
    );
    assert!(be.matmul(id, &[0.0; 32], 1, &mut out, 1).is_ok());
    // A type no kernel computes, and bytes that are not `n` rows of the type.
    let w2 = WeightView {
        ty: GgmlType::I32,
        n: 1,
        k: 32,
        data: &[0u8; 128],
    };
    assert!(matches!(
        be.prepare(&w2),
        Err(BackendError::Unsupported(GgmlType::I32))
    ));
    let w3 = WeightView {
        ty: GgmlType::Q4_1,
        n: 2,
        k: 32,
        data: &data,
    };
    assert!(matches!(be.prepare(&w3), Err(BackendError::Shape(_))));
    assert_eq!(be.prepared_count(), 1, "refused weights are not kept");
    // An id another backend handed out.
    let mut be2 = CpuBackend::new(Arc::new(Pool::new(1).expect("pool")), CpuKernel::Portable);
    for _ in 0..3 {
        be2.prepare(&w).expect("prepare");
    }
    let foreign = be2.prepare(&w).expect("prepare");
    assert_eq!(
        be.matmul(foreign, &[0.0; 32], 1, &mut out, 1),
        Err(BackendError::UnknownWeight(foreign))
    );
}

#[test]
fn pool_runs_every_task_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for threads in 1..=3 {
        let pool = Pool::new(threads).expect("pool");
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

/// Whether `kernel` runs BF16 weights on hetero-sme's packed tile GEMM with a kernel that
/// rounds the activations to BF16 (AMX-BF16, where the CPU has it).
fn packed_rounds_a(kernel: CpuKernel) -> bool {
    let packs = !matches!(kernel, CpuKernel::Portable) && kernel.name() != "avx512";
    packs
        && hetero_sme::Kernel::best(hetero_sme::PackedFormat::Bf16).kind()
            == hetero_sme::KernelKind::Amx
}

fn quantized(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
}

/// Whether `kernel` runs an `m`-row quantized matmul through hetero-sme's int8 GEMM (the
/// decompression kernel does below its crossover, and everywhere on a CPU where it never wins).
fn uses_int8(kernel: CpuKernel, m: usize) -> bool {
    kernel == CpuKernel::Int8
        || (kernel == CpuKernel::Sme && m >= engine_min::backend::SME_GEMM_MIN_ROWS)
        || (kernel == CpuKernel::Dq && !uses_dq(kernel, m))
}

/// Whether `kernel` runs an `m`-row quantized matmul through hetero-sme's decompression GEMM
/// (weights and activations rounded to BF16 or FP16).
fn uses_dq(kernel: CpuKernel, m: usize) -> bool {
    kernel == CpuKernel::Dq
        // The pool above has 2 threads.
        && engine_min::backend::dq_min_rows(hetero_sme::DqKernel::best(), 2)
            .is_some_and(|t| m >= t)
}

/// The 8-bit grid step of the 32-element block of `row` holding element `i`: amax / 127.
fn block_step(row: &[f32], i: usize) -> f64 {
    let b = i / 32 * 32;
    let amax = row[b..b + 32].iter().fold(0f32, |a, v| a.max(v.abs()));
    f64::from(amax) / 127.0
}

/// The backend's hetero-sme paths spread their tiles over the pool by work stealing: the
/// result must be bit-identical to the same hetero-sme kernel run single-threaded (tiles write
/// disjoint outputs and a tile's result does not depend on who runs it), for every token count
/// (tokens go in groups of 16 through the GEMV).
#[test]
fn sme_paths_equal_single_threaded_sme() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let pool = Arc::new(Pool::new(3).expect("pool"));
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ] {
        for &(n, k) in &[(1, 64), (33, 1536), (70, 576), (200, 96), (17, 512)] {
            if ty.row_bytes(k).is_none() {
                continue; // K-quants need whole 256-value super-blocks
            }
            let data = random_weight(&mut rng, ty, n, k);
            let w = WeightView {
                ty,
                n,
                k,
                data: &data,
            };
            let mut packed = vec![0u8; hetero_sme::qpacked_len(ty, k, n).unwrap()];
            hetero_sme::qpack_gguf(ty, &data, k, n, 0..n, &mut packed).unwrap();
            let int8 = hetero_sme::Int8Weight::pack_gguf(ty, &data, n, k).unwrap();
            let pw = hetero_sme::QPackedRef::new(&packed, ty, k, n).unwrap();
            for kernel in [CpuKernel::SmeGemv, CpuKernel::Int8, CpuKernel::Sme] {
                let mut be = CpuBackend::new(Arc::clone(&pool), kernel);
                let id = be.prepare(&w).expect("prepare");
                be.reserve(40, k).expect("reserve");
                assert_eq!(be.prepared_count(), 1);
                for m in [1, 2, 3, 4, 5, 16, 17, 40] {
                    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
                    let mut got = vec![f32::NAN; m * n];
                    be.matmul(id, &x, m, &mut got, n).expect("matmul");
                    let mut want = vec![f32::NAN; m * n];
                    if uses_int8(kernel, m) {
                        let mut acts = hetero_sme::QActs::with_capacity(m, k);
                        hetero_sme::quantize_acts_for(&x, m, k, int8.act_blocks(), &mut acts)
                            .unwrap();
                        hetero_sme::int8_gemm(&int8, &acts, &mut want, n).unwrap();
                    } else {
                        for t0 in (0..m).step_by(16) {
                            let mm = (m - t0).min(16);
                            hetero_sme::gemv_qpacked(
                                &x[t0 * k..(t0 + mm) * k],
                                mm,
                                pw,
                                &mut want[t0 * n..(t0 + mm) * n],
                                n,
                            )
                            .unwrap();
                        }
                    }
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{kernel:?} {ty:?} n={n} k={k} m={m}");
                }
            }
        }
    }
}

/// Rows `ldo` apart (one side of a column split writing its columns of a shared output in
/// place), as a plain strided slice and as a uma view of some columns of a wider matrix, give
/// every kernel's contiguous result bit for bit and leave the floats between rows untouched; a
/// too-short output or `ldo < n` is a typed error.
#[test]
fn strided_output_equals_contiguous() {
    use hetero_uma::{Block, MatrixLayout};
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let pool = Arc::new(Pool::new(2).expect("pool"));
    let uma = hetero_uma::Pool::new(hetero_uma::PoolConfig {
        slots: 1,
        slot_size: hetero_uma::round_slot_size(17 * 80 * 4).unwrap(),
    })
    .unwrap();
    for kernel in CpuKernel::all() {
        for ty in [GgmlType::F32, GgmlType::Q4_1, GgmlType::Q8_0] {
            let (n, k) = (70, 576);
            let data = random_weight(&mut rng, ty, n, k);
            let w = WeightView {
                ty,
                n,
                k,
                data: &data,
            };
            let mut be = CpuBackend::new(Arc::clone(&pool), kernel);
            let id = be.prepare(&w).expect("prepare");
            be.reserve(17, k).expect("reserve");
            for m in [1, 3, 17] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
                let mut want = vec![f32::NAN; m * n];
                be.matmul(id, &x, m, &mut want, n).expect("matmul");
                let ldo = n + 5;
                let mut got = vec![f32::NAN; (m - 1) * ldo + n];
                be.matmul(id, &x, m, &mut got, ldo).expect("strided matmul");
                for t in 0..m {
                    for j in 0..ldo {
                        let g = got.get(t * ldo + j).copied();
                        match (j < n, g) {
                            (true, Some(g)) => assert_eq!(
                                g.to_bits(),
                                want[t * n + j].to_bits(),
                                "{kernel:?} {ty:?} m={m} t={t} j={j}"
                            ),
                            (false, Some(g)) => assert!(g.is_nan(), "gap written: t={t} j={j}"),
                            (_, None) => {}
                        }
                    }
                }
                let short = (m - 1) * ldo + n - 1;
                assert!(be.matmul(id, &x, m, &mut got[..short], ldo).is_err());
                assert!(be.matmul(id, &x, m, &mut got, n - 1).is_err());
                // Columns 5..75 of an m x 80 matrix in a uma slot, through the view path.
                let mut h = uma.acquire().unwrap();
                uma.f32s_mut(&mut h).unwrap().fill(f32::NAN);
                {
                    let [mut v] = uma
                        .split_blocks(
                            &mut h,
                            MatrixLayout::dense(m, 80, 4),
                            [Block {
                                rows: 0..m,
                                cols: 5..75,
                            }],
                        )
                        .unwrap();
                    be.matmul_view(id, &x, m, &mut v).expect("view matmul");
                }
                let f = uma.f32s(&h).unwrap();
                for t in 0..m {
                    for j in 0..80 {
                        let g = f[t * 80 + j];
                        if (5..75).contains(&j) {
                            assert_eq!(
                                g.to_bits(),
                                want[t * n + j - 5].to_bits(),
                                "view t={t} j={j}"
                            );
                        } else {
                            assert!(g.is_nan(), "view wrote outside its columns: t={t} j={j}");
                        }
                    }
                }
                uma.release(h).unwrap();
            }
        }
    }
}

/// `matmul_group` (a layer's Q/K/V or gate/up as one pool job) gives each weight's
/// `Backend::matmul` result bit for bit, for every kernel, same-format and mixed groups (one
/// activation quantization serving per-32 and per-256 formats), decode and prefill row counts
/// and groups of two and three; a group above `MAX_GROUP` is a typed error.
#[test]
fn matmul_group_equals_each_matmul() {
    use engine_min::backend::cpu::MAX_GROUP;
    use engine_min::backend::BackendError;
    let mut rng = rand::rngs::StdRng::seed_from_u64(19);
    let pool = Arc::new(Pool::new(3).expect("pool"));
    let k = 512;
    let groups: [&[(GgmlType, usize)]; 3] = [
        &[
            (GgmlType::Q4_1, 70),
            (GgmlType::Q4_1, 33),
            (GgmlType::Q4_1, 33),
        ],
        &[
            (GgmlType::Q8_0, 64),
            (GgmlType::Q4K, 17),
            (GgmlType::Q4_0, 200),
        ],
        &[(GgmlType::Q4_1, 96), (GgmlType::F16, 5)],
    ];
    for kernel in CpuKernel::all() {
        let mut be = CpuBackend::new(Arc::clone(&pool), kernel);
        be.reserve(40, k).expect("reserve");
        for shapes in groups {
            let datas: Vec<Vec<u8>> = shapes
                .iter()
                .map(|&(ty, n)| random_weight(&mut rng, ty, n, k))
                .collect();
            let ids: Vec<_> = shapes
                .iter()
                .zip(&datas)
                .map(|(&(ty, n), data)| {
                    be.prepare(&WeightView { ty, n, k, data }).expect("prepare")
                })
                .collect();
            for m in [1, 4, 17, 40] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-2.0..2.0)).collect();
                let want: Vec<Vec<f32>> = shapes
                    .iter()
                    .zip(&ids)
                    .map(|(&(_, n), &id)| {
                        let mut o = vec![f32::NAN; m * n];
                        be.matmul(id, &x, m, &mut o, n).expect("matmul");
                        o
                    })
                    .collect();
                let mut outs: Vec<Vec<f32>> =
                    shapes.iter().map(|&(_, n)| vec![f32::NAN; m * n]).collect();
                let mut group: Vec<_> = ids
                    .iter()
                    .copied()
                    .zip(outs.iter_mut().map(|o| o.as_mut_slice()))
                    .collect();
                be.matmul_group(&mut group, &x, m).expect("matmul_group");
                for (i, (got, want)) in outs.iter().zip(&want).enumerate() {
                    let same = got
                        .iter()
                        .zip(want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{kernel:?} group {shapes:?} member {i} m={m}");
                }
            }
            let mut outs: Vec<Vec<f32>> = (0..=MAX_GROUP).map(|_| vec![0f32; 200]).collect();
            let mut too_many: Vec<_> = (0..=MAX_GROUP)
                .map(|i| ids[i % ids.len()])
                .zip(outs.iter_mut().map(|o| o.as_mut_slice()))
                .collect();
            let x = vec![0f32; k];
            assert!(matches!(
                be.matmul_group(&mut too_many, &x, 1),
                Err(BackendError::Shape(_))
            ));
        }
    }
}
