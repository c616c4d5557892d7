//! The C ABI from C (feature `capi-tests`): `tests/c/partition_capi_test.c` (compiled by
//! build.rs with the `cc` crate) plans tables and single matmuls through the C API; each entry
//! is compared here, field for field and bit for bit, with the Rust API's `PlanTable` /
//! `plan_with` on the same profile, over every policy kind and phase. Run: `cargo test
//! --profile ci -p hetero-partition --features capi-tests --test capi`. The same C runs
//! standalone under ASan + UBSan in `scripts/capi.sh test` (CI stage `capi`).
#![cfg(feature = "capi-tests")]

use hetero_partition::capi::*;
use hetero_partition::{
    plan_with, Backend, OpPlan, Order, Phase, PlanTable, Policy, Profile, Strategy,
};

#[link(name = "hetero_partition_ctest", kind = "static")]
extern "C" {
    fn ctest_partition_table(
        json: *const core::ffi::c_char,
        json_len: usize,
        phase: u32,
        policy: *const hetero_partition_policy,
        shapes: *const hetero_partition_shape,
        n_shapes: usize,
        max_m: u32,
        out: *mut hetero_partition_plan,
        cap: usize,
        len: *mut usize,
    ) -> i32;
    fn ctest_partition_op(
        json: *const core::ffi::c_char,
        json_len: usize,
        phase: u32,
        policy: *const hetero_partition_policy,
        k: u32,
        n: u32,
        m: u32,
        out: *mut hetero_partition_plan,
    ) -> i32;
    fn ctest_partition_bad_inputs(json: *const core::ffi::c_char, json_len: usize) -> i32;
    fn example_partition_plan(json: *const core::ffi::c_char, json_len: usize) -> i32;
}

/// The profile format page's example (the same text `tests/models.rs` reads).
fn doc_profile() -> &'static str {
    let doc = include_str!("../docs/profile-format.md");
    let start = doc.find("```json").expect("json block") + 7;
    let end = start + doc[start..].find("```").expect("block end");
    &doc[start..end]
}

fn snapdragon() -> &'static str {
    include_str!("../examples/snapdragon-8gen3.json")
}

fn code(b: Option<Backend>) -> u32 {
    use hetero_partition_backend::*;
    (match b {
        Some(Backend::Cpu) => HETERO_PARTITION_BACKEND_CPU,
        Some(Backend::Gpu) => HETERO_PARTITION_BACKEND_GPU,
        Some(Backend::Npu) => HETERO_PARTITION_BACKEND_NPU,
        None => HETERO_PARTITION_BACKEND_NONE,
    }) as u32
}

/// The C entry the Rust plan must give, written out here independently of the C API's code.
fn want(p: &OpPlan) -> hetero_partition_plan {
    let strategy = [
        Strategy::Single,
        Strategy::Padding,
        Strategy::OnlinePrepare,
        Strategy::NpuPipe,
        Strategy::ActivationCentric,
        Strategy::MultiTensorActivation,
        Strategy::WeightCentric,
        Strategy::Hybrid,
    ]
    .iter()
    .position(|&s| s == p.strategy)
    .expect("a strategy") as u32;
    let npu = p.split.npu;
    let x = p.extrapolation;
    hetero_partition_plan {
        k: p.k,
        n: p.n,
        m: p.m,
        strategy,
        a: code(Some(p.split.a)),
        b: code(p.split.b),
        rows: p.split.rows,
        cols: p.split.cols,
        npu_graph_m: npu.map_or(0, |e| e.graph_m),
        npu_chunks: npu.map_or(0, |e| e.chunks),
        npu_online: npu.map_or(0, |e| u32::from(e.online)),
        npu_order: npu.map_or(0, |e| u32::from(e.order == Order::WeightFirst)),
        a_us: p.cost.a_us,
        b_us: p.cost.b_us,
        copy_us: p.cost.copy_us,
        sync_us: p.cost.sync_us,
        split_us: p.cost.split_us,
        bus_us: p.cost.bus_us,
        total_us: p.cost.total_us,
        extrapolated: u32::from(x.is_some()),
        extrapolation_backend: x.map_or(0, |e| code(Some(e.backend))),
        extrapolation_rows: x.map_or(0, |e| e.rows),
        extrapolation_nearest_m: x.map_or(0, |e| e.nearest_m),
        extrapolation_nearest_k: x.map_or(0, |e| e.nearest_k),
        extrapolation_nearest_n: x.map_or(0, |e| e.nearest_n),
        extrapolation_factor: x.map_or(0.0, |e| e.factor),
    }
}

