//! A plain f32 reference forward pass over fully dequantized weights: no KV cache, no
//! batching tricks, f64 accumulation, naive loops. It is the test oracle for the engine (slow:
//! about a tenth of a second per token) and shares no kernel code with it: its dequantization
//! is written out again here, scalar, on purpose — the one format vocabulary's dequantizer
//! (`hetero_sme::dequantize_row`, which the engine uses) is what this oracle checks, so it must
//! not call it.

use crate::gguf::GgmlType;
use crate::model::{Model, WeightRef};
use half::{bf16, f16};

/// Dequantizes a whole weight matrix (scalar, independent of `hetero_sme::dequantize_row`).
pub fn dequantize(model: &Model, w: &WeightRef) -> Vec<f32> {
    dequantize_bytes(w.ty, w.n * w.k, model.view(w).data)
}

/// Dequantizes `n_el` elements of type `ty` from `b` (unsupported types give NaN).
pub fn dequantize_bytes(ty: GgmlType, n_el: usize, b: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(n_el);
    let f16at = |i: usize| f16::from_bits(u16::from(b[i]) | (u16::from(b[i + 1]) << 8)).to_f32();
    match ty {
        GgmlType::F32 => {
            for i in 0..n_el {
                out.push(f32::from_le_bytes([
                    b[4 * i],
                    b[4 * i + 1],
                    b[4 * i + 2],
                    b[4 * i + 3],
                ]));
            }
        }
        GgmlType::F16 => (0..n_el).for_each(|i| out.push(f16at(2 * i))),
        GgmlType::BF16 => (0..n_el).for_each(|i| {
            out.push(bf16::from_bits(u16::from(b[2 * i]) | (u16::from(b[2 * i + 1]) << 8)).to_f32())
        }),
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => {
            for i in 0..n_el {
                let (blk, j) = (i / 32, i % 32);
                let x = match ty {
                    GgmlType::Q4_0 => {
                        let o = blk * 18;
                        let byte = b[o + 2 + j % 16];
                        let q = if j < 16 { byte & 15 } else { byte >> 4 };
                        f16at(o) * (f32::from(q) - 8.0)
                    }
                    GgmlType::Q4_1 => {
                        let o = blk * 20;
                        let byte = b[o + 4 + j % 16];
                        let q = if j < 16 { byte & 15 } else { byte >> 4 };
                        f16at(o) * f32::from(q) + f16at(o + 2)
                    }
                    _ => {
                        let o = blk * 34;
                        f16at(o) * f32::from(b[o + 2 + j] as i8)
                    }
                };
                out.push(x);
            }
        }
        _ => out.resize(n_el, f32::NAN),
    }
    out
}

fn matvec(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32]) {
    for r in 0..n {
        let mut s = 0f64;
        for i in 0..k {
            s += f64::from(w[r * k + i]) * f64::from(x[i]);
        }
        out[r] = s as f32;
    }
}

fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ss + f64::from(eps)).sqrt();
    x.iter()
        .zip(w)
        .map(|(&a, &b)| (f64::from(a) * inv) as f32 * b)
        .collect()
}

/// Logits of every position of `tokens` (`tokens.len() * vocab`), computed from scratch.
pub fn forward(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let c = &model.config;
    let (d, kv, hd) = (c.d_model, c.kv_dim(), c.head_dim);
    let m = tokens.len();
    let emb = dequantize(model, &model.embed);
    let mut x: Vec<Vec<f32>> = tokens
        .iter()
        .map(|&t| emb[t as usize * d..(t as usize + 1) * d].to_vec())
        .collect();
    for layer in &model.layers {
        let wq = dequantize(model, &layer.wq);
        let wk = dequantize(model, &layer.wk);
        let wv = dequantize(model, &layer.wv);
        let wo = dequantize(model, &layer.wo);
        let wg = dequantize(model, &layer.gate);
        let wu = dequantize(model, &layer.up);
        let wd = dequantize(model, &layer.down);
        let mut qs = vec![vec![0f32; d]; m];
        let mut ks = vec![vec![0f32; kv]; m];
        let mut vs = vec![vec![0f32; kv]; m];
        for t in 0..m {
            let h = rmsnorm(&x[t], &layer.attn_norm, c.eps);
            matvec(&wq, d, d, &h, &mut qs[t]);
            matvec(&wk, kv, d, &h, &mut ks[t]);
            matvec(&wv, kv, d, &h, &mut vs[t]);
            for v in [&mut qs[t], &mut ks[t]] {
                for head in v.chunks_exact_mut(hd) {
                    for i in 0..c.rope_dims / 2 {
                        let theta = f64::from(c.rope_theta)
                            .powf(-2.0 * i as f64 / c.rope_dims as f64)
                            * t as f64;
                        let (s, co) = theta.sin_cos();
                        let (a, b) = (f64::from(head[2 * i]), f64::from(head[2 * i + 1]));
                        head[2 * i] = (a * co - b * s) as f32;
                        head[2 * i + 1] = (a * s + b * co) as f32;
                    }
                }
            }
        }
        let group = c.n_head / c.n_kv_head;
        for t in 0..m {
            let mut att = vec![0f32; d];
            for h in 0..c.n_head {
                let kh = h / group;
                let q = &qs[t][h * hd..(h + 1) * hd];
                let sc: Vec<f64> = (0..=t)
                    .map(|j| {
                        let k = &ks[j][kh * hd..(kh + 1) * hd];
                        q.iter()
                            .zip(k)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|s| (s - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                for i in 0..hd {
                    let mut acc = 0f64;
                    for j in 0..=t {
                        acc += e[j] / z * f64::from(vs[j][kh * hd + i]);
                    }
                    att[h * hd + i] = acc as f32;
                }
            }
            let mut o = vec![0f32; d];
            matvec(&wo, d, d, &att, &mut o);
            for i in 0..d {
                x[t][i] += o[i];
            }
            let h = rmsnorm(&x[t], &layer.ffn_norm, c.eps);
            let mut g = vec![0f32; c.d_ff];
            let mut u = vec![0f32; c.d_ff];
            matvec(&wg, c.d_ff, d, &h, &mut g);
            matvec(&wu, c.d_ff, d, &h, &mut u);
            let a: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(&g, &u)| {
                    let g = f64::from(g);
                    (g / (1.0 + (-g).exp()) * f64::from(u)) as f32
                })
                .collect();
            matvec(&wd, d, c.d_ff, &a, &mut o);
            for i in 0..d {
                x[t][i] += o[i];
            }
        }
    }
    let out_w = if model.tied_output {
        emb
    } else {
        dequantize(model, &model.output)
    };
    let mut logits = vec![0f32; m * c.vocab];
    for t in 0..m {
        let h = rmsnorm(&x[t], &model.output_norm, c.eps);
        matvec(
            &out_w,
            c.vocab,
            d,
            &h,
            &mut logits[t * c.vocab..(t + 1) * c.vocab],
        );
    }
    logits
}
