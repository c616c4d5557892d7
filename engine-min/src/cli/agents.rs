//! `engine-min agents`: generate a seeded agent workload, or run one under every scheduling
//! configuration (EdgeAgent's speculative decoding with HAL draft budgets).

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::{load_model, Fail, LoadArgs};
use crate::agents::sched::{self, Config, SchedOptions};
use crate::agents::trace::{self, TraceOptions};
use crate::agents::workload::Workload;
use crate::agents::{encode, format_report, model::ModelVerifier};

#[derive(Args, Debug)]
pub struct AgentsArgs {
    #[command(subcommand)]
    cmd: AgentsCmd,
}

#[derive(Subcommand, Debug)]
enum AgentsCmd {
    /// Write a seeded workload (agents, prompts, tool calls) that replays exactly.
    GenTrace(GenTraceArgs),
    /// Run a workload under each configuration and report makespan and acceptance.
    Run(AgentsRunArgs),
}

#[derive(Args, Debug)]
struct GenTraceArgs {
    /// Seed of the generator.
    #[arg(long)]
    seed: u64,
    /// Number of agents.
    #[arg(long, default_value_t = TraceOptions::default().agents, value_parser = super::at_least_one)]
    agents: usize,
    /// Where to write the workload (JSON).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Mix of agent kinds R:C:T (reasoning : coding : tool-heavy weights).
    #[arg(long, value_parser = mix)]
    mix: Option<[u32; 3]>,
    /// Most tokens each agent generates.
    #[arg(long, default_value_t = TraceOptions::default().max_tokens)]
    max_tokens: usize,
    /// Mean time between agent arrivals, seconds.
    #[arg(long, default_value_t = TraceOptions::default().mean_interarrival_s)]
    interarrival: f64,
    /// Tool-call duration range MIN:MAX in ms.
    #[arg(long, value_name = "MIN:MAX", value_parser = tool_ms)]
    tool_ms: Option<(u64, u64)>,
    /// Most tool calls per agent.
    #[arg(long)]
    tool_calls: Option<u32>,
}

fn mix(s: &str) -> Result<[u32; 3], String> {
    trace::parse_mix(s).map_err(|e| e.to_string())
}

