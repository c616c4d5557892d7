//! The inference engine for one sequence: KV cache, RoPE, grouped-query attention, SwiGLU and
//! RMSNorm on the CPU pool; every matmul through the [`Executor`] (which runs the plan table).
//! All buffers are allocated in [`Engine::new`], after their size was checked against the
//! memory budget; `forward` does not allocate, and its logits are finite or it fails with the
//! layer and op where non-finite values first appeared ([`crate::guard`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::act::{Buf, StepSlots};
use crate::backend::resident::Greedy;
use crate::backend::BackendError;
use crate::exec::Executor;
use crate::guard::{first_non_finite, NonFinite, Probe, Site};
use crate::kv::{KvError, KvType};
use crate::layer::{output_weight, Clock, KvCache, Rows, Work};
use crate::limits::{BudgetError, EngineSize, MemoryBudget, Processors};
use crate::model::Model;

pub use crate::layer::{matmul_weights, rmsnorm, HostOp, HostTimes};

/// Why a forward pass failed.
#[derive(Debug, Clone, PartialEq)]
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
    /// The executor (a backend, the plan, a slot) failed.
    Backend(BackendError),
    /// The activation slots could not be made or taken.
    Uma(hetero_uma::UmaError),
    /// The KV cache and work buffers would not fit in the memory budget (checked before
    /// anything is allocated).
    Memory(BudgetError),
    /// The step produced NaN or infinite values (where they first appeared; the sequence is
    /// left as it was before the call).
    NonFinite(NonFinite),
    /// The KV cache cannot be kept in the type asked for (the model's width, or the processor
    /// that keeps it).
    Kv(KvError),
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
            Self::Backend(e) => write!(f, "{e}"),
            Self::Uma(e) => write!(f, "activation slots: {e}"),
            Self::Memory(e) => write!(f, "{e} (use a smaller --ctx or batch)"),
            Self::NonFinite(e) => write!(f, "{e}"),
            Self::Kv(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(e),
            Self::Uma(e) => Some(e),
            Self::Memory(e) => Some(e),
            Self::NonFinite(e) => Some(e),
            Self::Kv(e) => Some(e),
            _ => None,
        }
    }
}

impl From<BackendError> for EngineError {
    fn from(e: BackendError) -> Self {
        Self::Backend(e)
    }
}

impl From<hetero_uma::UmaError> for EngineError {
    fn from(e: hetero_uma::UmaError) -> Self {
        Self::Uma(e)
    }
}

/// Time spent, by where it was spent.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Matmuls (all processors; [`Executor::times`] splits them by kind and by shape).
    pub matmul: Duration,
    /// Host ops on the CPU pool (norms, RoPE, attention, SwiGLU, embedding), per op.
    pub host: HostTimes,
    /// Whole steps on the resident GPU decoder (enqueue and readback).
    pub resident: Duration,
}

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// KV-cache positions (clamped to the model's context length).
    pub context: usize,
    /// The KV cache's element type (default f16). On the resident GPU decoder the cache is the
    /// device's (of the type the executor was composed with); the host keeps none.
    pub kv: KvType,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            context: 2048,
            kv: KvType::default(),
        }
    }
}

/// The inference engine for one sequence.
pub struct Engine {
    model: Arc<Model>,
    exec: Executor,
    ctx: usize,
    /// Filled positions of the KV cache.
    pos: usize,
    cache: KvCache,
    work: Work,
    timings: Timings,
}

/// The rows of one chunk of one sequence: row `t` at position `pos0 + t` of cache 0.
struct Contiguous {
    pos0: usize,
}

impl Rows for Contiguous {
    fn pos(&self, t: usize) -> usize {
        self.pos0 + t
    }

    fn seq(&self, _t: usize) -> usize {
        0
    }
}

