//! The fast matmuls (`kernels/mm.cl`, [`hetero_opencl_kernels::fast`]) against the f64
//! reference on random data in every format they read, over edge shapes: GEMV outputs 1, 2,
//! 17 and 513 (a row count no group or step size divides), rows of 9 units (K = 288: an odd
//! team of work-items) and of 24 K-quant units (K = 768); GEMM rows 1, 2, 17, 130 (one past a
//! 128-row tile), 511 and 513 over 200 columns (one past a 128-column tile), both tile heights
//! forced; the fused RMSNorm; f32 and int8 activations. Every output buffer is filled with NaN
//! before each run, so an unwritten output fails. PoCL in CI.
//!
//! Bounds. f32 activations: NMSE 1e-8 and the magnitude-normalized error 1e-10 of
//! tests/opencl.rs (f32 accumulation of K <= 768 products: typical relative error
//! sqrt(K) 2^-24 ~ 2e-6, an NMSE near 1e-12). int8 activations: each activation is rounded to
//! 1/254 of its 32-value unit's largest magnitude, an error of up to 1/508 of it; for the
//! random data here (uniform activations) the rounding noise is step^2 / 12 per value, which
//! puts the NMSE of a dot near 1.5e-5 for zero-mean weights, and up to ~1e-4 for Q4_1/Q5_1,
//! whose weights here sit on an offset (the exact m sum(x) term cancels much of the output, not
//! of its error; measured 1.25e-4); bound 1e-3 (a wrong unit, scale or group moves an output
//! by O(1), an NMSE above 1e-2). Normalized by the magnitudes
//! sum |w x| of each output (the scale the rounding works at; a single output can cancel to
//! near zero): the rounding of K products adds up to about sqrt(K) of one, so the squared error
//! is near 4e-7 of the squared magnitude at K = 288 (one output, so a few times that by chance;
//! measured up to 1.5e-6); bound 1e-5.

use half::f16;
use hetero_opencl_kernels::fast::{FastKernels, FastMatrix, Tuning};
use hetero_opencl_kernels::{self as ocl, reference, Device, GgmlType};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::{Arc, OnceLock};

const NMSE_F32: f64 = 1e-8;
const MAG_F32: f64 = 1e-10;
const NMSE_I8: f64 = 1e-3;
const MAG_I8: f64 = 1e-5;

fn device() -> Option<Arc<Device>> {
    static D: OnceLock<Result<Arc<Device>, String>> = OnceLock::new();
    let r = D.get_or_init(|| Device::from_env().map_err(|e| e.to_string()));
    hetero_tests::require("opencl", r.as_ref().map(Arc::clone))
}

fn rng(tag: u64) -> StdRng {
    StdRng::seed_from_u64(hetero_tests::seed(tag))
}

/// GGUF bytes of `n x k` of `ty`, values about `scale` in size.
fn rand_matrix(r: &mut StdRng, ty: GgmlType, n: usize, k: usize, scale: f32) -> Vec<u8> {
    let mut w = vec![0u8; ocl::matrix_bytes(ty, n, k).unwrap()];
    let h = |v: f32| f16::from_f32(v).to_le_bytes();
    if ty == GgmlType::F16 {
        for c in w.chunks_exact_mut(2) {
            c.copy_from_slice(&h(r.gen_range(-scale..scale)));
        }
        return w;
    }
    let bb = ty.block().unwrap().1;
    for blk in w.chunks_exact_mut(bb) {
        r.fill(blk);
        let f = r.gen_range(0.5..1.0);
        match ty {
            GgmlType::Q6K => blk[bb - 2..].copy_from_slice(&h(scale / (128.0 * 32.0) * f)),
            GgmlType::Q4K | GgmlType::Q5K => {
                let qmax = if ty == GgmlType::Q4K { 7.5 } else { 15.5 };
                blk[0..2].copy_from_slice(&h(scale / (32.0 * qmax) * f));
                blk[2..4].copy_from_slice(&h(scale / 32.0 * f));
            }
            _ => {
                let d = match ty {
                    GgmlType::Q8_0 => scale / 127.0,
                    GgmlType::Q4_1 => scale / 7.5,
                    GgmlType::Q5_1 => scale / 15.5,
                    GgmlType::Q5_0 => scale / 16.0,
                    _ => scale / 8.0,
                } * f;
                blk[0..2].copy_from_slice(&h(d));
                if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
                    blk[2..4].copy_from_slice(&h(-scale * r.gen_range(0.8..1.0)));
                }
            }
        }
    }
    w
}

