//! Where held packets live: a pool of rings of `W` PSN slots (a stream takes a ring only while
//! it holds packets; a bitmap per ring for the scan), each stream's far list beyond its window,
//! and the bytes held, in all and per downlink.
//!
//! Every method takes the stream whose packets it touches: the ring number and the far list
//! are the stream's, the slots the pool's. The pool counts what it holds ([`PoolCounts`]) and
//! the hold time of every packet it gives back.

use super::config::{ReorderConfig, FAR_WINDOWS};
use super::stream::{Slot, Stream, WaitingAck, NO_RING};
use crate::wire::Psn;

/// Why a packet cannot be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoHold {
    /// Its slot holds a PSN one window apart.
    Collision,
    /// No ring or byte budget left.
    NoRoom,
}

/// What the pool holds and has held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PoolCounts {
    /// Packets held now (ring, far list and waiting ACKs).
    pub(super) held_now: u64,
    /// Packets held at some point.
    pub(super) held_total: u64,
    /// Most packets one stream held at once.
    pub(super) max_depth: u64,
    /// Most bytes held at once.
    pub(super) peak_bytes: u64,
    /// ACKs held behind a missing READ response.
    pub(super) acks_held: u64,
}

/// Hold times kept for the owner between two collections.
const HOLD_TIMES_MAX: usize = 65_536;

/// The slot pool of one core.
pub(super) struct SlotPool<T> {
    slots: Vec<Option<Slot<T>>>,
    bitmaps: Vec<u64>,
    free_rings: Vec<u32>,
    mask: u32,
    max_bytes: usize,
    bytes: usize,
    /// Bytes held per downlink (indexed by the stream's port).
    port_bytes: Vec<u64>,
    counts: PoolCounts,
    /// Hold times (ns) of packets released since the owner last took them.
    hold_ns: Vec<u64>,
}

impl<T> SlotPool<T> {
    /// A pool of `cfg.max_rings` rings of `cfg.window` slots, allocated up front.
    pub(super) fn new(cfg: &ReorderConfig) -> SlotPool<T> {
        let w = cfg.window as usize;
        let mut slots = Vec::with_capacity(cfg.max_rings * w);
        slots.resize_with(cfg.max_rings * w, || None);
        SlotPool {
            slots,
            bitmaps: vec![0; cfg.max_rings * w / 64],
            free_rings: (0..cfg.max_rings as u32).rev().collect(),
            mask: cfg.mask(),
            max_bytes: cfg.max_held_bytes,
            bytes: 0,
            port_bytes: vec![0],
            counts: PoolCounts::default(),
            hold_ns: Vec::with_capacity(1024),
        }
    }

    /// Makes room in the per-downlink byte counts for port `id`.
    pub(super) fn add_port(&mut self, id: u16) {
        if self.port_bytes.len() <= usize::from(id) {
            self.port_bytes.resize(usize::from(id) + 1, 0);
        }
    }

    #[inline]
    fn slot_index(&self, ring: u32, psn: Psn) -> usize {
        ring as usize * (self.mask as usize + 1) + (psn.value() & self.mask) as usize
    }

    /// What it holds and has held.
    pub(super) fn counts(&self) -> PoolCounts {
        self.counts
    }

    /// Bytes held now.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes held now for downlink `port`.
    pub(super) fn port_bytes(&self, port: u16) -> u64 {
        self.port_bytes.get(usize::from(port)).copied().unwrap_or(0)
    }

    /// Rings free now (a ring returns when its stream holds nothing in it).
    pub(super) fn free_rings(&self) -> usize {
        self.free_rings.len()
    }

