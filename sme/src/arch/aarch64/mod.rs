//! aarch64 kernels: SME2, SME1 and NEON.
//!
//! * [`Sme2`]: the 16×64 (at SVL 512; `tile_rows()`×64 in general) FP16→FP32 tile kernel with
//!   4-vector `ld1h` loads; needs HWCAP2_SME2 and HWCAP2_SME_F16F32.
//! * [`Sme1`]: the same tile with single-vector loads and no SME2 instruction at all (the
//!   assembler is only given `.arch_extension sme`); needs HWCAP2_SME and HWCAP2_SME_F16F32.
//! * [`Neon`]: always available on aarch64.
//!
//! The tile kernels read the crate's packed weight format (64-column panels of K-pair-interleaved
//! FP16, see the crate README) and a packed LHS row block ([`pack_lhs_f32`], [`pack_lhs_f16`]).
//! Supported streaming vector lengths: 128, 256 and 512 bits (a 64-column panel is covered in
//! 64/(SVL/8) column passes of four ZA tiles). Longer SVLs are refused by the probes with
//! [`SmeUnavailable::UnsupportedSvl`].

mod neon;
mod sme;

use core::fmt;

use crate::Error;

/// `AT_HWCAP2` from `<elf.h>`.
#[cfg(any(target_os = "linux", target_os = "android"))]
const AT_HWCAP2: libc::c_ulong = 26;
/// Linux uapi `asm/hwcap.h`: `HWCAP2_SME (1 << 23)`.
pub const HWCAP2_SME: u64 = 1 << 23;
/// Linux uapi `asm/hwcap.h`: `HWCAP2_SME_F16F32 (1 << 27)` (widening FP16→FP32 FMOPA).
pub const HWCAP2_SME_F16F32: u64 = 1 << 27;
/// Linux uapi `asm/hwcap.h`: `HWCAP2_SME2 (1UL << 37)`.
pub const HWCAP2_SME2: u64 = 1 << 37;

/// The process's `AT_HWCAP2` word (Linux and Android; 0 elsewhere).
pub fn hwcap2() -> u64 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: getauxval has no preconditions; it returns 0 for an absent entry.
        unsafe { libc::getauxval(AT_HWCAP2) as u64 }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        0
    }
}

/// A `hw.optional.*` integer sysctl, false when absent (macOS/iOS).
#[cfg(target_vendor = "apple")]
fn sysctl_flag(name: &core::ffi::CStr) -> bool {
    let mut v: libc::c_int = 0;
    let mut len: libc::size_t = core::mem::size_of::<libc::c_int>();
    // SAFETY: `name` is NUL-terminated; `v`/`len` describe a writable c_int; no new value is set.
    let rc = unsafe {
        libc::sysctlbyname(
            name.as_ptr(),
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
            core::ptr::null_mut(),
            0,
        )
    };
    rc == 0 && v != 0
}

/// (FEAT_SME, FEAT_SME2, SME_F16F32) as the OS reports them: HWCAP2 on Linux/Android, sysctl
/// `hw.optional.arm.{FEAT_SME, FEAT_SME2, SME_F16F32}` on Apple (untested here: no macOS
/// machine), nothing elsewhere.
fn os_caps() -> (bool, bool, bool) {
    #[cfg(target_vendor = "apple")]
    {
        (
            sysctl_flag(c"hw.optional.arm.FEAT_SME"),
            sysctl_flag(c"hw.optional.arm.FEAT_SME2"),
            sysctl_flag(c"hw.optional.arm.SME_F16F32"),
        )
    }
    #[cfg(not(target_vendor = "apple"))]
    {
        let c = hwcap2();
        (
            c & HWCAP2_SME != 0,
            c & HWCAP2_SME2 != 0,
            c & HWCAP2_SME_F16F32 != 0,
        )
    }
}

