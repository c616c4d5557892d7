//! Weights as the decoder keeps them on the device, prepared once on the host: Q, K and V
//! concatenated into one matrix (rows of Q and K permuted for NeoX RoPE), gate and up rows
//! interleaved (gate j, up j) so the SwiGLU epilogue sees both, Q4_0/Q4_1 re-laid out to the T
//! layout, every other type as GGUF stores it; matrices of different types are not fused (Q/K/V
//! fall into runs of one type, gate and up stay two matrices); and the memory plan that is
//! checked before anything is uploaded.

use super::{DecoderConfig, LayerWeights, ModelWeights, Tensor};
use crate::attention::KvType;
use crate::error::{Error, Result};
use crate::format::{matrix_bytes, relayout_q4_t, relayout_q4_t_len, GgmlType};
use crate::kernels::RopeMode;
use crate::layout::{relayout_split, relayout_split_len};
use std::ops::Range;

/// How a matrix is stored on the device and which kernels read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum MatKind {
    /// Q4_0 in the T layout (quant plane + f16 scales).
    Q40T,
    /// Q4_1 in the T layout (quant plane + f16 scale/min pairs).
    Q41T,
    /// GGUF Q8_0 blocks.
    Q80,
    /// IEEE half.
    F16,
    /// GGUF Q5_0 blocks.
    Q50,
    /// GGUF Q5_1 blocks.
    Q51,
    /// GGUF Q4_K super-blocks.
    Q4K,
    /// GGUF Q5_K super-blocks.
    Q5K,
    /// GGUF Q6_K super-blocks.
    Q6K,
    /// Q8_0 in the split layout ([`crate::relayout_split`]): int8 plane + f16 scales.
    Q80S,
    /// Q5_0, split: nibble plane + per-block (fifth bits, d) records.
    Q50S,
    /// Q5_1, split: nibble plane + per-block (fifth bits, d, m) records.
    Q51S,
    /// Q4_K, split: nibble plane + per-super-block (d, dmin, 6-bit scales/minimums) records.
    Q4KS,
    /// Q5_K, split: as Q4_K plus the fifth bits in the records.
    Q5KS,
    /// Q6_K, split: nibble plane + per-super-block (high bits, i8 scales, d) records.
    Q6KS,
}

impl MatKind {
    pub(crate) fn of(ty: GgmlType) -> Result<MatKind> {
        Ok(match ty {
            GgmlType::Q4_0 => MatKind::Q40T,
            GgmlType::Q4_1 => MatKind::Q41T,
            GgmlType::Q8_0 => MatKind::Q80,
            GgmlType::F16 => MatKind::F16,
            GgmlType::Q5_0 => MatKind::Q50,
            GgmlType::Q5_1 => MatKind::Q51,
            GgmlType::Q4K => MatKind::Q4K,
            GgmlType::Q5K => MatKind::Q5K,
            GgmlType::Q6K => MatKind::Q6K,
            other => return Err(Error::UnsupportedFormat(other)),
        })
    }

    /// The kind a matrix of `ty` is stored as when `split` layouts are chosen (the decoder's
    /// layered path: `kernels/mm.cl` reads them): Q8_0, Q5_0, Q5_1 and the K-quants split
    /// into quant and record planes, the others as [`MatKind::of`] (Q4_0 and Q4_1 keep the T
    /// layout: a split Q4_0 measured slower on the H200, 8B tg64 238 vs 259 tok/s with the
    /// other changes of that run, benches/results/opencl-kernels.md).
    pub(crate) fn of_layout(ty: GgmlType, split: bool) -> Result<MatKind> {
        let k = MatKind::of(ty)?;
        Ok(match (split, k) {
            (true, MatKind::Q80) => MatKind::Q80S,
            (true, MatKind::Q50) => MatKind::Q50S,
            (true, MatKind::Q51) => MatKind::Q51S,
            (true, MatKind::Q4K) => MatKind::Q4KS,
            (true, MatKind::Q5K) => MatKind::Q5KS,
            (true, MatKind::Q6K) => MatKind::Q6KS,
            _ => k,
        })
    }

    /// Whether this kind is one of the split layouts.
    pub(crate) fn is_split(self) -> bool {
        matches!(
            self,
            MatKind::Q80S
                | MatKind::Q50S
                | MatKind::Q51S
                | MatKind::Q4KS
                | MatKind::Q5KS
                | MatKind::Q6KS
        )
    }

