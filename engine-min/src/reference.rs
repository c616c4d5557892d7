//! A plain f32 reference forward pass over fully dequantized weights: no KV cache, no
//! batching tricks, f64 accumulation, naive loops (a matvec's rows interleaved, each summed in
//! order). It is the test oracle for the engine (slow: a few hundredths of a second per token
//! of SmolLM2) and shares no kernel code with it: its dequantization
//! is written out again here, scalar, on purpose — the one format vocabulary's dequantizer
//! (`hetero_sme::dequantize_row`, which the engine uses) is what this oracle checks, so it must
//! not call it. That holds for Q5_0, Q5_1, Q4_K, Q5_K and Q6_K too (written from the GGUF
//! layout, element by element; a unit test below agrees with `dequantize_row` bit for bit on
//! random blocks, and `tests/gguf_oracle.rs` ties that one to gguf-py's).

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
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let (bytes, qh_at) = if ty == GgmlType::Q5_0 {
                (22, 2)
            } else {
                (24, 4)
            };
            for i in 0..n_el {
                let (o, j) = ((i / 32) * bytes, i % 32);
                let qh = u32::from_le_bytes([
                    b[o + qh_at],
                    b[o + qh_at + 1],
                    b[o + qh_at + 2],
                    b[o + qh_at + 3],
                ]);
                let byte = b[o + qh_at + 4 + j % 16];
                let lo = if j < 16 { byte & 15 } else { byte >> 4 };
                let q = f32::from(lo | (((qh >> j) & 1) as u8) << 4);
                out.push(if ty == GgmlType::Q5_0 {
                    f16at(o) * (q - 16.0)
                } else {
                    f16at(o) * q + f16at(o + 2)
                });
            }
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            // 256 values: d, dmin, 12 bytes of eight 6-bit (scale, min) pairs, [qh 32 bytes for
            // Q5_K], 128 bytes of low nibbles; 32-value sub-block s uses pair s, and its low
            // nibbles sit in byte 32·(s/2) + l, low half for even s, high half for odd.
            let (bytes, qs_at) = if ty == GgmlType::Q4K {
                (144, 16)
            } else {
                (176, 48)
            };
            for i in 0..n_el {
                let (o, j) = ((i / 256) * bytes, i % 256);
                let (s, l) = (j / 32, j % 32);
                let sc = &b[o + 4..o + 16];
                let (scale, min) = if s < 4 {
                    (sc[s] & 63, sc[s + 4] & 63)
                } else {
                    (
                        (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4),
                        (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4),
                    )
                };
                let byte = b[o + qs_at + 32 * (s / 2) + l];
                let mut q = if s % 2 == 0 { byte & 15 } else { byte >> 4 };
                if ty == GgmlType::Q5K && (b[o + 16 + l] >> s) & 1 == 1 {
                    q += 16;
                }
                let d = f16at(o) * f32::from(scale);
                let m = f16at(o + 2) * f32::from(min);
                out.push(d * f32::from(q) - m);
            }
        }
        GgmlType::Q6K => {
            // 256 values: 128 bytes of low nibbles, 64 of 2-bit highs, 16 i8 scales, d. Half
            // h = j/128 of the block, quarter r = (j%128)/32, lane l = j%32: low nibble from
            // byte 64h + l + 32(r%2) (high half when r ≥ 2), high bits 2r.. of byte 32h + l.
            for i in 0..n_el {
                let (o, j) = ((i / 256) * 210, i % 256);
                let (h, r, l) = (j / 128, (j % 128) / 32, j % 32);
                let byte = b[o + 64 * h + l + 32 * (r % 2)];
                let lo = if r < 2 { byte & 15 } else { byte >> 4 };
                let hi = (b[o + 128 + 32 * h + l] >> (2 * r)) & 3;
                let q = i32::from(lo | (hi << 4)) - 32;
                let scale = b[o + 192 + 8 * h + l / 16 + 2 * r] as i8;
                out.push(f16at(o + 208) * f32::from(scale) * q as f32);
            }
        }
        _ => out.resize(n_el, f32::NAN),
    }
    out
}

