//! Int8 GEMM (Q4_1 weights) throughput per CPU-second of the calling thread, single-threaded:
//! the time is `CLOCK_THREAD_CPUTIME_ID`, so it does not count the time the thread spends
//! descheduled — a figure that stays meaningful on a loaded shared machine (criterion's
//! wall-clock figures are in the `int8/` bench group). Best of 5 rounds of ~2 GOP each.
//!
//! A second table times one vs two threads by wall clock, keeping the *minimum* over many calls
//! (the calls where neither thread was descheduled): the two-thread speed-up the load hides from
//! criterion's medians. Two threads = the caller + one persistent helper (`benches/support/pool.rs`)
//! over [`Int8Plan`] + [`StealState`]; quantization runs on the caller first.
//!
//! `cargo run --release -p hetero-sme --example int8_cputime`

use std::sync::atomic::{AtomicU64, Ordering};

use hetero_sme::*;

#[path = "../benches/support/pool.rs"]
mod pool;

#[cfg(unix)]
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant Linux/POSIX knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(not(unix))]
fn cpu_ns() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn q4_1(n: usize, k: usize) -> Int8Weight {
    let blocks: Vec<BlockQ4_1> = (0..n * k / 32)
        .map(|i| BlockQ4_1 {
            d: 0x2c00,
            m: 0xac00,
            qs: core::array::from_fn(|j| (i * 7 + j * 13) as u8),
        })
        .collect();
    Int8Weight::pack_q4_1(&blocks, n, k).expect("shape")
}

fn acts(m: usize, k: usize) -> Vec<f32> {
    (0..m * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect()
}

fn main() {
    per_cpu_second();
    threads();
}

fn threads() {
    let kern = Int8Kernel::best();
    let pool = pool::Pool::new();
    let mut st = StealState::new(2).expect("workers");
    println!(
        "min wall time over the calls of ~2 s per case, {}",
        kern.name()
    );
    for &(m, k, n) in &[
        (1usize, 576usize, 1536usize),
        (16, 576, 1536),
        (128, 576, 576),
        (128, 576, 1536),
        (128, 1536, 576),
        (128, 576, 49152),
    ] {
        let w = q4_1(n, k);
        let x = acts(m, k);
        let mut a = QActs::with_capacity(m, k);
        let mut y = vec![0f32; m * n];
        let ops = (2 * m * n * k) as f64;
        let reps = (4e10 / ops).clamp(20.0, 20000.0) as usize;
        let (mut t1, mut t2) = (u128::MAX, u128::MAX);
        let mut cpu_sum = [0u64; 2];
        for _ in 0..reps {
            let t = std::time::Instant::now();
            kern.quantize_acts(&x, m, k, &mut a).expect("quantize");
            kern.gemm(&w, &a, &mut y, n).expect("gemm");
            t1 = t1.min(t.elapsed().as_nanos());
            let t = std::time::Instant::now();
            kern.quantize_acts(&x, m, k, &mut a).expect("quantize");
            let plan = Int8Plan::new(kern, &w, &a, &mut y, n).expect("plan");
            st.prepare(plan.tiles()).expect("prepare");
            let st = &st;
            let cpu = [AtomicU64::new(0), AtomicU64::new(0)];
            pool.run(&|wk| {
                let c0 = cpu_ns();
                plan.run_worker(st, wk).expect("worker");
                cpu[wk].store(cpu_ns() - c0, Ordering::Relaxed);
            });
            t2 = t2.min(t.elapsed().as_nanos());
            for (s, c) in cpu_sum.iter_mut().zip(&cpu) {
                *s += c.load(Ordering::Relaxed);
            }
        }
        println!(
            "m{m} k{k} n{n}: 1 thread {:.1} us = {:.0} GOP/s; 2 threads {:.1} us = {:.0} GOP/s; speed-up {:.2}; mean GEMM CPU time per worker {:.1} / {:.1} us",
            t1 as f64 / 1e3,
            ops / t1 as f64,
            t2 as f64 / 1e3,
            ops / t2 as f64,
            t1 as f64 / t2 as f64,
            cpu_sum[0] as f64 / reps as f64 / 1e3,
            cpu_sum[1] as f64 / reps as f64 / 1e3,
        );
    }
}

fn per_cpu_second() {
    let kern = Int8Kernel::best();
    println!("kernel {}", kern.name());
    let shapes = [
        (1usize, 576usize, 576usize),
        (16, 576, 576),
        (128, 576, 576),
        (1, 576, 1536),
        (16, 576, 1536),
        (128, 576, 1536),
        (1, 1536, 576),
        (16, 1536, 576),
        (128, 1536, 576),
        (1, 576, 49152),
        (16, 576, 49152),
        (128, 576, 49152),
    ];
    for &(m, k, n) in &shapes {
        let w = q4_1(n, k);
        let x = acts(m, k);
        let mut a = QActs::with_capacity(m, k);
        let mut y = vec![0f32; m * n];
        let ops = (2 * m * n * k) as f64;
        let reps = (2e9 / ops).max(3.0) as usize;
        let (mut best_q, mut best_g) = (u64::MAX, u64::MAX);
        for _ in 0..5 {
            let t0 = cpu_ns();
            for _ in 0..reps {
                kern.quantize_acts(&x, m, k, &mut a).expect("quantize");
            }
            let t1 = cpu_ns();
            for _ in 0..reps {
                kern.gemm(&w, &a, &mut y, n).expect("gemm");
            }
            let t2 = cpu_ns();
            best_q = best_q.min((t1 - t0) / reps as u64);
            best_g = best_g.min((t2 - t1) / reps as u64);
        }
        println!(
            "m{m} k{k} n{n}: gemm {:.1} us = {:.0} GOP/s per CPU-second; quantize_acts {:.2} us; both {:.0} GOP/s",
            best_g as f64 / 1e3,
            ops / best_g as f64,
            best_q as f64 / 1e3,
            ops / (best_g + best_q) as f64
        );
    }
}
