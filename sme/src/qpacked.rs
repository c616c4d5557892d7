//! The packed quantized format of the decode GEMV: GGUF weights re-laid out once at load time so
//! that one 512-bit lane is one weight row (16 rows per group), for every type the GEMV
//! computes: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (layout in the crate README,
//! "Packed quantized format"); the portable kernel (the reference for the vector ones) and the
//! plan that runs any kernel over the work-stealing driver.

use crate::blocks::{BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, QK_K};
use crate::portable::f16_to_f32;
use crate::quant::{
    BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock, GEMV_MAX_ROWS, GEMV_TILE_ROWS, QK,
};
use crate::{Error, GgmlType, Kernel};

/// Weight rows interleaved per group of the packed quantized format: one 512-bit lane per row.
pub const QPACK_ROWS: usize = 16;
/// The version of the packed quantized format [`qpack_gguf`] writes. Anything that keeps packed
/// bytes between runs (a prepared-weights cache) keys on it; bump it whenever the layout
/// changes.
pub const QPACK_LAYOUT_VERSION: u32 = 1;

/// The packed layouts (kernel-internal dispatch), one per GGUF type the GEMV computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum QFmt {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl QFmt {
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
    fn ty(self) -> GgmlType {
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
    /// Values per block (the unit of the scale region): 32, or 256 for the K-quants.
    pub(crate) const fn block(self) -> usize {
        match self {
            Self::Q4K | Self::Q5K | Self::Q6K => QK_K,
            _ => QK,
        }
    }
    /// Quant bytes of one 32-value chunk of 16 rows: Q8_0 32 × 16 bytes; the others four
    /// nibble vectors, plus a bit-4 vector (5-bit types) or two bits-4..5 vectors (Q6_K).
    pub(crate) const fn chunk_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 512,
            Self::Q5_0 | Self::Q5_1 | Self::Q5K => 320,
            Self::Q6K => 384,
            Self::Q4_0 | Self::Q4_1 | Self::Q4K => 256,
        }
    }
    /// Quant bytes of one block of 16 rows.
    pub(crate) const fn data_bytes(self) -> usize {
        self.chunk_bytes() * (self.block() / QK)
    }
    /// Scale bytes of one block of 16 rows: FP16 `d` ×16 (then `m` ×16 for Q4_1/Q5_1); Q4_K /
    /// Q5_K: `d` ×16, `dmin` ×16, then the 6-bit scales and minimums as bytes (sub-block j of
    /// row r at `64 + 16j + r` and `192 + 16j + r`); Q6_K: `d` ×16, then the i8 scales
    /// (`32 + 16j + r`).
    pub(crate) const fn scale_bytes(self) -> usize {
        match self {
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 => 32,
            Self::Q4_1 | Self::Q5_1 => 64,
            Self::Q4K | Self::Q5K => 320,
            Self::Q6K => 288,
        }
    }
}

/// Bytes of one 16-row group of a packed weight with `k` values per row: the quant region
/// (`k/block · data_bytes`) then the scale region (`k/block · scale_bytes`, rounded up to 64
/// bytes so every group starts on the same alignment as the buffer).
fn group_bytes(f: QFmt, k: usize) -> Result<usize, Error> {
    let nb = k / f.block();
    let data = nb.checked_mul(f.data_bytes()).ok_or(Error::Overflow)?;
    let sc = nb
        .checked_mul(f.scale_bytes())
        .and_then(|s| s.checked_next_multiple_of(64))
        .ok_or(Error::Overflow)?;
    data.checked_add(sc).ok_or(Error::Overflow)
}

fn check_k(f: QFmt, k: usize) -> Result<(), Error> {
    if !k.is_multiple_of(f.block()) {
        return Err(Error::ShapeMismatch {
            what: if f.block() == QK {
                "K modulo 32"
            } else {
                "K modulo 256"
            },
            expected: 0,
            got: k % f.block(),
        });
    }
    Ok(())
}

/// Bytes a packed weight of `n` rows (outputs) × `k` inputs of type `ty` takes: `ceil(n/16)`
/// groups (about GGUF's bytes per value, rows padded to 16). Types: Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0 (K a multiple of 32), Q4_K, Q5_K, Q6_K (K a multiple of 256); others →
/// [`Error::UnsupportedFormat`].
pub fn qpacked_len(ty: GgmlType, k: usize, n: usize) -> Result<usize, Error> {
    let f = QFmt::of(ty)?;
    check_k(f, k)?;
    n.div_ceil(QPACK_ROWS)
        .checked_mul(group_bytes(f, k)?)
        .ok_or(Error::Overflow)
}

