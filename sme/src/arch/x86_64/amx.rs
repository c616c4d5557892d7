//! AMX-BF16 GEMM: a tile of up to 16, 32 or 64 rows ([`AmxBlocking`]) × a group of up to
//! [`GROUP`] 64-column panels per call.
//!
//! A is converted to BF16 (round-to-nearest-even) one k-chunk (512 k) at a time into a stack
//! scratch, and that chunk then serves every panel of the group (the conversion is paid once per
//! row block, chunk and group of 8 panels, not once per panel). B tiles are loaded straight from
//! the packed BF16 panel: a 64-byte slice of its 256-byte k-pair rows at stride 256 is exactly
//! one AMX B tile (16 k-pairs × 16 columns). The last partial step of K reads its B rows from a
//! zero-padded 4 KiB copy, so no tile load crosses the panel. Between k-chunks the accumulators
//! wait in a stack buffer (stored after a chunk, reloaded before the next); at the end they are
//! added to C (with bias / accumulate).
//!
//! - `Rows16`: per panel a 16×64 output in tmm0-3; per step of 16 k-pairs one A tile and four B
//!   tiles feed four `tdpbf16ps` (5 loads per 4 products).
//! - `Rows32` / `Rows64` (default): 32×32 output blocks, two A tiles (rows 0-15, 16-31) × two B
//!   tiles (columns 0-15, 16-31 of a half panel) into four accumulators (4 loads per 4
//!   products); per chunk, panel and half panel the 32-row pairs run back to back, so the
//!   half-panel chunk (32 KiB) is fetched from memory once for all 64 rows and re-read from
//!   L1/L2. Measured on the H200 host's Xeon: 5.2-6.1× the gemm crate's f32 rate at M = 256 and
//!   1024 on every shape (Rows16: 4.0-5.1×).
//!
//! Precision: A and W are both BF16 (8 significant bits, ~2-3 decimal digits); products and
//! sums are FP32.
//!
//! Not run on the development machine (an AMD EPYC without AMX), so `Kernel::best` does not pick
//! it on its own; `Kernel::new(KernelKind::Amx)` runs it, and the test suite runs every blocking
//! against the f64 reference on any CPU with AMX (all pass on the H200 machine's Xeon:
//! `benches/h200-cpu/gemm-h200-1.txt`).

use core::arch::asm;
use core::arch::x86_64::*;

use super::Amx;
use crate::gemm::{APtr, Ctx};
use crate::pack::{PAIR_ELEMS, PANEL_COLS};

const ARCH_REQ_XCOMP_PERM: libc::c_int = 0x1023;
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// CPUID leaf 7 EDX bits: 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
pub(super) const AMX_BF16_BIT: u32 = 1 << 22;
const AMX_TILE_BIT: u32 = 1 << 24;
pub(super) const AMX_INT8_BIT: u32 = 1 << 25;

/// CPUID leaf 7 (subleaf 0) EDX, or 0 where the leaf does not exist.
pub(super) fn cpuid7_edx() -> u32 {
    if __cpuid(0).eax < 7 {
        return 0;
    }
    __cpuid_count(7, 0).edx
}

/// Whether CPUID reports AMX-TILE and Linux granted this process the tile-data state. The
/// request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`) runs once per process, shared
/// by the BF16 and INT8 tokens; a refusal (or a kernel without the call) means no AMX kernel is
/// ever offered, so no tile instruction can fault.
pub(super) fn tile_data_granted() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        if cpuid7_edx() & AMX_TILE_BIT == 0 {
            return false;
        }
        // SAFETY: a raw syscall with integer arguments; it only changes this process's
        // permitted xfeatures (or fails with an error code).
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        r == 0
    })
}

/// CPUID reports AMX-BF16 (and AMX-TILE) and Linux grants the tile-data state.
pub(super) fn detect_and_request() -> bool {
    cpuid7_edx() & AMX_BF16_BIT != 0 && tile_data_granted()
}

/// k per A chunk converted to BF16 on the stack (16 rows × 512 × 2 bytes = 16 KiB).
const KCK: usize = 512;
/// k-pairs per tdpbf16ps step.
const STEP: usize = 16;
/// Panels per call: the k-chunk of A converted once serves this many panels (their accumulators
/// wait in 4 KiB stack buffers each, 32 KiB in all).
pub(crate) const GROUP: usize = 8;

