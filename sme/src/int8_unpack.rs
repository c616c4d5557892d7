//! The inverse of the int8 packers: a packed weight back to the GGUF bytes it was packed from,
//! bit for bit. Every packed layout keeps all the source bits (each element's integer, the FP16
//! scales as stored, the K-quants' 6-bit scales and minimums, Q6_K's signed scales), so a host
//! engine can keep only the packed form and still hand the original tensor back (ggml's
//! `get_tensor` on a repacked weight, e.g. when its scheduler copies the weight to another
//! backend).

use crate::blocks::{pack_scale_min_k4, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K};
use crate::int8::{chunk_at, chunk_u, get_byte, Int8Fmt, INT8_GROUP};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock, QK};
use crate::{Error, Int8WeightRef};

/// Rebuilds one source block from its elements' integers `u` and lane `j` of its scale record.
trait Assemble: QuantBlock + Copy {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self;
}

/// Q4_0 / Q4_1 nibbles: element e < 16 in the low nibble of `qs[e]`, e ≥ 16 in the high one of
/// `qs[e − 16]`.
fn nibbles32(u: &[u8]) -> [u8; 16] {
    let mut qs = [0u8; 16];
    for (e, &v) in u.iter().enumerate() {
        qs[e % 16] |= (v & 15) << (4 * (e / 16));
    }
    qs
}

/// Q5_0 / Q5_1 fifth bits: element e at bit e of the little-endian u32.
fn fifth32(u: &[u8]) -> [u8; 4] {
    let mut h = 0u32;
    for (e, &v) in u.iter().enumerate() {
        h |= u32::from((v >> 4) & 1) << e;
    }
    h.to_le_bytes()
}

impl Assemble for BlockQ4_0 {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        Self {
            d: rec[j],
            qs: nibbles32(u),
        }
    }
}

impl Assemble for BlockQ4_1 {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        Self {
            d: rec[j],
            m: rec[INT8_GROUP + j],
            qs: nibbles32(u),
        }
    }
}

impl Assemble for BlockQ5_0 {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        Self {
            d: rec[j],
            qh: fifth32(u),
            qs: nibbles32(u),
        }
    }
}

impl Assemble for BlockQ5_1 {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        Self {
            d: rec[j],
            m: rec[INT8_GROUP + j],
            qh: fifth32(u),
            qs: nibbles32(u),
        }
    }
}

impl Assemble for BlockQ8_0 {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        Self {
            d: rec[j],
            qs: core::array::from_fn(|e| (u[e] ^ 0x80) as i8),
        }
    }
}

/// Q4_K / Q5_K: the 6-bit scales and minimums of lane `j` (record layout in `Int8Weight`'s
/// doc), repacked into the 12 bytes `scale_min_k4` reads.
fn k4_scales(rec: &[u16], j: usize) -> [u8; 12] {
    let sc: [u8; 8] = core::array::from_fn(|sb| get_byte(rec, 64 + 16 * sb + j));
    let m: [u8; 8] = core::array::from_fn(|sb| get_byte(rec, 192 + 32 * (sb / 2) + 2 * j + sb % 2));
    pack_scale_min_k4(&sc, &m)
}

/// Q4_K / Q5_K nibbles: sub-block `2c` in the low nibbles of `qs[32c..32c + 32]`, `2c + 1` in
/// the high ones.
fn nibbles256(u: &[u8]) -> [u8; 128] {
    let mut qs = [0u8; 128];
    for (e, &v) in u.iter().enumerate() {
        let (sb, l) = (e / 32, e % 32);
        qs[32 * (sb / 2) + l] |= (v & 15) << (4 * (sb % 2));
    }
    qs
}

impl Assemble for BlockQ4K {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        Self {
            d: rec[j],
            dmin: rec[INT8_GROUP + j],
            scales: k4_scales(rec, j),
            qs: nibbles256(u),
        }
    }
}

impl Assemble for BlockQ5K {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        let mut qh = [0u8; 32];
        for (e, &v) in u.iter().enumerate() {
            qh[e % 32] |= ((v >> 4) & 1) << (e / 32);
        }
        Self {
            d: rec[j],
            dmin: rec[INT8_GROUP + j],
            scales: k4_scales(rec, j),
            qh,
            qs: nibbles256(u),
        }
    }
}

