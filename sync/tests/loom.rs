//! Loom models of the flag and the barrier. Run:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --target-dir target/loom -p hetero-sync --test loom`
//!
//! Data is held in `loom::cell::UnsafeCell`, so any read not ordered after its write by
//! happens-before is reported by loom. Each property has a deliberately weakened twin (Relaxed
//! publish, publish without wake, Relaxed barrier arrival) that loom must catch: those tests are
//! `#[should_panic]`, which proves the models can fail.

#![cfg(loom)]

use hetero_sync::{Arrival, CompletionFlag, DependencyBarrier};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

struct Shared {
    flag: CompletionFlag,
    data: UnsafeCell<u32>,
}

// SAFETY (test only): access to `data` is ordered by the flag; loom checks exactly that.
unsafe impl Sync for Shared {}

fn shared() -> Arc<Shared> {
    Arc::new(Shared {
        flag: CompletionFlag::new(),
        data: UnsafeCell::new(0),
    })
}

/// Producer writes data then publishes; consumer waits (poll then futex-model block) and reads.
fn handoff(weak_publish: bool, wake: bool) {
    loom::model(move || {
        let s = shared();
        let p = {
            let s = s.clone();
            thread::spawn(move || {
                // SAFETY: only the producer writes, before publishing.
                s.data.with_mut(|d| unsafe { *d = 42 });
                if weak_publish {
                    s.flag.publish_relaxed_for_loom(1).unwrap();
                } else if !wake {
                    s.flag.publish_without_wake_for_loom(1).unwrap();
                } else {
                    s.flag.publish(1).unwrap();
                }
            })
        };
        s.flag.wait_blocking(1).unwrap();
        // SAFETY: the producer's write happens-before this read iff the publish is Release.
        let v = s.data.with(|d| unsafe { *d });
        assert_eq!(v, 42);
        p.join().unwrap();
    });
}

#[test]
fn data_before_publish_is_visible_after_wait() {
    handoff(false, true);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn relaxed_publish_is_caught() {
    handoff(true, true);
}

#[test]
#[should_panic(expected = "deadlock")]
fn publish_without_wake_is_caught_as_lost_wakeup() {
    // The consumer's bounded poll can give up before the publish, announce itself and block;
    // with no wake it sleeps forever: loom reports the deadlock.
    handoff(false, false);
}

/// No lost wake-up with two waiters blocking at once.
#[test]
fn two_waiters_both_wake() {
    loom::model(|| {
        let s = shared();
        let w: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                thread::spawn(move || s.flag.wait_blocking(1).unwrap())
            })
            .collect();
        s.flag.publish(1).unwrap();
        for t in w {
            t.join().unwrap();
        }
    });
}

/// One flag reused across epochs, the consumer acknowledging each one on a second flag.
#[test]
fn epoch_reuse_across_iterations() {
    loom::model(|| {
        let s = shared();
        let ack = Arc::new(CompletionFlag::new());
        let p = {
            let (s, ack) = (s.clone(), ack.clone());
            thread::spawn(move || {
                for e in 1..=2u32 {
                    // SAFETY: the consumer acknowledged epoch e-1, so it no longer reads.
                    s.data.with_mut(|d| unsafe { *d = e * 10 });
                    s.flag.publish(e).unwrap();
                    ack.wait_blocking(e).unwrap();
                }
            })
        };
        for e in 1..=2u32 {
            s.flag.wait_blocking(e).unwrap();
            // SAFETY: ordered after the producer's write by the flag.
            assert_eq!(s.data.with(|d| unsafe { *d }), e * 10);
            ack.publish(e).unwrap();
        }
        p.join().unwrap();
    });
}

struct Parts {
    barrier: DependencyBarrier,
    a: UnsafeCell<u32>,
    b: UnsafeCell<u32>,
}

// SAFETY (test only): each producer writes only its own cell, ordered by the barrier.
unsafe impl Sync for Parts {}

fn barrier_model(weak: bool, epochs: u32) {
    loom::model(move || {
        let parts = Arc::new(Parts {
            barrier: DependencyBarrier::new(2).unwrap(),
            a: UnsafeCell::new(0),
            b: UnsafeCell::new(0),
        });
        let ack = Arc::new(CompletionFlag::new());
        let prod = |id: u32| {
            let (parts, ack) = (parts.clone(), ack.clone());
            thread::spawn(move || {
                for e in 1..=epochs {
                    let cell = if id == 0 { &parts.a } else { &parts.b };
                    // SAFETY: this producer's own range; the consumer acked the previous epoch.
                    cell.with_mut(|d| unsafe { *d = e * 10 + id });
                    let r = if weak {
                        parts.barrier.arrive_relaxed_for_loom(id, e)
                    } else {
                        parts.barrier.arrive(id, e)
                    };
                    assert!(matches!(
                        r,
                        Ok(Arrival::Completed | Arrival::Waiting { .. })
                    ));
                    if e < epochs {
                        ack.wait_blocking(e).unwrap();
                    }
                }
            })
        };
        let t0 = prod(0);
        let t1 = prod(1);
        for e in 1..=epochs {
            parts.barrier.flag().wait_blocking(e).unwrap();
            // SAFETY: both producers' writes happen-before the barrier's completion.
            assert_eq!(parts.a.with(|d| unsafe { *d }), e * 10);
            // SAFETY: as above.
            assert_eq!(parts.b.with(|d| unsafe { *d }), e * 10 + 1);
            ack.publish(e).unwrap();
        }
        t0.join().unwrap();
        t1.join().unwrap();
    });
}

#[test]
fn barrier_sees_every_producer_write() {
    barrier_model(false, 1);
}

#[test]
fn barrier_reuse_across_epochs() {
    barrier_model(false, 2);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn relaxed_barrier_arrival_is_caught() {
    barrier_model(true, 1);
}
