//! The persistent decode step ([`DecodePath::Persistent`](super::DecodePath::Persistent)): one
//! launch a token, its work-groups all resident and separated by grid barriers
//! (`kernels/persistent.cl`), built when the model and the device allow it.

use super::ops::{Mat, Op, Shared};
use super::prepare::MatKind;
use super::{DecoderConfig, LayerMats, OpKind};
use crate::attention::KvType;
use crate::device::{Buffer, Device, DeviceInfo, Program};
use crate::error::{Error, Result};
use crate::kernels::{Launch, OPTIONS};
use std::sync::Arc;

/// The OpenCL C source of the persistent decode step (embedded): the shared helpers, the
/// decoder's helpers, then the kernel.
pub const PERSISTENT_SOURCE: &str = concat!(
    include_str!("../../kernels/common.cl"),
    include_str!("../../kernels/kv.cl"),
    include_str!("../../kernels/decoder_ops.cl"),
    include_str!("../../kernels/persistent.cl")
);

/// Work-items a group (persistent.cl's PK_WG).
const WG: usize = 256;
/// Position ranges a head's attention is split into at most (persistent.cl's PK_SMAX).
const SMAX: usize = 16;
/// Words of the state buffer before the per-head counters (persistent.cl's ST_HEADS).
const ST_HEADS: usize = 5;
/// Offsets per layer in the weight table (persistent.cl's LO_N).
const LO_N: usize = 10;
/// Bytes of persistent.cl's fixed local arrays (red, bi, qs, sc/rm/rl, flag).
const STATIC_LOCAL: usize = (2 * WG + WG + 256 + 3 * (WG / 4)) * 4 + 4;
/// Local bytes kept free beside the kernel's own arrays (for what a compiler adds).
const LOCAL_SLACK: usize = 256;
/// The fewest floats of the activation row a chunk stages (one K-quant super-block's width;
/// a device with less local memory than this beside the fixed arrays is refused).
const MIN_STAGE: usize = 256;

/// The launch and what it keeps alive.
pub(super) struct Persistent {
    pub(super) op: Op,
    pos_arg: u32,
    readout_arg: u32,
    pub(super) groups: usize,
    /// Whether the step runs the head and argmax itself; else it stops after the last layer
    /// and the layered head and argmax launches follow (a head type it has no GEMV for).
    pub(super) head: bool,
    /// Floats of the activation row staged at once (PK_XS): the widest row where it fits.
    pub(super) stage: usize,
    pub(super) prog: Program,
    _bufs: [Buffer; 5],
}

/// Where the layers' weights and caches live: an arena each and the byte offsets of every
/// layer's parts in it (weights: q/k/v, o, gate/up, down planes and the two norms, ten a
/// layer; caches: K and V, two a layer).
pub(super) struct Arenas<'a> {
    pub(super) weights: Option<&'a (Buffer, Vec<u64>)>,
    pub(super) caches: Option<&'a (Buffer, Vec<u64>)>,
}

/// Work-groups of the persistent step a GPU compute unit is trusted to hold at once by default.
/// One is safe wherever the kernel launches at all (its registers and local memory fit one
/// group); more depends on register use that OpenCL does not report.
const SAFE_GROUPS_PER_CU: usize = 1;

/// The most work-groups this device is trusted to run at once: `CL_DEVICE_MAX_COMPUTE_UNITS` x
/// `per_cu` (0: [`SAFE_GROUPS_PER_CU`]) on a GPU; one on a CPU device, whose work-groups need
/// not run concurrently at all.
pub(super) fn max_groups(info: &DeviceInfo, per_cu: usize) -> usize {
    if info.is_cpu {
        1
    } else {
        let per_cu = if per_cu == 0 {
            SAFE_GROUPS_PER_CU
        } else {
            per_cu
        };
        info.compute_units.max(1) * per_cu
    }
}

