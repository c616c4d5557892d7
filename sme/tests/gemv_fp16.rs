//! The FP16-arithmetic packed Q4 GEMV (`QPackedFp16Plan`, `src/arch/x86_64/qgemv_fp16.rs`):
//! every implementation this CPU runs (native AVX512-FP16 where present — `HETERO_REQUIRE=
//! avx512-fp16` makes its absence a failure — and the emulated FP16 arithmetic on any AVX-512BW
//! CPU) against the f64 product of the exactly dequantized weights, within the kernel's stated
//! bound; batch invariance, parallel = serial, typed errors.
#![cfg(target_arch = "x86_64")]

mod common;

use common::Rng;
use hetero_sme::arch::x86_64::Avx512Fp16;
use hetero_sme::*;

fn kernels() -> Vec<Avx512Fp16> {
    let mut v = Vec::new();
    if let Some(t) = hetero_tests::require(
        "avx512-fp16",
        Avx512Fp16::try_new().ok_or("this CPU lacks AVX512-FP16 (native FP16 arithmetic)"),
    ) {
        v.push(t);
    }
    match Avx512Fp16::emulated() {
        Some(t) => v.push(t),
        None => eprintln!("SKIP avx512-fp16-emulated: this CPU lacks AVX-512F/BW or F16C"),
    }
    v
}

fn f16v(x: u16) -> f64 {
    half::f16::from_bits(x).to_f64()
}

struct Q4 {
    w40: Vec<BlockQ4_0>,
    w41: Vec<BlockQ4_1>,
}

fn q4(rng: &mut Rng, blocks: usize) -> Q4 {
    let d = |rng: &mut Rng| half::f16::from_f32(0.002 + 0.05 * rng.f32().abs()).to_bits();
    Q4 {
        w40: (0..blocks)
            .map(|_| BlockQ4_0 {
                d: d(rng),
                qs: core::array::from_fn(|_| rng.next_u64() as u8),
            })
            .collect(),
        w41: (0..blocks)
            .map(|_| BlockQ4_1 {
                d: d(rng),
                m: half::f16::from_f32(0.1 * rng.f32()).to_bits(),
                qs: core::array::from_fn(|_| rng.next_u64() as u8),
            })
            .collect(),
    }
}

fn pack(s: &Q4, ty: QType, k: usize, n: usize) -> Vec<u8> {
    let mut buf = vec![0xA5u8; qpacked_len(ty, k, n).unwrap()];
    match ty {
        QType::Q4_0 => pack_q4_0(&s.w40, k, n, 0..n, &mut buf),
        _ => pack_q4_1(&s.w41, k, n, 0..n, &mut buf),
    }
    .unwrap();
    buf
}

/// Activations with a spread of magnitudes per block (so the per-block power-of-two scaling and
/// FP16's range both matter): mostly in [-1, 1), some blocks scaled by up to 2^±12, some zero,
/// some with an outlier of 300 (whose FP16 partial sums would overflow without the scaling).
fn acts(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    let mut x = rng.vec(m * k);
    for (i, blk) in x.chunks_exact_mut(32).enumerate() {
        match i % 7 {
            0 => blk.iter_mut().for_each(|v| *v *= 4096.0),
            1 => blk.iter_mut().for_each(|v| *v /= 4096.0),
            2 => blk.fill(0.0),
            3 => blk[i % 32] = 300.0,
            _ => {}
        }
    }
    x
}

/// The error bound (see the kernel's module doc): per block `2^-8·|d|·Σ|q·x| + 2^-15·|d|·max|x|`
/// for the FP16 part; Q4_1's `m·Σx` in FP32 (Σx by a reduction tree of 32 values: ≤ 5
/// roundings; one FMA) `8·2^-24·|m|·Σ|x|`; the FP32 accumulation of the block terms as in the
/// FP32 kernel's test, `2(nb+4)·2^-24·Σ|terms|`. Returns the worst |error| / bound.
#[allow(clippy::too_many_arguments)]
fn check(
    name: &str,
    s: &Q4,
    ty: QType,
    x: &[f32],
    m: usize,
    k: usize,
    n: usize,
    y: &[f32],
    ldy: usize,
) -> f64 {
    let u = 2f64.powi(-24);
    let mut worst = 0f64;
    let nb = k / 32;
    for i in 0..m {
        for j in 0..n {
            let (mut want, mut tol, mut mag) = (0f64, 0f64, 0f64);
            for b in 0..nb {
                let xb = &x[i * k + b * 32..i * k + b * 32 + 32];
                let (d, mm, q): (f64, f64, [f64; 32]) = match ty {
                    QType::Q4_0 => {
                        let blk = &s.w40[j * nb + b];
                        let q = core::array::from_fn(|t| {
                            ((blk.qs[t % 16] >> (4 * (t / 16))) & 15) as f64 - 8.0
                        });
                        (f16v(blk.d), 0.0, q)
                    }
                    _ => {
                        let blk = &s.w41[j * nb + b];
                        let q = core::array::from_fn(|t| {
                            ((blk.qs[t % 16] >> (4 * (t / 16))) & 15) as f64
                        });
                        (f16v(blk.d), f16v(blk.m), q)
                    }
                };
                let (mut qx, mut aqx, mut sx, mut asx, mut amax) = (0f64, 0f64, 0f64, 0f64, 0f64);
                for t in 0..32 {
                    let xv = xb[t] as f64;
                    qx += q[t] * xv;
                    aqx += (q[t] * xv).abs();
                    sx += xv;
                    asx += xv.abs();
                    amax = amax.max(xv.abs());
                }
                want += d * qx + mm * sx;
                tol += 2f64.powi(-8) * d.abs() * aqx + 2f64.powi(-15) * d.abs() * amax;
                tol += 8.0 * u * mm.abs() * asx;
                mag += d.abs() * aqx + mm.abs() * asx;
            }
            let tol = tol + 2.0 * (nb as f64 + 4.0) * u * mag * 1.01 + 1e-30;
            let got = y[i * ldy + j] as f64;
            worst = worst.max((got - want).abs() / tol);
            assert!(
                (got - want).abs() <= tol,
                "{name} {ty:?} m{m} k{k} n{n}: y[{i}][{j}] = {got}, want {want} (tol {tol})"
            );
        }
        for j in n..ldy {
            assert!(
                y[i * ldy + j].is_nan(),
                "{name} {ty:?}: padding y[{i}][{j}] written"
            );
        }
    }
    worst
}

