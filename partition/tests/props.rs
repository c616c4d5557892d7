//! Property tests: solver = brute force (with phases, shared cores, split costs, the shared bus
//! and hysteresis), determinism, monotonicity, table = solver, exact tiling, allocator bounds.

mod common;
use common::*;
use hetero_partition::*;
use proptest::prelude::*;

/// Deterministic generator for random profiles (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn f(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Log-uniform in `[lo, hi)`: bandwidths over decades, so the shared-bus term sometimes
    /// dominates, sometimes crosses the compute times, sometimes vanishes.
    fn log(&mut self, lo: f64, hi: f64) -> f64 {
        (self.f(lo.ln(), hi.ln())).exp()
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Random latency points for one curve set: 1-2 measured shapes (or the shared one), 1-6 points
/// per curve (not necessarily monotone), both NPU orders half the time.
fn random_points(r: &mut Rng, npu: bool, shared: Option<(u32, u32)>) -> Vec<LatencyPoint> {
    let mut points = Vec::new();
    let shapes = if shared.is_some() { 1 } else { 1 + r.below(2) };
    let (floor, rate) = (r.f(1.0, 100.0), r.f(0.1, 5.0));
    for _ in 0..shapes {
        let (k, n) = shared.unwrap_or_else(|| (8 + r.below(500) as u32, 8 + r.below(500) as u32));
        let orders: &[Order] = if npu && r.chance(50) {
            &[Order::ActivationFirst, Order::WeightFirst]
        } else {
            &[Order::ActivationFirst]
        };
        for &o in orders {
            let pts = 1 + r.below(6);
            let mut ms: Vec<u32> = (0..pts).map(|_| 1 + r.below(400) as u32).collect();
            ms.sort_unstable();
            ms.dedup();
            for m in ms {
                let us = if shared.is_some() {
                    (floor + rate * m as f64) * r.f(0.8, 1.2)
                } else {
                    r.f(1.0, 1000.0)
                };
                points.push(pto(k, n, m, us, o));
            }
        }
    }
    points
}

/// A random valid profile on small shapes: any non-empty subset of backends; each backend with
/// one path for both phases, or its own prefill and/or decode paths; random sync, copy,
/// preparation costs, solo bandwidths, weight sizes, shared cores, pair entries (split cost,
/// concurrent bandwidth, overlap), bus bandwidth and hysteresis.
fn random_profile(seed: u64) -> Profile {
    let mut r = Rng(seed);
    let mut backends = Vec::new();
    // Half the profiles share one measured shape and use latencies `floor + rate * m` of
    // comparable size across backends, so that two-backend splits often win and every
    // family of the solver is exercised; the rest are unrelated random curves.
    let shared = r
        .chance(50)
        .then(|| (8 + r.below(500) as u32, 8 + r.below(500) as u32));
    let mask = 1 + r.below(7);
    let names: Vec<&str> = [(1, "cpu"), (2, "gpu"), (4, "npu")]
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|&(_, name)| name)
        .collect();
    for &name in &names {
        let npu = name == "npu";
        let mut bp = backend(name, Vec::new());
        match r.below(4) {
            0 | 1 => bp.points = random_points(&mut r, npu, shared),
            2 => {
                for (phase, path) in [(Phase::Prefill, "graphs"), (Phase::Decode, "gemv")] {
                    bp.paths.push(PathProfile {
                        name: path.into(),
                        phase: Some(phase),
                        points: random_points(&mut r, npu, shared),
                    });
                }
            }
            _ => {
                // A path for one phase; the other phase has the unnamed points or nothing.
                if r.chance(50) {
                    bp.points = random_points(&mut r, npu, shared);
                }
                let phase = if r.chance(50) {
                    Phase::Prefill
                } else {
                    Phase::Decode
                };
                bp.paths.push(PathProfile {
                    name: "only".into(),
                    phase: Some(phase),
                    points: random_points(&mut r, npu, shared),
                });
            }
        }
        bp.sync_us = if r.chance(30) { 0.0 } else { r.f(0.0, 50.0) };
        if r.chance(50) {
            bp.copy_gbps = Some(r.f(1.0, 100.0));
        }
        if r.chance(50) {
            bp.bandwidth_gbps = Some(r.log(0.05, 60.0));
        }
        if r.chance(50) {
            bp.weight_bytes = Some(r.f(0.3, 4.0));
        }
        if r.chance(25) {
            let others: Vec<&&str> = names.iter().filter(|&&o| o != name).collect();
            if !others.is_empty() {
                bp.shares_cores_with =
                    Some(others[r.below(others.len() as u64) as usize].to_string());
            }
        }
        if npu {
            let cands = [1, 16, 32, 48, 64, 100, 128, 256];
            bp.standard_m = cands.iter().copied().filter(|_| r.chance(40)).collect();
            if bp.standard_m.is_empty() || r.chance(50) {
                bp.graph_prepare_us = Some(r.f(0.0, 3000.0));
            }
        }
        backends.push(bp);
    }
    let mut pairs = Vec::new();
    for (i, &a) in names.iter().enumerate() {
        for &b in &names[i + 1..] {
            if r.chance(60) {
                pairs.push(PairProfile {
                    backends: [a.into(), b.into()],
                    split_us: if r.chance(50) { r.f(0.0, 80.0) } else { 0.0 },
                    concurrent_gbps: r.chance(50).then(|| r.log(0.05, 100.0)),
                    overlap: r.chance(50).then(|| r.f(0.0, 1.0)),
                });
            }
        }
    }
    Profile {
        device: "random".into(),
        backends,
        pairs,
        memory_gbps: r.chance(30).then(|| r.log(0.05, 100.0)),
        min_split_gain: if r.chance(30) {
            Some(0.0)
        } else {
            Some(r.f(0.0, 0.3))
        },
        ..Profile::default()
    }
}

