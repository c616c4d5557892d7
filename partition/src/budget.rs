//! EdgeAgent's HAL draft-budget allocator for speculative decoding across agents.

use core::fmt;

/// Most agents one allocator tracks (fixed capacity: no allocation).
pub const MAX_AGENTS: usize = 32;

/// Parameters of the allocator; [`BudgetParams::EDGE_AGENT`] holds the paper's values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetParams {
    /// Weight of the newest acceptance length in the moving average, in `(0, 1]` (paper: 0.3).
    pub gamma: f64,
    /// Initial average acceptance length `A_i(0)` (paper: 4.0), finite and >= 0.
    pub a0: f64,
    /// Softmax temperature, finite and > 0.
    pub tau: f64,
    /// Draft slots shared by all active agents per step (paper: 16).
    pub l_total: u32,
    /// Slots every active agent gets at least.
    pub l_min: u32,
}

impl BudgetParams {
    /// γ = 0.3, A(0) = 4.0, τ = 1.0, L_total = 16, L_min = 1.
    pub const EDGE_AGENT: BudgetParams = BudgetParams {
        gamma: 0.3,
        a0: 4.0,
        tau: 1.0,
        l_total: 16,
        l_min: 1,
    };
}

impl Default for BudgetParams {
    fn default() -> Self {
        BudgetParams::EDGE_AGENT
    }
}

/// Why the allocator refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetError {
    /// A parameter out of range (`gamma` not in (0, 1], `tau` <= 0, NaN, ...).
    BadParams,
    /// More agents than [`MAX_AGENTS`], or zero agents.
    TooManyAgents,
    /// An agent index >= the number of agents.
    NoSuchAgent(usize),
    /// An accepted length that is NaN, infinite or negative.
    BadAccepted,
    /// `active.len()` or `out.len()` differs from the number of agents.
    LengthMismatch,
    /// `N · L_min > L_total` for the `N` active agents.
    Oversubscribed {
        /// Active agents.
        active: usize,
        /// Slots they would need at least.
        needed: u64,
        /// Slots available.
        total: u32,
    },
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::BadParams => f.write_str("gamma in (0,1], tau > 0, a0 >= 0, all finite"),
            BudgetError::TooManyAgents => write!(f, "between 1 and {MAX_AGENTS} agents"),
            BudgetError::NoSuchAgent(i) => write!(f, "no agent {i}"),
            BudgetError::BadAccepted => f.write_str("accepted length must be finite and >= 0"),
            BudgetError::LengthMismatch => f.write_str("slice length differs from agent count"),
            BudgetError::Oversubscribed {
                active,
                needed,
                total,
            } => write!(
                f,
                "{active} active agents need {needed} slots at least, only {total} exist"
            ),
        }
    }
}

impl std::error::Error for BudgetError {}

/// HAL draft-budget allocator: tracks each agent's moving-average acceptance length
/// `A_i(t) = γ·k_i(t) + (1−γ)·A_i(t−1)` and splits `L_total` draft slots as
/// `L_i = L_min + ⌊(L_total − N·L_min)·softmax(A/τ)_i⌋` over the `N` active agents; suspended
/// agents get 0 and their share returns to the active ones. Fixed-size, `Copy`, no allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftBudget {
    params: BudgetParams,
    avg: [f64; MAX_AGENTS],
    n: usize,
}

impl DraftBudget {
    /// An allocator for `n_agents` agents, every average at `params.a0`.
    pub fn new(n_agents: usize, params: BudgetParams) -> Result<DraftBudget, BudgetError> {
        let p = params;
        let ok = p.gamma.is_finite()
            && p.gamma > 0.0
            && p.gamma <= 1.0
            && p.tau.is_finite()
            && p.tau > 0.0
            && p.a0.is_finite()
            && p.a0 >= 0.0;
        if !ok {
            return Err(BudgetError::BadParams);
        }
        if n_agents == 0 || n_agents > MAX_AGENTS {
            return Err(BudgetError::TooManyAgents);
        }
        Ok(DraftBudget {
            params,
            avg: [params.a0; MAX_AGENTS],
            n: n_agents,
        })
    }

    /// Number of agents.
    pub fn agents(&self) -> usize {
        self.n
    }

    /// The parameters.
    pub fn params(&self) -> BudgetParams {
        self.params
    }

    /// Agent `i`'s current average acceptance length `A_i`.
    pub fn average(&self, i: usize) -> Result<f64, BudgetError> {
        if i >= self.n {
            return Err(BudgetError::NoSuchAgent(i));
        }
        Ok(self.avg[i])
    }

    /// Records that agent `i` had `accepted` draft tokens accepted this step (HAL update).
    pub fn update(&mut self, i: usize, accepted: f64) -> Result<(), BudgetError> {
        if i >= self.n {
            return Err(BudgetError::NoSuchAgent(i));
        }
        if !(accepted.is_finite() && accepted >= 0.0) {
            return Err(BudgetError::BadAccepted);
        }
        let g = self.params.gamma;
        self.avg[i] = g * accepted + (1.0 - g) * self.avg[i];
        Ok(())
    }

    /// Writes each agent's draft length into `out` (`active[i] == false`: suspended, 0 slots)
    /// and returns the slots handed out (always <= `L_total`; the floors may leave a few).
    pub fn allocate(&self, active: &[bool], out: &mut [u32]) -> Result<u32, BudgetError> {
        if active.len() != self.n || out.len() != self.n {
            return Err(BudgetError::LengthMismatch);
        }
        let p = self.params;
        let n_active = active.iter().filter(|&&a| a).count();
        let needed = n_active as u64 * p.l_min as u64;
        if needed > p.l_total as u64 {
            return Err(BudgetError::Oversubscribed {
                active: n_active,
                needed,
                total: p.l_total,
            });
        }
        let spare = (p.l_total as u64 - needed) as f64;
        // Stable softmax over the active agents: (A_i − max A)/τ is <= 0 and never NaN, even
        // when A/τ alone would overflow (tiny τ); the largest agent's term is exactly 1.
        let avg = &self.avg[..self.n];
        let live = || avg.iter().zip(active).filter(|(_, &a)| a).map(|(&x, _)| x);
        let max = live().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = live().map(|x| ((x - max) / p.tau).exp()).sum();
        let mut given = 0u64;
        for ((o, &x), &a) in out.iter_mut().zip(avg).zip(active) {
            *o = if a {
                let share = ((x - max) / p.tau).exp() / sum;
                // share <= 1 up to rounding; clamp so the floor never exceeds `spare`.
                let extra = (spare * share).floor().clamp(0.0, spare) as u32;
                p.l_min + extra
            } else {
                0
            };
            given += *o as u64;
        }
        // Rounding in the shares can in principle push the sum past L_total by a slot;
        // take it back from the largest allocations so the bound always holds.
        while given > p.l_total as u64 {
            let (j, _) = out
                .iter()
                .enumerate()
                .filter(|(i, _)| active[*i])
                .max_by_key(|(_, &v)| v)
                .unwrap_or((0, &0));
            if out[j] <= p.l_min {
                break;
            }
            out[j] -= 1;
            given -= 1;
        }
        Ok(given as u32)
    }
}