    /// `kernels/mm.cl`'s MM_FMT code for this kind, if its fast matmuls read it.
    pub(crate) fn mm_code(self) -> Option<u32> {
        Some(match self {
            MatKind::Q40T => 1,
            MatKind::Q41T => 2,
            MatKind::Q80S => 3,
            MatKind::Q50S => 4,
            MatKind::Q51S => 5,
            MatKind::Q4KS => 6,
            MatKind::Q5KS => 7,
            MatKind::Q6KS => 8,
            MatKind::F16 => 9,
            _ => return None,
        })
    }

    /// The kernels' name suffix for this kind (decoder.cl: `gemv2_*`, `gemm_*`, the blocks;
    /// persistent.cl's build options).
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            MatKind::Q40T => "q4_0t",
            MatKind::Q41T => "q4_1t",
            MatKind::Q80 => "q8_0",
            MatKind::F16 => "f16",
            MatKind::Q50 => "q5_0",
            MatKind::Q51 => "q5_1",
            MatKind::Q4K => "q4_k",
            MatKind::Q5K => "q5_k",
            MatKind::Q6K => "q6_k",
            MatKind::Q80S => "q8_0s",
            MatKind::Q50S => "q5_0s",
            MatKind::Q51S => "q5_1s",
            MatKind::Q4KS => "q4_ks",
            MatKind::Q5KS => "q5_ks",
            MatKind::Q6KS => "q6_ks",
        }
    }

    pub(crate) fn gemv(self, norm: bool) -> String {
        format!("gemv2_{}{}", self.suffix(), if norm { "_norm" } else { "" })
    }

    pub(crate) fn gemm(self, norm: bool) -> String {
        format!("gemm_{}{}", self.suffix(), if norm { "_norm" } else { "" })
    }

    /// Units of independent work in a row of `k` (T units; 8-value parts otherwise).
    pub(crate) fn row_units(self, k: usize) -> usize {
        match self {
            MatKind::Q40T | MatKind::Q41T => k / 32,
            _ => k / 8,
        }
    }

    /// The GGUF type a matrix stored this way comes from.
    pub(crate) fn gguf_type(self) -> GgmlType {
        match self {
            MatKind::Q40T => GgmlType::Q4_0,
            MatKind::Q41T => GgmlType::Q4_1,
            MatKind::Q80 | MatKind::Q80S => GgmlType::Q8_0,
            MatKind::F16 => GgmlType::F16,
            MatKind::Q50 | MatKind::Q50S => GgmlType::Q5_0,
            MatKind::Q51 | MatKind::Q51S => GgmlType::Q5_1,
            MatKind::Q4K | MatKind::Q4KS => GgmlType::Q4K,
            MatKind::Q5K | MatKind::Q5KS => GgmlType::Q5K,
            MatKind::Q6K | MatKind::Q6KS => GgmlType::Q6K,
        }
    }

    /// Bytes of the two planes of an `n x k` matrix stored this way (the second is empty for
    /// every kind but the T layout's, whose first plane is the GGUF bytes as stored).
    pub(crate) fn plane_bytes(self, n: usize, k: usize) -> Result<(usize, usize)> {
        match self {
            MatKind::Q40T | MatKind::Q41T => relayout_q4_t_len(self.gguf_type(), n, k),
            k2 if k2.is_split() => relayout_split_len(self.gguf_type(), n, k),
            _ => Ok((matrix_bytes(self.gguf_type(), n, k)?, 0)),
        }
    }

    /// The embedding kernel's format code for a matrix stored this way.
    pub(crate) fn embed_code(self) -> u32 {
        match self {
            MatKind::F16 => 0,
            MatKind::Q80 => 3,
            MatKind::Q40T => 4,
            MatKind::Q41T => 5,
            MatKind::Q50 => 6,
            MatKind::Q51 => 7,
            MatKind::Q4K => 8,
            MatKind::Q5K => 9,
            MatKind::Q6K => 10,
            MatKind::Q80S => 11,
            MatKind::Q50S => 12,
            MatKind::Q51S => 13,
            MatKind::Q4KS => 14,
            MatKind::Q5KS => 15,
            MatKind::Q6KS => 16,
        }
    }

    /// The embedding kernel's format code for an embedding of type `ty` gathered from its GGUF
    /// bytes (not re-laid out).
    pub(crate) fn embed_code_gguf(ty: GgmlType) -> Result<u32> {
        Ok(match ty {
            GgmlType::F16 => 0,
            GgmlType::Q4_0 => 1,
            GgmlType::Q4_1 => 2,
            GgmlType::Q8_0 => 3,
            other => MatKind::of(other)?.embed_code(),
        })
    }
}

