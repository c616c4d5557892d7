//! A two-thread pool for timing parallel calls without a thread spawn per call: the caller is
//! worker 0, one persistent helper thread is worker 1. Shared by the `int8/` bench group and
//! `examples/int8_cputime.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A borrowed job, lifetime erased while one `Pool::run` call waits for it.
#[derive(Clone, Copy)]
struct Job(*const (dyn Fn(usize) + Sync));
// SAFETY: the pointee is Sync and outlives every use (`run` waits for the worker to finish it).
unsafe impl Send for Job {}

struct Shared {
    epoch: AtomicU64,
    done: AtomicU64,
    quit: AtomicBool,
    job: Mutex<Option<Job>>,
}

/// One persistent helper thread (worker 1; the caller is worker 0), so a two-thread call does
/// not pay a thread spawn. It spins (with yields) while the pool exists: drop it after use.
pub struct Pool {
    sh: Arc<Shared>,
    th: Option<std::thread::JoinHandle<()>>,
}

impl Pool {
    /// Starts the helper thread.
    pub fn new() -> Self {
        let sh = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            done: AtomicU64::new(0),
            quit: AtomicBool::new(false),
            job: Mutex::new(None),
        });
        let s2 = sh.clone();
        let th = std::thread::spawn(move || {
            let mut seen = 0;
            loop {
                let mut spins = 0u32;
                while s2.epoch.load(Ordering::Acquire) == seen {
                    if s2.quit.load(Ordering::Relaxed) {
                        return;
                    }
                    spins += 1;
                    if spins > 1 << 12 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                seen = s2.epoch.load(Ordering::Acquire);
                let job = s2.job.lock().unwrap().expect("job set before epoch");
                // SAFETY: `run` set the job before bumping the epoch and waits for `done`
                // before returning, so the pointee is alive.
                unsafe { (*job.0)(1) };
                s2.done.store(seen, Ordering::Release);
            }
        });
        Self { sh, th: Some(th) }
    }

    /// Runs `f(0)` here and `f(1)` on the helper; returns when both are done.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        // SAFETY: only the lifetime is erased; this call waits below until the worker is done
        // with `f` and never lets the pointer escape.
        let p: *const (dyn Fn(usize) + Sync + 'static) = unsafe { core::mem::transmute(f) };
        *self.sh.job.lock().unwrap() = Some(Job(p));
        let e = self.sh.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        f(0);
        // Spin briefly, then yield: on a loaded machine the helper may be descheduled.
        let mut spins = 0u32;
        while self.sh.done.load(Ordering::Acquire) != e {
            spins += 1;
            if spins > 1 << 12 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.sh.quit.store(true, Ordering::Relaxed);
        if let Some(t) = self.th.take() {
            let _ = t.join();
        }
    }
}

impl Default for Pool {
    fn default() -> Self {
        Self::new()
    }
}
