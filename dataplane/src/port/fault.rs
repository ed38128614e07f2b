//! A seeded fault injector that wraps any port and impairs what is sent through it: drop,
//! delay with jitter, reordering, duplication, corruption and a rate limit with a bounded
//! queue. Used as the links of in-process topologies and as the paths of the fabric emulator
//! (this kernel has no netem). Receiving passes straight through.
//!
//! Order is kept unless reordering is asked for: jitter never lets a packet overtake an earlier
//! one on the same path. Network control (priority 6 and 7) is a class of its own that does not
//! wait behind the rate's queue, as in a switch with a strict priority queue for it: it
//! overtakes queued data, never other network control. A reordered packet is held `reorder_extra_ns` longer than its turn.
//! Everything is decided from the seed and the `now` values the worker passes, so a test with a
//! fake clock replays exactly.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{LinkState, Port};
use crate::pkt::Pkt;
use crate::rng::Rng;

/// What to do to packets sent through the injector.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Probability that a packet is lost.
    pub drop_rate: f64,
    /// Changes of `drop_rate` over time: from each step's time on (the clock the worker
    /// passes), its rate instead; before the first, `drop_rate`. In time order. A path that
    /// fails mid-run, flaps, or is repaired.
    pub drop_schedule: Vec<LossStep>,
    /// Probability that a packet is sent twice.
    pub duplicate_rate: f64,
    /// Probability that one bit past the Ethernet header is flipped.
    pub corrupt_rate: f64,
    /// Probability that a packet is held back behind later ones.
    pub reorder_rate: f64,
    /// How much later than its turn a reordered packet arrives.
    pub reorder_extra_ns: u64,
    /// Fixed one-way delay.
    pub delay_ns: u64,
    /// Extra delay, uniform in `0..=jitter_ns` (order is still kept).
    pub jitter_ns: u64,
    /// Link rate in bits per second; `None` for unlimited.
    pub rate_bps: Option<u64>,
    /// Packets the link may hold (queued for the rate limit or in flight); more are dropped.
    pub queue_limit: usize,
    /// Seed of the random choices.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            drop_rate: 0.0,
            drop_schedule: Vec::new(),
            duplicate_rate: 0.0,
            corrupt_rate: 0.0,
            reorder_rate: 0.0,
            reorder_extra_ns: 20_000,
            delay_ns: 0,
            jitter_ns: 0,
            rate_bps: None,
            queue_limit: 4096,
            seed: 1,
        }
    }
}

/// A change of a link's loss at a point in time ([`FaultConfig::drop_schedule`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossStep {
    /// From when (ns, the worker's clock).
    pub at_ns: u64,
    /// The loss probability from then on.
    pub drop_rate: f64,
}

impl FaultConfig {
    /// The loss probability in force at `now`.
    pub fn drop_rate_at(&self, now: u64) -> f64 {
        self.drop_schedule
            .iter()
            .take_while(|s| s.at_ns <= now)
            .last()
            .map_or(self.drop_rate, |s| s.drop_rate)
    }
}

/// Counters of one injector, shared so that a test can read them while a worker runs it.
#[derive(Debug, Default)]
pub struct FaultStats {
    /// Packets offered to `tx_burst`.
    pub offered: AtomicU64,
    /// Lost on purpose.
    pub dropped: AtomicU64,
    /// Sent twice.
    pub duplicated: AtomicU64,
    /// Bit-flipped.
    pub corrupted: AtomicU64,
    /// Held back behind later packets.
    pub reordered: AtomicU64,
    /// Dropped because the link held `queue_limit` packets already.
    pub queue_drops: AtomicU64,
    /// Handed to the wrapped port.
    pub delivered: AtomicU64,
    /// How late packets were handed on against the time they were due (their delay, jitter and
    /// serialisation): counts by upper bound, [`LATE_BOUNDS_NS`] then one for the rest. The
    /// emulator releases a packet when its owner next looks, so this is the owner's wake-up
    /// and loop latency as the packets saw it.
    pub late: [AtomicU64; LATE_BOUNDS_NS.len() + 1],
    /// The sum of those lateness values, in nanoseconds.
    pub late_ns_total: AtomicU64,
    /// When a rate-limited link is free again: a packet offered before then waits in its queue
    /// until it (a gauge, 0 without a rate).
    pub busy_until_ns: AtomicU64,
}

