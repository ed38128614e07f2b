//! The other road for a downlink: forward what comes, judge the host's sequence NAKs.
//!
//! A selective-repeat RNIC (ConnectX-6 Dx/7 in lossy mode, IRN) keeps what arrives out of order
//! within its window. The only harm the fabric's reordering does to it is the sequence NAK it
//! sends at once for its expected PSN: its requester then resends a packet that is still on its
//! way. On a `nak_filter` downlink the stage forwards every packet as it arrives, and a request
//! stream keeps, instead of packets, a mark per PSN forwarded ahead of the first one missing
//! (ring slots holding no packet), so that path order and the hold timeout declare losses
//! exactly as they do for `reorder`. A host NAK naming:
//!
//! - the first PSN missing, no loss declared (it is still on a slower path): dropped, and kept.
//!   It is discarded when that packet comes, and sent on as soon as the stream moves past the
//!   PSN without having seen it: path order or the hold timeout declared it lost, the window
//!   overflowed, learning started above it, or the stream was forgotten. So a loss costs what it
//!   costs with `reorder`: it is known within one path skew, and the NAK goes then;
//! - a PSN the switch forwarded within the last hold timeout (the NAK and the packet crossed:
//!   the host sent it before the packet reached it), unless the switch moved past that PSN
//!   declaring a loss: dropped;
//! - anything else passes: a PSN declared lost, one forwarded longer ago (the host must have lost
//!   it itself), a stream the
//!   switch does not know (evicted, never created because the table was full) or cannot tell
//!   apart from another QP's. A NAK the switch cannot judge is never dropped.
//!
//! A selective-repeat requester treats READ responses the same way: one that overtakes another
//! makes it ask at once, with a new READ request, for what is missing before it. Towards a
//! `nak_filter` downlink such a request for the first response missing, while no loss of it
//! is declared, is kept back the same way (`judge_retry`) and sent on if the response is
//! declared lost.
//!
//! What this assumes of the RNIC (see `docs/design.md`): it keeps out-of-order packets of its
//! window and places them; it NAKs its expected PSN on the first out-of-order arrival and not
//! again for the same PSN; its requester resends only the PSN a NAK names (IRN, ConnectX
//! selective repeat) and keeps a retransmission timer for what no NAK names. A Go-Back-N RNIC
//! drops what comes out of order, so a dropped NAK would cost it a retransmission timeout per
//! reordering: such downlinks are refused the mode.

use super::held::Held;
use super::stream::{NakJudge, Stream, StreamId, DECLARED, FILL_BITS, PASSES};
use crate::ids::IntMap;
use crate::wire::Psn;

/// What happens to a host's sequence NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Judgement {
    /// The PSN is still on its way: keep the NAK back.
    Keep,
    /// The PSN was forwarded a moment ago: drop the NAK.
    Crossed,
    /// Let it through.
    Pass,
}

/// What every `nak_filter` stream keeps beyond its stream state, by stream (a stream's entry
/// is made with its first gap filled or NAK kept, and goes with the stream).
pub(super) type Judges<T> = IntMap<StreamId, NakJudge<T>>;

/// Judges a NAK naming `n` on the `nak_filter` stream `h` holds (`j`: what it keeps). The
/// stream is active (a NAK during learning resyncs it first).
pub(super) fn judge<T>(h: &Held<'_, T>, j: Option<&NakJudge<T>>, n: Psn) -> Judgement {
    let s = &*h.s;
    let d = n.distance(s.expected);
    if d == 0 {
        if s.paths.is_declared(n) || (s.held > 0 && s.paths.is_deferred()) {
            // Path order has declared the gap lost already (its run waits for an earlier
            // gap's retransmission): the host needs this NAK.
            return Judgement::Pass;
        }
        if s.held == 0 || s.learning() {
            // Nothing marked beyond it (no ring was free, or the host is ahead of the marks):
            // no timer runs that would send a kept NAK on.
            return Judgement::Pass;
        }
        return Judgement::Keep;
    }
    if d > 0 {
        // The host expects a PSN the switch never forwarded: its idea of the stream is not
        // the host's (a stream created again, a PSN sequence restarted). Not judged.
        return Judgement::Pass;
    }
    if crossed(h, j, n) {
        Judgement::Crossed
    } else {
        Judgement::Pass
    }
}

