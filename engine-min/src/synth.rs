//! Synthetic Llama-architecture GGUF files at real model shapes: seeded random weights, a real
//! tokenizer, every type the project computes. **For timing and for correctness against the
//! reference forward pass, not for text**: the weights are noise, so the "text" is too.
//!
//! The shapes are the models users run ([`Shape`]); the types are one GGUF block type for
//! every matrix, or llama.cpp's Q4_K_M mix ([`SynthType`]). Weights are drawn per row from a
//! seeded generator keyed by (seed, tensor, row), so a file is the same bytes on any thread
//! count, with a standard deviation of `1/sqrt(k)` for a row of `k` values: a matmul of an
//! RMS-normed input (root mean square ~1) then gives outputs of standard deviation ~1, and the
//! residual stream grows only like the square root of the layer count, so activations stay
//! finite through every layer, in FP16 too. Norm weights are F32, near 1.
//!
//! The file is written streaming ([`synth`]): the header and tensor infos first (every size is
//! known from the shape), then each tensor's rows generated and quantized chunk by chunk on a
//! [`ThreadPool`] with hetero-sme's quantizers; memory is a few chunk buffers, never the file.
//! It goes to a temporary name in the output's directory and is renamed at the end; on any
//! failure the temporary file is removed, so no partial file is ever left.

use std::fmt;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hetero_sme::{quantize_row, GgmlType, ThreadPool};

use crate::gguf::{self, GgufFile, TensorEntry, Value};
use crate::tokenizer::Tokenizer;

/// A named model shape (the hyper-parameters of a real model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// The name `--shape` takes.
    pub name: &'static str,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Whether the output head reuses the token embedding (no `output.weight`).
    pub tied: bool,
    /// `llama.context_length`.
    pub context: u32,
    /// `llama.rope.freq_base`.
    pub rope_base: f32,
    /// `llama.attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
}

/// The shapes `synth` knows, as the real models have them.
pub const SHAPES: [Shape; 4] = [
    // SmolLM2-135M: the model the project ships.
    Shape {
        name: "smollm2-135m",
        d_model: 576,
        n_layer: 30,
        n_head: 9,
        n_kv_head: 3,
        d_ff: 1536,
        tied: true,
        context: 8192,
        rope_base: 100_000.0,
        rms_eps: 1e-5,
    },
    // Llama-3.2-1B.
    Shape {
        name: "llama-1b",
        d_model: 2048,
        n_layer: 16,
        n_head: 32,
        n_kv_head: 8,
        d_ff: 8192,
        tied: true,
        context: 131_072,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
    },
    // Llama-3.2-3B.
    Shape {
        name: "llama-3b",
        d_model: 3072,
        n_layer: 28,
        n_head: 24,
        n_kv_head: 8,
        d_ff: 8192,
        tied: true,
        context: 131_072,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
    },
    // Llama-3(.1)-8B.
    Shape {
        name: "llama-8b",
        d_model: 4096,
        n_layer: 32,
        n_head: 32,
        n_kv_head: 8,
        d_ff: 14_336,
        tied: false,
        context: 131_072,
        rope_base: 500_000.0,
        rms_eps: 1e-5,
    },
];

impl Shape {
    /// The shape named `name`.
    pub fn from_name(name: &str) -> Option<Shape> {
        SHAPES.iter().copied().find(|s| s.name == name)
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_head
    }

    /// Width of the keys and values.
    pub fn kv_dim(&self) -> usize {
        self.head_dim() * self.n_kv_head
    }
}

/// The weight types of a synthetic file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthType {
    /// Every matrix (the token embedding and output head included) in this type.
    Pure(GgmlType),
    /// llama.cpp's Q4_K_M mix: Q4_K, except Q6_K for the output head (the token embedding when
    /// tied) and for `attn_v` and `ffn_down` of the layers `use_more_bits` picks.
    Q4KM,
}

/// The names `--type` takes, with their types.
pub const TYPES: [(&str, SynthType); 10] = [
    ("f16", SynthType::Pure(GgmlType::F16)),
    ("q4_0", SynthType::Pure(GgmlType::Q4_0)),
    ("q4_1", SynthType::Pure(GgmlType::Q4_1)),
    ("q5_0", SynthType::Pure(GgmlType::Q5_0)),
    ("q5_1", SynthType::Pure(GgmlType::Q5_1)),
    ("q8_0", SynthType::Pure(GgmlType::Q8_0)),
    ("q4_k", SynthType::Pure(GgmlType::Q4K)),
    ("q5_k", SynthType::Pure(GgmlType::Q5K)),
    ("q6_k", SynthType::Pure(GgmlType::Q6K)),
    ("q4_k_m", SynthType::Q4KM),
];

