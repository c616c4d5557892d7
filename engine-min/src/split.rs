//! A CPU–GPU column split (EdgeAgent's tensor parallelism) with no concat copy: each matmul's
//! output columns (weight rows) `0..c` are computed by the CPU and `c..n` by the GPU, each
//! writing its own column range of the ONE output, `c = hetero_partition::ratio_cols(n,
//! cpu_share)` (64-column tiles). A `hetero_sync::DependencyBarrier` of two producers releases
//! the consumer: the CPU side arrives when its columns are written, the GPU side when its
//! columns are.
//!
//! Two paths, chosen per call:
//! - **zero copy** (one token, input and output inside the slots of the engine's
//!   [`UmaActs`]): the GPU reads the input slot and writes its columns of the output slot
//!   in place through `CL_MEM_USE_HOST_PTR` buffers made over the slots at start-up
//!   (`wrap_host`); its GEMV is enqueued signalled, so the last work-group stores an epoch
//!   into an `opencl-kernels` completion flag, which the host polls with
//!   `hetero_sync::CompletionFlag::wait` (`Producer::Device`; no `clFinish`) before arriving
//!   for the GPU. The kernel object of each (weight, input, output) is built the first time
//!   that triple runs and reused after (no allocation from the second token on).
//! - **staged** (prefill rows, the LM head whose output is the caller's logits, or memory
//!   outside the slots): a GPU thread writes each activation row to a device buffer, runs the
//!   GEMV and reads its columns straight into the row's range of the output (no scratch, no
//!   concat); it arrives when done. The CPU side runs concurrently on the caller's thread.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hetero_opencl_kernels::{Buffer, Flag, Launch};
use hetero_sync::{CompletionFlag, DependencyBarrier, Producer, WaitConfig};

use crate::act::UmaActs;
use crate::backend::{Backend, BackendError, CpuBackend, WeightView};
use crate::gguf::GgmlType;
use crate::gpu::{kerr, GpuBackend};
use crate::pool::Pool;
use crate::quant;

/// A row-major `rows x ld` f32 matrix of which a thread owns the columns `c0..c1`.
pub(crate) struct Cols {
    ptr: *mut f32,
    ld: usize,
    rows: usize,
    c0: usize,
    c1: usize,
}

// SAFETY: a `Cols` only reaches its own column range; two `Cols` of one matrix made by
// `Cols::split` have disjoint ranges, so they may be used from different threads.
unsafe impl Send for Cols {}
// SAFETY: see Send; `row` hands out disjoint rows only through its own contract.
unsafe impl Sync for Cols {}

impl Cols {
    /// Splits `out` (`rows x ld`) at column `c` into `0..c` and `c..ld`.
    fn split(out: &mut [f32], rows: usize, ld: usize, c: usize) -> Option<(Cols, Cols)> {
        if c > ld || out.len() < rows * ld {
            return None;
        }
        let ptr = out.as_mut_ptr();
        Some((
            Cols {
                ptr,
                ld,
                rows,
                c0: 0,
                c1: c,
            },
            Cols {
                ptr,
                ld,
                rows,
                c0: c,
                c1: ld,
            },
        ))
    }

    /// Row `t`'s columns of this view.
    ///
    /// # Safety
    /// No two live slices returned for the same `t` (by this view) may overlap: callers take
    /// each row at most once at a time. `t < rows`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, t: usize) -> &mut [f32] {
        assert!(t < self.rows);
        // SAFETY: `t < rows` and the matrix holds `rows * ld` floats (checked in `split`), so
        // the range is in bounds; the column range belongs to this view only (disjoint from
        // its sibling's) and the caller takes each row once.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.add(t * self.ld + self.c0), self.c1 - self.c0)
        }
    }
}

/// Kernel objects of the zero-copy path and the epoch counters.
struct Fast {
    /// Keyed by (GPU weight bytes, input slot, output wrap index).
    launches: HashMap<(usize, usize, usize), Launch>,
    /// Last epoch stored into the GPU flag (never 0).
    gpu_epoch: u32,
    /// Weights prepared with a GPU part (room reserved for one launch each).
    prepared: usize,
}

