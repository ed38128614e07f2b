//! What the fabric shows about loss, shared by every stream of a core: the paths there are and
//! those down, each source's path stamps ([`super::sources`]), how late the paths deliver
//! ([`super::skew`]), and the detection times of the losses path order found. A stream's own
//! evidence (what each path delivered of it) is its [`super::paths::PathTrack`]; a proof
//! combines the two.

use super::config::ReorderConfig;
use super::paths::Proof;
use super::skew::SkewWindow;
use super::sources::{SourceStamps, StampSeen, MAX_SOURCES, WAITING_MAX};
use super::stream::{Stream, StreamId};
use crate::ids::IntMap;
use crate::meta::{PathStamp, MAX_PATHS};
use crate::wire::Psn;

/// Detection times kept for the owner between two collections.
const DETECT_TIMES_MAX: usize = 65_536;

/// A packet's stamp as the evidence files it: its sender, the path it came on, the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamped {
    /// The sender's address.
    pub(super) sender: u128,
    /// The fabric path it arrived on.
    pub(super) path: u8,
    /// Its path stamp.
    pub(super) stamp: PathStamp,
}

/// The fabric's evidence of one core.
pub(super) struct PathEvidence {
    /// Fabric paths there are, and those down now (a bit per path: they do not block a
    /// path-order decision).
    paths: usize,
    down: u64,
    skew: SkewWindow,
    /// Each source's path stamps, per counter (priority and lane).
    sources: IntMap<(u128, u8), SourceStamps>,
    /// The streams due for a check (kept to reuse its allocation).
    scratch: Vec<StreamId>,
    detect_ns: Vec<u64>,
    stamp_source_prefix: (u8, u8),
    /// Sources whose stamps went backwards on a path.
    pub(super) stamp_disorder: u64,
    /// The longest a gap stayed open before its own packet filled it.
    pub(super) peak_skew_ns: u64,
}

impl PathEvidence {
    pub(super) fn new(cfg: &ReorderConfig) -> PathEvidence {
        PathEvidence {
            paths: 0,
            down: 0,
            skew: SkewWindow::default(),
            sources: IntMap::default(),
            scratch: Vec::with_capacity(WAITING_MAX),
            detect_ns: Vec::with_capacity(64),
            stamp_source_prefix: cfg.stamp_source_prefix,
            stamp_disorder: 0,
            peak_skew_ns: 0,
        }
    }

    /// The fabric paths there are (`count`) and those down now (`down`, a bit per path);
    /// false when nothing changed. Stamp waits on paths that went down are dropped: nothing
    /// comes there to meet them.
    pub(super) fn set_paths(&mut self, count: usize, down: u64) -> bool {
        if (count, down) == (self.paths, self.down) {
            return false;
        }
        self.paths = count;
        self.down = down;
        if down != 0 {
            for src in self.sources.values_mut() {
                src.forget_down(down);
            }
        }
        true
    }

    /// The source a sender's stamps count for: its address, or the prefix of it that the
    /// hosts of one source ToR share ([`ReorderConfig::stamp_source_prefix`]).
    #[inline]
    pub(super) fn source_of(&self, addr: u128) -> u128 {
        let (v4, v6) = self.stamp_source_prefix;
        if addr >> 32 == 0xFFFF {
            // IPv4-mapped: the prefix counts in the low 32 bits.
            let keep = u32::MAX
                .checked_shl(32 - u32::from(v4.min(32)))
                .unwrap_or(0);
            addr & !u128::from(!keep)
        } else {
            addr & u128::MAX
                .checked_shl(128 - u32::from(v6.min(128)))
                .unwrap_or(0)
        }
    }

    /// Files a packet's stamp. True when streams of its source wait for a stamp on its path:
    /// then check [`PathEvidence::take_due`] after the packet was inserted.
    pub(super) fn see_stamp(&mut self, p: Stamped, now: u64) -> bool {
        if p.stamp.seq == 0 || usize::from(p.path) >= MAX_PATHS {
            return false;
        }
        let key = (self.source_of(p.sender), p.stamp.counter());
        if self.sources.len() >= MAX_SOURCES && !self.sources.contains_key(&key) {
            self.sources.clear();
        }
        let src = self.sources.entry(key).or_default();
        let seen = src.see(p.path, p.stamp.seq, now);
        if seen == (StampSeen::Disorder { first: true }) {
            self.stamp_disorder += 1;
        }
        // Only a wait on this packet's path can come due ([`SourceStamps::take_due`]). Waits
        // on a path the source never uses (a learning stream's, ended by its window) stay
        // until their list is full or the path comes down: asked about every packet, they cost
        // the in-order 64-QP destination run 6% of its time in `take_due`.
        src.waiting.iter().any(|w| w.path == p.path)
    }

    /// The streams that waited for the stamp `p` brought (on its path, that stamp or an
    /// earlier one), taken off their source's list. Give the list back with
    /// [`PathEvidence::give_back`].
    pub(super) fn take_due(&mut self, p: Stamped) -> Vec<StreamId> {
        let mut due = std::mem::take(&mut self.scratch);
        let key = (self.source_of(p.sender), p.stamp.counter());
        if let Some(src) = self.sources.get_mut(&key) {
            src.take_due(p.path, p.stamp.seq, &mut due);
        }
        due
    }

