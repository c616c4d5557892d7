//! Times the device-resident decoder (`hetero_opencl_kernels::decoder`) on SmolLM2-135M's
//! shapes with random weights of the same types (the model file need not travel): pp128 (one
//! 128-token prefill from position 0, last row's logits read back) and tg64 (64 one-token
//! steps from position 0, each waited for: the argmax read back, and again with the logits
//! read back), as llama.cpp's `llama-bench -p 128 -n 64` measures them; launches per token; and,
//! on a profiling queue, device time per op kind, so the gap between device time and wall
//! time (launch and host overhead) is visible.
//!
//! Environment (defaults in brackets): `RD_PATHS` decode variants to time, comma-separated
//! (`blocks,layered`): `auto`, `layered`, `blocks`, `persistent`, and the measurement variants
//! `layered-nosplit` (one-row attention one work-group a head, not split over positions),
//! `layered-wide` (`gemv_min_groups` 1: the widest GEMV work-groups), `persistent-gN` (N
//! work-groups), `persistent-xN` (N work-groups a compute unit) and `persistent-barriers` (its
//! grid barriers alone); `RD_TYPE` layer weights (`q4_1`; also `q4_0`, `q8_0`, `f16`, `q5_0`,
//! `q5_1`: every layer matrix of that type; and `q4_k_m`, `q5_k`, `q6_k`: the mixes of the
//! fixtures `gguf-requantize` writes, since SmolLM2's 576-wide rows cannot hold 256-value
//! super-blocks: `ffn_down` in the K-quant, the other matrices in llama.cpp's fallback (Q5_0,
//! Q5_1, Q8_0), and for `q4_k_m` Q6_K/Q8_0 on `ffn_down`/`attn_v` of the layers llama.cpp's
//! `use_more_bits` picks; mixed layers run neither decode blocks nor the persistent step, so
//! only `layered` times there, and the persistent step runs F16, Q8_0, Q4_0 and Q4_1 only;
//! the embedding/head stays Q8_0, tied), `RD_SHAPE` (`smollm2`; `llama-1b`, `llama-8b`: Llama-3.2-1B's
//! and Llama-3-8B's widths, where `q4_k_m` is llama.cpp's real mix, Q4_K with Q6_K
//! `attn_v`/`ffn_down` on the `use_more_bits` layers, and `q4_k`, `q5_k`, `q6_k` one type),
//! `RD_HEAD` (`tied`; `q8_0`, `q4_0`, `q6_k`: an untied head of that type), `RD_LAYERS` (30), `RD_REPS` (5), `RD_PP` (128), `RD_TG`
//! (64), `RD_PROFILE` (1: also the profiled runs), `RD_FLUSH` flush intervals to time,
//! comma-separated (`0`: flush once per step; `4`: also after every 4 launches), plus the
//! crate's `HETERO_OPENCL_*`; `RD_COPY_GBS` and `RD_FP32_GFLOPS`: the device's measured copy
//! bandwidth and FP32 rate, to print each op kind's fraction of them in the profiled tables
//! (beside its least bytes and FLOPs, `Decoder::op_costs`); `RD_ROWS` prefill chunk rows
//! (`max_rows`, 128), `RD_FAST` (1: the fast matmuls of kernels/mm.cl; 0: the older kernels),
//! `RD_I8` (`auto`; `0`/`1`: int8 activations in the GEMVs off/on), `RD_GEMM_ROWS`,
//! `RD_GEMV_STEPS` (shape overrides, 0 = chosen).
//! Output: human-readable tables, and one `RESULT` line per path.
//!
//! `cargo run --release -p hetero-opencl-kernels --example resident_decode`

