//! The attention kernels (`src/attention.rs`: the tiled prefill, the split decode, the previous
//! row-wise prefill and per-head decode, the q8_0 append) against `reference::attention` on
//! random data, in every KV type, over edge shapes: 1, 2, 17, 511 and 513 query rows at first
//! positions that are not multiples of any tile, grouped-query heads (groups of 1, 2, 3 and 8),
//! head widths 6 (not a multiple of 4), 32, 64 and 128, and every prefill tile on one shape.
//! Outputs are NaN-poisoned before each run, and so is every cache row past the last position
//! attended (a kernel that reads one makes the output NaN). PoCL in CI.
//!
//! Bounds. Against the reference on the very values the cache holds (its rows read back and
//! dequantized): the kernels accumulate in f32 (scores over <= 128 products, sums over <= 600
//! keys, online-softmax rescaling) against f64, a relative error of ~1e-6 per value: NMSE
//! <= 1e-9 and each value within 1e-4 of the largest |v| keep three orders of margin, while a
//! wrong key, head, mask or tile boundary moves outputs by O(|v|) (NMSE > 1e-3). Against the
//! f32 reference on the unrounded values (what a lower-precision cache costs), with q, k, v
//! uniform in (-1, 1): f16 rounds each k and v by <= 2^-11 relative, which moves a score by
//! <= 2^-11 sum|q k| / sqrt(d) and an output by about that times |v|: NMSE <= 1e-6 and values
//! within 5e-3 of the largest; q8_0 errs by <= max|x| / 254 a value (~0.4% of the block's
//! largest): NMSE <= 3e-4 and values within 5e-2 (measured on PoCL: f16 3e-8, q8_0 1.4e-5
//! NMSE; the bounds keep over an order of margin and still catch a wrong scale or block,
//! O(1)).

use half::f16;
use hetero_opencl_kernels::attention::{decode_splits, tiles_for, DECODE_SPLITS};
use hetero_opencl_kernels::{
    reference, Attention, AttentionShape, Buffer, Device, GgmlType, KvType, Tiles,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::{Arc, OnceLock};

const NMSE_EXACT: f64 = 1e-9;
const MAX_EXACT: f64 = 1e-4;

fn device() -> Option<Arc<Device>> {
    static D: OnceLock<Result<Arc<Device>, String>> = OnceLock::new();
    let r = D.get_or_init(|| Device::from_env().map_err(|e| e.to_string()));
    hetero_tests::require("opencl", r.as_ref().map(Arc::clone))
}

fn rng(tag: u64) -> StdRng {
    StdRng::seed_from_u64(hetero_tests::seed(tag))
}

fn randv(r: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(-1.0f32..1.0)).collect()
}

