//! The device-resident decoder against a plain f64 reference forward pass on small random
//! models (every weight format, both RoPE pairings, chunked prefill, decode, layer splits,
//! column matmuls), plus its bad-input and lost-device behaviour. PoCL in CI.
//!
//! Bounds: logits are compared by NMSE against the reference (f64 accumulation over weights
//! dequantized by the shared `hetero_sme::dequantize_row`, so both sides use the same weight
//! values). The device accumulates in f32 over 2-3 layers of K <= 128 sums, softmax and
//! RMSNorm: relative errors of ~1e-6 per value, an NMSE near 1e-12; the bound 1e-8 keeps
//! four orders of margin while any structural mistake (a wrong RoPE pair, KV row, head,
//! norm or epilogue) moves logits by O(1), an NMSE above 1e-3. Each row's largest deviation
//! is also bounded by 1e-4 of that row's largest logit magnitude.

use half::f16;
use hetero_opencl_kernels::decoder::{
    DecodePath, Decoder, DecoderConfig, DecoderOptions, Input, LayerWeights, MatInput, Matrix,
    ModelWeights, OpKind, Readout, Tensor,
};
use hetero_opencl_kernels::{self as ocl, reference, Device, Error, GgmlType, KvType, RopeMode};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const NMSE: f64 = 1e-8;
const MAX_REL: f64 = 1e-4;

/// The shared OpenCL device (PoCL's first enumeration is not safe from several threads).
fn device() -> Option<Arc<Device>> {
    static D: OnceLock<Result<Arc<Device>, String>> = OnceLock::new();
    let r = D.get_or_init(|| {
        let d = Device::from_env().map_err(|e| e.to_string())?;
        eprintln!(
            "OpenCL device: {} / {} (unified memory: {})",
            d.info().platform_name,
            d.info().name,
            d.info().host_unified_memory
        );
        Ok(d)
    });
    hetero_tests::require("opencl", r.as_ref().map(Arc::clone))
}

/// The default options with an f32 KV cache: the tests below compare against the f64
/// reference at f32 bounds (the f16 and q8_0 caches have their own test and bounds).
fn exact() -> DecoderOptions {
    DecoderOptions {
        kv: KvType::F32,
        timeout: TEST_TIMEOUT,
        ..DecoderOptions::default()
    }
}

/// How long a test's readback may wait before the decoder calls the device lost. The default
/// (60 s) is a GPU's: on PoCL a first launch compiles the kernel for its work-group size on
/// the CPU, and on CI's 2 cores, with the other tests of this binary compiling and running
/// beside it, one has waited over 60 s. Ten minutes still ends a hang.
const TEST_TIMEOUT: Duration = Duration::from_secs(600);

/// One device open at a time (a profiling device is a second one).
static OPEN: Mutex<()> = Mutex::new(());

fn rng(tag: u64) -> StdRng {
    StdRng::seed_from_u64(hetero_tests::seed(tag))
}

/// GGUF bytes of an `n x k` matrix of type `ty` with entries of magnitude about `scale`.
fn rand_matrix(r: &mut StdRng, ty: GgmlType, n: usize, k: usize, scale: f32) -> Vec<u8> {
    let mut w = vec![0u8; ocl::matrix_bytes(ty, n, k).unwrap()];
    let h = |v: f32| f16::from_f32(v).to_le_bytes();
    match ty {
        GgmlType::F16 => {
            for c in w.chunks_exact_mut(2) {
                c.copy_from_slice(&h(r.gen_range(-scale..scale)));
            }
        }
        _ => {
            let bb = ty.block().unwrap().1;
            for blk in w.chunks_exact_mut(bb) {
                // Random quant (and packed scale) bytes; f16 fields sized so values are about
                // `scale` (K-quants: d · sc · q with 6-bit sc, 4-6-bit q; Q6_K's i8 sc).
                r.fill(blk);
                let f = r.gen_range(0.5..1.0);
                match ty {
                    GgmlType::Q6K => {
                        blk[bb - 2..].copy_from_slice(&h(scale / (128.0 * 32.0) * f));
                    }
                    GgmlType::Q4K | GgmlType::Q5K => {
                        let qmax = if ty == GgmlType::Q4K { 7.5 } else { 15.5 };
                        blk[0..2].copy_from_slice(&h(scale / (32.0 * qmax) * f));
                        blk[2..4].copy_from_slice(&h(scale / 32.0 * f));
                    }
                    _ => {
                        let d = match ty {
                            GgmlType::Q8_0 => scale / 127.0,
                            GgmlType::Q4_1 => scale / 7.5,
                            GgmlType::Q5_1 => scale / 15.5,
                            GgmlType::Q5_0 => scale / 16.0,
                            _ => scale / 8.0,
                        } * f;
                        blk[0..2].copy_from_slice(&h(d));
                        if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
                            blk[2..4].copy_from_slice(&h(-scale * r.gen_range(0.8..1.0)));
                        }
                    }
                }
            }
        }
    }
    w
}

struct OwnedLayer {
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    w: [(GgmlType, Vec<u8>); 7], // q k v o gate up down
}

struct TestModel {
    cfg: DecoderConfig,
    embed: (GgmlType, Vec<u8>),
    layers: Vec<OwnedLayer>,
    out_norm: Vec<f32>,
    output: Option<(GgmlType, Vec<u8>)>,
}

/// Types of (embedding, layer matrices, output head or None = tied).
struct Types {
    embed: GgmlType,
    layer: GgmlType,
    output: Option<GgmlType>,
}

/// Types of (embedding, each layer's q k v o gate up down, output head or None = tied).
struct MixedTypes {
    embed: GgmlType,
    layers: Vec<[GgmlType; 7]>,
    output: Option<GgmlType>,
}

fn config(n_layer: usize, rope_mode: RopeMode, rope_dims: usize) -> DecoderConfig {
    DecoderConfig {
        n_layer,
        d_model: 64,
        d_ff: 96,
        n_head: 4,
        n_kv_head: 2,
        head_dim: 16,
        rope_dims,
        rope_theta: 10000.0,
        rope_mode,
        eps: 1e-5,
        vocab: 101, // odd: the last column pair of the head has one column
        max_context: 48,
        max_rows: 8,
        all_logits: true,
    }
}

/// A config with the widths of whole K-quant super-blocks: d_model 256, 4 heads of 64 over 2
/// kv heads (q 256, k/v 128), d_ff 512, so every matrix's rows are multiples of 256.
fn config_k(n_layer: usize, rope_mode: RopeMode, rope_dims: usize) -> DecoderConfig {
    DecoderConfig {
        d_model: 256,
        d_ff: 512,
        head_dim: 64,
        ..config(n_layer, rope_mode, rope_dims)
    }
}

impl TestModel {
    fn random(r: &mut StdRng, cfg: DecoderConfig, t: Types) -> TestModel {
        let n = cfg.n_layer;
        let mixed = MixedTypes {
            embed: t.embed,
            layers: vec![[t.layer; 7]; n],
            output: t.output,
        };
        TestModel::random_mixed(r, cfg, mixed)
    }

    fn random_mixed(r: &mut StdRng, cfg: DecoderConfig, t: MixedTypes) -> TestModel {
        TestModel::random_mixed_qk(r, cfg, t, 0.5)
    }

    /// [`TestModel::random_mixed`] with Q and K entries of magnitude about `qk` (0.5 there:
    /// attention scores of rms ~20 at d_model 256, a softmax close to an argmax).
    fn random_mixed_qk(r: &mut StdRng, cfg: DecoderConfig, t: MixedTypes, qk: f32) -> TestModel {
        let (d, dq, dkv, ff) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.d_ff);
        let norm = |r: &mut StdRng| (0..d).map(|_| r.gen_range(0.5f32..1.5)).collect::<Vec<_>>();
        let mut layers = Vec::new();
        for ty in &t.layers[..cfg.n_layer] {
            let mut m = |i: usize, n, k, s| (ty[i], rand_matrix(r, ty[i], n, k, s));
            let w = [
                m(0, dq, d, qk),
                m(1, dkv, d, qk),
                m(2, dkv, d, 0.5),
                m(3, d, dq, 0.3),
                m(4, ff, d, 0.3),
                m(5, ff, d, 0.3),
                m(6, d, ff, 0.2),
            ];
            layers.push(OwnedLayer {
                attn_norm: norm(r),
                ffn_norm: norm(r),
                w,
            });
        }
        TestModel {
            embed: (t.embed, rand_matrix(r, t.embed, cfg.vocab, d, 1.0)),
            output: t
                .output
                .map(|ty| (ty, rand_matrix(r, ty, cfg.vocab, d, 0.3))),
            out_norm: norm(r),
            layers,
            cfg,
        }
    }

    fn weights(&self) -> ModelWeights<'_> {
        fn t(w: &(GgmlType, Vec<u8>)) -> Tensor<'_> {
            Tensor {
                ty: w.0,
                data: &w.1,
            }
        }
        ModelWeights {
            embed: t(&self.embed),
            layers: self
                .layers
                .iter()
                .map(|l| LayerWeights {
                    attn_norm: &l.attn_norm,
                    wq: t(&l.w[0]),
                    wk: t(&l.w[1]),
                    wv: t(&l.w[2]),
                    wo: t(&l.w[3]),
                    ffn_norm: &l.ffn_norm,
                    gate: t(&l.w[4]),
                    up: t(&l.w[5]),
                    down: t(&l.w[6]),
                })
                .collect(),
            output_norm: &self.out_norm,
            output: self.output.as_ref().map(t),
        }
    }

    /// The decoder with `opts`; f32 activations unless `opts` asks otherwise (the bounds
    /// here are f32 rounding's; int8 activations, which `None` picks on devices with a
    /// hardware int8 dot product, are tested against their own bound).
    fn decoder(&self, dev: &Arc<Device>, mut opts: DecoderOptions) -> Decoder {
        opts.int8_activations.get_or_insert(false);
        if opts.timeout == DecoderOptions::default().timeout {
            opts.timeout = TEST_TIMEOUT;
        }
        Decoder::new(dev, self.cfg.clone(), &self.weights(), opts).expect("decoder")
    }
}

