//! Int8 GEMM on GGUF block-quantized weights: llama.cpp's scheme, register blocked.
//!
//! - Weights `W[N×K]` (ggml layout: N rows of blocks) are repacked once into [`Int8Weight`]:
//!   groups of 16 output rows; per (group, 32-k chunk) the 16 rows' unsigned integers `u` laid
//!   out as `vpdpbusd` operands (lane `j` = row `j`, its 4 bytes = 4 consecutive k), and per
//!   (group, block) the 16 rows' scales.
//! - 32-value block formats: every weight is `w = d_w·u + m_w` per block: Q4_1 / Q5_1 as stored;
//!   Q4_0 `u = q`, `m_w = -8 d_w`; Q5_0 `u = q`, `m_w = -16 d_w`; Q8_0 `u = q + 128`,
//!   `m_w = -128 d_w`. Activations per 32 ([`BlockMeta`]). Per (row, output, block) the kernel
//!   computes the exact integer `i = Σ u·q_x + c·Σq_x` (`c` = -8 / -16 / -128, 0 for Q4_1 /
//!   Q5_1), then `acc = fma(f32(i), d_w·d_x, acc)` and for Q4_1 / Q5_1
//!   `acc = fma(m_w, s_x, acc)`, blocks in order from `acc = 0`.
//! - K-quants (256-value super-blocks): Q4_K / Q5_K `w = d·sc_j·u − dmin·m_j` (sub-blocks of
//!   32, 6-bit `sc`, `m`), Q6_K `w = d·sc_j·(u − 32)` (sub-blocks of 16, signed 8-bit `sc`).
//!   Activations per 256 ([`SuperMeta`]). Per (row, output, super-block) the exact integers
//!   `I1 = Σ_j sc_j·(Σ_{i∈j} u·q_x + c_j)` (`c_j = -32 Σ_{i∈j} q_x` for Q6_K, 0 otherwise) and,
//!   for Q4_K / Q5_K, `I2 = Σ_j m_j·Σ_{i∈j} q_x`; then `acc = fma(f32(I1), d·d_x, acc)` and
//!   `acc = fma(-f32(I2), dmin·d_x, acc)`, super-blocks in order from `acc = 0`.
//!
//! Every implementation performs exactly this sequence of f32 roundings, so results are
//! bit-identical across implementations and a row's result does not depend on M or on the tile
//! it falls in (batch invariance).
//!
//! The only approximation against f32 activations is the activation rounding: each `x` moves by
//! at most `d_x / 2` (`d_x` of its block or super-block), so an output moves by at most
//! `Σ d_x/2 · Σ|w_i|` over blocks (plus f32 rounding of the accumulation).

use crate::blocks::{scale_min_k4, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, QK_K};
use crate::int8_acts::{prepare_acts, quantize_block, quantize_super};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock, QK};
use crate::{ActBlocks, BlockMeta, Error, GgmlType, QActs, StealState, SuperMeta};

/// Output rows (weight rows) per packed group: one 512-bit vector of i32 lanes.
pub const INT8_GROUP: usize = 16;
/// Activation rows per parallel tile (a tile is up to this many rows × some groups).
pub const INT8_TILE_ROWS: usize = 32;
/// The version of [`Int8Weight`]'s packed layout (its quants and scale words). Anything that
/// keeps packed bytes between runs (a prepared-weights cache) keys on it; bump it whenever the
/// layout changes.
pub const INT8_LAYOUT_VERSION: u32 = 1;

/// Every GGUF weight type the int8 GEMM (and so the packed GEMV and the decompression GEMM)
/// computes: the types [`Int8Weight`] packs; any other is [`Error::UnsupportedFormat`].
pub const INT8_TYPES: [GgmlType; 8] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// The packed layouts, one per GGUF type the int8 GEMM computes (kernel-internal dispatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Int8Fmt {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl Int8Fmt {
    /// The layout of `ty`, or [`Error::UnsupportedFormat`].
    pub(crate) fn of(ty: GgmlType) -> Result<Self, Error> {
        Ok(match ty {
            GgmlType::Q4_0 => Self::Q4_0,
            GgmlType::Q4_1 => Self::Q4_1,
            GgmlType::Q5_0 => Self::Q5_0,
            GgmlType::Q5_1 => Self::Q5_1,
            GgmlType::Q8_0 => Self::Q8_0,
            GgmlType::Q4K => Self::Q4K,
            GgmlType::Q5K => Self::Q5K,
            GgmlType::Q6K => Self::Q6K,
            _ => return Err(Error::UnsupportedFormat { format: ty }),
        })
    }
    pub(crate) fn ty(self) -> GgmlType {
        match self {
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4K => GgmlType::Q4K,
            Self::Q5K => GgmlType::Q5K,
            Self::Q6K => GgmlType::Q6K,
        }
    }
    /// Values per block (the unit of the scale records): 32, or 256 for the K-quants.
    pub(crate) const fn block(self) -> usize {
        match self {
            Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
            _ => QK,
        }
    }
    /// Bits of `u` above the low nibble kept in planes: 0 (Q4), 1 (Q5), 2 (Q6_K); Q8_0 stores
    /// whole bytes.
    pub(crate) const fn high_bits(self) -> usize {
        match self {
            Self::Q5_0 | Self::Q5_1 | Self::Q5K => 1,
            Self::Q6K => 2,
            _ => 0,
        }
    }
    /// Bytes of `u` per (group, 32-k chunk): Q8_0 8 vectors of 64 bytes; the others 4 nibble
    /// vectors plus one 64-byte plane per high bit.
    pub(crate) const fn chunk_bytes(self) -> usize {
        match self {
            Self::Q8_0 => INT8_GROUP * QK,
            f => INT8_GROUP * QK / 2 + 64 * f.high_bits(),
        }
    }
    /// Bytes of `u` per (group, block).
    pub(crate) const fn quant_bytes(self) -> usize {
        self.chunk_bytes() * (self.block() / QK)
    }
    /// FP16-sized words of scales per (group, block): `d_w` ×16 (+ `m_w` ×16 for Q4_1/Q5_1);
    /// Q4_K/Q5_K: `d` ×16, `dmin` ×16, then 128 bytes of 6-bit scales (sub-block j of row r at
    /// byte `16j + r`) and 128 of minimums in pairs (byte `32t + 2r + e` = `m_{2t+e}` of row r);
    /// Q6_K: `d` ×16, then 256 bytes of i8 scales (byte `16j + r`).
    pub(crate) const fn scale_words(self) -> usize {
        match self {
            Self::Q4_1 | Self::Q5_1 => 2 * INT8_GROUP,
            Self::Q4K | Self::Q5K => 2 * INT8_GROUP + 128,
            Self::Q6K => INT8_GROUP + 128,
            _ => INT8_GROUP,
        }
    }
    /// The integer offset `c` folded into each 32-block's integer sum (`c Σq_x`).
    pub(crate) const fn offset(self) -> i32 {
        match self {
            Self::Q4_0 => -8,
            Self::Q5_0 => -16,
            Self::Q8_0 => -128,
            _ => 0,
        }
    }
    pub(crate) const fn acts(self) -> ActBlocks {
        match self {
            Self::Q4K | Self::Q5K | Self::Q6K => ActBlocks::PER256,
            _ => ActBlocks::PER32,
        }
    }
}

/// One 64-byte-aligned chunk of packed weight bytes.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk64(pub [u8; 64]);

/// A weight matrix repacked for the int8 kernels (built once, at load time; the only allocation
/// of this module), in its own storage ([`Int8Weight::pack_gguf`]) or in bytes it shares
/// ([`Int8Weight::from_shared`] over what [`Int8Weight::pack_gguf_groups`] wrote).
///
/// Layout (all offsets from 64-byte-aligned storage):
/// - `u`: for group `g` (rows `16g..16g+16`), 32-k chunk `c` (elements `32c..32c+32` of each
///   row), `chunk_bytes` at `(g·K/32 + c)·chunk_bytes`. Q8_0: 8 vectors `s` of 64 bytes, byte
///   `4j + i` = `u[16g + j][32c + 4s + i]`. The others: 4 nibble vectors `v`, byte `4j + i` =
///   `lo4(u[16g+j][32c + 4v + i]) | lo4(u[16g+j][32c + 16 + 4v + i]) << 4` (low nibbles: k
///   steps 0..4 of the chunk, high nibbles: steps 4..8); then for 5-bit formats one plane whose
///   byte `4j + i` has bit `v` = bit 4 of the low-nibble element of vector v and bit `4 + v` =
///   bit 4 of its high-nibble element; for Q6_K two planes (low-nibble elements, then
///   high-nibble ones) whose byte `4j + i` holds bits 4..6 of vector v's element at bits
///   `2v..2v+2`.
/// - `scales`: for (g, block), `scale_words` FP16-sized words at `(g·nb + b)·scale_words`
///   (blocks of 32, or 256 for K-quants; contents per format in the crate README).
/// - Rows past N in the last group are zero (`u = 0`, scales 0): their lanes compute 0 and are
///   never stored.
#[derive(Debug, Clone)]
pub struct Int8Weight {
    fmt: Int8Fmt,
    n: usize,
    k: usize,
    store: Store,
}

