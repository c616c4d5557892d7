//! The packed (row-interleaved) quantized GEMV, every format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! Q4_K, Q5_K, Q6_K) and every implementation, against an f64 reference of the GGUF weights.
//!
//! Tolerance: the kernels sum each sub-block's products (32 values; 16 for Q6_K) in FP32
//! chains, the 5/6-bit kernels add the high bits through small FP32 tables of partial sums of
//! x, then scale once per sub-block (one rounding) and add the offset term (`m·Σx`); K/32
//! sub-block results accumulate in FP32. The error is well within (K + 8)·u·Σ|x|·(|s·q| + |o|)
//! with u = 2^-24 (`s·q` and `o` the scaled-quant and offset parts of each weight, which may
//! cancel in `w`); we allow twice that.

mod common;

use common::*;
use hetero_sme::*;

/// Under QEMU (aarch64: NEON for Q4_0/Q4_1/Q8_0, the portable kernel for the rest, emulated)
/// every other edge shape and the two smaller K of the batch-invariance test; natively all.
const QEMU: bool = cfg!(target_arch = "aarch64");

/// GGUF bytes (2-byte aligned) of `n` rows of `k` values: random quant bits, sane FP16 scales.
struct W {
    ty: GgmlType,
    store: Vec<u16>,
    len: usize,
}

