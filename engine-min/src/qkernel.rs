//! Quantized CPU matmul: weights repacked once at start-up into an unsigned-integer form
//! `w = d * u + m` per 32-element block (Q4_0, Q4_1 as 4-bit `u`; Q8_0 as 8-bit `u = q + 128`),
//! activations quantized per 32-element block to `i8` (`x ~ dx * qx`), and the block dot
//! `sum(w * x) ~ d * dx * sum(u * qx) + m * (dx * sum(qx))` computed in integers: with AVX-512
//! VNNI (`vpdpbusd`: u8 x i8 -> i32) on x86-64, or the portable loop that computes the same
//! integers (the exact oracle for the vector kernel).
//!
//! The only approximation is the activation rounding: each `x` moves by at most `dx / 2`, so a
//! dot moves by at most `sum_i |w_i| * dx_i / 2` (tests check that bound).

use crate::gguf::GgmlType;

/// Elements per pair of blocks (the vector kernel's unit: one 64-byte register of `qx`).
pub const PAIR: usize = 64;

/// How the unsigned weight integers are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UKind {
    /// 4-bit: per pair of blocks (A, B), 32 bytes, byte `i` = `A[i] | B[i] << 4`.
    Nib4,
    /// 8-bit: one byte per element.
    Byte8,
}

/// A weight matrix repacked for the quantized kernels.
#[derive(Clone, Debug)]
pub struct PackedWeight {
    /// Storage of `u`.
    pub kind: UKind,
    /// Rows.
    pub n: usize,
    /// Columns (a multiple of [`PAIR`]).
    pub k: usize,
    /// `u` of every row (`k / 2` or `k` bytes per row).
    pub u: Vec<u8>,
    /// Per-block scales as f16 bits (as in the file: decode reads as few bytes as llama.cpp),
    /// `k / 32` per row, rows contiguous.
    pub d: Vec<u16>,
    /// Per-block offsets, same layout as `d`.
    pub m: Vec<u16>,
    /// Blocks per row (`k / 32`).
    pub nb: usize,
}

