//! Int8 GEMM on GGUF block-quantized weights (Q4_0, Q4_1, Q8_0): llama.cpp's scheme, register
//! blocked.
//!
//! - Weights `W[N×K]` (ggml layout: N rows of K/32 blocks) are repacked once into
//!   [`Int8Weight`]: groups of 16 output rows; per (group, 32-k block) the 16 rows' unsigned
//!   integers `u` laid out as `vpdpbusd` operands (lane `j` = row `j`, its 4 bytes = 4
//!   consecutive k), and the 16 rows' FP16 scales `d_w` (and, for Q4_1, offsets `m_w`).
//!   Every weight is `w = d_w * u + m_w` per block: Q4_1 as stored; Q4_0 `u = q` (0..15),
//!   `m_w = -8 d_w`; Q8_0 `u = q + 128` (0..255), `m_w = -128 d_w`.
//! - Activations `A[M×K]` f32 are quantized per call into [`QActs`] (caller-owned scratch): per
//!   32-element block `d_x = amax / 127`, `q_x = round_ties_even(x / d_x)` in -127..=127, plus
//!   `s_x = d_x * Σq_x` (for Q4_1) and the integers `-8 Σq_x`, `-128 Σq_x` (for Q4_0, Q8_0).
//! - Per (row, output, block) the kernel computes the exact integer
//!   `i = Σ u·q_x (+ c·Σq_x)`, `c = -8` (Q4_0) / `-128` (Q8_0) / 0 (Q4_1), then
//!   `acc = fma(f32(i), d_w·d_x, acc)` and for Q4_1 `acc = fma(m_w, s_x, acc)`, blocks in order
//!   from `acc = 0`. Every implementation performs exactly this sequence of f32 roundings, so
//!   results are bit-identical across implementations and a row's result does not depend on M
//!   or on the tile it falls in (batch invariance).
//!
//! The only approximation against f32 activations is the activation rounding: each `x` moves by
//! at most `d_x / 2`, so an output moves by at most `Σ_blocks d_x/2 · Σ|w_i|` (plus f32
//! rounding of the accumulation).

use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, PackSrc, QType, QK};
use crate::{Error, StealState};

/// Output rows (weight rows) per packed group: one 512-bit vector of i32 lanes.
pub const INT8_GROUP: usize = 16;
/// Activation rows per parallel tile (a tile is up to this many rows × some groups).
pub const INT8_TILE_ROWS: usize = 32;

/// Which GGUF block format an [`Int8Weight`] came from (it fixes the packed layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Int8Format {
    /// Q4_0: `w = d (q - 8)`, 4-bit `u = q`.
    Q4_0,
    /// Q4_1: `w = d q + m`, 4-bit `u = q`.
    Q4_1,
    /// Q8_0: `w = d q`, 8-bit `u = q + 128`.
    Q8_0,
}

impl Int8Format {
    /// Bytes of `u` per (group, block): 16 rows × 32 k, nibbles or bytes.
    pub const fn quant_bytes(self) -> usize {
        match self {
            Int8Format::Q8_0 => INT8_GROUP * QK,
            _ => INT8_GROUP * QK / 2,
        }
    }
    /// FP16 scale words per (group, block): `d_w` ×16 (and `m_w` ×16 for Q4_1).
    pub const fn scale_words(self) -> usize {
        match self {
            Int8Format::Q4_1 => 2 * INT8_GROUP,
            _ => INT8_GROUP,
        }
    }
    /// The integer offset `c` folded into each block's integer sum (`c Σq_x`).
    pub(crate) const fn offset(self) -> i32 {
        match self {
            Int8Format::Q4_0 => -8,
            Int8Format::Q4_1 => 0,
            Int8Format::Q8_0 => -128,
        }
    }
}

/// One 64-byte-aligned chunk of packed weight bytes.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk64(pub [u8; 64]);

