//! Numerical guards. The engines watch every step cheaply and, only when something is wrong,
//! run it again with a check after every op (`Probe::full`) to name where non-finite values
//! first appeared — a NaN in a quantized weight's scale, an overflowing activation — so a
//! broken model ends in a [`NonFinite`] error instead of empty text.
//!
//! The watch (`Probe::watch`) is one scan of the logits a step returns plus, in every layer,
//! of the attention output, the SwiGLU output and the residual stream — the activations that
//! are not a norm's output. Checking the logits alone would not do: the int8 kernels quantize
//! each matmul's activations to 8 bits, and hetero-sme's quantizer takes a block's scale with
//! a `max` that can skip a NaN and then maps a NaN element to an integer (0 in the portable
//! definition, −127 on AVX-512), so a NaN born inside a layer can leave it as finite garbage,
//! and a residual stream that is all NaN can reach the output head as all-zero activations:
//! finite, all-equal logits, token 0, empty text. The watched activations are the inputs of
//! the matmuls that do not follow a norm (`attn_output`, `ffn_down`) and the stream every
//! layer adds into, so whatever a layer produces is seen before a quantizer can hide it. On
//! SmolLM2 that is 2,688 floats per token per layer beside the 49,152 logits: 20–23 µs per
//! decode token on the 2-core dev VM, 0.08–0.23% of a decode step there
//! (`examples/guard_cost.rs`).

use std::fmt;

/// An op of a transformer block, named after its weight (or, for host ops, after what it
/// computes). The order is the order the block runs them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerOp {
    /// RMSNorm before attention.
    AttnNorm,
    /// Query projection.
    AttnQ,
    /// Key projection.
    AttnK,
    /// Value projection.
    AttnV,
    /// RoPE, KV-cache write and attention (softmax over the cache).
    Attention,
    /// Attention output projection.
    AttnOutput,
    /// The residual add after attention.
    AttnResidual,
    /// RMSNorm before the feed-forward network.
    FfnNorm,
    /// SwiGLU gate projection.
    FfnGate,
    /// SwiGLU up projection.
    FfnUp,
    /// `silu(gate) * up`.
    Swiglu,
    /// Down projection.
    FfnDown,
    /// The residual add after the feed-forward network.
    FfnResidual,
}

impl LayerOp {
    /// The op's name (the GGUF tensor name part for matmuls and norms).
    pub fn name(self) -> &'static str {
        match self {
            Self::AttnNorm => "attn_norm",
            Self::AttnQ => "attn_q",
            Self::AttnK => "attn_k",
            Self::AttnV => "attn_v",
            Self::Attention => "attention",
            Self::AttnOutput => "attn_output",
            Self::AttnResidual => "the attention residual",
            Self::FfnNorm => "ffn_norm",
            Self::FfnGate => "ffn_gate",
            Self::FfnUp => "ffn_up",
            Self::Swiglu => "swiglu",
            Self::FfnDown => "ffn_down",
            Self::FfnResidual => "the feed-forward residual",
        }
    }
}

/// Where in a step a value was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The token embedding rows (`token_embd`).
    Embedding,
    /// After `op` of block `layer`.
    Layer {
        /// Block index.
        layer: usize,
        /// The op.
        op: LayerOp,
    },
    /// After the final RMSNorm (`output_norm`).
    OutputNorm,
    /// After the output head (the logits).
    Output,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedding => f.write_str("in the token embedding (token_embd)"),
            Self::Layer { layer, op } => write!(f, "in layer {layer} after {}", op.name()),
            Self::OutputNorm => f.write_str("after output_norm"),
            Self::Output => f.write_str("in the output head (the logits)"),
        }
    }
}

/// Non-finite values came out of a forward step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NonFinite {
    /// Where they first appeared; `None` when that is unknown (see `searched`).
    pub site: Option<Site>,
    /// With no site: whether the step was run again with per-op checks and produced no
    /// non-finite value (a non-deterministic fault), or not searched at all (the resident GPU
    /// decoder keeps its activations on the device).
    pub searched: bool,
    /// The sequence of the row (0 for the one-sequence engine).
    pub seq: usize,
    /// The position of the row in its sequence.
    pub pos: usize,
    /// Index of the first non-finite element in the row.
    pub index: usize,
    /// Its value.
    pub value: f32,
}

