//! `perplexity` against the same number computed by hand from the f32 reference forward's
//! logits (llama.cpp's definition: chunks of `ctx`, second halves scored), and the CLI
//! command's output and `run --logits-out` (model parts need `HETERO_MODEL`).

use std::sync::Arc;

use engine_min::backend::CpuKernel;
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use engine_min::perplexity::{perplexity, PerplexityError};
use hetero_sme::ThreadPool as Pool;

mod common;

const TEXT: &str = "The history of the city goes back two thousand years, to a settlement on an \
    island in the river where fishermen traded with merchants from the south. Over the centuries \
    the island grew into a town, the town into a city, and the city spread along both banks, \
    with bridges, markets, churches and a university whose students came from every country.";

#[test]
fn perplexity_equals_the_reference_computed_by_hand() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("model"));
    let tokens = model.tokenizer.encode(TEXT, false);
    let ctx = 16;
    let chunks = tokens.len() / ctx;
    assert!(chunks >= 3, "{}", tokens.len());
    // By hand, on the f32 reference forward (f64 softmax).
    let vocab = model.config.vocab;
    let (mut nll, mut count) = (0f64, 0usize);
    for c in 0..chunks {
        let mut chunk = tokens[c * ctx..(c + 1) * ctx].to_vec();
        if model.tokenizer.add_bos {
            chunk[0] = model.tokenizer.bos.expect("bos");
        }
        let logits = engine_min::reference::forward(&model, &chunk);
        for j in ctx / 2..ctx - 1 {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let max = row
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let z: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
            let t = tokens[c * ctx + j + 1] as usize;
            nll -= f64::from(row[t]) - max - z.ln();
            count += 1;
        }
    }
    let want = (nll / count as f64).exp();
    // The engine with each f32-exact kernel (f32 activations, weights dequantized exactly):
    // the same number up to f32 accumulation order. `avx512` is the "f32 reference forward"
    // row of benches/RESULTS.md's perplexity table, so this is what makes that row the reference.
    let pool = Arc::new(Pool::new(2).expect("pool"));
    let f32_kernels: Vec<CpuKernel> = CpuKernel::available()
        .into_iter()
        .filter(|k| k.name() == "avx512" || *k == CpuKernel::SmeGemv)
        .collect();
    assert!(f32_kernels.contains(&CpuKernel::SmeGemv));
    let mut logits = vec![f32::NAN; ctx * vocab];
    for &kernel in &f32_kernels {
        let exec =
            engine_min::compose::cpu_executor(&model, Arc::clone(&pool), kernel, 8).expect("exec");
        let mut e = Engine::new(
            Arc::clone(&model),
            exec,
            EngineOptions {
                context: 64,
                kv: engine_min::kv::KvType::F32,
            },
        )
        .expect("e");
        let mut seen = Vec::new();
        let r = perplexity(&mut e, &tokens, ctx, None, &mut logits, |c, p| {
            seen.push((c, p))
        })
        .expect("perplexity");
        eprintln!(
            "{}: ppl {} +/- {} (by hand {want})",
            kernel.name(),
            r.ppl,
            r.ppl_err
        );
        assert_eq!((r.chunks, r.scored), (chunks, chunks * (ctx - 1 - ctx / 2)));
        assert_eq!(seen.len(), chunks);
        // f32 logits vs the reference: max |diff| ~1e-4 (forward.rs), so NLL agrees to ~1e-4.
        assert!(
            (r.ppl / want - 1.0).abs() < 1e-3,
            "{}: {} vs {want}",
            kernel.name(),
            r.ppl
        );
        assert!(r.ppl_err > 0.0 && r.ppl_err < r.ppl);
    }
    let exec =
        engine_min::compose::cpu_executor(&model, pool, CpuKernel::SmeGemv, 8).expect("exec");
    let mut e = Engine::new(
        Arc::clone(&model),
        exec,
        EngineOptions {
            context: 64,
            kv: engine_min::kv::KvType::F32,
        },
    )
    .expect("e");
    // --chunks limits the work; bad contexts and too-short texts are typed errors.
    let r2 = perplexity(&mut e, &tokens, ctx, Some(1), &mut logits, |_, _| {}).expect("1 chunk");
    assert_eq!(r2.chunks, 1);
    assert!(matches!(
        perplexity(&mut e, &tokens[..10], ctx, None, &mut logits, |_, _| {}),
        Err(PerplexityError::TooShort {
            tokens: 10,
            ctx: 16
        })
    ));
    assert!(matches!(
        perplexity(&mut e, &tokens, 3, None, &mut logits, |_, _| {}),
        Err(PerplexityError::BadContext { .. })
    ));
}

#[test]
fn cli_perplexity_and_logits_out() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("engine-min-ppl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let text = dir.join("t.txt");
    std::fs::write(&text, TEXT.repeat(3)).expect("write");
    let bin = env!("CARGO_BIN_EXE_engine-min");
    let o = std::process::Command::new(bin)
        .arg("perplexity")
        .arg("--model")
        .arg(&path)
        .arg("--file")
        .arg(&text)
        .args(["--ctx", "32", "--threads", "2"])
        .output()
        .expect("spawn");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("Final estimate: PPL = "), "{out}");
    let logits = dir.join("l.json");
    let o = std::process::Command::new(bin)
        .arg("run")
        .arg("--model")
        .arg(&path)
        .args(["--prompt", "The capital of France is", "--max-tokens", "1"])
        .arg("--logits-out")
        .arg(&logits)
        .args(["--logits-at", "0,-1"])
        .output()
        .expect("spawn");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&logits).expect("read")).expect("json");
    let rows = v["positions"].as_array().expect("positions");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["pos"], 0);
    assert_eq!(rows[1]["logits"].as_array().expect("logits").len(), 49152);
    // Positions outside the prompt are usage errors.
    let o = std::process::Command::new(bin)
        .arg("run")
        .arg("--model")
        .arg(&path)
        .args(["--prompt", "x", "--logits-out"])
        .arg(&logits)
        .args(["--logits-at", "7"])
        .output()
        .expect("spawn");
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}
