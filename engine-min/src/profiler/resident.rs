//! The GPU's `resident` paths: whole steps on hetero-opencl-kernels' resident decoder, timed
//! as `run` calls it, and attributed to the model's matmul shapes so that one step's
//! per-matmul latencies sum to the step.
//!
//! **Attribution.** For a step of `m` rows the profiler measures the wall time `T` of the step
//! (median of several unprofiled steps: enqueue, every kernel, the logits readback) and, in one
//! more step with per-op device timing on, the device time `D_j` of every op kind `j`
//! ([`Decoder::take_op_times`]). The matmuls an op kind contains are known ([`kind_matmuls`]:
//! QKV+norm+RoPE holds q, k, v; the decode block A holds q, k, v and o; the persistent decode
//! step, one launch a token, holds every matmul of every layer and the head); each kind's time
//! is shared among its matmuls in proportion to `k · n` (all read the same rows, so this is
//! their share of the weight bytes and of the multiply-adds). Kinds without a matmul
//! (embedding, attention, argmax, the blocks' final sum) and everything the device timer does
//! not see (launch gaps, the readback) are spread over all matmuls in proportion to what they
//! got: with `A_s` the device time given to shape `s` and `A = Σ A_s`, the shape's latency per
//! call is `L_s = (A_s / A) · T / calls_s`, where `calls_s` counts its matmuls in one step. So
//! `Σ_s calls_s · L_s = T` exactly: the planner's per-matmul latencies of a resident step add
//! up to what the step really costs, host work included.

use super::ProfilerError;
use std::time::{Duration, Instant};

use hetero_opencl_kernels::decoder::{Decoder, OpKind, OpTime};
use hetero_partition::{LatencyPoint, Order};

use crate::model::Config;

/// A matmul of one layer (or the LM head) as the attribution sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Output projection.
    O,
    /// SwiGLU gate.
    Gate,
    /// SwiGLU up.
    Up,
    /// Down projection.
    Down,
    /// LM head.
    Head,
}

impl Role {
    /// Every role, layer matmuls first.
    pub const ALL: [Role; 8] = [
        Role::Q,
        Role::K,
        Role::V,
        Role::O,
        Role::Gate,
        Role::Up,
        Role::Down,
        Role::Head,
    ];

    /// The weight shape `(k, n)` of this matmul in model `c`.
    pub fn shape(self, c: &Config) -> (u32, u32) {
        let (d, q, kv, ff) = (
            c.d_model as u32,
            (c.n_head * c.head_dim) as u32,
            c.kv_dim() as u32,
            c.d_ff as u32,
        );
        match self {
            Role::Q => (d, q),
            Role::K | Role::V => (d, kv),
            Role::O => (q, d),
            Role::Gate | Role::Up => (d, ff),
            Role::Down => (ff, d),
            Role::Head => (d, c.vocab as u32),
        }
    }
}

/// The matmuls one launch of `kind` runs (empty: no matmul).
pub fn kind_matmuls(kind: OpKind) -> &'static [Role] {
    match kind {
        OpKind::QkvRope => &[Role::Q, Role::K, Role::V],
        OpKind::OProj => &[Role::O],
        OpKind::GateUpSwiglu => &[Role::Gate, Role::Up],
        OpKind::Down => &[Role::Down],
        OpKind::Head => &[Role::Head],
        OpKind::BlockAttn => &[Role::Q, Role::K, Role::V, Role::O],
        OpKind::BlockFfn => &[Role::Gate, Role::Up, Role::Down],
        // The persistent decode step is one launch holding every matmul of the token (its
        // device time is then shared by k · n, i.e. by weight bytes: decode reads each weight
        // once, so bytes are what its phases cost).
        OpKind::Persistent => &Role::ALL,
        // Embedding, attention, argmax, the blocks' final sum, column-hook matmuls (not part
        // of a step): spread over the matmuls.
        _ => &[],
    }
}

