//! Attention over a KV cache on the device (`kernels/attention.cl`): the tiled (flash-style)
//! prefill kernel, the decode kernel split over ranges of positions, the previous kernels of
//! both kinds (kept as second implementations and baselines), and the q8_0 cache append. The
//! resident decoder uses them; they are usable on their own (the tests and
//! `examples/attention_bench.rs` do).
//!
//! Layouts: queries and outputs `[m][heads * head_dim]` f32 (row `i` at position `pos0 + i`,
//! RoPE applied); each cache `[position][kv_heads * head_dim]` in a [`KvType`]; query head `h`
//! reads kv head `h / (heads / kv_heads)`.

use crate::device::{Buffer, Device, Program};
use crate::error::{Error, Result};
use crate::kernels::{Launch, OPTIONS};
use std::sync::Arc;

/// The OpenCL C source of the attention program (embedded): the shared helpers, the cache's
/// storage, the decoder's helpers (the previous decode kernel's), then the kernels.
pub const ATTENTION_SOURCE: &str = concat!(
    include_str!("../kernels/common.cl"),
    include_str!("../kernels/kv.cl"),
    include_str!("../kernels/decoder_ops.cl"),
    include_str!("../kernels/attention.cl")
);

/// How the KV cache stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// 4 bytes a value.
    F32,
    /// 2 bytes a value (IEEE half, rounded to nearest even on append): llama.cpp's default.
    #[default]
    F16,
    /// GGUF's Q8_0: blocks of 32 values, an f16 scale and 32 int8 (34 bytes, 1.0625 a value);
    /// needs `kv_heads * head_dim` a multiple of 32.
    Q8_0,
}

impl KvType {
    /// Every type.
    pub const ALL: [KvType; 3] = [KvType::F32, KvType::F16, KvType::Q8_0];

    /// `f32`, `f16` or `q8_0`.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Bytes of one cache row (one position) of `kv_dim` values; q8_0 needs whole blocks.
    pub fn row_bytes(self, kv_dim: usize) -> Result<usize> {
        match self {
            KvType::F32 => Ok(kv_dim * 4),
            KvType::F16 => Ok(kv_dim * 2),
            KvType::Q8_0 if kv_dim.is_multiple_of(32) => Ok(kv_dim / 32 * 34),
            KvType::Q8_0 => Err(Error::BadShape(format!(
                "a q8_0 KV cache needs kv_heads * head_dim ({kv_dim}) to be a multiple of 32"
            ))),
        }
    }

    /// The `KV_TYPE` code of kv.cl.
    pub(crate) fn code(self) -> u32 {
        match self {
            KvType::F32 => 0,
            KvType::F16 => 1,
            KvType::Q8_0 => 2,
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The heads an attention program is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Per-head width (even, at most 256).
    pub head_dim: usize,
    /// The caches' storage.
    pub kv: KvType,
}

impl AttentionShape {
    /// Width of the queries.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of a cache row.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    fn check(&self) -> Result<()> {
        let s = self;
        if s.heads == 0 || s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) {
            return Err(Error::BadShape(format!(
                "heads ({}) must be a positive multiple of kv_heads ({})",
                s.heads, s.kv_heads
            )));
        }
        if s.head_dim == 0 || !s.head_dim.is_multiple_of(2) || s.head_dim > 256 {
            return Err(Error::BadShape(format!(
                "head_dim ({}) must be even and at most 256",
                s.head_dim
            )));
        }
        s.kv.row_bytes(s.kv_dim()).map(drop)
    }
}

/// Work-items of the tiled prefill and of the split decode work-groups (attention.cl's FA_WG).
const FA_WG: usize = 128;
/// Work-items of the previous kernels' work-groups (rowwise; per-head decode: AP_WG).
const ROW_WG: usize = 64;
const AP_WG: usize = 256;
/// Positions a range of the split decode takes at least (fewer ranges for short contexts).
pub const DECODE_KEYS: usize = 64;
/// Ranges the split decode cuts the positions into at most.
pub const DECODE_SPLITS: usize = 32;
/// The previous per-head decode kernel: positions a range, ranges at most.
const OLD_KEYS: usize = 16;
const OLD_SPLITS: usize = 32;

