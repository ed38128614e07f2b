//! Emit-side description of a whole RoCEv2 frame: Ethernet (optionally VLAN-tagged), IPv4 or
//! IPv6, UDP to port 4791, BTH, extension headers, payload, pad and ICRC.
//!
//! For tests, tools and the traffic generator; the switch itself never builds frames this way on
//! the packet path. The UDP checksum is emitted as zero (RoCEv2 relies on the ICRC), as the Linux
//! Soft-RoCE driver does for IPv4 and IPv6; IPv4 is sent with DF set.

use core::net::{Ipv4Addr, Ipv6Addr};

use super::aeth::AethRepr;
use super::bth::BthRepr;
use super::classify::VlanTag;
use super::ext::{AtomicAckEthRepr, AtomicEthRepr, DethRepr, FethRepr, IethRepr, ImmDtRepr};
use super::icrc;
use super::reth::RethRepr;
use super::{Error, Result, ICRC_LEN, ROCEV2_UDP_PORT};

/// The IP layer of a RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
        /// Identification field.
        id: u16,
    },
    /// IPv6.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
        /// Flow label (20 bits).
        flow_label: u32,
    },
}

impl IpRepr {
    /// The IP layer between two addresses (IPv4 identification and IPv6 flow label zero), or
    /// `None` when they are of different families.
    pub fn between(src: core::net::IpAddr, dst: core::net::IpAddr) -> Option<IpRepr> {
        use core::net::IpAddr;
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(IpRepr::V4 { src, dst, id: 0 }),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(IpRepr::V6 {
                src,
                dst,
                flow_label: 0,
            }),
            _ => None,
        }
    }

    /// Header length in bytes.
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => 20,
            IpRepr::V6 { .. } => 40,
        }
    }
}

/// The extension headers of a frame. Each one the opcode's layout needs must be `Some`; the
/// others are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtRepr {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// ImmDt.
    pub immdt: Option<ImmDtRepr>,
    /// IETH.
    pub ieth: Option<IethRepr>,
}

impl ExtRepr {
    /// Reads every extension header `opcode` carries from `ext`, the bytes right after the BTH.
    ///
    /// # Errors
    /// [`Error::Malformed`] for an unknown opcode, [`Error::Truncated`] if `ext` is too short.
    pub fn parse(opcode: super::Opcode, ext: &[u8]) -> Result<ExtRepr> {
        use super::aeth::Aeth;
        use super::ext::{AtomicAckEth, AtomicEth, Deth, Feth, Ieth, ImmDt};
        use super::reth::Reth;
        let layout = opcode.layout().ok_or(Error::Malformed)?;
        if ext.len() < layout.len() {
            return Err(Error::Truncated {
                need: layout.len(),
                have: ext.len(),
            });
        }
        let at = |o: usize| &ext[o..];
        Ok(ExtRepr {
            deth: match layout.deth_offset() {
                Some(o) => Some(DethRepr::parse(&Deth::new_checked(at(o))?)),
                None => None,
            },
            feth: match layout.feth_offset() {
                Some(o) => Some(FethRepr::parse(&Feth::new_checked(at(o))?)),
                None => None,
            },
            reth: match layout.reth_offset() {
                Some(o) => Some(RethRepr::parse(&Reth::new_checked(at(o))?)),
                None => None,
            },
            atomic_eth: match layout.atomic_eth_offset() {
                Some(o) => Some(AtomicEthRepr::parse(&AtomicEth::new_checked(at(o))?)),
                None => None,
            },
            aeth: match layout.aeth_offset() {
                Some(o) => Some(AethRepr::parse(&Aeth::new_checked(at(o))?)),
                None => None,
            },
            atomic_ack_eth: match layout.atomic_ack_eth_offset() {
                Some(o) => Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(at(o))?)),
                None => None,
            },
            immdt: match layout.immdt_offset() {
                Some(o) => Some(ImmDtRepr::parse(&ImmDt::new_checked(at(o))?)),
                None => None,
            },
            ieth: match layout.ieth_offset() {
                Some(o) => Some(IethRepr::parse(&Ieth::new_checked(at(o))?)),
                None => None,
            },
        })
    }
}

/// A whole RoCEv2 frame to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceFrameRepr<'a> {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// One 802.1Q tag, if wanted.
    pub vlan: Option<VlanTag>,
    /// IP addresses and version.
    pub ip: IpRepr,
    /// TOS / traffic class (DSCP and ECN).
    pub tos: u8,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// UDP source port (flow entropy; the same in both directions of a QP pair).
    pub udp_src_port: u16,
    /// BTH. Its `pad_count` is ignored and computed from the payload length.
    pub bth: BthRepr,
    /// Extension headers.
    pub ext: ExtRepr,
    /// Payload (without pad).
    pub payload: &'a [u8],
}

