//! The layer's kernels, prepared once per operation ([`Launch`]) and enqueued without
//! allocating.

use crate::device::{check, Buffer, Device, Program};
use crate::error::{Error, Result};
use crate::format::{
    matrix_bytes, relayout_q4_0_len, relayout_q4_0_x4_len, relayout_q4_t_len, GgmlType,
};
use crate::loader::clf;
use opencl_sys::*;
use std::num::NonZeroU32;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The OpenCL C source of every layer kernel (embedded): the shared helpers, then the kernels.
pub const SOURCE: &str = concat!(
    include_str!("../kernels/common.cl"),
    include_str!("../kernels/layer.cl")
);

/// Build options used for [`SOURCE`].
pub const OPTIONS: &str = "-cl-std=CL1.2";

/// The largest work-group the kernels use (their local arrays are this big).
pub const MAX_WG: usize = 256;

/// RoPE pairing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Pairs `(2i, 2i+1)`: llama.cpp's `LLAMA_ROPE_TYPE_NORM`, which GGUF Llama-architecture
    /// models (SmolLM2 included) need, since the converter permuted Q/K weights for it.
    Normal,
    /// Pairs `(i, i + D/2)`: the Hugging Face / GPT-NeoX layout.
    Neox,
}

/// The compiled kernels of one device. Create once; make [`Launch`]es from it.
///
#[doc = include_str!("../docs/host-layer.md")]
pub struct Kernels {
    device: Arc<Device>,
    program: Program,
    dp4a: Option<Program>,
    dummy_sig: Buffer,
}

/// The OpenCL C source of the NVIDIA-only dp4a variant ([`Kernels::enable_dp4a`]).
pub const SOURCE_NV_DP4A: &str = include_str!("../kernels/nv_dp4a.cl");

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("device", &self.device.info().name)
            .finish()
    }
}

fn pow2_floor(v: usize) -> usize {
    if v <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - v.leading_zeros())
    }
}

fn need(what: &'static str, b: &Buffer, needed: usize) -> Result<()> {
    if b.len() < needed {
        Err(Error::BufferTooSmall {
            what,
            needed,
            got: b.len(),
        })
    } else {
        Ok(())
    }
}

/// T-layout kernel families (layer.cl's GEMV_T and nv_dp4a.cl's GEMV_DP instantiations).
#[derive(Clone, Copy)]
enum TFamily {
    Q4_0,
    Q4_1,
    Dp4a,
}

/// The kernel of `family` for `s.per_item` rows and `s.unroll` units per work-item.
fn t_kernel_name(family: TFamily, s: RowShape) -> Result<&'static str> {
    const Q4_0: [&str; 9] = [
        "gemv_q4_0_t_r1u1",
        "gemv_q4_0_t_r1u2",
        "gemv_q4_0_t_r1u4",
        "gemv_q4_0_t_r2u1",
        "gemv_q4_0_t_r2u2",
        "gemv_q4_0_t_r2u4",
        "gemv_q4_0_t_r4u1",
        "gemv_q4_0_t_r4u2",
        "gemv_q4_0_t_r4u4",
    ];
    const Q4_1: [&str; 9] = [
        "gemv_q4_1_t_r1u1",
        "gemv_q4_1_t_r1u2",
        "gemv_q4_1_t_r1u4",
        "gemv_q4_1_t_r2u1",
        "gemv_q4_1_t_r2u2",
        "gemv_q4_1_t_r2u4",
        "gemv_q4_1_t_r4u1",
        "gemv_q4_1_t_r4u2",
        "gemv_q4_1_t_r4u4",
    ];
    const DP4A: [&str; 9] = [
        "gemv_q4_0_t_dp4a_r1u1",
        "gemv_q4_0_t_dp4a_r1u2",
        "gemv_q4_0_t_dp4a_r1u4",
        "gemv_q4_0_t_dp4a_r2u1",
        "gemv_q4_0_t_dp4a_r2u2",
        "gemv_q4_0_t_dp4a_r2u4",
        "gemv_q4_0_t_dp4a_r4u1",
        "gemv_q4_0_t_dp4a_r4u2",
        "gemv_q4_0_t_dp4a_r4u4",
    ];
    let ri = match s.per_item {
        1 => 0,
        2 => 1,
        4 => 2,
        _ => return Err(Error::NotApplicable("per_item must be 1, 2 or 4")),
    };
    let ui = match (s.unroll, ri) {
        (0, 0) | (4, _) => 2,
        (0, 1) | (2, _) => 1,
        (0, _) | (1, _) => 0,
        _ => return Err(Error::NotApplicable("unroll must be 0, 1, 2 or 4")),
    };
    let table = match family {
        TFamily::Q4_0 => &Q4_0,
        TFamily::Q4_1 => &Q4_1,
        TFamily::Dp4a => &DP4A,
    };
    Ok(table[ri * 3 + ui])
}

fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::BadShape(format!("{what} = {v} exceeds u32")))
}

/// Work-group shape for a row-parallel kernel: `tpr` work-items (a power of two) share a row,
/// `rows` rows per group, `tpr * rows <= min(MAX_WG, device max)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowShape {
    /// Work-items per row.
    pub tpr: usize,
    /// Rows per work-group.
    pub rows: usize,
    /// Rows per work-item, sharing each activation load: 1; 2 for FP16 with K % 8 == 0 and for
    /// [`Kernels::gemv_q4_0_soa`]; 4 for [`Kernels::gemv_q4_0_soa`]; 1, 2 or 4 for the T-layout
    /// GEMVs.
    pub per_item: usize,
    /// T-layout GEMVs only: 16-byte units per row that each work-item loads before it computes
    /// (1, 2 or 4; 0 = the default: 4, 2, 1 for 1, 2, 4 rows per item). Ignored elsewhere.
    pub unroll: usize,
}

