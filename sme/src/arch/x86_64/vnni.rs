//! AVX-512 VNNI int8 GEMM on [`crate::Int8Weight`] (see `src/int8.rs` for the format and the
//! arithmetic it must reproduce bit for bit). The K-quant micro-kernel is in `vnni_k.rs`.
//!
//! Micro-kernel: `MR` (≤ 8) activation rows × one 16-row weight group, over all of K. Per 32-k
//! block: the group's `u` is 4 (Q4: two nibble operands each, split with `vpand` / `vpsrlw` +
//! `vpand`; Q5_0/Q5_1 merge bit 4 from the chunk's fifth 64-byte vector, the bit plane, with a
//! shift and a `vpternlogd`) or 8 (Q8) 64-byte `vpdpbusd` operands; each activation row's 4
//! k-bytes are broadcast
//! (`vpbroadcastd` from memory) and `vpdpbusd` accumulates the exact block integer in an i32
//! vector whose lane `j` is output `j` of the group. Then per row: `vcvtdq2ps`, one `vmulps`
//! (`d_w · d_x`), one FMA into the f32 accumulator (Q4_1: one more FMA, `m_w · s_x`). For
//! `MR ≤ 4` each row has two integer chains (Q4: low / high nibbles; Q8: even / odd k steps) so
//! the `vpdpbusd` latency is hidden; the integer sum is the same. There the high nibbles are
//! used in place (`u·16`, one `vpand` instead of a shift and a mask) and their chain is shifted
//! right by 4 once per block and row (exact: each of its products is a multiple of 16, at most
//! 16·16·15·127 in magnitude). No horizontal reduction: lanes are outputs.

use core::arch::x86_64::*;

use crate::blocks::QK_K;
use crate::int8::{Ctx, Int8Fmt, INT8_GROUP};
use crate::quant::QK;
use crate::{BlockMeta, SuperMeta};

/// Capability token: proves AVX-512F, AVX-512BW and AVX-512 VNNI (the int8 GEMM's `vpdpbusd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vnni {
    _p: (),
}

