//! The SME2 and SME1 tile kernels against an f64 reference over edge shapes, through a local
//! row-block driver (tests/aarch64_common). Runs under QEMU: SME2 at SVL 512 and 256
//! (`-cpu max,sme512=on` / `sme256=on`, HETERO_REQUIRE=sme-emu) and SME1 under QEMU 10.0
//! (HETERO_REQUIRE=sme1-emu); the SME1 kernel also runs on SME2 CPUs.
#![cfg(target_arch = "aarch64")]

mod aarch64_common;

use aarch64_common::*;
use hetero_sme::arch::aarch64::{lhs_block_len, pack_lhs_f32, Sme1, Sme2, SmeUnavailable};

const EDGE: [usize; 12] = [1, 2, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129];
/// Sentinel for C cells the kernel must not touch (a NaN with a payload).
const GUARD: u32 = 0x7fc0_beef;

fn sme2() -> Option<Tile> {
    hetero_tests::require("sme-emu", Sme2::probe()).map(Tile::Sme2)
}

fn sme1() -> Option<Tile> {
    hetero_tests::require("sme1-emu", Sme1::probe()).map(Tile::Sme1)
}

/// One case: random A, W, bias, optional accumulate; C poisoned with NaN (or random when
/// accumulating), guard columns (ldc > n) and a guard tail checked bit-exact afterwards.
#[allow(clippy::too_many_arguments)]
fn case(
    tile: Tile,
    m: usize,
    n: usize,
    k: usize,
    f16_lhs: bool,
    bias: bool,
    acc: bool,
    group: usize,
    seed: u64,
) {
    let mut rng = Rng::new(seed ^ ((m * 1_000_003 + n * 1009 + k) as u64));
    let (lda, ldw, ldc) = (k + 1, n + 2, n + 3);
    let a = rng.vec(m * lda);
    let w = rng.vec(k * ldw);
    let b = rng.vec(n);
    let packed = pack_w(&w, ldw, k, n);
    let a16: Vec<u16> = a.iter().map(|&x| f16(x)).collect();
    let tail = 7;
    let mut c = vec![f32::from_bits(GUARD); m * ldc + tail];
    for i in 0..m {
        for j in 0..n {
            c[i * ldc + j] = if acc { rng.unit() } else { f32::NAN };
        }
    }
    let c_old = c.clone();
    let (want, mag) = reference(
        &a16,
        lda,
        m,
        k,
        n,
        &w,
        ldw,
        bias.then_some(&b[..]),
        acc.then_some((&c_old[..], ldc)),
    );
    let src = if f16_lhs { A::F16(&a16) } else { A::F32(&a) };
    drive(
        tile,
        &src,
        lda,
        m,
        k,
        n,
        &packed,
        &mut c,
        ldc,
        bias.then_some(&b[..]),
        acc,
        group,
    );
    for i in 0..m {
        for j in 0..ldc {
            let got = c[i * ldc + j];
            if j >= n {
                assert_eq!(
                    got.to_bits(),
                    GUARD,
                    "{tile:?} m{m} n{n} k{k}: guard ({i},{j}) overwritten"
                );
                continue;
            }
            let (wv, tol) = (want[i * n + j], tolerance(k, mag[i * n + j]));
            assert!(
                (got as f64 - wv).abs() <= tol,
                "{tile:?} m{m} n{n} k{k} f16_lhs={f16_lhs} bias={bias} acc={acc} group={group}: \
                 C[{i}][{j}] = {got}, want {wv} (tol {tol:e})"
            );
        }
    }
    for (t, v) in c[m * ldc..].iter().enumerate() {
        assert_eq!(
            v.to_bits(),
            GUARD,
            "{tile:?} m{m} n{n} k{k}: tail guard {t} overwritten"
        );
    }
}

/// All N×K edge pairs with M cycling through the edge set, then all M with a few (N, K). The
/// four (bias, accumulate) combinations cycle over the cases, F16 LHS on every third, panel
/// groups 1, 2 and "all" per call.
fn edge_shapes(tile: Tile, seed: u64) {
    let mut idx = 0usize;
    let mut next = |m: usize, n: usize, k: usize| {
        let (bias, acc) = (idx % 2 == 1, (idx / 2) % 2 == 1);
        let group = [1, 2, usize::MAX][idx % 3];
        case(tile, m, n, k, idx % 3 == 1, bias, acc, group, seed);
        idx += 1;
    };
    for (i, &n) in EDGE.iter().enumerate() {
        for (j, &k) in EDGE.iter().enumerate() {
            next(EDGE[(i * EDGE.len() + j) % EDGE.len()], n, k);
        }
    }
    for &m in &EDGE {
        for &(n, k) in &[(65, 17), (129, 64), (1, 1)] {
            next(m, n, k);
        }
    }
}

