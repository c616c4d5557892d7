//! A persistent thread pool over [`StealState`]: `run(n_tasks, f)` calls `f(task, thread)` once
//! for every task index, the calling thread taking part as thread 0.
//!
//! Built for a shared, oversubscribed machine and for back-to-back jobs of a few microseconds
//! (a decode step runs hundreds). Every worker has a *seat*: a 128-byte line of its own holding
//! its state word (`epoch << 2 | status`), a "sleepy" flag and the [`CompletionFlag`] it blocks
//! on. Nothing is shared between workers, so a job costs the caller a store per participant
//! rather than a contended read-modify-write per worker on one word:
//!
//! 1. **open**: the caller writes the job (a data pointer and a monomorphized trampoline) and
//!    prepares the steal ranges for the job's `p` participants, then stores `(e, OPEN)` into the
//!    seat of each participating worker (Release: the job and the ranges are visible to a worker
//!    that reads it); then a SeqCst fence, and for each participant that said it is sleepy, a
//!    publish on its flag (the wake-up);
//! 2. **join**: a worker that reads `(e, OPEN)` on its seat CASes it to `(e, JOINED)`; the CAS
//!    fails if the caller closed the seat meanwhile, and the worker skips the job;
//! 3. **claim**: every thread in the job claims tasks by range work stealing until all are
//!    claimed;
//! 4. **leave**: the worker stores `(e, DONE)` (Release: its task outputs happen-before the
//!    caller's Acquire load of it);
//! 5. **close**: the caller, once its own claiming ends (so every task is claimed), walks the
//!    participants' seats: `DONE` is finished, `JOINED` is waited for, `OPEN` (a worker that did
//!    not start in time) is CASed to `(e, DONE)` so that it can no longer join; then it clears
//!    the job.
//!
//! A worker descheduled before it joined is never waited for. Idle workers spin on their own
//! seat (a line only the caller writes), then set "sleepy", fence, re-check the seat and block on
//! their flag (a futex). The fences make the two sides a Dekker pair: either the caller's check
//! sees "sleepy" and publishes the flag, or the worker's re-check sees the open seat.

mod chunks;
mod error;

use std::any::Any;
use std::io;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use hetero_sync::{next_epoch, CompletionFlag};

use crate::parallel::StealState;
use crate::primitive::{
    fence, spin_hint, yield_now, AtomicBool, AtomicU32, JoinHandle, Mutex, Ordering, UnsafeCell,
};
// std's `Arc` under loom too: its reference count is not part of the protocol, and loom's
// `Arc` would turn a deadlock the model reports in `Drop` into a panic-while-panicking abort.
use std::sync::Arc;

pub use chunks::ColumnBlock;
pub use error::PoolError;

/// The most threads a pool runs: far above any core count, low enough that the per-thread
/// state (a 128-byte seat and a 128-byte steal range each) stays small.
pub const MAX_THREADS: usize = 1 << 16;
/// The most tasks one job indexes (task indices are `u32` in the steal ranges); [`ThreadPool::run`]
/// splits larger counts into several jobs.
pub const MAX_TASKS: usize = u32::MAX as usize;

/// Busy-wait polls before a worker blocks on its flag, and before a caller waiting for workers
/// to leave starts yielding. 4000 spin hints are ~40-200 µs (a pause is ~10 ns on AMD Zen,
/// ~50 ns on Intel since Skylake): long enough to bridge the gap between the back-to-back
/// jobs of a decode step, short enough not to burn a core between tokens. A spinning worker
/// reads only its own seat, so it costs the others nothing. Under loom one poll, so the model
/// explores both the spinning and the blocking path.
const SPINS: u32 = if cfg!(loom) { 1 } else { 4_000 };

/// A seat's status (its word's low 2 bits): a job is open for the worker...
const OPEN: u32 = 1;
/// ...the worker joined it...
const JOINED: u32 = 2;
/// ...the worker left it, or the caller closed it before the worker joined (also the initial
/// state).
const DONE: u32 = 3;
/// The status bits of a seat word; the epoch is the 30 bits above them.
const STATUS: u32 = 3;

/// A seat word: `epoch` (30 bits, wrapping) and a status.
#[inline]
fn seat_word(epoch: u32, status: u32) -> u32 {
    epoch << 2 | status
}

/// The status of a seat word.
#[inline]
fn status_of(word: u32) -> u32 {
    word & STATUS
}

