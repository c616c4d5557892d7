//! A tiny synthetic Llama GGUF (2 blocks, width 64) that loads and runs, and byte-level
//! patches of its fields (metadata values, tensor types and offsets, tensor data): the
//! mutations of issue 17, applicable to the real model's file as well.
#![allow(dead_code)]

use engine_min::gguf::{self, Gguf, Value};
use half::f16;

pub mod check;

/// GGUF type codes used here.
pub const F32: u32 = 0;
/// Q4_1.
pub const Q4_1: u32 = 3;
/// Q8_0.
pub const Q8_0: u32 = 8;
/// BF16.
pub const BF16: u32 = 30;

/// Deterministic pseudo-random numbers in [-1, 1) (an LCG; no test depends on their values).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn q4_1(rng: &mut Lcg, n_el: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n_el / 32 * 20);
    for _ in 0..n_el / 32 {
        out.extend_from_slice(&f16::from_f32(0.02).to_le_bytes());
        out.extend_from_slice(&f16::from_f32(-0.15).to_le_bytes());
        for _ in 0..16 {
            out.push(((rng.next() + 1.0) * 127.9) as u8);
        }
    }
    out
}

fn q8_0(rng: &mut Lcg, n_el: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n_el / 32 * 34);
    for _ in 0..n_el / 32 {
        out.extend_from_slice(&f16::from_f32(0.01).to_le_bytes());
        for _ in 0..32 {
            out.push((rng.next() * 127.0) as i8 as u8);
        }
    }
    out
}

fn f32s(rng: &mut Lcg, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|_| (1.0 + 0.1 * rng.next()).to_le_bytes())
        .collect()
}

/// Width of the tiny model.
pub const D: u64 = 64;
/// Feed-forward width.
pub const FF: u64 = 128;
/// Key/value width (2 heads of 16).
pub const KV: u64 = 32;
/// Blocks.
pub const LAYERS: usize = 2;

/// The tiny model's vocabulary: GPT-2's 256 byte characters, a few merged tokens, three
/// control tokens.
pub fn vocab() -> (Vec<String>, Vec<String>) {
    let mut tokens: Vec<String> = (0..=255u8).map(byte_char).map(String::from).collect();
    let merges = ["h e", "l l", "he ll", "Ġ w", "o r", "Ġw or", "hell o"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from));
    (tokens, merges.map(String::from).to_vec())
}

/// GPT-2's printable character for byte `b`.
fn byte_char(b: u8) -> char {
    let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable {
        return char::from(b);
    }
    let n = (0..b)
        .filter(|&x| !matches!(x, 33..=126 | 161..=172 | 174..=255))
        .count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}

/// The tiny model's GGUF bytes: 2 blocks of width 64 (4 heads of 16, 2 KV heads), SwiGLU
/// width 128, Q4_1 matrices, a Q8_0 tied embedding, F32 norms; tensors in the order
/// llama.cpp writes SmolLM2's (embedding first, output norm last).
pub fn tiny_llama() -> Vec<u8> {
    tiny_llama_with(false)
}

/// [`tiny_llama`] with a Q8_0 output head of its own (`output.weight`, before the output norm)
/// instead of the tied embedding.
pub fn tiny_llama_untied() -> Vec<u8> {
    tiny_llama_with(true)
}

