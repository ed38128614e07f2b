//! A global allocator that counts the allocations of the threads that ask it to, for tests that
//! prove a path allocates nothing. Each test binary installs it itself:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: sprayswitch_tests::alloc_count::Counting = sprayswitch_tests::alloc_count::Counting;
//! ```
//!
//! Only the measuring thread's own calls count: the test harness's threads (and other tests
//! running in parallel) allocate at any time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards every call to the system allocator; counts `alloc` and `realloc` calls made by a
/// thread between [`measure`]`(true)` and [`measure`]`(false)`.
pub struct Counting;

thread_local! {
    // Const-initialised cells without destructors: reading them never allocates, so the
    // allocator may touch them.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if MEASURING.with(Cell::get) {
        COUNT.with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` or `System.realloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Starts (`true`) or stops counting this thread's allocations.
pub fn measure(on: bool) {
    MEASURING.with(|m| m.set(on));
}

/// Allocations this thread made while measuring, since it started.
pub fn count() -> usize {
    COUNT.with(Cell::get)
}
