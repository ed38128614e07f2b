//! The switch's own control traffic on the wire: answers to ARP, IPv6 neighbour solicitation
//! and ICMP echo for its addresses (rewritten in place, no allocation), ARP requests and
//! neighbour solicitations it sends to resolve next hops (the checksum arithmetic is
//! [`super::checksum`]'s).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::checksum::{fold, ipv6_l4_checksum, ones_sum};
use super::frame::ipv4_header_checksum;

/// Turns an ARP request (frame with its ARP packet at `l3`) for `our_ip` into the reply,
/// in place: Ethernet back to the requester from `our_mac`.
pub fn arp_reply_in_place(frame: &mut [u8], l3: usize, our_mac: [u8; 6], our_ip: Ipv4Addr) {
    let mut requester = [0u8; 6];
    requester.copy_from_slice(&frame[6..12]);
    frame[0..6].copy_from_slice(&requester);
    frame[6..12].copy_from_slice(&our_mac);
    let a = &mut frame[l3..l3 + 28];
    a[6..8].copy_from_slice(&2u16.to_be_bytes());
    // target <- sender; sender <- us
    let mut sender = [0u8; 10];
    sender.copy_from_slice(&a[8..18]);
    a[18..28].copy_from_slice(&sender);
    a[8..14].copy_from_slice(&our_mac);
    a[14..18].copy_from_slice(&our_ip.octets());
}

/// Writes an ARP request for `target` from `our_mac`/`our_ip` into `buf`; returns its length
/// (42 bytes; the port pads short frames if it needs to).
pub fn arp_request(buf: &mut [u8], our_mac: [u8; 6], our_ip: Ipv4Addr, target: Ipv4Addr) -> usize {
    let f = &mut buf[..42];
    f.fill(0);
    f[0..6].copy_from_slice(&[0xFF; 6]);
    f[6..12].copy_from_slice(&our_mac);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f[22..28].copy_from_slice(&our_mac);
    f[28..32].copy_from_slice(&our_ip.octets());
    f[38..42].copy_from_slice(&target.octets());
    42
}

/// The solicited-node multicast address of `a` (ff02::1:ffXX:XXXX).
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

fn multicast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Writes an IPv6 neighbour solicitation for `target` into `buf`; returns its length (86).
pub fn neighbor_solicit(
    buf: &mut [u8],
    our_mac: [u8; 6],
    our_ip: Ipv6Addr,
    target: Ipv6Addr,
) -> usize {
    let dst = solicited_node(target);
    let f = &mut buf[..86];
    f.fill(0);
    f[0..6].copy_from_slice(&multicast_mac(dst));
    f[6..12].copy_from_slice(&our_mac);
    f[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
    let ip = &mut f[14..54];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = 58;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&our_ip.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    let icmp = &mut f[54..86];
    icmp[0] = 135;
    icmp[8..24].copy_from_slice(&target.octets());
    icmp[24] = 1; // source link-layer address option
    icmp[25] = 1;
    icmp[26..32].copy_from_slice(&our_mac);
    let c = ipv6_l4_checksum(&our_ip.octets(), &dst.octets(), 58, &f[54..86]);
    f[56..58].copy_from_slice(&c.to_be_bytes());
    86
}

/// Turns a neighbour solicitation for `target` (one of our addresses) into the advertisement,
/// in place. `l3` is the IPv6 header offset. Returns the new frame length (the NS may lack the
/// link-layer option that the NA always carries), or `None` if the frame is too small to grow.
pub fn nd_advert_in_place(
    frame: &mut [u8],
    l3: usize,
    our_mac: [u8; 6],
    target: Ipv6Addr,
) -> Option<usize> {
    let new_len = l3 + 40 + 32;
    if frame.len() < new_len {
        return None;
    }
    let mut src = [0u8; 16];
    src.copy_from_slice(&frame[l3 + 8..l3 + 24]);
    let solicited = src != [0u8; 16];
    let dst: [u8; 16] = if solicited {
        src
    } else {
        Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1).octets()
    };
    let mut requester = [0u8; 6];
    requester.copy_from_slice(&frame[6..12]);
    let dst_mac = if solicited {
        requester
    } else {
        multicast_mac(Ipv6Addr::from(dst))
    };
    frame[0..6].copy_from_slice(&dst_mac);
    frame[6..12].copy_from_slice(&our_mac);
    let ip = &mut frame[l3..l3 + 40];
    ip[0] = 0x60;
    ip[1] = 0;
    ip[2] = 0;
    ip[3] = 0;
    ip[4..6].copy_from_slice(&32u16.to_be_bytes());
    ip[6] = 58;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&target.octets());
    ip[24..40].copy_from_slice(&dst);
    let icmp = &mut frame[l3 + 40..new_len];
    icmp[0] = 136;
    icmp[1] = 0;
    icmp[2] = 0;
    icmp[3] = 0;
    // Router, Solicited (when answering a unicast-sourced NS), Override.
    icmp[4] = 0x80 | if solicited { 0x40 } else { 0 } | 0x20;
    icmp[5..8].fill(0);
    icmp[8..24].copy_from_slice(&target.octets());
    icmp[24] = 2; // target link-layer address option
    icmp[25] = 1;
    icmp[26..32].copy_from_slice(&our_mac);
    let c = ipv6_l4_checksum(&target.octets(), &dst, 58, &frame[l3 + 40..new_len]);
    frame[l3 + 42..l3 + 44].copy_from_slice(&c.to_be_bytes());
    Some(new_len)
}

