//! QP pairing: which local QP a remote QP talks to.
//!
//! Packets carry only the destination QPN. A local host's NAKs, ACKs and READ REQUESTs are
//! addressed to the remote QP, while the streams they concern are named by the local QP
//! (request streams) or reached from packets addressed to it (response streams). So the core
//! keeps, per host pair, the binding local QPN <-> remote QPN:
//!
//! - **exact** from an RDMA CM REQ/REP exchange passing the switch (both QPNs, both starting
//!   PSNs); a later exchange for the same QPN replaces it (a QP re-created with its QPN);
//! - **hinted** otherwise: a remote QP and a local QP that are the only ones of their host
//!   pair with one UDP source port (Linux and ConnectX stacks derive it from both QPNs, so both
//!   directions of a QP pair share it), or, when several QPs share the port (it is only 14 bits
//!   of a hash), the one QP whose PSNs the packet fits. A hint never overrides an exact binding
//!   and is made only when exactly one QP fits; otherwise the packet is counted
//!   (`pairs_ambiguous`) and applied to no stream.
//!
//! Every table is bounded by the stream limit; when one is full it starts over (a binding lost
//! that way is learned again from the next packets).

// The host-observation entry points take the packet's addresses, port, QPN and PSN one by
// one, as the stage has them.
#![allow(clippy::too_many_arguments)]

use super::stream::{fold, StreamKey, NOT_NAKED};
use crate::ids::IntMap;
use crate::wire::cm::CmMessage;
use crate::wire::Psn;

/// A host pair: (local address, remote address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostPair(u128, u128);

impl std::hash::Hash for HostPair {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(fold(self.0) ^ fold(self.1).rotate_left(29));
    }
}

/// A QP of a host pair: (local address, remote address, QPN), hashed as one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PairQp(u128, u128, u32);

impl std::hash::Hash for PairQp {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(fold(self.0) ^ fold(self.1).rotate_left(29) ^ u64::from(self.2) << 32);
    }
}

/// The QPs seen on one host pair, with their UDP source ports.
#[derive(Debug, Default)]
struct Seen {
    /// Local QPNs that received requests.
    locals: IntMap<u32, u16>,
    /// Remote QPNs the local host sent READs, ACKs or NAKs to.
    remotes: IntMap<u32, u16>,
}

/// QPs remembered per host pair and side; beyond it the list starts over (and is learned
/// again from the next packets).
const MAX_SEEN: usize = 4096;

/// Entries `seen` may hold beyond twice the streams tracked before the core prunes those of
/// streams that are gone ([`super::core::ReorderCore::prune_pairing`]).
pub(super) const SEEN_SLACK: usize = 64;

