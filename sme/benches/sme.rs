//! Criterion benches of the sme kernels against the `gemm` crate (f32 and f16 paths), single
//! thread (gemm with `Parallelism::None`), plus Q4_0 GEMV against the machine's read bandwidth
//! measured in the same run over a working set larger than the last-level cache.
//! A Q4_0 case on an L3-resident weight gives the kernel's compute ceiling for comparison.
//! The `gemv/pair-*` cases measure the machine level (2 cores): the packed Q4_0 GEMV at M = 1 and
//! the read probe, each with one thread and with two (work-stealing driver, persistent pool
//! thread), back to back in the same run:
//! `cargo bench -p hetero-sme --bench sme -- --warm-up-time 1 --measurement-time 2 'gemv/pair-'`
//!
//! `cargo bench -p hetero-sme --bench sme -- --warm-up-time 1 --measurement-time 2`
//! Throughput is reported as "elements/s" = FLOP/s (2·M·N·K per call) for GEMM, bytes/s for
//! GEMV and the bandwidth probe.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use hetero_sme::*;

#[path = "support/anchor.rs"]
mod anchor;
use anchor::{gemm_anchor, rnd};

#[path = "support/int8.rs"]
mod int8_bench;

// The int8 group's two-thread pool, reused (its module there is private to that group).
#[allow(clippy::duplicate_mod)]
#[path = "support/pool.rs"]
mod pool;

const SHAPES: [(usize, usize); 5] = [
    (576, 1536),
    (1536, 576),
    (4096, 4096),
    (4096, 14336),
    (14336, 4096),
];
const MS: [usize; 6] = [1, 4, 16, 64, 256, 1024];

fn gemm_benches(c: &mut Criterion) {
    let kernel = Kernel::best(PackedFormat::F16);
    let mut g = c.benchmark_group("gemm");
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    for &(k, n) in &SHAPES {
        let w32 = rnd(k * n, 1);
        let w16: Vec<half::f16> = w32.iter().map(|&x| half::f16::from_f32(x)).collect();
        let mut packed = vec![0u16; packed_len(k, n)];
        let src = WeightSource {
            data: &w32,
            k,
            n,
            ld: n,
            layout: Layout::RowMajor,
        };
        pack_f32(&src, 0..n, PackedFormat::F16, &mut packed).unwrap();
        let w = PackedRef::new(&packed, k, n, PackedFormat::F16).unwrap();
        for &m in &MS {
            // The two largest shapes at M = 1024 take seconds per call: trimmed.
            if m == 1024 && k * n > 4096 * 4096 {
                continue;
            }
            let a32 = rnd(m * k, 2);
            let a16: Vec<half::f16> = a32.iter().map(|&x| half::f16::from_f32(x)).collect();
            let mut c32 = vec![0f32; m * n];
            let mut c16 = vec![half::f16::ZERO; m * n];
            let id = format!("m{m}_k{k}_n{n}");
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            g.bench_function(BenchmarkId::new(kernel.name(), &id), |b| {
                b.iter(|| {
                    let gg = Gemm {
                        a: Lhs::F32(&a32),
                        m,
                        lda: k,
                        w,
                        bias: None,
                        accumulate: false,
                    };
                    kernel.gemm(black_box(&gg), &mut c32, n).unwrap();
                })
            });
            g.bench_function(BenchmarkId::new("gemm-f32", &id), |b| {
                b.iter(|| gemm_anchor(m, n, k, &a32, &w32, &mut c32, 0.0, 1.0))
            });
            g.bench_function(BenchmarkId::new("gemm-f16", &id), |b| {
                b.iter(|| {
                    gemm_anchor(
                        m,
                        n,
                        k,
                        &a16,
                        &w16,
                        &mut c16,
                        half::f16::ZERO,
                        half::f16::ONE,
                    )
                })
            });
        }
    }
    g.finish();
}