/// The prefill tiles, and the decode heads a work-group: chosen once per shape from the
/// device's local memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    /// Row slots of a prefill work-group: (position, query head) pairs.
    pub rows: usize,
    /// Keys of a prefill tile.
    pub keys: usize,
    /// Query heads a prefill work-group takes (a divisor of the group, so positions a
    /// work-group = `rows / group_heads`).
    pub group_heads: usize,
    /// Query heads a decode work-group takes.
    pub decode_heads: usize,
}

impl Tiles {
    /// Query positions a prefill work-group takes.
    pub fn positions(&self) -> usize {
        self.rows / self.group_heads
    }
}

/// The largest divisor of `g` that is at most `cap`.
fn divisor_at_most(g: usize, cap: usize) -> usize {
    (1..=cap.min(g))
        .rev()
        .find(|d| g.is_multiple_of(*d))
        .unwrap_or(1)
}

/// Local bytes of the tiled prefill for `rows` x `keys` tiles of `head_dim` (attention.cl's
/// qs, kv, ps, red, red2 and row statistics).
pub fn flash_local_bytes(head_dim: usize, rows: usize, keys: usize) -> usize {
    let qld = head_dim.div_ceil(4) * 4 + 4;
    4 * (rows * qld + keys * qld + rows * (keys + 1) + 2 * FA_WG + 3 * rows)
}

/// Local bytes of the split decode for `heads` heads a work-group (attention.cl's qs, vs, ps,
/// red, red2, row statistics and flag).
pub fn decode_local_bytes(head_dim: usize, heads: usize) -> usize {
    let hd4 = head_dim.div_ceil(4) * 4;
    let qld = hd4 + 4;
    let staged = if hd4 > 128 { 16 } else { 32 };
    4 * (heads * qld + staged * qld + heads * (FA_WG + 1) + 2 * FA_WG + 3 * heads + 1)
}

/// The tiles for `shape` on a device with `local_mem` bytes of local memory: the largest
/// prefill tile that fits (rows x keys: 32x64, 32x32, 16x32, 32x16, 16x16, 16x8), decode
/// groups of up to 8 heads of one kv head.
pub fn tiles_for(shape: &AttentionShape, local_mem: u64) -> Result<Tiles> {
    shape.check()?;
    let g = shape.heads / shape.kv_heads;
    let hd = shape.head_dim;
    let (rows, keys) = [(32, 64), (32, 32), (16, 32), (32, 16), (16, 16), (16, 8)]
        .into_iter()
        .find(|&(r, k)| flash_local_bytes(hd, r, k) as u64 <= local_mem)
        .ok_or(Error::NotApplicable(
            "the tiled attention needs more local memory than the device has",
        ))?;
    let decode_heads = (1..=divisor_at_most(g, 8))
        .rev()
        .find(|&d| g.is_multiple_of(d) && decode_local_bytes(hd, d) as u64 <= local_mem)
        .ok_or(Error::NotApplicable(
            "the split decode attention needs more local memory than the device has",
        ))?;
    Ok(Tiles {
        rows,
        keys,
        group_heads: divisor_at_most(g, rows),
        decode_heads,
    })
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::BadShape(format!("{what} = {v} exceeds u32")))
}

/// The attention kernels built for one shape.
pub struct Attention {
    dev: Arc<Device>,
    prog: Program,
    shape: AttentionShape,
    tiles: Tiles,
}

impl std::fmt::Debug for Attention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attention")
            .field("shape", &self.shape)
            .field("tiles", &self.tiles)
            .finish()
    }
}

/// What a launch's per-call arguments and grid are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Grid {
    /// attn_flash: global `(groups * FA_WG, ceil(m / per_group))`.
    Flash {
        pos: u32,
        m: u32,
        groups: usize,
        per_group: usize,
    },
    /// attn_rowwise: global `(64 heads, m)`.
    Rowwise { pos: u32, heads: usize },
    /// attn_dec: global `(splits * groups * FA_WG)`; one row.
    Decode {
        pos: u32,
        splits: u32,
        groups: usize,
    },
    /// attn_decode: global `(splits * heads * AP_WG)`; one row.
    DecodePerHead { pos: u32, splits: u32, heads: usize },
    /// kv_store_q8: global `ceil(2 m blocks / 64) * 64`.
    StoreQ8 { pos: u32, m: u32, blocks: usize },
}

/// Ranges the split decode cuts `len` positions into.
pub fn decode_splits(len: usize) -> usize {
    len.div_ceil(DECODE_KEYS)
        .clamp(1, DECODE_SPLITS)
        .min(len.max(1))
}

