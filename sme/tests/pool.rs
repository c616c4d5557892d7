//! The thread pool: every task of every job runs exactly once, whatever the thread count and
//! however unevenly the threads run (one deliberately slowed thread); nothing is lost across many
//! back-to-back jobs (the epoch protocol) or after the workers went to sleep on the flag; task
//! panics reach the caller; spawn failures are typed errors that leave no thread behind; the
//! disjoint-output helpers hand each task its own chunk and each thread its own scratch.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetero_sme::{PoolError, StealState, ThreadPool};

fn hits(n: usize) -> Vec<AtomicU32> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

fn all_once(h: &[AtomicU32]) -> bool {
    h.iter().all(|h| h.load(Ordering::Relaxed) == 1)
}

#[test]
fn every_task_runs_exactly_once() {
    for threads in [1, 2, 3, 5] {
        let pool = ThreadPool::new(threads).unwrap();
        assert_eq!(pool.threads(), threads);
        for n_tasks in [0, 1, 2, 7, 64, 1000] {
            for _rep in 0..20 {
                let h = hits(n_tasks);
                pool.run(n_tasks, &|t, thread| {
                    assert!(thread < threads, "thread index {thread} out of range");
                    h[t].fetch_add(1, Ordering::Relaxed);
                });
                assert!(all_once(&h), "{n_tasks} tasks, {threads} threads");
            }
        }
    }
}

#[test]
fn a_slow_thread_gets_fewer_tasks() {
    let pool = ThreadPool::new(3).unwrap();
    let n_tasks = 300;
    let per_thread = hits(3);
    let h = hits(n_tasks);
    pool.run(n_tasks, &|t, thread| {
        if thread == 1 {
            // The slowed thread (an E-core, or one descheduled on a shared machine).
            std::thread::sleep(Duration::from_millis(2));
        }
        h[t].fetch_add(1, Ordering::Relaxed);
        per_thread[thread].fetch_add(1, Ordering::Relaxed);
    });
    assert!(all_once(&h));
    // Its own share is 100 tasks; the others steal most of them.
    let slow = per_thread[1].load(Ordering::Relaxed);
    assert!(slow < 100, "the slowed thread ran {slow} of its 100 tasks");
}

#[test]
fn many_back_to_back_jobs() {
    let pool = ThreadPool::new(3).unwrap();
    let h = hits(5);
    for job in 0..5_000u32 {
        let n = 2 + (job as usize % 4);
        pool.run(n, &|t, _| {
            h[t].fetch_add(1, Ordering::Relaxed);
        });
        // Every task of this job ran once before `run` returned: the counts equal the number
        // of jobs so far that had task `t`.
        for (t, c) in h.iter().enumerate() {
            let want = (0..=job).filter(|j| t < 2 + (*j as usize % 4)).count() as u32;
            assert_eq!(c.load(Ordering::Relaxed), want, "job {job}, task {t}");
        }
    }
}

#[test]
fn sleeping_workers_wake_for_the_next_job() {
    let pool = ThreadPool::new(3).unwrap();
    for _round in 0..3 {
        // Long enough for the workers to pass their spin phase and block on the flag.
        std::thread::sleep(Duration::from_millis(20));
        let on_workers = AtomicUsize::new(0);
        let h = hits(40);
        pool.run(40, &|t, thread| {
            std::thread::sleep(Duration::from_micros(500));
            if thread != 0 {
                on_workers.fetch_add(1, Ordering::Relaxed);
            }
            h[t].fetch_add(1, Ordering::Relaxed);
        });
        assert!(all_once(&h));
        // 20 ms of sleeping tasks: a woken worker joins long before the caller is done alone.
        assert!(
            on_workers.load(Ordering::Relaxed) > 0,
            "no worker woke up for the job"
        );
    }
    let t = Instant::now();
    drop(pool);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "drop took {:?}",
        t.elapsed()
    );
}

