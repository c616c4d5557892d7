//! The completion flag: one 32-bit epoch word.

use crate::epoch::{epoch_is_after, epoch_reached, EPOCH_MASK, WAITERS_BIT};
use crate::primitive::{spin_hint, AtomicU32, Ordering};
use crate::SyncError;

/// The largest busy-wait step of the poll phase, in spin hints: the backoff doubles 1, 2, 4, ...
/// up to this, so one poll never lags the flag by more than 8 pause instructions. A pause costs
/// ~10 ns on AMD Zen but ~140 cycles (~50-70 ns) on Intel since Skylake: 64 hints there lagged
/// the flag by up to ~4 µs and put the median wake-up near 0.8 µs; 8 bound the lag to ~0.5 µs.
/// One consumer re-reading one shared line costs the producer nothing until it writes.
pub(crate) const MAX_BACKOFF: u32 = 8;

/// A completion epoch word, meant to live beside an output tensor in memory a device can write.
///
/// Layout (`repr(C)`, 4 bytes, 4-byte aligned; asserted at compile time): one `u32`. Bits 0..31
/// hold the epoch (31 bits, compared with wrapping arithmetic, see [`crate::EPOCH_WINDOW`]);
/// bit 31 ([`WAITERS_BIT`]) is set by a consumer that is about to block in the kernel, so a
/// thread producer knows to issue a futex wake. Epoch 0 means "nothing published yet".
///
/// Producers publish epoch `e` *after* writing their data, with release semantics:
/// - a CPU thread calls [`CompletionFlag::publish`];
/// - an OpenCL kernel writes its data, executes `mem_fence(CLK_GLOBAL_MEM_FENCE)` and then
///   `atomic_xchg((volatile __global uint *)flag, e)` from one work-item after the others are
///   done (e.g. a one-work-item "publish" kernel enqueued after the op on an in-order queue), on a
///   buffer created over the flag's memory (`CL_MEM_USE_HOST_PTR`). OpenCL 1.2 does not promise
///   host visibility before the command completes, so where that matters the portable route is
///   an event callback (`clSetEventCallback`) that calls `publish` on the host;
/// - an NPU completion callback (e.g. QNN's asynchronous execute notification) calls
///   [`CompletionFlag::publish`].
///
/// A device store clears [`WAITERS_BIT`] without waking anyone, so consumers of a device
/// producer wait with [`crate::Producer::Device`] (a timed poll), never a futex block.
#[repr(C)]
#[derive(Debug)]
pub struct CompletionFlag {
    word: AtomicU32,
    #[cfg(loom)]
    parker: crate::primitive::Parker,
}

#[cfg(not(loom))]
const _: () = {
    assert!(core::mem::size_of::<CompletionFlag>() == 4);
    assert!(core::mem::align_of::<CompletionFlag>() == 4);
};

