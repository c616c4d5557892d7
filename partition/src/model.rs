//! Layer-level placement and whole-model plans.

use crate::checked::CheckedProfile;
use crate::plan::{plan_with, Extrapolation, OpPlan, PlanError};
use crate::profile::{Backend, Order, Phase};

/// Most ops one layer description may hold (fixed capacity: no allocation).
pub const MAX_LAYER_OPS: usize = 24;

/// One op of a transformer layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerOp {
    /// A matmul with weight `[k, n]` (projection, FFN, ...): partitioned by the solver.
    MatMul {
        /// Reduction dimension.
        k: u32,
        /// Output columns.
        n: u32,
    },
    /// RMSNorm over `dim` features.
    RmsNorm {
        /// Feature count.
        dim: u32,
    },
    /// Rotary position embedding on q and k.
    Rope {
        /// Query heads.
        n_heads: u32,
        /// Key/value heads.
        n_kv_heads: u32,
        /// Head dimension.
        head_dim: u32,
    },
    /// Attention (scores, softmax, weighted values) over the KV cache.
    Attention {
        /// Query heads.
        n_heads: u32,
        /// Key/value heads (grouped-query attention when fewer than `n_heads`).
        n_kv_heads: u32,
        /// Head dimension.
        head_dim: u32,
    },
    /// SwiGLU: `silu(gate) * up` over `dim` features.
    SwiGlu {
        /// Feature count.
        dim: u32,
    },
    /// Residual add over `dim` features.
    Add {
        /// Feature count.
        dim: u32,
    },
}

/// A model: the ops of one layer (all layers share shapes), the layer count and the LM head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDesc {
    ops: [LayerOp; MAX_LAYER_OPS],
    len: usize,
    /// Number of layers.
    pub n_layers: u32,
    /// Hidden size (input of the LM head).
    pub hidden: u32,
    /// Vocabulary size (output of the LM head).
    pub vocab: u32,
}

/// Why a model description was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelError {
    /// A zero dimension, zero layers, or `n_heads` not a multiple of `n_kv_heads`.
    BadShape,
    /// More than [`MAX_LAYER_OPS`] ops in a layer.
    TooManyOps,
}

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModelError::BadShape => {
                f.write_str("dimensions and layers must be > 0, n_heads a multiple of n_kv_heads")
            }
            ModelError::TooManyOps => write!(f, "at most {MAX_LAYER_OPS} ops per layer"),
        }
    }
}

impl std::error::Error for ModelError {}

impl ModelDesc {
    /// A model from an explicit list of per-layer ops.
    pub fn new(
        ops: &[LayerOp],
        n_layers: u32,
        hidden: u32,
        vocab: u32,
    ) -> Result<ModelDesc, ModelError> {
        if ops.len() > MAX_LAYER_OPS {
            return Err(ModelError::TooManyOps);
        }
        if n_layers == 0 || hidden == 0 || vocab == 0 || ops.iter().any(|o| !op_ok(o)) {
            return Err(ModelError::BadShape);
        }
        let mut arr = [LayerOp::Add { dim: 1 }; MAX_LAYER_OPS];
        arr[..ops.len()].copy_from_slice(ops);
        Ok(ModelDesc {
            ops: arr,
            len: ops.len(),
            n_layers,
            hidden,
            vocab,
        })
    }

    /// A Llama-style decoder layer: RMSNorm, q/k/v projections, RoPE, attention, o projection,
    /// residual add, RMSNorm, gate/up projections, SwiGLU, down projection, residual add.
    pub fn llama(
        hidden: u32,
        intermediate: u32,
        n_heads: u32,
        n_kv_heads: u32,
        head_dim: u32,
        n_layers: u32,
        vocab: u32,
    ) -> Result<ModelDesc, ModelError> {
        let q = n_heads.checked_mul(head_dim).ok_or(ModelError::BadShape)?;
        let kv = n_kv_heads
            .checked_mul(head_dim)
            .ok_or(ModelError::BadShape)?;
        let heads = (n_heads, n_kv_heads, head_dim);
        let ops = [
            LayerOp::RmsNorm { dim: hidden },
            LayerOp::MatMul { k: hidden, n: q },
            LayerOp::MatMul { k: hidden, n: kv },
            LayerOp::MatMul { k: hidden, n: kv },
            LayerOp::Rope {
                n_heads: heads.0,
                n_kv_heads: heads.1,
                head_dim: heads.2,
            },
            LayerOp::Attention {
                n_heads: heads.0,
                n_kv_heads: heads.1,
                head_dim: heads.2,
            },
            LayerOp::MatMul { k: q, n: hidden },
            LayerOp::Add { dim: hidden },
            LayerOp::RmsNorm { dim: hidden },
            LayerOp::MatMul {
                k: hidden,
                n: intermediate,
            },
            LayerOp::MatMul {
                k: hidden,
                n: intermediate,
            },
            LayerOp::SwiGlu { dim: intermediate },
            LayerOp::MatMul {
                k: intermediate,
                n: hidden,
            },
            LayerOp::Add { dim: hidden },
        ];
        ModelDesc::new(&ops, n_layers, hidden, vocab)
    }

