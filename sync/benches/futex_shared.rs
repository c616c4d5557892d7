//! What the flag pays for shared futexes (no `FUTEX_PRIVATE_FLAG`, so a flag in memory shared
//! with another process wakes across it), side by side with private ones in one run:
//!
//! - `wake, no waiter`: one `FUTEX_WAKE` on a word nobody waits on (what a publish costs when a
//!   waiter announced itself but had not slept yet), ns per call;
//! - `hand-off`: two threads blocking in turn, each `FUTEX_WAIT`ing on its word until the other
//!   stores a new value and wakes it: the round trip (two block + wake pairs), µs.
//!
//! Each on three words: private futex on heap memory (what the flag did before), shared futex on
//! the same heap memory, shared futex on a `MAP_SHARED` memfd page (uma's slot flags). Variants
//! interleave round by round so machine load drifts hit all alike; medians of the batches.
//!
//! `cargo bench -p hetero-sync --bench futex_shared` (optional args: wake calls per batch,
//! hand-offs per batch, batches). Linux only.

#[cfg(target_os = "linux")]
mod linux {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;

    #[derive(Clone, Copy)]
    pub struct Word {
        pub ptr: *const AtomicU32,
        pub private: bool,
        pub name: &'static str,
    }
    // SAFETY: the words live for the whole run (heap blocks leaked / a mapping never unmapped)
    // and are only accessed atomically.
    unsafe impl Send for Word {}
    // SAFETY: as above.
    unsafe impl Sync for Word {}

    impl Word {
        fn get(&self) -> &AtomicU32 {
            // SAFETY: live for the run, aligned, atomic-only (see the Send impl).
            unsafe { &*self.ptr }
        }
        fn op(&self, base: i32) -> i32 {
            if self.private {
                base | libc::FUTEX_PRIVATE_FLAG
            } else {
                base
            }
        }
        fn wait(&self, expected: u32) {
            // SAFETY: a live aligned u32; FUTEX_WAIT only compares it.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.get().as_ptr(),
                    self.op(libc::FUTEX_WAIT),
                    expected,
                    std::ptr::null::<libc::timespec>(),
                )
            };
        }
        fn wake(&self) {
            // SAFETY: a live aligned u32; FUTEX_WAKE does not dereference it.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.get().as_ptr(),
                    self.op(libc::FUTEX_WAKE),
                    i32::MAX,
                )
            };
        }
    }

    /// Two words for one variant: heap (private or shared futex) or a memfd page.
    pub fn words(kind: u32) -> (Word, Word) {
        let (ptr, private, name): (*mut u8, bool, &'static str) = match kind {
            0 | 1 => {
                let b: &'static mut [AtomicU32; 64] =
                    Box::leak(Box::new([const { AtomicU32::new(0) }; 64]));
                (
                    b.as_mut_ptr().cast(),
                    kind == 0,
                    if kind == 0 {
                        "private futex, heap"
                    } else {
                        "shared futex, heap"
                    },
                )
            }
            _ => {
                // SAFETY: a plain syscall with a static name.
                let fd = unsafe { libc::memfd_create(c"futex-bench".as_ptr(), 0) };
                assert!(fd >= 0, "memfd_create");
                // SAFETY: our fd; one page.
                assert_eq!(unsafe { libc::ftruncate(fd, 4096) }, 0);
                // SAFETY: a fresh shared mapping of our fd, never unmapped.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        0,
                    )
                };
                assert_ne!(p, libc::MAP_FAILED);
                (p.cast(), false, "shared futex, memfd MAP_SHARED")
            }
        };
        // Two words 128 bytes apart (own cache lines).
        let a = Word {
            ptr: ptr.cast(),
            private,
            name,
        };
        let b = Word {
            // SAFETY: 128 bytes into a block of at least 256.
            ptr: unsafe { ptr.add(128) }.cast(),
            private,
            name,
        };
        (a, b)
    }

    /// ns per FUTEX_WAKE with no waiter.
    pub fn wake_cost(w: Word, calls: u32) -> f64 {
        let t = Instant::now();
        for _ in 0..calls {
            w.wake();
        }
        t.elapsed().as_nanos() as f64 / calls as f64
    }

    /// µs per round trip: this thread wakes the partner on `a` and blocks on `b` until it
    /// answers.
    pub fn hand_off(a: Word, b: Word, rounds: u32) -> f64 {
        a.get().store(0, Ordering::SeqCst);
        b.get().store(0, Ordering::SeqCst);
        let partner = std::thread::spawn(move || {
            for i in 1..=rounds {
                while a.get().load(Ordering::Acquire) != i {
                    a.wait(i - 1);
                }
                b.get().store(i, Ordering::Release);
                b.wake();
            }
        });
        let t = Instant::now();
        for i in 1..=rounds {
            a.get().store(i, Ordering::Release);
            a.wake();
            while b.get().load(Ordering::Acquire) != i {
                b.wait(i - 1);
            }
        }
        let us = t.elapsed().as_nanos() as f64 / 1e3 / rounds as f64;
        partner.join().expect("partner");
        us
    }

    pub fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}

#[cfg(target_os = "linux")]
fn main() {
    use linux::*;
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let calls = args.first().copied().unwrap_or(200_000);
    let rounds = args.get(1).copied().unwrap_or(5_000);
    let batches = args.get(2).copied().unwrap_or(9) as usize;
    let variants: Vec<(Word, Word)> = (0..3).map(words).collect();
    let mut wake = vec![Vec::new(); 3];
    let mut hand = vec![Vec::new(); 3];
    for _ in 0..batches {
        for (i, &(a, b)) in variants.iter().enumerate() {
            wake[i].push(wake_cost(a, calls));
            hand[i].push(hand_off(a, b, rounds));
        }
    }
    println!(
        "{batches} batches of {calls} wakes and {rounds} hand-offs, interleaved; medians ({} CPUs)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<32} {:>22} {:>22}",
        "word", "wake, no waiter (ns)", "hand-off round (us)"
    );
    let (w0, h0) = (median(&mut wake[0]), median(&mut hand[0]));
    for i in 0..3 {
        let (w, h) = (median(&mut wake[i]), median(&mut hand[i]));
        println!(
            "{:<32} {:>14.1} ({:>4.2}x) {:>14.2} ({:>4.2}x)",
            variants[i].0.name,
            w,
            w / w0,
            h,
            h / h0
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("futex_shared: Linux only");
}
