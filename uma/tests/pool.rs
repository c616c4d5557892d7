//! Pool behaviour: bad input, exhaustion, stale and foreign handles, views, raw access, leak
//! report, multi-thread stress.

#![cfg(not(loom))]
// One-range splits are arrays of one range on purpose (the API takes `[Range; K]`).
#![allow(clippy::single_range_in_vec_init)]

use std::sync::Arc;

use hetero_uma::{MatrixLayout, Pool, PoolConfig, UmaError, SLOT_ALIGN};

fn pool(slots: usize) -> Pool {
    Pool::new(PoolConfig {
        slots,
        slot_size: 2 * SLOT_ALIGN,
    })
    .unwrap()
}

#[test]
fn bad_configs() {
    let e = |slots, slot_size| Pool::new(PoolConfig { slots, slot_size }).err();
    assert_eq!(e(0, 4096), Some(UmaError::ZeroSlots));
    assert_eq!(e(1, 0), Some(UmaError::ZeroSlotSize));
    assert_eq!(e(1, 4097), Some(UmaError::MisalignedSlotSize(4097)));
    assert_eq!(e(1 << 20, 4096), Some(UmaError::TooManySlots(1 << 20)));
    assert_eq!(e(2, usize::MAX & !4095), Some(UmaError::TooLarge));
    assert_eq!(e(1024, 1 << 32), Some(UmaError::TooLarge));
}

#[test]
fn exhaustion_generations_and_foreign_handles() {
    let p = pool(3);
    let q = pool(3);
    let a = p.acquire().unwrap();
    let b = p.acquire().unwrap();
    let c = p.acquire().unwrap();
    assert_eq!(p.acquire(), Err(UmaError::Exhausted));
    assert_eq!(p.free_slots(), 0);
    let mut slots = [a.slot(), b.slot(), c.slot()];
    slots.sort();
    assert_eq!(slots, [0, 1, 2]);

    // A handle of another pool is refused and handed back unchanged.
    let foreign = q.acquire().unwrap();
    let err = p.release(foreign).unwrap_err();
    assert_eq!(err.error, UmaError::ForeignHandle);
    assert_eq!(p.bytes(&err.handle).err(), Some(UmaError::ForeignHandle));
    q.release(err.handle).unwrap();

    // Ids go stale when the slot is released, even once it is reused.
    let id = a.id();
    assert_eq!(p.resolve(id), Ok(a.slot()));
    let gen = a.generation();
    p.release(a).unwrap();
    assert_eq!(p.resolve(id), Err(UmaError::StaleHandle));
    let a2 = p.acquire().unwrap();
    assert_eq!(a2.slot(), id.slot());
    assert_eq!(a2.generation(), gen.wrapping_add(1));
    assert_eq!(p.resolve(id), Err(UmaError::StaleHandle));
    assert_eq!(q.resolve(a2.id()), Err(UmaError::ForeignHandle));

    let r = p.leak_report();
    assert_eq!(r.held, 3);
    for h in [a2, b, c] {
        p.release(h).unwrap();
    }
    assert!(p.close().is_clean());
    assert!(q.close().is_clean());
}

#[test]
fn leaks_are_reported_not_panicked() {
    let p = pool(4);
    let h = p.acquire().unwrap();
    let slot = h.slot() as u32;
    drop(h); // never released
    let r = p.close();
    assert_eq!(r.held, 1);
    assert_eq!(r.first[0], slot);
    // Dropping with a held slot logs to stderr and does not panic.
    let p = pool(2);
    let h = p.acquire().unwrap();
    drop(h);
    drop(p);
}

#[test]
fn raw_access_alignment_and_fd() {
    let p = pool(4);
    let hs: Vec<_> = (0..4).map(|_| p.acquire().unwrap()).collect();
    for h in &hs {
        let r = p.raw(h).unwrap();
        assert_eq!(r.ptr as usize % SLOT_ALIGN, 0);
        assert_eq!(r.len, 2 * SLOT_ALIGN);
        assert_eq!(r.offset as usize % SLOT_ALIGN, 0);
        assert_eq!(r.flag_ptr as usize % 4, 0);
        assert_eq!(r.flag_offset % 128, 0);
        assert!(r.offset as usize + r.len <= p.mapping_len());
        // Under Miri the pool is a heap block (no FFI), so there is no fd.
        #[cfg(all(target_os = "linux", not(miri)))]
        assert!(r.fd.is_some());
    }
    for h in hs {
        p.release(h).unwrap();
    }
}

