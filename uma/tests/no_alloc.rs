//! A counting global allocator proves acquire, release, split, access and raw allocate
//! nothing (only `Pool::new` does).

#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hetero_uma::{MatrixLayout, Pool, PoolConfig, SLOT_ALIGN};

struct Counting;

thread_local! {
    // Const-initialised: reading it never allocates.
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the counter is thread-local
// and touching it does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        COUNT.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        COUNT.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocations() -> usize {
    COUNT.with(|c| c.get())
}

#[test]
fn hot_paths_do_not_allocate() {
    let p = Pool::new(PoolConfig {
        slots: 4,
        slot_size: 4 * SLOT_ALIGN,
    })
    .unwrap();
    let before = allocations();
    for round in 0..100u32 {
        let mut a = p.acquire().unwrap();
        let b = p.acquire().unwrap();
        {
            let [mut x, y] = p.split_bytes(&mut a, [0..64, 64..128]).unwrap();
            x.as_mut_bytes()[0] = 1;
            assert_eq!(y.len(), 64);
        }
        {
            let l = MatrixLayout::dense(8, 16, 4);
            let [mut c, g] = p.split_columns(&mut a, l, [0..5, 5..16]).unwrap();
            c.row_mut(7).unwrap()[0] = 2;
            c.row_f32_mut(6).unwrap()[0] = 1.0;
            assert_eq!(g.cols(), 5..16);
        }
        assert!(p.split_bytes(&mut a, [0..64, 32..128]).is_err());
        p.flag(&b).unwrap().publish(round + 1).unwrap();
        let _ = p.raw(&b).unwrap();
        let _ = p.resolve(b.id()).unwrap();
        let _ = p.bytes_mut(&mut a).unwrap();
        p.f32s_mut(&mut a).unwrap()[0] = 0.5;
        p.release(a).unwrap();
        p.release(b).unwrap();
    }
    let mut all: [Option<hetero_uma::Handle>; 4] = Default::default();
    for h in all.iter_mut() {
        *h = Some(p.acquire().unwrap());
    }
    assert!(p.acquire().is_err());
    for h in all.iter_mut() {
        p.release(h.take().unwrap()).unwrap();
    }
    let _ = p.leak_report();
    assert_eq!(allocations() - before, 0);
}
