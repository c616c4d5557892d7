#![doc = include_str!("../README.md")]

pub mod act;
pub mod agents;
pub mod backend;
pub mod batch;
pub mod bench;
pub mod engine;
pub mod exec;
pub mod gguf;
pub mod gpu;
mod layer;
pub mod model;
pub mod npu;
pub mod planning;
pub mod quant;
pub mod reference;
pub mod sample;
pub mod split;
pub mod tokenizer;
