//! The decompression GEMM (`src/dq.rs`, `src/arch/x86_64/dq.rs`): every implementation this
//! CPU has (`DqKernel::available()`: a `Tile` of every GEMM kernel, AVX512-BF16, AMX-BF16)
//! against the f64 product of the exactly dequantized weights, for every int8 weight format,
//! over edge shapes (M = 1, 2, 17, 33, 70; N around 16 and 64; K of one and several K blocks
//! with a partial last one), outputs poisoned; tile splits and threads against the serial
//! run (bit-identical); bad input.
//!
//! Tolerance, per output `y = Σ x_k w_k` (`w_k` = `Int8Weight::value_at`, ggml's value): the
//! kernel rounds each `w` once to the panel format (relative `e_w` = 2^-11 for FP16, 2^-8 for
//! BF16; FP16 also has an absolute 2^-25 in its subnormal range) and, for the BF16 kernels (and
//! AMX/SME tiles), each `x` to BF16/FP16 (`e_a`); products are exact in FP32; the FP32
//! accumulation over K adds at most (K+1)·2^-24·Σ|x w| in any order. So
//! `|got − want| ≤ (e_a + e_w + e_a·e_w + 2(K+2)·2^-24)·Σ|x w| + 2^-25·Σ|x|`, a factor ≥ 1
//! over the worst case (each rounding at its bound, all with the same sign).

mod common;

use common::{rand_gguf, Rng};
use hetero_sme::*;

/// aarch64 runs under QEMU here: smaller grids.
const EMULATED: bool = !cfg!(target_arch = "x86_64");

fn weight(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Int8Weight {
    let bytes = rand_gguf(rng, ty, n, k);
    // GGUF bytes must be 2-byte aligned for `pack_gguf`: copy them to an even address.
    let mut store = vec![0u8; bytes.len() + 1];
    let off = store.as_ptr().align_offset(2).min(1);
    store[off..off + bytes.len()].copy_from_slice(&bytes);
    Int8Weight::pack_gguf(ty, &store[off..off + bytes.len()], n, k).unwrap()
}

fn e_of(f: Option<PackedFormat>) -> f64 {
    match f {
        None => 0.0,
        Some(PackedFormat::F16) => 2f64.powi(-11),
        Some(PackedFormat::Bf16) => 2f64.powi(-8),
    }
}

/// The f64 reference of `x · Wᵀ` per output: (value, Σ|x w|, Σ|x|).
fn reference(w: &Int8Weight, x: &[f32], m: usize) -> Vec<(f64, f64, f64)> {
    let (n, k) = (w.n(), w.k());
    let wd: Vec<f64> = (0..n * k)
        .map(|e| w.value_at(e / k, e % k).unwrap() as f64)
        .collect();
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        let ax: f64 = xr.iter().map(|v| (*v as f64).abs()).sum();
        for j in 0..n {
            let (mut s, mut mag) = (0f64, 0f64);
            for (xv, wv) in xr.iter().zip(&wd[j * k..(j + 1) * k]) {
                let p = *xv as f64 * wv;
                s += p;
                mag += p.abs();
            }
            out.push((s, mag, ax));
        }
    }
    out
}

/// Runs `kernel` on `w` × `x` (`m` rows) on `workers` threads, with `slots` accumulator slots
/// in the activations (`DqActs::with_workers`; 0: `with_capacity`, none), and checks every
/// output against the f64 reference (`want`, from [`reference`]).
fn check(
    kernel: DqKernel,
    w: &Int8Weight,
    x: &[f32],
    m: usize,
    workers: usize,
    slots: usize,
    want: &[(f64, f64, f64)],
) -> Vec<f32> {
    let (n, k) = (w.n(), w.k());
    let ldy = n + 3;
    let mut acts = if slots == 0 {
        DqActs::with_capacity(m, k)
    } else {
        DqActs::with_workers(m, k, slots)
    };
    assert_eq!(acts.workers(), slots);
    acts.convert(kernel, x, m, k).unwrap();
    let mut y = vec![f32::NAN; m * ldy];
    let plan = DqPlan::new(kernel, w, x, &acts, OutMut::new(&mut y), ldy)
        .unwrap()
        .with_workers(workers);
    if workers <= 1 {
        let mut plan = plan;
        plan.run_all();
    } else {
        let mut st = StealState::new(workers).unwrap();
        st.prepare(plan.tiles()).unwrap();
        std::thread::scope(|s| {
            for wk in 0..workers {
                let (p, st) = (&plan, &st);
                s.spawn(move || p.run_worker(st, wk).unwrap());
            }
        });
    }
    let (ea, ew) = (e_of(kernel.a_rounding()), e_of(Some(kernel.panel_format())));
    let u = 2f64.powi(-24);
    for i in 0..m {
        for j in 0..n {
            let (s, mag, ax) = want[i * n + j];
            let tol = (ea + ew + ea * ew + 2.0 * (k as f64 + 2.0) * u) * mag + 2f64.powi(-25) * ax;
            let got = y[i * ldy + j] as f64;
            assert!(
                (got - s).abs() <= tol,
                "{} {:?} m{m} n{n} k{k}: y[{i}][{j}] = {got}, want {s} (tol {tol})",
                kernel.name(),
                w.format()
            );
        }
        for j in n..ldy {
            assert!(y[i * ldy + j].is_nan(), "padding y[{i}][{j}] written");
        }
    }
    y
}

