//! The response direction: READ RESPONSEs and atomic ACKs towards a local requester are put in
//! PSN order within the ranges of the READ, atomic and FLUSH requests it sent, and ACKs and
//! NAKs wait only while a response below them is missing.
//!
//! A requester sees responses in PSN order only: Soft-RoCE's completer treats a READ RESPONSE
//! that skips a PSN, or an ACK or NAK whose PSN is past a READ whose responses have not all
//! come, as the loss of that READ and retries it from the first response it is missing
//! (`rxe_comp.c`, `check_psn`). So:
//!
//! - every outstanding range is tracked, up to [`ReorderConfig::max_reads`] per QP (above any
//!   device's limit); none is forgotten to make room for a newer one;
//! - a range's end is estimated from the READ's DMA length and the QP's path MTU, corrected by
//!   the responses themselves: a FIRST or MIDDLE response carries exactly one path MTU, a LAST
//!   or ONLY response ends the range, and the next READ starts after it;
//! - a READ REQUEST at or before PSNs already asked for is a retry (rxe asks again from the
//!   first missing response): ranges from there on start over, and the expected PSN moves back
//!   to it, keeping what is held so that the retry's copies are discarded as duplicates;
//! - ACKs and NAKs wait in a queue of their own, not in PSN slots: a READ of 1 MiB spans 1024
//!   PSNs, far more than a window, and the ACK after it must still wait for all of them.
//!
//! [`ReorderConfig::max_reads`]: super::ReorderConfig::max_reads

use std::ops::{Deref, DerefMut};

use super::config::HOST_PSN_REACH;
use super::held::{self, Direction, Held};
use super::pool::NoHold;
use super::stream::{Insert, ReadRange, Slot, Stream, WaitingAck};
use crate::wire::Psn;

/// The smallest path MTU: a range may extend this far before a response shows the real one.
const MIN_PMTU: u32 = 256;

/// ACKs one response stream holds at most; beyond, an ACK passes (and counts `no_room`).
const MAX_WAITING_ACKS: usize = 1024;

/// What a local host's request will be answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRequest {
    /// An RDMA READ of `dma_len` bytes, spanning `span` PSNs at the path MTU the engine knows.
    Read {
        /// DMA length from the RETH.
        dma_len: u32,
        /// PSNs at the engine's path MTU.
        span: u32,
    },
    /// A request answered by exactly one response (atomics: ATOMIC ACKNOWLEDGE; FLUSH and
    /// ATOMIC WRITE: READ RESPONSE ONLY).
    Single,
}

/// What a response stream releases out of sequence to make its requester retry a request
/// whose response is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    /// The held fill with this PSN, of a later request.
    Fill(Psn),
    /// The first waiting ACK, past the request.
    Ack,
}

/// What a response-direction packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseKind {
    /// READ RESPONSE or atomic ACK: fills a known PSN.
    Fill {
        /// LAST or ONLY (or an atomic ACK): ends its range.
        ends: bool,
        /// Payload bytes of a FIRST or MIDDLE response: the QP's path MTU (0 otherwise).
        full_payload: u32,
    },
    /// ACK or NAK: fills nothing; waits only behind a missing fill below it.
    Ack,
}

/// The first PSN at or after `psn` inside an outstanding range of `s` (the first range's
/// start when `psn` is before them all).
fn first_unfilled<T>(s: &Stream<T>, psn: Psn) -> Psn {
    for r in s.reads.iter() {
        let d = psn.distance(r.start);
        if d < 0 {
            return r.start;
        }
        if (d as u32) < r.span {
            return psn;
        }
    }
    psn
}

fn in_ranges<T>(s: &Stream<T>, psn: Psn) -> bool {
    s.reads.iter().any(|r| {
        let d = psn.distance(r.start);
        d >= 0 && (d as u32) < r.span
    })
}

/// The range of `s` a response with `psn` belongs to, allowing a range whose end is not known
/// to reach as far as the smallest path MTU would make it (up to the next range).
fn range_of<T>(s: &Stream<T>, psn: Psn) -> Option<usize> {
    let n = s.reads.len();
    for i in 0..n {
        let Some(r) = s.reads.get(i) else { break };
        let d = psn.distance(r.start);
        if d < 0 {
            return None;
        }
        let mut reach = if r.exact {
            r.span
        } else {
            r.dma_len.div_ceil(MIN_PMTU).max(r.span)
        };
        if let Some(next) = s.reads.get(i + 1) {
            reach = reach.min(next.start.forward_from(r.start));
        }
        if (d as u32) < reach {
            return Some(i);
        }
    }
    None
}