/// Remembers `qpn` with `sport`; returns (entries a clear dropped, entries added).
fn remember(v: &mut IntMap<u32, u16>, qpn: u32, sport: u16) -> (usize, usize) {
    let mut dropped = 0;
    if v.len() >= MAX_SEEN && !v.contains_key(&qpn) {
        dropped = v.len();
        v.clear();
    }
    (dropped, usize::from(v.insert(qpn, sport).is_none()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Binding {
    qpn: u32,
    exact: bool,
}

/// Inserts into a CM map of at most `cap` entries, forgetting all of them when it is full: a
/// stream then learns its start instead of taking it from CM, and a REQ resent after its REP is
/// taken for a new connection (its stream starts over at the same PSN once more).
fn insert_bounded<K: std::hash::Hash + Eq, V>(map: &mut IntMap<K, V>, cap: usize, k: K, v: V) {
    if map.len() >= cap {
        map.clear();
    }
    map.insert(k, v);
}

/// What [`Pairing::observe_cm`] made of a CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CmSeen {
    /// A REQ seen again after its REP: the active side resending it.
    Repeated,
    /// Anything else (what it completed, if anything, is in `learned`).
    Other,
}

/// The pairing tables of one core.
#[derive(Debug)]
pub(super) struct Pairing {
    cap: usize,
    seen: IntMap<HostPair, Seen>,
    /// QPs remembered in `seen`, both sides, every host pair.
    entries: usize,
    /// (local, remote, local QPN) -> remote QPN.
    by_local: IntMap<PairQp, Binding>,
    /// (local, remote, remote QPN) -> local QPN.
    by_remote: IntMap<PairQp, Binding>,
    /// CM REQs waiting for their REP: (requester, comm id) -> (QPN, starting PSN).
    cm_req: IntMap<PairQp, (u32, Psn)>,
    /// CM REQs whose REP was seen, keyed as `cm_req`: a REQ with the same QPN and starting
    /// PSN again is the active side resending it (its REP was slow), not a new connection.
    cm_answered: IntMap<PairQp, (u32, Psn)>,
    /// Starting PSNs from CM for request streams not created yet.
    cm_start: IntMap<StreamKey, Psn>,
}

impl Pairing {
    pub(super) fn new(cap: usize) -> Pairing {
        Pairing {
            cap: cap.max(1),
            seen: IntMap::default(),
            entries: 0,
            by_local: IntMap::default(),
            by_remote: IntMap::default(),
            cm_req: IntMap::default(),
            cm_answered: IntMap::default(),
            cm_start: IntMap::default(),
        }
    }

    pub(super) fn state_bytes(&self) -> usize {
        let seen: usize = self
            .seen
            .values()
            .map(|s| (s.locals.capacity() + s.remotes.capacity()) * 16)
            .sum();
        let cm =
            (self.cm_req.capacity() + self.cm_answered.capacity() + self.cm_start.capacity()) * 48;
        seen + (self.seen.capacity() + self.by_local.capacity() + self.by_remote.capacity()) * 48
            + cm
    }

    fn seen_mut(&mut self, local: u128, remote: u128) -> &mut Seen {
        if self.seen.len() >= self.cap && !self.seen.contains_key(&HostPair(local, remote)) {
            self.seen.clear();
            self.entries = 0;
        }
        self.seen.entry(HostPair(local, remote)).or_default()
    }

    /// A request from `remote` arrived for the local QP `local_qpn` with UDP source `sport`.
    pub(super) fn saw_local(&mut self, local: u128, remote: u128, local_qpn: u32, sport: u16) {
        let (dropped, added) = remember(&mut self.seen_mut(local, remote).locals, local_qpn, sport);
        self.entries = self.entries.saturating_sub(dropped) + added;
    }

    /// The local host sent to the remote QP `remote_qpn` with UDP source `sport`.
    pub(super) fn saw_remote(&mut self, local: u128, remote: u128, remote_qpn: u32, sport: u16) {
        let (dropped, added) =
            remember(&mut self.seen_mut(local, remote).remotes, remote_qpn, sport);
        self.entries = self.entries.saturating_sub(dropped) + added;
    }

    /// QPs remembered in `seen`.
    pub(super) fn entries(&self) -> usize {
        self.entries
    }

    /// The remote QPs of a host pair seen so far, with their UDP source ports.
    pub(super) fn remotes(
        &self,
        local: u128,
        remote: u128,
    ) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.seen
            .get(&HostPair(local, remote))
            .into_iter()
            .flat_map(|s| s.remotes.iter().map(|(q, p)| (*q, *p)))
    }

    /// The local QPs of a host pair seen so far.
    pub(super) fn locals(
        &self,
        local: u128,
        remote: u128,
    ) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.seen
            .get(&HostPair(local, remote))
            .into_iter()
            .flat_map(|s| s.locals.iter().map(|(q, p)| (*q, *p)))
    }

    /// The remote QPN bound to a local one.
    pub(super) fn remote_of(&self, local: u128, remote: u128, local_qpn: u32) -> Option<u32> {
        self.by_local
            .get(&PairQp(local, remote, local_qpn))
            .map(|b| b.qpn)
    }

    /// The local QPN bound to a remote one.
    pub(super) fn local_of(&self, local: u128, remote: u128, remote_qpn: u32) -> Option<u32> {
        self.by_remote
            .get(&PairQp(local, remote, remote_qpn))
            .map(|b| b.qpn)
    }

    fn bind(&mut self, local: u128, remote: u128, local_qpn: u32, remote_qpn: u32, exact: bool) {
        if self.by_local.len() >= self.cap || self.by_remote.len() >= self.cap {
            self.by_local.clear();
            self.by_remote.clear();
        }
        // Undo what either QP was bound to before (a QPN reused by a new connection).
        if let Some(old) = self.by_local.remove(&PairQp(local, remote, local_qpn)) {
            if self.local_of(local, remote, old.qpn) == Some(local_qpn) {
                self.by_remote.remove(&PairQp(local, remote, old.qpn));
            }
        }
        if let Some(old) = self.by_remote.remove(&PairQp(local, remote, remote_qpn)) {
            if self.remote_of(local, remote, old.qpn) == Some(remote_qpn) {
                self.by_local.remove(&PairQp(local, remote, old.qpn));
            }
        }
        let b = |qpn| Binding { qpn, exact };
        self.by_local
            .insert(PairQp(local, remote, local_qpn), b(remote_qpn));
        self.by_remote
            .insert(PairQp(local, remote, remote_qpn), b(local_qpn));
    }

    /// Binds from a hint unless either QP has an exact binding.
    pub(super) fn bind_hint(&mut self, local: u128, remote: u128, local_qpn: u32, remote_qpn: u32) {
        let exact = |m: &IntMap<PairQp, Binding>, q| {
            m.get(&PairQp(local, remote, q)).is_some_and(|b| b.exact)
        };
        if exact(&self.by_local, local_qpn) || exact(&self.by_remote, remote_qpn) {
            return;
        }
        self.bind(local, remote, local_qpn, remote_qpn, false);
    }

    /// The starting PSN a CM exchange named for a request stream not created yet (taken once).
    pub(super) fn take_start(&mut self, key: &StreamKey) -> Option<Psn> {
        if self.cm_start.is_empty() {
            return None;
        }
        self.cm_start.remove(key)
    }

    /// Learns from a CM REQ or REP. Returns, for a REP, the exact pairings it completes:
    /// (local address, remote address, local QPN, remote QPN, the first PSN the local QP's
    /// responder will see).
    pub(super) fn observe_cm(
        &mut self,
        sender: u128,
        receiver: u128,
        sender_local: bool,
        receiver_local: bool,
        msg: CmMessage,
        learned: &mut Vec<(u128, u128, u32, u32, Psn)>,
    ) -> CmSeen {
        if self.cm_req.len() >= self.cap {
            self.cm_req.clear();
        }
        match msg {
            CmMessage::Req {
                local_comm_id,
                qpn,
                starting_psn,
            } => {
                let key = PairQp(sender, 0, local_comm_id);
                if self.cm_answered.get(&key) == Some(&(qpn, starting_psn)) {
                    // Resent after its REP: the REP it brings again must not start the
                    // connection's streams over (their data may be on its way already).
                    return CmSeen::Repeated;
                }
                self.cm_req.insert(key, (qpn, starting_psn));
            }
            CmMessage::Rep {
                remote_comm_id,
                qpn: rep_qpn,
                starting_psn: rep_psn,
                ..
            } => {
                // The REP goes back to the requester: its receiver sent the REQ.
                let requester = receiver;
                let key = PairQp(requester, 0, remote_comm_id);
                let Some((req_qpn, req_psn)) = self.cm_req.remove(&key) else {
                    return CmSeen::Other;
                };
                insert_bounded(&mut self.cm_answered, self.cap, key, (req_qpn, req_psn));
                if receiver_local {
                    // Local requester: its responder sees the replier's PSNs first.
                    learned.push((requester, sender, req_qpn, rep_qpn, rep_psn));
                }
                if sender_local {
                    learned.push((sender, requester, rep_qpn, req_qpn, req_psn));
                }
                for &(l, r, lq, rq, start) in learned.iter() {
                    self.bind(l, r, lq, rq, true);
                    let key = StreamKey::Request { local: l, qpn: lq };
                    insert_bounded(&mut self.cm_start, self.cap, key, start);
                }
            }
        }
        CmSeen::Other
    }

    /// A request stream was created or reset with its CM starting PSN: forget the PSN.
    pub(super) fn forget_start(&mut self, key: &StreamKey) {
        self.cm_start.remove(key);
    }
}

