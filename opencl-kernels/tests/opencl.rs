//! Every kernel against the CPU reference on the OpenCL device (PoCL in CI), plus the bad-input
//! cases. Tests that need OpenCL go through `hetero_tests::require("opencl", ..)`: skipped with a
//! message when absent, a failure when HETERO_REQUIRE names `opencl`.
//!
//! Error bounds are normalized MSE, NMSE = sum((a-b)^2) / sum(b^2) with b the f64 reference,
//! as llama.cpp's test-backend-ops. Each threshold is stated where it is used, with its reason.

use half::f16;
use hetero_opencl_kernels::{self as ocl, reference, Buffer, Device, Error, GgmlType, Kernels};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

// Counts this thread's Rust allocations, for "enqueue does not allocate" checks.
#[global_allocator]
static ALLOC: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;

fn kernels() -> Option<&'static Kernels> {
    static K: OnceLock<Result<Kernels, String>> = OnceLock::new();
    let r = K.get_or_init(|| {
        let dev = Device::from_env().map_err(|e| e.to_string())?;
        eprintln!(
            "OpenCL device: {} / {} (driver {})",
            dev.info().platform_name,
            dev.info().name,
            dev.info().driver_version
        );
        // A build failure of our own kernels is a bug, not an absent backend.
        Ok(Kernels::new(&dev).unwrap_or_else(|e| panic!("kernel build failed: {e}")))
    });
    hetero_tests::require("opencl", r.as_ref())
}

fn rng(tag: u64) -> StdRng {
    StdRng::seed_from_u64(hetero_tests::seed(tag))
}

fn randn(r: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect()
}

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// Random weights in `format`: random quant bytes, scales in a realistic range.
fn rand_weights(r: &mut StdRng, format: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let bytes = ocl::matrix_bytes(format, n, k).unwrap();
    let mut w = vec![0u8; bytes];
    match format {
        GgmlType::F16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&f16_bytes(r.gen_range(-1.0..1.0)));
            }
        }
        _ => {
            let bb = format.block().map_or(2, |b| b.1);
            for blk in w.chunks_exact_mut(bb) {
                // Random bytes everywhere (every quant, fifth-bit and packed-scale pattern),
                // then finite f16 scales where the format keeps them.
                r.fill(&mut blk[..]);
                set_f16_scales(r, format, blk);
            }
        }
    }
    w
}

/// Overwrites the f16 fields of one block with scales in a realistic range: `d` (and `m` of
/// Q4_1/Q5_1, `dmin` of Q4_K/Q5_K, positive as quantizers write it); Q6_K keeps `d` last.
fn set_f16_scales(r: &mut StdRng, format: GgmlType, blk: &mut [u8]) {
    match format {
        GgmlType::Q6K => {
            let n = blk.len();
            blk[n - 2..].copy_from_slice(&f16_bytes(r.gen_range(0.0005..0.005)));
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            blk[0..2].copy_from_slice(&f16_bytes(r.gen_range(0.0005..0.005)));
            blk[2..4].copy_from_slice(&f16_bytes(r.gen_range(0.0..0.01)));
        }
        _ => {
            blk[0..2].copy_from_slice(&f16_bytes(r.gen_range(0.001..0.05)));
            if matches!(format, GgmlType::Q4_1 | GgmlType::Q5_1) {
                blk[2..4].copy_from_slice(&f16_bytes(r.gen_range(-0.2..0.2)));
            }
        }
    }
}

/// The formats read as GGUF stores them without a dedicated re-layout, beyond the first four.
const NEW_FORMATS: [GgmlType; 5] = [
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

fn poisoned(k: &Kernels, n: usize) -> Buffer {
    k.device().upload(&vec![f32::NAN; n]).unwrap()
}

fn read(b: &Buffer, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    b.read(&mut v).unwrap();
    v
}

fn check(what: &str, got: &[f32], want: &[f32], bound: f64) {
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what}: unwritten (NaN) or non-finite output"
    );
    let e = reference::nmse(got, want);
    assert!(e <= bound, "{what}: NMSE {e:e} > {bound:e}");
}

#[test]
fn smoke_add_runs_on_device() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let n = 1000;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let (ba, bb, bo) = (d.upload(&a).unwrap(), d.upload(&b).unwrap(), poisoned(k, n));
    k.add(&ba, &bb, &bo, n).unwrap().enqueue().unwrap();
    // Exact: one f32 add per element on both sides.
    assert_eq!(read(&bo, n), reference::add(&a, &b));
}

// GEMV/GEMM bounds. NMSE 1e-8 (when N*M >= 16 outputs): f32 accumulation of K <= 4096 products
// has a typical relative error of about sqrt(K) * 2^-24 ~ 4e-6, an NMSE near 1e-11; 1e-8 leaves
// three orders of margin and still catches any wrong element (one wrong output of >= 16 gives
// NMSE > 1e-3). A single output can cancel to near zero, so every shape is also checked with
// the error normalized by the magnitudes sum_k |w x| of each output (the scale f32 rounding
// works at): sum((a-b)^2) / sum(mag^2) <= 1e-10 (expected ~K * 2^-48 ~ 1e-11 at K = 4096).
const MATMUL_NMSE: f64 = 1e-8;
const MATMUL_MAG: f64 = 1e-10;