fn gemv_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("gemv");
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    // 4096 × 28672 Q4_0 = 66 MB of weights, twice the 32 MiB L3.
    let (k, n) = (4096, 28672);
    let nb = k / 32;
    let mut s = 0x1234_5678u64;
    let w: Vec<BlockQ4_0> = (0..n * nb)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            BlockQ4_0 {
                d: 0x2c00,
                qs: core::array::from_fn(|i| (s >> (i % 8 * 8)) as u8),
            }
        })
        .collect();
    let bytes = (w.len() * 18) as u64;
    for m in [1usize, 4, 16] {
        let x = rnd(m * k, 3);
        let mut y = vec![0f32; m * n];
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(BenchmarkId::new("q4_0", format!("m{m}_k{k}_n{n}")), |b| {
            b.iter(|| gemv_q4_0(black_box(&x), m, k, &w, &mut y, n).unwrap())
        });
    }
    // Q4_1 (the format of the test model) and Q8_0 at M = 1, same shape (75 / 125 MB).
    let x = rnd(k, 3);
    let mut y = vec![0f32; n];
    let w41: Vec<BlockQ4_1> = w
        .iter()
        .map(|b| BlockQ4_1 {
            d: b.d,
            m: 0xac00,
            qs: b.qs,
        })
        .collect();
    g.throughput(Throughput::Bytes((w41.len() * 20) as u64));
    g.bench_function(BenchmarkId::new("q4_1", format!("m1_k{k}_n{n}")), |b| {
        b.iter(|| gemv_q4_1(black_box(&x), 1, k, &w41, &mut y, n).unwrap())
    });
    drop(w41);
    let w80: Vec<BlockQ8_0> = w
        .iter()
        .map(|b| BlockQ8_0 {
            d: b.d,
            qs: core::array::from_fn(|i| b.qs[i % 16] as i8),
        })
        .collect();
    g.throughput(Throughput::Bytes((w80.len() * 34) as u64));
    g.bench_function(BenchmarkId::new("q8_0", format!("m1_k{k}_n{n}")), |b| {
        b.iter(|| gemv_q8_0(black_box(&x), 1, k, &w80, &mut y, n).unwrap())
    });
    drop(w80);
    // The packed (row-interleaved) format, packed once outside the timed loop, 64-byte aligned:
    // Q4_0 at M = 1, 4, 16, Q4_1 and Q8_0 at M = 1. GB/s count the packed bytes (the same bytes
    // per value as GGUF: FP16 scales).
    for (ty, name) in [
        (GgmlType::Q4_0, "q4_0-packed"),
        (GgmlType::Q4_1, "q4_1-packed"),
        (GgmlType::Q8_0, "q8_0-packed"),
    ] {
        let len = qpacked_len(ty, k, n).unwrap();
        let mut store = vec![0u8; len + 64];
        let off = store.as_ptr().align_offset(64);
        let buf = &mut store[off..off + len];
        match ty {
            GgmlType::Q4_0 => pack_q4_0(&w, k, n, 0..n, buf).unwrap(),
            GgmlType::Q4_1 => {
                let w41: Vec<BlockQ4_1> = w
                    .iter()
                    .map(|b| BlockQ4_1 {
                        d: b.d,
                        m: 0xac00,
                        qs: b.qs,
                    })
                    .collect();
                pack_q4_1(&w41, k, n, 0..n, buf).unwrap()
            }
            _ => {
                let w80: Vec<BlockQ8_0> = w
                    .iter()
                    .map(|b| BlockQ8_0 {
                        d: b.d,
                        qs: core::array::from_fn(|i| b.qs[i % 16] as i8),
                    })
                    .collect();
                pack_q8_0(&w80, k, n, 0..n, buf).unwrap()
            }
        }
        let pw = QPackedRef::new(buf, ty, k, n).unwrap();
        let ms: &[usize] = if ty == GgmlType::Q4_0 {
            &[1, 4, 16]
        } else {
            &[1]
        };
        for &m in ms {
            let x = rnd(m * k, 3);
            let mut y = vec![0f32; m * n];
            g.throughput(Throughput::Bytes(len as u64));
            g.bench_function(BenchmarkId::new(name, format!("m{m}_k{k}_n{n}")), |b| {
                b.iter(|| gemv_qpacked(black_box(&x), m, pw, &mut y, n).unwrap())
            });
        }
        if ty == GgmlType::Q4_0 {
            // L3-resident packed weight (4096 × 1024), as `q4_0-l3` below.
            let nc = 1024;
            let lc = qpacked_len(ty, k, nc).unwrap();
            let pc = QPackedRef::new(&buf[..lc], ty, k, nc).unwrap();
            let x = rnd(k, 3);
            let mut y = vec![0f32; nc];
            g.throughput(Throughput::Bytes(lc as u64));
            g.bench_function(
                BenchmarkId::new("q4_0-packed-l3", format!("m1_k{k}_n{nc}")),
                |b| b.iter(|| gemv_qpacked(black_box(&x), 1, pc, &mut y, nc).unwrap()),
            );
        }
    }
    // The same kernel on an L3-resident weight (4096 × 1024, 2.4 MB): its compute ceiling.
    let (kc, nc) = (4096, 1024);
    let wc = &w[..nc * (kc / 32)];
    let x = rnd(kc, 3);
    let mut y = vec![0f32; nc];
    g.throughput(Throughput::Bytes((wc.len() * 18) as u64));
    g.bench_function(
        BenchmarkId::new("q4_0-l3", format!("m1_k{kc}_n{nc}")),
        |b| b.iter(|| gemv_q4_0(black_box(&x), 1, kc, wc, &mut y, nc).unwrap()),
    );
    // Read bandwidth over 256 MiB (8x the L3): sum of u64 with 8 independent lanes.
    let big = vec![1u64; 32 << 20];
    g.throughput(Throughput::Bytes((big.len() * 8) as u64));
    g.bench_function("read-bandwidth-256MiB", |b| {
        b.iter(|| {
            let mut acc = [0u64; 8];
            for ch in black_box(&big).chunks_exact(8) {
                for i in 0..8 {
                    acc[i] = acc[i].wrapping_add(ch[i]);
                }
            }
            acc.iter().fold(0u64, |a, &b| a.wrapping_add(b))
        })
    });
    drop(big);
    machine_pair(&mut g, &w, k, n);
    g.finish();
}

