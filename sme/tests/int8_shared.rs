//! The int8 weight's loader-side API (`src/int8.rs`): `Int8Weight::layout`,
//! `pack_gguf_groups` (packing group ranges into a caller's buffer, as a parallel loader does)
//! and `from_shared` (a weight reading bytes it does not own, e.g. a mapped file of prepared
//! weights). For every format: the group-range packing over split ranges gives
//! `pack_gguf`'s bytes; a shared weight over those bytes reads back `dequantize_row`'s values
//! and multiplies bit for bit as the owned one on every kernel; and bad ranges, lengths and
//! alignments are typed errors.

mod common;

use std::sync::Arc;

use common::Rng;
use hetero_sme::*;

/// `n` rows of `k` values of `ty` as GGUF bytes (random quant bits, sane FP16 scales), in a
/// u16-aligned buffer (returned with its byte length).
fn rand_weight(rng: &mut Rng, ty: GgmlType, n: usize, k: usize) -> (Vec<u16>, usize) {
    let out = common::rand_gguf(rng, ty, n, k);
    let len = out.len();
    let words = out
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)]))
        .collect();
    (words, len)
}

fn as_bytes(w: &[u16], len: usize) -> &[u8] {
    // SAFETY: `w` holds at least `len` bytes; u8 has no alignment or validity requirement.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), len) }
}

/// A 64-byte-aligned byte buffer shared as [`SharedBytes`].
struct Buf64 {
    store: Vec<u8>,
    off: usize,
    len: usize,
}

impl Buf64 {
    fn new(len: usize, fill: u8) -> Self {
        let store = vec![fill; len + 64];
        let off = store.as_ptr().align_offset(64);
        Self { store, off, len }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.store[self.off..self.off + self.len]
    }
}

impl AsRef<[u8]> for Buf64 {
    fn as_ref(&self) -> &[u8] {
        &self.store[self.off..self.off + self.len]
    }
}

/// Quants at 0, scales right after (rounded to 64): the layout a loader would choose.
fn place(l: &Int8Layout) -> (usize, usize, usize) {
    let qb = l.quant_bytes();
    let s_at = qb.div_ceil(64) * 64;
    (0, s_at, s_at + 2 * l.scale_words())
}

#[test]
fn group_packing_and_shared_weights_match_the_owned_form() {
    let mut rng = Rng::new(0x5a17);
    for ty in INT8_TYPES {
        let be = ty.block().unwrap().0;
        for (n, k) in [(1, be), (17, 2 * be), (48, be), (70, 3 * be)] {
            let (w, len) = rand_weight(&mut rng, ty, n, k);
            let src = as_bytes(&w, len);
            let owned = Int8Weight::pack_gguf(ty, src, n, k).unwrap();
            let l = Int8Weight::layout(ty, n, k).unwrap();
            assert_eq!(l.groups, n.div_ceil(16));
            assert_eq!(l.quant_bytes(), owned.quant_bytes().len(), "{ty:?}");
            assert_eq!(l.scale_words(), owned.scale_words().len(), "{ty:?}");
            let (q_at, s_at, total) = place(&l);
            // Poisoned: every byte must be written by the packer.
            let mut buf = Buf64::new(total, 0xA5);
            {
                let b = buf.bytes_mut();
                let (q, s) = b.split_at_mut(s_at);
                // SAFETY: `s` starts 64-aligned (s_at is a multiple of 64 from a 64-aligned
                // base) and holds 2 * scale_words bytes; u16 accepts any bits.
                let s = unsafe {
                    std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u16>(), l.scale_words())
                };
                // Split the groups unevenly, as a thread pool's tasks would.
                let mut g0 = 0;
                for step in [1, 2, 3].iter().cycle() {
                    if g0 >= l.groups {
                        break;
                    }
                    let g1 = (g0 + step).min(l.groups);
                    Int8Weight::pack_gguf_groups(
                        ty,
                        src,
                        n,
                        k,
                        g0..g1,
                        &mut q[g0 * l.group_quant_bytes..g1 * l.group_quant_bytes],
                        &mut s[g0 * l.group_scale_words..g1 * l.group_scale_words],
                    )
                    .unwrap();
                    g0 = g1;
                }
            }
            let shared: SharedBytes = Arc::new(buf);
            let sw = Int8Weight::from_shared(ty, n, k, Arc::clone(&shared), q_at, s_at).unwrap();
            assert_eq!(sw.quant_bytes(), owned.quant_bytes(), "{ty:?} n {n} k {k}");
            assert_eq!(sw.scale_words(), owned.scale_words(), "{ty:?} n {n} k {k}");
            // Values read back through the packed layout equal the dequantizer's.
            let rb = ty.row_bytes(k).unwrap();
            let mut row = vec![f32::NAN; k];
            for r in 0..n {
                dequantize_row(ty, &src[r * rb..(r + 1) * rb], &mut row).unwrap();
                for (i, want) in row.iter().enumerate() {
                    let got = sw.value_at(r, i).unwrap();
                    assert_eq!(got.to_bits(), want.to_bits(), "{ty:?} ({r}, {i})");
                }
            }
            // Every kernel multiplies the shared weight bit for bit as the owned one.
            let m = 5;
            let x = rng.vec(m * k);
            let mut acts = QActs::with_capacity(m, k);
            for kern in Int8Kernel::available() {
                kern.quantize_acts_for(&x, m, k, owned.act_blocks(), &mut acts)
                    .unwrap();
                let (mut y0, mut y1) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                kern.gemm(&owned, &acts, &mut y0, n).unwrap();
                kern.gemm(&sw, &acts, &mut y1, n).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&y0), bits(&y1), "{ty:?} {} n {n} k {k}", kern.name());
            }
        }
    }
}

