//! The CPU backend's prepare path: which packed forms each weight gets under a kernel (sized
//! before a byte is written), packing them all on the pool at memory speed into one arena —
//! the prepared-weights cache file when it can be written, else memory ([`crate::prepared`]) —
//! and the forms' views of those bytes.
//!
//! Work is split into tasks of whole 16-row groups of ~256 KiB of source each, in weight
//! order, so each pool thread starts on its own contiguous share of the model file and the
//! output head (the largest weight) spreads over every thread. When the last task of a weight
//! is done, its source pages are given back ([`GgufFile::release`]): the packed copy replaces
//! the mapped pages it came from, so a cold start's peak memory is about one copy of the model.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use hetero_sme::{GgmlType, Int8Layout, SharedBytes, ThreadPool as Pool};

use super::{BackendError, WeightView};
use crate::gguf::GgufFile;
use crate::prepared::{self, ArenaMut, CacheSetting, Piece, DESC_WORDS, SECTIONS};

/// Source bytes per packing task.
const TASK_BYTES: usize = 256 << 10;

/// Bytes of a prepared form: a range of shared bytes (the mapped cache file or memory),
/// [`prepared::ALIGN`]-aligned.
#[derive(Clone)]
pub(crate) struct Section {
    bytes: SharedBytes,
    range: Range<usize>,
}

impl Section {
    pub(crate) fn bytes(&self) -> &[u8] {
        &(*self.bytes).as_ref()[self.range.clone()]
    }

    /// The bytes as u16s (the packed F16/BF16 panels).
    pub(crate) fn u16s(&self) -> &[u16] {
        let b = self.bytes();
        // SAFETY: as `f32s`, for 2-byte words: ALIGN-aligned sections hold whole words; any
        // bits are a valid u16; never written while shared.
        let (pre, w, _) = unsafe { b.align_to::<u16>() };
        if pre.is_empty() {
            w
        } else {
            &[]
        }
    }

    /// The bytes as f32s (the f32 form).
    pub(crate) fn f32s(&self) -> &[f32] {
        let b = self.bytes();
        // SAFETY: sections start ALIGN-aligned (a multiple of 4) in page-aligned storage and
        // the f32 form's length is a whole number of floats; any bit pattern is a valid f32;
        // the shared bytes are never written while shared.
        let (pre, f, _) = unsafe { b.align_to::<f32>() };
        if pre.is_empty() {
            f
        } else {
            &[]
        }
    }
}

/// The forms one weight gets, sized before anything is written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Planned {
    pub(crate) ty: GgmlType,
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// The int8 GEMM's form (sections 0 and 1: quants, scale words).
    pub(crate) int8: Option<Int8Layout>,
    /// The packed GEMV's form, bytes (section 2).
    pub(crate) gemv: Option<usize>,
    /// The packed FP16/BF16 panels of an F16/BF16 weight (section 2: `packed_len(k, n)`
    /// words), for the tile GEMM at any K.
    pub(crate) packed: Option<hetero_sme::PackedFormat>,
    /// The f32 form (section 2: `n * k` floats), for weights without a hetero-sme form.
    pub(crate) f32: bool,
}

/// The packed panel format that holds a GGUF type exactly: F16 and BF16 (others: `None`).
fn packed_format(ty: GgmlType) -> Option<hetero_sme::PackedFormat> {
    match ty {
        GgmlType::F16 => Some(hetero_sme::PackedFormat::F16),
        GgmlType::BF16 => Some(hetero_sme::PackedFormat::Bf16),
        _ => None,
    }
}

/// Columns of one packed panel: a packing task of the packed form covers whole panels.
const PANEL: usize = 64;

