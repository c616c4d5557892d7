//! EdgeAgent's zero-copy tensor parallelism across three crates: two producers (the sme crate's
//! Q4_0 GEMV on a thread, and a scalar stand-in for a second device on another) each write a
//! disjoint column range of ONE output held in a uma slot, arrive at a sync dependency barrier,
//! and the consumer reads the whole output from the slot once the barrier completes: no
//! per-producer scratch, no concat copy. Reused over several epochs, as a decoder layer reuses
//! its slots.

use hetero_sme::{gemv_q4_0, BlockQ4_0};
use hetero_sync::{Arrival, DependencyBarrier, WaitConfig};
use hetero_uma::{round_slot_size, Pool, PoolConfig};

const K: usize = 576;
const N: usize = 1536;
/// Columns (weight rows) the CPU producer takes: a multiple of the 64-wide tile, as
/// partition's EdgeAgent split rounds it.
const CPU_COLS: usize = 960;

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn weights(seed: u64) -> Vec<BlockQ4_0> {
    let mut s = seed | 1;
    (0..N * K / 32)
        .map(|_| {
            let d = half::f16::from_f32(
                ((xorshift(&mut s) >> 40) as f32 / (1u64 << 24) as f32) * 0.02 + 0.001,
            );
            let mut qs = [0u8; 16];
            for q in &mut qs {
                *q = xorshift(&mut s) as u8;
            }
            BlockQ4_0 { d: d.to_bits(), qs }
        })
        .collect()
}

fn activations(seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..K)
        .map(|_| (xorshift(&mut s) >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
        .collect()
}

/// Weight value (row `n`, column `k`) as GGUF defines Q4_0: low nibbles are elements 0..16 of a
/// block, high nibbles 16..32, value `(q - 8) * d`.
fn weight(w: &[BlockQ4_0], n: usize, k: usize) -> f64 {
    let b = &w[n * (K / 32) + k / 32];
    let j = k % 32;
    let q = if j < 16 {
        b.qs[j] & 15
    } else {
        b.qs[j - 16] >> 4
    };
    (q as f64 - 8.0) * half::f16::from_bits(b.d).to_f64()
}

/// The second device's stand-in: rows `n0..n1` of y = W·x, plain f32 loops.
fn other_device(w: &[BlockQ4_0], x: &[f32], n0: usize, y: &mut [f32]) {
    for (i, yi) in y.iter_mut().enumerate() {
        *yi = (0..K).map(|k| weight(w, n0 + i, k) as f32 * x[k]).sum();
    }
}

#[test]
fn two_producers_fill_one_slot_released_by_the_barrier() {
    let pool = Pool::new(PoolConfig {
        slots: 2,
        slot_size: round_slot_size(N * 4).unwrap(),
    })
    .unwrap();
    let barrier = DependencyBarrier::new(2).unwrap();
    let w = weights(7);
    for epoch in 1..=4u32 {
        let x = activations(100 + epoch as u64);
        let mut h = pool.acquire().unwrap();
        {
            // Poison the whole output so an unwritten element cannot pass.
            pool.f32s_mut(&mut h).unwrap()[..N].fill(f32::NAN);
            let [mut cpu_view, mut dev_view] = pool
                .split_bytes(&mut h, [0..CPU_COLS * 4, CPU_COLS * 4..N * 4])
                .unwrap();
            let cpu_out = cpu_view.as_mut_f32().unwrap();
            let dev_out = dev_view.as_mut_f32().unwrap();
            let (w, x, barrier) = (&w, &x, &barrier);
            std::thread::scope(|s| {
                s.spawn(move || {
                    gemv_q4_0(x, 1, K, &w[..CPU_COLS * K / 32], cpu_out, CPU_COLS).unwrap();
                    barrier.arrive(0, epoch).unwrap()
                });
                s.spawn(move || {
                    other_device(w, x, CPU_COLS, dev_out);
                    barrier.arrive(1, epoch).unwrap()
                });
                // The consumer waits on the barrier, not on the threads.
                barrier.wait(epoch, &WaitConfig::default(), None).unwrap();
            });
        }
        assert!(
            barrier.arrive(0, epoch).is_err(),
            "a second arrival for a completed epoch must be refused"
        );
        // Every element of the one output, read in place from the slot.
        let y = &pool.f32s(&h).unwrap()[..N];
        for (n, &got) in y.iter().enumerate() {
            let (mut exact, mut mag) = (0f64, 0f64);
            for (k, &xk) in x.iter().enumerate() {
                let t = weight(&w, n, k) * xk as f64;
                exact += t;
                mag += t.abs();
            }
            // FP32 accumulation of K products (weights and x exact in f32): |err| <= K·2^-24·Σ|t|
            // for any summation order, doubled for the products' own rounding.
            let bound = 2.0 * K as f64 * f64::from(f32::EPSILON) / 2.0 * mag + 1e-30;
            assert!(
                (got as f64 - exact).abs() <= bound,
                "epoch {epoch} column {n}: {got} vs {exact} (bound {bound:e})"
            );
        }
        pool.release(h).unwrap();
    }
    assert!(pool.leak_report().is_clean());
}

#[test]
fn overlapping_producer_ranges_are_refused_before_anything_is_written() {
    let pool = Pool::new(PoolConfig {
        slots: 1,
        slot_size: round_slot_size(N * 4).unwrap(),
    })
    .unwrap();
    let mut h = pool.acquire().unwrap();
    pool.f32s_mut(&mut h).unwrap()[..N].fill(1.0);
    assert!(pool
        .split_bytes(&mut h, [0..CPU_COLS * 4 + 4, CPU_COLS * 4..N * 4])
        .is_err());
    assert!(pool.f32s(&h).unwrap()[..N].iter().all(|&v| v == 1.0));
    pool.release(h).unwrap();
}

#[test]
fn barrier_of_the_wrong_epoch_is_refused() {
    let barrier = DependencyBarrier::new(2).unwrap();
    assert!(matches!(
        barrier.arrive(0, 1),
        Ok(Arrival::Waiting { remaining: 1 })
    ));
    assert!(
        barrier.arrive(0, 1).is_err(),
        "the same producer twice in one epoch"
    );
    assert!(matches!(barrier.arrive(1, 1), Ok(Arrival::Completed)));
}
