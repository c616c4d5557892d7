//! Quantized activations of the int8 GEMM ([`QActs`]): caller-owned scratch filled per call,
//! in up to two schemes that one forward can share between weights of different formats
//! ([`ActBlocks`]):
//!
//! - per 32 values (the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; llama.cpp's Q8_0 /
//!   Q8_1): `d_x = amax/127`, `q_x = clamp(round_ties_even(x·(127/amax)), ±127)` and a
//!   [`BlockMeta`];
//! - per 256 values (the K-quants Q4_K, Q5_K, Q6_K; llama.cpp's Q8_K): `q_x` likewise, one
//!   `d_x = 1/(127/amax)` per 256 and the sums of `q_x` per 32 and per 16 ([`SuperMeta`]).
//!
//! The operations are ggml's, so the integers equal llama.cpp's CPU backend's.
//!
//! The portable quantizers here are the definitions; the AVX-512 ones write identical bytes.

use crate::blocks::QK_K;
use crate::quant::QK;
use crate::Error;

/// Per (activation row, 32-value block) quantization record, 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockMeta {
    /// Block scale `d_x = amax / 127` (0 for an all-zero block).
    pub d: f32,
    /// `d_x · Σq_x` (used by Q4_1's and Q5_1's offset term).
    pub s: f32,
    /// `-8 Σq_x` (Q4_0's folded offset; Q5_0 folds twice this).
    pub n8: i32,
    /// `-128 Σq_x` (Q8_0's folded offset).
    pub n128: i32,
}

const _: () = assert!(core::mem::size_of::<BlockMeta>() == 16);

/// Per (activation row, 256-value super-block) quantization record (llama.cpp's Q8_K: one scale
/// and the sums per 16), in the forms the K-quant kernels read.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SuperMeta {
    /// Super-block scale `d_x = amax / 127` (0 for an all-zero super-block).
    pub d: f32,
    /// `Σq_x` of each 32-value sub-block (|Σ| ≤ 4064): the minimum term of Q4_K / Q5_K, read as
    /// i16 pairs.
    pub bsums32: [i16; 8],
    /// `-32 Σq_x` of each 16-value sub-block: Q6_K's folded `q - 32` offset.
    pub n32: [i32; 16],
}

const _: () = assert!(core::mem::size_of::<SuperMeta>() == 84);

/// Which activation quantizations a [`QActs`] holds; a weight needs one of them
/// ([`crate::Int8Weight::act_blocks`]). Quantize with the union of what the weights that share
/// an input need ([`crate::Int8Kernel::quantize_acts_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ActBlocks {
    /// Per 32 values ([`BlockMeta`]).
    pub per32: bool,
    /// Per 256 values ([`SuperMeta`]); needs K a multiple of 256.
    pub per256: bool,
}

impl ActBlocks {
    /// Per 32 values only (what [`crate::quantize_acts`] fills).
    pub const PER32: Self = Self {
        per32: true,
        per256: false,
    };
    /// Per 256 values only.
    pub const PER256: Self = Self {
        per32: false,
        per256: true,
    };
    /// Both schemes.
    pub const BOTH: Self = Self {
        per32: true,
        per256: true,
    };
    /// Both sets of schemes.
    pub fn union(self, other: Self) -> Self {
        Self {
            per32: self.per32 || other.per32,
            per256: self.per256 || other.per256,
        }
    }
    /// Whether every scheme of `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        (self.per32 || !other.per32) && (self.per256 || !other.per256)
    }
}

/// Quantized activations: caller-owned scratch, sized once with [`QActs::with_capacity`];
/// [`crate::Int8Kernel::quantize_acts_for`] refills it without allocating.
#[derive(Debug, Clone, Default)]
pub struct QActs {
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) blocks: ActBlocks,
    pub(crate) q: Vec<i8>,
    pub(crate) meta: Vec<BlockMeta>,
    pub(crate) qk: Vec<i8>,
    pub(crate) kmeta: Vec<SuperMeta>,
}

/// Bytes of scratch [`QActs`] needs for `m` rows of `k`, both schemes: twice `m·k` bytes of
/// `q_x`, 16 bytes per 32 values and 84 per 256. `None` on overflow.
pub fn quantize_acts_len(m: usize, k: usize) -> Option<usize> {
    let q = m.checked_mul(k)?;
    let meta = (q / QK).checked_mul(core::mem::size_of::<BlockMeta>())?;
    let kmeta = (q / QK_K).checked_mul(core::mem::size_of::<SuperMeta>())?;
    q.checked_mul(2)?.checked_add(meta)?.checked_add(kmeta)
}

