//! The switch's counter tables (see [`crate::counters`] for what a table gives): one per
//! worker, with its drops by reason and its reorder stage's totals, and one per port. The
//! control side sums the workers' into one [`Stats`] (`Switch::stats`) and prints every row of
//! each table as JSON and Prometheus text.

use crate::counters::{counter_table, Counter};
use crate::engine::DropReason;
use crate::reorder::{ReorderCounters, ReorderTotals};

counter_table! {
    /// Counters of one worker.
    atomic WorkerCounters {
        /// Drops, indexed by [`DropReason`].
        drops: [Counter; DropReason::COUNT],
        /// Reorder stage totals, published every iteration.
        reorder: ReorderCounters,
    }
    /// A snapshot of every counter of one worker, or summed over workers
    /// ([`crate::switch::Switch::stats`]).
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    plain Stats {
        /// Drops by reason (index: [`DropReason`] as usize).
        drops: [u64; DropReason::COUNT],
        /// Reorder totals.
        reorder: ReorderTotals,
        /// Per port counters (in switch-wide snapshots; empty per worker).
        ports: Vec<PortStats>,
    }
    rows {
        rx_pkts: Counter, Packets, SwitchAndWorker, "sprayswitch_rx_packets_total", "Packets received.";
        rx_bytes: Counter, Bytes, Switch, "sprayswitch_rx_bytes_total", "Bytes received.";
        tx_pkts: Counter, Packets, SwitchAndWorker, "sprayswitch_tx_packets_total", "Packets transmitted.";
        tx_bytes: Counter, Bytes, Switch, "sprayswitch_tx_bytes_total", "Bytes transmitted.";
        replies: Counter, Packets, Switch, "sprayswitch_reply_packets_total", "Packets the switch answered itself (ARP, ND, echo).";
        consumed: Counter, Packets, Switch, "sprayswitch_consumed_packets_total", "Packets the switch took for itself (ARP replies, advertisements learned from).";
        handoff_out: Counter, Packets, Switch, "sprayswitch_handoff_packets_total", "Packets handed to the worker that owns their egress port.";
        handoff_in: Counter, Packets, Worker, "sprayswitch_worker_handoff_in_packets_total", "Packets received from other workers for a port owned here.";
        resolve_sent: Counter, Count, Switch, "sprayswitch_resolve_sent_total", "ARP requests and neighbour solicitations sent.";
        parked: Counter, Packets, Switch, "sprayswitch_parked_packets_total", "Routed packets held until their next hop's address resolved (those never resolved are counted as unresolved drops).";
        sprayed: Counter, Packets, Switch, "sprayswitch_sprayed_packets_total", "RoCE packets sent over an uplink group under a spraying policy (a request that asks for responses takes its QP's hashed uplink).";
        hashed: Counter, Packets, Switch, "sprayswitch_hashed_packets_total", "Packets spread over an uplink group by flow hash.";
        fast_path: Counter, Packets, Switch, "sprayswitch_fast_path_packets_total", "Packets decided by the engine's fast path (the rest took the full path).";
        neigh_learned: Counter, Count, Switch, "sprayswitch_neighbors_learned_total", "Neighbours learned (each worker learns for itself).";
        neigh_aged: Counter, Count, Switch, "sprayswitch_neighbors_aged_total", "Learned neighbours forgotten by ageing.";
        probes_unknown: Counter, Packets, Switch, "sprayswitch_path_probe_unknown_packets_total", "Path probes that arrived from no configured peer, or on a port without path health.";
        reorder_held: Gauge, Packets, Worker, "sprayswitch_worker_reorder_held_packets", "Packets a worker's reorder stage holds now.";
        loops: Counter, Count, Worker, "sprayswitch_worker_loops_total", "Poll loop iterations of a worker.";
        idle_loops: Counter, Count, Worker, "sprayswitch_worker_idle_loops_total", "Poll loop iterations that found no work.";
        busy_ns: Counter, Count, Worker, "sprayswitch_worker_busy_nanoseconds_total", "Time a worker's poll loop spent in iterations that found work (ns; a worker running its own loop, not driven by another program).";
        idle_ns: Counter, Count, Worker, "sprayswitch_worker_idle_nanoseconds_total", "Time a worker's poll loop spent in iterations that found none, its idle waits included (ns).";
    }
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

    /// Everything this worker counted: its rows, drops and reorder totals.
    pub fn snapshot(&self) -> Stats {
        let mut s = self.read();
        for (d, c) in s.drops.iter_mut().zip(&self.drops) {
            *d = c.get();
        }
        s.reorder = self.reorder.read();
        s
    }
}

