//! Loom model of the range work-stealing protocol: every tile claimed exactly once, none lost,
//! whatever the interleaving of owners' front claims and thieves' back claims.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --target-dir target/loom -p hetero-sme --test loom`
#![cfg(loom)]

use hetero_sme::StealState;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;

fn model(workers: usize, tiles: usize) {
    loom::model(move || {
        let mut st = StealState::new(workers).unwrap();
        st.prepare(tiles).unwrap();
        let st = Arc::new(st);
        let counts: Arc<Vec<AtomicUsize>> =
            Arc::new((0..tiles).map(|_| AtomicUsize::new(0)).collect());
        let handles: Vec<_> = (1..workers)
            .map(|w| {
                let (st, counts) = (st.clone(), counts.clone());
                loom::thread::spawn(move || {
                    st.run_worker(w, |t| {
                        counts[t].fetch_add(1, Ordering::Relaxed);
                    })
                    .unwrap();
                })
            })
            .collect();
        st.run_worker(0, |t| {
            counts[t].fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        for h in handles {
            h.join().unwrap();
        }
        for (t, c) in counts.iter().enumerate() {
            assert_eq!(
                c.load(Ordering::Relaxed),
                1,
                "tile {t} ran {} times",
                c.load(Ordering::Relaxed)
            );
        }
    });
}

#[test]
fn two_workers_three_tiles() {
    model(2, 3);
}

#[test]
fn two_workers_one_tile() {
    // Worker 1 owns nothing and must steal or find nothing; tile 0 still runs once.
    model(2, 1);
}

#[test]
fn three_workers_four_tiles() {
    model(3, 4);
}
