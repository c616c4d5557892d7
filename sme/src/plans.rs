//! Several plans run as one job: their tiles numbered one plan after the other in one
//! [`StealState`], so a pool runs the matmuls that share an input (a layer's Q, K and V; gate
//! and up) with one dispatch instead of one each. Each plan's tiles compute exactly what they
//! compute alone, so the results are bit-identical to running the plans one by one.

use crate::{DqPlan, Error, GemmPlan, Int8Plan, QPackedPlan, StealState};

mod sealed {
    /// Only hetero-sme's plans are [`super::TiledPlan`]s.
    pub trait Sealed {}
}

/// A plan whose tiles can run in a [`PlanSet`]: [`Int8Plan`], [`QPackedPlan`], [`GemmPlan`]
/// and [`DqPlan`].
pub trait TiledPlan: sealed::Sealed + Sync {
    /// Number of tiles (the plan's own `tiles()`).
    fn tile_count(&self) -> usize;

    /// Runs tile `t` (does nothing for `t >= tile_count()`).
    ///
    /// # Safety
    /// Tile `t` must not run on two threads at once, nor twice concurrently with itself (the
    /// plans' tiles write disjoint parts of their outputs; a tile run twice at once races with
    /// itself).
    #[doc(hidden)]
    unsafe fn run_tile_once(&self, t: usize);
}

impl sealed::Sealed for Int8Plan<'_> {}
impl TiledPlan for Int8Plan<'_> {
    fn tile_count(&self) -> usize {
        self.tiles()
    }
    unsafe fn run_tile_once(&self, t: usize) {
        // SAFETY: forwarded from the contract.
        unsafe { self.run_tile(t) }
    }
}

impl sealed::Sealed for GemmPlan<'_> {}
impl TiledPlan for GemmPlan<'_> {
    fn tile_count(&self) -> usize {
        self.tiles()
    }
    unsafe fn run_tile_once(&self, t: usize) {
        // SAFETY: forwarded from the contract.
        unsafe { self.run_tile(t) }
    }
}

impl sealed::Sealed for DqPlan<'_> {}
impl TiledPlan for DqPlan<'_> {
    fn tile_count(&self) -> usize {
        self.tiles()
    }
    unsafe fn run_tile_once(&self, t: usize) {
        // SAFETY: forwarded from the contract.
        unsafe { self.run_tile(t) }
    }
}

impl sealed::Sealed for QPackedPlan<'_> {}
impl TiledPlan for QPackedPlan<'_> {
    fn tile_count(&self) -> usize {
        self.tiles()
    }
    unsafe fn run_tile_once(&self, t: usize) {
        // SAFETY: forwarded from the contract.
        unsafe { self.run_tile(t) }
    }
}

/// Plans that run as one job (see the notes in `src/plans.rs`): tiles `0..tiles()` are the first
/// plan's, then the second's, and so on.
///
/// ```ignore
/// let set = PlanSet::new(&[&q_plan, &k_plan, &v_plan])?;
/// pool.run_workers(set.tiles(), &|st, th| { let _ = set.run_worker(st, th); })?;
/// ```
pub struct PlanSet<'s> {
    plans: &'s [&'s dyn TiledPlan],
    tiles: usize,
}

impl core::fmt::Debug for PlanSet<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PlanSet")
            .field("plans", &self.plans.len())
            .field("tiles", &self.tiles)
            .finish()
    }
}

impl<'s> PlanSet<'s> {
    /// The plans as one job. Errors: [`Error::Overflow`] when the tiles together do not fit a
    /// [`StealState`] (`u32` indices); [`Error::ShapeMismatch`] when a plan appears twice (its
    /// tiles would run twice at once, racing on its output).
    pub fn new(plans: &'s [&'s dyn TiledPlan]) -> Result<Self, Error> {
        for (i, a) in plans.iter().enumerate() {
            let a_ptr = *a as *const dyn TiledPlan as *const ();
            if let Some(j) = plans[..i]
                .iter()
                .position(|b| core::ptr::eq(*b as *const dyn TiledPlan as *const (), a_ptr))
            {
                return Err(Error::ShapeMismatch {
                    what: "a plan appears twice in a PlanSet",
                    expected: j,
                    got: i,
                });
            }
        }
        let tiles = plans
            .iter()
            .try_fold(0usize, |a, p| a.checked_add(p.tile_count()))
            .filter(|&t| t <= u32::MAX as usize)
            .ok_or(Error::Overflow)?;
        Ok(Self { plans, tiles })
    }

    /// Tiles of all the plans together.
    pub fn tiles(&self) -> usize {
        self.tiles
    }

    /// The plan of tile `t` and its index there.
    fn locate(&self, mut t: usize) -> Option<(&dyn TiledPlan, usize)> {
        for p in self.plans {
            let n = p.tile_count();
            if t < n {
                return Some((*p, t));
            }
            t -= n;
        }
        None
    }

    /// Runs this worker's share: claims tiles from `state` (prepared with [`Self::tiles`])
    /// until none is left. Call once per worker, `worker` in `0..state.workers()`.
    pub fn run_worker(&self, state: &StealState, worker: usize) -> Result<(), Error> {
        state.run_plan(worker, self.tiles, |t| {
            if let Some((p, local)) = self.locate(t) {
                // SAFETY: each tile index of the set is handed to exactly one claim, and the
                // set's indices map one to one onto (plan, tile) pairs.
                unsafe { p.run_tile_once(local) }
            }
        })
    }
}