/// Counters of the paths taken.
#[derive(Debug, Default)]
pub struct SplitStats {
    /// Matmuls that took the zero-copy path.
    pub zero_copy: AtomicU64,
    /// Matmuls that took the staged path.
    pub staged: AtomicU64,
    /// Time the host spent polling the GPU's flag after its own columns were done, in ns.
    pub gpu_wait_ns: AtomicU64,
}

/// CPU and GPU sharing every matmul by columns, writing one output.
pub struct SplitBackend {
    // Field order matters: the prepared launches own references to their buffers and the flag,
    // but the wrapped slots' host memory is `acts`', so they are dropped before it.
    fast: Mutex<Fast>,
    wraps: Vec<Buffer>,
    wrap_at: HashMap<(usize, usize), usize>,
    flag: Option<Box<Flag>>,
    barrier: Arc<DependencyBarrier>,
    worker: Option<Worker>,
    cpu: CpuBackend,
    gpu: Arc<GpuBackend>,
    pool: Arc<Pool>,
    acts: Option<Arc<UmaActs>>,
    cpu_share: f64,
    stats: Arc<SplitStats>,
    name: String,
}

impl SplitBackend {
    /// Splits with the CPU taking `cpu_share` (0..=1) of each matmul's columns; the staged
    /// path only (no slots).
    pub fn new(cpu: CpuBackend, gpu: GpuBackend, cpu_share: f64) -> Result<Self, BackendError> {
        Self::with_acts(cpu, gpu, cpu_share, None, None)
    }

    /// As [`SplitBackend::new`], with the engine's activation slots (`acts`, the same
    /// [`UmaActs`] given to [`crate::engine::Engine::with_acts`]) wrapped for the GPU so one-token
    /// matmuls take the zero-copy path; `pool` runs the CPU side's per-row tasks (by default a
    /// 1-thread pool would be used only for the fallback types).
    pub fn with_acts(
        cpu: CpuBackend,
        gpu: GpuBackend,
        cpu_share: f64,
        acts: Option<Arc<UmaActs>>,
        pool: Option<Arc<Pool>>,
    ) -> Result<Self, BackendError> {
        if !(0.0..=1.0).contains(&cpu_share) {
            return Err(BackendError::Kernel(format!(
                "cpu share {cpu_share} outside 0..=1"
            )));
        }
        let pool = pool.unwrap_or_else(|| Arc::new(Pool::new(1)));
        let mut wraps = Vec::new();
        let mut wrap_at = HashMap::new();
        let mut flag = None;
        if let Some(a) = &acts {
            // The zero-copy path needs a device that writes host memory in place; elsewhere
            // everything is staged.
            if let Ok(f) = Flag::new(gpu.device()) {
                for i in 0..a.slots() {
                    let Some((p, len)) = a.slot_raw(i) else {
                        continue;
                    };
                    // SAFETY: the slot is `len` bytes of the pool's mapping, which `acts` keeps
                    // mapped for as long as this backend holds the Arc (the buffers are dropped
                    // before it, field order); the device touches it only during a launch the
                    // host waits for (completion flag) before using the memory again.
                    let b = unsafe { gpu.device().wrap_host(p, len) }.map_err(kerr)?;
                    wrap_at.insert((i, 0), wraps.len());
                    wraps.push(b);
                }
                flag = Some(Box::new(f));
            }
        }
        let name = format!("cpu+gpu columns ({:.0}% cpu)", cpu_share * 100.0);
        Ok(Self {
            fast: Mutex::new(Fast {
                launches: HashMap::new(),
                gpu_epoch: 0,
                prepared: 0,
            }),
            wraps,
            wrap_at,
            flag,
            barrier: Arc::new(
                DependencyBarrier::new(2)
                    .map_err(|e| BackendError::Kernel(format!("barrier: {e}")))?,
            ),
            worker: None,
            cpu,
            gpu: Arc::new(gpu),
            pool,
            acts,
            cpu_share,
            stats: Arc::new(SplitStats::default()),
            name,
        })
    }

