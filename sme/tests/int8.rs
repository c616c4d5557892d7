//! Int8 GEMM (`src/int8.rs`, `src/arch/x86_64/vnni.rs`, `src/arch/x86_64/amx_int8.rs`): every
//! implementation (portable, VNNI, AMX-INT8 where the CPU has it) against the portable oracle
//! (bit-identical), the oracle against f64 references, batch invariance, the parallel driver,
//! packing round-trips and bad input. The AMX tile program itself is also proven without AMX,
//! through a software model of the tile instructions (unit tests in `src/amx_int8.rs`).

mod common;

use common::Rng;
use hetero_sme::*;

#[global_allocator]
static A: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;

/// Weights of one format in GGUF blocks, plus their exact f64 values (`N×K`, row-major).
struct W {
    q40: Vec<BlockQ4_0>,
    q41: Vec<BlockQ4_1>,
    q80: Vec<BlockQ8_0>,
}

fn f16b(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

fn rand_weights(rng: &mut Rng, n: usize, k: usize) -> W {
    let blocks = n * k / 32;
    let byte = |rng: &mut Rng| rng.next_u64() as u8;
    let mut q40 = Vec::with_capacity(blocks);
    let mut q41 = Vec::with_capacity(blocks);
    let mut q80 = Vec::with_capacity(blocks);
    for _ in 0..blocks {
        let d = f16b(0.002 + 0.05 * rng.f32().abs());
        let m = f16b(0.1 * rng.f32());
        let qs: [u8; 16] = core::array::from_fn(|_| byte(rng));
        q40.push(BlockQ4_0 { d, qs });
        q41.push(BlockQ4_1 { d, m, qs });
        let q8: [i8; 32] = core::array::from_fn(|_| byte(rng) as i8);
        q80.push(BlockQ8_0 { d, qs: q8 });
    }
    W { q40, q41, q80 }
}

fn pack(w: &W, f: Int8Format, n: usize, k: usize) -> Int8Weight {
    match f {
        Int8Format::Q4_0 => Int8Weight::pack_q4_0(&w.q40, n, k),
        Int8Format::Q4_1 => Int8Weight::pack_q4_1(&w.q41, n, k),
        Int8Format::Q8_0 => Int8Weight::pack_q8_0(&w.q80, n, k),
    }
    .unwrap()
}

/// Exact dequantized weight `W[r][i]` in f64 (from the GGUF blocks, not the packed form).
fn dequant(w: &W, f: Int8Format, n: usize, k: usize) -> Vec<f64> {
    let nb = k / 32;
    let mut out = vec![0f64; n * k];
    for r in 0..n {
        for b in 0..nb {
            for j in 0..32 {
                let v = match f {
                    Int8Format::Q4_0 => {
                        let blk = &w.q40[r * nb + b];
                        let q = (blk.qs[j % 16] >> (4 * (j / 16))) & 15;
                        (q as f64 - 8.0) * half::f16::from_bits(blk.d).to_f64()
                    }
                    Int8Format::Q4_1 => {
                        let blk = &w.q41[r * nb + b];
                        let q = (blk.qs[j % 16] >> (4 * (j / 16))) & 15;
                        q as f64 * half::f16::from_bits(blk.d).to_f64()
                            + half::f16::from_bits(blk.m).to_f64()
                    }
                    Int8Format::Q8_0 => {
                        let blk = &w.q80[r * nb + b];
                        blk.qs[j] as f64 * half::f16::from_bits(blk.d).to_f64()
                    }
                };
                out[r * k + b * 32 + j] = v;
            }
        }
    }
    out
}

/// Activations in [-1, 1) with some all-zero blocks and some outliers.
fn rand_acts(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    let mut x = rng.vec(m * k);
    for blk in x.chunks_exact_mut(32) {
        match rng.below(16) {
            0 => blk.fill(0.0),
            1 => blk[rng.below(32)] = 40.0 * rng.f32(),
            _ => {}
        }
    }
    x
}

/// Every int8 implementation this CPU runs; AMX three times: as dispatched (row chunks of ≤ 8
/// rows on VNNI) and with AMX for every row chunk at tile-pipeline lookahead 3 and 1. Missing
/// ones print one SKIP line each; with `HETERO_REQUIRE=amx-int8` (the hand-run AMX machine) a
/// missing AMX-INT8 fails instead.
fn kernels() -> Vec<Int8Kernel> {
    #[allow(unused_mut)] // only x86-64 adds the AMX variants
    let mut v = Int8Kernel::available();
    if !v.iter().any(|k| k.name() == "avx512-vnni") {
        eprintln!("SKIP int8 kernel avx512-vnni: this CPU lacks AVX-512 VNNI");
    }
    #[cfg(target_arch = "x86_64")]
    {
        let amx = hetero_tests::require(
            "amx-int8",
            hetero_sme::arch::x86_64::AmxInt8::try_new()
                .ok_or("no AMX-TILE/AMX-INT8 + AVX-512 VNNI, or Linux refused the tile state"),
        );
        if let Some(t) = amx {
            // AMX for every row chunk, at the deepest and the shallowest tile pipeline.
            v.push(Int8Kernel::Amx(t.with_vnni_rows(0)));
            v.push(Int8Kernel::Amx(t.with_vnni_rows(0).with_lookahead(1)));
        }
    }
    v
}

/// Kernel name plus its small-M routing, for messages.
fn label(k: &Int8Kernel) -> String {
    match k {
        #[cfg(target_arch = "x86_64")]
        Int8Kernel::Amx(t) => format!(
            "{} (vnni rows <= {}, lookahead {})",
            k.name(),
            t.vnni_rows(),
            t.lookahead()
        ),
        _ => k.name().to_string(),
    }
}

const FORMATS: [Int8Format; 3] = [Int8Format::Q4_0, Int8Format::Q4_1, Int8Format::Q8_0];
const MS: [usize; 10] = [0, 1, 2, 3, 5, 16, 17, 64, 128, 129];
const NS: [usize; 7] = [1, 15, 16, 17, 47, 64, 100];
const KS: [usize; 3] = [64, 576, 1536];

/// Runs `kernel` into a NaN-poisoned `y` with padded stride; checks the padding is untouched.
fn run(kernel: Int8Kernel, w: &Int8Weight, a: &QActs, m: usize, n: usize) -> Vec<f32> {
    let ldy = n + 3;
    let mut y = vec![f32::NAN; m * ldy];
    kernel.gemm(w, a, &mut y, ldy).unwrap();
    for r in 0..m {
        for c in n..ldy {
            assert!(y[r * ldy + c].is_nan(), "padding ({r},{c}) written");
        }
    }
    (0..m)
        .flat_map(|r| y[r * ldy..r * ldy + n].to_vec())
        .collect()
}

fn quantize_with(kernel: Int8Kernel, x: &[f32], m: usize, k: usize) -> QActs {
    let mut a = QActs::with_capacity(m, k);
    kernel.quantize_acts(x, m, k, &mut a).unwrap();
    a
}

#[test]
fn every_kernel_matches_the_oracle_and_the_references() {
    let ks = kernels();
    let mut rng = Rng::new(81);
    let mut case = 0;
    let mut worst_q = 0f64; // worst |err| / bound against the quantized-activation reference
    let mut worst_x = 0f64; // same against the f32 activations
    for &k in &KS {
        for &m in &MS {
            let n = NS[case % NS.len()];
            case += 1;
            let wb = rand_weights(&mut rng, n, k);
            let x = rand_acts(&mut rng, m, k);
            // Every quantizer writes the same bytes and records as the portable one.
            let a = quantize_with(Int8Kernel::Portable, &x, m, k);
            for &kq in &ks {
                let b = quantize_with(kq, &x, m, k);
                for r in 0..m {
                    assert_eq!(a.q_row(r), b.q_row(r), "{} q row {r}", label(&kq));
                    for (p, q) in a.meta_row(r).iter().zip(b.meta_row(r)) {
                        assert_eq!(
                            (p.d.to_bits(), p.s.to_bits(), p.n8, p.n128),
                            (q.d.to_bits(), q.s.to_bits(), q.n8, q.n128),
                            "{} meta row {r}",
                            label(&kq)
                        );
                    }
                }
            }
            let nb = k / 32;
            for &f in &FORMATS {
                let w = pack(&wb, f, n, k);
                let oracle = run(Int8Kernel::Portable, &w, &a, m, n);
                for &kern in &ks {
                    let y = run(kern, &w, &a, m, n);
                    for (i, (p, q)) in oracle.iter().zip(&y).enumerate() {
                        assert_eq!(
                            p.to_bits(),
                            q.to_bits(),
                            "{} {f:?} m{m} n{n} k{k} at {i}: {p} vs {q}",
                            label(&kern)
                        );
                    }
                }
                let wd = dequant(&wb, f, n, k);
                for r in 0..m {
                    let (qx, meta) = (a.q_row(r), a.meta_row(r));
                    for c in 0..n {
                        let got = oracle[r * n + c] as f64;
                        assert!(got.is_finite());
                        let (mut refq, mut refx, mut mag, mut xbound) = (0f64, 0f64, 0f64, 0f64);
                        for (b, mb) in meta.iter().enumerate() {
                            let dx = mb.d as f64;
                            let (mut blk, mut absw) = (0f64, 0f64);
                            for j in 0..32 {
                                let i = b * 32 + j;
                                let wv = wd[c * k + i];
                                blk += wv * qx[i] as f64 * dx;
                                refx += wv * x[r * k + i] as f64;
                                absw += wv.abs();
                            }
                            refq += blk;
                            // Magnitude of the block's f32 terms (the integer term and Q4_1's
                            // offset term are each at most this).
                            mag += absw * 127.0 * dx + blk.abs();
                            xbound += absw * dx / 2.0;
                        }
                        // f32 error of the oracle: per block one rounding of d_w·d_x, of s_x
                        // and of each FMA; sequential accumulation of nb terms adds at most
                        // nb roundings of a partial sum, each <= 2^-24 · Σ|terms|. Twice that.
                        let tol_q = 2.0 * (nb as f64 + 4.0) * 2f64.powi(-24) * mag + 1e-30;
                        let eq = (got - refq).abs();
                        assert!(
                            eq <= tol_q,
                            "{f:?} m{m} n{n} k{k} ({r},{c}): {got} vs q-ref {refq} (tol {tol_q})"
                        );
                        // Against the f32 activations: each x moved by at most d_x/2.
                        let tol_x = xbound + tol_q;
                        let ex = (got - refx).abs();
                        assert!(
                            ex <= tol_x,
                            "{f:?} m{m} n{n} k{k} ({r},{c}): {got} vs x-ref {refx} (tol {tol_x})"
                        );
                        worst_q = worst_q.max(eq / tol_q);
                        worst_x = worst_x.max(ex / tol_x);
                    }
                }
            }
        }
    }
    eprintln!("worst error / bound: quantized-activation ref {worst_q:.3}, f32 ref {worst_x:.3}");
}

/// Bit identity only (no f64 reference: that is the test above), over the edge grid: every M
/// in 1..=33 and 127..=129 (every micro-kernel size, 16-row AMX slice and its tails, one and two
/// plan row chunks), N not a multiple of 16, K from one block to 48.
#[test]
fn every_kernel_is_bit_identical_over_edge_shapes() {
    let ks = kernels();
    let mut rng = Rng::new(2024);
    let ms: Vec<usize> = (1..=33).chain(127..=129).collect();
    let ns = [1, 7, 17, 33, 47];
    for &k in &[32, 64, 576, 1536] {
        for (i, &m) in ms.iter().enumerate() {
            // K ≥ 576 at every third M (and the large ones) to keep the portable oracle quick.
            if k >= 576 && i % 3 != 0 && m < 127 {
                continue;
            }
            let n = ns[(i + k) % ns.len()];
            let wb = rand_weights(&mut rng, n, k);
            let x = rand_acts(&mut rng, m, k);
            let a = quantize_with(Int8Kernel::Portable, &x, m, k);
            for &f in &FORMATS {
                let w = pack(&wb, f, n, k);
                let oracle = run(Int8Kernel::Portable, &w, &a, m, n);
                for kern in &ks {
                    let y = run(*kern, &w, &a, m, n);
                    for (j, (p, q)) in oracle.iter().zip(&y).enumerate() {
                        assert_eq!(
                            p.to_bits(),
                            q.to_bits(),
                            "{} {f:?} m{m} n{n} k{k} at {j}: {p} vs {q}",
                            label(kern)
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rows_do_not_depend_on_the_batch() {
    let (m, n, k) = (129, 40, 576);
    let mut rng = Rng::new(7);
    let wb = rand_weights(&mut rng, n, k);
    let x = rand_acts(&mut rng, m, k);
    for &f in &FORMATS {
        let w = pack(&wb, f, n, k);
        for kern in kernels() {
            let full = run(kern, &w, &quantize_with(kern, &x, m, k), m, n);
            // Each row alone (M = 1), and a sub-batch starting at an odd row (other tiles,
            // other micro-kernel sizes).
            for r in [0, 5, 63, 128] {
                let one = run(
                    kern,
                    &w,
                    &quantize_with(kern, &x[r * k..(r + 1) * k], 1, k),
                    1,
                    n,
                );
                assert_eq!(
                    bits(&one),
                    bits(&full[r * n..(r + 1) * n]),
                    "{} {f:?} row {r}",
                    label(&kern)
                );
            }
            let (r0, mm) = (3, 21);
            let sub = run(
                kern,
                &w,
                &quantize_with(kern, &x[r0 * k..(r0 + mm) * k], mm, k),
                mm,
                n,
            );
            assert_eq!(
                bits(&sub),
                bits(&full[r0 * n..(r0 + mm) * n]),
                "{} {f:?}",
                label(&kern)
            );
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn parallel_equals_serial() {
    let mut rng = Rng::new(11);
    for &(m, n, k) in &[(1, 600, 576), (16, 100, 64), (129, 70, 576)] {
        let wb = rand_weights(&mut rng, n, k);
        let x = rand_acts(&mut rng, m, k);
        let w = pack(&wb, Int8Format::Q4_1, n, k);
        for kern in kernels() {
            let a = quantize_with(kern, &x, m, k);
            let serial = run(kern, &w, &a, m, n);
            for workers in [2, 3] {
                let mut st = StealState::new(workers).unwrap();
                let mut y = vec![f32::NAN; m * n];
                // Tiles cut for the worker count (decode shapes: one group per tile).
                let plan = Int8Plan::new(kern, &w, &a, &mut y, n)
                    .unwrap()
                    .with_workers(workers * 8);
                st.prepare(plan.tiles()).unwrap();
                std::thread::scope(|s| {
                    for wk in 0..workers {
                        let (p, st) = (&plan, &st);
                        s.spawn(move || p.run_worker(st, wk).unwrap());
                    }
                });
                assert_eq!(
                    bits(&y),
                    bits(&serial),
                    "{} m{m} n{n} w{workers}",
                    label(&kern)
                );
            }
        }
    }
}

#[test]
fn packed_layout_round_trips() {
    let (n, k) = (37, 96);
    let mut rng = Rng::new(3);
    let wb = rand_weights(&mut rng, n, k);
    for &f in &FORMATS {
        let w = pack(&wb, f, n, k);
        assert_eq!(
            (w.n(), w.k(), w.blocks(), w.groups(), w.format()),
            (n, k, 3, 3, f)
        );
        let wd = dequant(&wb, f, n, k);
        for r in 0..n {
            for i in 0..k {
                let u = w.u_at(r, i).unwrap() as f64;
                let (d, mm) = w.scale_at(r, i / 32).unwrap();
                assert_eq!(d as f64 * u + mm as f64, wd[r * k + i], "{f:?} ({r},{i})");
            }
        }
        // The same weight from raw GGUF bytes (little-endian block images, 2-byte aligned).
        let mut img: Vec<u8> = Vec::new();
        for r in 0..n * k / 32 {
            match f {
                Int8Format::Q4_0 => {
                    img.extend(wb.q40[r].d.to_le_bytes());
                    img.extend(wb.q40[r].qs);
                }
                Int8Format::Q4_1 => {
                    img.extend(wb.q41[r].d.to_le_bytes());
                    img.extend(wb.q41[r].m.to_le_bytes());
                    img.extend(wb.q41[r].qs);
                }
                Int8Format::Q8_0 => {
                    img.extend(wb.q80[r].d.to_le_bytes());
                    img.extend(wb.q80[r].qs.map(|q| q as u8));
                }
            }
        }
        let mut store = vec![0u8; img.len() + 1];
        let off = store.as_ptr().align_offset(2);
        store[off..off + img.len()].copy_from_slice(&img);
        let aligned = &store[off..off + img.len()];
        let g = Int8Weight::pack_gguf(f, aligned, n, k).unwrap();
        assert_eq!(g.quant_bytes(), w.quant_bytes(), "{f:?}");
        assert_eq!(g.scale_words(), w.scale_words(), "{f:?}");
        assert!(matches!(
            Int8Weight::pack_gguf(f, &aligned[..aligned.len() - 2], n, k),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            Int8Weight::pack_gguf(f, &store[off + 1..off + 1 + 34], 1, 32),
            Err(Error::Misaligned { .. })
        ));
        assert_eq!(w.u_at(n, 0), None);
        assert_eq!(w.scale_at(0, 3), None);
    }
}

#[test]
fn bad_input_is_a_typed_error_and_writes_nothing() {
    let (m, n, k) = (3, 20, 64);
    let mut rng = Rng::new(5);
    let wb = rand_weights(&mut rng, n, k);
    // Packing: K not a multiple of 32, K = 0, block count not N·K/32.
    assert!(matches!(
        Int8Weight::pack_q4_1(&wb.q41, n * 2, 32 + 16),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(Int8Weight::pack_q4_0(&wb.q40, n, 0).is_err());
    assert!(matches!(
        Int8Weight::pack_q8_0(&wb.q80[1..], n, k),
        Err(Error::ShapeMismatch { .. })
    ));
    let w = pack(&wb, Int8Format::Q4_1, n, k);
    let x = rand_acts(&mut rng, m, k);
    for kern in kernels() {
        // Quantization: x too short, capacity too small, K not a multiple of 32.
        let mut a = quantize_with(kern, &x, m, k);
        let before = a.clone();
        let e = kern.quantize_acts(&x[1..], m, k, &mut a);
        assert!(
            matches!(e, Err(Error::BufferTooSmall { what: "x", .. })),
            "{e:?}"
        );
        let e = kern.quantize_acts(&x, m, 40, &mut a);
        assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
        let mut small = QActs::with_capacity(m - 1, k);
        let e = kern.quantize_acts(&x, m, k, &mut small);
        assert!(matches!(e, Err(Error::BufferTooSmall { .. })), "{e:?}");
        assert_eq!(small.m(), 0);
        assert_eq!((a.m(), a.k()), (m, k));
        for r in 0..m {
            assert_eq!(a.q_row(r), before.q_row(r));
            assert_eq!(a.meta_row(r), before.meta_row(r));
        }
        // GEMM: y too short, stride below N, K mismatch.
        let mut y = vec![f32::NAN; m * n];
        let e = kern.gemm(&w, &a, &mut y[..m * n - 1], n);
        assert!(
            matches!(e, Err(Error::BufferTooSmall { what: "y", .. })),
            "{e:?}"
        );
        let e = kern.gemm(&w, &a, &mut y, n - 1);
        assert!(matches!(e, Err(Error::BadStride { .. })), "{e:?}");
        let a2 = quantize_with(kern, &x[..2 * 96], 2, 96);
        let e = kern.gemm(&w, &a2, &mut y, n);
        assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
        assert!(
            y.iter().all(|v| v.is_nan()),
            "{}: y written on error",
            label(&kern)
        );
        // A steal state prepared for another tile count.
        let plan = Int8Plan::new(kern, &w, &a, &mut y, n).unwrap();
        let mut st = StealState::new(1).unwrap();
        st.prepare(plan.tiles() + 1).unwrap();
        assert!(matches!(
            plan.run_worker(&st, 0),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(y.iter().all(|v| v.is_nan()));
    }
    assert_eq!(quantize_acts_len(2, 64), Some(2 * 64 + 4 * 16));
    assert_eq!(quantize_acts_len(usize::MAX, 2), None);
}

#[test]
fn the_per_call_path_does_not_allocate() {
    let (m, n, k) = (37, 50, 576);
    let mut rng = Rng::new(9);
    let wb = rand_weights(&mut rng, n, k);
    let x = rand_acts(&mut rng, m, k);
    let w = pack(&wb, Int8Format::Q4_0, n, k);
    let mut acts = QActs::with_capacity(m, k);
    let mut y = vec![0f32; m * n];
    let mut st = StealState::new(1).unwrap();
    // The counter moves on something that allocates (CountingAlloc is installed).
    assert!(hetero_tests::count_allocations(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
    let _ = Int8Kernel::best(); // the cached dispatch allocates its list once
    for kern in kernels() {
        let n_alloc = hetero_tests::count_allocations(|| {
            kern.quantize_acts(&x, m, k, &mut acts).unwrap();
            kern.gemm(&w, &acts, &mut y, n).unwrap();
            quantize_acts(&x, m, k, &mut acts).unwrap();
            int8_gemm(&w, &acts, &mut y, n).unwrap();
            let plan = Int8Plan::new(kern, &w, &acts, &mut y, n).unwrap();
            st.prepare(plan.tiles()).unwrap();
            plan.run_worker(&st, 0).unwrap();
        });
        assert_eq!(n_alloc, 0, "{}", label(&kern));
    }
}
