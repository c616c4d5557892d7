//! Plain CPU references for every kernel (f64 accumulation), used by the tests and usable as a
//! fallback. They allocate; they are not hot-path code. Weights are dequantized by the family's
//! one dequantizer (`hetero_sme::dequantize_row`); the matmuls, norms and attention here are
//! this crate's own oracle code, written plainly on purpose.

use crate::error::{Error, Result};
use crate::format::{row_bytes, GgmlType};
use crate::kernels::RopeMode;

/// Dequantizes one row of `k` values stored as `format` into `out[..k]`, through the family's
/// one dequantizer (`hetero_sme::dequantize_row`); only the types the kernels compute are
/// accepted, so the oracle never silently covers a format the device cannot run.
pub fn dequantize_row(format: GgmlType, row: &[u8], k: usize, out: &mut [f32]) -> Result<()> {
    let need = row_bytes(format, k)?;
    if row.len() < need || out.len() < k {
        return Err(Error::BufferTooSmall {
            what: "dequantize_row",
            needed: need,
            got: row.len(),
        });
    }
    hetero_sme::dequantize_row(format, &row[..need], &mut out[..k]).map_err(Error::Dequantize)
}

/// `Y[m][n] = sum_k X[m][k] W[n][k]` with `W` in `format`; `x` is `m x k`.
pub fn gemm(
    format: GgmlType,
    w: &[u8],
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Result<Vec<f32>> {
    let rb = row_bytes(format, k)?;
    if w.len() < rb * n || x.len() < m * k {
        return Err(Error::BufferTooSmall {
            what: "gemm reference",
            needed: rb * n,
            got: w.len(),
        });
    }
    let mut row = vec![0f32; k];
    let mut y = vec![0f32; m * n];
    for r in 0..n {
        dequantize_row(format, &w[r * rb..(r + 1) * rb], k, &mut row)?;
        for i in 0..m {
            let xr = &x[i * k..(i + 1) * k];
            y[i * n + r] = row
                .iter()
                .zip(xr)
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum::<f64>() as f32;
        }
    }
    Ok(y)
}

/// RMSNorm reference.
pub fn rms_norm(x: &[f32], g: &[f32], rows: usize, n: usize, eps: f32) -> Vec<f32> {
    let mut y = vec![0f32; rows * n];
    for r in 0..rows {
        let xr = &x[r * n..(r + 1) * n];
        let ms = xr.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        for i in 0..n {
            y[r * n + i] = (xr[i] as f64 * inv * g[i] as f64) as f32;
        }
    }
    y
}

/// SwiGLU reference.
pub fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(g, u)| {
            let g = *g as f64;
            (g / (1.0 + (-g).exp()) * *u as f64) as f32
        })
        .collect()
}

/// Residual add reference.
pub fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// RoPE reference, in place on `x[t][heads][head_dim]`.
pub fn rope(
    x: &mut [f32],
    tokens: usize,
    heads: usize,
    head_dim: usize,
    pos0: u32,
    base: f32,
    mode: RopeMode,
) {
    let half = head_dim / 2;
    for t in 0..tokens {
        let pos = (pos0 as u64 + t as u64) as f64;
        for hh in 0..heads {
            let xh = &mut x[(t * heads + hh) * head_dim..(t * heads + hh + 1) * head_dim];
            for i in 0..half {
                let (ia, ib) = match mode {
                    RopeMode::Normal => (2 * i, 2 * i + 1),
                    RopeMode::Neox => (i, i + half),
                };
                let ang = pos * (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
                let (s, c) = ang.sin_cos();
                let (a, b) = (xh[ia] as f64, xh[ib] as f64);
                xh[ia] = (a * c - b * s) as f32;
                xh[ib] = (a * s + b * c) as f32;
            }
        }
    }
}

/// Decode attention reference (layouts as [`crate::Kernels::attention`]).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    len: usize,
) -> Vec<f32> {
    let group = heads / kv_heads;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0f32; heads * head_dim];
    for h in 0..heads {
        let kvh = h / group;
        let qh = &q[h * head_dim..(h + 1) * head_dim];
        let s: Vec<f64> = (0..len)
            .map(|t| {
                let kp = &k[(t * kv_heads + kvh) * head_dim..][..head_dim];
                qh.iter()
                    .zip(kp)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
        let sum: f64 = e.iter().sum();
        for d in 0..head_dim {
            let o: f64 = (0..len)
                .map(|t| e[t] * v[(t * kv_heads + kvh) * head_dim + d] as f64)
                .sum();
            out[h * head_dim + d] = (o / sum) as f32;
        }
    }
    out
}

/// Normalized mean squared error, as llama.cpp's test-backend-ops: `sum((a-b)^2) / sum(b^2)`,
/// with `b` the reference. Any NaN in `a` gives infinity.
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let mut num = 0f64;
    let mut den = 0f64;
    for (x, y) in a.iter().zip(b) {
        if !x.is_finite() {
            return f64::INFINITY;
        }
        num += (*x as f64 - *y as f64).powi(2);
        den += (*y as f64).powi(2);
    }
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    num / den.max(f64::MIN_POSITIVE)
}