impl Engine {
    /// An engine for `model` whose matmuls run on `exec` (built for this model's
    /// [`matmul_weights`]); prompts are processed in chunks of the executor's largest row
    /// count. Its buffers must fit in the machine's available memory
    /// ([`MemoryBudget::available`]); see [`Engine::with_budget`].
    pub fn new(
        model: Arc<Model>,
        exec: Executor,
        opts: EngineOptions,
    ) -> Result<Self, EngineError> {
        Self::with_budget(model, exec, opts, &MemoryBudget::available())
    }

    /// [`Engine::new`] within `budget`: the KV cache, the work buffers, the activation slots
    /// and the executor's scratch ([`EngineSize`]) are counted, with checked arithmetic,
    /// before any of them is allocated; too many is [`EngineError::Memory`] ("needs N GiB,
    /// limit M GiB").
    pub fn with_budget(
        model: Arc<Model>,
        exec: Executor,
        opts: EngineOptions,
        budget: &MemoryBudget,
    ) -> Result<Self, EngineError> {
        let c = &model.config;
        let ctx = opts.context.clamp(1, c.context.max(1));
        let threads = exec.cpu().pool().threads();
        // On the resident GPU the cache and activations live on the device: the host keeps
        // nothing of their size (the decoder checks its own memory plan against the device).
        let (host_ctx, host_rows) = if exec.is_resident() {
            (1, 1)
        } else {
            (ctx, exec.max_m())
        };
        EngineSize {
            ctx: host_ctx,
            max_batch: host_rows,
            threads,
            sequences: 1,
            processors: Processors::of(&exec),
            kv: opts.kv,
        }
        .check(budget, c)
        .map_err(EngineError::Memory)?;
        Ok(Self {
            cache: KvCache::new(c, host_ctx, opts.kv).map_err(EngineError::Kv)?,
            work: Work::new(c, host_ctx, host_rows, threads)?,
            timings: Timings::default(),
            model,
            exec,
            ctx,
            pos: 0,
        })
    }

    /// The model.
    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    /// The executor (its plan table, processors and matmul times).
    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    /// The resident GPU decoder, when the executor runs whole steps on it (profiling, notes).
    pub fn resident_decoder(&mut self) -> Option<&mut hetero_opencl_kernels::decoder::Decoder> {
        self.exec.resident_decoder()
    }

    /// The executor back (its processors keep what they prepared), ending the engine.
    pub fn into_executor(self) -> Executor {
        self.exec
    }

    /// Positions already in the KV cache.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// KV-cache capacity.
    pub fn context(&self) -> usize {
        self.ctx
    }

    /// The KV cache's element type (on the resident GPU decoder: the type of its device cache,
    /// which the decoder was built with: `compose` builds both from one `--kv-type`).
    pub fn kv_type(&self) -> KvType {
        self.cache.ty()
    }

    /// Bytes of the host KV cache (none of its size on the resident GPU decoder).
    pub fn kv_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Forgets the sequence (the cache is overwritten as new tokens come).
    pub fn reset(&mut self) {
        self.pos = 0;
    }

    /// Time spent so far.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// Clears the timings (and the executor's).
    pub fn reset_timings(&mut self) {
        self.timings = Timings::default();
        self.exec.reset_times();
    }

