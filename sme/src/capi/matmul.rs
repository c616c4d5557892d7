//! The matmul micro-kernel interface, shaped after Arm KleidiAI's: per variant, step and
//! blocking queries, packed sizes, packing into caller buffers, and `run_matmul` over a tile
//! range so the host engine does the threading. Two families:
//!
//! - `HETERO_SME_FAMILY_INT8_GEMM` (prefill): the int8 GEMM (`Int8Weight`, `QActs`,
//!   `Int8Kernel`); the LHS is the activations quantized to int8 per 32 or per 256 values.
//! - `HETERO_SME_FAMILY_QGEMV` (decode): the packed quantized GEMV (`qpack_gguf`,
//!   `QPackedPlan`); the LHS is the f32 activations copied behind a header.
//!
//! Both compute `dst[M×N] = x[M×K] · Wᵀ` for a GGUF weight W of N rows of K values, f32 in, f32
//! out, with exactly the Rust API's results (bit for bit: every row is independent of the tile
//! it falls in).
//!
//! Packed buffers ("blobs") start with a 64-byte header (magic, version, kind, variant, type,
//! shape, payload size), so a blob of another variant, type or shape is refused, not misread.

use core::ptr;

use super::*;
use crate::int8::{Ctx, Int8Fmt};
use crate::{
    qpack_gguf, qpacked_len, ActBlocks, BlockMeta, GgmlType, Int8Kernel, Kernel, KernelKind,
    OutMut, QPackedPlan, QPackedRef, SuperMeta, QPACK_ROWS,
};

/// Alignment every packed buffer (weights and activations) must have, in bytes.
pub const HETERO_SME_PACKED_ALIGN: usize = 64;
/// Bytes of the header at the start of every packed buffer (included in the packed sizes).
pub const HETERO_SME_PACKED_HEADER_BYTES: usize = 64;

/// Kernel families (what a variant computes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hetero_sme_family {
    /// Int8 GEMM on quantized weights × int8-quantized activations (prefill, any M).
    HETERO_SME_FAMILY_INT8_GEMM = 1,
    /// Packed quantized GEMV on f32 activations (decode; any M, run 16 rows at a time).
    HETERO_SME_FAMILY_QGEMV = 2,
}

/// Kernel variants (the `uint32_t variant` argument). A variant's packed weights are its own:
/// `run_matmul` refuses a blob packed by another one. Sizes, steps and `run_rhs_pack` work for
/// every variant this build knows; `run_lhs_pack` and `run_matmul` need the variant available
/// on this CPU (`hetero_sme_variant_available`), else `HETERO_SME_VARIANT_UNAVAILABLE`.
/// Ids 5 and 6 are reserved for the aarch64 int8 kernels (NEON dot product, SME) and name no
/// variant yet.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum hetero_sme_variant {
    /// Int8 GEMM, portable Rust (every CPU; the oracle the others match bit for bit).
    HETERO_SME_VARIANT_INT8_PORTABLE = 1,
    /// Int8 GEMM, x86-64 AVX2 (`vpmaddubsw` + `vpmaddwd`; AVX2 + FMA + F16C): x86-64 CPUs
    /// without AVX-512.
    HETERO_SME_VARIANT_INT8_AVX2 = 4,
    /// Int8 GEMM, x86-64 AVX-512 VNNI.
    HETERO_SME_VARIANT_INT8_AVX512_VNNI = 2,
    /// Int8 GEMM, x86-64 AMX-INT8 (row chunks of up to 8 rows run the VNNI kernel).
    HETERO_SME_VARIANT_INT8_AMX = 3,
    // Ids 5 and 6 are kept for the aarch64 int8 kernels (NEON dot product / i8mm, and SME)
    // once the Rust side has them (`Int8Kernel` has no aarch64 variant yet); until then they
    // are HETERO_SME_UNKNOWN_VARIANT. Ids 1..=16 are the int8 family, 17..=32 the GEMV.
    /// Packed GEMV, portable Rust (every CPU).
    HETERO_SME_VARIANT_QGEMV_PORTABLE = 17,
    /// Packed GEMV, x86-64 AVX-512 (every type).
    HETERO_SME_VARIANT_QGEMV_AVX512 = 18,
    /// Packed GEMV, aarch64 NEON (Q4_0, Q4_1, Q8_0; the other types run the portable code).
    HETERO_SME_VARIANT_QGEMV_NEON = 19,
}

/// One variant's whole interface as function pointers (KleidiAI's ukernel struct), filled by
/// `hetero_sme_matmul_ukernel_get`. Each pointer is the variant's plain function of the same
/// name (`hetero_sme_matmul_<name>`) with the variant bound; the same thread-safety applies.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hetero_sme_matmul_ukernel {
    /// The variant (a `hetero_sme_variant`).
    pub variant: u32,
    /// Its family (a `hetero_sme_family`).
    pub family: u32,
    /// See `hetero_sme_matmul_get_m_step`.
    pub get_m_step: extern "C" fn() -> usize,
    /// See `hetero_sme_matmul_get_n_step`.
    pub get_n_step: extern "C" fn() -> usize,
    /// See `hetero_sme_matmul_get_mr`.
    pub get_mr: extern "C" fn() -> usize,
    /// See `hetero_sme_matmul_get_nr`.
    pub get_nr: extern "C" fn() -> usize,
    /// See `hetero_sme_matmul_get_kr`.
    pub get_kr: extern "C" fn() -> usize,
    /// See `hetero_sme_matmul_get_sr`.
    pub get_sr: extern "C" fn() -> usize,
    /// See `hetero_sme_matmul_get_lhs_packed_size`.
    pub get_lhs_packed_size: unsafe extern "C" fn(
        ggml_type: u32,
        m: usize,
        k: usize,
        size: *mut usize,
    ) -> hetero_sme_status,
    /// See `hetero_sme_matmul_run_lhs_pack`.
    pub run_lhs_pack: unsafe extern "C" fn(
        ggml_type: u32,
        m: usize,
        k: usize,
        x: *const f32,
        x_len: usize,
        ldx: usize,
        lhs: *mut u8,
        lhs_size: usize,
    ) -> hetero_sme_status,
    /// See `hetero_sme_matmul_get_rhs_packed_size`.
    pub get_rhs_packed_size: unsafe extern "C" fn(
        ggml_type: u32,
        n: usize,
        k: usize,
        size: *mut usize,
    ) -> hetero_sme_status,
    /// See `hetero_sme_matmul_run_rhs_pack`.
    pub run_rhs_pack: unsafe extern "C" fn(
        ggml_type: u32,
        n: usize,
        k: usize,
        src: *const u8,
        src_len: usize,
        rhs: *mut u8,
        rhs_size: usize,
    ) -> hetero_sme_status,
    /// See `hetero_sme_matmul_get_dst_offset` (in floats).
    pub get_dst_offset: extern "C" fn(m_idx: usize, n_idx: usize, ldd: usize) -> usize,
    /// See `hetero_sme_matmul_get_dst_size` (in floats).
    pub get_dst_size: extern "C" fn(m: usize, n: usize, ldd: usize) -> usize,
    /// See `hetero_sme_matmul_run_matmul`.
    pub run_matmul: unsafe extern "C" fn(
        m_start: usize,
        m_end: usize,
        n_start: usize,
        n_end: usize,
        lhs: *const u8,
        lhs_size: usize,
        rhs: *const u8,
        rhs_size: usize,
        dst: *mut f32,
        dst_len: usize,
        ldd: usize,
    ) -> hetero_sme_status,
}

