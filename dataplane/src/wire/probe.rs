//! Path probes: what two sprayswitch ToRs send each other over every member of an uplink group
//! with path health on, to tell a failing fabric path from a working one.
//!
//! A probe is a UDP datagram to [`PROBE_UDP_PORT`] from one ToR's address to the other's, sent
//! out one member uplink; in a two-tier leaf-spine it crosses exactly one spine each way, so a
//! member's probes and the peer's probes back over the same member measure that path in both
//! directions. Each side sends its own probes every interval (no request and reply: both
//! directions carry a sequence) and reports in each what it received of the other side's:
//! how many, and the highest sequence number. The sender of probes `1..=top` learns that
//! `count` of them arrived, so it knows the loss of its own direction exactly, which is the
//! direction its spraying uses.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      Magic ("SPRB")                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |     Flags     |           Reserved            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Session (sender's)                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                     Sequence number                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Session received (the peer's, 0: none)           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Probes received of that session                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Highest sequence number received                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Send time (sender's clock, microseconds)         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! - Session: a number the sender draws when it starts probing a peer over a path (never 0),
//!   so that the counts of a restarted peer are not taken for the old one's.
//! - Flags: bit 0, [`FLAG_SPRAYING`], the sender sprays over this path now.
//! - Send time: when the sender sent it, in microseconds of its own clock (wrapping): the
//!   receiver compares only send times of one sender, so it can tell a path whose probes stopped
//!   while the sender went on probing over others from one whose probes are merely late.
//!
//! Probes go with DSCP CS6 (network control) and ECN not-ECT. Over IPv4 the UDP checksum is
//! zero (allowed); over IPv6 it is computed, as IPv6 requires.

use std::net::IpAddr;

use super::checksum::ipv6_l4_checksum;
use super::frame::ipv4_header_checksum;
use super::{read_u32, Error, Result};

/// The UDP destination (and source) port of path probes.
pub const PROBE_UDP_PORT: u16 = 7784;

/// The first four payload bytes of every probe.
pub const MAGIC: [u8; 4] = *b"SPRB";

/// The probe format's version.
pub const VERSION: u8 = 1;

/// Flag: the sender sprays over the path this probe took.
pub const FLAG_SPRAYING: u8 = 1;

/// DSCP CS6 (network control) in the TOS byte, ECN not-ECT.
const TOS_CS6: u8 = 48 << 2;

fixed_header_view!(
    /// A checked view of a probe's 32-byte payload.
    Probe,
    32
);

mod field {
    use core::ops::Range;
    pub(super) const MAGIC: Range<usize> = 0..4;
    pub(super) const VERSION: usize = 4;
    pub(super) const FLAGS: usize = 5;
    pub(super) const SESSION: Range<usize> = 8..12;
    pub(super) const SEQ: Range<usize> = 12..16;
    pub(super) const RX_SESSION: Range<usize> = 16..20;
    pub(super) const RX_COUNT: Range<usize> = 20..24;
    pub(super) const RX_TOP: Range<usize> = 24..28;
    pub(super) const TX_US: Range<usize> = 28..32;
}

impl<T: AsRef<[u8]>> Probe<T> {
    /// Whether the magic and version are a probe's.
    pub fn is_probe(&self) -> bool {
        let b = self.buffer.as_ref();
        b[field::MAGIC] == MAGIC && b[field::VERSION] == VERSION
    }
    /// Flags.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// The sender's session.
    pub fn session(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::SESSION])
    }
    /// The sender's sequence number.
    pub fn seq(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::SEQ])
    }
    /// The session of the receiver's probes that the counts below are of (0: none yet).
    pub fn rx_session(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::RX_SESSION])
    }
    /// How many of those the sender received.
    pub fn rx_count(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::RX_COUNT])
    }
    /// The highest sequence number of them the sender received.
    pub fn rx_top(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::RX_TOP])
    }
    /// When the sender sent it, microseconds of its clock (wrapping).
    pub fn tx_us(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::TX_US])
    }
}

