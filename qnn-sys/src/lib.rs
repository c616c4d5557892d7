#![doc = include_str!("../README.md")]

pub mod ffi;

mod error;
mod loader;
mod session;
pub mod simple;
mod stdout;

pub use error::Error;
pub use loader::{
    BackendLibrary, Library, Requirement, SystemLibrary, QNN_HTP_LIB_VAR, QNN_SYSTEM_LIB_VAR,
};
pub use session::{
    default_log_level, device_lock, is_benign, set_default_log_level, DeviceChoice,
    HtpDeviceConfig, HtpDeviceInfo, LogLevel, Session, SessionOptions, QNN_LOG_VAR,
};
pub use stdout::{library_stdout, set_library_stdout_echo};

/// A QNN API version (`Qnn_Version_t`).
pub type Version = ffi::Qnn_Version_t;

impl core::fmt::Display for ffi::Qnn_Version_t {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}
