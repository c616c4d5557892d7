//! EdgeAgent's agent-aware speculative decoding (issue 10): several agents share one model;
//! each step their prompt-lookup drafts share one verification batch of at most `L_total`
//! (16) token slots; HAL budgets steer slots to the agents whose drafts get accepted; agents
//! waiting on tools step aside without losing their KV cache (suspend-and-yield).
//!
//! # Modules
//!
//! - [`workload`]: the JSON workload format and its validation (format documented in
//!   `engine-min/workloads/README.md`).
//! - [`trace`]: the seeded trace generator (reasoning : code : tool = 1:2:2, Poisson arrivals).
//! - [`draft`]: prompt lookup (longest suffix n-gram, 3 down to 1, latest earlier match in the
//!   agent's own prompt + output; proposes what followed, up to the budget).
//! - [`sched`]: budgets, batched verification, acceptance and rollback, tool stalls,
//!   suspend-and-yield, the report; generic over a [`sched::Verifier`].
//! - [`model`]: the verifier on the real model, over [`crate::batch::BatchEngine`] (one
//!   forward pass for all agents' rows, one KV cache per agent, rows bit-for-bit independent
//!   of the batch composition).
//! - [`cli`]: `engine-min agents gen-trace|run`.
//!
//! # What one step does
//!
//! An agent's budget `L_i` counts slots: its last accepted token (not yet in its cache) plus
//! up to `L_i - 1` drafts. The batch holds every running agent's slots, `sum L_i <= 16`.
//! Greedy acceptance keeps the longest draft prefix equal to the argmax after each slot, plus
//! the bonus token; the cache is truncated to the accepted positions (rejected entries are
//! overwritten later). With greedy decoding the text is therefore exactly each agent's own
//! non-speculative greedy text, in every configuration and across suspend/resume (tested).
//!
//! - **Batch-AR**: 1 slot per running agent (no drafts).
//! - **Batch-SD**: static `L_i = 16 / N` (N = agents that may be in the batch at once).
//! - **HAL**: `hetero_partition::DraftBudget` (γ 0.3, A(0) 4.0, τ 1, L_total 16, L_min 2):
//!   `A_i` updated with the accepted draft count after each step the agent takes part in.
//! - **HAL + suspend-and-yield**: as HAL; an agent that starts a tool call leaves the batch at
//!   the next verification boundary (its cache is frozen, its slots go to the others through
//!   the allocator's active mask) and rejoins when the tool returns, without re-prefill (the
//!   scheduler checks the cache length is unchanged on resume and counts prefills).
//!
//! **Baseline without suspend-and-yield** (Batch-AR, Batch-SD, HAL): synchronous batching as in
//! the paper's baseline (its Fig. 14): while any agent in the batch is waiting on a tool, the
//! next verification step does not start; the clock advances to that tool's return
//! (head-of-line blocking; reported as "blocked on tools"). The stalled agent keeps its place
//! and its budget.
//!
//! At most `L_total / L_min` (8) agents are in the batch at once; later arrivals queue and are
//! admitted (and prefilled, alone) at the next step boundary when there is room.
//!
//! # Clock
//!
//! Time is virtual: each prefill and verification step advances the clock by its measured wall
//! time; tool calls are waits on that clock (nothing sleeps); idle periods jump to the next
//! arrival or tool return. Makespan = the clock when the last agent finishes; global tokens/s
//! = generated tokens / makespan. Measured step times include whatever else loads the machine.
//!
//! # Not done
//!
//! - Tool results are not fed back into the agent's context (the agent resumes its own greedy
//!   continuation); a real agent loop would prefill the tool's output after the resume.
//! - Sampling is greedy only (lossless speculative sampling with temperature is not done).
//! - Drafts are linear (no draft tree); the verifier runs on the CPU backend only.

pub mod draft;
pub mod model;
pub mod sched;
pub mod trace;
pub mod workload;

use std::fmt::Write as _;
use std::sync::Arc;

use crate::model::Model;
use sched::{Config, Report, SchedOptions};
use trace::TraceOptions;
use workload::Workload;

/// Usage of `engine-min agents`.
pub const USAGE: &str = "usage:
  engine-min agents gen-trace --seed S --agents N --out FILE [--mix R:C:T] [--max-tokens N]
                              [--interarrival SECONDS] [--tool-ms MIN:MAX] [--tool-calls N]
  engine-min agents run --workload FILE [--config batch-ar|batch-sd|hal|hal-sy|all]
                        [--model PATH] [--threads N] [--ctx N] [--tau T] [--l-min N] [--check]
                        [--clock measured|model]