/// Every candidate of the strategy space, enumerated exhaustively: the cheapest single-backend
/// total and the cheapest two-backend total.
fn brute_force(
    p: &CheckedProfile,
    phase: Phase,
    k: u32,
    n: u32,
    m: u32,
) -> (Option<f64>, Option<f64>) {
    let mut single: Option<f64> = None;
    let mut split: Option<f64> = None;
    let mut offer = |s: Split| {
        if let Ok(c) = p.cost_in(phase, k, n, m, &s) {
            if c.total_us.is_finite() {
                let best = if s.b.is_some() {
                    &mut split
                } else {
                    &mut single
                };
                *best = Some(best.map_or(c.total_us, |b: f64| b.min(c.total_us)));
            }
        }
    };
    let grid: Vec<u32> = (1..).map(|t| t * COL_TILE).take_while(|&c| c < n).collect();
    let std = p.standard_m().to_vec();
    // Every way the NPU can run all m rows alone.
    let mut npu_full = Vec::new();
    for o in Order::ALL {
        for &s in &std {
            npu_full.push(NpuExec {
                graph_m: s,
                chunks: m.div_ceil(s),
                online: false,
                order: o,
            });
        }
        npu_full.push(NpuExec {
            graph_m: m,
            chunks: 1,
            online: true,
            order: o,
        });
    }
    for b in [Backend::Cpu, Backend::Gpu] {
        offer(Split {
            a: b,
            b: None,
            rows: m,
            cols: n,
            npu: None,
        });
    }
    for &e in &npu_full {
        offer(Split {
            a: Backend::Npu,
            b: None,
            rows: m,
            cols: n,
            npu: Some(e),
        });
    }
    for x in [Backend::Cpu, Backend::Gpu] {
        for o in Order::ALL {
            for &s in &std {
                for j in 1..=m {
                    if j * s >= m {
                        break;
                    }
                    let e = NpuExec {
                        graph_m: s,
                        chunks: j,
                        online: false,
                        order: o,
                    };
                    let base = Split {
                        a: Backend::Npu,
                        b: Some(x),
                        rows: j * s,
                        cols: n,
                        npu: Some(e),
                    };
                    offer(base);
                    if j == 1 {
                        for &c in &grid {
                            offer(Split { cols: c, ..base });
                        }
                    }
                }
            }
        }
        for &e in &npu_full {
            for &c in &grid {
                offer(Split {
                    a: Backend::Npu,
                    b: Some(x),
                    rows: m,
                    cols: c,
                    npu: Some(e),
                });
            }
        }
    }
    for &c in &grid {
        offer(Split {
            a: Backend::Cpu,
            b: Some(Backend::Gpu),
            rows: m,
            cols: c,
            npu: None,
        });
    }
    (single, split)
}

