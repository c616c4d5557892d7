//! Quantizers (`quantize_row`): every writable type round-trips through `dequantize_row` within
//! a bound stated against the block's own step size, on several kinds of rows; bad input is a
//! typed error that writes nothing.
//!
//! The bound: a value inside its block's grid is off by at most half a step, so uniform rounding
//! gives RMS(err/step) = 1/√12 ≈ 0.29; the scale searches may clip a few extreme values to win
//! elsewhere. We require RMS(err/step) ≤ 0.35 over each row and every |err| ≤ 2 steps (measured
//! on Gaussian rows: 0.25-0.28 and ≤ 1.21). Q8_0 (plain amax/127, no clipping): every
//! |err| ≤ step/2 plus the FP16 scale rounding.

use hetero_sme::{dequantize_row, quantize_row, scale_min_k4, Error, GgmlType};

const TYPES: [GgmlType; 10] = [
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
];

struct Rng(u64);
impl Rng {
    fn u(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f32 {
        let (u1, u2) = (self.u().max(1e-12), self.u());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
}

fn h(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The grid step of each value of one block, read from the block's bytes.
fn steps(ty: GgmlType, b: &[u8]) -> Vec<f32> {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
            vec![h(b, 0).abs(); 32]
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            let s: [u8; 12] = b[4..16].try_into().unwrap();
            (0..256)
                .map(|e| h(b, 0) * scale_min_k4(e / 32, &s).0 as f32)
                .collect()
        }
        GgmlType::Q6K => (0..256)
            .map(|e| (h(b, 208) * b[192 + e / 16] as i8 as f32).abs())
            .collect(),
        GgmlType::Q2K => (0..256)
            .map(|e| h(b, 80) * (b[e / 16] & 15) as f32)
            .collect(),
        GgmlType::Q3K => {
            let s = &b[96..108];
            (0..256)
                .map(|e| {
                    let i = e / 16;
                    let lo = (s[i % 8] >> (4 * (i / 8))) & 15;
                    let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
                    (h(b, 108) * ((lo | hi << 4) as i32 - 32) as f32).abs()
                })
                .collect()
        }
        _ => unreachable!("{ty}"),
    }
}

/// Rows of several kinds: Gaussian at two scales, uniform, Gaussian with outliers, all zero,
/// constant of either sign, all positive (the K-quants' minimum clamps at 0), tiny values.
fn rows(rng: &mut Rng, k: usize) -> Vec<(&'static str, Vec<f32>)> {
    let g: Vec<f32> = (0..k).map(|_| rng.gauss() * 0.02).collect();
    let mut out = vec![
        ("gauss", g.clone()),
        ("gauss-large", g.iter().map(|v| v * 3000.0).collect()),
        (
            "uniform",
            (0..k).map(|_| (rng.u() * 2.0 - 1.0) as f32).collect(),
        ),
        ("zero", vec![0.0; k]),
        ("const+", vec![0.375; k]),
        ("const-", vec![-1.5; k]),
        ("positive", g.iter().map(|v| v.abs() + 0.01).collect()),
        ("tiny", g.iter().map(|v| v * 1e-3).collect()),
    ];
    let mut o = g;
    for i in (0..k).step_by(37) {
        o[i] *= 25.0;
    }
    out.push(("outliers", o));
    out
}

#[test]
fn every_type_round_trips_within_its_step() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let k = 1536;
    for ty in TYPES {
        let (be, bb) = ty.block().unwrap();
        let mut worst = (0f64, 0f64);
        for (kind, x) in rows(&mut rng, k) {
            let mut q = vec![0xA5u8; ty.row_bytes(k).unwrap()];
            quantize_row(ty, &x, &mut q).unwrap();
            let mut y = vec![f32::NAN; k];
            dequantize_row(ty, &q, &mut y).unwrap();
            let (mut s2, mut n) = (0f64, 0f64);
            for (bi, blk) in q.chunks(bb).enumerate() {
                let st = steps(ty, blk);
                for (j, &step) in st.iter().enumerate() {
                    let i = bi * be + j;
                    let err = (x[i] - y[i]).abs() as f64;
                    assert!(y[i].is_finite(), "{ty} {kind}: value {i} not finite");
                    let step = step as f64;
                    // A zero step can only reproduce values exactly (a block or sub-block of
                    // zeros or of one value carried by the minimum); FP16 scales round the
                    // reproduction relative to the value.
                    let rel = if step > 0.0 {
                        err / step
                    } else {
                        assert!(
                            err <= 2f64.powi(-10) * x[i].abs() as f64,
                            "{ty} {kind}: value {i} = {} came back {} with a zero step",
                            x[i],
                            y[i]
                        );
                        0.0
                    };
                    let max_rel = if ty == GgmlType::Q8_0 {
                        0.5 + 1e-3
                    } else {
                        2.0
                    };
                    assert!(
                        rel <= max_rel,
                        "{ty} {kind}: value {i} = {} came back {} ({rel} steps of {step})",
                        x[i],
                        y[i]
                    );
                    worst.1 = worst.1.max(rel);
                    s2 += rel * rel;
                    n += 1.0;
                }
            }
            let rms = (s2 / n).sqrt();
            worst.0 = worst.0.max(rms);
            assert!(rms <= 0.35, "{ty} {kind}: RMS(err/step) = {rms}");
        }
        eprintln!(
            "{ty}: worst RMS(err/step) {:.3}, worst |err|/step {:.2}",
            worst.0, worst.1
        );
    }
}

