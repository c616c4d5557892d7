//! AVX-512 kernels: GEMM on the packed FP16/BF16 panels and the quantized GEMV.
//!
//! GEMM micro-kernel: up to 6 rows × 32 columns (half a panel). One k-pair row of a half panel is
//! 32 columns × 2 k = 64 elements = four zmm of FP32 after `vcvtph2ps`, lanes ordered
//! `[c0k0, c0k1, c1k0, c1k1, ...]`; each A row contributes the pair `(a[2q], a[2q+1])` broadcast
//! as one 64-bit value, so one FMA per zmm accumulates both k of a pair in adjacent lanes; the
//! two lanes of a column are summed once at the end (`vpermt2ps` even/odd + add). Registers: 24
//! accumulators, 4 weight vectors and 1 broadcast, 29 of the 32 zmm. K is cut into chunks of 128 k-pairs so
//! a half-panel chunk (16 KiB) stays in L1 while the row groups of the tile reuse it.

use core::arch::x86_64::*;

use super::Avx512;
use crate::gemm::{APtr, Ctx};
use crate::pack::{PackedFormat, PAIR_ELEMS, PANEL_COLS};
use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QCtx, WPtr, QK};

/// Rows of A per tile.
pub(crate) const AVX512_TILE_ROWS: usize = 48;
const MR: usize = 6;
const KC: usize = 128;

impl Avx512 {
    /// # Safety
    /// As [`crate::Kernel::tile`].
    pub(crate) unsafe fn gemm_tile(self, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
        // SAFETY: the token proves avx512f+f16c+fma; the rest is forwarded.
        unsafe {
            match ctx.format {
                PackedFormat::F16 => tile::<false>(ctx, row0, rows, p),
                PackedFormat::Bf16 => tile::<true>(ctx, row0, rows, p),
            }
        }
    }

    /// # Safety
    /// As [`crate::Kernel::gemv_rows`].
    pub(crate) unsafe fn gemv_rows(self, ctx: &QCtx, n0: usize, n1: usize) {
        // SAFETY: the token proves the features; the rest is forwarded.
        unsafe { qgemv_dispatch(ctx, n0, n1) }
    }
}

