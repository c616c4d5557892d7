//! The pool: slots, handles, acquire/release, access.

use std::sync::atomic::AtomicU32 as StdAtomicU32;

use hetero_sync::CompletionFlag;

use crate::backing::Backing;
use crate::primitive::{AtomicU32, Ordering};
use crate::UmaError;

/// Every slot's data starts at a multiple of this many bytes from the mapping's start (and the
/// mapping is page-aligned), which is what `CL_MEM_USE_HOST_PTR` and similar zero-copy imports
/// need on the devices we target.
pub const SLOT_ALIGN: usize = 4096;
/// Stride of the per-slot headers: one 128-byte line each (Apple's cache line; two of x86's),
/// so a device writing one slot's flag never shares a line with another slot's.
pub const HEADER_STRIDE: usize = 128;
/// The most slots a pool may have.
pub const MAX_SLOTS: usize = 1 << 16;
/// The largest mapping a pool may make (1 TiB).
pub const MAX_POOL_BYTES: usize = 1 << 40;

/// Bit 0 of a slot's state word: the slot is free.
const FREE: u32 = 1;

/// The per-slot header, at `HEADER_STRIDE * i` in the mapping: the slot's completion flag (the
/// sync crate's 32-bit epoch word) at offset 0 and its state word at offset 4: `generation << 1
/// | free`. Acquire is one CAS on it (free → held, same generation); release is one CAS too
/// (held in the handle's generation → free, generation + 1), so a stale copy of a handle can
/// never release a slot twice or free its next owner's acquisition.
#[repr(C, align(128))]
pub(crate) struct SlotHeader {
    pub(crate) flag: CompletionFlag,
    pub(crate) state: AtomicU32,
}

#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<SlotHeader>() == HEADER_STRIDE);
    assert!(std::mem::offset_of!(SlotHeader, flag) == 0);
    assert!(std::mem::offset_of!(SlotHeader, state) == 4);
};

/// Bytes taken by one header in the mapping (128, or more under loom's larger atomics).
const fn header_stride() -> usize {
    let s = std::mem::size_of::<SlotHeader>();
    s.div_ceil(HEADER_STRIDE) * HEADER_STRIDE
}

static NEXT_POOL_ID: StdAtomicU32 = StdAtomicU32::new(1);

/// The pool's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of slots (1..=[`MAX_SLOTS`]).
    pub slots: usize,
    /// Bytes per slot: a non-zero multiple of [`SLOT_ALIGN`] (see [`round_slot_size`]).
    pub slot_size: usize,
}

/// Rounds `bytes` up to a valid slot size (a multiple of [`SLOT_ALIGN`]); `None` on overflow.
pub fn round_slot_size(bytes: usize) -> Option<usize> {
    bytes.max(1).checked_next_multiple_of(SLOT_ALIGN)
}

/// Exclusive ownership of one slot, returned by [`Pool::acquire`] and given back by value to
/// [`Pool::release`]. Not `Clone`: while it exists nobody else holds the slot. Carries the pool's
/// id and the slot's generation, so it is rejected by other pools. Dropping it without
/// releasing leaks the slot until the pool is dropped (which reports it).
#[must_use = "a dropped handle leaks its slot until the pool is dropped"]
#[derive(Debug, PartialEq, Eq)]
pub struct Handle {
    pool: u32,
    slot: u32,
    generation: u32,
}

impl Handle {
    /// The slot's index in its pool.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }

    /// The slot's generation when this handle was issued.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Loom-only test hook: a second handle for the same acquisition, as a C caller gets by
    /// copying its `hetero_uma_slot` value. The loom suite races its release against the
    /// holder's (exactly one may succeed).
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn duplicate_for_loom(&self) -> Handle {
        Handle {
            pool: self.pool,
            slot: self.slot,
            generation: self.generation,
        }
    }

    /// A copyable name for this acquisition (pool, slot, generation), e.g. to pass to another
    /// component; [`Pool::resolve`] rejects it once the slot was released.
    pub fn id(&self) -> SlotId {
        SlotId {
            pool: self.pool,
            slot: self.slot,
            generation: self.generation,
        }
    }
}

/// A copyable name of one acquisition of a slot (see [`Handle::id`]). It grants nothing by
/// itself; [`Pool::resolve`] checks it. The generation is 31-bit: an id kept across 2^31
/// re-acquisitions of one slot would alias (not reachable at one acquisition per layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotId {
    pool: u32,
    slot: u32,
    generation: u32,
}

impl SlotId {
    /// An id from its parts (the C ABI's copyable handle); checked by every use.
    #[cfg(feature = "capi")]
    pub(crate) fn from_parts(pool: u32, slot: u32, generation: u32) -> Self {
        SlotId {
            pool,
            slot,
            generation,
        }
    }

