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
//! after every operation on a stream); the older entry is then stale, recognised by
//! `Stream::timer_at` (the time of the entry that counts) and skipped. The deadline also
//! depends on the paths' skew, which can only shrink when one of its periods ends: the core
//! then arms every listed stream again ([`Timers::rescan`]), as it does when the hold timeout
//! changes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::stream::{Stream, StreamId};
use super::table::StreamTable;

/// The streams' next looks, earliest first.
pub(super) struct Timers {
    heap: BinaryHeap<Reverse<(u64, StreamId)>>,
    /// Every listed stream must be armed again before the next look (a hold may have become
    /// shorter).
    rescan: bool,
    /// The skew the entries were armed with.
    skew: Option<u64>,
    /// Looks taken (entries that came due and counted): what a poll costs.
    looks: u64,
}

impl Timers {
    /// Timers with room for `cap` entries before the heap grows.
    pub(super) fn new(cap: usize) -> Timers {
        Timers {
            heap: BinaryHeap::with_capacity(cap),
            rescan: false,
            skew: None,
            looks: 0,
        }
    }

    /// Stream `id` (`s`) needs a look at `at` (`u64::MAX`: none): a new entry when that is
    /// before the one it has.
    #[inline]
    pub(super) fn arm<T>(&mut self, s: &mut Stream<T>, id: StreamId, at: u64) {
        if at < s.timer_at {
            s.timer_at = at;
            self.heap.push(Reverse((at, id)));
        }
    }

    /// The earliest entry's time (`u64::MAX`: none).
    #[inline]
    pub(super) fn next(&self) -> u64 {
        self.heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t)
    }

    /// Takes the next entry due at `now`: its stream no longer has one. Stale entries (of a
    /// stream armed earlier since, or removed) are dropped on the way.
    pub(super) fn pop_due<T>(&mut self, now: u64, table: &mut StreamTable<T>) -> Option<StreamId> {
        while let Some(&Reverse((t, id))) = self.heap.peek() {
            if t > now {
                return None;
            }
            self.heap.pop();
            if let Some(s) = table.slot_mut(id) {
                if s.timer_at == t {
                    s.timer_at = u64::MAX;
                    self.looks += 1;
                    return Some(id);
                }
            }
        }
        None
    }

    /// Whether every listed stream must be armed again before the next look, given the skew
    /// now: asked for ([`Timers::ask_rescan`]), the skew shrank since the last look, or the
    /// heap holds more stale entries than `live` streams justify. Clears the request and, for
    /// the last reason, the heap (the caller re-arms every listed stream from `u64::MAX`).
    pub(super) fn rescan(&mut self, skew: Option<u64>, live: usize) -> Rescan {
        let shrank = skew.unwrap_or(0) < self.skew.unwrap_or(0);
        self.skew = skew;
        if self.heap.len() > 4 * live + 1024 {
            self.heap.clear();
            self.rescan = false;
            return Rescan::Cleared;
        }
        if std::mem::take(&mut self.rescan) || shrank {
            Rescan::Arm
        } else {
            Rescan::No
        }
    }

    /// Every listed stream must be armed again before the next look (the hold timeout changed).
    pub(super) fn ask_rescan(&mut self) {
        self.rescan = true;
    }

    /// Entries in the heap, stale ones included, and the looks taken so far.
    #[cfg(test)]
    pub(super) fn usage(&self) -> (usize, u64) {
        (self.heap.len(), self.looks)
    }
}

/// What [`Timers::rescan`] asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rescan {
    /// Nothing: the entries stand.
    No,
    /// Arm every listed stream again at its deadline now.
    Arm,
    /// The heap was emptied: forget every stream's entry (`timer_at = u64::MAX`), then arm.
    Cleared,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reorder::stream::{Phase, StreamKey};
    use crate::wire::Psn;

    fn table(n: u32) -> StreamTable<u32> {
        let mut t = StreamTable::new(n as usize, n as usize);
        for q in 0..n {
            let key = StreamKey::Request { local: 1, qpn: q };
            t.insert(Stream::new(key, Phase::Active, Psn::new(0), 0));
        }
        t
    }

    #[test]
    fn entries_come_due_in_time_order_and_stale_ones_are_skipped() {
        let mut t = table(3);
        let mut timers = Timers::new(4);
        timers.arm(t.get_mut(0), 0, 300);
        timers.arm(t.get_mut(1), 1, 100);
        timers.arm(t.get_mut(2), 2, 200);
        // Stream 0 armed earlier: its entry at 300 is stale; armed later: nothing new.
        timers.arm(t.get_mut(0), 0, 150);
        timers.arm(t.get_mut(0), 0, 400);
        assert_eq!(timers.next(), 100);
        assert_eq!(timers.pop_due(99, &mut t), None);
        assert_eq!(timers.pop_due(1_000, &mut t), Some(1));
        assert_eq!(timers.pop_due(1_000, &mut t), Some(0));
        // A removed stream's entry does not come due.
        t.remove(2);
        assert_eq!(
            timers.pop_due(1_000, &mut t),
            None,
            "the stale 300 and the removed 200"
        );
        assert_eq!(timers.next(), u64::MAX);
        assert_eq!(t.get(1).timer_at, u64::MAX, "taken: no entry");
    }

    #[test]
    fn a_shrinking_skew_a_request_or_too_many_stale_entries_ask_for_a_rescan() {
        let mut t = table(1);
        let mut timers = Timers::new(4);
        assert_eq!(timers.rescan(None, 1), Rescan::No);
        assert_eq!(
            timers.rescan(Some(500), 1),
            Rescan::No,
            "a growing skew only delays"
        );
        assert_eq!(timers.rescan(Some(100), 1), Rescan::Arm);
        assert_eq!(timers.rescan(Some(100), 1), Rescan::No);
        timers.ask_rescan();
        assert_eq!(timers.rescan(Some(100), 1), Rescan::Arm);
        for at in (0..2_000u64).rev() {
            timers.arm(t.get_mut(0), 0, at);
        }
        assert_eq!(timers.rescan(Some(100), 1), Rescan::Cleared);
        assert_eq!(timers.usage().0, 0);
    }
}
