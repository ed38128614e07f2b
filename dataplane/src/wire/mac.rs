//! MAC addresses as people write them: `aa:bb:cc:dd:ee:ff`.

/// `aa:bb:cc:dd:ee:ff`, lower case.
pub fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-` between the bytes).
///
/// # Errors
/// A reason, when it is not six hex bytes.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(format!(
            "'{s}' is not a MAC address (six hex bytes, aa:bb:cc:dd:ee:ff)"
        ));
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2)
            .ok_or_else(|| format!("'{s}' is not a MAC address (bad byte '{p}')"))?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_reads_back_and_bad_ones_say_why() {
        let m = [0x02, 0, 0xab, 0x10, 0, 0xff];
        assert_eq!(format_mac(m), "02:00:ab:10:00:ff");
        assert_eq!(parse_mac(&format_mac(m)), Ok(m));
        assert_eq!(parse_mac("02-00-ab-10-00-ff"), Ok(m));
        assert!(parse_mac("02:00:ab:10:00")
            .unwrap_err()
            .contains("six hex bytes"));
        assert!(parse_mac("02:00:ab:10:00:f")
            .unwrap_err()
            .contains("bad byte 'f'"));
    }
}
