//! The reorder core: per-stream PSN rings over one preallocated slot pool, generic over what is
//! held, driven by the caller's clock.
//!
//! It is made of parts that each own their state: the stream table (`super::table`), the
//! slot pool (`super::pool`), the fabric's evidence (`super::evidence`) and the QP pairing
//! ([`super::pairing`]); the request and response directions ([`super::request`],
//! [`super::response`]) and the loss decisions (`super::loss`) work on one stream at a time
//! over them. This file joins them behind a small interface:
//!
//! - [`ReorderCore::handle_packet`]: a packet towards a local host, with the facts the engine
//!   classified ([`RoceMeta`]) and the downlink it goes to;
//! - [`ReorderCore::handle_host`]: what a local host sent (its READ requests, NAKs, ACKs, the
//!   path MTU its responses show, RDMA CM);
//! - [`ReorderCore::poll`] at [`ReorderCore::poll_timeout`]: learning windows that end, gaps
//!   whose hold runs out, idle streams to forget;
//! - releases are appended to the caller's `out`, in order of release; counters leave as plain
//!   values ([`ReorderCore::totals`], hold and detection times).
//!
//! **Bounds.** Streams, rings (a stream takes a ring only while it holds packets) and held bytes
//! are capped by [`ReorderConfig`]. A packet that cannot be held (no stream or ring left, byte
//! cap, slot taken) passes through and is counted by reason. Idle streams are evicted a few at a
//! time.
//!
//! Single-owner and lock-free by construction: a `ReorderCore` is owned by one worker, every
//! change needs `&mut self`, and it is not `Clone`; other workers hand packets to that worker
//! through lock-free rings whose consuming end only the owner holds (`worker::HandoffRx`).

use super::config::{ReorderConfig, READ_WAIT_FACTOR};
use super::evidence::{PathEvidence, Stamped};
use super::held::Held;
use super::loss;
use super::nak_filter;
use super::pairing::{CmEvent, CmSeen, Pairing, Pick, SEEN_SLACK};
use super::paths::{Arrival, Proof};
use super::pool::SlotPool;
use super::request::RequestStream;
use super::response::{self, HostRequest, ResponseKind, ResponseStream};
use super::stream::{
    DownlinkMode, Insert, LossRecovery, Phase, PortReorder, Slot, Stream, StreamId, StreamKey,
    StreamStats,
};
use super::table::StreamTable;
use super::timers::Timers;
use super::totals::ReorderTotals;
use crate::meta::{MetaKind, QpRef, RoceMeta, NO_PATH};
use crate::wire::Psn;

/// Per-stream PSN rings over a shared, preallocated slot pool.
pub struct ReorderCore<T> {
    cfg: ReorderConfig,
    table: StreamTable<T>,
    pool: SlotPool<T>,
    evidence: PathEvidence,
    pairing: Pairing,
    /// What `nak_filter` streams keep to judge NAKs.
    judges: nak_filter::Judges<T>,
    totals: ReorderTotals,
    /// Each downlink's settings (what its new streams get); the defaults for one not listed.
    ports: Vec<PortReorder>,
    /// When idle streams are next looked for (the scan is paced in time, not per poll: 32
    /// lookups per iteration were the largest cost of a worker's idle loop in the fabric
    /// simulator's profile).
    next_evict_scan: u64,
    /// The path MTU a local responder showed last (its QP, bytes), kept once a stream took
    /// it, with the eviction count then: every READ RESPONSE shows it again, and a stream
    /// created since (after an eviction) starts without one.
    last_pmtu: Option<((QpRef, u16), u64)>,
    /// When each listed stream next needs a look.
    timers: Timers,
    /// The holding streams by gap age, kept for [`ReorderCore::relieve`] to reuse.
    relieve_scratch: Vec<(u64, StreamId)>,
    /// No timer is due before this ([`ReorderCore::poll_timeout`]).
    deadline: u64,
}

/// The stream key of a request-direction packet (`None` for any other).
#[inline]
fn request_key(meta: &RoceMeta) -> Option<StreamKey> {
    matches!(meta.kind, MetaKind::Request { .. }).then_some(StreamKey::Request {
        local: meta.local,
        qpn: meta.qpn,
    })
}

impl<T> ReorderCore<T> {
    /// A core with every structure allocated up front.
    ///
    /// # Panics
    /// If `cfg` fails [`ReorderConfig::check`].
    pub fn new(cfg: ReorderConfig) -> Self {
        if let Err(e) = cfg.check() {
            panic!("invalid reorder configuration: {e}");
        }
        ReorderCore {
            table: StreamTable::new(cfg.max_streams, cfg.max_rings + 64),
            pool: SlotPool::new(&cfg),
            evidence: PathEvidence::new(&cfg),
            pairing: Pairing::new(cfg.max_streams),
            judges: nak_filter::Judges::default(),
            totals: ReorderTotals::default(),
            ports: Vec::new(),
            next_evict_scan: 0,
            last_pmtu: None,
            timers: Timers::new(2 * (cfg.max_rings + 64)),
            relieve_scratch: Vec::new(),
            deadline: 0,
            cfg,
        }
    }

    /// The limits in force.
    pub fn config(&self) -> ReorderConfig {
        self.cfg
    }

