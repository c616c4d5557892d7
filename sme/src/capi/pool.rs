//! The convenience path: a whole matmul on the crate's own `ThreadPool` (an opaque handle).

use super::matmul::{hetero_sme_matmul_get_lhs_packed_size, hetero_sme_matmul_run_lhs_pack, Job};
use super::*;

use crate::{ThreadPool, QPACK_ROWS};

/// A persistent thread pool (opaque): the calling thread plus `threads − 1` workers.
pub struct hetero_sme_pool {
    pool: ThreadPool,
}

/// Starts a pool of `threads` (≥ 1) threads, the calling thread counted: `threads − 1` workers
/// are spawned now (the only allocation of this API). Free it with `hetero_sme_pool_free`.
///
/// Thread-safe.
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_pool_new(
    threads: usize,
    out: *mut *mut hetero_sme_pool,
) -> hetero_sme_status {
    guard(|| {
        nonnull(out, "out")?;
        if threads == 0 {
            return Err(Fail::new(
                HETERO_SME_INVALID_ARGUMENT,
                "threads must be >= 1",
            ));
        }
        let pool = ThreadPool::new(threads).map_err(pool_fail)?;
        let p = Box::into_raw(Box::new(hetero_sme_pool { pool }));
        // SAFETY: the caller's contract.
        unsafe { put(out, p, "out") }
    })
}

/// Stops the pool's workers and frees it. Null is ignored. Not while another thread uses the
/// pool.
///
/// # Safety
/// `pool` null or from `hetero_sme_pool_new`, not freed before, not used after.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_pool_free(pool: *mut hetero_sme_pool) {
    if pool.is_null() {
        return;
    }
    // SAFETY: the caller's contract: a live pool from Box::into_raw, freed once. A panic in
    // a worker's shutdown is caught, not unwound into C.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        drop(Box::from_raw(pool))
    }));
}

/// Threads of the pool (the caller included); 0 for null.
///
/// Thread-safe.
///
/// # Safety
/// `pool` null or a live pool.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_pool_threads(pool: *const hetero_sme_pool) -> usize {
    guard_value(0, || {
        // SAFETY: the caller's contract (null or a live pool).
        unsafe { pool.as_ref() }.map_or(0, |p| p.pool.threads())
    })
}

/// Groups of 16 columns per pool task: 4 (64 columns), as the Rust plans' GEMV tiles.
const TASK_GROUPS: usize = 4;

/// The whole `dst[M×N] = x·Wᵀ` of `hetero_sme_matmul_run_matmul` (all of M and N) on the
/// pool's threads, tiles spread by work stealing. Same arguments, checks and results.
///
/// Thread-safe: calls on one pool from several threads run one after another.
///
/// # Safety
/// As `hetero_sme_matmul_run_matmul`, for the whole output; `pool` a live pool.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_pool(
    pool: *const hetero_sme_pool,
    variant: u32,
    lhs: *const u8,
    lhs_size: usize,
    rhs: *const u8,
    rhs_size: usize,
    dst: *mut f32,
    dst_len: usize,
    ldd: usize,
) -> hetero_sme_status {
    guard(|| {
        nonnull(pool, "pool")?;
        // SAFETY: the caller's contract (a live pool).
        let pool = unsafe { &(*pool).pool };
        // SAFETY: forwarded.
        let job = unsafe {
            Job::new(
                variant, lhs, lhs_size, rhs, rhs_size, dst, dst_len, ldd, None,
            )?
        };
        // SAFETY: validated for the whole output.
        unsafe { run_on(pool, &job) }
    })
}

