//! Reads the real model's GGUF header (needs `HETERO_MODEL`; backend name `model`).

use engine_min::gguf::{GgmlType, GgufFile};

mod common;
use common::model_path;

#[test]
fn model_header_is_llama() {
    let Some(path) = hetero_tests::require("model", model_path()) else {
        return;
    };
    let f = GgufFile::open(&path).expect("model parses");
    let h = &f.header;
    assert_eq!(
        h.get("general.architecture").and_then(|v| v.as_str()),
        Some("llama")
    );
    assert_eq!(
        h.get("llama.block_count").and_then(|v| v.as_u64()),
        Some(30)
    );
    assert_eq!(
        h.get("llama.embedding_length").and_then(|v| v.as_u64()),
        Some(576)
    );
    let toks = h
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .expect("tokens");
    assert_eq!(toks.len(), 49152);
    let (q, data) = f.tensor("blk.0.attn_q.weight").expect("attn_q");
    assert_eq!(q.ty, GgmlType::Q4_1);
    assert_eq!(q.dims, vec![576, 576]);
    assert_eq!(data.len(), 576 * 576 / 32 * 20);
    // 30 layers x 9 tensors + token_embd + output_norm (tied output).
    assert_eq!(h.tensors.len(), 30 * 9 + 2);
}