impl CompletionFlag {
    /// A flag at epoch 0 (nothing published yet).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
        }
    }

    /// A flag at epoch 0 (nothing published yet).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
            parker: Default::default(),
        }
    }

    /// A flag already at epoch `e` (low 31 bits), e.g. to test wrap-around or to resume.
    #[cfg(not(loom))]
    pub const fn with_epoch(e: u32) -> Self {
        Self {
            word: AtomicU32::new(e & EPOCH_MASK),
        }
    }

    /// A flag already at epoch `e` (low 31 bits), e.g. to test wrap-around or to resume.
    #[cfg(loom)]
    pub fn with_epoch(e: u32) -> Self {
        Self {
            word: AtomicU32::new(e & EPOCH_MASK),
            parker: Default::default(),
        }
    }

    /// Views an existing 32-bit word as a flag, e.g. the flag word a device layer keeps in
    /// shared memory (an OpenCL buffer the kernel stores the epoch into). The word should only
    /// ever hold 31-bit epochs (a device store of a plain epoch clears [`WAITERS_BIT`]; wait on
    /// such a word with [`crate::Producer::Device`]).
    #[cfg(not(loom))]
    pub fn from_atomic(word: &AtomicU32) -> &Self {
        // SAFETY: `CompletionFlag` is `repr(C)` with a single `AtomicU32` field (size and
        // alignment asserted equal above), so it has the same layout and validity as the word;
        // the returned reference borrows `word` for its lifetime.
        unsafe { &*(word as *const AtomicU32).cast::<Self>() }
    }

    /// Views the 32-bit word at `ptr` as a flag (e.g. [`crate::CompletionFlag::as_ptr`] of a
    /// flag in a mapping, or a device layer's flag word).
    ///
    /// # Safety
    /// `ptr` must be non-null, 4-byte aligned, valid for reads and writes for `'a`, and only
    /// accessed atomically (by this flag, devices' atomic stores, or other atomics) during `'a`.
    #[cfg(not(loom))]
    pub unsafe fn from_ptr<'a>(ptr: *mut u32) -> &'a Self {
        // SAFETY: forwarded from the contract: an aligned, live u32 accessed only atomically is
        // a valid `AtomicU32` (`AtomicU32::from_ptr`'s contract), and the flag has its layout.
        Self::from_atomic(unsafe { AtomicU32::from_ptr(ptr) })
    }

    /// The flag's epoch now (Acquire: data published with it is visible to the caller once the
    /// caller sees this epoch).
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.word.load(Ordering::Acquire) & EPOCH_MASK
    }

    /// Whether the flag has reached `target` (Acquire). Non-blocking; never errors (an invalid
    /// target is compared on its low 31 bits).
    #[inline]
    pub fn is_reached(&self, target: u32) -> bool {
        // Acquire pairs with the producer's Release publish: the data is visible after `true`.
        epoch_reached(self.word.load(Ordering::Acquire), target & EPOCH_MASK)
    }

    /// The flag word's address, for a device layer that maps it (see the type's docs). The word
    /// must only ever be written atomically with a 31-bit epoch that is after the current one.
    #[inline]
    pub fn as_ptr(&self) -> *mut u32 {
        // Under loom the word is a model object, not plain memory; there is no device to give it to.
        #[cfg(not(loom))]
        {
            self.word.as_ptr()
        }
        #[cfg(loom)]
        {
            core::ptr::null_mut()
        }
    }

    /// Publishes epoch `e` with release semantics: every write the caller made before this call
    /// is visible to a consumer whose wait for `e` (or an earlier epoch) returns. Wakes threads
    /// blocked in the kernel on this flag (std feature).
    ///
    /// Errors: [`SyncError::InvalidEpoch`] if bit 31 of `e` is set; [`SyncError::StaleEpoch`] if
    /// `e` is not after the current epoch (the flag is left unchanged).
    pub fn publish(&self, e: u32) -> Result<(), SyncError> {
        self.publish_with(e, Ordering::Release, true)
    }

    pub(crate) fn publish_with(
        &self,
        e: u32,
        success: Ordering,
        wake: bool,
    ) -> Result<(), SyncError> {
        if e & WAITERS_BIT != 0 {
            return Err(SyncError::InvalidEpoch(e));
        }
        // Relaxed is enough for the first read: the CAS below re-validates it.
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            let current = cur & EPOCH_MASK;
            if !epoch_is_after(e, current) {
                return Err(SyncError::StaleEpoch {
                    current,
                    requested: e,
                });
            }
            // Release on success: the data written before `publish` happens-before any Acquire
            // load that reads `e`. Storing `e` clears WAITERS_BIT; the waiters it announced are
            // woken below. A CAS (not a swap) so a stale epoch leaves the flag untouched.
            match self
                .word
                .compare_exchange_weak(cur, e, success, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        // The RMW read the latest value in the word's modification order, so if a consumer set
        // WAITERS_BIT before we stored `e` we see it here; a consumer that tries to set it after
        // fails its CAS (the word changed) and re-checks, finding `e`. No lost wake-up.
        if wake && cur & WAITERS_BIT != 0 {
            self.wake_all();
        }
        Ok(())
    }

    /// Polls for `target` with a spin hint and bounded exponential backoff, at most `max_polls`
    /// times. Returns whether it was reached. Available without `std` (no sleeping, no clock).
    pub fn wait_spin(&self, target: u32, max_polls: u32) -> bool {
        let mut backoff = 1;
        for _ in 0..max_polls {
            if self.is_reached(target) {
                return true;
            }
            // Under loom one yield per poll: every spin hint is a scheduling point there, and
            // the backoff would only multiply the explored interleavings.
            for _ in 0..if cfg!(loom) { 1 } else { backoff } {
                spin_hint();
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        self.is_reached(target)
    }

    /// Waits with no time limit: a short poll, then blocking in the kernel (futex on Linux) until
    /// a thread producer publishes `target` or later. Use only with thread producers (a device
    /// store does not wake a futex: use the timed wait with [`crate::Producer::Device`]).
    #[cfg(any(feature = "std", loom))]
    pub fn wait_blocking(&self, target: u32) -> Result<(), SyncError> {
        if target & WAITERS_BIT != 0 {
            return Err(SyncError::InvalidEpoch(target));
        }
        // A short poll before blocking (none under loom, where the block path is the one worth
        // exploring).
        if self.wait_spin(target, if cfg!(loom) { 0 } else { 8 }) {
            return Ok(());
        }
        while !self.block_once(target, None) {}
        Ok(())
    }

    /// One step of the block phase: returns true if `target` is reached; otherwise announces a
    /// waiter and blocks until woken, the word changes, or `timeout_ns` passes (then returns
    /// false and the caller re-checks).
    #[cfg(any(feature = "std", loom))]
    pub(crate) fn block_once(&self, target: u32, timeout_ns: Option<u64>) -> bool {
        // Acquire: if reached, the producer's data is visible.
        let cur = self.word.load(Ordering::Acquire);
        if epoch_reached(cur, target) {
            return true;
        }
        let expected = cur | WAITERS_BIT;
        if cur & WAITERS_BIT == 0 {
            // Relaxed: this only announces a sleeper; it carries no data. If the word changed
            // (a publish raced us) the CAS fails and the caller re-checks instead of sleeping.
            if self
                .word
                .compare_exchange(cur, expected, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                return false;
            }
        }
        // Sleeps only while the word still equals `expected` (checked atomically by the kernel,
        // or under the parker's lock in the loom model).
        self.park(expected, timeout_ns);
        false
    }

    #[cfg(all(feature = "std", not(loom)))]
    fn park(&self, expected: u32, timeout_ns: Option<u64>) {
        crate::primitive::futex_wait(&self.word, expected, timeout_ns);
    }

    #[cfg(loom)]
    fn park(&self, expected: u32, _timeout_ns: Option<u64>) {
        self.parker.park(&self.word, expected);
    }

    #[cfg(all(feature = "std", not(loom)))]
    fn wake_all(&self) {
        crate::primitive::futex_wake_all(&self.word);
    }

    #[cfg(loom)]
    fn wake_all(&self) {
        self.parker.unpark_all();
    }

    #[cfg(all(not(feature = "std"), not(loom)))]
    fn wake_all(&self) {
        // no_std: nobody can be blocked in the kernel (there is no block phase).
    }

    /// Loom-only test hook: `publish` with a Relaxed store instead of Release. The loom suite
    /// keeps a test expecting the model to catch the resulting data race.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn publish_relaxed_for_loom(&self, e: u32) -> Result<(), SyncError> {
        self.publish_with(e, Ordering::Relaxed, true)
    }

    /// Loom-only test hook: `publish` that never wakes blocked waiters. The loom suite keeps a
    /// test expecting the model to report the lost wake-up as a deadlock.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn publish_without_wake_for_loom(&self, e: u32) -> Result<(), SyncError> {
        self.publish_with(e, Ordering::Release, false)
    }
}

