//! `engine-min run`: compose the executor for the chosen plan, generate, report.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use super::{
    cpu_time, load_model, load_profile, plan_choice, Fail, LoadArgs, MachineArgs, ModelArg,
    Verbosity,
};
use crate::auto::{Decision, Mode, Workload};
use crate::compose::{ComposeOptions, GpuPath, PlanChoice};
use crate::engine::{Engine, EngineOptions};
use crate::limits::{EngineSize, MemoryBudget, Processors};
use crate::model::Model;
use crate::sample::{Sampler, SamplerOptions};

/// Rows of one matmul (prompt chunks).
pub const MAX_BATCH: usize = 128;

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The prompt.
    #[arg(long)]
    prompt: String,
    /// Most tokens to generate (0: only process the prompt).
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// Wrap the prompt in the model's ChatML template.
    #[arg(long)]
    chat: bool,
    /// Sampling temperature (0: greedy; finite, >= 0).
    #[arg(long, default_value_t = 0.0, value_parser = temperature, allow_negative_numbers = true)]
    temperature: f32,
    /// Nucleus sampling mass, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_parser = top_p, allow_negative_numbers = true)]
    top_p: f32,
    /// Seed of the sampler's RNG.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// KV-cache positions (at most the model's context length).
    #[arg(long, default_value_t = 2048, value_parser = super::at_least_one)]
    ctx: usize,
    /// The plan: auto (the planner's, needs --profile), cpu, gpu, cpu-gpu:R, npu, npu-gpu,
    /// npu-w:R, npu-gpu-w:R. Default: auto with --profile, else cpu.
    #[arg(long, value_parser = plan_choice)]
    plan: Option<PlanChoice>,
    /// A profile written by `engine-min profile` (or by hand) for `--plan auto`.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Write the raw logits of the prompt positions `--logits-at` as JSON (for comparing with
    /// other engines).
    #[arg(long, value_name = "FILE")]
    logits_out: Option<PathBuf>,
    /// Prompt positions whose logits `--logits-out` writes (negative: from the end).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "-1",
        allow_negative_numbers = true
    )]
    logits_at: Vec<i64>,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    load: LoadArgs,
}

fn temperature(s: &str) -> Result<f32, String> {
    let t: f32 = s
        .parse()
        .map_err(|e: std::num::ParseFloatError| e.to_string())?;
    if !t.is_finite() || t < 0.0 {
        return Err(format!("{s} is not a finite temperature >= 0"));
    }
    Ok(t)
}

fn top_p(s: &str) -> Result<f32, String> {
    let p: f32 = s
        .parse()
        .map_err(|e: std::num::ParseFloatError| e.to_string())?;
    if !(p > 0.0 && p <= 1.0) {
        return Err(format!("{s} is outside (0, 1]"));
    }
    Ok(p)
}

/// The composition options of `run`/`bench`/`perplexity` for one plan.
pub fn compose_options(
    plan: PlanChoice,
    profile: Option<&PathBuf>,
    machine: &MachineArgs,
    max_batch: usize,
    context: usize,
) -> Result<ComposeOptions, Fail> {
    let profile = profile.map(|f| load_profile(f)).transpose()?;
    if plan == PlanChoice::Auto && profile.is_none() {
        return Err(Fail::Usage(
            "--plan auto needs --profile FILE (write one with `engine-min profile`)".into(),
        ));
    }
    Ok(ComposeOptions {
        plan,
        profile,
        threads: machine.threads(),
        kernel: machine.kernel(),
        max_batch,
        npu: machine.npu()?,
        context,
        gpu_path: machine.gpu_path,
        kv: machine.kv_type,
        ..ComposeOptions::default()
    })
}

