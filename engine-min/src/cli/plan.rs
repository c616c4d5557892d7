//! `engine-min profile` (measure every processor, write a profile) and `engine-min plan`
//! (print the planner's per-op plan for a profile).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::{load_model, load_profile, Fail, LoadArgs, MachineArgs};
use crate::planning;

#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// GGUF model file whose matmul shapes are measured.
    #[arg(long, env = "HETERO_MODEL", value_name = "PATH")]
    model: PathBuf,
    /// Where to write the profile (JSON); checked before anything is measured.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Repetitions per point (the best is kept).
    #[arg(long, default_value_t = 3, value_parser = super::at_least_one)]
    reps: usize,
    #[command(flatten)]
    machine: MachineArgs,
    #[command(flatten)]
    load: LoadArgs,
}

pub fn profile(a: ProfileArgs, out: &mut dyn Write) -> Result<(), Fail> {
    // The output path first: a bad one must not cost the whole measurement.
    let mut file = std::fs::File::create(&a.out)
        .map_err(|e| Fail::Run(format!("cannot write {}: {e}", a.out.display())))?;
    let model = load_model(&a.model, &a.load)?;
    let threads = a.machine.threads();
    let reps = a.reps;
    let t0 = Instant::now();
    let progress = |i: usize, n: usize, line: &str| eprintln!("[{i:>2}/{n}] {line}");
    eprintln!("profiling the CPU backend ({threads} threads) on the model's matmul shapes");
    let cpu = planning::measure_cpu(&model, threads, reps, progress)
        .map_err(|e| Fail::Run(format!("profiling the CPU failed: {e}")))?;
    let mut backends = vec![cpu];
    match crate::backend::gpu::GpuBackend::open() {
        Ok(mut gpu) => {
            eprintln!(
                "profiling the GPU backend ({})",
                crate::backend::Backend::name(&gpu)
            );
            let g = planning::measure_gpu(&model, &mut gpu, reps, progress)
                .map_err(|e| Fail::Run(format!("profiling the GPU failed: {e}")))?;
            backends.push(g);
        }
        Err(e) => eprintln!("gpu: not measured (OpenCL is not usable: {e})"),
    }
    let mut notes = vec![
        "measured by engine-min profile; CPU points: best of --reps at m = 1..128; GPU: \
         one GEMV per row through staging buffers"
            .to_string(),
    ];
    if std::env::var_os("QNN_HTP_LIB").is_some() {
        eprintln!(
            "profiling the NPU backend (QNN HTP from $QNN_HTP_LIB; on x86 this is the HTP \
             SIMULATOR: its times are simulator times, not an NPU's)"
        );
        let t1 = Instant::now();
        match planning::measure_npu(&model, reps, |i, n, line| {
            eprintln!("[{i:>2}/{n}] {line} (simulated)")
        }) {
            Ok(n) => {
                eprintln!(
                    "npu: {} graphs prepared, {:.1} ms each on average (build + finalize); \
                     measured in {:.1} s",
                    planning::NPU_M.len() * 4,
                    n.graph_prepare_us.unwrap_or(0.0) / 1e3,
                    t1.elapsed().as_secs_f64()
                );
                notes.push(
                    "npu: QNN HTP x86 simulator; its latencies are simulator times, not an \
                     NPU's; standard lengths 32 and 128; the LM head is not measured (no graph)"
                        .into(),
                );
                backends.push(n);
            }
            Err(e) => eprintln!("npu: not measured ({e})"),
        }
    } else {
        eprintln!("npu: not measured (QNN_HTP_LIB is not set)");
    }
    let mut profile = planning::profile("this machine (engine-min profile)", backends);
    profile.notes = notes;
    profile
        .check()
        .map_err(|e| Fail::Run(format!("measured profile is invalid: {e}")))?;
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

pub fn plan(a: PlanArgs, out: &mut dyn Write) -> Result<(), Fail> {
    let profile = load_profile(&a.profile)?;
    let checked = profile
        .check()
        .map_err(|e| Fail::Run(format!("profile {} rejected: {e}", a.profile.display())))?;
    if let Some((k, n)) = a.weight {
        let m = a
            .seq
            .ok_or_else(|| Fail::Usage("plan --weight K,N needs --seq M".into()))?;
        let plan = hetero_partition::plan_op(&checked, k, n, m)
            .map_err(|e| Fail::Run(format!("no plan for k={k} n={n} m={m}: {e}")))?;
        writeln!(out, "{}", planning::describe(&plan))?;
        return Ok(());
    }
    let path = a.model.ok_or_else(|| {
        Fail::Usage("plan without --weight needs --model PATH or HETERO_MODEL".into())
    })?;
    let model = load_model(&path, &a.load)?;
    let ms: Vec<u32> = match a.seq {
        Some(m) => vec![m],
        None => vec![1, 128],
    };
    for m in ms {
        writeln!(out, "m = {m}:")?;
        for (name, plan) in planning::plan_model_ops(&checked, &model.config, m) {
            match plan {
                Ok(p) => writeln!(out, "  {name:<22} {}", planning::describe(&p))?,
                Err(e) => writeln!(out, "  {name:<22} no plan: {e}")?,
            }
        }
    }
    Ok(())
}
