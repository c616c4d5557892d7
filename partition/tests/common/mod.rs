//! Shared helpers: hand-written profiles.
#![allow(dead_code)]

use hetero_partition::{BackendProfile, LatencyPoint, Order, Profile};

pub fn pt(k: u32, n: u32, m: u32, us: f64) -> LatencyPoint {
    LatencyPoint {
        k,
        n,
        m,
        us,
        order: Order::ActivationFirst,
    }
}

pub fn pto(k: u32, n: u32, m: u32, us: f64, order: Order) -> LatencyPoint {
    LatencyPoint { k, n, m, us, order }
}

pub fn backend(name: &str, points: Vec<LatencyPoint>) -> BackendProfile {
    BackendProfile {
        backend: name.into(),
        points,
        ..Default::default()
    }
}

/// A plausible three-backend profile on one 1024x1024 shape.
pub fn sample() -> Profile {
    let (k, n) = (1024, 1024);
    let mut npu = backend(
        "npu",
        vec![
            pto(k, n, 32, 60.0, Order::ActivationFirst),
            pto(k, n, 64, 70.0, Order::ActivationFirst),
            pto(k, n, 128, 90.0, Order::ActivationFirst),
            pto(k, n, 256, 150.0, Order::ActivationFirst),
            pto(k, n, 256, 140.0, Order::WeightFirst),
        ],
    );
    npu.standard_m = vec![32, 64, 128, 256];
    npu.graph_prepare_us = Some(20_000.0);
    npu.sync_us = 30.0;
    npu.copy_gbps = Some(50.0);
    let mut cpu = backend("cpu", vec![pt(k, n, 16, 100.0), pt(k, n, 256, 1600.0)]);
    cpu.sync_us = 5.0;
    Profile {
        device: "test".into(),
        backends: vec![
            backend(
                "gpu",
                vec![pt(k, n, 1, 40.0), pt(k, n, 64, 100.0), pt(k, n, 512, 700.0)],
            ),
            cpu,
            npu,
        ],
        ..Profile::default()
    }
}
