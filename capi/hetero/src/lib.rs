#![doc = include_str!("../README.md")]

// Each C API is linked in whole: the `pub use` keeps every `#[no_mangle]` entry point of the
// crate reachable from this one, so the static library holds it and the shared library exports
// it (the symbols' own names, unchanged: `hetero_sme_*`, `hetero_sync_*`, `hetero_uma_*`,
// `hetero_partition_*`).

/// hetero-sme's C API (`hetero_sme.h`).
#[cfg(feature = "sme")]
pub use hetero_sme::capi as sme;

/// hetero-sync's C API (`hetero_sync.h`).
#[cfg(feature = "sync")]
pub use hetero_sync::capi as sync;

/// hetero-uma's C API (`hetero_uma.h`).
#[cfg(feature = "uma")]
pub use hetero_uma::capi as uma;

/// hetero-partition's C API (`hetero_partition.h`).
#[cfg(feature = "partition")]
pub use hetero_partition::capi as partition;
