//! Memory budget: how many bytes the model's host data, the KV cache and the work buffers
//! need, computed with checked arithmetic, and the check against a limit that happens before
//! anything is allocated.
//!
//! A hostile or mistaken size (a model claiming a million positions, `--ctx 1000000`, a block
//! count of 2³²−1) must end in [`BudgetError`] ("needs N GiB, limit M GiB"), never in the
//! allocator's abort. The limit is the machine's available memory ([`MemoryBudget::available`],
//! `MemAvailable` in `/proc/meminfo`) unless the caller sets one ([`MemoryBudget::with_limit`]).
//!
//! The byte counts here mirror the allocations of the engine's `KvCache::new` and
//! `Work::new_in` (private `layer` module); a unit test holds the KV cache to its formula.

use std::fmt;

use crate::kv::KvType;
use crate::model::Config;

/// Bytes in one GiB (the unit of the messages).
const GIB: f64 = (1u64 << 30) as f64;

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetError {
    /// The size does not fit in 64-bit (or the platform's `usize`) arithmetic.
    Overflow {
        /// What was being sized.
        what: &'static str,
    },
    /// The size is larger than the limit.
    OverBudget {
        /// What was being sized.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes allowed.
        limit: u64,
    },
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overflow { what } => {
                write!(
                    f,
                    "{what} needs more bytes than 64-bit arithmetic can count"
                )
            }
            Self::OverBudget { what, need, limit } => write!(
                f,
                "{what} needs {} ({need} bytes), limit {}",
                Human(*need),
                Human(*limit)
            ),
        }
    }
}

/// A byte count with two decimals in the largest of GiB, MiB and KiB that is at most the
/// count, else in bytes (so two different sizes below a GiB, a need and its limit, never print
/// alike as 0.0x GiB).
struct Human(u64);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        for (unit, size) in [("GiB", GIB), ("MiB", GIB / 1024.0), ("KiB", 1024.0)] {
            if b >= size {
                return write!(f, "{:.2} {unit}", b / size);
            }
        }
        write!(f, "{} bytes", self.0)
    }
}

impl std::error::Error for BudgetError {}

/// A limit on the bytes one allocation plan may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    limit: u64,
}