#[repr(C, align(64))]
struct TileCfg([u8; 64]);

/// Palette 1; tiles 0-7 all 16 rows × 64 bytes.
fn tile_cfg() -> TileCfg {
    let mut c = [0u8; 64];
    c[0] = 1;
    for t in 0..8 {
        c[16 + 2 * t] = 64; // colsb (u16 little-endian)
        c[48 + t] = 16; // rows
    }
    TileCfg(c)
}

#[repr(C, align(64))]
struct Scratch<const N: usize>([u16; N]);

#[repr(C, align(64))]
struct CBuf([f32; 16 * PANEL_COLS]);

/// How the AMX kernel blocks a tile. All are tested against the reference on AMX CPUs; the
/// default ([`AmxBlocking::Rows64`]) is the one measured fastest on the H200 host's Xeon
/// (5.2-6.1× the gemm crate's f32 rate at M = 256 and 1024, vs 4.0-5.1× for `Rows16`; see
/// `benches/results/sme.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AmxBlocking {
    /// 16 rows × a group of 8 panels; per panel one A tile and four B tiles feed four
    /// `tdpbf16ps` (5 tile loads per 4 products; each weight byte serves 16 rows).
    Rows16,
    /// 32 rows × a group of 8 panels in 32×32 blocks: two A tiles × two B tiles into four
    /// accumulators (4 tile loads per 4 products; each weight byte serves 32 rows).
    Rows32,
    /// 64 rows × 8 panels, the same 32×32 blocks; the 64 rows run back to back over each
    /// half-panel k-chunk, so it is read from memory once for 64 rows (then from L1/L2).
    #[default]
    Rows64,
}

impl AmxBlocking {
    /// Rows of A per tile.
    pub fn rows(self) -> usize {
        match self {
            AmxBlocking::Rows16 => 16,
            AmxBlocking::Rows32 => 32,
            AmxBlocking::Rows64 => 64,
        }
    }
}

impl Amx {
    /// The same token with another tile blocking (for measuring them side by side).
    pub fn with_blocking(self, blocking: AmxBlocking) -> Self {
        Self { blocking, ..self }
    }

    /// The tile blocking this token runs.
    pub fn blocking(self) -> AmxBlocking {
        self.blocking
    }

    /// # Safety
    /// As [`crate::Kernel::tile`]; `rows <= self.blocking().rows()`; weights in BF16 format
    /// (checked by validation).
    pub(crate) unsafe fn gemm_tile(self, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
        // SAFETY: forwarded; one panel is a group of one.
        unsafe { self.gemm_tiles(ctx, row0, rows, p, p + 1) }
    }

    /// Rows `row0..row0+rows` × panels `p0..p1` (at most [`GROUP`] panels).
    ///
    /// # Safety
    /// As [`Amx::gemm_tile`] for every panel in `p0..p1`.
    pub(crate) unsafe fn gemm_tiles(
        self,
        ctx: &Ctx,
        row0: usize,
        rows: usize,
        p0: usize,
        p1: usize,
    ) {
        // SAFETY: the token proves AMX-TILE/BF16 + AVX-512F and the XTILEDATA permission; rows
        // is bounded by the blocking's rows (checked again inside).
        unsafe {
            match self.blocking {
                AmxBlocking::Rows16 => amx_tiles(ctx, row0, rows, p0, p1),
                AmxBlocking::Rows32 => amx_tiles_2x2::<32>(ctx, row0, rows, p0, p1),
                AmxBlocking::Rows64 => amx_tiles_2x2::<64>(ctx, row0, rows, p0, p1),
            }
        }
    }
}

/// FP32 → BF16 (round to nearest even, NaN → quiet NaN) for a row, zero-filling `dst` past it.
///
/// # Safety
/// AVX-512F present; `dst.len() >= src.len()`.
#[target_feature(enable = "avx512f")]
unsafe fn row_to_bf16(src: &[f32], dst: &mut [u16]) {
    let n = src.len();
    let mut i = 0;
    // SAFETY: every access is within i + 16 <= n of both slices.
    unsafe {
        let one = _mm512_set1_epi32(1);
        let bias = _mm512_set1_epi32(0x7FFF);
        while i + 16 <= n {
            let v = _mm512_loadu_ps(src.as_ptr().add(i));
            let b = _mm512_castps_si512(v);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), one);
            let r = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, _mm512_add_epi32(lsb, bias)));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            let r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
            _mm256_storeu_si256(
                dst.as_mut_ptr().add(i) as *mut __m256i,
                _mm512_cvtepi32_epi16(r),
            );
            i += 16;
        }
    }
    for j in i..n {
        dst[j] = half::bf16::from_f32(src[j]).to_bits();
    }
    dst[n..].fill(0);
}