#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn tile<const BF16: bool>(ctx: &Ctx, row0: usize, rows: usize, p: usize) {
    let cols = ctx.panel_cols(p);
    let panel = ctx.panel_ptr(p);
    let mut abuf = [0f32; MR * 2 * KC];
    let mut q0 = 0;
    loop {
        let qn = (ctx.kp - q0).min(KC);
        let last = q0 + qn >= ctx.kp;
        let first = q0 == 0;
        // Up to 2 rows: one pass over whole 256-byte k-pair rows (8 weight vectors, a plain
        // stream for the prefetcher; the decode / GEMV case). More rows: half panels, 6 rows.
        let full = rows <= 2;
        for half in 0..(if full { 1 } else { 2 }) {
            let hcols = if full {
                cols
            } else {
                cols.saturating_sub(32 * half).min(32)
            };
            if hcols == 0 {
                continue;
            }
            let w = panel.wrapping_add(q0 * PAIR_ELEMS + half * 64);
            let col0 = p * PANEL_COLS + half * 32;
            let bias = if first && !ctx.bias.is_null() {
                ctx.bias.wrapping_add(col0)
            } else {
                core::ptr::null()
            };
            let load_c = !first || ctx.accumulate;
            let mut i = row0;
            while i < row0 + rows {
                let r = (row0 + rows - i).min(MR);
                // Pairs whose both k are inside K; the odd last k (if any) is the tail.
                let odd_tail = last && ctx.k % 2 == 1;
                let (a, lda, pairs, tail) = match ctx.a {
                    APtr::F32(a) => (
                        a.wrapping_add(i * ctx.lda + 2 * q0),
                        ctx.lda,
                        qn - odd_tail as usize,
                        odd_tail,
                    ),
                    APtr::F16(a) => {
                        // Convert the r × (2 qn) block to FP32, zero past K.
                        let kk0 = 2 * q0;
                        let kn = (ctx.k - kk0).min(2 * qn);
                        for rr in 0..r {
                            let dst = &mut abuf[rr * 2 * KC..(rr + 1) * 2 * KC];
                            // SAFETY: row i+rr < m, columns kk0..kk0+kn < k: inside A.
                            let src = unsafe {
                                core::slice::from_raw_parts(a.add((i + rr) * ctx.lda + kk0), kn)
                            };
                            // SAFETY: f16c is enabled for this function.
                            unsafe { cvt_f16_row(src, &mut dst[..kn]) };
                            dst[kn..2 * qn].fill(0.0);
                        }
                        (abuf.as_ptr(), 2 * KC, qn, false)
                    }
                };
                let c = ctx.c.wrapping_add(i * ctx.ldc + col0);
                let args = Uk {
                    a,
                    lda,
                    pairs,
                    tail,
                    w,
                    c,
                    ldc: ctx.ldc,
                    cols: hcols,
                    load_c,
                    bias,
                };
                // SAFETY: a covers r rows of `pairs` pairs (+1 element when tail) inside A or
                // abuf; w covers qn k-pairs of this half panel; c covers r rows × hcols columns
                // of the caller's tile; bias (if non-null) covers hcols elements.
                unsafe {
                    match (full, r) {
                        (true, 1) => uk::<1, 8, BF16>(&args),
                        (true, _) => uk::<2, 8, BF16>(&args),
                        (false, 1) => uk::<1, 4, BF16>(&args),
                        (false, 2) => uk::<2, 4, BF16>(&args),
                        (false, 3) => uk::<3, 4, BF16>(&args),
                        (false, 4) => uk::<4, 4, BF16>(&args),
                        (false, 5) => uk::<5, 4, BF16>(&args),
                        (false, _) => uk::<6, 4, BF16>(&args),
                    }
                }
                i += r;
            }
        }
        q0 += qn;
        if q0 >= ctx.kp {
            break;
        }
    }
}

/// FP16 → FP32 for a short row.
///
/// # Safety
/// F16C must be available; `dst.len() >= src.len()`.
#[target_feature(enable = "avx512f,f16c")]
unsafe fn cvt_f16_row(src: &[u16], dst: &mut [f32]) {
    let n = src.len();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n elements are inside both slices.
        unsafe {
            let v = _mm512_cvtph_ps(_mm256_loadu_si256(src.as_ptr().add(i) as *const __m256i));
            _mm512_storeu_ps(dst.as_mut_ptr().add(i), v);
        }
        i += 16;
    }
    while i < n {
        dst[i] = crate::portable::f16_to_f32(src[i]);
        i += 1;
    }
}

struct Uk {
    a: *const f32,
    lda: usize,
    pairs: usize,
    tail: bool,
    w: *const u16,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    load_c: bool,
    bias: *const f32,
}

/// 16 packed elements (8 columns × 2 k) to FP32.
#[inline(always)]
unsafe fn load_w<const BF16: bool>(p: *const u16) -> __m512 {
    // SAFETY: the caller guarantees 16 readable u16 at p; features enabled by the caller.
    unsafe {
        let v = _mm256_loadu_si256(p as *const __m256i);
        if BF16 {
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)))
        } else {
            _mm512_cvtph_ps(v)
        }
    }
}

