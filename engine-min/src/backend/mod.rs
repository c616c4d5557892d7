//! The processors the engine's matmuls run on, behind one trait.
//!
//! A backend computes `out[m x n] = x[m x k] · Wᵀ` for a weight `W` of `n` rows of `k`
//! elements (ggml layout: each row contiguous; a weight row is an output column). Before any
//! matmul, [`Backend::prepare`] turns a weight's GGUF bytes into the backend's own form
//! (repacked CPU weights, device buffers, NPU graphs) and returns a [`WeightId`]: the backend
//! keeps its prepared forms in a `Vec`, and every later call names the weight by that id — as
//! ggml keeps them behind `tensor->extra` — never by address.
//!
//! Which backend computes which part of which matmul is the executor's business
//! ([`crate::exec`]); a backend only computes what it is given: all columns of a weight, or the
//! columns of a sub-weight (rows `c0..c1` of `W`, prepared as a weight of its own) written into
//! its columns of a shared output ([`Backend::matmul_view`]).

use std::fmt;
use std::ops::Range;

use hetero_uma::ColumnsMut;

use crate::gguf::GgmlType;

pub mod cpu;
pub mod gpu;
pub mod npu;
pub mod prepare;
pub mod resident;

pub use cpu::{dq_min_rows, CpuBackend, CpuKernel, SME_GEMM_MIN_ROWS};
pub use prepare::{PrepareReport, PrepareSource};

/// A weight prepared by one backend: an index into that backend's prepared forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WeightId(u32);

impl WeightId {
    /// The id of the `i`-th prepared weight (backends hand these out in order).
    pub(crate) fn new(i: usize) -> Result<WeightId, BackendError> {
        u32::try_from(i)
            .map(WeightId)
            .map_err(|_| BackendError::TooManyWeights)
    }

    /// Position in the backend's prepared forms.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A weight matrix: `n` rows of `k` elements of type `ty`, rows contiguous.
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    /// Element type.
    pub ty: GgmlType,
    /// Rows (output features).
    pub n: usize,
    /// Columns (input features).
    pub k: usize,
    /// `n * row_bytes(ty, k)` bytes.
    pub data: &'a [u8],
}

impl<'a> WeightView<'a> {
    /// Bytes of one row; errors unless the type is computable, `k` a whole number of its
    /// blocks and `data` exactly `n` rows.
    pub fn row_bytes(&self) -> Result<usize, BackendError> {
        let rb =
            crate::quant::row_bytes(self.ty, self.k).ok_or(BackendError::Unsupported(self.ty))?;
        if Some(self.data.len()) != rb.checked_mul(self.n) {
            return Err(BackendError::Shape("weight bytes"));
        }
        Ok(rb)
    }

    /// Rows `r` of the weight (output columns `r` of its matmul) as a weight of their own.
    pub fn rows(&self, r: Range<usize>) -> Result<WeightView<'a>, BackendError> {
        let rb = self.row_bytes()?;
        if r.start > r.end || r.end > self.n {
            return Err(BackendError::Shape("weight row range"));
        }
        Ok(WeightView {
            n: r.len(),
            data: &self.data[r.start * rb..r.end * rb],
            ..*self
        })
    }
}

/// Why a backend (or the executor) could not run an operation. Other crates' errors are
/// kept whole.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendError {
    /// Buffer lengths do not match the shapes.
    Shape(&'static str),
    /// The backend cannot compute with this tensor type.
    Unsupported(GgmlType),
    /// `k` exceeds what the backend's scratch allows.
    TooWide {
        /// The row length asked for.
        k: usize,
        /// The largest the backend takes.
        max: usize,
    },
    /// A [`WeightId`] this backend did not hand out.
    UnknownWeight(WeightId),
    /// More prepared weights than a [`WeightId`] can name.
    TooManyWeights,
    /// A matmul of more rows than `reserve` sized the backend for.
    NotReserved {
        /// Rows asked for.
        rows: usize,
        /// Rows reserved.
        reserved: usize,
    },
    /// The NPU was given rows that are not a whole number of its standard graph lengths.
    NpuRows(usize),
    /// hetero-sme refused a kernel call.
    Sme(hetero_sme::Error),
    /// OpenCL failed.
    OpenCl(hetero_opencl_kernels::Error),
    /// QNN failed.
    Qnn(qnn_sys::Error),
    /// The uma pool refused a view or a slot.
    Uma(hetero_uma::UmaError),
    /// A completion flag or barrier failed (e.g. timed out).
    Sync(hetero_sync::SyncError),
    /// A helper thread could not be started.
    Spawn(std::io::ErrorKind),
    /// The thread pool refused a job (or could not start).
    Pool(PoolFailure),
    /// The executor's plan table has no plan for this matmul.
    NoPlan {
        /// Reduction length.
        k: usize,
        /// Output columns.
        n: usize,
        /// Rows.
        m: usize,
    },
    /// The plan needs a backend this executor does not have.
    MissingBackend(hetero_partition::Backend),
    /// The executor runs whole steps on the GPU (resident): single matmuls are not offered.
    Resident,
    /// Preparing the weights failed for a reason outside the kernels (memory for the packed
    /// forms could not be mapped); the message says which.
    Prepare(String),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(w) => write!(f, "shape mismatch: {w}"),
            Self::Unsupported(t) => write!(f, "tensor type {t} unsupported by this backend"),
            Self::TooWide { k, max } => {
                write!(f, "row length {k} exceeds the backend's limit {max}")
            }
            Self::UnknownWeight(id) => write!(f, "weight id {} was not prepared here", id.0),
            Self::TooManyWeights => f.write_str("too many prepared weights"),
            Self::NotReserved { rows, reserved } => {
                write!(f, "{rows} rows asked for, {reserved} reserved")
            }
            Self::NpuRows(m) => {
                write!(f, "{m} rows are not whole standard NPU graph lengths")
            }
            Self::Sme(e) => write!(f, "hetero-sme: {e}"),
            Self::OpenCl(e) => write!(f, "OpenCL: {e}"),
            Self::Qnn(e) => write!(f, "QNN: {e}"),
            Self::Uma(e) => write!(f, "uma: {e}"),
            Self::Sync(e) => write!(f, "sync: {e}"),
            Self::Spawn(k) => write!(
                f,
                "cannot start a helper thread ({k}): the system refused a new thread (a limit on \
                 threads or on memory for their stacks)"
            ),
            Self::Pool(e) => write!(f, "thread pool: {}", e.0),
            Self::NoPlan { k, n, m } => write!(f, "no plan for k={k} n={n} m={m}"),
            Self::MissingBackend(b) => write!(f, "the plan needs the {b}, which is not open"),
            Self::Resident => {
                f.write_str("this executor runs whole steps on the GPU; it has no per-matmul path")
            }
            Self::Prepare(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Sme(e) => Some(e),
            Self::OpenCl(e) => Some(e),
            Self::Qnn(e) => Some(e),
            Self::Uma(e) => Some(e),
            Self::Sync(e) => Some(e),
            Self::Pool(e) => Some(&*e.0),
            _ => None,
        }
    }
}

