//! The decompression GEMM for prefill: quantized weights ([`Int8Weight`], every int8 type)
//! dequantized once per matmul into a tile kernel's FP16/BF16 panel, one K block at a time,
//! then multiplied by every row of the activations with the accumulators held in
//! registers/tiles across the K block.
//!
//! - **Tiles** of the plan: [`DQ_GROUP`] 64-column panels of W (one for the `Tile` kernels;
//!   four 16-row groups of the int8 layout each) × a chunk of M rows (all of M unless
//!   [`DqPlan::with_workers`] cuts M so that every thread gets tiles). Per tile and K block of
//!   [`DQ_KB`] values: the panels' blocks are dequantized into a 128 KiB stack scratch in the
//!   packed panel layout (k-pair rows of 64 columns × 2 k, `crate::pack`; for AMX, 1 KiB B
//!   tiles in the order the kernel reads them), then the kernel runs over the tile's rows, `=`
//!   on the first block and `+=` on the next ones. AVX512-BF16 takes a row step at a time over
//!   all the panels (the step's A block stays in L1) and accumulates in y; AMX takes a 32-column
//!   strip at a time over every row of the tile (the strip's 16 KiB of B tiles stay in L1, A
//!   streams in its tile-contiguous order) and keeps C between K blocks in an accumulator slot
//!   of the [`DqActs`] ([`DqActs::with_workers`]): y's rows lie a row stride apart, 16 KiB and
//!   more at real widths, so a tile's C in y shares few cache sets and left L2 on every K
//!   block (measured, one Xeon core, 8B shapes, M = 512: 650-860 GOP/s accumulating in y, ~1,200
//!   with the slots and the tile-ordered B).
//! - **Dequantization** is exact in FP32 (`w = fma(D, u, M)` with `D`, `M` per row and 32 (Q6_K:
//!   16) values, which is ggml's value bit for bit, see [`Int8Weight::value_at`]), then rounded
//!   to nearest even into the panel's FP16 or BF16.
//! - **Kernels** ([`DqKernel`]): `Tile(k)` runs any packed-panel GEMM kernel ([`Kernel`]) on an
//!   FP16 panel (BF16 for AMX) with A as FP32; `Avx512Bf16` (`vdpbf16ps`, 6 rows × 64 columns
//!   in 24 zmm accumulators) and `AmxBf16` (`tdpbf16ps`, 32×32 blocks: two A tiles × two B
//!   tiles into four accumulators per 32-k step, the four held across the K block) read A
//!   converted once per matmul to BF16 in a tile-contiguous layout ([`DqActs`]).
//!
//! Precision: the weights keep ggml's values up to one rounding to FP16 (2^-11 relative) or
//! BF16 (2^-8); BF16 kernels round A to BF16 too; products and sums are FP32.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::gemm::{APtr, Ctx};
use crate::int8::{Int8Fmt, INT8_GROUP};
use crate::pack::{PackedFormat, PAIR_ELEMS, PANEL_COLS};
use crate::{Error, Int8Weight, Kernel, OutMut, StealState, ThreadPool};

#[cfg(target_arch = "x86_64")]
use crate::arch::x86_64::{Amx, Avx512Bf16};

/// K values per dequantized block: a multiple of 256 (no K-quant super-block straddles two
/// blocks); [`DQ_GROUP`] panels × 64 columns × 256 × 2 bytes = 128 KiB of panel scratch per
/// tile (on the stack), L2-resident.
pub const DQ_KB: usize = 256;
/// Panels per tile for the BF16 kernels: for AVX512-BF16 the 96 A rows of a row step × one K
/// block stay in L1 while they multiply all the group's panels, so A is read from L2/L3 once
/// per 256 output columns instead of once per 32; for AMX it sets the dequantization's share
/// (once per tile and K block) and the accumulator slot's width. The `Tile` kernels take one
/// panel.
pub const DQ_GROUP: usize = 4;
/// Rows of [`DqActs`] are padded to a multiple of this (two 16-row AMX A tiles).
pub const DQ_ROW_ALIGN: usize = 32;
/// K of [`DqActs`] is padded to a multiple of this (one 32-value AMX A tile row).
const DQ_K_ALIGN: usize = 32;

/// Which kernel runs the multiply after the dequantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DqKernel {
    /// A packed-panel GEMM kernel ([`Kernel`]) on the dequantized FP16 panel (BF16 for AMX,
    /// the one kernel that reads BF16 only), A read as FP32 (converted by the kernel as it
    /// converts it for the GEMM).
    Tile(Kernel),
    /// AVX512-BF16 `vdpbf16ps` on a BF16 panel and BF16 activations ([`DqActs`]).
    #[cfg(target_arch = "x86_64")]
    Avx512Bf16(Avx512Bf16),
    /// AMX-BF16 `tdpbf16ps` on a BF16 panel and BF16 activations, accumulators in tiles across
    /// each K block (the AVX512-BF16 token dequantizes and converts around it).
    #[cfg(target_arch = "x86_64")]
    AmxBf16(Amx, Avx512Bf16),
}

