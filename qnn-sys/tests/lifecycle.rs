//! Session lifecycles on the HTP simulator, in their own process (see `simulator.rs` for why
//! sessions with different device configs must not coexist there): load/unload cycles, an
//! ARCH-only device config, the simulator's default device, a refused device config, and a
//! device config in the wrong layout. One test function, so the sessions are strictly one after
//! another.

mod common;

use common::run_case;
use half::f16;
use hetero_tests::require;
use qnn_sys::ffi::*;
use qnn_sys::simple::{GraphOptions, MatMulShape, Order};
use qnn_sys::{BackendLibrary, HtpDeviceConfig, Session, SessionOptions, Version};
use std::sync::Arc;

const SHAPE: MatMulShape = MatMulShape { m: 7, k: 33, n: 17 };

#[test]
fn sessions_one_after_another() {
    let Some(first) = require("qnn", BackendLibrary::load_htp()) else {
        return;
    };
    drop(first);

    // 1. Load, build, execute, unload: twice (dlclose + dlopen in one process).
    for round in 0..2 {
        let lib = Arc::new(BackendLibrary::load_htp().expect("load"));
        let opts = SessionOptions {
            soc_model: Some(69),
            ..Default::default()
        };
        let s = Session::new(lib, &opts).expect("session");
        run_case::<f16>(
            &s,
            SHAPE,
            Order::Direct,
            &GraphOptions::default(),
            80 + round,
        );
    }

    let lib = Arc::new(BackendLibrary::load_htp().expect("load"));

    // 2. An ARCH config (v75) in the layout the backend's HTP API requires.
    {
        let opts = SessionOptions {
            htp_arch: Some(QNN_HTP_DEVICE_ARCH_V75),
            ..Default::default()
        };
        let s = Session::new(Arc::clone(&lib), &opts).expect("arch session");
        run_case::<f16>(&s, SHAPE, Order::WeightFirst, &GraphOptions::default(), 90);
    }

    // 3. No device config: the simulator's default device (SM8350 = 30, v68, 4 MB VTCM).
    {
        let s = Session::new(Arc::clone(&lib), &SessionOptions::default()).expect("session");
        let info = s.htp_platform_info().expect("platform info");
        eprintln!("default device: {info:?}");
        assert!(!info.is_empty());
        run_case::<f16>(&s, SHAPE, Order::Direct, &GraphOptions::default(), 91);
    }

    // 4. A session whose device config the backend refuses: a typed error carrying the backend's
    //    text, everything created so far freed, and the next session works.
    {
        let bad = SessionOptions {
            soc_model: Some(0xFFFF),
            ..Default::default()
        };
        let err = Session::new(Arc::clone(&lib), &bad).expect_err("unknown SoC must be refused");
        eprintln!("{err}");
        assert_eq!(err.qnn_code(), Some(QNN_DEVICE_ERROR_INVALID_CONFIG));
        let opts = SessionOptions {
            soc_model: Some(69),
            ..Default::default()
        };
        let s = Session::new(Arc::clone(&lib), &opts).expect("session after a failed one");
        run_case::<f16>(&s, SHAPE, Order::Direct, &GraphOptions::default(), 92);
    }

    // 5. A real failing call turned into text: the pre-5.47 device config layout given to a
    //    >= 5.47 backend is refused with 14001 (QNN_DEVICE_ERROR_INVALID_CONFIG).
    let htp_api = lib.api_version().backendApiVersion;
    if HtpDeviceConfig::uses_current_layout(htp_api) {
        let old = Version {
            major: 5,
            minor: 40,
            patch: 0,
        };
        let mut cfg = HtpDeviceConfig::soc(old, 69);
        let dc = QnnDevice_Config_t {
            option: QNN_CONFIG_OPTION_CUSTOM,
            u: QnnDevice_ConfigValue_t {
                customConfig: cfg.as_mut_ptr(),
            },
        };
        let list = [&dc as *const QnnDevice_Config_t, std::ptr::null()];
        let create = lib.fns().deviceCreate.expect("deviceCreate");
        let _device = qnn_sys::device_lock();
        let mut dev: Qnn_DeviceHandle_t = std::ptr::null_mut();
        // SAFETY: deviceCreate(NULL logger, NULL-terminated config list alive for the call,
        // out-pointer), under the process-wide QNN lock.
        let rc = unsafe { create(std::ptr::null_mut(), list.as_ptr(), &mut dev) };
        let err = lib
            .check("deviceCreate", rc)
            .expect_err("legacy layout must be refused");
        eprintln!("{err}");
        assert_eq!(err.qnn_code(), Some(QNN_DEVICE_ERROR_INVALID_CONFIG));
        assert!(err.to_string().contains("INVALID_CONFIG"), "{err}");
        if !dev.is_null() {
            // SAFETY: a device handle returned by deviceCreate, freed once.
            unsafe { lib.fns().deviceFree.expect("deviceFree")(dev) };
        }
    }
}
