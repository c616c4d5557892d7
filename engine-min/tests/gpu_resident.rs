//! hetero-opencl-kernels' device-resident decoder on the real model (needs `HETERO_MODEL` and
//! OpenCL; backend names `model`, `opencl`; PoCL in CI's model stage): logits against the
//! engine's f32 reference forward for prefill lengths 1, 17, 128 and 200 (two chunks of 128)
//! and 64 decode steps after the 200 (decode blocks; the layered decode path for 16 steps
//! after a prefill of 17), and greedy text of four prompts against the engine's CPU plan;
//! every fixture of `HETERO_FIXTURES` (the Q4_K_M-like, Q5_K, Q6_K, Q5_0 and Q5_1 mixes:
//! Q5_0/Q5_1/Q8_0 matrices beside Q4_K/Q5_K/Q6_K `ffn_down`, Q/K/V of two types in the Q4_K_M
//! file) against the reference forward, both decode paths where the file allows decode blocks
//! (the persistent step refused on every fixture: it has no Q5/K-quant GEMVs); and, on the tiny
//! synthetic model (OpenCL only), the resident path's non-finite guard in
//! `Engine::forward_argmax`. It lives here, not in opencl-kernels, because the model loader and
//! the reference forward are the engine's; the decoder itself knows nothing of engine-min.

use std::sync::Arc;

use engine_min::backend::resident;
use engine_min::backend::CpuKernel;
use engine_min::compose::{ComposeOptions, GpuPath, PlanChoice};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use engine_min::reference;
use hetero_opencl_kernels::decoder::{DecodePath, Decoder, DecoderOptions, Readout};
use hetero_opencl_kernels::Device;
use hetero_sme::ThreadPool as Pool;

mod common;
mod synth;

use common::{max_diff, tv};

// The engine's f32 tolerances (tests/forward.rs): the decoder's kernels use exactly the
// reference's dequantized weight values and differ only by f32 accumulation and summation
// order over 30 layers; any structural mistake moves logits by whole units.
const TOL_F32: f32 = 1e-3;
const TOL_TV: f64 = 1e-4;

fn load() -> Option<Arc<Model>> {
    let path = hetero_tests::require("model", common::model_path())?;
    Some(Arc::new(Model::load(&path).expect("model loads")))
}

fn decoder(model: &Model, dev: &Arc<Device>, max_context: usize, decode: DecodePath) -> Decoder {
    try_decoder(model, dev, max_context, decode).expect("decoder")
}

fn try_decoder(
    model: &Model,
    dev: &Arc<Device>,
    max_context: usize,
    decode: DecodePath,
) -> Result<Decoder, hetero_opencl_kernels::Error> {
    // An f32 KV cache: the decoder's paths against the reference at the f32 tolerances (the
    // default f16 cache's tolerance is forward.rs's TOL_KV16).
    let opts = DecoderOptions {
        decode,
        kv: hetero_opencl_kernels::KvType::F32,
        ..DecoderOptions::default()
    };
    resident::build_with(dev, model, max_context, 128, opts)
}

/// One OpenCL device for the tests of this binary: PoCL's first device enumeration is not safe
/// from several threads at once (two tests opening devices together crashed it).
fn device() -> Option<Arc<Device>> {
    static DEV: std::sync::OnceLock<Result<Arc<Device>, String>> = std::sync::OnceLock::new();
    // Through the engine's opening (one at a time in a process), as compose opens its own.
    let r =
        DEV.get_or_init(|| engine_min::backend::gpu::open_device(false).map_err(|e| e.to_string()));
    hetero_tests::require("opencl", r.as_ref().map(Arc::clone))
}

/// 264 tokens of English text.
fn text_tokens(model: &Model, n: usize) -> Vec<u32> {
    let para = "The capital of France is Paris, and the capital of Germany is Berlin. Rivers \
                such as the Seine and the Rhine flow through them, carrying boats and barges \
                past old bridges, markets and cathedrals. In the spring the parks fill with \
                people who walk, read and talk about the weather, the news and their plans. ";
    let mut ids = Vec::new();
    while ids.len() < n {
        ids.extend(model.tokenizer.encode(para, false));
    }
    ids.truncate(n);
    ids
}

