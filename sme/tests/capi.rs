//! The C ABI from C (feature `capi-tests`): `tests/c/sme_capi_test.c` (compiled by build.rs with the
//! `cc` crate) calls every exported function the way a host engine does; each result is
//! compared here with the Rust API's, bit for bit. Run: `cargo test --profile ci -p hetero-sme
//! --features capi-tests --test capi`. The same C runs standalone under AddressSanitizer and
//! UndefinedBehaviorSanitizer in `scripts/capi.sh test` (CI stage `capi`).
#![cfg(feature = "capi-tests")]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::Rng;
use hetero_sme::capi::*;
use hetero_sme::{
    dequantize_row, qpack_gguf, qpacked_len, quantize_row, GgmlType, Int8Kernel, Int8Weight,
    Kernel, KernelKind, QActs, QPackedRef, INT8_TYPES,
};

#[link(name = "hetero_sme_ctest", kind = "static")]
extern "C" {
    fn ctest_sme_matmul(
        v: u32,
        ty: u32,
        m: usize,
        n: usize,
        k: usize,
        w: *const u8,
        w_len: usize,
        x: *const f32,
        ldx: usize,
        ldd: usize,
        y_tiles: *mut f32,
        y_ukernel: *mut f32,
        y_threads: *mut f32,
        y_pool: *mut f32,
        rhs_out: *mut u8,
        rhs_cap: usize,
        lhs_out: *mut u8,
        lhs_cap: usize,
    ) -> i32;
    fn ctest_sme_rows(
        ty: u32,
        n: usize,
        src: *const f32,
        q: *mut u8,
        q_len: usize,
        deq: *mut f32,
    ) -> i32;
    fn ctest_sme_info(variants: *mut u32, cap: usize, count: *mut usize) -> i32;
    fn ctest_sme_bad_inputs(
        int8_v: u32,
        gemv_v: u32,
        unavailable_v: u32,
        w32: *const u8,
        x: *const f32,
    ) -> i32;
    fn example_matmul_q4_0(
        w: *const u8,
        n: usize,
        k: usize,
        x: *const f32,
        m: usize,
        y: *mut f32,
    ) -> i32;
}

/// The poison every output starts as (a NaN no kernel produces).
const POISON: u32 = 0x7fc0_dead;

/// GGUF bytes, 2-byte aligned (the block types hold FP16 scales).
struct Gguf(Vec<u16>, usize);

impl Gguf {
    fn bytes(&self) -> &[u8] {
        // SAFETY: u16 storage viewed as its bytes (len bytes of the 2*len available).
        unsafe { core::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.1) }
    }
}