fn larger_shapes(tile: Tile) {
    for (i, &(m, n, k)) in [
        (33, 576, 96),
        (20, 200, 576),
        (17, 1536, 16),
        (40, 192, 255),
    ]
    .iter()
    .enumerate()
    {
        case(
            tile,
            m,
            n,
            k,
            i % 2 == 0,
            true,
            i % 2 == 1,
            [usize::MAX, 3][i % 2],
            0xb16,
        );
    }
}

#[test]
fn sme2_edge_shapes() {
    let Some(t) = sme2() else { return };
    edge_shapes(t, 1);
}

#[test]
fn sme2_larger_shapes() {
    let Some(t) = sme2() else { return };
    larger_shapes(t);
}

#[test]
fn sme1_edge_shapes() {
    let Some(t) = sme1() else { return };
    edge_shapes(t, 3);
}

#[test]
fn sme1_larger_shapes() {
    let Some(t) = sme1() else { return };
    larger_shapes(t);
}

#[test]
fn k_zero_gives_bias_or_keeps_c() {
    for t in [sme2(), sme1()].into_iter().flatten() {
        // K = 0: kp = 0, no panel data; C = bias (store) or C + bias (accumulate).
        let tr = t.tile_rows();
        let lhs = [0u16; 1];
        let panels = [0u16; 1];
        let bias: Vec<f32> = (0..70).map(|j| j as f32).collect();
        let mut c = vec![f32::NAN; tr * 70];
        // SAFETY: kp = 0 so no LHS/panel element is read; C is tr rows of 70; bias has 70.
        unsafe {
            t.block(
                lhs.as_ptr(),
                panels.as_ptr(),
                0,
                2,
                c.as_mut_ptr(),
                70,
                tr,
                70,
                false,
                bias.as_ptr(),
            )
        };
        assert!(
            c.iter().enumerate().all(|(i, &v)| v == (i % 70) as f32),
            "{t:?}"
        );
        // SAFETY: as above.
        unsafe {
            t.block(
                lhs.as_ptr(),
                panels.as_ptr(),
                0,
                2,
                c.as_mut_ptr(),
                70,
                tr,
                70,
                true,
                bias.as_ptr(),
            )
        };
        assert!(
            c.iter()
                .enumerate()
                .all(|(i, &v)| v == 2.0 * (i % 70) as f32),
            "{t:?}"
        );
    }
}

#[test]
fn tokens_agree_with_hwcap2() {
    use hetero_sme::arch::aarch64::{hwcap2, HWCAP2_SME, HWCAP2_SME2};
    let caps = hwcap2();
    assert_eq!(
        Sme2::try_new().is_some(),
        caps & HWCAP2_SME2 != 0 && Sme2::probe().is_ok()
    );
    if caps & HWCAP2_SME == 0 {
        assert!(Sme1::try_new().is_none() && Sme2::try_new().is_none());
    }
    // SVLs other than 128/256/512 bits are refused with a typed reason, never run.
    for r in [
        Sme2::probe().map(|t| t.svl_bits()),
        Sme1::probe().map(|t| t.svl_bits()),
    ] {
        match r {
            Ok(bits) => assert!([128, 256, 512].contains(&bits)),
            Err(SmeUnavailable::UnsupportedSvl { bits }) => {
                assert!(!(128..=512).contains(&bits));
                eprintln!("refused: {}", SmeUnavailable::UnsupportedSvl { bits });
            }
            Err(_) => {}
        }
    }
    if let (Some(a), Some(b)) = (Sme2::try_new(), Sme1::try_new()) {
        assert_eq!(a.tile_rows(), b.tile_rows());
        assert_eq!(a.tile_rows() * 32, a.svl_bits());
    }
}

#[test]
fn pack_lhs_layout() {
    // Independent of the CPU: 3 rows, K = 5, tile_rows 4.
    let a: Vec<f32> = (0..3 * 6).map(|x| x as f32).collect();
    let mut dst = vec![0xaaaau16; lhs_block_len(4, 5) + 2];
    pack_lhs_f32(&a, 6, 3, 5, 4, &mut dst).unwrap();
    for q in 0..3 {
        for i in 0..4 {
            for j in 0..2 {
                let kk = 2 * q + j;
                let want = if i < 3 && kk < 5 {
                    f16((i * 6 + kk) as f32)
                } else {
                    0
                };
                assert_eq!(dst[(q * 4 + i) * 2 + j], want, "q{q} i{i} j{j}");
            }
        }
    }
    assert_eq!(&dst[24..], &[0xaaaa, 0xaaaa], "wrote past lhs_block_len");
}

