//! GEMM over the packed format: the problem description, its validation, the tile grid and the
//! kernel dispatch.

use crate::pack::{k_pairs, panels, PackedFormat, PackedRef, PAIR_ELEMS, PANEL_COLS};
use crate::{Error, Kernel};

/// The left operand A (M×K, row-major with leading dimension `lda`).
#[derive(Debug, Clone, Copy)]
pub enum Lhs<'a> {
    /// FP32 activations.
    F32(&'a [f32]),
    /// FP16 activations (IEEE binary16 bits).
    F16(&'a [u16]),
}

impl Lhs<'_> {
    fn len(&self) -> usize {
        match self {
            Lhs::F32(a) => a.len(),
            Lhs::F16(a) => a.len(),
        }
    }
}

/// One GEMM: `C[M×N] (= or +=) A[M×K] · W[K×N] (+ bias[N])`, C FP32 row-major.
#[derive(Debug, Clone, Copy)]
pub struct Gemm<'a> {
    /// A, row-major.
    pub a: Lhs<'a>,
    /// Rows of A and C.
    pub m: usize,
    /// Leading dimension of A (`>= K`).
    pub lda: usize,
    /// The packed weight; it fixes K and N.
    pub w: PackedRef<'a>,
    /// Optional bias of N elements, added once to every output row.
    pub bias: Option<&'a [f32]>,
    /// `false`: `C = A·W + bias`; `true`: `C += A·W + bias`.
    pub accumulate: bool,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum APtr {
    F32(*const f32),
    F16(*const u16),
}

/// A validated GEMM as raw pointers: every extent below has been checked against the slices it
/// came from, so a kernel may read A rows `0..m` (`k` elements each, stride `lda`), the `np`
/// panels of `w` (stride `kp * 128`), bias `n` elements, and write C rows `0..m` (`n` elements,
/// stride `ldc`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub a: APtr,
    pub lda: usize,
    pub m: usize,
    pub k: usize,
    pub kp: usize,
    pub n: usize,
    pub np: usize,
    pub w: *const u16,
    pub format: PackedFormat,
    /// FP32 output (null when the output is FP16).
    pub c: *mut f32,
    /// FP16 output (null when the output is FP32): kernels never see it; [`tile_f16_out`] runs
    /// them into an FP32 scratch and converts.
    pub c16: *mut u16,
    pub ldc: usize,
    pub accumulate: bool,
    pub bias: *const f32,
}

impl Ctx {
    /// Columns of panel `p` that are inside N.
    pub fn panel_cols(&self, p: usize) -> usize {
        (self.n - p * PANEL_COLS).min(PANEL_COLS)
    }
    /// Start of panel `p`.
    pub fn panel_ptr(&self, p: usize) -> *const u16 {
        self.w.wrapping_add(p * self.kp * PAIR_ELEMS)
    }
}

pub(crate) fn need(m: usize, ld: usize, cols: usize) -> Result<usize, Error> {
    if m == 0 || cols == 0 {
        return Ok(0);
    }
    (m - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(cols))
        .ok_or(Error::Overflow)
}

/// Validates `g` with an output of `c_len` elements and stride `ldc` for `kernel`; writes
/// nothing. The returned context has both output pointers null: the caller sets one.
pub(crate) fn validate(
    kernel: Kernel,
    g: &Gemm<'_>,
    c_len: usize,
    ldc: usize,
) -> Result<Ctx, Error> {
    let (k, n) = (g.w.k(), g.w.n());
    if !kernel.supports(g.w.format()) {
        return Err(Error::FormatMismatch {
            kernel: kernel.name(),
            format: g.w.format(),
        });
    }
    if g.m > 0 && g.lda < k {
        return Err(Error::BadStride {
            what: "A",
            ld: g.lda,
            min: k,
        });
    }
    let need_a = need(g.m, g.lda, k)?;
    if g.a.len() < need_a {
        return Err(Error::BufferTooSmall {
            what: "A",
            needed: need_a,
            got: g.a.len(),
        });
    }
    if g.m > 0 && ldc < n {
        return Err(Error::BadStride {
            what: "C",
            ld: ldc,
            min: n,
        });
    }
    let need_c = need(g.m, ldc, n)?;
    if c_len < need_c {
        return Err(Error::BufferTooSmall {
            what: "C",
            needed: need_c,
            got: c_len,
        });
    }
    if let Some(b) = g.bias {
        if b.len() != n {
            return Err(Error::ShapeMismatch {
                what: "bias length vs N",
                expected: n,
                got: b.len(),
            });
        }
    }
    Ok(Ctx {
        a: match g.a {
            Lhs::F32(a) => APtr::F32(a.as_ptr()),
            Lhs::F16(a) => APtr::F16(a.as_ptr()),
        },
        lda: g.lda,
        m: g.m,
        k,
        kp: k_pairs(k),
        n,
        np: panels(n),
        w: g.w.data().as_ptr(),
        format: g.w.format(),
        c: core::ptr::null_mut(),
        c16: core::ptr::null_mut(),
        ldc,
        accumulate: g.accumulate,
        bias: g.bias.map_or(core::ptr::null(), |b| b.as_ptr()),
    })
}