impl DqKernel {
    /// Every decompression kernel this CPU runs, worst to best: `Tile` of each
    /// [`Kernel::available`], then AVX512-BF16, then AMX-BF16.
    pub fn available() -> Vec<DqKernel> {
        #[allow(unused_mut)] // only x86-64 adds the BF16 kernels
        let mut v: Vec<DqKernel> = Kernel::available()
            .into_iter()
            .map(DqKernel::Tile)
            .collect();
        #[cfg(target_arch = "x86_64")]
        if let Some(b) = Avx512Bf16::try_new() {
            v.push(DqKernel::Avx512Bf16(b));
            if let Some(a) = Amx::try_new() {
                v.push(DqKernel::AmxBf16(a, b));
            }
        }
        v
    }

    /// The best one on this CPU (cached): AMX-BF16, else AVX512-BF16, else the best FP16 tile
    /// kernel. A CPU (or OS: the AMX tile-data permission) without a feature never gets the
    /// kernel that needs it.
    pub fn best() -> DqKernel {
        static K: std::sync::OnceLock<DqKernel> = std::sync::OnceLock::new();
        *K.get_or_init(|| {
            DqKernel::available()
                .pop()
                .unwrap_or(DqKernel::Tile(Kernel::Portable(crate::Portable)))
        })
    }

    /// The kernel's name (`tile-<kernel>`, `avx512-bf16`, `amx-bf16`).
    pub fn name(&self) -> &'static str {
        match self {
            DqKernel::Tile(k) => match k.kind() {
                crate::KernelKind::Portable => "tile-portable",
                crate::KernelKind::Avx2 => "tile-avx2",
                crate::KernelKind::Avx512 => "tile-avx512",
                crate::KernelKind::Amx => "tile-amx-bf16",
                crate::KernelKind::Neon => "tile-neon",
                crate::KernelKind::Sme1 => "tile-sme1",
                crate::KernelKind::Sme2 => "tile-sme2",
            },
            #[cfg(target_arch = "x86_64")]
            DqKernel::Avx512Bf16(_) => "avx512-bf16",
            #[cfg(target_arch = "x86_64")]
            DqKernel::AmxBf16(..) => "amx-bf16",
        }
    }

    /// The panel format the weight is dequantized into.
    pub fn panel_format(&self) -> PackedFormat {
        match self {
            DqKernel::Tile(k) if k.supports(PackedFormat::F16) => PackedFormat::F16,
            _ => PackedFormat::Bf16,
        }
    }

    /// Whether the kernel reads A converted to BF16 ([`DqActs`]) rather than the FP32 rows.
    pub fn bf16_acts(&self) -> bool {
        !matches!(self, DqKernel::Tile(_))
    }

    /// The rounding the kernel applies to A (for tests and tolerances): `None` for exact FP32,
    /// else the format A is rounded to.
    pub fn a_rounding(&self) -> Option<PackedFormat> {
        match self {
            DqKernel::Tile(k) => match k.kind() {
                crate::KernelKind::Amx => Some(PackedFormat::Bf16),
                crate::KernelKind::Sme1 | crate::KernelKind::Sme2 => Some(PackedFormat::F16),
                _ => None,
            },
            #[allow(unreachable_patterns)] // the BF16 kernels exist on x86-64 only
            _ => Some(PackedFormat::Bf16),
        }
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u16; 32]);

/// Activations for a [`DqPlan`]: caller-owned scratch, filled once per matmul by
/// [`DqActs::convert`] (one thread) or [`DqActs::convert_on`] (a pool). For the BF16 kernels
/// it holds A rounded to BF16 (nearest even) in a tile-contiguous layout: element (r, k) at
/// `((r/16)·(K'/32) + k/32)·512 + (r%16)·32 + k%32` (`K'` = K rounded up to 32, rows padded
/// to a multiple of 32 with zeros), so one 16 × 32 AMX A tile is 1 KiB of consecutive bytes.
/// For the `Tile` kernels it only records the shape (they read the FP32 rows).
#[derive(Clone, Default)]
pub struct DqActs {
    buf: Vec<Line>,
    m: usize,
    k: usize,
    bf16: bool,
    acc: AccSlots,
}

/// Contiguous FP32 accumulators for the AMX kernel, one slot per tile running at once: a tile's
/// 32×32 C blocks live here between K blocks instead of in y, whose rows lie a row stride apart
/// (16 KiB and more at real widths: rows at such strides share cache sets, so a tile's C fell out
/// of L2 on every K block, and the tile loads and stores of C took more than half the time).
#[derive(Default)]
struct AccSlots {
    /// Read by the AMX kernel (x86-64 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    buf: Vec<AccLine>,
    /// f32 per slot: rows (a multiple of 32) × `DQ_GROUP` panels of 64 columns.
    slot: usize,
    busy: Box<[AtomicBool]>,
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct AccLine([f32; 16]);

impl core::fmt::Debug for AccSlots {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AccSlots")
            .field("slots", &self.busy.len())
            .field("slot", &self.slot)
            .finish()
    }
}

