//! The timed three-phase wait (std): sleep to just before the predicted completion, poll with a
//! spin hint and bounded backoff, then block (futex) or poll on a timer (device producers).

use std::time::{Duration, Instant};

use crate::epoch::WAITERS_BIT;
use crate::flag::MAX_BACKOFF;
use crate::primitive::spin_hint;
use crate::{CompletionFlag, DependencyBarrier, SiteState, SyncError};

/// Who publishes the flag, which decides the block phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// A CPU thread calling [`CompletionFlag::publish`] (or a host callback): it wakes a futex,
    /// so the block phase sleeps in the kernel.
    Thread,
    /// A device storing the epoch directly: it cannot wake a futex, so the block phase is a
    /// timed poll every [`WaitConfig::device_poll`].
    Device,
}

/// How a wait behaves. `Default` suits a thread producer and waits of tens of µs to ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitConfig {
    /// Who publishes (decides the block phase).
    pub producer: Producer,
    /// Give up after this long from the wait's start: [`SyncError::Timeout`].
    pub timeout: Duration,
    /// How long the poll phase spins before blocking, at least (with a prediction it spins on to
    /// the predicted completion plus twice the jitter when that is later).
    pub spin: Duration,
    /// Do not sleep when less than this remains before the predicted wake point (a sleep
    /// shorter than the OS granularity would overshoot).
    pub min_sleep: Duration,
    /// The block phase's poll period for [`Producer::Device`].
    pub device_poll: Duration,
}

impl Default for WaitConfig {
    fn default() -> Self {
        Self {
            producer: Producer::Thread,
            timeout: Duration::from_secs(1),
            spin: Duration::from_micros(50),
            min_sleep: Duration::from_micros(20),
            device_poll: Duration::from_micros(20),
        }
    }
}

/// Which phase saw the flag reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Already reached when the wait began.
    Immediate,
    /// Reached at the first check after the predicted sleep (the sleep may have overshot).
    AfterSleep,
    /// Reached while polling.
    Poll,
    /// Reached in the block phase.
    Block,
}

/// What a successful wait did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReport {
    /// The phase that saw the flag reached.
    pub phase: Phase,
    /// From the wait's start to the moment the consumer saw the flag.
    pub elapsed: Duration,
    /// Time asleep in the predicted-sleep phase.
    pub slept: Duration,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl CompletionFlag {
    /// Waits until the flag reaches `target`, timing from now. See [`Self::wait_since`].
    pub fn wait(
        &self,
        target: u32,
        cfg: &WaitConfig,
        site: Option<&mut SiteState>,
    ) -> Result<WaitReport, SyncError> {
        self.wait_since(Instant::now(), target, cfg, site)
    }

    /// Waits until the flag reaches `target`, in three phases:
    /// 1. if `site` has a prediction, sleep until shortly before `start` + predicted duration
    ///    (the margin is twice the learned jitter plus the learned OS sleep overshoot);
    /// 2. poll with a spin hint and exponential backoff (1..8 hints) for `cfg.spin`, or until the
    ///    predicted completion plus twice the jitter when that is later;
    /// 3. block: futex wait for [`Producer::Thread`], else sleep `cfg.device_poll` and re-check.
    ///
    /// `start` is when the producer's work began (e.g. the kernel launch), so the predictor
    /// learns launch-to-completion times. The observed duration is fed back into `site`.
    /// Errors: [`SyncError::InvalidEpoch`], [`SyncError::Timeout`] after `cfg.timeout` from
    /// `start` (the predictor is not updated then).
    pub fn wait_since(
        &self,
        start: Instant,
        target: u32,
        cfg: &WaitConfig,
        mut site: Option<&mut SiteState>,
    ) -> Result<WaitReport, SyncError> {
        if target & WAITERS_BIT != 0 {
            return Err(SyncError::InvalidEpoch(target));
        }
        let deadline = start.checked_add(cfg.timeout);
        let finish = |phase: Phase, slept: Duration, site: Option<&mut SiteState>| {
            let elapsed = start.elapsed();
            if let Some(s) = site {
                s.observe(
                    ns(elapsed),
                    matches!(phase, Phase::Immediate | Phase::AfterSleep),
                );
            }
            Ok(WaitReport {
                phase,
                elapsed,
                slept,
            })
        };
        if self.is_reached(target) {
            return finish(Phase::Immediate, Duration::ZERO, site);
        }

        // Phase 1: predicted sleep.
        let mut slept = Duration::ZERO;
        if let Some(s) = site.as_deref_mut() {
            let sleep_ns = s.sleep_ns();
            // Checked: a huge prediction (e.g. a bad seed) must not overflow the Instant.
            let wake = match (start.checked_add(Duration::from_nanos(sleep_ns)), deadline) {
                (Some(w), Some(d)) => Some(w.min(d)),
                (w, d) => w.or(d),
            };
            if let (true, Some(wake)) = (sleep_ns > 0, wake) {
                let now = Instant::now();
                if now.checked_add(cfg.min_sleep).is_some_and(|t| wake > t) {
                    let req = wake - now;
                    std::thread::sleep(req);
                    slept = now.elapsed();
                    s.observe_sleep(ns(req), ns(slept));
                    if self.is_reached(target) {
                        return finish(Phase::AfterSleep, slept, site);
                    }
                }
            }
        }

        // Phase 2: poll with a spin hint and bounded backoff, for `cfg.spin` or until the
        // predicted completion plus twice the jitter, whichever is later: the sleep ended a margin
        // (2·jitter + overshoot + guard) early on purpose, and a long wait's margin can exceed
        // `cfg.spin`, after which the futex's wake-up (~5-20 µs) would cost more than the spin.
        let now = Instant::now();
        let predicted_end = site.as_deref().and_then(|s| {
            let p = s.predicted_ns()?;
            start.checked_add(Duration::from_nanos(
                p.saturating_add(2u64.saturating_mul(s.jitter_ns())),
            ))
        });
        let spin_end = match (now.checked_add(cfg.spin), predicted_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let mut backoff = 1u32;
        loop {
            if self.is_reached(target) {
                return finish(Phase::Poll, slept, site);
            }
            for _ in 0..backoff {
                spin_hint();
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return if self.is_reached(target) {
                    finish(Phase::Poll, slept, site)
                } else {
                    Err(self.timeout(target))
                };
            }
            if spin_end.is_some_and(|e| now >= e) {
                break;
            }
        }

        // Phase 3: block.
        loop {
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return if self.is_reached(target) {
                            finish(Phase::Block, slept, site)
                        } else {
                            Err(self.timeout(target))
                        };
                    }
                    Some(d - now)
                }
                None => None,
            };
            match cfg.producer {
                Producer::Thread => {
                    if self.block_once(target, left.map(ns)) {
                        return finish(Phase::Block, slept, site);
                    }
                }
                Producer::Device => {
                    if self.is_reached(target) {
                        return finish(Phase::Block, slept, site);
                    }
                    let step = left.map_or(cfg.device_poll, |l| l.min(cfg.device_poll));
                    std::thread::sleep(step);
                }
            }
        }
    }

    fn timeout(&self, target: u32) -> SyncError {
        SyncError::Timeout {
            target,
            observed: self.epoch(),
        }
    }
}

