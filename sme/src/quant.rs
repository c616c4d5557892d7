//! Decode GEMV on GGUF block-quantized weights (Q4_0, Q4_1, Q8_0).
//!
//! Layout: the weight of a matmul with K inputs and N outputs is N rows of `K/32` blocks (W^T
//! row-major), exactly as a GGUF file stores it. `y[m][n] = sum_k x[m][k] * W[n][k]`.

use crate::portable::f16_to_f32;
use crate::{Error, Kernel};

/// Values per block.
pub const QK: usize = 32;
/// Largest M a GEMV takes.
pub const GEMV_MAX_ROWS: usize = 16;

/// GGUF Q4_0: 32 values `(q - 8) * d`; low nibbles of `qs` are elements 0..15, high 16..31.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ4_0 {
    /// Scale, FP16 bits.
    pub d: u16,
    /// Packed 4-bit quants.
    pub qs: [u8; 16],
}

/// GGUF Q4_1: 32 values `q * d + m`; nibble order as Q4_0.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ4_1 {
    /// Scale, FP16 bits.
    pub d: u16,
    /// Offset, FP16 bits.
    pub m: u16,
    /// Packed 4-bit quants.
    pub qs: [u8; 16],
}

/// GGUF Q8_0: 32 values `q * d`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockQ8_0 {
    /// Scale, FP16 bits.
    pub d: u16,
    /// Signed 8-bit quants.
    pub qs: [i8; 32],
}

