//! The Llama-architecture model: hyper-parameters from the GGUF metadata and views of the
//! weights inside the memory-mapped file.

use std::fmt;
use std::path::Path;

use crate::backend::WeightView;
use crate::gguf::{GgmlType, GgufFile, OpenError, Value};
use crate::quant;
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Why a model could not be loaded.
#[derive(Debug)]
pub enum ModelError {
    /// The file is missing, unreadable or not GGUF.
    Open(OpenError),
    /// `general.architecture` is not `llama`.
    UnsupportedArch(String),
    /// A required metadata key is missing or mistyped.
    MissingKey(String),
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
    /// Hyper-parameters that do not fit together (e.g. heads not dividing the width).
    BadConfig(String),
    /// The tokenizer metadata is unusable.
    Tokenizer(TokenizerError),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(e) => write!(f, "{e}"),
            Self::UnsupportedArch(a) => {
                write!(
                    f,
                    "unsupported architecture `{a}` (only `llama` is supported)"
                )
            }
            Self::MissingKey(k) => write!(f, "model metadata `{k}` missing or mistyped"),
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
            Self::BadConfig(s) => write!(f, "inconsistent model hyper-parameters: {s}"),
            Self::Tokenizer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ModelError {}

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

impl Model {
    /// Loads a model from a GGUF file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let file = GgufFile::open(path).map_err(ModelError::Open)?;
        Self::from_file(file)
    }

    /// Builds a model from an opened GGUF file.
    pub fn from_file(file: GgufFile) -> Result<Self, ModelError> {
        let h = &file.header;
        let arch = h
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| ModelError::MissingKey("general.architecture".into()))?;
        if arch != "llama" {
            return Err(ModelError::UnsupportedArch(arch.into()));
        }
        let u = |k: &str| -> Result<usize, ModelError> {
            h.get(&format!("llama.{k}"))
                .and_then(Value::as_u64)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| ModelError::MissingKey(format!("llama.{k}")))
        };
        let d_model = u("embedding_length")?;
        let n_head = u("attention.head_count")?;
        let n_kv_head = u("attention.head_count_kv").unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || d_model % n_head != 0 || n_head % n_kv_head != 0 {
            return Err(ModelError::BadConfig(format!(
                "width {d_model}, heads {n_head}, kv heads {n_kv_head}"
            )));
        }
        let head_dim = d_model / n_head;
        let rope_dims = u("rope.dimension_count").unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(ModelError::BadConfig(format!("rope dims {rope_dims}")));
        }
        let f = |k: &str, d: f32| {
            h.get(&format!("llama.{k}"))
                .and_then(Value::as_f64)
                .map_or(d, |v| v as f32)
        };
        let tokenizer = Tokenizer::from_gguf(h).map_err(ModelError::Tokenizer)?;
        let embed_info = h
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let vocab = embed_info.dims.get(1).copied().unwrap_or(0) as usize;
        let config = Config {
            n_layer: u("block_count")?,
            d_model,
            n_head,
            n_kv_head,
            head_dim,
            d_ff: u("feed_forward_length")?,
            vocab,
            context: u("context_length").unwrap_or(2048),
            rope_theta: f("rope.freq_base", 10_000.0),
            rope_dims,
            eps: f("attention.layer_norm_rms_epsilon", 1e-5),
        };
        if vocab != tokenizer.vocab_size() {
            return Err(ModelError::BadConfig(format!(
                "embedding has {vocab} rows, tokenizer {} tokens",
                tokenizer.vocab_size()
            )));
        }
        let c = &config;
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
            let rb = quant::row_bytes(t.ty, k).ok_or_else(|| ModelError::UnsupportedType {
                name: name.into(),
                ty: t.ty,
            })?;
            Ok(WeightRef {
                ty: t.ty,
                n,
                k,
                start: (h.data_offset + t.offset) as usize,
                len: n * rb,
            })
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
            quant::dequantize_row(t.ty, data, &mut v);
            Ok(v)
        };
        let kv = c.kv_dim();
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
        let embed = mat("token_embd.weight", vocab, d_model)?;
        let tied_output = h.tensor("output.weight").is_none();
        let output = if tied_output {
            embed
        } else {
            mat("output.weight", vocab, d_model)?
        };
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

    /// The mapped file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }
}