/// Why an SME capability token could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmeUnavailable {
    /// No SME at all (HWCAP2_SME clear, sysctl FEAT_SME 0, or an OS this crate cannot query).
    NoSme,
    /// HWCAP2_SME2 clear (SME1-only CPU, e.g. Snapdragon 8 Elite Gen 5): use [`Sme1`].
    NoSme2,
    /// HWCAP2_SME_F16F32 clear: no widening FP16→FP32 FMOPA.
    NoF16F32,
    /// The streaming vector length is not one of 128, 256, 512 bits.
    UnsupportedSvl {
        /// The streaming vector length read with `rdsvl`, in bits.
        bits: usize,
    },
}

impl fmt::Display for SmeUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSme => write!(f, "CPU/OS reports no SME (HWCAP2_SME / FEAT_SME)"),
            Self::NoSme2 => write!(f, "CPU reports SME but not SME2 (HWCAP2_SME2 clear)"),
            Self::NoF16F32 => {
                write!(
                    f,
                    "CPU lacks widening FP16->FP32 FMOPA (HWCAP2_SME_F16F32 clear)"
                )
            }
            Self::UnsupportedSvl { bits } => write!(
                f,
                "streaming vector length {bits} bits unsupported (kernels handle 128, 256, 512)"
            ),
        }
    }
}

impl std::error::Error for SmeUnavailable {}

/// Streaming vector length in bytes (`rdsvl` is legal outside streaming mode).
///
/// # Safety
/// The CPU must implement FEAT_SME.
unsafe fn read_svl_bytes() -> usize {
    let svl: usize;
    // SAFETY: the caller guarantees FEAT_SME, so RDSVL is defined; it only writes `svl`.
    unsafe {
        core::arch::asm!(
            ".arch_extension sme",
            "rdsvl {0}, #1",
            out(reg) svl,
            options(nomem, nostack, preserves_flags)
        )
    };
    svl
}

/// TPIDR2_EL0: non-zero while an SME-aware caller has ZA live in the dormant (lazy-save) state.
///
/// # Safety
/// The CPU must implement FEAT_SME (TPIDR2_EL0 exists only then).
unsafe fn tpidr2_el0() -> u64 {
    let v: u64;
    // SAFETY: the caller guarantees FEAT_SME; EL0 may read TPIDR2_EL0; register-only.
    unsafe {
        core::arch::asm!(
            ".arch_extension sme",
            "mrs {0}, tpidr2_el0",
            out(reg) v,
            options(nomem, nostack, preserves_flags)
        )
    };
    v
}

/// Checks SME + F16F32 (+ SME2 when `need_sme2`) and reads the SVL.
fn probe_sme(need_sme2: bool) -> Result<usize, SmeUnavailable> {
    let (sme, sme2, f16f32) = os_caps();
    if !sme {
        return Err(SmeUnavailable::NoSme);
    }
    if need_sme2 && !sme2 {
        return Err(SmeUnavailable::NoSme2);
    }
    if !f16f32 {
        return Err(SmeUnavailable::NoF16F32);
    }
    // SAFETY: HWCAP2_SME is set.
    let svl = unsafe { read_svl_bytes() };
    match svl {
        16 | 32 | 64 => Ok(svl),
        _ => Err(SmeUnavailable::UnsupportedSvl { bits: svl * 8 }),
    }
}

/// Capability token: FEAT_SME2 (HWCAP2_SME2) with widening FP16→FP32 FMOPA (HWCAP2_SME_F16F32)
/// and a supported streaming vector length, recorded at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sme2 {
    svl_bytes: usize,
}

/// Capability token: FEAT_SME (HWCAP2_SME) with widening FP16→FP32 FMOPA, without needing SME2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sme1 {
    svl_bytes: usize,
}

/// Capability token for Advanced SIMD, which every aarch64 CPU has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Neon {
    _private: (),
}

impl Neon {
    /// Always succeeds on aarch64.
    pub fn try_new() -> Option<Self> {
        Some(Self { _private: () })
    }

    /// The token; NEON is architectural on aarch64.
    pub fn new() -> Self {
        Self { _private: () }
    }
}

