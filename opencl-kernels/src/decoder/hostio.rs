//! The buffers the host writes (inputs) and reads (logits, argmax, hidden rows), in one of two
//! ways. Zero copy, on a device that shares memory with the host
//! (`CL_DEVICE_HOST_UNIFIED_MEMORY`, e.g. PoCL or an integrated GPU): the kernels use a
//! host-visible buffer (`CL_MEM_ALLOC_HOST_PTR`) and the host maps it, which copies nothing.
//! Staged, on a discrete GPU: the kernels use device memory and the host makes one transfer
//! from or into its own staging memory per step. Every wait is bounded.

use crate::device::{Buffer, Device};
use crate::error::{Error, Result};
use crate::event::{map_async, read_async, unmap, write_async, Event};
use opencl_sys::{CL_MAP_READ, CL_MAP_WRITE_INVALIDATE_REGION};
use std::sync::Arc;
use std::time::Duration;

enum Mode {
    /// The buffer is host-visible; `mapped` is the live mapping for reading, if any.
    Mapped { mapped: Option<(*mut u8, usize)> },
    /// The buffer is device memory; `host` is the staging memory (8-byte aligned); `pending`
    /// the last transfer that reads `host` (a write), which must finish before it changes.
    Staged {
        host: Vec<u64>,
        pending: Option<Event>,
    },
}

/// A buffer the host fills or reads back.
pub(crate) struct HostBuf {
    buf: Buffer,
    mode: Mode,
    what: &'static str,
}

// SAFETY: the raw pointers are a mapping of `buf` (a thread-safe OpenCL object) used only
// through `&mut self`.
unsafe impl Send for HostBuf {}

impl HostBuf {
    /// `len` bytes; zero-copy when `zero_copy`, staged otherwise.
    pub(crate) fn new(
        dev: &Arc<Device>,
        len: usize,
        zero_copy: bool,
        what: &'static str,
    ) -> Result<HostBuf> {
        let (buf, mode) = if zero_copy {
            (dev.alloc_host_visible(len)?, Mode::Mapped { mapped: None })
        } else {
            (
                dev.alloc(len)?,
                Mode::Staged {
                    host: vec![0u64; len.div_ceil(8)],
                    pending: None,
                },
            )
        };
        Ok(HostBuf { buf, mode, what })
    }

    /// The buffer the kernels use.
    pub(crate) fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// Whether this is the zero-copy (mapped) kind.
    pub(crate) fn zero_copy(&self) -> bool {
        matches!(self.mode, Mode::Mapped { .. })
    }

    /// Ends a read mapping before kernels write the buffer again.
    pub(crate) fn release(&mut self) -> Result<()> {
        if let Mode::Mapped { mapped } = &mut self.mode {
            if let Some((p, _)) = mapped.take() {
                unmap(&self.buf, p)?;
            }
        }
        Ok(())
    }

    /// After a failed wait: the device may still touch the staging memory, so it is leaked
    /// rather than freed (a lost device's last transfer must never land in freed memory).
    pub(crate) fn abandon(&mut self) {
        if let Mode::Staged { host, pending } = &mut self.mode {
            std::mem::forget(std::mem::take(host));
            if let Some(ev) = pending.take() {
                std::mem::forget(ev);
            }
        }
    }