/// Upper bounds of [`FaultStats::late`]'s buckets: 10 us, 50 us, 100 us, 500 us, 1 ms, 5 ms.
pub const LATE_BOUNDS_NS: [u64; 6] = [10_000, 50_000, 100_000, 500_000, 1_000_000, 5_000_000];

impl FaultStats {
    /// Reads a counter (relaxed: a statistic, not a synchronisation point).
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// How long a packet offered at `now` would wait for the link before its own serialisation
    /// and delay: the queue it would find.
    pub fn queue_ns(&self, now: u64) -> u64 {
        Self::get(&self.busy_until_ns).saturating_sub(now)
    }

    fn note_late(&self, late_ns: u64) {
        let b = LATE_BOUNDS_NS
            .iter()
            .position(|&ub| late_ns <= ub)
            .unwrap_or(LATE_BOUNDS_NS.len());
        // Relaxed: statistics only.
        self.late[b].fetch_add(1, Ordering::Relaxed);
        self.late_ns_total.fetch_add(late_ns, Ordering::Relaxed);
    }

    /// How late packets were handed on, so far (see [`FaultStats::late`]).
    pub fn lateness(&self) -> Lateness {
        Lateness {
            counts: std::array::from_fn(|i| Self::get(&self.late[i])),
            total_ns: Self::get(&self.late_ns_total),
        }
    }
}

/// How late a link handed packets on against their due times: counts per bucket (upper bounds
/// [`LATE_BOUNDS_NS`], then the rest) and their sum. Displays as
/// `<=10us N, <=50us N, ..., >5ms N, mean X us`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Packets per bucket.
    pub counts: [u64; LATE_BOUNDS_NS.len() + 1],
    /// The sum of the lateness values, in nanoseconds.
    pub total_ns: u64,
}

impl Lateness {
    /// The mean lateness in microseconds (0 when nothing was handed on).
    pub fn mean_us(&self) -> f64 {
        let n: u64 = self.counts.iter().sum();
        if n == 0 {
            0.0
        } else {
            self.total_ns as f64 / n as f64 / 1000.0
        }
    }
}

impl std::fmt::Display for Lateness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (ub, c) in LATE_BOUNDS_NS.iter().zip(&self.counts) {
            write!(f, "<={} {c}, ", micros_label(*ub))?;
        }
        let last = LATE_BOUNDS_NS[LATE_BOUNDS_NS.len() - 1];
        write!(
            f,
            ">{} {}, mean {:.1} us",
            micros_label(last),
            self.counts[LATE_BOUNDS_NS.len()],
            self.mean_us()
        )
    }
}

fn micros_label(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}us", ns / 1000)
    }
}

#[derive(Debug)]
struct Held {
    release_ns: u64,
    seq: u64,
    pkt: Pkt,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.release_ns, self.seq) == (o.release_ns, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        (self.release_ns, self.seq).cmp(&(o.release_ns, o.seq))
    }
}

/// Wraps a port and impairs its transmit direction.
pub struct FaultInjector<P: Port> {
    inner: P,
    cfg: FaultConfig,
    rng: Rng,
    held: BinaryHeap<Reverse<Held>>,
    staged: Vec<Pkt>,
    seq: u64,
    link_free_ns: u64,
    last_release_ns: u64,
    /// The release time of the last network-control packet (they keep their order).
    last_control_ns: u64,
    stats: Arc<FaultStats>,
}

impl<P: Port> FaultInjector<P> {
    /// Wraps `inner`.
    pub fn new(inner: P, cfg: FaultConfig) -> Self {
        let cap = cfg.queue_limit.max(1);
        FaultInjector {
            inner,
            rng: Rng::new(cfg.seed),
            cfg,
            held: BinaryHeap::with_capacity(cap + 1),
            staged: Vec::with_capacity(cap + 1),
            seq: 0,
            link_free_ns: 0,
            last_release_ns: 0,
            last_control_ns: 0,
            stats: Arc::new(FaultStats::default()),
        }
    }