/// sum_k |W[n][k] x[m][k]| per output, the scale for the magnitude-normalized error.
fn magnitudes(format: GgmlType, w: &[u8], x: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let rb = ocl::row_bytes(format, k).unwrap();
    let mut row = vec![0f32; k];
    let mut out = vec![0f32; m * n];
    for r in 0..n {
        reference::dequantize_row(format, &w[r * rb..(r + 1) * rb], k, &mut row).unwrap();
        for i in 0..m {
            out[i * n + r] = row
                .iter()
                .zip(&x[i * k..(i + 1) * k])
                .map(|(a, b)| (a * b).abs() as f64)
                .sum::<f64>() as f32;
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn check_mm(
    what: &str,
    got: &[f32],
    want: &[f32],
    format: GgmlType,
    w: &[u8],
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
) {
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what}: unwritten (NaN) or non-finite output"
    );
    if got.len() >= 16 {
        let e = reference::nmse(got, want);
        assert!(e <= MATMUL_NMSE, "{what}: NMSE {e:e} > {MATMUL_NMSE:e}");
    }
    let mag = magnitudes(format, w, x, m, n, k);
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
        .sum();
    let den: f64 = mag.iter().map(|v| (*v as f64).powi(2)).sum();
    let e = num / den.max(f64::MIN_POSITIVE);
    assert!(
        e <= MATMUL_MAG,
        "{what}: magnitude-normalized error {e:e} > {MATMUL_MAG:e}"
    );
}

/// A Launch owns what it uses: it is `'static + Send`, it keeps working after the caller drops
/// its own handles to the buffers (and the Kernels it came from), it can move to another thread,
/// and enqueueing it allocates nothing.
#[test]
fn launch_owns_its_buffers_and_enqueue_does_not_allocate() {
    fn owned<T: Send + 'static>(_: &T) {}
    let Some(k) = kernels() else { return };
    let d = k.device().clone();
    let mut r = rng(13);
    let (n, kk, f) = (37, 96, GgmlType::Q4_1);
    let w = rand_weights(&mut r, f, n, kk);
    let x = randn(&mut r, kk);
    let want = reference::gemm(f, &w, &x, 1, n, kk).unwrap();
    let by = poisoned(k, n);
    let mut l = {
        let k2 = Kernels::new(&d).unwrap();
        let (bw, bx) = (d.upload(&w).unwrap(), d.upload(&x).unwrap());
        k2.gemv(f, &bw, &bx, &by, n, kk).unwrap()
        // k2, bw and bx are dropped here; the launch holds its own references.
    };
    owned(&l);
    let l2 = std::thread::spawn(move || {
        l.enqueue().unwrap();
        l
    })
    .join()
    .unwrap();
    l = l2;
    d.finish().unwrap();
    check_mm(
        "gemv after drops",
        &read(&by, n),
        &want,
        f,
        &w,
        &x,
        1,
        n,
        kk,
    );
    // The counter moves on something that allocates (so a zero below means something).
    assert!(hetero_tests::count_allocations(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
    let allocs = hetero_tests::count_allocations(|| {
        for _ in 0..10 {
            l.enqueue().unwrap();
        }
    });
    assert_eq!(allocs, 0, "Launch::enqueue allocated");
    d.finish().unwrap();
}

#[test]
fn gemv_all_formats_match_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(1);
    for format in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ] {
        for &(n, kk) in &[(1, 32), (37, 64), (257, 96), (100, 576), (67, 4096)] {
            let w = rand_weights(&mut r, format, n, kk);
            let x = randn(&mut r, kk);
            let want = reference::gemm(format, &w, &x, 1, n, kk).unwrap();
            let (bw, bx, by) = (d.upload(&w).unwrap(), d.upload(&x).unwrap(), poisoned(k, n));
            k.gemv(format, &bw, &bx, &by, n, kk)
                .unwrap()
                .enqueue()
                .unwrap();
            check_mm(
                &format!("gemv {format:?} {n}x{kk}"),
                &read(&by, n),
                &want,
                format,
                &w,
                &x,
                1,
                n,
                kk,
            );
        }
    }
    // FP16 with K not a multiple of 8: the element-wise kernel.
    for &(n, kk) in &[(5, 3), (33, 1003)] {
        let w = rand_weights(&mut r, GgmlType::F16, n, kk);
        let x = randn(&mut r, kk);
        let want = reference::gemm(GgmlType::F16, &w, &x, 1, n, kk).unwrap();
        let (bw, bx, by) = (d.upload(&w).unwrap(), d.upload(&x).unwrap(), poisoned(k, n));
        k.gemv(GgmlType::F16, &bw, &bx, &by, n, kk)
            .unwrap()
            .enqueue()
            .unwrap();
        check_mm(
            &format!("gemv_f16_any {n}x{kk}"),
            &read(&by, n),
            &want,
            GgmlType::F16,
            &w,
            &x,
            1,
            n,
            kk,
        );
    }
}

/// Q5_0, Q5_1, Q4_K, Q5_K and Q6_K GEMVs over the K of K-quant rows (256, 512, 1536) and row
/// counts that leave partial work-groups (1, 37, 67, 257); outputs poisoned, the bounds of
/// `check_mm` (f32 accumulation of <= 1536 products; same reasoning as above). Every K runs
/// under one work-group shape per format (K = 512's default; the kernels' K-dependence is the
/// loop bound, not the shape), since each shape is one more PoCL compile of the kernel; the
/// shape choice itself is the format-independent code the tests above cover. Q4_K also runs
/// one work-item a row and more work-items than a row has parts.
#[test]
fn gemv_q5_and_k_quants_match_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(14);
    let same = ocl::RowShape::for_units(512 / 8, 128);
    for format in NEW_FORMATS {
        for &(n, kk) in &[(1, 256), (37, 512), (257, 1536), (67, 256)] {
            let w = rand_weights(&mut r, format, n, kk);
            let x = randn(&mut r, kk);
            let want = reference::gemm(format, &w, &x, 1, n, kk).unwrap();
            let (bw, bx) = (d.upload(&w).unwrap(), d.upload(&x).unwrap());
            let mut shapes = vec![(kk != 512).then_some(same)];
            if n == 37 && format == GgmlType::Q4K {
                shapes.extend([(1, 4), (256, 1)].map(|(tpr, rows)| {
                    Some(ocl::RowShape {
                        tpr,
                        rows,
                        per_item: 1,
                        unroll: 0,
                    })
                }));
            }
            for shape in shapes {
                let by = poisoned(k, n);
                k.gemv_with(format, &bw, &bx, &by, n, kk, shape)
                    .unwrap()
                    .enqueue()
                    .unwrap();
                check_mm(
                    &format!("gemv {format} {n}x{kk} shape {shape:?}"),
                    &read(&by, n),
                    &want,
                    format,
                    &w,
                    &x,
                    1,
                    n,
                    kk,
                );
            }
        }
    }
}

