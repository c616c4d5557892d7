//! Workload files: the agents of one run (prompt, task kind, arrival, output limit, tool-call
//! markers and tool durations), read from JSON and validated before anything runs.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Version number of the workload format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Most agents one workload may hold (the HAL allocator's capacity).
pub const MAX_AGENTS: usize = hetero_partition::MAX_AGENTS;
/// Longest tool duration accepted (10 minutes): anything longer is treated as a mistake.
pub const MAX_TOOL_MS: f64 = 600_000.0;
/// Latest arrival accepted (1 hour after the start).
pub const MAX_ARRIVAL_S: f64 = 3_600.0;
/// Most tokens one agent may ask for.
pub const MAX_TOKENS: usize = 100_000;

/// What an agent does; it decides how easy its output is to draft by prompt lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// Free reasoning: hard to draft.
    Reasoning,
    /// Structured code: easy to draft.
    Code,
    /// Tool calls (structured, repetitive): easy to draft, stalls on tools.
    Tool,
}

impl TaskKind {
    /// The lowercase name used in files.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Reasoning => "reasoning",
            TaskKind::Code => "code",
            TaskKind::Tool => "tool",
        }
    }
}

/// How long a tool runs: log-uniform in `[min_ms, max_ms]` (`min_ms == max_ms`: fixed).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Shortest duration, milliseconds (> 0).
    pub min_ms: f64,
    /// Longest duration, milliseconds (>= `min_ms`, <= [`MAX_TOOL_MS`]).
    pub max_ms: f64,
    /// Tool calls honoured per agent; later markers are ignored (0: markers never stall).
    pub max_calls: u32,
}

/// One agent of a workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// A label for reports.
    pub name: String,
    /// Task kind.
    pub kind: TaskKind,
    /// The prompt (plain text, encoded with the model's tokenizer, BOS added as the model
    /// asks).
    pub prompt: String,
    /// Arrival time, seconds after the start (>= 0).
    pub arrival_s: f64,
    /// Tokens to generate at most (>= 1).
    pub max_tokens: usize,
    /// Strings whose appearance in the agent's output starts a tool call (none: never).
    #[serde(default)]
    pub tool_markers: Vec<String>,
    /// Tool durations (required when `tool_markers` is not empty).
    #[serde(default)]
    pub tool: Option<ToolSpec>,
}

/// A whole workload file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Format version ([`FORMAT_VERSION`]).
    pub version: u32,
    /// Seed of the tool-duration samples (and of the generator, when generated).
    pub seed: u64,
    /// The agents, in any order.
    pub agents: Vec<AgentSpec>,
}

/// Why a workload was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadError {
    /// The file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        kind: io::ErrorKind,
        /// The operating system's error number, when it gave one.
        os_error: Option<i32>,
    },
    /// Not valid JSON, or not the expected structure (serde's error, with line and column).
    Malformed(JsonError),
    /// A format version this build does not read.
    Version(u32),
    /// No agents, or more than [`MAX_AGENTS`].
    AgentCount(usize),
    /// An agent field out of range.
    Field {
        /// Agent index.
        agent: usize,
        /// Field name.
        field: &'static str,
        /// What is wrong.
        why: FieldProblem,
    },
    /// An agent's prompt plus its output does not fit the context.
    PromptTooLong {
        /// Agent index.
        agent: usize,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Tokens the agent may generate.
        max_tokens: usize,
        /// Positions available per agent (context minus the verification slots).
        available: usize,
    },
}

