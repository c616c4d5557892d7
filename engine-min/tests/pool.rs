//! The engine's thread pool: every task of every job runs exactly once, whatever the thread
//! count and however unevenly the threads run (one deliberately slowed thread), and nothing is
//! lost across many back-to-back jobs (the epoch protocol).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use engine_min::pool::Pool;

#[test]
fn every_task_runs_exactly_once() {
    for threads in [1, 2, 3, 5] {
        let pool = Pool::new(threads);
        for n_tasks in [0, 1, 2, 7, 64, 1000] {
            for _rep in 0..20 {
                let hits: Vec<AtomicU32> = (0..n_tasks).map(|_| AtomicU32::new(0)).collect();
                pool.run(n_tasks, &|t, thread| {
                    assert!(thread < threads, "thread index {thread} out of range");
                    hits[t].fetch_add(1, Ordering::Relaxed);
                });
                for (t, h) in hits.iter().enumerate() {
                    assert_eq!(
                        h.load(Ordering::Relaxed),
                        1,
                        "task {t} of {n_tasks}, {threads} threads"
                    );
                }
            }
        }
    }
}

#[test]
fn a_slow_thread_gets_fewer_tasks() {
    let pool = Pool::new(3);
    let n_tasks = 300;
    let per_thread: Vec<AtomicU32> = (0..3).map(|_| AtomicU32::new(0)).collect();
    let hits: Vec<AtomicU32> = (0..n_tasks).map(|_| AtomicU32::new(0)).collect();
    pool.run(n_tasks, &|t, thread| {
        if thread == 1 {
            // The slowed thread (an E-core, or one descheduled on a shared machine).
            std::thread::sleep(Duration::from_millis(2));
        }
        hits[t].fetch_add(1, Ordering::Relaxed);
        per_thread[thread].fetch_add(1, Ordering::Relaxed);
    });
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    // Its own share is 100 tasks; the others steal most of them.
    let slow = per_thread[1].load(Ordering::Relaxed);
    assert!(slow < 100, "the slowed thread ran {slow} of its 100 tasks");
}