/// A packed quantized weight (see the crate README, "Packed quantized format"): `n` rows of `k`
/// values, re-laid out by [`qpack_gguf`] (or [`crate::pack_q4_0`] and its siblings).
#[derive(Debug, Clone, Copy)]
pub struct QPackedRef<'a> {
    data: &'a [u8],
    fmt: QFmt,
    k: usize,
    n: usize,
}

impl<'a> QPackedRef<'a> {
    /// Views `data` as a packed weight of `n` rows × `k` values of type `ty` (`data` at least
    /// [`qpacked_len`] bytes). Any alignment works; 64 bytes is fastest.
    pub fn new(data: &'a [u8], ty: GgmlType, k: usize, n: usize) -> Result<Self, Error> {
        let need = qpacked_len(ty, k, n)?;
        if data.len() < need {
            return Err(Error::BufferTooSmall {
                what: "packed quantized weight",
                needed: need,
                got: data.len(),
            });
        }
        Ok(Self {
            data,
            fmt: QFmt::of(ty)?,
            k,
            n,
        })
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
    pub fn ty(&self) -> GgmlType {
        self.fmt.ty()
    }
}

/// Source block access for the packers: each element's unsigned quant `u` (Q8_0: the i8 bits)
/// and the block's scales for one row of a group.
pub(crate) trait PackSrc: QuantBlock {
    const FMT: QFmt;
    fn u(&self, e: usize) -> u8;
    /// Writes this block's scales for row `r` of the group into the block's scale region.
    fn put_scales(&self, s: &mut [u8], r: usize);
}

fn put16(s: &mut [u8], at: usize, v: u16) {
    s[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

impl PackSrc for BlockQ4_0 {
    const FMT: QFmt = QFmt::Q4_0;
    fn u(&self, e: usize) -> u8 {
        (self.qs[e % 16] >> (4 * (e / 16))) & 15
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put16(s, 2 * r, self.d);
    }
}

impl PackSrc for BlockQ4_1 {
    const FMT: QFmt = QFmt::Q4_1;
    fn u(&self, e: usize) -> u8 {
        (self.qs[e % 16] >> (4 * (e / 16))) & 15
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put16(s, 2 * r, self.d);
        put16(s, 32 + 2 * r, self.m);
    }
}

impl PackSrc for BlockQ5_0 {
    const FMT: QFmt = QFmt::Q5_0;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put16(s, 2 * r, self.d);
    }
}

impl PackSrc for BlockQ5_1 {
    const FMT: QFmt = QFmt::Q5_1;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put16(s, 2 * r, self.d);
        put16(s, 32 + 2 * r, self.m);
    }
}

impl PackSrc for BlockQ8_0 {
    const FMT: QFmt = QFmt::Q8_0;
    fn u(&self, e: usize) -> u8 {
        self.qs[e] as u8
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put16(s, 2 * r, self.d);
    }
}

fn put_k4(d: u16, dmin: u16, scales: &[u8; 12], s: &mut [u8], r: usize) {
    put16(s, 2 * r, d);
    put16(s, 32 + 2 * r, dmin);
    for j in 0..8 {
        let (sc, m) = crate::blocks::scale_min_k4(j, scales);
        s[64 + 16 * j + r] = sc;
        s[192 + 16 * j + r] = m;
    }
}

impl PackSrc for BlockQ4K {
    const FMT: QFmt = QFmt::Q4K;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put_k4(self.d, self.dmin, &self.scales, s, r);
    }
}

impl PackSrc for BlockQ5K {
    const FMT: QFmt = QFmt::Q5K;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put_k4(self.d, self.dmin, &self.scales, s, r);
    }
}

impl PackSrc for BlockQ6K {
    const FMT: QFmt = QFmt::Q6K;
    fn u(&self, e: usize) -> u8 {
        self.q(e)
    }
    fn put_scales(&self, s: &mut [u8], r: usize) {
        put16(s, 2 * r, self.d);
        for j in 0..16 {
            s[32 + 16 * j + r] = self.scales[j] as u8;
        }
    }
}

