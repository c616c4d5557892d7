//! Parser robustness: truncations, garbage, absurd counts and random mutations of a small
//! synthetic GGUF file must yield errors (or a valid parse), never a panic or a huge allocation.

use engine_min::gguf::{self, Gguf, GgufError, Value};
use proptest::prelude::*;

fn synthetic() -> Vec<u8> {
    let q41 = vec![0x11u8; 2 * 20]; // 64 elements of Q4_1
    let f32s: Vec<u8> = (0..8u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    gguf::write(
        &[
            ("general.architecture", Value::String("llama".into())),
            ("a.u8", Value::U8(1)),
            ("a.i8", Value::I8(-1)),
            ("a.u16", Value::U16(2)),
            ("a.i16", Value::I16(-2)),
            ("a.u32", Value::U32(3)),
            ("a.i32", Value::I32(-3)),
            ("a.f32", Value::F32(0.5)),
            ("a.bool", Value::Bool(true)),
            ("a.u64", Value::U64(4)),
            ("a.i64", Value::I64(-4)),
            ("a.f64", Value::F64(0.25)),
            (
                "a.strs",
                Value::Array(
                    8,
                    vec![Value::String("x".into()), Value::String("yz".into())],
                ),
            ),
            (
                "a.nested",
                Value::Array(9, vec![Value::Array(4, vec![Value::U32(7)])]),
            ),
            ("a.empty", Value::Array(6, vec![])),
        ],
        &[("w", &[32, 2], 3, &q41), ("n", &[8], 0, &f32s)],
    )
}

#[test]
fn synthetic_round_trip() {
    let buf = synthetic();
    let g = Gguf::parse(&buf).expect("valid");
    assert_eq!(g.version, 3);
    assert_eq!(
        g.get("general.architecture").and_then(|v| v.as_str()),
        Some("llama")
    );
    assert_eq!(g.get("a.i64"), Some(&Value::I64(-4)));
    assert_eq!(g.get("a.f64").and_then(|v| v.as_f64()), Some(0.25));
    assert_eq!(
        g.get("a.strs").and_then(|v| v.as_array()).map(|a| a.len()),
        Some(2)
    );
    assert_eq!(g.get("a.empty"), Some(&Value::Array(6, vec![])));
    let n = g.tensor("n").expect("n");
    let d = g.tensor_data(&buf, n).expect("data");
    assert_eq!(&d[4..8], &1.0f32.to_le_bytes());
    assert_eq!(g.tensor("w").map(|t| t.size), Some(40));
    assert_eq!(g.data_offset % 32, 0);
}

#[test]
fn every_truncation_is_an_error() {
    let buf = synthetic();
    for len in 0..buf.len() - 1 {
        // Cutting only the padding after the last tensor's data keeps the file valid only if
        // the data is still in bounds; every cut before the data's end must fail.
        let r = Gguf::parse(&buf[..len]);
        assert!(r.is_err(), "truncated at {len} parsed");
    }
}

#[test]
fn garbage_and_bad_headers() {
    assert!(matches!(
        Gguf::parse(b"GGML\x03\0\0\0"),
        Err(GgufError::BadMagic(_))
    ));
    assert!(matches!(Gguf::parse(b""), Err(GgufError::Truncated { .. })));
    let mut v = synthetic();
    v[4] = 9;
    assert_eq!(
        Gguf::parse(&v).unwrap_err(),
        GgufError::UnsupportedVersion(9)
    );
    // Absurd tensor count.
    let mut v = synthetic();
    v[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        Gguf::parse(&v),
        Err(GgufError::ImplausibleCount { .. })
    ));
    // Absurd metadata count.
    let mut v = synthetic();
    v[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(
        Gguf::parse(&v),
        Err(GgufError::ImplausibleCount { .. })
    ));
    // Absurd key length (first key's length field).
    let mut v = synthetic();
    v[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    assert!(matches!(
        Gguf::parse(&v),
        Err(GgufError::ImplausibleCount { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Random byte overwrites (including inside counts and lengths) never panic.
    #[test]
    fn random_mutations_never_panic(muts in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
                                    cut in any::<usize>()) {
        let mut buf = synthetic();
        for (at, b) in muts {
            let i = at % buf.len();
            buf[i] = b;
        }
        let len = buf.len() - cut % 16;
        let _ = Gguf::parse(&buf[..len]);
    }

    /// Pure garbage after a valid magic and version never panics.
    #[test]
    fn garbage_after_magic(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut buf = b"GGUF\x03\0\0\0".to_vec();
        buf.extend_from_slice(&tail);
        let _ = Gguf::parse(&buf);
    }
}