/// The choice among a host pair's QPs for a packet whose pairing is not known yet: the one
/// that fits (its PSNs fit the packet's) among those on the packet's UDP source port, when
/// exactly one does; else the one that fits among all, when exactly one does.
#[derive(Debug, Default)]
pub(super) struct Pick {
    same_port: (u32, Option<(u32, u32)>),
    any_port: (u32, Option<(u32, u32)>),
}

impl Pick {
    /// A candidate QP (`qpn`, its `stream`) that fits.
    pub(super) fn fits(&mut self, qpn: u32, stream: u32, same_port: bool) {
        if same_port {
            self.same_port.0 += 1;
            self.same_port.1 = Some((qpn, stream));
        }
        self.any_port.0 += 1;
        self.any_port.1 = Some((qpn, stream));
    }

    /// The chosen (QPN, stream), `Err` when several fit and none can be told apart.
    pub(super) fn choose(&self) -> Result<Option<(u32, u32)>, ()> {
        match (self.same_port, self.any_port) {
            ((1, p), _) => Ok(p),
            (_, (1, p)) => Ok(p),
            (_, (0, _)) => Ok(None),
            _ => Err(()),
        }
    }
}

/// How far (in PSNs) a host's ACK or NAK may lie behind the switch's expected PSN for the
/// stream: what is in flight between the switch and the host, with room to spare.
pub(super) const HOST_PSN_REACH: u32 = 1 << 16;