    /// The handle this id names, for the C ABI's release (which checks the generation).
    #[cfg(feature = "capi")]
    pub(crate) fn to_handle(self) -> Handle {
        Handle {
            pool: self.pool,
            slot: self.slot,
            generation: self.generation,
        }
    }

    /// The pool id it belongs to.
    #[cfg(feature = "capi")]
    pub(crate) fn pool_id(&self) -> u32 {
        self.pool
    }

    /// The slot's index.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }

    /// The generation it names.
    pub fn generation(&self) -> u32 {
        self.generation
    }
}

/// A release that was refused: the error, and the handle given back so it is not lost.
#[derive(Debug, PartialEq, Eq)]
pub struct ReleaseError {
    /// Why.
    pub error: UmaError,
    /// The handle, unchanged.
    pub handle: Handle,
}

impl std::fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "release of slot {} refused: {}",
            self.handle.slot, self.error
        )
    }
}

impl std::error::Error for ReleaseError {}

/// Raw access to one slot for a device layer.
///
/// Guarantees: `ptr` is aligned to [`SLOT_ALIGN`] (4096) and `len` is a multiple of it; `ptr`
/// is `mapping base + offset`, and `offset` is the same offset within the file `fd` (Linux
/// memfd), so a device or another process can map or import the same bytes. `flag_ptr` is the
/// slot's [`CompletionFlag`] word (4-byte aligned, alone in a 128-byte line) at `flag_offset`
/// in the file. Valid while the pool lives and the handle is held; writes through it must
/// follow the ownership of the handle (the pool cannot check raw accesses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawSlot {
    /// Start of the slot's data.
    pub ptr: *mut u8,
    /// Bytes in the slot.
    pub len: usize,
    /// The memfd holding the pool (Linux; `None` for anonymous or heap backing).
    pub fd: Option<i32>,
    /// Offset of the data within the fd (and from the mapping's base).
    pub offset: u64,
    /// The slot's completion flag word.
    pub flag_ptr: *mut u32,
    /// Offset of the flag within the fd.
    pub flag_offset: u64,
}

/// What was still held when a pool was closed or dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakReport {
    /// Slots held.
    pub held: usize,
    /// The first (up to 8) held slots' indices, the rest `u32::MAX`.
    pub first: [u32; 8],
}

impl LeakReport {
    /// Whether nothing leaked.
    pub fn is_clean(&self) -> bool {
        self.held == 0
    }
}

/// A fixed-slot buffer pool over one mapping made at start-up. See the crate docs.
pub struct Pool {
    id: u32,
    slots: usize,
    slot_size: usize,
    data_offset: usize,
    backing: Backing,
    closed: bool,
}

// SAFETY: the raw memory is only reached through handles (exclusive per slot) or atomics
// (headers), so sharing the pool across threads is sound.
unsafe impl Sync for Pool {}
// SAFETY: the pool owns its mapping; nothing in it is tied to the creating thread.
unsafe impl Send for Pool {}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("id", &self.id)
            .field("slots", &self.slots)
            .field("slot_size", &self.slot_size)
            .field("free", &self.free_slots())
            .finish()
    }
}

impl Pool {
    /// Maps the pool: a header region (one [`HEADER_STRIDE`] line per slot, rounded up to
    /// [`SLOT_ALIGN`]) followed by `slots` data regions of `slot_size` bytes, zero-filled.
    /// Nothing is allocated on the heap, here or later (only the mapping is made).
    ///
    /// Errors: [`UmaError::ZeroSlots`], [`UmaError::TooManySlots`], [`UmaError::ZeroSlotSize`],
    /// [`UmaError::MisalignedSlotSize`], [`UmaError::TooLarge`], [`UmaError::Map`].
    pub fn new(cfg: PoolConfig) -> Result<Self, UmaError> {
        if cfg.slots == 0 {
            return Err(UmaError::ZeroSlots);
        }
        if cfg.slots > MAX_SLOTS {
            return Err(UmaError::TooManySlots(cfg.slots));
        }
        if cfg.slot_size == 0 {
            return Err(UmaError::ZeroSlotSize);
        }
        if !cfg.slot_size.is_multiple_of(SLOT_ALIGN) {
            return Err(UmaError::MisalignedSlotSize(cfg.slot_size));
        }
        let data_offset = (cfg.slots * header_stride())
            .checked_next_multiple_of(SLOT_ALIGN)
            .ok_or(UmaError::TooLarge)?;
        let total = cfg
            .slots
            .checked_mul(cfg.slot_size)
            .and_then(|d| d.checked_add(data_offset))
            .filter(|&t| t <= MAX_POOL_BYTES)
            .ok_or(UmaError::TooLarge)?;
        let backing = Backing::new(total)?;
        for i in 0..cfg.slots {
            // SAFETY: header i lies inside the mapping (i * stride < data_offset <= total), is
            // 128-byte aligned (page-aligned base, stride a multiple of 128), and is written
            // once here before any reference to it exists.
            unsafe {
                backing
                    .ptr()
                    .add(i * header_stride())
                    .cast::<SlotHeader>()
                    .write(SlotHeader {
                        flag: CompletionFlag::new(),
                        state: AtomicU32::new(FREE),
                    });
            }
        }
        Ok(Self {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            slots: cfg.slots,
            slot_size: cfg.slot_size,
            data_offset,
            backing,
            closed: false,
        })
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Slots free now (a snapshot).
    pub fn free_slots(&self) -> usize {
        (0..self.slots).filter(|&i| self.is_free(i)).count()
    }

    fn is_free(&self, slot: usize) -> bool {
        self.header(slot).state.load(Ordering::Relaxed) & FREE != 0
    }

    /// Bytes of the whole mapping (headers + data).
    pub fn mapping_len(&self) -> usize {
        self.backing.len()
    }

    /// The memfd holding the pool (Linux real mappings only).
    #[cfg(unix)]
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.backing.fd()
    }

