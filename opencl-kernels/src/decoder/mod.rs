//! A device-resident Llama decoder: weights uploaded once, the KV cache and every intermediate
//! in device buffers, every layer op an OpenCL kernel, the host enqueueing a whole token's (or
//! prefill chunk's) work without waiting and reading back only the logits, the argmax or the
//! hidden rows it asks for.
//!
//! Per layer, one launch per fused op (decode: GEMV kernels; prefill: GEMM kernels over all
//! rows of the chunk):
//!
//! 1. Q/K/V: one matmul over the concatenated weight, the attention RMSNorm fused into the
//!    activation load, RoPE and the KV-cache append in its epilogue;
//! 2. causal attention over the cache;
//! 3. O projection with the residual add in its epilogue;
//! 4. gate/up: one matmul over the interleaved weight, the FFN RMSNorm fused into the load,
//!    SwiGLU in the epilogue;
//! 5. down projection with the residual add in its epilogue.
//!
//! Per step also the embedding gather, the output head (final RMSNorm fused) and, when asked,
//! the argmax: 5 · n_layer + 2 (+ 1) launches. A one-token step can instead run in decode
//! blocks (two launches a layer, `blocks`) or as one persistent launch (`persistent`).
//!
#![doc = include_str!("../../docs/decoder.md")]

mod arena;
mod blocks;
mod cost;
mod hostio;
mod matmul;
pub(crate) mod mm;
pub(crate) mod ops;
mod persistent;
pub(crate) mod prepare;
mod types;

pub use cost::OpCost;
pub use mm::MM_SOURCE;
pub use persistent::PERSISTENT_SOURCE;
pub use prepare::MemoryPlan;
pub use types::{
    BuildTimes, DecodePath, DecoderConfig, DecoderOptions, Input, LayerWeights, MatInput, Matrix,
    ModelWeights, OpKind, OpTime, Readout, Tensor,
};

use crate::attention::{Attention, AttentionShape, KvType};
use crate::device::{Buffer, Device, Program};
use crate::error::{Error, Result};
use crate::event::{copy_region, Event};
use crate::format::GgmlType;
use arena::arena;
use blocks::{blocks_unfit, build_blocks, Blocks};
use hostio::{as_f32, as_u32, HostBuf};
use matmul::MatKey;
use ops::{Cols, Epi, LazyProgram, Mat, Op, Recorder, Shared};
use persistent::Persistent;
use prepare::{HostMat, MatKind, QkvPart};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The flag the device argmax sets in a row's index word when the row held a NaN or an
/// infinity (decoder_ops.cl's ARGMAX_NONFINITE).
const ARGMAX_NONFINITE: u32 = 0x8000_0000;

/// Whether [`DecodePath::Auto`] picks the persistent step on GPU devices that can run it
/// (it was measured faster than the layered path on the H200; at 8B shapes the layered
/// path's ~160 launches a token cost more than the step's grid barriers). Measured on the H200 (2026-12-01, two
/// processes, tg64 medians of 3, SmolLM2-135M shapes): persistent 761 and 750 tok/s, layered
/// 750 and 623 (benches/results/opencl-kernels.md).
const AUTO_PERSISTENT: bool = true;

/// The most bytes of one layer's weights per compute unit at which [`DecodePath::Auto`] takes
/// the persistent step. Its one work-group a compute unit (8 warps an SM on the H200) keeps
/// too few loads in flight to stream large matrices, while the layered GEMVs spread each
/// matrix over many groups; the step wins only where the layered path's launch gaps are the
/// larger cost. Measured on the H200 (132 compute units; tg medians, random weights, Q4_0 /
/// Q4_1 layers): SmolLM2-135M, 2.2 MB a layer = 17 KB a unit: persistent 761 vs layered 750
/// tok/s (2026-12-01); Llama-3.2-1B, 34 MB = 260 KB: 440 vs 856; Llama-3-8B, 122 MB = 920 KB:
/// 79 vs 214 (2026-12-02, benches/h200-raw/scale-2026-12-02). 64 KiB lies between the tie and
/// the first loss.
const AUTO_PERSISTENT_BYTES_PER_CU: usize = 64 << 10;

/// The OpenCL C source of the decoder's kernels (embedded): the shared helpers, the KV
/// cache's storage, the decoder's helpers, then the kernels (attention is
/// [`crate::attention`]'s program). Built with `-DKV_TYPE=` of [`DecoderOptions::kv`].
pub const DECODER_SOURCE: &str = concat!(
    include_str!("../../kernels/common.cl"),
    include_str!("../../kernels/kv.cl"),
    include_str!("../../kernels/decoder_ops.cl"),
    include_str!("../../kernels/decoder.cl")
);

/// One layer's device matrices and norms.
struct LayerMats {
    /// Q/K/V in runs of one type (one matrix when they share it).
    qkv: Vec<QkvPart<Mat>>,
    o: Mat,
    /// Gate and up interleaved, or `[gate, up]` when their types differ.
    gate_up: Vec<Mat>,
    down: Mat,
    attn_norm: Buffer,
    ffn_norm: Buffer,
    /// The K and V caches ([`DecoderOptions::kv`]).
    kc: Buffer,
    vc: Buffer,
}

/// One layer's prepared launches; `[0]` the GEMV (one row), `[1]` the GEMM (several). Q/K/V
/// and gate/up have one launch per device matrix (see [`LayerMats`]).
struct LayerOps {
    qkv: Vec<[Op; 2]>,
    /// A q8_0 cache: the append of the rows the Q/K/V epilogue staged in f32.
    kv_store: Option<Op>,
    /// The tiled prefill attention.
    attn: Op,
    /// The split one-row attention (`split_attention`).
    attn1: Option<Op>,
    o: [Op; 2],
    gate_up: Vec<[Op; 2]>,
    down: [Op; 2],
}

/// The step whose results can be read back.
#[derive(Clone, Copy)]
struct Done {
    readout: Readout,
    rows: usize,
    /// A persistent step: a status word follows the logits and the argmax.
    status: bool,
}

/// The device-resident decoder. See the module documentation.
pub struct Decoder {
    dev: Arc<Device>,
    cfg: DecoderConfig,
    opts: DecoderOptions,
    prog: Program,
    /// decoder.cl's matmuls, built on first use (column matmuls may need them later).
    legacy: LazyProgram,
    plan: MemoryPlan,
    shared: Shared,
    layers: Vec<LayerMats>,
    head: Mat,
    output_norm: Buffer,
    x: Buffer,
    att: Buffer,
    h: Buffer,
    input: HostBuf,
    out: HostBuf,
    ids: HostBuf,
    ops: Vec<LayerOps>,
    embed_op: Op,
    head_gemv: Op,
    head_gemm: Option<Op>,
    argmax_op: Op,
    mat_ops: HashMap<MatKey, Op>,
    blocks: Option<Blocks>,
    persistent: Option<Persistent>,
    rec: Recorder,
    last_launches: u64,
    done: Option<Done>,
    lost: Option<Error>,
    /// What the decoder chose against the device's capabilities, and why (e.g. the portable
    /// kernels where a hardware int8 dot product is absent).
    notes: Vec<String>,
    build_times: BuildTimes,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("config", &self.cfg)
            .field("plan", &self.plan)
            .field("zero_copy", &self.zero_copy())
            .finish()
    }
}

fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: f32/u32 slices (the only callers) have no padding; the byte view covers the
    // same memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn upload_mat(dev: &Arc<Device>, m: HostMat, dummy: &Buffer) -> Result<Mat> {
    let w0 = dev.upload(&m.plane0)?;
    let w1 = if m.plane1.is_empty() {
        dummy.try_clone()?
    } else {
        dev.upload(&m.plane1)?
    };
    Ok(Mat {
        kind: m.kind,
        n: m.n,
        k: m.k,
        w0,
        w1,
    })
}

/// A prepared matrix written into its two (sub-)buffers, `w0` and `w1` (an unused 4-byte
/// part when its second plane is empty).
fn fill_mat(m: HostMat, w0: &Buffer, w1: &Buffer) -> Result<Mat> {
    w0.write(&m.plane0)?;
    if !m.plane1.is_empty() {
        w1.write(&m.plane1)?;
    }
    Ok(Mat {
        kind: m.kind,
        n: m.n,
        k: m.k,
        w0: w0.try_clone()?,
        w1: w1.try_clone()?,
    })
}

/// Bytes of the parts of a layer's weights, in the order [`prepare::layer`] makes its
/// matrices (the persistent step's order): two planes (an empty second plane takes 4 unused
/// bytes) for each run of Q/K/V of one type, for o, for gate/up (interleaved, or gate and up
/// when their types differ) and for down, then the two norms. Ten parts when Q/K/V and
/// gate/up each share a type.
fn layer_part_sizes(c: &DecoderConfig, l: &LayerWeights<'_>, split: bool) -> Result<Vec<usize>> {
    let (d, dq, dkv, ff) = (c.d_model, c.q_dim(), c.kv_dim(), c.d_ff);
    let qkv = [(&l.wq, dq), (&l.wk, dkv), (&l.wv, dkv)];
    let mut mats = Vec::with_capacity(6);
    for run in prepare::runs(&[l.wq.ty, l.wk.ty, l.wv.ty]) {
        let n = qkv[run.clone()].iter().map(|(_, n)| n).sum::<usize>();
        mats.push((qkv[run.start].0.ty, n, d));
    }
    mats.push((l.wo.ty, d, dq));
    if l.gate.ty == l.up.ty {
        mats.push((l.gate.ty, 2 * ff, d));
    } else {
        mats.push((l.gate.ty, ff, d));
        mats.push((l.up.ty, ff, d));
    }
    mats.push((l.down.ty, d, ff));
    let mut out = Vec::with_capacity(2 * mats.len() + 2);
    for (ty, n, k) in mats {
        let (p0, p1) = MatKind::of_layout(ty, split)?.plane_bytes(n, k)?;
        out.push(p0.max(4));
        out.push(p1.max(4));
    }
    out.extend([d * 4, d * 4]);
    Ok(out)
}

fn check_norm(v: &[f32], d: usize, what: &str) -> Result<()> {
    if v.len() != d {
        return Err(Error::BadShape(format!(
            "{what} has {} values, d_model is {d}",
            v.len()
        )));
    }
    Ok(())
}

/// What every prepared matmul of the decoder shares.
struct Builder<'a> {
    dev: &'a Arc<Device>,
    legacy: &'a LazyProgram,
    shared: &'a Shared,
    rows: usize,
    eps: f32,
}

impl Builder<'_> {
    /// A matmul over all of `mat`'s rows: `[GEMV, GEMM]`.
    fn pair<'e>(
        &self,
        kind: OpKind,
        mat: &Mat,
        x: &Buffer,
        ldx: usize,
        norm: Option<&Buffer>,
        epi: impl Fn() -> Epi<'e>,
    ) -> Result<[Op; 2]> {
        let one = |gemm| {
            ops::matmul(
                self.dev,
                self.legacy,
                kind,
                mat,
                Cols::all(mat.n),
                x,
                ldx,
                norm.map(|g| (g, self.eps)),
                epi(),
                gemm,
                self.rows,
                self.shared,
            )
        };
        Ok([one(false)?, one(true)?])
    }
}

impl Decoder {
    /// What [`Decoder::new`] would allocate with the default options (an f16 KV cache),
    /// without touching a device.
    pub fn memory_plan(config: &DecoderConfig, weights: &ModelWeights<'_>) -> Result<MemoryPlan> {
        Decoder::memory_plan_with(config, weights, KvType::default())
    }

    /// What [`Decoder::new`] would allocate with a `kv` cache, without touching a device.
    pub fn memory_plan_with(
        config: &DecoderConfig,
        weights: &ModelWeights<'_>,
        kv: KvType,
    ) -> Result<MemoryPlan> {
        config.validate()?;
        prepare::plan(config, weights, kv)
    }