/// `out[r] = Σᵢ w[r·k + i]·x[i]`, in f64, each row's sum taken in the order of `i`: the
/// oracle's definition ([`matvec_naive`]). Eight rows at a time: one row's sum is a chain of
/// dependent additions, each waiting for the last; eight independent chains keep the adder
/// busy (~5x faster here), and every row's sum is still the same operations in the same order,
/// so the same bits (a unit test below holds it to [`matvec_naive`]).
fn matvec(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32]) {
    const R: usize = 8;
    let x = &x[..k];
    let mut r = 0;
    while r + R <= n {
        let rows: [&[f32]; R] = core::array::from_fn(|j| &w[(r + j) * k..(r + j + 1) * k]);
        let mut s = [0f64; R];
        for (i, &xi) in x.iter().enumerate() {
            let xi = f64::from(xi);
            for j in 0..R {
                s[j] += f64::from(rows[j][i]) * xi;
            }
        }
        for j in 0..R {
            out[r + j] = s[j] as f32;
        }
        r += R;
    }
    matvec_naive(&w[r * k..], n - r, k, x, &mut out[r..]);
}

/// One row after the other, the definition [`matvec`] keeps.
fn matvec_naive(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The interleaved rows give the naive sums bit for bit (row counts around the
    /// interleave, values of mixed signs and magnitudes, so any reordering would show).
    #[test]
    fn matvec_rows_interleaved_is_the_naive_sum() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for (n, k) in [(1, 1), (7, 33), (8, 64), (9, 576), (61, 1536), (16, 3)] {
            let w: Vec<f32> = (0..n * k)
                .map(|_| rng.gen_range(-1.0f32..1.0) * 10f32.powi(rng.gen_range(-6..6)))
                .collect();
            let x: Vec<f32> = (0..k).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
            let (mut got, mut want) = (vec![f32::NAN; n], vec![f32::NAN; n]);
            matvec(&w, n, k, &x, &mut got);
            matvec_naive(&w, n, k, &x, &mut want);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "n={n} k={k}");
        }
    }

    /// The scalar Q5/K-quant dequantizers above against `hetero_sme::dequantize_row` (itself
    /// checked against gguf-py on every fixture): bit for bit on random blocks, whose f16 scale
    /// fields are set to finite values in ±2 (random bits could be NaN, whose payloads need not
    /// agree).
    #[test]
    fn block_dequantizers_match_sme_bit_for_bit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(18);
        // (type, block bytes, offsets of its f16 fields)
        let cases: [(GgmlType, usize, &[usize]); 5] = [
            (GgmlType::Q5_0, 22, &[0]),
            (GgmlType::Q5_1, 24, &[0, 2]),
            (GgmlType::Q4K, 144, &[0, 2]),
            (GgmlType::Q5K, 176, &[0, 2]),
            (GgmlType::Q6K, 210, &[208]),
        ];
        for (ty, bytes, halves) in cases {
            let blocks = 6;
            let mut b: Vec<u8> = (0..blocks * bytes).map(|_| rng.gen()).collect();
            for blk in b.chunks_exact_mut(bytes) {
                for &at in halves {
                    let h = f16::from_f32(rng.gen_range(-2.0f32..2.0)).to_bits();
                    blk[at..at + 2].copy_from_slice(&h.to_le_bytes());
                }
            }
            let n_el = ty.row_bytes(256).map_or(0, |rb| blocks * bytes * 256 / rb);
            let got = dequantize_bytes(ty, n_el, &b);
            let mut want = vec![f32::NAN; n_el];
            hetero_sme::dequantize_row(ty, &b, &mut want).expect("sme dequantizes");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{ty:?} element {i}: {g} vs {w}");
            }
        }
    }
}
