//! Proves the planning path does not allocate: a counting global allocator wraps the system
//! one, and planning calls run between two reads of this thread's count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

mod common;
use common::sample;
use hetero_partition::*;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; the counter is a thread-local
// `Cell` with a const initializer, which does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size), passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout` (all allocations go there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: `ptr`/`layout` came from `System` and the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

#[test]
fn planning_does_not_allocate() {
    let p = sample().check().unwrap();
    let model = ModelDesc::llama(1024, 2048, 16, 4, 64, 32, 4096).unwrap();
    let mut budget = DraftBudget::new(4, BudgetParams::EDGE_AGENT).unwrap();
    let active = [true, false, true, true];
    let mut out = [0u32; 4];
    let n = allocations_during(|| {
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
            budget.update(0, 3.0).unwrap();
            sink += budget.allocate(&active, &mut out).unwrap() as f64;
        }
        assert!(sink > 0.0);
    });
    assert_eq!(n, 0, "the planning path allocated {n} times");
    // The counter works: validating a profile does allocate.
    assert!(allocations_during(|| drop(sample().check().unwrap())) > 0);
}