    /// Builds the kernels, checks that the device has room for the model and the KV cache (a
    /// typed error naming the sizes, before anything is uploaded), prepares and uploads the
    /// weights once, allocates the cache and the activations and prepares every launch.
    pub fn new(
        device: &Arc<Device>,
        config: DecoderConfig,
        weights: &ModelWeights<'_>,
        options: DecoderOptions,
    ) -> Result<Decoder> {
        let c = config;
        c.validate()?;
        if weights.layers.len() != c.n_layer {
            return Err(Error::BadShape(format!(
                "{} layers of weights for n_layer = {}",
                weights.layers.len(),
                c.n_layer
            )));
        }
        let d = c.d_model;
        check_norm(weights.output_norm, d, "output_norm")?;
        for (i, l) in weights.layers.iter().enumerate() {
            check_norm(l.attn_norm, d, &format!("layer {i} attn_norm"))?;
            check_norm(l.ffn_norm, d, &format!("layer {i} ffn_norm"))?;
        }
        let info = device.info();
        if info.max_work_group_size < 256 {
            return Err(Error::NotApplicable(
                "the decoder's GEMM and argmax kernels need work-groups of 256",
            ));
        }
        let plan = prepare::plan(&c, weights, options.kv)?;
        let available = options
            .memory_budget
            .map_or(info.global_mem_size, |b| b.min(info.global_mem_size));
        if plan.total() > available {
            return Err(Error::OutOfDeviceMemory {
                weights: plan.weights,
                kv_cache: plan.kv_cache,
                scratch: plan.scratch,
                available,
            });
        }
        if plan.largest > info.max_mem_alloc_size {
            return Err(Error::AllocTooLarge {
                what: plan.largest_what.to_string(),
                bytes: plan.largest,
                max_alloc: info.max_mem_alloc_size,
            });
        }
        let t_start = Instant::now();
        let attn_shape = AttentionShape {
            heads: c.n_head,
            kv_heads: c.n_kv_head,
            head_dim: c.head_dim,
            kv: options.kv,
        };
        let dec_opts = format!(
            "{} -DKV_TYPE={}",
            crate::kernels::OPTIONS,
            options.kv.code()
        );
        // decoder.cl's embed and argmax; its matmuls and decode blocks are built when used.
        let build_main = || device.build(DECODER_SOURCE, &dec_opts);
        let legacy = LazyProgram::new(device, format!("{dec_opts} -DDEC_MATMULS"));
        let zero_copy = options.zero_copy.unwrap_or(info.host_unified_memory);
        let (dq, dkv, rows) = (c.q_dim(), c.kv_dim(), c.max_rows);
        let dummy = device.upload(&[0u32; 4])?;
        let npairs = c.rope_dims / 2;
        let mut table = Vec::with_capacity((c.max_context * npairs).max(1) * 2);
        for pos in 0..c.max_context {
            for i in 0..npairs {
                // In f64, then rounded once: the kernels read cos/sin instead of computing
                // them from an f32 angle (whose error grows with the position).
                let inv = (c.rope_theta as f64).powf(-2.0 * i as f64 / c.rope_dims as f64);
                let (s, co) = (pos as f64 * inv).sin_cos();
                table.push(co as f32);
                table.push(s as f32);
            }
        }
        if table.is_empty() {
            table.extend([1.0, 0.0]);
        }
        // Split layouts (Q8_0, Q5_x and the K-quants re-laid for kernels/mm.cl) where decode
        // steps run layered; decode blocks and the persistent step read the GGUF layouts. Auto
        // decides here as below (the persistent step only for the types it runs, on GPUs whose
        // compute units each stream little of a layer).
        let gguf_layer_bytes = {
            let mut t = 0;
            for l in &weights.layers {
                t += layer_part_sizes(&c, l, false)?.iter().sum::<usize>();
            }
            t / c.n_layer.max(1)
        };
        let persistent_types = weights.layers.iter().all(|l| {
            [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]
                .iter()
                .all(|t| {
                    matches!(
                        t.ty,
                        GgmlType::F16 | GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1
                    )
                })
        });
        let auto_persistent = AUTO_PERSISTENT
            && options.kv == KvType::F32
            && !info.is_cpu
            && gguf_layer_bytes / info.compute_units.max(1) <= AUTO_PERSISTENT_BYTES_PER_CU;
        let split = options.fast_matmul
            && match options.decode {
                DecodePath::Layered => true,
                DecodePath::Blocks | DecodePath::Persistent => false,
                DecodePath::Auto => !(auto_persistent && persistent_types),
            };
        let mut notes = Vec::new();
        let mut mm_kinds = Vec::new();
        let mut mm_dot = (crate::caps::IntDot::Portable, false);
        if options.fast_matmul {
            let (dot, note) = crate::caps::int_dot(device);
            let i8 = options
                .int8_activations
                .unwrap_or(dot != crate::caps::IntDot::Portable);
            if let (Some(n), true) = (note, i8 || options.int8_activations.is_none()) {
                notes.push(n);
            }
            for l in &weights.layers {
                for t in [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down] {
                    mm_kinds.push(MatKind::of_layout(t.ty, split)?);
                }
            }
            let head_ty = weights.output.as_ref().unwrap_or(&weights.embed).ty;
            mm_kinds.push(MatKind::of_layout(head_ty, split)?);
            mm_dot = (dot, i8);
        }
        // Every layer's weights in one arena and every cache in another where they fit (the
        // persistent step reaches them all from one launch); each part is a buffer of its own
        // to the other launches.
        // part0[i]: layer i's first part (ten a layer when Q/K/V and gate/up each share a type).
        let mut sizes = Vec::with_capacity(10 * c.n_layer);
        let mut part0 = vec![0];
        for l in &weights.layers {
            sizes.extend(layer_part_sizes(&c, l, split)?);
            part0.push(sizes.len());
        }
        // One allocation (parts as sub-buffers) only where the persistent step may run: it
        // reaches every layer from one launch. Elsewhere each part is a buffer of its own. (On
        // the H200, NVIDIA's OpenCL touched host memory of about the arenas' size after the
        // last token, when the decoder went: 21 GB of peak RSS and 21 s with a 17 GB cache,
        // benches/h200-startup.sh; sub-buffers are the suspect, see the README's figures.)
        let pk = match options.decode {
            DecodePath::Persistent => true,
            // Auto takes the persistent step on GPU devices whose compute units each have
            // little of a layer's weights to stream (AUTO_PERSISTENT_BYTES_PER_CU), where
            // `unfit` finds the device able to run it (work-group size, local memory, one
            // allocation for the weights): by capability and model size, not vendor. CPU
            // devices need not run work-groups concurrently: layered there.
            // The step with an f16 cache has not run on a GPU yet (its kernels are NVIDIA-
            // tested with f32 only; PoCL does not run it, see tests/decoder.rs): Auto takes it
            // with an f32 cache alone until then (`auto_persistent`), and Persistent can be
            // asked for with either.
            DecodePath::Auto => auto_persistent,
            _ => false,
        };
        let whole = options.one_allocation.unwrap_or(pk);
        let warena = arena(device, &sizes, false, whole)?;
        let kv_row = options.kv.row_bytes(dkv)?;
        let kvarena = arena(
            device,
            &vec![c.max_context * kv_row; 2 * c.n_layer],
            true,
            whole,
        )?;
        // A q8_0 cache: the Q/K/V epilogue stages each chunk's k and v rows in f32 here.
        let staged = match options.kv {
            KvType::Q8_0 => Some((device.alloc(rows * dkv * 4)?, device.alloc(rows * dkv * 4)?)),
            _ => None,
        };
        // Each layer re-laid on the host and written into its arena parts by one of `threads`
        // workers (the re-lay is host work at memory speed a core; the writes share the queue).
        let t_weights = Instant::now();
        let threads = prepare_threads(options.prepare_threads, c.n_layer);
        let next_layer = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let (relaid_ns, written_ns) = (AtomicU64::new(0), AtomicU64::new(0));
        let build_layer = |i: usize| -> Result<LayerMats> {
            let l = &weights.layers[i];
            let t0 = Instant::now();
            let hl = prepare::layer(&c, l, i, split)?;
            let t1 = Instant::now();
            relaid_ns.fetch_add(nanos(t1 - t0), Ordering::Relaxed);
            let mut p = warena.parts[part0[i]..part0[i + 1]].iter();
            let mut next = || {
                p.next()
                    .ok_or(Error::NotApplicable("a layer's arena parts"))
            };
            let mut qkv = Vec::with_capacity(hl.qkv.len());
            for q in hl.qkv {
                qkv.push(QkvPart {
                    mat: fill_mat(q.mat, next()?, next()?)?,
                    col0: q.col0,
                });
            }
            let o = fill_mat(hl.o, next()?, next()?)?;
            let mut gate_up = Vec::with_capacity(hl.gate_up.len());
            for m in hl.gate_up {
                gate_up.push(fill_mat(m, next()?, next()?)?);
            }
            let down = fill_mat(hl.down, next()?, next()?)?;
            let (attn_norm, ffn_norm) = (next()?.try_clone()?, next()?.try_clone()?);
            attn_norm.write(l.attn_norm)?;
            ffn_norm.write(l.ffn_norm)?;
            written_ns.fetch_add(nanos(t1.elapsed()), Ordering::Relaxed);
            Ok(LayerMats {
                qkv,
                o,
                gate_up,
                down,
                attn_norm,
                ffn_norm,
                kc: kvarena.parts[2 * i].try_clone()?,
                vc: kvarena.parts[2 * i + 1].try_clone()?,
            })
        };
        let head_t = weights.output.as_ref().unwrap_or(&weights.embed);
        let build_head = || -> Result<Mat> {
            let t0 = Instant::now();
            let m = prepare::single_on(head_t, c.vocab, d, "output head", split, threads)?;
            let t1 = Instant::now();
            relaid_ns.fetch_add(nanos(t1 - t0), Ordering::Relaxed);
            let m = upload_mat(device, m, &dummy)?;
            written_ns.fetch_add(nanos(t1.elapsed()), Ordering::Relaxed);
            Ok(m)
        };
        // The programs are independent of each other and of the weights: all built side by side
        // (a cold build is the compiler's seconds per program on NVIDIA's OpenCL, a warm one
        // loads cached binaries), the weights re-laid and written meanwhile.
        let mut built: Vec<Option<Result<LayerMats>>> = (0..c.n_layer).map(|_| None).collect();
        let (((prog, t_prog), (attn_prog, t_attn), (mm, t_mm)), head) = std::thread::scope(|s| {
            let attn = s.spawn(|| {
                let t = Instant::now();
                (Attention::new(device, attn_shape), t.elapsed())
            });
            let mm = s.spawn(|| {
                let t = Instant::now();
                let m = if options.fast_matmul {
                    mm::MmSet::build(device, &mm_kinds, mm_dot.0, mm_dot.1, options.kv).map(
                        |mut m| {
                            m.force_mt = options.gemm_tile_rows;
                            m.force_steps = options.gemv_steps;
                            m
                        },
                    )
                } else {
                    Ok(mm::MmSet::none())
                };
                (m, t.elapsed())
            });
            let main = s.spawn(|| {
                let t = Instant::now();
                (build_main(), t.elapsed())
            });
            // The head (the largest single matrix) beside the layers.
            let head = s.spawn(build_head);
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        while !failed.load(Ordering::Relaxed) {
                            let i = next_layer.fetch_add(1, Ordering::Relaxed);
                            if i >= c.n_layer {
                                break;
                            }
                            let r = build_layer(i);
                            if r.is_err() {
                                failed.store(true, Ordering::Relaxed);
                            }
                            mine.push((i, r));
                        }
                        mine
                    })
                })
                .collect();
            for w in workers {
                for (i, r) in join(w) {
                    built[i] = Some(r);
                }
            }
            let head = join(head);
            let weights_wall = t_weights.elapsed();
            ((join(main), join(attn), join(mm)), (head, weights_wall))
        });
        let (head, weights_wall) = head;
        let (prog, attn_prog, mm) = (prog?, attn_prog?, mm?);
        let programs = t_prog.max(t_attn).max(t_mm);
        let shared = Shared {
            mm,
            rope: device.upload(&table)?,
            dummy,
            dq,
            dkv,
            hd: c.head_dim,
            npairs,
            max_wg: info.max_work_group_size,
            min_groups: match options.gemv_min_groups {
                0 => info.compute_units,
                n => n,
            },
        };
        // The first error in layer order (layers after a failed one may not have been built).
        let mut layers = Vec::with_capacity(c.n_layer);
        for r in built {
            layers.push(r.ok_or(Error::NotApplicable(
                "a layer left unprepared after another failed",
            ))??);
        }
        let head = head?;
        // The gather reads the head's copy when they are tied, else the embedding's GGUF bytes.
        let embed_src: (Buffer, Buffer, u32) = match &weights.output {
            None => (
                head.w0.try_clone()?,
                head.w1.try_clone()?,
                head.kind.embed_code(),
            ),
            Some(_) => {
                let e = &weights.embed;
                let code = MatKind::embed_code_gguf(e.ty)?;
                let need = crate::format::matrix_bytes(e.ty, c.vocab, d)?;
                if e.data.len() != need {
                    return Err(Error::BadShape(format!(
                        "embedding: {} bytes, a {} x {d} {} matrix needs {need}",
                        e.data.len(),
                        c.vocab,
                        e.ty
                    )));
                }
                (device.upload(e.data)?, shared.dummy.try_clone()?, code)
            }
        };
        let output_norm = device.upload(weights.output_norm)?;
        let x = device.alloc(rows * d * 4)?;
        let q = device.alloc(rows * dq * 4)?;
        let att = device.alloc(rows * dq * 4)?;
        let h = device.alloc(rows * c.d_ff * 4)?;
        let in_bytes = (c.max_context * 4).max(rows * dq.max(d).max(c.d_ff) * 4);
        let input = HostBuf::new(device, in_bytes, zero_copy, "input")?;
        let logit_rows = if c.all_logits { rows } else { 1 };
        // One more float and one more index: the persistent step's status word.
        let out_floats = (logit_rows * c.vocab).max(rows * (dq + 2 * dkv).max(2 * c.d_ff).max(d));
        let out = HostBuf::new(
            device,
            (out_floats.max(c.vocab + 1)) * 4,
            zero_copy,
            "readback",
        )?;
        let ids = HostBuf::new(device, rows.max(2) * 4, zero_copy, "argmax")?;
        let eps = c.eps;
        let build = Builder {
            dev: device,
            legacy: &legacy,
            shared: &shared,
            rows,
            eps,
        };
        let mut ops = Vec::with_capacity(c.n_layer);
        for lm in &layers {
            let mut qkv = Vec::with_capacity(lm.qkv.len());
            let (ek, ev) = staged.as_ref().map_or((&lm.kc, &lm.vc), |(k, v)| (k, v));
            for p in &lm.qkv {
                let epi = || Epi::Qkv {
                    q: &q,
                    ld: dq,
                    kc: ek,
                    vc: ev,
                    col0: p.col0,
                };
                qkv.push(build.pair(OpKind::QkvRope, &p.mat, &x, d, Some(&lm.attn_norm), epi)?);
            }
            let add = || Epi::Add { y: &x, ld: d };
            let attn1 = if options.split_attention {
                Some(Op::attention(
                    attn_prog.decode(&q, &lm.kc, &lm.vc, &att)?,
                    OpKind::Attention,
                ))
            } else {
                None
            };
            let kv_store = match &staged {
                Some((k, v)) => Some(Op::attention(
                    attn_prog.store_q8(k, v, &lm.kc, &lm.vc, rows)?,
                    OpKind::QkvRope,
                )),
                None => None,
            };
            let ffn = |epi: fn(&Buffer, usize) -> Epi<'_>, m: &Mat| {
                let e = || epi(&h, c.d_ff);
                build.pair(OpKind::GateUpSwiglu, m, &x, d, Some(&lm.ffn_norm), e)
            };
            // One interleaved matrix: SwiGLU in its epilogue. Gate and up apart: the gate's
            // values stored, then up's epilogue applies silu(gate) * up in place.
            let gate_up = match &lm.gate_up[..] {
                [gu] => vec![ffn(|y, ld| Epi::Swiglu { y, ld }, gu)?],
                [g, u] => vec![
                    ffn(|y, ld| Epi::Store { y, ld }, g)?,
                    ffn(|y, ld| Epi::Gated { y, ld }, u)?,
                ],
                _ => return Err(Error::NotApplicable("gate/up has one or two matrices")),
            };
            ops.push(LayerOps {
                qkv,
                kv_store,
                attn1,
                attn: Op::attention(
                    attn_prog.prefill(&q, &lm.kc, &lm.vc, &att, rows)?,
                    OpKind::Attention,
                ),
                o: build.pair(OpKind::OProj, &lm.o, &att, dq, None, add)?,
                gate_up,
                down: build.pair(OpKind::Down, &lm.down, &h, c.d_ff, None, add)?,
            });
        }
        let embed_op = ops::embed(
            device,
            &prog,
            (&embed_src.0, &embed_src.1, embed_src.2),
            d,
            input.buffer(),
            &x,
            rows,
        )?;
        let logits_epi = Epi::Store {
            y: out.buffer(),
            ld: c.vocab,
        };
        let head_gemv = ops::matmul(
            device,
            &legacy,
            OpKind::Head,
            &head,
            Cols::all(c.vocab),
            &x,
            d,
            Some((&output_norm, eps)),
            logits_epi,
            false,
            rows,
            &shared,
        )?;
        let head_gemm = if c.all_logits && rows > 1 {
            Some(ops::matmul(
                device,
                &legacy,
                OpKind::Head,
                &head,
                Cols::all(c.vocab),
                &x,
                d,
                Some((&output_norm, eps)),
                Epi::Store {
                    y: out.buffer(),
                    ld: c.vocab,
                },
                true,
                rows,
                &shared,
            )?)
        } else {
            None
        };
        let argmax_op = ops::argmax(
            device,
            &prog,
            out.buffer(),
            c.vocab,
            c.vocab,
            ids.buffer(),
            logit_rows,
        )?;
        let blocks = match options.decode {
            DecodePath::Blocks => {
                match blocks_unfit(&c, &layers, info.local_mem_size, options.kv) {
                    Some(why) => return Err(Error::NotApplicable(why)),
                    None => {
                        let bp =
                            device.build(DECODER_SOURCE, &format!("{dec_opts} -DDEC_BLOCKS"))?;
                        Some(build_blocks(device, &bp, &c, &layers, &x, &shared, eps)?)
                    }
                }
            }
            _ => None,
        };
        let arenas = persistent::Arenas {
            weights: warena.whole.as_ref(),
            caches: kvarena.whole.as_ref(),
        };
        let persistent = match (
            pk,
            persistent::unfit(
                &c,
                &layers,
                &arenas,
                info,
                options.persistent_stage_floats,
                options.kv,
            ),
        ) {
            (false, _) => None,
            (true, Some(why)) if options.decode == DecodePath::Persistent => {
                return Err(Error::NotApplicable(why))
            }
            (true, Some(_)) => None,
            (true, None) => {
                let io = persistent::Io {
                    head: &head,
                    output_norm: &output_norm,
                    embed: (&embed_src.0, &embed_src.1, embed_src.2),
                    tokens: input.buffer(),
                    x: &x,
                    q: &q,
                    att: &att,
                    h: &h,
                    logits: out.buffer(),
                    ids: ids.buffer(),
                };
                let g = persistent::groups(
                    info,
                    options.persistent_groups,
                    options.persistent_groups_per_cu,
                );
                Some(persistent::build(
                    device,
                    &c,
                    &layers,
                    &arenas,
                    &io,
                    &shared,
                    g,
                    options.persistent_barriers_only,
                    options.persistent_stage_floats,
                    options.kv,
                )?)
            }
        };
        let flush_every = options.flush_every as u64;
        Ok(Decoder {
            dev: device.clone(),
            cfg: c,
            opts: options,
            prog,
            legacy,
            plan,
            shared,
            layers,
            head,
            output_norm,
            x,
            att,
            h,
            input,
            out,
            ids,
            ops,
            embed_op,
            head_gemv,
            head_gemm,
            argmax_op,
            mat_ops: HashMap::new(),
            blocks,
            persistent,
            rec: Recorder {
                launches: 0,
                events: None,
                flush_every,
            },
            last_launches: 0,
            done: None,
            lost: None,
            notes,
            build_times: BuildTimes {
                programs,
                program_builds: [t_prog, t_attn, t_mm],
                weights: weights_wall,
                relayout: Duration::from_nanos(relaid_ns.into_inner()),
                upload: Duration::from_nanos(written_ns.into_inner()),
                threads: threads + 1,
                total: t_start.elapsed(),
            },
        })
    }
}

