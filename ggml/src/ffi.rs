//! The C ABI the shim (`shim/ggml-hetero.cpp`) calls; declared in `include/hetero_ggml.h`.
//!
//! Every function returns a status (`HETERO_GGML_OK` = 0) and, on failure, leaves a message for
//! this thread in [`hetero_ggml_last_error`]; null pointers, bad lengths and foreign blobs are
//! refused with nothing written; a panic inside is caught here and reported as
//! `HETERO_GGML_PANIC`, never unwound into C.

use core::ffi::{c_char, c_void};
use std::cell::RefCell;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use hetero_sme::GgmlType;

use crate::{blob, Ctx, Error};

/// Success.
pub const HETERO_GGML_OK: i32 = 0;
/// A type this backend does not run.
pub const HETERO_GGML_UNSUPPORTED: i32 = 1;
/// A bad argument (null, length, alignment, shape, foreign blob).
pub const HETERO_GGML_INVALID: i32 = 2;
/// The computation failed (thread pool, kernel).
pub const HETERO_GGML_FAILED: i32 = 3;
/// A panic was caught at the boundary (a bug: please report it).
pub const HETERO_GGML_PANIC: i32 = 4;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

fn status(e: &Error) -> i32 {
    match e {
        Error::Unsupported(_) | Error::UnknownType(_) => HETERO_GGML_UNSUPPORTED,
        Error::Invalid(_) | Error::Sme(_) => HETERO_GGML_INVALID,
        Error::Pool(_) => HETERO_GGML_FAILED,
        Error::Panicked(_) => HETERO_GGML_PANIC,
    }
}

/// Runs `f`, turning its error or panic into a status and this thread's last error.
fn guard(f: impl FnOnce() -> Result<(), Error>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HETERO_GGML_OK,
        Ok(Err(e)) => {
            set_last(e.to_string());
            status(&e)
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            set_last(format!("panic inside hetero-ggml (a bug): {what}"));
            HETERO_GGML_PANIC
        }
    }
}

fn ty_of(code: u32) -> Result<GgmlType, Error> {
    GgmlType::from_code(code).ok_or(Error::UnknownType(code))
}

fn dims(n: u64, k: u64) -> Result<(usize, usize), Error> {
    let n = usize::try_from(n).map_err(|_| Error::Invalid("n"))?;
    let k = usize::try_from(k).map_err(|_| Error::Invalid("k"))?;
    Ok((n, k))
}

fn nonnull<T>(p: *const T, what: &'static str) -> Result<(), Error> {
    if p.is_null() {
        Err(Error::Invalid(what))
    } else {
        Ok(())
    }
}

/// The ABI version this library implements (`HETERO_GGML_ABI_VERSION`).
#[no_mangle]
pub extern "C" fn hetero_ggml_abi_version() -> u32 {
    crate::ABI_VERSION
}

/// This thread's last failure message (empty if none); valid until this thread's next failing
/// call.
#[no_mangle]
pub extern "C" fn hetero_ggml_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The kernels this CPU runs, as a static string (e.g. "int8 avx512-vnni, fp16 avx512").
#[no_mangle]
pub extern "C" fn hetero_ggml_kernels() -> *const c_char {
    static S: OnceLock<CString> = OnceLock::new();
    S.get_or_init(|| {
        let s = catch_unwind(|| {
            format!(
                "int8 {}, fp16 {}",
                hetero_sme::Int8Kernel::best().name(),
                hetero_sme::Kernel::best(hetero_sme::PackedFormat::F16).name()
            )
        })
        .unwrap_or_else(|_| "unknown".into());
        CString::new(s).unwrap_or_default()
    })
    .as_ptr()
}

