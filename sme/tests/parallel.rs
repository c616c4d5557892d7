//! The parallel driver: exactly-once under contention, slowed workers get fewer tiles, and the
//! parallel GEMM / GEMV equal the single-threaded ones bit for bit (same kernel, same tiles).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use hetero_sme::*;

#[test]
fn stress_exactly_once_with_slow_workers() {
    let workers = 4;
    let mut st = StealState::new(workers).unwrap();
    for round in 0..5 {
        let tiles = 200 + round * 7;
        st.prepare(tiles).unwrap();
        let counts: Vec<AtomicUsize> = (0..tiles).map(|_| AtomicUsize::new(0)).collect();
        let per_worker: Vec<AtomicUsize> = (0..workers).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for w in 0..workers {
                let (st, counts, per_worker) = (&st, &counts, &per_worker);
                s.spawn(move || {
                    st.run_worker(w, |t| {
                        counts[t].fetch_add(1, Ordering::Relaxed);
                        per_worker[w].fetch_add(1, Ordering::Relaxed);
                        // Worker 0 is an "E-core": it sleeps 2 ms per tile, the others do not
                        // sleep at all (sleeps of microseconds are unreliable on a loaded machine).
                        if w == 0 {
                            std::thread::sleep(Duration::from_millis(2));
                        } else {
                            std::hint::spin_loop();
                        }
                    })
                    .unwrap();
                });
            }
        });
        for (t, c) in counts.iter().enumerate() {
            assert_eq!(c.load(Ordering::Relaxed), 1, "round {round}: tile {t}");
        }
        let got: Vec<usize> = per_worker
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        assert_eq!(got.iter().sum::<usize>(), tiles);
        // Its own range is a quarter of the tiles (50+); at 2 ms a tile it must end with fewer.
        assert!(
            got[0] < tiles / workers,
            "round {round}: slow worker ran {got:?}"
        );
    }
}

#[test]
fn bad_worker_index_is_an_error() {
    let st = StealState::new(2).unwrap();
    assert!(matches!(
        st.run_worker(2, |_| {}),
        Err(Error::BadWorkerCount { .. })
    ));
    assert!(StealState::new(0).is_err());
    // A state prepared for another tile count is refused, and nothing is written.
    let mut st = StealState::new(1).unwrap();
    st.prepare(1).unwrap();
    let x = [1f32; 32];
    let w = [BlockQ8_0::default(); 2];
    let mut y = [-7f32; 2];
    let g = QGemv {
        x: &x,
        m: 1,
        k: 32,
        w: QWeights::Q8_0(&w),
    };
    let plan = QGemvPlan::new(Kernel::new(KernelKind::Portable).unwrap(), &g, &mut y, 2).unwrap();
    assert_eq!(plan.tiles(), 1);
    st.prepare(5).unwrap();
    assert!(matches!(
        plan.run_worker(&st, 0),
        Err(Error::ShapeMismatch { .. })
    ));
    assert_eq!(y, [-7.0, -7.0]);
}