/// Judges a READ (or atomic) request of `span` PSNs the local host sent again from `n` on, on
/// the `nak_filter` response stream `h` holds: kept back while the first of them missing is
/// the stream's expected PSN and no loss of it is declared (it is on its way: the host asked
/// because a later response overtook it), with what it still asks for from there; dropped
/// when it all came and its first response was forwarded a moment ago after a later one
/// (they crossed); passed otherwise.
pub(super) fn judge_retry<T>(
    h: &Held<'_, T>,
    j: Option<&NakJudge<T>>,
    n: Psn,
    span: u32,
) -> (Judgement, Psn, u32) {
    let s = &*h.s;
    let e = s.expected;
    let end = n.add(span.max(1));
    let outstanding = s.reads.iter().any(|r| {
        let d = n.distance(r.start);
        d >= 0 && (d as u32) < r.span.max(1)
    });
    let pass = (Judgement::Pass, n, span);
    if !outstanding || n.is_after(e) {
        return pass;
    }
    if e.is_before(end) {
        // Part of it is still missing, from the expected PSN on.
        let waiting = s.held > 0 && !s.paths.is_declared(e);
        let fresh = n == e || crossed(h, j, n);
        if waiting && fresh {
            return (Judgement::Keep, e, end.forward_from(e));
        }
        return pass;
    }
    if crossed(h, j, n) {
        (Judgement::Crossed, n, span)
    } else {
        pass
    }
}

/// Whether a NAK (or retry) naming `n`, behind the expected PSN, crossed its packet: `n` filled
/// the front gap (so it went out after a later PSN of its stream, which the host NAKed it at)
/// within the last hold timeout. Not when the stream moved past `n` declaring it lost (that
/// NAK is the one the requester needs), nor when `n` went out in order or longer ago (the
/// host lost it itself, on the downlink: its NAK passes, as it would towards `reorder`).
fn crossed<T>(h: &Held<'_, T>, j: Option<&NakJudge<T>>, n: Psn) -> bool {
    let Some(j) = j else {
        return false;
    };
    let behind = h.s.expected.forward_from(n) as usize;
    if h.s.paths.is_declared(n) || behind > FILL_BITS || !j.filled(n) {
        return false;
    }
    let within = |(from, to): (Psn, Psn)| !n.is_before(from) && n.is_before(to);
    if j.declared.iter().any(|&r| r.0 != r.1 && within(r)) {
        return false;
    }
    // When the stream passed `n`: no later than the earliest sample past it (the latest
    // sample always shows the current expected PSN).
    let passed = j
        .passed
        .iter()
        .filter(|&&(e, at)| at != 0 && e.is_after(n))
        .map(|&(_, at)| at)
        .min();
    passed.is_some_and(|at| h.now.saturating_sub(at) <= h.s.timeout)
}

/// The losses stream `s` has declared so far (path order, hold timeouts, window overflows).
fn losses<T>(s: &Stream<T>) -> u64 {
    s.stats.path_losses + s.stats.timeouts + s.stats.overflows
}

/// What stream `id` keeps, made when first needed.
fn entry<'a, T>(s: &Stream<T>, judges: &'a mut Judges<T>, id: StreamId) -> &'a mut NakJudge<T> {
    judges
        .entry(id)
        .or_insert_with(|| NakJudge::new(s.expected, losses(s), s.stats.restarts))
}

