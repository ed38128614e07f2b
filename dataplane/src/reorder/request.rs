//! The request direction: packets towards a local responder, released in PSN order.
//!
//! The request direction follows the architecture notes ("Reorder semantics"):
//!
//! | case (PSN `p`, expected `e`, window `W`) | action |
//! |---|---|
//! | `p == e` | release, advance `e` by the packet's PSN span, release every consecutive held packet |
//! | `e < p < e + W` | hold in slot `p mod W`; start the gap timer if it is not running |
//! | `p >= e + W` | hold in the stream's far list (sorted, up to `4 W` packets) |
//! | far list full | overflow: release held packets in order (skipping gaps) until `p` fits; when nothing is left to release, `e` moves to `p` |
//! | `p < e` (within 2^23) | late or retransmitted: release at once |
//! | `p` already held | keep one copy, discard the other |
//!
//! All comparisons are 24-bit serial arithmetic ([`Psn::distance`]); the window may straddle
//! the wrap at 2^24 anywhere (tested). The ring holds a window of PSNs, not of packets: a READ
//! REQUEST is one packet spanning up to thousands of PSNs, so the packets after a few READs lie
//! beyond the window while they are only a few packets later. They wait in the far list, and
//! the drain takes its front once the expected PSN reaches it.
//!
//! **First packets and restarts.** A new request stream does not know its starting PSN: it
//! holds what arrives for `learn_ns` and starts from the lowest PSN seen (or from the PSN a CM
//! exchange or the host's ACK or NAK names). A stream that holds nothing and has been idle for
//! `learn_ns` or longer starts over the same way when a packet arrives a window or more away
//! from its expected PSN: a QP destroyed and re-created with the same QPN, or a requester back
//! from a long stall, starts a new PSN sequence.
//!
//! **Loss.** A gap open longer than the stream's hold timeout is declared lost: everything held
//! is released in order so that the RNIC sees the gap and NAKs. The host's NAK then moves the
//! stream's expected PSN to the NAKed PSN ([`ReorderCore::observe_nak`]), so the retransmission
//! is reordered too. A gap the Go-Back-N host has NAKed already keeps the expected PSN when it
//! is given up (the host takes nothing else, and NAKs no more): the sender's next pass, after
//! its retransmission timer, is ordered as well.

// The insert paths pass a packet's PSN, span, length and item separately down to the slot
// that stores them, so that the item is moved exactly once.
#![allow(clippy::too_many_arguments)]

use super::core::{NoHold, ReorderCore};
use super::paths::Proof;
use super::stream::{Insert, LossRecovery, Phase, Slot, StreamKey, NOT_NAKED};
use crate::meta::{PathStamp, NO_PATH};
use crate::wire::Psn;

/// PSNs ahead of a stream's expected PSN beyond which a packet starts a new sequence even
/// without an idle time (a QP re-created without CM at once).
const NEW_SEQUENCE_AHEAD: u32 = 1 << 22;

impl<T> ReorderCore<T> {
    /// Inserts a request-direction packet for `key` with PSN `psn` spanning `span` PSNs.
    pub fn insert_request(
        &mut self,
        key: StreamKey,
        psn: Psn,
        span: u32,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        self.insert_request_read(
            key,
            psn,
            span,
            None,
            None,
            NO_PATH,
            PathStamp::NONE,
            len,
            item,
            now,
            out,
        )
    }

