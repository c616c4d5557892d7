//! The decoder's fast matmuls (`kernels/mm.cl`): one program per weight kind a model holds,
//! the x-stationary GEMV (f32 or int8 activations) and the register-tiled GEMM, their shapes
//! chosen from the device's limits and the matrix.

use super::prepare::MatKind;
use crate::attention::KvType;
use crate::caps::IntDot;
use crate::device::{Device, DeviceInfo, Program};
use crate::error::Result;
use crate::kernels::OPTIONS;
use std::collections::HashMap;
use std::sync::Arc;

/// The OpenCL C source the fast matmul programs are built from (with `-DMM_FMT=<kind>` and the
/// `-DKV_TYPE=` of the cache their Q/K/V epilogue writes).
pub const MM_SOURCE: &str = concat!(
    include_str!("../../kernels/common.cl"),
    include_str!("../../kernels/kv.cl"),
    include_str!("../../kernels/decoder_ops.cl"),
    include_str!("../../kernels/mm.cl")
);

/// Local bytes of the GEMMs (mm.cl: xs[32 MT] + ws[32 x 128] floats).
const GEMM_LOCAL_M128: u64 = (32 * 128 + 32 * 128) * 4;
const GEMM_LOCAL_M64: u64 = (32 * 64 + 32 * 128) * 4;

/// The most steps of four rows a GEMV team takes.
const GEMV_MAX_STEPS: usize = 4;
/// The fewest GEMV work-groups a compute unit should get where the matrix has the rows. On the
/// H200 (132 compute units) four steps beat two wherever they still gave one group a unit
/// (8B down 22.6 vs 35.7 us, gate/up 33.6 vs 37.5; o, at 128 groups, was faster with two:
/// 12.7 vs 13.1), benches/results/opencl-kernels.md.
const GEMV_GROUPS_PER_CU: usize = 1;

/// How a GEMV launch is cut: see [`MmSet::gemv_shape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemvShape {
    /// Work-items a team (units a row).
    pub(crate) team: usize,
    /// Work-items a group.
    pub(crate) local: usize,
    /// Steps of four rows a team.
    pub(crate) steps: usize,
}

impl GemvShape {
    /// Output columns a work-group computes.
    pub(crate) fn rows(&self) -> usize {
        4 * self.steps * (self.local / self.team)
    }

    /// Bytes of the reduction array (mm.cl: `(R + 1) T` floats).
    pub(crate) fn red_bytes(&self) -> usize {
        (self.rows() + 1) * self.team * 4
    }
}

/// The built fast-matmul programs and what the device allows them.
pub(crate) struct MmSet {
    progs: HashMap<MatKind, Program>,
    /// Whether the GEMVs quantize activations to int8 (the `_i8` kernels).
    pub(crate) i8: bool,
    /// The int8 dot product the `_i8` kernels were built with.
    pub(crate) dot: IntDot,
    /// The largest work-group the GEMV may use.
    max_wg: usize,
    /// Floats of local memory a GEMV's reduction array may take.
    red_floats: usize,
    /// Which GEMM tiles fit the device's local memory: (m128, m64).
    gemm: (bool, bool),
    compute_units: usize,
    /// Measurement override of the GEMM tile rows (0: chosen per matrix).
    pub(crate) force_mt: usize,
    /// Measurement override of the GEMV's rows a step (0: chosen per matrix).
    pub(crate) force_steps: usize,
}

impl MmSet {
    /// No fast matmuls: every kind runs the older kernels of decoder.cl.
    pub(crate) fn none() -> MmSet {
        MmSet {
            progs: HashMap::new(),
            i8: false,
            dot: IntDot::Portable,
            max_wg: 0,
            red_floats: 0,
            gemm: (false, false),
            compute_units: 1,
            force_mt: 0,
            force_steps: 0,
        }
    }