impl Planned {
    /// The forms of `w` under a kernel that uses the GEMV (`gemv`) and/or the int8 GEMM
    /// (`int8`).
    pub(crate) fn of(w: &WeightView<'_>, gemv: bool, int8: bool) -> Result<Self, BackendError> {
        w.row_bytes()?;
        let (ty, n, k) = (w.ty, w.n, w.k);
        let quant = hetero_sme::qpacked_len(ty, k, n).is_ok();
        let mut p = Planned {
            ty,
            n,
            k,
            int8: None,
            gemv: None,
            packed: None,
            f32: false,
        };
        if quant && (gemv || int8) {
            if gemv {
                p.gemv = Some(hetero_sme::qpacked_len(ty, k, n)?);
            }
            if int8 {
                p.int8 = Some(hetero_sme::Int8Weight::layout(ty, n, k)?);
            }
        } else if let (Some(format), true) = (packed_format(ty), gemv || int8) {
            hetero_sme::packed_len_checked(k, n)
                .and_then(|w| w.checked_mul(2))
                .ok_or(BackendError::Shape("weight too large"))?;
            p.packed = Some(format);
        } else {
            n.checked_mul(k)
                .and_then(|e| e.checked_mul(4))
                .ok_or(BackendError::Shape("weight too large"))?;
            p.f32 = true;
        }
        Ok(p)
    }

    /// Byte lengths of the three sections.
    fn sections(&self) -> [usize; SECTIONS] {
        let (q, s) = self
            .int8
            .map_or((0, 0), |l| (l.quant_bytes(), 2 * l.scale_words()));
        let third = match (self.gemv, self.packed, self.f32) {
            (Some(g), _, _) => g,
            // Checked in `of`.
            (None, Some(_), _) => 2 * hetero_sme::packed_len_checked(self.k, self.n).unwrap_or(0),
            (None, None, true) => self.n * self.k * 4,
            _ => 0,
        };
        [q, s, third]
    }

    /// The piece for the cache: the source's place in the model file (`u64::MAX` when it is
    /// not in one), shape, type and which forms.
    fn piece(&self, src: Option<Range<usize>>) -> Piece {
        let (at, len) = src.map_or((u64::MAX, 0), |r| (r.start as u64, r.len() as u64));
        let packed = match self.packed {
            None => 0,
            Some(hetero_sme::PackedFormat::F16) => 1,
            Some(hetero_sme::PackedFormat::Bf16) => 2,
        };
        let forms = self.int8.is_some() as u64
            | (self.gemv.is_some() as u64) << 1
            | (self.f32 as u64) << 2
            | packed << 3;
        let desc: [u64; DESC_WORDS] = [
            at,
            len,
            self.n as u64,
            self.k as u64,
            self.ty.code() as u64,
            forms,
        ];
        Piece {
            desc,
            sections: self.sections(),
        }
    }

    /// Rows per task: whole 16-row groups (64-column panels for the packed form) of about
    /// [`TASK_BYTES`] of source.
    fn rows_per_task(&self, row_bytes: usize) -> usize {
        let g = if self.packed.is_some() {
            PANEL
        } else {
            hetero_sme::INT8_GROUP
        };
        (TASK_BYTES / row_bytes.max(1)).div_ceil(g).max(1) * g
    }
}

/// The packed forms of one weight, viewing the prepared bytes.
pub(crate) struct Views {
    pub(crate) int8: Option<hetero_sme::Int8Weight>,
    pub(crate) gemv: Option<Section>,
    pub(crate) packed: Option<(Section, hetero_sme::PackedFormat)>,
    pub(crate) f32: Option<Section>,
}

/// Where the weights come from and where their prepared forms may be kept.
#[derive(Clone, Copy, Default)]
pub struct PrepareSource<'a> {
    /// The model file the weights' bytes lie in: its identity keys the cache, and each
    /// weight's source pages are given back once it is packed. `None`: weights from elsewhere
    /// (prepared in memory).
    pub file: Option<&'a GgufFile>,
    /// The cache setting ([`CacheSetting::Off`]: in memory).
    pub cache: Option<&'a CacheSetting>,
}

/// What preparing a set of weights did, for the start-up report.
#[derive(Clone, Debug, Default)]
pub struct PrepareReport {
    /// Mapped from / written to the cache, or in memory (`None` when nothing was prepared).
    pub outcome: Option<prepared::Outcome>,
    /// Notes for the user (stale cache rebuilt, unwritable directory, ...).
    pub notes: Vec<String>,
    /// Time packing (0 when mapped).
    pub packing: std::time::Duration,
    /// Time computing or verifying checksums.
    pub checking: std::time::Duration,
    /// The whole call.
    pub total: std::time::Duration,
    /// Bytes of the prepared forms.
    pub bytes: usize,
}