macro_rules! sme_token_common {
    ($ty:ident, $need_sme2:expr, $what:literal) => {
        impl $ty {
            #[doc = concat!("Detects ", $what, "; the error says what is missing.")]
            pub fn probe() -> Result<Self, SmeUnavailable> {
                probe_sme($need_sme2).map(|svl_bytes| Self { svl_bytes })
            }

            #[doc = concat!("The token when the CPU has ", $what, ", else `None`.")]
            pub fn try_new() -> Option<Self> {
                Self::probe().ok()
            }

            /// The token without checking HWCAP2 (the SVL is still read with `rdsvl`).
            ///
            /// # Safety
            #[doc = concat!("The CPU must implement ", $what, ", and its streaming vector length must be 128, 256 or 512 bits.")]
            pub unsafe fn new_unchecked() -> Self {
                // SAFETY: the caller guarantees FEAT_SME (implied by the features above).
                let svl_bytes = unsafe { read_svl_bytes() };
                Self { svl_bytes }
            }

            /// Rows of one output tile = SVL_bits / 32 (16 at 512-bit SVL, 8 at 256-bit).
            pub fn tile_rows(self) -> usize {
                self.svl_bytes / 4
            }

            /// The streaming vector length in bits.
            pub fn svl_bits(self) -> usize {
                self.svl_bytes * 8
            }
        }
    };
}

sme_token_common!(Sme2, true, "FEAT_SME2 and FEAT_SME_F16F32");
sme_token_common!(Sme1, false, "FEAT_SME and FEAT_SME_F16F32");

/// Length in `u16` of one packed LHS row block: `tile_rows * 2 * ceil(k / 2)`.
pub fn lhs_block_len(tile_rows: usize, k: usize) -> usize {
    tile_rows * 2 * k.div_ceil(2)
}

/// Packs rows `[0, rows)` of row-major F32 `a` (row stride `lda`, `k` columns) into `dst` as FP16
/// (round to nearest even): per k-pair `q`, for `i` in `0..tile_rows`, `[A[i][2q], A[i][2q+1]]`;
/// zero where `i >= rows` or `2q + j >= k`.
///
/// # Errors
/// [`Error::TooManyRows`] if `rows > tile_rows`, [`Error::BufferTooSmall`] if `dst` is shorter
/// than `lhs_block_len(tile_rows, k)` or `a` shorter than `(rows - 1) * lda + k` (when `rows > 0`
/// and `k > 0`), [`Error::BadStride`] if `lda < k` with more than one row; `dst` is then untouched.
pub fn pack_lhs_f32(
    a: &[f32],
    lda: usize,
    rows: usize,
    k: usize,
    tile_rows: usize,
    dst: &mut [u16],
) -> Result<(), Error> {
    pack_lhs(a, lda, rows, k, tile_rows, dst, f32x8_to_f16, |x| {
        half::f16::from_f32(x).to_bits()
    })
}

/// Like [`pack_lhs_f32`] for an FP16 (bit pattern) source; values are copied unchanged.
///
/// # Errors
/// As [`pack_lhs_f32`].
pub fn pack_lhs_f16(
    a: &[u16],
    lda: usize,
    rows: usize,
    k: usize,
    tile_rows: usize,
    dst: &mut [u16],
) -> Result<(), Error> {
    pack_lhs(a, lda, rows, k, tile_rows, dst, |x| *x, |x| x)
}

