//! Dispatch cost of `hetero_sme::ThreadPool` (per-worker seats) against the state-word protocol
//! it replaced (`support/state_word_pool.rs`), in one process, alternating, at each thread count:
//!
//! - `empty`: back-to-back jobs of one empty task per thread (engine-min `bench --breakdown`'s
//!   "pool dispatch" figure): the protocol alone;
//! - `tiny64`: back-to-back jobs of 64 tasks of a `black_box` each, work-stolen;
//! - `work`: back-to-back jobs of 4 tasks per thread of ~0.5 µs of arithmetic each: the time
//!   above the ideal (tasks × 0.5 µs / threads) is what the pool costs a real job;
//! - `seats`, `empty` on 2 threads of the pool (`run_workers_on`): a small job wakes only the
//!   workers it uses (new pool only).
//!
//! `cargo run --release -p hetero-sme --example pool_dispatch [THREADS...] [--rounds R]`
//! (default threads: 1 2 4 8 16, rounds 5). Each figure is the median over rounds of the mean
//! round trip of 2000 jobs (500 for `work`), µs.

#[path = "support/state_word_pool.rs"]
mod state_word_pool;

use std::hint::black_box;
use std::time::Instant;

use hetero_sme::ThreadPool;

/// ~0.5 µs of dependent arithmetic (calibrated once, see `calibrate`).
fn spin_work(iters: u64) -> u64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..iters {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    black_box(x)
}

/// Iterations of `spin_work` that take ~0.5 µs on this core.
fn calibrate() -> u64 {
    let n = 1_000_000u64;
    let t = Instant::now();
    spin_work(n);
    let ns_per_iter = t.elapsed().as_nanos() as f64 / n as f64;
    (500.0 / ns_per_iter.max(0.01)) as u64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Mean µs per call of `jobs` calls of `job`.
fn per_job(jobs: usize, job: impl Fn()) -> f64 {
    let t = Instant::now();
    for _ in 0..jobs {
        job();
    }
    t.elapsed().as_secs_f64() * 1e6 / jobs as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut rounds = 5;
    let mut threads = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--rounds" {
            rounds = it.next().and_then(|r| r.parse().ok()).expect("--rounds R");
        } else {
            threads.push(a.parse::<usize>().expect("thread count"));
        }
    }
    if threads.is_empty() {
        threads = vec![1, 2, 4, 8, 16];
    }
    let iters = calibrate();
    println!(
        "pool dispatch, µs per job (median of {rounds} rounds); {} cpus; work task = {iters} iters (~0.5 µs)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for &t in &threads {
        let new = ThreadPool::new(t).expect("pool");
        let old = state_word_pool::Pool::new(t);
        let mut res: [[Vec<f64>; 2]; 3] = Default::default();
        let mut small = Vec::new();
        let empty = |_: usize, _: usize| {};
        let tiny = |i: usize, th: usize| {
            black_box((i, th));
        };
        let work = |_: usize, _: usize| {
            spin_work(iters);
        };
        for _ in 0..rounds {
            res[0][0].push(per_job(2000, || old.run(t, &empty)));
            res[0][1].push(per_job(2000, || new.run(t, &empty)));
            res[1][0].push(per_job(2000, || old.run(64, &tiny)));
            res[1][1].push(per_job(2000, || new.run(64, &tiny)));
            res[2][0].push(per_job(500, || old.run(4 * t, &work)));
            res[2][1].push(per_job(500, || new.run(4 * t, &work)));
            small.push(per_job(2000, || {
                new.run_workers_on(2, 2, &|st: &hetero_sme::StealState, th| {
                    let _ = st.run_worker(th, |_| {});
                })
                .expect("job")
            }));
        }
        for (name, r) in ["empty", "tiny64", "work"].iter().zip(res) {
            let [o, n] = r.map(median);
            println!(
                "threads {t:>2} {name:<7} state-word {o:>8.2}  seats {n:>8.2}  seats/state-word {:.2}",
                n / o
            );
        }
        println!(
            "threads {t:>2} work ideal {:.2} (4 tasks of 0.5 µs per thread)",
            2.0
        );
        println!(
            "threads {t:>2} empty on 2 of {t} threads (run_workers_on): seats {:.2}",
            median(small)
        );
    }
}
