//! The portable implementation: plain Rust, always compiled, the reference for the others.

use crate::gemm::{APtr, Ctx};
use crate::pack::{PackedFormat, PAIR_ELEMS, PANEL_COLS};

/// Capability token for the portable kernels (every CPU has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Portable;

impl Portable {
    /// Always `Some`.
    pub fn try_new() -> Option<Self> {
        Some(Self)
    }
    /// Always safe; kept `unsafe` for symmetry with the other tokens.
    ///
    /// # Safety
    /// None: the portable kernels run on every CPU.
    pub unsafe fn new_unchecked() -> Self {
        Self
    }
}

/// k-pairs converted to FP32 per chunk (16 KiB of stack).
const KC: usize = 32;

#[inline]
pub(crate) fn f16_to_f32(x: u16) -> f32 {
    half::f16::from_bits(x).to_f32()
}

#[inline]
pub(crate) fn bf16_to_f32(x: u16) -> f32 {
    f32::from_bits((x as u32) << 16)
}

/// Reads A[i][kk] as f32.
///
/// # Safety
/// `i < ctx.m`, `kk < ctx.k` (validated extents of A).
#[inline]
pub(crate) unsafe fn a_at(ctx: &Ctx, i: usize, kk: usize) -> f32 {
    // SAFETY: the caller keeps (i, kk) inside the validated extent of A.
    unsafe {
        match ctx.a {
            APtr::F32(p) => *p.add(i * ctx.lda + kk),
            APtr::F16(p) => f16_to_f32(*p.add(i * ctx.lda + kk)),
        }
    }
}

/// Writes one output row segment: `C[i][col0..col0+cols] (= or +=) acc + bias`.
///
/// # Safety
/// `i < ctx.m`, `col0 + cols <= ctx.n`, and the caller has exclusive access to that region.
#[inline]
pub(crate) unsafe fn store_row(ctx: &Ctx, i: usize, col0: usize, acc: &[f32], add: bool) {
    for (c, &v) in acc.iter().enumerate() {
        let col = col0 + c;
        // SAFETY: col < n and i < m are inside the validated extents of C and bias.
        unsafe {
            let b = if ctx.bias.is_null() {
                0.0
            } else {
                *ctx.bias.add(col)
            };
            let dst = ctx.c.add(i * ctx.ldc + col);
            *dst = if add { *dst + (v + b) } else { v + b };
        }
    }
}

/// One tile: rows `row0..row0+rows` × panel `p`.
///
/// # Safety
/// `row0 + rows <= ctx.m`, `p < ctx.np`; the caller has exclusive access to the tile's C region.
pub(crate) unsafe fn gemm_tile(ctx: &Ctx, row0: usize, rows: usize, p: usize) {
    let cols = ctx.panel_cols(p);
    let panel = ctx.panel_ptr(p);
    let mut wf = [0f32; KC * PAIR_ELEMS];
    for i in row0..row0 + rows {
        let mut acc = [0f32; PANEL_COLS];
        let mut q0 = 0;
        while q0 < ctx.kp {
            let qn = (ctx.kp - q0).min(KC);
            for (e, w) in wf[..qn * PAIR_ELEMS].iter_mut().enumerate() {
                // SAFETY: q0 + qn <= kp, so the element lies in panel p's kp*128 run.
                let bits = unsafe { *panel.add(q0 * PAIR_ELEMS + e) };
                *w = match ctx.format {
                    PackedFormat::F16 => f16_to_f32(bits),
                    PackedFormat::Bf16 => bf16_to_f32(bits),
                };
            }
            for qq in 0..qn {
                let kk = 2 * (q0 + qq);
                // SAFETY: i < m and kk < k (kk + 1 checked) are inside A.
                let a0 = unsafe { a_at(ctx, i, kk) };
                let a1 = if kk + 1 < ctx.k {
                    // SAFETY: as above.
                    unsafe { a_at(ctx, i, kk + 1) }
                } else {
                    0.0
                };
                let row = &wf[qq * PAIR_ELEMS..(qq + 1) * PAIR_ELEMS];
                for c in 0..PANEL_COLS {
                    acc[c] += a0 * row[2 * c];
                    acc[c] += a1 * row[2 * c + 1];
                }
            }
            q0 += qn;
        }
        // SAFETY: the tile region belongs to the caller; col range within N.
        unsafe { store_row(ctx, i, p * PANEL_COLS, &acc[..cols], ctx.accumulate) };
    }
}