#[test]
fn run_workers_drives_the_steal_state() {
    let pool = ThreadPool::new(3).unwrap();
    for n in [0, 1, 5, 300] {
        let h = hits(n);
        pool.run_workers(n, &|ranges: &StealState, thread| {
            assert_eq!(ranges.tiles(), n);
            ranges
                .run_worker(thread, |t| {
                    h[t].fetch_add(1, Ordering::Relaxed);
                })
                .unwrap();
        })
        .unwrap();
        assert!(all_once(&h), "{n} tasks");
    }
    let too_many = u32::MAX as usize + 1;
    let ran = AtomicBool::new(false);
    let err = pool
        .run_workers(too_many, &|_: &StealState, _| {
            ran.store(true, Ordering::Relaxed)
        })
        .unwrap_err();
    assert!(matches!(
        err,
        PoolError::TooManyTasks { max, got } if max == u32::MAX as usize && got == too_many
    ));
    assert!(!ran.load(Ordering::Relaxed));
}

#[test]
fn task_panics_reach_the_caller_and_the_pool_survives() {
    let pool = ThreadPool::new(2).unwrap();
    // The caller's own part panics.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.run(8, &|_, _| panic!("task failed"))
    }));
    let p = r.unwrap_err();
    assert_eq!(p.downcast_ref::<&str>(), Some(&"task failed"));
    // A worker's task panics: the caller keeps its thread busy so the worker joins.
    let mut from_worker = false;
    for _ in 0..50 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(64, &|_, thread| {
                if thread != 0 {
                    panic!("worker task failed");
                }
                std::thread::sleep(Duration::from_micros(200));
            })
        }));
        if let Err(p) = r {
            assert_eq!(p.downcast_ref::<&str>(), Some(&"worker task failed"));
            from_worker = true;
            break;
        }
    }
    assert!(from_worker, "no worker joined in 50 jobs");
    // The pool still runs every task once.
    let h = hits(100);
    pool.run(100, &|t, _| {
        h[t].fetch_add(1, Ordering::Relaxed);
    });
    assert!(all_once(&h));
}

#[test]
fn nested_jobs_run_inline_on_the_tasks_thread() {
    // Every path: a job on workers, the single-task and no-worker inline paths.
    for (threads, n) in [(3, 6), (3, 1), (1, 6)] {
        let pool = ThreadPool::new(threads).unwrap();
        let outer = hits(n);
        let inner = hits(n * 4);
        pool.run(n, &|t, thread| {
            outer[t].fetch_add(1, Ordering::Relaxed);
            pool.run(4, &|u, inner_thread| {
                assert_eq!(inner_thread, thread, "a nested job left the task's thread");
                inner[t * 4 + u].fetch_add(1, Ordering::Relaxed);
            });
            assert!(matches!(
                pool.run_workers(2, &|_: &StealState, _| {}),
                Err(PoolError::Nested)
            ));
        });
        assert!(
            all_once(&outer) && all_once(&inner),
            "{threads} threads, {n} tasks"
        );
        // A job after the nested ones still spreads normally.
        let h = hits(50);
        pool.run(50, &|t, _| {
            h[t].fetch_add(1, Ordering::Relaxed);
        });
        assert!(all_once(&h));
    }
}

