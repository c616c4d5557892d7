//! x86-64 parts of the decompression GEMM (`src/dq.rs`): the AVX-512 dequantizer into FP16 /
//! BF16 panels, the activations' BF16 conversion, the AVX512-BF16 micro-kernel and the AMX-BF16
//! block kernel.
//!
//! Dequantizer, per (16-row group, 32-value chunk) of the int8 layout: each of the 8 k-steps
//! is one 64-byte vector of `u` (byte `4j + i` = row `j`, value `4·step + i`: the nibble
//! vectors shifted and masked with dword operations, the high-bit planes merged), widened a
//! quarter (4 rows × 4 values) at a time to FP32, `fma(D, u, M)` with the rows' scales
//! broadcast by `vpermps`, rounded to FP16 (`vcvtps2ph`) or BF16 (integer round to nearest
//! even), and the two k-pairs of each row separated by two `vpermt2d` into the panel's k-pair
//! rows (16 columns × 2 k = 64 bytes each). Bit-identical to the portable dequantizer.

use core::arch::asm;
use core::arch::x86_64::*;

use super::{Amx, Avx512Bf16};
use crate::dq::{Block, DQ_GROUP};
use crate::int8::{Int8Fmt, INT8_GROUP};
use crate::pack::{PackedFormat, PAIR_ELEMS, PANEL_COLS};
use crate::Int8Weight;

/// FP32 → 16 FP16 / BF16 bits, round to nearest even (finite inputs).
///
/// # Safety
/// AVX-512F and F16C present.
#[inline(always)]
unsafe fn to_half<const BF16: bool>(v: __m512) -> __m256i {
    // SAFETY: register-only operations; features enabled by the caller.
    unsafe {
        if BF16 {
            let b = _mm512_castps_si512(v);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
            let r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
            _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(r))
        } else {
            _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
        }
    }
}

/// The AVX-512 dequantizer (see the module doc): columns `64p..` × values `k0..k0+kn` of `w`
/// into `dst` (`kn/2` k-pair rows of the panel layout in `format`). BF16 rounding uses
/// `vcvtne2ps2bf16` where the CPU has AVX512-BF16, an integer round-to-nearest-even
/// elsewhere (the same bits for these finite, normal values).
///
/// # Safety
/// AVX-512F and F16C present; `k0`, `kn` multiples of 32 with `k0 + kn <= w.k()`;
/// `dst.len() >= kn/2 · 128`.
pub(crate) unsafe fn dq_panel_avx512(
    w: &Int8Weight,
    p: usize,
    k0: usize,
    kn: usize,
    format: PackedFormat,
    dst: &mut [u16],
) {
    static NE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ne = *NE.get_or_init(|| Avx512Bf16::try_new().is_some());
    // SAFETY: forwarded; the AVX512-BF16 variant only where the CPU has it.
    unsafe {
        match (format, ne) {
            (PackedFormat::F16, _) => panel_f(w, p, k0, kn, dst),
            (PackedFormat::Bf16, false) => panel_b(w, p, k0, kn, dst),
            (PackedFormat::Bf16, true) => panel_bne(w, p, k0, kn, dst),
        }
    }
}

/// The BF16 dequantizer with the integer rounding (what CPUs without AVX512-BF16 run), for
/// the bit-identity test on CPUs that have it.
///
/// # Safety
/// As [`dq_panel_avx512`].
#[cfg(test)]
pub(crate) unsafe fn dq_panel_avx512_int_round(
    w: &Int8Weight,
    p: usize,
    k0: usize,
    kn: usize,
    dst: &mut [u16],
) {
    // SAFETY: forwarded.
    unsafe { panel_b(w, p, k0, kn, dst) }
}

#[target_feature(enable = "avx512f,f16c")]
unsafe fn panel_f(w: &Int8Weight, p: usize, k0: usize, kn: usize, dst: &mut [u16]) {
    // SAFETY: forwarded; the features the body needs are enabled here.
    unsafe { panel::<false, false, false>(w, p, k0, kn, dst) }
}

