//! The RoCEv2 invariant CRC.
//!
//! CRC-32 (the Ethernet polynomial, reflected, as `crc32fast` computes it) over: 8 bytes of 0xFF
//! standing in for the InfiniBand LRH, then the IP header, UDP header, BTH, extension headers,
//! payload and pad, with the fields that routers may change replaced by all ones first:
//!
//! - IPv4: TOS (DSCP and ECN), TTL, header checksum;
//! - IPv6: traffic class, flow label, hop limit;
//! - UDP: checksum;
//! - BTH: byte 4 (FECN, BECN, reserved).
//!
//! The result is appended after the pad least significant byte first, as the Linux Soft-RoCE
//! driver does (checked against its captures in `tests/data/`). The UDP source port and the IP
//! addresses are covered: rewriting them needs a new ICRC.
//!
//! IPv4 options are covered as part of the header. IPv6 extension headers are not supported (no
//! RoCEv2 stack sends them): such packets give [`IcrcError::NotUdp`].
//!
//! Cost: one `crc32fast` pass over the packet (SIMD `pclmulqdq` where the CPU has it); see
//! `BENCHMARKS.md` for the measured ns per 1 KB and 4 KB frame.

use super::ICRC_LEN;

/// Why an ICRC could not be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IcrcError {
    /// The buffer does not start with an IPv4 or IPv6 header.
    #[error("not an IPv4 or IPv6 packet")]
    NotIp,
    /// The IP header is not directly followed by UDP.
    #[error("IP payload is not UDP (or has IPv6 extension headers)")]
    NotUdp,
    /// Too short to hold IP + UDP + BTH (+ ICRC when verifying).
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
}

const UDP_LEN: usize = 8;
const BTH_LEN: usize = 12;
/// Largest masked prefix: IPv4 with 40 bytes of options (60) + UDP + BTH.
const MAX_PREFIX: usize = 60 + UDP_LEN + BTH_LEN;

/// Computes the ICRC of an IP packet. `ip` starts at the IP header and ends at the last pad byte,
/// without the ICRC itself.
///
/// # Errors
/// [`IcrcError`] if `ip` is not IPv4/IPv6 + UDP + at least a BTH.
pub fn compute(ip: &[u8]) -> Result<u32, IcrcError> {
    let Some(&first) = ip.first() else {
        return Err(IcrcError::Truncated { need: 1, have: 0 });
    };
    let ip_len = match first >> 4 {
        4 => {
            let ihl = usize::from(first & 0x0F) * 4;
            if ihl < 20 {
                return Err(IcrcError::NotIp);
            }
            if ip.len() > 9 && ip[9] != 17 {
                return Err(IcrcError::NotUdp);
            }
            ihl
        }
        6 => {
            if ip.len() > 6 && ip[6] != 17 {
                return Err(IcrcError::NotUdp);
            }
            40
        }
        _ => return Err(IcrcError::NotIp),
    };
    let prefix = ip_len + UDP_LEN + BTH_LEN;
    if ip.len() < prefix {
        return Err(IcrcError::Truncated {
            need: prefix,
            have: ip.len(),
        });
    }

    let mut masked = [0u8; MAX_PREFIX];
    let m = &mut masked[..prefix];
    m.copy_from_slice(&ip[..prefix]);
    if ip_len == 40 {
        // Version stays; traffic class and flow label become ones; hop limit too.
        m[0] |= 0x0F;
        m[1] = 0xFF;
        m[2] = 0xFF;
        m[3] = 0xFF;
        m[7] = 0xFF;
    } else {
        m[1] = 0xFF; // TOS: DSCP + ECN
        m[8] = 0xFF; // TTL
        m[10] = 0xFF; // header checksum
        m[11] = 0xFF;
    }
    let udp = ip_len;
    m[udp + 6] = 0xFF; // UDP checksum
    m[udp + 7] = 0xFF;
    m[udp + UDP_LEN + 4] = 0xFF; // BTH FECN/BECN/reserved

    let mut h = crc32fast::Hasher::new();
    h.update(&[0xFF; 8]);
    h.update(m);
    h.update(&ip[prefix..]);
    Ok(h.finalize())
}

/// Checks the ICRC at the end of `ip` (IP header through ICRC).
///
/// # Errors
/// As [`compute`], for the packet without its last 4 bytes.
pub fn verify(ip: &[u8]) -> Result<bool, IcrcError> {
    let (body, stored) = split(ip)?;
    Ok(compute(body)? == u32::from_le_bytes(stored))
}