impl Assemble for BlockQ6K {
    fn assemble(u: &[u8], rec: &[u16], j: usize) -> Self {
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for (e, &v) in u.iter().enumerate() {
            let (h, r) = (e / 128, e % 128);
            ql[64 * h + r % 64] |= (v & 15) << (4 * (r / 64));
            qh[32 * h + r % 32] |= ((v >> 4) & 3) << (2 * (r / 32));
        }
        Self {
            ql,
            qh,
            scales: core::array::from_fn(|sb| get_byte(rec, 32 + 16 * sb + j) as i8),
            d: rec[j],
        }
    }
}

impl Int8WeightRef<'_> {
    /// Writes the GGUF bytes this weight was packed from into `out` (exactly `n` rows of the
    /// type's row bytes; 2-byte aligned), bit for bit: `pack_gguf_into` then `unpack_gguf` is
    /// the identity on any bytes. Checks run before any write; no allocation.
    pub fn unpack_gguf(&self, out: &mut [u8]) -> Result<(), Error> {
        fn go<B: Assemble>(w: &Int8WeightRef<'_>, out: &mut [u8]) -> Result<(), Error> {
            let need = w.n.checked_mul(w.k / B::ELEMS).ok_or(Error::Overflow)?;
            let blocks = blocks_mut::<B>(out)?;
            if blocks.len() != need {
                return Err(Error::ShapeMismatch {
                    what: "unpacked weight blocks (N * K / block)",
                    expected: need,
                    got: blocks.len(),
                });
            }
            let (f, nb) = (w.fmt, w.k / B::ELEMS);
            let sw = f.scale_words();
            let mut u = [0u8; 256];
            for r in 0..w.n {
                let (g, j) = (r / INT8_GROUP, r % INT8_GROUP);
                for b in 0..nb {
                    for (e, ue) in u[..B::ELEMS].iter_mut().enumerate() {
                        let i = b * B::ELEMS + e;
                        let (base, _, kk) = chunk_at(f, w.k, r, i);
                        *ue = chunk_u(f, &w.quants[base..base + f.chunk_bytes()], j, kk) as u8;
                    }
                    let rec = &w.scales[(g * nb + b) * sw..][..sw];
                    blocks[r * nb + b] = B::assemble(&u[..B::ELEMS], rec, j);
                }
            }
            Ok(())
        }
        match self.fmt {
            Int8Fmt::Q4_0 => go::<BlockQ4_0>(self, out),
            Int8Fmt::Q4_1 => go::<BlockQ4_1>(self, out),
            Int8Fmt::Q5_0 => go::<BlockQ5_0>(self, out),
            Int8Fmt::Q5_1 => go::<BlockQ5_1>(self, out),
            Int8Fmt::Q8_0 => go::<BlockQ8_0>(self, out),
            Int8Fmt::Q4K => go::<BlockQ4K>(self, out),
            Int8Fmt::Q5K => go::<BlockQ5K>(self, out),
            Int8Fmt::Q6K => go::<BlockQ6K>(self, out),
        }
    }
}

/// Reinterprets `bytes` (2-byte aligned, whole blocks) as blocks to write.
fn blocks_mut<B: QuantBlock>(bytes: &mut [u8]) -> Result<&mut [B], Error> {
    if !(bytes.as_ptr() as usize).is_multiple_of(2) {
        return Err(Error::Misaligned {
            what: B::NAME,
            align: 2,
        });
    }
    if !bytes.len().is_multiple_of(B::BYTES) {
        return Err(Error::ShapeMismatch {
            what: "byte length modulo block size",
            expected: 0,
            got: bytes.len() % B::BYTES,
        });
    }
    // SAFETY: the block types are repr(C) structs of u16/u8/i8 fields with no padding (sizes
    // asserted where they are defined), so every bit pattern is valid and `size_of::<B>() ==
    // B::BYTES`; the pointer is 2-aligned (checked) and `len / BYTES` blocks lie inside `bytes`,
    // which the result borrows exclusively.
    Ok(unsafe {
        core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), bytes.len() / B::BYTES)
    })
}

const _: () = assert!(QK == 32);