#[target_feature(enable = "avx512f,f16c")]
unsafe fn panel_b(w: &Int8Weight, p: usize, k0: usize, kn: usize, dst: &mut [u16]) {
    // SAFETY: as above.
    unsafe { panel::<true, false, false>(w, p, k0, kn, dst) }
}

#[target_feature(enable = "avx512f,f16c,avx512bf16")]
unsafe fn panel_bne(w: &Int8Weight, p: usize, k0: usize, kn: usize, dst: &mut [u16]) {
    // SAFETY: as above (and AVX512-BF16 for NE).
    unsafe { panel::<true, true, false>(w, p, k0, kn, dst) }
}

/// The AVX-512 dequantizer into the AMX kernel's B tiles: the BF16 values of
/// [`dq_panel_avx512`], the 16 pair rows × 16 columns of each tile (pair rows `16t..16t+16`,
/// columns `16gg..`) in one KiB of consecutive bytes, tile `(t, gg)` at
/// `((gg/2 · kn/32 + t) · 2 + gg%2) · 512` u16: a `tileloadd` reads 1 KiB straight (stride
/// 64) instead of 16 rows 256 bytes apart, and a 32-column half's tiles over the K block are
/// one run of consecutive bytes, in the order the kernel reads them.
///
/// # Safety
/// As [`dq_panel_avx512`], and AVX512-BF16 (the AMX kernel's token carries it).
#[target_feature(enable = "avx512f,f16c,avx512bf16")]
pub(crate) unsafe fn dq_panel_amx(w: &Int8Weight, p: usize, k0: usize, kn: usize, dst: &mut [u16]) {
    // SAFETY: as above.
    unsafe { panel::<true, true, true>(w, p, k0, kn, dst) }
}

/// `D`, `M` of rows `0..16` of group `g`, 32-value chunk `c`, per half (Q6_K's 16-value
/// sub-blocks; the same for the others), computed as `chunk_scales` does (the same f32
/// operations: bit-identical).
///
/// # Safety
/// AVX-512F + F16C; `g < groups`, `c < K/32`.
#[inline(always)]
unsafe fn vec_scales(w: &Int8Weight, g: usize, c: usize) -> ([__m512; 2], [__m512; 2]) {
    let fmt = w.fmt();
    let sw = fmt.scale_words();
    let per = fmt.block() / 32;
    let (b, sub) = (c / per, c % per);
    // SAFETY: the record (sw words) of (g, b) lies inside the scale words; every load below
    // reads inside it (offsets from the layout in int8.rs).
    unsafe {
        let rec = w.scale_words().as_ptr().add((g * w.blocks() + b) * sw);
        let bytes = rec.cast::<u8>();
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(rec.cast()));
        match fmt {
            Int8Fmt::Q4_0 | Int8Fmt::Q5_0 | Int8Fmt::Q8_0 => {
                let m = _mm512_mul_ps(_mm512_set1_ps(fmt.offset() as f32), d);
                ([d, d], [m, m])
            }
            Int8Fmt::Q4_1 | Int8Fmt::Q5_1 => {
                let m = _mm512_cvtph_ps(_mm256_loadu_si256(rec.add(INT8_GROUP).cast()));
                ([d, d], [m, m])
            }
            Int8Fmt::Q4K | Int8Fmt::Q5K => {
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(rec.add(INT8_GROUP).cast()));
                let sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                    bytes.add(64 + 16 * sub).cast(),
                )));
                // Minimums in pairs: byte 192 + 32(sub/2) + 2j + sub%2 for row j.
                let pairs = _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                    bytes.add(192 + 32 * (sub / 2)).cast(),
                ));
                let mb = if sub % 2 == 1 {
                    _mm512_srli_epi32::<8>(pairs)
                } else {
                    pairs
                };
                let mf = _mm512_cvtepi32_ps(_mm512_and_si512(mb, _mm512_set1_epi32(0xFF)));
                let dd = _mm512_mul_ps(d, sc);
                // -(dmin·m): the product negated, as the scalar code does.
                let m = _mm512_castsi512_ps(_mm512_xor_si512(
                    _mm512_castps_si512(_mm512_mul_ps(dmin, mf)),
                    _mm512_set1_epi32(i32::MIN),
                ));
                ([dd, dd], [m, m])
            }
            Int8Fmt::Q6K => {
                let half = |h: usize| {
                    let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                        bytes.add(32 + 16 * (2 * sub + h)).cast(),
                    )));
                    let dd = _mm512_mul_ps(d, sc);
                    (dd, _mm512_mul_ps(_mm512_set1_ps(-32.0), dd))
                };
                let (d0, m0) = half(0);
                let (d1, m1) = half(1);
                ([d0, d1], [m0, m1])
            }
        }
    }
}