/// The processors besides the CPU that composing `opts` may open (an upper bound for `auto`:
/// what its profile lists).
fn planned_processors(opts: &ComposeOptions) -> Processors {
    let (gpu, npu) = match (opts.plan, &opts.profile) {
        (PlanChoice::Auto, Some(p)) => {
            let has = |b: &str| p.backends.iter().any(|x| x.backend.eq_ignore_ascii_case(b));
            (has("gpu"), has("npu"))
        }
        (plan, _) => plan.needs(),
    };
    // Under `auto` the NPU's graphs are the profile's standard lengths.
    let profile_seq = opts.profile.as_ref().and_then(|p| {
        p.backends
            .iter()
            .filter(|b| b.backend.eq_ignore_ascii_case("npu"))
            .flat_map(|b| b.standard_m.iter().map(|&m| m as usize))
            .max()
    });
    Processors {
        gpu,
        npu_seq: npu
            .then(|| profile_seq.or_else(|| opts.npu.lengths().next()))
            .flatten(),
    }
}

/// Refuses an engine of `ctx` positions under `opts` whose host buffers and scratch would not
/// fit in `budget`, before anything is composed (composing already sizes the backends' scratch
/// for `opts.max_batch` rows; `Engine::with_budget` checks again). A forced all-GPU plan on
/// the resident decoder keeps no buffers of that size on the host (the decoder checks its
/// device memory plan itself); under `auto` the host sizes are counted, an upper bound.
pub fn check_memory(
    model: &Model,
    opts: &ComposeOptions,
    ctx: usize,
    budget: &MemoryBudget,
) -> Result<(), Fail> {
    let resident = opts.plan == PlanChoice::Gpu && opts.gpu_path == GpuPath::Resident;
    let size = if resident {
        EngineSize {
            ctx: 1,
            max_batch: 1,
            threads: opts.threads,
            sequences: 1,
            processors: Processors::default(),
            kv: crate::kv::KvType::F32,
        }
    } else {
        EngineSize {
            ctx,
            max_batch: opts.max_batch,
            threads: opts.threads,
            sequences: 1,
            processors: planned_processors(opts),
            kv: opts.kv.unwrap_or_default(),
        }
    };
    size.check(budget, &model.config).map(drop).map_err(|e| {
        Fail::Run(format!(
            "{e} (for {ctx} positions and steps of up to {} rows; use smaller sizes or \
             --mem-limit)",
            opts.max_batch
        ))
    })
}

/// The engine of `ctx` positions for `model` under `opts`, within the memory `load` allows:
/// the budget checked before anything is composed ([`check_memory`]), then the executor, then
/// the engine. Also returns what composition noted (a processor the profile lists but this
/// machine lacks, ...) and what `auto` decided.
pub fn build_engine(
    model: &Arc<Model>,
    opts: &ComposeOptions,
    ctx: usize,
    load: &LoadArgs,
) -> Result<(Engine, Vec<String>, Option<Decision>), Fail> {
    let budget = load.engine_budget(model);
    check_memory(model, opts, ctx, &budget)?;
    let opts = ComposeOptions {
        prepared: load.prepared_cache(),
        ..opts.clone()
    };
    let composed = crate::compose::executor(model, &opts).map_err(Fail::run)?;
    // A stale cache rebuilt, an unwritable cache directory, a KV type the path does not hold:
    // said whatever the plan and command.
    for note in composed
        .exec
        .prepare_report()
        .notes
        .iter()
        .chain(&composed.notes)
    {
        let _ = writeln!(std::io::stderr(), "note: {note}");
    }
    let engine = Engine::with_budget(
        Arc::clone(model),
        composed.exec,
        EngineOptions {
            context: ctx,
            kv: composed.kv,
        },
        &budget,
    )
    .map_err(Fail::run)?;
    Ok((engine, composed.notes, composed.decision))
}

