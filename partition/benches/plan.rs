//! Planning a whole 32-layer model (Llama-3-8B shapes) for every sequence length 1..=4096.
// criterion_group! expands to an undocumented pub fn.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hetero_partition::{
    plan_model, plan_op, BackendProfile, LatencyPoint, ModelDesc, Order, Phase, Policy, Profile,
};

/// A synthetic but plausible phone-SoC profile on the model's own shapes: GPU ~1.5 TFLOP/s
/// with a 60 µs floor, CPU ~0.4 TFLOP/s, NPU ~6 TFLOP/s at standard shapes (weight-first 10%
/// faster on wide weights), NPU sync 40 µs and 20 GB/s copies, 40 ms graph preparation.
fn profile() -> Profile {
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
    }
}

fn bench(c: &mut Criterion) {
    let p = profile().check().expect("valid profile");
    let model = ModelDesc::llama(4096, 14336, 32, 8, 128, 32, 128256).expect("valid model");
    c.bench_function("plan_model 32 layers, m = 1..=4096 (prefill)", |b| {
        b.iter(|| {
            let mut total = 0.0;
            for m in 1..=4096u32 {
                let plan = plan_model(&p, &model, m, Phase::Prefill, Policy::Auto).expect("plan");
                total += plan.predicted_us;
            }
            black_box(total)
        })
    });
    c.bench_function("plan_op 4096x14336, m = 1..=4096", |b| {
        b.iter(|| {
            let mut total = 0.0;
            for m in 1..=4096u32 {
                total += plan_op(&p, 4096, 14336, m).expect("plan").predicted_us();
            }
            black_box(total)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