/// An RDMA CM message seen by the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmEvent {
    /// Sender's address (`ip_key`).
    pub sender: u128,
    /// Receiver's address.
    pub receiver: u128,
    /// The sender is a host of this rack.
    pub sender_local: bool,
    /// The receiver is a host of this rack.
    pub receiver_local: bool,
    /// What it says.
    pub msg: CmMessage,
}

impl<T> super::core::ReorderCore<T> {
    /// Records that the local QP `qpn` receives requests from `remote` on UDP source `sport`
    /// (from a packet towards the local host).
    pub fn learn_pair(&mut self, local: u128, remote: u128, sport: u16, qpn: u32) {
        self.pairing.saw_local(local, remote, qpn, sport);
    }

    /// Forgets the QPs seen that have no stream (evicted, or never created): a local QP is
    /// only ever chosen for its request stream and a remote one for its response stream, so
    /// what `seen` keeps stays within the streams tracked instead of growing with every QPN
    /// that ever passed (up to 4096 per host pair and side, for as many host pairs as
    /// streams).
    pub(super) fn prune_pairing(&mut self) {
        let index = &self.index;
        let mut entries = 0;
        self.pairing.seen.retain(|&HostPair(local, remote), s| {
            s.locals
                .retain(|&qpn, _| index.contains_key(&StreamKey::Request { local, qpn }));
            s.remotes.retain(|&remote_qpn, _| {
                index.contains_key(&StreamKey::Response {
                    local,
                    remote,
                    remote_qpn,
                })
            });
            entries += s.locals.len() + s.remotes.len();
            !(s.locals.is_empty() && s.remotes.is_empty())
        });
        self.pairing.entries = entries;
    }

    /// Whether a host's ACK or NAK naming `psn` can concern a stream expecting `e`.
    fn near(&self, e: Psn, psn: Psn) -> bool {
        let d = e.distance(psn);
        (-(self.mask as i32)..HOST_PSN_REACH as i32).contains(&d)
    }

    /// The request stream a local host's ACK or NAK to the remote QP `remote_qpn` concerns:
    /// by the pairing, else by the UDP source port and the PSN (exactly one local QP fits).
    fn request_stream_of(
        &mut self,
        local: u128,
        remote: u128,
        remote_qpn: u32,
        sport: u16,
        psn: Psn,
    ) -> Option<u32> {
        if let Some(lq) = self.pairing.local_of(local, remote, remote_qpn) {
            return self.find(&StreamKey::Request { local, qpn: lq });
        }
        let mut pick = Pick::default();
        for (lq, lsport) in self.pairing.locals(local, remote) {
            if self
                .pairing
                .remote_of(local, remote, lq)
                .is_some_and(|rq| rq != remote_qpn)
            {
                continue; // paired with another remote QP
            }
            let Some(&stream) = self.index.get(&StreamKey::Request { local, qpn: lq }) else {
                continue;
            };
            let s = &self.streams[stream as usize];
            let fits = match s.phase {
                super::stream::Phase::Active => self.near(s.expected, psn),
                super::stream::Phase::Learning { .. } => true,
            };
            if fits {
                pick.fits(lq, stream, lsport == sport);
            }
        }
        let (lq, stream) = self.chosen(&pick)?;
        self.pairing.bind_hint(local, remote, lq, remote_qpn);
        Some(stream)
    }

