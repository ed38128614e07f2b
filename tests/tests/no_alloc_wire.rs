//! Classification and ICRC checks allocate nothing, on good and on malformed frames: a counting
//! global allocator watches the calls made by the measuring thread (the test harness's own
//! threads allocate at any time and must not count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use sprayswitch::wire::{classify, Pmtu};
use sprayswitch_tests::{data, read_capture};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts allocations made
// while the current thread measures.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.with(Cell::get) {
            // Relaxed: a plain event counter, read after the measured section on the same thread.
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if MEASURING.with(Cell::get) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn classify_and_icrc_do_not_allocate() {
    let mut frames = Vec::new();
    for name in [
        "rxe-rc-ops.pcap",
        "rxe-reorder-nak-ipv6.pcap",
        "rxe-ud-uc.pcap",
    ] {
        frames.extend(read_capture(&data(name)));
    }
    // Malformed variants: cut at every 7th length, and with a corrupted opcode.
    let mut bad = Vec::new();
    for f in frames.iter().take(20) {
        for n in (0..f.len()).step_by(7) {
            bad.push(f[..n].to_vec());
        }
        let mut g = f.clone();
        g[42] = 0x3F;
        bad.push(g);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    MEASURING.with(|m| m.set(true));
    let mut ok = 0usize;
    let mut icrc_ok = 0usize;
    let mut errors = 0usize;
    for f in frames.iter().chain(bad.iter()) {
        match classify(f, Pmtu::DEFAULT) {
            Ok(c) => {
                ok += 1;
                if let Some(r) = c.roce() {
                    if r.verify_icrc(f, c.eth.l3_offset) == Ok(true) {
                        icrc_ok += 1;
                    }
                }
            }
            Err(_) => errors += 1,
        }
    }
    MEASURING.with(|m| m.set(false));
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(allocs, 0, "classification allocated {allocs} times");
    assert!(
        ok >= 230 && icrc_ok >= 230 && errors > 100,
        "{ok} {icrc_ok} {errors}"
    );
}
