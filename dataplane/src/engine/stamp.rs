//! Path stamps: a send sequence the source ToR writes into the UDP checksum of each RoCE
//! packet it sends over a path-order fabric path, and the destination ToR reads and clears
//! before the host sees the packet.
//!
//! **Why.** Path-order loss detection ([`crate::reorder`]'s `paths`) declares a gap lost once
//! every path a stream uses has delivered a PSN above it. A QP's own packets are sparse on each
//! path (a QP of 32 sharing the fabric sends a packet every few hundred microseconds), so the
//! slowest path's proof comes late. Every packet a source host sends is proof, though: paths
//! are FIFO, so once a path has delivered a packet the source sent after the gap's packet, the
//! gap's packet is not in flight on that path. PSNs of different QPs cannot be compared; the
//! stamp can: one counter per worker of the source ToR, and a host's packets enter one worker
//! (one downlink port), so each source host's stamps rise on every path.
//!
//! **Why the UDP checksum.** It is the one field of a RoCEv2 packet that is masked out of the
//! ICRC and means nothing to a RoCE receiver: RoCEv2 senders set it to zero (rxe does, over
//! IPv4 and IPv6 alike: every frame of the captures in `tests/data/`). The destination ToR
//! sets it to zero again towards its hosts, whatever it carried: a host's stack would check a
//! non-zero UDP checksum and drop the packet.
//!
//! **Zero is no stamp.** The counter skips it, so a packet of a source ToR that does not stamp
//! (its checksum zero) gives no evidence.

/// The UDP checksum's offset in the UDP header.
pub const UDP_CHECKSUM: usize = 6;

/// A worker's stamp counter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stamper {
    last: u16,
}

impl Stamper {
    /// The next stamp (never 0).
    #[inline]
    pub fn stamp(&mut self) -> u16 {
        self.last = match self.last.wrapping_add(1) {
            0 => 1,
            s => s,
        };
        self.last
    }
}

/// Writes `stamp` into the UDP checksum of the datagram at `l4` (a no-op on a short frame).
#[inline]
pub fn put(frame: &mut [u8], l4: usize, stamp: u16) {
    if let Some(b) = frame.get_mut(l4 + UDP_CHECKSUM..l4 + UDP_CHECKSUM + 2) {
        b.copy_from_slice(&stamp.to_be_bytes());
    }
}

/// Reads the UDP checksum of the datagram at `l4` as a stamp and sets it to zero.
#[inline]
pub fn take(frame: &mut [u8], l4: usize) -> u16 {
    match frame.get_mut(l4 + UDP_CHECKSUM..l4 + UDP_CHECKSUM + 2) {
        Some(b) => {
            let s = u16::from_be_bytes([b[0], b[1]]);
            b.fill(0);
            s
        }
        None => 0,
    }
}

/// Whether stamp `a` was given after `b` by the same counter (serial-number order over 16
/// bits: within half the space).
#[inline]
pub fn is_after(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_skips_zero_and_wraps_in_order() {
        let mut s = Stamper { last: u16::MAX - 1 };
        assert_eq!(s.stamp(), u16::MAX);
        assert_eq!(s.stamp(), 1);
        assert!(is_after(1, u16::MAX));
        assert!(!is_after(u16::MAX, 1));
        assert!(!is_after(7, 7));
    }

    #[test]
    fn take_reads_and_clears_put_writes() {
        let mut f = [0xAAu8; 20];
        put(&mut f, 4, 0x1234);
        assert_eq!(&f[10..12], &[0x12, 0x34]);
        assert_eq!(take(&mut f, 4), 0x1234);
        assert_eq!(&f[10..12], &[0, 0]);
        assert_eq!(&f[..10], &[0xAA; 10]);
        // Too short: nothing written, no stamp.
        put(&mut f, 14, 9);
        assert_eq!(take(&mut f, 14), 0);
        assert_eq!(f[18..], [0xAA; 2]);
    }
}