// ---- variants ----------------------------------------------------------------------------------

/// A known variant. To add one (e.g. the aarch64 int8 kernels, ids 5 and 6, once
/// `Int8Kernel` has them): an arm here, its id in `of`/`id` and the header enum, its name, its
/// token probe in `runner`, its place in `VARIANTS` (worst to best within its family: that
/// order is what `hetero_sme_best_variant` picks from), its `m_step`, and its `table::<ID>` in
/// `hetero_sme_matmul_ukernel_get`. The C tests run every available variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum V {
    I8Portable,
    I8Avx2,
    I8Vnni,
    I8Amx,
    QPortable,
    QAvx512,
    QNeon,
}

/// Every known variant, per family worst to best (the order `Int8Kernel::available` and
/// `KernelKind` use).
const VARIANTS: [V; 7] = [
    V::I8Portable,
    V::I8Avx2,
    V::I8Vnni,
    V::I8Amx,
    V::QPortable,
    V::QAvx512,
    V::QNeon,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Int8,
    Qgemv,
}

/// A runnable variant: the token that proves the CPU can run it.
#[derive(Debug, Clone, Copy)]
enum Runner {
    Int8(Int8Kernel),
    Qgemv(Kernel),
}

impl V {
    fn of(id: u32) -> Result<V, Fail> {
        Ok(match id {
            1 => V::I8Portable,
            4 => V::I8Avx2,
            2 => V::I8Vnni,
            3 => V::I8Amx,
            17 => V::QPortable,
            18 => V::QAvx512,
            19 => V::QNeon,
            _ => return Err(Fail::new(HETERO_SME_UNKNOWN_VARIANT, "unknown variant id")),
        })
    }
    fn id(self) -> u32 {
        match self {
            V::I8Portable => 1,
            V::I8Avx2 => 4,
            V::I8Vnni => 2,
            V::I8Amx => 3,
            V::QPortable => 17,
            V::QAvx512 => 18,
            V::QNeon => 19,
        }
    }
    fn family(self) -> Family {
        match self {
            V::I8Portable | V::I8Avx2 | V::I8Vnni | V::I8Amx => Family::Int8,
            _ => Family::Qgemv,
        }
    }
    fn name(self) -> &'static core::ffi::CStr {
        match self {
            V::I8Portable => c"int8-portable",
            V::I8Avx2 => c"int8-avx2",
            V::I8Vnni => c"int8-avx512-vnni",
            V::I8Amx => c"int8-amx",
            V::QPortable => c"qgemv-portable",
            V::QAvx512 => c"qgemv-avx512",
            V::QNeon => c"qgemv-neon",
        }
    }
    /// The token, probed once per variant (no allocation after the first call).
    fn runner(self) -> Option<Runner> {
        use std::sync::OnceLock;
        static CACHE: [OnceLock<Option<Runner>>; VARIANTS.len()] =
            [const { OnceLock::new() }; VARIANTS.len()];
        let i = VARIANTS.iter().position(|&v| v == self).unwrap_or(0);
        *CACHE[i].get_or_init(|| match self {
            V::I8Portable => Some(Runner::Int8(Int8Kernel::Portable)),
            #[cfg(target_arch = "x86_64")]
            V::I8Avx2 => {
                crate::arch::x86_64::Avx2::try_new().map(|t| Runner::Int8(Int8Kernel::Avx2(t)))
            }
            #[cfg(target_arch = "x86_64")]
            V::I8Vnni => {
                crate::arch::x86_64::Vnni::try_new().map(|t| Runner::Int8(Int8Kernel::Vnni(t)))
            }
            #[cfg(target_arch = "x86_64")]
            V::I8Amx => {
                crate::arch::x86_64::AmxInt8::try_new().map(|t| Runner::Int8(Int8Kernel::Amx(t)))
            }
            V::QPortable => Kernel::new(KernelKind::Portable).ok().map(Runner::Qgemv),
            V::QAvx512 => Kernel::new(KernelKind::Avx512).ok().map(Runner::Qgemv),
            V::QNeon => Kernel::new(KernelKind::Neon).ok().map(Runner::Qgemv),
            #[allow(unreachable_patterns)]
            _ => None,
        })
    }
    fn runnable(self) -> Result<Runner, Fail> {
        self.runner().ok_or_else(|| {
            Fail::new(
                HETERO_SME_VARIANT_UNAVAILABLE,
                "the variant is not available on this CPU",
            )
        })
    }
    fn m_step(self) -> usize {
        match self {
            // Rows of one int8 tile call (the AMX tile program takes 64).
            V::I8Amx => 64,
            V::I8Portable | V::I8Avx2 | V::I8Vnni => crate::INT8_TILE_ROWS,
            // The GEMV kernels take at most 16 rows per call.
            _ => crate::GEMV_MAX_ROWS,
        }
    }
    fn kr(self) -> usize {
        match self.family() {
            // vpdpbusd: 4 consecutive k per 32-bit lane.
            Family::Int8 => 4,
            // One dword lane holds 8 consecutive 4-bit values.
            Family::Qgemv => 8,
        }
    }
    fn sr(self) -> usize {
        match self.family() {
            // Low nibbles hold k steps 0..16 of a 32-chunk, high nibbles 16..32.
            Family::Int8 => 2,
            Family::Qgemv => 1,
        }
    }
}

// ---- blob headers -------------------------------------------------------------------------------

const MAGIC: u32 = u32::from_le_bytes(*b"HSME");
const BLOB_VERSION: u16 = 1;
const KIND_RHS: u16 = 1;
const KIND_LHS: u16 = 2;
const SCHEME_NONE: u32 = 0;
const SCHEME_PER32: u32 = 1;
const SCHEME_PER256: u32 = 2;
const HDR: usize = HETERO_SME_PACKED_HEADER_BYTES;