/// The epoch after `e` in a seat word (30 bits, wrapping). A worker's stale join CAS could only
/// match again after 2^30 jobs during which it never ran.
#[inline]
fn next_seat_epoch(e: u32) -> u32 {
    (e + 1) & ((1 << 30) - 1)
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
    /// Open the seats with Relaxed stores: a joining worker may read a stale job.
    RelaxedOpen,
    /// Leave with a Relaxed store: the caller may return before a worker's outputs are visible.
    RelaxedLeave,
    /// Never publish a sleepy worker's flag: a lost wake-up (deadlock).
    NoWake,
    /// Leave out the caller's SeqCst fence between opening the seats and reading "sleepy": both
    /// sides may miss the other's store (a lost wake-up).
    NoFence,
    /// Close a seat with a plain store instead of a CAS: a worker that joined meanwhile is not
    /// waited for (its outputs race the caller's reads).
    BlindClose,
}

/// One worker's line: what the caller and that worker alone share.
#[repr(align(128))]
struct Seat {
    /// `epoch << 2 | status` (see [`OPEN`], [`JOINED`], [`DONE`]).
    state: AtomicU32,
    /// The worker is about to block (or blocked) on `bell`; see [`wait_for_job`].
    sleepy: AtomicBool,
    /// Where the worker blocks; the caller publishes it when it opens a job for a sleepy
    /// worker, `Drop` at shutdown.
    bell: CompletionFlag,
}

impl Seat {
    fn new() -> Self {
        Self {
            state: AtomicU32::new(seat_word(0, DONE)),
            sleepy: AtomicBool::new(false),
            bell: CompletionFlag::new(),
        }
    }

    /// Wakes the worker if it blocked on its flag (or is about to). Only the job's caller and
    /// `Drop` publish a bell, one at a time, so the next epoch is never refused.
    fn ring(&self) {
        let _ = self.bell.publish(next_epoch(self.bell.epoch()));
    }
}

struct Shared {
    /// One seat per thread index (index 0, the caller's, is unused).
    seats: Box<[Seat]>,
    /// The epoch of the current (or last) job; only the caller holding `run_lock` touches it.
    epoch: UnsafeCell<u32>,
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

// SAFETY: `epoch`, `job` and `steal` are written only by a caller holding `run_lock`, while
// every seat of the previous job is `DONE` (no worker inside), before the Release stores that
// open the next job's seats; `job` and `steal` are read only by that caller and by workers that
// joined the open job (an Acquire CAS on their seat that read that store), which the caller
// waits for (Acquire loads of `DONE`) before it writes them again. The job's pointee is `Sync`
// (`JobRef::new` requires it); `StealState` is atomics. Every other field is `Sync` and `Send`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer in `job` is dereferenced only under that protocol.
unsafe impl Send for Shared {}

impl Shared {
    /// Release: publishes the job and the ranges to the worker whose join reads the store.
    fn open_order(&self) -> Ordering {
        #[cfg(loom)]
        if self.fault == Some(LoomFault::RelaxedOpen) {
            return Ordering::Relaxed;
        }
        Ordering::Release
    }

    /// Release: the worker's task outputs happen-before the caller's Acquire load of `DONE`.
    fn leave_order(&self) -> Ordering {
        #[cfg(loom)]
        if self.fault == Some(LoomFault::RelaxedLeave) {
            return Ordering::Relaxed;
        }
        Ordering::Release
    }

    /// Opens job `epoch` for workers `1..participants`, and wakes those that are (about to be)
    /// blocked.
    fn open(&self, epoch: u32, participants: usize) {
        let seats = &self.seats[1..participants];
        let order = self.open_order();
        for seat in seats {
            seat.state.store(seat_word(epoch, OPEN), order);
        }
        // Dekker with the worker's fence in `wait_for_job`: it stores `sleepy`, fences, then
        // re-reads its seat; we store the seat, fence, then read `sleepy`. Whatever the
        // interleaving, either it sees the open seat or we see it sleepy and ring.
        #[cfg(loom)]
        let fenced = self.fault != Some(LoomFault::NoFence);
        #[cfg(not(loom))]
        let fenced = true;
        if fenced {
            fence(Ordering::SeqCst);
        }
        #[cfg(loom)]
        if self.fault == Some(LoomFault::NoWake) {
            return;
        }
        for seat in seats {
            // Relaxed: the fence above orders it (see the Dekker note).
            if seat.sleepy.load(Ordering::Relaxed) {
                seat.ring();
            }
        }
    }

