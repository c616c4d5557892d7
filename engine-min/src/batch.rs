//! A multi-sequence batched forward pass: several sequences' new tokens in one pass (one
//! matmul per weight over all rows), each sequence with its own KV cache, each row attending
//! only to its own sequence. Built on [`crate::model`] and
//! [`crate::exec`] (matmuls by the plan table); the layer math (RMSNorm, adjacent-pair RoPE,
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
//! All buffers are allocated in [`BatchEngine::new`], after their size was checked against the
//! memory budget; `forward` does not allocate, and its logits are finite or it fails with the
//! layer and op where non-finite values first appeared ([`crate::guard`]).

use std::fmt;
use std::sync::Arc;

use crate::act::{Buf, StepSlots};
use crate::backend::BackendError;
use crate::exec::Executor;
use crate::guard::{first_non_finite, NonFinite, Probe, Site};
use crate::kv::{KvError, KvType};
use crate::layer::{output_weight, rmsnorm, Clock, KvCache, Rows, Work};
use crate::limits::{BudgetError, EngineSize, MemoryBudget, Processors};
use crate::model::Model;

/// Why a batched forward failed.
#[derive(Debug, Clone, PartialEq)]
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
    /// The executor (a backend, the plan, a slot) failed.
    Backend(BackendError),
    /// The KV caches and work buffers would not fit in the memory budget (checked before
    /// anything is allocated).
    Memory(BudgetError),
    /// The pass produced NaN or infinite values (where they first appeared; every sequence
    /// is left as it was before the call).
    NonFinite(NonFinite),
    /// The caches cannot be kept in the type asked for.
    Kv(KvError),
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
            Self::Backend(e) => write!(f, "{e}"),
            Self::Memory(e) => write!(f, "{e} (use fewer sequences or a smaller context)"),
            Self::NonFinite(e) => write!(f, "sequence {}: {e}", e.seq),
            Self::Kv(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(e),
            Self::Memory(e) => Some(e),
            Self::NonFinite(e) => Some(e),
            Self::Kv(e) => Some(e),
            _ => None,
        }
    }
}

impl From<BackendError> for BatchError {
    fn from(e: BackendError) -> Self {
        Self::Backend(e)
    }
}

impl From<hetero_uma::UmaError> for BatchError {
    fn from(e: hetero_uma::UmaError) -> Self {
        Self::Backend(BackendError::Uma(e))
    }
}

/// Settings.
#[derive(Clone, Copy, Debug)]
pub struct BatchOptions {
    /// KV positions per sequence (clamped to the model's context).
    pub context: usize,
    /// Number of sequences (each gets its own cache).
    pub sequences: usize,
    /// The caches' element type.
    pub kv: KvType,
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
    exec: Executor,
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
    /// An engine for `opts.sequences` sequences whose matmuls run on `exec` (built for this
    /// model's [`crate::engine::matmul_weights`]); one `forward` takes at most the executor's
    /// largest row count of tokens.
    /// Its buffers must fit in the machine's available memory; see
    /// [`BatchEngine::with_budget`].
    pub fn new(model: Arc<Model>, exec: Executor, opts: BatchOptions) -> Result<Self, BatchError> {
        Self::with_budget(model, exec, opts, &MemoryBudget::available())
    }

