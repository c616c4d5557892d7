//! `engine-min bench`: prompt-processing and text-generation throughput measured the way
//! llama.cpp's `llama-bench` does (`pp N`: one forward over N prompt tokens from an empty
//! cache; `tg N`: N single-token forwards from an empty cache), so the two can be run side by
//! side on the same model and thread count. Tokens are drawn from a seeded generator: the
//! throughput does not depend on which tokens they are.

use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineError, HostTimes};

/// Throughput of repeated runs (tokens per second, one entry per repetition).
#[derive(Clone, Debug, Default)]
pub struct PpTg {
    /// Prompt processing: `pp` tokens in one forward.
    pub pp: Vec<f64>,
    /// Text generation: `tg` one-token forwards.
    pub tg: Vec<f64>,
}

/// The median of `v` (0 for an empty slice).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Where the time of one phase went.
#[derive(Clone, Debug, Default)]
pub struct PhaseBreakdown {
    /// Tokens processed.
    pub tokens: usize,
    /// Forward calls (each runs every layer once).
    pub steps: usize,
    /// Wall time of the phase.
    pub wall: Duration,
    /// Matmul time per weight shape `((k, n), time, calls)`.
    pub matmuls: Vec<((usize, usize), Duration, u64)>,
    /// Host op times.
    pub host: HostTimes,
    /// Matmul time in all.
    pub matmul: Duration,
    /// CPU pool jobs that woke workers ([`hetero_sme::ThreadPool::dispatches`]).
    pub dispatches: u64,
}

/// Token ids below `vocab` from a seeded xorshift64*: any token id will do, and the same seed
/// gives the same tokens.
fn token_stream(vocab: usize, seed: u64) -> impl FnMut() -> u32 {
    let vocab = (vocab as u64).max(1);
    let mut state = seed | 1;
    move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) % vocab) as u32
    }
}

/// Runs one `pp` forward and `tg` one-token forwards (from empty caches) with the engine's
/// clocks on and returns where each phase's time went.
pub fn breakdown(
    engine: &mut Engine,
    pp: usize,
    tg: usize,
    seed: u64,
) -> Result<(PhaseBreakdown, PhaseBreakdown), EngineError> {
    let mut next_token = token_stream(engine.model().config.vocab, seed);
    let mut logits = vec![0f32; engine.model().config.vocab];
    let mut phase =
        |engine: &mut Engine, steps: &[Vec<u32>]| -> Result<PhaseBreakdown, EngineError> {
            engine.reset();
            engine.reset_timings();
            let jobs0 = engine.executor().cpu().pool().dispatches();
            let t0 = Instant::now();
            for s in steps {
                engine.forward(s, &mut logits)?;
            }
            let t = engine.timings().clone();
            Ok(PhaseBreakdown {
                tokens: steps.iter().map(Vec::len).sum(),
                steps: steps.len(),
                wall: t0.elapsed(),
                matmuls: engine.executor().shape_times(),
                host: t.host,
                matmul: t.matmul,
                dispatches: engine.executor().cpu().pool().dispatches() - jobs0,
            })
        };
    let prompt: Vec<Vec<u32>> = vec![(0..pp).map(|_| next_token()).collect()];
    let pp_b = if pp > 0 {
        phase(engine, &prompt)?
    } else {
        PhaseBreakdown::default()
    };
    let gen: Vec<Vec<u32>> = (0..tg).map(|_| vec![next_token()]).collect();
    let tg_b = if tg > 0 {
        phase(engine, &gen)?
    } else {
        PhaseBreakdown::default()
    };
    Ok((pp_b, tg_b))
}

/// One op kind of the resident GPU decoder over a phase: its launches, device time and the
/// least bytes and FLOPs it must move and compute ([`Decoder::op_costs`]).
///
/// [`Decoder::op_costs`]: hetero_opencl_kernels::decoder::Decoder::op_costs
#[derive(Clone, Debug)]
pub struct GpuOpLine {
    /// The op kind.
    pub kind: hetero_opencl_kernels::decoder::OpKind,
    /// Launches over the phase.
    pub launches: usize,
    /// Device time over the phase (profiling events).
    pub seconds: f64,
    /// Least bytes over the phase.
    pub bytes: u64,
    /// FLOPs over the phase.
    pub flops: u64,
}

/// Where a phase's time went on the resident GPU decoder.
#[derive(Clone, Debug, Default)]
pub struct GpuPhase {
    /// Tokens processed.
    pub tokens: usize,
    /// Host wall time of the phase.
    pub wall: Duration,
    /// Per op kind, sorted by kind.
    pub ops: Vec<GpuOpLine>,
}