#[test]
fn gemv_explicit_shapes_match_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(2);
    let (n, kk) = (45, 512);
    for format in [GgmlType::F16, GgmlType::Q4_0] {
        let w = rand_weights(&mut r, format, n, kk);
        let x = randn(&mut r, kk);
        let want = reference::gemm(format, &w, &x, 1, n, kk).unwrap();
        let (bw, bx) = (d.upload(&w).unwrap(), d.upload(&x).unwrap());
        for (tpr, rows, per_item) in [
            (1, 1, 1),
            (4, 8, 1),
            (32, 2, 1),
            (128, 2, 1),
            (1, 1, 2),
            (8, 8, 2),
        ] {
            if per_item == 2 && format != GgmlType::F16 {
                continue;
            }
            let by = poisoned(k, n);
            let shape = ocl::RowShape {
                tpr,
                rows,
                per_item,
                unroll: 0,
            };
            k.gemv_with(format, &bw, &bx, &by, n, kk, Some(shape))
                .unwrap()
                .enqueue()
                .unwrap();
            check_mm(
                &format!("gemv {format:?} shape {tpr}x{rows} r{per_item}"),
                &read(&by, n),
                &want,
                format,
                &w,
                &x,
                1,
                n,
                kk,
            );
        }
    }
}

#[test]
fn gemv_q4_0_relayout_matches_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(3);
    for &(n, kk) in &[(1, 32), (2, 64), (3, 96), (77, 160), (130, 2048)] {
        let w = rand_weights(&mut r, GgmlType::Q4_0, n, kk);
        let (nq, nd) = ocl::relayout_q4_0_len(n, kk).unwrap();
        let (mut qs, mut ds) = (vec![0u8; nq], vec![0u8; nd]);
        ocl::relayout_q4_0(&w, n, kk, &mut qs, &mut ds).unwrap();
        let x = randn(&mut r, kk);
        let want = reference::gemm(GgmlType::Q4_0, &w, &x, 1, n, kk).unwrap();
        let (bq, bd, bx, by) = (
            d.upload(&qs).unwrap(),
            d.upload(&ds).unwrap(),
            d.upload(&x).unwrap(),
            poisoned(k, n),
        );
        k.gemv_q4_0_soa(&bq, &bd, &bx, &by, n, kk, None)
            .unwrap()
            .enqueue()
            .unwrap();
        check_mm(
            &format!("gemv_q4_0_soa {n}x{kk}"),
            &read(&by, n),
            &want,
            GgmlType::Q4_0,
            &w,
            &x,
            1,
            n,
            kk,
        );
        for (tpr, rows, per_item) in [
            (1, 1, 2),
            (16, 4, 2),
            (64, 4, 2),
            (1, 1, 4),
            (8, 8, 4),
            (64, 2, 4),
        ] {
            let by = poisoned(k, n);
            let shape = ocl::RowShape {
                tpr,
                rows,
                per_item,
                unroll: 0,
            };
            k.gemv_q4_0_soa(&bq, &bd, &bx, &by, n, kk, Some(shape))
                .unwrap()
                .enqueue()
                .unwrap();
            let what = format!("gemv_q4_0_soa r{per_item} {n}x{kk} {tpr}x{rows}");
            check_mm(
                &what,
                &read(&by, n),
                &want,
                GgmlType::Q4_0,
                &w,
                &x,
                1,
                n,
                kk,
            );
        }
    }
}

#[test]
fn gemv_q4_0_x4_relayout_matches_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(9);
    for &(n, kk) in &[(1, 32), (2, 64), (3, 96), (5, 160), (77, 160), (130, 2048)] {
        let w = rand_weights(&mut r, GgmlType::Q4_0, n, kk);
        let (nq, nd) = ocl::relayout_q4_0_x4_len(n, kk).unwrap();
        let (mut qs, mut ds) = (vec![0xAAu8; nq], vec![0xAAu8; nd]);
        ocl::relayout_q4_0_x4(&w, n, kk, &mut qs, &mut ds).unwrap();
        let x = randn(&mut r, kk);
        let want = reference::gemm(GgmlType::Q4_0, &w, &x, 1, n, kk).unwrap();
        let (bq, bd, bx) = (
            d.upload(&qs).unwrap(),
            d.upload(&ds).unwrap(),
            d.upload(&x).unwrap(),
        );
        for shape in [None, Some((1, 1)), Some((8, 8)), Some((64, 4))] {
            let shape = shape.map(|(tpr, rows)| ocl::RowShape {
                tpr,
                rows,
                per_item: 4,
                unroll: 0,
            });
            let by = poisoned(k, n);
            k.gemv_q4_0_x4(&bq, &bd, &bx, &by, n, kk, shape)
                .unwrap()
                .enqueue()
                .unwrap();
            let what = format!("gemv_q4_0_x4 {n}x{kk} {shape:?}");
            check_mm(
                &what,
                &read(&by, n),
                &want,
                GgmlType::Q4_0,
                &w,
                &x,
                1,
                n,
                kk,
            );
        }
    }
}