    /// Inserts a request-direction packet; a READ REQUEST (`read`: its DMA length) spans what
    /// the QP's path MTU makes of it once that is known, `span` (the engine's estimate at the
    /// largest path MTU the port allows, never too long) until then. `peer`: the sender's
    /// address and UDP source port, which the QP pairing hears of once per stream. `path`: the
    /// fabric path it arrived on ([`NO_PATH`]: none whose order counts) and `stamp` its path
    /// stamp, for path-order loss detection: after the insert, a gap that every path
    /// the stream uses has delivered above is declared lost ([`super::paths`]).
    pub fn insert_request_read(
        &mut self,
        key: StreamKey,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        peer: Option<(u128, u16)>,
        path: u8,
        stamp: PathStamp,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let Some(stream) = self.stream_for(key, now, true) else {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        };
        // The stream keeps its source only from a stamped packet.
        let source = peer
            .filter(|_| stamp.seq != 0)
            .map(|p| self.stamp_source(p.0));
        let s = &mut self.streams[stream as usize];
        let selective = s.recovery == LossRecovery::ReleaseRun;
        let expected = matches!(s.phase, Phase::Active).then_some(s.expected);
        s.paths
            .see(path, psn, stamp, source, selective, expected, now);
        let gap =
            (s.held > 0 && matches!(s.phase, Phase::Active)).then_some((s.expected, s.gap_since));
        let restarts = s.stats.restarts;
        let r = self.insert_request_in(stream, key, psn, span, read, peer, len, item, now, out);
        let s = &mut self.streams[stream as usize];
        if s.stats.restarts != restarts {
            // The stream started a new PSN sequence at this packet and forgot its paths: this
            // packet is the new sequence's first evidence.
            s.paths.see(path, psn, stamp, source, selective, None, now);
        }
        if r == Insert::Released {
            self.learn_skew(stream, psn, gap, now);
        }
        if matches!(r, Insert::Late | Insert::Released)
            && self.streams[stream as usize].paths.retransmitted(psn)
        {
            // The retransmission of a gap released to a selective-repeat RNIC passed (late, or
            // in order when the host's NAK moved `e` back to it): a later gap that waited for
            // it goes now, and the RNIC NAKs that one (if the paths still show it lost: the
            // packet may have come meanwhile, and the gap now open be another one).
            let s = &self.streams[stream as usize];
            if s.held > 0 && self.proof(stream, now).0 != Proof::Missing {
                self.release_run(stream, now, out);
            }
        }
        if path != NO_PATH {
            self.check_path_loss(stream, now, out);
        }
        r
    }

    fn insert_request_in(
        &mut self,
        stream: u32,
        key: StreamKey,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        peer: Option<(u128, u16)>,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let span = span.max(1);
        if let (Some((remote, sport)), StreamKey::Request { local, qpn }) = (peer, key) {
            if !self.streams[stream as usize].peer_seen {
                self.streams[stream as usize].peer_seen = true;
                self.learn_pair(local, remote, sport, qpn);
            }
        }
        let idle_for = now.saturating_sub(self.streams[stream as usize].last_seen);
        self.streams[stream as usize].last_seen = now;
        if let Phase::Learning { until, min, max } = self.streams[stream as usize].phase {
            if now < until {
                return self.learn_hold(
                    stream, psn, span, read, len, item, now, out, until, min, max,
                );
            }
            if self.streams[stream as usize].held == 0 {
                // Nothing collected (learning disabled, or its window passed empty): this
                // packet starts the stream.
                self.start_at(stream, psn);
            } else {
                self.finish_learning(stream, now, out);
            }
        } else if self.starts_over(stream, psn, idle_for) {
            // Back from idle far from where it left off: a new PSN sequence (a re-created QP,
            // a requester retransmitting after a long stall); or a stream that never released
            // a packet, started at a CM exchange's PSN, whose first packet is far from it (the
            // QP was re-created without CM); or a packet too far from the old sequence to be of
            // it (a QP re-created without CM at once). The new sequence is learned as a new
            // stream's is; whatever is held is of it (see `starts_over`) and is learned again
            // with it.
            let mut again = Vec::new();
            while let Some(f) = self.streams[stream as usize].far.front().map(|f| f.psn) {
                match self.take_held(stream, f, now) {
                    Some(slot) => again.push(slot),
                    None => break,
                }
            }
            self.restart(stream, now);
            if self.cfg.learn_ns > 0 {
                for sl in again {
                    let Phase::Learning { until, min, max } = self.streams[stream as usize].phase
                    else {
                        // Learning ended early (no room): the rest goes the normal way.
                        self.insert_active(
                            stream, sl.psn, sl.span, sl.read, sl.len, sl.item, now, out,
                        );
                        continue;
                    };
                    self.learn_hold(
                        stream, sl.psn, sl.span, sl.read, sl.len, sl.item, now, out, until, min,
                        max,
                    );
                }
                if let Phase::Learning { until, min, max } = self.streams[stream as usize].phase {
                    return self.learn_hold(
                        stream, psn, span, read, len, item, now, out, until, min, max,
                    );
                }
            } else {
                let first =
                    again
                        .iter()
                        .map(|sl| sl.psn)
                        .fold(psn, |m, p| if p.is_before(m) { p } else { m });
                self.start_at(stream, first);
                for sl in again {
                    self.insert_active(stream, sl.psn, sl.span, sl.read, sl.len, sl.item, now, out);
                }
            }
        }
        self.insert_active(stream, psn, span, read, len, item, now, out)
    }