impl W {
    fn new(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Self {
        let (be, bb) = ty.block().unwrap();
        let mut bytes = Vec::with_capacity(n * k / be * bb);
        for _ in 0..n * k / be {
            let mut b: Vec<u8> = (0..bb).map(|_| rng.next_u64() as u8).collect();
            let d = rng.f32() * 0.05;
            let m = rng.f32() * 0.05;
            match ty {
                GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => {
                    b[..2].copy_from_slice(&f16b(d))
                }
                GgmlType::Q4_1 | GgmlType::Q5_1 => {
                    b[..2].copy_from_slice(&f16b(d));
                    b[2..4].copy_from_slice(&f16b(m));
                }
                GgmlType::Q4K | GgmlType::Q5K => {
                    b[..2].copy_from_slice(&f16b(d.abs() / 32.0));
                    b[2..4].copy_from_slice(&f16b(m.abs() / 32.0));
                }
                GgmlType::Q6K => b[208..210].copy_from_slice(&f16b(d / 64.0)),
                _ => unreachable!(),
            }
            bytes.extend(b);
        }
        let mut store = vec![0u16; bytes.len().div_ceil(2)];
        for (i, &v) in bytes.iter().enumerate() {
            store[i / 2] |= (v as u16) << (8 * (i % 2));
        }
        Self {
            ty,
            len: bytes.len(),
            store,
        }
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: u16 storage viewed as its `len` little-endian bytes (len <= 2 · store.len()).
        unsafe { core::slice::from_raw_parts(self.store.as_ptr().cast::<u8>(), self.len) }
    }
    /// Row `r`'s values (exact, from `dequantize_row`) and term magnitudes `|s·q| + |o|`.
    fn row(&self, k: usize, r: usize) -> (Vec<f64>, Vec<f64>) {
        let (be, bb) = self.ty.block().unwrap();
        let rb = self.ty.row_bytes(k).unwrap();
        let src = &self.bytes()[r * rb..(r + 1) * rb];
        let mut v = vec![0f32; k];
        dequantize_row(self.ty, src, &mut v).unwrap();
        let mag = (0..k)
            .map(|i| {
                let b = &src[i / be * bb..][..bb];
                let e = i % be;
                let h = |at: usize| {
                    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f64()
                };
                let (s, q, o) = match self.ty {
                    GgmlType::Q4_0 => (
                        h(0),
                        ((b[2 + e % 16] >> (4 * (e / 16))) & 15) as f64 - 8.0,
                        0.0,
                    ),
                    GgmlType::Q8_0 => (h(0), b[2 + e] as i8 as f64, 0.0),
                    GgmlType::Q4_1 => (h(0), 15.0, h(2)),
                    GgmlType::Q5_1 => (h(0), 31.0, h(2)),
                    GgmlType::Q5_0 => (h(0), 16.0, 0.0),
                    GgmlType::Q4K | GgmlType::Q5K => {
                        let s: [u8; 12] = b[4..16].try_into().unwrap();
                        let (sc, m) = scale_min_k4(e / 32, &s);
                        let top = if self.ty == GgmlType::Q4K { 15.0 } else { 31.0 };
                        (h(0) * sc as f64, top, h(2) * m as f64)
                    }
                    GgmlType::Q6K => (h(208) * b[192 + e / 16] as i8 as f64, 32.0, 0.0),
                    _ => unreachable!(),
                };
                (s * q).abs() + o.abs()
            })
            .collect();
        (v.iter().map(|&x| x as f64).collect(), mag)
    }
}

/// Packs rows `rows` of `w`; returns the bytes (poisoned first: every byte must be written).
fn pack(w: &W, k: usize, n: usize, rows: core::ops::Range<usize>) -> Vec<u8> {
    let mut buf = vec![0xA5u8; qpacked_len(w.ty, k, rows.len()).unwrap()];
    qpack_gguf(w.ty, w.bytes(), k, n, rows, &mut buf).unwrap();
    buf
}

#[allow(clippy::too_many_arguments)]
fn check(
    name: &str,
    w: &W,
    x: &[f32],
    m: usize,
    k: usize,
    row0: usize,
    n: usize,
    y: &[f32],
    ldy: usize,
) {
    let u = 2f64.powi(-24);
    for j in 0..n {
        let (wv, wm) = w.row(k, row0 + j);
        for i in 0..m {
            let (mut sum, mut mag) = (0f64, 0f64);
            for t in 0..k {
                let xv = x[i * k + t] as f64;
                sum += xv * wv[t];
                mag += xv.abs() * wm[t];
            }
            let tol = 2.0 * (k as f64 + 8.0) * u * mag + 1e-30;
            let got = y[i * ldy + j] as f64;
            assert!(
                (got - sum).abs() <= tol,
                "{name} {} m{m} k{k} n{n}: y[{i}][{j}] = {got}, want {sum} (tol {tol})",
                w.ty
            );
        }
    }
    for i in 0..m {
        for j in n..ldy {
            assert!(
                y[i * ldy + j].is_nan(),
                "{name} {}: padding y[{i}][{j}] written",
                w.ty
            );
        }
    }
}

fn ks(ty: GgmlType) -> [usize; 5] {
    if ty.is_k_quant() {
        [256, 512, 768, 1280, 1536]
    } else {
        [32, 64, 96, 576, 1536]
    }
}

/// Every kernel on every format over the edge shapes (N over all of them; M and K
/// cycled), y poisoned with NaN before each run, plus a row shard packed on its own.
#[test]
fn packed_every_kernel() {
    let ms = [1, 2, 15, 16, 4, 5];
    let ns = [1, 2, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 576];
    let mut rng = Rng::new(21);
    for ty in INT8_TYPES {
        for (ci, &n) in ns.iter().enumerate() {
            if QEMU && ci % 2 == 1 {
                continue;
            }
            let m = ms[ci % ms.len()];
            let k = ks(ty)[ci % 5];
            let ldy = n + (ci % 2) * 3;
            let x = rng.vec(m * k);
            let w = W::new(&mut rng, ty, n, k);
            let buf = pack(&w, k, n, 0..n);
            let wp = QPackedRef::new(&buf, ty, k, n).unwrap();
            assert_eq!(wp.ty(), ty);
            for kernel in kernels() {
                let mut y = vec![f32::NAN; m * ldy];
                kernel.qgemv_packed(&x, m, k, wp, &mut y, ldy).unwrap();
                check(kernel.name(), &w, &x, m, k, 0, n, &y, ldy);
            }
            // A shard: rows n0..n1 packed alone is a weight of n1 - n0 rows.
            let (n0, n1) = (n / 3, n - n / 4);
            let buf = pack(&w, k, n, n0..n1);
            let wp = QPackedRef::new(&buf, ty, k, n1 - n0).unwrap();
            let mut y = vec![f32::NAN; m * (n1 - n0)];
            gemv_qpacked(&x, m, wp, &mut y, n1 - n0).unwrap();
            check("shard", &w, &x, m, k, n0, n1 - n0, &y, n1 - n0);
        }
    }
}

/// A few large shapes on the dispatched kernel (the portable one is too slow for all of them).
#[test]
fn packed_large_shapes() {
    let mut rng = Rng::new(22);
    for (m, k, n) in [(1, 4096, 1000), (3, 2048, 777), (16, 1024, 300)] {
        let x = rng.vec(m * k);
        for ty in INT8_TYPES {
            let w = W::new(&mut rng, ty, n, k);
            let buf = pack(&w, k, n, 0..n);
            let wp = QPackedRef::new(&buf, ty, k, n).unwrap();
            let mut y = vec![f32::NAN; m * n];
            gemv_qpacked(&x, m, wp, &mut y, n).unwrap();
            check("best", &w, &x, m, k, 0, n, &y, n);
        }
    }
}

/// Batch invariance: row i of an M-row GEMV (M = 1..16) is bitwise equal to the M = 1 GEMV of
/// that row alone, for every kernel and format. K spans several of the kernels' x chunks.
#[test]
fn packed_rows_independent_of_m() {
    let mut rng = Rng::new(23);
    let n = 37;
    for ty in INT8_TYPES {
        let kk = if ty.is_k_quant() {
            [256, 1280, 4608]
        } else {
            [96, 1056, 4128]
        };
        for k in kk.into_iter().take(if QEMU { 2 } else { 3 }) {
            let x = rng.vec(16 * k);
            let w = W::new(&mut rng, ty, n, k);
            let buf = pack(&w, k, n, 0..n);
            let wp = QPackedRef::new(&buf, ty, k, n).unwrap();
            for kernel in kernels() {
                let mut single = vec![f32::NAN; 16 * n];
                for i in 0..16 {
                    kernel
                        .qgemv_packed(
                            &x[i * k..(i + 1) * k],
                            1,
                            k,
                            wp,
                            &mut single[i * n..][..n],
                            n,
                        )
                        .unwrap();
                }
                for m in 1..=16 {
                    let mut y = vec![f32::NAN; m * n];
                    kernel
                        .qgemv_packed(&x[..m * k], m, k, wp, &mut y, n)
                        .unwrap();
                    for (i, (a, b)) in y.iter().zip(&single).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{} {ty} k={k} m={m} row {} col {}",
                            kernel.name(),
                            i / n,
                            i % n
                        );
                    }
                }
            }
        }
    }
}

