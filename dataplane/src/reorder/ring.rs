//! A stream's held packets: its ring of `W` PSN slots in the shared pool (a bitmap per ring for
//! the scan), and its far list beyond the window.

// The insert paths pass a packet's PSN, span, length and item separately down to the slot
// that stores them, so that the item is moved exactly once.
#![allow(clippy::too_many_arguments)]

use super::core::{NoHold, ReorderCore, FAR_WINDOWS};
use super::stream::{Insert, Slot, WaitingAck, NO_RING};
use crate::wire::Psn;

impl<T> ReorderCore<T> {
    #[inline]
    pub(super) fn slot_index(&self, ring: u32, psn: Psn) -> usize {
        ring as usize * (self.mask as usize + 1) + (psn.value() & self.mask) as usize
    }

    /// Whether a packet of `len` bytes with `psn` can be held by `stream` now. Takes
    /// nothing: a refusal leaves no ring behind.
    pub(super) fn can_hold(&self, stream: u32, psn: Psn, len: u32) -> Result<(), NoHold> {
        if self.slot_of(stream, psn).is_some() {
            return Err(NoHold::Collision);
        }
        if self.held_bytes + len as usize > self.cfg.max_held_bytes {
            return Err(NoHold::NoRoom);
        }
        if self.streams[stream as usize].ring == NO_RING && self.free_rings.is_empty() {
            return Err(NoHold::NoRoom);
        }
        Ok(())
    }

    /// Counts a refusal to hold.
    pub(super) fn count_no_hold(&mut self, why: NoHold) {
        match why {
            NoHold::Collision => self.totals.slot_collisions += 1,
            NoHold::NoRoom => self.totals.no_room += 1,
        }
        self.totals.passthrough += 1;
    }

    /// Counts `len` bytes more held, switch-wide and for `stream`'s downlink.
    #[inline]
    fn hold_bytes(&mut self, stream: u32, len: u32) {
        self.held_bytes += len as usize;
        self.totals.peak_held_bytes = self.totals.peak_held_bytes.max(self.held_bytes as u64);
        let port = usize::from(self.streams[stream as usize].port);
        if let Some(b) = self.port_held.get_mut(port) {
            *b += u64::from(len);
        }
    }

    /// Counts `len` bytes no longer held.
    #[inline]
    fn unhold_bytes(&mut self, stream: u32, len: u32) {
        self.held_bytes -= len as usize;
        let port = usize::from(self.streams[stream as usize].port);
        if let Some(b) = self.port_held.get_mut(port) {
            *b = b.saturating_sub(u64::from(len));
        }
    }

    /// Puts `item` in its slot. The caller checked [`Self::can_hold`].
    pub(super) fn put(
        &mut self,
        stream: u32,
        item: T,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        len: u32,
        now: u64,
    ) {
        if self.streams[stream as usize].ring == NO_RING {
            let Some(r) = self.free_rings.pop() else {
                // `can_hold` said there was one; keep the packet moving rather than lose it.
                debug_assert!(false, "put without a free ring");
                return;
            };
            self.streams[stream as usize].ring = r;
        }
        self.mark_active(stream);
        let s = &mut self.streams[stream as usize];
        let ring = s.ring;
        if s.held == 0 {
            s.gap_since = now;
        }
        s.held += 1;
        s.in_ring += 1;
        s.stats.held = u64::from(s.held);
        s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
        let depth = u64::from(s.held);
        let idx = self.slot_index(ring, psn);
        self.slots[idx] = Some(Slot {
            item,
            psn,
            span,
            read,
            len,
            arrived: now,
        });
        self.bitmaps[idx / 64] |= 1 << (idx % 64);
        self.hold_bytes(stream, len);
        self.totals.held_total += 1;
        self.totals.held_now += 1;
        self.totals.max_depth = self.totals.max_depth.max(depth);
    }

    /// The held packet with exactly this PSN.
    pub(super) fn occupied(&self, stream: u32, psn: Psn) -> Option<&Slot<T>> {
        self.slot_of(stream, psn).filter(|s| s.psn == psn)
    }

    /// Whatever holds the slot `psn` maps to (possibly another PSN, `W` apart).
    pub(super) fn slot_of(&self, stream: u32, psn: Psn) -> Option<&Slot<T>> {
        let ring = self.streams[stream as usize].ring;
        if ring == NO_RING {
            return None;
        }
        self.slots[self.slot_index(ring, psn)].as_ref()
    }

