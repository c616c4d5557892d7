//! EdgeAgent's agent-aware speculative decoding (issue 10): several agents share one model;
//! each step their prompt-lookup drafts share one verification batch of at most `L_total`
//! (16) token slots; HAL budgets steer slots to the agents whose drafts get accepted; agents
//! waiting on tools step aside without losing their KV cache (suspend-and-yield).
//!
//! - [`workload`]: the JSON workload format and its validation.
//! - [`trace`]: the seeded trace generator (reasoning : code : tool = 1:2:2, Poisson arrivals).
//! - [`draft`]: prompt-lookup drafting.
//! - [`sched`]: budgets, batched verification, acceptance and rollback, tool stalls,
//!   suspend-and-yield, the report; generic over a [`sched::Verifier`].
//! - [`model`]: the verifier on the real model ([`crate::batch::BatchEngine`]).
//! - [`cli`]: `engine-min agents gen-trace|run`.

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
The model defaults to $HETERO_MODEL. --check also decodes every agent alone without drafts
and fails unless every configuration produced exactly that text.";

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
    let reference = if check {
        Some(sched::greedy_reference(&w, &prompts, &mut v).map_err(|e| e.to_string())?)
    } else {
        None
    };
    println!(
        "workload {path}: {} agents; {threads} thread(s); L_total {}, L_min {}, gamma {}, A(0) {}, tau {}",
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
