//! Fuzz target: `Gguf::parse` and `Model::from_bytes` on arbitrary bytes; a model that loads
//! must satisfy the engine's invariants (`check_loaded`, shared with the stable harness).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/synth/check.rs"]
mod check;

fuzz_target!(|data: &[u8]| {
    check::load_any(data);
});