impl Clone for AccSlots {
    /// Same capacity, all slots free.
    fn clone(&self) -> Self {
        Self::new(self.busy.len(), self.slot)
    }
}

impl AccSlots {
    fn new(slots: usize, slot: usize) -> Self {
        let len = slots.checked_mul(slot).unwrap_or(0);
        Self {
            // NaN: a block read before it was written shows in every output it reaches.
            buf: vec![AccLine([f32::NAN; 16]); len.div_ceil(16)],
            slot,
            busy: (0..if len > 0 { slots } else { 0 })
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    /// A free slot of at least `need` f32, claimed until the guard drops; `None` when every
    /// slot is taken or too small (the caller accumulates in y instead).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn claim(&self, need: usize) -> Option<AccClaim<'_>> {
        if need > self.slot {
            return None;
        }
        for (i, b) in self.busy.iter().enumerate() {
            if !b.load(Ordering::Relaxed)
                && b.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // `i * slot` f32 lie inside buf (slots × slot, rounded up to lines).
                let ptr = self.buf.as_ptr().cast::<f32>().wrapping_add(i * self.slot);
                return Some(AccClaim {
                    busy: b,
                    ptr: ptr.cast_mut(),
                });
            }
        }
        None
    }
}

/// One claimed accumulator slot.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct AccClaim<'a> {
    busy: &'a AtomicBool,
    ptr: *mut f32,
}

impl Drop for AccClaim<'_> {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::Release);
    }
}

impl core::fmt::Debug for DqActs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DqActs")
            .field("m", &self.m)
            .field("k", &self.k)
            .field("bf16", &self.bf16)
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// `u16` elements [`DqActs`] needs for `m` rows of `k` (BF16 kernels), `None` on overflow.
pub fn dq_acts_len(m: usize, k: usize) -> Option<usize> {
    m.checked_next_multiple_of(DQ_ROW_ALIGN)?
        .checked_mul(k.checked_next_multiple_of(DQ_K_ALIGN)?)
}

impl DqActs {
    /// Scratch for any `m × k` with [`dq_acts_len`] at most that of `max_m × max_k`.
    pub fn with_capacity(max_m: usize, max_k: usize) -> Self {
        let e = dq_acts_len(max_m, max_k).unwrap_or(0);
        Self {
            buf: vec![Line([0; 32]); e.div_ceil(32)],
            m: 0,
            k: 0,
            bf16: false,
            acc: AccSlots::default(),
        }
    }

    /// As [`DqActs::with_capacity`], plus FP32 accumulators for `workers` tiles running at once
    /// (`max_m` rows × 256 columns each: 512 KiB a worker at 512 rows), which the AMX kernel
    /// keeps C in between K blocks (1.4-1.9× as fast at 8B widths as accumulating in y;
    /// without them, or when more tiles run at once than there are slots, it accumulates in
    /// y). A pool of T threads running plans on these activations needs `workers = T`.
    pub fn with_workers(max_m: usize, max_k: usize, workers: usize) -> Self {
        let slot = max_m
            .checked_next_multiple_of(DQ_ROW_ALIGN)
            .and_then(|r| r.checked_mul(DQ_GROUP * PANEL_COLS))
            .unwrap_or(0);
        Self {
            acc: AccSlots::new(workers, slot),
            ..Self::with_capacity(max_m, max_k)
        }
    }

    /// Accumulator slots (`workers` of [`DqActs::with_workers`]; 0 from `with_capacity`).
    pub fn workers(&self) -> usize {
        self.acc.busy.len()
    }

    /// `u16` elements the scratch holds.
    pub fn capacity(&self) -> usize {
        self.buf.len() * 32
    }

    /// Rows and K of the last conversion.
    pub fn shape(&self) -> (usize, usize) {
        (self.m, self.k)
    }

    fn check(&self, kernel: DqKernel, x: &[f32], m: usize, k: usize) -> Result<usize, Error> {
        let need_x = m.checked_mul(k).ok_or(Error::Overflow)?;
        if x.len() < need_x {
            return Err(Error::BufferTooSmall {
                what: "x",
                needed: need_x,
                got: x.len(),
            });
        }
        if !kernel.bf16_acts() {
            return Ok(0);
        }
        let need = dq_acts_len(m, k).ok_or(Error::Overflow)?;
        if self.capacity() < need {
            return Err(Error::BufferTooSmall {
                what: "DqActs capacity",
                needed: need,
                got: self.capacity(),
            });
        }
        Ok(need)
    }

