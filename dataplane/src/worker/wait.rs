//! Idle coordination: what an idle worker waits on, and for how long.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Worker;
use crate::idle::{IdlePolicy, IdleWaiter, Wake};
use crate::port::Port;
use crate::time::now_ns;

impl Worker {
    /// Where this worker waits when idle: its ports' descriptors and its wake-up.
    pub(super) fn idle_waiter(&self) -> IdleWaiter {
        IdleWaiter::for_ports(self.wait_ports(), [self.wake()])
    }

    /// Its ports, for a loop that drives several workers and builds one [`IdleWaiter`] over
    /// all of theirs (with [`Worker::wake`] of each).
    pub fn wait_ports(&self) -> impl Iterator<Item = &dyn Port> {
        self.ports.iter().map(|p| &*p.port)
    }

    /// Its wake-up: notified when work reaches it other than through its ports.
    pub fn wake(&self) -> &Wake {
        &self.sh.wakes[self.sh.id]
    }

    /// Its idle policy.
    pub fn idle_policy(&self) -> IdlePolicy {
        self.cfg.idle
    }

    /// Counts an iteration that found nothing to do.
    pub fn note_idle(&self) {
        self.sh.counters.idle_loops.add(1);
    }

    /// True once the switch asked its workers to stop ([`Worker::finish`] then flushes).
    pub fn stop_requested(&self) -> bool {
        // Acquire pairs with the Release store in `Switch::stop`: everything the stopper did
        // before asking (last publications) is visible here.
        self.sh.stop.load(Ordering::Acquire)
    }

    /// The first half of an idle wait: arms the wake-up, then looks one last time at what
    /// arrives other than on the ports, so that whatever is queued after this look also ends
    /// the wait. `None`: work is already queued (the wake-up is disarmed again), do not wait.
    /// `Some(timed)`: wait, at most `timed` when the worker has timed work (hold timers live in
    /// the reorder stage, so that is the policy's short wait); then call [`Worker::end_wait`].
    pub fn prepare_wait(&self) -> Option<Option<Duration>> {
        let wake = self.wake();
        wake.arm();
        if self.inputs_waiting() {
            wake.disarm();
            return None;
        }
        Some(self.timed_wait(now_ns()))
    }

    /// The second half of an idle wait (see [`Worker::prepare_wait`]).
    pub fn end_wait(&self) {
        self.wake().disarm();
    }

    /// Work queued for this worker other than on its ports.
    pub(super) fn inputs_waiting(&self) -> bool {
        !self.sh.inbox.is_empty()
            || !self.sh.tables_rx.is_empty()
            || !self.sh.queries.is_empty()
            || self.sh.stop.load(Ordering::Acquire)
    }

    /// How long an idle wait may last when something must happen at a time rather than on an
    /// arrival (`None`: nothing is timed), at most the policy's short wait (`sleep_us`).
    /// Packets waiting for room in a transmit ring or a peer's hand-off ring, or in a port's
    /// backlog whose release time the port does not tell: the short wait. The reorder stage's
    /// next deadline ([`crate::reorder::DownlinkStage::poll_timeout`]: a gap's hold timer, a
    /// proof due), a port that tells when its backlog moves (a fault-injected link's next
    /// delayed packet), path probes due: until then.
    pub(super) fn timed_wait(&self, now: u64) -> Option<Duration> {
        let short = self.cfg.idle.short_wait();
        if self.waiting > 0 {
            return Some(short);
        }
        let mut next: Option<Duration> = None;
        if self.reorder.held() > 0 {
            let due = self.reorder.poll_timeout();
            next = Some(Duration::from_nanos(due.saturating_sub(now)));
        }
        for p in &self.ports {
            let d = if !p.q.ready.is_empty() {
                short
            } else if let Some(at) = p.q.next_event_ns(now) {
                // Held to the port's rate or by a pause: until it may move.
                Duration::from_nanos(at.saturating_sub(now))
            } else if !p.q.is_empty() {
                // Paused without a known end.
                short
            } else if p.port.tx_backlog() > 0 {
                p.port
                    .next_release_ns()
                    .map_or(short, |at| Duration::from_nanos(at.saturating_sub(now)))
            } else {
                continue;
            };
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        if let Some(due) = self.monitor.next_due() {
            // Path probes to send.
            let d = Duration::from_nanos(due.saturating_sub(now));
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        next.map(|d| d.min(short))
    }

    /// Wakes the workers this iteration handed packets to.
    pub(super) fn wake_handed(&mut self) {
        let mut m = std::mem::take(&mut self.handed);
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(wk) = self.sh.wakes.get(w) {
                wk.notify();
            }
        }
    }
}
