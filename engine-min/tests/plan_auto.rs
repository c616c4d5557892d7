//! `--plan auto` on a profile measured on this machine (needs `HETERO_MODEL` and OpenCL:
//! backend names `model`, `opencl`; PoCL in CI's model stage, whose "GPU" is this CPU): the
//! planner never keeps a split predicted to gain less than the profile's `min_split_gain`
//! (5%) over the best single backend (hysteresis), the profile says which processors share
//! cores, and the decision names one backend plainly when no split is kept.

use std::sync::Arc;
use std::time::Duration;

use engine_min::auto::{self, Workload};
use engine_min::model::Model;
use engine_min::profiler::{self, ProfileOptions};
use hetero_opencl_kernels::Device;
use hetero_partition::{plan_with, Backend as Pb, Policy, DEFAULT_MIN_SPLIT_GAIN};

mod common;

#[test]
fn auto_never_keeps_a_split_gaining_under_five_percent_on_a_measured_profile() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let Some(dev) = hetero_tests::require("opencl", Device::from_env().map_err(|e| e.to_string()))
    else {
        return;
    };
    let gpu_is_cpu = dev.info().is_cpu;
    drop(dev);
    let model = Arc::new(Model::load(&path).expect("model loads"));
    // A short profile: every curve's first row count is measured whatever the budget, the
    // rest extrapolated (the planner warns); the hysteresis must hold on whatever was measured.
    let opts = ProfileOptions {
        reps: 1,
        budget: Duration::from_secs(2),
        npu: false,
        ..ProfileOptions::default()
    };
    let profile = profiler::measure(&model, &opts, &mut |line| eprintln!("  {line}"))
        .expect("profile measured");
    let gpu = profile
        .backends
        .iter()
        .find(|b| b.backend == "gpu")
        .expect("the GPU was measured");
    assert_eq!(
        gpu.shares_cores_with.as_deref(),
        gpu_is_cpu.then_some("cpu"),
        "an OpenCL device that is the CPU shares its cores"
    );
    let pair = profile
        .pairs
        .first()
        .expect("the cpu-gpu pair was measured");
    assert!(
        pair.split_us >= 0.0 && pair.split_us.is_finite(),
        "{pair:?}"
    );
    assert!(pair.concurrent_gbps.is_some_and(|g| g > 0.0), "{pair:?}");

    let checked = auto::views(&profile).per_op.check().expect("per-op view");
    assert_eq!(checked.min_split_gain(), DEFAULT_MIN_SPLIT_GAIN);
    let w = Workload {
        prompt: 128,
        generate: 64,
    };
    let d = auto::decide(&profile, &model, 128, w).expect("decision");
    let (mut planned, mut splits) = (0, 0);
    for &(k, n) in d.plans.shapes() {
        for m in 1..=d.plans.max_m() {
            let plan = d
                .plans
                .get(k, n, m)
                .expect("every shape and row count planned");
            planned += 1;
            if plan.backends().1.is_none() {
                continue;
            }
            splits += 1;
            let phase = d.plans.phase_of(m);
            let best = [Pb::Cpu, Pb::Gpu]
                .iter()
                .filter_map(|&b| plan_with(&checked, phase, Policy::Single(b), k, n, m).ok())
                .map(|p| p.predicted_us())
                .fold(f64::INFINITY, f64::min);
            // Exact arithmetic on the same model: no tolerance beyond rounding.
            assert!(
                plan.predicted_us() <= (1.0 - DEFAULT_MIN_SPLIT_GAIN) * best * (1.0 + 1e-12),
                "k={k} n={n} m={m}: split predicted {} us, best single {best} us",
                plan.predicted_us()
            );
        }
    }
    eprintln!("{planned} plans, {splits} splits; {}", d.summary);
    // Said plainly: one backend, or a mixed plan with its splits counted.
    let backends = d.plans.backends();
    if d.mode == auto::Mode::Resident {
        assert!(
            d.summary
                .starts_with("plan: gpu alone, whole steps resident on the device"),
            "{}",
            d.summary
        );
    } else if let [b] = backends.as_slice() {
        assert_eq!(splits, 0);
        assert!(
            d.summary.starts_with(&format!("plan: {} alone", b.name()))
                && d.summary.contains("no split predicted to gain >= 5%"),
            "{}",
            d.summary
        );
    } else {
        assert!(d.summary.starts_with("plan: mixed"), "{}", d.summary);
    }
}