    /// Returns the list [`PathEvidence::take_due`] lent, for its allocation.
    pub(super) fn give_back(&mut self, mut due: Vec<StreamId>) {
        due.clear();
        self.scratch = due;
    }

    /// What proves that nothing at or below `gap` of stream `s` is still in flight, with the
    /// path and stamp that would prove it when nothing does yet.
    pub(super) fn proof<T>(&self, s: &Stream<T>, gap: Psn, now: u64) -> (Proof, Option<(u8, u16)>) {
        let src = s.paths.source().and_then(|a| self.sources.get(&a));
        s.paths.proof(gap, self.paths, self.down, src, now)
    }

    /// Stream `id` (`s`) is forgotten: its source's waits for it go (its id may soon name
    /// another stream).
    pub(super) fn forget_stream<T>(&mut self, s: &Stream<T>, id: StreamId) {
        if let Some(src) = s.paths.source().and_then(|a| self.sources.get_mut(&a)) {
            src.forget_stream(id);
        }
    }

    /// Notes that stream `id` waits for stamp `need` of its source on `path` (`learning`: to
    /// end its learning, not to prove a gap).
    pub(super) fn wait<T>(
        &mut self,
        s: &Stream<T>,
        id: StreamId,
        (path, need): (u8, u16),
        learning: bool,
    ) {
        if let Some(src) = s.paths.source().and_then(|a| self.sources.get_mut(&a)) {
            src.wait(id, path, need, learning);
        }
    }

    /// A packet of `s` with `psn` was released in order at `now`; `gap`: the stream's expected
    /// PSN and when its gap opened, if it held packets before. A packet that fills that gap and
    /// is not a retransmission shows how late the paths deliver ([`super::skew`]).
    pub(super) fn learn_skew<T>(
        &mut self,
        s: &Stream<T>,
        psn: Psn,
        gap: Option<(Psn, u64)>,
        now: u64,
    ) {
        let Some((e, since)) = gap else { return };
        if e == psn && s.paths.fill_is_sample(psn) {
            let late = now.saturating_sub(since);
            self.skew.record(now, late);
            self.peak_skew_ns = self.peak_skew_ns.max(late);
        }
    }

    /// The largest time a gap stayed open before its own packet came, lately (ns), once
    /// learned.
    pub(super) fn skew(&self, now: u64) -> Option<u64> {
        self.skew.largest(now)
    }

    /// After `now`, when [`PathEvidence::skew`] may next change without a new sample (a
    /// period ends).
    pub(super) fn skew_changes_at(&self, now: u64) -> u64 {
        self.skew.next_roll(now)
    }

    /// A gap was declared lost `ns` after it opened.
    pub(super) fn detected(&mut self, ns: u64) {
        if self.detect_ns.len() < DETECT_TIMES_MAX {
            self.detect_ns.push(ns);
        }
    }

    /// Appends the detection times (ns) since the last call to `out`.
    pub(super) fn take_detection_times(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.detect_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(prefix: (u8, u8)) -> PathEvidence {
        PathEvidence::new(&ReorderConfig {
            stamp_source_prefix: prefix,
            ..ReorderConfig::default()
        })
    }

    #[test]
    fn a_source_is_the_address_or_its_configured_prefix() {
        let host2 = 0xFFFF_0A02_0202u128; // ::ffff:10.2.2.2
        let v6: u128 = 0xfd00_0002_0001_0000_0000_0000_0000_0002;
        let rack = evidence((16, 32));
        assert_eq!(rack.source_of(host2), 0xFFFF_0A02_0000);
        assert_eq!(rack.source_of(v6), 0xfd00_0002 << 96);
        let host = evidence((32, 128));
        assert_eq!(host.source_of(host2), host2);
        assert_eq!(host.source_of(v6), v6);
        let all = evidence((0, 0));
        assert_eq!(all.source_of(host2), 0xFFFF_0000_0000, "still IPv4");
        assert_eq!(all.source_of(v6), 0);
    }

    #[test]
    fn stamps_without_a_path_or_a_count_are_not_filed() {
        let mut e = evidence((32, 128));
        let st = |seq| PathStamp {
            seq,
            class: 3,
            lane: 0,
        };
        let p = |path, seq| Stamped {
            sender: 7,
            path,
            stamp: st(seq),
        };
        assert!(!e.see_stamp(p(0, 0), 0), "no stamp");
        assert!(!e.see_stamp(p(MAX_PATHS as u8, 5), 0), "no path");
        assert!(!e.see_stamp(p(0, 5), 0), "filed, nobody waits");
        assert!(e.take_due(p(0, 6)).is_empty());
        // Backwards on a path: counted once.
        e.see_stamp(p(0, 3), 1);
        e.see_stamp(p(0, 2), 2);
        assert_eq!(e.stamp_disorder, 1);
    }

    #[test]
    fn a_change_of_paths_is_reported_once() {
        let mut e = evidence((32, 128));
        assert!(e.set_paths(4, 0));
        assert!(!e.set_paths(4, 0));
        assert!(e.set_paths(4, 0b10));
    }
}
