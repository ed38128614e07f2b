//! Frame classification: one call turns a raw Ethernet frame into a small `Copy` summary or a
//! typed error naming the layer and byte offset where parsing stopped.
//!
//! L2 to L4 go through etherparse slices (Ethernet II, up to two VLAN tags, ARP, IPv4, IPv6 with
//! extension headers, UDP, TCP, ICMP, ICMPv6); a UDP payload to port 4791 is handed to our own
//! [`Bth`] view and the extension headers its opcode carries. Nothing here allocates,
//! panics or reads a clock, whatever the input. The ICRC is not checked here (a switch forwards
//! without it); call [`RoceSummary::verify_icrc`] where it matters.

use core::net::{IpAddr, Ipv4Addr};

use etherparse::{
    ArpPacketSlice, EtherType, Ethernet2Slice, Icmpv4Slice, Icmpv6Slice, IpNumber, Ipv4Slice,
    Ipv6Slice, LenSource, SingleVlanSlice, TcpSlice, UdpSlice,
};

use super::aeth::{Aeth, AethRepr};
use super::bth::{Bth, BthRepr};
use super::icrc::{self, IcrcError};
use super::opcode::{Direction, Opcode, Transport};
use super::psn::Pmtu;
use super::reth::{Reth, RethRepr};
use super::{ICRC_LEN, ROCEV2_UDP_PORT};

/// The protocol layer a parse error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// An 802.1Q / 802.1ad tag.
    Vlan,
    /// ARP packet.
    Arp,
    /// IPv4 header or options.
    Ipv4,
    /// IPv6 header or extension headers.
    Ipv6,
    /// UDP header.
    Udp,
    /// TCP header.
    Tcp,
    /// ICMP or ICMPv6 header.
    Icmp,
    /// The InfiniBand base transport header.
    Bth,
    /// The extension headers that follow the BTH.
    ExtHeaders,
    /// Payload, pad and ICRC.
    Payload,
}

impl Layer {
    /// Short lower-case name, for counters and the capture decoder.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Ethernet => "ethernet",
            Layer::Vlan => "vlan",
            Layer::Arp => "arp",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Udp => "udp",
            Layer::Tcp => "tcp",
            Layer::Icmp => "icmp",
            Layer::Bth => "bth",
            Layer::ExtHeaders => "ext_headers",
            Layer::Payload => "payload",
        }
    }
}

/// Why parsing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseReason {
    /// The layer needs more bytes than the frame (or an enclosing length field) provides.
    Truncated {
        /// Bytes the layer needs from its start.
        need: u32,
        /// Bytes available from its start.
        have: u32,
    },
    /// A header field is invalid (bad IP version or header length, bad TCP data offset, ...).
    BadHeader,
    /// The BTH opcode has no known layout.
    UnknownOpcode(u8),
    /// A transport that RoCE stacks do not use (RD).
    UnsupportedTransport(u8),
    /// BTH transport header version other than 0.
    BadTver(u8),
    /// An opcode that carries no payload has bytes after its headers.
    UnexpectedPayload,
    /// ARP for something other than IPv4 over Ethernet.
    UnsupportedArp,
    /// More VLAN tags than the switch handles (two).
    TooManyVlanTags,
}

/// A typed parse error: the layer, the byte offset of that layer in the frame, and the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{}: {reason:?} at offset {offset}", layer.name())]
pub struct ParseError {
    /// Layer in which parsing failed.
    pub layer: Layer,
    /// Offset of that layer from the start of the frame.
    pub offset: u16,
    /// What was wrong.
    pub reason: ParseReason,
}

/// One 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// Layer 2 facts of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthSummary {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// The outermost VLAN tag, if any.
    pub vlan: Option<VlanTag>,
    /// Number of VLAN tags (0 to 2).
    pub vlan_tags: u8,
    /// EtherType after the tags.
    pub ether_type: u16,
    /// Offset of the layer 3 header.
    pub l3_offset: u16,
}

/// An ARP packet for IPv4 over Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpSummary {
    /// 1 request, 2 reply.
    pub operation: u16,
    /// Sender hardware address.
    pub sender_mac: [u8; 6],
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address.
    pub target_mac: [u8; 6],
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

/// What follows the IP header(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4Summary {
    /// UDP.
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// TCP.
    Tcp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Flags byte (CWR ECE URG ACK PSH RST SYN FIN).
        flags: u8,
    },
    /// ICMP for IPv4.
    Icmpv4 {
        /// Type.
        icmp_type: u8,
        /// Code.
        code: u8,
    },
    /// ICMPv6 (including neighbour discovery).
    Icmpv6 {
        /// Type.
        icmp_type: u8,
        /// Code.
        code: u8,
    },
    /// A fragment of a larger IP packet: ports are not visible.
    Fragment,
    /// Another IP protocol.
    Other,
}

