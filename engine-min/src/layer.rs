//! The transformer step shared by [`crate::engine::Engine`] (one sequence) and
//! [`crate::batch::BatchEngine`] (several sequences in one pass): embedding, and per layer
//! RMSNorm, Q/K/V matmuls, adjacent-pair RoPE, KV-cache write, causal grouped-query attention,
//! output projection, SwiGLU MLP and the residuals.
//!
//! The callers differ only in where each row's keys and values live and at which position it
//! sits; a [`Rows`] says that. Every row is computed by the same code in the same order
//! whatever the other rows are (norms, RoPE and attention are per row), which the batched
//! engine's bit-for-bit batch invariance relies on. Nothing here allocates: [`Work`] and the
//! [`KvCache`]s are sized once by their constructors; a step's activations live in uma slots
//! acquired for the step ([`crate::act`]), and every matmul goes through the [`Executor`].

use std::time::{Duration, Instant};

use crate::act::{Acts, Buf, StepSlots};
use crate::backend::{BackendError, WeightView};
use crate::exec::Executor;
use crate::guard::{LayerOp, Probe, Site};
use crate::model::{Config, Model};
use crate::swiglu::swiglu;
use hetero_sme::ThreadPool as Pool;
use hetero_uma::Handle;

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

/// The host ops of a step (everything but the matmuls), for the time breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostOp {
    /// Token embedding lookup.
    Embed,
    /// RMSNorms (attention, FFN, output).
    Norm,
    /// RoPE on q and k, and the KV-cache append.
    RopeKv,
    /// Causal attention over the cache.
    Attention,
    /// SwiGLU.
    Swiglu,
    /// Residual adds.
    Residual,
}

impl HostOp {
    /// Every host op, in [`HostTimes`] order.
    pub const ALL: [HostOp; 6] = [
        HostOp::Embed,
        HostOp::Norm,
        HostOp::RopeKv,
        HostOp::Attention,
        HostOp::Swiglu,
        HostOp::Residual,
    ];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            HostOp::Embed => "embed",
            HostOp::Norm => "rmsnorm",
            HostOp::RopeKv => "rope+kv",
            HostOp::Attention => "attention",
            HostOp::Swiglu => "swiglu",
            HostOp::Residual => "residual",
        }
    }
}

/// Host time per [`HostOp`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostTimes(pub [Duration; 6]);

impl HostTimes {
    /// All host ops together.
    pub fn total(&self) -> Duration {
        self.0.iter().sum()
    }

    /// The time of one op.
    pub fn get(&self, op: HostOp) -> Duration {
        self.0[op as usize]
    }

    /// Adds `d` to `op`.
    pub fn add(&mut self, op: HostOp, d: Duration) {
        self.0[op as usize] += d;
    }
}

/// Where time goes; `None` fields are not measured (and no clock is read for them).
#[derive(Default)]
pub(crate) struct Clock<'a> {
    /// Host ops (norms, RoPE, attention, SwiGLU, residuals, embedding).
    pub(crate) host: Option<&'a mut HostTimes>,
    /// Matmuls.
    pub(crate) matmul: Option<&'a mut Duration>,
}

impl Clock<'_> {
    pub(crate) fn start(&self) -> Option<Instant> {
        (self.host.is_some() || self.matmul.is_some()).then(Instant::now)
    }

    /// Adds the time since `t0` to host op `op`.
    pub(crate) fn host(&mut self, t0: Option<Instant>, op: HostOp) {
        if let (Some(h), Some(t0)) = (self.host.as_deref_mut(), t0) {
            h.add(op, t0.elapsed());
        }
    }

    fn matmul(&mut self, t0: Option<Instant>) {
        if let (Some(m), Some(t0)) = (self.matmul.as_deref_mut(), t0) {
            *m += t0.elapsed();
        }
    }
}