impl RowShape {
    /// The default for the multi-row kernels: `per_item` rows per work-item, `units / div`
    /// work-items per row (a power of two in 8..=128). Tuned on an H200 (see
    /// `benches/results/opencl-kernels.md`).
    pub fn multi_row(units: usize, div: usize, per_item: usize) -> RowShape {
        let tpr = pow2_floor(units / div.max(1)).clamp(8, 128);
        RowShape {
            tpr,
            rows: MAX_WG / tpr,
            per_item,
            unroll: 0,
        }
    }

    /// Global and local sizes of a 2-D launch over `items` row items (rows, or row groups of
    /// a multi-row kernel): `tpr` work-items per item, the items rounded up to whole groups of
    /// `rows` (kernels skip the padding items).
    pub(crate) fn grid(&self, items: usize) -> ([usize; 2], [usize; 2]) {
        (
            [self.tpr, items.div_ceil(self.rows) * self.rows],
            [self.tpr, self.rows],
        )
    }

    /// The default for a row of `units` independent loads (16-byte words or blocks).
    pub fn for_units(units: usize, max_tpr: usize) -> RowShape {
        let tpr = pow2_floor(units.div_ceil(2)).clamp(1, max_tpr);
        RowShape {
            tpr,
            rows: (MAX_WG / tpr).max(1),
            per_item: 1,
            unroll: 0,
        }
    }
}

impl Kernels {
    /// Builds (or loads from the binary cache) the kernel program for `device`.
    pub fn new(device: &Arc<Device>) -> Result<Kernels> {
        let program = device.build(SOURCE, OPTIONS)?;
        let dummy_sig = device.upload(&[0u32; 4])?;
        Ok(Kernels {
            device: device.clone(),
            program,
            dp4a: None,
            dummy_sig,
        })
    }

    /// Builds the NVIDIA-only variant ([`SOURCE_NV_DP4A`]: inline PTX `dp4a`, int8 activations)
    /// when the platform is NVIDIA's; [`Error::NotApplicable`] elsewhere, [`Error::Build`] if
    /// the driver rejects it.
    pub fn enable_dp4a(&mut self) -> Result<()> {
        if !self
            .device
            .info()
            .platform_name
            .to_ascii_lowercase()
            .contains("nvidia")
        {
            return Err(Error::NotApplicable(
                "the dp4a variant uses NVIDIA inline PTX (NVIDIA platforms only)",
            ));
        }
        if self.dp4a.is_none() {
            self.dp4a = Some(self.device.build(SOURCE_NV_DP4A, OPTIONS)?);
        }
        Ok(())
    }

    /// The dp4a program's device binary (PTX on NVIDIA), if built.
    pub fn dp4a_binary(&self) -> Option<Result<Vec<u8>>> {
        self.dp4a.as_ref().map(|p| p.binary())
    }

    /// Whether [`Kernels::enable_dp4a`] succeeded.
    pub fn has_dp4a(&self) -> bool {
        self.dp4a.is_some()
    }

    /// Sizes in bytes `(xq, xs)` of the quantized activations of [`Kernels::quantize_x_q8w`]
    /// for `k` activations (`k % 32 == 0`).
    pub fn quantize_x_q8w_len(k: usize) -> Result<(usize, usize)> {
        if k == 0 || !k.is_multiple_of(32) {
            return Err(Error::BadShape(format!(
                "K = {k} is not a positive multiple of 32"
            )));
        }
        Ok((k, k))
    }