#[test]
fn concurrent_callers_are_serialized() {
    let pool = Arc::new(ThreadPool::new(2).unwrap());
    let in_use = Arc::new(hits(2));
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let (pool, in_use) = (Arc::clone(&pool), Arc::clone(&in_use));
            std::thread::spawn(move || {
                for _ in 0..200 {
                    pool.run(16, &|_, thread| {
                        // No two tasks hold one thread index at once, across callers too.
                        assert_eq!(in_use[thread].fetch_add(1, Ordering::SeqCst), 0);
                        std::hint::black_box(0u64..50).sum::<u64>();
                        in_use[thread].fetch_sub(1, Ordering::SeqCst);
                    });
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
}

#[test]
fn bad_thread_counts_are_typed_errors() {
    assert!(matches!(
        ThreadPool::new(0),
        Err(PoolError::BadThreadCount { got: 0, .. })
    ));
    let max = hetero_sme::pool::MAX_THREADS;
    assert!(matches!(
        ThreadPool::new(max + 1),
        Err(PoolError::BadThreadCount { got, .. }) if got == max + 1
    ));
}

#[test]
fn spawn_failure_is_a_typed_error_and_leaves_no_thread() {
    let alive = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (a, s) = (Arc::clone(&alive), Arc::clone(&started));
    let err = ThreadPool::with_spawner(5, move |w| {
        if w.index() == 3 {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "no more threads"));
        }
        let (a, s) = (Arc::clone(&a), Arc::clone(&s));
        std::thread::Builder::new().spawn(move || {
            a.fetch_add(1, Ordering::SeqCst);
            s.fetch_add(1, Ordering::SeqCst);
            w.run();
            a.fetch_sub(1, Ordering::SeqCst);
        })
    })
    .unwrap_err();
    match &err {
        PoolError::Spawn {
            index,
            threads,
            source,
        } => {
            assert_eq!((*index, *threads), (3, 5));
            assert_eq!(source.kind(), io::ErrorKind::WouldBlock);
        }
        e => panic!("unexpected error {e:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("worker thread 3 of a 5-thread pool") && msg.contains("no more threads"),
        "{msg}"
    );
    assert!(std::error::Error::source(&err).is_some());
    // Workers 1 and 2 had started; the failed constructor shut them down and joined them.
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(alive.load(Ordering::SeqCst), 0);
}

#[test]
fn an_os_refusal_is_a_spawn_error() {
    // A stack larger than the address space: the OS refuses the thread, deterministically.
    let err = ThreadPool::with_spawner(2, |w| {
        std::thread::Builder::new()
            .stack_size(1 << 60)
            .spawn(move || w.run())
    })
    .unwrap_err();
    assert!(
        matches!(
            err,
            PoolError::Spawn {
                index: 1,
                threads: 2,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn chunks_cover_out_once_each() {
    let pool = ThreadPool::new(3).unwrap();
    for len in [0, 1, 5, 64, 100, 1001] {
        for chunk in [1, 3, 64, 2000] {
            // Poisoned: every element must be overwritten by its own task.
            let mut out = vec![u32::MAX; len];
            let n_tasks = len.div_ceil(chunk);
            pool.run_chunks_mut(&mut out, chunk, &|task, thread, o: &mut [u32]| {
                assert!(thread < 3);
                assert_eq!(o.len(), chunk.min(len - task * chunk));
                for (i, v) in o.iter_mut().enumerate() {
                    assert_eq!(*v, u32::MAX, "written twice");
                    *v = (task * chunk + i) as u32;
                }
            })
            .unwrap();
            assert!(
                out.iter().enumerate().all(|(i, v)| *v == i as u32),
                "len {len}, chunk {chunk}, {n_tasks} tasks"
            );
        }
    }
    let mut out = vec![7u32; 4];
    assert!(matches!(
        pool.run_chunks_mut(&mut out, 0, &|_, _, _: &mut [u32]| panic!("ran")),
        Err(PoolError::ZeroChunk)
    ));
    assert_eq!(out, [7; 4]);
}

#[test]
fn each_thread_owns_its_scratch() {
    let pool = ThreadPool::new(3).unwrap();
    let per = 16;
    let mut scratch = vec![0usize; 3 * per];
    let h = hits(500);
    pool.run_with_scratch(500, &mut scratch, per, &|t, _thread, s: &mut [usize]| {
        assert_eq!(s.len(), per);
        // Fill, yield, check: a second task holding the same chunk would overwrite it.
        s.fill(t + 1);
        std::thread::yield_now();
        assert!(
            s.iter().all(|&v| v == t + 1),
            "scratch shared between tasks"
        );
        h[t].fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    assert!(all_once(&h));

    // Chunks and scratch together: each (row, head) output from a per-thread score buffer.
    let mut out = vec![f32::NAN; 10 * 8];
    pool.run_chunks_mut_with_scratch(&mut out, 8, &mut scratch, per, &|task, _, o, s| {
        s.fill(task);
        std::thread::yield_now();
        for (i, v) in o.iter_mut().enumerate() {
            *v = (s[i] * 8 + i) as f32;
        }
    })
    .unwrap();
    assert!(out.iter().enumerate().all(|(i, v)| *v == i as f32));

    let mut short = vec![0usize; 3 * per - 1];
    let err = pool
        .run_with_scratch(4, &mut short, per, &|_, _, _: &mut [usize]| panic!("ran"))
        .unwrap_err();
    assert!(matches!(
        err,
        PoolError::BufferTooSmall {
            what: "scratch",
            needed: 48,
            got: 47
        }
    ));
    let mut out = vec![1u8; 4];
    assert!(matches!(
        pool.run_chunks_mut_with_scratch(&mut out, 2, &mut short, usize::MAX, &|_, _, _, _| {}),
        Err(PoolError::Overflow)
    ));
    assert!(short.iter().all(|&v| v == 0) && out == [1; 4]);
}

#[test]
fn column_blocks_cover_a_strided_matrix_once() {
    let pool = ThreadPool::new(3).unwrap();
    for (rows, cols, ld, block) in [
        (1, 100, 100, 32),
        (3, 100, 130, 32),
        (4, 64, 64, 64),
        (5, 7, 9, 3),
        (2, 1, 1, 8),
        (0, 10, 10, 4),
        (3, 0, 5, 4),
    ] {
        // The last row ends at column `cols`: the buffer is exactly (rows - 1) * ld + cols.
        let len = if rows == 0 { 0 } else { (rows - 1) * ld + cols };
        let mut out = vec![-1i64; len];
        pool.run_column_blocks_mut(&mut out, rows, cols, ld, block, &|task, _, mut b| {
            assert_eq!(b.rows(), rows);
            assert_eq!(b.col0(), task * block);
            assert_eq!(b.width(), block.min(cols - task * block));
            for r in 0..rows {
                let (c0, w) = (b.col0(), b.width());
                let row = b.row_mut(r).unwrap();
                assert_eq!(row.len(), w);
                for (j, v) in row.iter_mut().enumerate() {
                    assert_eq!(*v, -1, "written twice");
                    *v = (r * 1000 + c0 + j) as i64;
                }
            }
            assert!(b.row_mut(rows).is_none());
        })
        .unwrap();
        for (i, v) in out.iter().enumerate() {
            let (r, c) = (i / ld, i % ld);
            let want = if c < cols { (r * 1000 + c) as i64 } else { -1 };
            assert_eq!(
                *v, want,
                "rows {rows} cols {cols} ld {ld} block {block}: element {i}"
            );
        }
    }
    let mut out = vec![0u8; 20];
    let never = |_: usize, _: usize, _: hetero_sme::ColumnBlock<'_, u8>| panic!("ran");
    assert!(matches!(
        pool.run_column_blocks_mut(&mut out, 2, 10, 10, 0, &never),
        Err(PoolError::ZeroChunk)
    ));
    assert!(matches!(
        pool.run_column_blocks_mut(&mut out, 2, 10, 9, 4, &never),
        Err(PoolError::BadStride { ld: 9, min: 10 })
    ));
    assert!(matches!(
        pool.run_column_blocks_mut(&mut out, 3, 10, 10, 4, &never),
        Err(PoolError::BufferTooSmall {
            what: "out",
            needed: 30,
            got: 20
        })
    ));
    assert!(matches!(
        pool.run_column_blocks_mut(&mut out, usize::MAX, 10, usize::MAX, 4, &never),
        Err(PoolError::Overflow)
    ));
    assert!(out.iter().all(|&v| v == 0));
}

/// `run_workers_on` runs every task once on at most the threads asked for (clamped to the pool),
/// and a job with fewer tasks than threads takes no more threads than tasks; the workers left
/// out of one job take part in the next full one.
#[test]
fn run_workers_on_uses_at_most_the_threads_asked_for() {
    let pool = ThreadPool::new(4).unwrap();
    for round in 0..50 {
        for (n, threads, most) in [(100, 2, 2), (100, 0, 1), (100, 9, 4), (3, 4, 3), (1, 4, 1)] {
            let h = hits(n);
            let used = hits(4);
            pool.run_workers_on(n, threads, &|ranges: &StealState, thread| {
                used[thread].fetch_add(1, Ordering::Relaxed);
                ranges
                    .run_worker(thread, |t| {
                        h[t].fetch_add(1, Ordering::Relaxed);
                    })
                    .unwrap();
            })
            .unwrap();
            assert!(all_once(&h), "round {round}: {n} tasks on {threads}");
            let joined: Vec<usize> = (0..4)
                .filter(|&t| used[t].load(Ordering::Relaxed) > 0)
                .collect();
            assert!(
                joined.iter().all(|&t| t < most),
                "round {round}: {n} tasks on {threads} threads: threads {joined:?} joined"
            );
        }
    }
}