const _: () = assert!(core::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(core::mem::align_of::<BlockQ4_0>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ4_1>() == 20);
const _: () = assert!(core::mem::align_of::<BlockQ4_1>() == 2);
const _: () = assert!(core::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(core::mem::align_of::<BlockQ8_0>() == 2);

mod sealed {
    pub trait Sealed {}
}

/// A GGUF block type: plain old data of `BYTES` bytes with 2-byte alignment.
pub trait QuantBlock: sealed::Sealed + Copy + Sized + 'static {
    /// Size of one block in bytes, as stored in GGUF.
    const BYTES: usize;
    /// The GGUF type name.
    const NAME: &'static str;
    /// The 32 values of this block, in FP32.
    fn dequantize(&self) -> [f32; QK];
    /// Copies one block out of `bytes` (exactly [`Self::BYTES`] long, any alignment).
    fn read_unaligned(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() != Self::BYTES {
            return Err(Error::ShapeMismatch {
                what: "block bytes",
                expected: Self::BYTES,
                got: bytes.len(),
            });
        }
        // SAFETY: the block types are repr(C) structs of u16/u8/i8 fields with no padding (sizes
        // asserted above), so every bit pattern is a valid value; `bytes` holds exactly
        // `size_of::<Self>()` bytes (checked) and `read_unaligned` needs no alignment.
        Ok(unsafe { core::ptr::read_unaligned(bytes.as_ptr() as *const Self) })
    }

    /// Reinterprets GGUF bytes as blocks. `bytes` must be 2-byte aligned and a whole number of
    /// blocks long.
    fn slice_from_bytes(bytes: &[u8]) -> Result<&[Self], Error> {
        if !(bytes.as_ptr() as usize).is_multiple_of(2) {
            return Err(Error::Misaligned {
                what: Self::NAME,
                align: 2,
            });
        }
        if !bytes.len().is_multiple_of(Self::BYTES) {
            return Err(Error::ShapeMismatch {
                what: "byte length modulo block size",
                expected: 0,
                got: bytes.len() % Self::BYTES,
            });
        }
        // SAFETY: the block types are repr(C) structs of u16/u8/i8 fields with no padding (size
        // asserted above) so every bit pattern is valid; the pointer is 2-aligned (checked) and
        // the length covers exactly len / BYTES blocks inside `bytes`, which the result borrows.
        Ok(unsafe {
            core::slice::from_raw_parts(bytes.as_ptr() as *const Self, bytes.len() / Self::BYTES)
        })
    }
}

impl sealed::Sealed for BlockQ4_0 {}
impl sealed::Sealed for BlockQ4_1 {}
impl sealed::Sealed for BlockQ8_0 {}

impl QuantBlock for BlockQ4_0 {
    const BYTES: usize = 18;
    const NAME: &'static str = "Q4_0";
    fn dequantize(&self) -> [f32; QK] {
        let d = f16_to_f32(self.d);
        let mut out = [0f32; QK];
        for (i, &b) in self.qs.iter().enumerate() {
            out[i] = ((b & 0xF) as i32 - 8) as f32 * d;
            out[i + 16] = ((b >> 4) as i32 - 8) as f32 * d;
        }
        out
    }
}

impl QuantBlock for BlockQ4_1 {
    const BYTES: usize = 20;
    const NAME: &'static str = "Q4_1";
    fn dequantize(&self) -> [f32; QK] {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        let mut out = [0f32; QK];
        for (i, &b) in self.qs.iter().enumerate() {
            out[i] = (b & 0xF) as f32 * d + m;
            out[i + 16] = (b >> 4) as f32 * d + m;
        }
        out
    }
}

impl QuantBlock for BlockQ8_0 {
    const BYTES: usize = 34;
    const NAME: &'static str = "Q8_0";
    fn dequantize(&self) -> [f32; QK] {
        let d = f16_to_f32(self.d);
        let mut out = [0f32; QK];
        for (o, &q) in out.iter_mut().zip(self.qs.iter()) {
            *o = q as f32 * d;
        }
        out
    }
}

/// The quantized weight of one GEMV.
#[derive(Debug, Clone, Copy)]
pub enum QWeights<'a> {
    /// Q4_0 blocks, N rows of K/32.
    Q4_0(&'a [BlockQ4_0]),
    /// Q4_1 blocks, N rows of K/32.
    Q4_1(&'a [BlockQ4_1]),
    /// Q8_0 blocks, N rows of K/32.
    Q8_0(&'a [BlockQ8_0]),
}

impl QWeights<'_> {
    fn blocks(&self) -> usize {
        match self {
            QWeights::Q4_0(w) => w.len(),
            QWeights::Q4_1(w) => w.len(),
            QWeights::Q8_0(w) => w.len(),
        }
    }
}

/// One quantized GEMV: `y[M×N] = x[M×K] · W^T`, x FP32 row-major (stride K), y FP32 row-major
/// (stride `ldy`), M ≤ 16, K a multiple of 32, N = blocks / (K/32).
#[derive(Debug, Clone, Copy)]
pub struct QGemv<'a> {
    /// Activations, M rows of K.
    pub x: &'a [f32],
    /// Rows of x and y (1..=16).
    pub m: usize,
    /// Reduction length, a multiple of 32.
    pub k: usize,
    /// The weight, N rows of K/32 blocks.
    pub w: QWeights<'a>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum WPtr {
    Q4_0(*const BlockQ4_0),
    Q4_1(*const BlockQ4_1),
    Q8_0(*const BlockQ8_0),
}

/// A validated quantized GEMV: x holds `m * k` floats, W holds `n * k/32` blocks, y holds `m`
/// rows of stride `ldy >= n`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QCtx {
    pub x: *const f32,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub w: WPtr,
    pub y: *mut f32,
    pub ldy: usize,
}