#[test]
fn crate_packer_matches_the_format_the_kernels_read() {
    use hetero_sme::{pack_f32, packed_len, Layout, PackedFormat, WeightSource};
    // The crate's packer (row-major source, a column range packed standalone) must produce
    // exactly the layout this file's independent packer writes and the kernels consume.
    let (k, n, n0, n1) = (37, 200, 17, 150);
    let mut rng = Rng::new(99);
    let w = rng.vec(k * n);
    let mut dst = vec![0xffffu16; packed_len(k, n1 - n0)];
    let src = WeightSource {
        data: &w,
        k,
        n,
        ld: n,
        layout: Layout::RowMajor,
    };
    pack_f32(&src, n0..n1, PackedFormat::F16, &mut dst).unwrap();
    let shard: Vec<f32> = (0..k)
        .flat_map(|r| w[r * n + n0..r * n + n1].to_vec())
        .collect();
    assert_eq!(dst, pack_w(&shard, n1 - n0, k, n1 - n0));
    for t in [sme2(), sme1()].into_iter().flatten() {
        let m = 5;
        let a = rng.vec(m * k);
        let a16: Vec<u16> = a.iter().map(|&x| f16(x)).collect();
        let mut c = vec![f32::NAN; m * (n1 - n0)];
        drive(
            t,
            &A::F32(&a),
            k,
            m,
            k,
            n1 - n0,
            &dst,
            &mut c,
            n1 - n0,
            None,
            false,
            2,
        );
        let (want, mag) = reference(&a16, k, m, k, n1 - n0, &shard, n1 - n0, None, None);
        for (i, (&g, (&wv, &mg))) in c.iter().zip(want.iter().zip(&mag)).enumerate() {
            assert!(
                (g as f64 - wv).abs() <= tolerance(k, mg),
                "{t:?} C[{i}] = {g}, want {wv}"
            );
        }
    }
}

#[test]
fn pack_lhs_f32_rounds_like_half() {
    // The vector path (8 at a time, fcvtn) and the scalar tail must both round like
    // half::f16::from_f32: ties, overflow to infinity, subnormals, signed zero, NaN.
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65520.0,
        1e6,
        -1e6,
        f32::INFINITY,
        f32::NEG_INFINITY,
        6.0e-8,
        2.9e-8,
        3.0e-8,
        1.0e-5,
        -1.0e-5,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        f32::MIN_POSITIVE,
        0.1,
        1.0 / 3.0,
        2049.0,
        2051.0,
    ];
    let mut rng = Rng::new(5);
    for &(rows, k, tr) in &[(3, 23, 4), (16, 40, 16), (1, 8, 8), (8, 17, 8), (2, 1, 16)] {
        let lda = k + 3;
        let a: Vec<f32> = (0..rows * lda)
            .map(|i| {
                if i % 5 == 0 {
                    specials[(i / 5) % specials.len()]
                } else {
                    rng.unit() * 100.0
                }
            })
            .collect();
        let mut dst = vec![0xaaaau16; lhs_block_len(tr, k) + 3];
        pack_lhs_f32(&a, lda, rows, k, tr, &mut dst).unwrap();
        for q in 0..k.div_ceil(2) {
            for i in 0..tr {
                for j in 0..2 {
                    let kk = 2 * q + j;
                    let want = if i < rows && kk < k {
                        f16(a[i * lda + kk])
                    } else {
                        0
                    };
                    assert_eq!(
                        dst[(q * tr + i) * 2 + j],
                        want,
                        "rows{rows} k{k} q{q} i{i} j{j}"
                    );
                }
            }
        }
        assert!(dst[lhs_block_len(tr, k)..].iter().all(|&v| v == 0xaaaa));
    }
    // NaN stays NaN (payload may differ).
    let a = [f32::NAN; 8];
    let mut dst = vec![0u16; lhs_block_len(1, 8)];
    pack_lhs_f32(&a, 8, 1, 8, 1, &mut dst).unwrap();
    assert!(dst.iter().all(|&h| h & 0x7c00 == 0x7c00 && h & 0x03ff != 0));
}

/// `len` elements of `T` placed so that the last one ends exactly at a PROT_NONE guard page:
/// any access past the extent faults (the test process dies), under QEMU as on hardware.
struct Guarded<T> {
    map: *mut libc::c_void,
    map_len: usize,
    ptr: *mut T,
}

