//! The RoCE facts the engine hands to the reorder stage with a packet: what the engine
//! decided a packet means, in the terms the reorder stage orders by. A leaf above `wire`: the
//! engine produces these and the reorder stage consumes them, and neither imports the other
//! for it.

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
    /// From a local responder: a NAK with PSN sequence error (`psn` is what it expects next).
    HostNak,
    /// From a local responder: an RNR NAK (`psn` is the request it could not take yet, which
    /// will come again).
    HostRnrNak,
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
    /// The fabric path it arrived on: its uplink's index among the paths of uplink groups that
    /// detect loss by path order ([`NO_PATH`]: any other port, or a group that uses the
    /// timeout alone).
    pub path: u8,
    /// The path stamp it carried ([`crate::wire::stamp`]).
    pub stamp: PathStamp,
}

impl RoceMeta {
    /// What the engine hands over for a packet of QP `qp` with PSN `psn` that means `kind`:
    /// one PSN, no payload size or length known, over no path whose order counts, unstamped
    /// ([`RoceMeta::sized`] and [`RoceMeta::over`] say more where known). The one place a
    /// `RoceMeta` is built.
    #[inline]
    pub fn new(qp: QpRef, psn: Psn, kind: MetaKind) -> RoceMeta {
        RoceMeta {
            local: qp.local,
            remote: qp.remote,
            sport: qp.sport,
            qpn: qp.qpn,
            psn,
            span: 1,
            full_payload: 0,
            len: 0,
            kind,
            path: NO_PATH,
            stamp: PathStamp::NONE,
        }
    }

    /// With its size: the PSNs it consumes, its payload when a full FIRST or MIDDLE, its frame
    /// length.
    #[inline]
    pub fn sized(self, span: u32, full_payload: u16, len: u32) -> RoceMeta {
        RoceMeta {
            span,
            full_payload,
            len,
            ..self
        }
    }

    /// Arrived over fabric path `path` with `stamp`.
    #[inline]
    pub fn over(self, path: u8, stamp: PathStamp) -> RoceMeta {
        RoceMeta {
            path,
            stamp,
            ..self
        }
    }

    /// The QP it names.
    #[inline]
    pub fn qp(&self) -> QpRef {
        QpRef {
            local: self.local,
            remote: self.remote,
            sport: self.sport,
            qpn: self.qpn,
        }
    }
}

/// A QP as one packet names it: the local host, the remote host, the UDP source port (the
/// same in both directions of a QP pair), and the QPN the packet is addressed to (BTH
/// DestQP: the local QP of a packet towards a local host, the remote one of a local host's
/// own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpRef {
    /// The local host's address (`ip_key`).
    pub local: u128,
    /// The remote host's address.
    pub remote: u128,
    /// UDP source port.
    pub sport: u16,
    /// BTH DestQP.
    pub qpn: u32,
}

/// A path stamp ([`crate::wire::stamp`]) and the priority its packet travelled in: a path is
/// FIFO within a priority only (a PAUSE or PFC frame stops one priority while the others
/// pass), so stamps are compared within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PathStamp {
    /// The stamp's count, scaled to 16 bits (0: none).
    pub seq: u16,
    /// The packet's priority (VLAN PCP, else the top three bits of the DSCP).
    pub class: u8,
    /// The stamp's lane: which counter of the source ToR gave it.
    pub lane: u8,
}

impl PathStamp {
    /// No stamp.
    pub const NONE: PathStamp = PathStamp {
        seq: 0,
        class: 0,
        lane: 0,
    };

    /// The stamp as read from a packet of priority `class`, with `lane_bits` lane bits.
    pub fn read(stamp: u16, class: u8, lane_bits: u8) -> PathStamp {
        let (lane, seq) = crate::wire::stamp::split(stamp, lane_bits);
        PathStamp { seq, class, lane }
    }

    /// The counter the stamp belongs to, with the sender's address: its priority and lane.
    pub fn counter(self) -> u8 {
        (self.class & 7) | (self.lane << 3)
    }
}

/// [`RoceMeta::path`] of a packet that did not arrive on a path-order fabric path.
pub const NO_PATH: u8 = u8::MAX;

/// Paths (uplinks of path-order groups) a switch tells apart; more are treated as timeout-only.
pub const MAX_PATHS: usize = 64;
