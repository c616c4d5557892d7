//! `engine-min bench`: llama-bench's pp N / tg N on any plan, medians.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::{load_model, plan_choice, Fail, LoadArgs, MachineArgs, ModelArg};
use crate::bench::Part;
use crate::compose::PlanChoice;
use crate::engine::Engine;
use hetero_partition::ErrorStats;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Prompt tokens of the pp test (0: skip it).
    #[arg(long, default_value_t = 128)]
    pp: usize,
    /// Generated tokens of the tg test (0: skip it).
    #[arg(long, default_value_t = 64)]
    tg: usize,
    /// KV-cache positions (default: the longer test's tokens + 1; at least that): a context
    /// the memory cannot hold is refused with the sizes, before anything is uploaded.
    #[arg(long)]
    ctx: Option<usize>,
    /// Most prompt rows of one step (llama-bench's n_ubatch): a longer prompt runs in chunks
    /// of this many, attending to the cache the earlier ones filled.
    #[arg(long, default_value_t = 512, value_parser = super::at_least_one)]
    ubatch: usize,
    /// Timed repetitions (after one warm-up).
    #[arg(long, default_value_t = 5, value_parser = super::at_least_one)]
    reps: usize,
    /// The plan (any `run` plan; auto needs --profile).
    #[arg(long, value_parser = plan_choice, default_value = "cpu")]
    plan: PlanChoice,
    /// A profile for `--plan auto`.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// After the timed runs, one more of each phase with the clocks on: time per matmul shape,
    /// per host op, and the thread pool's dispatch cost.
    #[arg(long)]
    breakdown: bool,
    /// With `--profile`: in every timed repetition, each op class's (weight shape's and
    /// phase's) predicted matmul time against the measured one (the whole resident step when
    /// the plan runs on the resident GPU decoder); prints the median and worst relative error
    /// per class, and their spread over the classes. Plans: `auto`, and the forced resident
    /// `gpu` plan (predicted from the profile's resident paths); other forced plans run
    /// nominal per-op tables and are refused with a message.
    #[arg(long)]
    predict: bool,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    load: LoadArgs,
}