impl Vnni {
    /// `Some` when the CPU (and OS, through XCR0) supports AVX-512F, BW and VNNI.
    pub fn try_new() -> Option<Self> {
        (std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni"))
        .then_some(Self { _p: () })
    }

    /// # Safety
    /// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI, with AVX-512 state enabled by
    /// the OS.
    pub unsafe fn new_unchecked() -> Self {
        Self { _p: () }
    }

    /// Quantizes `blocks` consecutive 32-float blocks of `x` into `q` (32 bytes each) and `meta`.
    ///
    /// # Safety
    /// `x` readable for `32·blocks` floats, `q` writable for `32·blocks` bytes, `meta` for
    /// `blocks` records.
    pub(crate) unsafe fn quantize(
        self,
        x: *const f32,
        blocks: usize,
        q: *mut i8,
        meta: *mut BlockMeta,
    ) {
        // SAFETY: the token proves the features; the rest is forwarded.
        unsafe { quantize_impl(x, blocks, q, meta) }
    }

    /// Quantizes `blocks` consecutive 256-float super-blocks of `x` into `q` (256 bytes each)
    /// and `meta`.
    ///
    /// # Safety
    /// `x` readable for `256·blocks` floats, `q` writable for `256·blocks` bytes, `meta` for
    /// `blocks` records.
    pub(crate) unsafe fn quantize_super(
        self,
        x: *const f32,
        blocks: usize,
        q: *mut i8,
        meta: *mut SuperMeta,
    ) {
        for b in 0..blocks {
            // SAFETY: the token proves the features; super-block b < blocks is inside the
            // caller's buffers.
            unsafe { quantize_super_impl(x.add(b * QK_K), q.add(b * QK_K), meta.add(b)) }
        }
    }

    /// # Safety
    /// As [`crate::Int8Kernel`]'s `tile`: `ctx` validated, `r0 + rows <= ctx.m`,
    /// `g0 <= g1 <= ceil(n/16)`, exclusive access to that region of y.
    pub(crate) unsafe fn tile(self, ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
        // SAFETY: the token proves the features; the rest is forwarded.
        unsafe {
            match ctx.fmt {
                Int8Fmt::Q4_0 => tile_impl::<0>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q4_1 => tile_impl::<1>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q8_0 => tile_impl::<2>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q5_0 => tile_impl::<3>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q5_1 => tile_impl::<4>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q4K => super::vnni_k::tile_k::<0>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q5K => super::vnni_k::tile_k::<1>(ctx, r0, rows, g0, g1),
                Int8Fmt::Q6K => super::vnni_k::tile_k::<2>(ctx, r0, rows, g0, g1),
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quantize_impl(x: *const f32, blocks: usize, q: *mut i8, meta: *mut BlockMeta) {
    let full = blocks / 16 * 16;
    let mut blk0 = 0;
    while blk0 < full {
        // SAFETY: blocks blk0..blk0+16 are inside the caller's buffers (blk0 + 16 <= blocks).
        unsafe { quantize16(x.add(blk0 * QK), q.add(blk0 * QK), meta.add(blk0)) };
        blk0 += 16;
    }
    for blk in full..blocks {
        // SAFETY: blk < blocks: the 32 floats, 32 bytes and one record are inside the caller's
        // buffers.
        unsafe {
            let a = _mm512_loadu_ps(x.add(blk * QK));
            let b = _mm512_loadu_ps(x.add(blk * QK + 16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
            // The same scalar operations as the portable `quantize_block`.
            let d = amax / 127.0;
            let inv = if d > 0.0 { 127.0 / amax } else { 0.0 };
            let vinv = _mm512_set1_ps(inv);
            const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
            let lo = _mm512_set1_epi32(-127);
            let hi = _mm512_set1_epi32(127);
            let ia = _mm512_cvt_roundps_epi32::<RNE>(_mm512_mul_ps(a, vinv));
            let ia = _mm512_min_epi32(_mm512_max_epi32(ia, lo), hi);
            let ib = _mm512_cvt_roundps_epi32::<RNE>(_mm512_mul_ps(b, vinv));
            let ib = _mm512_min_epi32(_mm512_max_epi32(ib, lo), hi);
            _mm_storeu_si128(q.add(blk * QK).cast(), _mm512_cvtepi32_epi8(ia));
            _mm_storeu_si128(q.add(blk * QK + 16).cast(), _mm512_cvtepi32_epi8(ib));
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(ia, ib));
            meta.add(blk).write(BlockMeta {
                d,
                s: d * sum as f32,
                n8: -8 * sum,
                n128: -128 * sum,
            });
        }
    }
}

/// One 256-float super-block: the same IEEE operations as the portable `quantize_super` (the
/// maximum and the integer sums are exact in any order; the per-16 sums come out of
/// [`reduce16`] as one vector).
///
/// # Safety
/// `x` readable for 256 floats, `q` writable for 256 bytes, `meta` for one record.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quantize_super_impl(x: *const f32, q: *mut i8, meta: *mut SuperMeta) {
    // SAFETY: every load and store is within the super-block the caller provides.
    unsafe {
        let mut mx = _mm512_setzero_ps();
        for i in 0..16 {
            mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x.add(16 * i))));
        }
        let amax = _mm512_reduce_max_ps(mx);
        // The same scalar operations as the portable `quantize_super`.
        let inv = if amax / 127.0 > 0.0 {
            127.0 / amax
        } else {
            0.0
        };
        let d = if inv > 0.0 { 1.0 / inv } else { 0.0 };
        let vinv = _mm512_set1_ps(inv);
        const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let mut sums = [_mm512_setzero_ps(); 16];
        for (i, sm) in sums.iter_mut().enumerate() {
            let v = _mm512_cvt_roundps_epi32::<RNE>(_mm512_mul_ps(
                _mm512_loadu_ps(x.add(16 * i)),
                vinv,
            ));
            // |x·inv| <= 127·(1 + 3·2⁻²⁴) rounds to at most 127: the saturating pack equals the
            // portable clamp for finite input.
            _mm_storeu_si128(q.add(16 * i).cast(), _mm512_cvtsepi32_epi8(v));
            *sm = _mm512_castsi512_ps(v);
        }
        let mut s16 = [0i32; 16];
        _mm512_storeu_si512(
            s16.as_mut_ptr().cast(),
            _mm512_castps_si512(reduce16::<true>(&sums)),
        );
        meta.write(SuperMeta {
            d,
            bsums32: core::array::from_fn(|j| (s16[2 * j] + s16[2 * j + 1]) as i16),
            n32: s16.map(|s| -32 * s),
        });
    }
}

/// `max` of floats (`ADD = false`) or wrapping add of i32 lanes (`ADD = true`).
///
/// # Safety
/// AVX-512F.
#[inline(always)]
unsafe fn op2<const ADD: bool>(a: __m512, b: __m512) -> __m512 {
    // SAFETY: register-only intrinsics; AVX-512F is the caller's.
    unsafe {
        if ADD {
            _mm512_castsi512_ps(_mm512_add_epi32(
                _mm512_castps_si512(a),
                _mm512_castps_si512(b),
            ))
        } else {
            _mm512_max_ps(a, b)
        }
    }
}

/// Lane `i` of the result = max (or i32 sum) over all lanes of `v[i]`: a transpose-reduce tree
/// (15 ops and 30 shuffles for 16 vectors, then one permute). Max of non-negative floats and
/// wrapping integer adds are exact in any order, so the result equals any other reduction.
/// (No closures here: a closure would not inherit the caller's target features.)
///
/// # Safety
/// AVX-512F.
#[inline(always)]
pub(super) unsafe fn reduce16<const ADD: bool>(v: &[__m512; 16]) -> __m512 {
    // SAFETY: register-only intrinsics; AVX-512F is the caller's.
    unsafe {
        // Level 1: 256-bit halves. t[i] quadrants 0,1: v[2i] folded; 2,3: v[2i+1] folded.
        let mut t = [_mm512_setzero_ps(); 8];
        for i in 0..8 {
            let (a, b) = (v[2 * i], v[2 * i + 1]);
            t[i] = op2::<ADD>(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xEE>(a, b),
            );
        }
        // Level 2: 128-bit quadrants. u[j] quadrant c: v[4j + c] folded to 4 lanes.
        let mut u = [_mm512_setzero_ps(); 4];
        for j in 0..4 {
            let (a, b) = (t[2 * j], t[2 * j + 1]);
            u[j] = op2::<ADD>(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xDD>(a, b),
            );
        }
        // Level 3: 64-bit pairs. w[l] quadrant c: lanes 0,1 = v[8l + c], lanes 2,3 = v[8l+4+c].
        let mut w = [_mm512_setzero_ps(); 2];
        for l in 0..2 {
            let (a, b) = (_mm512_castps_pd(u[2 * l]), _mm512_castps_pd(u[2 * l + 1]));
            w[l] = op2::<ADD>(
                _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)),
            );
        }
        // Level 4: lane 4c + e = v[4e + c] fully reduced.
        let f = op2::<ADD>(
            _mm512_shuffle_ps::<0x88>(w[0], w[1]),
            _mm512_shuffle_ps::<0xDD>(w[0], w[1]),
        );
        // Lane i takes lane 4(i % 4) + i / 4 (a 4x4 transpose).
        let idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        _mm512_permutexvar_ps(idx, f)
    }
}

