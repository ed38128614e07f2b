//! The reorder stage on the way to a downlink.
//!
//! Routed RC and UC RoCE packets towards a downlink pass through a [`ReorderStage`] owned by the
//! worker that owns the downlink port, so that each stream's state has exactly one owner (other
//! workers hand such packets over through lock-free rings). The stage may hold packets and
//! release them later, in order; [`Passthrough`] releases everything at once.
//!
//! - [`core`]: the per-stream rings, timers, eviction and the request direction;
//! - [`response`]: READ RESPONSEs and the ACKs between them, ordered within the ranges the
//!   local requester asked for;
//! - [`pairing`]: which local QP a remote QP talks to (RDMA CM, UDP source port, PSN);
//! - [`totals`]: the counters, declared once;
//! - [`stage`]: the core over real packets, with pacing towards each downlink.

pub mod core;
pub mod pairing;
pub mod response;
pub mod stage;
pub mod totals;

pub use self::core::{Insert, ReorderConfig, ReorderCore, StreamKey, StreamStats};
pub use self::pairing::CmEvent;
pub use self::response::{HostRequest, ReadRange, ResponseKind};
pub use self::stage::ReorderEngine;
pub use self::totals::{ReorderCounters, ReorderTotals, TotalKind, TotalRow};

use crate::engine::PortId;
use crate::port::Pkt;
use crate::wire::Psn;

/// What a RoCE packet means to the reorder stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaKind {
    /// Towards a local responder (SEND, WRITE, READ REQUEST, atomics; RC or UC).
    Request {
        /// A READ REQUEST's DMA length (its PSN span follows from the QP's path MTU).
        read_len: Option<u32>,
    },
    /// Towards a local requester, filling a known PSN (READ RESPONSE, atomic ACK).
    Fill {
        /// READ RESPONSE LAST or ONLY, or an atomic ACK: the last response of its request.
        ends: bool,
    },
    /// Towards a local requester, filling nothing (ACK, NAK).
    Ack,
    /// From a local requester: a READ REQUEST of `dma_len` bytes (`span` PSNs at the path MTU
    /// the engine knows) whose responses will fill PSNs.
    HostRead {
        /// The RETH's DMA length.
        dma_len: u32,
    },
    /// From a local requester: a request answered by exactly one response PSN (atomics:
    /// ATOMIC ACKNOWLEDGE; FLUSH and ATOMIC WRITE: READ RESPONSE ONLY).
    HostSingle,
    /// From a local responder: a NAK with PSN sequence error (`psn` is what it expects next)
    /// or an RNR NAK (`psn` is the request it could not take yet, which will come again).
    HostNak,
    /// From a local responder: a READ RESPONSE FIRST or MIDDLE, whose payload
    /// (`full_payload`) is the QP's path MTU: what the READ REQUESTs it answers span.
    HostPmtu,
    /// From a local responder: an ACK through `psn`.
    HostAck,
    /// An RDMA CM REQ or REP (UD to QP1): `local`/`remote` are its sender/receiver.
    Cm {
        /// The sender is a host of this rack.
        sender_local: bool,
        /// The receiver is a host of this rack.
        receiver_local: bool,
        /// The message.
        msg: crate::wire::cm::CmMessage,
    },
}

/// The RoCE facts the engine hands to the reorder stage with a packet (or on their own, for
/// what a local host sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceMeta {
    /// The local host's address (`ip_key`): the destination of packets towards it, the source
    /// of its own.
    pub local: u128,
    /// The remote host's address.
    pub remote: u128,
    /// UDP source port (the same in both directions of a QP pair).
    pub sport: u16,
    /// BTH DestQP.
    pub qpn: u32,
    /// BTH PSN.
    pub psn: Psn,
    /// PSNs the packet consumes (READ REQUEST: `max(1, ceil(dma_len / pmtu))` at the path MTU
    /// the engine knows for the port, the largest its MTU allows unless configured).
    pub span: u32,
    /// Payload bytes of a FIRST or MIDDLE packet (exactly the QP's path MTU); 0 otherwise.
    pub full_payload: u16,
    /// Frame length.
    pub len: u32,
    /// What it is.
    pub kind: MetaKind,
}

/// A stage that may hold packets for a downlink and release them later.
pub trait ReorderStage: Send {
    /// Takes a packet bound for `egress`; appends what it releases now to `out`.
    fn insert(
        &mut self,
        egress: PortId,
        pkt: Pkt,
        meta: &RoceMeta,
        now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    );

    /// Learns from a packet a local host sent on the downlink `port` (READ requests, its NAKs
    /// and ACKs).
    fn observe(
        &mut self,
        _port: PortId,
        _meta: &RoceMeta,
        _now: u64,
        _out: &mut Vec<(PortId, Pkt)>,
    ) {
    }

    /// Releases what timers make due at `now`.
    fn poll(&mut self, now: u64, out: &mut Vec<(PortId, Pkt)>);

    /// Packets held right now.
    fn held(&self) -> usize;

    /// Totals for the counters.
    fn totals(&self) -> ReorderTotals {
        ReorderTotals::default()
    }

    /// Changes the switch-wide gap hold timeout (a stage without timers ignores it).
    fn set_hold_timeout(&mut self, _ns: u64) {}

    /// Up to `max` streams, the busiest (most held, then most released) first, for `show
    /// streams`.
    fn snapshot(&self, _max: usize) -> Vec<StreamRow> {
        Vec::new()
    }

    /// The hold-time histogram, as last published.
    fn hold_histogram(
        &self,
    ) -> Option<std::sync::Arc<std::sync::Mutex<hdrhistogram::Histogram<u64>>>> {
        None
    }
}

/// One stream as `show streams` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRow {
    /// Its key.
    pub key: StreamKey,
    /// Expected PSN.
    pub expected: Psn,
    /// Its counters.
    pub stats: StreamStats,
}

/// Releases every packet as it arrives.
#[derive(Debug, Default, Clone, Copy)]
pub struct Passthrough;

impl ReorderStage for Passthrough {
    fn insert(
        &mut self,
        egress: PortId,
        pkt: Pkt,
        _meta: &RoceMeta,
        _now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    ) {
        out.push((egress, pkt));
    }

    fn poll(&mut self, _now: u64, _out: &mut Vec<(PortId, Pkt)>) {}

    fn held(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests;