pub fn run(a: RunArgs, v: Verbosity, out: &mut dyn Write) -> Result<(), Fail> {
    let plan = a.plan.unwrap_or(if a.profile.is_some() {
        PlanChoice::Auto
    } else {
        PlanChoice::Cpu
    });
    let mut opts = compose_options(plan, a.profile.as_ref(), &a.machine, MAX_BATCH, a.ctx)?;
    // The output file first: a bad path must not cost the run.
    let mut logits_file = a
        .logits_out
        .as_ref()
        .map(|f| {
            std::fs::File::create(f)
                .map(|h| (f.clone(), h))
                .map_err(|e| Fail::Run(format!("cannot write {}: {e}", f.display())))
        })
        .transpose()?;
    let t_load = Instant::now();
    let model = Arc::new(load_model(&a.model.model, &a.load)?);
    step_done("model mapped", t_load.elapsed(), v);
    if a.ctx > model.config.context {
        return Err(Fail::Usage(format!(
            "--ctx {} exceeds the model's context length {}",
            a.ctx, model.config.context
        )));
    }
    let tok = &model.tokenizer;
    let text = if a.chat {
        tok.chat_prompt(&a.prompt)
            .ok_or_else(|| Fail::Run("--chat: the model has no ChatML chat template".into()))?
    } else {
        a.prompt.clone()
    };
    let ids = tok.encode_prompt(&text);
    if ids.is_empty() {
        return Err(Fail::Run("the prompt encodes to no tokens".into()));
    }
    if ids.len() + a.max_tokens.min(1) > a.ctx {
        return Err(Fail::Run(format!(
            "the prompt has {} tokens but the context holds {} (use --ctx, up to the model's {})",
            ids.len(),
            a.ctx,
            model.config.context
        )));
    }
    // `auto` weighs prefill and decode by what this run does.
    opts.workload = Workload {
        prompt: ids.len(),
        generate: a.max_tokens,
    };
    let t_build = Instant::now();
    let (mut engine, notes, decision) = build_engine(&model, &opts, a.ctx, &a.load)?;
    step_done(
        "engine built (weights prepared; OpenCL programs, NPU graphs where the plan uses them)",
        t_build.elapsed(),
        v,
    );
    let npu_stats = engine.executor().npu().map(|n| n.stats());
    let load = t_load.elapsed();
    if plan == PlanChoice::Auto && !v.detailed() {
        // By default: the decision in one sentence (what composing noted went to stderr).
        if let Some(d) = &decision {
            writeln!(out, "{}", d.summary)?;
        }
    }
    if plan == PlanChoice::Auto && v.detailed() {
        writeln!(
            out,
            "plan auto from {} (non-matmul ops run on the CPU pool):",
            a.profile
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        )?;
        for note in &notes {
            writeln!(out, "  note: {note}")?;
        }
        if let Some(d) = &decision {
            writeln!(out, "{}", d.summary)?;
            let far = d.plans.extrapolated().count();
            if let (Some(p), Mode::Table) = (d.plans.extrapolated().next(), d.mode) {
                let w = p.extrapolation.map(|w| w.to_string()).unwrap_or_default();
                writeln!(
                    out,
                    "  warning: {far} plans lean on extrapolated latencies, e.g. {w}"
                )?;
            }
        }
        describe_plan(&engine, &model, ids.len(), out)?;
    }
    let vocab = model.config.vocab;
    let mut logits = vec![0f32; vocab];
    let mut sampler = Sampler::new(
        vocab,
        SamplerOptions {
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed,
        },
    );
    let npu0 = npu_stats.as_ref().map(|s| s.npu_time());
    // Every prompt position's logits only when some are written out.
    let positions = match &a.logits_out {
        Some(_) => logits_positions(&a.logits_at, ids.len())?,
        None => Vec::new(),
    };
    let mut all = vec![
        0f32;
        if positions.is_empty() {
            0
        } else {
            ids.len() * vocab
        }
    ];
    let (t0, c0) = (Instant::now(), cpu_time());
    if all.is_empty() || ids.len() == 1 {
        engine.forward(&ids, &mut logits).map_err(Fail::run)?;
        let n = all.len();
        all.copy_from_slice(&logits[..n]);
    } else {
        engine.forward(&ids, &mut all).map_err(Fail::run)?;
        logits.copy_from_slice(&all[(ids.len() - 1) * vocab..]);
    }
    let prefill_npu = npu_stats
        .as_ref()
        .zip(npu0)
        .map(|(s, t)| s.npu_time().saturating_sub(t));
    // The engine's logits are finite (it fails otherwise); try_sample says so again for free.
    let mut next = sampler.try_sample(&logits).map_err(Fail::run)?;
    let ttft = t0.elapsed();
    if let Some(f) = logits_file.take() {
        write_logits(f, &a.model.model, &ids, &positions, &all, vocab)?;
    }
    let prefill_cpu = cpu_time().saturating_sub(c0);
    let prefill_t = engine.timings().clone();
    let prefill_kinds = engine.executor().times().snapshot();
    let prefill_pred = engine.executor().predictions();
    engine.reset_timings();

    let mut pending = Vec::new();
    let mut generated = 0usize;
    let mut stop = "max tokens";
    let mut decode_steps = 0usize;
    let (t_dec, c_dec) = (Instant::now(), cpu_time());
    while generated < a.max_tokens {
        if tok.eos == Some(next) || tok.is_control(next) {
            stop = "end of sequence";
            break;
        }
        generated += 1;
        tok.decode_token(next, false, &mut pending);
        flush_utf8(out, &mut pending, false)?;
        if generated >= a.max_tokens {
            break;
        }
        if engine.pos() + 1 > engine.context() {
            stop = "context full";
            break;
        }
        engine.forward(&[next], &mut logits).map_err(Fail::run)?;
        decode_steps += 1;
        next = sampler.try_sample(&logits).map_err(Fail::run)?;
    }
    flush_utf8(out, &mut pending, true)?;
    let decode = t_dec.elapsed();
    let decode_cpu = cpu_time().saturating_sub(c_dec);
    let decode_t = engine.timings().clone();
    let decode_kinds = engine.executor().times().snapshot();
    let decode_pred = engine.executor().predictions();
    writeln!(out)?;
    let shares: Vec<(&str, String)> = [
        ("prefill", &prefill_t, &prefill_kinds),
        ("decode", &decode_t, &decode_kinds),
    ]
    .into_iter()
    .filter_map(|(phase, t, kinds)| time_share(t, kinds).map(|s| (phase, s)))
    .collect();
    if !v.detailed() {
        // The three-line report: speed, latency, where the time went.
        let decode_speed = if generated > 1 {
            format!(
                "decode: {:.1} tok/s ({} steps)",
                (generated - 1) as f64 / decode.as_secs_f64(),
                generated - 1
            )
        } else {
            "decode: n/a (no decode step)".into()
        };
        writeln!(
            out,
            "prefill: {:.1} tok/s ({} tokens); {decode_speed}",
            ids.len() as f64 / ttft.as_secs_f64(),
            ids.len()
        )?;
        writeln!(out, "time to first token: {:.1} ms", ms(ttft))?;
        let shares: Vec<String> = shares.iter().map(|(p, s)| format!("{p} {s}")).collect();
        writeln!(out, "time share: {}", shares.join("; "))?;
        return Ok(());
    }
    writeln!(out, "---")?;
    writeln!(
        out,
        "model: {} layers, width {}, vocab {}; load {:.0} ms ({}); plan {plan}; {} thread(s), cpu kernel {}; processors: {}",
        model.config.n_layer,
        model.config.d_model,
        vocab,
        ms(load),
        if model.file().is_mapped() {
            "mapped"
        } else {
            "read into memory"
        },
        a.machine.threads(),
        a.machine.kernel().name(),
        engine.executor().backend_names()
    )?;
    writeln!(
        out,
        "prompt: {} tokens; generated: {generated} tokens (stop: {stop})",
        ids.len()
    )?;
    writeln!(out, "time to first token: {:.1} ms", ms(ttft))?;
    // CPU seconds next to wall seconds: on a shared machine wall time includes waiting for
    // a core; tokens per CPU-second says what the code costs.
    writeln!(
        out,
        "prefill: {:.1} tok/s (wall); {:.1} tok per CPU-second",
        ids.len() as f64 / ttft.as_secs_f64(),
        ids.len() as f64 / prefill_cpu.as_secs_f64().max(1e-9)
    )?;
    // Decode steps: one forward per generated token after the first.
    if generated > 1 {
        writeln!(
            out,
            "decode: {:.1} tok/s (wall, {} steps); {:.1} tok per CPU-second",
            (generated - 1) as f64 / decode.as_secs_f64(),
            generated - 1,
            (generated - 1) as f64 / decode_cpu.as_secs_f64().max(1e-9)
        )?;
    } else {
        writeln!(out, "decode: n/a (no decode step)")?;
    }
    for (phase, share) in &shares {
        writeln!(out, "{phase} time share: {share}")?;
    }
    if let Some(d) = &decision {
        let steps = decode_steps;
        match (&d.mode, &d.resident) {
            (Mode::Resident, Some((r, _))) => {
                let pre: f64 = crate::auto::chunks(ids.len(), MAX_BATCH as u32)
                    .map(|(m, last)| r.step_us(m, last).unwrap_or(f64::NAN))
                    .sum();
                let dec = steps as f64 * r.step_us(1, true).unwrap_or(f64::NAN);
                writeln!(out, "predicted vs measured (gpu resident steps):")?;
                for (phase, p, t) in [
                    ("prefill", pre, prefill_t.resident),
                    ("decode", dec, decode_t.resident),
                ] {
                    let m = t.as_secs_f64() * 1e6;
                    if m > 0.0 {
                        writeln!(
                            out,
                            "  {phase}: predicted {p:.1} us, measured {m:.1} us ({:+.1}%)",
                            (p - m) / m * 100.0
                        )?;
                    }
                }
            }
            _ => {
                // Per op class, under the phase whose curves planned it (the prefill's
                // one-row LM head is the decode curves').
                let preds = crate::planning::merge_predictions(&[&prefill_pred, &decode_pred]);
                for line in crate::planning::prediction_lines(&model.config, &preds) {
                    writeln!(out, "{line}")?;
                }
            }
        }
    }
    if let (Some(s), Some(npu)) = (&npu_stats, prefill_npu) {
        // Simulator time: the x86 HTP simulator, not the speed of an NPU.
        writeln!(
            out,
            "npu: {} weights with graphs (one per standard length) prepared in {:.0} ms (build + finalize); NPU share \
             of prefill matmul time {:.1}% (simulated)",
            s.graphs(),
            ms(s.prepare_time()),
            pct(npu, prefill_t.matmul.max(Duration::from_nanos(1)))
        )?;
    }
    if v.0 >= 2 {
        // Where the process's resident memory is (a driver's host images show up here).
        for line in largest_mappings(6) {
            writeln!(out, "memory: {line}")?;
        }
    }
    Ok(())
}