/// Layer 3 and 4 facts of an IP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpSummary {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// TTL or hop limit.
    pub hop_limit: u8,
    /// TOS / traffic class byte (DSCP and ECN).
    pub tos: u8,
    /// Final IP protocol number (after IPv6 extension headers).
    pub protocol: u8,
    /// Offset of the layer 4 header.
    pub l4_offset: u16,
    /// Offset just past the IP packet (its total length); anything after is Ethernet padding.
    pub end_offset: u16,
    /// Layer 4 summary.
    pub l4: L4Summary,
}

impl IpSummary {
    /// The ECN codepoint (0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub fn ecn(&self) -> u8 {
        self.tos & 0x03
    }

    /// True for IPv6 neighbour solicitation (135) or advertisement (136).
    pub fn is_neighbor_discovery(&self) -> bool {
        matches!(
            self.l4,
            L4Summary::Icmpv6 {
                icmp_type: 135 | 136,
                ..
            }
        )
    }

    /// UDP source and destination port, for UDP.
    pub fn udp_ports(&self) -> Option<(u16, u16)> {
        match self.l4 {
            L4Summary::Udp { src_port, dst_port } => Some((src_port, dst_port)),
            _ => None,
        }
    }
}

/// Everything the switch needs to know about a RoCEv2 packet, without holding the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceSummary {
    /// IP and UDP facts (`l4` is `Udp`).
    pub ip: IpSummary,
    /// The base transport header.
    pub bth: BthRepr,
    /// Transport class.
    pub transport: Transport,
    /// Request or response PSN space; `None` for a CNP.
    pub direction: Option<Direction>,
    /// PSNs this packet consumes: `max(1, ceil(dma_len / pmtu))` for a READ REQUEST, else 1.
    pub psn_span: u32,
    /// The RETH, where the opcode carries one.
    pub reth: Option<RethRepr>,
    /// The AETH, where the opcode carries one.
    pub aeth: Option<AethRepr>,
    /// Offset of the BTH.
    pub bth_offset: u16,
    /// Offset of the payload (after the extension headers).
    pub payload_offset: u16,
    /// Payload length without pad.
    pub payload_len: u16,
    /// Offset of the 4-byte ICRC.
    pub icrc_offset: u16,
}

impl RoceSummary {
    /// PSN span under another path MTU (the downlink's), from the RETH kept in the summary.
    pub fn psn_span_for(&self, pmtu: Pmtu) -> u32 {
        match (self.bth.opcode, self.reth) {
            (Opcode::RcReadRequest, Some(r)) => pmtu.read_span(r.dma_len),
            _ => 1,
        }
    }

    /// The payload of `frame`, which must be the frame this summary was made from (after the
    /// extension headers, without pad; a MAD for RDMA CM). Empty if `frame` is too short.
    pub fn payload<'f>(&self, frame: &'f [u8]) -> &'f [u8] {
        let start = usize::from(self.payload_offset);
        frame
            .get(start..start + usize::from(self.payload_len))
            .unwrap_or(&[])
    }

    /// The bytes the ICRC covers plus the ICRC: IP header through the ICRC.
    pub fn icrc_region<'f>(&self, frame: &'f [u8], l3_offset: u16) -> &'f [u8] {
        let end = usize::from(self.icrc_offset) + ICRC_LEN;
        frame.get(usize::from(l3_offset)..end).unwrap_or(&[])
    }

    /// Checks the ICRC of `frame`, the frame this summary was made from.
    ///
    /// # Errors
    /// [`IcrcError`] when the packet has IPv6 extension headers or is cut short.
    pub fn verify_icrc(&self, frame: &[u8], l3_offset: u16) -> Result<bool, IcrcError> {
        icrc::verify(self.icrc_region(frame, l3_offset))
    }
}

/// The class of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameClass {
    /// RoCEv2 (UDP destination port 4791).
    Roce(RoceSummary),
    /// Any other IPv4 or IPv6 packet (TCP, ICMP, ND, other UDP, fragments ...).
    Ip(IpSummary),
    /// ARP for IPv4.
    Arp(ArpSummary),
    /// Another EtherType (LLDP, ...).
    OtherL2,
}

/// The result of [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Classified {
    /// Layer 2 facts.
    pub eth: EthSummary,
    /// What the frame carries.
    pub class: FrameClass,
}

impl Classified {
    /// The RoCE summary, for RoCEv2 frames.
    pub fn roce(&self) -> Option<&RoceSummary> {
        match &self.class {
            FrameClass::Roce(r) => Some(r),
            _ => None,
        }
    }

    /// The IP summary, for RoCEv2 and other IP frames.
    pub fn ip(&self) -> Option<&IpSummary> {
        match &self.class {
            FrameClass::Roce(r) => Some(&r.ip),
            FrameClass::Ip(ip) => Some(ip),
            _ => None,
        }
    }
}

const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88A8;
const ETH_ARP: u16 = 0x0806;
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;