fn ks(ty: GgmlType) -> [usize; 3] {
    // One partial K block, one whole plus a partial one, three.
    if ty.is_k_quant() {
        [256, DQ_KB + 256, 3 * DQ_KB]
    } else {
        [32, DQ_KB + 32, 2 * DQ_KB + 96]
    }
}

#[test]
fn every_kernel_every_format_edge_shapes() {
    // Under emulation only the SME tiles (the portable and NEON ones are the same Rust code
    // proven natively / by their own aarch64 tests), as gemm.rs's grid does.
    let kernels: Vec<DqKernel> = DqKernel::available()
        .into_iter()
        .filter(|k| !EMULATED || k.name().starts_with("tile-sme"))
        .collect();
    // HETERO_REQUIRE=amx-bf16 / avx512-bf16 (the H200 host by hand; avx512-bf16 on the Zen 4
    // dev VM) turns the absence of that kernel into a failure instead of a skip line.
    for name in ["avx512-bf16", "amx-bf16"] {
        let found = kernels.iter().any(|k| k.name() == name);
        hetero_tests::require(
            name,
            if found {
                Ok(())
            } else {
                Err("not on this CPU / OS")
            },
        );
    }
    eprintln!(
        "dq kernels: {:?}",
        kernels.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    // Under emulation (aarch64 in QEMU, ~50x slower) a smaller grid: M 1, 33; N 17, 65;
    // one K block and one past it.
    let (ms, ns): (&[usize], &[usize]) = if EMULATED {
        (&[1, 33], &[17, 65])
    } else {
        (&[1, 2, 17, 33, 70], &[1, 17, 64, 65, 130, 300])
    };
    let mut rng = Rng::new(7);
    // Under emulation two formats (a 32-value block and the 16-value sub-blocks): the
    // dequantizer there is the portable one, proven for every format natively.
    let formats: &[GgmlType] = if EMULATED {
        &[GgmlType::Q4_0, GgmlType::Q6K]
    } else {
        &INT8_TYPES
    };
    for &ty in formats {
        for (ki, &k) in ks(ty).iter().enumerate().take(if EMULATED { 2 } else { 3 }) {
            for (ni, &n) in ns.iter().enumerate() {
                let w = weight(&mut rng, ty, n, k);
                for (mi, &m) in ms.iter().enumerate() {
                    // A third of the (M, N, K) grid, every value of each meeting many of the
                    // others.
                    if !EMULATED && (mi + 2 * ni + ki) % 3 != 0 {
                        continue;
                    }
                    let x: Vec<f32> = rng.vec(m * k);
                    let want = reference(&w, &x, m);
                    for &kern in &kernels {
                        // With an accumulator slot (the AMX kernel keeps C there between K
                        // blocks) and without (C in y): both against the reference.
                        check(kern, &w, &x, m, 1, 1, &want);
                        check(kern, &w, &x, m, 1, 0, &want);
                    }
                }
            }
        }
    }
}

#[test]
fn tile_splits_and_threads_are_bit_identical_to_serial() {
    let mut rng = Rng::new(11);
    for ty in [GgmlType::Q4_0, GgmlType::Q6K] {
        let (n, k, m) = (130, DQ_KB + 256, if EMULATED { 40 } else { 100 });
        let w = weight(&mut rng, ty, n, k);
        let x = rng.vec(m * k);
        let want = reference(&w, &x, m);
        for kern in DqKernel::available() {
            let serial = check(kern, &w, &x, m, 1, 0, &want);
            // with_workers(3) cuts M into chunks (3 panels < 6 tiles wanted): a slot per
            // thread, one slot for three threads (tiles that find none accumulate in y); the
            // serial run with a slot; then slots a row step too small for the tile (unused).
            for (threads, slots) in [(3, 3), (3, 1), (1, 1)] {
                let split = check(kern, &w, &x, m, threads, slots, &want);
                assert!(
                    serial
                        .iter()
                        .zip(&split)
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
                    "{} {ty:?}: {threads} threads, {slots} slots differ from the serial run",
                    kern.name()
                );
            }
            // In a set whose other plans have many column groups, M is not cut; alone, it is.
            let mut acts = DqActs::with_capacity(m, k);
            acts.convert(kern, &x, m, k).unwrap();
            let mut y = vec![0f32; m * w.n()];
            let plan = DqPlan::new(kern, &w, &x, &acts, OutMut::new(&mut y), w.n()).unwrap();
            let groups = plan.col_groups();
            let in_set = plan.with_workers_in_set(3, groups + 100);
            assert_eq!(
                in_set.tiles(),
                groups,
                "{}: cut inside a wide set",
                kern.name()
            );
            let alone = in_set.with_workers(3);
            assert!(alone.tiles() > groups, "{}: not cut alone", kern.name());
            let mut acts = DqActs::with_workers(m - 32, 2 * k, 1);
            acts.convert(kern, &x, m, k).unwrap();
            let mut y = vec![f32::NAN; m * w.n()];
            DqPlan::new(kern, &w, &x, &acts, OutMut::new(&mut y), w.n())
                .unwrap()
                .run_all();
            assert!(
                serial
                    .chunks(w.n() + 3)
                    .zip(y.chunks(w.n()))
                    .all(|(a, b)| a[..w.n()]
                        .iter()
                        .zip(b)
                        .all(|(p, q)| p.to_bits() == q.to_bits())),
                "{} {ty:?}: slots too small for the tile differ from the serial run",
                kern.name()
            );
        }
    }
}

#[test]
fn parallel_conversion_equals_serial() {
    let pool = ThreadPool::new(3).unwrap();
    let mut rng = Rng::new(5);
    let (m, k) = (70, 544);
    let x = rng.vec(m * k);
    let w = weight(&mut rng, GgmlType::Q4_1, 64, k);
    for kern in DqKernel::available() {
        let mut a = DqActs::with_capacity(m, k);
        let mut b = DqActs::with_capacity(m, k);
        a.convert(kern, &x, m, k).unwrap();
        b.convert_on(kern, &x, m, k, &pool).unwrap();
        let run = |acts: &DqActs| {
            let mut y = vec![f32::NAN; m * 64];
            DqPlan::new(kern, &w, &x, acts, OutMut::new(&mut y), 64)
                .unwrap()
                .run_all();
            y
        };
        let (ya, yb) = (run(&a), run(&b));
        assert!(
            ya.iter().zip(&yb).all(|(p, q)| p.to_bits() == q.to_bits()),
            "{}",
            kern.name()
        );
    }
}

#[test]
fn best_is_available_and_cached() {
    let b = DqKernel::best();
    assert_eq!(b, DqKernel::best());
    assert!(DqKernel::available().contains(&b));
    eprintln!("dq best: {}", b.name());
}

#[test]
fn bad_input_is_a_typed_error_and_writes_nothing() {
    let mut rng = Rng::new(3);
    let (m, n, k) = (5, 20, 64);
    let w = weight(&mut rng, GgmlType::Q4_0, n, k);
    let x = rng.vec(m * k);
    for kern in DqKernel::available() {
        let mut acts = DqActs::with_capacity(m, k);
        // x too short.
        assert!(matches!(
            acts.convert(kern, &x[..m * k - 1], m, k),
            Err(Error::BufferTooSmall { .. })
        ));
        if kern.bf16_acts() {
            // Capacity too small.
            let mut small = DqActs::with_capacity(1, 32);
            assert!(matches!(
                small.convert(kern, &x, m, k),
                Err(Error::BufferTooSmall { .. })
            ));
        }
        acts.convert(kern, &x, m, k).unwrap();
        let mut y = vec![f32::NAN; m * n];
        // y too short, ldy too small.
        assert!(matches!(
            DqPlan::new(kern, &w, &x, &acts, OutMut::new(&mut y[..m * n - 1]), n),
            Err(Error::BufferTooSmall { .. })
        ));
        assert!(matches!(
            DqPlan::new(kern, &w, &x, &acts, OutMut::new(&mut y), n - 1),
            Err(Error::BadStride { .. })
        ));
        // x shorter than the activations' shape.
        assert!(matches!(
            DqPlan::new(kern, &w, &x[..k], &acts, OutMut::new(&mut y), n),
            Err(Error::BufferTooSmall { .. })
        ));
        // Activations of another K.
        let x2 = rng.vec(m * 2 * k);
        let mut other = DqActs::with_capacity(m, 2 * k);
        other.convert(kern, &x2, m, 2 * k).unwrap();
        assert!(matches!(
            DqPlan::new(kern, &w, &x2, &other, OutMut::new(&mut y), n),
            Err(Error::ShapeMismatch { .. })
        ));
        // Activations converted for a kernel with the other A format.
        if let Some(&o) = DqKernel::available()
            .iter()
            .find(|o| o.bf16_acts() != kern.bf16_acts())
        {
            let mut a2 = DqActs::with_capacity(m, k);
            a2.convert(o, &x, m, k).unwrap();
            assert!(matches!(
                DqPlan::new(kern, &w, &x, &a2, OutMut::new(&mut y), n),
                Err(Error::ShapeMismatch { .. })
            ));
        }
        assert!(
            y.iter().all(|v| v.is_nan()),
            "{}: written on error",
            kern.name()
        );
    }
}
