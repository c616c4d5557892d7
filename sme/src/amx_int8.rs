//! The AMX tile operations the AMX-INT8 GEMM uses, as a trait, so that one tile program (loop
//! nest, layout, epilogue: `src/arch/x86_64/amx_int8.rs`) runs on the real instructions
//! (`HwTiles` in `src/arch/x86_64/amx_int8.rs`) and, in the host tests, on a software model of
//! them (`TileModel` below) — the layout and epilogue logic are proven on machines without AMX,
//! the instructions themselves on a CPU that has them.
//!
//! Semantics modelled (Intel SDM, "Intel AMX instructions"; palette 1: 8 tiles of at most 16
//! rows × 64 bytes):
//! - `ldtilecfg`: per tile `rows` (≤ 16) and `colsb` (bytes per row, ≤ 64); all tiles zeroed.
//! - `tileloadd tmm, [base + stride]`: row `r < rows` = `colsb` bytes at `base + r·stride`; the
//!   rest of the tile is zero.
//! - `tilezero tmm`: all zero.
//! - `tdpbssd c, a, b`: `c[m][n] += Σ_kk Σ_i a[m][4kk+i] · b[kk][4n+i]` with signed bytes and
//!   i32 dwords, `m < c.rows`, `n < c.colsb/4`, `kk < a.colsb/4`. Raises #UD unless
//!   `a.colsb/4 == b.rows`, `c.colsb == b.colsb` and `a.rows == c.rows`; the model panics then.
//! - `tilestored [base + stride], tmm`: row `r < rows` = `colsb` bytes to `base + r·stride`.
//! - `tilerelease`: back to the init state (unconfigured).

/// A palette-1 tile configuration (the 64-byte `ldtilecfg` operand).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TileConfig(pub [u8; 64]);

impl TileConfig {
    /// Palette 1 with tile `t` = `shapes[t]` (rows, bytes per row); tiles past `shapes` unused.
    pub fn new(shapes: &[(u8, u16)]) -> Self {
        let mut c = [0u8; 64];
        c[0] = 1;
        for (t, &(rows, colsb)) in shapes.iter().enumerate().take(8) {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = rows;
        }
        Self(c)
    }

    /// `(rows, colsb)` of tile `t`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn shape(&self, t: usize) -> (usize, usize) {
        let colsb = u16::from_le_bytes([self.0[16 + 2 * t], self.0[17 + 2 * t]]);
        (self.0[48 + t] as usize, colsb as usize)
    }
}

/// The tile instructions the AMX-INT8 program issues. Tile numbers are const generics (the
/// instructions encode them).
///
/// # Safety (every method)
/// The caller guarantees what the instruction needs: a configured tile state (`configure` ran
/// on this thread, with shapes that make the operation legal), and for loads/stores that
/// `rows` rows of `colsb` bytes at `base + r·stride` are readable / writable.
pub(crate) trait TileOps {
    /// `ldtilecfg`.
    ///
    /// # Safety
    /// A valid palette-1 configuration; the hardware version needs the OS's tile-data grant.
    unsafe fn configure(&mut self, cfg: &TileConfig);
    /// `tileloadd tmmT, [base + stride]`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn load<const T: u8>(&mut self, base: *const u8, stride: usize);
    /// `tilezero tmmT`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn zero<const T: u8>(&mut self);
    /// `tdpbssd tmmC, tmmA, tmmB`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn dpbssd<const C: u8, const A: u8, const B: u8>(&mut self);
    /// `tilestored [base + stride], tmmT`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn store<const T: u8>(&mut self, base: *mut u8, stride: usize);
    /// `tilerelease`.
    ///
    /// # Safety
    /// See the trait.
    unsafe fn release(&mut self);
}

/// Software model of the tile unit: eight 16 × 64-byte arrays and the configuration, with the
/// instructions' semantics and their #UD conditions as panics.
#[cfg(test)]
pub(crate) struct TileModel {
    cfg: Option<TileConfig>,
    tiles: [[[u8; 64]; 16]; 8],
    /// Instructions executed (`tdpbssd` only), for the tests' sanity checks.
    pub dp_count: usize,
}

#[cfg(test)]
impl TileModel {
    pub fn new() -> Self {
        Self {
            cfg: None,
            tiles: [[[0; 64]; 16]; 8],
            dp_count: 0,
        }
    }

    fn shape(&self, t: u8) -> (usize, usize) {
        let cfg = self.cfg.expect("tile instruction before ldtilecfg (#UD)");
        let (rows, colsb) = cfg.shape(t as usize);
        assert!(
            t < 8 && rows > 0 && colsb > 0,
            "tile {t} not configured (#UD)"
        );
        (rows, colsb)
    }
}

