//! The ECN field of IPv4 and IPv6 (RFC 3168), the congestion mark a switch sets, and the
//! priority a frame travels in (what PFC pauses).
//!
//! ```text
//! IPv4 byte 1:             IPv6 bytes 0-1:
//! +------------+-----+     +---------+------------+-----+------------ ...
//! | DSCP (6)   | ECN |     | ver (4) | DSCP (6)   | ECN | flow label (20)
//! +------------+-----+     +---------+------------+-----+------------ ...
//! ECN: 00 Not-ECT, 01 ECT(1), 10 ECT(0), 11 CE
//! ```
//!
//! Marking CE changes the IPv4 header checksum, which is updated incrementally (RFC 1624); the
//! RoCEv2 ICRC is unaffected, because it covers the TOS byte (IPv4) and the traffic class
//! (IPv6) as all ones. Frames may carry up to two VLAN tags (802.1Q, 802.1ad) before the IP
//! header. Nothing here allocates or panics: a frame that is not IP is reported as such.

const ETH_HEADER: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

enum_with_unknown! {
    /// The two ECN bits.
    pub enum Codepoint(u8) {
        /// Not ECN-capable: never marked.
        NotEct = 0,
        /// ECN-capable, ECT(1).
        Ect1 = 1,
        /// ECN-capable, ECT(0) (what RoCEv2 senders with DCQCN set).
        Ect0 = 2,
        /// Congestion experienced.
        Ce = 3,
    }
}

/// What [`mark_ce`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mark {
    /// ECT(0) or ECT(1) became CE.
    Marked,
    /// Already CE: left as it is.
    AlreadyCe,
    /// Not ECN-capable: left as it is.
    NotEct,
    /// Not an IPv4 or IPv6 frame (or too short to be one): left as it is.
    NotIp,
}

/// Where a frame's IP header starts, and its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct L3 {
    offset: usize,
    v6: bool,
    /// PCP of the outermost VLAN tag.
    pcp: Option<u8>,
}

fn locate(frame: &[u8]) -> Option<L3> {
    let mut at = 12;
    let mut pcp = None;
    for _ in 0..3 {
        let ty = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
        match ty {
            ETHERTYPE_VLAN | ETHERTYPE_QINQ if at < 20 => {
                if pcp.is_none() {
                    pcp = Some(frame.get(at + 2)? >> 5);
                }
                at += 4;
            }
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => {
                let offset = at + 2;
                let v6 = ty == ETHERTYPE_IPV6;
                let need = if v6 { 40 } else { 20 };
                let version = frame.get(offset)? >> 4;
                if frame.len() < offset + need || version != if v6 { 6 } else { 4 } {
                    return None;
                }
                return Some(L3 { offset, v6, pcp });
            }
            _ => return None,
        }
    }
    None
}

/// The DSCP and ECN bits (the IPv4 TOS byte, the IPv6 traffic class) of an IP frame.
fn traffic_class(frame: &[u8], l3: L3) -> u8 {
    if l3.v6 {
        (frame[l3.offset] << 4) | (frame[l3.offset + 1] >> 4)
    } else {
        frame[l3.offset + 1]
    }
}

/// The ECN codepoint of an IPv4 or IPv6 frame (`None`: not IP).
pub fn codepoint(frame: &[u8]) -> Option<Codepoint> {
    let l3 = locate(frame)?;
    Some(Codepoint::from(traffic_class(frame, l3) & 3))
}

/// Marks an ECN-capable IPv4 or IPv6 frame CE in place, updating the IPv4 header checksum.
/// Untagged IPv4 takes a short path (the RoCEv2 case); the rest goes through the general one.
#[inline]
pub fn mark_ce(frame: &mut [u8]) -> Mark {
    if let Some(h) = frame.get_mut(12..34) {
        if h[0] == 0x08 && h[1] == 0x00 && h[2] >> 4 == 4 {
            let tos = h[3];
            return match tos & 3 {
                3 => Mark::AlreadyCe,
                0 => Mark::NotEct,
                _ => {
                    let old = u16::from_be_bytes([h[2], tos]);
                    h[3] = tos | 3;
                    let new = u16::from_be_bytes([h[2], h[3]]);
                    let sum = u16::from_be_bytes([h[12], h[13]]);
                    h[12..14].copy_from_slice(&checksum_update(sum, old, new).to_be_bytes());
                    Mark::Marked
                }
            };
        }
    }
    mark_general(frame)
}

