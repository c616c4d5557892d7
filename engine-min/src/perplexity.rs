//! Perplexity computed as llama.cpp's `llama-perplexity` does: the text's tokens in chunks of
//! `ctx`, each chunk evaluated from an empty cache (its first token replaced by BOS when the
//! tokenizer adds one), and only the second half of each chunk scored — every scored token
//! has at least `ctx / 2` tokens of context. PPL = exp(mean NLL) with the standard error of
//! the mean NLL carried through (`PPL ± PPL · σ/√(N−1)`), so two engines' numbers compare
//! directly.

use crate::engine::{Engine, EngineError};

/// The result of [`perplexity`].
#[derive(Clone, Debug, PartialEq)]
pub struct Perplexity {
    /// exp(mean negative log-likelihood).
    pub ppl: f64,
    /// Its standard error (llama.cpp's estimate).
    pub ppl_err: f64,
    /// Mean negative log-likelihood per scored token (nats).
    pub nll: f64,
    /// Chunks evaluated.
    pub chunks: usize,
    /// Tokens scored.
    pub scored: usize,
    /// Running PPL after each chunk (llama.cpp prints these as `[1]x,[2]y,...`).
    pub per_chunk: Vec<f64>,
}

/// Why perplexity could not be computed.
#[derive(Debug, Clone, PartialEq)]
pub enum PerplexityError {
    /// The text has fewer than `2 * ctx` tokens... at least one whole chunk is needed.
    TooShort {
        /// Tokens in the text.
        tokens: usize,
        /// Tokens one chunk needs.
        ctx: usize,
    },
    /// `ctx` below 4 (nothing to score) or above the engine's context.
    BadContext {
        /// Asked.
        ctx: usize,
        /// The engine's context.
        max: usize,
    },
    /// The forward pass failed.
    Engine(EngineError),
    /// A logit row held NaN or infinity at this chunk and position.
    NonFinite {
        /// Chunk index.
        chunk: usize,
        /// Position in the chunk.
        pos: usize,
    },
}

impl std::fmt::Display for PerplexityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooShort { tokens, ctx } => write!(
                f,
                "the text has {tokens} tokens; one chunk of --ctx {ctx} needs {ctx} (use a \
                 longer text or a smaller --ctx)"
            ),
            Self::BadContext { ctx, max } => {
                write!(f, "--ctx {ctx} must be in 4..={max}")
            }
            Self::Engine(e) => write!(f, "{e}"),
            Self::NonFinite { chunk, pos } => {
                write!(f, "non-finite logits in chunk {chunk} at position {pos}")
            }
        }
    }
}

impl std::error::Error for PerplexityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Engine(e) => Some(e),
            _ => None,
        }
    }
}

/// Perplexity of `tokens` in chunks of `ctx` (at most `max_chunks` when given); `logits` must
/// hold `ctx * vocab` floats (scratch; the caller allocates it once). `progress(chunk, ppl)`
/// is called after each chunk.
pub fn perplexity(
    engine: &mut Engine,
    tokens: &[u32],
    ctx: usize,
    max_chunks: Option<usize>,
    logits: &mut [f32],
    mut progress: impl FnMut(usize, f64),
) -> Result<Perplexity, PerplexityError> {
    let vocab = engine.model().config.vocab;
    if ctx < 4 || ctx > engine.context() {
        return Err(PerplexityError::BadContext {
            ctx,
            max: engine.context(),
        });
    }
    let n_chunks = (tokens.len() / ctx).min(max_chunks.unwrap_or(usize::MAX));
    if n_chunks == 0 {
        return Err(PerplexityError::TooShort {
            tokens: tokens.len(),
            ctx,
        });
    }
    let bos = engine
        .model()
        .tokenizer
        .add_bos
        .then_some(engine.model().tokenizer.bos)
        .flatten();
    let logits = &mut logits[..ctx * vocab];
    let first = ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut chunk_tokens = vec![0u32; ctx];
    let mut per_chunk = Vec::with_capacity(n_chunks);
    for c in 0..n_chunks {
        chunk_tokens.copy_from_slice(&tokens[c * ctx..(c + 1) * ctx]);
        if let Some(b) = bos {
            chunk_tokens[0] = b;
        }
        engine.reset();
        logits.fill(f32::NAN);
        engine
            .forward(&chunk_tokens, logits)
            .map_err(PerplexityError::Engine)?;
        // Position j predicts the chunk's token j + 1 (the original token, not BOS).
        for j in first..ctx - 1 {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let target = tokens[c * ctx + j + 1] as usize;
            let lp = log_softmax_at(row, target)
                .ok_or(PerplexityError::NonFinite { chunk: c, pos: j })?;
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        let ppl = (nll / count as f64).exp();
        per_chunk.push(ppl);
        progress(c, ppl);
    }
    let mean = nll / count as f64;
    let ppl = mean.exp();
    // llama.cpp: variance of the per-token NLL, standard error of its mean, carried through exp.
    let var = nll2 / count as f64 - mean * mean;
    let ppl_err = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        ppl_err,
        nll: mean,
        chunks: n_chunks,
        scored: count,
        per_chunk,
    })
}

/// `log softmax(row)[i]` in f64 (max-subtracted); `None` if the row holds NaN or infinity.
fn log_softmax_at(row: &[f32], i: usize) -> Option<f64> {
    let mut max = f64::NEG_INFINITY;
    for &v in row {
        if !v.is_finite() {
            return None;
        }
        max = max.max(f64::from(v));
    }
    let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
    Some(f64::from(*row.get(i)?) - max - sum.ln())
}

#[cfg(test)]
mod tests {
    use super::log_softmax_at;

    #[test]
    fn log_softmax_is_exact_on_small_rows_and_refuses_non_finite() {
        let row = [1.0f32, 2.0, 3.0];
        let z: f64 = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).sum();
        for (i, v) in [1.0f64, 2.0, 3.0].iter().enumerate() {
            let want = v - z.ln();
            assert!((log_softmax_at(&row, i).unwrap() - want).abs() < 1e-12);
        }
        assert_eq!(log_softmax_at(&[1.0, f32::NAN], 0), None);
        assert_eq!(log_softmax_at(&[1.0, f32::INFINITY], 0), None);
        assert_eq!(log_softmax_at(&[1.0], 3), None);
    }
}
