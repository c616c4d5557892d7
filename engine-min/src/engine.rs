//! The inference engine: KV cache, RoPE, grouped-query attention, SwiGLU and RMSNorm on the
//! CPU pool; the matmuls through a [`Backend`]. All buffers are allocated in [`Engine::new`];
//! `forward` does not allocate.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Backend, BackendError, WeightView};
use crate::model::{Model, WeightRef};
use crate::pool::{Pool, SharedMut};
use crate::quant;

/// Why a forward pass failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The tokens do not fit in the remaining context.
    ContextFull {
        /// Positions needed.
        need: usize,
        /// Context size of the cache.
        context: usize,
    },
    /// A token id outside the vocabulary.
    BadToken(u32),
    /// The logits buffer has the wrong length.
    LogitsLen {
        /// Expected (`vocab` or `tokens * vocab`).
        expected: usize,
        /// Given.
        got: usize,
    },
    /// A backend failed.
    Backend(String, BackendError),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ContextFull { need, context } => {
                write!(f, "{need} positions needed but the context holds {context}")
            }
            Self::BadToken(t) => write!(f, "token id {t} is outside the vocabulary"),
            Self::LogitsLen { expected, got } => {
                write!(f, "logits buffer holds {got} floats, expected {expected}")
            }
            Self::Backend(b, e) => write!(f, "backend `{b}` failed: {e}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// Time spent, by where it was spent.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Matmuls, per backend name.
    pub matmul: Vec<(String, Duration)>,
    /// Host ops on the CPU pool (norms, RoPE, attention, SwiGLU, embedding).
    pub host: Duration,
}

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// KV-cache positions (clamped to the model's context length).
    pub context: usize,
    /// Most tokens processed in one batch (longer prompts are chunked).
    pub max_batch: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            context: 2048,
            max_batch: 128,
        }
    }
}

/// The inference engine for one sequence.
pub struct Engine {
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    pool: Arc<Pool>,
    ctx: usize,
    max_batch: usize,
    /// Filled positions of the KV cache.
    pos: usize,
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
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
    timings: Timings,
}

impl Engine {
    /// An engine for `model` running matmuls on `backend` and host ops on `pool`; every weight
    /// goes through `backend.prepare` here.
    pub fn new(
        model: Arc<Model>,
        mut backend: Box<dyn Backend>,
        pool: Arc<Pool>,
        opts: EngineOptions,
    ) -> Result<Self, EngineError> {
        let c = &model.config;
        let name = backend.name().to_owned();
        let prep = |b: &mut Box<dyn Backend>, w: &WeightRef| {
            b.prepare(&model.view(w))
                .map_err(|e| EngineError::Backend(name.clone(), e))
        };
        for l in &model.layers {
            for w in [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down] {
                prep(&mut backend, w)?;
            }
        }
        prep(&mut backend, &model.output)?;
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
        Ok(Self {
            k_cache: vec![0.0; c.n_layer * ctx * kv],
            v_cache: vec![0.0; c.n_layer * ctx * kv],
            rope_cos,
            rope_sin,
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
            timings: Timings {
                matmul: vec![(name, Duration::ZERO)],
                host: Duration::ZERO,
            },
            model,
            backend,
            pool,
            ctx,
            max_batch: mb,
            pos: 0,
        })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// Positions already in the KV cache.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// KV-cache capacity.
    pub fn context(&self) -> usize {
        self.ctx
    }

    /// Forgets the sequence (the cache is overwritten as new tokens come).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Time spent so far.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// Clears the timings.
    pub fn reset_timings(&mut self) {
        for m in &mut self.timings.matmul {
            m.1 = Duration::ZERO;
        }
        self.timings.host = Duration::ZERO;
    }

    /// Appends `tokens` to the sequence and writes logits: for the last token when
    /// `logits.len() == vocab`, for every token when `logits.len() == tokens.len() * vocab`.
    pub fn forward(&mut self, tokens: &[u32], logits: &mut [f32]) -> Result<(), EngineError> {
        let vocab = self.model.config.vocab;
        let all = logits.len() == tokens.len() * vocab && tokens.len() != 1;
        if logits.len() != vocab && !all {
            return Err(EngineError::LogitsLen {
                expected: vocab,
                got: logits.len(),
            });
        }
        if self.pos + tokens.len() > self.ctx {
            return Err(EngineError::ContextFull {
                need: self.pos + tokens.len(),
                context: self.ctx,
            });
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::BadToken(t));
        }
        let mut done = 0;
        while done < tokens.len() {
            let m = (tokens.len() - done).min(self.max_batch);
            let chunk = &tokens[done..done + m];
            let last = done + m == tokens.len();
            if all {
                self.step(chunk, Some(&mut logits[done * vocab..(done + m) * vocab]))?;
            } else if last {
                self.step(chunk, Some(logits))?;
                break;
            } else {
                self.step(chunk, None)?;
            }
            done += m;
        }
        Ok(())
    }

