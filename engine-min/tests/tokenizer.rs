//! Tokenizer from the real model's metadata (needs `HETERO_MODEL`; backend name `model`).

use engine_min::gguf::GgufFile;
use engine_min::tokenizer::{pretokenize, Tokenizer};

mod common;

fn load() -> Option<Tokenizer> {
    let path = hetero_tests::require("model", common::model_path())?;
    let f = GgufFile::open(&path).expect("model parses");
    Some(Tokenizer::from_gguf(&f.header).expect("tokenizer"))
}

#[test]
fn pretokenizer_splits_like_gpt2_with_single_digits() {
    assert_eq!(pretokenize("Hello world"), ["Hello", " world"]);
    assert_eq!(
        pretokenize("it's 2024!"),
        ["it", "'s", " ", "2", "0", "2", "4", "!"]
    );
    assert_eq!(pretokenize("a  b"), ["a", " ", " b"]);
    assert_eq!(pretokenize("a\n\nb  "), ["a", "\n", "\n", "b", "  "]);
    assert_eq!(pretokenize("x\n b"), ["x", "\n", " b"]);
    assert_eq!(pretokenize(" ...foo"), [" ...", "foo"]);
    assert_eq!(pretokenize("héllo wörld"), ["héllo", " wörld"]);
}

#[test]
fn known_encodings() {
    let Some(t) = load() else { return };
    let id = |s: &str| t.token_id(s).unwrap_or_else(|| panic!("no token {s}"));
    assert_eq!(t.encode("Hello world", false), [id("Hello"), id("Ġworld")]);
    assert_eq!(
        t.encode("The capital of France is", false),
        [
            id("The"),
            id("Ġcapital"),
            id("Ġof"),
            id("ĠFrance"),
            id("Ġis")
        ]
    );
    assert_eq!(t.encode("12", false), [id("1"), id("2")]);
    // Specials map to their ids only when parsed.
    assert_eq!(t.encode("<|im_start|>", true), [1]);
    assert_eq!(t.encode("<|im_end|>", true), [2]);
    assert!(t.encode("<|im_end|>", false).len() > 1);
    assert_eq!(t.eos, Some(2));
    assert!(t.is_control(2));
}

#[test]
fn round_trips() {
    let Some(t) = load() else { return };
    let texts = [
        "",
        "The quick brown fox jumps over the lazy dog.",
        "  leading and trailing spaces  ",
        "tabs\tand\nnewlines\r\n\n\nend",
        "numbers 3.14159 and 1,000,000 and ²³",
        "Ünïcödé: 日本語のテキスト, emoji 🦀🚀, Ελληνικά, русский",
        "code: fn main() { println!(\"{}\", x[0] + 1); } // it's fine, we'll see",
        "<|im_start|>user\nhi<|im_end|>",
    ];
    for s in texts {
        let ids = t.encode(s, false);
        assert_eq!(t.decode(&ids, true), s, "plain round trip of {s:?}");
        let ids = t.encode(s, true);
        assert_eq!(t.decode(&ids, true), s, "special round trip of {s:?}");
    }
    // All printable ASCII and Latin-1 survive (byte tokens); control bytes absent from the
    // vocabulary become the unknown token instead.
    let s: String = (0x20u32..0x250).filter_map(char::from_u32).collect();
    assert_eq!(t.decode(&t.encode(&s, false), true), s);
}

#[test]
fn chat_template_is_chatml() {
    let Some(t) = load() else { return };
    let p = t.chat_prompt("Hi").expect("chatml");
    assert!(p.starts_with("<|im_start|>system\nYou are a helpful AI assistant"));
    assert!(p.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    let ids = t.encode_prompt(&p);
    assert_eq!(ids[0], 1);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 2);
}