pub fn bench(a: BenchArgs, v: super::Verbosity, out: &mut dyn Write) -> Result<(), Fail> {
    // Start-to-first-token is timed from here: the command's start, after argument parsing.
    let start = std::time::Instant::now();
    // The prompt in chunks of at most --ubatch rows, as llama-bench processes it (its default
    // n_ubatch is 512).
    let max_batch = a.pp.clamp(1, a.ubatch);
    let ctx = a.ctx.unwrap_or(0).max(a.pp.max(a.tg) + 1);
    let mut opts =
        super::run::compose_options(a.plan, a.profile.as_ref(), &a.machine, max_batch, ctx)?;
    let resident_forced =
        a.plan == PlanChoice::Gpu && a.machine.gpu_path == crate::compose::GpuPath::Resident;
    if a.predict {
        if opts.profile.is_none() {
            return Err(Fail::Usage(
                "--predict needs --profile FILE (the measured curves it predicts from)".into(),
            ));
        }
        if a.plan != PlanChoice::Auto && !resident_forced {
            return Err(Fail::Usage(format!(
                "--predict on --plan {}: a forced per-op plan runs nominal tables, not the \
                 profile's (nothing to compare); --plan auto predicts per op, and --plan gpu \
                 (resident) predicts whole steps",
                a.plan
            )));
        }
    }
    opts.workload = crate::auto::Workload {
        prompt: a.pp,
        generate: a.tg,
    };
    // A profiling queue for the resident GPU decoder's per-op device times.
    opts.gpu_profiling = a.breakdown;
    let model = Arc::new(load_model(&a.model.model, &a.load)?);
    // Each test runs from an empty cache: its tokens must fit in the model's context.
    let context = model.config.context;
    for (flag, n) in [("--pp", a.pp), ("--tg", a.tg)] {
        if n > context {
            return Err(Fail::Usage(format!(
                "{flag} {n} exceeds the model's context length {context}"
            )));
        }
    }
    if let Some(c) = a.ctx.filter(|&c| c > context) {
        return Err(Fail::Usage(format!(
            "--ctx {c} exceeds the model's context length {context}"
        )));
    }
    let ctx = ctx.min(context);
    let loaded = start.elapsed();
    let (mut engine, _, decision) = super::run::build_engine(&model, &opts, ctx, &a.load)?;
    let built = start.elapsed();
    // The forced resident plan's prediction: the profile's resident paths, as `auto` reads them.
    let forced = match (a.predict && resident_forced, &opts.profile) {
        (true, Some(p)) => {
            let view = crate::auto::views(p).resident.ok_or_else(|| {
                Fail::Usage(
                    "--predict on --plan gpu: the profile has no gpu resident paths (measure \
                     one with a usable GPU)"
                        .into(),
                )
            })?;
            let r = crate::auto::ResidentModel::new(&view, crate::auto::StepShapes::of(&model))
                .map_err(Fail::run)?;
            Some(r)
        }
        _ => None,
    };
    // The first token: one step from an empty cache on the mapped (or read) file, weights
    // touched for the first time (the page faults and the GPU's first launches included).
    let first = {
        let mut logits = vec![0f32; model.config.vocab];
        engine.forward(&[0], &mut logits).map_err(Fail::run)?;
        engine.reset();
        start.elapsed()
    };
    let mut errors = PredictionErrors::default();
    let r = crate::bench::pp_tg_observed(
        &mut engine,
        a.pp,
        a.tg,
        a.reps,
        0x5eed,
        &mut |e, part, _| {
            if !a.predict {
                return;
            }
            let resident = match (&forced, &decision) {
                (Some(r), _) => Some(r),
                (None, Some(d)) if d.mode == crate::auto::Mode::Resident => {
                    d.resident.as_ref().map(|(r, _)| r)
                }
                _ => None,
            };
            if forced.is_some() || decision.is_some() {
                errors.observe(e, resident, part, a.pp, a.tg, max_batch as u32);
            }
        },
    )
    .map_err(Fail::run)?;
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if v.detailed() {
        writeln!(
            out,
            "engine-min bench: plan {}, cpu kernel {}, {} thread(s), {} reps; processors: {}",
            a.plan,
            a.machine.kernel().name(),
            a.machine.threads(),
            a.reps,
            engine.executor().backend_names()
        )?;
    }
    if let Some(d) = &decision {
        writeln!(out, "{}", d.summary)?;
    }
    let device = engine.executor().resident_memory();
    print_startup(
        out,
        loaded,
        built,
        first,
        device,
        engine.executor().prepare_report(),
    )?;
    if let Some(t) = engine.executor().resident_build_times() {
        writeln!(out, "{}", gpu_build_line(&t))?;
    }
    writeln!(
        out,
        "kv cache: {} ({:.1} MiB on the host for {} positions)",
        engine.kv_type(),
        engine.kv_bytes() as f64 / (1u64 << 20) as f64,
        engine.context()
    )?;
    if a.pp > 0 {
        let med = crate::bench::median(&r.pp);
        writeln!(out, "pp{}: {med:.1} tok/s median ({})", a.pp, show(&r.pp))?;
    }
    if a.tg > 0 {
        let med = crate::bench::median(&r.tg);
        writeln!(out, "tg{}: {med:.1} tok/s median ({})", a.tg, show(&r.tg))?;
    }
    if a.predict {
        errors.print(out, a.reps)?;
    }
    if a.breakdown {
        if let Some((pp, tg)) =
            crate::bench::gpu_breakdown(&mut engine, a.pp, a.tg, 0x5eed).map_err(Fail::run)?
        {
            let limits = gpu_limits(&mut engine);
            for (name, b) in [("pp", &pp), ("tg", &tg)] {
                if b.tokens > 0 {
                    print_gpu_breakdown(out, name, b, limits)?;
                }
            }
            return Ok(());
        }
        let (pp, tg) =
            crate::bench::breakdown(&mut engine, a.pp, a.tg, 0x5eed).map_err(Fail::run)?;
        let dispatch = dispatch_us(engine.executor().cpu().pool());
        for (name, b) in [("pp", &pp), ("tg", &tg)] {
            if b.tokens > 0 {
                print_breakdown(out, name, b, dispatch)?;
            }
        }
    }
    Ok(())
}