    /// Appends the hold times (ns) of packets released since the last call to `out`.
    pub(super) fn take_hold_times(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.hold_ns);
    }

    /// Approximate bytes of the slots and bitmaps.
    pub(super) fn state_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<Slot<T>>>() + self.bitmaps.capacity() * 8
    }

    /// Whether the held bytes leave room for `len` more.
    #[inline]
    pub(super) fn has_bytes(&self, len: u32) -> bool {
        self.bytes + len as usize <= self.max_bytes
    }

    /// Whether a packet of `len` bytes with `psn` can be held by `s` now. Takes nothing: a
    /// refusal leaves no ring behind.
    pub(super) fn can_hold(&self, s: &Stream<T>, psn: Psn, len: u32) -> Result<(), NoHold> {
        if self.slot_of(s, psn).is_some() {
            return Err(NoHold::Collision);
        }
        if !self.has_bytes(len) {
            return Err(NoHold::NoRoom);
        }
        if s.ring == NO_RING && self.free_rings.is_empty() {
            return Err(NoHold::NoRoom);
        }
        Ok(())
    }

    /// Counts `len` bytes more held, in all and for `s`'s downlink.
    #[inline]
    fn hold_bytes(&mut self, s: &Stream<T>, len: u32) {
        self.bytes += len as usize;
        self.counts.peak_bytes = self.counts.peak_bytes.max(self.bytes as u64);
        if let Some(b) = self.port_bytes.get_mut(usize::from(s.port)) {
            *b += u64::from(len);
        }
    }

    /// Counts `len` bytes no longer held.
    #[inline]
    fn unhold_bytes(&mut self, s: &Stream<T>, len: u32) {
        self.bytes -= len as usize;
        if let Some(b) = self.port_bytes.get_mut(usize::from(s.port)) {
            *b = b.saturating_sub(u64::from(len));
        }
    }

    /// Counts one more packet held by `s` (arrived at `at`).
    #[inline]
    fn count_held(&mut self, s: &mut Stream<T>, len: u32, at: u64) {
        if s.held == 0 {
            s.gap_since = at;
        }
        s.held += 1;
        s.stats.held = u64::from(s.held);
        s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
        self.hold_bytes(s, len);
        self.counts.held_total += 1;
        self.counts.held_now += 1;
        self.counts.max_depth = self.counts.max_depth.max(u64::from(s.held));
    }

    /// Counts one packet of `s` no longer held, which arrived at `arrived`.
    #[inline]
    fn count_gone(&mut self, s: &mut Stream<T>, len: u32, arrived: u64, now: u64) {
        s.held -= 1;
        s.stats.held = u64::from(s.held);
        self.unhold_bytes(s, len);
        self.counts.held_now -= 1;
        if self.hold_ns.len() < HOLD_TIMES_MAX {
            self.hold_ns.push(now.saturating_sub(arrived));
        }
    }

    /// Puts `slot` in its ring slot. The caller checked [`SlotPool::can_hold`].
    pub(super) fn put(&mut self, s: &mut Stream<T>, slot: Slot<T>) {
        if s.ring == NO_RING {
            let Some(r) = self.free_rings.pop() else {
                // `can_hold` said there was one; never lose the packet for it.
                debug_assert!(false, "put without a free ring");
                return;
            };
            s.ring = r;
        }
        s.in_ring += 1;
        self.count_held(s, slot.len, slot.arrived);
        let idx = self.slot_index(s.ring, slot.psn);
        self.bitmaps[idx / 64] |= 1 << (idx % 64);
        self.slots[idx] = Some(slot);
    }

    /// The held packet of `s` with exactly this PSN, in the ring.
    pub(super) fn occupied(&self, s: &Stream<T>, psn: Psn) -> Option<&Slot<T>> {
        self.slot_of(s, psn).filter(|sl| sl.psn == psn)
    }

    /// Whatever holds the ring slot `psn` maps to (possibly another PSN, `W` apart).
    pub(super) fn slot_of(&self, s: &Stream<T>, psn: Psn) -> Option<&Slot<T>> {
        if s.ring == NO_RING {
            return None;
        }
        self.slots[self.slot_index(s.ring, psn)].as_ref()
    }

    /// Takes the packet in `psn`'s ring slot; the ring goes back to the pool when it is
    /// empty.
    pub(super) fn take(&mut self, s: &mut Stream<T>, psn: Psn, now: u64) -> Option<Slot<T>> {
        if s.ring == NO_RING {
            return None;
        }
        let idx = self.slot_index(s.ring, psn);
        let slot = self.slots[idx].take()?;
        self.bitmaps[idx / 64] &= !(1 << (idx % 64));
        self.count_gone(s, slot.len, slot.arrived, now);
        s.in_ring -= 1;
        if s.in_ring == 0 {
            self.free_rings.push(s.ring);
            s.ring = NO_RING;
        }
        Some(slot)
    }

    /// Returns `s`'s ring to the pool if it still has one (the stream is forgotten; only
    /// reachable if a ring was taken without a packet: never keep it from the pool).
    pub(super) fn return_ring(&mut self, s: &mut Stream<T>) {
        if s.ring != NO_RING {
            self.free_rings.push(s.ring);
            s.ring = NO_RING;
            s.in_ring = 0;
        }
    }

    /// Counts an ACK put on `s`'s waiting list.
    pub(super) fn ack_held(&mut self, s: &mut Stream<T>, len: u32, now: u64) {
        self.count_held(s, len, now);
        self.counts.acks_held += 1;
    }

    /// Counts an ACK taken off `s`'s waiting list.
    pub(super) fn ack_taken(&mut self, s: &mut Stream<T>, a: &WaitingAck<T>, now: u64) {
        self.count_gone(s, a.len, a.arrived, now);
    }

    /// Offset (0..W) from `from` of the next held ring slot of `s`, scanning the ring's bitmap
    /// word by word.
    pub(super) fn next_held(&self, s: &Stream<T>, from: Psn) -> Option<u32> {
        if s.ring == NO_RING {
            return None;
        }
        let w = self.mask + 1;
        let base = s.ring as usize * w as usize;
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

    /// The first held packet of `s` at or after `from` (ring or far list), or one of the far
    /// list behind `from`.
    pub(super) fn next_held_psn(&self, s: &Stream<T>, from: Psn) -> Option<Psn> {
        // The PSN the slot really holds (the bitmap finds the slot; a slot of `from + off` can
        // hold a PSN a window apart when the expected PSN moved back).
        let ring = self
            .next_held(s, from)
            .and_then(|off| self.slot_of(s, from.add(off)).map(|sl| sl.psn));
        let far = s.far.front().map(|f| f.psn);
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

    /// Takes the held packet of `s` with exactly `psn`, from the ring or the far list.
    pub(super) fn take_held(&mut self, s: &mut Stream<T>, psn: Psn, now: u64) -> Option<Slot<T>> {
        if self.occupied(s, psn).is_some() {
            return self.take(s, psn, now);
        }
        let at = s.far.iter().position(|f| f.psn == psn)?;
        let slot = s.far.remove(at)?;
        self.count_gone(s, slot.len, slot.arrived, now);
        Some(slot)
    }

    /// Whether `s` holds a packet with exactly `psn` (ring or far list).
    pub(super) fn holds(&self, s: &Stream<T>, psn: Psn) -> bool {
        self.occupied(s, psn).is_some() || s.far.iter().any(|f| f.psn == psn)
    }

    /// Holds `slot` in `s`'s far list, in PSN order (`counted`: it is held already, moving
    /// from the ring); gives it back when the list or the byte budget is full.
    pub(super) fn put_far(
        &mut self,
        s: &mut Stream<T>,
        slot: Slot<T>,
        counted: bool,
    ) -> Result<(), Slot<T>> {
        if s.far.len() >= FAR_WINDOWS * (self.mask as usize + 1)
            || (!counted && !self.has_bytes(slot.len))
        {
            return Err(slot);
        }
        let at = s
            .far
            .rposition(|f| f.psn.is_before(slot.psn))
            .map_or(0, |i| i + 1);
        if !counted {
            self.count_held(s, slot.len, slot.arrived);
        }
        s.far.insert(at, slot);
        Ok(())
    }

    /// Moves ring entries of `s` outside `[e, e + W)` to its far list (after the expected PSN
    /// moved back or was chosen by learning), so that the ring's scan order is PSN order
    /// again. Entries that do not fit the far list go to `late` (counted as late in the
    /// stream's stats); returns how many.
    pub(super) fn normalize(&mut self, s: &mut Stream<T>, now: u64, late: &mut Vec<T>) -> u64 {
        if s.ring == NO_RING {
            return 0;
        }
        let e = s.expected;
        let w = self.mask + 1;
        let base = s.ring as usize * w as usize;
        let mut released = 0;
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
            s.in_ring -= 1;
            if s.in_ring == 0 {
                self.free_rings.push(s.ring);
                s.ring = NO_RING;
            }
            if let Err(slot) = self.put_far(s, slot, true) {
                self.count_gone(s, slot.len, slot.arrived, now);
                s.stats.late += 1;
                released += 1;
                late.push(slot.item);
            }
            if s.ring == NO_RING {
                break;
            }
        }
        released
    }

    /// Releases to `out` every packet `s` holds (ring and far list), in PSN order from its
    /// expected PSN; returns the PSN after the last one released.
    pub(super) fn flush(&mut self, s: &mut Stream<T>, now: u64, out: &mut Vec<T>) -> Option<Psn> {
        let mut after = None;
        let mut from = s.expected;
        while let Some(q) = self.next_held_psn(s, from) {
            let Some(slot) = self.take_held(s, q, now) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reorder::stream::{Phase, StreamKey};

    fn pool() -> SlotPool<u32> {
        SlotPool::new(&ReorderConfig {
            window: 64,
            max_rings: 2,
            max_held_bytes: 1000,
            ..ReorderConfig::default()
        })
    }

    fn stream(port: u16) -> Stream<u32> {
        let mut s = Stream::new(
            StreamKey::Request { local: 1, qpn: 1 },
            Phase::Active,
            Psn::new(0),
            0,
        );
        s.port = port;
        s
    }

    fn slot(psn: u32, len: u32) -> Slot<u32> {
        Slot {
            item: psn,
            psn: Psn::new(psn),
            span: 1,
            read: None,
            len,
            arrived: 5,
        }
    }

    #[test]
    fn a_ring_is_taken_while_a_stream_holds_and_returned_when_it_holds_nothing() {
        let mut p = pool();
        p.add_port(3);
        let mut s = stream(3);
        p.put(&mut s, slot(2, 100));
        p.put(&mut s, slot(5, 100));
        assert_eq!(
            (p.free_rings(), s.held, p.port_bytes(3), p.bytes()),
            (1, 2, 200, 200)
        );
        assert_eq!(p.next_held_psn(&s, Psn::new(0)), Some(Psn::new(2)));
        assert_eq!(p.next_held(&s, Psn::new(3)), Some(2));
        assert!(p.take(&mut s, Psn::new(2), 10).is_some());
        assert!(p.take(&mut s, Psn::new(5), 10).is_some());
        assert_eq!((p.free_rings(), s.held, p.port_bytes(3)), (2, 0, 0));
        let mut times = Vec::new();
        p.take_hold_times(&mut times);
        assert_eq!(times, vec![5, 5]);
        assert_eq!(p.counts().held_total, 2);
    }

    #[test]
    fn the_scan_wraps_the_psn_space_and_the_ring() {
        let mut p = pool();
        let mut s = stream(0);
        s.expected = Psn::new((1 << 24) - 3);
        p.put(&mut s, slot(1, 10));
        assert_eq!(p.next_held_psn(&s, s.expected), Some(Psn::new(1)));
        assert!(p.holds(&s, Psn::new(1)));
        assert!(
            !p.holds(&s, Psn::new(65)),
            "a PSN a window apart is another packet"
        );
        assert_eq!(p.can_hold(&s, Psn::new(65), 10), Err(NoHold::Collision));
    }

    #[test]
    fn bytes_and_rings_bound_what_is_held() {
        let mut p = pool();
        let (mut a, mut b, mut c) = (stream(0), stream(0), stream(0));
        p.put(&mut a, slot(1, 900));
        assert_eq!(p.can_hold(&b, Psn::new(1), 200), Err(NoHold::NoRoom));
        p.put(&mut b, slot(1, 50));
        assert_eq!(
            p.can_hold(&c, Psn::new(1), 10),
            Err(NoHold::NoRoom),
            "no ring left"
        );
        assert!(
            p.can_hold(&a, Psn::new(2), 10).is_ok(),
            "a holding stream has its ring"
        );
        assert!(
            p.put_far(&mut c, slot(300, 60), false).is_err(),
            "nor bytes"
        );
    }

    #[test]
    fn the_far_list_keeps_psn_order_and_the_flush_releases_in_order() {
        let mut p = pool();
        let mut s = stream(0);
        for q in [200, 100, 150] {
            assert!(p.put_far(&mut s, slot(q, 1), false).is_ok());
        }
        p.put(&mut s, slot(3, 1));
        assert_eq!(p.next_held_psn(&s, Psn::new(0)), Some(Psn::new(3)));
        let mut out = Vec::new();
        assert_eq!(p.flush(&mut s, 9, &mut out), Some(Psn::new(201)));
        assert_eq!(out, vec![3, 100, 150, 200]);
        assert_eq!((s.held, p.counts().held_now), (0, 0));
    }

    #[test]
    fn normalizing_moves_what_left_the_window_to_the_far_list() {
        let mut p = pool();
        let mut s = stream(0);
        s.expected = Psn::new(100);
        p.put(&mut s, slot(110, 1));
        p.put(&mut s, slot(120, 1));
        // The expected PSN moves back: 110 and 120 are more than a window ahead of 40.
        s.expected = Psn::new(40);
        let mut late = Vec::new();
        assert_eq!(p.normalize(&mut s, 0, &mut late), 0);
        assert!(late.is_empty());
        assert_eq!((s.far.len(), s.ring), (2, NO_RING));
        assert_eq!(s.held, 2, "still held");
    }
}