/// The T-layout GEMVs (Q4_0 and Q4_1; 1, 2 and 4 rows per work-item) against the reference:
/// N not a multiple of the rows per group or per item, K with block counts (nb = K/32) below,
/// at and above the team width and not multiples of it (1, 3, 5, 18 = the 576 of SmolLM2 /
/// the (49152, 576) decode shape, 64), so the unrolled loop, its remainder and idle
/// work-items all run. Same bounds as the other GEMVs (MATMUL_NMSE, MATMUL_MAG): the decoding
/// is exact, only the f32 accumulation order differs from the f64 reference.
#[test]
fn gemv_q4_t_layout_matches_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(11);
    for format in [GgmlType::Q4_0, GgmlType::Q4_1] {
        for &(n, kk) in &[
            (1, 32),
            (2, 96),
            (5, 160),
            (37, 576),
            (77, 2048),
            (130, 1024),
        ] {
            let w = rand_weights(&mut r, format, n, kk);
            let (nq, nd) = ocl::relayout_q4_t_len(format, n, kk).unwrap();
            let (mut qs, mut ds) = (vec![0xAAu8; nq], vec![0xAAu8; nd]);
            ocl::relayout_q4_t(format, &w, n, kk, &mut qs, &mut ds).unwrap();
            let x = randn(&mut r, kk);
            let want = reference::gemm(format, &w, &x, 1, n, kk).unwrap();
            let (bq, bd, bx) = (
                d.upload(&qs).unwrap(),
                d.upload(&ds).unwrap(),
                d.upload(&x).unwrap(),
            );
            // (work-items per row, row slots, rows per item, units in flight; 0 = default)
            let shapes = [
                None,
                Some((1, 1, 1, 0)),
                Some((8, 4, 1, 1)),
                Some((32, 8, 1, 2)),
                Some((2, 2, 2, 0)),
                Some((16, 4, 2, 4)),
                Some((4, 4, 4, 0)),
                Some((32, 2, 4, 2)),
                Some((2, 8, 4, 4)),
            ];
            for shape in shapes {
                let shape = shape.map(|(tpr, rows, per_item, unroll)| ocl::RowShape {
                    tpr,
                    rows,
                    per_item,
                    unroll,
                });
                let by = poisoned(k, n);
                k.gemv_q4_t(format, &bq, &bd, &bx, &by, n, kk, shape)
                    .unwrap()
                    .enqueue()
                    .unwrap();
                let what = format!("gemv_q4_t {format:?} {n}x{kk} {shape:?}");
                check_mm(&what, &read(&by, n), &want, format, &w, &x, 1, n, kk);
            }
        }
    }
    // Formats without a T layout, and a bad per_item, are typed errors.
    let b = d.alloc(1 << 12).unwrap();
    let e = k
        .gemv_q4_t(GgmlType::Q8_0, &b, &b, &b, &b, 4, 32, None)
        .unwrap_err();
    assert!(matches!(e, Error::NotApplicable(_)), "{e}");
    for (per_item, unroll) in [(3, 0), (1, 3)] {
        let bad = ocl::RowShape {
            tpr: 8,
            rows: 1,
            per_item,
            unroll,
        };
        let e = k
            .gemv_q4_t(GgmlType::Q4_0, &b, &b, &b, &b, 4, 32, Some(bad))
            .unwrap_err();
        assert!(matches!(e, Error::NotApplicable(_)), "{e}");
    }
    // The dp4a variant is NVIDIA-only: elsewhere a typed error, and its launches refuse to
    // exist before it is enabled.
    let e = k
        .gemv_q4_0_t_dp4a(&b, &b, &b, &b, &b, 4, 32, None)
        .unwrap_err();
    assert!(matches!(e, Error::NotApplicable(_)), "{e}");
}

/// The NVIDIA-only dp4a variant: where the platform is NVIDIA's it must build and match the
/// reference; elsewhere (PoCL in CI) `enable_dp4a` is a typed NotApplicable. Bound: NMSE
/// <= 1e-4 — the activations are rounded to int8 per 32-block (step max|x|/127), whose
/// rounding noise (step^2 / 12 per element) gives an NMSE of ~1.5e-5 for uniform activations
/// (measured 1.3e-5..1.5e-5 on an H200); the weights' decoding and the integer sums are
/// exact.
#[test]
fn gemv_q4_0_t_dp4a_matches_reference_where_it_runs() {
    let Some(k) = kernels() else { return };
    let dev = k.device().clone();
    let mut kd = Kernels::new(&dev).unwrap();
    let nvidia = dev
        .info()
        .platform_name
        .to_ascii_lowercase()
        .contains("nvidia");
    match kd.enable_dp4a() {
        Err(Error::NotApplicable(_)) if !nvidia => {
            eprintln!("dp4a variant: not an NVIDIA platform, NotApplicable as documented");
            return;
        }
        Err(e) => panic!("enable_dp4a on {}: {e}", dev.info().platform_name),
        Ok(()) => assert!(nvidia && kd.has_dp4a()),
    }
    let mut r = rng(12);
    for &(n, kk) in &[(1, 32), (5, 160), (37, 576), (77, 2048), (130, 1024)] {
        let w = rand_weights(&mut r, GgmlType::Q4_0, n, kk);
        let (nq, nd) = ocl::relayout_q4_t_len(GgmlType::Q4_0, n, kk).unwrap();
        let (mut qs, mut ds) = (vec![0u8; nq], vec![0u8; nd]);
        ocl::relayout_q4_t(GgmlType::Q4_0, &w, n, kk, &mut qs, &mut ds).unwrap();
        let x = randn(&mut r, kk);
        let want = reference::gemm(GgmlType::Q4_0, &w, &x, 1, n, kk).unwrap();
        let (nxq, nxs) = Kernels::quantize_x_q8w_len(kk).unwrap();
        let (bq, bd, bx) = (
            dev.upload(&qs).unwrap(),
            dev.upload(&ds).unwrap(),
            dev.upload(&x).unwrap(),
        );
        let (bxq, bxs) = (dev.alloc(nxq).unwrap(), dev.alloc(nxs).unwrap());
        kd.quantize_x_q8w(&bx, &bxq, &bxs, kk)
            .unwrap()
            .enqueue()
            .unwrap();
        for shape in [
            None,
            Some((8, 4, 1, 1)),
            Some((16, 4, 2, 4)),
            Some((4, 8, 4, 2)),
        ] {
            let shape = shape.map(|(tpr, rows, per_item, unroll)| ocl::RowShape {
                tpr,
                rows,
                per_item,
                unroll,
            });
            let by = poisoned(k, n);
            kd.gemv_q4_0_t_dp4a(&bq, &bd, &bxq, &bxs, &by, n, kk, shape)
                .unwrap()
                .enqueue()
                .unwrap();
            let got = read(&by, n);
            let what = format!("dp4a {n}x{kk} {shape:?}");
            if n >= 16 {
                check(&what, &got, &want, 1e-4);
            } else {
                assert!(
                    got.iter().all(|v| v.is_finite()),
                    "{what}: unwritten output"
                );
                // Few outputs: error relative to the outputs' magnitudes sum |w x| instead; each
                // activation is off by at most half a step (max|x| / 254), at most ~0.8% of
                // sum |w x| when |x| averages max|x| / 2: bound 1%.
                let mag = magnitudes(GgmlType::Q4_0, &w, &x, 1, n, kk);
                for ((g, e), m) in got.iter().zip(&want).zip(&mag) {
                    assert!(
                        (g - e).abs() <= 1e-2 * m,
                        "{what}: {g} vs {e} (|w x| sum {m})"
                    );
                }
            }
        }
    }
}

