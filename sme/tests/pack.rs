//! The packed format, element by element, for every source layout and column ranges.

mod common;

use common::*;
use hetero_sme::*;

#[test]
fn index_formula_row_and_col_major_and_ranges() {
    let mut rng = Rng::new(5);
    for &(k, n) in &[(1, 1), (2, 64), (3, 65), (17, 130), (64, 127)] {
        let w = rng.vec(k * n);
        let mut wt = vec![0f32; k * n];
        for kk in 0..k {
            for nn in 0..n {
                wt[nn * k + kk] = w[kk * n + nn];
            }
        }
        for &(n0, n1) in &[(0, n), (n / 3, n), (0, n / 2), (n / 2, n / 2)] {
            let nr = n1 - n0;
            let mut p1 = vec![0xFFFF; packed_len(k, nr)];
            let mut p2 = p1.clone();
            let rm = WeightSource {
                data: &w,
                k,
                n,
                ld: n,
                layout: Layout::RowMajor,
            };
            let cm = WeightSource {
                data: &wt,
                k,
                n,
                ld: k,
                layout: Layout::ColMajor,
            };
            pack_f32(&rm, n0..n1, PackedFormat::F16, &mut p1).unwrap();
            pack_f32(&cm, n0..n1, PackedFormat::F16, &mut p2).unwrap();
            assert_eq!(p1, p2);
            let kp = k.div_ceil(2);
            for p in 0..nr.div_ceil(64) {
                for q in 0..kp {
                    for c in 0..64 {
                        for j in 0..2 {
                            let idx = ((p * kp + q) * 64 + c) * 2 + j;
                            let (kk, nn) = (2 * q + j, 64 * p + c);
                            let want = if kk < k && nn < nr {
                                f16_bits(w[kk * n + n0 + nn])
                            } else {
                                0
                            };
                            assert_eq!(p1[idx], want, "k{k} n{n} range {n0}..{n1} idx {idx}");
                        }
                    }
                }
            }
            // FP16 source packs to the same bits; BF16 rounds the same values.
            let w16: Vec<u16> = w.iter().map(|&x| f16_bits(x)).collect();
            let s16 = WeightSource {
                data: &w16,
                k,
                n,
                ld: n,
                layout: Layout::RowMajor,
            };
            let mut p3 = vec![0; packed_len(k, nr)];
            pack_f16(&s16, n0..n1, PackedFormat::F16, &mut p3).unwrap();
            assert_eq!(p1, p3);
        }
    }
}

#[test]
fn panel_range_is_a_weight_of_its_own() {
    let (k, n) = (5, 150);
    let mut rng = Rng::new(6);
    let w = rng.vec(k * n);
    let src = WeightSource {
        data: &w,
        k,
        n,
        ld: n,
        layout: Layout::RowMajor,
    };
    let mut full = vec![0; packed_len(k, n)];
    pack_f32(&src, 0..n, PackedFormat::Bf16, &mut full).unwrap();
    let whole = PackedRef::new(&full, k, n, PackedFormat::Bf16).unwrap();
    let part = whole.panel_range(1, 3).unwrap();
    assert_eq!(part.n(), 150 - 64);
    let mut alone = vec![0; packed_len(k, 86)];
    pack_f32(&src, 64..150, PackedFormat::Bf16, &mut alone).unwrap();
    assert_eq!(part.data(), &alone[..]);
}
