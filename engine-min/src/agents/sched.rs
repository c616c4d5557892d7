//! The scheduler: per-step draft budgets, batched verification, greedy acceptance with KV
//! rollback, tool stalls, and suspend-and-yield. It drives any [`Verifier`] (the real model in
//! [`super::model::ModelVerifier`], a deterministic fake in the unit tests).
//!
//! Time is a virtual clock: every prefill and verification step advances it by the compute
//! time the verifier measured (or reports), tool calls are waits on that clock (nothing
//! sleeps), and idle periods jump to the next arrival or tool return. The makespan is the
//! clock when the last agent finishes.

use std::fmt;
use std::time::Instant;

use hetero_partition::{BudgetError, BudgetParams, DraftBudget};

use super::draft;
use super::workload::{TaskKind, Workload, WorkloadError};
use crate::batch::BatchError;
use crate::compose::ComposeError;

/// The four scheduling configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Config {
    /// Non-speculative batched decoding: one slot (the last token) per agent per step.
    BatchAr,
    /// Speculative, static budgets: every agent gets `L_total / N` slots (N = agents that may
    /// run at once).
    BatchSd,
    /// Speculative, HAL budgets (partition's allocator) over the agents in the batch.
    Hal,
    /// HAL budgets plus suspend-and-yield on tool calls.
    HalSy,
}

impl Config {
    /// All four, in report order.
    pub const ALL: [Config; 4] = [Config::BatchAr, Config::BatchSd, Config::Hal, Config::HalSy];

    /// Name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Config::BatchAr => "batch-ar",
            Config::BatchSd => "batch-sd",
            Config::Hal => "hal",
            Config::HalSy => "hal-sy",
        }
    }

    /// Parses a name of [`Config::name`].
    pub fn parse(s: &str) -> Option<Config> {
        Config::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Whether a stalled agent leaves the batch (otherwise the batch waits for its tool).
    pub fn suspend_yield(self) -> bool {
        self == Config::HalSy
    }
}

/// Scheduler parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedOptions {
    /// HAL parameters; `l_total` is the slot limit of every configuration, `l_min` the least
    /// slots (last token + drafts) of an agent in the batch and, through `l_total / l_min`, the
    /// most agents admitted at once.
    pub budget: BudgetParams,
}

impl Default for SchedOptions {
    /// The paper's γ = 0.3, A(0) = 4.0, L_total = 16, with τ = 1 and L_min = 2 (one token
    /// plus at least one draft; up to 8 agents at once).
    fn default() -> Self {
        Self {
            budget: BudgetParams {
                l_min: 2,
                ..BudgetParams::EDGE_AGENT
            },
        }
    }
}

/// One agent's rows in a verification batch: `tokens[start..start + len]` belong to `agent`
/// (its last accepted token, then its drafts) and go at the end of its own KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRow {
    /// Agent index.
    pub agent: usize,
    /// First token in the batch's token array.
    pub start: usize,
    /// Tokens.
    pub len: usize,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentError {
    /// The workload was refused.
    Workload(WorkloadError),
    /// The budget allocator refused (bad parameters, too many agents).
    Budget(BudgetError),
    /// The verifier could not be built (its thread pool or its executor).
    Setup(ComposeError),
    /// The verifier's batched engine failed.
    Engine(BatchError),
    /// An agent's prompt holds no tokens.
    EmptyPrompt {
        /// Agent index.
        agent: usize,
    },
    /// A scheduler invariant broke (a bug, reported instead of a panic).
    Internal(Invariant),
}