/// Two f32 vectors (rows 4q..4q+4 and 4q+4..4q+8 × 4 values) to 32 FP16/BF16 bits in order.
///
/// # Safety
/// AVX-512F + F16C (+ AVX512-BF16 when `NE`), enabled by the caller.
#[inline(always)]
unsafe fn pack2<const BF16: bool, const NE: bool>(a: __m512, b: __m512) -> __m512i {
    // SAFETY: register-only operations; features enabled by the caller.
    unsafe {
        if BF16 && NE {
            // vcvtne2ps2bf16 puts its second operand in the low half.
            core::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(b, a))
        } else {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(to_half::<BF16>(a)),
                to_half::<BF16>(b),
            )
        }
    }
}

/// Where pair row `q` (k = 2q, 2q+1 of the block) of the 16 columns `16gg..16gg+16` of a panel
/// starts, in u16: the packed panel layout (`q` rows of [`PAIR_ELEMS`]) or, `TILED`, the AMX
/// B-tile layout ([`dq_panel_amx`]).
#[inline(always)]
fn pair_at<const TILED: bool>(q: usize, gg: usize, steps: usize) -> usize {
    if TILED {
        (((gg / 2) * steps + q / 16) * 2 + gg % 2) * 512 + (q % 16) * 32
    } else {
        q * PAIR_ELEMS + 32 * gg
    }
}

