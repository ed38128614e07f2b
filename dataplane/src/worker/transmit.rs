//! Transmit queues: where a decided packet goes (this worker's port, its reorder stage, or
//! another worker), and each port's [`EgressQueue`] (rate, ECN marks, pauses), flushed to the
//! port in bursts.

use super::{Handoff, Worker};
use crate::egress::{EgressConfig, EgressQueue};
use crate::engine::DropReason;
use crate::ids::PortId;
use crate::meta::RoceMeta;
use crate::pkt::Pkt;
use crate::port::Port;
use crate::tables::Tables;

/// A port this worker owns, with its egress queue.
pub(super) struct OwnedPort {
    pub(super) id: PortId,
    pub(super) port: Box<dyn Port>,
    pub(super) q: EgressQueue,
    /// When the oldest packet of `q.ready` came.
    pub(super) oldest_ns: u64,
    /// Bytes the reorder stage held for the port at its last flush (the depth an arriving
    /// packet adds to: read once per iteration, not per packet).
    pub(super) reorder_held_bytes: u64,
    /// Packets its last receive burst brought (fewer than a burst: its receive ring is empty).
    pub(super) rx_last: usize,
}

/// What port `id`'s egress queue does under `tables`.
pub(super) fn egress_config(tables: &Tables, id: PortId) -> EgressConfig {
    tables
        .ports
        .get(usize::from(id))
        .map(|p| EgressConfig {
            rate_bps: p.rate_bps,
            burst_bytes: p.rate_burst_bytes,
            ecn: p.ecn,
        })
        .unwrap_or_default()
}

impl Worker {
    pub(super) fn route_to(&mut self, port: PortId, pkt: Pkt, reorder: Option<RoceMeta>, now: u64) {
        if let Some(i) = self.owned_index(port) {
            // One of this worker's ports.
            match reorder {
                Some(meta) => self.queue_reorder(port, pkt, meta, now),
                None => self.enqueue_at(i, pkt, now),
            }
            return;
        }
        let owner = self
            .sh
            .owner
            .get(usize::from(port))
            .copied()
            .unwrap_or(usize::MAX);
        if owner == self.sh.id {
            if let Some(meta) = reorder {
                self.queue_reorder(port, pkt, meta, now);
            } else {
                self.enqueue_local(port, pkt, now);
            }
            return;
        }
        self.hand_off(owner, Handoff { port, reorder, pkt });
    }

    /// Queues `pkt` for the reorder stage (towards `port`, one of this worker's downlinks) when
    /// the stage wants bursts (asked once per received burst, `reorder_bursts`); a full burst
    /// goes to the stage at once. Otherwise the stage takes it now.
    #[inline]
    pub(super) fn queue_reorder(&mut self, port: PortId, pkt: Pkt, meta: RoceMeta, now: u64) {
        if !self.reorder_bursts {
            // The stage's state is in the caches: one by one costs less (after whatever is
            // queued still, which came first).
            self.reorder_queued(now);
            self.reorder
                .insert(port, pkt, &meta, now, &mut self.released);
            return;
        }
        self.to_reorder.push(port, pkt, meta);
        if self.to_reorder.len() >= self.cfg.burst {
            self.reorder_queued(now);
        }
    }

    /// Hands the packets queued for the reorder stage to it, in the order they came. Called
    /// after each received burst and hand-off batch, and before anything else asks the stage
    /// (a host's packet it judges or learns from, its timers, a flush at the end): the stage
    /// sees the same packets in the same order as if each went in alone. (What a downlink's
    /// queue reads of the bytes the stage holds, for its ECN marking, misses at most the burst
    /// being received.)
    #[inline]
    pub(super) fn reorder_queued(&mut self, now: u64) {
        if !self.to_reorder.is_empty() {
            self.reorder
                .insert_burst(&mut self.to_reorder, now, &mut self.released);
        }
    }

    /// Asks the reorder stage whether it wants bursts now, for the packets that follow; what
    /// is queued from before goes to it first.
    #[inline]
    pub(super) fn ask_reorder_bursts(&mut self, now: u64) {
        self.reorder_queued(now);
        self.reorder_bursts = self.reorder.wants_bursts();
    }

    pub(super) fn enqueue_local(&mut self, port: PortId, pkt: Pkt, now: u64) {
        match self.owned_index(port) {
            Some(i) => self.enqueue_at(i, pkt, now),
            None => self.sh.counters.count_drop(DropReason::NoRoute, 1),
        }
    }

    /// Queues `pkt` on this worker's port `ports[i]`: its egress queue holds it to the port's
    /// rate and marks it on its depth (recording the depth with what the reorder stage holds
    /// for the port).
    #[inline]
    pub(super) fn enqueue_at(&mut self, i: usize, pkt: Pkt, now: u64) {
        let Some(op) = self.ports.get_mut(i) else {
            self.sh.counters.count_drop(DropReason::NoRoute, 1);
            return;
        };
        let was_empty = op.q.ready.is_empty();
        let before = op.q.ready.len();
        if !op.q.enqueue(pkt, now, op.reorder_held_bytes) {
            self.sh.counters.count_drop(DropReason::TxQueueFull, 1);
            self.sh.port_counters[usize::from(op.id)]
                .tx_queue_drops
                .add(1);
            return;
        }
        // A capture shows a packet as it leaves: once handed to the port, marks decided.
        if self.tapping && op.q.ready.len() > before {
            if let Some(p) = op.q.ready.last() {
                self.sh.taps.tap(op.id, p, now);
            }
        }
        if was_empty {
            op.oldest_ns = now;
        }
        if op.q.ready.len() >= self.cfg.burst {
            self.flush(i, now, true);
        }
    }

    pub(super) fn flush(&mut self, i: usize, now: u64, force: bool) -> bool {
        let burst = self.cfg.burst;
        let flush_ns = self.cfg.flush_ns;
        let op = &mut self.ports[i];
        let was_empty = op.q.ready.is_empty();
        op.reorder_held_bytes = self.reorder.held_bytes_for(op.id);
        if !op.q.is_empty() {
            let before = op.q.ready.len();
            op.q.service(now);
            if self.tapping {
                for p in &op.q.ready[before..] {
                    self.sh.taps.tap(op.id, p, now);
                }
            }
        }
        if op.q.ready.is_empty() {
            return false;
        }
        if was_empty {
            op.oldest_ns = now;
        }
        let before = op.q.ready.len();
        let due = force || before >= burst || now.saturating_sub(op.oldest_ns) >= flush_ns;
        if !due {
            return false;
        }
        let sent = op.port.tx_burst(now, &mut op.q.ready);
        let bytes = op.q.sent();
        let pc = &self.sh.port_counters[usize::from(op.id)];
        pc.tx_pkts.add(sent as u64);
        pc.tx_bytes.add(bytes);
        self.sh.counters.tx_pkts.add(sent as u64);
        self.sh.counters.tx_bytes.add(bytes);
        if sent < before {
            pc.tx_busy.add(1);
        }
        if !op.q.ready.is_empty() {
            op.oldest_ns = now;
        }
        sent > 0
    }
}