    /// Closes job `epoch` on the seats of workers `1..participants`: returns once none of them
    /// is inside it, the outputs of those that ran visible to the caller.
    fn close(&self, epoch: u32, participants: usize) {
        for seat in &self.seats[1..participants] {
            // Acquire: a `DONE` stored by the worker's leave (Release) makes its task outputs
            // visible to us.
            let mut word = seat.state.load(Ordering::Acquire);
            let mut spins = 0u32;
            loop {
                match status_of(word) {
                    DONE => break,
                    OPEN => {
                        #[cfg(loom)]
                        if self.fault == Some(LoomFault::BlindClose) {
                            seat.state.store(seat_word(epoch, DONE), Ordering::Relaxed);
                            break;
                        }
                        // The worker has not joined: close its seat so that it cannot. Success
                        // is Relaxed (it ran nothing of this job); failure Acquires the fresh
                        // word (it joined, or even left: then its outputs).
                        match seat.state.compare_exchange(
                            word,
                            seat_word(epoch, DONE),
                            Ordering::Relaxed,
                            Ordering::Acquire,
                        ) {
                            Ok(_) => break,
                            Err(now) => word = now,
                        }
                    }
                    _ => {
                        // Joined: it is running its part; it leaves once no task is left.
                        if spins < SPINS {
                            spins += 1;
                            spin_hint();
                        } else {
                            yield_now();
                        }
                        word = seat.state.load(Ordering::Acquire);
                    }
                }
            }
        }
    }

    /// Keeps the first task panic's payload for the caller to resume.
    fn record_panic(&self, p: Box<dyn Any + Send>) {
        let mut slot = self.payload.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(p);
        }
        // Relaxed: the caller reads it after its Acquire load of our `DONE`, which our Release
        // leave (after this store) synchronizes with.
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
    /// Jobs that woke workers so far ([`ThreadPool::dispatches`]); a statistic outside the
    /// protocol (std's atomic under loom too).
    dispatches: core::sync::atomic::AtomicU64,
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
            seats: (0..threads).map(|_| Seat::new()).collect(),
            epoch: UnsafeCell::new(0),
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
            dispatches: core::sync::atomic::AtomicU64::new(0),
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