/// Offset of `part` inside `frame`. `part` is always a sub-slice handed back by etherparse.
#[inline]
fn offset_in(frame: &[u8], part: &[u8]) -> u16 {
    (part.as_ptr() as usize).wrapping_sub(frame.as_ptr() as usize) as u16
}

#[inline]
fn err(layer: Layer, offset: u16, reason: ParseReason) -> ParseError {
    ParseError {
        layer,
        offset,
        reason,
    }
}

#[inline]
fn truncated(layer: Layer, offset: u16, need: usize, have: usize) -> ParseError {
    err(
        layer,
        offset,
        ParseReason::Truncated {
            need: need as u32,
            have: have as u32,
        },
    )
}

fn from_len_error(layer: Layer, offset: u16, e: &etherparse::err::LenError) -> ParseError {
    let off = offset.saturating_add(e.layer_start_offset as u16);
    if e.len_source == LenSource::Slice || e.required_len > e.len {
        truncated(layer, off, e.required_len, e.len)
    } else {
        err(layer, off, ParseReason::BadHeader)
    }
}

/// Classifies a raw Ethernet frame (without FCS).
///
/// `pmtu` is the path MTU used to compute the PSN span of a READ REQUEST; the engine may
/// recompute it per downlink with [`RoceSummary::psn_span_for`].
///
/// # Errors
/// A [`ParseError`] naming the layer and offset for any malformed or truncated frame. It never
/// panics and never allocates.
pub fn classify(frame: &[u8], pmtu: Pmtu) -> Result<Classified, ParseError> {
    let eth = Ethernet2Slice::from_slice_without_fcs(frame)
        .map_err(|e| truncated(Layer::Ethernet, 0, e.required_len, e.len))?;
    let mut ether_type = eth.ether_type().0;
    let mut rest = eth.payload_slice();
    let mut vlan = None;
    let mut vlan_tags = 0u8;
    while ether_type == ETH_VLAN || ether_type == ETH_QINQ {
        let off = offset_in(frame, rest);
        if vlan_tags == 2 {
            return Err(err(Layer::Vlan, off, ParseReason::TooManyVlanTags));
        }
        let tag = SingleVlanSlice::from_slice(rest)
            .map_err(|e| truncated(Layer::Vlan, off, e.required_len, e.len))?;
        if vlan.is_none() {
            vlan = Some(VlanTag {
                pcp: tag.priority_code_point().value(),
                dei: tag.drop_eligible_indicator(),
                vid: tag.vlan_identifier().value(),
            });
        }
        vlan_tags += 1;
        ether_type = tag.ether_type().0;
        rest = tag.payload_slice();
    }
    let l3_offset = offset_in(frame, rest);
    let eth_summary = EthSummary {
        dst: eth.destination(),
        src: eth.source(),
        vlan,
        vlan_tags,
        ether_type,
        l3_offset,
    };
    let class = match ether_type {
        ETH_ARP => FrameClass::Arp(classify_arp(rest, l3_offset)?),
        ETH_IPV4 | ETH_IPV6 => classify_ip(frame, rest, l3_offset, ether_type, pmtu)?,
        _ => FrameClass::OtherL2,
    };
    Ok(Classified {
        eth: eth_summary,
        class,
    })
}

fn classify_arp(l3: &[u8], off: u16) -> Result<ArpSummary, ParseError> {
    let arp = ArpPacketSlice::from_slice(l3).map_err(|e| from_len_error(Layer::Arp, off, &e))?;
    if arp.hw_addr_size() != 6
        || arp.proto_addr_size() != 4
        || arp.proto_addr_type() != EtherType::IPV4
    {
        return Err(err(Layer::Arp, off, ParseReason::UnsupportedArp));
    }
    let mac = |s: &[u8]| {
        let mut m = [0u8; 6];
        m.copy_from_slice(&s[..6]);
        m
    };
    let ip = |s: &[u8]| Ipv4Addr::new(s[0], s[1], s[2], s[3]);
    Ok(ArpSummary {
        operation: arp.operation().0,
        sender_mac: mac(arp.sender_hw_addr()),
        sender_ip: ip(arp.sender_protocol_addr()),
        target_mac: mac(arp.target_hw_addr()),
        target_ip: ip(arp.target_protocol_addr()),
    })
}

