//! Path-order loss detection: telling a lost packet from a reordered one by what the fabric's
//! paths delivered, not by time.
//!
//! **The assumption.** Each fabric path (an uplink of a group with `loss_detection =
//! "path_order"`) is one FIFO through the fabric. A host sends a QP's packets in PSN order, the
//! source ToR sprays them in that order, so on every path a QP's PSNs arrive in increasing order.
//! Once every path a stream uses has delivered a PSN above a gap, the missing packet cannot
//! still be in flight on any of them: it is lost.
//!
//! **Passes.** A retransmission breaks the order: after a NAK the host sends from the gap again,
//! below what the paths already delivered, while packets sent before the NAK may still be in
//! flight behind the old ones. So a stream counts passes: each loss it declares (and each move of
//! its expected PSN backwards) starts a new one, and a path's evidence counts only once the path
//! is in the current pass, which it shows by delivering a PSN below its highest of the old pass
//! (the retransmission's first packet on it). Until then the path blocks the decision, and the
//! hold timeout is the backstop.
//!
//! **Stamps.** A path that has not delivered a PSN of the stream above the gap may still have
//! delivered a packet its source host sent later (another QP's, an ACK): the source ToR's
//! path stamp ([`crate::wire::stamp`]) orders them. The stream keeps the stamps of the few
//! packets of the current pass nearest above its expected PSN, and of its highest; one above
//! the gap was sent after the gap's packet, so a path whose newest stamp of that source
//! ([`super::sources`]) is at or after it does not carry the gap's packet either. (For a selective-repeat host, not for a gap the host was
//! told of: its packet is a retransmission, sent after the held ones.)
//!
//! **Which paths count.** Every path the stream has used in its last [`PATH_STALE_PACKETS`]
//! packets, unless the path is down now. Not "used within a recent time": after an idle time a
//! QP's first burst starts on every path at once, and a path the stream used before the pause
//! may be the one that carries the missing packet. A path the stream never uses (a pinned ECMP
//! QP) does not block it.

use super::sources::SourceStamps;
use crate::meta::{PathStamp, MAX_PATHS, NO_PATH};
use crate::wire::stamp;
use crate::wire::Psn;

/// Packets of a stream, on other paths, after which a path that carried none of them no longer
/// counts as one the stream uses (the spray policy stopped choosing it).
pub const PATH_STALE_PACKETS: u32 = 1024;

/// PSNs apart beyond which two PSNs are of different sequences (a QP re-created with its QPN),
/// not one ahead of the other: what a path delivered then proves nothing about a gap.
const FAR: u32 = 1 << 22;

/// Stamped packets of the current pass a stream remembers (the highest, and those nearest
/// above its expected PSN).
const RECENT: usize = 8;

/// What path-order detection learns from one packet of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Arrival {
    /// The fabric path it came on ([`NO_PATH`]: none whose order counts).
    pub(super) path: u8,
    /// Its PSN.
    pub(super) psn: Psn,
    /// Its path stamp.
    pub(super) stamp: PathStamp,
    /// Its sender's stamp source (address or prefix; `None`: not known).
    pub(super) source: Option<u128>,
    /// The host resends only what is missing (selective repeat), so a new pass is joined by
    /// new PSNs too (see [`PathTrack::new_pass`]).
    pub(super) selective: bool,
    /// The stream's expected PSN (`None` while it learns where it starts).
    pub(super) expected: Option<Psn>,
}

/// What proves a gap lost, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proof {
    /// Some path may still carry it.
    Missing,
    /// Every path delivered a PSN of the stream above it.
    Psns,
    /// As `Psns`, with a path's proof a later stamp of the stream's source.
    Stamps,
}

/// What one path delivered of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PathSeen {
    path: u8,
    /// Highest PSN it delivered in pass `pass`.
    top: Psn,
    pass: u16,
    /// The stream's packet count at its last packet.
    last: u32,
}

/// The paths one stream arrived on: one word, allocated when the first packet comes over a
/// path-order fabric path (100k streams must fit in 64 MiB; most never do).
#[derive(Debug, Default)]
pub(super) struct PathTrack(Option<Box<Track>>);

