#![doc = include_str!("../README.md")]

use core::ffi::{c_char, CStr};
use core::fmt::{self, Display, Write};
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::LocalKey;

/// A C status: `int32_t` in every header (a fixed width, unlike a C `enum`).
pub type Status = i32;

/// Success.
pub const OK: Status = 0;
/// A required pointer was null.
pub const NULL_POINTER: Status = 1;
/// An argument is out of its domain.
pub const INVALID_ARGUMENT: Status = 2;
/// A buffer is shorter than needed (query the size first).
pub const BUFFER_TOO_SMALL: Status = 3;
/// A size computation overflowed.
pub const OVERFLOW: Status = 4;
/// A buffer or size is not aligned as required.
pub const MISALIGNED: Status = 5;
/// Rust panicked inside the call (a bug).
pub const PANIC: Status = 6;

/// Static text of the statuses every library shares (0..=6); `None` for the others.
pub fn common_message(status: Status) -> Option<&'static CStr> {
    Some(match status {
        OK => c"success",
        NULL_POINTER => c"a required pointer was null",
        INVALID_ARGUMENT => c"an argument is out of its domain",
        BUFFER_TOO_SMALL => c"a buffer is too small",
        OVERFLOW => c"a size computation overflowed",
        MISALIGNED => c"a buffer or size is misaligned",
        PANIC => c"a panic inside the library (a bug)",
        _ => return None,
    })
}

/// Capacity of a last-error text, terminator included.
pub const LAST_LEN: usize = 256;

/// One crate's per-thread last-error text (declare it in a `thread_local!` with
/// `const { LastError::new() }`). A fixed buffer: recording never allocates.
#[derive(Debug)]
pub struct LastError(RefCell<[u8; LAST_LEN]>);

impl LastError {
    /// Empty.
    pub const fn new() -> Self {
        LastError(RefCell::new([0; LAST_LEN]))
    }
}

impl Default for LastError {
    fn default() -> Self {
        Self::new()
    }
}

/// What a refused call's last-error text says.
#[derive(Debug, Clone)]
pub enum Detail<E> {
    /// Already recorded by an inner entry point (its text is kept).
    Kept,
    /// Static text.
    Text(&'static str),
    /// The crate's own error, formatted when recorded.
    Err(E),
}

/// A refused call: its status and what the thread's last-error text says.
#[derive(Debug, Clone)]
pub struct Fail<E> {
    /// The status returned to C.
    pub status: Status,
    /// The detail recorded.
    pub detail: Detail<E>,
}

impl<E> Fail<E> {
    /// A refusal with static text.
    pub fn new(status: Status, text: &'static str) -> Self {
        Fail {
            status,
            detail: Detail::Text(text),
        }
    }

    /// A refusal carrying the crate's error.
    pub fn err(status: Status, e: E) -> Self {
        Fail {
            status,
            detail: Detail::Err(e),
        }
    }

    /// An inner entry point's status, whose text it already recorded.
    pub fn passed(status: Status) -> Self {
        Fail {
            status,
            detail: Detail::Kept,
        }
    }
}

/// Writes into a fixed buffer, truncating at a UTF-8 boundary, keeping room for the NUL.
struct Trunc<'a> {
    buf: &'a mut [u8; LAST_LEN],
    at: usize,
}

impl Write for Trunc<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = LAST_LEN - 1 - self.at;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.buf[self.at..self.at + take].copy_from_slice(&s.as_bytes()[..take]);
        self.at += take;
        Ok(())
    }
}

/// Records `f`'s text as this thread's last error in `last` (nothing for [`Detail::Kept`]).
pub fn record<E: Display>(last: &'static LocalKey<LastError>, f: &Fail<E>) {
    let _ = last.try_with(|cell| {
        if let Ok(mut buf) = cell.0.try_borrow_mut() {
            let mut w = Trunc {
                buf: &mut buf,
                at: 0,
            };
            let _ = match &f.detail {
                Detail::Kept => return,
                Detail::Text(t) => w.write_str(t),
                Detail::Err(e) => write!(w, "{e}"),
            };
            let end = w.at;
            buf[end] = 0;
        }
    });
}

/// Runs one C entry point's body: a panic becomes [`PANIC`] (text: "a panic inside `krate` (a
/// bug)"), a refusal its status, recorded as this thread's last error in `last`.
pub fn guard<E: Display>(
    last: &'static LocalKey<LastError>,
    krate: &'static str,
    f: impl FnOnce() -> Result<(), Fail<E>>,
) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => OK,
        Ok(Err(fail)) => {
            record(last, &fail);
            fail.status
        }
        Err(_) => {
            record::<PanicIn>(last, &Fail::err(PANIC, PanicIn(krate)));
            PANIC
        }
    }
}

