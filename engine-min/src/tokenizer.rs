//! Byte-level BPE tokenizer built from GGUF metadata (`tokenizer.ggml.model = "gpt2"`).
//!
//! Pre-tokenization follows llama.cpp's `smollm` pre-tokenizer: every numeric character is its
//! own piece, then GPT-2's pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! splits the rest. It is hand-written (no regex engine): `\p{L}` is `char::is_alphabetic`,
//! `\p{N}` is `char::is_numeric`, `\s` is `char::is_whitespace`.

use std::collections::HashMap;
use std::fmt;

use crate::gguf::{Gguf, Value};

/// Why a tokenizer could not be built from the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerError {
    /// A required metadata key is missing or has the wrong type.
    Missing(&'static str),
    /// `tokenizer.ggml.model` names a model other than `gpt2`.
    UnsupportedModel(String),
}

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(k) => write!(f, "tokenizer metadata `{k}` missing or mistyped"),
            Self::UnsupportedModel(m) => {
                write!(
                    f,
                    "unsupported tokenizer model `{m}` (only gpt2 byte-level BPE)"
                )
            }
        }
    }
}

impl std::error::Error for TokenizerError {}

/// Marks a byte the vocabulary has no token for.
const NO_TOKEN: u32 = u32::MAX;

/// GPT-2's byte to printable-character table.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, 33..=126 | 161..=172 | 174..=255);
        out[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).unwrap_or('\u{fffd}');
            n += 1;
            c
        };
    }
    out
}

/// A byte-level BPE tokenizer.
pub struct Tokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Token of each byte; [`NO_TOKEN`] where the vocabulary lacks it.
    byte_ids: [u32; 256],
    unk: Option<u32>,
    char_bytes: HashMap<char, u8>,
    /// Control/user-defined tokens matched literally when `parse_special` is on (longest first).
    specials: Vec<(String, u32)>,
    is_control: Vec<bool>,
    /// Beginning-of-sequence token.
    pub bos: Option<u32>,
    /// End-of-sequence token.
    pub eos: Option<u32>,
    /// Whether BOS is prepended when encoding a prompt.
    pub add_bos: bool,
    chat_system: Option<String>,
    chatml: bool,
}

