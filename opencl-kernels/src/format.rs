//! Weight formats: the GGUF block layouts the kernels compute and the load-time Q4_0/Q4_1
//! re-layouts.

use crate::error::{Error, Result};
pub use hetero_sme::GgmlType;

/// Elements per block of the GGUF block formats.
pub const BLOCK: usize = 32;

/// The GGML types the kernels compute, all read exactly as GGUF stores them:
///
/// * F16: `K` halves a row.
/// * 32-value blocks (`K % 32 == 0`): Q4_0 (f16 `d` + 16 nibble bytes, `(q - 8) d`), Q4_1
///   (f16 `d`, f16 `m` + 16 nibble bytes, `q d + m`), Q8_0 (f16 `d` + 32 signed bytes, `q d`),
///   Q5_0 (f16 `d`, 4 bytes of fifth bits + 16 nibble bytes, `(q - 16) d`), Q5_1 (f16 `d`,
///   f16 `m`, fifth bits, nibbles, `q d + m`); nibble byte `i`: element `i` low, `i + 16` high.
/// * K-quants, 256-value super-blocks (`K % 256 == 0`): Q4_K and Q5_K (f16 `d`, `dmin`, eight
///   6-bit scales and minimums packed in 12 bytes, 4-bit quants (Q5_K: and a fifth bit) in
///   sub-blocks of 32, `d sc q - dmin m`), Q6_K (6-bit quants in 16 sub-blocks of 16 with i8
///   scales and one f16 `d`, `d sc (q - 32)`).
///
/// Every other [`GgmlType`] is refused with [`Error::UnsupportedFormat`].
pub const COMPUTABLE: [GgmlType; 9] = [
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// `Ok` when the kernels compute `ty` (one of [`COMPUTABLE`]), else [`Error::UnsupportedFormat`].
pub fn check_computable(ty: GgmlType) -> Result<()> {
    if COMPUTABLE.contains(&ty) {
        Ok(())
    } else {
        Err(Error::UnsupportedFormat(ty))
    }
}

/// Bytes of one block of a computable block format (F16: of one element).
pub(crate) fn block_bytes(ty: GgmlType) -> usize {
    ty.block().map_or(0, |(_, b)| b)
}

/// Bytes of one row of `k` elements of a computable type; errors if the type is not computable,
/// `k` is 0 or not a whole number of blocks (32 values; 256 for the K-quants).
pub fn row_bytes(ty: GgmlType, k: usize) -> Result<usize> {
    check_computable(ty)?;
    if k == 0 {
        return Err(Error::BadShape("K must be positive".into()));
    }
    ty.row_bytes(k).ok_or_else(|| {
        let block = ty.block().map_or(1, |b| b.0);
        Error::BadShape(format!(
            "K = {k} is not a multiple of {block}, as {ty} blocks need"
        ))
    })
}

/// Bytes of an `n` x `k` matrix of a computable type.
pub fn matrix_bytes(ty: GgmlType, n: usize, k: usize) -> Result<usize> {
    if n == 0 {
        return Err(Error::BadShape("N must be positive".into()));
    }
    row_bytes(ty, k)?
        .checked_mul(n)
        .ok_or_else(|| Error::BadShape("matrix size overflows".into()))
}

/// Sizes `(quant bytes, scale bytes)` of the re-laid-out Q4_0 matrix ([`relayout_q4_0`]).
pub fn relayout_q4_0_len(n: usize, k: usize) -> Result<(usize, usize)> {
    matrix_bytes(GgmlType::Q4_0, n, k)?;
    let blocks = n * (k / BLOCK);
    Ok((blocks * 16, blocks * 2))
}

/// Splits GGUF Q4_0 blocks into a structure of arrays: `qs` gets each block's 16 quant bytes
/// (so a GPU work-item reads one aligned 16-byte word and neighbours read neighbouring words),
/// `d` gets each block's f16 scale bytes, both in the original block order. Done once at load.
pub fn relayout_q4_0(src: &[u8], n: usize, k: usize, qs: &mut [u8], d: &mut [u8]) -> Result<()> {
    let need = matrix_bytes(GgmlType::Q4_0, n, k)?;
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
    matrix_bytes(GgmlType::Q4_0, n, k)?;
    let blocks = n.div_ceil(4) * 4 * (k / BLOCK);
    Ok((blocks * 16, blocks * 2))
}

/// Re-lays GGUF Q4_0 blocks out for [`crate::Kernels::gemv_q4_0_x4`]: rows in groups of four;
/// for each 32-bit quant word `i` of a row, the four rows' words side by side
/// (`qs[((g * nw + i) * 4 + j) * 4..][..4]` = word `i` of row `4g + j`, `nw = k / 8`), and the
/// four rows' f16 scales of block `b` side by side (`d[((g * nb + b) * 4 + j) * 2..][..2]`).
/// Padding rows get zero scales. Done once at load.
pub fn relayout_q4_0_x4(src: &[u8], n: usize, k: usize, qs: &mut [u8], d: &mut [u8]) -> Result<()> {
    let need = matrix_bytes(GgmlType::Q4_0, n, k)?;
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
pub fn relayout_q4_t_len(format: GgmlType, n: usize, k: usize) -> Result<(usize, usize)> {
    let per = match format {
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 4,
        _ => {
            return Err(Error::NotApplicable(
                "the T layout is defined for Q4_0 and Q4_1",
            ))
        }
    };
    matrix_bytes(format, n, k)?;
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
    format: GgmlType,
    src: &[u8],
    n: usize,
    k: usize,
    qs: &mut [u8],
    d: &mut [u8],
) -> Result<()> {
    let (nq, nd) = relayout_q4_t_len(format, n, k)?;
    let need = matrix_bytes(format, n, k)?;
    for (what, needed, got) in [
        ("src", need, src.len()),
        ("qs", nq, qs.len()),
        ("d", nd, d.len()),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall { what, needed, got });
        }
    }
    let bb = block_bytes(format);
    let hdr = bb - 16; // 2 (d) or 4 (d, m)
    let nb = k / BLOCK;
    let (src, d) = (&src[..need], &mut d[..nd]);
    let qs = &mut qs[..nq];
    for (row, rsrc) in src.chunks_exact(nb * bb).enumerate() {
        let rq = &mut qs[row * nb * 16..][..nb * 16];
        for (b, blk) in rsrc.chunks_exact(bb).enumerate() {
            d[(row * nb + b) * hdr..][..hdr].copy_from_slice(&blk[..hdr]);
            // GGUF: byte i's low nibble is element i, its high nibble element i + 16. Word
            // w = 4b + j of the row holds elements 8j .. 8j + 7 of block b: the low (j < 2) or
            // high nibbles of bytes 8 (j % 2) .. + 7.
            let q = &blk[hdr..hdr + 16];
            let lo = u64::from_le_bytes(q[..8].try_into().unwrap_or_default());
            let hi = u64::from_le_bytes(q[8..].try_into().unwrap_or_default());
            for (j, v) in [lo, hi, lo >> 4, hi >> 4].into_iter().enumerate() {
                let w = 4 * b + j;
                let (u, s) = (w % nb, w / nb);
                rq[(u * 4 + s) * 4..][..4].copy_from_slice(&pack_nibbles(v).to_le_bytes());
            }
        }
    }
    Ok(())
}