/// The resident decoder's device limits measured now: copy bandwidth (bytes read + written per
/// second, 256 MiB buffers) and the FP32 FMA rate of an OpenCL kernel (FLOP/s); 0 where a
/// measurement failed.
fn gpu_limits(engine: &mut crate::engine::Engine) -> (f64, f64) {
    let Some(dec) = engine.resident_decoder() else {
        return (0.0, 0.0);
    };
    let dev = dec.device().clone();
    let copy = hetero_opencl_kernels::caps::copy_bandwidth(&dev, 256 << 20, 9).unwrap_or(0.0);
    let fma = hetero_opencl_kernels::caps::fp32_fma_rate(&dev, 4096, 5).unwrap_or(0.0);
    (copy, fma)
}

/// Per op kind of the resident GPU decoder: launches and device time per token, share, least
/// bytes and FLOPs, and their rates against the limits measured in the same run.
fn print_gpu_breakdown(
    out: &mut dyn Write,
    name: &str,
    b: &crate::bench::GpuPhase,
    (copy, fma): (f64, f64),
) -> Result<(), Fail> {
    let wall = b.wall.as_secs_f64();
    let busy: f64 = b.ops.iter().map(|o| o.seconds).sum();
    let launches: usize = b.ops.iter().map(|o| o.launches).sum();
    let tok = b.tokens as f64;
    writeln!(
        out,
        "gpu breakdown {name} ({} tokens, {:.1} us/token wall, {:.1} launches/token, device busy {:.0}%; limits measured now: copy {:.0} GB/s, FP32 FMA {:.1} TFLOP/s):",
        b.tokens,
        wall * 1e6 / tok,
        launches as f64 / tok,
        100.0 * busy / wall.max(1e-12),
        copy / 1e9,
        fma / 1e12
    )?;
    for o in &b.ops {
        let (gbs, tfs) = (
            o.bytes as f64 / o.seconds.max(1e-12),
            o.flops as f64 / o.seconds.max(1e-12),
        );
        let frac = |v: f64, of: f64| {
            if of > 0.0 {
                format!("{:.2}", v / of)
            } else {
                "-".into()
            }
        };
        writeln!(
            out,
            "  {:<20} {:>6.1} launches/token {:>9.1} us/token {:>5.1}%  {:>8.1} GB/s ({} of copy) {:>7.2} TFLOP/s ({} of FMA)",
            o.kind.name(),
            o.launches as f64 / tok,
            o.seconds * 1e6 / tok,
            100.0 * o.seconds / busy.max(1e-12),
            gbs / 1e9,
            frac(gbs, copy),
            tfs / 1e12,
            frac(tfs, fma)
        )?;
    }
    Ok(())
}

