//! A persistent thread pool over [`StealState`]: `run(n_tasks, f)` calls `f(task, thread)` once
//! for every task index, the calling thread taking part as thread 0.
//!
//! Built for a shared, oversubscribed machine. One 64-bit `state` word holds the job's epoch, a
//! `CLOSED` bit and the number of workers inside the job:
//!
//! 1. **publish**: the caller writes the job (a data pointer and a monomorphized trampoline) and
//!    prepares the steal ranges, then opens epoch `e` with a Release store of `state`, then
//!    publishes `e` on a [`CompletionFlag`] (which wakes only workers blocked on it);
//! 2. **join**: a worker that sees a new open epoch joins it with a CAS that adds one to the
//!    active count (Acquire: the job and the ranges are visible to it); the CAS fails if the
//!    epoch was closed meanwhile;
//! 3. **claim**: every thread in the job claims tasks by range work stealing until all are
//!    claimed;
//! 4. **leave**: a worker subtracts one from the active count (Release: its task outputs
//!    happen-before the caller's return);
//! 5. **finish**: the caller, once its own claiming ends (so every task is claimed), sets
//!    `CLOSED` and waits until the active count is 0 (Acquire), then clears the job.
//!
//! A worker descheduled before it joined is never waited for: it finds the epoch closed and
//! skips it. Workers spin briefly for the next job, then block on the flag word (a futex).

mod chunks;
mod error;

use std::any::Any;
use std::io;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use hetero_sync::{next_epoch, CompletionFlag};

use crate::parallel::StealState;
use crate::primitive::{
    spin_hint, yield_now, AtomicBool, AtomicU64, JoinHandle, Mutex, Ordering, UnsafeCell,
};
// std's `Arc` under loom too: its reference count is not part of the protocol, and loom's
// `Arc` would turn a deadlock the model reports in `Drop` into a panic-while-panicking abort.
use std::sync::Arc;

pub use chunks::ColumnBlock;
pub use error::PoolError;

/// `state`'s `CLOSED` bit: no worker may join the current epoch any more.
const CLOSED: u64 = 1 << 31;
/// `state`'s low bits: the number of workers inside the current epoch's job.
const ACTIVE: u64 = CLOSED - 1;

/// The most threads a pool runs: far above any core count, low enough that the per-thread
/// state (a 128-byte steal range each) stays small; the active count (below `CLOSED`) holds it.
pub const MAX_THREADS: usize = 1 << 16;
const _: () = assert!(MAX_THREADS as u64 <= ACTIVE);
/// The most tasks one job indexes (task indices are `u32` in the steal ranges); [`ThreadPool::run`]
/// splits larger counts into several jobs.
pub const MAX_TASKS: usize = u32::MAX as usize;

/// Busy-wait polls before a worker blocks on the flag, and before a caller waiting for workers
/// to leave starts yielding. 4000 spin hints are ~10-60 µs (a pause is ~10 ns on AMD Zen,
/// ~50 ns on Intel since Skylake): long enough to bridge the gap between the back-to-back
/// matmuls of a decode step, short enough not to burn a core between tokens. Under loom one
/// poll, so the model explores both the spinning and the blocking path.
const SPINS: u32 = if cfg!(loom) { 1 } else { 4_000 };

/// The epoch in a `state` word (31 bits, as the flag's).
#[inline]
fn epoch_of(state: u64) -> u32 {
    (state >> 32) as u32
}

/// A published job: what every joining thread calls, `call(data, ranges, thread)`.
#[derive(Clone, Copy)]
struct JobRef {
    data: *const (),
    call: unsafe fn(*const (), &StealState, usize),
}

impl JobRef {
    /// The job for `f`. The lifetime of the borrow is not erased by a transmute: `data` is a
    /// plain pointer, and [`ThreadPool`] keeps `f` borrowed until no thread can call it.
    fn new<F: Fn(&StealState, usize) + Sync>(f: &F) -> Self {
        Self {
            data: (f as *const F).cast(),
            call: call::<F>,
        }
    }
}

