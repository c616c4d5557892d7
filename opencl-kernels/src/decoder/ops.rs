//! The decoder's prepared launches: a matmul (GEMV for one row, GEMM for several) with its
//! fused norm and epilogue, attention, the embedding gather and the argmax; which arguments
//! change per call, and how the grid follows the row count.

use super::mm::MmSet;
use super::prepare::MatKind;
use super::OpKind;
use crate::attention::{AttnLaunch, Grid};
use crate::device::{Buffer, Device, Program};
use crate::error::{Error, Result};
use crate::event::{lost_or, Event};
use crate::kernels::{Launch, MAX_WG};
use opencl_sys::cl_event;
use std::sync::Arc;

/// A matrix on the device: kind, physical rows `n`, columns `k`, one or two planes.
pub(crate) struct Mat {
    pub(crate) kind: MatKind,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) w0: Buffer,
    pub(crate) w1: Buffer,
}

/// Which physical rows a matmul's output columns read: column `c` reads row
/// `wrow0 + c * wstride`, for `n` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Cols {
    pub(crate) wrow0: usize,
    pub(crate) wstride: usize,
    pub(crate) n: usize,
}

impl Cols {
    pub(crate) fn all(n: usize) -> Cols {
        Cols {
            wrow0: 0,
            wstride: 1,
            n,
        }
    }
}

/// What a matmul does with its outputs (see decoder.cl's EPI_*).
pub(crate) enum Epi<'a> {
    /// `y[m][c] = v` (row stride `ld` floats).
    Store { y: &'a Buffer, ld: usize },
    /// `y[m][c] += v`.
    Add { y: &'a Buffer, ld: usize },
    /// `y[m][j] = silu(v[2j]) * v[2j+1]`.
    Swiglu { y: &'a Buffer, ld: usize },
    /// `y[m][c] = silu(y[m][c]) * v` (up, after a `Store` of the gate into `y`).
    Gated { y: &'a Buffer, ld: usize },
    /// RoPE, q to `q`, k and v to the caches; output column `c` is column `col0 + c` of
    /// `[q; k; v]`.
    Qkv {
        q: &'a Buffer,
        ld: usize,
        kc: &'a Buffer,
        vc: &'a Buffer,
        col0: usize,
    },
}

/// Values every epilogue launch carries: the RoPE table, a placeholder buffer for unused
/// arguments and the attention geometry.
pub(crate) struct Shared {
    pub(crate) rope: Buffer,
    pub(crate) dummy: Buffer,
    pub(crate) dq: usize,
    pub(crate) dkv: usize,
    pub(crate) hd: usize,
    pub(crate) npairs: usize,
    pub(crate) max_wg: usize,
    /// The fewest work-groups a one-row GEMV should have where its rows allow.
    pub(crate) min_groups: usize,
    /// The fast matmul programs (`kernels/mm.cl`) of the kinds that have them.
    pub(crate) mm: MmSet,
}

/// How a launch's second grid dimension follows the row count `m`: `ceil(m / per_group)`
/// groups of `local` work-items; `arg`, if any, is the kernel's row-count argument.
#[derive(Clone, Copy)]
struct RowGrid {
    arg: Option<u32>,
    per_group: usize,
    local: usize,
}

/// One prepared launch and the arguments that change per call.
pub(crate) struct Op {
    pub(crate) launch: Launch,
    pub(crate) kind: OpKind,
    pos0: Option<u32>,
    rows: Option<RowGrid>,
    xoff: Option<(u32, usize)>,
    tokoff: Option<u32>,
    /// An attention launch (attention.rs): its grid and the position and rows last set.
    attn: Option<(Grid, usize, usize)>,
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::BadShape(format!("{what} = {v} exceeds u32")))
}

fn pow2_floor(v: usize) -> usize {
    if v <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - v.leading_zeros())
    }
}

impl Op {
    pub(crate) fn new(launch: Launch, kind: OpKind) -> Op {
        Op {
            launch,
            kind,
            pos0: None,
            rows: None,
            xoff: None,
            tokoff: None,
            attn: None,
        }
    }

