//! Driver side of the aarch64 SME tile kernels: a tile is one row block × a group of up to
//! [`SME_GROUP`] panels. The LHS row block is packed chunk by chunk (K in chunks of 256 k-pairs,
//! so the scratch lives on the stack), once per chunk for the whole group, and each chunk is one
//! call of the kernel (`gemm_chunk_f16` of `arch::aarch64::{Sme2, Sme1}`) over all the group's
//! panels: one SMSTART/SMSTOP per chunk and group instead of per chunk and panel.

use crate::arch::aarch64::{lhs_block_len, pack_lhs_f16, pack_lhs_f32, Sme1, Sme2};
use crate::gemm::{APtr, Ctx};
use crate::pack::{PAIR_ELEMS, PANEL_COLS};

/// k-pairs per LHS chunk.
const KC: usize = 256;
/// Largest tile_rows (SVL 512 bits).
const MAX_TILE_ROWS: usize = 16;
/// Panels per tile: the packed LHS chunk and one streaming-mode entry serve this many panels.
pub(crate) const SME_GROUP: usize = 8;

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

/// Rows `row0..row0+rows` × panels `p0..p1`.
///
/// # Safety
/// As [`crate::Kernel::tile`]; `rows <= tok.tile_rows() <= 16`; `p0 < p1 <= ctx.np`.
pub(crate) unsafe fn sme_tile(
    tok: SmeTok,
    ctx: &Ctx,
    row0: usize,
    rows: usize,
    p0: usize,
    p1: usize,
) {
    let tr = tok.tile_rows();
    if tr > MAX_TILE_ROWS || rows > tr || p1 <= p0 {
        // Not reachable: the probes accept SVL <= 512 and the plan cuts rows by tile_rows.
        return;
    }
    let col0 = p0 * PANEL_COLS;
    // Columns of the panel range inside N (the last panel may be partial).
    let cols = (ctx.n - col0).min((p1 - p0) * PANEL_COLS);
    let panel = ctx.panel_ptr(p0);
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
        let bias = if first && !ctx.bias.is_null() {
            ctx.bias.wrapping_add(col0)
        } else {
            core::ptr::null()
        };
        let w = panel.wrapping_add(q0 * PAIR_ELEMS);
        let c = ctx.c.wrapping_add(row0 * ctx.ldc + col0);
        // SAFETY: lhs holds lhs_block_len(tr, 2*qn) packed u16 (kn rounds up to 2*qn pairs);
        // `w` points at k-pair row q0 of panel p0, and each of the p1-p0 panels (kp rows apart)
        // has rows q0..q0+qn inside the validated weight; c covers rows × cols of the caller's
        // tile (cols <= 64 * (p1-p0)); bias null or `cols` elements; rows <= tr; qn <= kp.
        unsafe {
            match tok {
                SmeTok::S2(t) => t.gemm_chunk_f16(
                    lhs.as_ptr(),
                    w,
                    qn,
                    ctx.kp,
                    p1 - p0,
                    c,
                    ctx.ldc,
                    rows,
                    cols,
                    accumulate,
                    bias,
                ),
                SmeTok::S1(t) => t.gemm_chunk_f16(
                    lhs.as_ptr(),
                    w,
                    qn,
                    ctx.kp,
                    p1 - p0,
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