    /// Quantizes `x` (`k` f32) to int8 per 32-block for [`Kernels::gemv_q4_0_t_dp4a`]:
    /// `xq` gets per 8 activations two words (even- and odd-indexed bytes), `xs` per 8
    /// activations (block scale, 8 x scale x sum of the 8 quantized values). Needs
    /// [`Kernels::enable_dp4a`].
    pub fn quantize_x_q8w(&self, x: &Buffer, xq: &Buffer, xs: &Buffer, k: usize) -> Result<Launch> {
        let prog = self
            .dp4a
            .as_ref()
            .ok_or(Error::NotApplicable("call enable_dp4a first (NVIDIA only)"))?;
        let (nq, ns) = Self::quantize_x_q8w_len(k)?;
        need("x", x, k * 4)?;
        need("xq", xq, nq)?;
        need("xs", xs, ns)?;
        let blocks = k / 32;
        let ls = 64.min(self.max_wg());
        let mut l = self.launch_in(
            prog,
            "quant_x_q8w",
            1,
            [blocks.div_ceil(ls) * ls, 1],
            [ls, 1],
        )?;
        l.mem(x)?.mem(xq)?.mem(xs)?;
        l.scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// Q4_0 GEMV over the T layout ([`crate::relayout_q4_t`]) and activations quantized by
    /// [`Kernels::quantize_x_q8w`], with NVIDIA's `dp4a` (four int8 products per instruction).
    /// Results carry the int8 rounding of the activations. Needs [`Kernels::enable_dp4a`].
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_q4_0_t_dp4a(
        &self,
        qs: &Buffer,
        d: &Buffer,
        xq: &Buffer,
        xs: &Buffer,
        y: &Buffer,
        n: usize,
        k: usize,
        shape: Option<RowShape>,
    ) -> Result<Launch> {
        let prog = self
            .dp4a
            .as_ref()
            .ok_or(Error::NotApplicable("call enable_dp4a first (NVIDIA only)"))?;
        let (nq, nd) = relayout_q4_t_len(GgmlType::Q4_0, n, k)?;
        let (nxq, nxs) = Self::quantize_x_q8w_len(k)?;
        need("qs", qs, nq)?;
        need("d", d, nd)?;
        need("xq", xq, nxq)?;
        need("xs", xs, nxs)?;
        need("y", y, n * 4)?;
        let s = self.fit(shape.unwrap_or(Self::gemv_q4_0_t_dp4a_default(k)));
        let name = t_kernel_name(TFamily::Dp4a, s)?;
        let items = n.div_ceil(s.per_item);
        let (global, local) = s.grid(items);
        let mut l = self.launch_in(prog, name, 2, global, local)?;
        l.mem(qs)?.mem(d)?.mem(xq)?.mem(xs)?.mem(y)?;
        l.scalar(to_u32(n, "N")?)?.scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// The program's device binary (PTX text on NVIDIA, for inspection; what the cache stores).
    pub fn binary(&self) -> Result<Vec<u8>> {
        self.program.binary()
    }

    /// Whether the program came from the on-disk cache.
    pub fn from_cache(&self) -> bool {
        self.program.from_cache()
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    fn max_wg(&self) -> usize {
        self.device.info().max_work_group_size.clamp(1, MAX_WG)
    }

    fn launch(
        &self,
        name: &'static str,
        dims: u32,
        global: [usize; 2],
        local: [usize; 2],
    ) -> Result<Launch> {
        self.launch_in(&self.program, name, dims, global, local)
    }

    fn launch_in(
        &self,
        program: &Program,
        name: &'static str,
        dims: u32,
        global: [usize; 2],
        local: [usize; 2],
    ) -> Result<Launch> {
        Launch::create(&self.device, program, name, dims, global, local)
    }

    fn fit(&self, s: RowShape) -> RowShape {
        // Keeps `unroll` as given (validated by the T-layout kernel choice).
        let max = self.max_wg();
        let tpr = pow2_floor(s.tpr.min(max));
        let rows = pow2_floor((max / tpr).min(s.rows).max(1));
        RowShape {
            tpr,
            rows,
            per_item: s.per_item,
            unroll: s.unroll,
        }
    }

    /// GEMV `y[n] = sum_k W[n][k] * x[k]` for `W` in `format` (GGUF bytes as stored in the
    /// file), `x` of `k` f32, `y` of `n` f32; every type of [`crate::COMPUTABLE`]. Block
    /// formats need `k % 32 == 0`, the K-quants `k % 256 == 0`. FP16 with `k % 8 == 0` takes
    /// the 16-byte-load kernel, other `k` the element-wise one.
    pub fn gemv(
        &self,
        format: GgmlType,
        w: &Buffer,
        x: &Buffer,
        y: &Buffer,
        n: usize,
        k: usize,
    ) -> Result<Launch> {
        self.gemv_with(format, w, x, y, n, k, None)
    }

    /// [`Kernels::gemv`] with an explicit work-group shape (for tuning; `None` = default).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_with(
        &self,
        format: GgmlType,
        w: &Buffer,
        x: &Buffer,
        y: &Buffer,
        n: usize,
        k: usize,
        shape: Option<RowShape>,
    ) -> Result<Launch> {
        need("w", w, matrix_bytes(format, n, k)?)?;
        need("x", x, k * 4)?;
        need("y", y, n * 4)?;
        let (name, units) = match format {
            GgmlType::F16 if k.is_multiple_of(8) => ("gemv_f16", k / 8),
            GgmlType::F16 => ("gemv_f16_any", k),
            // Block formats: four work-items per block (k / 8 parts a row).
            GgmlType::Q4_0 => ("gemv_q4_0", k / 8),
            GgmlType::Q4_1 => ("gemv_q4_1", k / 8),
            GgmlType::Q8_0 => ("gemv_q8_0", k / 8),
            // GGUF bytes as stored; one work-item per 8 consecutive values (k / 8 parts a row).
            GgmlType::Q5_0 => ("gemv_q5_0", k / 8),
            GgmlType::Q5_1 => ("gemv_q5_1", k / 8),
            GgmlType::Q4K => ("gemv_q4_k", k / 8),
            GgmlType::Q5K => ("gemv_q5_k", k / 8),
            GgmlType::Q6K => ("gemv_q6_k", k / 8),
            other => return Err(Error::UnsupportedFormat(other)),
        };
        let default = if name == "gemv_f16" {
            RowShape::multi_row(units, 16, 2)
        } else {
            RowShape::for_units(units, 128)
        };
        let s = self.fit(shape.unwrap_or(default));
        let (name, items) = match (s.per_item, name) {
            (1, _) => (name, n),
            (2, "gemv_f16") => ("gemv_f16_r2", n.div_ceil(2)),
            _ => {
                return Err(Error::NotApplicable(
                    "per_item 2 is implemented for FP16 with K % 8 == 0 only",
                ))
            }
        };
        let (global, local) = s.grid(items);
        let mut l = self.launch(name, 2, global, local)?;
        l.mem(w)?.mem(x)?.mem(y)?;
        l.scalar(to_u32(n, "N")?)?.scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// GEMV over Q4_0 weights re-laid out by [`crate::relayout_q4_0`] (`qs`: 16 bytes per block,
    /// `d`: 2 bytes per block).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_q4_0_soa(
        &self,
        qs: &Buffer,
        d: &Buffer,
        x: &Buffer,
        y: &Buffer,
        n: usize,
        k: usize,
        shape: Option<RowShape>,
    ) -> Result<Launch> {
        let (nq, nd) = relayout_q4_0_len(n, k)?;
        need("qs", qs, nq)?;
        need("d", d, nd)?;
        need("x", x, k * 4)?;
        need("y", y, n * 4)?;
        let s = self.fit(shape.unwrap_or(RowShape::multi_row(k / 8, 8, 2)));
        let (name, items) = match s.per_item {
            1 => ("gemv_q4_0_soa", n),
            2 => ("gemv_q4_0_soa_r2", n.div_ceil(2)),
            4 => ("gemv_q4_0_soa_r4", n.div_ceil(4)),
            _ => return Err(Error::NotApplicable("per_item must be 1, 2 or 4")),
        };
        let (global, local) = s.grid(items);
        let mut l = self.launch(name, 2, global, local)?;
        l.mem(qs)?.mem(d)?.mem(x)?.mem(y)?;
        l.scalar(to_u32(n, "N")?)?.scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// GEMV over Q4_0 weights re-laid out by [`crate::relayout_q4_0_x4`]: each work-item reads
    /// one 16-byte word holding the same quant word of four rows, and shares its activation
    /// loads among them. `shape.per_item` is ignored (always four rows per work-item).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_q4_0_x4(
        &self,
        qs: &Buffer,
        d: &Buffer,
        x: &Buffer,
        y: &Buffer,
        n: usize,
        k: usize,
        shape: Option<RowShape>,
    ) -> Result<Launch> {
        let (nq, nd) = relayout_q4_0_x4_len(n, k)?;
        need("qs", qs, nq)?;
        need("d", d, nd)?;
        need("x", x, k * 4)?;
        need("y", y, n * 4)?;
        let s = self.fit(shape.unwrap_or(RowShape::multi_row(k / 8, 8, 4)));
        let groups = n.div_ceil(4);
        let (global, local) = s.grid(groups);
        let mut l = self.launch("gemv_q4_0_x4", 2, global, local)?;
        l.mem(qs)?.mem(d)?.mem(x)?.mem(y)?;
        l.scalar(to_u32(n, "N")?)?.scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// The default work-group shape of [`Kernels::gemv_q4_t`] for rows of `k` weights
    /// (`nb = k / 32` 16-byte units a row): two rows per work-item, one unit in flight per row,
    /// `tpr` = the power of two at or below `nb / 2` clamped to 8..=64, `256 / tpr` row slots
    /// per group; for `k >= 32768`, 256 work-items per row. On the H200 sweeps this was the
    /// best shape or within 4% of it on the four decode shapes, and the best on 4096 x 57344
    /// (see `benches/results/opencl-kernels.md`).
    pub fn gemv_q4_t_default(k: usize) -> RowShape {
        let tpr = if k >= 32768 {
            256
        } else {
            pow2_floor(k / 64).clamp(8, 64)
        };
        RowShape {
            tpr,
            rows: MAX_WG / tpr,
            per_item: 2,
            unroll: 1,
        }
    }

    /// The default shape of [`Kernels::gemv_q4_0_t_dp4a`]: as [`Kernels::gemv_q4_t_default`]
    /// with four units in flight per row (H200 sweep: the best shape on 4096 x 4096, within 1%,
    /// 4% and 10% of the best on 49152 x 576, 4096 x 14336 and 14336 x 4096); for
    /// `k >= 32768`, four rows per item, two units in flight, 128 work-items per row (the best
    /// on 4096 x 57344: 80% of copy, where the shorter-K rule gives 57%).
    pub fn gemv_q4_0_t_dp4a_default(k: usize) -> RowShape {
        if k >= 32768 {
            return RowShape {
                tpr: 128,
                rows: 2,
                per_item: 4,
                unroll: 2,
            };
        }
        RowShape {
            unroll: 4,
            ..Self::gemv_q4_t_default(k)
        }
    }

    /// GEMV over Q4_0 or Q4_1 weights in the "T" layout of [`crate::relayout_q4_t`]
    /// (`qs`: quant plane, `d`: scale plane): one 16-byte load per work-item per row and step,
    /// coalesced activations, exact nibble decoding by one and-or and one FMA per weight.
    /// `shape.per_item` is 1, 2 or 4 rows per work-item (`None`:
    /// [`Kernels::gemv_q4_t_default`]).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_q4_t(
        &self,
        format: GgmlType,
        qs: &Buffer,
        d: &Buffer,
        x: &Buffer,
        y: &Buffer,
        n: usize,
        k: usize,
        shape: Option<RowShape>,
    ) -> Result<Launch> {
        let (nq, nd) = relayout_q4_t_len(format, n, k)?;
        // The kernel indexes 16-byte units and scale entries with 32-bit integers.
        if nq / 16 > u32::MAX as usize {
            return Err(Error::BadShape(format!(
                "{n} x {k} has more than 2^32 blocks (32-bit indices in the T-layout kernel)"
            )));
        }
        need("qs", qs, nq)?;
        need("d", d, nd)?;
        need("x", x, k * 4)?;
        need("y", y, n * 4)?;
        let s = self.fit(shape.unwrap_or(Self::gemv_q4_t_default(k)));
        let name = t_kernel_name(
            match format {
                GgmlType::Q4_0 => TFamily::Q4_0,
                _ => TFamily::Q4_1,
            },
            s,
        )?;
        let items = n.div_ceil(s.per_item);
        let (global, local) = s.grid(items);
        let mut l = self.launch(name, 2, global, local)?;
        l.mem(qs)?.mem(d)?.mem(x)?.mem(y)?;
        l.scalar(to_u32(n, "N")?)?.scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// Small-M GEMM for prefill: `Y[m][n] = sum_k X[m][k] * W[n][k]`, `X` is `m x k` f32,
    /// `Y` is `m x n` f32; every type of [`crate::COMPUTABLE`] (GGUF bytes as stored).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        format: GgmlType,
        w: &Buffer,
        x: &Buffer,
        y: &Buffer,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<Launch> {
        self.gemm_with(format, w, x, y, m, n, k, None)
    }

    /// [`Kernels::gemm`] with an explicit work-group shape (`tpr` work-items share a weight row,
    /// `rows` rows a group; `per_item` must be 1; for tuning; `None` = default).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_with(
        &self,
        format: GgmlType,
        w: &Buffer,
        x: &Buffer,
        y: &Buffer,
        m: usize,
        n: usize,
        k: usize,
        shape: Option<RowShape>,
    ) -> Result<Launch> {
        if shape.is_some_and(|s| s.per_item != 1) {
            return Err(Error::NotApplicable("the GEMMs take one row per work-item"));
        }
        if m == 0 {
            return Err(Error::BadShape("M must be positive".into()));
        }
        need("w", w, matrix_bytes(format, n, k)?)?;
        need("x", x, m * k * 4)?;
        need("y", y, m * n * 4)?;
        let (name, units) = match format {
            GgmlType::F16 => ("gemm_f16", k),
            GgmlType::Q4_0 => ("gemm_q4_0", k / 32),
            GgmlType::Q4_1 => ("gemm_q4_1", k / 32),
            GgmlType::Q8_0 => ("gemm_q8_0", k / 32),
            GgmlType::Q5_0 => ("gemm_q5_0", k / 32),
            GgmlType::Q5_1 => ("gemm_q5_1", k / 32),
            GgmlType::Q4K => ("gemm_q4_k", k / 32),
            GgmlType::Q5K => ("gemm_q5_k", k / 32),
            GgmlType::Q6K => ("gemm_q6_k", k / 32),
            other => return Err(Error::UnsupportedFormat(other)),
        };
        let s = self.fit(shape.unwrap_or(RowShape::for_units(units, 64)));
        let (global, local) = s.grid(n);
        let mut l = self.launch(name, 2, global, local)?;
        l.mem(w)?.mem(x)?.mem(y)?;
        l.scalar(to_u32(m, "M")?)?
            .scalar(to_u32(n, "N")?)?
            .scalar(to_u32(k, "K")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// RMSNorm over `rows` rows of `n`: `y = x / sqrt(mean(x^2) + eps) * g` (`g` has `n`).
    pub fn rms_norm(
        &self,
        x: &Buffer,
        g: &Buffer,
        y: &Buffer,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<Launch> {
        if rows == 0 || n == 0 {
            return Err(Error::BadShape("rows and n must be positive".into()));
        }
        need("x", x, rows * n * 4)?;
        need("g", g, n * 4)?;
        need("y", y, rows * n * 4)?;
        let ls = pow2_floor(self.max_wg()).min(pow2_floor(n.next_power_of_two()));
        let mut l = self.launch("rms_norm", 1, [ls * rows, 1], [ls, 1])?;
        l.mem(x)?.mem(g)?.mem(y)?;
        l.scalar(to_u32(rows, "rows")?)?
            .scalar(to_u32(n, "n")?)?
            .scalar(eps)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    fn elementwise(
        &self,
        name: &'static str,
        a: &Buffer,
        b: &Buffer,
        out: &Buffer,
        n: usize,
    ) -> Result<Launch> {
        if n == 0 {
            return Err(Error::BadShape("n must be positive".into()));
        }
        need("a", a, n * 4)?;
        need("b", b, n * 4)?;
        need("out", out, n * 4)?;
        let ls = 64.min(self.max_wg());
        let mut l = self.launch(name, 1, [n.div_ceil(ls) * ls, 1], [ls, 1])?;
        l.mem(a)?.mem(b)?.mem(out)?;
        l.scalar(to_u32(n, "n")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// SwiGLU: `out[i] = silu(gate[i]) * up[i]` over `n` f32.
    pub fn swiglu(&self, gate: &Buffer, up: &Buffer, out: &Buffer, n: usize) -> Result<Launch> {
        self.elementwise("swiglu", gate, up, out, n)
    }

    /// Residual add: `out[i] = a[i] + b[i]` over `n` f32 (`out` may be `a`).
    pub fn add(&self, a: &Buffer, b: &Buffer, out: &Buffer, n: usize) -> Result<Launch> {
        self.elementwise("add", a, b, out, n)
    }

    /// RoPE in place on `x[t][heads][head_dim]` for `t` tokens at positions `pos0 + t`;
    /// angle = pos * base^(-2i/head_dim). Change `pos0` per step with [`Launch::set_position`].
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        x: &Buffer,
        tokens: usize,
        heads: usize,
        head_dim: usize,
        pos0: u32,
        base: f32,
        mode: RopeMode,
    ) -> Result<Launch> {
        if tokens == 0 || heads == 0 || head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::BadShape(format!(
                "rope needs tokens, heads > 0 and an even head_dim (got {tokens}, {heads}, {head_dim})"
            )));
        }
        need("x", x, tokens * heads * head_dim * 4)?;
        let pairs = heads * head_dim / 2;
        let ls = 64.min(self.max_wg());
        let mut l = self.launch("rope", 2, [pairs.div_ceil(ls) * ls, tokens], [ls, 1])?;
        l.mem(x)?;
        l.scalar(to_u32(tokens, "tokens")?)?
            .scalar(to_u32(heads, "heads")?)?
            .scalar(to_u32(head_dim, "head_dim")?)?;
        l.position_arg = Some(l.nargs);
        l.scalar(pos0)?.scalar(base)?.scalar(match mode {
            RopeMode::Normal => 0u32,
            RopeMode::Neox => 1u32,
        })?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// Floats of scratch [`Kernels::attention`] needs.
    pub fn attention_scratch_len(heads: usize, max_seq: usize) -> usize {
        heads * max_seq
    }

    /// Decode attention for one query: `q[heads][head_dim]` against the first `len` tokens of
    /// the caches `k`, `v` laid out `[max_seq][kv_heads][head_dim]` (f32), softmax scaled by
    /// `1/sqrt(head_dim)`, into `out[heads][head_dim]`. Query head `h` reads kv head
    /// `h / (heads / kv_heads)`. `scratch` holds [`Kernels::attention_scratch_len`] floats.
    /// Change `len` per step with [`Launch::set_len`].
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        q: &Buffer,
        k: &Buffer,
        v: &Buffer,
        out: &Buffer,
        scratch: &Buffer,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        max_seq: usize,
        len: usize,
    ) -> Result<Launch> {
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(Error::BadShape(format!(
                "heads ({heads}) must be a positive multiple of kv_heads ({kv_heads})"
            )));
        }
        if head_dim == 0 || head_dim > MAX_WG {
            return Err(Error::BadShape(format!(
                "head_dim = {head_dim} must be in 1..={MAX_WG}"
            )));
        }
        if len == 0 || len > max_seq {
            return Err(Error::BadShape(format!(
                "len = {len} must be in 1..=max_seq ({max_seq})"
            )));
        }
        need("q", q, heads * head_dim * 4)?;
        need("k", k, max_seq * kv_heads * head_dim * 4)?;
        need("v", v, max_seq * kv_heads * head_dim * 4)?;
        need("out", out, heads * head_dim * 4)?;
        need(
            "scratch",
            scratch,
            Self::attention_scratch_len(heads, max_seq) * 4,
        )?;
        let ls = 64.min(pow2_floor(self.max_wg()));
        let mut l = self.launch("attn_decode", 1, [heads * ls, 1], [ls, 1])?;
        l.mem(q)?.mem(k)?.mem(v)?.mem(out)?.mem(scratch)?;
        l.scalar(to_u32(heads, "heads")?)?
            .scalar(to_u32(kv_heads, "kv_heads")?)?
            .scalar(to_u32(head_dim, "head_dim")?)?
            .scalar(to_u32(max_seq, "max_seq")?)?;
        l.len_arg = Some((l.nargs, max_seq));
        l.scalar(to_u32(len, "len")?)?
            .scalar(1.0f32 / (head_dim as f32).sqrt())?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// A read-only stream over `bytes` (a multiple of 16) of `src`, four 16-byte words per
    /// work-item, writing at most 64 bytes of `out` (only if an XOR of the data equals `never`):
    /// what a kernel that reads as many bytes as a GEMV can reach, launch costs included.
    pub fn stream_read(
        &self,
        src: &Buffer,
        out: &Buffer,
        bytes: usize,
        never: u32,
    ) -> Result<Launch> {
        if bytes == 0 || !bytes.is_multiple_of(16) {
            return Err(Error::BadShape(
                "stream size must be a positive multiple of 16".into(),
            ));
        }
        need("src", src, bytes)?;
        need("out", out, 64)?;
        let n = bytes / 16;
        let ls = 256.min(self.max_wg());
        let items = n.div_ceil(4);
        let mut l = self.launch("stream_read", 1, [items.div_ceil(ls) * ls, 1], [ls, 1])?;
        l.mem(src)?.mem(out)?;
        l.scalar(to_u32(n, "n")?)?.scalar(never)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }

    /// A plain 16-byte-word copy kernel `dst = src` over `bytes` (a multiple of 16), for
    /// measuring what a kernel can stream.
    pub fn copy_kernel(&self, src: &Buffer, dst: &Buffer, bytes: usize) -> Result<Launch> {
        if bytes == 0 || !bytes.is_multiple_of(16) {
            return Err(Error::BadShape(
                "copy size must be a positive multiple of 16".into(),
            ));
        }
        need("src", src, bytes)?;
        need("dst", dst, bytes)?;
        let n = bytes / 16;
        let ls = 256.min(self.max_wg());
        let mut l = self.launch("copy_u4", 1, [n.div_ceil(ls) * ls, 1], [ls, 1])?;
        l.mem(src)?.mem(dst)?;
        l.scalar(to_u32(n, "n")?)?;
        l.finish_args(&self.dummy_sig)?;
        Ok(l)
    }
}

/// One prepared kernel launch: its kernel object, arguments and NDRange are fixed at creation,
/// so [`Launch::enqueue`] makes one `clEnqueueNDRangeKernel` call and allocates nothing.
///
/// It owns what it uses: a reference to every buffer it binds ([`Buffer::try_clone`], taken at
/// creation), to the device, and to a bound [`Flag`]'s memory, so it is `'static` and `Send`
/// and can be cached anywhere (the kernel object keeps its program alive, as OpenCL
/// specifies). Zero-copy buffers over caller memory are the exception the caller answers for
/// ([`Device::wrap_host`]).
pub struct Launch {
    device: Arc<Device>,
    kernel: cl_kernel,
    dims: u32,
    global: [usize; 2],
    local: [usize; 2],
    nargs: u32,
    epoch: u32,
    position_arg: Option<u32>,
    len_arg: Option<(u32, usize)>,
    /// References to the buffers bound as arguments (kept alive, never read).
    bufs: Vec<Buffer>,
    /// The bound completion flag's memory, kept alive while the kernel may write it.
    flag: Option<Arc<FlagMem>>,
}

// SAFETY: the kernel handle is an OpenCL object usable from any thread; the only entry point
// that is not thread-safe on it, clSetKernelArg, is called through `&mut self` alone, so moving
// the Launch to another thread cannot race. Every other field is Send.
unsafe impl Send for Launch {}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("global", &self.global)
            .field("local", &self.local)
            .finish()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        if let Some(f) = self.device.api.clReleaseKernel {
            // SAFETY: the kernel was created for this Launch and is released once; the buffers
            // it names are released after it (fields drop after this body).
            unsafe { f(self.kernel) };
        }
    }
}

impl Launch {
    /// A launch of kernel `name` of `program` (arguments still unset).
    pub(crate) fn create(
        device: &Arc<Device>,
        program: &Program,
        name: &str,
        dims: u32,
        global: [usize; 2],
        local: [usize; 2],
    ) -> Result<Launch> {
        let mut err = 0;
        let cname = std::ffi::CString::new(name)
            .map_err(|_| Error::BadShape("kernel name contains a NUL byte".into()))?;
        // SAFETY: valid program; NUL-terminated kernel name.
        let kernel =
            unsafe { clf!(device.api, clCreateKernel)(program.program, cname.as_ptr(), &mut err) };
        check("clCreateKernel", err)?;
        Ok(Launch {
            device: device.clone(),
            kernel,
            dims,
            global,
            local,
            nargs: 0,
            epoch: 0,
            position_arg: None,
            len_arg: None,
            bufs: Vec::with_capacity(12),
            flag: None,
        })
    }

    fn arg_raw(&mut self, idx: u32, size: usize, p: *const libc::c_void) -> Result<()> {
        // SAFETY: `p` points to `size` readable bytes holding a value of the argument's type
        // (callers pass a cl_mem or a scalar matching the kernel's signature); `&mut self`
        // gives exclusive use of the kernel object, as clSetKernelArg requires.
        check("clSetKernelArg", unsafe {
            clf!(self.device.api, clSetKernelArg)(self.kernel, idx, size, p)
        })
    }

    /// Binds `b` as the next argument and keeps a reference to it.
    pub(crate) fn mem(&mut self, b: &Buffer) -> Result<&mut Self> {
        let idx = self.nargs;
        let owned = b.try_clone()?;
        self.arg_raw(
            idx,
            std::mem::size_of::<cl_mem>(),
            (&owned.mem as *const cl_mem).cast(),
        )?;
        self.bufs.push(owned);
        self.nargs += 1;
        Ok(self)
    }

    /// Sets the next argument to a scalar.
    pub(crate) fn scalar<T: Copy>(&mut self, v: T) -> Result<&mut Self> {
        let idx = self.nargs;
        self.arg_raw(idx, std::mem::size_of::<T>(), (&v as *const T).cast())?;
        self.nargs += 1;
        Ok(self)
    }

    /// Sets the next argument to `bytes` of local memory (a `__local` pointer argument).
    pub(crate) fn local_mem(&mut self, bytes: usize) -> Result<&mut Self> {
        let idx = self.nargs;
        self.arg_raw(idx, bytes, ptr::null())?;
        self.nargs += 1;
        Ok(self)
    }

    /// The index the next argument will take.
    pub(crate) fn next_arg(&self) -> u32 {
        self.nargs
    }

    /// Replaces scalar argument `idx` (one set by [`Launch::scalar`] with the same type).
    pub(crate) fn set_scalar<T: Copy>(&mut self, idx: u32, v: T) -> Result<()> {
        self.arg_raw(idx, std::mem::size_of::<T>(), (&v as *const T).cast())
    }

    /// Replaces the global NDRange (each dimension a multiple of the local size).
    pub(crate) fn set_global(&mut self, global: [usize; 2]) {
        self.global = global;
    }

    /// Binds the default (unused) signal buffer and epoch 0, the last two arguments.
    pub(crate) fn finish_args(&mut self, dummy_sig: &Buffer) -> Result<()> {
        let idx = self.nargs;
        let owned = dummy_sig.try_clone()?;
        self.arg_raw(
            idx,
            std::mem::size_of::<cl_mem>(),
            (&owned.mem as *const cl_mem).cast(),
        )?;
        self.bufs.push(owned);
        self.arg_raw(idx + 1, 4, (&0u32 as *const u32).cast())?;
        Ok(())
    }

    /// The global NDRange.
    pub fn global(&self) -> [usize; 2] {
        self.global
    }

    /// The work-group size.
    pub fn local(&self) -> [usize; 2] {
        self.local
    }

    /// Binds a completion flag: from now on [`Launch::enqueue_signaled`] makes the launch's
    /// last work-group store the epoch into it. The launch keeps the flag's memory alive.
    pub fn bind_flag(&mut self, flag: &Flag) -> Result<()> {
        let idx = self.nargs;
        self.arg_raw(
            idx,
            std::mem::size_of::<cl_mem>(),
            (&flag.mem.buf.mem as *const cl_mem).cast(),
        )?;
        self.flag = Some(flag.mem.clone());
        Ok(())
    }

    fn set_epoch(&mut self, e: u32) -> Result<()> {
        if self.epoch != e {
            let idx = self.nargs + 1;
            self.arg_raw(idx, 4, (&e as *const u32).cast())?;
            self.epoch = e;
        }
        Ok(())
    }

    /// Changes the RoPE start position (RoPE launches only).
    pub fn set_position(&mut self, pos0: u32) -> Result<()> {
        let idx = self.position_arg.ok_or(Error::NotApplicable(
            "set_position applies to RoPE launches",
        ))?;
        self.arg_raw(idx, 4, (&pos0 as *const u32).cast())
    }

    /// Changes the number of cached tokens attended to (attention launches only).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        let (idx, max) = self.len_arg.ok_or(Error::NotApplicable(
            "set_len applies to attention launches",
        ))?;
        if len == 0 || len > max {
            return Err(Error::BadShape(format!(
                "len = {len} must be in 1..=max_seq ({max})"
            )));
        }
        let v = len as u32;
        self.arg_raw(idx, 4, (&v as *const u32).cast())
    }

