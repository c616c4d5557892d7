//! `engine-min profile` (measure every processor, write a profile) and `engine-min plan`
//! (print the planner's per-op plan for a profile).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use super::progress::Progress;
use super::{load_model, load_profile, Fail, LoadArgs, MachineArgs, Verbosity};
use crate::auto::Workload;
use crate::phases::phase_of_rows;
use crate::planning;
use crate::profiler::ProfileOptions;

#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// GGUF model file whose matmul shapes are measured.
    #[arg(long, env = "HETERO_MODEL", value_name = "PATH")]
    model: PathBuf,
    /// Where to write the profile (JSON); checked before anything is measured.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Timed steps per point (the median over steps is kept), after one warm-up step.
    #[arg(long, default_value_t = 3, value_parser = super::at_least_one)]
    reps: usize,
    /// Seconds each curve set may take (CPU decode, CPU prefill, GPU per-matmul, GPU resident,
    /// NPU); larger row counts are left out once the next would overrun it.
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    budget: f64,
    /// Do not measure the GPU (OpenCL).
    #[arg(long)]
    no_gpu: bool,
    /// Do not measure the NPU (QNN HTP; measured when QNN_HTP_LIB is set).
    #[arg(long)]
    no_npu: bool,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    load: LoadArgs,
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 3600.0 => Ok(v),
        Ok(_) => Err(format!("{s} is not a number of seconds in (0, 3600]")),
        Err(e) => Err(e.to_string()),
    }
}