fn old_splits(len: usize) -> usize {
    len.div_ceil(OLD_KEYS).clamp(1, OLD_SPLITS).min(len.max(1))
}

impl Grid {
    /// Sets the launch's arguments and grid for `m` rows at positions `pos0..pos0 + m`.
    pub(crate) fn apply(&self, l: &mut Launch, pos0: usize, m: usize) -> Result<()> {
        let p = u32_of(pos0, "position")?;
        match *self {
            Grid::Flash {
                pos,
                m: ma,
                groups,
                per_group,
            } => {
                l.set_scalar(pos, p)?;
                l.set_scalar(ma, u32_of(m, "rows")?)?;
                l.set_global([groups * FA_WG, m.div_ceil(per_group).max(1)]);
            }
            Grid::Rowwise { pos, heads } => {
                l.set_scalar(pos, p)?;
                l.set_global([ROW_WG * heads, m.max(1)]);
            }
            Grid::Decode {
                pos,
                splits,
                groups,
            } => {
                let s = decode_splits(pos0 + 1);
                l.set_scalar(pos, p)?;
                l.set_scalar(splits, u32_of(s, "splits")?)?;
                l.set_global([s * groups * FA_WG, 1]);
            }
            Grid::DecodePerHead { pos, splits, heads } => {
                let s = old_splits(pos0 + 1);
                l.set_scalar(pos, p)?;
                l.set_scalar(splits, u32_of(s, "splits")?)?;
                l.set_global([s * heads * AP_WG, 1]);
            }
            Grid::StoreQ8 { pos, m: ma, blocks } => {
                l.set_scalar(pos, p)?;
                l.set_scalar(ma, u32_of(m, "rows")?)?;
                l.set_global([(2 * m * blocks).div_ceil(64).max(1) * 64, 1]);
            }
        }
        Ok(())
    }

    /// Whether the launch takes one row only (the decode kernels).
    pub(crate) fn one_row(&self) -> bool {
        matches!(self, Grid::Decode { .. } | Grid::DecodePerHead { .. })
    }
}

/// A prepared attention launch: [`AttnLaunch::set`] the rows, then [`AttnLaunch::enqueue`].
#[derive(Debug)]
pub struct AttnLaunch {
    pub(crate) launch: Launch,
    pub(crate) grid: Grid,
    max_m: usize,
    positions: usize,
}

impl AttnLaunch {
    /// Sets `m` query rows at positions `pos0..pos0 + m` (the caches must hold every position
    /// up to `pos0 + m - 1`). A decode launch takes one row.
    pub fn set(&mut self, pos0: usize, m: usize) -> Result<()> {
        let most = if self.grid.one_row() { 1 } else { self.max_m };
        if m == 0 || m > most {
            return Err(Error::BadShape(format!(
                "{m} rows: this launch takes 1..={most}"
            )));
        }
        if pos0 + m > self.positions {
            return Err(Error::BadShape(format!(
                "positions {pos0}..{} exceed the caches' {}",
                pos0 + m,
                self.positions
            )));
        }
        self.grid.apply(&mut self.launch, pos0, m)
    }

    /// One `clEnqueueNDRangeKernel` (no allocation).
    pub fn enqueue(&mut self) -> Result<()> {
        self.launch.enqueue()
    }

    /// The launch (its grid, or to enqueue it with a profiling event).
    pub fn launch(&mut self) -> &mut Launch {
        &mut self.launch
    }
}

impl Attention {
    /// Builds the kernels for `shape` (the tiles chosen from the device's local memory).
    pub fn new(dev: &Arc<Device>, shape: AttentionShape) -> Result<Attention> {
        let tiles = tiles_for(&shape, dev.info().local_mem_size)?;
        Attention::build(dev, shape, tiles)
    }

