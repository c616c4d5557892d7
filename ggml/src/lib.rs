#![doc = include_str!("../README.md")]

pub mod blob;
mod compute;
pub mod ffi;

use core::fmt;

pub use compute::Ctx;
use hetero_sme::GgmlType;

/// The version of the C ABI between the shim and this crate (`HETERO_GGML_ABI_VERSION` in
/// `include/hetero_ggml.h`), also stamped into every packed weight.
pub const ABI_VERSION: u32 = 1;

/// Why a call failed.
#[derive(Debug)]
pub enum Error {
    /// A tensor type this backend does not run (the CPU backend keeps it).
    Unsupported(GgmlType),
    /// A type code outside ggml's table.
    UnknownType(u32),
    /// A shape, length, alignment or blob this backend refuses.
    Invalid(&'static str),
    /// hetero-sme refused the call.
    Sme(hetero_sme::Error),
    /// The thread pool could not start or run the job.
    Pool(hetero_sme::PoolError),
    /// A panic was caught inside (a bug); what was running.
    Panicked(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unsupported(t) => write!(f, "type {} is not run by this backend", t.name()),
            Error::UnknownType(c) => write!(f, "unknown ggml type code {c}"),
            Error::Invalid(what) => write!(f, "invalid argument: {what}"),
            Error::Sme(e) => write!(f, "hetero-sme: {e}"),
            Error::Pool(e) => write!(f, "thread pool: {e}"),
            Error::Panicked(what) => write!(f, "panic inside hetero-ggml (a bug) in {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<hetero_sme::Error> for Error {
    fn from(e: hetero_sme::Error) -> Self {
        Error::Sme(e)
    }
}

impl From<hetero_sme::PoolError> for Error {
    fn from(e: hetero_sme::PoolError) -> Self {
        Error::Pool(e)
    }
}