fn classify_ip(
    frame: &[u8],
    l3: &[u8],
    off: u16,
    ether_type: u16,
    pmtu: Pmtu,
) -> Result<FrameClass, ParseError> {
    let (src, dst, hop_limit, tos, payload, end_offset) = if ether_type == ETH_IPV4 {
        let ip = Ipv4Slice::from_slice(l3).map_err(|e| match e {
            etherparse::err::ipv4::SliceError::Len(l) => from_len_error(Layer::Ipv4, off, &l),
            _ => err(Layer::Ipv4, off, ParseReason::BadHeader),
        })?;
        let h = ip.header();
        let end = off.saturating_add(h.total_len());
        (
            IpAddr::V4(h.source_addr()),
            IpAddr::V4(h.destination_addr()),
            h.ttl(),
            (h.dcp().value() << 2) | h.ecn().value(),
            ip.payload().clone(),
            end,
        )
    } else {
        let ip = Ipv6Slice::from_slice(l3).map_err(|e| match e {
            etherparse::err::ipv6::SliceError::Len(l) => from_len_error(Layer::Ipv6, off, &l),
            _ => err(Layer::Ipv6, off, ParseReason::BadHeader),
        })?;
        let h = ip.header();
        let end = off.saturating_add(40).saturating_add(h.payload_length());
        (
            IpAddr::V6(h.source_addr()),
            IpAddr::V6(h.destination_addr()),
            h.hop_limit(),
            h.traffic_class(),
            ip.payload().clone(),
            end,
        )
    };
    let l4_bytes = payload.payload;
    let l4_offset = offset_in(frame, l4_bytes);
    let mut summary = IpSummary {
        src,
        dst,
        hop_limit,
        tos,
        protocol: payload.ip_number.0,
        l4_offset,
        end_offset,
        l4: L4Summary::Other,
    };
    if payload.fragmented {
        summary.l4 = L4Summary::Fragment;
        return Ok(FrameClass::Ip(summary));
    }
    match payload.ip_number {
        IpNumber::UDP => {
            let udp = UdpSlice::from_slice(l4_bytes)
                .map_err(|e| from_len_error(Layer::Udp, l4_offset, &e))?;
            let (src_port, dst_port) = (udp.source_port(), udp.destination_port());
            summary.l4 = L4Summary::Udp { src_port, dst_port };
            if dst_port == ROCEV2_UDP_PORT {
                let bth_offset = l4_offset + 8;
                return classify_roce(udp.payload(), bth_offset, summary, pmtu)
                    .map(FrameClass::Roce);
            }
        }
        IpNumber::TCP => {
            let tcp = TcpSlice::from_slice(l4_bytes).map_err(|e| match e {
                etherparse::err::tcp::HeaderSliceError::Len(l) => {
                    from_len_error(Layer::Tcp, l4_offset, &l)
                }
                _ => err(Layer::Tcp, l4_offset, ParseReason::BadHeader),
            })?;
            let h = tcp.header_slice();
            summary.l4 = L4Summary::Tcp {
                src_port: tcp.source_port(),
                dst_port: tcp.destination_port(),
                flags: h[13],
            };
        }
        IpNumber::ICMP => {
            let icmp = Icmpv4Slice::from_slice(l4_bytes)
                .map_err(|e| from_len_error(Layer::Icmp, l4_offset, &e))?;
            summary.l4 = L4Summary::Icmpv4 {
                icmp_type: icmp.type_u8(),
                code: icmp.code_u8(),
            };
        }
        IpNumber::IPV6_ICMP => {
            let icmp = Icmpv6Slice::from_slice(l4_bytes)
                .map_err(|e| from_len_error(Layer::Icmp, l4_offset, &e))?;
            summary.l4 = L4Summary::Icmpv6 {
                icmp_type: icmp.type_u8(),
                code: icmp.code_u8(),
            };
        }
        _ => {}
    }
    Ok(FrameClass::Ip(summary))
}

fn classify_roce(
    udp_payload: &[u8],
    bth_offset: u16,
    ip: IpSummary,
    pmtu: Pmtu,
) -> Result<RoceSummary, ParseError> {
    let bth = Bth::new_checked(udp_payload)
        .map_err(|_| truncated(Layer::Bth, bth_offset, Bth::<&[u8]>::LEN, udp_payload.len()))?;
    let bth_repr = BthRepr::parse(&bth);
    let opcode = bth_repr.opcode;
    let transport = opcode.transport();
    if transport == Transport::Rd {
        return Err(err(
            Layer::Bth,
            bth_offset,
            ParseReason::UnsupportedTransport(u8::from(opcode)),
        ));
    }
    if bth_repr.tver != 0 {
        return Err(err(
            Layer::Bth,
            bth_offset,
            ParseReason::BadTver(bth_repr.tver),
        ));
    }
    let Some(layout) = opcode.layout() else {
        return Err(err(
            Layer::Bth,
            bth_offset,
            ParseReason::UnknownOpcode(u8::from(opcode)),
        ));
    };
    let ext = &udp_payload[12..];
    let ext_offset = bth_offset + 12;
    let need = layout.len() + usize::from(bth_repr.pad_count) + ICRC_LEN;
    if ext.len() < need {
        let layer = if ext.len() < layout.len() {
            Layer::ExtHeaders
        } else {
            Layer::Payload
        };
        return Err(truncated(layer, ext_offset, need, ext.len()));
    }
    let payload_len = ext.len() - need;
    let payload_offset = ext_offset + layout.len() as u16;
    if !layout.payload && payload_len + usize::from(bth_repr.pad_count) != 0 {
        return Err(err(
            Layer::Payload,
            payload_offset,
            ParseReason::UnexpectedPayload,
        ));
    }
    // The checks above guarantee every offset below lies inside `ext`.
    let reth = layout
        .reth_offset()
        .map(|o| RethRepr::parse(&Reth::new_unchecked(&ext[o..o + 16])));
    let aeth = layout
        .aeth_offset()
        .map(|o| AethRepr::parse(&Aeth::new_unchecked(&ext[o..o + 4])));
    let psn_span = match (opcode, reth) {
        (Opcode::RcReadRequest, Some(r)) => pmtu.read_span(r.dma_len),
        _ => 1,
    };
    Ok(RoceSummary {
        ip,
        bth: bth_repr,
        transport,
        direction: opcode.direction(),
        psn_span,
        reth,
        aeth,
        bth_offset,
        payload_offset,
        payload_len: payload_len as u16,
        icrc_offset: payload_offset + (payload_len + usize::from(bth_repr.pad_count)) as u16,
    })
}