fn mark_general(frame: &mut [u8]) -> Mark {
    let Some(l3) = locate(frame) else {
        return Mark::NotIp;
    };
    match Codepoint::from(traffic_class(frame, l3) & 3) {
        Codepoint::Ce => return Mark::AlreadyCe,
        Codepoint::NotEct | Codepoint::Unknown(_) => return Mark::NotEct,
        Codepoint::Ect0 | Codepoint::Ect1 => {}
    }
    let o = l3.offset;
    if l3.v6 {
        // The ECN bits are the top two bits of the traffic class's low nibble, in byte 1.
        frame[o + 1] |= 0x30;
    } else {
        let old = u16::from_be_bytes([frame[o], frame[o + 1]]);
        frame[o + 1] |= 3;
        let new = u16::from_be_bytes([frame[o], frame[o + 1]]);
        let sum = u16::from_be_bytes([frame[o + 10], frame[o + 11]]);
        frame[o + 10..o + 12].copy_from_slice(&checksum_update(sum, old, new).to_be_bytes());
    }
    Mark::Marked
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word of the header changed from `old` to
/// `new`: `HC' = ~(~HC + ~m + m')` in one's complement arithmetic.
fn checksum_update(sum: u16, old: u16, new: u16) -> u16 {
    let mut acc = u32::from(!sum) + u32::from(!old) + u32::from(new);
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The priority (0-7) a frame travels in, as a PFC-capable port classifies it: the PCP of its
/// VLAN tag, else its DSCP's class selector (DSCP >> 3, the default DSCP-to-priority map of
/// RoCE NICs that trust DSCP: DSCP 26, RoCE's usual, is priority 3), else 0.
pub fn priority(frame: &[u8]) -> u8 {
    match locate(frame) {
        Some(L3 { pcp: Some(p), .. }) => p,
        Some(l3) => traffic_class(frame, l3) >> 5,
        None => {
            // A tagged frame that is not IP still has its PCP.
            let tagged = frame.len() >= ETH_HEADER + 2
                && matches!(
                    u16::from_be_bytes([frame[12], frame[13]]),
                    ETHERTYPE_VLAN | ETHERTYPE_QINQ
                );
            if tagged {
                frame[14] >> 5
            } else {
                0
            }
        }
    }
}

/// Whether a frame travels as network control, priority 6 or 7 (CS6, CS7, or such a VLAN
/// PCP), which a switch queues ahead of data: a few byte compares, for the egress queue's
/// per-packet decision (untagged IPv4 and IPv6, or a VLAN tag's PCP; anything else is not).
#[inline]
pub fn is_network_control(frame: &[u8]) -> bool {
    match (frame.get(12), frame.get(13), frame.get(14), frame.get(15)) {
        (Some(0x08), Some(0x00), _, Some(tos)) => tos >> 5 >= 6,
        (Some(0x86), Some(0xDD), Some(b14), _) => (b14 & 0x0F) >> 1 >= 6,
        (Some(0x81), Some(0x00), Some(tci), _) => tci >> 5 >= 6,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header checksum computed from scratch.
    fn ipv4_checksum(h: &[u8]) -> u16 {
        let mut acc = 0u32;
        for (i, w) in h.chunks(2).enumerate() {
            if i == 5 {
                continue;
            }
            acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    fn ipv4_frame(tos: u8, vlan: Option<u8>) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if let Some(pcp) = vlan {
            f.extend_from_slice(&[0x81, 0x00, pcp << 5, 7]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = [
            0x45, tos, 0, 48, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 2, 10, 2, 0, 2,
        ];
        let c = ipv4_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0u8; 28]);
        f
    }

    fn ipv6_frame(tc: u8) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd]);
        f.extend_from_slice(&[0x60 | (tc >> 4), (tc << 4) | 0x0a, 0xbc, 0xde]);
        f.extend_from_slice(&[0u8; 36]);
        f
    }

    #[test]
    fn ect_ipv4_becomes_ce_with_a_correct_checksum() {
        for tos in [0x68 | 2, 0x68 | 1, 0xfe, 2, 1] {
            for vlan in [None, Some(3)] {
                let mut f = ipv4_frame(tos, vlan);
                let o = if vlan.is_some() { 18 } else { 14 };
                assert_eq!(mark_ce(&mut f), Mark::Marked, "tos {tos:#x}");
                assert_eq!(f[o + 1], tos | 3);
                let want = ipv4_checksum(&f[o..o + 20]);
                assert_eq!(u16::from_be_bytes([f[o + 10], f[o + 11]]), want);
                assert_eq!(codepoint(&f), Some(Codepoint::Ce));
                assert_eq!(mark_ce(&mut f), Mark::AlreadyCe);
            }
        }
    }

    #[test]
    fn not_ect_and_not_ip_stay_as_they_are() {
        let mut f = ipv4_frame(0x68, None);
        let before = f.clone();
        assert_eq!(mark_ce(&mut f), Mark::NotEct);
        assert_eq!(f, before);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(mark_ce(&mut arp), Mark::NotIp);
        let mut short = ipv4_frame(2, None);
        short.truncate(30);
        assert_eq!(mark_ce(&mut short), Mark::NotIp);
        let mut bad_version = ipv4_frame(2, None);
        bad_version[14] = 0x65;
        assert_eq!(mark_ce(&mut bad_version), Mark::NotIp);
    }

    #[test]
    fn ect_ipv6_becomes_ce_and_nothing_else_changes() {
        for tc in [0x68 | 2, 1, 0xfe] {
            let mut f = ipv6_frame(tc);
            let before = f.clone();
            assert_eq!(mark_ce(&mut f), Mark::Marked);
            assert_eq!(codepoint(&f), Some(Codepoint::Ce));
            let got_tc = (f[14] << 4) | (f[15] >> 4);
            assert_eq!(got_tc, tc | 3);
            assert_eq!(f[14] >> 4, 6);
            assert_eq!(f[15] & 0x0f, before[15] & 0x0f, "flow label kept");
            assert_eq!(f[16..], before[16..]);
        }
        let mut not_ect = ipv6_frame(0x68);
        assert_eq!(mark_ce(&mut not_ect), Mark::NotEct);
    }

    #[test]
    fn the_checksum_update_matches_a_full_recomputation_for_every_tos() {
        for tos in 0..=255u8 {
            let mut f = ipv4_frame(tos, None);
            let m = mark_ce(&mut f);
            let want = ipv4_checksum(&f[14..34]);
            assert_eq!(
                u16::from_be_bytes([f[24], f[25]]),
                want,
                "tos {tos:#x} {m:?}"
            );
        }
    }

    #[test]
    fn priority_comes_from_the_vlan_tag_else_the_dscp() {
        assert_eq!(priority(&ipv4_frame(26 << 2, None)), 3);
        assert_eq!(priority(&ipv4_frame(26 << 2, Some(5))), 5);
        assert_eq!(priority(&ipv6_frame(46 << 2)), 5);
        assert_eq!(priority(&[0u8; 20]), 0);
        assert_eq!(priority(&[]), 0);
    }

    #[test]
    fn network_control_is_priority_6_and_7_as_priority_reads_it() {
        let probe = {
            let mut b = [0u8; 128];
            let a = crate::wire::probe::ProbeAddrs {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
            };
            let n = crate::wire::probe::emit_frame(&mut b, &a, &Default::default()).unwrap();
            b[..n].to_vec()
        };
        assert!(is_network_control(&probe));
        assert_eq!(priority(&probe), 6);
        // Every TOS byte over IPv4 and traffic class over IPv6, tagged or not: the fast check
        // agrees with the classifier.
        for v6 in [false, true] {
            for tc in 0..=255u8 {
                let mut f = vec![0u8; 64];
                if v6 {
                    f[12..14].copy_from_slice(&[0x86, 0xDD]);
                    f[14] = 0x60 | (tc >> 4);
                    f[15] = tc << 4;
                } else {
                    f[12..14].copy_from_slice(&[0x08, 0x00]);
                    f[14] = 0x45;
                    f[15] = tc;
                }
                assert_eq!(
                    is_network_control(&f),
                    priority(&f) >= 6,
                    "tc {tc:#x} v6 {v6}"
                );
            }
        }
        let mut tagged = vec![0u8; 64];
        tagged[12..14].copy_from_slice(&[0x81, 0x00]);
        tagged[14] = 7 << 5;
        assert!(is_network_control(&tagged));
        assert!(!is_network_control(&[0u8; 10]));
    }
}