/// Bytes that a packed weight can borrow for as long as it lives: a memory-mapped file of
/// prepared weights, or one buffer holding many weights (see [`Int8Weight::from_shared`]).
pub type SharedBytes = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a packed weight's bytes live.
#[derive(Clone)]
enum Store {
    /// Allocated by [`Int8Weight::pack_gguf`].
    Owned {
        quants: Vec<Chunk64>,
        scales: Vec<u16>,
    },
    /// Ranges of shared bytes, checked by [`Int8Weight::from_shared`]: `quants` starts on a
    /// 64-byte boundary, `scales` on a 2-byte one, both inside the bytes (which never move
    /// and are never written while shared).
    Shared {
        bytes: SharedBytes,
        quants: core::ops::Range<usize>,
        scales: core::ops::Range<usize>,
    },
}

impl core::fmt::Debug for Store {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Store::Owned { quants, scales } => write!(
                f,
                "Owned({} quant bytes, {} scale words)",
                quants.len() * 64,
                scales.len()
            ),
            Store::Shared { quants, scales, .. } => {
                write!(f, "Shared(quants {quants:?}, scales {scales:?})")
            }
        }
    }
}

/// The sizes of one weight's packed int8 form ([`Int8Weight::layout`]): 16-row groups, each
/// `group_quant_bytes` of `u` and `group_scale_words` of scales, stored group after group, so
/// groups `g0..g1` are the contiguous ranges `g0 * group_quant_bytes..g1 * group_quant_bytes`
/// of the quants and likewise of the scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int8Layout {
    /// 16-row groups, `ceil(N/16)`.
    pub groups: usize,
    /// Bytes of `u` per group (a multiple of 64).
    pub group_quant_bytes: usize,
    /// FP16-sized scale words per group.
    pub group_scale_words: usize,
}

impl Int8Layout {
    /// Bytes of `u` of the whole weight.
    pub fn quant_bytes(&self) -> usize {
        self.groups * self.group_quant_bytes
    }
    /// Scale words of the whole weight.
    pub fn scale_words(&self) -> usize {
        self.groups * self.group_scale_words
    }
}

fn check_shape(fmt: Int8Fmt, n: usize, k: usize, blocks: usize) -> Result<(), Error> {
    let be = fmt.block();
    if k == 0 || !k.is_multiple_of(be) {
        return Err(Error::ShapeMismatch {
            what: if be == QK {
                "K modulo 32 (K > 0)"
            } else {
                "K modulo 256 (K > 0)"
            },
            expected: 0,
            got: if k == 0 { be } else { k % be },
        });
    }
    let need = n.checked_mul(k / be).ok_or(Error::Overflow)?;
    if blocks != need {
        return Err(Error::ShapeMismatch {
            what: "weight blocks (N * K / block)",
            expected: need,
            got: blocks,
        });
    }
    Ok(())
}

/// Source block access for the int8 packers: the unsigned integer `u` of each element and the
/// block's scale record for one row of a group.
trait I8Src: QuantBlock {
    const FMT: Int8Fmt;
    fn u(&self, e: usize) -> u8;
    /// Writes this block's scales for lane `j` into the (group, block) record.
    fn put_scales(&self, rec: &mut [u16], j: usize);

    /// Packs group `g` (rows `16g..16g+16` of `n`) of the weight `blocks` (`n` rows of
    /// `k / block` blocks, shape checked) into `q` (the group's `u` bytes) and `s` (its scale
    /// words), both zeroed by the caller: element by element through [`put_u_in`]. The formats
    /// whose nibbles or bytes land in the packed layout unchanged override it with word copies.
    fn pack_group(blocks: &[Self], n: usize, k: usize, g: usize, q: &mut [u8], s: &mut [u16]) {
        pack_group_elementwise(blocks, n, k, g, q, s);
    }
}

/// [`I8Src::pack_group`]'s element-by-element body: the definition the fast overrides are
/// tested against byte for byte.
fn pack_group_elementwise<B: I8Src>(
    blocks: &[B],
    n: usize,
    k: usize,
    g: usize,
    q: &mut [u8],
    s: &mut [u16],
) {
    let fmt = B::FMT;
    let (be, nb, sw) = (fmt.block(), k / fmt.block(), fmt.scale_words());
    for j in 0..INT8_GROUP.min(n - g * INT8_GROUP) {
        let r = g * INT8_GROUP + j;
        for (b, blk) in blocks[r * nb..(r + 1) * nb].iter().enumerate() {
            for e in 0..be {
                put_u_in(fmt, q, j, b * be + e, blk.u(e));
            }
            blk.put_scales(&mut s[b * sw..(b + 1) * sw], j);
        }
    }
}

/// Sets `u` of (lane `j`, element `i`) in one group's packed `u` bytes `q` (zeroed before the
/// first call): the layout in [`Int8Weight`]'s doc, group-relative.
fn put_u_in(f: Int8Fmt, q: &mut [u8], j: usize, i: usize, u: u8) {
    let (c, kk) = (i / QK, i % QK);
    let base = c * f.chunk_bytes();
    if f == Int8Fmt::Q8_0 {
        q[base + kk / 4 * 64 + 4 * j + kk % 4] = u;
        return;
    }
    let (hi, st) = (kk / 16, kk % 16);
    let (v, ii) = (st / 4, st % 4);
    let at = 4 * j + ii;
    q[base + v * 64 + at] |= (u & 15) << (4 * hi);
    let plane = base + 256;
    match f.high_bits() {
        1 => q[plane + at] |= ((u >> 4) & 1) << (v + 4 * hi),
        2 => q[plane + 64 * hi + at] |= ((u >> 4) & 3) << (2 * v),
        _ => {}
    }
}

/// The 32-value 4-bit formats' fast packing: element `e < 16` is the low nibble of `qs[e]` and
/// `16 + e` its high nibble, which is exactly the packed byte of nibble vector `e / 4`, lane
/// `j`, byte `e % 4`; so each row's 16 bytes go in as four 4-byte copies.
fn pack_group_nibbles<B: I8Src>(
    blocks: &[B],
    qs: impl Fn(&B) -> &[u8; 16],
    n: usize,
    k: usize,
    g: usize,
    q: &mut [u8],
    s: &mut [u16],
) {
    let (nb, sw, cb) = (k / QK, B::FMT.scale_words(), B::FMT.chunk_bytes());
    for j in 0..INT8_GROUP.min(n - g * INT8_GROUP) {
        let r = g * INT8_GROUP + j;
        for (b, blk) in blocks[r * nb..(r + 1) * nb].iter().enumerate() {
            let src = qs(blk);
            let dst = &mut q[b * cb..(b + 1) * cb];
            for v in 0..4 {
                dst[v * 64 + 4 * j..v * 64 + 4 * j + 4].copy_from_slice(&src[4 * v..4 * v + 4]);
            }
            blk.put_scales(&mut s[b * sw..(b + 1) * sw], j);
        }
    }
}

fn set_byte(rec: &mut [u16], at: usize, v: u8) {
    let (w, sh) = (at / 2, 8 * (at % 2));
    rec[w] = (rec[w] & !(0xFF << sh)) | (v as u16) << sh;
}

pub(crate) fn get_byte(rec: &[u16], at: usize) -> u8 {
    (rec[at / 2] >> (8 * (at % 2))) as u8
}

impl I8Src for BlockQ4_0 {
    const FMT: Int8Fmt = Int8Fmt::Q4_0;
    fn u(&self, e: usize) -> u8 {
        (self.qs[e % 16] >> (4 * (e / 16))) & 15
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        rec[j] = self.d;
    }
    fn pack_group(blocks: &[Self], n: usize, k: usize, g: usize, q: &mut [u8], s: &mut [u16]) {
        pack_group_nibbles(blocks, |b| &b.qs, n, k, g, q, s);
    }
}

impl I8Src for BlockQ4_1 {
    const FMT: Int8Fmt = Int8Fmt::Q4_1;
    fn u(&self, e: usize) -> u8 {
        (self.qs[e % 16] >> (4 * (e / 16))) & 15
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        rec[j] = self.d;
        rec[INT8_GROUP + j] = self.m;
    }
    fn pack_group(blocks: &[Self], n: usize, k: usize, g: usize, q: &mut [u8], s: &mut [u16]) {
        pack_group_nibbles(blocks, |b| &b.qs, n, k, g, q, s);
    }
}

impl I8Src for BlockQ5_0 {
    const FMT: Int8Fmt = Int8Fmt::Q5_0;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        rec[j] = self.d;
    }
}

impl I8Src for BlockQ5_1 {
    const FMT: Int8Fmt = Int8Fmt::Q5_1;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        rec[j] = self.d;
        rec[INT8_GROUP + j] = self.m;
    }
}

impl I8Src for BlockQ8_0 {
    const FMT: Int8Fmt = Int8Fmt::Q8_0;
    fn u(&self, e: usize) -> u8 {
        self.qs[e] as u8 ^ 0x80
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        rec[j] = self.d;
    }
    /// Bytes `4s..4s+4` of each row's block are vector `s`, lane `j`, offset by 128.
    fn pack_group(blocks: &[Self], n: usize, k: usize, g: usize, q: &mut [u8], s: &mut [u16]) {
        let nb = k / QK;
        let cb = Int8Fmt::Q8_0.chunk_bytes();
        for j in 0..INT8_GROUP.min(n - g * INT8_GROUP) {
            let r = g * INT8_GROUP + j;
            for (b, blk) in blocks[r * nb..(r + 1) * nb].iter().enumerate() {
                let dst = &mut q[b * cb..(b + 1) * cb];
                for v in 0..8 {
                    let w = u32::from_ne_bytes(core::array::from_fn(|i| blk.qs[4 * v + i] as u8));
                    dst[v * 64 + 4 * j..v * 64 + 4 * j + 4]
                        .copy_from_slice(&(w ^ 0x8080_8080).to_ne_bytes());
                }
                s[b * INT8_GROUP + j] = blk.d;
            }
        }
    }
}