/// Decent, not just bounded: on Gaussian rows the relative RMSE is at most what plain min/max
/// rounding (no search) gives, per family, measured here by a tiny independent quantizer.
#[test]
fn searches_beat_plain_min_max_rounding() {
    let mut rng = Rng(99);
    let k = 4096;
    let x: Vec<f32> = (0..k).map(|_| rng.gauss()).collect();
    let rel = |y: &[f32]| {
        let (mut e, mut s) = (0f64, 0f64);
        for (a, b) in x.iter().zip(y) {
            e += ((a - b) as f64).powi(2);
            s += (*a as f64).powi(2);
        }
        (e / s).sqrt()
    };
    // Plain rounding per 32 values: symmetric amax/(2^(b-1)) and affine (max-min)/(2^b-1).
    let plain = |bits: u32, affine: bool| {
        let mut y = vec![0f32; k];
        for (xb, yb) in x.chunks(32).zip(y.chunks_mut(32)) {
            let (mn, mx) = xb
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let levels = ((1u32 << bits) - 1) as f32;
            for (v, o) in xb.iter().zip(yb.iter_mut()) {
                *o = if affine {
                    let d = (mx - mn) / levels;
                    ((v - mn) / d).round() * d + mn
                } else {
                    let d = mx.abs().max(mn.abs()) / (levels / 2.0).floor();
                    (v / d).round() * d
                };
            }
        }
        rel(&y)
    };
    for (ty, bits, affine) in [
        (GgmlType::Q4_0, 4, false),
        (GgmlType::Q5_0, 5, false),
        (GgmlType::Q4_1, 4, true),
        (GgmlType::Q5_1, 5, true),
        (GgmlType::Q4K, 4, true),
        (GgmlType::Q5K, 5, true),
        (GgmlType::Q6K, 6, false),
    ] {
        let mut q = vec![0u8; ty.row_bytes(k).unwrap()];
        quantize_row(ty, &x, &mut q).unwrap();
        let mut y = vec![0f32; k];
        dequantize_row(ty, &q, &mut y).unwrap();
        let (ours, base) = (rel(&y), plain(bits, affine));
        eprintln!("{ty}: relative RMSE {ours:.4} (plain rounding {base:.4})");
        assert!(
            ours <= base,
            "{ty}: {ours} worse than plain rounding {base}"
        );
    }
}

#[test]
fn plain_types_convert_and_bad_input_writes_nothing() {
    let x = [1.5f32, -2.25, 0.0, 65504.0];
    let mut b = [0u8; 16];
    quantize_row(GgmlType::F32, &x, &mut b).unwrap();
    let mut y = [f32::NAN; 4];
    dequantize_row(GgmlType::F32, &b, &mut y).unwrap();
    assert_eq!(y, x);
    for ty in [GgmlType::F16, GgmlType::BF16] {
        let mut b = [0u8; 8];
        quantize_row(ty, &x, &mut b).unwrap();
        dequantize_row(ty, &b, &mut y).unwrap();
        assert_eq!(&y[..3], &x[..3], "{ty}");
    }
    let good = vec![0.5f32; 256];
    let mut dst = vec![0x5Au8; GgmlType::Q4K.row_bytes(256).unwrap()];
    let errs = [
        quantize_row(GgmlType::Q4K, &good[..128], &mut dst),
        quantize_row(GgmlType::Q4K, &good, &mut dst[1..]),
        quantize_row(GgmlType::Q8K, &good, &mut dst),
        quantize_row(GgmlType::Other(20), &good, &mut dst),
    ];
    assert!(
        matches!(errs[0], Err(Error::ShapeMismatch { .. })),
        "{:?}",
        errs[0]
    );
    assert!(
        matches!(errs[1], Err(Error::ShapeMismatch { .. })),
        "{:?}",
        errs[1]
    );
    assert_eq!(
        errs[2],
        Err(Error::UnsupportedFormat {
            format: GgmlType::Q8K
        })
    );
    assert!(matches!(errs[3], Err(Error::UnsupportedFormat { .. })));
    let mut bad = good.clone();
    bad[77] = f32::NAN;
    assert_eq!(
        quantize_row(GgmlType::Q4K, &bad, &mut dst),
        Err(Error::NonFinite {
            what: "row",
            index: 77
        })
    );
    bad[77] = f32::INFINITY;
    assert_eq!(
        quantize_row(GgmlType::Q5_0, &bad[64..128], &mut [0u8; 44]),
        Err(Error::NonFinite {
            what: "row",
            index: 13
        })
    );
    let mut big = good.clone();
    big[200] = -70000.0;
    assert_eq!(
        quantize_row(GgmlType::Q8_0, &big, &mut [0x5Au8; 8 * 34]),
        Err(Error::ValueOutOfRange {
            what: "row",
            index: 200
        })
    );
    assert_eq!(
        quantize_row(GgmlType::Q4K, &big, &mut dst),
        Err(Error::ValueOutOfRange {
            what: "row",
            index: 200
        })
    );
    assert!(dst.iter().all(|&b| b == 0x5A), "a refused call wrote");
    // F32 and BF16 hold any finite value.
    quantize_row(GgmlType::BF16, &big, &mut [0u8; 512]).unwrap();
}