fn phase_of(bit: bool) -> Phase {
    if bit {
        Phase::Decode
    } else {
        Phase::Prefill
    }
}

fn rel_le(a: f64, b: f64) -> bool {
    // The solver and brute force evaluate candidates with the same function, but the solver
    // locates crossings from affine fits, so floating-point ties can differ by a few ulps.
    a <= b + 1e-9 * b.abs().max(1.0)
}

fn check_tiling(plan: &OpPlan) {
    let (m, n) = (plan.m, plan.n);
    let pieces = plan.pieces();
    let mut area = 0u64;
    for (i, pc) in pieces.as_slice().iter().enumerate() {
        assert!(pc.rows.start < pc.rows.end && pc.rows.end <= m, "{plan:?}");
        assert!(pc.cols.start < pc.cols.end && pc.cols.end <= n, "{plan:?}");
        area += (pc.rows.len() * pc.cols.len()) as u64;
        for q in &pieces.as_slice()[..i] {
            let overlap = pc.rows.start < q.rows.end
                && q.rows.start < pc.rows.end
                && pc.cols.start < q.cols.end
                && q.cols.start < pc.cols.end;
            assert!(!overlap, "{plan:?}");
        }
    }
    assert_eq!(area, m as u64 * n as u64, "{plan:?}");
}

/// The profile with one backend's latencies and costs scaled by `f`.
fn scaled(prof: &Profile, which: usize, f: f64) -> Profile {
    let mut q = prof.clone();
    let b = &mut q.backends[which];
    for pt in b
        .points
        .iter_mut()
        .chain(b.paths.iter_mut().flat_map(|p| &mut p.points))
    {
        pt.us *= f;
    }
    b.sync_us *= f;
    if let Some(g) = b.graph_prepare_us.as_mut() {
        *g *= f;
    }
    q
}

/// The total the hysteresis rule picks from the brute force's two minima: the split when it is
/// below `(1 − gain)` times the best single backend. `None` when the two are too close to the
/// gate to tell (floating-point ties).
fn expected(single: Option<f64>, split: Option<f64>, gain: f64) -> Option<f64> {
    match (single, split) {
        (None, s) => s,
        (Some(one), None) => Some(one),
        (Some(one), Some(two)) => {
            let gate = one * (1.0 - gain);
            if (two - gate).abs() <= 1e-9 * gate.max(1.0) {
                None
            } else if two < gate {
                Some(two)
            } else {
                Some(one)
            }
        }
    }
}

