//! Online wait-time predictor: per call site, an EWMA of the completion time with a jitter
//! margin (Jacobson/Karels, as TCP estimates round-trip times), plus the OS sleep overshoot seen
//! at that site. Integer nanoseconds, no allocation, `no_std`.

/// Weight of a new sample in the mean: 1/8 (as TCP's SRTT). Shifts in duration are followed
/// within ~8-16 waits.
const MEAN_SHIFT: u32 = 3;
/// Weight of a new sample in the deviation and the sleep overshoot: 1/4 (as TCP's RTTVAR).
const DEV_SHIFT: u32 = 2;
/// How many deviations before the predicted completion the sleep ends.
const DEV_MULT: u64 = 2;
/// A fixed guard added to the early-wake margin, covering the cost of the wake itself.
const GUARD_NS: u64 = 2_000;

/// What one call site has learned. Plain data (`Copy`), owned by the caller: keep one per op
/// index within a layer (layers repeat, so the same op takes about the same time each layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SiteState {
    mean_ns: u64,
    dev_ns: u64,
    overshoot_ns: u64,
    samples: u32,
}

impl SiteState {
    /// Nothing learned yet: the first wait at this site does not sleep.
    pub const fn new() -> Self {
        Self {
            mean_ns: 0,
            dev_ns: 0,
            overshoot_ns: 0,
            samples: 0,
        }
    }

    /// A site that already predicts `mean_ns` with jitter `jitter_ns` and a known OS sleep
    /// overshoot, e.g. seeded from an offline profile (it keeps learning from there).
    pub const fn seeded(mean_ns: u64, jitter_ns: u64, overshoot_ns: u64) -> Self {
        Self {
            mean_ns,
            dev_ns: jitter_ns,
            overshoot_ns,
            samples: 1,
        }
    }

    /// The predicted wait (ns from the wait's start to completion), once a sample was seen.
    pub fn predicted_ns(&self) -> Option<u64> {
        (self.samples > 0).then_some(self.mean_ns)
    }

    /// The jitter estimate (mean absolute deviation), ns.
    pub fn jitter_ns(&self) -> u64 {
        self.dev_ns
    }

    /// The OS sleep overshoot learned at this site (actual minus requested sleep), ns.
    pub fn sleep_overshoot_ns(&self) -> u64 {
        self.overshoot_ns
    }

    /// Samples seen.
    pub fn samples(&self) -> u32 {
        self.samples
    }

    /// How long to sleep from the wait's start so the sleep ends just before the predicted
    /// completion: mean − 2·jitter − sleep overshoot − guard (0 when nothing is known).
    pub fn sleep_ns(&self) -> u64 {
        if self.samples == 0 {
            return 0;
        }
        self.mean_ns
            .saturating_sub(DEV_MULT.saturating_mul(self.dev_ns))
            .saturating_sub(self.overshoot_ns)
            .saturating_sub(GUARD_NS)
    }

    /// Records an observed wait of `ns`. `censored` means the flag was already set when it was
    /// first checked (after the sleep, or at once), so the true completion came at or before
    /// `ns`: such a sample only ever moves the estimate down (never up, which would feed back
    /// into ever-longer sleeps).
    pub fn observe(&mut self, ns: u64, censored: bool) {
        if self.samples == 0 {
            self.mean_ns = ns;
            self.dev_ns = ns / 4;
            self.samples = 1;
            return;
        }
        self.samples = self.samples.saturating_add(1);
        if censored && ns >= self.mean_ns {
            // Overslept: the completion was earlier than we know. Move 1/16 of the way down.
            self.mean_ns -= self.mean_ns >> 4;
            return;
        }
        let err = ns as i128 - self.mean_ns as i128;
        self.mean_ns = (self.mean_ns as i128 + (err >> MEAN_SHIFT)).max(0) as u64;
        let abs = err.unsigned_abs() as i128;
        self.dev_ns =
            (self.dev_ns as i128 + ((abs - self.dev_ns as i128) >> DEV_SHIFT)).max(0) as u64;
    }

    /// Records one sleep: asked for `requested_ns`, slept `actual_ns`.
    pub fn observe_sleep(&mut self, requested_ns: u64, actual_ns: u64) {
        let over = actual_ns.saturating_sub(requested_ns) as i128;
        let cur = self.overshoot_ns as i128;
        self.overshoot_ns = if cur == 0 {
            over as u64
        } else {
            (cur + ((over - cur) >> DEV_SHIFT)).max(0) as u64
        };
    }
}

/// A fixed table of `N` call sites (no allocation): index it by the op's position in a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Predictor<const N: usize> {
    sites: [SiteState; N],
}

impl<const N: usize> Predictor<N> {
    /// All sites empty.
    pub const fn new() -> Self {
        Self {
            sites: [SiteState::new(); N],
        }
    }

    /// The state of site `i`, or `None` when `i >= N`.
    pub fn site(&mut self, i: usize) -> Option<&mut SiteState> {
        self.sites.get_mut(i)
    }

    /// Read-only view of site `i`.
    pub fn get(&self, i: usize) -> Option<&SiteState> {
        self.sites.get(i)
    }
}

impl<const N: usize> Default for Predictor<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_and_adapts() {
        let mut s = SiteState::new();
        assert_eq!(s.sleep_ns(), 0);
        assert_eq!(s.predicted_ns(), None);
        for _ in 0..64 {
            s.observe(100_000, false);
        }
        let p = s.predicted_ns().unwrap();
        assert!((99_000..=101_000).contains(&p), "{p}");
        assert!(s.jitter_ns() < 2_000, "{}", s.jitter_ns());
        assert!(s.sleep_ns() > 90_000 && s.sleep_ns() < 100_000);
        // Durations shift up: followed within a few dozen samples.
        for _ in 0..48 {
            s.observe(200_000, false);
        }
        let p = s.predicted_ns().unwrap();
        assert!((195_000..=200_000).contains(&p), "{p}");
        // Censored samples above the mean only pull it down.
        let before = s.predicted_ns().unwrap();
        s.observe(400_000, true);
        assert!(s.predicted_ns().unwrap() < before);
        // Sleep overshoot shortens the sleep.
        let sl = s.sleep_ns();
        s.observe_sleep(100_000, 160_000);
        assert_eq!(s.sleep_overshoot_ns(), 60_000);
        assert_eq!(s.sleep_ns(), sl - 60_000);
    }

    #[test]
    fn table() {
        let mut p = Predictor::<4>::new();
        assert!(p.site(4).is_none());
        p.site(3).unwrap().observe(10, false);
        assert_eq!(p.get(3).unwrap().samples(), 1);
    }
}