impl QActs {
    /// Scratch for up to `m` rows of `k` columns, or any shape with `m·k` no larger, in both
    /// schemes (allocates once).
    pub fn with_capacity(m: usize, k: usize) -> Self {
        let e = m.saturating_mul(k);
        Self {
            m: 0,
            k: 0,
            blocks: ActBlocks::default(),
            q: vec![0; e],
            meta: vec![BlockMeta::default(); e / QK],
            qk: vec![0; e],
            kmeta: vec![SuperMeta::default(); e / QK_K],
        }
    }
    /// Rows held by the last quantization.
    pub fn m(&self) -> usize {
        self.m
    }
    /// Columns of the last quantization.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The schemes the last quantization filled.
    pub fn blocks(&self) -> ActBlocks {
        self.blocks
    }
    /// Elements the scratch can hold (`m·k`).
    pub fn capacity(&self) -> usize {
        self.q.len().min(self.meta.len() * QK)
    }
    /// Per-32 `q_x` of row `r` (`k` values; empty if the row or the scheme is absent).
    pub fn q_row(&self, r: usize) -> &[i8] {
        if r >= self.m || !self.blocks.per32 {
            return &[];
        }
        &self.q[r * self.k..(r + 1) * self.k]
    }
    /// Per-32 block records of row `r` (`k/32`).
    pub fn meta_row(&self, r: usize) -> &[BlockMeta] {
        let nb = self.k / QK;
        if r >= self.m || !self.blocks.per32 {
            return &[];
        }
        &self.meta[r * nb..(r + 1) * nb]
    }
    /// Per-256 `q_x` of row `r` (`k` values; empty if the row or the scheme is absent).
    pub fn qk_row(&self, r: usize) -> &[i8] {
        if r >= self.m || !self.blocks.per256 {
            return &[];
        }
        &self.qk[r * self.k..(r + 1) * self.k]
    }
    /// Per-256 super-block records of row `r` (`k/256`).
    pub fn super_row(&self, r: usize) -> &[SuperMeta] {
        let nb = self.k / QK_K;
        if r >= self.m || !self.blocks.per256 {
            return &[];
        }
        &self.kmeta[r * nb..(r + 1) * nb]
    }
    /// Rounds the per-32 records' scale `d` and scaled sum `s` to FP16 (round to nearest even,
    /// back to f32), as ggml's q8_0 / q8_1 blocks store them, so that the int8 GEMM then
    /// computes what ggml's CPU backend computes for the same weights (the integers `q_x` are
    /// already its own). For an engine that must match llama.cpp's results; the f32 records are
    /// the more accurate ones. The per-256 records are left as they are (ggml's q8_K keeps an
    /// f32 scale). No allocation.
    pub fn round_scales_to_f16(&mut self) {
        if !self.blocks.per32 {
            return;
        }
        let nb = self.m * self.k / crate::quant::QK;
        for b in &mut self.meta[..nb] {
            b.d = half::f16::from_f32(b.d).to_f32();
            b.s = half::f16::from_f32(b.s).to_f32();
        }
    }
}

/// Checks `x`/`m`/`k`/`blocks` against `acts`' capacity; on success sets the shape and the
/// schemes (nothing else written).
pub(crate) fn prepare_acts(
    x: &[f32],
    m: usize,
    k: usize,
    blocks: ActBlocks,
    acts: &mut QActs,
) -> Result<(), Error> {
    let unit = if blocks.per256 { QK_K } else { QK };
    if !k.is_multiple_of(unit) {
        return Err(Error::ShapeMismatch {
            what: if blocks.per256 {
                "K modulo 256 (per-256 activations)"
            } else {
                "K modulo 32"
            },
            expected: 0,
            got: k % unit,
        });
    }
    let e = m.checked_mul(k).ok_or(Error::Overflow)?;
    if x.len() < e {
        return Err(Error::BufferTooSmall {
            what: "x",
            needed: e,
            got: x.len(),
        });
    }
    let cap256 = acts.qk.len().min(acts.kmeta.len() * QK_K);
    let cap = match (blocks.per32, blocks.per256) {
        (true, true) => acts.capacity().min(cap256),
        (false, true) => cap256,
        _ => acts.capacity(),
    };
    if cap < e {
        return Err(Error::BufferTooSmall {
            what: "QActs capacity (elements)",
            needed: e,
            got: cap,
        });
    }
    acts.m = m;
    acts.k = k;
    acts.blocks = blocks;
    Ok(())
}

/// Portable quantization of one 32-element block (the definition the vector one matches bit for
/// bit): `d = amax/127`, `inv = 127/amax`, `q = clamp(round_ties_even(x·inv), -127, 127)`: the
/// operations of ggml's q8_0 / q8_1 quantizers (the multiplier `127/amax`, not `1/d`, which
/// rounds differently: real activations hit the ties it moves, ~6 values in 10,000), so the
/// integers are llama.cpp's own.
pub(crate) fn quantize_block(x: &[f32], q: &mut [i8]) -> BlockMeta {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (qj, &v) in q.iter_mut().zip(x) {
        let qv = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i32;
        *qj = qv as i8;
        sum += qv;
    }
    BlockMeta {
        d,
        s: d * sum as f32,
        n8: -8 * sum,
        n128: -128 * sum,
    }
}

/// Portable quantization of one 256-element super-block (the definition the vector one matches
/// bit for bit): `inv = 127/amax`, `d = 1/inv` (ggml's q8_K: its `iscale` and `1/iscale`, up to
/// a sign that cancels in every product), `q` as in [`quantize_block`], then the sums per 32 and
/// per 16.
pub(crate) fn quantize_super(x: &[f32], q: &mut [i8]) -> SuperMeta {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let inv = if amax / 127.0 > 0.0 {
        127.0 / amax
    } else {
        0.0
    };
    let d = if inv > 0.0 { 1.0 / inv } else { 0.0 };
    let mut s16 = [0i32; 16];
    for (i, (qj, &v)) in q.iter_mut().zip(x).enumerate() {
        let qv = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i32;
        *qj = qv as i8;
        s16[i / 16] += qv;
    }
    SuperMeta {
        d,
        bsums32: core::array::from_fn(|j| (s16[2 * j] + s16[2 * j + 1]) as i16),
        n32: s16.map(|s| -32 * s),
    }
}