impl Tokenizer {
    /// Builds the tokenizer from a GGUF header.
    pub fn from_gguf(g: &Gguf) -> Result<Self, TokenizerError> {
        let model = g
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .ok_or(TokenizerError::Missing("tokenizer.ggml.model"))?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model.into()));
        }
        let toks = g
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .ok_or(TokenizerError::Missing("tokenizer.ggml.tokens"))?;
        let tokens: Vec<String> = toks
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or(TokenizerError::Missing("tokenizer.ggml.tokens"))?;
        let types: Vec<u64> = match g.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(a) => a.iter().map(|v| v.as_u64().unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        let merges = g
            .get("tokenizer.ggml.merges")
            .and_then(Value::as_array)
            .ok_or(TokenizerError::Missing("tokenizer.ggml.merges"))?;
        let mut merge_strs = Vec::with_capacity(merges.len());
        for m in merges {
            merge_strs.push(
                m.as_str()
                    .ok_or(TokenizerError::Missing("tokenizer.ggml.merges"))?,
            );
        }
        let id = |k: &str| g.get(k).and_then(Value::as_u64).map(|v| v as u32);
        let template = g.get("tokenizer.chat_template").and_then(Value::as_str);
        Ok(Self::build(
            tokens,
            &types,
            &merge_strs,
            id("tokenizer.ggml.bos_token_id"),
            id("tokenizer.ggml.eos_token_id"),
            g.get("tokenizer.ggml.add_bos_token")
                .is_some_and(|v| *v == Value::Bool(true)),
            id("tokenizer.ggml.unknown_token_id"),
            template,
        ))
    }

    /// Builds a tokenizer from its parts (token strings, ggml token types, "a b" merges).
    #[allow(clippy::too_many_arguments)]
    fn build(
        tokens: Vec<String>,
        types: &[u64],
        merges: &[&str],
        bos: Option<u32>,
        eos: Option<u32>,
        add_bos: bool,
        unk: Option<u32>,
        chat_template: Option<&str>,
    ) -> Self {
        let mut ids = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            ids.entry(t.clone()).or_insert(i as u32);
        }
        let bc = byte_chars();
        let mut byte_ids = [0u32; 256];
        let mut char_bytes = HashMap::with_capacity(256);
        for b in 0..256usize {
            let s = bc[b].to_string();
            byte_ids[b] = ids.get(&s).copied().unwrap_or(NO_TOKEN);
            char_bytes.insert(bc[b], b as u8);
        }
        let mut mm = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            let Some((a, b)) = m.split_once(' ') else {
                continue;
            };
            let (Some(&ia), Some(&ib)) = (ids.get(a), ids.get(b)) else {
                continue;
            };
            let Some(&im) = ids.get(&format!("{a}{b}")) else {
                continue;
            };
            mm.entry((ia, ib)).or_insert((rank as u32, im));
        }
        let is_control: Vec<bool> = (0..tokens.len())
            .map(|i| matches!(types.get(i), Some(3) | Some(4)))
            .collect();
        let mut specials: Vec<(String, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|&(i, t)| is_control[i] && !t.is_empty())
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        specials.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        let chatml = chat_template.is_some_and(|t| t.contains("<|im_start|>"));
        let chat_system = chat_template.and_then(|t| {
            let start = t.find("<|im_start|>system\n")? + "<|im_start|>system\n".len();
            let end = t[start..].find("<|im_end|>")? + start;
            Some(t[start..end].to_owned())
        });
        Self {
            tokens,
            ids,
            merges: mm,
            byte_ids,
            unk,
            char_bytes,
            specials,
            is_control,
            bos,
            eos,
            add_bos,
            chat_system,
            chatml,
        }
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a token string, if in the vocabulary.
    pub fn token_id(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// Whether `id` is a control token (e.g. `<|im_end|>`).
    pub fn is_control(&self, id: u32) -> bool {
        self.is_control.get(id as usize).copied().unwrap_or(false)
    }

    /// Encodes `text`. With `parse_special`, control-token strings in the text become their
    /// ids; otherwise they are encoded as plain text.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let next = if parse_special {
                self.find_special(rest)
            } else {
                None
            };
            match next {
                Some((at, s, id)) => {
                    self.encode_plain(&rest[..at], &mut out);
                    out.push(id);
                    rest = &rest[at + s..];
                }
                None => {
                    self.encode_plain(rest, &mut out);
                    break;
                }
            }
        }
        out
    }

    /// Encodes a prompt: BOS when the model asks for it, then the text (special tokens parsed).
    pub fn encode_prompt(&self, text: &str) -> Vec<u32> {
        let mut v = Vec::new();
        if self.add_bos {
            v.extend(self.bos);
        }
        v.extend(self.encode(text, true));
        v
    }

    /// Wraps a user message in the model's chat template (ChatML), with the template's default
    /// system message, ending with the assistant header. `None` when the model has no ChatML
    /// template.
    pub fn chat_prompt(&self, user: &str) -> Option<String> {
        if !self.chatml {
            return None;
        }
        let mut s = String::new();
        if let Some(sys) = &self.chat_system {
            s.push_str("<|im_start|>system\n");
            s.push_str(sys);
            s.push_str("<|im_end|>\n");
        }
        s.push_str("<|im_start|>user\n");
        s.push_str(user);
        s.push_str("<|im_end|>\n<|im_start|>assistant\n");
        Some(s)
    }

    /// Earliest special token in `s`: (byte offset, byte length, id).
    fn find_special(&self, s: &str) -> Option<(usize, usize, u32)> {
        let mut best: Option<(usize, usize, u32)> = None;
        for (t, id) in &self.specials {
            if let Some(at) = s.find(t.as_str()) {
                if best.is_none_or(|(b, l, _)| at < b || (at == b && t.len() > l)) {
                    best = Some((at, t.len(), *id));
                }
            }
        }
        best
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        let mut syms = Vec::new();
        for piece in pretokenize(text) {
            syms.clear();
            syms.extend(piece.bytes().map(|b| self.byte_ids[b as usize]));
            self.bpe(&mut syms);
            // Bytes without a token (control bytes absent from some vocabularies) become the
            // unknown token, or are dropped when there is none.
            out.extend(
                syms.iter()
                    .filter_map(|&s| if s == NO_TOKEN { self.unk } else { Some(s) }),
            );
        }
    }

    /// Applies merges, lowest rank first, until none applies.
    fn bpe(&self, syms: &mut Vec<u32>) {
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..syms.len().saturating_sub(1) {
                if let Some(&(rank, m)) = self.merges.get(&(syms[i], syms[i + 1])) {
                    if best.is_none_or(|(r, _, _)| rank < r) {
                        best = Some((rank, i, m));
                    }
                }
            }
            let Some((_, i, m)) = best else { return };
            syms[i] = m;
            syms.remove(i + 1);
        }
    }

    /// Appends the bytes of token `id` to `out`. Control tokens yield their text only when
    /// `show_special`. Unknown ids yield nothing.
    pub fn decode_token(&self, id: u32, show_special: bool, out: &mut Vec<u8>) {
        let Some(t) = self.tokens.get(id as usize) else {
            return;
        };
        if self.is_control(id) {
            if show_special {
                out.extend_from_slice(t.as_bytes());
            }
            return;
        }
        for c in t.chars() {
            match self.char_bytes.get(&c) {
                Some(&b) => out.push(b),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }

    /// Decodes ids to text (invalid UTF-8 replaced), control tokens shown when `show_special`.
    pub fn decode(&self, ids: &[u32], show_special: bool) -> String {
        let mut b = Vec::new();
        for &id in ids {
            self.decode_token(id, show_special, &mut b);
        }
        String::from_utf8_lossy(&b).into_owned()
    }
}

/// Splits text into pre-tokenizer pieces (see the module doc).
pub fn pretokenize(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    // Stage 1: each numeric char alone; runs of other chars together.
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c.is_numeric() {
            if start < i {
                gpt2_split(&text[start..i], &mut out);
            }
            out.push(&text[i..i + c.len_utf8()]);
            start = i + c.len_utf8();
        }
    }
    if start < text.len() {
        gpt2_split(&text[start..], &mut out);
    }
    out
}