    /// Builds one program per kind of `kinds` that mm.cl reads; `kv`: the KV cache the
    /// epilogues store k/v into (the decoder's; any for matmuls without a cache).
    pub(crate) fn build(
        dev: &Arc<Device>,
        kinds: &[MatKind],
        dot: IntDot,
        i8: bool,
        kv: KvType,
    ) -> Result<MmSet> {
        let info: &DeviceInfo = dev.info();
        let dot_code = u32::from(dot == IntDot::Dp4aPtx);
        let mut want: Vec<(MatKind, u32)> = Vec::new();
        for &k in kinds {
            if let Some(code) = k.mm_code() {
                if !want.iter().any(|(w, _)| *w == k) {
                    want.push((k, code));
                }
            }
        }
        // One program per kind, built side by side (independent compilations).
        let built: Vec<Result<Program>> = std::thread::scope(|s| {
            let jobs: Vec<_> = want
                .iter()
                .map(|&(_, code)| {
                    s.spawn(move || {
                        let opts = format!(
                            "{OPTIONS} -DMM_FMT={code} -DMM_DOT={dot_code} -DKV_TYPE={}",
                            kv.code()
                        );
                        dev.build(MM_SOURCE, &opts)
                    })
                })
                .collect();
            jobs.into_iter()
                .map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut progs = HashMap::new();
        for ((k, _), p) in want.into_iter().zip(built) {
            progs.insert(k, p?);
        }
        Ok(MmSet {
            progs,
            i8,
            dot,
            max_wg: info.max_work_group_size.min(1024),
            // Leave 1 KiB of the device's local memory to the compiler.
            red_floats: (info.local_mem_size.saturating_sub(1024) / 4).min(1 << 16) as usize,
            gemm: (
                info.local_mem_size >= GEMM_LOCAL_M128,
                info.local_mem_size >= GEMM_LOCAL_M64,
            ),
            compute_units: info.compute_units.max(1),
            force_mt: 0,
            force_steps: 0,
        })
    }

    /// The program of `kind`, if its fast matmuls were built.
    pub(crate) fn program(&self, kind: MatKind) -> Option<&Program> {
        self.progs.get(&kind)
    }

    /// GEMV shape for `n` output columns of rows of `k` values: teams of `T = k / 32`
    /// work-items (one unit each) in a 1-D work-group of `local` (256, or the next power of
    /// two above `T`; one size for every matrix, so a compiler that builds per work-group size
    /// builds each kernel once), four rows a step and `steps` steps a team: the most rows a
    /// group (up to 16 a team) that still leaves at least `2 min_groups` groups where the
    /// matrix has the rows, within the local reduction array. `None` when a row has more units
    /// than a work-group may hold.
    pub(crate) fn gemv_shape(&self, k: usize, n: usize, min_groups: usize) -> Option<GemvShape> {
        let t = k / 32;
        if t == 0 || t > self.max_wg {
            return None;
        }
        let local = t.next_power_of_two().max(256).min(self.max_wg);
        let g = local / t;
        let fits = |s: usize| s > 0 && (4 * s * g + 1) * t <= self.red_floats;
        let steps = if self.force_steps > 0 {
            self.force_steps
        } else {
            let mut s = GEMV_MAX_STEPS;
            while s > 1 && (!fits(s) || n.div_ceil(4 * s * g) < GEMV_GROUPS_PER_CU * min_groups) {
                s /= 2;
            }
            s
        };
        fits(steps).then_some(GemvShape {
            team: t,
            local,
            steps,
        })
    }

    /// GEMM tile rows (128 or 64) for `n` columns and up to `m` rows: 128 where that still
    /// gives every compute unit three tiles, else 64; `None` when neither fits local memory.
    pub(crate) fn gemm_rows(&self, n: usize, m: usize) -> Option<usize> {
        let tiles = |mt: usize| n.div_ceil(128) * m.div_ceil(mt);
        // 128-row tiles ran faster than 64 on the H200 even at 128 tiles for 132 compute units
        // (8B o/down at 512 rows: 19.2 vs 14.6 TFLOP/s, benches/results/opencl-kernels.md);
        // 64 where 128 leaves over half the compute units idle (short prefills).
        let want = match self.force_mt {
            128 | 64 => self.force_mt,
            _ if 2 * tiles(128) >= self.compute_units => 128,
            _ => 64,
        };
        match (want, self.gemm) {
            (128, (true, _)) => Some(128),
            (_, (_, true)) => Some(64),
            _ => None,
        }
    }
}