/// Per-call latencies `((k, n), µs)` of every distinct matmul shape of a step of model `c`
/// that took `step_us` in all, from the step's device time per op kind (see the module docs).
/// `head` says whether the step ran the LM head. `None` when the op times hold no matmul time.
pub fn attribute(
    c: &Config,
    step_us: f64,
    ops: &[OpTime],
    head: bool,
) -> Option<Vec<((u32, u32), f64)>> {
    // Device time given to each distinct shape, and its calls per step.
    let mut shares: Vec<((u32, u32), f64, f64)> = Vec::new();
    let mut add = |s: (u32, u32), t: f64, calls: f64| match shares.iter_mut().find(|e| e.0 == s) {
        Some(e) => {
            e.1 += t;
            e.2 += calls;
        }
        None => shares.push((s, t, calls)),
    };
    for r in Role::ALL {
        if r == Role::Head && !head {
            continue;
        }
        let calls = if r == Role::Head {
            1.0
        } else {
            c.n_layer as f64
        };
        add(r.shape(c), 0.0, calls);
    }
    for op in ops {
        let roles = kind_matmuls(op.kind);
        // A persistent step runs every layer: its roles repeat per layer (the head once).
        let per_layer = op.kind == OpKind::Persistent;
        let size = |r: &Role| {
            let (k, n) = r.shape(c);
            f64::from(k) * f64::from(n)
        };
        let weight = |r: &Role| match (per_layer, *r == Role::Head) {
            (true, false) => size(r) * c.n_layer as f64,
            _ => size(r),
        };
        let total: f64 = roles
            .iter()
            .filter(|r| head || **r != Role::Head)
            .map(weight)
            .sum();
        for r in roles {
            if *r == Role::Head && !head {
                continue;
            }
            add(r.shape(c), op.seconds * weight(r) / total, 0.0);
        }
    }
    let a: f64 = shares.iter().map(|e| e.1).sum();
    if !(a > 0.0 && a.is_finite() && step_us > 0.0) {
        return None;
    }
    Some(
        shares
            .into_iter()
            .filter(|e| e.2 > 0.0)
            .map(|(s, t, calls)| (s, (t / a) * step_us / calls))
            .collect(),
    )
}

/// Measured resident steps: the points of the `decode` (one token) and `prefill` (chunks of
/// the given row counts, the LM head on the last row) paths, and what was left out.
pub(super) struct ResidentCurves {
    pub(super) decode: Vec<LatencyPoint>,
    pub(super) prefill: Vec<LatencyPoint>,
    pub(super) skipped: Vec<u32>,
    /// Median wall time of a decode step and of each measured prefill chunk, µs.
    pub(super) steps: Vec<(u32, f64)>,
}