    /// Jobs so far that opened workers' seats (not those run inline on the caller alone):
    /// what a profile multiplies by the dispatch cost. Only the caller holding the run lock
    /// adds to it; read it between jobs.
    pub fn dispatches(&self) -> u64 {
        self.dispatches.load(Ordering::Relaxed)
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
            self.job(n, self.threads, &|ranges: &StealState, thread: usize| {
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
    /// `steal`) and return once none is left. Returns when every `f` has returned. At most
    /// `n_tasks` threads take part (a job of 3 tasks wakes 2 workers, not all of them).
    ///
    /// Errors (nothing runs): [`PoolError::TooManyTasks`] above [`MAX_TASKS`];
    /// [`PoolError::Nested`] from inside a task of this pool. Resumes a task's panic after every
    /// worker is out.
    pub fn run_workers<F>(&self, n_tasks: usize, f: &F) -> Result<(), PoolError>
    where
        F: Fn(&StealState, usize) + Sync,
    {
        self.run_workers_on(n_tasks, self.threads, f)
    }

    /// [`ThreadPool::run_workers`] on at most `threads` threads (the caller and workers
    /// `1..threads`; clamped to `1..=self.threads()`), for a job whose work is worth fewer
    /// wake-ups than the pool has threads (e.g. a small matmul at decode). The other workers
    /// are not woken, and `ranges` holds tasks only for the threads taking part.
    pub fn run_workers_on<F>(&self, n_tasks: usize, threads: usize, f: &F) -> Result<(), PoolError>
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
        self.job(n_tasks, threads, f);
        Ok(())
    }

    /// One job (the protocol in the module docs) on at most `threads` threads. The caller holds
    /// `run_lock`; `n_tasks` ≤ [`MAX_TASKS`].
    fn job<F: Fn(&StealState, usize) + Sync>(&self, n_tasks: usize, threads: usize, f: &F) {
        let s = &*self.shared;
        // The caller and workers 1..p: no more threads than tasks (a thread without a range
        // would only look for one to steal).
        let p = threads.min(n_tasks).clamp(1, self.threads);
        // SAFETY: we hold `run_lock` and the previous job ended with every seat `DONE` (its
        // caller waited for that), so no thread reads `steal` until a seat opens below.
        // Cannot fail: `n_tasks` ≤ MAX_TASKS.
        let _ = s
            .steal
            .with_mut(|st| unsafe { &mut *st }.prepare_active(n_tasks, p));
        if p == 1 {
            let _mark = Marker::enter(s, 0);
            // SAFETY: no worker takes part; we are the only reader.
            s.steal.with(|st| f(unsafe { &*st }, 0));
            return;
        }
        self.dispatches
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        // SAFETY: as for `steal` above.
        s.job.with_mut(|j| unsafe { *j = Some(JobRef::new(f)) });
        // SAFETY: only the caller holding `run_lock` touches the epoch.
        let epoch = s.epoch.with_mut(|e| unsafe {
            *e = next_seat_epoch(*e);
            *e
        });
        s.open(epoch, p);
        let mine = {
            let _mark = Marker::enter(s, 0);
            // The caller's own part; caught so that an unwind cannot end `f`'s borrow while
            // workers still run it.
            catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: `steal` is not written again before the job ends (see `Shared`).
                s.steal.with(|st| f(unsafe { &*st }, 0))
            }))
        };
        // Every task is claimed: wait for the workers inside, shut out the others.
        s.close(epoch, p);
        // SAFETY: every seat is `DONE`: nobody reads `job`.
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
        // Relaxed: a blocked worker reads it after the Acquire wait that returns on its ring
        // below (a Release publish after this store); a spinning worker sees it within its loop.
        s.shutdown.store(true, Ordering::Relaxed);
        for seat in &s.seats[1..] {
            seat.ring();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A worker: wait for a job opened on its seat, join it, run it, leave; until shutdown.
fn worker(s: &Shared, id: usize) {
    let _mark = Marker::enter(s, id);
    let seat = &s.seats[id];
    while let Some(open) = wait_for_job(s, seat) {
        let epoch = open >> 2;
        // Join. Acquire on success pairs with the caller's Release store of `open` (the CAS
        // reads that very store): the job and the ranges are visible. It fails only if the
        // caller closed the seat meanwhile (the job is over for us). Failure is Relaxed: we
        // only go back to waiting.
        if seat
            .state
            .compare_exchange(
                open,
                seat_word(epoch, JOINED),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            continue;
        }
        // SAFETY: we joined the job whose descriptor the caller wrote before its Release store
        // of our seat (our CAS Acquired it); the caller neither rewrites `job` nor returns
        // before we leave.
        let job = s.job.with(|j| unsafe { *j });
        if let Some(job) = job {
            let r = catch_unwind(AssertUnwindSafe(|| {
                s.steal.with(|st| {
                    // SAFETY: `job` came from `JobRef::new` on the `&F` the caller keeps
                    // borrowed until every seat is `DONE`, which is after our leave below;
                    // `steal` is not rewritten before that either.
                    unsafe { (job.call)(job.data, &*st, id) }
                })
            }));
            if let Err(p) = r {
                s.record_panic(p);
            }
        }
        // Leave (see `leave_order`).
        seat.state.store(seat_word(epoch, DONE), s.leave_order());
    }
}

/// Waits until `seat` holds an open job and returns its word, or `None` on shutdown. Spins
/// [`SPINS`] polls of the seat, then blocks on the seat's flag.
fn wait_for_job(s: &Shared, seat: &Seat) -> Option<u32> {
    let mut spins = 0u32;
    loop {
        if s.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        // Relaxed: only a guess; the join CAS (Acquire) validates it.
        let word = seat.state.load(Ordering::Relaxed);
        if status_of(word) == OPEN {
            return Some(word);
        }
        if spins < SPINS {
            spins += 1;
            spin_hint();
            continue;
        }
        // Block. Announce it, then fence, then re-read the seat: the Dekker pair with the
        // caller's store-fence-load in `Shared::open` (either it sees `sleepy` and rings, or
        // we see its open seat). The flag's epoch is read after the fence too: a ring that
        // happened before that read came after the caller's seat store, which the re-read then
        // sees; a later ring reaches `next_epoch(bell)` and wakes us.
        seat.sleepy.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let bell = seat.bell.epoch();
        let word = seat.state.load(Ordering::Relaxed);
        if status_of(word) != OPEN && !s.shutdown.load(Ordering::Relaxed) {
            // It cannot fail: the target has bit 31 clear.
            let _ = seat.bell.wait_blocking(next_epoch(bell));
        }
        seat.sleepy.store(false, Ordering::Relaxed);
        spins = 0;
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
