//! The KV cache's types (`--kv-type f32|f16|q8_0`, issue 33.2) against the f32 reference on
//! the real model (needs `HETERO_MODEL`; backend name `model`): a 33-token prompt in chunks
//! of 16 then decode steps, every position's logits held to a tolerance per type (stated
//! below, with its reason); the engine reports the type and its bytes; a bad `--kv-type` is
//! a usage error.

use std::process::Command;
use std::sync::Arc;

use engine_min::backend::CpuKernel;
use engine_min::engine::{Engine, EngineOptions};
use engine_min::kv::KvType;
use engine_min::model::Model;
use engine_min::reference;
use hetero_sme::ThreadPool as Pool;

mod common;

use common::{max_diff, tv};

/// The most exact CPU kernel with f32 activations (so the KV type is the only rounding
/// beyond f32 arithmetic): AVX-512 where the CPU has it, else portable.
fn f32_kernel() -> CpuKernel {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        return CpuKernel::Avx512;
    }
    CpuKernel::Portable
}

/// (max |logit diff|, TV) allowed per type, logits of magnitude ~10-30 over SmolLM2's 30
/// layers. f32: the f32 kernels' own tolerance (`forward.rs`: measured 1e-5..4e-5). f16: each
/// cached key and value is rounded to f16 (relative 2⁻¹¹ ≈ 4.9e-4), which moves each score by
/// about that fraction of |q||k| and each attention output by that fraction of |v|, compounded
/// over 30 layers. q8_0: each cached row is rounded to 8 bits per 32 values (half a step,
/// amax/254 ≈ 0.4% of the block's largest value), ~8x f16's. Measured worst on the dev VM
/// (2026-12-03): f32 3.8e-5 / TV 2.7e-6, f16 1.7e-2 / 1.5e-3, q8_0 0.76 / 0.041 (the test
/// prints them); the bounds are about 4x those. A real mistake (a wrong row, head or layer of
/// the cache) moves logits by whole units and changes the top token, which these bounds and
/// the TV one catch.
fn tolerance(ty: KvType) -> (f32, f64) {
    match ty {
        KvType::F32 => (1e-3, 1e-4),
        KvType::F16 => (0.07, 6e-3),
        KvType::Q8_0 => (3.0, 0.16),
    }
}

#[test]
fn every_kv_type_against_the_f32_reference() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("model loads"));
    let text = "The capital of France is Paris, and the capital of Germany is Berlin. Rivers \
                such as the Seine and the Rhine flow through them, carrying boats and barges";
    let mut ids = model.tokenizer.encode(text, false);
    ids.truncate(33);
    let want = reference::forward(&model, &ids);
    let vocab = model.config.vocab;
    for ty in KvType::ALL {
        let pool = Arc::new(Pool::new(2).expect("pool"));
        let exec = engine_min::compose::cpu_executor(&model, pool, f32_kernel(), 16).expect("exec");
        let mut e = Engine::new(
            Arc::clone(&model),
            exec,
            EngineOptions {
                context: 64,
                kv: ty,
            },
        )
        .expect("engine");
        assert_eq!(e.kv_type(), ty);
        let c = &model.config;
        let row = ty.row_bytes(c.kv_dim()).unwrap();
        assert_eq!(e.kv_bytes(), 2 * c.n_layer * 64 * row, "{ty}: bytes");
        // Prefill 25 tokens (chunks of 16 and 9), then decode to position 32.
        let mut logits = vec![f32::NAN; 25 * vocab];
        e.forward(&ids[..25], &mut logits).expect("prefill");
        let (tol, tol_tv) = tolerance(ty);
        let (mut worst, mut worst_tv) = (0f32, 0f64);
        let mut check = |t: usize, l: &[f32]| {
            let w = &want[t * vocab..(t + 1) * vocab];
            let (d, tvd) = (max_diff(l, w), tv(l, w));
            worst = worst.max(d);
            worst_tv = worst_tv.max(tvd);
            assert!(
                d <= tol && tvd <= tol_tv,
                "{ty} pos {t}: max diff {d}, TV {tvd}"
            );
        };
        for t in 0..25 {
            check(t, &logits[t * vocab..(t + 1) * vocab]);
        }
        let mut one = vec![f32::NAN; vocab];
        for t in 25..33 {
            one.fill(f32::NAN);
            e.forward(&ids[t..t + 1], &mut one).expect("decode");
            check(t, &one);
        }
        eprintln!("kv {ty}: max |logit diff| {worst:e}, TV {worst_tv:e} over 33 positions");
    }
}

#[test]
fn a_bad_kv_type_is_a_usage_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_engine-min"))
        .args(["bench", "--model", "/nonexistent.gguf", "--kv-type", "q4_0"])
        .output()
        .expect("spawn");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`q4_0` is not a KV-cache type (types: f32, f16, q8_0)"),
        "{err}"
    );
}