/// A weight matrix repacked for the int8 kernels (built once, at load time; the only allocation
/// of this module).
///
/// Layout (all offsets from 64-byte-aligned storage):
/// - `u`: for group `g` (rows `16g..16g+16`), block `b`, [`Int8Format::quant_bytes`] bytes at
///   `(g·nb + b)·quant_bytes`. Q8_0: 8 vectors `s = 0..8` of 64 bytes, byte `4j + i` =
///   `u[16g + j][32b + 4s + i]`. Q4: 4 vectors `v = 0..4` of 64 bytes, byte `4j + i` =
///   `u[16g+j][32b + 4v + i] | u[16g+j][32b + 16 + 4v + i] << 4` (low nibbles: k steps 0..4 of
///   the block, high nibbles: steps 4..8).
/// - `scales`: for (g, b), [`Int8Format::scale_words`] FP16 words at `(g·nb + b)·scale_words`:
///   `d_w` of the 16 rows, then (Q4_1) `m_w` of the 16 rows.
/// - Rows past N in the last group are zero (`u = 0`, `d_w = m_w = 0`): their lanes compute 0
///   and are never stored.
#[derive(Debug, Clone)]
pub struct Int8Weight {
    format: Int8Format,
    n: usize,
    k: usize,
    quants: Vec<Chunk64>,
    scales: Vec<u16>,
}

fn check_shape(n: usize, k: usize, blocks: usize) -> Result<(), Error> {
    if k == 0 || !k.is_multiple_of(QK) {
        return Err(Error::ShapeMismatch {
            what: "K modulo 32 (K > 0)",
            expected: 0,
            got: if k == 0 { 32 } else { k % QK },
        });
    }
    let need = n.checked_mul(k / QK).ok_or(Error::Overflow)?;
    if blocks != need {
        return Err(Error::ShapeMismatch {
            what: "weight blocks (N * K/32)",
            expected: need,
            got: blocks,
        });
    }
    Ok(())
}

impl Int8Weight {
    fn alloc(format: Int8Format, n: usize, k: usize) -> Result<Self, Error> {
        let nb = k / QK;
        let ng = n.div_ceil(INT8_GROUP);
        let qb = ng
            .checked_mul(nb)
            .and_then(|x| x.checked_mul(format.quant_bytes()))
            .ok_or(Error::Overflow)?;
        let sw = ng
            .checked_mul(nb)
            .and_then(|x| x.checked_mul(format.scale_words()))
            .ok_or(Error::Overflow)?;
        Ok(Self {
            format,
            n,
            k,
            quants: vec![Chunk64([0; 64]); qb / 64],
            scales: vec![0; sw],
        })
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.quants.len() * 64;
        // SAFETY: Chunk64 is repr(C) [u8; 64] with no padding, so the Vec's storage is
        // `len` initialized bytes, borrowed exclusively through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.quants.as_mut_ptr().cast::<u8>(), len) }
    }

    /// The packed `u` bytes (layout in the type's doc).
    pub fn quant_bytes(&self) -> &[u8] {
        // SAFETY: as in `bytes_mut`, shared.
        unsafe {
            core::slice::from_raw_parts(self.quants.as_ptr().cast::<u8>(), self.quants.len() * 64)
        }
    }

    /// The packed FP16 scale words (layout in the type's doc).
    pub fn scale_words(&self) -> &[u16] {
        &self.scales
    }

    /// Sets `u` of (row `r`, element `i`); the packed bytes start zeroed.
    fn put_u(&mut self, r: usize, i: usize, u: u8) {
        let (g, j, b, kk) = (r / INT8_GROUP, r % INT8_GROUP, i / QK, i % QK);
        let nb = self.k / QK;
        let f = self.format;
        let base = (g * nb + b) * f.quant_bytes();
        let bytes = self.bytes_mut();
        match f {
            Int8Format::Q8_0 => {
                let (s, ii) = (kk / 4, kk % 4);
                bytes[base + s * 64 + 4 * j + ii] = u;
            }
            _ => {
                let (hi, st) = (kk / 16, kk % 16);
                let (v, ii) = (st / 4, st % 4);
                bytes[base + v * 64 + 4 * j + ii] |= (u & 15) << (4 * hi);
            }
        }
    }

