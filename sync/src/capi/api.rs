//! The flag, the barrier and the wait-time predictor from C.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::*;
use crate::{Arrival, CompletionFlag, DependencyBarrier, Phase, Producer, SiteState, WaitConfig};

/// A completion flag (opaque): one 32-bit epoch word (`HETERO_SYNC_FLAG_SIZE` bytes, aligned
/// to `HETERO_SYNC_FLAG_ALIGN`), always in the caller's memory: a `hetero_sync_flag_storage`
/// (static, on the stack, in a struct, or from `malloc`), or any suitably aligned bytes, e.g.
/// beside a tensor in memory a device or another process maps. `hetero_sync_flag_init` places
/// one there, `hetero_sync_flag_attach` names one already there. The library never allocates
/// or frees a flag, so there is no `_free` to call on the wrong kind of memory.
pub struct hetero_sync_flag {
    flag: CompletionFlag,
}

/// A dependency barrier over 1..=32 producers (opaque), always in the caller's memory (a
/// `hetero_sync_barrier_storage`, or `HETERO_SYNC_BARRIER_SIZE` bytes aligned to
/// `HETERO_SYNC_BARRIER_ALIGN`), placed by `hetero_sync_barrier_init`; nothing to free.
pub struct hetero_sync_barrier {
    barrier: DependencyBarrier,
}

/// Memory for one flag with the right size and alignment (`HETERO_SYNC_FLAG_SIZE`,
/// `HETERO_SYNC_FLAG_ALIGN`): declare one, pass its address to `hetero_sync_flag_init`.
#[repr(C)]
pub struct hetero_sync_flag_storage {
    /// Not for the caller to read or write (the flag's word).
    pub opaque: [u32; 1],
}

/// Memory for one barrier with the right size and alignment (`HETERO_SYNC_BARRIER_SIZE`,
/// `HETERO_SYNC_BARRIER_ALIGN`): declare one, pass its address to `hetero_sync_barrier_init`.
#[repr(C)]
pub struct hetero_sync_barrier_storage {
    /// Not for the caller to read or write.
    pub opaque: [u64; 2],
}

/// What one wait site has learned (opaque, `hetero_sync_site_new`): pass the same one to every
/// wait of one call site so the wait sleeps until just before the predicted completion.
///
/// Safe to share between threads: each wait copies the state out at its start and stores what
/// it learned when it returns, each under a short internal lock (never held during the wait).
/// Two waits on one site at once both run with the prediction of their start; the state of the
/// one that returns last is kept (the other's sample is lost, nothing else).
pub struct hetero_sync_site {
    lock: AtomicBool,
    site: UnsafeCell<SiteState>,
}

impl hetero_sync_site {
    fn new(site: SiteState) -> Self {
        hetero_sync_site {
            lock: AtomicBool::new(false),
            site: UnsafeCell::new(site),
        }
    }