/// Q4_K / Q5_K scale records: `d`, `dmin`, the 6-bit scales, the minimums in pairs.
fn put_k4_scales(d: u16, dmin: u16, s: &[u8; 12], rec: &mut [u16], j: usize) {
    rec[j] = d;
    rec[INT8_GROUP + j] = dmin;
    for sb in 0..8 {
        let (sc, m) = scale_min_k4(sb, s);
        set_byte(rec, 64 + 16 * sb + j, sc);
        set_byte(rec, 64 + 128 + 32 * (sb / 2) + 2 * j + sb % 2, m);
    }
}

impl I8Src for BlockQ4K {
    const FMT: Int8Fmt = Int8Fmt::Q4K;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        put_k4_scales(self.d, self.dmin, &self.scales, rec, j);
    }
    /// Sub-block `sb` (32 values) is the low (even `sb`) or high (odd) nibbles of
    /// `qs[32 (sb/2)..][..32]`: packed byte `4v + i` of its chunk takes that nibble of byte
    /// `4v + i` (low) and of byte `16 + 4v + i` (high).
    fn pack_group(blocks: &[Self], n: usize, k: usize, g: usize, q: &mut [u8], s: &mut [u16]) {
        let nb = k / QK_K;
        let (sw, cb) = (Int8Fmt::Q4K.scale_words(), Int8Fmt::Q4K.chunk_bytes());
        for j in 0..INT8_GROUP.min(n - g * INT8_GROUP) {
            let r = g * INT8_GROUP + j;
            for (b, blk) in blocks[r * nb..(r + 1) * nb].iter().enumerate() {
                for sb in 0..QK_K / QK {
                    let src = &blk.qs[32 * (sb / 2)..32 * (sb / 2) + 32];
                    let sh = 4 * (sb % 2) as u32;
                    let dst = &mut q[(b * (QK_K / QK) + sb) * cb..][..cb];
                    for v in 0..4 {
                        let word = |o: usize| {
                            u32::from_le_bytes(src[o..o + 4].try_into().unwrap_or([0; 4]))
                        };
                        let lo = (word(4 * v) >> sh) & 0x0F0F_0F0F;
                        let hi = (word(16 + 4 * v) >> sh) & 0x0F0F_0F0F;
                        dst[v * 64 + 4 * j..v * 64 + 4 * j + 4]
                            .copy_from_slice(&(lo | hi << 4).to_le_bytes());
                    }
                }
                blk.put_scales(&mut s[b * sw..(b + 1) * sw], j);
            }
        }
    }
}

impl I8Src for BlockQ5K {
    const FMT: Int8Fmt = Int8Fmt::Q5K;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        put_k4_scales(self.d, self.dmin, &self.scales, rec, j);
    }
}

impl I8Src for BlockQ6K {
    const FMT: Int8Fmt = Int8Fmt::Q6K;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, rec: &mut [u16], j: usize) {
        rec[j] = self.d;
        for sb in 0..16 {
            set_byte(rec, 32 + 16 * sb + j, self.scales[sb] as u8);
        }
    }
}

/// Quant bytes and scale words of the packed form of `n` rows × `k` of `fmt`.
fn packed_sizes(fmt: Int8Fmt, n: usize, k: usize) -> Result<(usize, usize), Error> {
    let l = Int8Weight::layout(fmt.ty(), n, k)?;
    Ok((l.quant_bytes(), l.scale_words()))
}

/// Byte offset of (row `r`, element `i`)'s 32-k chunk and its position `(j, kk)` in it.
pub(crate) fn chunk_at(fmt: Int8Fmt, k: usize, r: usize, i: usize) -> (usize, usize, usize) {
    let (g, j, c, kk) = (r / INT8_GROUP, r % INT8_GROUP, i / QK, i % QK);
    ((g * (k / QK) + c) * fmt.chunk_bytes(), j, kk)
}

/// Packs GGUF tensor bytes of `ty` (as [`Int8Weight::pack_gguf`]) into the caller's storage:
/// `quants` and `scales` exactly as long as the packed form's quant bytes and scale words (else
/// a shape error): every group through [`Int8Weight::pack_gguf_groups`]. No allocation (the C
/// API's and [`Int8Weight::pack_gguf_into`]'s packer); every check runs before the first write.
pub(crate) fn pack_gguf_into(
    ty: GgmlType,
    bytes: &[u8],
    n: usize,
    k: usize,
    quants: &mut [u8],
    scales: &mut [u16],
) -> Result<(), Error> {
    let l = Int8Weight::layout(ty, n, k)?;
    Int8Weight::pack_gguf_groups(ty, bytes, n, k, 0..l.groups, quants, scales)
}

/// Checks caller storage for a packed weight: exact lengths, 64-byte aligned quants.
fn check_storage(
    fmt: Int8Fmt,
    n: usize,
    k: usize,
    quants: &[u8],
    scales: &[u16],
) -> Result<(), Error> {
    let (qb, sw) = packed_sizes(fmt, n, k)?;
    if quants.len() != qb {
        return Err(Error::ShapeMismatch {
            what: "packed quant bytes",
            expected: qb,
            got: quants.len(),
        });
    }
    if scales.len() != sw {
        return Err(Error::ShapeMismatch {
            what: "packed scale words",
            expected: sw,
            got: scales.len(),
        });
    }
    if !(quants.as_ptr() as usize).is_multiple_of(64) {
        return Err(Error::Misaligned {
            what: "packed quant bytes",
            align: 64,
        });
    }
    Ok(())
}

/// A packed int8 weight in caller-owned storage (filled by [`Int8Weight::pack_gguf_into`]):
/// the same layout and results as an [`Int8Weight`], for engines that keep weights in their own
/// buffers (a ggml backend buffer, a memory-mapped cache).
#[derive(Debug, Clone, Copy)]
pub struct Int8WeightRef<'a> {
    pub(crate) fmt: Int8Fmt,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) quants: &'a [u8],
    pub(crate) scales: &'a [u16],
}

impl<'a> Int8WeightRef<'a> {
    /// Views storage that [`Int8Weight::pack_gguf_into`] filled for `n` rows of `k` elements of
    /// `ty`; checks the type, the shape, the exact lengths and the 64-byte alignment of `quants`
    /// (contents are not checked: any bytes compute some finite-or-not result, never out of
    /// bounds).
    pub fn new(
        ty: GgmlType,
        n: usize,
        k: usize,
        quants: &'a [u8],
        scales: &'a [u16],
    ) -> Result<Self, Error> {
        let fmt = Int8Fmt::of(ty)?;
        check_shape(
            fmt,
            n,
            k,
            n.checked_mul(k / fmt.block()).ok_or(Error::Overflow)?,
        )?;
        check_storage(fmt, n, k, quants, scales)?;
        Ok(Self {
            fmt,
            n,
            k,
            quants,
            scales,
        })
    }
    /// The source type.
    pub fn format(&self) -> GgmlType {
        self.fmt.ty()
    }
    /// The activation quantization this weight needs (see [`Int8Weight::act_blocks`]).
    pub fn act_blocks(&self) -> ActBlocks {
        self.fmt.acts()
    }
    /// Output features (weight rows).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Reduction length.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The packed `u` bytes.
    pub fn quant_bytes(&self) -> &'a [u8] {
        self.quants
    }
    /// The packed scale words.
    pub fn scale_words(&self) -> &'a [u16] {
        self.scales
    }
}

impl Int8Weight {
    /// The packed form's sizes for `n` rows of `k` values of `ty` (the types and K rules of
    /// [`Int8Weight::pack_gguf`]).
    pub fn layout(ty: GgmlType, n: usize, k: usize) -> Result<Int8Layout, Error> {
        let fmt = Int8Fmt::of(ty)?;
        let nb = k / fmt.block();
        check_shape(fmt, n, k, n.checked_mul(nb).ok_or(Error::Overflow)?)?;
        let groups = n.div_ceil(INT8_GROUP);
        let group_quant_bytes = (k / QK)
            .checked_mul(fmt.chunk_bytes())
            .ok_or(Error::Overflow)?;
        let group_scale_words = nb.checked_mul(fmt.scale_words()).ok_or(Error::Overflow)?;
        groups
            .checked_mul(group_quant_bytes)
            .and(groups.checked_mul(group_scale_words))
            .ok_or(Error::Overflow)?;
        Ok(Int8Layout {
            groups,
            group_quant_bytes,
            group_scale_words,
        })
    }

    fn alloc(fmt: Int8Fmt, n: usize, k: usize) -> Result<Self, Error> {
        let l = Self::layout(fmt.ty(), n, k)?;
        Ok(Self {
            fmt,
            n,
            k,
            store: Store::Owned {
                quants: vec![Chunk64([0; 64]); l.quant_bytes() / 64],
                scales: vec![0; l.scale_words()],
            },
        })
    }