    /// The ops of one layer.
    pub fn ops(&self) -> &[LayerOp] {
        &self.ops[..self.len]
    }
}

fn op_ok(o: &LayerOp) -> bool {
    match *o {
        LayerOp::MatMul { k, n } => k > 0 && n > 0,
        LayerOp::RmsNorm { dim } | LayerOp::SwiGlu { dim } | LayerOp::Add { dim } => dim > 0,
        LayerOp::Rope {
            n_heads,
            n_kv_heads,
            head_dim,
        }
        | LayerOp::Attention {
            n_heads,
            n_kv_heads,
            head_dim,
        } => n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && n_heads % n_kv_heads == 0,
    }
}

/// Which matmul plans a model plan uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// The solver's minimum for every matmul.
    Auto,
    /// Everything on one backend.
    Single(Backend),
    /// The NPU with activation-centric / multi-tensor row splits, the rest on the given
    /// backend; ops whose `m` does not exceed the smallest standard shape run on that backend,
    /// ops whose `m` is a whole number of standard chunks on the NPU alone when that is cheaper.
    NpuActivation(Backend),
    /// Weight-centric split: the first backend takes the ratio of columns.
    WeightCentric(Backend, Backend, f64),
    /// EdgeAgent's CPU–GPU column split.
    CpuGpuColumns,
}

/// Where a layer op runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Placement {
    /// A matmul and its plan.
    MatMul(OpPlan),
    /// A non-matmul op on one backend.
    On(Backend),
    /// Attention split by heads: query heads `0..cpu_heads` on the CPU, the rest on the GPU
    /// (whole KV groups on each side).
    HeadSplit {
        /// Query heads on the CPU.
        cpu_heads: u32,
        /// Query heads on the GPU.
        gpu_heads: u32,
    },
}

/// Plan of a whole model at one row count: one placement per layer op (every layer is the same
/// shape, so one layer's plan serves all), the LM head's plan, and the predicted matmul time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelPlan {
    places: [Placement; MAX_LAYER_OPS],
    len: usize,
    /// Prefill or decode.
    pub phase: Phase,
    /// Activation rows of each layer op.
    pub m: u32,
    /// The LM head's plan (1 row in prefill: only the last token's logits; `m` in decode).
    pub lm_head: OpPlan,
    /// Predicted matmul time of the whole model, µs: `n_layers` x the layer's matmuls + LM head.
    /// Non-matmul ops are not in the profile and not counted.
    pub predicted_us: f64,
}

impl ModelPlan {
    /// One placement per op of [`ModelDesc::ops`], same order.
    pub fn placements(&self) -> &[Placement] {
        &self.places[..self.len]
    }

    /// The farthest extrapolation any of the model's matmul plans (LM head included) leans
    /// on, if one does (see [`OpPlan::extrapolation`]).
    pub fn extrapolation(&self) -> Option<Extrapolation> {
        self.placements()
            .iter()
            .filter_map(|pl| match pl {
                Placement::MatMul(p) => p.extrapolation,
                _ => None,
            })
            .chain(self.lm_head.extrapolation)
            .max_by(|a, b| a.factor.total_cmp(&b.factor))
    }
}