/// `gpu matmul 99.3% (211), cpu host ops 0.7%` (share of the phase's time, calls) for one
/// phase's timings; `None` when the phase ran nothing.
fn time_share(
    t: &crate::engine::Timings,
    kinds: &[(crate::exec::Kind, Duration, u64)],
) -> Option<String> {
    let total = t.matmul + t.host.total() + t.resident;
    if total.is_zero() {
        return None;
    }
    let mut parts = Vec::new();
    if !t.resident.is_zero() {
        parts.push(format!("gpu resident steps {:.1}%", pct(t.resident, total)));
    }
    for (kind, d, calls) in kinds {
        parts.push(format!(
            "{} matmul {:.1}% ({calls})",
            kind.name(),
            pct(*d, total)
        ));
    }
    parts.push(format!("cpu host ops {:.1}%", pct(t.host.total(), total)));
    Some(parts.join(", "))
}

/// Resolves `--logits-at` against a prompt of `n` tokens.
fn logits_positions(at: &[i64], n: usize) -> Result<Vec<usize>, Fail> {
    at.iter()
        .map(|&p| {
            let q = if p < 0 { n as i64 + p } else { p };
            usize::try_from(q).ok().filter(|&q| q < n).ok_or_else(|| {
                Fail::Usage(format!(
                    "--logits-at {p} is outside the prompt's {n} positions"
                ))
            })
        })
        .collect()
}