pub fn profile(a: ProfileArgs, v: Verbosity, out: &mut dyn Write) -> Result<(), Fail> {
    // The output path first: a bad one must not cost the whole measurement.
    let mut file = std::fs::File::create(&a.out)
        .map_err(|e| Fail::Run(format!("cannot write {}: {e}", a.out.display())))?;
    let t_map = Instant::now();
    let model = std::sync::Arc::new(load_model(&a.model, &a.load)?);
    let mapped = t_map.elapsed();
    let t0 = Instant::now();
    let opts = ProfileOptions {
        threads: a.machine.threads(),
        kernel: a.machine.kernel(),
        reps: a.reps,
        max_batch: super::run::MAX_BATCH as u32,
        budget: Duration::from_secs_f64(a.budget),
        gpu: !a.no_gpu,
        npu: !a.no_npu && std::env::var_os("QNN_HTP_LIB").is_some(),
        kv: a.machine.kv_type.unwrap_or_default(),
    };
    let mut progress = Progress::stderr("profile", v);
    if v.detailed() {
        progress.note(&format!(
            "profiling through the executor ({} threads, cpu kernel {}): every point is the mean \
             matmul call of its shape inside engine steps of m tokens",
            opts.threads,
            opts.kernel.name()
        ));
    }
    if opts.npu {
        // Said by default too: a reader must not take simulator times for an NPU's.
        progress.note(
            "the NPU is QNN HTP from $QNN_HTP_LIB; on x86 this is the HTP SIMULATOR: its times \
             are simulator times, not an NPU's",
        );
    }
    progress.line(&format!(
        "model mapped in {:.1} s ({} layers, {:.0} MiB)",
        mapped.as_secs_f64(),
        model.config.n_layer,
        model.file().bytes().len() as f64 / (1u64 << 20) as f64
    ));
    let profile = crate::profiler::measure(&model, &opts, &mut |line| progress.line(line))
        .map_err(|e| Fail::Run(format!("profiling failed: {e}")))?;
    progress.finish();
    drop(progress);
    let json = serde_json::to_string_pretty(&profile)
        .map_err(|e| Fail::Run(format!("cannot serialize the profile: {e}")))?;
    file.write_all((json + "\n").as_bytes())
        .map_err(|e| Fail::Run(format!("cannot write {}: {e}", a.out.display())))?;
    writeln!(
        out,
        "wrote {} in {:.1} s",
        a.out.display(),
        t0.elapsed().as_secs_f64()
    )?;
    // What the planner makes of it for run's default workload (checked always: a profile
    // the planner cannot use is an error now, not at the next run).
    let d = crate::auto::decide(&profile, &model, opts.max_batch, Workload::default())
        .map_err(|e| Fail::Run(format!("planning on the new profile failed: {e}")))?;
    if v.detailed() {
        writeln!(out, "{}", d.summary)?;
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The profile to plan on.
    #[arg(long, value_name = "FILE")]
    profile: PathBuf,
    /// Plan one op of weight K,N (with --seq) instead of the model's ops.
    #[arg(long, value_name = "K,N", value_parser = weight_shape)]
    weight: Option<(u32, u32)>,
    /// Rows to plan for (default: 1 and 128 for the model's ops).
    #[arg(long, value_parser = at_least_one_u32)]
    seq: Option<u32>,
    /// The model whose ops are planned.
    #[arg(long, env = "HETERO_MODEL", value_name = "PATH")]
    model: Option<PathBuf>,
    #[command(flatten)]
    load: LoadArgs,
}

fn weight_shape(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{s}` is not K,N (two positive integers)");
    let (k, n) = s.split_once(',').ok_or_else(bad)?;
    let (k, n): (u32, u32) = (
        k.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if k == 0 || n == 0 {
        return Err(bad());
    }
    Ok((k, n))
}

fn at_least_one_u32(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

pub fn plan(a: PlanArgs, v: Verbosity, out: &mut dyn Write) -> Result<(), Fail> {
    let profile = load_profile(&a.profile)?;
    let rejected = |e: hetero_partition::ProfileError| {
        Fail::Run(format!("profile {} rejected: {e}", a.profile.display()))
    };
    profile.check().map_err(rejected)?;
    let views = crate::auto::views(&profile);
    if let Some((k, n)) = a.weight {
        let m = a
            .seq
            .ok_or_else(|| Fail::Usage("plan --weight K,N needs --seq M".into()))?;
        let checked = views.per_op.check().map_err(rejected)?;
        let phase = phase_of_rows(m);
        let plan = hetero_partition::plan_op_in(&checked, phase, k, n, m)
            .map_err(|e| Fail::Run(format!("no plan for k={k} n={n} m={m}: {e}")))?;
        writeln!(out, "{phase}: {}", planning::describe(&plan))?;
        if let Some(w) = &plan.extrapolation {
            writeln!(out, "warning: {w}")?;
        }
        return Ok(());
    }
    let path = a.model.ok_or_else(|| {
        Fail::Usage("plan without --weight needs --model PATH or HETERO_MODEL".into())
    })?;
    let model = load_model(&path, &a.load)?;
    let max_batch = super::run::MAX_BATCH as u32;
    let ms: Vec<u32> = match a.seq {
        Some(m) => vec![m],
        None => vec![1, max_batch],
    };
    let max_m = ms.iter().copied().max().unwrap_or(1).max(max_batch);
    let workload = Workload {
        prompt: a.seq.map_or(Workload::default().prompt, |m| m as usize),
        ..Workload::default()
    };
    let d = crate::auto::decide(&profile, &model, max_m, workload).map_err(Fail::run)?;
    writeln!(out, "{}", d.summary)?;
    if !v.detailed() {
        return Ok(());
    }
    let names = planning::model_shapes(&model.config);
    for m in ms {
        let phase = d.plans.phase_of(m);
        writeln!(out, "m = {m} ({phase}), per-op plans:")?;
        for &(name, k, n) in &names {
            match d.plans.get(k, n, m) {
                Some(p) => writeln!(out, "  {name:<22} {}", planning::describe(p))?,
                None => writeln!(out, "  {name:<22} not planned")?,
            }
        }
        if let Some((r, _)) = &d.resident {
            match r.step_us(m, true) {
                Ok(us) => writeln!(
                    out,
                    "  gpu resident: a step of {m} rows (logits of the last) predicted {us:.1} us"
                )?,
                Err(e) => writeln!(out, "  gpu resident: no prediction at {m} rows ({e})")?,
            }
        }
    }
    let far: Vec<String> = d
        .plans
        .extrapolated()
        .map(|p| p.extrapolation.map_or(String::new(), |w| w.to_string()))
        .collect();
    if let Some(first) = far.first() {
        writeln!(
            out,
            "warning: {} plans lean on extrapolated latencies, e.g. {first}",
            far.len()
        )?;
    }
    Ok(())
}
