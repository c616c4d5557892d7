//! Issue 17 (hostile input), the rows of its table that the loader, the tokenizer, the
//! sampler and the memory budget own: each bad model, path or setting ends in a typed error
//! that names the key, tensor or value (or, for the sampler, in the greedy token), never in a
//! hang, an abort or silent empty output. Every model mutation runs on a tiny synthetic model
//! and, when `HETERO_MODEL` is set (backend name `model`), on a mutated copy of the real one.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use engine_min::gguf::{GgmlType, GgufError, GgufFile, OpenError};
use engine_min::limits::{self, BudgetError, MemoryBudget};
use engine_min::model::{LoadOptions, Model, ModelError};
use engine_min::sample::{argmax, SampleError, Sampler, SamplerOptions};

mod common;
mod synth;

static TINY: LazyLock<Vec<u8>> = LazyLock::new(synth::tiny_llama);

static REAL: LazyLock<Option<Vec<u8>>> = LazyLock::new(|| {
    let path = hetero_tests::require("model", common::model_path())?;
    Some(std::fs::read(path).expect("read the model"))
});

/// The tiny model, and the real one when present.
fn bases() -> Vec<(&'static str, &'static [u8])> {
    let mut v: Vec<(&str, &[u8])> = vec![("tiny", TINY.as_slice())];
    if let Some(real) = REAL.as_ref() {
        v.push(("SmolLM2", real.as_slice()));
    }
    v
}

fn mutated(base: &[u8], name: &str) -> Vec<u8> {
    synth::mutate(base, name)
}

/// Loads `bytes`, which must fail; returns the error and its message.
fn load_err(bytes: &[u8]) -> (ModelError, String) {
    match Model::from_bytes(bytes) {
        Ok(_) => panic!("the mutated model loaded"),
        Err(e) => {
            let msg = e.to_string();
            (e, msg)
        }
    }
}

/// The mutation `name` must fail with `BadValue` naming `key` and `value`.
fn expect_bad_value(name: &str, key: &str, value: &str) {
    for (base_name, base) in bases() {
        let (e, msg) = load_err(&mutated(base, name));
        match &e {
            ModelError::BadValue {
                key: k, value: v, ..
            } => {
                assert_eq!((k.as_str(), v.as_str()), (key, value), "{base_name}: {msg}")
            }
            _ => panic!("{base_name}: {name}: {e:?}"),
        }
        assert!(msg.contains(key) && msg.contains(value), "{msg}");
        println!("{base_name}: {name}: {msg}");
    }
}

#[test]
fn the_tiny_model_is_valid_and_runs() {
    let model = Model::from_bytes(&TINY).expect("tiny model loads");
    assert_eq!(model.config.n_layer, synth::LAYERS);
    let tokens = model.tokenizer.encode("hello world", false);
    assert!(
        tokens.len() < "hello world".len(),
        "merges apply: {tokens:?}"
    );
    let logits = engine_min::reference::forward(&model, &tokens);
    let mut s = Sampler::new(model.config.vocab, SamplerOptions::default());
    let last = &logits[logits.len() - model.config.vocab..];
    assert!(s.try_sample(last).is_ok());
    // Every issue mutation of the valid tiny model (and of the real one) fails to load.
    for (base_name, base) in bases() {
        for &name in synth::ISSUE_MUTATIONS {
            assert!(
                Model::from_bytes(&synth::mutate(base, name)).is_err(),
                "{base_name}: {name} loaded"
            );
        }
    }
}

#[test]
fn block_count_2_pow_32_minus_1() {
    expect_bad_value("block_count = 2^32-1", "llama.block_count", "4294967295");
}

#[test]
fn block_count_0() {
    expect_bad_value("block_count = 0", "llama.block_count", "0");
}

#[test]
fn rms_norm_epsilon_nan_or_negative() {
    let key = "llama.attention.layer_norm_rms_epsilon";
    expect_bad_value("RMS-norm epsilon NaN", key, "NaN");
    expect_bad_value("RMS-norm epsilon -1", key, "-1");
}

