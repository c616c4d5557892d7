//! The baseline of `pool_dispatch`: `hetero_sme::ThreadPool`'s protocol as it was before the
//! per-worker seats (commit 226132f, `sme/src/pool.rs`), reduced to std atomics and to the
//! paths the example times (no loom, no nesting marker, no panic forwarding). One `AtomicU64
//! state` holds the job's epoch, a `CLOSED` bit and the count of workers inside: every worker
//! joins with a CAS and leaves with a `fetch_sub` on that one word, and idle workers poll it,
//! then block on one shared `CompletionFlag`. Not for use outside the comparison.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use hetero_sme::StealState;
use hetero_sync::{next_epoch, CompletionFlag};

const CLOSED: u64 = 1 << 31;
const ACTIVE: u64 = CLOSED - 1;
const SPINS: u32 = 4_000;

fn epoch_of(state: u64) -> u32 {
    (state >> 32) as u32
}

type Job = *const (dyn Fn(&StealState, usize) + Sync + 'static);

struct Shared {
    state: AtomicU64,
    wake: CompletionFlag,
    job: UnsafeCell<Option<Job>>,
    steal: UnsafeCell<StealState>,
    shutdown: AtomicBool,
}

// SAFETY: `job` and `steal` are written only by `run` while the previous job is closed with no
// active worker, and read only by workers that joined the open epoch (an Acquire CAS that read
// the Release store opening it), which `run` waits for before writing them again.
unsafe impl Sync for Shared {}
// SAFETY: as above.
unsafe impl Send for Shared {}

/// The state-word pool.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

impl Pool {
    /// The caller plus `threads - 1` workers.
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            wake: CompletionFlag::new(),
            job: UnsafeCell::new(None),
            steal: UnsafeCell::new(StealState::new(threads.max(1)).expect("threads")),
            shutdown: AtomicBool::new(false),
        });
        let workers = (1..threads.max(1))
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

    /// `f(task, thread)` for every task (inline for one task or no worker).
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        let _one = self.run_lock.lock().unwrap();
        if self.workers.is_empty() || n_tasks <= 1 {
            (0..n_tasks).for_each(|t| f(t, 0));
            return;
        }
        let s = &*self.shared;
        // SAFETY: no worker is inside a job (the previous call waited for that).
        unsafe { &mut *s.steal.get() }.prepare(n_tasks).unwrap();
        let job = |st: &StealState, th: usize| {
            let _ = st.run_worker(th, |t| f(t, th));
        };
        let job: &(dyn Fn(&StealState, usize) + Sync) = &job;
        // SAFETY: the pointer is used only by workers inside this job, which ends before `job`
        // goes out of scope (we wait for every joined worker below).
        let job: Job = unsafe { std::mem::transmute(job as *const _) };
        // SAFETY: as for `steal`.
        unsafe { *s.job.get() = Some(job) };
        let epoch = next_epoch(epoch_of(s.state.load(Ordering::Relaxed)));
        s.state.store(u64::from(epoch) << 32, Ordering::Release);
        let _ = s.wake.publish(epoch);
        // SAFETY: `steal` is not rewritten before the job ends.
        let _ = unsafe { &*s.steal.get() }.run_worker(0, |t| f(t, 0));
        s.state.fetch_or(CLOSED, Ordering::Relaxed);
        let mut spins = 0;
        while s.state.load(Ordering::Acquire) & ACTIVE != 0 {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: closed, no worker inside.
        unsafe { *s.job.get() = None };
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::Relaxed);
        let _ = s.wake.publish(next_epoch(s.wake.epoch()));
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(s: &Shared, id: usize) {
    let mut seen = 0u32;
    'jobs: loop {
        // Wait for a new open epoch.
        let mut spins = 0u32;
        let open = loop {
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            let st = s.state.load(Ordering::Relaxed);
            let e = epoch_of(st);
            if e != seen {
                seen = e;
                if st & CLOSED == 0 {
                    break st;
                }
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let _ = s.wake.wait_blocking(next_epoch(seen));
            spins = 0;
        };
        // Join while it is open.
        let mut st = open;
        loop {
            if epoch_of(st) != epoch_of(open) || st & CLOSED != 0 {
                continue 'jobs;
            }
            match s
                .state
                .compare_exchange_weak(st, st + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => st = now,
            }
        }
        // SAFETY: joined the open epoch; the caller waits for our leave.
        if let Some(job) = unsafe { *s.job.get() } {
            // SAFETY: as above: the job and the ranges outlive our leave.
            unsafe { (*job)(&*s.steal.get(), id) };
        }
        s.state.fetch_sub(1, Ordering::Release);
    }
}
