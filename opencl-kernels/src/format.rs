//! Weight formats: GGUF block layouts and the load-time Q4_0 re-layout.

use crate::error::{Error, Result};

/// Elements per block of the GGUF block formats.
pub const BLOCK: usize = 32;

/// How a weight matrix `W[N][K]` (row-major, one row per output) is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// IEEE half, `K` values per row.
    F16,
    /// GGUF Q4_0: per 32 values, f16 `d` then 16 bytes; byte `i` holds element `i` in its low
    /// nibble and element `i + 16` in its high nibble; value = (q - 8) * d. 18 bytes.
    Q4_0,
    /// GGUF Q4_1: f16 `d`, f16 `m`, 16 bytes of nibbles as Q4_0; value = q * d + m. 20 bytes.
    Q4_1,
    /// GGUF Q8_0: f16 `d`, 32 signed bytes; value = q * d. 34 bytes.
    Q8_0,
}

impl WeightFormat {
    /// Bytes of one block (F16: of one element).
    pub fn block_bytes(self) -> usize {
        match self {
            WeightFormat::F16 => 2,
            WeightFormat::Q4_0 => 18,
            WeightFormat::Q4_1 => 20,
            WeightFormat::Q8_0 => 34,
        }
    }

    /// Whether the format is made of 32-element blocks.
    pub fn is_block(self) -> bool {
        self != WeightFormat::F16
    }

    /// Bytes of one row of `k` elements; errors if `k` is 0 or, for block formats, not a
    /// multiple of 32.
    pub fn row_bytes(self, k: usize) -> Result<usize> {
        if k == 0 {
            return Err(Error::BadShape("K must be positive".into()));
        }
        if self.is_block() {
            if !k.is_multiple_of(BLOCK) {
                return Err(Error::BadShape(format!(
                    "K = {k} is not a multiple of 32, as {self:?} blocks need"
                )));
            }
            Ok(k / BLOCK * self.block_bytes())
        } else {
            Ok(k * 2)
        }
    }

    /// Bytes of an `n` x `k` matrix.
    pub fn matrix_bytes(self, n: usize, k: usize) -> Result<usize> {
        if n == 0 {
            return Err(Error::BadShape("N must be positive".into()));
        }
        self.row_bytes(k)?
            .checked_mul(n)
            .ok_or_else(|| Error::BadShape("matrix size overflows".into()))
    }
}

/// Sizes `(quant bytes, scale bytes)` of the re-laid-out Q4_0 matrix ([`relayout_q4_0`]).
pub fn relayout_q4_0_len(n: usize, k: usize) -> Result<(usize, usize)> {
    WeightFormat::Q4_0.matrix_bytes(n, k)?;
    let blocks = n * (k / BLOCK);
    Ok((blocks * 16, blocks * 2))
}

/// Splits GGUF Q4_0 blocks into a structure of arrays: `qs` gets each block's 16 quant bytes
/// (so a GPU work-item reads one aligned 16-byte word and neighbours read neighbouring words),
/// `d` gets each block's f16 scale bytes, both in the original block order. Done once at load.
pub fn relayout_q4_0(src: &[u8], n: usize, k: usize, qs: &mut [u8], d: &mut [u8]) -> Result<()> {
    let need = WeightFormat::Q4_0.matrix_bytes(n, k)?;
    let (nq, nd) = relayout_q4_0_len(n, k)?;
    for (what, needed, got) in [
        ("src", need, src.len()),
        ("qs", nq, qs.len()),
        ("d", nd, d.len()),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall { what, needed, got });
        }
    }
    for (b, blk) in src[..need].chunks_exact(18).enumerate() {
        d[2 * b..2 * b + 2].copy_from_slice(&blk[..2]);
        qs[16 * b..16 * b + 16].copy_from_slice(&blk[2..]);
    }
    Ok(())
}

/// Sizes `(quant bytes, scale bytes)` of the four-row interleaved Q4_0 layout
/// ([`relayout_q4_0_x4`]); rows are padded to a multiple of four.
pub fn relayout_q4_0_x4_len(n: usize, k: usize) -> Result<(usize, usize)> {
    WeightFormat::Q4_0.matrix_bytes(n, k)?;
    let blocks = n.div_ceil(4) * 4 * (k / BLOCK);
    Ok((blocks * 16, blocks * 2))
}