    fn matmul(&mut self, w: WeightRef, input: Buf, m: usize, out: Buf) -> Result<(), EngineError> {
        let t0 = Instant::now();
        // Taking the output Vec out of `self` (no allocation) lets the input be borrowed.
        let mut o = std::mem::take(self.buf(out));
        let view: WeightView<'_> = self.model.view(&w);
        let x = match input {
            Buf::H => &self.h,
            Buf::Att => &self.att,
            Buf::G => &self.g,
            _ => &self.tmp,
        };
        let r = self
            .backend
            .matmul(&view, &x[..m * w.k], m, &mut o[..m * w.n])
            .map_err(|e| EngineError::Backend(self.backend.name().to_owned(), e));
        *self.buf(out) = o;
        self.timings.matmul[0].1 += t0.elapsed();
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

    fn step(&mut self, tokens: &[u32], logits: Option<&mut [f32]>) -> Result<(), EngineError> {
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let (d, kv, hd, m) = (c.d_model, c.kv_dim(), c.head_dim, tokens.len());
        let pos0 = self.pos;
        let t0 = Instant::now();
        let emb = model.view(&model.embed);
        let rb = emb.data.len() / emb.n;
        for (t, &tok) in tokens.iter().enumerate() {
            let src = &emb.data[tok as usize * rb..(tok as usize + 1) * rb];
            quant::dequantize_row(emb.ty, src, &mut self.x[t * d..(t + 1) * d]);
        }
        self.timings.host += t0.elapsed();
        for (l, layer) in model.layers.iter().enumerate() {
            let t0 = Instant::now();
            rmsnorm(
                &self.x[..m * d],
                &layer.attn_norm,
                c.eps,
                &mut self.h[..m * d],
            );
            self.timings.host += t0.elapsed();
            self.matmul(layer.wq, Buf::H, m, Buf::Q)?;
            self.matmul(layer.wk, Buf::H, m, Buf::K)?;
            self.matmul(layer.wv, Buf::H, m, Buf::V)?;
            let t0 = Instant::now();
            let half = c.rope_dims / 2;
            for t in 0..m {
                let p = pos0 + t;
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
                let at = (l * self.ctx + p) * kv;
                self.k_cache[at..at + kv].copy_from_slice(&self.k[t * kv..(t + 1) * kv]);
                self.v_cache[at..at + kv].copy_from_slice(&self.v[t * kv..(t + 1) * kv]);
            }
            self.attention(l, pos0, m);
            self.timings.host += t0.elapsed();
            self.matmul(layer.wo, Buf::Att, m, Buf::Tmp)?;
            let t0 = Instant::now();
            for (x, o) in self.x[..m * d].iter_mut().zip(&self.tmp[..m * d]) {
                *x += o;
            }
            rmsnorm(
                &self.x[..m * d],
                &layer.ffn_norm,
                c.eps,
                &mut self.h[..m * d],
            );
            self.timings.host += t0.elapsed();
            self.matmul(layer.gate, Buf::H, m, Buf::G)?;
            self.matmul(layer.up, Buf::H, m, Buf::U)?;
            let t0 = Instant::now();
            for (g, u) in self.g[..m * c.d_ff].iter_mut().zip(&self.u[..m * c.d_ff]) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            self.timings.host += t0.elapsed();
            self.matmul(layer.down, Buf::G, m, Buf::Tmp)?;
            let t0 = Instant::now();
            for (x, o) in self.x[..m * d].iter_mut().zip(&self.tmp[..m * d]) {
                *x += o;
            }
            self.timings.host += t0.elapsed();
        }
        self.pos += m;
        let Some(logits) = logits else { return Ok(()) };
        let vocab = c.vocab;
        let t0 = Instant::now();
        // Normalize only the rows whose logits are wanted.
        let first = if logits.len() == vocab { m - 1 } else { 0 };
        let rows = m - first;
        rmsnorm(
            &self.x[first * d..m * d],
            &model.output_norm,
            c.eps,
            &mut self.h[..rows * d],
        );
        self.timings.host += t0.elapsed();
        let t0 = Instant::now();
        let view = model.view(&model.output);
        let r = self
            .backend
            .matmul(&view, &self.h[..rows * d], rows, logits)
            .map_err(|e| EngineError::Backend(self.backend.name().to_owned(), e));
        self.timings.matmul[0].1 += t0.elapsed();
        r
    }

    /// Causal grouped-query attention of `m` new tokens at `pos0..` over the cache.
    fn attention(&mut self, l: usize, pos0: usize, m: usize) {
        let c = &self.model.config;
        let (d, kv, hd, nh) = (c.d_model, c.kv_dim(), c.head_dim, c.n_head);
        let group = c.n_head / c.n_kv_head;
        let ctx = self.ctx;
        let scale = 1.0 / (hd as f32).sqrt();
        let kc = &self.k_cache[l * ctx * kv..(l + 1) * ctx * kv];
        let vc = &self.v_cache[l * ctx * kv..(l + 1) * ctx * kv];
        let q = &self.q;
        let att = SharedMut::new(&mut self.att[..m * d]);
        let scores = SharedMut::new(&mut self.scores[..]);
        let task = |task: usize, thread: usize| {
            let (t, h) = (task / nh, task % nh);
            let p = pos0 + t;
            let kvh = h / group;
            let qh = &q[t * d + h * hd..t * d + (h + 1) * hd];
            // SAFETY: each pool thread index is used by one task at a time, so the per-thread
            // score rows never overlap.
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
            // SAFETY: each task writes its own (token, head) slice of `att`.
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

/// `out = x / rms(x) * w`, row by row (rows of `w.len()`).
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    for (xr, or) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let ss = dot(xr, xr) / n as f32;
        let inv = 1.0 / (ss + eps).sqrt();
        for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
            *o = xi * inv * wi;
        }
    }
}

/// Rotates adjacent pairs `(2i, 2i+1)` of one head (ggml's "normal" RoPE, which the GGUF
/// converter's Q/K permutation makes correct for Llama).
fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (pair, (c, s)) in x.chunks_exact_mut(2).zip(cos.iter().zip(sin)) {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * c - b * s;
        pair[1] = a * s + b * c;
    }
}