#[test]
fn resident_decoder_matches_reference_forward() {
    let Some(model) = load() else { return };
    let Some(dev) = device() else { return };
    let ids = text_tokens(&model, 264);
    let t0 = std::time::Instant::now();
    let want = reference::forward(&model, &ids);
    eprintln!(
        "reference forward of 264 tokens: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let vocab = model.config.vocab;
    let at = |t: usize| &want[t * vocab..(t + 1) * vocab];
    let mut dec = decoder(&model, &dev, 264, DecodePath::Blocks);
    let check = |what: &str, got: &[f32], t: usize| {
        let (d, tvd) = (max_diff(got, at(t)), tv(got, at(t)));
        eprintln!("{what} pos {t}: max |logit diff| {d:e}, TV {tvd:e}");
        assert!(
            got.iter().all(|v| v.is_finite()) && d <= TOL_F32 && tvd <= TOL_TV,
            "{what} pos {t}: max diff {d}, TV {tvd}"
        );
    };
    for p in [1usize, 17, 128, 200] {
        let t0 = std::time::Instant::now();
        let got = dec.forward(&ids[..p], 0).expect("prefill").to_vec();
        eprintln!("prefill {p}: {:.2} s", t0.elapsed().as_secs_f64());
        check(&format!("prefill {p}"), &got, p - 1);
    }
    let t0 = std::time::Instant::now();
    for t in 200..264 {
        let got = dec.forward(&ids[t..t + 1], t).expect("decode").to_vec();
        check("decode", &got, t);
    }
    eprintln!(
        "64 decode steps: {:.2} s ({} launches a step)",
        t0.elapsed().as_secs_f64(),
        dec.last_launches()
    );
    assert_eq!(
        dec.last_launches() as usize,
        dec.launches_per_token(Readout::Logits)
    );
    // The layered decode path too: prefill 17, then 16 steps.
    let mut dec = decoder(&model, &dev, 264, DecodePath::Layered);
    check(
        "layered prefill",
        dec.forward(&ids[..17], 0).expect("prefill"),
        16,
    );
    for t in 17..33 {
        let got = dec.forward(&ids[t..t + 1], t).expect("decode").to_vec();
        check("layered decode", &got, t);
    }
    assert_eq!(dec.last_launches() as usize, 5 * model.config.n_layer + 2);
}

/// An f32-activation CPU kernel (the engine's f32 tolerance class), the fastest available.
fn f32_kernel() -> CpuKernel {
    CpuKernel::available()
        .into_iter()
        .rfind(|k| !matches!(k, CpuKernel::Int8 | CpuKernel::Sme))
        .unwrap_or(CpuKernel::Portable)
}

/// Greedy generation of four prompts, 16 tokens each, against the engine's CPU plan (an f32
/// kernel). Both sides are fed the CPU's choice at every step, so every step compares the two
/// on the same prefix; they must pick the same token wherever the CPU's top-1 margin exceeds
/// 0.01. Why 0.01 separates near-ties: each side's logits are within TOL_F32 = 1e-3 of the f32
/// reference, so their top-1 can differ only where the margin is below 2e-3; 0.01 leaves a 5x
/// margin. Near-tie steps are counted and printed, not compared; where none occurs the
/// free-running greedy texts are identical. At least three quarters of the steps must be
/// compared (a model whose every step is a near-tie proves nothing).
#[test]
fn greedy_text_matches_cpu_plan() {
    let Some(model) = load() else { return };
    let Some(dev) = device() else { return };
    let prompts = [
        "The capital of France is",
        "Write a haiku about the sea.",
        "def fibonacci(n):",
        "Once upon a time, in a small village,",
    ];
    let mut dec = decoder(&model, &dev, 128, DecodePath::Auto);
    let vocab = model.config.vocab;
    let (mut compared, mut total) = (0, 0);
    for prompt in prompts {
        let pool = Arc::new(Pool::new(2).expect("pool"));
        let exec = engine_min::compose::cpu_executor(&model, pool, f32_kernel(), 64)
            .expect("cpu executor");
        let mut cpu = Engine::new(
            Arc::clone(&model),
            exec,
            EngineOptions {
                context: 128,
                kv: engine_min::kv::KvType::F32,
            },
        )
        .expect("cpu engine");
        let ids = model.tokenizer.encode(prompt, false);
        let mut logits = vec![0f32; vocab];
        cpu.forward(&ids, &mut logits).expect("cpu prefill");
        let mut next = dec.forward_argmax(&ids, 0).expect("gpu prefill");
        let mut text = Vec::new();
        for (step, pos) in (ids.len()..ids.len() + 16).enumerate() {
            total += 1;
            let top = engine_min::sample::argmax(&logits) as usize;
            let second = (0..vocab)
                .filter(|&i| i != top)
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap_or(top);
            let margin = logits[top] - logits[second];
            if margin > 0.01 {
                assert_eq!(
                    next, top as u32,
                    "{prompt:?} step {step}: GPU {next}, CPU {top} (margin {margin})"
                );
                compared += 1;
            } else {
                eprintln!("{prompt:?} step {step}: near-tie (margin {margin}), not compared");
            }
            text.push(top as u32);
            cpu.forward(&[top as u32], &mut logits).expect("cpu decode");
            next = dec.forward_argmax(&[top as u32], pos).expect("gpu decode");
        }
        eprintln!("{prompt:?} -> {:?}", model.tokenizer.decode(&text, false));
    }
    eprintln!("compared {compared} of {total} greedy steps");
    assert!(
        compared * 4 >= total * 3,
        "only {compared} of {total} steps compared"
    );
}

/// Issue 17's guard on the resident path: `Engine::forward_argmax` reads back only the argmax,
/// and the device argmax flags NaN or infinite logits beside it. On the tiny synthetic Llama
/// with an untied head and a NaN scale in token 200's embedding row (met only when 200 is fed),
/// composed with `--plan gpu` (the resident decoder), feeding 200 is EngineError::NonFinite at
/// its position (no site: the device keeps the activations), the position does not move, and
/// the next clean token gives the greedy token a clean engine gives.
#[test]
fn resident_greedy_step_flags_non_finite_logits() {
    use engine_min::engine::EngineError;
    let Some(_) = device() else { return };
    let untied = synth::tiny_llama_untied();
    let d = Model::from_bytes(&untied).expect("loads").config.d_model;
    let mut b = untied.clone();
    // Rows of d_model / 32 blocks: block 0 of token 200's row.
    synth::poke_scale(&mut b, "token_embd.weight", 200 * d / 32, synth::F16_NAN);
    let bad = Arc::new(Model::from_bytes(&b).expect("loads"));
    let clean = Arc::new(Model::from_bytes(&untied).expect("loads"));
    let opts = ComposeOptions {
        plan: PlanChoice::Gpu,
        threads: 2,
        max_batch: 8,
        context: 32,
        ..ComposeOptions::default()
    };
    let engine = |m: &Arc<Model>| {
        let c = engine_min::compose::executor(m, &opts).expect("resident executor");
        assert!(c.exec.is_resident());
        Engine::new(
            Arc::clone(m),
            c.exec,
            EngineOptions {
                context: 32,
                kv: engine_min::kv::KvType::F32,
            },
        )
        .expect("engine")
    };
    let (mut e, mut want) = (engine(&bad), engine(&clean));
    let mut scratch = vec![0f32; bad.config.vocab];
    let a = e
        .forward_argmax(&[1, 2, 3], &mut scratch)
        .expect("clean prompt");
    assert_eq!(
        a,
        want.forward_argmax(&[1, 2, 3], &mut scratch)
            .expect("clean")
    );
    assert_eq!(e.pos(), 3);
    match e.forward_argmax(&[200], &mut scratch) {
        Err(EngineError::NonFinite(nf)) => {
            assert_eq!((nf.site, nf.searched, nf.pos), (None, false, 3), "{nf}");
            assert!(!nf.value.is_finite(), "{nf}");
        }
        other => panic!("a NaN embedding row must be NonFinite, got {other:?}"),
    }
    assert_eq!(e.pos(), 3, "the failed step left the position alone");
    let next = e
        .forward_argmax(&[4], &mut scratch)
        .expect("a clean token after it");
    assert_eq!(
        next,
        want.forward_argmax(&[4], &mut scratch).expect("clean")
    );
    assert_eq!(e.pos(), 4);
}

/// The fixture files (`scripts/setup.sh fixtures`) and whether every layer matrix of each has
/// one type (so decode blocks apply): the Q5_0 and Q5_1 files do; the others mix Q5_x/Q8_0
/// matrices with K-quant `ffn_down`.
const FIXTURES: [(&str, bool); 5] = [
    ("SmolLM2-135M-Instruct.Q4_K_M.gguf", false),
    ("SmolLM2-135M-Instruct.Q5_K.gguf", false),
    ("SmolLM2-135M-Instruct.Q6_K.gguf", false),
    ("SmolLM2-135M-Instruct.Q5_0.gguf", true),
    ("SmolLM2-135M-Instruct.Q5_1.gguf", true),
];

fn fixtures() -> Option<Vec<(std::path::PathBuf, bool)>> {
    let found = (|| {
        let dir = std::env::var("HETERO_FIXTURES").map_err(|_| "HETERO_FIXTURES is not set")?;
        FIXTURES
            .iter()
            .map(|&(f, uniform)| {
                let p = std::path::Path::new(&dir).join(f);
                if p.is_file() {
                    Ok((p, uniform))
                } else {
                    Err(format!(
                        "fixture {} is missing (scripts/setup.sh fixtures)",
                        p.display()
                    ))
                }
            })
            .collect::<Result<Vec<_>, String>>()
    })();
    hetero_tests::require("model", found)
}

/// Every fixture on the resident decoder against the engine's f32 reference forward (its
/// Q5/K-quant weights dequantized by `hetero_sme::dequantize_row`, gguf-py's bit for bit):
/// a prefill of 17 (one GEMM chunk), then 8 decode steps layered and, on the one-type files,
/// in decode blocks (refused on the mixed ones, which `Auto` then runs layered); on the Q4_K_M
/// file also `--plan gpu --gpu-path per-matmul` and `--plan cpu-gpu:0.5` (prefill 17, then 3
/// steps); the engine's f32 tolerances, as above (the kernels compute with the reference's
/// weight values; only f32 accumulation order differs).
#[test]
fn resident_decoder_matches_reference_on_every_fixture() {
    let Some(files) = fixtures() else { return };
    let Some(dev) = device() else { return };
    for (path, uniform) in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let model = Model::load(&path).expect("fixture loads");
        let ids = text_tokens(&model, 25);
        let t0 = std::time::Instant::now();
        let want = reference::forward(&model, &ids);
        eprintln!(
            "{name}: reference forward of 25 tokens {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let vocab = model.config.vocab;
        let check = |what: &str, got: &[f32], t: usize| {
            let at = &want[t * vocab..(t + 1) * vocab];
            let (d, tvd) = (max_diff(got, at), tv(got, at));
            eprintln!("{name} {what} pos {t}: max |logit diff| {d:e}, TV {tvd:e}");
            assert!(
                got.iter().all(|v| v.is_finite()) && d <= TOL_F32 && tvd <= TOL_TV,
                "{name} {what} pos {t}: max diff {d}, TV {tvd}"
            );
        };
        let mut paths = vec![DecodePath::Layered];
        let blocks = try_decoder(&model, &dev, 32, DecodePath::Blocks);
        match (uniform, blocks) {
            (true, Ok(_)) => paths.push(DecodePath::Blocks),
            (false, Err(hetero_opencl_kernels::Error::NotApplicable(_))) => {}
            (u, r) => panic!("{name}: one type a layer {u}, decode blocks {:?}", r.err()),
        }
        // The persistent step runs F16/Q8_0/Q4_0/Q4_1 single-typed layers only.
        match try_decoder(&model, &dev, 32, DecodePath::Persistent) {
            Err(hetero_opencl_kernels::Error::NotApplicable(_)) => {}
            r => panic!("{name}: persistent step not refused: {:?}", r.err()),
        }
        for decode in paths {
            let t0 = std::time::Instant::now();
            let mut dec = decoder(&model, &dev, 32, decode);
            let got = dec.forward(&ids[..17], 0).expect("prefill").to_vec();
            check(&format!("{decode:?} prefill 17"), &got, 16);
            for t in 17..25 {
                let got = dec.forward(&ids[t..t + 1], t).expect("decode").to_vec();
                check(&format!("{decode:?} decode"), &got, t);
            }
            eprintln!(
                "{name} {decode:?}: {:.1} s, {} launches a decode step",
                t0.elapsed().as_secs_f64(),
                dec.last_launches()
            );
        }
        if name.contains("Q4_K_M") {
            // The engine's other GPU plans on the mixed file: every matmul on the GPU one at a
            // time (host ops on the CPU), and a CPU–GPU column split (an f32 CPU kernel).
            let model = Arc::new(model);
            for (plan, gpu_path) in [
                (PlanChoice::Gpu, GpuPath::PerMatmul),
                (PlanChoice::CpuGpu(0.5), GpuPath::Resident),
            ] {
                let opts = ComposeOptions {
                    gpu_path,
                    context: 32,
                    plan,
                    threads: 2,
                    kernel: f32_kernel(),
                    max_batch: 16,
                    ..ComposeOptions::default()
                };
                let c = engine_min::compose::executor(&model, &opts).expect("executor");
                let mut e = Engine::new(
                    Arc::clone(&model),
                    c.exec,
                    EngineOptions {
                        context: 32,
                        kv: engine_min::kv::KvType::F32,
                    },
                )
                .expect("engine");
                assert!(!e.executor().is_resident());
                let mut logits = vec![f32::NAN; vocab];
                e.forward(&ids[..17], &mut logits).expect("prefill");
                check(&format!("{plan:?} prefill 17"), &logits, 16);
                for t in 17..20 {
                    logits.fill(f32::NAN);
                    e.forward(&ids[t..t + 1], &mut logits).expect("decode");
                    check(&format!("{plan:?} decode"), &logits, t);
                }
            }
        }
    }
}

/// `engine-min bench --plan gpu --breakdown` on the resident decoder: one line per op kind of
/// each phase with its launches, device time, least bytes and FLOPs and their fractions of
/// the copy bandwidth and FP32 FMA rate measured in the same run, plus launches per token and
/// the device-busy fraction; the numbers are finite and the launches match the decoder's.
#[test]
fn bench_breakdown_on_the_gpu_path() {
    let Some(_dev) = device() else { return };
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_engine-min"))
        .args([
            "bench", "--plan", "gpu", "--pp", "8", "--tg", "2", "--reps", "1",
        ])
        .args(["--breakdown", "--model"])
        .arg(&path)
        .output()
        .expect("spawn engine-min");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for phase in ["pp", "tg"] {
        let head = out
            .lines()
            .find(|l| l.starts_with(&format!("gpu breakdown {phase} ")))
            .unwrap_or_else(|| panic!("no {phase} breakdown: {out}"));
        assert!(
            head.contains("launches/token") && head.contains("device busy"),
            "{head}"
        );
        assert!(
            head.contains("copy ") && head.contains("FP32 FMA "),
            "{head}"
        );
    }
    // SmolLM2: 30 layers of five launches (one type a layer), the gather and the head.
    let qkv = out
        .lines()
        .filter(|l| l.trim_start().starts_with("norm+qkv+rope+kv"))
        .collect::<Vec<_>>();
    assert_eq!(qkv.len(), 2, "{out}");
    assert!(qkv[1].contains(" 30.0 launches/token"), "{}", qkv[1]);
    for l in out.lines().filter(|l| l.contains("TFLOP/s (")) {
        assert!(!l.contains("NaN") && !l.contains("inf"), "{l}");
    }
}