    /// A packed weight of `n` rows of `k` values of `ty` whose bytes are already in `bytes`:
    /// `u` at `quants_at` (on a 64-byte boundary in memory) and the scale words at `scales_at`
    /// (2-byte aligned), as [`Int8Weight::pack_gguf_groups`] wrote them for every group. The
    /// weight keeps `bytes` alive and reads them in place (no copy): e.g. a mapped file of
    /// prepared weights. The bytes must not change while any weight shares them (a mapped file
    /// must not be rewritten in place; replace it by renaming). Errors: the type and shape
    /// errors of [`Int8Weight::layout`], [`Error::BufferTooSmall`] when a range reaches past
    /// the bytes, [`Error::Misaligned`].
    pub fn from_shared(
        ty: GgmlType,
        n: usize,
        k: usize,
        bytes: SharedBytes,
        quants_at: usize,
        scales_at: usize,
    ) -> Result<Self, Error> {
        let fmt = Int8Fmt::of(ty)?;
        let l = Self::layout(ty, n, k)?;
        let all = (*bytes).as_ref();
        let q_end = quants_at
            .checked_add(l.quant_bytes())
            .ok_or(Error::Overflow)?;
        let s_end = l
            .scale_words()
            .checked_mul(2)
            .and_then(|b| scales_at.checked_add(b))
            .ok_or(Error::Overflow)?;
        for (what, end) in [("packed quants", q_end), ("packed scales", s_end)] {
            if end > all.len() {
                return Err(Error::BufferTooSmall {
                    what,
                    needed: end,
                    got: all.len(),
                });
            }
        }
        let base = all.as_ptr() as usize;
        if !(base.wrapping_add(quants_at)).is_multiple_of(64) {
            return Err(Error::Misaligned {
                what: "packed quants",
                align: 64,
            });
        }
        if !(base.wrapping_add(scales_at)).is_multiple_of(2) {
            return Err(Error::Misaligned {
                what: "packed scales",
                align: 2,
            });
        }
        Ok(Self {
            fmt,
            n,
            k,
            store: Store::Shared {
                bytes,
                quants: quants_at..q_end,
                scales: scales_at..s_end,
            },
        })
    }

    /// The packed `u` bytes (layout in the type's doc).
    pub fn quant_bytes(&self) -> &[u8] {
        match &self.store {
            // SAFETY: Chunk64 is repr(C) [u8; 64] with no padding, so the Vec's storage is
            // `len * 64` initialized bytes, borrowed shared through `&self`.
            Store::Owned { quants, .. } => unsafe {
                core::slice::from_raw_parts(quants.as_ptr().cast::<u8>(), quants.len() * 64)
            },
            Store::Shared { bytes, quants, .. } => &(**bytes).as_ref()[quants.clone()],
        }
    }

    /// The packed FP16-sized scale words (layout in the type's doc).
    pub fn scale_words(&self) -> &[u16] {
        match &self.store {
            Store::Owned { scales, .. } => scales,
            Store::Shared { bytes, scales, .. } => {
                let b = &(**bytes).as_ref()[scales.clone()];
                // SAFETY: `from_shared` checked that the range starts 2-byte aligned and holds
                // `len / 2` whole words inside the bytes; any bit pattern is a valid u16; the
                // bytes are borrowed shared through `&self` (and never written while shared).
                unsafe { core::slice::from_raw_parts(b.as_ptr().cast::<u16>(), b.len() / 2) }
            }
        }
    }

    /// Packs 16-row groups `groups` of a weight of `n` rows of `k` values of type `ty` (`bytes`:
    /// the whole weight as the GGUF file stores it, 2-byte aligned) into `quants` and `scales`,
    /// which hold exactly those groups' parts of the packed form (`groups.len()` times the
    /// [`Int8Layout`]'s per-group sizes, at any offset the caller chose for group
    /// `groups.start`). Every byte of both is written (rows past `n` as zeros), so the caller
    /// may pass uninitialized-looking (e.g. freshly mapped) memory. Disjoint group ranges can be
    /// packed on different threads into disjoint parts of one buffer: that is how a loader
    /// prepares a model at memory speed. The result equals [`Int8Weight::pack_gguf`]'s bytes for
    /// those groups (tested). On error nothing is written.
    #[allow(clippy::too_many_arguments)]
    pub fn pack_gguf_groups(
        ty: GgmlType,
        bytes: &[u8],
        n: usize,
        k: usize,
        groups: core::ops::Range<usize>,
        quants: &mut [u8],
        scales: &mut [u16],
    ) -> Result<(), Error> {
        fn go<B: I8Src>(
            bytes: &[u8],
            n: usize,
            k: usize,
            groups: core::ops::Range<usize>,
            q: &mut [u8],
            s: &mut [u16],
        ) -> Result<(), Error> {
            let blocks = B::slice_from_bytes(bytes)?;
            let l = Int8Weight::layout(B::FMT.ty(), n, k)?;
            check_shape(B::FMT, n, k, blocks.len())?;
            if groups.start > groups.end || groups.end > l.groups {
                return Err(Error::BadRange {
                    start: groups.start,
                    end: groups.end,
                    n: l.groups,
                });
            }
            let g = groups.end - groups.start;
            for (what, need, got) in [
                ("packed quants", g * l.group_quant_bytes, q.len()),
                ("packed scales", g * l.group_scale_words, s.len()),
            ] {
                if need != got {
                    return Err(Error::ShapeMismatch {
                        what,
                        expected: need,
                        got,
                    });
                }
            }
            q.fill(0);
            s.fill(0);
            for gi in groups.clone() {
                let rel = gi - groups.start;
                let q = &mut q[rel * l.group_quant_bytes..(rel + 1) * l.group_quant_bytes];
                let s = &mut s[rel * l.group_scale_words..(rel + 1) * l.group_scale_words];
                B::pack_group(blocks, n, k, gi, q, s);
            }
            Ok(())
        }
        match Int8Fmt::of(ty)? {
            Int8Fmt::Q4_0 => go::<BlockQ4_0>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q4_1 => go::<BlockQ4_1>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q5_0 => go::<BlockQ5_0>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q5_1 => go::<BlockQ5_1>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q8_0 => go::<BlockQ8_0>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q4K => go::<BlockQ4K>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q5K => go::<BlockQ5K>(bytes, n, k, groups, quants, scales),
            Int8Fmt::Q6K => go::<BlockQ6K>(bytes, n, k, groups, quants, scales),
        }
    }