#[cfg(all(target_os = "linux", not(miri)))]
#[test]
fn fd_shares_the_bytes() {
    use std::os::unix::fs::FileExt;
    let p = pool(2);
    let mut h = p.acquire().unwrap();
    p.bytes_mut(&mut h).unwrap()[..4].copy_from_slice(b"uma!");
    let r = p.raw(&h).unwrap();
    let fd = p.fd().unwrap().try_clone_to_owned().unwrap();
    let file = std::fs::File::from(fd);
    let mut buf = [0u8; 4];
    file.read_exact_at(&mut buf, r.offset).unwrap();
    assert_eq!(&buf, b"uma!");
    // The flag word sits at its advertised offset.
    p.flag(&h).unwrap().publish(7).unwrap();
    file.read_exact_at(&mut buf, r.flag_offset).unwrap();
    assert_eq!(u32::from_ne_bytes(buf), 7);
    p.release(h).unwrap();
}

#[test]
fn column_split_two_producers_one_output() {
    // EdgeAgent's layout: C [rows x cols] f32 row-major; CPU writes cols [0, n), "GPU" [n, N).
    let p = pool(1);
    let mut h = p.acquire().unwrap();
    let (rows, cols, n) = (16, 100, 37);
    let layout = MatrixLayout::dense(rows, cols, 4);
    {
        let [mut cpu, mut gpu] = p.split_columns(&mut h, layout, [0..n, n..cols]).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                for r in 0..rows {
                    for (j, x) in cpu.row_mut(r).unwrap().chunks_exact_mut(4).enumerate() {
                        x.copy_from_slice(&((r * cols + j) as f32).to_ne_bytes());
                    }
                }
            });
            s.spawn(|| {
                for r in 0..rows {
                    for (j, x) in gpu.row_mut(r).unwrap().chunks_exact_mut(4).enumerate() {
                        x.copy_from_slice(&((r * cols + n + j) as f32).to_ne_bytes());
                    }
                }
            });
        });
    }
    let bytes = p.bytes(&h).unwrap();
    for i in 0..rows * cols {
        let v = f32::from_ne_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(v, i as f32);
    }
    // Bad splits change nothing.
    assert_eq!(
        p.split_columns(&mut h, layout, [0..50, 40..100]).err(),
        Some(UmaError::Overlap(0, 1))
    );
    assert_eq!(
        p.split_columns(&mut h, layout, [0..101]).err(),
        Some(UmaError::OutOfBounds { end: 101, len: 100 })
    );
    let too_big = MatrixLayout::dense(10_000, 100, 4);
    assert_eq!(
        p.split_columns(&mut h, too_big, [0..1]).err(),
        Some(UmaError::BadLayout)
    );
    {
        let [mut c] = p.split_columns(&mut h, layout, [n..cols]).unwrap();
        let row = c.row_f32_mut(rows - 1).unwrap();
        assert_eq!(row.len(), cols - n);
        assert_eq!(row[0], ((rows - 1) * cols + n) as f32);
        assert!(c.row_f32_mut(rows).is_none());
    }
    assert_eq!(p.f32s(&h).unwrap()[3], 3.0);
    p.f32s_mut(&mut h).unwrap()[3] = 3.5;
    assert_eq!(p.f32s(&h).unwrap().len(), p.slot_size() / 4);
    let [mut v] = p.split_bytes(&mut h, [4..12]).unwrap();
    assert_eq!(v.as_mut_f32().unwrap(), &[1.0, 2.0]);
    p.f32s_mut(&mut h).unwrap()[3] = 3.0;
    let [mut odd] = p.split_bytes(&mut h, [1..5]).unwrap();
    assert_eq!(odd.as_mut_f32().err(), Some(UmaError::BadCast));
    p.release(h).unwrap();
}

#[test]
fn stress_no_slot_granted_twice() {
    const THREADS: usize = 4;
    const ITERS: usize = if cfg!(miri) { 50 } else { 20_000 };
    let p = Arc::new(pool(3));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                let mut got = 0;
                for i in 0..ITERS {
                    let Ok(mut h) = p.acquire() else {
                        std::thread::yield_now();
                        continue;
                    };
                    got += 1;
                    let tag = ((t << 24) | (i & 0xFF_FFFF)) as u32;
                    let b = p.bytes_mut(&mut h).unwrap();
                    for w in b[..256].chunks_exact_mut(4) {
                        w.copy_from_slice(&tag.to_ne_bytes());
                    }
                    std::hint::spin_loop();
                    for w in b[..256].chunks_exact(4) {
                        assert_eq!(u32::from_ne_bytes(w.try_into().unwrap()), tag);
                    }
                    p.release(h).unwrap();
                }
                got
            })
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(total > 0);
    assert_eq!(p.free_slots(), 3);
}

