//! The profile: plain serde data a user writes by hand or `engine-min` measures, and its strict
//! JSON reader. Validation into the planner's form lives in `checked.rs`.

use core::fmt;
use serde::{Deserialize, Serialize};

/// One of the three processors of the SoC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The CPU (SME / vector kernels), computing in 16-row x 64-column tiles.
    Cpu,
    /// The GPU (OpenCL), latency linear in the number of rows.
    Gpu,
    /// The NPU (QNN HTP), static graphs at standard row counts.
    Npu,
}

impl Backend {
    /// All three backends, in index order.
    pub const ALL: [Backend; 3] = [Backend::Cpu, Backend::Gpu, Backend::Npu];

    /// Lower-case name as written in a profile: `cpu`, `gpu`, `npu`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
            Backend::Npu => "npu",
        }
    }

    /// Parses a name written in a profile (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name.trim()))
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Operand order of an NPU matmul (HeteroInfer's NPU-2): the NPU may run `A·W` or the
/// transposed product `Wᵀ·Aᵀ`, and the two can differ a lot in speed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// `out[M,N] = act[M,K] · w[K,N]`.
    #[default]
    ActivationFirst,
    /// `outᵀ[N,M] = wᵀ[N,K] · actᵀ[K,M]`.
    WeightFirst,
}

impl Order {
    /// Both orders, `ActivationFirst` first.
    pub const ALL: [Order; 2] = [Order::ActivationFirst, Order::WeightFirst];
}

/// Prefill (the prompt, many rows) or decode (one token, or a few draft tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Processing the prompt.
    Prefill,
    /// Generating.
    Decode,
}

impl Phase {
    /// Both phases, prefill first.
    pub const ALL: [Phase; 2] = [Phase::Prefill, Phase::Decode];

    /// The phase an entry point without a phase argument assumes for `m` rows: one row is a
    /// decode step, more rows a prefill. Say the phase (`plan_op_in`, `PlanTable::build_phase`)
    /// wherever it is known: a speculative decode step has several rows, and a prefill's LM head
    /// one.
    pub fn of_rows(m: u32) -> Phase {
        if m <= 1 {
            Phase::Decode
        } else {
            Phase::Prefill
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        })
    }
}

/// One measured latency: a matmul with weight `[k, n]` and `m` activation rows took `us`
/// microseconds on the backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyPoint {
    /// Reduction dimension (weight rows).
    pub k: u32,
    /// Output columns (weight columns).
    pub n: u32,
    /// Activation rows (sequence length, or draft tokens in decode).
    pub m: u32,
    /// Measured latency, microseconds (finite, > 0).
    pub us: f64,
    /// Operand order (only meaningful on the NPU; default `activation_first`).
    #[serde(default)]
    pub order: Order,
}

/// A data path of a backend: the code that runs in one phase (e.g. the NPU's integer GEMV for
/// decode, its FP16 static graphs for prefill), with its own latency points.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathProfile {
    /// Free-form name, reported with the plans that use it (default empty).
    #[serde(default)]
    pub name: String,
    /// The phase this path serves: `prefill`, `decode`, or absent for both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Latency points; at least one.
    pub points: Vec<LatencyPoint>,
}

/// Everything measured for one backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendProfile {
    /// `cpu`, `gpu` or `npu`; anything else is `ProfileError::UnknownBackend`.
    pub backend: String,
    /// Latency points of the backend's unnamed path, used in every phase that has no path of
    /// its own in `paths`.
    #[serde(default)]
    pub points: Vec<LatencyPoint>,
    /// Named data paths, at most one per phase (and one for both phases, unless `points` is
    /// given); see the crate README for which curve a plan uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathProfile>,
    /// Cost of synchronising with this backend's completion, paid once by every plan that uses
    /// it (0 for the backend the engine's thread drives; tens of µs for an offloaded NPU).
    #[serde(default)]
    pub sync_us: f64,
    /// Bandwidth at which this backend's inputs and outputs must be copied into / out of its own
    /// buffers, GB/s (`None` or absent: zero-copy on unified memory).
    #[serde(default)]
    pub copy_gbps: Option<f64>,
    /// Memory bandwidth this backend reaches streaming alone, GB/s: the solo term of the
    /// shared-bus roofline for splits (see `memory_gbps` and `PairProfile::concurrent_gbps`).
    #[serde(default)]
    pub bandwidth_gbps: Option<f64>,
    /// Bytes one weight element takes as this backend streams it (default 2: FP16; about 0.56
    /// for 4-bit blocks with FP16 scales). Only the shared-bus term uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_bytes: Option<f64>,
    /// The backend whose cores this one runs on (e.g. a GPU that is PoCL on the CPU:
    /// `"cpu"`). Splits between the two are costed as running one after the other unless a
    /// pair entry gives a measured `overlap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares_cores_with: Option<String>,
    /// NPU only: the row counts it holds prepared static graphs for.
    #[serde(default)]
    pub standard_m: Vec<u32>,
    /// NPU only: cost of preparing (finalizing) a graph for a new row count, µs. Absent: online
    /// preparation is not offered.
    #[serde(default)]
    pub graph_prepare_us: Option<f64>,
}

