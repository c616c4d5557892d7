//! A weight repacked for hetero-sme, as it sits in the backend's buffer: a 64-byte header (magic,
//! ABI version, type, shape, payload sizes) followed by the payload, so a blob of another type,
//! shape or version is refused, never misread.
//!
//! - Int8 form (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): hetero-sme's int8 GEMM layout
//!   ([`hetero_sme::Int8WeightRef`]): the packed `u` bytes (64-byte aligned, right after the
//!   header), then the FP16-sized scale words.
//! - FP16 form (F16): hetero-sme's packed FP16 panels ([`hetero_sme::PackedRef`], 64 output
//!   columns × K pairs).
//!
//! Both keep every source bit, so [`unpack`] gives the GGUF bytes back exactly.

use hetero_sme::{
    pack_f16, packed_len_checked, GgmlType, Int8Weight, Int8WeightRef, Layout, PackedFormat,
    PackedRef, WeightSource, PANEL_COLS,
};

use crate::Error;

/// The header's size; the payload starts 64-byte aligned after it.
pub const HEADER: usize = 64;
/// The alignment blobs need (the int8 kernels read the quants with aligned loads).
pub const ALIGN: usize = 64;
/// The first 8 bytes of every blob.
pub const MAGIC: [u8; 8] = *b"HTGGMLW1";

/// The packed forms.
const FORM_INT8: u32 = 1;
const FORM_F16: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    magic: [u8; 8],
    abi: u32,
    ggml_type: u32,
    n: u64,
    k: u64,
    /// Int8: packed `u` bytes; FP16: 0.
    quant_bytes: u64,
    /// Int8: scale words; FP16: packed u16 elements.
    words: u64,
    form: u32,
    reserved: [u32; 3],
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER);

/// The types this backend runs (and so repacks): the int8 GEMM's and F16.
pub fn supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
    )
}

/// The payload layout of a weight: `(form, quant bytes, words)`.
fn layout(ty: GgmlType, n: usize, k: usize) -> Result<(u32, usize, usize), Error> {
    if n == 0 || k == 0 {
        return Err(Error::Invalid(
            "a weight has at least one row and one column",
        ));
    }
    match ty {
        GgmlType::F16 => {
            let w = packed_len_checked(k, n).ok_or(Error::Invalid("weight too large"))?;
            Ok((FORM_F16, 0, w))
        }
        t if supported(t) => {
            let (qb, sw) = Int8Weight::storage_len(t, n, k)?;
            Ok((FORM_INT8, qb, sw))
        }
        t => Err(Error::Unsupported(t)),
    }
}

/// Bytes a blob of `n` rows of `k` elements of `ty` takes (a multiple of [`ALIGN`]);
/// [`Error::Unsupported`] for a type this backend leaves to others, [`Error::Invalid`] for a
/// shape it cannot hold (K off the type's block, empty, too large).
pub fn size(ty: GgmlType, n: usize, k: usize) -> Result<usize, Error> {
    let (_, qb, w) = layout(ty, n, k)?;
    let payload = w
        .checked_mul(2)
        .and_then(|s| s.checked_add(qb))
        .ok_or(Error::Invalid("weight too large"))?;
    payload
        .checked_add(HEADER + ALIGN - 1)
        .map(|s| s / ALIGN * ALIGN)
        .ok_or(Error::Invalid("weight too large"))
}

/// `src` as u16 words: borrowed when 2-byte aligned, else copied (load time only).
fn words(src: &[u8]) -> std::borrow::Cow<'_, [u16]> {
    // SAFETY: every bit pattern is a valid u16; align_to only yields the aligned middle part.
    let (pre, mid, post) = unsafe { src.align_to::<u16>() };
    if pre.is_empty() && post.is_empty() {
        std::borrow::Cow::Borrowed(mid)
    } else {
        std::borrow::Cow::Owned(
            src.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect(),
        )
    }
}