#[test]
fn parallel_gemm_and_gemv_equal_serial() {
    let mut rng = Rng::new(7);
    let (m, k, n) = (100, 129, 300);
    let a = rng.vec(m * k);
    let wsrc = rng.vec(k * n);
    let mut packed = vec![0u16; packed_len(k, n)];
    let src = WeightSource {
        data: &wsrc,
        k,
        n,
        ld: n,
        layout: Layout::RowMajor,
    };
    let workers = 3;
    let mut st = StealState::new(workers).unwrap();
    for kernel in kernels() {
        let format = if kernel.supports(PackedFormat::F16) {
            PackedFormat::F16
        } else {
            PackedFormat::Bf16
        };
        pack_f32(&src, 0..n, format, &mut packed).unwrap();
        let w = PackedRef::new(&packed, k, n, format).unwrap();
        let g = Gemm {
            a: Lhs::F32(&a),
            m,
            lda: k,
            w,
            bias: None,
            accumulate: false,
        };
        let mut serial = vec![f32::NAN; m * n];
        kernel.gemm(&g, &mut serial, n).unwrap();
        let mut par = vec![f32::NAN; m * n];
        let plan = GemmPlan::new(kernel, &g, &mut par, n).unwrap();
        st.prepare(plan.tiles()).unwrap();
        std::thread::scope(|s| {
            for wk in 0..workers {
                let (plan, st) = (&plan, &st);
                s.spawn(move || plan.run_worker(st, wk).unwrap());
            }
        });
        assert!(
            serial
                .iter()
                .zip(&par)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}",
            kernel.name()
        );
        // FP16 C: parallel equals serial, and equals the FP32 result rounded once to FP16.
        let mut serial16 = vec![0x7E00u16; m * n];
        kernel.gemm_f16(&g, &mut serial16, n).unwrap();
        let mut par16 = vec![0x7E00u16; m * n];
        let plan = GemmPlan::new_f16(kernel, &g, &mut par16, n).unwrap();
        st.prepare(plan.tiles()).unwrap();
        std::thread::scope(|s| {
            for wk in 0..workers {
                let (plan, st) = (&plan, &st);
                s.spawn(move || plan.run_worker(st, wk).unwrap());
            }
        });
        assert_eq!(serial16, par16, "{} FP16 C", kernel.name());
        assert!(
            serial
                .iter()
                .zip(&serial16)
                .all(|(&x, &h)| f16_bits(x) == h),
            "{}: FP16 C is not the FP32 C rounded once",
            kernel.name()
        );

        let kq = 128;
        let x = rng.vec(4 * kq);
        let wq: Vec<BlockQ4_1> = (0..n * kq / 32)
            .map(|_| BlockQ4_1 {
                d: f16_bits(rng.f32() * 0.1),
                m: f16_bits(rng.f32() * 0.1),
                qs: core::array::from_fn(|_| rng.next_u64() as u8),
            })
            .collect();
        let qg = QGemv {
            x: &x,
            m: 4,
            k: kq,
            w: QWeights::Q4_1(&wq),
        };
        let mut ys = vec![f32::NAN; 4 * n];
        kernel.qgemv(&qg, &mut ys, n).unwrap();
        let mut yp = vec![f32::NAN; 4 * n];
        let plan = QGemvPlan::new(kernel, &qg, &mut yp, n).unwrap();
        st.prepare(plan.tiles()).unwrap();
        std::thread::scope(|s| {
            for wk in 0..workers {
                let (plan, st) = (&plan, &st);
                s.spawn(move || plan.run_worker(st, wk).unwrap());
            }
        });
        assert!(
            ys.iter().zip(&yp).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}",
            kernel.name()
        );
    }
}

#[test]
fn stress_exactly_once_under_pure_contention() {
    // Nobody sleeps: owners and thieves collide on the same words as often as possible.
    let workers = 4;
    let mut st = StealState::new(workers).unwrap();
    for round in 0..10 {
        let tiles = 20_000 + round;
        st.prepare(tiles).unwrap();
        let counts: Vec<AtomicUsize> = (0..tiles).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for w in 0..workers {
                let (st, counts) = (&st, &counts);
                s.spawn(move || {
                    st.run_worker(w, |t| {
                        counts[t].fetch_add(1, Ordering::Relaxed);
                    })
                    .unwrap()
                });
            }
        });
        assert!(
            counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "round {round}"
        );
    }
}

/// `prepare_active`: the tiles go to the first `active` workers only; every tile runs exactly
/// once whether the inactive workers run (they only steal) or not; `active` is clamped.
#[test]
fn prepare_active_splits_over_the_active_workers() {
    let workers = 4;
    let mut st = StealState::new(workers).unwrap();
    for (tiles, active, want) in [(100, 2, 2), (7, 3, 3), (50, 0, 1), (50, 9, 4)] {
        st.prepare_active(tiles, active).unwrap();
        assert_eq!(st.active(), want);
        for run_all in [false, true] {
            st.prepare_active(tiles, active).unwrap();
            let counts: Vec<AtomicUsize> = (0..tiles).map(|_| AtomicUsize::new(0)).collect();
            let runners = if run_all { workers } else { want };
            std::thread::scope(|s| {
                for w in 0..runners {
                    let (st, counts) = (&st, &counts);
                    s.spawn(move || {
                        st.run_worker(w, |t| {
                            counts[t].fetch_add(1, Ordering::Relaxed);
                        })
                        .unwrap();
                    });
                }
            });
            for (t, c) in counts.iter().enumerate() {
                assert_eq!(
                    c.load(Ordering::Relaxed),
                    1,
                    "{tiles} on {active}: tile {t}"
                );
            }
        }
        // The inactive workers own nothing: a lone inactive worker steals every tile.
        st.prepare_active(tiles, active).unwrap();
        let mut n = 0;
        st.run_worker(workers - 1, |_| n += 1).unwrap();
        assert_eq!(n, tiles);
    }
}