/// The 64-byte header of every packed buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    magic: u32,
    version: u16,
    kind: u16,
    variant: u32,
    ggml_type: u32,
    /// Weight rows N (RHS) or activation rows M (LHS).
    rows: u64,
    k: u64,
    /// Bytes after the header.
    payload: u64,
    /// LHS: the activation scheme (SCHEME_*); RHS: 0.
    scheme: u32,
    reserved: [u32; 5],
}

const _: () = assert!(core::mem::size_of::<Header>() == HDR);

/// Reads and checks a blob's header: magic, version, kind, size, variant, then returns it.
///
/// # Safety
/// `blob` valid for `size` byte reads (checked non-null and aligned here).
unsafe fn read_header(
    blob: *const u8,
    size: usize,
    kind: u16,
    v: V,
    what: &'static str,
) -> Result<Header, Fail> {
    nonnull(blob, what)?;
    aligned(blob, HETERO_SME_PACKED_ALIGN, what)?;
    if size < HDR {
        return Err(Fail::new(HETERO_SME_BUFFER_TOO_SMALL, what));
    }
    // SAFETY: size >= 64 readable bytes (caller's contract), 64-aligned (checked).
    let h = unsafe { blob.cast::<Header>().read() };
    let bad = |t| Err(Fail::new(HETERO_SME_BAD_BLOB, t));
    if h.magic != MAGIC {
        return bad("packed buffer: bad magic (not packed by hetero-sme, or corrupt)");
    }
    if h.version != BLOB_VERSION {
        return bad("packed buffer: another layout version");
    }
    if h.kind != kind {
        return bad(if kind == KIND_RHS {
            "packed buffer: activations given as weights"
        } else {
            "packed buffer: weights given as activations"
        });
    }
    if h.payload > (size - HDR) as u64 {
        return Err(Fail::new(
            HETERO_SME_BUFFER_TOO_SMALL,
            "packed buffer: shorter than its header says",
        ));
    }
    if h.variant != v.id() {
        return Err(Fail::new(
            HETERO_SME_BLOB_VARIANT_MISMATCH,
            "packed buffer: packed by another variant",
        ));
    }
    Ok(h)
}

/// The type code and K of a packed weight, from its header (magic, version and kind checked;
/// the variant is the matmul's to check).
///
/// # Safety
/// `rhs` valid for `rhs_size` byte reads.
pub(crate) unsafe fn peek_rhs(rhs: *const u8, rhs_size: usize) -> Result<(u32, usize), Fail> {
    nonnull(rhs, "rhs")?;
    aligned(rhs, HETERO_SME_PACKED_ALIGN, "rhs")?;
    if rhs_size < HDR {
        return Err(Fail::new(HETERO_SME_BUFFER_TOO_SMALL, "rhs"));
    }
    // SAFETY: 64 readable, aligned bytes (checked against the caller's size).
    let h = unsafe { rhs.cast::<Header>().read() };
    if h.magic != MAGIC || h.version != BLOB_VERSION || h.kind != KIND_RHS {
        return Err(Fail::new(HETERO_SME_BAD_BLOB, "rhs: not a packed weight"));
    }
    let k = usize::try_from(h.k).map_err(|_| Fail::new(HETERO_SME_BAD_BLOB, "rhs: corrupt"))?;
    Ok((h.ggml_type, k))
}

fn family_type(ty_code: u32) -> Result<(GgmlType, Int8Fmt), Fail> {
    let ty = super::types::ty_of(ty_code)?;
    let f = Int8Fmt::of(ty)?;
    Ok((ty, f))
}

fn scheme_of(f: Int8Fmt) -> u32 {
    if f.acts().per256 {
        SCHEME_PER256
    } else {
        SCHEME_PER32
    }
}

fn overflow() -> Fail {
    Fail::new(HETERO_SME_OVERFLOW, "size overflow")
}

fn invalid(t: &'static str) -> Fail {
    Fail::new(HETERO_SME_INVALID_ARGUMENT, t)
}

/// Checks K against the type's block size (and K, N > 0 for weights).
fn check_k(f: Int8Fmt, k: usize) -> Result<(), Fail> {
    if k == 0 || !k.is_multiple_of(f.block()) {
        return Err(invalid(if f.block() == 32 {
            "k must be a positive multiple of 32 for this type"
        } else {
            "k must be a positive multiple of 256 for this type"
        }));
    }
    Ok(())
}

/// Int8 packed weight payload: (quant bytes, scale bytes).
fn int8_rhs_bytes(f: Int8Fmt, n: usize, k: usize) -> Result<(usize, usize), Fail> {
    let ng = n.div_ceil(crate::INT8_GROUP);
    let q = ng
        .checked_mul(k / 32)
        .and_then(|x| x.checked_mul(f.chunk_bytes()))
        .ok_or_else(overflow)?;
    let s = ng
        .checked_mul(k / f.block())
        .and_then(|x| x.checked_mul(f.scale_words() * 2))
        .ok_or_else(overflow)?;
    Ok((q, s))
}

fn rhs_payload(v: V, ty: GgmlType, f: Int8Fmt, n: usize, k: usize) -> Result<usize, Fail> {
    if n == 0 {
        return Err(invalid("n must be positive"));
    }
    check_k(f, k)?;
    match v.family() {
        Family::Int8 => {
            let (q, s) = int8_rhs_bytes(f, n, k)?;
            q.checked_add(s).ok_or_else(overflow)
        }
        Family::Qgemv => Ok(qpacked_len(ty, k, n)?),
    }
}

/// Int8 LHS layout: (q bytes, offset of the records from the payload start, record bytes).
fn int8_lhs_layout(f: Int8Fmt, m: usize, k: usize) -> Result<(usize, usize, usize), Fail> {
    let e = m.checked_mul(k).ok_or_else(overflow)?;
    let rec_off = e.checked_next_multiple_of(64).ok_or_else(overflow)?;
    let rec = if f.acts().per256 {
        (e / 256).checked_mul(core::mem::size_of::<SuperMeta>())
    } else {
        (e / 32).checked_mul(core::mem::size_of::<BlockMeta>())
    }
    .ok_or_else(overflow)?;
    Ok((e, rec_off, rec))
}

fn lhs_payload(v: V, f: Int8Fmt, m: usize, k: usize) -> Result<usize, Fail> {
    check_k(f, k)?;
    match v.family() {
        Family::Int8 => {
            let (_, off, rec) = int8_lhs_layout(f, m, k)?;
            off.checked_add(rec).ok_or_else(overflow)
        }
        Family::Qgemv => m
            .checked_mul(k)
            .and_then(|e| e.checked_mul(4))
            .ok_or_else(overflow),
    }
}

fn with_header(payload: usize) -> Result<usize, Fail> {
    payload.checked_add(HDR).ok_or_else(overflow)
}

