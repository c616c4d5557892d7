//! A multi-sequence batched forward pass: several sequences' new tokens in one pass (one
//! matmul per weight over all rows), each sequence with its own KV cache, each row attending
//! only to its own sequence. Built from the public items of [`crate::model`],
//! [`crate::backend`], [`crate::pool`] and [`crate::quant`]; the layer math follows
//! [`crate::engine::Engine`] (RMSNorm, adjacent-pair RoPE, grouped-query attention, SwiGLU).
//!
//! **Row invariance.** Every row's result is computed by the same code in the same order
//! whatever the other rows are: embedding, norms, RoPE and attention are per row, and the CPU
//! backend's matmul kernels accumulate each (token, output) element independently of the
//! batch size (the 4x4 blocks alias missing tokens and drop their results). So a sequence's
//! logits do not depend on what it is batched with; `tests/agents_model.rs` checks this
//! bit for bit, which is what makes greedy speculative decoding exactly lossless.
//!
//! All buffers are allocated in [`BatchEngine::new`]; `forward` does not allocate.

use std::fmt;
use std::sync::Arc;

use crate::backend::{Backend, BackendError};
use crate::model::{Model, WeightRef};
use crate::pool::{Pool, SharedMut};
use crate::quant;

/// Why a batched forward failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// A sequence index >= the number of sequences.
    NoSuchSeq(usize),
    /// A sequence appears twice in one batch.
    DuplicateSeq(usize),
    /// More tokens than `max_batch` in one call.
    TooManyTokens {
        /// Tokens given.
        got: usize,
        /// Limit.
        max: usize,
    },
    /// A sequence would exceed the context.
    ContextFull {
        /// Sequence.
        seq: usize,
        /// Positions needed.
        need: usize,
        /// Context.
        context: usize,
    },
    /// A token id outside the vocabulary.
    BadToken(u32),
    /// The logits buffer has the wrong length.
    LogitsLen {
        /// Expected.
        expected: usize,
        /// Given.
        got: usize,
    },
    /// `truncate` to more positions than the sequence holds.
    Truncate {
        /// Sequence.
        seq: usize,
        /// Asked.
        len: usize,
        /// Held.
        held: usize,
    },
    /// The backend failed.
    Backend(String, BackendError),
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchSeq(s) => write!(f, "no sequence {s}"),
            Self::DuplicateSeq(s) => write!(f, "sequence {s} appears twice in one batch"),
            Self::TooManyTokens { got, max } => {
                write!(f, "{got} tokens in one batch, at most {max}")
            }
            Self::ContextFull { seq, need, context } => write!(
                f,
                "sequence {seq} needs {need} positions, the context holds {context}"
            ),
            Self::BadToken(t) => write!(f, "token id {t} is outside the vocabulary"),
            Self::LogitsLen { expected, got } => {
                write!(f, "logits buffer holds {got} floats, expected {expected}")
            }
            Self::Truncate { seq, len, held } => write!(
                f,
                "cannot truncate sequence {seq} to {len} positions: it holds {held}"
            ),
            Self::Backend(b, e) => write!(f, "backend `{b}` failed: {e}"),
        }
    }
}

impl std::error::Error for BatchError {}

/// Settings.
#[derive(Clone, Copy, Debug)]
pub struct BatchOptions {
    /// KV positions per sequence (clamped to the model's context).
    pub context: usize,
    /// Most tokens (all sequences together) in one `forward`.
    pub max_batch: usize,
    /// Number of sequences (each gets its own cache).
    pub sequences: usize,
}

/// One sequence's tokens in a batch.
#[derive(Clone, Copy, Debug)]
pub struct SeqTokens<'a> {
    /// Sequence index.
    pub seq: usize,
    /// Tokens appended to it.
    pub tokens: &'a [u32],
}

/// Which rows get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Every token's (`total_tokens * vocab` floats, in batch order).
    All,
    /// Each sequence's last token's (`sequences_in_batch * vocab`).
    Last,
}

struct Cache {
    k: Vec<f32>,
    v: Vec<f32>,
    len: usize,
}

/// The batched engine.
pub struct BatchEngine {
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    pool: Arc<Pool>,
    ctx: usize,
    max_batch: usize,
    caches: Vec<Cache>,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    row_seq: Vec<usize>,
    row_pos: Vec<usize>,
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    tmp: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    scores: Vec<f32>,
    seen: Vec<bool>,
}

