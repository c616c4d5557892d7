//! Property test: random acquire / release / split / resolve sequences against a simple model
//! (a set of held slots and their generations). Bad operations must fail with the right error
//! and change nothing (the slot's bytes are checked).

#![cfg(not(loom))]

use std::collections::HashMap;

use hetero_uma::{Handle, Pool, PoolConfig, SlotId, UmaError, SLOT_ALIGN};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Release(usize),
    Split(usize, usize, usize, usize, usize),
    ResolveOld(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Acquire),
        2 => any::<usize>().prop_map(Op::Release),
        3 => (any::<usize>(), 0..=SLOT_ALIGN + 8, 0..=SLOT_ALIGN + 8, 0..=SLOT_ALIGN + 8, 0..=SLOT_ALIGN + 8)
            .prop_map(|(h, a, b, c, d)| Op::Split(h, a, b, c, d)),
        1 => any::<usize>().prop_map(Op::ResolveOld),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn pool_matches_model(slots in 1usize..6, ops in proptest::collection::vec(op(), 1..60)) {
        let p = Pool::new(PoolConfig { slots, slot_size: SLOT_ALIGN }).unwrap();
        let mut held: Vec<Handle> = Vec::new();
        let mut gens: HashMap<usize, u32> = HashMap::new();
        let mut old_ids: Vec<SlotId> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire => match p.acquire() {
                    Ok(h) => {
                        prop_assert!(held.len() < slots);
                        prop_assert!(held.iter().all(|o| o.slot() != h.slot()));
                        prop_assert_eq!(h.generation(), *gens.get(&h.slot()).unwrap_or(&0));
                        held.push(h);
                    }
                    Err(e) => {
                        prop_assert_eq!(e, UmaError::Exhausted);
                        prop_assert_eq!(held.len(), slots);
                    }
                },
                Op::Release(i) => {
                    if held.is_empty() { continue; }
                    let h = held.swap_remove(i % held.len());
                    old_ids.push(h.id());
                    let slot = h.slot();
                    p.release(h).unwrap();
                    *gens.entry(slot).or_insert(0) += 1;
                }
                Op::Split(i, a, b, c, d) => {
                    if held.is_empty() { continue; }
                    let k = i % held.len();
                    let h = &mut held[k];
                    // Tag the slot so a failed split can be seen to change nothing.
                    p.bytes_mut(h).unwrap().fill(k as u8 + 1);
                    let (r0, r1) = (a..b, c..d);
                    let valid = a <= b && c <= d && b <= SLOT_ALIGN && d <= SLOT_ALIGN;
                    let overlap = !r0.is_empty() && !r1.is_empty() && a < d && c < b;
                    match p.split_bytes(h, [r0.clone(), r1.clone()]) {
                        Ok([mut x, mut y]) => {
                            prop_assert!(valid && !overlap);
                            prop_assert_eq!((x.offset(), x.len()), (a, r0.len()));
                            x.as_mut_bytes().fill(0xAA);
                            y.as_mut_bytes().fill(0xBB);
                            let bytes = p.bytes(h).unwrap();
                            for (j, &v) in bytes.iter().enumerate() {
                                let want = if r0.contains(&j) { 0xAA } else if r1.contains(&j) { 0xBB } else { k as u8 + 1 };
                                prop_assert_eq!(v, want);
                            }
                        }
                        Err(e) => {
                            prop_assert!(!valid || overlap, "{:?}", e);
                            prop_assert!(p.bytes(h).unwrap().iter().all(|&v| v == k as u8 + 1));
                        }
                    }
                }
                Op::ResolveOld(i) => {
                    if old_ids.is_empty() { continue; }
                    let id = old_ids[i % old_ids.len()];
                    prop_assert_eq!(p.resolve(id), Err(UmaError::StaleHandle));
                }
            }
            prop_assert_eq!(p.free_slots(), slots - held.len());
            for h in &held {
                prop_assert_eq!(p.resolve(h.id()), Ok(h.slot()));
            }
        }
        for h in held { p.release(h).unwrap(); }
        prop_assert!(p.close().is_clean());
    }
}