impl SynthType {
    /// The type named `name` (one of [`TYPES`]).
    pub fn from_name(name: &str) -> Option<SynthType> {
        TYPES.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
    }

    /// Its `--type` name.
    pub fn name(self) -> &'static str {
        TYPES
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("?", |(n, _)| n)
    }

    /// llama.cpp's `general.file_type` code (`LLAMA_FTYPE_MOSTLY_*`; the pure K-quants as
    /// their `_S` mixes, the closest code).
    pub fn file_type(self) -> u32 {
        match self {
            SynthType::Pure(t) => match t {
                GgmlType::F16 => 1,
                GgmlType::Q4_0 => 2,
                GgmlType::Q4_1 => 3,
                GgmlType::Q8_0 => 7,
                GgmlType::Q5_0 => 8,
                GgmlType::Q5_1 => 9,
                GgmlType::Q4K => 14,
                GgmlType::Q5K => 16,
                GgmlType::Q6K => 18,
                _ => 0,
            },
            SynthType::Q4KM => 15,
        }
    }

    /// The type of the matrix `name` (`layer` of `layers`; `None` for the embedding and
    /// output head).
    fn pick(self, name: &str, layer: Option<(usize, usize)>, tied: bool) -> GgmlType {
        match self {
            SynthType::Pure(t) => t,
            SynthType::Q4KM => {
                let head = name == "output.weight" || (tied && name == "token_embd.weight");
                let more = name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight");
                match layer {
                    _ if head => GgmlType::Q6K,
                    Some((i, n)) if more && use_more_bits(i, n) => GgmlType::Q6K,
                    _ => GgmlType::Q4K,
                }
            }
        }
    }
}

/// llama.cpp's rule for the layers where Q4_K_M spends more bits: the first and last eighth
/// and every third one between.
pub fn use_more_bits(layer: usize, layers: usize) -> bool {
    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2
}

/// What `synth` makes.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// The shape name (one of [`SHAPES`]).
    pub shape: String,
    /// The type name (one of [`TYPES`]).
    pub ty: String,
    /// Blocks to write (default: the shape's); 1 ..= the shape's.
    pub layers: Option<usize>,
    /// Seed of the weights.
    pub seed: u64,
    /// A GGUF file whose tokenizer (every `tokenizer.*` key) is copied.
    pub tokenizer: PathBuf,
    /// The output file.
    pub out: PathBuf,
    /// Replace an existing output.
    pub force: bool,
}

/// Why `synth` refused or failed. Nothing is left at the output path in any case.
#[derive(Debug)]
pub enum SynthError {
    /// `--shape` names no shape.
    UnknownShape(String),
    /// `--type` names no type.
    UnknownType(String),
    /// A matrix's rows cannot hold whole blocks of its type (e.g. K-quants' 256-value
    /// super-blocks in SmolLM2's 576-wide rows).
    TypeDoesNotFit {
        /// The shape.
        shape: &'static str,
        /// The block type.
        ty: GgmlType,
        /// The tensor.
        tensor: String,
        /// Its row length.
        width: usize,
        /// The type's block length.
        block: usize,
    },
    /// `--layers` is 0 or above the shape's.
    BadLayers {
        /// The count asked for.
        got: usize,
        /// The shape's.
        max: usize,
    },
    /// The output exists and `--force` was not given.
    Exists(PathBuf),
    /// The output cannot be written (its directory is missing or read-only, it is a
    /// directory, ...).
    Unwritable(PathBuf, io::Error),
    /// The tokenizer file cannot be opened or parsed.
    TokenizerFile(PathBuf, String),
    /// The tokenizer file holds no usable tokenizer.
    NoTokenizer(PathBuf, String),
    /// Writing failed part-way (the partial file was removed).
    Io(PathBuf, io::Error),
    /// A quantizer refused a row (cannot happen for the generated values; reported, not
    /// hidden).
    Quantize(String),
}

