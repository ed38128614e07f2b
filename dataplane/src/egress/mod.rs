//! A port's egress queue: what the switch holds for one port before the port takes it, with
//! the port's rate, ECN marking on the queue's depth, and the pauses its peer asked for.
//!
//! ```text
//!  enqueue ─► waiting (FIFO) ─► [paused: per priority, while PAUSE/PFC stops it]
//!                           ─► mark CE? (depth = queued bytes) ─► ready (tokens taken)
//!                           ─► tx_burst
//! ```
//!
//! - **Rate.** A port with a rate sends through a token bucket ([`shaper`]); packets the bucket
//!   cannot take yet wait, in order.
//! - **ECN.** An ECN-capable packet leaving the queue for the port is marked CE with the
//!   probability the depth gives ([`ecn::EcnProfile`]); the depth counts, in bytes, everything
//!   queued here. Marking on dequeue, as the HPCC/ConWeave switch model and most RoCE switch
//!   ASICs do, tells the sender about the queue as it is now rather than as it was a queueing
//!   delay ago (marking on enqueue let DCQCN senders over-react for as long as the queue took
//!   to drain). The depths packets find entering are recorded in a histogram, with what the
//!   caller says it holds for the port elsewhere (the reorder stage, towards a host). That is
//!   not marked on: packets held behind a gap are no queue of the port's (they go into it when
//!   the gap fills, and are marked there then), and marking on them slowed exactly the
//!   retransmission that would release them (in the fabric simulator with a dead spine, every
//!   flow to one host stalled at DCQCN's lowest rate behind 500 KB waiting for a
//!   retransmission).
//! - **Pause.** A PAUSE frame from the peer stops every priority for its quanta, a PFC frame the
//!   priorities it names ([`crate::wire::ecn::priority`] classifies a packet); packets of a
//!   paused priority wait in their own queue and go first, in order, once it ends. Quanta are
//!   timed at the port's configured rate (its link speed when it is shaped to its link;
//!   a port shaped below its link pauses longer than the frame asks), or
//!   [`DEFAULT_PAUSE_RATE_BPS`] without one. Packets already handed to the port still go, up
//!   to [`PAUSE_SLACK_PKTS`]: `ready` holds at most [`EgressQueue::set_burst`]'s bound, and the
//!   worker sets none (a port that pushes back keeps what it was handed there, marked when
//!   handed over), so a pause puts what is beyond one burst back to wait. A packet is marked
//!   on the depth of its own priority: another priority's paused packets do not count.
//! - **Network control.** Packets of priority 6 and 7 (CS6, CS7: routing protocols, the path
//!   probes of [`crate::health`], the switch's own or in transit) skip what waits for the rate
//!   or a pause, as a switch's strict priority queue for network control sends them: a path's
//!   health is judged by its probes, not by the data queue in front of them.
//! - **Bound.** The queue holds at most `limit` packets in all; beyond that an arriving packet
//!   is dropped (the caller counts it).
//!
//! Pure logic over the caller's clock: nothing here reads a clock or allocates once the queues
//! have grown to their working size.

pub mod depth;
pub mod ecn;
pub mod shaper;

use std::collections::VecDeque;

use crate::pkt::Pkt;
use crate::rng::Rng;
use crate::wire::ecn::{is_network_control, mark_ce, priority, Mark};
use crate::wire::pause::{quanta_ns, PauseFrame};
pub use depth::{depth_histogram, DepthCounts};
pub use ecn::EcnProfile;
pub use shaper::Shaper;

/// Packets already handed to a port that a pause lets go (one burst of the worker's).
pub const PAUSE_SLACK_PKTS: usize = 32;

/// The speed pause quanta are timed at on a port without a configured rate.
pub const DEFAULT_PAUSE_RATE_BPS: u64 = 100_000_000_000;

/// How a port's egress queue behaves.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EgressConfig {
    /// The port's rate (`None`: as fast as the port takes packets).
    pub rate_bps: Option<u64>,
    /// What the rate lets through back to back after an idle spell, bytes (`None`:
    /// [`shaper::BURST_BYTES`]).
    pub burst_bytes: Option<u32>,
    /// ECN marking (`None`: never marks).
    pub ecn: Option<EcnProfile>,
}

