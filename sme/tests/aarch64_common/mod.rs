//! Helpers shared by the aarch64 kernel tests: a seeded PRNG, a reference packer for the fixed
//! packed weight format, a local row-block driver over one tile kernel, and an f64 reference.
#![allow(dead_code)]

use hetero_sme::arch::aarch64::{lhs_block_len, pack_lhs_f16, pack_lhs_f32, Sme1, Sme2};

/// xorshift64*: deterministic test data without extra dependencies.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
}

pub fn f16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

pub fn f16_to_f64(b: u16) -> f64 {
    half::f16::from_bits(b).to_f64()
}

/// Packs row-major W (K×N, stride `ldw`) into the fixed format, written independently of the
/// crate's packer: idx = ((p*kp + q)*64 + c)*2 + j holds W[2q+j][64p+c], zero outside.
pub fn pack_w(w: &[f32], ldw: usize, k: usize, n: usize) -> Vec<u16> {
    let (kp, np) = (k.div_ceil(2), n.div_ceil(64));
    // Poison first, then write every element (padding included) explicitly.
    let mut out = vec![0x7e00u16; np * kp * 128];
    for p in 0..np {
        for q in 0..kp {
            for c in 0..64 {
                for j in 0..2 {
                    let (kk, nn) = (2 * q + j, 64 * p + c);
                    let v = if kk < k && nn < n {
                        f16(w[kk * ldw + nn])
                    } else {
                        0
                    };
                    out[((p * kp + q) * 64 + c) * 2 + j] = v;
                }
            }
        }
    }
    out
}

/// Which tile kernel a driver call uses.
#[derive(Clone, Copy, Debug)]
pub enum Tile {
    Sme2(Sme2),
    Sme1(Sme1),
}

impl Tile {
    pub fn tile_rows(self) -> usize {
        match self {
            Tile::Sme2(t) => t.tile_rows(),
            Tile::Sme1(t) => t.tile_rows(),
        }
    }

    /// # Safety
    /// As `Sme2::gemm_block_f16`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn block(
        self,
        lhs: *const u16,
        panels: *const u16,
        kp: usize,
        npanels: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        bias: *const f32,
    ) {
        // SAFETY: forwarded obligations.
        unsafe {
            match self {
                Tile::Sme2(t) => t.gemm_block_f16(
                    lhs, panels, kp, npanels, c, ldc, rows, cols, accumulate, bias,
                ),
                Tile::Sme1(t) => t.gemm_block_f16(
                    lhs, panels, kp, npanels, c, ldc, rows, cols, accumulate, bias,
                ),
            }
        }
    }
}

/// The LHS source of a driver call.
pub enum A<'a> {
    F32(&'a [f32]),
    F16(&'a [u16]),
}

/// A local driver: C[M×N] (stride ldc) = / += A[M×K] (stride lda) · W (packed) + bias, row
/// block by row block, `group` panels per kernel call (each call a standalone panel range).
#[allow(clippy::too_many_arguments)]
pub fn drive(
    tile: Tile,
    a: &A<'_>,
    lda: usize,
    m: usize,
    k: usize,
    n: usize,
    packed: &[u16],
    c: &mut [f32],
    ldc: usize,
    bias: Option<&[f32]>,
    accumulate: bool,
    group: usize,
) {
    let tr = tile.tile_rows();
    let (kp, np) = (k.div_ceil(2), n.div_ceil(64));
    assert_eq!(packed.len(), np * kp * 128);
    assert!(m == 0 || c.len() >= (m - 1) * ldc + n);
    assert!(bias.is_none_or(|b| b.len() >= n));
    let mut lhs = vec![0xffffu16; lhs_block_len(tr, k).max(1)];
    let mut r0 = 0;
    while r0 < m {
        let rows = tr.min(m - r0);
        match a {
            A::F32(a) => pack_lhs_f32(&a[r0 * lda..], lda, rows, k, tr, &mut lhs).unwrap(),
            A::F16(a) => pack_lhs_f16(&a[r0 * lda..], lda, rows, k, tr, &mut lhs).unwrap(),
        }
        let mut p0 = 0;
        while p0 < np {
            let npanels = group.min(np - p0);
            let cols = (64 * npanels).min(n - 64 * p0);
            let bias_ptr = bias.map_or(core::ptr::null(), |b| b[64 * p0..].as_ptr());
            // SAFETY: lhs holds lhs_block_len(tr, k) u16; the panel range p0..p0+npanels lies in
            // `packed` (np*kp*128 u16); C rows r0..r0+rows, columns 64*p0..64*p0+cols lie in `c`
            // (checked above); bias has n >= 64*p0 + cols entries; rows <= tr; cols <= 64*npanels.
            unsafe {
                tile.block(
                    lhs.as_ptr(),
                    packed[p0 * kp * 128..].as_ptr(),
                    kp,
                    npanels,
                    c[r0 * ldc + 64 * p0..].as_mut_ptr(),
                    ldc,
                    rows,
                    cols,
                    accumulate,
                    bias_ptr,
                )
            };
            p0 += npanels;
        }
        r0 += rows;
    }
}

/// f64 reference from FP16-rounded inputs: out[i][j] = c_old + bias[j] + sum_k a[i][k] w[k][j];
/// also returns the magnitude sum |c_old| + |bias| + sum |a w| for the error bound.
#[allow(clippy::too_many_arguments)]
pub fn reference(
    a16: &[u16],
    lda: usize,
    m: usize,
    k: usize,
    n: usize,
    w: &[f32],
    ldw: usize,
    bias: Option<&[f32]>,
    c_old: Option<(&[f32], usize)>,
) -> (Vec<f64>, Vec<f64>) {
    let w16: Vec<f64> = w.iter().map(|&x| f16_to_f64(f16(x))).collect();
    let a64: Vec<f64> = a16.iter().map(|&x| f16_to_f64(x)).collect();
    let mut out = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut g) = (0.0f64, 0.0f64);
            if let Some(b) = bias {
                s += b[j] as f64;
                g += (b[j] as f64).abs();
            }
            if let Some((c, ldc)) = c_old {
                s += c[i * ldc + j] as f64;
                g += (c[i * ldc + j] as f64).abs();
            }
            for kk in 0..k {
                let p = a64[i * lda + kk] * w16[kk * ldw + j];
                s += p;
                g += p.abs();
            }
            out[i * n + j] = s;
            mag[i * n + j] = g;
        }
    }
    (out, mag)
}

/// Tolerance: FP16 inputs make every product exact in FP32 (11+11 significant bits <= 24); the
/// only error is FP32 accumulation of K products plus bias and C: recursive summation of n terms
/// errs by at most (n-1)·u·Σ|terms| (u = 2^-24) to first order; we allow (K+2)·2^-23·Σ|terms|
/// (a factor 2 for the pairwise widening step and second-order terms) plus 1e-30 for zero sums.
pub fn tolerance(k: usize, mag: f64) -> f64 {
    (k as f64 + 2.0) * f64::powi(2.0, -23) * mag + 1e-30
}
