//! 24-bit packet sequence numbers and the path MTU that sizes READ requests.
//!
//! PSNs are serial numbers modulo 2^24 (RFC 1982 style). Starting PSNs are random, so the wrap at
//! 2^24 happens in real traffic, not only in long runs. `a` is after `b` when
//! `((a - b) << 8) as i32 > 0`: the shift moves the 24-bit difference into the top of an `i32` so
//! that its sign bit is bit 23 of the difference. Never compare PSNs with plain `u32` `<`.

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number. The value is always below 2^24.
///
/// It deliberately does not implement `PartialOrd`: serial order is not transitive over the whole
/// space. Use [`Psn::serial_cmp`], [`Psn::is_after`] or [`Psn::distance`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 valid bits.
    pub const MASK: u32 = 0x00FF_FFFF;
    /// Number of distinct PSNs (2^24).
    pub const MODULUS: u32 = 1 << 24;
    /// Largest forward distance that still counts as "after" (2^23 - 1).
    pub const HALF: u32 = 1 << 23;

    /// Makes a PSN from the low 24 bits of `value`.
    #[inline]
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The PSN as an integer below 2^24.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    #[inline]
    #[must_use]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n`, wrapping at 2^24.
    #[inline]
    #[must_use]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// Signed serial distance `self - other`, in `[-2^23, 2^23)`.
    ///
    /// Wrap-around: `Psn::new(2).distance(Psn::new(0xFF_FFFE)) == 4`.
    #[inline]
    pub const fn distance(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of the word, reinterpret as signed and shift
        // back arithmetically: this sign-extends bit 23.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Forward distance from `other` to `self` modulo 2^24, in `[0, 2^24)`.
    #[inline]
    pub const fn forward_from(self, other: Psn) -> u32 {
        self.0.wrapping_sub(other.0) & Self::MASK
    }

    /// True when `self` comes strictly after `other` in serial order.
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// True when `self` comes strictly before `other` in serial order.
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }

    /// Serial comparison. The two PSNs exactly 2^23 apart compare as `Less` (the one "ahead" by
    /// exactly half the space counts as behind), which keeps the relation antisymmetric.
    #[inline]
    pub fn serial_cmp(self, other: Psn) -> Ordering {
        self.distance(other).cmp(&0)
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

/// The InfiniBand path MTU: the largest transport payload per packet, one of 256, 512, 1024, 2048
/// or 4096 bytes. It fixes how many PSNs a READ REQUEST consumes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Pmtu(u16);

impl Pmtu {
    /// 1024 bytes, the default for a RoCE port with a 1500-byte Ethernet MTU.
    pub const DEFAULT: Pmtu = Pmtu(1024);

    /// Makes a path MTU from its size in bytes.
    ///
    /// # Errors
    /// Returns the rejected value unless it is 256, 512, 1024, 2048 or 4096.
    pub const fn new(bytes: u32) -> Result<Pmtu, u32> {
        match bytes {
            256 | 512 | 1024 | 2048 | 4096 => Ok(Pmtu(bytes as u16)),
            other => Err(other),
        }
    }

    /// The largest IB path MTU whose packets fit an Ethernet MTU of `eth_mtu` bytes, allowing for
    /// IPv6 (40) + UDP (8) + BTH (12) + RETH (16) + ICRC (4) headers; `None` below 336.
    pub const fn for_ethernet_mtu(eth_mtu: u32) -> Option<Pmtu> {
        let room = eth_mtu.saturating_sub(40 + 8 + 12 + 16 + 4);
        if room >= 4096 {
            Some(Pmtu(4096))
        } else if room >= 2048 {
            Some(Pmtu(2048))
        } else if room >= 1024 {
            Some(Pmtu(1024))
        } else if room >= 512 {
            Some(Pmtu(512))
        } else if room >= 256 {
            Some(Pmtu(256))
        } else {
            None
        }
    }

    /// Size in bytes.
    #[inline]
    pub const fn bytes(self) -> u32 {
        self.0 as u32
    }

    /// PSNs consumed by a READ REQUEST of `dma_len` bytes: `max(1, ceil(dma_len / pmtu))`.
    #[inline]
    pub const fn read_span(self, dma_len: u32) -> u32 {
        let span = dma_len.div_ceil(self.0 as u32);
        if span == 0 {
            1
        } else {
            span
        }
    }
}

impl Default for Pmtu {
    fn default() -> Self {
        Pmtu::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_24() {
        let top = Psn::new(0xFF_FFFF);
        assert_eq!(top.add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), top);
        assert_eq!(top.add(3).value(), 2);
        assert_eq!(Psn::new(0x1_000_005), Psn::new(5), "new masks to 24 bits");
    }

    #[test]
    fn compares_across_the_wrap() {
        let before = Psn::new(0xFF_FFFE);
        let after = Psn::new(2);
        assert!(after.is_after(before));
        assert!(before.is_before(after));
        assert_eq!(after.distance(before), 4);
        assert_eq!(before.distance(after), -4);
        assert_eq!(after.forward_from(before), 4);
        assert_eq!(after.serial_cmp(before), Ordering::Greater);
        assert_eq!(after.serial_cmp(after), Ordering::Equal);
    }

    #[test]
    fn half_space_boundary() {
        let a = Psn::new(0);
        let b = Psn::new(Psn::HALF - 1);
        assert!(b.is_after(a));
        let c = Psn::new(Psn::HALF);
        // Exactly half the space away: treated as behind, from both sides' point of view of `c`.
        assert_eq!(c.distance(a), -(Psn::HALF as i32));
        assert!(!c.is_after(a));
    }

    #[test]
    fn read_span() {
        let p = Pmtu::new(1024).unwrap();
        assert_eq!(p.read_span(0), 1);
        assert_eq!(p.read_span(1), 1);
        assert_eq!(p.read_span(1024), 1);
        assert_eq!(p.read_span(1025), 2);
        assert_eq!(p.read_span(3000), 3);
        assert_eq!(p.read_span(u32::MAX), 4_194_304);
        assert_eq!(Pmtu::new(4096).unwrap().read_span(65536), 16);
        assert_eq!(Pmtu::new(1000), Err(1000));
        assert_eq!(Pmtu::for_ethernet_mtu(1500), Some(Pmtu::new(1024).unwrap()));
        assert_eq!(Pmtu::for_ethernet_mtu(9000), Some(Pmtu::new(4096).unwrap()));
        assert_eq!(Pmtu::for_ethernet_mtu(300), None);
    }

    proptest! {
        #[test]
        fn add_then_distance(a in 0u32..Psn::MODULUS, n in 0u32..Psn::HALF) {
            let p = Psn::new(a);
            let q = p.add(n);
            prop_assert_eq!(q.distance(p), n as i32);
            prop_assert_eq!(p.distance(q), -(n as i32));
            prop_assert_eq!(q.sub(n), p);
            prop_assert_eq!(n > 0, q.is_after(p));
        }

        #[test]
        fn distance_is_antisymmetric(a in 0u32..Psn::MODULUS, b in 0u32..Psn::MODULUS) {
            let (p, q) = (Psn::new(a), Psn::new(b));
            let d = p.distance(q);
            prop_assert!((-(Psn::HALF as i32)..Psn::HALF as i32).contains(&d));
            prop_assert_eq!(q.add(d as u32), p);
            if d != -(Psn::HALF as i32) {
                prop_assert_eq!(q.distance(p), -d);
            }
        }
    }
}
