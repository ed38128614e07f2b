//! The request direction: packets towards a local responder, released in PSN order.
//!
//! What the request direction does with each packet:
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
//! stream's expected PSN to the NAKed PSN (`RequestStream::host_nak`), so the retransmission
//! is reordered too. A gap the Go-Back-N host has NAKed already keeps the expected PSN when it
//! is given up (the host takes nothing else, and NAKs no more): the sender's next pass, after
//! its retransmission timer, is ordered as well.

use std::ops::{Deref, DerefMut};

use super::config::{HOST_PSN_REACH, NEW_SEQUENCE_AHEAD};
use super::held::{self, Direction, Held};
use super::pool::NoHold;
use super::stream::{Insert, LossRecovery, Phase, Slot, NOT_NAKED};
use crate::wire::Psn;

/// A learning window: when it ends, and the lowest and highest PSN held so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) until: u64,
    pub(super) min: Psn,
    pub(super) max: Psn,
}

/// A request stream at work.
pub(super) struct RequestStream<'a, T>(pub(super) Held<'a, T>);

impl<'a, T> Deref for RequestStream<'a, T> {
    type Target = Held<'a, T>;
    fn deref(&self) -> &Held<'a, T> {
        &self.0
    }
}

impl<T> DerefMut for RequestStream<'_, T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a, T: 'a> Direction<'a, T> for RequestStream<'a, T> {
    fn release_expected(&mut self, slot: Slot<T>) {
        let (span, read) = (slot.span, slot.read);
        self.in_order(slot.item);
        self.advance(span, read);
        self.drain();
    }

    /// Releases held packets in PSN order, skipping gaps, until `psn` fits the window; when
    /// nothing is left to release and it still does not fit, `psn` becomes the expected PSN
    /// (the packets between are more than a window behind it: lost, or too late to order).
    fn make_room(&mut self, psn: Psn) -> u32 {
        let mut released = 0;
        loop {
            let e = self.s.expected;
            if (psn.distance(e) as u32) <= self.mask() {
                break;
            }
            let Some(q) = self.next_held_psn(e) else {
                self.s.expected = psn;
                break;
            };
            // Give up on the gap before the next held packet and release it.
            let Some(slot) = self.take_held(q) else {
                break;
            };
            released += 1;
            if q.is_before(e) {
                self.late(slot.item);
                continue;
            }
            self.s.expected = q;
            let (span, read) = (slot.span, slot.read);
            self.in_order(slot.item);
            self.advance(span, read);
        }
        self.drain();
        released
    }
}

