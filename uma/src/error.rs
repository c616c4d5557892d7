//! The crate's error type.

use std::fmt;

/// Everything that can go wrong in this crate. A call that returns an error changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UmaError {
    /// A pool of zero slots.
    ZeroSlots,
    /// A slot size of zero bytes.
    ZeroSlotSize,
    /// More slots than [`crate::MAX_SLOTS`].
    TooManySlots(usize),
    /// A slot size that is not a multiple of [`crate::SLOT_ALIGN`], so the next slot's data
    /// would not be aligned.
    MisalignedSlotSize(usize),
    /// The whole mapping would exceed [`crate::MAX_POOL_BYTES`] (or overflow).
    TooLarge,
    /// The OS refused the mapping (memfd_create, ftruncate or mmap); the `errno`.
    Map(i32),
    /// Every slot is held.
    Exhausted,
    /// The handle (or slot id) belongs to another pool.
    ForeignHandle,
    /// The slot id's generation is not the slot's current one (it was released since).
    StaleHandle,
    /// A range with `start > end`.
    InvalidRange {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
    },
    /// A range that ends past the slot (or the matrix's columns).
    OutOfBounds {
        /// Range end.
        end: usize,
        /// The limit it exceeds.
        len: usize,
    },
    /// Two ranges of one split overlap (their indices in the split).
    Overlap(usize, usize),
    /// A matrix layout that does not fit the slot (zero element size, a row stride shorter
    /// than a row, or rows past the slot's end).
    BadLayout,
    /// A byte view cast to elements of the wrong size or alignment.
    BadCast,
    /// A sizing request with no buffers, a zero layer count, or an interval ending before it
    /// starts.
    BadSizing,
}

impl fmt::Display for UmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroSlots => write!(f, "a pool needs at least one slot"),
            Self::ZeroSlotSize => write!(f, "slot size is zero"),
            Self::TooManySlots(n) => write!(f, "{n} slots exceed the limit {}", crate::MAX_SLOTS),
            Self::MisalignedSlotSize(s) => write!(
                f,
                "slot size {s} is not a multiple of {} bytes",
                crate::SLOT_ALIGN
            ),
            Self::TooLarge => write!(f, "pool exceeds {} bytes", crate::MAX_POOL_BYTES),
            Self::Map(e) => write!(f, "mapping the pool failed: errno {e}"),
            Self::Exhausted => write!(f, "every slot is held"),
            Self::ForeignHandle => write!(f, "handle belongs to another pool"),
            Self::StaleHandle => write!(f, "slot id is stale (the slot was released since)"),
            Self::InvalidRange { start, end } => write!(f, "range {start}..{end} is reversed"),
            Self::OutOfBounds { end, len } => write!(f, "range end {end} exceeds {len}"),
            Self::Overlap(a, b) => write!(f, "ranges {a} and {b} overlap"),
            Self::BadLayout => write!(f, "matrix layout does not fit the slot"),
            Self::BadCast => write!(f, "view length or alignment does not fit the element type"),
            Self::BadSizing => write!(f, "invalid sizing request"),
        }
    }
}

impl std::error::Error for UmaError {}
