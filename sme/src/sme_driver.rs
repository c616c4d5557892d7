//! Driver side of the aarch64 SME tile kernels: packs the LHS row block chunk by chunk (K in
//! chunks of 256 k-pairs, so the scratch lives on the stack) and calls the kernel contract
//! `gemm_block_f16` of `arch::aarch64::{Sme2, Sme1}` one panel at a time.

use crate::arch::aarch64::{lhs_block_len, pack_lhs_f16, pack_lhs_f32, Sme1, Sme2};
use crate::gemm::{APtr, Ctx};
use crate::pack::{PAIR_ELEMS, PANEL_COLS};

/// k-pairs per LHS chunk.
const KC: usize = 256;
/// Largest tile_rows (SVL 512 bits).
const MAX_TILE_ROWS: usize = 16;

#[derive(Debug, Clone, Copy)]
pub(crate) enum SmeTok {
    S2(Sme2),
    S1(Sme1),
}

impl SmeTok {
    fn tile_rows(self) -> usize {
        match self {
            SmeTok::S2(t) => t.tile_rows(),
            SmeTok::S1(t) => t.tile_rows(),
        }
    }
}

/// # Safety
/// As [`crate::Kernel::tile`]; `rows <= tok.tile_rows() <= 16`.
pub(crate) unsafe fn sme_tile(tok: SmeTok, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
    let tr = tok.tile_rows();
    if tr > MAX_TILE_ROWS || rows > tr {
        // Not reachable: the probes accept SVL <= 512 and the plan cuts rows by tile_rows.
        return;
    }
    let cols = ctx.panel_cols(p);
    let panel = ctx.panel_ptr(p);
    let mut lhs = [0u16; MAX_TILE_ROWS * 2 * KC];
    let mut q0 = 0;
    loop {
        let qn = (ctx.kp - q0).min(KC);
        let kk0 = 2 * q0;
        let kn = (ctx.k - kk0).min(2 * qn);
        let len = lhs_block_len(tr, kn);
        if rows > 0 && kn > 0 {
            let src_len = (rows - 1) * ctx.lda + kn;
            // SAFETY: rows row0..row0+rows < m and columns kk0..kk0+kn <= k are inside the
            // validated A; the slice covers exactly that extent.
            let packed = unsafe {
                match ctx.a {
                    APtr::F32(a) => pack_lhs_f32(
                        core::slice::from_raw_parts(a.add(row0 * ctx.lda + kk0), src_len),
                        ctx.lda,
                        rows,
                        kn,
                        tr,
                        &mut lhs[..len],
                    ),
                    APtr::F16(a) => pack_lhs_f16(
                        core::slice::from_raw_parts(a.add(row0 * ctx.lda + kk0), src_len),
                        ctx.lda,
                        rows,
                        kn,
                        tr,
                        &mut lhs[..len],
                    ),
                }
            };
            // Not reachable: rows <= tr, the scratch holds a whole chunk and the slice was cut
            // to the extent the packer checks. Refuse the tile rather than multiply garbage.
            if packed.is_err() {
                debug_assert!(false, "LHS pack refused validated input: {packed:?}");
                return;
            }
        } else {
            lhs[..len].fill(0);
        }
        let first = q0 == 0;
        let accumulate = !first || ctx.accumulate;
        let col0 = p * PANEL_COLS;
        let bias = if first && !ctx.bias.is_null() {
            ctx.bias.wrapping_add(col0)
        } else {
            core::ptr::null()
        };
        let w = panel.wrapping_add(q0 * PAIR_ELEMS);
        let c = ctx.c.wrapping_add(row0 * ctx.ldc + col0);
        // SAFETY: lhs holds lhs_block_len(tr, 2*qn) packed u16 (kn rounds up to 2*qn pairs);
        // with one panel the panel stride is unused and `w` covers qn k-pair rows of panel p;
        // c covers rows × cols of the caller's tile; bias null or `cols` elements; rows <= tr.
        unsafe {
            match tok {
                SmeTok::S2(t) => t.gemm_block_f16(
                    lhs.as_ptr(),
                    w,
                    qn,
                    1,
                    c,
                    ctx.ldc,
                    rows,
                    cols,
                    accumulate,
                    bias,
                ),
                SmeTok::S1(t) => t.gemm_block_f16(
                    lhs.as_ptr(),
                    w,
                    qn,
                    1,
                    c,
                    ctx.ldc,
                    rows,
                    cols,
                    accumulate,
                    bias,
                ),
            }
        }
        q0 += qn;
        if q0 >= ctx.kp {
            break;
        }
    }
}