impl fmt::Display for SynthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownShape(s) => {
                let names: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
                write!(f, "unknown shape `{s}` (shapes: {})", names.join(", "))
            }
            Self::UnknownType(t) => {
                let names: Vec<&str> = TYPES.iter().map(|t| t.0).collect();
                write!(f, "unknown type `{t}` (types: {})", names.join(", "))
            }
            Self::TypeDoesNotFit {
                shape,
                ty,
                tensor,
                width,
                block,
            } => write!(
                f,
                "{shape} cannot hold {}: `{tensor}` has {width}-value rows, not a multiple of \
                 its {block}-value blocks",
                ty.name()
            ),
            Self::BadLayers { got, max } => {
                write!(
                    f,
                    "--layers {got} is outside 1..={max} (the shape's blocks)"
                )
            }
            Self::Exists(p) => write!(f, "{} exists (--force replaces it)", p.display()),
            Self::Unwritable(p, e) => write!(f, "cannot write {}: {e}", p.display()),
            Self::TokenizerFile(p, e) => {
                write!(f, "cannot read the tokenizer file {}: {e}", p.display())
            }
            Self::NoTokenizer(p, e) => {
                write!(f, "{} holds no usable tokenizer: {e}", p.display())
            }
            Self::Io(p, e) => write!(
                f,
                "writing {} failed (nothing was left behind): {e}",
                p.display()
            ),
            Self::Quantize(e) => write!(f, "quantizing a row failed: {e}"),
        }
    }
}

impl std::error::Error for SynthError {}

/// What a finished `synth` wrote.
#[derive(Debug, Clone)]
pub struct SynthReport {
    /// The file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Tensors written.
    pub tensors: usize,
    /// Vocabulary size (the tokenizer's).
    pub vocab: usize,
    /// Blocks written.
    pub layers: usize,
}

/// One tensor of the plan: name, dims (innermost first), type, and how its values are drawn.
struct Planned {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    fill: Fill,
}

#[derive(Clone, Copy)]
enum Fill {
    /// Standard deviation `1/sqrt(row length)`, mean 0.
    Matrix,
    /// Norm weights: 1 ± 0.1 (uniform).
    Norm,
}

impl Planned {
    fn row_len(&self) -> usize {
        self.dims[0] as usize
    }
    fn rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }
    fn row_bytes(&self) -> usize {
        // Checked in `plan`: every row holds whole blocks.
        self.ty.row_bytes(self.row_len()).unwrap_or(0)
    }
    fn bytes(&self) -> u64 {
        self.row_bytes() as u64 * self.rows() as u64
    }
}

/// The tensors of a file, in llama.cpp's order, with their types; refuses a type the widths
/// cannot hold.
fn plan(
    shape: &Shape,
    ty: SynthType,
    layers: usize,
    vocab: usize,
) -> Result<Vec<Planned>, SynthError> {
    let (d, kv, ff) = (
        shape.d_model as u64,
        shape.kv_dim() as u64,
        shape.d_ff as u64,
    );
    let mut out = Vec::new();
    let mut mat = |name: String, k: u64, n: u64, layer: Option<(usize, usize)>| {
        let t = ty.pick(&name, layer, shape.tied);
        out.push(Planned {
            name,
            dims: vec![k, n],
            ty: t,
            fill: Fill::Matrix,
        });
    };
    mat("token_embd.weight".into(), d, vocab as u64, None);
    for i in 0..layers {
        let at = Some((i, layers));
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        mat(p("attn_q"), d, d, at);
        mat(p("attn_k"), d, kv, at);
        mat(p("attn_v"), d, kv, at);
        mat(p("attn_output"), d, d, at);
        mat(p("ffn_gate"), d, ff, at);
        mat(p("ffn_up"), d, ff, at);
        mat(p("ffn_down"), ff, d, at);
    }
    if !shape.tied {
        mat("output.weight".into(), d, vocab as u64, None);
    }
    for t in &out {
        let block = t.ty.block().map_or(1, |b| b.0);
        if t.row_len() % block != 0 {
            return Err(SynthError::TypeDoesNotFit {
                shape: shape.name,
                ty: t.ty,
                tensor: t.name.clone(),
                width: t.row_len(),
                block,
            });
        }
    }
    let norm = |name: String| Planned {
        name,
        dims: vec![d],
        ty: GgmlType::F32,
        fill: Fill::Norm,
    };
    // Each block's norms before its matrices, the output norm before the output head (the
    // order does not matter to a loader; this one keeps a dump grouped by block).
    let mut all = Vec::with_capacity(out.len() + 2 * layers + 1);
    let mut it = out.into_iter();
    all.extend(it.next());
    for i in 0..layers {
        all.push(norm(format!("blk.{i}.attn_norm.weight")));
        all.push(norm(format!("blk.{i}.ffn_norm.weight")));
        all.extend(it.by_ref().take(7));
    }
    all.push(norm("output_norm.weight".into()));
    all.extend(it);
    Ok(all)
}