/// A validated GEMM cut into tiles (a block of rows × one 64-column panel), ready to be run by
/// several threads through [`crate::StealState`]. It holds C mutably borrowed for its lifetime.
#[derive(Debug)]
pub struct GemmPlan<'a> {
    ctx: Ctx,
    kernel: Kernel,
    mb: usize,
    nrb: usize,
    /// Panels per tile (`kernel.tile_panels()`).
    pg: usize,
    _c: core::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: the plan holds raw pointers derived from shared borrows (A, W, bias: only read) and one
// exclusive borrow (C) that lives as long as the plan. Workers reach C only through
// `run_worker`, where the steal state hands each tile index to one worker at most, and distinct
// tiles write disjoint regions of C; so sharing the plan across threads creates no data race.
unsafe impl Sync for GemmPlan<'_> {}
// SAFETY: as above; moving the plan to another thread moves the borrows with it.
unsafe impl Send for GemmPlan<'_> {}

impl<'a> GemmPlan<'a> {
    /// Validates `g` for `kernel` and output `c` (row stride `ldc`); nothing is written yet.
    pub fn new(kernel: Kernel, g: &Gemm<'a>, c: &'a mut [f32], ldc: usize) -> Result<Self, Error> {
        let mut ctx = validate(kernel, g, c.len(), ldc)?;
        // Derived from the exclusive borrow: kernels write through it.
        ctx.c = c.as_mut_ptr();
        Ok(Self::from_ctx(kernel, ctx))
    }

    /// As [`GemmPlan::new`] writing through an [`crate::OutMut`] (rows `0..m`, columns `0..n`
    /// at stride `ldc` of a claim that may cover only those columns: a column split).
    pub fn with_out(
        kernel: Kernel,
        g: &Gemm<'a>,
        mut c: crate::OutMut<'a>,
        ldc: usize,
    ) -> Result<Self, Error> {
        let mut ctx = validate(kernel, g, c.len(), ldc)?;
        // The claim covers every float the plan writes (OutMut's contract).
        ctx.c = c.as_mut_ptr();
        Ok(Self::from_ctx(kernel, ctx))
    }

    /// As [`GemmPlan::new`] with C in FP16 (IEEE binary16 bits, row stride `ldc`): each output is
    /// computed in FP32 exactly as for an FP32 C (for `+=`, the old FP16 value widened to FP32 is
    /// added), then rounded once to FP16 (round to nearest even; beyond ±65504 it becomes ±inf).
    pub fn new_f16(
        kernel: Kernel,
        g: &Gemm<'a>,
        c: &'a mut [u16],
        ldc: usize,
    ) -> Result<Self, Error> {
        let mut ctx = validate(kernel, g, c.len(), ldc)?;
        // Derived from the exclusive borrow: the conversion writes through it.
        ctx.c16 = c.as_mut_ptr();
        Ok(Self::from_ctx(kernel, ctx))
    }

    fn from_ctx(kernel: Kernel, ctx: Ctx) -> Self {
        let mb = kernel.tile_rows().max(1);
        Self {
            ctx,
            kernel,
            mb,
            nrb: ctx.m.div_ceil(mb),
            pg: kernel.tile_panels().max(1),
            _c: core::marker::PhantomData,
        }
    }

    /// Number of tiles: `ceil(M / tile_rows) * ceil(panels / panels_per_tile)`, where a tile is
    /// one 64-column panel for the portable, AVX-512 and NEON kernels and a group of 8 panels
    /// for AMX (it converts A to BF16 once per group) and SME (it packs A once per group and
    /// enters streaming mode once per K chunk for the whole group). Tile `t` covers panel group `t / row_blocks` and row block
    /// `t % row_blocks` (consecutive tiles share their panels).
    pub fn tiles(&self) -> usize {
        self.nrb * self.ctx.np.div_ceil(self.pg)
    }

