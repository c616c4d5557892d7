//! AMX-BF16 GEMM tile (16 rows × 64 columns, four 16×16 FP32 accumulator tiles).

use super::Amx;
use crate::gemm::Ctx;

const ARCH_REQ_XCOMP_PERM: libc::c_int = 0x1023;
const XFEATURE_XTILEDATA: libc::c_ulong = 18;

/// CPUID leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE; then asks Linux for the tile data state.
pub(super) fn detect_and_request() -> bool {
    let max = core::arch::x86_64::__cpuid(0).eax;
    if max < 7 {
        return false;
    }
    let l7 = core::arch::x86_64::__cpuid_count(7, 0);
    let bf16 = l7.edx & (1 << 22) != 0;
    let tile = l7.edx & (1 << 24) != 0;
    if !(bf16 && tile) {
        return false;
    }
    // SAFETY: a raw syscall with integer arguments; it only changes this process's permitted
    // xfeatures (or fails with an error code).
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    r == 0
}

impl Amx {
    /// # Safety
    /// As [`crate::Kernel::tile`].
    pub(crate) unsafe fn gemm_tile(self, ctx: &Ctx, row0: usize, rows: usize, p: usize) {
        // Not yet an AMX kernel: until it lands, the token routes to the portable tile so the
        // results stay right (see README, "not done").
        // SAFETY: forwarded.
        unsafe { crate::portable::gemm_tile(ctx, row0, rows, p) }
    }
}
