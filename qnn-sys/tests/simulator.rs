//! Tests against a real QNN HTP backend (the x86-64 simulator from onnxruntime-qnn 2.7.0),
//! loaded by absolute path from `QNN_HTP_LIB` (and `QNN_SYSTEM_LIB`). Without those variables
//! every test prints a skip line, unless `HETERO_REQUIRE` names `qnn`, which turns the absence
//! into a failure.
//!
//! The tests share one session (SoC 69). On the simulator, graphs fail to execute (QNN error
//! 1100, "Could't match allocated VTCM pointer to a VXU VTCM") while another thread uses a
//! session with a different device config, which the crate refuses with
//! `Error::DeviceConfigConflict` (tested here). Sessions with other device configs are tested in
//! `lifecycle.rs`, a separate process, one after another.

mod common;

use common::{check, random, run_case};
use half::f16;
use hetero_tests::require;
use qnn_sys::ffi::*;
use qnn_sys::simple::{GraphOptions, MatMulGraph, MatMulShape, Order, WeightLayout};
use qnn_sys::{
    BackendLibrary, Error, Requirement, Session, SessionOptions, SystemLibrary, Version,
};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::{Arc, OnceLock};

fn htp() -> Option<Arc<BackendLibrary>> {
    require("qnn", BackendLibrary::load_htp()).map(Arc::new)
}

/// The process-wide session (SoC 69 = SM8750, HTP v79), created on first use.
fn shared_session() -> Option<Arc<Session>> {
    static SESSION: OnceLock<Arc<Session>> = OnceLock::new();
    let lib = htp()?;
    let s = SESSION.get_or_init(|| {
        let opts = SessionOptions {
            soc_model: Some(69),
            ..Default::default()
        };
        match Session::new(lib, &opts) {
            Ok(s) => s,
            Err(e) => panic!("session: {e}"),
        }
    });
    Some(Arc::clone(s))
}

const SHAPES: [MatMulShape; 4] = [
    MatMulShape { m: 1, k: 64, n: 32 },
    MatMulShape { m: 7, k: 33, n: 17 },
    MatMulShape {
        m: 32,
        k: 64,
        n: 48,
    },
    MatMulShape {
        m: 64,
        k: 256,
        n: 128,
    },
];

#[test]
fn provider_and_api_version() {
    let Some(lib) = htp() else { return };
    let v = lib.api_version();
    eprintln!(
        "provider {:?}, backend id {}, core API {}, HTP API {}, build {:?}",
        lib.provider_name(),
        lib.backend_id(),
        v.coreApiVersion,
        v.backendApiVersion,
        lib.build_id()
    );
    assert_eq!(lib.backend_id(), QNN_BACKEND_ID_HTP);
    assert_eq!(v.coreApiVersion.major, 2);
    assert!(
        v.coreApiVersion.minor >= 32,
        "core API {}",
        v.coreApiVersion
    );
    assert_eq!(
        v.backendApiVersion.major, 5,
        "HTP API {}",
        v.backendApiVersion
    );
    assert_eq!(
        lib.query_api_version(),
        Ok(v),
        "backendGetApiVersion disagrees with the provider"
    );
    assert!(!lib.build_id().unwrap_or_default().is_empty());
    // propertyHasCapability: the device group is supported, a nonsense key is unknown.
    let has = lib
        .fns()
        .propertyHasCapability
        .expect("propertyHasCapability");
    // SAFETY: propertyHasCapability takes a key and has no other preconditions.
    let device = unsafe { has(QNN_PROPERTY_GROUP_DEVICE) };
    // SAFETY: as above.
    let unknown = unsafe { has(999_999) };
    assert_eq!(device, QNN_PROPERTY_SUPPORTED);
    assert_eq!(unknown & 0xFFFF, QNN_PROPERTY_ERROR_UNKNOWN_KEY);
}

#[test]
fn errors_are_turned_into_text() {
    let Some(lib) = htp() else { return };
    let msg = lib.error_message(QNN_DEVICE_ERROR_INVALID_CONFIG);
    assert!(msg.contains("INVALID_CONFIG"), "{msg}");
}