fn is_l(c: char) -> bool {
    c.is_alphabetic()
}
fn is_n(c: char) -> bool {
    c.is_numeric()
}
fn is_other(c: char) -> bool {
    !c.is_whitespace() && !is_l(c) && !is_n(c)
}

/// GPT-2's split pattern on one piece.
fn gpt2_split<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    let mut i = 0;
    while i < s.len() {
        let len = gpt2_match(&s[i..]);
        out.push(&s[i..i + len]);
        i += len;
    }
}

/// Length in bytes of the pattern's match at the start of `s` (non-empty `s`; always >= 1).
fn gpt2_match(s: &str) -> usize {
    for c in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"] {
        if s.starts_with(c) {
            return c.len();
        }
    }
    let run = |from: usize, pred: fn(char) -> bool| -> usize {
        s[from..]
            .char_indices()
            .find(|&(_, c)| !pred(c))
            .map_or(s.len(), |(j, _)| from + j)
    };
    let skip = usize::from(s.starts_with(' '));
    for pred in [is_l as fn(char) -> bool, is_n, is_other] {
        let end = run(skip, pred);
        if end > skip {
            return end;
        }
    }
    // Whitespace: \s+(?!\S) then \s+.
    let end = run(0, char::is_whitespace);
    if end == 0 {
        // Unreachable by construction (every char is one of the classes); take one char.
        return s.chars().next().map_or(1, char::len_utf8);
    }
    if end == s.len() {
        return end;
    }
    // Followed by a non-space: give back the last whitespace char if more than one.
    let last = s[..end].chars().next_back().map_or(1, char::len_utf8);
    if end > last {
        end - last
    } else {
        end
    }
}