// ---- plain functions ----------------------------------------------------------------------------

/// Whether `variant` runs on this CPU (and this build).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_variant_available(variant: u32) -> bool {
    guard_value(false, || {
        V::of(variant)
            .map(|v| v.runner().is_some())
            .unwrap_or(false)
    })
}

/// The variant's name (static, e.g. `"int8-avx512-vnni"`), or `"unknown"`.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_variant_name(variant: u32) -> *const core::ffi::c_char {
    guard_value(c"unknown".as_ptr(), || {
        V::of(variant)
            .map(|v| v.name())
            .unwrap_or(c"unknown")
            .as_ptr()
    })
}

/// The variant's family (a `hetero_sme_family`), or 0 for an unknown id.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_variant_family(variant: u32) -> u32 {
    guard_value(0, || match V::of(variant) {
        Ok(v) if v.family() == Family::Int8 => {
            hetero_sme_family::HETERO_SME_FAMILY_INT8_GEMM as u32
        }
        Ok(_) => hetero_sme_family::HETERO_SME_FAMILY_QGEMV as u32,
        Err(_) => 0,
    })
}

/// Lists the variants available on this CPU: writes up to `capacity` ids into `out` (per
/// family worst to best, INT8_GEMM first) and the number available into `*count` (call with
/// `capacity` 0 and `out` null to size the array).
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for `capacity` writes (may be null when `capacity` is 0); `count` for one.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_variants_available(
    out: *mut u32,
    capacity: usize,
    count: *mut usize,
) -> hetero_sme_status {
    guard(|| {
        nonnull(count, "count")?;
        if capacity > 0 {
            nonnull(out, "out")?;
        }
        let mut n = 0;
        for v in VARIANTS.iter().filter(|v| v.runner().is_some()) {
            if n < capacity {
                // SAFETY: n < capacity writable slots (caller's contract).
                unsafe { out.add(n).write(v.id()) };
            }
            n += 1;
        }
        // SAFETY: the caller's contract.
        unsafe { put(count, n, "count") }
    })
}

/// The best available variant of `family` (a `hetero_sme_family`) into `*variant`: what the
/// Rust API dispatches to (`Int8Kernel::best()`, `Kernel::best_gemv()`).
///
/// Thread-safe.
///
/// # Safety
/// `variant` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_best_variant(
    family: u32,
    variant: *mut u32,
) -> hetero_sme_status {
    guard(|| {
        let fam = match family {
            1 => Family::Int8,
            2 => Family::Qgemv,
            _ => return Err(invalid("unknown family")),
        };
        let best = VARIANTS
            .iter()
            .rev()
            .find(|v| v.family() == fam && v.runner().is_some())
            .ok_or_else(|| Fail::new(HETERO_SME_VARIANT_UNAVAILABLE, "no variant"))?;
        // SAFETY: the caller's contract.
        unsafe { put(variant, best.id(), "variant") }
    })
}

/// Rows a host engine should give one `run_matmul` call at least (its work unit: a tile of the
/// int8 kernels; the GEMV's 16-row batch). Any `m_start`/`m_end` is accepted. 0 for an unknown
/// variant.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_m_step(variant: u32) -> usize {
    guard_value(0, || V::of(variant).map(V::m_step).unwrap_or(0))
}

/// Columns (weight rows) of one packed group: `n_start` must be a multiple of it, `n_end` a
/// multiple of it or N. 16 for every variant; 0 for an unknown one.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_n_step(variant: u32) -> usize {
    guard_value(0, || V::of(variant).map(|_| QPACK_ROWS).unwrap_or(0))
}

/// LHS rows interleaved in the packed activations: 1 (rows are stored one after another).
/// 0 for an unknown variant.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_mr(variant: u32) -> usize {
    guard_value(0, || V::of(variant).map(|_| 1).unwrap_or(0))
}

/// Weight rows interleaved in the packed weights: 16 (one 512-bit lane group). 0 for an unknown
/// variant.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_nr(variant: u32) -> usize {
    guard_value(0, || V::of(variant).map(|_| crate::INT8_GROUP).unwrap_or(0))
}

/// Consecutive k values of one weight row in one 32-bit lane of the packed weights: 4 (int8,
/// the `vpdpbusd` operand), 8 (GEMV, eight 4-bit values). 0 for an unknown variant.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_kr(variant: u32) -> usize {
    guard_value(0, || V::of(variant).map(V::kr).unwrap_or(0))
}

/// Split ratio of the 4-bit packing: 2 for int8 (a byte's low nibble holds k step `s` of a
/// 32-value chunk, its high nibble step `s + 16`), 1 for the GEMV. 0 for an unknown variant.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_sr(variant: u32) -> usize {
    guard_value(0, || V::of(variant).map(V::sr).unwrap_or(0))
}

/// Offset, in floats, of output element (`m_idx`, `n_idx`) of a row-major f32 output whose
/// rows are `ldd` floats apart: `m_idx * ldd + n_idx` (`SIZE_MAX` on overflow). Every stride,
/// length and offset of this API is in elements, as `run_matmul`'s `ldd` and `dst_len`
/// (KleidiAI's `get_dst_offset` takes and returns bytes: multiply by 4).
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_dst_offset(
    m_idx: usize,
    n_idx: usize,
    ldd: usize,
) -> usize {
    guard_value(usize::MAX, || {
        m_idx
            .checked_mul(ldd)
            .and_then(|a| a.checked_add(n_idx))
            .unwrap_or(usize::MAX)
    })
}

/// Floats of an `m` × `n` f32 output whose rows are `ldd` floats apart, the last row counted
/// as `n` floats: `(m − 1) * ldd + n` (0 when `m` or `n` is 0; `SIZE_MAX` on overflow) — the
/// least `dst_len` `run_matmul` accepts for the whole output.
///
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hetero_sme_matmul_get_dst_size(m: usize, n: usize, ldd: usize) -> usize {
    guard_value(usize::MAX, || {
        if m == 0 || n == 0 {
            return 0;
        }
        (m - 1)
            .checked_mul(ldd)
            .and_then(|a| a.checked_add(n))
            .unwrap_or(usize::MAX)
    })
}

/// Bytes of the packed weights (header included) of `n` rows × `k` values of `ggml_type` for
/// `variant`, into `*size`. Types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (k a multiple of 32), Q4_K,
/// Q5_K, Q6_K (k a multiple of 256); `n` > 0.
///
/// Thread-safe.
///
/// # Safety
/// `size` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_get_rhs_packed_size(
    variant: u32,
    ggml_type: u32,
    n: usize,
    k: usize,
    size: *mut usize,
) -> hetero_sme_status {
    guard(|| {
        let v = V::of(variant)?;
        let (ty, f) = family_type(ggml_type)?;
        let bytes = with_header(rhs_payload(v, ty, f, n, k)?)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, bytes, "size") }
    })
}