#[test]
fn bad_ranges_lengths_and_alignment_are_typed_errors() {
    let mut rng = Rng::new(7);
    let (ty, n, k) = (GgmlType::Q4_0, 20, 64);
    let (w, len) = rand_weight(&mut rng, ty, n, k);
    let src = as_bytes(&w, len);
    let l = Int8Weight::layout(ty, n, k).unwrap();
    let mut q = vec![0u8; l.quant_bytes()];
    let mut s = vec![0u16; l.scale_words()];
    // Groups past the weight.
    assert!(matches!(
        Int8Weight::pack_gguf_groups(ty, src, n, k, 0..3, &mut q, &mut s),
        Err(Error::BadRange { .. })
    ));
    // Output slices of the wrong size (one group's worth for two groups): nothing written.
    let (q1, _) = q.split_at_mut(l.group_quant_bytes);
    q1.fill(7);
    assert!(matches!(
        Int8Weight::pack_gguf_groups(ty, src, n, k, 0..2, q1, &mut s),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(q1.iter().all(|&b| b == 7));
    // A source of the wrong length, an unsupported type, K off the block.
    assert!(
        Int8Weight::pack_gguf_groups(ty, &src[..len - 18], n, k, 0..2, &mut q, &mut s).is_err()
    );
    assert!(matches!(
        Int8Weight::layout(GgmlType::F16, n, k),
        Err(Error::UnsupportedFormat { .. })
    ));
    assert!(matches!(
        Int8Weight::layout(ty, n, 48),
        Err(Error::ShapeMismatch { .. })
    ));
    // Shared bytes too short, or misaligned.
    let (_, s_at, total) = place(&l);
    let short: SharedBytes = Arc::new(Buf64::new(total - 1, 0));
    assert!(matches!(
        Int8Weight::from_shared(ty, n, k, short, 0, s_at),
        Err(Error::BufferTooSmall { .. })
    ));
    let ok: SharedBytes = Arc::new(Buf64::new(total + 64, 0));
    assert!(matches!(
        Int8Weight::from_shared(ty, n, k, Arc::clone(&ok), 1, s_at + 64),
        Err(Error::Misaligned { align: 64, .. })
    ));
    assert!(matches!(
        Int8Weight::from_shared(ty, n, k, Arc::clone(&ok), 0, s_at + 1),
        Err(Error::Misaligned { align: 2, .. })
    ));
    assert!(Int8Weight::from_shared(ty, n, k, ok, 64, s_at + 64).is_ok());
}

/// `quantize_acts_on` (rows spread over a pool) writes what `quantize_acts_for` writes, for
/// every implementation and scheme, over row counts below, at and above a task's 8 rows; the
/// outputs poisoned by an earlier quantization of other values.
#[test]
fn pooled_activation_quantization_equals_the_serial_one() {
    let mut rng = Rng::new(99);
    let pool = ThreadPool::new(3).unwrap();
    let both = ActBlocks::PER32.union(ActBlocks::PER256);
    for kernel in Int8Kernel::available() {
        for blocks in [ActBlocks::PER32, ActBlocks::PER256, both] {
            for m in [1, 7, 8, 9, 33, 130] {
                let k = 512;
                let x = rng.vec(m * k);
                let other = rng.vec(m * k);
                let mut a = QActs::with_capacity(m, k);
                let mut b = QActs::with_capacity(m, k);
                kernel
                    .quantize_acts_for(&other, m, k, blocks, &mut b)
                    .unwrap();
                kernel.quantize_acts_for(&x, m, k, blocks, &mut a).unwrap();
                kernel
                    .quantize_acts_on(&pool, &x, m, k, blocks, &mut b)
                    .unwrap();
                assert_eq!((b.m(), b.k(), b.blocks()), (m, k, blocks));
                for r in 0..m {
                    let what = format!("{} {blocks:?} m {m} row {r}", kernel.name());
                    if blocks.per32 {
                        assert_eq!(a.q_row(r), b.q_row(r), "{what}");
                        assert_eq!(a.meta_row(r), b.meta_row(r), "{what}");
                    }
                    if blocks.per256 {
                        assert_eq!(a.qk_row(r), b.qk_row(r), "{what}");
                        assert_eq!(a.super_row(r), b.super_row(r), "{what}");
                    }
                }
            }
        }
    }
}
