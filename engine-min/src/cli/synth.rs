//! `engine-min synth`: a Llama GGUF with seeded random weights at a real model's shape.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::Fail;
use crate::synth::{self, SynthError, SynthOptions};

/// Writes a Llama-architecture GGUF with seeded random weights at a named shape, for timing
/// and for correctness against the reference forward pass. NOT FOR TEXT: the weights are
/// noise, so whatever such a model generates is noise too.
#[derive(Args, Debug)]
#[command(
    long_about = "Writes a Llama-architecture GGUF with seeded random weights at a named shape \
                  (smollm2-135m, llama-1b, llama-3b, llama-8b) in one weight type (or \
                  llama.cpp's Q4_K_M mix), with the tokenizer of a real GGUF.\n\nThese files \
                  are for timing and for correctness against the reference forward pass, not \
                  for text: the weights are random, so the text is too."
)]
pub struct SynthArgs {
    /// Model shape: smollm2-135m, llama-1b, llama-3b or llama-8b.
    #[arg(long)]
    shape: String,
    /// Weight type: f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k or q4_k_m.
    #[arg(long = "type", value_name = "TYPE")]
    ty: String,
    /// Output file (written to a temporary name beside it, renamed when complete).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Blocks to write (default: the shape's).
    #[arg(long)]
    layers: Option<usize>,
    /// Seed of the weights (the same seed gives the same bytes on any thread count).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A GGUF file whose tokenizer is copied (default: the model at $HETERO_MODEL).
    #[arg(long, env = "HETERO_MODEL", value_name = "GGUF")]
    tokenizer: PathBuf,
    /// Replace the output if it exists.
    #[arg(long)]
    force: bool,
    /// Threads that quantize (default: all cores).
    #[arg(long, value_parser = super::at_least_one)]
    threads: Option<usize>,
}

pub fn synth(a: SynthArgs, out: &mut dyn Write) -> Result<(), Fail> {
    let opts = SynthOptions {
        shape: a.shape,
        ty: a.ty,
        layers: a.layers,
        seed: a.seed,
        tokenizer: a.tokenizer,
        out: a.out,
        force: a.force,
    };
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let pool = hetero_sme::ThreadPool::new(threads).map_err(Fail::run)?;
    let start = Instant::now();
    let r = synth::synth(&opts, &pool).map_err(|e| match e {
        SynthError::UnknownShape(_)
        | SynthError::UnknownType(_)
        | SynthError::TypeDoesNotFit { .. }
        | SynthError::BadLayers { .. } => Fail::Usage(e.to_string()),
        e => Fail::run(e),
    })?;
    writeln!(
        out,
        "wrote {}: {} {} seed {}, {} blocks, vocab {}, {} tensors, {} bytes in {:.1} s \
         ({threads} threads; random weights: for timing and reference checks, not text)",
        r.path.display(),
        opts.shape,
        opts.ty,
        opts.seed,
        r.layers,
        r.vocab,
        r.tensors,
        r.bytes,
        start.elapsed().as_secs_f64()
    )?;
    Ok(())
}