/// Eight f32 → eight FP16 bits, round to nearest even (`fcvtn`/`fcvtn2` under the default
/// FPCR, the same result as `half::f16::from_f32` including NaN, infinity and subnormals).
fn f32x8_to_f16(x: &[f32; 8]) -> [u16; 8] {
    use core::arch::aarch64::{uint16x8_t, vld1q_f32, vst1q_u16};
    let mut out = [0u16; 8];
    // SAFETY: `x` holds 8 f32 (two 4-lane loads) and `out` 8 u16 (one 8-lane store); FCVTN and
    // FCVTN2 are base Advanced SIMD, register-only; `o` is an early-clobber output, so it does
    // not share a register with `b`, which the second instruction reads after `o` is written.
    unsafe {
        let (va, vb) = (vld1q_f32(x.as_ptr()), vld1q_f32(x.as_ptr().add(4)));
        let o: uint16x8_t;
        core::arch::asm!(
            "fcvtn {o:v}.4h, {a:v}.4s",
            "fcvtn2 {o:v}.8h, {b:v}.4s",
            a = in(vreg) va,
            b = in(vreg) vb,
            o = out(vreg) o,
            options(pure, nomem, nostack, preserves_flags)
        );
        vst1q_u16(out.as_mut_ptr(), o);
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn pack_lhs<T: Copy>(
    a: &[T],
    lda: usize,
    rows: usize,
    k: usize,
    tile_rows: usize,
    dst: &mut [u16],
    conv8: impl Fn(&[T; 8]) -> [u16; 8],
    conv: impl Fn(T) -> u16,
) -> Result<(), Error> {
    let len = lhs_block_len(tile_rows, k);
    if rows > tile_rows {
        return Err(Error::TooManyRows {
            max: tile_rows,
            got: rows,
        });
    }
    if dst.len() < len {
        return Err(Error::BufferTooSmall {
            what: "lhs pack destination",
            needed: len,
            got: dst.len(),
        });
    }
    if rows > 1 && lda < k {
        return Err(Error::BadStride {
            what: "lda",
            ld: lda,
            min: k,
        });
    }
    if rows > 0 && k > 0 {
        let needed = (rows - 1) * lda + k;
        if a.len() < needed {
            return Err(Error::BufferTooSmall {
                what: "lhs source",
                needed,
                got: a.len(),
            });
        }
    }
    let dst = &mut dst[..len];
    dst.fill(0);
    let tr2 = 2 * tile_rows; // u16 between k-pair q and q+1 of one row
    for i in 0..rows {
        let row = &a[i * lda..i * lda + k];
        let mut chunks = row.chunks_exact(8);
        let mut base = 2 * i; // dst index of (q, i, j = 0)
        for c in &mut chunks {
            let h = conv8(c.try_into().expect("chunks_exact(8)"));
            for pair in h.chunks_exact(2) {
                dst[base] = pair[0];
                dst[base + 1] = pair[1];
                base += tr2;
            }
        }
        for (t, &v) in chunks.remainder().iter().enumerate() {
            dst[base + (t / 2) * tr2 + t % 2] = conv(v);
        }
    }
    Ok(())
}

impl Sme2 {
    /// `C[0..rows, 0..cols]` (`=`, or `+=` when `accumulate`) of one packed LHS row block
    /// (`lhs`, laid out by [`pack_lhs_f32`]/[`pack_lhs_f16`] with `tile_rows = self.tile_rows()`)
    /// times `npanels` consecutive packed panels starting at `panels` (panel stride `kp * 128`
    /// u16), plus `bias[0..cols]` when `bias` is non-null. Columns are `0..cols` of the panel
    /// range (`cols <= 64 * npanels`; the last panel may be partial); `rows <= tile_rows()`.
    /// The whole call runs in one `asm!` block between SMSTART and SMSTOP; FP32 accumulation in
    /// ZA (za0.s–za3.s), FP16 products exact in FP32.
    ///
    /// # Safety
    /// * `lhs` is valid for reads of `lhs_block_len(self.tile_rows(), 2 * kp)` u16;
    /// * `panels` is valid for reads of `npanels * kp * 128` u16;
    /// * `c` is valid for reads and writes of `rows` rows of stride `ldc` f32 with `cols` valid
    ///   columns each, and no other live reference aliases them;
    /// * `bias` is null or valid for reads of `cols` f32;
    /// * `rows <= self.tile_rows()`, `cols <= 64 * npanels`;
    /// * the thread's streaming vector length is the one the token recorded (not changed with
    ///   `prctl(PR_SME_SET_VL)` since), and ZA is not in the dormant lazy-save state
    ///   (TPIDR2_EL0 is zero; true unless called from SME-aware code that left ZA live).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_block_f16(
        self,
        lhs: *const u16,
        panels: *const u16,
        kp: usize,
        npanels: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        bias: *const f32,
    ) {
        // SAFETY: forwarded (the chunk form checks the tile bounds and the dormant ZA, and
        // returns on an empty tile); consecutive panels of this call are kp rows apart.
        unsafe {
            self.gemm_chunk_f16(
                lhs, panels, kp, kp, npanels, c, ldc, rows, cols, accumulate, bias,
            )
        }
    }

    /// As [`Sme2::gemm_block_f16`] on one K chunk of a wider weight: the panels are `panel_kp`
    /// k-pair rows apart (stride `panel_kp * 128` u16) and the kernel reads the first `kp` rows
    /// of each (`panels` points at the chunk's first row in the first panel). One streaming-mode
    /// entry serves all `npanels` panels.
    ///
    /// # Safety
    /// As [`Sme2::gemm_block_f16`], except that `panels` must be valid for reads of `kp * 128` u16
    /// at each of the `npanels` offsets `i * panel_kp * 128`, and `kp <= panel_kp`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm_chunk_f16(
        self,
        lhs: *const u16,
        panels: *const u16,
        kp: usize,
        panel_kp: usize,
        npanels: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        bias: *const f32,
    ) {
        debug_assert!(rows <= self.tile_rows() && cols <= 64 * npanels && kp <= panel_kp);
        // SAFETY: the token proves FEAT_SME.
        let tpidr2 = unsafe { tpidr2_el0() };
        debug_assert_eq!(tpidr2, 0, "ZA is dormant (lazy save pending)");
        if rows == 0 || cols == 0 {
            return;
        }
        let args = sme::BlockArgs::new(
            self.svl_bytes,
            lhs,
            panels,
            kp,
            c,
            ldc,
            rows,
            cols,
            accumulate,
            bias,
        )
        .with_panel_kp(panel_kp);
        // SAFETY: the token proves FEAT_SME2 + F16F32; the caller's obligations are exactly
        // those of `sme2_block`, with the panel stride they name.
        unsafe { sme::sme2_block(&args) }
    }
}

