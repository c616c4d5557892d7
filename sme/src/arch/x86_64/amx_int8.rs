//! AMX-INT8 GEMM on [`crate::Int8Weight`] × [`crate::QActs`] (see `src/int8.rs` for the format
//! and the arithmetic it must reproduce bit for bit).
//!
//! No second weight copy: the int8 weight's packed layout is already AMX tile order. Per (16-row
//! group, 32-k block) its `u` bytes are `vpdpbusd` operands — lane `j` = output `j`, its 4 bytes
//! = 4 consecutive k — which is exactly the layout of one row of an AMX B tile (16 output dwords
//! × 4 k bytes). Q8_0's 8 vectors are the 8 rows of a K = 32 B tile; Q4's 4 vectors hold rows
//! 0–3 in their low nibbles and rows 4–7 in their high nibbles.
//!
//! Per plan tile (up to [`AMX_INT8_TILE_ROWS`] activation rows × a few groups), per group and
//! pass of up to [`KCB`] blocks: the group's blocks are unpacked once into a stack buffer of
//! signed bytes `w = u + c` (`c` = -8 Q4_0, 0 Q4_1, -128 Q8_0: nibble split + `vpsubb`, or
//! `vpxord 0x80`), so that `tdpbssd` (signed × signed) yields the oracle's integer
//! `Σ u·q_x + c·Σq_x` directly, offset included. That buffer then serves every 16-row slice of
//! the tile. Per (slice, block): tile A = the slice's 16 rows × 32 `q_x` bytes straight from
//! `QActs` (stride K), tile B = the block's 8 × 64 unpacked bytes, `tilezero` C, one `tdpbssd`
//! (16 × 16 outputs × 32 k), `tilestored` C to a 1 KiB stack buffer; then the epilogue in
//! AVX-512, per slice row: `vcvtdq2ps` of the stored dwords, `vmulps` `d_w · d_x`, one FMA into
//! the row's f32 accumulator (Q4_1: one more FMA, `m_w · s_x`): the VNNI kernel's and the
//! oracle's f32 operations in the same order, so results are bit-identical to both. The 16
//! accumulators stay in zmm registers over the pass.
//!
//! Per-block integers are what forces K = 32 per `tdpbssd` (each block has its own scales), and
//! the epilogue (3 vector ops per 16 outputs per block, 4 for Q4_1) is the bound, not the tile
//! unit. The blocks are software-pipelined: a block's tile work (A and B loads, `tdpbssd`,
//! `tilestored`) is issued [`AmxInt8::lookahead`] blocks (default 3) before its epilogue, with A
//! and B alternating between two tiles each and C rotating over four tiles and four stack
//! buffers, so the tile latency and the store → vector-load round trip of one block hide behind
//! the epilogues of the blocks before it. (With one block of lookahead the kernel measured
//! 1.2-2.2× VNNI on the H200 host's Xeon at M = 128: it waited on that round trip.)
//!
//! Row chunks of at most [`AmxInt8::vnni_rows`] rows (default 8: decode and small batches) run
//! the VNNI micro-kernel instead: a 16-row tile for a few activation rows wastes the unpack and
//! the tile round trip. Both are bit-identical to the oracle, so mixing them keeps every row
//! batch-invariant.
//!
//! Formats to come (Q5_0/Q5_1 and the K-quants) slot in as another `unpack` (to signed bytes per
//! 32 k) plus their oracle's epilogue; sub-blocks of 16 (Q6_K) would use K = 16 tiles.
//!
//! The program is generic over [`TileOps`]: [`HwTiles`] issues the instructions; the crate's
//! unit tests run the same program through a software model of them (`src/amx_int8.rs`).

use core::arch::asm;
use core::arch::x86_64::*;

use super::amx::{cpuid7_edx, tile_data_granted, AMX_INT8_BIT};
use super::Vnni;
use crate::amx_int8::{TileConfig, TileOps};
use crate::int8::{Ctx, Int8Format, INT8_GROUP};
use crate::quant::QK;