/// # Safety
/// As [`dq_panel_avx512`]; the caller's target features include AVX-512F + F16C (+ AVX512-BF16
/// when `NE`).
#[inline(always)]
unsafe fn panel<const BF16: bool, const NE: bool, const TILED: bool>(
    w: &Int8Weight,
    p: usize,
    k0: usize,
    kn: usize,
    dst: &mut [u16],
) {
    let fmt = w.fmt();
    let groups = w.groups();
    let cb = fmt.chunk_bytes();
    let chunks = w.k() / 32;
    let q8 = fmt == Int8Fmt::Q8_0;
    let hb = fmt.high_bits();
    let bytes = w.quant_bytes().as_ptr();
    let dstp = dst.as_mut_ptr();
    // SAFETY: for the whole body: the caller enables AVX-512F + F16C (+ AVX512-BF16 for NE);
    // the chunk's bytes (cb from base) lie inside the packed weight (g < groups, c < K/32);
    // stores go to pair rows q0..q0+16 < kn/2 of dst, 64 bytes at column 16gg.
    unsafe {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let nib = _mm512_set1_epi32(0x0F0F_0F0F);
        let one = _mm512_set1_epi32(0x0101_0101);
        let three = _mm512_set1_epi32(0x0303_0303);
        // Quarter qq of a 16-row vector: rows 4qq..4qq+4, each repeated for its 4 values.
        let idx: [__m512i; 4] = core::array::from_fn(|qq| {
            let b = 4 * qq as i32;
            _mm512_setr_epi32(
                b,
                b,
                b,
                b,
                b + 1,
                b + 1,
                b + 1,
                b + 1,
                b + 2,
                b + 2,
                b + 2,
                b + 2,
                b + 3,
                b + 3,
                b + 3,
                b + 3,
            )
        });
        for gg in 0..PANEL_COLS / INT8_GROUP {
            let g = p * (PANEL_COLS / INT8_GROUP) + gg;
            for c in k0 / 32..(k0 + kn) / 32 {
                let q0 = (c * 32 - k0) / 2;
                if g >= groups {
                    for q in q0..q0 + 16 {
                        let d = dstp.add(pair_at::<TILED>(q, gg, kn / 32)).cast();
                        _mm512_storeu_si512(d, _mm512_setzero_si512());
                    }
                    continue;
                }
                let (dv, mv) = vec_scales(w, g, c);
                // The rows' scales per quarter, for both halves (hoisted out of the 8 steps).
                let dq: [[__m512; 4]; 2] = core::array::from_fn(|h| {
                    core::array::from_fn(|qq| _mm512_permutexvar_ps(idx[qq], dv[h]))
                });
                let mq: [[__m512; 4]; 2] = core::array::from_fn(|h| {
                    core::array::from_fn(|qq| _mm512_permutexvar_ps(idx[qq], mv[h]))
                });
                let base = bytes.add((g * chunks + c) * cb);
                for st in 0..8 {
                    let u = if q8 {
                        _mm512_loadu_si512(base.add(64 * st).cast())
                    } else {
                        let (v, hi) = (st % 4, st / 4);
                        let raw = _mm512_loadu_si512(base.add(64 * v).cast());
                        let raw = if hi == 1 {
                            _mm512_srli_epi32::<4>(raw)
                        } else {
                            raw
                        };
                        let mut u = _mm512_and_si512(raw, nib);
                        if hb == 1 {
                            let pl = _mm512_loadu_si512(base.add(256).cast());
                            let sh = _mm_cvtsi32_si128((v + 4 * hi) as i32);
                            let bit = _mm512_and_si512(_mm512_srl_epi32(pl, sh), one);
                            u = _mm512_or_si512(u, _mm512_slli_epi32::<4>(bit));
                        } else if hb == 2 {
                            let pl = _mm512_loadu_si512(base.add(256 + 64 * hi).cast());
                            let sh = _mm_cvtsi32_si128((2 * v) as i32);
                            let bits = _mm512_and_si512(_mm512_srl_epi32(pl, sh), three);
                            u = _mm512_or_si512(u, _mm512_slli_epi32::<4>(bits));
                        }
                        u
                    };
                    let h = st / 4;
                    let f: [__m512; 4] = core::array::from_fn(|qq| {
                        let q = match qq {
                            0 => _mm512_extracti32x4_epi32::<0>(u),
                            1 => _mm512_extracti32x4_epi32::<1>(u),
                            2 => _mm512_extracti32x4_epi32::<2>(u),
                            _ => _mm512_extracti32x4_epi32::<3>(u),
                        };
                        let x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q));
                        _mm512_fmadd_ps(dq[h][qq], x, mq[h][qq])
                    });
                    let lo8 = pack2::<BF16, NE>(f[0], f[1]);
                    let hi8 = pack2::<BF16, NE>(f[2], f[3]);
                    let pa = _mm512_permutex2var_epi32(lo8, even, hi8);
                    let pb = _mm512_permutex2var_epi32(lo8, odd, hi8);
                    let q = q0 + 2 * st;
                    _mm512_storeu_si512(dstp.add(pair_at::<TILED>(q, gg, kn / 32)).cast(), pa);
                    _mm512_storeu_si512(dstp.add(pair_at::<TILED>(q + 1, gg, kn / 32)).cast(), pb);
                }
            }
        }
    }
}

impl Avx512Bf16 {
    /// `dst[..32] = bf16(src)` (round to nearest even), zero past `src.len() <= 32`.
    pub(crate) fn to_bf16(self, src: &[f32], dst: &mut [u16]) {
        let mut tmp = [0f32; 32];
        let n = src.len().min(32);
        tmp[..n].copy_from_slice(&src[..n]);
        let d = &mut dst[..32];
        // SAFETY: the token proves AVX512-BF16; 32 floats in tmp, 32 u16 in d.
        unsafe { cvt32(&tmp, d) };
    }

