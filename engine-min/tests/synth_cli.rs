//! `engine-min synth` through the binary: its bad input (each a clear error with the usage or
//! run exit status, and nothing left in the output's directory), its files loading and running
//! (`run`, `bench`), and the same seed giving the same bytes on any thread count. Needs
//! `HETERO_MODEL` (backend `model`) for the tokenizer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_engine-min"))
}

fn synth(args: &[&str], out: &Path, tokenizer: &Path) -> Output {
    bin()
        .arg("synth")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--tokenizer")
        .arg(tokenizer)
        .output()
        .expect("engine-min runs")
}

/// A fresh, empty directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("synth-cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn entries(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn synth_bad_input_is_refused_and_writes_nothing() {
    let Some(model) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let d = dir("bad");
    let out = d.join("m.gguf");
    let not_gguf = d.join("tokenizer.txt");
    std::fs::write(&not_gguf, b"not a gguf").expect("write");
    // A GGUF without a tokenizer: the tiny test file's header without its tokenizer keys.
    let bare = d.join("bare.gguf");
    std::fs::write(
        &bare,
        engine_min::gguf::write(
            &[(
                "general.architecture",
                engine_min::gguf::Value::String("llama".into()),
            )],
            &[],
        ),
    )
    .expect("write");
    let layers = ["--shape", "llama-1b", "--type", "q4_0", "--layers"];
    let cases: Vec<(Vec<&str>, &Path, i32, &str)> = vec![
        (
            vec!["--shape", "llama-2b", "--type", "q4_0"],
            &model,
            2,
            "unknown shape `llama-2b`",
        ),
        (
            vec!["--shape", "llama-1b", "--type", "q3_k"],
            &model,
            2,
            "unknown type `q3_k`",
        ),
        (
            vec!["--shape", "smollm2-135m", "--type", "q4_k"],
            &model,
            2,
            "smollm2-135m cannot hold Q4_K",
        ),
        (
            [&layers[..], &["0"]].concat(),
            &model,
            2,
            "--layers 0 is outside 1..=16",
        ),
        (
            [&layers[..], &["17"]].concat(),
            &model,
            2,
            "--layers 17 is outside 1..=16",
        ),
        (
            vec!["--shape", "llama-1b", "--type", "q4_0", "--layers", "1"],
            &not_gguf,
            1,
            "cannot read the tokenizer file",
        ),
        (
            vec!["--shape", "llama-1b", "--type", "q4_0", "--layers", "1"],
            &bare,
            1,
            "holds no usable tokenizer",
        ),
    ];
    for (args, tok, code, want) in &cases {
        let o = synth(args, &out, tok);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(*code), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(
            entries(&d),
            ["bare.gguf", "tokenizer.txt"],
            "{args:?} left a file"
        );
    }
    // An unwritable output: a directory that does not exist, and a directory as the output.
    let a = ["--shape", "smollm2-135m", "--type", "q8_0", "--layers", "1"];
    let o = synth(&a, &d.join("missing/m.gguf"), &model);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot write"), "{}", stderr(&o));
    let o = synth(&a, &d, &model);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot write"), "{}", stderr(&o));
    // An existing output is kept unless --force.
    std::fs::write(&out, b"keep me").expect("write");
    let o = synth(&a, &out, &model);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("exists (--force replaces it)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&out).expect("read"), b"keep me");
    assert_eq!(entries(&d), ["bare.gguf", "m.gguf", "tokenizer.txt"]);
}

#[test]
fn synth_files_load_run_and_do_not_depend_on_threads() {
    let Some(model) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let d = dir("run");
    let a = [
        "--shape",
        "smollm2-135m",
        "--type",
        "q4_0",
        "--layers",
        "1",
        "--seed",
        "5",
    ];
    let (one, two) = (d.join("one.gguf"), d.join("two.gguf"));
    for (out, threads) in [(&one, "1"), (&two, "2")] {
        let o = synth(&[&a[..], &["--threads", threads]].concat(), out, &model);
        assert!(o.status.success(), "{}", stderr(&o));
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(s.contains("not text"), "{s}");
    }
    assert_eq!(
        std::fs::read(&one).expect("read"),
        std::fs::read(&two).expect("read"),
        "the same seed gives the same bytes on 1 and 2 threads"
    );
    assert_eq!(
        entries(&d),
        ["one.gguf", "two.gguf"],
        "no temporary file left"
    );
    // --force replaces; another seed gives other weights.
    let o = synth(
        &[&a[..6], &["--seed", "6", "--force"]].concat(),
        &two,
        &model,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_ne!(std::fs::read(&one).unwrap(), std::fs::read(&two).unwrap());
    // The file loads with every check of model.rs and runs end to end.
    let m = engine_min::model::Model::load(&one).expect("synth file loads");
    assert_eq!(
        (
            m.config.d_model,
            m.config.n_layer,
            m.config.n_head,
            m.config.n_kv_head,
            m.config.d_ff
        ),
        (576, 1, 9, 3, 1536)
    );
    assert!(m.tied_output);
    let o = bin()
        .args([
            "run",
            "--prompt",
            "Hello there",
            "--max-tokens",
            "4",
            "--threads",
            "2",
            "--model",
        ])
        .arg(&one)
        .output()
        .expect("run");
    assert!(o.status.success(), "run: {}", stderr(&o));
    let o = bin()
        .args([
            "bench",
            "--pp",
            "8",
            "--tg",
            "2",
            "--reps",
            "1",
            "--threads",
            "2",
            "--model",
        ])
        .arg(&one)
        .output()
        .expect("bench");
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "bench: {}", stderr(&o));
    assert!(s.contains("first token") && s.contains("peak RSS"), "{s}");
    assert!(s.contains("pp8:") && s.contains("tg2:"), "{s}");
}