/// # Safety
/// `job` validated for its whole output, which the caller owns.
unsafe fn run_on(pool: &ThreadPool, job: &Job) -> Result<(), Fail> {
    let (m, n) = (job.m(), job.n());
    if m == 0 || n == 0 {
        return Ok(());
    }
    let rows = job.m_step();
    let cols = TASK_GROUPS * QPACK_ROWS;
    let (rc, cc) = (m.div_ceil(rows), n.div_ceil(cols));
    let tasks = rc
        .checked_mul(cc)
        .ok_or(Fail::new(HETERO_SME_OVERFLOW, "tasks"))?;
    // The first failing tile's refusal, reported as it is (its status and text). Validated
    // tiles are not expected to fail; if one does, the caller learns why, not just "a bug".
    let first: std::sync::OnceLock<Fail> = std::sync::OnceLock::new();
    pool.run(tasks, &|t, _thread| {
        let (c, r) = (t / rc, t % rc);
        let (m0, n0) = (r * rows, c * cols);
        let (m1, n1) = ((m0 + rows).min(m), (n0 + cols).min(n));
        // SAFETY: each task index runs once, and tasks cover disjoint tiles of the validated
        // output; the tiles are on group boundaries (n0 multiple of 64, n1 too or N).
        if let Err(e) = unsafe { job.run(m0, m1, n0, n1) } {
            let _ = first.set(e);
        }
    });
    match first.into_inner() {
        Some(fail) => Err(fail),
        None => Ok(()),
    }
}

/// Quantizes (int8) or copies (GEMV) the f32 activations `x` into the caller's `lhs_scratch`
/// (`get_lhs_packed_size` for the weight's type, M = `m`, K = the weight's) and runs the whole
/// matmul on the pool: `hetero_sme_matmul_run_lhs_pack` then `hetero_sme_matmul_pool`.
///
/// Thread-safe as `hetero_sme_matmul_pool` (distinct scratch per concurrent call).
///
/// # Safety
/// As those two functions.
#[no_mangle]
pub unsafe extern "C" fn hetero_sme_matmul_f32_pool(
    pool: *const hetero_sme_pool,
    variant: u32,
    x: *const f32,
    x_len: usize,
    m: usize,
    ldx: usize,
    rhs: *const u8,
    rhs_size: usize,
    lhs_scratch: *mut u8,
    lhs_scratch_size: usize,
    dst: *mut f32,
    dst_len: usize,
    ldd: usize,
) -> hetero_sme_status {
    guard(|| {
        nonnull(pool, "pool")?;
        nonnull(rhs, "rhs")?;
        // SAFETY: forwarded.
        let (ty, k) = unsafe { super::matmul::peek_rhs(rhs, rhs_size)? };
        let mut need = 0usize;
        // SAFETY: a local.
        let st = unsafe { hetero_sme_matmul_get_lhs_packed_size(variant, ty, m, k, &mut need) };
        if st != HETERO_SME_OK {
            return Err(Fail::passed(st));
        }
        // SAFETY: forwarded.
        let st = unsafe {
            hetero_sme_matmul_run_lhs_pack(
                variant,
                ty,
                m,
                k,
                x,
                x_len,
                ldx,
                lhs_scratch,
                lhs_scratch_size,
            )
        };
        if st != HETERO_SME_OK {
            return Err(Fail::passed(st));
        }
        // SAFETY: forwarded; the scratch now holds a valid LHS blob of `need` bytes.
        let st = unsafe {
            hetero_sme_matmul_pool(
                pool,
                variant,
                lhs_scratch,
                lhs_scratch_size,
                rhs,
                rhs_size,
                dst,
                dst_len,
                ldd,
            )
        };
        if st != HETERO_SME_OK {
            return Err(Fail::passed(st));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tile that fails inside the pool reports its own status and text, not
    /// `HETERO_SME_PANIC` (a GEMV job whose weight payload is too short for its shape).
    #[test]
    fn a_failing_tile_reports_its_error() {
        let pool = ThreadPool::new(2).expect("pool");
        let lhs = [0f32; 16 + 32];
        let rhs = [0u64; 8 + 8];
        let mut dst = [f32::NAN; 64];
        // SAFETY: the buffers outlive the job; the bogus payload length is what is tested.
        let job = unsafe {
            Job::bogus_gemv_for_test(lhs.as_ptr().cast(), rhs.as_ptr().cast(), dst.as_mut_ptr())
        };
        // SAFETY: the job's output is `dst`, owned here.
        let err = unsafe { run_on(&pool, &job) }.expect_err("the tile must fail");
        assert_eq!(err.status, HETERO_SME_BUFFER_TOO_SMALL);
        assert!(
            matches!(err.detail, hetero_ffi::Detail::Err(SmeErr::Rust(_))),
            "{:?}",
            err.detail
        );
    }
}
