//! One backend instance's compute state: hetero-sme's `ThreadPool` and the scratch a MUL_MAT
//! needs (quantized activations, gathered rows, FP16 activations), grown on first use of a size
//! and reused, so a steady-state call allocates nothing.

use std::sync::Mutex;

use hetero_sme::{
    ActBlocks, Gemm, GemmPlan, Int8Kernel, Int8Plan, Kernel, Lhs, OutMut, PackedFormat, QActs,
    StealState, ThreadPool,
};

use crate::blob::Weight;
use crate::Error;

/// Up to this many rows a call is a decode step: it wakes only as many threads as its weight's
/// bytes are worth (see [`Ctx::threads_for`]).
const SIZED_ROWS: usize = 16;
/// Bytes of weight per thread woken at decode sizes: one thread streams a packed weight at
/// ~10-14 GB/s and each woken thread costs ~0.1-0.2 µs, so `p = ⌈√(bytes / 2048)⌉` minimizes
/// streaming plus wake-up time (the model engine-min's CPU backend uses).
const BYTES_PER_WAKE: usize = 2048;

/// A backend instance's compute state.
///
/// Activations are rounded before the multiply as ggml's CPU backend rounds them for the same
/// weight type (its `vec_dot_type`), so results match it: the int8 forms quantize each row per
/// 32 values to 8 bits with the block scale and scaled sum in FP16 (q8_0 / q8_1), or per 256
/// with an f32 scale for the K-quants (q8_K); the F16 form rounds them to FP16.
pub struct Ctx {
    pool: ThreadPool,
    /// The work-stealing ranges of a job run on the caller's threads ([`Ctx::mul_mat_team`]).
    steal: StealState,
    int8: Int8Kernel,
    f16: Kernel,
    acts: QActs,
    /// Rows gathered when the caller's rows are not contiguous.
    gathered: Vec<f32>,
    /// FP16 activations for the F16 form.
    x16: Vec<u16>,
}

impl Ctx {
    /// A context on `threads` threads (the calling thread and `threads - 1` pool workers).
    pub fn new(threads: usize) -> Result<Self, Error> {
        Ok(Self {
            pool: ThreadPool::new(threads.max(1))?,
            steal: StealState::new(threads.max(1))?,
            int8: Int8Kernel::best(),
            f16: Kernel::best(PackedFormat::F16),
            acts: QActs::default(),
            gathered: Vec::new(),
            x16: Vec::new(),
        })
    }

    /// Threads a call runs on.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Changes the thread count (a new pool when it differs; nothing when it does not).
    pub fn set_threads(&mut self, threads: usize) -> Result<(), Error> {
        let t = threads.max(1);
        if t != self.pool.threads() {
            self.pool = ThreadPool::new(t)?;
        }
        Ok(())
    }

    /// The kernels this context runs: `(int8, fp16)` names.
    pub fn kernel_names(&self) -> (&'static str, &'static str) {
        (self.int8.name(), self.f16.name())
    }

    /// `y[m × n] = x[m × k] · Wᵀ` on the context's `ThreadPool`: row `r` of `x` at
    /// `x[r·ldx..r·ldx + k]`, of `y` at `y[r·ldy..r·ldy + n]`. Checks run before any write; on
    /// error `y` is untouched.
    pub fn mul_mat(
        &mut self,
        w: &Weight<'_>,
        x: &[f32],
        m: usize,
        ldx: usize,
        y: &mut [f32],
        ldy: usize,
    ) -> Result<(), Error> {
        let all = self.pool.threads();
        self.run(w, x, m, ldx, y, ldy, all, Runner::Pool)
    }

    /// As [`Ctx::mul_mat`], on the caller's threads instead of the pool's: `team(t, work)` must
    /// call `work(i)` once on each of `t` threads (`i` in `0..t`, concurrently, e.g. an OpenMP
    /// parallel region) and return when all have returned; `t` is at most `threads` (fewer for a
    /// small decode matmul). The work is hetero-sme's range work stealing, so a thread that
    /// never starts only costs time: the others take its tiles. For an engine that already owns
    /// a team of threads (ggml's OpenMP team): a second pool on the same cores would spin
    /// against it.
    #[allow(clippy::too_many_arguments)]
    pub fn mul_mat_team(
        &mut self,
        w: &Weight<'_>,
        x: &[f32],
        m: usize,
        ldx: usize,
        y: &mut [f32],
        ldy: usize,
        threads: usize,
        team: &mut TeamFn<'_>,
    ) -> Result<(), Error> {
        if threads == 0 {
            return Err(Error::Invalid("a team of no threads"));
        }
        if self.steal.workers() < threads {
            self.steal = StealState::new(threads)?;
        }
        self.run(w, x, m, ldx, y, ldy, threads, Runner::Team(team))
    }