#[derive(Debug, Default)]
struct Track {
    seen: Vec<PathSeen>,
    /// Packets that arrived on a path.
    count: u32,
    /// The current pass.
    pass: u16,
    /// The highest PSN any path had delivered when the current pass began.
    floor: Option<Psn>,
    /// Selective repeat: the last gap declared lost whose retransmission has not passed yet,
    /// and whether a later gap's release waits for it.
    nak_pending: Option<Psn>,
    deferred: bool,
    /// The PSN the host last NAKed (sequence error): its sender has been told and resends
    /// from there.
    host_naked_psn: Option<Psn>,
    /// The last gap declared lost here: what fills it is the sender's retransmission.
    declared: Option<Psn>,
    /// When the first path joined the current pass (the sender's resent packets began to
    /// arrive): a gap of the new pass opened no earlier.
    joined_at: Option<u64>,
    /// The source (address or its prefix, and [`PathStamp::counter`]), once known, and the
    /// (PSN, stamp count) of the stamped packets of the current pass nearest above the
    /// expected PSN (count 0: an empty entry; [`Track::remember`]).
    source: Option<(u128, u8)>,
    recent: [(Psn, u16); RECENT],
    /// The host resends only what is missing (see [`PathTrack::see`]).
    selective: bool,
}

impl PathTrack {
    /// A packet arrived as `a` says.
    #[inline]
    pub(super) fn see(&mut self, a: Arrival, now: u64) {
        if a.path == NO_PATH || usize::from(a.path) >= MAX_PATHS {
            return;
        }
        let t = self.0.get_or_insert_with(Box::default);
        if let (Some(src), true) = (a.source, a.stamp.seq != 0) {
            let source = Some((src, a.stamp.counter()));
            if t.source != source {
                // Another counter (the host's packets now enter another worker of its ToR):
                // the remembered stamps do not compare with its stamps.
                t.forget_stamps();
                t.source = source;
            }
        }
        t.selective = a.selective;
        t.see(a.path, a.psn, a.stamp.seq, a.expected, now);
    }

    /// The source whose stamps count for this stream (address or prefix, counter).
    pub(super) fn source(&self) -> Option<(u128, u8)> {
        self.0.as_ref().and_then(|t| t.source)
    }

    /// The stamp of a packet sent after the gap's at `gap` (see the module's "Stamps").
    #[cfg(test)]
    pub(super) fn gap_stamp(&self, gap: Psn) -> Option<u16> {
        self.0.as_ref().and_then(|t| t.gap_stamp(gap))
    }

    /// When the gap at a stream's expected PSN, open since `gap_since` as the stream's timer
    /// counts it, began to be evidence of loss: after a new pass began (a loss declared, the
    /// host asking again), not before the sender's resent packets began to arrive. Loss
    /// detection times count from here.
    pub(super) fn opened(&self, gap_since: u64) -> u64 {
        match self.0.as_ref().and_then(|t| t.joined_at) {
            Some(j) => j.max(gap_since),
            None => gap_since,
        }
    }

    /// A new pass: the host will send again from below what the paths delivered. A path joins
    /// it when it delivers a PSN below its highest (the retransmission reached it); for a
    /// `selective` host (which resends only the gap and goes on) also when it delivers a PSN
    /// above the highest any path had delivered until now (sent after what was in flight).
    /// A Go-Back-N host sends such PSNs before its NAK arrives, too: for it they prove nothing.
    pub(super) fn new_pass(&mut self, selective: bool) {
        if let Some(t) = self.0.as_mut() {
            t.new_pass(selective);
        }
    }

    /// Forgets every path (the stream starts a new PSN sequence).
    pub(super) fn clear(&mut self) {
        self.0 = None;
    }

    /// Selective repeat: the gap at `psn` was released; the host's NAK for it is on its way,
    /// and until its retransmission passes the RNIC NAKs no other gap (it NAKs the first
    /// out-of-sequence packet after a gap, once).
    pub(super) fn nak_pending(&mut self, psn: Psn) {
        if let Some(t) = self.0.as_mut() {
            t.nak_pending = Some(psn);
            t.deferred = false;
        }
    }

    /// Whether a gap declared now must wait: an earlier gap's retransmission has not passed
    /// (the wait is noted, see [`PathTrack::retransmitted`]).
    pub(super) fn defer(&mut self) -> bool {
        match self.0.as_mut() {
            Some(t) if t.nak_pending.is_some() => {
                t.deferred = true;
                true
            }
            _ => false,
        }
    }

    /// A declared gap waits for an earlier one's retransmission (counted once).
    pub(super) fn is_deferred(&self) -> bool {
        self.0.as_ref().is_some_and(|t| t.deferred)
    }

