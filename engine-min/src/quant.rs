//! Row sizes of the tensor types the engine computes with. The format vocabulary and the
//! dequantizer are hetero-sme's ([`hetero_sme::GgmlType`], [`hetero_sme::dequantize_row`]);
//! the engine calls that dequantizer directly (the test oracle in [`crate::reference`] keeps
//! its own scalar one on purpose).

use crate::gguf::GgmlType;

/// Bytes of one row of `k` elements of type `ty` (`None` if the type is not computable or `k`
/// is not a multiple of its block size).
pub fn row_bytes(ty: GgmlType, k: usize) -> Option<usize> {
    ty.can_dequantize().then(|| ty.row_bytes(k)).flatten()
}