    /// Runs `f` on the state under the lock (a few nanoseconds: a copy in or out).
    fn with<R>(&self, f: impl FnOnce(&mut SiteState) -> R) -> R {
        let mut spins = 0u32;
        // Acquire pairs with the Release below: the previous holder's writes are visible.
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins.is_multiple_of(64) {
                // The holder may have been preempted inside its copy: give it the core.
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
        // SAFETY: the lock is held, so this is the only reference to the state until the
        // Release store below.
        let r = f(unsafe { &mut *self.site.get() });
        self.lock.store(false, Ordering::Release);
        r
    }

    fn load(&self) -> SiteState {
        self.with(|s| *s)
    }

    fn store(&self, v: SiteState) {
        self.with(|s| *s = v);
    }
}

/// Runs a wait with a copy of `site`'s state (if any), then stores what it learned.
///
/// # Safety
/// `site` null or a live site.
unsafe fn with_site<R>(
    site: *const hetero_sync_site,
    wait: impl FnOnce(Option<&mut SiteState>) -> R,
) -> R {
    // SAFETY: null or live (the caller's contract); only shared references are made.
    match unsafe { site.as_ref() } {
        None => wait(None),
        Some(s) => {
            let mut local = s.load();
            let r = wait(Some(&mut local));
            s.store(local);
            r
        }
    }
}

/// Bytes of a flag.
pub const HETERO_SYNC_FLAG_SIZE: usize = 4;
/// Alignment of a flag.
pub const HETERO_SYNC_FLAG_ALIGN: usize = 4;
/// Bytes of a barrier.
pub const HETERO_SYNC_BARRIER_SIZE: usize = 16;
/// Alignment of a barrier.
pub const HETERO_SYNC_BARRIER_ALIGN: usize = 8;

const _: () = {
    assert!(core::mem::size_of::<hetero_sync_flag>() == HETERO_SYNC_FLAG_SIZE);
    assert!(core::mem::align_of::<hetero_sync_flag>() == HETERO_SYNC_FLAG_ALIGN);
    assert!(core::mem::size_of::<hetero_sync_barrier>() == HETERO_SYNC_BARRIER_SIZE);
    assert!(core::mem::align_of::<hetero_sync_barrier>() == HETERO_SYNC_BARRIER_ALIGN);
    assert!(core::mem::size_of::<hetero_sync_flag_storage>() == HETERO_SYNC_FLAG_SIZE);
    assert!(core::mem::align_of::<hetero_sync_flag_storage>() == HETERO_SYNC_FLAG_ALIGN);
    assert!(core::mem::size_of::<hetero_sync_barrier_storage>() == HETERO_SYNC_BARRIER_SIZE);
    assert!(core::mem::align_of::<hetero_sync_barrier_storage>() == HETERO_SYNC_BARRIER_ALIGN);
};

/// Who publishes the flag (decides the wait's block phase).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hetero_sync_producer {
    /// A CPU thread or host callback calling `hetero_sync_flag_publish`: the wait blocks in
    /// the kernel (futex) after polling.
    HETERO_SYNC_PRODUCER_THREAD = 0,
    /// A device storing the epoch into the flag's memory: the wait polls on a timer.
    HETERO_SYNC_PRODUCER_DEVICE = 1,
}

/// How a wait behaves (`hetero_sync_wait_config_default` fills the defaults: thread producer,
/// 1 s timeout, 50 µs spin, 20 µs minimum sleep, 20 µs device poll).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hetero_sync_wait_config {
    /// A `hetero_sync_producer` value.
    pub producer: u32,
    /// Give up after this long from the wait's start (`HETERO_SYNC_TIMEOUT`).
    pub timeout_ns: u64,
    /// How long the poll phase spins before blocking, at least.
    pub spin_ns: u64,
    /// Do not sleep when less than this remains before the predicted wake point.
    pub min_sleep_ns: u64,
    /// The block phase's poll period for a device producer.
    pub device_poll_ns: u64,
}

/// Which phase of a wait saw the flag reached.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hetero_sync_phase {
    /// Already reached when the wait began.
    HETERO_SYNC_PHASE_IMMEDIATE = 0,
    /// At the first check after the predicted sleep.
    HETERO_SYNC_PHASE_AFTER_SLEEP = 1,
    /// While polling.
    HETERO_SYNC_PHASE_POLL = 2,
    /// In the block phase.
    HETERO_SYNC_PHASE_BLOCK = 3,
}

/// What a successful wait did.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hetero_sync_wait_report {
    /// A `hetero_sync_phase` value.
    pub phase: u32,
    /// From the wait's start to the moment the consumer saw the flag, ns.
    pub elapsed_ns: u64,
    /// Time asleep in the predicted-sleep phase, ns.
    pub slept_ns: u64,
}