/// 256 cases, or `PROPTEST_CASES` (for longer runs by hand).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn solver_matches_brute_force(seed in any::<u64>(), decode in any::<bool>(), k in 1u32..600,
                                  n in 1u32..2000, m in 1u32..300) {
        let p = random_profile(seed).check().unwrap();
        let phase = phase_of(decode);
        let (single, split) = brute_force(&p, phase, k, n, m);
        match plan_op_in(&p, phase, k, n, m) {
            Ok(plan) => {
                prop_assert!(single.is_some() || split.is_some(), "brute force found nothing");
                if let Some(want) = expected(single, split, p.min_split_gain()) {
                    prop_assert!(rel_le(plan.predicted_us(), want) && rel_le(want, plan.predicted_us()),
                        "solver {} want {} (single {single:?}, split {split:?}, gain {}) plan {:?}",
                        plan.predicted_us(), want, p.min_split_gain(), plan);
                }
                prop_assert_eq!(p.cost_in(phase, k, n, m, &plan.split).unwrap(), plan.cost);
                check_tiling(&plan);
            }
            Err(e) => prop_assert!(single.is_none() && split.is_none(),
                "solver failed {e:?}, brute force {single:?} {split:?}"),
        }
    }

    #[test]
    fn hysteresis_keeps_single_unless_split_gains_enough(seed in any::<u64>(), decode in any::<bool>(),
                                  k in 1u32..2048, n in 1u32..2048, m in 1u32..2048) {
        let p = random_profile(seed).check().unwrap();
        let phase = phase_of(decode);
        let Ok(plan) = plan_op_in(&p, phase, k, n, m) else { return Ok(()) };
        let best_single = Backend::ALL
            .into_iter()
            .filter_map(|b| plan_with(&p, phase, Policy::Single(b), k, n, m).ok())
            .map(|s| s.predicted_us())
            .fold(f64::INFINITY, f64::min);
        if plan.split.b.is_some() {
            // A split is planned only when it predicts at least min_split_gain less time.
            prop_assert!(plan.predicted_us() < best_single * (1.0 - p.min_split_gain()),
                "split {} vs best single {best_single} gain {}", plan.predicted_us(), p.min_split_gain());
        } else {
            prop_assert!(rel_le(plan.predicted_us(), best_single) && rel_le(best_single, plan.predicted_us()));
        }
    }

    #[test]
    fn deterministic(seed in any::<u64>(), k in 1u32..4096, n in 1u32..4096, m in 1u32..4096) {
        let prof = random_profile(seed);
        let a = plan_op(&prof.check().unwrap(), k, n, m);
        let b = plan_op(&prof.clone().check().unwrap(), k, n, m);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn faster_backend_never_worse(seed in any::<u64>(), decode in any::<bool>(), which in 0usize..3,
                                  f in 0.05f64..1.0, k in 1u32..2048, n in 1u32..2048, m in 1u32..2048) {
        let prof = random_profile(seed);
        let which = which % prof.backends.len();
        let phase = phase_of(decode);
        let slow = plan_op_in(&prof.check().unwrap(), phase, k, n, m);
        let fast = plan_op_in(&scaled(&prof, which, f).check().unwrap(), phase, k, n, m);
        if let (Ok(slow), Ok(fast)) = (slow, fast) {
            // Every candidate gets no slower, so the minima do not rise; the hysteresis may
            // trade a split for a single backend at most 1 / (1 − gain) slower.
            let g = prof.min_split_gain.unwrap_or(DEFAULT_MIN_SPLIT_GAIN);
            prop_assert!(rel_le(fast.predicted_us() * (1.0 - g), slow.predicted_us()), "{fast:?} vs {slow:?}");
        }
    }

    #[test]
    fn longer_sequence_never_faster(seed in any::<u64>(), decode in any::<bool>(), k in 1u32..2048,
                                    n in 1u32..2048, m in 1u32..2048) {
        let p = random_profile(seed).check().unwrap();
        let phase = phase_of(decode);
        if let (Ok(a), Ok(b)) = (plan_op_in(&p, phase, k, n, m), plan_op_in(&p, phase, k, n, m + 1)) {
            // The same bound as above: min(single, split) never falls with m.
            let g = p.min_split_gain();
            prop_assert!(rel_le(a.predicted_us() * (1.0 - g), b.predicted_us()), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn without_hysteresis_the_minimum_is_monotone(seed in any::<u64>(), decode in any::<bool>(),
                                    k in 1u32..2048, n in 1u32..2048, m in 1u32..2048) {
        let mut p = random_profile(seed).check().unwrap();
        p.set_min_split_gain(0.0).unwrap();
        let phase = phase_of(decode);
        if let (Ok(a), Ok(b)) = (plan_op_in(&p, phase, k, n, m), plan_op_in(&p, phase, k, n, m + 1)) {
            prop_assert!(rel_le(a.predicted_us(), b.predicted_us()), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn table_is_the_solver(seed in any::<u64>(), decode in any::<bool>(), k in 1u32..600, n in 1u32..600) {
        let p = random_profile(seed).check().unwrap();
        let phase = phase_of(decode);
        let shapes = [(k, n), (n, k)];
        if let Ok(t) = PlanTable::build_phase(&p, phase, Policy::Auto, &shapes, 64) {
            for (k, n) in shapes {
                for m in 1..=64 {
                    prop_assert_eq!(t.get(k, n, m).copied(), plan_op_in(&p, phase, k, n, m).ok());
                }
            }
        }
    }

    #[test]
    fn forced_plans_tile(seed in any::<u64>(), ratio in 0.0f64..=1.0, k in 1u32..2048, n in 1u32..2048, m in 1u32..2048) {
        let p = random_profile(seed).check().unwrap();
        for b in Backend::ALL {
            if let Ok(plan) = OpPlan::single(&p, b, k, n, m) {
                prop_assert_eq!(plan.split.b, None);
                check_tiling(&plan);
            }
            for other in [Backend::Cpu, Backend::Gpu] {
                if let Ok(plan) = OpPlan::npu_activation(&p, other, k, n, m) {
                    prop_assert!(plan.split.rows < m && plan.split.cols == n);
                    check_tiling(&plan);
                }
                if b != other {
                    if let Ok(plan) = OpPlan::weight_centric(&p, b, other, ratio, k, n, m) {
                        check_tiling(&plan);
                    }
                }
            }
        }
        if let Ok(plan) = OpPlan::cpu_gpu_columns(&p, k, n, m) {
            prop_assert!(plan.split.cols % COL_TILE == 0 || plan.split.b.is_none());
            check_tiling(&plan);
        }
    }

    #[test]
    fn allocator_bounds(n in 1usize..=MAX_AGENTS, l_min in 0u32..4, l_total in 0u32..40,
                        tau in 0.05f64..10.0, steps in prop::collection::vec((0usize..MAX_AGENTS, 0.0f64..16.0), 0..40),
                        active_bits in any::<u32>()) {
        let params = BudgetParams { tau, l_min, l_total, ..BudgetParams::EDGE_AGENT };
        let mut d = DraftBudget::new(n, params).unwrap();
        for (i, k) in steps {
            let _ = d.update(i % n, k);
        }
        let active: Vec<bool> = (0..n).map(|i| active_bits >> i & 1 == 1).collect();
        let n_active = active.iter().filter(|&&a| a).count() as u64;
        let mut out = vec![u32::MAX; n];
        match d.allocate(&active, &mut out) {
            Ok(given) => {
                prop_assert!(n_active * l_min as u64 <= l_total as u64);
                prop_assert_eq!(given, out.iter().sum::<u32>());
                prop_assert!(given <= l_total);
                // Floors lose less than one slot per active agent.
                prop_assert!(given as u64 + n_active >= l_total as u64 || n_active == 0);
                for (i, &l) in out.iter().enumerate() {
                    if active[i] { prop_assert!(l >= l_min); } else { prop_assert_eq!(l, 0); }
                }
                // Suspending one more agent never takes slots from the others.
                if let Some(j) = active.iter().position(|&a| a) {
                    let mut fewer = active.clone();
                    fewer[j] = false;
                    let mut out2 = vec![u32::MAX; n];
                    d.allocate(&fewer, &mut out2).unwrap();
                    for i in 0..n {
                        if fewer[i] { prop_assert!(out2[i] >= out[i]); }
                    }
                }
            }
            Err(e) => {
                prop_assert!(n_active * l_min as u64 > l_total as u64);
                let oversubscribed = matches!(e, BudgetError::Oversubscribed { .. });
                prop_assert!(oversubscribed);
            }
        }
    }
}
