//! Issue 17's hostile inputs through the `engine-min` binary, as a new user would meet them:
//! every row of the issue's table and of the GGUF robustness tests, run on a mutated copy of
//! SmolLM2 (backend name `model`). Each case's exit status and the words of its message are
//! asserted; with `ENGINE_MIN_BAD_INPUT_TABLE=FILE` the cases are also written to FILE as the
//! markdown table of the README's *Bad input* section (input, command, exit, first line of the
//! message as printed), so the table is regenerated, not retyped:
//!
//! ```sh
//! ENGINE_MIN_BAD_INPUT_TABLE=/tmp/table.md cargo test --profile ci -p engine-min --test bad_input
//! ```

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
mod synth;

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Exit status.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Code(c) => write!(f, "{c}"),
            End::Signal(7) => f.write_str("SIGBUS"),
            End::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

struct Outcome {
    end: End,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Longest a case may take: a hang is a failure, not a stuck suite.
const LIMIT: Duration = Duration::from_secs(180);

/// Waits for `child` (its output piped), killing it after [`LIMIT`].
fn finish(child: std::process::Child, t0: Instant, what: &str) -> Outcome {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(LIMIT) {
        Ok(r) => r.expect("wait"),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped (its
            // waiter is still blocked); no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{what}: still running after {LIMIT:?}");
        }
    };
    let end = match (out.status.code(), out.status.signal()) {
        (Some(c), _) => End::Code(c),
        (None, Some(s)) => End::Signal(s),
        _ => End::Code(-1),
    };
    Outcome {
        end,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: t0.elapsed(),
    }
}

/// The cases run so far, as table rows, and the paths to shorten in them.
struct Table {
    rows: Vec<[String; 4]>,
    dir: PathBuf,
    model: PathBuf,
}

impl Table {
    fn new(model: PathBuf) -> Self {
        let dir = std::env::temp_dir().join(format!("engine-min-bad-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self {
            rows: Vec::new(),
            dir,
            model,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `text` with the temp dir as `DIR` and the model as `$HETERO_MODEL`.
    fn short(&self, text: &str) -> String {
        text.replace(&self.dir.display().to_string(), "DIR")
            .replace(&self.model.display().to_string(), "$HETERO_MODEL")
    }

    /// Writes `model` (bytes) as `DIR/name` and returns its path.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write a mutated model");
        p
    }

    /// Runs `engine-min args` (with `env`), records the row and returns the outcome.
    fn run(&mut self, input: &str, args: &[&OsStr], env: &[(&str, &str)]) -> Outcome {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_engine-min"));
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let t0 = Instant::now();
        let child = cmd.spawn().expect("spawn engine-min");
        let o = finish(child, t0, input);
        self.record(input, args, env, &o);
        o
    }

    fn record(&mut self, input: &str, args: &[&OsStr], env: &[(&str, &str)], o: &Outcome) {
        let mut command: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        command.push("engine-min".into());
        command.extend(args.iter().map(|a| {
            let s = self.short(&a.to_string_lossy());
            match s.len() {
                n if n > 60 => format!("<{n} bytes>"),
                _ if s.contains(' ') || s.is_empty() => format!("\"{s}\""),
                _ => s,
            }
        }));
        let message = match o.end {
            End::Code(0) => match o.stdout.split("\n---\n").next() {
                Some(text) if !text.trim().is_empty() => {
                    format!("prints {:?}…", text.chars().take(40).collect::<String>())
                }
                _ => "(no text)".into(),
            },
            _ => {
                let mut lines = o.stderr.lines();
                let first = |l: &&str| l.starts_with("engine-min: ") || l.starts_with("error:");
                match o.stderr.lines().find(first) {
                    Some(l) => l.trim_start_matches("engine-min: ").to_string(),
                    // A panic: its message is the line after "panicked at".
                    None => match lines.position(|l| l.contains("panicked at")) {
                        Some(_) => format!("panic: {}", lines.next().unwrap_or("")),
                        None => "(no message)".into(),
                    },
                }
            }
        };
        println!(
            "{input}: {} in {:.2} s: {message}",
            o.end,
            o.took.as_secs_f64()
        );
        self.rows.push([
            input.to_string(),
            command.join(" "),
            format!("{}", o.end),
            self.short(&message),
        ]);
    }

    /// Writes the markdown table where `ENGINE_MIN_BAD_INPUT_TABLE` says.
    fn write(&self) {
        let Some(path) = std::env::var_os("ENGINE_MIN_BAD_INPUT_TABLE") else {
            return;
        };
        let cell = |s: &str| s.replace('|', "\\|");
        let mut md = String::from("| input | command | exit | message |\n|---|---|---|---|\n");
        for [input, cmd, end, msg] in &self.rows {
            md += &format!(
                "| {} | `{}` | {end} | ``{}`` |\n",
                cell(input),
                cell(cmd),
                cell(msg)
            );
        }
        std::fs::write(&path, md).expect("write the table");
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// `o` ended as `end` and its stderr (or, for a success, stdout) holds each of `want`.
#[track_caller]
fn expect(o: &Outcome, end: End, want: &[&str]) {
    let text = if end == End::Code(0) {
        &o.stdout
    } else {
        &o.stderr
    };
    assert_eq!(o.end, end, "stderr: {}\nstdout: {}", o.stderr, o.stdout);
    for w in want {
        assert!(text.contains(w), "missing {w:?} in: {text}");
    }
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// `run --model PATH --prompt TEXT --max-tokens 2 --verbose EXTRA...` (verbose: the text
/// ends at a `---` line, and the model line says how the file was loaded).
fn run_args<'a>(model: &'a Path, prompt: &'a str, extra: &[&'a str]) -> Vec<&'a OsStr> {
    let mut v = vec![
        os("run"),
        os("--model"),
        model.as_os_str(),
        os("--prompt"),
        os(prompt),
        os("--max-tokens"),
        os("2"),
        os("--verbose"),
    ];
    v.extend(extra.iter().map(|s| os(s)));
    v
}

const PROMPT: &str = "The capital of France is";

#[test]
fn every_hostile_input_ends_in_a_clear_error() {
    let Some(model) = hetero_tests::require("model", common::model_path()) else {
        return;
    };
    let real = std::fs::read(&model).expect("read the model");
    let mut t = Table::new(model.clone());
    let code = |c| End::Code(c);

    // --- Bad models (issue 17's table): refused at load with the key or tensor named.
    for (name, want) in [
        ("block_count = 2^32-1", "`llama.block_count` = 4294967295"),
        ("block_count = 0", "`llama.block_count` = 0"),
        (
            "RMS-norm epsilon NaN",
            "`llama.attention.layer_norm_rms_epsilon` = NaN",
        ),
        (
            "RMS-norm epsilon -1",
            "`llama.attention.layer_norm_rms_epsilon` = -1",
        ),
        ("RoPE base 0", "`llama.rope.freq_base` = 0"),
        ("RoPE base NaN", "`llama.rope.freq_base` = NaN"),
        (
            "a weight retyped to BF16 with the same bytes",
            "`blk.0.attn_q.weight` (BF16",
        ),
        (
            "a norm retyped F32 -> BF16 with the same bytes",
            "`blk.0.attn_norm.weight` (BF16 [576]) takes 1152 bytes",
        ),
        (
            "a NaN inside output_norm",
            "`output_norm.weight` element 7 is NaN",
        ),
        ("two tensors overlapping", "runs into tensor"),
        (
            "head_count not dividing the width",
            "`llama.attention.head_count` = 7",
        ),
        ("head_count_kv 0", "`llama.attention.head_count_kv` = 0"),
        (
            "vocab_size not matching the embedding",
            "`llama.vocab_size` = 5",
        ),
    ] {
        let p = t.file("mutated.gguf", &synth::mutate(&real, name));
        let o = t.run(name, &run_args(&p, PROMPT, &[]), &[]);
        expect(&o, code(1), &[want]);
    }

    // --- Non-finite values at run time: a NaN or an infinity in a quantized weight's scale
    // (the loader does not read the weights) stops the run, naming where they first appear.
    for (input, tensor, bits, want) in [
        (
            "a NaN in a scale of `blk.12.ffn_down`",
            "blk.12.ffn_down.weight",
            synth::F16_NAN,
            "non-finite values first appear in layer 12 after ffn_down",
        ),
        (
            "an infinity in a scale of `blk.3.attn_v`",
            "blk.3.attn_v.weight",
            synth::F16_INF,
            "non-finite values first appear in layer 3 after attn_v",
        ),
    ] {
        let mut b = real.clone();
        synth::poke_scale(&mut b, tensor, 0, bits);
        let p = t.file("nan.gguf", &b);
        let o = t.run(input, &run_args(&p, PROMPT, &[]), &[]);
        expect(&o, code(1), &[want]);
        if tensor.contains("ffn_down") {
            let pp = [
                os("bench"),
                os("--model"),
                p.as_os_str(),
                os("--pp"),
                os("8"),
                os("--tg"),
                os("4"),
                os("--reps"),
                os("1"),
            ];
            let o = t.run(input, &pp, &[]);
            expect(&o, code(1), &[want]);
            let text = t.file(
                "text.txt",
                "Paris is the capital of France. ".repeat(40).as_bytes(),
            );
            let ppl = [
                os("perplexity"),
                os("--model"),
                p.as_os_str(),
                os("--file"),
                text.as_os_str(),
                os("--ctx"),
                os("64"),
                os("--chunks"),
                os("1"),
            ];
            let o = t.run(input, &ppl, &[]);
            expect(&o, code(1), &[want]);
        }
    }
    {
        // Token 28's embedding row; SmolLM2 ties the output head to it, so logit 28 is NaN.
        let mut b = real.clone();
        synth::poke_scale(&mut b, "token_embd.weight", 28 * 576 / 32, synth::F16_NAN);
        let p = t.file("nan-embd.gguf", &b);
        let o = t.run(
            "a NaN in token 28's embedding row (tied output head)",
            &run_args(&p, PROMPT, &[]),
            &[],
        );
        expect(
            &o,
            code(1),
            &[
                "non-finite values first appear in the output head",
                "element 28",
            ],
        );
    }

    // --- Sizes: the memory budget, checked before anything is allocated.
    let mut claim = real.clone();
    synth::set_number(&mut claim, "llama.context_length", 1_000_000.0);
    let claim = t.file("ctx1m.gguf", &claim);
    let o = t.run(
        "a context length of 1,000,000 claimed by the model",
        &run_args(&claim, PROMPT, &[]),
        &[],
    );
    expect(&o, code(0), &[" Paris"]);
    let budget = [
        "KV cache and work buffers needs ",
        " GiB (",
        "bytes), limit ",
    ];
    let o = t.run(
        // An f32 cache (43 GiB): over any machine's memory here (f16 would be 21.7 GiB).
        "`--ctx 1000000 --kv-type f32` on that model",
        &run_args(&claim, PROMPT, &["--ctx", "1000000", "--kv-type", "f32"]),
        &[],
    );
    expect(&o, code(1), &budget);
    let o = t.run(
        "`--ctx 1000000` on SmolLM2 (8192)",
        &run_args(&model, PROMPT, &["--ctx", "1000000"]),
        &[],
    );
    expect(
        &o,
        code(2),
        &["--ctx 1000000 exceeds the model's context length 8192"],
    );
    let bench_pp = |m: &Path| -> Vec<OsString> {
        ["bench", "--model"]
            .iter()
            .map(OsString::from)
            .chain([m.as_os_str().to_owned()])
            .chain(["--pp", "100000"].iter().map(OsString::from))
            .collect()
    };
    // The whole prompt as one step (--ubatch 100000: work buffers for 100,000 rows) and an f32
    // cache: over the budget. (With the default 512-row steps the run fits and would prefill
    // 100,000 tokens: a workload, not a hostile input.)
    let mut a = bench_pp(&claim);
    a.extend(["--ubatch", "100000", "--kv-type", "f32"].map(OsString::from));
    let o = t.run(
        "`bench --pp 100000 --ubatch 100000 --kv-type f32` on the 1,000,000-position model",
        &a.iter().map(OsString::as_os_str).collect::<Vec<_>>(),
        &[],
    );
    expect(&o, code(1), &budget);
    let a = bench_pp(&model);
    let o = t.run(
        "`bench --pp 100000` on SmolLM2",
        &a.iter().map(OsString::as_os_str).collect::<Vec<_>>(),
        &[],
    );
    expect(
        &o,
        code(2),
        &["--pp 100000 exceeds the model's context length 8192"],
    );
    let text = t.file(
        "text.txt",
        "Paris is the capital of France. ".repeat(40).as_bytes(),
    );
    let o = t.run(
        "`perplexity --ctx 1000000 --kv-type f32` on the 1,000,000-position model",
        &[
            os("perplexity"),
            os("--model"),
            claim.as_os_str(),
            os("--file"),
            text.as_os_str(),
            os("--ctx"),
            os("1000000"),
            os("--kv-type"),
            os("f32"),
        ],
        &[],
    );
    expect(&o, code(1), &budget);
    let o = t.run(
        "`--mem-limit 100M` with `--ctx 8192`",
        &run_args(&model, PROMPT, &["--ctx", "8192", "--mem-limit", "100M"]),
        &[],
    );
    expect(
        &o,
        code(1),
        &[
            "KV cache and work buffers needs ",
            "MiB",
            "limit 100.00 MiB",
        ],
    );
    let o = t.run(
        "`--no-mmap --mem-limit 50M` (the file is 98 MB)",
        &run_args(&model, PROMPT, &["--no-mmap", "--mem-limit", "50M"]),
        &[],
    );
    expect(
        &o,
        code(1),
        &["into memory: model file needs ", "limit 50.00 MiB"],
    );
    let o = t.run(
        "`--mem-limit 4X`",
        &run_args(&model, PROMPT, &["--mem-limit", "4X"]),
        &[],
    );
    expect(&o, code(2), &["`4X` is not a size"]);
    {
        let w = t.path("agents.json");
        let gen = [
            os("agents"),
            os("gen-trace"),
            os("--seed"),
            os("1"),
            os("--agents"),
            os("8"),
            os("--out"),
            w.as_os_str(),
        ];
        let o = t.run("(an agents workload of 8 agents)", &gen, &[]);
        expect(&o, code(0), &["wrote"]);
        t.rows.pop();
        let o = t.run(
            "8 agents with 8192-position caches under `--mem-limit 1G`",
            &[
                os("agents"),
                os("run"),
                os("--workload"),
                w.as_os_str(),
                os("--model"),
                model.as_os_str(),
                os("--ctx"),
                os("8192"),
                os("--mem-limit"),
                os("1G"),
            ],
            &[],
        );
        expect(
            &o,
            code(1),
            &["KV cache and work buffers needs ", "limit 1.00 GiB"],
        );
    }

    // --- Paths that are not regular files are refused before anything can block.
    let fifo = t.path("model.fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (input, path, want) in [
        (
            "a FIFO as the model path",
            fifo.clone(),
            "it is a FIFO (named pipe)",
        ),
        (
            "a directory as the model path",
            t.dir.clone(),
            "it is a directory",
        ),
        (
            "`/dev/null` as the model path",
            PathBuf::from("/dev/null"),
            "it is a character device",
        ),
    ] {
        for extra in [&[][..], &["--no-mmap"]] {
            let o = t.run(input, &run_args(&path, PROMPT, extra), &[]);
            expect(&o, code(1), &[want, "not a regular file"]);
        }
    }

    // --- A one-word prompt of 130,000 characters: linear-time tokenizer, then "too long".
    let mut x = 12345u64;
    let word: String = (0..130_000)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            char::from(b'a' + ((x >> 33) % 26) as u8)
        })
        .collect();
    let o = t.run(
        "a one-word prompt of 130,000 characters",
        &run_args(&model, &word, &[]),
        &[],
    );
    expect(
        &o,
        code(1),
        &["the prompt has ", "tokens but the context holds 2048"],
    );
    assert!(o.took < Duration::from_secs(20), "{:?}", o.took);

