//! BTH opcodes: names, transport classes, the extension headers each carries, and the stream
//! direction (request or response) that the reorder engine keys on.
//!
//! The high 3 bits select the transport (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80), the low
//! 5 bits the operation. Header layouts follow IBTA vol. 1 table 38 and the Linux Soft-RoCE
//! opcode table.

enum_with_unknown! {
    /// A BTH opcode. Unassigned and unsupported values (including every RD opcode) are `Unknown`.
    pub enum Opcode(u8) {
        /// RC SEND First.
        RcSendFirst = 0x00,
        /// RC SEND Middle.
        RcSendMiddle = 0x01,
        /// RC SEND Last.
        RcSendLast = 0x02,
        /// RC SEND Last with Immediate.
        RcSendLastImm = 0x03,
        /// RC SEND Only.
        RcSendOnly = 0x04,
        /// RC SEND Only with Immediate.
        RcSendOnlyImm = 0x05,
        /// RC RDMA WRITE First.
        RcWriteFirst = 0x06,
        /// RC RDMA WRITE Middle.
        RcWriteMiddle = 0x07,
        /// RC RDMA WRITE Last.
        RcWriteLast = 0x08,
        /// RC RDMA WRITE Last with Immediate.
        RcWriteLastImm = 0x09,
        /// RC RDMA WRITE Only.
        RcWriteOnly = 0x0A,
        /// RC RDMA WRITE Only with Immediate.
        RcWriteOnlyImm = 0x0B,
        /// RC RDMA READ Request.
        RcReadRequest = 0x0C,
        /// RC RDMA READ Response First.
        RcReadResponseFirst = 0x0D,
        /// RC RDMA READ Response Middle.
        RcReadResponseMiddle = 0x0E,
        /// RC RDMA READ Response Last.
        RcReadResponseLast = 0x0F,
        /// RC RDMA READ Response Only.
        RcReadResponseOnly = 0x10,
        /// RC Acknowledge (ACK or NAK, by the AETH syndrome).
        RcAcknowledge = 0x11,
        /// RC Atomic Acknowledge.
        RcAtomicAcknowledge = 0x12,
        /// RC CmpSwap.
        RcCompareSwap = 0x13,
        /// RC FetchAdd.
        RcFetchAdd = 0x14,
        /// RC SEND Last with Invalidate.
        RcSendLastInv = 0x16,
        /// RC SEND Only with Invalidate.
        RcSendOnlyInv = 0x17,
        /// RC FLUSH.
        RcFlush = 0x1C,
        /// RC ATOMIC WRITE.
        RcAtomicWrite = 0x1D,
        /// UC SEND First.
        UcSendFirst = 0x20,
        /// UC SEND Middle.
        UcSendMiddle = 0x21,
        /// UC SEND Last.
        UcSendLast = 0x22,
        /// UC SEND Last with Immediate.
        UcSendLastImm = 0x23,
        /// UC SEND Only.
        UcSendOnly = 0x24,
        /// UC SEND Only with Immediate.
        UcSendOnlyImm = 0x25,
        /// UC RDMA WRITE First.
        UcWriteFirst = 0x26,
        /// UC RDMA WRITE Middle.
        UcWriteMiddle = 0x27,
        /// UC RDMA WRITE Last.
        UcWriteLast = 0x28,
        /// UC RDMA WRITE Last with Immediate.
        UcWriteLastImm = 0x29,
        /// UC RDMA WRITE Only.
        UcWriteOnly = 0x2A,
        /// UC RDMA WRITE Only with Immediate.
        UcWriteOnlyImm = 0x2B,
        /// UD SEND Only.
        UdSendOnly = 0x64,
        /// UD SEND Only with Immediate.
        UdSendOnlyImm = 0x65,
        /// RoCEv2 Congestion Notification Packet.
        Cnp = 0x81,
    }
}

enum_with_unknown! {
    /// Transport class: the high 3 bits of the opcode.
    pub enum Transport(u8) {
        /// Reliable Connected.
        Rc = 0x00,
        /// Unreliable Connected.
        Uc = 0x20,
        /// Reliable Datagram (not used by RoCE stacks; not parsed beyond the BTH).
        Rd = 0x40,
        /// Unreliable Datagram.
        Ud = 0x60,
        /// Congestion notification (RoCEv2 CNP).
        Cnp = 0x80,
    }
}

/// Which PSN space a packet belongs to.
///
/// *Request* packets (SEND, WRITE, READ REQUEST, atomics, FLUSH) carry the remote requester's
/// PSNs; *response* packets (READ RESPONSE, ACK, atomic ACK) carry the local requester's. One RC
/// QP carries both at once and they must never share a reorder stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Requester to responder.
    Request,
    /// Responder to requester.
    Response,
}