    fn put_scales(&mut self, r: usize, b: usize, d: u16, m: u16) {
        let (g, j) = (r / INT8_GROUP, r % INT8_GROUP);
        let nb = self.k / QK;
        let base = (g * nb + b) * self.format.scale_words();
        self.scales[base + j] = d;
        if self.format == Int8Format::Q4_1 {
            self.scales[base + INT8_GROUP + j] = m;
        }
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

    /// The packers' one body, over the block access the packed GEMV's packers use: `u` is the
    /// 4-bit value for Q4_0/Q4_1 and the i8 bits offset by 128 for Q8_0.
    fn pack_blocks<B: PackSrc>(blocks: &[B], n: usize, k: usize) -> Result<Self, Error> {
        check_shape(n, k, blocks.len())?;
        let format = match B::TY {
            QType::Q4_0 => Int8Format::Q4_0,
            QType::Q4_1 => Int8Format::Q4_1,
            QType::Q8_0 => Int8Format::Q8_0,
        };
        let mut w = Self::alloc(format, n, k)?;
        let nb = k / QK;
        for r in 0..n {
            for b in 0..nb {
                let blk = &blocks[r * nb + b];
                for e in 0..QK {
                    let q = blk.q(e);
                    let u = if format == Int8Format::Q8_0 {
                        q ^ 0x80
                    } else {
                        q
                    };
                    w.put_u(r, b * QK + e, u);
                }
                w.put_scales(r, b, blk.d_bits(), blk.m_bits());
            }
        }
        Ok(w)
    }

    /// Repacks `n` rows of `k` elements from raw GGUF tensor bytes of `format` (2-byte aligned,
    /// `n·k/32` blocks: 18, 20 or 34 bytes each), e.g. a slice of a memory-mapped model file.
    pub fn pack_gguf(format: Int8Format, bytes: &[u8], n: usize, k: usize) -> Result<Self, Error> {
        use crate::quant::QuantBlock;
        match format {
            Int8Format::Q4_0 => Self::pack_q4_0(BlockQ4_0::slice_from_bytes(bytes)?, n, k),
            Int8Format::Q4_1 => Self::pack_q4_1(BlockQ4_1::slice_from_bytes(bytes)?, n, k),
            Int8Format::Q8_0 => Self::pack_q8_0(BlockQ8_0::slice_from_bytes(bytes)?, n, k),
        }
    }

    /// The source block format.
    pub fn format(&self) -> Int8Format {
        self.format
    }
    /// Output features (weight rows).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Reduction length.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Blocks per row, `K/32`.
    pub fn blocks(&self) -> usize {
        self.k / QK
    }
    /// 16-row groups, `ceil(N/16)`.
    pub fn groups(&self) -> usize {
        self.n.div_ceil(INT8_GROUP)
    }
    /// Bytes the packed weight occupies (quants + scales).
    pub fn packed_bytes(&self) -> usize {
        self.quants.len() * 64 + self.scales.len() * 2
    }

    /// `u` of (row `r`, element `i`), read back from the packed layout (`None` out of range).
    pub fn u_at(&self, r: usize, i: usize) -> Option<u8> {
        if r >= self.n || i >= self.k {
            return None;
        }
        let (g, j, b, kk) = (r / INT8_GROUP, r % INT8_GROUP, i / QK, i % QK);
        let base = (g * self.blocks() + b) * self.format.quant_bytes();
        let bytes = self.quant_bytes();
        Some(match self.format {
            Int8Format::Q8_0 => bytes[base + kk / 4 * 64 + 4 * j + kk % 4],
            _ => {
                let (hi, st) = (kk / 16, kk % 16);
                (bytes[base + st / 4 * 64 + 4 * j + st % 4] >> (4 * hi)) & 15
            }
        })
    }

    /// `(d_w, m_w)` of (row `r`, block `b`) as f32 (`m_w` derived for Q4_0 / Q8_0).
    pub fn scale_at(&self, r: usize, b: usize) -> Option<(f32, f32)> {
        if r >= self.n || b >= self.blocks() {
            return None;
        }
        let (g, j) = (r / INT8_GROUP, r % INT8_GROUP);
        let base = (g * self.blocks() + b) * self.format.scale_words();
        let d = f16(self.scales[base + j]);
        let m = match self.format {
            Int8Format::Q4_1 => f16(self.scales[base + INT8_GROUP + j]),
            f => f.offset() as f32 * d,
        };
        Some((d, m))
    }
}

#[inline]
fn f16(x: u16) -> f32 {
    half::f16::from_bits(x).to_f32()
}

/// Per (activation row, block) quantization record, 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockMeta {
    /// Block scale `d_x = amax / 127` (0 for an all-zero block).
    pub d: f32,
    /// `d_x · Σq_x` (used by Q4_1's offset term).
    pub s: f32,
    /// `-8 Σq_x` (Q4_0's folded offset).
    pub n8: i32,
    /// `-128 Σq_x` (Q8_0's folded offset).
    pub n128: i32,
}

