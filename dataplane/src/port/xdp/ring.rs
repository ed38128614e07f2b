//! The four AF_XDP rings (fill, completion, RX, TX) as single-producer/single-consumer halves
//! over the kernel's shared memory, used as transactions: reserve, write, commit (a dropped
//! reservation publishes nothing); peek, read, release.
//!
//! A ring is a power-of-two array of entries plus a producer and a consumer index, both
//! free-running `u32`s. We are the producer of the fill and TX rings and the consumer of the
//! RX and completion rings; the kernel is the other side. Ownership is enforced by type:
//! [`Producer`] only advances the producer index, [`Consumer`] only the consumer index, and
//! neither is `Clone`.

use std::io;
use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::abi::{RingOffset, XDP_RING_NEED_WAKEUP};
use crate::port::sys::SocketMapping;

/// The indices and entries of one mapped ring.
#[derive(Debug)]
struct Raw<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    entries: NonNull<T>,
    mask: u32,
    _map: Backing,
    _t: PhantomData<T>,
}

/// The memory a ring lives in: the kernel's mapping, or (in tests) a heap block shared by the
/// two halves of an in-memory ring, which stands in for the kernel's side.
#[derive(Debug)]
enum Backing {
    Socket(#[allow(dead_code)] SocketMapping),
    #[cfg(test)]
    Heap(#[allow(dead_code)] std::sync::Arc<Box<[std::sync::atomic::AtomicU64]>>),
}

// SAFETY: the ring memory is shared with the kernel only; the one userspace half that owns this
// value is the only userspace accessor, so moving it to another thread is sound.
unsafe impl<T: Send> Send for Raw<T> {}

impl<T: Copy> Raw<T> {
    /// Maps the ring of `fd` at page offset `pgoff` with `size` entries, laid out as `off`.
    fn map(fd: &OwnedFd, pgoff: i64, size: u32, off: &RingOffset) -> io::Result<Raw<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = SocketMapping::map(fd, len, pgoff)?;
        let base = map.as_ptr();
        // SAFETY: the offsets come from the kernel (XDP_MMAP_OFFSETS) and lie inside `len`;
        // the kernel aligns the indices for atomic access.
        Ok(unsafe { Raw::at(base, size, off, Backing::Socket(map)) })
    }

    /// The ring at `base` laid out as `off`, kept alive by `backing`.
    ///
    /// # Safety
    /// `base + off.*` must lie inside `backing`'s memory with room for `size` entries at
    /// `off.desc`, the indices aligned for `AtomicU32` and the entries for `T`.
    unsafe fn at(base: *mut u8, size: u32, off: &RingOffset, backing: Backing) -> Raw<T> {
        // SAFETY: the caller's promise: every offset is inside the live memory.
        let at = |o: u64| unsafe { NonNull::new_unchecked(base.add(o as usize)) };
        Raw {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            entries: at(off.desc).cast(),
            mask: size - 1,
            _map: backing,
            _t: PhantomData,
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping, aligned by the kernel.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { self.consumer.as_ref() }
    }

    fn need_wakeup(&self) -> bool {
        // SAFETY: as `producer`. Relaxed: the flag is a hint that is re-checked on every call;
        // a stale read costs one extra or one late wakeup, never correctness.
        unsafe { self.flags.as_ref() }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    fn write(&self, idx: u32, v: T) {
        // SAFETY: `idx & mask` < size, inside the entries array; the slot is ours (between the
        // consumer's index and our unpublished producer index).
        unsafe {
            self.entries
                .as_ptr()
                .add((idx & self.mask) as usize)
                .write_volatile(v)
        }
    }

    fn read(&self, idx: u32) -> T {
        // SAFETY: `idx & mask` < size; the slot was published by the kernel's producer index
        // (acquire-loaded) and is not yet released by us.
        unsafe {
            self.entries
                .as_ptr()
                .add((idx & self.mask) as usize)
                .read_volatile()
        }
    }
}

/// Our producing half of a ring (fill or TX).
#[derive(Debug)]
pub struct Producer<T> {
    raw: Raw<T>,
    size: u32,
    cached_prod: u32,
    cached_cons: u32,
}

impl<T: Copy> Producer<T> {
    /// Maps a ring we produce into.
    pub(super) fn map(fd: &OwnedFd, pgoff: i64, size: u32, off: &RingOffset) -> io::Result<Self> {
        let raw = Raw::map(fd, pgoff, size, off)?;
        // Relaxed: nothing has been produced yet; these are the starting values.
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_cons = raw.consumer().load(Ordering::Relaxed);
        Ok(Producer {
            raw,
            size,
            cached_prod,
            cached_cons,
        })
    }

    /// Slots free for us to write now (re-reading the kernel's consumer index if the cached
    /// one shows fewer than `want`).
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.cached_prod.wrapping_sub(self.cached_cons);
        if free >= want {
            return free;
        }
        // Acquire: the kernel's reads of the entries it consumed happen before we overwrite them.
        self.cached_cons = self.raw.consumer().load(Ordering::Acquire);
        self.size - self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Reserves up to `want` slots. Nothing is visible to the kernel until
    /// [`Reservation::commit`].
    pub fn reserve(&mut self, want: u32) -> Reservation<'_, T> {
        let n = self.free(want).min(want);
        Reservation {
            ring: self,
            len: n,
            written: 0,
        }
    }

    /// Entries published and not yet consumed by the kernel.
    pub fn pending(&mut self) -> u32 {
        // Acquire: as in `free`.
        self.cached_cons = self.raw.consumer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// True when the kernel asks to be woken (sendto for TX, poll/recvfrom for fill).
    pub fn needs_wakeup(&self) -> bool {
        self.raw.need_wakeup()
    }
}

/// Slots reserved in a [`Producer`]; written in order, published by `commit`.
#[derive(Debug)]
pub struct Reservation<'a, T: Copy> {
    ring: &'a mut Producer<T>,
    len: u32,
    written: u32,
}

impl<T: Copy> Reservation<'_, T> {
    /// Slots reserved.
    pub fn capacity(&self) -> u32 {
        self.len
    }

    /// Slots still free in the reservation.
    pub fn remaining(&self) -> u32 {
        self.len - self.written
    }

    /// Writes the next entry. Returns false when the reservation is full.
    pub fn push(&mut self, v: T) -> bool {
        if self.written == self.len {
            return false;
        }
        self.ring
            .raw
            .write(self.ring.cached_prod.wrapping_add(self.written), v);
        self.written += 1;
        true
    }

    /// Publishes what was written and returns how many entries that was.
    pub fn commit(self) -> u32 {
        let n = self.written;
        if n > 0 {
            self.ring.cached_prod = self.ring.cached_prod.wrapping_add(n);
            // Release: the entries written above are visible to the kernel before the index
            // that hands them over.
            self.ring
                .raw
                .producer()
                .store(self.ring.cached_prod, Ordering::Release);
        }
        n
    }
}

/// Our consuming half of a ring (RX or completion).
#[derive(Debug)]
pub struct Consumer<T> {
    raw: Raw<T>,
    cached_prod: u32,
    cached_cons: u32,
}

impl<T: Copy> Consumer<T> {
    /// Maps a ring we consume from.
    pub(super) fn map(fd: &OwnedFd, pgoff: i64, size: u32, off: &RingOffset) -> io::Result<Self> {
        let raw = Raw::map(fd, pgoff, size, off)?;
        // Relaxed: starting values, nothing produced yet that we could miss.
        let cached_prod = raw.producer().load(Ordering::Relaxed);
        let cached_cons = raw.consumer().load(Ordering::Relaxed);
        Ok(Consumer {
            raw,
            cached_prod,
            cached_cons,
        })
    }

