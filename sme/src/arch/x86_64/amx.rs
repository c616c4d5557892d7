//! AMX-BF16 GEMM tile: 16 rows × 64 columns in four 16×16 FP32 accumulator tiles (tmm0-3).
//!
//! Per step of 16 k-pairs (32 k): one A tile (tmm4: 16 rows × 32 BF16 from a stack scratch of
//! A converted to BF16, round-to-nearest-even) and four B tiles, each a 64-byte slice of the
//! 256-byte k-pair rows of the packed BF16 panel (stride 256 bytes: the packed layout is exactly
//! the AMX B-tile layout), feeding four `tdpbf16ps`. The last partial step reads its B rows from
//! a zero-padded 4 KiB copy, so no tile load crosses the panel. The accumulators are stored once
//! per tile to a 4 KiB scratch and added to C (with bias / accumulate) there.
//!
//! Precision: A and W are both BF16 (8 significant bits, ~2-3 decimal digits); products and
//! sums are FP32.
//!
//! Status: compiled and reviewed, never executed here (the development machine has no AMX);
//! hence `Kernel::best` does not pick it on its own. `Kernel::new(KernelKind::Amx)` runs it, and
//! the test suite runs it against the f64 reference on any CPU that has AMX.

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
        // SAFETY: the token proves AMX-TILE/BF16 + AVX-512F and the XTILEDATA permission.
        unsafe { amx_tile(ctx, row0, rows, p) }
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
/// As [`Amx::gemm_tile`], with AMX usable by this thread.
#[target_feature(enable = "avx512f")]
unsafe fn amx_tile(ctx: &Ctx, row0: usize, rows: usize, p: usize) {
    if rows > 16 {
        return; // not reachable: the plan cuts rows by tile_rows() = 16
    }
    let cols = ctx.panel_cols(p);
    let panel = ctx.panel_ptr(p);
    let cfg = tile_cfg();
    let mut abuf = Scratch::<{ 16 * KCK }>([0; 16 * KCK]);
    let mut btail = Scratch::<{ STEP * PAIR_ELEMS }>([0; STEP * PAIR_ELEMS]);
    let mut cbuf = CBuf([0.0; 16 * PANEL_COLS]);
    let mut f32row = [0f32; KCK];
    let astride = KCK * 2; // bytes
    let bstride = PAIR_ELEMS * 2; // 256 bytes
                                  // SAFETY: the configuration is a valid palette-1 config; tilezero needs no memory.
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
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
        // Steps of 16 k-pairs over this chunk.
        let q0 = k0 / 2;
        let qn = kn.div_ceil(2);
        let mut s = 0;
        while s < qn {
            let q = q0 + s;
            let avail = ctx.kp - q; // k-pair rows left in the panel
            let b: *const u16 = if avail >= STEP {
                panel.wrapping_add(q * PAIR_ELEMS)
            } else {
                btail.0.fill(0);
                // SAFETY: rows q..kp of panel p are inside the validated weight.
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
            // 16 rows of 64 bytes at stride 256 from `b`, inside the panel (avail >= 16) or the
            // 16-row btail copy. Tiles configured above.
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
        k0 += kn;
    }
    let cptr = cbuf.0.as_mut_ptr();
    // SAFETY: four 16×64-byte stores at stride 256 bytes fill exactly the 4 KiB cbuf; then the
    // tile state is released.
    unsafe {
        asm!(
            "tilestored [{c} + {sc}*1], tmm0",
            "tilestored [{c} + {sc}*1 + 64], tmm1",
            "tilestored [{c} + {sc}*1 + 128], tmm2",
            "tilestored [{c} + {sc}*1 + 192], tmm3",
            "tilerelease",
            c = in(reg) cptr,
            sc = in(reg) PANEL_COLS * 4,
            options(nostack),
        );
    }
    for r in 0..rows {
        // SAFETY: row row0+r < m, columns of panel p inside N; the tile region is the caller's.
        unsafe {
            crate::portable::store_row(
                ctx,
                row0 + r,
                p * PANEL_COLS,
                &cbuf.0[r * PANEL_COLS..r * PANEL_COLS + cols],
                ctx.accumulate,
            )
        };
    }
}