    /// Whether a packet with `psn`, after the stream was `idle_for` ns without one, starts a
    /// new PSN sequence (see [`ReorderCore::insert_request_read`]).
    pub(super) fn starts_over(&self, stream: u32, psn: Psn, idle_for: u64) -> bool {
        let s = &self.streams[stream as usize];
        let d = psn.distance(s.expected);
        // A requester retransmits from its oldest unacknowledged PSN, which the switch has
        // seen within what a host keeps in flight (`HOST_PSN_REACH`); further behind, the PSN
        // belongs to another sequence.
        // Far ahead takes more: one READ REQUEST may span thousands of PSNs, and what follows
        // it overtakes it; a quarter of the PSN space is beyond any READs in flight.
        let reach = super::pairing::HOST_PSN_REACH;
        let far_behind = d < 0 && d.unsigned_abs() > reach;
        let far_ahead = d > 0 && d as u32 > NEW_SEQUENCE_AHEAD;
        // What is held must all be as far from the old sequence (the new one's first packets,
        // in the far list); packets of the old sequence held in the ring keep it going. (Only
        // looked at for a far packet: the far list is not walked on the packet path.)
        if (far_behind || far_ahead)
            && s.held as usize == s.far.len()
            && s.far
                .iter()
                .all(|f| f.psn.distance(s.expected).unsigned_abs() > reach)
        {
            return true;
        }
        s.held == 0
            && (idle_for >= self.cfg.learn_ns.max(1) || s.stats.released == 0)
            && d.unsigned_abs() > self.mask
    }

    /// Ends learning (or a restart) with `psn` as the first expected PSN.
    pub(super) fn start_at(&mut self, stream: u32, psn: Psn) {
        let s = &mut self.streams[stream as usize];
        s.phase = Phase::Active;
        s.expected = psn;
        self.totals.learned += 1;
    }

    /// Puts an idle stream (holding nothing) back into learning.
    pub(super) fn restart(&mut self, stream: u32, now: u64) {
        let s = &mut self.streams[stream as usize];
        s.stats.restarts += 1;
        s.paths.clear();
        s.host_naked = NOT_NAKED;
        s.phase = Phase::Learning {
            until: now.saturating_add(self.cfg.learn_ns),
            min: s.expected,
            max: s.expected,
        };
        self.totals.restarts += 1;
        self.mark_active(stream);
    }

    pub(super) fn learn_hold(
        &mut self,
        stream: u32,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
        until: u64,
        min: Psn,
        max: Psn,
    ) -> Insert {
        let first = self.streams[stream as usize].held == 0;
        let new_min = if first || psn.is_before(min) {
            psn
        } else {
            min
        };
        let new_max = if first || psn.is_after(max) { psn } else { max };
        if self.holds(stream, psn) {
            return self.duplicate(stream);
        }
        // A packet whose ring slot is taken (a PSN a window apart: READ REQUESTs span many
        // PSNs) waits in the far list; when neither has room, learning ends here and this
        // packet goes the normal way.
        match self.can_hold(stream, psn, len) {
            Ok(()) => self.put(stream, item, psn, span, read, len, now),
            Err(why) => {
                let slot = Slot {
                    item,
                    psn,
                    span,
                    read,
                    len,
                    arrived: now,
                };
                if let Err(slot) = if why == NoHold::Collision {
                    self.put_far(stream, slot, false)
                } else {
                    Err(slot)
                } {
                    if first {
                        self.start_at(stream, psn);
                    } else {
                        self.finish_learning(stream, now, out);
                    }
                    return self.insert_active(stream, psn, span, read, len, slot.item, now, out);
                }
            }
        }
        self.streams[stream as usize].phase = Phase::Learning {
            until,
            min: new_min,
            max: new_max,
        };
        Insert::Held
    }