/// The start-up figures: time from the command's start to the model loaded, the engine built
/// and the first token's logits; the process's peak resident memory; and the device memory the
/// resident GPU decoder allocated (computed before allocation, checked against the device).
fn print_startup(
    out: &mut dyn Write,
    loaded: std::time::Duration,
    built: std::time::Duration,
    first: std::time::Duration,
    device: Option<hetero_opencl_kernels::decoder::MemoryPlan>,
    prep: &crate::backend::PrepareReport,
) -> Result<(), Fail> {
    use crate::prepared::Outcome;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    // Which start this was: warm (the cache file mapped), cold (packed, and the cache written
    // for the next start) or neither (packed in memory).
    let prepared = match &prep.outcome {
        None => String::new(),
        Some(o) => {
            let what = match o {
                Outcome::Mapped(_) => format!(
                    "warm cache (mapped, checksums verified in {:.3} s)",
                    prep.checking.as_secs_f64()
                ),
                Outcome::Written(_) => format!(
                    "cold cache (packed in {:.3} s, checksummed in {:.3} s, cache file written)",
                    prep.packing.as_secs_f64(),
                    prep.checking.as_secs_f64()
                ),
                Outcome::Memory => format!(
                    "no cache (packed in memory in {:.3} s)",
                    prep.packing.as_secs_f64()
                ),
            };
            format!(
                "; CPU weights prepared {:.1} MiB in {:.3} s: {what}",
                mib(prep.bytes as u64),
                prep.total.as_secs_f64()
            )
        }
    };
    writeln!(
        out,
        "startup: model loaded {:.3} s, engine built {:.3} s, first token {:.3} s from start; \
         peak RSS {:.1} MiB{prepared}",
        loaded.as_secs_f64(),
        built.as_secs_f64(),
        first.as_secs_f64(),
        mib(peak_rss_bytes())
    )?;
    if let Some(p) = device {
        writeln!(
            out,
            "gpu device memory: {:.1} MiB (weights {:.1}, kv cache {:.1}, scratch {:.1})",
            mib(p.total()),
            mib(p.weights),
            mib(p.kv_cache),
            mib(p.scratch)
        )?;
    }
    Ok(())
}

/// The resident decoder's build, step by step: the programs and the weights are prepared at
/// the same time (the total is about the longer of the two, not their sum); the re-lay and
/// write times are summed over the threads that ran them, so they can exceed the weights'
/// wall time.
pub(crate) fn gpu_build_line(t: &hetero_opencl_kernels::decoder::BuildTimes) -> String {
    format!(
        "gpu decoder built in {:.3} s: programs {:.3} s (ops {:.3}, attention {:.3}, matmuls \
         {:.3}, side by side), meanwhile weights {:.3} s on {} threads (re-laid {:.3} s, written \
         {:.3} s, summed over threads)",
        t.total.as_secs_f64(),
        t.programs.as_secs_f64(),
        t.program_builds[0].as_secs_f64(),
        t.program_builds[1].as_secs_f64(),
        t.program_builds[2].as_secs_f64(),
        t.weights.as_secs_f64(),
        t.threads,
        t.relayout.as_secs_f64(),
        t.upload.as_secs_f64()
    )
}

/// The process's peak resident set (getrusage's `ru_maxrss`, KiB on Linux), in bytes; 0 where
/// the call fails.
fn peak_rss_bytes() -> u64 {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one `rusage` through the valid pointer we pass.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    (ru.ru_maxrss.max(0) as u64) * 1024
}

