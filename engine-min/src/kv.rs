//! The KV cache on the host: keys and values per (layer, position) in f32, f16 (the default,
//! llama.cpp's) or q8_0, written row by row as each step's keys and values are made and read
//! back in blocks of positions, as f32, by the attention ([`crate::attention`]).
//!
//! [`KvType`] is the one `--kv-type` choice every path takes: the CPU path stores its cache in
//! it here; the resident GPU decoder maps it to hetero-opencl-kernels' own type (that crate
//! does not depend on this one), which holds all three on the device.

use std::fmt;
use std::str::FromStr;

use crate::model::Config;

/// Values per q8_0 block.
const QB: usize = 32;
/// Bytes per q8_0 block: an f16 scale and 32 signed bytes.
const QB_BYTES: usize = 34;

/// The element type of a KV cache (`--kv-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum KvType {
    /// 4 bytes a value: exact.
    F32,
    /// 2 bytes a value (IEEE half, rounded to nearest even): the default, as llama.cpp's.
    #[default]
    F16,
    /// 34 bytes per 32 values (ggml's q8_0: an f16 scale, 32 signed bytes, llama.cpp's
    /// quantizer), per position within each layer's `kv_dim` values (which must be a multiple
    /// of 32).
    Q8_0,
}

impl KvType {
    /// Every type, in `--kv-type` order.
    pub const ALL: [KvType; 3] = [KvType::F32, KvType::F16, KvType::Q8_0];

    /// The name `--kv-type` takes.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }

    /// Bytes of one position's `kv_dim` values (keys or values of one layer), or `None` when
    /// the type cannot hold that width (q8_0 off a multiple of 32) or it overflows.
    pub fn row_bytes(self, kv_dim: usize) -> Option<usize> {
        match self {
            KvType::F32 => kv_dim.checked_mul(4),
            KvType::F16 => kv_dim.checked_mul(2),
            KvType::Q8_0 => kv_dim
                .is_multiple_of(QB)
                .then(|| (kv_dim / QB).checked_mul(QB_BYTES))
                .flatten(),
        }
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("`{s}` is not a KV-cache type (types: f32, f16, q8_0)"))
    }
}

/// Why a KV cache of a type could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvError {
    /// The type cannot hold the model's key/value width.
    Width {
        /// The type.
        ty: KvType,
        /// The model's `kv_dim`.
        kv_dim: usize,
    },
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Width { ty, kv_dim } => write!(
                f,
                "--kv-type {ty} needs a key/value width that is a multiple of 32; this model's \
                 is {kv_dim}"
            ),
        }
    }
}

impl std::error::Error for KvError {}

/// One of the two halves (keys or values) of a cache, in its type.
enum Store {
    F32(Vec<f32>),
    F16(Vec<u16>),
    Q8(Vec<u8>),
}

/// One sequence's keys and values: `n_layer × ctx` rows of `kv_dim` values each, layer-major,
/// in one [`KvType`].
pub(crate) struct KvCache {
    ty: KvType,
    ctx: usize,
    kv_dim: usize,
    k: Store,
    v: Store,
}

impl KvCache {
    /// A zeroed cache of `ctx` positions for model `c` in `ty` (the size was checked against
    /// the budget by the caller: `limits::kv_cache_bytes`).
    pub(crate) fn new(c: &Config, ctx: usize, ty: KvType) -> Result<Self, KvError> {
        let kv_dim = c.kv_dim();
        let rb = ty.row_bytes(kv_dim).ok_or(KvError::Width { ty, kv_dim })?;
        let rows = c.n_layer * ctx;
        let make = || match ty {
            KvType::F32 => Store::F32(vec![0.0; rows * kv_dim]),
            KvType::F16 => Store::F16(vec![0; rows * kv_dim]),
            KvType::Q8_0 => Store::Q8(vec![0; rows * rb]),
        };
        Ok(Self {
            ty,
            ctx,
            kv_dim,
            k: make(),
            v: make(),
        })
    }

    /// The element type.
    pub(crate) fn ty(&self) -> KvType {
        self.ty
    }

    /// Bytes held (keys and values).
    pub(crate) fn bytes(&self) -> usize {
        let one = |s: &Store| match s {
            Store::F32(v) => v.len() * 4,
            Store::F16(v) => v.len() * 2,
            Store::Q8(v) => v.len(),
        };
        one(&self.k) + one(&self.v)
    }

