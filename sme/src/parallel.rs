//! Lock-free range work stealing over caller-provided threads.
//!
//! Each worker owns a contiguous range `[front, back)` of tile indices, packed into one
//! `AtomicU64` (`front << 32 | back`). The owner claims from the front; a thief claims from the
//! back of a victim's range. Both are one compare-and-swap on the victim's word, so two claims of
//! the same index are impossible: a claim succeeds only against the exact `(front, back)` it read,
//! and every successful claim shrinks the range, so the word never returns to an earlier value
//! (no ABA) within one `prepare`.

use crate::primitive::{AtomicU64, Ordering};
use crate::Error;

#[repr(align(128))]
#[derive(Debug)]
struct Slot(AtomicU64);

#[inline]
fn pack(front: u32, back: u32) -> u64 {
    (front as u64) << 32 | back as u64
}

#[inline]
fn unpack(x: u64) -> (u32, u32) {
    ((x >> 32) as u32, x as u32)
}

/// Per-call work-stealing state for a fixed number of workers. Allocate it once (it holds one
/// cache-line-padded word per worker) and `prepare` it before each parallel call; the calls
/// themselves allocate nothing.
#[derive(Debug)]
pub struct StealState {
    slots: Box<[Slot]>,
    tiles: usize,
    /// Workers whose ranges the last `prepare` filled (the others are empty); thieves scan
    /// only these.
    active: usize,
}

impl StealState {
    /// State for `workers` workers (at least 1).
    pub fn new(workers: usize) -> Result<Self, Error> {
        if workers == 0 || workers > u32::MAX as usize {
            return Err(Error::BadWorkerCount {
                max: u32::MAX as usize,
                got: workers,
            });
        }
        Ok(Self {
            slots: (0..workers).map(|_| Slot(AtomicU64::new(0))).collect(),
            tiles: 0,
            active: workers,
        })
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.slots.len()
    }

    /// The tile count of the last `prepare`.
    pub fn tiles(&self) -> usize {
        self.tiles
    }

    /// Splits tiles `0..tiles` into equal contiguous ranges, one per worker. `&mut self` proves no
    /// worker is running; the caller's thread spawn (or barrier) publishes the ranges to them.
    pub fn prepare(&mut self, tiles: usize) -> Result<(), Error> {
        self.prepare_active(tiles, self.slots.len())
    }

    /// As [`prepare`](Self::prepare), splitting the tiles over the first `active` workers only
    /// (clamped to `1..=workers()`); the other ranges are empty, and thieves look only at the
    /// active ones. For a job too small to be worth every worker's wake-up: the workers left
    /// out need not run at all, and any that do run find nothing to claim.
    pub fn prepare_active(&mut self, tiles: usize, active: usize) -> Result<(), Error> {
        if tiles > u32::MAX as usize {
            return Err(Error::Overflow);
        }
        let w = active.clamp(1, self.slots.len());
        self.tiles = tiles;
        self.active = w;
        for (i, s) in self.slots.iter().enumerate() {
            let (f, b) = if i < w {
                (tiles * i / w, tiles * (i + 1) / w)
            } else {
                (0, 0)
            };
            // Relaxed: exclusive access; publication is the caller's spawn/barrier.
            s.0.store(pack(f as u32, b as u32), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Workers whose ranges the last `prepare` filled.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Claims the next tile from the front of `worker`'s own range.
    pub fn claim_own(&self, worker: usize) -> Option<usize> {
        let s = &self.slots.get(worker)?.0;
        self.claim(s, true)
    }

    /// Claims one tile from the back of `victim`'s range.
    pub fn steal(&self, victim: usize) -> Option<usize> {
        let s = &self.slots.get(victim)?.0;
        self.claim(s, false)
    }

    fn claim(&self, s: &AtomicU64, front: bool) -> Option<usize> {
        // Relaxed load: it is only a guess that the CAS validates.
        let mut cur = s.load(Ordering::Relaxed);
        loop {
            let (f, b) = unpack(cur);
            if f >= b {
                return None;
            }
            let (next, got) = if front {
                (pack(f + 1, b), f)
            } else {
                (pack(f, b - 1), b - 1)
            };
            // Exactly-once needs only the atomicity of this CAS (one modification order per
            // word). The one acquire/release pair per claim (AcqRel on success) makes a claim
            // happen-after every earlier claim on the same range, so whatever a worker wrote
            // before claiming (e.g. the previous tile's output) is visible to a thief that later
            // claims from that range: the same edge pthreadpool relies on. Failure is Relaxed:
            // we only retry with the fresh value.
            match s.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(got as usize),
                Err(x) => cur = x,
            }
        }
    }

    /// A plan's `run_worker`: checks that this state was prepared for the plan's `tiles`, then
    /// runs [`run_worker`](Self::run_worker).
    pub(crate) fn run_plan(
        &self,
        worker: usize,
        tiles: usize,
        f: impl FnMut(usize),
    ) -> Result<(), Error> {
        if self.tiles != tiles {
            return Err(Error::ShapeMismatch {
                what: "steal state prepared for another tile count",
                expected: tiles,
                got: self.tiles,
            });
        }
        self.run_worker(worker, f)
    }

    /// Runs `f` on every tile `worker` can claim: its own range front to back, then single tiles
    /// stolen from the back of the active workers' ranges (nearest worker first), until every
    /// range is empty. Ranges only shrink, so once a scan finds all of them empty none can
    /// refill.
    pub fn run_worker(&self, worker: usize, mut f: impl FnMut(usize)) -> Result<(), Error> {
        let w = self.slots.len();
        if worker >= w {
            return Err(Error::BadWorkerCount {
                max: w,
                got: worker,
            });
        }
        let a = self.active;
        loop {
            while let Some(t) = self.claim_own(worker) {
                f(t);
            }
            let mut stole = false;
            for off in 1..=a {
                let victim = (worker + off) % a;
                if victim == worker {
                    continue;
                }
                if let Some(t) = self.steal(victim) {
                    f(t);
                    stole = true;
                    break;
                }
            }
            if !stole {
                return Ok(());
            }
        }
    }
}