    /// `C[rows × cols] (=|+=) A · W` of one K block on the AVX512-BF16 micro-kernel (6 rows ×
    /// 64 columns, 24 zmm accumulators held across the block).
    ///
    /// # Safety
    /// `acts` holds the tile-contiguous BF16 activations of K = `k` (padded to 32) for every
    /// row of the block; the block's rows/columns lie inside the validated y (stride `ldy`),
    /// exclusively the caller's; `b.w` holds `b.kn/2` pair rows.
    pub(crate) unsafe fn dq_block(
        self,
        acts: *const u16,
        k: usize,
        b: &Block,
        y: *mut f32,
        ldy: usize,
    ) {
        let kt = k.div_ceil(32);
        let mut r = b.row0;
        let end = b.row0 + b.rows;
        while r < end {
            let n = (end - r).min(6);
            // SAFETY: rows r..r+n of the block; forwarded.
            unsafe {
                match n {
                    1 => mk::<1>(acts, kt, r, b, y, ldy),
                    2 => mk::<2>(acts, kt, r, b, y, ldy),
                    3 => mk::<3>(acts, kt, r, b, y, ldy),
                    4 => mk::<4>(acts, kt, r, b, y, ldy),
                    5 => mk::<5>(acts, kt, r, b, y, ldy),
                    _ => mk::<6>(acts, kt, r, b, y, ldy),
                }
            }
            r += n;
        }
    }

    /// One K block of one tile on AMX-BF16: per half panel (32 columns) and 32-row block, four
    /// 16×16 FP32 accumulators (tmm0-3, zeroed on the first block, else loaded from y) and per
    /// 32-k step two A tiles (tmm4/5: 1 KiB each, consecutive in `acts`) and two B tiles
    /// (tmm6/7: 64-byte slices of the panel's 256-byte k-pair rows) into four `tdpbf16ps`;
    /// the accumulators stored back to y once per block. Blocks of y that are not whole
    /// (past M or N) go through a 32×32 stack copy.
    ///
    /// # Safety
    /// As [`Avx512Bf16::dq_block`]; `amx` proves AMX with the tile-data permission and this
    /// thread holds the tile configuration of [`amx_configure`]; acts rows are padded to a
    /// multiple of 32 (`DqActs`); `m`, `n` are y's extents.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn dq_block_amx(
        self,
        _amx: Amx,
        acts: *const u16,
        k: usize,
        b: &Block,
        y: *mut f32,
        ldy: usize,
        m: usize,
        n: usize,
    ) {
        // SAFETY: forwarded.
        unsafe { amx_block(acts, k, b, y, ldy, m, n) }
    }
}

/// # Safety
/// AVX512-BF16; 32 floats at `src`, 32 u16 at `dst`.
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn cvt32(src: &[f32; 32], dst: &mut [u16]) {
    // SAFETY: 32 floats read, 32 u16 written.
    unsafe {
        let a = _mm512_cvtneps_pbh(_mm512_loadu_ps(src.as_ptr()));
        let b = _mm512_cvtneps_pbh(_mm512_loadu_ps(src.as_ptr().add(16)));
        _mm256_storeu_si256(
            dst.as_mut_ptr().cast(),
            core::mem::transmute::<__m256bh, __m256i>(a),
        );
        _mm256_storeu_si256(
            dst.as_mut_ptr().add(16).cast(),
            core::mem::transmute::<__m256bh, __m256i>(b),
        );
    }
}