    /// This weight as a borrowed [`Int8WeightRef`] (what [`Int8Plan::with_view`] takes).
    pub fn view(&self) -> Int8WeightRef<'_> {
        Int8WeightRef {
            fmt: self.fmt,
            n: self.n,
            k: self.k,
            quants: self.quant_bytes(),
            scales: self.scale_words(),
        }
    }

    /// The storage a packed weight of `n` rows of `k` elements of `ty` takes: `(quant bytes,
    /// scale words)`, the lengths [`Self::pack_gguf_into`] and [`Int8WeightRef::new`] want
    /// (quant bytes are a multiple of 64). Errors as [`Self::pack_gguf`] for the type and K.
    pub fn storage_len(ty: GgmlType, n: usize, k: usize) -> Result<(usize, usize), Error> {
        let fmt = Int8Fmt::of(ty)?;
        check_shape(
            fmt,
            n,
            k,
            n.checked_mul(k / fmt.block()).ok_or(Error::Overflow)?,
        )?;
        packed_sizes(fmt, n, k)
    }

    /// As [`Self::pack_gguf`], into caller-owned storage (e.g. a host engine's weight buffer):
    /// `quants` 64-byte aligned, exactly the lengths [`Self::storage_len`] gives; view the result
    /// with [`Int8WeightRef::new`]. Every check runs before any write; no allocation.
    pub fn pack_gguf_into(
        ty: GgmlType,
        bytes: &[u8],
        n: usize,
        k: usize,
        quants: &mut [u8],
        scales: &mut [u16],
    ) -> Result<(), Error> {
        let fmt = Int8Fmt::of(ty)?;
        check_shape(
            fmt,
            n,
            k,
            n.checked_mul(k / fmt.block()).ok_or(Error::Overflow)?,
        )?;
        check_storage(fmt, n, k, quants, scales)?;
        pack_gguf_into(ty, bytes, n, k, quants, scales)
    }

    /// Byte offset of (row `r`, element `i`)'s 32-k chunk and its position `(j, kk)` in it.
    fn chunk_at(&self, r: usize, i: usize) -> (usize, usize, usize) {
        chunk_at(self.fmt, self.k, r, i)
    }

    /// The packers' one body, over each block type's `u` and scale record.
    fn pack_blocks<B: I8Src>(blocks: &[B], n: usize, k: usize) -> Result<Self, Error> {
        let fmt = B::FMT;
        check_shape(fmt, n, k, blocks.len())?;
        let mut w = Self::alloc(fmt, n, k)?;
        let l = Self::layout(fmt.ty(), n, k)?;
        let Store::Owned { quants, scales } = &mut w.store else {
            return Err(Error::Overflow);
        };
        let len = quants.len() * 64;
        // SAFETY: Chunk64 is repr(C) [u8; 64] with no padding, so the Vec's storage is `len`
        // initialized bytes, borrowed exclusively here.
        let q = unsafe { core::slice::from_raw_parts_mut(quants.as_mut_ptr().cast::<u8>(), len) };
        for g in 0..l.groups {
            B::pack_group(
                blocks,
                n,
                k,
                g,
                &mut q[g * l.group_quant_bytes..(g + 1) * l.group_quant_bytes],
                &mut scales[g * l.group_scale_words..(g + 1) * l.group_scale_words],
            );
        }
        Ok(w)
    }

    /// Repacks `n` rows of `k` (a multiple of 32) Q4_0 elements (`blocks.len() == n·k/32`).
    pub fn pack_q4_0(blocks: &[BlockQ4_0], n: usize, k: usize) -> Result<Self, Error> {
        Self::pack_blocks(blocks, n, k)
    }

    /// Repacks `n` rows of `k` (a multiple of 32) Q4_1 elements (`blocks.len() == n·k/32`).
    pub fn pack_q4_1(blocks: &[BlockQ4_1], n: usize, k: usize) -> Result<Self, Error> {
        Self::pack_blocks(blocks, n, k)
    }

    /// Repacks `n` rows of `k` (a multiple of 32) Q8_0 elements (`blocks.len() == n·k/32`).
    pub fn pack_q8_0(blocks: &[BlockQ8_0], n: usize, k: usize) -> Result<Self, Error> {
        Self::pack_blocks(blocks, n, k)
    }

    /// Repacks `n` rows of `k` elements from raw GGUF tensor bytes of type `ty` (2-byte aligned,
    /// `n` rows of whole blocks), e.g. a slice of a memory-mapped model file. Types:
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (K a multiple of 32), Q4_K, Q5_K, Q6_K (K a multiple of
    /// 256); others → [`Error::UnsupportedFormat`].
    pub fn pack_gguf(ty: GgmlType, bytes: &[u8], n: usize, k: usize) -> Result<Self, Error> {
        fn go<B: I8Src>(bytes: &[u8], n: usize, k: usize) -> Result<Int8Weight, Error> {
            Int8Weight::pack_blocks(B::slice_from_bytes(bytes)?, n, k)
        }
        match Int8Fmt::of(ty)? {
            Int8Fmt::Q4_0 => go::<BlockQ4_0>(bytes, n, k),
            Int8Fmt::Q4_1 => go::<BlockQ4_1>(bytes, n, k),
            Int8Fmt::Q5_0 => go::<BlockQ5_0>(bytes, n, k),
            Int8Fmt::Q5_1 => go::<BlockQ5_1>(bytes, n, k),
            Int8Fmt::Q8_0 => go::<BlockQ8_0>(bytes, n, k),
            Int8Fmt::Q4K => go::<BlockQ4K>(bytes, n, k),
            Int8Fmt::Q5K => go::<BlockQ5K>(bytes, n, k),
            Int8Fmt::Q6K => go::<BlockQ6K>(bytes, n, k),
        }
    }

    /// The source type.
    pub fn format(&self) -> GgmlType {
        self.fmt.ty()
    }
    /// The activation quantization this weight needs: per 32 values for the 32-value block
    /// formats, per 256 for the K-quants.
    pub fn act_blocks(&self) -> ActBlocks {
        self.fmt.acts()
    }
    /// Output features (weight rows).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Reduction length.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Blocks per row: `K/32`, or `K/256` for the K-quants.
    pub fn blocks(&self) -> usize {
        self.k / self.fmt.block()
    }
    /// 16-row groups, `ceil(N/16)`.
    pub fn groups(&self) -> usize {
        self.n.div_ceil(INT8_GROUP)
    }
    /// Bytes the packed weight occupies (quants + scales).
    pub fn packed_bytes(&self) -> usize {
        self.quant_bytes().len() + self.scale_words().len() * 2
    }

    /// The packed layout's format.
    pub(crate) fn fmt(&self) -> Int8Fmt {
        self.fmt
    }

    /// `u` of row `j` of group `g`, element `e` of 32-value chunk `c` (rows past N read 0;
    /// `g < groups()`, `c < K/32`, `j < 16`, `e < 32`).
    pub(crate) fn u_in_group(&self, g: usize, j: usize, c: usize, e: usize) -> u8 {
        let base = (g * (self.k / QK) + c) * self.fmt.chunk_bytes();
        let bytes = self.quant_bytes();
        if self.fmt == Int8Fmt::Q8_0 {
            return bytes[base + e / 4 * 64 + 4 * j + e % 4];
        }
        let (hi, st) = (e / 16, e % 16);
        let (v, at) = (st / 4, 4 * j + st % 4);
        let lo = (bytes[base + v * 64 + at] >> (4 * hi)) & 15;
        let plane = base + 256;
        let top = match self.fmt.high_bits() {
            1 => (bytes[plane + at] >> (v + 4 * hi)) & 1,
            2 => (bytes[plane + 64 * hi + at] >> (2 * v)) & 3,
            _ => 0,
        };
        lo | top << 4
    }

    /// `u` of (row `r`, element `i`), read back from the packed layout (`None` out of range).
    pub fn u_at(&self, r: usize, i: usize) -> Option<u8> {
        if r >= self.n || i >= self.k {
            return None;
        }
        let (base, j, kk) = self.chunk_at(r, i);
        let bytes = self.quant_bytes();
        if self.fmt == Int8Fmt::Q8_0 {
            return Some(bytes[base + kk / 4 * 64 + 4 * j + kk % 4]);
        }
        let (hi, st) = (kk / 16, kk % 16);
        let (v, at) = (st / 4, 4 * j + st % 4);
        let lo = (bytes[base + v * 64 + at] >> (4 * hi)) & 15;
        let plane = base + 256;
        let top = match self.fmt.high_bits() {
            1 => (bytes[plane + at] >> (v + 4 * hi)) & 1,
            2 => (bytes[plane + 64 * hi + at] >> (2 * v)) & 3,
            _ => 0,
        };
        Some(lo | top << 4)
    }

    /// `(d_w, m_w)` of (row `r`, 32-value block `b`) as f32 (`m_w` derived for Q4_0 / Q5_0 /
    /// Q8_0), so that `w = d_w·u + m_w`. `None` out of range and for the K-quants (see
    /// [`Self::value_at`]).
    pub fn scale_at(&self, r: usize, b: usize) -> Option<(f32, f32)> {
        if r >= self.n || b >= self.blocks() || self.fmt.block() != QK {
            return None;
        }
        let (g, j) = (r / INT8_GROUP, r % INT8_GROUP);
        let base = (g * self.blocks() + b) * self.fmt.scale_words();
        let sc = self.scale_words();
        let d = f16(sc[base + j]);
        let m = match self.fmt {
            Int8Fmt::Q4_1 | Int8Fmt::Q5_1 => f16(sc[base + INT8_GROUP + j]),
            f => f.offset() as f32 * d,
        };
        Some((d, m))
    }

    /// The weight value (row `r`, element `i`) as the packed layout holds it, computed with
    /// ggml's f32 operations (so it equals [`crate::dequantize_row`] of the source bit for bit).
    pub fn value_at(&self, r: usize, i: usize) -> Option<f32> {
        let u = self.u_at(r, i)? as f32;
        let (g, j) = (r / INT8_GROUP, r % INT8_GROUP);
        let sw = self.fmt.scale_words();
        let rec = &self.scale_words()[(g * self.blocks() + i / self.fmt.block()) * sw..][..sw];
        let d = f16(rec[j]);
        Some(match self.fmt {
            Int8Fmt::Q4_0 | Int8Fmt::Q5_0 | Int8Fmt::Q8_0 => (u + self.fmt.offset() as f32) * d,
            Int8Fmt::Q4_1 | Int8Fmt::Q5_1 => u * d + f16(rec[INT8_GROUP + j]),
            Int8Fmt::Q4K | Int8Fmt::Q5K => {
                let sb = (i % QK_K) / 32;
                let sc = get_byte(rec, 64 + 16 * sb + j) as f32;
                let m = get_byte(rec, 192 + 32 * (sb / 2) + 2 * j + sb % 2) as f32;
                (d * sc) * u - f16(rec[INT8_GROUP + j]) * m
            }
            Int8Fmt::Q6K => {
                let sb = (i % QK_K) / 16;
                let sc = get_byte(rec, 32 + 16 * sb + j) as i8 as f32;
                (d * sc) * (u - 32.0)
            }
        })
    }
}

#[inline]
fn f16(x: u16) -> f32 {
    half::f16::from_bits(x).to_f32()
}

/// One implementation of the int8 kernels, carrying the capability token that proves the CPU
/// can run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Int8Kernel {
    /// Plain Rust: the same integers and the same f32 operation order as the vector kernels
    /// (the oracle).
    Portable,
    /// x86-64 AVX2 (`vpmaddubsw` + `vpmaddwd`, operands bounded so no i16 saturates), see
    /// [`crate::arch::x86_64::Avx2`]: every x86-64 CPU of the last decade without AVX-512.
    #[cfg(target_arch = "x86_64")]
    Avx2(crate::arch::x86_64::Avx2),
    /// x86-64 AVX-512 VNNI (`vpdpbusd`), see [`crate::arch::x86_64::Vnni`].
    #[cfg(target_arch = "x86_64")]
    Vnni(crate::arch::x86_64::Vnni),
    /// x86-64 AMX-INT8 (`tdpbssd`) on the same packed weight, see
    /// [`crate::arch::x86_64::AmxInt8`] (row chunks of ≤ 8 rows run the VNNI kernel).
    #[cfg(target_arch = "x86_64")]
    Amx(crate::arch::x86_64::AmxInt8),
}

