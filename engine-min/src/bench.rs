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