/// The seeded generator of one row: SplitMix64, seeded from (seed, tensor, row).
struct RowRng(u64);

impl RowRng {
    fn new(seed: u64, tensor: usize, row: usize) -> Self {
        let mut r = RowRng(seed ^ 0x9e37_79b9_7f4a_7c15);
        r.0 =
            r.0.wrapping_add((tensor as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9));
        r.next();
        r.0 =
            r.0.wrapping_add((row as u64).wrapping_mul(0x94d0_49bb_1331_11eb));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A value of mean 0 and variance 1, near-normal: the sum of four 16-bit uniforms (Irwin-Hall,
    /// tails cut at ±3.46): one generator call a value, where Box-Muller would cost a log and a
    /// cosine, and an 8B file draws 7.5 billion of them.
    fn std_normal(&mut self) -> f32 {
        let r = self.next();
        let s: u32 = (0..4).map(|i| ((r >> (16 * i)) & 0xffff) as u32).sum();
        // Each 16-bit uniform has mean 32767.5 and variance (65536² − 1) / 12.
        const MEAN: f32 = 4.0 * 32_767.5;
        const SD: f32 = 37_837.23; // sqrt(4 · (65536² − 1) / 12)
        (s as f32 - MEAN) / SD
    }
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Fills `row` (row `r` of tensor `t`).
fn fill_row(seed: u64, t: usize, r: usize, fill: Fill, row: &mut [f32]) {
    let mut rng = RowRng::new(seed, t, r);
    match fill {
        Fill::Matrix => {
            let sd = 1.0 / (row.len() as f32).sqrt();
            row.iter_mut().for_each(|v| *v = sd * rng.std_normal());
        }
        Fill::Norm => row.iter_mut().for_each(|v| *v = 1.0 + 0.1 * rng.uniform()),
    }
}

/// Bytes each chunk of rows takes before it is written (a few MiB: big enough to spread over
/// the threads, small enough that memory stays flat).
const CHUNK_BYTES: usize = 8 << 20;

/// The metadata of a file: the Llama keys of `shape`, then the tokenizer's keys as found.
fn metadata(
    shape: &Shape,
    ty: SynthType,
    layers: usize,
    seed: u64,
    vocab: usize,
    tokenizer: Vec<(String, Value)>,
) -> Vec<(String, Value)> {
    let u = |v: usize| Value::U32(v as u32);
    let mut m: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("llama".into())),
        ("general.type".into(), Value::String("model".into())),
        (
            "general.name".into(),
            Value::String(format!(
                "synth {} {} seed {seed} (random weights: for timing, not text)",
                shape.name,
                ty.name()
            )),
        ),
        ("llama.block_count".into(), u(layers)),
        ("llama.context_length".into(), Value::U32(shape.context)),
        ("llama.embedding_length".into(), u(shape.d_model)),
        ("llama.feed_forward_length".into(), u(shape.d_ff)),
        ("llama.attention.head_count".into(), u(shape.n_head)),
        ("llama.attention.head_count_kv".into(), u(shape.n_kv_head)),
        ("llama.rope.freq_base".into(), Value::F32(shape.rope_base)),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(shape.rms_eps),
        ),
        ("general.file_type".into(), Value::U32(ty.file_type())),
        ("llama.vocab_size".into(), u(vocab)),
        ("llama.rope.dimension_count".into(), u(shape.head_dim())),
    ];
    m.extend(tokenizer);
    m.push(("general.quantization_version".into(), Value::U32(2)));
    m
}

