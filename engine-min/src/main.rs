//! `engine-min`: profile, plan and run a GGUF model across CPU, GPU and NPU.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine_min::backend::{CpuBackend, CpuKernel};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use engine_min::sample::{Sampler, SamplerOptions};
use hetero_sme::ThreadPool as Pool;

const USAGE: &str = "usage:
  engine-min run [--model PATH] --prompt TEXT [--max-tokens N] [--chat] [--temperature T]
                 [--top-p P] [--seed S] [--threads N] [--ctx N] [--plan auto|cpu|gpu|cpu-gpu:R|npu|npu-gpu|npu-w:R|npu-gpu-w:R] [--profile FILE]
                 [--npu-seq S|S1,S2 (default 32)]
                 [--kernel portable|avx512|sme-gemv|sme-int8|sme (default: sme-int8 with VNNI, else sme-gemv)]
  engine-min profile [--model PATH] --out FILE [--threads N] [--reps R]
  engine-min plan --profile FILE [--weight K,N --seq M] [--model PATH] [--seq M]
  engine-min bench [--model PATH] [--pp N (128)] [--tg N (64)] [--reps R (5)] [--threads N]
                   [--plan cpu|gpu] [--kernel K]   (llama-bench's pp/tg, medians)
  engine-min agents gen-trace|run ...   (speculative decoding for several agents; `agents --help`)
The model defaults to $HETERO_MODEL.";

/// A CLI failure: message and exit code.
struct Fail(String, u8);

fn usage(msg: impl Into<String>) -> Fail {
    Fail(format!("{}\n{USAGE}", msg.into()), 2)
}

struct Args {
    rest: Vec<String>,
}

impl Args {
    fn flag(&mut self, name: &str) -> bool {
        match self.rest.iter().position(|a| a == name) {
            Some(i) => {
                self.rest.remove(i);
                true
            }
            None => false,
        }
    }
    fn value(&mut self, name: &str) -> Result<Option<String>, Fail> {
        match self.rest.iter().position(|a| a == name) {
            Some(i) if i + 1 < self.rest.len() => {
                let v = self.rest.remove(i + 1);
                self.rest.remove(i);
                Ok(Some(v))
            }
            Some(_) => Err(usage(format!("{name} needs a value"))),
            None => Ok(None),
        }
    }
    fn parsed<T: std::str::FromStr>(&mut self, name: &str, default: T) -> Result<T, Fail> {
        match self.value(name)? {
            Some(v) => v
                .parse()
                .map_err(|_| usage(format!("bad value `{v}` for {name}"))),
            None => Ok(default),
        }
    }
    fn finish(self) -> Result<(), Fail> {
        match self.rest.first() {
            Some(a) => Err(usage(format!("unexpected argument `{a}`"))),
            None => Ok(()),
        }
    }
}

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "--help" || argv[0] == "-h" {
        println!("{USAGE}");
        return if argv.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let cmd = argv.remove(0);
    let args = Args { rest: argv };
    let r = match cmd.as_str() {
        "run" => run(args),
        "agents" => engine_min::agents::cli(args.rest).map_err(|m| Fail(m, 1)),
        "profile" => profile_cmd(args),
        "plan" => plan_cmd(args),
        "bench" => bench_cmd(args),
        other => Err(usage(format!("unknown command `{other}`"))),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(msg, code)) => {
            eprintln!("engine-min: {msg}");
            ExitCode::from(code)
        }
    }
}