    /// An attention launch of [`crate::attention`] as a decoder op (position and rows set by
    /// [`Op::set_pos0`] and [`Op::set_rows`]).
    pub(crate) fn attention(a: AttnLaunch, kind: OpKind) -> Op {
        let mut op = Op::new(a.launch, kind);
        op.attn = Some((a.grid, 0, 1));
        op
    }

    /// Sets the first position of the call's rows (RoPE, cache rows, causal bound; for the
    /// split decode attention also how many ranges the positions `0..=pos0` are split into).
    pub(crate) fn set_pos0(&mut self, pos0: usize) -> Result<()> {
        if let Some(i) = self.pos0 {
            self.launch.set_scalar(i, u32_of(pos0, "position")?)?;
        }
        if let Some((g, p, m)) = &mut self.attn {
            *p = pos0;
            g.apply(&mut self.launch, pos0, *m)?;
        }
        Ok(())
    }

    /// Sets the number of rows `m` (GEMM, attention, gather, argmax: argument and grid).
    pub(crate) fn set_rows(&mut self, m: usize) -> Result<()> {
        if let Some((g, p, rows)) = &mut self.attn {
            *rows = m;
            g.apply(&mut self.launch, *p, m)?;
        }
        if let Some(g) = self.rows {
            if let Some(a) = g.arg {
                self.launch.set_scalar(a, u32_of(m, "rows")?)?;
            }
            let mut global = self.launch.global();
            global[1] = m.div_ceil(g.per_group) * g.local;
            self.launch.set_global(global);
        }
        Ok(())
    }

    /// Sets which row of the activation a GEMV reads.
    pub(crate) fn set_x_row(&mut self, row: usize) -> Result<()> {
        if let Some((i, ld)) = self.xoff {
            self.launch
                .set_scalar(i, u32_of(row * ld / 4, "x offset")?)?;
        }
        Ok(())
    }

    /// Sets where the gather's token ids start.
    pub(crate) fn set_tokoff(&mut self, off: usize) -> Result<()> {
        if let Some(i) = self.tokoff {
            self.launch.set_scalar(i, u32_of(off, "token offset")?)?;
        }
        Ok(())
    }
}

/// Launch counting and (optionally) per-op device time: every enqueue goes through here.
pub(crate) struct Recorder {
    pub(crate) launches: u64,
    pub(crate) events: Option<Vec<(OpKind, Event)>>,
    /// Submit (`clFlush`) after every this many launches (0: only at the end of a step).
    pub(crate) flush_every: u64,
}

impl Recorder {
    pub(crate) fn enqueue(&mut self, dev: &Arc<Device>, op: &Op) -> Result<()> {
        self.launches += 1;
        if self.flush_every > 0 && self.launches.is_multiple_of(self.flush_every) {
            dev.flush().map_err(lost_or)?;
        }
        match &mut self.events {
            None => op.launch.nd_event(std::ptr::null_mut()).map_err(lost_or),
            Some(evs) => {
                let mut ev: cl_event = std::ptr::null_mut();
                op.launch.nd_event(&mut ev).map_err(lost_or)?;
                evs.push((op.kind, Event::own(dev, ev)));
                Ok(())
            }
        }
    }
}

/// GEMV work-group shape `(tpr, rows)` for `n` outputs of rows of `k`: `tpr` work-items per
/// column pair (the T layout's H200 default `nb / 2` clamped to 8..=64; a quarter of the
/// 8-element parts for the other kinds), `rows` pairs per group: `tpr * rows` is the largest power of
/// two <= 256 the device allows, halved while that leaves fewer than `min_groups` groups (a
/// decoder's small matrices, 576 x 576 say, would otherwise run on a few multiprocessors).
fn gemv_shape(
    kind: MatKind,
    k: usize,
    n: usize,
    max_wg: usize,
    min_groups: usize,
) -> (usize, usize) {
    let units = kind.row_units(k);
    let div = match kind {
        MatKind::Q40T | MatKind::Q41T => 2,
        _ => 4,
    };
    let wg = pow2_floor(max_wg.min(MAX_WG));
    let tpr = pow2_floor(units / div).clamp(8, 64).min(wg);
    let pairs = n.div_ceil(2);
    let mut rows = (wg / tpr).max(1);
    while rows > 1 && pairs.div_ceil(rows) < min_groups {
        rows /= 2;
    }
    (tpr, rows)
}