    /// One `clEnqueueNDRangeKernel`; with `event`, the command's event is returned through it.
    pub(crate) fn nd_event(&self, event: *mut cl_event) -> Result<()> {
        let dev = &self.device;
        // SAFETY: the kernel's arguments are all set (creation sets every one) to buffers this
        // Launch holds references to; global is a multiple of local in each dimension; `event`
        // is null or a writable cl_event slot the caller releases.
        check("clEnqueueNDRangeKernel", unsafe {
            clf!(dev.api, clEnqueueNDRangeKernel)(
                dev.queue,
                self.kernel,
                self.dims,
                ptr::null(),
                self.global.as_ptr(),
                self.local.as_ptr(),
                0,
                ptr::null(),
                event,
            )
        })
    }

    fn nd(&self) -> Result<()> {
        self.nd_event(ptr::null_mut())
    }

    /// Enqueues the kernel on the device's in-order queue (no flag written).
    pub fn enqueue(&mut self) -> Result<()> {
        self.set_epoch(0)?;
        self.nd()
    }

    /// Enqueues the kernel and returns its event, from which [`Profiled::seconds`] reads the
    /// device's start/end timestamps. Needs a device opened with profiling
    /// ([`Device::open_with`]); for measurement, not the hot path.
    pub fn enqueue_profiled(&mut self) -> Result<Profiled> {
        let dev = self.device.clone();
        if !dev.profiling {
            return Err(Error::NotApplicable(
                "enqueue_profiled needs a device opened with profiling",
            ));
        }
        self.set_epoch(0)?;
        let mut ev: cl_event = ptr::null_mut();
        self.nd_event(&mut ev)?;
        Ok(Profiled { device: dev, ev })
    }

