//! Loom model of acquire/release: no slot is granted twice, none is lost, and a slot's data
//! written by one holder is visible to the next; a Relaxed release (a broken twin) must be
//! caught. Run:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --target-dir target/loom -p hetero-uma --test loom`

#![cfg(loom)]

use hetero_uma::{Pool, PoolConfig, SLOT_ALIGN};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

struct Shared {
    pool: Pool,
    // One model cell per slot: two holders of one slot at once would be reported as a race by
    // loom; a holder reading what the previous one wrote checks the hand-over ordering.
    cells: [UnsafeCell<u32>; 2],
}

// SAFETY (test only): each cell is accessed only by the current holder of its slot.
unsafe impl Sync for Shared {}

#[test]
fn acquire_release_grants_each_slot_once() {
    model(false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn relaxed_release_is_caught() {
    model(true);
}

fn model(weak: bool) {
    loom::model(move || {
        let s = Arc::new(Shared {
            pool: Pool::new(PoolConfig {
                slots: 2,
                slot_size: SLOT_ALIGN,
            })
            .unwrap(),
            cells: [UnsafeCell::new(0), UnsafeCell::new(0)],
        });
        let threads: Vec<_> = (0..3u32)
            .map(|t| {
                let s = s.clone();
                thread::spawn(move || {
                    if let Ok(h) = s.pool.acquire() {
                        let c = &s.cells[h.slot()];
                        // SAFETY: we hold the slot; loom reports any concurrent holder.
                        c.with_mut(|v| unsafe { *v = *v * 10 + t + 1 });
                        if weak {
                            s.pool.release_relaxed_for_loom(h).unwrap();
                        } else {
                            s.pool.release(h).unwrap();
                        }
                        true
                    } else {
                        false
                    }
                })
            })
            .collect();
        let got = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&g| g)
            .count();
        // With 2 slots and 3 threads, at least 2 succeed; none is lost at the end.
        assert!(got >= 2);
        assert_eq!(s.pool.free_slots(), 2);
        let total: u32 = s
            .cells
            .iter()
            // SAFETY: every thread joined; no holder remains.
            .map(|c| c.with(|v| unsafe { *v }))
            .map(|mut v| {
                let mut n = 0;
                while v > 0 {
                    n += 1;
                    v /= 10;
                }
                n
            })
            .sum();
        assert_eq!(total as usize, got);
    });
}
