//! Timing an executor the way a step runs it: every matmul of the model in model order at `m`
//! rows (so each weight comes from memory as in a real step, not from a cache warmed by the
//! call before), each call timed around [`Executor::matmul`], the median call per weight
//! shape kept. A curve grows in `m` until the next pass would overrun its time budget.

use std::time::{Duration, Instant};

use hetero_partition::{LatencyPoint, Order};
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
    pub(super) fn new(weights: &[WeightView<'_>], max_m: usize, threads: usize) -> Result<Bench, String> {
        let max_k = weights.iter().map(|w| w.k).max().unwrap_or(1);
        let max_n = weights.iter().map(|w| w.n).max().unwrap_or(1);
        let bytes = max_m
            .checked_mul(max_n)
            .and_then(|v| v.checked_mul(4))
            .ok_or("output slot too large")?;
        let slot_size = hetero_uma::round_slot_size(bytes).ok_or("output slot too large")?;
        let uma = UmaPool::new(PoolConfig {
            slots: threads.max(1),
            slot_size,
        })
        .map_err(|e| e.to_string())?;
        let x = (0..max_m * max_k)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        Ok(Bench { uma, x })
    }

    /// An output slot (give it back with [`Bench::give`]).
    pub(super) fn slot(&self) -> Result<Handle, String> {
        self.uma.acquire().map_err(|e| e.to_string())
    }

    pub(super) fn give(&self, h: Handle) {
        let _ = self.uma.release(h);
    }

    /// One timed call of weight `w` (`k` wide) at `m` rows.
    pub(super) fn call(
        &self,
        exec: &Executor,
        w: usize,
        k: usize,
        m: usize,
        out: &mut Handle,
    ) -> Result<Duration, String> {
        let t0 = Instant::now();
        exec.matmul(w, &self.x[..m * k], m, &self.uma, out)
            .map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    }
}

/// The weight shapes a pass times: each executor weight's index into `keys`.
pub(super) struct PassPlan {
    /// Distinct `(k, n)` shapes.
    pub(super) keys: Vec<(usize, usize)>,
    /// Per executor weight (in order): its shape's index in `keys`.
    pub(super) key_of: Vec<usize>,
}

impl PassPlan {
    /// The shapes of `weights` (an executor's weights, in its order).
    pub(super) fn of(weights: &[WeightView<'_>]) -> PassPlan {
        let mut keys: Vec<(usize, usize)> = Vec::new();
        let key_of = weights
            .iter()
            .map(|w| match keys.iter().position(|&s| s == (w.k, w.n)) {
                Some(i) => i,
                None => {
                    keys.push((w.k, w.n));
                    keys.len() - 1
                }
            })
            .collect();
        PassPlan { keys, key_of }
    }
}

/// What measuring one curve set found.
pub(super) struct Curves {
    /// One point per shape and measured `m` (the median call).
    pub(super) points: Vec<LatencyPoint>,
    /// Row counts left out to stay within the budget.
    pub(super) skipped: Vec<u32>,
}

/// Times passes of `exec` over all its weights at each `m` of `ms` (ascending): one warm-up
/// pass, then up to `reps` timed passes (fewer when a pass is slow), within `budget`; the
/// first `m` is always measured. `progress` gets one line per `m`.
pub(super) fn curves(
    exec: &Executor,
    plan: &PassPlan,
    bench: &Bench,
    ms: &[u32],
    reps: usize,
    budget: Duration,
    label: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Curves, String> {
    let t_start = Instant::now();
    let mut out = bench.slot()?;
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    let mut last: Option<(u32, Duration)> = None;
    let n_keys = plan.keys.len();
    for &m in ms {
        let left = budget.saturating_sub(t_start.elapsed());
        if let Some((m0, t0)) = last {
            // Row counts only grow: a pass costs at least what the last one did, and at most
            // in proportion to the rows.
            let est = t0.mul_f64(f64::from(m) / f64::from(m0)).max(t0);
            if est * 2 > left {
                skipped.push(m);
                continue;
            }
        }
        let warm = pass(exec, plan, bench, m as usize, &mut out, None)?;
        let fit = (left.saturating_sub(warm).as_secs_f64() / warm.as_secs_f64().max(1e-6)) as usize;
        let r = reps.min(fit).max(1);
        let mut calls: Vec<Vec<f64>> = vec![Vec::new(); n_keys];
        let mut pass_times = Vec::with_capacity(r);
        for _ in 0..r {
            pass_times.push(pass(exec, plan, bench, m as usize, &mut out, Some(&mut calls))?);
        }
        pass_times.sort_unstable();
        last = Some((m, pass_times[pass_times.len() / 2]));
        let mut line = format!("{label} m={m} ({r} passes):");
        for (key, v) in plan.keys.iter().zip(calls.iter_mut()) {
            let us = crate::bench::median(v) * 1e6;
            line += &format!(" {}x{} {us:.1} us;", key.0, key.1);
            points.push(LatencyPoint {
                k: key.0 as u32,
                n: key.1 as u32,
                m,
                us: us.max(0.01),
                order: Order::ActivationFirst,
            });
        }
        progress(&line);
    }
    bench.give(out);
    Ok(Curves { points, skipped })
}

/// One pass over every weight at `m` rows; each call's seconds into `calls[key]` when given.
fn pass(
    exec: &Executor,
    plan: &PassPlan,
    bench: &Bench,
    m: usize,
    out: &mut Handle,
    mut calls: Option<&mut Vec<Vec<f64>>>,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    for (w, &key) in plan.key_of.iter().enumerate() {
        let k = plan.keys[key].0;
        let d = bench.call(exec, w, k, m, out)?;
        if let Some(c) = calls.as_deref_mut() {
            c[key].push(d.as_secs_f64());
        }
    }
    Ok(t0.elapsed())
}
