//! Timing matmuls inside real engine steps: [`Engine::forward`] on `m` tokens, and from its
//! executor's per-class clocks ([`Executor::predictions`]: the time measured around every
//! [`Executor::matmul`] call) the mean call of each weight shape in that step. Between the
//! matmuls the step runs its host ops on the same pool, as `run` does, so a point holds what a
//! call costs there (pool wake-ups, caches shared with attention), not back-to-back calls.
//!
//! Decode steps (`m` <= 4 rows) read every row's logits, so the LM head runs on `m` rows as
//! when a speculative step verifies its drafts; prefill steps too (its head on `m` rows, what
//! perplexity runs). Every step starts at position 0 (matmul cost does not depend on it). A
//! curve grows in `m` until the next step would overrun the time budget.
//!
//! [`Executor::predictions`]: crate::exec::Executor::predictions
//! [`Executor::matmul`]: crate::exec::Executor::matmul

use super::ProfilerError;
use std::time::{Duration, Instant};

use hetero_partition::{LatencyPoint, Order};

use crate::engine::Engine;

/// What measuring one curve set found.
pub(super) struct Curves {
    /// One point per weight shape and measured `m` (the median over steps of the mean call).
    pub(super) points: Vec<LatencyPoint>,
    /// Row counts left out to stay within the budget.
    pub(super) skipped: Vec<u32>,
}

/// Times `engine` at each `m` of `ms` (ascending): one warm-up step, then up to `reps` timed
/// steps (fewer when a step is slow), within `budget`; the first `m` is always measured.
/// `progress` gets one line per `m`.
pub(super) fn curves(
    engine: &mut Engine,
    ms: &[u32],
    reps: usize,
    budget: Duration,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Curves, ProfilerError> {
    let t_start = Instant::now();
    let vocab = engine.model().config.vocab;
    let max = ms.iter().copied().max().unwrap_or(1) as usize;
    let tokens: Vec<u32> = (0..max).map(|i| ((i * 7919 + 13) % vocab) as u32).collect();
    let mut logits = vec![0f32; max * vocab];
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    let mut last: Option<(u32, Duration)> = None;
    let mut step = |engine: &mut Engine, m: usize| -> Result<Duration, ProfilerError> {
        engine.reset();
        engine.reset_timings();
        let out = if m == 1 {
            &mut logits[..vocab]
        } else {
            &mut logits[..m * vocab]
        };
        let t0 = Instant::now();
        engine.forward(&tokens[..m], out)?;
        Ok(t0.elapsed())
    };
    for &m in ms {
        let left = budget.saturating_sub(t_start.elapsed());
        if let Some((m0, t0)) = last {
            // Row counts only grow: a step costs at least what the last one did, and at most
            // in proportion to its rows.
            let est = t0.mul_f64(f64::from(m) / f64::from(m0)).max(t0);
            if est * 2 > left {
                skipped.push(m);
                continue;
            }
        }
        let warm = step(engine, m as usize)?;
        let fit = (left.saturating_sub(warm).as_secs_f64() / warm.as_secs_f64().max(1e-6)) as usize;
        let r = reps.min(fit).max(1);
        // Per class `(k, n)`: the mean call of each timed step.
        let mut calls: Vec<((u32, u32), Vec<f64>)> = Vec::new();
        let mut steps = Vec::with_capacity(r);
        for _ in 0..r {
            steps.push(step(engine, m as usize)?);
            for p in engine.executor().predictions() {
                let us = p.measured_us / p.calls.max(1) as f64;
                match calls.iter_mut().find(|c| c.0 == (p.k, p.n)) {
                    Some(c) => c.1.push(us),
                    None => calls.push(((p.k, p.n), vec![us])),
                }
            }
        }
        steps.sort_unstable();
        last = Some((m, steps[steps.len() / 2]));
        let mut line = format!("{label} m={m} ({r} steps):");
        for ((k, n), v) in &calls {
            let us = crate::bench::median(v);
            line += &format!(" {k}x{n} {us:.1} us;");
            points.push(LatencyPoint {
                k: *k,
                n: *n,
                m,
                us: us.max(0.01),
                order: Order::ActivationFirst,
            });
        }
        progress(&line);
    }
    Ok(Curves { points, skipped })
}
