//! The slot pool from C: a pool handle, copyable slot handles with generations, raw slot
//! access for device layers, and checked column views.

use super::*;
use crate::{round_slot_size, Pool, PoolConfig, SlotId};

/// A fixed-slot buffer pool (opaque): one memfd-backed mapping made at `hetero_uma_pool_new`.
pub struct hetero_uma_pool {
    pool: Pool,
}

/// One acquisition of a slot: copyable, but only the acquirer may use or release it; every
/// call checks the pool and the generation, so a copy kept after the release is refused
/// (`HETERO_UMA_STALE_HANDLE`), never aliased to the slot's next owner. Release is one
/// compare-exchange on the slot's (generation, state): of two releases of one acquisition,
/// even at the same moment from two threads, exactly one succeeds.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct hetero_uma_slot {
    /// The pool's id.
    pub pool: u32,
    /// The slot's index.
    pub slot: u32,
    /// The slot's generation at this acquisition.
    pub generation: u32,
}

/// Raw access to a held slot for a device layer (valid while the slot is held and the pool
/// lives): `ptr` is 4096-aligned, `len` a multiple of 4096; the same bytes are at `offset` in
/// the memfd `fd` (-1 without one), so a device or another process can map them. `flag` is the
/// slot's completion flag word (a hetero-sync flag: 4 bytes) at `flag_offset` in the fd.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hetero_uma_raw_slot {
    /// Start of the slot's data.
    pub ptr: *mut u8,
    /// Bytes in the slot.
    pub len: usize,
    /// The memfd holding the pool, or -1.
    pub fd: i32,
    /// Offset of the data in the fd.
    pub offset: u64,
    /// The slot's completion flag word.
    pub flag: *mut u32,
    /// Offset of the flag word in the fd.
    pub flag_offset: u64,
}

/// A matrix laid out in a slot: `rows` rows of `cols` elements of `elem_size` bytes, rows
/// `row_stride` bytes apart, starting `offset` bytes into the slot.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hetero_uma_layout {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Bytes per element (> 0).
    pub elem_size: usize,
    /// Bytes from one row's start to the next (≥ cols × elem_size).
    pub row_stride: usize,
    /// Bytes from the slot's start to the first row.
    pub offset: usize,
}

/// Columns `c0..c1` of every row of a matrix in a slot (a producer's share of a column
/// split): row `r` is `row_bytes` bytes at `ptr + r * row_stride`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hetero_uma_view {
    /// The first row's first byte of the range.
    pub ptr: *mut u8,
    /// Rows.
    pub rows: usize,
    /// Bytes of the range in each row.
    pub row_bytes: usize,
    /// Bytes between rows.
    pub row_stride: usize,
}

/// # Safety
/// `pool` null or a live pool.
unsafe fn pool_ref<'a>(pool: *const hetero_uma_pool) -> Result<&'a Pool, Fail> {
    nonnull(pool, "pool")?;
    // SAFETY: the caller's contract.
    Ok(unsafe { &(*pool).pool })
}

fn id(s: &hetero_uma_slot) -> SlotId {
    SlotId::from_parts(s.pool, s.slot, s.generation)
}

/// `bytes` rounded up to a valid slot size (a multiple of 4096) into `*out`.
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_round_slot_size(
    bytes: usize,
    out: *mut usize,
) -> hetero_uma_status {
    guard(|| {
        let r = round_slot_size(bytes)
            .ok_or_else(|| Fail::new(HETERO_UMA_OVERFLOW, "slot size overflow"))?;
        // SAFETY: the caller's contract.
        unsafe { put(out, r, "out") }
    })
}

/// Maps a pool of `slots` slots of `slot_size` bytes (a multiple of 4096), zero-filled, into
/// `*out`: the only allocation; acquire and release never allocate. Free with
/// `hetero_uma_pool_free`.
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_pool_new(
    slots: usize,
    slot_size: usize,
    out: *mut *mut hetero_uma_pool,
) -> hetero_uma_status {
    guard(|| {
        nonnull(out, "out")?;
        let pool = Pool::new(PoolConfig { slots, slot_size })?;
        let p = Box::into_raw(Box::new(hetero_uma_pool { pool }));
        // SAFETY: the caller's contract.
        unsafe { put(out, p, "out") }
    })
}

/// Unmaps and frees the pool; returns how many slots were still held (0 = clean; null → 0).
/// Not while another thread uses the pool; raw pointers into it die with it.
///
/// # Safety
/// `pool` null or from `hetero_uma_pool_new`, freed once, unused afterwards.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_pool_free(pool: *mut hetero_uma_pool) -> usize {
    if pool.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract: from Box::into_raw, freed once.
    let b = unsafe { Box::from_raw(pool) };
    guard_value(0, move || b.pool.close().held)
}

/// Slots, slot size and free slots now (0 for null).
///
/// Thread-safe.
///
/// # Safety
/// `pool` null or a live pool.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_pool_info(
    pool: *const hetero_uma_pool,
    slots: *mut usize,
    slot_size: *mut usize,
    free_slots: *mut usize,
) -> hetero_uma_status {
    guard(|| {
        // SAFETY: forwarded.
        let p = unsafe { pool_ref(pool)? };
        // SAFETY: the caller's contract for each output.
        unsafe {
            put(slots, p.slots(), "slots")?;
            put(slot_size, p.slot_size(), "slot_size")?;
            put(free_slots, p.free_slots(), "free_slots")
        }
    })
}