/// Whether a response of `kind` with `psn` answers one of the requests `s` has outstanding: a
/// fill one of their exact PSNs, an ACK any PSN near them.
pub(super) fn answers<T>(s: &Stream<T>, kind: ResponseKind, psn: Psn) -> bool {
    match kind {
        ResponseKind::Fill { .. } => range_of(s, psn).is_some(),
        ResponseKind::Ack => s
            .reads
            .front()
            .is_some_and(|r| psn.distance(r.start).unsigned_abs() < (1 << 16)),
    }
}

/// An ACK or NAK with `psn` may pass unless a range that ends before it is still missing
/// responses (the requester would take the ACK as the loss of that READ), or a READ's
/// responses are under way: rxe's completer lets an ACK in between a READ's FIRST and LAST
/// response reset its opcode sequence, and the READ's next response then moves the QP to the
/// error state. Such an ACK (older than the responses released) waits for the READ's end and
/// is then ignored by the requester as old.
fn ack_may_pass<T>(s: &Stream<T>, psn: Psn) -> bool {
    match s.reads.front() {
        None => true,
        Some(r) => {
            let under_way = s.expected != r.start && {
                let d = s.expected.distance(r.start);
                d > 0 && (d as u32) < r.span
            };
            !under_way && !psn.is_after(r.last())
        }
    }
}

/// An ACK or NAK older than the READ (or atomic) whose responses the requester is taking: the
/// expected PSN is past the first outstanding range's start, so a response of that request
/// went out, and it completed everything before it (rxe's `check_psn`: a response past a
/// WQE's last PSN completes that WQE). The ACK tells the requester nothing; in the middle of
/// the READ's responses rxe's completer still takes it to `check_ack`, whose update resets
/// `comp.opcode`, and the READ's next MIDDLE or LAST response then moves the QP to the error
/// state.
fn ack_redundant<T>(s: &Stream<T>, psn: Psn) -> bool {
    s.reads
        .front()
        .is_some_and(|r| r.start.is_before(s.expected) && psn.is_before(r.start))
}

/// A response stream at work.
pub(super) struct ResponseStream<'a, T>(pub(super) Held<'a, T>);

impl<'a, T> Deref for ResponseStream<'a, T> {
    type Target = Held<'a, T>;
    fn deref(&self) -> &Held<'a, T> {
        &self.0
    }
}

impl<T> DerefMut for ResponseStream<'_, T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<'a, T: 'a> Direction<'a, T> for ResponseStream<'a, T> {
    fn release_expected(&mut self, slot: Slot<T>) {
        self.in_order(slot.item);
        self.advance();
        self.drain();
    }

    /// Releases held responses in PSN order, skipping the missing ones, until `psn` fits the
    /// window. The ranges stay: the requester retries what was skipped, and its retry is
    /// ordered like the first attempt.
    fn make_room(&mut self, psn: Psn) -> u32 {
        let mut released = 0;
        loop {
            let e = self.s.expected;
            if (psn.distance(e) as u32) <= self.mask() {
                break;
            }
            match self.next_held_psn(e) {
                Some(q) => released += u32::from(self.skip_and_release(q)),
                None => {
                    self.skip_to(psn);
                    break;
                }
            }
        }
        self.drain();
        released
    }
}