/// Writes `{"model", "tokens", "positions": [{"pos", "token", "logits"}]}`.
fn write_logits(
    (file, mut handle): (PathBuf, std::fs::File),
    model: &std::path::Path,
    ids: &[u32],
    positions: &[usize],
    all: &[f32],
    vocab: usize,
) -> Result<(), Fail> {
    let rows: Vec<serde_json::Value> = positions
        .iter()
        .map(|&p| {
            serde_json::json!({
                "pos": p,
                "token": ids[p],
                "logits": &all[p * vocab..(p + 1) * vocab],
            })
        })
        .collect();
    let v = serde_json::json!({
        "model": model.display().to_string(),
        "tokens": ids,
        "positions": rows,
    });
    let text = serde_json::to_string(&v).map_err(Fail::run)?;
    handle
        .write_all(text.as_bytes())
        .map_err(|e| Fail::Run(format!("cannot write {}: {e}", file.display())))
}

/// Prints the plan the engine runs for a prompt of `prompt` tokens and for decode.
fn describe_plan(
    engine: &Engine,
    model: &Model,
    prompt: usize,
    out: &mut dyn Write,
) -> Result<(), Fail> {
    let shapes: Vec<(&str, usize, usize)> = crate::planning::model_shapes(&model.config)
        .into_iter()
        .map(|(name, k, n)| (name, k as usize, n as usize))
        .collect();
    let pm = prompt.min(engine.executor().max_m());
    for (phase, m) in [("prefill", pm), ("decode", 1)] {
        writeln!(out, "  {phase} (m = {m}):")?;
        for line in engine.executor().describe(&shapes, m) {
            writeln!(out, "    {line}")?;
        }
    }
    Ok(())
}