impl fmt::Display for NonFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            pos, index, value, ..
        } = self;
        match (&self.site, self.searched) {
            (Some(site), _) => write!(
                f,
                "non-finite values first appear {site} (position {pos}, element {index} is \
                 {value}): the model's weights or hyper-parameters are broken"
            ),
            (None, true) => write!(
                f,
                "non-finite logits (position {pos}, token {index} is {value}), but the step run \
                 again with a check after every op produced none"
            ),
            (None, false) => write!(
                f,
                "non-finite logits (position {pos}, token {index} is {value}) from the resident \
                 GPU decoder, which keeps its activations on the device (--plan cpu names the \
                 layer and op)"
            ),
        }
    }
}

impl std::error::Error for NonFinite {}

/// The first NaN or infinity of `x` (index and value). One branch-free pass decides whether
/// there is any (16 independent lanes, so it vectorizes); only then is the position searched.
pub fn first_non_finite(x: &[f32]) -> Option<(usize, f32)> {
    // |v| as bits is at least the all-ones exponent exactly for infinities and NaNs.
    const EXP: u32 = 0x7f80_0000;
    let abs = |v: &f32| v.to_bits() & 0x7fff_ffff;
    let mut lanes = [0u32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(c) {
            *m = (*m).max(abs(v));
        }
    }
    let worst = chunks.remainder().iter().map(abs).chain(lanes).max();
    if worst.unwrap_or(0) < EXP {
        return None;
    }
    x.iter().position(|v| !v.is_finite()).map(|i| (i, x[i]))
}

/// Floats from which [`first_non_finite_on`] scans on the pool (below, one thread is faster
/// than waking the others: ~64 KiB, a few µs).
const PAR_SCAN: usize = 1 << 14;

/// [`first_non_finite`] with the scan spread over `pool`'s threads for long buffers (a layer's
/// watched activations at 512 prompt rows are ~16 M floats: ~200 ms a prompt on one thread at
/// 8B): the same answer, the first non-finite element.
pub fn first_non_finite_on(pool: &hetero_sme::ThreadPool, x: &[f32]) -> Option<(usize, f32)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    if x.len() < PAR_SCAN || pool.threads() < 2 {
        return first_non_finite(x);
    }
    let tasks = 4 * pool.threads();
    let chunk = x.len().div_ceil(tasks);
    let first = AtomicUsize::new(usize::MAX);
    pool.run(tasks, &|t, _| {
        let c0 = t * chunk;
        if c0 >= x.len() || c0 >= first.load(Ordering::Relaxed) {
            return;
        }
        if let Some((i, _)) = first_non_finite(&x[c0..(c0 + chunk).min(x.len())]) {
            first.fetch_min(c0 + i, Ordering::Relaxed);
        }
    });
    let i = first.into_inner();
    (i < x.len()).then(|| (i, x[i]))
}

/// What a step checks as it runs: the watched sites ([`Probe::watch`], every step) or every
/// op ([`Probe::full`], a step run again after a failure). Records the first site whose output
/// holds a non-finite value; the step stops there.
#[derive(Debug)]
pub(crate) struct Probe {
    full: bool,
    pub(crate) found: Option<NonFinite>,
}

impl Probe {
    /// The every-step watch: the attention and SwiGLU outputs and the residual stream.
    pub(crate) fn watch() -> Self {
        Self {
            full: false,
            found: None,
        }
    }

    /// A check after every op.
    pub(crate) fn full() -> Self {
        Self {
            full: true,
            found: None,
        }
    }

    /// Whether the output of `site` is checked.
    pub(crate) fn wants(&self, site: Site) -> bool {
        self.full
            || matches!(
                site,
                Site::Layer {
                    op: LayerOp::Attention | LayerOp::Swiglu | LayerOp::FfnResidual,
                    ..
                }
            )
    }

