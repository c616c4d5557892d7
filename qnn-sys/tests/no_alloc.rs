//! `MatMulGraph::execute` does not allocate (Rust heap) per call: counted with a global
//! allocator that tallies allocations made by the current thread. (The QNN library's own C++
//! allocations do not go through Rust's allocator and are not counted.) Own process: the
//! allocator is global.

use half::f16;
use hetero_tests::require;
use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order};
use qnn_sys::{BackendLibrary, Session, SessionOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees carry over; the thread-local counter is a const-initialized Cell whose
// access does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; ptr was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn execute_does_not_allocate() {
    let Some(lib) = require("qnn", BackendLibrary::load_htp()) else {
        return;
    };
    let opts = SessionOptions {
        soc_model: Some(69),
        ..Default::default()
    };
    let s = Session::new(Arc::new(lib), &opts).expect("session");
    let shape = MatMulShape {
        m: 16,
        k: 64,
        n: 32,
    };
    for order in [Order::Direct, Order::WeightFirst] {
        let w = vec![f16::from_f32(0.25); shape.weights_len()];
        let build_start = ALLOCS.with(Cell::get);
        let g = MatMulGraph::new(&s, shape, &w, order, &GraphOptions::default()).expect("build");
        // The counter works: building (names, dims, configs) does allocate.
        assert!(ALLOCS.with(Cell::get) > build_start);
        let x = vec![f16::ONE; shape.input_len()];
        let mut y = vec![f16::NAN; shape.output_len()];
        g.execute(&x, &mut y).expect("warm-up execute");
        let before = ALLOCS.with(Cell::get);
        for _ in 0..10 {
            g.execute(&x, &mut y).expect("execute");
        }
        let after = ALLOCS.with(Cell::get);
        assert_eq!(
            after - before,
            0,
            "{order:?}: execute allocated {} times",
            after - before
        );
        assert!(
            y.iter().all(|v| v.to_f32() == 16.0),
            "{order:?}: {:?}",
            &y[..4]
        );
    }
}