/// The typed packers write the same bytes as the one from raw GGUF bytes.
#[test]
fn typed_packers_equal_the_gguf_packer() {
    let mut rng = Rng::new(26);
    let (k, n) = (96, 19);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let w = W::new(&mut rng, ty, n, k);
        let want = pack(&w, k, n, 2..n);
        let mut got = vec![0x5Au8; want.len()];
        match ty {
            GgmlType::Q4_0 => pack_q4_0(
                BlockQ4_0::slice_from_bytes(w.bytes()).unwrap(),
                k,
                n,
                2..n,
                &mut got,
            ),
            GgmlType::Q4_1 => pack_q4_1(
                BlockQ4_1::slice_from_bytes(w.bytes()).unwrap(),
                k,
                n,
                2..n,
                &mut got,
            ),
            _ => pack_q8_0(
                BlockQ8_0::slice_from_bytes(w.bytes()).unwrap(),
                k,
                n,
                2..n,
                &mut got,
            ),
        }
        .unwrap();
        assert_eq!(got, want, "{ty}");
    }
}

/// Bad input to the packers and the packed GEMV: typed errors, nothing written.
#[test]
fn packed_bad_input() {
    let mut rng = Rng::new(24);
    let (k, n) = (64, 20);
    let w = W::new(&mut rng, GgmlType::Q4_0, n, k);
    let len = qpacked_len(GgmlType::Q4_0, k, n).unwrap();
    let mut dst = vec![0x5Au8; len];
    // K not a multiple of 32 (of 256 for K-quants); types without a packed layout.
    assert!(matches!(
        qpack_gguf(GgmlType::Q4_0, w.bytes(), 48, n, 0..n, &mut dst),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(qpacked_len(GgmlType::Q4_0, 33, n).is_err());
    assert!(matches!(
        qpacked_len(GgmlType::Q6K, 288, n),
        Err(Error::ShapeMismatch { .. })
    ));
    for ty in [
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::F16,
        GgmlType::Other(20),
    ] {
        assert_eq!(
            qpacked_len(ty, 256, n).unwrap_err(),
            Error::UnsupportedFormat { format: ty }
        );
        assert!(matches!(
            qpack_gguf(ty, w.bytes(), k, n, 0..n, &mut dst),
            Err(Error::UnsupportedFormat { .. })
        ));
    }
    // N not matching the blocks; row range past N, reversed; destination too small; source
    // misaligned.
    assert!(matches!(
        qpack_gguf(GgmlType::Q4_0, w.bytes(), k, n + 1, 0..n, &mut dst),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        qpack_gguf(GgmlType::Q4_0, w.bytes(), k, n, 3..n + 1, &mut dst),
        Err(Error::BadRange { .. })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let rev = 5..3;
    assert!(matches!(
        qpack_gguf(GgmlType::Q4_0, w.bytes(), k, n, rev, &mut dst),
        Err(Error::BadRange { .. })
    ));
    assert!(matches!(
        qpack_gguf(GgmlType::Q4_0, w.bytes(), k, n, 0..n, &mut dst[..len - 1]),
        Err(Error::BufferTooSmall { .. })
    ));
    assert!(matches!(
        qpack_gguf(GgmlType::Q4_0, &w.bytes()[1..19], 32, 1, 0..1, &mut dst),
        Err(Error::Misaligned { .. })
    ));
    assert!(dst.iter().all(|&b| b == 0x5A), "a failed pack wrote");
    qpack_gguf(GgmlType::Q4_0, w.bytes(), k, n, 0..n, &mut dst).unwrap();
    assert!(matches!(
        QPackedRef::new(&dst[..len - 1], GgmlType::Q4_0, k, n),
        Err(Error::BufferTooSmall { .. })
    ));
    let wp = QPackedRef::new(&dst, GgmlType::Q4_0, k, n).unwrap();
    let x = rng.vec(17 * k);
    for kernel in kernels() {
        let mut y = vec![f32::NAN; 17 * n];
        let errs = [
            kernel.qgemv_packed(&x, 17, k, wp, &mut y, n),
            kernel.qgemv_packed(&x, 1, k + 32, wp, &mut y, n),
            kernel.qgemv_packed(&x[..k - 1], 1, k, wp, &mut y, n),
            kernel.qgemv_packed(&x, 2, k, wp, &mut y[..2 * n - 1], n),
            kernel.qgemv_packed(&x, 2, k, wp, &mut y, n - 1),
        ];
        assert!(matches!(errs[0], Err(Error::TooManyRows { .. })));
        assert!(matches!(errs[1], Err(Error::ShapeMismatch { .. })));
        assert!(matches!(errs[2], Err(Error::BufferTooSmall { .. })));
        assert!(matches!(errs[3], Err(Error::BufferTooSmall { .. })));
        assert!(matches!(errs[4], Err(Error::BadStride { .. })));
        assert!(
            y.iter().all(|v| v.is_nan()),
            "{}: a refused call wrote",
            kernel.name()
        );
    }
}

/// The packed plan through the work-stealing driver (4 workers, 3 threads + this one).
#[test]
fn packed_parallel_matches_single() {
    let mut rng = Rng::new(25);
    let (m, k, n) = (2, 512, 1000);
    let x = rng.vec(m * k);
    for ty in [GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q6K] {
        let w = W::new(&mut rng, ty, n, k);
        let buf = pack(&w, k, n, 0..n);
        let wp = QPackedRef::new(&buf, ty, k, n).unwrap();
        let kernel = Kernel::best_gemv();
        let mut single = vec![f32::NAN; m * n];
        kernel.qgemv_packed(&x, m, k, wp, &mut single, n).unwrap();
        let mut y = vec![f32::NAN; m * n];
        let plan = QPackedPlan::new(kernel, &x, m, k, wp, &mut y, n).unwrap();
        let mut state = StealState::new(4).unwrap();
        state.prepare(plan.tiles()).unwrap();
        std::thread::scope(|sc| {
            for wk in 1..4 {
                let (plan, state) = (&plan, &state);
                sc.spawn(move || plan.run_worker(state, wk).unwrap());
            }
            plan.run_worker(&state, 0).unwrap();
        });
        for (a, b) in y.iter().zip(&single) {
            assert_eq!(a.to_bits(), b.to_bits(), "{ty}");
        }
    }
}
