//! How late the fabric's paths deliver: the largest time a gap stayed open before its own
//! packet filled it, lately. It keeps the hold timeout from giving up on packets that are
//! still on their way.
//!
//! **Why.** Under load a path's queue is part of its delay, so the skew between paths is not
//! the difference of their propagation delays but whatever their queues make it: in the demo's
//! fabric (four 250 Mbit/s paths of 2 to 50 us) gaps filled by their own packet stayed open
//! 0.25 to 4 ms at the most, depending on the run, and a hold timeout of 500 us declared such
//! gaps lost while their packets were on the way. Towards a Go-Back-N host that costs a whole window: the host drops everything
//! released after the gap and its sender sends it all again.
//!
//! **What it learns.** A gap at a stream's expected PSN that its own packet fills (not a
//! retransmission: not one declared lost, not one the host NAKed) is a sample: how long it was
//! open. The largest sample of the last one to two periods ([`SKEW_PERIOD_NS`]) is the skew, so
//! it follows queues that grow and drain; it counts once [`SKEW_MIN_SAMPLES`] samples are in.
//!
//! **What it does.** For a stream that comes over path-order fabric paths the hold timeout in
//! force is at least [`SKEW_TIMEOUT_FACTOR`] times the skew (`ReorderCore::hold_limit`). It
//! only ever delays a timeout, so it cannot declare anything lost that the configured timeout
//! would not have; path order still declares losses as soon as the paths prove them.

/// Length of one period of the windowed maximum: the skew is the largest sample of the current
/// period and the one before it.
pub const SKEW_PERIOD_NS: u64 = 100_000_000;

/// Samples needed before the skew counts (a new switch, or one that saw no reordering for two
/// periods, has not learned its paths yet); once they are in, it counts while either period
/// has one.
pub const SKEW_MIN_SAMPLES: u32 = 32;

/// The hold timeout in force for a stream over path-order paths is at least this many times
/// the skew: a packet later than any seen lately by this much is taken as lost.
pub const SKEW_TIMEOUT_FACTOR: u64 = 2;

/// The largest sample of the last one to two periods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkewWindow {
    /// Start of the current period.
    since: u64,
    /// Largest sample of the current period, and of the one before it.
    cur: u64,
    prev: u64,
    /// Samples in the current and the previous period.
    samples: u32,
    prev_samples: u32,
    /// Samples since the window was last empty for two periods.
    total: u32,
}

impl SkewWindow {
    /// Moves the periods on to `now`.
    fn roll(&mut self, now: u64) {
        if now < self.since.saturating_add(SKEW_PERIOD_NS) {
            return;
        }
        if now < self.since.saturating_add(2 * SKEW_PERIOD_NS) {
            self.prev = self.cur;
            self.prev_samples = self.samples;
            self.since = self.since.saturating_add(SKEW_PERIOD_NS);
        } else {
            self.prev = 0;
            self.prev_samples = 0;
            self.since = now;
            self.total = 0;
        }
        self.cur = 0;
        self.samples = 0;
    }

    /// A gap at a stream's expected PSN was filled by its own packet `late` ns after it opened.
    #[inline]
    pub fn record(&mut self, now: u64, late: u64) {
        self.roll(now);
        self.cur = self.cur.max(late);
        self.samples = self.samples.saturating_add(1);
        self.total = self.total.saturating_add(1);
    }

    /// After `now`, when the periods next move on (and [`SkewWindow::largest`] may change
    /// without a new sample).
    pub fn next_roll(&self, now: u64) -> u64 {
        let mut w = *self;
        w.roll(now);
        w.since.saturating_add(SKEW_PERIOD_NS)
    }

    /// The largest sample of the current and the previous period, once there are enough.
    pub fn largest(&self, now: u64) -> Option<u64> {
        let mut w = *self;
        w.roll(now);
        (w.total >= SKEW_MIN_SAMPLES && w.samples.saturating_add(w.prev_samples) > 0)
            .then_some(w.cur.max(w.prev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_counts_before_enough_samples() {
        let mut w = SkewWindow::default();
        for i in 0..SKEW_MIN_SAMPLES - 1 {
            w.record(1000 + u64::from(i), 40_000);
        }
        assert_eq!(w.largest(2000), None);
        w.record(2000, 10_000);
        assert_eq!(w.largest(2000), Some(40_000));
    }

    #[test]
    fn the_largest_follows_the_last_two_periods() {
        let mut w = SkewWindow::default();
        for i in 0..64 {
            w.record(i, if i == 5 { 300_000 } else { 30_000 });
        }
        assert_eq!(w.largest(100), Some(300_000));
        // One period on, a few samples (fewer than SKEW_MIN_SAMPLES): the old period still
        // counts, and the skew stays learned.
        for i in 0..4 {
            w.record(SKEW_PERIOD_NS + i, 20_000);
        }
        assert_eq!(w.largest(SKEW_PERIOD_NS + 100), Some(300_000));
        // Two periods on: only the last one counts, still learned with few samples a period.
        for i in 0..4 {
            w.record(2 * SKEW_PERIOD_NS + i, 25_000);
        }
        assert_eq!(w.largest(2 * SKEW_PERIOD_NS + 100), Some(25_000));
        assert_eq!(w.largest(3 * SKEW_PERIOD_NS + 100), Some(25_000));
        // Nothing for two periods: learned again from nothing.
        assert_eq!(w.largest(5 * SKEW_PERIOD_NS), None);
        w.record(5 * SKEW_PERIOD_NS, 10_000);
        assert_eq!(w.largest(5 * SKEW_PERIOD_NS), None);
    }

    #[test]
    fn a_growing_skew_is_followed_sample_by_sample() {
        let mut w = SkewWindow::default();
        for i in 0..1000u64 {
            w.record(i * 1000, 10_000 + i * 500);
            if i >= u64::from(SKEW_MIN_SAMPLES) {
                assert_eq!(w.largest(i * 1000), Some(10_000 + i * 500));
            }
        }
    }
}
