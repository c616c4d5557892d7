//! The inference engine: KV cache, RoPE, grouped-query attention, SwiGLU and RMSNorm on the
//! CPU pool; the matmuls through a [`Backend`]. All buffers are allocated in [`Engine::new`];
//! `forward` does not allocate.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::act::UmaActs;
use crate::backend::{Backend, BackendError};
use crate::layer::{Clock, KvCache, Rows, Work};
use crate::model::{Model, WeightRef};
use hetero_sme::ThreadPool as Pool;

pub use crate::layer::rmsnorm;

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
    /// An engine for `model` running matmuls on `backend` and host ops on `pool`; every weight
    /// goes through `backend.prepare` here.
    pub fn new(
        model: Arc<Model>,
        backend: Box<dyn Backend>,
        pool: Arc<Pool>,
        opts: EngineOptions,
    ) -> Result<Self, EngineError> {
        Self::with_acts(model, backend, pool, opts, None)
    }

    /// [`Engine::new`] with the activation buffers in the slots of `acts` (made with
    /// [`UmaActs::for_model`] for the same `max_batch`; a slot too small falls back to the
    /// heap), so a backend given the same `acts` can reach them in place (zero copy).
    pub fn with_acts(
        model: Arc<Model>,
        mut backend: Box<dyn Backend>,
        pool: Arc<Pool>,
        opts: EngineOptions,
        acts: Option<Arc<UmaActs>>,
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
        backend.reserve(mb, c.d_model.max(c.d_ff));
        Ok(Self {
            cache: KvCache::new(c, ctx),
            work: Work::new_in(c, ctx, mb, pool.threads(), acts.as_ref()),
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

    fn step(&mut self, tokens: &[u32], logits: Option<&mut [f32]>) -> Result<(), EngineError> {
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let (d, m) = (c.d_model, tokens.len());
        let t0 = Instant::now();
        for (t, &tok) in tokens.iter().enumerate() {
            self.work.embed(&model, t, tok);
        }
        self.timings.host += t0.elapsed();
        let Timings { matmul, host } = &mut self.timings;
        let mut clock = Clock {
            host: Some(host),
            matmul: Some(&mut matmul[0].1),
        };
        self.work
            .layers(
                &model,
                &*self.backend,
                &self.pool,
                std::slice::from_mut(&mut self.cache),
                &Contiguous { pos0: self.pos },
                m,
                &mut clock,
            )
            .map_err(|e| EngineError::Backend(self.backend.name().to_owned(), e))?;
        self.pos += m;
        let Some(logits) = logits else { return Ok(()) };
        let vocab = c.vocab;
        let t0 = Instant::now();
        // Normalize only the rows whose logits are wanted.
        let first = if logits.len() == vocab { m - 1 } else { 0 };
        let rows = m - first;
        rmsnorm(
            &self.work.x[first * d..m * d],
            &model.output_norm,
            c.eps,
            &mut self.work.h[..rows * d],
        );
        self.timings.host += t0.elapsed();
        let t0 = Instant::now();
        let view = model.view(&model.output);
        let r = self
            .backend
            .matmul(&view, &self.work.h[..rows * d], rows, logits)
            .map_err(|e| EngineError::Backend(self.backend.name().to_owned(), e));
        self.timings.matmul[0].1 += t0.elapsed();
        r
    }
}
