//! Disjoint views of one slot: byte ranges, or column ranges of a row-major matrix, each handed
//! to a different producer (CPU columns [0, n), GPU columns [n, N)) so two backends write one
//! output with no merge copy. Checked at split time; no allocation (fixed-size arrays).

use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::NonNull;

use crate::{CompletionFlag, Handle, Pool, UmaError};

/// A writable byte range of one slot. `Send`: give it to the producer thread that fills it.
#[derive(Debug)]
pub struct ViewMut<'a> {
    ptr: NonNull<u8>,
    len: usize,
    offset: usize,
    _slot: PhantomData<&'a mut [u8]>,
}

// SAFETY: a ViewMut is an exclusive borrow of bytes no other view or reference overlaps
// (checked at split time), like `&mut [u8]`, which is Send.
unsafe impl Send for ViewMut<'_> {}
// SAFETY: shared access only yields `&[u8]`, like `&mut [u8]`, which is Sync.
unsafe impl Sync for ViewMut<'_> {}

impl<'a> ViewMut<'a> {
    /// Bytes in the view.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view within its slot (add [`crate::RawSlot::offset`] for the fd offset).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The view's first byte, for a device layer.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len lies in the slot, is covered by no other view, and the borrow of
        // the handle ('a) keeps the slot owned and the pool alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The view as `f32`s: [`UmaError::BadCast`] unless the offset is 4-aligned and the length
    /// a multiple of 4.
    pub fn as_mut_f32(&mut self) -> Result<&mut [f32], UmaError> {
        if !self.len.is_multiple_of(4) || !(self.ptr.as_ptr() as usize).is_multiple_of(4) {
            return Err(UmaError::BadCast);
        }
        // SAFETY: aligned and sized for f32 (checked above), every bit pattern is a valid f32,
        // and the region is exclusively ours as in `as_mut_bytes`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.len / 4) })
    }

    /// Converts into the plain slice for the rest of the borrow.
    pub fn into_bytes(self) -> &'a mut [u8] {
        // SAFETY: as in `as_mut_bytes`; `self` is consumed, so the slice is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// A row-major matrix stored in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatrixLayout {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Bytes per element (> 0).
    pub elem_size: usize,
    /// Bytes from one row's start to the next (>= cols * elem_size).
    pub row_stride: usize,
}

impl MatrixLayout {
    /// A densely packed matrix (row stride = cols * elem_size).
    pub fn dense(rows: usize, cols: usize, elem_size: usize) -> Self {
        Self {
            rows,
            cols,
            elem_size,
            row_stride: cols.saturating_mul(elem_size),
        }
    }

    /// Bytes the layout spans from its first byte, or `None` if it is malformed.
    fn span(&self) -> Option<usize> {
        if self.elem_size == 0 {
            return None;
        }
        let row = self.cols.checked_mul(self.elem_size)?;
        if self.row_stride < row {
            return None;
        }
        if self.rows == 0 {
            return Some(0);
        }
        (self.rows - 1)
            .checked_mul(self.row_stride)?
            .checked_add(row)
    }
}

/// Columns [c0, c1) of every row of a matrix in a slot: strided, so not one slice. `Send`.
#[derive(Debug)]
pub struct ColumnsMut<'a> {
    base: NonNull<u8>,
    layout: MatrixLayout,
    cols: Range<usize>,
    offset: usize,
    _slot: PhantomData<&'a mut [u8]>,
}

// SAFETY: the bytes it reaches (its columns of every row) overlap no other view (checked at
// split time); it behaves like a set of `&mut [u8]`, which are Send.
unsafe impl Send for ColumnsMut<'_> {}
// SAFETY: shared access only yields `&[u8]`.
unsafe impl Sync for ColumnsMut<'_> {}

impl ColumnsMut<'_> {
    /// The column range.
    pub fn cols(&self) -> Range<usize> {
        self.cols.clone()
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.layout.rows
    }

    /// Bytes from one row's first column of this view to the next row's.
    pub fn row_stride(&self) -> usize {
        self.layout.row_stride
    }

    /// Offset of (row 0, first column) within the slot.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// (Row 0, first column), for a device layer: row r starts `r * row_stride()` further.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.base.as_ptr()
    }

    fn row_len(&self) -> usize {
        self.cols.len() * self.layout.elem_size
    }

    /// Row `r`'s bytes in this view, or `None` past the last row.
    pub fn row(&self, r: usize) -> Option<&[u8]> {
        (r < self.layout.rows).then(|| {
            // SAFETY: r < rows, so the row segment lies within the layout's span, which was
            // checked to fit the slot; no other view covers these columns.
            unsafe {
                std::slice::from_raw_parts(
                    self.base.as_ptr().add(r * self.layout.row_stride),
                    self.row_len(),
                )
            }
        })
    }

    /// Row `r`'s bytes in this view, writable, or `None` past the last row.
    pub fn row_mut(&mut self, r: usize) -> Option<&mut [u8]> {
        (r < self.layout.rows).then(|| {
            // SAFETY: as in `row`, and `&mut self` makes this the only access.
            unsafe {
                std::slice::from_raw_parts_mut(
                    self.base.as_ptr().add(r * self.layout.row_stride),
                    self.row_len(),
                )
            }
        })
    }
}

