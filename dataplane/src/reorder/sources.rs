//! What each source's path stamps ([`crate::wire::stamp`]) showed: per path, the newest
//! stamp it delivered. A stream's gap is not in flight on a path that has delivered a stamp of
//! its source at or after that of a packet sent after the gap's ([`super::paths`] finds that
//! packet): every packet the source sends is evidence for each of its QPs, not only the QP's
//! own.
//!
//! **Sources.** A source is one stamp counter as the destination sees it: the stamps' lane
//! (the source ToR's worker) and priority, and the sender's address, or the prefix of it that
//! all hosts of one source ToR share (`stamp_source_prefix`, [`super::ReorderConfig`]): then
//! every host of that rack proves its neighbours' gaps, also while their own QPs are stopped.
//!
//! **Checks.** On a FIFO path one counter's stamps rise; a stamp at or before the path's newest
//! (two counters behind one source: two ToRs' hosts under one prefix, a path that reorders, a
//! source ToR that restarted) pauses the source's evidence for [`DISORDER_PAUSE_NS`] and is
//! counted. Stamps (their counts scaled to 16 bits, [`crate::wire::stamp::split`]) compare
//! only within half their space: evidence older than [`STAMP_FRESH_NS`] is not used, nor a
//! stamp more than [`STAMP_REACH`] behind the newest the source has shown on any path.

use crate::meta::MAX_PATHS;
use crate::wire::stamp::is_after;

/// How old a path's newest stamp may be and still prove something.
pub const STAMP_FRESH_NS: u64 = 2_000_000;

/// How far behind the source's newest stamp a stamp may be and still be compared (a quarter
/// of the space: 2^14 counts with one lane, 2^11 with eight).
pub const STAMP_REACH: u16 = 1 << 14;

/// How long a source's stamps are not used after they went backwards on a path.
pub const DISORDER_PAUSE_NS: u64 = 1_000_000_000;

/// Streams one source keeps waiting for its evidence.
pub const WAITING_MAX: usize = 16;

/// Sources tracked at once (beyond it the table starts over: evidence is lost, not
/// made up).
pub const MAX_SOURCES: usize = 8192;

#[derive(Debug, Clone, Copy)]
struct Seen {
    path: u8,
    top: u16,
    at: u64,
}

/// One source's stamps.
#[derive(Debug, Default)]
pub(super) struct SourceStamps {
    seen: Vec<Seen>,
    /// The newest stamp on any path.
    newest: u16,
    disorder_at: Option<u64>,
    /// Streams of this source whose gap waits for a stamp on a path (checked again when one
    /// at or after it arrives there).
    pub(super) waiting: Vec<Waiter>,
}

/// A stream waiting for stamp `need` (or a later one) on `path`; `learning`: to end its
/// learning, not to prove a gap lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Waiter {
    stream: u32,
    pub(super) path: u8,
    need: u16,
    learning: bool,
}

/// What a stamp did to its source's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StampSeen {
    /// A path's newest stamp moved on.
    Advanced,
    /// At or before the path's newest: the source's evidence is paused (first time: counted).
    Disorder { first: bool },
    /// Nothing to record (no path, no stamp).
    Ignored,
}

impl SourceStamps {
    /// A packet with `stamp` arrived on `path`.
    pub(super) fn see(&mut self, path: u8, stamp: u16, now: u64) -> StampSeen {
        if stamp == 0 || usize::from(path) >= MAX_PATHS {
            return StampSeen::Ignored;
        }
        let paused = self.paused(now);
        if self.seen.is_empty() || is_after(stamp, self.newest) {
            self.newest = stamp;
        }
        let Some(s) = self.seen.iter_mut().find(|s| s.path == path) else {
            self.seen.push(Seen {
                path,
                top: stamp,
                at: now,
            });
            return StampSeen::Advanced;
        };
        let fresh = now.saturating_sub(s.at) <= STAMP_FRESH_NS;
        if fresh && !is_after(stamp, s.top) {
            s.top = stamp;
            s.at = now;
            self.disorder_at = Some(now);
            return StampSeen::Disorder { first: !paused };
        }
        s.top = stamp;
        s.at = now;
        StampSeen::Advanced
    }

    fn paused(&self, now: u64) -> bool {
        self.disorder_at
            .is_some_and(|d| now.saturating_sub(d) < DISORDER_PAUSE_NS)
    }

    /// Whether `path` has delivered, lately, a stamp at or after `stamp`.
    pub(super) fn passed(&self, path: u8, stamp: u16, now: u64) -> bool {
        let near = |x: u16| self.newest.wrapping_sub(x) < STAMP_REACH;
        !self.paused(now)
            && near(stamp)
            && self.seen.iter().any(|s| {
                s.path == path
                    && now.saturating_sub(s.at) <= STAMP_FRESH_NS
                    && near(s.top)
                    && (s.top == stamp || is_after(s.top, stamp))
            })
    }

    /// Notes that `stream` waits for stamp `need` or later on `path` (one entry a stream;
    /// bounded: a stream left out is checked on its own packets and its timer, as without
    /// stamps). A gap's wait takes the place of a `learning` one when there is no room: a
    /// learning stream left out still ends with its window, a gap left out costs a timeout.
    pub(super) fn wait(&mut self, stream: u32, path: u8, need: u16, learning: bool) {
        let w = Waiter {
            stream,
            path,
            need,
            learning,
        };
        if let Some(x) = self.waiting.iter_mut().find(|x| x.stream == stream) {
            *x = w;
        } else if self.waiting.len() < WAITING_MAX {
            self.waiting.push(w);
        } else if !learning {
            if let Some(x) = self.waiting.iter_mut().find(|x| x.learning) {
                *x = w;
            }
        }
    }

