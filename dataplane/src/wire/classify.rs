//! Frame classification: one call turns a raw Ethernet frame into a small `Copy` summary or a
//! typed error naming the layer and byte offset where parsing stopped.
//!
//! L2 to L4 go through etherparse slices (Ethernet II, up to two VLAN tags, ARP, IPv4, IPv6 with
//! extension headers, UDP, TCP, ICMP, ICMPv6); a UDP payload to port 4791 is handed to our own
//! [`Bth`](super::Bth) view and the extension headers its opcode carries. Nothing here allocates,
//! panics or reads a clock, whatever the input. The ICRC is not checked here (a switch forwards
//! without it); call [`RoceSummary::verify_icrc`] where it matters.

use core::net::{IpAddr, Ipv4Addr};

use etherparse::{
    ArpPacketSlice, Ethernet2Slice, EtherType, Icmpv4Slice, Icmpv6Slice, IpNumber, Ipv4Slice,
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
    let arp =
        ArpPacketSlice::from_slice(l3).map_err(|e| from_len_error(Layer::Arp, off, &e))?;
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
        return Err(err(Layer::Bth, bth_offset, ParseReason::BadTver(bth_repr.tver)));
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
