//! The "split" device layouts of Q8_0, Q5_0, Q5_1 and the K-quants (Q4_K, Q5_K, Q6_K), made
//! once at load for the x-stationary GEMV and the register-tiled GEMM (`kernels/mm.cl`): every
//! 32-value unit (a GGUF block, or a K-quant sub-block) becomes aligned quant words in one
//! plane, its scales and high bits a small record in the other, so a work-item reads one
//! 16-byte load (Q8_0: two) and one or two small loads per 32 weights, and the bits come out
//! already in the byte lanes an integer dot product wants.
//!
//! Plane 0 (quants), per row `nb = k / 32` units in order, 16 bytes each (Q8_0: 32):
//! * 4-bit and 5/6-bit formats: the unit's low nibbles in GGUF Q4_0 order: 32-bit word `j`
//!   (`j < 4`), byte `b` holds value `4j + b` in its low nibble and value `16 + 4j + b` in its
//!   high nibble. So `(w_j & 0x0F0F0F0F)` are values `4j..4j+3` and `(w_j >> 4) & 0x0F0F0F0F`
//!   values `16+4j..`, one per byte: "group" `i` (`0..8`) of the unit is values `4i..4i+3`.
//! * Q8_0: the 32 signed bytes as stored (group `i` = bytes `4i..4i+3`).
//!
//! Plane 1 (records), little-endian:
//! * Q8_0: per unit the f16 `d` (2 bytes).
//! * Q5_0, Q5_1: per unit 8 bytes: `u32 qh'`, f16 `d`, f16 `m` (Q5_0: 0), where bit `8b + i`
//!   of `qh'` is the fifth bit of value `4i + b`, so `((qh' >> i) & 0x01010101) << 4` is group
//!   `i`'s fifth bits in its byte lanes.
//! * Q4_K: per super-block (8 units) 20 bytes: f16 `d`, f16 `dmin`, then per unit `j` the
//!   6-bit scale and minimum as two bytes (`sc`, `m`): value `d sc q - dmin m`.
//! * Q5_K: per super-block 52 bytes: Q4_K's 20, then per unit a `u32 qh'` as for Q5_0.
//! * Q6_K: per super-block 84 bytes: per unit `j` two `u32` of high bits (bits `8b + 2s`,
//!   `8b + 2s + 1` of word `w` are the two high bits of value `4(4w + s) + b`, so group `i`'s
//!   are `((h[i / 4] >> 2 (i % 4)) & 0x03030303) << 4`), then the 16 i8 scales as GGUF stores
//!   them (unit `j`: scales `2j`, `2j + 1`, for its values `0..16` and `16..32`), then f16 `d`,
//!   two bytes of padding: value `d sc (q - 32)`.
//!
//! Every record field is read at its natural alignment (plane 1 of a row starts 4-aligned).
//! The values are exactly the GGUF values: [`dequantize_split_row`] is tested against
//! `hetero_sme::dequantize_row`.

use crate::error::{Error, Result};
use crate::format::{matrix_bytes, GgmlType, BLOCK};
use half::f16;

/// Bytes of plane 0 per 32-value unit.
fn quant_bytes(ty: GgmlType) -> usize {
    if ty == GgmlType::Q8_0 {
        32
    } else {
        16
    }
}

/// Plane-1 bytes: `(per unit, per 256-value super-block)`; one of them is 0.
fn record_bytes(ty: GgmlType) -> Option<(usize, usize)> {
    Some(match ty {
        GgmlType::Q8_0 => (2, 0),
        GgmlType::Q5_0 | GgmlType::Q5_1 => (8, 0),
        GgmlType::Q4K => (0, 20),
        GgmlType::Q5K => (0, 52),
        GgmlType::Q6K => (0, 84),
        _ => return None,
    })
}

/// Whether `ty` has a split layout ([`relayout_split`]).
pub fn has_split_layout(ty: GgmlType) -> bool {
    record_bytes(ty).is_some()
}

