//! The packed weight format: 64-column panels of K-pair-interleaved FP16 (or BF16) elements.
//!
//! Element index for panel `p`, k-pair `q`, column `c` in `0..64`, `j` in `0..2`:
//! `((p * kp + q) * 64 + c) * 2 + j`, holding `W[2q + j][64p + c]`, zero where `2q + j >= K` or
//! `64p + c >= N`; `kp = ceil(K/2)`, `np = ceil(N/64)`.

use core::ops::Range;

use crate::Error;

/// Columns per panel.
pub const PANEL_COLS: usize = 64;
/// `u16` elements per k-pair row of one panel (64 columns × 2 k).
pub const PAIR_ELEMS: usize = 2 * PANEL_COLS;

/// The element type of a packed weight buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackedFormat {
    /// IEEE binary16 bits: read by every kernel except AMX.
    F16,
    /// bfloat16 bits: read by the AMX-BF16 kernel (and the portable and AVX-512 ones).
    /// Inputs keep 8 significant bits (about 2-3 decimal digits) instead of FP16's 11.
    Bf16,
}

/// How a source matrix W (logically K×N) is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `W[k][n]` at `k * ld + n` (`ld >= N`).
    RowMajor,
    /// `W[k][n]` at `n * ld + k` (`ld >= K`): how GGUF stores a matmul weight (N rows of K).
    ColMajor,
}

/// A dense source weight W (logically K×N) to pack.
#[derive(Debug, Clone, Copy)]
pub struct WeightSource<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Rows of W (the reduction dimension).
    pub k: usize,
    /// Columns of W (the output dimension).
    pub n: usize,
    /// Leading dimension, see [`Layout`].
    pub ld: usize,
    /// Storage order.
    pub layout: Layout,
}

/// Number of k-pairs, `ceil(k / 2)`.
pub const fn k_pairs(k: usize) -> usize {
    k.div_ceil(2)
}

/// Number of panels, `ceil(n / 64)`.
pub const fn panels(n: usize) -> usize {
    n.div_ceil(PANEL_COLS)
}

/// `u16` elements of a packed K×N weight: `ceil(N/64) * ceil(K/2) * 128`, or `None` on overflow.
pub fn packed_len_checked(k: usize, n: usize) -> Option<usize> {
    panels(n).checked_mul(k_pairs(k))?.checked_mul(PAIR_ELEMS)
}

/// `u16` elements of a packed K×N weight: `ceil(N/64) * ceil(K/2) * 128` (saturates at
/// `usize::MAX` on overflow, which no buffer can satisfy).
pub fn packed_len(k: usize, n: usize) -> usize {
    packed_len_checked(k, n).unwrap_or(usize::MAX)
}

/// A packed weight: a borrowed buffer in the packed format with its logical shape.
#[derive(Debug, Clone, Copy)]
pub struct PackedRef<'a> {
    data: &'a [u16],
    k: usize,
    n: usize,
    format: PackedFormat,
}

impl<'a> PackedRef<'a> {
    /// Wraps `data`, which must hold at least `packed_len(k, n)` elements (extra ones are ignored).
    pub fn new(data: &'a [u16], k: usize, n: usize, format: PackedFormat) -> Result<Self, Error> {
        let needed = packed_len_checked(k, n).ok_or(Error::Overflow)?;
        if data.len() < needed {
            return Err(Error::BufferTooSmall {
                what: "packed weight",
                needed,
                got: data.len(),
            });
        }
        Ok(Self {
            data: &data[..needed],
            k,
            n,
            format,
        })
    }
    /// K (rows of W).
    pub fn k(&self) -> usize {
        self.k
    }
    /// N (columns of W).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Element format.
    pub fn format(&self) -> PackedFormat {
        self.format
    }
    /// The packed elements (exactly `packed_len(k, n)`).
    pub fn data(&self) -> &'a [u16] {
        self.data
    }
    /// The packed weight of panels `p0..p1` alone (columns `64*p0 .. min(64*p1, N)`): panels are
    /// contiguous, so a panel range is a weight of its own.
    pub fn panel_range(&self, p0: usize, p1: usize) -> Result<PackedRef<'a>, Error> {
        let np = panels(self.n);
        if p0 > p1 || p1 > np {
            return Err(Error::BadRange {
                start: p0,
                end: p1,
                n: np,
            });
        }
        let stride = k_pairs(self.k) * PAIR_ELEMS;
        let n = (p1 * PANEL_COLS)
            .min(self.n)
            .saturating_sub(p0 * PANEL_COLS);
        Ok(PackedRef {
            data: &self.data[p0 * stride..p1 * stride],
            k: self.k,
            n,
            format: self.format,
        })
    }
}

