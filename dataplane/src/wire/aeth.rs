//! ACK Extended Transport Header (ACKNOWLEDGE, READ RESPONSE FIRST/LAST/ONLY, ATOMIC ACK).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Syndrome    |              Message Sequence Number          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Syndrome: bit 7 reserved; bits 6:5 the kind (00 ACK, 01 RNR NAK, 11 NAK); bits 4:0 the value
//! (credit count, RNR timer, or NAK code). A NAK with code 0 is a PSN sequence error: its BTH PSN
//! is the PSN the responder expects next.

use super::{read_u24, write_u24, Result};

enum_with_unknown! {
    /// NAK codes (syndrome `011xxxxx`).
    pub enum NakCode(u8) {
        /// PSN sequence error: the responder saw a PSN other than the one it expects.
        PsnSequenceError = 0,
        /// Invalid request.
        InvalidRequest = 1,
        /// Remote access error.
        RemoteAccessError = 2,
        /// Remote operational error.
        RemoteOperationalError = 3,
        /// Invalid RD request.
        InvalidRdRequest = 4,
    }
}

/// A decoded AETH syndrome. `From<u8>` and `From<Syndrome> for u8` round-trip every byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count (0x1F: unlimited).
    Ack {
        /// Credit count (5 bits).
        credits: u8,
    },
    /// Receiver not ready, retry after the encoded timer.
    RnrNak {
        /// RNR timer code (5 bits).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Reserved encodings (kind `10`, or the reserved bit 7 set).
    Unknown(u8),
}

impl From<u8> for Syndrome {
    fn from(b: u8) -> Syndrome {
        match b >> 5 {
            0b000 => Syndrome::Ack { credits: b & 0x1F },
            0b001 => Syndrome::RnrNak { timer: b & 0x1F },
            0b011 => Syndrome::Nak(NakCode::from(b & 0x1F)),
            _ => Syndrome::Unknown(b),
        }
    }
}

impl From<Syndrome> for u8 {
    fn from(s: Syndrome) -> u8 {
        match s {
            Syndrome::Ack { credits } => credits & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(code) => 0x60 | (u8::from(code) & 0x1F),
            Syndrome::Unknown(b) => b,
        }
    }
}

impl Syndrome {
    /// True for a NAK with code PSN sequence error, the NAK a Go-Back-N responder sends when it
    /// sees reordering.
    pub fn is_sequence_nak(self) -> bool {
        self == Syndrome::Nak(NakCode::PsnSequenceError)
    }

    /// A short human name, as the capture decoder prints it.
    pub fn name(self) -> &'static str {
        match self {
            Syndrome::Ack { .. } => "ACK",
            Syndrome::RnrNak { .. } => "RNR_NAK",
            Syndrome::Nak(NakCode::PsnSequenceError) => "NAK_PSN_SEQ_ERR",
            Syndrome::Nak(NakCode::InvalidRequest) => "NAK_INV_REQ",
            Syndrome::Nak(NakCode::RemoteAccessError) => "NAK_REM_ACCESS_ERR",
            Syndrome::Nak(NakCode::RemoteOperationalError) => "NAK_REM_OP_ERR",
            Syndrome::Nak(NakCode::InvalidRdRequest) => "NAK_INV_RD_REQ",
            Syndrome::Nak(NakCode::Unknown(_)) => "NAK_RESERVED",
            Syndrome::Unknown(_) => "RESERVED",
        }
    }
}

fixed_header_view!(
    /// A checked view of a 4-byte AETH.
    Aeth,
    4
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// The decoded syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from(self.syndrome_raw())
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[1..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.buffer.as_mut()[0] = s.into();
    }
    /// Sets the MSN (low 24 bits are used).
    pub fn set_msn(&mut self, msn: u32) {
        write_u24(&mut self.buffer.as_mut()[1..4], msn);
    }
}

/// Emit-side AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Aeth<T>) -> AethRepr {
        AethRepr {
            syndrome: v.syndrome(),
            msn: v.msn(),
        }
    }

    /// Writes the header into the first 4 bytes of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut v = Aeth::new_checked(buf)?;
        v.set_syndrome(self.syndrome);
        v.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn syndromes_seen_from_soft_roce() {
        // ACK with unlimited credits, MSN 1 (tests/data/rxe-rc-ops.pcap frame 16).
        let ack = Aeth::new_checked(&[0x1f, 0x00, 0x00, 0x01][..]).unwrap();
        assert_eq!(ack.syndrome(), Syndrome::Ack { credits: 31 });
        assert_eq!(ack.msn(), 1);
        // NAK, PSN sequence error (tests/data/rxe-reorder-nak-ipv6.pcap).
        let nak = Aeth::new_checked(&[0x60, 0x00, 0x00, 0x07][..]).unwrap();
        assert!(nak.syndrome().is_sequence_nak());
        assert_eq!(nak.syndrome().name(), "NAK_PSN_SEQ_ERR");
        assert_eq!(Syndrome::from(0x25), Syndrome::RnrNak { timer: 5 });
        assert_eq!(
            Syndrome::from(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(Syndrome::from(0x6A), Syndrome::Nak(NakCode::Unknown(0x0A)));
        assert_eq!(Syndrome::from(0x40), Syndrome::Unknown(0x40));
        assert_eq!(Syndrome::from(0x9F), Syndrome::Unknown(0x9F));
    }

    #[test]
    fn every_syndrome_byte_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(Syndrome::from(b)), b);
        }
    }

    proptest! {
        #[test]
        fn emit_then_parse(s in any::<u8>(), msn in 0u32..1 << 24) {
            let repr = AethRepr { syndrome: Syndrome::from(s), msn };
            let mut buf = [0u8; 4];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(AethRepr::parse(&Aeth::new_checked(&buf[..]).unwrap()), repr);
        }
    }
}
