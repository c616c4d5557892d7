//! The GGUF block types beyond Q4_0/Q4_1/Q8_0 (those live in `quant.rs`): Q5_0, Q5_1 and the
//! K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, as ggml lays them out (`repr(C)`, sizes and
//! alignments asserted), each with `dequantize` following ggml's definition operation for
//! operation, so the results are bit-identical to ggml's and gguf-py's dequantizers (the
//! `gguf_oracle` test in engine-min checks that on real files).
//!
//! K-quants group 256 values ("super-block", [`QK_K`]) into sub-blocks of 16 or 32 with small
//! integer scales (and minimums) that are themselves scaled by one or two FP16 numbers.

use crate::portable::f16_to_f32;
use crate::quant::{sealed, QuantBlock, QK};
use crate::GgmlType;

/// Values per K-quant super-block.
pub const QK_K: usize = 256;

/// GGUF Q5_0: 32 values `(q - 16)·d`, q 5-bit: low nibbles as Q4_0 (`qs[j]` low = element j,
/// high = element j + 16), the fifth bit of element e is bit e of `qh` (little-endian u32).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ5_0 {
    /// Scale, FP16 bits.
    pub d: u16,
    /// Fifth bits, element e at bit e of the little-endian u32.
    pub qh: [u8; 4],
    /// Low nibbles.
    pub qs: [u8; 16],
}

/// GGUF Q5_1: 32 values `q·d + m`, q 5-bit laid out as [`BlockQ5_0`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ5_1 {
    /// Scale, FP16 bits.
    pub d: u16,
    /// Offset, FP16 bits.
    pub m: u16,
    /// Fifth bits, element e at bit e of the little-endian u32.
    pub qh: [u8; 4],
    /// Low nibbles.
    pub qs: [u8; 16],
}

/// GGUF Q2_K: 256 values in 16 sub-blocks of 16, `d·(sc & 15)·q − dmin·(sc >> 4)`, q 2-bit.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ2K {
    /// Per sub-block: 4-bit scale (low nibble) and 4-bit minimum (high nibble).
    pub scales: [u8; 16],
    /// 2-bit quants: element `128h + 32j + l` is bits `2j..2j+2` of `qs[32h + l]`.
    pub qs: [u8; 64],
    /// Super-block scale of the scales, FP16 bits.
    pub d: u16,
    /// Super-block scale of the minimums, FP16 bits.
    pub dmin: u16,
}

/// GGUF Q3_K: 256 values in 16 sub-blocks of 16, `d·(sc − 32)·q`, q in −4..=3 (2 low bits in
/// `qs`, the third in `hmask`, set meaning "no −4"), sc 6-bit packed in `scales`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ3K {
    /// High bits: element `32m + l` is bit m of `hmask[l]`.
    pub hmask: [u8; 32],
    /// Low 2 bits, laid out as [`BlockQ2K::qs`].
    pub qs: [u8; 64],
    /// Sixteen 6-bit scales: low 4 bits in bytes 0..8 (nibble i / 8), high 2 bits in 8..12.
    pub scales: [u8; 12],
    /// Super-block scale, FP16 bits.
    pub d: u16,
}

/// GGUF Q4_K: 256 values in 8 sub-blocks of 32, `d·sc·q − dmin·m`, q 4-bit, sc and m 6-bit.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales, FP16 bits.
    pub d: u16,
    /// Super-block scale of the sub-block minimums, FP16 bits.
    pub dmin: u16,
    /// Eight 6-bit scales and eight 6-bit minimums (see [`scale_min_k4`]).
    pub scales: [u8; 12],
    /// Nibbles: sub-block `2c` is the low nibbles of `qs[32c..32c+32]`, `2c + 1` the high ones.
    pub qs: [u8; 128],
}

/// GGUF Q5_K: [`BlockQ4K`] with a fifth bit: element l of sub-block j has bit j of `qh[l]`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales, FP16 bits.
    pub d: u16,
    /// Super-block scale of the sub-block minimums, FP16 bits.
    pub dmin: u16,
    /// Eight 6-bit scales and eight 6-bit minimums (see [`scale_min_k4`]).
    pub scales: [u8; 12],
    /// Fifth bits.
    pub qh: [u8; 32],
    /// Low nibbles, laid out as [`BlockQ4K::qs`].
    pub qs: [u8; 128],
}