/// `(ty, bytes)` dequantized to `n` rows of `k`.
fn deq(w: &(GgmlType, Vec<u8>), n: usize, k: usize) -> Vec<f32> {
    let rb = ocl::row_bytes(w.0, k).unwrap();
    let mut out = vec![0f32; n * k];
    for r in 0..n {
        reference::dequantize_row(
            w.0,
            &w.1[r * rb..(r + 1) * rb],
            k,
            &mut out[r * k..(r + 1) * k],
        )
        .unwrap();
    }
    out
}

fn matvec(w: &[f32], n: usize, k: usize, x: &[f64]) -> Vec<f64> {
    (0..n)
        .map(|r| (0..k).map(|i| w[r * k + i] as f64 * x[i]).sum())
        .collect()
}

fn rmsnorm(x: &[f64], g: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter().zip(g).map(|(v, g)| v * inv * *g as f64).collect()
}

fn rope(v: &mut [f64], pos: usize, c: &DecoderConfig) {
    let half = c.rope_dims / 2;
    for head in v.chunks_exact_mut(c.head_dim) {
        for i in 0..half {
            let (a, b) = match c.rope_mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let ang = pos as f64 * (c.rope_theta as f64).powf(-2.0 * i as f64 / c.rope_dims as f64);
            let (s, co) = ang.sin_cos();
            let (x, y) = (head[a], head[b]);
            head[a] = x * co - y * s;
            head[b] = x * s + y * co;
        }
    }
}

/// Plain f64 forward pass: the hidden rows after `n_layers` layers and every position's logits.
struct RefOut {
    hidden: Vec<Vec<f64>>,
    logits: Vec<Vec<f32>>,
}