/// Work-groups for this device: [`max_groups`] by default (`asked` 0), else `asked`, capped at
/// [`max_groups`] on a GPU. On a CPU device an explicit count is taken as asked (no count is
/// promised to run concurrently there; the tests use it to make a barrier stall): a group that
/// never runs ends the step in [`Error::GridBarrier`] after a bounded wait, not a hang.
pub(super) fn groups(info: &DeviceInfo, asked: usize, per_cu: usize) -> usize {
    match asked {
        0 => max_groups(info, per_cu),
        n if info.is_cpu => n,
        n => n.min(max_groups(info, per_cu)),
    }
}

/// Floats of a unit of the row's values (persistent.cl's PK_UF): 32 in the T layout, 8 else.
fn unit_floats(k: MatKind) -> usize {
    match k {
        MatKind::Q40T | MatKind::Q41T => 32,
        _ => 8,
    }
}

/// Units of one staged chunk of a `k`-wide row of kind `kind` when `stage` floats are staged
/// at most (persistent.cl's `cu`: the row's units split into equal chunks).
fn chunk_units(kind: MatKind, k: usize, stage: usize) -> usize {
    let units = kind.row_units(k);
    let most = (stage / unit_floats(kind)).max(1);
    units.div_ceil(units.div_ceil(most).max(1))
}

/// Weight units per work-item and row in flight: enough for the widest chunk (persistent.cl's
/// PK_U), at least 4, a power of two.
fn units_in_flight(c: &DecoderConfig, l: &SingleTyped<'_>, head: MatKind, stage: usize) -> usize {
    let most = [
        (l.qkv.kind, c.d_model),
        (l.o.kind, c.q_dim()),
        (l.gate_up.kind, c.d_model),
        (l.down.kind, c.d_ff),
        (head, c.d_model),
    ]
    .into_iter()
    .map(|(kind, k)| chunk_units(kind, k, stage))
    .max()
    .unwrap_or(0);
    most.div_ceil(WG).max(4).next_power_of_two()
}

/// Floats of the activation row the step stages at once (PK_XS): the widest row (d, q width,
/// d_ff) where the device's local memory holds it beside the fixed arrays, else as many
/// as fit, a multiple of 256 (rows wider than that are staged in chunks); `asked` (> 0)
/// caps it (the tests force chunks with it). `None`: not even 256 fit.
pub(super) fn stage_floats(c: &DecoderConfig, info: &DeviceInfo, asked: usize) -> Option<usize> {
    let widest = c.d_model.max(c.q_dim()).max(c.d_ff);
    let room = (info.local_mem_size as usize).saturating_sub(STATIC_LOCAL + LOCAL_SLACK) / 4;
    let n = widest.min(room / MIN_STAGE * MIN_STAGE);
    if n < MIN_STAGE.min(widest) {
        return None;
    }
    Some(if asked > 0 { n.min(asked.max(8)) } else { n })
}

/// A layer's four matrices when it has one fused Q/K/V and one interleaved gate/up (their
/// parts each of one type), the only layers the persistent step runs.
struct SingleTyped<'a> {
    qkv: &'a Mat,
    o: &'a Mat,
    gate_up: &'a Mat,
    down: &'a Mat,
}

fn single_typed(l: &LayerMats) -> Option<SingleTyped<'_>> {
    match (&l.qkv[..], &l.gate_up[..]) {
        ([qkv], [gate_up]) => Some(SingleTyped {
            qkv: &qkv.mat,
            o: &l.o,
            gate_up,
            down: &l.down,
        }),
        _ => None,
    }
}

/// The storage kinds persistent.cl has GEMVs for.
pub(super) fn has_kernels(k: MatKind) -> bool {
    matches!(
        k,
        MatKind::Q40T | MatKind::Q41T | MatKind::Q80 | MatKind::F16
    )
}

