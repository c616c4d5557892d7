//! Draft-budget allocator and whole-model plans, by hand.

mod common;
use common::*;
use hetero_partition::*;

#[test]
fn hal_update_and_allocation_by_hand() {
    let mut d = DraftBudget::new(3, BudgetParams::EDGE_AGENT).unwrap();
    assert_eq!(d.average(0).unwrap(), 4.0);
    let mut out = [0u32; 3];
    // Equal averages: spare 16 - 3 = 13, each floor(13/3) = 4 -> 5 slots, 15 handed out.
    assert_eq!(d.allocate(&[true; 3], &mut out).unwrap(), 15);
    assert_eq!(out, [5, 5, 5]);
    // A_0 = 0.3 * 10 + 0.7 * 4 = 5.8.
    d.update(0, 10.0).unwrap();
    assert!((d.average(0).unwrap() - 5.8).abs() < 1e-12);
    d.allocate(&[true; 3], &mut out).unwrap();
    // softmax(5.8, 4, 4): e^1.8 / (e^1.8 + 2) = 0.7512...; 13 * that = 9.77 -> 9; others
    // 13 / (e^1.8 + 2) = 1.617 -> 1.
    let e = 1.8f64.exp();
    let want0 = 1 + (13.0 * e / (e + 2.0)).floor() as u32;
    let want1 = 1 + (13.0 / (e + 2.0)).floor() as u32;
    assert_eq!(out, [want0, want1, want1]);
    assert_eq!((want0, want1), (10, 2));
    // Suspend agent 0: the two others share 14 spare slots equally: 1 + 7 each.
    d.allocate(&[false, true, true], &mut out).unwrap();
    assert_eq!(out, [0, 8, 8]);
}

#[test]
fn allocator_errors() {
    let p = BudgetParams {
        l_min: 6,
        ..BudgetParams::EDGE_AGENT
    };
    let d = DraftBudget::new(3, p).unwrap();
    let mut out = [0u32; 3];
    assert_eq!(
        d.allocate(&[true; 3], &mut out).unwrap_err(),
        BudgetError::Oversubscribed {
            active: 3,
            needed: 18,
            total: 16
        }
    );
    // Two active agents fit (12 <= 16).
    assert!(d.allocate(&[true, true, false], &mut out).is_ok());
    assert_eq!(
        d.allocate(&[true; 2], &mut out).unwrap_err(),
        BudgetError::LengthMismatch
    );
    let bad = BudgetParams {
        gamma: 0.0,
        ..BudgetParams::EDGE_AGENT
    };
    assert_eq!(
        DraftBudget::new(2, bad).unwrap_err(),
        BudgetError::BadParams
    );
    let bad = BudgetParams {
        tau: f64::NAN,
        ..BudgetParams::EDGE_AGENT
    };
    assert_eq!(
        DraftBudget::new(2, bad).unwrap_err(),
        BudgetError::BadParams
    );
    assert_eq!(
        DraftBudget::new(0, BudgetParams::EDGE_AGENT).unwrap_err(),
        BudgetError::TooManyAgents
    );
    let mut d = DraftBudget::new(2, BudgetParams::EDGE_AGENT).unwrap();
    assert_eq!(d.update(2, 1.0).unwrap_err(), BudgetError::NoSuchAgent(2));
    assert_eq!(d.update(0, -1.0).unwrap_err(), BudgetError::BadAccepted);
    // All suspended: nothing handed out.
    let mut out = [9u32; 2];
    assert_eq!(d.allocate(&[false; 2], &mut out).unwrap(), 0);
    assert_eq!(out, [0, 0]);
}

#[test]
fn head_split() {
    // 32 query heads in 8 KV groups of 4; CPU at 1/3 of the combined rate: 8/3 = 2.67 -> 3
    // groups = 12 heads.
    assert_eq!(split_heads(32, 8, 1.0, 2.0).unwrap(), (12, 20));
    assert_eq!(split_heads(32, 8, 0.0, 1.0).unwrap(), (0, 32));
    assert_eq!(split_heads(32, 8, 1.0, 0.0).unwrap(), (32, 0));
    assert!(split_heads(30, 8, 1.0, 1.0).is_err());
    assert!(split_heads(32, 8, f64::NAN, 1.0).is_err());
}

fn tiny_llama() -> ModelDesc {
    ModelDesc::llama(1024, 2048, 16, 4, 64, 32, 4096).unwrap()
}