/// Sixteen consecutive blocks at once: the per-block maxima and sums come out of
/// [`reduce16`] as vectors, so the scalar divisions and horizontal reductions of the one-block
/// path become one vector division and two trees. Bit-identical to `quantize_block`: max and
/// integer sums are exact in any order; `d`, `inv`, `x·inv`, RNE rounding and `d·Σq` are the same
/// IEEE operations; `|x·inv| <= 127·(1 + 3·2⁻²⁴)` rounds to at most 127, so the portable clamp
/// never changes a finite value (saturating packs keep non-finite input memory-safe).
///
/// # Safety
/// `x` readable for 512 floats, `q` writable for 512 bytes, `meta` for 16 records; AVX-512F/BW.
#[inline(always)]
unsafe fn quantize16(x: *const f32, q: *mut i8, meta: *mut BlockMeta) {
    // SAFETY: all loads/stores are within the 16 blocks the caller provides.
    unsafe {
        let mut mx = [_mm512_setzero_ps(); 16];
        for (i, m) in mx.iter_mut().enumerate() {
            let a = _mm512_loadu_ps(x.add(i * QK));
            let b = _mm512_loadu_ps(x.add(i * QK + 16));
            *m = _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b));
        }
        let amax = reduce16::<false>(&mx);
        let d = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(d, _mm512_setzero_ps());
        let inv = _mm512_maskz_div_ps(pos, _mm512_set1_ps(127.0), amax);
        let mut invs = [0f32; 16];
        _mm512_storeu_ps(invs.as_mut_ptr(), inv);
        const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let mut sums = [_mm512_setzero_ps(); 16];
        for (i, sm) in sums.iter_mut().enumerate() {
            let vi = _mm512_set1_ps(invs[i]);
            let a = _mm512_loadu_ps(x.add(i * QK));
            let b = _mm512_loadu_ps(x.add(i * QK + 16));
            let ia = _mm512_cvt_roundps_epi32::<RNE>(_mm512_mul_ps(a, vi));
            let ib = _mm512_cvt_roundps_epi32::<RNE>(_mm512_mul_ps(b, vi));
            _mm_storeu_si128(q.add(i * QK).cast(), _mm512_cvtsepi32_epi8(ia));
            _mm_storeu_si128(q.add(i * QK + 16).cast(), _mm512_cvtsepi32_epi8(ib));
            *sm = _mm512_castsi512_ps(_mm512_add_epi32(ia, ib));
        }
        let sum = _mm512_castps_si512(reduce16::<true>(&sums));
        let s = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum));
        let n8 = _mm512_mullo_epi32(sum, _mm512_set1_epi32(-8));
        let n128 = _mm512_mullo_epi32(sum, _mm512_set1_epi32(-128));
        let (mut da, mut sa) = ([0f32; 16], [0f32; 16]);
        let (mut n8a, mut n128a) = ([0i32; 16], [0i32; 16]);
        _mm512_storeu_ps(da.as_mut_ptr(), d);
        _mm512_storeu_ps(sa.as_mut_ptr(), s);
        _mm512_storeu_si512(n8a.as_mut_ptr().cast(), n8);
        _mm512_storeu_si512(n128a.as_mut_ptr().cast(), n128);
        for i in 0..16 {
            meta.add(i).write(BlockMeta {
                d: da[i],
                s: sa[i],
                n8: n8a[i],
                n128: n128a[i],
            });
        }
    }
}

