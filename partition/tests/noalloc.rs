//! Proves the planning path (and the prediction bookkeeping) does not allocate: a counting global allocator
//! (`hetero_tests::CountingAlloc`) wraps the system one, and planning calls run between two
//! reads of this thread's count.

mod common;
use common::sample;
use hetero_partition::*;
use hetero_tests::{count_allocations, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn planning_does_not_allocate() {
    let p = sample().check().unwrap();
    let model = ModelDesc::llama(1024, 2048, 16, 4, 64, 32, 4096).unwrap();
    let mut budget = DraftBudget::new(4, BudgetParams::EDGE_AGENT).unwrap();
    let active = [true, false, true, true];
    let mut out = [0u32; 4];
    let n = count_allocations(|| {
        let mut sink = 0.0;
        for m in [1, 7, 33, 100, 300, 1000, 4096] {
            sink += plan_op(&p, 1024, 1024, m).unwrap().predicted_us();
            sink += plan_op(&p, 3000, 700, m).unwrap().predicted_us();
            for phase in [Phase::Prefill, Phase::Decode] {
                sink += plan_model(&p, &model, m, phase, Policy::Auto)
                    .unwrap()
                    .predicted_us;
            }
            sink += OpPlan::cpu_gpu_columns(&p, 1024, 1024, m)
                .unwrap()
                .predicted_us();
            sink += OpPlan::weight_centric(&p, Backend::Npu, Backend::Gpu, 0.4, 1024, 1024, m)
                .unwrap()
                .predicted_us();
            sink += p
                .latency_us(Backend::Npu, 1024, 1024, m, Order::WeightFirst)
                .unwrap();
            let plan = plan_op(&p, 1024, 1024, m).unwrap();
            sink += plan.pieces().as_slice().len() as f64;
            for phase in Phase::ALL {
                sink += plan_op_in(&p, phase, 1024, 1024, m).unwrap().predicted_us();
                sink += plan_with(&p, phase, Policy::CpuGpuColumns, 1024, 1024, m)
                    .unwrap()
                    .predicted_us();
                sink += p
                    .latency_us_in(Backend::Gpu, phase, 1024, 1024, m, Order::ActivationFirst)
                    .unwrap();
                sink += p
                    .cost_in(phase, 1024, 1024, m, &plan.split)
                    .unwrap()
                    .total_us;
            }
            let mut pr = Prediction::new(1024, 1024, Phase::Prefill);
            pr.record(&plan, 1.0).unwrap();
            let mut errs = [pr.relative_error().unwrap(), 0.1, -0.2];
            sink += ErrorStats::of(&mut errs).unwrap().median;
            budget.update(0, 3.0).unwrap();
            sink += budget.allocate(&active, &mut out).unwrap() as f64;
        }
        assert!(sink > 0.0);
    });
    assert_eq!(n, 0, "the planning path allocated {n} times");
    // The counter works: validating a profile does allocate.
    assert!(count_allocations(|| drop(sample().check().unwrap())) > 0);
}
