//! Validation of a [`Profile`] into the planner's form: curves per backend, phase and shape;
//! what each pair of backends shares.

use core::fmt;

use crate::curve::Curve;
use crate::profile::{
    Backend, BackendProfile, LatencyPoint, Order, Phase, Profile, DEFAULT_MIN_SPLIT_GAIN,
};

/// Most standard NPU row counts a profile may list.
pub const MAX_STANDARD: usize = 16;

/// Rows per CPU tile: CPU latency steps every 16 rows between measured points.
pub const CPU_ROW_TILE: u32 = 16;
/// Rows per NPU tile: NPU latency steps every 32 rows between measured points (HeteroInfer's
/// NPU-1).
pub const NPU_ROW_TILE: u32 = 32;

/// Bytes per weight element when a backend does not say (`weight_bytes`): FP16.
pub const DEFAULT_WEIGHT_BYTES: f64 = 2.0;

/// Why a profile was rejected.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileError {
    /// No backend entries.
    Empty,
    /// A backend name that is not `cpu`, `gpu` or `npu` (in `backend`, `shares_cores_with` or
    /// a pair).
    UnknownBackend(String),
    /// The same backend listed twice.
    DuplicateBackend(Backend),
    /// A backend without any latency point.
    NoPoints(Backend),
    /// A path without latency points (`path` indexes `paths`).
    EmptyPath {
        /// Backend of the path.
        backend: Backend,
        /// Index in its `paths`.
        path: usize,
    },
    /// Two paths of one backend serve the same phase (`None`: both phases, e.g. `points` and
    /// a path without `phase`).
    DuplicatePath {
        /// Backend of the paths.
        backend: Backend,
        /// The phase served twice.
        phase: Option<Phase>,
    },
    /// A latency that is NaN, infinite, zero or negative.
    BadLatency {
        /// Backend of the point.
        backend: Backend,
        /// Path of the point: `None` for the backend's `points`, else the index in `paths`.
        path: Option<usize>,
        /// Index in that path's points.
        point: usize,
    },
    /// A point with `k`, `n` or `m` equal to zero.
    ZeroShape {
        /// Backend of the point.
        backend: Backend,
        /// Path of the point: `None` for the backend's `points`, else the index in `paths`.
        path: Option<usize>,
        /// Index in that path's points.
        point: usize,
    },
    /// Two points of one path with the same `(k, n, m, order)`.
    DuplicatePoint {
        /// Backend of the points.
        backend: Backend,
        /// Path of the points: `None` for the backend's `points`, else the index in `paths`.
        path: Option<usize>,
        /// Index of the second one.
        point: usize,
    },
    /// `sync_us`, `copy_gbps`, `bandwidth_gbps`, `weight_bytes` or `graph_prepare_us` NaN,
    /// infinite or negative (bandwidths and `weight_bytes` must also be > 0).
    BadCost {
        /// Backend of the field.
        backend: Backend,
        /// Field name.
        field: &'static str,
    },
    /// A top-level field out of range: `min_split_gain` outside `[0, 1)`, `memory_gbps` not
    /// finite and > 0.
    BadField(&'static str),
    /// `standard_m` or `graph_prepare_us` given for a backend other than the NPU, a zero
    /// standard size, or more than [`MAX_STANDARD`] standard sizes.
    BadStandardShapes(Backend),
    /// An NPU with neither standard shapes nor a graph-preparation cost cannot run anything.
    NpuUnusable,
    /// `shares_cores_with` names the backend itself or a backend the profile does not have.
    BadSharing(Backend),
    /// A pair entry (`pair` indexes `pairs`) that names a backend twice or one the profile
    /// lacks, repeats an earlier pair, or has a field out of range (`split_us` finite and
    /// >= 0, `concurrent_gbps` finite and > 0, `overlap` within `[0, 1]`).
    BadPair {
        /// Index in `pairs`.
        pair: usize,
        /// What is wrong.
        why: &'static str,
    },
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |path: &Option<usize>| match path {
            None => String::from("points"),
            Some(i) => format!("paths[{i}]"),
        };
        match self {
            ProfileError::Empty => f.write_str("profile lists no backend"),
            ProfileError::UnknownBackend(n) => {
                write!(f, "unknown backend `{n}` (expected cpu, gpu or npu)")
            }
            ProfileError::DuplicateBackend(b) => write!(f, "backend {b} listed twice"),
            ProfileError::NoPoints(b) => write!(f, "backend {b} has no latency points"),
            ProfileError::EmptyPath { backend, path } => {
                write!(f, "backend {backend} paths[{path}] has no latency points")
            }
            ProfileError::DuplicatePath { backend, phase } => match phase {
                Some(p) => write!(f, "backend {backend} has two paths for {p}"),
                None => write!(f, "backend {backend} has two paths for both phases"),
            },
            ProfileError::BadLatency {
                backend,
                path,
                point,
            } => write!(
                f,
                "backend {backend} {}[{point}]: latency must be finite and > 0",
                at(path)
            ),
            ProfileError::ZeroShape {
                backend,
                path,
                point,
            } => write!(
                f,
                "backend {backend} {}[{point}]: k, n and m must be > 0",
                at(path)
            ),
            ProfileError::DuplicatePoint {
                backend,
                path,
                point,
            } => write!(
                f,
                "backend {backend} {}[{point}]: duplicate (k, n, m, order)",
                at(path)
            ),
            ProfileError::BadCost { backend, field } => write!(
                f,
                "backend {backend}: `{field}` must be finite and non-negative (bandwidths and \
                 weight_bytes > 0)"
            ),
            ProfileError::BadField(field) => write!(
                f,
                "`{field}` out of range (min_split_gain within [0, 1), memory_gbps > 0)"
            ),
            ProfileError::BadStandardShapes(b) => write!(
                f,
                "backend {b}: standard_m/graph_prepare_us only for npu, sizes > 0, at most {MAX_STANDARD}"
            ),
            ProfileError::NpuUnusable => {
                f.write_str("npu has neither standard shapes nor a graph-preparation cost")
            }
            ProfileError::BadSharing(b) => write!(
                f,
                "backend {b}: shares_cores_with must name another backend of the profile"
            ),
            ProfileError::BadPair { pair, why } => write!(f, "pairs[{pair}]: {why}"),
        }
    }
}