fn config(cfg: *const hetero_sync_wait_config) -> Result<WaitConfig, Fail> {
    let d = WaitConfig::default();
    // SAFETY: null or valid for a read (the caller's contract).
    let Some(c) = (unsafe { cfg.as_ref() }) else {
        return Ok(d);
    };
    let producer = match c.producer {
        0 => Producer::Thread,
        1 => Producer::Device,
        _ => {
            return Err(Fail::new(
                HETERO_SYNC_INVALID_ARGUMENT,
                "unknown producer kind",
            ))
        }
    };
    Ok(WaitConfig {
        producer,
        timeout: Duration::from_nanos(c.timeout_ns),
        spin: Duration::from_nanos(c.spin_ns),
        min_sleep: Duration::from_nanos(c.min_sleep_ns),
        device_poll: Duration::from_nanos(c.device_poll_ns),
    })
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Fills `*out` with the default wait configuration.
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_wait_config_default(
    out: *mut hetero_sync_wait_config,
) -> hetero_sync_status {
    guard(|| {
        let d = WaitConfig::default();
        let c = hetero_sync_wait_config {
            producer: 0,
            timeout_ns: ns(d.timeout),
            spin_ns: ns(d.spin),
            min_sleep_ns: ns(d.min_sleep),
            device_poll_ns: ns(d.device_poll),
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, c, "out") }
    })
}

// ---- flag ---------------------------------------------------------------------------------------

/// Places a flag at `epoch` (low 31 bits; 0 = nothing published) in the caller's memory `mem`
/// (`size` ≥ `HETERO_SYNC_FLAG_SIZE` bytes, `HETERO_SYNC_FLAG_ALIGN`-aligned: a
/// `hetero_sync_flag_storage`, or e.g. the 4 bytes beside a tensor in memory a device also maps)
/// and gives its handle in `*out` (the same address). Also how to reset a flag to an epoch: call
/// it again, while no thread uses the flag. Nothing to free: the memory is the caller's.
///
/// Not thread-safe with other users of the same memory.
///
/// # Safety
/// `mem` valid for `size` byte writes for as long as the flag is used, and accessed only
/// through the flag's functions (or a device's atomic 32-bit stores) meanwhile; `out` valid
/// for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_init(
    mem: *mut core::ffi::c_void,
    size: usize,
    epoch: u32,
    out: *mut *mut hetero_sync_flag,
) -> hetero_sync_status {
    guard(|| {
        nonnull(mem, "mem")?;
        nonnull(out, "out")?;
        aligned(mem, HETERO_SYNC_FLAG_ALIGN, "mem (HETERO_SYNC_FLAG_ALIGN)")?;
        if size < HETERO_SYNC_FLAG_SIZE {
            return Err(Fail::new(HETERO_SYNC_BUFFER_TOO_SMALL, "size"));
        }
        let f = mem.cast::<hetero_sync_flag>();
        // SAFETY: aligned, large enough, exclusively the caller's now (contract).
        unsafe {
            f.write(hetero_sync_flag {
                flag: CompletionFlag::with_epoch(epoch),
            })
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, f, "out") }
    })
}

/// The flag already living at `mem` (`size` ≥ `HETERO_SYNC_FLAG_SIZE` bytes,
/// `HETERO_SYNC_FLAG_ALIGN`-aligned), unchanged, into `*out` (the same address): for a flag
/// another party placed, e.g. a uma slot's flag word (`hetero_uma_raw_slot.flag`) or a flag in a
/// memfd page this process mapped from another process (at any address: waits and publishes
/// in different processes wake each other). Nothing to free.
///
/// Thread-safe.
///
/// # Safety
/// `mem` valid for `size` bytes for as long as the flag is used, holding a flag (from
/// `hetero_sync_flag_init`, or a word only ever written with 31-bit epochs), and accessed only
/// atomically meanwhile; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_attach(
    mem: *mut core::ffi::c_void,
    size: usize,
    out: *mut *mut hetero_sync_flag,
) -> hetero_sync_status {
    guard(|| {
        nonnull(mem, "mem")?;
        nonnull(out, "out")?;
        aligned(mem, HETERO_SYNC_FLAG_ALIGN, "mem (HETERO_SYNC_FLAG_ALIGN)")?;
        if size < HETERO_SYNC_FLAG_SIZE {
            return Err(Fail::new(HETERO_SYNC_BUFFER_TOO_SMALL, "size"));
        }
        // SAFETY: the caller's contract.
        unsafe { put(out, mem.cast::<hetero_sync_flag>(), "out") }
    })
}