/// Times steps of `dec` (a decoder on a device opened with profiling): a decode token at
/// position `pos`, then prefill chunks of each `prefill_m` (ascending) from position 0, each
/// with one warm-up step, up to `reps` timed steps and one profiled step, within `budget`.
pub(super) fn measure(
    dec: &mut Decoder,
    c: &Config,
    pos: usize,
    prefill_m: &[u32],
    reps: usize,
    budget: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<ResidentCurves, ProfilerError> {
    let t_start = Instant::now();
    let mut st = Steps {
        tokens: (0..prefill_m.iter().copied().max().unwrap_or(1) as usize)
            .map(|i| ((i * 7919 + 13) % c.vocab) as u32)
            .collect(),
        logits: vec![0f32; c.vocab],
        reps,
    };
    let point = |(k, n): (u32, u32), m: u32, us: f64| LatencyPoint {
        k,
        n,
        m,
        us: us.max(0.01),
        order: Order::ActivationFirst,
    };
    let head = Role::Head.shape(c);
    let mut out = ResidentCurves {
        decode: Vec::new(),
        prefill: Vec::new(),
        skipped: Vec::new(),
        steps: Vec::new(),
    };
    let (lat, t, r) = st.attributed(dec, c, 1, pos, budget)?;
    progress(&format!(
        "gpu resident decode step: {t:.1} us ({r} timed steps + 1 profiled)"
    ));
    out.steps.push((1, t));
    out.decode = lat.iter().map(|&(s, us)| point(s, 1, us)).collect();
    let mut heads = Vec::new();
    let mut last = (1u32, t);
    for &m in prefill_m {
        let left = budget.saturating_sub(t_start.elapsed());
        // A chunk costs at least the last one and at most in proportion to its rows; it needs
        // a warm-up and a profiled step. The first chunk is always measured (the prefill path
        // needs a point).
        let est = (last.1 * f64::from(m) / f64::from(last.0)).max(last.1);
        if !out.prefill.is_empty() && Duration::from_secs_f64(est * 2e-6) > left {
            out.skipped.push(m);
            continue;
        }
        let (lat, t, r) = st.attributed(dec, c, m, 0, left)?;
        progress(&format!(
            "gpu resident prefill chunk m={m}: {t:.1} us ({r} timed steps + 1 profiled)"
        ));
        out.steps.push((m, t));
        last = (m, t);
        for (s, us) in lat {
            if s == head {
                heads.push(us);
            } else {
                out.prefill.push(point(s, m, us));
            }
        }
    }
    if !heads.is_empty() {
        // The head runs on one row whatever the chunk: one point, the median share.
        out.prefill
            .push(point(head, 1, crate::bench::median(&heads)));
    }
    Ok(out)
}

/// The inputs of the timed steps.
struct Steps {
    tokens: Vec<u32>,
    logits: Vec<f32>,
    reps: usize,
}

impl Steps {
    /// One step of `m` tokens at `pos` reading the last row's logits, as `run` calls it.
    fn step(&mut self, dec: &mut Decoder, m: usize, pos: usize) -> Result<Duration, ProfilerError> {
        let t0 = Instant::now();
        crate::backend::resident::step(dec, &self.tokens[..m], pos, &mut self.logits)?;
        Ok(t0.elapsed())
    }

    /// A warm-up step, at least one and up to `reps` timed steps that fit in `left` besides
    /// one profiled step (their median is `T`, µs), the profiled step, and the attribution of
    /// `T`; also the timed steps' count. `T` is never the profiled step's own time nor the
    /// warm-up's: per-op timing and a lazy kernel build can slow a step, so neither is what
    /// `run` sees.
    #[allow(clippy::type_complexity)]
    fn attributed(
        &mut self,
        dec: &mut Decoder,
        c: &Config,
        m: u32,
        pos: usize,
        left: Duration,
    ) -> Result<(Vec<((u32, u32), f64)>, f64, usize), ProfilerError> {
        let m_us = m as usize;
        let warm = self.step(dec, m_us, pos)?;
        let fit =
            (left.saturating_sub(warm * 2).as_secs_f64() / warm.as_secs_f64().max(1e-6)) as usize;
        let r = self.reps.min(fit).max(1);
        let v: Vec<f64> = (0..r)
            .map(|_| self.step(dec, m_us, pos).map(|d| d.as_secs_f64() * 1e6))
            .collect::<Result<_, _>>()?;
        dec.set_profiling(true)?;
        let profiled = self.step(dec, m_us, pos);
        let ops = dec.take_op_times();
        dec.set_profiling(false)?;
        profiled?;
        let t = crate::bench::median(&v);
        let lat = attribute(c, t, &ops?, true).ok_or(ProfilerError::NoMatmulTime { rows: m })?;
        Ok((lat, t, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            n_layer: 2,
            d_model: 64,
            n_head: 2,
            n_kv_head: 1,
            head_dim: 32,
            d_ff: 128,
            vocab: 256,
            context: 64,
            rope_theta: 10000.0,
            rope_dims: 32,
            eps: 1e-5,
        }
    }

    fn op(kind: OpKind, seconds: f64) -> OpTime {
        OpTime {
            kind,
            launches: 2,
            seconds,
        }
    }

    /// Calls a step makes of each shape of [`config`]: q+o, k+v and gate+up 2 a layer, down
    /// 1 a layer (2 layers), the head once.
    fn calls(s: (u32, u32)) -> f64 {
        match s {
            (64, 64) | (64, 32) | (64, 128) => 4.0,
            (128, 64) => 2.0,
            _ => 1.0,
        }
    }

    /// By hand: q (64x64, 4096), k and v (64x32, 2048 each), o (64x64), gate/up (64x128), down
    /// (128x64), head (64x256). Device time: QkvRope 8 s, OProj 2, GateUpSwiglu 6, Down 4,
    /// Head 4, attention 6 (no matmul): matmul time A = 24. Shares of 8 s of QkvRope by k·n:
    /// q 4, k 2, v 2. Per shape (k, n): (64,64) q+o = 6; (64,32) k+v = 4; (64,128) gate+up
    /// = 6; (128,64) down = 4; (64,256) head = 4. Step 48 µs = 2x A: each shape gets twice
    /// its device time, divided by its calls (q/o: 2 layers x 2 = 4; k/v 4; gate/up 4; down
    /// 2; head 1).
    #[test]
    fn attribution_by_hand() {
        let c = config();
        let ops = [
            op(OpKind::QkvRope, 8.0),
            op(OpKind::OProj, 2.0),
            op(OpKind::GateUpSwiglu, 6.0),
            op(OpKind::Down, 4.0),
            op(OpKind::Head, 4.0),
            op(OpKind::Attention, 6.0),
        ];
        let got = attribute(&c, 48.0, &ops, true).expect("attributed");
        let want = [
            ((64, 64), 2.0 * 6.0 / 4.0),
            ((64, 32), 2.0 * 4.0 / 4.0),
            ((64, 128), 2.0 * 6.0 / 4.0),
            ((128, 64), 2.0 * 4.0 / 2.0),
            ((64, 256), 2.0 * 4.0 / 1.0),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (s, us) in want {
            let g = got.iter().find(|e| e.0 == s).expect("shape").1;
            assert!((g - us).abs() < 1e-12, "{s:?}: {g} vs {us}");
        }
        // The latencies of one step add up to the step.
        let sum: f64 = got.iter().map(|&(s, us)| calls(s) * us).sum();
        assert!((sum - 48.0).abs() < 1e-9, "{sum}");
    }

    /// Decode blocks: block A holds q, k, v, o; block B gate, up, down; the final sum is
    /// spread. Without the head, the head gets nothing and the layers the whole step.
    #[test]
    fn attribution_of_blocks_without_head() {
        let c = config();
        let ops = [
            op(OpKind::BlockAttn, 12.0),
            op(OpKind::BlockFfn, 10.0),
            op(OpKind::BlockFinish, 1.0),
            op(OpKind::Embed, 1.0),
        ];
        let got = attribute(&c, 22.0, &ops, false).expect("attributed");
        assert!(got.iter().all(|e| e.0 != (64, 256)), "{got:?}");
        // Block A: q 4096, k 2048, v 2048, o 4096 of 12288: q+o get 8 s, k+v 4 s; block B:
        // gate+up 16384 of 24576 (6.67 s), down 3.33 s. A = 22 = step: unscaled.
        let get = |s| got.iter().find(|e| e.0 == s).expect("shape").1;
        assert!((get((64, 64)) - 8.0 / 4.0).abs() < 1e-12);
        assert!((get((64, 32)) - 4.0 / 4.0).abs() < 1e-12);
        assert!((get((64, 128)) - 10.0 * 2.0 / 3.0 / 4.0).abs() < 1e-12);
        assert!((get((128, 64)) - 10.0 / 3.0 / 2.0).abs() < 1e-12);
    }

    /// The persistent decode step (one launch a token): its time is shared by weight bytes
    /// over every matmul of every layer and the head, and the latencies sum to the step.
    #[test]
    fn attribution_of_the_persistent_step() {
        let c = config();
        let got = attribute(&c, 50.0, &[op(OpKind::Persistent, 5.0)], true).expect("attributed");
        // Bytes per step (k·n × calls): q+o 2·4096·2, k+v 2·2048·2, gate+up 2·8192·2, down
        // 8192·2, head 16384: 16384 + 8192 + 32768 + 16384 + 16384 = 90112.
        let get = |s| got.iter().find(|e| e.0 == s).expect("shape").1;
        let us = |bytes_per_call: f64| 50.0 * bytes_per_call / 90112.0;
        assert!((get((64, 64)) - us(4096.0)).abs() < 1e-9, "{got:?}");
        assert!((get((64, 32)) - us(2048.0)).abs() < 1e-9);
        assert!((get((64, 256)) - us(16384.0)).abs() < 1e-9);
        let sum: f64 = got.iter().map(|&(s, us)| calls(s) * us).sum();
        assert!((sum - 50.0).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn attribution_refuses_steps_without_matmul_time() {
        let c = config();
        assert!(attribute(&c, 10.0, &[op(OpKind::Attention, 1.0)], true).is_none());
        assert!(attribute(&c, 10.0, &[], true).is_none());
        assert!(attribute(&c, 0.0, &[op(OpKind::Down, 1.0)], true).is_none());
    }
}
