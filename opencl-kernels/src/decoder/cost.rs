//! What each op kind of a layered step must move and compute at least (weights once, each
//! activation row read and written once, the KV cache read once per row), so that measured
//! device time per op kind ([`Decoder::take_op_times`](super::Decoder::take_op_times)) can
//! be put against a device's copy bandwidth and FP32 rate.

use super::{Decoder, OpKind};
use crate::error::{Error, Result};

/// The least bytes moved and the FLOPs of one op kind over one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpCost {
    /// The op.
    pub kind: OpKind,
    /// Bytes the op must read or write over the step: its weights as stored on the device,
    /// activations in and out (f32), the KV cache it reads or appends.
    pub bytes: u64,
    /// Floating-point operations over the step (a multiply-add counts 2).
    pub flops: u64,
}

impl Decoder {
    /// [`OpCost`] of each op kind of a layered step of `rows` tokens whose last token sits at
    /// position `last_pos` (so the rows attend to `last_pos + 2 - rows ..= last_pos + 1`
    /// positions), reading back the last row's logits (`argmax`: also their argmax): the kinds
    /// [`DecodePath::Layered`](super::DecodePath::Layered) and prefill launch, in that order.
    /// A persistent or decode-block step moves the same bytes under other kinds.
    pub fn op_costs(&self, rows: usize, last_pos: usize, argmax: bool) -> Result<Vec<OpCost>> {
        let c = &self.cfg;
        if rows == 0 || rows > last_pos + 1 || last_pos >= c.max_context {
            return Err(Error::BadShape(format!(
                "op_costs: {rows} rows ending at position {last_pos} (context {})",
                c.max_context
            )));
        }
        let (d, dq, dkv, ff, r) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff, rows as u64);
        let (d, dq, dkv, ff) = (d as u64, dq as u64, dkv as u64, ff as u64);
        let mut weights = [0u64; 4]; // qkv, o, gate/up, down over every layer
        for l in &self.layers {
            let mats: [&[_]; 4] = [
                &l.qkv.iter().map(|p| &p.mat).collect::<Vec<_>>(),
                &[&l.o],
                &l.gate_up.iter().collect::<Vec<_>>(),
                &[&l.down],
            ];
            for (w, ms) in weights.iter_mut().zip(mats) {
                for m in ms {
                    let (p0, p1) = m.kind.plane_bytes(m.n, m.k)?;
                    *w += (p0 + p1) as u64;
                }
            }
        }
        let n = c.n_layer as u64;
        let (hp0, hp1) = self.head.kind.plane_bytes(self.head.n, self.head.k)?;
        // Positions attended over the step: sum of (p + 1) for p in last_pos+1-rows..=last_pos.
        let first = (last_pos + 1 - rows) as u64;
        let attended: u64 = (first + 1..=last_pos as u64 + 1).sum();
        let vocab = c.vocab as u64;
        let mut out = vec![
            OpCost {
                kind: OpKind::Embed,
                bytes: r * d * 4,
                flops: 0,
            },
            OpCost {
                kind: OpKind::QkvRope,
                bytes: weights[0] + n * (r * d * 4 + d * 4 + r * (dq + 2 * dkv) * 4),
                flops: n * 2 * r * (dq + 2 * dkv) * d,
            },
            OpCost {
                kind: OpKind::Attention,
                bytes: n * (attended * 2 * dkv * 4 + r * 2 * dq * 4),
                flops: n * attended * 4 * dq,
            },
            OpCost {
                kind: OpKind::OProj,
                bytes: weights[1] + n * r * (dq + 2 * d) * 4,
                flops: n * 2 * r * d * dq,
            },
            OpCost {
                kind: OpKind::GateUpSwiglu,
                bytes: weights[2] + n * (r * d * 4 + d * 4 + r * ff * 4),
                flops: n * 2 * r * 2 * ff * d,
            },
            OpCost {
                kind: OpKind::Down,
                bytes: weights[3] + n * r * (ff + 2 * d) * 4,
                flops: n * 2 * r * d * ff,
            },
            OpCost {
                kind: OpKind::Head,
                bytes: (hp0 + hp1) as u64 + d * 8 + vocab * 4,
                flops: 2 * vocab * d,
            },
        ];
        if argmax {
            out.push(OpCost {
                kind: OpKind::Argmax,
                bytes: vocab * 4 + 4,
                flops: 0,
            });
        }
        Ok(out)
    }
}