/// Sizes `(plane 0 bytes, plane 1 bytes)` of an `n x k` matrix of `ty` in its split layout.
/// Errors for a type without one and for shapes GGUF cannot hold.
pub fn relayout_split_len(ty: GgmlType, n: usize, k: usize) -> Result<(usize, usize)> {
    let (pu, ps) = record_bytes(ty).ok_or(Error::NotApplicable(
        "the split layout is defined for Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K",
    ))?;
    matrix_bytes(ty, n, k)?;
    let units = n * (k / BLOCK);
    Ok((units * quant_bytes(ty), units * pu + n * (k / 256) * ps))
}

fn h16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K / Q5_K super-block from its 12
/// packed bytes (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// 16 bytes of plane 0 from a unit's 32 quant values (each < 16).
fn pack_nibbles(q: &[u8; 32], out: &mut [u8]) {
    for e in 0..16 {
        out[e] = (q[e] & 15) | ((q[e + 16] & 15) << 4);
    }
}

/// `qh'` from the fifth bits (`hb[e]` of value `e`, 0 or 1).
fn pack_fifth(hb: &[u8; 32]) -> u32 {
    let mut v = 0u32;
    for i in 0..8 {
        for b in 0..4 {
            v |= u32::from(hb[4 * i + b] & 1) << (8 * b + i);
        }
    }
    v
}

/// Q6_K's two high-bit words from the values' bits 4-5 (`hb[e]` in 0..4).
fn pack_six(hb: &[u8; 32]) -> [u32; 2] {
    let mut w = [0u32; 2];
    for i in 0..8 {
        for b in 0..4 {
            w[i / 4] |= u32::from(hb[4 * i + b] & 3) << (8 * b + 2 * (i % 4));
        }
    }
    w
}

/// Re-lays an `n x k` GGUF matrix of `ty` (Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) out into its
/// split layout (see the module docs), once at load. `p0`/`p1` take at least
/// [`relayout_split_len`] bytes.
pub fn relayout_split(
    ty: GgmlType,
    src: &[u8],
    n: usize,
    k: usize,
    p0: &mut [u8],
    p1: &mut [u8],
) -> Result<()> {
    let (n0, n1) = relayout_split_len(ty, n, k)?;
    let need = matrix_bytes(ty, n, k)?;
    for (what, needed, got) in [
        ("src", need, src.len()),
        ("plane 0", n0, p0.len()),
        ("plane 1", n1, p1.len()),
    ] {
        if got < needed {
            return Err(Error::BufferTooSmall { what, needed, got });
        }
    }
    let nb = k / BLOCK;
    let rb = need / n;
    let qb = quant_bytes(ty);
    let (pu, ps) = record_bytes(ty).unwrap_or((0, 0));
    p1[..n1].fill(0);
    for row in 0..n {
        let r = &src[row * rb..(row + 1) * rb];
        for u in 0..nb {
            let q0 = &mut p0[(row * nb + u) * qb..][..qb];
            let mut q = [0u8; 32];
            let mut hb = [0u8; 32];
            match ty {
                GgmlType::Q8_0 => {
                    let b = &r[u * 34..][..34];
                    q0.copy_from_slice(&b[2..34]);
                    p1[(row * nb + u) * 2..][..2].copy_from_slice(&b[..2]);
                    continue;
                }
                GgmlType::Q5_0 | GgmlType::Q5_1 => {
                    let (bb, hdr) = if ty == GgmlType::Q5_0 {
                        (22, 2)
                    } else {
                        (24, 4)
                    };
                    let b = &r[u * bb..][..bb];
                    let qh = u32::from_le_bytes([b[hdr], b[hdr + 1], b[hdr + 2], b[hdr + 3]]);
                    q0.copy_from_slice(&b[hdr + 4..hdr + 20]);
                    for (e, h) in hb.iter_mut().enumerate() {
                        *h = ((qh >> e) & 1) as u8;
                    }
                    let rec = &mut p1[(row * nb + u) * pu..][..8];
                    rec[..4].copy_from_slice(&pack_fifth(&hb).to_le_bytes());
                    rec[4..8 - 4 + hdr].copy_from_slice(&b[..hdr]);
                    continue;
                }
                GgmlType::Q4K | GgmlType::Q5K => {
                    let bb = if ty == GgmlType::Q4K { 144 } else { 176 };
                    let (s, j) = (u / 8, u % 8);
                    let b = &r[s * bb..][..bb];
                    let qs = if ty == GgmlType::Q4K {
                        &b[16..]
                    } else {
                        &b[48..]
                    };
                    for (l, v) in q.iter_mut().enumerate() {
                        *v = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
                    }
                    let rec = &mut p1[(row * (k / 256) + s) * ps..][..ps];
                    if j == 0 {
                        rec[..4].copy_from_slice(&b[..4]);
                    }
                    let (sc, m) = scale_min_k4(j, &b[4..16]);
                    rec[4 + 2 * j] = sc;
                    rec[5 + 2 * j] = m;
                    if ty == GgmlType::Q5K {
                        for (l, h) in hb.iter_mut().enumerate() {
                            *h = (b[16 + l] >> j) & 1;
                        }
                        rec[20 + 4 * j..24 + 4 * j].copy_from_slice(&pack_fifth(&hb).to_le_bytes());
                    }
                }
                GgmlType::Q6K => {
                    let (s, j) = (u / 8, u % 8);
                    let b = &r[s * 210..][..210];
                    let (h, qq) = (j / 4, j % 4);
                    for l in 0..32 {
                        let lo = b[64 * h + 32 * (qq % 2) + l];
                        q[l] = (lo >> (4 * (qq / 2))) & 15;
                        hb[l] = (b[128 + 32 * h + l] >> (2 * qq)) & 3;
                    }
                    let rec = &mut p1[(row * (k / 256) + s) * ps..][..ps];
                    let w = pack_six(&hb);
                    rec[8 * j..8 * j + 4].copy_from_slice(&w[0].to_le_bytes());
                    rec[8 * j + 4..8 * j + 8].copy_from_slice(&w[1].to_le_bytes());
                    if j == 0 {
                        rec[64..80].copy_from_slice(&b[192..208]);
                        rec[80..82].copy_from_slice(&b[208..210]);
                    }
                }
                _ => return Err(Error::NotApplicable("no split layout for this type")),
            }
            pack_nibbles(&q, q0);
        }
    }
    Ok(())
}

