//! Row dequantization of the ggml tensor types the engine computes with.

use crate::gguf::GgmlType;
use half::{bf16, f16};

/// Whether the engine can compute with tensors of type `ty`.
pub fn supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q8_0
    )
}

/// Bytes of one row of `k` elements of type `ty` (`None` if unsupported or `k` is not a
/// multiple of the block size).
pub fn row_bytes(ty: GgmlType, k: usize) -> Option<usize> {
    let (be, bb) = ty.block()?;
    let (be, bb) = (be as usize, bb as usize);
    (supported(ty) && k.is_multiple_of(be)).then_some(k / be * bb)
}

fn h(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Dequantizes one row: `src` holds exactly `row_bytes(ty, out.len())` bytes.
///
/// The caller guarantees the sizes match (checked when the model is loaded); a mismatch only
/// leaves part of `out` unwritten, it never reads out of bounds.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(18)) {
                let d = h(b, 0);
                for j in 0..16 {
                    o[j] = d * ((b[2 + j] & 15) as i32 - 8) as f32;
                    o[j + 16] = d * ((b[2 + j] >> 4) as i32 - 8) as f32;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(20)) {
                let (d, m) = (h(b, 0), h(b, 2));
                for j in 0..16 {
                    o[j] = d * (b[4 + j] & 15) as f32 + m;
                    o[j + 16] = d * (b[4 + j] >> 4) as f32 + m;
                }
            }
        }
        GgmlType::Q8_0 => {
            for (o, b) in out.chunks_exact_mut(32).zip(src.chunks_exact(34)) {
                let d = h(b, 0);
                for j in 0..32 {
                    o[j] = d * (b[2 + j] as i8) as f32;
                }
            }
        }
        _ => {}
    }
}