#[test]
fn every_fp16_kernel_within_its_bound() {
    let ks = kernels();
    let mut rng = Rng::new(16);
    let ms = [1, 2, 3, 4, 5, 16];
    let kk = [32, 64, 576, 1536, 2080 + 64 * 32]; // the last: more than one 64-block chunk
    let ns = [1, 15, 16, 17, 64, 100, 129];
    let mut case = 0;
    let mut worst = vec![0f64; ks.len()];
    for &k in &kk {
        for &n in &ns {
            let m = ms[case % ms.len()];
            case += 1;
            let s = q4(&mut rng, n * k / 32);
            let x = acts(&mut rng, m, k);
            for ty in [QType::Q4_0, QType::Q4_1] {
                let buf = pack(&s, ty, k, n);
                let w = QPackedRef::new(&buf, ty, k, n).unwrap();
                for (wi, &kern) in ks.iter().enumerate() {
                    let ldy = n + 3;
                    let mut y = vec![f32::NAN; m * ldy];
                    kern.qgemv_packed(&x, m, k, w, &mut y, ldy).unwrap();
                    let r = check(kern.name(), &s, ty, &x, m, k, n, &y, ldy);
                    worst[wi] = worst[wi].max(r);
                }
            }
        }
    }
    for (kern, w) in ks.iter().zip(&worst) {
        eprintln!("{}: worst |error| / bound {w:.3}", kern.name());
    }
}

#[test]
fn rows_do_not_depend_on_m_and_threads_equal_serial() {
    let (m, k, n) = (7, 576, 200);
    let mut rng = Rng::new(17);
    let s = q4(&mut rng, n * k / 32);
    let x = acts(&mut rng, m, k);
    for ty in [QType::Q4_0, QType::Q4_1] {
        let buf = pack(&s, ty, k, n);
        let w = QPackedRef::new(&buf, ty, k, n).unwrap();
        for kern in kernels() {
            let mut all = vec![f32::NAN; m * n];
            kern.qgemv_packed(&x, m, k, w, &mut all, n).unwrap();
            for r in [0, 3, 6] {
                let mut one = vec![f32::NAN; n];
                kern.qgemv_packed(&x[r * k..(r + 1) * k], 1, k, w, &mut one, n)
                    .unwrap();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&one),
                    bits(&all[r * n..(r + 1) * n]),
                    "{} row {r}",
                    kern.name()
                );
            }
            let mut par = vec![f32::NAN; m * n];
            let plan = QPackedFp16Plan::new(kern, &x, m, k, w, &mut par, n).unwrap();
            let mut st = StealState::new(3).unwrap();
            st.prepare(plan.tiles()).unwrap();
            std::thread::scope(|sc| {
                for wk in 0..3 {
                    let (p, st) = (&plan, &st);
                    sc.spawn(move || p.run_worker(st, wk).unwrap());
                }
            });
            assert_eq!(
                par.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                all.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
                "{}",
                kern.name()
            );
        }
    }
}

#[test]
fn bad_input_is_a_typed_error_and_writes_nothing() {
    let (m, k, n) = (2, 64, 20);
    let mut rng = Rng::new(18);
    let s = q4(&mut rng, n * k / 32);
    let x = acts(&mut rng, m, k);
    let buf = pack(&s, QType::Q4_0, k, n);
    let w = QPackedRef::new(&buf, QType::Q4_0, k, n).unwrap();
    let mut q8 = vec![0u8; qpacked_len(QType::Q8_0, k, n).unwrap()];
    let b8: Vec<BlockQ8_0> = (0..n * k / 32).map(|_| BlockQ8_0::default()).collect();
    pack_q8_0(&b8, k, n, 0..n, &mut q8).unwrap();
    let w8 = QPackedRef::new(&q8, QType::Q8_0, k, n).unwrap();
    for kern in kernels() {
        let mut y = vec![f32::NAN; m * n];
        let e = kern.qgemv_packed(&x, m, k, w8, &mut y, n);
        assert!(matches!(e, Err(Error::Unsupported { .. })), "{e:?}");
        let e = kern.qgemv_packed(&x[1..], m, k, w, &mut y, n);
        assert!(
            matches!(e, Err(Error::BufferTooSmall { what: "x", .. })),
            "{e:?}"
        );
        let e = kern.qgemv_packed(&x, m, k, w, &mut y, n - 1);
        assert!(matches!(e, Err(Error::BadStride { .. })), "{e:?}");
        let e = kern.qgemv_packed(&x, 17, k, w, &mut y, n);
        assert!(matches!(e, Err(Error::TooManyRows { .. })), "{e:?}");
        let e = kern.qgemv_packed(&x, m, 32, w, &mut y, n);
        assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
        assert!(
            y.iter().all(|v| v.is_nan()),
            "{}: y written on error",
            kern.name()
        );
    }
}