impl MemoryBudget {
    /// The machine's available memory: `MemAvailable` from `/proc/meminfo` (Linux, Android);
    /// where that file is missing, the physical memory (`sysconf`); where neither is known, no
    /// limit. Read anew on each call (it changes as other processes run).
    pub fn available() -> Self {
        let limit = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| meminfo_available(&s))
            .or_else(physical_memory)
            .unwrap_or(u64::MAX);
        Self { limit }
    }

    /// A budget of `bytes` (the caller's override, e.g. from a command-line option).
    pub fn with_limit(bytes: u64) -> Self {
        Self { limit: bytes }
    }

    /// No limit (sizes are still checked for overflow).
    pub fn unlimited() -> Self {
        Self { limit: u64::MAX }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `Ok(need)` when `need` bytes fit in the budget, else [`BudgetError::OverBudget`].
    pub fn check(&self, what: &'static str, need: u64) -> Result<u64, BudgetError> {
        if need > self.limit {
            return Err(BudgetError::OverBudget {
                what,
                need,
                limit: self.limit,
            });
        }
        Ok(need)
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line["MemAvailable:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    // The kernel always writes kB (KiB); anything else is not a meminfo we understand.
    (words.next()? == "kB").then_some(())?;
    n.checked_mul(1024)
}

/// Physical memory from `sysconf`, where the platform reports it.
fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a system constant; it has no memory-safety preconditions.
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let pages = u64::try_from(pages).ok()?;
        let page = u64::try_from(page).ok()?;
        pages.checked_mul(page)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Checked product of `factors` as a byte count of `what`.
pub(crate) fn product(what: &'static str, factors: &[u64]) -> Result<u64, BudgetError> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .ok_or(BudgetError::Overflow { what })
}

/// Checked sum of `terms` as a byte count of `what`.
pub(crate) fn sum(what: &'static str, terms: &[u64]) -> Result<u64, BudgetError> {
    terms
        .iter()
        .try_fold(0u64, |acc, &t| acc.checked_add(t))
        .ok_or(BudgetError::Overflow { what })
}

fn u(v: usize) -> u64 {
    // usize is at most 64 bits on every target Rust supports.
    v as u64
}

const F32: u64 = 4;

/// Bytes of the KV cache of `sequences` sequences of `ctx` positions in f32: keys and
/// values, `n_layer × ctx × kv_dim` each ([`kv_cache_bytes_of`] for the other types).
pub fn kv_cache_bytes(c: &Config, ctx: usize, sequences: usize) -> Result<u64, BudgetError> {
    kv_cache_bytes_of(c, ctx, sequences, KvType::F32)
}

/// Bytes of the KV cache of `sequences` sequences of `ctx` positions in `ty`: keys and
/// values, `n_layer × ctx` rows of `ty.row_bytes(kv_dim)` each (the engine's `KvCache::new`;
/// the batched engine keeps one per sequence). A width the type cannot hold counts as f32
/// (the engine refuses it before allocating).
pub fn kv_cache_bytes_of(
    c: &Config,
    ctx: usize,
    sequences: usize,
    ty: KvType,
) -> Result<u64, BudgetError> {
    const WHAT: &str = "KV cache";
    let kv_dim = product(WHAT, &[u(c.n_kv_head), u(c.head_dim)])?;
    let kv_dim = usize::try_from(kv_dim).map_err(|_| BudgetError::Overflow { what: WHAT })?;
    let row = ty
        .row_bytes(kv_dim)
        .or_else(|| KvType::F32.row_bytes(kv_dim))
        .ok_or(BudgetError::Overflow { what: WHAT })?;
    product(WHAT, &[2, u(sequences), u(c.n_layer), u(ctx), u(row)])
}

/// Bytes of the engine's heap work buffers for `ctx` positions, steps of `max_batch` rows and
/// a pool of `threads` threads (the engine's `Work::new`): the RoPE tables (`ctx ×
/// rope_dims/2` cosines and sines, f32), the attention's scratch (`threads ×
/// attention::scratch_len(head_dim)` f32: fixed tiles, whatever the context) and its tile
/// list (`attention::max_tiles`). The activations live in uma slots: [`acts_bytes`].
pub fn work_bytes(
    c: &Config,
    ctx: usize,
    max_batch: usize,
    threads: usize,
) -> Result<u64, BudgetError> {
    const WHAT: &str = "work buffers";
    let floats = sum(
        WHAT,
        &[
            product(WHAT, &[2, u(ctx), u(c.rope_dims / 2)])?,
            product(
                WHAT,
                &[
                    u(threads.max(1)),
                    u(crate::attention::scratch_len(c.head_dim)),
                ],
            )?,
        ],
    )?;
    let tiles = product(
        WHAT,
        &[
            u(max_batch.max(1)),
            u(c.n_head.max(1)),
            u(std::mem::size_of::<crate::attention::Tile>()),
        ],
    )?;
    sum(WHAT, &[product(WHAT, &[F32, floats])?, tiles])
}

/// Bytes of the uma activation slots `act::Acts::for_model(c, max_batch)` maps: 9 slots of
/// `max_batch × max(d_model, d_ff, vocab, kv_dim)` f32, each rounded up as `hetero_uma::round_slot_size`
/// rounds it (whole pages).
pub fn acts_bytes(c: &Config, max_batch: usize) -> Result<u64, BudgetError> {
    const WHAT: &str = "activation slots";
    let kv_dim = product(WHAT, &[u(c.n_kv_head), u(c.head_dim)])?;
    let widest = u(c.d_model.max(c.d_ff).max(c.vocab)).max(kv_dim);
    let slot = product(WHAT, &[F32, u(max_batch.max(1)), widest])?;
    let slot = usize::try_from(slot)
        .ok()
        .and_then(hetero_uma::round_slot_size)
        .ok_or(BudgetError::Overflow { what: WHAT })?;
    product(WHAT, &[u(crate::act::SLOTS), u(slot)])
}

/// The processors besides the CPU that an engine's executor runs, whose start-up scratch
/// (`Backend::reserve`) the budget counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Processors {
    /// The GPU backend is in the plan.
    pub gpu: bool,
    /// The NPU backend is in the plan, with this largest standard graph length.
    pub npu_seq: Option<usize>,
}

impl Processors {
    /// The processors `exec` holds (its plan table's backends; the resident GPU decoder has
    /// no host staging, and checks its device memory itself).
    pub fn of(exec: &crate::exec::Executor) -> Self {
        Self {
            gpu: !exec.is_resident()
                && exec
                    .plans()
                    .backends()
                    .contains(&hetero_partition::Backend::Gpu),
            npu_seq: exec.npu().and_then(|n| n.options().lengths().next()),
        }
    }
}

/// Bytes of the backends' scratch that `reserve` sizes for matmuls of `max_batch` rows (an
/// upper bound: every weight's `k` and `n` taken as the model's widest): the CPU's quantized
/// activations (hetero-sme `QActs`: one byte per element plus 16 bytes of block data per 32
/// elements), the GPU's staging buffers (one row in and out, and `max_batch` rows in, out and
/// on the host, f32) and the NPU's FP16 staging of one chunk of its largest length. The
/// prepared weights themselves (repacked, uploaded, graphs) are not counted.
pub fn scratch_bytes(c: &Config, max_batch: usize, p: &Processors) -> Result<u64, BudgetError> {
    const WHAT: &str = "backend scratch";
    let kv_dim = product(WHAT, &[u(c.n_kv_head), u(c.head_dim)])?;
    let max_k = u(c.d_model.max(c.d_ff));
    let max_n = u(c.d_model.max(c.d_ff).max(c.vocab)).max(kv_dim);
    let m = u(max_batch.max(1));
    let elems = product(WHAT, &[m, max_k])?;
    // hetero_sme::BlockMeta: four 4-byte fields per 32-element block.
    let cpu = sum(WHAT, &[elems, product(WHAT, &[elems / 32, 16])?])?;
    let gpu = if p.gpu {
        let rows = if max_batch >= 2 {
            product(WHAT, &[F32, m, sum(WHAT, &[max_k, max_n, max_n])?])?
        } else {
            0
        };
        sum(WHAT, &[product(WHAT, &[F32, max_k + max_n])?, rows])?
    } else {
        0
    };
    let npu = match p.npu_seq {
        Some(s) => product(WHAT, &[2, u(s), max_k + max_n])?,
        None => 0,
    };
    sum(WHAT, &[cpu, gpu, npu])
}

/// What one engine allocates besides the model and the prepared weights: one KV cache of
/// `ctx` positions per sequence, the work buffers, the activation slots for `max_batch` rows
/// and the backends' scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineSize {
    /// KV-cache positions per sequence.
    pub ctx: usize,
    /// Most rows of one step (the executor's largest row count).
    pub max_batch: usize,
    /// CPU pool threads (one attention score row each).
    pub threads: usize,
    /// KV caches: 1 for [`crate::engine::Engine`], one per sequence for
    /// [`crate::batch::BatchEngine`].
    pub sequences: usize,
    /// The processors whose scratch is counted besides the CPU's.
    pub processors: Processors,
    /// The KV caches' element type.
    pub kv: KvType,
}