/// Rows `r..r+R` of the block.
///
/// # Safety
/// As [`Avx512Bf16::dq_block`].
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn mk<const R: usize>(
    acts: *const u16,
    kt: usize,
    r: usize,
    b: &Block,
    y: *mut f32,
    ldy: usize,
) {
    let rowp: [*const u16; R] = core::array::from_fn(|i| {
        let row = r + i;
        acts.wrapping_add(((row / 16) * kt + b.k0 / 32) * 512 + (row % 16) * 32)
    });
    let masks: [__mmask16; 4] = core::array::from_fn(|h| {
        let cnt = b.cols.saturating_sub(16 * h).min(16);
        ((1u32 << cnt) - 1) as u16
    });
    // SAFETY: every access stays inside the extents of the contract: rows r+i < m of y at
    // stride ldy, columns col0 + 16h + lane under the mask (< n); acts rows' 32-k tiles of the
    // block; the panel's kn/2 pair rows.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        if !b.first {
            for (i, a) in acc.iter_mut().enumerate() {
                let yp = y.add((r + i) * ldy + b.col0);
                for h in 0..4 {
                    a[h] = _mm512_maskz_loadu_ps(masks[h], yp.add(16 * h));
                }
            }
        }
        for t in 0..b.kn / 32 {
            for qq in 0..16 {
                let wp = b.w.add((16 * t + qq) * PAIR_ELEMS);
                let bv: [__m512bh; 4] = core::array::from_fn(|h| {
                    core::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                        wp.add(32 * h).cast(),
                    ))
                });
                for i in 0..R {
                    let pair =
                        core::ptr::read_unaligned(rowp[i].add(512 * t + 2 * qq).cast::<i32>());
                    let av = core::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair));
                    for h in 0..4 {
                        acc[i][h] = _mm512_dpbf16_ps(acc[i][h], av, bv[h]);
                    }
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            let yp = y.add((r + i) * ldy + b.col0);
            for h in 0..4 {
                _mm512_mask_storeu_ps(yp.add(16 * h), masks[h], a[h]);
            }
        }
    }
}

#[repr(C, align(64))]
struct TileCfg([u8; 64]);

#[repr(C, align(64))]
struct Edge([f32; 32 * 32]);

/// Where a 32×32 C block is loaded from and stored to: f32 rows at a byte stride.
#[derive(Clone, Copy)]
struct CPlace {
    ptr: *mut f32,
    stride: usize,
}