#[test]
fn gemm_small_m_matches_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(4);
    for format in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
    ] {
        for &(m, n, kk) in &[(1, 19, 64), (3, 70, 96), (5, 33, 576), (9, 129, 256)] {
            let w = rand_weights(&mut r, format, n, kk);
            let x = randn(&mut r, m * kk);
            let want = reference::gemm(format, &w, &x, m, n, kk).unwrap();
            let (bw, bx, by) = (
                d.upload(&w).unwrap(),
                d.upload(&x).unwrap(),
                poisoned(k, m * n),
            );
            k.gemm(format, &bw, &bx, &by, m, n, kk)
                .unwrap()
                .enqueue()
                .unwrap();
            check_mm(
                &format!("gemm {format:?} {m}x{n}x{kk}"),
                &read(&by, m * n),
                &want,
                format,
                &w,
                &x,
                m,
                n,
                kk,
            );
        }
    }
}

/// The small-M GEMM of Q5_0, Q5_1, Q4_K, Q5_K and Q6_K: every row count 1..=33 (every
/// remainder of the kernel's 4-row tiles) at K = 512, and K = 256 / 1536 with row counts that
/// leave partial work-groups, all under K = 512's default shape (one PoCL compile per format,
/// as for the GEMVs above); outputs poisoned, `check_mm`'s bounds.
#[test]
fn gemm_q5_and_k_quants_match_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(15);
    let same = ocl::RowShape::for_units(512 / 32, 64);
    for format in NEW_FORMATS {
        let mut cases: Vec<(usize, usize, usize)> = (1..=33).map(|m| (m, 45, 512)).collect();
        cases.extend([(7, 130, 1536), (2, 257, 256)]);
        for (m, n, kk) in cases {
            let w = rand_weights(&mut r, format, n, kk);
            let x = randn(&mut r, m * kk);
            let want = reference::gemm(format, &w, &x, m, n, kk).unwrap();
            let (bw, bx, by) = (
                d.upload(&w).unwrap(),
                d.upload(&x).unwrap(),
                poisoned(k, m * n),
            );
            let shape = (kk != 512).then_some(same);
            k.gemm_with(format, &bw, &bx, &by, m, n, kk, shape)
                .unwrap()
                .enqueue()
                .unwrap();
            check_mm(
                &format!("gemm {format} {m}x{n}x{kk}"),
                &read(&by, m * n),
                &want,
                format,
                &w,
                &x,
                m,
                n,
                kk,
            );
        }
    }
}

#[test]
fn rms_norm_swiglu_add_match_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(5);
    for &(rows, n) in &[(1, 1), (3, 100), (2, 576), (1, 1537)] {
        let x = randn(&mut r, rows * n);
        let g = randn(&mut r, n);
        let want = reference::rms_norm(&x, &g, rows, n, 1e-5);
        let (bx, bg, by) = (
            d.upload(&x).unwrap(),
            d.upload(&g).unwrap(),
            poisoned(k, rows * n),
        );
        k.rms_norm(&bx, &bg, &by, rows, n, 1e-5)
            .unwrap()
            .enqueue()
            .unwrap();
        // rsqrt and the f32 sum of n <= 1537 squares: relative error ~1e-6 at worst, NMSE < 1e-11.
        check(
            &format!("rms_norm {rows}x{n}"),
            &read(&by, rows * n),
            &want,
            1e-10,
        );
    }
    for &n in &[1, 63, 1000, 1537] {
        let a = randn(&mut r, n).iter().map(|v| v * 8.0).collect::<Vec<_>>();
        let b = randn(&mut r, n);
        let (ba, bb) = (d.upload(&a).unwrap(), d.upload(&b).unwrap());
        let bo = poisoned(k, n);
        k.swiglu(&ba, &bb, &bo, n).unwrap().enqueue().unwrap();
        // exp (3 ulp) and one division (2.5 ulp): relative error < 1e-6, NMSE < 1e-12.
        check(
            &format!("swiglu {n}"),
            &read(&bo, n),
            &reference::swiglu(&a, &b),
            1e-10,
        );
        let bo = poisoned(k, n);
        k.add(&ba, &bb, &bo, n).unwrap().enqueue().unwrap();
        assert_eq!(read(&bo, n), reference::add(&a, &b), "add {n}");
        // In place: out = a.
        k.add(&ba, &bb, &ba, n).unwrap().enqueue().unwrap();
        assert_eq!(read(&ba, n), reference::add(&a, &b), "add in place {n}");
    }
}

