//! The seeded trace generator: agents of a reasoning : code : tool mix, Poisson arrivals.

use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::workload::{
    AgentSpec, TaskKind, ToolSpec, Workload, WorkloadError, FORMAT_VERSION, MAX_AGENTS,
};

/// The tool-call marker the generated tool prompts teach the model to write.
pub const TOOL_MARKER: &str = "</tool_call>";

/// Generator settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceOptions {
    /// RNG seed (the same seed gives the same file).
    pub seed: u64,
    /// Number of agents.
    pub agents: usize,
    /// Weights of reasoning : code : tool (default 1:2:2).
    pub mix: [u32; 3],
    /// Mean time between arrivals, seconds (Poisson process; 0: all arrive at once).
    pub mean_interarrival_s: f64,
    /// Tokens each agent generates at most.
    pub max_tokens: usize,
    /// Tool durations of tool agents (log-uniform).
    pub tool: ToolSpec,
}

impl Default for TraceOptions {
    /// Seed 1, 4 agents, mix 1:2:2, 0.5 s between arrivals, 96 tokens, tools of 0.2–4 s (two
    /// calls at most): one decode step of SmolLM2-135M takes tens of milliseconds on this
    /// 2-core machine, so a stall lasts several to ~100 steps, the paper's [1, 100] s stalls
    /// scaled to its ~20x slower 8B model steps.
    fn default() -> Self {
        Self {
            seed: 1,
            agents: 4,
            mix: [1, 2, 2],
            mean_interarrival_s: 0.5,
            max_tokens: 96,
            tool: ToolSpec {
                min_ms: 200.0,
                max_ms: 4000.0,
                max_calls: 2,
            },
        }
    }
}

/// Why the generator refused its options.
#[derive(Clone, Debug, PartialEq)]
pub enum TraceError {
    /// A mix that is not `R:C:T` with whole numbers up to 1000, not all 0 (the text given).
    Mix(String),
    /// An agent count outside `1..=MAX_AGENTS`.
    Agents(usize),
    /// The mix weights are all zero.
    ZeroMix,
    /// A mean inter-arrival time that is negative or not finite.
    InterArrival(f64),
    /// The generated workload failed validation (options out of the format's ranges).
    Workload(WorkloadError),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("trace generator: ")?;
        match self {
            Self::Mix(s) => write!(f, "mix `{s}` is not R:C:T with whole numbers, not all 0"),
            Self::Agents(n) => write!(f, "agents must be in 1..={MAX_AGENTS}, got {n}"),
            Self::ZeroMix => f.write_str("the mix is all zero"),
            Self::InterArrival(v) => {
                write!(f, "mean inter-arrival must be finite and >= 0, got {v}")
            }
            Self::Workload(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Workload(e) => Some(e),
            _ => None,
        }
    }
}

/// Parses a mix written `R:C:T` (e.g. `1:2:2`).
pub fn parse_mix(s: &str) -> Result<[u32; 3], TraceError> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || TraceError::Mix(s.to_owned());
    if parts.len() != 3 {
        return Err(bad());
    }
    let mut m = [0u32; 3];
    for (o, p) in m.iter_mut().zip(&parts) {
        *o = p.trim().parse().map_err(|_| bad())?;
    }
    if m.iter().all(|&x| x == 0) || m.iter().any(|&x| x > 1000) {
        return Err(bad());
    }
    Ok(m)
}

const CITIES: &[&str] = &[
    "Paris", "Rome", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Quito", "Madrid", "Berlin",
];
const TOOLS: &[(&str, &str)] = &[
    ("get_weather", "city"),
    ("get_time", "city"),
    ("search_hotels", "city"),
    ("get_population", "city"),
];
const FUNCS: &[(&str, &str, &str)] = &[
    ("add", "a + b", "Return the sum of a and b."),
    ("sub", "a - b", "Return a minus b."),
    ("mul", "a * b", "Return the product of a and b."),
    ("max2", "a if a > b else b", "Return the larger of a and b."),
    (
        "min2",
        "a if a < b else b",
        "Return the smaller of a and b.",
    ),
    ("avg", "(a + b) / 2", "Return the mean of a and b."),
];
const QUESTIONS: &[&str] = &[
    "Why do leaves change colour in autumn?",
    "How does a bicycle stay upright while moving?",
    "Why is the sky blue during the day and red at sunset?",
    "What makes bread rise when it is baked?",
    "Why do cats purr, and what does it mean?",
    "How do bees find their way back to the hive?",
];