    /// [`BatchEngine::new`] within `budget`: the KV caches of every sequence, the work buffers,
    /// the activation slots and the executor's scratch ([`EngineSize`]) are counted before
    /// any of them is allocated; too many is [`BatchError::Memory`].
    pub fn with_budget(
        model: Arc<Model>,
        exec: Executor,
        opts: BatchOptions,
        budget: &MemoryBudget,
    ) -> Result<Self, BatchError> {
        let c = &model.config;
        let ctx = opts.context.clamp(1, c.context.max(1));
        let mb = exec.max_m();
        let threads = exec.cpu().pool().threads();
        EngineSize {
            ctx,
            max_batch: mb,
            threads,
            sequences: opts.sequences,
            processors: Processors::of(&exec),
            kv: opts.kv,
        }
        .check(budget, c)
        .map_err(BatchError::Memory)?;
        let caches = (0..opts.sequences)
            .map(|_| KvCache::new(c, ctx, opts.kv))
            .collect::<Result<Vec<_>, _>>()
            .map_err(BatchError::Kv)?;
        Ok(Self {
            caches,
            lens: vec![0; opts.sequences],
            row_seq: vec![0; mb],
            row_pos: vec![0; mb],
            work: Work::new(c, ctx, mb, threads)?,
            seen: vec![false; opts.sequences],
            model,
            exec,
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
    ///
    /// The pass is watched as [`crate::engine::Engine::forward`]'s steps are; when a watched
    /// value is NaN or infinite the pass is run again with a check after every op and the
    /// result is [`BatchError::NonFinite`] naming the layer and op where non-finite values
    /// first appeared. On any error no sequence changes length.
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
        let mut watch = Probe::watch();
        self.pass(batch, which, m, logits, &mut watch)?;
        let bad_logits = match watch.found {
            Some(_) => None,
            None => first_non_finite(logits).map(|(i, value)| {
                let (seq, pos) = self.out_row(batch, which, i / vocab);
                NonFinite {
                    site: None,
                    searched: true,
                    seq,
                    pos,
                    index: i % vocab,
                    value,
                }
            }),
        };
        if let Some(seen) = watch.found.or(bad_logits) {
            // Only now: the same rows again (same positions), checked after every op.
            let mut probe = Probe::full();
            self.pass(batch, which, m, logits, &mut probe)?;
            // Not reproduced (a non-deterministic fault): what the watch saw.
            return Err(BatchError::NonFinite(probe.found.unwrap_or(seen)));
        }
        for b in batch {
            self.lens[b.seq] += b.tokens.len();
        }
        Ok(())
    }

    /// One pass in the step's activation slots (given back whatever happened).
    fn pass(
        &mut self,
        batch: &[SeqTokens<'_>],
        which: Logits,
        m: usize,
        logits: &mut [f32],
        probe: &mut Probe,
    ) -> Result<(), BatchError> {
        let mut slots = self.work.acts().acquire()?;
        let r = self.forward_in(&mut slots, batch, which, m, logits, probe);
        let released = self.work.acts().release(slots);
        r?;
        Ok(released?)
    }

    /// The sequence and position of output row `r` of a pass over `batch` (rows as set up by
    /// `forward`).
    fn out_row(&self, batch: &[SeqTokens<'_>], which: Logits, r: usize) -> (usize, usize) {
        let t = match which {
            Logits::All => r,
            Logits::Last => batch
                .iter()
                .scan(0, |end, b| {
                    *end += b.tokens.len();
                    Some((*end, b.tokens.is_empty()))
                })
                .filter(|&(_, empty)| !empty)
                .nth(r)
                .map_or(0, |(end, _)| end - 1),
        };
        (self.row_seq[t], self.row_pos[t])
    }

    fn forward_in(
        &mut self,
        s: &mut StepSlots,
        batch: &[SeqTokens<'_>],
        which: Logits,
        m: usize,
        logits: &mut [f32],
        probe: &mut Probe,
    ) -> Result<(), BatchError> {
        self.layers(s, batch, m, probe)?;
        if probe.found.is_some() {
            return Ok(());
        }
        // Final norm and output head on the wanted rows, gathered into `h`.
        let model = Arc::clone(&self.model);
        let c = &model.config;
        let d = c.d_model;
        let mut out_rows = 0;
        let mut r0 = 0;
        {
            let up = self.work.acts().pool();
            let (xh, hh) = s.pair(Buf::X, Buf::H);
            let (x, h) = (up.f32s(xh)?, up.f32s_mut(hh)?);
            for b in batch {
                let n = b.tokens.len();
                let (from, cnt) = match which {
                    Logits::All => (r0, n),
                    Logits::Last if n > 0 => (r0 + n - 1, 1),
                    Logits::Last => (r0, 0),
                };
                for t in from..from + cnt {
                    rmsnorm(
                        &x[t * d..(t + 1) * d],
                        &model.output_norm,
                        c.eps,
                        &mut h[out_rows * d..(out_rows + 1) * d],
                    );
                    out_rows += 1;
                }
                r0 += n;
            }
        }
        let at = OutRows {
            engine: self,
            batch,
            which,
        };
        if self.work.probed(
            self.exec.cpu().pool(),
            probe,
            s,
            Buf::H,
            out_rows,
            d,
            Site::OutputNorm,
            &at,
        )? {
            return Ok(());
        }
        let w = output_weight(c.n_layer);
        self.work.matmul(
            &self.exec,
            &mut Clock::default(),
            s,
            w,
            Buf::H,
            out_rows,
            Buf::Tmp,
        )?;
        let at = OutRows {
            engine: self,
            batch,
            which,
        };
        if self.work.probed(
            self.exec.cpu().pool(),
            probe,
            s,
            Buf::Tmp,
            out_rows,
            c.vocab,
            Site::Output,
            &at,
        )? {
            return Ok(());
        }
        let up = self.work.acts().pool();
        logits.copy_from_slice(&up.f32s(s.get(Buf::Tmp))?[..out_rows * c.vocab]);
        Ok(())
    }

    fn layers(
        &mut self,
        s: &mut StepSlots,
        batch: &[SeqTokens<'_>],
        m: usize,
        probe: &mut Probe,
    ) -> Result<(), BatchError> {
        let model = Arc::clone(&self.model);
        let mut t = 0;
        for b in batch {
            for &tok in b.tokens {
                self.work.embed(&model, s, t, tok)?;
                t += 1;
            }
        }
        let rows = BatchRows {
            seq: &self.row_seq,
            pos: &self.row_pos,
        };
        let d = model.config.d_model;
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
        self.work.layers(
            &model,
            &self.exec,
            s,
            &mut self.caches,
            &rows,
            m,
            &mut Clock::default(),
            probe,
        )?;
        Ok(())
    }
}

/// The output rows of a pass (the rows whose logits are computed), for the probe.
struct OutRows<'a, 'b> {
    engine: &'a BatchEngine,
    batch: &'a [SeqTokens<'b>],
    which: Logits,
}

impl Rows for OutRows<'_, '_> {
    fn pos(&self, t: usize) -> usize {
        self.engine.out_row(self.batch, self.which, t).1
    }

    fn seq(&self, t: usize) -> usize {
        self.engine.out_row(self.batch, self.which, t).0
    }
}