    /// Enqueues the kernel so that its last work-group stores `epoch` into the bound flag
    /// (see [`Flag`]); call [`Device::flush`] to make sure it starts.
    pub fn enqueue_signaled(&mut self, epoch: NonZeroU32) -> Result<()> {
        self.set_epoch(epoch.get())?;
        self.nd()
    }
}

/// A completion flag in host memory that kernels write: words `[counter, flag]`.
///
/// Protocol: each work-group of a signalled launch writes its outputs, passes a barrier with a
/// global fence, then one work-item fences and atomically increments `counter`; the group that
/// sees `counter == groups - 1` resets it to 0, fences, and atomically stores the launch's
/// epoch into `flag`. A host thread that loads `flag` with Acquire and reads the epoch may read
/// the launch's outputs (zero-copy buffers) without `clFinish`. The epoch is a 32-bit number
/// that the caller increments per launch (0 means "no signal").
///
/// It needs a device that writes host memory in place (`CL_DEVICE_HOST_UNIFIED_MEMORY`: CPU
/// devices, integrated GPUs); [`Flag::new`] refuses others with [`Error::NotApplicable`].
pub struct Flag {
    mem: Arc<FlagMem>,
}

/// A flag's buffer and words; shared by the flag and the launches bound to it, so the host
/// memory stays allocated while any kernel may still write it.
pub(crate) struct FlagMem {
    buf: Buffer,
    word: *const AtomicU32,
    _owned: Option<OwnedHost>,
}