fn as_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A K and a V cache of `cap` positions in `kv`, rows `0..rows` holding `k` and `v`
/// (`rows x kv_dim` f32; f16 rounded to nearest even on the host, q8_0 quantized by the
/// device's `kv_store_q8`), every other byte 0xFF (NaN in every type). Also the values the
/// caches hold, read back and dequantized.
struct Caches {
    kc: Buffer,
    vc: Buffer,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn caches(
    dev: &Arc<Device>,
    att: &Attention,
    (k, v): (&[f32], &[f32]),
    rows: usize,
    cap: usize,
) -> Caches {
    let s = *att.shape();
    let kvd = s.kv_dim();
    let bytes = att.cache_bytes(cap).unwrap();
    let poison = vec![0xFFu8; bytes];
    let (kc, vc) = (dev.upload(&poison).unwrap(), dev.upload(&poison).unwrap());
    let held = |src: &[f32], buf: &Buffer| -> Vec<f32> {
        match s.kv {
            KvType::F32 => {
                let mut all = poison.clone();
                all[..rows * kvd * 4].copy_from_slice(&as_bytes(&src[..rows * kvd]));
                buf.write(&all).unwrap();
                src[..rows * kvd].to_vec()
            }
            KvType::F16 => {
                let mut all = poison.clone();
                let h: Vec<u8> = src[..rows * kvd]
                    .iter()
                    .flat_map(|x| f16::from_f32(*x).to_le_bytes())
                    .collect();
                all[..h.len()].copy_from_slice(&h);
                buf.write(&all).unwrap();
                src[..rows * kvd]
                    .iter()
                    .map(|x| f16::from_f32(*x).to_f32())
                    .collect()
            }
            KvType::Q8_0 => Vec::new(), // filled below, K and V together
        }
    };
    let (mut kd, mut vd) = (held(k, &kc), held(v, &vc));
    if s.kv == KvType::Q8_0 {
        // Through the device's append, in chunks of up to 64 rows at odd offsets.
        let chunk = 64;
        let ks = dev.alloc(chunk * kvd * 4).unwrap();
        let vs = dev.alloc(chunk * kvd * 4).unwrap();
        let mut st = att.store_q8(&ks, &vs, &kc, &vc, chunk).unwrap();
        let mut p = 0;
        while p < rows {
            let m = (rows - p).min(chunk).min(if p == 0 { 13 } else { chunk });
            ks.write(&k[p * kvd..(p + m) * kvd]).unwrap();
            vs.write(&v[p * kvd..(p + m) * kvd]).unwrap();
            st.set(p, m).unwrap();
            st.enqueue().unwrap();
            p += m;
        }
        let row = KvType::Q8_0.row_bytes(kvd).unwrap();
        for (buf, src, out) in [(&kc, k, &mut kd), (&vc, v, &mut vd)] {
            let mut b = vec![0u8; bytes];
            buf.read(&mut b).unwrap();
            assert!(
                b[rows * row..].iter().all(|&x| x == 0xFF),
                "kv_store_q8 wrote past its rows"
            );
            let mut deq = vec![0f32; rows * kvd];
            for j in 0..rows {
                reference::dequantize_row(
                    GgmlType::Q8_0,
                    &b[j * row..(j + 1) * row],
                    kvd,
                    &mut deq[j * kvd..(j + 1) * kvd],
                )
                .unwrap();
            }
            // Each value within half a step of its block (plus the f16 rounding of the
            // scale, 2^-11 of up to 127 steps).
            for (blk, (x, y)) in src[..rows * kvd].chunks(32).zip(deq.chunks(32)).enumerate() {
                let d = x.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
                for (a, b) in x.iter().zip(y) {
                    assert!(
                        (a - b).abs() <= d * (0.5 + 127.0 / 2048.0) + 1e-7,
                        "q8_0 block {blk}: {a} stored as {b} (step {d})"
                    );
                }
            }
            *out = deq;
        }
    }
    Caches {
        kc,
        vc,
        k: kd,
        v: vd,
    }
}

/// The reference rows `pos0..pos0 + m` (causal) on cache values `k`, `v`.
fn want(
    s: &AttentionShape,
    q: &[f32],
    (k, v): (&[f32], &[f32]),
    pos0: usize,
    m: usize,
) -> Vec<f32> {
    let dq = s.q_dim();
    let mut out = Vec::with_capacity(m * dq);
    for i in 0..m {
        out.extend(reference::attention(
            &q[i * dq..(i + 1) * dq],
            k,
            v,
            s.heads,
            s.kv_heads,
            s.head_dim,
            pos0 + i + 1,
        ));
    }
    out
}

fn check(what: &str, got: &[f32], want: &[f32], nmse: f64, max_rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let e = reference::nmse(got, want);
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
    let (worst, at) = got
        .iter()
        .zip(want)
        .enumerate()
        .fold((0f64, 0), |(w, i), (j, (g, r))| {
            let d = (*g as f64 - *r as f64).abs();
            if d > w || d.is_nan() {
                (d, j)
            } else {
                (w, i)
            }
        });
    assert!(
        e <= nmse && worst <= max_rel * scale,
        "{what}: NMSE {e:e} (bound {nmse:e}), worst {worst:e} at {at} (bound {max_rel:e} x {scale})"
    );
}

/// Runs `launch` (prefill or decode, made by `make`) for `m` rows at `pos0` with poisoned
/// output; returns the output rows.
fn run(
    s: &AttentionShape,
    mut launch: hetero_opencl_kernels::AttnLaunch,
    out: &Buffer,
    pos0: usize,
    m: usize,
) -> Vec<f32> {
    let dq = s.q_dim();
    out.write(&vec![f32::NAN; out.len() / 4]).unwrap();
    launch.set(pos0, m).unwrap();
    launch.enqueue().unwrap();
    let mut got = vec![0f32; out.len() / 4];
    out.read(&mut got).unwrap();
    got.truncate(m * dq);
    got
}

fn shape(heads: usize, kv_heads: usize, head_dim: usize, kv: KvType) -> AttentionShape {
    AttentionShape {
        heads,
        kv_heads,
        head_dim,
        kv,
    }
}

/// Every prefill and decode kernel of `att` over `cases` of (rows, first position) and
/// decode positions `decode_at`, against the reference on the cache's own values.
/// `all`: also the previous kernels (else the tiled prefill and the split decode alone).
fn exact_cases(
    att: &Attention,
    cases: &[(usize, usize)],
    decode_at: &[usize],
    all: bool,
    r: &mut StdRng,
) {
    let dev = device().unwrap();
    let s = *att.shape();
    let (dq, kvd) = (s.q_dim(), s.kv_dim());
    let max_pos = cases
        .iter()
        .map(|&(m, p)| m + p)
        .chain(decode_at.iter().map(|p| p + 1))
        .max()
        .unwrap();
    let max_m = cases.iter().map(|c| c.0).max().unwrap_or(1);
    // Some rows past the last one attended, poisoned.
    let cap = max_pos + 5;
    let (k, v) = (randv(r, max_pos * kvd), randv(r, max_pos * kvd));
    let q = randv(r, max_m * dq);
    let out = dev.alloc(max_m * dq * 4).unwrap();
    let qb = dev.upload(&q).unwrap();
    let tag = format!("{}/{}x{} {}", s.heads, s.kv_heads, s.head_dim, s.kv);
    for &(m, pos0) in cases {
        // The caches hold exactly positions 0..pos0 + m: a read past them is NaN.
        let c = caches(&dev, att, (&k, &v), pos0 + m, cap);
        let w = want(&s, &q, (&c.k, &c.v), pos0, m);
        let flash = att.prefill(&qb, &c.kc, &c.vc, &out, max_m).unwrap();
        let got = run(&s, flash, &out, pos0, m);
        check(
            &format!("{tag} flash {:?} m {m} pos0 {pos0}", att.tiles()),
            &got,
            &w,
            NMSE_EXACT,
            MAX_EXACT,
        );
        if !all {
            continue;
        }
        let rw = att.prefill_rowwise(&qb, &c.kc, &c.vc, &out, max_m).unwrap();
        let got = run(&s, rw, &out, pos0, m);
        check(
            &format!("{tag} rowwise m {m} pos0 {pos0}"),
            &got,
            &w,
            NMSE_EXACT,
            MAX_EXACT,
        );
    }
    for &pos in decode_at {
        let c = caches(&dev, att, (&k, &v), pos + 1, cap);
        let w = want(&s, &q, (&c.k, &c.v), pos, 1);
        let d = att.decode(&qb, &c.kc, &c.vc, &out).unwrap();
        let got = run(&s, d, &out, pos, 1);
        check(
            &format!("{tag} decode at {pos} ({} ranges)", decode_splits(pos + 1)),
            &got,
            &w,
            NMSE_EXACT,
            MAX_EXACT,
        );
        // The split decode reuses its counters: run it twice.
        let mut d = att.decode(&qb, &c.kc, &c.vc, &out).unwrap();
        d.set(pos, 1).unwrap();
        d.enqueue().unwrap();
        let got = run(&s, d, &out, pos, 1);
        check(
            &format!("{tag} decode again at {pos}"),
            &got,
            &w,
            NMSE_EXACT,
            MAX_EXACT,
        );
        if !all {
            continue;
        }
        let d = att.decode_per_head(&qb, &c.kc, &c.vc, &out).unwrap();
        let got = run(&s, d, &out, pos, 1);
        check(
            &format!("{tag} per-head decode at {pos}"),
            &got,
            &w,
            NMSE_EXACT,
            MAX_EXACT,
        );
    }
}

/// GQA groups of 2 (head width 64) in every KV type over the edge row counts; groups of 8
/// (head width 128) and 3 (width 6, f32 and f16: q8_0 needs rows of whole blocks) on fewer.
#[test]
fn every_kernel_matches_reference_in_every_kv_type() {
    let Some(dev) = device() else { return };
    let mut r = rng(1);
    let edge = [(1, 0), (2, 3), (17, 0), (17, 40), (511, 0), (513, 7)];
    let decode = [0, 16, 63, 64, 65, 200, 600];
    for kv in KvType::ALL {
        let att = Attention::new(&dev, shape(4, 2, 64, kv)).unwrap();
        exact_cases(&att, &edge, &decode, true, &mut r);
        let att = Attention::new(&dev, shape(8, 1, 128, kv)).unwrap();
        exact_cases(&att, &[(1, 5), (17, 9), (130, 33)], &[0, 77], true, &mut r);
    }
    for kv in [KvType::F32, KvType::F16] {
        let att = Attention::new(&dev, shape(9, 3, 6, kv)).unwrap();
        exact_cases(&att, &[(2, 0), (17, 1), (511, 3)], &[0, 66], true, &mut r);
    }
}

/// Every prefill tile (rows x keys) and a decode group smaller than the GQA group, on one
/// shape (the device's own choice covers one tile only).
#[test]
fn every_tile_matches_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(2);
    let s = shape(8, 2, 32, KvType::F16);
    let tiles = [(32, 64), (32, 32), (16, 32), (32, 16), (16, 16), (16, 8)];
    for (i, (rows, keys)) in tiles.into_iter().enumerate() {
        // Groups of 4 heads and of 2 (two work-groups a kv head), alternately.
        let group_heads = if i % 2 == 0 { 4 } else { 2 };
        let t = Tiles {
            rows,
            keys,
            group_heads,
            decode_heads: group_heads / 2,
        };
        let att = Attention::with_tiles(&dev, s, t).unwrap();
        exact_cases(&att, &[(1, 0), (19, 5), (70, 13)], &[70], false, &mut r);
    }
    let bad = Tiles {
        rows: 24,
        keys: 32,
        group_heads: 4,
        decode_heads: 4,
    };
    assert!(Attention::with_tiles(&dev, s, bad).is_err());
}