fn ref_forward(m: &TestModel, tokens: &[u32], n_layers: usize) -> RefOut {
    let c = &m.cfg;
    let (d, dq, dkv, ff, hd) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff, c.head_dim);
    let emb = deq(&m.embed, c.vocab, d);
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            emb[t as usize * d..(t as usize + 1) * d]
                .iter()
                .map(|&v| v as f64)
                .collect()
        })
        .collect();
    for l in &m.layers[..n_layers] {
        let w: Vec<Vec<f32>> = [
            (dq, d),
            (dkv, d),
            (dkv, d),
            (d, dq),
            (ff, d),
            (ff, d),
            (d, ff),
        ]
        .iter()
        .zip(&l.w)
        .map(|(&(n, k), w)| deq(w, n, k))
        .collect();
        let mut ks = Vec::new();
        let mut vs = Vec::new();
        let mut qs = Vec::new();
        for (t, xt) in x.iter().enumerate() {
            let h = rmsnorm(xt, &l.attn_norm, c.eps);
            let mut q = matvec(&w[0], dq, d, &h);
            let mut k = matvec(&w[1], dkv, d, &h);
            rope(&mut q, t, c);
            rope(&mut k, t, c);
            qs.push(q);
            ks.push(k);
            vs.push(matvec(&w[2], dkv, d, &h));
        }
        let group = c.n_head / c.n_kv_head;
        for t in 0..x.len() {
            let mut att = vec![0f64; dq];
            for h in 0..c.n_head {
                let kh = h / group;
                let q = &qs[t][h * hd..(h + 1) * hd];
                let s: Vec<f64> = (0..=t)
                    .map(|j| {
                        q.iter()
                            .zip(&ks[j][kh * hd..(kh + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|v| (v - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                for i in 0..hd {
                    att[h * hd + i] = (0..=t).map(|j| e[j] / z * vs[j][kh * hd + i]).sum();
                }
            }
            let o = matvec(&w[3], d, dq, &att);
            x[t].iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let h = rmsnorm(&x[t], &l.ffn_norm, c.eps);
            let g = matvec(&w[4], ff, d, &h);
            let u = matvec(&w[5], ff, d, &h);
            let a: Vec<f64> = g
                .iter()
                .zip(&u)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let o = matvec(&w[6], d, ff, &a);
            x[t].iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        }
    }
    let head = m.output.as_ref().unwrap_or(&m.embed);
    let hw = deq(head, c.vocab, d);
    let logits = x
        .iter()
        .map(|xt| {
            matvec(&hw, c.vocab, d, &rmsnorm(xt, &m.out_norm, c.eps))
                .into_iter()
                .map(|v| v as f32)
                .collect()
        })
        .collect();
    RefOut { hidden: x, logits }
}

fn check_logits(what: &str, got: &[f32], want: &[f32]) {
    check_logits_within(what, got, want, NMSE, MAX_REL)
}

/// [`check_logits`] with bounds of its own (an NMSE and a largest deviation relative to the
/// row's largest logit).
fn check_logits_within(what: &str, got: &[f32], want: &[f32], nmse: f64, max_rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what}: non-finite logits"
    );
    let e = reference::nmse(got, want);
    assert!(e <= nmse, "{what}: NMSE {e:e} > {nmse:e}");
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
    let dev = got
        .iter()
        .zip(want)
        .fold(0f64, |a, (g, w)| a.max((*g as f64 - *w as f64).abs()));
    assert!(
        dev <= max_rel * scale,
        "{what}: max deviation {dev:e} > {max_rel:e} x {scale}"
    );
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = (0usize, f32::NEG_INFINITY);
    for (i, &x) in v.iter().enumerate() {
        if x > best.1 {
            best = (i, x);
        }
    }
    best.0 as u32
}

/// Gap between the largest and second largest value, relative to the largest magnitude.
fn margin(v: &[f32]) -> f32 {
    let mut s: Vec<f32> = v.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    (s[0] - s[1]) / s[0].abs().max(1e-6)
}

fn tokens(r: &mut StdRng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|_| r.gen_range(0..vocab as u32)).collect()
}

/// Prefill `p` tokens (chunks of max_rows when longer), then decode the rest one by one, each
/// step's last-row logits against the reference at that position.
fn prefill_then_decode(dec: &mut Decoder, model: &TestModel, toks: &[u32], p: usize, what: &str) {
    let want = ref_forward(model, toks, model.cfg.n_layer).logits;
    let got = dec.forward(&toks[..p], 0).unwrap().to_vec();
    check_logits(&format!("{what}: prefill {p}"), &got, &want[p - 1]);
    for t in p..toks.len() {
        let got = dec.forward(&toks[t..t + 1], t).unwrap().to_vec();
        check_logits(&format!("{what}: decode at {t}"), &got, &want[t]);
    }
}

/// Whether the persistent decode step is tested on this device: on a GPU always; on a CPU
/// device (PoCL) only with `HETERO_TEST_PERSISTENT_CPU=1`, because PoCL 3.1's compiler spent
/// over 20 CPU-minutes on the persistent kernel without finishing (its work-group passes over
/// the kernel's many barriers; the shared dev VM, 2026-12-01), and `Auto` never picks the step
/// on CPU devices. The step's tests all passed on NVIDIA (the H200). Says so when it skips.
fn persistent_here(dev: &Device) -> bool {
    let on =
        !dev.info().is_cpu || std::env::var("HETERO_TEST_PERSISTENT_CPU").is_ok_and(|v| v == "1");
    if !on {
        println!(
            "persistent step not tested on this CPU device (PoCL compiles it for over 20 \
             minutes; set HETERO_TEST_PERSISTENT_CPU=1 to run it)"
        );
    }
    on
}

/// Every decode path this device tests: layered, decode blocks, and the persistent step where
/// [`persistent_here`] says so.
fn decode_paths(dev: &Device) -> impl Iterator<Item = DecodePath> {
    let persistent = persistent_here(dev);
    [
        DecodePath::Layered,
        DecodePath::Blocks,
        DecodePath::Persistent,
    ]
    .into_iter()
    .filter(move |&d| d != DecodePath::Persistent || persistent)
}

/// SmolLM2's layout (Q4_1 layers, Q8_0 embedding tied to the head), normal RoPE: prefill
/// lengths 1, 5, 8 (one whole chunk) and 19 (three chunks of max_rows 8), then decode steps;
/// decode steps layered, in decode blocks and persistent, staged and zero-copy host buffers
/// alike.
#[test]
fn q4_1_tied_q8_0_prefill_and_decode_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(21);
    let model = TestModel::random(
        &mut r,
        config(2, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    let toks = tokens(&mut r, 24, model.cfg.vocab);
    // A decoder can move to the thread that runs it (an engine's GPU worker).
    fn sendable<T: Send + 'static>(_: &T) {}
    for (zero_copy, decode) in [
        (true, DecodePath::Layered),
        (false, DecodePath::Layered),
        (true, DecodePath::Blocks),
        (false, DecodePath::Blocks),
        (true, DecodePath::Persistent),
        (false, DecodePath::Persistent),
    ]
    .into_iter()
    .filter(|&(_, d)| d != DecodePath::Persistent || persistent_here(&dev))
    {
        let mut dec = model.decoder(
            &dev,
            DecoderOptions {
                zero_copy: Some(zero_copy),
                decode,
                // Staged: also submit every 3 launches (what a batching driver may need).
                flush_every: if zero_copy { 0 } else { 3 },
                ..exact()
            },
        );
        sendable(&dec);
        assert_eq!(dec.zero_copy(), zero_copy);
        assert_eq!(dec.decode_blocks_on(), decode == DecodePath::Blocks);
        assert_eq!(dec.decode_path(), decode);
        for p in [1, 5, 8, 19] {
            let n = if p == 19 { 24 } else { p + 2 };
            let what = format!("zero_copy {zero_copy}, {decode:?}");
            prefill_then_decode(&mut dec, &model, &toks[..n], p, &what);
        }
        // One decode step: the gather, five launches a layer (or two, and the final sum), the
        // head; or one persistent launch.
        dec.forward(&toks[..1], 0).unwrap();
        if decode == DecodePath::Persistent {
            assert_eq!(dec.last_launches(), 1);
            assert_eq!(dec.launches_per_token(Readout::Logits), 1);
            assert_eq!(dec.launches_per_token(Readout::Argmax), 1);
            continue;
        }
        let per = if decode == DecodePath::Blocks {
            2 * 2 + 1
        } else {
            5 * 2
        };
        assert_eq!(dec.last_launches() as usize, 1 + per + 1);
        assert_eq!(dec.launches_per_token(Readout::Logits), 1 + per + 1);
        assert_eq!(dec.launches_per_token(Readout::Argmax), 1 + per + 2);
    }
}

/// Every other format: Q4_0 layers with an untied F16 head and a Q4_0 embedding (GGUF-layout
/// gather), Q8_0 throughout (tied), F16 throughout (untied, Q4_1 embedding); NeoX RoPE with
/// partial rotary dims (8 of 16) on one of them.
#[test]
fn other_formats_and_neox_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(22);
    let cases = [
        (
            GgmlType::Q4_0,
            GgmlType::Q4_0,
            Some(GgmlType::F16),
            RopeMode::Normal,
            16,
        ),
        (GgmlType::Q8_0, GgmlType::Q8_0, None, RopeMode::Neox, 8),
        (
            GgmlType::Q4_1,
            GgmlType::F16,
            Some(GgmlType::F16),
            RopeMode::Neox,
            16,
        ),
        (
            GgmlType::F16,
            GgmlType::Q4_1,
            Some(GgmlType::Q4_0),
            RopeMode::Normal,
            8,
        ),
    ];
    for (embed, layer, output, mode, rd) in cases {
        let model = TestModel::random(
            &mut r,
            config(2, mode, rd),
            Types {
                embed,
                layer,
                output,
            },
        );
        let toks = tokens(&mut r, 13, model.cfg.vocab);
        for decode in decode_paths(&dev) {
            let opts = DecoderOptions { decode, ..exact() };
            let mut dec = model.decoder(&dev, opts);
            let what = format!(
                "embed {embed}, layers {layer}, head {output:?}, {mode:?} {rd}, {decode:?}"
            );
            prefill_then_decode(&mut dec, &model, &toks, 11, &what);
        }
    }
}

/// Q5_0, Q5_1, Q4_K, Q5_K and Q6_K layers, each with an embedding (and head) of another of
/// them, so every format runs in every decoder kernel: the GEMV and GEMM matmuls (norm fused
/// or not, every epilogue), the gather from GGUF bytes (untied) and from the head's copy
/// (tied), the head, and decode blocks A and B; decode layered and in blocks, zero-copy and
/// staged host buffers. K-quant models have widths of whole super-blocks (`config_k`); one of
/// them uses NeoX RoPE over half the head. Prefill of 11 (chunks of 8 and 3), then two steps.
#[test]
fn q5_and_k_quant_formats_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(29);
    use GgmlType::*;
    let cases = [
        (Q5_1, Q5_0, Some(Q5_0), config(2, RopeMode::Normal, 16)),
        (Q5_0, Q5_1, None, config(2, RopeMode::Normal, 16)),
        (Q6K, Q4K, None, config_k(2, RopeMode::Normal, 64)),
        (Q4K, Q5K, Some(Q5K), config_k(2, RopeMode::Neox, 32)),
        (Q5K, Q6K, None, config_k(2, RopeMode::Normal, 64)),
    ];
    for (embed, layer, output, cfg) in cases {
        let t = Types {
            embed,
            layer,
            output,
        };
        let model = TestModel::random(&mut r, cfg, t);
        let toks = tokens(&mut r, 13, model.cfg.vocab);
        for (zero_copy, decode) in [
            (true, DecodePath::Layered),
            (false, DecodePath::Layered),
            (true, DecodePath::Blocks),
            (false, DecodePath::Blocks),
        ] {
            let opts = DecoderOptions {
                zero_copy: Some(zero_copy),
                decode,
                ..exact()
            };
            let mut dec = model.decoder(&dev, opts);
            assert_eq!(dec.decode_blocks_on(), decode == DecodePath::Blocks);
            let what = format!(
                "embed {embed}, layers {layer}, head {output:?}, {decode:?}, zero_copy {zero_copy}"
            );
            prefill_then_decode(&mut dec, &model, &toks, 11, &what);
        }
    }
}

/// A mixed-type model as llama.cpp's Q4_K_M files are: layer 0 with Q/K in Q4_K and V in Q6_K
/// (two Q/K/V runs), gate Q4_K and up Q6_K (gate stored, then up's epilogue applies SwiGLU),
/// down Q6_K; layer 1 with three Q/K/V types (three runs), Q5_1 O, Q5_K gate/up (fused),
/// Q4_K down; a Q8_0 embedding tied to the head. Prefill and decode against the reference;
/// one more launch per extra run; decode blocks refused (they need one type a layer) and Auto
/// falling back to layered; every matrix's column hook.
#[test]
fn mixed_type_layers_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(30);
    use GgmlType::*;
    let t = MixedTypes {
        embed: Q8_0,
        layers: vec![
            [Q4K, Q4K, Q6K, Q4K, Q4K, Q6K, Q6K],
            [Q5_0, Q8_0, Q5_0, Q5_1, Q5K, Q5K, Q4K],
        ],
        output: None,
    };
    let model = TestModel::random_mixed(&mut r, config_k(2, RopeMode::Normal, 64), t);
    let toks = tokens(&mut r, 14, model.cfg.vocab);
    for zero_copy in [true, false] {
        let opts = DecoderOptions {
            zero_copy: Some(zero_copy),
            ..exact()
        };
        let mut dec = model.decoder(&dev, opts);
        prefill_then_decode(
            &mut dec,
            &model,
            &toks,
            11,
            &format!("mixed, zero_copy {zero_copy}"),
        );
        // Layer 0: 2 Q/K/V runs + attention + O + gate + up + down; layer 1: 3 runs + 4.
        assert!(!dec.decode_blocks_on());
        assert_eq!(dec.last_launches(), 1 + 7 + 7 + 1);
        assert_eq!(dec.launches_per_token(Readout::Logits), 16);
    }
    let blocks = DecoderOptions {
        decode: DecodePath::Blocks,
        ..exact()
    };
    assert!(matches!(
        Decoder::new(&dev, model.cfg.clone(), &model.weights(), blocks),
        Err(Error::NotApplicable(_))
    ));
    // The column hook over split runs and split gate/up, one row and several.
    let c = model.cfg.clone();
    let (d, dq, dkv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff);
    let mut dec = model.decoder(&dev, exact());
    for (layer, l) in model.layers.iter().enumerate() {
        let cases: [Case<'_>; 7] = [
            (Matrix::Q, 0, dq, d, Some(&l.attn_norm)),
            (Matrix::K, 1, dkv, d, None),
            (Matrix::V, 2, dkv, d, Some(&l.attn_norm)),
            (Matrix::O, 3, d, dq, None),
            (Matrix::Gate, 4, ff, d, None),
            (Matrix::Up, 5, ff, d, Some(&l.ffn_norm)),
            (Matrix::Down, 6, d, ff, None),
        ];
        for (which, wi, n, k, norm) in cases {
            let w = deq(&l.w[wi], n, k);
            for (m, cols) in [(1, 3..n - 5), (3, n / 2..n)] {
                let x: Vec<f32> = (0..m * k).map(|_| r.gen_range(-2.0f32..2.0)).collect();
                let mut want = Vec::new();
                for row in x.chunks_exact(k) {
                    let xr: Vec<f64> = row.iter().map(|&v| v as f64).collect();
                    let xr = match norm {
                        Some(g) => rmsnorm(&xr, g, c.eps),
                        None => xr,
                    };
                    want.extend(
                        matvec(&w, n, k, &xr)[cols.clone()]
                            .iter()
                            .map(|&v| v as f32),
                    );
                }
                let mut got = vec![f32::NAN; m * cols.len()];
                dec.matmul_rows(
                    layer,
                    which,
                    cols.clone(),
                    MatInput::Host(&x),
                    m,
                    norm.is_some(),
                    &mut got,
                )
                .unwrap();
                check_logits(
                    &format!("layer {layer} {which:?} {m} rows {cols:?}"),
                    &got,
                    &want,
                );
            }
        }
    }
}

