//! Plan tables: every matmul shape of a model planned at every row count an executor will run,
//! under one [`Policy`] — the solver's (`Auto`) or a forced one. An engine that executes a
//! table has one plan path whatever the user chose; a forced plan is just a table the user
//! picked. Forced plans need no measurements: [`Profile::nominal`] supplies placeholder costs.

use crate::checked::CheckedProfile;
use crate::model::Policy;
use crate::opmodel::{OpModel, ShapeModel};
use crate::plan::{plan_policy, OpPlan, PlanError};
use crate::profile::{Backend, BackendProfile, LatencyPoint, Order, Phase, Profile};

/// Largest row count a table plans (beyond it an executor chunks its rows).
pub const MAX_TABLE_M: u32 = 1 << 16;

/// Most distinct weight shapes in one table.
pub const MAX_TABLE_SHAPES: usize = 1024;

/// The plan of every `(k, n)` shape at every row count `1..=max_m`, under one policy.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanTable {
    policy: Policy,
    /// The phase of every plan, or `None`: [`Phase::of_rows`] for each row count.
    phase: Option<Phase>,
    max_m: u32,
    /// Sorted, distinct `(k, n)` shapes.
    shapes: Vec<(u32, u32)>,
    /// Shape-major: the plan of `shapes[s]` at `m` is `plans[s * max_m + (m - 1)]`.
    plans: Vec<OpPlan>,
}

/// Why a table could not be built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TableError {
    /// `max_m` is 0 or above [`MAX_TABLE_M`], or there are no shapes or more than
    /// [`MAX_TABLE_SHAPES`].
    BadSize,
    /// One shape at one row count has no plan under the policy.
    Plan {
        /// Reduction dimension of the shape.
        k: u32,
        /// Output columns of the shape.
        n: u32,
        /// Row count.
        m: u32,
        /// Why.
        error: PlanError,
    },
}

impl core::fmt::Display for TableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TableError::BadSize => write!(
                f,
                "a plan table needs 1..={MAX_TABLE_SHAPES} shapes and 1..={MAX_TABLE_M} rows"
            ),
            TableError::Plan { k, n, m, error } => {
                write!(f, "no plan for k={k} n={n} m={m}: {error}")
            }
        }
    }
}

impl std::error::Error for TableError {}

impl PlanTable {
    /// Plans every shape in `shapes` (duplicates allowed) at every `m` in `1..=max_m` under
    /// `policy` on `profile`, each row count in the phase [`Phase::of_rows`] gives it (1 row:
    /// decode). Use [`PlanTable::build_phase`] when the phase is known.
    pub fn build(
        profile: &CheckedProfile,
        policy: Policy,
        shapes: &[(u32, u32)],
        max_m: u32,
    ) -> Result<PlanTable, TableError> {
        Self::build_inner(profile, None, policy, shapes, max_m)
    }

    /// Plans every shape in `shapes` (duplicates allowed) at every `m` in `1..=max_m` under
    /// `policy` on `profile`, all in `phase`: an engine builds one table per phase (prefill
    /// chunks, decode steps with their draft rows).
    pub fn build_phase(
        profile: &CheckedProfile,
        phase: Phase,
        policy: Policy,
        shapes: &[(u32, u32)],
        max_m: u32,
    ) -> Result<PlanTable, TableError> {
        Self::build_inner(profile, Some(phase), policy, shapes, max_m)
    }

    fn build_inner(
        profile: &CheckedProfile,
        phase: Option<Phase>,
        policy: Policy,
        shapes: &[(u32, u32)],
        max_m: u32,
    ) -> Result<PlanTable, TableError> {
        let mut sorted = shapes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if max_m == 0 || max_m > MAX_TABLE_M || sorted.is_empty() || sorted.len() > MAX_TABLE_SHAPES
        {
            return Err(TableError::BadSize);
        }
        let mut plans = Vec::with_capacity(sorted.len() * max_m as usize);
        for &(k, n) in &sorted {
            let err = |m: u32| move |error| TableError::Plan { k, n, m, error };
            // The shape's curves are found once per phase; each row count only reads them.
            let shape = |ph: Phase| ShapeModel::new(profile, ph, k, n).map_err(err(1));
            let (first, rest) = match phase {
                Some(ph) => (shape(ph)?, None),
                None => (shape(Phase::Decode)?, Some(shape(Phase::Prefill)?)),
            };
            for m in 1..=max_m {
                let sm = match &rest {
                    Some(prefill) if m > 1 => prefill,
                    _ => &first,
                };
                let plan = OpModel::new(sm, m)
                    .and_then(|om| plan_policy(&om, policy))
                    .map_err(err(m))?;
                plans.push(plan);
            }
        }
        Ok(PlanTable {
            policy,
            phase,
            max_m,
            shapes: sorted,
            plans,
        })
    }