/// Packs a GGUF weight (`src`: `n` rows of `k` values of `ggml_type` exactly as the file stores
/// them, `src_len` = n × row bytes, 2-byte aligned) into `rhs` (`rhs_size` bytes, at least
/// `get_rhs_packed_size`, `HETERO_SME_PACKED_ALIGN`-aligned). Once per weight, at load time;
/// works for every known variant (pure data). No allocation (the int8 packer, too, packs in
/// place into `rhs`). On error nothing is written (every check runs before the first write).
///
/// Thread-safe (on distinct `rhs` buffers).
///
/// # Safety
/// `src` valid for `src_len` byte reads, `rhs` for `rhs_size` byte writes, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_run_rhs_pack(
    variant: u32,
    ggml_type: u32,
    n: usize,
    k: usize,
    src: *const u8,
    src_len: usize,
    rhs: *mut u8,
    rhs_size: usize,
) -> hetero_sme_status {
    guard(|| {
        let v = V::of(variant)?;
        let (ty, f) = family_type(ggml_type)?;
        nonnull(src, "src")?;
        nonnull(rhs, "rhs")?;
        aligned(src, 2, "src (2-byte alignment)")?;
        aligned(
            rhs,
            HETERO_SME_PACKED_ALIGN,
            "rhs (HETERO_SME_PACKED_ALIGN)",
        )?;
        let payload = rhs_payload(v, ty, f, n, k)?;
        let need_src = ty
            .row_bytes(k)
            .and_then(|r| r.checked_mul(n))
            .ok_or_else(overflow)?;
        if src_len != need_src {
            return Err(invalid("src_len is not n rows of k values of the type"));
        }
        if rhs_size < with_header(payload)? {
            return Err(Fail::new(HETERO_SME_BUFFER_TOO_SMALL, "rhs_size"));
        }
        // SAFETY: the caller's contract: src_len readable bytes.
        let s = unsafe { core::slice::from_raw_parts(src, src_len) };
        // SAFETY: rhs_size >= HDR + payload writable bytes (checked against the caller's size),
        // not overlapping src.
        let out = unsafe { rhs.add(HDR) };
        match v.family() {
            Family::Int8 => {
                // Packed in place, into the caller's buffer: no allocation.
                let (qb, sb) = int8_rhs_bytes(f, n, k)?;
                // SAFETY: qb + sb = payload bytes inside rhs (checked), not overlapping src;
                // the scale words start qb bytes after the 64-aligned payload (qb is a whole
                // number of 64-byte chunks), so they are 2-aligned.
                let (q, sw) = unsafe {
                    (
                        core::slice::from_raw_parts_mut(out, qb),
                        core::slice::from_raw_parts_mut(out.add(qb).cast::<u16>(), sb / 2),
                    )
                };
                crate::int8::pack_gguf_into(ty, s, n, k, q, sw)?;
            }
            Family::Qgemv => {
                // SAFETY: payload writable bytes inside rhs (checked).
                let dst = unsafe { core::slice::from_raw_parts_mut(out, payload) };
                qpack_gguf(ty, s, k, n, 0..n, dst)?;
            }
        }
        let h = Header {
            magic: MAGIC,
            version: BLOB_VERSION,
            kind: KIND_RHS,
            variant: v.id(),
            ggml_type: ty.code(),
            rows: n as u64,
            k: k as u64,
            payload: payload as u64,
            scheme: SCHEME_NONE,
            reserved: [0; 5],
        };
        // SAFETY: 64 writable, 64-aligned bytes at rhs (checked), written last so a failed
        // pack never leaves a valid header.
        unsafe { rhs.cast::<Header>().write(h) };
        Ok(())
    })
}

/// Bytes of the packed activations (header included) of `m` rows × `k` values for weights of
/// `ggml_type` (the type fixes the int8 scheme: per 32 values, per 256 for the K-quants; one
/// packed LHS serves every weight of the same scheme and K), into `*size`.
///
/// Thread-safe.
///
/// # Safety
/// `size` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_get_lhs_packed_size(
    variant: u32,
    ggml_type: u32,
    m: usize,
    k: usize,
    size: *mut usize,
) -> hetero_sme_status {
    guard(|| {
        let v = V::of(variant)?;
        let (_, f) = family_type(ggml_type)?;
        let bytes = with_header(lhs_payload(v, f, m, k)?)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, bytes, "size") }
    })
}

/// Packs activations `x` (`m` rows of `k` f32, rows `ldx` ≥ k floats apart, `x_len` ≥
/// (m−1)·ldx + k floats, 4-byte aligned) for weights of `ggml_type` into `lhs` (`lhs_size`
/// bytes, at least `get_lhs_packed_size`, `HETERO_SME_PACKED_ALIGN`-aligned): int8 variants
/// quantize them (bytes identical to the Rust API's `QActs`), GEMV variants copy them. Needs
/// the variant available. No allocation. On error nothing is written.
///
/// Thread-safe (on distinct `lhs` buffers).
///
/// # Safety
/// `x` valid for `x_len` float reads, `lhs` for `lhs_size` byte writes, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_run_lhs_pack(
    variant: u32,
    ggml_type: u32,
    m: usize,
    k: usize,
    x: *const f32,
    x_len: usize,
    ldx: usize,
    lhs: *mut u8,
    lhs_size: usize,
) -> hetero_sme_status {
    // SAFETY: forwarded.
    guard(|| unsafe { lhs_pack(variant, ggml_type, m, k, x, x_len, ldx, lhs, lhs_size) })
}