/// The trampoline: calls the `F` that `data` points to.
///
/// # Safety
/// `data` must come from [`JobRef::new::<F>`] (the same `F`) on a reference that is still live.
unsafe fn call<F: Fn(&StealState, usize) + Sync>(
    data: *const (),
    ranges: &StealState,
    thread: usize,
) {
    // SAFETY: per the contract `data` is a live `&F`; `F: Sync`, so calling it through a shared
    // reference from this thread is sound.
    let f = unsafe { &*data.cast::<F>() };
    f(ranges, thread)
}

/// Broken variants of the protocol that the loom suite must catch (see `tests/loom.rs`).
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoomFault {
    /// Open the epoch with a Relaxed store: a joining worker may read a stale job.
    RelaxedOpen,
    /// Leave with a Relaxed RMW: the caller may return before a worker's outputs are visible.
    RelaxedLeave,
    /// Publish the wake-up flag without waking blocked workers: a lost wake-up (deadlock).
    NoWake,
}

struct Shared {
    /// Epoch (bits 32..63), `CLOSED` (bit 31), active workers (bits 0..31).
    state: AtomicU64,
    /// Blocked workers sleep on this flag's word; `run` publishes each epoch on it after
    /// opening the job in `state`, `Drop` publishes one more after setting `shutdown`.
    wake: CompletionFlag,
    /// The current job; written only by a caller holding `run_lock` while no worker is active.
    job: UnsafeCell<Option<JobRef>>,
    /// The current job's task ranges; prepared under the same rule as `job`.
    steal: UnsafeCell<StealState>,
    /// Some task panicked on a worker; its payload is in `payload`.
    panicked: AtomicBool,
    payload: Mutex<Option<Box<dyn Any + Send>>>,
    shutdown: AtomicBool,
    #[cfg(loom)]
    fault: Option<LoomFault>,
}

// SAFETY: `job` and `steal` are written only by a caller holding `run_lock`, while the previous
// job is closed with no active worker, before the Release store that opens the next epoch; they
// are read only by that caller and by workers that joined the open epoch (an Acquire CAS on
// `state` that read that store), which the caller waits for (active count 0, Acquire) before it
// writes them again. The job's pointee is `Sync` (`JobRef::new` requires it); `StealState` is
// atomics. Every other field is `Sync` and `Send`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer in `job` is dereferenced only under that protocol.
unsafe impl Send for Shared {}

impl Shared {
    /// Release: publishes the job and the ranges to workers whose join CAS reads the store.
    fn open_order(&self) -> Ordering {
        #[cfg(loom)]
        if self.fault == Some(LoomFault::RelaxedOpen) {
            return Ordering::Relaxed;
        }
        Ordering::Release
    }

    /// Release: the worker's task outputs happen-before the caller's Acquire of "no active
    /// worker" (every leave is an RMW, so they form one release sequence).
    fn leave_order(&self) -> Ordering {
        #[cfg(loom)]
        if self.fault == Some(LoomFault::RelaxedLeave) {
            return Ordering::Relaxed;
        }
        Ordering::Release
    }

    /// Publishes `epoch` on the wake-up flag. It cannot be refused: `epoch` is always the one
    /// after the flag's (only `run` and `Drop` publish, one at a time).
    fn wake_workers(&self, epoch: u32) {
        #[cfg(loom)]
        if self.fault == Some(LoomFault::NoWake) {
            let _ = self.wake.publish_without_wake_for_loom(epoch);
            return;
        }
        let _ = self.wake.publish(epoch);
    }

    /// Keeps the first task panic's payload for the caller to resume.
    fn record_panic(&self, p: Box<dyn Any + Send>) {
        let mut slot = self.payload.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(p);
        }
        // Relaxed: the caller reads it after its Acquire of "no active worker", which our
        // Release leave (after this store) synchronizes with.
        self.panicked.store(true, Ordering::Relaxed);
    }
}

/// A worker thread's body, handed to the spawn function of [`ThreadPool::with_spawner`]: call
/// [`PoolWorker::run`] on the new thread. It returns when the pool is dropped.
pub struct PoolWorker {
    shared: Arc<Shared>,
    index: usize,
}