The model defaults to $HETERO_MODEL. --check also decodes every agent alone without drafts
and fails unless every configuration produced exactly that text. --clock model first times a
verification pass of 1..16 rows (median of 3) and charges every step that calibrated cost (and
each agent's prefill its first measured time), so configurations compare without load noise.";

struct Args(Vec<String>);

impl Args {
    fn flag(&mut self, name: &str) -> bool {
        match self.0.iter().position(|a| a == name) {
            Some(i) => {
                self.0.remove(i);
                true
            }
            None => false,
        }
    }
    fn value(&mut self, name: &str) -> Result<Option<String>, String> {
        match self.0.iter().position(|a| a == name) {
            Some(i) if i + 1 < self.0.len() => {
                let v = self.0.remove(i + 1);
                self.0.remove(i);
                Ok(Some(v))
            }
            Some(_) => Err(format!("{name} needs a value\n{USAGE}")),
            None => Ok(None),
        }
    }
    fn parsed<T: std::str::FromStr>(&mut self, name: &str, default: T) -> Result<T, String> {
        match self.value(name)? {
            Some(v) => v
                .parse()
                .map_err(|_| format!("bad value `{v}` for {name}\n{USAGE}")),
            None => Ok(default),
        }
    }
    fn finish(self) -> Result<(), String> {
        match self.0.first() {
            Some(a) => Err(format!("unexpected argument `{a}`\n{USAGE}")),
            None => Ok(()),
        }
    }
}

/// Runs `engine-min agents ARGS...` (arguments after `agents`); prints to stdout.
pub fn cli(args: Vec<String>) -> Result<(), String> {
    let mut args = args;
    if args.is_empty() {
        return Err(USAGE.into());
    }
    let cmd = args.remove(0);
    let args = Args(args);
    match cmd.as_str() {
        "gen-trace" => gen_trace(args),
        "run" => run_cmd(args),
        "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown agents command `{other}`\n{USAGE}")),
    }
}

fn gen_trace(mut a: Args) -> Result<(), String> {
    let d = TraceOptions::default();
    let seed: u64 = a
        .value("--seed")?
        .ok_or_else(|| format!("--seed is required\n{USAGE}"))?
        .parse()
        .map_err(|_| "bad --seed".to_string())?;
    let agents: usize = a.parsed("--agents", d.agents)?;
    let out = a
        .value("--out")?
        .ok_or_else(|| format!("--out is required\n{USAGE}"))?;
    let mix = match a.value("--mix")? {
        Some(m) => trace::parse_mix(&m).map_err(|e| e.to_string())?,
        None => d.mix,
    };
    let max_tokens: usize = a.parsed("--max-tokens", d.max_tokens)?;
    let inter: f64 = a.parsed("--interarrival", d.mean_interarrival_s)?;
    let mut tool = d.tool;
    if let Some(t) = a.value("--tool-ms")? {
        let (lo, hi) = t
            .split_once(':')
            .ok_or_else(|| format!("--tool-ms wants MIN:MAX, got `{t}`"))?;
        tool.min_ms = lo.parse().map_err(|_| format!("bad --tool-ms `{t}`"))?;
        tool.max_ms = hi.parse().map_err(|_| format!("bad --tool-ms `{t}`"))?;
    }
    tool.max_calls = a.parsed("--tool-calls", tool.max_calls)?;
    a.finish()?;
    let w = trace::generate(&TraceOptions {
        seed,
        agents,
        mix,
        mean_interarrival_s: inter,
        max_tokens,
        tool,
    })
    .map_err(|e| e.to_string())?;
    w.write(&out).map_err(|e| e.to_string())?;
    // Replays exactly: read it back and compare.
    let back = Workload::read(&out).map_err(|e| e.to_string())?;
    if back != w {
        return Err(format!("{out}: the file does not read back identically"));
    }
    let kinds: Vec<&str> = w.agents.iter().map(|a| a.kind.name()).collect();
    println!(
        "wrote {out}: {} agents ({})",
        w.agents.len(),
        kinds.join(", ")
    );
    Ok(())
}

