//! `MatMulGraph::execute` does not allocate (Rust heap) per call: counted with a global
//! allocator that tallies allocations made by the current thread
//! (`hetero_tests::CountingAlloc`). (The QNN library's own C++ allocations do not go through
//! Rust's allocator and are not counted.) Own process: the allocator is global.

use half::f16;
use hetero_tests::{allocations, require, CountingAlloc};
use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order};
use qnn_sys::{BackendLibrary, Session, SessionOptions};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

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
        let build_start = allocations();
        let g = MatMulGraph::new(&s, shape, &w, order, &GraphOptions::default()).expect("build");
        // The counter works: building (names, dims, configs) does allocate.
        assert!(allocations() > build_start);
        let x = vec![f16::ONE; shape.input_len()];
        let mut y = vec![f16::NAN; shape.output_len()];
        g.execute(&x, &mut y).expect("warm-up execute");
        let before = allocations();
        for _ in 0..10 {
            g.execute(&x, &mut y).expect("execute");
        }
        let after = allocations();
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
