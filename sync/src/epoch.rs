//! Epoch arithmetic: 31-bit epochs compared with wrapping arithmetic.

/// The bits of the flag word that hold the epoch (bit 31 is [`WAITERS_BIT`]).
pub const EPOCH_MASK: u32 = 0x7FFF_FFFF;

/// Bit 31 of the flag word: set by a consumer about to block in the kernel, so the producer
/// knows to issue a wake. Device producers never set it (they store a plain epoch).
pub const WAITERS_BIT: u32 = 0x8000_0000;

/// How far apart two epochs may be and still be ordered correctly: 2^30. A waiter whose target
/// lags the published epoch by less than this sees it as reached; an epoch published more than
/// this many steps ahead of a waiter's target would look "behind" (the waiter would time out
/// instead of returning). Layer-by-layer reuse advances by one per step, so the window is never
/// approached in practice.
pub const EPOCH_WINDOW: u32 = 1 << 30;

/// Whether epoch `a` is strictly after `b` (mod 2^31, within [`EPOCH_WINDOW`]).
#[inline]
pub const fn epoch_is_after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b) & EPOCH_MASK;
    d != 0 && d < EPOCH_WINDOW
}

/// Whether the published epoch `current` (a flag word; [`WAITERS_BIT`] is ignored) has reached
/// `target`, i.e. `current == target` or is after it.
#[inline]
pub const fn epoch_reached(current: u32, target: u32) -> bool {
    (current & EPOCH_MASK).wrapping_sub(target) & EPOCH_MASK < EPOCH_WINDOW
}

/// The epoch after `e`, wrapping from `EPOCH_MASK` to 0.
#[inline]
pub const fn next_epoch(e: u32) -> u32 {
    e.wrapping_add(1) & EPOCH_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_around() {
        assert!(epoch_is_after(0, EPOCH_MASK));
        assert!(epoch_is_after(5, EPOCH_MASK - 3));
        assert!(!epoch_is_after(EPOCH_MASK, 0));
        assert!(epoch_reached(0, EPOCH_MASK));
        assert!(epoch_reached(3 | WAITERS_BIT, 3));
        assert!(!epoch_reached(2, 3));
        assert!(epoch_reached(EPOCH_WINDOW - 1, 0));
        assert!(!epoch_reached(EPOCH_WINDOW, 0));
        assert_eq!(next_epoch(EPOCH_MASK), 0);
        assert!(!epoch_is_after(7, 7));
    }
}