/// # Safety
/// As [`Amx::gemm_tiles`], with AMX usable by this thread.
#[target_feature(enable = "avx512f")]
unsafe fn amx_tiles(ctx: &Ctx, row0: usize, rows: usize, p0: usize, p1: usize) {
    if rows > 16 || p1 <= p0 || p1 - p0 > GROUP {
        return; // not reachable: the plan cuts rows by 16 and panels by GROUP
    }
    let np = p1 - p0;
    let cfg = tile_cfg();
    let mut abuf = Scratch::<{ 16 * KCK }>([0; 16 * KCK]);
    let mut btail = Scratch::<{ STEP * PAIR_ELEMS }>([0; STEP * PAIR_ELEMS]);
    let mut acc: [CBuf; GROUP] = core::array::from_fn(|_| CBuf([0.0; 16 * PANEL_COLS]));
    let mut f32row = [0f32; KCK];
    let astride = KCK * 2; // bytes
    let bstride = PAIR_ELEMS * 2; // 256 bytes
    let cstride = PANEL_COLS * 4; // 256 bytes: one accumulator row of a panel
                                  // SAFETY: the configuration is a valid palette-1 config.
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            cfg = in(reg) cfg.0.as_ptr(),
            options(nostack, readonly),
        );
    }
    let mut k0 = 0;
    while k0 < ctx.k {
        let kn = (ctx.k - k0).min(KCK);
        // A rows row0..row0+rows, k0..k0+kn → BF16, zero past kn and for rows >= `rows`.
        for r in 0..16 {
            let dst = &mut abuf.0[r * KCK..(r + 1) * KCK];
            if r < rows {
                let i = row0 + r;
                match ctx.a {
                    APtr::F32(a) => {
                        // SAFETY: row i < m, columns k0..k0+kn <= k: inside A.
                        let src =
                            unsafe { core::slice::from_raw_parts(a.add(i * ctx.lda + k0), kn) };
                        // SAFETY: avx512f enabled here.
                        unsafe { row_to_bf16(src, dst) };
                    }
                    APtr::F16(a) => {
                        for (j, v) in f32row[..kn].iter_mut().enumerate() {
                            // SAFETY: as above.
                            *v = crate::portable::f16_to_f32(unsafe {
                                *a.add(i * ctx.lda + k0 + j)
                            });
                        }
                        // SAFETY: avx512f enabled here.
                        unsafe { row_to_bf16(&f32row[..kn], dst) };
                    }
                }
            } else {
                dst.fill(0);
            }
        }
        let q0 = k0 / 2;
        let qn = kn.div_ceil(2);
        for (g, accg) in acc.iter_mut().enumerate().take(np) {
            let panel = ctx.panel_ptr(p0 + g);
            let cptr = accg.0.as_mut_ptr();
            if k0 == 0 {
                // SAFETY: tiles configured above; tilezero touches no memory.
                unsafe {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem),
                    );
                }
            } else {
                // SAFETY: four 16-row × 64-byte loads at stride 256 bytes read exactly this
                // panel's 4 KiB accumulator buffer, stored after the previous chunk.
                unsafe {
                    asm!(
                        "tileloadd tmm0, [{c} + {sc}*1]",
                        "tileloadd tmm1, [{c} + {sc}*1 + 64]",
                        "tileloadd tmm2, [{c} + {sc}*1 + 128]",
                        "tileloadd tmm3, [{c} + {sc}*1 + 192]",
                        c = in(reg) cptr,
                        sc = in(reg) cstride,
                        options(nostack, readonly),
                    );
                }
            }
            // Steps of 16 k-pairs over this chunk.
            let mut s = 0;
            while s < qn {
                let q = q0 + s;
                let avail = ctx.kp - q; // k-pair rows left in the panel
                let b: *const u16 = if avail >= STEP {
                    panel.wrapping_add(q * PAIR_ELEMS)
                } else {
                    btail.0.fill(0);
                    // SAFETY: rows q..kp of this panel are inside the validated weight.
                    unsafe {
                        core::ptr::copy_nonoverlapping(
                            panel.add(q * PAIR_ELEMS),
                            btail.0.as_mut_ptr(),
                            avail * PAIR_ELEMS,
                        )
                    };
                    btail.0.as_ptr()
                };
                let a = abuf.0.as_ptr().wrapping_add(2 * s);
                // SAFETY: A tile: 16 rows of 64 bytes at stride KCK*2 inside abuf (2s + 32 <= KCK
                // since s + 16 <= KCK/2 when s is a multiple of 16 below qn <= KCK/2). B tiles:
                // 16 rows of 64 bytes at stride 256 from `b`, inside the panel (avail >= 16) or
                // the 16-row btail copy. Tiles configured above.
                unsafe {
                    asm!(
                        "tileloadd tmm4, [{a} + {sa}*1]",
                        "tileloadd tmm5, [{b} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm5",
                        "tileloadd tmm6, [{b} + {sb}*1 + 64]",
                        "tdpbf16ps tmm1, tmm4, tmm6",
                        "tileloadd tmm5, [{b} + {sb}*1 + 128]",
                        "tdpbf16ps tmm2, tmm4, tmm5",
                        "tileloadd tmm6, [{b} + {sb}*1 + 192]",
                        "tdpbf16ps tmm3, tmm4, tmm6",
                        a = in(reg) a,
                        sa = in(reg) astride,
                        b = in(reg) b,
                        sb = in(reg) bstride,
                        options(nostack, readonly),
                    );
                }
                s += STEP;
            }
            // SAFETY: four 16×64-byte stores at stride 256 bytes fill exactly this panel's 4 KiB
            // accumulator buffer.
            unsafe {
                asm!(
                    "tilestored [{c} + {sc}*1], tmm0",
                    "tilestored [{c} + {sc}*1 + 64], tmm1",
                    "tilestored [{c} + {sc}*1 + 128], tmm2",
                    "tilestored [{c} + {sc}*1 + 192], tmm3",
                    c = in(reg) cptr,
                    sc = in(reg) cstride,
                    options(nostack),
                );
            }
        }
        k0 += kn;
    }
    // SAFETY: releases the tile state configured above (no memory access).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    for (g, accg) in acc.iter().enumerate().take(np) {
        let p = p0 + g;
        let cols = ctx.panel_cols(p);
        for r in 0..rows {
            // SAFETY: row row0+r < m, columns of panel p inside N; the tile region is the
            // caller's.
            unsafe {
                crate::portable::store_row(
                    ctx,
                    row0 + r,
                    p * PANEL_COLS,
                    &accg.0[r * PANEL_COLS..r * PANEL_COLS + cols],
                    ctx.accumulate,
                )
            };
        }
    }
}

