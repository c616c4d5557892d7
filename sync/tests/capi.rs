//! The C ABI from C (feature `capi-tests`): `tests/c/sync_capi_test.c` (compiled by build.rs with
//! the `cc` crate) drives every exported function; random operation sequences run through the
//! C API and through the Rust API must give the same results. Run: `cargo test --profile ci -p
//! hetero-sync --features capi-tests --test capi`. The same C runs standalone under ASan + UBSan in
//! `scripts/capi.sh test` (CI stage `capi`).
#![cfg(all(feature = "capi-tests", not(loom)))]

use hetero_sync::capi::*;
use hetero_sync::{Arrival, CompletionFlag, DependencyBarrier, SyncError};

#[link(name = "hetero_sync_ctest", kind = "static")]
extern "C" {
    fn ctest_sync_sequence(
        start: u32,
        producers: u32,
        ops: *const u32,
        n: usize,
        results: *mut i64,
    ) -> i32;
    fn ctest_sync_threads(rounds: u32) -> i32;
    fn ctest_sync_bad_inputs() -> i32;
    fn ctest_sync_cross_process(timeout_s: f64) -> i32;
    fn ctest_sync_shared_site(rounds: u32) -> i32;
    fn example_sync_handoff() -> i32;
}

const OP_PUBLISH: u32 = 0;
const OP_EPOCH: u32 = 1;
const OP_IS_REACHED: u32 = 2;
const OP_ARRIVE: u32 = 3;
const OP_BARRIER_EPOCH: u32 = 4;

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u32 {
        (self.next() % n) as u32
    }
}

fn status(e: SyncError) -> i64 {
    -(match e {
        SyncError::Timeout { .. } => HETERO_SYNC_TIMEOUT,
        SyncError::StaleEpoch { .. } => HETERO_SYNC_STALE_EPOCH,
        SyncError::InvalidEpoch(_) => HETERO_SYNC_INVALID_EPOCH,
        SyncError::EpochNotOpen { .. } => HETERO_SYNC_EPOCH_NOT_OPEN,
        SyncError::ZeroProducers | SyncError::TooManyProducers(_) => HETERO_SYNC_BAD_PRODUCER_COUNT,
        SyncError::UnknownProducer { .. } => HETERO_SYNC_UNKNOWN_PRODUCER,
        SyncError::DuplicatePublish { .. } => HETERO_SYNC_DUPLICATE_PUBLISH,
    } as i64)
}

#[test]
fn random_sequences_from_c_equal_the_rust_api() {
    let mut rng = Rng(0x27_2026);
    for round in 0..300 {
        // Near the 31-bit wrap now and then.
        let start = if round % 5 == 0 {
            0x7FFF_FFF0
        } else {
            rng.below(1000)
        };
        let producers = 1 + rng.below(4);
        let (flag, bar) = (
            CompletionFlag::with_epoch(start),
            DependencyBarrier::with_epoch(producers, start).expect("barrier"),
        );
        let n = 40;
        let mut ops = Vec::new();
        let mut want = Vec::new();
        for _ in 0..n {
            let op = rng.below(5);
            // Epochs around the current ones (stale, current, next, far, bit 31 set).
            let base = if op == OP_ARRIVE {
                bar.completed_epoch()
            } else {
                flag.epoch()
            };
            let e = match rng.below(6) {
                0 => base.wrapping_sub(1),
                1 => base,
                2 | 3 => base.wrapping_add(1),
                4 => base.wrapping_add(1 + rng.below(5)),
                _ => base | 0x8000_0000,
            };
            let (arg, r) = match op {
                OP_PUBLISH => (e, flag.publish(e).map_or_else(status, |()| 0)),
                OP_EPOCH => (0, flag.epoch() as i64),
                OP_IS_REACHED => (e, flag.is_reached(e) as i64),
                OP_ARRIVE => {
                    let p = rng.below(producers as u64 + 1);
                    let e27 = e & 0x7FF_FFFF;
                    let r = match bar.arrive(p, e27) {
                        Ok(Arrival::Waiting { remaining }) => remaining as i64,
                        Ok(Arrival::Completed) => 0,
                        Err(err) => status(err),
                    };
                    (p << 27 | e27, r)
                }
                _ => (0, bar.completed_epoch() as i64),
            };
            ops.extend([op, arg]);
            want.push(r);
        }
        // The sequence's barrier epochs must fit 27 bits: skip starts near the wrap for it.
        if start > 0x7FF_FFFF
            && ops
                .chunks(2)
                .any(|o| o[0] == OP_ARRIVE || o[0] == OP_BARRIER_EPOCH)
        {
            continue;
        }
        let mut got = vec![i64::MIN; n];
        // SAFETY: n op pairs, n results.
        let rc =
            unsafe { ctest_sync_sequence(start, producers, ops.as_ptr(), n, got.as_mut_ptr()) };
        assert_eq!(rc, 0, "round {round}");
        assert_eq!(
            got, want,
            "round {round}: start {start}, {producers} producers, ops {ops:?}"
        );
    }
    let _ = OP_BARRIER_EPOCH;
}

#[test]
fn threads_hand_data_over_through_flag_and_barrier() {
    // SAFETY: no arguments beyond the count.
    assert_eq!(unsafe { ctest_sync_threads(100) }, 0);
}

#[test]
fn bad_input_gives_a_status_and_changes_nothing() {
    assert_eq!(
        // SAFETY: no arguments.
        unsafe { ctest_sync_bad_inputs() },
        0,
        "stderr names the failed checks"
    );
}

#[test]
fn readme_example_runs() {
    // SAFETY: no arguments.
    assert_eq!(unsafe { example_sync_handoff() }, 0);
    let readme = include_str!("../README.md");
    let example = include_str!("c/sync_example.c");
    let body = &example[example.find("#include <pthread.h>").expect("example start")..];
    assert!(
        readme.contains(body),
        "README's From C example differs from tests/c/sync_example.c"
    );
}

/// A flag in a memfd page shared with a forked child that maps the fd again (at another
/// address): the child blocks in `hetero_sync_flag_wait_blocking`, the parent publishes, the
/// child must wake and see the data (tests/c/sync_process_test.c). With process-private
/// futexes the child never woke and this failed after its 5 s timeout.
#[test]
fn a_publish_wakes_a_blocked_waiter_in_another_process() {
    // SAFETY: no pointers; the C side forks a child that only waits and exits.
    let rc = unsafe { ctest_sync_cross_process(5.0) };
    assert_eq!(rc, 0, "see stderr: 7 = the blocked child was never woken");
}

/// One wait site shared by two waiting pthreads while a third reads it (tests/c/sync_capi_test.c
/// `ctest_sync_shared_site`): every wait succeeds and every snapshot is a whole state. Before
/// the site had its own lock, two waits on one site made two `&mut` to it.
#[test]
fn one_site_shared_by_two_waiting_threads() {
    // SAFETY: no pointers.
    assert_eq!(unsafe { ctest_sync_shared_site(100) }, 0, "see stderr");
}
