//! The verifier on the real model: one [`BatchEngine`] pass per step over all agents' rows,
//! one KV cache per agent, greedy argmax per row.

use std::sync::Arc;

use crate::backend::{CpuBackend, CpuKernel};
use crate::batch::{BatchEngine, BatchError, BatchOptions, Logits, SeqTokens};
use crate::model::Model;
use crate::pool::Pool;
use crate::sample::argmax;

use super::sched::{AgentError, BatchRow, Verifier};

/// Most rows one prefill chunk holds.
pub const PREFILL_CHUNK: usize = 64;

fn eng(e: BatchError) -> AgentError {
    AgentError::Engine(e.to_string())
}

/// A [`Verifier`] over a GGUF model on the CPU backend.
pub struct ModelVerifier {
    engine: BatchEngine,
    logits: Vec<f32>,
    prefills: u64,
    verifies: u64,
}

impl ModelVerifier {
    /// Loads nothing: wraps `model` with `agents` caches of `context` positions, `threads`
    /// pool threads and the best CPU kernel.
    pub fn new(
        model: Arc<Model>,
        agents: usize,
        context: usize,
        threads: usize,
        l_total: usize,
    ) -> Result<Self, AgentError> {
        let pool = Arc::new(Pool::new(threads.max(1)));
        let backend = Box::new(CpuBackend::new(Arc::clone(&pool), CpuKernel::best()));
        let max_batch = PREFILL_CHUNK.max(l_total);
        let vocab = model.config.vocab;
        let engine = BatchEngine::new(
            model,
            backend,
            pool,
            BatchOptions {
                context,
                max_batch,
                sequences: agents,
            },
        )
        .map_err(eng)?;
        Ok(Self {
            engine,
            logits: vec![0.0; max_batch * vocab],
            prefills: 0,
            verifies: 0,
        })
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

    fn prefill(&mut self, agent: usize, prompt: &[u32]) -> Result<u32, AgentError> {
        self.prefills += 1;
        let vocab = self.engine.model().config.vocab;
        // A fresh sequence: forget whatever a previous run left in this cache.
        self.engine.truncate(agent, 0).map_err(eng)?;
        if prompt.is_empty() {
            return Err(AgentError::Engine("empty prompt".into()));
        }
        let mut next = 0;
        for chunk in prompt.chunks(PREFILL_CHUNK) {
            let b = [SeqTokens {
                seq: agent,
                tokens: chunk,
            }];
            self.engine
                .forward(&b, Logits::Last, &mut self.logits[..vocab])
                .map_err(eng)?;
            next = argmax(&self.logits[..vocab]);
        }
        Ok(next)
    }

    fn verify(
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
            return Err(AgentError::Internal("verify: bad batch shape".into()));
        }
        for (d, r) in descs.iter_mut().zip(rows) {
            let toks = tokens
                .get(r.start..r.start + r.len)
                .ok_or_else(|| AgentError::Internal("verify: row out of range".into()))?;
            *d = SeqTokens {
                seq: r.agent,
                tokens: toks,
            };
        }
        let m = tokens.len();
        if m * vocab > self.logits.len() {
            return Err(AgentError::Internal("verify: batch exceeds L_total".into()));
        }
        self.engine
            .forward(
                &descs[..rows.len()],
                Logits::All,
                &mut self.logits[..m * vocab],
            )
            .map_err(eng)?;
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

    fn truncate(&mut self, agent: usize, len: usize) -> Result<(), AgentError> {
        self.engine.truncate(agent, len).map_err(eng)
    }

    fn cache_len(&self, agent: usize) -> usize {
        self.engine.len(agent)
    }
}