/// Emit-side probe payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProbeRepr {
    /// Flags ([`FLAG_SPRAYING`]).
    pub flags: u8,
    /// The sender's session (never 0).
    pub session: u32,
    /// The sender's sequence number.
    pub seq: u32,
    /// The receiver's session the counts are of.
    pub rx_session: u32,
    /// Probes of that session received.
    pub rx_count: u32,
    /// Highest sequence number of that session received.
    pub rx_top: u32,
    /// Send time, microseconds of the sender's clock (wrapping).
    pub tx_us: u32,
}

impl ProbeRepr {
    /// Reads a checked view.
    ///
    /// # Errors
    /// [`Error::Malformed`] if the magic or version is not a probe's.
    pub fn parse<T: AsRef<[u8]>>(v: &Probe<T>) -> Result<ProbeRepr> {
        if !v.is_probe() {
            return Err(Error::Malformed);
        }
        Ok(ProbeRepr {
            flags: v.flags(),
            session: v.session(),
            seq: v.seq(),
            rx_session: v.rx_session(),
            rx_count: v.rx_count(),
            rx_top: v.rx_top(),
            tx_us: v.tx_us(),
        })
    }

    /// Writes the payload into the first 32 bytes of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let have = buf.len();
        let b = buf.get_mut(..Probe::<&[u8]>::LEN).ok_or(Error::Truncated {
            need: Probe::<&[u8]>::LEN,
            have,
        })?;
        b.fill(0);
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION] = VERSION;
        b[field::FLAGS] = self.flags;
        b[field::SESSION].copy_from_slice(&self.session.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        b[field::RX_SESSION].copy_from_slice(&self.rx_session.to_be_bytes());
        b[field::RX_COUNT].copy_from_slice(&self.rx_count.to_be_bytes());
        b[field::RX_TOP].copy_from_slice(&self.rx_top.to_be_bytes());
        b[field::TX_US].copy_from_slice(&self.tx_us.to_be_bytes());
        Ok(())
    }
}

/// The link-layer and network addresses of a probe frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeAddrs {
    /// Source MAC (the uplink's own).
    pub src_mac: [u8; 6],
    /// Destination MAC (the uplink's next hop).
    pub dst_mac: [u8; 6],
    /// This switch's address.
    pub src: IpAddr,
    /// The peer ToR's address (same family as `src`).
    pub dst: IpAddr,
}

/// Length of a probe frame over IPv4 (Ethernet, IPv4, UDP, payload).
pub const FRAME_LEN_V4: usize = 14 + 20 + 8 + 32;
/// Length of a probe frame over IPv6.
pub const FRAME_LEN_V6: usize = 14 + 40 + 8 + 32;