    /// [`Attention::new`] with the tiles given instead of chosen (to exercise or time every
    /// tile on one device): prefill rows 16 or 32, keys 8, 16, 32 or 64, group heads a divisor
    /// of the group of at most the rows, decode heads a divisor of the group of at most 8, all
    /// fitting the device's local memory.
    pub fn with_tiles(dev: &Arc<Device>, shape: AttentionShape, tiles: Tiles) -> Result<Attention> {
        shape.check()?;
        let g = shape.heads / shape.kv_heads;
        let t = tiles;
        let local = dev.info().local_mem_size;
        if ![16, 32].contains(&t.rows)
            || ![8, 16, 32, 64].contains(&t.keys)
            || t.group_heads == 0
            || !g.is_multiple_of(t.group_heads)
            || t.group_heads > t.rows
            || t.decode_heads == 0
            || !g.is_multiple_of(t.decode_heads)
            || t.decode_heads > 8
        {
            return Err(Error::BadShape(format!("tiles {t:?} for {shape:?}")));
        }
        if flash_local_bytes(shape.head_dim, t.rows, t.keys) as u64 > local
            || decode_local_bytes(shape.head_dim, t.decode_heads) as u64 > local
        {
            return Err(Error::NotApplicable(
                "these attention tiles need more local memory than the device has",
            ));
        }
        Attention::build(dev, shape, t)
    }

    fn build(dev: &Arc<Device>, shape: AttentionShape, tiles: Tiles) -> Result<Attention> {
        if dev.info().max_work_group_size < AP_WG {
            return Err(Error::NotApplicable(
                "the attention kernels need work-groups of 256",
            ));
        }
        let opts = format!(
            "{OPTIONS} -DKV_TYPE={} -DHD={} -DGRP={} -DGG={} -DRS={} -DBC={} -DDG={}",
            shape.kv.code(),
            shape.head_dim,
            shape.heads / shape.kv_heads,
            tiles.group_heads,
            tiles.rows,
            tiles.keys,
            tiles.decode_heads
        );
        let prog = dev.build(ATTENTION_SOURCE, &opts)?;
        Ok(Attention {
            dev: dev.clone(),
            prog,
            shape,
            tiles,
        })
    }

    /// The shape.
    pub fn shape(&self) -> &AttentionShape {
        &self.shape
    }

    /// The tiles chosen.
    pub fn tiles(&self) -> Tiles {
        self.tiles
    }

    /// Bytes of one cache (K or V) of `positions` rows.
    pub fn cache_bytes(&self, positions: usize) -> Result<usize> {
        Ok(positions * self.shape.kv.row_bytes(self.shape.kv_dim())?)
    }

    /// Checks the buffers of a launch over up to `max_m` rows; the positions the caches hold.
    fn check(
        &self,
        q: &Buffer,
        (kc, vc): (&Buffer, &Buffer),
        out: &Buffer,
        max_m: usize,
    ) -> Result<usize> {
        if max_m == 0 {
            return Err(Error::BadShape("an attention launch over no rows".into()));
        }
        let need = max_m * self.shape.q_dim() * 4;
        for (b, what) in [(q, "attention q"), (out, "attention out")] {
            if b.len() < need {
                return Err(Error::BufferTooSmall {
                    what,
                    needed: need,
                    got: b.len(),
                });
            }
        }
        let row = self.shape.kv.row_bytes(self.shape.kv_dim())?;
        let positions = kc.len().min(vc.len()) / row;
        if positions == 0 {
            return Err(Error::BufferTooSmall {
                what: "attention cache",
                needed: row,
                got: kc.len().min(vc.len()),
            });
        }
        Ok(positions)
    }

    fn common(
        &self,
        l: &mut Launch,
        q: &Buffer,
        (kc, vc): (&Buffer, &Buffer),
        out: &Buffer,
    ) -> Result<()> {
        l.mem(q)?.mem(kc)?.mem(vc)?.mem(out)?;
        Ok(())
    }

    fn scale(&self) -> f32 {
        1.0 / (self.shape.head_dim as f32).sqrt()
    }

    /// The tiled (flash-style) causal prefill over up to `max_m` rows of `q` into `out`.
    pub fn prefill(
        &self,
        q: &Buffer,
        kc: &Buffer,
        vc: &Buffer,
        out: &Buffer,
        max_m: usize,
    ) -> Result<AttnLaunch> {
        let positions = self.check(q, (kc, vc), out, max_m)?;
        let s = &self.shape;
        let groups = s.heads / self.tiles.group_heads;
        let per_group = self.tiles.positions();
        let mut l = Launch::create(
            &self.dev,
            &self.prog,
            "attn_flash",
            2,
            [groups * FA_WG, max_m.div_ceil(per_group)],
            [FA_WG, 1],
        )?;
        self.common(&mut l, q, (kc, vc), out)?;
        l.scalar(u32_of(s.kv_heads, "kv heads")?)?;
        let pos = l.next_arg();
        l.scalar(0u32)?.scalar(self.scale())?;
        let m = l.next_arg();
        l.scalar(u32_of(max_m, "rows")?)?;
        let grid = Grid::Flash {
            pos,
            m,
            groups,
            per_group,
        };
        Ok(AttnLaunch {
            launch: l,
            grid,
            max_m,
            positions,
        })
    }

