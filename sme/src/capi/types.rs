//! GGML type vocabulary from C: names, row sizes, the one dequantizer and the quantizers.

use core::ffi::c_char;

use super::*;
use crate::{dequantize_row, quantize_row, GgmlType};

/// The GGML type of a GGUF code, or `HETERO_SME_UNSUPPORTED_TYPE`.
pub(crate) fn ty_of(code: u32) -> Result<GgmlType, Fail> {
    GgmlType::from_code(code)
        .ok_or_else(|| Fail::new(HETERO_SME_UNSUPPORTED_TYPE, "unknown GGML type code"))
}

/// ggml's name of a GGUF type code (`"Q4_K"`, ...), static; `"unknown"` for codes outside
/// ggml's table.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_type_name(ggml_type: u32) -> *const c_char {
    static UNKNOWN: &core::ffi::CStr = c"unknown";
    guard_value(UNKNOWN.as_ptr(), || {
        let name: &'static core::ffi::CStr = match GgmlType::from_code(ggml_type) {
            Some(GgmlType::F32) => c"F32",
            Some(GgmlType::F16) => c"F16",
            Some(GgmlType::BF16) => c"BF16",
            Some(GgmlType::Q4_0) => c"Q4_0",
            Some(GgmlType::Q4_1) => c"Q4_1",
            Some(GgmlType::Q5_0) => c"Q5_0",
            Some(GgmlType::Q5_1) => c"Q5_1",
            Some(GgmlType::Q8_0) => c"Q8_0",
            Some(GgmlType::Q8_1) => c"Q8_1",
            Some(GgmlType::Q2K) => c"Q2_K",
            Some(GgmlType::Q3K) => c"Q3_K",
            Some(GgmlType::Q4K) => c"Q4_K",
            Some(GgmlType::Q5K) => c"Q5_K",
            Some(GgmlType::Q6K) => c"Q6_K",
            Some(GgmlType::Q8K) => c"Q8_K",
            Some(GgmlType::I8) => c"I8",
            Some(GgmlType::I16) => c"I16",
            Some(GgmlType::I32) => c"I32",
            Some(GgmlType::I64) => c"I64",
            Some(GgmlType::F64) => c"F64",
            Some(GgmlType::Other(_)) => c"other",
            None => UNKNOWN,
        };
        name.as_ptr()
    })
}

/// Bytes of a row of `k` elements of `ggml_type` into `*bytes`.
///
/// `HETERO_SME_UNSUPPORTED_TYPE` for a type without a tabulated size,
/// `HETERO_SME_INVALID_ARGUMENT` when `k` is not a whole number of blocks,
/// `HETERO_SME_OVERFLOW`.
///
/// Thread-safe.
///
/// # Safety
/// `bytes` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_type_row_bytes(
    ggml_type: u32,
    k: usize,
    bytes: *mut usize,
) -> hetero_sme_status {
    guard(|| {
        let ty = ty_of(ggml_type)?;
        let (be, bb) = ty.block().ok_or_else(|| {
            Fail::new(
                HETERO_SME_UNSUPPORTED_TYPE,
                "the type has no tabulated size",
            )
        })?;
        if !k.is_multiple_of(be) {
            return Err(Fail::new(
                HETERO_SME_INVALID_ARGUMENT,
                "k is not a whole number of blocks",
            ));
        }
        let n = (k / be)
            .checked_mul(bb)
            .ok_or_else(|| Fail::new(HETERO_SME_OVERFLOW, "row bytes overflow"))?;
        // SAFETY: the caller's contract.
        unsafe { put(bytes, n, "bytes") }
    })
}

/// Dequantizes one row: `src` (`src_len` bytes of `ggml_type`, 2-byte aligned for block types)
/// into `dst` (`n` floats, 4-byte aligned); `n` must be `src_len`'s whole number of values.
/// Exactly ggml's (and gguf-py's) values. Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
/// Q2_K … Q6_K.
///
/// Thread-safe (on distinct outputs).
///
/// # Safety
/// `src` valid for `src_len` byte reads, `dst` for `n` float writes (or null: refused).
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_dequantize_row(
    ggml_type: u32,
    src: *const u8,
    src_len: usize,
    dst: *mut f32,
    n: usize,
) -> hetero_sme_status {
    guard(|| {
        let ty = ty_of(ggml_type)?;
        nonnull(src, "src")?;
        nonnull(dst, "dst")?;
        super::aligned(dst, 4, "dst (4-byte alignment)")?;
        let need = ty
            .row_bytes(n)
            .ok_or_else(|| Fail::new(HETERO_SME_INVALID_ARGUMENT, "n is not whole blocks"))?;
        if need != src_len {
            return Err(Fail::new(
                HETERO_SME_INVALID_ARGUMENT,
                "src_len is not the row bytes of n values",
            ));
        }
        // SAFETY: the caller's contract: src_len readable bytes, n writable floats; the Rust
        // function checks everything before writing.
        let (s, d) = unsafe {
            (
                core::slice::from_raw_parts(src, src_len),
                core::slice::from_raw_parts_mut(dst, n),
            )
        };
        dequantize_row(ty, s, d)?;
        Ok(())
    })
}

/// Quantizes one row: `src` (`n` floats, 4-byte aligned) into `dst` (`dst_len` bytes, exactly
/// the row bytes of `n` values of `ggml_type`). Types: those `hetero_sme_dequantize_row`
/// reads. NaN/inf → `HETERO_SME_NON_FINITE`, |x| > 65504 for a type with FP16 scales →
/// `HETERO_SME_VALUE_OUT_OF_RANGE`; nothing written then.
///
/// Thread-safe (on distinct outputs).
///
/// # Safety
/// `src` valid for `n` float reads, `dst` for `dst_len` byte writes (or null: refused).
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_quantize_row(
    ggml_type: u32,
    src: *const f32,
    n: usize,
    dst: *mut u8,
    dst_len: usize,
) -> hetero_sme_status {
    guard(|| {
        let ty = ty_of(ggml_type)?;
        nonnull(src, "src")?;
        nonnull(dst, "dst")?;
        super::aligned(src, 4, "src (4-byte alignment)")?;
        let need = ty
            .row_bytes(n)
            .ok_or_else(|| Fail::new(HETERO_SME_INVALID_ARGUMENT, "n is not whole blocks"))?;
        if need != dst_len {
            return Err(Fail::new(
                HETERO_SME_INVALID_ARGUMENT,
                "dst_len is not the row bytes of n values",
            ));
        }
        // SAFETY: the caller's contract: n readable floats, dst_len writable bytes.
        let (s, d) = unsafe {
            (
                core::slice::from_raw_parts(src, n),
                core::slice::from_raw_parts_mut(dst, dst_len),
            )
        };
        quantize_row(ty, s, d)?;
        Ok(())
    })
}