/// Mutable u16 view of 2-aligned bytes of even length.
fn words_mut(b: &mut [u8]) -> Result<&mut [u16], Error> {
    // SAFETY: every bit pattern is a valid u16; align_to only yields the aligned middle part.
    let (pre, mid, post) = unsafe { b.align_to_mut::<u16>() };
    if !pre.is_empty() || !post.is_empty() {
        return Err(Error::Invalid("blob payload misaligned"));
    }
    Ok(mid)
}

/// Repacks `n` rows of `k` elements of `ty` (GGUF bytes, `n` rows of the type's row bytes, any
/// alignment) into `dst` (64-byte aligned, at least [`size`] bytes). Every check runs before
/// any write.
pub fn pack(ty: GgmlType, n: usize, k: usize, src: &[u8], dst: &mut [u8]) -> Result<(), Error> {
    let need = size(ty, n, k)?;
    let (form, qb, w) = layout(ty, n, k)?;
    let src_len = ty
        .row_bytes(k)
        .and_then(|r| r.checked_mul(n))
        .ok_or(Error::Invalid("weight too large"))?;
    if src.len() != src_len {
        return Err(Error::Invalid(
            "source is not n rows of k elements of its type",
        ));
    }
    if !(dst.as_ptr() as usize).is_multiple_of(ALIGN) {
        return Err(Error::Invalid("destination not 64-byte aligned"));
    }
    if dst.len() < need {
        return Err(Error::Invalid("destination smaller than the packed size"));
    }
    let src = words(src);
    // SAFETY: u16 → bytes, any bit pattern; the borrow ends before `src` is dropped.
    let (_, src_bytes, _) = unsafe { src.align_to::<u8>() };
    let (head, payload) = dst.split_at_mut(HEADER);
    match form {
        FORM_INT8 => {
            let (q, rest) = payload.split_at_mut(qb);
            let s = words_mut(&mut rest[..2 * w])?;
            Int8Weight::pack_gguf_into(ty, src_bytes, n, k, q, s)?;
        }
        _ => {
            let s = WeightSource {
                data: &src[..],
                k,
                n,
                ld: k,
                layout: Layout::ColMajor,
            };
            pack_f16(
                &s,
                0..n,
                PackedFormat::F16,
                words_mut(&mut payload[..2 * w])?,
            )?;
        }
    }
    let h = Header {
        magic: MAGIC,
        abi: crate::ABI_VERSION,
        ggml_type: ty.code(),
        n: n as u64,
        k: k as u64,
        quant_bytes: qb as u64,
        words: w as u64,
        form,
        reserved: [0; 3],
    };
    // SAFETY: `head` is HEADER = size_of::<Header>() writable bytes; Header is plain data
    // (repr(C), no padding: 8+4+4+8·4+4+12 = 64) and the write needs no alignment.
    unsafe { head.as_mut_ptr().cast::<Header>().write_unaligned(h) };
    Ok(())
}

/// A validated blob.
#[derive(Debug, Clone, Copy)]
pub enum Weight<'a> {
    /// The int8 GEMM's form.
    Int8(Int8WeightRef<'a>),
    /// FP16 panels.
    F16(PackedRef<'a>),
}

impl Weight<'_> {
    /// Output features (rows of the GGUF weight).
    pub fn n(&self) -> usize {
        match self {
            Weight::Int8(w) => w.n(),
            Weight::F16(w) => w.n(),
        }
    }
    /// Reduction length.
    pub fn k(&self) -> usize {
        match self {
            Weight::Int8(w) => w.k(),
            Weight::F16(w) => w.k(),
        }
    }
    /// The source type.
    pub fn ty(&self) -> GgmlType {
        match self {
            Weight::Int8(w) => w.format(),
            Weight::F16(_) => GgmlType::F16,
        }
    }
}