/// # Safety
/// As [`hetero_sme_matmul_run_lhs_pack`].
#[allow(clippy::too_many_arguments)]
unsafe fn lhs_pack(
    variant: u32,
    ggml_type: u32,
    m: usize,
    k: usize,
    x: *const f32,
    x_len: usize,
    ldx: usize,
    lhs: *mut u8,
    lhs_size: usize,
) -> Result<(), Fail> {
    let v = V::of(variant)?;
    let (ty, f) = family_type(ggml_type)?;
    let runner = v.runnable()?;
    nonnull(x, "x")?;
    nonnull(lhs, "lhs")?;
    aligned(x, 4, "x (4-byte alignment)")?;
    aligned(
        lhs,
        HETERO_SME_PACKED_ALIGN,
        "lhs (HETERO_SME_PACKED_ALIGN)",
    )?;
    let payload = lhs_payload(v, f, m, k)?;
    if m > 0 {
        if ldx < k {
            return Err(invalid("ldx < k"));
        }
        let need = (m - 1)
            .checked_mul(ldx)
            .and_then(|a| a.checked_add(k))
            .ok_or_else(overflow)?;
        if x_len < need {
            return Err(Fail::new(HETERO_SME_BUFFER_TOO_SMALL, "x_len"));
        }
    }
    if lhs_size < with_header(payload)? {
        return Err(Fail::new(HETERO_SME_BUFFER_TOO_SMALL, "lhs_size"));
    }
    // SAFETY: HDR + payload <= lhs_size writable bytes (checked).
    let out = unsafe { lhs.add(HDR) };
    match runner {
        Runner::Int8(kern) => {
            let (e, rec_off, _) = int8_lhs_layout(f, m, k)?;
            let blocks = f.acts();
            let (q, rec) = (out.cast::<i8>(), out.wrapping_add(rec_off));
            for r in 0..m {
                let one = ActBlocks {
                    per32: blocks.per32,
                    per256: blocks.per256,
                };
                // SAFETY: row r of x: ldx*r + k <= x_len floats (checked); q row r: k bytes
                // inside e = m*k; its records inside rec (k/32 or k/256 per row, 64-aligned
                // start, record alignment 4); none overlap (x is the caller's distinct input).
                unsafe {
                    let xr = x.add(r * ldx);
                    let qr = q.add(r * k);
                    if blocks.per256 {
                        let kr = rec.cast::<SuperMeta>().add(r * (k / 256));
                        kern.quantize_raw(xr, 1, k, one, ptr::null_mut(), ptr::null_mut(), qr, kr)
                    } else {
                        let mr = rec.cast::<BlockMeta>().add(r * (k / 32));
                        kern.quantize_raw(xr, 1, k, one, qr, mr, ptr::null_mut(), ptr::null_mut())
                    }
                }
            }
            // The padding between q and the records: defined bytes.
            // SAFETY: e..rec_off inside the payload.
            unsafe { ptr::write_bytes(out.add(e), 0, rec_off - e) };
        }
        Runner::Qgemv(_) => {
            for r in 0..m {
                // SAFETY: row r of x inside x_len (checked); row r of the payload inside
                // m*k floats; distinct buffers.
                unsafe {
                    ptr::copy_nonoverlapping(x.add(r * ldx), out.cast::<f32>().add(r * k), k)
                };
            }
        }
    }
    let h = Header {
        magic: MAGIC,
        version: BLOB_VERSION,
        kind: KIND_LHS,
        variant: v.id(),
        ggml_type: ty.code(),
        rows: m as u64,
        k: k as u64,
        payload: payload as u64,
        scheme: match v.family() {
            Family::Int8 => scheme_of(f),
            Family::Qgemv => SCHEME_NONE,
        },
        reserved: [0; 5],
    };
    // SAFETY: 64 writable aligned bytes at lhs (checked).
    unsafe { lhs.cast::<Header>().write(h) };
    Ok(())
}

/// A validated matmul over whole blobs: what a tile range needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Job {
    runner: Runner,
    ty: GgmlType,
    fmt: Int8Fmt,
    m: usize,
    n: usize,
    k: usize,
    lhs: *const u8,
    rhs: *const u8,
    rhs_payload: usize,
    dst: *mut f32,
    ldd: usize,
}

// SAFETY: the pointers are read-only blobs and an output whose tile ranges are claimed
// exclusively by each runner (the pool hands each task index to one thread).
unsafe impl Sync for Job {}

impl Job {
    pub(crate) fn m(&self) -> usize {
        self.m
    }
    pub(crate) fn n(&self) -> usize {
        self.n
    }
    /// Rows per kernel call: the int8 tile, the GEMV's 16.
    pub(crate) fn m_step(&self) -> usize {
        match self.runner {
            Runner::Int8(k) => k.tile_rows(),
            Runner::Qgemv(_) => crate::GEMV_MAX_ROWS,
        }
    }

