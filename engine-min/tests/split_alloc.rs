//! A decode step allocates nothing on the calling thread, on the CPU plan and on a CPU–GPU
//! column split (the executor's helper thread drives the GPU; `CountingAlloc` counts the
//! calling thread): activation slots are acquired and released per step without allocating,
//! split outputs are uma views, and completion is the slot's flag.

use std::sync::Arc;

use engine_min::backend::CpuKernel;
use engine_min::compose::{ComposeOptions, PlanChoice};
use engine_min::engine::{Engine, EngineOptions};
use engine_min::exec::Kind;
use engine_min::model::Model;

#[global_allocator]
static A: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;

fn decode_allocations(model: &Arc<Model>, plan: PlanChoice) -> (usize, Vec<Kind>) {
    let opts = ComposeOptions {
        plan,
        profile: None,
        threads: 2,
        kernel: CpuKernel::best(),
        max_batch: 8,
        npu: Default::default(),
        npu_session: None,
        ..ComposeOptions::default()
    };
    let c = engine_min::compose::executor(model, &opts).expect("executor");
    let mut e = Engine::new(
        Arc::clone(model),
        c.exec,
        EngineOptions {
            context: 32,
            ..Default::default()
        },
    )
    .expect("engine");
    let mut logits = vec![0f32; model.config.vocab];
    e.forward(&[1, 2, 3, 4], &mut logits).expect("prefill");
    e.forward(&[5], &mut logits).expect("decode");
    e.reset_timings();
    let n = hetero_tests::count_allocations(|| {
        for t in 6..9 {
            e.forward(&[t], &mut logits).expect("decode");
        }
    });
    assert!(logits.iter().all(|v| v.is_finite()));
    let kinds = e
        .executor()
        .times()
        .snapshot()
        .iter()
        .map(|k| k.0)
        .collect();
    (n, kinds)
}

#[test]
fn decode_steps_do_not_allocate() {
    let Some(path) = hetero_tests::require(
        "model",
        std::env::var("HETERO_MODEL").map_err(|_| "HETERO_MODEL is not set"),
    ) else {
        return;
    };
    let model = Arc::new(Model::load(&path).expect("model"));
    // The counter moves on something that allocates (CountingAlloc is installed).
    assert!(hetero_tests::count_allocations(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
    let (n, kinds) = decode_allocations(&model, PlanChoice::Cpu);
    eprintln!("cpu plan: 3 decode steps, {n} allocations ({kinds:?})");
    assert_eq!(n, 0, "decode steps on the CPU plan allocated");
    let gpu = engine_min::backend::gpu::GpuBackend::open().map(drop);
    if hetero_tests::require("opencl", gpu).is_none() {
        return;
    }
    let (n, kinds) = decode_allocations(&model, PlanChoice::CpuGpu(0.5));
    eprintln!("cpu-gpu:0.5 plan: 3 decode steps, {n} allocations ({kinds:?})");
    assert!(kinds.contains(&Kind::CpuGpu), "{kinds:?}");
    assert_eq!(n, 0, "decode steps on the split allocated");
}