    /// The previous prefill kernel (one work-group of 64 a head and row), same contract as
    /// [`Attention::prefill`].
    pub fn prefill_rowwise(
        &self,
        q: &Buffer,
        kc: &Buffer,
        vc: &Buffer,
        out: &Buffer,
        max_m: usize,
    ) -> Result<AttnLaunch> {
        let positions = self.check(q, (kc, vc), out, max_m)?;
        let s = &self.shape;
        let mut l = Launch::create(
            &self.dev,
            &self.prog,
            "attn_rowwise",
            2,
            [ROW_WG * s.heads, max_m],
            [ROW_WG, 1],
        )?;
        self.common(&mut l, q, (kc, vc), out)?;
        l.scalar(u32_of(s.heads, "heads")?)?
            .scalar(u32_of(s.kv_heads, "kv heads")?)?
            .scalar(u32_of(s.head_dim, "head_dim")?)?;
        let pos = l.next_arg();
        l.scalar(0u32)?.scalar(self.scale())?;
        Ok(AttnLaunch {
            launch: l,
            grid: Grid::Rowwise {
                pos,
                heads: s.heads,
            },
            max_m,
            positions,
        })
    }

    /// One query row (a decode step) split over ranges of positions, a work-group per range
    /// and group of up to 8 query heads of one kv head (their K/V read once); its partial
    /// results and counters are allocated here.
    pub fn decode(&self, q: &Buffer, kc: &Buffer, vc: &Buffer, out: &Buffer) -> Result<AttnLaunch> {
        let positions = self.check(q, (kc, vc), out, 1)?;
        let s = &self.shape;
        let groups = s.heads / self.tiles.decode_heads;
        let parts = self
            .dev
            .alloc(s.heads * DECODE_SPLITS * (s.head_dim + 2) * 4)?;
        let cnt = self.dev.upload(&vec![0u32; groups])?;
        let mut l = Launch::create(
            &self.dev,
            &self.prog,
            "attn_dec",
            1,
            [groups * FA_WG, 1],
            [FA_WG, 1],
        )?;
        self.common(&mut l, q, (kc, vc), out)?;
        l.scalar(u32_of(s.kv_heads, "kv heads")?)?;
        let pos = l.next_arg();
        l.scalar(0u32)?.scalar(self.scale())?;
        let splits = l.next_arg();
        l.scalar(1u32)?.mem(&parts)?.mem(&cnt)?;
        Ok(AttnLaunch {
            launch: l,
            grid: Grid::Decode {
                pos,
                splits,
                groups,
            },
            max_m: 1,
            positions,
        })
    }

    /// The previous split decode kernel (one work-group a head and range), same contract as
    /// [`Attention::decode`].
    pub fn decode_per_head(
        &self,
        q: &Buffer,
        kc: &Buffer,
        vc: &Buffer,
        out: &Buffer,
    ) -> Result<AttnLaunch> {
        let positions = self.check(q, (kc, vc), out, 1)?;
        let s = &self.shape;
        let parts = self
            .dev
            .alloc(s.heads * OLD_SPLITS * (s.head_dim + 2) * 4)?;
        let cnt = self.dev.upload(&vec![0u32; s.heads])?;
        let mut l = Launch::create(
            &self.dev,
            &self.prog,
            "attn_decode",
            1,
            [AP_WG * s.heads, 1],
            [AP_WG, 1],
        )?;
        self.common(&mut l, q, (kc, vc), out)?;
        l.scalar(u32_of(s.heads, "heads")?)?
            .scalar(u32_of(s.kv_heads, "kv heads")?)?
            .scalar(u32_of(s.head_dim, "head_dim")?)?;
        let pos = l.next_arg();
        l.scalar(0u32)?.scalar(self.scale())?;
        let splits = l.next_arg();
        l.scalar(1u32)?.mem(&parts)?.mem(&cnt)?;
        Ok(AttnLaunch {
            launch: l,
            grid: Grid::DecodePerHead {
                pos,
                splits,
                heads: s.heads,
            },
            max_m: 1,
            positions,
        })
    }

