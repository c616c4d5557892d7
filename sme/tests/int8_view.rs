//! The int8 GEMM on caller-owned storage (`Int8Weight::pack_gguf_into`, `Int8WeightRef`,
//! `Int8Plan::with_view`): the same bytes as the owned `Int8Weight` and bit-identical results on
//! every implementation, for every format; bad storage refused before any write.

mod common;

use common::Rng;
use hetero_sme::*;

/// Random GGUF bytes of `n` rows of `k` values of `ty`, through the family's quantizer (so the
/// scales are sane FP16 values).
fn weight(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let w = rng.vec(n * k);
    let mut out = vec![0u8; n * ty.row_bytes(k).unwrap()];
    quantize_row(ty, &w, &mut out).unwrap();
    out
}

/// A 64-byte-aligned byte buffer of `len` bytes, offset `skew` from the alignment.
struct Buf {
    store: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize, skew: usize) -> Self {
        let store = vec![0xA5u8; len + 128];
        let off = (64 - store.as_ptr() as usize % 64) % 64 + skew;
        Self { store, off, len }
    }
    fn get(&self) -> &[u8] {
        &self.store[self.off..self.off + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.store[self.off..self.off + self.len]
    }
}

#[test]
fn view_matches_owned_on_every_kernel() {
    let mut rng = Rng::new(0x51e3);
    for ty in INT8_TYPES {
        let k = if ty.is_k_quant() { 512 } else { 96 };
        for (m, n) in [(1, 16), (3, 35), (33, 50)] {
            let g = weight(&mut rng, ty, n, k);
            let owned = Int8Weight::pack_gguf(ty, &g, n, k).unwrap();
            let (qb, sw) = Int8Weight::storage_len(ty, n, k).unwrap();
            let mut q = Buf::new(qb, 0);
            let mut s = vec![0xBEEFu16; sw];
            Int8Weight::pack_gguf_into(ty, &g, n, k, q.get_mut(), &mut s).unwrap();
            assert_eq!(q.get(), owned.quant_bytes(), "{ty:?} quant bytes");
            assert_eq!(&s[..], owned.scale_words(), "{ty:?} scale words");
            let view = Int8WeightRef::new(ty, n, k, q.get(), &s).unwrap();
            assert_eq!((view.n(), view.k(), view.format()), (n, k, ty));
            let x = rng.vec(m * k);
            let mut acts = QActs::with_capacity(m, k);
            for kern in Int8Kernel::available() {
                kern.quantize_acts_for(&x, m, k, owned.act_blocks(), &mut acts)
                    .unwrap();
                let mut y0 = vec![f32::NAN; m * n];
                let mut y1 = vec![f32::NAN; m * n];
                kern.gemm(&owned, &acts, &mut y0, n).unwrap();
                Int8Plan::with_view(kern, view, &acts, OutMut::new(&mut y1), n)
                    .unwrap()
                    .run_all();
                assert!(y0.iter().all(|v| v.is_finite()), "{ty:?} {}", kern.name());
                let same = y0.iter().zip(&y1).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{ty:?} m={m} n={n} {}", kern.name());
            }
        }
    }
}