pub(crate) fn validate(g: &QGemv<'_>, y: &mut [f32], ldy: usize) -> Result<QCtx, Error> {
    if g.m > GEMV_MAX_ROWS {
        return Err(Error::TooManyRows {
            max: GEMV_MAX_ROWS,
            got: g.m,
        });
    }
    if !g.k.is_multiple_of(QK) {
        return Err(Error::ShapeMismatch {
            what: "K modulo 32",
            expected: 0,
            got: g.k % QK,
        });
    }
    let nb = g.k / QK;
    let blocks = g.w.blocks();
    let n = blocks.checked_div(nb).unwrap_or(0);
    if nb == 0 && blocks != 0 || nb != 0 && !blocks.is_multiple_of(nb) {
        return Err(Error::ShapeMismatch {
            what: "weight blocks modulo K/32",
            expected: 0,
            got: if nb == 0 { blocks } else { blocks % nb },
        });
    }
    let need_x = g.m.checked_mul(g.k).ok_or(Error::Overflow)?;
    if g.x.len() < need_x {
        return Err(Error::BufferTooSmall {
            what: "x",
            needed: need_x,
            got: g.x.len(),
        });
    }
    if g.m > 0 && ldy < n {
        return Err(Error::BadStride {
            what: "y",
            ld: ldy,
            min: n,
        });
    }
    let need_y = crate::gemm::need(g.m, ldy, n)?;
    if y.len() < need_y {
        return Err(Error::BufferTooSmall {
            what: "y",
            needed: need_y,
            got: y.len(),
        });
    }
    Ok(QCtx {
        x: g.x.as_ptr(),
        m: g.m,
        k: g.k,
        n,
        w: match g.w {
            QWeights::Q4_0(w) => WPtr::Q4_0(w.as_ptr()),
            QWeights::Q4_1(w) => WPtr::Q4_1(w.as_ptr()),
            QWeights::Q8_0(w) => WPtr::Q8_0(w.as_ptr()),
        },
        // Derived from the exclusive borrow: kernels write through it.
        y: y.as_mut_ptr(),
        ldy,
    })
}

/// Portable rows `n0..n1` of W.
///
/// # Safety
/// `n0 <= n1 <= ctx.n`; the caller has exclusive access to y columns `n0..n1`.
pub(crate) unsafe fn gemv_rows_portable(ctx: &QCtx, n0: usize, n1: usize) {
    // SAFETY: forwarded.
    unsafe {
        match ctx.w {
            WPtr::Q4_0(w) => rows_generic(ctx, w, n0, n1),
            WPtr::Q4_1(w) => rows_generic(ctx, w, n0, n1),
            WPtr::Q8_0(w) => rows_generic(ctx, w, n0, n1),
        }
    }
}

/// # Safety
/// As [`gemv_rows_portable`]; `w` is the validated block pointer of `ctx`.
unsafe fn rows_generic<B: QuantBlock>(ctx: &QCtx, w: *const B, n0: usize, n1: usize) {
    let nb = ctx.k / QK;
    for n in n0..n1 {
        let mut acc = [0f32; GEMV_MAX_ROWS];
        for b in 0..nb {
            // SAFETY: n < N and b < K/32 index inside the validated N*K/32 blocks.
            let v = unsafe { (*w.add(n * nb + b)).dequantize() };
            for (m, a) in acc[..ctx.m].iter_mut().enumerate() {
                // SAFETY: m < M, b*32+32 <= K: inside x.
                let x = unsafe { core::slice::from_raw_parts(ctx.x.add(m * ctx.k + b * QK), QK) };
                let mut s = 0f32;
                for i in 0..QK {
                    s += x[i] * v[i];
                }
                *a += s;
            }
        }
        for (m, &a) in acc[..ctx.m].iter().enumerate() {
            // SAFETY: m < M, n < N inside y; the caller owns column n.
            unsafe { *ctx.y.add(m * ctx.ldy + n) = a };
        }
    }
}

/// Output columns (weight rows) per tile of a parallel GEMV.
pub const GEMV_TILE_ROWS: usize = 64;

/// A validated quantized GEMV cut into tiles of 64 output columns, to be run by several threads
/// through [`crate::StealState`] (see [`crate::GemmPlan`] for the protocol).
#[derive(Debug)]
pub struct QGemvPlan<'a> {
    ctx: QCtx,
    kernel: Kernel,
    _y: core::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: raw pointers come from shared borrows (x, W: read only) and one exclusive borrow of y
// held for the plan's lifetime; each tile index is claimed once and tiles write disjoint columns.
unsafe impl Sync for QGemvPlan<'_> {}
// SAFETY: as above.
unsafe impl Send for QGemvPlan<'_> {}