/// Activation rows per plan tile of the AMX kernel: the unpacked weight of a group serves
/// `AMX_INT8_TILE_ROWS / 16` tile slices.
pub const AMX_INT8_TILE_ROWS: usize = 64;
/// Blocks per pass: the unpacked group (512 bytes per block) waits in a 32 KiB stack buffer.
const KCB: usize = 64;
/// Unpacked bytes per (group, block): 8 B-tile rows of 64 bytes.
const BLK: usize = 512;
/// Default rows at or below which a row chunk runs the VNNI kernel. Measured on the H200 host's
/// Xeon (`benches/h200-cpu/amx-int8-run2/amx-vs-vnni.txt`, one core): AMX for every chunk ran at
/// 0.2-0.6× VNNI for M ≤ 4 and 0.4-0.9× at M = 8 (Q4_1), about even at M = 16 and ahead from
/// M = 32 (Q4_0 / Q8_0 from M = 16).
const VNNI_ROWS: usize = 8;
/// Most blocks of tile work in flight ahead of the epilogue: 4 C tiles (one per block in flight
/// and the one being stored), A and B alternating between two tiles each — all 8 tiles.
const MAX_LOOKAHEAD: usize = 3;
/// Default lookahead.
const LOOKAHEAD: usize = 3;

/// Capability token: proves AMX-TILE + AMX-INT8, that Linux granted this process the tile-data
/// state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, requested once per process,
/// shared with [`super::Amx`]), and AVX-512F/BW/VNNI (the epilogue, the quantizer and small-M
/// row chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmxInt8 {
    vnni: Vnni,
    vnni_rows: usize,
    lookahead: usize,
}

impl AmxInt8 {
    /// `Some` when CPUID reports AMX-TILE and AMX-INT8, the OS grants the tile state and the
    /// CPU has AVX-512 VNNI. A refusal means `None` (the VNNI kernel), never a fault.
    pub fn try_new() -> Option<Self> {
        let vnni = Vnni::try_new()?;
        (cpuid7_edx() & AMX_INT8_BIT != 0 && tile_data_granted()).then_some(Self {
            vnni,
            vnni_rows: VNNI_ROWS,
            lookahead: LOOKAHEAD,
        })
    }

    /// # Safety
    /// The CPU must support AMX-TILE, AMX-INT8, AVX-512F/BW/VNNI, and this process must already
    /// hold the XTILEDATA permission (otherwise the first tile instruction faults).
    pub unsafe fn new_unchecked() -> Self {
        Self {
            // SAFETY: forwarded to the caller.
            vnni: unsafe { Vnni::new_unchecked() },
            vnni_rows: VNNI_ROWS,
            lookahead: LOOKAHEAD,
        }
    }

    /// The same token with row chunks of at most `rows` rows sent to the VNNI kernel (0: AMX
    /// for every chunk; default 8), for measuring the crossover.
    pub fn with_vnni_rows(self, rows: usize) -> Self {
        Self {
            vnni_rows: rows,
            ..self
        }
    }

    /// Row chunks of at most this many rows run the VNNI kernel.
    pub fn vnni_rows(self) -> usize {
        self.vnni_rows
    }

    /// The same token with the tile work issued `blocks` blocks ahead of the epilogue (1 to 3,
    /// clamped; default 3), for measuring the pipeline depth.
    pub fn with_lookahead(self, blocks: usize) -> Self {
        Self {
            lookahead: blocks.clamp(1, MAX_LOOKAHEAD),
            ..self
        }
    }

    /// Blocks of tile work in flight ahead of the epilogue.
    pub fn lookahead(self) -> usize {
        self.lookahead
    }

    /// The VNNI token this one implies (quantization and small row chunks).
    pub fn vnni(self) -> Vnni {
        self.vnni
    }

