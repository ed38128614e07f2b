//! Software prefetch: start loading a cache line that the code reads a little later, so that
//! the loads of several packets' state overlap instead of each waiting for memory in turn. A
//! hint only: nothing changes but when the line arrives (a prefetch never faults); on targets
//! without the instruction it does nothing. A leaf: it imports nothing of the crate.

/// The most lines [`all`] asks for: four, the size of a reorder stream.
pub const MAX_LINES: usize = 4;

/// Starts loading the cache line at `p` into every cache level.
#[inline(always)]
fn at(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `prefetch` only hints the cache: it reads nothing the program sees and never
        // faults, whatever the address; SSE, which it needs, is part of every x86_64 target.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts loading the cache line that holds the start of `*v`.
#[inline(always)]
pub fn line<T>(v: &T) {
    at((v as *const T).cast::<u8>());
}

/// Starts loading every cache line the start of `*v` spans, up to [`MAX_LINES`] of 64 bytes
/// (the addresses stay inside `*v`).
#[inline(always)]
pub fn all<T>(v: &T) {
    let base = (v as *const T).cast::<u8>();
    let n = std::mem::size_of::<T>().div_ceil(64).min(MAX_LINES);
    for k in 0..n {
        at(base.wrapping_add(k * 64));
    }
}