#[test]
fn rope_base_zero_or_nan() {
    expect_bad_value("RoPE base 0", "llama.rope.freq_base", "0");
    expect_bad_value("RoPE base NaN", "llama.rope.freq_base", "NaN");
}

#[test]
fn head_counts_and_vocab_size() {
    expect_bad_value(
        "head_count not dividing the width",
        "llama.attention.head_count",
        "7",
    );
    expect_bad_value("head_count_kv 0", "llama.attention.head_count_kv", "0");
    expect_bad_value(
        "vocab_size not matching the embedding",
        "llama.vocab_size",
        "5",
    );
}

#[test]
fn weight_retyped_to_bf16_with_the_same_bytes() {
    for (base_name, base) in bases() {
        let (e, msg) = load_err(&mutated(
            base,
            "a weight retyped to BF16 with the same bytes",
        ));
        let ModelError::Parse(GgufError::TensorOverlap { name, ty, .. }) = &e else {
            panic!("{base_name}: {e:?}")
        };
        assert_eq!(
            (name.as_str(), *ty),
            ("blk.0.attn_q.weight", GgmlType::BF16)
        );
        assert!(
            msg.contains("blk.0.attn_q.weight") && msg.contains("BF16"),
            "{msg}"
        );
        println!("{base_name}: {msg}");
        // Narrower: an F32 norm read as BF16 leaves half its bytes unexplained.
        let (e, msg) = load_err(&mutated(
            base,
            "a norm retyped F32 -> BF16 with the same bytes",
        ));
        let ModelError::Parse(GgufError::TensorSizeMismatch {
            name,
            ty,
            size,
            space,
            ..
        }) = &e
        else {
            panic!("{base_name}: {e:?}")
        };
        assert_eq!(name, "blk.0.attn_norm.weight");
        assert_eq!((*ty, *size * 2), (GgmlType::BF16, *space));
        println!("{base_name}: {msg}");
    }
}

#[test]
fn nan_inside_output_norm() {
    for (base_name, base) in bases() {
        let (e, msg) = load_err(&mutated(base, "a NaN inside output_norm"));
        let ModelError::NonFinite { name, index, value } = &e else {
            panic!("{base_name}: {e:?}")
        };
        assert_eq!((name.as_str(), *index), ("output_norm.weight", 7));
        assert!(value.is_nan());
        assert!(
            msg.contains("output_norm.weight") && msg.contains("NaN"),
            "{msg}"
        );
        println!("{base_name}: {msg}");
    }
}

#[test]
fn two_tensors_overlapping() {
    for (base_name, base) in bases() {
        let (e, msg) = load_err(&mutated(base, "two tensors overlapping"));
        let ModelError::Parse(GgufError::TensorOverlap { name, next, .. }) = &e else {
            panic!("{base_name}: {e:?}")
        };
        // The moved tensor now starts where attn_q does; the table sorts them by offset and
        // then by position, so one of the pair is named first and the other second.
        let mut pair = [name.as_str(), next.as_str()];
        pair.sort();
        assert!(pair.contains(&"blk.0.attn_q.weight"), "{msg}");
        assert!(
            msg.contains(name.as_str()) && msg.contains(next.as_str()),
            "{msg}"
        );
        println!("{base_name}: {msg}");
    }
}

/// Runs `f` on a helper thread and fails (instead of hanging the suite) if it takes more than
/// 10 s; a blocked open would leave the thread behind, which the process exit ends.
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} blocked for 10 s"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("engine-min-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn expect_not_regular(path: PathBuf, kind: &'static str) {
    for mmap in [true, false] {
        let p = path.clone();
        let r = within_10s("opening a non-regular file", move || {
            Model::load_with(
                &p,
                &LoadOptions {
                    mmap,
                    memory_limit: None,
                },
            )
            .err()
            .map(|e| (e.to_string(), matches!(e, ModelError::Open(OpenError::NotRegular { kind: k, .. }) if k == kind)))
        });
        let (msg, right) = r.expect("refused");
        assert!(right, "mmap {mmap}: {msg}");
        assert!(
            msg.contains(kind) && msg.contains("not a regular file"),
            "{msg}"
        );
        println!("{msg}");
    }
}

