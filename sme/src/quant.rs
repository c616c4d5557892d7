//! Decode GEMV on GGUF block-quantized weights (Q4_0, Q4_1, Q8_0) in the GGUF layout, and the
//! block types and trait every packer reads (the packed format is `qpacked.rs`).
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

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A GGUF block type: plain old data of `BYTES` bytes with 2-byte alignment.
pub trait QuantBlock: sealed::Sealed + Copy + Sized + 'static {
    /// Size of one block in bytes, as stored in GGUF.
    const BYTES: usize;
    /// Values per block: 32, or [`crate::QK_K`] = 256 for the K-quants.
    const ELEMS: usize;
    /// The element type this block stores.
    const TYPE: crate::GgmlType;
    /// The GGUF type name.
    const NAME: &'static str = Self::TYPE.name();
    /// The dequantized values: `[f32; ELEMS]`.
    type Values: AsRef<[f32]> + IntoIterator<Item = f32> + Copy;
    /// The values of this block in FP32, exactly as ggml defines them.
    fn dequantize(&self) -> Self::Values;
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
    const ELEMS: usize = QK;
    const TYPE: crate::GgmlType = crate::GgmlType::Q4_0;
    type Values = [f32; QK];
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
    const ELEMS: usize = QK;
    const TYPE: crate::GgmlType = crate::GgmlType::Q4_1;
    type Values = [f32; QK];
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
    const ELEMS: usize = QK;
    const TYPE: crate::GgmlType = crate::GgmlType::Q8_0;
    type Values = [f32; QK];
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
            let v = v.as_ref();
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
