//! The shared-resource terms of the cost model by hand: processors that share cores, the
//! shared memory bus (measured or roofline), the fixed cost of a split, the hysteresis, the
//! row model's measured points, and extrapolation warnings.

mod common;
use common::*;
use hetero_partition::*;

// Hand-computed values are short sums and products of exact binary fractions or small
// decimals: compare with a relative tolerance of 1e-12 (a few ulps).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

const N: u32 = 6400; // 100 column tiles
const K: u32 = 1000;

/// CPU and GPU equally fast on one `K x N` weight at one row: 1 µs per column each.
fn twins() -> Profile {
    Profile {
        backends: vec![
            backend(
                "cpu",
                vec![pt(K, N, 1, 6400.0), pt(K, N, 64, 64.0 * 6400.0)],
            ),
            backend(
                "gpu",
                vec![pt(K, N, 1, 6400.0), pt(K, N, 64, 64.0 * 6400.0)],
            ),
        ],
        ..Profile::default()
    }
}

#[test]
fn independent_twins_split_in_half() {
    let p = twins().check().unwrap();
    let plan = plan_op_in(&p, Phase::Decode, K, N, 1).unwrap();
    assert_eq!(plan.strategy, Strategy::WeightCentric);
    assert_eq!(plan.split.cols, N / 2);
    assert!(close(plan.predicted_us(), 3200.0));
}

#[test]
fn backends_sharing_cores_are_serialized_and_never_split() {
    // PoCL: the "GPU" is the CPU's own cores.
    let mut prof = twins();
    prof.backends[1].shares_cores_with = Some("cpu".into());
    let p = prof.check().unwrap();
    assert_eq!(p.pair(Backend::Cpu, Backend::Gpu), Some((0.0, 0.0, None)));
    // A forced half split costs both halves one after the other.
    let half = plan_with(
        &p,
        Phase::Decode,
        Policy::WeightCentric(Backend::Cpu, Backend::Gpu, 0.5),
        K,
        N,
        1,
    )
    .unwrap();
    assert!(close(half.predicted_us(), 3200.0 + 3200.0));
    // The solver never plans a split between them, at any row count, in either phase.
    for phase in Phase::ALL {
        for m in 1..=256 {
            let plan = plan_op_in(&p, phase, K, N, m).unwrap();
            assert_eq!(plan.split.b, None, "{phase} m={m}: {plan:?}");
        }
    }
    // ... nor splits attention heads between them in decode.
    let model = ModelDesc::llama(K, N, 8, 2, 125, 2, 1000).unwrap();
    let mp = plan_model(&p, &model, 1, Phase::Decode, Policy::Auto).unwrap();
    assert!(mp
        .placements()
        .iter()
        .all(|pl| !matches!(pl, Placement::HeadSplit { .. })));
    // A measured concurrent point (overlap 0.8) shows a gain: the split comes back.
    prof.pairs = vec![PairProfile {
        backends: ["gpu".into(), "cpu".into()],
        overlap: Some(0.8),
        ..PairProfile::default()
    }];
    let p = prof.check().unwrap();
    let plan = plan_op_in(&p, Phase::Decode, K, N, 1).unwrap();
    assert_eq!(plan.split.cols, N / 2);
    // max + (1 - 0.8) * min = 3200 + 640.
    assert!(close(plan.predicted_us(), 3840.0), "{plan:?}");
}

#[test]
fn the_shared_bus_moves_the_split_to_where_it_crosses_the_compute() {
    // CPU weights at 1 byte per element, GPU at 2, both streaming at 2.5 GB/s together: at one
    // row the bus time is (K·(c + 2(N − c)) + 4K + 2N) / 2500 µs = 5126.72 − 0.4c, above the
    // compute crossing (c = 3200, 3200 µs), so the optimum moves right to where c = 5126.72 −
    // 0.4c (c = 3661.9): the grid point 3648, bus-bound at 5126.72 − 0.4·3648 = 3667.52 µs.
    let mut prof = twins();
    prof.backends[0].weight_bytes = Some(1.0);
    prof.pairs = vec![PairProfile {
        backends: ["cpu".into(), "gpu".into()],
        concurrent_gbps: Some(2.5),
        ..PairProfile::default()
    }];
    let p = prof.check().unwrap();
    let plan = plan_op_in(&p, Phase::Decode, K, N, 1).unwrap();
    assert_eq!(plan.split.cols, 3648, "{plan:?}");
    assert!(close(plan.cost.bus_us, 5126.72 - 0.4 * 3648.0), "{plan:?}");
    assert!(close(plan.predicted_us(), plan.cost.bus_us));
    // It is the best of every column split.
    for c in (1..N / 64).map(|t| t * 64) {
        let s = Split {
            a: Backend::Cpu,
            b: Some(Backend::Gpu),
            rows: 1,
            cols: c,
            npu: None,
        };
        let cost = p.cost_in(Phase::Decode, K, N, 1, &s).unwrap();
        assert!(cost.total_us >= plan.predicted_us(), "c={c}");
    }
}