use half::f16;
use hetero_opencl_kernels::decoder::{
    DecodePath, Decoder, DecoderConfig, DecoderOptions, LayerWeights, ModelWeights, OpCost, OpKind,
    OpTime, Readout, Tensor,
};
use hetero_opencl_kernels::{self as ocl, Device, GgmlType, RopeMode};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Random GGUF bytes of an `n x k` matrix of `ty`, entries of magnitude about `scale`.
fn matrix(r: &mut Rng, ty: GgmlType, n: usize, k: usize, scale: f32) -> Vec<u8> {
    let mut w = vec![0u8; ocl::matrix_bytes(ty, n, k).expect("shape")];
    for c in w.chunks_mut(8) {
        let v = r.next().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
    let h = |v: f32| f16::from_f32(v).to_le_bytes();
    match ty {
        GgmlType::F16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&h((r.unit() * 2.0 - 1.0) * scale));
            }
        }
        _ => {
            let bb = ty.block().map_or(2, |b| b.1);
            // The f16 fields of each block: (offset of d, d, minimum or dmin at offset 2) so
            // that values come out about `scale` in size (K-quants: 6-bit scales and mins
            // average 32; Q6_K's i8 scales about 64 in magnitude).
            let (d_at, d, m) = match ty {
                GgmlType::Q8_0 => (0, scale / 127.0, None),
                GgmlType::Q4_1 => (0, scale / 7.5, Some(-scale)),
                GgmlType::Q5_0 => (0, scale / 16.0, None),
                GgmlType::Q5_1 => (0, scale / 15.5, Some(-scale)),
                GgmlType::Q4K => (0, scale / (32.0 * 7.5), Some(scale / 32.0)),
                GgmlType::Q5K => (0, scale / (32.0 * 15.5), Some(scale / 32.0)),
                GgmlType::Q6K => (208, scale / (64.0 * 32.0), None),
                _ => (0, scale / 8.0, None),
            };
            for b in w.chunks_exact_mut(bb) {
                b[d_at..d_at + 2].copy_from_slice(&h(d * (0.5 + 0.5 * r.unit())));
                if let Some(m) = m {
                    b[2..4].copy_from_slice(&h(m));
                }
            }
        }
    }
    w
}

/// The shapes of `RD_SHAPE`: SmolLM2-135M (`smollm2`, default), Llama-3.2-1B (`llama-1b`)
/// or Llama-3-8B (`llama-8b`); `None` for another name.
fn config(shape: &str, n_layer: usize, max_context: usize) -> Option<DecoderConfig> {
    // (d, d_ff, heads, kv heads, vocab, rope theta)
    let (d_model, d_ff, n_head, n_kv_head, vocab, theta) = match shape {
        "smollm2" => (576, 1536, 9, 3, 49152, 100000.0),
        "llama-1b" => (2048, 8192, 32, 8, 128256, 500000.0),
        "llama-8b" => (4096, 14336, 32, 8, 128256, 500000.0),
        _ => return None,
    };
    Some(DecoderConfig {
        n_layer,
        d_model,
        d_ff,
        n_head,
        n_kv_head,
        head_dim: d_model / n_head,
        rope_dims: d_model / n_head,
        rope_theta: theta,
        rope_mode: RopeMode::Normal,
        eps: 1e-5,
        vocab,
        max_context,
        max_rows: 128,
        all_logits: false,
    })
}

struct Owned {
    embed: Vec<u8>,
    /// An untied head (`RD_HEAD`), else the embedding is the head.
    head: Option<Vec<u8>>,
    norms: Vec<f32>,
    /// Q, K, V, O, gate, up, down of each layer: type and GGUF bytes.
    layers: Vec<[(GgmlType, Vec<u8>); 7]>,
}

/// The layer matrices' types of `RD_TYPE` (Q, K, V, O, gate, up, down) in `layer` of `layers`,
/// or `None` for a name this example does not know.
fn layer_types(name: &str, layer: usize, layers: usize, wide: bool) -> Option<[GgmlType; 7]> {
    use GgmlType as T;
    let uniform = |t| Some([t; 7]);
    // ffn_down's rows are 1536 wide (whole super-blocks); the others are 576 wide and fall back.
    let mix = |rest, down| Some([rest, rest, rest, rest, rest, rest, down]);
    // llama.cpp's use_more_bits, as gguf-requantize applies it.
    let more = layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
    // At widths of whole super-blocks (the Llama shapes), llama.cpp's real mixes.
    let (v_dn, vk) = if more {
        (T::Q6K, T::Q6K)
    } else {
        (T::Q4K, T::Q4K)
    };
    match name {
        "q4_k_m" if wide => Some([T::Q4K, T::Q4K, vk, T::Q4K, T::Q4K, T::Q4K, v_dn]),
        "q4_k" if wide => uniform(T::Q4K),
        "q5_k" if wide => uniform(T::Q5K),
        "q6_k" if wide => uniform(T::Q6K),
        "q4_0" => uniform(T::Q4_0),
        "q4_1" => uniform(T::Q4_1),
        "q8_0" => uniform(T::Q8_0),
        "f16" => uniform(T::F16),
        "q5_0" => uniform(T::Q5_0),
        "q5_1" => uniform(T::Q5_1),
        "q4_k_m" if more => Some([T::Q5_0, T::Q5_0, T::Q8_0, T::Q5_0, T::Q5_0, T::Q5_0, T::Q6K]),
        "q4_k_m" => mix(T::Q5_0, T::Q4K),
        "q5_k" => mix(T::Q5_1, T::Q5K),
        "q6_k" => mix(T::Q8_0, T::Q6K),
        _ => None,
    }
}