    /// The kernel this plan runs.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// # Safety
    /// `t` must not be run by two threads at once (tiles write disjoint parts of C, one tile is
    /// one region), and no other access to C may overlap.
    pub(crate) unsafe fn run_tile(&self, t: usize) {
        if t >= self.tiles() {
            return;
        }
        let (g, rb) = (t / self.nrb, t % self.nrb);
        let row0 = rb * self.mb;
        let rows = (self.ctx.m - row0).min(self.mb);
        let p0 = g * self.pg;
        let p1 = (p0 + self.pg).min(self.ctx.np);
        // SAFETY: row0 + rows <= m and p0 < p1 <= np, inside the validated extents; exclusivity
        // of the tile region is the caller's obligation, forwarded.
        unsafe { self.kernel.tile(&self.ctx, row0, rows, p0, p1) }
    }

    /// Runs every tile on the calling thread.
    pub fn run_all(&mut self) {
        for t in 0..self.tiles() {
            // SAFETY: `&mut self` excludes any concurrent run of this plan; tiles run one by one.
            unsafe { self.run_tile(t) }
        }
    }

    /// Runs this worker's share of the tiles: claims from the front of its own range, then
    /// steals from the back of the others' ranges until none is left. Call it from each of the
    /// caller's threads after `state.prepare(plan.tiles())`; C is complete once every worker has
    /// returned (join the threads). Fails if `worker` is out of range for `state` or `state`
    /// was prepared for another tile count.
    pub fn run_worker(&self, state: &crate::StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles(), |t| {
            // SAFETY: the steal state hands out each tile index to exactly one claim.
            unsafe { self.run_tile(t) }
        })
    }
}

/// Largest FP32 scratch an FP16-output tile needs: rows × panels × 64 over every kernel (AVX-512:
/// 48 rows × 1 panel; AMX: up to 64 rows × 8 panels; the others at most 16 × 1).
const F16_SCRATCH: usize = 64 * 8 * PANEL_COLS;

#[repr(C, align(64))]
struct Scratch([f32; F16_SCRATCH]);

/// An FP16-output tile: runs `kernel` on rows `row0..row0+rows` × panels `p0..p1` into an FP32
/// stack scratch (`=`, bias added, exactly the FP32-output arithmetic), then for each output
/// adds the old C widened to FP32 (when accumulating) and rounds once to FP16.
///
/// # Safety
/// As [`Kernel::tile`], with `ctx.c16` non-null (the validated FP16 C).
pub(crate) unsafe fn tile_f16_out(
    kernel: Kernel,
    ctx: &Ctx,
    row0: usize,
    rows: usize,
    p0: usize,
    p1: usize,
) {
    let np = p1 - p0;
    let width = np * PANEL_COLS;
    if rows == 0 || rows * width > F16_SCRATCH {
        return; // not reachable: the plan cuts tiles by tile_rows() and tile_panels()
    }
    let col0 = p0 * PANEL_COLS;
    let cols = (ctx.n - col0).min(width);
    let mut scratch = Scratch([0.0; F16_SCRATCH]);
    // The same problem restricted to the tile: A from row0, W from panel p0, bias from col0, C
    // the scratch (stride `width`), `=`. Every pointer below stays inside the validated extents.
    let sub = Ctx {
        a: match ctx.a {
            APtr::F32(a) => APtr::F32(a.wrapping_add(row0 * ctx.lda)),
            APtr::F16(a) => APtr::F16(a.wrapping_add(row0 * ctx.lda)),
        },
        m: rows,
        n: cols,
        np,
        w: ctx.panel_ptr(p0),
        c: scratch.0.as_mut_ptr(),
        c16: core::ptr::null_mut(),
        ldc: width,
        accumulate: false,
        bias: if ctx.bias.is_null() {
            ctx.bias
        } else {
            ctx.bias.wrapping_add(col0)
        },
        ..*ctx
    };
    // SAFETY: `sub` describes rows 0..rows × panels 0..np of a sub-problem whose every extent
    // lies inside `ctx`'s validated ones (A rows row0.., panels p0..p1, bias columns col0..), and
    // whose C is the scratch (rows × width FP32, exclusively ours).
    unsafe { kernel.tile(&sub, 0, rows, 0, np) };
    for r in 0..rows {
        let src = &scratch.0[r * width..r * width + cols];
        // SAFETY: row row0+r < m and columns col0..col0+cols <= n are inside the validated C,
        // the tile region the caller holds exclusively.
        let dst = unsafe {
            core::slice::from_raw_parts_mut(ctx.c16.add((row0 + r) * ctx.ldc + col0), cols)
        };
        crate::f16out::store(kernel, src, dst, ctx.accumulate);
    }
}
