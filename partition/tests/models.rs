//! Latency models against hand computations, strategies on hand cases, bad input.

mod common;
use common::*;
use hetero_partition::*;

// Hand-computed values are exact sums/products of small binary fractions or decimal values;
// compare with a relative tolerance of 1e-12 (a few ulps of f64 arithmetic).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn gpu_linear_interpolation() {
    let p = sample().check().unwrap();
    let l = |m| {
        p.latency_us(Backend::Gpu, 1024, 1024, m, Order::ActivationFirst)
            .unwrap()
    };
    assert!(close(l(1), 40.0));
    // Between (1, 40) and (64, 100): 40 + 60 * (32 - 1) / 63.
    assert!(close(l(32), 40.0 + 60.0 * 31.0 / 63.0));
    // Between (64, 100) and (512, 700): 100 + 600 * 224 / 448 = 400.
    assert!(close(l(288), 400.0));
    // Beyond the last point: proportional, 700 * 1024 / 512.
    assert!(close(l(1024), 1400.0));
    // Another shape: nearest measured shape scaled by k*n: 2x columns = 2x time.
    let l2 = p
        .latency_us(Backend::Gpu, 1024, 2048, 288, Order::ActivationFirst)
        .unwrap();
    assert!(close(l2, 800.0));
}

#[test]
fn cpu_steps_in_16_rows() {
    let p = sample().check().unwrap();
    let l = |m| {
        p.latency_us(Backend::Cpu, 1024, 1024, m, Order::ActivationFirst)
            .unwrap()
    };
    // 1..=16 rows: one tile, flat at the first point.
    assert!(close(l(1), 100.0));
    assert!(close(l(16), 100.0));
    // 17 rows -> 32: 100 + 1500 * 16 / 240 = 200.
    assert!(close(l(17), 200.0));
    assert!(close(l(32), 200.0));
    assert!(close(l(33), 300.0));
}

#[test]
fn npu_steps_in_32_rows_and_orders() {
    let p = sample().check().unwrap();
    let l = |m, o| p.latency_us(Backend::Npu, 1024, 1024, m, o).unwrap();
    assert!(close(l(1, Order::ActivationFirst), 60.0));
    assert!(close(l(32, Order::ActivationFirst), 60.0));
    assert!(close(l(33, Order::ActivationFirst), 70.0));
    // 65 -> 96: between 64 (70) and 128 (90): 80.
    assert!(close(l(65, Order::ActivationFirst), 80.0));
    // Weight-first has one point at 256: flat below it.
    assert!(close(l(1, Order::WeightFirst), 140.0));
    assert!(close(l(256, Order::WeightFirst), 140.0));
}

#[test]
fn noise_is_flattened() {
    let mut prof = sample();
    prof.backends[0].points.push(pt(1024, 1024, 128, 50.0)); // faster than m=64: noise
    let p = prof.check().unwrap();
    let l = p
        .latency_us(Backend::Gpu, 1024, 1024, 128, Order::ActivationFirst)
        .unwrap();
    assert!(close(l, 100.0));
}

#[test]
fn single_backend_costs_by_hand() {
    let p = sample().check().unwrap();
    // GPU alone at m = 64: 100 us, sync 0, no copy.
    let g = OpPlan::single(&p, Backend::Gpu, 1024, 1024, 64).unwrap();
    assert_eq!(g.strategy, Strategy::Single);
    assert!(close(g.predicted_us(), 100.0));
    // NPU alone at m = 64 (standard): 70 + copy + sync 30.
    // copy: (64*1024 in + 64*1024 out) * 2 bytes / (50 GB/s = 5e4 bytes/us) = 5.24288 us.
    let n = OpPlan::single(&p, Backend::Npu, 1024, 1024, 64).unwrap();
    assert_eq!(n.strategy, Strategy::Single);
    let copy = (64.0 * 1024.0 * 2.0) * 2.0 / 5e4;
    assert!(close(n.cost.copy_us, copy));
    assert!(close(n.predicted_us(), 70.0 + copy + 30.0));
    // NPU alone at m = 100: padding to 128 (90) beats pipe 2x64 (140) and 4x32 (240).
    let n = OpPlan::single(&p, Backend::Npu, 1024, 1024, 100).unwrap();
    assert_eq!(n.strategy, Strategy::Padding);
    assert_eq!(n.split.npu.unwrap().graph_m, 128);
    // m = 1000: pipe of 256-row chunks, weight-first (140 < 150): 4 * 140.
    let n = OpPlan::single(&p, Backend::Npu, 1024, 1024, 1000).unwrap();
    assert_eq!(n.strategy, Strategy::NpuPipe);
    let e = n.split.npu.unwrap();
    assert_eq!((e.graph_m, e.chunks, e.order), (256, 4, Order::WeightFirst));
    assert!(close(n.cost.a_us - n.cost.copy_us, 560.0));
}