/// What one queue counted (plain integers; the worker publishes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EgressCounts {
    /// Packets marked CE.
    pub ecn_marked: u64,
    /// PAUSE frames received.
    pub pause_frames: u64,
    /// PFC frames received.
    pub pfc_frames: u64,
    /// Time any priority was (or, until the current pause ends, will be) paused, ns.
    pub paused_ns: u64,
}

/// An [`EcnProfile`] in integers, for the per-packet decision: mark when a 32-bit random
/// number `r` satisfies `r * span < pmax32 * (depth - kmin)` (`span = kmax - kmin`,
/// `pmax32 = pmax * 2^32`), which is `r / 2^32 < pmax * (depth - kmin) / span` without a
/// division; above Kmax every ECN-capable packet.
#[derive(Debug, Clone, Copy)]
struct Marker {
    kmin: u64,
    kmax: u64,
    span: u64,
    pmax32: u64,
}

impl Marker {
    fn new(p: EcnProfile) -> Marker {
        Marker {
            kmin: p.kmin_bytes,
            kmax: p.kmax_bytes,
            span: (p.kmax_bytes - p.kmin_bytes.min(p.kmax_bytes)).max(1),
            pmax32: (p.pmax.clamp(0.0, 1.0) * 4_294_967_296.0) as u64,
        }
    }

    /// True when a packet leaving `depth` bytes behind is to be marked.
    #[inline]
    fn decide(&self, depth: u64, rng: &mut Rng) -> bool {
        if depth <= self.kmin {
            return false;
        }
        if depth > self.kmax {
            return true;
        }
        let r = rng.next_u64() >> 32;
        // depth - kmin <= span < 2^32 (1e6 KB at most) and pmax32 <= 2^32: no overflow.
        r * self.span < self.pmax32 * (depth - self.kmin)
    }
}

/// One port's egress queue.
pub struct EgressQueue {
    /// Packets whose tokens are taken: the port's next `tx_burst`. The caller transmits from
    /// it and calls [`EgressQueue::sent`] with what the port took.
    pub ready: Vec<Pkt>,
    ready_bytes: u64,
    waiting: VecDeque<Pkt>,
    waiting_bytes: u64,
    /// Per priority: packets that met a pause of it, in order, and their bytes.
    paused: [VecDeque<Pkt>; 8],
    paused_bytes_of: [u64; 8],
    paused_bytes: u64,
    paused_pkts: usize,
    /// Most packets `ready` holds: what the port takes in one burst. Beyond it packets wait,
    /// so that a pause stops them and their marks are decided when they leave.
    burst: usize,
    /// Per priority: paused until (ns).
    pause_until: [u64; 8],
    /// The latest of `pause_until`.
    pause_end: u64,
    shaper: Option<Shaper>,
    pause_rate_bps: u64,
    ecn: Option<Marker>,
    rng: Rng,
    limit: usize,
    /// What it counted.
    pub counts: EgressCounts,
    /// Depth (bytes, with what the caller holds elsewhere) seen by each packet entering.
    pub depths: DepthCounts,
}

impl EgressQueue {
    /// An empty queue of at most `limit` packets.
    pub fn new(cfg: EgressConfig, limit: usize, seed: u64) -> EgressQueue {
        let mut q = EgressQueue {
            ready: Vec::with_capacity(64),
            ready_bytes: 0,
            // What a port that pushes back keeps: allocated once, not on the packet path.
            waiting: VecDeque::with_capacity(limit.max(1)),
            waiting_bytes: 0,
            paused: Default::default(),
            paused_bytes_of: [0; 8],
            paused_bytes: 0,
            paused_pkts: 0,
            burst: usize::MAX,
            pause_until: [0; 8],
            pause_end: 0,
            shaper: None,
            pause_rate_bps: DEFAULT_PAUSE_RATE_BPS,
            ecn: None,
            rng: Rng::new(seed),
            limit: limit.max(1),
            counts: EgressCounts::default(),
            depths: DepthCounts::default(),
        };
        q.configure(cfg);
        q
    }

    /// Applies new settings (a configuration reload); what is queued stays queued.
    pub fn configure(&mut self, cfg: EgressConfig) {
        let burst = cfg.burst_bytes.map_or(shaper::BURST_BYTES, f64::from);
        if self
            .shaper
            .as_ref()
            .map(|s| (s.rate_bps(), s.burst_bytes()))
            != cfg.rate_bps.map(|r| (r, burst))
        {
            self.shaper = cfg.rate_bps.map(|r| Shaper::with_burst(r, burst));
        }
        self.pause_rate_bps = cfg.rate_bps.unwrap_or(DEFAULT_PAUSE_RATE_BPS);
        self.ecn = cfg.ecn.map(Marker::new);
    }