#[test]
fn barrier_releases_consumer_after_both_column_producers() {
    // The whole EdgeAgent/HeteroInfer pattern: one output slot, two producers writing
    // disjoint column ranges, a dependency barrier, the consumer reads with no merge copy.
    use hetero_sync::{next_epoch, DependencyBarrier, Producer, WaitConfig};
    let p = pool(1);
    let mut h = p.acquire().unwrap();
    let (rows, cols, split) = (8, 64, 20);
    let layout = MatrixLayout::dense(rows, cols, 4);
    let barrier = DependencyBarrier::new(2).unwrap();
    let cfg = WaitConfig {
        producer: Producer::Thread,
        timeout: std::time::Duration::from_secs(10),
        ..Default::default()
    };
    let mut e = 0;
    for round in 0..50u32 {
        e = next_epoch(e);
        {
            let views = p
                .split_columns(&mut h, layout, [0..split, split..cols])
                .unwrap();
            std::thread::scope(|s| {
                for (id, mut v) in views.into_iter().enumerate() {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let c0 = v.cols().start;
                        for r in 0..rows {
                            for (j, x) in v.row_mut(r).unwrap().chunks_exact_mut(4).enumerate() {
                                let val = (round as usize * 10_000 + r * cols + c0 + j) as f32;
                                x.copy_from_slice(&val.to_ne_bytes());
                            }
                        }
                        barrier.arrive(id as u32, e).unwrap();
                    });
                }
                barrier.wait(e, &cfg, None).unwrap();
            });
        }
        let bytes = p.bytes(&h).unwrap();
        for i in 0..rows * cols {
            let v = f32::from_ne_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
            assert_eq!(v, (round as usize * 10_000 + i) as f32);
        }
    }
    p.release(h).unwrap();
}

#[test]
fn blocks_split_one_output_into_rectangles() {
    use hetero_uma::Block;
    let pool = Pool::new(PoolConfig {
        slots: 1,
        slot_size: SLOT_ALIGN,
    })
    .unwrap();
    let mut h = pool.acquire().unwrap();
    let layout = MatrixLayout::dense(4, 8, 4);
    // An L-shape: rows 0..2 columns 0..3 | rows 0..2 columns 3..8 | rows 2..4 all columns.
    {
        let [mut a, mut b, mut c] = pool
            .split_blocks(
                &mut h,
                layout,
                [
                    Block {
                        rows: 0..2,
                        cols: 0..3,
                    },
                    Block {
                        rows: 0..2,
                        cols: 3..8,
                    },
                    Block {
                        rows: 2..4,
                        cols: 0..8,
                    },
                ],
            )
            .unwrap();
        assert_eq!((a.rows(), b.rows(), c.rows()), (2, 2, 2));
        assert_eq!((b.cols(), b.offset(), c.offset()), (3..8, 12, 64));
        for (v, tag) in [(&mut a, 1.0f32), (&mut b, 2.0), (&mut c, 3.0)] {
            for r in 0..v.rows() {
                v.row_f32_mut(r).unwrap().fill(tag);
            }
        }
    }
    let f = pool.f32s(&h).unwrap();
    for r in 0..4 {
        for col in 0..8 {
            let want = if r >= 2 {
                3.0
            } else if col < 3 {
                1.0
            } else {
                2.0
            };
            assert_eq!(f[r * 8 + col], want, "({r}, {col})");
        }
    }
    // Overlapping rectangles, ranges out of bounds and reversed ranges are refused.
    let bad = pool.split_blocks(
        &mut h,
        layout,
        [
            Block {
                rows: 0..3,
                cols: 0..4,
            },
            Block {
                rows: 2..4,
                cols: 3..8,
            },
        ],
    );
    assert_eq!(bad.err(), Some(hetero_uma::UmaError::Overlap(0, 1)));
    let oob = pool.split_blocks(
        &mut h,
        layout,
        [Block {
            rows: 0..5,
            cols: 0..1,
        }],
    );
    assert!(matches!(
        oob.err(),
        Some(hetero_uma::UmaError::OutOfBounds { .. })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let rev = pool.split_blocks(
        &mut h,
        layout,
        [Block {
            rows: 2..1,
            cols: 0..1,
        }],
    );
    assert!(matches!(
        rev.err(),
        Some(hetero_uma::UmaError::InvalidRange { .. })
    ));
    // Empty blocks (a processor given nothing) are fine anywhere.
    let ok = pool.split_blocks(
        &mut h,
        layout,
        [
            Block {
                rows: 4..4,
                cols: 0..8,
            },
            Block {
                rows: 0..4,
                cols: 0..8,
            },
        ],
    );
    assert!(ok.is_ok());
    pool.release(h).unwrap();
}
