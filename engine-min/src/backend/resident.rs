//! The GPU running whole steps: hetero-opencl-kernels' device-resident decoder holding the
//! model's weights, the KV cache and every intermediate on the device, so a token (or a prompt
//! chunk) is one enqueue of every layer's fused kernels and one readback of the logits (or only
//! the argmax). The executor uses it when its plan gives every matmul to the GPU: nothing
//! crosses to the host between ops, so the per-matmul GPU backend (a round trip per matmul) is
//! not built at all.

use std::sync::Arc;

use hetero_opencl_kernels::decoder::{
    Decoder, DecoderConfig, DecoderOptions, Input, LayerWeights, ModelWeights, Readout, Tensor,
};
use hetero_opencl_kernels::{Device, RopeMode};

use crate::model::Model;

/// Builds the decoder for `model`: `max_context` positions of KV cache, prompt chunks of up to
/// `max_rows` rows, every row's logits available (perplexity). A device without room for the
/// model or the cache is a typed error naming the sizes, before anything is uploaded.
pub fn build(
    dev: &Arc<Device>,
    model: &Model,
    max_context: usize,
    max_rows: usize,
) -> Result<Decoder, hetero_opencl_kernels::Error> {
    build_with(dev, model, max_context, max_rows, DecoderOptions::default())
}

/// [`build`] with the decoder's options (e.g. its decode path, for tests that compare them).
pub fn build_with(
    dev: &Arc<Device>,
    model: &Model,
    max_context: usize,
    max_rows: usize,
    opts: DecoderOptions,
) -> Result<Decoder, hetero_opencl_kernels::Error> {
    let cfg = config(model, max_context, max_rows);
    Decoder::new(dev, cfg, &weights(model), opts)
}

/// The decoder's shape of `model` (every row's logits available).
pub fn config(model: &Model, max_context: usize, max_rows: usize) -> DecoderConfig {
    let c = &model.config;
    DecoderConfig {
        n_layer: c.n_layer,
        d_model: c.d_model,
        d_ff: c.d_ff,
        n_head: c.n_head,
        n_kv_head: c.n_kv_head,
        head_dim: c.head_dim,
        rope_dims: c.rope_dims,
        rope_theta: c.rope_theta,
        // The GGUF converter's Q/K permutation makes ggml's adjacent-pair RoPE right for Llama.
        rope_mode: RopeMode::Normal,
        eps: c.eps,
        vocab: c.vocab,
        max_context,
        max_rows,
        all_logits: true,
    }
}

/// `model`'s weights as the decoder reads them: views into the model file (nothing copied
/// here; the decoder uploads them).
pub fn weights(model: &Model) -> ModelWeights<'_> {
    let t = |w| {
        let v = model.view(w);
        Tensor {
            ty: v.ty,
            data: v.data,
        }
    };
    ModelWeights {
        embed: t(&model.embed),
        layers: model
            .layers
            .iter()
            .map(|l| LayerWeights {
                attn_norm: &l.attn_norm,
                wq: t(&l.wq),
                wk: t(&l.wk),
                wv: t(&l.wv),
                wo: t(&l.wo),
                ffn_norm: &l.ffn_norm,
                gate: t(&l.gate),
                up: t(&l.up),
                down: t(&l.down),
            })
            .collect(),
        output_norm: &model.output_norm,
        output: (!model.tied_output).then(|| t(&model.output)),
    }
}

/// One step of `tokens` at `pos0` through every layer: the last row's logits into `logits`
/// (`vocab` floats) or every row's (`tokens.len() * vocab`).
pub fn step(
    dec: &mut Decoder,
    tokens: &[u32],
    pos0: usize,
    logits: &mut [f32],
) -> Result<(), hetero_opencl_kernels::Error> {
    let n = dec.config().n_layer;
    let readout = if logits.len() == dec.config().vocab {
        Readout::Logits
    } else {
        Readout::AllLogits
    };
    dec.enqueue(Input::Tokens(tokens), pos0, 0..n, readout)?;
    logits.copy_from_slice(dec.logits()?);
    Ok(())
}

/// One step that only fills the KV cache (a prompt chunk whose logits nobody reads).
pub fn fill(
    dec: &mut Decoder,
    tokens: &[u32],
    pos0: usize,
) -> Result<(), hetero_opencl_kernels::Error> {
    let n = dec.config().n_layer;
    dec.enqueue(Input::Tokens(tokens), pos0, 0..n, Readout::Nothing)
}

/// What a greedy step read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Greedy {
    /// The last row's argmax.
    Token(u32),
    /// The device argmax flagged NaN or infinite logits in the last row: the first one (its
    /// index and value, from the logits read back only then).
    NonFinite {
        /// Index of the first non-finite logit.
        index: usize,
        /// Its value.
        value: f32,
    },
}

/// One step whose only readback is the last row's argmax (greedy sampling), unless the device
/// argmax flags a non-finite logit: then the logits too, to name the first one.
pub fn step_argmax(
    dec: &mut Decoder,
    tokens: &[u32],
    pos0: usize,
) -> Result<Greedy, hetero_opencl_kernels::Error> {
    let n = dec.config().n_layer;
    dec.enqueue(Input::Tokens(tokens), pos0, 0..n, Readout::Argmax)?;
    match dec.argmax() {
        Ok(ids) => Ok(Greedy::Token(ids[0])),
        Err(hetero_opencl_kernels::Error::NonFiniteLogits { .. }) => {
            let (index, value) = crate::guard::first_non_finite(dec.logits()?).ok_or(
                hetero_opencl_kernels::Error::NotApplicable(
                    "the device argmax flagged a non-finite logit the logits do not hold",
                ),
            )?;
            Ok(Greedy::NonFinite { index, value })
        }
        Err(e) => Err(e),
    }
}