    /// Sets the most packets handed to the port at once (default: no bound).
    pub fn set_burst(&mut self, burst: usize) {
        self.burst = burst.max(1);
        if self.ready.capacity() < self.burst {
            self.ready.reserve(self.burst);
        }
    }

    /// Packets queued (ready, waiting and paused).
    #[inline]
    pub fn len(&self) -> usize {
        self.ready.len() + self.waiting.len() + self.paused_pkts
    }

    /// Nothing queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes queued.
    #[inline]
    pub fn bytes(&self) -> u64 {
        self.ready_bytes + self.waiting_bytes + self.paused_bytes
    }

    /// Queues `pkt` (`held_elsewhere`: bytes the caller holds for this port outside this
    /// queue, recorded with the depth in the histogram but not marked on: see the module's
    /// "ECN"). False when the queue already holds its limit: the packet is dropped and the
    /// caller counts it.
    #[inline]
    pub fn enqueue(&mut self, mut pkt: Pkt, now: u64, held_elsewhere: u64) -> bool {
        if self.len() >= self.limit {
            return false;
        }
        if is_network_control(pkt.data()) {
            return self.enqueue_control(pkt);
        }
        let depth = self.bytes();
        self.depths.record(depth + held_elsewhere);
        let len = pkt.len();
        let straight = self.ready.len() < self.burst
            && self.waiting.is_empty()
            && self.paused_pkts == 0
            && now >= self.pause_end
            && self.shaper.as_mut().is_none_or(|s| {
                s.refill(now);
                s.take(len)
            });
        if straight {
            // Marked where it lies, then moved once (each move of a packet through the stack
            // cost a store-forwarding stall in the forward bench's profile).
            self.mark(&mut pkt, depth);
            self.ready_bytes += len as u64;
            self.ready.push(pkt);
        } else {
            self.waiting_bytes += len as u64;
            self.waiting.push_back(pkt);
        }
        true
    }

    /// Queues a packet of network control (path probes, priority 6 or 7) ahead of what waits
    /// for the rate or a pause: it goes with the port's next burst, as a switch's strict
    /// priority queue for network control sends it (its rate is a few packets per
    /// millisecond, which the rate's tokens do not count). False when the queue already holds
    /// its limit.
    pub fn enqueue_control(&mut self, pkt: Pkt) -> bool {
        if self.len() >= self.limit {
            return false;
        }
        self.ready_bytes += pkt.len() as u64;
        self.ready.push(pkt);
        true
    }

    /// Marks `pkt` CE, if ECN-capable, with the probability `depth` gives.
    #[inline]
    fn mark(&mut self, pkt: &mut Pkt, depth: u64) {
        if let Some(m) = &self.ecn {
            if m.decide(depth, &mut self.rng) {
                if let Mark::Marked = mark_ce(pkt.data_mut()) {
                    self.counts.ecn_marked += 1;
                }
            }
        }
    }

    /// Moves what the rate and the pauses allow at `now` from waiting to ready, in order per
    /// priority, marking each on the depth it leaves behind.
    pub fn service(&mut self, now: u64) {
        if self.waiting.is_empty() && self.paused_pkts == 0 {
            return;
        }
        if let Some(s) = self.shaper.as_mut() {
            s.refill(now);
        }
        let pausing = now < self.pause_end || self.paused_pkts > 0;
        if self.paused_pkts > 0 {
            for p in 0..8 {
                if now < self.pause_until[p] {
                    continue;
                }
                while let Some(front) = self.paused[p].front() {
                    let len = front.len();
                    if self.ready.len() >= self.burst
                        || !self.shaper.as_mut().is_none_or(|s| s.take(len))
                    {
                        return;
                    }
                    if let Some(mut pkt) = self.paused[p].pop_front() {
                        self.paused_bytes -= len as u64;
                        self.paused_bytes_of[p] -= len as u64;
                        self.paused_pkts -= 1;
                        let depth = self.depth_of(p);
                        self.mark(&mut pkt, depth);
                        self.ready_bytes += len as u64;
                        self.ready.push(pkt);
                    }
                }
            }
        }
        while let Some(front) = self.waiting.front() {
            let len = front.len();
            let mut prio = None;
            if pausing {
                let p = usize::from(priority(front.data()) & 7);
                if now < self.pause_until[p] || !self.paused[p].is_empty() {
                    if let Some(pkt) = self.waiting.pop_front() {
                        self.waiting_bytes -= len as u64;
                        self.paused_bytes += len as u64;
                        self.paused_bytes_of[p] += len as u64;
                        self.paused_pkts += 1;
                        self.paused[p].push_back(pkt);
                    }
                    continue;
                }
                prio = Some(p);
            }
            if self.ready.len() >= self.burst || !self.shaper.as_mut().is_none_or(|s| s.take(len)) {
                break;
            }
            if let Some(mut pkt) = self.waiting.pop_front() {
                self.waiting_bytes -= len as u64;
                let depth = match prio {
                    Some(p) => self.depth_of(p),
                    None => self.bytes(),
                };
                self.mark(&mut pkt, depth);
                self.ready_bytes += len as u64;
                self.ready.push(pkt);
            }
        }
    }

