//! The profile (plain serde data a user writes or `engine-min` measures) and its validated form.

use core::fmt;
use serde::{Deserialize, Serialize};

/// One of the three processors of the SoC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The CPU (SME / vector kernels), computing in 16-row x 64-column tiles.
    Cpu,
    /// The GPU (OpenCL), latency linear in the number of rows.
    Gpu,
    /// The NPU (QNN HTP), static graphs at standard row counts.
    Npu,
}

impl Backend {
    /// All three backends, in index order.
    pub const ALL: [Backend; 3] = [Backend::Cpu, Backend::Gpu, Backend::Npu];

    /// Lower-case name as written in a profile: `cpu`, `gpu`, `npu`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Gpu => "gpu",
            Backend::Npu => "npu",
        }
    }

    /// Parses a name written in a profile (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name.trim()))
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Operand order of an NPU matmul (HeteroInfer's NPU-2): the NPU may run `A·W` or the
/// transposed product `Wᵀ·Aᵀ`, and the two can differ a lot in speed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// `out[M,N] = act[M,K] · w[K,N]`.
    #[default]
    ActivationFirst,
    /// `outᵀ[N,M] = wᵀ[N,K] · actᵀ[K,M]`.
    WeightFirst,
}

impl Order {
    /// Both orders, `ActivationFirst` first.
    pub const ALL: [Order; 2] = [Order::ActivationFirst, Order::WeightFirst];
}

/// One measured latency: a matmul with weight `[k, n]` and `m` activation rows took `us`
/// microseconds on the backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyPoint {
    /// Reduction dimension (weight rows).
    pub k: u32,
    /// Output columns (weight columns).
    pub n: u32,
    /// Activation rows (sequence length, or draft tokens in decode).
    pub m: u32,
    /// Measured latency, microseconds (finite, > 0).
    pub us: f64,
    /// Operand order (only meaningful on the NPU; default `activation_first`).
    #[serde(default)]
    pub order: Order,
}

/// Everything measured for one backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendProfile {
    /// `cpu`, `gpu` or `npu`; anything else is [`ProfileError::UnknownBackend`].
    pub backend: String,
    /// Latency points; at least one.
    pub points: Vec<LatencyPoint>,
    /// Cost of synchronising with this backend's completion, paid once by every plan that uses
    /// it (0 for the backend the engine's thread drives; tens of µs for an offloaded NPU).
    #[serde(default)]
    pub sync_us: f64,
    /// Bandwidth at which this backend's inputs and outputs must be copied into / out of its own
    /// buffers, GB/s (`None` or absent: zero-copy on unified memory).
    #[serde(default)]
    pub copy_gbps: Option<f64>,
    /// Achievable memory bandwidth, GB/s. Recorded for reports; the solver uses latencies only.
    #[serde(default)]
    pub bandwidth_gbps: Option<f64>,
    /// NPU only: the row counts it holds prepared static graphs for.
    #[serde(default)]
    pub standard_m: Vec<u32>,
    /// NPU only: cost of preparing (finalizing) a graph for a new row count, µs. Absent: online
    /// preparation is not offered.
    #[serde(default)]
    pub graph_prepare_us: Option<f64>,
}

/// A device profile: one entry per backend present. Plain data; validate it once with
/// [`Profile::check`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Free-form device name.
    #[serde(default)]
    pub device: String,
    /// One entry per backend present (each backend at most once).
    pub backends: Vec<BackendProfile>,
}