    /// # Safety
    /// As [`crate::Int8Kernel`]'s `tile`: `ctx` validated, `r0 + rows <= ctx.m`,
    /// `rows <= AMX_INT8_TILE_ROWS`, `g0 <= g1 <= ceil(n/16)`, exclusive access to that region
    /// of y.
    pub(crate) unsafe fn tile(self, ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
        if rows <= self.vnni_rows {
            // SAFETY: forwarded; the token implies VNNI.
            unsafe { self.vnni.tile(ctx, r0, rows, g0, g1) };
            return;
        }
        // SAFETY: forwarded; the token proves AMX-INT8, the tile-data grant and AVX-512.
        unsafe { tile_dispatch(&mut HwTiles, ctx, r0, rows, g0, g1, self.lookahead) }
    }
}

/// The real tile instructions (a zero-sized handle; the tile state is per thread).
pub(crate) struct HwTiles;

impl TileOps for HwTiles {
    #[inline(always)]
    unsafe fn configure(&mut self, cfg: &TileConfig) {
        // SAFETY: the caller guarantees a valid configuration and the OS grant; the operand is
        // 64 readable bytes.
        unsafe {
            asm!("ldtilecfg [{c}]", c = in(reg) cfg.0.as_ptr(), options(nostack, readonly));
        }
    }
    #[inline(always)]
    unsafe fn load<const T: u8>(&mut self, base: *const u8, stride: usize) {
        // SAFETY: the caller guarantees the configured rows × colsb bytes are readable.
        unsafe {
            asm!(
                "tileloadd tmm{t}, [{b} + {s}*1]",
                t = const T,
                b = in(reg) base,
                s = in(reg) stride,
                options(nostack, readonly),
            );
        }
    }
    #[inline(always)]
    unsafe fn zero<const T: u8>(&mut self) {
        // SAFETY: register-only; the tile is configured (caller).
        unsafe { asm!("tilezero tmm{t}", t = const T, options(nostack, nomem)) };
    }
    #[inline(always)]
    unsafe fn dpbssd<const C: u8, const A: u8, const B: u8>(&mut self) {
        // SAFETY: register-only; the caller configured legal shapes.
        unsafe {
            asm!(
                "tdpbssd tmm{c}, tmm{a}, tmm{b}",
                c = const C,
                a = const A,
                b = const B,
                options(nostack, nomem),
            );
        }
    }
    #[inline(always)]
    unsafe fn store<const T: u8>(&mut self, base: *mut u8, stride: usize) {
        // SAFETY: the caller guarantees the configured rows × colsb bytes are writable.
        unsafe {
            asm!(
                "tilestored [{b} + {s}*1], tmm{t}",
                t = const T,
                b = in(reg) base,
                s = in(reg) stride,
                options(nostack),
            );
        }
    }
    #[inline(always)]
    unsafe fn release(&mut self) {
        // SAFETY: returns the tile state to init; no memory access.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Format dispatch of the program.
///
/// # Safety
/// As [`AmxInt8::tile`], with `U` able to execute the tile operations (hardware: the token's
/// obligations) and AVX-512F/BW present.
pub(crate) unsafe fn tile_dispatch<U: TileOps>(
    tu: &mut U,
    ctx: &Ctx,
    r0: usize,
    rows: usize,
    g0: usize,
    g1: usize,
    lookahead: usize,
) {
    let la = lookahead.clamp(1, MAX_LOOKAHEAD);
    // SAFETY: forwarded.
    unsafe {
        match ctx.format {
            Int8Format::Q4_0 => program::<U, 0>(tu, ctx, r0, rows, g0, g1, la),
            Int8Format::Q4_1 => program::<U, 1>(tu, ctx, r0, rows, g0, g1, la),
            Int8Format::Q8_0 => program::<U, 2>(tu, ctx, r0, rows, g0, g1, la),
        }
    }
}

#[repr(C, align(64))]
struct BBuf([u8; KCB * BLK]);

/// Four C tiles' dwords (16 rows × 16), one per block in flight (block `j` in buffer `j % 4`).
#[repr(C, align(64))]
struct CBuf([[i32; 256]; 4]);

/// Row accumulators between passes (tile rows × 16 outputs).
#[repr(C, align(64))]
struct AccBuf([f32; AMX_INT8_TILE_ROWS * INT8_GROUP]);

/// Tiles 0, 1: A (rows × 32 bytes); 2, 3: B (8 × 64 bytes); 4 to 7: C (rows × 64 bytes).
fn config(rows: usize) -> TileConfig {
    debug_assert!((1..=16).contains(&rows));
    let (a, b, c) = ((rows as u8, 32), (8, 64), (rows as u8, 64));
    TileConfig::new(&[a, a, b, b, c, c, c, c])
}

/// The tile program: rows `r0..r0+rows` × groups `g0..g1`; `F`: 0 = Q4_0, 1 = Q4_1, 2 = Q8_0.
///
/// # Safety
/// As [`tile_dispatch`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn program<U: TileOps, const F: u8>(
    tu: &mut U,
    ctx: &Ctx,
    r0: usize,
    rows: usize,
    g0: usize,
    g1: usize,
    la: usize,
) {
    if rows == 0 || rows > AMX_INT8_TILE_ROWS || g0 >= g1 {
        return; // not reachable: the plan cuts rows by AMX_INT8_TILE_ROWS
    }
    let nb = ctx.nb;
    // Scratch left uninitialized (38 KiB of zeroing would rival a decode tile's work): every
    // byte is written before it is read (unpack before the tile loads, tilestored before the
    // epilogue, the first pass's accumulators before later passes).
    let mut bbuf = core::mem::MaybeUninit::<BBuf>::uninit();
    let mut cbuf = core::mem::MaybeUninit::<CBuf>::uninit();
    let mut accbuf = core::mem::MaybeUninit::<AccBuf>::uninit();
    let (bp, cp, ap) = (
        bbuf.as_mut_ptr().cast::<u8>(),
        cbuf.as_mut_ptr().cast::<i32>(),
        accbuf.as_mut_ptr().cast::<f32>(),
    );
    let mut configured = 0; // rows of the current tile configuration (0: none)
    for g in g0..g1 {
        let lanes = (ctx.n - g * INT8_GROUP).min(INT8_GROUP);
        let mask: __mmask16 = ((1u32 << lanes) - 1) as u16;
        let mut kc = 0;
        while kc < nb {
            let kn = (nb - kc).min(KCB);
            // SAFETY: g < ng and kc + kn <= nb: inside the packed weight; kn <= KCB blocks fit
            // the buffer.
            unsafe { unpack::<F>(ctx, g, kc, kn, bp) };
            // The full 16-row slices in one continuous pipeline, then the tail slice (its own
            // tile shapes: a reconfiguration, which zeroes the tiles, so the pipeline drains
            // first — it does at the end of each call).
            let (full, tail) = (rows / 16, rows % 16);
            for (nsl, mr, s0) in [(full, 16, 0), ((tail > 0) as usize, tail, 16 * full)] {
                if nsl == 0 {
                    continue;
                }
                if mr != configured {
                    // SAFETY: a valid palette-1 configuration (the caller's OS grant).
                    unsafe { tu.configure(&config(mr)) };
                    configured = mr;
                }
                // SAFETY: rows r0+s0..r0+s0+nsl·mr <= r0+rows <= m; blocks kc..kc+kn of group
                // g, unpacked into bp; the tile state holds this shape; the slices' accumulator
                // rows from s0 of ap (written on the first pass); y columns of group g (masked)
                // are the caller's. Full slices take the branch-free copy (accumulators in
                // registers).
                unsafe {
                    let (r, ab) = (r0 + s0, ap.add(s0 * INT8_GROUP));
                    if mr == 16 {
                        slices::<U, F, true>(tu, ctx, r, nsl, 16, g, kc, kn, bp, cp, ab, mask, la)
                    } else {
                        slices::<U, F, false>(tu, ctx, r, 1, mr, g, kc, kn, bp, cp, ab, mask, la)
                    }
                };
            }
            kc += kn;
        }
    }
    if configured != 0 {
        // SAFETY: configured above on this thread.
        unsafe { tu.release() };
    }
}

/// Unpacks blocks `kc..kc+kn` of group `g` to signed B-tile bytes (block `j` at `j·512`, row
/// `kk` at `+64·kk`: byte `4n + i` = `w[16g + n][32b + 4kk + i]`).
///
/// # Safety
/// `g < ceil(n/16)`, `kc + kn <= nb`, `kn <= KCB`; `out` writable for `kn·512` bytes, 64-byte
/// aligned; AVX-512F/BW.
#[inline(always)]
unsafe fn unpack<const F: u8>(ctx: &Ctx, g: usize, kc: usize, kn: usize, out: *mut u8) {
    let qb = if F == 2 {
        INT8_GROUP * QK
    } else {
        INT8_GROUP * QK / 2
    };
    // SAFETY: source bytes (g·nb + b)·qb + qb <= the packed weight's length (64-byte aligned,
    // qb a multiple of 64); destination j·512 + 512 <= KCB·512.
    unsafe {
        let src = ctx.u.add((g * ctx.nb + kc) * qb);
        let dst = out;
        let m0f = _mm512_set1_epi8(15);
        let eight = _mm512_set1_epi8(8);
        let sign = _mm512_set1_epi8(-128);
        for j in 0..kn {
            let s = src.add(j * qb);
            let d = dst.add(j * BLK);
            if F == 2 {
                for r in 0..8 {
                    let v = _mm512_load_si512(s.add(64 * r).cast());
                    _mm512_store_si512(d.add(64 * r).cast(), _mm512_xor_si512(v, sign));
                }
            } else {
                for v in 0..4 {
                    let raw = _mm512_load_si512(s.add(64 * v).cast());
                    let mut lo = _mm512_and_si512(raw, m0f);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(raw), m0f);
                    if F == 0 {
                        lo = _mm512_sub_epi8(lo, eight);
                        hi = _mm512_sub_epi8(hi, eight);
                    }
                    _mm512_store_si512(d.add(64 * v).cast(), lo);
                    _mm512_store_si512(d.add(64 * (4 + v)).cast(), hi);
                }
            }
        }
    }
}

