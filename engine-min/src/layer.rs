//! The transformer step shared by [`crate::engine::Engine`] (one sequence) and
//! [`crate::batch::BatchEngine`] (several sequences in one pass): embedding, and per layer
//! RMSNorm, Q/K/V matmuls, adjacent-pair RoPE, KV-cache write, causal grouped-query attention,
//! output projection, SwiGLU MLP and the residuals.
//!
//! The callers differ only in where each row's keys and values live and at which position it
//! sits; a [`Rows`] says that. Every row is computed by the same code in the same order
//! whatever the other rows are (norms, RoPE and attention are per row), which the batched
//! engine's bit-for-bit batch invariance relies on. Nothing here allocates: [`Work`] and the
//! [`KvCache`]s are sized once by their constructors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::act::{ActBuf, UmaActs};

use crate::backend::{Backend, BackendError};
use crate::model::{Config, Model, WeightRef};
use crate::quant;
use hetero_sme::ThreadPool as Pool;

/// One sequence's keys and values: `n_layer * ctx * kv_dim` floats each, layer-major.
pub(crate) struct KvCache {
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
}

impl KvCache {
    /// A zeroed cache of `ctx` positions for the model `c`.
    pub(crate) fn new(c: &Config, ctx: usize) -> Self {
        let n = c.n_layer * ctx * c.kv_dim();
        Self {
            k: vec![0.0; n],
            v: vec![0.0; n],
        }
    }
}

/// Where the rows of a pass belong.
pub(crate) trait Rows: Sync {
    /// Position of row `t` in its sequence (`< ctx`).
    fn pos(&self, t: usize) -> usize;
    /// Index of row `t`'s sequence in the caches.
    fn seq(&self, t: usize) -> usize;
}

/// Where time goes; `None` fields are not measured (and no clock is read for them).
#[derive(Default)]
pub(crate) struct Clock<'a> {
    /// Host ops (norms, RoPE, attention, SwiGLU, residuals, embedding).
    pub(crate) host: Option<&'a mut Duration>,
    /// Matmuls.
    pub(crate) matmul: Option<&'a mut Duration>,
}

impl Clock<'_> {
    fn start(&self) -> Option<Instant> {
        (self.host.is_some() || self.matmul.is_some()).then(Instant::now)
    }

    /// Adds the time since `t0` to the host time.
    pub(crate) fn host(&mut self, t0: Option<Instant>) {
        if let (Some(h), Some(t0)) = (self.host.as_deref_mut(), t0) {
            *h += t0.elapsed();
        }
    }

    fn matmul(&mut self, t0: Option<Instant>) {
        if let (Some(m), Some(t0)) = (self.matmul.as_deref_mut(), t0) {
            *m += t0.elapsed();
        }
    }
}

/// Activation buffers (for up to `max_batch` rows), RoPE tables and attention scratch.
pub(crate) struct Work {
    ctx: usize,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    /// Residual stream, `max_batch * d_model`.
    pub(crate) x: ActBuf,
    /// Normed rows, `max_batch * d_model`.
    pub(crate) h: ActBuf,
    q: ActBuf,
    k: ActBuf,
    v: ActBuf,
    att: ActBuf,
    tmp: ActBuf,
    g: ActBuf,
    u: ActBuf,
    scores: Vec<f32>,
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

impl Work {
    /// Buffers for `max_batch` rows of model `c`, RoPE tables for `ctx` positions and
    /// attention scratch for `threads` pool threads.
    pub(crate) fn new(c: &Config, ctx: usize, max_batch: usize, threads: usize) -> Self {
        Self::new_in(c, ctx, max_batch, threads, None)
    }

    /// [`Work::new`] with the activation buffers in the slots of `acts` when given (see
    /// [`crate::act`]); a slot that cannot be taken falls back to the heap.
    pub(crate) fn new_in(
        c: &Config,
        ctx: usize,
        max_batch: usize,
        threads: usize,
        acts: Option<&Arc<UmaActs>>,
    ) -> Self {
        let mut slot = 0;
        let mut buf = |len: usize| {
            let b = acts.and_then(|a| a.take(slot, len));
            slot += 1;
            b.unwrap_or_else(|| ActBuf::heap(len))
        };
        let mb = max_batch;
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
        Self {
            ctx,
            rope_cos,
            rope_sin,
            x: buf(mb * c.d_model),
            h: buf(mb * c.d_model),
            q: buf(mb * c.d_model),
            k: buf(mb * kv),
            v: buf(mb * kv),
            att: buf(mb * c.d_model),
            tmp: buf(mb * c.d_model.max(c.vocab)),
            g: buf(mb * c.d_ff),
            u: buf(mb * c.d_ff),
            scores: vec![0.0; threads * ctx],
        }
    }

    /// Writes token `tok`'s embedding into row `t` of the residual stream.
    pub(crate) fn embed(&mut self, model: &Model, t: usize, tok: u32) {
        let d = model.config.d_model;
        let emb = model.view(&model.embed);
        let rb = emb.data.len() / emb.n.max(1);
        let src = &emb.data[tok as usize * rb..(tok as usize + 1) * rb];
        quant::dequantize_row(emb.ty, src, &mut self.x[t * d..(t + 1) * d]);
    }

