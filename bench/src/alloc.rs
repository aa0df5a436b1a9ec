//! A counting global allocator for the `ringwire-bench` binary: the report shows heap
//! allocations per query in the timed window, so "the steady state does not allocate" is
//! measured on every run instead of believed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // Const-initialised and without a destructor, so using it inside the allocator cannot
    // itself allocate or recurse.
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

#[inline]
fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// Counts `alloc`, `alloc_zeroed` and `realloc` calls, then defers to the system allocator.
/// One relaxed add per allocation: free when nothing allocates, which is the point.
pub struct CountingAllocator;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations so far, or `None` when [`CountingAllocator`] is not the global allocator (the
/// count is then still zero: any Rust program has allocated by the time it asks).
pub fn allocations() -> Option<u64> {
    match ALLOCATIONS.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n),
    }
}

/// Allocations by the calling thread so far (tests: other threads' allocations do not count).
pub fn thread_allocations() -> u64 {
    THREAD_ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}