fn tool_ms(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{s}` is not MIN:MAX (milliseconds)");
    let (lo, hi) = s.split_once(':').ok_or_else(bad)?;
    Ok((
        lo.parse().map_err(|_| bad())?,
        hi.parse().map_err(|_| bad())?,
    ))
}

#[derive(Args, Debug)]
struct AgentsRunArgs {
    /// The workload (from `agents gen-trace`).
    #[arg(long, value_name = "FILE")]
    workload: PathBuf,
    /// batch-ar, batch-sd, hal, hal-sy or all.
    #[arg(long, default_value = "all", value_parser = config)]
    config: Configs,
    /// GGUF model file.
    #[arg(long, env = "HETERO_MODEL", value_name = "PATH")]
    model: PathBuf,
    /// CPU threads (default: all cores).
    #[arg(long, value_parser = super::at_least_one)]
    threads: Option<usize>,
    /// KV positions per agent.
    #[arg(long, default_value_t = 1024, value_parser = super::at_least_one)]
    ctx: usize,
    /// Softmax temperature of the budget allocator.
    #[arg(long)]
    tau: Option<f64>,
    /// Least draft length of an active agent.
    #[arg(long)]
    l_min: Option<u32>,
    /// Also decode every agent alone without drafts and fail unless every configuration
    /// produced exactly that text.
    #[arg(long)]
    check: bool,
    /// `measured` (wall time) or `model` (first time a verification pass of 1..16 rows,
    /// median of 3, and charge every step that calibrated cost).
    #[arg(long, default_value = "measured", value_parser = ["measured", "model"])]
    clock: String,
    #[command(flatten)]
    load: LoadArgs,
}

/// One scheduling configuration, or all of them.
#[derive(Clone, Copy, Debug)]
enum Configs {
    All,
    One(Config),
}

fn config(s: &str) -> Result<Configs, String> {
    if s == "all" {
        return Ok(Configs::All);
    }
    Config::parse(s)
        .map(Configs::One)
        .ok_or_else(|| format!("unknown config `{s}` (batch-ar, batch-sd, hal, hal-sy, all)"))
}

pub fn agents(a: AgentsArgs, out: &mut dyn Write) -> Result<(), Fail> {
    match a.cmd {
        AgentsCmd::GenTrace(g) => gen_trace(g, out),
        AgentsCmd::Run(r) => run(r, out),
    }
}

fn gen_trace(a: GenTraceArgs, out: &mut dyn Write) -> Result<(), Fail> {
    let d = TraceOptions::default();
    let mut tool = d.tool;
    if let Some((lo, hi)) = a.tool_ms {
        tool.min_ms = lo as _;
        tool.max_ms = hi as _;
    }
    if let Some(c) = a.tool_calls {
        tool.max_calls = c as _;
    }
    let w = trace::generate(&TraceOptions {
        seed: a.seed,
        agents: a.agents,
        mix: a.mix.unwrap_or(d.mix),
        mean_interarrival_s: a.interarrival,
        max_tokens: a.max_tokens,
        tool,
    })
    .map_err(Fail::run)?;
    w.write(&a.out).map_err(Fail::run)?;
    // Replays exactly: read it back and compare.
    let back = Workload::read(&a.out).map_err(Fail::run)?;
    if back != w {
        return Err(Fail::Run(format!(
            "{}: the file does not read back identically",
            a.out.display()
        )));
    }
    let kinds: Vec<&str> = w.agents.iter().map(|a| a.kind.name()).collect();
    writeln!(
        out,
        "wrote {}: {} agents ({})",
        a.out.display(),
        w.agents.len(),
        kinds.join(", ")
    )?;
    Ok(())
}

fn run(a: AgentsRunArgs, out: &mut dyn Write) -> Result<(), Fail> {
    let configs: Vec<Config> = match a.config {
        Configs::All => Config::ALL.to_vec(),
        Configs::One(c) => vec![c],
    };
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let mut opts = SchedOptions::default();
    if let Some(t) = a.tau {
        opts.budget.tau = t;
    }
    if let Some(l) = a.l_min {
        opts.budget.l_min = l as _;
    }
    // Everything that can be refused is refused before the model runs.
    let w = Workload::read(&a.workload).map_err(Fail::run)?;
    hetero_partition::DraftBudget::new(w.agents.len(), opts.budget).map_err(Fail::run)?;
    let model = Arc::new(load_model(&a.model, &a.load)?);
    if a.ctx > model.config.context {
        return Err(Fail::Usage(format!(
            "--ctx {} exceeds the model's context length {}",
            a.ctx, model.config.context
        )));
    }
    let prompts = encode(&w, &model, a.ctx, opts.budget.l_total as usize).map_err(Fail::run)?;
    let budget = a.load.engine_budget(&model);
    let mut v = ModelVerifier::with_budget(
        Arc::clone(&model),
        w.agents.len(),
        a.ctx,
        threads,
        opts.budget.l_total as usize,
        &budget,
    )
    .map_err(Fail::run)?;
    if a.clock == "model" {
        let n = prompts.len().max(1);
        let mean_prompt = prompts.iter().map(Vec::len).sum::<usize>() / n;
        let mean_out = w.agents.iter().map(|a| a.max_tokens).sum::<usize>() / n;
        let l = opts.budget.l_total as usize;
        let t = v
            .calibrate(l, mean_prompt + mean_out / 2, 3)
            .map_err(Fail::run)?;
        let ms: Vec<String> = t.iter().map(|s| format!("{:.1}", s * 1e3)).collect();
        writeln!(
            out,
            "model clock: verification pass of 1..{l} rows at context {} costs (ms): {}",
            mean_prompt + mean_out / 2,
            ms.join(" ")
        )?;
    }
    let reference = if a.check {
        Some(sched::greedy_reference(&w, &prompts, &mut v).map_err(Fail::run)?)
    } else {
        None
    };
    writeln!(
        out,
        "workload {}: {} agents; {threads} thread(s); clock {}; L_total {}, L_min {}, gamma {}, A(0) {}, tau {}",
        a.workload.display(),
        w.agents.len(),
        a.clock,
        opts.budget.l_total,
        opts.budget.l_min,
        opts.budget.gamma,
        opts.budget.a0,
        opts.budget.tau
    )?;
    let mut reports = Vec::new();
    for c in configs {
        let r = sched::run(&w, &prompts, c, &opts, &mut v).map_err(Fail::run)?;
        if let Some(reference) = &reference {
            for (ag, want) in r.agents.iter().zip(reference) {
                if &ag.tokens != want {
                    return Err(Fail::Run(format!(
                        "{}: agent {} differs from its non-speculative greedy text",
                        c.name(),
                        ag.name
                    )));
                }
            }
        }
        write!(out, "{}", format_report(&r))?;
        reports.push(r);
    }
    if reference.is_some() {
        writeln!(
            out,
            "check: every configuration reproduced each agent's greedy text exactly"
        )?;
    }
    if let Some(sd) = reports.iter().find(|r| r.config == Config::BatchSd) {
        let mut line = String::from("makespan speedup over batch-sd:");
        for r in &reports {
            let _ = write!(
                line,
                " {} {:.2}x",
                r.config.name(),
                sd.makespan_s / r.makespan_s
            );
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}