/// An f16 or q8_0 cache against the f32 reference on the unrounded values (bounds in the
/// module docs), prefill and decode.
#[test]
fn lower_precision_caches_stay_within_their_bounds() {
    let Some(dev) = device() else { return };
    let mut r = rng(3);
    let (heads, kvh, hd) = (8, 2, 64);
    let s32 = shape(heads, kvh, hd, KvType::F32);
    let (m, pos0) = (200, 57);
    let n = m + pos0;
    let (k, v) = (
        randv(&mut r, n * s32.kv_dim()),
        randv(&mut r, n * s32.kv_dim()),
    );
    let q = randv(&mut r, m * s32.q_dim());
    let w = want(&s32, &q, (&k, &v), pos0, m);
    let wd = want(&s32, &q[..s32.q_dim()], (&k, &v), n - 1, 1);
    let qb = dev.upload(&q).unwrap();
    let out = dev.alloc(m * s32.q_dim() * 4).unwrap();
    for (kv, nmse, max_rel) in [(KvType::F16, 1e-6, 5e-3), (KvType::Q8_0, 3e-4, 5e-2)] {
        let s = AttentionShape { kv, ..s32 };
        let att = Attention::new(&dev, s).unwrap();
        let c = caches(&dev, &att, (&k, &v), n, n);
        let p = att.prefill(&qb, &c.kc, &c.vc, &out, m).unwrap();
        let got = run(&s, p, &out, pos0, m);
        eprintln!("{kv}: prefill NMSE {:e}", reference::nmse(&got, &w));
        check(&format!("{kv} prefill vs f32"), &got, &w, nmse, max_rel);
        let d = att.decode(&qb, &c.kc, &c.vc, &out).unwrap();
        let got = run(&s, d, &out, n - 1, 1);
        eprintln!("{kv}: decode NMSE {:e}", reference::nmse(&got, &wd));
        check(&format!("{kv} decode vs f32"), &got, &wd, nmse, max_rel);
    }
}