fn tool_prompt(rng: &mut StdRng) -> String {
    let (tool, arg) = TOOLS[rng.gen_range(0..TOOLS.len())];
    let mut s = String::from(
        "You are an assistant that answers by calling tools. Each call is one line.\n",
    );
    for _ in 0..3 {
        let c = CITIES[rng.gen_range(0..CITIES.len())];
        s += &format!(
            "User: {tool} for {c}\nAssistant: <tool_call>{{\"name\": \"{tool}\", \
             \"arguments\": {{\"{arg}\": \"{c}\"}}}}{TOOL_MARKER}\n"
        );
    }
    let c = CITIES[rng.gen_range(0..CITIES.len())];
    s += &format!("User: {tool} for {c}\nAssistant:");
    s
}

fn code_prompt(rng: &mut StdRng) -> String {
    let mut s = String::from("# Small Python helpers with docstrings and tests.\n\n");
    for _ in 0..3 {
        let (name, body, doc) = FUNCS[rng.gen_range(0..FUNCS.len())];
        s += &format!(
            "def {name}(a, b):\n    \"\"\"{doc}\"\"\"\n    return {body}\n\n\
             assert {name}(2, 3) == {name}(2, 3)\n\n"
        );
    }
    let (name, _, doc) = FUNCS[rng.gen_range(0..FUNCS.len())];
    s += &format!("def {name}_list(xs):\n    \"\"\"{doc} Applied over a list.\"\"\"\n");
    s
}

fn reasoning_prompt(rng: &mut StdRng) -> String {
    // ChatML (SmolLM2's template; the special tokens are parsed when the prompt is encoded):
    // a plain completion prompt makes the instruct model stop at once.
    let q = QUESTIONS[rng.gen_range(0..QUESTIONS.len())];
    format!("<|im_start|>user\n{q} Think step by step.<|im_end|>\n<|im_start|>assistant\n")
}

/// Generates a workload: each agent's kind drawn from `mix`, its prompt from templates of that
/// kind, arrivals a Poisson process (exponential gaps of mean `mean_interarrival_s`; the first
/// agent arrives at 0). Tool agents get [`TOOL_MARKER`] and `opts.tool`.
pub fn generate(opts: &TraceOptions) -> Result<Workload, TraceError> {
    if opts.agents == 0 || opts.agents > MAX_AGENTS {
        return Err(TraceError::Agents(opts.agents));
    }
    if opts.mix.iter().all(|&m| m == 0) {
        return Err(TraceError::ZeroMix);
    }
    if !(opts.mean_interarrival_s.is_finite() && opts.mean_interarrival_s >= 0.0) {
        return Err(TraceError::InterArrival(opts.mean_interarrival_s));
    }
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let total: u32 = opts.mix.iter().sum();
    let mut t = 0.0f64;
    let mut agents = Vec::with_capacity(opts.agents);
    for i in 0..opts.agents {
        if i > 0 && opts.mean_interarrival_s > 0.0 {
            // Exponential gap by inversion; 1 - u is in (0, 1] so the log is finite.
            let u: f64 = rng.gen();
            t += -(1.0 - u).ln() * opts.mean_interarrival_s;
        }
        let r = rng.gen_range(0..total);
        let kind = if r < opts.mix[0] {
            TaskKind::Reasoning
        } else if r < opts.mix[0] + opts.mix[1] {
            TaskKind::Code
        } else {
            TaskKind::Tool
        };
        let prompt = match kind {
            TaskKind::Reasoning => reasoning_prompt(&mut rng),
            TaskKind::Code => code_prompt(&mut rng),
            TaskKind::Tool => tool_prompt(&mut rng),
        };
        let tool = kind == TaskKind::Tool;
        agents.push(AgentSpec {
            name: format!("{}{i}", kind.name()),
            kind,
            prompt,
            // Milliseconds resolution keeps the file readable; it is what replays.
            arrival_s: (t * 1e3).round() / 1e3,
            max_tokens: opts.max_tokens,
            tool_markers: if tool {
                vec![TOOL_MARKER.into()]
            } else {
                vec![]
            },
            tool: tool.then_some(opts.tool),
        });
    }
    let w = Workload {
        version: FORMAT_VERSION,
        seed: opts.seed,
        agents,
    };
    w.validate().map_err(TraceError::Workload)?;
    Ok(w)
}