    /// The shared counters.
    pub fn stats(&self) -> Arc<FaultStats> {
        self.stats.clone()
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Changes the impairments from now on (the seed is kept).
    pub fn set_config(&mut self, cfg: FaultConfig) {
        self.cfg = cfg;
    }

    fn count(c: &AtomicU64) {
        // Relaxed: statistics only.
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn enqueue(&mut self, now: u64, mut pkt: Pkt) {
        let s = &self.stats;
        Self::count(&s.offered);
        let drop_rate = if self.cfg.drop_schedule.is_empty() {
            self.cfg.drop_rate
        } else {
            self.cfg.drop_rate_at(now)
        };
        if self.rng.chance(drop_rate) {
            Self::count(&s.dropped);
            return;
        }
        if self.held.len() + self.staged.len() >= self.cfg.queue_limit {
            Self::count(&s.queue_drops);
            return;
        }
        if pkt.len() > 14 && self.rng.chance(self.cfg.corrupt_rate) {
            let span = (pkt.len() - 14) as u64;
            let at = 14 + self.rng.below(span) as usize;
            let bit = 1u8 << self.rng.below(8);
            pkt.data_mut()[at] ^= bit;
            Self::count(&s.corrupted);
        }
        // Network control (priority 6 and 7: CS6, CS7 or such a VLAN PCP) goes ahead of what
        // queues for the rate, as a switch's strict priority queue sends it, in order among
        // itself.
        if crate::wire::ecn::priority(pkt.data()) >= 6 {
            let release = (now + self.cfg.delay_ns).max(self.last_control_ns);
            self.last_control_ns = release;
            self.seq += 1;
            self.held.push(Reverse(Held {
                release_ns: release,
                seq: self.seq,
                pkt,
            }));
            return;
        }
        // Serialisation at the link rate: the packet leaves when the link is free.
        let depart = match self.cfg.rate_bps {
            Some(bps) if bps > 0 => {
                let start = now.max(self.link_free_ns);
                let wire_ns = (pkt.len() as u128 * 8 * 1_000_000_000 / u128::from(bps)) as u64;
                self.link_free_ns = start + wire_ns;
                s.busy_until_ns.store(self.link_free_ns, Ordering::Relaxed);
                self.link_free_ns
            }
            _ => now,
        };
        let jitter = if self.cfg.jitter_ns > 0 {
            self.rng.below(self.cfg.jitter_ns + 1)
        } else {
            0
        };
        let mut release = depart + self.cfg.delay_ns + jitter;
        if self.rng.chance(self.cfg.reorder_rate) {
            release = release.max(self.last_release_ns) + self.cfg.reorder_extra_ns;
            Self::count(&s.reordered);
        } else {
            release = release.max(self.last_release_ns);
            self.last_release_ns = release;
        }
        if self.rng.chance(self.cfg.duplicate_rate) {
            Self::count(&s.duplicated);
            self.seq += 1;
            self.held.push(Reverse(Held {
                release_ns: release,
                seq: self.seq,
                pkt: pkt.clone(),
            }));
        }
        self.seq += 1;
        self.held.push(Reverse(Held {
            release_ns: release,
            seq: self.seq,
            pkt,
        }));
    }

    fn release_due(&mut self, now: u64) {
        while let Some(Reverse(h)) = self.held.peek() {
            if h.release_ns > now {
                break;
            }
            if let Some(Reverse(h)) = self.held.pop() {
                self.stats.note_late(now - h.release_ns);
                self.staged.push(h.pkt);
            }
        }
        if !self.staged.is_empty() {
            let n = self.inner.tx_burst(now, &mut self.staged);
            self.stats.delivered.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// True when released packets wait for room in the inner port, or it has not finished
    /// sending them (an AF_XDP port with descriptors still in its TX ring, an in-memory link
    /// whose peer has not taken them): the owner should come back soon, not only at the next
    /// release.
    pub fn stalled(&self) -> bool {
        !self.staged.is_empty() || self.inner.tx_backlog() > 0
    }
}

impl<P: Port> Port for FaultInjector<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        self.inner.rx_burst(now, out, max)
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize {
        let n = pkts.len();
        for p in pkts.drain(..) {
            self.enqueue(now, p);
        }
        self.release_due(now);
        n
    }

    fn poll(&mut self, now: u64) {
        self.release_due(now);
        self.inner.poll(now);
    }

    fn link_state(&self) -> LinkState {
        self.inner.link_state()
    }

    fn tx_backlog(&self) -> usize {
        self.held.len() + self.staged.len() + self.inner.tx_backlog()
    }

    fn next_release_ns(&self) -> Option<u64> {
        if self.stalled() {
            // Waiting for room in the inner port, or for it to deliver: when it says, if it
            // knows (otherwise the owner comes back after its short wait).
            return self.inner.next_release_ns();
        }
        // The next held packet's release, if any.
        self.held.peek().map(|Reverse(h)| h.release_ns)
    }

    fn rx_finished(&self) -> bool {
        self.inner.rx_finished()
    }

    fn wait_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        self.inner.wait_fds(out)
    }

    fn rx_pool(&self) -> Option<std::sync::Arc<dyn super::RxPool>> {
        self.inner.rx_pool()
    }

    fn flush(&mut self) {
        self.inner.flush()
    }

    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    fn backend_counters(&self) -> super::BackendCounters {
        self.inner.backend_counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::mem;

    fn send(f: &mut FaultInjector<mem::MemPort>, now: u64, ids: impl IntoIterator<Item = u32>) {
        let mut v: Vec<Pkt> = ids
            .into_iter()
            .map(|i| Pkt::from_slice(&[0u8; 60]).tap(i))
            .collect();
        f.tx_burst(now, &mut v);
    }

    trait Tap {
        fn tap(self, id: u32) -> Pkt;
    }
    impl Tap for Pkt {
        fn tap(mut self, id: u32) -> Pkt {
            self.data_mut()[20..24].copy_from_slice(&id.to_be_bytes());
            self
        }
    }

    fn drain(b: &mut mem::MemPort) -> Vec<u32> {
        let mut out = Vec::new();
        b.rx_burst(0, &mut out, usize::MAX);
        out.iter()
            .map(|p| u32::from_be_bytes(p.data()[20..24].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn delay_and_jitter_keep_order() {
        let (a, mut b) = mem::link("a", "b", 10_000);
        let cfg = FaultConfig {
            delay_ns: 1000,
            jitter_ns: 5000,
            seed: 3,
            ..FaultConfig::default()
        };
        let mut f = FaultInjector::new(a, cfg);
        for t in 0..100u32 {
            send(&mut f, u64::from(t) * 10, [t]);
        }
        f.poll(999);
        assert!(drain(&mut b).is_empty(), "nothing before the fixed delay");
        f.poll(1_000_000);
        assert_eq!(drain(&mut b), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn lateness_is_measured_against_each_packets_due_time() {
        let (a, mut b) = mem::link("a", "b", 100);
        let cfg = FaultConfig {
            delay_ns: 100_000,
            ..FaultConfig::default()
        };
        let mut f = FaultInjector::new(a, cfg);
        let stats = f.stats();
        // Due at 100 us, released on time.
        send(&mut f, 0, [1]);
        f.poll(99_999);
        assert!(drain(&mut b).is_empty());
        f.poll(100_000);
        // Due at 300 us, released at 400 us: 100 us late.
        send(&mut f, 200_000, [2]);
        f.poll(400_000);
        // Due at 1.1 ms, released at 10 ms.
        send(&mut f, 1_000_000, [3]);
        f.poll(10_000_000);
        assert_eq!(drain(&mut b), vec![1, 2, 3]);
        let late = stats.lateness();
        assert_eq!(late.counts, [1, 0, 1, 0, 0, 0, 1]);
        assert_eq!(late.total_ns, 100_000 + 8_900_000);
        assert_eq!(
            late.to_string(),
            "<=10us 1, <=50us 0, <=100us 1, <=500us 0, <=1ms 0, <=5ms 0, >5ms 1, mean 3000.0 us"
        );
        assert_eq!(Lateness::default().mean_us(), 0.0);
    }

    #[test]
    fn a_loss_schedule_changes_the_loss_over_time() {
        let (a, mut b) = mem::link("a", "b", 1000);
        let cfg = FaultConfig {
            drop_schedule: vec![
                LossStep {
                    at_ns: 100,
                    drop_rate: 1.0,
                },
                LossStep {
                    at_ns: 200,
                    drop_rate: 0.0,
                },
            ],
            ..FaultConfig::default()
        };
        assert_eq!(cfg.drop_rate_at(99), 0.0);
        assert_eq!(cfg.drop_rate_at(100), 1.0);
        assert_eq!(cfg.drop_rate_at(5000), 0.0);
        let mut f = FaultInjector::new(a, cfg);
        send(&mut f, 50, [1]);
        send(&mut f, 150, [2]);
        send(&mut f, 250, [3]);
        f.poll(1000);
        assert_eq!(drain(&mut b), vec![1, 3], "dead from 100 to 200 ns");
    }

    #[test]
    fn rate_limit_spaces_packets() {
        let (a, mut b) = mem::link("a", "b", 100);
        // 60-byte frames at 480 Mbit/s: 1 us each.
        let cfg = FaultConfig {
            rate_bps: Some(480_000_000),
            ..FaultConfig::default()
        };
        let mut f = FaultInjector::new(a, cfg);
        send(&mut f, 0, 0..10);
        // The queue a packet offered now would find: the link is busy until 10 us.
        assert_eq!(f.stats().queue_ns(0), 10_000);
        assert_eq!(f.stats().queue_ns(4_500), 5_500);
        assert_eq!(f.stats().queue_ns(12_000), 0);
        f.poll(4_500);
        assert_eq!(drain(&mut b), vec![0, 1, 2, 3]);
        assert_eq!(f.tx_backlog(), 6);
        f.poll(10_000);
        assert_eq!(drain(&mut b).len(), 6);
    }

    #[test]
    fn drop_duplicate_reorder_corrupt_are_counted_and_seeded() {
        let run = |seed| {
            let (a, mut b) = mem::link("a", "b", 100_000);
            let cfg = FaultConfig {
                drop_rate: 0.1,
                duplicate_rate: 0.05,
                reorder_rate: 0.05,
                corrupt_rate: 0.02,
                reorder_extra_ns: 50,
                seed,
                ..FaultConfig::default()
            };
            let mut f = FaultInjector::new(a, cfg);
            for t in 0..10_000u32 {
                send(&mut f, u64::from(t), [t]);
            }
            f.poll(u64::MAX / 2);
            (drain(&mut b), f.stats())
        };
        let (got, s) = run(9);
        let g = FaultStats::get;
        assert_eq!(g(&s.offered), 10_000);
        assert!((800..1200).contains(&g(&s.dropped)), "{}", g(&s.dropped));
        assert!(g(&s.duplicated) > 300 && g(&s.reordered) > 300 && g(&s.corrupted) > 100);
        assert_eq!(got.len() as u64, 10_000 - g(&s.dropped) + g(&s.duplicated));
        assert!(got.windows(2).any(|w| w[1] < w[0]), "reordering happened");
        assert_eq!(run(9).0, got, "same seed, same outcome");
        assert_ne!(run(10).0, got);
    }

    #[test]
    fn queue_limit_drops_and_counts() {
        let (a, _b) = mem::link("a", "b", 1000);
        let cfg = FaultConfig {
            delay_ns: 1_000_000,
            queue_limit: 10,
            ..FaultConfig::default()
        };
        let mut f = FaultInjector::new(a, cfg);
        send(&mut f, 0, 0..15);
        assert_eq!(FaultStats::get(&f.stats().queue_drops), 5);
        assert_eq!(f.tx_backlog(), 10);
    }
}