impl Int8Kernel {
    /// Every implementation this CPU runs, best last.
    pub fn available() -> Vec<Int8Kernel> {
        #[allow(unused_mut)]
        let mut v = vec![Int8Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = crate::arch::x86_64::Avx2::try_new() {
            v.push(Int8Kernel::Avx2(t));
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = crate::arch::x86_64::Vnni::try_new() {
            v.push(Int8Kernel::Vnni(t));
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(t) = crate::arch::x86_64::AmxInt8::try_new() {
            v.push(Int8Kernel::Amx(t));
        }
        v
    }

    /// The best implementation on this CPU (chosen once, cached).
    pub fn best() -> Int8Kernel {
        static K: std::sync::OnceLock<Int8Kernel> = std::sync::OnceLock::new();
        *K.get_or_init(|| {
            *Int8Kernel::available()
                .last()
                .unwrap_or(&Int8Kernel::Portable)
        })
    }

    /// The implementation's name.
    pub fn name(&self) -> &'static str {
        match self {
            Int8Kernel::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Avx2(_) => "avx2",
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Vnni(_) => "avx512-vnni",
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Amx(_) => "amx-int8",
        }
    }

    /// Activation rows per parallel tile of an [`Int8Plan`] on this implementation.
    pub fn tile_rows(&self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Int8Kernel::Amx(_) => crate::arch::x86_64::AMX_INT8_TILE_ROWS,
            _ => INT8_TILE_ROWS,
        }
    }

    /// The VNNI token this implementation carries (its quantizer), if any.
    #[cfg(target_arch = "x86_64")]
    fn vnni(self) -> Option<crate::arch::x86_64::Vnni> {
        match self {
            Int8Kernel::Vnni(t) => Some(t),
            Int8Kernel::Amx(t) => Some(t.vnni()),
            Int8Kernel::Avx2(_) | Int8Kernel::Portable => None,
        }
    }

    /// Quantizes `x` (`m` rows of `k`, row-major, stride `k`; `k` a multiple of 32) into `acts`
    /// per 32 values (what the 32-value block formats need; see [`Self::quantize_acts_for`]).
    /// No allocation: errors if `acts` is too small (nothing written then).
    pub fn quantize_acts(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        acts: &mut QActs,
    ) -> Result<(), Error> {
        self.quantize_acts_for(x, m, k, ActBlocks::PER32, acts)
    }

    /// Quantizes `x` (`m` rows of `k`, row-major, stride `k`) into `acts` in the schemes
    /// `blocks` names (per 256 needs `k` a multiple of 256): the union of
    /// [`Int8Weight::act_blocks`] over the weights that multiply this `x`, so one quantization
    /// serves a forward's mixed formats. No allocation: errors if `acts` is too small (nothing
    /// written then).
    pub fn quantize_acts_for(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        blocks: ActBlocks,
        acts: &mut QActs,
    ) -> Result<(), Error> {
        prepare_acts(x, m, k, blocks, acts)?;
        // SAFETY: prepare_acts checked x.len() >= m*k, K against the schemes' block sizes and
        // the capacity of q and qk (m*k), meta (m*k/32) and kmeta (m*k/256).
        unsafe {
            self.quantize_raw(
                x.as_ptr(),
                m,
                k,
                blocks,
                acts.q.as_mut_ptr(),
                acts.meta.as_mut_ptr(),
                acts.qk.as_mut_ptr(),
                acts.kmeta.as_mut_ptr(),
            )
        };
        Ok(())
    }

    /// [`Self::quantize_acts_for`] with the rows spread over `pool` (each row is quantized on
    /// its own: the same bits as on one thread). Rows go in tasks of at least 8 rows, so a
    /// decode step's few rows stay on the calling thread. Errors: those of
    /// `quantize_acts_for` (nothing written), and the pool's.
    pub fn quantize_acts_on(
        self,
        pool: &crate::ThreadPool,
        x: &[f32],
        m: usize,
        k: usize,
        blocks: ActBlocks,
        acts: &mut QActs,
    ) -> Result<(), Error> {
        prepare_acts(x, m, k, blocks, acts)?;
        /// The four outputs' bases, shared by tasks that write disjoint rows.
        struct Out(*mut i8, *mut BlockMeta, *mut i8, *mut SuperMeta);
        // SAFETY: tasks write disjoint rows through these pointers (see below).
        unsafe impl Sync for Out {}
        let out = Out(
            acts.q.as_mut_ptr(),
            acts.meta.as_mut_ptr(),
            acts.qk.as_mut_ptr(),
            acts.kmeta.as_mut_ptr(),
        );
        let rows = m.div_ceil(2 * pool.threads().max(1)).max(8);
        let xp = x.as_ptr() as usize;
        pool.run(m.div_ceil(rows), &|t, _| {
            let (r0, r1) = (t * rows, ((t + 1) * rows).min(m));
            let out = &out;
            // The per-32 records are k/32 a row, the per-256 ones k/256 (checked multiples by
            // prepare_acts when the scheme is wanted; the unwanted scheme's pointers are never
            // written, so their offsets are not formed).
            let (q, meta) = if blocks.per32 {
                (
                    out.0.wrapping_add(r0 * k),
                    out.1.wrapping_add(r0 * (k / QK)),
                )
            } else {
                (out.0, out.1)
            };
            let (qk, kmeta) = if blocks.per256 {
                (
                    out.2.wrapping_add(r0 * k),
                    out.3.wrapping_add(r0 * (k / QK_K)),
                )
            } else {
                (out.2, out.3)
            };
            // SAFETY: prepare_acts checked x (m·k), k against the schemes' blocks and the
            // capacity of q/qk (m·k), meta (m·k/32) and kmeta (m·k/256); rows r0..r1 < m of
            // each are this task's alone (tasks cover disjoint row ranges), and `acts` is
            // borrowed mutably for the whole call.
            unsafe {
                self.quantize_raw(
                    (xp as *const f32).add(r0 * k),
                    r1 - r0,
                    k,
                    blocks,
                    q,
                    meta,
                    qk,
                    kmeta,
                )
            };
        });
        Ok(())
    }

    /// The quantizers of [`Self::quantize_acts_for`] on raw storage (the C ABI's caller
    /// buffers use it too): `m·k/32` per-32 blocks into `q`/`meta` if `blocks.per32`, `m·k/256`
    /// super-blocks into `qk`/`kmeta` if `blocks.per256`.
    ///
    /// # Safety
    /// `x` valid for `m·k` reads; `k` a multiple of 32 (of 256 if `blocks.per256`); if
    /// `blocks.per32`, `q` valid for `m·k` and `meta` for `m·k/32` initialized writes; if
    /// `blocks.per256`, `qk` for `m·k` and `kmeta` for `m·k/256`; none of them overlapping and
    /// nothing else accessing them during the call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn quantize_raw(
        self,
        x: *const f32,
        m: usize,
        k: usize,
        blocks: ActBlocks,
        q: *mut i8,
        meta: *mut BlockMeta,
        qk: *mut i8,
        kmeta: *mut SuperMeta,
    ) {
        // The AMX kernel quantizes activations with its VNNI token (the same integers).
        #[cfg(target_arch = "x86_64")]
        let vector = self.vnni();
        #[cfg(not(target_arch = "x86_64"))]
        let vector: Option<()> = None;
        if blocks.per32 {
            let nb = k / QK;
            match vector {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller's contract: x (m*k), q (m*k) and meta (m*k/32).
                Some(t) => unsafe { t.quantize(x, m * nb, q, meta) },
                _ => {
                    for blk in 0..m * nb {
                        // SAFETY: blk < m*k/32: inside x, q and meta (caller's contract),
                        // which do not overlap.
                        unsafe {
                            let xs = core::slice::from_raw_parts(x.add(blk * QK), QK);
                            let qs = core::slice::from_raw_parts_mut(q.add(blk * QK), QK);
                            meta.add(blk).write(quantize_block(xs, qs));
                        }
                    }
                }
            }
        }
        if blocks.per256 {
            let nb = k / QK_K;
            match vector {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller's contract: x (m*k), qk (m*k) and kmeta (m*k/256).
                Some(t) => unsafe { t.quantize_super(x, m * nb, qk, kmeta) },
                _ => {
                    for blk in 0..m * nb {
                        // SAFETY: blk < m*k/256: inside x, qk and kmeta (caller's contract),
                        // which do not overlap.
                        unsafe {
                            let xs = core::slice::from_raw_parts(x.add(blk * QK_K), QK_K);
                            let qs = core::slice::from_raw_parts_mut(qk.add(blk * QK_K), QK_K);
                            kmeta.add(blk).write(quantize_super(xs, qs));
                        }
                    }
                }
            }
        }
    }

    /// `y[M×N] = A·Wᵀ` single-threaded, A quantized in `acts` (M = `acts.m()`). On error nothing
    /// is written.
    pub fn gemm(
        self,
        w: &Int8Weight,
        acts: &QActs,
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        Int8Plan::new(self, w, acts, y, ldy)?.run_all();
        Ok(())
    }