/// Sets the epilogue's twelve trailing arguments; returns the index of `pos0`.
fn epi_args(l: &mut Launch, epi: &Epi<'_>, sh: &Shared) -> Result<u32> {
    let (mode, y, ld, kc, vc, coff) = match *epi {
        Epi::Store { y, ld } => (0u32, y, ld, &sh.dummy, &sh.dummy, 0),
        Epi::Add { y, ld } => (1, y, ld, &sh.dummy, &sh.dummy, 0),
        Epi::Swiglu { y, ld } => (2, y, ld, &sh.dummy, &sh.dummy, 0),
        Epi::Qkv {
            q,
            ld,
            kc,
            vc,
            col0,
        } => (3, q, ld, kc, vc, col0),
        Epi::Gated { y, ld } => (4, y, ld, &sh.dummy, &sh.dummy, 0),
    };
    l.scalar(mode)?;
    l.mem(y)?;
    l.scalar(u32_of(ld, "ldy")?)?;
    l.mem(kc)?.mem(vc)?.mem(&sh.rope)?;
    let pos = l.next_arg();
    l.scalar(0u32)?;
    l.scalar(u32_of(sh.dq, "dq")?)?
        .scalar(u32_of(sh.dkv, "dkv")?)?
        .scalar(u32_of(sh.hd, "head_dim")?)?
        .scalar(u32_of(sh.npairs, "rope pairs")?)?
        .scalar(u32_of(coff, "column offset")?)?;
    Ok(pos)
}

/// A matmul over `cols` of `mat` from activation rows `x` (row stride `ldx` floats), with the
/// RMSNorm `norm = (g, eps)` fused into the load: a GEMV (one row; `set_x_row` picks it) or,
/// with `gemm`, a GEMM over up to `max_m` rows (`set_rows`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    dev: &Arc<Device>,
    legacy: &LazyProgram,
    kind: OpKind,
    mat: &Mat,
    cols: Cols,
    x: &Buffer,
    ldx: usize,
    norm: Option<(&Buffer, f32)>,
    epi: Epi<'_>,
    gemm: bool,
    max_m: usize,
    sh: &Shared,
) -> Result<Op> {
    let (n, k) = (cols.n, mat.k);
    if n == 0 || cols.wrow0 + (n - 1) * cols.wstride >= mat.n || !ldx.is_multiple_of(4) {
        return Err(Error::BadShape(format!(
            "columns {cols:?} of a {} x {k} matrix (ldx {ldx})",
            mat.n
        )));
    }
    let (g, eps) = norm.unwrap_or((&sh.dummy, 0.0));
    if let Some(op) = mm_matmul(dev, kind, mat, cols, (x, ldx), norm, &epi, gemm, max_m, sh)? {
        return Ok(op);
    }
    // decoder.cl's matmuls, built the first time one is needed.
    let prog = legacy.get()?;
    let mut op = if gemm {
        let tiles_n = n.div_ceil(64);
        let l = Launch::create(
            dev,
            prog,
            &mat.kind.gemm(norm.is_some()),
            2,
            [16 * tiles_n, 16 * max_m.div_ceil(64)],
            [16, 16],
        )?;
        let mut op = Op::new(l, kind);
        let l = &mut op.launch;
        l.mem(&mat.w0)?.mem(&mat.w1)?.mem(x)?;
        l.scalar(u32_of(ldx, "ldx")?)?;
        l.mem(g)?.scalar(eps)?;
        op.rows = Some(RowGrid {
            arg: Some(l.next_arg()),
            per_group: 64,
            local: 16,
        });
        l.scalar(u32_of(max_m, "M")?)?;
        op
    } else {
        let (tpr, rows) = gemv_shape(mat.kind, k, n, sh.max_wg, sh.min_groups);
        let pairs = n.div_ceil(2);
        let l = Launch::create(
            dev,
            prog,
            &mat.kind.gemv(norm.is_some()),
            2,
            [tpr, pairs.div_ceil(rows) * rows],
            [tpr, rows],
        )?;
        let mut op = Op::new(l, kind);
        let l = &mut op.launch;
        l.mem(&mat.w0)?.mem(&mat.w1)?.mem(x)?;
        op.xoff = Some((l.next_arg(), ldx));
        l.scalar(0u32)?;
        l.mem(g)?.scalar(eps)?;
        op
    };
    let l = &mut op.launch;
    l.scalar(u32_of(n, "N")?)?.scalar(u32_of(k, "K")?)?;
    l.scalar(u32_of(cols.wrow0, "first row")?)?
        .scalar(u32_of(cols.wstride, "row stride")?)?;
    op.pos0 = Some(epi_args(l, &epi, sh)?);
    Ok(op)
}

