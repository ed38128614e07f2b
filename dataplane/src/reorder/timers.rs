//! The core's timers: when each stream that holds packets or is learning next needs looking at
//! (its learning window ends, its hold runs out), in one heap ordered by time, so that a poll
//! touches the streams that are due and no others.
//!
//! **Why a heap.** The core's poll used to walk every listed stream each time the earliest
//! deadline passed. With 10,000 QPs holding behind a slow path, some deadline passes on nearly
//! every iteration, and each walk cost 10,000 streams: a worker on the DPDK peer benchmark
//! forwarded nothing for seconds (`scripts/peer-bench.sh --role destination`).
//!
//! **Entries may be early, never late.** A stream's deadline moves later as its gaps fill (a
//! new gap opens later), and an entry is not updated then: when it comes due, the stream's
//! own deadline is computed again and the stream goes back in at it. It is pushed anew only
//! when its deadline comes earlier than its entry ([`Timers::arm`], from the core's `settle`
//! after every operation on a stream); the older entry is then stale, recognised by the time of
//! the entry that counts, kept per stream id beside the heap (not in the `Stream`, which stays
//! within four cache lines), and skipped. The deadline also depends on the paths' skew, which
//! can only shrink when one of its periods ends: the core then arms every listed stream again
//! ([`Timers::rescan`]), as it does when the hold timeout changes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::stream::StreamId;

/// The streams' next looks, earliest first.
pub(super) struct Timers {
    heap: BinaryHeap<Reverse<(u64, StreamId)>>,
    /// Each stream's entry that counts, by id (`u64::MAX`: none).
    at: Vec<u64>,
    /// Every listed stream must be armed again before the next look (a hold may have become
    /// shorter).
    rescan: bool,
    /// The skew the entries were armed with.
    skew: Option<u64>,
    /// Looks taken (entries that came due and counted): what a poll costs.
    looks: u64,
}

impl Timers {
    /// Timers with room for `cap` entries before the heap grows. The heap and the entry
    /// times grow to the most streams ever armed at once and the highest stream id armed
    /// (doubling: a few times in a switch's life, never per packet once there), not to
    /// `max_streams` up front: 100k streams of state must fit in 64 MiB.
    pub(super) fn new(cap: usize) -> Timers {
        Timers {
            heap: BinaryHeap::with_capacity(cap),
            at: Vec::new(),
            rescan: false,
            skew: None,
            looks: 0,
        }
    }

    /// Stream `id` needs a look at `at` (`u64::MAX`: none): a new entry when that is before
    /// the one it has.
    #[inline]
    pub(super) fn arm(&mut self, id: StreamId, at: u64) {
        let i = id as usize;
        if at == u64::MAX {
            // Nothing to look at (the entry it may have stands: early is allowed).
            return;
        }
        if self.at.len() <= i {
            self.at.resize(i + 1, u64::MAX);
        }
        if at < self.at[i] {
            self.at[i] = at;
            self.heap.push(Reverse((at, id)));
        }
    }

    /// Stream `id` is gone (or starts over): whatever entries it has are stale.
    #[inline]
    pub(super) fn forget(&mut self, id: StreamId) {
        if let Some(a) = self.at.get_mut(id as usize) {
            *a = u64::MAX;
        }
    }

    /// The earliest entry's time (`u64::MAX`: none).
    #[inline]
    pub(super) fn next(&self) -> u64 {
        self.heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t)
    }

    /// Takes the next entry due at `now`: its stream no longer has one. Stale entries (of a
    /// stream armed earlier since, or forgotten) are dropped on the way.
    pub(super) fn pop_due(&mut self, now: u64) -> Option<StreamId> {
        while let Some(&Reverse((t, id))) = self.heap.peek() {
            if t > now {
                return None;
            }
            self.heap.pop();
            if let Some(a) = self.at.get_mut(id as usize) {
                if *a == t {
                    *a = u64::MAX;
                    self.looks += 1;
                    return Some(id);
                }
            }
        }
        None
    }

    /// Whether every listed stream must be armed again before the next look, given the skew
    /// now: asked for ([`Timers::ask_rescan`]), the skew shrank since the last look, or the
    /// heap holds more stale entries than `live` streams justify (then the heap and every
    /// stream's entry are dropped first). Clears the request.
    pub(super) fn rescan(&mut self, skew: Option<u64>, live: usize) -> bool {
        let shrank = skew.unwrap_or(0) < self.skew.unwrap_or(0);
        self.skew = skew;
        let bloated = self.heap.len() > 4 * live + 1024;
        if bloated {
            self.heap.clear();
            self.at.fill(u64::MAX);
        }
        std::mem::take(&mut self.rescan) || shrank || bloated
    }

    /// Every listed stream must be armed again before the next look (the hold timeout changed).
    pub(super) fn ask_rescan(&mut self) {
        self.rescan = true;
    }

    /// Approximate bytes it holds: the heap and the entry times.
    pub(super) fn state_bytes(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<Reverse<(u64, StreamId)>>()
            + self.at.capacity() * std::mem::size_of::<u64>()
    }

    /// Entries in the heap, stale ones included, and the looks taken so far.
    #[cfg(test)]
    pub(super) fn usage(&self) -> (usize, u64) {
        (self.heap.len(), self.looks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_due_in_time_order_and_stale_ones_are_skipped() {
        let mut timers = Timers::new(4);
        timers.arm(0, 300);
        timers.arm(1, 100);
        timers.arm(2, 200);
        // Stream 0 armed earlier: its entry at 300 is stale; armed later: nothing new.
        timers.arm(0, 150);
        timers.arm(0, 400);
        assert_eq!(timers.next(), 100);
        assert_eq!(timers.pop_due(99), None);
        assert_eq!(timers.pop_due(1_000), Some(1));
        assert_eq!(timers.pop_due(1_000), Some(0));
        // A forgotten stream's entry does not come due.
        timers.forget(2);
        assert_eq!(
            timers.pop_due(1_000),
            None,
            "the stale 300 and the forgotten 200"
        );
        assert_eq!(timers.next(), u64::MAX);
        // Taken: a later arm at any time counts again.
        timers.arm(1, 5_000);
        assert_eq!(timers.pop_due(5_000), Some(1));
    }

    #[test]
    fn a_shrinking_skew_a_request_or_too_many_stale_entries_ask_for_a_rescan() {
        let mut timers = Timers::new(4);
        assert!(!timers.rescan(None, 1));
        assert!(!timers.rescan(Some(500), 1), "a growing skew only delays");
        assert!(
            timers.rescan(Some(100), 1),
            "a shrinking one may shorten holds"
        );
        assert!(!timers.rescan(Some(100), 1));
        timers.ask_rescan();
        assert!(timers.rescan(Some(100), 1));
        assert!(!timers.rescan(Some(100), 1), "a request is answered once");
        for at in (0..2_000u64).rev() {
            timers.arm(0, at);
        }
        assert!(timers.rescan(Some(100), 1));
        assert_eq!(timers.usage().0, 0, "the stale entries are dropped");
        // Its entry went with the heap: arming it again counts.
        timers.arm(0, 7);
        assert_eq!(timers.pop_due(7), Some(0));
    }
}