#[test]
fn platform_info_reports_an_htp_device() {
    let Some(s) = shared_session() else { return };
    let info = s.htp_platform_info().expect("platform info");
    eprintln!("{info:?}");
    assert!(!info.is_empty());
    assert!(info[0].arch >= 68 && info[0].arch < 200, "{info:?}");
    assert!(info[0].soc_model > 0 && info[0].vtcm_mb > 0, "{info:?}");
}

#[test]
fn system_library_loads() {
    let Some(sys) = require("qnn", SystemLibrary::load_from_env()) else {
        return;
    };
    let v = sys.api_version();
    eprintln!("QnnSystem API {v}");
    assert_eq!(v.major, 1);
    let create = sys.fns().systemContextCreate.expect("systemContextCreate");
    let free = sys.fns().systemContextFree.expect("systemContextFree");
    let mut h: QnnSystemContext_Handle_t = std::ptr::null_mut();
    // SAFETY: systemContextCreate(out-pointer).
    assert_eq!(unsafe { create(&mut h) }, QNN_SUCCESS);
    assert!(!h.is_null());
    // SAFETY: h came from systemContextCreate and is freed once.
    assert_eq!(unsafe { free(h) }, QNN_SUCCESS);
}

#[test]
fn matmul_fp16_direct() {
    let Some(s) = shared_session() else { return };
    for (i, &shape) in SHAPES.iter().enumerate() {
        run_case::<f16>(
            &s,
            shape,
            Order::Direct,
            &GraphOptions::default(),
            10 + i as u64,
        );
    }
}

#[test]
fn matmul_fp16_weight_first() {
    let Some(s) = shared_session() else { return };
    for (i, &shape) in SHAPES.iter().enumerate().skip(1) {
        run_case::<f16>(
            &s,
            shape,
            Order::WeightFirst,
            &GraphOptions::default(),
            20 + i as u64,
        );
        run_case::<f16>(
            &s,
            shape,
            Order::WeightFirstTransposedOutput,
            &GraphOptions::default(),
            30 + i as u64,
        );
    }
}

#[test]
fn matmul_fp32_io_fp16_precision() {
    let Some(s) = shared_session() else { return };
    for (i, &shape) in SHAPES.iter().enumerate().skip(1) {
        run_case::<f32>(
            &s,
            shape,
            Order::Direct,
            &GraphOptions::default(),
            40 + i as u64,
        );
    }
    run_case::<f32>(
        &s,
        SHAPES[2],
        Order::WeightFirst,
        &GraphOptions::default(),
        50,
    );
}

#[test]
fn matmul_weights_given_as_n_by_k() {
    let Some(s) = shared_session() else { return };
    let opts = GraphOptions {
        weights: WeightLayout::NxK,
        ..Default::default()
    };
    for (i, order) in [
        Order::Direct,
        Order::WeightFirst,
        Order::WeightFirstTransposedOutput,
    ]
    .into_iter()
    .enumerate()
    {
        run_case::<f16>(&s, SHAPES[1], order, &opts, 110 + i as u64);
        run_case::<f16>(&s, SHAPES[3], order, &opts, 120 + i as u64);
    }
    run_case::<f32>(&s, SHAPES[2], Order::Direct, &opts, 130);
}

#[test]
fn graph_configs_are_accepted() {
    let Some(s) = shared_session() else { return };
    let shape = SHAPES[2];
    for opts in [
        GraphOptions {
            precision: Some(QNN_PRECISION_FLOAT16),
            vtcm_mb: Some(8),
            optimization_level: Some(3),
            ..Default::default()
        },
        GraphOptions {
            precision: None,
            vtcm_mb: None,
            optimization_level: Some(1),
            ..Default::default()
        },
    ] {
        run_case::<f16>(&s, shape, Order::Direct, &opts, 60);
    }
}