const _: () = assert!(core::mem::size_of::<BlockMeta>() == 16);

/// Quantized activations: caller-owned scratch, sized once with [`QActs::with_capacity`];
/// [`quantize_acts`] refills it without allocating.
#[derive(Debug, Clone, Default)]
pub struct QActs {
    m: usize,
    k: usize,
    q: Vec<i8>,
    meta: Vec<BlockMeta>,
}

/// Bytes of scratch [`QActs`] needs for `m` rows of `k` (`k` a multiple of 32): `m·k` bytes of
/// `q_x` plus 16 bytes per block. `None` on overflow.
pub fn quantize_acts_len(m: usize, k: usize) -> Option<usize> {
    let q = m.checked_mul(k)?;
    let meta = q
        .checked_div(QK)?
        .checked_mul(core::mem::size_of::<BlockMeta>())?;
    q.checked_add(meta)
}

impl QActs {
    /// Scratch for up to `m` rows of `k` columns, or any shape with `m·k` no larger (allocates
    /// once).
    pub fn with_capacity(m: usize, k: usize) -> Self {
        let e = m.saturating_mul(k);
        Self {
            m: 0,
            k: 0,
            q: vec![0; e],
            meta: vec![BlockMeta::default(); e / QK],
        }
    }
    /// Rows held by the last quantization.
    pub fn m(&self) -> usize {
        self.m
    }
    /// Columns of the last quantization.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Elements the scratch can hold (`m·k`).
    pub fn capacity(&self) -> usize {
        self.q.len().min(self.meta.len() * QK)
    }
    /// `q_x` of row `r` (`k` values).
    pub fn q_row(&self, r: usize) -> &[i8] {
        if r >= self.m {
            return &[];
        }
        &self.q[r * self.k..(r + 1) * self.k]
    }
    /// Block records of row `r` (`k/32`).
    pub fn meta_row(&self, r: usize) -> &[BlockMeta] {
        let nb = self.k / QK;
        if r >= self.m {
            return &[];
        }
        &self.meta[r * nb..(r + 1) * nb]
    }
}