/// Writes `u` of element `e` (0..32) of row `r` into one 32-value chunk `cd` of a group: nibble
/// vector `e/8` holds it at bits `4p..4p+4` of lane r's dword (p = e % 8); bit 4 goes to bit e of
/// lane r's dword in the plane after the nibbles (5-bit types); bits 4..5 to bits `2t..2t+2` of
/// lane r's dword in plane `e/16` (Q6_K, t = e % 16); Q8_0 bytes at `16e + r`.
fn put_chunk(f: QFmt, cd: &mut [u8], r: usize, e: usize, u: u8) {
    if f == QFmt::Q8_0 {
        cd[e * 16 + r] = u;
        return;
    }
    let (j, p) = (e / 8, e % 8);
    cd[j * 64 + r * 4 + p / 2] |= (u & 15) << (4 * (p % 2));
    match f {
        QFmt::Q5_0 | QFmt::Q5_1 | QFmt::Q5K => {
            cd[256 + r * 4 + e / 8] |= ((u >> 4) & 1) << (e % 8);
        }
        QFmt::Q6K => {
            let (h, t) = (e / 16, e % 16);
            cd[256 + 64 * h + r * 4 + t / 4] |= ((u >> 4) & 3) << (2 * (t % 4));
        }
        _ => {}
    }
}

fn pack_generic<B: PackSrc>(
    src: &[B],
    k: usize,
    n: usize,
    rows: core::ops::Range<usize>,
    dst: &mut [u8],
) -> Result<(), Error> {
    let f = B::FMT;
    check_k(f, k)?;
    let nb = k / f.block();
    let need_src = n.checked_mul(nb).ok_or(Error::Overflow)?;
    if src.len() != need_src {
        return Err(Error::ShapeMismatch {
            what: "source blocks (N * K / block)",
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
    let need = qpacked_len(f.ty(), k, rn)?;
    if dst.len() < need {
        return Err(Error::BufferTooSmall {
            what: "packed quantized weight",
            needed: need,
            got: dst.len(),
        });
    }
    let gb = group_bytes(f, k)?;
    let (db, sb, cb) = (f.data_bytes(), f.scale_bytes(), f.chunk_bytes());
    let dst = &mut dst[..need];
    dst.fill(0);
    for (gi, g) in dst.chunks_exact_mut(gb).enumerate() {
        let (data, scales) = g.split_at_mut(nb * db);
        for r in 0..QPACK_ROWS.min(rn - gi * QPACK_ROWS) {
            let row = rows.start + gi * QPACK_ROWS + r;
            for (b, blk) in src[row * nb..(row + 1) * nb].iter().enumerate() {
                let bd = &mut data[b * db..(b + 1) * db];
                for e in 0..f.block() {
                    put_chunk(f, &mut bd[e / QK * cb..][..cb], r, e % QK, blk.u(e));
                }
                blk.put_scales(&mut scales[b * sb..(b + 1) * sb], r);
            }
        }
    }
    Ok(())
}

/// Packs rows `rows` of a GGUF weight of type `ty` (`bytes`: `n` rows of `k` values as the file
/// stores them, 2-byte aligned) into `dst` (at least [`qpacked_len`]`(ty, k, rows.len())`
/// bytes; the shard is a packed weight of `rows.len()` rows on its own). A load-time step: it
/// is not fast. On error nothing is written.
pub fn qpack_gguf(
    ty: GgmlType,
    bytes: &[u8],
    k: usize,
    n: usize,
    rows: core::ops::Range<usize>,
    dst: &mut [u8],
) -> Result<(), Error> {
    fn go<B: PackSrc>(
        b: &[u8],
        k: usize,
        n: usize,
        rows: core::ops::Range<usize>,
        dst: &mut [u8],
    ) -> Result<(), Error> {
        pack_generic(B::slice_from_bytes(b)?, k, n, rows, dst)
    }
    match QFmt::of(ty)? {
        QFmt::Q4_0 => go::<BlockQ4_0>(bytes, k, n, rows, dst),
        QFmt::Q4_1 => go::<BlockQ4_1>(bytes, k, n, rows, dst),
        QFmt::Q5_0 => go::<BlockQ5_0>(bytes, k, n, rows, dst),
        QFmt::Q5_1 => go::<BlockQ5_1>(bytes, k, n, rows, dst),
        QFmt::Q8_0 => go::<BlockQ8_0>(bytes, k, n, rows, dst),
        QFmt::Q4K => go::<BlockQ4K>(bytes, k, n, rows, dst),
        QFmt::Q5K => go::<BlockQ5K>(bytes, k, n, rows, dst),
        QFmt::Q6K => go::<BlockQ6K>(bytes, k, n, rows, dst),
    }
}

/// Packs rows `rows` of a GGUF Q4_0 weight (`src`: `n` rows of `k/32` blocks) into `dst`
/// (as [`qpack_gguf`], from typed blocks).
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

/// A validated GEMV on a packed weight (pointers from the borrows of [`QPackedPlan`]'s inputs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PCtx {
    pub x: *const f32,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub fmt: QFmt,
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
            .wrapping_add(self.k / self.fmt.block() * self.fmt.data_bytes())
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
        fmt: w.fmt,
        w: w.data.as_ptr(),
        gb: group_bytes(w.fmt, k)?,
        // The output's exclusive claim: kernels write through it.
        y: y.ptr,
        ldy,
    })
}