#[test]
fn rope_both_modes_match_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(6);
    for mode in [ocl::RopeMode::Normal, ocl::RopeMode::Neox] {
        for &(t, h, hd, pos0) in &[(1, 9, 64, 0u32), (3, 5, 64, 777), (2, 3, 6, 31)] {
            let x = randn(&mut r, t * h * hd);
            let mut want = x.clone();
            reference::rope(&mut want, t, h, hd, pos0, 10000.0, mode);
            let bx = d.upload(&x).unwrap();
            let mut l = k.rope(&bx, t, h, hd, 0, 10000.0, mode).unwrap();
            l.set_position(pos0).unwrap();
            l.enqueue().unwrap();
            // The f32 angle pos * inv_freq carries ~pos * 2^-24 rad of error (~5e-5 at pos 780)
            // plus pow/sin/cos ulps: NMSE ~1e-9; bound 1e-7.
            check(
                &format!("rope {mode:?} {t}x{h}x{hd}@{pos0}"),
                &read(&bx, t * h * hd),
                &want,
                1e-7,
            );
        }
    }
}

#[test]
fn attention_gqa_matches_reference() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let mut r = rng(7);
    for &(h, kvh, hd, max_seq, len) in &[
        (9, 3, 64, 100, 1),
        (9, 3, 64, 100, 77),
        (4, 4, 32, 300, 300),
        (6, 1, 17, 50, 33),
    ] {
        let q = randn(&mut r, h * hd);
        let kc = randn(&mut r, max_seq * kvh * hd);
        let vc = randn(&mut r, max_seq * kvh * hd);
        let want = reference::attention(&q, &kc, &vc, h, kvh, hd, len);
        let (bq, bk, bv) = (
            d.upload(&q).unwrap(),
            d.upload(&kc).unwrap(),
            d.upload(&vc).unwrap(),
        );
        let bs = poisoned(k, Kernels::attention_scratch_len(h, max_seq));
        let bo = poisoned(k, h * hd);
        let mut l = k
            .attention(&bq, &bk, &bv, &bo, &bs, h, kvh, hd, max_seq, max_seq)
            .unwrap();
        l.set_len(len).unwrap();
        l.enqueue().unwrap();
        // f32 dot products of <= 64 terms, exp, and sums of <= 300 terms: NMSE ~1e-12; bound 1e-9.
        check(
            &format!("attention {h}/{kvh}x{hd} len {len}"),
            &read(&bo, h * hd),
            &want,
            1e-9,
        );
    }
}

/// Zero-copy host buffers plus the completion flag: the host waits on the flag word, not on
/// clFinish, then reads the output in place.
#[test]
fn zero_copy_and_completion_flag() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    if !d.info().host_unified_memory {
        eprintln!("SKIP flag test: device is not host-unified");
        return;
    }
    let mut r = rng(8);
    let (n, kk) = (300, 256);
    let align = d.info().base_addr_align.max(4096);
    let layout = std::alloc::Layout::from_size_align(4 * (n + kk), align).unwrap();
    // SAFETY: nonzero-size layout; freed at the end of the test after the buffers are dropped.
    let mem = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!mem.is_null());
    // SAFETY: `mem` holds n + kk f32s, aligned.
    let (xs, ys) = unsafe {
        (
            std::slice::from_raw_parts_mut(mem.cast::<f32>(), kk),
            std::slice::from_raw_parts_mut(mem.cast::<f32>().add(kk), n),
        )
    };
    xs.copy_from_slice(&randn(&mut r, kk));
    ys.fill(f32::NAN);
    let w = rand_weights(&mut r, GgmlType::Q4_1, n, kk);
    let want = reference::gemm(GgmlType::Q4_1, &w, xs, 1, n, kk).unwrap();
    let xcopy = xs.to_vec();
    {
        let bw = d.upload(&w).unwrap();
        // SAFETY: the regions live until dealloc below, after these buffers drop; the host
        // reads ys only after the flag says the launch is done.
        let bx = unsafe { d.wrap_host(mem, kk * 4) }.unwrap();
        // SAFETY: kk * 4 = 1024 keeps the 4096 alignment for y at this base-address alignment
        // only if base_addr_align <= 1024; otherwise check that the error is reported.
        let by = unsafe { d.wrap_host(mem.add(kk * 4), n * 4) };
        let by = match by {
            Ok(b) => b,
            Err(Error::Misaligned { .. }) => return,
            Err(e) => panic!("{e}"),
        };
        let flag = ocl::Flag::new(d).unwrap();
        let mut l = k.gemv(GgmlType::Q4_1, &bw, &bx, &by, n, kk).unwrap();
        l.bind_flag(&flag).unwrap();
        let yp = ys.as_mut_ptr();
        for epoch in 1..=3u32 {
            for i in 0..n {
                // SAFETY: no launch is in flight (the previous one signalled completion).
                unsafe { std::ptr::write_volatile(yp.add(i), f32::NAN) };
            }
            let e = NonZeroU32::new(epoch).unwrap();
            l.enqueue_signaled(e).unwrap();
            d.flush().unwrap();
            flag.wait(e, Duration::from_secs(60)).unwrap();
            // Acquire on the flag pairs with the kernel's fence + atomic store.
            let got: Vec<f32> = (0..n)
                // SAFETY: the launch is complete (flag), so no device write races this read.
                .map(|i| unsafe { std::ptr::read_volatile(yp.add(i)) })
                .collect();
            check_mm(
                &format!("flagged gemv epoch {epoch}"),
                &got,
                &want,
                GgmlType::Q4_1,
                &w,
                &xcopy,
                1,
                n,
                kk,
            );
        }
        d.finish().unwrap();
    }
    // SAFETY: allocated above with this layout; all buffers using it are dropped.
    unsafe { std::alloc::dealloc(mem, layout) };
}

