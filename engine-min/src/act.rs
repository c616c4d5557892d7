//! Where the engine's activation buffers live: on the heap, or in the slots of one
//! [`hetero_uma::Pool`] (4096-aligned, memfd-backed, made once at start-up) so that a GPU can
//! read and write them in place (`CL_MEM_USE_HOST_PTR`, see [`crate::split`]).
//!
//! [`UmaActs`] maps the pool and holds every slot for its whole life; each slot is handed to at
//! most one [`ActBuf`] (checked), which derefs to `[f32]`. Nothing here allocates after
//! [`UmaActs::new`].

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hetero_uma::{Handle, Pool as UmaPool, PoolConfig, UmaError};

use crate::model::Config;

/// Slots the engine's layer step uses: residual, normed rows, q, k, v, attention output,
/// temporary (o/down output), gate, up.
pub const ENGINE_SLOTS: usize = 9;

/// A hetero-uma pool whose slots hold the engine's activations.
pub struct UmaActs {
    // Field order: the handles are released (in `Drop`) before the pool is dropped.
    handles: Vec<Handle>,
    slots: Vec<(usize, usize)>,
    taken: Vec<AtomicBool>,
    pool: UmaPool,
}

// SAFETY: the raw slot addresses are plain numbers here; the memory they name is only reached
// through `ActBuf`s, each owning one slot exclusively (`taken`), and the pool itself is Sync.
unsafe impl Sync for UmaActs {}
// SAFETY: see Sync; nothing in UmaActs is tied to a thread.
unsafe impl Send for UmaActs {}

impl UmaActs {
    /// Maps `slots` slots of at least `floats` f32 each and acquires all of them.
    pub fn new(slots: usize, floats: usize) -> Result<Arc<Self>, UmaError> {
        let slot_size =
            hetero_uma::round_slot_size(floats.max(1) * 4).ok_or(UmaError::ZeroSlotSize)?;
        let pool = UmaPool::new(PoolConfig { slots, slot_size })?;
        let mut handles = Vec::with_capacity(slots);
        let mut raw = Vec::with_capacity(slots);
        for _ in 0..slots {
            let h = pool.acquire()?;
            let r = pool.raw(&h)?;
            raw.push((r.ptr as usize, r.len));
            handles.push(h);
        }
        Ok(Arc::new(Self {
            handles,
            slots: raw,
            taken: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            pool,
        }))
    }

    /// The slots an [`crate::engine::Engine`] for `c` with batches of `max_batch` rows needs
    /// ([`ENGINE_SLOTS`], each as large as the largest activation buffer).
    pub fn for_model(c: &Config, max_batch: usize) -> Result<Arc<Self>, UmaError> {
        let mb = max_batch.max(1);
        let floats = mb * c.d_model.max(c.d_ff).max(c.vocab).max(c.kv_dim());
        Self::new(ENGINE_SLOTS, floats)
    }

    /// The pool.
    pub fn pool(&self) -> &UmaPool {
        &self.pool
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Start address and byte length of slot `i` (4096-aligned).
    pub fn slot_raw(&self, i: usize) -> Option<(*mut u8, usize)> {
        self.slots.get(i).map(|&(p, l)| (p as *mut u8, l))
    }

    /// The slot that holds `ptr..ptr + len` bytes, and the offset of `ptr` in it.
    pub fn locate(&self, ptr: *const u8, len: usize) -> Option<(usize, usize)> {
        let p = ptr as usize;
        self.slots.iter().enumerate().find_map(|(i, &(base, l))| {
            (p >= base && p - base <= l && len <= l - (p - base)).then(|| (i, p - base))
        })
    }

    /// A buffer of `len` f32 over slot `i`; `None` if `i` is out of range, was taken already,
    /// or is too small.
    pub(crate) fn take(self: &Arc<Self>, i: usize, len: usize) -> Option<ActBuf> {
        let &(base, l) = self.slots.get(i)?;
        if len * 4 > l || self.taken[i].swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(ActBuf {
            ptr: NonNull::new(base as *mut f32)?,
            len,
            _heap: Vec::new(),
            _uma: Some(Arc::clone(self)),
        })
    }
}

impl Drop for UmaActs {
    fn drop(&mut self) {
        for h in self.handles.drain(..) {
            // A handle of this pool is never foreign; ignore the impossible error.
            let _ = self.pool.release(h);
        }
    }
}

/// An activation buffer: `len` f32 on the heap or in one uma slot (owned exclusively).
pub(crate) struct ActBuf {
    ptr: NonNull<f32>,
    len: usize,
    _heap: Vec<f32>,
    _uma: Option<Arc<UmaActs>>,
}

// SAFETY: an ActBuf owns its memory exclusively (a Vec, or a uma slot taken once), like a Vec.
unsafe impl Send for ActBuf {}
// SAFETY: shared access only reads (`Deref`); writes need `&mut`.
unsafe impl Sync for ActBuf {}

impl ActBuf {
    /// `len` zeros on the heap.
    pub(crate) fn heap(len: usize) -> Self {
        let mut v = vec![0f32; len];
        Self {
            ptr: NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling()),
            len,
            _heap: v,
            _uma: None,
        }
    }
}

impl Default for ActBuf {
    fn default() -> Self {
        Self::heap(0)
    }
}

impl Deref for ActBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `ptr` is valid for `len` f32 (the Vec's buffer, or a slot of at least
        // `len * 4` bytes kept mapped by the Arc) and initialized (zeroed at creation).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for ActBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in Deref; `&mut self` is exclusive and no other ActBuf names this memory.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}