/// The model's matmul weights in the order the executor indexes them: per layer Q, K, V, O,
/// gate, up, down, then the output head.
pub fn matmul_weights(model: &Model) -> Vec<WeightView<'_>> {
    let mut v = Vec::with_capacity(model.layers.len() * LAYER_MATMULS + 1);
    for l in &model.layers {
        for w in [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down] {
            v.push(model.view(w));
        }
    }
    v.push(model.view(&model.output));
    v
}

/// Matmuls per layer.
pub const LAYER_MATMULS: usize = 7;

/// A layer's matmuls, in [`matmul_weights`] order.
#[derive(Clone, Copy)]
enum Op {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

fn weight(l: usize, op: Op) -> usize {
    l * LAYER_MATMULS + op as usize
}

/// Index of the output head among [`matmul_weights`].
pub fn output_weight(n_layer: usize) -> usize {
    n_layer * LAYER_MATMULS
}

/// RoPE tables, attention scratch and the activation slots (for up to `max_batch` rows).
pub(crate) struct Work {
    ctx: usize,
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    scores: Vec<f32>,
    acts: Acts,
}

impl Work {
    /// RoPE tables for `ctx` positions, attention scratch for `threads` pool threads, and
    /// activation slots for `max_batch` rows of model `c`.
    pub(crate) fn new(
        c: &Config,
        ctx: usize,
        max_batch: usize,
        threads: usize,
    ) -> Result<Self, hetero_uma::UmaError> {
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
        Ok(Self {
            ctx,
            rope_cos,
            rope_sin,
            scores: vec![0.0; threads * ctx],
            acts: Acts::for_model(c, max_batch.max(1))?,
        })
    }

    /// The activation slots' pool.
    pub(crate) fn acts(&self) -> &Acts {
        &self.acts
    }

    /// Writes token `tok`'s embedding into row `t` of the residual stream.
    pub(crate) fn embed(
        &self,
        model: &Model,
        s: &mut StepSlots,
        t: usize,
        tok: u32,
    ) -> Result<(), BackendError> {
        let d = model.config.d_model;
        let emb = model.view(&model.embed);
        let rb = emb.row_bytes()?;
        let src = &emb.data[tok as usize * rb..(tok as usize + 1) * rb];
        let x = self.acts.pool().f32s_mut(s.get_mut(Buf::X))?;
        hetero_sme::dequantize_row(emb.ty, src, &mut x[t * d..(t + 1) * d])?;
        Ok(())
    }

    /// `out = rmsnorm(in) * w` over `m` rows of `n` (rows spread over the pool when there are
    /// several: a prompt chunk's norms are as wide as its matmuls).
    #[allow(clippy::too_many_arguments)]
    fn norm(
        &self,
        pool: &Pool,
        s: &mut StepSlots,
        from: Buf,
        to: Buf,
        w: &[f32],
        eps: f32,
        m: usize,
    ) -> Result<(), BackendError> {
        let n = w.len();
        let (a, b) = s.pair(from, to);
        let up = self.acts.pool();
        let (x, o) = (&up.f32s(a)?[..m * n], &mut up.f32s_mut(b)?[..m * n]);
        if m < PAR_ROWS {
            rmsnorm(x, w, eps, o);
            return Ok(());
        }
        let rows = rows_per_task(m, pool.threads());
        pool.run_chunks_mut(o, rows * n, &|t, _, o: &mut [f32]| {
            let r0 = t * rows * n;
            rmsnorm(&x[r0..r0 + o.len()], w, eps, o);
        })?;
        Ok(())
    }

    /// `x += tmp` over `m` rows of `d`.
    fn residual(&self, s: &mut StepSlots, m: usize, d: usize) -> Result<(), BackendError> {
        let (t, x) = s.pair(Buf::Tmp, Buf::X);
        let pool = self.acts.pool();
        let add = &pool.f32s(t)?[..m * d];
        for (x, o) in pool.f32s_mut(x)?[..m * d].iter_mut().zip(add) {
            *x += o;
        }
        Ok(())
    }

