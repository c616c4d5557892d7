//! The NPU path's FP16 conversion at real widths: the `npu` plan (chunks of 32 rows on the QNN
//! HTP simulator, the rest on the CPU) on 2-layer `llama-1b` synth files (width 2048, FFN
//! 8192) in F16 and Q4_K_M, against the f32 reference. Needs `HETERO_MODEL` (`model`) and the QNN
//! HTP (`qnn`). One test function: qnn-sys allows one session per process.

use std::sync::Arc;

use engine_min::backend::npu::{NpuBackend, NpuOptions};
use engine_min::backend::CpuKernel;
use engine_min::compose::{ComposeOptions, PlanChoice};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::exec::Kind;

mod common;
mod real_widths;

use real_widths::{case, rel_err, types};

const S: usize = 32;
/// One NPU chunk of 32 rows, then a CPU row.
const LEN: usize = S + 1;

// npu.rs's tolerance: relative to the row's largest |logit|, FP16 weights and activations on
// the NPU (~1e-3 relative a matmul); measured on the real model 2.2e-3 over 30 layers, so 0.05
// leaves a wide margin over 2 layers while a wrong row chunk or stale staging buffer moves
// logits by whole units.
const TOL_REL: f32 = 0.05;

fn f32_kernel() -> CpuKernel {
    #[cfg(target_arch = "x86_64")]
    if CpuKernel::available().contains(&CpuKernel::Avx512) {
        return CpuKernel::Avx512;
    }
    CpuKernel::Portable
}

#[test]
fn npu_plan_at_real_widths_in_every_type() {
    let opts = NpuOptions {
        seq: S,
        ..NpuOptions::default()
    };
    let Some(npu) = hetero_tests::require("qnn", NpuBackend::open(opts)) else {
        return;
    };
    let session = Arc::clone(npu.session());
    drop(npu);
    // Two types: F16 weights (converted to the HTP's FP16 as they are) and the Q4_K_M mix
    // (dequantized from two K-quants). Since the CPU's f32 path takes the FFN's 8192 (its 4096
    // cap is gone) every type runs the whole NPU plan here, ~70 s each on the 2-core VM under
    // load: all ten would add ~10 minutes to the model stage. The CPU side of every type is
    // real_widths_cpu.rs's.
    for ty in types()
        .into_iter()
        .filter(|t| ["f16", "q4_k_m"].contains(t))
    {
        let Some(c) = case(ty, LEN) else { return };
        let vocab = c.model.config.vocab;
        let opts = ComposeOptions {
            plan: PlanChoice::Npu,
            threads: 2,
            kernel: f32_kernel(),
            max_batch: 64,
            npu: NpuOptions {
                seq: S,
                ..NpuOptions::default()
            },
            npu_session: Some(Arc::clone(&session)),
            ..ComposeOptions::default()
        };
        // The NPU plan keeps the rows the HTP graph does not take on the CPU's f32 path, which
        // takes every width (its former 4096 cap is gone; real_widths_cpu.rs checks it).
        let x = engine_min::compose::executor(&c.model, &opts)
            .unwrap_or_else(|e| panic!("{ty}: executor: {e:?}"));
        let mut e = Engine::new(
            Arc::clone(&c.model),
            x.exec,
            EngineOptions {
                context: 64,
                kv: engine_min::kv::KvType::F32,
            },
        )
        .expect("engine");
        let mut logits = vec![f32::NAN; LEN * vocab];
        e.forward(&c.ids, &mut logits).expect("prefill");
        let mut worst = 0f32;
        for t in 0..LEN {
            let (g, w) = (
                &logits[t * vocab..(t + 1) * vocab],
                &c.want[t * vocab..(t + 1) * vocab],
            );
            assert!(g.iter().all(|v| v.is_finite()), "{ty} pos {t}");
            let r = rel_err(g, w);
            worst = worst.max(r);
            assert!(r <= TOL_REL, "{ty} pos {t}: relative logit error {r}");
        }
        let kinds = e.executor().times().snapshot();
        assert!(
            kinds
                .iter()
                .any(|k| matches!(k.0, Kind::Npu | Kind::NpuCpu) && k.2 > 0),
            "{ty}: the NPU ran: {kinds:?}"
        );
        eprintln!("{ty} npu: worst relative logit error {worst:e}");
    }
}
