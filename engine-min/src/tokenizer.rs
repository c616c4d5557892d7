//! Byte-level BPE tokenizer built from GGUF metadata (`tokenizer.ggml.model = "gpt2"`).
//!
//! Pre-tokenization follows llama.cpp's `smollm` pre-tokenizer: every numeric character is its
//! own piece, then GPT-2's pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! splits the rest. It is hand-written (no regex engine): `\p{L}` is `char::is_alphabetic`,
//! `\p{N}` is `char::is_numeric`, `\s` is `char::is_whitespace`.
//!
//! Encoding takes time O(n log n) in the text's length, whatever the text: control tokens are
//! found in one left-to-right pass, a pre-tokenized piece longer than [`MAX_PIECE_BYTES`] is
//! cut into chunks at character boundaries, and BPE merging runs llama.cpp's way, on a linked
//! list of symbols with a min-heap of candidate merges (lowest rank, then leftmost, first).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;

use crate::gguf::{Gguf, Value};

/// Why a tokenizer could not be built from the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerError {
    /// A required metadata key is missing or has the wrong type.
    Missing(&'static str),
    /// `tokenizer.ggml.model` names a model other than `gpt2`.
    UnsupportedModel(String),
    /// A special token id (BOS, EOS, unknown) outside the vocabulary.
    BadTokenId {
        /// The metadata key.
        key: &'static str,
        /// The id found.
        id: u64,
        /// The vocabulary size.
        vocab: usize,
    },
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
            Self::BadTokenId { key, id, vocab } => write!(
                f,
                "tokenizer metadata `{key}` = {id} is outside the vocabulary of {vocab} tokens"
            ),
        }
    }
}

impl std::error::Error for TokenizerError {}

/// Marks a byte the vocabulary has no token for.
const NO_TOKEN: u32 = u32::MAX;