    /// Appends `tokens` to the sequence and writes logits: for the last token when
    /// `logits.len() == vocab`, for every token when `logits.len() == tokens.len() * vocab`.
    ///
    /// Each step is watched ([`crate::guard`]: its logits, and in every layer the attention
    /// output, the SwiGLU output and the residual stream); when a watched value is NaN or
    /// infinite, the call's tokens are run again from the same position with a check after
    /// every op, and the result is [`EngineError::NonFinite`] naming the layer and op where
    /// non-finite values first appeared. On any error the sequence is left as it was (same
    /// [`Engine::pos`]).
    pub fn forward(&mut self, tokens: &[u32], logits: &mut [f32]) -> Result<(), EngineError> {
        let vocab = self.model.config.vocab;
        let all = logits.len() == tokens.len() * vocab && tokens.len() != 1;
        if logits.len() != vocab && !all {
            return Err(EngineError::LogitsLen {
                expected: vocab,
                got: logits.len(),
            });
        }
        self.check(tokens)?;
        if tokens.is_empty() {
            return Ok(());
        }
        let pos0 = self.pos;
        let mut watch = Probe::watch();
        let r = self.chunks(tokens, logits, all, &mut watch);
        if r.is_err() {
            self.pos = pos0;
            return r;
        }
        let bad_logits = match watch.found {
            Some(_) => None,
            None => first_non_finite(logits).map(|(i, value)| NonFinite {
                site: None,
                searched: false,
                seq: 0,
                pos: pos0 + if all { i / vocab } else { tokens.len() - 1 },
                index: i % vocab,
                value,
            }),
        };
        let Some(seen) = watch.found.or(bad_logits) else {
            return Ok(());
        };
        if self.exec.is_resident() {
            // The device keeps the activations: nothing on the host to search.
            self.pos = pos0;
            return Err(EngineError::NonFinite(seen));
        }
        // Only now: the same tokens again from the same position, checked after every op.
        self.pos = pos0;
        let mut probe = Probe::full();
        let again = self.chunks(tokens, logits, all, &mut probe);
        self.pos = pos0;
        again?;
        // Not reproduced (a non-deterministic fault): what the watch saw.
        Err(EngineError::NonFinite(probe.found.unwrap_or(NonFinite {
            searched: true,
            ..seen
        })))
    }

    /// Runs `tokens` in chunks of the executor's largest row count (logits of every token when
    /// `all`, else of the last), checked as `probe` says; stops after the chunk in which it
    /// found a non-finite value.
    fn chunks(
        &mut self,
        tokens: &[u32],
        logits: &mut [f32],
        all: bool,
        probe: &mut Probe,
    ) -> Result<(), EngineError> {
        let vocab = self.model.config.vocab;
        let max_batch = self.exec.max_m();
        let mut done = 0;
        while done < tokens.len() {
            let m = (tokens.len() - done).min(max_batch);
            let chunk = &tokens[done..done + m];
            let last = done + m == tokens.len();
            let out = if all {
                Some(&mut logits[done * vocab..(done + m) * vocab])
            } else if last {
                Some(&mut logits[..])
            } else {
                None
            };
            self.step(chunk, out, probe)?;
            if probe.found.is_some() {
                break;
            }
            done += m;
        }
        Ok(())
    }

    /// Appends `tokens` and returns the greedy next token (the last row's argmax). On the
    /// resident GPU only the argmax is read back, with the device's flag for NaN or infinite
    /// logits: a flagged step is [`EngineError::NonFinite`] (the first such logit, no site: the
    /// device keeps the activations) and leaves the sequence as it was, as
    /// [`Engine::forward`]'s guard does; otherwise the logits go through `scratch` (`vocab`
    /// floats) and that guard.
    pub fn forward_argmax(
        &mut self,
        tokens: &[u32],
        scratch: &mut [f32],
    ) -> Result<u32, EngineError> {
        let n = tokens.len();
        let resident = self.exec.is_resident();
        if !resident || n == 0 || n > self.exec.max_m() {
            self.forward(tokens, scratch)?;
            return Ok(crate::sample::argmax(scratch));
        }
        self.check(tokens)?;
        let pos = self.pos;
        let t0 = Instant::now();
        let dec = self.exec.resident_decoder().ok_or(BackendError::Resident)?;
        let r = crate::backend::resident::step_argmax(dec, tokens, pos);
        self.timings.resident += t0.elapsed();
        match r.map_err(BackendError::from)? {
            Greedy::Token(id) => {
                self.pos += n;
                Ok(id)
            }
            Greedy::NonFinite { index, value } => Err(EngineError::NonFinite(NonFinite {
                site: None,
                searched: false,
                seq: 0,
                pos: pos + n - 1,
                index,
                value,
            })),
        }
    }