/// Bit-for-bit equality (f64 fields compared by bits, so NaN or -0.0 differences show).
fn same(a: &hetero_partition_plan, b: &hetero_partition_plan) -> bool {
    let bits = |p: &hetero_partition_plan| {
        [
            p.a_us,
            p.b_us,
            p.copy_us,
            p.sync_us,
            p.split_us,
            p.bus_us,
            p.total_us,
            p.extrapolation_factor,
        ]
        .map(f64::to_bits)
    };
    let ints = |p: &hetero_partition_plan| {
        [
            p.k,
            p.n,
            p.m,
            p.strategy,
            p.a,
            p.b,
            p.rows,
            p.cols,
            p.npu_graph_m,
            p.npu_chunks,
            p.npu_online,
            p.npu_order,
            p.extrapolated,
            p.extrapolation_backend,
            p.extrapolation_rows,
            p.extrapolation_nearest_m,
            p.extrapolation_nearest_k,
            p.extrapolation_nearest_n,
        ]
    };
    bits(a) == bits(b) && ints(a) == ints(b)
}

/// Every policy kind, as the C struct and the Rust value.
fn policies() -> Vec<(hetero_partition_policy, Policy)> {
    let p =
        |kind: hetero_partition_policy_kind, a: u32, b: u32, ratio: f64| hetero_partition_policy {
            kind: kind as u32,
            a,
            b,
            ratio,
        };
    use hetero_partition_policy_kind::*;
    vec![
        (p(HETERO_PARTITION_POLICY_AUTO, 0, 0, 0.0), Policy::Auto),
        (
            p(HETERO_PARTITION_POLICY_SINGLE, 1, 0, 0.0),
            Policy::Single(Backend::Gpu),
        ),
        (
            p(HETERO_PARTITION_POLICY_SINGLE, 0, 0, 0.0),
            Policy::Single(Backend::Cpu),
        ),
        (
            p(HETERO_PARTITION_POLICY_NPU_ACTIVATION, 1, 0, 0.0),
            Policy::NpuActivation(Backend::Gpu),
        ),
        (
            p(HETERO_PARTITION_POLICY_WEIGHT_CENTRIC, 2, 1, 0.375),
            Policy::WeightCentric(Backend::Npu, Backend::Gpu, 0.375),
        ),
        (
            p(HETERO_PARTITION_POLICY_CPU_GPU_COLUMNS, 0, 0, 0.0),
            Policy::CpuGpuColumns,
        ),
    ]
}

fn phases() -> [(u32, Option<Phase>); 3] {
    [
        (0, None),
        (1, Some(Phase::Prefill)),
        (2, Some(Phase::Decode)),
    ]
}