/// # Safety
/// As [`Avx512Bf16::dq_block_amx`]; `b.acc`, when not null, is the tile's claimed slot
/// (`Block::acc`), its blocks inside it.
#[target_feature(enable = "avx512f")]
unsafe fn amx_block(
    acts: *const u16,
    k: usize,
    b: &Block,
    y: *mut f32,
    ldy: usize,
    m: usize,
    n: usize,
) {
    let kt = k.div_ceil(32);
    let mut edge = Edge([0.0; 32 * 32]);
    let steps = b.kn / 32;
    let edge_place = CPlace {
        ptr: edge.0.as_mut_ptr(),
        stride: 32 * 4,
    };
    for h in 0..2 {
        if b.cols <= 32 * h {
            continue;
        }
        let col = b.col0 + 32 * h;
        let mut r = b.row0;
        while r < b.row0 + b.rows {
            let whole = r + 32 <= m && col + 32 <= n;
            let (vr, vc) = ((m - r).min(32), (n - col).min(32));
            let in_y = CPlace {
                ptr: y.wrapping_add(r * ldy + col),
                stride: ldy * 4,
            };
            // C comes from (None: zero) and goes to: the accumulator slot between K blocks,
            // y (or the stack copy of a partial block) at the ends.
            let (src, dst) = if b.acc.is_null() {
                let place = if whole { in_y } else { edge_place };
                (if b.first && whole { None } else { Some(place) }, place)
            } else {
                let blk =
                    (r - b.acc_row0) / 32 * (DQ_GROUP * PANEL_COLS / 32) + (col - b.acc_col0) / 32;
                let slot = CPlace {
                    ptr: b.acc.wrapping_add(blk * 1024),
                    stride: 32 * 4,
                };
                let out = if !b.last {
                    slot
                } else if whole {
                    in_y
                } else {
                    edge_place
                };
                (if b.first { None } else { Some(slot) }, out)
            };
            if b.acc.is_null() && !whole {
                // The valid part of the 32×32 block in the stack copy (zero elsewhere).
                for i in 0..32 {
                    for j in 0..32 {
                        edge.0[i * 32 + j] = if !b.first && i < vr && j < vc {
                            // SAFETY: row r+i < m, column col+j < n: inside y, the tile's.
                            unsafe { *y.add((r + i) * ldy + col + j) }
                        } else {
                            0.0
                        };
                    }
                }
            }
            // SAFETY: tiles configured; the four C tiles are 16 rows × 64 bytes at the place's
            // stride inside y's whole block (rows r..r+32 < m, columns col..col+32 < n), the
            // stack copy or the slot's block (1024 f32 inside the claimed slot).
            unsafe {
                match src {
                    None => asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem)
                    ),
                    Some(c) => asm!(
                        "tileloadd tmm0, [{c} + {s}*1]",
                        "tileloadd tmm1, [{c} + {s}*1 + 64]",
                        "tileloadd tmm2, [{d} + {s}*1]",
                        "tileloadd tmm3, [{d} + {s}*1 + 64]",
                        c = in(reg) c.ptr,
                        d = in(reg) c.ptr.wrapping_add(16 * c.stride / 4),
                        s = in(reg) c.stride,
                        options(nostack, readonly),
                    ),
                }
            }
            let a0 = acts.wrapping_add(((r / 16) * kt + b.k0 / 32) * 512);
            let a1 = a0.wrapping_add(kt * 512);
            for t in 0..steps {
                let bp = b.w.wrapping_add((h * steps + t) * 1024);
                // SAFETY: A tiles: 1 KiB each at a0/a1 + t KiB (rows r..r+32 < padded rows,
                // 32-k tile k0/32 + t < kt); B tiles: 1 KiB each at bp and bp + 1 KiB, tiles
                // (t, 2h) and (t, 2h+1) of the panel in `dq_panel_amx`'s layout (steps = kn/32).
                unsafe {
                    asm!(
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tileloadd tmm7, [{b} + {sb}*1 + 1024]",
                        "tileloadd tmm4, [{a0} + {sa}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tileloadd tmm5, [{a1} + {sa}*1]",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0.wrapping_add(512 * t),
                        a1 = in(reg) a1.wrapping_add(512 * t),
                        sa = in(reg) 64usize,
                        b = in(reg) bp,
                        sb = in(reg) 64usize,
                        options(nostack, readonly),
                    );
                }
            }
            // SAFETY: the four regions of the destination, as the loads above.
            unsafe {
                asm!(
                    "tilestored [{c} + {s}*1], tmm0",
                    "tilestored [{c} + {s}*1 + 64], tmm1",
                    "tilestored [{d} + {s}*1], tmm2",
                    "tilestored [{d} + {s}*1 + 64], tmm3",
                    c = in(reg) dst.ptr,
                    d = in(reg) dst.ptr.wrapping_add(16 * dst.stride / 4),
                    s = in(reg) dst.stride,
                    options(nostack),
                );
            }
            if !whole && dst.ptr == edge_place.ptr {
                for i in 0..vr {
                    for j in 0..vc {
                        // SAFETY: as the copy-in above.
                        unsafe { *y.add((r + i) * ldy + col + j) = edge.0[i * 32 + j] };
                    }
                }
            }
            r += 32;
        }
    }
}

/// Loads the tile configuration every AMX block of a tile uses (palette 1, tiles 0-7 all 16
/// rows × 64 bytes), once per plan tile rather than once per block.
///
/// # Safety
/// `_amx` proves AMX-TILE with the tile-data permission; pair with [`amx_release`] on the same
/// thread before anything else uses tiles.
pub(crate) unsafe fn amx_configure(_amx: Amx) {
    let mut cfg = TileCfg([0; 64]);
    cfg.0[0] = 1;
    for t in 0..8 {
        cfg.0[16 + 2 * t] = 64;
        cfg.0[48 + t] = 16;
    }
    // SAFETY: a valid palette-1 configuration (8 tiles of 16 rows × 64 bytes); the token
    // proves the instruction exists and the state is granted.
    unsafe { asm!("ldtilecfg [{c}]", c = in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
}

/// Releases the tile state loaded by [`amx_configure`].
///
/// # Safety
/// As [`amx_configure`].
pub(crate) unsafe fn amx_release(_amx: Amx) {
    // SAFETY: releases the tile state (no memory access); the token proves the instruction.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}
