//! The backend's Rust side without llama.cpp: every type it runs packed into a blob and
//! multiplied through `Ctx::mul_mat` and through the C ABI, against hetero-sme's int8 oracle
//! (bit for bit) and an f64 reference (within the activation rounding's bound); exact read-back
//! of every blob; row strides; thread counts; no allocation in a steady-state call; and bad
//! input refused with a status, `y` untouched and no panic across the boundary.

use hetero_ggml::blob;
use hetero_ggml::ffi::*;
use hetero_ggml::Ctx;
use hetero_sme::{
    dequantize_row, quantize_row, GgmlType, Int8Kernel, Int8Weight, QActs, INT8_TYPES,
};

#[global_allocator]
static A: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn f32(&mut self) -> f32 {
        (self.next() as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

/// GGUF bytes of `n` rows of `k` random values of `ty`.
fn weight(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let w = rng.vec(n * k);
    let mut out = vec![0u8; n * ty.row_bytes(k).unwrap()];
    quantize_row(ty, &w, &mut out).unwrap();
    out
}

/// 64-byte aligned storage of `len` bytes.
struct Aligned {
    store: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Self {
        let store = vec![0xEEu8; len + 64];
        let off = (64 - store.as_ptr() as usize % 64) % 64;
        Self { store, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.store[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.store[self.off..self.off + self.len]
    }
}

fn packed(ty: GgmlType, n: usize, k: usize, src: &[u8]) -> Aligned {
    let mut b = Aligned::new(blob::size(ty, n, k).unwrap());
    blob::pack(ty, n, k, src, b.get_mut()).unwrap();
    b
}

/// The f64 product of the dequantized weight and `x` rounded by `round`, and Σ|w·x| per output.
fn reference(
    ty: GgmlType,
    src: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> (Vec<f64>, Vec<f64>) {
    let rb = ty.row_bytes(k).unwrap();
    let mut w = vec![0f32; n * k];
    for r in 0..n {
        dequantize_row(ty, &src[r * rb..(r + 1) * rb], &mut w[r * k..(r + 1) * k]).unwrap();
    }
    let (mut y, mut mag) = (vec![0f64; m * n], vec![0f64; m * n]);
    for t in 0..m {
        for r in 0..n {
            for i in 0..k {
                let p = w[r * k + i] as f64 * x[t * k + i] as f64;
                y[t * n + r] += p;
                mag[t * n + r] += p.abs();
            }
        }
    }
    (y, mag)
}

#[test]
fn int8_types_match_the_oracle_bit_for_bit_and_the_reference() {
    let mut rng = Rng(0x9e37);
    let mut ctx = Ctx::new(2).unwrap();
    for ty in INT8_TYPES {
        let k = if ty.is_k_quant() { 512 } else { 96 };
        for (m, n) in [(1, 16), (5, 37), (40, 64)] {
            let src = weight(&mut rng, ty, n, k);
            let b = packed(ty, n, k, &src);
            let w = blob::view(b.get()).unwrap();
            assert_eq!((w.ty(), w.n(), w.k()), (ty, n, k));
            let x = rng.vec(m * k);
            let mut y = vec![f32::NAN; m * n];
            ctx.mul_mat(&w, &x, m, k, &mut y, n).unwrap();
            // The oracle: hetero-sme's portable int8 kernel on its own packing, with ggml's
            // activation scheme.
            let owned = Int8Weight::pack_gguf(ty, &src, n, k).unwrap();
            let mut acts = QActs::with_capacity(m, k);
            let p = Int8Kernel::Portable;
            p.quantize_acts_for(&x, m, k, owned.act_blocks(), &mut acts)
                .unwrap();
            // ggml's q8_0 / q8_1 keep FP16 scales: so does the backend.
            acts.round_scales_to_f16();
            let mut y0 = vec![f32::NAN; m * n];
            p.gemm(&owned, &acts, &mut y0, n).unwrap();
            let same = y.iter().zip(&y0).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{ty:?} m={m} n={n}: differs from the portable oracle");
            // The f64 reference on f32 activations: each x moves by at most half its block's
            // scale (amax/127/2), so |err| <= Σ|w|·amax/254 <= Σ|w·x|-ish; bound it by 1% of
            // Σ|w|·max|x| plus rounding (|x| <= 1 here).
            let (r, _) = reference(ty, &src, n, k, &x, m);
            let rb = ty.row_bytes(k).unwrap();
            for t in 0..m {
                for c in 0..n {
                    let mut wrow = vec![0f32; k];
                    dequantize_row(ty, &src[c * rb..(c + 1) * rb], &mut wrow).unwrap();
                    let sw: f64 = wrow.iter().map(|v| v.abs() as f64).sum();
                    let bound = sw / 254.0 + 1e-4;
                    let e = (y[t * n + c] as f64 - r[t * n + c]).abs();
                    assert!(e <= bound, "{ty:?} ({t},{c}): {e} > {bound}");
                }
            }
        }
    }
}

#[test]
fn f16_matches_the_reference_of_fp16_activations() {
    let mut rng = Rng(77);
    let mut ctx = Ctx::new(2).unwrap();
    for (m, n, k) in [(1, 1, 1), (3, 65, 33), (17, 130, 256), (64, 64, 4097)] {
        let ty = GgmlType::F16;
        let src = weight(&mut rng, ty, n, k);
        let b = packed(ty, n, k, &src);
        let w = blob::view(b.get()).unwrap();
        let x = rng.vec(m * k);
        let mut y = vec![f32::NAN; m * n];
        ctx.mul_mat(&w, &x, m, k, &mut y, n).unwrap();
        // ggml rounds the activations of an F16 weight to FP16: so does the reference; then
        // the products are exact in f64 and the kernel's FP32 sums are off by at most
        // k·2^-24·Σ|w·x| (a generous 2k ulps of the magnitude).
        let x16: Vec<f32> = x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
        let (r, mag) = reference(ty, &src, n, k, &x16, m);
        for i in 0..m * n {
            let bound = 2.0 * k as f64 * f32::EPSILON as f64 * mag[i] + 1e-30;
            let e = (y[i] as f64 - r[i]).abs();
            assert!(e <= bound, "F16 m={m} n={n} k={k} [{i}]: {e} > {bound}");
        }
    }
}

#[test]
fn strides_threads_and_no_allocation() {
    let mut rng = Rng(5);
    let (ty, m, n, k) = (GgmlType::Q4K, 20, 48, 512);
    let src = weight(&mut rng, ty, n, k);
    let b = packed(ty, n, k, &src);
    let w = blob::view(b.get()).unwrap();
    let x = rng.vec(m * k);
    let mut base = vec![f32::NAN; m * n];
    Ctx::new(1)
        .unwrap()
        .mul_mat(&w, &x, m, k, &mut base, n)
        .unwrap();
    // Rows `ldx` apart in, `ldy` apart out: the gaps are never written.
    let (ldx, ldy) = (k + 7, n + 3);
    let mut xs = vec![f32::NAN; (m - 1) * ldx + k];
    for t in 0..m {
        xs[t * ldx..t * ldx + k].copy_from_slice(&x[t * k..(t + 1) * k]);
    }
    for threads in [1, 2, 3] {
        let mut ctx = Ctx::new(threads).unwrap();
        let mut y = vec![f32::NAN; (m - 1) * ldy + n];
        ctx.mul_mat(&w, &xs, m, ldx, &mut y, ldy).unwrap();
        for t in 0..m {
            for c in 0..ldy.min(y.len() - t * ldy) {
                let v = y[t * ldy + c];
                if c < n {
                    assert_eq!(v.to_bits(), base[t * n + c].to_bits(), "threads {threads}");
                } else {
                    assert!(v.is_nan(), "gap written");
                }
            }
        }
        // A second call of the same size allocates nothing (scratch kept).
        let a = hetero_tests::count_allocations(|| {
            ctx.mul_mat(&w, &xs, m, ldx, &mut y, ldy).unwrap();
        });
        assert_eq!(a, 0, "steady-state mul_mat allocated ({threads} threads)");
    }
    assert!(hetero_tests::count_allocations(|| drop(std::hint::black_box(vec![1u8; 8]))) > 0);
}

#[test]
fn every_blob_reads_back_exactly() {
    let mut rng = Rng(11);
    let mut types = INT8_TYPES.to_vec();
    types.push(GgmlType::F16);
    for ty in types {
        let k = if ty.is_k_quant() { 256 } else { 64 };
        for n in [1, 17, 70] {
            // Arbitrary bits: every source bit must survive the packing.
            let src: Vec<u8> = (0..n * ty.row_bytes(k).unwrap())
                .map(|_| rng.next() as u8)
                .collect();
            let b = packed(ty, n, k, &src);
            let mut back = vec![0u8; src.len()];
            blob::unpack(b.get(), 0, &mut back).unwrap();
            assert!(back == src, "{ty:?} n={n}");
            // A sub-range (what ggml's get_tensor asks for with an offset).
            let (o, l) = (src.len() / 3, src.len() / 2);
            let mut part = vec![0u8; l];
            blob::unpack(b.get(), o, &mut part).unwrap();
            assert_eq!(part, src[o..o + l], "{ty:?} n={n} range");
            assert!(blob::unpack(b.get(), src.len() - 1, &mut [0u8; 2]).is_err());
        }
    }
}

#[test]
fn types_and_shapes_not_run_here_are_refused() {
    for ty in [
        GgmlType::F32,
        GgmlType::BF16,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q8_1,
        GgmlType::Other(20),
    ] {
        assert!(
            matches!(
                blob::size(ty, 16, 256),
                Err(hetero_ggml::Error::Unsupported(_))
            ),
            "{ty:?}"
        );
        let mut s = 0usize;
        // SAFETY: a valid out-pointer.
        let st = unsafe { hetero_ggml_weight_size(ty.code(), 16, 256, &mut s) };
        assert_eq!(st, HETERO_GGML_UNSUPPORTED, "{ty:?}");
    }
    // A code outside ggml's table.
    let mut s = 0usize;
    // SAFETY: a valid out-pointer.
    let st = unsafe { hetero_ggml_weight_size(999, 16, 256, &mut s) };
    assert_eq!(st, HETERO_GGML_UNSUPPORTED);
    // K off the block, empty shapes.
    for (ty, n, k) in [
        (GgmlType::Q4_0, 16, 48),
        (GgmlType::Q4K, 16, 288),
        (GgmlType::Q8_0, 0, 64),
        (GgmlType::F16, 4, 0),
    ] {
        // SAFETY: a valid out-pointer.
        let st = unsafe { hetero_ggml_weight_size(ty.code(), n, k, &mut s) };
        assert_eq!(st, HETERO_GGML_INVALID, "{ty:?} n={n} k={k}");
    }
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string owned by this thread, valid until its next failing call.
    unsafe { std::ffi::CStr::from_ptr(hetero_ggml_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn bad_calls_through_the_c_abi_change_nothing() {
    let mut rng = Rng(3);
    let (ty, m, n, k) = (GgmlType::Q4_0, 4u64, 32u64, 64u64);
    let src = weight(&mut rng, ty, n as usize, k as usize);
    let mut size = 0usize;
    // SAFETY: valid pointers throughout; each call below documents what it breaks.
    unsafe {
        assert_eq!(
            hetero_ggml_weight_size(ty.code(), n, k, &mut size),
            HETERO_GGML_OK
        );
        let mut b = Aligned::new(size);
        let dst = b.get_mut().as_mut_ptr();
        // Short source, short destination, misaligned destination, null pointers.
        assert_eq!(
            hetero_ggml_weight_pack(ty.code(), n, k, src.as_ptr(), src.len() - 1, dst, size),
            HETERO_GGML_INVALID
        );
        assert_eq!(
            hetero_ggml_weight_pack(ty.code(), n, k, src.as_ptr(), src.len(), dst, size - 64),
            HETERO_GGML_INVALID
        );
        assert_eq!(
            hetero_ggml_weight_pack(
                ty.code(),
                n,
                k,
                src.as_ptr(),
                src.len(),
                dst.add(2),
                size - 2
            ),
            HETERO_GGML_INVALID
        );
        assert!(last_error().contains("aligned"), "{}", last_error());
        assert_eq!(
            hetero_ggml_weight_pack(ty.code(), n, k, std::ptr::null(), 0, dst, size),
            HETERO_GGML_INVALID
        );
        assert!(b.get().iter().all(|&v| v == 0xEE), "a refused pack wrote");
        assert_eq!(
            hetero_ggml_weight_pack(ty.code(), n, k, src.as_ptr(), src.len(), dst, size),
            HETERO_GGML_OK
        );
        let mut ctx = std::ptr::null_mut();
        assert_eq!(hetero_ggml_ctx_new(2, &mut ctx), HETERO_GGML_OK);
        let x = rng.vec((m * k) as usize);
        let mut y = vec![f32::NAN; (m * n) as usize];
        let call = |blob: *const u8, len: usize, kk: u64, xb: usize, y: &mut [f32]| {
            hetero_ggml_mul_mat(
                ctx,
                blob,
                len,
                kk,
                x.as_ptr(),
                m,
                xb,
                y.as_mut_ptr(),
                (n * 4) as usize,
            )
        };
        // Wrong K, a stride that is not whole floats, a truncated blob, a foreign blob.
        assert_eq!(
            call(dst, size, k + 32, (k * 4) as usize, &mut y),
            HETERO_GGML_INVALID
        );
        assert!(last_error().contains("K"), "{}", last_error());
        assert_eq!(
            call(dst, size, k, (k * 4 + 2) as usize, &mut y),
            HETERO_GGML_INVALID
        );
        assert_eq!(
            call(dst, size - 64, k, (k * 4) as usize, &mut y),
            HETERO_GGML_INVALID
        );
        let mut forged = Aligned::new(size);
        forged.get_mut().copy_from_slice(b.get());
        forged.get_mut()[0] ^= 1; // magic
        assert_eq!(
            call(forged.get().as_ptr(), size, k, (k * 4) as usize, &mut y),
            HETERO_GGML_INVALID
        );
        forged.get_mut().copy_from_slice(b.get());
        forged.get_mut()[12] = 13; // the type: Q5_K with Q4_0's sizes
        assert_eq!(
            call(forged.get().as_ptr(), size, k, (k * 4) as usize, &mut y),
            HETERO_GGML_INVALID
        );
        forged.get_mut().copy_from_slice(b.get());
        forged.get_mut()[16] = 0xFF; // rows: more than the payload holds
        assert_eq!(
            call(forged.get().as_ptr(), size, k, (k * 4) as usize, &mut y),
            HETERO_GGML_INVALID
        );
        assert!(y.iter().all(|v| v.is_nan()), "a refused call wrote y");
        assert_eq!(
            hetero_ggml_mul_mat(
                std::ptr::null_mut(),
                dst,
                size,
                k,
                x.as_ptr(),
                m,
                (k * 4) as usize,
                y.as_mut_ptr(),
                (n * 4) as usize
            ),
            HETERO_GGML_INVALID
        );
        // Random headers never panic (every outcome is a status).
        for i in 0..2000 {
            forged.get_mut().copy_from_slice(b.get());
            let at = (rng.next() as usize) % 64;
            forged.get_mut()[at] = rng.next() as u8;
            let st = call(forged.get().as_ptr(), size, k, (k * 4) as usize, &mut y);
            assert!(
                st == HETERO_GGML_OK || st == HETERO_GGML_INVALID || st == HETERO_GGML_UNSUPPORTED,
                "header byte {at} (iteration {i}): status {st}"
            );
        }
        // The good call works, then the context goes.
        assert_eq!(call(dst, size, k, (k * 4) as usize, &mut y), HETERO_GGML_OK);
        assert!(y.iter().all(|v| v.is_finite()));
        assert_eq!(hetero_ggml_ctx_set_threads(ctx, 3), HETERO_GGML_OK);
        hetero_ggml_ctx_free(ctx);
        hetero_ggml_ctx_free(std::ptr::null_mut());
    }
    assert_eq!(hetero_ggml_abi_version(), hetero_ggml::ABI_VERSION);
}
