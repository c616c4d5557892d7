//! What the numerical guard costs a decode step: the median time of a SmolLM2 decode step
//! (default CPU kernel, 2 threads) next to the median time of the guard's scans — the logits
//! (49,152 floats) and the watched activations of all 30 layers (attention, SwiGLU and residual
//! outputs, 2,688 floats per layer) in one pass — measured in the same process.
//!
//! `cargo run --profile ci -p engine-min --example guard_cost` (needs `HETERO_MODEL`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use engine_min::backend::CpuKernel;
use engine_min::engine::{Engine, EngineOptions};
use engine_min::guard::first_non_finite;
use engine_min::model::Model;
use hetero_sme::ThreadPool as Pool;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::var("HETERO_MODEL").map_err(|_| "set HETERO_MODEL")?;
    let model = Arc::new(Model::load(&path)?);
    let c = &model.config;
    let exec =
        engine_min::compose::cpu_executor(&model, Arc::new(Pool::new(2)?), CpuKernel::best(), 128)?;
    let mut e = Engine::new(
        Arc::clone(&model),
        exec,
        EngineOptions {
            context: 512,
            ..Default::default()
        },
    )?;
    let mut logits = vec![0f32; c.vocab];
    let watched = vec![0.5f32; c.n_layer * (2 * c.d_model + c.d_ff)];
    let (mut step, mut scan_logits, mut scan_watched) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..5 {
        e.reset();
        e.forward(&[1, 2, 3, 4], &mut logits)?;
        for t in 0..40u32 {
            let t0 = Instant::now();
            e.forward(&[100 + t], &mut logits)?;
            // The first round warms caches and the pool.
            if round > 0 {
                step.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            let t1 = Instant::now();
            black_box(first_non_finite(black_box(&logits)));
            scan_logits.push(t1.elapsed().as_secs_f64() * 1e6);
            let t2 = Instant::now();
            black_box(first_non_finite(black_box(&watched)));
            scan_watched.push(t2.elapsed().as_secs_f64() * 1e6);
        }
    }
    let (s, l, w) = (median(step), median(scan_logits), median(scan_watched));
    println!(
        "decode step median {s:.1} us; scan of the logits ({} floats) {l:.2} us; of the watched \
         activations ({} floats) {w:.2} us; guard share of a decode step {:.3}%",
        logits.len(),
        watched.len(),
        100.0 * (l + w) / s
    );
    Ok(())
}
