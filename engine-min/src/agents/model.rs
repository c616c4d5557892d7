//! The verifier on the real model: one [`BatchEngine`] pass per step over all agents' rows,
//! one KV cache per agent, greedy argmax per row.

use std::sync::Arc;

use crate::backend::CpuKernel;
use crate::batch::{BatchEngine, BatchOptions, Logits, SeqTokens};
use crate::limits::MemoryBudget;
use crate::model::Model;
use crate::sample::argmax;
use hetero_sme::ThreadPool as Pool;

use super::sched::{AgentError, BatchRow, Invariant, Verifier};
use crate::backend::BackendError;
use crate::compose::ComposeError;

/// Most rows one prefill chunk holds.
pub const PREFILL_CHUNK: usize = 64;

/// A [`Verifier`] over a GGUF model on the CPU backend.
pub struct ModelVerifier {
    engine: BatchEngine,
    logits: Vec<f32>,
    prefills: u64,
    verifies: u64,
    /// Calibrated cost of a verification pass of `m` rows at `[m - 1]` (model clock).
    cost_table: Option<Vec<f64>>,
    /// First measured prefill time of each agent (model clock reuses it).
    prefill_cost: Vec<Option<f64>>,
    last_cost: Option<f64>,
}

impl ModelVerifier {
    /// Loads nothing: wraps `model` with `agents` caches of `context` positions, `threads`
    /// pool threads and the best CPU kernel, within the machine's available memory.
    pub fn new(
        model: Arc<Model>,
        agents: usize,
        context: usize,
        threads: usize,
        l_total: usize,
    ) -> Result<Self, AgentError> {
        let budget = MemoryBudget::available();
        Self::with_budget(model, agents, context, threads, l_total, &budget)
    }

    /// [`ModelVerifier::new`] whose caches and buffers must fit in `budget`
    /// ([`BatchEngine::with_budget`]).
    pub fn with_budget(
        model: Arc<Model>,
        agents: usize,
        context: usize,
        threads: usize,
        l_total: usize,
        budget: &MemoryBudget,
    ) -> Result<Self, AgentError> {
        let pool = Arc::new(
            Pool::new(threads.max(1)).map_err(|e| ComposeError::from(BackendError::from(e)))?,
        );
        let max_batch = PREFILL_CHUNK.max(l_total);
        let vocab = model.config.vocab;
        let exec = crate::compose::cpu_executor(&model, pool, CpuKernel::best(), max_batch)?;
        let engine = BatchEngine::with_budget(
            model,
            exec,
            BatchOptions {
                context,
                sequences: agents,
                kv: Default::default(),
            },
            budget,
        )?;
        Ok(Self {
            engine,
            logits: vec![0.0; max_batch * vocab],
            prefills: 0,
            verifies: 0,
            cost_table: None,
            prefill_cost: vec![None; agents],
            last_cost: None,
        })
    }

    /// Switches to the model clock: measures a verification pass of `m = 1..=max_rows` rows
    /// (one sequence at a context of `ctx_len` tokens; median of `reps` runs each) and from
    /// then on reports those costs instead of wall time, and each agent's first measured
    /// prefill time for its later prefills. Every configuration then sees the same costs, so
    /// their makespans differ only by scheduling, not by the machine's load at the time.
    /// Returns the table (seconds per pass, index `m - 1`).
    pub fn calibrate(
        &mut self,
        max_rows: usize,
        ctx_len: usize,
        reps: usize,
    ) -> Result<Vec<f64>, AgentError> {
        let vocab = self.engine.model().config.vocab;
        let max_rows = max_rows.min(self.engine.max_batch()).max(1);
        let ctx_len = ctx_len
            .min(self.engine.context().saturating_sub(max_rows))
            .max(1);
        let filler: Vec<u32> = (0..ctx_len as u32).map(|i| 100 + i % 1000).collect();
        self.cost_table = None;
        self.prefill(0, &filler)?;
        let mut table = Vec::with_capacity(max_rows);
        let mut times = Vec::with_capacity(reps.max(1));
        for m in 1..=max_rows {
            times.clear();
            for _ in 0..reps.max(1) {
                let b = [SeqTokens {
                    seq: 0,
                    tokens: &filler[..m],
                }];
                let t0 = std::time::Instant::now();
                self.engine
                    .forward(&b, Logits::All, &mut self.logits[..m * vocab])?;
                times.push(t0.elapsed().as_secs_f64());
                self.engine.truncate(0, ctx_len)?;
            }
            times.sort_by(f64::total_cmp);
            table.push(times[times.len() / 2]);
        }
        self.engine.truncate(0, 0)?;
        self.prefills = 0;
        self.cost_table = Some(table.clone());
        Ok(table)
    }

