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
use crate::attention::{self, AttKernel, Heads, Tile};
use crate::backend::{BackendError, WeightView};
use crate::exec::Executor;
use crate::guard::{LayerOp, Probe, Site};
use crate::model::{Config, Model};
use crate::swiglu::swiglu;
use hetero_sme::ThreadPool as Pool;
use hetero_uma::Handle;

pub(crate) use crate::kv::KvCache;

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
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    /// The attention's per-thread scratch ([`attention::scratch_len`] floats a thread).
    att_scratch: Vec<f32>,
    att_per_thread: usize,
    /// One step's attention tiles (capacity for the largest step: no allocation).
    tiles: Vec<Tile>,
    kernel: AttKernel,
    acts: Acts,
}

impl Work {
    /// RoPE tables for `ctx` positions, attention scratch for `threads` pool threads and
    /// tiles for `max_batch` rows, and activation slots for `max_batch` rows of model `c`.
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
        let per = attention::scratch_len(c.head_dim);
        Ok(Self {
            rope_cos,
            rope_sin,
            att_scratch: vec![0.0; threads.max(1) * per],
            att_per_thread: per,
            tiles: Vec::with_capacity(attention::max_tiles(&heads(c), max_batch.max(1))),
            kernel: AttKernel::best(),
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

    /// Writes the embeddings of `tokens` into rows `0..tokens.len()` of the residual stream,
    /// rows spread over the pool when there are several.
    pub(crate) fn embed_rows(
        &self,
        pool: &Pool,
        model: &Model,
        s: &mut StepSlots,
        tokens: &[u32],
    ) -> Result<(), BackendError> {
        let d = model.config.d_model;
        let m = tokens.len();
        let emb = model.view(&model.embed);
        let rb = emb.row_bytes()?;
        let x = &mut self.acts.pool().f32s_mut(s.get_mut(Buf::X))?[..m * d];
        let row = |t: usize, out: &mut [f32]| {
            let tok = tokens[t] as usize;
            match emb.data.get(tok * rb..(tok + 1) * rb) {
                Some(src) => {
                    hetero_sme::dequantize_row(emb.ty, src, out).map_err(BackendError::from)
                }
                None => Err(BackendError::Shape("token id")),
            }
        };
        if m < PAR_ROWS {
            for (t, out) in x.chunks_exact_mut(d).enumerate() {
                row(t, out)?;
            }
            return Ok(());
        }
        let failed = std::sync::Mutex::new(None);
        let rows = rows_per_task(m, pool.threads());
        pool.run_chunks_mut(x, rows * d, &|task, _, o: &mut [f32]| {
            for (i, out) in o.chunks_exact_mut(d).enumerate() {
                if let Err(e) = row(task * rows + i, out) {
                    *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                }
            }
        })?;
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
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

    /// `x += tmp` over `m` rows of `d` (rows spread over the pool when there are several).
    fn residual(
        &self,
        pool: &Pool,
        s: &mut StepSlots,
        m: usize,
        d: usize,
    ) -> Result<(), BackendError> {
        let (t, x) = s.pair(Buf::Tmp, Buf::X);
        let up = self.acts.pool();
        let add = &up.f32s(t)?[..m * d];
        let x = &mut up.f32s_mut(x)?[..m * d];
        if m < PAR_ROWS {
            for (x, o) in x.iter_mut().zip(add) {
                *x += o;
            }
            return Ok(());
        }
        let rows = rows_per_task(m, pool.threads());
        pool.run_chunks_mut(x, rows * d, &|task, _, x: &mut [f32]| {
            let a = &add[task * rows * d..task * rows * d + x.len()];
            for (x, o) in x.iter_mut().zip(a) {
                *x += o;
            }
        })?;
        Ok(())
    }

    /// When `probe` checks `site`, checks `m` rows of `width` floats of `buf`, written by
    /// `site`; true when a non-finite value was found (the caller stops the step). Sites the
    /// probe does not check cost one branch.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn probed<R: Rows>(
        &self,
        pool: &Pool,
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
        Ok(p.check(Some(pool), site, &x[..m * width], width, |t| {
            (rows.seq(t), rows.pos(t))
        }))
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
        let (d, kv) = (c.d_model, c.kv_dim());
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
                    if self.probed(pool, probe, s, $buf, m, $width, site, rows)? {
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
            self.rope_kv(pool, c, s, caches, rows, l, m, half)?;
            clock.host(t0, HostOp::RopeKv);
            let t0 = clock.start();
            self.attention(c, pool, s, caches, rows, l, m)?;
            clock.host(t0, HostOp::Attention);
            checked!(Buf::Att, d, Attention);
            self.matmul(exec, clock, s, weight(l, Op::O), Buf::Att, m, Buf::Tmp)?;
            checked!(Buf::Tmp, d, AttnOutput);
            let t0 = clock.start();
            self.residual(pool, s, m, d)?;
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
            self.residual(pool, s, m, d)?;
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

    /// RoPE on each row's queries and keys, then its key and value into its sequence's cache
    /// at its position (converted to the cache's type): rows spread over the pool, one
    /// sequence's run of rows at a time (each writes its own positions).
    #[allow(clippy::too_many_arguments)]
    fn rope_kv<R: Rows>(
        &self,
        pool: &Pool,
        c: &Config,
        s: &mut StepSlots,
        caches: &mut [KvCache],
        rows: &R,
        l: usize,
        m: usize,
        half: usize,
    ) -> Result<(), BackendError> {
        let (d, kv, hd) = (c.d_model, c.kv_dim(), c.head_dim);
        let up = self.acts.pool();
        let [_, _, qh, kh, vh, ..] = s.each_mut();
        let (q, k, v) = (up.f32s_mut(qh)?, up.f32s_mut(kh)?, up.f32s(vh)?);
        let (q, k, v) = (&mut q[..m * d], &mut k[..m * kv], &v[..m * kv]);
        let (qp, kp) = (SendPtr(q.as_mut_ptr()), SendPtr(k.as_mut_ptr()));
        let mut t0 = 0;
        while t0 < m {
            // One sequence's consecutive rows.
            let seq = rows.seq(t0);
            let mut t1 = t0 + 1;
            while t1 < m && rows.seq(t1) == seq {
                t1 += 1;
            }
            let cache = caches.get_mut(seq).ok_or(BackendError::Shape("sequence"))?;
            let w = cache.writer();
            let (qp, kp) = (&qp, &kp);
            let one = |t: usize| {
                let p = rows.pos(t);
                let (cs, sn) = (
                    &self.rope_cos[p * half..(p + 1) * half],
                    &self.rope_sin[p * half..(p + 1) * half],
                );
                // SAFETY: row t < m of q (m·d floats) and of k (m·kv floats); each task has
                // its own rows (the pool runs each task index once), so these borrows are
                // disjoint from every other task's.
                let (qr, kr) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(qp.0.add(t * d), d),
                        std::slice::from_raw_parts_mut(kp.0.add(t * kv), kv),
                    )
                };
                for hq in qr.chunks_exact_mut(hd) {
                    rope(hq, cs, sn);
                }
                for hk in kr.chunks_exact_mut(hd) {
                    rope(hk, cs, sn);
                }
                // SAFETY: rows of one sequence have distinct positions (a step appends
                // consecutive positions to each sequence once), so no two tasks write one
                // (layer, position); nothing reads the cache until the job is over.
                unsafe { w.write(l, p, kr, &v[t * kv..(t + 1) * kv]) };
            };
            let n = t1 - t0;
            if n < PAR_ROWS {
                (t0..t1).for_each(one);
            } else {
                let per = rows_per_task(n, pool.threads());
                pool.run(n.div_ceil(per), &|task, _| {
                    (t0 + task * per..(t0 + (task + 1) * per).min(t1)).for_each(one);
                });
            }
            t0 = t1;
        }
        Ok(())
    }

    /// Causal grouped-query attention of each of the `m` rows over its own sequence's cache
    /// of layer `l`, positions `0..=pos` (the row's own key/value were written before): tiles
    /// of rows × heads on the pool ([`crate::attention`]).
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
        let h = heads(c);
        let d = c.d_model;
        let Work {
            att_scratch,
            att_per_thread,
            tiles,
            kernel,
            acts,
            ..
        } = self;
        let up = acts.pool();
        let (qh, ah) = s.pair(Buf::Q, Buf::Att);
        let q = &up.f32s(qh)?[..m * d];
        let att = &mut up.f32s_mut(ah)?[..m * d];
        tiles.clear();
        let mut t0 = 0;
        while t0 < m {
            let seq = rows.seq(t0);
            let mut t1 = t0 + 1;
            while t1 < m && rows.seq(t1) == seq {
                t1 += 1;
            }
            attention::tiles_of(&h, t0, t1, m, pool.threads(), tiles);
            t0 = t1;
        }
        let out = SendPtr(att.as_mut_ptr());
        let (kernel, tiles) = (*kernel, &*tiles);
        let pos = |r: usize| rows.pos(r);
        pool.run_with_scratch(
            tiles.len(),
            att_scratch,
            *att_per_thread,
            &|task, _, scratch: &mut [f32]| {
                let tile = tiles[task];
                let Some(cache) = caches.get(rows.seq(tile.r0)) else {
                    return;
                };
                let out = &out;
                // SAFETY: `att` holds m·d floats and tile.r1 <= m; the tiles of one step
                // cover disjoint (row, head) pairs (`tiles_of` splits rows and heads without
                // overlap), so this task's region is its own.
                unsafe { attention::run_tile(kernel, &h, tile, q, &pos, cache, l, out.0, scratch) };
            },
        )?;
        Ok(())
    }
}

/// The attention's shapes of model `c`.
fn heads(c: &Config) -> Heads {
    Heads {
        n_head: c.n_head,
        n_kv_head: c.n_kv_head,
        hd: c.head_dim,
    }
}

/// A row pointer shared by pool tasks that each touch their own rows.
struct SendPtr(*mut f32);
// SAFETY: the tasks access disjoint rows through it (see each use).
unsafe impl Sync for SendPtr {}

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