    /// Runs every layer over the `m` rows of the residual stream: each row's key and value
    /// go to `caches[rows.seq(t)]` at `rows.pos(t)`, and each row attends to its own
    /// sequence's positions `0..=pos`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn layers<R: Rows>(
        &mut self,
        model: &Model,
        backend: &dyn Backend,
        pool: &Pool,
        caches: &mut [KvCache],
        rows: &R,
        m: usize,
        clock: &mut Clock<'_>,
    ) -> Result<(), BackendError> {
        let c = &model.config;
        let (d, kv, hd) = (c.d_model, c.kv_dim(), c.head_dim);
        let half = c.rope_dims / 2;
        for (l, layer) in model.layers.iter().enumerate() {
            let t0 = clock.start();
            rmsnorm(
                &self.x[..m * d],
                &layer.attn_norm,
                c.eps,
                &mut self.h[..m * d],
            );
            clock.host(t0);
            self.matmul(model, backend, clock, layer.wq, Buf::H, m, Buf::Q)?;
            self.matmul(model, backend, clock, layer.wk, Buf::H, m, Buf::K)?;
            self.matmul(model, backend, clock, layer.wv, Buf::H, m, Buf::V)?;
            let t0 = clock.start();
            for t in 0..m {
                let p = rows.pos(t);
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
                let cache = &mut caches[rows.seq(t)];
                let at = (l * self.ctx + p) * kv;
                cache.k[at..at + kv].copy_from_slice(&self.k[t * kv..(t + 1) * kv]);
                cache.v[at..at + kv].copy_from_slice(&self.v[t * kv..(t + 1) * kv]);
            }
            self.attention(c, pool, caches, rows, l, m)?;
            clock.host(t0);
            self.matmul(model, backend, clock, layer.wo, Buf::Att, m, Buf::Tmp)?;
            let t0 = clock.start();
            for (x, o) in self.x[..m * d].iter_mut().zip(&self.tmp[..m * d]) {
                *x += o;
            }
            rmsnorm(
                &self.x[..m * d],
                &layer.ffn_norm,
                c.eps,
                &mut self.h[..m * d],
            );
            clock.host(t0);
            self.matmul(model, backend, clock, layer.gate, Buf::H, m, Buf::G)?;
            self.matmul(model, backend, clock, layer.up, Buf::H, m, Buf::U)?;
            let t0 = clock.start();
            for (g, u) in self.g[..m * c.d_ff].iter_mut().zip(&self.u[..m * c.d_ff]) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            clock.host(t0);
            self.matmul(model, backend, clock, layer.down, Buf::G, m, Buf::Tmp)?;
            let t0 = clock.start();
            for (x, o) in self.x[..m * d].iter_mut().zip(&self.tmp[..m * d]) {
                *x += o;
            }
            clock.host(t0);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &mut self,
        model: &Model,
        backend: &dyn Backend,
        clock: &mut Clock<'_>,
        w: WeightRef,
        input: Buf,
        m: usize,
        out: Buf,
    ) -> Result<(), BackendError> {
        let t0 = clock.start();
        // Taking the output buffer out of `self` (no allocation) lets the input be borrowed.
        let mut o = std::mem::take(self.buf(out));
        let view = model.view(&w);
        let x = match input {
            Buf::H => &self.h,
            Buf::Att => &self.att,
            Buf::G => &self.g,
            _ => &self.tmp,
        };
        let r = backend.matmul(&view, &x[..m * w.k], m, &mut o[..m * w.n]);
        *self.buf(out) = o;
        clock.matmul(t0);
        r
    }

    fn buf(&mut self, b: Buf) -> &mut ActBuf {
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

    /// Causal grouped-query attention of each of the `m` rows over its own sequence's cache
    /// of layer `l`, positions `0..=pos` (the row's own key/value were written before).
    fn attention<R: Rows>(
        &mut self,
        c: &Config,
        pool: &Pool,
        caches: &[KvCache],
        rows: &R,
        l: usize,
        m: usize,
    ) -> Result<(), BackendError> {
        let (d, kv, hd, nh) = (c.d_model, c.kv_dim(), c.head_dim, c.n_head);
        let group = c.n_head / c.n_kv_head.max(1);
        let ctx = self.ctx;
        let scale = 1.0 / (hd as f32).sqrt();
        let q = &self.q;
        // Task t·nh + h writes chunk (t, h) of `att`: d = nh·hd (checked at model load).
        let task = |task: usize, _thread: usize, o: &mut [f32], scores: &mut [f32]| {
            let (t, h) = (task / nh, task % nh);
            let p = rows.pos(t);
            let cache = &caches[rows.seq(t)];
            let kc = &cache.k[l * ctx * kv..(l + 1) * ctx * kv];
            let vc = &cache.v[l * ctx * kv..(l + 1) * ctx * kv];
            let kvh = h / group;
            let qh = &q[t * d + h * hd..t * d + (h + 1) * hd];
            // This thread's score row (p < ctx).
            let s = &mut scores[..p + 1];
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
        pool.run_chunks_mut_with_scratch(&mut self.att[..m * d], hd, &mut self.scores, ctx, &task)?;
        Ok(())
    }
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