fn weights(o: &Owned, head: GgmlType) -> ModelWeights<'_> {
    fn t(data: &[u8], ty: GgmlType) -> Tensor<'_> {
        Tensor { ty, data }
    }
    let d = o.norms.len();
    ModelWeights {
        embed: Tensor {
            ty: GgmlType::Q8_0,
            data: &o.embed,
        },
        layers: o
            .layers
            .iter()
            .map(|w| LayerWeights {
                attn_norm: &o.norms,
                wq: t(&w[0].1, w[0].0),
                wk: t(&w[1].1, w[1].0),
                wv: t(&w[2].1, w[2].0),
                wo: t(&w[3].1, w[3].0),
                ffn_norm: &o.norms[..d],
                gate: t(&w[4].1, w[4].0),
                up: t(&w[5].1, w[5].0),
                down: t(&w[6].1, w[6].0),
            })
            .collect(),
        output_norm: &o.norms,
        output: o.head.as_ref().map(|h| Tensor { ty: head, data: h }),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A decode variant to time: its name (as in `RD_PATHS`) and decoder options.
struct Variant {
    name: String,
    opts: DecoderOptions,
}

/// Parses one `RD_PATHS` entry (see the header); `None` for an unknown one.
fn variant(s: &str) -> Option<Variant> {
    let name = s.trim();
    let mut opts = DecoderOptions::default();
    match name {
        "auto" => {}
        "layered" => opts.decode = DecodePath::Layered,
        "blocks" => opts.decode = DecodePath::Blocks,
        "persistent" => opts.decode = DecodePath::Persistent,
        "layered-nosplit" => {
            opts.decode = DecodePath::Layered;
            opts.split_attention = false;
        }
        "layered-wide" => {
            opts.decode = DecodePath::Layered;
            opts.gemv_min_groups = 1;
        }
        "persistent-barriers" => {
            opts.decode = DecodePath::Persistent;
            opts.persistent_barriers_only = true;
        }
        _ => {
            opts.decode = DecodePath::Persistent;
            if let Some(per_cu) = name.strip_prefix("persistent-x") {
                opts.persistent_groups_per_cu = per_cu.parse().ok()?;
            } else {
                opts.persistent_groups = name.strip_prefix("persistent-g")?.parse().ok()?;
            }
        }
    }
    Some(Variant {
        name: name.to_string(),
        opts,
    })
}

fn open(profiling: bool) -> Res<Arc<Device>> {
    Ok(Device::from_env_with(profiling)?)
}

/// Timings of one path: (pp seconds per rep, tg seconds per rep with argmax, with logits).
fn time_path(
    dec: &mut Decoder,
    tokens: &[u32],
    pp: usize,
    tg: usize,
    reps: usize,
) -> Res<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    // Warm-up: every kernel once (drivers compile or load lazily), both readouts.
    dec.forward(&tokens[..pp], 0)?;
    dec.forward_argmax(&tokens[..1], 0)?;
    dec.forward(&tokens[..1], 0)?;
    let (mut pps, mut tga, mut tgl) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        dec.forward(&tokens[..pp], 0)?;
        pps.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for p in 0..tg {
            dec.forward_argmax(&tokens[p..p + 1], p)?;
        }
        tga.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for p in 0..tg {
            dec.forward(&tokens[p..p + 1], p)?;
        }
        tgl.push(t.elapsed().as_secs_f64());
    }
    Ok((pps, tga, tgl))
}