#[test]
fn model_plan_places_every_op() {
    let p = sample().check().unwrap();
    let model = tiny_llama();
    for (m, phase) in [
        (1, Phase::Decode),
        (4, Phase::Decode),
        (300, Phase::Prefill),
    ] {
        let plan = plan_model(&p, &model, m, phase, Policy::Auto).unwrap();
        assert_eq!(plan.placements().len(), model.ops().len());
        let mut layer = 0.0;
        for (op, pl) in model.ops().iter().zip(plan.placements()) {
            match (op, pl) {
                (LayerOp::MatMul { k, n }, Placement::MatMul(q)) => {
                    assert_eq!((q.k, q.n, q.m), (*k, *n, m));
                    assert_eq!(*q, plan_op(&p, *k, *n, m).unwrap());
                    layer += q.predicted_us();
                }
                (
                    LayerOp::Attention { .. },
                    Placement::HeadSplit {
                        cpu_heads,
                        gpu_heads,
                    },
                ) => {
                    assert_eq!(phase, Phase::Decode);
                    assert_eq!(cpu_heads + gpu_heads, 16);
                    assert_eq!(cpu_heads % 4, 0);
                }
                (LayerOp::MatMul { .. }, _) => panic!("matmul not planned"),
                (_, Placement::On(b)) => assert_eq!(*b, Backend::Gpu),
                (_, other) => panic!("unexpected {other:?}"),
            }
        }
        let head_m = if phase == Phase::Prefill { 1 } else { m };
        assert_eq!(plan.lm_head, plan_op(&p, 1024, 4096, head_m).unwrap());
        let want = layer * 32.0 + plan.lm_head.predicted_us();
        assert!((plan.predicted_us - want).abs() <= 1e-9 * want);
    }
}

#[test]
fn model_policies() {
    let p = sample().check().unwrap();
    let model = tiny_llama();
    let auto = plan_model(&p, &model, 300, Phase::Prefill, Policy::Auto).unwrap();
    for policy in [
        Policy::Single(Backend::Cpu),
        Policy::Single(Backend::Gpu),
        Policy::Single(Backend::Npu),
        Policy::NpuActivation(Backend::Gpu),
        Policy::WeightCentric(Backend::Npu, Backend::Gpu, 0.5),
        Policy::CpuGpuColumns,
    ] {
        let forced = plan_model(&p, &model, 300, Phase::Prefill, policy).unwrap();
        assert!(
            auto.predicted_us <= forced.predicted_us * (1.0 + 1e-12),
            "{policy:?}"
        );
        if let Policy::Single(b) = policy {
            for pl in forced.placements() {
                if let Placement::MatMul(q) = pl {
                    assert_eq!(q.backends(), (b, None));
                }
            }
        }
    }
    // NPU activation at m = 16 (below the smallest standard shape) falls back to the GPU.
    let small = plan_model(
        &p,
        &model,
        16,
        Phase::Prefill,
        Policy::NpuActivation(Backend::Gpu),
    )
    .unwrap();
    for pl in small.placements() {
        if let Placement::MatMul(q) = pl {
            assert_eq!(q.backends(), (Backend::Gpu, None));
        }
    }
}

#[test]
fn model_errors() {
    assert_eq!(
        ModelDesc::llama(0, 1, 1, 1, 1, 1, 1).unwrap_err(),
        ModelError::BadShape
    );
    assert_eq!(
        ModelDesc::llama(8, 8, 6, 4, 2, 1, 8).unwrap_err(),
        ModelError::BadShape
    );
    let many = [LayerOp::Add { dim: 1 }; MAX_LAYER_OPS + 1];
    assert_eq!(
        ModelDesc::new(&many, 1, 1, 1).unwrap_err(),
        ModelError::TooManyOps
    );
    let p = sample().check().unwrap();
    assert_eq!(
        plan_model(&p, &tiny_llama(), 0, Phase::Decode, Policy::Auto).unwrap_err(),
        PlanError::ZeroShape
    );
    let mut npu_only = sample();
    npu_only.backends.retain(|b| b.backend == "npu");
    let q = npu_only.check().unwrap();
    assert_eq!(
        plan_model(&q, &tiny_llama(), 64, Phase::Prefill, Policy::Auto).unwrap_err(),
        PlanError::MissingBackend(Backend::Gpu)
    );
}

#[test]
fn tiny_and_huge_temperatures() {
    // τ -> 0: all spare slots go to the best agent; no NaN from overflowing A/τ.
    let p = BudgetParams {
        tau: 1e-300,
        ..BudgetParams::EDGE_AGENT
    };
    let mut d = DraftBudget::new(3, p).unwrap();
    d.update(1, 10.0).unwrap();
    let mut out = [0u32; 3];
    assert_eq!(d.allocate(&[true; 3], &mut out).unwrap(), 16);
    assert_eq!(out, [1, 14, 1]);
    // τ huge: shares equal.
    let p = BudgetParams {
        tau: 1e300,
        ..BudgetParams::EDGE_AGENT
    };
    let mut d = DraftBudget::new(3, p).unwrap();
    d.update(1, 10.0).unwrap();
    d.allocate(&[true; 3], &mut out).unwrap();
    assert_eq!(out, [5, 5, 5]);
}
