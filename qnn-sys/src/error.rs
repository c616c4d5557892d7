//! The crate's error type.

use crate::ffi::Qnn_ErrorHandle_t;
use crate::{DeviceChoice, Version};
use std::fmt;

/// Everything that can go wrong when loading QNN or running a graph. Never a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable naming a library is not set (or not valid UTF-8).
    EnvVarUnset {
        /// The variable, e.g. `QNN_HTP_LIB`.
        var: &'static str,
    },
    /// `dlopen` failed.
    LibraryNotFound {
        /// The path given.
        path: String,
        /// `dlerror()`'s text.
        dlerror: String,
    },
    /// `dlsym` did not find a symbol.
    MissingSymbol {
        /// The library.
        path: String,
        /// The symbol.
        symbol: &'static str,
        /// `dlerror()`'s text.
        dlerror: String,
    },
    /// The library loaded but is not a QNN backend (no `QnnInterface_getProviders`, or no
    /// usable provider list).
    NotQnnBackend {
        /// The library.
        path: String,
        /// Why.
        reason: String,
    },
    /// The library is a QNN backend, but not the one asked for (e.g. the Saver backend, id 2,
    /// where HTP, id 6, was required).
    WrongBackend {
        /// Backend id(s) the library provides (the first provider's).
        found: u32,
        /// Backend id required.
        expected: u32,
    },
    /// No provider implements a compatible API version: same major, minor >= needed.
    IncompatibleApi {
        /// The best version found.
        found: Version,
        /// The version needed.
        needed: Version,
    },
    /// A function-table entry the crate needs is NULL.
    MissingFunction {
        /// The entry's name.
        name: &'static str,
    },
    /// A QNN call returned an error.
    Qnn {
        /// The API call.
        call: &'static str,
        /// The raw error handle (the code is `value & 0xFFFF`).
        code: Qnn_ErrorHandle_t,
        /// `errorGetMessage`'s text (or a placeholder when the library has none).
        message: String,
    },
    /// A buffer passed to the wrapper is smaller than the tensor it backs (QNN itself does not
    /// check client buffer sizes; the wrapper must).
    BufferTooSmall {
        /// Which buffer (`"input"`, `"output"`, `"weights"`).
        what: &'static str,
        /// Elements needed.
        needed: usize,
        /// Elements given.
        got: usize,
    },
    /// A session was requested with a device config (SoC/arch) different from that of sessions
    /// still alive in this process (the HTP simulator breaks when such sessions coexist).
    DeviceConfigConflict {
        /// The device choice of the live sessions.
        active: DeviceChoice,
        /// The device choice requested.
        requested: DeviceChoice,
    },
    /// A shape is invalid: a zero dimension, or a tensor too large for QNN's 32-bit sizes.
    InvalidShape {
        /// Why.
        reason: String,
    },
}

impl Error {
    /// The QNN error code (`handle & 0xFFFF`) for [`Error::Qnn`], else `None`.
    pub fn qnn_code(&self) -> Option<u64> {
        match self {
            Error::Qnn { code, .. } => Some(code & 0xFFFF),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EnvVarUnset { var } => write!(f, "environment variable {var} is not set"),
            Error::LibraryNotFound { path, dlerror } => {
                write!(f, "cannot load library {path}: {dlerror}")
            }
            Error::MissingSymbol {
                path,
                symbol,
                dlerror,
            } => write!(f, "symbol {symbol} not found in {path}: {dlerror}"),
            Error::NotQnnBackend { path, reason } => {
                write!(f, "{path} is not a QNN backend: {reason}")
            }
            Error::WrongBackend { found, expected } => write!(
                f,
                "the library provides QNN backend id {found}, but backend id {expected} is required"
            ),
            Error::IncompatibleApi { found, needed } => write!(
                f,
                "incompatible QNN API version: found {found}, need {}.{}+ (same major)",
                needed.major, needed.minor
            ),
            Error::MissingFunction { name } => {
                write!(f, "the QNN function table has no entry for {name}")
            }
            Error::Qnn {
                call,
                code,
                message,
            } => write!(
                f,
                "{call} failed with QNN error {}: {message}",
                code & 0xFFFF
            ),
            Error::BufferTooSmall { what, needed, got } => write!(
                f,
                "{what} buffer too small: {got} elements given, {needed} needed"
            ),
            Error::DeviceConfigConflict { active, requested } => write!(
                f,
                "a session for {requested} was requested while sessions for {active} are alive; \
                 one device config per process at a time"
            ),
            Error::InvalidShape { reason } => write!(f, "invalid shape: {reason}"),
        }
    }
}

impl std::error::Error for Error {}