/// Issues one block's tile operations on tiles (A, B, C) and stores C into `c`.
///
/// # Safety
/// The tile state holds the slice's configuration; `a` = the slice's first `q_x` row at block
/// `b` (rows at stride `k`, all inside `QActs`); `bt` = 512 readable bytes; `c` = 1 KiB
/// writable.
#[inline(always)]
unsafe fn issue<U: TileOps, const A: u8, const B: u8, const C: u8>(
    tu: &mut U,
    a: *const u8,
    k: usize,
    bt: *const u8,
    c: *mut i32,
) {
    // SAFETY: forwarded (configuration: A rows × 32, B 8 × 64, C rows × 64).
    unsafe {
        tu.load::<A>(a, k);
        tu.load::<B>(bt, 64);
        tu.zero::<C>();
        tu.dpbssd::<C, A, B>();
        tu.store::<C>(c.cast(), 64);
    }
}

/// Issues pipeline stage `s` (a block): A tile `s % 2`, B tile `2 + s % 2`, C tile `4 + s % 4`,
/// so a block's A and B are reloaded two stages later (after its `tdpbssd` read them) and its C
/// four stages later (after `tilestored` emptied it).
///
/// # Safety
/// As [`issue`].
#[inline(always)]
unsafe fn issue_stage<U: TileOps>(
    tu: &mut U,
    s: usize,
    a: *const u8,
    k: usize,
    bt: *const u8,
    c: *mut i32,
) {
    // SAFETY: forwarded.
    unsafe {
        match s % 4 {
            0 => issue::<U, 0, 2, 4>(tu, a, k, bt, c),
            1 => issue::<U, 1, 3, 5>(tu, a, k, bt, c),
            2 => issue::<U, 0, 2, 6>(tu, a, k, bt, c),
            _ => issue::<U, 1, 3, 7>(tu, a, k, bt, c),
        }
    }
}