/// A scoped thread's result; its panic resumed on the caller.
fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Workers that re-lay and write the layers: `asked`, or (0) the host's cores up to 8 (past
/// that the writes, which share one queue, are the limit), never more than the layers.
fn prepare_threads(asked: usize, layers: usize) -> usize {
    let n = match asked {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
        n => n,
    };
    n.clamp(1, layers.max(1))
}

impl Decoder {
    /// The configuration.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// Notes on what the decoder chose for this device and why (a capability it lacks and the
    /// portable kernel used instead), one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether the one-row GEMVs of the fast matmuls quantize activations to int8 (see
    /// [`DecoderOptions::int8_activations`]), and with which dot product.
    pub fn int8_activations(&self) -> Option<crate::caps::IntDot> {
        self.shared.mm.i8.then_some(self.shared.mm.dot)
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Whether decoder.cl's older matmuls were built: only where one runs on them (a format or
    /// shape the fast matmuls do not take, `fast_matmul` off, or a column matmul that needs
    /// them), since they are most of a cold start's compile time.
    pub fn older_matmuls_built(&self) -> bool {
        self.legacy.is_built()
    }

    /// Where [`Decoder::new`]'s time went.
    pub fn build_times(&self) -> &BuildTimes {
        &self.build_times
    }

    /// What was allocated.
    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// Whether inputs and readbacks are zero-copy (mapped host-visible buffers) rather than
    /// staged transfers.
    pub fn zero_copy(&self) -> bool {
        self.out.zero_copy()
    }

    /// Changes how long readbacks wait before the device is declared lost.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.opts.timeout = timeout;
    }

