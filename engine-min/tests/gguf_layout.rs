//! The parser's new checks (issue 17): the tensor table against the data section (overlaps,
//! sizes that do not account for the bytes, extents outside the file) and the memory the
//! parsed header may take. Each error names the tensor and the numbers.

use engine_min::gguf::{self, GgmlType, Gguf, GgufError, Value};
use engine_min::limits::{BudgetError, MemoryBudget};

/// F32 tensors of 8 and 64 elements (32 and 256 bytes) and a Q4_1 one of 40 bytes, written
/// contiguously with 32-byte alignment: offsets 0, 32, 288; a 352-byte data section.
fn three() -> Vec<u8> {
    let a = [1u8; 32];
    let b = [2u8; 256];
    let q = [3u8; 40];
    gguf::write(
        &[("general.architecture", Value::String("llama".into()))],
        &[
            ("a", &[8], 0, &a),
            ("b", &[64], 0, &b),
            ("q", &[32, 2], 3, &q),
        ],
    )
}

/// Byte position of tensor `name`'s type code in `buf`.
fn type_at(buf: &[u8], name: &str) -> usize {
    let g = Gguf::parse(buf).expect("parses");
    let mut key = (name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(name.as_bytes());
    let at = buf[..g.data_offset as usize]
        .windows(key.len())
        .rposition(|w| w == key)
        .expect("tensor info")
        + key.len();
    at + 4 + 8 * g.tensor(name).expect("tensor").dims.len()
}

#[test]
fn the_written_layout_is_accepted() {
    let buf = three();
    let g = Gguf::parse(&buf).expect("valid");
    assert_eq!(g.tensor("q").map(|t| t.offset), Some(288));
}

#[test]
fn a_tensor_running_into_the_next_is_named_with_both_offsets() {
    let mut buf = three();
    // `a` read as F64: 64 bytes from offset 0 run into `b` at 32.
    let at = type_at(&buf, "a");
    buf[at..at + 4].copy_from_slice(&28u32.to_le_bytes());
    let e = Gguf::parse(&buf).unwrap_err();
    assert_eq!(
        e,
        GgufError::TensorOverlap {
            name: "a".into(),
            ty: GgmlType::F64,
            offset: 0,
            size: 64,
            next: "b".into(),
            next_offset: 32,
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("`a`") && msg.contains("`b`") && msg.contains("64 bytes"),
        "{msg}"
    );
}

#[test]
fn a_tensor_smaller_than_its_space_is_a_size_mismatch() {
    let mut buf = three();
    // `b` read as F16: 128 of its 256 bytes unexplained.
    let at = type_at(&buf, "b");
    buf[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(
        Gguf::parse(&buf).unwrap_err(),
        GgufError::TensorSizeMismatch {
            name: "b".into(),
            ty: GgmlType::F16,
            dims: vec![64],
            size: 128,
            space: 256,
        }
    );
    // A shrink of less than the alignment is indistinguishable from padding: `a` (32 bytes)
    // read as F16 leaves 16 bytes, which the layout allows.
    let mut buf = three();
    let at = type_at(&buf, "a");
    buf[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    assert!(Gguf::parse(&buf).is_ok());
    // Bytes after the last tensor: up to alignment - 1 are padding, more are not. `q` (40
    // bytes) is followed by 24 bytes of padding; 7 more still pass, 8 more do not.
    let mut buf = three();
    buf.extend_from_slice(&[0; 7]);
    assert!(Gguf::parse(&buf).is_ok());
    buf.push(0);
    let e = Gguf::parse(&buf).unwrap_err();
    assert!(
        matches!(e, GgufError::TensorSizeMismatch { ref name, size: 40, space: 72, .. } if name == "q"),
        "{e:?}"
    );
}

#[test]
fn out_of_bounds_names_the_extent() {
    let buf = three();
    // The data section is 352 bytes (q: 40 at offset 288, padded); cut to 320, q ends past it.
    let e = Gguf::parse(&buf[..buf.len() - 32]).unwrap_err();
    let GgufError::TensorOutOfBounds {
        name,
        offset,
        size,
        data_len,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(
        (name.as_str(), *offset, *size, *data_len),
        ("q", 288, 40, 320)
    );
    assert!(e.to_string().contains("40 bytes at data offset 288"), "{e}");
}

#[test]
fn untabulated_types_are_not_size_checked_but_end_the_tensor_before_them() {
    // `b` retyped to an IQ code (size unknown, 0): `a` still ends where `b` starts.
    let mut buf = three();
    let at = type_at(&buf, "b");
    buf[at..at + 4].copy_from_slice(&16u32.to_le_bytes());
    let g = Gguf::parse(&buf).expect("parses");
    assert_eq!(
        g.tensor("b").map(|t| (t.ty, t.size)),
        Some((GgmlType::Other(16), 0))
    );
}

#[test]
fn the_header_memory_is_charged_before_allocation() {
    // 100000 one-byte array elements become 100000 `Value`s (32 bytes each in memory).
    let arr = Value::Array(0, vec![Value::U8(7); 100_000]);
    let buf = gguf::write(&[("big", arr)], &[]);
    assert!(Gguf::parse(&buf).is_ok());
    let e = Gguf::parse_with(&buf, &MemoryBudget::with_limit(1 << 20)).unwrap_err();
    let GgufError::Memory(BudgetError::OverBudget { need, limit, .. }) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*limit, 1 << 20);
    assert!(*need > *limit);
    let msg = e.to_string();
    assert!(
        msg.contains("MiB") && msg.contains("GGUF metadata"),
        "{msg}"
    );
    println!("{msg}");
}
