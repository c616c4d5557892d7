//! Every GEMM implementation against an f64 reference over edge shapes.
//!
//! Tolerance: inputs are rounded exactly as the kernel rounds them (W to FP16/BF16 by packing, A
//! to FP16 when given as FP16, and to BF16 for AMX); the reference multiplies those rounded values
//! in f64. What remains is FP32 accumulation, whose error for a K-term sum in any order is at
//! most (K-1)·u·Σ|a_k w_k| with u = 2^-24, plus one rounding each for the bias and C additions.
//! We allow 2·(K+4)·u·(Σ|a_k w_k| + |bias| + |C0|), a factor 2 above the worst case.
//!
//! FP16 output (`gemm_f16`): the FP32 result is rounded once more, to FP16 (round to nearest
//! even): at most 2^-11 relative for normal values, 2^-25 absolute in the subnormal range
//! (half an FP16 subnormal ulp). So the FP16-output tolerance is
//! tol32 + 2^-11·(|ref| + tol32) + 2^-25, and C0 (for `+=`) is the FP16 value itself.

mod common;

use common::*;
use hetero_sme::*;

/// Under emulation (aarch64 in QEMU) every instruction costs ~50x: an 18th of the grid there
/// (the aarch64 kernels' own tests cover their shapes; this checks the driver around them), a
/// third natively.
const GRID_STEP: usize = if cfg!(target_arch = "x86_64") { 3 } else { 18 };

const SIZES: [usize; 12] = [1, 2, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129];

struct Case {
    m: usize,
    n: usize,
    k: usize,
    f16_a: bool,
    accumulate: bool,
    bias: bool,
    pad: usize,
    format: PackedFormat,
    /// C in FP16 (`Kernel::gemm_f16`) instead of FP32.
    f16_out: bool,
}

fn run_case(kernel: Kernel, c: &Case, rng: &mut Rng) {
    let (m, n, k) = (c.m, c.n, c.k);
    let lda = k + c.pad;
    let ldc = n + c.pad;
    let a32 = rng.vec(m * lda);
    let wsrc = rng.vec(k * n);
    let bias = rng.vec(n);
    let mut c0 = rng.vec(m * ldc);
    if c.f16_out {
        // An FP16 C holds FP16 values: the reference adds exactly what the kernel reads.
        c0.iter_mut().for_each(|x| *x = round_f16(*x));
    }
    let mut packed = vec![0u16; packed_len(k, n)];
    let src = WeightSource {
        data: &wsrc,
        k,
        n,
        ld: n,
        layout: Layout::RowMajor,
    };
    pack_f32(&src, 0..n, c.format, &mut packed).unwrap();
    let w = PackedRef::new(&packed, k, n, c.format).unwrap();
    let a16: Vec<u16> = a32.iter().map(|&x| f16_bits(x)).collect();
    let a_eff: Vec<f32> = if c.f16_a {
        a32.iter().map(|&x| round_f16(x)).collect()
    } else {
        a32.clone()
    };
    let ra = a_rounding(kernel);
    let rw = w_rounding(c.format);
    // Output: poisoned with NaN (or random C0 when accumulating); padding columns NaN.
    let mut out = vec![f32::NAN; m * ldc];
    if c.accumulate {
        for i in 0..m {
            out[i * ldc..i * ldc + n].copy_from_slice(&c0[i * ldc..i * ldc + n]);
        }
    }
    let g = Gemm {
        a: if c.f16_a {
            Lhs::F16(&a16)
        } else {
            Lhs::F32(&a32)
        },
        m,
        lda,
        w,
        bias: c.bias.then_some(&bias[..]),
        accumulate: c.accumulate,
    };
    if c.f16_out {
        // Poison: FP16 NaN (or C0 in FP16 when accumulating); read back widened to FP32.
        let mut out16: Vec<u16> = out
            .iter()
            .map(|&x| if x.is_nan() { 0x7E00 } else { f16_bits(x) })
            .collect();
        kernel.gemm_f16(&g, &mut out16, ldc).unwrap();
        for (o, &h) in out.iter_mut().zip(&out16) {
            *o = half::f16::from_bits(h).to_f32();
        }
    } else {
        kernel.gemm(&g, &mut out, ldc).unwrap();
    }
    let u = 2f64.powi(-24);
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            let mut mag = 0f64;
            for kk in 0..k {
                let p = ra(a_eff[i * lda + kk]) as f64 * rw(wsrc[kk * n + j]) as f64;
                s += p;
                mag += p.abs();
            }
            if c.bias {
                s += bias[j] as f64;
                mag += (bias[j] as f64).abs();
            }
            if c.accumulate {
                s += c0[i * ldc + j] as f64;
                mag += (c0[i * ldc + j] as f64).abs();
            }
            let mut tol = 2.0 * (k as f64 + 4.0) * u * mag + 1e-30;
            if c.f16_out {
                tol += 2f64.powi(-11) * (s.abs() + tol) + 2f64.powi(-25);
            }
            let got = out[i * ldc + j] as f64;
            assert!(
                (got - s).abs() <= tol,
                "{} m{m} n{n} k{k} f16a={} f16out={} acc={} bias={} fmt={:?}: C[{i}][{j}] = {got}, want {s} (tol {tol})",
                kernel.name(),
                c.f16_a,
                c.f16_out,
                c.accumulate,
                c.bias,
                c.format
            );
        }
        for j in n..ldc {
            assert!(out[i * ldc + j].is_nan(), "padding C[{i}][{j}] written");
        }
    }
}

