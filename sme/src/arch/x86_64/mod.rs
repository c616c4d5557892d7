//! x86-64 kernels: AVX-512 (F16C + FMA), AMX-BF16, AVX2 (FP16 GEMM and int8 GEMM), AVX-512 VNNI and AMX-INT8 (int8 GEMM),
//! AVX512-FP16 (packed Q4 GEMV in FP16 arithmetic).

mod amx;
mod amx_int8;
mod avx2_gemm;
mod avx2_int8;
mod avx512;
mod dq;
mod qgemv_fp16;
mod vnni;
mod vnni_k;

pub use amx::AmxBlocking;
pub(crate) use amx::GROUP as AMX_GROUP;
#[cfg(test)]
pub(crate) use amx_int8::amx_int8_model_tile;
pub use amx_int8::{AmxInt8, AMX_INT8_TILE_ROWS};
pub(crate) use avx2_gemm::AVX2_TILE_ROWS;
pub use avx2_int8::Avx2;
pub(crate) use avx512::AVX512_TILE_ROWS;
#[cfg(test)]
pub(crate) use dq::dq_panel_avx512_int_round;
pub(crate) use dq::{amx_configure, amx_release, dq_panel_amx, dq_panel_avx512};
pub use qgemv_fp16::Avx512Fp16;
pub use vnni::Vnni;

/// Capability token: proves AVX-512F, F16C and FMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avx512 {
    _p: (),
}

impl Avx512 {
    /// `Some` when the CPU (and OS, through XCR0) supports AVX-512F, F16C and FMA.
    pub fn try_new() -> Option<Self> {
        (std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("f16c")
            && std::arch::is_x86_feature_detected!("fma"))
        .then_some(Self { _p: () })
    }

    /// # Safety
    /// The CPU must support AVX-512F, F16C and FMA, with AVX-512 state enabled by the OS.
    pub unsafe fn new_unchecked() -> Self {
        Self { _p: () }
    }
}

/// Capability token: proves AMX-TILE + AMX-BF16 and that the OS granted this process the AMX
/// tile-data state (Linux `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, requested once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amx {
    _p: (),
    blocking: AmxBlocking,
}

impl Amx {
    /// `Some` when CPUID reports AMX-TILE and AMX-BF16 (plus AVX-512F, used around the tiles)
    /// and Linux grants the tile-data permission. The request runs once per process.
    pub fn try_new() -> Option<Self> {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        (*OK.get_or_init(amx::detect_and_request) && std::arch::is_x86_feature_detected!("avx512f"))
            .then_some(Self {
                _p: (),
                blocking: AmxBlocking::default(),
            })
    }

    /// # Safety
    /// The CPU must support AMX-TILE, AMX-BF16 and AVX-512F, and this process must already hold
    /// the XTILEDATA permission (otherwise the first tile instruction faults).
    pub unsafe fn new_unchecked() -> Self {
        Self {
            _p: (),
            blocking: AmxBlocking::default(),
        }
    }
}

/// Capability token: proves AVX-512F, F16C and AVX512-BF16 (`vdpbf16ps`, `vcvtneps2bf16`): the
/// decompression GEMM's BF16 kernels ([`crate::DqKernel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Avx512Bf16 {
    _p: (),
}

impl Avx512Bf16 {
    /// `Some` when the CPU (and OS, through XCR0) supports AVX-512F, F16C and AVX512-BF16.
    pub fn try_new() -> Option<Self> {
        (std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("f16c")
            && std::arch::is_x86_feature_detected!("avx512bf16"))
        .then_some(Self { _p: () })
    }

    /// # Safety
    /// The CPU must support AVX-512F, F16C and AVX512-BF16, with AVX-512 state enabled by the
    /// OS.
    pub unsafe fn new_unchecked() -> Self {
        Self { _p: () }
    }
}