/// Summed [`OpCost`]s of the profiled steps, by kind: `(kind, bytes, flops)`.
fn sum_costs(all: impl IntoIterator<Item = Vec<OpCost>>) -> Vec<(OpKind, u64, u64)> {
    let mut sums: Vec<(OpKind, u64, u64)> = Vec::new();
    for c in all.into_iter().flatten() {
        match sums.iter_mut().find(|s| s.0 == c.kind) {
            Some(s) => {
                s.1 += c.bytes;
                s.2 += c.flops;
            }
            None => sums.push((c.kind, c.bytes, c.flops)),
        }
    }
    sums
}

/// The device's copy bandwidth (GB/s) and FP32 rate (GFLOP/s) to put the op kinds against:
/// `RD_COPY_GBS`, `RD_FP32_GFLOPS` (0 or unset: fractions not printed).
fn limits() -> (f64, f64) {
    let f = |n: &str| {
        std::env::var(n)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (f("RD_COPY_GBS"), f("RD_FP32_GFLOPS"))
}

fn print_ops(what: &str, times: &[OpTime], steps: usize, wall: f64, costs: &[(OpKind, u64, u64)]) {
    let (copy, fp32) = limits();
    let total: f64 = times.iter().map(|t| t.seconds).sum();
    println!(
        "{what}: device time per step {:.1} us over {} launches, wall per step {:.1} us ({:.0}% busy)",
        total * 1e6 / steps as f64,
        times.iter().map(|t| t.launches).sum::<usize>() / steps.max(1),
        wall * 1e6 / steps as f64,
        100.0 * total / wall.max(1e-12)
    );
    println!(
        "  | op | launches/step | us/launch | us/step | share | MB/step | GB/s | of copy | GFLOP/s | of FP32 |"
    );
    for t in times {
        let kind = match t.kind {
            OpKind::Embed => "embed",
            OpKind::QkvRope => "norm+qkv+rope+kv",
            OpKind::Attention => "attention",
            OpKind::OProj => "o+residual",
            OpKind::GateUpSwiglu => "norm+gate/up+swiglu",
            OpKind::Down => "down+residual",
            OpKind::Head => "norm+head",
            OpKind::Argmax => "argmax",
            OpKind::Matmul => "matmul",
            OpKind::BlockAttn => "block A (attn)",
            OpKind::BlockFfn => "block B (ffn)",
            OpKind::BlockFinish => "block finish",
            OpKind::Persistent => "persistent step",
        };
        // Bytes and FLOPs are the least the op kind must move and compute (OpCost).
        let (bytes, flops) = costs
            .iter()
            .find(|c| c.0 == t.kind)
            .map_or((0, 0), |c| (c.1, c.2));
        let (gbs, gfs) = (
            bytes as f64 / t.seconds.max(1e-12) / 1e9,
            flops as f64 / t.seconds.max(1e-12) / 1e9,
        );
        let frac = |v: f64, of: f64| {
            if of > 0.0 && v > 0.0 {
                format!("{:.0}%", 100.0 * v / of)
            } else {
                "-".into()
            }
        };
        println!(
            "  | {kind} | {:.1} | {:.2} | {:.1} | {:.0}% | {:.2} | {gbs:.1} | {} | {gfs:.1} | {} |",
            t.launches as f64 / steps as f64,
            t.seconds * 1e6 / t.launches.max(1) as f64,
            t.seconds * 1e6 / steps as f64,
            100.0 * t.seconds / total.max(1e-12),
            bytes as f64 / 1e6 / steps as f64,
            frac(gbs, copy),
            frac(gfs, fp32)
        );
    }
}

fn main() -> Res<()> {
    let layers = env_usize("RD_LAYERS", 30);
    let reps = env_usize("RD_REPS", 5).max(1);
    let pp = env_usize("RD_PP", 128).max(1);
    let tg = env_usize("RD_TG", 64).max(1);
    let profile = env_usize("RD_PROFILE", 1) != 0;
    let ty = std::env::var("RD_TYPE").unwrap_or_else(|_| "q4_1".into());
    let shape = std::env::var("RD_SHAPE").unwrap_or_else(|_| "smollm2".into());
    let head_ty = match std::env::var("RD_HEAD").as_deref() {
        Err(_) | Ok("tied") => None,
        Ok("q8_0") => Some(GgmlType::Q8_0),
        Ok("q4_0") => Some(GgmlType::Q4_0),
        Ok("q6_k") => Some(GgmlType::Q6K),
        Ok(o) => return Err(format!("RD_HEAD={o}: not one of tied q8_0 q4_0 q6_k").into()),
    };
    let wide = shape != "smollm2";
    if layer_types(&ty, 0, layers, wide).is_none() {
        return Err(format!(
            "RD_TYPE={ty}: not one of q4_0 q4_1 q8_0 f16 q5_0 q5_1 q4_k_m q5_k q6_k (q4_k at the Llama shapes)"
        )
        .into());
    }
    let paths: Vec<Variant> = std::env::var("RD_PATHS")
        .unwrap_or_else(|_| "blocks,layered".into())
        .split(',')
        .filter_map(variant)
        .collect();
    let flushes: Vec<usize> = std::env::var("RD_FLUSH")
        .unwrap_or_else(|_| "0".into())
        .split(',')
        .filter_map(|f| f.trim().parse().ok())
        .collect();
    let ctx = (pp.max(tg) + 8).next_power_of_two();
    let mut cfg = config(&shape, layers, ctx)
        .ok_or_else(|| format!("RD_SHAPE={shape}: not one of smollm2 llama-1b llama-8b"))?;
    cfg.max_rows = env_usize("RD_ROWS", 128).max(1);
    let (d, dq, dkv, ff) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.d_ff);
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let t = Instant::now();
    let owned = Owned {
        embed: matrix(&mut r, GgmlType::Q8_0, cfg.vocab, d, 1.0),
        head: head_ty.map(|t| matrix(&mut r, t, cfg.vocab, d, 0.1)),
        norms: (0..d).map(|_| 0.5 + r.unit()).collect(),
        layers: (0..layers)
            .map(|l| {
                let tys = layer_types(&ty, l, layers, wide).unwrap_or([GgmlType::Q4_1; 7]);
                let shapes = [
                    (dq, d, 0.1),
                    (dkv, d, 0.1),
                    (dkv, d, 0.1),
                    (d, dq, 0.1),
                    (ff, d, 0.1),
                    (ff, d, 0.1),
                    (d, ff, 0.05),
                ];
                std::array::from_fn(|i| {
                    let (n, k, scale) = shapes[i];
                    (tys[i], matrix(&mut r, tys[i], n, k, scale))
                })
            })
            .collect(),
    };
    let w = weights(&owned, head_ty.unwrap_or(GgmlType::Q8_0));
    let tokens: Vec<u32> = (0..pp.max(tg))
        .map(|_| (r.next() % cfg.vocab as u64) as u32)
        .collect();
    eprintln!("random weights: {:.1} s", t.elapsed().as_secs_f64());
    let dev = open(false)?;
    let info = dev.info().clone();
    println!(
        "device: {} / {} | driver {} | {} | global mem {} MiB | unified {}",
        info.platform_name,
        info.name,
        info.driver_version,
        info.platform_version,
        info.global_mem_size >> 20,
        info.host_unified_memory
    );
    let plan = Decoder::memory_plan(&cfg, &w)?;
    println!(
        "model: {shape} shapes, {layers} layers, layers {ty}, embedding Q8_0, head {head_ty:?} (None: tied); weights {:.1} MiB, KV cache {:.1} MiB ({ctx} positions), scratch {:.1} MiB",
        plan.weights as f64 / 1048576.0,
        plan.kv_cache as f64 / 1048576.0,
        plan.scratch as f64 / 1048576.0
    );
    println!("pp{pp} = one {pp}-token prefill at position 0, last row's logits read back; tg{tg} = {tg} one-token steps from position 0, each waited for; medians of {reps}");
    for (path, &flush) in paths
        .iter()
        .flat_map(|p| flushes.iter().map(move |f| (p, f)))
    {
        // One path failing (e.g. decode blocks refused by this device) does not stop the others.
        let first = flush == flushes[0];
        if let Err(e) = run_path(
            &dev,
            &cfg,
            &w,
            &tokens,
            (&ty, path, flush, first),
            (pp, tg, reps, profile),
        ) {
            println!(
                "\n== decode path {}, flush every {flush}: error: {e}",
                path.name
            );
        }
    }
    Ok(())
}