fn h(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Floats per row for `k` elements' block scales (padded to 16).
pub fn dstride(k: usize) -> usize {
    (k / 32).div_ceil(16) * 16
}

impl PackedWeight {
    /// Repacks `n` rows of `k` elements of `ty` from ggml's layout; `None` when the type is not
    /// Q4_0, Q4_1 or Q8_0, `k` is not a multiple of [`PAIR`], or `data` has the wrong length.
    pub fn pack(ty: GgmlType, n: usize, k: usize, data: &[u8]) -> Option<Self> {
        if k == 0 || !k.is_multiple_of(PAIR) {
            return None;
        }
        let (bb, kind) = match ty {
            GgmlType::Q4_0 => (18, UKind::Nib4),
            GgmlType::Q4_1 => (20, UKind::Nib4),
            GgmlType::Q8_0 => (34, UKind::Byte8),
            _ => return None,
        };
        let nb = k / 32;
        if data.len() != n * nb * bb {
            return None;
        }
        let ubytes = if kind == UKind::Nib4 { k / 2 } else { k };
        let mut u = vec![0u8; n * ubytes];
        let mut d = vec![0u16; n * nb];
        let mut m = vec![0u16; n * nb];
        let bits = |v: f32| half::f16::from_f32(v).to_bits();
        for r in 0..n {
            let row = &data[r * nb * bb..(r + 1) * nb * bb];
            let ur = &mut u[r * ubytes..(r + 1) * ubytes];
            for b in 0..nb {
                let blk = &row[b * bb..(b + 1) * bb];
                let scale = h(blk, 0);
                d[r * nb + b] = u16::from_le_bytes([blk[0], blk[1]]);
                // Element j of the block as an unsigned integer.
                let uj = |j: usize| -> u8 {
                    match ty {
                        GgmlType::Q8_0 => blk[2 + j] ^ 0x80,
                        GgmlType::Q4_0 => (blk[2 + j % 16] >> (4 * (j / 16))) & 15,
                        _ => (blk[4 + j % 16] >> (4 * (j / 16))) & 15,
                    }
                };
                // -128 d and -8 d are exact in f16 (power-of-two multiples; an overflow to
                // infinity would need |d| >= 512, far outside any quantized model).
                m[r * nb + b] = match ty {
                    GgmlType::Q8_0 => bits(-128.0 * scale),
                    GgmlType::Q4_0 => bits(-8.0 * scale),
                    _ => u16::from_le_bytes([blk[2], blk[3]]),
                };
                match kind {
                    UKind::Byte8 => {
                        for j in 0..32 {
                            ur[b * 32 + j] = uj(j);
                        }
                    }
                    UKind::Nib4 => {
                        let (pair, hi) = (b / 2, b % 2);
                        for j in 0..32 {
                            ur[pair * 32 + j] |= uj(j) << (4 * hi);
                        }
                    }
                }
            }
        }
        Some(Self {
            kind,
            n,
            k,
            u,
            d,
            m,
            nb,
        })
    }

    /// Scale of block `b` of row `r`.
    pub fn d_at(&self, r: usize, b: usize) -> f32 {
        half::f16::from_bits(self.d[r * self.nb + b]).to_f32()
    }

    /// Offset of block `b` of row `r`.
    pub fn m_at(&self, r: usize, b: usize) -> f32 {
        half::f16::from_bits(self.m[r * self.nb + b]).to_f32()
    }

    /// `u` of element `i` of row `r`.
    pub fn u_at(&self, r: usize, i: usize) -> u8 {
        match self.kind {
            UKind::Byte8 => self.u[r * self.k + i],
            UKind::Nib4 => {
                let (pair, j) = (i / PAIR, i % PAIR);
                (self.u[r * self.k / 2 + pair * 32 + j % 32] >> (4 * (j / 32))) & 15
            }
        }
    }
}

/// Activations of `m` tokens quantized per 32-element block.
#[derive(Clone, Debug, Default)]
pub struct QuantActs {
    /// Columns per token.
    pub k: usize,
    /// Tokens quantized.
    pub m: usize,
    /// `qx`, `k` per token.
    pub q: Vec<i8>,
    /// `dx` per block, [`dstride`] per token (zero-padded).
    pub d: Vec<f32>,
    /// `dx * sum(qx)` per block, same layout.
    pub s: Vec<f32>,
    /// `dx` expanded for the vector kernel: per pair 16 floats (8 x block A, 8 x block B).
    pub dexp: Vec<f32>,
}

impl QuantActs {
    /// Buffers for up to `m` tokens of `k` columns (allocate once; `quantize` does not allocate
    /// within this capacity).
    pub fn with_capacity(m: usize, k: usize) -> Self {
        Self {
            k,
            m: 0,
            q: vec![0; m * k],
            d: vec![0.0; m * dstride(k)],
            s: vec![0.0; m * dstride(k)],
            dexp: vec![0.0; m * k / PAIR * 16],
        }
    }

    /// Whether `m` tokens of `k` columns fit.
    pub fn fits(&self, m: usize, k: usize) -> bool {
        self.q.len() >= m * k
            && self.d.len() >= m * dstride(k)
            && self.dexp.len() >= m * k / PAIR * 16
    }

    /// Quantizes `x` (`m` rows of `k`, `k` a multiple of [`PAIR`]); grows the buffers if they
    /// are too small (callers size them up front).
    pub fn quantize(&mut self, x: &[f32], m: usize, k: usize) {
        if !self.fits(m, k) {
            *self = Self::with_capacity(m, k);
        }
        self.k = k;
        self.m = m;
        let ds = dstride(k);
        let e = k / PAIR * 16;
        for t in 0..m {
            quantize_token(
                &x[t * k..(t + 1) * k],
                &mut self.q[t * k..(t + 1) * k],
                &mut self.d[t * ds..(t + 1) * ds],
                &mut self.s[t * ds..(t + 1) * ds],
                &mut self.dexp[t * e..(t + 1) * e],
            );
        }
    }
}

/// Quantizes one token's `x` (length a multiple of [`PAIR`]) into `q`, block scales `d`,
/// block sums `s` (padded entries zeroed) and the expanded scales `dexp`.
pub fn quantize_token(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32], dexp: &mut [f32]) {
    d.fill(0.0);
    s.fill(0.0);
    for (b, (xb, qb)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).enumerate() {
        let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
        let dx = amax / 127.0;
        let inv = if dx > 0.0 { 1.0 / dx } else { 0.0 };
        let mut sum = 0i32;
        for (qj, &v) in qb.iter_mut().zip(xb) {
            let qv = (v * inv).round().clamp(-127.0, 127.0) as i8;
            *qj = qv;
            sum += i32::from(qv);
        }
        d[b] = dx;
        s[b] = dx * sum as f32;
    }
    for (p, e) in dexp.chunks_exact_mut(16).enumerate() {
        e[..8].fill(d[2 * p]);
        e[8..].fill(d[2 * p + 1]);
    }
}

