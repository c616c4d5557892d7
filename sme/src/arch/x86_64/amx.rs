//! AMX-BF16 GEMM: 16 rows × a group of up to [`GROUP`] 64-column panels per call, each panel's
//! 16×64 output in four 16×16 FP32 accumulator tiles (tmm0-3).
//!
//! A is converted to BF16 (round-to-nearest-even) one k-chunk of [`KCK`] at a time into a stack
//! scratch, and that chunk then serves every panel of the group: the conversion (about as many
//! vector instructions per 32 k as the four `tdpbf16ps` take cycles) is paid once per row block
//! and chunk instead of once per panel, which is what held the one-panel version to ~3.6× the
//! gemm crate's f32 rate. Per step of 16 k-pairs (32 k): one A tile (tmm4: 16 rows × 32 BF16)
//! and four B tiles, each a 64-byte slice of the 256-byte k-pair rows of the packed BF16 panel
//! (stride 256 bytes: the packed layout is exactly the AMX B-tile layout), feeding four
//! `tdpbf16ps`. The last partial step reads its B rows from a zero-padded 4 KiB copy, so no tile
//! load crosses the panel. Between k-chunks each panel's accumulators wait in a 4 KiB stack
//! buffer (stored after a chunk, reloaded before the next); at the end they are added to C (with
//! bias / accumulate).
//!
//! Precision: A and W are both BF16 (8 significant bits, ~2-3 decimal digits); products and
//! sums are FP32.
//!
//! Not run on the development machine (an AMD EPYC without AMX), so `Kernel::best` does not pick
//! it on its own; `Kernel::new(KernelKind::Amx)` runs it, and the test suite runs it against the
//! f64 reference on any CPU with AMX (it passed on the H200 machine's Xeon, see
//! benches/RESULTS.md).

use core::arch::asm;
use core::arch::x86_64::*;

use super::Amx;
use crate::gemm::{APtr, Ctx};
use crate::pack::{PAIR_ELEMS, PANEL_COLS};

const ARCH_REQ_XCOMP_PERM: libc::c_int = 0x1023;
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// CPUID leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE; then asks Linux for the tile data state.
pub(super) fn detect_and_request() -> bool {
    let max = __cpuid(0).eax;
    if max < 7 {
        return false;
    }
    let l7 = __cpuid_count(7, 0);
    let bf16 = l7.edx & (1 << 22) != 0;
    let tile = l7.edx & (1 << 24) != 0;
    if !(bf16 && tile) {
        return false;
    }
    // SAFETY: a raw syscall with integer arguments; it only changes this process's permitted
    // xfeatures (or fails with an error code).
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    r == 0
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

/// Palette 1; tiles 0-6 all 16 rows × 64 bytes.
fn tile_cfg() -> TileCfg {
    let mut c = [0u8; 64];
    c[0] = 1;
    for t in 0..7 {
        c[16 + 2 * t] = 64; // colsb (u16 little-endian)
        c[48 + t] = 16; // rows
    }
    TileCfg(c)
}

#[repr(C, align(64))]
struct Scratch<const N: usize>([u16; N]);

#[repr(C, align(64))]
struct CBuf([f32; 16 * PANEL_COLS]);

impl Amx {
    /// # Safety
    /// As [`crate::Kernel::tile`]; `rows <= 16`; weights in BF16 format (checked by validation).
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
        // SAFETY: the token proves AMX-TILE/BF16 + AVX-512F and the XTILEDATA permission.
        unsafe { amx_tiles(ctx, row0, rows, p0, p1) }
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
