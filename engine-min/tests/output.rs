//! What the commands print: the short default output, `--verbose` (any count), a stderr that
//! is not a terminal, a stdout closed early, and `run`'s predicted-against-measured report
//! (every reported op class carries a prediction; each phase under its own heading). Model
//! parts need `HETERO_MODEL` (backend name `model`).

use std::process::{Command, Stdio};

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

/// The model's five matmul shapes (SmolLM2-135M: width 576, kv 192, ffn 1536, vocab 49152).
const SHAPES: [(u32, u32); 5] = [
    (576, 192),
    (576, 576),
    (576, 1536),
    (1536, 576),
    (576, 49152),
];

/// A CPU-only profile with a decode curve (1 and 4 rows) and a prefill curve (8 and 128 rows)
/// for every shape: under it `--plan auto` runs everything on the CPU, where Q/K/V and
/// gate/up run as grouped jobs (the path whose times once landed in another class's entry
/// with no prediction).
fn cpu_profile() -> String {
    let points = |ms: &[u32]| {
        let mut v = Vec::new();
        for (k, n) in SHAPES {
            for &m in ms {
                // Any positive cost growing with the work; only its being positive matters.
                let us = 1.0 + (k as f64 * n as f64 * m as f64) / 1e5;
                v.push(format!(
                    r#"{{ "k": {k}, "n": {n}, "m": {m}, "us": {us:.1} }}"#
                ));
            }
        }
        v.join(", ")
    };
    format!(
        r#"{{ "backends": [ {{ "backend": "cpu", "paths": [
            {{ "name": "decode", "phase": "decode", "points": [ {} ] }},
            {{ "name": "prefill", "phase": "prefill", "points": [ {} ] }} ] }} ] }}"#,
        points(&[1, 4]),
        points(&[8, 128])
    )
}

/// The report's rows under each heading: `(heading phase, row)`.
fn report_rows(out: &str) -> Vec<(String, String)> {
    let mut phase = None;
    let mut rows = Vec::new();
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("predicted vs measured matmul time, ") {
            phase = rest.split_whitespace().next().map(str::to_string);
            continue;
        }
        if line.contains(" calls: predicted ") {
            rows.push((
                phase.clone().expect("a row under a heading"),
                line.to_string(),
            ));
        }
    }
    rows
}