impl std::error::Error for ProfileError {}

/// One data path of a backend, validated.
#[derive(Clone, Debug)]
pub(crate) struct PathModel {
    pub name: String,
    pub curves: Vec<Curve>,
}

/// A validated backend.
#[derive(Clone, Debug)]
pub(crate) struct BackendModel {
    pub paths: Vec<PathModel>,
    /// The path each phase uses (index in `paths`), by [`Phase::index`].
    pub phase_path: [Option<usize>; 2],
    pub sync_us: f64,
    /// µs per byte copied (0: zero copy).
    pub copy_us_per_byte: f64,
    pub bandwidth_gbps: Option<f64>,
    pub weight_bytes: f64,
    pub shares_cores_with: Option<Backend>,
    /// Sorted, deduplicated (NPU only).
    pub standard_m: Vec<u32>,
    pub prepare_us: Option<f64>,
}

impl BackendModel {
    /// The curves of the path `phase` uses.
    pub(crate) fn curves(&self, phase: Phase) -> Option<&[Curve]> {
        self.phase_path[phase.index()].map(|i| self.paths[i].curves.as_slice())
    }

    /// The curve for `(k, n, order)` in `phase`: an exact shape if measured, otherwise the
    /// nearest measured shape by `|ln(k/k0)| + |ln(n/n0)|` (first wins ties). Returns the curve
    /// and the factor `(k·n)/(k0·n0)` that rescales its latencies to the asked shape
    /// (HeteroInfer's NPU-3: efficiency depends on shape, taken from the nearest measured shape).
    pub(crate) fn curve(
        &self,
        phase: Phase,
        k: u32,
        n: u32,
        order: Order,
    ) -> Option<(&Curve, f64)> {
        let curves = self.curves(phase)?;
        let same = |c: &&Curve| c.order == order;
        if let Some(c) = curves.iter().filter(same).find(|c| c.k == k && c.n == n) {
            return Some((c, 1.0));
        }
        let mut best: Option<(&Curve, f64)> = None;
        for c in curves.iter().filter(same) {
            let d = (k as f64 / c.k as f64).ln().abs() + (n as f64 / c.n as f64).ln().abs();
            if best.is_none_or(|(_, bd)| d < bd) {
                best = Some((c, d));
            }
        }
        best.map(|(c, _)| (c, (k as f64 * n as f64) / (c.k as f64 * c.n as f64)))
    }
}