#[cfg(test)]
impl TileOps for TileModel {
    unsafe fn configure(&mut self, cfg: &TileConfig) {
        assert_eq!(cfg.0[0], 1, "palette 1");
        for t in 0..8 {
            let (rows, colsb) = cfg.shape(t);
            assert!(
                rows <= 16 && colsb <= 64,
                "tile {t}: {rows} x {colsb} (#GP)"
            );
            assert_eq!(rows == 0, colsb == 0, "tile {t}: half-configured (#GP)");
        }
        self.cfg = Some(*cfg);
        self.tiles = [[[0; 64]; 16]; 8];
    }

    unsafe fn load<const T: u8>(&mut self, base: *const u8, stride: usize) {
        let (rows, colsb) = self.shape(T);
        let tile = &mut self.tiles[T as usize];
        *tile = [[0; 64]; 16];
        for (r, row) in tile.iter_mut().enumerate().take(rows) {
            // SAFETY: the caller guarantees rows × colsb readable bytes at base + r·stride.
            let src = unsafe { core::slice::from_raw_parts(base.add(r * stride), colsb) };
            row[..colsb].copy_from_slice(src);
        }
    }

    unsafe fn zero<const T: u8>(&mut self) {
        self.shape(T);
        self.tiles[T as usize] = [[0; 64]; 16];
    }

    unsafe fn dpbssd<const C: u8, const A: u8, const B: u8>(&mut self) {
        let (cr, cc) = self.shape(C);
        let (ar, ac) = self.shape(A);
        let (br, bc) = self.shape(B);
        assert!(
            C != A && C != B && A != B,
            "tdpbssd with repeated tiles (#UD)"
        );
        assert!(
            ac % 4 == 0 && ac / 4 == br && cc == bc && ar == cr,
            "tdpbssd shapes C {cr}x{cc} A {ar}x{ac} B {br}x{bc} (#UD)"
        );
        let (a, b) = (self.tiles[A as usize], self.tiles[B as usize]);
        let c = &mut self.tiles[C as usize];
        for m in 0..cr {
            for n in 0..cc / 4 {
                let cell = &mut c[m][4 * n..4 * n + 4];
                let mut acc = i32::from_le_bytes([cell[0], cell[1], cell[2], cell[3]]);
                for kk in 0..ac / 4 {
                    for i in 0..4 {
                        let p =
                            i32::from(a[m][4 * kk + i] as i8) * i32::from(b[kk][4 * n + i] as i8);
                        acc = acc.wrapping_add(p);
                    }
                }
                cell.copy_from_slice(&acc.to_le_bytes());
            }
        }
        self.dp_count += 1;
    }

    unsafe fn store<const T: u8>(&mut self, base: *mut u8, stride: usize) {
        let (rows, colsb) = self.shape(T);
        for (r, row) in self.tiles[T as usize].iter().enumerate().take(rows) {
            // SAFETY: the caller guarantees rows × colsb writable bytes at base + r·stride.
            unsafe { core::ptr::copy_nonoverlapping(row.as_ptr(), base.add(r * stride), colsb) };
        }
    }

    unsafe fn release(&mut self) {
        assert!(self.cfg.is_some(), "tilerelease without a configuration");
        self.cfg = None;
    }
}

#[cfg(test)]
mod tests {
    //! The AMX-INT8 tile program run through [`TileModel`] on this machine (no AMX needed; the
    //! epilogue's AVX-512 runs natively): bit-identical to the portable oracle for every format
    //! over edge shapes, NaN-poisoned outputs with padded strides.