/// The matmul of [`matmul`] on the fast kernels of `kernels/mm.cl`, where the matrix's kind
/// has them and the shape fits the device (else `None`: the older kernels run it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mm_matmul(
    dev: &Arc<Device>,
    kind: OpKind,
    mat: &Mat,
    cols: Cols,
    (x, ldx): (&Buffer, usize),
    norm: Option<(&Buffer, f32)>,
    epi: &Epi<'_>,
    gemm: bool,
    max_m: usize,
    sh: &Shared,
) -> Result<Option<Op>> {
    let Some(prog) = sh.mm.program(mat.kind) else {
        return Ok(None);
    };
    let (n, k) = (cols.n, mat.k);
    let (g, eps) = norm.unwrap_or((&sh.dummy, 0.0));
    let use_norm = u32::from(norm.is_some());
    let mut op = if gemm {
        let Some(mt) = sh.mm.gemm_rows(n, max_m) else {
            return Ok(None);
        };
        let l = Launch::create(
            dev,
            prog,
            &format!("mm_gemm_m{mt}"),
            2,
            [16 * n.div_ceil(128), 16 * max_m.div_ceil(mt)],
            [16, 16],
        )?;
        let mut op = Op::new(l, kind);
        let l = &mut op.launch;
        l.mem(&mat.w0)?.mem(&mat.w1)?.mem(x)?;
        l.scalar(u32_of(ldx, "ldx")?)?;
        l.mem(g)?.scalar(eps)?;
        op.rows = Some(RowGrid {
            arg: Some(l.next_arg()),
            per_group: mt,
            local: 16,
        });
        l.scalar(u32_of(max_m, "M")?)?;
        l.scalar(u32_of(n, "N")?)?.scalar(u32_of(k, "K")?)?;
        l.scalar(u32_of(cols.wrow0, "first row")?)?
            .scalar(u32_of(cols.wstride, "row stride")?)?;
        l.scalar(use_norm)?;
        op
    } else {
        let Some(s) = sh.mm.gemv_shape(k, n, sh.min_groups) else {
            return Ok(None);
        };
        let i8 = sh.mm.i8 && mat.kind != MatKind::F16;
        let name = if i8 { "mm_gemv_i8" } else { "mm_gemv" };
        let l = Launch::create(
            dev,
            prog,
            name,
            1,
            [n.div_ceil(s.rows()) * s.local, 1],
            [s.local, 1],
        )?;
        let mut op = Op::new(l, kind);
        let l = &mut op.launch;
        l.mem(&mat.w0)?.mem(&mat.w1)?.mem(x)?;
        op.xoff = Some((l.next_arg(), ldx));
        l.scalar(0u32)?;
        l.mem(g)?.scalar(eps)?;
        l.scalar(u32_of(n, "N")?)?.scalar(u32_of(k, "K")?)?;
        l.scalar(u32_of(cols.wrow0, "first row")?)?
            .scalar(u32_of(cols.wstride, "row stride")?)?;
        l.scalar(u32_of(s.team, "team")?)?
            .scalar(u32_of(s.steps, "steps")?)?
            .scalar(use_norm)?;
        op.pos0 = Some(epi_args(l, epi, sh)?);
        op.launch.local_mem(s.red_bytes())?;
        return Ok(Some(op));
    };
    op.pos0 = Some(epi_args(&mut op.launch, epi, sh)?);
    Ok(Some(op))
}