/// Builds, times and (when `profile`) profiles one decode path with one flush interval.
fn run_path(
    dev: &Arc<Device>,
    cfg: &DecoderConfig,
    w: &ModelWeights<'_>,
    tokens: &[u32],
    (ty, path, flush, first): (&str, &Variant, usize, bool),
    (pp, tg, reps, profile): (usize, usize, usize, bool),
) -> Res<()> {
    let opts = DecoderOptions {
        flush_every: flush,
        fast_matmul: env_usize("RD_FAST", 1) != 0,
        int8_activations: match std::env::var("RD_I8").as_deref() {
            Ok("0") => Some(false),
            Ok("1") => Some(true),
            _ => None,
        },
        gemm_tile_rows: env_usize("RD_GEMM_ROWS", 0),
        gemv_steps: env_usize("RD_GEMV_STEPS", 0),
        ..path.opts.clone()
    };
    let t = Instant::now();
    let mut dec = Decoder::new(dev, cfg.clone(), w, opts.clone())?;
    let built = t.elapsed().as_secs_f64();
    // One prefill first (also a warm-up) for its launch count: 5 a layer + 2 on one-type
    // layers, more where Q/K/V or gate/up differ in type.
    dec.forward(&tokens[..pp], 0)?;
    let prefill_launches = dec.last_launches();
    let name = &path.name;
    println!(
        "fast matmuls {}, int8 activations {:?}, max_rows {}; notes: {:?}",
        opts.fast_matmul,
        dec.int8_activations(),
        cfg.max_rows,
        dec.notes()
    );
    println!(
            "\n== decode path {name}, flush every {flush}: build + upload {:.2} s, zero-copy {}, runs {:?} ({} groups), launches a decode step: {} (logits) / {} (argmax); a {pp}-token prefill: {}",
            built,
            dec.zero_copy(),
            dec.decode_path(),
            dec.persistent_groups().map_or("no".into(), |g| match dec.persistent_stage() {
                Some((st, head)) => format!("{g}, stages {st} floats, head in step {head}"),
                None => g.to_string(),
            }),
            dec.launches_per_token(Readout::Logits),
            dec.launches_per_token(Readout::Argmax),
            prefill_launches
        );
    let (mut pps, mut tga, mut tgl) = time_path(&mut dec, tokens, pp, tg, reps)?;
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|s| format!("{:.2}", s * 1e3))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("pp{pp} ms: {}", fmt(&pps));
    println!("tg{tg} (argmax) ms: {}", fmt(&tga));
    println!("tg{tg} (logits) ms: {}", fmt(&tgl));
    let (mp, ma, ml) = (median(&mut pps), median(&mut tga), median(&mut tgl));
    println!(
            "RESULT type={ty} path={name} flush={flush} pp{pp}={:.1} tok/s tg{tg}={:.1} tok/s tg{tg}_logits={:.1} tok/s ({:.1} us a token)",
            pp as f64 / mp,
            tg as f64 / ma,
            tg as f64 / ml,
            ma * 1e6 / tg as f64
        );
    drop(dec);
    if profile && first {
        let pdev = open(true)?;
        let mut dec = Decoder::new(&pdev, cfg.clone(), w, opts)?;
        dec.forward(&tokens[..pp], 0)?;
        dec.forward_argmax(&tokens[..1], 0)?;
        dec.set_profiling(true)?;
        let t = Instant::now();
        dec.forward(&tokens[..pp], 0)?;
        let wall = t.elapsed().as_secs_f64();
        let costs = sum_costs([dec.op_costs(pp, pp - 1, false)?]);
        print_ops(
            &format!("profiled pp{pp} ({name})"),
            &dec.take_op_times()?,
            1,
            wall,
            &costs,
        );
        let t = Instant::now();
        for p in 0..tg {
            dec.forward_argmax(&tokens[p..p + 1], p)?;
        }
        let wall = t.elapsed().as_secs_f64();
        let costs = sum_costs(
            (0..tg)
                .map(|p| dec.op_costs(1, p, true))
                .collect::<Result<Vec<_>, _>>()?,
        );
        print_ops(
            &format!("profiled tg{tg} ({name}, argmax)"),
            &dec.take_op_times()?,
            tg,
            wall,
            &costs,
        );
    }
    Ok(())
}