/// Bytes of the packed form of `n` rows of `k` elements of ggml type `ggml_type` into `*size`;
/// `HETERO_GGML_UNSUPPORTED` for a type this backend does not run, `HETERO_GGML_INVALID` for a
/// shape it cannot hold.
///
/// # Safety
/// `size` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_ggml_weight_size(
    ggml_type: u32,
    n: u64,
    k: u64,
    size: *mut usize,
) -> i32 {
    guard(|| {
        nonnull(size, "size")?;
        let (n, k) = dims(n, k)?;
        let s = blob::size(ty_of(ggml_type)?, n, k)?;
        // SAFETY: the caller's contract; checked non-null.
        unsafe { size.write(s) };
        Ok(())
    })
}

/// Repacks a GGUF weight (`src`, `src_len` bytes: `n` rows of `k` elements) into `dst` (64-byte
/// aligned, `dst_len` ≥ the packed size).
///
/// # Safety
/// `src` valid for `src_len` byte reads, `dst` for `dst_len` byte writes, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hetero_ggml_weight_pack(
    ggml_type: u32,
    n: u64,
    k: u64,
    src: *const u8,
    src_len: usize,
    dst: *mut u8,
    dst_len: usize,
) -> i32 {
    guard(|| {
        nonnull(src, "src")?;
        nonnull(dst, "dst")?;
        let (n, k) = dims(n, k)?;
        // SAFETY: the caller's contract (lengths, no overlap).
        let (s, d) = unsafe {
            (
                core::slice::from_raw_parts(src, src_len),
                core::slice::from_raw_parts_mut(dst, dst_len),
            )
        };
        blob::pack(ty_of(ggml_type)?, n, k, s, d)
    })
}

/// Writes bytes `offset .. offset + dst_len` of the GGUF tensor that `blob` (`blob_len` bytes)
/// was packed from into `dst`: the source bytes exactly.
///
/// # Safety
/// `blob` valid for `blob_len` byte reads, `dst` for `dst_len` byte writes, not overlapping.
#[no_mangle]
pub unsafe extern "C" fn hetero_ggml_weight_unpack(
    blob: *const u8,
    blob_len: usize,
    offset: usize,
    dst: *mut u8,
    dst_len: usize,
) -> i32 {
    guard(|| {
        nonnull(blob, "blob")?;
        nonnull(dst, "dst")?;
        // SAFETY: the caller's contract.
        let (b, d) = unsafe {
            (
                core::slice::from_raw_parts(blob, blob_len),
                core::slice::from_raw_parts_mut(dst, dst_len),
            )
        };
        blob::unpack(b, offset, d)
    })
}

/// A compute context on `threads` threads into `*out` (free it with [`hetero_ggml_ctx_free`]).
///
/// # Safety
/// `out` valid for one write.
#[no_mangle]
pub unsafe extern "C" fn hetero_ggml_ctx_new(threads: u32, out: *mut *mut Ctx) -> i32 {
    guard(|| {
        nonnull(out, "out")?;
        let c = Box::new(Ctx::new(threads as usize)?);
        // SAFETY: the caller's contract; checked non-null.
        unsafe { out.write(Box::into_raw(c)) };
        Ok(())
    })
}

/// Frees a context (null is ignored). Waits for nothing: no call may be running on it.
///
/// # Safety
/// `ctx` null or from [`hetero_ggml_ctx_new`], not freed before, not in use.
#[no_mangle]
pub unsafe extern "C" fn hetero_ggml_ctx_free(ctx: *mut Ctx) {
    if !ctx.is_null() {
        // SAFETY: the caller's contract: a live box from ctx_new, freed once. Dropping joins
        // the pool's workers; a panic there is caught, not unwound into C.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(ctx) })));
    }
}

/// Sets the context's thread count (a new pool only when it changes).
///
/// # Safety
/// `ctx` from [`hetero_ggml_ctx_new`], used by no other thread during the call.
#[no_mangle]
pub unsafe extern "C" fn hetero_ggml_ctx_set_threads(ctx: *mut Ctx, threads: u32) -> i32 {
    guard(|| {
        nonnull(ctx, "ctx")?;
        // SAFETY: the caller's contract: a live context, exclusively ours for the call.
        unsafe { &mut *ctx }.set_threads(threads as usize)
    })
}

