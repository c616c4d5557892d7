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
//! - `engine-min agents gen-trace|run`: the command line, in `src/cli/agents.rs`.
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

use crate::model::Model;
use sched::Report;
use workload::Workload;

/// Encodes every prompt and checks it fits `context` with its output and one verification
/// batch of `l_total` slots.
pub fn encode(
    w: &Workload,
    model: &Model,
    context: usize,
    l_total: usize,
) -> Result<Vec<Vec<u32>>, workload::WorkloadError> {
    let prompts: Vec<Vec<u32>> = w
        .agents
        .iter()
        .map(|a| model.tokenizer.encode_prompt(&a.prompt))
        .collect();
    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let ctx = context.min(model.config.context);
    w.check_context(&lens, ctx, l_total)?;
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