/// Checks `x`/`m`/`k` against `acts`' capacity; on success sets the shape (nothing else written).
fn prepare_acts(x: &[f32], m: usize, k: usize, acts: &mut QActs) -> Result<(), Error> {
    if !k.is_multiple_of(QK) {
        return Err(Error::ShapeMismatch {
            what: "K modulo 32",
            expected: 0,
            got: k % QK,
        });
    }
    let e = m.checked_mul(k).ok_or(Error::Overflow)?;
    if x.len() < e {
        return Err(Error::BufferTooSmall {
            what: "x",
            needed: e,
            got: x.len(),
        });
    }
    if acts.capacity() < e {
        return Err(Error::BufferTooSmall {
            what: "QActs capacity (elements)",
            needed: e,
            got: acts.capacity(),
        });
    }
    acts.m = m;
    acts.k = k;
    Ok(())
}

/// Portable quantization of one 32-element block (the definition the vector one matches bit for
/// bit): `d = amax/127`, `inv = 1/d`, `q = clamp(round_ties_even(x·inv), -127, 127)`.
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> BlockMeta {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (qj, &v) in q.iter_mut().zip(x) {
        let qv = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i32;
        *qj = qv as i8;
        sum += qv;
    }
    BlockMeta {
        d,
        s: d * sum as f32,
        n8: -8 * sum,
        n128: -128 * sum,
    }
}

/// One implementation of the int8 kernels, carrying the capability token that proves the CPU
/// can run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Int8Kernel {
    /// Plain Rust: the same integers and the same f32 operation order as the vector kernels
    /// (the oracle).
    Portable,
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
            Int8Kernel::Portable => None,
        }
    }

    /// Quantizes `x` (`m` rows of `k`, row-major, stride `k`; `k` a multiple of 32) into `acts`.
    /// No allocation: errors if `acts` is too small (nothing written then).
    pub fn quantize_acts(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        acts: &mut QActs,
    ) -> Result<(), Error> {
        prepare_acts(x, m, k, acts)?;
        let nb = k / QK;
        #[cfg(target_arch = "x86_64")]
        let vector = self.vnni();
        #[cfg(not(target_arch = "x86_64"))]
        let vector: Option<()> = None;
        match vector {
            #[cfg(target_arch = "x86_64")]
            Some(t) => {
                // SAFETY: prepare_acts checked x.len() >= m*k and the capacity of q (m*k) and
                // meta (m*k/32).
                unsafe {
                    t.quantize(
                        x.as_ptr(),
                        m * nb,
                        acts.q.as_mut_ptr(),
                        acts.meta.as_mut_ptr(),
                    )
                }
            }
            _ => {
                for blk in 0..m * nb {
                    let r = blk * QK..(blk + 1) * QK;
                    acts.meta[blk] = quantize_block(&x[r.clone()], &mut acts.q[r]);
                }
            }
        }
        Ok(())
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
    /// `ctx` validated; `r0 + rows <= ctx.m`; `g0 <= g1 <= groups`; exclusive access to that
    /// region of y.
    unsafe fn tile(&self, ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: forwarded; the token proves the CPU features.
            Int8Kernel::Vnni(t) => unsafe { t.tile(ctx, r0, rows, g0, g1) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: forwarded (rows <= tile_rows() by the plan); the token proves AMX.
            Int8Kernel::Amx(t) => unsafe { t.tile(ctx, r0, rows, g0, g1) },
            // SAFETY: forwarded.
            _ => unsafe { tile_portable(ctx, r0, rows, g0, g1) },
        }
    }
}

/// Quantizes `x` into `acts` with the best implementation (see [`Int8Kernel::quantize_acts`]).
pub fn quantize_acts(x: &[f32], m: usize, k: usize, acts: &mut QActs) -> Result<(), Error> {
    Int8Kernel::best().quantize_acts(x, m, k, acts)
}

/// `y[M×N] = A·Wᵀ` on the best implementation, single-threaded (see [`Int8Plan`] for threads).
pub fn int8_gemm(w: &Int8Weight, acts: &QActs, y: &mut [f32], ldy: usize) -> Result<(), Error> {
    Int8Kernel::best().gemm(w, acts, y, ldy)
}