/// Dequantizes row `row` of a matrix in its split layout (planes `p0`, `p1` of a matrix of
/// `k` columns) into `out[..k]`: the values the kernels compute with, for tests and for
/// checking a layout.
pub fn dequantize_split_row(
    ty: GgmlType,
    p0: &[u8],
    p1: &[u8],
    k: usize,
    row: usize,
    out: &mut [f32],
) -> Result<()> {
    let (n0, n1) = relayout_split_len(ty, row + 1, k)?;
    if p0.len() < n0 || p1.len() < n1 || out.len() < k {
        return Err(Error::BufferTooSmall {
            what: "dequantize_split_row",
            needed: n0,
            got: p0.len(),
        });
    }
    let nb = k / BLOCK;
    let qb = quant_bytes(ty);
    let (pu, ps) = record_bytes(ty).unwrap_or((0, 0));
    let f = |b: &[u8], at: usize| f16::from_bits(h16(b, at)).to_f32();
    for u in 0..nb {
        let q0 = &p0[(row * nb + u) * qb..][..qb];
        let o = &mut out[32 * u..32 * u + 32];
        if ty == GgmlType::Q8_0 {
            let d = f(p1, (row * nb + u) * 2);
            for e in 0..32 {
                o[e] = q0[e] as i8 as f32 * d;
            }
            continue;
        }
        let mut q = [0u32; 32];
        for e in 0..16 {
            q[e] = u32::from(q0[e] & 15);
            q[e + 16] = u32::from(q0[e] >> 4);
        }
        let fifth = |qh: u32, q: &mut [u32; 32]| {
            for i in 0..8 {
                for b in 0..4 {
                    q[4 * i + b] |= ((qh >> (8 * b + i)) & 1) << 4;
                }
            }
        };
        match ty {
            GgmlType::Q5_0 | GgmlType::Q5_1 => {
                let rec = &p1[(row * nb + u) * pu..][..8];
                fifth(u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]), &mut q);
                let (d, m) = (f(rec, 4), f(rec, 6));
                for e in 0..32 {
                    o[e] = if ty == GgmlType::Q5_0 {
                        (q[e] as f32 - 16.0) * d
                    } else {
                        q[e] as f32 * d + m
                    };
                }
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                let (s, j) = (u / 8, u % 8);
                let rec = &p1[(row * (k / 256) + s) * ps..][..ps];
                if ty == GgmlType::Q5K {
                    let at = 20 + 4 * j;
                    let qh = u32::from_le_bytes([rec[at], rec[at + 1], rec[at + 2], rec[at + 3]]);
                    fifth(qh, &mut q);
                }
                let (d, dmin) = (f(rec, 0), f(rec, 2));
                let (sc, m) = (rec[4 + 2 * j] as f32, rec[5 + 2 * j] as f32);
                for e in 0..32 {
                    o[e] = d * sc * q[e] as f32 - dmin * m;
                }
            }
            GgmlType::Q6K => {
                let (s, j) = (u / 8, u % 8);
                let rec = &p1[(row * (k / 256) + s) * ps..][..ps];
                for (w, word) in [&rec[8 * j..8 * j + 4], &rec[8 * j + 4..8 * j + 8]]
                    .iter()
                    .enumerate()
                {
                    let v = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                    for s2 in 0..4 {
                        for b in 0..4 {
                            q[4 * (4 * w + s2) + b] |= ((v >> (8 * b + 2 * s2)) & 3) << 4;
                        }
                    }
                }
                let d = f(rec, 80);
                for e in 0..32 {
                    let sc = rec[64 + 2 * j + e / 16] as i8 as f32;
                    o[e] = d * sc * (q[e] as f32 - 32.0);
                }
            }
            _ => return Err(Error::NotApplicable("no split layout for this type")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random GGUF bytes of `n x k` of `ty` with finite f16 fields.
    fn random_matrix(ty: GgmlType, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut w: Vec<u8> = (0..matrix_bytes(ty, n, k).unwrap())
            .map(|_| next() as u8)
            .collect();
        let (bb, halves): (usize, &[usize]) = match ty {
            GgmlType::Q8_0 => (34, &[0]),
            GgmlType::Q5_0 => (22, &[0]),
            GgmlType::Q5_1 => (24, &[0, 2]),
            GgmlType::Q4K => (144, &[0, 2]),
            GgmlType::Q5K => (176, &[0, 2]),
            GgmlType::Q6K => (210, &[208]),
            _ => unreachable!(),
        };
        for b in w.chunks_exact_mut(bb) {
            for &at in halves {
                let v = f16::from_f32(((next() % 2000) as f32 - 1000.0) / 4096.0);
                b[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        w
    }

    fn bb_seed(ty: GgmlType) -> u64 {
        ty.block().map_or(1, |b| b.1 as u64)
    }

    #[test]
    fn split_rows_dequantize_to_the_gguf_values() {
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
        ] {
            let (n, k) = (3, 512);
            let w = random_matrix(ty, n, k, 0x9e37 + k as u64 * n as u64 + bb_seed(ty));
            let (n0, n1) = relayout_split_len(ty, n, k).unwrap();
            let (mut p0, mut p1) = (vec![0u8; n0], vec![0u8; n1]);
            relayout_split(ty, &w, n, k, &mut p0, &mut p1).unwrap();
            let rb = w.len() / n;
            let (mut want, mut got) = (vec![0f32; k], vec![0f32; k]);
            for r in 0..n {
                hetero_sme::dequantize_row(ty, &w[r * rb..(r + 1) * rb], &mut want).unwrap();
                dequantize_split_row(ty, &p0, &p1, k, r, &mut got).unwrap();
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    // Same products in f32; the reference may round d*sc*q - dmin*m in
                    // another order: 1 ulp of the larger term.
                    let tol = 2.0 * f32::EPSILON * a.abs().max(b.abs()).max(1e-3);
                    assert!((a - b).abs() <= tol, "{ty} row {r} value {i}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn bad_shapes_and_buffers_are_typed_errors() {
        assert!(relayout_split_len(GgmlType::Q4_0, 1, 32).is_err());
        assert!(relayout_split_len(GgmlType::Q4K, 1, 32).is_err());
        let w = random_matrix(GgmlType::Q8_0, 1, 64, 5);
        let mut p0 = vec![0u8; 63];
        let mut p1 = vec![0u8; 4];
        assert!(matches!(
            relayout_split(GgmlType::Q8_0, &w, 1, 64, &mut p0, &mut p1),
            Err(Error::BufferTooSmall { .. })
        ));
    }
}