/// Reads every `tokenizer.*` key of `path` and checks that they make a tokenizer; returns the
/// keys and the vocabulary size.
fn read_tokenizer(path: &Path) -> Result<(Vec<(String, Value)>, usize), SynthError> {
    let file =
        GgufFile::open(path).map_err(|e| SynthError::TokenizerFile(path.into(), e.to_string()))?;
    let tok = Tokenizer::from_gguf(&file.header)
        .map_err(|e| SynthError::NoTokenizer(path.into(), e.to_string()))?;
    let keys = file
        .header
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .cloned()
        .collect();
    Ok((keys, tok.vocab_size()))
}

/// The temporary file beside the output; removed on drop unless [`Partial::finish`] renamed it.
struct Partial {
    tmp: PathBuf,
    done: bool,
}

impl Partial {
    fn finish(mut self, out: &Path) -> io::Result<()> {
        fs::rename(&self.tmp, out)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// The shape, type and layer count `opts` asks for, checked.
pub fn resolve(opts: &SynthOptions) -> Result<(Shape, SynthType, usize), SynthError> {
    let shape = Shape::from_name(&opts.shape)
        .ok_or_else(|| SynthError::UnknownShape(opts.shape.clone()))?;
    let ty =
        SynthType::from_name(&opts.ty).ok_or_else(|| SynthError::UnknownType(opts.ty.clone()))?;
    let layers = opts.layers.unwrap_or(shape.n_layer);
    if layers == 0 || layers > shape.n_layer {
        return Err(SynthError::BadLayers {
            got: layers,
            max: shape.n_layer,
        });
    }
    Ok((shape, ty, layers))
}

/// Writes the file `opts` describes, quantizing on `pool`. Every check (shape, type, widths,
/// layers, the output, the tokenizer) runs before the output's temporary file is created; a
/// failure after that removes it.
pub fn synth(opts: &SynthOptions, pool: &ThreadPool) -> Result<SynthReport, SynthError> {
    let (shape, ty, layers) = resolve(opts)?;
    // Widths first (with a placeholder vocabulary: the embedding's rows are d_model wide
    // whatever the vocabulary), so a type the shape cannot hold is refused before any file is
    // read.
    plan(&shape, ty, layers, 1)?;
    let out = &opts.out;
    if out.is_dir() {
        return Err(SynthError::Unwritable(
            out.clone(),
            io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"),
        ));
    }
    if !opts.force && fs::symlink_metadata(out).is_ok() {
        return Err(SynthError::Exists(out.clone()));
    }
    let (tok_keys, vocab) = read_tokenizer(&opts.tokenizer)?;
    let tensors = plan(&shape, ty, layers, vocab)?;
    let meta = metadata(&shape, ty, layers, opts.seed, vocab, tok_keys);

    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "synth.gguf".into());
    let tmp = dir.join(format!(".{name}.{}.synth-tmp", std::process::id()));
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| SynthError::Unwritable(out.clone(), e))?;
    let partial = Partial { tmp, done: false };
    let io_err = |e| SynthError::Io(out.clone(), e);
    let mut w = BufWriter::with_capacity(1 << 20, file);

    let meta_ref: Vec<(&str, Value)> = meta.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let entries: Vec<TensorEntry<'_>> = tensors
        .iter()
        .map(|t| TensorEntry {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty.code(),
            bytes: t.bytes(),
        })
        .collect();
    let header = gguf::encode_header(&meta_ref, &entries);
    w.write_all(&header).map_err(io_err)?;
    let mut total = header.len() as u64;

    let mut chunk = Vec::new();
    for (ti, t) in tensors.iter().enumerate() {
        let (k, rb, rows) = (t.row_len(), t.row_bytes(), t.rows());
        let chunk_rows = (CHUNK_BYTES / rb.max(1)).clamp(1, rows);
        chunk.resize(chunk_rows * rb, 0u8);
        let mut first = 0;
        while first < rows {
            let n = chunk_rows.min(rows - first);
            let buf = &mut chunk[..n * rb];
            quantize_rows(pool, opts.seed, ti, t, first, k, rb, buf)?;
            w.write_all(buf).map_err(io_err)?;
            first += n;
        }
        let pad = gguf::padding(t.bytes());
        w.write_all(&[0u8; gguf::DEFAULT_ALIGNMENT as usize][..pad])
            .map_err(io_err)?;
        total += t.bytes() + pad as u64;
    }
    let file = w.into_inner().map_err(|e| io_err(e.into_error()))?;
    file.sync_all().map_err(io_err)?;
    drop(file);
    partial.finish(out).map_err(io_err)?;
    Ok(SynthReport {
        path: out.clone(),
        bytes: total,
        tensors: tensors.len(),
        vocab,
        layers,
    })
}

