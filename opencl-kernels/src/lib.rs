#![doc = include_str!("../README.md")]

pub mod attention;
pub mod caps;
pub mod decoder;
mod device;
mod error;
mod event;
pub mod fast;
mod format;
mod kernels;
mod layout;
mod loader;
pub mod reference;

pub use attention::{Attention, AttentionShape, AttnLaunch, KvType, Tiles};
pub use device::{
    cache_key, list, Buffer, Device, DeviceInfo, Program, Selector, CACHE_ENV, DEVICE_ENV,
    PLATFORM_ENV,
};
pub use error::{Error, Result};
pub use event::QueueGate;
pub use format::{
    check_computable, matrix_bytes, relayout_q4_0, relayout_q4_0_len, relayout_q4_0_x4,
    relayout_q4_0_x4_len, relayout_q4_t, relayout_q4_t_len, row_bytes, GgmlType, BLOCK, COMPUTABLE,
};
pub use kernels::{
    Flag, Kernels, Launch, Profiled, RopeMode, RowShape, MAX_WG, OPTIONS, SOURCE, SOURCE_NV_DP4A,
};
pub use layout::{dequantize_split_row, has_split_layout, relayout_split, relayout_split_len};
pub use loader::{Api, DEFAULT_LIBS, LIB_ENV};