/// `F`: 0 = Q4_0, 1 = Q4_1, 2 = Q8_0, 3 = Q5_0, 4 = Q5_1.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_impl<const F: u8>(ctx: &Ctx, r0: usize, rows: usize, g0: usize, g1: usize) {
    let end = r0 + rows;
    for g in g0..g1 {
        let lanes = (ctx.n - g * INT8_GROUP).min(INT8_GROUP);
        let mask: __mmask16 = if lanes >= 16 {
            0xFFFF
        } else {
            ((1u32 << lanes) - 1) as __mmask16
        };
        let mut r = r0;
        // SAFETY: every call has r + MR <= end <= m and g < ng (the tile contract), and forwards
        // the exclusive access to these outputs.
        unsafe {
            while end - r >= 8 {
                micro::<8, F>(ctx, g, r, mask);
                r += 8;
            }
            match end - r {
                0 => {}
                1 => micro::<1, F>(ctx, g, r, mask),
                2 => micro::<2, F>(ctx, g, r, mask),
                3 => micro::<3, F>(ctx, g, r, mask),
                4 => micro::<4, F>(ctx, g, r, mask),
                5 => micro::<5, F>(ctx, g, r, mask),
                6 => micro::<6, F>(ctx, g, r, mask),
                _ => micro::<7, F>(ctx, g, r, mask),
            }
        }
    }
}