impl PoolWorker {
    /// This worker's thread index (`1..threads`; the caller of a job is thread 0).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Runs the worker until the pool is dropped. Call it on a thread of its own: called inside
    /// the spawn function it would never return, and neither would the pool's constructor. A
    /// worker that is never run only leaves its share of each job to the other threads.
    pub fn run(self) {
        worker(&self.shared, self.index);
    }
}

impl core::fmt::Debug for PoolWorker {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PoolWorker")
            .field("index", &self.index)
            .finish()
    }
}

/// A fixed set of persistent worker threads that run jobs with the calling thread, tasks spread
/// by range work stealing (see the [module docs](self) for the protocol).
///
/// Guarantees: each task of a job runs exactly once (unless a task panicked, see below); `f`'s
/// `thread` argument is in `0..threads()` and no two tasks run concurrently with the same
/// `thread` (so per-thread scratch indexed by it is never shared, see
/// [`ThreadPool::run_with_scratch`]); a call returns only after every thread has finished with
/// `f`, so `f` may borrow from the caller's stack. Jobs from several threads are serialized.
/// A job allocates nothing.
///
/// **Panics**: if a task panics, the remaining tasks may not run; the call waits until every
/// worker is out of the job, then resumes the panic on the calling thread (the caller's own
/// panic if its part panicked, else the first worker's).
///
/// **Nesting**: a task may call [`ThreadPool::run`] (or the chunk helpers) on its own pool: the
/// nested job runs inline on the task's thread, with the task's `thread` index.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    threads: usize,
    /// Serializes jobs (the protocol has one job at a time) and the inline paths, which use
    /// thread index 0 like the jobs' callers.
    run_lock: Mutex<()>,
}

impl core::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl ThreadPool {
    /// A pool running jobs on `threads` threads in all: the caller plus `threads - 1` workers
    /// (named `hetero-pool-<index>`). Errors: [`PoolError::BadThreadCount`] for 0 or more than
    /// [`MAX_THREADS`]; [`PoolError::Spawn`] when the OS refuses a thread (the workers started
    /// before it are shut down and joined first).
    pub fn new(threads: usize) -> Result<Self, PoolError> {
        Self::build(threads, default_spawn)
    }

    /// As [`ThreadPool::new`], starting each worker with `spawn`, which must run the given
    /// [`PoolWorker`] on a new thread and return its handle (e.g. to name the threads, set
    /// their stack size or pin them to cores). An `Err` from `spawn` becomes
    /// [`PoolError::Spawn`].
    ///
    /// ```
    /// let pool = hetero_sme::ThreadPool::with_spawner(2, |w| {
    ///     std::thread::Builder::new()
    ///         .name(format!("my-pool-{}", w.index()))
    ///         .spawn(move || w.run())
    /// })
    /// .unwrap();
    /// assert_eq!(pool.threads(), 2);
    /// ```
    #[cfg(not(loom))]
    pub fn with_spawner<S>(threads: usize, spawn: S) -> Result<Self, PoolError>
    where
        S: FnMut(PoolWorker) -> io::Result<std::thread::JoinHandle<()>>,
    {
        Self::build(threads, spawn)
    }