/// Checks `blob` (its header, its length, its alignment) and views its payload.
pub fn view(blob: &[u8]) -> Result<Weight<'_>, Error> {
    if blob.len() < HEADER {
        return Err(Error::Invalid("blob shorter than its header"));
    }
    if !(blob.as_ptr() as usize).is_multiple_of(ALIGN) {
        return Err(Error::Invalid("blob not 64-byte aligned"));
    }
    // SAFETY: HEADER readable bytes (checked); Header is plain data, any bit pattern valid.
    let h = unsafe { blob.as_ptr().cast::<Header>().read_unaligned() };
    if h.magic != MAGIC {
        return Err(Error::Invalid("not a hetero-ggml weight (bad magic)"));
    }
    if h.abi != crate::ABI_VERSION {
        return Err(Error::Invalid(
            "weight packed by another hetero-ggml version",
        ));
    }
    let ty = GgmlType::from_code(h.ggml_type).ok_or(Error::Invalid("unknown type in blob"))?;
    let (n, k) = (
        usize::try_from(h.n).map_err(|_| Error::Invalid("blob rows"))?,
        usize::try_from(h.k).map_err(|_| Error::Invalid("blob columns"))?,
    );
    let (form, qb, w) = layout(ty, n, k)?;
    if (form, qb as u64, w as u64) != (h.form, h.quant_bytes, h.words) {
        return Err(Error::Invalid(
            "blob header disagrees with its type and shape",
        ));
    }
    if blob.len() < size(ty, n, k)? {
        return Err(Error::Invalid("blob shorter than its header says"));
    }
    let payload = &blob[HEADER..];
    // SAFETY: any bit pattern is a valid u16; only the aligned middle is used, and the payload
    // starts 64-aligned (blob 64-aligned + 64-byte header), so the middle starts at its start.
    let (pre, all_words, _) = unsafe { payload.align_to::<u16>() };
    debug_assert!(pre.is_empty());
    Ok(match form {
        FORM_INT8 => {
            let s = &all_words[qb / 2..qb / 2 + w];
            Weight::Int8(Int8WeightRef::new(ty, n, k, &payload[..qb], s)?)
        }
        _ => Weight::F16(PackedRef::new(&all_words[..w], k, n, PackedFormat::F16)?),
    })
}

/// Writes bytes `offset..offset + out.len()` of the GGUF tensor `blob` was packed from into
/// `out` (the exact source bytes). Allocates a copy of the whole tensor: a rare path (a weight
/// read back, e.g. copied to another backend), not a compute one.
pub fn unpack(blob: &[u8], offset: usize, out: &mut [u8]) -> Result<(), Error> {
    let w = view(blob)?;
    let (ty, n, k) = (w.ty(), w.n(), w.k());
    let total = ty
        .row_bytes(k)
        .and_then(|r| r.checked_mul(n))
        .ok_or(Error::Invalid("weight too large"))?;
    let end = offset
        .checked_add(out.len())
        .filter(|&e| e <= total)
        .ok_or(Error::Invalid("range past the end of the tensor"))?;
    let mut full = vec![0u16; total / 2];
    let full_bytes = {
        // SAFETY: u16 storage seen as bytes (2-aligned, any pattern valid); exclusive borrow.
        let (_, b, _) = unsafe { full.align_to_mut::<u8>() };
        b
    };
    match w {
        Weight::Int8(v) => v.unpack_gguf(full_bytes)?,
        Weight::F16(p) => {
            let (kp, data) = (k.div_ceil(2), p.data());
            for (row, dst) in full_bytes.chunks_exact_mut(2 * k).enumerate() {
                let (pn, c) = (row / PANEL_COLS, row % PANEL_COLS);
                for kk in 0..k {
                    let v = data[((pn * kp + kk / 2) * PANEL_COLS + c) * 2 + kk % 2];
                    dst[2 * kk..2 * kk + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    out.copy_from_slice(&full_bytes[offset..end]);
    Ok(())
}
