//! Shared by the sme bench and the AMX example: deterministic inputs and the `gemm` crate call
//! they compare against (single thread, row-major, C = A·B).

/// `n` values in [-0.5, 0.5) from a xorshift stream seeded by `seed`.
pub fn rnd(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// `c[m×n] = a[m×k] · b[k×n]` (row-major) with the `gemm` crate, `Parallelism::None`.
/// `zero`/`one` are T's 0 and 1 (gemm's alpha and beta).
#[allow(clippy::too_many_arguments)]
pub fn gemm_anchor<T: 'static + Copy>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    c: &mut [T],
    zero: T,
    one: T,
) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: row-major m×k, k×n and m×n buffers of at least those sizes (checked above), unit
    // column stride, row strides k, n, n.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            zero,
            one,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}