impl ColumnsMut<'_> {
    /// Row `r` of this view as `f32`s: `None` past the last row, or unless the layout's element
    /// size is 4 and its row stride a multiple of 4 (then every row segment is 4-aligned, the
    /// slot being 4096-aligned).
    pub fn row_f32_mut(&mut self, r: usize) -> Option<&mut [f32]> {
        if self.layout.elem_size != 4 || !self.layout.row_stride.is_multiple_of(4) {
            return None;
        }
        let n = self.cols.len();
        let row = self.row_mut(r)?;
        // SAFETY: the segment is 4-aligned (see above), holds exactly n * 4 bytes, is
        // exclusively ours for the borrow, and every bit pattern is a valid f32.
        Some(unsafe { std::slice::from_raw_parts_mut(row.as_mut_ptr().cast::<f32>(), n) })
    }
}

/// Checks that every range is well-formed, within `limit`, and that no two overlap. Empty
/// ranges are allowed (a producer given no work) and overlap nothing.
fn check_ranges(ranges: &[Range<usize>], limit: usize) -> Result<(), UmaError> {
    for r in ranges {
        if r.start > r.end {
            return Err(UmaError::InvalidRange {
                start: r.start,
                end: r.end,
            });
        }
        if r.end > limit {
            return Err(UmaError::OutOfBounds {
                end: r.end,
                len: limit,
            });
        }
    }
    for (i, a) in ranges.iter().enumerate() {
        for (j, b) in ranges.iter().enumerate().skip(i + 1) {
            if !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end {
                return Err(UmaError::Overlap(i, j));
            }
        }
    }
    Ok(())
}

impl Pool {
    /// Splits the slot into `K` disjoint byte ranges. Errors (nothing changes):
    /// [`UmaError::ForeignHandle`], [`UmaError::InvalidRange`], [`UmaError::OutOfBounds`],
    /// [`UmaError::Overlap`].
    pub fn split_bytes<'a, const K: usize>(
        &'a self,
        handle: &'a mut Handle,
        ranges: [Range<usize>; K],
    ) -> Result<[ViewMut<'a>; K], UmaError> {
        let base = self.slot_ptr(handle)?;
        check_ranges(&ranges, self.slot_size())?;
        Ok(std::array::from_fn(|i| ViewMut {
            // SAFETY: ranges[i].start <= slot_size (checked), so the pointer stays within (or
            // one past) the slot; the slot pointer is non-null.
            ptr: unsafe { NonNull::new_unchecked(base.add(ranges[i].start)) },
            len: ranges[i].len(),
            offset: ranges[i].start,
            _slot: PhantomData,
        }))
    }

    /// Splits a row-major matrix stored at the slot's start into `K` disjoint column ranges
    /// (each covering every row). Errors (nothing changes): [`UmaError::ForeignHandle`],
    /// [`UmaError::BadLayout`] (zero element size, short row stride, or the matrix does not fit
    /// the slot), [`UmaError::InvalidRange`], [`UmaError::OutOfBounds`] (past `cols`),
    /// [`UmaError::Overlap`].
    pub fn split_columns<'a, const K: usize>(
        &'a self,
        handle: &'a mut Handle,
        layout: MatrixLayout,
        cols: [Range<usize>; K],
    ) -> Result<[ColumnsMut<'a>; K], UmaError> {
        let base = self.slot_ptr(handle)?;
        match layout.span() {
            Some(span) if span <= self.slot_size() => {}
            _ => return Err(UmaError::BadLayout),
        }
        check_ranges(&cols, layout.cols)?;
        Ok(std::array::from_fn(|i| {
            let offset = cols[i].start * layout.elem_size;
            ColumnsMut {
                // SAFETY: offset <= cols * elem_size <= span <= slot_size, so within the slot.
                base: unsafe { NonNull::new_unchecked(base.add(offset)) },
                layout,
                cols: cols[i].clone(),
                offset,
                _slot: PhantomData,
            }
        }))
    }
}