#[test]
fn activation_centric_by_hand() {
    let p = sample().check().unwrap();
    // m = 300: forced NPU activation split with the GPU.
    let plan = OpPlan::npu_activation(&p, Backend::Gpu, 1024, 1024, 300).unwrap();
    let e = plan.split.npu.unwrap();
    assert!(e.graph_m * e.chunks == plan.split.rows);
    assert!(plan.split.rows < 300 && plan.split.cols == 1024);
    let c = p.cost(1024, 1024, 300, &plan.split).unwrap();
    assert_eq!(c, plan.cost);
}

#[test]
fn edge_column_split_rounds_to_64() {
    let p = sample().check().unwrap();
    // m = 256: CPU 1600, GPU 100 + 600*192/448; r_cpu/(r_cpu+r_gpu) = t_gpu/(t_cpu+t_gpu).
    let t_gpu: f64 = 100.0 + 600.0 * 192.0 / 448.0;
    let share = t_gpu / (1600.0 + t_gpu);
    let want = ((1024.0 * share / 64.0).round() as u32) * 64;
    assert_eq!(edge_cpu_cols(&p, 1024, 1024, 256).unwrap(), want);
    let plan = OpPlan::cpu_gpu_columns(&p, 1024, 1024, 256).unwrap();
    assert_eq!(plan.split.cols, want);
    assert_eq!(plan.strategy, Strategy::WeightCentric);
}

#[test]
fn bad_profiles_are_typed_errors() {
    assert_eq!(Profile::default().check().unwrap_err(), ProfileError::Empty);
    let mut p = sample();
    p.backends[0].backend = "tpu".into();
    assert_eq!(
        p.check().unwrap_err(),
        ProfileError::UnknownBackend("tpu".into())
    );
    for bad in [f64::NAN, -1.0, 0.0, f64::INFINITY] {
        let mut p = sample();
        p.backends[0].points[1].us = bad;
        assert_eq!(
            p.check().unwrap_err(),
            ProfileError::BadLatency {
                backend: Backend::Gpu,
                path: None,
                point: 1
            }
        );
    }
    let mut p = sample();
    p.backends[1].points[0].k = 0;
    assert_eq!(
        p.check().unwrap_err(),
        ProfileError::ZeroShape {
            backend: Backend::Cpu,
            path: None,
            point: 0
        }
    );
    let mut p = sample();
    p.backends[1].points.clear();
    assert_eq!(p.check().unwrap_err(), ProfileError::NoPoints(Backend::Cpu));
    let mut p = sample();
    p.backends[1].backend = "GPU".into();
    assert_eq!(
        p.check().unwrap_err(),
        ProfileError::DuplicateBackend(Backend::Gpu)
    );
    let mut p = sample();
    p.backends[2].sync_us = f64::NAN;
    assert!(matches!(
        p.check().unwrap_err(),
        ProfileError::BadCost { .. }
    ));
    let mut p = sample();
    p.backends[2].standard_m.clear();
    p.backends[2].graph_prepare_us = None;
    assert_eq!(p.check().unwrap_err(), ProfileError::NpuUnusable);
    let mut p = sample();
    p.backends[0].standard_m = vec![32];
    assert_eq!(
        p.check().unwrap_err(),
        ProfileError::BadStandardShapes(Backend::Gpu)
    );
}