    fn elems_mut(&mut self, len: usize) -> &mut [u16] {
        // SAFETY: `Line` is repr(C) [u16; 32] (no padding), so the Vec's storage is
        // `32·buf.len()` initialized u16, borrowed exclusively; `len <= capacity` (checked).
        unsafe { core::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<u16>(), len) }
    }

    pub(crate) fn elems(&self) -> *const u16 {
        self.buf.as_ptr().cast::<u16>()
    }

    /// Converts `x` (`m` rows of `k`, row-major) for `kernel` on this thread. Errors (nothing
    /// changed): `BufferTooSmall` (x, or the capacity), `Overflow`.
    pub fn convert(
        &mut self,
        kernel: DqKernel,
        x: &[f32],
        m: usize,
        k: usize,
    ) -> Result<(), Error> {
        let need = self.check(kernel, x, m, k)?;
        let blk = 16 * k.next_multiple_of(DQ_K_ALIGN);
        if need > 0 {
            let e = self.elems_mut(need);
            for (b, chunk) in e.chunks_mut(blk).enumerate() {
                convert_block(kernel, x, m, k, b, chunk);
            }
        }
        (self.m, self.k, self.bf16) = (m, k, kernel.bf16_acts());
        Ok(())
    }

    /// As [`DqActs::convert`], the 16-row blocks spread over `pool`'s threads.
    pub fn convert_on(
        &mut self,
        kernel: DqKernel,
        x: &[f32],
        m: usize,
        k: usize,
        pool: &ThreadPool,
    ) -> Result<(), Error> {
        let need = self.check(kernel, x, m, k)?;
        let blk = 16 * k.next_multiple_of(DQ_K_ALIGN);
        if need > 0 {
            let e = self.elems_mut(need);
            pool.run_chunks_mut(e, blk, &|b, _, chunk| {
                convert_block(kernel, x, m, k, b, chunk)
            })
            .map_err(|_| Error::Overflow)?;
        }
        (self.m, self.k, self.bf16) = (m, k, kernel.bf16_acts());
        Ok(())
    }
}

/// Rows `16b..16b+16` of `x` into the tile-contiguous BF16 block `dst` (`16·K'` elements),
/// zero past `m` and `k`.
fn convert_block(kernel: DqKernel, x: &[f32], m: usize, k: usize, b: usize, dst: &mut [u16]) {
    let kt = k.div_ceil(DQ_K_ALIGN);
    for r in 0..16 {
        let row = 16 * b + r;
        for t in 0..kt {
            let d = &mut dst[t * 512 + r * 32..t * 512 + r * 32 + 32];
            if row >= m {
                d.fill(0);
                continue;
            }
            let k0 = 32 * t;
            let kn = (k - k0).min(32);
            let src = &x[row * k + k0..row * k + k0 + kn];
            #[cfg(target_arch = "x86_64")]
            if let DqKernel::Avx512Bf16(t) | DqKernel::AmxBf16(_, t) = kernel {
                t.to_bf16(src, d);
                continue;
            }
            let _ = kernel;
            for (o, &v) in d.iter_mut().zip(src) {
                *o = half::bf16::from_f32(v).to_bits();
            }
            d[kn..].fill(0);
        }
    }
}

/// A validated decompression GEMM `y[M×N] = x[M×K] · Wᵀ` cut into tiles of one 64-column
/// panel × a chunk of rows, ready for several threads through [`StealState`]; allocates
/// nothing. The output is written (`=`), never read before.
#[derive(Debug)]
pub struct DqPlan<'a> {
    kernel: DqKernel,
    w: &'a Int8Weight,
    x: *const f32,
    /// Read by the BF16 kernels (x86-64 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    acts: *const u16,
    /// The AMX kernel's accumulator slots (x86-64 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    accs: &'a AccSlots,
    m: usize,
    n: usize,
    k: usize,
    y: *mut f32,
    ldy: usize,
    /// Rows per tile (a multiple of 32, or all of M).
    rows: usize,
    _y: PhantomData<&'a mut [f32]>,
}

// SAFETY: the plan holds pointers from shared borrows (w, x, acts: only read) and one
// exclusive claim (y) for its lifetime; tiles write disjoint regions of y (one panel's columns
// of one row chunk) and the steal state hands each tile to one worker.
unsafe impl Sync for DqPlan<'_> {}
// SAFETY: as above.
unsafe impl Send for DqPlan<'_> {}