    /// The checks every forward makes before it changes anything.
    fn check(&self, tokens: &[u32]) -> Result<(), EngineError> {
        if self.pos + tokens.len() > self.ctx {
            return Err(EngineError::ContextFull {
                need: self.pos + tokens.len(),
                context: self.ctx,
            });
        }
        let vocab = self.model.config.vocab;
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::BadToken(t));
        }
        Ok(())
    }

    /// One chunk: takes the step's activation slots, runs it, and gives them back whatever
    /// happened (on the resident GPU: one step of the decoder, which `probe` cannot look
    /// into).
    fn step(
        &mut self,
        tokens: &[u32],
        logits: Option<&mut [f32]>,
        probe: &mut Probe,
    ) -> Result<(), EngineError> {
        if let Some(dec) = self.exec.resident_decoder() {
            let t0 = Instant::now();
            let r = match logits {
                Some(l) => crate::backend::resident::step(dec, tokens, self.pos, l),
                None => crate::backend::resident::fill(dec, tokens, self.pos),
            };
            self.timings.resident += t0.elapsed();
            r.map_err(BackendError::from)?;
            self.pos += tokens.len();
            return Ok(());
        }
        let mut s = self.work.acts().acquire()?;
        let r = self.step_in(&mut s, tokens, logits, probe);
        let released = self.work.acts().release(s);
        r?;
        Ok(released?)
    }

    fn step_in(
        &mut self,
        s: &mut StepSlots,
        tokens: &[u32],
        logits: Option<&mut [f32]>,
        probe: &mut Probe,
    ) -> Result<(), EngineError> {
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let (d, m) = (c.d_model, tokens.len());
        let rows = Contiguous { pos0: self.pos };
        let t0 = Instant::now();
        self.work
            .embed_rows(self.exec.cpu().pool(), &model, s, tokens)?;
        self.timings.host.add(HostOp::Embed, t0.elapsed());
        if self.work.probed(
            self.exec.cpu().pool(),
            probe,
            s,
            Buf::X,
            m,
            d,
            Site::Embedding,
            &rows,
        )? {
            return Ok(());
        }
        let Timings { matmul, host, .. } = &mut self.timings;
        let mut clock = Clock {
            host: Some(host),
            matmul: Some(matmul),
        };
        self.work.layers(
            &model,
            &self.exec,
            s,
            std::slice::from_mut(&mut self.cache),
            &rows,
            m,
            &mut clock,
            probe,
        )?;
        if probe.found.is_some() {
            return Ok(());
        }
        self.pos += m;
        let Some(logits) = logits else { return Ok(()) };
        let vocab = c.vocab;
        let t0 = Instant::now();
        // Normalize only the rows whose logits are wanted, into the first rows of H.
        let first = if logits.len() == vocab { m - 1 } else { 0 };
        let rows_out = m - first;
        {
            let up = self.work.acts().pool();
            let (xh, hh) = s.pair(Buf::X, Buf::H);
            rmsnorm(
                &up.f32s(xh)?[first * d..m * d],
                &model.output_norm,
                c.eps,
                &mut up.f32s_mut(hh)?[..rows_out * d],
            );
        }
        self.timings.host.add(HostOp::Norm, t0.elapsed());
        let out_rows = Contiguous {
            pos0: rows.pos0 + first,
        };
        if self.work.probed(
            self.exec.cpu().pool(),
            probe,
            s,
            Buf::H,
            rows_out,
            d,
            Site::OutputNorm,
            &out_rows,
        )? {
            return Ok(());
        }
        let mut clock = Clock {
            host: None,
            matmul: Some(&mut self.timings.matmul),
        };
        let w = output_weight(c.n_layer);
        self.work
            .matmul(&self.exec, &mut clock, s, w, Buf::H, rows_out, Buf::Tmp)?;
        if self.work.probed(
            self.exec.cpu().pool(),
            probe,
            s,
            Buf::Tmp,
            rows_out,
            vocab,
            Site::Output,
            &out_rows,
        )? {
            return Ok(());
        }
        let up = self.work.acts().pool();
        logits.copy_from_slice(&up.f32s(s.get(Buf::Tmp))?[..rows_out * vocab]);
        Ok(())
    }
}