fn profile_cmd(mut args: Args) -> Result<(), Fail> {
    let path = model_path(&mut args)?;
    let out = args
        .value("--out")?
        .ok_or_else(|| usage("profile: --out FILE is required"))?;
    let default_threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads: usize = args.parsed("--threads", default_threads)?;
    let reps: usize = args.parsed("--reps", 3)?;
    args.finish()?;
    let model = Model::load(&path).map_err(|e| Fail(e.to_string(), 1))?;
    let t0 = Instant::now();
    eprintln!("profiling the CPU backend ({threads} threads) on the model's matmul shapes");
    let cpu = engine_min::planning::measure_cpu(&model, threads.max(1), reps, |i, n, line| {
        eprintln!("[{i:>2}/{n}] {line}")
    })
    .map_err(|e| Fail(format!("profiling the CPU failed: {e}"), 1))?;
    let mut backends = vec![cpu];
    match engine_min::gpu::GpuBackend::open() {
        Ok(mut gpu) => {
            eprintln!(
                "profiling the GPU backend ({})",
                engine_min::backend::Backend::name(&gpu)
            );
            let g = engine_min::planning::measure_gpu(&model, &mut gpu, reps, |i, n, line| {
                eprintln!("[{i:>2}/{n}] {line}")
            })
            .map_err(|e| Fail(format!("profiling the GPU failed: {e}"), 1))?;
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
        match engine_min::planning::measure_npu(&model, threads.max(1), reps, |i, n, line| {
            eprintln!("[{i:>2}/{n}] {line} (simulated)")
        }) {
            Ok(n) => {
                eprintln!(
                    "npu: {} graphs prepared, {:.1} ms each on average (build + finalize); \
                     measured in {:.1} s",
                    engine_min::planning::NPU_M.len() * 4,
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
    let profile = engine_min::planning::profile("this machine (engine-min profile)", backends);
    profile
        .check()
        .map_err(|e| Fail(format!("measured profile is invalid: {e:?}"), 1))?;
    // The profile plus free-form notes (the planner ignores unknown fields).
    let mut value = serde_json::to_value(&profile)
        .map_err(|e| Fail(format!("cannot serialize the profile: {e}"), 1))?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("notes".into(), serde_json::Value::from(notes));
    }
    let json = serde_json::to_string_pretty(&value)
        .map_err(|e| Fail(format!("cannot serialize the profile: {e}"), 1))?;
    std::fs::write(&out, json + "\n").map_err(|e| Fail(format!("cannot write {out}: {e}"), 1))?;
    eprintln!("wrote {out} in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

fn plan_cmd(mut args: Args) -> Result<(), Fail> {
    let file = args.value("--profile")?.ok_or_else(|| {
        usage("plan: --profile FILE is required (write one with `engine-min profile`)")
    })?;
    let weight = args.value("--weight")?;
    let seq: Option<u32> = match args.value("--seq")? {
        Some(v) => Some(v.parse().map_err(|_| usage(format!("bad --seq `{v}`")))?),
        None => None,
    };
    let model_arg = args.value("--model")?;
    args.finish()?;
    let profile = load_profile(&file)?;
    let checked = profile
        .check()
        .map_err(|e| Fail(format!("profile {file} rejected: {e:?}"), 1))?;
    if let Some(w) = weight {
        let (k, n) = w
            .split_once(',')
            .and_then(|(k, n)| Some((k.trim().parse::<u32>().ok()?, n.trim().parse::<u32>().ok()?)))
            .ok_or_else(|| usage(format!("bad --weight `{w}` (expected K,N)")))?;
        let m = seq.ok_or_else(|| usage("plan --weight K,N needs --seq M"))?;
        let plan = hetero_partition::plan_op(&checked, k, n, m)
            .map_err(|e| Fail(format!("no plan for k={k} n={n} m={m}: {e:?}"), 1))?;
        println!("{}", engine_min::planning::describe(&plan));
        return Ok(());
    }
    // Per-op plan for the model's shapes.
    let path = match model_arg {
        Some(p) => p,
        None => std::env::var("HETERO_MODEL")
            .map_err(|_| usage("plan without --weight needs --model PATH or HETERO_MODEL"))?,
    };
    let model = Model::load(&path).map_err(|e| Fail(e.to_string(), 1))?;
    let ms: Vec<u32> = match seq {
        Some(m) => vec![m],
        None => vec![1, 128],
    };
    for m in ms {
        println!("m = {m}:");
        for (name, plan) in engine_min::planning::plan_model_ops(&checked, &model.config, m) {
            match plan {
                Ok(p) => println!("  {name:<22} {}", engine_min::planning::describe(&p)),
                Err(e) => println!("  {name:<22} no plan: {e:?}"),
            }
        }
    }
    Ok(())
}

/// Reads a profile file (JSON `hetero_partition::Profile`).
fn load_profile(file: &str) -> Result<hetero_partition::Profile, Fail> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Fail(format!("cannot read profile {file}: {e}"), 1))?;
    serde_json::from_str(&text)
        .map_err(|e| Fail(format!("profile {file} is not a valid profile: {e}"), 1))
}

fn model_path(args: &mut Args) -> Result<String, Fail> {
    match args.value("--model")? {
        Some(p) => Ok(p),
        None => std::env::var("HETERO_MODEL")
            .map_err(|_| usage("no --model given and HETERO_MODEL is not set")),
    }
}

fn run(mut args: Args) -> Result<(), Fail> {
    let path = model_path(&mut args)?;
    let prompt = args
        .value("--prompt")?
        .ok_or_else(|| usage("--prompt is required"))?;
    let max_tokens: usize = args.parsed("--max-tokens", 64)?;
    let chat = args.flag("--chat");
    let temperature: f32 = args.parsed("--temperature", 0.0)?;
    let top_p: f32 = args.parsed("--top-p", 1.0)?;
    let seed: u64 = args.parsed("--seed", 0x5eed)?;
    let default_threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads: usize = args.parsed("--threads", default_threads)?;
    let ctx: usize = args.parsed("--ctx", 2048)?;
    let profile_file = args.value("--profile")?;
    // With a profile the planner's plan is the default; forced plans stay available.
    let plan = args.value("--plan")?.unwrap_or_else(|| {
        if profile_file.is_some() {
            "auto".into()
        } else {
            "cpu".into()
        }
    });
    // Standard NPU graph lengths: one (`32`) or several (`32,128`).
    let npu_lens: Vec<usize> = match args.value("--npu-seq")? {
        None => vec![32],
        Some(v) => {
            let mut l: Vec<usize> = v
                .split(',')
                .map(|x| x.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| usage(format!("bad --npu-seq `{v}` (S or S1,S2,..)")))?;
            l.sort_unstable();
            l.dedup();
            if l.is_empty() || l.len() > 4 {
                return Err(usage("--npu-seq takes 1 to 4 lengths"));
            }
            l
        }
    };
    let npu_seq = npu_lens[0];
    let mut npu_extra = [0usize; 3];
    for (d, s) in npu_extra.iter_mut().zip(&npu_lens[1..]) {
        *d = *s;
    }
    let kernel = kernel_arg(&mut args)?;
    args.finish()?;
    let split_share: Option<f64> = match plan.strip_prefix("cpu-gpu:") {
        Some(r) => Some(
            r.parse()
                .ok()
                .filter(|v: &f64| (0.0..=1.0).contains(v))
                .ok_or_else(|| usage(format!("bad CPU share `{r}` in --plan (0..=1)")))?,
        ),
        None => None,
    };
    // `npu-w:R` / `npu-gpu-w:R`: weight-centric, the NPU takes share R of every matmul's columns.
    let (npu_base, npu_share) = match plan.split_once("-w:") {
        Some((base @ ("npu" | "npu-gpu"), r)) => (
            base,
            Some(
                r.parse()
                    .ok()
                    .filter(|v: &f64| *v > 0.0 && *v <= 1.0)
                    .ok_or_else(|| usage(format!("bad NPU share `{r}` in --plan (0 < R <= 1)")))?,
            ),
        ),
        _ => (plan.as_str(), None),
    };
    let npu_plan = npu_base == "npu" || npu_base == "npu-gpu";
    if plan != "cpu" && plan != "gpu" && plan != "auto" && !npu_plan && split_share.is_none() {
        return Err(usage(format!(
            "unknown plan `{plan}`: `auto` (the planner's per-op plan for --profile FILE), \
             `cpu`, `gpu` (all matmuls on the OpenCL device), \
             `cpu-gpu:R` (CPU takes share R of every matmul's columns), `npu` (rows in chunks \
             of --npu-seq on the NPU, the rest and decode on the CPU), `npu-gpu` (the same \
             with the GPU as partner) and `npu-w:R` / `npu-gpu-w:R` (weight-centric: the NPU \
             takes share R of every matmul's columns for the rows its graphs cover, the \
             partner the other columns at the same time) run in this build"
        )));
    }
    if plan == "auto" && profile_file.is_none() {
        return Err(usage(
            "--plan auto needs --profile FILE (write one with `engine-min profile`)",
        ));
    }
    if npu_seq == 0 {
        return Err(usage("--npu-seq must be at least 1"));
    }
    if threads == 0 {
        return Err(usage("--threads must be at least 1"));
    }

    let t_load = Instant::now();
    let model = Arc::new(Model::load(&path).map_err(|e| Fail(e.to_string(), 1))?);
    let pool = Arc::new(Pool::new(threads).map_err(|e| Fail(e.to_string(), 1))?);
    let mut npu_stats = None;
    let mut split_stats = None;
    let mut acts = None;
    let mut auto_info = None;
    let backend: Box<dyn engine_min::backend::Backend> = if plan == "auto" {
        let file = profile_file.clone().unwrap_or_default();
        let mut prof = load_profile(&file)?;
        let listed = |name: &str| prof.backends.iter().any(|b| b.backend == name);
        let mut notes = Vec::new();
        let gpu = if listed("gpu") {
            match engine_min::gpu::GpuBackend::open() {
                Ok(g) => Some(g),
                Err(e) => {
                    notes.push(format!(
                        "the profile has a GPU but OpenCL is not usable ({e}): planned without it"
                    ));
                    None
                }
            }
        } else {
            None
        };
        let npu = if listed("npu") {
            // The profile's standard lengths (the graphs the planner assumes), else --npu-seq.
            let mut lens: Vec<usize> = prof
                .backends
                .iter()
                .filter(|b| b.backend == "npu")
                .flat_map(|b| b.standard_m.iter().map(|&m| m as usize))
                .filter(|&m| m > 0)
                .collect();
            lens.sort_unstable();
            lens.dedup();
            lens.truncate(4);
            let mut extra = [0usize; 3];
            for (d, s) in extra.iter_mut().zip(lens.iter().skip(1)) {
                *d = *s;
            }
            let opts = engine_min::npu::NpuOptions {
                seq: lens.first().copied().unwrap_or(npu_seq),
                extra_seqs: if lens.is_empty() { npu_extra } else { extra },
                ..Default::default()
            };
            let partner = Box::new(CpuBackend::new(Arc::clone(&pool), kernel));
            match engine_min::npu::NpuBackend::open(partner, opts) {
                Ok(n) => {
                    npu_stats = Some(n.stats());
                    Some(n)
                }
                Err(e) => {
                    notes.push(format!(
                        "the profile has an NPU but it is not usable ({e}): planned without it"
                    ));
                    None
                }
            }
        } else {
            None
        };
        let (has_gpu, has_npu) = (gpu.is_some(), npu.is_some());
        prof.backends.retain(|b| {
            b.backend == "cpu" || (b.backend == "gpu" && has_gpu) || (b.backend == "npu" && has_npu)
        });
        let checked = prof
            .check()
            .map_err(|e| Fail(format!("profile {file} rejected: {e:?}"), 1))?;
        let shapes: Vec<(usize, usize)> = engine_min::planning::model_shapes(&model.config)
            .into_iter()
            .map(|(_, k, n)| (k as usize, n as usize))
            .collect();
        let a = if has_gpu {
            Some(
                engine_min::act::UmaActs::for_model(&model.config, 128)
                    .map_err(|e| Fail(format!("uma pool: {e}"), 1))?,
            )
        } else {
            None
        };
        let pb = engine_min::exec::PlanBackend::new(
            checked,
            128,
            Arc::clone(&pool),
            CpuBackend::new(Arc::clone(&pool), kernel),
            gpu,
            npu,
            a.clone(),
            &shapes,
        )
        .map_err(|e| Fail(format!("plan auto: {e}"), 1))?;
        acts = a;
        auto_info = Some((file, pb.table(), pb.times(), notes, pb.profile().clone()));
        Box::new(pb)
    } else if npu_plan {
        let partner: Box<dyn engine_min::backend::Backend> = if npu_base == "npu-gpu" {
            Box::new(
                engine_min::gpu::GpuBackend::open()
                    .map_err(|e| Fail(format!("plan {plan}: OpenCL is not usable: {e}"), 1))?,
            )
        } else {
            Box::new(CpuBackend::new(Arc::clone(&pool), kernel))
        };
        let opts = engine_min::npu::NpuOptions {
            seq: npu_seq,
            extra_seqs: npu_extra,
            weight_share_permille: npu_share.map_or(0, |r: f64| (r * 1000.0).round() as u16),
            ..Default::default()
        };
        let npu = engine_min::npu::NpuBackend::open(partner, opts)
            .map_err(|e| Fail(format!("plan {plan}: {e}"), 1))?;
        npu_stats = Some(npu.stats());
        Box::new(npu)
    } else if let Some(r) = split_share {
        let gpu = engine_min::gpu::GpuBackend::open()
            .map_err(|e| Fail(format!("plan {plan}: OpenCL is not usable: {e}"), 1))?;
        let cpu = CpuBackend::new(Arc::clone(&pool), kernel);
        // Activations in uma slots, wrapped for the GPU: one-token matmuls write one output
        // in place from both sides (see engine_min::split).
        let a = engine_min::act::UmaActs::for_model(&model.config, 128)
            .map_err(|e| Fail(format!("uma pool: {e}"), 1))?;
        let split = engine_min::split::SplitBackend::with_acts(
            cpu,
            gpu,
            r,
            Some(Arc::clone(&a)),
            Some(Arc::clone(&pool)),
        )
        .map_err(|e| Fail(e.to_string(), 1))?;
        split_stats = Some(split.stats());
        acts = Some(a);
        Box::new(split)
    } else if plan == "gpu" {
        Box::new(
            engine_min::gpu::GpuBackend::open()
                .map_err(|e| Fail(format!("plan gpu: OpenCL is not usable: {e}"), 1))?,
        )
    } else {
        Box::new(CpuBackend::new(Arc::clone(&pool), kernel))
    };
    let mut engine = Engine::with_acts(
        Arc::clone(&model),
        backend,
        pool,
        EngineOptions {
            context: ctx,
            max_batch: 128,
        },
        acts,
    )
    .map_err(|e| Fail(e.to_string(), 1))?;
    let load = t_load.elapsed();
    let tok = &model.tokenizer;
    let text = if chat {
        tok.chat_prompt(&prompt)
            .ok_or_else(|| Fail("--chat: the model has no ChatML chat template".into(), 1))?
    } else {
        prompt
    };
    let ids = tok.encode_prompt(&text);
    if ids.is_empty() {
        return Err(Fail("the prompt encodes to no tokens".into(), 1));
    }
    if ids.len() + 1 > engine.context() {
        return Err(Fail(
            format!(
                "the prompt has {} tokens but the context holds {} (use --ctx, up to the \
                 model's {})",
                ids.len(),
                engine.context(),
                model.config.context
            ),
            1,
        ));
    }
    if let Some((file, table, _, notes, checked)) = &auto_info {
        let shapes: Vec<(&str, usize, usize)> = engine_min::planning::model_shapes(&model.config)
            .into_iter()
            .map(|(name, k, n)| (name, k as usize, n as usize))
            .collect();
        println!("plan auto from {file} (non-matmul ops run on the CPU pool):");
        for note in notes {
            println!("  note: {note}");
        }
        let pm = ids.len().min(128);
        for (phase, m) in [("prefill", pm), ("decode", 1)] {
            println!("  {phase} (m = {m}):");
            for line in table.describe(&shapes, m) {
                println!("    {line}");
            }
            let summary =
                engine_min::exec::model_plan_summary(checked, &model.config, m, phase == "decode");
            println!("    {summary}");
        }
    }
    let vocab = model.config.vocab;
    let mut logits = vec![0f32; vocab];
    let mut sampler = Sampler::new(
        vocab,
        SamplerOptions {
            temperature,
            top_p,
            seed,
        },
    );
    let fail = |e: engine_min::engine::EngineError| Fail(e.to_string(), 1);
    let npu0 = npu_stats.as_ref().map(|s| s.npu_time());
    let (t0, c0) = (Instant::now(), cpu_time());
    engine.forward(&ids, &mut logits).map_err(fail)?;
    let prefill_npu = npu_stats
        .as_ref()
        .zip(npu0)
        .map(|(s, t)| s.npu_time().saturating_sub(t));
    let mut next = sampler.sample(&logits);
    let ttft = t0.elapsed();
    let prefill_cpu = cpu_time().saturating_sub(c0);
    let prefill_timings = engine.timings().clone();
    engine.reset_timings();

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut pending = Vec::new();
    let mut generated = 0usize;
    let mut stop = String::from("max tokens");
    let (t_dec, c_dec) = (Instant::now(), cpu_time());
    loop {
        if tok.eos == Some(next) || tok.is_control(next) {
            stop = "end of sequence".into();
            break;
        }
        generated += 1;
        tok.decode_token(next, false, &mut pending);
        flush_utf8(&mut out, &mut pending, false);
        if generated >= max_tokens {
            break;
        }
        if engine.pos() + 1 > engine.context() {
            stop = "context full".into();
            break;
        }
        engine.forward(&[next], &mut logits).map_err(fail)?;
        next = sampler.sample(&logits);
    }
    flush_utf8(&mut out, &mut pending, true);
    let decode = t_dec.elapsed();
    let decode_cpu = cpu_time().saturating_sub(c_dec);
    let decode_timings = engine.timings().clone();
    let _ = writeln!(out);
    let _ = writeln!(out, "---");
    let _ = writeln!(
        out,
        "model: {} layers, width {}, vocab {}; load {:.0} ms; plan {plan}; {threads} thread(s), cpu kernel {kernel:?}",
        model.config.n_layer,
        model.config.d_model,
        vocab,
        ms(load)
    );
    let _ = writeln!(
        out,
        "prompt: {} tokens; generated: {generated} tokens (stop: {stop})",
        ids.len()
    );
    let _ = writeln!(out, "time to first token: {:.1} ms", ms(ttft));
    // CPU seconds next to wall seconds: on a shared machine wall time includes waiting for
    // a core; tokens per CPU-second says what the code costs.
    let _ = writeln!(
        out,
        "prefill: {:.1} tok/s (wall); {:.1} tok per CPU-second",
        ids.len() as f64 / ttft.as_secs_f64(),
        ids.len() as f64 / prefill_cpu.as_secs_f64().max(1e-9)
    );
    // Decode steps: one forward per generated token after the first.
    if generated > 1 {
        let _ = writeln!(
            out,
            "decode: {:.1} tok/s (wall, {} steps); {:.1} tok per CPU-second",
            (generated - 1) as f64 / decode.as_secs_f64(),
            generated - 1,
            (generated - 1) as f64 / decode_cpu.as_secs_f64().max(1e-9)
        );
    } else {
        let _ = writeln!(out, "decode: n/a (no decode step)");
    }
    for (phase, t) in [("prefill", &prefill_timings), ("decode", &decode_timings)] {
        let total: Duration = t.matmul.iter().map(|m| m.1).sum::<Duration>() + t.host;
        if total.is_zero() {
            continue;
        }
        let mut line = format!("{phase} time share:");
        for (name, d) in &t.matmul {
            line += &format!(" {name} matmul {:.1}%,", pct(*d, total));
        }
        line += &format!(" cpu host ops {:.1}%", pct(t.host, total));
        let _ = writeln!(out, "{line}");
    }
    if let Some((_, _, times, _, _)) = &auto_info {
        let t = times.get();
        let total = t.iter().sum::<u64>().max(1) as f64;
        let mut line = String::from("auto: matmul time by executed plan:");
        for (name, v) in engine_min::exec::EXEC_NAMES.iter().zip(t) {
            line += &format!(" {name} {:.1}%,", v as f64 * 100.0 / total);
        }
        line.pop();
        let _ = writeln!(out, "{line}");
    }
    if let Some(s) = &split_stats {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = writeln!(
            out,
            "split: {} matmuls zero-copy (one output slot, GPU flag polled), {} staged; host \
             waited {:.1} ms for GPU flags after its own columns",
            s.zero_copy.load(Relaxed),
            s.staged.load(Relaxed),
            s.gpu_wait_ns.load(Relaxed) as f64 / 1e6
        );
    }
    if let (Some(s), Some(npu)) = (&npu_stats, prefill_npu) {
        // Simulator time: the x86 HTP simulator, not the speed of an NPU.
        let mm: Duration = prefill_timings.matmul.iter().map(|m| m.1).sum();
        let _ = writeln!(
            out,
            "npu: {} graphs (one per weight and standard length) prepared in {:.0} ms (build + finalize); NPU share \
             of prefill matmul time {:.1}% (simulated)",
            s.graphs(),
            ms(s.prepare_time()),
            pct(npu, mm.max(Duration::from_nanos(1)))
        );
    }
    Ok(())
}

/// `bench`: llama-bench's pp/tg measurement on the CPU (or all-GPU) plan, medians of `--reps`.
fn bench_cmd(mut args: Args) -> Result<(), Fail> {
    let path = model_path(&mut args)?;
    let pp: usize = args.parsed("--pp", 128)?;
    let tg: usize = args.parsed("--tg", 64)?;
    let reps: usize = args.parsed("--reps", 5)?;
    let default_threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads: usize = args.parsed("--threads", default_threads)?;
    let plan = args.value("--plan")?.unwrap_or_else(|| "cpu".into());
    let kernel = kernel_arg(&mut args)?;
    args.finish()?;
    if threads == 0 || reps == 0 {
        return Err(usage("--threads and --reps must be at least 1"));
    }
    let model = Arc::new(Model::load(&path).map_err(|e| Fail(e.to_string(), 1))?);
    let pool = Arc::new(Pool::new(threads).map_err(|e| Fail(e.to_string(), 1))?);
    let backend: Box<dyn engine_min::backend::Backend> = match plan.as_str() {
        "cpu" => Box::new(CpuBackend::new(Arc::clone(&pool), kernel)),
        "gpu" => Box::new(
            engine_min::gpu::GpuBackend::open()
                .map_err(|e| Fail(format!("plan gpu: OpenCL is not usable: {e}"), 1))?,
        ),
        other => return Err(usage(format!("bench runs plan cpu or gpu, not `{other}`"))),
    };
    let ctx = (pp.max(tg) + 1).min(model.config.context);
    let mut engine = Engine::new(
        Arc::clone(&model),
        backend,
        pool,
        EngineOptions {
            context: ctx,
            max_batch: pp.max(1),
        },
    )
    .map_err(|e| Fail(e.to_string(), 1))?;
    let r = engine_min::bench::pp_tg(&mut engine, pp, tg, reps, 0x5eed)
        .map_err(|e| Fail(e.to_string(), 1))?;
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let what = match plan.as_str() {
        "cpu" => format!("cpu kernel {}", kernel.name()),
        _ => "gpu".into(),
    };
    println!("engine-min bench: {what}, {threads} thread(s), {reps} reps");
    if pp > 0 {
        let med = engine_min::bench::median(&r.pp);
        println!("pp{pp}: {med:.1} tok/s median ({})", show(&r.pp));
    }
    if tg > 0 {
        let med = engine_min::bench::median(&r.tg);
        println!("tg{tg}: {med:.1} tok/s median ({})", show(&r.tg));
    }
    Ok(())
}

/// CPU time consumed by this process so far (all threads), from the OS.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the valid pointer we pass; the
    // clock id is a constant the platform defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `--kernel NAME` (`CpuKernel::name`), or the default a single sequence runs
/// (`CpuKernel::default_for_run`); a name this CPU cannot run is a usage error listing those it
/// can.
fn kernel_arg(args: &mut Args) -> Result<CpuKernel, Fail> {
    match args.value("--kernel")? {
        None => Ok(CpuKernel::default_for_run()),
        Some(name) => CpuKernel::from_name(&name).ok_or_else(|| {
            let names: Vec<&str> = CpuKernel::all().into_iter().map(CpuKernel::name).collect();
            usage(format!(
                "--kernel `{name}` is not available on this CPU (available: {})",
                names.join(", ")
            ))
        }),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(d: Duration, total: Duration) -> f64 {
    100.0 * d.as_secs_f64() / total.as_secs_f64()
}

/// Writes the valid UTF-8 prefix of `pending` (all of it, lossily, when `all`).
fn flush_utf8(out: &mut impl Write, pending: &mut Vec<u8>, all: bool) {
    let n = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(e) if e.error_len().is_some() || all => pending.len(),
        Err(e) => e.valid_up_to(),
    };
    let _ = out.write_all(String::from_utf8_lossy(&pending[..n]).as_bytes());
    let _ = out.flush();
    pending.drain(..n);
}