/// A start-up step on stderr once it is done: every step at `-v`, else those of a second or
/// more (so no long wait passes silently, and a quick start prints nothing).
fn step_done(what: &str, took: Duration, v: Verbosity) {
    if v.detailed() || took >= Duration::from_secs(1) {
        let _ = writeln!(std::io::stderr(), "{what} in {:.1} s", took.as_secs_f64());
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(d: Duration, total: Duration) -> f64 {
    100.0 * d.as_secs_f64() / total.as_secs_f64()
}

/// Writes the valid UTF-8 prefix of `pending` (all of it, lossily, when `all`).
fn flush_utf8(out: &mut dyn Write, pending: &mut Vec<u8>, all: bool) -> std::io::Result<()> {
    let n = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(e) if e.error_len().is_some() || all => pending.len(),
        Err(e) => e.valid_up_to(),
    };
    out.write_all(String::from_utf8_lossy(&pending[..n]).as_bytes())?;
    out.flush()?;
    pending.drain(..n);
    Ok(())
}

/// The `n` mappings of this process holding the most resident memory (`/proc/self/smaps`), as
/// "<rss> MiB <what>" lines, largest first; none where the file cannot be read (not Linux).
fn largest_mappings(n: usize) -> Vec<String> {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return Vec::new();
    };
    let mut maps: Vec<(u64, String)> = Vec::new();
    let mut name = String::new();
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, perms, offset, dev, inode, [path].
            let path = line.split_whitespace().nth(5).unwrap_or("[anonymous]");
            name = format!("{first} {path}");
        } else if first == "Rss:" {
            let kib = f.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            maps.push((kib, name.clone()));
        }
    }
    maps.sort_by_key(|m| std::cmp::Reverse(m.0));
    maps.into_iter()
        .take(n)
        .map(|(kib, what)| format!("{:.1} MiB {what}", kib as f64 / 1024.0))
        .collect()
}