/// What is wrong with one field of an agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldProblem {
    /// The prompt is empty.
    Empty,
    /// The prompt encodes to no tokens.
    NoTokens,
    /// `arrival_s` outside `[0, MAX_ARRIVAL_S]`.
    Arrival(f64),
    /// `max_tokens` outside `1..=MAX_TOKENS`.
    MaxTokens(usize),
    /// A tool marker is the empty string.
    EmptyMarker,
    /// `tool_markers` is set without a `tool`.
    MissingTool,
    /// A tool duration is NaN or infinite.
    NotFinite,
    /// A tool duration is negative.
    Negative {
        /// `min_ms`.
        min_ms: f64,
        /// `max_ms`.
        max_ms: f64,
    },
    /// `min_ms` is 0 (durations are log-uniform).
    ZeroMin,
    /// `max_ms` below `min_ms`.
    BelowMin {
        /// `max_ms`.
        max_ms: f64,
        /// `min_ms`.
        min_ms: f64,
    },
    /// `max_ms` above [`MAX_TOOL_MS`].
    TooLong(f64),
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("is empty"),
            Self::NoTokens => f.write_str("encodes to no tokens"),
            Self::Arrival(v) => write!(f, "must be in [0, {MAX_ARRIVAL_S}] s, got {v}"),
            Self::MaxTokens(v) => write!(f, "must be in 1..={MAX_TOKENS}, got {v}"),
            Self::EmptyMarker => f.write_str("holds an empty marker"),
            Self::MissingTool => f.write_str("is required when tool_markers is set"),
            Self::NotFinite => f.write_str("durations must be finite"),
            Self::Negative { min_ms, max_ms } => write!(
                f,
                "durations must not be negative (min_ms {min_ms}, max_ms {max_ms})"
            ),
            Self::ZeroMin => f.write_str("must be > 0 (durations are log-uniform)"),
            Self::BelowMin { max_ms, min_ms } => write!(f, "{max_ms} is below min_ms {min_ms}"),
            Self::TooLong(v) => write!(f, "{v} ms is absurd (limit {MAX_TOOL_MS} ms)"),
        }
    }
}

/// serde's JSON error, shared so that [`WorkloadError`] stays `Clone`; two are equal when
/// they are of one category at one line and column.
#[derive(Debug, Clone)]
pub struct JsonError(pub Arc<serde_json::Error>);

impl PartialEq for JsonError {
    fn eq(&self, other: &Self) -> bool {
        let key = |e: &serde_json::Error| (e.classify(), e.line(), e.column());
        key(&self.0) == key(&other.0)
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl WorkloadError {
    fn io(path: &Path, e: &io::Error) -> WorkloadError {
        WorkloadError::Io {
            path: path.to_path_buf(),
            kind: e.kind(),
            os_error: e.raw_os_error(),
        }
    }
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io {
                path,
                kind,
                os_error,
            } => {
                // The system's own wording when there is an error number, else the kind's.
                let e =
                    os_error.map_or_else(|| io::Error::from(*kind), io::Error::from_raw_os_error);
                write!(f, "workload file: {}: {e}", path.display())
            }
            Self::Malformed(e) => write!(f, "malformed workload: {e}"),
            Self::Version(v) => write!(
                f,
                "workload format version {v} is not supported (this build reads {FORMAT_VERSION})"
            ),
            Self::AgentCount(n) => write!(f, "a workload needs 1 to {MAX_AGENTS} agents, not {n}"),
            Self::Field { agent, field, why } => write!(f, "agent {agent}: `{field}` {why}"),
            Self::PromptTooLong {
                agent,
                prompt_tokens,
                max_tokens,
                available,
            } => write!(
                f,
                "agent {agent}: prompt of {prompt_tokens} tokens + {max_tokens} output tokens \
                 exceeds the {available} positions of the context"
            ),
        }
    }
}

impl std::error::Error for WorkloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Malformed(e) => Some(&*e.0),
            _ => None,
        }
    }
}

impl Workload {
    /// Parses and validates (structure and ranges) a workload from JSON text.
    pub fn from_json(text: &str) -> Result<Workload, WorkloadError> {
        let w: Workload = serde_json::from_str(text)
            .map_err(|e| WorkloadError::Malformed(JsonError(Arc::new(e))))?;
        w.validate()?;
        Ok(w)
    }

    /// Reads and validates a workload file.
    pub fn read(path: impl AsRef<Path>) -> Result<Workload, WorkloadError> {
        let p = path.as_ref();
        let text = std::fs::read_to_string(p).map_err(|e| WorkloadError::io(p, &e))?;
        Workload::from_json(&text)
    }