impl<T> ResponseStream<'_, T> {
    /// The local host sent a READ REQUEST (or an atomic, FLUSH or ATOMIC WRITE) with `psn`:
    /// its responses will fill the PSNs from `psn` on. A request at or before PSNs already
    /// asked for is a retry and starts them over (what no longer fits the ring from the new
    /// expected PSN goes to the far list, or, if that is full, out).
    pub(super) fn register(&mut self, psn: Psn, req: HostRequest) {
        self.totals.reads_registered += 1;
        let now = self.now;
        let s = &mut *self.s;
        s.last_seen = now;
        let range = match req {
            HostRequest::Read { dma_len, span } => ReadRange {
                start: psn,
                span: if s.pmtu > 0 {
                    dma_len.div_ceil(s.pmtu).max(1)
                } else {
                    span.max(1)
                },
                dma_len,
                exact: dma_len <= MIN_PMTU,
            },
            HostRequest::Single => ReadRange {
                start: psn,
                span: 1,
                dma_len: 0,
                exact: true,
            },
        };
        // Ranges at or after `psn` are asked for again; the one containing it ends there.
        let mut retry = false;
        while let Some(last) = s.reads.back_mut() {
            if !last.start.is_before(psn) {
                s.reads.pop_back();
                retry = true;
                continue;
            }
            let d = psn.distance(last.start) as u32;
            if d < last.span {
                last.span = d;
                last.exact = true;
                retry = !s.expected.is_before(psn) || retry;
            }
            break;
        }
        if s.reads.is_empty()
            && s.held == 0
            && psn.distance(s.expected).unsigned_abs() > HOST_PSN_REACH
        {
            // Nothing outstanding, and far from where the stream was: the local QP was
            // re-created (a new PSN sequence, which may lie anywhere, also just below the old
            // one) or sent a long run of WRITEs since its last READ. What the paths delivered
            // says nothing about the responses from here: a path's top of the old sequence
            // would pass as a PSN above a gap of the new one.
            s.paths.clear();
        } else if psn.is_before(s.expected) {
            // The requester goes back (a retry, or a QP re-created just behind the old one):
            // its responses come again from here, below what the paths delivered, as a
            // Go-Back-N sender's retransmission does.
            s.paths.new_pass(false);
        }
        if retry {
            self.totals.read_retries_seen += 1;
        }
        if self.s.reads.len() >= self.cfg.max_reads {
            self.totals.reads_untracked += 1;
            return;
        }
        let s = &mut *self.s;
        let was_empty = s.reads.is_empty();
        s.reads.push_back(range);
        if was_empty || psn.is_before(s.expected) || !in_ranges(s, s.expected) {
            // Nothing was outstanding, or the requester went back: its responses start here.
            let e = first_unfilled(s, psn);
            let moved = e != s.expected;
            s.expected = e;
            if moved && s.held > 0 {
                // What is held stays (the retry's copies of it are discarded as duplicates),
                // but the ring is indexed from the expected PSN: what now lies a window or
                // more past it goes to the far list, so that scans from it run in PSN order.
                self.normalize();
            }
        }
    }

    /// Learns the QP's path MTU from a full-size response and corrects the estimated ends.
    fn learn_pmtu(&mut self, full_payload: u32) {
        let s = &mut *self.s;
        if !(MIN_PMTU..=4096).contains(&full_payload)
            || !full_payload.is_power_of_two()
            || s.pmtu == full_payload
        {
            return;
        }
        s.pmtu = full_payload;
        let n = s.reads.len();
        for i in 0..n {
            let Some(r) = s.reads.get(i).copied() else {
                break;
            };
            if r.exact {
                continue;
            }
            let mut span = r.dma_len.div_ceil(full_payload).max(1);
            if let Some(next) = s.reads.get(i + 1) {
                span = span.min(next.start.forward_from(r.start));
            }
            if let Some(r) = s.reads.get_mut(i) {
                r.span = span;
            }
        }
    }

    /// Inserts a response-direction packet of `kind` held as `slot` would be.
    pub(super) fn insert(&mut self, kind: ResponseKind, slot: Slot<T>) -> Insert {
        self.s.last_seen = self.now;
        if self.s.reads.is_empty() && self.s.held == 0 {
            self.out.push(slot.item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        }
        match kind {
            ResponseKind::Fill { ends, full_payload } => {
                if !ends {
                    self.learn_pmtu(full_payload);
                }
                self.insert_fill(slot, ends)
            }
            ResponseKind::Ack => self.insert_ack(slot),
        }
    }

    fn insert_fill(&mut self, slot: Slot<T>, ends: bool) -> Insert {
        let psn = slot.psn;
        let s = &mut *self.s;
        let Some(r) = range_of(s, psn).and_then(|ri| s.reads.get_mut(ri)) else {
            // Not asked for (a copy from before a retry, or stray): nothing to order it by.
            self.late(slot.item);
            return Insert::Late;
        };
        let d = psn.forward_from(r.start);
        if ends {
            r.span = d + 1;
            r.exact = true;
        } else if d >= r.span {
            r.span = d + 1;
        }
        held::place(self, slot)
    }

    /// What makes the requester retry the request whose response the stream expects: the
    /// first held fill of a later request, else the first waiting ACK if it is past that
    /// request (see [`super::loss::check`]).
    pub(super) fn trigger(&self) -> Option<Trigger> {
        let s = &*self.s;
        let i = range_of(s, s.expected)?;
        let r = s.reads.get(i)?;
        if let Some(next) = s.reads.get(i + 1).map(|n| n.start) {
            if let Some(q) = self.next_held_psn(next) {
                if !q.is_before(next) {
                    return Some(Trigger::Fill(q));
                }
            }
        }
        s.acks
            .front()
            .is_some_and(|a| a.psn.is_after(r.last()))
            .then_some(Trigger::Ack)
    }

    /// Sends `trigger` on, out of sequence.
    pub(super) fn release_trigger(&mut self, trigger: Trigger) {
        match trigger {
            Trigger::Fill(q) => {
                if let Some(slot) = self.take_held(q) {
                    self.out.push(slot.item);
                }
            }
            Trigger::Ack => {
                if let Some(a) = self.take_ack() {
                    self.out.push(a.item);
                }
            }
        }
        self.totals.nak_releases += 1;
    }

    /// Takes the first waiting ACK.
    fn take_ack(&mut self) -> Option<WaitingAck<T>> {
        let h = &mut self.0;
        let a = h.s.acks.pop_front()?;
        h.pool.ack_taken(h.s, &a, h.now);
        Some(a)
    }

    /// Discards the waiting ACKs and NAKs `ack_redundant` names (counted as stale), in place:
    /// before the stage gives up on responses of the READ under way, which would otherwise let
    /// them out once its range is gone.
    fn drop_redundant_acks(&mut self) {
        let n = self.s.acks.len();
        for _ in 0..n {
            let Some(a) = self.s.acks.pop_front() else {
                break;
            };
            if ack_redundant(self.s, a.psn) {
                let h = &mut self.0;
                h.pool.ack_taken(h.s, &a, h.now);
                self.s.stats.duplicates += 1;
                self.totals.stale_acks += 1;
            } else {
                self.s.acks.push_back(a);
            }
        }
    }

    fn insert_ack(&mut self, slot: Slot<T>) -> Insert {
        let (psn, len) = (slot.psn, slot.len);
        let s = &*self.s;
        if let (Some(first), Some(last)) = (s.reads.front(), s.reads.back()) {
            // An ACK of this PSN sequence lies near the READs not yet answered: before the
            // first by what was in flight, or after the last by what the requester sent since
            // (`HOST_PSN_REACH` either way). Further off, it is an ACK or NAK of the QP before
            // it was re-created, overtaken on a slower path. The new QP would take it as the
            // loss of its READ (rxe: a PSN past the READ's last is an implied NAK), so it goes
            // no further.
            let from = first.start.sub(HOST_PSN_REACH);
            let reach = last.start.forward_from(from) + last.span + 2 * HOST_PSN_REACH;
            if psn.forward_from(from) >= reach {
                return self.stale();
            }
        }
        if ack_redundant(s, psn) {
            // Older than the READ under way: held, a give-up would let it out in the middle of
            // that READ's responses; passed, it would land there now.
            return self.stale();
        }
        if s.acks.is_empty() && ack_may_pass(s, psn) {
            self.in_order(slot.item);
            return Insert::Released;
        }
        if s.acks.len() >= MAX_WAITING_ACKS || !self.pool.has_bytes(len) {
            return self.pass(slot.item, NoHold::NoRoom);
        }
        let now = self.now;
        self.s.acks.push_back(WaitingAck {
            item: slot.item,
            psn,
            len,
            arrived: now,
        });
        let h = &mut self.0;
        h.pool.ack_held(h.s, len, now);
        Insert::Held
    }

    /// Counts an ACK or NAK of the QP's earlier PSN sequence, which is discarded.
    fn stale(&mut self) -> Insert {
        self.s.stats.duplicates += 1;
        self.totals.stale_acks += 1;
        Insert::Stale
    }

    /// Moves the expected PSN past a filled one: the next PSN of its range, or the start of
    /// the next outstanding range; releases the ACKs that no missing response holds back now.
    fn advance(&mut self) {
        let s = &mut *self.s;
        let next = s.expected.add(1);
        while let Some(r) = s.reads.front() {
            let d = next.distance(r.start);
            if d < 0 || (d as u32) < r.span {
                break;
            }
            // `next` is past this range: it is complete.
            s.reads.pop_front();
        }
        s.expected = match s.reads.front() {
            Some(r) if next.is_before(r.start) => r.start,
            _ => next,
        };
        self.release_acks();
    }

    /// Releases, in arrival order, the waiting ACKs that may pass now (an ACK behind one that
    /// may not waits too, so that ACKs leave in the order they came).
    fn release_acks(&mut self) {
        while self
            .s
            .acks
            .front()
            .is_some_and(|a| ack_may_pass(self.s, a.psn))
        {
            let Some(a) = self.take_ack() else {
                break;
            };
            self.in_order(a.item);
        }
    }

    /// Releases the held responses that are in order now.
    fn drain(&mut self) {
        loop {
            let e = self.s.expected;
            // The far list's front once the expected PSN reached (or passed) it.
            if let Some(f) = self.far_front() {
                if !f.is_after(e) {
                    let Some(slot) = self.take_held(f) else {
                        break;
                    };
                    if f == e {
                        self.in_order(slot.item);
                        self.advance();
                    } else {
                        self.late(slot.item);
                    }
                    continue;
                }
            }
            let Some(slot) = self.take_ring(e) else {
                break;
            };
            self.in_order(slot.item);
            self.advance();
        }
        self.restart_gap_timer();
    }

    /// Gives up on the missing responses before the held one with `q` and releases it (in
    /// order, or late when `skip_to` left it behind the expected PSN); false when `skip_to`
    /// released it already.
    fn skip_and_release(&mut self, q: Psn) -> bool {
        self.skip_to(q);
        let Some(slot) = self.take_held(q) else {
            return false;
        };
        if q.is_before(self.s.expected) {
            self.late(slot.item);
        } else {
            self.in_order(slot.item);
            self.advance();
        }
        true
    }

    /// Gives up on the responses before `psn`: ranges that end before it are dropped, the
    /// expected PSN moves there, and the ACKs that were waiting for them go.
    fn skip_to(&mut self, psn: Psn) {
        // While the range under way is still there: its older ACKs must not follow it out.
        self.drop_redundant_acks();
        let s = &mut *self.s;
        while s.reads.front().is_some_and(|r| r.last().is_before(psn)) {
            s.reads.pop_front();
        }
        let from = s.expected;
        s.expected = match s.reads.front() {
            Some(r) if psn.is_before(r.start) => r.start,
            _ => psn,
        };
        // Held responses behind the new expected PSN belong to no outstanding range any more.
        let e = s.expected;
        self.release_late_between(from, e);
        self.release_acks();
    }

    /// Gives up on the gap (its hold timed out, or its buffers are needed): releases everything
    /// held in PSN order (responses and the ACKs between them), as if the missing responses
    /// had come. The ranges after the gap stay, so that the requester's retry and what follows
    /// it are still ordered.
    pub(super) fn give_up(&mut self) {
        self.drop_redundant_acks();
        loop {
            let e = self.s.expected;
            let Some(q) = self.next_held_psn(e) else {
                break;
            };
            self.skip_and_release(q);
        }
        // What still waits waits for responses that were never held: let it go too.
        while let Some(a) = self.take_ack() {
            let s = &mut *self.s;
            // The requester has been told (by this ACK) that the ranges below it are over.
            while s.reads.front().is_some_and(|r| r.last().is_before(a.psn)) {
                s.reads.pop_front();
            }
            self.out.push(a.item);
        }
        let s = &mut *self.s;
        if let Some(r) = s.reads.front() {
            if s.expected.is_before(r.start) {
                s.expected = r.start;
            }
        }
    }
}
