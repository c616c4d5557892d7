//! The benchmark baseline: engine-min's thread pool as it was before it moved into hetero-sme
//! as `ThreadPool` (engine-min/src/pool.rs at commit 1376968, without its `SharedMut` helper),
//! kept verbatim so `benches/pool.rs` can time old against new in one process. Not for use:
//! it erases the job's lifetime with a transmute and wakes sleepers through a Condvar.
//!
//! A small persistent thread pool: `run(n_tasks, f)` calls `f(task, thread)` for every task
//! index, the caller's thread taking part. Tasks are handed out by the `hetero-sme` crate's
//! lock-free range work stealing ([`hetero_sme::StealState`]): each thread owns a contiguous
//! range and takes from its front, and a thread whose range is empty steals single tasks from
//! the back of another's, so a slower (or descheduled) thread ends up with fewer tasks and
//! each task runs exactly once.
//!
//! Built for a shared, oversubscribed machine: a worker *joins* a job only while it is open,
//! and the caller closes the job once every task is claimed, so the caller never waits for a
//! worker that was descheduled before it joined (it only waits for workers that are running a
//! task). Workers spin briefly for the next job, then sleep on a condition variable.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use hetero_sme::StealState;

/// What every thread of a job runs once: `f(ranges, thread)`.
type Job = *const (dyn Fn(&StealState, usize) + Sync + 'static);

/// `state` layout: epoch in bits 32.., `CLOSED` flag, active-worker count in the low bits.
const CLOSED: u64 = 1 << 31;
const ACTIVE: u64 = CLOSED - 1;

struct Shared {
    /// Job epoch, closed flag and number of workers inside the job (see the constants).
    state: AtomicU64,
    job: UnsafeCell<Option<Job>>,
    /// Task ranges of the current job; rewritten by `run` only while no worker is active.
    steal: UnsafeCell<StealState>,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

// SAFETY: `job` and `steal` are written only by `Pool::run` while the previous job is closed
// with no active worker (so nobody reads them), and read only by workers that joined the
// current job (a successful Acquire CAS on `state` after run's Release store). The pointee of
// `job` is `Sync`; `StealState` is `Sync` (atomics). All other fields are `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A fixed set of worker threads.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` callers (the protocol has one job at a time).
    run_lock: Mutex<()>,
}

const SPINS: u32 = 4_000;

impl Pool {
    /// A pool running jobs on `threads` threads in all (the caller plus `threads - 1` workers).
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        // One range per thread; `threads` is at least 1, so this cannot fail in practice.
        let steal = StealState::new(threads)
            .or_else(|_| StealState::new(1))
            .expect("one worker is always a valid count");
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            job: UnsafeCell::new(None),
            steal: UnsafeCell::new(steal),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        });
        let workers = (1..threads)
            .map(|id| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || worker(&s, id))
            })
            .collect();
        Self {
            shared,
            workers,
            run_lock: Mutex::new(()),
        }
    }

    /// Number of threads that run jobs (workers plus the caller).
    #[allow(dead_code)] // kept verbatim; the bench times only `run`
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(task, thread)` once for each `task` in `0..n_tasks`, spread over the pool by work
    /// stealing (thread `i` starts on the `i`-th contiguous share of the tasks); `thread` is in
    /// `0..self.threads()` and no two concurrent calls share it. Returns when all tasks are
    /// done. Panics (after all workers are out) if a task panicked.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        if self.workers.is_empty() || n_tasks <= 1 || n_tasks > u32::MAX as usize {
            for t in 0..n_tasks {
                f(t, 0);
            }
            return;
        }
        self.run_workers(n_tasks, &|steal: &StealState, thread: usize| {
            // Cannot fail: `thread` < the number of ranges (one per pool thread).
            let _ = steal.run_worker(thread, |t| f(t, thread));
        });
    }

    /// The work-stealing job itself, for callers that drive a [`StealState`] (e.g. hetero-sme's
    /// `*Plan::run_worker`): prepares the pool's ranges for `n_tasks` tasks, then calls
    /// `f(ranges, thread)` once on each thread that joins, the caller's thread (0) included.
    /// `f` must claim tasks only through `ranges.run_worker(thread, ..)` (or `claim_own` and
    /// `steal`) and return once they are all claimed. Returns when every `f` has returned.
    pub fn run_workers(&self, n_tasks: usize, f: &(dyn Fn(&StealState, usize) + Sync)) {
        let _one = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: as for `job` below: no worker is active and none reads `steal` before
        // joining the epoch published below.
        let steal = unsafe { &mut *s.steal.get() };
        // Task indices are u32 in the ranges; the engine's task counts are far below that.
        assert!(
            steal.prepare(n_tasks).is_ok(),
            "{n_tasks} pool tasks exceed u32"
        );
        if self.workers.is_empty() {
            f(steal, 0);
            return;
        }
        // SAFETY: erasing the lifetime is sound because this function does not return before
        // the job is closed and no worker is active in it, so the pointer is never used after
        // `f` goes out of scope.
        let job: Job = unsafe {
            std::mem::transmute::<*const (dyn Fn(&StealState, usize) + Sync + '_), Job>(f)
        };
        // SAFETY: the previous job is closed with no active worker (we waited for that), and a
        // worker reads `job` only after joining the new epoch published below.
        unsafe { *s.job.get() = Some(job) };
        let epoch = (s.state.load(Ordering::Relaxed) >> 32).wrapping_add(1) & 0xFFFF_FFFF;
        // Release: publishes job and the task ranges to workers whose join CAS Acquires it.
        s.state.store(epoch << 32, Ordering::Release);
        {
            // Taking the lock orders this notify after any worker's check of the state under
            // the lock, so no sleeping worker misses the new job.
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        claim(s, f, 0);
        // Every task is claimed: close the job so no late worker joins it.
        s.state.fetch_or(CLOSED, Ordering::AcqRel);
        let mut spins = 0u32;
        // Acquire: the active workers' task outputs happen-before our return.
        while s.state.load(Ordering::Acquire) & ACTIVE != 0 {
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a pool task panicked");
        }
    }
}

/// Runs `thread`'s part of the current job: `f` claims its own range, then steals.
fn claim(s: &Shared, f: &(dyn Fn(&StealState, usize) + Sync), thread: usize) {
    // SAFETY: the caller is `run_workers` (which wrote `steal` itself) or a worker that joined
    // the current epoch; `run_workers` does not rewrite `steal` until no worker is active.
    let steal = unsafe { &*s.steal.get() };
    f(steal, thread);
}

fn worker(s: &Shared, id: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        // Wait for an open job of a new epoch.
        let cur = loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            let st = s.state.load(Ordering::Relaxed);
            if st >> 32 != seen && st & CLOSED == 0 {
                break st;
            }
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                let g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                let st = s.state.load(Ordering::Relaxed);
                // Re-check under the lock (the notifier takes it after publishing a job).
                if (st >> 32 == seen || st & CLOSED != 0) && !s.shutdown.load(Ordering::Acquire) {
                    drop(s.cv.wait(g).unwrap_or_else(|e| e.into_inner()));
                }
            }
        };
        seen = cur >> 32;
        // Join: only while this epoch is still open. Acquire pairs with run's Release store.
        let mut st = cur;
        let joined = loop {
            if st >> 32 != seen || st & CLOSED != 0 {
                break false;
            }
            match s
                .state
                .compare_exchange_weak(st, st + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break true,
                Err(now) => st = now,
            }
        };
        if !joined {
            continue;
        }
        // SAFETY: we joined the open epoch whose job `run` wrote before its Release store;
        // `run` neither rewrites `job` nor returns until we leave (active count back to 0).
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            // SAFETY: the pointer came from a live `&dyn Fn` that `run` keeps borrowed until
            // no worker is active, which happens only after we leave below.
            let f = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| claim(s, f, id))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        // Leave. Release: our task outputs happen-before run's Acquire of "no active worker".
        s.state.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.cv.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
