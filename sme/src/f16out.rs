//! FP32 → FP16 output conversion for the FP16-output GEMM (round to nearest even, as IEEE 754's
//! default; overflow to ±inf, NaN stays NaN).

use crate::Kernel;

/// `dst[j] = f16(src[j])`, or `f16(f32(dst[j]) + src[j])` when `accumulate`: one FP16 rounding
/// per output. Uses AVX-512F's `vcvtps2ph`/`vcvtph2ps` when `kernel`'s token proves AVX-512F
/// (AVX-512 and AMX tokens), the `half` crate otherwise (aarch64, portable).
pub(crate) fn store(kernel: Kernel, src: &[f32], dst: &mut [u16], accumulate: bool) {
    #[cfg(target_arch = "x86_64")]
    if matches!(kernel, Kernel::Avx512(_) | Kernel::Amx(_)) {
        // SAFETY: both tokens prove AVX-512F.
        unsafe { store_avx512(src, dst, accumulate) };
        return;
    }
    let _ = kernel;
    store_portable(src, dst, accumulate);
}

fn store_portable(src: &[f32], dst: &mut [u16], accumulate: bool) {
    for (d, &s) in dst.iter_mut().zip(src) {
        let v = if accumulate {
            half::f16::from_bits(*d).to_f32() + s
        } else {
            s
        };
        *d = half::f16::from_f32(v).to_bits();
    }
}

/// # Safety
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_avx512(src: &[f32], dst: &mut [u16], accumulate: bool) {
    use core::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: j + 16 <= n keeps the 16-element load and store inside both slices.
        unsafe {
            let mut v = _mm512_loadu_ps(src.as_ptr().add(j));
            let d = dst.as_mut_ptr().add(j) as *mut __m256i;
            if accumulate {
                v = _mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(d)), v);
            }
            _mm256_storeu_si256(d, _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v));
        }
        j += 16;
    }
    store_portable(&src[j..n], &mut dst[j..n], accumulate);
}