// SAFETY: the flag word is accessed only atomically; the buffer is a thread-safe CL object; the
// owned allocation is freed only by the last reference's drop.
unsafe impl Send for FlagMem {}
// SAFETY: see Send.
unsafe impl Sync for FlagMem {}

struct OwnedHost {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Drop for OwnedHost {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in Flag::new, freed once after the Buffer that
        // wraps it (field order in FlagMem: buf drops first) and after every launch bound to
        // it (they hold the Arc<FlagMem>).
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

impl Flag {
    /// Allocates a zeroed, suitably aligned flag block in host memory and wraps it.
    pub fn new(device: &Arc<Device>) -> Result<Flag> {
        let align = device.info().base_addr_align.max(64);
        let size = align.max(64);
        let layout = std::alloc::Layout::from_size_align(size, align)
            .map_err(|_| Error::BadShape("bad flag alignment".into()))?;
        // SAFETY: layout has nonzero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::BadShape("flag allocation failed".into()));
        }
        let owned = OwnedHost { ptr, layout };
        // SAFETY: ptr..ptr+size is our allocation, kept alive in `_owned` after the buffer.
        let (buf, word) = unsafe { Flag::wrap(device, ptr, size)? };
        Ok(Flag {
            mem: Arc::new(FlagMem {
                buf,
                word,
                _owned: Some(owned),
            }),
        })
    }

