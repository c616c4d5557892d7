//! The OpenCL paths at real widths: the all-GPU plan, resident (whole steps on the device) and
//! per matmul, on 2-layer `llama-1b` synth files (width 2048, FFN 8192) in every type the GPU
//! computes, against the f32 reference: prefill of a 16-row chunk and a cut one of 3 rows, then
//! decode steps. Needs `HETERO_MODEL` (`model`) and OpenCL (`opencl`; PoCL in CI). One test
//! function, so the device and its kernel builds are reused.

use std::sync::Arc;

use engine_min::compose::{ComposeOptions, GpuPath, PlanChoice};
use engine_min::engine::{Engine, EngineOptions};

mod common;
mod real_widths;

use common::{max_diff, tv};
use real_widths::{case, types, POSITIONS, PROMPT};

// The GPU's kernels store FP16 only where the weights are FP16 and compute in f32 over exactly
// dequantized weights: forward.rs's and gpu_resident.rs's f32 tolerances.
const TOL_F32: f32 = 1e-3;
const TOL_TV: f64 = 1e-4;
/// The resident path's default f16 KV cache rounds each cached k and v by <= 2^-11 of itself:
/// forward.rs's TOL_KV16 and TOL_TV_KV16 (measured on PoCL, 2-layer llama-1b files: worst
/// max |diff| 2.3e-3, TV 1.9e-4 over the ten types).
const TOL_KV16: (f32, f64) = (5e-2, 2e-3);

fn engine(c: &real_widths::Case, path: GpuPath) -> Result<Engine, String> {
    let opts = ComposeOptions {
        gpu_path: path,
        context: 64,
        plan: PlanChoice::Gpu,
        threads: 2,
        max_batch: 16,
        ..ComposeOptions::default()
    };
    let x = engine_min::compose::executor(&c.model, &opts).map_err(|e| e.to_string())?;
    Engine::new(
        Arc::clone(&c.model),
        x.exec,
        EngineOptions {
            context: 64,
            kv: engine_min::kv::KvType::F32,
        },
    )
    .map_err(|e| e.to_string())
}

#[test]
fn gpu_paths_at_real_widths_in_every_type() {
    let usable = engine_min::backend::gpu::GpuBackend::open().map(drop);
    if hetero_tests::require("opencl", usable).is_none() {
        return;
    }
    for ty in types() {
        let Some(c) = case(ty, POSITIONS) else { return };
        let vocab = c.model.config.vocab;
        for path in [GpuPath::Resident, GpuPath::PerMatmul] {
            let mut e = engine(&c, path).unwrap_or_else(|e| panic!("{ty} {path:?}: {e}"));
            assert_eq!(e.executor().is_resident(), path == GpuPath::Resident);
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
            let (mut worst_d, mut worst_tv) = (0f32, 0f64);
            for (t, got) in &rows {
                let w = &c.want[t * vocab..(t + 1) * vocab];
                let (d, tvd) = (max_diff(got, w), tv(got, w));
                (worst_d, worst_tv) = (worst_d.max(d), worst_tv.max(tvd));
                let (tol, tol_tv) = if path == GpuPath::Resident {
                    TOL_KV16
                } else {
                    (TOL_F32, TOL_TV)
                };
                assert!(
                    got.iter().all(|v| v.is_finite()) && d <= tol && tvd <= tol_tv,
                    "{ty} {path:?} pos {t}: max diff {d}, TV {tvd}"
                );
            }
            eprintln!("{ty} gpu {path:?}: worst max |diff| {worst_d:e}, TV {worst_tv:e}");
        }
    }
}
