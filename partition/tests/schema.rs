//! The profile schema: strict reading (unknown fields are errors naming the field and its
//! line), round trips, and every validation error of the new fields.

mod common;
use common::*;
use hetero_partition::*;

/// A two-backend profile with every new field, one field per line so lines can be asserted.
const FULL: &str = r#"{
  "device": "test",
  "notes": ["hand-written"],
  "min_split_gain": 0.1,
  "memory_gbps": 60,
  "backends": [
    {
      "backend": "cpu",
      "sync_us": 0,
      "bandwidth_gbps": 20,
      "points": [ { "k": 64, "n": 64, "m": 1, "us": 5 } ]
    },
    {
      "backend": "gpu",
      "shares_cores_with": "cpu",
      "weight_bytes": 0.5625,
      "paths": [
        { "name": "gemv", "phase": "decode", "points": [ { "k": 64, "n": 64, "m": 1, "us": 4 } ] },
        { "name": "gemm", "phase": "prefill", "points": [ { "k": 64, "n": 64, "m": 64, "us": 40 } ] }
      ]
    }
  ],
  "pairs": [ { "backends": ["cpu", "gpu"], "split_us": 12, "overlap": 0.5 } ]
}"#;

fn unknown(text: &str) -> (String, usize) {
    match Profile::from_json(text) {
        Err(ParseError::UnknownField { field, line, .. }) => (field, line),
        other => panic!("expected an unknown-field error, got {other:?}"),
    }
}

#[test]
fn the_full_schema_reads_and_validates() {
    let p = Profile::from_json(FULL).unwrap();
    assert_eq!(p.notes, vec!["hand-written".to_string()]);
    assert_eq!(p.backends[1].paths.len(), 2);
    assert_eq!(p.backends[1].shares_cores_with.as_deref(), Some("cpu"));
    let c = p.check().unwrap();
    assert_eq!(c.min_split_gain(), 0.1);
    assert_eq!(c.path_name(Backend::Gpu, Phase::Decode), Some("gemv"));
    assert_eq!(c.path_name(Backend::Gpu, Phase::Prefill), Some("gemm"));
    assert_eq!(c.path_name(Backend::Cpu, Phase::Decode), Some(""));
    // A measured overlap replaces the shared-cores default (0). No concurrent bandwidth is
    // measured and the GPU records no solo bandwidth, so memory_gbps alone caps the pair.
    assert_eq!(
        c.pair(Backend::Cpu, Backend::Gpu),
        Some((12.0, 0.5, Some(60.0)))
    );
    // Round trip through serde.
    let back = Profile::from_json(&serde_json::to_string_pretty(&p).unwrap()).unwrap();
    assert_eq!(back, p);
}

#[test]
fn unknown_fields_are_errors_with_their_name_and_line() {
    let cases = [
        // (field, its misspelling, the line it lands on in FULL)
        ("sync_us", "sync_usec", 9),
        ("us", "usec", 11),
        ("memory_gbps", "memory_gb", 5),
        ("phase", "phases", 18),
        ("split_us", "split_usec", 23),
    ];
    for (good, field, line) in cases {
        let good = format!("\"{good}\":");
        assert!(FULL.contains(&good), "{good}");
        let text = FULL.replacen(&good, &format!("\"{field}\":"), 1);
        assert_eq!(unknown(&text), (field.to_string(), line), "{field}");
        let msg = Profile::from_json(&text).unwrap_err().to_string();
        assert!(
            msg.contains(field) && msg.contains(&format!("line {line}")),
            "{msg}"
        );
    }
    // The message lists what is allowed there.
    let text = FULL.replacen("\"sync_us\": 0", "\"sync_usec\": 0", 1);
    match Profile::from_json(&text).unwrap_err() {
        ParseError::UnknownField { expected, .. } => assert!(expected.contains("sync_us")),
        e => panic!("{e:?}"),
    }
}