/// A random GGUF weight of `n` rows × `k` values of `ty`, quantized by the Rust quantizer.
fn weight(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Gguf {
    let rb = ty.row_bytes(k).expect("whole blocks");
    let mut g = Gguf(vec![0u16; (n * rb).div_ceil(2)], n * rb);
    // SAFETY: as in `bytes`, exclusively.
    let bytes = unsafe { core::slice::from_raw_parts_mut(g.0.as_mut_ptr().cast::<u8>(), g.1) };
    for r in 0..n {
        let row: Vec<f32> = (0..k).map(|_| rng.f32() * (1.0 + (r % 3) as f32)).collect();
        quantize_row(ty, &row, &mut bytes[r * rb..(r + 1) * rb]).expect("quantize");
    }
    g
}

fn variants() -> Vec<u32> {
    let mut v = vec![0u32; 16];
    let mut count = 0usize;
    // SAFETY: 16 writable slots, one count.
    let fails = unsafe { ctest_sme_info(v.as_mut_ptr(), v.len(), &mut count) };
    assert_eq!(fails, 0, "ctest_sme_info: {fails} failed checks (stderr)");
    v.truncate(count);
    v
}

fn int8_kernel(v: u32) -> Int8Kernel {
    let name = match v {
        1 => "portable",
        4 => "avx2",
        2 => "avx512-vnni",
        3 => "amx-int8",
        _ => panic!("not an int8 variant: {v}"),
    };
    Int8Kernel::available()
        .into_iter()
        .find(|k| k.name() == name)
        .expect("listed by the C API as available")
}

fn gemv_kernel(v: u32) -> Kernel {
    let kind = match v {
        17 => KernelKind::Portable,
        18 => KernelKind::Avx512,
        19 => KernelKind::Neon,
        _ => panic!("not a GEMV variant: {v}"),
    };
    Kernel::new(kind).expect("listed by the C API as available")
}

#[allow(clippy::too_many_arguments)]
/// The Rust API's result and packed bytes: (y with stride ldd, rhs payload, lhs payload).
fn rust_side(
    v: u32,
    ty: GgmlType,
    w: &Gguf,
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
    ldd: usize,
) -> (Vec<f32>, Vec<u8>, Vec<u8>) {
    let mut y = vec![f32::from_bits(POISON); if m == 0 { 0 } else { (m - 1) * ldd + n }];
    if v < 16 {
        let kern = int8_kernel(v);
        let pw = Int8Weight::pack_gguf(ty, w.bytes(), n, k).expect("pack");
        let mut acts = QActs::with_capacity(m.max(1), k);
        kern.quantize_acts_for(x, m, k, pw.act_blocks(), &mut acts)
            .expect("quantize");
        kern.gemm(&pw, &acts, &mut y, ldd).expect("gemm");
        let mut rhs = pw.quant_bytes().to_vec();
        rhs.extend(pw.scale_words().iter().flat_map(|s| s.to_ne_bytes()));
        let mut lhs = Vec::new();
        let per256 = pw.act_blocks().per256;
        for r in 0..m {
            let q = if per256 {
                acts.qk_row(r)
            } else {
                acts.q_row(r)
            };
            lhs.extend(q.iter().map(|&b| b as u8));
        }
        lhs.resize(lhs.len().next_multiple_of(64), 0);
        for r in 0..m {
            if per256 {
                for s in acts.super_row(r) {
                    lhs.extend(s.d.to_ne_bytes());
                    s.bsums32.iter().for_each(|b| lhs.extend(b.to_ne_bytes()));
                    s.n32.iter().for_each(|b| lhs.extend(b.to_ne_bytes()));
                }
            } else {
                for b in acts.meta_row(r) {
                    lhs.extend(b.d.to_ne_bytes());
                    lhs.extend(b.s.to_ne_bytes());
                    lhs.extend(b.n8.to_ne_bytes());
                    lhs.extend(b.n128.to_ne_bytes());
                }
            }
        }
        (y, rhs, lhs)
    } else {
        let kern = gemv_kernel(v);
        let mut rhs = vec![0u8; qpacked_len(ty, k, n).expect("len")];
        qpack_gguf(ty, w.bytes(), k, n, 0..n, &mut rhs).expect("qpack");
        let wp = QPackedRef::new(&rhs, ty, k, n).expect("view");
        // The Rust GEMV takes at most 16 rows a call: 16-row chunks (rows are independent).
        for r0 in (0..m).step_by(16) {
            let rows = (m - r0).min(16);
            let yr = &mut y[r0 * ldd..];
            let len = ((rows - 1) * ldd + n).min(yr.len());
            kern.qgemv_packed(
                &x[r0 * k..(r0 + rows) * k],
                rows,
                k,
                wp,
                &mut yr[..len],
                ldd,
            )
            .expect("gemv");
        }
        let lhs = x.iter().flat_map(|f| f.to_ne_bytes()).collect();
        (y, rhs, lhs)
    }
}

fn same_bits(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}

#[test]
fn every_variant_from_c_equals_the_rust_api() {
    let vars = variants();
    eprintln!(
        "variants available here: {:?}",
        vars.iter().map(|&v| v.to_string()).collect::<Vec<_>>()
    );
    let mut rng = Rng::new(27);
    let mut runs = 0;
    for &v in &vars {
        for ty in INT8_TYPES {
            let ks: &[usize] = if ty.is_k_quant() {
                &[256, 512]
            } else {
                &[32, 96]
            };
            for &k in ks {
                for &(m, n) in &[(1, 1), (1, 17), (3, 48), (17, 16), (33, 40), (70, 17)] {
                    let w = weight(&mut rng, ty, n, k);
                    let ldx = k + 5;
                    let ldd = n + 3;
                    let x: Vec<f32> = rng.vec(m * k).iter().map(|v| v * 4.0).collect();
                    let mut xs = vec![f32::NAN; (m - 1) * ldx + k];
                    for r in 0..m {
                        xs[r * ldx..r * ldx + k].copy_from_slice(&x[r * k..(r + 1) * k]);
                    }
                    let (want, rhs_want, lhs_want) = rust_side(v, ty, &w, &x, m, n, k, ldd);
                    let len = want.len();
                    let mut ys: Vec<Vec<f32>> =
                        (0..4).map(|_| vec![f32::from_bits(POISON); len]).collect();
                    let (mut rhs, mut lhs) = (
                        vec![0u8; rhs_want.len() + 64],
                        vec![0u8; lhs_want.len() + 64],
                    );
                    let [a, b, c, d] = &mut ys[..] else {
                        unreachable!()
                    };
                    // SAFETY: every buffer is as long as the arguments say.
                    let rc = unsafe {
                        ctest_sme_matmul(
                            v,
                            ty.code(),
                            m,
                            n,
                            k,
                            w.bytes().as_ptr(),
                            w.bytes().len(),
                            xs.as_ptr(),
                            ldx,
                            ldd,
                            a.as_mut_ptr(),
                            b.as_mut_ptr(),
                            c.as_mut_ptr(),
                            d.as_mut_ptr(),
                            rhs.as_mut_ptr(),
                            rhs.len(),
                            lhs.as_mut_ptr(),
                            lhs.len(),
                        )
                    };
                    let case = format!("variant {v} {ty} m={m} n={n} k={k}");
                    assert_eq!(rc, 0, "{case}: the C side failed (code {rc}, stderr)");
                    for (i, y) in ys.iter().enumerate() {
                        let path = ["tiles", "ukernel struct", "3 C threads", "pool"][i];
                        assert_eq!(
                            same_bits(y, &want),
                            None,
                            "{case}: {path} differs from Rust"
                        );
                    }
                    // Packed bytes: the Rust API's layout behind the 64-byte header.
                    assert_eq!(&rhs[..4], b"HSME", "{case}");
                    assert_eq!(u32::from_ne_bytes(rhs[8..12].try_into().unwrap()), v);
                    assert_eq!(
                        u32::from_ne_bytes(rhs[12..16].try_into().unwrap()),
                        ty.code()
                    );
                    assert!(
                        rhs[64..64 + rhs_want.len()] == rhs_want[..],
                        "{case}: packed weights differ"
                    );
                    assert!(
                        lhs[64..64 + lhs_want.len()] == lhs_want[..],
                        "{case}: packed activations differ"
                    );
                    // Padding columns n..ldd untouched (the poison is there in `want` too).
                    runs += 1;
                }
            }
        }
    }
    assert!(runs > 0);
    eprintln!("{runs} cases, each through 4 C paths");
}

#[test]
fn rows_from_c_equal_the_rust_api() {
    let mut rng = Rng::new(5);
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ] {
        let n = 512;
        let src = rng.vec(n);
        let qb = ty.row_bytes(n).unwrap();
        let mut q = vec![0u16; qb.div_ceil(2)];
        let mut deq = vec![f32::NAN; n];
        // SAFETY: qb bytes of the u16 buffer, n floats.
        let rc = unsafe {
            ctest_sme_rows(
                ty.code(),
                n,
                src.as_ptr(),
                q.as_mut_ptr().cast(),
                qb,
                deq.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "{ty}");
        let mut qr = vec![0u8; qb];
        quantize_row(ty, &src, &mut qr).unwrap();
        let mut dr = vec![0f32; n];
        dequantize_row(ty, &qr, &mut dr).unwrap();
        // SAFETY: the u16 buffer's first qb bytes.
        let qc = unsafe { core::slice::from_raw_parts(q.as_ptr().cast::<u8>(), qb) };
        assert_eq!(qc, &qr[..], "{ty}: quantized bytes");
        assert_eq!(same_bits(&deq, &dr), None, "{ty}: dequantized values");
    }
}

#[test]
fn bad_input_gives_a_status_and_writes_nothing() {
    let vars = variants();
    let int8 = *vars.iter().rfind(|&&v| v < 16).expect("portable int8");
    let gemv = *vars.iter().rfind(|&&v| v > 16).expect("portable gemv");
    // A known variant this CPU cannot run (NEON on x86-64, AVX-512 on aarch64): always one.
    let unavailable = [19, 2, 3, 18]
        .into_iter()
        .find(|v| !vars.contains(v))
        .unwrap_or(0);
    assert_ne!(unavailable, 0, "expected a variant this CPU lacks");
    let mut rng = Rng::new(9);
    let w = weight(&mut rng, GgmlType::Q4_0, 32, 64);
    let x = rng.vec(4 * 64);
    // SAFETY: w is 32 rows of 64 Q4_0 values, x 4 x 64 floats, as the C function documents.
    let fails =
        unsafe { ctest_sme_bad_inputs(int8, gemv, unavailable, w.bytes().as_ptr(), x.as_ptr()) };
    assert_eq!(
        fails, 0,
        "{fails} bad-input checks failed (stderr names them)"
    );
}

#[test]
fn readme_example_runs_and_equals_the_rust_api() {
    let (m, n, k) = (5, 40, 128);
    let mut rng = Rng::new(11);
    let w = weight(&mut rng, GgmlType::Q4_0, n, k);
    let x = rng.vec(m * k);
    let mut y = vec![f32::from_bits(POISON); m * n];
    // SAFETY: shapes as documented by the example.
    let rc =
        unsafe { example_matmul_q4_0(w.bytes().as_ptr(), n, k, x.as_ptr(), m, y.as_mut_ptr()) };
    assert_eq!(rc, 0);
    let kern = Int8Kernel::best();
    let pw = Int8Weight::pack_gguf(GgmlType::Q4_0, w.bytes(), n, k).unwrap();
    let mut acts = QActs::with_capacity(m, k);
    kern.quantize_acts(&x, m, k, &mut acts).unwrap();
    let mut want = vec![0f32; m * n];
    kern.gemm(&pw, &acts, &mut want, n).unwrap();
    assert_eq!(same_bits(&y, &want), None);
    // The README shows this very file.
    let readme = include_str!("../README.md");
    let example = include_str!("c/sme_example.c");
    let body = &example[example.find("#include <stdio.h>").expect("example start")..];
    assert!(
        readme.contains(body),
        "README's From C example differs from tests/c/sme_example.c"
    );
}

/// Counts this thread's allocations while armed (the C paths must make none).
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only const thread-locals
// (no allocation, no re-entry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ARMED.with(Cell::get) {
            ALLOCS.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if ARMED.with(Cell::get) {
            ALLOCS.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocs_in(f: impl FnOnce()) -> usize {
    ALLOCS.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    ALLOCS.with(Cell::get)
}

/// A 64-aligned buffer of `n` bytes.
fn buf64(n: usize) -> Vec<u128> {
    vec![0u128; n.div_ceil(16) + 4]
}

/// No C path allocates: sizes, both packers (the int8 weight packer packs in place into the
/// caller's buffer), run_matmul, and the pool convenience call (after the pool is made), for
/// every available variant and a 32-block and a K-quant type; refusals too.
#[test]
fn the_c_paths_allocate_nothing() {
    // The counter sees allocations (the int8 packer used to make one per call).
    assert_eq!(allocs_in(|| drop(std::hint::black_box(vec![1u8; 64]))), 1);
    let (m, n, k) = (5, 48, 256);
    let mut rng = Rng::new(21);
    let pool = {
        let mut p = core::ptr::null_mut();
        // SAFETY: a valid output.
        assert_eq!(unsafe { hetero_sme_pool_new(2, &mut p) }, HETERO_SME_OK);
        p
    };
    for v in variants() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4K] {
            let w = weight(&mut rng, ty, n, k);
            let x = rng.vec(m * k);
            let (mut rs, mut ls) = (0usize, 0usize);
            let mut rhs = Vec::new();
            let mut lhs = Vec::new();
            let mut y = vec![0f32; m * n];
            // SAFETY: valid outputs.
            let made = allocs_in(|| unsafe {
                assert_eq!(
                    hetero_sme_matmul_get_rhs_packed_size(v, ty.code(), n, k, &mut rs),
                    HETERO_SME_OK
                );
                assert_eq!(
                    hetero_sme_matmul_get_lhs_packed_size(v, ty.code(), m, k, &mut ls),
                    HETERO_SME_OK
                );
            });
            assert_eq!(made, 0, "variant {v} {ty}: size queries allocated");
            rhs.extend(buf64(rs + 64));
            lhs.extend(buf64(ls + 64));
            let at64 = |b: &mut Vec<u128>| {
                let p = b.as_mut_ptr().cast::<u8>();
                p.wrapping_add(p.align_offset(64))
            };
            let (r, l) = (at64(&mut rhs), at64(&mut lhs));
            // SAFETY: buffers sized by the queries, 64-aligned (u128 vectors offset to 64),
            // valid for the lengths passed.
            let made = allocs_in(|| unsafe {
                let wb = w.bytes();
                assert_eq!(
                    hetero_sme_matmul_run_rhs_pack(
                        v,
                        ty.code(),
                        n,
                        k,
                        wb.as_ptr(),
                        wb.len(),
                        r,
                        rs
                    ),
                    HETERO_SME_OK
                );
                assert_eq!(
                    hetero_sme_matmul_run_lhs_pack(v, ty.code(), m, k, x.as_ptr(), m * k, k, l, ls),
                    HETERO_SME_OK
                );
                assert_eq!(
                    hetero_sme_matmul_run_matmul(
                        v,
                        0,
                        m,
                        0,
                        n,
                        l,
                        ls,
                        r,
                        rs,
                        y.as_mut_ptr(),
                        m * n,
                        n
                    ),
                    HETERO_SME_OK
                );
                assert_eq!(
                    hetero_sme_matmul_pool(pool, v, l, ls, r, rs, y.as_mut_ptr(), m * n, n),
                    HETERO_SME_OK
                );
                // A refusal records its text without allocating.
                assert_eq!(
                    hetero_sme_matmul_run_matmul(v, 0, m, 0, n, l, ls, r, rs, y.as_mut_ptr(), 1, n),
                    HETERO_SME_BUFFER_TOO_SMALL
                );
            });
            assert_eq!(made, 0, "variant {v} {ty}: packing or running allocated");
        }
    }
    // SAFETY: from hetero_sme_pool_new, freed once.
    unsafe { hetero_sme_pool_free(pool) };
}

