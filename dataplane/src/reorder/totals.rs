//! The reorder stage's counters: one table (see [`crate::counters`] for what a table gives).
//! The core counts into the plain [`ReorderTotals`] and its worker publishes them through the
//! atomic [`ReorderCounters`] once per loop iteration.

use crate::counters::counter_table;

counter_table! {
    /// A worker's published copy of its reorder totals (read by the control side while the
    /// worker runs).
    atomic ReorderCounters {}
    /// Totals of one reorder core (plain integers: the owner publishes them), or their sum over
    /// workers.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    plain ReorderTotals {}
    rows {
    released_in_order: Counter, Packets, Switch, "sprayswitch_reorder_released_packets_total", "Packets released in PSN order (directly or from the ring).";
    held_total: Counter, Packets, Switch, "sprayswitch_reorder_held_packets_total", "Packets held for a gap at some point.";
    held_now: Gauge, Packets, Switch, "sprayswitch_reorder_holding_packets", "Packets held now (reorder rings, far lists, ACKs waiting behind READ responses).";
    max_depth: Max, Packets, Switch, "sprayswitch_reorder_max_depth_packets", "Most packets one stream has held at once.";
    late: Counter, Packets, Switch, "sprayswitch_reorder_late_packets_total", "Packets behind their stream's expected PSN (retransmissions, copies of released packets), released at once.";
    duplicates: Counter, Packets, Switch, "sprayswitch_reorder_duplicate_packets_total", "Copies of held packets, discarded.";
    overflows: Counter, Count, Switch, "sprayswitch_reorder_overflows_total", "Window overflows: held packets released skipping a gap to make room.";
    timeouts: Counter, Count, Switch, "sprayswitch_reorder_hold_timeouts_total", "Gaps declared lost after the hold timeout.";
    pool_give_ups: Counter, Count, Switch, "sprayswitch_reorder_pool_give_ups_total", "Gaps given up before their hold timeout because a receive pool ran low (what was held behind them released in PSN order, as a timeout does), so that the port kept receiving.";
    path_losses: Counter, Count, Switch, "sprayswitch_reorder_path_order_losses_total", "Gaps declared lost by path order: every fabric path the stream uses delivered a PSN above the gap.";
    stamp_losses: Counter, Count, Switch, "sprayswitch_reorder_stamp_losses_total", "Path-order losses where a path's proof was a later path stamp of the stream's source (another QP's packet, an ACK) rather than the stream's own PSN (counted in path_order_losses too).";
    stamp_disorder: Counter, Count, Switch, "sprayswitch_reorder_stamp_disorder_total", "Source hosts whose path stamps went backwards on a path (two stamp counters behind one address, a path that reorders, a source ToR that restarted): their stamps are not used for a second.";
    nak_releases: Counter, Packets, Switch, "sprayswitch_reorder_nak_release_packets_total", "Packets released alone, out of sequence, at a declared loss (nak_first; and towards a requester, a later response or ACK), so that the host NAKs the gap or retries the request.";
    naked_gaps_kept: Counter, Count, Switch, "sprayswitch_reorder_naked_gaps_kept_total", "Hold timeouts of a gap the Go-Back-N host had NAKed (nak_first): what was held went out, the expected PSN stayed at the gap, so that the sender's next pass (after its retransmission timer) is ordered too.";
    resyncs: Counter, Count, Switch, "sprayswitch_reorder_resyncs_total", "Expected PSNs moved by the host's sequence or RNR NAKs.";
    ack_advances: Counter, Count, Switch, "sprayswitch_reorder_ack_advances_total", "Expected PSNs moved forward by the host's ACKs.";
    restarts: Counter, Count, Switch, "sprayswitch_reorder_restarts_total", "Streams started over at a PSN far from the expected one (a QP re-created with its QPN, a stream back from idle).";
    evictions: Counter, Count, Switch, "sprayswitch_reorder_evictions_total", "Idle streams forgotten.";
    passthrough: Counter, Packets, Switch, "sprayswitch_reorder_passthrough_packets_total", "Packets passed on unreordered (nothing to order them against, or no room).";
    table_full: Counter, Packets, Switch, "sprayswitch_reorder_table_full_packets_total", "Packets not reordered because the stream table was full.";
    no_room: Counter, Packets, Switch, "sprayswitch_reorder_no_room_packets_total", "Packets not held because no ring or byte budget was left.";
    slot_collisions: Counter, Packets, Switch, "sprayswitch_reorder_slot_collision_packets_total", "Packets not held because their ring slot held a PSN one window apart.";
    learned: Counter, Count, Switch, "sprayswitch_reorder_learned_total", "Streams that chose their starting PSN by learning.";
    learned_by_paths: Counter, Count, Switch, "sprayswitch_reorder_learned_by_paths_total", "Streams whose learning ended before its window: every path-order fabric path that is up (after 1024 packets, every one the stream uses) had delivered a packet of the stream or a later path stamp of its source, so nothing below the lowest PSN held could still come (counted in learned_total too).";
    cm_learned: Counter, Count, Switch, "sprayswitch_reorder_cm_learned_total", "QP pairings and starting PSNs learned from RDMA CM exchanges.";
    cm_repeated: Counter, Count, Switch, "sprayswitch_reorder_cm_repeated_total", "CM REQs seen again after their REP (the active side's MAD retry: same communication ID, QPN and starting PSN): ignored, so that a REP sent again for the same connection does not start its streams over.";
    pairs_hinted: Counter, Count, Switch, "sprayswitch_reorder_pairs_hinted_total", "QP pairings learned from the UDP source port or the PSN (no CM exchange seen).";
    pairs_ambiguous: Counter, Packets, Switch, "sprayswitch_reorder_pairs_ambiguous_packets_total", "Packets whose QP pairing could not be told apart (left unapplied).";
    host_naks_ignored: Counter, Packets, Switch, "sprayswitch_reorder_host_naks_ignored_packets_total", "Host NAKs and ACKs ignored: no stream, or a PSN too far from the stream's.";
    naks_filtered: Counter, Packets, Switch, "sprayswitch_reorder_naks_filtered_packets_total", "Host sequence NAKs a nak_filter downlink did not let through at once: the PSN named was still on its way over a slower path (kept back: discarded when it came, or sent on at a declared loss, counted in naks_sent_on) or had just been forwarded after a later one (dropped).";
    naks_passed: Counter, Packets, Switch, "sprayswitch_reorder_naks_passed_packets_total", "Host sequence NAKs a nak_filter downlink let through at once: a PSN declared lost, one the host must have lost itself, or a stream it could not judge (counted in naks_unjudged too).";
    naks_unjudged: Counter, Packets, Switch, "sprayswitch_reorder_naks_unjudged_packets_total", "Host sequence NAKs passed without a judgement: no stream (evicted, table full), a pairing that could not be told apart, or a PSN the stream never forwarded.";
    read_retries_filtered: Counter, Packets, Switch, "sprayswitch_reorder_read_retries_filtered_packets_total", "READ requests a host on a nak_filter downlink sent again for a response still on its way (a later one overtook it: kept back) or just forwarded after a later one (dropped).";
    naks_sent_on: Counter, Packets, Switch, "sprayswitch_reorder_naks_sent_on_packets_total", "NAKs and READ retries a nak_filter downlink had kept back and sent on later: the PSN was declared lost (path order, timeout, overflow) or the stream was forgotten.";
    naks_resolved: Counter, Packets, Switch, "sprayswitch_reorder_naks_resolved_packets_total", "NAKs and READ retries a nak_filter downlink had kept back and discarded: the packet or response they asked for came (or the host ACKed past it).";
    reads_registered: Counter, Count, Switch, "sprayswitch_reorder_reads_registered_total", "READ, atomic and FLUSH requests of local hosts whose responses are ordered.";
    read_retries_seen: Counter, Count, Switch, "sprayswitch_reorder_read_retries_seen_total", "READ requests of local hosts that asked again for PSNs already asked for (retries).";
    reads_untracked: Counter, Count, Switch, "sprayswitch_reorder_reads_untracked_total", "READ requests not tracked because the stream had max_reads outstanding.";
    acks_held: Counter, Packets, Switch, "sprayswitch_reorder_acks_held_packets_total", "ACKs and NAKs held behind a missing READ response.";
    stale_acks: Counter, Packets, Switch, "sprayswitch_reorder_stale_ack_packets_total", "ACKs and NAKs of a QP's earlier PSN sequence (it was re-created) discarded: the new QP would take them as a lost READ.";
    streams: Gauge, Count, Switch, "sprayswitch_reorder_streams", "Streams tracked now.";
    peak_streams: Max, Count, Switch, "sprayswitch_reorder_peak_streams", "Most streams one worker's stage has tracked at once.";
    peak_path_skew_ns: Max, Count, Switch, "sprayswitch_reorder_peak_path_skew_nanoseconds", "The longest a gap stayed open before its own packet (not a retransmission) filled it: the largest skew the fabric's paths have shown, queues included.";
    peak_held_bytes: Max, Bytes, Switch, "sprayswitch_reorder_peak_held_bytes", "Most bytes one worker's stage has held at once (rings and waiting ACKs).";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_follows_the_kind_and_publish_round_trips() {
        let mut a = ReorderTotals {
            late: 2,
            max_depth: 5,
            streams: 1,
            ..ReorderTotals::default()
        };
        let b = ReorderTotals {
            late: 3,
            max_depth: 4,
            streams: 2,
            ..ReorderTotals::default()
        };
        a.merge(&b);
        assert_eq!((a.late, a.max_depth, a.streams), (5, 5, 3));
        // Names, kinds and units of the rows: `stats.rs`'s table test checks every table.
        assert!(a.rows().iter().any(|r| r.name == "cm_learned"));
        let c = ReorderCounters::default();
        c.publish(&a);
        assert_eq!(c.read(), a);
    }
}