    /// A late packet `psn` passed. True when it was the pending gap's retransmission and a
    /// later gap waited for it (release that now: the RNIC will NAK it).
    pub(super) fn retransmitted(&mut self, psn: Psn) -> bool {
        match self.0.as_mut() {
            Some(t) if t.nak_pending == Some(psn) => {
                t.nak_pending = None;
                std::mem::take(&mut t.deferred)
            }
            _ => false,
        }
    }

    /// The pending gap is given up (its hold timed out).
    pub(super) fn forget_pending(&mut self) {
        if let Some(t) = self.0.as_mut() {
            t.nak_pending = None;
            t.deferred = false;
        }
    }

    /// Whether the stream has come over a path-order fabric path.
    pub(super) fn tracked(&self) -> bool {
        self.0.is_some()
    }

    /// The host NAKed `psn` (the PSN it expects next): its sender resends from there.
    pub(super) fn host_nak(&mut self, psn: Psn) {
        if let Some(t) = self.0.as_mut() {
            t.host_naked_psn = Some(psn);
        }
    }

    /// Whether the host has NAKed exactly `psn`, so that what fills it is the sender's
    /// retransmission.
    pub(super) fn host_naked_psn(&self, psn: Psn) -> bool {
        self.0
            .as_ref()
            .is_some_and(|t| t.host_naked_psn == Some(psn))
    }

    /// The gap at `psn` was declared lost.
    pub(super) fn declared(&mut self, psn: Psn) {
        if let Some(t) = self.0.as_mut() {
            t.declared = Some(psn);
        }
    }

    /// Whether the last gap declared lost here is the one at `psn`.
    pub(super) fn is_declared(&self, psn: Psn) -> bool {
        self.0.as_ref().is_some_and(|t| t.declared == Some(psn))
    }

    /// Whether a packet filling the gap at `psn` shows how late the paths deliver: the stream
    /// came over path-order paths and the gap is not one whose retransmission is due (declared
    /// lost, or NAKed by the host).
    pub(super) fn fill_is_sample(&self, psn: Psn) -> bool {
        self.0
            .as_ref()
            .is_some_and(|t| t.host_naked_psn != Some(psn) && t.declared != Some(psn))
    }

    /// See [`Track::proof`]; never a proof without a packet from a path, nor before the
    /// paths are known (`paths` 0: a worker's first packets come before its path table).
    pub(super) fn proof(
        &self,
        gap: Psn,
        paths: usize,
        down: u64,
        src: Option<&SourceStamps>,
        now: u64,
    ) -> (Proof, Option<(u8, u16)>) {
        if paths == 0 {
            return (Proof::Missing, None);
        }
        self.0.as_ref().map_or((Proof::Missing, None), |t| {
            t.proof(gap, paths, down, src, now)
        })
    }

    /// Whether the stream's own PSNs prove the gap at `gap` lost (stamps aside).
    #[cfg(test)]
    pub(super) fn all_above(&self, gap: Psn, paths: usize, down: u64) -> bool {
        self.proof(gap, paths, down, None, 0).0 != Proof::Missing
    }

    /// Heap bytes it uses.
    pub(super) fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |t| {
            std::mem::size_of::<Track>() + t.seen.capacity() * std::mem::size_of::<PathSeen>()
        })
    }
}

impl Track {
    /// Forgets the remembered stamps (they prove nothing any more).
    fn forget_stamps(&mut self) {
        self.recent = [(Psn::new(0), 0); RECENT];
    }

    fn new_pass(&mut self, selective: bool) {
        self.pass = self.pass.wrapping_add(1);
        self.joined_at = None;
        self.forget_stamps();
        self.floor = if selective {
            self.seen
                .iter()
                .map(|s| s.top)
                .reduce(|a, b| if b.is_after(a) { b } else { a })
        } else {
            None
        };
    }

    fn see(&mut self, path: u8, psn: Psn, stamp: u16, expected: Option<Psn>, now: u64) {
        let k = self.see_path(path, psn, now);
        if stamp != 0 && self.seen[k].pass == self.pass {
            // Of the current pass: sent after every PSN below it of the pass.
            self.remember(psn, stamp, expected);
        }
    }