impl EngineSize {
    /// The bytes: [`kv_cache_bytes`] + [`work_bytes`] + [`acts_bytes`] + [`scratch_bytes`].
    pub fn bytes(&self, c: &Config) -> Result<u64, BudgetError> {
        sum(
            "engine buffers",
            &[
                kv_cache_bytes_of(c, self.ctx, self.sequences, self.kv)?,
                work_bytes(c, self.ctx, self.max_batch, self.threads)?,
                acts_bytes(c, self.max_batch)?,
                scratch_bytes(c, self.max_batch, &self.processors)?,
            ],
        )
    }

    /// `Ok(bytes)` when they fit in `budget`; the error says "KV cache and work buffers needs
    /// N GiB (B bytes), limit M GiB".
    pub fn check(&self, budget: &MemoryBudget, c: &Config) -> Result<u64, BudgetError> {
        budget.check("KV cache and work buffers", self.bytes(c)?)
    }
}

/// Bytes an [`crate::engine::Engine`] on the CPU alone allocates for `(config, ctx,
/// max_batch, threads)` ([`EngineSize`] of one sequence, no GPU or NPU).
pub fn engine_bytes(
    c: &Config,
    ctx: usize,
    max_batch: usize,
    threads: usize,
) -> Result<u64, BudgetError> {
    cpu_engine(ctx, max_batch, threads).bytes(c)
}