    /// Ends the learning of `stream`, whose lowest PSN held is `min`, before its window (which
    /// ends at `until`) does when the fabric's paths show where the stream starts: every
    /// path-order path that is up has delivered, since learning began, a PSN of the stream or
    /// a later stamp of its source. A path is one FIFO and the host sends in PSN order, so a
    /// PSN below `min` would have come before them: none can still come. It is the proof of a
    /// gap just below `min` ([`super::paths`]), so a path the stream has not used blocks as it
    /// does for a young stream's gap (after 1024 packets only the paths it uses count), and
    /// the window stays the backstop: for a QP pinned to one uplink (READ requests) whose
    /// source sends nothing on the others, or a first message of fewer packets than there
    /// are paths. Without it, the first packets of every QP the switch saw no CM exchange for
    /// wait the whole window.
    pub(super) fn learn_from_paths(
        &mut self,
        stream: u32,
        min: Psn,
        until: u64,
        now: u64,
        out: &mut Vec<T>,
    ) {
        if now >= until {
            // The window has ended (its timer has not run yet): nothing to prove.
            self.finish_learning(stream, now, out);
            return;
        }
        let (proof, wait) = self.proof_at(stream, min.sub(1), now);
        if proof == Proof::Missing {
            if let Some(wait) = wait {
                self.wait_for_stamp(stream, wait, true);
            }
            return;
        }
        self.totals.learned_by_paths += 1;
        self.finish_learning(stream, now, out);
    }

    pub(super) fn finish_learning(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        let learn_ns = self.cfg.learn_ns;
        let s = &mut self.streams[stream as usize];
        if let Phase::Learning { min, until, .. } = s.phase {
            s.phase = Phase::Active;
            let held = s.held;
            if held > 0 {
                s.expected = min;
            }
            self.totals.learned += 1;
            self.normalize_ring(stream, now, out);
            self.drain_request(stream, now, out);
            let s = &mut self.streams[stream as usize];
            if s.held > 0 && s.held == held {
                // Nothing came out: the gap in front has been open since learning began.
                s.gap_since = until.saturating_sub(learn_ns).min(now);
            }
        }
    }

    pub(super) fn insert_active(
        &mut self,
        stream: u32,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let e = self.streams[stream as usize].expected;
        let d = psn.distance(e);
        if d == 0 {
            out.push(item);
            self.count_in_order(stream);
            self.advance(stream, span, read, now, out);
            self.drain_request(stream, now, out);
            return Insert::Released;
        }
        if d < 0 {
            out.push(item);
            self.count_late(stream);
            return Insert::Late;
        }
        if self.holds(stream, psn) {
            return self.duplicate(stream);
        }
        if d as u32 > self.mask {
            // Beyond the ring's window: the far list holds it if it can.
            let slot = Slot {
                item,
                psn,
                span,
                read,
                len,
                arrived: now,
            };
            return match self.put_far(stream, slot, false) {
                Ok(()) => Insert::Held,
                Err(slot) => self.overflow(stream, psn, span, read, len, slot.item, now, out),
            };
        }
        match self.can_hold(stream, psn, len) {
            Ok(()) => {
                self.put(stream, item, psn, span, read, len, now);
                Insert::Held
            }
            Err(why) => {
                out.push(item);
                self.count_no_hold(why);
                Insert::Passthrough
            }
        }
    }

    /// A packet beyond the window that the far list cannot hold: release held packets in
    /// order, skipping gaps, until it fits.
    pub(super) fn overflow(
        &mut self,
        stream: u32,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let released = self.make_room(stream, psn, now, out);
        self.streams[stream as usize].stats.overflows += 1;
        self.totals.overflows += 1;
        let e = self.streams[stream as usize].expected;
        if e == psn {
            out.push(item);
            self.count_in_order(stream);
            self.advance(stream, span, read, now, out);
            self.drain_request(stream, now, out);
            return Insert::Overflowed { released };
        }
        if psn.is_before(e) || self.holds(stream, psn) {
            // Released on the way, or a copy now: it goes as late.
            out.push(item);
            self.count_late(stream);
            return Insert::Overflowed { released };
        }
        match self.can_hold(stream, psn, len) {
            Ok(()) => self.put(stream, item, psn, span, read, len, now),
            Err(why) => {
                out.push(item);
                self.count_no_hold(why);
            }
        }
        Insert::Overflowed { released }
    }