    // --- Arguments.
    let odd = OsStr::from_bytes(b"caf\xe9");
    let o = t.run(
        "a non-UTF-8 byte in `--prompt`",
        &[
            os("run"),
            os("--model"),
            model.as_os_str(),
            os("--prompt"),
            odd,
        ],
        &[],
    );
    expect(&o, code(2), &["invalid UTF-8"]);
    let odd_model = t.dir.join(OsStr::from_bytes(b"mod\xffel.gguf"));
    std::fs::copy(&model, &odd_model).expect("copy");
    let o = t.run(
        "a non-UTF-8 byte in the model path",
        &run_args(&odd_model, PROMPT, &[]),
        &[],
    );
    expect(&o, code(0), &[" Paris"]);
    std::fs::remove_file(&odd_model).ok();
    let o = t.run(
        "`--temperature 1e-39` (1/T overflows)",
        &run_args(
            &model,
            PROMPT,
            &["--temperature", "1e-39", "--top-p", "0.9"],
        ),
        &[],
    );
    let greedy = t.run("the same, greedy", &run_args(&model, PROMPT, &[]), &[]);
    t.rows.pop();
    expect(&o, code(0), &[" Paris"]);
    assert_eq!(
        o.stdout.split("\n---\n").next(),
        greedy.stdout.split("\n---\n").next(),
        "an underflowing temperature is greedy"
    );
    {
        // `| head -1`: stdout closed before the program writes.
        let prof = t.file(
            "hand.json",
            br#"{"device": "hand", "backends": [
                {"backend": "cpu", "points": [{"k": 576, "n": 1536, "m": 1, "us": 100.0},
                                              {"k": 576, "n": 1536, "m": 128, "us": 4000.0}]}]}"#,
        );
        let args = [
            os("plan"),
            os("--profile"),
            prof.as_os_str(),
            os("--model"),
            model.as_os_str(),
        ];
        let mut child = Command::new(env!("CARGO_BIN_EXE_engine-min"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let o = finish(child, Instant::now(), "plan | head");
        t.record(
            "`engine-min plan … | head -1` (stdout closed)",
            &args,
            &[],
            &o,
        );
        expect(&o, code(0), &[]);
    }
    let o = t.run(
        "`profile --out /nonexistent/x`",
        &[
            os("profile"),
            os("--model"),
            model.as_os_str(),
            os("--out"),
            os("/nonexistent/x"),
        ],
        &[],
    );
    expect(&o, code(1), &["cannot write /nonexistent/x"]);
    assert!(o.took < Duration::from_secs(10), "checked before measuring");
    let (dir, out) = (t.dir.clone(), t.path("p.json"));
    let o = t.run(
        "`profile --no-mmap` with a directory as the model",
        &[
            os("profile"),
            os("--model"),
            dir.as_os_str(),
            os("--no-mmap"),
            os("--out"),
            out.as_os_str(),
        ],
        &[],
    );
    expect(&o, code(1), &["it is a directory"]);
    // Every other subcommand that loads a model takes --no-mmap too (and reads through it).
    // (The profile and the workload written above are read before the model.)
    let (text, prof, work) = (
        t.file("text.txt", b"some text"),
        t.path("hand.json"),
        t.path("agents.json"),
    );
    for args in [
        &["bench", "--model", "DIR", "--no-mmap"][..],
        &[
            "perplexity",
            "--model",
            "DIR",
            "--no-mmap",
            "--file",
            "TEXT",
        ],
        &["plan", "--profile", "PROF", "--model", "DIR", "--no-mmap"],
        &[
            "agents",
            "run",
            "--workload",
            "WORK",
            "--model",
            "DIR",
            "--no-mmap",
        ],
    ] {
        let args: Vec<&OsStr> = args
            .iter()
            .map(|a| match *a {
                "DIR" => dir.as_os_str(),
                "TEXT" => text.as_os_str(),
                "PROF" => prof.as_os_str(),
                "WORK" => work.as_os_str(),
                a => os(a),
            })
            .collect();
        let o = t.run("--no-mmap", &args, &[]);
        t.rows.pop();
        assert_eq!(o.end, code(1), "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("it is a directory"),
            "{args:?}: {}",
            o.stderr
        );
    }

    // --- On the GPU (OpenCL; PoCL here): the guard on both GPU paths, the device's own
    // memory plan on the resident one.
    let gpu = engine_min::backend::gpu::GpuBackend::open().map(drop);
    let has_gpu = hetero_tests::require("opencl", gpu).is_some();
    if has_gpu {
        let mut b = real.clone();
        synth::poke_scale(&mut b, "blk.12.ffn_down.weight", 0, synth::F16_NAN);
        let p = t.file("nan.gguf", &b);
        let input = "a NaN in a scale of `blk.12.ffn_down`";
        let o = t.run(input, &run_args(&p, PROMPT, &["--plan", "gpu"]), &[]);
        expect(
            &o,
            code(1),
            &["non-finite logits (position 4, token 0 is NaN) from the resident GPU decoder"],
        );
        let per_matmul = ["--plan", "gpu", "--gpu-path", "per-matmul"];
        let o = t.run(input, &run_args(&p, PROMPT, &per_matmul), &[]);
        expect(
            &o,
            code(1),
            &["non-finite values first appear in layer 12 after ffn_down"],
        );
        let o = t.run(
            "`--ctx 1000000 --plan gpu` on the 1,000,000-position model",
            &run_args(&claim, PROMPT, &["--ctx", "1000000", "--plan", "gpu"]),
            &[],
        );
        // The f16 cache (the default): half the f32 figure.
        expect(&o, code(1), &["KV cache 21972.7 MiB"]);
    }

    // --- Threads the system refuses: a 1 TiB minimum stack makes every Rust thread spawn fail.
    let no_threads = [("RUST_MIN_STACK", "1099511627776")];
    if has_gpu {
        let o = t.run(
            "thread spawn refused (the GPU plan's helper thread)",
            &run_args(
                &model,
                PROMPT,
                &[
                    "--plan",
                    "gpu",
                    "--gpu-path",
                    "per-matmul",
                    "--threads",
                    "1",
                ],
            ),
            &no_threads,
        );
        expect(&o, code(1), &["cannot start a helper thread"]);
    }
    let o = t.run(
        "thread spawn refused (the CPU pool's workers)",
        &run_args(&model, PROMPT, &["--threads", "2"]),
        &no_threads,
    );
    expect(
        &o,
        code(1),
        &["thread pool: could not start worker thread 1 of a 2-thread pool"],
    );

    // --- The model file truncated while the program runs.
    for (input, extra, end) in [
        (
            "the model file truncated while running (mapped)",
            &[][..],
            End::Signal(libc::SIGBUS),
        ),
        (
            "the model file truncated while running, `--no-mmap`",
            &["--no-mmap"][..],
            code(0),
        ),
    ] {
        let copy = t.file("victim.gguf", &real);
        let mut args = run_args(&copy, "Once upon a time", extra);
        args[6] = os("200");
        let mut child = Command::new(env!("CARGO_BIN_EXE_engine-min"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        // The first generated bytes: the model is loaded and running.
        let mut first = [0u8; 1];
        std::io::Read::read_exact(child.stdout.as_mut().expect("piped"), &mut first)
            .expect("the run prints text");
        std::fs::File::options()
            .write(true)
            .open(&copy)
            .and_then(|f| f.set_len(0))
            .expect("truncate");
        let o = finish(child, Instant::now(), input);
        t.record(input, &args, &[], &o);
        assert_eq!(o.end, end, "{input}: {}", o.stderr);
        if end == code(0) {
            assert!(o.stdout.contains("(read into memory)"), "{}", o.stdout);
        }
    }

    // --- The GGUF robustness cases, through the binary.
    let mut corrupt = |input: &str, bytes: Vec<u8>, want: &str| {
        let p = t.file("corrupt.gguf", &bytes);
        let o = t.run(input, &run_args(&p, PROMPT, &[]), &[]);
        expect(&o, code(1), &[want]);
    };
    corrupt(
        "an empty file",
        Vec::new(),
        "truncated while reading magic at byte 0",
    );
    corrupt(
        "the file cut in half",
        real[..real.len() / 2].to_vec(),
        "lies outside the",
    );
    let patched = |at: usize, v: &[u8]| {
        let mut b = real.clone();
        b[at..at + v.len()].copy_from_slice(v);
        b
    };
    corrupt("wrong magic", patched(0, b"GGML"), "not a GGUF file");
    corrupt(
        "version 9",
        patched(4, &9u32.to_le_bytes()),
        "unsupported GGUF version 9",
    );
    corrupt(
        "tensor count 2^64-1",
        patched(8, &u64::MAX.to_le_bytes()),
        "implausible tensor count 18446744073709551615",
    );
    corrupt(
        "metadata count 2^60",
        patched(16, &(1u64 << 60).to_le_bytes()),
        "implausible metadata entry count 1152921504606846976",
    );
    corrupt(
        "first key length 2^64-4",
        patched(24, &(u64::MAX - 3).to_le_bytes()),
        "implausible",
    );
    let mut wide = real.clone();
    synth::retype(&mut wide, "blk.12.attn_norm.weight", 28);
    corrupt(
        "a norm widened F32 -> F64 into its neighbour",
        wide,
        "runs into tensor",
    );
    let mut narrow = real.clone();
    synth::retype(&mut narrow, "blk.12.attn_norm.weight", 1);
    corrupt(
        "a norm narrowed F32 -> F16",
        narrow,
        "takes 1152 bytes but 2304 bytes lie before",
    );
    let mut stray = real.clone();
    stray.extend_from_slice(&[0; 64]);
    corrupt(
        "64 stray bytes after the last tensor",
        stray,
        "`output_norm.weight` (F32 [576]) takes 2304 bytes but 2368 bytes lie before",
    );
    t.write();
}