/// The slices of a `mul_mat` call, checked: the weight, `x` (`m` rows, `ldx` floats apart), `y`.
struct Call<'a> {
    w: blob::Weight<'a>,
    x: &'a [f32],
    m: usize,
    ldx: usize,
    y: &'a mut [f32],
    ldy: usize,
}

/// Checks a `mul_mat` call's arguments and views them as slices.
///
/// # Safety
/// As [`hetero_ggml_mul_mat`] (`'a` is the call's duration).
#[allow(clippy::too_many_arguments)]
unsafe fn call_args<'a>(
    blob: *const u8,
    blob_len: usize,
    k: u64,
    x: *const f32,
    m: u64,
    x_row_bytes: usize,
    y: *mut f32,
    y_row_bytes: usize,
) -> Result<Call<'a>, Error> {
    nonnull(blob, "blob")?;
    nonnull(x, "x")?;
    nonnull(y, "y")?;
    // SAFETY: the caller's contract.
    let b = unsafe { core::slice::from_raw_parts(blob, blob_len) };
    let w = blob::view(b)?;
    let m = usize::try_from(m).map_err(|_| Error::Invalid("m"))?;
    if usize::try_from(k).ok() != Some(w.k()) {
        return Err(Error::Invalid(
            "K of the activations differs from the weight's",
        ));
    }
    if !x_row_bytes.is_multiple_of(4) || !y_row_bytes.is_multiple_of(4) {
        return Err(Error::Invalid("row strides must be whole floats"));
    }
    if !(x as usize).is_multiple_of(4) || !(y as usize).is_multiple_of(4) {
        return Err(Error::Invalid("x and y must be 4-byte aligned"));
    }
    let (ldx, ldy) = (x_row_bytes / 4, y_row_bytes / 4);
    let rows = m.max(1);
    let xs = (rows - 1)
        .checked_mul(ldx)
        .and_then(|s| s.checked_add(w.k()))
        .ok_or(Error::Invalid("x too large"))?;
    let ys = (rows - 1)
        .checked_mul(ldy)
        .and_then(|s| s.checked_add(w.n()))
        .ok_or(Error::Invalid("y too large"))?;
    let (xs, ys) = if m == 0 { (0, 0) } else { (xs, ys) };
    // SAFETY: the caller's contract: m rows of x (`xs` floats from x) readable, m rows of y
    // (`ys` floats from y) writable and exclusively ours, not overlapping x.
    let (x, y) = unsafe {
        (
            core::slice::from_raw_parts(x, xs),
            core::slice::from_raw_parts_mut(y, ys),
        )
    };
    Ok(Call {
        w,
        x,
        m,
        ldx,
        y,
        ldy,
    })
}

/// `y = x · Wᵀ` for the packed weight `blob` (`n` rows of `k`, from
/// [`hetero_ggml_weight_pack`]) on the context's thread pool: `m` rows of `k` floats at `x`,
/// `x_row_bytes` apart; `m` rows of `n` floats into `y`, `y_row_bytes` apart (both multiples of
/// 4). `k` must equal the blob's. On error nothing is written to `y`.
///
/// # Safety
/// `ctx` from [`hetero_ggml_ctx_new`], used by no other thread during the call; `blob` valid for
/// `blob_len` byte reads; `x` for reads of `m` rows as described, `y` for writes of `m` rows,
/// neither overlapping `y`'s rows.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hetero_ggml_mul_mat(
    ctx: *mut Ctx,
    blob: *const u8,
    blob_len: usize,
    k: u64,
    x: *const f32,
    m: u64,
    x_row_bytes: usize,
    y: *mut f32,
    y_row_bytes: usize,
) -> i32 {
    guard(|| {
        nonnull(ctx, "ctx")?;
        // SAFETY: forwarded from this function's contract.
        let c = unsafe { call_args(blob, blob_len, k, x, m, x_row_bytes, y, y_row_bytes)? };
        // SAFETY: the caller's contract: a live context, exclusively ours for the call.
        unsafe { &mut *ctx }.mul_mat(&c.w, c.x, c.m, c.ldx, c.y, c.ldy)
    })
}