impl<'a> DqPlan<'a> {
    /// Validates the product of `w` with `x` (`m` rows of `w.k()`, row-major; `acts` holding
    /// it converted for `kernel` by [`DqActs::convert`], same `m` and K) into `y` (row stride
    /// `ldy ≥ N`). Errors (nothing written): `ShapeMismatch` (acts of another shape, or not
    /// converted for this kernel), `BufferTooSmall`, `BadStride`, `Overflow`.
    pub fn new(
        kernel: DqKernel,
        w: &'a Int8Weight,
        x: &'a [f32],
        acts: &'a DqActs,
        y: OutMut<'a>,
        ldy: usize,
    ) -> Result<Self, Error> {
        let (m, n, k) = (acts.m, w.n(), w.k());
        if acts.k != k {
            return Err(Error::ShapeMismatch {
                what: "K of the DqActs vs the weight",
                expected: k,
                got: acts.k,
            });
        }
        if m > 0 && acts.bf16 != kernel.bf16_acts() {
            return Err(Error::ShapeMismatch {
                what: "DqActs converted for a kernel with the other A format (bf16 = 1)",
                expected: kernel.bf16_acts() as usize,
                got: acts.bf16 as usize,
            });
        }
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
        let need = crate::gemm::need(m, ldy, n)?;
        if y.len() < need {
            return Err(Error::BufferTooSmall {
                what: "y",
                needed: need,
                got: y.len(),
            });
        }
        Ok(Self {
            kernel,
            w,
            x: x.as_ptr(),
            acts: acts.elems(),
            accs: &acts.acc,
            m,
            n,
            k,
            y: y.ptr,
            ldy,
            rows: m.max(1),
            _y: PhantomData,
        })
    }

    /// The same plan with M cut into chunks (multiples of 32 rows) so that there are at least
    /// about two tiles per worker (each chunk dequantizes its panel again: a small cost against
    /// an idle thread).
    pub fn with_workers(self, workers: usize) -> Self {
        let groups = self.col_groups();
        self.with_workers_in_set(workers, groups)
    }

    /// [`DqPlan::with_workers`] for a plan that runs in one job with others (a
    /// [`crate::PlanSet`]: Q, K and V, say): `set_groups` is the [`DqPlan::col_groups`] of every
    /// plan of the set together, so M is cut only as far as the whole set needs to give each of
    /// `workers` about two tiles (each cut dequantizes the weight again: K and V alone would be
    /// cut eight ways at 16 threads, with Q beside them two).
    pub fn with_workers_in_set(self, workers: usize, set_groups: usize) -> Self {
        let panels = set_groups.max(1);
        let want = (2 * workers.max(1)).div_ceil(panels);
        let chunks = want.clamp(1, self.m.div_ceil(DQ_ROW_ALIGN).max(1));
        let rows = self
            .m
            .div_ceil(chunks)
            .next_multiple_of(DQ_ROW_ALIGN)
            .max(1);
        Self { rows, ..self }
    }

    /// The kernel.
    pub fn kernel(&self) -> DqKernel {
        self.kernel
    }

    fn row_chunks(&self) -> usize {
        self.m.div_ceil(self.rows)
    }

    /// Panels per tile: [`DQ_GROUP`] for the BF16 kernels, 1 for `Tile`.
    fn group(&self) -> usize {
        if self.kernel.bf16_acts() {
            DQ_GROUP
        } else {
            1
        }
    }

    /// Column groups (of [`DQ_GROUP`] 64-column panels; one panel for the `Tile` kernels): the
    /// tiles of one row chunk.
    pub fn col_groups(&self) -> usize {
        self.n.div_ceil(PANEL_COLS).div_ceil(self.group())
    }

    /// Rows multiplied per pass over the tile's panels (a multiple of 32); AMX: all of them, a
    /// 32-column strip at a time (its B tiles from L1, A streaming: faster than a 32-row step
    /// over the panels with A in L1, measured).
    fn row_step(&self) -> usize {
        match self.kernel {
            DqKernel::Tile(_) => usize::MAX,
            #[cfg(target_arch = "x86_64")]
            DqKernel::Avx512Bf16(_) => 96,
            #[cfg(target_arch = "x86_64")]
            DqKernel::AmxBf16(..) => usize::MAX,
        }
    }

    /// Number of tiles: panel groups × row chunks.
    pub fn tiles(&self) -> usize {
        if self.m == 0 {
            return 0;
        }
        self.col_groups() * self.row_chunks()
    }

