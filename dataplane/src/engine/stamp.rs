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
//! **Lanes.** A stamp's top [`LANE_BITS`] bits name its counter (the worker's index, modulo
//! [`LANES`]), the rest count. The destination ToR can so take the stamps of every host behind
//! one source ToR worker as one sequence (`stamp_source_prefix` of the `[reorder]` section):
//! a host that stopped sending (a Go-Back-N QP at its window, waiting for the gap to be found)
//! is then proven by the packets of its neighbours.
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

/// Bits of a stamp that name its counter (its lane).
pub const LANE_BITS: u32 = 3;

/// Counters a source ToR's stamps tell apart (workers beyond share a lane: refused by the
/// configuration).
pub const LANES: usize = 1 << LANE_BITS;

/// Bits of a stamp that count.
pub const COUNT_BITS: u32 = 16 - LANE_BITS;

/// The counting part of a stamp.
pub const COUNT_MASK: u16 = (1 << COUNT_BITS) - 1;

/// A worker's stamp counter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stamper {
    lane: u16,
    last: u16,
}

impl Stamper {
    /// The counter of worker `worker` (its lane: the index modulo [`LANES`]).
    pub fn new(worker: usize) -> Stamper {
        Stamper {
            lane: (worker % LANES) as u16,
            last: 0,
        }
    }

    /// The next stamp: the lane above the count, which is never 0 (so no stamp is 0).
    #[inline]
    pub fn stamp(&mut self) -> u16 {
        self.last = match self.last.wrapping_add(1) & COUNT_MASK {
            0 => 1,
            s => s,
        };
        (self.lane << COUNT_BITS) | self.last
    }
}

/// A stamp's lane and count (count 0: no stamp).
#[inline]
pub fn split(stamp: u16) -> (u8, u16) {
    ((stamp >> COUNT_BITS) as u8, stamp & COUNT_MASK)
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

/// Whether count `a` was given after `b` by the same counter (serial-number order over
/// [`COUNT_BITS`] bits: within half the space).
#[inline]
pub fn is_after(a: u16, b: u16) -> bool {
    let d = a.wrapping_sub(b) & COUNT_MASK;
    d != 0 && d < 1 << (COUNT_BITS - 1)
}

/// How far count `a` is behind `b` (modulo the count's space).
#[inline]
pub fn behind(a: u16, b: u16) -> u16 {
    b.wrapping_sub(a) & COUNT_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_skips_zero_and_wraps_in_order() {
        let mut s = Stamper::new(LANES + 5);
        s.last = COUNT_MASK - 1;
        assert_eq!(split(s.stamp()), (5, COUNT_MASK));
        let first = s.stamp();
        assert_eq!(split(first), (5, 1), "the count skips 0 on its wrap");
        assert_eq!(first, 5 << COUNT_BITS | 1);
        assert!(is_after(1, COUNT_MASK));
        assert!(!is_after(COUNT_MASK, 1));
        assert!(!is_after(7, 7));
        assert!(is_after(7, 6) && !is_after(6, 7));
        let half = 1 << (COUNT_BITS - 1);
        assert!(is_after(half - 1, 0) && !is_after(half, 0));
        assert_eq!(behind(COUNT_MASK, 2), 3);
        // Worker 0's stamps are never 0 either.
        let mut w0 = Stamper::new(0);
        assert!((0..3 * COUNT_MASK).all(|_| w0.stamp() != 0));
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