impl<'a> QGemvPlan<'a> {
    /// Validates the GEMV; nothing is written yet.
    pub fn new(kernel: Kernel, g: &QGemv<'a>, y: &'a mut [f32], ldy: usize) -> Result<Self, Error> {
        let ctx = validate(g, y, ldy)?;
        Ok(Self {
            ctx,
            kernel,
            _y: core::marker::PhantomData,
        })
    }
    /// Number of tiles, `ceil(N / 64)`.
    pub fn tiles(&self) -> usize {
        self.ctx.n.div_ceil(GEMV_TILE_ROWS)
    }
    /// # Safety
    /// Tile `t` must not run on two threads at once.
    unsafe fn run_tile(&self, t: usize) {
        if t >= self.tiles() {
            return;
        }
        let n0 = t * GEMV_TILE_ROWS;
        let n1 = (n0 + GEMV_TILE_ROWS).min(self.ctx.n);
        // SAFETY: n0 <= n1 <= n; exclusivity forwarded.
        unsafe { self.kernel.gemv_rows(&self.ctx, n0, n1) }
    }
    /// Runs every tile on the calling thread.
    pub fn run_all(&mut self) {
        for t in 0..self.tiles() {
            // SAFETY: `&mut self` excludes concurrent runs.
            unsafe { self.run_tile(t) }
        }
    }
    /// Runs this worker's share (see [`crate::GemmPlan::run_worker`]).
    pub fn run_worker(&self, state: &crate::StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles(), |t| {
            // SAFETY: each tile index is handed to exactly one claim.
            unsafe { self.run_tile(t) }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Load-time re-layout: the row-interleaved quantized format (`QPacked`).

/// Weight rows interleaved per group of the packed quantized format: one 512-bit lane per row.
pub const QPACK_ROWS: usize = 16;

/// The block type of a packed quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QType {
    /// GGUF Q4_0: `(q - 8) * d`.
    Q4_0,
    /// GGUF Q4_1: `q * d + m`.
    Q4_1,
    /// GGUF Q8_0: `q * d`, q signed 8-bit.
    Q8_0,
}

impl QType {
    /// Quant bytes of one 32-value block of 16 rows.
    pub(crate) const fn data_bytes(self) -> usize {
        match self {
            QType::Q4_0 | QType::Q4_1 => 256,
            QType::Q8_0 => 512,
        }
    }
    /// Scale (and minimum) bytes of one 32-value block of 16 rows.
    pub(crate) const fn scale_bytes(self) -> usize {
        match self {
            QType::Q4_0 | QType::Q8_0 => 32,
            QType::Q4_1 => 64,
        }
    }
}

/// Bytes of one 16-row group of a packed weight with `nb` blocks per row: the quant region
/// (`nb * data_bytes`) then the scale region (`nb * scale_bytes`, rounded up to 64 bytes so every
/// group starts on the same alignment as the buffer).
fn group_bytes(ty: QType, nb: usize) -> Result<usize, Error> {
    let data = nb.checked_mul(ty.data_bytes()).ok_or(Error::Overflow)?;
    let sc = nb
        .checked_mul(ty.scale_bytes())
        .and_then(|s| s.checked_next_multiple_of(64))
        .ok_or(Error::Overflow)?;
    data.checked_add(sc).ok_or(Error::Overflow)
}

fn check_k(k: usize) -> Result<usize, Error> {
    if !k.is_multiple_of(QK) {
        return Err(Error::ShapeMismatch {
            what: "K modulo 32",
            expected: 0,
            got: k % QK,
        });
    }
    Ok(k / QK)
}

/// Bytes a packed weight of `n` rows (outputs) × `k` inputs of type `ty` takes: `ceil(n/16)`
/// groups of `16 · k/32` blocks (the same bytes per value as GGUF, rows padded to 16).
pub fn qpacked_len(ty: QType, k: usize, n: usize) -> Result<usize, Error> {
    let nb = check_k(k)?;
    n.div_ceil(QPACK_ROWS)
        .checked_mul(group_bytes(ty, nb)?)
        .ok_or(Error::Overflow)
}

/// A packed quantized weight (see the crate README, "Packed quantized format"): `n` rows of `k`
/// values, re-laid out by [`pack_q4_0`] / [`pack_q4_1`] / [`pack_q8_0`].
#[derive(Debug, Clone, Copy)]
pub struct QPackedRef<'a> {
    data: &'a [u8],
    ty: QType,
    k: usize,
    n: usize,
}

impl<'a> QPackedRef<'a> {
    /// Views `data` as a packed weight of `n` rows × `k` values (`k` a multiple of 32, `data` at
    /// least [`qpacked_len`] bytes). Any alignment works; 64 bytes is fastest.
    pub fn new(data: &'a [u8], ty: QType, k: usize, n: usize) -> Result<Self, Error> {
        let need = qpacked_len(ty, k, n)?;
        if data.len() < need {
            return Err(Error::BufferTooSmall {
                what: "packed quantized weight",
                needed: need,
                got: data.len(),
            });
        }
        Ok(Self { data, ty, k, n })
    }
    /// Values per row (the GEMV's K).
    pub fn k(&self) -> usize {
        self.k
    }
    /// Rows (the GEMV's N).
    pub fn n(&self) -> usize {
        self.n
    }
    /// The block type.
    pub fn ty(&self) -> QType {
        self.ty
    }
}

/// Source block access for the packers.
pub(crate) trait PackSrc: QuantBlock {
    const TY: QType;
    /// Quant value of element `e` (0..32): a nibble for Q4, the i8 bits for Q8.
    fn q(&self, e: usize) -> u8;
    fn d_bits(&self) -> u16;
    fn m_bits(&self) -> u16 {
        0
    }
}

impl PackSrc for BlockQ4_0 {
    const TY: QType = QType::Q4_0;
    fn q(&self, e: usize) -> u8 {
        if e < 16 {
            self.qs[e] & 15
        } else {
            self.qs[e - 16] >> 4
        }
    }
    fn d_bits(&self) -> u16 {
        self.d
    }
}

impl PackSrc for BlockQ4_1 {
    const TY: QType = QType::Q4_1;
    fn q(&self, e: usize) -> u8 {
        if e < 16 {
            self.qs[e] & 15
        } else {
            self.qs[e - 16] >> 4
        }
    }
    fn d_bits(&self) -> u16 {
        self.d
    }
    fn m_bits(&self) -> u16 {
        self.m
    }
}

impl PackSrc for BlockQ8_0 {
    const TY: QType = QType::Q8_0;
    fn q(&self, e: usize) -> u8 {
        self.qs[e] as u8
    }
    fn d_bits(&self) -> u16 {
        self.d
    }
}

fn pack_generic<B: PackSrc>(
    src: &[B],
    k: usize,
    n: usize,
    rows: core::ops::Range<usize>,
    dst: &mut [u8],
) -> Result<(), Error> {
    let ty = B::TY;
    let nb = check_k(k)?;
    let need_src = n.checked_mul(nb).ok_or(Error::Overflow)?;
    if src.len() != need_src {
        return Err(Error::ShapeMismatch {
            what: "source blocks (N * K/32)",
            expected: need_src,
            got: src.len(),
        });
    }
    if rows.start > rows.end || rows.end > n {
        return Err(Error::BadRange {
            start: rows.start,
            end: rows.end,
            n,
        });
    }
    let rn = rows.end - rows.start;
    let need = qpacked_len(ty, k, rn)?;
    if dst.len() < need {
        return Err(Error::BufferTooSmall {
            what: "packed quantized weight",
            needed: need,
            got: dst.len(),
        });
    }
    let gb = group_bytes(ty, nb)?;
    let (db, sb) = (ty.data_bytes(), ty.scale_bytes());
    let dst = &mut dst[..need];
    dst.fill(0);
    for (gi, g) in dst.chunks_exact_mut(gb).enumerate() {
        let (data, scales) = g.split_at_mut(nb * db);
        for r in 0..QPACK_ROWS.min(rn - gi * QPACK_ROWS) {
            let row = rows.start + gi * QPACK_ROWS + r;
            for (b, blk) in src[row * nb..(row + 1) * nb].iter().enumerate() {
                let bd = &mut data[b * db..(b + 1) * db];
                match ty {
                    // Dword `j` of lane r holds elements 8j..8j+8, element 8j+p in bits 4p..4p+4.
                    QType::Q4_0 | QType::Q4_1 => {
                        for e in 0..QK {
                            let (j, p) = (e / 8, e % 8);
                            let byte = j * 64 + r * 4 + p / 2;
                            bd[byte] |= blk.q(e) << (4 * (p % 2));
                        }
                    }
                    // Element e of lane r at byte 16e + r.
                    QType::Q8_0 => {
                        for e in 0..QK {
                            bd[e * 16 + r] = blk.q(e);
                        }
                    }
                }
                let s = &mut scales[b * sb..(b + 1) * sb];
                s[2 * r..2 * r + 2].copy_from_slice(&blk.d_bits().to_le_bytes());
                if ty == QType::Q4_1 {
                    s[32 + 2 * r..34 + 2 * r].copy_from_slice(&blk.m_bits().to_le_bytes());
                }
            }
        }
    }
    Ok(())
}

/// Packs rows `rows` of a GGUF Q4_0 weight (`src`: `n` rows of `k/32` blocks) into `dst`
/// (at least [`qpacked_len`]`(QType::Q4_0, k, rows.len())` bytes; the shard is a packed weight
/// of `rows.len()` rows on its own). A load-time step: it is not fast. On error nothing is
/// written.
pub fn pack_q4_0(
    src: &[BlockQ4_0],
    k: usize,
    n: usize,
    rows: core::ops::Range<usize>,
    dst: &mut [u8],
) -> Result<(), Error> {
    pack_generic(src, k, n, rows, dst)
}

/// As [`pack_q4_0`] for Q4_1.
pub fn pack_q4_1(
    src: &[BlockQ4_1],
    k: usize,
    n: usize,
    rows: core::ops::Range<usize>,
    dst: &mut [u8],
) -> Result<(), Error> {
    pack_generic(src, k, n, rows, dst)
}

/// As [`pack_q4_0`] for Q8_0.
pub fn pack_q8_0(
    src: &[BlockQ8_0],
    k: usize,
    n: usize,
    rows: core::ops::Range<usize>,
    dst: &mut [u8],
) -> Result<(), Error> {
    pack_generic(src, k, n, rows, dst)
}

/// A validated GEMV on a packed weight (pointers from the borrows of [`QPackedGemv`]'s inputs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PCtx {
    pub x: *const f32,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub ty: QType,
    pub w: *const u8,
    /// Bytes per 16-row group.
    pub gb: usize,
    pub y: *mut f32,
    pub ldy: usize,
}

