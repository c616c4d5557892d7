//! The Llama-architecture model: hyper-parameters from the GGUF metadata and views of the
//! weights inside the memory-mapped (or read) file.
//!
//! Loading validates everything the forward pass relies on before anything is allocated (see
//! [`Model::from_file_with`]); each failure is a [`ModelError`] naming the key or tensor and
//! the value.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use crate::backend::WeightView;
use crate::gguf::{GgmlType, Gguf, GgufError, GgufFile, OpenError, Value};
use crate::limits::{self, BudgetError, MemoryBudget};
use crate::quant;
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Why a model could not be loaded.
#[derive(Debug)]
pub enum ModelError {
    /// The file is missing, unreadable, not a regular file or not GGUF.
    Open(OpenError),
    /// The bytes given to [`Model::from_bytes`] are not valid GGUF.
    Parse(GgufError),
    /// `general.architecture` is not `llama`.
    UnsupportedArch(String),
    /// A required metadata key is missing.
    MissingKey(String),
    /// A metadata value of the wrong type or out of its sane range.
    BadValue {
        /// The key.
        key: String,
        /// The value as found.
        value: String,
        /// What it must be.
        expected: String,
    },
    /// A required tensor is missing.
    MissingTensor(String),
    /// A tensor has an unexpected shape.
    BadShape {
        /// Tensor name.
        name: String,
        /// Expected dims (ggml order).
        expected: Vec<u64>,
        /// Actual dims.
        got: Vec<u64>,
    },
    /// A tensor's type is not one the engine computes with.
    UnsupportedType {
        /// Tensor name.
        name: String,
        /// Its type.
        ty: GgmlType,
    },
    /// A weight the forward pass reads directly (a norm) holds a NaN or an infinity.
    NonFinite {
        /// Tensor name.
        name: String,
        /// Index of the first non-finite element.
        index: usize,
        /// Its value.
        value: f32,
    },
    /// The embedding's rows and the tokenizer's vocabulary differ.
    VocabMismatch {
        /// Rows of `token_embd.weight`.
        rows: u64,
        /// Entries of `tokenizer.ggml.tokens`.
        tokens: usize,
    },
    /// The model's host data would exceed the memory budget.
    Memory(BudgetError),
    /// The tokenizer metadata is unusable.
    Tokenizer(TokenizerError),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(e) => write!(f, "{e}"),
            Self::Parse(e) => write!(f, "corrupt model: {e}"),
            Self::UnsupportedArch(a) => {
                write!(
                    f,
                    "unsupported architecture `{a}` (only `llama` is supported)"
                )
            }
            Self::MissingKey(k) => write!(f, "model metadata `{k}` missing"),
            Self::BadValue {
                key,
                value,
                expected,
            } => write!(f, "model metadata `{key}` = {value}: expected {expected}"),
            Self::MissingTensor(t) => write!(f, "model tensor `{t}` missing"),
            Self::BadShape {
                name,
                expected,
                got,
            } => write!(
                f,
                "tensor `{name}` has shape {got:?}, expected {expected:?}"
            ),
            Self::UnsupportedType { name, ty } => {
                write!(f, "tensor `{name}` has unsupported type {ty:?}")
            }
            Self::NonFinite { name, index, value } => {
                write!(f, "tensor `{name}` element {index} is {value}")
            }
            Self::VocabMismatch { rows, tokens } => write!(
                f,
                "tensor `token_embd.weight` has {rows} rows but `tokenizer.ggml.tokens` lists \
                 {tokens} tokens"
            ),
            Self::Memory(e) => write!(f, "model: {e}"),
            Self::Tokenizer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(e) => Some(e),
            Self::Parse(e) => Some(e),
            Self::Memory(e) => Some(e),
            Self::Tokenizer(e) => Some(e),
            _ => None,
        }
    }
}

/// Hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width.
    pub d_model: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention).
    pub n_kv_head: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Trained context length.
    pub context: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE rotated dimensions per head.
    pub rope_dims: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl Config {
    /// Key/value width (`n_kv_head * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_head * self.head_dim
    }
}