    /// Moves `e` past a packet of `span` PSNs (a READ REQUEST: of its DMA length at the QP's
    /// path MTU, once known); held packets inside the span are late.
    pub(super) fn advance(
        &mut self,
        stream: u32,
        span: u32,
        read: Option<u32>,
        now: u64,
        out: &mut Vec<T>,
    ) {
        let e = self.streams[stream as usize].expected;
        let s = &mut self.streams[stream as usize];
        let span = match read {
            Some(l) if s.pmtu > 0 => l.div_ceil(s.pmtu).max(1),
            _ => span,
        };
        s.est_read = match read {
            Some(l) if s.pmtu == 0 => Some((e, l, span)),
            _ => None,
        };
        if span > 1 {
            // Held packets inside the span are late (nothing is sent there): released in PSN
            // order, the far list's with the ring's.
            let end = e.add(span);
            for k in 1..span.min(self.mask + 1) {
                let q = e.add(k);
                self.release_far_before(stream, q.add(1), now, out);
                if self.occupied(stream, q).is_some() {
                    if let Some(slot) = self.take(stream, q, now) {
                        self.count_late(stream);
                        out.push(slot.item);
                    }
                }
            }
            self.release_far_before(stream, end, now, out);
        }
        self.streams[stream as usize].expected = e.add(span);
    }

    /// Releases (late) the far list's packets before `end`.
    pub(super) fn release_far_before(&mut self, stream: u32, end: Psn, now: u64, out: &mut Vec<T>) {
        while let Some(f) = self.streams[stream as usize].far.front().map(|f| f.psn) {
            if !f.is_before(end) {
                break;
            }
            let Some(slot) = self.take_held(stream, f, now) else {
                break;
            };
            self.count_late(stream);
            out.push(slot.item);
        }
    }

    /// Releases consecutive held packets from `e` on.
    pub(super) fn drain_request(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        loop {
            let e = self.streams[stream as usize].expected;
            // The far list's front, once the expected PSN reached it (or passed it: a READ's
            // span covered it, and it is late).
            if let Some(f) = self.streams[stream as usize].far.front().map(|f| f.psn) {
                if !f.is_after(e) {
                    let Some(slot) = self.take_held(stream, f, now) else {
                        break;
                    };
                    if f == e && self.occupied(stream, e).is_none() {
                        let (span, read) = (slot.span, slot.read);
                        out.push(slot.item);
                        self.count_in_order(stream);
                        self.advance(stream, span, read, now, out);
                    } else {
                        out.push(slot.item);
                        self.count_late(stream);
                    }
                    continue;
                }
            }
            if self.occupied(stream, e).is_none() {
                break;
            }
            if let Some(slot) = self.take(stream, e, now) {
                let (span, read) = (slot.span, slot.read);
                out.push(slot.item);
                self.count_in_order(stream);
                self.advance(stream, span, read, now, out);
            }
        }
        let s = &mut self.streams[stream as usize];
        if s.held > 0 {
            // A new gap opens at the front: time it from now.
            s.gap_since = now;
        }
    }

    /// Releases held packets in PSN order, skipping gaps, until `psn` fits the window; when
    /// nothing is left to release and it still does not fit, `psn` becomes the expected PSN
    /// (the packets between are more than a window behind it: lost, or too late to order).
    pub(super) fn make_room(&mut self, stream: u32, psn: Psn, now: u64, out: &mut Vec<T>) -> u32 {
        let mut released = 0;
        loop {
            let e = self.streams[stream as usize].expected;
            if (psn.distance(e) as u32) <= self.mask {
                break;
            }
            match self.next_held_psn(stream, e) {
                Some(q) => {
                    // Give up on the gap before the next held packet and release it.
                    let Some(slot) = self.take_held(stream, q, now) else {
                        break;
                    };
                    out.push(slot.item);
                    released += 1;
                    if q.is_before(e) {
                        self.count_late(stream);
                        continue;
                    }
                    self.streams[stream as usize].expected = q;
                    let (span, read) = (slot.span, slot.read);
                    self.count_in_order(stream);
                    self.advance(stream, span, read, now, out);
                }
                None => {
                    self.streams[stream as usize].expected = psn;
                    break;
                }
            }
        }
        self.drain_request(stream, now, out);
        released
    }

