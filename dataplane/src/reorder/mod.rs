//! The reorder stage on the way to a downlink.
//!
//! Routed RC and UC RoCE packets towards a downlink pass through a [`ReorderStage`] owned by the
//! worker that owns the downlink port, so that each stream's state has exactly one owner (other
//! workers hand such packets over through lock-free rings). The stage may hold packets and
//! release them later, in order; [`Passthrough`] releases everything at once. The per-QP
//! reorder engine plugs in here.

pub mod core;

pub use self::core::{
    Insert, ReorderConfig, ReorderCore, ReorderTotals, ResponseKind, StreamKey, StreamStats,
};

use crate::engine::PortId;
use crate::port::Pkt;

/// A stage that may hold packets for a downlink and release them later.
pub trait ReorderStage: Send {
    /// Takes a packet bound for `egress`; appends what it releases now to `out`.
    fn insert(&mut self, egress: PortId, pkt: Pkt, now: u64, out: &mut Vec<(PortId, Pkt)>);

    /// Releases what timers make due at `now`.
    fn poll(&mut self, now: u64, out: &mut Vec<(PortId, Pkt)>);

    /// Packets held right now.
    fn held(&self) -> usize;
}

/// Releases every packet as it arrives.
#[derive(Debug, Default, Clone, Copy)]
pub struct Passthrough;

impl ReorderStage for Passthrough {
    fn insert(&mut self, egress: PortId, pkt: Pkt, _now: u64, out: &mut Vec<(PortId, Pkt)>) {
        out.push((egress, pkt));
    }

    fn poll(&mut self, _now: u64, _out: &mut Vec<(PortId, Pkt)>) {}

    fn held(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests;
