//! The response direction of the reorder core: READ RESPONSEs and atomic ACKs towards a local
//! requester are put in PSN order within the ranges of the READ, atomic and FLUSH requests it
//! sent, and ACKs and NAKs wait only while a response below them is missing.
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

#![allow(clippy::too_many_arguments)]

use super::core::ReorderCore;
use super::pairing::HOST_PSN_REACH;
use super::stream::{Insert, StreamKey, WaitingAck};
use crate::meta::{PathStamp, NO_PATH};
use crate::wire::Psn;

/// The smallest path MTU: a range may extend this far before a response shows the real one.
const MIN_PMTU: u32 = 256;

/// ACKs one response stream holds at most; beyond, an ACK passes (and counts `no_room`).
const MAX_WAITING_ACKS: usize = 1024;

/// One outstanding READ, atomic or FLUSH of a local requester: its responses fill
/// `[start, start + span)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRange {
    /// First PSN.
    pub start: Psn,
    /// PSNs it spans: exact once `exact`, else the estimate from `dma_len` and the path MTU.
    pub span: u32,
    /// The READ's DMA length (0 for atomics and FLUSH).
    pub dma_len: u32,
    /// The end is known: a LAST or ONLY response came, the next request starts there, or the
    /// request has one response by definition (atomics, FLUSH, ATOMIC WRITE).
    pub exact: bool,
}

impl ReadRange {
    fn last(&self) -> Psn {
        self.start.add(self.span.max(1) - 1)
    }
}

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

