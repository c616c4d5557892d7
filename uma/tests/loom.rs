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

/// Two releases of one acquisition at once (the C ABI's handles are copyable: a stale copy can
/// be released while its holder releases), then the holder acquires again: exactly one of the
/// two releases may succeed, and the slot's new owner must still hold it afterwards (were the
/// second release to succeed too, it would mark the new owner's slot free and the next acquirer
/// would get it as well). Fails on a load-then-store release; passes with a compare-exchange.
#[test]
fn stale_copy_release_never_frees_the_next_owner() {
    loom::model(|| {
        let pool = Arc::new(
            Pool::new(PoolConfig {
                slots: 1,
                slot_size: SLOT_ALIGN,
            })
            .unwrap(),
        );
        let h = pool.acquire().unwrap();
        let copy = h.duplicate_for_loom();
        let stale = {
            let pool = pool.clone();
            thread::spawn(move || pool.release(copy).is_ok())
        };
        let holder = {
            let pool = pool.clone();
            thread::spawn(move || {
                let ok = pool.release(h).is_ok();
                // Re-acquire (the slot is free once either release succeeded).
                (ok, pool.acquire().ok())
            })
        };
        let stale_ok = stale.join().unwrap();
        let (holder_ok, again) = holder.join().unwrap();
        assert_eq!(
            stale_ok as u32 + holder_ok as u32,
            1,
            "one acquisition released twice (or never)"
        );
        if let Some(h2) = again {
            // The new owner's slot must not have been freed by the other release.
            assert_eq!(pool.free_slots(), 0, "the new owner's slot was marked free");
            assert!(pool.acquire().is_err(), "a second owner got the held slot");
            pool.release(h2).unwrap();
        }
        assert_eq!(pool.free_slots(), 1);
    });
}
