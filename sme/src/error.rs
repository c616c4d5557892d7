//! The crate's one error type.

use core::fmt;

/// Why a call was refused. Every check runs before anything is written to an output buffer, so a
/// call that returns an error has left its outputs untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A slice is shorter than its shape and stride need.
    BufferTooSmall {
        /// Which argument.
        what: &'static str,
        /// Elements needed.
        needed: usize,
        /// Elements given.
        got: usize,
    },
    /// A leading dimension (row or column stride) is smaller than the row or column it strides.
    BadStride {
        /// Which argument.
        what: &'static str,
        /// The stride given.
        ld: usize,
        /// The smallest legal stride.
        min: usize,
    },
    /// Two dimensions that must agree do not (e.g. K of the activations vs K of the packed weight).
    ShapeMismatch {
        /// Which dimension.
        what: &'static str,
        /// The value the other operand fixes.
        expected: usize,
        /// The value given.
        got: usize,
    },
    /// A byte buffer is not aligned for the element type it is reinterpreted as.
    Misaligned {
        /// Which argument.
        what: &'static str,
        /// The alignment required, in bytes.
        align: usize,
    },
    /// The implementation asked for is not supported by this CPU (or this OS refused it).
    Unsupported {
        /// The implementation's name.
        kernel: &'static str,
    },
    /// The implementation asked for cannot read the packed weight's element format.
    FormatMismatch {
        /// The implementation's name.
        kernel: &'static str,
        /// The packed weight's format.
        format: crate::PackedFormat,
    },
    /// A GEMV was asked for more rows than it supports.
    TooManyRows {
        /// The largest row count supported.
        max: usize,
        /// The row count given.
        got: usize,
    },
    /// A column range is empty-reversed or reaches past the source's columns.
    BadRange {
        /// Range start.
        start: usize,
        /// Range end (exclusive).
        end: usize,
        /// Number of columns in the source.
        n: usize,
    },
    /// A GGML element type this routine cannot compute with.
    UnsupportedFormat {
        /// The type given.
        format: crate::GgmlType,
    },
    /// The quantized activations lack the scheme the weight's format needs (per 32 or per 256
    /// values; see `ActBlocks`).
    MissingActivations {
        /// The scheme needed.
        needed: &'static str,
    },
    /// An input that must be finite holds a NaN or an infinity.
    NonFinite {
        /// Which argument.
        what: &'static str,
        /// Index of the first non-finite value.
        index: usize,
    },
    /// An input value beyond what the output format can represent (e.g. beyond FP16's ±65504
    /// for a format with FP16 scales).
    ValueOutOfRange {
        /// Which argument.
        what: &'static str,
        /// Index of the first such value.
        index: usize,
    },
    /// A size computation overflowed `usize`.
    Overflow,
    /// More workers than the work-stealing state was built for (or zero workers).
    BadWorkerCount {
        /// Workers the state holds.
        max: usize,
        /// Worker index or count given.
        got: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::BufferTooSmall { what, needed, got } => {
                write!(f, "{what}: buffer holds {got} elements, {needed} needed")
            }
            Error::BadStride { what, ld, min } => {
                write!(
                    f,
                    "{what}: leading dimension {ld} is below the minimum {min}"
                )
            }
            Error::ShapeMismatch {
                what,
                expected,
                got,
            } => write!(f, "{what}: expected {expected}, got {got}"),
            Error::Misaligned { what, align } => {
                write!(f, "{what}: buffer is not aligned to {align} bytes")
            }
            Error::Unsupported { kernel } => {
                write!(f, "kernel {kernel} is not supported on this CPU")
            }
            Error::FormatMismatch { kernel, format } => {
                write!(f, "kernel {kernel} cannot read packed format {format:?}")
            }
            Error::TooManyRows { max, got } => {
                write!(f, "GEMV takes at most {max} rows, got {got}")
            }
            Error::BadRange { start, end, n } => {
                write!(f, "column range {start}..{end} is not within 0..{n}")
            }
            Error::UnsupportedFormat { format } => {
                write!(f, "tensor type {format} is not supported here")
            }
            Error::MissingActivations { needed } => {
                write!(f, "the quantized activations lack the {needed} scheme")
            }
            Error::NonFinite { what, index } => {
                write!(f, "{what}: value {index} is not finite")
            }
            Error::ValueOutOfRange { what, index } => {
                write!(f, "{what}: value {index} is beyond the format's range")
            }
            Error::Overflow => write!(f, "size computation overflowed usize"),
            Error::BadWorkerCount { max, got } => {
                write!(
                    f,
                    "worker {got} is out of range for a state of {max} workers"
                )
            }
        }
    }
}

impl std::error::Error for Error {}
