//! Safe disjoint outputs for pool tasks: task `i` gets chunk `i` of a slice (or column block `i`
//! of a strided matrix), thread `t` gets the `t`-th chunk of a scratch slice. Sound because the
//! pool runs each task index exactly once per job and never runs two tasks with the same thread
//! index at the same time.

use core::marker::PhantomData;

use super::{PoolError, ThreadPool};

/// A raw pointer that tasks on other threads turn into disjoint slices.
struct SendPtr<T>(*mut T);

// SAFETY: the pointer is only turned into slices that no two threads share (see the callers),
// of elements that may be sent to another thread (`T: Send`).
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the raw field).
    #[inline(always)]
    fn get(&self) -> *mut T {
        self.0
    }
}

/// Columns `col0..col0 + width` of `rows` rows of a strided matrix: one task's part of
/// [`ThreadPool::run_column_blocks_mut`].
pub struct ColumnBlock<'a, T> {
    /// Row 0, column `col0`.
    ptr: *mut T,
    rows: usize,
    width: usize,
    ld: usize,
    col0: usize,
    _m: PhantomData<&'a mut [T]>,
}

impl<T> ColumnBlock<'_, T> {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns in this block (the block size, or fewer for the last block).
    pub fn width(&self) -> usize {
        self.width
    }

    /// The block's first column in the whole matrix.
    pub fn col0(&self) -> usize {
        self.col0
    }

    /// This block's part of row `r` (`width()` elements), or `None` when `r >= rows()`.
    pub fn row_mut(&mut self, r: usize) -> Option<&mut [T]> {
        if r >= self.rows {
            return None;
        }
        // SAFETY: `run_column_blocks_mut` checked that row `r < rows` of the matrix holds
        // columns `col0..col0 + width` inside the borrowed slice (`(rows - 1) * ld + cols` ≤ len,
        // `col0 + width` ≤ cols ≤ ld), and no other block covers these columns; `&mut self`
        // keeps this the only live reference into the block.
        Some(unsafe { core::slice::from_raw_parts_mut(self.ptr.add(r * self.ld), self.width) })
    }
}

impl ThreadPool {
    /// Calls `f(task, thread, chunk)` for each `chunk`-element chunk of `out` (task `i` gets
    /// `out[i * chunk..]`, the last chunk may be shorter; `out.len().div_ceil(chunk)` tasks),
    /// spread over the pool as [`ThreadPool::run`] does. Errors (nothing runs):
    /// [`PoolError::ZeroChunk`].
    pub fn run_chunks_mut<T, F>(&self, out: &mut [T], chunk: usize, f: &F) -> Result<(), PoolError>
    where
        T: Send,
        F: Fn(usize, usize, &mut [T]) + Sync,
    {
        self.run_chunks_mut_with_scratch::<T, (), _>(out, chunk, &mut [], 0, &|t, th, o, _| {
            f(t, th, o)
        })
    }

    /// Calls `f(task, thread, scratch)` for each `task` in `0..n_tasks` as [`ThreadPool::run`]
    /// does, handing thread `t` the scratch `scratch[t * per_thread..(t + 1) * per_thread]`
    /// (one task at a time runs on each thread index, so no two tasks share a scratch chunk).
    /// Errors (nothing runs): [`PoolError::BufferTooSmall`] when `scratch` is shorter than
    /// `threads() * per_thread`.
    pub fn run_with_scratch<S, F>(
        &self,
        n_tasks: usize,
        scratch: &mut [S],
        per_thread: usize,
        f: &F,
    ) -> Result<(), PoolError>
    where
        S: Send,
        F: Fn(usize, usize, &mut [S]) + Sync,
    {
        let sc = self.scratch_ptr(scratch, per_thread)?;
        self.run(n_tasks, &|task, thread| {
            // SAFETY: see `thread_scratch`.
            f(task, thread, unsafe {
                thread_scratch(&sc, thread, per_thread)
            })
        });
        Ok(())
    }