/// After an operation on the `nak_filter` stream `id`: notes how far its expected PSN moved,
/// as a declared loss when the stream declared one meanwhile, else in the samples of when it
/// passed what it passed (a new sample at most every eighth of the hold timeout; the latest
/// always holds the current expected PSN, with the time it was first taken). A stream that
/// started over (CM, a far PSN) forgets what it kept of its old sequence, sending a kept NAK
/// on.
pub(super) fn track<T>(h: &mut Held<'_, T>, judges: &mut Judges<T>, id: StreamId) {
    let s = &*h.s;
    let (e, lost, restarts) = (s.expected, losses(s), s.stats.restarts);
    let j = entry(s, judges, id);
    if restarts != j.last_restarts {
        let old = std::mem::replace(j, NakJudge::new(e, lost, restarts));
        if let Some((_, _, item)) = old.pending {
            h.out.push(item);
            h.totals.naks_sent_on += 1;
        }
        return;
    }
    if s.learning() {
        // What the stream moves past when learning ends was never seen: as if declared.
        j.last_e = e;
        j.last_losses = u64::MAX;
        return;
    }
    if e.is_after(j.last_e) {
        // Front-gap fills remembered are of PSNs at most FILL_BITS behind: clear the slots
        // of those passed now (they held PSNs a lap older).
        let moved = e.forward_from(j.last_e) as usize;
        if moved >= FILL_BITS {
            j.fills = [0; FILL_BITS / 64];
        } else {
            for k in 0..moved as u32 {
                j.set_filled(j.last_e.add(k), false);
            }
        }
        if lost != j.last_losses {
            j.declared[j.next_declared] = (j.last_e, e);
            j.next_declared = (j.next_declared + 1) % DECLARED;
        }
        let latest = (j.next_pass + PASSES - 1) % PASSES;
        let last = j.passed[latest].1;
        if last == 0 || h.now.saturating_sub(last) >= s.timeout / PASSES as u64 {
            j.passed[j.next_pass] = (e, h.now.max(1));
            j.next_pass = (j.next_pass + 1) % PASSES;
        } else {
            j.passed[latest].0 = e;
        }
    }
    j.last_e = e;
    j.last_losses = lost;
}

/// Keeps the NAK or retry `item` back for stream `id`: it asks for `span` PSNs from `n`, the
/// first of them not come yet. One kept before it is moot (the host has what that one asked
/// for, or asks for it again) and is dropped.
pub(super) fn keep<T>(
    h: &Held<'_, T>,
    judges: &mut Judges<T>,
    id: StreamId,
    (n, span): (Psn, u32),
    item: T,
) {
    entry(h.s, judges, id).pending = Some((n, span.max(1), item));
}

/// A packet with `psn` arrived on stream `id`, `filled` when it filled the front gap (marks of
/// later PSNs beyond it): a NAK or READ retry kept for it is moot now, and one that crosses it
/// will be.
pub(super) fn arrived<T>(
    h: &mut Held<'_, T>,
    judges: &mut Judges<T>,
    id: StreamId,
    psn: Psn,
    filled: bool,
) {
    if filled {
        // Clear what the stream passed first: the fill's own slot among them.
        track(h, judges, id);
        entry(h.s, judges, id).set_filled(psn, true);
    }
    let e = h.s.expected;
    if let Some(j) = judges.get_mut(&id) {
        if let Some((n, span, _)) = j.pending.as_mut() {
            if *n == psn {
                // What it asked for from here: moot once the stream has it all; else it waits
                // for the first PSN of it still missing.
                let end = n.add(*span);
                if e.is_before(end) && e.is_after(*n) {
                    *span = end.forward_from(e);
                    *n = e;
                } else {
                    j.pending = None;
                    h.totals.naks_resolved += 1;
                }
            }
        }
    }
}

/// The host ACKed everything before `next` on stream `id`: a NAK kept for a PSN below it is
/// moot.
pub(super) fn acked<T>(h: &mut Held<'_, T>, judges: &mut Judges<T>, id: StreamId, next: Psn) {
    if let Some(j) = judges.get_mut(&id) {
        if j.pending
            .as_ref()
            .is_some_and(|(n, _, _)| n.is_before(next))
        {
            j.pending = None;
            h.totals.naks_resolved += 1;
        }
    }
}

/// Sends the NAK stream `id` kept on if the stream moved past its PSN without seeing it, or
/// declared it lost.
pub(super) fn send_on_if_skipped<T>(h: &mut Held<'_, T>, judges: &mut Judges<T>, id: StreamId) {
    let (learning, e) = (h.s.learning(), h.s.expected);
    let Some(j) = judges.get_mut(&id) else {
        return;
    };
    let declared = |n: &Psn| h.s.paths.is_declared(*n);
    let skipped = j
        .pending
        .as_ref()
        .is_some_and(|(n, _, _)| !learning && (n.is_before(e) || declared(n)));
    if skipped {
        if let Some((_, _, item)) = j.pending.take() {
            h.out.push(item);
            h.totals.naks_sent_on += 1;
        }
    }
}