/// A matrix ready for upload: its kind, shape and the bytes of its one or two planes.
pub(crate) struct HostMat {
    pub(crate) kind: MatKind,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) plane0: Vec<u8>,
    pub(crate) plane1: Vec<u8>,
}

/// GGUF bytes of one row, checked against the type and `k`.
fn rows_of<'a>(t: &Tensor<'a>, n: usize, k: usize, what: &str) -> Result<(usize, &'a [u8])> {
    let need = matrix_bytes(t.ty, n, k)?;
    if t.data.len() != need {
        return Err(Error::BadShape(format!(
            "{what}: {} bytes for a {n} x {k} {} matrix, which needs {need}",
            t.data.len(),
            t.ty
        )));
    }
    Ok((need / n, t.data))
}

/// Row order of Q (or K) for NeoX RoPE: within each head, rotated pair i = (i, i + r/2) of the
/// first `r` = rope_dims columns becomes rows (2i, 2i + 1), so the kernels' adjacent-pair RoPE
/// rotates the right values. Q and K are permuted alike, so q·k is unchanged; unrotated
/// columns keep their places.
fn neox_order(heads: usize, hd: usize, rope_dims: usize) -> Vec<usize> {
    let half = rope_dims / 2;
    let mut order = Vec::with_capacity(heads * hd);
    for h in 0..heads {
        for j in 0..hd {
            let src = if j < rope_dims {
                if j % 2 == 0 {
                    j / 2
                } else {
                    j / 2 + half
                }
            } else {
                j
            };
            order.push(h * hd + src);
        }
    }
    order
}