/// One thread's share of a team job: what [`HeteroGgmlTeam`] calls, once per thread.
pub type HeteroGgmlWork = unsafe extern "C" fn(job: *const c_void, thread: u32);

/// Runs `work(job, i)` once on each of `threads` threads (`i` in `0..threads`, concurrently)
/// and returns when every call has returned; `user` is what the caller of
/// [`hetero_ggml_mul_mat_team`] passed.
pub type HeteroGgmlTeam =
    unsafe extern "C" fn(user: *mut c_void, threads: u32, work: HeteroGgmlWork, job: *const c_void);

/// A team job as the trampoline sees it.
struct TeamJob<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    panicked: AtomicBool,
}

/// The trampoline the caller's team calls: one thread's share; a panic is caught here (the tiles
/// it held stay unwritten and the call reports `HETERO_GGML_PANIC`).
///
/// # Safety
/// `job` is the pointer `hetero_ggml_mul_mat_team` handed to the team, during that call.
unsafe extern "C" fn team_work(job: *const c_void, thread: u32) {
    // SAFETY: the contract: a live `TeamJob` for the duration of the team call.
    let job = unsafe { &*job.cast::<TeamJob<'_>>() };
    if catch_unwind(AssertUnwindSafe(|| (job.f)(thread as usize))).is_err() {
        job.panicked.store(true, Ordering::Relaxed);
    }
}

/// As [`hetero_ggml_mul_mat`], on the caller's threads: `team(user, t, work, job)` must call
/// `work(job, i)` once on each of `t` threads (`i` in `0..t`, concurrently) and return when all
/// have returned; `t` ≤ `threads` (fewer for a small decode matmul). The work is hetero-sme's
/// range work stealing, so a thread that does not start only costs time. For a host engine that
/// owns a team of threads already (ggml's OpenMP team): a second pool on the same cores would
/// spin against it.
///
/// # Safety
/// As [`hetero_ggml_mul_mat`]; `team` must behave as described and not unwind.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hetero_ggml_mul_mat_team(
    ctx: *mut Ctx,
    blob: *const u8,
    blob_len: usize,
    k: u64,
    x: *const f32,
    m: u64,
    x_row_bytes: usize,
    y: *mut f32,
    y_row_bytes: usize,
    threads: u32,
    team: Option<HeteroGgmlTeam>,
    user: *mut c_void,
) -> i32 {
    guard(|| {
        nonnull(ctx, "ctx")?;
        let team = team.ok_or(Error::Invalid("team"))?;
        // SAFETY: forwarded from this function's contract.
        let c = unsafe { call_args(blob, blob_len, k, x, m, x_row_bytes, y, y_row_bytes)? };
        let mut panicked = false;
        let mut run = |t: usize, f: &(dyn Fn(usize) + Sync)| {
            let job = TeamJob {
                f,
                panicked: AtomicBool::new(false),
            };
            // SAFETY: the caller's contract on `team`; `job` outlives the call, which returns
            // only when every `work` call has.
            unsafe {
                team(
                    user,
                    t as u32,
                    team_work,
                    (&job as *const TeamJob<'_>).cast(),
                )
            };
            panicked |= job.panicked.load(Ordering::Relaxed);
        };
        // SAFETY: the caller's contract: a live context, exclusively ours for the call.
        let ctx = unsafe { &mut *ctx };
        ctx.mul_mat_team(
            &c.w,
            c.x,
            c.m,
            c.ldx,
            c.y,
            c.ldy,
            threads as usize,
            &mut run,
        )?;
        if panicked {
            return Err(Error::Panicked("a team thread's share of the tiles"));
        }
        Ok(())
    })
}
