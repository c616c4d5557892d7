//! The dependency barrier: N producers write disjoint ranges of one buffer and arrive; the
//! consumer proceeds when all have, and sees every producer's writes. Reusable across epochs.

use crate::epoch::{epoch_is_after, next_epoch, EPOCH_MASK, WAITERS_BIT};
use crate::primitive::{AtomicU64, Ordering};
use crate::{CompletionFlag, SyncError};

/// The most producers one barrier takes (one bit each in the arrival mask).
pub const MAX_PRODUCERS: u32 = 32;

/// What an arrival did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Others are still outstanding in this epoch.
    Waiting {
        /// Producers that have not arrived yet.
        remaining: u32,
    },
    /// This was the last producer: the epoch is complete and the barrier's flag published it.
    Completed,
}

/// A barrier over `producers` producers (1..=32), reusable epoch after epoch.
///
/// State: a 64-bit word holding the last completed epoch (high 32 bits) and the mask of
/// producers that arrived in the open epoch (low 32 bits), updated by compare-and-swap, so a bad
/// arrival (stale epoch, duplicate, unknown producer) changes nothing. The last arriver starts
/// the next epoch (empty mask) and publishes the completed epoch on the barrier's
/// [`CompletionFlag`], which the consumer waits on like any flag (predicted sleep, poll, block).
///
/// Ordering: every arrival is an AcqRel RMW on the state word, so the last arrival's RMW
/// happens-after every earlier producer's (they form one release sequence of RMWs); its
/// Release publish on the flag then hands all of it to the consumer's Acquire wait. Producers
/// publish *after* writing their range; device producers arrive from their completion callback.
#[repr(C)]
#[derive(Debug)]
pub struct DependencyBarrier {
    flag: CompletionFlag,
    producers: u32,
    state: AtomicU64,
}

impl DependencyBarrier {
    /// A barrier over `producers` producers, with epoch 0 completed (the first epoch to arrive
    /// in is 1). Errors: [`SyncError::ZeroProducers`], [`SyncError::TooManyProducers`].
    pub fn new(producers: u32) -> Result<Self, SyncError> {
        Self::with_epoch(producers, 0)
    }

    /// A barrier whose last completed epoch is `completed` (low 31 bits); the first epoch to
    /// arrive in is the next one. Same errors as [`Self::new`].
    pub fn with_epoch(producers: u32, completed: u32) -> Result<Self, SyncError> {
        let completed = completed & EPOCH_MASK;
        if producers == 0 {
            return Err(SyncError::ZeroProducers);
        }
        if producers > MAX_PRODUCERS {
            return Err(SyncError::TooManyProducers(producers));
        }
        Ok(Self {
            flag: CompletionFlag::with_epoch(completed),
            producers,
            state: AtomicU64::new((completed as u64) << 32),
        })
    }

    /// The producer count.
    pub fn producers(&self) -> u32 {
        self.producers
    }

    /// The flag the consumer waits on: it holds the last completed epoch.
    pub fn flag(&self) -> &CompletionFlag {
        &self.flag
    }

    /// The last completed epoch (Acquire).
    pub fn completed_epoch(&self) -> u32 {
        self.flag.epoch()
    }

    fn full_mask(&self) -> u32 {
        if self.producers == 32 {
            u32::MAX
        } else {
            (1u32 << self.producers) - 1
        }
    }

    /// Producer `producer` has finished writing its part for `epoch`. Call after the writes
    /// (they are released by this call). Errors leave the barrier unchanged:
    /// [`SyncError::UnknownProducer`], [`SyncError::InvalidEpoch`], [`SyncError::StaleEpoch`]
    /// (`epoch` already completed), [`SyncError::EpochNotOpen`] (an earlier epoch is still
    /// incomplete), [`SyncError::DuplicatePublish`] (this producer already arrived in `epoch`).
    pub fn arrive(&self, producer: u32, epoch: u32) -> Result<Arrival, SyncError> {
        self.arrive_with(producer, epoch, Ordering::AcqRel)
    }

