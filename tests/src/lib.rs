#![doc = include_str!("../README.md")]

use std::fmt::Display;

pub mod alloc;
pub use alloc::{allocations, count_allocations, CountingAlloc};

/// The environment variable that turns "backend absent, skipped" into a failure.
pub const REQUIRE_VAR: &str = "HETERO_REQUIRE";

/// Whether `backend` is listed in `HETERO_REQUIRE` (a comma-separated list; `all` names every one).
pub fn is_required(backend: &str) -> bool {
    std::env::var(REQUIRE_VAR)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .any(|b| b == backend || b == "all")
        })
        .unwrap_or(false)
}

/// Decides what a test does about a backend it needs.
///
/// `probe` is the result of looking for the backend. When it is found the value is returned.
/// When it is absent, a test that is not required prints one line naming the backend and the
/// reason and gets `None` (the caller returns early); a required one panics with the reason, so
/// CI never passes by skipping.
pub fn require<T, E: Display>(backend: &str, probe: Result<T, E>) -> Option<T> {
    match probe {
        Ok(v) => Some(v),
        Err(why) if is_required(backend) => {
            panic!("backend `{backend}` is required ({REQUIRE_VAR}) but absent: {why}")
        }
        Err(why) => {
            eprintln!("SKIP backend `{backend}` absent: {why} (set {REQUIRE_VAR}={backend} to fail instead)");
            None
        }
    }
}

/// The environment variable that fixes a randomized test's seed (the test prints the one it
/// drew, so a failure can be rerun exactly).
pub const SEED_VAR: &str = "HETERO_SEED";

/// The seed of a randomized test: `HETERO_SEED` when set, else drawn from the clock; printed
/// with the rerun command, then mixed with `tag` (one per test, so tests sharing a seed still
/// draw different data).
pub fn seed(tag: u64) -> u64 {
    let seed = std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("seed {seed} (tag {tag}); rerun with {SEED_VAR}={seed}");
    seed ^ tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_backend_is_returned() {
        assert_eq!(require::<u8, &str>("nothing-required", Ok(7)), Some(7));
    }

    #[test]
    fn absent_backend_skips_when_not_required() {
        // A name no caller lists in HETERO_REQUIRE, unless it says `all`.
        if !is_required("never-required-test-backend") {
            assert_eq!(
                require::<u8, _>("never-required-test-backend", Err("gone")),
                None
            );
        }
    }
}