impl PCtx {
    /// Quant region of group `g`.
    pub fn data(&self, g: usize) -> *const u8 {
        self.w.wrapping_add(g * self.gb)
    }
    /// Scale region of group `g`.
    pub fn scales(&self, g: usize) -> *const u8 {
        self.data(g)
            .wrapping_add(self.k / QK * self.ty.data_bytes())
    }
}

pub(crate) fn validate_packed(
    x: &[f32],
    m: usize,
    k: usize,
    w: &QPackedRef<'_>,
    y: crate::OutMut<'_>,
    ldy: usize,
) -> Result<PCtx, Error> {
    if m > GEMV_MAX_ROWS {
        return Err(Error::TooManyRows {
            max: GEMV_MAX_ROWS,
            got: m,
        });
    }
    if k != w.k {
        return Err(Error::ShapeMismatch {
            what: "K of x vs K of the packed weight",
            expected: w.k,
            got: k,
        });
    }
    let n = w.n;
    let need_x = m.checked_mul(k).ok_or(Error::Overflow)?;
    if x.len() < need_x {
        return Err(Error::BufferTooSmall {
            what: "x",
            needed: need_x,
            got: x.len(),
        });
    }
    if m > 0 && ldy < n {
        return Err(Error::BadStride {
            what: "y",
            ld: ldy,
            min: n,
        });
    }
    let need_y = crate::gemm::need(m, ldy, n)?;
    if y.len() < need_y {
        return Err(Error::BufferTooSmall {
            what: "y",
            needed: need_y,
            got: y.len(),
        });
    }
    Ok(PCtx {
        x: x.as_ptr(),
        m,
        k,
        n,
        ty: w.ty,
        w: w.data.as_ptr(),
        gb: group_bytes(w.ty, k / QK)?,
        // The output's exclusive claim: kernels write through it.
        y: y.ptr,
        ldy,
    })
}

