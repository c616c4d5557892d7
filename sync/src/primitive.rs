//! Atomics swapped for loom's under `cfg(loom)`, so the same code is model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU32;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicU32;