#[test]
fn a_fifo_a_directory_or_a_device_as_the_model_path() {
    let fifo = tmp("model.fifo");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    expect_not_regular(fifo.clone(), "a FIFO (named pipe)");
    let _ = std::fs::remove_file(&fifo);
    expect_not_regular(std::env::temp_dir(), "a directory");
    expect_not_regular("/dev/null".into(), "a character device");
}

#[test]
fn the_read_model_survives_its_file_being_truncated() {
    let path = tmp("tiny.gguf");
    std::fs::write(&path, TINY.as_slice()).expect("write");
    let model = Model::load_with(
        &path,
        &LoadOptions {
            mmap: false,
            memory_limit: None,
        },
    )
    .expect("loads");
    assert!(!model.file().is_mapped());
    assert_eq!(
        model.file().bytes().as_ptr() as usize % 64,
        0,
        "64-byte aligned"
    );
    // Truncate the file under the loaded model: a mapped model would die of SIGBUS on its
    // next page fault; the read one does not notice.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(0))
        .expect("truncate");
    let before = engine_min::reference::forward(&Model::from_bytes(&TINY).expect("tiny"), &[5, 6]);
    assert_eq!(engine_min::reference::forward(&model, &[5, 6]), before);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn reading_into_memory_respects_the_budget() {
    let path = tmp("tiny-budget.gguf");
    std::fs::write(&path, TINY.as_slice()).expect("write");
    let e = GgufFile::read_with(&path, &MemoryBudget::with_limit(1000))
        .err()
        .expect("refused");
    let OpenError::Memory(_, BudgetError::OverBudget { need, limit, .. }) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((*need, *limit), (TINY.len() as u64 + 63, 1000));
    let msg = e.to_string();
    assert!(
        msg.contains("KiB") && msg.contains(&format!("({need} bytes), limit 1000 bytes")),
        "{msg}"
    );
    println!("{msg}");
    // Host data of the mapped model is checked against the limit too.
    let e = Model::load_with(
        &path,
        &LoadOptions {
            mmap: true,
            memory_limit: Some(1000),
        },
    )
    .err()
    .expect("refused");
    assert!(
        matches!(e, ModelError::Memory(BudgetError::OverBudget { .. })),
        "{e:?}"
    );
    println!("{e}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn kv_cache_and_work_buffers_for_huge_contexts_and_batches() {
    for (base_name, base) in bases() {
        // A model claiming a million positions loads (a claim is not an allocation) ...
        let mut claim = base.to_vec();
        synth::set_number(&mut claim, "llama.context_length", 1_000_000.0);
        let model = Model::from_bytes(&claim).expect("loads");
        let c = &model.config;
        assert_eq!(c.context, 1_000_000);
        // ... but the engine's buffers for it are refused before allocation, with the size.
        let limit = MemoryBudget::with_limit(256 << 20);
        let e = limits::check_engine(&limit, c, c.context, 128, 2).unwrap_err();
        let BudgetError::OverBudget { need, .. } = e else {
            panic!("{e:?}")
        };
        assert!(need > 256 << 20);
        let msg = e.to_string();
        assert!(
            msg.contains("needs") && msg.contains("limit 256.00 MiB"),
            "{msg}"
        );
        println!("{base_name}: --ctx 1000000: {msg}");
        // A prompt batch of 100000 rows (bench --pp 100000).
        let e = limits::check_engine(&limit, c, 100_000, 100_000, 2).unwrap_err();
        println!("{base_name}: --pp 100000: {e}");
        assert!(limits::acts_bytes(c, 100_000).unwrap() > 256 << 20);
        // Sizes that overflow are errors, not wrapped numbers.
        assert!(matches!(
            limits::kv_cache_bytes(c, usize::MAX, 2),
            Err(BudgetError::Overflow { .. })
        ));
    }
}

/// A one-word text of `n` letters (pseudo-random, so merges apply throughout).
fn one_word(n: usize) -> String {
    let mut x = 12345u64;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            char::from(b'a' + ((x >> 33) % 26) as u8)
        })
        .collect()
}