/// Why the persistent step cannot run this model here, if it cannot.
pub(super) fn unfit(
    c: &DecoderConfig,
    layers: &[LayerMats],
    arenas: &Arenas<'_>,
    info: &DeviceInfo,
    stage: usize,
    kv: KvType,
) -> Option<&'static str> {
    if kv == KvType::Q8_0 {
        // The step appends k/v from its GEMV epilogue, pair by pair; a q8_0 block's scale
        // needs all 32 values (the layered path stages them and quantizes between launches).
        return Some("the persistent step needs an f32 or f16 KV cache");
    }
    if layers.is_empty() {
        return Some("the persistent step needs at least one layer");
    }
    let Some(single) = layers.iter().map(single_typed).collect::<Option<Vec<_>>>() else {
        return Some(
            "the persistent step needs Q/K/V of one type and gate/up of one type in every layer",
        );
    };
    let first = &single[0];
    if single.iter().any(|l| {
        l.qkv.kind != first.qkv.kind
            || l.o.kind != first.o.kind
            || l.gate_up.kind != first.gate_up.kind
            || l.down.kind != first.down.kind
    }) {
        return Some("the persistent step needs every layer to store each matrix alike");
    }
    if ![first.qkv, first.o, first.gate_up, first.down]
        .iter()
        .all(|m| has_kernels(m.kind))
    {
        return Some("the persistent step runs F16, Q8_0, Q4_0 and Q4_1 layers only");
    }
    if arenas.weights.is_none() || arenas.caches.is_none() {
        return Some(
            "the persistent step needs the layers' weights (and caches) in one buffer each, \
             larger than CL_DEVICE_MAX_MEM_ALLOC_SIZE here",
        );
    }
    if info.max_work_group_size < WG {
        return Some("the persistent step needs work-groups of 256");
    }
    if stage_floats(c, info, stage).is_none() {
        return Some("the persistent step needs more local memory than the device has");
    }
    None
}

/// What the step reads and writes besides the layers.
pub(super) struct Io<'a> {
    pub(super) head: &'a Mat,
    pub(super) output_norm: &'a Buffer,
    pub(super) embed: (&'a Buffer, &'a Buffer, u32),
    pub(super) tokens: &'a Buffer,
    pub(super) x: &'a Buffer,
    pub(super) q: &'a Buffer,
    pub(super) att: &'a Buffer,
    pub(super) h: &'a Buffer,
    pub(super) logits: &'a Buffer,
    pub(super) ids: &'a Buffer,
}