    /// Quantizes up to `max_m` staged f32 rows of `ks` and `vs` (`[m][kv_dim]`) into the q8_0
    /// caches at positions `pos0..pos0 + m` (a q8_0 shape only).
    pub fn store_q8(
        &self,
        ks: &Buffer,
        vs: &Buffer,
        kc: &Buffer,
        vc: &Buffer,
        max_m: usize,
    ) -> Result<AttnLaunch> {
        let s = &self.shape;
        if s.kv != KvType::Q8_0 {
            return Err(Error::NotApplicable("store_q8 needs a q8_0 cache"));
        }
        let kvd = s.kv_dim();
        let need = max_m * kvd * 4;
        for (b, what) in [(ks, "staged k rows"), (vs, "staged v rows")] {
            if max_m == 0 || b.len() < need {
                return Err(Error::BufferTooSmall {
                    what,
                    needed: need.max(1),
                    got: b.len(),
                });
            }
        }
        let row = s.kv.row_bytes(kvd)?;
        let positions = kc.len().min(vc.len()) / row;
        let blocks = kvd / 32;
        let mut l = Launch::create(
            &self.dev,
            &self.prog,
            "kv_store_q8",
            1,
            [(2 * max_m * blocks).div_ceil(64) * 64, 1],
            [64, 1],
        )?;
        l.mem(ks)?.mem(vs)?.mem(kc)?.mem(vc)?;
        l.scalar(u32_of(kvd, "kv width")?)?;
        let pos = l.next_arg();
        l.scalar(0u32)?;
        let m = l.next_arg();
        l.scalar(u32_of(max_m, "rows")?)?;
        Ok(AttnLaunch {
            launch: l,
            grid: Grid::StoreQ8 { pos, m, blocks },
            max_m,
            positions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_row_bytes() {
        assert_eq!(KvType::F32.row_bytes(64).unwrap(), 256);
        assert_eq!(KvType::F16.row_bytes(64).unwrap(), 128);
        assert_eq!(KvType::Q8_0.row_bytes(64).unwrap(), 68);
        assert!(KvType::Q8_0.row_bytes(48).is_err());
        // Llama-3-8B at 131072 positions, 32 layers, K and V: f32 32 GiB, f16 16 GiB,
        // q8_0 8.5 GiB.
        let total = |t: KvType| 2 * 32 * 131072u64 * t.row_bytes(1024).unwrap() as u64;
        assert_eq!(total(KvType::F32), 32 << 30);
        assert_eq!(total(KvType::F16), 16 << 30);
        assert_eq!(total(KvType::Q8_0), 17 << 29);
    }

    #[test]
    fn tiles_fit_the_local_memory() {
        let s = |heads, kv_heads, head_dim| AttentionShape {
            heads,
            kv_heads,
            head_dim,
            kv: KvType::F16,
        };
        // Llama-3-8B on 48 KiB (NVIDIA): 32 x 32 tiles, the 4 heads of a kv head together.
        let t = tiles_for(&s(32, 8, 128), 48 << 10).unwrap();
        assert_eq!(
            (t.rows, t.keys, t.group_heads, t.decode_heads),
            (32, 32, 4, 4)
        );
        assert!(flash_local_bytes(128, 32, 32) <= 48 << 10);
        // Head width 64: 32 x 64.
        let t = tiles_for(&s(32, 8, 64), 48 << 10).unwrap();
        assert_eq!((t.rows, t.keys), (32, 64));
        // 32 KiB devices and head width 256 still get a tile.
        let t = tiles_for(&s(8, 8, 256), 32 << 10).unwrap();
        assert!(flash_local_bytes(256, t.rows, t.keys) <= 32 << 10, "{t:?}");
        // SmolLM2: 9 heads over 3; a group of 3 takes 10 positions of 32 slots.
        let t = tiles_for(&s(9, 3, 64), 48 << 10).unwrap();
        assert_eq!((t.group_heads, t.positions(), t.decode_heads), (3, 10, 3));
        assert!(tiles_for(&s(8, 3, 64), 1 << 20).is_err());
        assert!(tiles_for(&s(8, 8, 7), 1 << 20).is_err());
        assert!(tiles_for(&s(8, 8, 64), 1 << 10).is_err());
    }

    #[test]
    fn decode_splits_cover_every_position() {
        assert_eq!(decode_splits(1), 1);
        assert_eq!(decode_splits(64), 1);
        assert_eq!(decode_splits(65), 2);
        assert_eq!(decode_splits(1 << 20), DECODE_SPLITS);
    }
}
