//! Per-operation costs (criterion): publish with no waiter, is_reached, a 1-producer barrier
//! round, the predictor's update. `cargo bench -p hetero-sync --bench ops`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hetero_sync::{next_epoch, CompletionFlag, DependencyBarrier, SiteState};

fn ops(c: &mut Criterion) {
    let flag = CompletionFlag::new();
    let mut e = 0;
    c.bench_function("flag publish (no waiter)", |b| {
        b.iter(|| {
            e = next_epoch(e);
            flag.publish(black_box(e)).unwrap()
        })
    });
    c.bench_function("flag is_reached", |b| {
        b.iter(|| black_box(&flag).is_reached(black_box(1)))
    });
    let barrier = DependencyBarrier::new(2).unwrap();
    let mut e = 0;
    c.bench_function("barrier 2 arrivals (one epoch)", |b| {
        b.iter(|| {
            e = next_epoch(e);
            barrier.arrive(0, e).unwrap();
            barrier.arrive(1, e).unwrap()
        })
    });
    let mut s = SiteState::new();
    let mut x = 100_000u64;
    c.bench_function("predictor observe + sleep_ns", |b| {
        b.iter(|| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1) % 200_000;
            s.observe(black_box(x), false);
            black_box(s.sleep_ns())
        })
    });
}

criterion_group!(benches, ops);
criterion_main!(benches);