/// # Safety
/// See the call site in `tile`: `a` readable for R rows (stride lda) of `2*pairs` (+1 if tail)
/// f32; `w` readable for `pairs + tail` k-pair rows (stride 128) of `16 * NW` u16; `c` writable (and
/// readable if load_c) for R rows (stride ldc) of `cols` f32; bias null or `cols` readable f32.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn uk<const R: usize, const NW: usize, const BF16: bool>(u: &Uk) {
    let mut acc = [[_mm512_setzero_ps(); NW]; R];
    // SAFETY: every pointer offset below stays inside the extents in this function's contract.
    unsafe {
        for q in 0..u.pairs {
            let wp = u.w.add(q * PAIR_ELEMS);
            let mut ws = [_mm512_setzero_ps(); NW];
            for (j, wv) in ws.iter_mut().enumerate() {
                *wv = load_w::<BF16>(wp.add(16 * j));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let pair = core::ptr::read_unaligned(u.a.add(r * u.lda + 2 * q) as *const f64);
                let av = _mm512_castpd_ps(_mm512_set1_pd(pair));
                for j in 0..NW {
                    acc_r[j] = _mm512_fmadd_ps(av, ws[j], acc_r[j]);
                }
            }
        }
        if u.tail {
            let q = u.pairs;
            let wp = u.w.add(q * PAIR_ELEMS);
            let mut ws = [_mm512_setzero_ps(); NW];
            for (j, wv) in ws.iter_mut().enumerate() {
                *wv = load_w::<BF16>(wp.add(16 * j));
            }
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // Only a[2q] exists; the pair is (a[2q], 0).
                let a0 = *u.a.add(r * u.lda + 2 * q);
                let av = _mm512_castsi512_ps(_mm512_set1_epi64(a0.to_bits() as i64));
                for j in 0..NW {
                    acc_r[j] = _mm512_fmadd_ps(av, ws[j], acc_r[j]);
                }
            }
        }
        let even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        let odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        for (r, acc_r) in acc.iter().enumerate() {
            for h in 0..NW / 2 {
                let cnt = u.cols.saturating_sub(16 * h).min(16);
                if cnt == 0 {
                    continue;
                }
                let mask: __mmask16 = ((1u32 << cnt) - 1) as u16;
                let (x0, x1) = (acc_r[2 * h], acc_r[2 * h + 1]);
                let mut s = _mm512_add_ps(
                    _mm512_permutex2var_ps(x0, even, x1),
                    _mm512_permutex2var_ps(x0, odd, x1),
                );
                if !u.bias.is_null() {
                    s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask, u.bias.add(16 * h)));
                }
                let dst = u.c.add(r * u.ldc + 16 * h);
                if u.load_c {
                    s = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), s);
                }
                _mm512_mask_storeu_ps(dst, mask, s);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Quantized GEMV.
//
// Q4 per block and weight row, 7 zmm instructions (objdump of the M = 1 loop): a 16-entry FP32
// lookup table scaled by the block's scale (`vmulps` with a broadcast memory operand, Q4_1
// `vfmadd`; the scales of 16 consecutive blocks are gathered with scalar loads and converted by
// one `vcvtph2ps` per chunk, no per-block FP16 conversion), `vpmovzxbd` of the 16 quant bytes,
// one `vpsrld`, two `vpermd` (the lookup: it reads only the low 4 bits of each index, so the
// low nibble needs no mask) and two FMAs per x row. (Tried and slower here: `vpmovzxbd` + mask
// + `vcvtdq2ps`; a broadcast load + `vpsrlvd` with 4×4-transposed x.) Zen 4 runs this at
// about 4-5 cycles per block and row: the three FMA-pipe and three shuffle instructions share
// ports, so M = 1 is bound by vector issue, not by memory, at about half the read bandwidth. Dequantized values are exact (`(q-8)·d` and `q·d` fit in FP32; Q4_1 `q·d + m`
// rounds once, as GGUF's own dequantization does).
//
// Batch invariance: every (x row, weight row) pair runs the same operation sequence whatever
// the register block (G x rows × R weight rows) it sits in: one accumulator, `acc = fma(lo, x0,
// acc); acc = fma(hi, x1, acc)` per block in block order, one `_mm512_reduce_add_ps` at the end.
// So a row's result is bit-identical for any M and any split of N into tiles.

/// Blocks whose scales are converted together (one `vcvtph2ps zmm`).
const SC: usize = 16;