#[test]
fn bad_inputs_are_typed_errors() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let b = d.alloc(64).unwrap();
    let big = d.alloc(1 << 16).unwrap();
    // K not a multiple of 32 for a block format, of 256 for a K-quant (GEMV and GEMM).
    for (f, kk, block) in [
        (GgmlType::Q4_0, 48, "32"),
        (GgmlType::Q4_1, 48, "32"),
        (GgmlType::Q8_0, 48, "32"),
        (GgmlType::Q5_0, 48, "32"),
        (GgmlType::Q5_1, 48, "32"),
        (GgmlType::Q4K, 288, "256"),
        (GgmlType::Q5K, 288, "256"),
        (GgmlType::Q6K, 64, "256"),
    ] {
        let want = format!("multiple of {block}");
        let e = k.gemv(f, &big, &big, &big, 4, kk).unwrap_err();
        assert!(
            matches!(e, Error::BadShape(ref s) if s.contains(&want)),
            "{f}: {e}"
        );
        let e = k.gemm(f, &big, &big, &big, 2, 4, kk).unwrap_err();
        assert!(
            matches!(e, Error::BadShape(ref s) if s.contains(&want)),
            "{f}: {e}"
        );
    }
    // Types the kernels do not compute are typed errors, for the GEMV, the GEMM and the sizes.
    for f in [
        GgmlType::BF16,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::F32,
        GgmlType::Other(16),
    ] {
        let e = k.gemv(f, &big, &big, &big, 4, 64).unwrap_err();
        assert_eq!(e, Error::UnsupportedFormat(f));
        let e = k.gemm(f, &big, &big, &big, 2, 4, 64).unwrap_err();
        assert_eq!(e, Error::UnsupportedFormat(f));
        assert_eq!(ocl::row_bytes(f, 64), Err(Error::UnsupportedFormat(f)));
    }
    // Buffer too small names the argument.
    let e = k.gemv(GgmlType::F16, &big, &b, &big, 4, 64).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BufferTooSmall {
                what: "x",
                needed: 256,
                got: 64
            }
        ),
        "{e}"
    );
    let e = k.gemv(GgmlType::F16, &b, &big, &big, 4, 64).unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { what: "w", .. }), "{e}");
    // Not applicable calls.
    let mut l = k.add(&b, &b, &b, 16).unwrap();
    assert!(matches!(l.set_position(3), Err(Error::NotApplicable(_))));
    assert!(matches!(l.set_len(3), Err(Error::NotApplicable(_))));
    // Misaligned host pointer.
    let align = d.info().base_addr_align;
    if align > 1 {
        let mut v = vec![0u64; 1024];
        let p = (v.as_mut_ptr() as *mut u8).wrapping_add(1);
        // SAFETY: the call must fail on alignment before touching the memory; if it did not,
        // the buffer would be dropped at once while `v` is still alive.
        let e = unsafe { d.wrap_host(p, 64) }.unwrap_err();
        assert!(
            matches!(e, Error::Misaligned { required, .. } if required == align),
            "{e}"
        );
    }
    // Build failure carries the compiler's log.
    let e = d
        .build(
            "__kernel void broken(__global float* x) { x[0] = undefined_name; }",
            "",
        )
        .unwrap_err();
    match e {
        Error::Build { log, .. } => assert!(log.contains("undefined_name"), "log: {log}"),
        other => panic!("expected Build, got {other}"),
    }
}

#[test]
fn selection_errors_and_listing() {
    let Some(_) = kernels() else { return };
    let api = Arc::new(ocl::Api::load().unwrap());
    let l = ocl::list(&api).unwrap();
    assert!(!l.is_empty());
    let e = Device::open(
        api.clone(),
        Some(&ocl::Selector::Name("no such platform".into())),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, Error::NoPlatform(_)), "{e}");
    let e = Device::open(api.clone(), None, Some(&ocl::Selector::Index(999))).unwrap_err();
    assert!(matches!(e, Error::NoDevice(_)), "{e}");
    // Selection by name and index finds the first platform/device.
    let dev = Device::open(
        api,
        Some(&ocl::Selector::Index(0)),
        Some(&ocl::Selector::Name(l[0].1[0].clone())),
    )
    .unwrap();
    assert_eq!(dev.info().name, l[0].1[0]);
}

