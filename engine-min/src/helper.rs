//! A persistent helper thread that runs one borrowed job while the caller runs another: the
//! host side of an offloaded processor (the GPU's or NPU's part of a split matmul) next to the
//! CPU's part on the calling thread. Like `rayon::join`, but the helper is started once, a job
//! allocates nothing, and completion is signalled on a `hetero_sync::CompletionFlag` the caller
//! chooses — the output slot's own flag, so the consumer of a split output waits on the slot.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hetero_sync::{CompletionFlag, Producer, SyncError, WaitConfig};

/// A type-erased borrowed job: `call(data)` runs it once.
#[derive(Clone, Copy)]
struct JobRef {
    data: *const (),
    call: unsafe fn(*const ()),
    /// Where to publish `epoch` when the job is done.
    flag: *const CompletionFlag,
    epoch: u32,
}

// SAFETY: the pointers name the caller's stack frame, which `join` keeps alive (it does not
// return) until the helper has published the job's completion; the job closure is `Send`.
unsafe impl Send for JobRef {}

struct Shared {
    job: Mutex<Option<JobRef>>,
    cv: Condvar,
    stop: AtomicBool,
    /// Jobs finished; bumped after every job whatever its flag did, so a waiter whose flag
    /// never moved still learns when the helper let go of its frame.
    finished: AtomicU64,
}

/// One helper thread.
pub struct Helper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// `join` is not reentrant (one job at a time).
    busy: Mutex<()>,
}

/// The job's closure and, once it ran, its result (or its panic).
struct Slot<F, A> {
    f: UnsafeCell<Option<F>>,
    out: UnsafeCell<Option<std::thread::Result<A>>>,
}

/// Runs the job in `data` (a `Slot<F, A>`).
///
/// # Safety
/// `data` points to a live `Slot<F, A>` that no other thread touches until the completion is
/// published.
unsafe fn trampoline<F: FnOnce() -> A, A>(data: *const ()) {
    // SAFETY: forwarded from the caller: a live slot, ours alone for now.
    let slot = unsafe { &*(data as *const Slot<F, A>) };
    // SAFETY: as above; `join` wrote `f` before publishing and reads `out` only after.
    let f = unsafe { (*slot.f.get()).take() };
    if let Some(f) = f {
        let r = catch_unwind(AssertUnwindSafe(f));
        // SAFETY: as above.
        unsafe { *slot.out.get() = Some(r) };
    }
}

impl Helper {
    /// Starts the helper thread (named `name`).
    pub fn spawn(name: &str) -> Result<Helper, std::io::Error> {
        let shared = Arc::new(Shared {
            job: Mutex::new(None),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            finished: AtomicU64::new(0),
        });
        let sh = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&sh))?;
        Ok(Helper {
            shared,
            thread: Some(thread),
            busy: Mutex::new(()),
        })
    }

    /// Runs `f` on the helper and `g` here, at once; returns both results once both are done.
    /// The helper publishes `epoch` on `done` when `f` has returned, and this waits for that
    /// (`done` must be a flag only this call publishes to, with `epoch` ahead of it: the
    /// executor passes the output slot's flag and its next epoch). A panic in `f` resumes
    /// here. If the flag does not reach `epoch` within two minutes the result is the flag's
    /// [`SyncError::Timeout`], returned only after the helper has finished with the job (it is
    /// never abandoned while it may still touch the caller's frame).
    pub fn join<F, A, G, B>(
        &self,
        done: &CompletionFlag,
        epoch: u32,
        f: F,
        g: G,
    ) -> (Result<A, SyncError>, B)
    where
        F: FnOnce() -> A + Send,
        A: Send,
        G: FnOnce() -> B,
    {
        let _one = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let seen = self.shared.finished.load(Ordering::Acquire);
        let slot: Slot<F, A> = Slot {
            f: UnsafeCell::new(Some(f)),
            out: UnsafeCell::new(None),
        };
        let job = JobRef {
            data: (&slot as *const Slot<F, A>).cast(),
            call: trampoline::<F, A>,
            flag: done,
            epoch,
        };
        {
            let mut j = self.shared.job.lock().unwrap_or_else(|e| e.into_inner());
            *j = Some(job);
        }
        self.shared.cv.notify_one();
        let b = g();
        let cfg = WaitConfig {
            producer: Producer::Device,
            timeout: Duration::from_secs(120),
            ..WaitConfig::default()
        };
        let waited = done.wait(epoch, &cfg, None).map(|_| ());
        if waited.is_err() {
            // Never return while the helper may still use the slot: wait for it to let go.
            while self.shared.finished.load(Ordering::Acquire) == seen {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // SAFETY: the helper published completion (Release) after writing `out`, and the flag
        // wait Acquired it; the helper no longer touches the slot.
        let out = unsafe { (*slot.out.get()).take() };
        let a = match out {
            Some(Ok(a)) => waited.map(|()| a),
            Some(Err(p)) => resume_unwind(p),
            None => Err(waited.err().unwrap_or(SyncError::Timeout {
                target: epoch,
                observed: done.epoch(),
            })),
        };
        (a, b)
    }
}

fn run(sh: &Shared) {
    loop {
        let job = {
            let mut j = sh.job.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if sh.stop.load(Ordering::Acquire) {
                    return;
                }
                if let Some(job) = j.take() {
                    break job;
                }
                j = sh.cv.wait(j).unwrap_or_else(|e| e.into_inner());
            }
        };
        // SAFETY: `join` keeps the slot and the flag alive until the completion below is
        // published, and nobody else touches the slot meanwhile.
        unsafe { (job.call)(job.data) };
        // SAFETY: as above: the flag outlives the job.
        let flag = unsafe { &*job.flag };
        // Release (inside publish): the job's writes happen-before the waiter's Acquire. An
        // epoch that does not move forward is refused; the waiter then times out and learns
        // from `finished` that the frame is free.
        let _ = flag.publish(job.epoch);
        // Release: the job's writes happen-before a timed-out waiter's Acquire of the count.
        sh.finished.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = self.shared.job.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
