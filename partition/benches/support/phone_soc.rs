//! The synthetic phone-SoC profile and Llama-3-8B-shaped model that `benches/plan.rs`,
//! `examples/plan_time.rs` and `tests/plan_time.rs` plan; each includes this file with
//! `#[path]` so they always measure the same thing.

use hetero_partition::{BackendProfile, LatencyPoint, ModelDesc, Order, Profile};

/// A synthetic but plausible phone-SoC profile on the model's own shapes: GPU ~1.5 TFLOP/s
/// with a 60 µs floor, CPU ~0.4 TFLOP/s, NPU ~6 TFLOP/s at standard shapes (weight-first 10%
/// faster on wide weights), NPU sync 40 µs and 20 GB/s copies, 40 ms graph preparation.
pub fn profile() -> Profile {
    let shapes = [
        (4096, 4096),
        (4096, 1024),
        (4096, 14336),
        (14336, 4096),
        (4096, 128256),
    ];
    let pt = |k: u32, n: u32, m: u32, tflops: f64, floor: f64, order| LatencyPoint {
        k,
        n,
        m,
        us: floor + 2.0 * k as f64 * n as f64 * m as f64 / (tflops * 1e6),
        order,
    };
    let mut gpu = BackendProfile {
        backend: "gpu".into(),
        ..Default::default()
    };
    let mut cpu = BackendProfile {
        backend: "cpu".into(),
        sync_us: 5.0,
        ..Default::default()
    };
    let mut npu = BackendProfile {
        backend: "npu".into(),
        sync_us: 40.0,
        copy_gbps: Some(20.0),
        standard_m: vec![32, 64, 128, 256, 512, 1024],
        graph_prepare_us: Some(40_000.0),
        ..Default::default()
    };
    for (k, n) in shapes {
        for m in [1, 16, 64, 256, 1024, 4096] {
            gpu.points
                .push(pt(k, n, m, 1.5, 60.0, Order::ActivationFirst));
            if m >= 16 {
                cpu.points
                    .push(pt(k, n, m, 0.4, 30.0, Order::ActivationFirst));
            }
        }
        for m in [32, 64, 128, 256, 512, 1024] {
            // Short sequences under-use the NPU (NPU-1): efficiency grows with m.
            let eff = 6.0 * (m as f64 / 1024.0).sqrt();
            npu.points
                .push(pt(k, n, m, eff, 80.0, Order::ActivationFirst));
            let wf = if n > k { 1.1 } else { 0.8 };
            npu.points
                .push(pt(k, n, m, eff * wf, 80.0, Order::WeightFirst));
        }
    }
    Profile {
        device: "synthetic phone SoC".into(),
        backends: vec![gpu, cpu, npu],
        ..Profile::default()
    }
}

/// The distinct matmul shapes of [`model`]: q/o, k/v, gate/up, down, LM head.
pub fn model_shapes() -> Vec<(u32, u32)> {
    vec![
        (4096, 4096),
        (4096, 1024),
        (4096, 14336),
        (14336, 4096),
        (4096, 128256),
    ]
}

/// A 32-layer model with Llama-3-8B shapes (d_model 4096, d_ff 14336, 32 query and 8 KV heads
/// of 128, vocabulary 128256).
pub fn model() -> ModelDesc {
    ModelDesc::llama(4096, 14336, 32, 8, 128, 32, 128256).expect("valid model")
}