fn predicted_us(row: &str) -> f64 {
    let after = row.split("predicted").nth(1).expect("predicted");
    after
        .split_whitespace()
        .next()
        .and_then(|v| v.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no number in {row}"))
}

#[test]
fn every_reported_class_has_a_prediction() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let model = path.to_str().expect("utf8");
    let dir = std::env::temp_dir().join(format!("engine-min-output-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let prof = dir.join("cpu.json");
    std::fs::write(&prof, cpu_profile()).expect("write profile");
    let prof = prof.to_str().expect("utf8");
    // A short prompt (one prefill chunk of 5 rows, the LM head on one row: the decode
    // curves'), and a long one of 130 tokens: a chunk of 128 rows, then one of 2 rows, which
    // the decode table plans.
    let long = format!("The capital of France is{}", " Paris".repeat(125));
    for (name, prompt) in [("short", "The capital of France is"), ("long", &long)] {
        let (code, out, err) = run(&[
            "run",
            "-v",
            "--model",
            model,
            "--profile",
            prof,
            "--prompt",
            prompt,
            "--max-tokens",
            "3",
            "--threads",
            "2",
        ]);
        assert_eq!(code, 0, "{name}: {err}");
        let rows = report_rows(&out);
        assert!(!rows.is_empty(), "{name}: no report: {out}");
        for (phase, row) in &rows {
            assert!(predicted_us(row) > 0.0, "{name}: {row}");
            assert!(!row.contains("no prediction"), "{name}: {row}");
            assert!(["prefill", "decode"].contains(&phase.as_str()), "{row}");
        }
        // Each class once per phase, every class of the model reported in decode (each runs
        // there: 2 decode steps), and the prefill heading holds the layer classes.
        for phase in ["prefill", "decode"] {
            let mut shapes: Vec<&str> = rows
                .iter()
                .filter(|r| r.0 == phase)
                .map(|r| r.1.split(" calls").next().expect("row"))
                .collect();
            let n = shapes.len();
            shapes.sort_unstable();
            shapes.dedup();
            assert_eq!(
                shapes.len(),
                n,
                "{name}: a class twice under {phase}: {out}"
            );
        }
        let decode = rows.iter().filter(|r| r.0 == "decode").count();
        assert_eq!(decode, 5, "{name}: {out}");
        let prefill = rows.iter().filter(|r| r.0 == "prefill").count();
        assert_eq!(prefill, 4, "{name}: the layer classes in prefill: {out}");
        // The statistics count only predicted classes, one line per phase.
        assert_eq!(out.matches("median |error|").count(), 2, "{name}: {out}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn default_output_is_short_and_verbose_adds_detail() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let model = path.to_str().expect("utf8");
    let args = |extra: &[&'static str]| {
        let mut v = vec![
            "run",
            "--model",
            model,
            "--prompt",
            "The capital of France is",
            "--max-tokens",
            "4",
        ];
        v.extend_from_slice(extra);
        v
    };
    let (code, out, err) = run(&args(&[]));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // The text, then prefill/decode speed, time to first token, time share.
    assert!(lines[0].starts_with(" Paris"), "{out}");
    let tail = &lines[lines.len() - 3..];
    assert!(
        tail[0].starts_with("prefill: ") && tail[0].contains("decode: "),
        "{out}"
    );
    assert!(tail[1].starts_with("time to first token: "), "{out}");
    assert!(tail[2].starts_with("time share: "), "{out}");
    assert!(!out.contains("model: "), "{out}");
    // --verbose once, twice, three times: the same text and the details; no panic.
    for v in [
        &["-v"][..],
        &["-vv"],
        &["--verbose", "--verbose"],
        &["-vvv"],
    ] {
        let (code, vout, err) = run(&args(v));
        assert_eq!(code, 0, "{v:?}: {err}");
        assert!(!err.contains("panicked"), "{v:?}: {err}");
        assert!(vout.starts_with(" Paris"), "{v:?}: {vout}");
        assert!(vout.contains("model: 30 layers"), "{v:?}: {vout}");
        assert!(vout.contains("prefill time share"), "{v:?}: {vout}");
    }
}

#[test]
fn verbose_any_count_keeps_errors_and_exit_codes() {
    // Bad input gives the same message and status with and without -v, -vv.
    for v in [&[][..], &["-v"], &["-vv"], &["-v", "-v", "-v"]] {
        let mut a = vec!["run", "--model", "/nonexistent/model.gguf", "--prompt", "x"];
        a.extend_from_slice(v);
        let (code, out, err) = run(&a);
        assert_eq!(code, 1, "{v:?}: {err}");
        assert!(out.is_empty(), "{v:?}: {out}");
        assert!(err.contains("cannot read model file"), "{v:?}: {err}");
        assert!(!err.contains("panicked"), "{v:?}: {err}");
        let mut a = vec!["run", "--temperature", "-1", "--prompt", "x"];
        a.extend_from_slice(v);
        let (code, _, err) = run(&a);
        assert_eq!(code, 2, "{v:?}: {err}");
    }
    // The verbose flag goes before or after the subcommand.
    let (code, _, err) = run(&["-vv", "plan", "--profile", "/nonexistent.json"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot read profile"), "{err}");
}

#[test]
fn profile_progress_on_a_pipe_and_a_closed_stdout() {
    let Some(path) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let model = path.to_str().expect("utf8");
    let file =
        std::env::temp_dir().join(format!("engine-min-out-prof-{}.json", std::process::id()));
    let of = file.to_str().expect("utf8");
    let quick = [
        "profile", "--model", model, "--out", of, "--reps", "1", "--budget", "1", "--no-gpu",
        "--no-npu",
    ];
    // stderr is a pipe here, not a terminal: plain lines, one per step, no escape codes.
    let (code, out, err) = run(&quick);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let steps: Vec<&str> = err.lines().filter(|l| l.contains("profile ")).collect();
    assert!(steps.len() >= 2, "{err}");
    assert!(steps.len() <= 8, "one line per step: {err}");
    // Start-up work is a step of its own, not a silent gap before the first curve.
    assert!(err.contains("profile cpu weights prepared in "), "{err}");
    assert!(out.starts_with("wrote "), "{out}");
    // (Every point with --verbose: the progress module's unit tests.)
    // A stdout closed while the progress runs: quiet end, status as today (0), no panic.
    let child = bin()
        .args(quick)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut child = child;
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_file(&file).ok();
}
