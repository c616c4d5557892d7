//! Lock-free free-slot bitmap: one bit per slot (1 = free) in `AtomicU64` words. No ABA
//! problem (a bit has no identity to confuse), no allocation after construction.

use crate::primitive::{AtomicU64, Ordering};

pub(crate) struct FreeMap {
    words: Box<[AtomicU64]>,
}

impl FreeMap {
    /// `n` slots, all free.
    pub(crate) fn new(n: usize) -> Self {
        let words = (0..n.div_ceil(64))
            .map(|w| {
                let bits = (n - w * 64).min(64);
                AtomicU64::new(if bits == 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                })
            })
            .collect();
        Self { words }
    }

    /// Claims the lowest free slot, or `None` when all are held.
    #[inline]
    pub(crate) fn acquire(&self) -> Option<usize> {
        for (w, word) in self.words.iter().enumerate() {
            // Relaxed: only a hint; the CAS below validates it.
            let mut cur = word.load(Ordering::Relaxed);
            while cur != 0 {
                let bit = cur & cur.wrapping_neg();
                // Acquire on success pairs with the Release in `release`: the previous holder's
                // writes to the slot (data, generation bump) happen-before the new holder's use.
                match word.compare_exchange_weak(
                    cur,
                    cur & !bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(w * 64 + bit.trailing_zeros() as usize),
                    Err(actual) => cur = actual,
                }
            }
        }
        None
    }

    /// Returns slot `i` (which the caller holds) to the free set.
    #[inline]
    pub(crate) fn release(&self, i: usize) {
        // Release: hands this holder's writes (and the generation bump) to the next acquirer.
        self.words[i / 64].fetch_or(1u64 << (i % 64), Ordering::Release);
    }

    /// How many slots are free now (a snapshot).
    pub(crate) fn free_count(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }

    /// Whether slot `i` is free now (a snapshot).
    pub(crate) fn is_free(&self, i: usize) -> bool {
        self.words[i / 64].load(Ordering::Relaxed) & (1u64 << (i % 64)) != 0
    }
}
