//! `gguf-requantize IN OUT TARGET`: test fixtures in the formats users download, made from the
//! one model we ship (SmolLM2-135M Q4_1): every 2-D weight except the token embedding is
//! dequantized ([`hetero_sme::dequantize_row`]) and requantized with hetero-sme's own quantizers
//! ([`hetero_sme::quantize_row`]); norms stay F32 and the embedding keeps its type and bytes.
//!
//! **The fixtures' quality is not the point, the format is.** They are a Q4_1 model squeezed
//! through a second quantization, so their perplexity says nothing about the formats; they exist
//! so that every block type, and a mixed-type model, can be loaded, dequantized bit for bit
//! against gguf-py and computed on every path.
//!
//! Targets and the type each 2-D weight gets (K-quants need rows of whole 256-value
//! super-blocks; SmolLM2's 576-wide rows fall back as llama.cpp's quantizer does: Q4_K → Q5_0,
//! Q5_K → Q5_1, Q6_K → Q8_0, so only `ffn_down` (1536-wide rows) holds K-quants):
//! - `q4_k_m`: llama.cpp's Q4_K_M mix: Q4_K, except `attn_v` and `ffn_down` of the layers
//!   llama.cpp's `use_more_bits` picks (the first and last eighth of the layers and every
//!   third one between) which get Q6_K; then the fallback above.
//! - `q5_k`: Q5_K (llama.cpp's Q5_K_S), then the fallback.
//! - `q6_k`: Q6_K, then the fallback.
//! - `q5_0`, `q5_1`: every weight in that type.
//!
//! `general.file_type` is set to llama.cpp's code for the target; `general.alignment` is dropped
//! (the writer aligns to GGUF's default 32).

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use engine_min::gguf::{self, GgmlType, GgufFile, TensorInfo, Value};

/// A target mix: its name, llama.cpp's `general.file_type` code, and the rule.
struct Target {
    name: &'static str,
    file_type: u32,
    /// The type a weight gets before the K-quant fallback: (layer, layers, tensor name).
    pick: fn(usize, usize, &str) -> GgmlType,
}

/// llama.cpp's rule for where Q4_K_M spends more bits.
fn use_more_bits(layer: usize, layers: usize) -> bool {
    // The last test runs only for layer >= layers / 8.
    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2
}

const TARGETS: [Target; 5] = [
    Target {
        name: "q4_k_m",
        file_type: 15,
        pick: |layer, layers, name| {
            let more = name.contains("attn_v.") || name.contains("ffn_down.");
            if more && use_more_bits(layer, layers) {
                GgmlType::Q6K
            } else {
                GgmlType::Q4K
            }
        },
    },
    Target {
        name: "q5_k",
        file_type: 16,
        pick: |_, _, _| GgmlType::Q5K,
    },
    Target {
        name: "q6_k",
        file_type: 18,
        pick: |_, _, _| GgmlType::Q6K,
    },
    Target {
        name: "q5_0",
        file_type: 8,
        pick: |_, _, _| GgmlType::Q5_0,
    },
    Target {
        name: "q5_1",
        file_type: 9,
        pick: |_, _, _| GgmlType::Q5_1,
    },
];

/// llama.cpp's fallback for rows that are not whole K-quant super-blocks.
fn fallback(ty: GgmlType, k: usize) -> GgmlType {
    if k.is_multiple_of(hetero_sme::QK_K) {
        return ty;
    }
    match ty {
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        t => t,
    }
}

/// `blk.N.` → N.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The new type of one tensor (`None`: copied as it is).
fn new_type(t: &TensorInfo, target: &Target, layers: usize) -> Option<GgmlType> {
    if t.dims.len() != 2 || t.name == "token_embd.weight" || !t.ty.can_dequantize() {
        return None;
    }
    let k = usize::try_from(t.dims[0]).ok()?;
    let layer = layer_of(&t.name).unwrap_or(0);
    Some(fallback((target.pick)(layer, layers, &t.name), k))
}

/// Dequantizes `data` (rows of `k` values of `from`) and requantizes every row to `to`.
fn requantize(from: GgmlType, data: &[u8], k: usize, to: GgmlType) -> Result<Vec<u8>, String> {
    let (rin, rout) = match (from.row_bytes(k), to.row_bytes(k)) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(format!("rows of {k} values do not fit {from} / {to}")),
    };
    let mut out = vec![0u8; data.len() / rin * rout];
    let mut row = vec![0f32; k];
    for (src, dst) in data.chunks_exact(rin).zip(out.chunks_exact_mut(rout)) {
        hetero_sme::dequantize_row(from, src, &mut row).map_err(|e| e.to_string())?;
        hetero_sme::quantize_row(to, &row, dst).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn run(input: &str, output: &str, target: &str) -> Result<(), String> {
    let target = TARGETS
        .iter()
        .find(|t| t.name == target)
        .ok_or_else(|| format!("unknown target `{target}`"))?;
    let file = GgufFile::open(input).map_err(|e| e.to_string())?;
    let h = &file.header;
    let layers = h
        .get("llama.block_count")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    // Each tensor's new type and bytes, tensors spread over the CPUs.
    let jobs: Vec<(&TensorInfo, Option<GgmlType>)> = h
        .tensors
        .iter()
        .map(|t| (t, new_type(t, target, layers)))
        .collect();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut done: Vec<(usize, Result<Vec<u8>, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(t, to)) = jobs.get(i) else { break };
                        let Some(data) = h.tensor_data(file.bytes(), t) else {
                            mine.push((i, Err(format!("tensor {} lies outside the file", t.name))));
                            continue;
                        };
                        let r = match to {
                            Some(to) => requantize(t.ty, data, t.dims[0] as usize, to),
                            None => Ok(data.to_vec()),
                        };
                        mine.push((i, r.map_err(|e| format!("{}: {e}", t.name))));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    if done.len() != jobs.len() {
        return Err("a worker thread failed".into());
    }
    let mut datas = Vec::with_capacity(done.len());
    for (_, r) in done {
        datas.push(r?);
    }
    let metadata: Vec<(&str, Value)> = h
        .metadata
        .iter()
        .filter(|(k, _)| k != "general.alignment")
        .map(|(k, v)| match k.as_str() {
            "general.file_type" => (k.as_str(), Value::U32(target.file_type)),
            _ => (k.as_str(), v.clone()),
        })
        .collect();
    let tensors: Vec<(&str, &[u64], u32, &[u8])> = jobs
        .iter()
        .zip(&datas)
        .map(|((t, to), d)| {
            let ty = to.unwrap_or(t.ty);
            (t.name.as_str(), t.dims.as_slice(), ty.code(), d.as_slice())
        })
        .collect();
    let bytes = gguf::write(&metadata, &tensors);
    // Written beside the output, then renamed: a half-written fixture never looks cached.
    let tmp = format!("{output}.tmp");
    std::fs::write(&tmp, &bytes).map_err(|e| format!("{tmp}: {e}"))?;
    std::fs::rename(&tmp, output).map_err(|e| format!("{output}: {e}"))?;
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for ((t, to), _) in jobs.iter().zip(&datas) {
        *counts.entry(to.unwrap_or(t.ty).to_string()).or_default() += 1;
    }
    println!(
        "{output}: {} bytes, tensors by type {counts:?}",
        bytes.len()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        eprintln!(
            "usage: gguf-requantize IN OUT TARGET   (TARGET: {})",
            names.join(" | ")
        );
        return ExitCode::from(2);
    }
    match run(&args[1], &args[2], &args[3]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gguf-requantize: {e}");
            ExitCode::FAILURE
        }
    }
}