    /// Rows `r0..r0+rows` × groups `g0..g1`.
    ///
    /// # Safety
    /// `ctx` validated; `r0 + rows <= ctx.m`; `rows <= self.tile_rows()`; `g0 <= g1 <= groups`;
    /// exclusive access to that region of y.
    pub(crate) unsafe fn tile(&self, ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: forwarded; the token proves the CPU features.
            Int8Kernel::Vnni(t) => unsafe { t.tile(ctx, r0, rows, g0, g1) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: forwarded; the token proves the CPU features.
            Int8Kernel::Avx2(t) => unsafe { t.int8_tile(ctx, r0, rows, g0, g1) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: forwarded (rows <= tile_rows() by the plan); the token proves AMX.
            Int8Kernel::Amx(t) => unsafe { t.tile(ctx, r0, rows, g0, g1) },
            // SAFETY: forwarded.
            _ => unsafe { tile_portable(ctx, r0, rows, g0, g1) },
        }
    }
}

/// Quantizes `x` per 32 values into `acts` with the best implementation (see
/// [`Int8Kernel::quantize_acts`]).
pub fn quantize_acts(x: &[f32], m: usize, k: usize, acts: &mut QActs) -> Result<(), Error> {
    Int8Kernel::best().quantize_acts(x, m, k, acts)
}

/// Quantizes `x` into `acts` in the schemes `blocks` with the best implementation (see
/// [`Int8Kernel::quantize_acts_for`]).
pub fn quantize_acts_for(
    x: &[f32],
    m: usize,
    k: usize,
    blocks: ActBlocks,
    acts: &mut QActs,
) -> Result<(), Error> {
    Int8Kernel::best().quantize_acts_for(x, m, k, blocks, acts)
}

/// `y[M×N] = A·Wᵀ` on the best implementation, single-threaded (see [`Int8Plan`] for threads).
pub fn int8_gemm(w: &Int8Weight, acts: &QActs, y: &mut [f32], ldy: usize) -> Result<(), Error> {
    Int8Kernel::best().gemm(w, acts, y, ldy)
}

/// A validated call as raw pointers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub fmt: Int8Fmt,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Blocks per row (of 32, or 256 for K-quants).
    pub nb: usize,
    /// Packed `u` bytes (64-byte aligned).
    pub u: *const u8,
    /// Packed FP16-sized scale words.
    pub s: *const u16,
    /// Per-32 `q_x`, row stride `k`.
    pub q: *const i8,
    /// Per-32 block records, row stride `k/32`.
    pub meta: *const BlockMeta,
    /// Per-256 `q_x`, row stride `k`.
    pub qk: *const i8,
    /// Per-256 records, row stride `k/256`.
    pub kmeta: *const SuperMeta,
    pub y: *mut f32,
    pub ldy: usize,
}

/// The `u` of element `kk` (0..32) of lane `j` in one 32-k chunk `ub` (layout in
/// [`Int8Weight`]'s doc).
#[inline]
pub(crate) fn chunk_u(fmt: Int8Fmt, ub: &[u8], j: usize, kk: usize) -> i32 {
    if fmt == Int8Fmt::Q8_0 {
        return ub[kk / 4 * 64 + 4 * j + kk % 4] as i32;
    }
    let (hi, st) = (kk / 16, kk % 16);
    let (v, at) = (st / 4, 4 * j + st % 4);
    let lo = (ub[v * 64 + at] >> (4 * hi)) & 15;
    let top = match fmt.high_bits() {
        1 => (ub[256 + at] >> (v + 4 * hi)) & 1,
        2 => (ub[256 + 64 * hi + at] >> (2 * v)) & 3,
        _ => 0,
    };
    (lo | top << 4) as i32
}

/// Portable tile: the definition of the result.
///
/// # Safety
/// As [`Int8Kernel::tile`].
unsafe fn tile_portable(ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
    let (nb, f) = (ctx.nb, ctx.fmt);
    let (qb, sw, cb) = (f.quant_bytes(), f.scale_words(), f.chunk_bytes());
    for g in g0..g1 {
        let lanes = (ctx.n - g * INT8_GROUP).min(INT8_GROUP);
        for r in r0..r0 + rows {
            let mut acc = [0f32; INT8_GROUP];
            for b in 0..nb {
                // SAFETY: g < ng and b < nb index inside the packed weight's quants and scales.
                let (ub, sc) = unsafe {
                    (
                        core::slice::from_raw_parts(ctx.u.add((g * nb + b) * qb), qb),
                        core::slice::from_raw_parts(ctx.s.add((g * nb + b) * sw), sw),
                    )
                };
                if f.block() == QK {
                    // SAFETY: r < m, b < nb: inside the validated m*nb records / m*k bytes.
                    let (meta, xq) = unsafe {
                        (
                            *ctx.meta.add(r * nb + b),
                            core::slice::from_raw_parts(ctx.q.add(r * ctx.k + b * QK), QK),
                        )
                    };
                    block32(f, &meta, xq, ub, sc, &mut acc);
                } else {
                    // SAFETY: r < m, b < nb: inside the validated m*nb records / m*k bytes.
                    let (meta, xq) = unsafe {
                        (
                            *ctx.kmeta.add(r * nb + b),
                            core::slice::from_raw_parts(ctx.qk.add(r * ctx.k + b * QK_K), QK_K),
                        )
                    };
                    super256(f, &meta, xq, ub, cb, sc, &mut acc);
                }
            }
            for (j, &a) in acc[..lanes].iter().enumerate() {
                // SAFETY: r < m and g*16 + j < n: inside y (validated), exclusive per caller.
                unsafe { *ctx.y.add(r * ctx.ldy + g * INT8_GROUP + j) = a };
            }
        }
    }
}

/// One 32-value block of every lane into `acc` (the oracle's arithmetic for 32-value formats).
fn block32(f: Int8Fmt, meta: &BlockMeta, xq: &[i8], ub: &[u8], sc: &[u16], acc: &mut [f32; 16]) {
    let init = match f {
        Int8Fmt::Q4_0 => meta.n8,
        Int8Fmt::Q5_0 => 2 * meta.n8,
        Int8Fmt::Q8_0 => meta.n128,
        _ => 0,
    };
    for (j, a) in acc.iter_mut().enumerate() {
        let mut isum = init;
        for (kk, &xv) in xq.iter().enumerate() {
            isum += chunk_u(f, ub, j, kk) * i32::from(xv);
        }
        let dw = f16(sc[j]);
        *a = (isum as f32).mul_add(dw * meta.d, *a);
        if matches!(f, Int8Fmt::Q4_1 | Int8Fmt::Q5_1) {
            *a = f16(sc[INT8_GROUP + j]).mul_add(meta.s, *a);
        }
    }
}

/// One 256-value super-block of every lane into `acc` (the oracle's arithmetic for K-quants).
fn super256(
    f: Int8Fmt,
    meta: &SuperMeta,
    xq: &[i8],
    ub: &[u8],
    cb: usize,
    sc: &[u16],
    acc: &mut [f32; 16],
) {
    for (j, a) in acc.iter_mut().enumerate() {
        let (mut i1, mut i2) = (0i32, 0i32);
        if f == Int8Fmt::Q6K {
            for sb in 0..16 {
                let mut s = meta.n32[sb];
                for l in 0..16 {
                    let e = 16 * sb + l;
                    s += chunk_u(f, &ub[e / QK * cb..], j, e % QK) * i32::from(xq[e]);
                }
                i1 += get_byte(sc, 32 + 16 * sb + j) as i8 as i32 * s;
            }
        } else {
            for sb in 0..8 {
                let mut s = 0;
                for l in 0..32 {
                    s += chunk_u(f, &ub[sb * cb..], j, l) * i32::from(xq[32 * sb + l]);
                }
                i1 += get_byte(sc, 64 + 16 * sb + j) as i32 * s;
                let m = get_byte(sc, 192 + 32 * (sb / 2) + 2 * j + sb % 2) as i32;
                i2 += m * meta.bsums32[sb] as i32;
            }
        }
        let d = f16(sc[j]);
        *a = (i1 as f32).mul_add(d * meta.d, *a);
        if f != Int8Fmt::Q6K {
            let dmin = f16(sc[INT8_GROUP + j]);
            *a = (-(i2 as f32)).mul_add(dmin * meta.d, *a);
        }
    }
}

/// A validated int8 GEMM cut into tiles of up to [`INT8_TILE_ROWS`] activation rows × a few
/// 16-row weight groups, to run on the caller's threads through [`StealState`]. Tiles are
/// ordered group-major (consecutive tiles share weight groups, so each worker's contiguous range
/// streams its part of the weight once).
#[derive(Debug)]
pub struct Int8Plan<'a> {
    ctx: Ctx,
    kernel: Int8Kernel,
    /// Activation rows per tile (the kernel's `tile_rows`).
    rows: usize,
    /// Groups per tile.
    gc: usize,
    _b: core::marker::PhantomData<(&'a [u8], &'a QActs, &'a mut [f32])>,
}

// SAFETY: raw pointers come from shared borrows (weight, acts: read only) and one exclusive
// borrow of y held for the plan's lifetime; each tile index is claimed once and tiles write
// disjoint regions of y.
unsafe impl Sync for Int8Plan<'_> {}
// SAFETY: as above.
unsafe impl Send for Int8Plan<'_> {}