/// The C API lists exactly the Rust API's available int8 kernels (so an AVX2-only CPU gets the
/// AVX2 variant), and its best variant per family is the Rust API's dispatch choice.
#[test]
fn c_variants_and_best_match_the_rust_dispatch() {
    let vars = variants();
    let c_int8: Vec<&str> = vars
        .iter()
        .filter(|&&v| {
            hetero_sme_variant_family(v) == hetero_sme_family::HETERO_SME_FAMILY_INT8_GEMM as u32
        })
        .map(|&v| int8_kernel(v).name())
        .collect();
    let rust_int8: Vec<&str> = Int8Kernel::available().iter().map(|k| k.name()).collect();
    let (mut a, mut b) = (c_int8.clone(), rust_int8.clone());
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "C int8 variants {c_int8:?} vs Rust's {rust_int8:?}");
    let mut best = 0u32;
    assert_eq!(
        // SAFETY: a valid output.
        unsafe {
            hetero_sme_best_variant(
                hetero_sme_family::HETERO_SME_FAMILY_INT8_GEMM as u32,
                &mut best,
            )
        },
        HETERO_SME_OK
    );
    assert_eq!(int8_kernel(best).name(), Int8Kernel::best().name());
    assert_eq!(
        // SAFETY: a valid output.
        unsafe {
            hetero_sme_best_variant(hetero_sme_family::HETERO_SME_FAMILY_QGEMV as u32, &mut best)
        },
        HETERO_SME_OK
    );
    assert_eq!(gemv_kernel(best).kind(), Kernel::best_gemv().kind());
    // Every int8 id this build knows names itself; the reserved aarch64 ids name nothing yet.
    for id in [1u32, 2, 3, 4] {
        assert_eq!(
            hetero_sme_variant_family(id),
            hetero_sme_family::HETERO_SME_FAMILY_INT8_GEMM as u32
        );
    }
    for id in [5u32, 6] {
        assert_eq!(hetero_sme_variant_family(id), 0, "reserved id {id}");
    }
}

/// A tile that fails inside `hetero_sme_matmul_pool`'s pool reports its own status and text
/// (here a weight payload too short for its shape: BUFFER_TOO_SMALL), not HETERO_SME_PANIC.
#[test]
fn a_failing_pool_tile_reports_its_error() {
    let (st, text) = hetero_sme::capi::failing_tile_for_test();
    assert_eq!(st, HETERO_SME_BUFFER_TOO_SMALL, "{text}");
    assert!(!text.contains("panic"), "{text}");
}
