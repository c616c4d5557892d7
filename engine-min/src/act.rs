//! Where the engine's activations live: the slots of one [`hetero_uma::Pool`] (4096-aligned,
//! memfd-backed, mapped once at start-up), acquired at the start of every forward step and
//! released at its end, so the pool's generations turn over and a device or another process
//! could import the same memory. Nothing here allocates after [`Acts::new`].

use hetero_uma::{Handle, Pool as UmaPool, PoolConfig, UmaError};

use crate::model::Config;

/// The activation buffers of one step, in slot order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    /// The residual stream.
    X,
    /// Normed rows (input of Q/K/V and gate/up).
    H,
    /// Queries.
    Q,
    /// Keys of the new rows.
    K,
    /// Values of the new rows.
    V,
    /// Attention output.
    Att,
    /// o / down projection output, and the LM head's logits.
    Tmp,
    /// Gate (then SwiGLU).
    G,
    /// Up.
    U,
}

/// Slots one step holds.
pub const SLOTS: usize = 9;

/// The slots of one step, acquired together.
pub struct StepSlots {
    handles: [Handle; SLOTS],
}

impl StepSlots {
    /// The handle of `b`.
    pub fn get(&self, b: Buf) -> &Handle {
        &self.handles[b as usize]
    }

    /// The handle of `b`, to write.
    pub fn get_mut(&mut self, b: Buf) -> &mut Handle {
        &mut self.handles[b as usize]
    }

    /// Every handle, in [`Buf`] order (to use several at once).
    pub fn each_mut(&mut self) -> [&mut Handle; SLOTS] {
        self.handles.each_mut()
    }

    /// Two different buffers at once: `a` to read, `b` to write.
    pub fn pair(&mut self, a: Buf, b: Buf) -> (&Handle, &mut Handle) {
        let (ai, bi) = (a as usize, b as usize);
        assert_ne!(ai, bi, "pair of one buffer");
        if ai < bi {
            let (lo, hi) = self.handles.split_at_mut(bi);
            (&lo[ai], &mut hi[0])
        } else {
            let (lo, hi) = self.handles.split_at_mut(ai);
            (&hi[0], &mut lo[bi])
        }
    }
}

/// A uma pool whose slots hold one step's activations.
pub struct Acts {
    pool: UmaPool,
    floats: usize,
}

impl Acts {
    /// A pool of [`SLOTS`] slots of at least `floats` f32 each.
    pub fn new(floats: usize) -> Result<Acts, UmaError> {
        let bytes = floats.max(1).checked_mul(4).ok_or(UmaError::TooLarge)?;
        let slot_size = hetero_uma::round_slot_size(bytes).ok_or(UmaError::TooLarge)?;
        let pool = UmaPool::new(PoolConfig {
            slots: SLOTS,
            slot_size,
        })?;
        Ok(Acts {
            pool,
            floats: slot_size / 4,
        })
    }

    /// The slots a step of `max_batch` rows of model `c` needs (each as large as the largest
    /// buffer: the LM head's `max_batch x vocab` logits).
    pub fn for_model(c: &Config, max_batch: usize) -> Result<Acts, UmaError> {
        let widest = c.d_model.max(c.d_ff).max(c.vocab).max(c.kv_dim());
        Self::new(max_batch.checked_mul(widest).ok_or(UmaError::TooLarge)?)
    }

    /// Floats in each slot.
    pub fn floats(&self) -> usize {
        self.floats
    }

    /// The pool.
    pub fn pool(&self) -> &UmaPool {
        &self.pool
    }

    /// Acquires one step's slots (lock-free, no allocation).
    pub fn acquire(&self) -> Result<StepSlots, UmaError> {
        let mut got: [Option<Handle>; SLOTS] = Default::default();
        for g in got.iter_mut() {
            match self.pool.acquire() {
                Ok(h) => *g = Some(h),
                Err(e) => {
                    for h in got.iter_mut().filter_map(Option::take) {
                        let _ = self.pool.release(h);
                    }
                    return Err(e);
                }
            }
        }
        // Every entry was filled above (the loop returns on the first failure).
        let handles = got.map(|h| h.expect("acquired"));
        Ok(StepSlots { handles })
    }

    /// Gives one step's slots back (their generations move on).
    pub fn release(&self, s: StepSlots) -> Result<(), UmaError> {
        let mut first = Ok(());
        for h in s.handles {
            if let Err(e) = self.pool.release(h) {
                if first.is_ok() {
                    first = Err(e.error);
                }
            }
        }
        first
    }
}