    /// Wraps caller-owned host memory (e.g. a uma slot's flag words) as a flag.
    ///
    /// # Safety
    /// `ptr` must point to at least `len >= 8` bytes, zeroed, valid for reads and writes, aligned
    /// to the device's base address alignment, and outlive the returned flag and every launch
    /// bound to it; the host touches the words only through [`Flag::word`] / [`Flag::load`].
    pub unsafe fn from_raw(device: &Arc<Device>, ptr: *mut u8, len: usize) -> Result<Flag> {
        // SAFETY: forwarded from this function's contract.
        let (buf, word) = unsafe { Flag::wrap(device, ptr, len)? };
        Ok(Flag {
            mem: Arc::new(FlagMem {
                buf,
                word,
                _owned: None,
            }),
        })
    }

    /// # Safety
    /// As [`Flag::from_raw`].
    unsafe fn wrap(
        device: &Arc<Device>,
        ptr: *mut u8,
        len: usize,
    ) -> Result<(Buffer, *const AtomicU32)> {
        if !device.info().host_unified_memory {
            return Err(Error::NotApplicable(
                "completion flags need a device with host-unified memory",
            ));
        }
        if len < 8 {
            return Err(Error::BufferTooSmall {
                what: "flag",
                needed: 8,
                got: len,
            });
        }
        // SAFETY: forwarded from this function's contract.
        let buf = unsafe { device.wrap_host(ptr, len)? };
        // SAFETY: ptr + 4 is inside the len >= 8 bytes and 4-aligned (ptr is aligned).
        let word = unsafe { ptr.add(4) }.cast::<AtomicU32>();
        Ok((buf, word))
    }