    /// Kernel launches enqueued since the decoder was made.
    pub fn launches(&self) -> u64 {
        self.rec.launches
    }

    /// Kernel launches the last [`Decoder::enqueue`] made.
    pub fn last_launches(&self) -> u64 {
        self.last_launches
    }

    /// The error that made the decoder stop, if the device was lost or hung.
    pub fn lost(&self) -> Option<&Error> {
        self.lost.as_ref()
    }

    /// Marks the device lost on errors that mean it (the staging memory a transfer may still
    /// touch is leaked, never freed), and passes the error on.
    fn fail(&mut self, e: Error) -> Error {
        if matches!(e, Error::GridBarrier { .. }) {
            self.lost = Some(e.clone());
        }
        if matches!(e, Error::DeviceLost { .. } | Error::WaitTimeout { .. }) {
            self.lost = Some(e.clone());
            self.input.abandon();
            self.out.abandon();
            self.ids.abandon();
        }
        e
    }

    fn alive(&self) -> Result<()> {
        match &self.lost {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Runs one step: `input` (token ids or hidden rows, `m` rows at positions
    /// `pos0..pos0 + m`) through the layers `layers`, leaving `readout` to read back. The host
    /// enqueues every kernel without waiting (inputs longer than `max_rows` run as several
    /// chunks) and returns; [`Decoder::logits`], [`Decoder::argmax`] or [`Decoder::hidden`]
    /// wait, bounded, for the result. Writes the KV cache of `layers` at those positions.
    /// Bad input is a typed error that enqueues nothing.
    pub fn enqueue(
        &mut self,
        input: Input<'_>,
        pos0: usize,
        layers: Range<usize>,
        readout: Readout,
    ) -> Result<()> {
        self.alive()?;
        let c = &self.cfg;
        let d = c.d_model;
        if layers.start > layers.end || layers.end > c.n_layer {
            return Err(Error::BadShape(format!(
                "layers {layers:?} outside 0..{}",
                c.n_layer
            )));
        }
        let m = match input {
            Input::Tokens(t) => {
                if layers.start != 0 {
                    return Err(Error::BadShape(
                        "token input starts at layer 0 (the embedding)".into(),
                    ));
                }
                if let Some(&bad) = t.iter().find(|&&v| v as usize >= c.vocab) {
                    return Err(Error::BadShape(format!(
                        "token id {bad} is not below the vocabulary size {}",
                        c.vocab
                    )));
                }
                t.len()
            }
            Input::Hidden(h) => {
                if !h.len().is_multiple_of(d) {
                    return Err(Error::BadShape(format!(
                        "{} hidden values are not whole rows of {d}",
                        h.len()
                    )));
                }
                h.len() / d
            }
        };
        if m == 0 {
            return Err(Error::BadShape("no rows to run".into()));
        }
        if pos0 + m > c.max_context {
            return Err(Error::BadShape(format!(
                "positions {pos0}..{} exceed the context of {}",
                pos0 + m,
                c.max_context
            )));
        }
        let one_chunk = matches!(input, Input::Hidden(_))
            || matches!(
                readout,
                Readout::Hidden | Readout::AllLogits | Readout::AllArgmax
            );
        if one_chunk && m > c.max_rows {
            return Err(Error::BadShape(format!(
                "{m} rows exceed max_rows ({}) for this input or readout",
                c.max_rows
            )));
        }
        let head = !matches!(readout, Readout::Nothing | Readout::Hidden);
        if head && layers.end != c.n_layer {
            return Err(Error::BadShape(
                "logits need the layer range to end at the last layer".into(),
            ));
        }
        if matches!(readout, Readout::AllLogits | Readout::AllArgmax) && !c.all_logits && m > 1 {
            return Err(Error::NotApplicable(
                "every row's logits need a decoder configured with all_logits",
            ));
        }
        let before = self.rec.launches;
        self.done = None;
        let r = self.enqueue_checked(input, m, pos0, layers, readout);
        self.last_launches = self.rec.launches - before;
        match r {
            Ok(status) => {
                self.done = Some(Done {
                    readout,
                    rows: m,
                    status,
                });
                self.dev
                    .flush()
                    .map_err(|e| self.fail(crate::event::lost_or(e)))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Enqueues the step; whether it ends with a status word to check (a persistent step).
    fn enqueue_checked(
        &mut self,
        input: Input<'_>,
        m: usize,
        pos0: usize,
        layers: Range<usize>,
        readout: Readout,
    ) -> Result<bool> {
        let (d, rows, t) = (self.cfg.d_model, self.cfg.max_rows, self.opts.timeout);
        self.out.release()?;
        self.ids.release()?;
        match input {
            Input::Tokens(tok) => self.input.write(bytes_of(tok), t)?,
            Input::Hidden(h) => self.input.write(bytes_of(h), t)?,
        }
        let full = layers.start == 0 && layers.end == self.cfg.n_layer;
        let decode = m == 1 && full && matches!(input, Input::Tokens(_));
        let head = !matches!(readout, Readout::Nothing | Readout::Hidden);
        if let (true, true, Some(pk)) = (decode, head, self.persistent.as_mut()) {
            let argmax = matches!(readout, Readout::Argmax | Readout::AllArgmax);
            pk.set_step(pos0, argmax)?;
            let in_step = pk.head;
            self.rec.enqueue(&self.dev, &pk.op)?;
            if !in_step {
                self.readout(readout, 1)?;
            }
            return Ok(true);
        }
        if decode && self.blocks.is_some() {
            return self.decode_blocks(pos0, readout).map(|()| false);
        }
        let mut c0 = 0;
        while c0 < m {
            let cm = rows.min(m - c0);
            match input {
                Input::Tokens(_) => {
                    self.embed_op.set_tokoff(c0)?;
                    self.embed_op.set_rows(cm)?;
                    self.rec.enqueue(&self.dev, &self.embed_op)?;
                }
                Input::Hidden(_) => copy_region(self.input.buffer(), 0, &self.x, 0, cm * d * 4)?,
            }
            for l in layers.clone() {
                self.layer(l, pos0 + c0, cm)?;
            }
            c0 += cm;
            if c0 == m {
                self.readout(readout, cm)?;
            }
        }
        Ok(false)
    }

    /// One token through every layer in decode blocks: the gather, blocks A and B of each
    /// layer, the final partial sum, the readout.
    fn decode_blocks(&mut self, pos: usize, readout: Readout) -> Result<()> {
        self.embed_op.set_tokoff(0)?;
        self.embed_op.set_rows(1)?;
        self.rec.enqueue(&self.dev, &self.embed_op)?;
        let Some(bl) = self.blocks.as_mut() else {
            return Err(Error::NotApplicable("no decode blocks"));
        };
        for (a, b) in bl.a.iter_mut().zip(&bl.b) {
            a.set_pos0(pos)?;
            self.rec.enqueue(&self.dev, a)?;
            self.rec.enqueue(&self.dev, b)?;
        }
        self.rec.enqueue(&self.dev, &bl.finish)?;
        self.readout(readout, 1)
    }

    /// Kernel launches of one decode step (one token through every layer) that reads back
    /// `readout`: one (persistent, logits or argmax), or the gather, 5 a layer (layered; one
    /// more for each extra type among a layer's Q/K/V runs, and for gate and up of different
    /// types) or 2 a layer and the final sum (decode blocks), then the head for logits and one
    /// more for the argmax.
    pub fn launches_per_token(&self, readout: Readout) -> usize {
        let n = self.cfg.n_layer;
        let head_readout = !matches!(readout, Readout::Nothing | Readout::Hidden);
        let head = match readout {
            Readout::Nothing | Readout::Hidden => 0,
            Readout::Logits | Readout::AllLogits => 1,
            Readout::Argmax | Readout::AllArgmax => 2,
        };
        if let (Some(pk), true) = (&self.persistent, head_readout) {
            return if pk.head { 1 } else { 1 + head };
        }
        let layers = if self.blocks.is_some() {
            2 * n + 1
        } else {
            self.ops
                .iter()
                .map(|o| o.qkv.len() + usize::from(o.kv_store.is_some()) + o.gate_up.len() + 3)
                .sum()
        };
        1 + layers + head
    }

    /// Whether one-token decode steps run in decode blocks ([`DecodePath::Blocks`]).
    pub fn decode_blocks_on(&self) -> bool {
        self.blocks.is_some()
    }

    /// How one-token decode steps that read back logits or the argmax run here:
    /// [`DecodePath::Persistent`], [`DecodePath::Blocks`] or [`DecodePath::Layered`] (what
    /// [`DecodePath::Auto`] chose).
    pub fn decode_path(&self) -> DecodePath {
        if self.persistent.is_some() {
            DecodePath::Persistent
        } else if self.blocks.is_some() {
            DecodePath::Blocks
        } else {
            DecodePath::Layered
        }
    }

    /// Work-groups of the persistent step, when decode steps run persistent.
    pub fn persistent_groups(&self) -> Option<usize> {
        self.persistent.as_ref().map(|p| p.groups)
    }

    /// Floats of the activation row the persistent step stages in local memory at once, and
    /// whether it runs the head itself, when decode steps run persistent.
    pub fn persistent_stage(&self) -> Option<(usize, bool)> {
        self.persistent.as_ref().map(|p| (p.stage, p.head))
    }

    /// The built programs (PTX on NVIDIA): the decoder's kernels, then the persistent step's
    /// when it is built; for inspection.
    pub fn program_binaries(&self) -> Result<Vec<Vec<u8>>> {
        let mut v = vec![self.prog.binary()?];
        if let Some(p) = &self.persistent {
            v.push(p.prog.binary()?);
        }
        Ok(v)
    }

    /// The launches of layer `l` (five, when Q/K/V and gate/up each share a type) over `m`
    /// rows at positions `pos..pos + m`.
    fn layer(&mut self, l: usize, pos: usize, m: usize) -> Result<()> {
        let g = usize::from(m > 1);
        let ops = &mut self.ops[l];
        let (rec, dev) = (&mut self.rec, &self.dev);
        let mut run = |op: &mut Op| -> Result<()> {
            op.set_pos0(pos)?;
            op.set_rows(m)?;
            rec.enqueue(dev, op)
        };
        for op in &mut ops.qkv {
            run(&mut op[g])?;
        }
        if let Some(op) = &mut ops.kv_store {
            run(op)?;
        }
        let attn = match (&mut ops.attn1, m) {
            (Some(a), 1) => a,
            _ => &mut ops.attn,
        };
        run(attn)?;
        run(&mut ops.o[g])?;
        for op in &mut ops.gate_up {
            run(&mut op[g])?;
        }
        run(&mut ops.down[g])
    }

    /// The readout launches after the last chunk (`m` rows in it).
    fn readout(&mut self, readout: Readout, m: usize) -> Result<()> {
        let d = self.cfg.d_model;
        match readout {
            Readout::Nothing => Ok(()),
            Readout::Hidden => copy_region(&self.x, 0, self.out.buffer(), 0, m * d * 4),
            Readout::Logits | Readout::Argmax => {
                self.head_gemv.set_x_row(m - 1)?;
                self.rec.enqueue(&self.dev, &self.head_gemv)?;
                if readout == Readout::Argmax {
                    self.argmax_op.set_rows(1)?;
                    self.rec.enqueue(&self.dev, &self.argmax_op)?;
                }
                Ok(())
            }
            Readout::AllLogits | Readout::AllArgmax => {
                match (&mut self.head_gemm, m) {
                    (Some(op), m) if m > 1 => {
                        op.set_rows(m)?;
                        self.rec.enqueue(&self.dev, op)?;
                    }
                    _ => {
                        self.head_gemv.set_x_row(0)?;
                        self.rec.enqueue(&self.dev, &self.head_gemv)?;
                    }
                }
                if readout == Readout::AllArgmax {
                    self.argmax_op.set_rows(m)?;
                    self.rec.enqueue(&self.dev, &self.argmax_op)?;
                }
                Ok(())
            }
        }
    }

    /// Rows the last step's readout has, if it is one of `kinds`, and whether a status word
    /// follows them (a persistent step).
    fn done_rows(&self, kinds: &[Readout], what: &'static str) -> Result<(usize, bool)> {
        self.alive()?;
        match self.done {
            Some(Done {
                readout,
                rows,
                status,
            }) if kinds.contains(&readout) => Ok((
                match readout {
                    Readout::Logits | Readout::Argmax => 1,
                    _ => rows,
                },
                status,
            )),
            _ => Err(Error::NotApplicable(what)),
        }
    }

    /// A persistent step's status word (`word`, read back after its results): nonzero when a
    /// work-group gave up waiting at a grid barrier, which marks the decoder lost.
    fn check_status(&mut self, word: u32) -> Result<()> {
        if word == 0 {
            return Ok(());
        }
        let groups = self.persistent.as_ref().map_or(0, |p| p.groups);
        Err(self.fail(Error::GridBarrier { groups }))
    }

    /// The last step's logits (`vocab` floats, or `m * vocab` for the all-rows readouts), once
    /// the device has produced them (bounded wait).
    pub fn logits(&mut self) -> Result<&[f32]> {
        let (r, status) = self.done_rows(
            &[
                Readout::Logits,
                Readout::Argmax,
                Readout::AllLogits,
                Readout::AllArgmax,
            ],
            "the last step read out no logits",
        )?;
        let len = r * self.cfg.vocab * 4;
        let extra = if status { 4 } else { 0 };
        if let Err(e) = self.out.read(len + extra, self.opts.timeout) {
            return Err(self.fail(e));
        }
        if status {
            let word = as_u32(&self.out.view(len + 4)?[len..])?[0];
            self.check_status(word)?;
        }
        as_f32(self.out.view(len)?)
    }

    /// The last step's argmax (one index, or one per row for [`Readout::AllArgmax`]). When a
    /// row's logits held NaN or an infinity (the device argmax flags it beside the index):
    /// [`Error::NonFiniteLogits`] naming the first such row; the logits stay readable.
    pub fn argmax(&mut self) -> Result<&[u32]> {
        let (r, status) = self.done_rows(
            &[Readout::Argmax, Readout::AllArgmax],
            "the last step read out no argmax",
        )?;
        // A persistent step leaves its status word after the index.
        let len = if status { 8 } else { r * 4 };
        if let Err(e) = self.ids.read(len, self.opts.timeout) {
            return Err(self.fail(e));
        }
        if status {
            let word = as_u32(self.ids.view(8)?)?[1];
            self.check_status(word)?;
        }
        let words = as_u32(self.ids.view(r * 4)?)?;
        if let Some(row) = words.iter().position(|&w| w & ARGMAX_NONFINITE != 0) {
            return Err(Error::NonFiniteLogits { row });
        }
        Ok(words)
    }

    /// The last step's hidden rows (`m * d_model` floats) after its layer range.
    pub fn hidden(&mut self) -> Result<&[f32]> {
        let (r, _) = self.done_rows(&[Readout::Hidden], "the last step read out no hidden rows")?;
        let len = r * self.cfg.d_model * 4;
        if let Err(e) = self.out.read(len, self.opts.timeout) {
            return Err(self.fail(e));
        }
        as_f32(self.out.view(len)?)
    }

    /// One step from token ids through every layer; the last row's logits.
    pub fn forward(&mut self, tokens: &[u32], pos0: usize) -> Result<&[f32]> {
        self.enqueue(
            Input::Tokens(tokens),
            pos0,
            0..self.cfg.n_layer,
            Readout::Logits,
        )?;
        self.logits()
    }

    /// One step from token ids through every layer; the last row's argmax (greedy next token),
    /// the only value read back.
    pub fn forward_argmax(&mut self, tokens: &[u32], pos0: usize) -> Result<u32> {
        self.enqueue(
            Input::Tokens(tokens),
            pos0,
            0..self.cfg.n_layer,
            Readout::Argmax,
        )?;
        Ok(self.argmax()?[0])
    }

    /// Runs the layers `layers` on `hidden` (`m * d_model` floats at positions
    /// `pos0..pos0 + m`, `m <= max_rows`) and writes their output rows into `out` (same size):
    /// how an engine splits a model by layers between processors.
    pub fn run_layers(
        &mut self,
        layers: Range<usize>,
        hidden: &[f32],
        pos0: usize,
        out: &mut [f32],
    ) -> Result<()> {
        if out.len() != hidden.len() {
            return Err(Error::BadShape(format!(
                "out has {} values for {} hidden values",
                out.len(),
                hidden.len()
            )));
        }
        self.enqueue(Input::Hidden(hidden), pos0, layers, Readout::Hidden)?;
        out.copy_from_slice(self.hidden()?);
        Ok(())
    }

    /// Turns per-op device timing on or off (needs a device opened with profiling,
    /// [`Device::open_with`]). While on, every launch records an event; read and reset the
    /// sums with [`Decoder::take_op_times`].
    pub fn set_profiling(&mut self, on: bool) -> Result<()> {
        if on && !self.dev.profiling {
            return Err(Error::NotApplicable(
                "per-op timing needs a device opened with profiling",
            ));
        }
        self.rec.events = if on {
            Some(Vec::with_capacity(1024))
        } else {
            None
        };
        Ok(())
    }

    /// Device time per op kind of the launches profiled since the last call (waits, bounded,
    /// for them), sorted by kind.
    pub fn take_op_times(&mut self) -> Result<Vec<OpTime>> {
        self.alive()?;
        let evs: Vec<(OpKind, Event)> = match &mut self.rec.events {
            Some(v) => std::mem::take(v),
            None => {
                return Err(Error::NotApplicable(
                    "profiling is off (Decoder::set_profiling)",
                ))
            }
        };
        let mut sums: Vec<OpTime> = Vec::new();
        for (kind, ev) in &evs {
            if let Err(e) = ev.wait("a profiled kernel", self.opts.timeout) {
                return Err(self.fail(e));
            }
            let (s, e) = ev.profile_ns()?;
            let secs = e.saturating_sub(s) as f64 * 1e-9;
            match sums.iter_mut().find(|o| o.kind == *kind) {
                Some(o) => {
                    o.launches += 1;
                    o.seconds += secs;
                }
                None => sums.push(OpTime {
                    kind: *kind,
                    launches: 1,
                    seconds: secs,
                }),
            }
        }
        sums.sort_by_key(|o| o.kind);
        Ok(sums)
    }
}