/// Every row's logits and argmax from one prefill chunk, and the last-row argmax readout (the
/// only value read back) equal to the reference's argmax where its margin is not a near-tie.
#[test]
fn all_rows_readout_and_argmax_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(23);
    let model = TestModel::random(
        &mut r,
        config(2, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    let toks = tokens(&mut r, 7, model.cfg.vocab);
    let want = ref_forward(&model, &toks, 2).logits;
    let v = model.cfg.vocab;
    let mut dec = model.decoder(&dev, exact());
    dec.enqueue(Input::Tokens(&toks), 0, 0..2, Readout::AllArgmax)
        .unwrap();
    let ids = dec.argmax().unwrap().to_vec();
    let all = dec.logits().unwrap().to_vec();
    for t in 0..toks.len() {
        check_logits(&format!("row {t}"), &all[t * v..(t + 1) * v], &want[t]);
        // Near-ties (relative gap below 1e-4, the logits' own bound) may flip legitimately.
        if margin(&want[t]) > 1e-4 {
            assert_eq!(ids[t], argmax(&want[t]), "argmax of row {t}");
        }
    }
    let id = dec.forward_argmax(&toks, 0).unwrap();
    assert_eq!(
        dec.last_launches(),
        5 * 2 + 3,
        "a prefill step runs layered"
    );
    if margin(&want[6]) > 1e-4 {
        assert_eq!(id, argmax(&want[6]));
    }
    // Reading what the step did not produce is a typed error.
    dec.enqueue(Input::Tokens(&toks[..1]), 0, 0..2, Readout::Logits)
        .unwrap();
    assert!(matches!(dec.argmax(), Err(Error::NotApplicable(_))));
    assert!(matches!(dec.hidden(), Err(Error::NotApplicable(_))));
}

/// A model split by layers: layers 0..1 from tokens read back as hidden rows, then layers
/// 1..3 from those rows (run_layers), then the head; equal to the reference's hidden rows and
/// logits; and the cache each part wrote serves a following decode step.
#[test]
fn layer_range_split_matches_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(24);
    let model = TestModel::random(
        &mut r,
        config(3, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    let d = model.cfg.d_model;
    let toks = tokens(&mut r, 7, model.cfg.vocab);
    let mut dec = model.decoder(&dev, exact());
    dec.enqueue(Input::Tokens(&toks[..6]), 0, 0..1, Readout::Hidden)
        .unwrap();
    let h1 = dec.hidden().unwrap().to_vec();
    let want1 = ref_forward(&model, &toks[..6], 1).hidden;
    let flat1: Vec<f32> = want1.iter().flatten().map(|&v| v as f32).collect();
    check_logits("hidden after layer 0", &h1, &flat1);
    let mut h3 = vec![0f32; h1.len()];
    dec.run_layers(1..3, &h1, 0, &mut h3).unwrap();
    let want3 = ref_forward(&model, &toks[..6], 3);
    let flat3: Vec<f32> = want3.hidden.iter().flatten().map(|&v| v as f32).collect();
    check_logits("hidden after layer 2", &h3, &flat3);
    dec.enqueue(Input::Hidden(&h3[5 * d..]), 5, 3..3, Readout::Logits)
        .unwrap();
    check_logits("head on hidden", dec.logits().unwrap(), &want3.logits[5]);
    // Position 6 decodes over the caches both parts filled.
    let want = ref_forward(&model, &toks, 3).logits;
    check_logits(
        "decode after split",
        dec.forward(&toks[6..7], 6).unwrap(),
        &want[6],
    );
}

/// A column-hook case: (matrix, index into the layer's weights (7: the head), rows, columns,
/// its norm).
type Case<'a> = (Matrix, usize, usize, usize, Option<&'a [f32]>);

/// The column-split hook: column ranges of every resident matrix, from host rows and from the
/// resident activations, one row (GEMV) and several (GEMM), with and without the fused norm.
#[test]
fn matmul_rows_matches_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(25);
    let model = TestModel::random(
        &mut r,
        config(2, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    let c = model.cfg.clone();
    let (d, dq, dkv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff);
    let mut dec = model.decoder(&dev, exact());
    let l = &model.layers[1];
    let cases: [Case<'_>; 8] = [
        (Matrix::Q, 0, dq, d, Some(&l.attn_norm)),
        (Matrix::K, 1, dkv, d, Some(&l.attn_norm)),
        (Matrix::V, 2, dkv, d, None),
        (Matrix::O, 3, d, dq, None),
        (Matrix::Gate, 4, ff, d, Some(&l.ffn_norm)),
        (Matrix::Up, 5, ff, d, None),
        (Matrix::Down, 6, d, ff, None),
        (Matrix::Head, 7, c.vocab, d, Some(&model.out_norm)),
    ];
    for (which, wi, n, k, norm) in cases {
        let w = if wi == 7 {
            deq(&model.embed, n, k)
        } else {
            deq(&l.w[wi], n, k)
        };
        for (m, cols) in [(1, 3..n - 5), (5, 0..n), (3, n / 2..n / 2 + 1)] {
            let x: Vec<f32> = (0..m * k).map(|_| r.gen_range(-2.0f32..2.0)).collect();
            let mut want = Vec::new();
            for row in x.chunks_exact(k) {
                let xr: Vec<f64> = row.iter().map(|&v| v as f64).collect();
                let xr = match norm {
                    Some(g) => rmsnorm(&xr, g, c.eps),
                    None => xr,
                };
                let y = matvec(&w, n, k, &xr);
                want.extend(y[cols.clone()].iter().map(|&v| v as f32));
            }
            let mut got = vec![f32::NAN; m * cols.len()];
            dec.matmul_rows(
                1,
                which,
                cols.clone(),
                MatInput::Host(&x),
                m,
                norm.is_some(),
                &mut got,
            )
            .unwrap();
            check_logits(&format!("{which:?} {m} rows {cols:?}"), &got, &want);
        }
    }
    // From the resident hidden rows a step left (layers 0..1 of 4 tokens: x after layer 0).
    let toks = tokens(&mut r, 4, c.vocab);
    dec.enqueue(Input::Tokens(&toks), 0, 0..1, Readout::Hidden)
        .unwrap();
    let hid = dec.hidden().unwrap().to_vec();
    let wq = deq(&l.w[0], dq, d);
    let mut got = vec![0f32; 4 * 8];
    dec.matmul_rows(1, Matrix::Q, 8..16, MatInput::Hidden, 4, true, &mut got)
        .unwrap();
    let want: Vec<f32> = hid
        .chunks_exact(d)
        .flat_map(|row| {
            let xr: Vec<f64> = row.iter().map(|&v| v as f64).collect();
            matvec(&wq, dq, d, &rmsnorm(&xr, &l.attn_norm, c.eps))[8..16]
                .iter()
                .map(|&v| v as f32)
                .collect::<Vec<_>>()
        })
        .collect();
    check_logits("Q from resident hidden rows", &got, &want);
    // Bad calls are typed errors.
    let mut out = vec![0f32; 4];
    for e in [
        dec.matmul_rows(1, Matrix::Down, 0..4, MatInput::Hidden, 1, false, &mut out),
        dec.matmul_rows(1, Matrix::O, 0..4, MatInput::Attention, 1, true, &mut out),
        dec.matmul_rows(9, Matrix::O, 0..4, MatInput::Attention, 1, false, &mut out),
        dec.matmul_rows(1, Matrix::O, 2..2, MatInput::Attention, 1, false, &mut out),
        dec.matmul_rows(1, Matrix::O, 0..4, MatInput::Attention, 2, false, &mut out),
        dec.matmul_rows(
            1,
            Matrix::O,
            0..4,
            MatInput::Host(&[0.0; 3]),
            1,
            false,
            &mut out,
        ),
    ] {
        assert!(
            matches!(e, Err(Error::BadShape(_) | Error::NotApplicable(_))),
            "{e:?}"
        );
    }
}

/// Bad input changes nothing: typed errors before anything runs (and the decoder still works
/// afterwards); a device too small for the model or the cache, named sizes, before any
/// upload; weights that cannot be computed.
#[test]
fn bad_input_is_a_typed_error() {
    let Some(dev) = device() else { return };
    let mut r = rng(26);
    let t = Types {
        embed: GgmlType::Q8_0,
        layer: GgmlType::Q4_1,
        output: None,
    };
    let model = TestModel::random(&mut r, config(2, RopeMode::Normal, 16), t);
    let c = model.cfg.clone();
    let mut dec = model.decoder(&dev, exact());
    let ok = dec.forward(&[1, 2, 3], 0).unwrap().to_vec();
    let bad: Vec<Result<(), Error>> = vec![
        dec.enqueue(Input::Tokens(&[c.vocab as u32]), 0, 0..2, Readout::Logits),
        dec.enqueue(Input::Tokens(&[]), 0, 0..2, Readout::Logits),
        dec.enqueue(Input::Tokens(&[1]), c.max_context, 0..2, Readout::Logits),
        dec.enqueue(Input::Tokens(&[1]), 0, 1..2, Readout::Logits),
        dec.enqueue(Input::Tokens(&[1]), 0, 0..3, Readout::Logits),
        dec.enqueue(Input::Tokens(&[1]), 0, 0..1, Readout::Logits),
        dec.enqueue(Input::Hidden(&[0.0; 65]), 0, 0..2, Readout::Hidden),
        dec.enqueue(Input::Hidden(&vec![0.0; 9 * 64]), 0, 0..2, Readout::Hidden),
        dec.enqueue(Input::Tokens(&[1; 9]), 0, 0..2, Readout::AllLogits),
    ];
    for (i, e) in bad.into_iter().enumerate() {
        assert!(matches!(e, Err(Error::BadShape(_))), "case {i}: {e:?}");
    }
    // The failed calls changed nothing: the same step gives the same logits.
    assert_eq!(dec.forward(&[1, 2, 3], 0).unwrap(), &ok[..]);
    // Too little memory: named sizes, before any upload.
    let plan = Decoder::memory_plan_with(&c, &model.weights(), KvType::F32).unwrap();
    assert!(plan.weights > 0 && plan.kv_cache == 2 * 2 * 48 * 32 * 4 && plan.scratch > 0);
    // The default plan: an f16 cache, half the bytes.
    let f16_plan = Decoder::memory_plan(&c, &model.weights()).unwrap();
    assert_eq!(f16_plan.kv_cache, plan.kv_cache / 2);
    let e = Decoder::new(
        &dev,
        c.clone(),
        &model.weights(),
        DecoderOptions {
            memory_budget: Some(plan.total() - 1),
            ..exact()
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        Error::OutOfDeviceMemory {
            weights: plan.weights,
            kv_cache: plan.kv_cache,
            scratch: plan.scratch,
            available: plan.total() - 1
        }
    );
    assert!(e.to_string().contains("KV cache"), "{e}");
    // A context whose cache alone exceeds the device.
    let mut huge = c.clone();
    huge.max_context = (dev.info().global_mem_size / (2 * 2 * 32 * 4) + 1) as usize;
    assert!(matches!(
        Decoder::new(&dev, huge, &model.weights(), exact()),
        Err(Error::OutOfDeviceMemory { .. } | Error::BadShape(_))
    ));
    // Weights: wrong length, uncomputable type, K-quant rows not whole blocks, bad config.
    let mut w = model.weights();
    w.layers[1].wk.data = &w.layers[1].wk.data[1..];
    assert!(matches!(
        Decoder::new(&dev, c.clone(), &w, exact()),
        Err(Error::BadShape(_))
    ));
    let mut w = model.weights();
    w.layers[0].wo.ty = GgmlType::Q2K;
    assert_eq!(
        Decoder::new(&dev, c.clone(), &w, exact()).unwrap_err(),
        Error::UnsupportedFormat(GgmlType::Q2K)
    );
    // A K-quant matrix whose rows (d_model 64) are not whole 256-value super-blocks.
    let mut w = model.weights();
    w.layers[0].wv.ty = GgmlType::Q4K;
    let e = Decoder::new(&dev, c.clone(), &w, exact()).unwrap_err();
    assert!(
        matches!(e, Error::BadShape(ref s) if s.contains("multiple of 256")),
        "{e}"
    );
    // No layers: the head on the embedding (layered; decode blocks refuse).
    let mut zero = c.clone();
    zero.n_layer = 0;
    let mut w = model.weights();
    w.layers.clear();
    let blocks = DecoderOptions {
        decode: DecodePath::Blocks,
        ..exact()
    };
    assert!(matches!(
        Decoder::new(&dev, zero.clone(), &w, blocks),
        Err(Error::NotApplicable(_))
    ));
    let mut dec0 = Decoder::new(&dev, zero, &w, exact()).unwrap();
    let want = ref_forward(&model, &[5], 0).logits;
    check_logits("no layers", dec0.forward(&[5], 0).unwrap(), &want[0]);
    let mut odd = c.clone();
    odd.d_model = 48;
    assert!(matches!(
        Decoder::new(&dev, odd, &model.weights(), exact()),
        Err(Error::BadShape(_))
    ));
    let mut w = model.weights();
    w.layers.pop();
    assert!(matches!(
        Decoder::new(&dev, c, &w, exact()),
        Err(Error::BadShape(_))
    ));
}

/// A device that stops answering gives an error, not a hang: with the queue held by a gate,
/// the step's bounded wait (the zero-copy input map, or the staged readback) ends in
/// WaitTimeout, and the decoder then refuses work with the same error instead of touching the
/// device again. (A command that ends in an error status gives DeviceLost: proven on injected
/// statuses in the crate's unit tests, since failing a user event aborts PoCL 3.1.)
#[test]
fn hung_device_is_an_error_not_a_hang() {
    let Some(_) = device() else { return };
    let own = {
        let _one = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        // A queue of its own, so the gate holds no other test's work.
        Device::from_env_with(false).unwrap()
    };
    let mut r = rng(27);
    let model = TestModel::random(
        &mut r,
        config(1, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    for zero_copy in [true, false] {
        let opts = DecoderOptions {
            zero_copy: Some(zero_copy),
            ..exact()
        };
        let mut dec = model.decoder(&own, opts);
        // A first step with the default bound (PoCL compiles kernels at their first launch).
        let ok = dec.forward_argmax(&[3], 0).unwrap();
        dec.set_timeout(Duration::from_millis(300));
        let gate = own.gate().unwrap();
        let t0 = std::time::Instant::now();
        let e = dec
            .enqueue(Input::Tokens(&[4]), 1, 0..1, Readout::Logits)
            .and_then(|()| dec.logits().map(|_| ()))
            .unwrap_err();
        assert!(matches!(e, Error::WaitTimeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(20));
        assert_eq!(dec.lost(), Some(&e));
        assert_eq!(dec.forward(&[3], 0).unwrap_err(), e);
        assert_eq!(dec.logits().unwrap_err(), e);
        gate.open().unwrap();
        own.finish().unwrap();
        drop(dec);
        // The device itself is fine again once the gate opens: a new decoder works.
        let mut dec = model.decoder(&own, exact());
        assert_eq!(dec.forward_argmax(&[3], 0).unwrap(), ok);
    }
}

/// Per-op device time with a profiling queue: one entry per op kind, launch counts that add up
/// to the steps' launches, positive times; layered decode, decode blocks and the persistent
/// step.
#[test]
fn profiled_steps_report_device_time_per_op() {
    let Some(_) = device() else { return };
    let dev = {
        let _one = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        Device::from_env_with(true).unwrap()
    };
    let mut r = rng(28);
    let model = TestModel::random(
        &mut r,
        config(2, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    use OpKind::*;
    let prefill = [Embed, QkvRope, Attention, OProj, GateUpSwiglu, Down, Head];
    for (decode, extra, launches) in [
        (DecodePath::Layered, vec![Argmax], 12 + 13),
        (
            DecodePath::Blocks,
            vec![Argmax, BlockAttn, BlockFfn, BlockFinish],
            12 + 8,
        ),
        (DecodePath::Persistent, vec![Persistent], 12 + 1),
    ]
    .into_iter()
    .filter(|(d, _, _)| *d != DecodePath::Persistent || persistent_here(&dev))
    {
        let opts = DecoderOptions { decode, ..exact() };
        let mut dec = model.decoder(&dev, opts);
        assert!(matches!(dec.take_op_times(), Err(Error::NotApplicable(_))));
        dec.set_profiling(true).unwrap();
        dec.forward(&[1, 2, 3, 4], 0).unwrap();
        dec.forward_argmax(&[5], 4).unwrap();
        let times = dec.take_op_times().unwrap();
        let kinds: Vec<OpKind> = times.iter().map(|t| t.kind).collect();
        let want: Vec<OpKind> = prefill.iter().chain(&extra).copied().collect();
        assert_eq!(kinds, want, "{decode:?}");
        let total: usize = times.iter().map(|t| t.launches).sum();
        assert_eq!(total, launches, "{decode:?}");
        assert!(
            times.iter().all(|t| t.seconds > 0.0 && t.seconds < 10.0),
            "{times:?}"
        );
        assert!(dec.take_op_times().unwrap().is_empty());
    }
    // A device without profiling refuses.
    let Some(plain) = device() else { return };
    let mut dec = model.decoder(&plain, exact());
    assert!(matches!(
        dec.set_profiling(true),
        Err(Error::NotApplicable(_))
    ));
}

/// The persistent step on its own: greedy decisions (the argmax, the only value read back)
/// equal the reference's wherever its top-1 margin exceeds 1e-4, and the logits within the
/// bounds, with one work-group and with the default count (one per compute unit on a GPU);
/// the measurement mode that runs only the grid barriers completes; a model whose layers store
/// a matrix differently is refused (and runs layered under Auto); and on a CPU device, where
/// work-groups need not run at once, more groups than it runs together end the step with
/// GridBarrier within the bound, after which the decoder refuses work.
#[test]
fn persistent_step_argmax_groups_and_stuck_barrier() {
    let Some(dev) = device() else { return };
    if !persistent_here(&dev) {
        return;
    }
    let mut r = rng(29);
    let t = Types {
        embed: GgmlType::Q8_0,
        layer: GgmlType::Q4_1,
        output: None,
    };
    let model = TestModel::random(&mut r, config(3, RopeMode::Normal, 16), t);
    let toks = tokens(&mut r, 20, model.cfg.vocab);
    let want = ref_forward(&model, &toks, 3).logits;
    for groups in [1, 0] {
        let opts = DecoderOptions {
            decode: DecodePath::Persistent,
            persistent_groups: groups,
            ..exact()
        };
        let mut dec = model.decoder(&dev, opts);
        assert!(dec.persistent_groups().is_some_and(|g| g >= 1));
        dec.forward(&toks[..4], 0).unwrap();
        let mut compared = 0;
        for p in 4..toks.len() {
            let id = dec.forward_argmax(&toks[p..p + 1], p).unwrap();
            let what = format!("groups {groups}: decode at {p}");
            check_logits(&what, dec.logits().unwrap(), &want[p]);
            if margin(&want[p]) > 1e-4 {
                assert_eq!(id, argmax(&want[p]), "{what}");
                compared += 1;
            }
        }
        assert!(compared >= 8, "only {compared} decisions compared");
    }
    // Barriers alone (a measurement mode): the step completes.
    let opts = DecoderOptions {
        decode: DecodePath::Persistent,
        persistent_barriers_only: true,
        ..exact()
    };
    let mut dec = model.decoder(&dev, opts);
    dec.forward_argmax(&toks[..1], 0).unwrap();
    // One layer's o stored differently: refused when forced, layered under Auto.
    let c = model.cfg.clone();
    let q8 = rand_matrix(&mut r, GgmlType::Q8_0, c.d_model, c.q_dim(), 0.3);
    let mut w = model.weights();
    w.layers[1].wo = Tensor {
        ty: GgmlType::Q8_0,
        data: &q8,
    };
    let forced = DecoderOptions {
        decode: DecodePath::Persistent,
        ..exact()
    };
    assert!(matches!(
        Decoder::new(&dev, c.clone(), &w, forced),
        Err(Error::NotApplicable(s)) if s.contains("alike")
    ));
    let dec = Decoder::new(&dev, c, &w, exact()).unwrap();
    assert_ne!(dec.decode_path(), DecodePath::Persistent);
    if !dev.info().is_cpu {
        println!("stuck-barrier case: runs on CPU devices only (a GPU holds these groups)");
        return;
    }
    let opts = DecoderOptions {
        decode: DecodePath::Persistent,
        persistent_groups: 64,
        ..exact()
    };
    let mut dec = model.decoder(&dev, opts);
    let t0 = std::time::Instant::now();
    let e = dec.forward_argmax(&toks[..1], 0).unwrap_err();
    println!("64 groups on a CPU device: {e} after {:?}", t0.elapsed());
    assert_eq!(e, Error::GridBarrier { groups: 64 });
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert_eq!(dec.lost(), Some(&e));
    assert_eq!(dec.forward(&toks[..1], 0).unwrap_err(), e);
}

/// The persistent step runs only layers with one Q/K/V type and one gate/up type, in the
/// formats it has GEMVs for (F16, Q8_0, Q4_0, Q4_1): a model with V of another type than Q/K,
/// one with gate and up of different types, and a single-typed Q5_0 model are each refused
/// with NotApplicable when the step is asked for, and build (not persistent) under Auto. The
/// refusal comes before the step's kernel is built, so this runs on CPU devices too.
#[test]
fn persistent_step_refuses_mixed_and_unsupported_layers() {
    let Some(dev) = device() else { return };
    let mut r = rng(33);
    use GgmlType::*;
    let cases: [([GgmlType; 7], &str); 3] = [
        (
            [Q4_1, Q4_1, Q8_0, Q4_1, Q4_1, Q4_1, Q4_1],
            "Q/K/V of one type",
        ),
        (
            [Q4_1, Q4_1, Q4_1, Q4_1, Q8_0, Q4_1, Q4_1],
            "gate/up of one type",
        ),
        ([Q5_0; 7], "F16, Q8_0, Q4_0 and Q4_1"),
    ];
    for (layer, why) in cases {
        let t = MixedTypes {
            embed: Q8_0,
            layers: vec![layer; 2],
            output: None,
        };
        let model = TestModel::random_mixed(&mut r, config(2, RopeMode::Normal, 16), t);
        let forced = DecoderOptions {
            decode: DecodePath::Persistent,
            ..exact()
        };
        match Decoder::new(&dev, model.cfg.clone(), &model.weights(), forced) {
            Err(Error::NotApplicable(s)) => assert!(s.contains(why), "{layer:?}: {s}"),
            other => panic!("{layer:?}: persistent not refused: {other:?}"),
        }
        let dec = model.decoder(&dev, exact());
        assert_ne!(dec.decode_path(), DecodePath::Persistent, "{layer:?}");
    }
}

/// The device argmax flags non-finite logits (issue 17's guard on the resident path): with a
/// NaN scale in one row of a Q8_0 embedding tied to the head (SmolLM2's layout, so the
/// persistent kernel is the one the other tests build), that token's logit is NaN at every
/// position (the token itself is never fed), so `forward_argmax` (layered, decode blocks,
/// persistent), the all-rows argmax readout of a prefill chunk, and the one-row readout after it
/// end in NonFiniteLogits naming the row; the logits stay readable (holding the one NaN) and
/// the decoder still runs. With the NaN gone the same steps give a token again.
#[test]
fn device_argmax_flags_non_finite_logits() {
    let Some(dev) = device() else { return };
    let mut r = rng(31);
    let mut model = TestModel::random(
        &mut r,
        config(2, RopeMode::Normal, 16),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_1,
            output: None,
        },
    );
    let (d, v) = (model.cfg.d_model, model.cfg.vocab);
    let bad = 37;
    let toks: Vec<u32> = tokens(&mut r, 6, v)
        .into_iter()
        .map(|t| if t as usize == bad { 0 } else { t })
        .collect();
    let clean = model.embed.1.clone();
    // The f16 scale of row `bad`'s first Q8_0 block (34 bytes: scale, 32 int8): a quiet NaN.
    let at = bad * (d / 32) * 34;
    model.embed.1[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    for decode in decode_paths(&dev) {
        let what = format!("{decode:?}");
        let opts = DecoderOptions { decode, ..exact() };
        let mut dec = model.decoder(&dev, opts.clone());
        assert_eq!(dec.decode_path(), decode, "{what}");
        dec.enqueue(Input::Tokens(&toks[..4]), 0, 0..2, Readout::AllArgmax)
            .unwrap();
        assert_eq!(
            dec.argmax().unwrap_err(),
            Error::NonFiniteLogits { row: 0 },
            "{what}"
        );
        assert!(dec.logits().unwrap()[bad].is_nan(), "{what}");
        for p in 4..6 {
            let e = dec.forward_argmax(&toks[p..p + 1], p).unwrap_err();
            assert_eq!(e, Error::NonFiniteLogits { row: 0 }, "{what} at {p}");
            let l = dec.logits().unwrap();
            assert!(l[bad].is_nan(), "{what} at {p}");
            assert_eq!(l.iter().filter(|x| !x.is_finite()).count(), 1, "{what}");
        }
        assert!(dec.lost().is_none(), "{what}");
    }
    // Without the NaN: a token, no flag left over.
    model.embed.1 = clean;
    for decode in decode_paths(&dev) {
        let opts = DecoderOptions { decode, ..exact() };
        let mut dec = model.decoder(&dev, opts);
        dec.forward(&toks[..4], 0).unwrap();
        for p in 4..6 {
            let id = dec.forward_argmax(&toks[p..p + 1], p).unwrap();
            assert!((id as usize) < v, "{decode:?}");
        }
    }
}

/// Llama-3.2-1B's (`wide` false) or Llama-3-8B's widths (d 2048 / 4096, kv 512 / 1024, d_ff
/// 8192 / 14336, heads of 64 / 128) with a small vocabulary and context, so the reference
/// stays cheap.
fn config_llama(n_layer: usize, eight_b: bool) -> DecoderConfig {
    let (d, ff) = if eight_b { (4096, 14336) } else { (2048, 8192) };
    DecoderConfig {
        n_layer,
        d_model: d,
        d_ff: ff,
        n_head: 32,
        n_kv_head: 8,
        head_dim: d / 32,
        rope_dims: d / 32,
        rope_theta: 500000.0,
        rope_mode: RopeMode::Normal,
        eps: 1e-5,
        vocab: 515,
        max_context: 24,
        max_rows: 8,
        all_logits: false,
    }
}

/// The persistent step with its activation rows staged in chunks (what a device whose local
/// memory cannot hold a row needs: 48 KiB against Llama-3-8B's 14336-wide down projection):
/// forced down to 96 and 200 floats on small K-quant-width models (every kind's GEMV split
/// into 2-6 chunks, uneven last chunks included), Q4_0 (T layout), Q4_1, Q8_0 and F16 layers,
/// and heads the step has no GEMV for (Q6_K, Q5_0: the layered head launches follow it) or has
/// (Q4_0). Then at Llama-1B and -8B widths (one layer, Q4_0 with a Q6_K head, and Q8_0 tied),
/// with the device's own staging (layered there too, and only layered where the persistent
/// step is not tested). Logits and argmax against the reference.
#[test]
fn persistent_step_stages_rows_in_chunks_and_runs_any_head() {
    let Some(dev) = device() else { return };
    let persistent = persistent_here(&dev);
    let mut r = rng(41);
    use GgmlType::*;
    let small: [(GgmlType, Option<GgmlType>, usize); 5] = [
        (Q4_0, Some(Q6K), 96),
        (Q4_1, Some(Q4_0), 200),
        (Q8_0, None, 96),
        (F16, Some(Q5_0), 200),
        (Q4_0, None, 0),
    ];
    for (layer, output, stage) in small.into_iter().filter(|_| persistent) {
        let t = Types {
            embed: Q8_0,
            layer,
            output,
        };
        let model = TestModel::random(&mut r, config_k(2, RopeMode::Normal, 64), t);
        let toks = tokens(&mut r, 12, model.cfg.vocab);
        let mut dec = model.decoder(
            &dev,
            DecoderOptions {
                decode: DecodePath::Persistent,
                persistent_stage_floats: stage,
                ..exact()
            },
        );
        let (got_stage, head_in_step) = dec.persistent_stage().expect("persistent");
        let in_step = !matches!(output, Some(Q6K | Q5_0));
        assert_eq!(head_in_step, in_step, "{layer:?} {output:?}");
        if stage > 0 {
            assert_eq!(got_stage, stage);
        }
        let what = format!("{layer:?} layers, head {output:?}, stage {got_stage}");
        prefill_then_decode(&mut dec, &model, &toks, 3, &what);
        let want = ref_forward(&model, &toks[..4], 2).logits;
        dec.forward(&toks[..3], 0).unwrap();
        let id = dec.forward_argmax(&toks[3..4], 3).unwrap();
        if margin(&want[3]) > 1e-4 {
            assert_eq!(id, argmax(&want[3]), "{what}: argmax");
        }
        let per = if in_step { 1 } else { 3 };
        assert_eq!(dec.last_launches(), per, "{what}");
        assert_eq!(dec.launches_per_token(Readout::Argmax), per as usize);
    }
    for (eight_b, layer, output) in [
        (false, Q4_0, Some(Q6K)),
        (true, Q4_0, Some(Q6K)),
        (true, Q8_0, None),
    ] {
        let t = Types {
            embed: Q8_0,
            layer,
            output,
        };
        let model = TestModel::random(&mut r, config_llama(1, eight_b), t);
        let toks = tokens(&mut r, 6, model.cfg.vocab);
        let paths = [DecodePath::Layered, DecodePath::Persistent];
        for decode in paths
            .into_iter()
            .filter(|&d| persistent || d == DecodePath::Layered)
        {
            let mut dec = model.decoder(&dev, DecoderOptions { decode, ..exact() });
            let what = format!(
                "{} widths, {layer:?}, head {output:?}, {decode:?} (stage {:?})",
                if eight_b { "8B" } else { "1B" },
                dec.persistent_stage()
            );
            prefill_then_decode(&mut dec, &model, &toks, 2, &what);
        }
    }
}

/// `op_costs` against the counts written out by hand for a Q8_0 model (34 bytes a 32-weight
/// block): weights once, activations and the KV cache as the doc says, 2 FLOPs a
/// multiply-add; a prefill chunk and a decode step; rows or positions out of range refused.
#[test]
fn op_costs_count_bytes_and_flops() {
    let Some(dev) = device() else { return };
    let mut r = rng(43);
    use GgmlType::*;
    let t = Types {
        embed: Q8_0,
        layer: Q8_0,
        output: None,
    };
    let model = TestModel::random(&mut r, config(2, RopeMode::Normal, 16), t);
    let dec = model.decoder(&dev, exact());
    let c = &model.cfg;
    let (d, dq, dkv, ff, v, n) = (64u64, 64u64, 32u64, 96u64, 101u64, 2u64);
    assert_eq!((c.d_model, c.q_dim(), c.kv_dim(), c.d_ff), (64, 64, 32, 96));
    let q8 = |rows: u64, k: u64| rows * k / 32 * 34;
    for (rows, last) in [(5u64, 9u64), (1, 0), (1, 30)] {
        let got = dec.op_costs(rows as usize, last as usize, true).unwrap();
        let attended: u64 = (last + 2 - rows..=last + 1).sum();
        let want = [
            (OpKind::Embed, rows * d * 4, 0),
            (
                OpKind::QkvRope,
                n * (q8(dq + 2 * dkv, d) + rows * d * 4 + d * 4 + rows * (dq + 2 * dkv) * 4),
                n * 2 * rows * (dq + 2 * dkv) * d,
            ),
            (
                OpKind::Attention,
                n * (attended * 2 * dkv * 4 + rows * 2 * dq * 4),
                n * attended * 4 * dq,
            ),
            (
                OpKind::OProj,
                n * (q8(d, dq) + rows * (dq + 2 * d) * 4),
                n * 2 * rows * d * dq,
            ),
            (
                OpKind::GateUpSwiglu,
                n * (q8(2 * ff, d) + rows * d * 4 + d * 4 + rows * ff * 4),
                n * 2 * rows * 2 * ff * d,
            ),
            (
                OpKind::Down,
                n * (q8(d, ff) + rows * (ff + 2 * d) * 4),
                n * 2 * rows * d * ff,
            ),
            (OpKind::Head, q8(v, d) + d * 8 + v * 4, 2 * v * d),
            (OpKind::Argmax, v * 4 + 4, 0),
        ];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(
                (g.kind, g.bytes, g.flops),
                w,
                "{rows} rows ending at {last}"
            );
        }
    }
    assert_eq!(dec.op_costs(1, 0, false).unwrap().len(), 7);
    for (rows, last) in [(0, 3), (5, 3), (1, 48)] {
        assert!(
            matches!(dec.op_costs(rows, last, false), Err(Error::BadShape(_))),
            "{rows} rows ending at {last}"
        );
    }
}

/// An f16 (the default) and a q8_0 KV cache against the f64 reference (which keeps k and v
/// unrounded): prefill in chunks past one decode range (positions > 64, so decode steps split
/// the positions over ranges), then decode steps; layered and, for f16, in decode blocks.
/// Bounds: f16 rounds each cached k and v by <= 2^-11 relative (q8_0 by <= 1/254 of its
/// block's largest), which moves attention outputs by about that fraction of |v|, and logits
/// after two layers by a few times that (this random model's sharp softmaxes amplify it):
/// NMSE <= 1e-5 for f16 and <= 5e-3 for q8_0 (measured on PoCL: f16 8e-7 after the prefill,
/// 4e-7 decoding; q8_0 8e-4 and 1.1e-3), rows within 1e-2 / 1e-1 of their largest logit; a
/// wrong cache row, scale or block moves logits by O(1). The memory plan counts 2, resp. 1.0625 bytes a
/// cached value, and q8_0 refuses the decode blocks and the persistent step.
#[test]
fn f16_and_q8_0_kv_caches_match_reference_within_bounds() {
    let Some(dev) = device() else { return };
    let mut r = rng(61);
    let cfg = DecoderConfig {
        max_context: 80,
        ..config(2, RopeMode::Normal, 16)
    };
    let model = TestModel::random(
        &mut r,
        cfg,
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q8_0,
            output: None,
        },
    );
    let n = 76;
    let toks = tokens(&mut r, n, model.cfg.vocab);
    let want = ref_forward(&model, &toks, model.cfg.n_layer).logits;
    let p = 69;
    let f32_plan = Decoder::memory_plan_with(&model.cfg, &model.weights(), KvType::F32).unwrap();
    for (kv, nmse, max_rel, paths) in [
        (
            KvType::F16,
            1e-5,
            1e-2,
            &[DecodePath::Layered, DecodePath::Blocks][..],
        ),
        (KvType::Q8_0, 5e-3, 1e-1, &[DecodePath::Layered][..]),
    ] {
        let plan = Decoder::memory_plan_with(&model.cfg, &model.weights(), kv).unwrap();
        let values = 2 * 2 * 80 * model.cfg.kv_dim() as u64;
        assert_eq!(f32_plan.kv_cache, values * 4);
        let per = if kv == KvType::F16 { 2.0 } else { 34.0 / 32.0 };
        assert_eq!(plan.kv_cache, (values as f64 * per) as u64, "{kv}");
        for &decode in paths {
            let opts = DecoderOptions {
                kv,
                decode,
                ..DecoderOptions::default()
            };
            let mut dec = model.decoder(&dev, opts);
            assert_eq!(dec.plan().kv_cache, plan.kv_cache);
            let what = format!("{kv} {decode:?}");
            let got = dec.forward(&toks[..p], 0).unwrap().to_vec();
            let e = reference::nmse(&got, &want[p - 1]);
            eprintln!("{what}: prefill {p} NMSE {e:e}");
            check_logits_within(
                &format!("{what}: prefill"),
                &got,
                &want[p - 1],
                nmse,
                max_rel,
            );
            for t in p..n {
                let got = dec.forward(&toks[t..t + 1], t).unwrap().to_vec();
                if t == n - 1 {
                    eprintln!(
                        "{what}: decode {t} NMSE {:e}",
                        reference::nmse(&got, &want[t])
                    );
                }
                check_logits_within(
                    &format!("{what}: decode {t}"),
                    &got,
                    &want[t],
                    nmse,
                    max_rel,
                );
            }
            // q8_0: the staged append is one more launch a layer.
            let per_layer = if kv == KvType::Q8_0 { 6 } else { 5 };
            if decode == DecodePath::Layered {
                assert_eq!(
                    dec.launches_per_token(Readout::Logits),
                    1 + per_layer * 2 + 1
                );
            }
        }
        if kv == KvType::Q8_0 {
            for decode in [DecodePath::Blocks, DecodePath::Persistent] {
                let opts = DecoderOptions {
                    kv,
                    decode,
                    ..DecoderOptions::default()
                };
                let e = Decoder::new(&dev, model.cfg.clone(), &model.weights(), opts);
                assert!(matches!(e, Err(Error::NotApplicable(_))), "{decode:?}");
            }
            let auto = model.decoder(
                &dev,
                DecoderOptions {
                    kv,
                    ..DecoderOptions::default()
                },
            );
            assert_eq!(auto.decode_path(), DecodePath::Layered);
        }
    }
    // A q8_0 cache needs whole blocks a row: kv_dim 24 is refused.
    let odd = DecoderConfig {
        n_head: 3,
        n_kv_head: 3,
        head_dim: 8,
        d_model: 64,
        ..config(1, RopeMode::Normal, 8)
    };
    let m = TestModel::random(
        &mut r,
        odd.clone(),
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::F16,
            output: None,
        },
    );
    let opts = DecoderOptions {
        kv: KvType::Q8_0,
        ..DecoderOptions::default()
    };
    assert!(matches!(
        Decoder::new(&dev, odd, &m.weights(), opts),
        Err(Error::BadShape(_))
    ));
}

/// The device argmax split over work-groups (rows longer than 4096 values: `argmax_split`,
/// the last group of a row combining the parts) against the host's argmax of the same logits
/// (the lowest index of the largest value): a vocabulary of 9001 (three groups a row), a head
/// row copied to another group's range (so the largest logit can tie across groups; the lower
/// index must win) and its negation in the third range (so one of them is the largest), every
/// row of a prefill chunk and one-row decode steps; then a NaN in the last range is flagged.
#[test]
fn split_device_argmax_matches_the_logits() {
    let Some(dev) = device() else { return };
    let mut r = rng(32);
    let cfg = DecoderConfig {
        vocab: 9001,
        ..config(1, RopeMode::Normal, 16)
    };
    let mut model = TestModel::random(
        &mut r,
        cfg,
        Types {
            embed: GgmlType::Q8_0,
            layer: GgmlType::Q4_0,
            output: None,
        },
    );
    let d = model.cfg.d_model;
    let rb = d / 32 * 34;
    let (a, b, c) = (100usize, 8000usize, 5000usize);
    // Row a: scales x8 (so it tends to dominate); row b = row a; row c = -row a.
    let mut row: Vec<u8> = model.embed.1[a * rb..(a + 1) * rb].to_vec();
    for blk in row.chunks_exact_mut(34) {
        let s = f16::from_le_bytes([blk[0], blk[1]]).to_f32() * 8.0;
        blk[..2].copy_from_slice(&f16::from_f32(s).to_le_bytes());
        for q in &mut blk[2..] {
            *q = (*q as i8).max(-127) as u8;
        }
    }
    let neg: Vec<u8> = row
        .chunks_exact(34)
        .flat_map(|blk| {
            let mut v = blk[..2].to_vec();
            v.extend(blk[2..].iter().map(|&q| (-(q as i8)) as u8));
            v
        })
        .collect();
    model.embed.1[a * rb..(a + 1) * rb].copy_from_slice(&row);
    model.embed.1[b * rb..(b + 1) * rb].copy_from_slice(&row);
    model.embed.1[c * rb..(c + 1) * rb].copy_from_slice(&neg);
    let toks: Vec<u32> = tokens(&mut r, 8, 9001);
    let host_argmax = |l: &[f32]| {
        let mut best = 0;
        for (i, &v) in l.iter().enumerate() {
            if v > l[best] {
                best = i;
            }
        }
        best as u32
    };
    let mut dec = model.decoder(
        &dev,
        DecoderOptions {
            decode: DecodePath::Layered,
            ..DecoderOptions::default()
        },
    );
    dec.enqueue(Input::Tokens(&toks[..6]), 0, 0..1, Readout::AllArgmax)
        .unwrap();
    let got = dec.argmax().unwrap().to_vec();
    let logits = dec.logits().unwrap().to_vec();
    for (m, g) in got.iter().enumerate() {
        let want = host_argmax(&logits[m * 9001..(m + 1) * 9001]);
        assert_eq!(*g, want, "row {m}");
        assert!(
            want != b as u32,
            "row {m}: the tie went to the higher index"
        );
    }
    for p in 6..8 {
        let id = dec.forward_argmax(&toks[p..p + 1], p).unwrap();
        assert_eq!(id, host_argmax(dec.logits().unwrap()), "decode at {p}");
    }
    // A NaN in the third group's range is flagged.
    let at = 8500 * rb;
    model.embed.1[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
    let mut dec = model.decoder(&dev, DecoderOptions::default());
    let e = dec.forward_argmax(&toks[..1], 0).unwrap_err();
    assert_eq!(e, Error::NonFiniteLogits { row: 0 });
    assert!(dec.logits().unwrap()[8500].is_nan());
}

/// int8 activations in the one-row GEMVs (`DecoderOptions::int8_activations`; on PoCL the
/// portable integer dot product, the same arithmetic as dp4a): a Q4_0 model and a Q4_K one,
/// prefill then layered decode steps against the reference. Bound: each GEMV's activations are
/// rounded to 1/254 of their 32-value unit's largest magnitude, an NMSE of 1e-5..1e-4 a matmul
/// (tests/fast.rs; more for SwiGLU outputs, whose outliers set their unit's scale), compounded
/// over 2 layers of 4 matmuls and the head of these small random models: measured 3e-5 (the
/// prefill, whose only int8 matmul is the head) to 2.1e-2 (a Q4_K decode step, d = 256) on
/// one seed, but up to 0.73 over 48 seeds with the default model's near-argmax attention (see
/// below: Q and K are scaled down here); bound 0.1, while a wrong unit, scale or epilogue moves
/// logits by O(1), an NMSE near 1. The
/// kernels themselves are held to their exact int8 emulation in tests/fast.rs (1e-7).
/// (The prefill's GEMMs keep f32 activations; its head, one row, is a GEMV, so its logits are
/// held to the same bound.)
#[test]
fn int8_activation_gemvs_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(33);
    for (layer, cfg) in [
        (GgmlType::Q4_0, config(2, RopeMode::Normal, 16)),
        (GgmlType::Q4K, config_k(2, RopeMode::Normal, 64)),
    ] {
        // Q and K small enough that attention is a smooth average: with the default model's
        // near-argmax softmax, int8's ~0.5% error in q and k flips near-tied scores, and one
        // step's logits moved by NMSE up to 0.73 (48 seeds: median 1e-2, 90th percentile 0.12)
        // though every GEMV matches its int8 emulation (tests/fast.rs). With Q and K at 0.05
        // (60 seeds): median 4e-3, 90th percentile 1.1e-2, max 3.1e-2, what int8's ~3e-5 a
        // matmul grows to through two random layers; the bound 0.1 keeps 3x over that, while a
        // wrong scale, unit or sum moves logits by O(1).
        let n = cfg.n_layer;
        let mixed = MixedTypes {
            embed: GgmlType::Q8_0,
            layers: vec![[layer; 7]; n],
            output: None,
        };
        let model = TestModel::random_mixed_qk(&mut r, cfg, mixed, 0.05);
        let toks = tokens(&mut r, 9, model.cfg.vocab);
        let want = ref_forward(&model, &toks, model.cfg.n_layer).logits;
        let mut dec = model.decoder(
            &dev,
            DecoderOptions {
                decode: DecodePath::Layered,
                int8_activations: Some(true),
                // An f32 cache: the bound is the int8 activations' alone.
                ..exact()
            },
        );
        assert!(dec.int8_activations().is_some(), "{layer}");
        for (t, got) in std::iter::once((5, dec.forward(&toks[..6], 0).unwrap().to_vec()))
            .chain((6..toks.len()).map(|t| (t, dec.forward(&toks[t..t + 1], t).unwrap().to_vec())))
        {
            assert!(got.iter().all(|v| v.is_finite()), "{layer} at {t}");
            let e = reference::nmse(&got, &want[t]);
            eprintln!("{layer} int8 at {t}: NMSE {e:e}");
            assert!(e <= 0.1, "{layer} int8 at {t}: NMSE {e:e} > 0.1");
        }
    }
}

/// The weights re-laid on one thread or several, into separate buffers or one allocation
/// with sub-buffers: the same decoder (each checked against the reference), and the build
/// reports where its time went.
#[test]
fn prepare_threads_and_allocations_match_reference() {
    let Some(dev) = device() else { return };
    let mut r = rng(31);
    use GgmlType::*;
    let t = MixedTypes {
        embed: Q8_0,
        layers: vec![
            [Q4_0, Q4_0, Q4_0, Q4_0, Q4_0, Q4_0, Q4_0],
            [Q4K, Q4K, Q6K, Q4K, Q4K, Q4K, Q6K],
            [Q8_0, Q8_0, Q8_0, Q4_1, Q5_0, Q5_0, Q5_1],
        ],
        output: Some(Q6K),
    };
    let model = TestModel::random_mixed(&mut r, config_k(3, RopeMode::Normal, 64), t);
    let toks = tokens(&mut r, 12, model.cfg.vocab);
    for (threads, one) in [
        (1, Some(true)),
        (3, Some(false)),
        (0, None),
        (8, Some(true)),
    ] {
        let opts = DecoderOptions {
            prepare_threads: threads,
            one_allocation: one,
            ..exact()
        };
        let mut dec = model.decoder(&dev, opts);
        let bt = *dec.build_times();
        let what = format!("prepare_threads {threads}, one_allocation {one:?}");
        // The layers' workers (at most the layers) and the head's thread.
        let workers = if threads == 0 {
            bt.threads - 1
        } else {
            threads.min(3)
        };
        assert_eq!(bt.threads, workers + 1, "{what}: {bt:?}");
        assert!(
            bt.total >= bt.weights && bt.total >= bt.programs,
            "{what}: {bt:?}"
        );
        assert!(
            bt.relayout > Duration::ZERO && bt.upload > Duration::ZERO,
            "{what}: {bt:?}"
        );
        prefill_then_decode(&mut dec, &model, &toks, 9, &what);
        // Every one of these formats has a fast matmul: decoder.cl's own were never built.
        assert!(!dec.older_matmuls_built(), "{what}");
    }
    // With the fast matmuls off, decoder.cl's are built and run.
    let opts = DecoderOptions {
        fast_matmul: false,
        ..exact()
    };
    let mut dec = model.decoder(&dev, opts);
    assert!(dec.older_matmuls_built());
    prefill_then_decode(&mut dec, &model, &toks, 9, "fast_matmul off");
}