/// GGUF Q6_K: 256 values in 16 sub-blocks of 16, `d·sc·(q − 32)`, q 6-bit, sc signed 8-bit.
/// In each half h (128 values), element r: low nibble of `ql[64h + r]` (r < 64) or high nibble
/// of `ql[64h + r − 64]`; high 2 bits `(qh[32h + r % 32] >> 2·(r / 32)) & 3`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ6K {
    /// Low 4 bits.
    pub ql: [u8; 128],
    /// High 2 bits.
    pub qh: [u8; 64],
    /// Sub-block scales.
    pub scales: [i8; 16],
    /// Super-block scale, FP16 bits.
    pub d: u16,
}

const _: () = assert!(core::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(core::mem::align_of::<BlockQ5_0>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(core::mem::align_of::<BlockQ5_1>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(core::mem::align_of::<BlockQ2K>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(core::mem::align_of::<BlockQ3K>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(core::mem::align_of::<BlockQ4K>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(core::mem::align_of::<BlockQ5K>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(core::mem::align_of::<BlockQ6K>() == 2);

/// Scale and minimum of sub-block `j` (0..8) of a Q4_K / Q5_K block: for j < 4 the low 6 bits
/// of bytes j and j + 4; for j ≥ 4 a nibble of byte j + 4 and the top 2 bits of bytes j − 4
/// (scale) and j (minimum).
#[inline]
pub fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and minimums (each < 64) the way [`scale_min_k4`] reads them.
pub(crate) fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    s
}

/// The 6-bit scale `i` (0..16) of a Q3_K block, minus 32.
#[inline]
pub(crate) fn scale_q3k(i: usize, s: &[u8; 12]) -> i32 {
    let lo = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
    let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    (lo | (hi << 4)) as i32 - 32
}

/// Packs sixteen 6-bit values (each < 64) the way [`scale_q3k`] reads them (before the −32).
pub(crate) fn pack_scales_q3k(v: &[u8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (i, &x) in v.iter().enumerate() {
        if i < 8 {
            s[i] |= x & 0xF;
        } else {
            s[i - 8] |= (x & 0xF) << 4;
        }
        s[8 + i % 4] |= (x >> 4) << (2 * (i / 4));
    }
    s
}

impl BlockQ5_0 {
    /// The 5-bit quant of element `e` (0..32).
    #[inline]
    pub fn q(&self, e: usize) -> u8 {
        five_bit(&self.qs, &self.qh, e)
    }
}

impl BlockQ5_1 {
    /// The 5-bit quant of element `e` (0..32).
    #[inline]
    pub fn q(&self, e: usize) -> u8 {
        five_bit(&self.qs, &self.qh, e)
    }
}

#[inline]
fn five_bit(qs: &[u8; 16], qh: &[u8; 4], e: usize) -> u8 {
    let nib = if e < 16 { qs[e] & 15 } else { qs[e - 16] >> 4 };
    let hb = (u32::from_le_bytes(*qh) >> e) & 1;
    nib | (hb as u8) << 4
}

impl BlockQ4K {
    /// The 4-bit quant of element `e` (0..256).
    #[inline]
    pub fn q(&self, e: usize) -> u8 {
        let (j, l) = (e / 32, e % 32);
        (self.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15
    }
}

impl BlockQ5K {
    /// The 5-bit quant of element `e` (0..256).
    #[inline]
    pub fn q(&self, e: usize) -> u8 {
        let (j, l) = (e / 32, e % 32);
        let nib = (self.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
        nib | ((self.qh[l] >> j) & 1) << 4
    }
}

impl BlockQ6K {
    /// The 6-bit quant of element `e` (0..256), before the −32 offset.
    #[inline]
    pub fn q(&self, e: usize) -> u8 {
        let (h, r) = (e / 128, e % 128);
        let lo = (self.ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
        let hi = (self.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        lo | hi << 4
    }
}

impl BlockQ2K {
    /// The 2-bit quant of element `e` (0..256).
    #[inline]
    pub fn q(&self, e: usize) -> u8 {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        (self.qs[32 * h + l] >> (2 * j)) & 3
    }
}

impl BlockQ3K {
    /// The signed 3-bit quant of element `e` (0..256), in −4..=3.
    #[inline]
    pub fn q(&self, e: usize) -> i32 {
        let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
        let lo = ((self.qs[32 * h + l] >> (2 * j)) & 3) as i32;
        let hb = (self.hmask[e % 32] >> (e / 32)) & 1;
        lo - if hb == 0 { 4 } else { 0 }
    }
}

impl sealed::Sealed for BlockQ5_0 {}
impl sealed::Sealed for BlockQ5_1 {}
impl sealed::Sealed for BlockQ2K {}
impl sealed::Sealed for BlockQ3K {}
impl sealed::Sealed for BlockQ4K {}
impl sealed::Sealed for BlockQ5K {}
impl sealed::Sealed for BlockQ6K {}

impl QuantBlock for BlockQ5_0 {
    const BYTES: usize = 22;
    const ELEMS: usize = QK;
    const TYPE: GgmlType = GgmlType::Q5_0;
    type Values = [f32; QK];
    fn dequantize(&self) -> [f32; QK] {
        let d = f16_to_f32(self.d);
        core::array::from_fn(|e| (self.q(e) as i32 - 16) as f32 * d)
    }
}

impl QuantBlock for BlockQ5_1 {
    const BYTES: usize = 24;
    const ELEMS: usize = QK;
    const TYPE: GgmlType = GgmlType::Q5_1;
    type Values = [f32; QK];
    fn dequantize(&self) -> [f32; QK] {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        core::array::from_fn(|e| self.q(e) as f32 * d + m)
    }
}

impl QuantBlock for BlockQ2K {
    const BYTES: usize = 84;
    const ELEMS: usize = QK_K;
    const TYPE: GgmlType = GgmlType::Q2K;
    type Values = [f32; QK_K];
    fn dequantize(&self) -> [f32; QK_K] {
        let (d, dmin) = (f16_to_f32(self.d), f16_to_f32(self.dmin));
        core::array::from_fn(|e| {
            let sc = self.scales[e / 16];
            // ggml: dl = d·(sc & 15), ml = dmin·(sc >> 4), y = dl·q − ml.
            let dl = d * (sc & 15) as f32;
            let ml = dmin * (sc >> 4) as f32;
            dl * self.q(e) as f32 - ml
        })
    }
}

impl QuantBlock for BlockQ3K {
    const BYTES: usize = 110;
    const ELEMS: usize = QK_K;
    const TYPE: GgmlType = GgmlType::Q3K;
    type Values = [f32; QK_K];
    fn dequantize(&self) -> [f32; QK_K] {
        let d = f16_to_f32(self.d);
        core::array::from_fn(|e| {
            let dl = d * scale_q3k(e / 16, &self.scales) as f32;
            dl * self.q(e) as f32
        })
    }
}

/// Q4_K's and Q5_K's dequantization (they differ only in how a quant `q(e)` is read): per
/// 32-value sub-block, ggml's d1 = d·sc, m1 = dmin·m, y = d1·q − m1.
fn dequantize_scale_min_k4(
    d: u16,
    dmin: u16,
    scales: &[u8; 12],
    q: impl Fn(usize) -> u8,
) -> [f32; QK_K] {
    let (d, dmin) = (f16_to_f32(d), f16_to_f32(dmin));
    let mut out = [0f32; QK_K];
    for (j, o) in out.chunks_exact_mut(32).enumerate() {
        let (sc, m) = scale_min_k4(j, scales);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        for (l, v) in o.iter_mut().enumerate() {
            *v = d1 * q(32 * j + l) as f32 - m1;
        }
    }
    out
}

impl QuantBlock for BlockQ4K {
    const BYTES: usize = 144;
    const ELEMS: usize = QK_K;
    const TYPE: GgmlType = GgmlType::Q4K;
    type Values = [f32; QK_K];
    fn dequantize(&self) -> [f32; QK_K] {
        dequantize_scale_min_k4(self.d, self.dmin, &self.scales, |e| self.q(e))
    }
}

impl QuantBlock for BlockQ5K {
    const BYTES: usize = 176;
    const ELEMS: usize = QK_K;
    const TYPE: GgmlType = GgmlType::Q5K;
    type Values = [f32; QK_K];
    fn dequantize(&self) -> [f32; QK_K] {
        dequantize_scale_min_k4(self.d, self.dmin, &self.scales, |e| self.q(e))
    }
}

impl QuantBlock for BlockQ6K {
    const BYTES: usize = 210;
    const ELEMS: usize = QK_K;
    const TYPE: GgmlType = GgmlType::Q6K;
    type Values = [f32; QK_K];
    fn dequantize(&self) -> [f32; QK_K] {
        let d = f16_to_f32(self.d);
        // ggml: y = d·sc·(q − 32), evaluated left to right.
        core::array::from_fn(|e| {
            let ds = d * self.scales[e / 16] as f32;
            ds * (self.q(e) as i32 - 32) as f32
        })
    }
}
