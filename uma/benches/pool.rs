//! Acquire+release of one slot, uncontended and with a second thread hammering the same pool,
//! against a `Mutex<Vec<usize>>` free list (pop + push). `cargo bench -p hetero-uma --bench pool`

// criterion_group! generates an undocumented pub fn.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hetero_uma::{Pool, PoolConfig, SLOT_ALIGN};

const SLOTS: usize = 16;

trait FreeList: Send + Sync + 'static {
    fn cycle(&self);
}

impl FreeList for Pool {
    #[inline]
    fn cycle(&self) {
        let h = self.acquire().unwrap();
        black_box(h.slot());
        self.release(h).unwrap();
    }
}

struct MutexList(Mutex<Vec<usize>>);

impl FreeList for MutexList {
    #[inline]
    fn cycle(&self) {
        let i = self.0.lock().unwrap().pop().unwrap();
        black_box(i);
        self.0.lock().unwrap().push(i);
    }
}

fn pool() -> Arc<Pool> {
    Arc::new(
        Pool::new(PoolConfig {
            slots: SLOTS,
            slot_size: SLOT_ALIGN,
        })
        .unwrap(),
    )
}

fn mutex_list() -> Arc<MutexList> {
    Arc::new(MutexList(Mutex::new((0..SLOTS).collect())))
}

fn bench_pair<T: FreeList>(c: &mut Criterion, name: &str, list: Arc<T>) {
    c.bench_function(&format!("{name} acquire+release, uncontended"), |b| {
        b.iter(|| list.cycle())
    });
    c.bench_function(&format!("{name} acquire+release, 2 threads"), |b| {
        b.iter_custom(|iters| {
            let stop = Arc::new(AtomicBool::new(false));
            let other = {
                let (list, stop) = (list.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        list.cycle();
                    }
                })
            };
            let t = Instant::now();
            for _ in 0..iters {
                list.cycle();
            }
            let el = t.elapsed();
            stop.store(true, Ordering::Relaxed);
            other.join().unwrap();
            el
        })
    });
}

fn benches(c: &mut Criterion) {
    bench_pair(c, "uma Pool", pool());
    bench_pair(c, "Mutex<Vec<usize>>", mutex_list());
}

criterion_group!(pool_benches, benches);
criterion_main!(pool_benches);
