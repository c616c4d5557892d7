//! Loom models of the range work-stealing protocol (every tile claimed exactly once, none lost,
//! whatever the interleaving of owners' front claims and thieves' back claims) and of the thread
//! pool's start/finish protocol (open the job on the workers' seats, workers join, claim, leave,
//! the caller closes the seats and sees every task's output, a blocked worker is woken for the
//! next job, shutdown), each pool property paired with a deliberately broken twin that loom
//! must catch (`#[should_panic]`), which proves the models can fail.
//!
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --target-dir target/loom -p hetero-sme --test loom`
#![cfg(loom)]

use hetero_sme::pool::LoomFault;
use hetero_sme::{StealState, ThreadPool};
use loom::cell::UnsafeCell;
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

/// One output cell per task, written by the task and read by the caller after `run` returns.
struct Outputs(Vec<UnsafeCell<usize>>);

// SAFETY (test only): each task writes only its own cell, and the caller reads the cells after
// `run` returns; whether the pool orders those accesses is exactly what loom checks.
unsafe impl Sync for Outputs {}

impl Outputs {
    /// Task `t`'s cell (a method, so closures capture the `Sync` wrapper, not its field).
    fn cell(&self, t: usize) -> &UnsafeCell<usize> {
        &self.0[t]
    }
}

/// A pool of `threads` threads runs `jobs` jobs of `tasks` tasks back to back, then is dropped
/// (shutdown joins the workers). Each task counts itself and writes its output cell; after each
/// job the caller checks every count is 1 and reads every cell (a read that does not
/// happen-after the task's write is a loom "Causality violation"). A worker that never wakes is
/// a loom deadlock.
fn pool_model(threads: usize, tasks: usize, jobs: usize, fault: Option<LoomFault>) {
    pool_model_bounded(threads, tasks, jobs, fault, None);
}

/// [`pool_model`] with its own preemption bound (`None`: `LOOM_MAX_PREEMPTIONS`).
fn pool_model_bounded(
    threads: usize,
    tasks: usize,
    jobs: usize,
    fault: Option<LoomFault>,
    preemptions: Option<usize>,
) {
    let mut builder = loom::model::Builder::new();
    if preemptions.is_some() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        let pool = match fault {
            Some(f) => ThreadPool::with_fault_for_loom(threads, f),
            None => ThreadPool::new(threads),
        }
        .unwrap();
        for job in 0..jobs {
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            let out = Outputs((0..tasks).map(|_| UnsafeCell::new(0)).collect());
            pool.run(tasks, &|t, thread| {
                assert!(thread < threads);
                counts[t].fetch_add(1, Ordering::Relaxed);
                // SAFETY: task `t` runs once and is the only writer of cell `t`.
                out.cell(t).with_mut(|p| unsafe { *p = job * 10 + t + 1 });
            });
            for t in 0..tasks {
                assert_eq!(
                    counts[t].load(Ordering::Relaxed),
                    1,
                    "task {t} of job {job}"
                );
                // SAFETY: the task's write must happen-before `run`'s return; loom checks it.
                let v = out.cell(t).with(|p| unsafe { *p });
                assert_eq!(v, job * 10 + t + 1);
            }
        }
        drop(pool);
    });
}

#[test]
fn pool_two_threads_one_job() {
    pool_model(2, 2, 1, None);
}

#[test]
fn pool_two_threads_two_jobs() {
    // The second job reuses the state word, the job cell and the ranges: a worker of the
    // first epoch must be out before the caller rewrites them.
    pool_model(2, 2, 2, None);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn pool_relaxed_leave_is_caught() {
    // The caller can see "no active worker" without the worker's task output being visible.
    pool_model(2, 2, 1, Some(LoomFault::RelaxedLeave));
}

#[test]
#[should_panic(expected = "Causality violation")]
fn pool_relaxed_open_is_caught() {
    // A worker can join the epoch without the job the caller wrote before opening it.
    pool_model(2, 2, 1, Some(LoomFault::RelaxedOpen));
}

#[test]
#[should_panic(expected = "Causality violation")]
fn pool_blind_close_is_caught() {
    // The caller closes a seat with a plain store while the worker is joining: it returns (and
    // reads the outputs) while the worker still writes them.
    pool_model(2, 2, 1, Some(LoomFault::BlindClose));
}

/// Liveness of the wake-up: the caller's part of each job waits (yielding) until worker 1 has
/// run a task of that job, so the job ends only if the worker, spinning or blocked on its flag,
/// is woken for it. (It departs from `run_workers`'s contract on purpose: the caller claims
/// nothing, so a worker that is never woken hangs the job.) Two jobs: the worker may block
/// between them.
fn wake_model(jobs: usize, fault: Option<LoomFault>) {
    loom::model(move || {
        let pool = match fault {
            Some(f) => ThreadPool::with_fault_for_loom(2, f),
            None => ThreadPool::new(2),
        }
        .unwrap();
        for _ in 0..jobs {
            let ran = AtomicUsize::new(0);
            pool.run_workers(2, &|st: &StealState, thread| {
                if thread == 0 {
                    while ran.load(Ordering::Acquire) == 0 {
                        loom::thread::yield_now();
                    }
                } else {
                    st.run_worker(thread, |_| {}).unwrap();
                    ran.store(1, Ordering::Release);
                }
            })
            .unwrap();
        }
        drop(pool);
    });
}

#[test]
fn pool_blocked_worker_is_woken() {
    wake_model(2, None);
}

#[test]
#[should_panic(expected = "maximum number of branches")]
fn pool_publish_without_wake_is_caught() {
    // A worker that blocked on its flag is never rung: the caller's part yields forever waiting
    // for it (loom reports the endless yield loop as too many branches).
    wake_model(2, Some(LoomFault::NoWake));
}

#[test]
#[should_panic(expected = "maximum number of branches")]
fn pool_open_without_fence_is_caught() {
    // Without the caller's fence, the worker's re-check and the caller's "sleepy" check may
    // both read the old value: the worker blocks, nobody rings.
    wake_model(2, Some(LoomFault::NoFence));
}

#[test]
fn pool_fewer_tasks_than_threads() {
    // Two tasks on three threads: worker 2's seat is never opened; it must still shut down,
    // and the next job (three tasks) opens it.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.check(|| {
        let pool = ThreadPool::new(3).unwrap();
        for tasks in [2, 3] {
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(tasks, &|t, thread| {
                assert!(thread < tasks, "thread {thread} ran a {tasks}-task job");
                counts[t].fetch_add(1, Ordering::Relaxed);
            });
            for c in &counts {
                assert_eq!(c.load(Ordering::Relaxed), 1);
            }
        }
        drop(pool);
    });
}

#[test]
fn pool_three_threads_one_job() {
    // Two workers race to join, one may find the job closed; both are out before the return.
    // One preemption: with two it takes minutes (68 s for 2 tasks, 128 s for 3 on this VM).
    pool_model_bounded(3, 3, 1, None, Some(1));
}