/// Decodes one block into two zmm of 16 scaled FP32 values (elements 0..15, 16..31).
trait Dec {
    type B;
    /// Whether blocks carry a minimum (`m`) as well as a scale.
    const HAS_MIN: bool;
    /// # Safety
    /// `b` points to a readable block.
    unsafe fn d(b: *const Self::B) -> u16;
    /// # Safety
    /// `b` points to a readable block.
    unsafe fn m(_b: *const Self::B) -> u16 {
        0
    }
    /// # Safety
    /// `b` points to a readable block; avx512f+f16c+fma enabled by the caller. `d` (and `m`)
    /// are the block's converted scale (and minimum).
    unsafe fn dec(b: *const Self::B, d: f32, m: f32) -> (__m512, __m512);
}

/// Converts the scales (and minimums when `D::HAS_MIN`) of the `cnt <= SC` blocks at `b` into
/// `ds` / `ms` (entries past `cnt` are zero).
///
/// # Safety
/// `b..b+cnt` readable blocks; avx512f+f16c enabled by the caller.
#[inline(always)]
unsafe fn scales<D: Dec>(b: *const D::B, cnt: usize, ds: &mut [f32; SC], ms: &mut [f32; SC]) {
    // Four scales per u64 with scalar shifts (integer ALUs, idle in this loop), then put into a
    // vector register without a memory round trip: an element-wise copy into a u16 array became
    // a `vpinsrw` chain (a vector shuffle per block, on the ports the lookups need), and a
    // 32-byte reload of smaller stores defeats store forwarding.
    let mut hd = [0u64; SC / 4];
    let mut hm = [0u64; SC / 4];
    // SAFETY: only j < cnt are read: readable blocks (caller).
    let get = |f: unsafe fn(*const D::B) -> u16, j: usize| unsafe { f(b.add(j)) as u64 };
    if cnt >= SC {
        // Straight-line (registers only) for the full chunk.
        for (i, (h, m)) in hd.iter_mut().zip(hm.iter_mut()).enumerate() {
            let j = 4 * i;
            *h = get(D::d, j)
                | get(D::d, j + 1) << 16
                | get(D::d, j + 2) << 32
                | get(D::d, j + 3) << 48;
            if D::HAS_MIN {
                *m = get(D::m, j)
                    | get(D::m, j + 1) << 16
                    | get(D::m, j + 2) << 32
                    | get(D::m, j + 3) << 48;
            }
        }
    } else {
        for j in 0..cnt {
            hd[j / 4] |= get(D::d, j) << (16 * (j % 4));
            if D::HAS_MIN {
                hm[j / 4] |= get(D::m, j) << (16 * (j % 4));
            }
        }
    }
    let v = |h: [u64; SC / 4]| {
        // SAFETY: avx512f+f16c enabled by the caller (the closure is inlined into it).
        unsafe {
            _mm512_cvtph_ps(_mm256_set_epi64x(
                h[3] as i64,
                h[2] as i64,
                h[1] as i64,
                h[0] as i64,
            ))
        }
    };
    // SAFETY: 16-float arrays on the stack; avx512f enabled by the caller.
    unsafe {
        _mm512_storeu_ps(ds.as_mut_ptr(), v(hd));
        if D::HAS_MIN {
            _mm512_storeu_ps(ms.as_mut_ptr(), v(hm));
        }
    }
}

/// The 16 quant bytes of a Q4 block as 16 dwords; lookups of the low nibble use the dword
/// directly (`vpermps` reads bits 0..3), of the high nibble after a shift by 4.
///
/// # Safety
/// `qs` points to 16 readable bytes; avx512f enabled by the caller.
#[inline(always)]
unsafe fn q4_lookup(qs: *const u8, t: __m512) -> (__m512, __m512) {
    // SAFETY: 16 bytes readable (caller).
    unsafe {
        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs as *const __m128i));
        (
            _mm512_permutexvar_ps(q, t),
            _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(q), t),
        )
    }
}