    /// Copies `data` into the buffer's first bytes (queued; the kernels enqueued after it see
    /// it). Waits, bounded, only for what must finish before the host may write.
    pub(crate) fn write(&mut self, data: &[u8], timeout: Duration) -> Result<()> {
        if data.len() > self.buf.len() {
            return Err(Error::BufferTooSmall {
                what: self.what,
                needed: data.len(),
                got: self.buf.len(),
            });
        }
        if data.is_empty() {
            return Ok(());
        }
        self.release()?;
        match &mut self.mode {
            Mode::Mapped { .. } => {
                let (p, ev) = map_async(&self.buf, CL_MAP_WRITE_INVALIDATE_REGION, 0, data.len())?;
                // On failure the map may still complete: the pointer is left alone rather than
                // unmapped in an unknown state (the buffer goes with the decoder).
                ev.wait(self.what, timeout)?;
                // SAFETY: the map completed: `p` is valid for `data.len()` writable bytes until
                // the unmap below, and no kernel uses the buffer meanwhile (in-order queue).
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
                unmap(&self.buf, p)
            }
            Mode::Staged { host, pending } => {
                if let Some(ev) = pending.take() {
                    if let Err(e) = ev.wait(self.what, timeout) {
                        *pending = Some(ev);
                        return Err(e);
                    }
                }
                let bytes = as_bytes_mut(host);
                bytes[..data.len()].copy_from_slice(data);
                // SAFETY: `host` stays allocated and unchanged until `pending` completes: the
                // next write waits for it first, and a failed wait leaks `host` (abandon).
                let ev = unsafe { write_async(&self.buf, 0, data.len(), bytes.as_ptr())? };
                *pending = Some(ev);
                Ok(())
            }
        }
    }

    /// Brings the buffer's first `len` bytes to the host once every command queued before
    /// this call is done (bounded wait); [`HostBuf::view`] then shows them.
    pub(crate) fn read(&mut self, len: usize, timeout: Duration) -> Result<()> {
        if len > self.buf.len() || len == 0 {
            return Err(Error::BufferTooSmall {
                what: self.what,
                needed: len,
                got: self.buf.len(),
            });
        }
        self.release()?;
        match &mut self.mode {
            Mode::Mapped { mapped } => {
                let (p, ev) = map_async(&self.buf, CL_MAP_READ, 0, len)?;
                ev.wait(self.what, timeout)?;
                *mapped = Some((p, len));
                Ok(())
            }
            Mode::Staged { host, .. } => {
                let bytes = as_bytes_mut(host);
                // SAFETY: `host` outlives the transfer: we wait for it below, and a failed
                // wait leads to `abandon` (the decoder is lost), which leaks `host`.
                let ev = unsafe { read_async(&self.buf, 0, len, bytes.as_mut_ptr())? };
                ev.wait(self.what, timeout)
            }
        }
    }

    /// The first `len` bytes brought by the last successful [`HostBuf::read`] (of at least
    /// `len` bytes); valid until the next `release`/`write`/`read`.
    pub(crate) fn view(&mut self, len: usize) -> Result<&[u8]> {
        match &mut self.mode {
            Mode::Mapped {
                mapped: Some((p, n)),
            } if len <= *n => {
                // SAFETY: a completed read mapping of `n >= len` bytes, unmapped only by
                // `release`, which needs `&mut self` (so this slice is gone by then).
                Ok(unsafe { std::slice::from_raw_parts(*p, len) })
            }
            Mode::Staged { host, .. } if len <= host.len() * 8 => Ok(&as_bytes_mut(host)[..len]),
            _ => Err(Error::NotApplicable("nothing was read back")),
        }
    }
}

fn as_bytes_mut(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding and every byte pattern is a valid u8; the length is the
    // same memory in bytes.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
}

/// Views bytes as `f32`s (checked alignment; lengths in whole values).
pub(crate) fn as_f32(b: &[u8]) -> Result<&[f32]> {
    cast(b)
}

/// Views bytes as `u32`s (checked alignment).
pub(crate) fn as_u32(b: &[u8]) -> Result<&[u32]> {
    cast(b)
}

fn cast<T: Copy>(b: &[u8]) -> Result<&[T]> {
    let sz = std::mem::size_of::<T>();
    if !(b.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(Error::Misaligned {
            addr: b.as_ptr() as usize,
            required: std::mem::align_of::<T>(),
        });
    }
    // SAFETY: aligned (checked), `b.len() / sz` whole values inside `b`, and f32/u32 accept
    // every bit pattern (the only types this is called with).
    Ok(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), b.len() / sz) })
}
