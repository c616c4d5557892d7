//! The crate's typed errors.

use std::fmt;

/// Everything that can go wrong in this crate. Each variant names its cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No OpenCL library could be opened; `tried` lists each path and dlopen's message.
    LibraryNotFound {
        /// `(path, dlerror text)` for every candidate tried, in order.
        tried: Vec<(String, String)>,
    },
    /// The library opened but lacks an entry point this crate needs.
    MissingSymbol(&'static str),
    /// The ICD loader reports no platform (or the selected one does not exist).
    NoPlatform(String),
    /// The platform has no device (or the selected one does not exist).
    NoDevice(String),
    /// The OpenCL C compiler rejected a program; `log` is the device's build log.
    Build {
        /// The build status code.
        code: i32,
        /// The build log text.
        log: String,
    },
    /// An OpenCL call returned an error code.
    Cl {
        /// The entry point that failed.
        call: &'static str,
        /// The `CL_*` error code it returned.
        code: i32,
    },
    /// A buffer is smaller than the operation needs.
    BufferTooSmall {
        /// Which argument.
        what: &'static str,
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// A shape is not valid for the operation (e.g. K not a multiple of 32 for a block format).
    BadShape(String),
    /// A host pointer is not aligned to `CL_DEVICE_MEM_BASE_ADDR_ALIGN`.
    Misaligned {
        /// The pointer's address.
        addr: usize,
        /// The alignment the device requires, in bytes.
        required: usize,
    },
    /// The operation does not apply to this launch (e.g. setting a position on a GEMV).
    NotApplicable(&'static str),
    /// Waiting for a completion flag ran past its deadline.
    Timeout,
    /// The GGML type is not one the kernels compute (see [`crate::COMPUTABLE`]).
    UnsupportedFormat(hetero_sme::GgmlType),
    /// The shared dequantizer (`hetero_sme::dequantize_row`) refused a row.
    Dequantize(hetero_sme::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::LibraryNotFound { tried } => {
                write!(f, "no OpenCL library could be loaded; tried:")?;
                for (p, why) in tried {
                    write!(f, " [{p}: {why}]")?;
                }
                Ok(())
            }
            Error::MissingSymbol(s) => write!(f, "the OpenCL library lacks the entry point {s}"),
            Error::NoPlatform(s) => write!(f, "no OpenCL platform: {s}"),
            Error::NoDevice(s) => write!(f, "no OpenCL device: {s}"),
            Error::Build { code, log } => {
                write!(f, "OpenCL program build failed (code {code}); log:\n{log}")
            }
            Error::Cl { call, code } => write!(f, "{call} failed with OpenCL error {code}"),
            Error::BufferTooSmall { what, needed, got } => {
                write!(f, "buffer `{what}` too small: needs {needed} bytes, has {got}")
            }
            Error::BadShape(s) => write!(f, "bad shape: {s}"),
            Error::Misaligned { addr, required } => write!(
                f,
                "host pointer {addr:#x} is not aligned to the device's {required}-byte base address alignment"
            ),
            Error::NotApplicable(s) => write!(f, "not applicable: {s}"),
            Error::Timeout => write!(f, "timed out waiting for a completion flag"),
            Error::UnsupportedFormat(t) => {
                write!(f, "the OpenCL kernels do not compute {t} weights (F16, Q4_0, Q4_1, Q8_0 only)")
            }
            Error::Dequantize(e) => write!(f, "dequantize: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
