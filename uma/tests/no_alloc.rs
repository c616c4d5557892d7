//! A counting global allocator (`hetero_tests::CountingAlloc`) proves acquire, release, split,
//! access and raw allocate nothing (only `Pool::new` does).

#![cfg(not(loom))]

use hetero_tests::{allocations, CountingAlloc};
use hetero_uma::{MatrixLayout, Pool, PoolConfig, SLOT_ALIGN};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

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