impl BatchEngine {
    /// An engine for `opts.sequences` sequences; every weight goes through `backend.prepare`.
    pub fn new(
        model: Arc<Model>,
        mut backend: Box<dyn Backend>,
        pool: Arc<Pool>,
        opts: BatchOptions,
    ) -> Result<Self, BatchError> {
        let c = &model.config;
        let name = backend.name().to_owned();
        for l in &model.layers {
            for w in [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down] {
                backend
                    .prepare(&model.view(w))
                    .map_err(|e| BatchError::Backend(name.clone(), e))?;
            }
        }
        backend
            .prepare(&model.view(&model.output))
            .map_err(|e| BatchError::Backend(name.clone(), e))?;
        let ctx = opts.context.clamp(1, c.context.max(1));
        let mb = opts.max_batch.max(1);
        let kv = c.kv_dim();
        let half = c.rope_dims / 2;
        let mut rope_cos = vec![0f32; ctx * half];
        let mut rope_sin = vec![0f32; ctx * half];
        for p in 0..ctx {
            for i in 0..half {
                let freq = (c.rope_theta as f64).powf(-2.0 * i as f64 / c.rope_dims as f64);
                let a = p as f64 * freq;
                rope_cos[p * half + i] = a.cos() as f32;
                rope_sin[p * half + i] = a.sin() as f32;
            }
        }
        backend.reserve(mb, c.d_model.max(c.d_ff));
        let caches = (0..opts.sequences)
            .map(|_| Cache {
                k: vec![0.0; c.n_layer * ctx * kv],
                v: vec![0.0; c.n_layer * ctx * kv],
                len: 0,
            })
            .collect();
        Ok(Self {
            caches,
            rope_cos,
            rope_sin,
            row_seq: vec![0; mb],
            row_pos: vec![0; mb],
            x: vec![0.0; mb * c.d_model],
            h: vec![0.0; mb * c.d_model],
            q: vec![0.0; mb * c.d_model],
            k: vec![0.0; mb * kv],
            v: vec![0.0; mb * kv],
            att: vec![0.0; mb * c.d_model],
            tmp: vec![0.0; mb * c.d_model.max(c.vocab)],
            g: vec![0.0; mb * c.d_ff],
            u: vec![0.0; mb * c.d_ff],
            scores: vec![0.0; pool.threads() * ctx],
            seen: vec![false; opts.sequences],
            model,
            backend,
            pool,
            ctx,
            max_batch: mb,
        })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Positions per sequence.
    pub fn context(&self) -> usize {
        self.ctx
    }

    /// Most tokens per `forward`.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Number of sequences.
    pub fn sequences(&self) -> usize {
        self.caches.len()
    }

    /// Positions in sequence `seq`'s cache (0 for an unknown sequence).
    pub fn len(&self, seq: usize) -> usize {
        self.caches.get(seq).map_or(0, |c| c.len)
    }

    /// Whether sequence `seq` holds no positions.
    pub fn is_empty(&self, seq: usize) -> bool {
        self.len(seq) == 0
    }

    /// Keeps the first `len` positions of sequence `seq` (the rest is overwritten later).
    pub fn truncate(&mut self, seq: usize, len: usize) -> Result<(), BatchError> {
        let c = self.caches.get_mut(seq).ok_or(BatchError::NoSuchSeq(seq))?;
        if len > c.len {
            return Err(BatchError::Truncate {
                seq,
                len,
                held: c.len,
            });
        }
        c.len = len;
        Ok(())
    }

    /// Appends each entry's tokens to its sequence and writes logits (see [`Logits`]). The
    /// total token count must be <= [`BatchEngine::max_batch`]; each sequence at most once.
    pub fn forward(
        &mut self,
        batch: &[SeqTokens<'_>],
        which: Logits,
        logits: &mut [f32],
    ) -> Result<(), BatchError> {
        let vocab = self.model.config.vocab;
        let m: usize = batch.iter().map(|b| b.tokens.len()).sum();
        if m > self.max_batch {
            return Err(BatchError::TooManyTokens {
                got: m,
                max: self.max_batch,
            });
        }
        let rows_out = match which {
            Logits::All => m,
            Logits::Last => batch.iter().filter(|b| !b.tokens.is_empty()).count(),
        };
        if logits.len() != rows_out * vocab {
            return Err(BatchError::LogitsLen {
                expected: rows_out * vocab,
                got: logits.len(),
            });
        }
        self.seen.iter_mut().for_each(|s| *s = false);
        let mut r = 0;
        for b in batch {
            let c = self.caches.get(b.seq).ok_or(BatchError::NoSuchSeq(b.seq))?;
            if std::mem::replace(&mut self.seen[b.seq], true) {
                return Err(BatchError::DuplicateSeq(b.seq));
            }
            if c.len + b.tokens.len() > self.ctx {
                return Err(BatchError::ContextFull {
                    seq: b.seq,
                    need: c.len + b.tokens.len(),
                    context: self.ctx,
                });
            }
            if let Some(&t) = b.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(BatchError::BadToken(t));
            }
            for i in 0..b.tokens.len() {
                self.row_seq[r] = b.seq;
                self.row_pos[r] = c.len + i;
                r += 1;
            }
        }
        if m == 0 {
            return Ok(());
        }
        self.layers(batch, m)?;
        for b in batch {
            self.caches[b.seq].len += b.tokens.len();
        }
        // Final norm and output head on the wanted rows, gathered into `h`.
        let c = &self.model.config;
        let d = c.d_model;
        let mut out_rows = 0;
        let mut r0 = 0;
        for b in batch {
            let n = b.tokens.len();
            let (from, cnt) = match which {
                Logits::All => (r0, n),
                Logits::Last if n > 0 => (r0 + n - 1, 1),
                Logits::Last => (r0, 0),
            };
            for t in from..from + cnt {
                rmsnorm_row(
                    &self.x[t * d..(t + 1) * d],
                    &self.model.output_norm,
                    c.eps,
                    &mut self.h[out_rows * d..(out_rows + 1) * d],
                );
                out_rows += 1;
            }
            r0 += n;
        }
        let view = self.model.view(&self.model.output);
        self.backend
            .matmul(&view, &self.h[..out_rows * d], out_rows, logits)
            .map_err(|e| BatchError::Backend(self.backend.name().to_owned(), e))
    }

    fn matmul(&mut self, w: WeightRef, input: Buf, m: usize, out: Buf) -> Result<(), BatchError> {
        let mut o = std::mem::take(self.buf(out));
        let view = self.model.view(&w);
        let x = match input {
            Buf::H => &self.h,
            Buf::Att => &self.att,
            _ => &self.g,
        };
        let r = self
            .backend
            .matmul(&view, &x[..m * w.k], m, &mut o[..m * w.n])
            .map_err(|e| BatchError::Backend(self.backend.name().to_owned(), e));
        *self.buf(out) = o;
        r
    }

    fn buf(&mut self, b: Buf) -> &mut Vec<f32> {
        match b {
            Buf::H => &mut self.h,
            Buf::Q => &mut self.q,
            Buf::K => &mut self.k,
            Buf::V => &mut self.v,
            Buf::Att => &mut self.att,
            Buf::Tmp => &mut self.tmp,
            Buf::G => &mut self.g,
            Buf::U => &mut self.u,
        }
    }

    fn layers(&mut self, batch: &[SeqTokens<'_>], m: usize) -> Result<(), BatchError> {
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let (d, kv, hd) = (c.d_model, c.kv_dim(), c.head_dim);
        let emb = model.view(&model.embed);
        let rb = emb.data.len() / emb.n.max(1);
        let mut t = 0;
        for b in batch {
            for &tok in b.tokens {
                let src = &emb.data[tok as usize * rb..(tok as usize + 1) * rb];
                quant::dequantize_row(emb.ty, src, &mut self.x[t * d..(t + 1) * d]);
                t += 1;
            }
        }
        let half = c.rope_dims / 2;
        for (l, layer) in model.layers.iter().enumerate() {
            for t in 0..m {
                rmsnorm_row(
                    &self.x[t * d..(t + 1) * d],
                    &layer.attn_norm,
                    c.eps,
                    &mut self.h[t * d..(t + 1) * d],
                );
            }
            self.matmul(layer.wq, Buf::H, m, Buf::Q)?;
            self.matmul(layer.wk, Buf::H, m, Buf::K)?;
            self.matmul(layer.wv, Buf::H, m, Buf::V)?;
            for t in 0..m {
                let p = self.row_pos[t];
                let (cs, sn) = (
                    &self.rope_cos[p * half..(p + 1) * half],
                    &self.rope_sin[p * half..(p + 1) * half],
                );
                for hq in self.q[t * d..(t + 1) * d].chunks_exact_mut(hd) {
                    rope(hq, cs, sn);
                }
                for hk in self.k[t * kv..(t + 1) * kv].chunks_exact_mut(hd) {
                    rope(hk, cs, sn);
                }
                let cache = &mut self.caches[self.row_seq[t]];
                let at = (l * self.ctx + p) * kv;
                cache.k[at..at + kv].copy_from_slice(&self.k[t * kv..(t + 1) * kv]);
                cache.v[at..at + kv].copy_from_slice(&self.v[t * kv..(t + 1) * kv]);
            }
            self.attention(l, m);
            self.matmul(layer.wo, Buf::Att, m, Buf::Tmp)?;
            for (x, o) in self.x[..m * d].iter_mut().zip(&self.tmp[..m * d]) {
                *x += o;
            }
            for t in 0..m {
                rmsnorm_row(
                    &self.x[t * d..(t + 1) * d],
                    &layer.ffn_norm,
                    c.eps,
                    &mut self.h[t * d..(t + 1) * d],
                );
            }
            self.matmul(layer.gate, Buf::H, m, Buf::G)?;
            self.matmul(layer.up, Buf::H, m, Buf::U)?;
            for (g, u) in self.g[..m * c.d_ff].iter_mut().zip(&self.u[..m * c.d_ff]) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            self.matmul(layer.down, Buf::G, m, Buf::Tmp)?;
            for (x, o) in self.x[..m * d].iter_mut().zip(&self.tmp[..m * d]) {
                *x += o;
            }
        }
        Ok(())
    }

    /// Causal grouped-query attention of each row over its own sequence's cache, positions
    /// `0..=pos` (the row's own key/value were written before).
    fn attention(&mut self, l: usize, m: usize) {
        let c = &self.model.config;
        let (d, kv, hd, nh) = (c.d_model, c.kv_dim(), c.head_dim, c.n_head);
        let group = c.n_head / c.n_kv_head.max(1);
        let ctx = self.ctx;
        let scale = 1.0 / (hd as f32).sqrt();
        let caches = &self.caches;
        let (row_seq, row_pos) = (&self.row_seq, &self.row_pos);
        let q = &self.q;
        let att = SharedMut::new(&mut self.att[..m * d]);
        let scores = SharedMut::new(&mut self.scores[..]);
        let task = |task: usize, thread: usize| {
            let (t, h) = (task / nh, task % nh);
            let p = row_pos[t];
            let cache = &caches[row_seq[t]];
            let kc = &cache.k[l * ctx * kv..(l + 1) * ctx * kv];
            let vc = &cache.v[l * ctx * kv..(l + 1) * ctx * kv];
            let kvh = h / group;
            let qh = &q[t * d + h * hd..t * d + (h + 1) * hd];
            // SAFETY: the pool runs one task at a time per thread index, so the per-thread
            // score rows `[thread * ctx, thread * ctx + p + 1)` (p < ctx) never overlap.
            let s = unsafe { scores.slice(thread * ctx, p + 1) };
            let mut max = f32::NEG_INFINITY;
            for (j, sj) in s.iter_mut().enumerate() {
                let kj = &kc[j * kv + kvh * hd..j * kv + (kvh + 1) * hd];
                *sj = dot(qh, kj) * scale;
                max = max.max(*sj);
            }
            let mut sum = 0f32;
            for sj in s.iter_mut() {
                *sj = (*sj - max).exp();
                sum += *sj;
            }
            // SAFETY: each task writes only its own (row, head) slice of `att`; tasks have
            // distinct (t, h), so the slices are disjoint.
            let o = unsafe { att.slice(t * d + h * hd, hd) };
            o.fill(0.0);
            let inv = 1.0 / sum;
            for (j, &sj) in s.iter().enumerate() {
                let vj = &vc[j * kv + kvh * hd..j * kv + (kvh + 1) * hd];
                let w = sj * inv;
                for (oi, vi) in o.iter_mut().zip(vj) {
                    *oi += w * vi;
                }
            }
        };
        self.pool.run(m * nh, &task);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Buf {
    H,
    Q,
    K,
    V,
    Att,
    Tmp,
    G,
    U,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = [0f32; 8];
    let mut ac = a.chunks_exact(8);
    let mut bc = b.chunks_exact(8);
    for (x, y) in (&mut ac).zip(&mut bc) {
        for j in 0..8 {
            s[j] += x[j] * y[j];
        }
    }
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    s.iter().sum::<f32>() + tail
}

fn rmsnorm_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    let ss = dot(x, x) / n as f32;
    let inv = 1.0 / (ss + eps).sqrt();
    for ((o, xi), wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * inv * wi;
    }
}

fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (pair, (c, s)) in x.chunks_exact_mut(2).zip(cos.iter().zip(sin)) {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * c - b * s;
        pair[1] = a * s + b * c;
    }
}