    /// The QP a [`Pick`] chose, counted as a hinted pairing; an ambiguous choice is counted
    /// and gives none.
    pub(super) fn chosen(&mut self, pick: &Pick) -> Option<(u32, u32)> {
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

    /// The local host NAKed (PSN sequence error, or RNR: `psn` is the PSN it expects next, or
    /// the one it could not take) on its QP paired with the remote `remote_qpn`: move that
    /// request stream's expected PSN there, so the retransmission that follows is reordered.
    /// Held packets below it are released as late.
    pub fn observe_nak(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
        psn: Psn,
        now: u64,
        out: &mut Vec<T>,
    ) {
        self.pairing.saw_remote(local, remote, remote_qpn, sport);
        let Some(stream) = self.request_stream_of(local, remote, remote_qpn, sport, psn) else {
            self.totals.host_naks_ignored += 1;
            return;
        };
        // The pairing named the stream (and a PSN fitting it when it was not bound yet): the
        // host's NAK is the truth about what it expects, however far that is from the switch's
        // idea (a garbage PSN that moved the stream is undone this way).
        if self.resync(stream, psn, now, out) {
            self.streams[stream as usize].stats.resyncs += 1;
            self.totals.resyncs += 1;
        }
        let s = &mut self.streams[stream as usize];
        s.paths.host_nak(psn);
        s.host_naked = psn.value();
    }

    /// The local host's responder sent a READ RESPONSE FIRST or MIDDLE of `pmtu` bytes to the
    /// remote QP `remote_qpn`: its QP's path MTU, which the READ REQUESTs of its request stream
    /// span. True when a stream now has that path MTU (else nothing was applied).
    pub fn observe_host_pmtu(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
        psn: Psn,
        pmtu: u32,
        now: u64,
        out: &mut Vec<T>,
    ) -> bool {
        self.pairing.saw_remote(local, remote, remote_qpn, sport);
        let Some(stream) = self.request_stream_of(local, remote, remote_qpn, sport, psn) else {
            return false;
        };
        self.learn_stream_pmtu(stream, pmtu, now, out);
        self.streams[stream as usize].pmtu == pmtu
    }

    /// The local host ACKed through `psn`: a stream still expecting an earlier PSN (after a
    /// timeout, or while learning) moves to `psn + 1`.
    pub fn observe_ack(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
        psn: Psn,
        now: u64,
        out: &mut Vec<T>,
    ) {
        self.pairing.saw_remote(local, remote, remote_qpn, sport);
        let next = psn.add(1);
        let Some(stream) = self.request_stream_of(local, remote, remote_qpn, sport, next) else {
            return;
        };
        let s = &self.streams[stream as usize];
        let behind = match s.phase {
            super::stream::Phase::Learning { .. } => true,
            super::stream::Phase::Active => {
                next.is_after(s.expected) && (next.distance(s.expected) as u32) <= self.mask
            }
        };
        if behind && self.resync(stream, next, now, out) {
            self.totals.ack_advances += 1;
        }
    }

    /// Learns from an RDMA CM REQ or REP passing the switch. A REQ is remembered until its
    /// REP; the REP gives both QPNs and the starting PSN the local host's responder will see
    /// first. A request stream of a QPN the exchange names starts over at that PSN (the QPN was
    /// reused by a new connection); what it held is released in order. A REQ resent after its
    /// REP (same communication ID, QPN and starting PSN) is counted and changes nothing.
    pub fn observe_cm(&mut self, ev: &CmEvent, now: u64, out: &mut Vec<T>) {
        let mut learned = Vec::new();
        let seen = self.pairing.observe_cm(
            ev.sender,
            ev.receiver,
            ev.sender_local,
            ev.receiver_local,
            ev.msg,
            &mut learned,
        );
        if seen == CmSeen::Repeated {
            self.totals.cm_repeated += 1;
        }
        for (local, _remote, local_qpn, _remote_qpn, start) in learned {
            self.totals.cm_learned += 1;
            let key = StreamKey::Request {
                local,
                qpn: local_qpn,
            };
            let Some(stream) = self.find(&key) else {
                continue;
            };
            self.pairing.forget_start(&key);
            if matches!(
                self.streams[stream as usize].phase,
                super::stream::Phase::Learning { .. }
            ) {
                // Its first packets came before the reply was seen: they fit the new start.
                self.resync(stream, start, now, out);
            } else {
                // The QPN belonged to an earlier connection: start over.
                self.flush_ring(stream, now, out);
                let s = &mut self.streams[stream as usize];
                s.expected = start;
                s.last_seen = now;
                s.paths.clear();
                s.host_naked = NOT_NAKED;
                self.streams[stream as usize].stats.restarts += 1;
                self.totals.restarts += 1;
            }
        }
    }
}