    /// Forgets the waits of `stream` (it is forgotten).
    pub(super) fn forget_stream(&mut self, stream: u32) {
        self.waiting.retain(|w| w.stream != stream);
    }

    /// Forgets the waits on paths that are down (`down`: a bit per path): nothing comes there
    /// to meet them, and the streams are checked again without those paths.
    pub(super) fn forget_down(&mut self, down: u64) {
        self.waiting.retain(|w| down >> w.path & 1 == 0);
    }

    /// Moves to `due` the streams that waited for `stamp` or an earlier one on `path`.
    pub(super) fn take_due(&mut self, path: u8, stamp: u16, due: &mut Vec<u32>) {
        self.waiting.retain(|w| {
            let met = w.path == path && (w.need == stamp || is_after(stamp, w.need));
            if met {
                due.push(w.stream);
            }
            !met
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_passes_a_stamp_once_it_delivered_one_at_or_after_it() {
        let mut s = SourceStamps::default();
        assert_eq!(s.see(1, 10, 0), StampSeen::Advanced);
        assert!(s.passed(1, 10, 0) && s.passed(1, 9, 0));
        assert!(!s.passed(1, 11, 0), "not yet");
        assert!(!s.passed(2, 1, 0), "nothing from path 2");
        assert_eq!(s.see(1, 12, 5), StampSeen::Advanced);
        assert!(s.passed(1, 11, 5));
        assert!(
            !s.passed(1, 11, 5 + STAMP_FRESH_NS + 1),
            "too old to prove anything"
        );
        assert_eq!(s.see(NO_PATH_FOR_TEST, 12, 5), StampSeen::Ignored);
        assert_eq!(s.see(1, 0, 5), StampSeen::Ignored, "0 is no stamp");
    }

    const NO_PATH_FOR_TEST: u8 = crate::meta::NO_PATH;

    #[test]
    fn stamps_going_backwards_pause_the_source() {
        let mut s = SourceStamps::default();
        s.see(0, 100, 0);
        s.see(1, 101, 0);
        assert!(s.passed(1, 101, 0));
        // A second counter behind the same address, or a path that reordered.
        assert_eq!(s.see(1, 50, 10), StampSeen::Disorder { first: true });
        assert!(!s.passed(0, 90, 10), "paused");
        assert_eq!(s.see(1, 40, 20), StampSeen::Disorder { first: false });
        let later = 20 + DISORDER_PAUSE_NS;
        assert_eq!(s.see(0, 101, later), StampSeen::Advanced);
        assert!(s.passed(0, 90, later), "the pause ended");
        // An old newest stamp is not compared (it may be of an earlier wrap).
        let mut s = SourceStamps::default();
        s.see(0, 100, 0);
        assert_eq!(s.see(0, 50, STAMP_FRESH_NS + 1), StampSeen::Advanced);
    }

    #[test]
    fn stamps_too_far_behind_the_newest_are_not_compared() {
        let mut s = SourceStamps::default();
        s.see(0, 100, 0);
        s.see(1, 100 + STAMP_REACH - 1, 0);
        assert!(s.passed(0, 100, 0));
        // The source has moved on by more than the reach: stamp 100 may be of a wrap ago.
        s.see(1, 101 + STAMP_REACH, 0);
        assert!(!s.passed(0, 100, 0), "path 0's newest is too far behind");
        assert!(
            !s.passed(1, 100, 0),
            "the stamp asked about is too far behind"
        );
        assert!(s.passed(1, 102, 0));
    }

    #[test]
    fn waiting_streams_are_bounded_unique_and_due_on_their_path_and_stamp() {
        let mut s = SourceStamps::default();
        s.wait(3, 1, 50, false);
        s.wait(3, 2, 60, false);
        assert_eq!(s.waiting.len(), 1, "the newer wait replaces the older");
        for i in 0..2 * WAITING_MAX as u32 {
            s.wait(10 + i, 1, 40, false);
        }
        assert_eq!(s.waiting.len(), WAITING_MAX);
        let mut due = Vec::new();
        s.take_due(2, 59, &mut due);
        assert!(due.is_empty(), "stamp 59 is before 60");
        s.take_due(1, 60, &mut due);
        assert!(!due.contains(&3), "stream 3 waits on path 2");
        assert_eq!(due.len(), WAITING_MAX - 1);
        due.clear();
        s.take_due(2, 60, &mut due);
        assert_eq!(due, vec![3]);
        assert!(s.waiting.is_empty());
    }

    #[test]
    fn a_gaps_wait_takes_the_place_of_a_learning_one_and_down_paths_wait_for_nothing() {
        let mut s = SourceStamps::default();
        for i in 0..WAITING_MAX as u32 {
            s.wait(i, (i % 4) as u8, 40, true);
        }
        s.wait(100, 1, 40, true);
        assert!(!s.waiting.iter().any(|w| w.stream == 100), "full");
        s.wait(101, 1, 40, false);
        assert!(
            s.waiting.iter().any(|w| w.stream == 101),
            "a gap goes first"
        );
        assert_eq!(s.waiting.len(), WAITING_MAX);
        s.wait(102, 1, 40, false);
        s.wait(103, 1, 40, true);
        assert_eq!(
            s.waiting.iter().filter(|w| !w.learning).count(),
            2,
            "gaps are not pushed out"
        );
        // 14 learning waits (four a path, less those of streams 0 and 1 on paths 0 and 1,
        // replaced by the gaps) and the two gaps' on path 1: path 1 down leaves 11.
        s.forget_down(1 << 1);
        assert!(s.waiting.iter().all(|w| w.path != 1));
        assert_eq!(s.waiting.len(), 11);
    }
}