    /// Keeps the stamped packets nearest above the expected PSN, and the highest of the
    /// pass. A gap's proof is the smallest stamp above it ([`Track::gap_stamp`]), which the
    /// lowest PSN above it carries, so the lowest are kept: the last few to arrive are not
    /// enough, because on skewed paths the packet just above a gap comes early, and the packets
    /// below it that come after would push it out. The highest (entry 0) is a later, weaker
    /// proof, but one for every gap below it: a selective-repeat stream's expected PSN jumps
    /// to its next gap (`release_run`) past all the others. At or below the expected PSN a
    /// packet proves nothing any more (a move back starts a new pass, which forgets them all):
    /// its entry is taken first. Cost: nothing for a packet at or below the expected PSN (in
    /// order, late); a pass over the eight entries for one held.
    fn remember(&mut self, psn: Psn, stamp: u16, expected: Option<Psn>) {
        let above = |p: Psn| {
            expected.is_none_or(|e| {
                let d = p.distance(e);
                d > 0 && d as u32 <= FAR
            })
        };
        if !above(psn) {
            return;
        }
        let mut entry = (psn, stamp);
        let (top, top_stamp) = self.recent[0];
        if top_stamp == 0 || !above(top) {
            self.recent[0] = entry;
            return;
        }
        if psn.is_after(top) {
            // A new highest: the one it replaces may still be among the nearest.
            self.recent[0] = entry;
            entry = (top, top_stamp);
        }
        let mut highest = 1;
        for i in 1..RECENT {
            let (p, st) = self.recent[i];
            if st == 0 || !above(p) {
                self.recent[i] = entry;
                return;
            }
            if p.is_after(self.recent[highest].0) {
                highest = i;
            }
        }
        if entry.0.is_before(self.recent[highest].0) {
            self.recent[highest] = entry;
        }
    }

    /// Records `psn` on `path`; returns the path's index in `seen`.
    fn see_path(&mut self, path: u8, psn: Psn, now: u64) -> usize {
        let selective = self.selective;
        self.count = self.count.wrapping_add(1);
        let count = self.count;
        let Some(k) = self.seen.iter().position(|s| s.path == path) else {
            self.seen.push(PathSeen {
                path,
                top: psn,
                pass: self.pass,
                last: count,
            });
            return self.seen.len() - 1;
        };
        self.seen[k].last = count;
        let s = self.seen[k];
        if psn.distance(s.top).unsigned_abs() > FAR {
            // Another PSN sequence (the QP was re-created): start the path over, and forget
            // the stamps remembered: some may be of the other sequence, whose PSNs can lie
            // just above a gap of this one (distance says nothing across sequences) while they
            // were sent long before it. (Each path's first packet of the new sequence does
            // this once; what is forgotten of the new one is remembered again as it comes.)
            self.seen[k].pass = self.pass;
            self.seen[k].top = psn;
            self.forget_stamps();
            return k;
        }
        if s.pass == self.pass && psn.is_before(s.top) && !selective {
            // Below what this path delivered in this pass: a Go-Back-N sender went back (a
            // retransmission the switch saw no NAK for) and sends everything after it again:
            // what the paths delivered before proves nothing about the packets from here on.
            // (A selective-repeat sender resends one PSN and goes on: the evidence stands.)
            self.new_pass(selective);
        }
        let (pass, floor) = (self.pass, self.floor);
        let s = &mut self.seen[k];
        if s.pass == pass {
            if psn.is_after(s.top) {
                s.top = psn;
            }
        } else if psn.is_before(s.top) || floor.is_some_and(|f| psn.is_after(f)) {
            // The retransmission reached this path, or something sent after it.
            s.pass = pass;
            s.top = psn;
            self.joined_at.get_or_insert(now);
        } else {
            s.top = psn;
        }
        k
    }

    /// The smallest stamp of a remembered packet of the current pass above `gap`: its packet
    /// was sent after the gap's. None for a selective-repeat host's gap it was told of (what
    /// fills it is a retransmission, sent after the remembered packets).
    fn gap_stamp(&self, gap: Psn) -> Option<u16> {
        if self.selective && (self.declared == Some(gap) || self.host_naked_psn == Some(gap)) {
            return None;
        }
        let mut best: Option<u16> = None;
        for &(psn, st) in &self.recent {
            let d = psn.distance(gap);
            if st == 0 || d <= 0 || d as u32 > FAR {
                continue;
            }
            best = Some(match best {
                Some(b) if stamp::is_after(st, b) => b,
                _ => st,
            });
        }
        best
    }