/// The low nibbles of the eight bytes of `v`, packed into 32 bits (byte e's at bits 4e..4e+3).
fn pack_nibbles(v: u64) -> u32 {
    let x = v & 0x0F0F_0F0F_0F0F_0F0F;
    let x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    let x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The T layout by its definition, one nibble at a time: word `w` of a row holds its
    /// elements 8w .. 8w + 7 (element e at bits 4e), stored at unit `w % nb`, slot `w / nb`.
    fn t_layout_by_definition(f: GgmlType, src: &[u8], n: usize, k: usize) -> (Vec<u8>, Vec<u8>) {
        let (bb, nb) = (block_bytes(f), k / BLOCK);
        let hdr = bb - 16;
        let (nq, nd) = relayout_q4_t_len(f, n, k).unwrap();
        let (mut q, mut d) = (vec![0u8; nq], vec![0u8; nd]);
        for row in 0..n {
            let r = &src[row * nb * bb..][..nb * bb];
            for b in 0..nb {
                d[(row * nb + b) * hdr..][..hdr].copy_from_slice(&r[b * bb..][..hdr]);
            }
            let nib = |e: usize| {
                let (blk, i) = (&r[(e / BLOCK) * bb + hdr..][..16], e % BLOCK);
                u32::from(if i < 16 {
                    blk[i] & 15
                } else {
                    blk[i - 16] >> 4
                })
            };
            for w in 0..4 * nb {
                let word = (0..8).fold(0u32, |a, e| a | (nib(8 * w + e) << (4 * e)));
                let qi = ((row * nb + w % nb) * 4 + w / nb) * 4;
                q[qi..qi + 4].copy_from_slice(&word.to_le_bytes());
            }
        }
        (q, d)
    }

    #[test]
    fn relayout_q4_t_matches_its_definition() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for f in [GgmlType::Q4_0, GgmlType::Q4_1] {
            for (n, k) in [(1, 32), (3, 64), (17, 160), (5, 4096)] {
                let mut src = vec![0u8; matrix_bytes(f, n, k).unwrap()];
                for b in &mut src {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    *b = seed as u8;
                }
                let (nq, nd) = relayout_q4_t_len(f, n, k).unwrap();
                // Poisoned outputs: every byte must be written.
                let (mut q, mut d) = (vec![0xA5u8; nq], vec![0x5Au8; nd]);
                relayout_q4_t(f, &src, n, k, &mut q, &mut d).unwrap();
                let (rq, rd) = t_layout_by_definition(f, &src, n, k);
                assert!(q == rq && d == rd, "{f} {n}x{k}");
            }
        }
    }
}