/// The embedding gather from `w0`/`w1` (format `code`: decoder.cl's `embed`) into `x`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn embed(
    dev: &Arc<Device>,
    prog: &Program,
    (w0, w1, code): (&Buffer, &Buffer, u32),
    d: usize,
    tokens: &Buffer,
    x: &Buffer,
    max_m: usize,
) -> Result<Op> {
    let l = Launch::create(dev, prog, "embed", 2, [d.div_ceil(64) * 64, max_m], [64, 1])?;
    let mut op = Op::new(l, OpKind::Embed);
    let l = &mut op.launch;
    l.mem(w0)?.mem(w1)?.mem(tokens)?;
    op.tokoff = Some(l.next_arg());
    l.scalar(0u32)?;
    l.mem(x)?;
    op.rows = Some(RowGrid {
        arg: Some(l.next_arg()),
        per_group: 1,
        local: 1,
    });
    l.scalar(u32_of(max_m, "M")?)?;
    l.scalar(u32_of(d, "d_model")?)?.scalar(code)?;
    Ok(op)
}

/// Argmax of each of up to `max_rows` rows of `n` values (stride `ld`) of `v` into `out`.
pub(crate) fn argmax(
    dev: &Arc<Device>,
    prog: &Program,
    v: &Buffer,
    n: usize,
    ld: usize,
    out: &Buffer,
    max_rows: usize,
) -> Result<Op> {
    // Rows longer than ARGMAX_SPLIT values are split over up to 64 work-groups a row
    // (argmax_split), whose last one combines the parts.
    let groups = n.div_ceil(ARGMAX_SPLIT).clamp(1, 64);
    let name = if groups > 1 {
        "argmax_split"
    } else {
        "argmax_rows"
    };
    let l = Launch::create(dev, prog, name, 2, [256 * groups, max_rows], [256, 1])?;
    let mut op = Op::new(l, OpKind::Argmax);
    let l = &mut op.launch;
    l.mem(v)?;
    l.scalar(u32_of(n, "N")?)?.scalar(u32_of(ld, "ld")?)?;
    l.mem(out)?;
    if groups > 1 {
        l.mem(&dev.alloc(max_rows * groups * 12)?)?;
        l.mem(&dev.upload(&vec![0u32; max_rows])?)?;
    }
    op.rows = Some(RowGrid {
        arg: None,
        per_group: 1,
        local: 1,
    });
    Ok(op)
}

/// Values a row at which the device argmax splits a row over work-groups.
const ARGMAX_SPLIT: usize = 4096;

/// What the decode blocks of every layer share: the second residual buffer, the partial rows
/// of the O projection (`H x d`) and of the down projection (`G x d`), the FFN chunk width.
pub(crate) struct BlockBufs {
    pub(crate) x2: Buffer,
    pub(crate) po: Buffer,
    pub(crate) pd: Buffer,
    pub(crate) chunk: usize,
    pub(crate) chunks: usize,
}

/// Local memory (bytes) of block A and block B for these sizes.
pub(crate) fn block_local_bytes(d: usize, hd: usize, chunk: usize) -> (usize, usize) {
    let a = d + 3 * hd + (3 * hd * 8).max(512);
    let b = d + 2 * chunk + (2 * chunk * 8).max(256);
    (a * 4, b * 4)
}

/// Block A of one layer (see decoder.cl): reads `xin` plus `parts` (`nparts` rows), writes
/// `xout`, the caches and the O partial rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_a(
    dev: &Arc<Device>,
    prog: &Program,
    (qkv, o): (&Mat, &Mat),
    (xin, parts, nparts, xout): (&Buffer, &Buffer, usize, &Buffer),
    (g, eps): (&Buffer, f32),
    (kc, vc): (&Buffer, &Buffer),
    bb: &BlockBufs,
    (d, heads, kv_heads): (usize, usize, usize),
    sh: &Shared,
) -> Result<Op> {
    let name = format!("attn_block_{}", qkv.kind.suffix());
    let l = Launch::create(dev, prog, &name, 1, [256 * heads, 1], [256, 1])?;
    let mut op = Op::new(l, OpKind::BlockAttn);
    let l = &mut op.launch;
    l.mem(&qkv.w0)?.mem(&qkv.w1)?.mem(&o.w0)?.mem(&o.w1)?;
    l.mem(xin)?
        .mem(parts)?
        .scalar(u32_of(nparts, "parts")?)?
        .mem(xout)?;
    l.mem(g)?.scalar(eps)?;
    l.mem(kc)?.mem(vc)?.mem(&sh.rope)?.mem(&bb.po)?;
    l.scalar(u32_of(d, "d_model")?)?
        .scalar(u32_of(heads, "heads")?)?
        .scalar(u32_of(kv_heads, "kv heads")?)?
        .scalar(u32_of(sh.hd, "head_dim")?)?
        .scalar(u32_of(sh.npairs, "rope pairs")?)?;
    op.pos0 = Some(l.next_arg());
    l.scalar(0u32)?;
    l.scalar(1.0f32 / (sh.hd as f32).sqrt())?;
    let hd = sh.hd;
    l.local_mem(d * 4)?
        .local_mem(3 * hd * 4)?
        .local_mem((3 * hd * 8).max(512) * 4)?;
    Ok(op)
}

