//! The `int8/` criterion group: the int8 GEMM (Q4_1 weights, activations quantized inside the
//! timed call) at M ∈ {1, 16, 128} on SmolLM2-135M's shapes, one and two threads, next to the
//! crate's AVX-512 FP16 GEMM (one thread, packed FP16 panels, f32 A) and, for M ≤ 16, the
//! Q4_1 GEMV (`gemv_q4_1`, one thread). Throughput "elements/s" = OP/s, 2·M·N·K per call.
//!
//! `cargo bench -p hetero-sme --bench sme -- int8/ --warm-up-time 1 --measurement-time 2`

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use hetero_sme::*;
use std::hint::black_box;

use super::anchor::rnd;

#[path = "pool.rs"]
mod pool;
use pool::Pool;

const SHAPES: [(usize, usize); 4] = [(576, 576), (576, 1536), (1536, 576), (576, 49152)];
const MS: [usize; 3] = [1, 16, 128];

fn q4_1_blocks(n: usize, k: usize) -> Vec<BlockQ4_1> {
    let mut s = 0x1234_5678u64;
    (0..n * k / 32)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            BlockQ4_1 {
                d: 0x2c00,
                m: 0xac00,
                qs: core::array::from_fn(|i| (s >> (i % 8 * 8)) as u8),
            }
        })
        .collect()
}

pub fn int8_benches(c: &mut Criterion) {
    let kernel = Int8Kernel::best();
    let mut g = c.benchmark_group("int8");
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    for &(k, n) in &SHAPES {
        let blocks = q4_1_blocks(n, k);
        let w = Int8Weight::pack_q4_1(&blocks, n, k).unwrap();
        let w32 = rnd(k * n, 1);
        let mut packed = vec![0u16; packed_len(k, n)];
        let src = WeightSource {
            data: &w32,
            k,
            n,
            ld: n,
            layout: Layout::RowMajor,
        };
        pack_f32(&src, 0..n, PackedFormat::F16, &mut packed).unwrap();
        drop(w32);
        let wf16 = PackedRef::new(&packed, k, n, PackedFormat::F16).unwrap();
        let fk = Kernel::best(PackedFormat::F16);
        for &m in &MS {
            let x = rnd(m * k, 2);
            let mut y = vec![0f32; m * n];
            let mut acts = QActs::with_capacity(m, k);
            let id = format!("m{m}_k{k}_n{n}");
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            let name1 = format!("{}-q4_1-1t", kernel.name());
            g.bench_function(BenchmarkId::new(name1, &id), |b| {
                b.iter(|| {
                    kernel
                        .quantize_acts(black_box(&x), m, k, &mut acts)
                        .unwrap();
                    kernel.gemm(&w, &acts, &mut y, n).unwrap();
                })
            });
            {
                let pool = Pool::new();
                let mut st = StealState::new(2).unwrap();
                let name2 = format!("{}-q4_1-2t", kernel.name());
                g.bench_function(BenchmarkId::new(name2, &id), |b| {
                    b.iter(|| {
                        kernel
                            .quantize_acts(black_box(&x), m, k, &mut acts)
                            .unwrap();
                        let plan = Int8Plan::new(kernel, &w, &acts, &mut y, n).unwrap();
                        st.prepare(plan.tiles()).unwrap();
                        let st = &st;
                        pool.run(&|wk| plan.run_worker(st, wk).unwrap());
                    })
                });
            }
            g.bench_function(
                BenchmarkId::new(format!("{}-f16-1t", fk.name()), &id),
                |b| {
                    b.iter(|| {
                        let gg = Gemm {
                            a: Lhs::F32(&x),
                            m,
                            lda: k,
                            w: wf16,
                            bias: None,
                            accumulate: false,
                        };
                        fk.gemm(black_box(&gg), &mut y, n).unwrap();
                    })
                },
            );
            if m <= GEMV_MAX_ROWS {
                g.bench_function(BenchmarkId::new("gemv-q4_1-1t", &id), |b| {
                    b.iter(|| gemv_q4_1(black_box(&x), m, k, &blocks, &mut y, n).unwrap())
                });
            }
        }
    }
    g.finish();
}