/// Where a packet sits in a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Segment {
    /// First packet of a multi-packet message.
    First,
    /// A middle packet.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// A whole message in one packet (also every READ REQUEST, ACK, atomic and CNP).
    Only,
}

/// Which extension headers follow the BTH, in wire order: DETH, FETH, RETH, AtomicETH, AETH,
/// AtomicAckETH, ImmDt, IETH; then the payload. A CNP instead carries 16 reserved bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtLayout {
    /// Datagram extended transport header (UD).
    pub deth: bool,
    /// Flush extended transport header (FLUSH).
    pub feth: bool,
    /// RDMA extended transport header.
    pub reth: bool,
    /// Atomic extended transport header.
    pub atomic_eth: bool,
    /// ACK extended transport header.
    pub aeth: bool,
    /// Atomic ACK extended transport header.
    pub atomic_ack_eth: bool,
    /// Immediate data.
    pub immdt: bool,
    /// Invalidate extended transport header.
    pub ieth: bool,
    /// The 16 reserved bytes of a RoCEv2 CNP.
    pub cnp_reserved: bool,
    /// Whether the opcode may carry a payload after the headers.
    pub payload: bool,
}

impl ExtLayout {
    /// Total length of the extension headers in bytes.
    pub const fn len(&self) -> usize {
        (self.deth as usize) * 8
            + (self.feth as usize) * 4
            + (self.reth as usize) * 16
            + (self.atomic_eth as usize) * 28
            + (self.aeth as usize) * 4
            + (self.atomic_ack_eth as usize) * 8
            + (self.immdt as usize) * 4
            + (self.ieth as usize) * 4
            + (self.cnp_reserved as usize) * 16
    }

    /// True when no extension header follows the BTH.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Byte offset of the RETH from the end of the BTH, when present.
    pub const fn reth_offset(&self) -> Option<usize> {
        if self.reth {
            Some((self.deth as usize) * 8 + (self.feth as usize) * 4)
        } else {
            None
        }
    }

    /// Byte offset of the AETH from the end of the BTH, when present.
    pub const fn aeth_offset(&self) -> Option<usize> {
        if self.aeth {
            Some(
                (self.deth as usize) * 8
                    + (self.feth as usize) * 4
                    + (self.reth as usize) * 16
                    + (self.atomic_eth as usize) * 28,
            )
        } else {
            None
        }
    }

    /// Byte offset of the AtomicETH from the end of the BTH, when present.
    pub const fn atomic_eth_offset(&self) -> Option<usize> {
        if self.atomic_eth {
            Some((self.deth as usize) * 8 + (self.feth as usize) * 4 + (self.reth as usize) * 16)
        } else {
            None
        }
    }

    /// Byte offset of the AtomicAckETH from the end of the BTH, when present.
    pub const fn atomic_ack_eth_offset(&self) -> Option<usize> {
        match self.aeth_offset() {
            Some(a) if self.atomic_ack_eth => Some(a + 4),
            _ => None,
        }
    }

    /// Byte offset of the ImmDt from the end of the BTH, when present.
    pub const fn immdt_offset(&self) -> Option<usize> {
        if self.immdt {
            Some(self.len() - 4 - (self.ieth as usize) * 4)
        } else {
            None
        }
    }

    /// Byte offset of the IETH from the end of the BTH, when present.
    pub const fn ieth_offset(&self) -> Option<usize> {
        if self.ieth {
            Some(self.len() - 4)
        } else {
            None
        }
    }

    /// Byte offset of the DETH from the end of the BTH, when present (always 0).
    pub const fn deth_offset(&self) -> Option<usize> {
        if self.deth {
            Some(0)
        } else {
            None
        }
    }

    /// Byte offset of the FETH from the end of the BTH, when present.
    pub const fn feth_offset(&self) -> Option<usize> {
        if self.feth {
            Some(self.deth as usize * 8)
        } else {
            None
        }
    }
}

const fn layout() -> ExtLayout {
    ExtLayout {
        deth: false,
        feth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        immdt: false,
        ieth: false,
        cnp_reserved: false,
        payload: false,
    }
}

impl Opcode {
    /// The transport class (high 3 bits), also for unknown opcodes.
    #[inline]
    pub fn transport(self) -> Transport {
        Transport::from(u8::from(self) & 0xE0)
    }

    /// The operation bits with the transport stripped, so that RC and UC share one match.
    #[inline]
    fn op(self) -> u8 {
        u8::from(self) & 0x1F
    }