    /// The settings of streams towards downlink `id` from now on (its own hold timeout, its
    /// loss recovery).
    pub fn set_port(&mut self, id: u16, settings: PortReorder) {
        let i = usize::from(id);
        if self.ports.len() <= i {
            self.ports.resize(i + 1, PortReorder::default());
        }
        self.ports[i] = settings;
        self.pool.add_port(id);
    }

    /// Changes the hold timeout (and nothing else) from now on.
    pub fn set_hold_timeout(&mut self, ns: u64) {
        let old = self.cfg.hold_timeout_ns;
        self.cfg.hold_timeout_ns = ns;
        for s in self.table.all_mut() {
            if s.timeout == old {
                s.timeout = ns;
            }
        }
        self.timers.ask_rescan();
        self.deadline = 0;
    }

    // ------------------------------------------------------------------ what it holds

    /// Packets held now.
    pub fn held(&self) -> usize {
        self.pool.counts().held_now as usize
    }

    /// Rings free now (every ring returns when its stream holds nothing).
    pub fn free_rings(&self) -> usize {
        self.pool.free_rings()
    }

    /// Bytes held now.
    pub fn held_bytes(&self) -> usize {
        self.pool.bytes()
    }

    /// Bytes held now for downlink `id`.
    pub fn held_bytes_for(&self, id: u16) -> u64 {
        self.pool.port_bytes(id)
    }

    /// The counters, the parts' own included.
    pub fn totals(&self) -> ReorderTotals {
        let p = self.pool.counts();
        ReorderTotals {
            held_now: p.held_now,
            held_total: p.held_total,
            max_depth: p.max_depth,
            peak_held_bytes: p.peak_bytes,
            acks_held: p.acks_held,
            stamp_disorder: self.evidence.stamp_disorder,
            peak_path_skew_ns: self.evidence.peak_skew_ns,
            streams: self.table.len() as u64,
            ..self.totals
        }
    }

    /// Hold times (ns) of packets released since the last call, for the owner's histogram.
    pub fn take_hold_times(&mut self, out: &mut Vec<u64>) {
        self.pool.take_hold_times(out);
    }

    /// Detection times (ns: gap opened to declared lost by path order) since the last call.
    pub fn take_detection_times(&mut self, out: &mut Vec<u64>) {
        self.evidence.take_detection_times(out);
    }

    /// The largest time a gap stayed open before its own packet came, lately (ns), once
    /// learned ([`super::skew`]).
    pub fn path_skew(&self, now: u64) -> Option<u64> {
        self.evidence.skew(now)
    }

    /// Streams tracked now.
    #[inline]
    pub fn stream_count(&self) -> usize {
        self.table.len()
    }