#[test]
fn program_binary_cache_round_trip() {
    let Some(_) = kernels() else { return };
    let mut dev = Device::from_env().unwrap();
    let dir = std::env::temp_dir().join(format!("hetero-ocl-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dev.set_cache_dir(Some(dir.clone())).unwrap();
    let src = "__kernel void k(__global float* x) { x[get_global_id(0)] = 2.0f; }";
    let p1 = dev.build(src, "").unwrap();
    assert!(!p1.from_cache());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "one cached binary"
    );
    let p2 = dev.build(src, "").unwrap();
    assert!(p2.from_cache(), "second build must come from the cache");
    // Other options: another key.
    let p3 = dev.build(src, "-cl-fast-relaxed-math").unwrap();
    assert!(!p3.from_cache());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Needs no OpenCL: an explicit path that does not exist, and a library without OpenCL symbols.
#[test]
fn loader_errors_without_opencl() {
    match ocl::Api::load_from("/nonexistent/libOpenCL-bogus.so") {
        Err(Error::LibraryNotFound { tried }) => {
            assert_eq!(tried.len(), 1);
            assert!(tried[0].0.contains("bogus"));
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    match ocl::Api::load_from("libc.so.6") {
        Err(Error::MissingSymbol(s)) => assert!(s.starts_with("cl")),
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
}

#[test]
fn relayout_and_format_sizes() {
    assert_eq!(ocl::row_bytes(GgmlType::Q4_0, 64).unwrap(), 36);
    assert_eq!(ocl::row_bytes(GgmlType::Q4_1, 64).unwrap(), 40);
    assert_eq!(ocl::row_bytes(GgmlType::Q8_0, 64).unwrap(), 68);
    assert_eq!(ocl::row_bytes(GgmlType::F16, 7).unwrap(), 14);
    assert!(ocl::row_bytes(GgmlType::Q8_0, 33).is_err());
    let src: Vec<u8> = (0..36).map(|i| i as u8).collect();
    let (mut q, mut dd) = (vec![0; 32], vec![0; 4]);
    ocl::relayout_q4_0(&src, 1, 64, &mut q, &mut dd).unwrap();
    assert_eq!(dd, [0, 1, 18, 19]);
    assert_eq!(&q[..16], &src[2..18]);
    assert_eq!(&q[16..], &src[20..36]);
    let mut small = vec![0; 31];
    assert!(matches!(
        ocl::relayout_q4_0(&src, 1, 64, &mut small, &mut dd),
        Err(Error::BufferTooSmall { what: "qs", .. })
    ));
}

/// The T layout on a hand-made block: word w of a row packs weights 8w..8w+7 (nibble e at bits
/// 4e), unit u holds words u, u+nb, u+2nb, u+3nb; scales in block order.
#[test]
fn relayout_q4_t_layout_is_as_documented() {
    // One row, K = 64 (nb = 2): block b's quant byte i = 16b + i (so element i < 16 of block b
    // has nibble (16b + i) & 15 = i and element i + 16 has nibble (16b + i) >> 4 = b).
    let mut src = vec![0u8; 36];
    for b in 0..2 {
        src[18 * b..18 * b + 2].copy_from_slice(&[0x10 + b as u8, 0x20 + b as u8]);
        for i in 0..16 {
            src[18 * b + 2 + i] = (16 * b + i) as u8;
        }
    }
    let nib = |kk: usize| -> u32 {
        let (b, i) = (kk / 32, kk % 32);
        if i < 16 {
            i as u32
        } else {
            b as u32
        }
    };
    let (nq, nd) = ocl::relayout_q4_t_len(GgmlType::Q4_0, 1, 64).unwrap();
    assert_eq!((nq, nd), (32, 4));
    let (mut q, mut dd) = (vec![0u8; nq], vec![0u8; nd]);
    ocl::relayout_q4_t(GgmlType::Q4_0, &src, 1, 64, &mut q, &mut dd).unwrap();
    assert_eq!(dd, [0x10, 0x20, 0x11, 0x21]);
    for w in 0..8 {
        let want = (0..8).fold(0u32, |a, e| a | (nib(8 * w + e) << (4 * e)));
        let (u, s) = (w % 2, w / 2);
        let at = (u * 4 + s) * 4;
        let got = u32::from_le_bytes(q[at..at + 4].try_into().unwrap());
        assert_eq!(got, want, "word {w}");
    }
    assert_eq!(
        ocl::relayout_q4_t_len(GgmlType::Q4_1, 3, 64).unwrap(),
        (96, 24)
    );
    assert!(ocl::relayout_q4_t_len(GgmlType::F16, 1, 64).is_err());
    assert!(ocl::relayout_q4_t_len(GgmlType::Q4_0, 1, 48).is_err());
    let mut small = vec![0u8; 31];
    assert!(matches!(
        ocl::relayout_q4_t(GgmlType::Q4_0, &src, 1, 64, &mut small, &mut dd),
        Err(Error::BufferTooSmall { what: "qs", .. })
    ));
}

/// The read-stream probe reads what it is given and writes nothing unless the XOR matches.
#[test]
fn stream_read_runs_and_checks_sizes() {
    let Some(k) = kernels() else { return };
    let d = k.device();
    let src = d.upload(&vec![0x5au8; 4096 + 48]).unwrap();
    let out = d.upload(&[7u32; 16]).unwrap();
    // XOR of an even number of equal words per work-item is 0: `never` = 1 never matches.
    k.stream_read(&src, &out, 4096 + 48, 1)
        .unwrap()
        .enqueue()
        .unwrap();
    let mut o = [0u32; 16];
    out.read(&mut o).unwrap();
    assert_eq!(o, [7u32; 16]);
    assert!(matches!(
        k.stream_read(&src, &out, 20, 1),
        Err(Error::BadShape(_))
    ));
    assert!(matches!(
        k.stream_read(&src, &out, 1 << 20, 1),
        Err(Error::BufferTooSmall { what: "src", .. })
    ));
}

#[test]
fn profiled_launch_reports_device_time() {
    let Some(k) = kernels() else { return };
    let b = k.device().upload(&[1f32; 64]).unwrap();
    let mut l = k.add(&b, &b, &b, 64).unwrap();
    assert!(matches!(l.enqueue_profiled(), Err(Error::NotApplicable(_))));
    let dev = Device::from_env_with(true).unwrap();
    let k2 = Kernels::new(&dev).unwrap();
    let b2 = dev.upload(&[1f32; 64]).unwrap();
    let mut l2 = k2.add(&b2, &b2, &b2, 64).unwrap();
    let s = l2.enqueue_profiled().unwrap().seconds().unwrap();
    assert!((0.0..10.0).contains(&s), "{s}");
    assert_eq!(read(&b2, 64), vec![2f32; 64]);
}
