//! Row sizes of the tensor types the engine computes with. The format vocabulary and the
//! dequantizer are hetero-sme's ([`hetero_sme::GgmlType`], [`hetero_sme::dequantize_row`]).

use crate::gguf::GgmlType;

/// Bytes of one row of `k` elements of type `ty` (`None` if the type is not computable or `k`
/// is not a multiple of its block size).
pub fn row_bytes(ty: GgmlType, k: usize) -> Option<usize> {
    ty.can_dequantize().then(|| ty.row_bytes(k)).flatten()
}

/// Dequantizes one row; the sizes were checked when the model was loaded, so a mismatch (which
/// hetero-sme refuses, writing nothing) only leaves `out` as it was.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) {
    let _ = hetero_sme::dequantize_row(ty, src, out);
}
