#![doc = include_str!("../README.md")]

mod backing;
#[cfg(all(feature = "capi", not(loom)))]
pub mod capi;
mod error;
mod pool;
mod primitive;
mod sizing;
mod views;

pub use error::UmaError;
pub use pool::{
    round_slot_size, Handle, LeakReport, Pool, PoolConfig, RawSlot, ReleaseError, SlotId,
    HEADER_STRIDE, MAX_POOL_BYTES, MAX_SLOTS, SLOT_ALIGN,
};
pub use sizing::{llama_layer_buffers, size_pool, BufferUse, LayerShape, Sizing};
pub use views::{Block, ColumnsMut, MatrixLayout, ViewMut};

/// Re-exported so users name the slot flag's type without a direct dependency.
pub use hetero_sync::CompletionFlag;