fn check_source<T>(src: &WeightSource<'_, T>, cols: &Range<usize>) -> Result<(), Error> {
    if cols.start > cols.end || cols.end > src.n {
        return Err(Error::BadRange {
            start: cols.start,
            end: cols.end,
            n: src.n,
        });
    }
    if src.k == 0 || src.n == 0 {
        return Ok(());
    }
    let (min_ld, needed) = match src.layout {
        Layout::RowMajor => (
            src.n,
            (src.k - 1)
                .checked_mul(src.ld)
                .and_then(|x| x.checked_add(src.n)),
        ),
        Layout::ColMajor => (
            src.k,
            (src.n - 1)
                .checked_mul(src.ld)
                .and_then(|x| x.checked_add(src.k)),
        ),
    };
    if src.ld < min_ld {
        return Err(Error::BadStride {
            what: "weight source",
            ld: src.ld,
            min: min_ld,
        });
    }
    let needed = needed.ok_or(Error::Overflow)?;
    if src.data.len() < needed {
        return Err(Error::BufferTooSmall {
            what: "weight source",
            needed,
            got: src.data.len(),
        });
    }
    Ok(())
}

fn pack_generic<T: Copy>(
    src: &WeightSource<'_, T>,
    cols: Range<usize>,
    dst: &mut [u16],
    conv: impl Fn(T) -> u16,
) -> Result<(), Error> {
    check_source(src, &cols)?;
    let n = cols.end - cols.start;
    let k = src.k;
    let needed = packed_len_checked(k, n).ok_or(Error::Overflow)?;
    if dst.len() < needed {
        return Err(Error::BufferTooSmall {
            what: "packed destination",
            needed,
            got: dst.len(),
        });
    }
    let kp = k_pairs(k);
    let get = |kk: usize, nn: usize| -> T {
        match src.layout {
            Layout::RowMajor => src.data[kk * src.ld + nn],
            Layout::ColMajor => src.data[nn * src.ld + kk],
        }
    };
    for p in 0..panels(n) {
        for q in 0..kp {
            let row = &mut dst[(p * kp + q) * PAIR_ELEMS..(p * kp + q + 1) * PAIR_ELEMS];
            for c in 0..PANEL_COLS {
                let col = p * PANEL_COLS + c;
                for j in 0..2 {
                    let kk = 2 * q + j;
                    row[2 * c + j] = if kk < k && col < n {
                        conv(get(kk, cols.start + col))
                    } else {
                        0
                    };
                }
            }
        }
    }
    Ok(())
}

/// Packs columns `cols` of an F32 source into `dst` (at least `packed_len(src.k, cols.len())`
/// elements), rounding to nearest-even FP16 or BF16 per `format`. The range packs as a standalone
/// weight of `cols.len()` columns (the CPU shard of a column-split weight).
pub fn pack_f32(
    src: &WeightSource<'_, f32>,
    cols: Range<usize>,
    format: PackedFormat,
    dst: &mut [u16],
) -> Result<(), Error> {
    match format {
        PackedFormat::F16 => pack_generic(src, cols, dst, |x| half::f16::from_f32(x).to_bits()),
        PackedFormat::Bf16 => pack_generic(src, cols, dst, |x| half::bf16::from_f32(x).to_bits()),
    }
}