/// Longest pre-tokenized piece, in bytes, that is merged as one: longer pieces are cut into
/// chunks of at most this many bytes (at character boundaries) and each chunk is merged alone.
///
/// Cutting changes how the text next to a cut is merged (no token can span it, and that can
/// change the merges beside it), and a piece so long differs from llama.cpp's tokens there, so
/// the bound sits far above anything natural text produces: a piece is one word, number or
/// punctuation run (the pre-tokenizer splits at every space and digit), and SmolLM2's longest
/// token stands for 81 bytes. Pieces this long are base64 blobs, minified data or hostile
/// input; for them the cut keeps the merge scratch (symbols and heap) bounded per piece.
/// Decoding still returns the exact text: byte-level BPE encodes every chunk's bytes.
pub const MAX_PIECE_BYTES: usize = 1024;

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
    /// Whether some special token starts with this byte.
    special_first: [bool; 256],
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
        let vocab = tokens.len();
        // An id is absent, or an integer inside the vocabulary: a mistyped or out-of-range id
        // would otherwise be emitted as a token the engine rejects (BOS, unknown) or never see
        // generation stop (EOS).
        let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            let Some(v) = g.get(key) else {
                return Ok(None);
            };
            let id = v.as_u64().ok_or(TokenizerError::Missing(key))?;
            match u32::try_from(id) {
                Ok(i) if (i as usize) < vocab => Ok(Some(i)),
                _ => Err(TokenizerError::BadTokenId { key, id, vocab }),
            }
        };
        let template = g.get("tokenizer.chat_template").and_then(Value::as_str);
        Ok(Self::build(
            tokens,
            &types,
            &merge_strs,
            id("tokenizer.ggml.bos_token_id")?,
            id("tokenizer.ggml.eos_token_id")?,
            g.get("tokenizer.ggml.add_bos_token")
                .is_some_and(|v| *v == Value::Bool(true)),
            id("tokenizer.ggml.unknown_token_id")?,
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
        specials.sort_by_key(|s| Reverse(s.0.len()));
        let mut special_first = [false; 256];
        for (t, _) in &specials {
            special_first[t.as_bytes()[0] as usize] = true;
        }
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
            special_first,
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

    /// Earliest special token in `s`: (byte offset, byte length, id); the longest one where
    /// several start at that offset. One pass over `s`: only offsets whose byte starts some
    /// special token are tried, and each try compares at most every special's length.
    fn find_special(&self, s: &str) -> Option<(usize, usize, u32)> {
        let bytes = s.as_bytes();
        for (at, &b) in bytes.iter().enumerate() {
            if !self.special_first[b as usize] {
                continue;
            }
            // `specials` is longest first, so the first match here is the longest.
            for (t, id) in &self.specials {
                if bytes[at..].starts_with(t.as_bytes()) {
                    return Some((at, t.len(), *id));
                }
            }
        }
        None
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        let mut bpe = Bpe::default();
        for piece in pretokenize(text) {
            for chunk in piece_chunks(piece) {
                bpe.merge(self, chunk.bytes().map(|b| self.byte_ids[b as usize]));
                // Bytes without a token (control bytes absent from some vocabularies) become
                // the unknown token, or are dropped when there is none.
                out.extend(bpe.symbols().filter_map(|s| {
                    if s == NO_TOKEN {
                        self.unk
                    } else {
                        Some(s)
                    }
                }));
            }
        }
    }

    /// The merged token of the adjacent pair `(a, b)`, with its rank.
    fn merge_of(&self, a: u32, b: u32) -> Option<(u32, u32)> {
        self.merges.get(&(a, b)).copied()
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

/// `piece` cut into chunks of at most [`MAX_PIECE_BYTES`] bytes at character boundaries (one
/// chunk when it is short enough).
fn piece_chunks(piece: &str) -> impl Iterator<Item = &str> {
    let mut rest = piece;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(MAX_PIECE_BYTES);
        // A char is at most 4 bytes, so this steps back at most 3 times.
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (chunk, tail) = rest.split_at(end);
        rest = tail;
        Some(chunk)
    })
}

/// No symbol (end of the linked list).
const NONE: u32 = u32::MAX;

/// BPE merging in O(n log n): the symbols form a doubly linked list (merging removes the right
/// one), and a min-heap holds every adjacent pair that has a merge, keyed by (rank, left
/// index). Popping the least key gives the lowest-rank pair, leftmost among equals: the pair
/// the plain algorithm (scan all pairs, merge the best, repeat) picks. A popped pair is stale
/// when one of its symbols has since merged with another neighbour; it is recognised by
/// looking its current pair up again and dropped. Each merge pushes at most two new pairs, so
/// the heap sees at most 3n entries.
#[derive(Default)]
struct Bpe {
    ids: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    alive: Vec<bool>,
    heap: BinaryHeap<Reverse<(u32, u32, u32)>>,
}

impl Bpe {
    /// Merges the symbols `syms` with `t`'s merges; read the result with [`Bpe::symbols`].
    fn merge(&mut self, t: &Tokenizer, syms: impl Iterator<Item = u32>) {
        self.ids.clear();
        self.ids.extend(syms);
        let n = self.ids.len();
        // Chunks are at most MAX_PIECE_BYTES symbols, far below u32::MAX.
        debug_assert!(n < NONE as usize);
        self.prev.clear();
        self.prev.extend((0..n as u32).map(|i| i.wrapping_sub(1)));
        self.next.clear();
        self.next.extend(1..=n as u32);
        if let Some(last) = self.next.last_mut() {
            *last = NONE;
        }
        self.alive.clear();
        self.alive.resize(n, true);
        self.heap.clear();
        for i in 1..n {
            self.push(t, i as u32 - 1, i as u32);
        }
        while let Some(Reverse((rank, left, right))) = self.heap.pop() {
            let (l, r) = (left as usize, right as usize);
            if !self.alive[l] || self.next[l] != right {
                continue;
            }
            let Some((now, merged)) = t.merge_of(self.ids[l], self.ids[r]) else {
                continue;
            };
            if now != rank {
                continue;
            }
            self.ids[l] = merged;
            self.alive[r] = false;
            let after = self.next[r];
            self.next[l] = after;
            if after != NONE {
                self.prev[after as usize] = left;
                self.push(t, left, after);
            }
            let before = self.prev[l];
            if before != NONE {
                self.push(t, before, left);
            }
        }
    }

    fn push(&mut self, t: &Tokenizer, left: u32, right: u32) {
        if let Some((rank, _)) = t.merge_of(self.ids[left as usize], self.ids[right as usize]) {
            self.heap.push(Reverse((rank, left, right)));
        }
    }

    /// The merged symbols in order (symbol 0 never merges away: it has no left neighbour).
    fn symbols(&self) -> impl Iterator<Item = u32> + '_ {
        let mut i = if self.ids.is_empty() { NONE } else { 0 };
        std::iter::from_fn(move || {
            if i == NONE {
                return None;
            }
            let id = self.ids[i as usize];
            i = self.next[i as usize];
            Some(id)
        })
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

#[cfg(test)]
mod tests {
    //! The linear-time encoder against the quadratic one it replaced (kept here as the
    //! oracle): the same ids on random vocabularies and random text, and on the real model's
    //! vocabulary (when `HETERO_MODEL` is set) for a few thousand random strings.

    use super::*;
    use proptest::prelude::*;

    /// The replaced algorithm, verbatim in effect: specials found by searching the rest of the
    /// text for each one, pieces never cut, merging by rescanning every pair after each merge.
    fn encode_reference(t: &Tokenizer, text: &str, parse_special: bool) -> Vec<u32> {
        let find_special = |s: &str| {
            let mut best: Option<(usize, usize, u32)> = None;
            for (tok, id) in &t.specials {
                if let Some(at) = s.find(tok.as_str()) {
                    if best.is_none_or(|(b, l, _)| at < b || (at == b && tok.len() > l)) {
                        best = Some((at, tok.len(), *id));
                    }
                }
            }
            best
        };
        let plain = |text: &str, out: &mut Vec<u32>| {
            for piece in pretokenize(text) {
                let mut syms: Vec<u32> = piece.bytes().map(|b| t.byte_ids[b as usize]).collect();
                loop {
                    let mut best: Option<(u32, usize, u32)> = None;
                    for i in 0..syms.len().saturating_sub(1) {
                        if let Some(&(rank, m)) = t.merges.get(&(syms[i], syms[i + 1])) {
                            if best.is_none_or(|(r, _, _)| rank < r) {
                                best = Some((rank, i, m));
                            }
                        }
                    }
                    let Some((_, i, m)) = best else { break };
                    syms[i] = m;
                    syms.remove(i + 1);
                }
                out.extend(
                    syms.iter()
                        .filter_map(|&s| if s == NO_TOKEN { t.unk } else { Some(s) }),
                );
            }
        };
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match parse_special.then(|| find_special(rest)).flatten() {
                Some((at, len, id)) => {
                    plain(&rest[..at], &mut out);
                    out.push(id);
                    rest = &rest[at + len..];
                }
                None => {
                    plain(rest, &mut out);
                    break;
                }
            }
        }
        out
    }

    /// A tokenizer with every byte token, merges built from `picks` over the alphabet
    /// {Ġ, a, b, c} (each pick joins two earlier strings), ranked by the picks' keys (so some
    /// merges rank before the merges that make their parts, as in real merge lists), and two
    /// control tokens.
    fn random_vocab(picks: &[(usize, usize, u32)]) -> Tokenizer {
        let mut tokens: Vec<String> = byte_chars().iter().map(|c| c.to_string()).collect();
        let mut alpha: Vec<String> = ["Ġ", "a", "b", "c"].map(String::from).to_vec();
        let mut merges: Vec<(u32, String)> = Vec::new();
        for &(i, j, key) in picks {
            let (a, b) = (&alpha[i % alpha.len()], &alpha[j % alpha.len()]);
            let joined = format!("{a}{b}");
            if joined.chars().count() > 8 || tokens.contains(&joined) {
                continue;
            }
            merges.push((key, format!("{a} {b}")));
            tokens.push(joined.clone());
            alpha.push(joined);
        }
        merges.sort_by_key(|m| m.0);
        let merges: Vec<&str> = merges.iter().map(|m| m.1.as_str()).collect();
        let mut types = vec![1u64; tokens.len()];
        for s in ["<|x|>", "<|xy|>"] {
            tokens.push(s.into());
            types.push(3);
        }
        Tokenizer::build(tokens, &types, &merges, None, None, false, None, None)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn heap_bpe_equals_the_quadratic_oracle(
            picks in prop::collection::vec((0usize..64, 0usize..64, any::<u32>()), 0..80),
            text in "[abc <|xy>1]{0,120}",
        ) {
            let t = random_vocab(&picks);
            for special in [false, true] {
                let ids = t.encode(&text, special);
                prop_assert_eq!(&ids, &encode_reference(&t, &text, special));
                prop_assert_eq!(t.decode(&ids, true), text.clone());
            }
        }
    }

    fn real() -> Option<Tokenizer> {
        let path = std::env::var("HETERO_MODEL")
            .map_err(|_| "HETERO_MODEL is not set".to_string())
            .map(std::path::PathBuf::from);
        let path = hetero_tests::require("model", path)?;
        let f = crate::gguf::GgufFile::open(&path).expect("model parses");
        Some(Tokenizer::from_gguf(&f.header).expect("tokenizer"))
    }

    const FRAGMENTS: &[&str] = &[
        "a",
        "e",
        "th",
        "the",
        "ing",
        "Hello",
        " world",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        "'s",
        "'ll",
        "'",
        "1",
        "23",
        "4.5",
        "é",
        "ü",
        "日本",
        "語",
        "🦀",
        ".",
        "!!",
        ",",
        "(",
        ")",
        "{}",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im",
        "|>",
        "<",
        "x",
        "\u{0}",
        "\u{7f}",
        "ſ",
        "ﬀ",
        "²",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn real_vocabulary_equals_the_oracle(
            parts in prop::collection::vec(0..FRAGMENTS.len(), 0..40),
            special in any::<bool>(),
        ) {
            let Some(t) = REAL.as_ref() else { return Ok(()) };
            let text: String = parts.iter().map(|&i| FRAGMENTS[i]).collect();
            prop_assert_eq!(t.encode(&text, special), encode_reference(t, &text, special));
        }
    }

    static REAL: std::sync::LazyLock<Option<Tokenizer>> = std::sync::LazyLock::new(real);

    #[test]
    fn long_pieces_are_cut_at_char_boundaries_and_round_trip() {
        let t = random_vocab(&[(1, 2, 0), (4, 3, 1), (5, 5, 2), (1, 1, 3)]);
        // One piece (letters only) of 3000 bytes with a 2-byte char straddling the first cut.
        let mut word = "ab".repeat(511);
        word.push('a');
        word.push('é');
        word.push_str(&"abc".repeat(659));
        assert!(!word.is_char_boundary(MAX_PIECE_BYTES));
        assert_eq!(pretokenize(&word), [word.as_str()]);
        let chunks: Vec<&str> = piece_chunks(&word).collect();
        assert_eq!(chunks.concat(), word);
        assert!(chunks.iter().all(|c| c.len() <= MAX_PIECE_BYTES));
        assert_eq!(
            chunks[0].len(),
            MAX_PIECE_BYTES - 1,
            "cut before the 2-byte char"
        );
        let ids = t.encode(&word, false);
        assert_eq!(t.decode(&ids, true), word);
        // Each chunk is merged exactly as the oracle merges it alone.
        let per_chunk: Vec<u32> = chunks
            .iter()
            .flat_map(|c| encode_reference(&t, c, false))
            .collect();
        assert_eq!(ids, per_chunk);
        // A piece at the bound is not cut.
        let at_bound = "ab".repeat(MAX_PIECE_BYTES / 2);
        assert_eq!(
            t.encode(&at_bound, false),
            encode_reference(&t, &at_bound, false)
        );
    }

    #[test]
    fn bad_special_ids_are_errors() {
        let buf = crate::gguf::write(
            &[
                ("tokenizer.ggml.model", Value::String("gpt2".into())),
                (
                    "tokenizer.ggml.tokens",
                    Value::Array(8, vec![Value::String("a".into())]),
                ),
                ("tokenizer.ggml.merges", Value::Array(8, vec![])),
                ("tokenizer.ggml.eos_token_id", Value::U32(1)),
            ],
            &[],
        );
        let g = Gguf::parse(&buf).expect("parses");
        assert_eq!(
            Tokenizer::from_gguf(&g).err(),
            Some(TokenizerError::BadTokenId {
                key: "tokenizer.ggml.eos_token_id",
                id: 1,
                vocab: 1
            })
        );
    }
}