/// Byte offsets in the most common frame shape, untagged Ethernet II + IPv4 without options +
/// UDP + BTH: the layout the engine's fast path reads at fixed offsets instead of calling
/// [`classify`] (which it falls back to for anything else). A test below checks each offset
/// against what [`classify`] finds.
pub mod plain_v4 {
    /// The IPv4 header (after the 14-byte Ethernet II header).
    pub const L3: usize = 14;
    /// The UDP header (after a 20-byte IPv4 header).
    pub const L4: usize = L3 + 20;
    /// The BTH (after the 8-byte UDP header).
    pub const BTH: usize = L4 + 8;
    /// IPv4 total length (2 bytes).
    pub const IP_TOTAL_LEN: usize = L3 + 2;
    /// IPv4 flags and fragment offset (2 bytes).
    pub const IP_FRAG: usize = L3 + 6;
    /// IPv4 TTL.
    pub const IP_TTL: usize = L3 + 8;
    /// IPv4 protocol.
    pub const IP_PROTO: usize = L3 + 9;
    /// IPv4 source address (4 bytes).
    pub const IP_SRC: usize = L3 + 12;
    /// IPv4 destination address (4 bytes).
    pub const IP_DST: usize = L3 + 16;
    /// UDP source port (2 bytes).
    pub const UDP_SPORT: usize = L4;
    /// UDP destination port (2 bytes).
    pub const UDP_DPORT: usize = L4 + 2;
    /// UDP length (2 bytes).
    pub const UDP_LEN: usize = L4 + 4;
    /// BTH opcode.
    pub const BTH_OPCODE: usize = BTH;
    /// BTH SE, M, pad count and transport version.
    pub const BTH_FLAGS: usize = BTH + 1;
    /// BTH DestQP (3 bytes).
    pub const BTH_DEST_QP: usize = BTH + 5;
    /// BTH PSN (3 bytes).
    pub const BTH_PSN: usize = BTH + 9;
    /// The BTH's length.
    pub const BTH_LEN: usize = 12;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::every_ext;
    use crate::wire::frame::{IpRepr, RoceFrameRepr};
    use crate::wire::Psn;
    use core::net::Ipv6Addr;
    use proptest::prelude::*;

    const PMTU: Pmtu = Pmtu::DEFAULT;