/// Builds the kernel for these storage kinds and prepares its launch over `groups`
/// work-groups.
#[allow(clippy::too_many_arguments)]
pub(super) fn build(
    dev: &Arc<Device>,
    c: &DecoderConfig,
    layers: &[LayerMats],
    arenas: &Arenas<'_>,
    io: &Io<'_>,
    sh: &Shared,
    groups: usize,
    barriers_only: bool,
    stage: usize,
    kv: KvType,
) -> Result<Persistent> {
    let Some(stage) = stage_floats(c, dev.info(), stage) else {
        return Err(Error::NotApplicable(
            "the persistent step needs more local memory than the device has",
        ));
    };
    // A head of a type the step has no GEMV for runs as the layered launches after it; the
    // kernel is built with an F16 head it never calls.
    let head = has_kernels(io.head.kind);
    let head_kind = if head { io.head.kind } else { MatKind::F16 };
    let (Some((warena, woffs)), Some((kvarena, kvoffs))) = (arenas.weights, arenas.caches) else {
        return Err(Error::NotApplicable("the persistent step needs its arenas"));
    };
    let Some(l0) = layers.first().and_then(single_typed) else {
        return Err(Error::NotApplicable(
            "the persistent step needs single-typed Q/K/V and gate/up",
        ));
    };
    let l0 = &l0;
    let opts = format!(
        "{OPTIONS} -DPK_QKV={} -DPK_O={} -DPK_GU={} -DPK_DN={} -DPK_HEAD={} -DPK_U={}u \
         -DPK_XS={stage}u -DKV_TYPE={}",
        l0.qkv.kind.suffix(),
        l0.o.kind.suffix(),
        l0.gate_up.kind.suffix(),
        l0.down.kind.suffix(),
        head_kind.suffix(),
        units_in_flight(c, l0, head_kind, stage),
        kv.code()
    );
    let prog = dev.build(PERSISTENT_SOURCE, &opts)?;
    let lofs = dev.upload(woffs)?;
    // Cache offsets in values (the kernel indexes an arena of the cache's type; f32 or f16).
    let size = if kv == KvType::F16 { 2 } else { 4 };
    let kvofs: Vec<u64> = kvoffs.iter().map(|o| o / size).collect();
    let kvofs = dev.upload(&kvofs)?;
    let (h, d) = (c.n_head, c.head_dim);
    let parts = dev.alloc(h * SMAX * (d + 2) * 4)?;
    let state = dev.upload(&vec![0u32; ST_HEADS + h + 2 * groups])?;
    // Partial sums of rows staged in chunks: one float per output of the widest GEMV.
    let acc_len = (c.q_dim() + 2 * c.kv_dim())
        .max(2 * c.d_ff)
        .max(c.d_model)
        .max(if head { c.vocab } else { 0 });
    let acc = dev.alloc(acc_len * 4)?;
    let u = |v: usize, what: &str| {
        u32::try_from(v).map_err(|_| Error::BadShape(format!("{what} = {v} exceeds u32")))
    };
    let mut l = Launch::create(dev, &prog, "pk_decode", 1, [groups * WG, 1], [WG, 1])?;
    l.mem(warena)?.mem(&lofs)?;
    l.mem(&io.head.w0)?.mem(&io.head.w1)?.mem(io.output_norm)?;
    l.mem(io.embed.0)?.mem(io.embed.1)?.scalar(io.embed.2)?;
    l.mem(kvarena)?.mem(&kvofs)?.mem(&sh.rope)?.mem(io.tokens)?;
    l.mem(io.x)?
        .mem(io.q)?
        .mem(io.att)?
        .mem(io.h)?
        .mem(&parts)?;
    l.mem(io.logits)?.mem(io.ids)?.mem(&state)?;
    l.scalar(0u32)?.scalar(u(c.n_layer, "layers")?)?;
    let pos_arg = l.next_arg();
    l.scalar(0u32)?;
    let readout_arg = l.next_arg();
    l.scalar(1u32)?;
    l.scalar(u(c.d_model, "d_model")?)?
        .scalar(u(c.q_dim(), "q width")?)?
        .scalar(u(c.kv_dim(), "kv width")?)?
        .scalar(u(c.d_ff, "d_ff")?)?
        .scalar(u(c.n_head, "heads")?)?
        .scalar(u(c.n_kv_head, "kv heads")?)?
        .scalar(u(c.head_dim, "head_dim")?)?
        .scalar(u(sh.npairs, "rope pairs")?)?
        .scalar(u(c.vocab, "vocab")?)?
        .scalar(c.eps)?
        .scalar(1.0f32 / (c.head_dim as f32).sqrt())?
        .scalar(u32::from(barriers_only))?;
    l.mem(&acc)?;
    l.local_mem(stage * 4)?;
    debug_assert_eq!(woffs.len(), LO_N * c.n_layer);
    Ok(Persistent {
        op: Op::new(l, OpKind::Persistent),
        pos_arg,
        readout_arg,
        groups,
        head,
        stage,
        prog,
        _bufs: [lofs, kvofs, parts, state, acc],
    })
}

impl Persistent {
    /// Sets the position and the readout (`argmax`: also the argmax, else the logits alone)
    /// of the next step; without the head in the step ([`Persistent::head`]) it reads out
    /// nothing and the caller launches the head.
    pub(super) fn set_step(&mut self, pos: usize, argmax: bool) -> Result<()> {
        let pos = u32::try_from(pos)
            .map_err(|_| Error::BadShape(format!("position {pos} exceeds u32")))?;
        self.op.launch.set_scalar(self.pos_arg, pos)?;
        let readout = match (self.head, argmax) {
            (false, _) => 0u32,
            (true, false) => 1,
            (true, true) => 2,
        };
        self.op.launch.set_scalar(self.readout_arg, readout)
    }
}