/// k per A chunk of the 2×2 kernel (64 rows × 512 × 2 bytes = 64 KiB at most).
const KC2: usize = 512;
/// Most rows of the 2×2 kernel.
const MAXR: usize = 64;
/// f32 per accumulator-buffer row: the group's 8 panels side by side.
const ACC_W: usize = GROUP * PANEL_COLS;

#[repr(C, align(64))]
struct Acc2([f32; MAXR * ACC_W]);

/// Converts rows `row0..row0+rows` of A, columns `k0..k0+kn`, to BF16 into `abuf` (row stride
/// [`KC2`]), zero past `kn` and for rows `rows..rows_padded`.
///
/// # Safety
/// AVX-512F; `rows <= rows_padded <= MAXR`, row0 + rows <= ctx.m, k0 + kn <= ctx.k, kn <= KC2.
#[target_feature(enable = "avx512f")]
unsafe fn convert_a(
    ctx: &Ctx,
    row0: usize,
    rows: usize,
    rows_padded: usize,
    k0: usize,
    kn: usize,
    abuf: &mut [u16],
) {
    let mut f32row = [0f32; KC2];
    for r in 0..rows_padded {
        let dst = &mut abuf[r * KC2..(r + 1) * KC2];
        if r >= rows {
            dst.fill(0);
            continue;
        }
        let i = row0 + r;
        match ctx.a {
            APtr::F32(a) => {
                // SAFETY: row i < m, columns k0..k0+kn <= k: inside A.
                let src = unsafe { core::slice::from_raw_parts(a.add(i * ctx.lda + k0), kn) };
                // SAFETY: avx512f enabled here; dst holds KC2 >= kn.
                unsafe { row_to_bf16(src, dst) };
            }
            APtr::F16(a) => {
                for (j, v) in f32row[..kn].iter_mut().enumerate() {
                    // SAFETY: as above.
                    *v = crate::portable::f16_to_f32(unsafe { *a.add(i * ctx.lda + k0 + j) });
                }
                // SAFETY: avx512f enabled here.
                unsafe { row_to_bf16(&f32row[..kn], dst) };
            }
        }
    }
}

