//! The pool's memory: one memfd-backed shared mapping on Linux (so the region can be handed to
//! a device or another process by file descriptor), an anonymous mapping elsewhere, and a heap
//! allocation under Miri and loom (no FFI there).

use crate::UmaError;

/// Alignment of the heap stand-in (the mappings are page-aligned).
#[cfg(any(miri, loom))]
const HEAP_ALIGN: usize = crate::SLOT_ALIGN;

pub(crate) struct Backing {
    ptr: *mut u8,
    len: usize,
    #[cfg(not(any(miri, loom)))]
    _map: memmap2::MmapMut,
    #[cfg(all(target_os = "linux", not(any(miri, loom))))]
    fd: std::os::fd::OwnedFd,
}

// SAFETY: Backing owns its memory (a mapping or a heap block) exclusively; the raw pointer is
// only an address into it, so moving it to or sharing it with another thread is sound.
unsafe impl Send for Backing {}
// SAFETY: as above; all concurrent access to the memory goes through the pool's rules.
unsafe impl Sync for Backing {}

#[cfg(all(target_os = "linux", not(any(miri, loom))))]
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Backing {
    /// `len` bytes (a multiple of the page size), zero-filled.
    #[cfg(all(target_os = "linux", not(any(miri, loom))))]
    pub(crate) fn new(len: usize) -> Result<Self, UmaError> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        // SAFETY: the name is a NUL-terminated literal; memfd_create reads nothing else.
        let raw = unsafe { libc::memfd_create(c"hetero-uma".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(UmaError::Map(errno()));
        }
        // SAFETY: `raw` is a fresh file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let file = std::fs::File::from(fd);
        file.set_len(len as u64)
            .map_err(|e| UmaError::Map(e.raw_os_error().unwrap_or(0)))?;
        // SAFETY: the memfd is private to this pool (nobody else has the descriptor yet) and is
        // never truncated while mapped, so the mapping stays valid for the Backing's life.
        let mut map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
            .map_err(|e| UmaError::Map(e.raw_os_error().unwrap_or(0)))?;
        let ptr = map.as_mut_ptr();
        let fd = OwnedFd::from(file);
        debug_assert!(fd.as_raw_fd() >= 0);
        Ok(Self {
            ptr,
            len,
            _map: map,
            fd,
        })
    }

    /// `len` bytes, zero-filled (anonymous mapping).
    #[cfg(all(not(target_os = "linux"), not(any(miri, loom))))]
    pub(crate) fn new(len: usize) -> Result<Self, UmaError> {
        let mut map = memmap2::MmapMut::map_anon(len)
            .map_err(|e| UmaError::Map(e.raw_os_error().unwrap_or(0)))?;
        Ok(Self {
            ptr: map.as_mut_ptr(),
            len,
            _map: map,
        })
    }

    /// `len` bytes, zero-filled (heap, for Miri and loom).
    #[cfg(any(miri, loom))]
    pub(crate) fn new(len: usize) -> Result<Self, UmaError> {
        let layout =
            std::alloc::Layout::from_size_align(len, HEAP_ALIGN).map_err(|_| UmaError::TooLarge)?;
        // SAFETY: `len` is non-zero (the pool has at least one slot and a header page).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(UmaError::Map(libc::ENOMEM));
        }
        Ok(Self { ptr, len })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The memfd (Linux, real mappings only).
    #[cfg(unix)]
    pub(crate) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        #[cfg(all(target_os = "linux", not(any(miri, loom))))]
        {
            use std::os::fd::AsFd;
            Some(self.fd.as_fd())
        }
        #[cfg(not(all(target_os = "linux", not(any(miri, loom)))))]
        {
            None
        }
    }
}

#[cfg(any(miri, loom))]
impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout, freed once.
        unsafe {
            std::alloc::dealloc(
                self.ptr,
                std::alloc::Layout::from_size_align_unchecked(self.len, HEAP_ALIGN),
            )
        }
    }
}
