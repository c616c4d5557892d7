//! What two processors cost together: the fixed cost of a split through the executor, how much
//! of the shorter side overlaps the longer, and the bandwidth each reaches streaming its
//! decode GEMVs alone and both at once; and the machine's memory bandwidth.

use super::ProfilerError;
use std::time::{Duration, Instant};

use hetero_sme::ThreadPool as Pool;

use super::calls::Bench;
use crate::backend::WeightView;
use crate::exec::Executor;

/// Median of `n` timed calls of weight `w` at `m` rows, µs (after two warm-up calls).
pub(super) fn median_call_us(
    exec: &Executor,
    bench: &Bench,
    w: usize,
    k: usize,
    m: usize,
    n: usize,
) -> Result<f64, ProfilerError> {
    bench.with_slot(|out| {
        for _ in 0..2 {
            bench.call(exec, w, k, m, out)?;
        }
        let v: Vec<f64> = (0..n.max(1))
            .map(|_| {
                bench
                    .call(exec, w, k, m, out)
                    .map(|d| d.as_secs_f64() * 1e6)
            })
            .collect::<Result<_, _>>()?;
        Ok(crate::bench::median(&v))
    })
}

/// Process CPU time (all threads) of `n` calls of weight `w` at `m` rows, per call, µs (after
/// two warm-up calls).
pub(super) fn cpu_per_call_us(
    exec: &Executor,
    bench: &Bench,
    w: usize,
    k: usize,
    m: usize,
    n: usize,
) -> Result<f64, ProfilerError> {
    bench.with_slot(|out| {
        for _ in 0..2 {
            bench.call(exec, w, k, m, out)?;
        }
        let c0 = crate::cli::cpu_time();
        for _ in 0..n.max(1) {
            bench.call(exec, w, k, m, out)?;
        }
        Ok(crate::cli::cpu_time().saturating_sub(c0).as_secs_f64() * 1e6 / n.max(1) as f64)
    })
}

/// `split_us`: the split's time beyond its slower side, `t_split − max(t_a, t_b)`, at least 0.
pub fn split_cost_us(t_split: f64, t_a: f64, t_b: f64) -> f64 {
    (t_split - t_a.max(t_b)).max(0.0)
}

/// `overlap`: the fraction of the shorter side hidden under the longer, from the split's time
/// without its fixed cost: `(t_a + t_b − (t_split − split_us)) / min(t_a, t_b)`, within
/// `[0, 1]` (partition's cost model: `max(a, b) + (1 − overlap)·min(a, b) + split_us`).
pub fn overlap(t_split: f64, split_us: f64, t_a: f64, t_b: f64) -> f64 {
    let lo = t_a.min(t_b);
    // Also NaN: no side measured, nothing hidden.
    if lo.is_nan() || lo <= 0.0 {
        return 0.0;
    }
    ((t_a + t_b - (t_split - split_us)) / lo).clamp(0.0, 1.0)
}

/// Streams `weights` (executor weight indices with their views) through `exec` as one-row
/// GEMVs, round and round, for `window`; returns the bytes of weight read and the time taken.
fn stream(
    exec: &Executor,
    bench: &Bench,
    weights: &[(usize, WeightView<'_>)],
    window: Duration,
) -> Result<(u64, Duration), ProfilerError> {
    bench.with_slot(|out| {
        let t0 = Instant::now();
        let mut bytes = 0u64;
        while t0.elapsed() < window {
            for (w, v) in weights {
                bench.call(exec, *w, v.k, 1, out)?;
                bytes += v.data.len() as u64;
            }
        }
        Ok((bytes, t0.elapsed()))
    })
}

/// Streaming bandwidth of `exec` over `weights` as decode GEMVs for `window`, GB/s.
pub(super) fn solo_gbps(
    exec: &Executor,
    weights: &[(usize, WeightView<'_>)],
    bench: &Bench,
    window: Duration,
) -> Result<f64, ProfilerError> {
    stream(exec, bench, weights, Duration::ZERO)?;
    let (bytes, t) = stream(exec, bench, weights, window)?;
    Ok(bytes as f64 / t.as_secs_f64().max(1e-9) / 1e9)
}

/// Solo and concurrent streaming bandwidth of two executors, GB/s.
pub(super) struct Bandwidth {
    pub(super) a: f64,
    pub(super) b: f64,
    pub(super) both: f64,
}

/// Each of `a` and `b` streams its own weights (`wa`, `wb`: disjoint, larger than the caches)
/// as decode GEMVs for `window` alone, then both at once on two threads: bytes over time.
pub(super) fn bandwidth(
    a: &Executor,
    wa: &[(usize, WeightView<'_>)],
    b: &Executor,
    wb: &[(usize, WeightView<'_>)],
    bench: &Bench,
    window: Duration,
) -> Result<Bandwidth, ProfilerError> {
    let gbps = |(bytes, t): (u64, Duration)| bytes as f64 / t.as_secs_f64().max(1e-9) / 1e9;
    // One warm-up round each (first-use compilation, page faults).
    stream(a, bench, wa, Duration::ZERO)?;
    stream(b, bench, wb, Duration::ZERO)?;
    let solo_a = gbps(stream(a, bench, wa, window)?);
    let solo_b = gbps(stream(b, bench, wb, window)?);
    let (ra, rb) = std::thread::scope(|s| {
        let hb = s.spawn(|| stream(b, bench, wb, window));
        let ra = stream(a, bench, wa, window);
        let rb = hb.join().unwrap_or(Err(ProfilerError::StreamingPanicked));
        (ra, rb)
    });
    let ((ba, ta), (bb, tb)) = (ra?, rb?);
    let both = (ba + bb) as f64 / ta.max(tb).as_secs_f64().max(1e-9) / 1e9;
    Ok(Bandwidth {
        a: solo_a,
        b: solo_b,
        both,
    })
}

/// Read bandwidth of the whole machine: every pool thread summing its share of a 256 MiB
/// buffer, best of 3, GB/s.
pub(super) fn memory_gbps(pool: &Pool) -> f64 {
    let buf = vec![1u64; 32 << 20];
    let n = pool.threads().max(1);
    let chunk = buf.len().div_ceil(n);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        pool.run(n, &|i, _| {
            let part = &buf[(i * chunk).min(buf.len())..((i + 1) * chunk).min(buf.len())];
            std::hint::black_box(part.iter().fold(0u64, |a, &v| a.wrapping_add(v)));
        });
        best = best.min(t0.elapsed().as_secs_f64());
    }
    (buf.len() * 8) as f64 / best / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_cost_and_overlap_by_hand() {
        // Sides 100 and 60 µs: fully concurrent with a 10 µs split cost takes 110.
        assert_eq!(split_cost_us(110.0, 100.0, 60.0), 10.0);
        assert_eq!(overlap(110.0, 10.0, 100.0, 60.0), 1.0);
        // One after the other: 160 + 10.
        assert_eq!(overlap(170.0, 10.0, 100.0, 60.0), 0.0);
        // Half of the shorter side hidden: 100 + 30 + 10.
        assert!((overlap(140.0, 10.0, 100.0, 60.0) - 0.5).abs() < 1e-12);
        // Noise never leaves [0, 1]; a split faster than its slower side costs nothing.
        assert_eq!(overlap(300.0, 0.0, 100.0, 60.0), 0.0);
        assert_eq!(overlap(90.0, 0.0, 100.0, 60.0), 1.0);
        assert_eq!(split_cost_us(90.0, 100.0, 60.0), 0.0);
        assert_eq!(overlap(10.0, 0.0, 0.0, 60.0), 0.0);
    }
}