struct D40;
impl Dec for D40 {
    type B = BlockQ4_0;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn d(b: *const BlockQ4_0) -> u16 {
        // SAFETY: b readable (caller).
        unsafe { (*b).d }
    }
    #[inline(always)]
    unsafe fn dec(b: *const BlockQ4_0, d: f32, _m: f32) -> (__m512, __m512) {
        // SAFETY: b readable (caller); 16 bytes of qs inside the block.
        unsafe {
            let q = _mm512_setr_ps(
                -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0,
                7.0,
            );
            q4_lookup((*b).qs.as_ptr(), _mm512_mul_ps(q, _mm512_set1_ps(d)))
        }
    }
}

struct D41;
impl Dec for D41 {
    type B = BlockQ4_1;
    const HAS_MIN: bool = true;
    #[inline(always)]
    unsafe fn d(b: *const BlockQ4_1) -> u16 {
        // SAFETY: b readable (caller).
        unsafe { (*b).d }
    }
    #[inline(always)]
    unsafe fn m(b: *const BlockQ4_1) -> u16 {
        // SAFETY: b readable (caller).
        unsafe { (*b).m }
    }
    #[inline(always)]
    unsafe fn dec(b: *const BlockQ4_1, d: f32, m: f32) -> (__m512, __m512) {
        // SAFETY: as D40.
        unsafe {
            let q = _mm512_setr_ps(
                0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0,
                15.0,
            );
            let t = _mm512_fmadd_ps(q, _mm512_set1_ps(d), _mm512_set1_ps(m));
            q4_lookup((*b).qs.as_ptr(), t)
        }
    }
}

struct D80;
impl Dec for D80 {
    type B = BlockQ8_0;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn d(b: *const BlockQ8_0) -> u16 {
        // SAFETY: b readable (caller).
        unsafe { (*b).d }
    }
    #[inline(always)]
    unsafe fn dec(b: *const BlockQ8_0, d: f32, _m: f32) -> (__m512, __m512) {
        // SAFETY: b readable; 32 bytes of qs inside the block.
        unsafe {
            let d = _mm512_set1_ps(d);
            let p = (*b).qs.as_ptr() as *const __m128i;
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(1))));
            (_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d))
        }
    }
}

/// # Safety
/// As [`crate::Kernel::gemv_rows`], with the AVX-512 features present.
unsafe fn qgemv_dispatch(ctx: &QCtx, n0: usize, n1: usize) {
    // SAFETY: forwarded; m <= 16 was validated.
    unsafe {
        match ctx.w {
            WPtr::Q4_0(w) => qrows::<D40>(ctx, w, n0, n1),
            WPtr::Q4_1(w) => qrows::<D41>(ctx, w, n0, n1),
            WPtr::Q8_0(w) => qrows::<D80>(ctx, w, n0, n1),
        }
    }
}

/// Rows `n0..n1` of W against the M rows of x, in register blocks of up to 4 rows of x × 4 rows
/// of W (M = 1: 1 × 8 while 8 rows remain): each x vector loaded feeds 4 weight rows and each dequantized weight vector feeds up to
/// 4 x rows (so x, which is re-read per weight row group from L1/L2, costs a quarter of what a
/// row-at-a-time loop costs); the weight rows of a group stay in L1 across x-row groups, so
/// memory sees each weight byte once.
///
/// # Safety
/// `w` is ctx's validated block pointer; `n0 <= n1 <= ctx.n`; exclusive access to y columns
/// `n0..n1`; avx512f+f16c+fma present.
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn qrows<D: Dec>(ctx: &QCtx, w: *const D::B, n0: usize, n1: usize) {
    macro_rules! by_g {
        ($r:literal, $g:expr, $m0:expr, $n:expr) => {
            match $g {
                1 => blk::<1, $r, D>(ctx, w, $m0, $n),
                2 => blk::<2, $r, D>(ctx, w, $m0, $n),
                3 => blk::<3, $r, D>(ctx, w, $m0, $n),
                _ => blk::<4, $r, D>(ctx, w, $m0, $n),
            }
        };
    }
    let mut n = n0;
    if ctx.m == 1 {
        while n1 - n >= 8 {
            // SAFETY: rows n..n+8 <= n1, x row 0 < m = 1; forwarded otherwise.
            unsafe { blk::<1, 8, D>(ctx, w, 0, n) };
            n += 8;
        }
    }
    while n < n1 {
        let four = n1 - n >= 4;
        let mut m0 = 0;
        while m0 < ctx.m {
            let g = (ctx.m - m0).min(4);
            // SAFETY: rows n..n+R <= n1 and x rows m0..m0+g <= m; forwarded otherwise.
            unsafe {
                if four {
                    by_g!(4, g, m0, n)
                } else {
                    by_g!(1, g, m0, n)
                }
            }
            m0 += g;
        }
        n += if four { 4 } else { 1 };
    }
}