    fn frame(op: Opcode, ip: IpRepr, vlan: Option<VlanTag>, payload: &[u8]) -> Vec<u8> {
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(op, 0x11, Psn::new(0xFF_FFFE))
        };
        RoceFrameRepr {
            vlan,
            udp_src_port: 49441,
            ..RoceFrameRepr::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], ip, bth)
        }
        .with_ext(every_ext())
        .with_payload(payload)
        .to_vec()
        .unwrap()
    }

    fn v4() -> IpRepr {
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 1, 2),
            id: 7,
        }
    }

    fn v6() -> IpRepr {
        IpRepr::V6 {
            src: Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2),
            flow_label: 0x12345,
        }
    }

    #[test]
    fn every_opcode_ipv4_ipv6_vlan() {
        let tag = Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        });
        for op in Opcode::ALL {
            let layout = op.layout().unwrap();
            let payload: &[u8] = if layout.payload { &[0xAB; 37] } else { &[] };
            for (ip, vlan) in [(v4(), None), (v6(), None), (v4(), tag), (v6(), tag)] {
                let f = frame(op, ip, vlan, payload);
                let c = classify(&f, PMTU).unwrap_or_else(|e| panic!("{op:?}: {e}"));
                assert_eq!(c.eth.vlan, vlan);
                assert_eq!(
                    usize::from(c.eth.l3_offset),
                    if vlan.is_some() { 18 } else { 14 }
                );
                let r = c.roce().unwrap();
                assert_eq!(r.bth.opcode, op);
                assert_eq!(r.bth.psn, Psn::new(0xFF_FFFE));
                assert_eq!(r.bth.pad_count as usize, if layout.payload { 3 } else { 0 });
                assert_eq!(usize::from(r.payload_len), payload.len());
                assert_eq!(usize::from(r.icrc_offset) + 4, f.len());
                assert_eq!(r.reth.is_some(), layout.reth);
                assert_eq!(r.aeth.is_some(), layout.aeth);
                assert_eq!(r.direction, op.direction());
                assert_eq!(r.transport, op.transport());
                assert_eq!(r.ip.udp_ports(), Some((49441, 4791)));
                assert_eq!(r.verify_icrc(&f, c.eth.l3_offset), Ok(true), "{op:?}");
                assert_eq!(
                    &f[usize::from(r.payload_offset)..][..payload.len()],
                    payload,
                    "{op:?}"
                );
                let span = if op == Opcode::RcReadRequest { 4 } else { 1 };
                assert_eq!(r.psn_span, span);
            }
        }
    }

    #[test]
    fn read_request_span_follows_pmtu() {
        let f = frame(Opcode::RcReadRequest, v4(), None, &[]);
        let r = *classify(&f, Pmtu::new(4096).unwrap())
            .unwrap()
            .roce()
            .unwrap();
        assert_eq!(r.psn_span, 1);
        assert_eq!(r.psn_span_for(Pmtu::new(256).unwrap()), 16);
        assert_eq!(r.psn_span_for(Pmtu::new(2048).unwrap()), 2);
    }

    #[test]
    fn corrupted_icrc_is_reported() {
        let mut f = frame(Opcode::RcWriteOnly, v4(), None, &[1, 2, 3, 4]);
        let c = classify(&f, PMTU).unwrap();
        let n = f.len();
        f[n - 10] ^= 0x80; // payload bit flip
        assert_eq!(
            c.roce().unwrap().verify_icrc(&f, c.eth.l3_offset),
            Ok(false)
        );
        f[n - 10] ^= 0x80;
        f[n - 1] ^= 0x01; // ICRC bit flip
        assert_eq!(
            c.roce().unwrap().verify_icrc(&f, c.eth.l3_offset),
            Ok(false)
        );
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        let f = frame(
            Opcode::RcWriteFirst,
            v6(),
            Some(VlanTag {
                pcp: 0,
                dei: true,
                vid: 5,
            }),
            &[9; 64],
        );
        for n in 0..f.len() {
            // Shortening the buffer without fixing the length fields must fail somewhere.
            let e = classify(&f[..n], PMTU).unwrap_err();
            assert!(
                matches!(e.reason, ParseReason::Truncated { .. }),
                "{n}: {e:?}"
            );
        }
        assert_eq!(
            classify(&f[..10], PMTU).unwrap_err(),
            ParseError {
                layer: Layer::Ethernet,
                offset: 0,
                reason: ParseReason::Truncated { need: 14, have: 10 }
            }
        );
        let e = classify(&f[..60], PMTU).unwrap_err();
        assert_eq!((e.layer, e.offset), (Layer::Ipv6, 18));
    }

    #[test]
    fn bth_errors_name_layer_and_offset() {
        let mut f = frame(Opcode::RcSendOnly, v4(), None, &[1; 8]);
        f[42] = 0x3F; // unassigned UC opcode
        let e = classify(&f, PMTU).unwrap_err();
        assert_eq!(
            e,
            ParseError {
                layer: Layer::Bth,
                offset: 42,
                reason: ParseReason::UnknownOpcode(0x3F)
            }
        );
        f[42] = 0x44; // RD
        assert_eq!(
            classify(&f, PMTU).unwrap_err().reason,
            ParseReason::UnsupportedTransport(0x44)
        );
        f[42] = 0x04;
        f[43] |= 0x01; // TVer 1
        assert_eq!(
            classify(&f, PMTU).unwrap_err().reason,
            ParseReason::BadTver(1)
        );
        // An ACK with bytes after the AETH.
        let mut ack = frame(Opcode::RcAcknowledge, v4(), None, &[]);
        let icrc_at = ack.len() - 4;
        ack.splice(icrc_at..icrc_at, [0u8; 4]);
        let udp_len = u16::from_be_bytes([ack[38], ack[39]]) + 4;
        ack[38..40].copy_from_slice(&udp_len.to_be_bytes());
        let ip_len = u16::from_be_bytes([ack[16], ack[17]]) + 4;
        ack[16..18].copy_from_slice(&ip_len.to_be_bytes());
        assert_eq!(
            classify(&ack, PMTU).unwrap_err().reason,
            ParseReason::UnexpectedPayload
        );
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        // A 62-byte ACK padded by a NIC to the 60-byte minimum plus 8 junk bytes.
        let mut f = frame(Opcode::RcAcknowledge, v4(), None, &[]);
        f.extend_from_slice(&[0xEE; 8]);
        let c = classify(&f, PMTU).unwrap();
        let r = c.roce().unwrap();
        assert_eq!(r.payload_len, 0);
        assert_eq!(usize::from(r.ip.end_offset), f.len() - 8);
        assert_eq!(r.verify_icrc(&f, c.eth.l3_offset), Ok(true));
    }

    // Non-RoCE frames as a Linux host sends them.
    const ARP_REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x0a, 0x63,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x63, 0x00, 0x01,
    ];
    const ICMP_ECHO: [u8; 42] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x01, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 0x0a, 0x63, 0x00, 0x02,
        0x0a, 0x63, 0x00, 0x01, 0x08, 0x00, 0xf7, 0xfe, 0x00, 0x01, 0x00, 0x00,
    ];
    const TCP_SYN: [u8; 54] = [
        0x52, 0x54, 0x00, 0x99, 0x00, 0x01, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x28, 0x00, 0x01, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x63, 0x00, 0x02,
        0x0a, 0x63, 0x00, 0x01, 0x9c, 0x40, 0x00, 0x16, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x00, 0x50, 0x02, 0xfa, 0xf0, 0x00, 0x00, 0x00, 0x00,
    ];
    // IPv6 neighbour solicitation for fd99::1 from fd99::2.
    const ND_SOLICIT: [u8; 86] = [
        0x33, 0x33, 0xff, 0x00, 0x00, 0x01, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x86, 0xdd, 0x60,
        0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfd, 0x99, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x01, 0x87, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0xfd, 0x99, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x01, 0x01, 0x01, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02,
    ];

    #[test]
    fn non_roce_frames_classify_as_such() {
        let arp = classify(&ARP_REQUEST, PMTU).unwrap();
        let FrameClass::Arp(a) = arp.class else {
            panic!("{arp:?}")
        };
        assert_eq!(a.operation, 1);
        assert_eq!(a.sender_ip, Ipv4Addr::new(10, 99, 0, 2));
        assert_eq!(a.target_ip, Ipv4Addr::new(10, 99, 0, 1));

        let icmp = classify(&ICMP_ECHO, PMTU).unwrap();
        assert_eq!(
            icmp.ip().unwrap().l4,
            L4Summary::Icmpv4 {
                icmp_type: 8,
                code: 0
            }
        );
        assert!(icmp.roce().is_none());

        let tcp = classify(&TCP_SYN, PMTU).unwrap();
        assert_eq!(
            tcp.ip().unwrap().l4,
            L4Summary::Tcp {
                src_port: 40000,
                dst_port: 22,
                flags: 0x02
            }
        );

        let nd = classify(&ND_SOLICIT, PMTU).unwrap();
        let ip = nd.ip().unwrap();
        assert!(ip.is_neighbor_discovery());
        assert_eq!(ip.hop_limit, 255);
        assert_eq!(
            ip.l4,
            L4Summary::Icmpv6 {
                icmp_type: 135,
                code: 0
            }
        );

        let mut lldp = ARP_REQUEST;
        lldp[12..14].copy_from_slice(&0x88CCu16.to_be_bytes());
        assert_eq!(classify(&lldp, PMTU).unwrap().class, FrameClass::OtherL2);

        let mut other_udp = frame(Opcode::RcSendOnly, v4(), None, &[]);
        other_udp[36..38].copy_from_slice(&53u16.to_be_bytes());
        let c = classify(&other_udp, PMTU).unwrap();
        assert!(matches!(
            c.class,
            FrameClass::Ip(IpSummary {
                l4: L4Summary::Udp { dst_port: 53, .. },
                ..
            })
        ));
    }

    #[test]
    fn fragments_and_bad_headers() {
        let mut f = frame(Opcode::RcSendOnly, v4(), None, &[1; 16]);
        f[20] |= 0x20; // MF
        assert_eq!(
            classify(&f, PMTU).unwrap().ip().unwrap().l4,
            L4Summary::Fragment
        );
        f[20] &= !0x20;
        f[14] = 0x44; // IHL 4
        assert_eq!(classify(&f, PMTU).unwrap_err().layer, Layer::Ipv4);
        f[14] = 0x65; // version 6 in an IPv4 EtherType
        assert_eq!(classify(&f, PMTU).unwrap_err().layer, Layer::Ipv4);
        let mut arp = ARP_REQUEST;
        arp[19] = 16; // protocol address size
        assert_eq!(classify(&arp, PMTU).unwrap_err().layer, Layer::Arp);
        let mut qinq = frame(
            Opcode::RcSendOnly,
            v4(),
            Some(VlanTag {
                pcp: 0,
                dei: false,
                vid: 1,
            }),
            &[],
        );
        // Turn the inner EtherType into yet another tag: two tags are allowed, a third is not.
        qinq[12..14].copy_from_slice(&0x88A8u16.to_be_bytes());
        qinq[16..18].copy_from_slice(&0x8100u16.to_be_bytes());
        qinq.splice(18..18, [0x00, 0x02, 0x81, 0x00, 0x00, 0x03]);
        assert_eq!(
            classify(&qinq, PMTU).unwrap_err().reason,
            ParseReason::TooManyVlanTags
        );
    }

    proptest! {
        #[test]
        fn emit_then_classify(op_idx in 0usize..Opcode::ALL.len(), v6_ip in any::<bool>(),
                              vid in proptest::option::of(0u16..4096), len in 0usize..300,
                              psn in 0u32..1 << 24, qp in 0u32..1 << 24, tos in any::<u8>(),
                              sport in any::<u16>()) {
            let op = Opcode::ALL[op_idx];
            let layout = op.layout().unwrap();
            let payload = vec![0x5A; if layout.payload { len } else { 0 }];
            let repr = RoceFrameRepr {
                src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2],
                vlan: vid.map(|vid| VlanTag { pcp: 1, dei: false, vid }),
                ip: if v6_ip { v6() } else { v4() }, tos, hop_limit: 3, udp_src_port: sport,
                bth: BthRepr { opcode: op, solicited: true, mig_req: true, pad_count: 0, tver: 0,
                    pkey: 0x8001, fecn: true, becn: false, dest_qp: qp, ack_req: false, psn: Psn::new(psn) },
                ext: every_ext(), payload: &payload,
            };
            let f = repr.to_vec().unwrap();
            let c = classify(&f, PMTU).unwrap();
            let r = c.roce().unwrap();
            prop_assert_eq!(r.bth, BthRepr { pad_count: crate::wire::frame::pad_for(payload.len()) as u8, ..repr.bth });
            prop_assert_eq!(r.ip.tos, tos);
            prop_assert_eq!(r.ip.udp_ports(), Some((sport, 4791)));
            prop_assert_eq!(usize::from(r.payload_len), payload.len());
            prop_assert_eq!(r.verify_icrc(&f, c.eth.l3_offset), Ok(true));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = classify(&bytes, PMTU);
        }

        #[test]
        fn mutated_frames_never_panic(idx in 0usize..120, val in any::<u8>(), cut in 0usize..130) {
            let mut f = frame(Opcode::RcReadResponseFirst, v6(), Some(VlanTag { pcp: 0, dei: false, vid: 9 }), &[7; 40]);
            let i = idx % f.len();
            f[i] = val;
            f.truncate(cut.min(f.len()));
            if let Ok(c) = classify(&f, PMTU) {
                if let Some(r) = c.roce() {
                    let _ = r.verify_icrc(&f, c.eth.l3_offset);
                }
            }
        }
    }

    #[test]
    fn the_fixed_offsets_are_where_classify_finds_the_fields() {
        use super::plain_v4::*;
        let f = frame(Opcode::RcWriteMiddle, v4(), None, &[7; 64]);
        let c = classify(&f, PMTU).unwrap();
        let r = c.roce().unwrap();
        let be16 = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
        let be24 = |o: usize| u32::from_be_bytes([0, f[o], f[o + 1], f[o + 2]]);
        let ip4 = |o: usize| IpAddr::V4(Ipv4Addr::new(f[o], f[o + 1], f[o + 2], f[o + 3]));
        assert_eq!(usize::from(c.eth.l3_offset), L3);
        assert_eq!(usize::from(r.ip.l4_offset), L4);
        assert_eq!(usize::from(r.bth_offset), BTH);
        assert_eq!(
            usize::from(be16(IP_TOTAL_LEN)),
            usize::from(r.ip.end_offset) - L3
        );
        assert_eq!(be16(IP_FRAG) & 0x3FFF, 0);
        assert_eq!(f[IP_TTL], r.ip.hop_limit);
        assert_eq!(f[IP_PROTO], r.ip.protocol);
        assert_eq!((ip4(IP_SRC), ip4(IP_DST)), (r.ip.src, r.ip.dst));
        assert_eq!(Some((be16(UDP_SPORT), be16(UDP_DPORT))), r.ip.udp_ports());
        assert_eq!(
            usize::from(be16(UDP_LEN)),
            usize::from(r.ip.end_offset) - L4
        );
        assert_eq!(f[BTH_OPCODE], u8::from(r.bth.opcode));
        assert_eq!(f[BTH_FLAGS] & 0x0F, 0, "transport version 0");
        assert_eq!(be24(BTH_DEST_QP), r.bth.dest_qp);
        assert_eq!(be24(BTH_PSN), r.bth.psn.value());
        assert_eq!(
            usize::from(r.payload_offset),
            BTH + BTH_LEN,
            "a WRITE MIDDLE has no extension"
        );
    }
}