/// `nsl` slices of `mr` rows (≤ 16; `FULL`: 16) from `row0` × group `g` × blocks `kc..kc+kn`
/// (unpacked at `bt`), as one software pipeline over the `nsl·kn` (slice, block) stages in
/// order: stage `t`'s tile work is issued `la` stages before its epilogue, so the tile loads, the
/// `tdpbssd` latency and the `tilestored` → vector-load round trip of one stage hide behind the
/// epilogues of the `la` stages before it; stage `t` uses C buffer `t % 4`, rewritten by stage
/// `t + 4`, issued after epilogue `t` (`la` ≤ 3). The pipeline fills and drains once per call,
/// not per slice. A slice's accumulators come from `accbuf` (or zero on the first pass) and go
/// to y (masked) on the last pass. Every loop over the accumulators runs 0..16 with constant
/// indices, so they stay in registers (a loop bounded by `mr` would index the array at run time
/// and keep it in memory).
///
/// # Safety
/// As in [`program`]'s call.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn slices<U: TileOps, const F: u8, const FULL: bool>(
    tu: &mut U,
    ctx: &Ctx,
    row0: usize,
    nsl: usize,
    mr: usize,
    g: usize,
    kc: usize,
    kn: usize,
    bt: *const u8,
    cbuf: *mut i32,
    accbuf: *mut f32,
    mask: __mmask16,
    la: usize,
) {
    let last = kc + kn == ctx.nb;
    let mr = if FULL { 16 } else { mr };
    let total = nsl * kn;
    // SAFETY: (whole body) rows row0..row0+nsl·mr < m of q (k bytes each) and meta (nb records
    // each); blocks kc..kc+kn < nb of group g's scales; `bt` holds the kn unpacked blocks;
    // accbuf holds nsl·mr × 16 (read only after a first pass wrote them); cbuf holds four 1 KiB
    // sets (each read only after tilestored wrote it); y lanes of group g masked to N, rows
    // row0.. < m, the caller's region.
    unsafe {
        let a = ctx.q.cast::<u8>();
        // Stage t = (slice t / kn, block t % kn); the issue side runs `la` stages ahead with its
        // own (slice, block) counters.
        let stage = |tu: &mut U, t: usize, sl: usize, j: usize| {
            issue_stage(
                tu,
                t,
                a.add((row0 + 16 * sl) * ctx.k + (kc + j) * QK),
                ctx.k,
                bt.add(j * BLK),
                cbuf.add(t % 4 * 256),
            )
        };
        let (mut isl, mut ij) = (0, 0);
        for t in 0..la.min(total) {
            stage(tu, t, isl, ij);
            ij += 1;
            if ij == kn {
                (isl, ij) = (isl + 1, 0);
            }
        }
        // The epilogue side: slice by slice (the accumulators live in registers over a slice),
        // while the issue side above runs on into the next slice.
        let mut t = 0;
        for sl in 0..nsl {
            let rs = row0 + 16 * sl;
            let ab = accbuf.add(16 * sl * INT8_GROUP);
            let mut acc = [_mm512_setzero_ps(); 16];
            if kc > 0 {
                for (i, ac) in acc.iter_mut().enumerate() {
                    if i < mr {
                        *ac = _mm512_loadu_ps(ab.add(i * INT8_GROUP));
                    }
                }
            }
            for j in 0..kn {
                if t + la < total {
                    stage(tu, t + la, isl, ij);
                    ij += 1;
                    if ij == kn {
                        (isl, ij) = (isl + 1, 0);
                    }
                }
                epilogue::<F>(ctx, rs, mr, g, kc + j, cbuf.add(t % 4 * 256), &mut acc);
                t += 1;
            }
            for (i, ac) in acc.iter().enumerate() {
                if i >= mr {
                    continue;
                }
                if last {
                    let yp = ctx.y.add((rs + i) * ctx.ldy + g * INT8_GROUP);
                    _mm512_mask_storeu_ps(yp, mask, *ac);
                } else {
                    _mm512_storeu_ps(ab.add(i * INT8_GROUP), *ac);
                }
            }
        }
    }
}