    /// Moves a request stream's expected PSN to `psn` (the host's NAK, RNR NAK, ACK or a CM
    /// exchange named it) and releases what that makes due. True when anything changed.
    pub(super) fn resync(&mut self, stream: u32, psn: Psn, now: u64, out: &mut Vec<T>) -> bool {
        let s = &mut self.streams[stream as usize];
        let learning = matches!(s.phase, Phase::Learning { .. });
        let old = match s.phase {
            Phase::Learning { min, .. } if s.held > 0 => min,
            _ => s.expected,
        };
        if !learning && old == psn {
            // Nothing moves, but the host asked for the gap again: its retransmission is on the
            // way, so the gap gets a full timeout from now.
            if s.held > 0 {
                s.gap_since = now;
            }
            return false;
        }
        if !learning
            && s.recovery == LossRecovery::ReleaseRun
            && psn.is_before(old)
            && psn.distance(old).unsigned_abs() <= super::pairing::HOST_PSN_REACH
        {
            // A selective-repeat host resends only the PSN it NAKs, which passes as late; the
            // RNIC kept what followed it, so `e` stays (moving back would wait for PSNs the
            // host will not send again). The run released past the gap (the ring and the far
            // list, or a timeout's flush) may be longer than a window: a NAK within what a
            // host keeps in flight is still of this sequence.
            return false;
        }
        s.phase = Phase::Active;
        s.expected = old;
        if psn.distance(old).unsigned_abs() > self.mask {
            // Far from where it was: a new PSN sequence (a CM exchange for a re-created QP).
            s.paths.clear();
            s.host_naked = NOT_NAKED;
        } else if psn.is_before(old) {
            // The host asks for PSNs again: what the paths delivered is of the old pass.
            let selective = s.recovery == LossRecovery::ReleaseRun;
            s.paths.new_pass(selective);
        }
        if s.held > 0 {
            self.normalize_ring(stream, now, out);
            if psn.is_after(old) {
                // Held packets below the new expected PSN are behind it now: release them.
                while let Some(q) = self.next_held_psn(stream, old) {
                    if !q.is_before(psn) {
                        break;
                    }
                    let Some(slot) = self.take_held(stream, q, now) else {
                        break;
                    };
                    out.push(slot.item);
                    self.count_late(stream);
                }
            }
            // Moving back (the RNIC dropped what a timeout released), everything held is kept:
            // retransmitted copies of it are discarded as duplicates and the held originals go
            // out in order. What no longer fits the ring's window waits in the far list.
            self.streams[stream as usize].expected = psn;
            self.normalize_ring(stream, now, out);
        }
        self.streams[stream as usize].expected = psn;
        self.drain_request(stream, now, out);
        if self.streams[stream as usize].held > 0 {
            self.mark_active(stream);
        }
        true
    }

    /// The QP of request stream `key` runs at path MTU `pmtu` (a FIRST or MIDDLE packet of it,
    /// or the local responder's READ RESPONSE, showed it). If the last READ REQUEST released
    /// was sized at a larger path MTU, the PSNs it really spans are not coming: move on.
    pub fn learn_request_pmtu(&mut self, key: StreamKey, pmtu: u32, now: u64, out: &mut Vec<T>) {
        if let Some(stream) = self.find(&key) {
            self.learn_stream_pmtu(stream, pmtu, now, out);
        }
    }

    pub(super) fn learn_stream_pmtu(&mut self, stream: u32, pmtu: u32, now: u64, out: &mut Vec<T>) {
        if !(256..=4096).contains(&pmtu) || !pmtu.is_power_of_two() {
            return;
        }
        let s = &mut self.streams[stream as usize];
        if s.pmtu == pmtu {
            return;
        }
        s.pmtu = pmtu;
        if let Some((q, l, used)) = s.est_read.take() {
            let real = l.div_ceil(pmtu).max(1);
            if real > used && s.expected == q.add(used) && matches!(s.phase, Phase::Active) {
                s.expected = q.add(real);
                // Held packets inside the READ's real span are copies of nothing: late.
                for k in used..real.min(self.mask + 1) {
                    let p = q.add(k);
                    if self.occupied(stream, p).is_some() {
                        if let Some(slot) = self.take(stream, p, now) {
                            self.count_late(stream);
                            out.push(slot.item);
                        }
                    }
                }
                self.drain_request(stream, now, out);
            }
        }
    }
}
