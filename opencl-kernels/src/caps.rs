//! What a device can do beyond portable OpenCL C 1.2, found by trying it rather than by its
//! vendor's name: a probe kernel is built and run, and the capability counts only when the
//! build succeeds and the kernel computes the known answer.

use crate::device::Device;
use crate::kernels::{Launch, OPTIONS};
use std::sync::Arc;

/// A 4-way int8 dot product with a 32-bit accumulator: what the `_i8` GEMVs of
/// `kernels/mm.cl` multiply with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntDot {
    /// Inline PTX `dp4a` (the device's compiler accepts PTX assembly: NVIDIA's OpenCL).
    Dp4aPtx,
    /// No hardware dot product: the portable integer code (exact, slower than f32 there).
    Portable,
}

const PROBE: &str = r#"
__kernel void probe(__global int *out) {
    int r, s;
    uint a = 0x0F080102u; int b = (int)0xFF7F0203u;
    __asm__("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(7));
    __asm__("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(s) : "r"(a), "r"(b), "r"(-7));
    out[0] = r;
    out[1] = s;
}
"#;

/// The byte-lane products the probe asks for, computed here.
fn want() -> [i32; 2] {
    let a = 0x0F08_0102u32.to_le_bytes();
    let b = 0xFF7F_0203u32.to_le_bytes();
    let us: i32 = (0..4).map(|i| a[i] as i32 * b[i] as i8 as i32).sum();
    let ss: i32 = (0..4).map(|i| a[i] as i8 as i32 * b[i] as i8 as i32).sum();
    [7 + us, -7 + ss]
}

/// Which int8 dot product `dev` has, and a note on why when it is the portable one (the build
/// log's first line, or the wrong answer).
pub fn int_dot(dev: &Arc<Device>) -> (IntDot, Option<String>) {
    let run = || -> std::result::Result<[i32; 2], String> {
        let prog = dev.build(PROBE, OPTIONS).map_err(|e| {
            let s = e.to_string();
            s.lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect::<String>()
        })?;
        let out = dev.alloc(8).map_err(|e| e.to_string())?;
        let mut l =
            Launch::create(dev, &prog, "probe", 1, [1, 1], [1, 1]).map_err(|e| e.to_string())?;
        l.mem(&out).map_err(|e| e.to_string())?;
        l.enqueue().map_err(|e| e.to_string())?;
        let mut got = [0i32; 2];
        out.read(&mut got).map_err(|e| e.to_string())?;
        Ok(got)
    };
    match run() {
        Ok(got) if got == want() => (IntDot::Dp4aPtx, None),
        Ok(got) => (
            IntDot::Portable,
            Some(format!(
                "int8 dot: the dp4a probe computed {got:?}, not {:?}: portable kernels",
                want()
            )),
        ),
        Err(e) => (
            IntDot::Portable,
            Some(format!(
                "int8 dot: no inline PTX dp4a on this device ({e}): portable kernels"
            )),
        ),
    }
}

const FMA_SRC: &str = r#"
__kernel void fma_peak(__global float *out, float a, float b, uint iters) {
    float v0 = get_global_id(0), v1 = v0 + 1.0f, v2 = v0 + 2.0f, v3 = v0 + 3.0f;
    float v4 = v0 + 4.0f, v5 = v0 + 5.0f, v6 = v0 + 6.0f, v7 = v0 + 7.0f;
    for (uint i = 0; i < iters; ++i) {
        v0 = fma(v0, a, b); v1 = fma(v1, a, b); v2 = fma(v2, a, b); v3 = fma(v3, a, b);
        v4 = fma(v4, a, b); v5 = fma(v5, a, b); v6 = fma(v6, a, b); v7 = fma(v7, a, b);
        v0 = fma(v0, a, b); v1 = fma(v1, a, b); v2 = fma(v2, a, b); v3 = fma(v3, a, b);
        v4 = fma(v4, a, b); v5 = fma(v5, a, b); v6 = fma(v6, a, b); v7 = fma(v7, a, b);
    }
    out[get_global_id(0)] = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
}
"#;

/// The FP32 FMA rate (FLOP/s, an FMA counting 2) an OpenCL kernel reaches on `dev`: 2048
/// work-items a compute unit, each 16 independent chains of `iters` FMAs a loop step; the
/// median of `reps` launches, host-timed around `clFinish` (so choose `iters` to make a launch
/// last milliseconds). For putting GEMM rates against the device's limit in the same run.
pub fn fp32_fma_rate(dev: &Arc<Device>, iters: u32, reps: usize) -> crate::Result<f64> {
    let prog = dev.build(FMA_SRC, OPTIONS)?;
    let items = dev.info().compute_units.max(1) * 2048;
    let out = dev.alloc(items * 4)?;
    let mut l = Launch::create(dev, &prog, "fma_peak", 1, [items, 1], [256, 1])?;
    l.mem(&out)?
        .scalar(0.999f32)?
        .scalar(0.001f32)?
        .scalar(iters)?;
    l.enqueue()?;
    dev.finish()?;
    let mut ts = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let t0 = std::time::Instant::now();
        l.enqueue()?;
        dev.finish()?;
        ts.push(t0.elapsed().as_secs_f64());
    }
    ts.sort_by(|a, b| a.total_cmp(b));
    Ok(items as f64 * f64::from(iters) * 32.0 / ts[ts.len() / 2])
}

/// Device copy bandwidth (bytes read plus written per second) of `clEnqueueCopyBuffer` over
/// two buffers of `bytes`, the median of `reps` copies host-timed around `clFinish`: the
/// memory limit to put GEMV rates against in the same run.
pub fn copy_bandwidth(dev: &Arc<Device>, bytes: usize, reps: usize) -> crate::Result<f64> {
    let (a, b) = (dev.alloc(bytes)?, dev.alloc(bytes)?);
    dev.copy(&a, &b, bytes)?;
    dev.finish()?;
    let mut ts = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let t0 = std::time::Instant::now();
        dev.copy(&a, &b, bytes)?;
        dev.finish()?;
        ts.push(t0.elapsed().as_secs_f64());
    }
    ts.sort_by(|a, b| a.total_cmp(b));
    Ok(2.0 * bytes as f64 / ts[ts.len() / 2])
}
