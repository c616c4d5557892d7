//! The format vocabulary and the one dequantizer: GGUF codes round-trip, row sizes follow the
//! block table, every computable type dequantizes to what its definition says, and bad rows are
//! refused without writing.

use hetero_sme::{dequantize_row, Error, GgmlType};

fn f16_bits(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

#[test]
fn codes_round_trip_and_sizes_follow_the_table() {
    for code in 0..64u32 {
        if let Some(t) = GgmlType::from_code(code) {
            assert_eq!(t.code(), code, "{t}");
        }
    }
    assert_eq!(GgmlType::from_code(4), None, "removed Q4_2");
    assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
    assert_eq!(GgmlType::Q6K.row_bytes(512), Some(2 * 210));
    assert_eq!(GgmlType::Q4_0.row_bytes(33), None);
    assert_eq!(GgmlType::Other(20).row_bytes(32), None);
    assert_eq!(
        GgmlType::F32.row_bytes(usize::MAX),
        None,
        "overflow is None"
    );
    assert_eq!(GgmlType::Q4K.to_string(), "Q4_K");
}

#[test]
fn every_computable_type_dequantizes_by_its_definition() {
    // Q4_0: d = 0.5, nibble i = i % 16 for element i (low) and 15 - i % 16 (high).
    let mut q4_0 = f16_bits(0.5).to_le_bytes().to_vec();
    q4_0.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let mut out = [f32::NAN; 32];
    dequantize_row(GgmlType::Q4_0, &q4_0, &mut out).unwrap();
    for i in 0..16 {
        assert_eq!(out[i], (i as f32 - 8.0) * 0.5);
        assert_eq!(out[i + 16], (7.0 - i as f32) * 0.5);
    }
    // Q4_1: d = 2, m = -1.
    let mut q4_1 = f16_bits(2.0).to_le_bytes().to_vec();
    q4_1.extend(f16_bits(-1.0).to_le_bytes());
    q4_1.extend((0..16u8).map(|i| i | (i << 4)));
    dequantize_row(GgmlType::Q4_1, &q4_1, &mut out).unwrap();
    for i in 0..16 {
        assert_eq!(out[i], i as f32 * 2.0 - 1.0);
        assert_eq!(out[i + 16], i as f32 * 2.0 - 1.0);
    }
    // Q8_0: d = 0.25, q = i - 16.
    let mut q8_0 = f16_bits(0.25).to_le_bytes().to_vec();
    q8_0.extend((0..32i32).map(|i| (i - 16) as i8 as u8));
    dequantize_row(GgmlType::Q8_0, &q8_0, &mut out).unwrap();
    for (i, o) in out.iter().enumerate() {
        assert_eq!(*o, (i as f32 - 16.0) * 0.25);
    }
    // Plain floats.
    let vals = [1.5f32, -2.0, 0.0, 65504.0];
    let mut o4 = [f32::NAN; 4];
    let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    dequantize_row(GgmlType::F32, &f32b, &mut o4).unwrap();
    assert_eq!(o4, vals);
    let f16b: Vec<u8> = vals
        .iter()
        .flat_map(|&v| f16_bits(v).to_le_bytes())
        .collect();
    dequantize_row(GgmlType::F16, &f16b, &mut o4).unwrap();
    assert_eq!(o4, vals);
    let bf16b: Vec<u8> = vals
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes())
        .collect();
    dequantize_row(GgmlType::BF16, &bf16b, &mut o4).unwrap();
    assert_eq!(o4, [1.5, -2.0, 0.0, 65536.0], "BF16 rounds 65504 to 65536");
}

#[test]
fn bad_rows_are_refused_and_nothing_is_written() {
    let mut out = [7.0f32; 32];
    let e = dequantize_row(GgmlType::Q4_0, &[0u8; 17], &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                expected: 18,
                got: 17,
                ..
            }
        ),
        "{e}"
    );
    let e = dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut out[..31]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = dequantize_row(GgmlType::Other(20), &[0u8; 18], &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::UnsupportedFormat {
            format: GgmlType::Other(20)
        }
    );
    let e = dequantize_row(GgmlType::I32, &[0u8; 128], &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::UnsupportedFormat {
            format: GgmlType::I32
        }
    );
    assert!(out.iter().all(|&v| v == 7.0));
}

// ---------------------------------------------------------------------------------------------
// The new block types against second, independent dequantizers written the way ggml's
// `dequantize_row_*` walk the bytes (pointer offsets and shifts, not the crate's accessors), on
// random blocks, bit for bit (same f32 operations in the same order).

struct Rng(u64);
impl Rng {
    fn byte(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 24) as u8
    }
    /// A finite FP16 scale of either sign, magnitudes 2^-14 .. 2^3.
    fn f16(&mut self) -> [u8; 2] {
        let v = (self.byte() as f32 / 255.0 * 17.0 - 14.0).exp2();
        let s = if self.byte() & 1 == 0 { v } else { -v };
        f16_bits(s).to_le_bytes()
    }
    fn block(&mut self, ty: GgmlType) -> Vec<u8> {
        let (_, bytes) = ty.block().unwrap();
        let mut b: Vec<u8> = (0..bytes).map(|_| self.byte()).collect();
        // FP16 fields get finite values (random bits could be NaN/inf).
        let halves: &[usize] = match ty {
            GgmlType::Q5_0 => &[0],
            GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
            GgmlType::Q2K => &[80, 82],
            GgmlType::Q3K => &[108],
            GgmlType::Q6K => &[208],
            _ => &[],
        };
        for &h in halves {
            b[h..h + 2].copy_from_slice(&self.f16());
        }
        b
    }
}