/// The grid kernels, with AMX (where present) once per tile blocking: each is its own kernel.
fn gemm_kernels() -> Vec<Kernel> {
    let mut v = Vec::new();
    for k in grid_kernels() {
        #[cfg(target_arch = "x86_64")]
        if let Kernel::Amx(t) = k {
            use hetero_sme::arch::x86_64::AmxBlocking;
            for b in [
                AmxBlocking::Rows16,
                AmxBlocking::Rows32,
                AmxBlocking::Rows64,
            ] {
                v.push(Kernel::Amx(t.with_blocking(b)));
            }
            continue;
        }
        v.push(k);
    }
    v
}

fn formats(kernel: Kernel) -> Vec<PackedFormat> {
    [PackedFormat::F16, PackedFormat::Bf16]
        .into_iter()
        .filter(|&f| kernel.supports(f))
        .collect()
}

#[test]
fn edge_shapes_every_kernel() {
    for kernel in gemm_kernels() {
        let mut rng = Rng::new(1);
        let mut count = 0;
        for (i, &m) in SIZES.iter().enumerate() {
            for (j, &n) in SIZES.iter().enumerate() {
                for (l, &k) in SIZES.iter().enumerate() {
                    // A third (or ninth) of the 12^3 grid, so every value of each dimension meets many
                    // values of the others.
                    if (i + 2 * j + l) % GRID_STEP != 0 {
                        continue;
                    }
                    for format in formats(kernel) {
                        let sel = rng.next_u64();
                        let case = Case {
                            m,
                            n,
                            k,
                            f16_a: sel & 1 != 0,
                            accumulate: sel & 2 != 0,
                            bias: sel & 4 != 0,
                            pad: if sel & 8 != 0 { 3 } else { 0 },
                            format,
                            f16_out: sel & 16 != 0,
                        };
                        run_case(kernel, &case, &mut rng);
                        count += 1;
                    }
                }
            }
        }
        eprintln!(
            "{} (tile rows {}): {count} edge cases",
            kernel.name(),
            kernel.tile_rows()
        );
    }
}