#[test]
fn other_json_errors_say_where() {
    // A missing comma on line 3.
    let text = FULL.replacen("\"test\",", "\"test\"", 1);
    match Profile::from_json(&text).unwrap_err() {
        ParseError::Json { line, .. } => assert_eq!(line, 3),
        e => panic!("{e:?}"),
    }
    // A missing field.
    let e = Profile::from_json(
        r#"{ "backends": [ { "backend": "gpu", "points": [ { "k": 1, "n": 1, "m": 1 } ] } ] }"#,
    )
    .unwrap_err();
    assert!(matches!(e, ParseError::Json { .. }), "{e:?}");
    assert!(e.to_string().contains("missing field `us`"), "{e}");
    // A wrong type.
    let e = Profile::from_json(r#"{ "backends": [], "min_split_gain": "five" }"#).unwrap_err();
    assert!(matches!(e, ParseError::Json { line: 1, .. }), "{e:?}");
}

fn with(edit: impl FnOnce(&mut Profile)) -> Result<CheckedProfile, ProfileError> {
    let mut p = Profile::from_json(FULL).unwrap();
    edit(&mut p);
    p.check()
}

#[test]
fn bad_new_fields_are_typed_errors() {
    let err = |edit: fn(&mut Profile)| with(edit).unwrap_err();
    assert_eq!(
        err(|p| p.backends[1].paths[1].phase = Some(Phase::Decode)),
        ProfileError::DuplicatePath {
            backend: Backend::Gpu,
            phase: Some(Phase::Decode)
        }
    );
    assert_eq!(
        err(|p| {
            p.backends[1].paths[0].phase = None;
            p.backends[1].points = vec![pt(64, 64, 1, 4.0)];
        }),
        ProfileError::DuplicatePath {
            backend: Backend::Gpu,
            phase: None
        }
    );
    assert_eq!(
        err(|p| p.backends[1].paths[1].points.clear()),
        ProfileError::EmptyPath {
            backend: Backend::Gpu,
            path: 1
        }
    );
    assert_eq!(
        err(|p| p.backends[1].paths.clear()),
        ProfileError::NoPoints(Backend::Gpu)
    );
    assert_eq!(
        err(|p| p.backends[1].paths[0].points[0].us = 0.0),
        ProfileError::BadLatency {
            backend: Backend::Gpu,
            path: Some(0),
            point: 0
        }
    );
    assert_eq!(
        err(|p| p.backends[1].shares_cores_with = Some("gpu".into())),
        ProfileError::BadSharing(Backend::Gpu)
    );
    assert_eq!(
        err(|p| p.backends[1].shares_cores_with = Some("npu".into())),
        ProfileError::BadSharing(Backend::Gpu)
    );
    assert_eq!(
        err(|p| p.backends[1].shares_cores_with = Some("dsp".into())),
        ProfileError::UnknownBackend("dsp".into())
    );
    assert_eq!(
        err(|p| p.backends[1].weight_bytes = Some(0.0)),
        ProfileError::BadCost {
            backend: Backend::Gpu,
            field: "weight_bytes"
        }
    );
    for gain in [1.0, -0.1, f64::NAN] {
        let mut p = Profile::from_json(FULL).unwrap();
        p.min_split_gain = Some(gain);
        assert_eq!(
            p.check().unwrap_err(),
            ProfileError::BadField("min_split_gain")
        );
    }
    assert_eq!(
        err(|p| p.memory_gbps = Some(0.0)),
        ProfileError::BadField("memory_gbps")
    );
    let pair = |edit: fn(&mut PairProfile)| with(|p| edit(&mut p.pairs[0])).unwrap_err();
    assert!(matches!(
        pair(|q| q.backends[1] = "cpu".into()),
        ProfileError::BadPair { pair: 0, .. }
    ));
    assert!(matches!(
        pair(|q| q.backends[1] = "npu".into()),
        ProfileError::BadPair { pair: 0, .. }
    ));
    assert_eq!(
        pair(|q| q.backends[1] = "tpu".into()),
        ProfileError::UnknownBackend("tpu".into())
    );
    assert!(matches!(
        pair(|q| q.split_us = -1.0),
        ProfileError::BadPair { .. }
    ));
    assert!(matches!(
        pair(|q| q.overlap = Some(1.5)),
        ProfileError::BadPair { .. }
    ));
    assert!(matches!(
        pair(|q| q.concurrent_gbps = Some(0.0)),
        ProfileError::BadPair { .. }
    ));
    let e = with(|p| {
        let again = p.pairs[0].clone();
        p.pairs.push(again);
    })
    .unwrap_err();
    assert_eq!(
        e,
        ProfileError::BadPair {
            pair: 1,
            why: "repeats an earlier pair"
        }
    );
    assert_eq!(e.to_string(), "pairs[1]: repeats an earlier pair");
    let mut c = Profile::from_json(FULL).unwrap().check().unwrap();
    assert_eq!(
        c.set_min_split_gain(1.0),
        Err(ProfileError::BadField("min_split_gain"))
    );
    assert_eq!(c.min_split_gain(), 0.1, "a refused setting changes nothing");
    c.set_min_split_gain(0.0).unwrap();
    assert_eq!(c.min_split_gain(), 0.0);
}

#[test]
fn a_backend_without_a_path_for_a_phase_is_absent_in_that_phase() {
    let mut p = Profile::from_json(FULL).unwrap();
    p.backends[1].paths.truncate(1); // the GPU keeps its decode path only
    let c = p.check().unwrap();
    assert!(c.has_phase(Backend::Gpu, Phase::Decode));
    assert!(!c.has_phase(Backend::Gpu, Phase::Prefill));
    assert_eq!(
        plan_with(&c, Phase::Prefill, Policy::Single(Backend::Gpu), 64, 64, 32).unwrap_err(),
        PlanError::NoPath(Backend::Gpu, Phase::Prefill)
    );
    // Auto in prefill plans on the CPU alone; in decode it may use both.
    let plan = plan_op_in(&c, Phase::Prefill, 64, 64, 32).unwrap();
    assert_eq!(plan.backends(), (Backend::Cpu, None));
    assert!(plan_op_in(&c, Phase::Decode, 64, 64, 1).is_ok());
    assert!(PlanError::NoPath(Backend::Gpu, Phase::Prefill)
        .to_string()
        .contains("prefill"));
}

#[test]
fn each_phase_reads_its_own_curve() {
    let c = Profile::from_json(FULL).unwrap().check().unwrap();
    let gpu = |phase, m| {
        c.latency_us_in(Backend::Gpu, phase, 64, 64, m, Order::ActivationFirst)
            .unwrap()
    };
    // Decode: the GEMV's point (4 us at one row); prefill: the GEMM's (40 us at 64 rows,
    // flat below).
    assert_eq!(gpu(Phase::Decode, 1), 4.0);
    assert_eq!(gpu(Phase::Prefill, 1), 40.0);
    assert_eq!(gpu(Phase::Prefill, 64), 40.0);
    // latency_us without a phase takes Phase::of_rows: one row is decode.
    assert_eq!(
        c.latency_us(Backend::Gpu, 64, 64, 1, Order::ActivationFirst)
            .unwrap(),
        4.0
    );
    assert_eq!(Phase::of_rows(1), Phase::Decode);
    assert_eq!(Phase::of_rows(2), Phase::Prefill);
}

#[test]
fn engine_min_style_notes_are_accepted() {
    let mut p = sample();
    p.notes = vec!["measured by engine-min profile".into()];
    let text = serde_json::to_string(&p).unwrap();
    assert!(text.contains("\"notes\""));
    assert_eq!(Profile::from_json(&text).unwrap(), p);
    // Without notes the field is left out.
    assert!(!serde_json::to_string(&sample()).unwrap().contains("notes"));
}
