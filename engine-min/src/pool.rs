//! A small persistent thread pool: `run(n_tasks, f)` calls `f(task, thread)` for every task
//! index, tasks claimed dynamically (one atomic counter), the caller's thread taking part.
//!
//! Workers spin a bounded time for the next job, then sleep on a condition variable, so an
//! idle engine costs no CPU while back-to-back matmuls of a decode step do not pay a wake-up.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

type Job = *const (dyn Fn(usize, usize) + Sync + 'static);

struct Shared {
    /// Bumped (Release) after `job` and `n_tasks` are written; workers Acquire it.
    epoch: AtomicU64,
    job: UnsafeCell<Option<Job>>,
    n_tasks: AtomicUsize,
    next: AtomicUsize,
    /// Workers still inside the current job; the caller waits (Acquire) for 0.
    pending: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

// SAFETY: `job` is written only by `Pool::run` while no worker reads it (all workers have
// decremented `pending` for the previous job, and the next read happens after the Release bump
// of `epoch`), and the pointee is `Sync`. Every other field is itself `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A fixed set of worker threads.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

const SPINS: u32 = 20_000;

impl Pool {
    /// A pool running jobs on `threads` threads in all (the caller plus `threads - 1` workers).
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            n_tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        });
        let workers = (1..threads.max(1))
            .map(|id| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || worker(&s, id))
            })
            .collect();
        Self { shared, workers }
    }

    /// Number of threads that run jobs (workers plus the caller).
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(task, thread)` once for each `task` in `0..n_tasks`, spread over the pool;
    /// `thread` is in `0..self.threads()` and no two concurrent calls share it. Returns when
    /// all tasks are done. Panics (after all workers are done) if a task panicked.
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        if self.workers.is_empty() || n_tasks <= 1 {
            for t in 0..n_tasks {
                f(t, 0);
            }
            return;
        }
        let s = &*self.shared;
        // SAFETY: erasing the lifetime is sound because this function does not return before
        // every worker has finished with the job (`pending` reaches 0 below), so the pointer
        // is never used after `f` goes out of scope.
        let job: Job =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize, usize) + Sync + '_), Job>(f) };
        // SAFETY: no worker reads `job` now: all finished the previous job (we waited for
        // `pending == 0`) and none reads it before observing the epoch bump below.
        unsafe { *s.job.get() = Some(job) };
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        s.pending.store(self.workers.len(), Ordering::Relaxed);
        // Release: publishes job, n_tasks, next and pending to workers that Acquire the epoch.
        s.epoch.fetch_add(1, Ordering::Release);
        {
            // Taking the lock orders this notify after any worker's check of the epoch under
            // the lock, so no worker misses the wake-up.
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        claim(s, f, 0);
        let mut spins = 0u32;
        // Acquire: the workers' writes (task outputs) happen-before our return.
        while s.pending.load(Ordering::Acquire) != 0 {
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

fn claim(s: &Shared, f: &(dyn Fn(usize, usize) + Sync), thread: usize) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let t = s.next.fetch_add(1, Ordering::Relaxed);
        if t >= n {
            return;
        }
        f(t, thread);
    }
}

fn worker(s: &Shared, id: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            // Acquire pairs with the Release bump in `run`.
            if s.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                let g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                // Re-check under the lock (the notifier holds it after bumping the epoch).
                if s.epoch.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire) {
                    drop(s.cv.wait(g).unwrap_or_else(|e| e.into_inner()));
                }
            }
        }
        seen = s.epoch.load(Ordering::Acquire);
        // SAFETY: `run` wrote `job` before the epoch bump we acquired and does not write it
        // again until we decrement `pending`; the pointee outlives that (see `run`).
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            // SAFETY: the pointer came from a live `&dyn Fn` that `run` keeps borrowed until
            // `pending` reaches 0, which happens only after this call returns.
            let f = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| claim(s, f, id))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        // Release: our task outputs happen-before the caller's Acquire of `pending == 0`.
        s.pending.fetch_sub(1, Ordering::Release);
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

/// A slice that pool tasks write through concurrently, each to its own disjoint elements.
pub struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _m: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: access goes through `slice`, whose contract requires disjoint ranges across threads;
// `T: Send` lets elements be written from other threads.
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    /// Wraps a mutable slice for the duration of its borrow.
    pub fn new(s: &'a mut [T]) -> Self {
        Self {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            _m: std::marker::PhantomData,
        }
    }

    /// Elements `start..start + len` (panics when out of bounds, like indexing).
    ///
    /// # Safety
    /// No two live references returned by this method (on any thread) may overlap.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "SharedMut range out of bounds"
        );
        // SAFETY: the range is in bounds (checked above) of a slice borrowed mutably for 'a;
        // the caller guarantees no other live reference overlaps it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}