/// Block `b`'s epilogue for rows `row0..row0+mr` (at most 16) × group `g`, from the stored C
/// dwords `c` (16 per row): per row `acc = fma(f32(i), d_w·d_x, acc)` (+ `fma(m_w, s_x, acc)`
/// for Q4_1), the oracle's operations in its order.
///
/// # Safety
/// Rows `row0..row0+mr` < m, `b < nb`, `g < ceil(n/16)`; `c` holds `mr` stored rows; AVX-512F
/// (the caller's target features).
#[inline(always)]
unsafe fn epilogue<const F: u8>(
    ctx: &Ctx,
    row0: usize,
    mr: usize,
    g: usize,
    b: usize,
    c: *const i32,
    acc: &mut [__m512; 16],
) {
    let nb = ctx.nb;
    let sw = if F == 1 { 2 * INT8_GROUP } else { INT8_GROUP };
    // SAFETY: group g's scale words of block b, rows' meta records and c's rows are inside the
    // validated buffers (contract above).
    unsafe {
        let sb = ctx.s.add((g * nb + b) * sw);
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(sb.cast()));
        let mw = if F == 1 {
            _mm512_cvtph_ps(_mm256_loadu_si256(sb.add(INT8_GROUP).cast()))
        } else {
            _mm512_setzero_ps()
        };
        // Row i's record for block b: one pointer stepped by a row's nb records (no multiply
        // per row).
        let mut mp = ctx.meta.add(row0 * nb + b);
        for (i, ac) in acc.iter_mut().enumerate() {
            if i < mr {
                let mt = &*mp;
                mp = mp.wrapping_add(nb);
                // Same order as the portable oracle: (d_w · d_x), then fma, then Q4_1's.
                let sc = _mm512_mul_ps(dw, _mm512_set1_ps(mt.d));
                let isum = _mm512_load_si512(c.add(i * INT8_GROUP).cast());
                *ac = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, *ac);
                if F == 1 {
                    *ac = _mm512_fmadd_ps(mw, _mm512_set1_ps(mt.s), *ac);
                }
            }
        }
    }
}

/// Runs the whole int8 GEMM `w × acts → y` through the tile program on `tu` (every plan tile of
/// an AMX plan, in order, no VNNI row chunks), for the software-model tests.
#[cfg(test)]
pub(crate) fn amx_int8_model_tile<U: TileOps>(
    tu: &mut U,
    w: &crate::Int8Weight,
    acts: &crate::QActs,
    y: &mut [f32],
    ldy: usize,
    lookahead: usize,
) {
    let plan = crate::Int8Plan::new(crate::Int8Kernel::Portable, w, acts, y, ldy)
        .expect("valid call")
        .with_tile_rows(AMX_INT8_TILE_ROWS);
    for t in 0..plan.tiles() {
        let (r0, rows, g0, g1) = plan.tile_bounds(t).expect("tile in range");
        // SAFETY: the plan validated the call and cut the tile; the model executes the tile
        // operations in software; the epilogue needs AVX-512F/BW (checked by the caller: the
        // test requires VNNI, which implies them).
        unsafe { tile_dispatch(tu, plan.ctx(), r0, rows, g0, g1, lookahead) };
    }
}