/// Stream `id`'s gap was declared lost by its hold timeout: what it kept goes.
pub(super) fn timed_out<T>(h: &mut Held<'_, T>, judges: &mut Judges<T>, id: StreamId) {
    if let Some((_, _, item)) = judges.get_mut(&id).and_then(|j| j.pending.take()) {
        h.out.push(item);
        h.totals.naks_sent_on += 1;
    }
}

/// Stream `id` is forgotten: the NAK it kept can no longer be judged, and goes.
pub(super) fn forget<T>(h: &mut Held<'_, T>, judges: &mut Judges<T>, id: StreamId) {
    if let Some(j) = judges.remove(&id) {
        if let Some((_, _, item)) = j.pending {
            h.out.push(item);
            h.totals.naks_sent_on += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ids::PortId;
    use crate::meta::{MetaKind, PathStamp, RoceMeta};
    use crate::pkt::Pkt;
    use crate::reorder::{DownlinkMode, DownlinkStage, LossRecovery, PortReorder, ReorderConfig};
    use crate::reorder::{ReorderStage, ReorderTotals};
    use crate::tables::SprayPolicy;
    use crate::testkit::tor_tables;
    use crate::wire::Psn;

    /// The local host (behind downlink 0), its QPN, the remote host and its QPN, the pair's
    /// UDP source port.
    const LOCAL: u128 = 0xA;
    const LQ: u32 = 0x11;
    const REMOTE: u128 = 0xB;
    const RQ: u32 = 0x22;
    const SPORT: u16 = 0xC123;
    /// The uplink a host's NAK is routed to.
    const UPLINK: PortId = 1;
    /// A data packet's length, and a NAK's (told apart by it).
    const DATA: usize = 1000;
    const NAK: usize = 62;

    struct Rig {
        s: ReorderStage,
        out: Vec<(PortId, Pkt)>,
    }

    impl Rig {
        /// Downlink 0 filters NAKs; four fabric paths whose order counts; hold timeout 1 ms.
        fn new(max_streams: usize, idle_evict_ns: u64) -> Rig {
            let t = tor_tables(1, 1, SprayPolicy::RoundRobin);
            let cfg = ReorderConfig {
                learn_ns: 0,
                hold_timeout_ns: 1_000_000,
                max_streams,
                idle_evict_ns,
                ..ReorderConfig::default()
            };
            let port = PortReorder {
                mode: DownlinkMode::NakFilter,
                recovery: LossRecovery::ReleaseRun,
                ..PortReorder::default()
            };
            let mut s = ReorderStage::new(cfg, &t, &[port]);
            let mut out = Vec::new();
            s.set_paths(4, 0, 0, &mut out);
            Rig { s, out }
        }

        /// PSN `psn` of the remote requester arrives over `path` at `now`; what went out.
        fn arrive(&mut self, qpn: u32, path: u8, psn: u32, now: u64) -> Vec<(PortId, usize)> {
            let meta = RoceMeta {
                // Each QP pair has its own UDP source port (derived from the QPNs).
                sport: SPORT.wrapping_add((qpn - LQ) as u16),
                ..meta(MetaKind::Request { read_len: None }, qpn, psn, DATA, path)
            };
            self.s.poll(now, &mut self.out);
            self.s.insert(0, data(), &meta, now, &mut self.out);
            self.sent()
        }

        /// The local host NAKs `psn` at `now`: whether the NAK went on at once.
        fn nak(&mut self, psn: u32, now: u64) -> bool {
            let meta = meta(MetaKind::HostNak, RQ, psn, NAK, crate::meta::NO_PATH);
            let mut nak = Pkt::with_capacity(NAK);
            nak.resize(NAK);
            self.s
                .host_nak(0, &meta, (UPLINK, nak), now, &mut self.out)
                .is_some()
        }

        fn poll(&mut self, now: u64) -> Vec<(PortId, usize)> {
            self.s.poll(now, &mut self.out);
            self.sent()
        }

        fn sent(&mut self) -> Vec<(PortId, usize)> {
            self.out.drain(..).map(|(p, k)| (p, k.len())).collect()
        }

        fn totals(&self) -> ReorderTotals {
            self.s.totals()
        }
    }

    /// What the engine hands over for a packet between LOCAL and REMOTE of `kind`, addressed to
    /// `qpn`, with `psn`, `len` bytes, over `path`, on the pair's UDP source port.
    fn meta(kind: MetaKind, qpn: u32, psn: u32, len: usize, path: u8) -> RoceMeta {
        RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: SPORT,
            qpn,
            psn: Psn::new(psn),
            span: 1,
            full_payload: 0,
            len: len as u32,
            kind,
            path,
            stamp: PathStamp::NONE,
        }
    }

    fn data() -> Pkt {
        let mut p = Pkt::with_capacity(DATA);
        p.resize(DATA);
        p
    }

    const FORWARDED: (PortId, usize) = (0, DATA);
    const NAK_OUT: (PortId, usize) = (UPLINK, NAK);

    /// PSNs 0..8 sprayed round robin over four paths (PSN p on path p % 4); `late` comes last.
    fn spray_but(r: &mut Rig, late: u32, from: u32, to: u32, now: u64) {
        for p in from..to {
            if p != late {
                assert_eq!(
                    r.arrive(LQ, (p % 4) as u8, p, now),
                    vec![FORWARDED],
                    "PSN {p}"
                );
            }
        }
    }

    #[test]
    fn a_nak_for_a_psn_still_on_a_slower_path_is_dropped_and_nothing_is_held() {
        let mut r = Rig::new(64, u64::MAX);
        // PSN 1 travels the slow path: 2 and 3 come before it, each forwarded at once.
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        r.arrive(LQ, 3, 3, 1_200);
        assert_eq!(r.s.held_bytes_for(0), 0, "marks, not packets");
        // The selective-repeat host NAKs 1 at once; 1 is still on its way.
        assert!(!r.nak(1, 1_300), "a spurious NAK goes nowhere");
        assert_eq!(r.arrive(LQ, 1, 1, 1_400), vec![FORWARDED]);
        // Nothing more is sent for it: not when the paths move on, not at the timeout.
        spray_but(&mut r, u32::MAX, 4, 8, 1_500);
        assert!(r.poll(10_000_000).is_empty());
        let t = r.totals();
        assert_eq!((t.naks_filtered, t.naks_resolved), (1, 1));
        assert_eq!(
            (t.naks_passed, t.naks_sent_on, t.peak_held_bytes),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_nak_that_crossed_its_packet_is_dropped() {
        let mut r = Rig::new(64, u64::MAX);
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        // 1 fills the gap just before the host's NAK for it reaches the switch.
        r.arrive(LQ, 1, 1, 1_200);
        assert!(!r.nak(1, 1_250));
        assert_eq!(r.totals().naks_filtered, 1);
        // Long after, a NAK for 1 is the host's own loss (the downlink): it passes.
        assert!(r.nak(1, 5_000_000));
    }

    #[test]
    fn a_nak_for_a_lost_psn_goes_on_as_soon_as_path_order_declares_it() {
        let mut r = Rig::new(64, u64::MAX);
        // PSN 1 (path 1) is lost; the host NAKs it on PSN 2's arrival.
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        assert!(
            !r.nak(1, 1_150),
            "not proven yet: paths 1 and 3 have not shown"
        );
        assert_eq!(r.arrive(LQ, 3, 3, 1_200), vec![FORWARDED]);
        assert_eq!(r.arrive(LQ, 0, 4, 1_300), vec![FORWARDED]);
        // Path 1 delivers 5, above the gap: every path has, 1 is lost, the NAK goes now.
        assert_eq!(r.arrive(LQ, 1, 5, 1_400), vec![FORWARDED, NAK_OUT]);
        let t = r.totals();
        assert_eq!((t.path_losses, t.naks_sent_on, t.naks_filtered), (1, 1, 1));
        // The retransmission passes at once; a NAK for 1 after the loss was declared passes.
        assert_eq!(r.arrive(LQ, 2, 1, 50_000), vec![FORWARDED]);
        assert!(r.nak(1, 50_100));
    }

    #[test]
    fn a_nak_arriving_after_the_loss_was_declared_passes_at_once() {
        let mut r = Rig::new(64, u64::MAX);
        r.arrive(LQ, 0, 0, 1_000);
        for (path, p) in [(2, 2), (3, 3), (0, 4), (1, 5)] {
            r.arrive(LQ, path, p, 1_000 + u64::from(p));
        }
        assert_eq!(r.totals().path_losses, 1, "1 is lost");
        assert!(r.nak(1, 2_000));
        assert_eq!(r.totals().naks_passed, 1);
    }

    #[test]
    fn without_path_evidence_the_hold_timeout_sends_the_kept_nak_on() {
        let mut r = Rig::new(64, u64::MAX);
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        assert!(!r.nak(1, 1_200));
        assert!(r.poll(900_000).is_empty(), "within the hold timeout");
        assert_eq!(r.poll(1_200_000), vec![NAK_OUT]);
        assert_eq!(r.totals().timeouts, 1);
    }

    #[test]
    fn naks_the_switch_cannot_judge_pass() {
        // One stream at most, taken by another QP: LQ has none, and its host's NAK passes.
        let mut r = Rig::new(1, u64::MAX);
        r.arrive(LQ + 1, 0, 0, 1_000);
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        assert_eq!(r.totals().table_full, 2);
        assert!(r.nak(1, 1_200), "no stream: passes");
        // A stream forgotten (idle) sends the NAK it kept on, and the next NAK passes.
        let mut r = Rig::new(64, 1_000_000);
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        assert!(!r.nak(1, 1_200), "{:?}", r.totals());
        let mut sent = Vec::new();
        for t in (2_000_000..3_000_000).step_by(10_000) {
            sent.extend(r.poll(t));
        }
        assert_eq!(sent, vec![NAK_OUT], "sent on when its stream was forgotten");
        assert!(r.totals().evictions >= 1);
        assert!(r.nak(3, 3_000_000));
        assert_eq!(r.totals().naks_unjudged, 1);
    }

    #[test]
    fn a_newer_nak_replaces_a_kept_one() {
        let mut r = Rig::new(64, u64::MAX);
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        assert!(!r.nak(1, 1_150));
        // 1 comes; then 3 is late and the host NAKs 3 (its expected PSN now).
        r.arrive(LQ, 1, 1, 1_200);
        r.arrive(LQ, 0, 4, 1_300);
        assert!(!r.nak(3, 1_350));
        r.arrive(LQ, 3, 3, 1_400);
        assert!(r.poll(10_000_000).is_empty());
        assert_eq!(r.totals().naks_resolved, 2);
    }

    impl Rig {
        /// The local host (requester LQ) sends a READ request of `span` PSNs from `psn` to RQ
        /// at `now`: whether it went on.
        fn read(&mut self, psn: u32, span: u32, now: u64) -> bool {
            let meta = RoceMeta {
                span,
                ..meta(
                    MetaKind::HostRead {
                        dma_len: span * 1024,
                    },
                    RQ,
                    psn,
                    NAK,
                    crate::meta::NO_PATH,
                )
            };
            let mut req = Pkt::with_capacity(NAK);
            req.resize(NAK);
            self.s
                .host_nak(0, &meta, (UPLINK, req), now, &mut self.out)
                .is_some()
        }

        /// READ response `psn` (of `last`) towards LQ arrives over `path`.
        fn response(&mut self, path: u8, psn: u32, last: bool, now: u64) -> Vec<(PortId, usize)> {
            let meta = meta(MetaKind::Fill { ends: last }, LQ, psn, DATA, path);
            self.s.poll(now, &mut self.out);
            self.s.insert(0, data(), &meta, now, &mut self.out);
            self.sent()
        }
    }

    #[test]
    fn a_read_retry_for_a_response_still_on_its_way_is_kept_back() {
        let mut r = Rig::new(64, u64::MAX);
        assert!(r.read(100, 8, 1_000), "a new READ goes on");
        // Responses 100, 102, 103 come (each forwarded at once); 101 is on the slow path.
        for (path, p) in [(0, 100), (2, 102), (3, 103)] {
            assert_eq!(
                r.response(path, p, false, 2_000 + u64::from(p)),
                vec![FORWARDED]
            );
        }
        // The selective-repeat requester asks again for 101: kept back.
        assert!(!r.read(101, 1, 2_200));
        assert_eq!(r.response(1, 101, false, 2_300), vec![FORWARDED]);
        assert!(r.poll(100_000_000).is_empty(), "nothing sent on");
        let t = r.totals();
        assert_eq!(
            (t.read_retries_filtered, t.naks_resolved, t.naks_sent_on),
            (1, 1, 0)
        );
        assert_eq!(t.peak_held_bytes, 0);
    }

    #[test]
    fn a_read_retry_for_a_lost_response_goes_on_when_path_order_declares_it() {
        let mut r = Rig::new(64, u64::MAX);
        assert!(r.read(100, 8, 1_000));
        for (path, p) in [(0, 100), (2, 102)] {
            r.response(path, p, false, 2_000 + u64::from(p));
        }
        assert!(!r.read(101, 1, 2_200), "kept back");
        r.response(3, 103, false, 2_300);
        r.response(0, 104, false, 2_400);
        // Path 1 delivers 105 above the gap: 101 is lost, the retry goes now.
        assert_eq!(r.response(1, 105, false, 2_500), vec![FORWARDED, NAK_OUT]);
        assert_eq!(r.totals().naks_sent_on, 1);
    }

    #[test]
    fn a_nak_for_a_psn_forwarded_in_order_passes() {
        // 0, 1, 2 in order: 1 went out before anything later, so a NAK for it is the host's
        // own loss (between the ToR and the host), as towards `reorder`.
        let mut r = Rig::new(64, u64::MAX);
        for p in 0..3 {
            r.arrive(LQ, p as u8, p, 1_000 + u64::from(p));
        }
        assert!(r.nak(1, 1_100));
        // Nothing marked beyond the expected PSN: no timer would send a kept NAK on.
        assert!(r.nak(3, 1_200));
        assert_eq!(r.totals().naks_passed, 2);
    }

    #[test]
    fn a_deferred_second_gaps_nak_passes() {
        // PSN p on path p % 4; 1 and 6 are lost. 5 proves 1; 10 proves 6, which waits for 1's
        // retransmission; that passes and the run goes: the host then NAKs 6.
        let mut r = Rig::new(64, u64::MAX);
        let mut t = 1_000;
        for p in (0..11).filter(|p| *p != 1 && *p != 6) {
            t += 100;
            r.arrive(LQ, (p % 4) as u8, p, t);
        }
        assert_eq!(r.totals().path_losses, 2, "{:?}", r.totals());
        assert!(r.nak(1, t + 50), "1 was declared lost");
        r.arrive(LQ, 0, 1, t + 10_000);
        assert!(r.nak(6, t + 10_100), "6 was declared lost too");
    }

    #[test]
    fn a_read_retry_for_a_run_waits_for_all_of_it() {
        let mut r = Rig::new(64, u64::MAX);
        assert!(r.read(100, 8, 1_000));
        for (path, p) in [(0, 100), (3, 103)] {
            r.response(path, p, false, 2_000 + u64::from(p));
        }
        // It asks for 101 and 102: kept back; 101 comes, 102 is still missing.
        assert!(!r.read(101, 2, 2_200));
        r.response(1, 101, false, 2_300);
        assert_eq!(r.totals().naks_resolved, 0, "102 is still asked for");
        // 102 is lost: path 2 delivers 106 above it, path 1 105, path 0 104 and 108.
        for (path, p) in [(0, 104), (1, 105), (3, 107)] {
            r.response(path, p, false, 2_400 + u64::from(p));
        }
        assert_eq!(r.response(2, 106, false, 2_600), vec![FORWARDED, NAK_OUT]);
        assert_eq!(r.totals().naks_sent_on, 1);
    }

    #[test]
    fn an_rnr_nak_is_never_judged() {
        // The host could not take 1 (no receive buffer; the engine tells an RNR NAK from a
        // sequence NAK): its RNR NAK goes on, even where a sequence NAK for 1 would be kept
        // back.
        let mut r = Rig::new(64, u64::MAX);
        r.arrive(LQ, 0, 0, 1_000);
        r.arrive(LQ, 2, 2, 1_100);
        let meta = meta(MetaKind::HostRnrNak, RQ, 1, NAK, crate::meta::NO_PATH);
        let passed =
            r.s.host_nak(
                0,
                &meta,
                (UPLINK, Pkt::with_capacity(NAK)),
                1_200,
                &mut r.out,
            )
            .is_some();
        assert!(passed);
        assert_eq!(r.totals().naks_filtered, 0);
    }
}