/// Splits `n_heads` query heads between CPU and GPU at the two rates, in whole KV groups
/// (`n_heads / n_kv_heads` query heads each), the CPU share rounded to the nearest group.
/// Returns `(cpu_heads, gpu_heads)`.
pub fn split_heads(
    n_heads: u32,
    n_kv_heads: u32,
    cpu_rate: f64,
    gpu_rate: f64,
) -> Result<(u32, u32), PlanError> {
    if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
        return Err(PlanError::ZeroShape);
    }
    let ok = |r: f64| r.is_finite() && r >= 0.0;
    if !ok(cpu_rate) || !ok(gpu_rate) || cpu_rate + gpu_rate <= 0.0 {
        return Err(PlanError::BadRatio);
    }
    let group = n_heads / n_kv_heads;
    let groups = (n_kv_heads as f64 * cpu_rate / (cpu_rate + gpu_rate)).round() as u32;
    let cpu = groups.min(n_kv_heads) * group;
    Ok((cpu, n_heads - cpu))
}

/// Plans a whole model at `m` rows.
///
/// Matmuls follow `policy`. Other ops run on the host accelerator: the GPU if the profile has
/// one with a path for `phase`, else the CPU (the NPU runs matmuls only: static graphs, no dynamic KV length). In
/// decode, attention is split by heads between CPU and GPU when both have a decode path and do
/// not run one after the other (pair overlap > 0; EdgeAgent), at rates inverse to their
/// predicted latency on the layer's first matmul; in prefill it runs on the host accelerator.
/// Every matmul uses the curves of `phase`; the LM head too. Identical matmul shapes in a layer are planned once. No allocation.
pub fn plan_model(
    p: &CheckedProfile,
    model: &ModelDesc,
    m: u32,
    phase: Phase,
    policy: Policy,
) -> Result<ModelPlan, PlanError> {
    if m == 0 {
        return Err(PlanError::ZeroShape);
    }
    let host = if p.has_phase(Backend::Gpu, phase) {
        Backend::Gpu
    } else if p.has_phase(Backend::Cpu, phase) {
        Backend::Cpu
    } else {
        return Err(PlanError::MissingBackend(Backend::Gpu));
    };
    let ops = model.ops();
    let mut places = [Placement::On(host); MAX_LAYER_OPS];
    let mut layer_us = 0.0;
    let mut first_mm: Option<(u32, u32)> = None;
    for (i, op) in ops.iter().enumerate() {
        if let LayerOp::MatMul { k, n } = *op {
            first_mm.get_or_insert((k, n));
            // Reuse the plan of an earlier op of the same shape.
            let prev = places[..i].iter().find_map(|pl| match pl {
                Placement::MatMul(q) if q.k == k && q.n == n => Some(*q),
                _ => None,
            });
            let plan = match prev {
                Some(q) => q,
                None => plan_with(p, phase, policy, k, n, m)?,
            };
            layer_us += plan.predicted_us();
            places[i] = Placement::MatMul(plan);
        }
    }
    // Splitting heads between two backends that run one after the other gains nothing.
    let both = p.has_phase(Backend::Cpu, phase)
        && p.has_phase(Backend::Gpu, phase)
        && p.pair(Backend::Cpu, Backend::Gpu)
            .is_some_and(|(_, overlap, _)| overlap > 0.0);
    if phase == Phase::Decode && both {
        let (k, n) = first_mm.unwrap_or((model.hidden, model.hidden));
        let t_cpu = p.latency_us_in(Backend::Cpu, phase, k, n, m, Order::ActivationFirst)?;
        let t_gpu = p.latency_us_in(Backend::Gpu, phase, k, n, m, Order::ActivationFirst)?;
        for (i, op) in ops.iter().enumerate() {
            if let LayerOp::Attention {
                n_heads,
                n_kv_heads,
                ..
            } = *op
            {
                let (cpu_heads, gpu_heads) =
                    split_heads(n_heads, n_kv_heads, 1.0 / t_cpu, 1.0 / t_gpu)?;
                places[i] = Placement::HeadSplit {
                    cpu_heads,
                    gpu_heads,
                };
            }
        }
    }
    let head_m = if phase == Phase::Prefill { 1 } else { m };
    let lm_head = plan_with(p, phase, policy, model.hidden, model.vocab, head_m)?;
    Ok(ModelPlan {
        places,
        len: ops.len(),
        phase,
        m,
        lm_head,
        predicted_us: layer_us * model.n_layers as f64 + lm_head.predicted_us(),
    })
}