struct PanicIn(&'static str);

impl Display for PanicIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a panic inside {} (a bug)", self.0)
    }
}

/// As [`guard`] for infallible queries: a panic (never expected) returns `default`.
pub fn guard_value<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

/// This thread's last-error text in `last` (NUL-terminated; empty if none): valid until the
/// thread's next call that records one.
pub fn last_error(last: &'static LocalKey<LastError>) -> *const c_char {
    static EMPTY: [u8; 1] = [0];
    guard_value(EMPTY.as_ptr().cast(), || {
        last.try_with(|cell| cell.0.as_ptr().cast::<c_char>().cast_const())
            .unwrap_or(EMPTY.as_ptr().cast())
    })
}

/// Refuses a null pointer ([`NULL_POINTER`], text `what`).
pub fn nonnull<T, E>(p: *const T, what: &'static str) -> Result<(), Fail<E>> {
    if p.is_null() {
        return Err(Fail::new(NULL_POINTER, what));
    }
    Ok(())
}

/// Refuses a pointer not aligned to `align` bytes ([`MISALIGNED`], text `what`).
pub fn aligned<T, E>(p: *const T, align: usize, what: &'static str) -> Result<(), Fail<E>> {
    if !(p as usize).is_multiple_of(align) {
        return Err(Fail::new(MISALIGNED, what));
    }
    Ok(())
}

/// Writes an output value through a pointer checked for null.
///
/// # Safety
/// `out`, if not null, is valid for a write of `T`.
pub unsafe fn put<T, E>(out: *mut T, v: T, what: &'static str) -> Result<(), Fail<E>> {
    nonnull(out, what)?;
    // SAFETY: not null (checked); valid by the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}

/// A decimal version component (`env!("CARGO_PKG_VERSION_MAJOR")`) as a number, at compile
/// time.
pub const fn parse_version(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut v = 0u32;
    let mut i = 0;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

/// `major << 16 | minor << 8 | patch` of a crate's version strings.
pub const fn version(major: &str, minor: &str, patch: &str) -> u32 {
    parse_version(major) << 16 | parse_version(minor) << 8 | parse_version(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static LAST: LastError = const { LastError::new() };
    }

    fn text() -> String {
        // SAFETY: last_error returns a NUL-terminated buffer.
        unsafe { CStr::from_ptr(last_error(&LAST)) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn refusals_record_their_text_and_panics_become_a_status() {
        assert_eq!(guard::<&str>(&LAST, "t", || Ok(())), OK);
        assert_eq!(
            guard::<&str>(&LAST, "t", || Err(Fail::new(OVERFLOW, "too big"))),
            OVERFLOW
        );
        assert_eq!(text(), "too big");
        assert_eq!(
            guard::<&str>(&LAST, "t", || Err(Fail::passed(BUFFER_TOO_SMALL))),
            BUFFER_TOO_SMALL
        );
        assert_eq!(text(), "too big", "a passed status keeps the inner text");
        assert_eq!(
            guard(&LAST, "t", || Err(Fail::err(100, "custom error"))),
            100
        );
        assert_eq!(text(), "custom error");
        let st = guard::<&str>(&LAST, "my-crate", || {
            let v: Vec<u8> = Vec::new();
            let _ = v[std::hint::black_box(1)];
            Ok(())
        });
        assert_eq!(st, PANIC);
        assert_eq!(text(), "a panic inside my-crate (a bug)");
        assert_eq!(guard_value(7, || panic!("x")), 7);
    }

    #[test]
    fn long_text_is_truncated_at_a_char_boundary() {
        let long = "é".repeat(300); // 600 bytes of 2-byte characters
        guard(&LAST, "t", || Err(Fail::err(2, long.as_str())));
        let t = text();
        assert!(t.len() < LAST_LEN && t.chars().all(|c| c == 'é'));
        assert_eq!(t.len(), 254);
    }

    #[test]
    fn checks_and_versions() {
        let x = 5u32;
        assert!(nonnull::<u32, ()>(&x, "x").is_ok());
        assert_eq!(
            nonnull::<u32, ()>(core::ptr::null(), "x")
                .unwrap_err()
                .status,
            NULL_POINTER
        );
        let p = 0x1002 as *const u8;
        assert_eq!(aligned::<u8, ()>(p, 4, "p").unwrap_err().status, MISALIGNED);
        assert!(aligned::<u8, ()>(p, 2, "p").is_ok());
        assert_eq!(version("1", "22", "3"), 1 << 16 | 22 << 8 | 3);
        for s in -1..8 {
            assert_eq!(common_message(s).is_some(), (0..=6).contains(&s));
        }
    }
}
