#![doc = include_str!("../README.md")]

pub mod gguf;
pub mod tokenizer;