    /// Takes the packet in `psn`'s slot; returns the ring to the pool when the stream's ring
    /// is empty.
    pub(super) fn take(&mut self, stream: u32, psn: Psn, now: u64) -> Option<Slot<T>> {
        let ring = self.streams[stream as usize].ring;
        if ring == NO_RING {
            return None;
        }
        let idx = self.slot_index(ring, psn);
        let slot = self.slots[idx].take()?;
        self.bitmaps[idx / 64] &= !(1 << (idx % 64));
        self.unhold_bytes(stream, slot.len);
        self.totals.held_now -= 1;
        let s = &mut self.streams[stream as usize];
        s.held -= 1;
        s.in_ring -= 1;
        s.stats.held = u64::from(s.held);
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(slot.arrived));
        }
        if s.in_ring == 0 {
            self.free_rings.push(s.ring);
            s.ring = NO_RING;
        }
        Some(slot)
    }

    /// Counts an ACK taken off a response stream's waiting list.
    pub(super) fn ack_taken(&mut self, stream: u32, a: &WaitingAck<T>, now: u64) {
        self.unhold_bytes(stream, a.len);
        self.totals.held_now -= 1;
        let s = &mut self.streams[stream as usize];
        s.held -= 1;
        s.stats.held = u64::from(s.held);
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(a.arrived));
        }
    }

    /// Counts an ACK put on a response stream's waiting list.
    pub(super) fn ack_held(&mut self, stream: u32, len: u32, now: u64) {
        self.mark_active(stream);
        let s = &mut self.streams[stream as usize];
        if s.held == 0 {
            s.gap_since = now;
        }
        s.held += 1;
        s.stats.held = u64::from(s.held);
        s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
        let depth = u64::from(s.held);
        self.hold_bytes(stream, len);
        self.totals.held_total += 1;
        self.totals.held_now += 1;
        self.totals.acks_held += 1;
        self.totals.max_depth = self.totals.max_depth.max(depth);
    }

    /// Offset (0..W) from `from` of the next held slot of `stream`, scanning the ring's
    /// bitmap word by word.
    pub(super) fn next_held(&self, stream: u32, from: Psn) -> Option<u32> {
        let ring = self.streams[stream as usize].ring;
        if ring == NO_RING {
            return None;
        }
        let w = self.mask + 1;
        let base = ring as usize * w as usize;
        let start = from.value() & self.mask;
        let mut off = 0u32;
        while off < w {
            let pos = (start + off) & self.mask;
            let bit = base + pos as usize;
            let word = self.bitmaps[bit / 64] >> (bit % 64);
            // Bits left in this word before the ring wraps or the word ends.
            let room = (64 - (bit % 64) as u32).min(w - pos);
            let masked = if room >= 64 {
                word
            } else {
                word & ((1u64 << room) - 1)
            };
            if masked != 0 {
                let o = off + masked.trailing_zeros();
                return (o < w).then_some(o);
            }
            off += room;
        }
        None
    }

    pub(super) fn count_in_order(&mut self, stream: u32) {
        self.streams[stream as usize].stats.released += 1;
        self.totals.released_in_order += 1;
    }

    pub(super) fn count_late(&mut self, stream: u32) {
        self.streams[stream as usize].stats.late += 1;
        self.totals.late += 1;
    }

    /// Counts a copy of a held packet, which is discarded.
    pub(super) fn duplicate(&mut self, stream: u32) -> Insert {
        self.streams[stream as usize].stats.duplicates += 1;
        self.totals.duplicates += 1;
        Insert::Duplicate
    }

    /// The first held packet of `stream` at or after `from` (ring or far list), or one of
    /// the far list behind `from`.
    pub(super) fn next_held_psn(&self, stream: u32, from: Psn) -> Option<Psn> {
        // The PSN the slot really holds (the bitmap finds the slot; a slot of `from + off` can
        // hold a PSN a window apart when the expected PSN moved back).
        let ring = self
            .next_held(stream, from)
            .and_then(|off| self.slot_of(stream, from.add(off)).map(|sl| sl.psn));
        let far = self.streams[stream as usize].far.front().map(|f| f.psn);
        match (ring, far) {
            (Some(r), Some(f)) => Some(
                if f.forward_from(from) < r.forward_from(from) || f.is_before(from) {
                    f
                } else {
                    r
                },
            ),
            (r, f) => r.or(f),
        }
    }

    /// Takes the held packet with exactly `psn`, from the ring or the far list.
    pub(super) fn take_held(&mut self, stream: u32, psn: Psn, now: u64) -> Option<Slot<T>> {
        if self.occupied(stream, psn).is_some() {
            return self.take(stream, psn, now);
        }
        let s = &mut self.streams[stream as usize];
        let at = s.far.iter().position(|f| f.psn == psn)?;
        let slot = s.far.remove(at)?;
        s.held -= 1;
        s.stats.held = u64::from(s.held);
        self.unhold_bytes(stream, slot.len);
        self.totals.held_now -= 1;
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(slot.arrived));
        }
        Some(slot)
    }

    /// Whether `stream` holds a packet with exactly `psn`.
    pub(super) fn holds(&self, stream: u32, psn: Psn) -> bool {
        self.occupied(stream, psn).is_some()
            || self.streams[stream as usize]
                .far
                .iter()
                .any(|f| f.psn == psn)
    }

    /// Holds a packet beyond the ring's window, in PSN order; false when the list or the byte
    /// budget is full.
    pub(super) fn put_far(
        &mut self,
        stream: u32,
        slot: Slot<T>,
        counted: bool,
    ) -> Result<(), Slot<T>> {
        let s = &mut self.streams[stream as usize];
        if s.far.len() >= FAR_WINDOWS * (self.mask as usize + 1)
            || (!counted && self.held_bytes + slot.len as usize > self.cfg.max_held_bytes)
        {
            return Err(slot);
        }
        let at = s
            .far
            .rposition(|f| f.psn.is_before(slot.psn))
            .map_or(0, |i| i + 1);
        if !counted {
            if s.held == 0 {
                s.gap_since = slot.arrived;
            }
            s.held += 1;
            s.stats.held = u64::from(s.held);
            s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
            let depth = u64::from(s.held);
            self.hold_bytes(stream, slot.len);
            self.totals.held_total += 1;
            self.totals.held_now += 1;
            self.totals.max_depth = self.totals.max_depth.max(depth);
        }
        let s = &mut self.streams[stream as usize];
        s.far.insert(at, slot);
        self.mark_active(stream);
        Ok(())
    }

    /// Moves ring entries outside `[e, e + W)` to the far list (after the expected PSN moved
    /// back or was chosen by learning), so that the ring's scan order is PSN order again.
    /// Entries that do not fit the far list are released (late).
    pub(super) fn normalize_ring(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        let ring = self.streams[stream as usize].ring;
        if ring == NO_RING {
            return;
        }
        let e = self.streams[stream as usize].expected;
        let w = self.mask + 1;
        let base = ring as usize * w as usize;
        for pos in 0..w as usize {
            let idx = base + pos;
            if self.bitmaps[idx / 64] & (1 << (idx % 64)) == 0 {
                continue;
            }
            let Some(psn) = self.slots[idx].as_ref().map(|sl| sl.psn) else {
                continue;
            };
            let d = psn.distance(e);
            if d >= 0 && (d as u32) <= self.mask {
                continue;
            }
            // Out of the ring without counting a release: it is still held.
            let Some(slot) = self.slots[idx].take() else {
                continue;
            };
            self.bitmaps[idx / 64] &= !(1 << (idx % 64));
            let st = &mut self.streams[stream as usize];
            st.in_ring -= 1;
            if st.in_ring == 0 {
                self.free_rings.push(st.ring);
                st.ring = NO_RING;
            }
            if let Err(slot) = self.put_far(stream, slot, true) {
                let st = &mut self.streams[stream as usize];
                st.held -= 1;
                st.stats.held = u64::from(st.held);
                self.unhold_bytes(stream, slot.len);
                self.totals.held_now -= 1;
                if self.hold_ns.len() < 65_536 {
                    self.hold_ns.push(now.saturating_sub(slot.arrived));
                }
                self.count_late(stream);
                out.push(slot.item);
            }
            if self.streams[stream as usize].ring == NO_RING {
                break;
            }
        }
    }

    /// Releases every packet `stream` holds (ring and far list), in PSN order from its
    /// expected PSN; returns the PSN after the last one released.
    pub(super) fn flush_ring(&mut self, stream: u32, now: u64, out: &mut Vec<T>) -> Option<Psn> {
        let mut after = None;
        let mut from = self.streams[stream as usize].expected;
        while let Some(q) = self.next_held_psn(stream, from) {
            let Some(slot) = self.take_held(stream, q, now) else {
                break;
            };
            after = Some(slot.psn.add(slot.span));
            out.push(slot.item);
            if !q.is_before(from) {
                from = q.add(1);
            }
        }
        after
    }
}
