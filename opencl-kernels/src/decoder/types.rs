//! The decoder's public vocabulary: the model's configuration and weights, the options, what a
//! step starts from and reads back, the op kinds it launches, the matrices of the column hook.

use crate::attention::KvType;
use crate::error::{Error, Result};
use crate::format::GgmlType;
use crate::kernels::RopeMode;
use std::time::Duration;

/// A Llama-architecture model's hyper-parameters, plus the decoder's own limits.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width (a multiple of 32).
    pub d_model: usize,
    /// Feed-forward width (a multiple of 32).
    pub d_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (divides `n_head`).
    pub n_kv_head: usize,
    /// Per-head width (even, at most 256; `n_head * head_dim` a multiple of 32).
    pub head_dim: usize,
    /// Rotated dimensions per head (even, at most `head_dim`).
    pub rope_dims: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE pairing: `Normal` (GGUF Llama models) or `Neox`.
    pub rope_mode: RopeMode,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Vocabulary size (rows of the embedding and the output head).
    pub vocab: usize,
    /// Positions the KV cache holds.
    pub max_context: usize,
    /// Rows of one prefill chunk (longer inputs are run in chunks of this many).
    pub max_rows: usize,
    /// Whether logits can be read for every row of a chunk (else only the last row's; the
    /// readback buffer is then `vocab` floats instead of `max_rows * vocab`).
    pub all_logits: bool,
}

