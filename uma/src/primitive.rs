//! Atomics swapped for loom's under `cfg(loom)`, so acquire/release is model-checked.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU32;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU32;

pub(crate) use std::sync::atomic::Ordering;
