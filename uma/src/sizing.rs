//! Sizing: how many slots of what size cover a model whose decoder layers all need the same
//! buffers, and what that saves against one buffer per tensor.

use crate::{round_slot_size, UmaError, SLOT_ALIGN};

/// One buffer a decoder layer needs: its size and the steps of the layer during which it is
/// live (inclusive). Buffers live at the same step need different slots; others can share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferUse {
    /// Bytes.
    pub bytes: usize,
    /// First step that writes it.
    pub first: u16,
    /// Last step that reads it.
    pub last: u16,
}

/// The answer of [`size_pool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// Slots needed: the most buffers live at one step (interval colouring is optimal here).
    pub slots: usize,
    /// Bytes per slot: the largest buffer, rounded up to [`SLOT_ALIGN`].
    pub slot_size: usize,
    /// Bytes of the pool's data region (`slots * slot_size`).
    pub pool_bytes: usize,
    /// Bytes of one buffer per tensor for the whole model (sum of sizes × layers).
    pub per_tensor_bytes: usize,
    /// `per_tensor_bytes - pool_bytes` (0 when the pool is not smaller).
    pub saved_bytes: usize,
}

/// Sizes a pool for `n_layers` decoder layers that each need `buffers` (layers run one after
/// another and reuse the slots). Errors: [`UmaError::BadSizing`] (no buffers, zero layers, a
/// buffer whose `last < first`), [`UmaError::TooLarge`] (overflow).
pub fn size_pool(buffers: &[BufferUse], n_layers: usize) -> Result<Sizing, UmaError> {
    if buffers.is_empty() || n_layers == 0 || buffers.iter().any(|b| b.last < b.first) {
        return Err(UmaError::BadSizing);
    }
    // The most intervals live at one point is reached at some interval's start.
    let slots = buffers
        .iter()
        .map(|b| {
            buffers
                .iter()
                .filter(|o| o.first <= b.first && b.first <= o.last)
                .count()
        })
        .max()
        .unwrap_or(0);
    let largest = buffers.iter().map(|b| b.bytes).max().unwrap_or(0);
    let slot_size = round_slot_size(largest).ok_or(UmaError::TooLarge)?;
    let pool_bytes = slots.checked_mul(slot_size).ok_or(UmaError::TooLarge)?;
    let per_tensor_bytes = buffers
        .iter()
        .try_fold(0usize, |acc, b| acc.checked_add(b.bytes))
        .and_then(|s| s.checked_mul(n_layers))
        .ok_or(UmaError::TooLarge)?;
    debug_assert_eq!(slot_size % SLOT_ALIGN, 0);
    Ok(Sizing {
        slots,
        slot_size,
        pool_bytes,
        per_tensor_bytes,
        saved_bytes: per_tensor_bytes.saturating_sub(pool_bytes),
    })
}

/// The shape of a Llama-style decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// Hidden size.
    pub hidden: usize,
    /// FFN intermediate size.
    pub intermediate: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
}

/// The activation buffers of one Llama decoder layer for `seq` tokens attending over `ctx`
/// positions, with `elem` bytes per element, and when each is live. Steps: 0 RMSNorm,
/// 1 Q/K/V projections, 2 RoPE + KV-cache append, 3 attention (scores, then output),
/// 4 output projection, 5 residual add + RMSNorm, 6 gate/up projections, 7 SwiGLU + down
/// projection, 8 residual add. The residual stream is live throughout; the KV cache is not a
/// pool buffer (it persists per layer).
pub fn llama_layer_buffers(s: &LayerShape, seq: usize, ctx: usize, elem: usize) -> [BufferUse; 10] {
    let b = |n: usize, first, last| BufferUse {
        bytes: n.saturating_mul(elem),
        first,
        last,
    };
    let t = seq;
    [
        b(t * s.hidden, 0, 8),                // residual stream
        b(t * s.hidden, 0, 1),                // normed input
        b(t * s.heads * s.head_dim, 1, 3),    // q
        b(t * s.kv_heads * s.head_dim, 1, 2), // k
        b(t * s.kv_heads * s.head_dim, 1, 2), // v
        b(s.heads * t * ctx, 3, 3),           // attention scores
        b(t * s.heads * s.head_dim, 3, 4),    // attention output
        b(t * s.hidden, 4, 5),                // output projection
        b(t * s.intermediate, 6, 7),          // gate (SwiGLU in place)
        b(t * s.intermediate, 6, 7),          // up
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_prefill() {
        let s = LayerShape {
            hidden: 576,
            intermediate: 1536,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
        };
        let bufs = llama_layer_buffers(&s, 128, 128, 4);
        let z = size_pool(&bufs, 30).unwrap();
        // Step 1: residual, normed input, q, k, v.
        assert_eq!(z.slots, 5);
        assert_eq!(z.slot_size, 128 * 1536 * 4);
        assert_eq!(z.pool_bytes, 5 * 786_432); // 3.75 MiB
        assert_eq!(z.per_tensor_bytes, 3_833_856 * 30); // ~110 MiB (README figure)
        assert_eq!(z.saved_bytes, z.per_tensor_bytes - z.pool_bytes);
    }

    #[test]
    fn bad() {
        assert_eq!(size_pool(&[], 3), Err(UmaError::BadSizing));
        let b = BufferUse {
            bytes: 1,
            first: 2,
            last: 1,
        };
        assert_eq!(size_pool(&[b], 3), Err(UmaError::BadSizing));
        let ok = BufferUse { first: 0, ..b };
        assert_eq!(size_pool(&[ok], 0), Err(UmaError::BadSizing));
        let huge = BufferUse {
            bytes: usize::MAX,
            first: 0,
            last: 0,
        };
        assert_eq!(size_pool(&[huge], 1), Err(UmaError::TooLarge));
    }
}