    use super::*;
    use crate::arch::x86_64::{amx_int8_model_tile, Vnni};
    use crate::int8::Int8Format;
    use crate::quant::{BlockQ4_0, BlockQ4_1, BlockQ8_0};
    use crate::{Int8Kernel, Int8Weight, QActs};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn f32(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    fn weight(rng: &mut Rng, f: Int8Format, n: usize, k: usize) -> Int8Weight {
        let blocks = n * k / 32;
        let d = |rng: &mut Rng| half::f16::from_f32(0.002 + 0.05 * rng.f32().abs()).to_bits();
        match f {
            Int8Format::Q4_0 => {
                let b: Vec<BlockQ4_0> = (0..blocks)
                    .map(|_| BlockQ4_0 {
                        d: d(rng),
                        qs: core::array::from_fn(|_| rng.next() as u8),
                    })
                    .collect();
                Int8Weight::pack_q4_0(&b, n, k)
            }
            Int8Format::Q4_1 => {
                let b: Vec<BlockQ4_1> = (0..blocks)
                    .map(|_| BlockQ4_1 {
                        d: d(rng),
                        m: half::f16::from_f32(0.1 * rng.f32()).to_bits(),
                        qs: core::array::from_fn(|_| rng.next() as u8),
                    })
                    .collect();
                Int8Weight::pack_q4_1(&b, n, k)
            }
            Int8Format::Q8_0 => {
                let b: Vec<BlockQ8_0> = (0..blocks)
                    .map(|_| BlockQ8_0 {
                        d: d(rng),
                        qs: core::array::from_fn(|_| rng.next() as i8),
                    })
                    .collect();
                Int8Weight::pack_q8_0(&b, n, k)
            }
        }
        .unwrap()
    }

    /// Runs the portable oracle and the modelled AMX program (every plan tile of it, at every
    /// pipeline lookahead) into NaN-poisoned outputs with stride n + 5; checks bits and untouched
    /// padding. Returns the `tdpbssd` count of one run.
    fn check(rng: &mut Rng, f: Int8Format, m: usize, n: usize, k: usize) -> usize {
        let w = weight(rng, f, n, k);
        let mut x: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
        // Some all-zero blocks and outliers, as the int8 tests use.
        for (i, blk) in x.chunks_exact_mut(32).enumerate() {
            match i % 13 {
                0 => blk.fill(0.0),
                5 => blk[i % 32] = 40.0,
                _ => {}
            }
        }
        let mut acts = QActs::with_capacity(m, k);
        Int8Kernel::Portable
            .quantize_acts(&x, m, k, &mut acts)
            .unwrap();
        let ldy = n + 5;
        let mut want = vec![f32::NAN; m * ldy];
        Int8Kernel::Portable
            .gemm(&w, &acts, &mut want, ldy)
            .unwrap();
        let mut got = vec![f32::NAN; m * ldy];
        let mut dps = 0;
        for lookahead in 1..=3 {
            got.fill(f32::NAN);
            let mut model = TileModel::new();
            amx_int8_model_tile(&mut model, &w, &acts, &mut got, ldy, lookahead);
            for r in 0..m {
                for c in 0..ldy {
                    let (p, q) = (want[r * ldy + c], got[r * ldy + c]);
                    if c < n {
                        assert_eq!(
                            p.to_bits(),
                            q.to_bits(),
                            "{f:?} m{m} n{n} k{k} lookahead {lookahead} ({r},{c}): {p} vs {q}"
                        );
                    } else {
                        assert!(
                            q.is_nan(),
                            "{f:?} m{m} n{n} k{k}: padding ({r},{c}) written"
                        );
                    }
                }
            }
            assert!(model.cfg.is_none(), "tile state left configured");
            dps = model.dp_count;
        }
        dps
    }

    #[test]
    fn modelled_amx_program_is_bit_identical_to_the_oracle() {
        if hetero_tests::require("avx512-vnni", Vnni::try_new().ok_or("no AVX-512 VNNI")).is_none()
        {
            return; // the program's epilogue is AVX-512
        }
        let mut rng = Rng(0x5EED_1234_ABCD_0001);
        let ms: Vec<usize> = (1..=33).chain([127, 128, 129]).collect();
        let ns = [1, 15, 17, 40, 100];
        let mut cases = 0;
        for f in [Int8Format::Q4_0, Int8Format::Q4_1, Int8Format::Q8_0] {
            for (i, &m) in ms.iter().enumerate() {
                for &k in &[32, 64, 576, 1536] {
                    // Every M with K = 32 and 64; the longer K at a rotating N and every 4th M.
                    if k > 64 && i % 4 != 0 && m < 127 {
                        continue;
                    }
                    let n = ns[(i + k / 32) % ns.len()];
                    let dps = check(&mut rng, f, m, n, k);
                    // One tdpbssd per (16-row slice, 16-column group, 32-k block).
                    assert_eq!(dps, m.div_ceil(16) * n.div_ceil(16) * (k / 32));
                    cases += 1;
                }
            }
            // K longer than one pass of unpacked blocks (64 blocks): the accumulators wait in
            // the stack buffer between passes.
            check(&mut rng, f, 37, 33, 32 * 150);
        }
        assert!(cases > 100);
    }

    #[test]
    fn model_rejects_illegal_shapes() {
        let mut t = TileModel::new();
        // SAFETY: the model reads no memory for these operations.
        unsafe {
            t.configure(&TileConfig::new(&[(16, 32), (8, 64), (16, 64), (16, 64)]));
            t.zero::<2>();
            t.dpbssd::<2, 0, 1>(); // legal: K = 8 dwords
        }
        let r = std::panic::catch_unwind(move || {
            let mut t = t;
            // SAFETY: as above.
            unsafe { t.dpbssd::<2, 3, 1>() }; // A with 64 bytes per row against 8 B rows
        });
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            let mut t = TileModel::new();
            // SAFETY: as above.
            unsafe { t.zero::<0>() }; // no configuration
        });
        assert!(r.is_err());
    }
}
