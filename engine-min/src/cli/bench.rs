//! `engine-min bench`: llama-bench's pp N / tg N on any plan, medians.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::{load_model, plan_choice, Fail, LoadArgs, MachineArgs, ModelArg};
use crate::compose::PlanChoice;

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
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    load: LoadArgs,
}

pub fn bench(a: BenchArgs, out: &mut dyn Write) -> Result<(), Fail> {
    // The whole prompt in one chunk, as llama-bench processes it.
    let max_batch = a.pp.max(1);
    let ctx = a.pp.max(a.tg) + 1;
    let opts = super::run::compose_options(a.plan, a.profile.as_ref(), &a.machine, max_batch, ctx)?;
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
    let ctx = ctx.min(context);
    let (mut engine, _) = super::run::build_engine(&model, &opts, ctx, &a.load)?;
    let r = crate::bench::pp_tg(&mut engine, a.pp, a.tg, a.reps, 0x5eed).map_err(Fail::run)?;
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    writeln!(
        out,
        "engine-min bench: plan {}, cpu kernel {}, {} thread(s), {} reps; processors: {}",
        a.plan,
        a.machine.kernel().name(),
        a.machine.threads(),
        a.reps,
        engine.executor().backend_names()
    )?;
    if a.pp > 0 {
        let med = crate::bench::median(&r.pp);
        writeln!(out, "pp{}: {med:.1} tok/s median ({})", a.pp, show(&r.pp))?;
    }
    if a.tg > 0 {
        let med = crate::bench::median(&r.tg);
        writeln!(out, "tg{}: {med:.1} tok/s median ({})", a.tg, show(&r.tg))?;
    }
    if a.breakdown {
        let (pp, tg) =
            crate::bench::breakdown(&mut engine, a.pp, a.tg, 0x5eed).map_err(Fail::run)?;
        let dispatch = dispatch_us(engine.executor().cpu().pool());
        for (name, b) in [("pp", &pp), ("tg", &tg)] {
            if b.tokens > 0 {
                print_breakdown(out, name, b, dispatch, model.config.n_layer)?;
            }
        }
    }
    Ok(())
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
    n_layer: usize,
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
    // Every matmul is one pool job (at most 16 rows: larger GEMV batches are several), and
    // every layer's attention one more.
    let jobs = calls as f64 + (b.steps * n_layer) as f64;
    writeln!(
        out,
        "  pool dispatch: {dispatch_us:.2} us per empty job; ~{:.0} jobs/token => ~{:.1} us/token",
        jobs / b.tokens as f64,
        dispatch_us * jobs / b.tokens as f64
    )?;
    Ok(())
}
