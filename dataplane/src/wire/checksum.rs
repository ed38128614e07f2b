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

/// Decrements the IPv4 TTL at `ip[8]` and updates the header checksum incrementally
/// (RFC 1624: HC' = ~(~HC + ~m + m')).
// Always inlined: on the fast path a call costs more than the arithmetic.
#[inline(always)]
pub fn ipv4_decrement_ttl(ip: &mut [u8]) {
    let old = u16::from_be_bytes([ip[8], ip[9]]);
    ip[8] = ip[8].wrapping_sub(1);
    let new = u16::from_be_bytes([ip[8], ip[9]]);
    let hc = u16::from_be_bytes([ip[10], ip[11]]);
    let sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
    let c = fold(sum);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// True when the IPv4 header (`ihl` bytes) has a valid checksum. Sums 32-bit words (an IPv4
/// header is a whole number of them; the one's-complement sum is the same whatever the word
/// size, once folded): about twice as fast as 16-bit words on the fast path.
#[inline]
pub fn ipv4_checksum_ok(hdr: &[u8]) -> bool {
    let mut words = hdr.chunks_exact(4);
    let mut acc = 0u64;
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    acc += u64::from(ones_sum(words.remainder(), 0));
    acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc = (acc & 0xFFFF) + (acc >> 16);
    acc == 0xFFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_ok_agrees_with_the_16_bit_sum() {
        let mut rng = crate::rng::Rng::new(5);
        for n in 0..20_000 {
            // Without and with options (and a length that is not a whole number of words).
            let mut h = vec![0u8; [20, 24, 60, 22][n % 4]];
            for b in h.iter_mut() {
                *b = rng.below(256) as u8;
            }
            // Half of them with the checksum set right.
            if rng.below(2) == 0 {
                h[10] = 0;
                h[11] = 0;
                let c = fold(ones_sum(&h, 0));
                h[10..12].copy_from_slice(&c.to_be_bytes());
            }
            assert_eq!(ipv4_checksum_ok(&h), fold(ones_sum(&h, 0)) == 0, "{h:?}");
        }
        // The all-zero and all-ones sums.
        assert!(!ipv4_checksum_ok(&[0; 20]));
        assert_eq!(
            ipv4_checksum_ok(&[0xFF; 20]),
            fold(ones_sum(&[0xFF; 20], 0)) == 0
        );
    }

    #[test]
    fn ttl_decrement_keeps_the_checksum_right() {
        let mut h = [
            0x45, 0x00, 0x00, 0x30, 0x13, 0x48, 0x40, 0x00, 0x40, 0x11, 0x12, 0xad, 0x0a, 0x63,
            0x00, 0x01, 0x0a, 0x63, 0x00, 0x02,
        ];
        assert!(ipv4_checksum_ok(&h));
        for ttl in (1..=64).rev() {
            ipv4_decrement_ttl(&mut h);
            assert_eq!(h[8], ttl - 1);
            assert!(ipv4_checksum_ok(&h), "ttl {}", h[8]);
        }
    }

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
