//! The crate's error type.

use core::fmt;

/// Everything that can go wrong in this crate. No function panics on bad input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncError {
    /// The wait's deadline passed before the flag reached the target epoch.
    Timeout {
        /// The epoch waited for.
        target: u32,
        /// The epoch the flag held when the wait gave up.
        observed: u32,
    },
    /// A publish (or barrier arrival) named an epoch that is not after the current one.
    StaleEpoch {
        /// The epoch the flag (or barrier) already holds.
        current: u32,
        /// The epoch that was asked for.
        requested: u32,
    },
    /// An epoch with bit 31 set: epochs are 31-bit (bit 31 is the waiters bit).
    InvalidEpoch(u32),
    /// A barrier arrival for an epoch that is not the next one (the previous epoch is incomplete).
    EpochNotOpen {
        /// The last completed epoch.
        current: u32,
        /// The epoch that was asked for.
        requested: u32,
    },
    /// A barrier over zero producers.
    ZeroProducers,
    /// A barrier over more than [`crate::MAX_PRODUCERS`] producers.
    TooManyProducers(u32),
    /// A barrier arrival from a producer index outside `0..producers`.
    UnknownProducer {
        /// The index given.
        producer: u32,
        /// The barrier's producer count.
        producers: u32,
    },
    /// A producer arrived twice in one epoch (more publishes than producers).
    DuplicatePublish {
        /// The producer.
        producer: u32,
        /// The epoch.
        epoch: u32,
    },
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Timeout { target, observed } => {
                write!(
                    f,
                    "timed out waiting for epoch {target} (flag at {observed})"
                )
            }
            Self::StaleEpoch { current, requested } => {
                write!(
                    f,
                    "epoch {requested} is not after the current epoch {current}"
                )
            }
            Self::InvalidEpoch(e) => write!(f, "epoch {e:#x} has bit 31 set (epochs are 31-bit)"),
            Self::EpochNotOpen { current, requested } => write!(
                f,
                "barrier epoch {requested} is not open (last completed epoch is {current})"
            ),
            Self::ZeroProducers => write!(f, "a barrier needs at least one producer"),
            Self::TooManyProducers(n) => {
                write!(
                    f,
                    "{n} producers exceed the barrier's limit of {}",
                    crate::MAX_PRODUCERS
                )
            }
            Self::UnknownProducer {
                producer,
                producers,
            } => {
                write!(f, "producer {producer} is outside 0..{producers}")
            }
            Self::DuplicatePublish { producer, epoch } => {
                write!(f, "producer {producer} already arrived in epoch {epoch}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SyncError {}