/// Bad shapes and buffers are typed errors, before anything is enqueued.
#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    assert!(Attention::new(&dev, shape(6, 4, 64, KvType::F16)).is_err());
    assert!(Attention::new(&dev, shape(4, 2, 7, KvType::F16)).is_err());
    assert!(Attention::new(&dev, shape(4, 2, 300, KvType::F16)).is_err());
    assert!(Attention::new(&dev, shape(3, 3, 6, KvType::Q8_0)).is_err());
    let s = shape(4, 2, 64, KvType::F16);
    let att = Attention::new(&dev, s).unwrap();
    assert_eq!(
        att.tiles(),
        tiles_for(&s, dev.info().local_mem_size).unwrap()
    );
    let q = dev.alloc(4 * s.q_dim() * 4).unwrap();
    let kc = dev.alloc(att.cache_bytes(10).unwrap()).unwrap();
    // q too small for 5 rows; caches of 10 positions refuse rows past them; decode takes one.
    assert!(att.prefill(&q, &kc, &kc, &q, 5).is_err());
    let mut p = att.prefill(&q, &kc, &kc, &q, 4).unwrap();
    assert!(p.set(8, 3).is_err());
    assert!(p.set(0, 0).is_err());
    assert!(p.set(0, 5).is_err());
    p.set(6, 4).unwrap();
    let mut d = att.decode(&q, &kc, &kc, &q).unwrap();
    assert!(d.set(3, 2).is_err());
    assert!(d.set(10, 1).is_err());
    assert!(att.store_q8(&q, &q, &kc, &kc, 1).is_err()); // not a q8_0 shape
    assert!(DECODE_SPLITS >= decode_splits(usize::MAX / 2));
}