    /// The policy the table was built under.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The phase of every plan, or `None` when each row count took [`Phase::of_rows`].
    pub fn phase(&self) -> Option<Phase> {
        self.phase
    }

    /// Largest planned row count.
    pub fn max_m(&self) -> u32 {
        self.max_m
    }

    /// The planned shapes, sorted.
    pub fn shapes(&self) -> &[(u32, u32)] {
        &self.shapes
    }

    /// The plans of `(k, n)` at `m = 1..=max_m` (index `m - 1`).
    pub fn plans(&self, k: u32, n: u32) -> Option<&[OpPlan]> {
        let s = self.shapes.binary_search(&(k, n)).ok()?;
        let w = self.max_m as usize;
        Some(&self.plans[s * w..(s + 1) * w])
    }

    /// The plan of `(k, n)` at `m` rows; `None` for an unplanned shape or `m` outside
    /// `1..=max_m`.
    pub fn get(&self, k: u32, n: u32, m: u32) -> Option<&OpPlan> {
        self.plans(k, n)?.get((m as usize).checked_sub(1)?)
    }

    /// Every backend some plan of the table uses.
    pub fn backends(&self) -> Vec<Backend> {
        Backend::ALL
            .into_iter()
            .filter(|&b| {
                self.plans.iter().any(|p| {
                    let (a, o) = p.backends();
                    a == b || o == Some(b)
                })
            })
            .collect()
    }

    /// The plans that lean on an extrapolation beyond [`crate::FAR`] (their
    /// [`OpPlan::extrapolation`] is set), in shape then row order.
    pub fn extrapolated(&self) -> impl Iterator<Item = &OpPlan> {
        self.plans.iter().filter(|p| p.extrapolation.is_some())
    }
}

impl Profile {
    /// A profile for building forced-policy tables without measurements: every backend in
    /// `backends` costs the same per multiply-add (CPU and GPU), the NPU (when listed) runs its
    /// `standard_m` graphs (default `[32]`) far cheaper per row than the others and never
    /// prepares a graph online, so a forced NPU policy puts as many whole standard chunks on
    /// the NPU as fit. The costs are placeholders: plans from it execute a policy, they do not
    /// predict time (and their extrapolation warnings mean nothing either).
    pub fn nominal(backends: &[Backend], standard_m: &[u32]) -> Profile {
        const K: u32 = 1024;
        let std_m: Vec<u32> = if standard_m.is_empty() {
            vec![32]
        } else {
            standard_m.to_vec()
        };
        let mut out = Vec::new();
        for &b in Backend::ALL.iter().filter(|b| backends.contains(b)) {
            let points: Vec<LatencyPoint> = match b {
                // 1 ns per multiply-add at m = 1 and m = 4096, linear between.
                Backend::Cpu | Backend::Gpu => [1u32, 4096]
                    .iter()
                    .map(|&m| LatencyPoint {
                        k: K,
                        n: K,
                        m,
                        us: (m as f64) * (K as f64) * (K as f64) * 1e-3,
                        order: Order::ActivationFirst,
                    })
                    .collect(),
                // A thousandth of that per row, at each standard length.
                Backend::Npu => std_m
                    .iter()
                    .map(|&m| LatencyPoint {
                        k: K,
                        n: K,
                        m,
                        us: (m as f64) * (K as f64) * (K as f64) * 1e-6,
                        order: Order::ActivationFirst,
                    })
                    .collect(),
            };
            out.push(BackendProfile {
                backend: b.name().into(),
                points,
                standard_m: if b == Backend::Npu {
                    std_m.clone()
                } else {
                    Vec::new()
                },
                ..BackendProfile::default()
            });
        }
        Profile {
            device: "nominal (forced plans; costs are placeholders)".into(),
            backends: out,
            ..Profile::default()
        }
    }
}