/// What two backends share when they split one op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PairModel {
    pub split_us: f64,
    /// Fraction of the shorter side overlapping the longer (1: concurrent, 0: serialized).
    pub overlap: f64,
    /// µs per byte both stream together (0: no shared-bus term).
    pub bus_us_per_byte: f64,
}

/// Index of the unordered pair `{a, b}` (`a != b`): cpu–gpu 0, cpu–npu 1, gpu–npu 2.
pub(crate) fn pair_index(a: Backend, b: Backend) -> usize {
    a.index() + b.index() - 1
}

/// A profile that passed [`Profile::check`]: every latency finite and positive, every cost
/// finite and non-negative, curves sorted, pairs resolved. Build once, plan many times.
#[derive(Clone, Debug)]
pub struct CheckedProfile {
    pub(crate) backends: [Option<BackendModel>; 3],
    pub(crate) pairs: [PairModel; 3],
    pub(crate) min_split_gain: f64,
}

fn finite_nonneg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
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
        let gain = profile.min_split_gain.unwrap_or(DEFAULT_MIN_SPLIT_GAIN);
        if !(gain.is_finite() && (0.0..1.0).contains(&gain)) {
            return Err(ProfileError::BadField("min_split_gain"));
        }
        if profile.memory_gbps.is_some_and(|g| !positive(g)) {
            return Err(ProfileError::BadField("memory_gbps"));
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
        for b in Backend::ALL {
            if let Some(s) = backends[b.index()]
                .as_ref()
                .and_then(|m| m.shares_cores_with)
            {
                if s == b || backends[s.index()].is_none() {
                    return Err(ProfileError::BadSharing(b));
                }
            }
        }
        let pairs = check_pairs(profile, &backends)?;
        Ok(CheckedProfile {
            backends,
            pairs,
            min_split_gain: gain,
        })
    }

    /// Whether the profile has this backend (in any phase).
    pub fn has(&self, b: Backend) -> bool {
        self.backends[b.index()].is_some()
    }

    /// Whether this backend has a path for `phase`.
    pub fn has_phase(&self, b: Backend, phase: Phase) -> bool {
        self.model(b).is_some_and(|m| m.curves(phase).is_some())
    }

    /// The name of the path `b` uses in `phase` (empty for the unnamed `points` path).
    pub fn path_name(&self, b: Backend, phase: Phase) -> Option<&str> {
        let m = self.model(b)?;
        m.phase_path[phase.index()].map(|i| m.paths[i].name.as_str())
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

    /// A backend's solo memory bandwidth, GB/s.
    pub fn bandwidth_gbps(&self, b: Backend) -> Option<f64> {
        self.backends[b.index()]
            .as_ref()
            .and_then(|m| m.bandwidth_gbps)
    }

    /// The hysteresis: the least fraction of the best single backend's time a split must save.
    pub fn min_split_gain(&self) -> f64 {
        self.min_split_gain
    }

    /// Sets the hysteresis (`gain` within `[0, 1)`; otherwise `BadField`).
    pub fn set_min_split_gain(&mut self, gain: f64) -> Result<(), ProfileError> {
        if !(gain.is_finite() && (0.0..1.0).contains(&gain)) {
            return Err(ProfileError::BadField("min_split_gain"));
        }
        self.min_split_gain = gain;
        Ok(())
    }

    /// For two distinct backends of the profile: the fixed cost of a split between them (µs),
    /// the fraction of the shorter side that overlaps the longer, and the bandwidth they stream
    /// at together (GB/s; `None`: no shared-bus term).
    pub fn pair(&self, a: Backend, b: Backend) -> Option<(f64, f64, Option<f64>)> {
        if a == b || !self.has(a) || !self.has(b) {
            return None;
        }
        let p = self.pairs[pair_index(a, b)];
        let gbps = (p.bus_us_per_byte > 0.0).then(|| 1.0 / (p.bus_us_per_byte * 1e3));
        Some((p.split_us, p.overlap, gbps))
    }

    pub(crate) fn model(&self, b: Backend) -> Option<&BackendModel> {
        self.backends[b.index()].as_ref()
    }
}