#[test]
fn tables_from_c_equal_the_rust_plan_table() {
    // The doc example (one shape measured) and the Snapdragon example (Llama-8B's shapes).
    type Case = (&'static str, Vec<(u32, u32)>, u32);
    let cases: [Case; 2] = [
        (
            doc_profile(),
            vec![(2048, 2048), (2048, 8192), (8192, 2048), (2048, 2048)],
            300,
        ),
        (
            snapdragon(),
            vec![
                (4096, 4096),
                (4096, 1024),
                (4096, 14336),
                (14336, 4096),
                (4096, 128256),
            ],
            64,
        ),
    ];
    let mut compared = 0usize;
    for (json, shapes, max_m) in &cases {
        let checked = Profile::from_json(json).unwrap().check().unwrap();
        let cshapes: Vec<hetero_partition_shape> = shapes
            .iter()
            .map(|&(k, n)| hetero_partition_shape { k, n })
            .collect();
        for (cpol, pol) in policies() {
            for (cphase, phase) in phases() {
                let rust = match phase {
                    None => PlanTable::build(&checked, pol, shapes, *max_m),
                    Some(p) => PlanTable::build_phase(&checked, p, pol, shapes, *max_m),
                };
                let cap = shapes.len() * *max_m as usize;
                let mut out = vec![
                    hetero_partition_plan {
                        k: u32::MAX,
                        ..zero()
                    };
                    cap
                ];
                let mut len = 0usize;
                // SAFETY: valid text, policy, shapes; `cap` writable entries; one length.
                let st = unsafe {
                    ctest_partition_table(
                        json.as_ptr().cast(),
                        json.len(),
                        cphase,
                        &cpol,
                        cshapes.as_ptr(),
                        cshapes.len(),
                        *max_m,
                        out.as_mut_ptr(),
                        cap,
                        &mut len,
                    )
                };
                let case = format!("{pol:?} phase {cphase}");
                match rust {
                    Err(e) => {
                        assert_eq!(st, HETERO_PARTITION_NO_PLAN, "{case}: Rust refused ({e})");
                    }
                    Ok(t) => {
                        assert_eq!(st, HETERO_PARTITION_OK, "{case}");
                        assert_eq!(len, t.shapes().len() * *max_m as usize, "{case}");
                        let mut i = 0;
                        for &(k, n) in t.shapes() {
                            for p in t.plans(k, n).unwrap() {
                                assert!(
                                    same(&out[i], &want(p)),
                                    "{case}: entry {i} (k={k} n={n} m={}):\nC    {:?}\nRust {:?}",
                                    p.m,
                                    out[i],
                                    want(p)
                                );
                                i += 1;
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    // Most combinations plan (the doc profile has all three backends).
    assert!(compared > 10_000, "only {compared} entries compared");
}

#[test]
fn single_plans_from_c_equal_plan_with() {
    let json = doc_profile();
    let checked = Profile::from_json(json).unwrap().check().unwrap();
    for (cpol, pol) in policies() {
        for (cphase, phase) in phases() {
            for &(k, n, m) in &[
                (2048, 2048, 1),
                (2048, 2048, 300),
                (2048, 4096, 37),
                (8192, 2048, 256),
            ] {
                let ph = phase.unwrap_or(Phase::of_rows(m));
                let mut out = zero();
                // SAFETY: valid text and policy; one output.
                let st = unsafe {
                    ctest_partition_op(
                        json.as_ptr().cast(),
                        json.len(),
                        cphase,
                        &cpol,
                        k,
                        n,
                        m,
                        &mut out,
                    )
                };
                match plan_with(&checked, ph, pol, k, n, m) {
                    Ok(p) => {
                        assert_eq!(st, HETERO_PARTITION_OK);
                        assert!(same(&out, &want(&p)), "{pol:?} {cphase} {k}x{n} m={m}");
                    }
                    Err(_) => assert_eq!(st, HETERO_PARTITION_NO_PLAN),
                }
            }
        }
    }
}

/// An all-zero entry.
fn zero() -> hetero_partition_plan {
    hetero_partition_plan {
        k: 0,
        n: 0,
        m: 0,
        strategy: 0,
        a: 0,
        b: 0,
        rows: 0,
        cols: 0,
        npu_graph_m: 0,
        npu_chunks: 0,
        npu_online: 0,
        npu_order: 0,
        a_us: 0.0,
        b_us: 0.0,
        copy_us: 0.0,
        sync_us: 0.0,
        split_us: 0.0,
        bus_us: 0.0,
        total_us: 0.0,
        extrapolated: 0,
        extrapolation_backend: 0,
        extrapolation_rows: 0,
        extrapolation_nearest_m: 0,
        extrapolation_nearest_k: 0,
        extrapolation_nearest_n: 0,
        extrapolation_factor: 0.0,
    }
}

#[test]
fn bad_json_and_bad_profiles_give_a_status_and_write_nothing() {
    let json = doc_profile();
    // SAFETY: valid text.
    let fails = unsafe { ctest_partition_bad_inputs(json.as_ptr().cast(), json.len()) };
    assert_eq!(fails, 0, "{fails} checks failed (stderr names them)");
}

#[test]
fn readme_example_runs() {
    let json = doc_profile();
    assert_eq!(
        // SAFETY: valid text.
        unsafe { example_partition_plan(json.as_ptr().cast(), json.len()) },
        0
    );
    let readme = include_str!("../README.md");
    let example = include_str!("c/partition_example.c");
    let body = &example[example.find("#include <stdio.h>").expect("example start")..];
    assert!(
        readme.contains(body),
        "README's From C example differs from tests/c/partition_example.c"
    );
}