    /// Loom-only: a pool whose protocol has `fault` built in (the loom suite's broken twins).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn with_fault_for_loom(threads: usize, fault: LoomFault) -> Result<Self, PoolError> {
        Self::build_with(threads, default_spawn, Some(fault))
    }

    fn build<S>(threads: usize, spawn: S) -> Result<Self, PoolError>
    where
        S: FnMut(PoolWorker) -> io::Result<JoinHandle<()>>,
    {
        #[cfg(loom)]
        return Self::build_with(threads, spawn, None);
        #[cfg(not(loom))]
        Self::build_with(threads, spawn)
    }

    fn build_with<S>(
        threads: usize,
        mut spawn: S,
        #[cfg(loom)] fault: Option<LoomFault>,
    ) -> Result<Self, PoolError>
    where
        S: FnMut(PoolWorker) -> io::Result<JoinHandle<()>>,
    {
        let bad = PoolError::BadThreadCount {
            max: MAX_THREADS,
            got: threads,
        };
        if threads == 0 || threads > MAX_THREADS {
            return Err(bad);
        }
        let steal = StealState::new(threads).map_err(|_| bad)?;
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            wake: CompletionFlag::new(),
            job: UnsafeCell::new(None),
            steal: UnsafeCell::new(steal),
            panicked: AtomicBool::new(false),
            payload: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            #[cfg(loom)]
            fault,
        });
        let mut pool = ThreadPool {
            shared,
            workers: Vec::with_capacity(threads - 1),
            threads,
            run_lock: Mutex::new(()),
        };
        for index in 1..threads {
            let w = PoolWorker {
                shared: Arc::clone(&pool.shared),
                index,
            };
            match spawn(w) {
                Ok(h) => pool.workers.push(h),
                // Dropping `pool` shuts down and joins the workers started so far.
                Err(source) => {
                    return Err(PoolError::Spawn {
                        index,
                        threads,
                        source,
                    })
                }
            }
        }
        Ok(pool)
    }

    /// Number of threads that run jobs (the workers plus the caller).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `f(task, thread)` once for each `task` in `0..n_tasks`, spread over the pool by work
    /// stealing (thread `i` starts on the `i`-th contiguous share of the tasks, then steals);
    /// `thread` is in `0..self.threads()` and no two concurrent calls share it. Returns when
    /// every task is done. More than [`MAX_TASKS`] tasks run as several jobs. Resumes a task's
    /// panic after every worker is out (see the type's docs).
    pub fn run<F: Fn(usize, usize) + Sync>(&self, n_tasks: usize, f: &F) {
        self.run_batched(n_tasks, MAX_TASKS, f);
    }

    /// [`ThreadPool::run`] with jobs of at most `batch` tasks (`batch` ≥ 1).
    fn run_batched<F: Fn(usize, usize) + Sync>(&self, n_tasks: usize, batch: usize, f: &F) {
        if let Some(thread) = self.current_thread() {
            // Nested inside one of our own tasks: run inline, as the task's own thread.
            (0..n_tasks).for_each(|t| f(t, thread));
            return;
        }
        let _one = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.workers.is_empty() || n_tasks <= 1 {
            // Marked, so that a task's nested `run` also runs inline instead of locking again.
            let _mark = Marker::enter(&self.shared, 0);
            (0..n_tasks).for_each(|t| f(t, 0));
            return;
        }
        let mut start = 0;
        while start < n_tasks {
            let n = (n_tasks - start).min(batch);
            self.job(n, &|ranges: &StealState, thread: usize| {
                // Cannot fail: `thread` < the number of ranges (one per pool thread).
                let _ = ranges.run_worker(thread, |t| f(start + t, thread));
            });
            start += n;
        }
    }

    /// The work-stealing job itself, for callers that drive a [`StealState`] (e.g. hetero-sme's
    /// `*Plan::run_worker`): prepares the pool's ranges for `n_tasks` tasks, then calls
    /// `f(ranges, thread)` once on each thread that joins, the caller's thread (0) included.
    /// `f` must claim tasks only through `ranges.run_worker(thread, ..)` (or `claim_own` and
    /// `steal`) and return once none is left. Returns when every `f` has returned.
    ///
    /// Errors (nothing runs): [`PoolError::TooManyTasks`] above [`MAX_TASKS`];
    /// [`PoolError::Nested`] from inside a task of this pool. Resumes a task's panic after every
    /// worker is out.
    pub fn run_workers<F>(&self, n_tasks: usize, f: &F) -> Result<(), PoolError>
    where
        F: Fn(&StealState, usize) + Sync,
    {
        if n_tasks > MAX_TASKS {
            return Err(PoolError::TooManyTasks {
                max: MAX_TASKS,
                got: n_tasks,
            });
        }
        if self.current_thread().is_some() {
            return Err(PoolError::Nested);
        }
        let _one = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.job(n_tasks, f);
        Ok(())
    }

    /// One job (the protocol in the module docs). The caller holds `run_lock`; `n_tasks` ≤
    /// [`MAX_TASKS`].
    fn job<F: Fn(&StealState, usize) + Sync>(&self, n_tasks: usize, f: &F) {
        let s = &*self.shared;
        // SAFETY: we hold `run_lock` and the previous job ended with no active worker (its
        // caller waited for that), so no thread reads `steal` until the epoch opened below.
        // Cannot fail: `n_tasks` ≤ MAX_TASKS.
        let _ = s.steal.with_mut(|st| unsafe { &mut *st }.prepare(n_tasks));
        if self.workers.is_empty() {
            let _mark = Marker::enter(s, 0);
            // SAFETY: no worker exists; we are the only reader.
            s.steal.with(|st| f(unsafe { &*st }, 0));
            return;
        }
        // SAFETY: as for `steal` above.
        s.job.with_mut(|j| unsafe { *j = Some(JobRef::new(f)) });
        let epoch = next_epoch(epoch_of(s.state.load(Ordering::Relaxed)));
        // Open: new epoch, not closed, no worker inside (see `open_order`).
        s.state.store(u64::from(epoch) << 32, s.open_order());
        // After opening, so a worker the flag wakes finds the job open.
        s.wake_workers(epoch);
        let mine = {
            let _mark = Marker::enter(s, 0);
            // The caller's own part; caught so that an unwind cannot end `f`'s borrow while
            // workers still run it.
            catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: `steal` is not written again before the job ends (see `Shared`).
                s.steal.with(|st| f(unsafe { &*st }, 0))
            }))
        };
        // Every task is claimed: close the job so that no late worker joins it. Relaxed: the
        // close needs only to be ordered against the joins' CAS on this one word; the data
        // hand-off is the leave/Acquire pair below.
        s.state.fetch_or(CLOSED, Ordering::Relaxed);
        let mut spins = 0u32;
        // Acquire: reads the last leave (the leaves are RMWs, one release sequence), so every
        // active worker's task outputs happen-before our return.
        while s.state.load(Ordering::Acquire) & ACTIVE != 0 {
            if spins < SPINS {
                spins += 1;
                spin_hint();
            } else {
                yield_now();
            }
        }
        // SAFETY: the job is closed and no worker is inside it: nobody reads `job`.
        s.job.with_mut(|j| unsafe { *j = None });
        // Take a worker's payload first, so that it cannot leak into the next job.
        let theirs = if s.panicked.swap(false, Ordering::Relaxed) {
            s.payload.lock().unwrap_or_else(|e| e.into_inner()).take()
        } else {
            None
        };
        if let Some(p) = mine.err().or(theirs) {
            resume_unwind(p);
        }
    }

    /// The thread index of the calling thread when it is running a task of this pool.
    #[inline]
    fn current_thread(&self) -> Option<usize> {
        Marker::current(&self.shared)
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        // Relaxed: a worker blocked on the flag reads it after the Acquire wait that returns on
        // the publish below; a spinning worker sees it within its loop.
        s.shutdown.store(true, Ordering::Relaxed);
        s.wake_workers(next_epoch(s.wake.epoch()));
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A worker: wait for an open epoch, join it, run the job, leave; until shutdown.
fn worker(s: &Shared, id: usize) {
    let _mark = Marker::enter(s, id);
    let mut seen = 0u32;
    while let Some(open) = wait_for_job(s, &mut seen) {
        if !join(s, open) {
            continue;
        }
        // SAFETY: we joined the open epoch whose job the caller wrote before its Release store
        // (our CAS Acquired it); the caller neither rewrites `job` nor returns before we leave.
        let job = s.job.with(|j| unsafe { *j });
        if let Some(job) = job {
            let r = catch_unwind(AssertUnwindSafe(|| {
                s.steal.with(|st| {
                    // SAFETY: `job` came from `JobRef::new` on the `&F` the caller keeps
                    // borrowed until no worker is active, which is after our leave below;
                    // `steal` is not rewritten before that either.
                    unsafe { (job.call)(job.data, &*st, id) }
                })
            }));
            if let Err(p) = r {
                s.record_panic(p);
            }
        }
        // Leave (see `leave_order`).
        s.state.fetch_sub(1, s.leave_order());
    }
}

/// Waits for an open epoch after `seen` and returns its `state` word, or `None` on shutdown.
/// Spins [`SPINS`] polls, then blocks on the wake-up flag until it passes the newest epoch seen.
fn wait_for_job(s: &Shared, seen: &mut u32) -> Option<u64> {
    let mut spins = 0u32;
    loop {
        if s.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        // Relaxed: only a guess; the join CAS (Acquire) validates it.
        let st = s.state.load(Ordering::Relaxed);
        let e = epoch_of(st);
        if e != *seen {
            // Either we join it now or it is closed (a closed epoch never reopens): never look
            // at this epoch again.
            *seen = e;
            if st & CLOSED == 0 {
                return Some(st);
            }
        }
        if spins < SPINS {
            spins += 1;
            spin_hint();
            continue;
        }
        // Block until the flag reaches the epoch after the newest one seen: `run` publishes it
        // after opening that job, `Drop` after setting `shutdown`. The flag's Acquire wait makes
        // that store (and `shutdown`) visible to the loads above. It cannot fail: the target
        // has bit 31 clear.
        let _ = s.wake.wait_blocking(next_epoch(*seen));
        spins = 0;
    }
}

/// Joins the epoch of `open` while it is still open; false if it was closed meanwhile.
fn join(s: &Shared, open: u64) -> bool {
    let e = epoch_of(open);
    let mut st = open;
    loop {
        if epoch_of(st) != e || st & CLOSED != 0 {
            return false;
        }
        // Acquire pairs with the caller's Release store that opened the epoch: the job and the
        // ranges it wrote before are visible. Failure is Relaxed: we only retry.
        match s
            .state
            .compare_exchange_weak(st, st + 1, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => return true,
            Err(now) => st = now,
        }
    }
}

#[cfg(not(loom))]
fn default_spawn(w: PoolWorker) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("hetero-pool-{}", w.index()))
        .spawn(move || w.run())
}