    /// Looks at `data`, rows of `width` floats (row `t` at `(seq, pos) = at(t)`), written by
    /// `site`; records the first non-finite value and returns whether there was one (the step
    /// then stops: what follows can only spread it). With a pool, long buffers are scanned on
    /// its threads.
    pub(crate) fn check(
        &mut self,
        pool: Option<&hetero_sme::ThreadPool>,
        site: Site,
        data: &[f32],
        width: usize,
        at: impl Fn(usize) -> (usize, usize),
    ) -> bool {
        if self.found.is_some() {
            return true;
        }
        let found = match pool {
            Some(p) => first_non_finite_on(p, data),
            None => first_non_finite(data),
        };
        let Some((i, value)) = found else {
            return false;
        };
        let (t, index) = (i / width.max(1), i % width.max(1));
        let (seq, pos) = at(t);
        self.found = Some(NonFinite {
            site: Some(site),
            searched: true,
            seq,
            pos,
            index,
            value,
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_non_finite_finds_every_kind_anywhere() {
        let mut x = vec![1.0f32; 1000];
        assert_eq!(first_non_finite(&x), None);
        x[3] = f32::MAX;
        x[4] = -f32::MAX;
        x[5] = f32::MIN_POSITIVE / 2.0; // subnormal: finite
        assert_eq!(first_non_finite(&x), None);
        for (at, v) in [
            (0, f32::NAN),
            (999, f32::INFINITY),
            (517, f32::NEG_INFINITY),
        ] {
            let mut y = x.clone();
            y[at] = v;
            y[998] = f32::NAN; // a later one is not reported first
            let (i, got) = first_non_finite(&y).expect("found");
            assert_eq!(i, at.min(998));
            if i == at {
                assert_eq!(got.to_bits(), v.to_bits());
            }
        }
        // A NaN with the sign bit set and a signalling payload.
        let mut z = x.clone();
        z[10] = f32::from_bits(0xff80_0001);
        assert_eq!(first_non_finite(&z).map(|p| p.0), Some(10));
        assert_eq!(first_non_finite(&[]), None);
    }

    #[test]
    fn the_parallel_scan_finds_the_first_like_the_serial_one() {
        let pool = hetero_sme::ThreadPool::new(3).unwrap();
        let n = 5 * super::PAR_SCAN + 7;
        let x = vec![0.5f32; n];
        assert_eq!(first_non_finite_on(&pool, &x), None);
        // Two bad values in different chunks (the later one found first by some thread), at
        // the ends, and one in a buffer too short to split.
        for (a, b) in [
            (n - 1, n - 1),
            (0, n - 1),
            (2 * super::PAR_SCAN + 3, 4 * super::PAR_SCAN),
        ] {
            let mut y = x.clone();
            y[b] = f32::INFINITY;
            y[a] = f32::NAN;
            let got = first_non_finite_on(&pool, &y).expect("found");
            assert_eq!(got.0, a);
            assert_eq!(got.0, first_non_finite(&y).unwrap().0);
            assert!(got.1.is_nan() || a == b);
        }
        let mut short = vec![1.0f32; 100];
        short[40] = f32::NEG_INFINITY;
        assert_eq!(first_non_finite_on(&pool, &short).map(|p| p.0), Some(40));
    }

    #[test]
    fn the_probe_names_row_and_element_and_keeps_the_first_site() {
        let mut p = Probe::full();
        let data = [0.0, 1.0, 2.0, 3.0, f32::NAN, 5.0];
        let site = Site::Layer {
            layer: 3,
            op: LayerOp::FfnDown,
        };
        assert!(!p.check(None, site, &data[..4], 2, |t| (0, 10 + t)));
        assert!(p.check(None, site, &data, 2, |t| (1, 10 + t)));
        let nf = p.found.expect("recorded");
        assert_eq!((nf.seq, nf.pos, nf.index), (1, 12, 0));
        assert_eq!(nf.site, Some(site));
        // Later sites do not replace the first.
        assert!(p.check(None, Site::Output, &[f32::INFINITY], 1, |_| (0, 0)));
        assert_eq!(p.found.expect("kept").site, Some(site));
        // The watch checks only the activations that are not a norm's output.
        let w = Probe::watch();
        for (op, wanted) in [
            (LayerOp::AttnQ, false),
            (LayerOp::FfnDown, false),
            (LayerOp::Attention, true),
            (LayerOp::Swiglu, true),
            (LayerOp::FfnResidual, true),
        ] {
            assert_eq!(w.wants(Site::Layer { layer: 0, op }), wanted, "{op:?}");
        }
        assert!(!w.wants(Site::Output) && !w.wants(Site::Embedding));
        let msg = nf.to_string();
        assert!(
            msg.starts_with("non-finite values first appear in layer 3 after ffn_down"),
            "{msg}"
        );
        assert!(msg.contains("position 12") && msg.contains("NaN"), "{msg}");
    }
}