/// [`breakdown`] for an engine whose executor runs whole steps on the resident GPU decoder
/// opened with profiling: per op kind device time, launches, least bytes and FLOPs, for one
/// `pp` forward and `tg` one-token forwards from empty caches. `Ok(None)` when the engine has
/// no resident decoder; an error when its device was opened without profiling.
pub fn gpu_breakdown(
    engine: &mut Engine,
    pp: usize,
    tg: usize,
    seed: u64,
) -> Result<Option<(GpuPhase, GpuPhase)>, EngineError> {
    use hetero_opencl_kernels::decoder::OpCost;
    let Some(dec) = engine.resident_decoder() else {
        return Ok(None);
    };
    let backend = |e: hetero_opencl_kernels::Error| {
        EngineError::Backend(crate::backend::BackendError::from(e))
    };
    dec.set_profiling(true).map_err(backend)?;
    let mut next_token = token_stream(engine.model().config.vocab, seed);
    let mut logits = vec![0f32; engine.model().config.vocab];
    let mut phase = |engine: &mut Engine, steps: &[Vec<u32>]| -> Result<GpuPhase, EngineError> {
        engine.reset();
        let dec = engine
            .resident_decoder()
            .ok_or(EngineError::Backend(crate::backend::BackendError::Resident))?;
        dec.take_op_times().map_err(backend)?;
        let t0 = Instant::now();
        for s in steps {
            engine.forward(s, &mut logits)?;
        }
        let wall = t0.elapsed();
        let dec = engine
            .resident_decoder()
            .ok_or(EngineError::Backend(crate::backend::BackendError::Resident))?;
        let times = dec.take_op_times().map_err(backend)?;
        let mut costs: Vec<OpCost> = Vec::new();
        let mut pos = 0;
        for s in steps {
            for c in dec
                .op_costs(s.len(), pos + s.len() - 1, false)
                .map_err(backend)?
            {
                match costs.iter_mut().find(|o| o.kind == c.kind) {
                    Some(o) => {
                        o.bytes += c.bytes;
                        o.flops += c.flops;
                    }
                    None => costs.push(c),
                }
            }
            pos += s.len();
        }
        let ops = times
            .iter()
            .map(|t| {
                let c = costs.iter().find(|c| c.kind == t.kind);
                GpuOpLine {
                    kind: t.kind,
                    launches: t.launches,
                    seconds: t.seconds,
                    bytes: c.map_or(0, |c| c.bytes),
                    flops: c.map_or(0, |c| c.flops),
                }
            })
            .collect();
        Ok(GpuPhase {
            tokens: steps.iter().map(Vec::len).sum(),
            wall,
            ops,
        })
    };
    let prompt: Vec<Vec<u32>> = vec![(0..pp).map(|_| next_token()).collect()];
    let pp_b = if pp > 0 {
        phase(engine, &prompt)?
    } else {
        GpuPhase::default()
    };
    let gen: Vec<Vec<u32>> = (0..tg).map(|_| vec![next_token()]).collect();
    let tg_b = if tg > 0 {
        phase(engine, &gen)?
    } else {
        GpuPhase::default()
    };
    if let Some(dec) = engine.resident_decoder() {
        dec.set_profiling(false).map_err(backend)?;
    }
    Ok(Some((pp_b, tg_b)))
}

/// The two parts of a bench repetition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Prompt processing (`pp` tokens in one forward).
    Pp,
    /// Text generation (`tg` one-token forwards).
    Tg,
}

/// Runs `reps` repetitions of `pp` then `tg` (after one untimed warm-up of each) and returns
/// the tokens per second of each timed repetition. `pp` or `tg` may be 0 to skip that part.
pub fn pp_tg(
    engine: &mut Engine,
    pp: usize,
    tg: usize,
    reps: usize,
    seed: u64,
) -> Result<PpTg, EngineError> {
    pp_tg_observed(engine, pp, tg, reps, seed, &mut |_, _, _| {})
}

/// [`pp_tg`], calling `observe(engine, part, wall time)` after each timed part; the engine's
/// timings (and its executor's, predictions included) hold that part alone.
pub fn pp_tg_observed(
    engine: &mut Engine,
    pp: usize,
    tg: usize,
    reps: usize,
    seed: u64,
    observe: &mut dyn FnMut(&Engine, Part, Duration),
) -> Result<PpTg, EngineError> {
    let mut next_token = token_stream(engine.model().config.vocab, seed);
    let mut logits = vec![0f32; engine.model().config.vocab];
    let prompt: Vec<u32> = (0..pp).map(|_| next_token()).collect();
    let mut out = PpTg::default();
    for rep in 0..=reps {
        if pp > 0 {
            engine.reset();
            engine.reset_timings();
            let t0 = Instant::now();
            engine.forward(&prompt, &mut logits)?;
            let dt = t0.elapsed();
            if rep > 0 {
                out.pp.push(pp as f64 / secs(dt));
                observe(engine, Part::Pp, dt);
            }
        }
        if tg > 0 {
            engine.reset();
            engine.reset_timings();
            let t0 = Instant::now();
            for _ in 0..tg {
                let t = next_token();
                engine.forward(&[t], &mut logits)?;
            }
            let dt = t0.elapsed();
            if rep > 0 {
                out.tg.push(tg as f64 / secs(dt));
                observe(engine, Part::Tg, dt);
            }
        }
    }
    Ok(out)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}
