//! A counting global allocator for "this path does not allocate" tests.
//!
//! Install [`CountingAlloc`] as the test binary's global allocator, then measure a closure
//! with [`count_allocations`] (or read [`allocations`] before and after):
//!
//! ```ignore
//! #[global_allocator]
//! static A: hetero_tests::CountingAlloc = hetero_tests::CountingAlloc;
//!
//! assert_eq!(hetero_tests::count_allocations(|| hot_path(&mut buf)), 0);
//! ```
//!
//! Allocations and reallocations (not deallocations) made by the *current thread* are counted,
//! so tests running in parallel threads of the same binary do not disturb each other; work a
//! measured path hands to other threads is not counted. Memory allocated by foreign code that
//! does not go through Rust's allocator (e.g. a C++ library) is not counted either. Without
//! `CountingAlloc` installed the count stays 0, so every such test should also check that the
//! counter moves on something that does allocate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // Const-initialized: reading or bumping it never allocates (no lazy initialization).
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

/// Adds one to this thread's count (nothing once the thread's locals are being destroyed).
fn bump() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// The system allocator, counting each `alloc`, `alloc_zeroed` and `realloc` made by the
/// calling thread. Install with `#[global_allocator]`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; the counter is a thread-local
// `Cell` with a const initializer, whose access neither allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size); passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: the caller upholds `alloc_zeroed`'s contract (non-zero size); passed on
        // unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: every allocation goes to `System`, so `ptr` came from `System` with this
        // `layout` (the caller's obligation).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: `ptr`/`layout` came from `System` (every allocation goes there) and the
        // caller upholds `realloc`'s contract on `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (and reallocations) made so far by the current thread under [`CountingAlloc`].
pub fn allocations() -> usize {
    ALLOCS.with(Cell::get)
}

/// How many allocations (and reallocations) the current thread made while running `f`.
pub fn count_allocations(f: impl FnOnce()) -> usize {
    let before = allocations();
    f();
    allocations() - before
}
