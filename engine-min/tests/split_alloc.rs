//! The CPU–GPU split on uma slots does not allocate per call: after the first token (which
//! builds each weight's GPU kernel object once), a decode step's matmuls — zero-copy ones and
//! the staged LM head — make no heap allocation on the calling thread. (The GPU worker
//! thread's staged launches are not counted: `CountingAlloc` counts the calling thread.)

use std::sync::Arc;

use engine_min::backend::{CpuBackend, CpuKernel};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::model::Model;
use hetero_sme::ThreadPool;

#[global_allocator]
static A: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;

#[test]
fn split_decode_step_does_not_allocate() {
    let Some(path) = hetero_tests::require(
        "model",
        std::env::var("HETERO_MODEL").map_err(|_| "HETERO_MODEL is not set"),
    ) else {
        return;
    };
    let Some(gpu) = hetero_tests::require("opencl", engine_min::gpu::GpuBackend::open()) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("model"));
    let pool = Arc::new(ThreadPool::new(2).expect("pool"));
    let cpu = CpuBackend::new(Arc::clone(&pool), CpuKernel::Portable);
    let acts = engine_min::act::UmaActs::for_model(&model.config, 8).expect("uma");
    let split = engine_min::split::SplitBackend::with_acts(
        cpu,
        gpu,
        0.5,
        Some(Arc::clone(&acts)),
        Some(Arc::clone(&pool)),
    )
    .expect("split");
    let stats = split.stats();
    let mut e = Engine::with_acts(
        Arc::clone(&model),
        Box::new(split),
        pool,
        EngineOptions {
            context: 32,
            max_batch: 8,
        },
        Some(acts),
    )
    .expect("engine");
    let vocab = model.config.vocab;
    let mut logits = vec![0f32; vocab];
    // The counter moves on something that allocates (CountingAlloc is installed).
    assert!(hetero_tests::count_allocations(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
    e.forward(&[1, 2, 3, 4], &mut logits).expect("prefill");
    // First decode step: builds the zero-copy kernel objects.
    e.forward(&[5], &mut logits).expect("decode");
    let zc0 = stats.zero_copy.load(std::sync::atomic::Ordering::Relaxed);
    let n = hetero_tests::count_allocations(|| {
        for t in 6..9 {
            e.forward(&[t], &mut logits).expect("decode");
        }
    });
    let zc = stats.zero_copy.load(std::sync::atomic::Ordering::Relaxed) - zc0;
    eprintln!("3 decode steps: {n} allocations, {zc} zero-copy matmuls");
    assert_eq!(zc, 3 * model.config.n_layer as u64 * 7);
    assert_eq!(n, 0, "decode steps on the split allocated");
    assert!(logits.iter().all(|v| v.is_finite()));
}