/// Why a profile was rejected.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileError {
    /// No backend entries.
    Empty,
    /// A backend name that is not `cpu`, `gpu` or `npu`.
    UnknownBackend(String),
    /// The same backend listed twice.
    DuplicateBackend(Backend),
    /// A backend without latency points.
    NoPoints(Backend),
    /// A latency that is NaN, infinite, zero or negative (`point` indexes `points`).
    BadLatency {
        /// Backend of the point.
        backend: Backend,
        /// Index in its `points`.
        point: usize,
    },
    /// A point with `k`, `n` or `m` equal to zero.
    ZeroShape {
        /// Backend of the point.
        backend: Backend,
        /// Index in its `points`.
        point: usize,
    },
    /// Two points with the same `(k, n, m, order)`.
    DuplicatePoint {
        /// Backend of the points.
        backend: Backend,
        /// Index of the second one.
        point: usize,
    },
    /// `sync_us`, `copy_gbps`, `bandwidth_gbps` or `graph_prepare_us` NaN, infinite or negative
    /// (bandwidths must also be > 0).
    BadCost {
        /// Backend of the field.
        backend: Backend,
        /// Field name.
        field: &'static str,
    },
    /// `standard_m` or `graph_prepare_us` given for a backend other than the NPU, a zero
    /// standard size, or more than [`MAX_STANDARD`] standard sizes.
    BadStandardShapes(Backend),
    /// An NPU with neither standard shapes nor a graph-preparation cost cannot run anything.
    NpuUnusable,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Empty => f.write_str("profile lists no backend"),
            ProfileError::UnknownBackend(n) => {
                write!(f, "unknown backend `{n}` (expected cpu, gpu or npu)")
            }
            ProfileError::DuplicateBackend(b) => write!(f, "backend {b} listed twice"),
            ProfileError::NoPoints(b) => write!(f, "backend {b} has no latency points"),
            ProfileError::BadLatency { backend, point } => write!(
                f,
                "backend {backend} point {point}: latency must be finite and > 0"
            ),
            ProfileError::ZeroShape { backend, point } => {
                write!(f, "backend {backend} point {point}: k, n and m must be > 0")
            }
            ProfileError::DuplicatePoint { backend, point } => {
                write!(f, "backend {backend} point {point}: duplicate (k, n, m, order)")
            }
            ProfileError::BadCost { backend, field } => {
                write!(f, "backend {backend}: `{field}` must be finite and non-negative")
            }
            ProfileError::BadStandardShapes(b) => write!(
                f,
                "backend {b}: standard_m/graph_prepare_us only for npu, sizes > 0, at most {MAX_STANDARD}"
            ),
            ProfileError::NpuUnusable => {
                f.write_str("npu has neither standard shapes nor a graph-preparation cost")
            }
        }
    }
}

impl std::error::Error for ProfileError {}

/// Most standard NPU row counts a profile may list.
pub const MAX_STANDARD: usize = 16;

/// Latency curve of one backend for one measured weight shape (and order), sorted by `m`,
/// made non-decreasing by a running maximum (measurement noise never makes more rows faster).
#[derive(Clone, Debug)]
pub(crate) struct Curve {
    pub k: u32,
    pub n: u32,
    pub order: Order,
    pub m: Vec<u32>,
    pub us: Vec<f64>,
    /// NPU curves: latency at each standard shape (rounded up to 32 rows), precomputed.
    pub std_us: Vec<f64>,
    /// `slope[i]`: µs per row between points `i - 1` and `i` (`slope[0]` unused).
    pub slope: Vec<f64>,
    /// `row_min[i]`: the least `us[j] / m[j]` over `j <= i`.
    pub row_min: Vec<f64>,
    /// `us[last] / m[last]`: the slope beyond the last point.
    pub tail: f64,
}

impl Curve {
    /// Piecewise-linear in `m` between points, flat below the first, proportional to `m`
    /// beyond the last (compute scales with rows at large M).
    pub(crate) fn at(&self, m: u32) -> f64 {
        let ms = &self.m;
        let last = ms.len() - 1;
        if m <= ms[0] {
            return self.us[0];
        }
        if m >= ms[last] {
            return self.tail * m as f64;
        }
        // First index with ms[i] >= m; i >= 1 here.
        let i = ms.partition_point(|&x| x < m);
        self.us[i - 1] + self.slope[i] * (m - ms[i - 1]) as f64
    }

    /// A lower bound of `at(q) / q` over `1 <= q <= m`: on a linear piece `a + b·q` the ratio
    /// is monotone in `q`, so its least value is at a point or at `m` (beyond the last point
    /// the ratio is constant).
    pub(crate) fn per_row_lb(&self, m: u32, inv_m: f64) -> f64 {
        let k = self.m.partition_point(|&x| x <= m);
        let at_m = self.at(m) * inv_m;
        if k == 0 {
            at_m
        } else {
            at_m.min(self.row_min[k - 1])
        }
    }
}

