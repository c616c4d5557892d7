//! Atomics, spin hints and the block-phase parking swapped for loom's under `cfg(loom)`, so the
//! same flag and barrier code is model-checked.
//!
//! Under loom the futex is modelled by a `Mutex` + `Condvar` pair that lives beside the epoch
//! word (loom has no futex): `park` re-checks the word under the mutex before sleeping and
//! `unpark_all` takes the mutex before notifying, which is exactly the futex contract (the kernel
//! compares the word and enqueues the waiter atomically with respect to a wake). A lost wake-up in
//! the flag's protocol therefore shows up as a loom deadlock.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64};

pub(crate) use core::sync::atomic::Ordering;

/// One step of a busy-wait: a CPU spin hint, or a yield to loom's scheduler under the model
/// (loom must see the loop give way, or it explores it forever).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Loom's stand-in for the futex (see the module comment).
#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct Parker {
    lock: loom::sync::Mutex<()>,
    cv: loom::sync::Condvar,
}

#[cfg(loom)]
impl Parker {
    /// Sleeps while `word == expected` (checked under the lock), until `unpark_all`.
    pub(crate) fn park(&self, word: &AtomicU32, expected: u32) {
        let guard = self.lock.lock().unwrap();
        // SeqCst here only models the kernel's own compare; the data hand-off is the caller's
        // Acquire load after waking.
        if word.load(Ordering::SeqCst) == expected {
            drop(self.cv.wait(guard).unwrap());
        }
    }

    /// Wakes every parked waiter.
    pub(crate) fn unpark_all(&self) {
        let _guard = self.lock.lock().unwrap();
        self.cv.notify_all();
    }
}

/// Blocks the calling thread while `*word == expected`, for at most `timeout_ns` (None: no
/// limit). May return early or spuriously; callers re-check.
///
/// A shared futex (no `FUTEX_PRIVATE_FLAG`): a flag may live in memory another process maps
/// (a uma slot's flag in its memfd, a `hetero_sync_flag_init` flag in a `MAP_SHARED` page), and
/// the kernel keys a shared futex by the backing page, so a publish in one process wakes a
/// waiter in another, whatever address each maps the page at. A private futex is keyed by the
/// process's address space: such a waiter would never wake. The cost, paid only in the block
/// phase (`benches/futex_shared.rs`, loaded dev VM): +0.2–0.4 µs per wake and +1.5–4.6 µs per
/// blocking round trip over private futexes (`benches/results/sync.md`).
#[cfg(all(feature = "std", not(loom), target_os = "linux"))]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: Option<u64>) {
    let ts;
    let ts_ptr = match timeout_ns {
        Some(ns) => {
            ts = libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            };
            &ts as *const libc::timespec
        }
        None => core::ptr::null(),
    };
    // SAFETY: `word` is a live, 4-byte aligned atomic for the whole call; FUTEX_WAIT only reads
    // it and compares with `expected`; `ts_ptr` is null or points to a timespec that outlives the
    // call. The return value (EAGAIN, EINTR, ETIMEDOUT) needs no handling: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
        );
    }
}

/// Wakes every thread blocked in [`futex_wait`] on `word`, in any process (a shared futex, as
/// in [`futex_wait`]).
#[cfg(all(feature = "std", not(loom), target_os = "linux"))]
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned atomic; FUTEX_WAKE does not access memory through it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// Without a futex the block phase is a short timed sleep: the caller re-checks after it.
#[cfg(all(feature = "std", not(loom), not(target_os = "linux")))]
pub(crate) fn futex_wait(_word: &AtomicU32, _expected: u32, timeout_ns: Option<u64>) {
    let ns = timeout_ns.unwrap_or(50_000).min(50_000);
    std::thread::sleep(std::time::Duration::from_nanos(ns));
}

/// Nothing to wake without a futex: waiters wake on their own timer.
#[cfg(all(feature = "std", not(loom), not(target_os = "linux")))]
pub(crate) fn futex_wake_all(_word: &AtomicU32) {}