/// The 2×2 blocking: rows `row0..row0+rows` (at most `R`, a multiple of 32) × panels `p0..p1`.
/// Per k-chunk of [`KC2`]: A (all row pairs) converted to BF16 once; then per panel, per half
/// panel (32 columns), per 32-row pair: four accumulators (tmm0-3: rows 0-15/16-31 × columns
/// 0-15/16-31 of the half) loaded from the stack buffer (zeroed on the first chunk), then per
/// step of 16 k-pairs two A tiles (tmm4/5) and two B tiles (tmm6/7, 64-byte slices of the
/// 256-byte panel rows at stride 256) feed four `tdpbf16ps`; accumulators stored back.
///
/// # Safety
/// As [`Amx::gemm_tiles`] with `rows <= R <= MAXR`, and AMX usable by this thread.
#[target_feature(enable = "avx512f")]
unsafe fn amx_tiles_2x2<const R: usize>(ctx: &Ctx, row0: usize, rows: usize, p0: usize, p1: usize) {
    if rows == 0 || rows > R || R > MAXR || p1 <= p0 || p1 - p0 > GROUP {
        return; // not reachable: the plan cuts rows by R and panels by GROUP
    }
    let np = p1 - p0;
    let pairs = rows.div_ceil(32);
    let cfg = tile_cfg();
    let mut abuf = Scratch::<{ MAXR * KC2 }>([0; MAXR * KC2]);
    let mut btail = Scratch::<{ STEP * PAIR_ELEMS }>([0; STEP * PAIR_ELEMS]);
    let mut acc = Acc2([0.0; MAXR * ACC_W]);
    let astride = KC2 * 2; // bytes per A scratch row
    let bstride = PAIR_ELEMS * 2; // 256 bytes per k-pair row of a panel
    let cstride = ACC_W * 4; // bytes per accumulator-buffer row
                             // Halves of each panel that hold columns inside N (a panel of <= 32 columns skips its
                             // second half: those accumulators are never read).
    let halves = |g: usize| if ctx.panel_cols(p0 + g) > 32 { 2 } else { 1 };
    // SAFETY: the configuration is a valid palette-1 config (8 tiles of 16 × 64 bytes).
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            cfg = in(reg) cfg.0.as_ptr(),
            options(nostack, readonly),
        );
    }
    let mut k0 = 0;
    while k0 < ctx.k {
        let kn = (ctx.k - k0).min(KC2);
        // SAFETY: avx512f enabled; rows <= 32*pairs <= R <= MAXR; row0+rows <= m; k0+kn <= k.
        unsafe { convert_a(ctx, row0, rows, 32 * pairs, k0, kn, &mut abuf.0) };
        let q0 = k0 / 2;
        let qn = kn.div_ceil(2);
        for g in 0..np {
            let panel = ctx.panel_ptr(p0 + g);
            for h in 0..halves(g) {
                for rp in 0..pairs {
                    // Accumulators of rows 32rp.., columns of half h of panel g.
                    let cptr = acc
                        .0
                        .as_mut_ptr()
                        .wrapping_add(32 * rp * ACC_W + g * PANEL_COLS + 32 * h);
                    let cptr16 = cptr.wrapping_add(16 * ACC_W);
                    if k0 == 0 {
                        // SAFETY: tiles configured above; tilezero touches no memory.
                        unsafe {
                            asm!(
                                "tilezero tmm0",
                                "tilezero tmm1",
                                "tilezero tmm2",
                                "tilezero tmm3",
                                options(nostack, nomem),
                            );
                        }
                    } else {
                        // SAFETY: each load reads 16 rows × 64 bytes at stride ACC_W*4 bytes
                        // from rows 32rp..32rp+32 (< MAXR), columns g*64+32h..+32 (< ACC_W) of
                        // the accumulator buffer, stored after the previous chunk.
                        unsafe {
                            asm!(
                                "tileloadd tmm0, [{c} + {sc}*1]",
                                "tileloadd tmm1, [{c} + {sc}*1 + 64]",
                                "tileloadd tmm2, [{d} + {sc}*1]",
                                "tileloadd tmm3, [{d} + {sc}*1 + 64]",
                                c = in(reg) cptr,
                                d = in(reg) cptr16,
                                sc = in(reg) cstride,
                                options(nostack, readonly),
                            );
                        }
                    }
                    let mut s = 0;
                    while s < qn {
                        let q = q0 + s;
                        let avail = ctx.kp - q; // k-pair rows left in the panel
                        let b: *const u16 = if avail >= STEP {
                            panel.wrapping_add(q * PAIR_ELEMS + 64 * h)
                        } else {
                            btail.0.fill(0);
                            // SAFETY: rows q..kp of this panel are inside the validated weight.
                            unsafe {
                                core::ptr::copy_nonoverlapping(
                                    panel.add(q * PAIR_ELEMS),
                                    btail.0.as_mut_ptr(),
                                    avail * PAIR_ELEMS,
                                )
                            };
                            btail.0.as_ptr().wrapping_add(64 * h)
                        };
                        let a0 = abuf.0.as_ptr().wrapping_add(32 * rp * KC2 + 2 * s);
                        let a1 = a0.wrapping_add(16 * KC2);
                        // SAFETY: A tiles: 16 rows × 64 bytes at stride KC2*2 inside abuf (rows
                        // 32rp..32rp+32 <= MAXR; columns 2s..2s+32 <= KC2 as s + 16 <= KC2/2).
                        // B tiles: 16 rows × 64 bytes at stride 256 from `b` (+64), i.e. bytes
                        // 128h..128h+128 of 16 k-pair rows inside the panel (avail >= 16) or
                        // the 16-row btail copy. Tiles configured above.
                        unsafe {
                            asm!(
                                "tileloadd tmm4, [{a0} + {sa}*1]",
                                "tileloadd tmm6, [{b} + {sb}*1]",
                                "tdpbf16ps tmm0, tmm4, tmm6",
                                "tileloadd tmm7, [{b} + {sb}*1 + 64]",
                                "tdpbf16ps tmm1, tmm4, tmm7",
                                "tileloadd tmm5, [{a1} + {sa}*1]",
                                "tdpbf16ps tmm2, tmm5, tmm6",
                                "tdpbf16ps tmm3, tmm5, tmm7",
                                a0 = in(reg) a0,
                                a1 = in(reg) a1,
                                sa = in(reg) astride,
                                b = in(reg) b,
                                sb = in(reg) bstride,
                                options(nostack, readonly),
                            );
                        }
                        s += STEP;
                    }
                    // SAFETY: the same four 16×64-byte regions of the accumulator buffer as
                    // the loads above.
                    unsafe {
                        asm!(
                            "tilestored [{c} + {sc}*1], tmm0",
                            "tilestored [{c} + {sc}*1 + 64], tmm1",
                            "tilestored [{d} + {sc}*1], tmm2",
                            "tilestored [{d} + {sc}*1 + 64], tmm3",
                            c = in(reg) cptr,
                            d = in(reg) cptr16,
                            sc = in(reg) cstride,
                            options(nostack),
                        );
                    }
                }
            }
        }
        k0 += kn;
    }
    // SAFETY: releases the tile state configured above (no memory access).
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    for g in 0..np {
        let p = p0 + g;
        let cols = ctx.panel_cols(p);
        for r in 0..rows {
            let off = r * ACC_W + g * PANEL_COLS;
            // SAFETY: row row0+r < m, columns of panel p inside N; the tile region is the
            // caller's.
            unsafe {
                crate::portable::store_row(
                    ctx,
                    row0 + r,
                    p * PANEL_COLS,
                    &acc.0[off..off + cols],
                    ctx.accumulate,
                )
            };
        }
    }
}