/// Prepares `views` (planned as `plans`) on `pool`: mapped from the cache when possible, else
/// packed now into the cache file or memory; returns every weight's form views.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare_all(
    pool: &Pool,
    variant: &str,
    views: &[WeightView<'_>],
    plans: &[Planned],
    source: PrepareSource<'_>,
) -> Result<(Vec<Views>, PrepareReport), BackendError> {
    let t0 = std::time::Instant::now();
    let file = source.file;
    let ranges: Vec<Option<Range<usize>>> = views
        .iter()
        .map(|v| file.and_then(|f| f.range_of(v.data)))
        .collect();
    let pieces: Vec<Piece> = plans
        .iter()
        .zip(&ranges)
        .map(|(p, r)| p.piece(r.clone()))
        .collect();
    let header_hash = file.map(GgufFile::header_hash);
    let key = match (file.and_then(GgufFile::identity), header_hash) {
        // Only when every weight lies in the file (else the pieces would not identify them).
        (Some(model), Some(header_hash)) if ranges.iter().all(Option::is_some) => {
            Some(prepared::Key {
                model,
                header_hash,
                variant,
                versions: [
                    prepared::FORMAT_VERSION,
                    hetero_sme::INT8_LAYOUT_VERSION as u64,
                    hetero_sme::QPACK_LAYOUT_VERSION as u64,
                ],
            })
        }
        _ => None,
    };
    let off = CacheSetting::Off;
    let setting = source.cache.unwrap_or(&off);
    let release = |w: usize| {
        if let (Some(f), Some(r)) = (file, &ranges[w]) {
            f.release(r.clone());
        }
    };
    let pack = |arena: &ArenaMut<'_>, offsets: &[[usize; SECTIONS]]| {
        pack_all(pool, views, plans, arena, offsets, &release)
    };
    let p = prepared::load_or_prepare(setting, key.as_ref(), &pieces, pool, &pack)?;
    let mut out = Vec::with_capacity(plans.len());
    for (plan, off) in plans.iter().zip(&p.offsets) {
        let sec = |i: usize, len: usize| Section {
            bytes: p.bytes.clone(),
            range: off[i]..off[i] + len,
        };
        let [_, _, third] = plan.sections();
        out.push(Views {
            int8: plan
                .int8
                .map(|_| {
                    hetero_sme::Int8Weight::from_shared(
                        plan.ty,
                        plan.n,
                        plan.k,
                        p.bytes.clone(),
                        off[0],
                        off[1],
                    )
                })
                .transpose()?,
            gemv: plan.gemv.map(|len| sec(2, len)),
            packed: plan.packed.map(|f| (sec(2, third), f)),
            f32: plan.f32.then(|| sec(2, third)),
        });
    }
    let report = PrepareReport {
        outcome: Some(p.outcome),
        notes: p.notes,
        packing: p.packing,
        checking: p.checking,
        total: t0.elapsed(),
        bytes: p.data_len,
    };
    Ok((out, report))
}