impl<'a> Int8Plan<'a> {
    /// Validates the call; nothing is written yet. `acts` must hold the scheme the weight needs
    /// ([`Int8Weight::act_blocks`]), else [`Error::MissingActivations`].
    pub fn new(
        kernel: Int8Kernel,
        w: &'a Int8Weight,
        acts: &'a QActs,
        y: &'a mut [f32],
        ldy: usize,
    ) -> Result<Self, Error> {
        Self::with_out(kernel, w, acts, crate::OutMut::new(y), ldy)
    }

    /// As [`Int8Plan::new`], writing through an [`crate::OutMut`] (e.g. some columns of a
    /// shared output).
    pub fn with_out(
        kernel: Int8Kernel,
        w: &'a Int8Weight,
        acts: &'a QActs,
        y: crate::OutMut<'a>,
        ldy: usize,
    ) -> Result<Self, Error> {
        Self::with_view(kernel, w.view(), acts, y, ldy)
    }

    /// As [`Int8Plan::with_out`], on a weight in caller-owned storage ([`Int8WeightRef`]).
    pub fn with_view(
        kernel: Int8Kernel,
        w: Int8WeightRef<'a>,
        acts: &'a QActs,
        y: crate::OutMut<'a>,
        ldy: usize,
    ) -> Result<Self, Error> {
        if acts.k != w.k {
            return Err(Error::ShapeMismatch {
                what: "K of the activations vs the weight",
                expected: w.k,
                got: acts.k,
            });
        }
        let (m, n) = (acts.m, w.n);
        if m > 0 && !acts.blocks.contains(w.act_blocks()) {
            return Err(Error::MissingActivations {
                needed: if w.act_blocks().per256 {
                    "per-256 (K-quant weight)"
                } else {
                    "per-32"
                },
            });
        }
        if m > 0 && ldy < n {
            return Err(Error::BadStride {
                what: "y",
                ld: ldy,
                min: n,
            });
        }
        let need = crate::gemm::need(m, ldy, n)?;
        if y.len() < need {
            return Err(Error::BufferTooSmall {
                what: "y",
                needed: need,
                got: y.len(),
            });
        }
        // Small M: several groups per tile so a tile's work outweighs its claim.
        let gc = match m {
            0..=8 => 4,
            9..=16 => 2,
            _ => 1,
        };
        Ok(Self {
            ctx: Ctx {
                fmt: w.fmt,
                m,
                n,
                k: w.k,
                nb: w.k / w.fmt.block(),
                u: w.quant_bytes().as_ptr(),
                s: w.scale_words().as_ptr(),
                q: acts.q.as_ptr(),
                meta: acts.meta.as_ptr(),
                qk: acts.qk.as_ptr(),
                kmeta: acts.kmeta.as_ptr(),
                y: y.ptr,
                ldy,
            },
            kernel,
            rows: kernel.tile_rows(),
            gc,
            _b: core::marker::PhantomData,
        })
    }

    /// The same plan with its tiles sized for `workers` threads: for M ≤ 16 (decode), as few
    /// groups per tile as keep about four tiles per worker (down to one group), so a small
    /// matrix (e.g. N = 192: 12 groups) spreads over all threads instead of a few 4-group tiles;
    /// with few workers it keeps the default (fewer claims). Prepare the [`StealState`] with the
    /// new [`Self::tiles`].
    pub fn with_workers(self, workers: usize) -> Self {
        if self.ctx.m > 16 {
            return self;
        }
        let ng = self.ctx.n.div_ceil(INT8_GROUP);
        let gc = (ng / workers.max(1).saturating_mul(4)).clamp(1, self.gc);
        Self { gc, ..self }
    }

    fn row_chunks(&self) -> usize {
        self.ctx.m.div_ceil(self.rows)
    }
    fn group_chunks(&self) -> usize {
        self.ctx.n.div_ceil(INT8_GROUP).div_ceil(self.gc)
    }

    /// Number of tiles (0 when M or N is 0).
    pub fn tiles(&self) -> usize {
        self.row_chunks() * self.group_chunks()
    }

    /// # Safety
    /// Tile `t` must not run on two threads at once.
    pub(crate) unsafe fn run_tile(&self, t: usize) {
        if let Some((r0, rows, g0, g1)) = self.tile_bounds(t) {
            // SAFETY: r0 + rows <= m, g0 <= g1 <= ng; exclusivity forwarded (tiles are
            // disjoint).
            unsafe { self.kernel.tile(&self.ctx, r0, rows, g0, g1) }
        }
    }

    /// Tile `t` as `(first row, rows, first group, end group)` (`None` past the last tile).
    pub(crate) fn tile_bounds(&self, t: usize) -> Option<(usize, usize, usize, usize)> {
        if t >= self.tiles() {
            return None;
        }
        let rc = self.row_chunks();
        let (gch, rch) = (t / rc, t % rc);
        let r0 = rch * self.rows;
        let rows = (self.ctx.m - r0).min(self.rows);
        let ng = self.ctx.n.div_ceil(INT8_GROUP);
        let g0 = gch * self.gc;
        let g1 = (g0 + self.gc).min(ng);
        Some((r0, rows, g0, g1))
    }

    /// The validated call (for the AMX software-model tests).
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(crate) fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// The same plan cut into tiles of `rows` rows (for the AMX software-model tests).
    #[cfg(all(test, target_arch = "x86_64"))]
    pub(crate) fn with_tile_rows(self, rows: usize) -> Self {
        Self { rows, ..self }
    }

    /// Runs every tile on the calling thread.
    pub fn run_all(&mut self) {
        for t in 0..self.tiles() {
            // SAFETY: `&mut self` excludes concurrent runs.
            unsafe { self.run_tile(t) }
        }
    }

    /// Runs this worker's share: claims tiles from `state` (prepared with [`Self::tiles`]) until
    /// none is left. Call once per worker, `worker` in `0..state.workers()`.
    pub fn run_worker(&self, state: &StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles(), |t| {
            // SAFETY: each tile index is handed to exactly one claim.
            unsafe { self.run_tile(t) }
        })
    }
}

#[cfg(test)]
mod pack_tests {
    use super::*;

    /// `INT8_TYPES` is exactly the set the packer dispatches on, in both directions.
    #[test]
    fn int8_types_are_the_packed_layouts() {
        for ty in INT8_TYPES {
            assert_eq!(Int8Fmt::of(ty).map(Int8Fmt::ty), Ok(ty), "{ty:?}");
        }
        for code in 0..64 {
            if let Some(ty) = GgmlType::from_code(code) {
                assert_eq!(Int8Fmt::of(ty).is_ok(), INT8_TYPES.contains(&ty), "{ty:?}");
            }
        }
    }

    /// Random bytes as `count` blocks of `B` (any bit pattern is a valid block here: only the
    /// packed bytes are compared, not values).
    fn blocks<B: I8Src>(seed: u64, count: usize) -> Vec<B> {
        let bb = core::mem::size_of::<B>();
        let mut x = seed | 1;
        let bytes: Vec<u8> = (0..count * bb)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut store = vec![0u16; bytes.len().div_ceil(2)];
        // SAFETY: `store` has at least `bytes.len()` bytes, u16-aligned (the blocks' alignment).
        let dst = unsafe {
            core::slice::from_raw_parts_mut(store.as_mut_ptr().cast::<u8>(), bytes.len())
        };
        dst.copy_from_slice(&bytes);
        B::slice_from_bytes(dst).unwrap().to_vec()
    }

    /// Each fast `pack_group` (Q4_0, Q4_1, Q8_0, Q4_K) writes the element-by-element body's
    /// bytes, over row counts that fill, split and under-fill a 16-row group; outputs poisoned
    /// with 0xFF and zeroed as the callers do, so a byte the fast path skips shows up.
    fn same<B: I8Src>() {
        let be = B::FMT.block();
        for (n, k) in [(1, be), (15, 2 * be), (16, be), (17, 3 * be), (40, 8 * be)] {
            let nb = k / be;
            let src = blocks::<B>(n as u64 * 31 + k as u64, n * nb);
            let l = Int8Weight::layout(B::FMT.ty(), n, k).unwrap();
            for g in 0..l.groups {
                let mut q = [
                    vec![0xFFu8; l.group_quant_bytes],
                    vec![0xFFu8; l.group_quant_bytes],
                ];
                let mut s = [
                    vec![0xFFFFu16; l.group_scale_words],
                    vec![0xFFFF; l.group_scale_words],
                ];
                for (q, s) in q.iter_mut().zip(s.iter_mut()) {
                    q.fill(0);
                    s.fill(0);
                }
                let [q0, q1] = &mut q;
                let [s0, s1] = &mut s;
                pack_group_elementwise(&src, n, k, g, q0, s0);
                B::pack_group(&src, n, k, g, q1, s1);
                assert_eq!(q0, q1, "{:?} n {n} k {k} group {g}: quants", B::FMT);
                assert_eq!(s0, s1, "{:?} n {n} k {k} group {g}: scales", B::FMT);
            }
        }
    }

    #[test]
    fn fast_group_packers_match_the_elementwise_body() {
        same::<BlockQ4_0>();
        same::<BlockQ4_1>();
        same::<BlockQ8_0>();
        same::<BlockQ4K>();
        // The element-by-element formats through their default (the same body): trivially
        // equal, kept so a future override is covered by adding nothing.
        same::<BlockQ5_0>();
        same::<BlockQ5_1>();
        same::<BlockQ5K>();
        same::<BlockQ6K>();
    }
}
