//! Times planning a 32-layer model (Llama-3-8B shapes) for every m in 1..=4096, reporting
//! wall-clock and this thread's CPU time per sweep (the machine is shared: CPU time is the
//! figure that does not depend on other people's load). `cargo run --release --example
//! plan_time -p hetero-partition [sweeps]`. Same profile as `benches/plan.rs`.

use hetero_partition::{
    plan_model, BackendProfile, LatencyPoint, ModelDesc, Order, Phase, Policy, Profile,
};
use std::time::Instant;

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

/// CPU time of this thread, from /proc (Linux), in seconds.
fn thread_cpu_s() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns * 1e-9)
}

fn main() {
    let sweeps: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let p = profile().check().expect("valid profile");
    let model = ModelDesc::llama(4096, 14336, 32, 8, 128, 32, 128256).expect("valid model");
    let mut sink = 0.0;
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..sweeps {
        let (w0, c0) = (Instant::now(), thread_cpu_s());
        for m in 1..=4096u32 {
            sink += plan_model(&p, &model, m, Phase::Prefill, Policy::Auto)
                .expect("plan")
                .predicted_us;
        }
        walls.push(w0.elapsed().as_secs_f64() * 1e3);
        if let (Some(a), Some(b)) = (c0, thread_cpu_s()) {
            cpus.push((b - a) * 1e3);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "32-layer model, m = 1..=4096, {sweeps} sweeps: median wall {:.2} ms, median thread CPU {:.2} ms (checksum {sink:.3e})",
        median(&mut walls),
        median(&mut cpus)
    );
}