#[test]
fn the_bus_roofline_comes_from_solo_bandwidths_and_memory_gbps() {
    let mut prof = twins();
    prof.backends[0].bandwidth_gbps = Some(30.0);
    prof.backends[1].bandwidth_gbps = Some(40.0);
    // Without memory_gbps, two processors do not add bandwidth: the faster solo one.
    let p = prof.clone().check().unwrap();
    assert_eq!(p.pair(Backend::Cpu, Backend::Gpu).unwrap().2, Some(40.0));
    // With it: the sum of the solos, capped by the bus.
    prof.memory_gbps = Some(60.0);
    assert_eq!(
        prof.clone()
            .check()
            .unwrap()
            .pair(Backend::Cpu, Backend::Gpu)
            .unwrap()
            .2,
        Some(60.0)
    );
    prof.memory_gbps = Some(100.0);
    assert_eq!(
        prof.clone()
            .check()
            .unwrap()
            .pair(Backend::Cpu, Backend::Gpu)
            .unwrap()
            .2,
        Some(70.0)
    );
    // A measured concurrent bandwidth wins over the roofline.
    prof.pairs = vec![PairProfile {
        backends: ["cpu".into(), "gpu".into()],
        concurrent_gbps: Some(45.0),
        ..PairProfile::default()
    }];
    assert_eq!(
        prof.check()
            .unwrap()
            .pair(Backend::Cpu, Backend::Gpu)
            .unwrap()
            .2,
        Some(45.0)
    );
    // And the bus term: at 40 GB/s a half split streams K·N·2 + 4K + 2N bytes.
    let mut prof = twins();
    prof.backends[0].bandwidth_gbps = Some(30.0);
    prof.backends[1].bandwidth_gbps = Some(40.0);
    let p = prof.check().unwrap();
    let s = Split {
        a: Backend::Cpu,
        b: Some(Backend::Gpu),
        rows: 1,
        cols: N / 2,
        npu: None,
    };
    let c = p.cost_in(Phase::Decode, K, N, 1, &s).unwrap();
    let bytes = (K as f64) * (N as f64) * 2.0 + 4.0 * K as f64 + 2.0 * N as f64;
    assert!(close(c.bus_us, bytes / 40e3), "{c:?}");
}

#[test]
fn a_split_pays_its_fixed_cost() {
    let mut prof = twins();
    prof.pairs = vec![PairProfile {
        backends: ["cpu".into(), "gpu".into()],
        split_us: 100.0,
        ..PairProfile::default()
    }];
    let p = prof.check().unwrap();
    let plan = plan_op_in(&p, Phase::Decode, K, N, 1).unwrap();
    assert_eq!(plan.cost.split_us, 100.0);
    assert!(close(plan.predicted_us(), 3200.0 + 100.0));
    // Singles pay nothing.
    let one = plan_with(&p, Phase::Decode, Policy::Single(Backend::Cpu), K, N, 1).unwrap();
    assert_eq!(one.cost.split_us, 0.0);
}

#[test]
fn hysteresis_keeps_one_backend_unless_the_split_gains_enough() {
    // The twins' half split takes 3200 µs against 6400 alone; a split cost makes its gain
    // exactly what we want: 4% (split 6144 µs) or 6% (6016 µs).
    let with = |split_us: f64, gain: Option<f64>| {
        let mut prof = twins();
        prof.min_split_gain = gain;
        prof.pairs = vec![PairProfile {
            backends: ["cpu".into(), "gpu".into()],
            split_us,
            ..PairProfile::default()
        }];
        plan_op_in(&prof.check().unwrap(), Phase::Decode, K, N, 1).unwrap()
    };
    // 4% < the default 5%: one backend (the CPU wins the tie with the GPU).
    let p = with(2944.0, None);
    assert_eq!(p.backends(), (Backend::Cpu, None));
    assert!(close(p.predicted_us(), 6400.0));
    // 6%: the split.
    let p = with(2816.0, None);
    assert_eq!(p.split.b, Some(Backend::Gpu));
    assert!(close(p.predicted_us(), 6016.0));
    // A user who wants 3% gets the 4% split.
    let p = with(2944.0, Some(0.03));
    assert_eq!(p.split.b, Some(Backend::Gpu));
    // Forced policies ignore the hysteresis.
    let mut prof = twins();
    prof.pairs = vec![PairProfile {
        backends: ["cpu".into(), "gpu".into()],
        split_us: 2944.0,
        ..PairProfile::default()
    }];
    let forced = plan_with(
        &prof.check().unwrap(),
        Phase::Decode,
        Policy::WeightCentric(Backend::Cpu, Backend::Gpu, 0.5),
        K,
        N,
        1,
    )
    .unwrap();
    assert_eq!(forced.split.b, Some(Backend::Gpu));
}