    /// Columns of `w` that go to the CPU.
    pub fn cpu_cols(&self, n: usize) -> usize {
        hetero_partition::ratio_cols(n as u32, self.cpu_share).map_or(n, |c| c as usize)
    }

    /// The CPU backend.
    pub(crate) fn cpu(&self) -> &CpuBackend {
        &self.cpu
    }

    /// Which path each matmul took, and the host's wait for the GPU.
    pub fn stats(&self) -> Arc<SplitStats> {
        Arc::clone(&self.stats)
    }

    fn parts<'a>(
        &self,
        w: &WeightView<'a>,
        c: usize,
    ) -> Result<(WeightView<'a>, WeightView<'a>), BackendError> {
        let rb = quant::row_bytes(w.ty, w.k).ok_or(BackendError::Unsupported(w.ty))?;
        if w.data.len() != w.n * rb {
            return Err(BackendError::Shape("weight bytes"));
        }
        if c > w.n {
            return Err(BackendError::Shape("split column"));
        }
        let (a, b) = w.data.split_at(c * rb);
        Ok((
            WeightView {
                n: c,
                data: a,
                ..*w
            },
            WeightView {
                n: w.n - c,
                data: b,
                ..*w
            },
        ))
    }

    /// Prepares `w` for splits with the CPU taking columns `0..c` (the CPU's part, the GPU's
    /// part uploaded, the slots wrapped at the GPU's column offset). Several `c` may be
    /// prepared for one weight ([`crate::exec`] does, one per planned split).
    pub(crate) fn prepare_cols(
        &mut self,
        w: &WeightView<'_>,
        c: usize,
    ) -> Result<(), BackendError> {
        let (a, b) = self.parts(w, c)?;
        if a.n > 0 {
            self.cpu.prepare(&a)?;
        }
        if b.n > 0 {
            Arc::get_mut(&mut self.gpu)
                .ok_or(BackendError::Kernel(
                    "prepare after reserve: the GPU worker already runs".into(),
                ))?
                .prepare(&b)?;
            // Wrap every slot again at this weight's GPU column offset, for outputs.
            let off = a.n * 4;
            if off > 0 && self.flag.is_some() {
                if let Some(acts) = &self.acts {
                    for i in 0..acts.slots() {
                        if self.wrap_at.contains_key(&(i, off)) {
                            continue;
                        }
                        let Some((p, len)) = acts.slot_raw(i) else {
                            continue;
                        };
                        if off >= len {
                            continue;
                        }
                        // Misaligned offsets are refused by `wrap_host` (that weight is staged).
                        // SAFETY: as in `with_acts`; `p + off .. p + len` lies in the slot.
                        let wrapped = unsafe { self.gpu.device().wrap_host(p.add(off), len - off) };
                        if let Ok(buf) = wrapped {
                            self.wrap_at.insert((i, off), self.wraps.len());
                            self.wraps.push(buf);
                        }
                    }
                }
            }
        }
        let f = self.fast.get_mut().unwrap_or_else(|e| e.into_inner());
        // One launch per weight (each writes one destination): room for them now.
        if b.n > 0 && a.n > 0 {
            f.prepared += 1;
            let more = f.prepared.saturating_sub(f.launches.len());
            f.launches.reserve(more);
        }
        Ok(())
    }

    /// The split with the CPU taking columns `0..c` (prepared with [`Self::prepare_cols`]).
    pub(crate) fn matmul_cols(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        c: usize,
    ) -> Result<(), BackendError> {
        let (a, b) = self.parts(w, c)?;
        if out.len() != m * w.n {
            return Err(BackendError::Shape("out"));
        }
        if x.len() != m * w.k {
            return Err(BackendError::Shape("x"));
        }
        if m == 0 {
            return Ok(());
        }
        let epoch = hetero_sync::next_epoch(self.barrier.completed_epoch());
        if self.zero_copy(&a, &b, x, m, out, epoch)? {
            return Ok(());
        }
        let (ca, cb) = Cols::split(out, m, w.n, a.n).ok_or(BackendError::Shape("out"))?;
        let cfg = WaitConfig {
            timeout: Duration::from_secs(60),
            ..WaitConfig::default()
        };
        let berr = |e: hetero_sync::SyncError| BackendError::Kernel(format!("barrier: {e}"));
        let posted = match (&self.worker, b.n > 0) {
            (Some(wk), true) => {
                wk.post(Job {
                    ty: b.ty,
                    n: b.n,
                    k: b.k,
                    w: (b.data.as_ptr(), b.data.len()),
                    x: (x.as_ptr(), x.len()),
                    m,
                    out: cb,
                    epoch,
                });
                true
            }
            (None, true) => {
                // No worker (reserve was not called): the GPU's columns on this thread.
                // SAFETY: this thread takes each of the GPU view's rows once.
                let r = self.gpu.matmul_rows(&b, x, m, |t| unsafe { cb.row(t) });
                let arrived = self.barrier.arrive(1, epoch);
                r?;
                arrived.map_err(berr)?;
                false
            }
            _ => {
                self.barrier.arrive(1, epoch).map_err(berr)?;
                false
            }
        };
        let ra = self.cpu_part(&a, x, m, &ca);
        let arrive_a = self.barrier.arrive(0, epoch);
        // The consumer (this thread) is released by the barrier once both sides arrived.
        let waited = self.barrier.wait(epoch, &cfg, None);
        let rb = match (&self.worker, posted) {
            (Some(wk), true) => wk.take(),
            _ => Ok(()),
        };
        ra?;
        rb?;
        arrive_a.map_err(berr)?;
        waited.map_err(berr)?;
        self.stats.staged.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The CPU's columns: row by row into `out`'s column range (quantized weights through
    /// `hetero-sme`'s GEMV in 64-row tasks on the pool, each task looping over the tokens while
    /// its weight rows stay in cache; other types through the CPU backend one row at a time).
    fn cpu_part(
        &self,
        a: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &Cols,
    ) -> Result<(), BackendError> {
        let k = a.k;
        if a.n == 0 {
            return Ok(());
        }
        if m == 1 {
            // SAFETY: row 0 taken once.
            return self.cpu.matmul(a, x, 1, unsafe { out.row(0) });
        }
        if !matches!(a.ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0) {
            for t in 0..m {
                // SAFETY: each row taken once, one after the other.
                let row = unsafe { out.row(t) };
                self.cpu.matmul(a, &x[t * k..(t + 1) * k], 1, row)?;
            }
            return Ok(());
        }
        use hetero_sme::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QuantBlock};
        const ROWS: usize = 64;
        let rb = quant::row_bytes(a.ty, k).ok_or(BackendError::Unsupported(a.ty))?;
        let failed = std::sync::atomic::AtomicBool::new(false);
        let task = |task: usize, _thread: usize| {
            let r0 = task * ROWS;
            let nr = (a.n - r0).min(ROWS);
            let bytes = &a.data[r0 * rb..(r0 + nr) * rb];
            for t in 0..m {
                // SAFETY: tasks own disjoint row ranges r0..r0+nr of each output row's CPU
                // columns; within a task each token's row is taken once.
                let y = unsafe { &mut out.row(t)[r0..r0 + nr] };
                let xt = &x[t * k..(t + 1) * k];
                let r = match a.ty {
                    GgmlType::Q4_0 => BlockQ4_0::slice_from_bytes(bytes)
                        .and_then(|b| hetero_sme::gemv_q4_0(xt, 1, k, b, y, nr)),
                    GgmlType::Q4_1 => BlockQ4_1::slice_from_bytes(bytes)
                        .and_then(|b| hetero_sme::gemv_q4_1(xt, 1, k, b, y, nr)),
                    _ => BlockQ8_0::slice_from_bytes(bytes)
                        .and_then(|b| hetero_sme::gemv_q8_0(xt, 1, k, b, y, nr)),
                };
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                    return;
                }
            }
        };
        self.pool.run(a.n.div_ceil(ROWS), &task);
        if failed.load(Ordering::Relaxed) {
            return Err(BackendError::Kernel(
                "hetero-sme GEMV refused a CPU part".into(),
            ));
        }
        Ok(())
    }

    /// Tries the zero-copy path; `Ok(false)` when it does not apply to this call.
    fn zero_copy(
        &self,
        a: &WeightView<'_>,
        b: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
        epoch: u32,
    ) -> Result<bool, BackendError> {
        let (Some(acts), Some(flag)) = (&self.acts, &self.flag) else {
            return Ok(false);
        };
        if m != 1 || b.n == 0 {
            return Ok(false);
        }
        let Some((xs, 0)) = acts.locate(x.as_ptr().cast(), x.len() * 4) else {
            return Ok(false);
        };
        let Some((ys, yoff)) = acts.locate(out.as_ptr().cast(), out.len() * 4) else {
            return Ok(false);
        };
        let (Some(&xw), Some(&yw)) = (
            self.wrap_at.get(&(xs, 0)),
            self.wrap_at.get(&(ys, yoff + a.n * 4)),
        ) else {
            return Ok(false);
        };
        let Some(fmt) = crate::gpu::format(b.ty) else {
            return Ok(false);
        };
        let mut fast = self.fast.lock().unwrap_or_else(|e| e.into_inner());
        let fast = &mut *fast;
        let key = (b.data.as_ptr() as usize, xw, yw);
        if let std::collections::hash_map::Entry::Vacant(slot) = fast.launches.entry(key) {
            let wb = self.gpu.weight(b)?;
            let mut l = self
                .gpu
                .kernels()
                .gemv(fmt, wb, &self.wraps[xw], &self.wraps[yw], b.n, b.k)
                .map_err(kerr)?;
            l.bind_flag(flag).map_err(kerr)?;
            // The launch owns references to the weight buffer and the flag; the wrapped slots'
            // host memory lives in `self.acts` until `self` is dropped, after `fast` (field
            // order), so the launch never outlives it.
            slot.insert(l);
        }
        let Some(launch) = fast.launches.get_mut(&key) else {
            return Ok(false);
        };
        fast.gpu_epoch = match hetero_sync::next_epoch(fast.gpu_epoch) {
            0 => 1,
            e => e,
        };
        let ge = fast.gpu_epoch;
        let (oa, _ob) = out.split_at_mut(a.n);
        launch
            .enqueue_signaled(NonZeroU32::new(ge).unwrap_or(NonZeroU32::MIN))
            .map_err(kerr)?;
        self.gpu.device().flush().map_err(kerr)?;
        // The CPU's columns while the GPU computes its own (`_ob`: not touched by the host).
        let rc = if a.n > 0 {
            self.cpu.matmul(a, x, 1, oa)
        } else {
            Ok(())
        };
        let ra = self.barrier.arrive(0, epoch);
        let t0 = std::time::Instant::now();
        let cfg = WaitConfig {
            producer: Producer::Device,
            timeout: Duration::from_secs(10),
            ..WaitConfig::default()
        };
        let word = CompletionFlag::from_atomic(flag.word());
        // No sleep phase (one site would mix every op's duration): poll, then timed re-checks.
        let rw = word.wait(ge, &cfg, None);
        self.stats
            .gpu_wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if rw.is_err() {
            // The GPU may still write `_ob`: wait for the queue before giving the memory back.
            let _ = self.gpu.device().finish();
        }
        let rb = self.barrier.arrive(1, epoch);
        rc?;
        rw.map_err(|e| BackendError::Kernel(format!("GPU flag: {e}")))?;
        ra.map_err(|e| BackendError::Kernel(format!("barrier: {e}")))?;
        rb.map_err(|e| BackendError::Kernel(format!("barrier: {e}")))?;
        self.stats.zero_copy.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

/// One staged GPU part, handed to the worker (raw parts: the caller waits for it to finish).
struct Job {
    ty: GgmlType,
    n: usize,
    k: usize,
    w: (*const u8, usize),
    x: (*const f32, usize),
    m: usize,
    out: Cols,
    epoch: u32,
}

// SAFETY: the pointers name memory the posting caller keeps borrowed until it has taken the
// job's result (`Worker::take`), so they stay valid while the worker uses them.
unsafe impl Send for Job {}

#[derive(Default)]
struct Slot {
    job: Option<Job>,
    done: Option<Result<(), BackendError>>,
    stop: bool,
}

struct WorkerShared {
    slot: Mutex<Slot>,
    cv: std::sync::Condvar,
}

/// The GPU's host thread for staged calls: runs the GPU's rows of a posted job, stores the
/// result, then arrives at the barrier for the GPU (producer 1).
struct Worker {
    shared: Arc<WorkerShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn spawn(gpu: Arc<GpuBackend>, barrier: Arc<DependencyBarrier>) -> Option<Worker> {
        let shared = Arc::new(WorkerShared {
            slot: Mutex::new(Slot::default()),
            cv: std::sync::Condvar::new(),
        });
        let sh = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("engine-min-gpu".into())
            .spawn(move || loop {
                let job = {
                    let mut s = sh.slot.lock().unwrap_or_else(|e| e.into_inner());
                    loop {
                        if s.stop {
                            return;
                        }
                        if let Some(j) = s.job.take() {
                            break j;
                        }
                        s = sh.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                    }
                };
                // SAFETY: the poster keeps `w` and `x` borrowed until it takes the result
                // (after the barrier completes, which needs this thread's arrival below).
                let (wd, xs) = unsafe {
                    (
                        std::slice::from_raw_parts(job.w.0, job.w.1),
                        std::slice::from_raw_parts(job.x.0, job.x.1),
                    )
                };
                let w = WeightView {
                    ty: job.ty,
                    n: job.n,
                    k: job.k,
                    data: wd,
                };
                // SAFETY: the worker takes each of its view's rows once; the poster uses the
                // other column range only.
                let r = gpu.matmul_rows(&w, xs, job.m, |t| unsafe { job.out.row(t) });
                // The result is stored before arriving, so the consumer released by the
                // barrier finds it.
                sh.slot.lock().unwrap_or_else(|e| e.into_inner()).done = Some(r);
                let _ = barrier.arrive(1, job.epoch);
            })
            .ok()?;
        Some(Worker {
            shared,
            thread: Some(thread),
        })
    }

    fn post(&self, job: Job) {
        let mut s = self.shared.slot.lock().unwrap_or_else(|e| e.into_inner());
        s.job = Some(job);
        s.done = None;
        drop(s);
        self.shared.cv.notify_one();
    }

    /// The posted job's result, waiting for it if the barrier gave up early.
    fn take(&self) -> Result<(), BackendError> {
        let mut s = self.shared.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = s.done.take() {
                return r;
            }
            s = self
                .shared
                .cv
                .wait_timeout(s, Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared
            .slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Backend for SplitBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prepare(&mut self, w: &WeightView<'_>) -> Result<(), BackendError> {
        let c = self.cpu_cols(w.n);
        self.prepare_cols(w, c)
    }

    fn reserve(&mut self, max_tokens: usize, max_k: usize) {
        self.cpu.reserve(max_tokens, max_k);
        if let Some(g) = Arc::get_mut(&mut self.gpu) {
            g.reserve(max_tokens, max_k);
        }
        // The GPU's host thread for staged calls, started once (no thread per call).
        if self.worker.is_none() {
            self.worker = Worker::spawn(Arc::clone(&self.gpu), Arc::clone(&self.barrier));
        }
    }

    fn matmul(
        &self,
        w: &WeightView<'_>,
        x: &[f32],
        m: usize,
        out: &mut [f32],
    ) -> Result<(), BackendError> {
        self.matmul_cols(w, x, m, out, self.cpu_cols(w.n))
    }
}
