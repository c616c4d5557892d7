//! Dispatch round trip of the thread pool: hetero-sme's `ThreadPool` (workers block on
//! hetero-sync's `CompletionFlag`) against the engine-min pool it replaced (workers block on a
//! Condvar, which the caller notifies on every job; `support/epoch_pool.rs`), in one process,
//! old and new side by side, at 2 threads (the caller plus one worker):
//!
//! - `hot/empty`: back-to-back jobs of 2 empty tasks (one per thread): the protocol alone;
//! - `hot/64`: back-to-back jobs of 64 tiny tasks (a `black_box` each), work-stolen;
//! - `cold/64`: one 64-task job after the workers went to sleep (300 µs idle, untimed): the
//!   wake-up path (futex wake vs. Condvar notify).
//!
//! `cargo bench -p hetero-sme --bench pool -- --warm-up-time 1 --measurement-time 3`

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use hetero_sme::ThreadPool;

#[path = "support/epoch_pool.rs"]
mod epoch_pool;

const THREADS: usize = 2;
/// Idle time before a `cold` job: well past the workers' spin phase (4000 spin hints, tens of µs).
const IDLE: Duration = Duration::from_micros(300);

fn empty_task(t: usize, thread: usize) {
    black_box((t, thread));
}

/// Times `iters` jobs, each after the workers went idle for [`IDLE`] (the idle time untimed).
fn cold(iters: u64, job: impl Fn()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        std::thread::sleep(IDLE);
        let t = Instant::now();
        job();
        total += t.elapsed();
    }
    total
}

fn dispatch(c: &mut Criterion) {
    let new = ThreadPool::new(THREADS).expect("pool");
    let old = epoch_pool::Pool::new(THREADS);
    let mut g = c.benchmark_group("pool");
    for (name, tasks) in [("hot/empty", 2usize), ("hot/64", 64)] {
        g.bench_function(format!("{name}/old"), |b| {
            b.iter(|| old.run(tasks, &empty_task))
        });
        g.bench_function(format!("{name}/new"), |b| {
            b.iter(|| new.run(tasks, &empty_task))
        });
    }
    g.bench_function("cold/64/old", |b| {
        b.iter_custom(|iters| cold(iters, || old.run(64, &empty_task)))
    });
    g.bench_function("cold/64/new", |b| {
        b.iter_custom(|iters| cold(iters, || new.run(64, &empty_task)))
    });
    g.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