/// Re-lays GGUF Q4_0 blocks out for [`crate::Kernels::gemv_q4_0_x4`]: rows in groups of four;
/// for each 32-bit quant word `i` of a row, the four rows' words side by side
/// (`qs[((g * nw + i) * 4 + j) * 4..][..4]` = word `i` of row `4g + j`, `nw = k / 8`), and the
/// four rows' f16 scales of block `b` side by side (`d[((g * nb + b) * 4 + j) * 2..][..2]`).
/// Padding rows get zero scales. Done once at load.
pub fn relayout_q4_0_x4(src: &[u8], n: usize, k: usize, qs: &mut [u8], d: &mut [u8]) -> Result<()> {
    let need = WeightFormat::Q4_0.matrix_bytes(n, k)?;
    let (nq, nd) = relayout_q4_0_x4_len(n, k)?;
    for (what, needed, got) in [
        ("src", need, src.len()),
        ("qs", nq, qs.len()),
        ("d", nd, d.len()),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall { what, needed, got });
        }
    }
    let nb = k / BLOCK;
    let nw = nb * 4;
    qs[..nq].fill(0);
    d[..nd].fill(0);
    for row in 0..n {
        let (g, j) = (row / 4, row % 4);
        for b in 0..nb {
            let blk = &src[(row * nb + b) * 18..][..18];
            let di = ((g * nb + b) * 4 + j) * 2;
            d[di..di + 2].copy_from_slice(&blk[..2]);
            for p in 0..4 {
                let i = b * 4 + p;
                let qi = ((g * nw + i) * 4 + j) * 4;
                qs[qi..qi + 4].copy_from_slice(&blk[2 + 4 * p..6 + 4 * p]);
            }
        }
    }
    Ok(())
}

/// Sizes `(quant bytes, scale bytes)` of the "T" layout of a Q4_0 or Q4_1 matrix
/// ([`relayout_q4_t`]): 16 quant bytes per block, and per block 2 scale bytes (Q4_0: `d`) or
/// 4 (Q4_1: `d`, `m`). Errors for other formats and for `k % 32 != 0`.
pub fn relayout_q4_t_len(format: WeightFormat, n: usize, k: usize) -> Result<(usize, usize)> {
    let per = match format {
        WeightFormat::Q4_0 => 2,
        WeightFormat::Q4_1 => 4,
        _ => {
            return Err(Error::NotApplicable(
                "the T layout is defined for Q4_0 and Q4_1",
            ))
        }
    };
    format.matrix_bytes(n, k)?;
    let blocks = n * (k / BLOCK);
    Ok((blocks * 16, blocks * per))
}

/// Re-lays GGUF Q4_0 / Q4_1 blocks out for [`crate::Kernels::gemv_q4_t`] ("T" layout), once
/// at load time:
///
/// * quant plane: per row, `nb = k / 32` 16-byte units; unit `u` holds the little-endian
///   32-bit words `u, u + nb, u + 2nb, u + 3nb` of the row, where word `w` packs the row's
///   weights `8w .. 8w + 7`, weight `8w + e` in bits `4e .. 4e + 3`. A GPU work-item reads one
///   aligned unit; neighbouring work-items read neighbouring units and, for each word,
///   neighbouring 32-byte slices of the activations.
/// * scale plane: per row, per block in order, the f16 `d` (Q4_0) or `d`, `m` (Q4_1) bytes.
pub fn relayout_q4_t(
    format: WeightFormat,
    src: &[u8],
    n: usize,
    k: usize,
    qs: &mut [u8],
    d: &mut [u8],
) -> Result<()> {
    let (nq, nd) = relayout_q4_t_len(format, n, k)?;
    let need = format.matrix_bytes(n, k)?;
    for (what, needed, got) in [
        ("src", need, src.len()),
        ("qs", nq, qs.len()),
        ("d", nd, d.len()),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall { what, needed, got });
        }
    }
    let bb = format.block_bytes();
    let hdr = bb - 16; // 2 (d) or 4 (d, m)
    let nb = k / BLOCK;
    for row in 0..n {
        let rsrc = &src[row * nb * bb..(row + 1) * nb * bb];
        for (b, blk) in rsrc.chunks_exact(bb).enumerate() {
            let di = (row * nb + b) * hdr;
            d[di..di + hdr].copy_from_slice(&blk[..hdr]);
        }
        // Nibble of weight kk of this row (GGUF: byte i low = element i, high = element i+16).
        let nib = |kk: usize| -> u32 {
            let blk = &rsrc[(kk / BLOCK) * bb + hdr..][..16];
            let i = kk % BLOCK;
            u32::from(if i < 16 {
                blk[i] & 0xF
            } else {
                blk[i - 16] >> 4
            })
        };
        for w in 0..4 * nb {
            let word = (0..8).fold(0u32, |acc, e| acc | (nib(8 * w + e) << (4 * e)));
            let (u, s) = (w % nb, w / nb);
            let qi = ((row * nb + u) * 4 + s) * 4;
            qs[qi..qi + 4].copy_from_slice(&word.to_le_bytes());
        }
    }
    Ok(())
}