    /// When `probe` checks `site`, checks `m` rows of `width` floats of `buf`, written by
    /// `site`; true when a non-finite value was found (the caller stops the step). Sites the
    /// probe does not check cost one branch.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn probed<R: Rows>(
        &self,
        p: &mut Probe,
        s: &StepSlots,
        buf: Buf,
        m: usize,
        width: usize,
        site: Site,
        rows: &R,
    ) -> Result<bool, BackendError> {
        if !p.wants(site) {
            return Ok(false);
        }
        let x = self.acts.pool().f32s(s.get(buf))?;
        Ok(p.check(site, &x[..m * width], width, |t| (rows.seq(t), rows.pos(t))))
    }

    /// Runs every layer over the `m` rows of the residual stream in `s`: each row's key and
    /// value go to `caches[rows.seq(t)]` at `rows.pos(t)`, and each row attends to its own
    /// sequence's positions `0..=pos`. The outputs `probe` wants are checked, and the pass
    /// stops at the first non-finite value (recorded in the probe).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn layers<R: Rows>(
        &mut self,
        model: &Model,
        exec: &Executor,
        s: &mut StepSlots,
        caches: &mut [KvCache],
        rows: &R,
        m: usize,
        clock: &mut Clock<'_>,
        probe: &mut Probe,
    ) -> Result<(), BackendError> {
        let c = &model.config;
        let (d, kv, hd) = (c.d_model, c.kv_dim(), c.head_dim);
        let half = c.rope_dims / 2;
        let pool = exec.cpu().pool();
        for (l, layer) in model.layers.iter().enumerate() {
            // After an op that wrote `buf` (rows of `width`): stop here if the probe found a
            // non-finite value in it.
            macro_rules! checked {
                ($buf:expr, $width:expr, $op:ident) => {
                    let site = Site::Layer {
                        layer: l,
                        op: LayerOp::$op,
                    };
                    if self.probed(probe, s, $buf, m, $width, site, rows)? {
                        return Ok(());
                    }
                };
            }
            let t0 = clock.start();
            self.norm(pool, s, Buf::X, Buf::H, &layer.attn_norm, c.eps, m)?;
            clock.host(t0, HostOp::Norm);
            checked!(Buf::H, d, AttnNorm);
            // Q, K and V share their input: one pool job when they all run on the CPU.
            {
                let [_, h, q, k, v, ..] = s.each_mut();
                let group = [
                    (weight(l, Op::Q), q),
                    (weight(l, Op::K), k),
                    (weight(l, Op::V), v),
                ];
                self.matmul_group(exec, clock, h, group, m)?;
            }
            checked!(Buf::Q, d, AttnQ);
            checked!(Buf::K, kv, AttnK);
            checked!(Buf::V, kv, AttnV);
            let t0 = clock.start();
            {
                let up = self.acts.pool();
                let [_, _, qh, kh, vh, ..] = s.each_mut();
                let (q, k, v) = (up.f32s_mut(qh)?, up.f32s_mut(kh)?, up.f32s(vh)?);
                for t in 0..m {
                    let p = rows.pos(t);
                    let (cs, sn) = (
                        &self.rope_cos[p * half..(p + 1) * half],
                        &self.rope_sin[p * half..(p + 1) * half],
                    );
                    for hq in q[t * d..(t + 1) * d].chunks_exact_mut(hd) {
                        rope(hq, cs, sn);
                    }
                    for hk in k[t * kv..(t + 1) * kv].chunks_exact_mut(hd) {
                        rope(hk, cs, sn);
                    }
                    let cache = &mut caches[rows.seq(t)];
                    let at = (l * self.ctx + p) * kv;
                    cache.k[at..at + kv].copy_from_slice(&k[t * kv..(t + 1) * kv]);
                    cache.v[at..at + kv].copy_from_slice(&v[t * kv..(t + 1) * kv]);
                }
            }
            clock.host(t0, HostOp::RopeKv);
            let t0 = clock.start();
            self.attention(c, pool, s, caches, rows, l, m)?;
            clock.host(t0, HostOp::Attention);
            checked!(Buf::Att, d, Attention);
            self.matmul(exec, clock, s, weight(l, Op::O), Buf::Att, m, Buf::Tmp)?;
            checked!(Buf::Tmp, d, AttnOutput);
            let t0 = clock.start();
            self.residual(s, m, d)?;
            clock.host(t0, HostOp::Residual);
            checked!(Buf::X, d, AttnResidual);
            let t0 = clock.start();
            self.norm(pool, s, Buf::X, Buf::H, &layer.ffn_norm, c.eps, m)?;
            clock.host(t0, HostOp::Norm);
            checked!(Buf::H, d, FfnNorm);
            // Gate and up share their input: one pool job when both run on the CPU.
            {
                let [_, h, _, _, _, _, _, g, u] = s.each_mut();
                let group = [(weight(l, Op::Gate), g), (weight(l, Op::Up), u)];
                self.matmul_group(exec, clock, h, group, m)?;
            }
            checked!(Buf::G, c.d_ff, FfnGate);
            checked!(Buf::U, c.d_ff, FfnUp);
            let t0 = clock.start();
            {
                let up = self.acts.pool();
                let (uh, gh) = s.pair(Buf::U, Buf::G);
                let u = &up.f32s(uh)?[..m * c.d_ff];
                let g = &mut up.f32s_mut(gh)?[..m * c.d_ff];
                if m < PAR_ROWS {
                    swiglu(g, u);
                } else {
                    let rows = rows_per_task(m, pool.threads());
                    let ff = c.d_ff;
                    pool.run_chunks_mut(g, rows * ff, &|t, _, g: &mut [f32]| {
                        let r0 = t * rows * ff;
                        swiglu(g, &u[r0..r0 + g.len()]);
                    })?;
                }
            }
            clock.host(t0, HostOp::Swiglu);
            checked!(Buf::G, c.d_ff, Swiglu);
            self.matmul(exec, clock, s, weight(l, Op::Down), Buf::G, m, Buf::Tmp)?;
            checked!(Buf::Tmp, d, FfnDown);
            let t0 = clock.start();
            self.residual(s, m, d)?;
            clock.host(t0, HostOp::Residual);
            checked!(Buf::X, d, FfnResidual);
        }
        Ok(())
    }

    /// The model's weight `w` times buffer `input` (`m` rows) into buffer `out`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn matmul(
        &self,
        exec: &Executor,
        clock: &mut Clock<'_>,
        s: &mut StepSlots,
        w: usize,
        input: Buf,
        m: usize,
        out: Buf,
    ) -> Result<(), BackendError> {
        let t0 = clock.start();
        let up = self.acts.pool();
        let (xh, oh) = s.pair(input, out);
        let x = up.f32s(xh)?;
        let k = exec.weight_k(w)?;
        let r = exec.matmul(w, &x[..m * k], m, up, oh);
        clock.matmul(t0);
        r
    }

    /// The model's weights `group` (each with its output slot) times the rows of slot `input`
    /// ([`Executor::matmul_group`]: one pool job when the plan gives them all to the CPU).
    fn matmul_group<const N: usize>(
        &self,
        exec: &Executor,
        clock: &mut Clock<'_>,
        input: &Handle,
        mut group: [(usize, &mut Handle); N],
        m: usize,
    ) -> Result<(), BackendError> {
        let t0 = clock.start();
        let up = self.acts.pool();
        let x = up.f32s(input)?;
        let k = exec.weight_k(group[0].0)?;
        let x = x.get(..m * k).ok_or(BackendError::Shape("x"))?;
        let r = exec.matmul_group(&mut group, x, m, up);
        clock.matmul(t0);
        r
    }

    /// Causal grouped-query attention of each of the `m` rows over its own sequence's cache
    /// of layer `l`, positions `0..=pos` (the row's own key/value were written before).
    #[allow(clippy::too_many_arguments)]
    fn attention<R: Rows>(
        &mut self,
        c: &Config,
        pool: &Pool,
        s: &mut StepSlots,
        caches: &[KvCache],
        rows: &R,
        l: usize,
        m: usize,
    ) -> Result<(), BackendError> {
        let (d, kv, hd, nh) = (c.d_model, c.kv_dim(), c.head_dim, c.n_head);
        let group = c.n_head / c.n_kv_head.max(1);
        let ctx = self.ctx;
        let scale = 1.0 / (hd as f32).sqrt();
        let up = self.acts.pool();
        let (qh, ah) = s.pair(Buf::Q, Buf::Att);
        let q = up.f32s(qh)?;
        // Task t·nh + h writes chunk (t, h) of `att` (d = nh·hd, checked at model load) and
        // scores into its thread's row of `scores` (the pool runs one task per thread at once).
        let task = |task: usize, _thread: usize, o: &mut [f32], scores: &mut [f32]| {
            let (t, h) = (task / nh, task % nh);
            let p = rows.pos(t);
            let cache = &caches[rows.seq(t)];
            let kc = &cache.k[l * ctx * kv..(l + 1) * ctx * kv];
            let vc = &cache.v[l * ctx * kv..(l + 1) * ctx * kv];
            let kvh = h / group;
            let qh = &q[t * d + h * hd..t * d + (h + 1) * hd];
            let s = &mut scores[..p + 1];
            head_attention(qh, kc, vc, kv, kvh * hd, scale, s, o);
        };
        let att = &mut up.f32s_mut(ah)?[..m * d];
        pool.run_chunks_mut_with_scratch(att, hd, &mut self.scores, ctx, &task)?;
        Ok(())
    }
}