impl<T> RequestStream<'_, T> {
    /// The learning window, if the stream is learning.
    fn window(&self) -> Option<Window> {
        match self.s.phase {
            Phase::Learning { until, min, max } => Some(Window { until, min, max }),
            Phase::Active => None,
        }
    }

    /// Inserts `slot` (its span at least 1): learned, held or released as the table says.
    pub(super) fn insert(&mut self, slot: Slot<T>) -> Insert {
        let now = self.now;
        let idle_for = now.saturating_sub(self.s.last_seen);
        self.s.last_seen = now;
        if let Some(w) = self.window() {
            if now < w.until {
                return self.learn_hold(slot, w);
            }
            if self.s.held == 0 {
                // Nothing collected (learning disabled, or its window passed empty): this
                // packet starts the stream.
                self.start_at(slot.psn);
            } else {
                self.finish_learning();
            }
        } else if self.starts_over(slot.psn, idle_for) {
            // Back from idle far from where it left off: a new PSN sequence (a re-created QP,
            // a requester retransmitting after a long stall); or a stream that never released
            // a packet, started at a CM exchange's PSN, whose first packet is far from it (the
            // QP was re-created without CM); or a packet too far from the old sequence to be of
            // it (a QP re-created without CM at once). The new sequence is learned as a new
            // stream's is; whatever is held is of it (see `starts_over`) and is learned again
            // with it.
            let mut again = Vec::new();
            while let Some(f) = self.far_front() {
                match self.take_held(f) {
                    // Held again as if it came now: the new sequence's gap starts now.
                    Some(sl) => again.push(Slot {
                        arrived: self.now,
                        ..sl
                    }),
                    None => break,
                }
            }
            self.restart();
            if self.cfg.learn_ns > 0 {
                for sl in again {
                    match self.window() {
                        Some(w) => {
                            self.learn_hold(sl, w);
                        }
                        // Learning ended early (no room): the rest goes the normal way.
                        None => {
                            self.insert_active(sl);
                        }
                    }
                }
                if let Some(w) = self.window() {
                    return self.learn_hold(slot, w);
                }
            } else {
                let first = again.iter().map(|sl| sl.psn).fold(slot.psn, |m, p| {
                    if p.is_before(m) {
                        p
                    } else {
                        m
                    }
                });
                self.start_at(first);
                for sl in again {
                    self.insert_active(sl);
                }
            }
        }
        self.insert_active(slot)
    }

    /// Whether a packet with `psn`, after the stream was `idle_for` ns without one, starts a
    /// new PSN sequence (see [`RequestStream::insert`]).
    pub(super) fn starts_over(&self, psn: Psn, idle_for: u64) -> bool {
        let s = &*self.s;
        let d = psn.distance(s.expected);
        // A requester retransmits from its oldest unacknowledged PSN, which the switch has
        // seen within what a host keeps in flight (`HOST_PSN_REACH`); further behind, the PSN
        // belongs to another sequence.
        // Far ahead takes more: one READ REQUEST may span thousands of PSNs, and what follows
        // it overtakes it; a quarter of the PSN space is beyond any READs in flight.
        let far_behind = d < 0 && d.unsigned_abs() > HOST_PSN_REACH;
        let far_ahead = d > 0 && d as u32 > NEW_SEQUENCE_AHEAD;
        // What is held must all be as far from the old sequence (the new one's first packets,
        // in the far list); packets of the old sequence held in the ring keep it going. (Only
        // looked at for a far packet: the far list is not walked on the packet path.)
        if (far_behind || far_ahead)
            && s.held as usize == s.far.len()
            && s.far
                .iter()
                .all(|f| f.psn.distance(s.expected).unsigned_abs() > HOST_PSN_REACH)
        {
            return true;
        }
        s.held == 0
            && (idle_for >= self.cfg.learn_ns.max(1) || s.stats.released == 0)
            && d.unsigned_abs() > self.mask()
    }

    /// Ends learning (or a restart) with `psn` as the first expected PSN.
    pub(super) fn start_at(&mut self, psn: Psn) {
        self.s.phase = Phase::Active;
        self.s.expected = psn;
        self.totals.learned += 1;
    }

    /// Puts an idle stream (holding nothing) back into learning.
    pub(super) fn restart(&mut self) {
        let until = self.now.saturating_add(self.cfg.learn_ns);
        let s = &mut *self.s;
        s.stats.restarts += 1;
        s.paths.clear();
        s.host_naked_psn = NOT_NAKED;
        s.phase = Phase::Learning {
            until,
            min: s.expected,
            max: s.expected,
        };
        self.totals.restarts += 1;
    }

    /// Holds `slot` while the stream learns where it starts.
    fn learn_hold(&mut self, slot: Slot<T>, w: Window) -> Insert {
        let psn = slot.psn;
        let first = self.s.held == 0;
        let min = if first || psn.is_before(w.min) {
            psn
        } else {
            w.min
        };
        let max = if first || psn.is_after(w.max) {
            psn
        } else {
            w.max
        };
        if self.holds(psn) {
            return self.duplicate();
        }
        // A packet whose ring slot is taken (a PSN a window apart: READ REQUESTs span many
        // PSNs) waits in the far list; when neither has room, learning ends here and this
        // packet goes the normal way.
        match self.can_hold(psn, slot.len) {
            Ok(()) => self.put(slot),
            Err(why) => {
                let kept = if why == NoHold::Collision {
                    self.put_far(slot)
                } else {
                    Err(slot)
                };
                if let Err(slot) = kept {
                    if first {
                        self.start_at(psn);
                    } else {
                        self.finish_learning();
                    }
                    return self.insert_active(slot);
                }
            }
        }
        self.s.phase = Phase::Learning {
            until: w.until,
            min,
            max,
        };
        Insert::Held
    }

    /// Ends learning: the lowest PSN held is the first expected one.
    pub(super) fn finish_learning(&mut self) {
        let learn_ns = self.cfg.learn_ns;
        let Some(w) = self.window() else {
            return;
        };
        self.s.phase = Phase::Active;
        let held = self.s.held;
        if held > 0 {
            self.s.expected = w.min;
        }
        self.totals.learned += 1;
        self.normalize();
        self.drain();
        if self.s.held > 0 && self.s.held == held {
            // Nothing came out: the gap in front has been open since learning began.
            self.s.gap_since = w.until.saturating_sub(learn_ns).min(self.now);
        }
    }

    /// Inserts `slot` into an active stream.
    fn insert_active(&mut self, slot: Slot<T>) -> Insert {
        held::place(self, slot)
    }

    /// Moves `e` past a packet of `span` PSNs (a READ REQUEST, `read`: its DMA length, spans
    /// what the QP's path MTU makes of it, once known); held packets inside the span are late.
    fn advance(&mut self, span: u32, read: Option<u32>) {
        let e = self.s.expected;
        let pmtu = self.s.pmtu;
        let span = match read {
            Some(l) if pmtu > 0 => l.div_ceil(pmtu).max(1),
            _ => span,
        };
        self.s.est_read = match read {
            Some(l) if pmtu == 0 => Some((e, l, span)),
            _ => None,
        };
        if span > 1 {
            // Held packets inside the span are late (nothing is sent there): released in PSN
            // order, the far list's with the ring's.
            let end = e.add(span);
            for k in 1..span.min(self.mask() + 1) {
                let q = e.add(k);
                self.release_far_before(q.add(1));
                if let Some(slot) = self.take_ring(q) {
                    self.late(slot.item);
                }
            }
            self.release_far_before(end);
        }
        self.s.expected = e.add(span);
    }

    /// Releases consecutive held packets from `e` on.
    fn drain(&mut self) {
        loop {
            let e = self.s.expected;
            // The far list's front, once the expected PSN reached it (or passed it: a READ's
            // span covered it, and it is late).
            if let Some(f) = self.far_front() {
                if !f.is_after(e) {
                    let Some(slot) = self.take_held(f) else {
                        break;
                    };
                    if f == e && !self.in_ring(e) {
                        let (span, read) = (slot.span, slot.read);
                        self.in_order(slot.item);
                        self.advance(span, read);
                    } else {
                        self.late(slot.item);
                    }
                    continue;
                }
            }
            let Some(slot) = self.take_ring(e) else {
                break;
            };
            let (span, read) = (slot.span, slot.read);
            self.in_order(slot.item);
            self.advance(span, read);
        }
        self.restart_gap_timer();
    }

    /// Moves the expected PSN to `psn` (the host's NAK, RNR NAK, ACK or a CM exchange named
    /// it) and releases what that makes due. True when anything changed.
    pub(super) fn resync(&mut self, psn: Psn) -> bool {
        let mask = self.mask();
        let s = &mut *self.s;
        let learning = s.learning();
        let old = match s.phase {
            Phase::Learning { min, .. } if s.held > 0 => min,
            _ => s.expected,
        };
        if !learning && old == psn {
            // Nothing moves, but the host asked for the gap again: its retransmission is on the
            // way, so the gap gets a full timeout from now.
            self.restart_gap_timer();
            return false;
        }
        if !learning
            && s.recovery == LossRecovery::ReleaseRun
            && psn.is_before(old)
            && psn.distance(old).unsigned_abs() <= HOST_PSN_REACH
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
        if psn.distance(old).unsigned_abs() > mask {
            // Far from where it was: a new PSN sequence (a CM exchange for a re-created QP).
            s.paths.clear();
            s.host_naked_psn = NOT_NAKED;
        } else if psn.is_before(old) {
            // The host asks for PSNs again: what the paths delivered is of the old pass.
            let selective = s.recovery == LossRecovery::ReleaseRun;
            s.paths.new_pass(selective);
        }
        if self.s.held > 0 {
            self.normalize();
            if psn.is_after(old) {
                // Held packets below the new expected PSN are behind it now: release them.
                self.release_late_between(old, psn);
            }
            // Moving back (the RNIC dropped what a timeout released), everything held is kept:
            // retransmitted copies of it are discarded as duplicates and the held originals go
            // out in order. What no longer fits the ring's window waits in the far list.
            self.s.expected = psn;
            self.normalize();
        }
        self.s.expected = psn;
        self.drain();
        true
    }

    /// The host NAKed (PSN sequence error, or RNR: `psn` is the PSN it expects next, or the
    /// one it could not take): the expected PSN moves there, so the retransmission that
    /// follows is reordered. True when it moved.
    pub(super) fn host_nak(&mut self, psn: Psn) -> bool {
        // The pairing named the stream (and a PSN fitting it when it was not bound yet): the
        // host's NAK is the truth about what it expects, however far that is from the switch's
        // idea (a garbage PSN that moved the stream is undone this way).
        let moved = self.resync(psn);
        if moved {
            self.s.stats.resyncs += 1;
            self.totals.resyncs += 1;
        }
        self.s.paths.host_nak(psn);
        self.s.host_naked_psn = psn.value();
        moved
    }

    /// The host ACKed through the PSN before `next`: a stream still expecting an earlier PSN
    /// (after a timeout, or while learning) moves to `next`.
    pub(super) fn host_ack(&mut self, next: Psn) {
        let s = &*self.s;
        let behind = match s.phase {
            Phase::Learning { .. } => true,
            Phase::Active => {
                next.is_after(s.expected) && (next.distance(s.expected) as u32) <= self.mask()
            }
        };
        if behind && self.resync(next) {
            self.totals.ack_advances += 1;
        }
    }

    /// An RDMA CM exchange named `start` as the first PSN: a learning stream's first packets
    /// fit it; an active one belonged to an earlier connection of its QPN and starts over
    /// there (what it held released in order).
    pub(super) fn cm_start(&mut self, start: Psn) {
        if self.s.learning() {
            self.resync(start);
            return;
        }
        self.flush();
        let now = self.now;
        let s = &mut *self.s;
        s.expected = start;
        s.last_seen = now;
        s.paths.clear();
        s.host_naked_psn = NOT_NAKED;
        s.stats.restarts += 1;
        self.totals.restarts += 1;
    }

    /// The QP runs at path MTU `pmtu` (a FIRST or MIDDLE packet of it, or the local
    /// responder's READ RESPONSE, showed it). If the last READ REQUEST released was sized at a
    /// larger path MTU, the PSNs it really spans are not coming: move on.
    pub(super) fn learn_pmtu(&mut self, pmtu: u32) {
        if !(256..=4096).contains(&pmtu) || !pmtu.is_power_of_two() || self.s.pmtu == pmtu {
            return;
        }
        self.s.pmtu = pmtu;
        let Some((q, l, used)) = self.s.est_read.take() else {
            return;
        };
        let real = l.div_ceil(pmtu).max(1);
        if real > used && self.s.expected == q.add(used) && !self.s.learning() {
            self.s.expected = q.add(real);
            // Held packets inside the READ's real span are copies of nothing: late.
            for k in used..real.min(self.mask() + 1) {
                if let Some(slot) = self.take_ring(q.add(k)) {
                    self.late(slot.item);
                }
            }
            self.drain();
        }
    }

    /// Releases what follows the gap, up to the next gap (for a selective-repeat RNIC, which
    /// keeps it and NAKs the gap): `e` moves to that next gap. The gaps to come lie above what
    /// the paths delivered, so their evidence stands (the host's NAK, if it moves `e` back,
    /// starts a new pass).
    pub(super) fn release_run(&mut self) {
        let gap = self.s.expected;
        let Some(q) = self.next_held_psn(gap) else {
            return;
        };
        self.s.expected = q;
        self.drain();
        self.s.paths.nak_pending(gap);
    }

    /// Releases the first held packet alone, out of sequence: the RNIC NAKs the gap. The rest
    /// waits for the retransmission, a new pass; the gap gets a full hold timeout from now.
    pub(super) fn release_first(&mut self) {
        self.s.paths.new_pass(false);
        let e = self.s.expected;
        if let Some(q) = self.next_held_psn(e) {
            if let Some(slot) = self.take_held(q) {
                self.out.push(slot.item);
                self.totals.nak_releases += 1;
            }
        }
        self.s.gap_since = self.now;
    }

    /// Gives up on the gap (its hold timed out, or its buffers are needed): releases
    /// everything held, in order.
    ///
    /// The RNIC sees the gap and NAKs; its NAK resyncs `e` so that the retransmission is
    /// reordered (and starts a new pass of the paths' evidence). A timeout after a path-order
    /// decision is the backstop: the retransmission did not come either, so nothing is kept
    /// back any longer.
    ///
    /// A Go-Back-N host that NAKed this very gap is the exception: it drops what is released
    /// now without a word (it NAKs once per gap, rxe's `sent_psn_nak`) and takes only the gap
    /// next, which its sender resends, with everything after it, when its retransmission timer
    /// fires. The expected PSN stays at the gap, so that pass is ordered like the first (passed
    /// as late, its packets would race each other over the paths, and the host would drop and
    /// NAK again). The downlink's `nak_first` says the host is Go-Back-N; a selective-repeat
    /// host left on it keeps what is released, and its ACK moves the stream on
    /// ([`RequestStream::host_ack`]).
    pub(super) fn give_up(&mut self) {
        self.s.paths.forget_pending();
        let stuck = self.s.recovery == LossRecovery::NakFirst
            && self.s.host_naked_psn == self.s.expected.value();
        let after = self.flush();
        if stuck {
            self.s.paths.new_pass(false);
            self.totals.naked_gaps_kept += 1;
        } else if let Some(after) = after {
            self.s.expected = after;
        }
    }
}