    /// The workload as pretty JSON (floats print so that they read back identically).
    pub fn to_json(&self) -> String {
        // Serializing plain data to a String cannot fail; fall back to an empty object anyway
        // rather than panic.
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into()) + "\n"
    }

    /// Writes the workload as JSON.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), WorkloadError> {
        let p = path.as_ref();
        std::fs::write(p, self.to_json()).map_err(|e| WorkloadError::io(p, &e))
    }

    /// Checks every range that does not need the model.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.version != FORMAT_VERSION {
            return Err(WorkloadError::Version(self.version));
        }
        if self.agents.is_empty() || self.agents.len() > MAX_AGENTS {
            return Err(WorkloadError::AgentCount(self.agents.len()));
        }
        for (i, a) in self.agents.iter().enumerate() {
            let bad = |field: &'static str, why: FieldProblem| WorkloadError::Field {
                agent: i,
                field,
                why,
            };
            if a.prompt.is_empty() {
                return Err(bad("prompt", FieldProblem::Empty));
            }
            if !(a.arrival_s.is_finite() && (0.0..=MAX_ARRIVAL_S).contains(&a.arrival_s)) {
                return Err(bad("arrival_s", FieldProblem::Arrival(a.arrival_s)));
            }
            if a.max_tokens == 0 || a.max_tokens > MAX_TOKENS {
                return Err(bad("max_tokens", FieldProblem::MaxTokens(a.max_tokens)));
            }
            if a.tool_markers.iter().any(|m| m.is_empty()) {
                return Err(bad("tool_markers", FieldProblem::EmptyMarker));
            }
            match (&a.tool, a.tool_markers.is_empty()) {
                (None, false) => return Err(bad("tool", FieldProblem::MissingTool)),
                (Some(t), _) => {
                    if !t.min_ms.is_finite() || !t.max_ms.is_finite() {
                        return Err(bad("tool", FieldProblem::NotFinite));
                    }
                    if t.min_ms < 0.0 || t.max_ms < 0.0 {
                        return Err(bad(
                            "tool",
                            FieldProblem::Negative {
                                min_ms: t.min_ms,
                                max_ms: t.max_ms,
                            },
                        ));
                    }
                    if t.min_ms == 0.0 {
                        return Err(bad("tool.min_ms", FieldProblem::ZeroMin));
                    }
                    if t.max_ms < t.min_ms {
                        return Err(bad(
                            "tool.max_ms",
                            FieldProblem::BelowMin {
                                max_ms: t.max_ms,
                                min_ms: t.min_ms,
                            },
                        ));
                    }
                    if t.max_ms > MAX_TOOL_MS {
                        return Err(bad("tool.max_ms", FieldProblem::TooLong(t.max_ms)));
                    }
                }
                (None, true) => {}
            }
        }
        Ok(())
    }

    /// Checks that each agent's prompt (`prompt_tokens[i]` tokens) plus its output plus one
    /// verification batch (`slots`) fits `context` positions.
    pub fn check_context(
        &self,
        prompt_tokens: &[usize],
        context: usize,
        slots: usize,
    ) -> Result<(), WorkloadError> {
        let available = context.saturating_sub(slots);
        for (i, (a, &p)) in self.agents.iter().zip(prompt_tokens).enumerate() {
            if p == 0 {
                return Err(WorkloadError::Field {
                    agent: i,
                    field: "prompt",
                    why: FieldProblem::NoTokens,
                });
            }
            if p + a.max_tokens > available {
                return Err(WorkloadError::PromptTooLong {
                    agent: i,
                    prompt_tokens: p,
                    max_tokens: a.max_tokens,
                    available,
                });
            }
        }
        Ok(())
    }

    /// Duration in seconds of agent `agent`'s tool call number `call` (0-based): log-uniform
    /// in its [`ToolSpec`], drawn from a generator seeded by (workload seed, agent, call), so a
    /// replay draws the same durations whatever the schedule. `None` when the agent has no
    /// tool or the call is past `max_calls`.
    pub fn tool_duration_s(&self, agent: usize, call: u32) -> Option<f64> {
        let t = self.agents.get(agent)?.tool?;
        if call >= t.max_calls {
            return None;
        }
        let mix = self.seed
            ^ (agent as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (u64::from(call) + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let mut rng = StdRng::seed_from_u64(mix);
        let u: f64 = rng.gen();
        let (lo, hi) = (t.min_ms.ln(), t.max_ms.ln());
        Some((lo + u * (hi - lo)).exp() / 1e3)
    }
}
