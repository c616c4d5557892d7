#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "std"), no_std)]

mod primitive;

use primitive::AtomicU32;

/// A 32-bit completion epoch word, meant to live beside an output tensor in memory a device can
/// write. `repr(C)`: exactly one naturally aligned `u32`, so a GPU kernel or an NPU callback can
/// store to it directly.
#[repr(C)]
#[derive(Debug)]
pub struct CompletionFlag {
    epoch: AtomicU32,
}

impl CompletionFlag {
    /// A flag at epoch 0 (nothing published yet).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self { epoch: AtomicU32::new(0) }
    }

    /// A flag at epoch 0 (nothing published yet).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self { epoch: AtomicU32::new(0) }
    }
}

impl Default for CompletionFlag {
    fn default() -> Self {
        Self::new()
    }
}