    /// Whether the packet at `gap` is lost: every path of the `paths` there are (`down`: a bit
    /// per path) that is up and that the stream uses delivered a PSN above it in the current
    /// pass, or (`src`: the stamps of the stream's source), having joined the current pass,
    /// a stamp at or after the gap's [`Track::gap_stamp`]; and there is at least one such
    /// path. A path the stream has not used blocks too until the stream is
    /// [`PATH_STALE_PACKETS`] packets old (a young stream has not shown yet which paths it
    /// uses), unless its stamps pass the gap. With
    /// [`Proof::Missing`], the first path that blocks and the stamp that would prove it, if a
    /// stamp can.
    fn proof(
        &self,
        gap: Psn,
        paths: usize,
        down: u64,
        src: Option<&SourceStamps>,
        now: u64,
    ) -> (Proof, Option<(u8, u16)>) {
        let gap_stamp = src.and_then(|_| self.gap_stamp(gap));
        let by_stamp = |path: u8| match (src, gap_stamp) {
            (Some(src), Some(g)) => src.passed(path, g, now),
            _ => false,
        };
        // A path that blocks, and the stamp on it that would prove it.
        let wait = |path: u8| (Proof::Missing, gap_stamp.map(|g| (path, g)));
        let mut stamped = false;
        if self.count <= PATH_STALE_PACKETS {
            let up = (0..paths.min(MAX_PATHS)).filter(|i| down >> i & 1 == 0);
            for i in up {
                if !self.seen.iter().any(|s| usize::from(s.path) == i) {
                    if !by_stamp(i as u8) {
                        return wait(i as u8);
                    }
                    stamped = true;
                }
            }
        }
        let mut evidence = false;
        for s in &self.seen {
            if down >> s.path & 1 == 1 || self.count.wrapping_sub(s.last) > PATH_STALE_PACKETS {
                continue;
            }
            if s.pass != self.pass {
                // Not in the current pass yet: what it delivers next may be of an earlier
                // pass, and a stamp would let a new pass begin before it joins this one.
                return (Proof::Missing, None);
            }
            let d = s.top.distance(gap);
            if d <= 0 || d as u32 > FAR {
                if !by_stamp(s.path) {
                    return wait(s.path);
                }
                stamped = true;
            }
            evidence = true;
        }
        let proof = match (evidence, stamped) {
            (false, _) => Proof::Missing,
            (true, false) => Proof::Psns,
            (true, true) => Proof::Stamps,
        };
        (proof, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A selective-repeat host's packet without a stamp or source, the stream learning.
    fn unstamped_selective(path: u8, psn: Psn) -> Arrival {
        Arrival {
            path,
            psn,
            stamp: PathStamp::NONE,
            source: None,
            selective: true,
            expected: None,
        }
    }

    fn p(v: u32) -> Psn {
        Psn::new(v)
    }

    fn st(seq: u16) -> PathStamp {
        PathStamp {
            seq,
            class: 3,
            lane: 0,
        }
    }

    impl PathTrack {
        /// `see` for a Go-Back-N host, without stamps.
        fn saw(&mut self, path: u8, psn: Psn) {
            self.see(
                Arrival {
                    path,
                    psn,
                    stamp: PathStamp::NONE,
                    source: None,
                    selective: false,
                    expected: None,
                },
                0,
            );
        }

        /// `see` of each (path, PSN, stamp) from source 9.
        fn saw_stamped(&mut self, seen: &[(u8, u32, u16)], selective: bool) {
            for &(path, psn, seq) in seen {
                self.see(
                    Arrival {
                        path,
                        psn: p(psn),
                        stamp: st(seq),
                        source: Some(9),
                        selective,
                        expected: None,
                    },
                    0,
                );
            }
        }
    }

    #[test]
    fn every_used_path_must_deliver_above_the_gap() {
        let mut t = PathTrack::default();
        for (path, psn) in [(0, 9), (1, 10), (2, 11), (3, 12)] {
            t.saw(path, p(psn));
        }
        // Gap at 13 (lost on path 1, say): 14 on 2, 15 on 3, 16 on 0.
        for (path, psn) in [(2, 14), (3, 15), (0, 16)] {
            t.saw(path, p(psn));
            assert!(
                !t.all_above(p(13), 4, 0),
                "path 1 has not delivered above 13"
            );
        }
        t.saw(1, p(17));
        assert!(t.all_above(p(13), 4, 0));
    }

    #[test]
    fn a_path_that_is_down_or_unused_does_not_block() {
        let mut t = PathTrack::default();
        t.saw(0, p(1));
        t.saw(1, p(2));
        t.saw(0, p(4));
        assert!(!t.all_above(p(3), 2, 0));
        assert!(t.all_above(p(3), 2, 1 << 1), "path 1 is down");
        // Path 1 unused for more than PATH_STALE_PACKETS packets on path 0.
        for i in 0..=PATH_STALE_PACKETS {
            t.saw(0, p(5 + i));
        }
        assert!(t.all_above(p(3), 2, 0));
    }

    #[test]
    fn no_evidence_no_decision() {
        let t = PathTrack::default();
        assert!(!t.all_above(p(3), 2, 0));
        let mut t = PathTrack::default();
        t.saw(NO_PATH, p(9));
        assert!(!t.all_above(p(3), 2, 0));
        // A young stream seen on path 0 only: paths 1-3 may carry the gap.
        let mut t = PathTrack::default();
        t.saw(0, p(1));
        t.saw(0, p(3));
        assert!(!t.all_above(p(2), 4, 0));
        assert!(t.all_above(p(2), 4, 0b1110), "the others are down");
        assert!(t.all_above(p(2), 1, 0), "the only path");
    }

    #[test]
    fn after_a_loss_old_packets_prove_nothing_until_the_retransmission_shows() {
        let mut t = PathTrack::default();
        for (path, psn) in [(0, 20), (1, 21)] {
            t.saw(path, p(psn));
        }
        assert!(t.all_above(p(10), 2, 0));
        t.new_pass(false);
        // Packets sent before the NAK, still in flight: higher than before, not the new pass.
        t.saw(0, p(22));
        t.saw(1, p(23));
        assert!(!t.all_above(p(10), 2, 0));
        // The retransmission from 10: 10 on path 0, 11 on path 1, 12 on 0 (10 lost again?).
        t.saw(0, p(10));
        assert!(
            !t.all_above(p(11), 2, 0),
            "path 1 is not in the new pass yet"
        );
        t.saw(1, p(11));
        t.saw(0, p(12));
        assert!(!t.all_above(p(12), 2, 0));
        assert!(t.all_above(p(10), 2, 0) && !t.all_above(p(11), 2, 0));
        // 11 was delivered on path 1 after all; a gap at 11 would be proven now (12, 13).
        t.saw(1, p(13));
        assert!(t.all_above(p(11), 2, 0));
    }

    #[test]
    fn a_top_of_another_sequence_proves_nothing() {
        let mut t = PathTrack::default();
        t.saw(0, p(0x80_0000));
        t.saw(1, p(0x80_0001));
        // The QP is re-created at PSN 5: the old tops are far from its gaps.
        assert!(!t.all_above(p(5), 2, 0));
        t.saw(0, p(5));
        t.saw(1, p(7));
        t.saw(0, p(8));
        assert!(t.all_above(p(6), 2, 0));
    }

    #[test]
    fn a_retransmission_without_a_nak_starts_a_new_pass() {
        let mut t = PathTrack::default();
        t.saw(0, p(10));
        t.saw(1, p(11));
        // Path 0 goes back to 5 (a timeout retransmission): 10 and 11 prove nothing about 7.
        t.saw(0, p(5));
        t.saw(0, p(9));
        assert!(!t.all_above(p(7), 2, 0), "path 1 is of the old pass");
        t.saw(1, p(6));
        t.saw(1, p(8));
        assert!(t.all_above(p(7), 2, 0));
    }

    #[test]
    fn after_a_loss_a_selective_host_s_new_psns_join_the_new_pass() {
        let mut t = PathTrack::default();
        t.saw(0, p(20));
        t.saw(1, p(21));
        t.new_pass(true);
        // Path 1 carries the resent 10 (below its 21); path 0 goes on with new PSNs.
        t.see(unstamped_selective(1, p(10)), 0);
        t.see(unstamped_selective(0, p(22)), 0);
        t.see(unstamped_selective(1, p(23)), 0);
        assert!(t.all_above(p(10), 2, 0));
    }

    #[test]
    fn a_later_stamp_of_the_source_proves_a_path_the_stream_did_not() {
        let mut t = PathTrack::default();
        // PSNs 1-3 on paths 0-2 (stamps 10-12), 5 on path 0 (stamp 20): a gap at 4.
        t.saw_stamped(&[(0, 1, 10), (1, 2, 11), (2, 3, 12), (0, 5, 20)], false);
        let mut src = SourceStamps::default();
        for (path, st) in [(0, 20), (1, 15), (2, 12)] {
            src.see(path, st, 0);
        }
        assert_eq!(t.gap_stamp(p(4)), Some(20));
        assert_eq!(t.proof(p(4), 3, 0, Some(&src), 0).0, Proof::Missing);
        // Paths 1 and 2 pass stamp 20 (other QPs' packets, sent after PSN 5).
        src.see(1, 21, 0);
        assert_eq!(t.proof(p(4), 3, 0, Some(&src), 0).0, Proof::Missing);
        src.see(2, 25, 0);
        assert_eq!(t.proof(p(4), 3, 0, Some(&src), 0).0, Proof::Stamps);
        assert_eq!(
            t.proof(p(4), 3, 0, None, 0).0,
            Proof::Missing,
            "no stamps, no proof"
        );
        // A fourth path the stream never used, young stream: its stamps must pass too.
        assert_eq!(t.proof(p(4), 4, 0, Some(&src), 0).0, Proof::Missing);
        src.see(3, 20, 0);
        assert_eq!(t.proof(p(4), 4, 0, Some(&src), 0).0, Proof::Stamps);
    }

    #[test]
    fn stamps_of_another_psn_sequence_are_forgotten_when_a_path_starts_the_new_one() {
        // Found by the transport proptest: a response stream of a QP re-created without CM.
        // The old sequence's responses up to 524190 on every path, 524165 (stamp 7) among
        // them; the new one starts 2^22 + 29 PSNs further round, so 524165 lies exactly 2^22
        // above the new gap 13107077: the same sequence by distance, though sent long before.
        let mut t = PathTrack::default();
        let old = p(524160);
        for (path, psn, seq) in [
            (3, 524165, 7),
            (0, 524186, 28),
            (1, 524187, 29),
            (3, 524190, 32),
        ] {
            t.see(
                Arrival {
                    path,
                    psn: p(psn),
                    stamp: st(seq),
                    source: Some(9),
                    selective: false,
                    expected: Some(old),
                },
                0,
            );
        }
        let gap = p(13107077);
        assert_eq!(
            t.gap_stamp(gap),
            Some(7),
            "the old stamp counts by distance"
        );
        for (path, psn, seq) in [(0, 13107040, 33), (0, 13107078, 41)] {
            t.see(
                Arrival {
                    path,
                    psn: p(psn),
                    stamp: st(seq),
                    source: Some(9),
                    selective: false,
                    expected: Some(gap),
                },
                0,
            );
        }
        assert_eq!(t.gap_stamp(gap), Some(41), "not the old sequence's stamp 7");
        // Path 3 has delivered nothing of the new sequence since: its newest stamp, 36, was
        // sent before 13107078 and may be before the gap's packet too.
        let mut src = SourceStamps::default();
        for (path, seq) in [(0, 41), (1, 43), (2, 43), (3, 36)] {
            src.see(path, seq, 0);
        }
        assert_eq!(t.proof(gap, 4, 0, Some(&src), 0).0, Proof::Missing);
    }

    #[test]
    fn stamps_of_another_counter_of_the_source_are_forgotten() {
        let mut t = PathTrack::default();
        // PSNs 1-3 and 5 in lane 0: a gap at 4, proven by stamp 20 of lane 0.
        t.saw_stamped(&[(0, 1, 10), (1, 2, 11), (2, 3, 12), (0, 5, 20)], false);
        assert_eq!(t.gap_stamp(p(4)), Some(20));
        // The host's packets now enter another worker (lane 1): lane 0's stamps do not
        // compare with what the new source's evidence will say.
        let lane1 = PathStamp { lane: 1, ..st(30) };
        t.see(
            Arrival {
                path: 1,
                psn: p(6),
                stamp: lane1,
                source: Some(9),
                selective: false,
                expected: None,
            },
            0,
        );
        assert_eq!(t.source(), Some((9, lane1.counter())));
        assert_eq!(t.gap_stamp(p(4)), Some(30), "only lane 1's own");
    }

    #[test]
    fn the_stamps_kept_are_those_nearest_above_the_expected_psn() {
        // Skewed paths: 11 comes early on the fast path, 10 is lost on it, and the slow paths
        // then deliver 1-9, each released in order as it comes. The stamp of 11 is what proves
        // 10 lost: it must still be there (the last eight to arrive would be 2-9).
        let mut t = PathTrack::default();
        let stamped = |psn: u32| PathStamp {
            seq: 100 + psn as u16,
            class: 3,
            lane: 0,
        };
        t.see(
            Arrival {
                path: 1,
                psn: p(11),
                stamp: stamped(11),
                source: Some(9),
                selective: false,
                expected: Some(p(1)),
            },
            0,
        );
        for psn in 1..=9 {
            t.see(
                Arrival {
                    path: (psn % 3) as u8 + 2,
                    psn: p(psn),
                    stamp: stamped(psn),
                    source: Some(9),
                    selective: false,
                    expected: Some(p(psn)),
                },
                0,
            );
        }
        assert_eq!(t.gap_stamp(p(10)), Some(111));
        // Many above the expected PSN, path after path (each in order): the lowest seven and
        // the highest stay, whatever the order between paths.
        let mut t = PathTrack::default();
        for path in 0..4u8 {
            for psn in (11..=40).filter(|q| q % 4 == u32::from(path)) {
                t.see(
                    Arrival {
                        path,
                        psn: p(psn),
                        stamp: stamped(psn),
                        source: Some(9),
                        selective: false,
                        expected: Some(p(10)),
                    },
                    0,
                );
            }
        }
        assert_eq!(t.gap_stamp(p(10)), Some(111));
        // A selective-repeat stream's expected PSN jumps to its next gap (`release_run`), 30,
        // past every nearest entry: the highest of the pass (40) still proves it, later.
        assert_eq!(t.gap_stamp(p(30)), Some(140));
        // The expected PSN moved to 15 (11-14 released): one of their entries goes, not 16's.
        t.see(
            Arrival {
                path: 0,
                psn: p(41),
                stamp: stamped(41),
                source: Some(9),
                selective: false,
                expected: Some(p(15)),
            },
            0,
        );
        assert_eq!(t.gap_stamp(p(15)), Some(116));
    }

    #[test]
    fn a_path_not_in_the_current_pass_blocks_whatever_its_stamps() {
        let mut t = PathTrack::default();
        t.saw_stamped(&[(0, 20, 10), (1, 21, 11)], false);
        t.new_pass(false);
        // The retransmission from 10 reaches path 0 (joins); 11 is lost; path 1 has not
        // joined: what it delivers next may be of the old pass, sent before the resend.
        t.saw_stamped(&[(0, 10, 30)], false);
        t.saw_stamped(&[(0, 12, 32)], false);
        let mut src = SourceStamps::default();
        src.see(0, 32, 0);
        src.see(1, 40, 0);
        assert_eq!(t.gap_stamp(p(11)), Some(32));
        assert_eq!(t.proof(p(11), 2, 0, Some(&src), 0).0, Proof::Missing);
        // Once path 1 joins (a resent PSN below its old top), its stamps count.
        t.saw_stamped(&[(1, 13, 41)], false);
        src.see(1, 41, 0);
        assert_eq!(t.proof(p(11), 2, 0, Some(&src), 0).0, Proof::Psns);
    }

    #[test]
    fn stamps_of_an_old_pass_or_of_a_gap_a_selective_host_was_told_of_prove_nothing() {
        let mut t = PathTrack::default();
        t.saw_stamped(&[(0, 1, 10), (1, 3, 12)], false);
        assert_eq!(t.gap_stamp(p(2)), Some(12));
        // A loss declared: the sender goes back; stamp 12 was sent before its retransmission.
        t.new_pass(false);
        assert_eq!(t.gap_stamp(p(2)), None);
        // Packets still in flight from before (path 0 not in the new pass yet): nothing.
        t.saw_stamped(&[(0, 4, 13)], false);
        assert_eq!(t.gap_stamp(p(2)), None);
        // The retransmission: 2 on path 1 (below its top 3: joins), then 3 on path 1.
        t.saw_stamped(&[(1, 2, 30)], false);
        assert_eq!(t.gap_stamp(p(1)), Some(30));
        // A selective-repeat host: the gap it was NAKed for is filled by a retransmission
        // sent after everything remembered.
        let mut t = PathTrack::default();
        t.saw_stamped(&[(0, 1, 10), (1, 3, 12)], true);
        assert_eq!(t.gap_stamp(p(2)), Some(12));
        t.host_nak(p(2));
        assert_eq!(t.gap_stamp(p(2)), None);
    }

    #[test]
    fn psns_wrap() {
        let mut t = PathTrack::default();
        t.saw(0, p(0xFF_FFFE));
        t.saw(1, p(0xFF_FFFF));
        t.saw(0, p(1));
        t.saw(1, p(2));
        assert!(t.all_above(p(0), 2, 0));
        assert!(!t.all_above(p(1), 2, 0));
    }
}