/// Where a weight matrix lies in the file.
#[derive(Clone, Copy, Debug)]
pub struct WeightRef {
    /// Element type.
    pub ty: GgmlType,
    /// Rows.
    pub n: usize,
    /// Columns.
    pub k: usize,
    start: usize,
    len: usize,
}

/// One transformer block's weights.
#[derive(Clone, Debug)]
pub struct Layer {
    /// Attention RMSNorm weight.
    pub attn_norm: Vec<f32>,
    /// Query projection (`d_model` rows).
    pub wq: WeightRef,
    /// Key projection (`kv_dim` rows).
    pub wk: WeightRef,
    /// Value projection (`kv_dim` rows).
    pub wv: WeightRef,
    /// Attention output projection.
    pub wo: WeightRef,
    /// Feed-forward RMSNorm weight.
    pub ffn_norm: Vec<f32>,
    /// SwiGLU gate (`d_ff` rows).
    pub gate: WeightRef,
    /// SwiGLU up (`d_ff` rows).
    pub up: WeightRef,
    /// Down projection (`d_model` rows of `d_ff`).
    pub down: WeightRef,
}

/// A loaded model: the mapped file, its hyper-parameters, weights and tokenizer.
pub struct Model {
    file: GgufFile,
    /// Hyper-parameters.
    pub config: Config,
    /// Token embedding (`vocab` rows of `d_model`).
    pub embed: WeightRef,
    /// Blocks.
    pub layers: Vec<Layer>,
    /// Final RMSNorm weight.
    pub output_norm: Vec<f32>,
    /// Output head (`vocab` rows); the embedding when the model ties them.
    pub output: WeightRef,
    /// Whether the output head is the embedding.
    pub tied_output: bool,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
}

/// How [`Model::load_with`] reads the file and how much memory it may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Map the file (the default: fast start, pages read as used) rather than read it into
    /// memory. See [`GgufFile`] for the hazard of a mapped file that shrinks while running.
    pub mmap: bool,
    /// Bytes the model's host data may take (the read file when `mmap` is off, the tokenizer,
    /// the norm weights); `None`: the machine's available memory at load time.
    pub memory_limit: Option<u64>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            mmap: true,
            memory_limit: None,
        }
    }
}

impl LoadOptions {
    fn budget(&self) -> MemoryBudget {
        self.memory_limit
            .map_or_else(MemoryBudget::available, MemoryBudget::with_limit)
    }
}

/// Typed access to the `llama.*` metadata keys: absent, mistyped and out-of-range values are
/// told apart, and every error names the key and the value.
struct Keys<'a> {
    h: &'a Gguf,
}

impl Keys<'_> {
    fn bad(key: &str, v: impl ToString, expected: impl Into<String>) -> ModelError {
        ModelError::BadValue {
            key: key.into(),
            value: v.to_string(),
            expected: expected.into(),
        }
    }

    /// A positive integer that fits in `usize`; `default` when absent (or an error when there
    /// is none).
    fn positive(&self, key: &str, default: Option<usize>) -> Result<usize, ModelError> {
        let Some(v) = self.h.get(key) else {
            return default.ok_or_else(|| ModelError::MissingKey(key.into()));
        };
        match v.as_u64().map(usize::try_from) {
            Some(Ok(n)) if n > 0 => Ok(n),
            Some(Ok(_)) => Err(Self::bad(key, v, "an integer > 0")),
            Some(Err(_)) => Err(Self::bad(key, v, "an integer this platform can index")),
            None => Err(Self::bad(key, v, "a non-negative integer")),
        }
    }

    /// A finite number > 0 (after rounding to f32); `default` when absent.
    fn positive_f32(&self, key: &str, default: f32) -> Result<f32, ModelError> {
        let Some(v) = self.h.get(key) else {
            return Ok(default);
        };
        match v.as_f64().map(|x| x as f32) {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            Some(_) => Err(Self::bad(key, v, "a finite number > 0")),
            None => Err(Self::bad(key, v, "a number")),
        }
    }

    /// `key`'s value, for a message about a value read before (with `default` when absent).
    fn value(&self, key: &str, default: usize) -> String {
        self.h.get(key).map_or_else(
            || format!("{default} (absent: the default)"),
            Value::to_string,
        )
    }
}