fn check_pairs(
    profile: &Profile,
    backends: &[Option<BackendModel>; 3],
) -> Result<[PairModel; 3], ProfileError> {
    let model = |b: Backend| backends[b.index()].as_ref();
    // Defaults: serialized when one runs on the other's cores, concurrent otherwise; the bus
    // roofline from the solo bandwidths capped by memory_gbps (default: the faster solo one).
    let mut pairs = [PairModel {
        split_us: 0.0,
        overlap: 1.0,
        bus_us_per_byte: 0.0,
    }; 3];
    for (a, b) in [
        (Backend::Cpu, Backend::Gpu),
        (Backend::Cpu, Backend::Npu),
        (Backend::Gpu, Backend::Npu),
    ] {
        let (Some(ma), Some(mb)) = (model(a), model(b)) else {
            continue;
        };
        let p = &mut pairs[pair_index(a, b)];
        if ma.shares_cores_with == Some(b) || mb.shares_cores_with == Some(a) {
            p.overlap = 0.0;
        }
        let solo = ma.bandwidth_gbps.zip(mb.bandwidth_gbps);
        let cap = profile.memory_gbps.or(solo.map(|(x, y)| x.max(y)));
        let gbps = match (solo, cap) {
            (Some((x, y)), Some(c)) => Some((x + y).min(c)),
            (None, c) => c,
            (Some(_), None) => None,
        };
        if let Some(g) = gbps {
            p.bus_us_per_byte = 1.0 / (g * 1e3);
        }
    }
    let mut seen = [false; 3];
    for (i, pp) in profile.pairs.iter().enumerate() {
        let bad = |why| ProfileError::BadPair { pair: i, why };
        let mut names = [Backend::Cpu; 2];
        for (slot, name) in names.iter_mut().zip(&pp.backends) {
            *slot = Backend::from_name(name)
                .ok_or_else(|| ProfileError::UnknownBackend(name.clone()))?;
        }
        let [a, b] = names;
        if a == b {
            return Err(bad("names one backend twice"));
        }
        if model(a).is_none() || model(b).is_none() {
            return Err(bad("names a backend the profile does not have"));
        }
        let j = pair_index(a, b);
        if std::mem::replace(&mut seen[j], true) {
            return Err(bad("repeats an earlier pair"));
        }
        if !finite_nonneg(pp.split_us) {
            return Err(bad("split_us must be finite and >= 0"));
        }
        let p = &mut pairs[j];
        p.split_us = pp.split_us;
        if let Some(g) = pp.concurrent_gbps {
            if !positive(g) {
                return Err(bad("concurrent_gbps must be finite and > 0"));
            }
            p.bus_us_per_byte = 1.0 / (g * 1e3);
        }
        if let Some(o) = pp.overlap {
            if !(0.0..=1.0).contains(&o) {
                return Err(bad("overlap must be within [0, 1]"));
            }
            p.overlap = o;
        }
    }
    Ok(pairs)
}