    pub(crate) fn arrive_with(
        &self,
        producer: u32,
        epoch: u32,
        order: Ordering,
    ) -> Result<Arrival, SyncError> {
        if producer >= self.producers {
            return Err(SyncError::UnknownProducer {
                producer,
                producers: self.producers,
            });
        }
        if epoch & WAITERS_BIT != 0 {
            return Err(SyncError::InvalidEpoch(epoch));
        }
        let bit = 1u32 << producer;
        let full = self.full_mask();
        // Acquire so a producer that sees the previous epoch completed also sees the reset mask.
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let done = (s >> 32) as u32 & EPOCH_MASK;
            let mask = s as u32;
            if !epoch_is_after(epoch, done) {
                return Err(SyncError::StaleEpoch {
                    current: done,
                    requested: epoch,
                });
            }
            if epoch != next_epoch(done) {
                return Err(SyncError::EpochNotOpen {
                    current: done,
                    requested: epoch,
                });
            }
            if mask & bit != 0 {
                return Err(SyncError::DuplicatePublish { producer, epoch });
            }
            let last = mask | bit == full;
            let new = if last {
                // Complete `epoch`: record it and open the next one with an empty mask.
                (epoch as u64) << 32
            } else {
                s | bit as u64
            };
            // AcqRel (see the type's docs): Release hands this producer's writes on; Acquire
            // (for the last arriver) takes every earlier producer's.
            match self
                .state
                .compare_exchange_weak(s, new, order, Ordering::Acquire)
            {
                Ok(_) => {
                    if last {
                        // Only the last arriver publishes, once per epoch, in epoch order: the
                        // next epoch cannot complete before this producer arrives in it, which it
                        // does after this call returns. So publish cannot fail here.
                        let _ = self.flag.publish(epoch);
                        return Ok(Arrival::Completed);
                    }
                    return Ok(Arrival::Waiting {
                        remaining: (full & !(mask | bit)).count_ones(),
                    });
                }
                Err(actual) => s = actual,
            }
        }
    }

    /// Loom-only test hook: `arrive` with a Relaxed state update (no release of the producer's
    /// writes). The loom suite keeps a test expecting the model to catch the data race.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn arrive_relaxed_for_loom(&self, producer: u32, epoch: u32) -> Result<Arrival, SyncError> {
        self.arrive_with(producer, epoch, Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bad_input() {
        assert_eq!(
            DependencyBarrier::new(0).err(),
            Some(SyncError::ZeroProducers)
        );
        assert_eq!(
            DependencyBarrier::new(33).err(),
            Some(SyncError::TooManyProducers(33))
        );
        let b = DependencyBarrier::new(3).unwrap();
        assert_eq!(
            b.arrive(3, 1),
            Err(SyncError::UnknownProducer {
                producer: 3,
                producers: 3
            })
        );
        assert_eq!(
            b.arrive(0, 2),
            Err(SyncError::EpochNotOpen {
                current: 0,
                requested: 2
            })
        );
        assert_eq!(b.arrive(0, 1), Ok(Arrival::Waiting { remaining: 2 }));
        assert_eq!(
            b.arrive(0, 1),
            Err(SyncError::DuplicatePublish {
                producer: 0,
                epoch: 1
            })
        );
        assert_eq!(b.arrive(2, 1), Ok(Arrival::Waiting { remaining: 1 }));
        assert!(!b.flag().is_reached(1));
        assert_eq!(b.arrive(1, 1), Ok(Arrival::Completed));
        assert!(b.flag().is_reached(1));
        assert_eq!(
            b.arrive(1, 1),
            Err(SyncError::StaleEpoch {
                current: 1,
                requested: 1
            })
        );
        assert_eq!(b.arrive(1, 2), Ok(Arrival::Waiting { remaining: 2 }));
        assert_eq!(
            b.arrive(0, 0x8000_0000),
            Err(SyncError::InvalidEpoch(0x8000_0000))
        );
    }

    #[test]
    fn thirty_two_producers_and_wrap() {
        let b = DependencyBarrier::new(32).unwrap();
        for p in 0..31 {
            assert!(matches!(b.arrive(p, 1), Ok(Arrival::Waiting { .. })));
        }
        assert_eq!(b.arrive(31, 1), Ok(Arrival::Completed));
        // Wrap-around: start two epochs before the boundary.
        let b = DependencyBarrier::with_epoch(2, EPOCH_MASK - 1).unwrap();
        let mut e = EPOCH_MASK - 1;
        for _ in 0..4 {
            e = next_epoch(e);
            assert_eq!(b.arrive(1, e), Ok(Arrival::Waiting { remaining: 1 }));
            assert_eq!(b.arrive(0, e), Ok(Arrival::Completed));
            assert!(b.flag().is_reached(e));
        }
        assert_eq!(b.completed_epoch(), 2);
    }
}