    /// The depth a packet of priority `p` leaves behind: what is queued, less what other
    /// priorities' pauses hold (a paused class does not congest the others).
    #[inline]
    fn depth_of(&self, p: usize) -> u64 {
        self.ready_bytes + self.waiting_bytes + self.paused_bytes_of[p]
    }

    /// The port took packets from the front of `ready`. Returns the bytes that went.
    pub fn sent(&mut self) -> u64 {
        let left: u64 = self.ready.iter().map(|p| p.len() as u64).sum();
        let gone = self.ready_bytes.saturating_sub(left);
        self.ready_bytes = left;
        gone
    }

    /// When waiting packets can next move (`None`: nothing waits, or only on a pause with no
    /// end the queue knows of). A time at or before `now`: at once.
    pub fn next_event_ns(&self, now: u64) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        if self.paused_pkts > 0 {
            for p in 0..8 {
                if let Some(front) = self.paused[p].front() {
                    let end = self.pause_until[p].max(now);
                    at(self
                        .shaper
                        .as_ref()
                        .map_or(end, |s| s.ready_at(front.len()).max(end)));
                }
            }
        }
        if let Some(front) = self.waiting.front() {
            at(self
                .shaper
                .as_ref()
                .map_or(now, |s| s.ready_at(front.len())));
        }
        next
    }

    /// Takes a PAUSE or PFC frame the peer sent at `now`.
    pub fn handle_pause(&mut self, frame: &PauseFrame, now: u64) {
        match frame {
            PauseFrame::Pause { .. } => self.counts.pause_frames += 1,
            PauseFrame::Pfc { .. } => self.counts.pfc_frames += 1,
        }
        // The paused time counted so far includes the rest of the current pause: take back
        // what has not elapsed, then count the pause as it now stands.
        if self.pause_end > now {
            self.counts.paused_ns = self.counts.paused_ns.saturating_sub(self.pause_end - now);
        }
        for p in 0..8u8 {
            if let Some(q) = frame.quanta_of(p) {
                self.pause_until[usize::from(p)] = now + quanta_ns(q, self.pause_rate_bps);
            }
        }
        self.pause_end = self.pause_until.iter().copied().max().unwrap_or(0);
        if self.pause_end > now {
            self.counts.paused_ns += self.pause_end - now;
            // What a port that pushed back was handed beyond one burst waits again, in order,
            // so that the pause holds all but one burst.
            if self.ready.len() > PAUSE_SLACK_PKTS {
                let tail = self.ready.split_off(PAUSE_SLACK_PKTS);
                let bytes: u64 = tail.iter().map(|p| p.len() as u64).sum();
                self.ready_bytes -= bytes;
                self.waiting_bytes += bytes;
                for p in tail.into_iter().rev() {
                    self.waiting.push_front(p);
                }
            }
        }
    }

    /// True while some priority is paused.
    pub fn paused(&self, now: u64) -> bool {
        now < self.pause_end
    }

    /// Takes every packet out (shutdown), in queue order.
    pub fn drain_all(&mut self) -> impl Iterator<Item = Pkt> + '_ {
        self.ready_bytes = 0;
        self.waiting_bytes = 0;
        self.paused_bytes = 0;
        self.paused_pkts = 0;
        let paused = self.paused.iter_mut().flat_map(|q| q.drain(..));
        self.ready
            .drain(..)
            .chain(self.waiting.drain(..))
            .chain(paused)
    }
}

#[cfg(test)]
mod tests;
