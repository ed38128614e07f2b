//! MAC Control flow-control frames: 802.3x PAUSE (IEEE 802.3 annex 31B) and 802.1Qbb
//! priority-based flow control (PFC).
//!
//! ```text
//! +-------------------+-----+----------+------------------------------------------+---------+
//! | dst 01:80:c2:00:00:01 | src | 0x8808 | opcode 0x0001 | pause_time (2)            | padding |
//! |                       |     |        | opcode 0x0101 | class-enable vector (2),  |         |
//! |                       |     |        |               | time[0..8] (2 each)       |         |
//! +-------------------+-----+----------+------------------------------------------+---------+
//! ```
//!
//! Times are in quanta of 512 bit times at the port's speed; 0 ends a pause at once. The frame
//! is the minimum Ethernet frame, so the MAC Control payload (opcode onwards) is 46 bytes
//! padded; a receiver that does not see the FCS gets 46, and software senders may leave the
//! padding off. A payload shorter than the opcode's fields or longer than the minimum frame is
//! malformed.

/// EtherType of MAC Control frames.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;

/// The reserved multicast address PAUSE and PFC frames are sent to.
pub const PAUSE_DST: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];

/// The longest MAC Control payload (the minimum frame less the Ethernet header, without FCS;
/// with it, four more).
pub const MAX_PAYLOAD: usize = 46 + 4;

enum_with_unknown! {
    /// MAC Control opcodes.
    pub enum MacControlOpcode(u16) {
        /// 802.3x PAUSE: every priority.
        Pause = 0x0001,
        /// 802.1Qbb PFC: per priority.
        Pfc = 0x0101,
    }
}

/// A parsed flow-control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseFrame {
    /// Stop every priority for this many quanta (0: resume).
    Pause {
        /// Pause time in quanta.
        quanta: u16,
    },
    /// Stop the priorities whose bit is set in `enable` for their entry of `quanta`.
    Pfc {
        /// Class-enable vector: bit p names priority p (the time of a clear bit is ignored).
        enable: u8,
        /// Pause time per priority, in quanta.
        quanta: [u16; 8],
    },
}

/// Why a MAC Control frame was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PauseError {
    /// Shorter than its opcode's fields, or longer than the minimum frame.
    #[error("MAC Control payload of {0} bytes: wrong length")]
    WrongLength(usize),
    /// An opcode other than PAUSE and PFC (GATE, REPORT, ... are for EPONs).
    #[error("unknown MAC Control opcode {0:#06x}")]
    UnknownOpcode(u16),
}

impl PauseFrame {
    /// Parses the MAC Control payload (what follows the EtherType).
    ///
    /// # Errors
    /// [`PauseError`] for a wrong length or an opcode that is not PAUSE or PFC.
    pub fn parse(payload: &[u8]) -> Result<PauseFrame, PauseError> {
        let wrong = PauseError::WrongLength(payload.len());
        if payload.len() < 2 || payload.len() > MAX_PAYLOAD {
            return Err(wrong);
        }
        let word = |i: usize| u16::from_be_bytes([payload[i], payload[i + 1]]);
        match MacControlOpcode::from(word(0)) {
            MacControlOpcode::Pause => {
                if payload.len() < 4 {
                    return Err(wrong);
                }
                Ok(PauseFrame::Pause { quanta: word(2) })
            }
            MacControlOpcode::Pfc => {
                if payload.len() < 20 {
                    return Err(wrong);
                }
                let mut quanta = [0u16; 8];
                for (p, q) in quanta.iter_mut().enumerate() {
                    *q = word(4 + 2 * p);
                }
                // The vector's high byte is reserved: ignored on receipt.
                Ok(PauseFrame::Pfc {
                    enable: payload[3],
                    quanta,
                })
            }
            MacControlOpcode::Unknown(op) => Err(PauseError::UnknownOpcode(op)),
        }
    }