fn nan_buffer(dev: &Arc<Device>, floats: usize) -> ocl::Buffer {
    dev.upload(&vec![f32::NAN; floats]).unwrap()
}

fn read(b: &ocl::Buffer, floats: usize) -> Vec<f32> {
    let mut v = vec![0f32; floats];
    b.read(&mut v).unwrap();
    v
}

/// `Y = X W^T` (X `m x k`), X normed per row by `g` when given.
fn want(
    ty: GgmlType,
    w: &[u8],
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
    g: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    let xs: Vec<f32> = match g {
        None => x.to_vec(),
        Some(g) => reference::rms_norm(x, g, m, k, 1e-5),
    };
    let y = reference::gemm(ty, w, &xs, m, n, k).unwrap();
    // sum_k |w x| per output: the scale of f32 rounding.
    let rb = ocl::row_bytes(ty, k).unwrap();
    let mut row = vec![0f32; k];
    let mut mag = vec![0f32; m * n];
    for c in 0..n {
        reference::dequantize_row(ty, &w[c * rb..(c + 1) * rb], k, &mut row).unwrap();
        for i in 0..m {
            mag[i * n + c] = row
                .iter()
                .zip(&xs[i * k..(i + 1) * k])
                .map(|(a, b)| (a * b).abs() as f64)
                .sum::<f64>() as f32;
        }
    }
    (y, mag)
}

/// The GGUF matrix with every quant set to 0 (scales and minimums kept): dequantized, each value
/// is its format's offset term (Q4_0 -8d, Q4_1 m, Q5_0 -16d, Q5_1 m, Q4_K/Q5_K -dmin m, Q6_K
/// -32 d sc, Q8_0 0), the part of a weight the int8 kernels multiply with the exact activation
/// sums rather than the quantized activations.
fn zero_quants(ty: GgmlType, w: &[u8]) -> Vec<u8> {
    let (bb, quants) = match ty {
        GgmlType::Q4_0 => (18, 2..18),
        GgmlType::Q4_1 => (20, 4..20),
        GgmlType::Q5_0 => (22, 2..22),
        GgmlType::Q5_1 => (24, 4..24),
        GgmlType::Q8_0 => (34, 2..34),
        GgmlType::Q4K => (144, 16..144),
        GgmlType::Q5K => (176, 16..176),
        GgmlType::Q6K => (210, 0..192),
        _ => unreachable!(),
    };
    let mut z = w.to_vec();
    for b in z.chunks_exact_mut(bb) {
        b[quants.clone()].fill(0);
    }
    z
}

/// What the int8 GEMV computes, in f64 from the kernel's own f32 steps: each 32-value unit of
/// `x g` (T layout: words u + s nb of the row; else values 32u..) quantized to
/// `rint(v * (127 / amax))` with the scale `amax / 127`; the quant part of each weight times the
/// quantized values, its offset part (see `zero_quants`) times the exact ones; times the
/// norm's inv. Only f32 accumulation order (and, where the device's division is not correctly
/// rounded, a rare one-step difference in a rounding) separates the kernel from it.
fn want_i8(ty: GgmlType, w: &[u8], x: &[f32], n: usize, k: usize, g: Option<&[f32]>) -> Vec<f32> {
    let xg: Vec<f32> = match g {
        Some(g) => x.iter().zip(g).map(|(a, b)| a * b).collect(),
        None => x.to_vec(),
    };
    let nb = k / 32;
    let t_layout = matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1);
    let mut xq = vec![0f32; k];
    for u in 0..nb {
        let idx: Vec<usize> = (0..32)
            .map(|v| {
                if t_layout {
                    8 * (u + (v / 8) * nb) + v % 8
                } else {
                    32 * u + v
                }
            })
            .collect();
        let amax = idx.iter().fold(0f32, |a, &i| a.max(xg[i].abs()));
        let (dx, inv) = (amax / 127.0, if amax > 0.0 { 127.0 / amax } else { 0.0 });
        for &i in &idx {
            xq[i] = (xg[i] * inv).round_ties_even() * dx;
        }
    }
    let inv = match g {
        Some(_) => {
            let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / k as f64;
            1.0 / (ms + 1e-5f64).sqrt()
        }
        None => 1.0,
    };
    let z = zero_quants(ty, w);
    let rb = ocl::row_bytes(ty, k).unwrap();
    let (mut row, mut off) = (vec![0f32; k], vec![0f32; k]);
    (0..n)
        .map(|c| {
            reference::dequantize_row(ty, &w[c * rb..(c + 1) * rb], k, &mut row).unwrap();
            reference::dequantize_row(ty, &z[c * rb..(c + 1) * rb], k, &mut off).unwrap();
            let y: f64 = (0..k)
                .map(|i| (row[i] - off[i]) as f64 * xq[i] as f64 + off[i] as f64 * xg[i] as f64)
                .sum();
            (y * inv) as f32
        })
        .collect()
}

