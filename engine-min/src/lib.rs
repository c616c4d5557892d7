#![doc = include_str!("../README.md")]

pub mod act;
pub mod agents;
pub mod auto;
pub mod backend;
pub mod batch;
pub mod bench;
pub mod cli;
pub mod compose;
pub mod engine;
pub mod exec;
pub mod gguf;
pub mod guard;
mod helper;
mod layer;
pub mod limits;
pub mod model;
pub mod perplexity;
pub mod phases;
pub mod planning;
pub mod prepared;
pub mod profiler;
pub mod quant;
pub mod reference;
pub mod sample;
mod swiglu;
pub mod synth;
pub mod tokenizer;