fn tiny_llama_with(untied: bool) -> Vec<u8> {
    let (tokens, merges) = vocab();
    let n_vocab = tokens.len() as u64;
    let mut types = vec![Value::I32(1); tokens.len()];
    for t in types.iter_mut().skip(tokens.len() - 3) {
        *t = Value::I32(3);
    }
    let meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.context_length", Value::U32(64)),
        ("llama.embedding_length", Value::U32(D as u32)),
        ("llama.feed_forward_length", Value::U32(FF as u32)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.attention.head_count_kv", Value::U32(2)),
        ("llama.rope.freq_base", Value::F32(10_000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.vocab_size", Value::U32(n_vocab as u32)),
        ("llama.rope.dimension_count", Value::U32(16)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(8, tokens.into_iter().map(Value::String).collect()),
        ),
        ("tokenizer.ggml.token_type", Value::Array(5, types)),
        (
            "tokenizer.ggml.merges",
            Value::Array(8, merges.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.bos_token_id",
            Value::U32(n_vocab as u32 - 2),
        ),
        (
            "tokenizer.ggml.eos_token_id",
            Value::U32(n_vocab as u32 - 1),
        ),
        (
            "tokenizer.ggml.unknown_token_id",
            Value::U32(n_vocab as u32 - 3),
        ),
    ];
    let mut rng = Lcg(17);
    let mut tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)> = vec![(
        "token_embd.weight".into(),
        vec![D, n_vocab],
        Q8_0,
        q8_0(&mut rng, (D * n_vocab) as usize),
    )];
    for i in 0..LAYERS {
        let mut t = |name: &str, dims: Vec<u64>, ty: u32| {
            let n_el = dims.iter().product::<u64>() as usize;
            let data = match ty {
                F32 => f32s(&mut rng, n_el),
                _ => q4_1(&mut rng, n_el),
            };
            tensors.push((format!("blk.{i}.{name}.weight"), dims, ty, data));
        };
        t("attn_norm", vec![D], F32);
        t("ffn_down", vec![FF, D], Q4_1);
        t("ffn_gate", vec![D, FF], Q4_1);
        t("ffn_up", vec![D, FF], Q4_1);
        t("ffn_norm", vec![D], F32);
        t("attn_k", vec![D, KV], Q4_1);
        t("attn_output", vec![D, D], Q4_1);
        t("attn_q", vec![D, D], Q4_1);
        t("attn_v", vec![D, KV], Q4_1);
    }
    if untied {
        tensors.push((
            "output.weight".into(),
            vec![D, n_vocab],
            Q8_0,
            q8_0(&mut rng, (D * n_vocab) as usize),
        ));
    }
    tensors.push((
        "output_norm.weight".into(),
        vec![D],
        F32,
        f32s(&mut rng, D as usize),
    ));
    let refs: Vec<(&str, &[u64], u32, &[u8])> = tensors
        .iter()
        .map(|(n, d, t, b)| (n.as_str(), d.as_slice(), *t, b.as_slice()))
        .collect();
    gguf::write(&meta, &refs)
}

/// The last occurrence of `needle` in `hay`.
fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// `s` as GGUF writes a string: u64 length, then the bytes.
fn gguf_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// Finds fields in the bytes of a file whose layout is that of the file it was made from
/// (patches keep every field's size, so one parse of the original serves a series of patches,
/// even after one of them has made the file invalid).
pub struct Patcher {
    g: Gguf,
}

impl Patcher {
    /// The layout of `original` (a valid file).
    pub fn new(original: &[u8]) -> Self {
        Self {
            g: Gguf::parse(original).expect("the unpatched file parses"),
        }
    }

    /// The parsed original.
    pub fn gguf(&self) -> &Gguf {
        &self.g
    }

    fn header(&self) -> usize {
        self.g.data_offset as usize
    }

    /// Byte position of metadata `key`'s value type code, and that code.
    pub fn meta_at(&self, buf: &[u8], key: &str) -> (usize, u32) {
        let k = gguf_str(key);
        let at = buf[..self.header()]
            .windows(k.len())
            .position(|w| w == k)
            .unwrap_or_else(|| panic!("no key {key}"))
            + k.len();
        let ty = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
        (at, ty)
    }

    /// Overwrites the numeric metadata value of `key` with `v`, in the key's own type (u32,
    /// i32, u64, f32 or f64; integers saturate): the file keeps its size.
    pub fn set_number(&self, buf: &mut [u8], key: &str, v: f64) {
        let (at, ty) = self.meta_at(buf, key);
        let p = at + 4;
        match ty {
            4 => buf[p..p + 4].copy_from_slice(&(v as u32).to_le_bytes()),
            5 => buf[p..p + 4].copy_from_slice(&(v as i32).to_le_bytes()),
            6 => buf[p..p + 4].copy_from_slice(&(v as f32).to_le_bytes()),
            10 => buf[p..p + 8].copy_from_slice(&(v as u64).to_le_bytes()),
            12 => buf[p..p + 8].copy_from_slice(&v.to_le_bytes()),
            t => panic!("{key} has type {t}, not a patchable number"),
        }
    }

    /// (type position, offset position) of tensor `name`'s info.
    fn tensor_fields(&self, buf: &[u8], name: &str) -> (usize, usize) {
        let at = rfind(&buf[..self.header()], &gguf_str(name))
            .unwrap_or_else(|| panic!("no tensor {name}"))
            + 8
            + name.len();
        let rank = self.g.tensor(name).expect("tensor").dims.len();
        let ty = at + 4 + 8 * rank;
        (ty, ty + 4)
    }

    /// Changes tensor `name`'s type code (its bytes stay as they are).
    pub fn retype(&self, buf: &mut [u8], name: &str, code: u32) {
        let (ty, _) = self.tensor_fields(buf, name);
        buf[ty..ty + 4].copy_from_slice(&code.to_le_bytes());
    }

    /// Moves tensor `name` to `offset` in the data section.
    pub fn set_offset(&self, buf: &mut [u8], name: &str, offset: u64) {
        let (_, off) = self.tensor_fields(buf, name);
        buf[off..off + 8].copy_from_slice(&offset.to_le_bytes());
    }

    /// Writes `v` as element `index` of the F32 tensor `name`.
    pub fn poke_f32(&self, buf: &mut [u8], name: &str, index: usize, v: f32) {
        let t = self
            .g
            .tensor(name)
            .unwrap_or_else(|| panic!("no tensor {name}"));
        let at = (self.g.data_offset + t.offset) as usize + 4 * index;
        buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

impl Patcher {
    /// Overwrites the f16 scale `d` of block `block` of the quantized tensor `name` (Q4_0,
    /// Q4_1 or Q8_0: the scale is each block's first two bytes) with `bits`.
    pub fn poke_scale(&self, buf: &mut [u8], name: &str, block: usize, bits: u16) {
        let t = self
            .g
            .tensor(name)
            .unwrap_or_else(|| panic!("no tensor {name}"));
        let block_bytes = match t.ty {
            gguf::GgmlType::Q4_0 => 18,
            gguf::GgmlType::Q4_1 => 20,
            gguf::GgmlType::Q8_0 => 34,
            ty => panic!("{name} is {ty:?}, not a block type with an f16 scale first"),
        };
        let at = (self.g.data_offset + t.offset) as usize + block * block_bytes;
        buf[at..at + 2].copy_from_slice(&bits.to_le_bytes());
    }
}

/// [`Patcher::poke_scale`] on a valid file.
pub fn poke_scale(buf: &mut [u8], name: &str, block: usize, bits: u16) {
    Patcher::new(buf).poke_scale(buf, name, block, bits)
}

/// f16 NaN.
pub const F16_NAN: u16 = 0x7e00;
/// f16 +infinity.
pub const F16_INF: u16 = 0x7c00;

/// [`Patcher::set_number`] on a valid file.
pub fn set_number(buf: &mut [u8], key: &str, v: f64) {
    Patcher::new(buf).set_number(buf, key, v)
}

/// [`Patcher::retype`] on a valid file.
pub fn retype(buf: &mut [u8], name: &str, code: u32) {
    Patcher::new(buf).retype(buf, name, code)
}

/// [`Patcher::set_offset`] on a valid file.
pub fn set_offset(buf: &mut [u8], name: &str, offset: u64) {
    Patcher::new(buf).set_offset(buf, name, offset)
}

/// [`Patcher::poke_f32`] on a valid file.
pub fn poke_f32(buf: &mut [u8], name: &str, index: usize, v: f32) {
    Patcher::new(buf).poke_f32(buf, name, index, v)
}

/// Issue 17's load-time mutations of a model file (rows of its table, and a few more of the
/// same kind): each must make the file fail to load with a typed error. See [`mutate`].
pub const ISSUE_MUTATIONS: &[&str] = &[
    "block_count = 2^32-1",
    "block_count = 0",
    "RMS-norm epsilon NaN",
    "RMS-norm epsilon -1",
    "RoPE base 0",
    "RoPE base NaN",
    "a weight retyped to BF16 with the same bytes",
    "a norm retyped F32 -> BF16 with the same bytes",
    "a NaN inside output_norm",
    "two tensors overlapping",
    "head_count not dividing the width",
    "head_count_kv 0",
    "vocab_size not matching the embedding",
];

/// `base` (the tiny model or the real one) with the mutation `name` of [`ISSUE_MUTATIONS`].
pub fn mutate(base: &[u8], name: &str) -> Vec<u8> {
    let mut b = base.to_vec();
    match name {
        "block_count = 2^32-1" => set_number(&mut b, "llama.block_count", 4294967295.0),
        "block_count = 0" => set_number(&mut b, "llama.block_count", 0.0),
        "RMS-norm epsilon NaN" => {
            set_number(&mut b, "llama.attention.layer_norm_rms_epsilon", f64::NAN)
        }
        "RMS-norm epsilon -1" => set_number(&mut b, "llama.attention.layer_norm_rms_epsilon", -1.0),
        "RoPE base 0" => set_number(&mut b, "llama.rope.freq_base", 0.0),
        "RoPE base NaN" => set_number(&mut b, "llama.rope.freq_base", f64::NAN),
        "a weight retyped to BF16 with the same bytes" => {
            retype(&mut b, "blk.0.attn_q.weight", BF16)
        }
        "a norm retyped F32 -> BF16 with the same bytes" => {
            retype(&mut b, "blk.0.attn_norm.weight", BF16)
        }
        "a NaN inside output_norm" => poke_f32(&mut b, "output_norm.weight", 7, f32::NAN),
        "two tensors overlapping" => {
            // The tensor after blk.0.attn_q in the data section moves onto it.
            let g = Gguf::parse(base).expect("base parses");
            let mut by_off: Vec<_> = g.tensors.iter().collect();
            by_off.sort_by_key(|t| t.offset);
            let i = by_off
                .iter()
                .position(|t| t.name == "blk.0.attn_q.weight")
                .expect("attn_q");
            set_offset(&mut b, &by_off[i + 1].name, by_off[i].offset);
        }
        "head_count not dividing the width" => {
            set_number(&mut b, "llama.attention.head_count", 7.0)
        }
        "head_count_kv 0" => set_number(&mut b, "llama.attention.head_count_kv", 0.0),
        "vocab_size not matching the embedding" => set_number(&mut b, "llama.vocab_size", 5.0),
        other => panic!("no mutation {other}"),
    }
    b
}
