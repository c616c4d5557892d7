//! Int8 GEMM (`src/int8.rs`, `src/arch/x86_64/vnni.rs`, `vnni_k.rs`, `amx_int8.rs`): every
//! implementation (portable, VNNI, AMX-INT8 where the CPU has it) against the portable oracle
//! (bit-identical) for every format, the oracle against f64 references, batch invariance, the
//! parallel driver, packing round-trips, one activation quantization shared by mixed formats,
//! and bad input. The AMX tile program itself is also proven without AMX, through a software
//! model of the tile instructions (unit tests in `src/amx_int8.rs`).

mod common;

use common::{f16b, rand_gguf, Rng};
use hetero_sme::*;

#[global_allocator]
static A: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;

/// The K values the tests use per format.
fn ks(ty: GgmlType) -> [usize; 3] {
    if ty.is_k_quant() {
        [256, 512, 1536]
    } else {
        [64, 576, 1536]
    }
}

fn rand_weight_aligned(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Aligned {
    Aligned::new(&rand_gguf(rng, ty, n, k))
}

/// GGUF bytes at a 2-byte-aligned address.
struct Aligned {
    store: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(b: &[u8]) -> Self {
        let mut store = vec![0u8; b.len() + 1];
        let off = store.as_ptr().align_offset(2);
        store[off..off + b.len()].copy_from_slice(b);
        Self {
            store,
            off,
            len: b.len(),
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.store[self.off..self.off + self.len]
    }
}

/// Dequantized weight `W[r][i]` (exact f32 values, from `dequantize_row`).
fn dequant(ty: GgmlType, bytes: &[u8], n: usize, k: usize) -> Vec<f32> {
    let rb = ty.row_bytes(k).unwrap();
    let mut out = vec![0f32; n * k];
    for r in 0..n {
        dequantize_row(
            ty,
            &bytes[r * rb..(r + 1) * rb],
            &mut out[r * k..(r + 1) * k],
        )
        .unwrap();
    }
    out
}

/// The magnitude of element `(r, i)`'s terms in the kernel's integer sums, as a multiple of
/// `|q_x|·d_x`: `|d_w·u| + |m_w|` (both terms of an affine form, which may cancel in `w`).
fn term_mag(ty: GgmlType, bytes: &[u8], k: usize, r: usize, i: usize) -> f64 {
    let (be, bb) = ty.block().unwrap();
    let b = &bytes[(r * k + i) / be * bb..][..bb];
    let e = i % be;
    let h = |at: usize| half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f64();
    match ty {
        GgmlType::Q4K | GgmlType::Q5K => {
            let s: [u8; 12] = b[4..16].try_into().unwrap();
            let (sc, m) = scale_min_k4(e / 32, &s);
            let u = if ty == GgmlType::Q4K { 15.0 } else { 31.0 };
            h(0) * sc as f64 * u + h(2) * m as f64
        }
        GgmlType::Q6K => (h(208) * b[192 + e / 16] as i8 as f64).abs() * 32.0,
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let u = if ty == GgmlType::Q4_1 { 15.0 } else { 31.0 };
            h(0).abs() * u + h(2).abs()
        }
        GgmlType::Q8_0 => h(0).abs() * 128.0,
        GgmlType::Q5_0 => h(0).abs() * 16.0,
        _ => h(0).abs() * 8.0,
    }
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

const MS: [usize; 10] = [0, 1, 2, 3, 5, 16, 17, 64, 128, 129];

/// Under QEMU (aarch64: only the portable kernel, emulated) a third of the oracle grid, as the
/// GEMM tests subsample; natively all of it.
const STRIDE: usize = if cfg!(target_arch = "aarch64") { 3 } else { 1 };
const NS: [usize; 7] = [1, 15, 16, 17, 47, 64, 100];

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

fn quantize_with(kernel: Int8Kernel, x: &[f32], m: usize, k: usize, b: ActBlocks) -> QActs {
    let mut a = QActs::with_capacity(m, k);
    kernel.quantize_acts_for(x, m, k, b, &mut a).unwrap();
    a
}

/// Every quantizer writes the same bytes and records as the portable one, in both schemes.
fn assert_same_acts(kq: Int8Kernel, a: &QActs, b: &QActs, m: usize) {
    for r in 0..m {
        assert_eq!(a.q_row(r), b.q_row(r), "{} q row {r}", kq.name());
        assert_eq!(a.qk_row(r), b.qk_row(r), "{} qk row {r}", kq.name());
        for (p, q) in a.meta_row(r).iter().zip(b.meta_row(r)) {
            assert_eq!(
                (p.d.to_bits(), p.s.to_bits(), p.n8, p.n128),
                (q.d.to_bits(), q.s.to_bits(), q.n8, q.n128),
                "{} meta row {r}",
                kq.name()
            );
        }
        for (p, q) in a.super_row(r).iter().zip(b.super_row(r)) {
            assert_eq!(
                (p.d.to_bits(), p.bsums32, p.n32),
                (q.d.to_bits(), q.bsums32, q.n32),
                "{} super row {r}",
                kq.name()
            );
        }
    }
}

#[test]
fn every_kernel_matches_the_oracle_and_the_references() {
    let kerns = kernels();
    let mut rng = Rng::new(81);
    let mut case = 0;
    for ty in INT8_TYPES {
        let mut worst_q = 0f64; // worst |err| / bound against the quantized-activation reference
        let mut worst_x = 0f64; // same against the f32 activations
        let unit = if ty.is_k_quant() { 256 } else { 32 };
        for k in ks(ty) {
            for &m in &MS {
                let n = NS[case % NS.len()];
                case += 1;
                if !case.is_multiple_of(STRIDE) {
                    continue;
                }
                let wb = rand_weight_aligned(&mut rng, ty, n, k);
                let x = rand_acts(&mut rng, m, k);
                // Both schemes wherever K allows (every quantizer checked in each).
                let ab = if k % 256 == 0 {
                    ActBlocks::BOTH
                } else {
                    ActBlocks::PER32
                };
                let a = quantize_with(Int8Kernel::Portable, &x, m, k, ab);
                for &kq in &kerns {
                    assert_same_acts(kq, &a, &quantize_with(kq, &x, m, k, ab), m);
                }
                let w = Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap();
                let oracle = run(Int8Kernel::Portable, &w, &a, m, n);
                for &kern in &kerns {
                    let y = run(kern, &w, &a, m, n);
                    for (i, (p, q)) in oracle.iter().zip(&y).enumerate() {
                        assert_eq!(
                            p.to_bits(),
                            q.to_bits(),
                            "{} {ty} m{m} n{n} k{k} at {i}: {p} vs {q}",
                            label(&kern)
                        );
                    }
                }
                let wd = dequant(ty, wb.bytes(), n, k);
                for r in 0..m {
                    // The activations as this format sees them: per 32 or per 256.
                    let (qx, dx): (&[i8], Vec<f64>) = if ty.is_k_quant() {
                        (
                            a.qk_row(r),
                            a.super_row(r).iter().map(|s| s.d as f64).collect(),
                        )
                    } else {
                        (
                            a.q_row(r),
                            a.meta_row(r).iter().map(|s| s.d as f64).collect(),
                        )
                    };
                    for c in 0..n {
                        let got = oracle[r * n + c] as f64;
                        assert!(got.is_finite());
                        let (mut refq, mut refx, mut mag, mut xbound) = (0f64, 0f64, 0f64, 0f64);
                        for (b, &d) in dx.iter().enumerate() {
                            let (mut blk, mut absw, mut bm) = (0f64, 0f64, 0f64);
                            for j in 0..unit {
                                let i = b * unit + j;
                                let wv = wd[c * k + i] as f64;
                                blk += wv * qx[i] as f64 * d;
                                refx += wv * x[r * k + i] as f64;
                                absw += wv.abs();
                                bm += term_mag(ty, wb.bytes(), k, c, i) * (qx[i] as f64).abs() * d;
                            }
                            refq += blk;
                            mag += bm + blk.abs();
                            xbound += absw * d / 2.0;
                        }
                        // f32 error of the oracle: per block a few roundings of its terms
                        // (conversions of the exact integers, the scale products, each FMA) and
                        // sequential accumulation of nb terms: at most (nb + 4) roundings of
                        // partial sums, each <= 2^-24 · Σ|terms|. Twice that.
                        let nb = (k / unit) as f64;
                        let tol_q = 2.0 * (nb + 4.0) * 2f64.powi(-24) * mag + 1e-30;
                        let eq = (got - refq).abs();
                        assert!(
                            eq <= tol_q,
                            "{ty} m{m} n{n} k{k} ({r},{c}): {got} vs q-ref {refq} (tol {tol_q})"
                        );
                        // Against the f32 activations: each x moved by at most d_x/2.
                        let tol_x = xbound + tol_q;
                        let ex = (got - refx).abs();
                        assert!(
                            ex <= tol_x,
                            "{ty} m{m} n{n} k{k} ({r},{c}): {got} vs x-ref {refx} (tol {tol_x})"
                        );
                        worst_q = worst_q.max(eq / tol_q);
                        worst_x = worst_x.max(ex / tol_x);
                    }
                }
            }
        }
        eprintln!("{ty}: worst error / bound: quantized-activation ref {worst_q:.3}, f32 ref {worst_x:.3}");
    }
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
    for ty in INT8_TYPES {
        let kk: &[usize] = if ty.is_k_quant() {
            &[256, 512, 1536]
        } else {
            &[32, 64, 576, 1536]
        };
        for &k in kk {
            for (i, &m) in ms.iter().enumerate() {
                // K >= 512 at every third M (and the large ones) to keep the oracle quick; on
                // aarch64 (QEMU) a further stride.
                if (k >= 512 && i % 3 != 0 && m < 127) || !i.is_multiple_of(STRIDE) {
                    continue;
                }
                let n = ns[(i + k) % ns.len()];
                let wb = rand_weight_aligned(&mut rng, ty, n, k);
                let w = Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap();
                let x = rand_acts(&mut rng, m, k);
                let a = quantize_with(Int8Kernel::Portable, &x, m, k, w.act_blocks());
                let oracle = run(Int8Kernel::Portable, &w, &a, m, n);
                for kern in &ks {
                    let y = run(*kern, &w, &a, m, n);
                    for (j, (p, q)) in oracle.iter().zip(&y).enumerate() {
                        assert_eq!(
                            p.to_bits(),
                            q.to_bits(),
                            "{} {ty} m{m} n{n} k{k} at {j}: {p} vs {q}",
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
    let (m, n) = (129, 40);
    let mut rng = Rng::new(7);
    for ty in INT8_TYPES {
        let k = if ty.is_k_quant() { 512 } else { 576 };
        let wb = rand_weight_aligned(&mut rng, ty, n, k);
        let x = rand_acts(&mut rng, m, k);
        let w = Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap();
        let ab = w.act_blocks();
        for kern in kernels() {
            let full = run(kern, &w, &quantize_with(kern, &x, m, k, ab), m, n);
            // Each row alone (M = 1), and a sub-batch starting at an odd row (other tiles,
            // other micro-kernel sizes).
            for r in [0, 5, 63, 128].into_iter().step_by(STRIDE.min(2)) {
                let one = run(
                    kern,
                    &w,
                    &quantize_with(kern, &x[r * k..(r + 1) * k], 1, k, ab),
                    1,
                    n,
                );
                assert_eq!(
                    bits(&one),
                    bits(&full[r * n..(r + 1) * n]),
                    "{} {ty} row {r}",
                    label(&kern)
                );
            }
            let (r0, mm) = (3, 21);
            let sub = run(
                kern,
                &w,
                &quantize_with(kern, &x[r0 * k..(r0 + mm) * k], mm, k, ab),
                mm,
                n,
            );
            assert_eq!(
                bits(&sub),
                bits(&full[r0 * n..(r0 + mm) * n]),
                "{} {ty}",
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
    for (ty, m, n, k) in [
        (GgmlType::Q4_1, 1, 600, 576),
        (GgmlType::Q5_0, 16, 100, 64),
        (GgmlType::Q4_1, 129, 70, 576),
        (GgmlType::Q4K, 33, 90, 512),
        (GgmlType::Q6K, 2, 300, 256),
    ] {
        let wb = rand_weight_aligned(&mut rng, ty, n, k);
        let x = rand_acts(&mut rng, m, k);
        let w = Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap();
        for kern in kernels() {
            let a = quantize_with(kern, &x, m, k, w.act_blocks());
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
                    "{} {ty} m{m} n{n} w{workers}",
                    label(&kern)
                );
            }
        }
    }
}

/// One quantization (both schemes) serves a 32-value block weight and a K-quant weight with
/// the same K, each bit for bit as with its own scheme alone.
#[test]
fn one_quantization_serves_mixed_formats() {
    let (m, n, k) = (9, 33, 512);
    let mut rng = Rng::new(13);
    let x = rand_acts(&mut rng, m, k);
    let ws: Vec<Int8Weight> = [GgmlType::Q5_0, GgmlType::Q4K, GgmlType::Q8_0, GgmlType::Q6K]
        .into_iter()
        .map(|ty| {
            let wb = rand_weight_aligned(&mut rng, ty, n, k);
            Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap()
        })
        .collect();
    let need = ws
        .iter()
        .fold(ActBlocks::default(), |a, w| a.union(w.act_blocks()));
    assert_eq!(need, ActBlocks::BOTH);
    for kern in kernels() {
        let both = quantize_with(kern, &x, m, k, need);
        for w in &ws {
            let alone = quantize_with(kern, &x, m, k, w.act_blocks());
            assert_eq!(
                bits(&run(kern, w, &both, m, n)),
                bits(&run(kern, w, &alone, m, n)),
                "{} {}",
                kern.name(),
                w.format()
            );
        }
        // Per-32 activations cannot feed a K-quant weight (and per-256 not a 32-block one).
        let per32 = quantize_with(kern, &x, m, k, ActBlocks::PER32);
        let per256 = quantize_with(kern, &x, m, k, ActBlocks::PER256);
        let mut y = vec![f32::NAN; m * n];
        assert!(matches!(
            kern.gemm(&ws[1], &per32, &mut y, n),
            Err(Error::MissingActivations { .. })
        ));
        assert!(matches!(
            kern.gemm(&ws[0], &per256, &mut y, n),
            Err(Error::MissingActivations { .. })
        ));
        assert!(y.iter().all(|v| v.is_nan()));
    }
}

#[test]
fn packed_layout_round_trips() {
    let n = 37;
    let mut rng = Rng::new(3);
    for ty in INT8_TYPES {
        let k = if ty.is_k_quant() { 512 } else { 96 };
        let wb = rand_weight_aligned(&mut rng, ty, n, k);
        let w = Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap();
        let unit = if ty.is_k_quant() { 256 } else { 32 };
        assert_eq!(
            (w.n(), w.k(), w.blocks(), w.groups(), w.format()),
            (n, k, k / unit, 3, ty)
        );
        let wd = dequant(ty, wb.bytes(), n, k);
        for r in 0..n {
            for i in 0..k {
                let v = w.value_at(r, i).unwrap();
                assert_eq!(v.to_bits(), wd[r * k + i].to_bits(), "{ty} ({r},{i})");
                if let Some((d, mm)) = w.scale_at(r, i / 32) {
                    let u = w.u_at(r, i).unwrap() as f64;
                    assert_eq!(
                        d as f64 * u + mm as f64,
                        wd[r * k + i] as f64,
                        "{ty} ({r},{i})"
                    );
                } else {
                    assert!(ty.is_k_quant(), "{ty}: scale_at is for 32-value blocks");
                }
            }
        }
        assert_eq!(w.u_at(n, 0), None);
        assert_eq!(w.value_at(0, k), None);
        // The typed packers give the same bytes as the raw-bytes one.
        let typed =
            match ty {
                GgmlType::Q4_0 => BlockQ4_0::slice_from_bytes(wb.bytes())
                    .and_then(|b| Int8Weight::pack_q4_0(b, n, k)),
                GgmlType::Q4_1 => BlockQ4_1::slice_from_bytes(wb.bytes())
                    .and_then(|b| Int8Weight::pack_q4_1(b, n, k)),
                GgmlType::Q8_0 => BlockQ8_0::slice_from_bytes(wb.bytes())
                    .and_then(|b| Int8Weight::pack_q8_0(b, n, k)),
                _ => Int8Weight::pack_gguf(ty, wb.bytes(), n, k),
            }
            .unwrap();
        assert_eq!(typed.quant_bytes(), w.quant_bytes(), "{ty}");
        assert_eq!(typed.scale_words(), w.scale_words(), "{ty}");
        let aligned = wb.bytes();
        assert!(matches!(
            Int8Weight::pack_gguf(ty, &aligned[..aligned.len() - 2], n, k),
            Err(Error::ShapeMismatch { .. })
        ));
        let odd = Aligned::new(&[0u8; 600]);
        assert!(matches!(
            Int8Weight::pack_gguf(
                ty,
                &odd.store[odd.off + 1..][..ty.block().unwrap().1],
                1,
                unit
            ),
            Err(Error::Misaligned { .. })
        ));
    }
}

#[test]
fn bad_input_is_a_typed_error_and_writes_nothing() {
    let (m, n, k) = (3, 20, 64);
    let mut rng = Rng::new(5);
    let wb = rand_weight_aligned(&mut rng, GgmlType::Q4_1, n, k);
    let q41 = BlockQ4_1::slice_from_bytes(wb.bytes()).unwrap();
    // Packing: K not a multiple of 32, K = 0, block count not N·K/32, K-quant K not a multiple
    // of 256, types the int8 GEMM does not compute.
    assert!(matches!(
        Int8Weight::pack_q4_1(q41, n * 2, 32 + 16),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(Int8Weight::pack_q4_1(q41, n, 0).is_err());
    assert!(matches!(
        Int8Weight::pack_q4_1(&q41[1..], n, k),
        Err(Error::ShapeMismatch { .. })
    ));
    let kq = rand_weight_aligned(&mut rng, GgmlType::Q4K, 1, 256);
    assert!(matches!(
        Int8Weight::pack_gguf(GgmlType::Q4K, kq.bytes(), 2, 128),
        Err(Error::ShapeMismatch { .. })
    ));
    for ty in [GgmlType::Q2K, GgmlType::Q3K, GgmlType::F16, GgmlType::Q8K] {
        assert_eq!(
            Int8Weight::pack_gguf(ty, kq.bytes(), 1, 256).unwrap_err(),
            Error::UnsupportedFormat { format: ty }
        );
    }
    let w = Int8Weight::pack_q4_1(q41, n, k).unwrap();
    let x = rand_acts(&mut rng, m, k);
    for kern in kernels() {
        // Quantization: x too short, capacity too small, K not a multiple of 32 (of 256 for
        // the per-256 scheme).
        let mut a = quantize_with(kern, &x, m, k, ActBlocks::PER32);
        let before = a.clone();
        let e = kern.quantize_acts(&x[1..], m, k, &mut a);
        assert!(
            matches!(e, Err(Error::BufferTooSmall { what: "x", .. })),
            "{e:?}"
        );
        let e = kern.quantize_acts(&x, m, 40, &mut a);
        assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
        let e = kern.quantize_acts_for(&x, m, k, ActBlocks::BOTH, &mut a);
        assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
        let mut small = QActs::with_capacity(m - 1, k);
        let e = kern.quantize_acts(&x, m, k, &mut small);
        assert!(matches!(e, Err(Error::BufferTooSmall { .. })), "{e:?}");
        assert_eq!(small.m(), 0);
        assert_eq!((a.m(), a.k(), a.blocks()), (m, k, ActBlocks::PER32));
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
        let a2 = quantize_with(kern, &x[..2 * 96], 2, 96, ActBlocks::PER32);
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
    assert_eq!(
        quantize_acts_len(2, 256),
        Some(2 * 2 * 256 + 2 * 8 * 16 + 2 * 84)
    );
    assert_eq!(quantize_acts_len(usize::MAX, 2), None);
}

#[test]
fn the_per_call_path_does_not_allocate() {
    let (m, n, k) = (37, 50, 512);
    let mut rng = Rng::new(9);
    let x = rand_acts(&mut rng, m, k);
    let ws: Vec<Int8Weight> = [GgmlType::Q4_0, GgmlType::Q5K]
        .into_iter()
        .map(|ty| {
            Int8Weight::pack_gguf(ty, rand_weight_aligned(&mut rng, ty, n, k).bytes(), n, k)
                .unwrap()
        })
        .collect();
    let mut acts = QActs::with_capacity(m, k);
    let mut y = vec![0f32; m * n];
    let mut st = StealState::new(1).unwrap();
    // The counter moves on something that allocates (CountingAlloc is installed).
    assert!(hetero_tests::count_allocations(|| drop(std::hint::black_box(vec![1u8; 64]))) > 0);
    let _ = Int8Kernel::best(); // the cached dispatch allocates its list once
    for kern in kernels() {
        let n_alloc = hetero_tests::count_allocations(|| {
            kern.quantize_acts_for(&x, m, k, ActBlocks::BOTH, &mut acts)
                .unwrap();
            for w in &ws {
                kern.gemm(w, &acts, &mut y, n).unwrap();
                int8_gemm(w, &acts, &mut y, n).unwrap();
                let plan = Int8Plan::new(kern, w, &acts, &mut y, n).unwrap();
                st.prepare(plan.tiles()).unwrap();
                plan.run_worker(&st, 0).unwrap();
            }
            quantize_acts(&x, m, k, &mut acts).unwrap();
            quantize_acts_for(&x, m, k, ActBlocks::PER256, &mut acts).unwrap();
        });
        assert_eq!(n_alloc, 0, "{}", label(&kern));
    }
}

/// A [`PlanSet`] (a layer's Q/K/V or gate/up as one pool job) computes every plan's output bit
/// for bit as the plan alone, whatever the pool size, the threads the job takes
/// (`run_workers_on`) and the mix of formats; a plan given twice is refused before anything runs.
#[test]
fn plan_set_equals_each_plan_alone() {
    let mut rng = Rng::new(23);
    let k = 512;
    let shapes = [
        (GgmlType::Q4_1, 600),
        (GgmlType::Q8_0, 100),
        (GgmlType::Q4K, 47),
    ];
    let ws: Vec<Int8Weight> = shapes
        .iter()
        .map(|&(ty, n)| {
            let wb = rand_weight_aligned(&mut rng, ty, n, k);
            Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap()
        })
        .collect();
    let blocks = ws
        .iter()
        .map(|w| w.act_blocks())
        .fold(ActBlocks::default(), ActBlocks::union);
    let pool = ThreadPool::new(3).unwrap();
    for m in [1, 3, 17] {
        let x = rand_acts(&mut rng, m, k);
        for kern in kernels() {
            let a = quantize_with(kern, &x, m, k, blocks);
            let alone: Vec<Vec<f32>> = ws.iter().map(|w| run(kern, w, &a, m, w.n())).collect();
            for threads in [1, 2, 3] {
                let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![f32::NAN; m * w.n()]).collect();
                {
                    let mut it = ys.iter_mut();
                    let plans: Vec<Int8Plan<'_>> = ws
                        .iter()
                        .map(|w| {
                            let y = it.next().unwrap();
                            Int8Plan::new(kern, w, &a, y, w.n())
                                .unwrap()
                                .with_workers(threads)
                        })
                        .collect();
                    let refs: Vec<&dyn TiledPlan> =
                        plans.iter().map(|p| p as &dyn TiledPlan).collect();
                    let set = PlanSet::new(&refs).unwrap();
                    let tiles: usize = plans.iter().map(|p| p.tiles()).sum();
                    assert_eq!(set.tiles(), tiles);
                    pool.run_workers_on(set.tiles(), threads, &|st: &StealState, th| {
                        assert!(th < threads, "thread {th} joined a {threads}-thread job");
                        set.run_worker(st, th).unwrap();
                    })
                    .unwrap();
                    let twice = [refs[0], refs[1], refs[0]];
                    assert!(matches!(
                        PlanSet::new(&twice),
                        Err(Error::ShapeMismatch { .. })
                    ));
                }
                for (i, (y, r)) in ys.iter().zip(&alone).enumerate() {
                    assert_eq!(
                        bits(y),
                        bits(r),
                        "{} plan {i} m{m} threads {threads}",
                        label(&kern)
                    );
                }
            }
        }
    }
}

/// The largest operands each format can hold against activations at ±127 (the AVX2 kernel's
/// `vpmaddubsw` saturates its i16 words; its operand grouping must never reach that): every
/// quant byte 0xFF (all `u` at their maximum, K-quant scales and minimums at 63), Q8_0 also all
/// -128 and all +127, against rows of +1.0, -1.0 and alternating signs (`q_x` = ±127). Every
/// implementation bit-identical to the oracle.
#[test]
fn extreme_operands_do_not_saturate() {
    let ks = kernels();
    let (n, m) = (48, 3);
    for ty in INT8_TYPES {
        let k = if ty.is_k_quant() { 512 } else { 576 };
        let (be, bb) = ty.block().unwrap();
        for fill in [0xFFu8, 0x80, 0x7F] {
            let mut b = vec![fill; n * k / be * bb];
            for blk in b.chunks_mut(bb) {
                match ty {
                    GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => {
                        blk[..2].copy_from_slice(&f16b(0.01))
                    }
                    GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => {
                        blk[..2].copy_from_slice(&f16b(0.01));
                        blk[2..4].copy_from_slice(&f16b(0.001));
                    }
                    GgmlType::Q6K => blk[208..210].copy_from_slice(&f16b(0.01)),
                    _ => unreachable!(),
                }
            }
            let wb = Aligned::new(&b);
            let w = Int8Weight::pack_gguf(ty, wb.bytes(), n, k).unwrap();
            let x: Vec<f32> = (0..m * k)
                .map(|i| match i / k {
                    0 => 1.0,
                    1 => -1.0,
                    _ if i % 2 == 0 => 1.0,
                    _ => -1.0,
                })
                .collect();
            let a = quantize_with(Int8Kernel::Portable, &x, m, k, w.act_blocks());
            assert!(a.q_row(0).iter().chain(a.qk_row(0)).all(|&q| q == 127));
            let oracle = run(Int8Kernel::Portable, &w, &a, m, n);
            for kern in &ks {
                let y = run(*kern, &w, &a, m, n);
                for (j, (p, q)) in oracle.iter().zip(&y).enumerate() {
                    assert_eq!(
                        p.to_bits(),
                        q.to_bits(),
                        "{} {ty} fill {fill:#x} at {j}: {p} vs {q}",
                        label(kern)
                    );
                }
            }
        }
    }
}
