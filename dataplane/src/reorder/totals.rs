//! The reorder stage's counters, declared once.
//!
//! One table below names every total a reorder core keeps: its field, its kind (a counter that
//! only grows, a gauge that is a current value, or a maximum), the name it is exported under
//! and its help text. From it come the plain [`ReorderTotals`] the core counts into, the
//! atomic [`ReorderCounters`] a worker publishes them through, the sum the control side makes
//! over workers ([`ReorderTotals::merge`]), and the rows the control plane prints as JSON and
//! Prometheus text ([`ReorderTotals::rows`]). Adding a counter is one line here.

use crate::counters::Counter;

/// How a total combines over workers and how it is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TotalKind {
    /// Only grows; summed over workers; exported as `sprayswitch_reorder_<name>_total`.
    Counter,
    /// A current value; summed over workers; exported as `sprayswitch_reorder_<name>`.
    Gauge,
    /// The largest value seen; the maximum over workers; exported as a gauge.
    Max,
}

/// One row of the table with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TotalRow {
    /// Field name (the JSON key of `show counters`).
    pub name: &'static str,
    /// Exported name without the `sprayswitch_reorder_` prefix and the `_total` suffix.
    pub metric: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Its kind.
    pub kind: TotalKind,
    /// Its value.
    pub value: u64,
}

macro_rules! reorder_totals {
    ($( $name:ident : $kind:ident, $metric:literal, $help:literal; )*) => {
        /// Totals of one reorder core (plain integers: the owner publishes them), or their sum
        /// over workers. The fields are the table in `reorder/totals.rs`.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct ReorderTotals {
            $( #[doc = $help] pub $name: u64, )*
        }

        impl ReorderTotals {
            /// Every total with its name, kind and help, in the table's order.
            pub fn rows(&self) -> Vec<TotalRow> {
                vec![$( TotalRow {
                    name: stringify!($name),
                    metric: $metric,
                    help: $help,
                    kind: TotalKind::$kind,
                    value: self.$name,
                }, )*]
            }

            /// Adds `other` (another worker's totals): counters and gauges add, maxima take the
            /// larger.
            pub fn merge(&mut self, other: &ReorderTotals) {
                $( self.$name = match TotalKind::$kind {
                    TotalKind::Max => self.$name.max(other.$name),
                    TotalKind::Counter | TotalKind::Gauge => self.$name.wrapping_add(other.$name),
                }; )*
            }
        }

        /// A worker's published copy of its reorder totals (read by the control side while the
        /// worker runs).
        #[derive(Debug, Default)]
        pub struct ReorderCounters {
            $( #[doc = $help] pub $name: Counter, )*
        }

        impl ReorderCounters {
            /// Publishes `t` (the owner calls this once per loop iteration).
            pub fn publish(&self, t: &ReorderTotals) {
                $( self.$name.set(t.$name); )*
            }

            /// The published values.
            pub fn read(&self) -> ReorderTotals {
                ReorderTotals { $( $name: self.$name.get(), )* }
            }
        }
    };
}

reorder_totals! {
    released_in_order: Counter, "released_in_order", "Packets released in PSN order (directly or from the ring).";
    held_total: Counter, "held", "Packets held for a gap at some point.";
    held_now: Gauge, "held_packets", "Packets held now (reorder rings, ACKs waiting behind READ responses, pacing queues).";
    max_depth: Max, "max_depth_packets", "Most packets one stream has held at once.";
    late: Counter, "late", "Packets behind their stream's expected PSN (retransmissions, copies of released packets), released at once.";
    duplicates: Counter, "duplicates", "Copies of held packets, discarded.";
    overflows: Counter, "overflows", "Window overflows: held packets released skipping a gap to make room.";
    timeouts: Counter, "hold_timeouts", "Gaps declared lost after the hold timeout.";
    resyncs: Counter, "resyncs", "Expected PSNs moved by the host's sequence or RNR NAKs.";
    ack_advances: Counter, "ack_advances", "Expected PSNs moved forward by the host's ACKs.";
    restarts: Counter, "restarts", "Streams started over at a PSN far from the expected one (a QP re-created with its QPN, a stream back from idle).";
    evictions: Counter, "evictions", "Idle streams forgotten.";
    passthrough: Counter, "passthrough", "Packets passed on unreordered (nothing to order them against, or no room).";
    table_full: Counter, "table_full", "Packets not reordered because the stream table was full.";
    no_room: Counter, "no_room", "Packets not held because no ring or byte budget was left.";
    slot_collisions: Counter, "slot_collisions", "Packets not held because their ring slot held a PSN one window apart.";
    pacing_drops: Counter, "pacing_drops", "Packets dropped because a downlink's pacing queue was full.";
    learned: Counter, "learned", "Streams that chose their starting PSN by learning.";
    cm_learned: Counter, "cm_learned", "QP pairings and starting PSNs learned from RDMA CM exchanges.";
    pairs_hinted: Counter, "pairs_hinted", "QP pairings learned from the UDP source port or the PSN (no CM exchange seen).";
    pairs_ambiguous: Counter, "pairs_ambiguous", "Packets whose QP pairing could not be told apart (left unapplied).";
    host_naks_ignored: Counter, "host_naks_ignored", "Host NAKs and ACKs ignored: no stream, or a PSN too far from the stream's.";
    reads_registered: Counter, "reads_registered", "READ, atomic and FLUSH requests of local hosts whose responses are ordered.";
    read_retries_seen: Counter, "read_retries_seen", "READ requests of local hosts that asked again for PSNs already asked for (retries).";
    reads_untracked: Counter, "reads_untracked", "READ requests not tracked because the stream had max_reads outstanding.";
    acks_held: Counter, "acks_held", "ACKs and NAKs held behind a missing READ response.";
    streams: Gauge, "streams", "Streams tracked now.";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_name_every_field_once_and_merge_follows_the_kind() {
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
        let rows = a.rows();
        let mut names: Vec<_> = rows.iter().map(|r| r.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a field named twice");
        assert!(rows.iter().any(|r| r.name == "cm_learned"));
        let c = ReorderCounters::default();
        c.publish(&a);
        assert_eq!(c.read(), a);
    }
}