/// Takes a free slot into `*slot`; `HETERO_UMA_EXHAUSTED` when every slot is held.
///
/// Thread-safe (lock-free).
///
/// # Safety
/// `pool` a live pool; `slot` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_acquire(
    pool: *const hetero_uma_pool,
    slot: *mut hetero_uma_slot,
) -> hetero_uma_status {
    guard(|| {
        // SAFETY: forwarded.
        let p = unsafe { pool_ref(pool)? };
        nonnull(slot, "slot")?;
        let h = p.acquire()?;
        let id = h.id();
        let s = hetero_uma_slot {
            pool: id.pool_id(),
            slot: id.slot() as u32,
            generation: id.generation(),
        };
        // The handle's ownership moves into the C value (Handle has no Drop: the pool tracks
        // the slot by its generation).
        drop(h);
        // SAFETY: the caller's contract.
        unsafe { put(slot, s, "slot") }
    })
}

/// Gives a slot back (its generation advances, so every copy of `slot` becomes stale).
/// `HETERO_UMA_STALE_HANDLE` for a released (or double-released) handle, also when a copy
/// of it is released by another thread at the same moment (one compare-exchange: exactly one
/// of the two succeeds); `HETERO_UMA_FOREIGN_HANDLE` for another pool's; nothing changes then.
///
/// Thread-safe.
///
/// # Safety
/// `pool` a live pool.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_release(
    pool: *const hetero_uma_pool,
    slot: hetero_uma_slot,
) -> hetero_uma_status {
    guard(|| {
        // SAFETY: forwarded.
        let p = unsafe { pool_ref(pool)? };
        match p.release(id(&slot).to_handle()) {
            Ok(()) => Ok(()),
            // The refused handle is a copy of the caller's value (Handle has no Drop).
            Err(e) => Err(e.error.into()),
        }
    })
}

/// Whether `slot` is still the current acquisition of its slot (false for null or stale).
///
/// Thread-safe.
///
/// # Safety
/// `pool` null or a live pool.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_slot_is_current(
    pool: *const hetero_uma_pool,
    slot: hetero_uma_slot,
) -> bool {
    guard_value(false, || {
        // SAFETY: forwarded.
        unsafe { pool_ref(pool) }.is_ok_and(|p| p.resolve(id(&slot)).is_ok())
    })
}

/// Raw access to a held slot (see `hetero_uma_raw_slot`) into `*out`.
///
/// Thread-safe.
///
/// # Safety
/// `pool` a live pool; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_slot_raw(
    pool: *const hetero_uma_pool,
    slot: hetero_uma_slot,
    out: *mut hetero_uma_raw_slot,
) -> hetero_uma_status {
    guard(|| {
        // SAFETY: forwarded.
        let p = unsafe { pool_ref(pool)? };
        nonnull(out, "out")?;
        p.resolve(id(&slot))?;
        let h = id(&slot).to_handle();
        let r = p.raw(&h)?;
        let raw = hetero_uma_raw_slot {
            ptr: r.ptr,
            len: r.len,
            fd: r.fd.unwrap_or(-1),
            offset: r.offset,
            flag: r.flag_ptr,
            flag_offset: r.flag_offset,
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, raw, "out") }
    })
}

/// Columns `c0..c1` of a matrix `layout` in a held slot, into `*out`: checks that the layout
/// fits the slot (`HETERO_UMA_INVALID_ARGUMENT` otherwise, or `_OVERFLOW`) and the range the
/// columns. Views of disjoint column ranges may be written by different threads or devices at
/// once.
///
/// Thread-safe.
///
/// # Safety
/// `pool` a live pool; `layout` valid for a read; `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_uma_slot_columns(
    pool: *const hetero_uma_pool,
    slot: hetero_uma_slot,
    layout: *const hetero_uma_layout,
    c0: usize,
    c1: usize,
    out: *mut hetero_uma_view,
) -> hetero_uma_status {
    guard(|| {
        // SAFETY: forwarded.
        let p = unsafe { pool_ref(pool)? };
        nonnull(layout, "layout")?;
        nonnull(out, "out")?;
        // SAFETY: non-null, valid (contract).
        let l = unsafe { *layout };
        p.resolve(id(&slot))?;
        let bad = |t| Err(Fail::new(HETERO_UMA_INVALID_ARGUMENT, t));
        let ovf = || Fail::new(HETERO_UMA_OVERFLOW, "layout size overflow");
        if l.elem_size == 0 {
            return bad("elem_size is 0");
        }
        let row = l.cols.checked_mul(l.elem_size).ok_or_else(ovf)?;
        if l.row_stride < row {
            return bad("row_stride < cols * elem_size");
        }
        let span = if l.rows == 0 {
            0
        } else {
            (l.rows - 1)
                .checked_mul(l.row_stride)
                .and_then(|a| a.checked_add(row))
                .ok_or_else(ovf)?
        };
        if l.offset.checked_add(span).ok_or_else(ovf)? > p.slot_size() {
            return bad("the layout does not fit the slot");
        }
        if c0 > c1 || c1 > l.cols {
            return bad("column range reversed or past the columns");
        }
        let h = id(&slot).to_handle();
        let base = p.raw(&h)?.ptr;
        let view = hetero_uma_view {
            // In bounds: offset + c0*elem <= offset + span <= slot_size (checked).
            ptr: base.wrapping_add(l.offset + c0 * l.elem_size),
            rows: l.rows,
            row_bytes: (c1 - c0) * l.elem_size,
            row_stride: l.row_stride,
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, view, "out") }
    })
}
