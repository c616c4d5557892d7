//! `truncate_layers IN OUT LAYERS`: a copy of a Llama GGUF with only its first `LAYERS` blocks
//! (`llama.block_count` set to it, the later `blk.N.*` tensors dropped; every kept tensor's
//! bytes unchanged). For timing the real model's shapes where the whole file cannot travel
//! (SmolLM2-135M Q4_1 is 98 MB; 12 of its 30 layers make ~57 MB): per-layer costs are the real
//! model's, per-token totals are not.

use std::process::ExitCode;

use engine_min::gguf::{self, GgufFile, Value};

fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

fn run(input: &str, output: &str, layers: &str) -> Result<(), String> {
    let keep: usize = layers
        .parse()
        .map_err(|_| format!("LAYERS `{layers}` is not a count"))?;
    let file = GgufFile::open(input).map_err(|e| e.to_string())?;
    let h = &file.header;
    let mut tensors = Vec::new();
    for t in &h.tensors {
        if layer_of(&t.name).is_some_and(|l| l >= keep) {
            continue;
        }
        let data = h
            .tensor_data(file.bytes(), t)
            .ok_or_else(|| format!("tensor {} lies outside the file", t.name))?;
        tensors.push((t.name.as_str(), t.dims.as_slice(), t.ty.code(), data));
    }
    let metadata: Vec<(&str, Value)> = h
        .metadata
        .iter()
        .filter(|(k, _)| k != "general.alignment")
        .map(|(k, v)| match k.as_str() {
            "llama.block_count" => (k.as_str(), Value::U32(keep as u32)),
            _ => (k.as_str(), v.clone()),
        })
        .collect();
    let bytes = gguf::write(&metadata, &tensors);
    std::fs::write(output, &bytes).map_err(|e| format!("{output}: {e}"))?;
    println!("{output}: {} bytes, {} tensors", bytes.len(), tensors.len());
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: truncate_layers IN OUT LAYERS");
        return ExitCode::from(2);
    }
    match run(&args[1], &args[2], &args[3]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("truncate_layers: {e}");
            ExitCode::FAILURE
        }
    }
}