    /// The one body of both: checks, activations, the plan, then the runner.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        w: &Weight<'_>,
        x: &[f32],
        m: usize,
        ldx: usize,
        y: &mut [f32],
        ldy: usize,
        threads: usize,
        runner: Runner<'_>,
    ) -> Result<(), Error> {
        let (n, k) = (w.n(), w.k());
        if m == 0 {
            return Ok(());
        }
        if ldx < k || ldy < n {
            return Err(Error::Invalid("row stride shorter than a row"));
        }
        let span = |ld: usize, len: usize| (m - 1).checked_mul(ld)?.checked_add(len);
        if span(ldx, k).is_none_or(|s| x.len() < s) {
            return Err(Error::Invalid("activations shorter than m rows"));
        }
        if span(ldy, n).is_none_or(|s| y.len() < s) {
            return Err(Error::Invalid("output shorter than m rows"));
        }
        let elems = m
            .checked_mul(k)
            .ok_or(Error::Invalid("activations too large"))?;
        let Self {
            pool,
            steal,
            int8,
            f16,
            acts,
            gathered,
            x16,
        } = self;
        // Contiguous rows for the quantizer / the FP16 conversion.
        let x: &[f32] = if ldx == k {
            &x[..elems]
        } else {
            gathered.clear();
            gathered.reserve(elems);
            for r in 0..m {
                gathered.extend_from_slice(&x[r * ldx..r * ldx + k]);
            }
            gathered
        };
        match w {
            Weight::Int8(wr) => {
                if acts.capacity() < elems {
                    *acts = QActs::with_capacity(m, k);
                }
                let blocks: ActBlocks = wr.act_blocks();
                int8.quantize_acts_for(x, m, k, blocks, acts)?;
                // ggml's q8_0 / q8_1 keep the block scale and the scaled sum in FP16: the same
                // rounding here makes the results llama.cpp's CPU backend's (within float
                // summation order).
                acts.round_scales_to_f16();
                let plan = Int8Plan::with_view(*int8, *wr, acts, OutMut::new(y), ldy)?
                    .with_workers(threads);
                let bytes = wr.quant_bytes().len() + 2 * wr.scale_words().len();
                let t = threads_for(threads, bytes, m, plan.tiles());
                dispatch(pool, steal, runner, plan.tiles(), t, &|st, th| {
                    plan.run_worker(st, th)
                })
            }
            Weight::F16(p) => {
                // ggml rounds the activations of an F16 weight to FP16 (its vec_dot_type):
                // the same inputs, then exact FP16 products summed in FP32.
                x16.clear();
                x16.extend(x.iter().map(|&v| half::f16::from_f32(v).to_bits()));
                let g = Gemm {
                    a: Lhs::F16(x16),
                    m,
                    lda: k,
                    w: *p,
                    bias: None,
                    accumulate: false,
                };
                let plan = GemmPlan::new(*f16, &g, y, ldy)?;
                let t = threads_for(threads, 2 * p.data().len(), m, plan.tiles());
                dispatch(pool, steal, runner, plan.tiles(), t, &|st, th| {
                    plan.run_worker(st, th)
                })
            }
        }
    }
}

/// A caller's team: `team(t, work)` calls `work(i)` once on each of `t` threads.
pub type TeamFn<'a> = dyn FnMut(usize, &(dyn Fn(usize) + Sync)) + 'a;

/// Who runs a job's threads.
enum Runner<'a> {
    /// The context's `ThreadPool`.
    Pool,
    /// The caller's team (see [`Ctx::mul_mat_team`]).
    Team(&'a mut TeamFn<'a>),
}

/// Threads a job of `m` rows streaming `bytes` of weight in `tiles` tiles wakes, of `all`.
fn threads_for(all: usize, bytes: usize, m: usize, tiles: usize) -> usize {
    let p = if m > SIZED_ROWS {
        all
    } else {
        ((bytes / BYTES_PER_WAKE) as f64).sqrt().ceil() as usize
    };
    p.clamp(1, all).min(tiles.max(1))
}

/// Runs `tiles` tiles of a plan on `threads` threads of `runner`; the first tile error is
/// returned.
fn dispatch(
    pool: &ThreadPool,
    steal: &mut StealState,
    runner: Runner<'_>,
    tiles: usize,
    threads: usize,
    worker: &(dyn Fn(&StealState, usize) -> Result<(), hetero_sme::Error> + Sync),
) -> Result<(), Error> {
    let failed: Mutex<Option<hetero_sme::Error>> = Mutex::new(None);
    let record = |r: Result<(), hetero_sme::Error>| {
        if let Err(e) = r {
            *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        }
    };
    match runner {
        Runner::Pool => pool.run_workers_on(tiles, threads, &|st: &StealState, th| {
            record(worker(st, th))
        })?,
        Runner::Team(team) => {
            steal.prepare_active(tiles, threads)?;
            let st: &StealState = steal;
            team(threads, &|th| {
                if th < threads {
                    record(worker(st, th));
                }
            });
        }
    }
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