/// # Safety
/// `flag` null or a live flag.
unsafe fn flag_ref<'a>(flag: *const hetero_sync_flag) -> Result<&'a CompletionFlag, Fail> {
    nonnull(flag, "flag")?;
    // SAFETY: the caller's contract: a live flag, only accessed atomically.
    Ok(unsafe { &(*flag).flag })
}

/// Publishes `epoch` (the "signal"): every write the caller made before is visible to a
/// consumer whose wait for `epoch` (or an earlier one) returns. Wakes blocked waiters.
/// `HETERO_SYNC_STALE_EPOCH` if not after the current epoch, `HETERO_SYNC_INVALID_EPOCH` for
/// bit 31 (nothing changed then).
///
/// Thread-safe.
///
/// # Safety
/// `flag` a live flag.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_publish(
    flag: *const hetero_sync_flag,
    epoch: u32,
) -> hetero_sync_status {
    guard(|| {
        // SAFETY: forwarded.
        unsafe { flag_ref(flag)? }.publish(epoch)?;
        Ok(())
    })
}

/// The flag's epoch now (acquire); 0 for null.
///
/// Thread-safe.
///
/// # Safety
/// `flag` null or a live flag.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_epoch(flag: *const hetero_sync_flag) -> u32 {
    guard_value(0, || {
        // SAFETY: forwarded.
        unsafe { flag_ref(flag) }.map_or(0, |f| f.epoch())
    })
}

/// Whether the flag reached `target` (the "poll"; acquire: the producer's writes are visible
/// after `true`). Non-blocking. False for null.
///
/// Thread-safe.
///
/// # Safety
/// `flag` null or a live flag.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_is_reached(
    flag: *const hetero_sync_flag,
    target: u32,
) -> bool {
    guard_value(false, || {
        // SAFETY: forwarded.
        unsafe { flag_ref(flag) }.is_ok_and(|f| f.is_reached(target))
    })
}

/// Polls for `target` at most `max_polls` times with a spin hint and bounded backoff; whether
/// it was reached. False for null.
///
/// Thread-safe.
///
/// # Safety
/// `flag` null or a live flag.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_wait_spin(
    flag: *const hetero_sync_flag,
    target: u32,
    max_polls: u32,
) -> bool {
    guard_value(false, || {
        // SAFETY: forwarded.
        unsafe { flag_ref(flag) }.is_ok_and(|f| f.wait_spin(target, max_polls))
    })
}

/// Waits until the flag reaches `target`: sleep to just before the completion `site` predicts
/// (if given), poll, then block (thread producer) or poll on a timer (device producer).
/// `cfg` null = defaults; `site` (null = no prediction) learns from each wait; `report` (may be
/// null) says what the wait did. `HETERO_SYNC_TIMEOUT` after `cfg->timeout_ns`.
///
/// Thread-safe (several waiters on one flag are fine, and one `site` may be shared by waits
/// on several threads: see `hetero_sync_site`).
///
/// # Safety
/// `flag` a live flag; `cfg`, `site`, `report` null or valid (`report` written by this call
/// only).
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_wait(
    flag: *const hetero_sync_flag,
    target: u32,
    cfg: *const hetero_sync_wait_config,
    site: *mut hetero_sync_site,
    report: *mut hetero_sync_wait_report,
) -> hetero_sync_status {
    guard(|| {
        // SAFETY: forwarded.
        let f = unsafe { flag_ref(flag)? };
        let c = config(cfg)?;
        // SAFETY: null or a live site (contract); shared use is synchronized inside.
        let r = unsafe { with_site(site, |s| f.wait(target, &c, s)) }?;
        write_report(report, r);
        Ok(())
    })
}

fn write_report(report: *mut hetero_sync_wait_report, r: crate::WaitReport) {
    if report.is_null() {
        return;
    }
    let phase = match r.phase {
        Phase::Immediate => 0,
        Phase::AfterSleep => 1,
        Phase::Poll => 2,
        Phase::Block => 3,
    };
    // SAFETY: non-null, valid for a write (the caller's contract).
    unsafe {
        report.write(hetero_sync_wait_report {
            phase,
            elapsed_ns: ns(r.elapsed),
            slept_ns: ns(r.slept),
        })
    };
}