    /// The pause time of priority `p` this frame sets (`None`: it leaves `p` alone).
    pub fn quanta_of(&self, p: u8) -> Option<u16> {
        match self {
            PauseFrame::Pause { quanta } => Some(*quanta),
            PauseFrame::Pfc { enable, quanta } => (p < 8 && enable & (1 << p) != 0)
                .then(|| quanta.get(usize::from(p)).copied())
                .flatten(),
        }
    }

    /// The whole frame, padded to the minimum length (60 bytes without FCS), from `src`.
    pub fn to_frame(&self, src: [u8; 6]) -> [u8; 60] {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&PAUSE_DST);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
        match self {
            PauseFrame::Pause { quanta } => {
                f[14..16].copy_from_slice(&0x0001u16.to_be_bytes());
                f[16..18].copy_from_slice(&quanta.to_be_bytes());
            }
            PauseFrame::Pfc { enable, quanta } => {
                f[14..16].copy_from_slice(&0x0101u16.to_be_bytes());
                f[17] = *enable;
                for (p, q) in quanta.iter().enumerate() {
                    f[18 + 2 * p..20 + 2 * p].copy_from_slice(&q.to_be_bytes());
                }
            }
        }
        f
    }
}

/// Nanoseconds that `quanta` pause quanta last at `rate_bps` (one quantum is 512 bit times),
/// rounded up: a pause never ends early.
pub fn quanta_ns(quanta: u16, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return 0;
    }
    (u128::from(quanta) * 512 * 1_000_000_000).div_ceil(u128::from(rate_bps)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_and_pfc_round_trip_through_their_frames() {
        let p = PauseFrame::Pause { quanta: 0xffff };
        let f = p.to_frame([2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[12..14], &[0x88, 0x08]);
        assert_eq!(PauseFrame::parse(&f[14..]), Ok(p));
        let pfc = PauseFrame::Pfc {
            enable: 0b0000_1000,
            quanta: [0, 0, 0, 1000, 0, 0, 0, 7],
        };
        let f = pfc.to_frame([2, 0, 0, 0, 0, 1]);
        assert_eq!(PauseFrame::parse(&f[14..]), Ok(pfc));
        assert_eq!(pfc.quanta_of(3), Some(1000));
        assert_eq!(pfc.quanta_of(7), None, "bit 7 is clear");
        assert_eq!(pfc.quanta_of(9), None);
        assert_eq!(p.quanta_of(5), Some(0xffff));
    }

    #[test]
    fn wrong_lengths_and_unknown_opcodes_are_errors() {
        let f = PauseFrame::Pause { quanta: 5 }.to_frame([0; 6]);
        assert_eq!(
            PauseFrame::parse(&f[14..17]),
            Err(PauseError::WrongLength(3))
        );
        assert_eq!(
            PauseFrame::parse(&f[14..18]),
            Ok(PauseFrame::Pause { quanta: 5 })
        );
        assert_eq!(PauseFrame::parse(&[]), Err(PauseError::WrongLength(0)));
        let mut long = f.to_vec();
        long.extend_from_slice(&[0; 8]);
        assert_eq!(
            PauseFrame::parse(&long[14..]),
            Err(PauseError::WrongLength(54))
        );
        let pfc = PauseFrame::Pfc {
            enable: 1,
            quanta: [1; 8],
        }
        .to_frame([0; 6]);
        assert_eq!(
            PauseFrame::parse(&pfc[14..30]),
            Err(PauseError::WrongLength(16))
        );
        let mut gate = f;
        gate[15] = 2;
        assert_eq!(
            PauseFrame::parse(&gate[14..]),
            Err(PauseError::UnknownOpcode(2))
        );
    }

    #[test]
    fn a_quantum_is_512_bit_times() {
        assert_eq!(quanta_ns(1, 100_000_000_000), 6, "5.12 ns, rounded up");
        assert_eq!(quanta_ns(0xffff, 100_000_000_000), 335_540);
        assert_eq!(quanta_ns(1000, 1_000_000_000), 512_000);
        assert_eq!(quanta_ns(7, 0), 0);
    }
}
