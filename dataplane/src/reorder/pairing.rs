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

use super::stream::{fold, StreamKey};
use crate::ids::IntMap;
use crate::meta::QpRef;
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
/// streams that are gone ([`Pairing::prune`]).
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

    /// A request from the remote host arrived for the local QP `qp` names.
    pub(super) fn saw_local(&mut self, qp: &QpRef) {
        let (dropped, added) = remember(
            &mut self.seen_mut(qp.local, qp.remote).locals,
            qp.qpn,
            qp.sport,
        );
        self.entries = self.entries.saturating_sub(dropped) + added;
    }

    /// The local host sent to the remote QP `qp` names.
    pub(super) fn saw_remote(&mut self, qp: &QpRef) {
        let (dropped, added) = remember(
            &mut self.seen_mut(qp.local, qp.remote).remotes,
            qp.qpn,
            qp.sport,
        );
        self.entries = self.entries.saturating_sub(dropped) + added;
    }

    /// Forgets the QPs seen that have no stream (`live` says which do): a local QP is only
    /// ever chosen for its request stream and a remote one for its response stream, so what
    /// `seen` keeps stays within the streams tracked instead of growing with every QPN that
    /// ever passed (up to 4096 per host pair and side, for as many host pairs as streams).
    pub(super) fn prune(&mut self, live: impl Fn(&StreamKey) -> bool) {
        let mut entries = 0;
        self.seen.retain(|&HostPair(local, remote), s| {
            s.locals
                .retain(|&qpn, _| live(&StreamKey::Request { local, qpn }));
            s.remotes.retain(|&remote_qpn, _| {
                live(&StreamKey::Response {
                    local,
                    remote,
                    remote_qpn,
                })
            });
            entries += s.locals.len() + s.remotes.len();
            !(s.locals.is_empty() && s.remotes.is_empty())
        });
        self.entries = entries;
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

    /// Candidates for pairing local QP `local_qpn`: the host pair's remote QPs seen so far,
    /// with their UDP source ports, that are not paired with another local QP.
    pub(super) fn remote_candidates(
        &self,
        local: u128,
        remote: u128,
        local_qpn: u32,
    ) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.remotes(local, remote).filter(move |&(rq, _)| {
            self.local_of(local, remote, rq)
                .is_none_or(|lq| lq == local_qpn)
        })
    }

    /// Candidates for pairing remote QP `remote_qpn`: the host pair's local QPs seen so far,
    /// with their UDP source ports, that are not paired with another remote QP.
    pub(super) fn local_candidates(
        &self,
        local: u128,
        remote: u128,
        remote_qpn: u32,
    ) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.locals(local, remote).filter(move |&(lq, _)| {
            self.remote_of(local, remote, lq)
                .is_none_or(|rq| rq == remote_qpn)
        })
    }

    /// Whether the local QP `local_qpn` surely is the one the remote QP `qp` names talks to,
    /// surely enough to drop a NAK on its say: an RDMA CM exchange bound them, or the local
    /// QP's requests came with the UDP source port the NAK carries (a PSN that fits is not
    /// enough: another QP's NAK can fit too).
    pub(super) fn surely_pairs(&self, qp: &QpRef, local_qpn: u32) -> bool {
        let exact = self
            .by_remote
            .get(&PairQp(qp.local, qp.remote, qp.qpn))
            .is_some_and(|b| b.exact && b.qpn == local_qpn);
        exact
            || self
                .locals(qp.local, qp.remote)
                .any(|(lq, sport)| lq == local_qpn && sport == qp.sport)
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

    /// Learns from a CM REQ or REP. Appends, for a REP, the exact pairings it completes to
    /// `learned`: (local address, remote address, local QPN, remote QPN, the first PSN the
    /// local QP's responder will see).
    pub(super) fn observe_cm(
        &mut self,
        ev: &CmEvent,
        learned: &mut Vec<(u128, u128, u32, u32, Psn)>,
    ) -> CmSeen {
        let (sender, receiver) = (ev.sender, ev.receiver);
        if self.cm_req.len() >= self.cap {
            self.cm_req.clear();
        }
        match ev.msg {
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
                if ev.receiver_local {
                    // Local requester: its responder sees the replier's PSNs first.
                    learned.push((requester, sender, req_qpn, rep_qpn, rep_psn));
                }
                if ev.sender_local {
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: u128 = 0xA; // a local host
    const B: u128 = 0xB; // a remote host

    fn qp(qpn: u32, sport: u16) -> QpRef {
        QpRef {
            local: A,
            remote: B,
            sport,
            qpn,
        }
    }

    fn req(sender: u128, receiver: u128, comm: u32, qpn: u32, psn: u32) -> CmEvent {
        CmEvent {
            sender,
            receiver,
            sender_local: sender == A,
            receiver_local: receiver == A,
            msg: CmMessage::Req {
                local_comm_id: comm,
                qpn,
                starting_psn: Psn::new(psn),
            },
        }
    }

    fn rep(sender: u128, receiver: u128, comm: u32, qpn: u32, psn: u32) -> CmEvent {
        CmEvent {
            sender,
            receiver,
            sender_local: sender == A,
            receiver_local: receiver == A,
            msg: CmMessage::Rep {
                local_comm_id: 99,
                remote_comm_id: comm,
                qpn,
                starting_psn: Psn::new(psn),
            },
        }
    }

    #[test]
    fn a_cm_exchange_binds_both_qps_exactly_and_names_each_responders_start() {
        let mut p = Pairing::new(16);
        let mut learned = Vec::new();
        // Local A (QP 0x11, PSN 100) connects to remote B (QP 0x22, PSN 500).
        assert_eq!(
            p.observe_cm(&req(A, B, 7, 0x11, 100), &mut learned),
            CmSeen::Other
        );
        assert!(learned.is_empty(), "a REQ alone completes nothing");
        assert_eq!(
            p.observe_cm(&rep(B, A, 7, 0x22, 500), &mut learned),
            CmSeen::Other
        );
        // A's responder sees B's PSNs first.
        assert_eq!(learned, vec![(A, B, 0x11, 0x22, Psn::new(500))]);
        assert_eq!(p.remote_of(A, B, 0x11), Some(0x22));
        assert_eq!(p.local_of(A, B, 0x22), Some(0x11));
        let key = StreamKey::Request {
            local: A,
            qpn: 0x11,
        };
        assert_eq!(p.take_start(&key), Some(Psn::new(500)));
        assert_eq!(p.take_start(&key), None, "taken once");
        // A hint never overrides the exact binding.
        p.bind_hint(A, B, 0x11, 0x33);
        assert_eq!(p.remote_of(A, B, 0x11), Some(0x22));
    }

    #[test]
    fn a_req_resent_after_its_rep_is_no_new_connection() {
        let mut p = Pairing::new(16);
        let mut learned = Vec::new();
        p.observe_cm(&req(B, A, 3, 0x22, 500), &mut learned);
        p.observe_cm(&rep(A, B, 3, 0x11, 100), &mut learned);
        assert_eq!(learned, vec![(A, B, 0x11, 0x22, Psn::new(500))]);
        learned.clear();
        assert_eq!(
            p.observe_cm(&req(B, A, 3, 0x22, 500), &mut learned),
            CmSeen::Repeated
        );
        // Another starting PSN is a new connection.
        assert_eq!(
            p.observe_cm(&req(B, A, 3, 0x22, 900), &mut learned),
            CmSeen::Other
        );
        // A REP nobody asked for completes nothing.
        assert_eq!(
            p.observe_cm(&rep(A, B, 4, 0x55, 1), &mut learned),
            CmSeen::Other
        );
        assert!(learned.is_empty());
    }

    #[test]
    fn a_qpn_reused_by_a_new_connection_drops_its_old_binding() {
        let mut p = Pairing::new(16);
        p.bind_hint(A, B, 0x11, 0x22);
        p.bind_hint(A, B, 0x11, 0x33);
        assert_eq!(p.remote_of(A, B, 0x11), Some(0x33));
        assert_eq!(p.local_of(A, B, 0x22), None, "the old remote is unbound");
        assert_eq!(p.local_of(A, B, 0x33), Some(0x11));
        // Other host pairs are apart.
        assert_eq!(p.remote_of(A, 0xC, 0x11), None);
    }

    #[test]
    fn tables_are_bounded_and_start_over_when_full() {
        let mut p = Pairing::new(4);
        for q in 0..4 {
            p.bind_hint(A, B, q, 100 + q);
        }
        assert_eq!(p.remote_of(A, B, 0), Some(100));
        p.bind_hint(A, B, 9, 109);
        assert_eq!(p.remote_of(A, B, 0), None, "full: started over");
        assert_eq!(p.remote_of(A, B, 9), Some(109));
        // Host pairs seen: at most `cap`, then over again.
        for h in 0..5u128 {
            p.saw_local(&QpRef {
                local: A,
                remote: 0x100 + h,
                sport: 1,
                qpn: 1,
            });
        }
        assert!(p.entries() <= 4, "{}", p.entries());
    }

    #[test]
    fn seen_qps_are_kept_with_their_port_and_pruned_with_their_streams() {
        let mut p = Pairing::new(16);
        p.saw_local(&qp(0x11, 0xC011));
        p.saw_local(&qp(0x12, 0xC012));
        p.saw_remote(&qp(0x22, 0xC011));
        p.saw_remote(&qp(0x22, 0xC011));
        assert_eq!(p.entries(), 3, "a QP seen twice counts once");
        let mut locals: Vec<_> = p.locals(A, B).collect();
        locals.sort();
        assert_eq!(locals, vec![(0x11, 0xC011), (0x12, 0xC012)]);
        assert_eq!(p.remotes(A, B).collect::<Vec<_>>(), vec![(0x22, 0xC011)]);
        // Only local QP 0x11 still has a stream.
        p.prune(|k| matches!(k, StreamKey::Request { qpn: 0x11, .. }));
        assert_eq!(p.entries(), 1);
        assert_eq!(p.locals(A, B).collect::<Vec<_>>(), vec![(0x11, 0xC011)]);
        assert_eq!(p.remotes(A, B).count(), 0);
    }

    #[test]
    fn candidates_leave_out_qps_paired_elsewhere() {
        let mut p = Pairing::new(16);
        p.saw_remote(&qp(0x21, 1));
        p.saw_remote(&qp(0x22, 2));
        p.saw_local(&qp(0x11, 1));
        p.saw_local(&qp(0x12, 2));
        p.bind_hint(A, B, 0x11, 0x21);
        let mut r: Vec<_> = p.remote_candidates(A, B, 0x12).collect();
        r.sort();
        assert_eq!(r, vec![(0x22, 2)], "0x21 is 0x11's");
        let mut r: Vec<_> = p.remote_candidates(A, B, 0x11).collect();
        r.sort();
        assert_eq!(r, vec![(0x21, 1), (0x22, 2)]);
        let l: Vec<_> = p.local_candidates(A, B, 0x22).collect();
        assert_eq!(l, vec![(0x12, 2)], "0x11 is 0x21's");
    }

    #[test]
    fn the_pick_takes_the_one_qp_that_fits_preferring_the_packets_port() {
        let none = Pick::default();
        assert_eq!(none.choose(), Ok(None));
        let mut one = Pick::default();
        one.fits(0x11, 1, false);
        assert_eq!(one.choose(), Ok(Some((0x11, 1))));
        let mut port_decides = Pick::default();
        port_decides.fits(0x11, 1, false);
        port_decides.fits(0x12, 2, true);
        assert_eq!(port_decides.choose(), Ok(Some((0x12, 2))));
        let mut ambiguous = Pick::default();
        ambiguous.fits(0x11, 1, true);
        ambiguous.fits(0x12, 2, true);
        assert_eq!(ambiguous.choose(), Err(()));
    }
}