/// Waits with no time limit for a thread producer: a short poll, then blocking in the kernel.
///
/// Thread-safe.
///
/// # Safety
/// `flag` a live flag.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_flag_wait_blocking(
    flag: *const hetero_sync_flag,
    target: u32,
) -> hetero_sync_status {
    guard(|| {
        // SAFETY: forwarded.
        unsafe { flag_ref(flag)? }.wait_blocking(target)?;
        Ok(())
    })
}

// ---- barrier ------------------------------------------------------------------------------------

/// Places a barrier over `producers` (1..=32) with epoch `completed` done (the first to arrive
/// in is the next) in the caller's memory (`size` ≥ `HETERO_SYNC_BARRIER_SIZE`,
/// `HETERO_SYNC_BARRIER_ALIGN`-aligned: a `hetero_sync_barrier_storage`), handle in `*out` (the
/// same address). Calling it again resets it (while no thread uses it). Nothing to free.
///
/// Not thread-safe with other users of the same memory.
///
/// # Safety
/// `mem` valid for `size` byte writes while the barrier is used, accessed only through these
/// functions; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_barrier_init(
    mem: *mut core::ffi::c_void,
    size: usize,
    producers: u32,
    completed: u32,
    out: *mut *mut hetero_sync_barrier,
) -> hetero_sync_status {
    guard(|| {
        nonnull(mem, "mem")?;
        nonnull(out, "out")?;
        aligned(
            mem,
            HETERO_SYNC_BARRIER_ALIGN,
            "mem (HETERO_SYNC_BARRIER_ALIGN)",
        )?;
        if size < HETERO_SYNC_BARRIER_SIZE {
            return Err(Fail::new(HETERO_SYNC_BUFFER_TOO_SMALL, "size"));
        }
        let barrier = DependencyBarrier::with_epoch(producers, completed)?;
        let b = mem.cast::<hetero_sync_barrier>();
        // SAFETY: aligned, large enough, exclusively the caller's (contract).
        unsafe { b.write(hetero_sync_barrier { barrier }) };
        // SAFETY: the caller's contract.
        unsafe { put(out, b, "out") }
    })
}

/// # Safety
/// `b` null or a live barrier.
unsafe fn barrier_ref<'a>(b: *const hetero_sync_barrier) -> Result<&'a DependencyBarrier, Fail> {
    nonnull(b, "barrier")?;
    // SAFETY: the caller's contract.
    Ok(unsafe { &(*b).barrier })
}

/// Producer `producer` finished its writes for `epoch`; `*remaining` (may be null) gets how
/// many producers are still outstanding (0: this arrival completed the epoch and published it
/// on the barrier's flag). Errors change nothing: `HETERO_SYNC_UNKNOWN_PRODUCER`,
/// `_INVALID_EPOCH`, `_STALE_EPOCH`, `_EPOCH_NOT_OPEN`, `_DUPLICATE_PUBLISH`.
///
/// Thread-safe.
///
/// # Safety
/// `barrier` a live barrier; `remaining` null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_barrier_arrive(
    barrier: *const hetero_sync_barrier,
    producer: u32,
    epoch: u32,
    remaining: *mut u32,
) -> hetero_sync_status {
    guard(|| {
        // SAFETY: forwarded.
        let a = unsafe { barrier_ref(barrier)? }.arrive(producer, epoch)?;
        let left = match a {
            Arrival::Waiting { remaining } => remaining,
            Arrival::Completed => 0,
        };
        if !remaining.is_null() {
            // SAFETY: non-null, valid (contract).
            unsafe { remaining.write(left) };
        }
        Ok(())
    })
}