fn h(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

fn ggml_q5_0(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let xh0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = ((qs[j] & 0x0F) | xh0) as i32 - 16;
        let x1 = ((qs[j] >> 4) | xh1) as i32 - 16;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

fn ggml_q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (h(b, 0), h(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let xh0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
        y[j] = ((qs[j] & 0x0F) | xh0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) | xh1) as f32 * d + m;
    }
}

fn ggml_scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn ggml_q4_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (h(b, 0), h(b, 2));
    let scales = &b[4..16];
    let mut q = &b[16..144];
    let (mut is, mut o) = (0, 0);
    for _ in 0..4 {
        let (sc, m) = ggml_scale_min(is, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = ggml_scale_min(is + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            y[o + l] = d1 * (q[l] & 0xF) as f32 - m1;
        }
        for l in 0..32 {
            y[o + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
        q = &q[32..];
        is += 2;
        o += 64;
    }
}

fn ggml_q5_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (h(b, 0), h(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let mut ql = &b[48..176];
    let (mut is, mut o, mut u1, mut u2) = (0, 0, 1u8, 2u8);
    for _ in 0..4 {
        let (sc, m) = ggml_scale_min(is, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = ggml_scale_min(is + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            let hb = if qh[l] & u1 != 0 { 16 } else { 0 };
            y[o + l] = d1 * ((ql[l] & 0xF) + hb) as f32 - m1;
        }
        for l in 0..32 {
            let hb = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[o + 32 + l] = d2 * ((ql[l] >> 4) + hb) as f32 - m2;
        }
        ql = &ql[32..];
        is += 2;
        o += 64;
        u1 <<= 2;
        u2 <<= 2;
    }
}

fn ggml_q6_k(b: &[u8], y: &mut [f32]) {
    let d = h(b, 208);
    for n in 0..2 {
        let ql = &b[64 * n..];
        let qh = &b[128 + 32 * n..];
        let sc = &b[192 + 8 * n..];
        let y = &mut y[128 * n..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * sc[is] as i8 as f32 * q1 as f32;
            y[l + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
            y[l + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
            y[l + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
        }
    }
}

fn ggml_q2_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (h(b, 80), h(b, 82));
    let scales = &b[0..16];
    let (mut is, mut o) = (0, 0);
    for n in 0..2 {
        let q = &b[16 + 32 * n..];
        for j in 0..4 {
            let shift = 2 * j;
            for half in 0..2 {
                let sc = scales[is];
                is += 1;
                let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
                for l in 0..16 {
                    y[o] = dl * ((q[16 * half + l] >> shift) & 3) as i8 as f32 - ml;
                    o += 1;
                }
            }
        }
    }
}

fn ggml_q3_k(b: &[u8], y: &mut [f32]) {
    let d = h(b, 108);
    let hm = &b[0..32];
    let s = &b[96..108];
    // ggml unpacks the 16 6-bit scales through 32-bit masks; the same bits, spelled per value.
    let mut scales = [0i8; 16];
    for (i, sc) in scales.iter_mut().enumerate() {
        let lo = (s[i % 8] >> (4 * (i / 8))) & 0xF;
        let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *sc = (lo | (hi << 4)) as i8;
    }
    let (mut is, mut o, mut m) = (0, 0, 1u8);
    for n in 0..2 {
        let q = &b[32 + 32 * n..];
        for j in 0..4 {
            let shift = 2 * j;
            for half in 0..2 {
                let dl = d * (scales[is] as i32 - 32) as f32;
                is += 1;
                for l in 16 * half..16 * half + 16 {
                    let hv = if hm[l] & m != 0 { 0 } else { 4 };
                    y[o] = dl * (((q[l] >> shift) & 3) as i8 - hv) as f32;
                    o += 1;
                }
            }
            m <<= 1;
        }
    }
}

#[test]
fn new_block_types_match_ggml_style_dequantizers() {
    type Deq = fn(&[u8], &mut [f32]);
    let cases: [(GgmlType, Deq); 7] = [
        (GgmlType::Q5_0, ggml_q5_0),
        (GgmlType::Q5_1, ggml_q5_1),
        (GgmlType::Q2K, ggml_q2_k),
        (GgmlType::Q3K, ggml_q3_k),
        (GgmlType::Q4K, ggml_q4_k),
        (GgmlType::Q5K, ggml_q5_k),
        (GgmlType::Q6K, ggml_q6_k),
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (ty, reference) in cases {
        let (be, bb) = ty.block().unwrap();
        assert!(ty.can_dequantize(), "{ty}");
        for _ in 0..200 {
            // Rows of 1 and 3 blocks.
            for nblk in [1, 3] {
                let src: Vec<u8> = (0..nblk).flat_map(|_| rng.block(ty)).collect();
                let mut want = vec![0f32; nblk * be];
                for (b, y) in src.chunks(bb).zip(want.chunks_mut(be)) {
                    reference(b, y);
                }
                let mut got = vec![f32::NAN; nblk * be];
                dequantize_row(ty, &src, &mut got).unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{ty} element {i}: {g} vs {w}");
                }
            }
        }
    }
}

#[test]
fn scale_min_k4_matches_ggml() {
    let mut rng = Rng(7);
    for _ in 0..100 {
        let mut s = [0u8; 12];
        for b in s.iter_mut() {
            *b = rng.byte();
        }
        for j in 0..8 {
            let (sc, m) = hetero_sme::scale_min_k4(j, &s);
            assert!(sc < 64 && m < 64);
            assert_eq!((sc, m), ggml_scale_min(j, &s));
        }
    }
}