impl<'a> RoceFrameRepr<'a> {
    /// Default UDP source port of [`RoceFrameRepr::new`]: the first of the range RoCE hosts
    /// draw from (0xC000).
    pub const DEFAULT_UDP_SRC_PORT: u16 = 0xC000;

    /// The one frame builder: a frame from `src_mac` to `dst_mac` over `ip` with header `bth`,
    /// as a RoCE host sends it unless the caller changes a field (struct update syntax): no
    /// VLAN, ECT(0), hop limit 64, UDP source port 0xC000, no extension headers, no payload.
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], ip: IpRepr, bth: BthRepr) -> RoceFrameRepr<'a> {
        RoceFrameRepr {
            src_mac,
            dst_mac,
            vlan: None,
            ip,
            tos: 0x02,
            hop_limit: 64,
            udp_src_port: Self::DEFAULT_UDP_SRC_PORT,
            bth,
            ext: ExtRepr::default(),
            payload: &[],
        }
    }

    /// The same frame carrying `ext`.
    pub fn with_ext(self, ext: ExtRepr) -> RoceFrameRepr<'a> {
        RoceFrameRepr { ext, ..self }
    }

    /// The same frame carrying `payload`.
    pub fn with_payload<'b>(self, payload: &'b [u8]) -> RoceFrameRepr<'b>
    where
        'a: 'b,
    {
        RoceFrameRepr { payload, ..self }
    }
}