/// A validated call as raw pointers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub format: Int8Format,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub nb: usize,
    /// Packed `u` bytes (64-byte aligned).
    pub u: *const u8,
    /// Packed FP16 scale words.
    pub s: *const u16,
    /// `q_x`, row stride `k`.
    pub q: *const i8,
    /// Block records, row stride `nb`.
    pub meta: *const BlockMeta,
    pub y: *mut f32,
    pub ldy: usize,
}

/// Portable tile: the definition of the result.
///
/// # Safety
/// As [`Int8Kernel::tile`].
unsafe fn tile_portable(ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
    let (nb, f) = (ctx.nb, ctx.format);
    let (qb, sw) = (f.quant_bytes(), f.scale_words());
    for g in g0..g1 {
        let lanes = (ctx.n - g * INT8_GROUP).min(INT8_GROUP);
        for r in r0..r0 + rows {
            let mut acc = [0f32; INT8_GROUP];
            for b in 0..nb {
                // SAFETY: r < m, b < nb: inside the validated m*nb records / m*k bytes; g < ng,
                // b < nb: inside the packed weight.
                let (meta, xq, ub, sc) = unsafe {
                    (
                        *ctx.meta.add(r * nb + b),
                        core::slice::from_raw_parts(ctx.q.add(r * ctx.k + b * QK), QK),
                        core::slice::from_raw_parts(ctx.u.add((g * nb + b) * qb), qb),
                        core::slice::from_raw_parts(ctx.s.add((g * nb + b) * sw), sw),
                    )
                };
                let init = match f {
                    Int8Format::Q4_0 => meta.n8,
                    Int8Format::Q4_1 => 0,
                    Int8Format::Q8_0 => meta.n128,
                };
                for (j, a) in acc.iter_mut().enumerate() {
                    let mut isum = init;
                    for (kk, &xv) in xq.iter().enumerate() {
                        let u = match f {
                            Int8Format::Q8_0 => ub[kk / 4 * 64 + 4 * j + kk % 4],
                            _ => {
                                let (hi, st) = (kk / 16, kk % 16);
                                (ub[st / 4 * 64 + 4 * j + st % 4] >> (4 * hi)) & 15
                            }
                        };
                        isum += i32::from(u) * i32::from(xv);
                    }
                    let dw = f16(sc[j]);
                    *a = (isum as f32).mul_add(dw * meta.d, *a);
                    if f == Int8Format::Q4_1 {
                        *a = f16(sc[INT8_GROUP + j]).mul_add(meta.s, *a);
                    }
                }
            }
            for (j, &a) in acc[..lanes].iter().enumerate() {
                // SAFETY: r < m and g*16 + j < n: inside y (validated), exclusive per caller.
                unsafe { *ctx.y.add(r * ctx.ldy + g * INT8_GROUP + j) = a };
            }
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
    _b: core::marker::PhantomData<(&'a Int8Weight, &'a QActs, &'a mut [f32])>,
}

// SAFETY: raw pointers come from shared borrows (weight, acts: read only) and one exclusive
// borrow of y held for the plan's lifetime; each tile index is claimed once and tiles write
// disjoint regions of y.
unsafe impl Sync for Int8Plan<'_> {}
// SAFETY: as above.
unsafe impl Send for Int8Plan<'_> {}

impl<'a> Int8Plan<'a> {
    /// Validates the call; nothing is written yet.
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
        if acts.k != w.k {
            return Err(Error::ShapeMismatch {
                what: "K of the activations vs the weight",
                expected: w.k,
                got: acts.k,
            });
        }
        let (m, n) = (acts.m, w.n);
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
                format: w.format,
                m,
                n,
                k: w.k,
                nb: w.k / QK,
                u: w.quants.as_ptr().cast(),
                s: w.scales.as_ptr(),
                q: acts.q.as_ptr(),
                meta: acts.meta.as_ptr(),
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
    unsafe fn run_tile(&self, t: usize) {
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