/// Checks that an [`crate::engine::Engine`] on the CPU alone for `(config, ctx, max_batch,
/// threads)` fits in `budget` ([`EngineSize::check`]).
pub fn check_engine(
    budget: &MemoryBudget,
    c: &Config,
    ctx: usize,
    max_batch: usize,
    threads: usize,
) -> Result<u64, BudgetError> {
    cpu_engine(ctx, max_batch, threads).check(budget, c)
}

fn cpu_engine(ctx: usize, max_batch: usize, threads: usize) -> EngineSize {
    EngineSize {
        ctx,
        max_batch,
        threads,
        sequences: 1,
        processors: Processors::default(),
        kv: KvType::F32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm2() -> Config {
        Config {
            n_layer: 30,
            d_model: 576,
            n_head: 9,
            n_kv_head: 3,
            head_dim: 64,
            d_ff: 1536,
            vocab: 49152,
            context: 8192,
            rope_theta: 100_000.0,
            rope_dims: 64,
            eps: 1e-5,
        }
    }

    #[test]
    fn kv_cache_formula_matches_the_engine_allocation() {
        let c = smollm2();
        for ctx in [1, 7, 64] {
            for ty in KvType::ALL {
                let kv = crate::layer::KvCache::new(&c, ctx, ty).unwrap();
                let bytes = kv.bytes() as u64;
                assert_eq!(
                    kv_cache_bytes_of(&c, ctx, 1, ty),
                    Ok(bytes),
                    "ctx {ctx} {ty}"
                );
            }
        }
        // f16 halves f32; q8_0 is 34 bytes per 32 values.
        assert_eq!(
            kv_cache_bytes_of(&c, 8192, 1, KvType::F16).unwrap() * 2,
            kv_cache_bytes(&c, 8192, 1).unwrap()
        );
        assert_eq!(
            kv_cache_bytes_of(&c, 8192, 1, KvType::Q8_0).unwrap() * 128,
            kv_cache_bytes(&c, 8192, 1).unwrap() * 34
        );
    }

    #[test]
    fn figures_for_smollm2() {
        let c = smollm2();
        // 2 × 4 × 30 × 8192 × 192 bytes = 360 MiB.
        assert_eq!(kv_cache_bytes(&c, 8192, 1), Ok(377_487_360));
        // A million positions: 43.9 GiB, refused under a 16 GiB limit.
        let e =
            check_engine(&MemoryBudget::with_limit(16 << 30), &c, 1_000_000, 128, 2).unwrap_err();
        let BudgetError::OverBudget { need, limit, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(limit, 16 << 30);
        assert!(need > 43 << 30, "{need}");
        let msg = e.to_string();
        assert!(
            msg.contains("GiB") && msg.contains("limit 16.00 GiB"),
            "{msg}"
        );
        assert!(check_engine(&MemoryBudget::with_limit(1 << 30), &c, 2048, 128, 2).is_ok());
        let small = MemoryBudget::with_limit(1000)
            .check("x", 5 << 20)
            .unwrap_err();
        assert_eq!(
            small.to_string(),
            "x needs 5.00 MiB (5242880 bytes), limit 1000 bytes"
        );
    }

    #[test]
    fn overflow_is_an_error() {
        let mut c = smollm2();
        c.n_layer = usize::MAX / 2;
        assert_eq!(
            kv_cache_bytes(&c, usize::MAX, 1),
            Err(BudgetError::Overflow { what: "KV cache" })
        );
        assert!(matches!(
            work_bytes(&c, usize::MAX, usize::MAX, 2),
            Err(BudgetError::Overflow { .. })
        ));
        assert!(matches!(
            acts_bytes(&c, usize::MAX),
            Err(BudgetError::Overflow { .. })
        ));
    }

    #[test]
    fn meminfo_parsing() {
        let s = "MemTotal:       16318480 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(meminfo_available(s), Some(8_000_000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: x kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: 5 MB\n"), None);
        assert!(MemoryBudget::available().limit() > 0);
    }
}