    /// # Safety
    /// Tile `t` must not run on two threads at once.
    pub(crate) unsafe fn run_tile(&self, t: usize) {
        if t >= self.tiles() {
            return;
        }
        let rc = self.row_chunks();
        let (pg, ch) = (t / rc, t % rc);
        let row0 = ch * self.rows;
        let rows = (self.m - row0).min(self.rows);
        let np = self.n.div_ceil(PANEL_COLS);
        let p0 = pg * self.group();
        let p1 = (p0 + self.group()).min(np);
        let format = self.kernel.panel_format();
        let mut scratch = Panel([0; DQ_GROUP * PANEL_ELEMS]);
        let step = self.row_step();
        #[cfg(target_arch = "x86_64")]
        if let DqKernel::AmxBf16(a, _) = self.kernel {
            // SAFETY: the token proves AMX and the permission; released below on this thread,
            // and nothing between uses other tile state (the dequantizer is AVX-512 only).
            unsafe { crate::arch::x86_64::amx_configure(a) };
        }
        // The AMX kernel's C between K blocks: a claimed slot (rows × the group's columns) or,
        // without one, y itself.
        #[cfg(target_arch = "x86_64")]
        let claim = match self.kernel {
            DqKernel::AmxBf16(..) if self.k > DQ_KB => self
                .accs
                .claim(rows.next_multiple_of(DQ_ROW_ALIGN) * DQ_GROUP * PANEL_COLS),
            _ => None,
        };
        #[cfg(target_arch = "x86_64")]
        let acc = claim.as_ref().map_or(core::ptr::null_mut(), |c| c.ptr);
        #[cfg(not(target_arch = "x86_64"))]
        let acc = core::ptr::null_mut();
        let mut k0 = 0;
        while k0 < self.k {
            let kn = (self.k - k0).min(DQ_KB);
            for p in p0..p1 {
                let dst = &mut scratch.0[(p - p0) * PANEL_ELEMS..(p - p0 + 1) * PANEL_ELEMS];
                dequant_panel(self.kernel, self.w, p, k0, kn, format, dst);
            }
            // Row steps outside, panels inside: a step's A block serves every panel from L1
            // (AMX: one step of all the tile's rows, the kernel walking its strips).
            let mut r = row0;
            while r < row0 + rows {
                let rr = (row0 + rows - r).min(step);
                for p in p0..p1 {
                    let col0 = p * PANEL_COLS;
                    let blk = Block {
                        k0,
                        kn,
                        row0: r,
                        rows: rr,
                        col0,
                        cols: (self.n - col0).min(PANEL_COLS),
                        first: k0 == 0,
                        last: k0 + kn >= self.k,
                        w: scratch.0[(p - p0) * PANEL_ELEMS..].as_ptr(),
                        acc,
                        acc_row0: row0,
                        acc_col0: p0 * PANEL_COLS,
                    };
                    // SAFETY: the block lies inside the validated extents (rows of x/acts < m,
                    // columns of y < n; r is row0 plus a multiple of 32); the tile's region of
                    // y is exclusively this call's (forwarded).
                    unsafe { self.multiply(&blk) };
                }
                r += rr;
            }
            k0 += kn;
        }
        #[cfg(target_arch = "x86_64")]
        if let DqKernel::AmxBf16(a, _) = self.kernel {
            // SAFETY: configured above on this thread.
            unsafe { crate::arch::x86_64::amx_release(a) };
        }
    }