#[test]
fn a_130000_character_word_tokenizes_in_under_a_second() {
    let word = one_word(130_000);
    let hostile_specials = "<|im_end|>".repeat(13_000);
    let spaces = " ".repeat(130_000) + "x";
    let digits_and_marks = "1!".repeat(65_000);
    for (base_name, base) in bases() {
        let model = Model::from_bytes(base).expect("loads");
        let t = &model.tokenizer;
        for (what, text, special) in [
            ("one word of 130000 letters", word.as_str(), false),
            ("13000 control tokens", hostile_specials.as_str(), true),
            (
                "13000 control tokens as text",
                hostile_specials.as_str(),
                false,
            ),
            ("130000 spaces, then a letter", spaces.as_str(), false),
            ("65000 digit-mark pairs", digits_and_marks.as_str(), false),
        ] {
            let t0 = Instant::now();
            let ids = t.encode(text, special);
            let took = t0.elapsed();
            println!("{base_name}: {what}: {} tokens in {took:?}", ids.len());
            // O(n log n): tens of milliseconds here; the quadratic merge loop took 271 s.
            assert!(
                took < Duration::from_secs(1),
                "{base_name}: {what}: {took:?}"
            );
            assert_eq!(t.decode(&ids, true), text, "{base_name}: {what} round trip");
        }
    }
}

#[test]
fn temperature_that_underflows_is_greedy() {
    // Distinct logits (37 is prime to 1000), so the greedy token is unique.
    let logits: Vec<f32> = (0..1000)
        .map(|i| ((i * 37) % 1000) as f32 * 0.01 - 3.0)
        .collect();
    let best = argmax(&logits);
    for temperature in [1e-39, f32::MIN_POSITIVE / 4.0, 1e-30, 1e-20] {
        let mut s = Sampler::new(
            logits.len(),
            SamplerOptions {
                temperature,
                top_p: 0.9,
                seed: 7,
            },
        );
        for _ in 0..20 {
            assert_eq!(s.try_sample(&logits), Ok(best), "T = {temperature:e}");
        }
    }
    // Huge logits whose differences divided by T overflow to -inf: still the best token.
    let big: Vec<f32> = vec![3e38, -3e38, 2e38];
    let mut s = Sampler::new(
        3,
        SamplerOptions {
            temperature: 1e-3,
            top_p: 1.0,
            seed: 1,
        },
    );
    assert_eq!(s.try_sample(&big), Ok(0));
}

#[test]
fn non_finite_logits_are_an_error() {
    let mut s = Sampler::new(4, SamplerOptions::default());
    // NaN != NaN, so the value is matched rather than compared.
    let e = s
        .try_sample(&[0.0, f32::NAN, 1.0, f32::INFINITY])
        .unwrap_err();
    assert!(matches!(e, SampleError::NonFinite { index: 1, value } if value.is_nan()));
    let e = s.try_sample(&[f32::NEG_INFINITY; 3]).unwrap_err();
    assert_eq!(
        e,
        SampleError::NonFinite {
            index: 0,
            value: f32::NEG_INFINITY
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("token 0") && msg.contains("-inf"), "{msg}");
    println!("{msg}");
    assert_eq!(s.try_sample(&[]), Err(SampleError::Empty));
    let mut t = Sampler::new(
        2,
        SamplerOptions {
            temperature: 0.8,
            top_p: 0.5,
            seed: 3,
        },
    );
    let e = t.try_sample(&[1.0, f32::NAN]).unwrap_err();
    assert!(matches!(e, SampleError::NonFinite { index: 1, value } if value.is_nan()));
}