    /// Entries ready (re-reading the kernel's producer index when the cache shows none).
    pub fn ready(&mut self) -> u32 {
        let n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n > 0 {
            return n;
        }
        // Acquire: the kernel's writes of the entries happen before we read them.
        self.cached_prod = self.raw.producer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Reads up to `max` entries into `out` (appending) and releases them to the kernel.
    pub fn drain_into(&mut self, max: u32, out: &mut impl Extend<T>) -> u32 {
        let n = self.ready().min(max);
        let start = self.cached_cons;
        out.extend((0..n).map(|i| self.raw.read(start.wrapping_add(i))));
        self.release(n);
        n
    }

    /// Calls `f` on up to `max` entries, then releases them. Returns the count.
    pub fn consume(&mut self, max: u32, mut f: impl FnMut(T)) -> u32 {
        let n = self.ready().min(max);
        for i in 0..n {
            f(self.raw.read(self.cached_cons.wrapping_add(i)));
        }
        self.release(n);
        n
    }

    fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cached_cons = self.cached_cons.wrapping_add(n);
        // Release: our reads of the entries finish before the kernel may overwrite them.
        self.raw
            .consumer()
            .store(self.cached_cons, Ordering::Release);
    }

    /// True when the kernel asks to be woken.
    pub fn needs_wakeup(&self) -> bool {
        self.raw.need_wakeup()
    }
}

/// An in-memory ring of `size` entries (a power of two) whose indices start at `start`: our
/// producing half, and a consuming half that plays the kernel's side (for fill and TX rings) or
/// ours (for RX and completion rings, with the producer playing the kernel). Entries are at most
/// 8 bytes (`u64` descriptors and frame addresses, as the fill and completion rings carry).
#[cfg(test)]
pub(super) fn in_memory<T: Copy>(size: u32, start: u32) -> (Producer<T>, Consumer<T>, Flags) {
    assert!(size.is_power_of_two() && std::mem::size_of::<T>() <= 8);
    // Words: producer, consumer, flags, then the entries from word 8 (64 bytes, as the
    // kernel puts them on their own cache line).
    // Atomic words: the two halves write through shared pointers into this block, which is
    // allowed only for memory with interior mutability.
    let words: std::sync::Arc<Box<[std::sync::atomic::AtomicU64]>> = std::sync::Arc::new(
        (0..8 + size as usize)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect(),
    );
    let base = words.as_ptr() as *mut u8;
    let off = RingOffset {
        producer: 0,
        consumer: 8,
        flags: 16,
        desc: 64,
    };
    let raw = || {
        // SAFETY: every offset and `size` entries of at most 8 bytes lie inside `words`,
        // which each half keeps alive; words are 8-aligned.
        unsafe { Raw::<T>::at(base, size, &off, Backing::Heap(words.clone())) }
    };
    let (p, c) = (raw(), raw());
    p.producer().store(start, Ordering::Relaxed);
    p.consumer().store(start, Ordering::Relaxed);
    // SAFETY: as above; only the flags word is used.
    let flags = Flags(unsafe { Raw::<u8>::at(base, size, &off, Backing::Heap(words.clone())) });
    let producer = Producer {
        raw: p,
        size,
        cached_prod: start,
        cached_cons: start,
    };
    let consumer = Consumer {
        raw: c,
        cached_prod: start,
        cached_cons: start,
    };
    (producer, consumer, flags)
}

/// The flags word of an in-memory ring, as the kernel sets it.
#[cfg(test)]
pub(super) struct Flags(Raw<u8>);

#[cfg(test)]
impl Flags {
    fn set_need_wakeup(&self, on: bool) {
        // SAFETY: as `Raw::producer`: inside the live block, aligned.
        let f = unsafe { self.0.flags.as_ref() };
        f.store(if on { XDP_RING_NEED_WAKEUP } else { 0 }, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_publishes_only_what_it_commits() {
        let (mut p, mut c, _) = in_memory::<u64>(8, 0);
        {
            let mut r = p.reserve(3);
            assert_eq!((r.capacity(), r.remaining()), (3, 3));
            assert!(r.push(10) && r.push(11));
            // Dropped here without a commit.
        }
        assert_eq!(c.ready(), 0, "a dropped reservation publishes nothing");
        let mut r = p.reserve(3);
        assert!(r.push(20) && r.push(21) && r.push(22));
        assert!(!r.push(23), "full reservation");
        assert_eq!(r.commit(), 3);
        let mut got = Vec::new();
        assert_eq!(c.drain_into(8, &mut got), 3);
        assert_eq!(
            got,
            [20, 21, 22],
            "the dropped writes were overwritten, in order"
        );
    }

    #[test]
    fn a_full_ring_takes_nothing_until_the_other_side_releases() {
        let (mut p, mut c, _) = in_memory::<u64>(4, 0);
        let mut r = p.reserve(10);
        assert_eq!(r.capacity(), 4, "never more than the ring");
        for v in 0..4 {
            assert!(r.push(v));
        }
        r.commit();
        assert_eq!((p.free(1), p.pending()), (0, 4));
        assert_eq!(p.reserve(1).capacity(), 0);
        let mut seen = Vec::new();
        assert_eq!(c.consume(2, |v| seen.push(v)), 2);
        assert_eq!(p.free(1), 2, "the released slots are free again");
        assert_eq!(p.pending(), 2);
        assert_eq!(seen, [0, 1]);
    }

    #[test]
    fn indices_wrap_around_u32_without_losing_or_repeating_an_entry() {
        // Start just below the wrap: the free-running indices cross u32::MAX mid-stream.
        let (mut p, mut c, _) = in_memory::<u64>(8, u32::MAX - 5);
        let mut next = 0u64;
        let mut got = Vec::new();
        for round in 0..20u32 {
            let mut r = p.reserve(1 + round % 8);
            while r.push(next) {
                next += 1;
            }
            r.commit();
            c.drain_into(1 + round % 5, &mut got);
            assert!(p.free(0) <= 8 && p.pending() <= 8);
        }
        c.drain_into(8, &mut got);
        assert_eq!(got, (0..next).collect::<Vec<_>>());
        assert_eq!(p.pending(), 0);
        assert_eq!(p.free(8), 8);
    }

    #[test]
    fn ready_and_free_reread_the_other_sides_index_only_when_the_cache_falls_short() {
        let (mut p, mut c, _) = in_memory::<u64>(8, 7);
        let mut r = p.reserve(2);
        r.push(1);
        r.push(2);
        r.commit();
        assert_eq!(c.ready(), 2);
        // Published after `ready` cached 2: the cache still answers 2 until it is used up.
        let mut r = p.reserve(1);
        r.push(3);
        r.commit();
        assert_eq!(c.ready(), 2);
        let mut got = Vec::new();
        c.drain_into(2, &mut got);
        assert_eq!(c.ready(), 1, "re-read once the cached entries are gone");
        c.drain_into(1, &mut got);
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn need_wakeup_follows_the_flag() {
        let (p, c, flags) = in_memory::<u64>(4, 0);
        assert!(!p.needs_wakeup() && !c.needs_wakeup());
        flags.set_need_wakeup(true);
        assert!(p.needs_wakeup() && c.needs_wakeup());
        flags.set_need_wakeup(false);
        assert!(!p.needs_wakeup());
    }
}