/// A scheduler or verifier invariant that broke: each is a bug, reported instead of a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invariant {
    /// `run` was given a prompt count that is not the workload's agent count.
    PromptCount {
        /// Prompts given.
        prompts: usize,
        /// Agents in the workload.
        agents: usize,
    },
    /// A suspended agent came back with a cache of another length than it froze.
    ResumedCache {
        /// Agent index.
        agent: usize,
        /// Positions cached on resume.
        cached: usize,
        /// Positions when it froze.
        frozen: usize,
    },
    /// No agent is running, waiting with room, or stalled on a tool.
    Stuck,
    /// A step needs more token slots than the batch holds.
    Slots {
        /// Slots needed.
        need: usize,
        /// Slots available.
        limit: usize,
    },
    /// The verifier was given rows that do not index its tokens or outputs.
    BatchShape,
    /// The verifier was given more rows than it sized its logits for.
    BatchTooLarge {
        /// Tokens in the batch.
        tokens: usize,
        /// Most it holds.
        max: usize,
    },
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PromptCount { prompts, agents } => {
                write!(f, "{prompts} prompts for {agents} agents")
            }
            Self::ResumedCache {
                agent,
                cached,
                frozen,
            } => write!(
                f,
                "agent {agent} resumed with {cached} cached positions, froze {frozen}"
            ),
            Self::Stuck => f.write_str("no agent can make progress"),
            Self::Slots { need, limit } => write!(f, "step needs {need} slots, limit {limit}"),
            Self::BatchShape => f.write_str("verify: rows do not index the batch's tokens"),
            Self::BatchTooLarge { tokens, max } => {
                write!(f, "verify: {tokens} tokens in one batch, at most {max}")
            }
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Workload(e) => e.fmt(f),
            Self::Budget(e) => write!(f, "draft budget: {e}"),
            Self::Setup(e) => write!(f, "engine: {e}"),
            Self::Engine(e) => write!(f, "engine: {e}"),
            Self::EmptyPrompt { agent } => write!(f, "agent {agent}: the prompt has no tokens"),
            Self::Internal(e) => write!(f, "scheduler invariant broken: {e}"),
        }
    }
}

impl std::error::Error for AgentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Workload(e) => Some(e),
            Self::Budget(e) => Some(e),
            Self::Setup(e) => Some(e),
            Self::Engine(e) => Some(e),
            Self::EmptyPrompt { .. } | Self::Internal(_) => None,
        }
    }
}

impl From<WorkloadError> for AgentError {
    fn from(e: WorkloadError) -> Self {
        Self::Workload(e)
    }
}

impl From<BudgetError> for AgentError {
    fn from(e: BudgetError) -> Self {
        Self::Budget(e)
    }
}

impl From<ComposeError> for AgentError {
    fn from(e: ComposeError) -> Self {
        Self::Setup(e)
    }
}

impl From<BatchError> for AgentError {
    fn from(e: BatchError) -> Self {
        Self::Engine(e)
    }
}

impl From<Invariant> for AgentError {
    fn from(e: Invariant) -> Self {
        Self::Internal(e)
    }
}

/// What verifies drafts: a model with one KV cache per agent.
pub trait Verifier {
    /// Whether `token` ends a sequence (EOS or another control token).
    fn is_stop(&self, token: u32) -> bool;
    /// The text of `tokens` (for reports and tests).
    fn text(&self, tokens: &[u32]) -> String;
    /// Appends the bytes of `token` to `out` (for tool-call markers; the scheduler reserves
    /// `out` up front, so an implementation that only pushes bytes does not allocate). The
    /// default goes through [`Verifier::text`].
    fn append_text(&self, token: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(self.text(&[token]).as_bytes());
    }
    /// Fills agent `agent`'s empty cache with `prompt` and returns the greedy next token.
    fn prefill(&mut self, agent: usize, prompt: &[u32]) -> Result<u32, AgentError>;
    /// One forward pass over all `rows` (each appended to its agent's cache); writes the greedy
    /// argmax after every token into `argmax` (same indexing as `tokens`).
    fn verify(
        &mut self,
        rows: &[BatchRow],
        tokens: &[u32],
        argmax: &mut [u32],
    ) -> Result<(), AgentError>;
    /// Keeps the first `len` positions of agent `agent`'s cache (rollback of rejected drafts).
    fn truncate(&mut self, agent: usize, len: usize) -> Result<(), AgentError>;
    /// Positions in agent `agent`'s cache.
    fn cache_len(&self, agent: usize) -> usize;
    /// Seconds the last `prefill`/`verify` cost on the clock; `None` (default): the wall time
    /// measured around the call.
    fn last_cost_s(&self) -> Option<f64> {
        None
    }
}

