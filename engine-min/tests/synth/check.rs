//! The fuzz body and the invariants of a loaded model, shared by the stable harness
//! (`tests/fuzz_gguf.rs`) and the cargo-fuzz target (`fuzz/fuzz_targets/gguf_load.rs`, which
//! includes this file by path).

use engine_min::gguf::Gguf;
use engine_min::model::Model;

/// What a model that loaded must satisfy: the hyper-parameters the forward pass divides and
/// exponentiates by are sane, every weight view lies inside the file (`view` slices it),
/// the norms are finite, and the tokenizer only emits ids inside the vocabulary.
pub fn check_loaded(m: &Model) {
    let c = &m.config;
    assert!(c.n_layer > 0 && c.n_layer == m.layers.len());
    assert!(c.eps.is_finite() && c.eps > 0.0 && c.rope_theta.is_finite() && c.rope_theta > 0.0);
    assert!(c.n_head > 0 && c.d_model.is_multiple_of(c.n_head));
    assert!(c.n_kv_head > 0 && c.n_head.is_multiple_of(c.n_kv_head));
    assert!(c.head_dim.is_multiple_of(2) && c.rope_dims.is_multiple_of(2));
    assert!(c.rope_dims > 0 && c.rope_dims <= c.head_dim);
    assert_eq!(c.vocab, m.tokenizer.vocab_size());
    let mut weights = vec![m.embed, m.output];
    for l in &m.layers {
        weights.extend([l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down]);
        assert!(l.attn_norm.iter().chain(&l.ffn_norm).all(|x| x.is_finite()));
    }
    assert!(m.output_norm.iter().all(|x| x.is_finite()));
    for w in &weights {
        let v = m.view(w);
        assert_eq!(
            v.data.len(),
            engine_min::quant::row_bytes(w.ty, w.k).expect("supported") * w.n
        );
    }
    // A mutated vocabulary may lack byte tokens (bytes then become the unknown token), so
    // the text need not round-trip; every id must still be one the engine accepts.
    let text = "hello world <|im_end|> 12 é";
    let ids = m.tokenizer.encode(text, true);
    assert!(ids.iter().all(|&i| (i as usize) < c.vocab));
    let _ = m.tokenizer.decode(&ids, true);
}

/// The fuzz body: parse, load, check.
pub fn load_any(bytes: &[u8]) {
    let _ = Gguf::parse(bytes);
    if let Ok(m) = Model::from_bytes(bytes) {
        check_loaded(&m);
    }
}
