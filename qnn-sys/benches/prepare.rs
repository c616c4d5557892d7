//! Static-graph preparation cost and execution time of an FP16 MatMul on a QNN HTP backend,
//! against shape: M ∈ {32, 64, 128, 256}, K = N ∈ {512, 1024, 2048} (HeteroInfer's "NPU static
//! graph" cost). A `harness = false` bench that prints a Markdown table.
//!
//! ```text
//! eval "$(scripts/setup.sh --env)"
//! cargo bench -p qnn-sys --bench prepare            # all 12 shapes, 5 timed executions each
//! QNN_BENCH_REPS=3 QNN_BENCH_ORDER=weight-first cargo bench -p qnn-sys --bench prepare
//! ```
//!
//! On the x86-64 simulator, execution is a functional simulation on the host CPU: the execute
//! column is NOT an NPU speed. graphFinalize runs the real HTP graph compiler, so its cost is
//! representative of graph preparation (on this host's CPU).

use half::f16;
use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order};
use qnn_sys::{BackendLibrary, Session, SessionOptions};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let lib = match BackendLibrary::load_htp() {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("SKIP qnn prepare bench: {e}");
            return;
        }
    };
    let reps: usize = std::env::var("QNN_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let order = match std::env::var("QNN_BENCH_ORDER").as_deref() {
        Ok("weight-first") => Order::WeightFirst,
        _ => Order::Direct,
    };
    let v = lib.api_version();
    let opts = SessionOptions {
        soc_model: Some(69),
        ..Default::default()
    };
    let session = match Session::new(Arc::new(lib), &opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qnn prepare bench: session: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "QNN HTP core API {}, HTP API {}, SoC 69, FP16 I/O + FP16 precision, order {order:?}, \
         {reps} timed executions after one untimed",
        v.coreApiVersion, v.backendApiVersion
    );
    println!();
    println!("| M | K=N | graph build ms | graphFinalize ms | 1st execute ms | execute median ms | execute min ms |");
    println!("|---|---|---|---|---|---|---|");
    for kn in [512usize, 1024, 2048] {
        for m in [32usize, 64, 128, 256] {
            let shape = MatMulShape { m, k: kn, n: kn };
            let w: Vec<f16> = (0..shape.weights_len())
                .map(|i| f16::from_f32(((i % 251) as f32 - 125.0) / 4096.0))
                .collect();
            let x: Vec<f16> = (0..shape.input_len())
                .map(|i| f16::from_f32(((i % 127) as f32 - 63.0) / 64.0))
                .collect();
            let mut y = vec![f16::ZERO; shape.output_len()];
            let g = match MatMulGraph::new(&session, shape, &w, order, &GraphOptions::default()) {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("{shape:?}: {e}");
                    std::process::exit(1);
                }
            };
            let t = Instant::now();
            if let Err(e) = g.execute(&x, &mut y) {
                eprintln!("{shape:?}: {e}");
                std::process::exit(1);
            }
            let first = t.elapsed().as_secs_f64() * 1e3;
            let mut times: Vec<f64> = (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    let r = g.execute(&x, &mut y);
                    let dt = t.elapsed().as_secs_f64() * 1e3;
                    if let Err(e) = r {
                        eprintln!("{shape:?}: {e}");
                        std::process::exit(1);
                    }
                    dt
                })
                .collect();
            times.sort_by(f64::total_cmp);
            println!(
                "| {m} | {kn} | {:.1} | {:.1} | {first:.1} | {:.1} | {:.1} |",
                g.build_time().as_secs_f64() * 1e3,
                g.finalize_time().as_secs_f64() * 1e3,
                times[times.len() / 2],
                times[0]
            );
        }
    }
}