/// One agent's result.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentOutcome {
    /// Name from the workload.
    pub name: String,
    /// Task kind.
    pub kind: TaskKind,
    /// Generated tokens (EOS excluded).
    pub tokens: Vec<u32>,
    /// Prefill calls (1 for every agent that ran: resumes never re-prefill).
    pub prefills: u32,
    /// Verification steps the agent took part in.
    pub steps: u32,
    /// Draft tokens proposed.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
    /// Tool calls started.
    pub tool_calls: u32,
    /// Times the agent was suspended (left the batch) and resumed from its frozen cache.
    pub resumes: u32,
    /// Clock when it finished, seconds.
    pub finish_s: f64,
}

/// The result of one configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Configuration.
    pub config: Config,
    /// Clock when the last agent finished, seconds.
    pub makespan_s: f64,
    /// Clock time spent computing (prefill + verification).
    pub compute_s: f64,
    /// Clock time the whole batch waited on a stalled agent's tool (configs without
    /// suspend-and-yield).
    pub blocked_s: f64,
    /// Generated tokens, all agents.
    pub generated: u64,
    /// Verification steps.
    pub steps: u64,
    /// Most slots any step used (<= L_total).
    pub max_slots: u32,
    /// Fewest budget slots any agent in a step's batch had (`u32::MAX` if no step ran).
    pub min_budget: u32,
    /// Per agent.
    pub agents: Vec<AgentOutcome>,
}

impl Report {
    /// Generated tokens per second of makespan.
    pub fn tokens_per_s(&self) -> f64 {
        if self.makespan_s > 0.0 {
            self.generated as f64 / self.makespan_s
        } else {
            0.0
        }
    }