/// The block indices `N` of the tensors named `blk.N.*`.
fn blocks_present(h: &Gguf) -> BTreeSet<u64> {
    h.tensors
        .iter()
        .filter_map(|t| {
            let rest = t.name.strip_prefix("blk.")?;
            let (n, _) = rest.split_once('.')?;
            // Decimal digits only ("+1" and "01" are not block names llama.cpp writes).
            let canonical = !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n == "0" || !n.starts_with('0'));
            canonical.then(|| n.parse().ok()).flatten()
        })
        .collect()
}

/// Reads and checks the hyper-parameters (every key that the forward pass divides, indexes or
/// exponentiates by) against each other and against the blocks present in the file.
fn read_config(h: &Gguf, vocab: usize) -> Result<Config, ModelError> {
    let k = Keys { h };
    let d_model = k.positive("llama.embedding_length", None)?;
    let n_head = k.positive("llama.attention.head_count", None)?;
    if d_model % n_head != 0 {
        return Err(Keys::bad(
            "llama.attention.head_count",
            k.value("llama.attention.head_count", n_head),
            format!("a divisor of llama.embedding_length = {d_model}"),
        ));
    }
    let head_dim = d_model / n_head;
    if head_dim % 2 != 0 {
        return Err(Keys::bad(
            "llama.attention.head_count",
            k.value("llama.attention.head_count", n_head),
            format!(
                "a count giving an even head width (RoPE rotates pairs), not {d_model} / \
                 {n_head} = {head_dim}"
            ),
        ));
    }
    let n_kv_head = k.positive("llama.attention.head_count_kv", Some(n_head))?;
    if n_head % n_kv_head != 0 {
        return Err(Keys::bad(
            "llama.attention.head_count_kv",
            k.value("llama.attention.head_count_kv", n_kv_head),
            format!("a divisor of llama.attention.head_count = {n_head}"),
        ));
    }
    let rope_dims = k.positive("llama.rope.dimension_count", Some(head_dim))?;
    if rope_dims > head_dim || rope_dims % 2 != 0 {
        return Err(Keys::bad(
            "llama.rope.dimension_count",
            k.value("llama.rope.dimension_count", rope_dims),
            format!("an even count of at most the head width {head_dim}"),
        ));
    }
    let n_layer = k.positive("llama.block_count", None)?;
    let present = blocks_present(h);
    let n_present = present.last().map_or(0, |&b| b + 1);
    if n_layer as u64 != n_present {
        return Err(Keys::bad(
            "llama.block_count",
            k.value("llama.block_count", n_layer),
            format!("the number of blocks whose tensors the file holds ({n_present})"),
        ));
    }
    if let Some(missing) = (0..n_present).find(|b| !present.contains(b)) {
        // Blocks 0..n_present exist except this one: none of its tensors is in the file.
        return Err(ModelError::MissingTensor(format!("blk.{missing}.*")));
    }
    if let Some(v) = h.get("llama.vocab_size") {
        if v.as_u64() != Some(vocab as u64) {
            return Err(Keys::bad(
                "llama.vocab_size",
                v,
                format!("the rows of token_embd.weight ({vocab})"),
            ));
        }
    }
    Ok(Config {
        n_layer,
        d_model,
        n_head,
        n_kv_head,
        head_dim,
        d_ff: k.positive("llama.feed_forward_length", None)?,
        vocab,
        context: k.positive("llama.context_length", Some(2048))?,
        rope_theta: k.positive_f32("llama.rope.freq_base", 10_000.0)?,
        rope_dims,
        eps: k.positive_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)?,
    })
}