/// One query head over positions `0..s.len()` of one cache layer (`kc`/`vc`: rows of `kv`,
/// this head's `o.len()` values at `off`): scores `q·k_j · scale` into `s`, softmax, then
/// `o = Σ_j p_j v_j`. On x86-64 with AVX2 it runs [`head_attention_avx2`], the same code
/// compiled for 256-bit vectors: the compiler keeps every IEEE operation and its order when it
/// vectorizes (the dot product's eight partial sums are lanes, no fused multiply-add is
/// formed), so the result is bit-identical to the baseline build's on any CPU, and every row's
/// result still depends only on its own query and cache (the batch engine's row invariance).
#[allow(clippy::too_many_arguments)]
fn head_attention(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    kv: usize,
    off: usize,
    scale: f32,
    s: &mut [f32],
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above; std caches the answer).
        unsafe { head_attention_avx2(q, kc, vc, kv, off, scale, s, o) };
        return;
    }
    head_attention_body(q, kc, vc, kv, off, scale, s, o);
}

/// [`head_attention_body`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn head_attention_avx2(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    kv: usize,
    off: usize,
    scale: f32,
    s: &mut [f32],
    o: &mut [f32],
) {
    head_attention_body(q, kc, vc, kv, off, scale, s, o);
}

/// See [`head_attention`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn head_attention_body(
    q: &[f32],
    kc: &[f32],
    vc: &[f32],
    kv: usize,
    off: usize,
    scale: f32,
    s: &mut [f32],
    o: &mut [f32],
) {
    let hd = o.len();
    let mut max = f32::NEG_INFINITY;
    for (j, sj) in s.iter_mut().enumerate() {
        let kj = &kc[j * kv + off..j * kv + off + hd];
        *sj = dot(q, kj) * scale;
        max = max.max(*sj);
    }
    let mut sum = 0f32;
    for sj in s.iter_mut() {
        *sj = (*sj - max).exp();
        sum += *sj;
    }
    let inv = 1.0 / sum;
    if let Ok(o64) = <&mut [f32; 64]>::try_from(&mut *o) {
        // Llama's usual head size: the sums stay in registers across positions.
        weighted_sum::<64>(s, vc, kv, off, inv, o64);
        return;
    }
    o.fill(0.0);
    for (j, &sj) in s.iter().enumerate() {
        let vj = &vc[j * kv + off..j * kv + off + hd];
        let w = sj * inv;
        for (oi, vi) in o.iter_mut().zip(vj) {
            *oi += w * vi;
        }
    }
}