impl<T> ReorderCore<T> {
    /// The local host sent a READ REQUEST (or an atomic, FLUSH or ATOMIC WRITE) with `psn` to
    /// the remote QP `remote_qpn`: its responses will fill the PSNs from `psn` on. A request
    /// at or before PSNs already asked for is a retry and starts them over (what no longer
    /// fits the ring from the new expected PSN goes to the far list, or, if that is full, to
    /// `out`).
    pub fn observe_read(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
        psn: Psn,
        req: HostRequest,
        now: u64,
        out: &mut Vec<T>,
    ) {
        self.pairing.saw_remote(local, remote, remote_qpn, sport);
        let key = StreamKey::Response {
            local,
            remote,
            remote_qpn,
        };
        let Some(stream) = self.stream_for(key, now, true) else {
            return;
        };
        self.totals.reads_registered += 1;
        let s = &mut self.streams[stream as usize];
        s.last_seen = now;
        let pmtu = if s.pmtu > 0 { s.pmtu } else { 0 };
        let range = match req {
            HostRequest::Read { dma_len, span } => ReadRange {
                start: psn,
                span: if pmtu > 0 {
                    dma_len.div_ceil(pmtu).max(1)
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
        if retry {
            self.totals.read_retries_seen += 1;
        }
        let s = &mut self.streams[stream as usize];
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
        if s.reads.len() >= self.cfg.max_reads {
            self.totals.reads_untracked += 1;
            return;
        }
        let was_empty = s.reads.is_empty();
        s.reads.push_back(range);
        if was_empty || psn.is_before(s.expected) || !Self::in_ranges(s, s.expected) {
            // Nothing was outstanding, or the requester went back: its responses start here.
            let e = Self::first_unfilled(s, psn);
            let moved = e != s.expected;
            s.expected = e;
            if moved && s.held > 0 {
                // What is held stays (the retry's copies of it are discarded as duplicates),
                // but the ring is indexed from the expected PSN: what now lies a window or
                // more past it goes to the far list, so that scans from it run in PSN order.
                self.normalize_ring(stream, now, out);
            }
        }
    }

    /// The first PSN at or after `psn` inside an outstanding range (the first range's start
    /// when `psn` is before them all).
    fn first_unfilled(s: &super::stream::Stream<T>, psn: Psn) -> Psn {
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

    fn in_ranges(s: &super::stream::Stream<T>, psn: Psn) -> bool {
        s.reads.iter().any(|r| {
            let d = psn.distance(r.start);
            d >= 0 && (d as u32) < r.span
        })
    }

    /// The range a response with `psn` belongs to, allowing a range whose end is not known to
    /// reach as far as the smallest path MTU would make it (up to the next range).
    fn range_of(s: &super::stream::Stream<T>, psn: Psn) -> Option<usize> {
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

    /// Learns the QP's path MTU from a full-size response and corrects the estimated ends.
    fn learn_response_pmtu(&mut self, stream: u32, full_payload: u32) {
        if !(MIN_PMTU..=4096).contains(&full_payload) || !full_payload.is_power_of_two() {
            return;
        }
        let s = &mut self.streams[stream as usize];
        if s.pmtu == full_payload {
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

    /// Inserts a response-direction packet addressed to the local QPN `local_qpn` (its DestQP)
    /// that came over no fabric path whose order counts.
    pub fn insert_response(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        local_qpn: u32,
        kind: ResponseKind,
        psn: Psn,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        self.insert_response_from(
            local,
            remote,
            sport,
            local_qpn,
            kind,
            psn,
            NO_PATH,
            PathStamp::NONE,
            len,
            item,
            now,
            out,
        )
    }

    /// Inserts a response-direction packet that arrived on fabric `path` ([`NO_PATH`]: none
    /// whose order counts) with path stamp `stamp`. A responder sends its responses in PSN
    /// order, so a fill is evidence for path-order loss detection like a request is
    /// ([`super::paths`]); ACKs and NAKs are not (a duplicate request is answered with an old
    /// PSN).
    pub fn insert_response_from(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        local_qpn: u32,
        kind: ResponseKind,
        psn: Psn,
        path: u8,
        stamp: PathStamp,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let stream = match self.response_stream_of(local, remote, local_qpn, sport, psn, kind) {
            Some(stream) => stream,
            None => {
                out.push(item);
                self.totals.passthrough += 1;
                return Insert::Passthrough;
            }
        };
        let fill = matches!(kind, ResponseKind::Fill { .. });
        if fill {
            // A retry's responses go back below what the paths delivered: a new pass, as
            // for a Go-Back-N sender.
            let source = (stamp.seq != 0).then(|| self.stamp_source(remote));
            let s = &mut self.streams[stream as usize];
            let expected = Some(s.expected);
            s.paths.see(path, psn, stamp, source, false, expected, now);
        }
        let s = &mut self.streams[stream as usize];
        s.last_seen = now;
        if s.reads.is_empty() && s.held == 0 {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        }
        let s = &self.streams[stream as usize];
        let gap = (s.held > 0).then_some((s.expected, s.gap_since));
        let r = match kind {
            ResponseKind::Fill { ends, full_payload } => {
                let r = self.insert_fill(stream, psn, ends, full_payload, len, item, now, out);
                if r == Insert::Released {
                    self.learn_skew(stream, psn, gap, now);
                }
                r
            }
            ResponseKind::Ack => self.insert_ack(stream, psn, len, item, now, out),
        };
        if path != NO_PATH {
            // A fill may be the evidence, an ACK the trigger (see `response_trigger`).
            self.check_path_loss(stream, now, out);
        }
        r
    }

    /// The response stream of a packet towards `local_qpn`, through the QP pairing; when the
    /// pairing is not known yet, the stream among the host pair's whose outstanding ranges
    /// hold `psn` (exactly one), which then becomes the pairing.
    fn response_stream_of(
        &mut self,
        local: u128,
        remote: u128,
        local_qpn: u32,
        sport: u16,
        psn: Psn,
        kind: ResponseKind,
    ) -> Option<u32> {
        if let Some(rq) = self.pairing.remote_of(local, remote, local_qpn) {
            return self.find(&StreamKey::Response {
                local,
                remote,
                remote_qpn: rq,
            });
        }
        let mut pick = super::pairing::Pick::default();
        for (rq, rsport) in self.pairing.remotes(local, remote) {
            if self
                .pairing
                .local_of(local, remote, rq)
                .is_some_and(|lq| lq != local_qpn)
            {
                continue; // paired with another local QP
            }
            let key = StreamKey::Response {
                local,
                remote,
                remote_qpn: rq,
            };
            let Some(stream) = self.index.get(&key).copied() else {
                continue;
            };
            let s = &self.streams[stream as usize];
            // A response belongs to the QP whose outstanding requests it answers.
            let fits = match kind {
                ResponseKind::Fill { .. } => Self::range_of(s, psn).is_some(),
                ResponseKind::Ack => s
                    .reads
                    .front()
                    .is_some_and(|r| psn.distance(r.start).unsigned_abs() < (1 << 16)),
            };
            if fits {
                pick.fits(rq, stream, rsport == sport);
            }
        }
        let (rq, stream) = self.chosen(&pick)?;
        // A response fits a READ's exact PSNs: that pairs the QPs. An ACK fits loosely (any
        // PSN near the outstanding READs), so it is ordered by the stream it fits but pairs
        // nothing: another QP of the host pair whose PSNs lie near (no CM seen) must not take
        // this QP's stream for good.
        if matches!(kind, ResponseKind::Fill { .. }) {
            self.pairing.bind_hint(local, remote, local_qpn, rq);
        }
        Some(stream)
    }

    fn insert_fill(
        &mut self,
        stream: u32,
        psn: Psn,
        ends: bool,
        full_payload: u32,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        if !ends {
            self.learn_response_pmtu(stream, full_payload);
        }
        let s = &mut self.streams[stream as usize];
        let Some(ri) = Self::range_of(s, psn) else {
            // Not asked for (a copy from before a retry, or stray): nothing to order it by.
            out.push(item);
            self.count_late(stream);
            return Insert::Late;
        };
        let Some(r) = s.reads.get_mut(ri) else {
            out.push(item);
            self.count_late(stream);
            return Insert::Late;
        };
        let d = psn.forward_from(r.start);
        if ends {
            r.span = d + 1;
            r.exact = true;
        } else if d >= r.span {
            r.span = d + 1;
        }
        let e = s.expected;
        let ahead = psn.distance(e);
        if ahead == 0 {
            out.push(item);
            self.count_in_order(stream);
            self.advance_response(stream, now, out);
            self.drain_response(stream, now, out);
            return Insert::Released;
        }
        if ahead < 0 {
            out.push(item);
            self.count_late(stream);
            return Insert::Late;
        }
        if self.holds_fill(stream, psn) {
            return self.duplicate(stream);
        }
        if ahead as u32 > self.mask {
            // Beyond the ring's window (the PSNs of the WRITEs between READs are never filled):
            // the far list holds it if it can; else held responses go in order, skipping what
            // is missing, until it fits.
            let slot = super::stream::Slot {
                item,
                psn,
                span: 1,
                read: None,
                len,
                arrived: now,
            };
            let item = match self.put_far(stream, slot, false) {
                Ok(()) => return Insert::Held,
                Err(slot) => slot.item,
            };
            let released = self.response_make_room(stream, psn, now, out);
            self.streams[stream as usize].stats.overflows += 1;
            self.totals.overflows += 1;
            let e = self.streams[stream as usize].expected;
            if psn == e {
                out.push(item);
                self.count_in_order(stream);
                self.advance_response(stream, now, out);
                self.drain_response(stream, now, out);
                return Insert::Overflowed { released };
            }
            if psn.is_before(e) || self.holds_fill(stream, psn) {
                out.push(item);
                self.count_late(stream);
                return Insert::Overflowed { released };
            }
            match self.can_hold(stream, psn, len) {
                Ok(()) => self.put(stream, item, psn, 1, None, len, now),
                Err(why) => {
                    out.push(item);
                    self.count_no_hold(why);
                }
            }
            return Insert::Overflowed { released };
        }
        if let Err(why) = self.can_hold(stream, psn, len) {
            out.push(item);
            self.count_no_hold(why);
            return Insert::Passthrough;
        }
        self.put(stream, item, psn, 1, None, len, now);
        Insert::Held
    }

    /// What makes the requester retry the request whose response the stream expects: the
    /// first held fill of a later request, else the first waiting ACK if it is past that
    /// request (see `ReorderCore::check_path_loss`).
    pub(super) fn response_trigger(&self, stream: u32) -> Option<Trigger> {
        let s = &self.streams[stream as usize];
        let i = Self::range_of(s, s.expected)?;
        let r = s.reads.get(i)?;
        if let Some(next) = s.reads.get(i + 1).map(|n| n.start) {
            if let Some(q) = self.next_held_psn(stream, next) {
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
    pub(super) fn release_trigger(
        &mut self,
        stream: u32,
        trigger: Trigger,
        now: u64,
        out: &mut Vec<T>,
    ) {
        match trigger {
            Trigger::Fill(q) => {
                if let Some(slot) = self.take_held(stream, q, now) {
                    out.push(slot.item);
                }
            }
            Trigger::Ack => {
                if let Some(a) = self.streams[stream as usize].acks.pop_front() {
                    self.ack_taken(stream, &a, now);
                    out.push(a.item);
                }
            }
        }
        self.totals.nak_releases += 1;
    }

    /// Whether the stream holds a response with exactly `psn` (ring or far list).
    fn holds_fill(&self, stream: u32, psn: Psn) -> bool {
        self.occupied(stream, psn).is_some()
            || self.streams[stream as usize]
                .far
                .iter()
                .any(|f| f.psn == psn)
    }

    /// An ACK or NAK with `psn` may pass unless a range that ends before it is still missing
    /// responses (the requester would take the ACK as the loss of that READ), or a READ's
    /// responses are under way: rxe's completer lets an ACK in between a READ's FIRST and LAST
    /// response reset its opcode sequence, and the READ's next response then moves the QP to
    /// the error state. Such an ACK (older than the responses released) waits for the READ's
    /// end and is then ignored by the requester as old.
    fn ack_may_pass(s: &super::stream::Stream<T>, psn: Psn) -> bool {
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

    /// An ACK or NAK older than the READ (or atomic) whose responses the requester is taking:
    /// the expected PSN is past the first outstanding range's start, so a response of that
    /// request went out, and it completed everything before it (rxe's `check_psn`: a response
    /// past a WQE's last PSN completes that WQE). The ACK tells the requester nothing; in the
    /// middle of the READ's responses rxe's completer still takes it to `check_ack`, whose
    /// update resets `comp.opcode`, and the READ's next MIDDLE or LAST response then moves the
    /// QP to the error state.
    fn ack_redundant(s: &super::stream::Stream<T>, psn: Psn) -> bool {
        s.reads
            .front()
            .is_some_and(|r| r.start.is_before(s.expected) && psn.is_before(r.start))
    }

    /// Discards the waiting ACKs and NAKs [`Self::ack_redundant`] names (counted as stale), in
    /// place: before the stage gives up on responses of the READ under way, which would
    /// otherwise let them out once its range is gone.
    fn drop_redundant_acks(&mut self, stream: u32, now: u64) {
        let n = self.streams[stream as usize].acks.len();
        for _ in 0..n {
            let Some(a) = self.streams[stream as usize].acks.pop_front() else {
                break;
            };
            if Self::ack_redundant(&self.streams[stream as usize], a.psn) {
                self.ack_taken(stream, &a, now);
                self.streams[stream as usize].stats.duplicates += 1;
                self.totals.stale_acks += 1;
            } else {
                self.streams[stream as usize].acks.push_back(a);
            }
        }
    }

    fn insert_ack(
        &mut self,
        stream: u32,
        psn: Psn,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let s = &self.streams[stream as usize];
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
                self.streams[stream as usize].stats.duplicates += 1;
                self.totals.stale_acks += 1;
                return Insert::Stale;
            }
        }
        if Self::ack_redundant(s, psn) {
            // Older than the READ under way: held, a give-up would let it out in the middle of
            // that READ's responses; passed, it would land there now.
            self.streams[stream as usize].stats.duplicates += 1;
            self.totals.stale_acks += 1;
            return Insert::Stale;
        }
        if s.acks.is_empty() && Self::ack_may_pass(s, psn) {
            out.push(item);
            self.count_in_order(stream);
            return Insert::Released;
        }
        if s.acks.len() >= MAX_WAITING_ACKS
            || self.held_bytes + len as usize > self.cfg.max_held_bytes
        {
            out.push(item);
            self.count_no_hold(super::core::NoHold::NoRoom);
            return Insert::Passthrough;
        }
        self.streams[stream as usize].acks.push_back(WaitingAck {
            item,
            psn,
            len,
            arrived: now,
        });
        self.ack_held(stream, len, now);
        Insert::Held
    }

    /// Moves the expected PSN past a filled one: the next PSN of its range, or the start of
    /// the next outstanding range; releases the ACKs that no missing response holds back now.
    fn advance_response(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        let s = &mut self.streams[stream as usize];
        let next = s.expected.add(1);
        while let Some(r) = s.reads.front() {
            let d = next.distance(r.start);
            if d >= 0 && (d as u32) < r.span {
                break;
            }
            if d < 0 {
                break;
            }
            // `next` is past this range: it is complete.
            s.reads.pop_front();
        }
        s.expected = match s.reads.front() {
            Some(r) if next.is_before(r.start) => r.start,
            _ => next,
        };
        self.release_acks(stream, now, out);
    }

    /// Releases, in arrival order, the waiting ACKs that may pass now (an ACK behind one that
    /// may not waits too, so that ACKs leave in the order they came).
    fn release_acks(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        loop {
            let s = &self.streams[stream as usize];
            let Some(a) = s.acks.front() else { break };
            if !Self::ack_may_pass(s, a.psn) {
                break;
            }
            let Some(a) = self.streams[stream as usize].acks.pop_front() else {
                break;
            };
            self.ack_taken(stream, &a, now);
            self.count_in_order(stream);
            out.push(a.item);
        }
    }

    /// Releases the held responses that are in order now.
    fn drain_response(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        loop {
            let e = self.streams[stream as usize].expected;
            // The far list's front once the expected PSN reached (or passed) it.
            if let Some(f) = self.streams[stream as usize].far.front().map(|f| f.psn) {
                if !f.is_after(e) {
                    let Some(slot) = self.take_held(stream, f, now) else {
                        break;
                    };
                    out.push(slot.item);
                    if f == e {
                        self.count_in_order(stream);
                        self.advance_response(stream, now, out);
                    } else {
                        self.count_late(stream);
                    }
                    continue;
                }
            }
            if self.occupied(stream, e).is_none() {
                break;
            }
            let Some(slot) = self.take(stream, e, now) else {
                break;
            };
            out.push(slot.item);
            self.count_in_order(stream);
            self.advance_response(stream, now, out);
        }
        let s = &mut self.streams[stream as usize];
        if s.held > 0 {
            s.gap_since = now;
        }
    }

    /// Releases held responses in PSN order, skipping the missing ones, until `psn` fits the
    /// window. The ranges stay: the requester retries what was skipped, and its retry is
    /// ordered like the first attempt.
    fn response_make_room(&mut self, stream: u32, psn: Psn, now: u64, out: &mut Vec<T>) -> u32 {
        let mut released = 0;
        loop {
            let e = self.streams[stream as usize].expected;
            if (psn.distance(e) as u32) <= self.mask {
                break;
            }
            match self.next_held_psn(stream, e) {
                Some(q) => released += u32::from(self.skip_and_release(stream, q, now, out)),
                None => {
                    self.skip_to(stream, psn, now, out);
                    break;
                }
            }
        }
        self.drain_response(stream, now, out);
        released
    }

    /// Gives up on the missing responses before the held one with `q` and releases it (in
    /// order, or late when `skip_to` left it behind the expected PSN); false when `skip_to`
    /// released it already.
    fn skip_and_release(&mut self, stream: u32, q: Psn, now: u64, out: &mut Vec<T>) -> bool {
        self.skip_to(stream, q, now, out);
        let Some(slot) = self.take_held(stream, q, now) else {
            return false;
        };
        out.push(slot.item);
        if q.is_before(self.streams[stream as usize].expected) {
            self.count_late(stream);
        } else {
            self.count_in_order(stream);
            self.advance_response(stream, now, out);
        }
        true
    }

    /// Gives up on the responses before `psn`: ranges that end before it are dropped, the
    /// expected PSN moves there, and the ACKs that were waiting for them go.
    fn skip_to(&mut self, stream: u32, psn: Psn, now: u64, out: &mut Vec<T>) {
        // While the range under way is still there: its older ACKs must not follow it out.
        self.drop_redundant_acks(stream, now);
        let s = &mut self.streams[stream as usize];
        while let Some(r) = s.reads.front() {
            if r.last().is_before(psn) {
                s.reads.pop_front();
            } else {
                break;
            }
        }
        let from = s.expected;
        s.expected = match s.reads.front() {
            Some(r) if psn.is_before(r.start) => r.start,
            _ => psn,
        };
        // Held responses behind the new expected PSN belong to no outstanding range any more.
        let e = self.streams[stream as usize].expected;
        while let Some(q) = self.next_held_psn(stream, from) {
            if !q.is_before(e) {
                break;
            }
            let Some(slot) = self.take_held(stream, q, now) else {
                break;
            };
            self.count_late(stream);
            out.push(slot.item);
        }
        self.release_acks(stream, now, out);
    }

    /// A response gap timed out: release everything held in PSN order (responses and the ACKs
    /// between them), as if the missing responses had come. The ranges after the gap stay, so
    /// that the requester's retry and what follows it are still ordered.
    pub(super) fn response_timeout(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        self.drop_redundant_acks(stream, now);
        loop {
            let e = self.streams[stream as usize].expected;
            match self.next_held_psn(stream, e) {
                Some(q) => {
                    self.skip_and_release(stream, q, now, out);
                }
                None => break,
            }
        }
        // What still waits waits for responses that were never held: let it go too.
        while let Some(a) = self.streams[stream as usize].acks.pop_front() {
            self.ack_taken(stream, &a, now);
            let s = &mut self.streams[stream as usize];
            // The requester has been told (by this ACK) that the ranges below it are over.
            while s.reads.front().is_some_and(|r| r.last().is_before(a.psn)) {
                s.reads.pop_front();
            }
            out.push(a.item);
        }
        let s = &mut self.streams[stream as usize];
        if let Some(r) = s.reads.front() {
            if s.expected.is_before(r.start) {
                s.expected = r.start;
            }
        }
    }
}