    /// The extension headers this opcode carries, or `None` for an unknown opcode (whose layout,
    /// and so whose payload offset, cannot be known).
    pub fn layout(self) -> Option<ExtLayout> {
        let l = layout();
        let with_payload = ExtLayout { payload: true, ..l };
        Some(match self {
            Opcode::Unknown(_) => return None,
            Opcode::Cnp => ExtLayout {
                cnp_reserved: true,
                ..l
            },
            Opcode::UdSendOnly => ExtLayout {
                deth: true,
                ..with_payload
            },
            Opcode::UdSendOnlyImm => ExtLayout {
                deth: true,
                immdt: true,
                ..with_payload
            },
            // RC and UC share the SEND and WRITE layouts.
            _ => match self.op() {
                0x00..=0x02 | 0x04 | 0x07 | 0x08 => with_payload,
                0x03 | 0x05 | 0x09 => ExtLayout {
                    immdt: true,
                    ..with_payload
                },
                0x06 | 0x0A => ExtLayout {
                    reth: true,
                    ..with_payload
                },
                0x0B => ExtLayout {
                    reth: true,
                    immdt: true,
                    ..with_payload
                },
                0x0C => ExtLayout { reth: true, ..l },
                0x0D | 0x0F | 0x10 => ExtLayout {
                    aeth: true,
                    ..with_payload
                },
                0x0E => with_payload,
                0x11 => ExtLayout { aeth: true, ..l },
                0x12 => ExtLayout {
                    aeth: true,
                    atomic_ack_eth: true,
                    ..l
                },
                0x13 | 0x14 => ExtLayout {
                    atomic_eth: true,
                    ..l
                },
                0x16 | 0x17 => ExtLayout {
                    ieth: true,
                    ..with_payload
                },
                0x1C => ExtLayout {
                    feth: true,
                    reth: true,
                    ..l
                },
                // ATOMIC WRITE: RETH and an 8-byte payload.
                0x1D => ExtLayout {
                    reth: true,
                    ..with_payload
                },
                _ => return None,
            },
        })
    }

    /// The stream direction, or `None` for a CNP or an unknown opcode.
    pub fn direction(self) -> Option<Direction> {
        match self {
            Opcode::Unknown(_) | Opcode::Cnp => None,
            _ if self.is_response() => Some(Direction::Response),
            _ => Some(Direction::Request),
        }
    }

    /// True for READ RESPONSE, ACKNOWLEDGE and ATOMIC ACKNOWLEDGE.
    #[inline]
    pub fn is_response(self) -> bool {
        self.transport() == Transport::Rc && matches!(self.op(), 0x0D..=0x12)
    }

    /// True for the four READ RESPONSE opcodes.
    #[inline]
    pub fn is_read_response(self) -> bool {
        matches!(
            self,
            Opcode::RcReadResponseFirst
                | Opcode::RcReadResponseMiddle
                | Opcode::RcReadResponseLast
                | Opcode::RcReadResponseOnly
        )
    }

    /// True for requests that the responder answers with an atomic ACK (CmpSwap, FetchAdd).
    #[inline]
    pub fn is_atomic(self) -> bool {
        matches!(self, Opcode::RcCompareSwap | Opcode::RcFetchAdd)
    }

    /// True for requests that the responder answers with responses of their own PSNs (READ
    /// RESPONSEs or an ATOMIC ACKNOWLEDGE): RDMA READ, the atomics, FLUSH and ATOMIC WRITE.
    /// They carry no data worth spreading, and a retry of several replays in the order they
    /// arrive.
    #[inline]
    pub fn asks_for_responses(self) -> bool {
        matches!(
            self,
            Opcode::RcReadRequest | Opcode::RcFlush | Opcode::RcAtomicWrite
        ) || self.is_atomic()
    }

    /// Where the packet sits in its message.
    pub fn segment(self) -> Segment {
        if matches!(self, Opcode::Unknown(_) | Opcode::Cnp) {
            return Segment::Only;
        }
        match self.op() {
            0x00 | 0x06 | 0x0D => Segment::First,
            0x01 | 0x07 | 0x0E => Segment::Middle,
            0x02 | 0x03 | 0x08 | 0x09 | 0x0F | 0x16 => Segment::Last,
            _ => Segment::Only,
        }
    }