    /// Validates both blobs and the output for rows `0..m_end` × columns `0..n_end` (checked
    /// against the blob shapes first).
    ///
    /// # Safety
    /// `lhs`/`rhs` valid for `lhs_size`/`rhs_size` byte reads, `dst` for `dst_len` floats.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn new(
        variant: u32,
        lhs: *const u8,
        lhs_size: usize,
        rhs: *const u8,
        rhs_size: usize,
        dst: *mut f32,
        dst_len: usize,
        ldd: usize,
        bound: Option<(usize, usize)>,
    ) -> Result<Job, Fail> {
        let v = V::of(variant)?;
        let runner = v.runnable()?;
        // SAFETY: forwarded.
        let rh = unsafe { read_header(rhs, rhs_size, KIND_RHS, v, "rhs")? };
        // SAFETY: forwarded.
        let lh = unsafe { read_header(lhs, lhs_size, KIND_LHS, v, "lhs")? };
        nonnull(dst, "dst")?;
        aligned(dst, 4, "dst (4-byte alignment)")?;
        let corrupt = || Fail::new(HETERO_SME_BAD_BLOB, "packed buffer: corrupt header");
        let (ty, f) = family_type(rh.ggml_type).map_err(|_| corrupt())?;
        let n = usize::try_from(rh.rows).map_err(|_| corrupt())?;
        let k = usize::try_from(rh.k).map_err(|_| corrupt())?;
        let m = usize::try_from(lh.rows).map_err(|_| corrupt())?;
        let rp = rhs_payload(v, ty, f, n, k).map_err(|_| corrupt())?;
        if rp as u64 != rh.payload {
            return Err(corrupt());
        }
        if lh.k != rh.k {
            return Err(Fail::new(
                HETERO_SME_BLOB_MISMATCH,
                "activations packed for another K",
            ));
        }
        // The LHS header must be consistent in itself (its scheme the one its type implies) and
        // match what the weight expects (the weight's scheme), because `run` lays the
        // activations' records out by the weight's format: a header whose type and scheme
        // disagree (forged or corrupt) would otherwise pass a payload check made with one and
        // be read with the other, past the buffer.
        let (_, lf) = family_type(lh.ggml_type).map_err(|_| corrupt())?;
        let own_scheme = match v.family() {
            Family::Int8 => scheme_of(lf),
            Family::Qgemv => SCHEME_NONE,
        };
        if lh.scheme != own_scheme {
            return Err(Fail::new(
                HETERO_SME_BAD_BLOB,
                "packed activations: corrupt header (scheme and type disagree)",
            ));
        }
        if v.family() == Family::Int8 && own_scheme != scheme_of(f) {
            return Err(Fail::new(
                HETERO_SME_BLOB_MISMATCH,
                "activations quantized for another scheme (per 32 vs per 256 values)",
            ));
        }
        // Sized with the weight's format: exactly the layout `run` reads.
        let lp = lhs_payload(v, f, m, k).map_err(|_| corrupt())?;
        if lp as u64 != lh.payload {
            return Err(corrupt());
        }
        let (m_end, n_end) = bound.unwrap_or((m, n));
        if m_end > m || n_end > n {
            return Err(invalid("range beyond the packed shapes"));
        }
        if m_end > 0 && n_end > 0 {
            if ldd < n {
                return Err(invalid("ldd < N"));
            }
            let need = (m_end - 1)
                .checked_mul(ldd)
                .and_then(|a| a.checked_add(n_end))
                .ok_or_else(overflow)?;
            if dst_len < need {
                return Err(Fail::new(HETERO_SME_BUFFER_TOO_SMALL, "dst_len"));
            }
        }
        Ok(Job {
            runner,
            ty,
            fmt: f,
            m,
            n,
            k,
            lhs,
            rhs,
            rhs_payload: rp,
            dst,
            ldd,
        })
    }

    /// A GEMV job (Q4_0, M = 1, N = 16, K = 32) whose weight payload is recorded as 0 bytes:
    /// its tile fails with `BufferTooSmall` (for the pool's error-reporting test).
    ///
    /// # Safety
    /// `lhs` holds 64 + 128 readable bytes, `rhs` 64, `dst` 16 writable floats, for the job's use.
    #[cfg(test)]
    pub(crate) unsafe fn bogus_gemv_for_test(lhs: *const u8, rhs: *const u8, dst: *mut f32) -> Job {
        Job {
            runner: Runner::Qgemv(Kernel::new(KernelKind::Portable).expect("portable")),
            ty: GgmlType::Q4_0,
            fmt: Int8Fmt::of(GgmlType::Q4_0).expect("Q4_0"),
            m: 1,
            n: 16,
            k: 32,
            lhs,
            rhs,
            rhs_payload: 0,
            dst,
            ldd: 16,
        }
    }

    /// Checks a tile range: within the shapes, `n_start` on a group boundary, `n_end` on one or
    /// at N.
    pub(crate) fn check_range(
        &self,
        m_start: usize,
        m_end: usize,
        n_start: usize,
        n_end: usize,
    ) -> Result<(), Fail> {
        if m_start > m_end || m_end > self.m || n_start > n_end || n_end > self.n {
            return Err(Fail::new(
                HETERO_SME_INVALID_ARGUMENT,
                "tile range reversed or beyond the shapes",
            ));
        }
        if !n_start.is_multiple_of(QPACK_ROWS)
            || !(n_end.is_multiple_of(QPACK_ROWS) || n_end == self.n)
        {
            return Err(invalid(
                "n_start and n_end must be multiples of n_step (n_end may be N)",
            ));
        }
        Ok(())
    }

    /// Computes rows `m_start..m_end` × columns `n_start..n_end`.
    ///
    /// # Safety
    /// The range passed [`Self::check_range`] and lies within what [`Self::new`] validated;
    /// nothing else reads or writes that region of dst meanwhile.
    pub(crate) unsafe fn run(
        &self,
        m_start: usize,
        m_end: usize,
        n_start: usize,
        n_end: usize,
    ) -> Result<(), Fail> {
        if m_start == m_end || n_start == n_end {
            return Ok(());
        }
        // SAFETY: the payloads follow the headers inside the validated sizes.
        let (lp, rp) = unsafe { (self.lhs.add(HDR), self.rhs.add(HDR)) };
        match self.runner {
            Runner::Int8(kern) => {
                let f = self.fmt;
                let (_, rec_off, _) = int8_lhs_layout(f, self.m, self.k)?;
                let (qb, _) = int8_rhs_bytes(f, self.n, self.k)?;
                let per256 = f.acts().per256;
                let rec = lp.wrapping_add(rec_off);
                let ctx = Ctx {
                    fmt: f,
                    m: m_end,
                    n: self.n,
                    k: self.k,
                    nb: self.k / f.block(),
                    u: rp,
                    s: rp.wrapping_add(qb).cast::<u16>(),
                    q: if per256 { ptr::null() } else { lp.cast() },
                    meta: if per256 { ptr::null() } else { rec.cast() },
                    qk: if per256 { lp.cast() } else { ptr::null() },
                    kmeta: if per256 { rec.cast() } else { ptr::null() },
                    y: self.dst,
                    ldy: self.ldd,
                };
                let (g0, g1) = (n_start / QPACK_ROWS, n_end.div_ceil(QPACK_ROWS));
                let step = kern.tile_rows();
                let mut r0 = m_start;
                while r0 < m_end {
                    let rows = (m_end - r0).min(step);
                    // SAFETY: the context points into validated blobs (the layout the Rust
                    // API's Int8Weight / QActs have, 64-aligned quants); r0 + rows <= m_end <=
                    // m; rows <= tile_rows; g0 <= g1 <= groups; the output region is the
                    // caller's exclusively (contract). Columns past n_end within group g1-1
                    // are only written when n_end == N (check_range).
                    unsafe { kern.tile(&ctx, r0, rows, g0, g1) };
                    r0 += rows;
                }
                Ok(())
            }
            Runner::Qgemv(kern) => {
                let gb = qpacked_len(self.ty, self.k, QPACK_ROWS)?;
                let off = (n_start / QPACK_ROWS) * gb;
                let cols = n_end - n_start;
                // SAFETY: the payload is rhs_payload bytes; the groups from n_start/16 on
                // lie inside it.
                let wbytes =
                    unsafe { core::slice::from_raw_parts(rp.add(off), self.rhs_payload - off) };
                let w = QPackedRef::new(wbytes, self.ty, self.k, cols)?;
                let x = lp.cast::<f32>();
                let mut r0 = m_start;
                while r0 < m_end {
                    let rows = (m_end - r0).min(crate::GEMV_MAX_ROWS);
                    // SAFETY: rows r0..r0+rows of the packed f32 activations (m*k floats,
                    // 4-aligned after the 64-byte header).
                    let xs =
                        unsafe { core::slice::from_raw_parts(x.add(r0 * self.k), rows * self.k) };
                    let len = (rows - 1) * self.ldd + cols;
                    // SAFETY: dst + r0*ldd + n_start .. + len lies inside the validated
                    // dst_len; the plan writes rows 0..rows × columns 0..cols of it, the
                    // caller's exclusive region.
                    let out = unsafe {
                        OutMut::from_raw_parts(self.dst.add(r0 * self.ldd + n_start), len)
                    };
                    QPackedPlan::with_out(kern, xs, rows, self.k, w, out, self.ldd)?.run_all();
                    r0 += rows;
                }
                Ok(())
            }
        }
    }
}

