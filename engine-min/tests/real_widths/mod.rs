//! Shared by the real-width tests: 2-layer `llama-1b` synth files (width 2048, FFN 8192, KV
//! 512, SmolLM2's 49,152-token vocabulary) in every type, generated once per machine into a
//! cache keyed by shape, type, layers and seed, and the f32 reference's logits on them.
//!
//! `scripts/setup.sh synth` makes the files (a release build, several at once; its `SYNTH_*`
//! settings and file name match the constants here). Under `HETERO_REQUIRE` (backend `model`,
//! as CI sets it) a missing file fails the test with that command, so a cache key that drifted
//! from setup's is found at once instead of costing CI the files' making in the `ci` profile;
//! without it (a run by hand) the test makes the file itself.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use engine_min::model::Model;
use engine_min::reference;
use engine_min::synth::{self, SynthError, SynthOptions, TYPES};

/// The shape and depth every real-width test uses.
pub const SHAPE: &str = "llama-1b";
/// Two blocks: the second one reads the first one's output, so a layer's cache or residual
/// mistake shows, at a tenth of a 16-block file's size.
pub const LAYERS: usize = 2;
/// The weights' seed.
pub const SEED: u64 = 24;
/// Bumped when `synth`'s output changes, so a stale cache is not reused.
const FORMAT: u32 = 1;

/// Every `synth` type name.
pub fn types() -> Vec<&'static str> {
    TYPES.iter().map(|t| t.0).collect()
}

/// The cache directory: `$HETERO_CACHE/synth`, else this package's target tmp dir.
fn cache_dir() -> PathBuf {
    match std::env::var_os("HETERO_CACHE") {
        Some(c) => PathBuf::from(c).join("synth"),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("synth"),
    }
}

/// Serializes generation and the memory-heavy reference runs (a dequantized 2-layer llama-1b
/// takes ~0.9 GB), so parallel test threads do not multiply the peak.
pub static HEAVY: Mutex<()> = Mutex::new(());

/// The synth file of type `ty` (made on first use; the tokenizer from the model at
/// `HETERO_MODEL`, so it needs backend `model`).
pub fn synth_file(ty: &str) -> Option<PathBuf> {
    let tokenizer = hetero_tests::require("model", crate::common::model_path())?;
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).expect("cache dir");
    let out = dir.join(format!("{SHAPE}-L{LAYERS}-{ty}-s{SEED}-f{FORMAT}.gguf"));
    if out.is_file() {
        return Some(out);
    }
    if hetero_tests::is_required("model") {
        panic!(
            "the synth file {} is missing: `scripts/setup.sh synth` makes it (CI's setup does; \
             without {} set the test makes it itself, slowly)",
            out.display(),
            hetero_tests::REQUIRE_VAR
        );
    }
    let _g = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    if out.is_file() {
        return Some(out);
    }
    let opts = SynthOptions {
        shape: SHAPE.into(),
        ty: ty.into(),
        layers: Some(LAYERS),
        seed: SEED,
        tokenizer,
        out: out.clone(),
        force: false,
    };
    let pool = hetero_sme::ThreadPool::new(2).expect("pool");
    let t0 = std::time::Instant::now();
    match synth::synth(&opts, &pool) {
        // Another process made it meanwhile.
        Ok(_) | Err(SynthError::Exists(_)) => {}
        Err(e) => panic!("synth {ty}: {e}"),
    }
    eprintln!(
        "made {} in {:.1} s",
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    Some(out)
}

/// Prompt length: a 16-row tile, then a cut one of 3 rows (prefill chunks of 16).
pub const PROMPT: usize = 19;
/// Positions checked in all: the prompt, then decode steps.
pub const POSITIONS: usize = 21;

/// Seeded token ids (random tokens: the weights are random too).
pub fn tokens(vocab: usize, n: usize) -> Vec<u32> {
    let mut s = 0x5eed_u64;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % vocab as u64) as u32
        })
        .collect()
}

/// A loaded synth model of type `ty`, the tokens and the reference's logits at every one of
/// `n` positions (computed once per type and test binary).
pub struct Case {
    /// The type name.
    pub ty: &'static str,
    /// The model.
    pub model: Arc<Model>,
    /// The token ids.
    pub ids: Vec<u32>,
    /// Reference logits, `ids.len() × vocab`.
    pub want: Vec<f32>,
}

/// The case of type `ty` with `n` positions (`None`: backend `model` absent).
pub fn case(ty: &'static str, n: usize) -> Option<Arc<Case>> {
    static CASES: OnceLock<Mutex<Vec<Arc<Case>>>> = OnceLock::new();
    let cases = CASES.get_or_init(Default::default);
    if let Some(c) = cases
        .lock()
        .unwrap()
        .iter()
        .find(|c| c.ty == ty && c.ids.len() == n)
    {
        return Some(Arc::clone(c));
    }
    let path = synth_file(ty)?;
    let model = Arc::new(Model::load(&path).expect("synth file loads"));
    let ids = tokens(model.config.vocab, n);
    let want = {
        let _g = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
        reference::forward(&model, &ids)
    };
    assert!(want.iter().all(|v| v.is_finite()), "{ty}: reference finite");
    let c = Arc::new(Case {
        ty,
        model,
        ids,
        want,
    });
    cases.lock().unwrap().push(Arc::clone(&c));
    Some(c)
}

/// max |a − b| / max |b| over one logit row.
pub fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    let s = b.iter().map(|y| y.abs()).fold(0.0, f32::max);
    d / s.max(1e-30)
}