    /// A short human name, as the capture decoder prints it (for example `RC_WRITE_FIRST`).
    pub fn name(self) -> &'static str {
        match self {
            Opcode::RcSendFirst => "RC_SEND_FIRST",
            Opcode::RcSendMiddle => "RC_SEND_MIDDLE",
            Opcode::RcSendLast => "RC_SEND_LAST",
            Opcode::RcSendLastImm => "RC_SEND_LAST_IMM",
            Opcode::RcSendOnly => "RC_SEND_ONLY",
            Opcode::RcSendOnlyImm => "RC_SEND_ONLY_IMM",
            Opcode::RcWriteFirst => "RC_WRITE_FIRST",
            Opcode::RcWriteMiddle => "RC_WRITE_MIDDLE",
            Opcode::RcWriteLast => "RC_WRITE_LAST",
            Opcode::RcWriteLastImm => "RC_WRITE_LAST_IMM",
            Opcode::RcWriteOnly => "RC_WRITE_ONLY",
            Opcode::RcWriteOnlyImm => "RC_WRITE_ONLY_IMM",
            Opcode::RcReadRequest => "RC_READ_REQUEST",
            Opcode::RcReadResponseFirst => "RC_READ_RESPONSE_FIRST",
            Opcode::RcReadResponseMiddle => "RC_READ_RESPONSE_MIDDLE",
            Opcode::RcReadResponseLast => "RC_READ_RESPONSE_LAST",
            Opcode::RcReadResponseOnly => "RC_READ_RESPONSE_ONLY",
            Opcode::RcAcknowledge => "RC_ACK",
            Opcode::RcAtomicAcknowledge => "RC_ATOMIC_ACK",
            Opcode::RcCompareSwap => "RC_COMPARE_SWAP",
            Opcode::RcFetchAdd => "RC_FETCH_ADD",
            Opcode::RcSendLastInv => "RC_SEND_LAST_INV",
            Opcode::RcSendOnlyInv => "RC_SEND_ONLY_INV",
            Opcode::RcFlush => "RC_FLUSH",
            Opcode::RcAtomicWrite => "RC_ATOMIC_WRITE",
            Opcode::UcSendFirst => "UC_SEND_FIRST",
            Opcode::UcSendMiddle => "UC_SEND_MIDDLE",
            Opcode::UcSendLast => "UC_SEND_LAST",
            Opcode::UcSendLastImm => "UC_SEND_LAST_IMM",
            Opcode::UcSendOnly => "UC_SEND_ONLY",
            Opcode::UcSendOnlyImm => "UC_SEND_ONLY_IMM",
            Opcode::UcWriteFirst => "UC_WRITE_FIRST",
            Opcode::UcWriteMiddle => "UC_WRITE_MIDDLE",
            Opcode::UcWriteLast => "UC_WRITE_LAST",
            Opcode::UcWriteLastImm => "UC_WRITE_LAST_IMM",
            Opcode::UcWriteOnly => "UC_WRITE_ONLY",
            Opcode::UcWriteOnlyImm => "UC_WRITE_ONLY_IMM",
            Opcode::UdSendOnly => "UD_SEND_ONLY",
            Opcode::UdSendOnlyImm => "UD_SEND_ONLY_IMM",
            Opcode::Cnp => "CNP",
            Opcode::Unknown(_) => "UNKNOWN",
        }
    }

    /// Every named opcode, for tests and tools.
    pub const ALL: [Opcode; 40] = [
        Opcode::RcSendFirst,
        Opcode::RcSendMiddle,
        Opcode::RcSendLast,
        Opcode::RcSendLastImm,
        Opcode::RcSendOnly,
        Opcode::RcSendOnlyImm,
        Opcode::RcWriteFirst,
        Opcode::RcWriteMiddle,
        Opcode::RcWriteLast,
        Opcode::RcWriteLastImm,
        Opcode::RcWriteOnly,
        Opcode::RcWriteOnlyImm,
        Opcode::RcReadRequest,
        Opcode::RcReadResponseFirst,
        Opcode::RcReadResponseMiddle,
        Opcode::RcReadResponseLast,
        Opcode::RcReadResponseOnly,
        Opcode::RcAcknowledge,
        Opcode::RcAtomicAcknowledge,
        Opcode::RcCompareSwap,
        Opcode::RcFetchAdd,
        Opcode::RcSendLastInv,
        Opcode::RcSendOnlyInv,
        Opcode::RcFlush,
        Opcode::RcAtomicWrite,
        Opcode::UcSendFirst,
        Opcode::UcSendMiddle,
        Opcode::UcSendLast,
        Opcode::UcSendLastImm,
        Opcode::UcSendOnly,
        Opcode::UcSendOnlyImm,
        Opcode::UcWriteFirst,
        Opcode::UcWriteMiddle,
        Opcode::UcWriteLast,
        Opcode::UcWriteLastImm,
        Opcode::UcWriteOnly,
        Opcode::UcWriteOnlyImm,
        Opcode::UdSendOnly,
        Opcode::UdSendOnlyImm,
        Opcode::Cnp,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        for v in 0..=255u8 {
            let op = Opcode::from(v);
            assert_eq!(u8::from(op), v);
            if let Opcode::Unknown(_) = op {
                assert!(!Opcode::ALL.iter().any(|o| u8::from(*o) == v));
                assert!(op.layout().is_none());
            }
        }
        for op in Opcode::ALL {
            assert_ne!(op.name(), "UNKNOWN");
            assert!(op.layout().is_some(), "{op:?}");
        }
    }

    #[test]
    fn layouts_match_ibta_table() {
        // (opcode, extension header bytes, carries payload)
        let cases = [
            (Opcode::RcSendFirst, 0, true),
            (Opcode::RcSendLastImm, 4, true),
            (Opcode::RcWriteFirst, 16, true),
            (Opcode::RcWriteMiddle, 0, true),
            (Opcode::RcWriteOnlyImm, 20, true),
            (Opcode::RcReadRequest, 16, false),
            (Opcode::RcReadResponseFirst, 4, true),
            (Opcode::RcReadResponseMiddle, 0, true),
            (Opcode::RcAcknowledge, 4, false),
            (Opcode::RcAtomicAcknowledge, 12, false),
            (Opcode::RcCompareSwap, 28, false),
            (Opcode::RcFetchAdd, 28, false),
            (Opcode::RcSendOnlyInv, 4, true),
            (Opcode::RcFlush, 20, false),
            (Opcode::RcAtomicWrite, 16, true),
            (Opcode::UcWriteOnly, 16, true),
            (Opcode::UcSendOnlyImm, 4, true),
            (Opcode::UdSendOnly, 8, true),
            (Opcode::UdSendOnlyImm, 12, true),
            (Opcode::Cnp, 16, false),
        ];
        for (op, len, payload) in cases {
            let l = op.layout().unwrap();
            assert_eq!(l.len(), len, "{op:?}");
            assert_eq!(l.payload, payload, "{op:?}");
        }
        let a = Opcode::RcAtomicAcknowledge.layout().unwrap();
        assert_eq!(
            (a.aeth_offset(), a.atomic_ack_eth_offset()),
            (Some(0), Some(4))
        );
        let w = Opcode::RcWriteOnlyImm.layout().unwrap();
        assert_eq!((w.reth_offset(), w.immdt_offset()), (Some(0), Some(16)));
        let f = Opcode::RcFlush.layout().unwrap();
        assert_eq!((f.feth_offset(), f.reth_offset()), (Some(0), Some(4)));
        let u = Opcode::UdSendOnlyImm.layout().unwrap();
        assert_eq!((u.deth_offset(), u.immdt_offset()), (Some(0), Some(8)));
        // UC has no READ, ACK or atomic opcodes: 0x2C..0x3F are unknown.
        assert!(Opcode::from(0x2C).layout().is_none());
        // RD is recognised as a transport but its opcodes are not parsed.
        assert_eq!(Opcode::from(0x44).transport(), Transport::Rd);
        assert!(Opcode::from(0x44).layout().is_none());
    }

    #[test]
    fn directions_and_segments() {
        use Direction::*;
        assert_eq!(Opcode::RcSendFirst.direction(), Some(Request));
        assert_eq!(Opcode::RcReadRequest.direction(), Some(Request));
        assert_eq!(Opcode::RcFetchAdd.direction(), Some(Request));
        assert_eq!(Opcode::RcFlush.direction(), Some(Request));
        assert_eq!(Opcode::RcReadResponseMiddle.direction(), Some(Response));
        assert_eq!(Opcode::RcAcknowledge.direction(), Some(Response));
        assert_eq!(Opcode::RcAtomicAcknowledge.direction(), Some(Response));
        assert_eq!(Opcode::UcWriteFirst.direction(), Some(Request));
        assert_eq!(Opcode::UdSendOnly.direction(), Some(Request));
        assert_eq!(Opcode::Cnp.direction(), None);
        assert_eq!(Opcode::RcWriteFirst.segment(), Segment::First);
        assert_eq!(Opcode::UcSendMiddle.segment(), Segment::Middle);
        assert_eq!(Opcode::RcReadResponseLast.segment(), Segment::Last);
        assert_eq!(Opcode::RcSendLastInv.segment(), Segment::Last);
        assert_eq!(Opcode::RcWriteOnlyImm.segment(), Segment::Only);
        assert_eq!(Opcode::Cnp.transport(), Transport::Cnp);
        assert_eq!(Opcode::UdSendOnly.transport(), Transport::Ud);
    }
}