impl Default for CompletionFlag {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::EPOCH_MASK;

    #[test]
    fn publish_rules() {
        let f = CompletionFlag::new();
        assert_eq!(f.epoch(), 0);
        assert!(f.is_reached(0));
        assert!(!f.is_reached(1));
        f.publish(1).unwrap();
        assert!(f.is_reached(1));
        assert_eq!(
            f.publish(1),
            Err(SyncError::StaleEpoch {
                current: 1,
                requested: 1
            })
        );
        assert_eq!(
            f.publish(0),
            Err(SyncError::StaleEpoch {
                current: 1,
                requested: 0
            })
        );
        assert_eq!(
            f.publish(0x8000_0005),
            Err(SyncError::InvalidEpoch(0x8000_0005))
        );
        assert_eq!(f.epoch(), 1);
        f.publish(5).unwrap();
        assert!(f.is_reached(3));
        assert!(f.wait_spin(4, 1));
        assert!(!f.wait_spin(6, 3));
    }

    #[test]
    fn wraps() {
        let f = CompletionFlag::with_epoch(EPOCH_MASK - 2);
        // A jump of more than the window is "behind", hence stale.
        assert!(CompletionFlag::new().publish(EPOCH_MASK - 1).is_err());
        f.publish(EPOCH_MASK - 1).unwrap();
        f.publish(EPOCH_MASK).unwrap();
        f.publish(0).unwrap();
        assert!(f.is_reached(EPOCH_MASK));
        assert!(f.is_reached(0));
        assert!(!f.is_reached(1));
        f.publish(1).unwrap();
        assert!(f.is_reached(1));
    }
}