/// One register block: x rows `m0..m0+G` × weight rows `n..n+R`, over all of K, in chunks of
/// [`SC`] blocks whose scales are converted up front (on the stack: no allocation).
///
/// # Safety
/// `m0 + G <= ctx.m`, `n + R <= ctx.n`; the rest as [`qrows`].
#[inline]
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn blk<const G: usize, const R: usize, D: Dec>(
    ctx: &QCtx,
    w: *const D::B,
    m0: usize,
    n: usize,
) {
    let nb = ctx.k / QK;
    let mut acc = [[_mm512_setzero_ps(); R]; G];
    let mut ds = [[0f32; SC]; R];
    let mut ms = [[0f32; SC]; R];
    // Bytes of W one block column of this register block covers, and where the next one starts.
    let step = R * core::mem::size_of::<D::B>();
    let next = w.wrapping_add((n + R) * nb) as *const u8;
    let pf = m0 == 0;
    // SAFETY: block (n+r)*nb + b < N*nb; x offsets (m0+g)*k + 32b + 32 <= M*k; y (m0+g, n+r)
    // inside the validated y, in columns the caller owns.
    unsafe {
        let mut b0 = 0;
        while b0 < nb {
            let cnt = (nb - b0).min(SC);
            for r in 0..R {
                scales::<D>(w.add((n + r) * nb + b0), cnt, &mut ds[r], &mut ms[r]);
            }
            for j in 0..cnt {
                let b = b0 + j;
                if pf {
                    // The next register block's rows are the next R·nb blocks of W, contiguous:
                    // prefetch them linearly, `step` bytes per block step, so they are in cache
                    // one register block ahead and the hardware prefetcher's ramp-up on each new
                    // group of short rows is hidden (M = 1 on 4096×28672, side by side: 7.8 →
                    // 9.5 GiB/s).
                    // Only the first x-row group prefetches. Wrapping arithmetic: the address
                    // may lie past W; prefetches never fault.
                    let p = next.wrapping_add(b * step);
                    for i in 0..step.div_ceil(64) + 1 {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * i) as *const i8);
                    }
                }
                let mut wl = [_mm512_setzero_ps(); R];
                let mut wh = [_mm512_setzero_ps(); R];
                for r in 0..R {
                    let (l, h) = D::dec(w.add((n + r) * nb + b), ds[r][j], ms[r][j]);
                    wl[r] = l;
                    wh[r] = h;
                }
                for (g, ag) in acc.iter_mut().enumerate() {
                    let xp = ctx.x.add((m0 + g) * ctx.k + b * QK);
                    let x0 = _mm512_loadu_ps(xp);
                    let x1 = _mm512_loadu_ps(xp.add(16));
                    for (a, (l, h)) in ag.iter_mut().zip(wl.iter().zip(&wh)) {
                        *a = _mm512_fmadd_ps(*l, x0, *a);
                        *a = _mm512_fmadd_ps(*h, x1, *a);
                    }
                }
            }
            b0 += cnt;
        }
        for (g, ag) in acc.iter().enumerate() {
            for (r, a) in ag.iter().enumerate() {
                *ctx.y.add((m0 + g) * ctx.ldy + n + r) = _mm512_reduce_add_ps(*a);
            }
        }
    }
}