/// Portable GEMV on packed groups `g0..g1` (the reference for the packed format).
///
/// # Safety
/// `ctx` validated; `g1 <= ceil(ctx.n / 16)`; exclusive access to y columns of those groups.
pub(crate) unsafe fn packed_groups_portable(ctx: &PCtx, g0: usize, g1: usize) {
    let nb = ctx.k / QK;
    let (db, sb) = (ctx.ty.data_bytes(), ctx.ty.scale_bytes());
    for g in g0..g1 {
        let rows = (ctx.n - g * QPACK_ROWS).min(QPACK_ROWS);
        // SAFETY: group g < ceil(n/16) lies inside the validated buffer of qpacked_len bytes.
        let (data, scales) = unsafe {
            (
                core::slice::from_raw_parts(ctx.data(g), nb * db),
                core::slice::from_raw_parts(ctx.scales(g), nb * sb),
            )
        };
        for r in 0..rows {
            for i in 0..ctx.m {
                // SAFETY: row i < m of x, K values (validated).
                let x = unsafe { core::slice::from_raw_parts(ctx.x.add(i * ctx.k), ctx.k) };
                let mut acc = 0f32;
                for b in 0..nb {
                    let bd = &data[b * db..(b + 1) * db];
                    let s = &scales[b * sb..(b + 1) * sb];
                    let d = f16_to_f32(u16::from_le_bytes([s[2 * r], s[2 * r + 1]]));
                    let xb = &x[b * QK..(b + 1) * QK];
                    let mut dot = 0f32;
                    let mut sx = 0f32;
                    for (e, &xe) in xb.iter().enumerate() {
                        let q = match ctx.ty {
                            QType::Q4_0 => {
                                let (j, p) = (e / 8, e % 8);
                                ((bd[j * 64 + r * 4 + p / 2] >> (4 * (p % 2))) & 15) as f32 - 8.0
                            }
                            QType::Q4_1 => {
                                let (j, p) = (e / 8, e % 8);
                                ((bd[j * 64 + r * 4 + p / 2] >> (4 * (p % 2))) & 15) as f32
                            }
                            QType::Q8_0 => bd[e * 16 + r] as i8 as f32,
                        };
                        dot += q * xe;
                        sx += xe;
                    }
                    acc += dot * d;
                    if ctx.ty == QType::Q4_1 {
                        let mm = f16_to_f32(u16::from_le_bytes([s[32 + 2 * r], s[33 + 2 * r]]));
                        acc += mm * sx;
                    }
                }
                // SAFETY: (i, 16g + r) inside the validated y; the caller owns the column.
                unsafe { *ctx.y.add(i * ctx.ldy + g * QPACK_ROWS + r) = acc };
            }
        }
    }
}

