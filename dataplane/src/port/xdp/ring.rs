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
    _map: SocketMapping,
    _t: PhantomData<T>,
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
        let at = |o: u64| unsafe { NonNull::new_unchecked(base.add(o as usize)) };
        Ok(Raw {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            flags: at(off.flags).cast(),
            entries: at(off.desc).cast(),
            mask: size - 1,
            _map: map,
            _t: PhantomData,
        })
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