#[test]
fn measured_row_counts_are_read_exactly() {
    // A CPU measured at one row (a GEMV) and at 16: one row costs its measurement, not a
    // 16-row tile; two rows round up to the next tile (here the measured 16).
    let prof = Profile {
        backends: vec![backend(
            "cpu",
            vec![
                pt(64, 64, 1, 3.0),
                pt(64, 64, 16, 20.0),
                pt(64, 64, 64, 50.0),
            ],
        )],
        ..Profile::default()
    };
    let p = prof.check().unwrap();
    let l = |m| {
        p.latency_us_in(
            Backend::Cpu,
            Phase::Prefill,
            64,
            64,
            m,
            Order::ActivationFirst,
        )
        .unwrap()
    };
    assert_eq!(l(1), 3.0);
    assert_eq!(l(2), 20.0);
    assert_eq!(l(16), 20.0);
    // 17 rows: the tile of 32, between 16 (20) and 64 (50): 20 + 30·16/48.
    assert!(close(l(17), 30.0));
    // Beyond the last point, in whole tiles: 50 · ceil16(65) / 64.
    assert!(close(l(65), 50.0 * 80.0 / 64.0));
}

/// The case: an NPU whose only point is one row, with `standard_m: [1]`.
fn one_row_npu() -> Profile {
    let mut npu = backend("npu", vec![pt(64, 64, 1, 10.0)]);
    npu.standard_m = vec![1];
    npu.graph_prepare_us = Some(0.0);
    Profile {
        backends: vec![npu],
        ..Profile::default()
    }
}

#[test]
fn a_one_row_graph_costs_its_measurement_and_32_rows_say_they_extrapolate() {
    let p = one_row_npu().check().unwrap();
    // The 1-row standard graph: its measured 10 µs, not a 32-row extrapolation.
    let one = plan_op_in(&p, Phase::Decode, 64, 64, 1).unwrap();
    assert_eq!(one.split.npu.map(|e| e.graph_m), Some(1));
    assert!(close(one.predicted_us(), 10.0));
    assert_eq!(one.extrapolation, None);
    // 32 rows: a graph prepared for 32 rows, read 32x beyond the only point — and the plan
    // says so.
    let many = plan_op_in(&p, Phase::Prefill, 64, 64, 32).unwrap();
    assert_eq!(many.strategy, Strategy::OnlinePrepare, "{many:?}");
    let e = many.extrapolation.expect("a warning");
    assert_eq!((e.backend, e.rows, e.nearest_m), (Backend::Npu, 32, 1));
    assert_eq!(e.factor, 32.0);
    assert!(e.to_string().contains("32.0x"), "{e}");
    // A table lists the plans that extrapolate.
    let t = PlanTable::build_phase(&p, Phase::Prefill, Policy::Auto, &[(64, 64)], 8).unwrap();
    let far: Vec<u32> = t.extrapolated().map(|p| p.m).collect();
    // One row runs the measured graph; every larger count runs a graph prepared for it, whose
    // cost is read at a whole 32-row tile from the 1-row point.
    assert_eq!(far, (2..=8).collect::<Vec<u32>>());
}

#[test]
fn unmeasured_shapes_and_rows_far_away_are_flagged() {
    let prof = Profile {
        backends: vec![backend(
            "gpu",
            vec![pt(64, 64, 64, 100.0), pt(64, 64, 128, 200.0)],
        )],
        ..Profile::default()
    };
    let p = prof.check().unwrap();
    // Inside the measured rows and shape: nothing.
    assert_eq!(
        plan_op_in(&p, Phase::Prefill, 64, 64, 100)
            .unwrap()
            .extrapolation,
        None
    );
    // 16 rows read at the 64-row point: 4x, not beyond FAR.
    assert_eq!(
        plan_op_in(&p, Phase::Prefill, 64, 64, 16)
            .unwrap()
            .extrapolation,
        None
    );
    // One row: 64x below the first point.
    let e = plan_op_in(&p, Phase::Decode, 64, 64, 1)
        .unwrap()
        .extrapolation
        .unwrap();
    assert_eq!((e.rows, e.nearest_m, e.factor), (1, 64, 64.0));
    // 1024 rows: 8x beyond the last point.
    let e = plan_op_in(&p, Phase::Prefill, 64, 64, 1024)
        .unwrap()
        .extrapolation
        .unwrap();
    assert_eq!((e.rows, e.nearest_m, e.factor), (1024, 128, 8.0));
    // A shape with 16x the k·n: flagged; 2.25x: not.
    let e = plan_op_in(&p, Phase::Prefill, 256, 256, 100)
        .unwrap()
        .extrapolation
        .unwrap();
    assert_eq!((e.nearest_k, e.nearest_n, e.factor), (64, 64, 16.0));
    assert_eq!(
        plan_op_in(&p, Phase::Prefill, 96, 96, 100)
            .unwrap()
            .extrapolation,
        None
    );
}
