//! Every CPU kernel at real widths: 2-layer `llama-1b` synth files (width 2048, FFN 8192) in
//! every type against the f32 reference, prefill (a whole 16-row tile and a cut one of 3 rows)
//! and decode through the KV cache. Needs `HETERO_MODEL` (backend `model`) for the tokenizer.

use std::sync::Arc;

use engine_min::backend::CpuKernel;
use engine_min::engine::{Engine, EngineOptions};
use hetero_sme::ThreadPool as Pool;

mod common;
mod real_widths;

use common::{max_diff, tv};
use real_widths::{case, types, POSITIONS, PROMPT};

// f32-activation kernels (portable, avx512, sme-gemv) use exactly the reference's dequantized
// weights; they differ by f32 vs f64 accumulation over rows of 2048 and 8192 and two layers.
// Logits here have magnitude ~1-5; measured on q4_0 (sme-gemv) max |diff| 4.3e-6 and TV 3.7e-7
// (each kernel's worst is printed); 1e-3 absolute and TV 1e-4 are forward.rs's f32 tolerances.
const TOL_F32: f32 = 1e-3;
const TOL_TV_F32: f64 = 1e-4;

// 8-bit-activation kernels (sme-int8; sme for prompts of 4+ rows) quantize every matmul's
// input per 32-value block (half a step: ~0.4% of the block's max), over 7 matmuls a layer.
// Held relative to the row's largest |logit| (here ~4): 0.1, which is forward.rs's 2.5
// absolute on SmolLM2's logits of ~25; measured on q4_0 2.2e-2 (int8) and 2.1e-2 (sme), TV
// 8e-3 against forward.rs's 0.08. A structural mistake (a wrong KV head, a stale cache row, a
// cut tile's rows misplaced) moves logits by about their own size (relative error ~1).
const TOL_REL_Q8: f32 = 0.1;
const TOL_TV_Q8: f64 = 0.08;

// The decompression GEMM (sme-dq, forced from 16 rows below) rounds weights and activations to
// BF16 (2^-8 relative each, ~2-3 decimal digits) instead of quantizing activations to 8 bits:
// no worse than the int8 kernels', so it is held to their tolerance.
fn exact(kernel: CpuKernel) -> bool {
    !matches!(kernel, CpuKernel::Int8 | CpuKernel::Sme | CpuKernel::Dq)
}

#[test]
fn every_cpu_kernel_at_real_widths_in_every_type() {
    // sme-dq runs the decompression GEMM from 16 rows on every CPU here (its measured crossover
    // may be "never" on this CPU, which would leave it untested): the prompt's 16-row chunk
    // takes it, the 3-row tail and decode the int8 GEMM. Set before any backend reads it (this
    // binary has this one test).
    std::env::set_var("HETERO_DQ_MIN_ROWS", "16");
    for ty in types() {
        let Some(c) = case(ty, POSITIONS) else { return };
        let vocab = c.model.config.vocab;
        assert_eq!((c.model.config.d_model, c.model.config.d_ff), (2048, 8192));
        for kernel in CpuKernel::all() {
            let pool = Arc::new(Pool::new(2).expect("pool"));
            // Every kernel takes every type at every width (the f32 path's former 4096 cap is
            // gone: F16 weights run hetero-sme's packed FP16 GEMM, K chunked).
            let exec = engine_min::compose::cpu_executor(&c.model, pool, kernel, 16)
                .unwrap_or_else(|e| panic!("{ty} {kernel:?}: {e}"));
            let mut e = Engine::new(
                Arc::clone(&c.model),
                exec,
                EngineOptions {
                    context: 64,
                    kv: engine_min::kv::KvType::F32,
                },
            )
            .expect("engine");
            let mut logits = vec![f32::NAN; PROMPT * vocab];
            e.forward(&c.ids[..PROMPT], &mut logits).expect("prefill");
            let mut rows: Vec<(usize, Vec<f32>)> = (0..PROMPT)
                .map(|t| (t, logits[t * vocab..(t + 1) * vocab].to_vec()))
                .collect();
            let mut step = vec![f32::NAN; vocab];
            for t in PROMPT..POSITIONS {
                step.fill(f32::NAN);
                e.forward(&c.ids[t..t + 1], &mut step).expect("decode");
                rows.push((t, step.clone()));
            }
            let (mut worst_d, mut worst_r, mut worst_tv) = (0f32, 0f32, 0f64);
            for (t, got) in &rows {
                let w = &c.want[t * vocab..(t + 1) * vocab];
                assert!(got.iter().all(|v| v.is_finite()), "{ty} {kernel:?} pos {t}");
                let (d, r, tvd) = (max_diff(got, w), real_widths::rel_err(got, w), tv(got, w));
                (worst_d, worst_r, worst_tv) = (worst_d.max(d), worst_r.max(r), worst_tv.max(tvd));
                if exact(kernel) {
                    assert!(
                        d <= TOL_F32 && tvd <= TOL_TV_F32,
                        "{ty} {kernel:?} pos {t}: max diff {d}, TV {tvd}"
                    );
                } else {
                    assert!(
                        r <= TOL_REL_Q8 && tvd <= TOL_TV_Q8,
                        "{ty} {kernel:?} pos {t}: relative error {r}, TV {tvd}"
                    );
                }
            }
            eprintln!(
                "{ty} {kernel:?}: worst max |diff| {worst_d:e}, relative {worst_r:e}, TV {worst_tv:e}"
            );
        }
    }
}