    /// # Safety
    /// As [`Self::run_tile`], for the block's region.
    unsafe fn multiply(&self, b: &Block) {
        match self.kernel {
            DqKernel::Tile(kern) => {
                let sub = Ctx {
                    a: APtr::F32(self.x.wrapping_add(b.row0 * self.k + b.k0)),
                    lda: self.k,
                    m: b.rows,
                    k: b.kn,
                    kp: b.kn / 2,
                    n: b.cols,
                    np: 1,
                    w: b.w,
                    format: self.kernel.panel_format(),
                    c: self.y.wrapping_add(b.row0 * self.ldy + b.col0),
                    c16: core::ptr::null_mut(),
                    ldc: self.ldy,
                    accumulate: !b.first,
                    bias: core::ptr::null(),
                };
                let tr = kern.tile_rows().max(1);
                let mut r = 0;
                while r < b.rows {
                    let rr = (b.rows - r).min(tr);
                    // SAFETY: `sub` is the block as a GEMM of its own: A rows row0.. of x (k
                    // columns kept by lda), the scratch panel (kn/2 pair rows of one panel),
                    // C the tile's region of y (stride ldy); r + rr <= rows, panel 0 of 1.
                    unsafe { kern.tile(&sub, r, rr, 0, 1) };
                    r += rr;
                }
            }
            #[cfg(target_arch = "x86_64")]
            DqKernel::Avx512Bf16(t) => {
                // SAFETY: forwarded; acts were converted for this shape (checked in `new`).
                unsafe { t.dq_block(self.acts, self.k, b, self.y, self.ldy) }
            }
            #[cfg(target_arch = "x86_64")]
            DqKernel::AmxBf16(a, t) => {
                // SAFETY: forwarded, as above.
                unsafe { t.dq_block_amx(a, self.acts, self.k, b, self.y, self.ldy, self.m, self.n) }
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
    pub fn run_worker(&self, state: &StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles(), |t| {
            // SAFETY: each tile index is handed to exactly one claim.
            unsafe { self.run_tile(t) }
        })
    }
}

/// One K block of one tile, for the kernels.
pub(crate) struct Block {
    /// First k of the block and its length (a multiple of 32).
    pub k0: usize,
    pub kn: usize,
    /// Rows of the tile.
    pub row0: usize,
    pub rows: usize,
    /// Columns of the tile (one panel).
    pub col0: usize,
    pub cols: usize,
    /// `=` (the first block) or `+=`.
    pub first: bool,
    /// The last K block (the AMX kernel stores C into y, not its accumulator).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub last: bool,
    /// The dequantized panel: `kn/2` k-pair rows of [`PAIR_ELEMS`] (AMX: the same values in
    /// its B-tile order, `crate::arch::x86_64::dq_panel_amx`).
    pub w: *const u16,
    /// The tile's accumulator slot (null: accumulate in y), its first row and column: the
    /// 32×32 block at (r, c) of the tile is 1024 f32 (32 rows of 32) at
    /// `((r - acc_row0)/32 · (DQ_GROUP·64/32) + (c - acc_col0)/32) · 1024`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub acc: *mut f32,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub acc_row0: usize,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub acc_col0: usize,
}

/// Elements of one panel's dequantized K block.
const PANEL_ELEMS: usize = DQ_KB * PAIR_ELEMS / 2;

#[repr(C, align(64))]
struct Panel([u16; DQ_GROUP * PANEL_ELEMS]);

/// `D`, `M` (f32, `w = fma(D, u, M)`) of rows `0..16` of group `g` for the 32-value chunk `c`
/// (index of the chunk in the row), per half (values 0..16, 16..32: Q6_K's sub-blocks of 16;
/// the same for the others).
pub(crate) fn chunk_scales(
    w: &Int8Weight,
    g: usize,
    c: usize,
    d: &mut [[f32; 16]; 2],
    mm: &mut [[f32; 16]; 2],
) {
    let fmt = w.fmt();
    let sw = fmt.scale_words();
    let per = fmt.block() / 32;
    let (b, sub) = (c / per, c % per);
    let rec = &w.scale_words()[(g * w.blocks() + b) * sw..][..sw];
    let f16 = |x: u16| half::f16::from_bits(x).to_f32();
    let byte = |at: usize| (rec[at / 2] >> (8 * (at % 2))) as u8;
    for j in 0..INT8_GROUP {
        let dd = f16(rec[j]);
        for h in 0..2 {
            let (dv, mv) = match fmt {
                Int8Fmt::Q4_0 | Int8Fmt::Q5_0 | Int8Fmt::Q8_0 => (dd, fmt.offset() as f32 * dd),
                Int8Fmt::Q4_1 | Int8Fmt::Q5_1 => (dd, f16(rec[INT8_GROUP + j])),
                Int8Fmt::Q4K | Int8Fmt::Q5K => {
                    let sc = byte(64 + 16 * sub + j) as f32;
                    let m = byte(192 + 32 * (sub / 2) + 2 * j + sub % 2) as f32;
                    (dd * sc, -(f16(rec[INT8_GROUP + j]) * m))
                }
                Int8Fmt::Q6K => {
                    let sc = byte(32 + 16 * (2 * sub + h) + j) as i8 as f32;
                    let dsc = dd * sc;
                    (dsc, -32.0 * dsc)
                }
            };
            d[h][j] = dv;
            mm[h][j] = mv;
        }
    }
}

/// Dequantizes columns `64p..64p+64` (zero past N) × values `k0..k0+kn` of `w` into `dst` in
/// the packed panel layout of `format` (`kn/2` k-pair rows).
fn dequant_panel(
    kernel: DqKernel,
    w: &Int8Weight,
    p: usize,
    k0: usize,
    kn: usize,
    format: PackedFormat,
    dst: &mut [u16],
) {
    #[cfg(target_arch = "x86_64")]
    if let DqKernel::AmxBf16(..) = kernel {
        // SAFETY: the AMX kernel's token carries AVX512-BF16 (and the CPU has AVX-512F and
        // F16C with it); `dst` holds kn/2 pair rows.
        unsafe { crate::arch::x86_64::dq_panel_amx(w, p, k0, kn, dst) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let fast = matches!(
            kernel,
            DqKernel::Avx512Bf16(_)
                | DqKernel::AmxBf16(..)
                | DqKernel::Tile(Kernel::Avx512(_) | Kernel::Amx(_))
        );
        if fast {
            // SAFETY: every kernel above proves AVX-512F (the Avx512Bf16 token, the Avx512 and
            // Amx tokens); `dst` holds kn/2 pair rows (the tile's scratch).
            unsafe { crate::arch::x86_64::dq_panel_avx512(w, p, k0, kn, format, dst) };
            return;
        }
    }
    let _ = kernel;
    dequant_panel_portable(w, p, k0, kn, format, dst);
}

/// The portable dequantizer (the definition the SIMD ones match bit for bit).
pub(crate) fn dequant_panel_portable(
    w: &Int8Weight,
    p: usize,
    k0: usize,
    kn: usize,
    format: PackedFormat,
    dst: &mut [u16],
) {
    let groups = w.groups();
    let per_panel = PANEL_COLS / INT8_GROUP;
    let mut d = [[0f32; 16]; 2];
    let mut mm = [[0f32; 16]; 2];
    for gg in 0..per_panel {
        let g = p * per_panel + gg;
        for c in k0 / 32..(k0 + kn) / 32 {
            let q0 = (c * 32 - k0) / 2;
            if g >= groups {
                for q in q0..q0 + 16 {
                    dst[q * PAIR_ELEMS + 32 * gg..q * PAIR_ELEMS + 32 * gg + 32].fill(0);
                }
                continue;
            }
            chunk_scales(w, g, c, &mut d, &mut mm);
            for j in 0..INT8_GROUP {
                for e in 0..32 {
                    let u = w.u_in_group(g, j, c, e) as f32;
                    let v = d[e / 16][j].mul_add(u, mm[e / 16][j]);
                    let bits = match format {
                        PackedFormat::F16 => half::f16::from_f32(v).to_bits(),
                        PackedFormat::Bf16 => half::bf16::from_f32(v).to_bits(),
                    };
                    let q = q0 + e / 2;
                    dst[q * PAIR_ELEMS + 2 * (16 * gg + j) + e % 2] = bits;
                }
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX-512 dequantizer writes the portable one's bits, for every format, both panel
    /// formats, a panel with a partial group and one past N, K blocks whole and partial.
    #[test]
    fn avx512_dequantizer_is_bit_identical_to_portable() {
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("f16c"))
        {
            eprintln!("SKIP: no AVX-512F");
            return;
        }
        let mut s = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let n = 70;
        for ty in crate::INT8_TYPES {
            let k = if ty.is_k_quant() {
                DQ_KB + 256
            } else {
                DQ_KB + 32
            };
            let vals: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            let rb = ty.row_bytes(k).unwrap();
            let mut bytes = vec![0u8; n * rb + 1];
            // pack_gguf reads blocks with u16 fields: start at an even address.
            let off = bytes.as_ptr().align_offset(2).min(1);
            for r in 0..n {
                let dst = &mut bytes[off + r * rb..off + (r + 1) * rb];
                crate::quantize_row(ty, &vals[r * k..(r + 1) * k], dst).unwrap();
            }
            let w = Int8Weight::pack_gguf(ty, &bytes[off..off + n * rb], n, k).unwrap();
            for p in 0..2 {
                let mut k0 = 0;
                while k0 < k {
                    let kn = (k - k0).min(DQ_KB);
                    for format in [PackedFormat::F16, PackedFormat::Bf16] {
                        let mut a = vec![0xFFFFu16; kn / 2 * PAIR_ELEMS];
                        let mut b = vec![0x7777u16; kn / 2 * PAIR_ELEMS];
                        dequant_panel_portable(&w, p, k0, kn, format, &mut a);
                        // SAFETY: AVX-512F and F16C checked above; b holds kn/2 pair rows.
                        unsafe {
                            crate::arch::x86_64::dq_panel_avx512(&w, p, k0, kn, format, &mut b)
                        };
                        assert!(a == b, "{ty:?} panel {p} k0 {k0} {format:?}");
                        if format == PackedFormat::Bf16 {
                            let mut c = vec![0x5555u16; kn / 2 * PAIR_ELEMS];
                            // SAFETY: as above.
                            unsafe {
                                crate::arch::x86_64::dq_panel_avx512_int_round(
                                    &w, p, k0, kn, &mut c,
                                )
                            };
                            assert!(a == c, "{ty:?} panel {p} k0 {k0}: integer BF16 rounding");
                            if std::arch::is_x86_feature_detected!("avx512bf16") {
                                // The AMX B-tile order: the same values, each pair row of 16
                                // columns where the layout's formula puts it.
                                let mut t = vec![0x3333u16; kn / 2 * PAIR_ELEMS];
                                // SAFETY: AVX-512F, F16C, AVX512-BF16 checked; kn/2 pair rows.
                                unsafe { crate::arch::x86_64::dq_panel_amx(&w, p, k0, kn, &mut t) };
                                let steps = kn / 32;
                                for q in 0..kn / 2 {
                                    for gg in 0..PANEL_COLS / 16 {
                                        let src = q * PAIR_ELEMS + 32 * gg;
                                        let dst = (((gg / 2) * steps + q / 16) * 2 + gg % 2) * 512
                                            + (q % 16) * 32;
                                        assert!(
                                            a[src..src + 32] == t[dst..dst + 32],
                                            "{ty:?} panel {p} k0 {k0}: AMX tile order q {q} gg {gg}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                    k0 += kn;
                }
            }
        }
    }
}