#[test]
fn second_sessions_same_device_only() {
    let Some(s) = shared_session() else { return };
    let lib = Arc::clone(s.library());
    for other in [
        SessionOptions {
            soc_model: Some(57),
            ..Default::default()
        },
        SessionOptions {
            htp_arch: Some(QNN_HTP_DEVICE_ARCH_V79),
            ..Default::default()
        },
        SessionOptions {
            soc_model: None,
            ..Default::default()
        },
    ] {
        let r = Session::new(Arc::clone(&lib), &other);
        match r {
            Err(Error::DeviceConfigConflict { active, requested }) => {
                assert_eq!(active, s.device_choice());
                assert_eq!(requested.soc_model, other.soc_model);
                assert_eq!(requested.htp_arch, other.htp_arch);
            }
            other => panic!("expected DeviceConfigConflict, got {other:?}"),
        }
    }
    // Same device config: a second backend works, and so does a second context on the first.
    let same = SessionOptions {
        soc_model: s.device_choice().soc_model,
        htp_arch: s.device_choice().htp_arch,
        ..Default::default()
    };
    let s2 = Session::new(Arc::clone(&lib), &same).expect("second session, same device");
    let s3 = s.new_context().expect("second context");
    let shape = MatMulShape { m: 8, k: 48, n: 24 };
    run_case::<f16>(&s2, shape, Order::Direct, &GraphOptions::default(), 100);
    run_case::<f16>(
        &s3,
        shape,
        Order::WeightFirst,
        &GraphOptions::default(),
        101,
    );
    run_case::<f16>(&s, shape, Order::Direct, &GraphOptions::default(), 102);
}

#[test]
fn one_graph_from_two_threads() {
    let Some(s) = shared_session() else { return };
    let shape = MatMulShape {
        m: 16,
        k: 64,
        n: 32,
    };
    let mut rng = StdRng::seed_from_u64(70);
    let (w, wf) = random::<f16>(&mut rng, shape.weights_len(), 0.125);
    let inputs: Vec<(Vec<f16>, Vec<f64>)> = (0..2)
        .map(|_| random::<f16>(&mut rng, shape.input_len(), 1.0))
        .collect();
    let g =
        MatMulGraph::new(&s, shape, &w, Order::Direct, &GraphOptions::default()).expect("build");
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|sc| {
        for (t, (x, xf)) in inputs.iter().enumerate() {
            let (g, barrier, wf) = (&g, &barrier, &wf);
            sc.spawn(move || {
                let mut y = vec![f16::NAN; shape.output_len()];
                barrier.wait();
                for run in 0..8 {
                    y.fill(f16::NAN);
                    g.execute(x, &mut y).expect("execute");
                    check(shape, xf, wf, &y, false, &format!("thread {t} run {run}"));
                }
            });
        }
    });
}