/// Waits until `epoch` is complete (every producer arrived); as `hetero_sync_flag_wait`.
///
/// Thread-safe.
///
/// # Safety
/// As `hetero_sync_flag_wait`, with a live barrier.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_barrier_wait(
    barrier: *const hetero_sync_barrier,
    epoch: u32,
    cfg: *const hetero_sync_wait_config,
    site: *mut hetero_sync_site,
    report: *mut hetero_sync_wait_report,
) -> hetero_sync_status {
    guard(|| {
        // SAFETY: forwarded.
        let b = unsafe { barrier_ref(barrier)? };
        let c = config(cfg)?;
        // SAFETY: null or a live site (contract); shared use is synchronized inside.
        let r = unsafe { with_site(site, |s| b.wait(epoch, &c, s)) }?;
        write_report(report, r);
        Ok(())
    })
}

/// The barrier's last completed epoch (acquire); 0 for null.
///
/// Thread-safe.
///
/// # Safety
/// `barrier` null or a live barrier.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_barrier_completed_epoch(
    barrier: *const hetero_sync_barrier,
) -> u32 {
    guard_value(0, || {
        // SAFETY: forwarded.
        unsafe { barrier_ref(barrier) }.map_or(0, |b| b.completed_epoch())
    })
}

/// The flag the barrier publishes completed epochs on (lives as long as the barrier), for
/// polling with `hetero_sync_flag_is_reached`; null for null. Do not publish on it.
///
/// Thread-safe.
///
/// # Safety
/// `barrier` null or a live barrier.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_barrier_flag(
    barrier: *const hetero_sync_barrier,
) -> *const hetero_sync_flag {
    guard_value(core::ptr::null(), || {
        // SAFETY: forwarded.
        unsafe { barrier_ref(barrier) }.map_or(core::ptr::null(), |b| {
            // A `hetero_sync_flag` is a `CompletionFlag` (one field; layout asserted above).
            (b.flag() as *const CompletionFlag).cast::<hetero_sync_flag>()
        })
    })
}

// ---- predictor ----------------------------------------------------------------------------------

/// A new wait site into `*out`: nothing learned (`mean_ns` 0) or seeded with a predicted wait
/// of `mean_ns`, jitter `jitter_ns` and OS sleep overshoot `overshoot_ns` (e.g. from an
/// offline profile). Free with `hetero_sync_site_free`.
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_site_new(
    mean_ns: u64,
    jitter_ns: u64,
    overshoot_ns: u64,
    out: *mut *mut hetero_sync_site,
) -> hetero_sync_status {
    guard(|| {
        nonnull(out, "out")?;
        let site = if mean_ns == 0 {
            SiteState::new()
        } else {
            SiteState::seeded(mean_ns, jitter_ns, overshoot_ns)
        };
        let s = Box::into_raw(Box::new(hetero_sync_site::new(site)));
        // SAFETY: the caller's contract.
        unsafe { put(out, s, "out") }
    })
}

/// Frees a site (null is ignored).
///
/// # Safety
/// `site` null or from `hetero_sync_site_new`, freed once, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_site_free(site: *mut hetero_sync_site) {
    if !site.is_null() {
        // SAFETY: the caller's contract.
        drop(unsafe { Box::from_raw(site) });
    }
}

/// The site's predicted wait in ns into `*ns` (false, nothing written, before any sample);
/// `*samples` (may be null) gets how many waits it learned from.
///
/// Thread-safe (also while waits use the same site: a consistent snapshot).
///
/// # Safety
/// `site` a live site; `ns_out` valid for one write; `samples` null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sync_site_predicted_ns(
    site: *const hetero_sync_site,
    ns_out: *mut u64,
    samples: *mut u32,
) -> bool {
    guard_value(false, || {
        // SAFETY: null or live (contract).
        let Some(s) = (unsafe { site.as_ref() }) else {
            return false;
        };
        let st = s.load();
        if !samples.is_null() {
            // SAFETY: valid (contract).
            unsafe { samples.write(st.samples()) };
        }
        match (st.predicted_ns(), ns_out.is_null()) {
            (Some(p), false) => {
                // SAFETY: valid (contract).
                unsafe { ns_out.write(p) };
                true
            }
            _ => false,
        }
    })
}