/// Turns an ICMP / ICMPv6 echo request to `our_ip` into the reply, in place. `l3`/`l4` are the
/// header offsets and `end` the end of the IP packet.
pub fn echo_reply_in_place(frame: &mut [u8], l3: usize, l4: usize, end: usize, our_mac: [u8; 6]) {
    let mut requester = [0u8; 6];
    requester.copy_from_slice(&frame[6..12]);
    frame[0..6].copy_from_slice(&requester);
    frame[6..12].copy_from_slice(&our_mac);
    if frame[l3] >> 4 == 4 {
        let ihl = usize::from(frame[l3] & 0x0F) * 4;
        let mut a = [0u8; 4];
        a.copy_from_slice(&frame[l3 + 12..l3 + 16]);
        frame.copy_within(l3 + 16..l3 + 20, l3 + 12);
        frame[l3 + 16..l3 + 20].copy_from_slice(&a);
        frame[l3 + 8] = 64;
        frame[l3 + 10] = 0;
        frame[l3 + 11] = 0;
        let c = ipv4_header_checksum(&frame[l3..l3 + ihl]);
        frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        frame[l4] = 0; // echo reply
        frame[l4 + 2] = 0;
        frame[l4 + 3] = 0;
        let c = fold(ones_sum(&frame[l4..end], 0));
        frame[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&frame[l3 + 8..l3 + 24]);
        frame.copy_within(l3 + 24..l3 + 40, l3 + 8);
        frame[l3 + 24..l3 + 40].copy_from_slice(&a);
        frame[l3 + 7] = 64;
        frame[l4] = 129;
        frame[l4 + 2] = 0;
        frame[l4 + 3] = 0;
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&frame[l3 + 8..l3 + 24]);
        dst.copy_from_slice(&frame[l3 + 24..l3 + 40]);
        let c = ipv6_l4_checksum(&src, &dst, 58, &frame[l4..end]);
        frame[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
    }
}

/// The target address of a neighbour solicitation/advertisement whose ICMPv6 header is at `l4`.
pub fn nd_target(frame: &[u8], l4: usize) -> Option<Ipv6Addr> {
    let t: [u8; 16] = frame.get(l4 + 8..l4 + 24)?.try_into().ok()?;
    Some(Ipv6Addr::from(t))
}

/// The link-layer address option (type 1 source or 2 target) of an ND message, if present.
pub fn nd_lladdr(frame: &[u8], l4: usize, end: usize, opt_type: u8) -> Option<[u8; 6]> {
    let mut at = l4 + 24;
    while at + 8 <= end.min(frame.len()) {
        let ty = frame[at];
        let len = usize::from(frame[at + 1]) * 8;
        if len == 0 {
            return None;
        }
        if ty == opt_type && len >= 8 {
            return frame[at + 2..at + 8].try_into().ok();
        }
        at += len;
    }
    None
}

