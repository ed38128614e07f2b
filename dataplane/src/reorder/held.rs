//! One stream at work: the stream, the pool its packets are held in, the counters, where what
//! it releases goes, and the time. The request and response directions
//! ([`super::request::RequestStream`], [`super::response::ResponseStream`]) are built on it;
//! this file has what both do: release in order or late, hold, take, flush.

use std::ops::DerefMut;

use super::config::ReorderConfig;
use super::pool::{NoHold, SlotPool};
use super::stream::{Insert, Slot, Stream};
use super::totals::ReorderTotals;
use crate::wire::Psn;

/// One stream with everything an operation on it touches.
pub(super) struct Held<'a, T> {
    /// The stream.
    pub(super) s: &'a mut Stream<T>,
    /// Where its packets are held.
    pub(super) pool: &'a mut SlotPool<T>,
    /// The core's counters.
    pub(super) totals: &'a mut ReorderTotals,
    /// The core's limits.
    pub(super) cfg: &'a ReorderConfig,
    /// What it releases, in order of release.
    pub(super) out: &'a mut Vec<T>,
    /// The time.
    pub(super) now: u64,
}

impl<T> Held<'_, T> {
    /// The ring's index mask (`W - 1`).
    #[inline]
    pub(super) fn mask(&self) -> u32 {
        self.cfg.mask()
    }

    /// Releases `item` in order.
    #[inline]
    pub(super) fn in_order(&mut self, item: T) {
        self.out.push(item);
        self.s.stats.released += 1;
        self.totals.released_in_order += 1;
    }

    /// Releases `item` behind the expected PSN (a retransmission, a copy of a released one).
    #[inline]
    pub(super) fn late(&mut self, item: T) {
        self.out.push(item);
        self.s.stats.late += 1;
        self.totals.late += 1;
    }

    /// Counts a copy of a held packet, which is discarded.
    pub(super) fn duplicate(&mut self) -> Insert {
        self.s.stats.duplicates += 1;
        self.totals.duplicates += 1;
        Insert::Duplicate
    }

    /// Passes `item` on without holding it (`why` it could not be).
    pub(super) fn pass(&mut self, item: T, why: NoHold) -> Insert {
        self.out.push(item);
        match why {
            NoHold::Collision => self.totals.slot_collisions += 1,
            NoHold::NoRoom => self.totals.no_room += 1,
        }
        self.totals.passthrough += 1;
        Insert::Passthrough
    }

    /// Holds `slot` in its ring slot if it can, else passes it on.
    pub(super) fn hold_or_pass(&mut self, slot: Slot<T>) -> Insert {
        match self.can_hold(slot.psn, slot.len) {
            Ok(()) => {
                self.put(slot);
                Insert::Held
            }
            Err(why) => self.pass(slot.item, why),
        }
    }

    /// Whether a packet of `len` bytes with `psn` can be held in the ring now.
    #[inline]
    pub(super) fn can_hold(&self, psn: Psn, len: u32) -> Result<(), NoHold> {
        self.pool.can_hold(self.s, psn, len)
    }

    /// Holds `slot` in its ring slot (the caller checked [`Held::can_hold`]).
    #[inline]
    pub(super) fn put(&mut self, slot: Slot<T>) {
        self.pool.put(self.s, slot);
    }

    /// Holds `slot` in the far list, in PSN order; gives it back when there is no room.
    #[inline]
    pub(super) fn put_far(&mut self, slot: Slot<T>) -> Result<(), Slot<T>> {
        self.pool.put_far(self.s, slot, false)
    }

    /// The first held packet at or after `from` (ring or far list), or one of the far list
    /// behind `from`.
    #[inline]
    pub(super) fn next_held_psn(&self, from: Psn) -> Option<Psn> {
        self.pool.next_held_psn(self.s, from)
    }

    /// Takes the held packet with exactly `psn`, from the ring or the far list.
    #[inline]
    pub(super) fn take_held(&mut self, psn: Psn) -> Option<Slot<T>> {
        self.pool.take_held(self.s, psn, self.now)
    }

    /// Takes the packet in `psn`'s ring slot if it holds exactly `psn`.
    #[inline]
    pub(super) fn take_ring(&mut self, psn: Psn) -> Option<Slot<T>> {
        self.pool.occupied(self.s, psn)?;
        self.pool.take(self.s, psn, self.now)
    }

    /// Whether the ring holds exactly `psn`.
    #[inline]
    pub(super) fn in_ring(&self, psn: Psn) -> bool {
        self.pool.occupied(self.s, psn).is_some()
    }

    /// Whether `psn` is held (ring or far list).
    #[inline]
    pub(super) fn holds(&self, psn: Psn) -> bool {
        self.pool.holds(self.s, psn)
    }

    /// The PSN of the far list's first packet.
    #[inline]
    pub(super) fn far_front(&self) -> Option<Psn> {
        self.s.far.front().map(|f| f.psn)
    }

    /// Moves what left the ring's window (the expected PSN moved) to the far list; what does
    /// not fit goes out late.
    pub(super) fn normalize(&mut self) {
        let late = self.pool.normalize(self.s, self.now, self.out);
        self.totals.late += late;
    }

    /// Releases everything held, in PSN order from the expected PSN; returns the PSN after the
    /// last one released.
    pub(super) fn flush(&mut self) -> Option<Psn> {
        self.pool.flush(self.s, self.now, self.out)
    }

    /// Releases the held packets before `end` behind the far list's front, late.
    pub(super) fn release_far_before(&mut self, end: Psn) {
        while let Some(f) = self.far_front() {
            if !f.is_before(end) {
                break;
            }
            let Some(slot) = self.take_held(f) else {
                break;
            };
            self.late(slot.item);
        }
    }

    /// Releases late every held packet from `from` up to (not including) `end`, in PSN order.
    pub(super) fn release_late_between(&mut self, from: Psn, end: Psn) {
        while let Some(q) = self.next_held_psn(from) {
            if !q.is_before(end) {
                break;
            }
            let Some(slot) = self.take_held(q) else {
                break;
            };
            self.late(slot.item);
        }
    }

    /// A new gap opens at the front when anything is still held: time it from now.
    #[inline]
    pub(super) fn restart_gap_timer(&mut self) {
        if self.s.held > 0 {
            self.s.gap_since = self.now;
        }
    }
}

