//! Where a plan writes: rows of f32 a stride apart. Usually a whole slice; for a column split
//! (two processors writing disjoint columns of one output, EdgeAgent's zero-copy tensor
//! parallelism) only some columns of each row belong to this plan, and no `&mut [f32]` may
//! cover the others while another thread writes them — hence the raw form.

use core::marker::PhantomData;

/// `len` floats from `ptr`, of which a plan writes `m` rows of `n` columns, `ldy` apart.
#[derive(Debug)]
pub struct OutMut<'a> {
    pub(crate) ptr: *mut f32,
    pub(crate) len: usize,
    _y: PhantomData<&'a mut [f32]>,
}

// SAFETY: an `OutMut` is an exclusive claim on the floats a plan writes through it (from a
// `&mut [f32]`, or promised by `from_raw_parts`' caller), like the `&mut [f32]` it stands for.
unsafe impl Send for OutMut<'_> {}

impl<'a> OutMut<'a> {
    /// The whole slice.
    pub fn new(y: &'a mut [f32]) -> Self {
        Self {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            _y: PhantomData,
        }
    }

    /// An output that only owns some columns of each row of a larger matrix.
    ///
    /// # Safety
    /// `ptr .. ptr + len` must be valid for reads and writes of f32 for `'a`, and for `'a`
    /// nothing else may read or write the floats that a plan given this output writes: rows
    /// `t < m` at `ptr + t * ldy`, columns `0..n` of each (the plan's shape and stride). The
    /// floats between those segments may belong to someone else.
    pub unsafe fn from_raw_parts(ptr: *mut f32, len: usize) -> Self {
        Self {
            ptr,
            len,
            _y: PhantomData,
        }
    }

    /// The first float, for a kernel writing through the claim (within `len`, only where
    /// the plan's shape and stride say).
    pub fn as_mut_ptr(&mut self) -> *mut f32 {
        self.ptr
    }

    /// Floats the output spans.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it spans no float.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