/// Median round trip of an empty job on every pool thread, µs.
fn dispatch_us(pool: &hetero_sme::ThreadPool) -> f64 {
    let n = pool.threads();
    let mut v: Vec<f64> = (0..2000)
        .map(|_| {
            let t0 = std::time::Instant::now();
            pool.run(n, &|_, _| {});
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn print_breakdown(
    out: &mut dyn Write,
    name: &str,
    b: &crate::bench::PhaseBreakdown,
    dispatch_us: f64,
) -> Result<(), Fail> {
    let wall = b.wall.as_secs_f64() * 1e6;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / b.tokens as f64;
    let pct = |d: std::time::Duration| 100.0 * d.as_secs_f64() * 1e6 / wall;
    writeln!(
        out,
        "breakdown {name} ({} tokens, {:.1} us/token wall):",
        b.tokens,
        wall / b.tokens as f64
    )?;
    let mut calls = 0;
    for ((k, n), d, c) in &b.matmuls {
        calls += c;
        writeln!(
            out,
            "  matmul {k:>5}x{n:<6} {:>9.1} us/token {:>5.1}%  ({c} calls)",
            per(*d),
            pct(*d)
        )?;
    }
    for op in crate::engine::HostOp::ALL {
        let d = b.host.get(op);
        writeln!(
            out,
            "  {:<19} {:>9.1} us/token {:>5.1}%",
            op.name(),
            per(d),
            pct(d)
        )?;
    }
    let rest = b.wall.saturating_sub(b.matmul + b.host.total());
    writeln!(
        out,
        "  {:<19} {:>9.1} us/token {:>5.1}%",
        "other",
        per(rest),
        pct(rest)
    )?;
    // Counted by the pool: jobs that woke workers (fused Q/K/V and gate/up are one each).
    let jobs = b.dispatches as f64;
    writeln!(
        out,
        "  pool dispatch: {dispatch_us:.2} us per empty job; {:.0} jobs/token ({calls} matmuls in all) => ~{:.1} us/token",
        jobs / b.tokens as f64,
        dispatch_us * jobs / b.tokens as f64
    )?;
    Ok(())
}

/// Relative prediction errors per op class, one per timed repetition.
#[derive(Default)]
struct PredictionErrors {
    /// `(part, class label, signed relative errors)`.
    classes: Vec<(Part, String, Vec<f64>)>,
}

impl PredictionErrors {
    fn push(&mut self, part: Part, label: String, err: f64) {
        match self
            .classes
            .iter_mut()
            .find(|c| c.0 == part && c.1 == label)
        {
            Some(c) => c.2.push(err),
            None => self.classes.push((part, label, vec![err])),
        }
    }

    /// Records one timed part of `engine`: against the resident decoder's model `resident`
    /// when the plan runs on it, else against the executor's per-op tables.
    fn observe(
        &mut self,
        engine: &Engine,
        resident: Option<&crate::auto::ResidentModel>,
        part: Part,
        pp: usize,
        tg: usize,
        max_batch: u32,
    ) {
        let c = &engine.model().config;
        match resident {
            Some(r) => {
                let predicted: f64 = match part {
                    Part::Pp => crate::auto::chunks(pp, max_batch)
                        .map(|(m, last)| r.step_us(m, last).unwrap_or(f64::NAN))
                        .sum(),
                    Part::Tg => tg as f64 * r.step_us(1, true).unwrap_or(f64::NAN),
                };
                let measured = engine.timings().resident.as_secs_f64() * 1e6;
                if measured > 0.0 && predicted.is_finite() {
                    self.push(
                        part,
                        "gpu resident steps".into(),
                        (predicted - measured) / measured,
                    );
                }
            }
            None => {
                for p in engine.executor().predictions() {
                    if let Some(e) = p.relative_error() {
                        let label = format!(
                            "{} {}x{} ({})",
                            crate::planning::shape_name(c, p.k, p.n),
                            p.k,
                            p.n,
                            p.phase
                        );
                        self.push(part, label, e);
                    }
                }
            }
        }
    }

    fn print(&self, out: &mut dyn Write, reps: usize) -> Result<(), Fail> {
        writeln!(
            out,
            "prediction error per op class over {reps} timed repetitions (|predicted - measured| / measured):"
        )?;
        for part in [Part::Pp, Part::Tg] {
            let mut medians = Vec::new();
            for (_, label, v) in self.classes.iter().filter(|c| c.0 == part) {
                let mut e = v.clone();
                let Some(s) = ErrorStats::of(&mut e) else {
                    continue;
                };
                medians.push(s.bias);
                writeln!(
                    out,
                    "  {:<4} {label:<40} median {:>6.1}%, worst {:>6.1}% (signed median {:+.1}%)",
                    match part {
                        Part::Pp => "pp",
                        Part::Tg => "tg",
                    },
                    s.median * 100.0,
                    s.worst * 100.0,
                    s.bias * 100.0
                )?;
            }
            if let Some(s) = ErrorStats::of(&mut medians) {
                writeln!(
                    out,
                    "  {:<4} over {} op classes: median {:.1}%, worst {:.1}%",
                    match part {
                        Part::Pp => "pp",
                        Part::Tg => "tg",
                    },
                    s.count,
                    s.median * 100.0,
                    s.worst * 100.0
                )?;
            }
        }
        Ok(())
    }
}
