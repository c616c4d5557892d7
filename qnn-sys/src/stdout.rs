//! Keeps what a backend library writes to stdout while it loads and initializes away from the
//! program's own stdout. The HTP simulator prints ` # LIBNATIVE: …` from an initializer (its
//! own `printf`, not the logger); a program whose stdout is its result (generated text, JSON)
//! must not receive it.
//!
//! Around exactly those calls, file descriptor 1 is pointed at an anonymous in-memory file and
//! then restored: Rust's stdout is locked (so no Rust thread's `print!` lands there meanwhile)
//! and flushed before, C's stdio buffers are flushed before (earlier output goes where it was
//! meant to) and after (the library's own buffered `printf`s land in the capture). Closed,
//! pipe or file stdout: restored as it was (a closed one closed again).

use std::io::Write;
use std::sync::Mutex;

/// What libraries wrote to stdout while this process loaded and initialized them, in order.
static CAPTURED: Mutex<String> = Mutex::new(String::new());
/// Whether captured text is also written to stderr as it is captured.
static ECHO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The most text kept per call (a library that printed more is cut, with a note).
const KEEP: usize = 64 << 10;

/// Writes what the libraries print to stdout while loading to stderr as well, each line as
/// `[qnn stdout] LINE` (engine-min turns it on at `-vv`). Off by default: the text is only
/// kept ([`library_stdout`], [`crate::Library::load_output`]).
pub fn set_library_stdout_echo(on: bool) {
    ECHO.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Everything the QNN libraries wrote to stdout while this process loaded and initialized
/// them (the simulator's ` # LIBNATIVE: …` line), in order; empty when they wrote nothing.
pub fn library_stdout() -> String {
    CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Runs `f` with stdout captured; returns its result and what was written to fd 1 meanwhile.
/// When the capture cannot be set up (no in-memory file, fd 1 cannot be replaced), `f` runs
/// with stdout as it is and the text is empty.
pub(crate) fn capture<R>(f: impl FnOnce() -> R) -> (R, String) {
    let stdout = std::io::stdout();
    // Held until fd 1 is restored: other threads' Rust stdout writes wait (this thread's may
    // go on: the lock is reentrant, and they would be captured, so none is made here).
    let mut lock = stdout.lock();
    let _ = lock.flush();
    let redirect = Redirect::start();
    let r = f();
    let text = match redirect {
        Some(rd) => rd.finish(),
        None => String::new(),
    };
    drop(lock);
    if !text.is_empty() {
        let mut all = CAPTURED.lock().unwrap_or_else(|e| e.into_inner());
        all.push_str(&text);
        if ECHO.load(std::sync::atomic::Ordering::Relaxed) {
            let mut err = std::io::stderr().lock();
            for line in text.lines() {
                // A closed stderr loses the echo, not the load.
                let _ = writeln!(err, "[qnn stdout] {line}");
            }
        }
    }
    (r, text)
}

/// fd 1 pointed at an in-memory file; restored by [`Redirect::finish`] or on drop (so an
/// unwinding `f` restores it too).
struct Redirect {
    /// fd 1 as it was (a duplicate), or `None` when it was closed.
    saved: Option<i32>,
    /// The in-memory file (≥ 3).
    file: i32,
    done: bool,
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, 3)`: a duplicate numbered 3 or above (never 0–2, which a
/// closed standard stream would otherwise hand out).
fn dup_high(fd: i32) -> Option<i32> {
    // SAFETY: fcntl with F_DUPFD_CLOEXEC takes an int argument and touches no memory.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    (d >= 0).then_some(d)
}

fn close(fd: i32) {
    // SAFETY: closes a descriptor this module opened or duplicated (or fd 1, to put back a
    // closed stdout); no Rust object owns it.
    unsafe { libc::close(fd) };
}

fn flush_c_stdio() {
    // SAFETY: fflush(NULL) flushes every C output stream; it reads no pointer of ours.
    unsafe { libc::fflush(core::ptr::null_mut()) };
}

impl Redirect {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn memfile() -> Option<i32> {
        // SAFETY: the name is a NUL-terminated literal; the flags are valid.
        let fd = unsafe { libc::memfd_create(c"qnn-sys-stdout".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // A closed 0, 1 or 2 may have been reused: keep the file above them, and close the
        // low number again (that puts back a closed standard stream).
        if fd > 2 {
            return Some(fd);
        }
        let high = dup_high(fd);
        close(fd);
        high
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn memfile() -> Option<i32> {
        None
    }

    fn start() -> Option<Redirect> {
        // What C code wrote before belongs to the real stdout.
        flush_c_stdio();
        let file = Self::memfile()?;
        // `None`: fd 1 is closed (EBADF), and is closed again at the end.
        let saved = dup_high(1);
        // SAFETY: both are open descriptors (file ≥ 3); dup2 replaces fd 1 atomically.
        if unsafe { libc::dup2(file, 1) } < 0 {
            if let Some(s) = saved {
                close(s);
            }
            close(file);
            return None;
        }
        Some(Redirect {
            saved,
            file,
            done: false,
        })
    }

    fn restore(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        // The library's buffered printf output belongs to the capture.
        flush_c_stdio();
        match self.saved {
            Some(s) => {
                // SAFETY: `s` is the duplicate of the original fd 1, still open.
                unsafe { libc::dup2(s, 1) };
                close(s);
            }
            None => close(1),
        }
    }

    fn finish(mut self) -> String {
        self.restore();
        let mut buf = vec![0u8; KEEP];
        let mut n = 0;
        while n < buf.len() {
            // SAFETY: reads into the unfilled tail of `buf`, at most its length.
            let r = unsafe {
                libc::pread(
                    self.file,
                    buf[n..].as_mut_ptr().cast(),
                    buf.len() - n,
                    n as libc::off_t,
                )
            };
            if r <= 0 {
                break;
            }
            n += r as usize;
        }
        buf.truncate(n);
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        // SAFETY: fstat fills a plain struct we own.
        let size = unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            if libc::fstat(self.file, &mut st) == 0 {
                st.st_size as usize
            } else {
                n
            }
        };
        if size > n {
            text.push_str(&format!("\n[… {} more bytes not kept]\n", size - n));
        }
        text
    }
}

impl Drop for Redirect {
    fn drop(&mut self) {
        self.restore();
        close(self.file);
    }
}