/// A validated backend.
#[derive(Clone, Debug)]
pub(crate) struct BackendModel {
    pub curves: Vec<Curve>,
    pub sync_us: f64,
    /// µs per byte copied (0: zero copy).
    pub copy_us_per_byte: f64,
    pub bandwidth_gbps: Option<f64>,
    /// Sorted, deduplicated (NPU only).
    pub standard_m: Vec<u32>,
    /// `1 / standard_m[i]`.
    pub inv_standard_m: Vec<f64>,
    pub prepare_us: Option<f64>,
}

impl BackendModel {
    /// The curve for `(k, n, order)`: an exact shape if measured, otherwise the nearest measured
    /// shape by `|ln(k/k0)| + |ln(n/n0)|` (first wins ties). Returns the curve and the factor
    /// `(k·n)/(k0·n0)` that rescales its latencies to the asked shape (HeteroInfer's NPU-3:
    /// efficiency depends on shape, taken from the nearest measured shape).
    pub(crate) fn curve(&self, k: u32, n: u32, order: Order) -> Option<(&Curve, f64)> {
        let same = |c: &&Curve| c.order == order;
        if let Some(c) = self
            .curves
            .iter()
            .filter(same)
            .find(|c| c.k == k && c.n == n)
        {
            return Some((c, 1.0));
        }
        let mut best: Option<(&Curve, f64)> = None;
        for c in self.curves.iter().filter(same) {
            let d = (k as f64 / c.k as f64).ln().abs() + (n as f64 / c.n as f64).ln().abs();
            if best.is_none_or(|(_, bd)| d < bd) {
                best = Some((c, d));
            }
        }
        best.map(|(c, _)| (c, (k as f64 * n as f64) / (c.k as f64 * c.n as f64)))
    }
}

/// A profile that passed [`Profile::check`]: every latency finite and positive, every cost
/// finite and non-negative, curves sorted. Build once, plan many times.
#[derive(Clone, Debug)]
pub struct CheckedProfile {
    pub(crate) backends: [Option<BackendModel>; 3],
}

fn finite_nonneg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

impl Profile {
    /// Validates the profile into a [`CheckedProfile`].
    pub fn check(&self) -> Result<CheckedProfile, ProfileError> {
        CheckedProfile::new(self)
    }
}

impl CheckedProfile {
    /// Validates `profile`; see [`ProfileError`] for what is rejected.
    pub fn new(profile: &Profile) -> Result<CheckedProfile, ProfileError> {
        if profile.backends.is_empty() {
            return Err(ProfileError::Empty);
        }
        let mut backends: [Option<BackendModel>; 3] = [None, None, None];
        for bp in &profile.backends {
            let b = Backend::from_name(&bp.backend)
                .ok_or_else(|| ProfileError::UnknownBackend(bp.backend.clone()))?;
            if backends[b.index()].is_some() {
                return Err(ProfileError::DuplicateBackend(b));
            }
            backends[b.index()] = Some(check_backend(b, bp)?);
        }
        Ok(CheckedProfile { backends })
    }

    /// Whether the profile has this backend.
    pub fn has(&self, b: Backend) -> bool {
        self.backends[b.index()].is_some()
    }

    /// The NPU's standard row counts, sorted (empty without an NPU).
    pub fn standard_m(&self) -> &[u32] {
        self.backends[Backend::Npu.index()]
            .as_ref()
            .map_or(&[], |m| &m.standard_m)
    }

    /// The NPU's graph-preparation cost, µs, if online preparation is offered.
    pub fn graph_prepare_us(&self, b: Backend) -> Option<f64> {
        self.backends[b.index()].as_ref().and_then(|m| m.prepare_us)
    }

    /// A backend's synchronisation cost, µs.
    pub fn sync_us(&self, b: Backend) -> Option<f64> {
        self.backends[b.index()].as_ref().map(|m| m.sync_us)
    }

    /// A backend's recorded memory bandwidth, GB/s.
    pub fn bandwidth_gbps(&self, b: Backend) -> Option<f64> {
        self.backends[b.index()]
            .as_ref()
            .and_then(|m| m.bandwidth_gbps)
    }

    pub(crate) fn model(&self, b: Backend) -> Option<&BackendModel> {
        self.backends[b.index()].as_ref()
    }
}

