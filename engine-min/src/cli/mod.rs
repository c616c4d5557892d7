//! The `engine-min` command line (clap): argument types with their ranges, the subcommands,
//! and how errors and a closed stdout end the program. `main.rs` only calls [`main`].

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::backend::CpuKernel;
use crate::compose::PlanChoice;
use crate::limits::MemoryBudget;
use crate::model::{LoadOptions, Model};

mod agents;
mod bench;
mod perplexity;
mod plan;
pub mod progress;
mod run;
mod synth;

/// Runs the command line of this process.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Runs the command line `args` (the first item is the program name).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let r = run_with(args, &mut out).and_then(|()| out.flush().map_err(Fail::from));
    match r {
        // `--help`/`--version` print to stdout and succeed; usage errors exit 2.
        Err(Fail::Clap(e)) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            ExitCode::from(code)
        }
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`| head`) ends the program quietly: the reader has what it wanted.
        Err(Fail::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(f) => {
            let _ = writeln!(io::stderr(), "engine-min: {f}");
            ExitCode::from(f.code())
        }
    }
}

/// Parses `args` (the first item is the program name) and runs the command, writing its
/// output to `out`.
pub fn run_with<I, T>(args: I, out: &mut dyn Write) -> Result<(), Fail>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(Fail::Clap)?;
    if matches!(cli.cmd, Cmd::Profile(_) | Cmd::Bench(_)) {
        warn_if_not_release();
    }
    let v = Verbosity(cli.verbose);
    // The NPU's own log follows --verbose unless HETERO_QNN_LOG chose a level.
    qnn_sys::set_default_log_level(Some(match v.0 {
        0 => qnn_sys::LogLevel::Error,
        1 => qnn_sys::LogLevel::Warn,
        _ => qnn_sys::LogLevel::Verbose,
    }));
    // What the QNN library prints to stdout while loading (the simulator's ` # LIBNATIVE`
    // line) is kept off our stdout; -vv shows it on stderr.
    qnn_sys::set_library_stdout_echo(v.0 >= 2);
    match cli.cmd {
        Cmd::Run(a) => run::run(a, v, out),
        Cmd::Profile(a) => plan::profile(a, v, out),
        Cmd::Plan(a) => plan::plan(a, v, out),
        Cmd::Bench(a) => bench::bench(a, v, out),
        Cmd::Agents(a) => agents::agents(a, out),
        Cmd::Perplexity(a) => perplexity::perplexity(a, out),
        Cmd::Synth(a) => synth::synth(a, out),
    }
}

/// Timings (and so profiles) from a build with debug assertions and overflow checks (cargo's
/// `dev` or this workspace's `ci` profile) understate the CPU path 2-3x: they stop the
/// compiler from vectorizing the kernels' loops. Said on stderr, so parsed output is unchanged.
fn warn_if_not_release() {
    if cfg!(debug_assertions) {
        // A closed stderr loses the warning, not the command (eprintln! would panic).
        let _ = writeln!(
            io::stderr(),
            "warning: this engine-min was built with debug assertions (a `ci` or `dev` \
             profile): its CPU timings are 2-3x slower than a `--release` build's"
        );
    }
}

/// How a command failed.
#[derive(Debug)]
pub enum Fail {
    /// The arguments did not parse (or `--help` was asked for).
    Clap(clap::Error),
    /// Bad arguments found after parsing (exit 2).
    Usage(String),
    /// The work failed (exit 1).
    Run(String),
    /// Writing the output failed.
    Io(io::Error),
}

impl Fail {
    fn code(&self) -> u8 {
        match self {
            Fail::Usage(_) | Fail::Clap(_) => 2,
            _ => 1,
        }
    }

    /// A failure of the work, with the error's own message.
    pub fn run(e: impl std::fmt::Display) -> Fail {
        Fail::Run(e.to_string())
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Clap(e) => write!(f, "{e}"),
            Fail::Usage(m) => write!(f, "{m} (see --help)"),
            Fail::Run(m) => f.write_str(m),
            Fail::Io(e) => write!(f, "writing the output: {e}"),
        }
    }
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Self {
        Fail::Io(e)
    }
}

