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
    /// The device stopped working: a command ended with an error status, or an enqueue
    /// returned a code that means the device is gone (`CL_OUT_OF_RESOURCES`,
    /// `CL_DEVICE_NOT_AVAILABLE`, an error in a wait list, NVIDIA's -9999). An object that saw
    /// it refuses further work with the same error.
    DeviceLost {
        /// What was running or being enqueued.
        during: &'static str,
        /// The OpenCL status or error code.
        code: i32,
    },
    /// A command did not complete within the caller's bound (a hung or lost device); the
    /// object that waited refuses further work.
    WaitTimeout {
        /// What was waited for.
        what: &'static str,
        /// The bound, in milliseconds.
        after_ms: u64,
    },
    /// A persistent decode step's work-groups did not all run at once: one waited at a grid
    /// barrier past its bound (more `groups` than the device holds, or a device that does not
    /// run its work-groups concurrently). The decoder refuses further work.
    GridBarrier {
        /// Work-groups the step launched.
        groups: usize,
    },
    /// A step's argmax readout found NaN or infinite logits (the device argmax flags them):
    /// `row` is the first such row of the readout. The logits stay readable
    /// ([`Decoder::logits`](crate::decoder::Decoder::logits)), and the decoder stays usable.
    NonFiniteLogits {
        /// The readout row (0 for [`Readout::Argmax`](crate::decoder::Readout::Argmax)).
        row: usize,
    },
    /// The device has too little memory for what was asked; checked before anything is
    /// uploaded. Sizes in bytes.
    OutOfDeviceMemory {
        /// The model's weights as uploaded.
        weights: u64,
        /// The KV cache for the asked context.
        kv_cache: u64,
        /// Activations, readback and tables.
        scratch: u64,
        /// What the device offers (`CL_DEVICE_GLOBAL_MEM_SIZE`, or a smaller budget given).
        available: u64,
    },
    /// One buffer would exceed the device's largest allocation (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`).
    AllocTooLarge {
        /// Which buffer.
        what: String,
        /// Its size in bytes.
        bytes: u64,
        /// The device's largest allocation in bytes.
        max_alloc: u64,
    },
}

impl Error {
    /// The error an enqueue call's `code` means: [`Error::DeviceLost`] for the codes that say
    /// the device is gone, [`Error::Cl`] otherwise.
    pub fn from_enqueue(call: &'static str, code: i32) -> Error {
        // -2 CL_DEVICE_NOT_AVAILABLE, -5 CL_OUT_OF_RESOURCES (what NVIDIA's driver returns
        // after a kernel fault), -14 CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -9999
        // (NVIDIA: illegal memory access in an earlier kernel).
        if matches!(code, -2 | -5 | -14 | -9999) {
            Error::DeviceLost { during: call, code }
        } else {
            Error::Cl { call, code }
        }
    }
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
            Error::DeviceLost { during, code } => {
                write!(f, "the OpenCL device failed during {during} (status {code}); it is treated as lost")
            }
            Error::WaitTimeout { what, after_ms } => write!(
                f,
                "{what} did not complete within {after_ms} ms; the device is treated as hung or lost"
            ),
            Error::GridBarrier { groups } => write!(
                f,
                "a persistent decode step's {groups} work-groups did not all run at once (a \
                 grid barrier waited past its bound); use fewer groups or another decode path"
            ),
            Error::NonFiniteLogits { row } => write!(
                f,
                "the logits of readout row {row} hold NaN or infinite values (flagged by the \
                 device argmax); no greedy token"
            ),
            Error::OutOfDeviceMemory {
                weights,
                kv_cache,
                scratch,
                available,
            } => write!(
                f,
                "the device has {} but this needs {}: weights {}, KV cache {}, activations and readback {}",
                size(*available),
                size(weights + kv_cache + scratch),
                size(*weights),
                size(*kv_cache),
                size(*scratch)
            ),
            Error::AllocTooLarge {
                what,
                bytes,
                max_alloc,
            } => write!(
                f,
                "{what} needs one buffer of {bytes} bytes, over the device's largest allocation of {max_alloc} bytes"
            ),
        }
    }
}

/// A byte count as MiB (or KiB, or bytes, when small), for messages.
fn size(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    } else if b >= 1 << 10 {
        format!("{:.1} KiB", b as f64 / (1 << 10) as f64)
    } else {
        format!("{b} B")
    }
}

impl std::error::Error for Error {}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
