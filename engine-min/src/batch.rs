//! A multi-sequence batched forward pass: several sequences' new tokens in one pass (one
//! matmul per weight over all rows), each sequence with its own KV cache, each row attending
//! only to its own sequence. Built on [`crate::model`],
//! [`crate::backend`] and [`hetero_sme::ThreadPool`]; the layer math (RMSNorm, adjacent-pair RoPE,
//! grouped-query attention, SwiGLU) is the same code as [`crate::engine::Engine`]'s (the
//! crate's private `layer` module), told which sequence and position each row has.
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
use crate::layer::{rmsnorm, Clock, KvCache, Rows, Work};
use crate::model::Model;
use hetero_sme::ThreadPool as Pool;

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

/// Row `t` of a batch is at position `pos[t]` of sequence `seq[t]`.
struct BatchRows<'a> {
    seq: &'a [usize],
    pos: &'a [usize],
}

impl Rows for BatchRows<'_> {
    fn pos(&self, t: usize) -> usize {
        self.pos[t]
    }

    fn seq(&self, t: usize) -> usize {
        self.seq[t]
    }
}

/// The batched engine.
pub struct BatchEngine {
    model: Arc<Model>,
    backend: Box<dyn Backend>,
    pool: Arc<Pool>,
    ctx: usize,
    max_batch: usize,
    /// Each sequence's keys and values.
    caches: Vec<KvCache>,
    /// Each sequence's filled positions.
    lens: Vec<usize>,
    row_seq: Vec<usize>,
    row_pos: Vec<usize>,
    work: Work,
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
        backend.reserve(mb, c.d_model.max(c.d_ff));
        let caches = (0..opts.sequences).map(|_| KvCache::new(c, ctx)).collect();
        Ok(Self {
            caches,
            lens: vec![0; opts.sequences],
            row_seq: vec![0; mb],
            row_pos: vec![0; mb],
            work: Work::new(c, ctx, mb, pool.threads()),
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
        self.lens.get(seq).copied().unwrap_or(0)
    }

    /// Whether sequence `seq` holds no positions.
    pub fn is_empty(&self, seq: usize) -> bool {
        self.len(seq) == 0
    }

    /// Keeps the first `len` positions of sequence `seq` (the rest is overwritten later).
    pub fn truncate(&mut self, seq: usize, len: usize) -> Result<(), BatchError> {
        let held = self.lens.get_mut(seq).ok_or(BatchError::NoSuchSeq(seq))?;
        if len > *held {
            return Err(BatchError::Truncate {
                seq,
                len,
                held: *held,
            });
        }
        *held = len;
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
            let len = *self.lens.get(b.seq).ok_or(BatchError::NoSuchSeq(b.seq))?;
            if std::mem::replace(&mut self.seen[b.seq], true) {
                return Err(BatchError::DuplicateSeq(b.seq));
            }
            if len + b.tokens.len() > self.ctx {
                return Err(BatchError::ContextFull {
                    seq: b.seq,
                    need: len + b.tokens.len(),
                    context: self.ctx,
                });
            }
            if let Some(&t) = b.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(BatchError::BadToken(t));
            }
            for i in 0..b.tokens.len() {
                self.row_seq[r] = b.seq;
                self.row_pos[r] = len + i;
                r += 1;
            }
        }
        if m == 0 {
            return Ok(());
        }
        self.layers(batch, m)?;
        for b in batch {
            self.lens[b.seq] += b.tokens.len();
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
                rmsnorm(
                    &self.work.x[t * d..(t + 1) * d],
                    &self.model.output_norm,
                    c.eps,
                    &mut self.work.h[out_rows * d..(out_rows + 1) * d],
                );
                out_rows += 1;
            }
            r0 += n;
        }
        let view = self.model.view(&self.model.output);
        self.backend
            .matmul(&view, &self.work.h[..out_rows * d], out_rows, logits)
            .map_err(|e| BatchError::Backend(self.backend.name().to_owned(), e))
    }

    fn layers(&mut self, batch: &[SeqTokens<'_>], m: usize) -> Result<(), BatchError> {
        let model = Arc::clone(&self.model);
        let mut t = 0;
        for b in batch {
            for &tok in b.tokens {
                self.work.embed(&model, t, tok);
                t += 1;
            }
        }
        let rows = BatchRows {
            seq: &self.row_seq,
            pos: &self.row_pos,
        };
        self.work
            .layers(
                &model,
                &*self.backend,
                &self.pool,
                &mut self.caches,
                &rows,
                m,
                &mut Clock::default(),
            )
            .map_err(|e| BatchError::Backend(self.backend.name().to_owned(), e))
    }
}