/// `u` of element `e` (0..32) of row `r` in one packed chunk (the inverse of [`put_chunk`]).
fn get_chunk(f: QFmt, cd: &[u8], r: usize, e: usize) -> u8 {
    if f == QFmt::Q8_0 {
        return cd[e * 16 + r];
    }
    let (j, p) = (e / 8, e % 8);
    let lo = (cd[j * 64 + r * 4 + p / 2] >> (4 * (p % 2))) & 15;
    let hi = match f {
        QFmt::Q5_0 | QFmt::Q5_1 | QFmt::Q5K => (cd[256 + r * 4 + e / 8] >> (e % 8)) & 1,
        QFmt::Q6K => {
            let (h, t) = (e / 16, e % 16);
            (cd[256 + 64 * h + r * 4 + t / 4] >> (2 * (t % 4))) & 3
        }
        _ => 0,
    };
    lo | hi << 4
}

fn f16_at(s: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([s[at], s[at + 1]]))
}

/// Portable GEMV on packed groups `g0..g1` (the reference for the packed format): per row and
/// sub-block (32 values; 16 for Q6_K) `dot = Σ (u + c)·x` in FP32 (`c` = −8 / −16 / −32 / 0),
/// then `acc += dot·scale` and, for the affine forms, `acc += offset·Σx` (Q4_1 / Q5_1: `m`;
/// Q4_K / Q5_K: `−dmin·m_j`); Q8_0 `u` is the i8 value.
///
/// # Safety
/// `ctx` validated; `g1 <= ceil(ctx.n / 16)`; exclusive access to y columns of those groups.
pub(crate) unsafe fn packed_groups_portable(ctx: &PCtx, g0: usize, g1: usize) {
    let f = ctx.fmt;
    let nb = ctx.k / f.block();
    let (db, sb, cb) = (f.data_bytes(), f.scale_bytes(), f.chunk_bytes());
    let sub = if f == QFmt::Q6K { 16 } else { QK };
    let c = match f {
        QFmt::Q4_0 => -8.0,
        QFmt::Q5_0 => -16.0,
        QFmt::Q6K => -32.0,
        _ => 0.0,
    };
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
                    let d = f16_at(s, 2 * r);
                    for j in 0..f.block() / sub {
                        let (mut dot, mut sx) = (0f32, 0f32);
                        for l in 0..sub {
                            let e = j * sub + l;
                            let u = get_chunk(f, &bd[e / QK * cb..][..cb], r, e % QK);
                            let q = if f == QFmt::Q8_0 {
                                u as i8 as f32
                            } else {
                                u as f32 + c
                            };
                            dot += q * x[b * f.block() + e];
                            sx += x[b * f.block() + e];
                        }
                        match f {
                            QFmt::Q4_1 | QFmt::Q5_1 => {
                                acc += dot * d;
                                acc += f16_at(s, 32 + 2 * r) * sx;
                            }
                            QFmt::Q4K | QFmt::Q5K => {
                                acc += dot * (d * s[64 + 16 * j + r] as f32);
                                acc += -(f16_at(s, 32 + 2 * r) * s[192 + 16 * j + r] as f32) * sx;
                            }
                            QFmt::Q6K => acc += dot * (d * s[32 + 16 * j + r] as i8 as f32),
                            _ => acc += dot * d,
                        }
                    }
                }
                // SAFETY: (i, 16g + r) inside the validated y; the caller owns the column.
                unsafe { *ctx.y.add(i * ctx.ldy + g * QPACK_ROWS + r) = acc };
            }
        }
    }
}

/// A validated GEMV on a packed quantized weight, cut into tiles of [`GEMV_TILE_ROWS`] output
/// columns (four 16-row groups), run like [`crate::QGemvPlan`].
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
    pub(crate) unsafe fn run_tile(&self, t: usize) {
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
    /// implementation (those without a packed kernel for the weight's type use the portable
    /// one). On error nothing is written.
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

#[cfg(target_arch = "x86_64")]
#[path = "arch/x86_64/qgemv_hi.rs"]
mod qgemv_x86_hi;

#[cfg(target_arch = "aarch64")]
#[path = "arch/aarch64/qgemv.rs"]
mod qgemv_neon;
