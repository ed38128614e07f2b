//! Per-worker and per-port counters. Each counter has exactly one writer (the worker that owns
//! it), which increments with a relaxed load and store (no read-modify-write instruction);
//! anyone may read with a relaxed load. Groups are cache-padded so that workers never share a
//! cache line.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::DropReason;
use crate::reorder::{ReorderCounters, ReorderTotals};

/// A single-writer counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this: load and store are both relaxed, which is
    /// exact with one writer and lets readers see a recent value without stopping it.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Sets the value (gauges).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Reads the value (relaxed: a statistic).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters of one worker.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Packets received on its ports.
    pub rx_pkts: Counter,
    /// Bytes received on its ports.
    pub rx_bytes: Counter,
    /// Packets transmitted on its ports.
    pub tx_pkts: Counter,
    /// Bytes transmitted on its ports.
    pub tx_bytes: Counter,
    /// Drops, indexed by [`DropReason`].
    pub drops: [Counter; DropReason::COUNT],
    /// Packets answered by the switch itself (ARP, ND, echo).
    pub replies: Counter,
    /// Packets taken by the switch (ARP replies, advertisements learned from).
    pub consumed: Counter,
    /// Packets handed to another worker that owns the egress port.
    pub handoff_out: Counter,
    /// Packets received from other workers for a port owned here.
    pub handoff_in: Counter,
    /// ARP requests / neighbour solicitations sent.
    pub resolve_sent: Counter,
    /// Routed packets held until their next hop's address resolved (then sent on; those whose
    /// neighbour never answered are counted as `unresolved` drops).
    pub parked: Counter,
    /// RoCE packets spread by the spray policy.
    pub sprayed: Counter,
    /// Packets spread over a group by flow hash.
    pub hashed: Counter,
    /// Packets the engine's fast path decided (the rest took the full path).
    pub fast_path: Counter,
    /// Neighbours learned.
    pub neigh_learned: Counter,
    /// Learned neighbours forgotten by ageing.
    pub neigh_aged: Counter,
    /// Packets in the reorder stage now (gauge).
    pub reorder_held: Counter,
    /// Reorder stage totals, published every iteration.
    pub reorder: ReorderCounters,
    /// Loop iterations.
    pub loops: Counter,
    /// Iterations that found no work.
    pub idle_loops: Counter,
}

impl WorkerCounters {
    /// Publishes reorder totals (the stage keeps plain integers; this copies them).
    pub fn publish_reorder(&self, t: &ReorderTotals) {
        self.reorder.publish(t);
    }

    /// Counts a drop.
    #[inline]
    pub fn count_drop(&self, r: DropReason, n: u64) {
        self.drops[r as usize].add(n);
    }

    /// Total drops.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }
}

/// Counters of one port, written by the worker that owns it.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Packets received.
    pub rx_pkts: Counter,
    /// Bytes received.
    pub rx_bytes: Counter,
    /// Packets transmitted.
    pub tx_pkts: Counter,
    /// Bytes transmitted.
    pub tx_bytes: Counter,
    /// Times the port refused packets (ring full); they were kept and retried.
    pub tx_busy: Counter,
    /// Packets dropped because the port's transmit queue in the switch was full.
    pub tx_queue_drops: Counter,
    /// NAKs (PSN sequence error) the host behind this downlink sent: host-side trouble.
    pub host_naks: Counter,
    /// CNPs the host behind this downlink sent (it saw ECN marks).
    pub host_cnps: Counter,
    /// Frames the port backend lost (kernel receive drops, frames too large), as the backend
    /// reports them.
    pub backend_drops: Counter,
}