#[cfg(loom)]
fn default_spawn(w: PoolWorker) -> io::Result<JoinHandle<()>> {
    Ok(loom::thread::spawn(move || w.run()))
}

#[cfg(not(loom))]
std::thread_local! {
    /// The pool (its `Shared`'s address) and thread index whose task this thread is running;
    /// null outside any. Const-initialized: reading it never allocates.
    static CURRENT: core::cell::Cell<(*const Shared, usize)> =
        const { core::cell::Cell::new((core::ptr::null(), 0)) };
}

/// Marks the calling thread as running `pool`'s tasks as `thread` until dropped (restoring the
/// previous mark, for a task that runs a job of another pool).
struct Marker {
    #[cfg(not(loom))]
    prev: (*const Shared, usize),
}

impl Marker {
    #[inline]
    fn enter(s: &Shared, thread: usize) -> Self {
        #[cfg(not(loom))]
        {
            let prev = CURRENT.with(|c| c.replace((s as *const Shared, thread)));
            Marker { prev }
        }
        #[cfg(loom)]
        {
            let _ = (s, thread);
            Marker {}
        }
    }

    #[inline]
    fn current(s: &Shared) -> Option<usize> {
        #[cfg(not(loom))]
        {
            let (p, t) = CURRENT.with(|c| c.get());
            core::ptr::eq(p, s).then_some(t)
        }
        #[cfg(loom)]
        {
            // The loom models do not nest jobs.
            let _ = s;
            None
        }
    }
}

impl Drop for Marker {
    #[inline]
    fn drop(&mut self) {
        #[cfg(not(loom))]
        CURRENT.with(|c| c.set(self.prev));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn batches_cover_every_task_once() {
        let pool = ThreadPool::new(3).unwrap();
        for (n, batch) in [(0, 7), (1, 7), (20, 7), (21, 7), (22, 7), (100, 1)] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            pool.run_batched(n, batch, &|t, thread| {
                assert!(thread < 3);
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{n} tasks in batches of {batch}"
            );
        }
    }
}