fn check_backend(b: Backend, bp: &BackendProfile) -> Result<BackendModel, ProfileError> {
    if bp.points.is_empty() {
        return Err(ProfileError::NoPoints(b));
    }
    let bad = |field| ProfileError::BadCost { backend: b, field };
    if !finite_nonneg(bp.sync_us) {
        return Err(bad("sync_us"));
    }
    let copy_us_per_byte = match bp.copy_gbps {
        None => 0.0,
        // GB/s = 1e3 bytes per µs.
        Some(g) if g.is_finite() && g > 0.0 => 1.0 / (g * 1e3),
        Some(_) => return Err(bad("copy_gbps")),
    };
    if let Some(g) = bp.bandwidth_gbps {
        if !(g.is_finite() && g > 0.0) {
            return Err(bad("bandwidth_gbps"));
        }
    }
    if let Some(p) = bp.graph_prepare_us {
        if !finite_nonneg(p) {
            return Err(bad("graph_prepare_us"));
        }
    }
    let npu = b == Backend::Npu;
    if !npu && (!bp.standard_m.is_empty() || bp.graph_prepare_us.is_some()) {
        return Err(ProfileError::BadStandardShapes(b));
    }
    let mut standard_m = bp.standard_m.clone();
    standard_m.sort_unstable();
    standard_m.dedup();
    if standard_m.len() > MAX_STANDARD || standard_m.first() == Some(&0) {
        return Err(ProfileError::BadStandardShapes(b));
    }
    if npu && standard_m.is_empty() && bp.graph_prepare_us.is_none() {
        return Err(ProfileError::NpuUnusable);
    }
    let mut curves: Vec<Curve> = Vec::new();
    for (i, p) in bp.points.iter().enumerate() {
        if p.k == 0 || p.n == 0 || p.m == 0 {
            return Err(ProfileError::ZeroShape {
                backend: b,
                point: i,
            });
        }
        if !(p.us.is_finite() && p.us > 0.0) {
            return Err(ProfileError::BadLatency {
                backend: b,
                point: i,
            });
        }
        // CPU and GPU have one order; ignore the field there.
        let order = if npu { p.order } else { Order::ActivationFirst };
        let j = match curves
            .iter()
            .position(|c| c.k == p.k && c.n == p.n && c.order == order)
        {
            Some(j) => j,
            None => {
                curves.push(Curve {
                    k: p.k,
                    n: p.n,
                    order,
                    m: Vec::new(),
                    us: Vec::new(),
                    std_us: Vec::new(),
                    slope: Vec::new(),
                    row_min: Vec::new(),
                    tail: 0.0,
                });
                curves.len() - 1
            }
        };
        let c = &mut curves[j];
        match c.m.binary_search(&p.m) {
            Ok(_) => {
                return Err(ProfileError::DuplicatePoint {
                    backend: b,
                    point: i,
                })
            }
            Err(pos) => {
                c.m.insert(pos, p.m);
                c.us.insert(pos, p.us);
            }
        }
    }
    for c in &mut curves {
        for i in 1..c.us.len() {
            if c.us[i] < c.us[i - 1] {
                c.us[i] = c.us[i - 1];
            }
        }
        let last = c.m.len() - 1;
        c.tail = c.us[last] / c.m[last] as f64;
        c.slope = (0..c.m.len())
            .map(|i| {
                if i == 0 {
                    0.0
                } else {
                    (c.us[i] - c.us[i - 1]) / (c.m[i] - c.m[i - 1]) as f64
                }
            })
            .collect();
        let mut least = f64::INFINITY;
        c.row_min =
            c.m.iter()
                .zip(&c.us)
                .map(|(&mi, &t)| {
                    least = least.min(t / mi as f64);
                    least
                })
                .collect();
        let at = |g: u32| c.at(g.div_ceil(32).saturating_mul(32));
        c.std_us = standard_m.iter().map(|&g| at(g)).collect();
    }
    Ok(BackendModel {
        curves,
        sync_us: bp.sync_us,
        copy_us_per_byte,
        bandwidth_gbps: bp.bandwidth_gbps,
        inv_standard_m: standard_m.iter().map(|&s| 1.0 / s as f64).collect(),
        standard_m,
        prepare_us: bp.graph_prepare_us,
    })
}
