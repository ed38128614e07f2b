//! The RoCEv2 Congestion Notification Packet (annex A17.9.3).
//!
//! ```text
//! +------------------------------+---------------------------+
//! | BTH (12), opcode 0x81,       | reserved (16 bytes, zero) |  then the ICRC (4)
//! | BECN set, DestQP = QP to     |                           |
//! | throttle, PSN 0              |                           |
//! +------------------------------+---------------------------+
//! ```
//!
//! A notification point sends it back to the sender of ECN-marked traffic; it is not reordered.

use super::bth::{Bth, BthRepr};
use super::opcode::Opcode;
use super::psn::Psn;
use super::{Error, Result};

fixed_header_view!(
    /// A checked view of a CNP: BTH plus 16 reserved bytes (28 bytes, ICRC not included).
    Cnp,
    28
);

impl<T: AsRef<[u8]>> Cnp<T> {
    /// The BTH at the start of the CNP.
    pub fn bth(&self) -> Bth<&[u8]> {
        Bth::new_unchecked(&self.buffer.as_ref()[..12])
    }
    /// True when the opcode is 0x81.
    pub fn is_cnp(&self) -> bool {
        self.bth().opcode() == Opcode::Cnp
    }
    /// The QP whose sender should slow down.
    pub fn dest_qp(&self) -> u32 {
        self.bth().dest_qp()
    }
    /// The 16 reserved bytes (zero when well formed).
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[12..28]
    }
}

/// Emit-side CNP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CnpRepr {
    /// The QP to throttle.
    pub dest_qp: u32,
    /// Partition key.
    pub pkey: u16,
    /// BECN bit; the annex sets it.
    pub becn: bool,
}

impl CnpRepr {
    /// Reads a checked view.
    ///
    /// # Errors
    /// [`Error::Malformed`] when the opcode is not 0x81.
    pub fn parse<T: AsRef<[u8]>>(v: &Cnp<T>) -> Result<CnpRepr> {
        if !v.is_cnp() {
            return Err(Error::Malformed);
        }
        let bth = v.bth();
        Ok(CnpRepr {
            dest_qp: bth.dest_qp(),
            pkey: bth.pkey(),
            becn: bth.becn(),
        })
    }

    /// The BTH this CNP carries.
    pub fn bth(&self) -> BthRepr {
        BthRepr {
            opcode: Opcode::Cnp,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: self.pkey,
            fecn: false,
            becn: self.becn,
            dest_qp: self.dest_qp,
            ack_req: false,
            psn: Psn::new(0),
        }
    }

    /// Writes BTH and reserved bytes into the first 28 bytes of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < 28 {
            return Err(Error::Truncated {
                need: 28,
                have: buf.len(),
            });
        }
        self.bth().emit(buf)?;
        buf[12..28].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_a_cnp() {
        let mut raw = [0u8; 28];
        raw[..12].copy_from_slice(&[0x81, 0, 0xff, 0xff, 0x40, 0, 0x01, 0x2c, 0, 0, 0, 0]);
        let c = Cnp::new_checked(&raw[..]).unwrap();
        assert!(c.is_cnp());
        assert_eq!(c.dest_qp(), 300);
        let repr = CnpRepr::parse(&c).unwrap();
        assert_eq!(
            repr,
            CnpRepr {
                dest_qp: 300,
                pkey: 0xFFFF,
                becn: true
            }
        );
        raw[0] = 0x11;
        assert_eq!(
            CnpRepr::parse(&Cnp::new_checked(&raw[..]).unwrap()),
            Err(Error::Malformed)
        );
        assert!(Cnp::new_checked(&raw[..27]).is_err());
    }

    proptest! {
        #[test]
        fn emit_then_parse(qp in 0u32..1 << 24, pkey in any::<u16>(), becn in any::<bool>()) {
            let repr = CnpRepr { dest_qp: qp, pkey, becn };
            let mut buf = [0xEEu8; 28];
            repr.emit(&mut buf).unwrap();
            let v = Cnp::new_checked(&buf[..]).unwrap();
            prop_assert!(v.reserved().iter().all(|b| *b == 0));
            prop_assert_eq!(CnpRepr::parse(&v).unwrap(), repr);
        }
    }
}