impl<T: Copy> Guarded<T> {
    fn new(data: &[T]) -> Self {
        let page = 65536; // covers 4K/16K/64K pages
        let bytes = core::mem::size_of_val(data);
        let body = bytes.div_ceil(page) * page;
        let map_len = body + page;
        // SAFETY: anonymous private mapping, no file; checked for MAP_FAILED below.
        let map = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: `map + body` is the last page of the mapping we own.
        let rc =
            unsafe { libc::mprotect(map.cast::<u8>().add(body).cast(), page, libc::PROT_NONE) };
        assert_eq!(rc, 0);
        // SAFETY: body >= bytes, so ptr..ptr+bytes lies in the writable part, ending at the guard;
        // it is aligned for T because the guard is page aligned and bytes is a multiple of size_of T.
        let ptr = unsafe { map.cast::<u8>().add(body - bytes).cast::<T>() };
        // SAFETY: ptr is valid for `data.len()` writes of T (above) and does not overlap `data`.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        Self { map, map_len, ptr }
    }
}

impl<T> Drop for Guarded<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference into it outlives self.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

#[test]
fn kernels_touch_nothing_past_their_extents() {
    for t in [sme2(), sme1()].into_iter().flatten() {
        let tr = t.tile_rows();
        for &(rows, cols, npanels, k, acc) in &[
            (tr, 64, 1, 1usize, false),
            (1, 1, 1, 2, true),
            (tr - 1, 130, 3, 7, true),
            (tr, 192, 3, 64, false),
            (3, 65, 2, 3, true),
        ] {
            let kp = k.div_ceil(2);
            let ldc = cols + 1;
            let mut rng = Rng::new(k as u64);
            let lhs: Vec<u16> = (0..lhs_block_len(tr, k)).map(|_| f16(rng.unit())).collect();
            let panels: Vec<u16> = (0..npanels * kp * 128).map(|_| f16(rng.unit())).collect();
            let bias = rng.vec(cols);
            let c0 = rng.vec((rows - 1) * ldc + cols);
            let (gl, gp, gb, gc) = (
                Guarded::new(&lhs),
                Guarded::new(&panels),
                Guarded::new(&bias),
                Guarded::new(&c0),
            );
            // SAFETY: each pointer is valid for exactly the extent the contract names (and faults
            // one element later); rows <= tile_rows; cols <= 64 * npanels.
            unsafe {
                t.block(
                    gl.ptr, gp.ptr, kp, npanels, gc.ptr, ldc, rows, cols, acc, gb.ptr,
                )
            };
            // SAFETY: gc.ptr holds c0.len() initialized floats.
            let c = unsafe { core::slice::from_raw_parts(gc.ptr, c0.len()) };
            // Spot-check the result so the call is known to have run: first element.
            let mut s = if acc { c0[0] as f64 } else { 0.0 } + bias[0] as f64;
            // Raw buffers: the kernel multiplies whole k-pairs (packers zero the padding).
            for kk in 0..2 * kp {
                let (q, j) = (kk / 2, kk % 2);
                s += aarch64_common::f16_to_f64(lhs[q * tr * 2 + j])
                    * aarch64_common::f16_to_f64(panels[q * 128 + j]);
            }
            assert!((c[0] as f64 - s).abs() < 1e-4, "{t:?}: {} vs {s}", c[0]);
        }
    }
}

#[test]
fn pack_lhs_rejects_bad_input_without_writing() {
    use hetero_sme::Error;
    let a = vec![1.0f32; 4 * 8];
    let mut dst = vec![0xBEEFu16; lhs_block_len(4, 8)];
    // More rows than one tile holds.
    assert!(matches!(
        pack_lhs_f32(&a, 8, 5, 8, 4, &mut dst),
        Err(Error::TooManyRows { max: 4, got: 5 })
    ));
    // Destination too short.
    let mut short = vec![0xBEEFu16; lhs_block_len(4, 8) - 1];
    assert!(matches!(
        pack_lhs_f32(&a, 8, 4, 8, 4, &mut short),
        Err(Error::BufferTooSmall { .. })
    ));
    assert!(short.iter().all(|&x| x == 0xBEEF));
    // Source too short for rows x lda.
    assert!(matches!(
        pack_lhs_f32(&a[..3 * 8 + 7], 8, 4, 8, 4, &mut dst),
        Err(Error::BufferTooSmall { .. })
    ));
    // Stride smaller than a row.
    assert!(matches!(
        pack_lhs_f32(&a, 4, 4, 8, 4, &mut dst),
        Err(Error::BadStride { .. })
    ));
    assert!(dst.iter().all(|&x| x == 0xBEEF));
}
