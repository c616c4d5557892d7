//! The format vocabulary and the one dequantizer: GGUF codes round-trip, row sizes follow the
//! block table, every computable type dequantizes to what its definition says, and bad rows are
//! refused without writing.

use hetero_sme::{dequantize_row, Error, GgmlType};

fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

#[test]
fn codes_round_trip_and_sizes_follow_the_table() {
    for code in 0..64u32 {
        if let Some(t) = GgmlType::from_code(code) {
            assert_eq!(t.code(), code, "{t}");
        }
    }
    assert_eq!(GgmlType::from_code(4), None, "removed Q4_2");
    assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
    assert_eq!(GgmlType::Q6K.row_bytes(512), Some(2 * 210));
    assert_eq!(GgmlType::Q4_0.row_bytes(33), None);
    assert_eq!(GgmlType::Other(20).row_bytes(32), None);
    assert_eq!(
        GgmlType::F32.row_bytes(usize::MAX),
        None,
        "overflow is None"
    );
    assert_eq!(GgmlType::Q4K.to_string(), "Q4_K");
}

#[test]
fn every_computable_type_dequantizes_by_its_definition() {
    // Q4_0: d = 0.5, nibble i = i % 16 for element i (low) and 15 - i % 16 (high).
    let mut q4_0 = f16_bits(0.5).to_le_bytes().to_vec();
    q4_0.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let mut out = [f32::NAN; 32];
    dequantize_row(GgmlType::Q4_0, &q4_0, &mut out).unwrap();
    for i in 0..16 {
        assert_eq!(out[i], (i as f32 - 8.0) * 0.5);
        assert_eq!(out[i + 16], (7.0 - i as f32) * 0.5);
    }
    // Q4_1: d = 2, m = -1.
    let mut q4_1 = f16_bits(2.0).to_le_bytes().to_vec();
    q4_1.extend(f16_bits(-1.0).to_le_bytes());
    q4_1.extend((0..16u8).map(|i| i | (i << 4)));
    dequantize_row(GgmlType::Q4_1, &q4_1, &mut out).unwrap();
    for i in 0..16 {
        assert_eq!(out[i], i as f32 * 2.0 - 1.0);
        assert_eq!(out[i + 16], i as f32 * 2.0 - 1.0);
    }
    // Q8_0: d = 0.25, q = i - 16.
    let mut q8_0 = f16_bits(0.25).to_le_bytes().to_vec();
    q8_0.extend((0..32i32).map(|i| (i - 16) as i8 as u8));
    dequantize_row(GgmlType::Q8_0, &q8_0, &mut out).unwrap();
    for (i, o) in out.iter().enumerate() {
        assert_eq!(*o, (i as f32 - 16.0) * 0.25);
    }
    // Plain floats.
    let vals = [1.5f32, -2.0, 0.0, 65504.0];
    let mut o4 = [f32::NAN; 4];
    let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    dequantize_row(GgmlType::F32, &f32b, &mut o4).unwrap();
    assert_eq!(o4, vals);
    let f16b: Vec<u8> = vals
        .iter()
        .flat_map(|&v| f16_bits(v).to_le_bytes())
        .collect();
    dequantize_row(GgmlType::F16, &f16b, &mut o4).unwrap();
    assert_eq!(o4, vals);
    let bf16b: Vec<u8> = vals
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
        .collect();
    dequantize_row(GgmlType::BF16, &bf16b, &mut o4).unwrap();
    assert_eq!(o4, [1.5, -2.0, 0.0, 65536.0], "BF16 rounds 65504 to 65536");
}

#[test]
fn bad_rows_are_refused_and_nothing_is_written() {
    let mut out = [7.0f32; 32];
    let e = dequantize_row(GgmlType::Q4_0, &[0u8; 17], &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                expected: 18,
                got: 17,
                ..
            }
        ),
        "{e}"
    );
    let e = dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut out[..31]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = dequantize_row(GgmlType::Other(20), &[0u8; 18], &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::UnsupportedFormat {
            format: GgmlType::Other(20)
        }
    );
    let e = dequantize_row(GgmlType::I32, &[0u8; 128], &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::UnsupportedFormat {
            format: GgmlType::I32
        }
    );
    assert!(out.iter().all(|&v| v == 7.0));
}