/// Profile, plan and run a GGUF model across CPU, GPU and NPU.
#[derive(Parser, Debug)]
#[command(name = "engine-min", version, about, long_about = None)]
struct Cli {
    /// Print the details: every profiled point, the per-op plans, predicted against measured
    /// time per op class, the model and processors (`-vv`: also the NPU's own info log and
    /// what its library printed to stdout while loading).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

/// How much a command prints: 0 by default (progress, the decision, the result), 1 and
/// more with `--verbose` (each `-v` adds detail; any count is accepted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Verbosity(pub u8);

impl Verbosity {
    /// Whether `--verbose` was given.
    pub fn detailed(self) -> bool {
        self.0 > 0
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Generate text from a prompt (prints the text, then timings and where time went).
    Run(run::RunArgs),
    /// Measure every available processor on the model's matmul shapes; write a profile.
    Profile(plan::ProfileArgs),
    /// Print the planner's per-op plan for a profile.
    Plan(plan::PlanArgs),
    /// llama-bench's pp N / tg N (tokens/s, medians) on one plan.
    Bench(bench::BenchArgs),
    /// Speculative decoding for several agents (EdgeAgent's draft budgets).
    Agents(agents::AgentsArgs),
    /// Perplexity of a text file, computed as llama.cpp's llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Write a GGUF of random weights at a real model's shape (for timing and reference
    /// checks, not text).
    Synth(synth::SynthArgs),
}

/// The model file.
#[derive(Args, Debug, Clone)]
pub struct ModelArg {
    /// GGUF model file (any file name, also non-UTF-8).
    #[arg(long, env = "HETERO_MODEL", value_name = "PATH")]
    pub model: PathBuf,
}

/// How the machine runs the model: the plan and the CPU side.
#[derive(Args, Debug, Clone)]
pub struct MachineArgs {
    /// CPU threads (default: all cores).
    #[arg(long, value_parser = at_least_one)]
    pub threads: Option<usize>,
    /// CPU kernel: portable, avx512, sme-gemv, sme-int8, sme (default: sme-int8 with VNNI,
    /// else sme-gemv).
    #[arg(long, value_parser = kernel)]
    pub kernel: Option<CpuKernel>,
    /// Standard NPU graph lengths, one to four (e.g. 32 or 32,128).
    #[arg(long, value_delimiter = ',', value_parser = at_least_one, default_value = "32")]
    pub npu_seq: Vec<usize>,
    /// How a plan with every matmul on the GPU runs: `resident` (whole steps on the device,
    /// one readback a step) or `per-matmul` (a round trip per matmul, host ops on the CPU).
    #[arg(long, default_value = "resident", value_parser = gpu_path)]
    pub gpu_path: crate::compose::GpuPath,
    /// The KV cache's element type: f32, f16 or q8_0 (34 bytes per 32 values). Default: f16
    /// (llama.cpp's), on every path (the host's cache, and the resident GPU decoder's on the
    /// device).
    #[arg(long, value_parser = kv_type)]
    pub kv_type: Option<crate::kv::KvType>,
}

fn kv_type(s: &str) -> Result<crate::kv::KvType, String> {
    s.parse()
}

fn gpu_path(s: &str) -> Result<crate::compose::GpuPath, String> {
    match s {
        "resident" => Ok(crate::compose::GpuPath::Resident),
        "per-matmul" => Ok(crate::compose::GpuPath::PerMatmul),
        _ => Err(format!("`{s}` is not resident or per-matmul")),
    }
}

impl MachineArgs {
    /// The thread count (default: the machine's cores).
    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
    }

    /// The CPU kernel.
    pub fn kernel(&self) -> CpuKernel {
        self.kernel.unwrap_or_else(CpuKernel::default_for_run)
    }

    /// NPU options from `--npu-seq`.
    pub fn npu(&self) -> Result<crate::backend::npu::NpuOptions, Fail> {
        let mut lens = self.npu_seq.clone();
        lens.sort_unstable();
        lens.dedup();
        if lens.is_empty() || lens.len() > 4 {
            return Err(Fail::Usage("--npu-seq takes 1 to 4 lengths".into()));
        }
        let mut o = crate::backend::npu::NpuOptions {
            seq: lens[0],
            ..Default::default()
        };
        for (d, s) in o.extra_seqs.iter_mut().zip(&lens[1..]) {
            *d = *s;
        }
        Ok(o)
    }
}

/// A `--plan` value (the typed parser clap calls).
pub fn plan_choice(s: &str) -> Result<PlanChoice, String> {
    s.parse()
        .map_err(|e: crate::compose::BadPlan| e.to_string())
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

fn kernel(s: &str) -> Result<CpuKernel, String> {
    CpuKernel::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = CpuKernel::all().into_iter().map(CpuKernel::name).collect();
        format!(
            "`{s}` is not available on this CPU (available: {})",
            names.join(", ")
        )
    })
}