/// Host memory the loaded model takes besides the file: the blocks, their norm weights and
/// the tokenizer (its strings, maps and merges: at most about three copies of its metadata
/// plus per-entry overhead), with checked arithmetic.
fn host_bytes(c: &Config, h: &Gguf) -> Result<u64, BudgetError> {
    const WHAT: &str = "model host data";
    let u = |v: usize| v as u64;
    let array = |key: &str| h.get(key).and_then(Value::as_array).unwrap_or(&[]);
    let strings = |key: &str| -> (u64, u64) {
        let a = array(key);
        let bytes = a.iter().filter_map(Value::as_str).map(|s| u(s.len())).sum();
        (u(a.len()), bytes)
    };
    let (n_tok, tok_bytes) = strings("tokenizer.ggml.tokens");
    let (n_merge, merge_bytes) = strings("tokenizer.ggml.merges");
    let layers = limits::product(WHAT, &[u(c.n_layer), u(std::mem::size_of::<Layer>())])?;
    let norms = limits::product(WHAT, &[u(c.n_layer), 2, u(c.d_model), 4])?;
    let tokenizer = limits::sum(
        WHAT,
        &[
            limits::product(WHAT, &[3, tok_bytes])?,
            limits::product(WHAT, &[n_tok, 128])?,
            limits::product(WHAT, &[n_merge, 48])?,
            merge_bytes,
        ],
    )?;
    let output_norm = limits::product(WHAT, &[u(c.d_model), 4])?;
    limits::sum(WHAT, &[layers, norms, output_norm, tokenizer])
}

impl Model {
    /// Loads a model from a GGUF file (memory-mapped, limited to the available memory).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Loads a model from a GGUF file, mapped or read into memory as `opts` says.
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self, ModelError> {
        let budget = opts.budget();
        let file = if opts.mmap {
            GgufFile::open(path)
        } else {
            GgufFile::read_with(path, &budget)
        }
        .map_err(ModelError::Open)?;
        Self::from_file_with(file, &budget)
    }

    /// Loads a model from the bytes of a whole GGUF file (copied into an aligned buffer).
    pub fn from_bytes(data: &[u8]) -> Result<Self, ModelError> {
        let file = GgufFile::from_bytes(data).map_err(ModelError::Parse)?;
        Self::from_file_with(file, &MemoryBudget::available())
    }

    /// Builds a model from an opened GGUF file, within the available memory.
    pub fn from_file(file: GgufFile) -> Result<Self, ModelError> {
        Self::from_file_with(file, &MemoryBudget::available())
    }