    /// Positions per agent cache.
    pub fn context(&self) -> usize {
        self.engine.context()
    }

    /// Prefill calls so far (each agent's prompt counts once, however many chunks).
    pub fn prefill_calls(&self) -> u64 {
        self.prefills
    }

    /// Verification passes so far.
    pub fn verify_calls(&self) -> u64 {
        self.verifies
    }

    /// The batched engine.
    pub fn engine(&self) -> &BatchEngine {
        &self.engine
    }
}

impl Verifier for ModelVerifier {
    fn is_stop(&self, token: u32) -> bool {
        let t = &self.engine.model().tokenizer;
        t.eos == Some(token) || t.is_control(token)
    }

    fn text(&self, tokens: &[u32]) -> String {
        self.engine.model().tokenizer.decode(tokens, false)
    }

    fn append_text(&self, token: u32, out: &mut Vec<u8>) {
        self.engine
            .model()
            .tokenizer
            .decode_token(token, false, out);
    }

    fn prefill(&mut self, agent: usize, prompt: &[u32]) -> Result<u32, AgentError> {
        self.prefills += 1;
        let t0 = std::time::Instant::now();
        let next = self.prefill_inner(agent, prompt)?;
        let wall = t0.elapsed().as_secs_f64();
        self.last_cost = match (&self.cost_table, self.prefill_cost.get_mut(agent)) {
            (Some(_), Some(c)) => Some(*c.get_or_insert(wall)),
            _ => None,
        };
        Ok(next)
    }

    fn verify(
        &mut self,
        rows: &[BatchRow],
        tokens: &[u32],
        out: &mut [u32],
    ) -> Result<(), AgentError> {
        self.verify_inner(rows, tokens, out)?;
        self.last_cost = self
            .cost_table
            .as_ref()
            .and_then(|t| t.get(tokens.len().max(1) - 1).copied());
        Ok(())
    }

    fn truncate(&mut self, agent: usize, len: usize) -> Result<(), AgentError> {
        Ok(self.engine.truncate(agent, len)?)
    }

    fn cache_len(&self, agent: usize) -> usize {
        self.engine.len(agent)
    }

    fn last_cost_s(&self) -> Option<f64> {
        self.last_cost
    }
}

impl ModelVerifier {
    fn prefill_inner(&mut self, agent: usize, prompt: &[u32]) -> Result<u32, AgentError> {
        let vocab = self.engine.model().config.vocab;
        // A fresh sequence: forget whatever a previous run left in this cache.
        self.engine.truncate(agent, 0)?;
        if prompt.is_empty() {
            return Err(AgentError::EmptyPrompt { agent });
        }
        let mut next = 0;
        for chunk in prompt.chunks(PREFILL_CHUNK) {
            let b = [SeqTokens {
                seq: agent,
                tokens: chunk,
            }];
            self.engine
                .forward(&b, Logits::Last, &mut self.logits[..vocab])?;
            next = argmax(&self.logits[..vocab]);
        }
        Ok(next)
    }

    fn verify_inner(
        &mut self,
        rows: &[BatchRow],
        tokens: &[u32],
        out: &mut [u32],
    ) -> Result<(), AgentError> {
        self.verifies += 1;
        let vocab = self.engine.model().config.vocab;
        // At most L_total rows: a fixed-size descriptor array, no allocation.
        let mut descs = [SeqTokens {
            seq: 0,
            tokens: &[],
        }; 32];
        if rows.len() > descs.len() || out.len() != tokens.len() {
            return Err(Invariant::BatchShape.into());
        }
        for (d, r) in descs.iter_mut().zip(rows) {
            let toks = tokens
                .get(r.start..r.start + r.len)
                .ok_or(Invariant::BatchShape)?;
            *d = SeqTokens {
                seq: r.agent,
                tokens: toks,
            };
        }
        let m = tokens.len();
        if m * vocab > self.logits.len() {
            return Err(Invariant::BatchTooLarge {
                tokens: m,
                max: self.logits.len().checked_div(vocab).unwrap_or(0),
            }
            .into());
        }
        self.engine.forward(
            &descs[..rows.len()],
            Logits::All,
            &mut self.logits[..m * vocab],
        )?;
        // Rows of the logits follow `descs` order; `rows` need not be sorted by start.
        let mut at = 0;
        for r in rows {
            for i in 0..r.len {
                out[r.start + i] = argmax(&self.logits[(at + i) * vocab..(at + i + 1) * vocab]);
            }
            at += r.len;
        }
        Ok(())
    }
}