/// What running two backends at once costs beyond their solo times, measured or written for
/// one pair.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairProfile {
    /// The two backends, in either order.
    pub backends: [String; 2],
    /// Fixed cost of one split between them, µs (starting the second backend's part, joining,
    /// merging): paid by every plan that splits one op between the two. Default 0.
    #[serde(default)]
    pub split_us: f64,
    /// Total bandwidth the two reach streaming at the same time, GB/s (measured). Absent: the
    /// roofline from the solo bandwidths and `memory_gbps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_gbps: Option<f64>,
    /// Fraction of the shorter side's time that overlaps the longer one when both run: 1 =
    /// fully concurrent, 0 = one after the other. Measured as
    /// `(T_a + T_b − T_split) / min(T_a, T_b)`. Default 0 when one backend shares the other's
    /// cores, else 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<f64>,
}

/// A device profile: one entry per backend present, and what the backends share. Plain data;
/// read it with [`Profile::from_json`] (strict) and validate it once with [`Profile::check`].
///
#[doc = include_str!("../docs/profile-format.md")]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Free-form device name.
    #[serde(default)]
    pub device: String,
    /// Free-form notes (how it was measured, which figures were guessed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Least fraction of the best single backend's time a split must save to be planned
    /// (hysteresis; absent: [`DEFAULT_MIN_SPLIT_GAIN`]). Within `[0, 1)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_split_gain: Option<f64>,
    /// Bandwidth of the shared memory bus, GB/s: no two backends stream faster together.
    /// Absent: the faster backend's solo `bandwidth_gbps` (two processors are assumed not to
    /// add bandwidth unless the profile says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gbps: Option<f64>,
    /// One entry per backend present (each backend at most once).
    pub backends: Vec<BackendProfile>,
    /// Per pair of backends: split cost, concurrent bandwidth, overlap.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairProfile>,
}

/// The hysteresis a profile gets without `min_split_gain`: a split must predict 5% less time
/// than the best single backend.
pub const DEFAULT_MIN_SPLIT_GAIN: f64 = 0.05;

/// Why a profile's JSON text was not read. Lines and columns are 1-based, as serde_json counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// A field this schema does not have (a misspelling such as `sync_usec`, or a field of
    /// another version).
    UnknownField {
        /// The field as written.
        field: String,
        /// The fields allowed where it stands.
        expected: String,
        /// Line of the field.
        line: usize,
        /// Column of the closing quote of the field's name.
        column: usize,
    },
    /// Anything else the JSON reader refused: bad syntax, a missing field, a wrong type.
    Json {
        /// serde_json's description, without its position.
        message: String,
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::UnknownField {
                field,
                expected,
                line,
                column,
            } => write!(
                f,
                "line {line}, column {column}: unknown field `{field}` (expected {expected})"
            ),
            ParseError::Json {
                message,
                line,
                column,
            } => write!(f, "line {line}, column {column}: {message}"),
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    fn from_json(e: serde_json::Error) -> ParseError {
        let (line, column) = (e.line(), e.column());
        let text = e.to_string();
        // serde_json appends " at line L column C" to the message; keep the message alone.
        let message = match text.rfind(" at line ") {
            Some(i) => text[..i].to_string(),
            None => text,
        };
        // serde's derive reports `deny_unknown_fields` as "unknown field `X`, expected ...".
        if let Some(rest) = message.strip_prefix("unknown field `") {
            if let Some(end) = rest.find('`') {
                let expected = rest[end + 1..]
                    .trim_start_matches(',')
                    .trim()
                    .trim_start_matches("expected ")
                    .to_string();
                return ParseError::UnknownField {
                    field: rest[..end].to_string(),
                    expected,
                    line,
                    column,
                };
            }
        }
        ParseError::Json {
            message,
            line,
            column,
        }
    }
}

impl Profile {
    /// Reads a profile from JSON, strictly: every object refuses fields it does not have, and
    /// the error names the field and its line. Does not validate values: see
    /// [`Profile::check`].
    pub fn from_json(text: &str) -> Result<Profile, ParseError> {
        serde_json::from_str(text).map_err(ParseError::from_json)
    }
}