    /// [`ThreadPool::run_chunks_mut`] and [`ThreadPool::run_with_scratch`] together:
    /// `f(task, thread, chunk, scratch)`. Errors (nothing runs): [`PoolError::ZeroChunk`],
    /// [`PoolError::BufferTooSmall`].
    pub fn run_chunks_mut_with_scratch<T, S, F>(
        &self,
        out: &mut [T],
        chunk: usize,
        scratch: &mut [S],
        per_thread: usize,
        f: &F,
    ) -> Result<(), PoolError>
    where
        T: Send,
        S: Send,
        F: Fn(usize, usize, &mut [T], &mut [S]) + Sync,
    {
        if chunk == 0 {
            return Err(PoolError::ZeroChunk);
        }
        let sc = self.scratch_ptr(scratch, per_thread)?;
        let len = out.len();
        let op = SendPtr(out.as_mut_ptr());
        self.run(len.div_ceil(chunk), &|task, thread| {
            // task < len.div_ceil(chunk), so start < len.
            let start = task * chunk;
            // SAFETY: `start + n` ≤ len, inside `out`, which is mutably borrowed until this call
            // returns (after every task); the pool runs each task index once per job, so no two
            // tasks' chunks overlap.
            let o = unsafe {
                core::slice::from_raw_parts_mut(op.get().add(start), chunk.min(len - start))
            };
            // SAFETY: see `thread_scratch`.
            f(task, thread, o, unsafe {
                thread_scratch(&sc, thread, per_thread)
            })
        });
        Ok(())
    }

    /// Calls `f(task, thread, block)` where `block` is columns `task * block..` (at most `block`
    /// of them) of each of the `rows` rows of the row-major matrix in `out` (row stride `ld`,
    /// `cols` columns used per row; the last row may end at column `cols`): one task per column
    /// block, `cols.div_ceil(block)` tasks, spread over the pool as [`ThreadPool::run`] does.
    /// Errors (nothing runs): [`PoolError::ZeroChunk`], [`PoolError::BadStride`] (`ld < cols`
    /// with more than one row), [`PoolError::BufferTooSmall`] (`out` shorter than
    /// `(rows - 1) * ld + cols`), [`PoolError::Overflow`].
    pub fn run_column_blocks_mut<T, F>(
        &self,
        out: &mut [T],
        rows: usize,
        cols: usize,
        ld: usize,
        block: usize,
        f: &F,
    ) -> Result<(), PoolError>
    where
        T: Send,
        F: Fn(usize, usize, ColumnBlock<'_, T>) + Sync,
    {
        if block == 0 {
            return Err(PoolError::ZeroChunk);
        }
        if rows > 1 && ld < cols {
            return Err(PoolError::BadStride { ld, min: cols });
        }
        let needed = match rows {
            0 => 0,
            _ => (rows - 1)
                .checked_mul(ld)
                .and_then(|x| x.checked_add(cols))
                .ok_or(PoolError::Overflow)?,
        };
        if out.len() < needed {
            return Err(PoolError::BufferTooSmall {
                what: "out",
                needed,
                got: out.len(),
            });
        }
        let op = SendPtr(out.as_mut_ptr());
        self.run(cols.div_ceil(block), &|task, thread| {
            let col0 = task * block;
            let ptr = if rows > 0 {
                // SAFETY: col0 < cols ≤ (rows - 1) * ld + cols ≤ out.len() (checked above).
                unsafe { op.get().add(col0) }
            } else {
                // No rows: `row_mut` never dereferences it.
                op.get()
            };
            let b = ColumnBlock {
                ptr,
                rows,
                width: block.min(cols - col0),
                ld,
                col0,
                _m: PhantomData,
            };
            f(task, thread, b)
        });
        Ok(())
    }

    /// Checks that `scratch` holds `per_thread` elements for every thread of the pool.
    fn scratch_ptr<S>(
        &self,
        scratch: &mut [S],
        per_thread: usize,
    ) -> Result<SendPtr<S>, PoolError> {
        let needed = per_thread
            .checked_mul(self.threads())
            .ok_or(PoolError::Overflow)?;
        if scratch.len() < needed {
            return Err(PoolError::BufferTooSmall {
                what: "scratch",
                needed,
                got: scratch.len(),
            });
        }
        Ok(SendPtr(scratch.as_mut_ptr()))
    }
}

/// Thread `thread`'s scratch chunk.
///
/// # Safety
/// `sc` points to at least `threads * per_thread` elements (checked by `scratch_ptr`) that stay
/// mutably borrowed by the calling pool method; `thread` is the index the pool passed to the
/// running task, so it is below `threads` and no other task holds the same chunk (the pool
/// never runs two tasks with one thread index at once, and the slice dies with the task).
#[inline]
unsafe fn thread_scratch<'a, S>(sc: &SendPtr<S>, thread: usize, per_thread: usize) -> &'a mut [S] {
    // SAFETY: forwarded from the contract.
    unsafe { core::slice::from_raw_parts_mut(sc.get().add(thread * per_thread), per_thread) }
}