impl Stats {
    /// Adds another worker's snapshot: rows, drops and reorder totals (not ports).
    pub fn add_worker(&mut self, w: &Stats) {
        self.merge(w);
        for (d, o) in self.drops.iter_mut().zip(&w.drops) {
            *d = d.wrapping_add(*o);
        }
        self.reorder.merge(&w.reorder);
    }

    /// What was counted since `base`, an earlier snapshot of the same worker or switch:
    /// counters (rows, drops, reorder totals, each port's) count what came after it, gauges and
    /// maxima are as they are now. A port `base` does not have counts from zero.
    pub fn since(&self, base: &Stats) -> Stats {
        let mut s = self.clone();
        s.subtract(base);
        for (d, b) in s.drops.iter_mut().zip(&base.drops) {
            *d = d.saturating_sub(*b);
        }
        s.reorder.subtract(&base.reorder);
        for p in &mut s.ports {
            if let Some(b) = base.port(&p.name) {
                p.subtract(b);
            }
        }
        s
    }

    /// Drops for one reason.
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }

    /// All drops.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Counters of the port called `name`.
    pub fn port(&self, name: &str) -> Option<&PortStats> {
        self.ports.iter().find(|p| p.name == name)
    }
}

counter_table! {
    /// Counters of one port, written by the worker that owns it.
    atomic PortCounters {}
    /// Counters of one port.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    plain PortStats {
        /// Port name.
        name: String,
    }
    rows {
        rx_pkts: Counter, Packets, Port, "sprayswitch_port_rx_packets_total", "Packets received on a port.";
        tx_pkts: Counter, Packets, Port, "sprayswitch_port_tx_packets_total", "Packets transmitted on a port.";
        rx_bytes: Counter, Bytes, Port, "sprayswitch_port_rx_bytes_total", "Bytes received on a port.";
        tx_bytes: Counter, Bytes, Port, "sprayswitch_port_tx_bytes_total", "Bytes transmitted on a port.";
        tx_busy: Counter, Count, Port, "sprayswitch_port_tx_busy_total", "Times a port refused packets (ring full); they were kept and retried.";
        tx_queue_drops: Counter, Packets, Port, "sprayswitch_port_tx_queue_drop_packets_total", "Packets dropped because the switch's transmit queue for a port was full.";
        backend_drops: Counter, Packets, Port, "sprayswitch_port_backend_drop_packets_total", "Frames the port backend lost (kernel receive drops, frames too large), as the backend reports them.";
        backend_rx_dropped: Counter, Packets, Port, "sprayswitch_port_backend_rx_dropped_packets_total", "Frames dropped below the switch before they reached a ring (AF_XDP rx_dropped, DPDK imissed).";
        backend_rx_ring_full: Counter, Packets, Port, "sprayswitch_port_backend_rx_ring_full_packets_total", "Frames dropped because the port's receive ring was full (AF_XDP).";
        backend_rx_no_buffer: Counter, Count, Port, "sprayswitch_port_backend_rx_no_buffer_total", "Times a frame found no buffer (AF_XDP fill ring empty, DPDK rx_nombuf): the fill ring or pool is too small.";
        backend_invalid: Counter, Count, Port, "sprayswitch_port_backend_invalid_total", "Invalid descriptors (AF_XDP) or erroneous frames (DPDK ierrors).";
        host_naks: Counter, Packets, Downlink, "sprayswitch_host_nak_packets_total", "PSN-sequence NAKs the host behind a downlink sent: host-side trouble.";
        host_cnps: Counter, Packets, Downlink, "sprayswitch_host_cnp_packets_total", "CNPs the host behind a downlink sent (it saw ECN marks).";
        ecn_marked: Counter, Packets, Port, "sprayswitch_port_ecn_marked_packets_total", "ECN-capable packets the port's egress queue marked CE.";
        queue_bytes: Gauge, Bytes, Port, "sprayswitch_port_queue_bytes", "Bytes queued for the port now: its egress queue and, towards a host, what the reorder stage holds for it.";
        pause_frames: Counter, Count, Port, "sprayswitch_port_pause_frames_total", "802.3x PAUSE frames received from the port's peer.";
        pfc_frames: Counter, Count, Port, "sprayswitch_port_pfc_frames_total", "802.1Qbb PFC frames received from the port's peer.";
        paused_ns: Counter, Count, Port, "sprayswitch_port_paused_nanoseconds_total", "Time the port's peer kept some priority paused (ns; a pause under way counts to its end).";
        probes_tx: Counter, Packets, Uplink, "sprayswitch_path_probe_tx_packets_total", "Path probes sent over an uplink to the peer ToRs.";
        probes_rx: Counter, Packets, Uplink, "sprayswitch_path_probe_rx_packets_total", "Path probes received over an uplink from the peer ToRs.";
        path_outs: Counter, Count, Uplink, "sprayswitch_path_out_total", "Times path health took an uplink out of the spray set (dead, lossy or flapping).";
        path_state: Gauge, Count, Uplink, "sprayswitch_path_state", "An uplink's place in the spray set: 0 in, 1 in but suspect, 2 out by its health, 3 pinned out, 4 pinned in.";
        path_loss_ppm: Gauge, Count, Uplink, "sprayswitch_path_loss_ppm", "Loss of an uplink's last 64 probes towards its worst peer, parts per million.";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{Kind, Row, Unit};

    fn check(rows: &[Row]) {
        let mut names: Vec<_> = rows.iter().map(|r| r.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a field named twice");
        for r in rows {
            assert!(r.metric.starts_with("sprayswitch_"), "{}", r.metric);
            let stem = match r.kind {
                Kind::Counter => r.metric.strip_suffix("_total"),
                Kind::Gauge | Kind::Max => (!r.metric.ends_with("_total")).then_some(r.metric),
            }
            .unwrap_or_else(|| panic!("{}: the name does not fit its kind", r.metric));
            let unit_ok = match r.unit {
                Unit::Packets => stem.ends_with("_packets"),
                Unit::Bytes => stem.ends_with("_bytes"),
                Unit::Count => !stem.ends_with("_packets") && !stem.ends_with("_bytes"),
            };
            assert!(unit_ok, "{}: the name does not fit its unit", r.metric);
            assert!(r.help.ends_with('.'), "{}: help is a sentence", r.name);
        }
    }

    #[test]
    fn every_table_names_each_row_once_with_a_name_that_fits_its_kind_and_unit() {
        check(&Stats::default().rows());
        check(&PortStats::default().rows());
        check(&ReorderTotals::default().rows());
    }

    #[test]
    fn a_snapshot_reads_rows_drops_and_reorder_totals_and_sums_follow_the_kind() {
        let c = WorkerCounters::default();
        c.rx_pkts.add(3);
        c.count_drop(DropReason::NoRoute, 2);
        c.publish_reorder(&ReorderTotals {
            max_depth: 7,
            late: 1,
            ..ReorderTotals::default()
        });
        let w = c.snapshot();
        assert_eq!((w.rx_pkts, w.dropped(DropReason::NoRoute)), (3, 2));
        let mut sum = Stats::default();
        sum.add_worker(&w);
        sum.add_worker(&w);
        assert_eq!(sum.rx_pkts, 6);
        assert_eq!(sum.dropped(DropReason::NoRoute), 4);
        assert_eq!((sum.reorder.late, sum.reorder.max_depth), (2, 7));
    }
}