/// An address of either family as IPv4, when it is one.
pub fn as_v4(a: IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(v) => Some(v),
        IpAddr::V6(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::checksum::ipv4_checksum_ok;
    use crate::wire::{classify, FrameClass, L4Summary, Pmtu};

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    #[test]
    fn arp_request_and_reply() {
        let mut f = [0u8; 60];
        let n = arp_request(
            &mut f,
            [2, 0, 0, 0, 0, 9],
            Ipv4Addr::new(10, 0, 1, 2),
            Ipv4Addr::new(10, 0, 1, 1),
        );
        let mut frame = f[..n].to_vec();
        arp_reply_in_place(&mut frame, 14, MAC, Ipv4Addr::new(10, 0, 1, 1));
        let c = classify(&frame, Pmtu::DEFAULT).unwrap();
        let FrameClass::Arp(a) = c.class else {
            panic!()
        };
        assert_eq!(a.operation, 2);
        assert_eq!(
            (a.sender_mac, a.sender_ip),
            (MAC, Ipv4Addr::new(10, 0, 1, 1))
        );
        assert_eq!(
            (a.target_mac, a.target_ip),
            ([2, 0, 0, 0, 0, 9], Ipv4Addr::new(10, 0, 1, 2))
        );
        assert_eq!(c.eth.dst, [2, 0, 0, 0, 0, 9]);
    }

    #[test]
    fn neighbor_solicit_then_advert() {
        let me: Ipv6Addr = "fd00:1::2".parse().unwrap();
        let sw: Ipv6Addr = "fd00:1::1".parse().unwrap();
        let mut buf = [0u8; 128];
        let n = neighbor_solicit(&mut buf, [2, 0, 0, 0, 0, 9], me, sw);
        let ns = &buf[..n];
        let c = classify(ns, Pmtu::DEFAULT).unwrap();
        let ip = c.ip().unwrap();
        assert!(ip.is_neighbor_discovery());
        assert_eq!(ip.dst, IpAddr::V6(solicited_node(sw)));
        assert_eq!(
            ipv6_l4_checksum(&me.octets(), &solicited_node(sw).octets(), 58, &ns[54..86]),
            0
        );
        assert_eq!(nd_target(ns, 54), Some(sw));
        assert_eq!(nd_lladdr(ns, 54, 86, 1), Some([2, 0, 0, 0, 0, 9]));
        let mut frame = ns.to_vec();
        let len = nd_advert_in_place(&mut frame, 14, MAC, sw).unwrap();
        let na = &frame[..len];
        let c = classify(na, Pmtu::DEFAULT).unwrap();
        let ip = c.ip().unwrap();
        assert_eq!(
            ip.l4,
            L4Summary::Icmpv6 {
                icmp_type: 136,
                code: 0
            }
        );
        assert_eq!((ip.src, ip.dst), (IpAddr::V6(sw), IpAddr::V6(me)));
        assert_eq!(
            ipv6_l4_checksum(&sw.octets(), &me.octets(), 58, &na[54..86]),
            0
        );
        assert_eq!(nd_lladdr(na, 54, 86, 2), Some(MAC));
        assert_eq!(c.eth.dst, [2, 0, 0, 0, 0, 9]);
    }

    #[test]
    fn echo_reply_v4() {
        // 10.99.0.2 -> 10.99.0.1 echo request, id 1 seq 0, with a valid ICMP checksum.
        let mut f = vec![
            0x52, 0x54, 0x00, 0x99, 0x00, 0x01, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x08, 0x00,
            0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 0x0a, 0x63,
            0x00, 0x02, 0x0a, 0x63, 0x00, 0x01, 0x08, 0x00, 0xf7, 0xfe, 0x00, 0x01, 0x00, 0x00,
        ];
        let c = ipv4_header_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        echo_reply_in_place(&mut f, 14, 34, 42, MAC);
        let c = classify(&f, Pmtu::DEFAULT).unwrap();
        let ip = c.ip().unwrap();
        assert_eq!(
            ip.l4,
            L4Summary::Icmpv4 {
                icmp_type: 0,
                code: 0
            }
        );
        assert_eq!(ip.src, IpAddr::V4(Ipv4Addr::new(10, 99, 0, 1)));
        assert!(ipv4_checksum_ok(&f[14..34]));
        assert_eq!(fold(ones_sum(&f[34..42], 0)), 0);
        assert_eq!(&f[0..6], &[0x52, 0x54, 0x00, 0x99, 0x00, 0x02]);
    }
}