    /// Accepted / drafted over all agents (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        let (d, a) = self
            .agents
            .iter()
            .fold((0u64, 0u64), |(d, a), x| (d + x.drafted, a + x.accepted));
        if d == 0 {
            0.0
        } else {
            a as f64 / d as f64
        }
    }

    /// Mean tokens gained per agent-step (accepted drafts + 1).
    pub fn tokens_per_agent_step(&self) -> f64 {
        let steps: u64 = self.agents.iter().map(|a| u64::from(a.steps)).sum();
        if steps == 0 {
            0.0
        } else {
            let acc: u64 = self.agents.iter().map(|a| a.accepted).sum();
            (acc + steps) as f64 / steps as f64
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Waiting,
    Running,
    Stalled { until: f64, frozen: usize },
    Done,
}

struct Agent {
    state: State,
    prompt_len: usize,
    /// Prompt followed by the generated tokens (the last one not yet in the cache).
    seq: Vec<u32>,
    /// Bytes of the generated text (tool agents only).
    text: Vec<u8>,
    /// End of the last marker found (occurrences do not overlap).
    scan_from: usize,
    out: AgentOutcome,
}

impl Agent {
    fn generated(&self) -> &[u32] {
        &self.seq[self.prompt_len..]
    }
}

/// The end of the earliest marker occurrence that ends in the new bytes `text[new_from..]`
/// and starts at or after `consumed` (the end of the last marker found), so occurrences never
/// overlap (as `str::matches` counts them).
fn find_marker(text: &[u8], consumed: usize, new_from: usize, markers: &[String]) -> Option<usize> {
    markers
        .iter()
        .filter_map(|m| {
            let m = m.as_bytes();
            let start = consumed.max(new_from.saturating_sub(m.len().saturating_sub(1)));
            text.get(start..)?
                .windows(m.len())
                .position(|w| w == m)
                .map(|p| start + p + m.len())
        })
        .min()
}

/// Runs `workload` (prompts already encoded: `prompts[i]` for agent `i`) under `config`.
///
/// Each step: admit arrived agents (at most `L_total / L_min` at once; each prefilled once),
/// wake agents whose tool returned, give each running agent its budget `L_i` (its last token
/// plus up to `L_i - 1` prompt-lookup drafts), verify all rows in one pass, accept the longest
/// draft prefix equal to the greedy argmax plus the bonus token, truncate each cache to what
/// was accepted. An agent whose new text contains one of its markers starts a tool call; with
/// suspend-and-yield it leaves the batch (cache frozen) until the tool returns, otherwise the
/// next step waits for the tool (the synchronous baseline: head-of-line blocking).
pub fn run(
    workload: &Workload,
    prompts: &[Vec<u32>],
    config: Config,
    opts: &SchedOptions,
    v: &mut dyn Verifier,
) -> Result<Report, AgentError> {
    let n = workload.agents.len();
    if prompts.len() != n {
        return Err(Invariant::PromptCount {
            prompts: prompts.len(),
            agents: n,
        }
        .into());
    }
    let p = opts.budget;
    let mut budget = DraftBudget::new(n, p)?;
    let l_total = p.l_total.max(1);
    let cap = (l_total / p.l_min.max(1)).max(1) as usize;
    let static_l = (l_total as usize / n.min(cap).max(1)).max(1) as u32;
    let mut agents: Vec<Agent> = workload
        .agents
        .iter()
        .zip(prompts)
        .map(|(a, pr)| {
            let mut seq = Vec::with_capacity(pr.len() + a.max_tokens + l_total as usize);
            seq.extend_from_slice(pr);
            Agent {
                state: State::Waiting,
                prompt_len: pr.len(),
                seq,
                text: Vec::with_capacity(if a.tool_markers.is_empty() {
                    0
                } else {
                    // Generous: tokens rarely exceed 16 bytes.
                    16 * (a.max_tokens + l_total as usize)
                }),
                scan_from: 0,
                out: AgentOutcome {
                    name: a.name.clone(),
                    kind: a.kind,
                    tokens: Vec::with_capacity(a.max_tokens),
                    prefills: 0,
                    steps: 0,
                    drafted: 0,
                    accepted: 0,
                    tool_calls: 0,
                    resumes: 0,
                    finish_s: 0.0,
                },
            }
        })
        .collect();
    // Admission order: arrival, then index.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        workload.agents[a]
            .arrival_s
            .total_cmp(&workload.agents[b].arrival_s)
            .then(a.cmp(&b))
    });

    let mut rep = Report {
        config,
        makespan_s: 0.0,
        compute_s: 0.0,
        blocked_s: 0.0,
        generated: 0,
        steps: 0,
        max_slots: 0,
        min_budget: u32::MAX,
        agents: Vec::new(),
    };
    let mut now = 0.0f64;
    let mut active = vec![false; n];
    let mut lens = vec![0u32; n];
    let mut rows: Vec<BatchRow> = Vec::with_capacity(n);
    let mut tokens = vec![0u32; l_total as usize];
    let mut argmax = vec![0u32; l_total as usize];
    let mut newbuf = vec![0u32; l_total as usize + 1];
    let cost = |v: &dyn Verifier, t0: Instant| {
        let wall = t0.elapsed().as_secs_f64();
        v.last_cost_s().unwrap_or(wall)
    };

    loop {
        // Admit arrivals while there is room.
        let admitted = agents
            .iter()
            .filter(|a| matches!(a.state, State::Running | State::Stalled { .. }))
            .count();
        let mut room = cap.saturating_sub(admitted);
        for &i in &order {
            if room == 0 {
                break;
            }
            if agents[i].state != State::Waiting || workload.agents[i].arrival_s > now {
                continue;
            }
            room -= 1;
            let t0 = Instant::now();
            let first = v.prefill(i, &prompts[i])?;
            let c = cost(v, t0);
            now += c;
            rep.compute_s += c;
            let a = &mut agents[i];
            a.out.prefills += 1;
            a.state = State::Running;
            accept_tokens(a, &[first], workload, i, v, now);
            if let State::Stalled { until, .. } = a.state {
                a.state = State::Stalled {
                    until,
                    frozen: v.cache_len(i),
                };
            }
        }
        // Wake agents whose tool returned; without suspend-and-yield, wait for them first.
        let stalled_until = agents
            .iter()
            .filter_map(|a| match a.state {
                State::Stalled { until, .. } => Some(until),
                _ => None,
            })
            .fold(f64::NEG_INFINITY, f64::max);
        if !config.suspend_yield() && stalled_until > now {
            rep.blocked_s += stalled_until - now;
            now = stalled_until;
        }
        for (i, a) in agents.iter_mut().enumerate() {
            if let State::Stalled { until, frozen } = a.state {
                if until <= now {
                    // Resume from the frozen cache: it must be exactly as it was left.
                    if v.cache_len(i) != frozen {
                        return Err(Invariant::ResumedCache {
                            agent: i,
                            cached: v.cache_len(i),
                            frozen,
                        }
                        .into());
                    }
                    a.out.resumes += 1;
                    a.state = State::Running;
                }
            }
        }
        for (i, a) in agents.iter_mut().enumerate() {
            active[i] = a.state == State::Running;
        }
        if !active.iter().any(|&x| x) {
            if agents.iter().all(|a| a.state == State::Done) {
                break;
            }
            // Idle: jump to the next arrival (if there is room) or tool return.
            let in_batch = agents
                .iter()
                .filter(|a| matches!(a.state, State::Running | State::Stalled { .. }))
                .count();
            let next_arrival = agents
                .iter()
                .zip(&workload.agents)
                .filter(|(a, _)| a.state == State::Waiting && in_batch < cap)
                .map(|(_, s)| s.arrival_s)
                .fold(f64::INFINITY, f64::min);
            let next_return = agents
                .iter()
                .filter_map(|a| match a.state {
                    State::Stalled { until, .. } => Some(until),
                    _ => None,
                })
                .fold(f64::INFINITY, f64::min);
            let next = next_arrival.min(next_return);
            if !next.is_finite() {
                return Err(Invariant::Stuck.into());
            }
            now = now.max(next);
            continue;
        }
        // Budgets.
        match config {
            Config::BatchAr => lens.iter_mut().for_each(|l| *l = 1),
            Config::BatchSd => lens.iter_mut().for_each(|l| *l = static_l),
            Config::Hal | Config::HalSy => {
                budget.allocate(&active, &mut lens)?;
            }
        }
        // Rows: last token + drafts.
        rows.clear();
        let mut used = 0usize;
        for i in 0..n {
            if !active[i] {
                continue;
            }
            let a = &agents[i];
            let l = lens[i] as usize;
            rep.min_budget = rep.min_budget.min(lens[i]);
            let remaining = workload.agents[i].max_tokens - a.generated().len();
            let max_draft = l.saturating_sub(1).min(remaining.saturating_sub(1));
            if used + 1 + max_draft > tokens.len() {
                return Err(Invariant::Slots {
                    need: used + 1 + max_draft,
                    limit: tokens.len(),
                }
                .into());
            }
            tokens[used] = *a.seq.last().unwrap_or(&0);
            let k = draft::lookup(&a.seq, &mut tokens[used + 1..used + 1 + max_draft]);
            rows.push(BatchRow {
                agent: i,
                start: used,
                len: 1 + k,
            });
            used += 1 + k;
        }
        rep.max_slots = rep.max_slots.max(used as u32);
        let t0 = Instant::now();
        v.verify(&rows, &tokens[..used], &mut argmax[..used])?;
        let c = cost(v, t0);
        now += c;
        rep.compute_s += c;
        rep.steps += 1;
        for r in &rows {
            let i = r.agent;
            let drafts = &tokens[r.start + 1..r.start + r.len];
            let am = &argmax[r.start..r.start + r.len];
            let j = drafts.iter().zip(am).take_while(|(d, g)| d == g).count();
            let new = &mut newbuf[..j + 1];
            new[..j].copy_from_slice(&drafts[..j]);
            new[j] = am[j];
            let before = v.cache_len(i);
            let a = &mut agents[i];
            a.out.steps += 1;
            a.out.drafted += drafts.len() as u64;
            a.out.accepted += j as u64;
            let pushed = accept_tokens(a, new, workload, i, v, now);
            // The cache keeps the old last token and the accepted tokens before the new last.
            v.truncate(i, before - r.len + pushed.max(1))?;
            if let State::Stalled { until, .. } = a.state {
                a.state = State::Stalled {
                    until,
                    frozen: v.cache_len(i),
                };
            }
            if config != Config::BatchAr {
                budget.update(i, j as f64)?;
            }
        }
    }
    rep.makespan_s = now;
    rep.agents = agents.into_iter().map(|a| a.out).collect();
    rep.generated = rep.agents.iter().map(|a| a.tokens.len() as u64).sum();
    Ok(rep)
}