    /// A writer of rows, shareable by pool tasks that write distinct positions.
    pub(crate) fn writer(&mut self) -> KvWriter<'_> {
        let ptr = |s: &mut Store| match s {
            Store::F32(v) => v.as_mut_ptr().cast::<u8>(),
            Store::F16(v) => v.as_mut_ptr().cast::<u8>(),
            Store::Q8(v) => v.as_mut_ptr(),
        };
        KvWriter {
            ty: self.ty,
            ctx: self.ctx,
            kv_dim: self.kv_dim,
            rows: self.rows(),
            k: ptr(&mut self.k),
            v: ptr(&mut self.v),
            _cache: std::marker::PhantomData,
        }
    }

    fn rows(&self) -> usize {
        match &self.k {
            Store::F32(v) => v.len() / self.kv_dim.max(1),
            Store::F16(v) => v.len() / self.kv_dim.max(1),
            Store::Q8(v) => v.len() / self.ty.row_bytes(self.kv_dim).unwrap_or(1).max(1),
        }
    }

    /// Keys of layer `l`, positions `j0..j0 + n`, values `off..off + hd` of each, as f32,
    /// transposed: `dst[d * ld + j]` (`ld ≥ n`; columns `n..ld` untouched). `tmp`: scratch of
    /// at least `hd + 64` floats (q8_0 dequantizes whole blocks).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn keys_t(
        &self,
        l: usize,
        j0: usize,
        n: usize,
        off: usize,
        hd: usize,
        dst: &mut [f32],
        ld: usize,
        tmp: &mut [f32],
    ) {
        for j in 0..n {
            let row = self.row(&self.k, l, j0 + j, off, hd, tmp);
            for (d, &x) in row.iter().enumerate() {
                dst[d * ld + j] = x;
            }
        }
    }

    /// Values of layer `l`, positions `j0..j0 + n`, values `off..off + hd` of each, as f32,
    /// row by row: `dst[j * hd + d]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn values(
        &self,
        l: usize,
        j0: usize,
        n: usize,
        off: usize,
        hd: usize,
        dst: &mut [f32],
        tmp: &mut [f32],
    ) {
        for j in 0..n {
            let row = self.row(&self.v, l, j0 + j, off, hd, tmp);
            dst[j * hd..(j + 1) * hd].copy_from_slice(row);
        }
    }

    /// Values `off..off + hd` of row (layer `l`, position `p`) of `s` as f32: a slice of the
    /// store (f32) or of `tmp` (converted).
    fn row<'a>(
        &'a self,
        s: &'a Store,
        l: usize,
        p: usize,
        off: usize,
        hd: usize,
        tmp: &'a mut [f32],
    ) -> &'a [f32] {
        let r = l * self.ctx + p;
        let kv = self.kv_dim;
        match s {
            Store::F32(v) => &v[r * kv + off..r * kv + off + hd],
            Store::F16(v) => {
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                // The vectorized conversion (F16C where the CPU has it).
                let src: &[half::f16] = v[r * kv + off..r * kv + off + hd].reinterpret_cast();
                src.convert_to_f32_slice(&mut tmp[..hd]);
                &tmp[..hd]
            }
            Store::Q8(v) => {
                // The blocks covering `off..off + hd`, dequantized (d · q: exact in f32).
                let (b0, b1) = (off / QB, (off + hd).div_ceil(QB));
                let base = r * (kv / QB) * QB_BYTES;
                for b in b0..b1 {
                    let blk = &v[base + b * QB_BYTES..base + (b + 1) * QB_BYTES];
                    let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                    let out = &mut tmp[(b - b0) * QB..(b - b0 + 1) * QB];
                    for (o, &q) in out.iter_mut().zip(&blk[2..]) {
                        *o = d * (q as i8) as f32;
                    }
                }
                let s0 = off - b0 * QB;
                &tmp[s0..s0 + hd]
            }
        }
    }
}

/// Writes rows of one [`KvCache`] from several pool tasks at once (each its own positions).
pub(crate) struct KvWriter<'a> {
    ty: KvType,
    ctx: usize,
    kv_dim: usize,
    rows: usize,
    k: *mut u8,
    v: *mut u8,
    _cache: std::marker::PhantomData<&'a mut KvCache>,
}

// SAFETY: the writer is a raw view of one exclusively borrowed cache; `write` requires that no
// two calls at once name the same (layer, position), so concurrent writes touch disjoint rows.
unsafe impl Sync for KvWriter<'_> {}
// SAFETY: as above.
unsafe impl Send for KvWriter<'_> {}