/// Block B of one layer: reads `xin` plus block A's partial rows, writes `xout` and the down
/// partial rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_b(
    dev: &Arc<Device>,
    prog: &Program,
    (gate_up, down): (&Mat, &Mat),
    (xin, heads, xout): (&Buffer, usize, &Buffer),
    (g, eps): (&Buffer, f32),
    bb: &BlockBufs,
    (d, ff): (usize, usize),
) -> Result<Op> {
    let name = format!("ffn_block_{}", gate_up.kind.suffix());
    let l = Launch::create(dev, prog, &name, 1, [256 * bb.chunks, 1], [256, 1])?;
    let mut op = Op::new(l, OpKind::BlockFfn);
    let l = &mut op.launch;
    l.mem(&gate_up.w0)?
        .mem(&gate_up.w1)?
        .mem(&down.w0)?
        .mem(&down.w1)?;
    l.mem(xin)?
        .mem(&bb.po)?
        .scalar(u32_of(heads, "heads")?)?
        .mem(xout)?;
    l.mem(g)?.scalar(eps)?.mem(&bb.pd)?;
    l.scalar(u32_of(d, "d_model")?)?
        .scalar(u32_of(ff, "d_ff")?)?
        .scalar(u32_of(bb.chunk, "chunk")?)?;
    let c = bb.chunk;
    l.local_mem(d * 4)?
        .local_mem(2 * c * 4)?
        .local_mem((2 * c * 8).max(256) * 4)?;
    Ok(op)
}

/// `x += ` the last block B's partial rows, before the head.
pub(crate) fn block_finish(
    dev: &Arc<Device>,
    prog: &Program,
    x: &Buffer,
    bb: &BlockBufs,
    d: usize,
) -> Result<Op> {
    let l = Launch::create(dev, prog, "blk_finish", 1, [256, 1], [256, 1])?;
    let mut op = Op::new(l, OpKind::BlockFinish);
    let l = &mut op.launch;
    l.mem(x)?.mem(&bb.pd)?;
    l.scalar(u32_of(bb.chunks, "chunks")?)?
        .scalar(u32_of(d, "d_model")?)?;
    Ok(op)
}

/// A part of decoder.cl built on first use: its matmuls (`-DDEC_MATMULS`), which run only
/// where the fast matmuls of mm.cl do not take a format or shape, so most models never build
/// them (NVIDIA's compiler spent 8.6 s on the whole file).
pub(crate) struct LazyProgram {
    dev: Arc<Device>,
    options: String,
    cell: std::sync::OnceLock<Program>,
}

impl LazyProgram {
    pub(crate) fn new(dev: &Arc<Device>, options: String) -> LazyProgram {
        LazyProgram {
            dev: Arc::clone(dev),
            options,
            cell: std::sync::OnceLock::new(),
        }
    }

    /// The program, built now if it was not yet (a failed build is returned and retried on
    /// the next call).
    pub(crate) fn get(&self) -> Result<&Program> {
        if let Some(p) = self.cell.get() {
            return Ok(p);
        }
        let p = self.dev.build(super::DECODER_SOURCE, &self.options)?;
        // A racing first use built the same program: either one serves.
        let _ = self.cell.set(p);
        self.cell
            .get()
            .ok_or(Error::NotApplicable("decoder matmul program"))
    }

    /// Whether it was built.
    pub(crate) fn is_built(&self) -> bool {
        self.cell.get().is_some()
    }
}
