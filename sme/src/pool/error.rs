//! Why the pool refused a call.

use core::fmt;
use std::io;

/// Why [`ThreadPool`](crate::ThreadPool) refused to start or to run a job. Every check runs
/// before any task is started, so a refused call has run nothing and written nothing.
#[derive(Debug)]
#[non_exhaustive]
pub enum PoolError {
    /// The thread count is 0 or above [`MAX_THREADS`](crate::pool::MAX_THREADS).
    BadThreadCount {
        /// The largest count supported.
        max: usize,
        /// The count given.
        got: usize,
    },
    /// The OS (or the caller's spawn function) refused to start a worker thread. The workers
    /// started before it have been shut down and joined.
    Spawn {
        /// The index of the worker that failed (1-based: index 0 is the calling thread).
        index: usize,
        /// The thread count asked for.
        threads: usize,
        /// The error the spawn returned.
        source: io::Error,
    },
    /// More tasks than one job indexes (task indices are `u32` in the steal ranges).
    TooManyTasks {
        /// The largest task count of one job.
        max: usize,
        /// The count given.
        got: usize,
    },
    /// A chunk (or column block) of zero elements.
    ZeroChunk,
    /// A buffer is shorter than the call needs.
    BufferTooSmall {
        /// Which argument.
        what: &'static str,
        /// Elements needed.
        needed: usize,
        /// Elements given.
        got: usize,
    },
    /// A row stride smaller than the row it strides.
    BadStride {
        /// The stride given.
        ld: usize,
        /// The smallest legal stride (the row's width).
        min: usize,
    },
    /// A size computation overflowed `usize`.
    Overflow,
    /// [`ThreadPool::run_workers`](crate::ThreadPool::run_workers) was called from inside a task
    /// of the same pool: the pool's one steal state belongs to the running job. (Nested
    /// [`ThreadPool::run`](crate::ThreadPool::run) calls run inline instead.)
    Nested,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::BadThreadCount { max, got } => {
                write!(f, "thread count {got} is outside 1..={max}")
            }
            PoolError::Spawn {
                index,
                threads,
                source,
            } => write!(
                f,
                "could not start worker thread {index} of a {threads}-thread pool: {source}"
            ),
            PoolError::TooManyTasks { max, got } => {
                write!(f, "{got} tasks exceed one job's {max}")
            }
            PoolError::ZeroChunk => write!(f, "chunk size is 0"),
            PoolError::BufferTooSmall { what, needed, got } => {
                write!(f, "{what} holds {got} elements, {needed} needed")
            }
            PoolError::BadStride { ld, min } => {
                write!(f, "row stride {ld} is smaller than the row width {min}")
            }
            PoolError::Overflow => write!(f, "size computation overflowed"),
            PoolError::Nested => {
                write!(f, "run_workers called from inside a task of the same pool")
            }
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoolError::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}