/// A [`hetero_sme::PoolError`], shared so the error stays `Clone` (equal only to itself).
#[derive(Debug, Clone)]
pub struct PoolFailure(pub std::sync::Arc<hetero_sme::PoolError>);

impl PartialEq for PoolFailure {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<hetero_sme::PoolError> for BackendError {
    fn from(e: hetero_sme::PoolError) -> Self {
        Self::Pool(PoolFailure(std::sync::Arc::new(e)))
    }
}

impl From<hetero_sme::Error> for BackendError {
    fn from(e: hetero_sme::Error) -> Self {
        Self::Sme(e)
    }
}

impl From<hetero_opencl_kernels::Error> for BackendError {
    fn from(e: hetero_opencl_kernels::Error) -> Self {
        Self::OpenCl(e)
    }
}

impl From<qnn_sys::Error> for BackendError {
    fn from(e: qnn_sys::Error) -> Self {
        Self::Qnn(e)
    }
}

impl From<hetero_uma::UmaError> for BackendError {
    fn from(e: hetero_uma::UmaError) -> Self {
        Self::Uma(e)
    }
}

impl From<hetero_sync::SyncError> for BackendError {
    fn from(e: hetero_sync::SyncError) -> Self {
        Self::Sync(e)
    }
}

/// A processor that runs matmuls on weights it prepared.
pub trait Backend: Send + Sync {
    /// Short name shown in reports (e.g. `cpu`).
    fn name(&self) -> &str;

    /// Which of the planner's processors this is.
    fn kind(&self) -> hetero_partition::Backend;

    /// Makes the backend's own form of `w` (repacking, upload, graph preparation) and names it.
    /// Called at start-up, once per weight (or sub-weight) the plan gives this backend.
    fn prepare(&mut self, w: &WeightView<'_>) -> Result<WeightId, BackendError>;

    /// Sizes scratch for matmuls of up to `max_rows` rows and `max_k` columns, after every
    /// `prepare`, so that `matmul` does not allocate.
    fn reserve(&mut self, max_rows: usize, max_k: usize) -> Result<(), BackendError>;

    /// `out[t * ldo + j] = (x_t · Wᵀ)_j` for rows `t < m`, columns `j < n` of the prepared
    /// weight `id`; the floats between rows are untouched.
    fn matmul(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        ldo: usize,
    ) -> Result<(), BackendError>;

    /// The same into columns of a shared output (a uma view: the other columns are another
    /// processor's, written at the same time). The default goes row by row through
    /// [`matmul`](Self::matmul).
    fn matmul_view(
        &self,
        id: WeightId,
        x: &[f32],
        m: usize,
        out: &mut ColumnsMut<'_>,
    ) -> Result<(), BackendError> {
        let k = x.len().checked_div(m).unwrap_or(0);
        if out.rows() != m || x.len() != m * k {
            return Err(BackendError::Shape("view rows"));
        }
        let n = out.cols().len();
        for t in 0..m {
            let row = out.row_f32_mut(t).ok_or(BackendError::Shape("view"))?;
            self.matmul(id, &x[t * k..(t + 1) * k], 1, row, n)?;
        }
        Ok(())
    }
}

/// Checks an output of `m` rows of `n` floats, `ldo` apart.
pub(crate) fn check_ld(out: &[f32], m: usize, n: usize, ldo: usize) -> Result<(), BackendError> {
    if ldo < n {
        return Err(BackendError::Shape("ldo below n"));
    }
    let need = match m {
        0 => 0,
        _ => (m - 1)
            .checked_mul(ldo)
            .and_then(|v| v.checked_add(n))
            .ok_or(BackendError::Shape("out"))?,
    };
    if out.len() < need {
        return Err(BackendError::Shape("out"));
    }
    Ok(())
}