/// Generates and quantizes rows `first..` of tensor `t` into `buf` (whole rows of `rb` bytes),
/// spread over the pool in tasks of a few rows.
#[allow(clippy::too_many_arguments)]
fn quantize_rows(
    pool: &ThreadPool,
    seed: u64,
    ti: usize,
    t: &Planned,
    first: usize,
    k: usize,
    rb: usize,
    buf: &mut [u8],
) -> Result<(), SynthError> {
    let n = buf.len() / rb;
    // About 8 tasks a thread, so stealing evens out the work.
    let per_task = n.div_ceil(pool.threads() * 8).max(1);
    let parts: Vec<Mutex<&mut [u8]>> = buf.chunks_mut(per_task * rb).map(Mutex::new).collect();
    let failed: Mutex<Option<String>> = Mutex::new(None);
    pool.run(parts.len(), &|task, _| {
        let mut part = parts[task].lock().unwrap_or_else(|e| e.into_inner());
        let mut row = vec![0f32; k];
        for (j, dst) in part.chunks_exact_mut(rb).enumerate() {
            let r = first + task * per_task + j;
            fill_row(seed, ti, r, t.fill, &mut row);
            if let Err(e) = quantize_row(t.ty, &row, dst) {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(format!("{} row {r}: {e}", t.name));
                return;
            }
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(SynthError::Quantize(e)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (n, t) in TYPES {
            assert_eq!(SynthType::from_name(n), Some(t));
            assert_eq!(t.name(), n);
            assert_ne!(t.file_type(), 0, "{n}");
        }
        for s in SHAPES {
            assert_eq!(Shape::from_name(s.name), Some(s));
            assert_eq!(s.d_model % s.n_head, 0);
            assert_eq!(s.n_head % s.n_kv_head, 0);
        }
        assert_eq!(Shape::from_name("llama-2b"), None);
        assert_eq!(SynthType::from_name("q3_k"), None);
    }

    #[test]
    fn normal_draws_have_unit_variance() {
        let mut r = RowRng::new(7, 1, 2);
        let n = 200_000;
        let v: Vec<f64> = (0..n).map(|_| f64::from(r.std_normal())).collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "variance {var}");
    }

    #[test]
    fn q4_k_m_mix_follows_llama_cpp() {
        let t = SynthType::Q4KM;
        // 16 layers: more bits on 0, 1 (first eighth), 14, 15 (last eighth), and 4, 7, 10, 13.
        let more: Vec<usize> = (0..16).filter(|&i| use_more_bits(i, 16)).collect();
        assert_eq!(more, [0, 1, 4, 7, 10, 13, 14, 15]);
        assert_eq!(
            t.pick("blk.4.attn_v.weight", Some((4, 16)), true),
            GgmlType::Q6K
        );
        assert_eq!(
            t.pick("blk.4.ffn_down.weight", Some((4, 16)), true),
            GgmlType::Q6K
        );
        assert_eq!(
            t.pick("blk.5.attn_v.weight", Some((5, 16)), true),
            GgmlType::Q4K
        );
        assert_eq!(
            t.pick("blk.4.attn_q.weight", Some((4, 16)), true),
            GgmlType::Q4K
        );
        assert_eq!(t.pick("token_embd.weight", None, true), GgmlType::Q6K);
        assert_eq!(t.pick("token_embd.weight", None, false), GgmlType::Q4K);
        assert_eq!(t.pick("output.weight", None, false), GgmlType::Q6K);
    }

    #[test]
    fn k_quants_do_not_fit_smollm2() {
        let s = Shape::from_name("smollm2-135m").unwrap();
        let e = plan(&s, SynthType::Pure(GgmlType::Q4K), 2, 100).err();
        assert!(
            matches!(
                e,
                Some(SynthError::TypeDoesNotFit {
                    width: 576,
                    block: 256,
                    ..
                })
            ),
            "{e:?}"
        );
        assert!(plan(&s, SynthType::Pure(GgmlType::Q4_0), 2, 100).is_ok());
    }
}