/// The ICRC stored at the end of `ip`, as a value comparable with [`compute`].
///
/// # Errors
/// [`IcrcError::Truncated`] if `ip` is shorter than 4 bytes.
pub fn stored(ip: &[u8]) -> Result<u32, IcrcError> {
    Ok(u32::from_le_bytes(split(ip)?.1))
}

/// Computes the ICRC of `ip` (IP header through ICRC) and writes it into the last 4 bytes.
///
/// # Errors
/// As [`compute`].
pub fn fill(ip: &mut [u8]) -> Result<u32, IcrcError> {
    let body_len = split(ip)?.0.len();
    let crc = compute(&ip[..body_len])?;
    ip[body_len..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

fn split(ip: &[u8]) -> Result<(&[u8], [u8; 4]), IcrcError> {
    let min = 20 + UDP_LEN + BTH_LEN + ICRC_LEN;
    if ip.len() < min {
        return Err(IcrcError::Truncated {
            need: min,
            have: ip.len(),
        });
    }
    let (body, tail) = ip.split_at(ip.len() - ICRC_LEN);
    let mut s = [0u8; 4];
    s.copy_from_slice(tail);
    Ok((body, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame 16 of tests/data/rxe-rc-ops.pcap from the IP header on: an RC ACK sent by the
    /// Linux Soft-RoCE driver (an independent RoCEv2 implementation).
    const RXE_ACK_IP: [u8; 48] = [
        0x45, 0x00, 0x00, 0x30, 0x13, 0x48, 0x40, 0x00, 0x40, 0x11, 0x12, 0xad, 0x0a, 0x63, 0x00,
        0x01, 0x0a, 0x63, 0x00, 0x02, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00,
        0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x2f, 0xeb, 0x69, 0x1f, 0x00, 0x00, 0x01, 0xfd,
        0xad, 0x81, 0x46,
    ];

    #[test]
    fn verifies_a_soft_roce_ack() {
        assert_eq!(verify(&RXE_ACK_IP), Ok(true));
        assert_eq!(stored(&RXE_ACK_IP), Ok(0x4681_adfd));
    }

    #[test]
    fn masked_fields_do_not_matter_and_others_do() {
        let good = RXE_ACK_IP;
        // TOS (ECN marking), TTL, IP checksum, UDP checksum and FECN/BECN are masked.
        for (idx, val) in [
            (1, 0x03),
            (8, 0x3f),
            (10, 0x00),
            (11, 0x00),
            (26, 0x12),
            (32, 0xc0),
        ] {
            let mut p = good;
            p[idx] = val;
            assert_eq!(verify(&p), Ok(true), "byte {idx} should be masked");
        }
        // Addresses, UDP source port, opcode, QP, PSN and payload are covered.
        for idx in [12, 19, 20, 21, 28, 35, 41, 43] {
            let mut p = good;
            p[idx] ^= 0x01;
            assert_eq!(verify(&p), Ok(false), "byte {idx} should be covered");
        }
    }

    #[test]
    fn fill_writes_what_verify_accepts() {
        let mut p = RXE_ACK_IP;
        p[44..].fill(0);
        assert_eq!(fill(&mut p), Ok(0x4681_adfd));
        assert_eq!(p, RXE_ACK_IP);
    }

    #[test]
    fn errors_instead_of_panics() {
        assert_eq!(compute(&[]), Err(IcrcError::Truncated { need: 1, have: 0 }));
        assert_eq!(compute(&[0x55; 60]), Err(IcrcError::NotIp));
        assert_eq!(compute(&[0x41; 60]), Err(IcrcError::NotIp), "IHL below 5");
        let mut tcp = RXE_ACK_IP;
        tcp[9] = 6;
        assert_eq!(verify(&tcp), Err(IcrcError::NotUdp));
        for n in 0..RXE_ACK_IP.len() {
            let _ = verify(&RXE_ACK_IP[..n]);
            let _ = compute(&RXE_ACK_IP[..n]);
        }
        let mut v6 = [0u8; 64];
        v6[0] = 0x60;
        v6[6] = 0;
        assert_eq!(
            compute(&v6),
            Err(IcrcError::NotUdp),
            "hop-by-hop extension header"
        );
        v6[6] = 17;
        assert_eq!(
            compute(&v6[..59]),
            Err(IcrcError::Truncated { need: 60, have: 59 })
        );
    }
}