/// The pad that brings `len` to a multiple of 4.
pub const fn pad_for(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// RFC 1071 checksum of an IPv4 header whose checksum field is zero.
pub fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in header.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

impl RoceFrameRepr<'_> {
    fn ext_len(&self) -> Result<usize> {
        Ok(self.bth.opcode.layout().ok_or(Error::Malformed)?.len())
    }

    /// The UDP payload length: BTH, extension headers, payload, pad and ICRC.
    ///
    /// # Errors
    /// [`Error::Malformed`] for an opcode without a known layout.
    pub fn udp_payload_len(&self) -> Result<usize> {
        Ok(12 + self.ext_len()? + self.payload.len() + pad_for(self.payload.len()) + ICRC_LEN)
    }

    /// Offset of the IP header in the emitted frame.
    pub const fn l3_offset(&self) -> usize {
        14 + if self.vlan.is_some() { 4 } else { 0 }
    }

    /// Length of the emitted frame.
    ///
    /// # Errors
    /// [`Error::Malformed`] for an opcode without a known layout.
    pub fn frame_len(&self) -> Result<usize> {
        Ok(self.l3_offset() + self.ip.header_len() + 8 + self.udp_payload_len()?)
    }

    /// Writes the frame into the start of `buf`, ICRC included, and returns its length.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `buf` is too short; [`Error::Malformed`] for an unknown opcode,
    /// a missing extension header the opcode needs, or a payload on an opcode without one.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let layout = self.bth.opcode.layout().ok_or(Error::Malformed)?;
        if !layout.payload && !self.payload.is_empty() {
            return Err(Error::Malformed);
        }
        let len = self.frame_len()?;
        if buf.len() < len {
            return Err(Error::Truncated {
                need: len,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        buf.fill(0);

        // Ethernet and VLAN.
        buf[0..6].copy_from_slice(&self.dst_mac);
        buf[6..12].copy_from_slice(&self.src_mac);
        let mut at = 12;
        if let Some(tag) = self.vlan {
            buf[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
            let tci =
                (u16::from(tag.pcp & 7) << 13) | (u16::from(tag.dei) << 12) | (tag.vid & 0xFFF);
            buf[14..16].copy_from_slice(&tci.to_be_bytes());
            at = 16;
        }
        let ether_type: u16 = match self.ip {
            IpRepr::V4 { .. } => 0x0800,
            IpRepr::V6 { .. } => 0x86DD,
        };
        buf[at..at + 2].copy_from_slice(&ether_type.to_be_bytes());
        let l3 = at + 2;

        // IP.
        let udp_len = 8 + self.udp_payload_len()?;
        match self.ip {
            IpRepr::V4 { src, dst, id } => {
                let h = &mut buf[l3..l3 + 20];
                h[0] = 0x45;
                h[1] = self.tos;
                h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
                h[4..6].copy_from_slice(&id.to_be_bytes());
                h[6] = 0x40; // DF
                h[8] = self.hop_limit;
                h[9] = 17;
                h[12..16].copy_from_slice(&src.octets());
                h[16..20].copy_from_slice(&dst.octets());
                let c = ipv4_header_checksum(h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            IpRepr::V6 {
                src,
                dst,
                flow_label,
            } => {
                let h = &mut buf[l3..l3 + 40];
                let word = (6u32 << 28) | (u32::from(self.tos) << 20) | (flow_label & 0xF_FFFF);
                h[0..4].copy_from_slice(&word.to_be_bytes());
                h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
                h[6] = 17;
                h[7] = self.hop_limit;
                h[8..24].copy_from_slice(&src.octets());
                h[24..40].copy_from_slice(&dst.octets());
            }
        }

        // UDP, checksum zero.
        let udp = l3 + self.ip.header_len();
        buf[udp..udp + 2].copy_from_slice(&self.udp_src_port.to_be_bytes());
        buf[udp + 2..udp + 4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        buf[udp + 4..udp + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());

        // BTH with the pad count this payload needs.
        let bth_at = udp + 8;
        let pad = pad_for(self.payload.len());
        let bth = BthRepr {
            pad_count: pad as u8,
            ..self.bth
        };
        bth.emit(&mut buf[bth_at..])?;

        // Extension headers in wire order.
        let ext = &mut buf[bth_at + 12..];
        let e = &self.ext;
        let need = |o: Option<usize>, present: bool| -> Result<Option<usize>> {
            match o {
                Some(_) if !present => Err(Error::Malformed),
                other => Ok(other),
            }
        };
        if let Some(o) = need(layout.deth_offset(), e.deth.is_some())? {
            e.deth.unwrap_or_default().emit(&mut ext[o..])?;
        }
        if let Some(o) = need(layout.feth_offset(), e.feth.is_some())? {
            e.feth.unwrap_or_default().emit(&mut ext[o..])?;
        }
        if let Some(o) = need(layout.reth_offset(), e.reth.is_some())? {
            e.reth.unwrap_or_default().emit(&mut ext[o..])?;
        }
        if let Some(o) = need(layout.atomic_eth_offset(), e.atomic_eth.is_some())? {
            e.atomic_eth.unwrap_or_default().emit(&mut ext[o..])?;
        }
        if let Some(o) = need(layout.aeth_offset(), e.aeth.is_some())? {
            if let Some(a) = e.aeth {
                a.emit(&mut ext[o..])?;
            }
        }
        if let Some(o) = need(layout.atomic_ack_eth_offset(), e.atomic_ack_eth.is_some())? {
            e.atomic_ack_eth.unwrap_or_default().emit(&mut ext[o..])?;
        }
        if let Some(o) = need(layout.immdt_offset(), e.immdt.is_some())? {
            e.immdt.unwrap_or_default().emit(&mut ext[o..])?;
        }
        if let Some(o) = need(layout.ieth_offset(), e.ieth.is_some())? {
            e.ieth.unwrap_or_default().emit(&mut ext[o..])?;
        }
        let p = layout.len();
        ext[p..p + self.payload.len()].copy_from_slice(self.payload);

        icrc::fill(&mut buf[l3..]).map_err(|_| Error::Malformed)?;
        Ok(len)
    }

    /// Emits into a new `Vec`.
    ///
    /// # Errors
    /// As [`Self::emit`].
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.frame_len()?];
        self.emit(&mut v)?;
        Ok(v)
    }
}

/// Every extension header, with fixed sample values: a frame of any opcode built from it
/// carries exactly the headers its layout names (tests that sweep opcodes).
#[cfg(any(test, feature = "testkit"))]
pub fn every_ext() -> ExtRepr {
    ExtRepr {
        deth: Some(DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x12,
        }),
        feth: Some(FethRepr {
            placement_type: 1,
            selectivity: 1,
        }),
        reth: Some(RethRepr {
            virtual_address: 0x1000,
            rkey: 0x77,
            dma_len: 4096,
        }),
        atomic_eth: Some(AtomicEthRepr {
            virtual_address: 8,
            rkey: 9,
            swap_add: 1,
            compare: 0,
        }),
        aeth: Some(AethRepr {
            syndrome: super::aeth::Syndrome::Ack { credits: 31 },
            msn: 5,
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: 42 }),
        immdt: Some(ImmDtRepr { imm: 0xdead_beef }),
        ieth: Some(IethRepr { rkey: 0x55 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_of_a_soft_roce_header() {
        // Header of frame 16 of tests/data/rxe-rc-ops.pcap with its checksum (0x12ad) zeroed.
        let h = [
            0x45, 0x00, 0x00, 0x30, 0x13, 0x48, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x63,
            0x00, 0x01, 0x0a, 0x63, 0x00, 0x02,
        ];
        assert_eq!(ipv4_header_checksum(&h), 0x12ad);
    }

    #[test]
    fn pads_to_four() {
        assert_eq!([0, 1, 2, 3, 4, 5].map(pad_for), [0, 3, 2, 1, 0, 3]);
    }
}