#[test]
fn large_shapes_every_kernel() {
    let shapes = [
        (16, 1536, 576),
        (64, 576, 1536),
        (129, 129, 1536),
        (1, 1536, 1536),
        (576, 65, 576),
        (17, 576, 129),
        // Rows past engine-min's former 4096 cap (llama-1b's FFN down is 8192; 8B's 14336):
        // decode, an odd K, and a prefill tile of 20 rows.
        (1, 130, 8192),
        (3, 65, 8193),
        (20, 64, 14336),
    ];
    let emulated = [(17, 576, 129), (2, 65, 1536), (1, 64, 8193)];
    let shapes = if cfg!(target_arch = "x86_64") {
        &shapes[..]
    } else {
        &emulated[..]
    };
    for kernel in gemm_kernels() {
        let mut rng = Rng::new(2);
        for (idx, &(m, n, k)) in shapes.iter().enumerate() {
            for format in formats(kernel) {
                let case = Case {
                    m,
                    n,
                    k,
                    f16_a: idx % 2 == 0,
                    accumulate: idx % 3 == 1,
                    bias: idx % 2 == 1,
                    pad: 1,
                    format,
                    f16_out: false,
                };
                run_case(kernel, &case, &mut rng);
                // The same shape with an FP16 C (other accumulate/bias choice).
                let case = Case {
                    f16_out: true,
                    accumulate: !case.accumulate,
                    bias: !case.bias,
                    ..case
                };
                run_case(kernel, &case, &mut rng);
            }
        }
    }
}

#[test]
fn k_zero_gives_bias() {
    for kernel in kernels() {
        let bias = [1.5f32, -2.0, 3.0];
        let mut out = [f32::NAN; 6];
        let g = Gemm {
            a: Lhs::F32(&[]),
            m: 2,
            lda: 0,
            w: PackedRef::new(&[], 0, 3, PackedFormat::Bf16).unwrap(),
            bias: Some(&bias),
            accumulate: false,
        };
        if !kernel.supports(PackedFormat::Bf16) {
            continue;
        }
        kernel.gemm(&g, &mut out, 3).unwrap();
        assert_eq!(out, [1.5, -2.0, 3.0, 1.5, -2.0, 3.0], "{}", kernel.name());
    }
}

#[test]
fn dispatch_is_cached_and_supported() {
    let a = Kernel::best(PackedFormat::F16);
    assert_eq!(a, Kernel::best(PackedFormat::F16));
    assert!(a.supports(PackedFormat::F16));
    assert!(Kernel::best(PackedFormat::Bf16).supports(PackedFormat::Bf16));
    eprintln!(
        "dispatch: f16 -> {}, bf16 -> {}, gemv -> {}",
        a.name(),
        Kernel::best(PackedFormat::Bf16).name(),
        Kernel::best_gemv().name()
    );
}

#[test]
fn f16_output_k_zero_and_overflow() {
    for kernel in kernels() {
        let format = formats(kernel)[0];
        // K = 0: C = bias, rounded to FP16 (1/3 is not representable: RNE of the FP32 value).
        let bias = [1.5f32, -2.0, 1.0 / 3.0];
        let mut out = [0x7E00u16; 6];
        let g = Gemm {
            a: Lhs::F32(&[]),
            m: 2,
            lda: 0,
            w: PackedRef::new(&[], 0, 3, format).unwrap(),
            bias: Some(&bias),
            accumulate: false,
        };
        kernel.gemm_f16(&g, &mut out, 3).unwrap();
        let want: Vec<u16> = bias.iter().chain(&bias).map(|&x| f16_bits(x)).collect();
        assert_eq!(&out[..], &want[..], "{}", kernel.name());
        // += with a bias that pushes past FP16's range: +inf, as IEEE rounding says.
        let big = [60000f32, 0.0, -60000.0];
        let g = Gemm {
            bias: Some(&big),
            accumulate: true,
            ..g
        };
        let mut out = [f16_bits(10000.0), f16_bits(1.0), f16_bits(-10000.0)];
        kernel.gemm_f16(&Gemm { m: 1, ..g }, &mut out, 3).unwrap();
        assert_eq!(out, [0x7C00, f16_bits(1.0), 0xFC00], "{}", kernel.name());
    }
}