/// Packs every planned form of every weight into `arena` on the pool; `release(w)` once the
/// last task of weight `w` is done.
fn pack_all(
    pool: &Pool,
    views: &[WeightView<'_>],
    plans: &[Planned],
    arena: &ArenaMut<'_>,
    offsets: &[[usize; SECTIONS]],
    release: &(dyn Fn(usize) + Sync),
) -> Result<(), BackendError> {
    // (weight, rows) of every task, weights in order.
    let mut tasks: Vec<(usize, Range<usize>)> = Vec::new();
    for (w, (v, p)) in views.iter().zip(plans).enumerate() {
        let step = p.rows_per_task(v.row_bytes()?);
        let mut r = 0;
        while r < p.n {
            let e = (r + step).min(p.n);
            tasks.push((w, r..e));
            r = e;
        }
    }
    let left: Vec<AtomicUsize> = plans.iter().map(|_| AtomicUsize::new(0)).collect();
    for (w, _) in &tasks {
        left[*w].fetch_add(1, Ordering::Relaxed);
    }
    let failed: Mutex<Option<BackendError>> = Mutex::new(None);
    pool.run(tasks.len(), &|t, _| {
        let (w, rows) = &tasks[t];
        let r = pack_rows(&views[*w], &plans[*w], &offsets[*w], rows.clone(), arena);
        if let Err(e) = r {
            failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
        }
        // The last of the weight's tasks (AcqRel: every other task's writes and reads of the
        // source happen before the release below).
        if left[*w].fetch_sub(1, Ordering::AcqRel) == 1 {
            release(*w);
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Packs rows `rows` (whole 16-row groups, or up to `n`) of weight `v` into its sections.
fn pack_rows(
    v: &WeightView<'_>,
    p: &Planned,
    off: &[usize; SECTIONS],
    rows: Range<usize>,
    arena: &ArenaMut<'_>,
) -> Result<(), BackendError> {
    let g = hetero_sme::INT8_GROUP;
    let (g0, g1) = (rows.start / g, rows.end.div_ceil(g));
    let short = || BackendError::Shape("prepared arena");
    if let Some(l) = p.int8 {
        // SAFETY: the ranges of groups g0..g1 of this weight's quants and scales sections are
        // this task's alone (tasks cover disjoint groups; sections of different weights do not
        // overlap: `prepared::layout`).
        let q = unsafe {
            arena.range(
                off[0] + g0 * l.group_quant_bytes,
                (g1 - g0) * l.group_quant_bytes,
            )
        }
        .ok_or_else(short)?;
        // SAFETY: as above, for the scale words.
        let s = unsafe {
            arena.range(
                off[1] + 2 * g0 * l.group_scale_words,
                2 * (g1 - g0) * l.group_scale_words,
            )
        }
        .ok_or_else(short)?;
        // SAFETY: `s` starts at an ALIGN-aligned section offset plus an even byte count in
        // page-aligned storage, so it is 2-aligned, and holds a whole number of words; u16
        // accepts any bits; it is this task's exclusive range.
        let (pre, s, _) = unsafe { s.align_to_mut::<u16>() };
        if !pre.is_empty() {
            return Err(short());
        }
        hetero_sme::Int8Weight::pack_gguf_groups(p.ty, v.data, p.n, p.k, g0..g1, q, s)?;
    }
    if let Some(_len) = p.gemv {
        let gb = hetero_sme::qpacked_len(p.ty, p.k, hetero_sme::QPACK_ROWS)?;
        let len = hetero_sme::qpacked_len(p.ty, p.k, rows.len())?;
        // SAFETY: groups g0..g1 of this weight's GEMV section are this task's alone.
        let dst = unsafe { arena.range(off[2] + g0 * gb, len) }.ok_or_else(short)?;
        hetero_sme::qpack_gguf(p.ty, v.data, p.k, p.n, rows.clone(), dst)?;
    }
    if let Some(format) = p.packed {
        // Rows `rows` are whole 64-column panels (the last may be short), and a standalone
        // weight of those columns is exactly those panels of the whole weight's packed form.
        let at = hetero_sme::packed_len_checked(p.k, rows.start).ok_or_else(short)?;
        let len = hetero_sme::packed_len_checked(p.k, rows.len()).ok_or_else(short)?;
        // SAFETY: panels rows.start/64.. of this weight's packed section are this task's alone.
        let dst = unsafe { arena.range(off[2] + 2 * at, 2 * len) }.ok_or_else(short)?;
        // SAFETY: ALIGN-aligned section plus whole panels of words: 2-aligned; any bits are a
        // valid u16; exclusive.
        let (pre, d, _) = unsafe { dst.align_to_mut::<u16>() };
        if !pre.is_empty() {
            return Err(short());
        }
        hetero_sme::pack_gguf(p.ty, v.data, p.k, p.n, rows.clone(), format, d)?;
    }
    if p.f32 {
        let rb = v.row_bytes()?;
        // SAFETY: rows `rows` of this weight's f32 section are this task's alone.
        let dst = unsafe { arena.range(off[2] + rows.start * p.k * 4, rows.len() * p.k * 4) }
            .ok_or_else(short)?;
        // SAFETY: ALIGN-aligned section plus whole rows of floats: 4-aligned; any bits are a
        // valid f32; exclusive.
        let (pre, f, _) = unsafe { dst.align_to_mut::<f32>() };
        if !pre.is_empty() {
            return Err(short());
        }
        for (i, row) in f.chunks_exact_mut(p.k.max(1)).enumerate() {
            let r = rows.start + i;
            hetero_sme::dequantize_row(p.ty, &v.data[r * rb..(r + 1) * rb], row)?;
        }
    }
    Ok(())
}
