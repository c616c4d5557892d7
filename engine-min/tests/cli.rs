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
    assert!(err.contains("unknown command"), "{err}");
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
    let (code, out, err) = run(&["plan", "--profile", of, "--model", model, "--seq", "17"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("predicted").count(), 5, "{out}");
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
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("plan auto from"), "{out}");
    assert_eq!(out.matches("-> runs").count(), 10, "{out}");
    assert_eq!(
        out.matches("layer placement of non-matmul ops").count(),
        2,
        "{out}"
    );
    assert!(out.contains("auto: matmul time by executed plan"), "{out}");
    assert!(out.contains(" Paris"), "{out}");
    // auto without a profile is a usage error.
    let (code, _, err) = run(&["run", "--model", model, "--prompt", "x", "--plan", "auto"]);
    assert_eq!(code, 2);
    assert!(err.contains("--profile"), "{err}");
    std::fs::remove_file(&out_file).ok();
}
