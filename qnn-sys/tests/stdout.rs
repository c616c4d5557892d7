//! What the HTP library prints to stdout while it loads and initializes (the simulator's
//! ` # LIBNATIVE: …` line) stays off the process's stdout, which keeps every line of ours, on a
//! pipe, a file and a closed stdout; the text is kept (`library_stdout`, `load_output`) and
//! echoed to stderr when asked (`set_library_stdout_echo`, engine-min's `-vv`). Each case runs
//! in a child process (this test binary, re-run on the ignored `child` test), since fd 1 and
//! the library's one-time initializer are per process.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use qnn_sys::{BackendLibrary, Session, SessionOptions};

const MODE: &str = "QNN_SYS_STDOUT_TEST_MODE";

/// The child: our own output around a load and a session, then a report on stderr.
#[test]
#[ignore = "run by stdout_of_the_library_stays_off_ours in a child process"]
fn child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    if mode == "echo" {
        qnn_sys::set_library_stdout_echo(true);
    }
    if mode == "closed" {
        // SAFETY: closes this process's stdout; nothing here writes to it afterwards.
        unsafe { libc::close(1) };
    }
    // A partial line before the load, finished after it: both halves must arrive in order.
    let mut out = std::io::stdout();
    let _ = write!(out, "ours-before");
    let lib = Arc::new(BackendLibrary::load_htp().expect("load the HTP library"));
    let _ = writeln!(out, "-after-load");
    let session = Session::new(
        Arc::clone(&lib),
        &SessionOptions {
            soc_model: Some(69),
            ..Default::default()
        },
    )
    .expect("session");
    let _ = writeln!(out, "ours-after-session");
    let _ = out.flush();
    drop(session);
    // SAFETY: F_GETFD only queries the descriptor.
    let fd1_open = unsafe { libc::fcntl(1, libc::F_GETFD) } != -1;
    eprintln!(
        "child: load_output={:?} library_stdout={:?} fd1_open={fd1_open}",
        lib.library().load_output(),
        qnn_sys::library_stdout()
    );
}

fn spawn(mode: &str, stdout: Stdio) -> (String, String) {
    let o = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(MODE, mode)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("spawn the child");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{mode}: child failed: {err}");
    (String::from_utf8_lossy(&o.stdout).into_owned(), err)
}

#[test]
fn stdout_of_the_library_stays_off_ours() {
    // The library must load here, as in every other qnn-sys test (a file that is there but
    // cannot load, e.g. the x86-64 simulator under aarch64 emulation, is an absent backend).
    if hetero_tests::require("qnn", BackendLibrary::load_htp()).is_none() {
        return;
    }
    let report = |err: &str| -> String {
        err.lines()
            .find(|l| l.starts_with("child: "))
            .unwrap_or_else(|| panic!("no report: {err}"))
            .to_string()
    };
    // A pipe, by default: our lines only, in order; the library's line kept for the caller.
    let (out, err) = spawn("default", Stdio::piped());
    assert!(!out.contains("LIBNATIVE"), "{out}");
    assert!(
        out.contains("ours-before-after-load\nours-after-session\n"),
        "{out}"
    );
    let r = report(&err);
    assert!(r.contains("load_output=\" # LIBNATIVE"), "{r}");
    assert!(r.contains("library_stdout=\" # LIBNATIVE"), "{r}");
    assert!(r.contains("fd1_open=true"), "{r}");
    assert!(!err.contains("[qnn stdout]"), "{err}");
    // Echoed (engine-min's -vv): on stderr, marked; still not on stdout.
    let (out, err) = spawn("echo", Stdio::piped());
    assert!(!out.contains("LIBNATIVE"), "{out}");
    assert!(out.contains("ours-before-after-load\n"), "{out}");
    assert!(err.contains("[qnn stdout]  # LIBNATIVE: "), "{err}");
    // A file.
    let path = std::env::temp_dir().join(format!("qnn-sys-stdout-{}.txt", std::process::id()));
    let file = std::fs::File::create(&path).expect("temp file");
    let (_, err) = spawn("default", Stdio::from(file));
    let out = std::fs::read_to_string(&path).expect("read back");
    std::fs::remove_file(&path).ok();
    assert!(!out.contains("LIBNATIVE"), "{out}");
    assert!(
        out.contains("ours-before-after-load\nours-after-session\n"),
        "{out}"
    );
    assert!(report(&err).contains("load_output=\" # LIBNATIVE"), "{err}");
    // A closed stdout: the load works, the text is kept, fd 1 is closed again after.
    let (_, err) = spawn("closed", Stdio::piped());
    let r = report(&err);
    assert!(r.contains("load_output=\" # LIBNATIVE"), "{r}");
    assert!(r.contains("fd1_open=false"), "{r}");
}
