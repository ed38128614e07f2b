//! Transmit queues: where a decided packet goes (this worker's port, its reorder stage, or
//! another worker), and the per-port buffers flushed in bursts.

use super::{Handoff, Worker};
use crate::engine::{DropReason, PortId};
use crate::meta::RoceMeta;
use crate::port::{Pkt, Port};

/// A port this worker owns, with its transmit buffer.
pub(super) struct OwnedPort {
    pub(super) id: PortId,
    pub(super) port: Box<dyn Port>,
    pub(super) txq: Vec<Pkt>,
    /// Bytes in `txq`.
    pub(super) txq_bytes: u64,
    pub(super) oldest_ns: u64,
}

impl Worker {
    pub(super) fn route_to(&mut self, port: PortId, pkt: Pkt, reorder: Option<RoceMeta>, now: u64) {
        if let Some(&i) = self.slot.get(usize::from(port)) {
            if i != usize::MAX {
                // One of this worker's ports.
                match reorder {
                    Some(meta) => self
                        .reorder
                        .insert(port, pkt, &meta, now, &mut self.released),
                    None => self.enqueue_at(i, pkt, now),
                }
                return;
            }
        }
        let owner = self
            .sh
            .owner
            .get(usize::from(port))
            .copied()
            .unwrap_or(usize::MAX);
        if owner == self.sh.id {
            if let Some(meta) = reorder {
                self.reorder
                    .insert(port, pkt, &meta, now, &mut self.released);
            } else {
                self.enqueue_local(port, pkt, now);
            }
            return;
        }
        self.hand_off(owner, Handoff { port, reorder, pkt });
    }

    pub(super) fn enqueue_local(&mut self, port: PortId, pkt: Pkt, now: u64) {
        match self.slot.get(usize::from(port)) {
            Some(&i) if i != usize::MAX => self.enqueue_at(i, pkt, now),
            _ => self.sh.counters.count_drop(DropReason::NoRoute, 1),
        }
    }

    /// Queues `pkt` on this worker's port `ports[i]`.
    #[inline]
    pub(super) fn enqueue_at(&mut self, i: usize, pkt: Pkt, now: u64) {
        let Some(op) = self.ports.get_mut(i) else {
            self.sh.counters.count_drop(DropReason::NoRoute, 1);
            return;
        };
        if op.txq.len() >= self.cfg.tx_queue_limit {
            self.sh.counters.count_drop(DropReason::TxQueueFull, 1);
            self.sh.port_counters[usize::from(op.id)]
                .tx_queue_drops
                .add(1);
            return;
        }
        if op.txq.is_empty() {
            op.oldest_ns = now;
        }
        if self.tapping {
            self.sh.taps.tap(op.id, &pkt, now);
        }
        op.txq_bytes += pkt.len() as u64;
        op.txq.push(pkt);
        if op.txq.len() >= self.cfg.burst {
            self.flush(i, now, true);
        }
    }

    pub(super) fn flush(&mut self, i: usize, now: u64, force: bool) -> bool {
        let burst = self.cfg.burst;
        let flush_ns = self.cfg.flush_ns;
        let op = &mut self.ports[i];
        if op.txq.is_empty() {
            return false;
        }
        let due = force || op.txq.len() >= burst || now.saturating_sub(op.oldest_ns) >= flush_ns;
        if !due {
            return false;
        }
        let before = op.txq.len();
        let sent = op.port.tx_burst(now, &mut op.txq);
        // What stays is usually nothing: sum it rather than what went.
        let bytes_after: u64 = op.txq.iter().map(|p| p.len() as u64).sum();
        let bytes = op.txq_bytes.saturating_sub(bytes_after);
        op.txq_bytes = bytes_after;
        let pc = &self.sh.port_counters[usize::from(op.id)];
        pc.tx_pkts.add(sent as u64);
        pc.tx_bytes.add(bytes);
        self.sh.counters.tx_pkts.add(sent as u64);
        self.sh.counters.tx_bytes.add(bytes);
        if sent < before {
            pc.tx_busy.add(1);
        }
        if !op.txq.is_empty() {
            op.oldest_ns = now;
        }
        sent > 0
    }
}
