//! The `engine-min` binary: exit codes and messages for bad input, the demo command, and the
//! profile -> plan round trip (model parts need `HETERO_MODEL`; backend name `model`).

use std::process::Command;

mod common;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_engine-min"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    let o = bin().args(args).output().expect("spawn engine-min");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_input_gives_clear_errors() {
    let (code, _, err) = run(&["run", "--model", "/nonexistent/model.gguf", "--prompt", "x"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read model file"), "{err}");
    let dir = std::env::temp_dir().join(format!("engine-min-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"GGUF\x03\0\0\0garbage").expect("write");
    let (code, _, err) = run(&[
        "run",
        "--model",
        junk.to_str().expect("utf8"),
        "--prompt",
        "x",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("corrupt model file"), "{err}");
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand"), "{err}");
    let (code, _, err) = run(&["plan"]);
    assert_eq!(code, 2);
    assert!(err.contains("--profile"), "{err}");
    // A hand-written profile: the planner answers for one op.
    let prof = dir.join("hand.json");
    std::fs::write(
        &prof,
        r#"{"device": "hand", "backends": [
            {"backend": "cpu", "points": [{"k": 576, "n": 1536, "m": 1, "us": 100.0},
                                          {"k": 576, "n": 1536, "m": 128, "us": 4000.0}]},
            {"backend": "gpu", "sync_us": 20.0, "points": [{"k": 576, "n": 1536, "m": 1, "us": 80.0},
                                          {"k": 576, "n": 1536, "m": 128, "us": 1500.0}]}]}"#,
    )
    .expect("write profile");
    let (code, out, err) = run(&[
        "plan",
        "--profile",
        prof.to_str().expect("utf8"),
        "--weight",
        "576,1536",
        "--seq",
        "100",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("k=576 n=1536 m=100") && out.contains("predicted"),
        "{out}"
    );
    let (code, _, err) = run(&[
        "plan",
        "--profile",
        prof.to_str().expect("utf8"),
        "--weight",
        "5",
    ]);
    assert_eq!(code, 2, "{err}");
    // Bad plan shares are usage errors, found before the model is read.
    for plan in ["npu-w:0", "npu-w:1.5", "npu-gpu-w:x", "cpu-gpu:2"] {
        let (code, _, err) = run(&[
            "run",
            "--model",
            "/nonexistent/model.gguf",
            "--prompt",
            "x",
            "--plan",
            plan,
        ]);
        assert_eq!(code, 2, "{plan}: {err}");
        assert!(err.contains("share"), "{plan}: {err}");
    }
    let (code, _, err) = run(&[
        "bench",
        "--model",
        "/nonexistent/model.gguf",
        "--threads",
        "0",
    ]);
    assert_eq!(code, 2, "{err}");
    // Values outside their ranges are usage errors, not silent clamps.
    for (flag, v) in [
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--top-p", "NaN"),
        ("--temperature", "NaN"),
        ("--temperature", "-1"),
        ("--temperature", "inf"),
        ("--ctx", "0"),
        ("--threads", "0"),
        ("--npu-seq", "0"),
        ("--kernel", "quantum"),
    ] {
        let (code, _, err) = run(&[
            "run",
            "--model",
            "/nonexistent/model.gguf",
            "--prompt",
            "x",
            flag,
            v,
        ]);
        assert_eq!(code, 2, "{flag} {v}: {err}");
        assert!(err.contains(flag), "{flag} {v}: {err}");
    }
    // Every subcommand has its own --help (exit 0, on stdout).
    for sub in [
        &["run"][..],
        &["profile"],
        &["plan"],
        &["bench"],
        &["agents"],
        &["agents", "gen-trace"],
        &["agents", "run"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{sub:?}: {err}");
        assert!(out.contains("Usage: engine-min"), "{sub:?}: {out}");
    }
    // A non-UTF-8 argument value where text is needed is a usage error, not a panic.
    {
        use std::os::unix::ffi::OsStrExt;
        let o = bin()
            .args(["run", "--model", "/nonexistent/model.gguf", "--prompt"])
            .arg(std::ffi::OsStr::from_bytes(b"caf\xe9"))
            .output()
            .expect("spawn");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn demo_and_profile_plan_on_the_model() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let model = path.to_str().expect("utf8");
    let (code, out, err) = run(&[
        "run",
        "--model",
        model,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "8",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(" Paris"), "{out}");
    for key in ["time to first token", "prefill:", "decode:", "time share"] {
        assert!(out.contains(key), "missing {key}: {out}");
    }
    // Prompt longer than the context.
    let long = "word ".repeat(300);
    let (code, _, err) = run(&["run", "--model", model, "--prompt", &long, "--ctx", "64"]);
    assert_eq!(code, 1);
    assert!(err.contains("context"), "{err}");
    // A context above the model's is refused, not clamped.
    let (code, _, err) = run(&["run", "--model", model, "--prompt", "x", "--ctx", "1000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("context length"), "{err}");
    // --max-tokens 0 processes the prompt and generates nothing.
    let (code, out, err) = run(&[
        "run",
        "--model",
        model,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "0",
        "--verbose",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("generated: 0 tokens"), "{out}");
    // A closed stdout (`| head -1`) ends the program quietly with status 0.
    let mut child = bin()
        .args([
            "run",
            "--model",
            model,
            "--prompt",
            "Once upon a time",
            "--max-tokens",
            "40",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // A model path that is not UTF-8 works.
    {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::env::temp_dir().join(format!("engine-min-nonutf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let odd = dir.join(std::ffi::OsStr::from_bytes(b"mod\xffel.gguf"));
        std::fs::copy(&path, &odd).expect("copy model");
        let o = bin()
            .arg("run")
            .arg("--model")
            .arg(&odd)
            .args(["--prompt", "The capital of France is", "--max-tokens", "2"])
            .output()
            .expect("spawn");
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::remove_dir_all(&dir).ok();
    }
    // Plans that do not exist are refused, not silently run on the CPU.
    let (code, _, err) = run(&[
        "run", "--model", model, "--prompt", "x", "--plan", "npu-dsp",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown plan"), "{err}");
    // profile -> plan.
    let out_file =
        std::env::temp_dir().join(format!("engine-min-prof-{}.json", std::process::id()));
    let of = out_file.to_str().expect("utf8");
    let (code, _, err) = run(&["profile", "--model", model, "--out", of, "--reps", "1"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&[
        "plan",
        "--profile",
        of,
        "--model",
        model,
        "--seq",
        "17",
        "-v",
    ]);
    assert_eq!(code, 0, "{err}");
    // The decision said plainly, then one predicted plan per matmul shape.
    assert!(out.starts_with("plan: "), "{out}");
    let per_op = out
        .lines()
        .filter(|l| l.contains(" m=17: ") && l.contains("predicted"));
    assert_eq!(per_op.count(), 5, "{out}");
    // profile -> run: with --profile the planner's plan runs by default (`--plan auto`), prints
    // the plan it executes and the time by executed plan, and still answers " Paris".
    let (code, out, err) = run(&[
        "run",
        "--model",
        model,
        "--profile",
        of,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "3",
        "--verbose",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("plan auto from"), "{out}");
    assert_eq!(out.matches(" -> ").count(), 10, "{out}");
    assert!(out.contains("prefill time share"), "{out}");
    // The decision in one plain line, and predictions checked against what ran.
    assert!(out.lines().any(|l| l.starts_with("plan: ")), "{out}");
    assert!(out.contains("predicted vs measured"), "{out}");
    assert!(out.contains(" Paris"), "{out}");
    // bench --predict: on the forced resident GPU plan, from the profile's resident paths
    // (when this machine's profile has them: OpenCL usable); a forced per-op plan is refused
    // with why; without a profile, a usage error.
    let profile_text = std::fs::read_to_string(&out_file).expect("profile");
    if profile_text.contains("\"resident\"") {
        let (code, out, err) = run(&[
            "bench",
            "--model",
            model,
            "--profile",
            of,
            "--plan",
            "gpu",
            "--predict",
            "--pp",
            "16",
            "--tg",
            "2",
            "--reps",
            "1",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("pp   gpu resident steps"), "{out}");
        assert!(out.contains("tg   gpu resident steps"), "{out}");
    }
    let (code, _, err) = run(&[
        "bench",
        "--model",
        model,
        "--profile",
        of,
        "--plan",
        "cpu",
        "--predict",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("nominal tables"), "{err}");
    let (code, _, err) = run(&["bench", "--model", model, "--plan", "gpu", "--predict"]);
    assert_eq!(code, 2);
    assert!(err.contains("--profile"), "{err}");
    // auto without a profile is a usage error.
    let (code, _, err) = run(&["run", "--model", model, "--prompt", "x", "--plan", "auto"]);
    assert_eq!(code, 2);
    assert!(err.contains("--profile"), "{err}");
    std::fs::remove_file(&out_file).ok();
}