fn check_backend(b: Backend, bp: &BackendProfile) -> Result<BackendModel, ProfileError> {
    let bad = |field| ProfileError::BadCost { backend: b, field };
    if !finite_nonneg(bp.sync_us) {
        return Err(bad("sync_us"));
    }
    let copy_us_per_byte = match bp.copy_gbps {
        None => 0.0,
        // GB/s = 1e3 bytes per µs.
        Some(g) if positive(g) => 1.0 / (g * 1e3),
        Some(_) => return Err(bad("copy_gbps")),
    };
    if bp.bandwidth_gbps.is_some_and(|g| !positive(g)) {
        return Err(bad("bandwidth_gbps"));
    }
    if bp.weight_bytes.is_some_and(|w| !positive(w)) {
        return Err(bad("weight_bytes"));
    }
    if bp.graph_prepare_us.is_some_and(|p| !finite_nonneg(p)) {
        return Err(bad("graph_prepare_us"));
    }
    let shares_cores_with = match &bp.shares_cores_with {
        None => None,
        Some(name) => Some(
            Backend::from_name(name).ok_or_else(|| ProfileError::UnknownBackend(name.clone()))?,
        ),
    };
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
    let tile = match b {
        Backend::Cpu => CPU_ROW_TILE,
        Backend::Gpu => 1,
        Backend::Npu => NPU_ROW_TILE,
    };
    // The unnamed `points` path serves every phase without a path of its own.
    type Source<'a> = (Option<usize>, &'a str, Option<Phase>, &'a [LatencyPoint]);
    let mut sources: Vec<Source<'_>> = Vec::new();
    if !bp.points.is_empty() {
        sources.push((None, "", None, &bp.points));
    }
    for (i, p) in bp.paths.iter().enumerate() {
        if p.points.is_empty() {
            return Err(ProfileError::EmptyPath {
                backend: b,
                path: i,
            });
        }
        sources.push((Some(i), &p.name, p.phase, &p.points));
    }
    if sources.is_empty() {
        return Err(ProfileError::NoPoints(b));
    }
    let mut paths = Vec::with_capacity(sources.len());
    let mut both: Option<usize> = None;
    let mut phase_path: [Option<usize>; 2] = [None, None];
    for (idx, (path, name, phase, points)) in sources.into_iter().enumerate() {
        let slot = match phase {
            None => &mut both,
            Some(p) => &mut phase_path[p.index()],
        };
        if slot.replace(idx).is_some() {
            return Err(ProfileError::DuplicatePath { backend: b, phase });
        }
        paths.push(PathModel {
            name: name.to_string(),
            curves: check_points(b, path, points, npu, tile, &standard_m)?,
        });
    }
    for p in &mut phase_path {
        if p.is_none() {
            *p = both;
        }
    }
    Ok(BackendModel {
        paths,
        phase_path,
        sync_us: bp.sync_us,
        copy_us_per_byte,
        bandwidth_gbps: bp.bandwidth_gbps,
        weight_bytes: bp.weight_bytes.unwrap_or(DEFAULT_WEIGHT_BYTES),
        shares_cores_with,
        standard_m,
        prepare_us: bp.graph_prepare_us,
    })
}

/// Groups one path's points into curves by `(k, n, order)`.
fn check_points(
    b: Backend,
    path: Option<usize>,
    points: &[LatencyPoint],
    npu: bool,
    tile: u32,
    standard_m: &[u32],
) -> Result<Vec<Curve>, ProfileError> {
    type Group = ((u32, u32, Order), Vec<(u32, f64)>);
    let mut groups: Vec<Group> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        if p.k == 0 || p.n == 0 || p.m == 0 {
            return Err(ProfileError::ZeroShape {
                backend: b,
                path,
                point: i,
            });
        }
        if !positive(p.us) {
            return Err(ProfileError::BadLatency {
                backend: b,
                path,
                point: i,
            });
        }
        // CPU and GPU have one order; ignore the field there.
        let order = if npu { p.order } else { Order::ActivationFirst };
        let key = (p.k, p.n, order);
        let j = match groups.iter().position(|g| g.0 == key) {
            Some(j) => j,
            None => {
                groups.push((key, Vec::new()));
                groups.len() - 1
            }
        };
        if groups[j].1.iter().any(|q| q.0 == p.m) {
            return Err(ProfileError::DuplicatePoint {
                backend: b,
                path,
                point: i,
            });
        }
        groups[j].1.push((p.m, p.us));
    }
    Ok(groups
        .into_iter()
        .map(|((k, n, order), pts)| Curve::new(k, n, order, tile, pts, standard_m))
        .collect())
}
