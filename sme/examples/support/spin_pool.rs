//! Times a parallel call on `threads` threads spawned once per measurement (the caller is worker
//! 0): each repetition bumps an epoch the workers spin on (yielding after a while, sooner when
//! there are more threads than cores, so they still make progress), runs worker 0's share, and
//! waits for the others.
//! One `StealState` per repetition is prepared before timing (preparing needs `&mut`). Shared by
//! the `int8_decode` and `int8_amx` examples.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use hetero_sme::StealState;

/// Spins on `cond`, then yields to the OS: after a few thousand spins with `patient` (more
/// threads than cores), after ~65 000 otherwise — long enough that a call of microseconds never
/// yields (a yield can cost a descheduling of milliseconds), short enough that on a loaded machine
/// a waiter lets the descheduled peer it waits for run.
pub fn wait(cond: impl Fn() -> bool, patient: bool) {
    let limit = if patient { 1u32 << 12 } else { 1 << 16 };
    let mut spins = 0u32;
    while !cond() {
        spins = spins.saturating_add(1);
        if spins > limit {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Seconds of each of `reps` runs of `run(state, worker)` on `threads` threads over `tiles`
/// tiles, after one warm-up run.
pub fn time_parallel(
    threads: usize,
    tiles: usize,
    reps: usize,
    run: &(dyn Fn(&StealState, usize) + Sync),
) -> Vec<f64> {
    let mut states: Vec<StealState> = (0..reps + 1)
        .map(|_| {
            let mut s = StealState::new(threads).expect("workers");
            s.prepare(tiles).expect("tiles");
            s
        })
        .collect();
    let states: &[StealState] = &mut states[..];
    let epoch = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let mut times = Vec::with_capacity(reps);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let patient = threads > cores;
    std::thread::scope(|sc| {
        for w in 1..threads {
            let (epoch, done) = (&epoch, &done);
            sc.spawn(move || {
                for (r, st) in states.iter().enumerate() {
                    // Acquire pairs with the Release store below: the state is published.
                    wait(|| epoch.load(Ordering::Acquire) > r, patient);
                    run(st, w);
                    // Release: this worker's outputs happen before the main thread's read.
                    done.fetch_add(1, Ordering::Release);
                }
            });
        }
        for (r, st) in states.iter().enumerate() {
            let t = Instant::now();
            epoch.store(r + 1, Ordering::Release);
            run(st, 0);
            wait(
                || done.load(Ordering::Acquire) >= (r + 1) * (threads - 1),
                patient,
            );
            if r > 0 {
                // The first run warms up (page faults, caches).
                times.push(t.elapsed().as_secs_f64());
            }
        }
    });
    times
}
