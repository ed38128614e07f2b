//! The Internet checksum (RFC 1071) as the switch's own frames need it: one's-complement sums,
//! the fold, and the IPv6 pseudo-header sum of UDP, TCP and ICMPv6.

/// Sums 16-bit big-endian words (odd trailing byte padded) into a 32-bit accumulator.
#[inline]
pub fn ones_sum(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Folds an accumulator into a one's-complement checksum.
#[inline]
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

/// ICMPv6 (or UDP/TCP over IPv6) checksum with the pseudo-header.
pub fn ipv6_l4_checksum(src: &[u8; 16], dst: &[u8; 16], next_header: u8, l4: &[u8]) -> u16 {
    let mut acc = ones_sum(src, 0);
    acc = ones_sum(dst, acc);
    acc += l4.len() as u32;
    acc += u32::from(next_header);
    fold(ones_sum(l4, acc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (before the
        // complement).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(ones_sum(&data, 0)), !0xddf2);
        // An odd byte is padded with zero.
        assert_eq!(ones_sum(&[0x12], 0), 0x1200);
    }
}