#[test]
fn bad_storage_is_refused_before_any_write() {
    let mut rng = Rng::new(7);
    let (ty, n, k) = (GgmlType::Q4_0, 20, 64);
    let g = weight(&mut rng, ty, n, k);
    let (qb, sw) = Int8Weight::storage_len(ty, n, k).unwrap();
    // Misaligned quants.
    let mut q = Buf::new(qb, 1);
    let mut s = vec![7u16; sw];
    let e = Int8Weight::pack_gguf_into(ty, &g, n, k, q.get_mut(), &mut s).unwrap_err();
    assert!(matches!(e, Error::Misaligned { .. }), "{e}");
    assert!(q.get().iter().all(|&b| b == 0xA5) && s.iter().all(|&w| w == 7));
    // Wrong lengths.
    let mut q = Buf::new(qb - 64, 0);
    let e = Int8Weight::pack_gguf_into(ty, &g, n, k, q.get_mut(), &mut s).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert!(q.get().iter().all(|&b| b == 0xA5) && s.iter().all(|&w| w == 7));
    let mut q = Buf::new(qb, 0);
    let e = Int8Weight::pack_gguf_into(ty, &g, n, k, q.get_mut(), &mut s[1..]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // Source of another shape, a type the int8 GEMM does not compute, K off the block.
    let e = Int8Weight::pack_gguf_into(ty, &g[18..], n, k, q.get_mut(), &mut s).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert!(q.get().iter().all(|&b| b == 0xA5) && s.iter().all(|&w| w == 7));
    let e = Int8Weight::storage_len(GgmlType::Q3K, n, 256).unwrap_err();
    assert!(matches!(e, Error::UnsupportedFormat { .. }), "{e}");
    let e = Int8Weight::storage_len(GgmlType::Q4K, n, 96).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // A view over storage of the wrong length or alignment.
    assert!(Int8WeightRef::new(ty, n, k, &q.get()[..qb - 1], &s).is_err());
    let q1 = Buf::new(qb, 4);
    assert!(matches!(
        Int8WeightRef::new(ty, n, k, q1.get(), &s),
        Err(Error::Misaligned { .. })
    ));
    assert!(Int8WeightRef::new(ty, n + 16, k, q.get(), &s).is_err());
}

#[test]
fn unpack_is_the_inverse_of_pack_on_any_bytes() {
    let mut rng = Rng::new(0xdec0de);
    for ty in INT8_TYPES {
        let k = if ty.is_k_quant() { 512 } else { 96 };
        for n in [1, 16, 37] {
            // Arbitrary bits, NaN and inf scales included: the packers copy bits.
            let src: Vec<u8> = (0..n * ty.row_bytes(k).unwrap())
                .map(|_| rng.next_u64() as u8)
                .collect();
            let (qb, sw) = Int8Weight::storage_len(ty, n, k).unwrap();
            let mut q = Buf::new(qb, 0);
            let mut s = vec![0u16; sw];
            Int8Weight::pack_gguf_into(ty, &src, n, k, q.get_mut(), &mut s).unwrap();
            let view = Int8WeightRef::new(ty, n, k, q.get(), &s).unwrap();
            let mut back = vec![0x5Au8; src.len()];
            view.unpack_gguf(&mut back).unwrap();
            assert!(back == src, "{ty:?} n={n}: unpack differs from the source");
            // Owned and borrowed forms agree.
            let owned = Int8Weight::pack_gguf(ty, &src, n, k).unwrap();
            let mut back2 = vec![0u8; src.len()];
            owned.view().unpack_gguf(&mut back2).unwrap();
            assert!(back2 == src, "{ty:?} n={n}: owned unpack differs");
            // A short output is refused with nothing written.
            let mut short = vec![0x5Au8; src.len() - ty.row_bytes(k).unwrap()];
            assert!(view.unpack_gguf(&mut short).is_err());
            assert!(short.iter().all(|&b| b == 0x5A));
        }
    }
}

#[test]
fn round_scales_to_f16_rounds_only_the_per32_scales() {
    let mut rng = Rng::new(99);
    let (m, k) = (3, 512);
    let x = rng.vec(m * k);
    let mut a = QActs::with_capacity(m, k);
    quantize_acts_for(&x, m, k, ActBlocks::BOTH, &mut a).unwrap();
    let before = a.clone();
    a.round_scales_to_f16();
    for r in 0..m {
        assert_eq!(a.q_row(r), before.q_row(r));
        assert_eq!(a.qk_row(r), before.qk_row(r));
        assert_eq!(a.super_row(r), before.super_row(r));
        for (b, o) in a.meta_row(r).iter().zip(before.meta_row(r)) {
            assert_eq!(b.d, half::f16::from_f32(o.d).to_f32());
            assert_eq!(b.s, half::f16::from_f32(o.s).to_f32());
            assert_eq!((b.n8, b.n128), (o.n8, o.n128));
        }
    }
}
