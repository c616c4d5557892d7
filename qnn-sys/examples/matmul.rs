//! Builds a static FP16 MatMul graph `Y[M,N] = X[M,K] · W[K,N]` (W constant) on a QNN HTP
//! backend, finalizes it, executes it, and checks it against a CPU reference; then the same in
//! HeteroInfer's weight-stationary order `Y = (Wᵀ·Xᵀ)ᵀ`, and with FP32 I/O at FP16 precision.
//!
//! ```text
//! eval "$(scripts/setup.sh --env)"      # sets QNN_HTP_LIB to the simulator's libQnnHtp.so
//! cargo run --release -p qnn-sys --example matmul -- [M K N] [path/to/libQnnHtp.so]
//! ```

use half::f16;
use qnn_sys::simple::{Element, GraphOptions, MatMulGraph, MatMulShape, Order};
use qnn_sys::{BackendLibrary, Requirement, Session, SessionOptions};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("matmul example: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (m, k, n) = match nums.as_slice() {
        [m, k, n, ..] => (*m, *k, *n),
        _ => (64, 512, 512),
    };
    let path = args.iter().find(|a| a.parse::<usize>().is_err()).cloned();

    // 1. Load the backend by absolute path (argument, else $QNN_HTP_LIB) and check its API.
    let lib = match path {
        Some(p) => BackendLibrary::load(p, &Requirement::HTP)?,
        None => BackendLibrary::load_htp()?,
    };
    let v = lib.api_version();
    println!(
        "{} ({:?}): backend id {}, core API {}, HTP API {}, build {}",
        lib.library().path(),
        lib.provider_name(),
        lib.backend_id(),
        v.coreApiVersion,
        v.backendApiVersion,
        lib.build_id()?
    );

    // 2. A session: logger, backend, device (SoC 69 = SM8750, HTP v79), context. Keep one per
    //    process (further contexts: `session.new_context()`); all live sessions must share
    //    one device config.
    let opts = SessionOptions {
        soc_model: Some(69),
        ..Default::default()
    };
    let session = Session::new(Arc::new(lib), &opts)?;

    // 3. Data: X[M,K] and W[K,N], row-major, small deterministic values.
    let shape = MatMulShape { m, k, n };
    let x: Vec<f32> = (0..shape.input_len())
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let w: Vec<f32> = (0..shape.weights_len())
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / (48.0 * (k as f32).sqrt()))
        .collect();
    let x16: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let w16: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();

    // 4. Build + finalize + execute each variant.
    for order in [Order::Direct, Order::WeightFirst] {
        let err = variant(&session, shape, &x16, &w16, order)?;
        println!("FP16 I/O, {order:?}: rel L2 error {err:.2e}");
    }
    let err = variant(&session, shape, &x, &w, Order::Direct)?;
    println!("FP32 I/O at FP16 precision, Direct: rel L2 error {err:.2e}");
    Ok(())
}

/// Builds, finalizes and runs one graph; returns the relative L2 error against an f64 reference.
fn variant<T: Element + Into<f64> + Default>(
    session: &Arc<Session>,
    shape: MatMulShape,
    x: &[T],
    w: &[T],
    order: Order,
) -> Result<f64, qnn_sys::Error> {
    let g = MatMulGraph::new(session, shape, w, order, &GraphOptions::default())?;
    let mut y = vec![T::default(); shape.output_len()];
    let t = Instant::now();
    g.execute(x, &mut y)?; // caller-owned buffers; no allocation inside
    let first = t.elapsed();
    let t = Instant::now();
    g.execute(x, &mut y)?;
    let second = t.elapsed();
    println!(
        "  {:?} {order:?}: graph build {:.1} ms (finalize {:.1} ms), execute {:.1} ms then {:.1} ms",
        shape,
        g.build_time().as_secs_f64() * 1e3,
        g.finalize_time().as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3,
        second.as_secs_f64() * 1e3
    );
    let (m, k, n) = (shape.m, shape.k, shape.n);
    let (mut num, mut den) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k)
                .map(|kk| x[i * k + kk].into() * w[kk * n + j].into())
                .sum();
            let d = y[i * n + j].into() - r;
            num += d * d;
            den += r * r;
        }
    }
    Ok((num / den.max(f64::MIN_POSITIVE)).sqrt())
}
