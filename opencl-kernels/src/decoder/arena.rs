//! Buffers placed in one allocation, where it fits, so that one kernel can reach all of them
//! (the persistent decode step reads every layer's weights and caches through an arena and a
//! table of offsets), while every other launch binds its part as a sub-buffer of its own; or,
//! where no kernel needs them together, as separate allocations.

use crate::device::{Buffer, Device};
use crate::error::Result;
use std::sync::Arc;

/// The parts, and the arena with each part's byte offset when they share one.
pub(crate) struct Arena {
    /// One buffer per requested size, in order (a sub-buffer of `whole` when there is one).
    pub(crate) parts: Vec<Buffer>,
    /// The one allocation and the parts' byte offsets in it; `None` when it was not asked for
    /// or the total exceeds `CL_DEVICE_MAX_MEM_ALLOC_SIZE` (then every part is an allocation
    /// of its own).
    pub(crate) whole: Option<(Buffer, Vec<u64>)>,
}

/// Parts of `sizes` bytes (each > 0), each at an offset aligned to the device's base address
/// alignment (at least 256 bytes, so any vector type can be read from it). `device_only`:
/// buffers the host never reads or writes ([`Device::alloc_device_only`]: the KV caches), so
/// a driver has no reason to keep a host image of them.
pub(crate) fn arena(
    dev: &Arc<Device>,
    sizes: &[usize],
    device_only: bool,
    one_allocation: bool,
) -> Result<Arena> {
    let alloc = |len: usize| {
        if device_only {
            dev.alloc_device_only(len)
        } else {
            dev.alloc(len)
        }
    };
    let align = dev.info().base_addr_align.max(256);
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut end = 0usize;
    for &s in sizes {
        let o = end.div_ceil(align) * align;
        offsets.push(o as u64);
        end = o + s;
    }
    if !one_allocation || sizes.is_empty() || end as u64 > dev.info().max_mem_alloc_size {
        let parts = sizes
            .iter()
            .map(|&s| alloc(s))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Arena { parts, whole: None });
    }
    let whole = alloc(end)?;
    let parts = sizes
        .iter()
        .zip(&offsets)
        .map(|(&s, &o)| whole.sub(o as usize, s))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arena {
        parts,
        whole: Some((whole, offsets)),
    })
}