/// Reads and parses a profile file.
pub fn load_profile(file: &std::path::Path) -> Result<hetero_partition::Profile, Fail> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Fail::Run(format!("cannot read profile {}: {e}", file.display())))?;
    // Strict: an unknown or misspelled field is an error naming it and its line.
    hetero_partition::Profile::from_json(&text).map_err(|e| {
        Fail::Run(format!(
            "profile {} is not a valid profile: {e}",
            file.display()
        ))
    })
}

/// How the model file is loaded and how much memory a command may take (every subcommand that
/// loads a model takes these).
#[derive(Args, Debug, Clone, Default)]
pub struct LoadArgs {
    /// Read the model into memory instead of mapping it: for files on network or removable
    /// storage, or that may be rewritten while the program runs (a mapped file that shrinks
    /// kills the process with SIGBUS on its next page fault; a read one cannot). Costs the
    /// file's size in memory and one read.
    #[arg(long)]
    pub no_mmap: bool,
    /// Memory the model (when read with --no-mmap) and the engine's buffers may take, in
    /// bytes or with a K/M/G/T suffix (powers of 1024), e.g. 512M or 4G. Default: the memory
    /// the machine has available when each is sized.
    #[arg(long, value_name = "BYTES", value_parser = byte_size)]
    pub mem_limit: Option<u64>,
    /// Where the CPU's prepared (repacked) weights are kept between runs, so the next start
    /// maps them instead of repacking: a directory, or `off` (prepare in memory every time).
    /// Default: $HETERO_CACHE/prepared, else ~/.cache/hetero/prepared. A stale or damaged file
    /// is rebuilt with a note; an unwritable directory means preparing in memory, with a note.
    #[arg(long, value_name = "DIR|off", env = "HETERO_PREPARED_CACHE")]
    pub prepared_cache: Option<PathBuf>,
}

impl LoadArgs {
    /// The prepared-weights cache setting (`--prepared-cache`).
    pub fn prepared_cache(&self) -> crate::prepared::CacheSetting {
        match &self.prepared_cache {
            Some(p) if p.as_os_str() == "off" => crate::prepared::CacheSetting::Off,
            Some(p) => crate::prepared::CacheSetting::Dir(p.clone()),
            None => crate::prepared::CacheSetting::default_dir(),
        }
    }

    /// The model loader's options.
    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            mmap: !self.no_mmap,
            memory_limit: self.mem_limit,
        }
    }

    /// The budget of the engine's buffers once `model` is loaded: `--mem-limit` less what the
    /// model holds in memory (the file, when it was read; a mapped file is page cache the
    /// kernel can reclaim), else the memory available now (which already excludes a read
    /// model).
    pub fn engine_budget(&self, model: &Model) -> MemoryBudget {
        match self.mem_limit {
            Some(limit) => {
                let held = if model.file().is_mapped() {
                    0
                } else {
                    model.file().bytes().len() as u64
                };
                MemoryBudget::with_limit(limit.saturating_sub(held))
            }
            None => MemoryBudget::available(),
        }
    }
}

/// A `--mem-limit` value: bytes, or a number with a K, M, G or T suffix (powers of 1024; an
/// optional `B` or `iB` after it).
pub fn byte_size(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a size (bytes, or a number with K, M, G or T, e.g. 4G)");
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let bytes = v * (1u64 << shift) as f64;
    // Below 2^64 (u64::MAX as f64 rounds up to 2^64, so the comparison is strict).
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{s}` is outside 1 byte .. 16 EiB"));
    }
    Ok(bytes as u64)
}

/// Loads the model as `load` says, with the path in the error.
pub fn load_model(path: &std::path::Path, load: &LoadArgs) -> Result<Model, Fail> {
    Model::load_with(path, &load.options()).map_err(Fail::run)
}

/// CPU time consumed by this process so far (all threads), from the OS.
pub fn cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the valid pointer we pass; the
    // clock id is a constant the platform defines.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::byte_size;

    #[test]
    fn mem_limit_sizes() {
        for (s, want) in [
            ("1000", 1000u64),
            ("512M", 512 << 20),
            ("4G", 4 << 30),
            ("4g", 4 << 30),
            ("4GiB", 4 << 30),
            ("4GB", 4 << 30),
            ("1.5G", 3 << 29),
            ("2K", 2048),
            ("1T", 1 << 40),
        ] {
            assert_eq!(byte_size(s), Ok(want), "{s}");
        }
        for s in [
            "", "G", "0", "0.5", "-1", "4X", "NaN", "inf", "1e30T", "4 G B",
        ] {
            assert!(byte_size(s).is_err(), "{s}");
        }
    }
}