impl DecoderConfig {
    /// Width of the queries (`n_head * head_dim`).
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of the keys and values (`n_kv_head * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_head * self.head_dim
    }

    pub(super) fn validate(&self) -> Result<()> {
        let c = self;
        let bad = |s: String| Err(Error::BadShape(s));
        if c.d_model == 0
            || !c.d_model.is_multiple_of(32)
            || c.d_ff == 0
            || !c.d_ff.is_multiple_of(32)
        {
            return bad(format!(
                "d_model ({}) and d_ff ({}) must be positive multiples of 32",
                c.d_model, c.d_ff
            ));
        }
        if c.n_head == 0 || c.n_kv_head == 0 || !c.n_head.is_multiple_of(c.n_kv_head) {
            return bad(format!(
                "n_head ({}) must be a positive multiple of n_kv_head ({})",
                c.n_head, c.n_kv_head
            ));
        }
        if c.head_dim == 0
            || !c.head_dim.is_multiple_of(2)
            || c.head_dim > 256
            || !c.q_dim().is_multiple_of(32)
        {
            return bad(format!(
                "head_dim ({}) must be even, at most 256, with n_head * head_dim a multiple of 32",
                c.head_dim
            ));
        }
        if c.rope_dims > c.head_dim || !c.rope_dims.is_multiple_of(2) {
            return bad(format!(
                "rope_dims ({}) must be even and at most head_dim ({})",
                c.rope_dims, c.head_dim
            ));
        }
        if c.vocab == 0 || c.max_context == 0 || c.max_rows == 0 {
            return bad("vocab, max_context and max_rows must be positive".into());
        }
        if c.max_context > u32::MAX as usize / 2 {
            return bad(format!("max_context {} is too large", c.max_context));
        }
        Ok(())
    }
}

/// A weight matrix as GGUF stores it: its type and its bytes (`n` rows of `k`, the shape the
/// configuration implies).
#[derive(Debug, Clone, Copy)]
pub struct Tensor<'a> {
    /// Element type (one of [`crate::COMPUTABLE`]: F16, Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, Q4_K,
    /// Q5_K, Q6_K; the K-quants need rows that are whole 256-value super-blocks).
    pub ty: GgmlType,
    /// The GGUF bytes, row-major, one row per output.
    pub data: &'a [u8],
}

/// One transformer block's weights.
#[derive(Debug, Clone, Copy)]
pub struct LayerWeights<'a> {
    /// Attention RMSNorm weight (`d_model`).
    pub attn_norm: &'a [f32],
    /// Query projection (`q_dim` x `d_model`).
    pub wq: Tensor<'a>,
    /// Key projection (`kv_dim` x `d_model`).
    pub wk: Tensor<'a>,
    /// Value projection (`kv_dim` x `d_model`).
    pub wv: Tensor<'a>,
    /// Output projection (`d_model` x `q_dim`).
    pub wo: Tensor<'a>,
    /// FFN RMSNorm weight (`d_model`).
    pub ffn_norm: &'a [f32],
    /// SwiGLU gate (`d_ff` x `d_model`).
    pub gate: Tensor<'a>,
    /// SwiGLU up (`d_ff` x `d_model`).
    pub up: Tensor<'a>,
    /// Down projection (`d_model` x `d_ff`).
    pub down: Tensor<'a>,
}

/// A whole model's weights.
#[derive(Debug, Clone)]
pub struct ModelWeights<'a> {
    /// Token embedding (`vocab` x `d_model`).
    pub embed: Tensor<'a>,
    /// The blocks, `n_layer` of them.
    pub layers: Vec<LayerWeights<'a>>,
    /// Final RMSNorm weight (`d_model`).
    pub output_norm: &'a [f32],
    /// Output head (`vocab` x `d_model`); `None` when it is tied to the embedding (the
    /// embedding is then uploaded once, in the head's layout, and gathered from there).
    pub output: Option<Tensor<'a>>,
}

/// How the decoder runs.
#[derive(Debug, Clone)]
pub struct DecoderOptions {
    /// Zero-copy host buffers (map instead of transfer): `None` = when the device reports
    /// `CL_DEVICE_HOST_UNIFIED_MEMORY`.
    pub zero_copy: Option<bool>,
    /// Device memory the decoder may use, if less than `CL_DEVICE_GLOBAL_MEM_SIZE`.
    pub memory_budget: Option<u64>,
    /// The longest a readback waits for the device before the decoder declares it lost.
    pub timeout: Duration,
    /// How one-token decode steps run (prefill and layer ranges always run layered).
    pub decode: DecodePath,
    /// Submit the queue (`clFlush`) after every this many launches, so a driver that batches
    /// commands until a flush starts the device early; 0 (default): once, at the end of a step.
    pub flush_every: usize,
    /// Work-groups of the persistent decode step ([`DecodePath::Persistent`]); 0 (default):
    /// one per compute unit on a GPU, one on a CPU device. Every group must be resident at
    /// once, so on a GPU a larger count is capped at [`DecoderOptions::persistent_groups_per_cu`]
    /// per compute unit; on a CPU device it
    /// is taken as asked, and groups the device does not run together make each step fail
    /// with [`Error::GridBarrier`](crate::Error::GridBarrier) after a bounded wait.
    pub persistent_groups: usize,
    /// Work-groups of the persistent step a GPU compute unit is trusted to hold at once (the
    /// bound on [`DecoderOptions::persistent_groups`] and its default); 0 (default): 1, which
    /// holds wherever the kernel launches at all. More can be faster but depends on the
    /// kernel's register use, which OpenCL does not report: a count the device cannot hold
    /// ends each step in [`Error::GridBarrier`](crate::Error::GridBarrier) after a bounded wait.
    pub persistent_groups_per_cu: usize,
    /// One-row decode attention split over ranges of positions, a work-group per range and
    /// group of query heads of one kv head, the last of a group combining the parts (default);
    /// `false`: the tiled prefill kernel on the one row.
    pub split_attention: bool,
    /// The fewest work-groups a one-row GEMV should have, where its rows allow: 0 (default):
    /// the device's compute units; 1: the widest work-groups (fewest groups).
    pub gemv_min_groups: usize,
    /// Measurement only: the persistent step runs its grid barriers and none of its work (its
    /// outputs are garbage), to time what the barriers cost.
    pub persistent_barriers_only: bool,
    /// Floats of the activation row the persistent step stages in local memory at once; 0
    /// (default): the widest row where the device's local memory holds it, else as many as
    /// fit (a wider row is staged in chunks, its partial sums kept in global memory). Tests
    /// set it low to exercise the chunks on devices with ample local memory.
    pub persistent_stage_floats: usize,
    /// The fast matmuls of `kernels/mm.cl` (default on): the x-stationary GEMV and the
    /// register-tiled GEMM for Q4_0, Q4_1, F16 and the split layouts (Q8_0, Q5_0, Q5_1 and the
    /// K-quants, re-laid at load where decode steps run layered); `false`: the older
    /// decoder.cl kernels on the GGUF layouts (for comparison).
    pub fast_matmul: bool,
    /// int8 activations in the one-row GEMVs (quantized per 32 values inside the kernel, as
    /// llama.cpp's CUDA path does; results carry that rounding, an NMSE near 1e-5 a matmul):
    /// `None` (default) where the device has a hardware int8 dot product (found by a probe,
    /// [`crate::caps::int_dot`]), `Some(true)` always (portable integer code where it has
    /// none: for tests), `Some(false)` never.
    pub int8_activations: Option<bool>,
    /// Measurement only: the fast GEMM's tile rows (128 or 64; 0 = chosen per matrix).
    pub gemm_tile_rows: usize,
    /// Measurement only: the fast GEMV's steps of four rows a team (0 = chosen per matrix).
    pub gemv_steps: usize,
    /// How the KV cache stores its values: f16 (default, llama.cpp's default; half the
    /// memory of f32), f32, or q8_0 (GGUF's Q8_0 blocks, about a quarter of f32; needs
    /// `kv_dim` a multiple of 32, runs layered: decode blocks and the persistent step are
    /// `NotApplicable`, `Auto` takes layered). Every kernel reads the type it stores and
    /// computes in f32.
    pub kv: KvType,
    /// Host threads that re-lay the layers' weights and write them to the device at build
    /// time; 0 (default): the host's cores, at most 8.
    pub prepare_threads: usize,
    /// Every layer's weights in one allocation and every cache in another (parts as
    /// sub-buffers): `None` (default) where the persistent step may run (it needs them),
    /// `Some(true)` always, `Some(false)` never (the persistent step is then unfit).
    pub one_allocation: Option<bool>,
}

/// Where [`Decoder::new`](super::Decoder::new) spent its time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BuildTimes {
    /// Building the OpenCL programs: the longest of the three builds, which run side by side and
    /// beside the weights' preparation (loads from the binary cache when warm).
    pub programs: Duration,
    /// Each of them: the decoder's ops, the attention kernels, the fast matmuls (one program
    /// per weight format, side by side).
    pub program_builds: [Duration; 3],
    /// Re-laying and writing every weight, wall time (while the programs build).
    pub weights: Duration,
    /// Re-laying on the host, summed over the threads.
    pub relayout: Duration,
    /// Writing to the device (blocking writes), summed over the threads.
    pub upload: Duration,
    /// Threads that prepared the weights (the layers' workers and the head's).
    pub threads: usize,
    /// The whole build.
    pub total: Duration,
}

impl Default for DecoderOptions {
    fn default() -> Self {
        DecoderOptions {
            zero_copy: None,
            memory_budget: None,
            timeout: Duration::from_secs(60),
            decode: DecodePath::Auto,
            flush_every: 0,
            persistent_groups: 0,
            persistent_groups_per_cu: 0,
            split_attention: true,
            gemv_min_groups: 0,
            persistent_barriers_only: false,
            persistent_stage_floats: 0,
            fast_matmul: true,
            int8_activations: None,
            gemm_tile_rows: 0,
            gemv_steps: 0,
            kv: KvType::F16,
            prepare_threads: 0,
            one_allocation: None,
        }
    }
}

/// What a step starts from.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// Token ids (each `< vocab`); the step begins with the embedding gather, so its layer
    /// range must start at 0.
    Tokens(&'a [u32]),
    /// Hidden rows (`m * d_model` floats, `m <= max_rows`): the input of the range's first
    /// layer, e.g. the output of layers another processor ran.
    Hidden(&'a [f32]),
}

/// What a step leaves to read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readout {
    /// Nothing (the step only fills the KV cache).
    Nothing,
    /// The hidden rows after the layer range ([`Decoder::hidden`](super::Decoder::hidden);
    /// `m <= max_rows`).
    Hidden,
    /// The last row's logits ([`Decoder::logits`](super::Decoder::logits)); the range must end
    /// at the last layer.
    Logits,
    /// Every row's logits (`m <= max_rows`, `all_logits` configured).
    AllLogits,
    /// The last row's argmax ([`Decoder::argmax`](super::Decoder::argmax); the logits are
    /// there too).
    Argmax,
    /// Every row's argmax (as `AllLogits`).
    AllArgmax,
}

/// The kernel launches the decoder makes, for launch counts and device time per op kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Embedding gather.
    Embed,
    /// Norm + Q/K/V matmul + RoPE + KV append.
    QkvRope,
    /// Causal attention.
    Attention,
    /// O projection + residual.
    OProj,
    /// Norm + gate/up matmul + SwiGLU.
    GateUpSwiglu,
    /// Down projection + residual.
    Down,
    /// Final norm + output head.
    Head,
    /// Argmax.
    Argmax,
    /// A [`Decoder::matmul_rows`](super::Decoder::matmul_rows) call.
    Matmul,
    /// Decode block A: norm + this head's q/k/v + RoPE + KV append + attention + its share
    /// of the O projection ([`DecodePath::Blocks`]).
    BlockAttn,
    /// Decode block B: residual + norm + a chunk of gate/up + SwiGLU + its share of down.
    BlockFfn,
    /// The last block B's partial rows added to the residual, before the head.
    BlockFinish,
    /// A whole persistent decode step ([`DecodePath::Persistent`]): gather, every layer,
    /// head and argmax in one launch.
    Persistent,
}

impl OpKind {
    /// A short name for tables ("norm+qkv+rope+kv", "attention", ...).
    pub fn name(self) -> &'static str {
        match self {
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
        }
    }
}

/// How a one-token decode step is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodePath {
    /// Chosen by device capability and model size, from measurements:
    /// [`DecodePath::Persistent`] on GPU devices where the model and the device allow it and
    /// a layer's weights come to at most 64 KiB a compute unit (on the H200 it beat the
    /// layered path at SmolLM2-135M's shapes, 761 vs 750 and 750 vs 623 tok/s in two runs,
    /// and lost at Llama-3.2-1B's, 440 vs 856, and Llama-3-8B's, 79 vs 214; the layered path
    /// beat decode blocks, 750 vs 563), else
    /// [`DecodePath::Layered`] (on CPU devices the blocks' few work-groups are slower, and
    /// work-groups need not run concurrently, which the persistent step needs).
    Auto,
    /// Five launches a layer, one per fused op (the same kernels as prefill, GEMV form; the
    /// attention split over positions, see [`DecoderOptions::split_attention`]).
    Layered,
    /// Two launches a layer: block A (one work-group per query head: norm, its q/k/v, RoPE,
    /// KV append, attention and its share of the O projection) and block B (one work-group per
    /// chunk of FFN columns: the residual, norm, its gate/up rows, SwiGLU and its share of
    /// down); the shares are partial rows summed, in a fixed order, by the next block. Needs
    /// one weight type for all of a layer's matrices, a power-of-two head_dim in 16..=256 and
    /// the local memory for it.
    Blocks,
    /// One launch a token: work-groups that are all resident at once run every layer's ops
    /// in turn, separated by grid barriers (an atomic counter), then the head and the argmax
    /// (`kernels/persistent.cl`). Needs every layer to store each matrix the same way, with
    /// Q/K/V of one type and gate/up of one type, in F16, Q8_0, Q4_0 or Q4_1 (a head of
    /// another type runs as the layered head launches after the step),
    /// the weights and caches in one allocation each (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`), and a
    /// device that runs all its work-groups concurrently: NVIDIA's GPUs do, for at most one
    /// group per compute unit; the OpenCL standard does not promise it, so elsewhere only on
    /// request (a group that never runs makes the step fail after a bounded wait, not hang).
    /// Other readouts than the logits or the argmax run layered.
    Persistent,
}

/// Device time of one kind of op over the profiled steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTime {
    /// The op.
    pub kind: OpKind,
    /// Launches profiled.
    pub launches: usize,
    /// Their summed device time (`COMMAND_END - COMMAND_START`), in seconds.
    pub seconds: f64,
}

/// A resident weight, for [`Decoder::matmul_rows`](super::Decoder::matmul_rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Matrix {
    /// Query projection of a layer (input: the attention norm of the hidden row).
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Output projection (input: the attention output).
    O,
    /// SwiGLU gate (input: the FFN norm of the hidden row).
    Gate,
    /// SwiGLU up.
    Up,
    /// Down projection (input: the SwiGLU output).
    Down,
    /// The output head (input: the final norm of the hidden row; `layer` is ignored).
    Head,
}

/// The activation a [`Decoder::matmul_rows`](super::Decoder::matmul_rows) reads.
#[derive(Debug, Clone, Copy)]
pub enum MatInput<'a> {
    /// Rows from the host (`m * k` floats), uploaded for this call.
    Host(&'a [f32]),
    /// The decoder's resident hidden rows (as the last step left them).
    Hidden,
    /// The resident attention output of the last step.
    Attention,
    /// The resident SwiGLU output of the last step.
    Ffn,
}