impl Sme1 {
    /// Same contract and result as [`Sme2::gemm_block_f16`], with single-vector loads only (no
    /// SME2 instruction), for SME1-only CPUs.
    ///
    /// # Safety
    /// As [`Sme2::gemm_block_f16`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_block_f16(
        self,
        lhs: *const u16,
        panels: *const u16,
        kp: usize,
        npanels: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        bias: *const f32,
    ) {
        // SAFETY: forwarded (the chunk form checks the tile bounds and the dormant ZA, and
        // returns on an empty tile); consecutive panels of this call are kp rows apart.
        unsafe {
            self.gemm_chunk_f16(
                lhs, panels, kp, kp, npanels, c, ldc, rows, cols, accumulate, bias,
            )
        }
    }

    /// As [`Sme1::gemm_block_f16`] on one K chunk of a wider weight: the panels are `panel_kp`
    /// k-pair rows apart (stride `panel_kp * 128` u16) and the kernel reads the first `kp` rows
    /// of each (`panels` points at the chunk's first row in the first panel). One streaming-mode
    /// entry serves all `npanels` panels.
    ///
    /// # Safety
    /// As [`Sme1::gemm_block_f16`], except that `panels` must be valid for reads of `kp * 128` u16
    /// at each of the `npanels` offsets `i * panel_kp * 128`, and `kp <= panel_kp`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm_chunk_f16(
        self,
        lhs: *const u16,
        panels: *const u16,
        kp: usize,
        panel_kp: usize,
        npanels: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
        bias: *const f32,
    ) {
        debug_assert!(rows <= self.tile_rows() && cols <= 64 * npanels && kp <= panel_kp);
        // SAFETY: the token proves FEAT_SME.
        let tpidr2 = unsafe { tpidr2_el0() };
        debug_assert_eq!(tpidr2, 0, "ZA is dormant (lazy save pending)");
        if rows == 0 || cols == 0 {
            return;
        }
        let args = sme::BlockArgs::new(
            self.svl_bytes,
            lhs,
            panels,
            kp,
            c,
            ldc,
            rows,
            cols,
            accumulate,
            bias,
        )
        .with_panel_kp(panel_kp);
        // SAFETY: the token proves FEAT_SME + F16F32; the caller's obligations are exactly
        // those of `sme1_block`, with the panel stride they name.
        unsafe { sme::sme1_block(&args) }
    }
}
