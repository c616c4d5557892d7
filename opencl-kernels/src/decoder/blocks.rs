//! Decode blocks ([`DecodePath::Blocks`](super::DecodePath::Blocks)): a one-token step in two
//! launches a layer, built here when the model and the device allow them.

use super::ops::{self, BlockBufs, Op, Shared};
use super::{DecoderConfig, LayerMats};
use crate::attention::KvType;
use crate::device::{Buffer, Device, Program};
use crate::error::{Error, Result};
use std::sync::Arc;

/// The decode blocks of every layer ([`DecodePath::Blocks`](super::DecodePath::Blocks)).
pub(super) struct Blocks {
    pub(super) a: Vec<Op>,
    pub(super) b: Vec<Op>,
    pub(super) finish: Op,
    _bufs: BlockBufs,
}

/// Why [`DecodePath::Blocks`](super::DecodePath::Blocks) cannot run this model here, if it cannot.
pub(super) fn blocks_unfit(
    c: &DecoderConfig,
    layers: &[LayerMats],
    local_mem: u64,
    kv: KvType,
) -> Option<&'static str> {
    if kv == KvType::Q8_0 {
        // Block A appends one row from one work-group per head: a q8_0 block's scale needs
        // the whole 32 values, which the staged append (kv_store_q8) does between launches.
        return Some("decode blocks need an f32 or f16 KV cache");
    }
    if layers.is_empty() {
        return Some("decode blocks need at least one layer");
    }
    if !c.head_dim.is_power_of_two() || !(16..=256).contains(&c.head_dim) {
        return Some("decode blocks need a power-of-two head_dim in 16..=256");
    }
    // One fused Q/K/V and one interleaved gate/up matrix a layer, all of one kind.
    let kind = layers
        .first()
        .and_then(|l| l.qkv.first())
        .map(|p| p.mat.kind);
    if layers.iter().any(|l| {
        l.qkv.len() != 1
            || l.gate_up.len() != 1
            || l.qkv.iter().any(|p| Some(p.mat.kind) != kind)
            || Some(l.o.kind) != kind
            || l.gate_up.iter().any(|m| Some(m.kind) != kind)
            || Some(l.down.kind) != kind
    }) {
        return Some("decode blocks need one weight type for every layer matrix");
    }
    let (a, b) = ops::block_local_bytes(c.d_model, c.head_dim, block_chunk(c.d_ff));
    if a.max(b) as u64 > local_mem {
        return Some("decode blocks need more local memory than the device has");
    }
    None
}

/// FFN columns per block-B work-group: 64 where they divide d_ff, else 32.
fn block_chunk(ff: usize) -> usize {
    if ff.is_multiple_of(64) {
        64
    } else {
        32
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn build_blocks(
    dev: &Arc<Device>,
    prog: &Program,
    c: &DecoderConfig,
    layers: &[LayerMats],
    x: &Buffer,
    sh: &Shared,
    eps: f32,
) -> Result<Blocks> {
    let (d, chunk) = (c.d_model, block_chunk(c.d_ff));
    let bb = BlockBufs {
        x2: dev.alloc(d * 4)?,
        po: dev.alloc(c.n_head * d * 4)?,
        pd: dev.alloc(c.d_ff / chunk * d * 4)?,
        chunk,
        chunks: c.d_ff / chunk,
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (i, l) in layers.iter().enumerate() {
        // Layer 0 starts from the gathered embedding alone; later ones add the previous
        // layer's down partial rows.
        let nparts = if i == 0 { 0 } else { bb.chunks };
        let (Some(qkv), Some(gate_up)) = (l.qkv.first(), l.gate_up.first()) else {
            return Err(Error::NotApplicable(
                "decode blocks need fused Q/K/V and gate/up",
            ));
        };
        a.push(ops::block_a(
            dev,
            prog,
            (&qkv.mat, &l.o),
            (x, &bb.pd, nparts, &bb.x2),
            (&l.attn_norm, eps),
            (&l.kc, &l.vc),
            &bb,
            (d, c.n_head, c.n_kv_head),
            sh,
        )?);
        b.push(ops::block_b(
            dev,
            prog,
            (gate_up, &l.down),
            (&bb.x2, c.n_head, x),
            (&l.ffn_norm, eps),
            &bb,
            (d, c.d_ff),
        )?);
    }
    let finish = ops::block_finish(dev, prog, x, &bb, d)?;
    Ok(Blocks {
        a,
        b,
        finish,
        _bufs: bb,
    })
}