    /// Builds a model from an opened GGUF file. Before anything is allocated it checks:
    /// the architecture; every hyper-parameter's type and range (widths and counts > 0, head
    /// counts dividing the width and each other, an even head width, RoPE dimensions even and
    /// within the head, finite positive RMS-norm epsilon and RoPE base); that
    /// `llama.block_count` equals the blocks whose tensors the file holds; that the
    /// embedding's rows equal `llama.vocab_size` and the tokenizer's vocabulary; every
    /// tensor's presence, shape and type; and the host memory against `budget`. The parser has
    /// already checked that the tensors lie inside the file without overlapping and that each
    /// type and shape accounts for its bytes. Last, the norm weights (read directly by the
    /// forward pass) must be finite.
    pub fn from_file_with(file: GgufFile, budget: &MemoryBudget) -> Result<Self, ModelError> {
        let h = &file.header;
        let arch_key = "general.architecture";
        let arch = h
            .get(arch_key)
            .ok_or_else(|| ModelError::MissingKey(arch_key.into()))?;
        let arch = arch
            .as_str()
            .ok_or_else(|| Keys::bad(arch_key, arch, "a string"))?;
        if arch != "llama" {
            return Err(ModelError::UnsupportedArch(arch.into()));
        }
        let embed_info = h
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let vocab = match embed_info.dims[..] {
            [_, rows] => usize::try_from(rows).ok(),
            _ => None,
        };
        let Some(vocab) = vocab else {
            return Err(ModelError::BadShape {
                name: "token_embd.weight".into(),
                expected: vec![embed_info.dims[0], 0],
                got: embed_info.dims.clone(),
            });
        };
        let config = read_config(h, vocab)?;
        let c = &config;
        let file_len = file.bytes().len();
        let mat = |name: &str, n: usize, k: usize| -> Result<WeightRef, ModelError> {
            let t = h
                .tensor(name)
                .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
            if t.dims != [k as u64, n as u64] {
                return Err(ModelError::BadShape {
                    name: name.into(),
                    expected: vec![k as u64, n as u64],
                    got: t.dims.clone(),
                });
            }
            let unsupported = || ModelError::UnsupportedType {
                name: name.into(),
                ty: t.ty,
            };
            let rb = quant::row_bytes(t.ty, k).ok_or_else(unsupported)?;
            // The parser checked the extent against the file; these conversions and this
            // bound only restate it in `usize`, so that `view` can never slice out of range.
            let start = usize::try_from(h.data_offset.saturating_add(t.offset));
            let len = n.checked_mul(rb);
            match (start, len) {
                (Ok(start), Some(len))
                    if len as u64 == t.size
                        && start.checked_add(len).is_some_and(|e| e <= file_len) =>
                {
                    Ok(WeightRef {
                        ty: t.ty,
                        n,
                        k,
                        start,
                        len,
                    })
                }
                _ => Err(unsupported()),
            }
        };
        let vec = |name: &str, n: usize| -> Result<Vec<f32>, ModelError> {
            let (t, data) = file
                .tensor(name)
                .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
            if t.dims != [n as u64] {
                return Err(ModelError::BadShape {
                    name: name.into(),
                    expected: vec![n as u64],
                    got: t.dims.clone(),
                });
            }
            if quant::row_bytes(t.ty, n) != Some(data.len()) {
                return Err(ModelError::UnsupportedType {
                    name: name.into(),
                    ty: t.ty,
                });
            }
            let mut v = vec![0f32; n];
            // The sizes were checked above; a type hetero-sme still refuses is unsupported.
            hetero_sme::dequantize_row(t.ty, data, &mut v).map_err(|_| {
                ModelError::UnsupportedType {
                    name: name.into(),
                    ty: t.ty,
                }
            })?;
            if let Some(index) = v.iter().position(|x| !x.is_finite()) {
                return Err(ModelError::NonFinite {
                    name: name.into(),
                    index,
                    value: v[index],
                });
            }
            Ok(v)
        };
        // Every matrix's shape and type, before anything is allocated.
        let (d_model, kv) = (c.d_model, c.kv_dim());
        for i in 0..c.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            for (name, n, k) in [
                ("attn_q", d_model, d_model),
                ("attn_k", kv, d_model),
                ("attn_v", kv, d_model),
                ("attn_output", d_model, d_model),
                ("ffn_gate", c.d_ff, d_model),
                ("ffn_up", c.d_ff, d_model),
                ("ffn_down", d_model, c.d_ff),
            ] {
                mat(&p(name), n, k)?;
            }
            for name in ["attn_norm", "ffn_norm"] {
                let name = p(name);
                if h.tensor(&name).is_none() {
                    return Err(ModelError::MissingTensor(name));
                }
            }
        }
        let embed = mat("token_embd.weight", vocab, d_model)?;
        let tied_output = h.tensor("output.weight").is_none();
        let output = if tied_output {
            embed
        } else {
            mat("output.weight", vocab, d_model)?
        };
        host_bytes(c, h)
            .and_then(|need| budget.check("model host data", need))
            .map_err(ModelError::Memory)?;
        let tokenizer = Tokenizer::from_gguf(h).map_err(ModelError::Tokenizer)?;
        if vocab != tokenizer.vocab_size() {
            return Err(ModelError::VocabMismatch {
                rows: vocab as u64,
                tokens: tokenizer.vocab_size(),
            });
        }
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: vec(&p("attn_norm"), d_model)?,
                wq: mat(&p("attn_q"), d_model, d_model)?,
                wk: mat(&p("attn_k"), kv, d_model)?,
                wv: mat(&p("attn_v"), kv, d_model)?,
                wo: mat(&p("attn_output"), d_model, d_model)?,
                ffn_norm: vec(&p("ffn_norm"), d_model)?,
                gate: mat(&p("ffn_gate"), c.d_ff, d_model)?,
                up: mat(&p("ffn_up"), c.d_ff, d_model)?,
                down: mat(&p("ffn_down"), d_model, c.d_ff)?,
            });
        }
        let output_norm = vec("output_norm.weight", d_model)?;
        Ok(Self {
            config,
            embed,
            layers,
            output_norm,
            output,
            tied_output,
            tokenizer,
            file,
        })
    }

    /// The bytes of a weight.
    pub fn view(&self, w: &WeightRef) -> WeightView<'_> {
        WeightView {
            ty: w.ty,
            n: w.n,
            k: w.k,
            data: &self.file.bytes()[w.start..w.start + w.len],
        }
    }

    /// The file (mapped or read).
    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}