/// A rectangle of a row-major matrix: rows `rows` of columns `cols`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Block {
    /// Row range.
    pub rows: Range<usize>,
    /// Column range.
    pub cols: Range<usize>,
}

impl Pool {
    /// Splits a row-major matrix stored at the slot's start into `K` disjoint rectangles (a
    /// column split, a row split, or an L-shape of both: the pieces of one matmul's output that
    /// different processors write at once). Each comes back as a [`ColumnsMut`] whose row 0 is
    /// the block's first row. Empty blocks are allowed and overlap nothing. Errors (nothing
    /// changes): [`UmaError::ForeignHandle`], [`UmaError::BadLayout`],
    /// [`UmaError::InvalidRange`], [`UmaError::OutOfBounds`] (past `rows` or `cols`),
    /// [`UmaError::Overlap`].
    pub fn split_blocks<'a, const K: usize>(
        &'a self,
        handle: &'a mut Handle,
        layout: MatrixLayout,
        blocks: [Block; K],
    ) -> Result<[ColumnsMut<'a>; K], UmaError> {
        Ok(self.split_blocks_flag(handle, layout, blocks)?.0)
    }

    /// [`Pool::split_blocks`], also lending the slot's completion flag (it lives in the slot's
    /// header, apart from the data the views reach), so the producers of the blocks can signal
    /// the consumer on it while the views exist.
    pub fn split_blocks_flag<'a, const K: usize>(
        &'a self,
        handle: &'a mut Handle,
        layout: MatrixLayout,
        blocks: [Block; K],
    ) -> Result<([ColumnsMut<'a>; K], &'a CompletionFlag), UmaError> {
        let flag = self.flag(handle)?;
        let base = self.slot_ptr(handle)?;
        match layout.span() {
            Some(span) if span <= self.slot_size() => {}
            _ => return Err(UmaError::BadLayout),
        }
        let rows: [Range<usize>; K] = std::array::from_fn(|i| blocks[i].rows.clone());
        let cols: [Range<usize>; K] = std::array::from_fn(|i| blocks[i].cols.clone());
        // Bounds and well-formedness of each range (overlap is checked on rectangles below).
        for i in 0..K {
            check_ranges(std::slice::from_ref(&rows[i]), layout.rows)?;
            check_ranges(std::slice::from_ref(&cols[i]), layout.cols)?;
        }
        let empty = |i: usize| rows[i].is_empty() || cols[i].is_empty();
        let meet = |a: &Range<usize>, b: &Range<usize>| a.start < b.end && b.start < a.end;
        for i in 0..K {
            for j in i + 1..K {
                if !empty(i) && !empty(j) && meet(&rows[i], &rows[j]) && meet(&cols[i], &cols[j]) {
                    return Err(UmaError::Overlap(i, j));
                }
            }
        }
        let views = std::array::from_fn(|i| {
            // An empty block points at the slot's start: it reaches no byte.
            let offset = if empty(i) {
                0
            } else {
                rows[i].start * layout.row_stride + cols[i].start * layout.elem_size
            };
            ColumnsMut {
                // SAFETY: a non-empty block has rows.start < rows and cols.start < cols
                // (checked), so the offset lies inside the layout's span, within the slot.
                base: unsafe { NonNull::new_unchecked(base.add(offset)) },
                layout: MatrixLayout {
                    rows: rows[i].len(),
                    ..layout
                },
                cols: cols[i].clone(),
                offset,
                _slot: PhantomData,
            }
        });
        Ok((views, flag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::single_range_in_vec_init, clippy::reversed_empty_ranges)]
    fn ranges() {
        assert!(check_ranges(&[0..4, 4..8, 8..8, 3..3], 8).is_ok());
        assert_eq!(check_ranges(&[0..4, 3..8], 8), Err(UmaError::Overlap(0, 1)));
        assert_eq!(
            check_ranges(&[0..9], 8),
            Err(UmaError::OutOfBounds { end: 9, len: 8 })
        );
        let r = check_ranges(&[5..4], 8);
        assert_eq!(r, Err(UmaError::InvalidRange { start: 5, end: 4 }));
        assert_eq!(MatrixLayout::dense(3, 4, 4).span(), Some(48));
        assert_eq!(MatrixLayout::dense(3, 4, 0).span(), None);
        let short = MatrixLayout {
            row_stride: 8,
            ..MatrixLayout::dense(3, 4, 4)
        };
        assert_eq!(short.span(), None);
    }
}
