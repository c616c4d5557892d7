//! A pool job allocates nothing, on the calling thread or on the workers. This binary's global
//! allocator counts the allocations of the threads that take part in jobs (the test's thread and
//! the pool's workers, marked through `ThreadPool::with_spawner`); `hetero_tests::CountingAlloc`
//! counts only the calling thread, and counting every thread would count the test harness's
//! own thread, which allocates now and then while it waits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hetero_sme::{StealState, ThreadPool};

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialized: reading it never allocates (no lazy initialization).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn bump() {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

struct CountJobThreads;

// SAFETY: forwards to `System` unchanged; the counter is a static atomic and a const-initialized
// thread-local, neither of which allocates or re-enters the allocator.
unsafe impl GlobalAlloc for CountJobThreads {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: the caller upholds `alloc`'s contract; passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: every allocation comes from `System` with this layout (caller's obligation).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: `ptr`/`layout` came from `System`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: CountJobThreads = CountJobThreads;

#[test]
fn jobs_do_not_allocate() {
    COUNTED.with(|c| c.set(true));
    let pool = ThreadPool::with_spawner(3, |w| {
        std::thread::Builder::new().spawn(move || {
            COUNTED.with(|c| c.set(true));
            w.run()
        })
    })
    .unwrap();
    let mut out = vec![0u32; 1000];
    let mut scratch = vec![0u32; 3 * 8];
    let mut cols = vec![0u32; 4 * 100];
    let sum = AtomicUsize::new(0);
    let mut round = |pool: &ThreadPool| {
        pool.run(100, &|t, _| {
            sum.fetch_add(t, Ordering::Relaxed);
        });
        pool.run_workers(50, &|st: &StealState, th| {
            let _ = st.run_worker(th, |t| {
                sum.fetch_add(t, Ordering::Relaxed);
            });
        })
        .unwrap();
        pool.run_chunks_mut(&mut out, 64, &|t, _, o: &mut [u32]| o.fill(t as u32))
            .unwrap();
        pool.run_with_scratch(30, &mut scratch, 8, &|t, _, s: &mut [u32]| s.fill(t as u32))
            .unwrap();
        pool.run_column_blocks_mut(&mut cols, 4, 100, 100, 32, &|t, _, mut b| {
            for r in 0..b.rows() {
                if let Some(row) = b.row_mut(r) {
                    row.fill(t as u32);
                }
            }
        })
        .unwrap();
    };
    // Warm up (first use of thread-locals, lazily initialized runtime state).
    round(&pool);
    // The counter moves on something that allocates.
    let before = ALLOCS.load(Ordering::Relaxed);
    drop(std::hint::black_box(vec![1u8; 64]));
    assert!(ALLOCS.load(Ordering::Relaxed) > before);

    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..200 {
        round(&pool);
    }
    // And after the workers went to sleep on the flag (the futex path).
    std::thread::sleep(Duration::from_millis(20));
    round(&pool);
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(n, 0, "pool jobs allocated {n} times");
    assert!(sum.load(Ordering::Relaxed) > 0);
}