/// Appends `new` to agent `a`'s output one token at a time, stopping at a stop token, at
/// `max_tokens`, or after the token that completes a tool-call marker (then the agent stalls
/// from `now` for its sampled tool duration). Returns the tokens appended.
fn accept_tokens(
    a: &mut Agent,
    new: &[u32],
    w: &Workload,
    i: usize,
    v: &dyn Verifier,
    now: f64,
) -> usize {
    let spec = &w.agents[i];
    let mut pushed = 0;
    for &t in new {
        if v.is_stop(t) {
            a.state = State::Done;
            break;
        }
        a.seq.push(t);
        a.out.tokens.push(t);
        pushed += 1;
        if a.out.tokens.len() >= spec.max_tokens {
            a.state = State::Done;
            break;
        }
        if !spec.tool_markers.is_empty() {
            let new_from = a.text.len();
            v.append_text(t, &mut a.text);
            if let Some(end) = find_marker(&a.text, a.scan_from, new_from, &spec.tool_markers) {
                a.scan_from = end;
                if let Some(d) = w.tool_duration_s(i, a.out.tool_calls) {
                    a.out.tool_calls += 1;
                    a.state = State::Stalled {
                        until: now + d,
                        frozen: 0,
                    };
                    break;
                }
            }
        }
    }
    if a.state == State::Done {
        a.out.finish_s = now;
    }
    pushed
}

/// Each agent alone, one token per step through the same verifier: the non-speculative
/// greedy text every configuration must reproduce. Returns each agent's tokens (EOS
/// excluded, at most `max_tokens`).
pub fn greedy_reference(
    workload: &Workload,
    prompts: &[Vec<u32>],
    v: &mut dyn Verifier,
) -> Result<Vec<Vec<u32>>, AgentError> {
    let mut outs = Vec::with_capacity(prompts.len());
    for (i, (spec, pr)) in workload.agents.iter().zip(prompts).enumerate() {
        let mut out = Vec::with_capacity(spec.max_tokens);
        let mut t = v.prefill(i, pr)?;
        let mut am = [0u32];
        loop {
            if v.is_stop(t) {
                break;
            }
            out.push(t);
            if out.len() >= spec.max_tokens {
                break;
            }
            let row = BatchRow {
                agent: i,
                start: 0,
                len: 1,
            };
            v.verify(&[row], &[t], &mut am)?;
            t = am[0];
        }
        outs.push(out);
    }
    Ok(outs)
}