/// The int8 GEMV against [`want_i8`]: the magnitude-normalized error of f32 accumulation
/// (1e-10 as for f32 activations) widened to 1e-7 for the rare activation that a division not
/// correctly rounded sends to the other side of a rounding tie (one such step on one of K
/// values moves an output by about 1/(127 K) of its magnitude, 1e-8 squared at K = 288); a wrong
/// unit, scale, group or offset moves it by 1e-2 or more.
const MAG_I8_EXACT: f64 = 1e-7;

fn check(what: &str, got: &[f32], want: &[f32], mag: &[f32], i8: bool) {
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what}: unwritten (NaN) or non-finite output"
    );
    let e = reference::nmse(got, want);
    let bound = if i8 { NMSE_I8 } else { NMSE_F32 };
    if got.len() >= 16 {
        assert!(e <= bound, "{what}: NMSE {e:e} > {bound:e}");
    }
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
        .sum();
    let den: f64 = mag.iter().map(|v| (*v as f64).powi(2)).sum();
    let e = num / den.max(f64::MIN_POSITIVE);
    let bound = if i8 { MAG_I8 } else { MAG_F32 };
    assert!(
        e <= bound,
        "{what}: magnitude-normalized error {e:e} > {bound:e}"
    );
}

const TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::F16,
];

fn width(ty: GgmlType) -> usize {
    if matches!(ty, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K) {
        768
    } else {
        288
    }
}

/// Every format: GEMV over 1, 2, 17 and 513 outputs, f32 and int8 activations, with and
/// without the fused norm (and the shortest and longest step counts), against the reference.
#[test]
fn gemv_matches_reference_in_every_format() {
    let Some(dev) = device() else { return };
    let mut r = rng(41);
    let f32k = FastKernels::new(&dev, &TYPES, Some(false)).unwrap();
    let mut i8k = FastKernels::new(&dev, &TYPES, Some(true)).unwrap();
    assert!(f32k.int8().is_none() && i8k.int8().is_some());
    for ty in TYPES {
        let k = width(ty);
        let x: Vec<f32> = (0..k).map(|_| r.gen_range(-1.0..1.0)).collect();
        let g: Vec<f32> = (0..k).map(|_| r.gen_range(0.5..1.5)).collect();
        let (xb, gb) = (dev.upload(&x).unwrap(), dev.upload(&g).unwrap());
        for n in [1, 2, 17, 513] {
            let wq = rand_matrix(&mut r, ty, n, k, 0.5);
            let w = FastMatrix::upload(&dev, ty, &wq, n, k).unwrap();
            for norm in [false, true] {
                let (want_y, mag) = want(ty, &wq, &x, 1, n, k, norm.then_some(&g[..]));
                for (kernels, i8) in [(&f32k, false), (&i8k, ty != GgmlType::F16)] {
                    let y = nan_buffer(&dev, n);
                    let mut l = kernels
                        .gemv(&w, &xb, &y, norm.then_some((&gb, 1e-5)))
                        .unwrap();
                    l.enqueue().unwrap();
                    let what = format!("{ty} gemv n {n} k {k} norm {norm} i8 {i8}");
                    let got = read(&y, n);
                    check(&what, &got, &want_y, &mag, i8);
                    if i8 {
                        let exact = want_i8(ty, &wq, &x, n, k, norm.then_some(&g[..]));
                        let num: f64 = got
                            .iter()
                            .zip(&exact)
                            .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                            .sum();
                        let den: f64 = mag.iter().map(|v| (*v as f64).powi(2)).sum();
                        let e = num / den.max(f64::MIN_POSITIVE);
                        assert!(
                            e <= MAG_I8_EXACT,
                            "{what}: against the int8 emulation {e:e} > {MAG_I8_EXACT:e}"
                        );
                    }
                }
            }
        }
        // The step counts the default choice may skip at these sizes.
        let n = 37;
        let wq = rand_matrix(&mut r, ty, n, k, 0.5);
        let w = FastMatrix::upload(&dev, ty, &wq, n, k).unwrap();
        let (want_y, mag) = want(ty, &wq, &x, 1, n, k, None);
        for steps in [1, 4] {
            i8k.set_tuning(Tuning {
                gemm_rows: 0,
                gemv_steps: steps,
            });
            let y = nan_buffer(&dev, n);
            i8k.gemv(&w, &xb, &y, None).unwrap().enqueue().unwrap();
            let i8 = ty != GgmlType::F16;
            check(
                &format!("{ty} gemv steps {steps}"),
                &read(&y, n),
                &want_y,
                &mag,
                i8,
            );
        }
        i8k.set_tuning(Tuning::default());
    }
}