    fn header(&self, slot: usize) -> &SlotHeader {
        debug_assert!(slot < self.slots);
        // SAFETY: slot < self.slots, so the header was initialised in `new` and lives as long
        // as the mapping, i.e. as long as `self`; it is only accessed through shared refs.
        unsafe {
            &*self
                .backing
                .ptr()
                .add(slot * header_stride())
                .cast::<SlotHeader>()
        }
    }

    fn data_ptr(&self, slot: usize) -> *mut u8 {
        // SAFETY: slot < self.slots, so the offset is within the mapping.
        unsafe {
            self.backing
                .ptr()
                .add(self.data_offset + slot * self.slot_size)
        }
    }

    /// Claims a free slot (the lowest-numbered one): lock-free, one CAS on the slot's state
    /// word when uncontended, no allocation. Its data keeps whatever the previous holder wrote;
    /// its flag keeps its epoch (epochs only move forward, so no reset race).
    /// Error: [`UmaError::Exhausted`].
    #[inline]
    pub fn acquire(&self) -> Result<Handle, UmaError> {
        for slot in 0..self.slots {
            let st = &self.header(slot).state;
            // Relaxed: only a hint; the CAS below validates it.
            let mut cur = st.load(Ordering::Relaxed);
            while cur & FREE != 0 {
                // Acquire on success pairs with the Release store in `release`: the previous
                // holder's writes to the slot happen-before ours. A failed CAS means another
                // thread took (or released) the slot: progress was made, so this is lock-free.
                match st.compare_exchange_weak(
                    cur,
                    cur & !FREE,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Ok(Handle {
                            pool: self.id,
                            slot: slot as u32,
                            generation: cur >> 1,
                        })
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        Err(UmaError::Exhausted)
    }

    fn check(&self, pool: u32, slot: u32) -> Result<usize, UmaError> {
        if pool != self.id || slot as usize >= self.slots {
            return Err(UmaError::ForeignHandle);
        }
        Ok(slot as usize)
    }

    /// Gives a slot back (by value). The slot's generation is bumped, so ids of this
    /// acquisition go stale. A handle of another pool is refused and returned unchanged.
    #[inline]
    pub fn release(&self, handle: Handle) -> Result<(), ReleaseError> {
        self.release_with(handle, Ordering::Release)
    }

    /// Loom-only test hook: `release` with a Relaxed store. The loom suite keeps a test
    /// expecting the model to catch the resulting race between two holders.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn release_relaxed_for_loom(&self, handle: Handle) -> Result<(), ReleaseError> {
        self.release_with(handle, Ordering::Relaxed)
    }

    #[inline]
    fn release_with(&self, handle: Handle, order: Ordering) -> Result<(), ReleaseError> {
        let slot = match self.check(handle.pool, handle.slot) {
            Ok(s) => s,
            Err(error) => return Err(ReleaseError { error, handle }),
        };
        let st = &self.header(slot).state;
        let held = handle.generation << 1;
        let next = handle.generation.wrapping_add(1) & (u32::MAX >> 1);
        // One compare-exchange on (generation, free): it succeeds only while the slot is held
        // in exactly this handle's generation, so of two releases of one acquisition (the C
        // ABI's handles are copyable: a stale copy may be released while its holder releases)
        // exactly one wins, and a copy can never free the slot's next owner. A load followed
        // by a store could not promise that: both releasers could load `held` before either
        // stored (tests/loom.rs and the C release race catch it). Release on success hands
        // our writes to the next acquirer; a failure publishes nothing (Relaxed).
        if st
            .compare_exchange(held, next << 1 | FREE, order, Ordering::Relaxed)
            .is_err()
        {
            return Err(ReleaseError {
                error: UmaError::StaleHandle,
                handle,
            });
        }
        Ok(())
    }

    /// Checks a slot id: the slot index if it names this pool's slot in its current generation.
    /// Best effort for copies handed around: only the [`Handle`] is proof of ownership.
    pub fn resolve(&self, id: SlotId) -> Result<usize, UmaError> {
        let slot = self.check(id.pool, id.slot)?;
        if self.header(slot).state.load(Ordering::Acquire) != id.generation << 1 {
            return Err(UmaError::StaleHandle);
        }
        Ok(slot)
    }

    /// The slot's data.
    pub fn bytes<'a>(&'a self, handle: &'a Handle) -> Result<&'a [u8], UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        // SAFETY: the handle proves exclusive ownership of the slot; the shared borrow of the
        // handle prevents `&mut` access through it for 'a; the memory lives as long as `self`.
        Ok(unsafe { std::slice::from_raw_parts(self.data_ptr(slot), self.slot_size) })
    }

    /// The slot's data, writable.
    pub fn bytes_mut<'a>(&'a self, handle: &'a mut Handle) -> Result<&'a mut [u8], UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        // SAFETY: the handle proves exclusive ownership; the unique borrow of it makes this the
        // only reference to the slot's data for 'a; the memory lives as long as `self`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data_ptr(slot), self.slot_size) })
    }

