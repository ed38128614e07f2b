//! Just enough of the InfiniBand Communication Manager to learn QP pairings: CM REQ and REP
//! MADs (IBTA vol. 1 ch. 12.6), carried over RoCEv2 as UD SEND ONLY to QP1 (the GSI QP).
//!
//! ```text
//! MAD header (24): BaseVersion | MgmtClass (0x07 = CM) | ClassVersion | Method | Status (2) |
//!                  ClassSpecific (2) | TransactionID (8) | AttributeID (2) | rsvd (2) | AttrMod (4)
//! REQ  (from 24):  LocalCommID (4) | rsvd (4) | ServiceID (8) | LocalCA GUID (8) | rsvd (4) |
//!                  LocalQKey (4) | LocalQPN (3) RespRes (1) | LocalEECN (3) InitDepth (1) |
//!                  RemoteEECN (3) flags (1) | StartingPSN (3) timeout/retry (1) | PKey (2) ...
//! REP  (from 24):  LocalCommID (4) | RemoteCommID (4) | LocalQKey (4) | LocalQPN (3) rsvd |
//!                  LocalEEContext (3) rsvd | StartingPSN (3) rsvd | ...
//! ```
//!
//! Offsets follow the kernel's `cm_msgs.h`; tests check them against Wireshark's CM dissector.

use super::{read_u16, read_u24, read_u32, write_u24, Error, Result};
use crate::wire::Psn;

/// Size of a MAD (header and data).
pub const MAD_LEN: usize = 256;
/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// Attribute ID of a connection request.
pub const ATTR_REQ: u16 = 0x0010;
/// Attribute ID of a connection reply.
pub const ATTR_REP: u16 = 0x0013;
/// The well-known Q_Key of the GSI QP.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// What a CM message says about the QP of its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// Connection request.
    Req {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// Sender's QPN.
        qpn: u32,
        /// First PSN the sender will send.
        starting_psn: Psn,
    },
    /// Connection reply.
    Rep {
        /// Sender's communication ID.
        local_comm_id: u32,
        /// The requester's communication ID (from its REQ).
        remote_comm_id: u32,
        /// Sender's QPN.
        qpn: u32,
        /// First PSN the sender will send.
        starting_psn: Psn,
    },
}

/// Parses a CM REQ or REP from a MAD (the UD payload after the DETH).
///
/// # Errors
/// [`Error::Truncated`] when too short; [`Error::Malformed`] when it is not a CM REQ or REP.
pub fn parse(mad: &[u8]) -> Result<CmMessage> {
    if mad.len() < 72 {
        return Err(Error::Truncated {
            need: 72,
            have: mad.len(),
        });
    }
    if mad[1] != MGMT_CLASS_CM {
        return Err(Error::Malformed);
    }
    match read_u16(&mad[16..18]) {
        ATTR_REQ => Ok(CmMessage::Req {
            local_comm_id: read_u32(&mad[24..28]),
            qpn: read_u24(&mad[56..59]),
            starting_psn: Psn::new(read_u24(&mad[68..71])),
        }),
        ATTR_REP => Ok(CmMessage::Rep {
            local_comm_id: read_u32(&mad[24..28]),
            remote_comm_id: read_u32(&mad[28..32]),
            qpn: read_u24(&mad[36..39]),
            starting_psn: Psn::new(read_u24(&mad[44..47])),
        }),
        _ => Err(Error::Malformed),
    }
}

/// Writes a minimal CM MAD (REQ or REP, other fields zero) into `buf[..MAD_LEN]`.
///
/// # Errors
/// [`Error::Truncated`] when `buf` is shorter than [`MAD_LEN`].
pub fn emit(m: &CmMessage, buf: &mut [u8]) -> Result<()> {
    if buf.len() < MAD_LEN {
        return Err(Error::Truncated {
            need: MAD_LEN,
            have: buf.len(),
        });
    }
    let b = &mut buf[..MAD_LEN];
    b.fill(0);
    b[0] = 1; // base version
    b[1] = MGMT_CLASS_CM;
    b[2] = 2; // class version
    b[3] = 0x03; // Send
    b[8..16].copy_from_slice(&0x0000_0001_0000_0042u64.to_be_bytes());
    match *m {
        CmMessage::Req {
            local_comm_id,
            qpn,
            starting_psn,
        } => {
            b[16..18].copy_from_slice(&ATTR_REQ.to_be_bytes());
            b[24..28].copy_from_slice(&local_comm_id.to_be_bytes());
            b[52..56].copy_from_slice(&0x0u32.to_be_bytes());
            write_u24(&mut b[56..59], qpn);
            write_u24(&mut b[68..71], starting_psn.value());
            b[72..74].copy_from_slice(&0xFFFFu16.to_be_bytes());
        }
        CmMessage::Rep {
            local_comm_id,
            remote_comm_id,
            qpn,
            starting_psn,
        } => {
            b[16..18].copy_from_slice(&ATTR_REP.to_be_bytes());
            b[24..28].copy_from_slice(&local_comm_id.to_be_bytes());
            b[28..32].copy_from_slice(&remote_comm_id.to_be_bytes());
            write_u24(&mut b[36..39], qpn);
            write_u24(&mut b[44..47], starting_psn.value());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects() {
        for m in [
            CmMessage::Req {
                local_comm_id: 0x1234_5678,
                qpn: 0x11,
                starting_psn: Psn::new(0xABCDEF),
            },
            CmMessage::Rep {
                local_comm_id: 9,
                remote_comm_id: 0x1234_5678,
                qpn: 0x22,
                starting_psn: Psn::new(7),
            },
        ] {
            let mut b = [0u8; MAD_LEN];
            emit(&m, &mut b).unwrap();
            assert_eq!(parse(&b), Ok(m));
        }
        let mut b = [0u8; MAD_LEN];
        emit(
            &CmMessage::Req {
                local_comm_id: 1,
                qpn: 2,
                starting_psn: Psn::new(3),
            },
            &mut b,
        )
        .unwrap();
        b[1] = 0x01; // subnet management, not CM
        assert_eq!(parse(&b), Err(Error::Malformed));
        assert!(parse(&b[..50]).is_err());
        b[1] = MGMT_CLASS_CM;
        b[16..18].copy_from_slice(&0x0014u16.to_be_bytes()); // RTU
        assert_eq!(parse(&b), Err(Error::Malformed));
    }
}
