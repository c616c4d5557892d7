#![doc = include_str!("../README.md")]
#![cfg_attr(not(feature = "std"), no_std)]

mod barrier;
#[cfg(all(feature = "capi", not(loom)))]
pub mod capi;
mod epoch;
mod error;
mod flag;
mod predict;
mod primitive;
#[cfg(all(feature = "std", not(loom)))]
mod wait;

pub use barrier::{Arrival, DependencyBarrier, MAX_PRODUCERS};
pub use epoch::{epoch_is_after, epoch_reached, next_epoch, EPOCH_MASK, EPOCH_WINDOW, WAITERS_BIT};
pub use error::SyncError;
pub use flag::CompletionFlag;
pub use predict::{Predictor, SiteState};
#[cfg(all(feature = "std", not(loom)))]
pub use wait::{
    measure_sleep_granularity, set_timer_slack_ns, Phase, Producer, WaitConfig, WaitReport,
};