/// Sum of a u64 slice with 8 independent lanes (the read-bandwidth probe's loop).
fn sum_u64(v: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for ch in v.chunks_exact(8) {
        for i in 0..8 {
            acc[i] = acc[i].wrapping_add(ch[i]);
        }
    }
    acc.iter().fold(0u64, |a, &b| a.wrapping_add(b))
}

/// The machine-level pair (2 cores): packed Q4_0 GEMV at M = 1 on the 66 MB weight and the
/// 256 MiB read probe, each with one thread and with two (the caller + one persistent pool
/// thread; the GEMV through `QPackedPlan::run_worker` over a 2-worker `StealState`). The pool
/// exists only while the two-thread cases run (its helper spins between calls).
fn machine_pair(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    w: &[BlockQ4_0],
    k: usize,
    n: usize,
) {
    let ty = GgmlType::Q4_0;
    let len = qpacked_len(ty, k, n).unwrap();
    let mut store = vec![0u8; len + 64];
    let off = store.as_ptr().align_offset(64);
    let buf = &mut store[off..off + len];
    pack_q4_0(w, k, n, 0..n, buf).unwrap();
    let pw = QPackedRef::new(buf, ty, k, n).unwrap();
    let kernel = Kernel::best_gemv();
    let x = rnd(k, 3);
    let mut y = vec![0f32; n];
    let big = vec![1u64; 32 << 20];
    let (h0, h1) = big.split_at(big.len() / 2);
    let id = format!("m1_k{k}_n{n}");
    g.throughput(Throughput::Bytes(len as u64));
    g.bench_function(BenchmarkId::new("pair-q4_0-packed-1t", &id), |b| {
        b.iter(|| {
            QPackedPlan::new(kernel, black_box(&x), 1, k, pw, &mut y, n)
                .unwrap()
                .run_all()
        })
    });
    g.throughput(Throughput::Bytes((big.len() * 8) as u64));
    g.bench_function("pair-read-256MiB-1t", |b| {
        b.iter(|| sum_u64(black_box(&big)))
    });
    let pool = pool::Pool::new();
    let mut st = StealState::new(2).unwrap();
    g.throughput(Throughput::Bytes(len as u64));
    g.bench_function(BenchmarkId::new("pair-q4_0-packed-2t", &id), |b| {
        b.iter(|| {
            let plan = QPackedPlan::new(kernel, black_box(&x), 1, k, pw, &mut y, n).unwrap();
            st.prepare(plan.tiles()).unwrap();
            let st = &st;
            pool.run(&|wk| plan.run_worker(st, wk).unwrap());
        })
    });
    g.throughput(Throughput::Bytes((big.len() * 8) as u64));
    g.bench_function("pair-read-256MiB-2t", |b| {
        b.iter(|| {
            pool.run(&|wk| {
                black_box(sum_u64(black_box(if wk == 0 { h0 } else { h1 })));
            })
        })
    });
    drop(pool);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    targets = gemm_benches, gemv_benches, int8_bench::int8_benches
}
criterion_main!(benches);