/// A validated GEMV on a packed quantized weight, cut into tiles of [`GEMV_TILE_ROWS`] output
/// columns (four 16-row groups), run like [`QGemvPlan`].
#[derive(Debug)]
pub struct QPackedPlan<'a> {
    ctx: PCtx,
    kernel: Kernel,
    _y: core::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: as for QGemvPlan: x and W are read only, y is one exclusive borrow held for the plan's
// lifetime, each tile index is claimed once and tiles write disjoint columns.
unsafe impl Sync for QPackedPlan<'_> {}
// SAFETY: as above.
unsafe impl Send for QPackedPlan<'_> {}

impl<'a> QPackedPlan<'a> {
    /// Validates `y[M×N] = x[M×K] · Wᵀ` on the packed weight `w` (x FP32 row-major, stride K,
    /// M ≤ 16; y stride `ldy >= N`). Nothing is written yet.
    pub fn new(
        kernel: Kernel,
        x: &'a [f32],
        m: usize,
        k: usize,
        w: QPackedRef<'a>,
        y: &'a mut [f32],
        ldy: usize,
    ) -> Result<Self, Error> {
        Self::with_out(kernel, x, m, k, w, crate::OutMut::new(y), ldy)
    }

    /// As [`QPackedPlan::new`], writing through an [`crate::OutMut`] (e.g. some columns of a
    /// shared output).
    pub fn with_out(
        kernel: Kernel,
        x: &'a [f32],
        m: usize,
        k: usize,
        w: QPackedRef<'a>,
        y: crate::OutMut<'a>,
        ldy: usize,
    ) -> Result<Self, Error> {
        let ctx = validate_packed(x, m, k, &w, y, ldy)?;
        Ok(Self {
            ctx,
            kernel,
            _y: core::marker::PhantomData,
        })
    }
    /// Number of tiles, `ceil(N / 64)`.
    pub fn tiles(&self) -> usize {
        self.ctx.n.div_ceil(GEMV_TILE_ROWS)
    }
    /// # Safety
    /// Tile `t` must not run on two threads at once.
    unsafe fn run_tile(&self, t: usize) {
        let groups = self.ctx.n.div_ceil(QPACK_ROWS);
        let per = GEMV_TILE_ROWS / QPACK_ROWS;
        let g0 = t.saturating_mul(per).min(groups);
        let g1 = (g0 + per).min(groups);
        if g0 >= g1 || self.ctx.m == 0 {
            return;
        }
        // SAFETY: g0 < g1 <= groups; tile exclusivity forwarded; the token proves the features.
        unsafe {
            match self.kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512(_) => qgemv_x86::packed_groups(&self.ctx, g0, g1),
                #[cfg(target_arch = "aarch64")]
                Kernel::Neon(_) => qgemv_neon::packed_groups(&self.ctx, g0, g1),
                _ => packed_groups_portable(&self.ctx, g0, g1),
            }
        }
    }
    /// Runs every tile on the calling thread.
    pub fn run_all(&mut self) {
        for t in 0..self.tiles() {
            // SAFETY: `&mut self` excludes concurrent runs.
            unsafe { self.run_tile(t) }
        }
    }
    /// Runs this worker's share (see [`crate::GemmPlan::run_worker`]).
    pub fn run_worker(&self, state: &crate::StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles(), |t| {
            // SAFETY: each tile index is handed to exactly one claim.
            unsafe { self.run_tile(t) }
        })
    }
}

impl Kernel {
    /// Runs `y[M×N] = x[M×K] · Wᵀ` on a packed quantized weight, single-threaded, on this
    /// implementation (those without a packed kernel use the portable one). On error nothing is
    /// written.
    pub fn qgemv_packed(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        w: QPackedRef<'_>,
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        QPackedPlan::new(self, x, m, k, w, y, ldy)?.run_all();
        Ok(())
    }
}

/// `y[M×N] = x[M×K] · Wᵀ` on a packed quantized weight (`K = w.k()`, `N = w.n()`), on the best
/// implementation, single-threaded.
pub fn gemv_qpacked(
    x: &[f32],
    m: usize,
    w: QPackedRef<'_>,
    y: &mut [f32],
    ldy: usize,
) -> Result<(), Error> {
    Kernel::best_gemv().qgemv_packed(x, m, w.k(), w, y, ldy)
}

#[cfg(target_arch = "x86_64")]
#[path = "arch/x86_64/qgemv.rs"]
mod qgemv_x86;

#[cfg(target_arch = "aarch64")]
#[path = "arch/aarch64/qgemv.rs"]
mod qgemv_neon;
