//! `engine-min perplexity`: llama-perplexity's number for a text file, on any plan and kernel.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;

use super::{load_model, plan_choice, Fail, LoadArgs, MachineArgs, ModelArg};
use crate::compose::PlanChoice;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The text (UTF-8; invalid bytes are replaced).
    #[arg(long, value_name = "TEXT")]
    file: PathBuf,
    /// Tokens per chunk; the second half of each chunk is scored (llama.cpp's -c).
    #[arg(long, default_value_t = 512, value_parser = super::at_least_one)]
    ctx: usize,
    /// Evaluate at most this many chunks.
    #[arg(long, value_parser = super::at_least_one)]
    chunks: Option<usize>,
    /// The plan (any `run` plan; auto needs --profile).
    #[arg(long, value_parser = plan_choice, default_value = "cpu")]
    plan: PlanChoice,
    /// A profile for `--plan auto`.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    load: LoadArgs,
}

pub fn perplexity(a: PerplexityArgs, out: &mut dyn Write) -> Result<(), Fail> {
    let max_batch = a.ctx.min(256);
    let opts =
        super::run::compose_options(a.plan, a.profile.as_ref(), &a.machine, max_batch, a.ctx)?;
    let bytes = std::fs::read(&a.file)
        .map_err(|e| Fail::Run(format!("cannot read {}: {e}", a.file.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let model = Arc::new(load_model(&a.model.model, &a.load)?);
    if a.ctx > model.config.context {
        return Err(Fail::Usage(format!(
            "--ctx {} exceeds the model's context length {}",
            a.ctx, model.config.context
        )));
    }
    let t0 = Instant::now();
    let tokens = model.tokenizer.encode(&text, false);
    let tok_s = t0.elapsed().as_secs_f64();
    let (mut engine, _, _) = super::run::build_engine(&model, &opts, a.ctx, &a.load)?;
    writeln!(
        out,
        "perplexity of {}: {} tokens (tokenized in {tok_s:.2} s); chunks of {} ({} scored each); \
         plan {}, cpu kernel {}, {} thread(s); processors: {}",
        a.file.display(),
        tokens.len(),
        a.ctx,
        a.ctx - 1 - a.ctx / 2,
        a.plan,
        a.machine.kernel().name(),
        a.machine.threads(),
        engine.executor().backend_names()
    )?;
    let mut logits = vec![0f32; a.ctx * model.config.vocab];
    let t1 = Instant::now();
    let mut line = String::new();
    let r = crate::perplexity::perplexity(
        &mut engine,
        &tokens,
        a.ctx,
        a.chunks,
        &mut logits,
        |c, ppl| line += &format!("[{}]{ppl:.4},", c + 1),
    )
    .map_err(Fail::run)?;
    writeln!(out, "{}", line.trim_end_matches(','))?;
    writeln!(
        out,
        "Final estimate: PPL = {:.4} +/- {:.5} ({} chunks, {} tokens scored, {:.1} s)",
        r.ppl,
        r.ppl_err,
        r.chunks,
        r.scored,
        t1.elapsed().as_secs_f64()
    )?;
    Ok(())
}
