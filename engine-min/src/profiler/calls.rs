//! Single executor calls timed around [`Executor::matmul`] (the pair measurements: a split,
//! its sides alone, streaming), with their scratch.

use super::ProfilerError;
use std::time::{Duration, Instant};

use hetero_uma::{Handle, Pool as UmaPool, PoolConfig};

use crate::backend::WeightView;
use crate::exec::Executor;

/// Scratch of the timed calls: one activation buffer and one output slot per thread.
pub(super) struct Bench {
    pub(super) uma: UmaPool,
    /// Activations: `max_m * max_k` floats of fixed pseudo-random values.
    pub(super) x: Vec<f32>,
}

impl Bench {
    /// Scratch for matmuls of up to `max_m` rows over `weights`, `threads` output slots.
    pub(super) fn new(
        weights: &[WeightView<'_>],
        max_m: usize,
        threads: usize,
    ) -> Result<Bench, ProfilerError> {
        let max_k = weights.iter().map(|w| w.k).max().unwrap_or(1);
        let max_n = weights.iter().map(|w| w.n).max().unwrap_or(1);
        let bytes = max_m
            .checked_mul(max_n)
            .and_then(|v| v.checked_mul(4))
            .ok_or(ProfilerError::SlotTooLarge)?;
        let slot_size = hetero_uma::round_slot_size(bytes).ok_or(ProfilerError::SlotTooLarge)?;
        let uma = UmaPool::new(PoolConfig {
            slots: threads.max(1),
            slot_size,
        })?;
        let x = (0..max_m * max_k)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        Ok(Bench { uma, x })
    }

    /// Runs `f` with an output slot, given back afterwards whatever `f` returns.
    pub(super) fn with_slot<T>(
        &self,
        f: impl FnOnce(&mut Handle) -> Result<T, ProfilerError>,
    ) -> Result<T, ProfilerError> {
        let mut out = self.uma.acquire()?;
        let r = f(&mut out);
        let _ = self.uma.release(out);
        r
    }

    /// One timed call of weight `w` (`k` wide) at `m` rows.
    pub(super) fn call(
        &self,
        exec: &Executor,
        w: usize,
        k: usize,
        m: usize,
        out: &mut Handle,
    ) -> Result<Duration, ProfilerError> {
        let t0 = Instant::now();
        exec.matmul(w, &self.x[..m * k], m, &self.uma, out)?;
        Ok(t0.elapsed())
    }
}