impl DependencyBarrier {
    /// Waits until `epoch` is complete (every producer arrived); see
    /// [`CompletionFlag::wait_since`]. Producers arrive from threads or host callbacks, so
    /// [`Producer::Thread`] is the right block phase.
    pub fn wait(
        &self,
        epoch: u32,
        cfg: &WaitConfig,
        site: Option<&mut SiteState>,
    ) -> Result<WaitReport, SyncError> {
        self.flag().wait(epoch, cfg, site)
    }
}

/// Sets the calling thread's timer slack (Linux `PR_SET_TIMERSLACK`; default 50 µs), which
/// bounds how late its sleeps may end. A consumer thread that sleeps to a predicted moment gains
/// from 1 ns. Returns whether it was applied (false on other systems).
pub fn set_timer_slack_ns(ns: u64) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_TIMERSLACK takes an unsigned long by value and touches no memory.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = ns;
        false
    }
}

/// Measures the OS sleep granularity: the median actual duration of `samples` sleeps of
/// `requested` (e.g. 1 µs). Allocation-free (sorts a fixed buffer of up to 256 samples).
pub fn measure_sleep_granularity(requested: Duration, samples: usize) -> Duration {
    let mut buf = [0u64; 256];
    let n = samples.clamp(1, buf.len());
    for slot in buf.iter_mut().take(n) {
        let t = Instant::now();
        std::thread::sleep(requested);
        *slot = ns(t.elapsed());
    }
    let v = &mut buf[..n];
    v.sort_unstable();
    Duration::from_nanos(v[n / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_when_nobody_publishes() {
        let f = CompletionFlag::new();
        for producer in [Producer::Thread, Producer::Device] {
            let cfg = WaitConfig {
                producer,
                timeout: Duration::from_millis(3),
                ..Default::default()
            };
            let t = Instant::now();
            assert_eq!(
                f.wait(1, &cfg, None),
                Err(SyncError::Timeout {
                    target: 1,
                    observed: 0
                })
            );
            assert!(t.elapsed() >= Duration::from_millis(3));
        }
        assert_eq!(
            f.wait(WAITERS_BIT | 1, &WaitConfig::default(), None),
            Err(SyncError::InvalidEpoch(WAITERS_BIT | 1))
        );
    }

    #[test]
    fn huge_settings_do_not_panic() {
        let f = CompletionFlag::new();
        let mut s = SiteState::seeded(u64::MAX, 0, 0);
        let cfg = WaitConfig {
            timeout: Duration::from_millis(2),
            spin: Duration::MAX,
            min_sleep: Duration::MAX,
            ..Default::default()
        };
        assert!(matches!(
            f.wait(1, &cfg, Some(&mut s)),
            Err(SyncError::Timeout { .. })
        ));
        let cfg = WaitConfig {
            timeout: Duration::from_millis(2),
            ..Default::default()
        };
        assert!(f.wait(1, &cfg, Some(&mut s)).is_err());
    }

    #[test]
    fn immediate() {
        let f = CompletionFlag::new();
        f.publish(2).unwrap();
        let mut s = SiteState::new();
        let r = f.wait(1, &WaitConfig::default(), Some(&mut s)).unwrap();
        assert_eq!(r.phase, Phase::Immediate);
        assert_eq!(s.samples(), 1);
    }

    #[test]
    fn granularity_is_positive() {
        assert!(measure_sleep_granularity(Duration::from_micros(1), 5) >= Duration::from_micros(1));
    }
}
