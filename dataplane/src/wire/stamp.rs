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
//! **Sources.** The destination may also take all hosts behind one source ToR as one source
//! (`stamp_source_prefix` of `[reorder]`, the rack's subnet): they share the worker's counter,
//! so a host that stopped sending (a Go-Back-N QP at its window, waiting for the gap to be
//! found) is proven by its neighbours' packets.
//!
//! **Lanes.** A ToR with several workers has several counters. With `path_stamp_lanes`
//! (`[switch]`: 1, 2, 4 or 8, the same on every ToR of the fabric) a stamp's top bits name its
//! counter (the worker's index modulo the lanes) and the rest count. Each lane bit halves how
//! far stamps compare (a path may lag the others by at most 2^14 of its source's stamps with
//! one lane, 2^11 with eight): one lane, the default, keeps all 16 bits for the count. The
//! destination reads the count scaled back to 16 bits (shifted up by the lane bits), so stamps
//! compare the same whatever the lanes.
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

/// Most lane bits a stamp has (8 lanes).
pub const MAX_LANE_BITS: u8 = 3;

/// A worker's stamp counter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stamper {
    lane_bits: u8,
    /// The lane, already in the stamp's top bits.
    lane_high: u16,
    last: u16,
}

impl Stamper {
    /// The counter of worker `worker` with `lane_bits` lane bits (at most [`MAX_LANE_BITS`]):
    /// its lane is the index modulo the lanes.
    pub fn new(worker: usize, lane_bits: u8) -> Stamper {
        let lane_bits = lane_bits.min(MAX_LANE_BITS);
        let lane = (worker & ((1 << lane_bits) - 1)) as u16;
        Stamper {
            lane_bits,
            lane_high: lane.checked_shl(16 - u32::from(lane_bits)).unwrap_or(0),
            last: 0,
        }
    }

    /// Its lane bits.
    pub fn lane_bits(&self) -> u8 {
        self.lane_bits
    }

    /// The next stamp: the lane above the count, which is never 0 (so no stamp is 0).
    #[inline]
    pub fn stamp(&mut self) -> u16 {
        // Everything read before `last` is written: reading the lane after that store, as one
        // wider load over both fields, stalled on store forwarding (72% of `restamp` in the
        // source role's profile).
        let (high, mask) = (self.lane_high, u16::MAX >> self.lane_bits);
        let next = match self.last.wrapping_add(1) & mask {
            0 => 1,
            s => s,
        };
        self.last = next;
        high | next
    }
}

/// A stamp's lane and its count scaled to 16 bits (shifted up by the lane bits; 0: no stamp),
/// read with `lane_bits` lane bits.
#[inline]
pub fn split(stamp: u16, lane_bits: u8) -> (u8, u16) {
    match lane_bits.min(MAX_LANE_BITS) {
        0 => (0, stamp),
        b => ((stamp >> (16 - b)) as u8, stamp << b),
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

/// Clears the stamp of a RoCEv2 frame (Ethernet, an optional VLAN tag, IPv4 or IPv6, UDP):
/// a frame held back and sent later would carry a stamp older than those sent meanwhile. A
/// frame of anything else is left as it is.
pub fn clear(frame: &mut [u8]) {
    let mut at = 12;
    let mut ethertype = frame
        .get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]));
    if ethertype == Some(0x8100) {
        at += 4;
        ethertype = frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]));
    }
    let ip = at + 2;
    let l4 = match ethertype {
        Some(0x0800) => match frame.get(ip) {
            Some(v) if v >> 4 == 4 && frame.get(ip + 9) == Some(&17) => {
                ip + usize::from(v & 0x0f) * 4
            }
            _ => return,
        },
        Some(0x86DD) if frame.get(ip + 6) == Some(&17) => ip + 40,
        _ => return,
    };
    take(frame, l4);
}

/// Whether stamp `a` was given after `b` by the same counter (serial-number order over 16
/// bits, counts scaled by [`split`]: within half the space).
#[inline]
pub fn is_after(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_skips_zero_and_wraps_in_order() {
        // One lane: all 16 bits count.
        let mut s = Stamper::new(5, 0);
        s.last = u16::MAX - 1;
        assert_eq!(s.stamp(), u16::MAX);
        assert_eq!(s.stamp(), 1);
        assert_eq!(split(7, 0), (0, 7));
        assert!(is_after(1, u16::MAX));
        assert!(!is_after(u16::MAX, 1));
        assert!(!is_after(7, 7));
    }

    #[test]
    fn lanes_name_the_worker_and_counts_compare_scaled() {
        // Eight lanes: worker 13 is lane 5, 13 bits count.
        let mut s = Stamper::new(13, 3);
        s.last = 0x1FFE;
        let a = s.stamp();
        assert_eq!(a, 5 << 13 | 0x1FFF);
        let b = s.stamp();
        assert_eq!(b, 5 << 13 | 1, "the count skips 0 on its wrap");
        let (la, sa) = split(a, 3);
        let (lb, sb) = split(b, 3);
        assert_eq!((la, lb), (5, 5));
        assert_eq!((sa, sb), (0x1FFF << 3, 1 << 3));
        assert!(is_after(sb, sa), "in order across the wrap");
        // Worker 0's stamps are never 0, whatever the lanes.
        for bits in 0..=MAX_LANE_BITS {
            let mut w0 = Stamper::new(0, bits);
            assert!((0..70_000).all(|_| {
                let st = w0.stamp();
                st != 0 && split(st, bits).1 != 0
            }));
        }
        assert_eq!(Stamper::new(3, 9).lane_bits(), MAX_LANE_BITS);
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