/// Broadcast of the 4 bytes at `p` (unaligned).
///
/// # Safety
/// `p` readable for 4 bytes; AVX-512F.
#[inline(always)]
pub(super) unsafe fn bcast4(p: *const i8) -> __m512i {
    // SAFETY: forwarded.
    unsafe { _mm512_set1_epi32(p.cast::<i32>().read_unaligned()) }
}

/// Rows `r0..r0+MR` × group `g`, all of K; stores the group's valid lanes (`mask`).
///
/// # Safety
/// `r0 + MR <= ctx.m`, `g < ceil(n/16)`, `mask` has only lanes `< n - 16g`; exclusive access
/// to those outputs; AVX-512F/BW/VNNI (guaranteed by the caller's target features).
#[inline(always)]
unsafe fn micro<const MR: usize, const F: u8>(ctx: &Ctx, g: usize, r0: usize, mask: __mmask16) {
    let nb = ctx.nb;
    let q4 = F != 2;
    let q5 = F >= 3;
    let affine = F == 1 || F == 4;
    let (qb, sw) = match F {
        2 => (INT8_GROUP * QK, INT8_GROUP),
        _ => (
            INT8_GROUP * QK / 2 + if q5 { 64 } else { 0 },
            if affine { 2 * INT8_GROUP } else { INT8_GROUP },
        ),
    };
    let split = MR <= 4;
    // SAFETY: every pointer below stays inside the validated buffers: the group's nb records of
    // qb bytes and sw words, rows r0..r0+MR of q (k bytes each) and meta (nb records each), and
    // the masked lanes of rows r0..r0+MR of y. Aligned loads of u: the storage is 64-byte
    // aligned and qb is a multiple of 64.
    unsafe {
        let u = ctx.u.add(g * nb * qb);
        let s = ctx.s.add(g * nb * sw);
        let xq: [*const i8; MR] = core::array::from_fn(|i| ctx.q.add((r0 + i) * ctx.k));
        let meta: [*const BlockMeta; MR] = core::array::from_fn(|i| ctx.meta.add((r0 + i) * nb));
        let m0f = _mm512_set1_epi8(15);
        let mf0 = _mm512_set1_epi8(0xF0u8 as i8);
        let mut acc = [_mm512_setzero_ps(); MR];
        for b in 0..nb {
            let ub = u.add(b * qb);
            let sb = s.add(b * sw);
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(sb.cast()));
            let mut i0 = [_mm512_setzero_si512(); MR];
            let mut i1 = [_mm512_setzero_si512(); MR];
            for i in 0..MR {
                let mt = meta[i].add(b);
                i0[i] = match F {
                    0 => _mm512_set1_epi32((*mt).n8),
                    2 => _mm512_set1_epi32((*mt).n128),
                    3 => _mm512_set1_epi32(2 * (*mt).n8),
                    _ => _mm512_setzero_si512(),
                };
            }
            let xb = b * QK;
            if q4 {
                let hb = if q5 {
                    _mm512_load_si512(ub.add(256).cast())
                } else {
                    _mm512_setzero_si512()
                };
                for v in 0..4 {
                    let raw = _mm512_load_si512(ub.add(v * 64).cast());
                    let mut lo = _mm512_and_si512(raw, m0f);
                    // Split chains on 4-bit formats: the high nibbles stay in place (16·u, one
                    // AND) and their chain is divided by 16 once per block (exact: every
                    // product is a multiple of 16). Otherwise (one chain, or Q5's merged fifth
                    // bit) they are shifted down to u.
                    let mut hi = if split && !q5 {
                        _mm512_and_si512(raw, mf0)
                    } else {
                        _mm512_and_si512(_mm512_srli_epi16::<4>(raw), m0f)
                    };
                    if q5 {
                        (lo, hi) = merge_bit4(lo, hi, hb, v);
                    }
                    for i in 0..MR {
                        let xa = bcast4(xq[i].add(xb + 4 * v));
                        let xh = bcast4(xq[i].add(xb + 16 + 4 * v));
                        i0[i] = _mm512_dpbusd_epi32(i0[i], lo, xa);
                        if split {
                            i1[i] = _mm512_dpbusd_epi32(i1[i], hi, xh);
                        } else {
                            i0[i] = _mm512_dpbusd_epi32(i0[i], hi, xh);
                        }
                    }
                }
            } else {
                for st in 0..8 {
                    let wv = _mm512_load_si512(ub.add(st * 64).cast());
                    for i in 0..MR {
                        let xa = bcast4(xq[i].add(xb + 4 * st));
                        if split && st % 2 == 1 {
                            i1[i] = _mm512_dpbusd_epi32(i1[i], wv, xa);
                        } else {
                            i0[i] = _mm512_dpbusd_epi32(i0[i], wv, xa);
                        }
                    }
                }
            }
            let mw = if affine {
                _mm512_cvtph_ps(_mm256_loadu_si256(sb.add(INT8_GROUP).cast()))
            } else {
                _mm512_setzero_ps()
            };
            for i in 0..MR {
                let isum = if !split {
                    i0[i]
                } else if q4 && !q5 {
                    _mm512_add_epi32(i0[i], _mm512_srai_epi32::<4>(i1[i]))
                } else {
                    _mm512_add_epi32(i0[i], i1[i])
                };
                let mt = meta[i].add(b);
                // Same order as the portable oracle: (d_w · d_x), then fma, then Q4_1's fma.
                let sc = _mm512_mul_ps(dw, _mm512_set1_ps((*mt).d));
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[i]);
                if affine {
                    acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps((*mt).s), acc[i]);
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(ctx.y.add((r0 + i) * ctx.ldy + g * INT8_GROUP), mask, *a);
        }
    }
}

