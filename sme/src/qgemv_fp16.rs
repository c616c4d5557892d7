//! Packed Q4 GEMV with FP16 arithmetic ([`QPackedFp16Plan`]): the FP32-activation GEMV on a
//! [`QPackedRef`] (Q4_0 / Q4_1) with the dequantize + multiply-add done in FP16 on AVX512-FP16
//! (kernel and error bound: `src/arch/x86_64/qgemv_fp16.rs`). Chosen explicitly, never by
//! `Kernel::best_gemv` (it trades accuracy, ~2^-8 relative per block, for fewer operations).

use crate::arch::x86_64::Avx512Fp16;
use crate::quant::{validate_packed, PCtx, GEMV_TILE_ROWS, QPACK_ROWS};
use crate::{Error, QPackedRef, QType, StealState};

/// A validated FP16-arithmetic GEMV `y[M×N] = x[M×K] · Wᵀ` on a packed Q4_0 / Q4_1 weight, cut
/// into tiles of [`GEMV_TILE_ROWS`] output columns like [`crate::QPackedPlan`] (same protocol:
/// [`StealState`] prepared with [`Self::tiles`], one [`Self::run_worker`] per worker).
#[derive(Debug)]
pub struct QPackedFp16Plan<'a> {
    ctx: PCtx,
    kernel: Avx512Fp16,
    _y: core::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: as for QPackedPlan: x and W are read only, y is one exclusive borrow held for the
// plan's lifetime, each tile index is claimed once and tiles write disjoint columns.
unsafe impl Sync for QPackedFp16Plan<'_> {}
// SAFETY: as above.
unsafe impl Send for QPackedFp16Plan<'_> {}

impl<'a> QPackedFp16Plan<'a> {
    /// Validates the GEMV (x FP32 row-major, stride K, M ≤ 16; y stride `ldy >= N`); nothing is
    /// written yet. A Q8_0 weight is refused with [`Error::Unsupported`] (this kernel reads Q4
    /// only; use [`crate::QPackedPlan`]).
    pub fn new(
        kernel: Avx512Fp16,
        x: &'a [f32],
        m: usize,
        k: usize,
        w: QPackedRef<'a>,
        y: &'a mut [f32],
        ldy: usize,
    ) -> Result<Self, Error> {
        if w.ty() == QType::Q8_0 {
            return Err(Error::Unsupported {
                kernel: "avx512-fp16 GEMV on Q8_0 (Q4_0 / Q4_1 only)",
            });
        }
        let ctx = validate_packed(x, m, k, &w, crate::OutMut::new(y), ldy)?;
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
        // SAFETY: g0 < g1 <= groups, at most 4 groups; Q4 checked in `new`; tile exclusivity
        // forwarded; the token proves the features.
        unsafe { self.kernel.packed_groups(&self.ctx, g0, g1) }
    }

    /// Runs every tile on the calling thread.
    pub fn run_all(&mut self) {
        for t in 0..self.tiles() {
            // SAFETY: `&mut self` excludes concurrent runs.
            unsafe { self.run_tile(t) }
        }
    }

    /// Runs this worker's share (see [`crate::GemmPlan::run_worker`]).
    pub fn run_worker(&self, state: &StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles(), |t| {
            // SAFETY: each tile index is handed to exactly one claim.
            unsafe { self.run_tile(t) }
        })
    }
}

impl Avx512Fp16 {
    /// `y[M×N] = x[M×K] · Wᵀ` on a packed Q4 weight, single-threaded, with FP16 arithmetic.
    /// On error nothing is written.
    pub fn qgemv_packed(
        self,
        x: &[f32],
        m: usize,
        k: usize,
        w: QPackedRef<'_>,
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        QPackedFp16Plan::new(self, x, m, k, w, y, ldy)?.run_all();
        Ok(())
    }
}