/// Builds a matrix from the rows `order` picks out of the concatenation of `parts` (each
/// `(tensor, rows)`, all of one type, `k` columns), then converts it to its device layout.
fn assemble(
    parts: &[(&Tensor<'_>, usize)],
    order: &[usize],
    k: usize,
    what: &str,
    split: bool,
    threads: usize,
) -> Result<HostMat> {
    let ty = parts[0].0.ty;
    if let Some((t, _)) = parts.iter().find(|(t, _)| t.ty != ty) {
        return Err(Error::BadShape(format!(
            "{what}: the fused matrices must share one type (got {ty} and {})",
            t.ty
        )));
    }
    let kind = MatKind::of_layout(ty, split)?;
    let mut rows: Vec<&[u8]> = Vec::new();
    for (i, (t, n)) in parts.iter().enumerate() {
        let (rb, data) = rows_of(t, *n, k, &format!("{what} part {i}"))?;
        rows.extend(data.chunks_exact(rb));
    }
    let n = order.len();
    let mut gguf = Vec::with_capacity(n * rows[0].len());
    for &r in order {
        gguf.extend_from_slice(rows[r]);
    }
    to_device_layout_on(kind, gguf, n, k, threads)
}

pub(crate) fn to_device_layout(
    kind: MatKind,
    gguf: Vec<u8>,
    n: usize,
    k: usize,
) -> Result<HostMat> {
    to_device_layout_on(kind, gguf, n, k, 1)
}

/// [`to_device_layout`] on up to `threads` threads, each re-laying a range of rows (both
/// device layouts keep each row's bytes apart in each plane).
pub(crate) fn to_device_layout_on(
    kind: MatKind,
    gguf: Vec<u8>,
    n: usize,
    k: usize,
    threads: usize,
) -> Result<HostMat> {
    if threads > 1
        && n >= 2 * threads
        && (kind.is_split() || matches!(kind, MatKind::Q40T | MatKind::Q41T))
    {
        let (p0, p1) = kind.plane_bytes(n, k)?;
        let rb = gguf.len() / n;
        if p1 > 0 && p0 % n == 0 && p1 % n == 0 && rb * n == gguf.len() {
            let (r0, r1) = (p0 / n, p1 / n);
            let (mut plane0, mut plane1) = (vec![0u8; p0], vec![0u8; p1]);
            let rows = n.div_ceil(threads);
            let parts: Vec<Result<()>> = std::thread::scope(|s| {
                let jobs: Vec<_> = gguf
                    .chunks(rows * rb)
                    .zip(plane0.chunks_mut((rows * r0).max(1)))
                    .zip(plane1.chunks_mut((rows * r1).max(1)))
                    .map(|((src, a), b)| {
                        s.spawn(move || {
                            let m = to_device_layout(kind, src.to_vec(), src.len() / rb, k)?;
                            a.copy_from_slice(&m.plane0);
                            b[..m.plane1.len()].copy_from_slice(&m.plane1);
                            Ok(())
                        })
                    })
                    .collect();
                jobs.into_iter()
                    .map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            });
            for p in parts {
                p?;
            }
            return Ok(HostMat {
                kind,
                n,
                k,
                plane0,
                plane1,
            });
        }
    }
    match kind {
        MatKind::Q40T | MatKind::Q41T => {
            let ty = if kind == MatKind::Q40T {
                GgmlType::Q4_0
            } else {
                GgmlType::Q4_1
            };
            let (nq, nd) = relayout_q4_t_len(ty, n, k)?;
            let (mut q, mut d) = (vec![0u8; nq], vec![0u8; nd]);
            relayout_q4_t(ty, &gguf, n, k, &mut q, &mut d)?;
            Ok(HostMat {
                kind,
                n,
                k,
                plane0: q,
                plane1: d,
            })
        }
        s if s.is_split() => {
            let ty = s.gguf_type();
            let (n0, n1) = relayout_split_len(ty, n, k)?;
            let (mut p0, mut p1) = (vec![0u8; n0], vec![0u8; n1]);
            relayout_split(ty, &gguf, n, k, &mut p0, &mut p1)?;
            Ok(HostMat {
                kind,
                n,
                k,
                plane0: p0,
                plane1: p1,
            })
        }
        _ => Ok(HostMat {
            kind,
            n,
            k,
            plane0: gguf,
            plane1: Vec::new(),
        }),
    }
}

/// One matrix as given (no fusion).
pub(crate) fn single(
    t: &Tensor<'_>,
    n: usize,
    k: usize,
    what: &str,
    split: bool,
) -> Result<HostMat> {
    single_on(t, n, k, what, split, 1)
}

/// [`single`] re-laid on up to `threads` threads (the output head, prepared beside the layers).
pub(crate) fn single_on(
    t: &Tensor<'_>,
    n: usize,
    k: usize,
    what: &str,
    split: bool,
    threads: usize,
) -> Result<HostMat> {
    let order: Vec<usize> = (0..n).collect();
    assemble(&[(t, n)], &order, k, what, split, threads)
}

/// Runs of equal types in `types`: the index ranges fused into one matrix.
pub(crate) fn runs(types: &[GgmlType]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, t) in types.iter().enumerate() {
        match out.last_mut() {
            Some(r) if types[r.start] == *t => r.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// A run of Q/K/V as one device matrix: its rows are columns `col0 ..` of the concatenated
/// output `[q; k; v]`.
pub(crate) struct QkvPart<M> {
    pub(crate) mat: M,
    pub(crate) col0: usize,
}

/// The four (or more, when types differ) matrices of one layer, prepared.
pub(crate) struct HostLayer {
    /// Q/K/V in runs of one type (one matrix when all three share it).
    pub(crate) qkv: Vec<QkvPart<HostMat>>,
    pub(crate) o: HostMat,
    /// Gate and up interleaved (one matrix), or `[gate, up]` when their types differ.
    pub(crate) gate_up: Vec<HostMat>,
    pub(crate) down: HostMat,
}

pub(crate) fn layer(
    c: &DecoderConfig,
    l: &LayerWeights<'_>,
    i: usize,
    split: bool,
) -> Result<HostLayer> {
    let (dq, dkv, d) = (c.q_dim(), c.kv_dim(), c.d_model);
    let what = |s: &str| format!("layer {i} {s}");
    // Rows of q, k and v in the order the kernels want.
    let (qo, ko): (Vec<usize>, Vec<usize>) = match c.rope_mode {
        RopeMode::Normal => ((0..dq).collect(), (0..dkv).collect()),
        RopeMode::Neox => (
            neox_order(c.n_head, c.head_dim, c.rope_dims),
            neox_order(c.n_kv_head, c.head_dim, c.rope_dims),
        ),
    };
    let vo: Vec<usize> = (0..dkv).collect();
    let parts = [(&l.wq, dq, qo), (&l.wk, dkv, ko), (&l.wv, dkv, vo)];
    let mut qkv = Vec::new();
    let mut col0 = 0;
    for run in runs(&[l.wq.ty, l.wk.ty, l.wv.ty]) {
        let mut order = Vec::new();
        let mut base = 0;
        for (_, n, o) in &parts[run.clone()] {
            order.extend(o.iter().map(|r| base + r));
            base += n;
        }
        let tensors: Vec<(&Tensor<'_>, usize)> =
            parts[run].iter().map(|(t, n, _)| (*t, *n)).collect();
        qkv.push(QkvPart {
            mat: assemble(&tensors, &order, d, &what("q/k/v"), split, 1)?,
            col0,
        });
        col0 += base;
    }
    let gate_up = if l.gate.ty == l.up.ty {
        let gu: Vec<usize> = (0..c.d_ff).flat_map(|j| [j, c.d_ff + j]).collect();
        vec![assemble(
            &[(&l.gate, c.d_ff), (&l.up, c.d_ff)],
            &gu,
            d,
            &what("gate/up"),
            split,
            1,
        )?]
    } else {
        vec![
            single(&l.gate, c.d_ff, d, &what("gate"), split)?,
            single(&l.up, c.d_ff, d, &what("up"), split)?,
        ]
    };
    Ok(HostLayer {
        qkv,
        o: single(&l.wo, d, dq, &what("o"), split)?,
        gate_up,
        down: single(&l.down, d, c.d_ff, &what("down"), split)?,
    })
}

/// Device bytes a matrix of type `ty` takes at most: the GGUF bytes (the T layout has exactly
/// that size) or its split layout's, which is up to 9% larger (Q5_0's 8-byte records).
fn mat_bytes(ty: GgmlType, n: usize, k: usize) -> Result<u64> {
    let kind = MatKind::of_layout(ty, true)?;
    let (p0, p1) = kind.plane_bytes(n, k)?;
    Ok((matrix_bytes(ty, n, k)?.max(p0 + p1)) as u64)
}

/// What the decoder will allocate, in bytes, computed from the configuration and the weights'
/// types before anything is uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Every weight matrix and norm vector as uploaded.
    pub weights: u64,
    /// K and V caches of every layer for `max_context` positions (in the decoder's
    /// [`KvType`](crate::KvType)).
    pub kv_cache: u64,
    /// Activations for `max_rows` rows, readback buffers and the RoPE table.
    pub scratch: u64,
    /// The largest single buffer.
    pub largest: u64,
    /// Which buffer that is.
    pub largest_what: &'static str,
}

impl MemoryPlan {
    /// Total bytes.
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.scratch
    }
}

/// Checks every tensor's type, length and fusability against the configuration (so a bad
/// weight is refused before anything is built or uploaded).
fn check_weights(c: &DecoderConfig, w: &ModelWeights<'_>) -> Result<()> {
    let (d, dq, dkv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff);
    for (i, l) in w.layers.iter().enumerate() {
        let what = |s: &str| format!("layer {i} {s}");
        for (t, n, k, name) in [
            (&l.wq, dq, d, "q"),
            (&l.wk, dkv, d, "k"),
            (&l.wv, dkv, d, "v"),
            (&l.wo, d, dq, "o"),
            (&l.gate, ff, d, "gate"),
            (&l.up, ff, d, "up"),
            (&l.down, d, ff, "down"),
        ] {
            MatKind::of(t.ty)?;
            rows_of(t, n, k, &what(name))?;
        }
    }
    MatKind::of(w.embed.ty)?;
    rows_of(&w.embed, c.vocab, d, "embedding")?;
    if let Some(o) = &w.output {
        MatKind::of(o.ty)?;
        rows_of(o, c.vocab, d, "output head")?;
    }
    Ok(())
}

pub(crate) fn plan(c: &DecoderConfig, w: &ModelWeights<'_>, kv: KvType) -> Result<MemoryPlan> {
    check_weights(c, w)?;
    let (d, dq, dkv) = (c.d_model, c.q_dim(), c.kv_dim());
    let mut weights = 0u64;
    let mut largest = (0u64, "");
    let mut see = |bytes: u64, what: &'static str, total: &mut u64| {
        *total += bytes;
        if bytes > largest.0 {
            largest = (bytes, what);
        }
    };
    for l in w.layers.iter() {
        // As `layer` builds them: Q/K/V in runs of one type, gate/up fused when they share it.
        let qkv = [(l.wq.ty, dq), (l.wk.ty, dkv), (l.wv.ty, dkv)];
        for run in runs(&qkv.map(|(t, _)| t)) {
            let rows = qkv[run.clone()].iter().map(|(_, n)| n).sum();
            see(
                mat_bytes(qkv[run.start].0, rows, d)?,
                "a q/k/v matrix",
                &mut weights,
            );
        }
        see(mat_bytes(l.wo.ty, d, dq)?, "an o matrix", &mut weights);
        if l.gate.ty == l.up.ty {
            see(
                mat_bytes(l.gate.ty, 2 * c.d_ff, d)?,
                "a gate/up matrix",
                &mut weights,
            );
        } else {
            see(
                mat_bytes(l.gate.ty, c.d_ff, d)?,
                "a gate matrix",
                &mut weights,
            );
            see(mat_bytes(l.up.ty, c.d_ff, d)?, "an up matrix", &mut weights);
        }
        see(
            mat_bytes(l.down.ty, d, c.d_ff)?,
            "a down matrix",
            &mut weights,
        );
        weights += 2 * d as u64 * 4;
    }
    let head = w.output.as_ref().unwrap_or(&w.embed);
    see(
        mat_bytes(head.ty, c.vocab, d)?,
        "the output head",
        &mut weights,
    );
    if w.output.is_some() {
        see(
            mat_bytes(w.embed.ty, c.vocab, d)?,
            "the embedding",
            &mut weights,
        );
    }
    weights += d as u64 * 4;
    let per_cache = c.max_context as u64 * kv.row_bytes(dkv)? as u64;
    let kv_cache = 2 * c.n_layer as u64 * per_cache;
    if per_cache > largest.0 {
        largest = (per_cache, "one layer's K (or V) cache");
    }
    let rows = c.max_rows as u64;
    let logit_rows = if c.all_logits { rows } else { 1 };
    let out =
        (logit_rows * c.vocab as u64).max(rows * (dq + 2 * dkv).max(2 * c.d_ff).max(d) as u64) * 4;
    if out > largest.0 {
        largest = (out, "the readback buffer");
    }
    let acts = rows * (d + 2 * dq + c.d_ff) as u64 * 4;
    let input = (c.max_context as u64 * 4).max(rows * dq.max(d).max(c.d_ff) as u64 * 4);
    let rope = c.max_context as u64 * (c.rope_dims / 2).max(1) as u64 * 8;
    // Decode blocks: a second residual row and the partial rows of O (per head) and down (per
    // chunk of at least 32 FFN columns).
    let blocks = (1 + c.n_head + c.d_ff / 32) as u64 * d as u64 * 4;
    // A q8_0 cache: the chunk's k and v rows staged in f32 before they are quantized.
    let staged = if kv == KvType::Q8_0 {
        2 * rows * dkv as u64 * 4
    } else {
        0
    };
    // The split decode attention's partial results and counters.
    let parts = (c.n_head * crate::attention::DECODE_SPLITS * (c.head_dim + 2)) as u64 * 4
        + c.n_head as u64 * 4;
    let scratch = acts + out + input + rope + blocks + rows * 4 + 64 + staged + parts;
    Ok(MemoryPlan {
        weights,
        kv_cache,
        scratch,
        largest: largest.0,
        largest_what: largest.1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_group_equal_neighbours() {
        use GgmlType::*;
        assert_eq!(runs(&[Q4K, Q4K, Q4K]), vec![0..3]);
        assert_eq!(runs(&[Q4K, Q4K, Q6K]), vec![0..2, 2..3]);
        assert_eq!(runs(&[Q5_0, Q8_0, Q5_0]), vec![0..1, 1..2, 2..3]);
        assert_eq!(runs(&[Q6K, Q4K, Q4K]), vec![0..1, 1..3]);
    }

    #[test]
    fn neox_order_pairs_i_with_i_plus_half() {
        // One head of 8, all rotated: pairs (0,4) (1,5) (2,6) (3,7) become adjacent.
        assert_eq!(neox_order(1, 8, 8), vec![0, 4, 1, 5, 2, 6, 3, 7]);
        // Two heads of 6 with 4 rotated dims: (0,2) (1,3), then 4, 5 in place.
        assert_eq!(
            neox_order(2, 6, 4),
            vec![0, 2, 1, 3, 4, 5, 6, 8, 7, 9, 10, 11]
        );
    }
}
