//! Parallel scaling of the work-stealing driver: the GEMM at M=256, K=N=4096 (every GEMM kernel
//! this CPU has: AVX-512 on FP16 panels, AMX-BF16 on BF16 panels where present; portable
//! elsewhere) and the Q4_0 GEMV at M=1, K=4096, N=14336, each at the thread counts given.
//!
//! `cargo run --release -p hetero-sme --example scaling [THREADS...] [--reps R]`
//! (default threads: 1 2). Threads are spawned once per measurement and wait on a spin flag, so
//! a call's time includes waking them but not creating them; the calling thread is worker 0.
//! One `StealState` per repetition is prepared before timing (preparing needs `&mut`). Prints
//! the median of R calls, GFLOP/s (GEMV also GB/s of Q4_0 weight bytes) and the speed-up over
//! the first thread count; and the GEMM with an FP16 C at the first thread count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use hetero_sme::*;

fn rnd(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of `reps` parallel runs of `run(worker, state)` on `threads` threads.
fn time_parallel(
    threads: usize,
    tiles: usize,
    reps: usize,
    run: &(dyn Fn(&StealState, usize) + Sync),
) -> f64 {
    let mut states: Vec<StealState> = (0..reps + 1)
        .map(|_| {
            let mut s = StealState::new(threads).expect("workers");
            s.prepare(tiles).expect("tiles");
            s
        })
        .collect();
    let states = &mut states[..];
    let states: &[StealState] = states;
    let epoch = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let mut times = Vec::new();
    std::thread::scope(|sc| {
        for w in 1..threads {
            let (epoch, done) = (&epoch, &done);
            sc.spawn(move || {
                for (r, st) in states.iter().enumerate() {
                    // Acquire pairs with the Release store below: the state is published.
                    while epoch.load(Ordering::Acquire) <= r {
                        std::hint::spin_loop();
                    }
                    run(st, w);
                    // Release: this worker's writes of C happen before the main thread's read.
                    done.fetch_add(1, Ordering::Release);
                }
            });
        }
        for (r, st) in states.iter().enumerate() {
            let t = Instant::now();
            epoch.store(r + 1, Ordering::Release);
            run(st, 0);
            while done.load(Ordering::Acquire) < (r + 1) * (threads - 1) {
                std::hint::spin_loop();
            }
            if r > 0 {
                // The first run warms up (page faults, caches).
                times.push(t.elapsed().as_secs_f64());
            }
        }
    });
    median(times)
}

fn main() {
    let mut threads: Vec<usize> = Vec::new();
    let mut reps = 7;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--reps" {
            reps = args.next().and_then(|r| r.parse().ok()).unwrap_or(reps);
        } else if let Ok(t) = a.parse() {
            threads.push(t);
        }
    }
    if threads.is_empty() {
        threads = vec![1, 2];
    }
    let threads: Vec<usize> = threads.into_iter().filter(|&t| t > 0).collect();

    // GEMM, M=256, K=N=4096.
    let (m, k, n) = (256, 4096, 4096);
    let a = rnd(m * k, 2);
    let w32 = rnd(k * n, 1);
    let src = WeightSource {
        data: &w32,
        k,
        n,
        ld: n,
        layout: Layout::RowMajor,
    };
    let mut c = vec![0f32; m * n];
    for kernel in Kernel::available() {
        if matches!(kernel.kind(), KernelKind::Portable) && Kernel::available().len() > 1 {
            continue;
        }
        let format = if kernel.supports(PackedFormat::F16) {
            PackedFormat::F16
        } else {
            PackedFormat::Bf16
        };
        let mut packed = vec![0u16; packed_len(k, n)];
        pack_f32(&src, 0..n, format, &mut packed).expect("pack");
        let w = PackedRef::new(&packed, k, n, format).expect("packed");
        let g = Gemm {
            a: Lhs::F32(&a),
            m,
            lda: k,
            w,
            bias: None,
            accumulate: false,
        };
        let plan = GemmPlan::new(kernel, &g, &mut c, n).expect("plan");
        let tiles = plan.tiles();
        let mut base = 0.0;
        for &t in &threads {
            let s = time_parallel(t, tiles, reps, &|st, wk| {
                plan.run_worker(st, wk).expect("run")
            });
            if base == 0.0 {
                base = s;
            }
            println!(
                "gemm {:<9} {:?} m{m} k{k} n{n} tiles {tiles:>4} threads {t:>2}: {:>9.3} ms {:>7.1} GFLOP/s speed-up {:>5.2}",
                kernel.name(),
                format,
                s * 1e3,
                2.0 * (m * n * k) as f64 / s / 1e9,
                base / s
            );
        }
        // The same GEMM with an FP16 C, at the first thread count (the cost of the conversion).
        let mut c16 = vec![0u16; m * n];
        let plan = GemmPlan::new_f16(kernel, &g, &mut c16, n).expect("plan");
        let t = threads[0];
        let s = time_parallel(t, tiles, reps, &|st, wk| {
            plan.run_worker(st, wk).expect("run")
        });
        println!(
            "gemm {:<9} {:?} m{m} k{k} n{n} FP16 C        threads {t:>2}: {:>9.3} ms {:>7.1} GFLOP/s ({:.3}x the FP32-C time)",
            kernel.name(),
            format,
            s * 1e3,
            2.0 * (m * n * k) as f64 / s / 1e9,
            s / base
        );
    }

    // Q4_0 GEMV, M=1, K=4096, N=14336 (33 MB of weights).
    let (k, n) = (4096, 14336);
    let mut seed = 0x1234_5678_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let wq: Vec<BlockQ4_0> = (0..n * k / 32)
        .map(|_| BlockQ4_0 {
            d: half::f16::from_f32(((next() >> 40) as f32 / (1u64 << 24) as f32) * 0.02).to_bits(),
            qs: core::array::from_fn(|_| next() as u8),
        })
        .collect();
    let x = rnd(k, 3);
    let mut y = vec![0f32; n];
    let kernel = Kernel::best_gemv();
    let qg = QGemv {
        x: &x,
        m: 1,
        k,
        w: QWeights::Q4_0(&wq),
    };
    let plan = QGemvPlan::new(kernel, &qg, &mut y, n).expect("plan");
    let tiles = plan.tiles();
    let bytes = (n * k / 32 * 18) as f64;
    let mut base = 0.0;
    for &t in &threads {
        let s = time_parallel(t, tiles, reps * 4, &|st, wk| {
            plan.run_worker(st, wk).expect("run")
        });
        if base == 0.0 {
            base = s;
        }
        println!(
            "gemv q4_0 {:<9} m1 k{k} n{n} tiles {tiles:>4} threads {t:>2}: {:>9.3} ms {:>7.1} GFLOP/s {:>6.1} GB/s speed-up {:>5.2}",
            kernel.name(),
            s * 1e3,
            2.0 * (n * k) as f64 / s / 1e9,
            bytes / s / 1e9,
            base / s
        );
    }
}