fn run_cmd(mut a: Args) -> Result<(), String> {
    let path = a
        .value("--workload")?
        .ok_or_else(|| format!("--workload is required\n{USAGE}"))?;
    let configs: Vec<Config> = match a.value("--config")?.as_deref() {
        None | Some("all") => Config::ALL.to_vec(),
        Some(c) => vec![Config::parse(c).ok_or_else(|| format!("unknown config `{c}`\n{USAGE}"))?],
    };
    let model_path = match a.value("--model")? {
        Some(p) => p,
        None => std::env::var("HETERO_MODEL")
            .map_err(|_| format!("no --model given and HETERO_MODEL is not set\n{USAGE}"))?,
    };
    let threads: usize = a.parsed(
        "--threads",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    )?;
    let ctx: usize = a.parsed("--ctx", 1024)?;
    let mut opts = SchedOptions::default();
    opts.budget.tau = a.parsed("--tau", opts.budget.tau)?;
    opts.budget.l_min = a.parsed("--l-min", opts.budget.l_min)?;
    let check = a.flag("--check");
    let clock = a.value("--clock")?.unwrap_or_else(|| "measured".into());
    if clock != "measured" && clock != "model" {
        return Err(format!(
            "--clock is `measured` or `model`, not `{clock}`\n{USAGE}"
        ));
    }
    a.finish()?;
    // Everything that can be refused is refused before the model runs.
    let w = Workload::read(&path).map_err(|e| e.to_string())?;
    hetero_partition::DraftBudget::new(w.agents.len(), opts.budget).map_err(|e| e.to_string())?;
    let model = Arc::new(Model::load(&model_path).map_err(|e| e.to_string())?);
    let prompts = encode(&w, &model, ctx, opts.budget.l_total as usize)?;
    let mut v = model::ModelVerifier::new(
        Arc::clone(&model),
        w.agents.len(),
        ctx,
        threads,
        opts.budget.l_total as usize,
    )
    .map_err(|e| e.to_string())?;
    if clock == "model" {
        let n = prompts.len().max(1);
        let mean_prompt = prompts.iter().map(Vec::len).sum::<usize>() / n;
        let mean_out = w.agents.iter().map(|a| a.max_tokens).sum::<usize>() / n;
        let l = opts.budget.l_total as usize;
        let t = v
            .calibrate(l, mean_prompt + mean_out / 2, 3)
            .map_err(|e| e.to_string())?;
        let ms: Vec<String> = t.iter().map(|s| format!("{:.1}", s * 1e3)).collect();
        println!(
            "model clock: verification pass of 1..{l} rows at context {} costs (ms): {}",
            mean_prompt + mean_out / 2,
            ms.join(" ")
        );
    }
    let reference = if check {
        Some(sched::greedy_reference(&w, &prompts, &mut v).map_err(|e| e.to_string())?)
    } else {
        None
    };
    println!(
        "workload {path}: {} agents; {threads} thread(s); clock {clock}; L_total {}, L_min {}, gamma {}, A(0) {}, tau {}",
        w.agents.len(),
        opts.budget.l_total,
        opts.budget.l_min,
        opts.budget.gamma,
        opts.budget.a0,
        opts.budget.tau
    );
    let mut reports = Vec::new();
    for c in configs {
        let r = sched::run(&w, &prompts, c, &opts, &mut v).map_err(|e| e.to_string())?;
        if let Some(reference) = &reference {
            for (a, want) in r.agents.iter().zip(reference) {
                if &a.tokens != want {
                    return Err(format!(
                        "{}: agent {} differs from its non-speculative greedy text",
                        c.name(),
                        a.name
                    ));
                }
            }
        }
        print!("{}", format_report(&r));
        reports.push(r);
    }
    if reference.is_some() {
        println!("check: every configuration reproduced each agent's greedy text exactly");
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
        println!("{line}");
    }
    Ok(())
}

/// Encodes every prompt and checks it fits `context` with its output and one verification
/// batch of `l_total` slots.
pub fn encode(
    w: &Workload,
    model: &Model,
    context: usize,
    l_total: usize,
) -> Result<Vec<Vec<u32>>, String> {
    let prompts: Vec<Vec<u32>> = w
        .agents
        .iter()
        .map(|a| model.tokenizer.encode_prompt(&a.prompt))
        .collect();
    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let ctx = context.min(model.config.context);
    w.check_context(&lens, ctx, l_total)
        .map_err(|e| e.to_string())?;
    Ok(prompts)
}

/// The report of one configuration as text.
pub fn format_report(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "[{}] makespan {:.2} s, {} tokens, {:.1} tok/s; compute {:.2} s, blocked on tools {:.2} s; \
         {} steps, max {} slots/step, acceptance {:.1}%, {:.2} tokens/agent-step",
        r.config.name(),
        r.makespan_s,
        r.generated,
        r.tokens_per_s(),
        r.compute_s,
        r.blocked_s,
        r.steps,
        r.max_slots,
        100.0 * r.acceptance(),
        r.tokens_per_agent_step()
    );
    for a in &r.agents {
        let _ = writeln!(
            s,
            "    {:<12} {:<9} {:>4} tok, {:>4} steps, accepted {:>4}/{:<4} drafts, {} tool call(s), {} resume(s), {} prefill, done at {:.2} s",
            a.name,
            a.kind.name(),
            a.tokens.len(),
            a.steps,
            a.accepted,
            a.drafted,
            a.tool_calls,
            a.resumes,
            a.prefills,
            a.finish_s
        );
    }
    s
}