#[allow(clippy::needless_range_loop)]
/// `out[t][r - r0]` = dot of token `t` (of `a`) with row `r` for `r` in `r0..r0 + nr`,
/// `t` in `t0..t0 + mr`, portable integer arithmetic (exactly the vector kernel's integers).
pub fn dot_portable(
    w: &PackedWeight,
    r0: usize,
    nr: usize,
    a: &QuantActs,
    t0: usize,
    mr: usize,
    out: &mut [[f32; 4]; 4],
) {
    let (k, ds) = (w.k, dstride(w.k));
    for t in 0..mr {
        for r in 0..nr {
            let (row, tok) = (r0 + r, t0 + t);
            let mut acc = 0f32;
            for b in 0..k / 32 {
                let mut isum = 0i32;
                for j in 0..32 {
                    let i = b * 32 + j;
                    isum += i32::from(w.u_at(row, i)) * i32::from(a.q[tok * k + i]);
                }
                acc += w.d_at(row, b) * a.d[tok * ds + b] * isum as f32
                    + w.m_at(row, b) * a.s[tok * ds + b];
            }
            out[t][r] = acc;
        }
    }
}

/// The AVX-512 VNNI kernel.
#[cfg(target_arch = "x86_64")]
pub mod vnni {
    use super::{PackedWeight, QuantActs, PAIR};
    use std::arch::x86_64::*;