/// Packs columns `cols` of an FP16 (bits) source into `dst`, like [`pack_f32`]. With
/// [`PackedFormat::Bf16`] each FP16 value is rounded to nearest-even BF16.
pub fn pack_f16(
    src: &WeightSource<'_, u16>,
    cols: Range<usize>,
    format: PackedFormat,
    dst: &mut [u16],
) -> Result<(), Error> {
    match format {
        PackedFormat::F16 => pack_generic(src, cols, dst, |x| x),
        PackedFormat::Bf16 => pack_generic(src, cols, dst, |x| {
            half::bf16::from_f32(half::f16::from_bits(x).to_f32()).to_bits()
        }),
    }
}

/// Packs rows `rows` (outputs) of a GGUF matmul weight as stored — N rows of K values of type
/// `ty`, [`crate::GgmlType::row_bytes`] each, no alignment needed — into `dst` (at least
/// `packed_len(k, rows.len())` elements) as a standalone weight of `rows.len()` columns in
/// `format`. F16 into [`PackedFormat::F16`] and BF16 into [`PackedFormat::Bf16`] copy the bits
/// (exact); every other pairing rounds the dequantized value ([`crate::dequantize_row`]) to
/// nearest even. A load-time tool: it allocates one row of K f32 for the types it
/// dequantizes. Errors (nothing written): `UnsupportedFormat`, `BadRange`, `BufferTooSmall`,
/// `ShapeMismatch` (K not a whole number of blocks), `Overflow`.
pub fn pack_gguf(
    ty: crate::GgmlType,
    bytes: &[u8],
    k: usize,
    n: usize,
    rows: Range<usize>,
    format: PackedFormat,
    dst: &mut [u16],
) -> Result<(), Error> {
    use crate::GgmlType;
    if !ty.can_dequantize() {
        return Err(Error::UnsupportedFormat { format: ty });
    }
    if rows.start > rows.end || rows.end > n {
        return Err(Error::BadRange {
            start: rows.start,
            end: rows.end,
            n,
        });
    }
    let rb = ty.row_bytes(k).ok_or(Error::ShapeMismatch {
        what: "K modulo the type's block",
        expected: 0,
        got: k % ty.block().map_or(1, |b| b.0),
    })?;
    let need_src = n.checked_mul(rb).ok_or(Error::Overflow)?;
    if bytes.len() < need_src {
        return Err(Error::BufferTooSmall {
            what: "GGUF weight bytes",
            needed: need_src,
            got: bytes.len(),
        });
    }
    let cols = rows.end - rows.start;
    let needed = packed_len_checked(k, cols).ok_or(Error::Overflow)?;
    if dst.len() < needed {
        return Err(Error::BufferTooSmall {
            what: "packed destination",
            needed,
            got: dst.len(),
        });
    }
    let dst = &mut dst[..needed];
    dst.fill(0);
    let kp = k_pairs(k);
    let copy_bits = matches!(
        (ty, format),
        (GgmlType::F16, PackedFormat::F16) | (GgmlType::BF16, PackedFormat::Bf16)
    );
    let mut row = if copy_bits { Vec::new() } else { vec![0f32; k] };
    for c in 0..cols {
        let src = &bytes[(rows.start + c) * rb..(rows.start + c + 1) * rb];
        let (p, cc) = (c / PANEL_COLS, c % PANEL_COLS);
        let base = p * kp * PAIR_ELEMS + 2 * cc;
        if copy_bits {
            for (kk, b) in src.chunks_exact(2).enumerate() {
                dst[base + (kk / 2) * PAIR_ELEMS + kk % 2] = u16::from_le_bytes([b[0], b[1]]);
            }
        } else {
            crate::dequantize_row(ty, src, &mut row)?;
            for (kk, &v) in row.iter().enumerate() {
                dst[base + (kk / 2) * PAIR_ELEMS + kk % 2] = match format {
                    PackedFormat::F16 => half::f16::from_f32(v).to_bits(),
                    PackedFormat::Bf16 => half::bf16::from_f32(v).to_bits(),
                };
            }
        }
    }
    Ok(())
}