impl KvWriter<'_> {
    /// Stores `k` and `v` (`kv_dim` floats each) as row (layer `l`, position `p`), converted
    /// to the cache's type (f16: round to nearest even; q8_0: llama.cpp's quantizer per 32).
    /// Out-of-range rows are ignored (the callers check positions against the context first).
    ///
    /// # Safety
    /// No other call may write the same (layer, position) at the same time, and nothing may
    /// read the cache while any call runs.
    pub(crate) unsafe fn write(&self, l: usize, p: usize, k: &[f32], v: &[f32]) {
        let r = l * self.ctx + p;
        let kv = self.kv_dim;
        if p >= self.ctx || r >= self.rows || k.len() != kv || v.len() != kv {
            return;
        }
        for (base, src) in [(self.k, k), (self.v, v)] {
            match self.ty {
                KvType::F32 => {
                    // SAFETY: row r lies inside the store (r < rows); the caller guarantees
                    // no other access to it now; f32 storage is f32-aligned.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(base.cast::<f32>().add(r * kv), kv)
                    };
                    dst.copy_from_slice(src);
                }
                KvType::F16 => {
                    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                    // SAFETY: as above, u16 storage.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(base.cast::<u16>().add(r * kv), kv)
                    };
                    let dst: &mut [half::f16] = dst.reinterpret_cast_mut();
                    dst.convert_from_f32_slice(src);
                }
                KvType::Q8_0 => {
                    let rb = kv / QB * QB_BYTES;
                    // SAFETY: as above, byte storage of `rb` bytes a row.
                    let dst = unsafe { std::slice::from_raw_parts_mut(base.add(r * rb), rb) };
                    // Only fails on a length mismatch, excluded above (kv is a multiple of
                    // 32 for a q8_0 cache: `KvCache::new`).
                    let _ = hetero_sme::quantize_row(hetero_sme::GgmlType::Q8_0, src, dst);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(kv_dim: usize) -> Config {
        Config {
            n_layer: 2,
            d_model: 128,
            n_head: 8,
            n_kv_head: kv_dim / 16,
            head_dim: 16,
            d_ff: 256,
            vocab: 10,
            context: 64,
            rope_theta: 10_000.0,
            rope_dims: 32,
            eps: 1e-5,
        }
    }

    /// Every type stores and reads back rows within its rounding: f32 exactly, f16 within half
    /// an f16 ulp (relative 2^-11), q8_0 within half a step of its block (amax / 254); reads of
    /// a head in the middle of a block (q8_0) and transposed reads agree with row reads.
    #[test]
    fn rows_round_trip_within_each_types_rounding() {
        let c = config(64);
        for ty in KvType::ALL {
            let mut cache = KvCache::new(&c, 5, ty).unwrap();
            assert_eq!(cache.ty(), ty);
            let rows: Vec<Vec<f32>> = (0..10)
                .map(|r| {
                    (0..64)
                        .map(|i| ((r * 64 + i) as f32 * 0.37).sin() * 3.0)
                        .collect()
                })
                .collect();
            {
                let w = cache.writer();
                for (r, row) in rows.iter().enumerate() {
                    let neg: Vec<f32> = row.iter().map(|x| -x).collect();
                    // SAFETY: one writer, one call at a time, no reader.
                    unsafe { w.write(r / 5, r % 5, row, &neg) };
                }
            }
            let mut tmp = vec![f32::NAN; 64 + 64];
            for (off, hd) in [(0, 64), (32, 32), (16, 16), (8, 24)] {
                let mut kt = vec![f32::NAN; hd * 8];
                let mut vs = vec![f32::NAN; 5 * hd];
                for l in 0..2 {
                    cache.keys_t(l, 0, 5, off, hd, &mut kt, 8, &mut tmp);
                    cache.values(l, 0, 5, off, hd, &mut vs, &mut tmp);
                    for p in 0..5 {
                        let want = &rows[l * 5 + p];
                        let amax = want.iter().fold(0f32, |a, x| a.max(x.abs()));
                        for d in 0..hd {
                            let (x, k, v) = (want[off + d], kt[d * 8 + p], vs[p * hd + d]);
                            let tol = match ty {
                                KvType::F32 => 0.0,
                                KvType::F16 => x.abs() * 2f32.powi(-11),
                                // The block's amax bounds this row's (one block = 32 values);
                                // amax/127 is the step, half of it the rounding.
                                KvType::Q8_0 => amax / 127.0 / 2.0 * 1.01 + amax * 2f32.powi(-11),
                            };
                            assert!((k - x).abs() <= tol, "{ty} key l{l} p{p} d{d}: {k} vs {x}");
                            assert!((v + x).abs() <= tol, "{ty} value l{l} p{p} d{d}");
                        }
                    }
                }
            }
            let rb = ty.row_bytes(64).unwrap();
            assert_eq!(cache.bytes(), 2 * 2 * 5 * rb);
        }
        assert_eq!(KvType::Q8_0.row_bytes(48), None);
        assert!(matches!(
            KvCache::new(&config(48), 4, KvType::Q8_0),
            Err(KvError::Width { kv_dim: 48, .. })
        ));
        assert_eq!("f16".parse::<KvType>(), Ok(KvType::F16));
        assert!("q4_0"
            .parse::<KvType>()
            .unwrap_err()
            .contains("f32, f16, q8_0"));
    }
}
