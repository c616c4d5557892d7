//! Why a profile could not be measured: the libraries' and the engine's errors kept whole,
//! and the profiler's own few conditions.

use std::fmt;

use hetero_partition::{ProfileError, TableError};

use crate::backend::npu::NpuError;
use crate::backend::BackendError;
use crate::engine::EngineError;

/// Why [`super::measure`] failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ProfilerError {
    /// A backend, the executor, a weight view, the thread pool or a uma pool refused.
    Backend(BackendError),
    /// The engine over a profiled executor refused (e.g. its memory budget).
    Engine(EngineError),
    /// The NPU could not be opened.
    Npu(NpuError),
    /// The OpenCL device or the resident decoder failed.
    Device(hetero_opencl_kernels::Error),
    /// partition refused the nominal profile a forced plan is built from.
    Nominal(ProfileError),
    /// partition could not build a plan table.
    Table(TableError),
    /// The measured profile failed partition's own validation.
    Invalid(ProfileError),
    /// The model has no layers to time.
    NoLayers,
    /// The bench output slot's size overflows.
    SlotTooLarge,
    /// The split executor did not split `n` columns at `at` (the pair measurement's premise).
    SplitMismatch {
        /// Columns of the weight.
        n: usize,
        /// Where the split should have been.
        at: usize,
    },
    /// A profiled resident step of `rows` rows recorded no matmul time.
    NoMatmulTime {
        /// Rows of the step.
        rows: u32,
    },
    /// The concurrent streaming thread panicked.
    StreamingPanicked,
}

impl fmt::Display for ProfilerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Backend(e) => write!(f, "{e}"),
            Self::Engine(e) => write!(f, "{e}"),
            Self::Npu(e) => write!(f, "{e}"),
            Self::Device(e) => write!(f, "{e}"),
            Self::Nominal(e) => write!(f, "nominal profile: {e}"),
            Self::Table(e) => write!(f, "planner: {e}"),
            Self::Invalid(e) => write!(f, "measured profile is invalid: {e}"),
            Self::NoLayers => write!(f, "the model has no layers"),
            Self::SlotTooLarge => write!(f, "output slot too large"),
            Self::SplitMismatch { n, at } => {
                write!(f, "the split executor did not split {n} columns at {at}")
            }
            Self::NoMatmulTime { rows } => {
                write!(f, "the profiled {rows}-row step recorded no matmul time")
            }
            Self::StreamingPanicked => write!(f, "streaming thread panicked"),
        }
    }
}

impl std::error::Error for ProfilerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(e),
            Self::Engine(e) => Some(e),
            Self::Npu(e) => Some(e),
            Self::Device(e) => Some(e),
            Self::Nominal(e) | Self::Invalid(e) => Some(e),
            Self::Table(e) => Some(e),
            _ => None,
        }
    }
}

impl From<BackendError> for ProfilerError {
    fn from(e: BackendError) -> Self {
        Self::Backend(e)
    }
}

impl From<EngineError> for ProfilerError {
    fn from(e: EngineError) -> Self {
        Self::Engine(e)
    }
}

impl From<NpuError> for ProfilerError {
    fn from(e: NpuError) -> Self {
        Self::Npu(e)
    }
}

impl From<hetero_opencl_kernels::Error> for ProfilerError {
    fn from(e: hetero_opencl_kernels::Error) -> Self {
        Self::Device(e)
    }
}

impl From<TableError> for ProfilerError {
    fn from(e: TableError) -> Self {
        Self::Table(e)
    }
}

impl From<hetero_uma::UmaError> for ProfilerError {
    fn from(e: hetero_uma::UmaError) -> Self {
        Self::Backend(e.into())
    }
}

impl From<hetero_sme::PoolError> for ProfilerError {
    fn from(e: hetero_sme::PoolError) -> Self {
        Self::Backend(e.into())
    }
}
