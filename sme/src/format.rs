//! The one vocabulary of GGML tensor element types, their block sizes, and the one dequantizer.
//!
//! Every crate of the family that handles GGUF tensors names their type with [`GgmlType`] (the
//! codes GGUF stores) and turns a row into FP32 with [`dequantize_row`]; the kernels' own
//! packed forms are built from the same blocks (see `quant.rs`, `int8.rs`).

use core::fmt;

use crate::blocks::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K};
use crate::portable::f16_to_f32;
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock};
use crate::Error;

/// ggml tensor element types: the codes GGUF stores, one variant per code of ggml's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
    /// Any other code in ggml's table (IQ formats and friends): parsed, not sized, not
    /// computable.
    Other(u32),
}

impl GgmlType {
    /// Maps a GGUF type code; `None` for codes outside ggml's table.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            24 => Self::I8,
            25 => Self::I16,
            26 => Self::I32,
            27 => Self::I64,
            28 => Self::F64,
            30 => Self::BF16,
            16..=23 | 29 | 34..=35 | 39 => Self::Other(code),
            _ => return None,
        })
    }

    /// The GGUF type code.
    pub fn code(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Q8K => 15,
            Self::I8 => 24,
            Self::I16 => 25,
            Self::I32 => 26,
            Self::I64 => 27,
            Self::F64 => 28,
            Self::BF16 => 30,
            Self::Other(c) => c,
        }
    }

    /// ggml's name of the type (`Q4_K`, `BF16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
            Self::I8 => "I8",
            Self::I16 => "I16",
            Self::I32 => "I32",
            Self::I64 => "I64",
            Self::F64 => "F64",
            Self::BF16 => "BF16",
            Self::Other(_) => "other",
        }
    }

    /// `(elements per block, bytes per block)`; `None` for types whose size is not tabulated.
    pub fn block(self) -> Option<(usize, usize)> {
        Some(match self {
            Self::F32 | Self::I32 => (1, 4),
            Self::F16 | Self::BF16 | Self::I16 => (1, 2),
            Self::I8 => (1, 1),
            Self::I64 | Self::F64 => (1, 8),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q8_1 => (32, 36),
            Self::Q2K => (256, 84),
            Self::Q3K => (256, 110),
            Self::Q4K => (256, 144),
            Self::Q5K => (256, 176),
            Self::Q6K => (256, 210),
            Self::Q8K => (256, 292),
            Self::Other(_) => return None,
        })
    }

    /// Bytes of a row of `k` elements: `None` when the size is not tabulated, `k` is not a
    /// whole number of blocks, or the size overflows.
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        let (be, bb) = self.block()?;
        if !k.is_multiple_of(be) {
            return None;
        }
        (k / be).checked_mul(bb)
    }

    /// Whether [`dequantize_row`] converts this type (the types a model's tensors may have).
    pub fn can_dequantize(self) -> bool {
        matches!(
            self,
            Self::F32
                | Self::F16
                | Self::BF16
                | Self::Q4_0
                | Self::Q4_1
                | Self::Q5_0
                | Self::Q5_1
                | Self::Q8_0
                | Self::Q2K
                | Self::Q3K
                | Self::Q4K
                | Self::Q5K
                | Self::Q6K
        )
    }

    /// Whether this is a K-quant (256-value super-blocks).
    pub fn is_k_quant(self) -> bool {
        matches!(
            self,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K
        )
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(c) => write!(f, "ggml type {c}"),
            t => f.write_str(t.name()),
        }
    }
}

/// Block formats: each block's own `dequantize` (the kernels' packers read the same blocks).
/// GGUF data is only 2-aligned by luck, so the blocks are copied out of the bytes one by one.
fn blocks<B: QuantBlock>(src: &[u8], out: &mut [f32]) -> Result<(), Error> {
    for (o, b) in out
        .chunks_exact_mut(B::ELEMS)
        .zip(src.chunks_exact(B::BYTES))
    {
        o.copy_from_slice(B::read_unaligned(b)?.dequantize().as_ref());
    }
    Ok(())
}

/// Dequantizes one row of `out.len()` elements of type `ty` from its GGUF bytes `src` (exactly
/// [`GgmlType::row_bytes`] long). The one dequantizer of the family: the engine's embedding
/// lookup and f32 fallback, the NPU's FP16 conversion and the OpenCL host code all call it.
///
/// Errors (nothing written): [`Error::UnsupportedFormat`] when the type is not computable,
/// [`Error::ShapeMismatch`] when `src` is not the row's size.
pub fn dequantize_row(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<(), Error> {
    if !ty.can_dequantize() {
        return Err(Error::UnsupportedFormat { format: ty });
    }
    let need = ty.row_bytes(out.len()).ok_or(Error::ShapeMismatch {
        what: "row length modulo the type's block",
        expected: 0,
        got: out.len() % ty.block().map_or(1, |b| b.0),
    })?;
    if src.len() != need {
        return Err(Error::ShapeMismatch {
            what: "row bytes",
            expected: need,
            got: src.len(),
        });
    }
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            }
        }
        GgmlType::Q4_0 => blocks::<BlockQ4_0>(src, out)?,
        GgmlType::Q4_1 => blocks::<BlockQ4_1>(src, out)?,
        GgmlType::Q8_0 => blocks::<BlockQ8_0>(src, out)?,
        GgmlType::Q5_0 => blocks::<BlockQ5_0>(src, out)?,
        GgmlType::Q5_1 => blocks::<BlockQ5_1>(src, out)?,
        GgmlType::Q2K => blocks::<BlockQ2K>(src, out)?,
        GgmlType::Q3K => blocks::<BlockQ3K>(src, out)?,
        GgmlType::Q4K => blocks::<BlockQ4K>(src, out)?,
        GgmlType::Q5K => blocks::<BlockQ5K>(src, out)?,
        GgmlType::Q6K => blocks::<BlockQ6K>(src, out)?,
        // `can_dequantize` admitted only the types above.
        _ => return Err(Error::UnsupportedFormat { format: ty }),
    }
    Ok(())
}