    /// Whether this CPU runs [`dot`].
    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("avx512vnni")
    }

    /// A mask of the first `min(n, 16)` 16-bit lanes.
    fn lanes(n: usize) -> __mmask16 {
        if n >= 16 {
            0xFFFF
        } else {
            ((1u32 << n) - 1) as __mmask16
        }
    }

    /// Same contract as [`super::dot_portable`] for `mr == MR` tokens and `nr <= NR` rows,
    /// `NIB` saying whether `w.kind` is [`UKind::Nib4`] (a compile-time choice, so the inner
    /// loop has no branch). Sizes are kept small enough (`MR * NR` accumulators plus `2 * NR`
    /// weight registers) to stay within the 32 vector registers.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, BW, VL and VNNI ([`available`]); `r0 + nr <=
    /// w.n`, `t0 + MR <= a.m`, `a.k == w.k`, `1 <= nr <= NR <= 4`, `1 <= MR <= 4`,
    /// `NIB == (w.kind == UKind::Nib4)`, and `w`/`a` hold the lengths their constructors give.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[allow(clippy::needless_range_loop)]
    pub unsafe fn dot<const MR: usize, const NR: usize, const NIB: bool>(
        w: &PackedWeight,
        r0: usize,
        nr: usize,
        a: &QuantActs,
        t0: usize,
        out: &mut [[f32; 4]; 4],
    ) {
        let mr = MR;
        let (k, nb, ds) = (w.k, w.nb, super::dstride(w.k));
        let pairs = k / PAIR;
        let ubytes = if NIB { k / 2 } else { k };
        // Missing rows alias the last real one; their results are dropped.
        let urow: [*const u8; NR] =
            std::array::from_fn(|r| w.u[(r0 + r.min(nr - 1)) * ubytes..].as_ptr());
        let drow: [*const u16; NR] =
            std::array::from_fn(|r| w.d[(r0 + r.min(nr - 1)) * nb..].as_ptr());
        let qrow: [*const i8; MR] = std::array::from_fn(|t| a.q[(t0 + t) * k..].as_ptr());
        let erow: [*const f32; MR] =
            std::array::from_fn(|t| a.dexp[(t0 + t) * pairs * 16..].as_ptr());
        let mut acc = [[_mm512_setzero_ps(); NR]; MR];
        // Shift counts: low 32 bytes keep the low nibble, high 32 bytes take the high nibble.
        let shifts = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(4));
        let low4 = _mm512_set1_epi8(15);
        // Lane i of the expanded weight scale takes block 2p (i < 8) or 2p + 1.
        let idx_base = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        // SAFETY: all pointers below index within the buffers whose lengths the caller
        // guarantees: row r's `u` spans `ubytes`, its scales `nb` halves (read with masked
        // loads that touch only lanes < nb), token t's `q` spans `k`, its `dexp` `pairs * 16`,
        // its `s` `ds` floats; the CPU features are those this function is compiled for,
        // which the caller guarantees.
        unsafe {
            for p in 0..pairs {
                let idx = _mm512_add_epi32(idx_base, _mm512_set1_epi32(((2 * p) % 16) as i32));
                let mut wv = [_mm512_setzero_si512(); NR];
                let mut sw = [_mm512_setzero_ps(); NR];
                for r in 0..NR {
                    wv[r] = if NIB {
                        let v =
                            _mm512_broadcast_i64x4(_mm256_loadu_si256(urow[r].add(p * 32).cast()));
                        _mm512_and_si512(_mm512_srlv_epi16(v, shifts), low4)
                    } else {
                        _mm512_loadu_si512(urow[r].add(p * 64).cast())
                    };
                    let base = (2 * p) / 16 * 16;
                    let mask = lanes(nb - base);
                    let h16 = _mm256_maskz_loadu_epi16(mask, drow[r].add(base).cast());
                    sw[r] = _mm512_permutexvar_ps(idx, _mm512_cvtph_ps(h16));
                }
                for t in 0..MR {
                    let xv = _mm512_loadu_si512(qrow[t].add(p * 64).cast());
                    let sx = _mm512_loadu_ps(erow[t].add(p * 16));
                    for r in 0..NR {
                        let isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], xv);
                        let s = _mm512_mul_ps(sw[r], sx);
                        acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc[t][r]);
                    }
                }
            }
            // Offset terms: sum over blocks of m_w * (dx * sum qx), 16 blocks per step.
            for t in 0..mr {
                let tt = t0 + t;
                for r in 0..nr.min(NR) {
                    let rr = r0 + r;
                    let mut s = acc[t][r];
                    let mut b = 0;
                    while b < nb {
                        let h16 = _mm256_maskz_loadu_epi16(
                            lanes(nb - b),
                            w.m.as_ptr().add(rr * nb + b).cast(),
                        );
                        let sv = _mm512_loadu_ps(a.s.as_ptr().add(tt * ds + b));
                        s = _mm512_fmadd_ps(_mm512_cvtph_ps(h16), sv, s);
                        b += 16;
                    }
                    out[t][r] = _mm512_reduce_add_ps(s);
                }
            }
        }
    }
}