/// Every format: GEMM over 1, 2, 17, 130, 511 and 513 rows of 200 outputs, 64- and 128-row
/// tiles, norm fused or not.
#[test]
fn gemm_matches_reference_in_every_format() {
    let Some(dev) = device() else { return };
    let mut r = rng(42);
    let mut fk = FastKernels::new(&dev, &TYPES, Some(false)).unwrap();
    let n = 200;
    for ty in TYPES {
        let k = width(ty);
        let wq = rand_matrix(&mut r, ty, n, k, 0.5);
        let w = FastMatrix::upload(&dev, ty, &wq, n, k).unwrap();
        let g: Vec<f32> = (0..k).map(|_| r.gen_range(0.5..1.5)).collect();
        let gb = dev.upload(&g).unwrap();
        for (m, mt, norm) in [
            (1, 64, false),
            (2, 128, true),
            (17, 64, true),
            (130, 128, false),
            (511, 64, false),
            (513, 128, true),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| r.gen_range(-1.0..1.0)).collect();
            let xb = dev.upload(&x).unwrap();
            fk.set_tuning(Tuning {
                gemm_rows: mt,
                gemv_steps: 0,
            });
            let y = nan_buffer(&dev, m * n);
            let mut l = fk
                .gemm(&w, &xb, m, &y, norm.then_some((&gb, 1e-5)))
                .unwrap();
            l.enqueue().unwrap();
            let (want_y, mag) = want(ty, &wq, &x, m, n, k, norm.then_some(&g[..]));
            let what = format!("{ty} gemm m {m} n {n} k {k} tile {mt} norm {norm}");
            check(&what, &read(&y, m * n), &want_y, &mag, false);
        }
    }
}

/// Bad input is a typed error that enqueues nothing.
#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    let fk = FastKernels::new(&dev, &[GgmlType::Q4_0], Some(false)).unwrap();
    assert!(FastMatrix::upload(&dev, GgmlType::Q4_0, &[0u8; 17], 1, 32).is_err());
    assert!(FastMatrix::upload(&dev, GgmlType::Q2K, &[0u8; 84], 1, 256).is_err());
    let wq = vec![0u8; ocl::matrix_bytes(GgmlType::Q8_0, 4, 64).unwrap()];
    let w8 = FastMatrix::upload(&dev, GgmlType::Q8_0, &wq, 4, 64).unwrap();
    let (x, y) = (dev.alloc(64 * 4).unwrap(), dev.alloc(4 * 4).unwrap());
    // Built without Q8_0.
    assert!(fk.gemv(&w8, &x, &y, None).is_err());
    let wq = vec![0u8; ocl::matrix_bytes(GgmlType::Q4_0, 4, 64).unwrap()];
    let w4 = FastMatrix::upload(&dev, GgmlType::Q4_0, &wq, 4, 64).unwrap();
    let small = dev.alloc(8).unwrap();
    assert!(matches!(
        fk.gemv(&w4, &small, &y, None),
        Err(ocl::Error::BufferTooSmall { .. })
    ));
    assert!(fk.gemm(&w4, &x, 0, &y, None).is_err());
    assert!(matches!(
        fk.gemm(&w4, &x, 2, &y, None),
        Err(ocl::Error::BufferTooSmall { .. })
    ));
}
