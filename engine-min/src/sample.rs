//! Token sampling: greedy, or temperature with nucleus (top-p) truncation, seeded.
//!
//! [`Sampler::try_sample`] refuses logits that hold a NaN or an infinity ([`SampleError`]): the
//! forward pass went wrong, and a token picked from them would be noise (an all-NaN vector
//! used to yield token 0, end of text: silent empty output). A temperature so small that
//! `1 / T` overflows f32 samples greedily, as its limit does.

use std::fmt;

/// Why no token could be sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SampleError {
    /// The logits are empty.
    Empty,
    /// A logit is NaN or infinite.
    NonFinite {
        /// Index (token id) of the first such logit.
        index: usize,
        /// Its value.
        value: f32,
    },
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "no logits to sample from"),
            Self::NonFinite { index, value } => {
                write!(
                    f,
                    "logit of token {index} is {value}: the forward pass is broken"
                )
            }
        }
    }
}

impl std::error::Error for SampleError {}

/// Sampling settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerOptions {
    /// 0 means greedy (argmax).
    pub temperature: f32,
    /// Nucleus mass kept (1.0 keeps everything).
    pub top_p: f32,
    /// RNG seed.
    pub seed: u64,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0x5eed,
        }
    }
}

/// A sampler with its own scratch (allocated once for the vocabulary).
pub struct Sampler {
    opts: SamplerOptions,
    state: u64,
    idx: Vec<u32>,
    probs: Vec<f32>,
}

impl Sampler {
    /// A sampler for a vocabulary of `vocab` tokens.
    pub fn new(vocab: usize, opts: SamplerOptions) -> Self {
        Self {
            opts,
            state: opts.seed ^ 0x9E37_79B9_7F4A_7C15,
            idx: Vec::with_capacity(vocab),
            probs: Vec::with_capacity(vocab),
        }
    }

    fn next_f32(&mut self) -> f32 {
        // splitmix64
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Picks the next token from `logits`, which must all be finite ([`SampleError`]
    /// otherwise). One pass over the logits checks them: cheap beside the forward pass that
    /// made them.
    pub fn try_sample(&mut self, logits: &[f32]) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::Empty);
        }
        if let Some(index) = logits.iter().position(|v| !v.is_finite()) {
            return Err(SampleError::NonFinite {
                index,
                value: logits[index],
            });
        }
        Ok(self.sample(logits))
    }

    /// Picks the next token from `logits` without checking them (NaN logits are never
    /// picked; when no probability is left, the argmax). Prefer [`Sampler::try_sample`].
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let inv_t = 1.0 / self.opts.temperature;
        // A temperature <= 0 (or NaN, or infinite) is greedy, as it always was; one so small
        // that 1/T overflows (e.g. 1e-39, subnormal) would make the best logit's
        // (l - max) / T = 0 · ∞ = NaN and every probability 0, so it is greedy too, as T → 0
        // is.
        let t = self.opts.temperature;
        if t <= 0.0 || !t.is_finite() || !inv_t.is_finite() {
            return argmax(logits);
        }
        let max = logits
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        self.probs.clear();
        self.probs.extend(logits.iter().map(|&l| {
            let p = ((l - max) * inv_t).exp();
            if p.is_nan() {
                0.0
            } else {
                p
            }
        }));
        let total: f32 = self.probs.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            // Only non-finite logits get here (the best finite logit has probability 1).
            return argmax(logits);
        }
        let probs = &self.probs;
        let top_p = self.opts.top_p.clamp(0.0, 1.0);
        self.idx.clear();
        if top_p < 1.0 {
            // Tokens below eps = (1 - top_p) / V hold less than 1 - top_p in all, so the
            // nucleus (smallest prefix by probability reaching top_p) never includes them:
            // dropping them before the sort is exact and keeps the sort short.
            let eps = (1.0 - top_p) / logits.len() as f32 * total;
            self.idx
                .extend((0..logits.len() as u32).filter(|&i| probs[i as usize] >= eps));
        } else {
            self.idx.extend(0..logits.len() as u32);
        }
        let mut kept = self.idx.len();
        if top_p < 1.0 {
            self.idx
                .sort_unstable_by(|&a, &b| probs[b as usize].total_cmp(&probs[a as usize]));
            let mut acc = 0.0;
            for (i, &id) in self.idx.iter().enumerate() {
                acc += probs[id as usize] / total;
                if acc >= top_p {
                    kept = i + 1;
                    break;
                }
            }
        }
        let mass: f32 = self.idx[..kept].iter().map(|&i| probs[i as usize]).sum();
        let mut r = self.next_f32() * mass;
        for &id in &self.idx[..kept] {
            r -= self.probs[id as usize];
            if r <= 0.0 {
                return id;
            }
        }
        self.idx[kept.saturating_sub(1)]
    }
}

/// Index of the largest logit (first on ties; NaN ignored; 0 for an empty or all-NaN slice).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best as u32
}