/// `o = Σ_j (s_j · inv) v_j` for a head of `HD` values, accumulated in a local array (kept in
/// registers) with the same operations in the same order as the general loop in
/// [`head_attention_body`], so the same bits.
#[inline(always)]
fn weighted_sum<const HD: usize>(
    s: &[f32],
    vc: &[f32],
    kv: usize,
    off: usize,
    inv: f32,
    o: &mut [f32; HD],
) {
    let mut acc = [0f32; HD];
    for (j, &sj) in s.iter().enumerate() {
        let vj = &vc[j * kv + off..j * kv + off + HD];
        let w = sj * inv;
        for (a, vi) in acc.iter_mut().zip(vj) {
            *a += w * vi;
        }
    }
    *o = acc;
}

/// From this many rows on, the row-wise host ops (norms, SwiGLU) spread over the pool: below
/// it (decode) a pool job would cost more than the op.
const PAR_ROWS: usize = 4;

/// Rows per task so every thread gets about two tasks (work stealing evens out the rest).
fn rows_per_task(m: usize, threads: usize) -> usize {
    m.div_ceil(2 * threads.max(1)).max(1)
}

#[inline(always)]
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The AVX2 build of one head's attention gives the baseline build's bits (the claim in
    /// [`head_attention`]'s docs), and the head-size-64 register path the general loop's, over
    /// head sizes with and without an 8-wide tail and context lengths from 1; outputs poisoned
    /// before each run.
    #[test]
    fn head_attention_builds_agree_bit_for_bit() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::is_x86_feature_detected!("avx2") {
                eprintln!("SKIP head_attention avx2: this CPU lacks AVX2");
                return;
            }
            let mut rng = rand::rngs::StdRng::seed_from_u64(5);
            for (hd, heads, n) in [(64, 3, 1), (64, 3, 77), (13, 2, 9), (8, 1, 300)] {
                let kv = hd * heads;
                let kc: Vec<f32> = (0..n * kv).map(|_| rng.gen_range(-3.0..3.0)).collect();
                let vc: Vec<f32> = (0..n * kv).map(|_| rng.gen_range(-3.0..3.0)).collect();
                let q: Vec<f32> = (0..hd).map(|_| rng.gen_range(-3.0..3.0)).collect();
                let scale = 1.0 / (hd as f32).sqrt();
                for h in 0..heads {
                    let (mut s1, mut s2) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                    let (mut o1, mut o2) = (vec![f32::NAN; hd], vec![f32::NAN; hd]);
                    head_attention_body(&q, &kc, &vc, kv, h * hd, scale, &mut s1, &mut o1);
                    // SAFETY: AVX2 checked above.
                    unsafe {
                        head_attention_avx2(&q, &kc, &vc, kv, h * hd, scale, &mut s2, &mut o2)
                    };
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    // The general loop, written out: the head-size-64 path must match it.
                    let mut o0 = vec![0f32; hd];
                    let inv = 1.0 / s1.iter().sum::<f32>();
                    for (j, &sj) in s1.iter().enumerate() {
                        let vj = &vc[j * kv + h * hd..j * kv + (h + 1) * hd];
                        for (oi, vi) in o0.iter_mut().zip(vj) {
                            *oi += sj * inv * vi;
                        }
                    }
                    assert_eq!(bits(&o0), bits(&o1), "hd {hd} n {n} head {h}: general loop");
                    assert_eq!(bits(&o1), bits(&o2), "hd {hd} n {n} head {h}");
                    assert_eq!(bits(&s1), bits(&s2), "hd {hd} n {n} head {h}");
                    assert!(o1.iter().all(|x| x.is_finite()));
                }
            }
        }
    }
}