/// Writes a whole probe frame into `buf`; returns its length.
///
/// # Errors
/// [`Error::Truncated`] if `buf` is too short, [`Error::Malformed`] if the addresses are of
/// different families.
pub fn emit_frame(buf: &mut [u8], a: &ProbeAddrs, p: &ProbeRepr) -> Result<usize> {
    let (len, ip_len) = match (a.src, a.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (FRAME_LEN_V4, 20),
        (IpAddr::V6(_), IpAddr::V6(_)) => (FRAME_LEN_V6, 40),
        _ => return Err(Error::Malformed),
    };
    let have = buf.len();
    let f = buf
        .get_mut(..len)
        .ok_or(Error::Truncated { need: len, have })?;
    f.fill(0);
    f[0..6].copy_from_slice(&a.dst_mac);
    f[6..12].copy_from_slice(&a.src_mac);
    let udp_len = (8 + 32) as u16;
    let l4 = 14 + ip_len;
    match (a.src, a.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let ip = &mut f[14..34];
            ip[0] = 0x45;
            ip[1] = TOS_CS6;
            ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            ip[6] = 0x40; // don't fragment
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let c = ipv4_header_checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f[12..14].copy_from_slice(&[0x86, 0xDD]);
            let ip = &mut f[14..54];
            ip[0] = 0x60 | (TOS_CS6 >> 4);
            ip[1] = (TOS_CS6 & 0x0F) << 4;
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
        }
        _ => unreachable!("families checked above"),
    }
    let udp = &mut f[l4..l4 + 8];
    udp[0..2].copy_from_slice(&PROBE_UDP_PORT.to_be_bytes());
    udp[2..4].copy_from_slice(&PROBE_UDP_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    p.emit(&mut f[l4 + 8..])?;
    if let (IpAddr::V6(s), IpAddr::V6(d)) = (a.src, a.dst) {
        let c = ipv6_l4_checksum(&s.octets(), &d.octets(), 17, &f[l4..len]);
        // A computed 0 is sent as all ones (RFC 8200: 0 means no checksum, not allowed).
        let c = if c == 0 { 0xFFFF } else { c };
        f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{classify, FrameClass, L4Summary, Pmtu};

    fn addrs(v6: bool) -> ProbeAddrs {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (
                "fd00:1:1::1".parse().unwrap(),
                "fd00:2:1::1".parse().unwrap(),
            )
        } else {
            ("10.1.1.1".parse().unwrap(), "10.2.1.1".parse().unwrap())
        };
        ProbeAddrs {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src,
            dst,
        }
    }

    #[test]
    fn a_probe_frame_parses_back_through_the_classifier() {
        let p = ProbeRepr {
            flags: FLAG_SPRAYING,
            session: 0xdead_beef,
            seq: 7,
            rx_session: 42,
            rx_count: 5,
            rx_top: 6,
            tx_us: 0xfeed_f00d,
        };
        for v6 in [false, true] {
            let mut buf = [0u8; 128];
            let n = emit_frame(&mut buf, &addrs(v6), &p).unwrap();
            assert_eq!(n, if v6 { FRAME_LEN_V6 } else { FRAME_LEN_V4 });
            let c = classify(&buf[..n], Pmtu::DEFAULT).unwrap();
            let FrameClass::Ip(ip) = c.class else {
                panic!("not IP: {:?}", c.class)
            };
            assert_eq!(
                ip.l4,
                L4Summary::Udp {
                    src_port: PROBE_UDP_PORT,
                    dst_port: PROBE_UDP_PORT
                }
            );
            assert_eq!(ip.tos >> 2, 48, "CS6");
            assert_eq!(ip.src, addrs(v6).src);
            let l4 = usize::from(ip.l4_offset);
            let view = Probe::new_checked(&buf[l4 + 8..n]).unwrap();
            assert_eq!(ProbeRepr::parse(&view).unwrap(), p);
            if v6 {
                // The UDP checksum verifies: summing over the datagram with it gives zero.
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s.copy_from_slice(&buf[22..38]);
                d.copy_from_slice(&buf[38..54]);
                assert_eq!(ipv6_l4_checksum(&s, &d, 17, &buf[l4..n]), 0);
            } else {
                assert!(crate::wire::checksum::ipv4_checksum_ok(&buf[14..34]));
            }
        }
    }

    #[test]
    fn not_a_probe_is_malformed_and_short_buffers_are_refused() {
        let mut b = [0u8; 32];
        ProbeRepr::default().emit(&mut b).unwrap();
        b[0] = b'X';
        assert_eq!(
            ProbeRepr::parse(&Probe::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed)
        );
        assert!(Probe::new_checked(&b[..31]).is_err());
        assert!(ProbeRepr::default().emit(&mut [0u8; 31]).is_err());
        let mut a = addrs(false);
        a.dst = "fd00::1".parse().unwrap();
        assert_eq!(
            emit_frame(&mut [0u8; 128], &a, &ProbeRepr::default()),
            Err(Error::Malformed)
        );
        assert!(emit_frame(&mut [0u8; 60], &addrs(false), &ProbeRepr::default()).is_err());
    }
}
