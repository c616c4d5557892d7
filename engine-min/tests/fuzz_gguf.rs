//! The stable twin of the cargo-fuzz target `engine-min/fuzz/fuzz_targets/gguf_load.rs`:
//! `Gguf::parse` and `Model::from_bytes` on mutated model files, a bounded number of cases
//! (proptest), seeded with issue 17's mutations of a tiny synthetic Llama and, when
//! `HETERO_MODEL` is set, of the real model. Every input must end in `Ok` or a typed error —
//! never a panic, an abort or a hang — and a model that loads must satisfy the invariants the
//! engine relies on ([`check_loaded`]).
//!
//! `cargo test -p engine-min --test fuzz_gguf -- --ignored write_fuzz_seeds` writes the seed
//! corpus for the cargo-fuzz target (see `engine-min/fuzz/README.md`).

use std::sync::LazyLock;

use engine_min::model::Model;
use proptest::prelude::*;
use synth::check::{check_loaded, load_any};

mod common;
mod synth;

static TINY: LazyLock<Vec<u8>> = LazyLock::new(synth::tiny_llama);

static REAL: LazyLock<Option<Vec<u8>>> = LazyLock::new(|| {
    let path = hetero_tests::require("model", common::model_path())?;
    Some(std::fs::read(path).expect("read the model"))
});

static TINY_LAYOUT: LazyLock<synth::Patcher> = LazyLock::new(|| synth::Patcher::new(&TINY));
static REAL_LAYOUT: LazyLock<Option<synth::Patcher>> =
    LazyLock::new(|| REAL.as_ref().map(|r| synth::Patcher::new(r)));

/// A structured mutation: a hyper-parameter set to an interesting value, a tensor retyped,
/// or a tensor moved.
#[derive(Clone, Debug)]
enum Field {
    Number(&'static str, f64),
    Retype(usize, u32),
    Move(usize, usize, u64),
}

const KEYS: &[&str] = &[
    "llama.block_count",
    "llama.context_length",
    "llama.embedding_length",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.rope.freq_base",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.vocab_size",
    "llama.rope.dimension_count",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
];

const VALUES: &[f64] = &[
    0.0,
    1.0,
    -1.0,
    2.0,
    3.0,
    7.0,
    16.0,
    64.0,
    65.0,
    4294967295.0,
    1e-39,
    1e30,
    f64::NAN,
    f64::INFINITY,
];

/// Type codes: F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, BF16, an IQ code, an unknown one.
const CODES: &[u32] = &[0, 1, 2, 3, 8, 12, 30, 16, 99];

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        (0..KEYS.len(), 0..VALUES.len()).prop_map(|(k, v)| Field::Number(KEYS[k], VALUES[v])),
        (any::<usize>(), 0..CODES.len()).prop_map(|(t, c)| Field::Retype(t, CODES[c])),
        (
            any::<usize>(),
            any::<usize>(),
            prop_oneof![Just(0u64), Just(32), Just(1 << 40)]
        )
            .prop_map(|(t, u, d)| Field::Move(t, u, d)),
    ]
}

fn apply(p: &synth::Patcher, buf: &mut [u8], f: &Field) {
    let g = p.gguf();
    let name = |i: usize| g.tensors[i % g.tensors.len()].name.clone();
    match *f {
        Field::Number(key, v) => p.set_number(buf, key, v),
        Field::Retype(t, code) => p.retype(buf, &name(t), code),
        // Tensor t moves to tensor u's offset plus d.
        Field::Move(t, u, d) => {
            let to = g.tensors[u % g.tensors.len()].offset.wrapping_add(d);
            p.set_offset(buf, &name(t), to)
        }
    }
}

/// The base for `seed`: the valid file (0) or one of issue 17's mutations of it.
fn seeded(base: &[u8], seed: usize) -> Vec<u8> {
    match seed.checked_sub(1) {
        None => base.to_vec(),
        Some(i) => synth::mutate(base, synth::ISSUE_MUTATIONS[i]),
    }
}

proptest! {
    // About 1 s in CI's profile on the 2-core machine (each case parses and loads a 71 kB
    // file, building a 266-token tokenizer).
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_tiny_models_load_or_fail_cleanly(
        // The valid file half the time, so that some mutants still load and are checked.
        seed in prop_oneof![1 => Just(0), 1 => 1..=synth::ISSUE_MUTATIONS.len()],
        fields in prop::collection::vec(field(), 0..3),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<bool>()), 0..6),
        cut in prop_oneof![3 => Just(0usize), 1 => 1usize..40],
    ) {
        let mut buf = seeded(&TINY, seed);
        let p = &*TINY_LAYOUT;
        for f in &fields {
            apply(p, &mut buf, f);
        }
        // Byte overwrites, half of them inside the header (counts, lengths, types, offsets).
        let header = p.gguf().data_offset as usize;
        for &(at, b, in_header) in &edits {
            let i = if in_header { at % header } else { at % buf.len() };
            buf[i] = b;
        }
        let len = buf.len() - cut.min(buf.len());
        load_any(&buf[..len]);
    }
}

proptest! {
    // Each case copies and loads the 98 MB model (0.1-0.5 s on the shared 2-core machine).
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn mutated_real_models_load_or_fail_cleanly(
        fields in prop::collection::vec(field(), 1..3),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    ) {
        let Some(real) = REAL.as_ref() else { return Ok(()) };
        let mut buf = real.clone();
        let p = REAL_LAYOUT.as_ref().expect("the real model parses");
        for f in &fields {
            apply(p, &mut buf, f);
        }
        let header = p.gguf().data_offset as usize;
        for &(at, b) in &edits {
            buf[at % header] = b;
        }
        load_any(&buf);
    }
}

#[test]
fn every_seed_fails_with_a_typed_error() {
    let mut bases: Vec<&[u8]> = vec![&TINY];
    if let Some(real) = REAL.as_ref() {
        bases.push(real);
    }
    for base in bases {
        let model = Model::from_bytes(base).expect("the unmutated base loads");
        check_loaded(&model);
        for (i, &name) in synth::ISSUE_MUTATIONS.iter().enumerate() {
            let e = Model::from_bytes(&seeded(base, i + 1)).err();
            assert!(e.is_some(), "{name} loaded");
        }
    }
}

/// Writes the seed corpus of the cargo-fuzz target: the tiny model and each of its issue
/// mutations (the real model is too large for libFuzzer's inputs).
#[test]
#[ignore = "writes files; run by hand before fuzzing"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gguf_load");
    std::fs::create_dir_all(&dir).expect("corpus dir");
    for seed in 0..=synth::ISSUE_MUTATIONS.len() {
        let name = match seed {
            0 => "tiny-valid".to_string(),
            s => synth::ISSUE_MUTATIONS[s - 1]
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect(),
        };
        std::fs::write(dir.join(format!("{name}.gguf")), seeded(&TINY, seed)).expect("write");
    }
}