    /// Per-stream statistics, for inspection (not on the packet path).
    pub fn streams(&self) -> impl Iterator<Item = (StreamKey, Psn, StreamStats)> + '_ {
        self.table.iter().map(|s| (s.key, s.expected, s.stats))
    }

    /// The expected PSN of a stream, if it is known.
    pub fn expected(&self, key: &StreamKey) -> Option<Psn> {
        let s = self.table.get(self.table.find(key)?);
        (!s.learning()).then_some(s.expected)
    }

    /// Approximate bytes of state excluding packets: streams, index, slot pool, pairs.
    pub fn state_bytes(&self) -> usize {
        self.table.state_bytes(Stream::heap_bytes)
            + self.pool.state_bytes()
            + self.pairing.state_bytes()
            + self.timers.state_bytes()
            + self.relieve_scratch.capacity() * std::mem::size_of::<(u64, StreamId)>()
    }

    // ------------------------------------------------------------------ the parts, joined

    /// Stream `id` at work, with the evidence and what `nak_filter` streams keep beside it.
    fn parts<'a>(
        &'a mut self,
        id: StreamId,
        now: u64,
        out: &'a mut Vec<T>,
    ) -> (
        Held<'a, T>,
        &'a mut PathEvidence,
        &'a mut nak_filter::Judges<T>,
    ) {
        (
            Held {
                s: self.table.get_mut(id),
                pool: &mut self.pool,
                totals: &mut self.totals,
                cfg: &self.cfg,
                out,
                now,
            },
            &mut self.evidence,
            &mut self.judges,
        )
    }

    /// Stream `id` at work, with what `nak_filter` streams keep beside it.
    fn judged<'a>(
        &'a mut self,
        id: StreamId,
        now: u64,
        out: &'a mut Vec<T>,
    ) -> (Held<'a, T>, &'a mut nak_filter::Judges<T>) {
        let (h, _, judges) = self.parts(id, now, out);
        (h, judges)
    }

    /// Stream `id` at work, with the evidence beside it.
    fn at<'a>(
        &'a mut self,
        id: StreamId,
        now: u64,
        out: &'a mut Vec<T>,
    ) -> (Held<'a, T>, &'a mut PathEvidence) {
        let (h, ev, _) = self.parts(id, now, out);
        (h, ev)
    }

    /// After an operation on stream `id`: lists it for its timer if it needs one, and brings
    /// the next deadline forward to its own.
    fn settle(&mut self, id: StreamId, now: u64) {
        self.table.track(id);
        let d = loss::deadline(self.table.get(id), self.evidence.skew(now));
        self.timers.arm(id, d);
        if d != u64::MAX {
            // The paths' skew may shorten this hold when its period ends, as in `poll`: that
            // look is due even when the next deadline is an earlier stream's (or a stale
            // entry's) and this one's comes after it.
            self.deadline = self.deadline.min(d).min(self.evidence.skew_changes_at(now));
        }
    }

    /// [`ReorderCore::settle`] after an operation that may have moved stream `id` past the PSN
    /// a NAK it keeps back names (nak_filter): the NAK goes on to `out`.
    fn after(&mut self, id: StreamId, now: u64, out: &mut Vec<T>) {
        if self.table.get(id).nak_filter {
            let (mut h, judges) = self.judged(id, now, out);
            nak_filter::track(&mut h, judges, id);
            nak_filter::send_on_if_skipped(&mut h, judges, id);
        }
        self.settle(id, now);
    }

    /// The stream of `key`, created for downlink `port` (learning for request streams without
    /// a starting PSN from CM, active otherwise) when there is room.
    fn stream_for(&mut self, key: StreamKey, port: u16, now: u64) -> Option<StreamId> {
        if let Some(id) = self.table.lookup(&key) {
            return Some(id);
        }
        if self.table.is_full() {
            self.totals.table_full += 1;
            return None;
        }
        let start = self.pairing.take_start(&key);
        let phase = match key {
            StreamKey::Request { .. } if start.is_none() => Phase::Learning {
                until: now.saturating_add(self.cfg.learn_ns),
                min: Psn::new(0),
                max: Psn::new(0),
            },
            _ => Phase::Active,
        };
        let settings = self
            .ports
            .get(usize::from(port))
            .copied()
            .unwrap_or_default();
        let mut s = Stream::new(key, phase, start.unwrap_or(Psn::new(0)), now);
        s.timeout = settings.hold_timeout_ns.unwrap_or(self.cfg.hold_timeout_ns);
        s.recovery = settings.recovery;
        s.nak_filter = settings.mode == DownlinkMode::NakFilter;
        if s.nak_filter {
            // The host keeps what follows a gap: a declared loss moves past it.
            s.recovery = LossRecovery::ReleaseRun;
        }
        s.port = port;
        self.pool.add_port(port);
        let id = self.table.insert(s);
        self.totals.peak_streams = self.totals.peak_streams.max(self.table.len() as u64);
        // Not settled here: every caller settles it after its packet (`after`), with the state
        // that packet leaves (a timer armed for a learning window the first packet already
        // ended would only wait in the heap).
        Some(id)
    }

    // ------------------------------------------------------------------ packets

    /// A packet towards a local host on downlink `port`, with what the engine made of it:
    /// requests go into their QP's request stream, READ responses and the ACKs between them
    /// into the response stream of the READs they answer, RDMA CM teaches the pairing and
    /// passes; anything else passes. What that releases goes to `out`.
    pub fn handle_packet(
        &mut self,
        port: u16,
        meta: &RoceMeta,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let stamped = Stamped {
            sender: meta.remote,
            path: meta.path,
            stamp: meta.stamp,
        };
        // (No stamp, or no path whose order counts: nothing filed, nobody to check.)
        let waiting = self.evidence.see_stamp(stamped, now);
        let r = match meta.kind {
            MetaKind::Request { .. } => self.request(port, meta, item, now, out),
            MetaKind::Fill { ends } => {
                let kind = ResponseKind::Fill {
                    ends,
                    full_payload: u32::from(meta.full_payload),
                };
                self.response(meta, kind, item, now, out)
            }
            MetaKind::Ack => self.response(meta, ResponseKind::Ack, item, now, out),
            MetaKind::Cm {
                sender_local,
                receiver_local,
                msg,
            } => {
                self.cm(
                    &CmEvent {
                        sender: meta.local,
                        receiver: meta.remote,
                        sender_local,
                        receiver_local,
                        msg,
                    },
                    now,
                    out,
                );
                out.push(item);
                Insert::Passthrough
            }
            _ => {
                out.push(item);
                Insert::Passthrough
            }
        };
        if waiting {
            let due = self.evidence.take_due(stamped);
            for &id in &due {
                let (h, ev) = self.at(id, now, out);
                loss::check(h, ev, id);
                self.after(id, now, out);
            }
            self.evidence.give_back(due);
        }
        r
    }

    /// Starts loading the index slot of the stream a request-direction packet `meta` belongs
    /// to (nothing for other packets): the first of the two steps that let a burst's lookups
    /// overlap ([`ReorderCore::prefetch_stream`] is the second, a little later).
    #[inline]
    pub fn prefetch_index(&self, meta: &RoceMeta) {
        if let Some(key) = request_key(meta) {
            self.table.prefetch_slot(&key);
        }
    }

    /// Starts loading the state of the stream a request-direction packet `meta` belongs to,
    /// if it has one (its index slot is read now).
    #[inline]
    pub fn prefetch_stream(&self, meta: &RoceMeta) {
        if let Some(key) = request_key(meta) {
            self.table.prefetch_stream(&key);
        }
    }

    /// A request-direction packet.
    fn request(
        &mut self,
        port: u16,
        meta: &RoceMeta,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let qp = meta.qp();
        let read = match meta.kind {
            MetaKind::Request { read_len } => read_len,
            _ => None,
        };
        let key = StreamKey::Request {
            local: qp.local,
            qpn: qp.qpn,
        };
        if meta.full_payload > 0 {
            // A FIRST or MIDDLE packet shows the QP's path MTU, which its READs span.
            if let Some(id) = self.table.find(&key) {
                let (h, _) = self.at(id, now, out);
                RequestStream(h).learn_pmtu(u32::from(meta.full_payload));
                self.after(id, now, out);
            }
        }
        let Some(id) = self.stream_for(key, port, now) else {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        };
        // The stream keeps its source only from a stamped packet.
        let source = (meta.stamp.seq != 0).then(|| self.evidence.source_of(qp.remote));
        let s = self.table.get_mut(id);
        if !s.peer_seen {
            s.peer_seen = true;
            self.pairing.saw_local(&qp);
        }
        let s = self.table.get_mut(id);
        let arrival = Arrival {
            path: meta.path,
            psn: meta.psn,
            stamp: meta.stamp,
            source,
            selective: s.recovery == LossRecovery::ReleaseRun,
            expected: (!s.learning()).then_some(s.expected),
        };
        s.paths.see(arrival, now);
        let gap = (s.held > 0 && !s.learning()).then_some((s.expected, s.gap_since));
        let restarts = s.stats.restarts;
        let slot = Slot {
            item,
            psn: meta.psn,
            span: meta.span.max(1),
            read,
            len: meta.len,
            arrived: now,
        };
        let (h, ev) = self.at(id, now, out);
        let mut r = RequestStream(h);
        let res = r.insert(slot);
        if r.s.stats.restarts != restarts {
            // The stream started a new PSN sequence at this packet and forgot its paths: this
            // packet is the new sequence's first evidence.
            r.s.paths.see(
                Arrival {
                    expected: None,
                    ..arrival
                },
                now,
            );
        }
        if res == Insert::Released {
            ev.learn_skew(r.s, meta.psn, gap, now);
        }

        if matches!(res, Insert::Late | Insert::Released) && r.s.paths.retransmitted(meta.psn) {
            // The retransmission of a gap released to a selective-repeat RNIC passed (late, or
            // in order when the host's NAK moved `e` back to it): a later gap that waited for
            // it goes now, and the RNIC NAKs that one (if the paths still show it lost: the
            // packet may have come meanwhile, and the gap now open be another one).
            if r.s.held > 0 && ev.proof(r.s, r.s.expected, now).0 != Proof::Missing {
                r.release_run();
            }
        }
        let filtering = r.s.nak_filter;
        let filled = res == Insert::Released && gap.is_some();
        if meta.path != NO_PATH {
            loss::check(r.0, ev, id);
        }
        if filtering {
            // Before a kept NAK is judged skipped: this packet may be the one it names.
            let (mut h, judges) = self.judged(id, now, out);
            nak_filter::arrived(&mut h, judges, id, meta.psn, filled);
        }
        self.after(id, now, out);
        res
    }

    /// A response-direction packet of `kind`, addressed to the local QPN `meta.qpn`.
    fn response(
        &mut self,
        meta: &RoceMeta,
        kind: ResponseKind,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let qp = meta.qp();
        let Some(id) = self.response_stream_of(&qp, meta.psn, kind) else {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        };
        let fill = matches!(kind, ResponseKind::Fill { .. });
        if fill {
            // A responder sends its responses in PSN order, so a fill is evidence for
            // path-order loss detection like a request is; ACKs and NAKs are not (a duplicate
            // request is answered with an old PSN). A retry's responses go back below what the
            // paths delivered: a new pass, as for a Go-Back-N sender.
            let source = (meta.stamp.seq != 0).then(|| self.evidence.source_of(qp.remote));
            let s = self.table.get_mut(id);
            let arrival = Arrival {
                path: meta.path,
                psn: meta.psn,
                stamp: meta.stamp,
                source,
                selective: false,
                expected: Some(s.expected),
            };
            s.paths.see(arrival, now);
        }
        let s = self.table.get(id);
        let gap = (s.held > 0).then_some((s.expected, s.gap_since));
        let slot = Slot {
            item,
            psn: meta.psn,
            span: 1,
            read: None,
            len: meta.len,
            arrived: now,
        };
        let (h, ev) = self.at(id, now, out);
        let mut r = ResponseStream(h);
        let res = r.insert(kind, slot);
        if fill && res == Insert::Released {
            ev.learn_skew(r.s, meta.psn, gap, now);
        }
        let filtering = r.s.nak_filter;
        let filled = res == Insert::Released && gap.is_some();
        if meta.path != NO_PATH {
            // A fill may be the evidence, an ACK the trigger (see `loss::check`).
            loss::check(r.0, ev, id);
        }
        if filtering && fill {
            // A READ retry kept back for this response is moot.
            let (mut h, judges) = self.judged(id, now, out);
            nak_filter::arrived(&mut h, judges, id, meta.psn, filled);
        }
        self.after(id, now, out);
        res
    }

    /// The response stream of a packet towards the local QP `qp` names, through the QP
    /// pairing; when the pairing is not known yet, the stream among the host pair's whose
    /// outstanding requests the packet answers (exactly one), which a fill then binds.
    fn response_stream_of(&mut self, qp: &QpRef, psn: Psn, kind: ResponseKind) -> Option<StreamId> {
        let (local, remote) = (qp.local, qp.remote);
        if let Some(rq) = self.pairing.remote_of(local, remote, qp.qpn) {
            return self.table.find(&StreamKey::Response {
                local,
                remote,
                remote_qpn: rq,
            });
        }
        let mut pick = Pick::default();
        for (rq, rsport) in self.pairing.remote_candidates(local, remote, qp.qpn) {
            let key = StreamKey::Response {
                local,
                remote,
                remote_qpn: rq,
            };
            let Some(id) = self.table.find(&key) else {
                continue;
            };
            // A response belongs to the QP whose outstanding requests it answers.
            if response::answers(self.table.get(id), kind, psn) {
                pick.fits(rq, id, rsport == qp.sport);
            }
        }
        let (rq, id) = self.chosen(&pick)?;
        // A response fits a READ's exact PSNs: that pairs the QPs. An ACK fits loosely (any
        // PSN near the outstanding READs), so it is ordered by the stream it fits but pairs
        // nothing: another QP of the host pair whose PSNs lie near (no CM seen) must not take
        // this QP's stream for good.
        if matches!(kind, ResponseKind::Fill { .. }) {
            self.pairing.bind_hint(local, remote, qp.qpn, rq);
        }
        Some(id)
    }

    /// The QP a [`Pick`] chose, counted as a hinted pairing; an ambiguous choice is counted
    /// and gives none.
    fn chosen(&mut self, pick: &Pick) -> Option<(u32, StreamId)> {
        match pick.choose() {
            Ok(Some(p)) => {
                self.totals.pairs_hinted += 1;
                Some(p)
            }
            Ok(None) => None,
            Err(()) => {
                self.totals.pairs_ambiguous += 1;
                None
            }
        }
    }

    // ------------------------------------------------------------------ what hosts send

    /// What a local host on downlink `port` sent, as the engine made of it: a READ (or atomic,
    /// FLUSH, ATOMIC WRITE) request whose responses will come back ordered; a NAK or ACK of its
    /// responder, which moves the request stream it concerns; the path MTU its READ RESPONSEs
    /// show; RDMA CM. What that releases goes to `out`.
    pub fn handle_host(&mut self, port: u16, meta: &RoceMeta, now: u64, out: &mut Vec<T>) {
        let qp = meta.qp();
        match meta.kind {
            MetaKind::HostRead { dma_len } => {
                let req = HostRequest::Read {
                    dma_len,
                    span: meta.span,
                };
                self.host_read(port, meta, req, now, out);
            }
            MetaKind::HostSingle => self.host_read(port, meta, HostRequest::Single, now, out),
            MetaKind::HostNak | MetaKind::HostRnrNak => {
                self.pairing.saw_remote(&qp);
                let Some(id) = self.request_stream_of(&qp, meta.psn) else {
                    self.totals.host_naks_ignored += 1;
                    return;
                };
                let (h, _) = self.at(id, now, out);
                RequestStream(h).host_nak(meta.psn);
                self.after(id, now, out);
            }
            MetaKind::HostPmtu => {
                // Every READ RESPONSE FIRST or MIDDLE shows it again: looked up once per QP
                // and stream life.
                let seen = ((qp, meta.full_payload), self.totals.evictions);
                if self.last_pmtu != Some(seen) {
                    let applied =
                        self.host_pmtu(&qp, meta.psn, u32::from(meta.full_payload), now, out);
                    self.last_pmtu = applied.then_some(seen);
                }
            }
            MetaKind::HostAck => {
                self.pairing.saw_remote(&qp);
                let next = meta.psn.add(1);
                let Some(id) = self.request_stream_of(&qp, next) else {
                    return;
                };
                let (mut h, judges) = self.judged(id, now, out);
                nak_filter::acked(&mut h, judges, id, next);
                RequestStream(h).host_ack(next);
                self.after(id, now, out);
            }
            MetaKind::Cm {
                sender_local,
                receiver_local,
                msg,
            } => {
                let ev = CmEvent {
                    sender: meta.local,
                    receiver: meta.remote,
                    sender_local,
                    receiver_local,
                    msg,
                };
                self.cm(&ev, now, out);
            }
            _ => {}
        }
    }

    /// A sequence NAK (`meta`, of kind [`MetaKind::HostNak`]) a local host on downlink `port`
    /// sent, as `item`, already routed towards the fabric. Towards a `reorder` downlink it
    /// moves the stream it concerns ([`ReorderCore::handle_host`]) and goes on; towards a
    /// `nak_filter` downlink it is judged ([`super::nak_filter`]): given back when it passes,
    /// kept back or dropped when the PSN it names is still on its way. What that releases
    /// (a NAK kept earlier and moot now is not released) goes to `out`.
    pub fn handle_host_nak(
        &mut self,
        port: u16,
        meta: &RoceMeta,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Option<T> {
        let filtering = self
            .ports
            .get(usize::from(port))
            .is_some_and(|p| p.mode == DownlinkMode::NakFilter);
        if filtering && matches!(meta.kind, MetaKind::HostRead { .. } | MetaKind::HostSingle) {
            return self.judge_retry(port, meta, item, now, out);
        }
        if !filtering || meta.kind != MetaKind::HostNak {
            self.handle_host(port, meta, now, out);
            return Some(item);
        }
        let qp = meta.qp();
        self.pairing.saw_remote(&qp);
        let id = self.request_stream_of(&qp, meta.psn).filter(|&id| {
            let s = self.table.get(id);
            let StreamKey::Request { qpn, .. } = s.key else {
                return false;
            };
            s.nak_filter && self.pairing.surely_pairs(&qp, qpn)
        });
        let Some(id) = id else {
            self.totals.naks_passed += 1;
            self.totals.naks_unjudged += 1;
            return Some(item);
        };
        let n = meta.psn;
        if self.table.get(id).learning() {
            // A new QP's host names the PSN it expects: where the stream starts (what was
            // forwarded below it passed as late), as a `reorder` stream resyncs on it.
            let (h, _) = self.judged(id, now, out);
            RequestStream(h).resync(n);
        }
        let (h, judges) = self.judged(id, now, out);
        let verdict = nak_filter::judge(&h, judges.get(&id), n);
        let passed = match verdict {
            nak_filter::Judgement::Pass => {
                // Its sender resends `n`: what fills it is a retransmission.
                h.s.paths.host_nak(n);
                h.s.host_naked_psn = n.value();
                h.totals.naks_passed += 1;
                if n.distance(h.s.expected) > 0 {
                    h.totals.naks_unjudged += 1;
                }
                Some(item)
            }
            nak_filter::Judgement::Crossed => {
                h.totals.naks_filtered += 1;
                None
            }
            nak_filter::Judgement::Keep => {
                h.totals.naks_filtered += 1;
                nak_filter::keep(&h, judges, id, (n, 1), item);
                None
            }
        };
        self.after(id, now, out);
        passed
    }

    /// A READ, atomic or FLUSH request (`item`) a local host on the `nak_filter` downlink
    /// `port` sent: kept back when it asks again for responses still on their way
    /// (`nak_filter::judge_retry`), else passed on (and registered, as
    /// [`ReorderCore::handle_host`] does).
    fn judge_retry(
        &mut self,
        port: u16,
        meta: &RoceMeta,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Option<T> {
        let qp = meta.qp();
        let key = StreamKey::Response {
            local: qp.local,
            remote: qp.remote,
            remote_qpn: qp.qpn,
        };
        if let Some(id) = self.table.find(&key) {
            let (h, judges) = self.judged(id, now, out);
            let (verdict, first, left) = if h.s.nak_filter {
                nak_filter::judge_retry(&h, judges.get(&id), meta.psn, meta.span)
            } else {
                (nak_filter::Judgement::Pass, meta.psn, meta.span)
            };
            match verdict {
                nak_filter::Judgement::Keep => {
                    h.totals.read_retries_filtered += 1;
                    nak_filter::keep(&h, judges, id, (first, left), item);
                    self.after(id, now, out);
                    return None;
                }
                nak_filter::Judgement::Crossed => {
                    h.totals.read_retries_filtered += 1;
                    return None;
                }
                nak_filter::Judgement::Pass => {}
            }
        }
        self.handle_host(port, meta, now, out);
        Some(item)
    }

    /// The local host sent a request to the remote QP `meta` names whose responses will fill
    /// the PSNs from `meta.psn` on.
    fn host_read(
        &mut self,
        port: u16,
        meta: &RoceMeta,
        req: HostRequest,
        now: u64,
        out: &mut Vec<T>,
    ) {
        let qp = meta.qp();
        self.pairing.saw_remote(&qp);
        let key = StreamKey::Response {
            local: qp.local,
            remote: qp.remote,
            remote_qpn: qp.qpn,
        };
        let Some(id) = self.stream_for(key, port, now) else {
            return;
        };
        let (h, _) = self.at(id, now, out);
        ResponseStream(h).register(meta.psn, req);
        self.after(id, now, out);
    }

    /// The local host's responder showed path MTU `pmtu` to the remote QP `qp` names: its
    /// request stream's READ REQUESTs span at that path MTU. True when a stream now has it
    /// (else nothing was applied).
    fn host_pmtu(&mut self, qp: &QpRef, psn: Psn, pmtu: u32, now: u64, out: &mut Vec<T>) -> bool {
        self.pairing.saw_remote(qp);
        let Some(id) = self.request_stream_of(qp, psn) else {
            return false;
        };
        let (h, _) = self.at(id, now, out);
        RequestStream(h).learn_pmtu(pmtu);
        self.after(id, now, out);
        self.table.get(id).pmtu == pmtu
    }

    /// Whether a host's ACK or NAK naming `psn` can concern a stream expecting `e`.
    fn near(&self, e: Psn, psn: Psn) -> bool {
        let d = e.distance(psn);
        (-(self.cfg.mask() as i32)..super::config::HOST_PSN_REACH as i32).contains(&d)
    }

    /// The request stream a local host's ACK or NAK to the remote QP `qp` names concerns: by
    /// the pairing, else by the UDP source port and the PSN (exactly one local QP fits).
    fn request_stream_of(&mut self, qp: &QpRef, psn: Psn) -> Option<StreamId> {
        let (local, remote) = (qp.local, qp.remote);
        if let Some(lq) = self.pairing.local_of(local, remote, qp.qpn) {
            return self.table.find(&StreamKey::Request { local, qpn: lq });
        }
        let mut pick = Pick::default();
        for (lq, lsport) in self.pairing.local_candidates(local, remote, qp.qpn) {
            let Some(id) = self.table.find(&StreamKey::Request { local, qpn: lq }) else {
                continue;
            };
            let s = self.table.get(id);
            if s.learning() || self.near(s.expected, psn) {
                pick.fits(lq, id, lsport == qp.sport);
            }
        }
        let (lq, id) = self.chosen(&pick)?;
        self.pairing.bind_hint(local, remote, lq, qp.qpn);
        Some(id)
    }

    /// Learns from an RDMA CM REQ or REP passing the switch. A REQ is remembered until its
    /// REP; the REP gives both QPNs and the starting PSN the local host's responder will see
    /// first. A request stream of a QPN the exchange names starts over at that PSN (the QPN was
    /// reused by a new connection); what it held is released in order. A REQ resent after its
    /// REP (same communication ID, QPN and starting PSN) is counted and changes nothing.
    fn cm(&mut self, ev: &CmEvent, now: u64, out: &mut Vec<T>) {
        let mut learned = Vec::new();
        if self.pairing.observe_cm(ev, &mut learned) == CmSeen::Repeated {
            self.totals.cm_repeated += 1;
        }
        for (local, _remote, local_qpn, _remote_qpn, start) in learned {
            self.totals.cm_learned += 1;
            let key = StreamKey::Request {
                local,
                qpn: local_qpn,
            };
            let Some(id) = self.table.find(&key) else {
                continue;
            };
            self.pairing.forget_start(&key);
            let (h, _) = self.at(id, now, out);
            RequestStream(h).cm_start(start);
            self.after(id, now, out);
        }
    }

    /// Records that the local QP `qp` names receives requests from its remote host on its UDP
    /// source port, as a request packet of it would (tests that pair QPs without packets).
    #[cfg(test)]
    pub(super) fn learn_pair(&mut self, qp: &QpRef) {
        self.pairing.saw_local(qp);
    }

    /// The QP pairing, for inspection.
    #[cfg(test)]
    pub(super) fn pairing(&self) -> &Pairing {
        &self.pairing
    }

    // ------------------------------------------------------------------ the fabric

    /// The fabric paths there are (`count`, numbered as [`RoceMeta::path`]) and those down now
    /// (`down`, a bit per path): a path that is down no longer blocks a path-order decision,
    /// so on a change every stream holding packets is checked again.
    pub fn set_paths(&mut self, count: usize, down: u64, now: u64, out: &mut Vec<T>) {
        if !self.evidence.set_paths(count, down) {
            return;
        }
        for i in 0..self.table.active().len() {
            if let Some(id) = self.table.active_at(i) {
                let (h, ev) = self.at(id, now, out);
                loss::check(h, ev, id);
                self.after(id, now, out);
            }
        }
    }

    // ------------------------------------------------------------------ timers

    /// No timer of the core is due before this time (`u64::MAX`: none is running): a learning
    /// window that ends, a gap whose hold runs out, or the paths' skew changing the holds. A
    /// worker with nothing else to do sleeps until then. Calling [`ReorderCore::poll`] earlier
    /// does no harm.
    pub fn poll_timeout(&self) -> u64 {
        self.deadline
    }

    /// When the next look for idle streams to evict (and QPs of streams gone to forget) is
    /// due (`u64::MAX`: none to look at): upkeep, not a reason to wake. It runs with the first
    /// poll from then on, which [`ReorderCore::poll_due`] tells a caller to make.
    pub fn sweep_at(&self) -> u64 {
        if self.table.len() > 0 || self.pairing.entries() > SEEN_SLACK {
            self.next_evict_scan
        } else {
            u64::MAX
        }
    }

    /// True when [`ReorderCore::poll`] has something to do at `now`: a timer is due or the
    /// sweep for idle streams.
    #[inline]
    pub fn poll_due(&self, now: u64) -> bool {
        now >= self.deadline || now >= self.sweep_at()
    }

    /// Checks timers at `now`: ends learning windows, declares timed-out gaps lost (releasing
    /// what is held, in order), and evicts a few idle streams.
    pub fn poll(&mut self, now: u64, out: &mut Vec<T>) {
        let skew = self.evidence.skew(now);
        if self.timers.rescan(skew, self.table.active().len()) {
            // A hold may have become shorter than its stream's entry (or the entries are
            // gone): every listed stream is armed at its deadline now.
            let mut i = 0;
            while let Some(id) = self.table.active_at(i) {
                if self.rearm(id, skew, 0) {
                    i += 1;
                }
            }
        }
        // Only the streams whose look is due: each ends its learning, gives up its gap if the
        // hold ran out, and goes back in at its next deadline, or off the list.
        while let Some(id) = self.timers.pop_due(now) {
            let s = self.table.get(id);
            if let Phase::Learning { until, .. } = s.phase {
                if now >= until {
                    let (h, _) = self.at(id, now, out);
                    RequestStream(h).finish_learning();
                }
            }
            let s = self.table.get(id);
            if !s.learning()
                && s.held > 0
                && now.saturating_sub(s.gap_since) >= loss::hold_limit(s, skew)
            {
                self.timeout(id, now, out);
            }
            if self.table.get(id).nak_filter {
                let (mut h, judges) = self.judged(id, now, out);
                nak_filter::track(&mut h, judges, id);
                nak_filter::send_on_if_skipped(&mut h, judges, id);
            }
            // Never due again at this same `now`: a look that changed nothing would come back
            // at once.
            self.rearm(id, skew, now.saturating_add(1));
        }
        if now >= self.next_evict_scan {
            // 32 streams per period: a table of 131k streams is swept in 4096 periods, well
            // within the idle time that evicts (the period is at most 1/8192 of it, 10 us).
            self.next_evict_scan = now.saturating_add((self.cfg.idle_evict_ns / 8192).min(10_000));
            self.evict_some(now, out, 32);
            if self.pairing.entries() > 2 * self.table.len() + SEEN_SLACK {
                // The QPs of streams gone are of no use to the pairing any more.
                let table = &self.table;
                self.pairing.prune(|k| table.contains(k));
            }
        }
        let mut deadline = self.timers.next();
        if deadline != u64::MAX || !self.table.active().is_empty() {
            // The paths' skew may shorten a hold when a period ends (also that of a stream
            // armed behind a stale entry, which the period's end must not wait for).
            deadline = deadline.min(self.evidence.skew_changes_at(now));
        }
        self.deadline = deadline;
    }

    /// Arms listed stream `id` at its deadline (at least `floor`), or unlists it when it holds
    /// nothing and is not learning (listed until its entry came due); true when it stays
    /// listed.
    fn rearm(&mut self, id: StreamId, skew: Option<u64>, floor: u64) -> bool {
        let s = self.table.get(id);
        if s.held == 0 && !s.learning() {
            self.table.unlist_stream(id);
            return false;
        }
        let d = loss::deadline(s, skew).max(floor);
        self.timers.arm(id, d);
        true
    }

    /// The timer heap's entries (stale ones included) and the looks its polls took so far.
    #[cfg(test)]
    pub(super) fn timer_usage(&self) -> (usize, u64) {
        self.timers.usage()
    }

    fn timeout(&mut self, id: StreamId, now: u64, out: &mut Vec<T>) {
        self.table.get_mut(id).stats.timeouts += 1;
        self.totals.timeouts += 1;
        let (mut h, judges) = self.judged(id, now, out);
        if h.s.nak_filter {
            nak_filter::timed_out(&mut h, judges, id);
        }
        loss::give_up(h);
    }

    /// Gives up the receive buffers held behind the oldest gaps until at least `packets` are
    /// released (or nothing is held): a receive pool runs low, and a port whose pool is empty
    /// receives nothing, the retransmissions that would fill those gaps included. Each gap
    /// goes as a hold timeout would let it go (what is held released in PSN order), oldest
    /// first; counted in `pool_give_ups`. Spraying spreads every stream's packets over every
    /// uplink, so each stream that holds behind a gap pins buffers of every uplink's pool:
    /// which one runs low does not change which gaps are the oldest. Returns what was released.
    pub fn relieve(&mut self, packets: usize, now: u64, out: &mut Vec<T>) -> usize {
        let before = out.len();
        // The holding streams in the order their gaps opened, taken once: with thousands of
        // streams holding behind a slow path, looking for the oldest again after each give-up
        // cost the whole list each time.
        let mut oldest = std::mem::take(&mut self.relieve_scratch);
        'passes: loop {
            oldest.clear();
            let table = &self.table;
            oldest.extend(
                table
                    .active()
                    .iter()
                    .copied()
                    .filter(|&id| table.get(id).held > 0 && !table.get(id).nak_filter)
                    .map(|id| (table.get(id).gap_since, id)),
            );
            if oldest.is_empty() {
                break;
            }
            oldest.sort_unstable();
            let mut gave = false;
            for &(_, id) in &oldest {
                if out.len() - before >= packets {
                    break 'passes;
                }
                if self.table.get(id).learning() {
                    let (h, _) = self.at(id, now, out);
                    RequestStream(h).finish_learning();
                }
                let held = self.table.get(id).held;
                if held == 0 {
                    continue;
                }
                self.totals.pool_give_ups += 1;
                let (h, _) = self.at(id, now, out);
                loss::give_up(h);
                self.after(id, now, out);
                gave |= self.table.get(id).held < held;
            }
            if !gave || out.len() - before >= packets {
                // Nothing could go (cannot happen: a give-up releases what is held); never
                // spin on it.
                break;
            }
        }
        self.relieve_scratch = oldest;
        out.len() - before
    }

    fn evict_some(&mut self, now: u64, out: &mut Vec<T>, budget: usize) {
        for _ in 0..budget.min(self.table.slots()) {
            let Some(id) = self.table.next_to_scan() else {
                continue;
            };
            let s = self.table.get(id);
            // A response stream with READs outstanding is waiting, not idle: their responses
            // can queue behind other traffic far longer than a stream's packets are apart, and
            // forgetting the ranges would let the ACKs after them pass the responses.
            let after = if s.reads.is_empty() {
                self.cfg.idle_evict_ns
            } else {
                self.cfg.idle_evict_ns.saturating_mul(READ_WAIT_FACTOR)
            };
            if now.saturating_sub(s.last_seen) >= after {
                self.forget(id, now, out);
                self.totals.evictions += 1;
            }
        }
    }

    /// Forgets stream `id`, releasing (in order) whatever it still holds.
    fn forget(&mut self, id: StreamId, now: u64, out: &mut Vec<T>) {
        let (mut h, judges) = self.judged(id, now, out);
        h.flush();
        nak_filter::forget(&mut h, judges, id);
        while let Some(a) = h.s.acks.pop_front() {
            h.pool.ack_taken(h.s, &a, now);
            h.out.push(a.item);
        }
        h.pool.return_ring(h.s);
        // Nothing may come back to this id: its stamp waits (its slot may soon be another
        // stream's) and its timer entries go with it.
        self.evidence.forget_stream(self.table.get(id), id);
        self.table.remove(id);
        self.timers.forget(id);
    }
}