#[test]
fn bad_shapes_are_typed_errors() {
    let p = sample().check().unwrap();
    assert_eq!(plan_op(&p, 0, 1, 1).unwrap_err(), PlanError::ZeroShape);
    assert_eq!(plan_op(&p, 1, 1, 0).unwrap_err(), PlanError::ZeroShape);
    let mut only_gpu = sample();
    only_gpu.backends.truncate(1);
    let g = only_gpu.check().unwrap();
    assert_eq!(
        OpPlan::single(&g, Backend::Npu, 8, 8, 8).unwrap_err(),
        PlanError::MissingBackend(Backend::Npu)
    );
    assert_eq!(
        OpPlan::weight_centric(&p, Backend::Cpu, Backend::Gpu, f64::NAN, 8, 8, 8).unwrap_err(),
        PlanError::BadRatio
    );
}

#[test]
fn json_roundtrip() {
    let s = serde_json::to_string(&sample()).unwrap();
    let back: Profile = serde_json::from_str(&s).unwrap();
    assert_eq!(back, sample());
    // The documented example (the profile format page, attached to `Profile`) parses and validates.
    let readme = include_str!("../docs/profile-format.md");
    let start = readme.find("```json").unwrap() + 7;
    let end = start + readme[start..].find("```").unwrap();
    let p = Profile::from_json(&readme[start..end]).unwrap();
    let c = p.check().unwrap();
    assert!(plan_op(&c, 2048, 2048, 300).is_ok());
    assert_eq!(c.path_name(Backend::Gpu, Phase::Decode), Some("gemv"));
    assert_eq!(
        c.pair(Backend::Gpu, Backend::Npu),
        Some((15.0, 1.0, Some(59.5)))
    );
    // CPU and NPU record no concurrent bandwidth: the roofline of the CPU's 20 GB/s and the
    // NPU's unknown one is the bus, memory_gbps.
    assert_eq!(
        c.pair(Backend::Cpu, Backend::Npu),
        Some((0.0, 1.0, Some(60.0)))
    );
}

#[test]
fn plan_op_smoke() {
    let p = sample().check().unwrap();
    for m in [1, 2, 31, 32, 33, 64, 100, 255, 256, 300, 700, 1000, 4096] {
        let plan = plan_op(&p, 1024, 1024, m).unwrap();
        let c = p.cost(1024, 1024, m, &plan.split).unwrap();
        assert_eq!(c, plan.cost, "m={m}");
        for b in [Backend::Cpu, Backend::Gpu, Backend::Npu] {
            let s = OpPlan::single(&p, b, 1024, 1024, m).unwrap();
            assert!(plan.predicted_us() <= s.predicted_us());
        }
    }
}

#[test]
fn extreme_shapes_do_not_panic() {
    // Overflow checks are on in the ci profile: huge shapes must plan without overflowing.
    let p = sample().check().unwrap();
    for (k, n, m) in [
        (u32::MAX, u32::MAX, u32::MAX),
        (1, u32::MAX, 1),
        (1, 1, u32::MAX),
        (u32::MAX, 65, u32::MAX - 3),
    ] {
        let plan = plan_op(&p, k, n, m).unwrap();
        assert!(plan.predicted_us() > 0.0);
        let area: u64 = plan
            .pieces()
            .as_slice()
            .iter()
            .map(|pc| pc.rows.len() as u64 * pc.cols.len() as u64)
            .sum();
        assert_eq!(area, m as u64 * n as u64);
        for b in Backend::ALL {
            let _ = OpPlan::single(&p, b, k, n, m).unwrap();
        }
        let _ = OpPlan::cpu_gpu_columns(&p, k, n, m).unwrap();
        let _ = OpPlan::weight_centric(&p, Backend::Gpu, Backend::Npu, 0.3, k, n, m).unwrap();
    }
    let model = ModelDesc::llama(u32::MAX, u32::MAX, 1, 1, u32::MAX, u32::MAX, u32::MAX).unwrap();
    let plan = plan_model(&p, &model, u32::MAX, Phase::Decode, Policy::Auto).unwrap();
    assert!(plan.predicted_us.is_finite());
}