/// Computes the tile `dst[m_start..m_end, n_start..n_end]` of `dst[M×N] = x·Wᵀ` from packed
/// activations `lhs` (M rows, from `run_lhs_pack`) and packed weights `rhs` (N rows, from
/// `run_rhs_pack`), both of this variant and of one K. `dst` is the whole M×N output (f32,
/// 4-byte aligned, rows `ldd` ≥ N floats apart, `dst_len` ≥ (m_end−1)·ldd + n_end floats);
/// only the tile is written. `n_start` a multiple of `get_n_step`, `n_end` one too or N; any
/// `m_start` ≤ `m_end` ≤ M. Results equal the Rust API's bit for bit, whatever the tiling.
/// No allocation. On error nothing is written.
///
/// Thread-safe: any number of threads may run disjoint tiles of one output at once, sharing
/// the read-only `lhs` and `rhs` (this is how a host engine threads it).
///
/// # Safety
/// `lhs`/`rhs` valid for `lhs_size`/`rhs_size` byte reads and not written during the call;
/// `dst` valid for `dst_len` float reads and writes, its tile written by no one else meanwhile.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_run_matmul(
    variant: u32,
    m_start: usize,
    m_end: usize,
    n_start: usize,
    n_end: usize,
    lhs: *const u8,
    lhs_size: usize,
    rhs: *const u8,
    rhs_size: usize,
    dst: *mut f32,
    dst_len: usize,
    ldd: usize,
) -> hetero_sme_status {
    guard(|| {
        // SAFETY: forwarded.
        let job = unsafe {
            Job::new(
                variant,
                lhs,
                lhs_size,
                rhs,
                rhs_size,
                dst,
                dst_len,
                ldd,
                Some((m_end, n_end)),
            )?
        };
        job.check_range(m_start, m_end, n_start, n_end)?;
        // SAFETY: validated; the tile is the caller's (contract).
        unsafe { job.run(m_start, m_end, n_start, n_end) }
    })
}

// ---- the function-pointer struct ----------------------------------------------------------------

extern "C" fn m_step<const ID: u32>() -> usize {
    hetero_sme_matmul_get_m_step(ID)
}
extern "C" fn n_step<const ID: u32>() -> usize {
    hetero_sme_matmul_get_n_step(ID)
}
extern "C" fn mr<const ID: u32>() -> usize {
    hetero_sme_matmul_get_mr(ID)
}
extern "C" fn nr<const ID: u32>() -> usize {
    hetero_sme_matmul_get_nr(ID)
}
extern "C" fn kr<const ID: u32>() -> usize {
    hetero_sme_matmul_get_kr(ID)
}
extern "C" fn sr<const ID: u32>() -> usize {
    hetero_sme_matmul_get_sr(ID)
}
/// # Safety
/// As [`hetero_sme_matmul_get_lhs_packed_size`].
unsafe extern "C" fn lhs_size<const ID: u32>(
    t: u32,
    m: usize,
    k: usize,
    s: *mut usize,
) -> hetero_sme_status {
    // SAFETY: forwarded.
    unsafe { hetero_sme_matmul_get_lhs_packed_size(ID, t, m, k, s) }
}
/// # Safety
/// As [`hetero_sme_matmul_run_lhs_pack`].
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn lhs_pack_v<const ID: u32>(
    t: u32,
    m: usize,
    k: usize,
    x: *const f32,
    xl: usize,
    ldx: usize,
    l: *mut u8,
    ls: usize,
) -> hetero_sme_status {
    // SAFETY: forwarded.
    unsafe { hetero_sme_matmul_run_lhs_pack(ID, t, m, k, x, xl, ldx, l, ls) }
}
/// # Safety
/// As [`hetero_sme_matmul_get_rhs_packed_size`].
unsafe extern "C" fn rhs_size<const ID: u32>(
    t: u32,
    n: usize,
    k: usize,
    s: *mut usize,
) -> hetero_sme_status {
    // SAFETY: forwarded.
    unsafe { hetero_sme_matmul_get_rhs_packed_size(ID, t, n, k, s) }
}
/// # Safety
/// As [`hetero_sme_matmul_run_rhs_pack`].
unsafe extern "C" fn rhs_pack_v<const ID: u32>(
    t: u32,
    n: usize,
    k: usize,
    s: *const u8,
    sl: usize,
    r: *mut u8,
    rs: usize,
) -> hetero_sme_status {
    // SAFETY: forwarded.
    unsafe { hetero_sme_matmul_run_rhs_pack(ID, t, n, k, s, sl, r, rs) }
}
/// # Safety
/// As [`hetero_sme_matmul_run_matmul`].
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn matmul_v<const ID: u32>(
    m0: usize,
    m1: usize,
    n0: usize,
    n1: usize,
    l: *const u8,
    ls: usize,
    r: *const u8,
    rs: usize,
    d: *mut f32,
    dl: usize,
    ldd: usize,
) -> hetero_sme_status {
    // SAFETY: forwarded.
    unsafe { hetero_sme_matmul_run_matmul(ID, m0, m1, n0, n1, l, ls, r, rs, d, dl, ldd) }
}

fn table<const ID: u32>(family: u32) -> hetero_sme_matmul_ukernel {
    hetero_sme_matmul_ukernel {
        variant: ID,
        family,
        get_m_step: m_step::<ID>,
        get_n_step: n_step::<ID>,
        get_mr: mr::<ID>,
        get_nr: nr::<ID>,
        get_kr: kr::<ID>,
        get_sr: sr::<ID>,
        get_lhs_packed_size: lhs_size::<ID>,
        run_lhs_pack: lhs_pack_v::<ID>,
        get_rhs_packed_size: rhs_size::<ID>,
        run_rhs_pack: rhs_pack_v::<ID>,
        get_dst_offset: hetero_sme_matmul_get_dst_offset,
        get_dst_size: hetero_sme_matmul_get_dst_size,
        run_matmul: matmul_v::<ID>,
    }
}

/// Fills `*out` with `variant`'s function-pointer interface. `HETERO_SME_UNKNOWN_VARIANT` or
/// `HETERO_SME_VARIANT_UNAVAILABLE` (nothing written) when it cannot run here, so an engine
/// that picks a variant by CPU features never reaches an illegal instruction.
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_ukernel_get(
    variant: u32,
    out: *mut hetero_sme_matmul_ukernel,
) -> hetero_sme_status {
    guard(|| {
        let v = V::of(variant)?;
        v.runnable()?;
        let fam = hetero_sme_variant_family(variant);
        let t = match v {
            V::I8Portable => table::<1>(fam),
            V::I8Avx2 => table::<4>(fam),
            V::I8Vnni => table::<2>(fam),
            V::I8Amx => table::<3>(fam),
            V::QPortable => table::<17>(fam),
            V::QAvx512 => table::<18>(fam),
            V::QNeon => table::<19>(fam),
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, t, "out") }
    })
}