/// Adds bit 4 to the nibble operands of vector `v` of a Q5 chunk from its plane `hb` (byte
/// `4j + i`: bit `v` for the low-nibble element, bit `4 + v` for the high one): 16-bit shifts
/// move each byte's bit into place without crossing bytes (left by `4 − v` ≤ 4 from bit `v`,
/// right by `v` from bit `4 + v`), one AND keeps it, one `vpternlogd` ORs it in.
///
/// # Safety
/// AVX-512F/BW (the caller's target features).
#[inline(always)]
pub(super) unsafe fn merge_bit4(
    lo: __m512i,
    hi: __m512i,
    hb: __m512i,
    v: usize,
) -> (__m512i, __m512i) {
    // SAFETY: register-only intrinsics; AVX-512F/BW are the caller's.
    unsafe {
        let m10 = _mm512_set1_epi8(0x10);
        let (l, h) = match v {
            0 => (_mm512_slli_epi16::<4>(hb), hb),
            1 => (_mm512_slli_epi16::<3>(hb), _mm512_srli_epi16::<1>(hb)),
            2 => (_mm512_slli_epi16::<2>(hb), _mm512_srli_epi16::<2>(hb)),
            _ => (_mm512_slli_epi16::<1>(hb), _mm512_srli_epi16::<3>(hb)),
        };
        // 0xF8: A | (B & C).
        (
            _mm512_ternarylogic_epi32::<0xF8>(lo, l, m10),
            _mm512_ternarylogic_epi32::<0xF8>(hi, h, m10),
        )
    }
}