#[test]
fn bad_input_missing_library() {
    match BackendLibrary::load("/nonexistent/dir/libQnnHtp.so", &Requirement::HTP) {
        Err(Error::LibraryNotFound { path, dlerror }) => {
            assert!(path.contains("/nonexistent/dir"));
            assert!(dlerror.contains("No such file"), "{dlerror}");
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
}

#[test]
fn bad_input_not_a_qnn_backend() {
    match BackendLibrary::load("libc.so.6", &Requirement::HTP) {
        Err(Error::NotQnnBackend { path, reason }) => {
            assert_eq!(path, "libc.so.6");
            assert!(reason.contains("QnnInterface_getProviders"), "{reason}");
        }
        other => panic!("expected NotQnnBackend, got {other:?}"),
    }
    // The system library: the same typed errors.
    match SystemLibrary::load("libc.so.6", &Requirement::SYSTEM) {
        Err(Error::MissingSymbol { symbol, .. }) => {
            assert_eq!(symbol, "QnnSystemInterface_getProviders")
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    let too_new = Requirement {
        backend_id: None,
        api: Version {
            major: 1,
            minor: 999,
            patch: 0,
        },
    };
    // The rest needs a loadable libQnnSystem.so (absent, or of another architecture: skip).
    let Some(sys) = require("qnn", SystemLibrary::load_from_env()) else {
        return;
    };
    let sys_path = sys.library().path().to_owned();
    match SystemLibrary::load(&sys_path, &too_new) {
        Err(Error::IncompatibleApi { found, needed }) => {
            assert_eq!(found.major, 1);
            assert_eq!(needed, too_new.api);
        }
        other => panic!("expected IncompatibleApi, got {other:?}"),
    }
    let r = BackendLibrary::load(&sys_path, &Requirement::HTP);
    assert!(
        matches!(r, Err(Error::NotQnnBackend { .. })),
        "libQnnSystem as a backend: {r:?}"
    );
}

#[test]
fn bad_input_wrong_backend_and_old_api() {
    let Some(lib) = htp() else { return };
    let found = lib.api_version().coreApiVersion;
    let path = lib.library().path().to_owned();
    let needed = Version {
        major: 2,
        minor: found.minor + 1,
        patch: 0,
    };
    let r = BackendLibrary::load(
        &path,
        &Requirement {
            backend_id: Some(QNN_BACKEND_ID_HTP),
            api: needed,
        },
    );
    assert_eq!(r.err(), Some(Error::IncompatibleApi { found, needed }));
    let r = BackendLibrary::load(
        &path,
        &Requirement {
            backend_id: Some(QNN_BACKEND_ID_GPU),
            api: Version {
                major: 2,
                minor: 32,
                patch: 0,
            },
        },
    );
    assert_eq!(
        r.err(),
        Some(Error::WrongBackend {
            found: QNN_BACKEND_ID_HTP,
            expected: QNN_BACKEND_ID_GPU
        })
    );
    // The Saver backend (id 2) that ships next to libQnnHtp.so is a QNN backend, not HTP.
    let saver = std::path::Path::new(&path).with_file_name("libQnnSaver.so");
    if saver.exists() {
        let r = BackendLibrary::load(&saver, &Requirement::HTP);
        assert_eq!(
            r.err(),
            Some(Error::WrongBackend {
                found: QNN_BACKEND_ID_SAVER,
                expected: QNN_BACKEND_ID_HTP
            })
        );
    }
}

#[test]
fn bad_input_buffers_and_shapes() {
    let Some(s) = shared_session() else { return };
    let shape = MatMulShape { m: 4, k: 16, n: 8 };
    let w = vec![f16::ONE; shape.weights_len()];
    let r = MatMulGraph::new(
        &s,
        shape,
        &w[..w.len() - 1],
        Order::Direct,
        &GraphOptions::default(),
    );
    assert_eq!(
        r.err(),
        Some(Error::BufferTooSmall {
            what: "weights",
            needed: 128,
            got: 127
        })
    );
    let zero = MatMulShape { m: 0, k: 16, n: 8 };
    let r = MatMulGraph::new(&s, zero, &w, Order::Direct, &GraphOptions::default());
    assert!(matches!(r, Err(Error::InvalidShape { .. })), "{r:?}");
    let huge = MatMulShape {
        m: 1 << 20,
        k: 1 << 12,
        n: 8,
    };
    let r = MatMulGraph::<f16>::new(&s, huge, &w, Order::Direct, &GraphOptions::default());
    assert!(
        matches!(
            r,
            Err(Error::BufferTooSmall { .. } | Error::InvalidShape { .. })
        ),
        "{r:?}"
    );
    let bad_opt = GraphOptions {
        optimization_level: Some(4),
        ..Default::default()
    };
    let r = MatMulGraph::new(&s, shape, &w, Order::Direct, &bad_opt);
    assert!(matches!(r, Err(Error::InvalidShape { .. })), "{r:?}");

    let g =
        MatMulGraph::new(&s, shape, &w, Order::Direct, &GraphOptions::default()).expect("build");
    let x = vec![f16::ONE; shape.input_len()];
    let mut y = vec![f16::NAN; shape.output_len()];
    assert_eq!(
        g.execute(&x[..63], &mut y),
        Err(Error::BufferTooSmall {
            what: "input",
            needed: 64,
            got: 63
        })
    );
    assert_eq!(
        g.execute(&x, &mut y[..31]),
        Err(Error::BufferTooSmall {
            what: "output",
            needed: 32,
            got: 31
        })
    );
    assert!(
        y.iter().all(|v| v.is_nan()),
        "a refused execute must not write"
    );
    // Larger buffers are fine: only the first output_len elements are written.
    let mut big = vec![f16::NAN; shape.output_len() + 5];
    g.execute(&x, &mut big).expect("execute");
    assert!(
        big[..32].iter().all(|v| v.to_f32() == 16.0),
        "{:?}",
        &big[..32]
    );
    assert!(big[32..].iter().all(|v| v.is_nan()));
}