/// What a direction does at the two edges of the placement both share ([`place`]): a packet at
/// the expected PSN is released and the expected PSN moves past it (by its span for a request,
/// to the next unfilled response PSN for a response), then what follows it is drained; and when
/// a packet beyond the window does not fit the far list, held packets go in order, skipping
/// gaps, until it fits.
pub(super) trait Direction<'a, T: 'a>: DerefMut<Target = Held<'a, T>> {
    /// Releases `slot`, at the expected PSN, and what it makes due.
    fn release_expected(&mut self, slot: Slot<T>);

    /// Releases held packets in order, skipping gaps, until `psn` fits the window; returns
    /// how many went.
    fn make_room(&mut self, psn: Psn) -> u32;
}

/// Places `slot` on an active stream, the same way in both directions: at the expected PSN
/// released; behind it late; already held a duplicate; within the window held (or passed when
/// it cannot be); beyond it held in the far list, or, when that is full, room made by
/// releasing in order ([`overflow`]).
pub(super) fn place<'a, T: 'a, D: Direction<'a, T>>(d: &mut D, slot: Slot<T>) -> Insert {
    let psn = slot.psn;
    let ahead = psn.distance(d.s.expected);
    if ahead == 0 {
        d.release_expected(slot);
        return Insert::Released;
    }
    if ahead < 0 {
        d.late(slot.item);
        return Insert::Late;
    }
    if d.holds(psn) {
        return d.duplicate();
    }
    if ahead as u32 <= d.mask() {
        return d.hold_or_pass(slot);
    }
    match d.put_far(slot) {
        Ok(()) => Insert::Held,
        Err(slot) => overflow(d, slot),
    }
}

/// A packet beyond the window that the far list cannot hold: room is made, then it is placed
/// where the expected PSN now is (released, late when it was released on the way or is a copy
/// now, else held).
pub(super) fn overflow<'a, T: 'a, D: Direction<'a, T>>(d: &mut D, slot: Slot<T>) -> Insert {
    let psn = slot.psn;
    let released = d.make_room(psn);
    d.s.stats.overflows += 1;
    d.totals.overflows += 1;
    let e = d.s.expected;
    if psn == e {
        d.release_expected(slot);
    } else if psn.is_before(e) || d.holds(psn) {
        d.late(slot.item);
    } else {
        d.hold_or_pass(slot);
    }
    Insert::Overflowed { released }
}