    /// The 32-bit flag word (what `hetero-sync` waits on).
    pub fn word(&self) -> &AtomicU32 {
        // SAFETY: `word` points into memory that lives as long as self.mem, 4-aligned, accessed
        // only atomically by the host.
        unsafe { &*self.mem.word }
    }

    /// Loads the flag with Acquire ordering.
    pub fn load(&self) -> u32 {
        self.word().load(Ordering::Acquire)
    }

    /// Spins (then yields) until the flag equals `epoch` or `timeout` passes.
    pub fn wait(&self, epoch: NonZeroU32, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if self.load() == epoch.get() {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout);
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The event of a profiled launch ([`Launch::enqueue_profiled`]); released on drop.
pub struct Profiled {
    device: Arc<Device>,
    ev: cl_event,
}

impl std::fmt::Debug for Profiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiled").finish()
    }
}

impl Profiled {
    /// Waits for the kernel and returns its device time (`COMMAND_END - COMMAND_START`), in s.
    pub fn seconds(&self) -> Result<f64> {
        let api = &self.device.api;
        // SAFETY: one valid event.
        check("clWaitForEvents", unsafe {
            clf!(api, clWaitForEvents)(1, &self.ev)
        })?;
        let mut t = [0u64; 2];
        for (slot, what) in t
            .iter_mut()
            .zip([CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END])
        {
            // SAFETY: a cl_ulong out-value of the size given.
            check("clGetEventProfilingInfo", unsafe {
                clf!(api, clGetEventProfilingInfo)(
                    self.ev,
                    what,
                    8,
                    (slot as *mut u64).cast(),
                    ptr::null_mut(),
                )
            })?;
        }
        Ok(t[1].saturating_sub(t[0]) as f64 * 1e-9)
    }
}

impl Drop for Profiled {
    fn drop(&mut self) {
        if let Some(f) = self.device.api.clReleaseEvent {
            // SAFETY: the event came from the enqueue and is released once.
            unsafe { f(self.ev) };
        }
    }
}