    /// The slot's data as `f32`s (the data is 4096-aligned and its size a multiple of 4096, so
    /// this cannot fail on alignment).
    pub fn f32s<'a>(&'a self, handle: &'a Handle) -> Result<&'a [f32], UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        // SAFETY: as in `bytes`; the pointer is 4096-aligned, the length a multiple of 4, and
        // every bit pattern is a valid f32.
        Ok(unsafe {
            std::slice::from_raw_parts(self.data_ptr(slot).cast::<f32>(), self.slot_size / 4)
        })
    }

    /// The slot's data as writable `f32`s.
    pub fn f32s_mut<'a>(&'a self, handle: &'a mut Handle) -> Result<&'a mut [f32], UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        // SAFETY: as in `bytes_mut`, with the alignment and size argument of `f32s`.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.data_ptr(slot).cast::<f32>(), self.slot_size / 4)
        })
    }

    /// The slot's completion flag (in the mapping, beside the data).
    pub fn flag(&self, handle: &Handle) -> Result<&CompletionFlag, UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        Ok(&self.header(slot).flag)
    }

    /// Raw pointer, length, fd and offsets of the slot, for a device layer (see [`RawSlot`]).
    pub fn raw(&self, handle: &Handle) -> Result<RawSlot, UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        #[cfg(unix)]
        let fd = {
            use std::os::fd::AsRawFd;
            self.backing.fd().map(|f| f.as_raw_fd())
        };
        #[cfg(not(unix))]
        let fd = None;
        let offset = (self.data_offset + slot * self.slot_size) as u64;
        Ok(RawSlot {
            ptr: self.data_ptr(slot),
            len: self.slot_size,
            fd,
            offset,
            flag_ptr: self.header(slot).flag.as_ptr(),
            flag_offset: (slot * header_stride()) as u64,
        })
    }

    /// The data of `handle`'s slot as a raw pointer, for the views module.
    pub(crate) fn slot_ptr(&self, handle: &Handle) -> Result<*mut u8, UmaError> {
        let slot = self.check(handle.pool, handle.slot)?;
        Ok(self.data_ptr(slot))
    }

    /// What is held now (a snapshot; no allocation).
    pub fn leak_report(&self) -> LeakReport {
        let mut first = [u32::MAX; 8];
        let mut held = 0;
        for i in 0..self.slots {
            if !self.is_free(i) {
                if held < first.len() {
                    first[held] = i as u32;
                }
                held += 1;
            }
        }
        LeakReport { held, first }
    }

    /// Drops the pool and returns what was still held (instead of logging it).
    pub fn close(mut self) -> LeakReport {
        self.closed = true;
        self.leak_report()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.closed {
            let r = self.leak_report();
            if !r.is_clean() {
                eprintln!(
                    "hetero-uma: pool {} dropped with {} slot(s) still held (first: {:?}); \
                     use Pool::close to get this report instead",
                    self.id,
                    r.held,
                    &r.first[..r.held.min(8)]
                );
            }
        }
        for i in 0..self.slots {
            // SAFETY: header i was initialised in `new`, is dropped exactly once here, and no
            // reference to it outlives `&mut self`. (A no-op for plain atomics; loom's need it.)
            unsafe {
                std::ptr::drop_in_place(
                    self.backing
                        .ptr()
                        .add(i * header_stride())
                        .cast::<SlotHeader>(),
                )
            };
        }
    }
}
