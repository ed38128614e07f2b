//! Base Transport Header.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    OpCode     |S|M|Pad|  TVer |            P_Key              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |F|B|  Resv6    |                 Destination QP                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |A|   Resv7     |            Packet Sequence Number             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! S: solicited event; M: migration request; Pad: pad count (payload is padded to 4 bytes);
//! TVer: transport header version (0); F/B: FECN/BECN (masked out of the ICRC); A: AckReq.

use super::opcode::Opcode;
use super::psn::Psn;
use super::{read_u16, read_u24, write_u24, Error, Result};

mod field {
    pub(super) const OPCODE: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const PKEY: core::ops::Range<usize> = 2..4;
    pub(super) const FECN_BECN: usize = 4;
    pub(super) const DEST_QP: core::ops::Range<usize> = 5..8;
    pub(super) const ACKREQ: usize = 8;
    pub(super) const PSN: core::ops::Range<usize> = 9..12;

    pub(super) const SE: u8 = 0x80;
    pub(super) const MIGREQ: u8 = 0x40;
    pub(super) const PAD_SHIFT: u8 = 4;
    pub(super) const PAD_MASK: u8 = 0x30;
    pub(super) const TVER_MASK: u8 = 0x0F;
    pub(super) const FECN: u8 = 0x80;
    pub(super) const BECN: u8 = 0x40;
    pub(super) const ACKREQ_BIT: u8 = 0x80;
}

fixed_header_view!(
    /// A checked view of a 12-byte BTH at the start of `buffer` (the UDP payload).
    Bth,
    12
);

impl<T: AsRef<[u8]>> Bth<T> {
    #[inline]
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The opcode.
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.b()[field::OPCODE])
    }
    /// Solicited event.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & field::SE != 0
    }
    /// Migration request.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & field::MIGREQ != 0
    }
    /// Pad count: bytes (0-3) added after the payload to reach a multiple of 4.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] & field::PAD_MASK) >> field::PAD_SHIFT
    }
    /// Transport header version (0 for this specification).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & field::TVER_MASK
    }
    /// Partition key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        read_u16(&self.b()[field::PKEY])
    }
    /// Forward explicit congestion notification.
    #[inline]
    pub fn fecn(&self) -> bool {
        self.b()[field::FECN_BECN] & field::FECN != 0
    }
    /// Backward explicit congestion notification.
    #[inline]
    pub fn becn(&self) -> bool {
        self.b()[field::FECN_BECN] & field::BECN != 0
    }
    /// Destination queue pair number (24 bits).
    #[inline]
    pub fn dest_qp(&self) -> u32 {
        read_u24(&self.b()[field::DEST_QP])
    }
    /// Acknowledge request.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACKREQ] & field::ACKREQ_BIT != 0
    }
    /// Packet sequence number.
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn::new(read_u24(&self.b()[field::PSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    #[inline]
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    #[inline]
    fn set_flag(&mut self, idx: usize, bit: u8, on: bool) {
        let b = &mut self.bm()[idx];
        *b = if on { *b | bit } else { *b & !bit };
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.bm()[field::OPCODE] = op.into();
    }
    /// Sets the solicited-event bit.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_flag(field::FLAGS, field::SE, on);
    }
    /// Sets the migration-request bit.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_flag(field::FLAGS, field::MIGREQ, on);
    }
    /// Sets the pad count (low 2 bits of `pad` are used).
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !field::PAD_MASK) | ((pad << field::PAD_SHIFT) & field::PAD_MASK);
    }
    /// Sets the transport header version (low 4 bits are used).
    pub fn set_tver(&mut self, tver: u8) {
        let b = &mut self.bm()[field::FLAGS];
        *b = (*b & !field::TVER_MASK) | (tver & field::TVER_MASK);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, pkey: u16) {
        self.bm()[field::PKEY].copy_from_slice(&pkey.to_be_bytes());
    }
    /// Sets the FECN bit.
    pub fn set_fecn(&mut self, on: bool) {
        self.set_flag(field::FECN_BECN, field::FECN, on);
    }
    /// Sets the BECN bit.
    pub fn set_becn(&mut self, on: bool) {
        self.set_flag(field::FECN_BECN, field::BECN, on);
    }
    /// Sets the destination QP (low 24 bits are used).
    pub fn set_dest_qp(&mut self, qp: u32) {
        write_u24(&mut self.bm()[field::DEST_QP], qp);
    }
    /// Sets the AckReq bit.
    pub fn set_ack_req(&mut self, on: bool) {
        self.set_flag(field::ACKREQ, field::ACKREQ_BIT, on);
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, psn: Psn) {
        write_u24(&mut self.bm()[field::PSN], psn.value());
    }
}

/// Emit-side description of a BTH. Reserved bits are emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count (0-3).
    pub pad_count: u8,
    /// Transport header version.
    pub tver: u8,
    /// Partition key (0xFFFF is the default full-membership key).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH with the given opcode, destination QP and PSN, the default partition key (0xFFFF)
    /// and every flag clear; set others with struct update syntax.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Reads every field of a checked view.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> BthRepr {
        BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            mig_req: bth.mig_req(),
            pad_count: bth.pad_count(),
            tver: bth.tver(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        }
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        12
    }

    /// Writes the header into the first 12 bytes of `buf`, reserved bits zeroed.
    ///
    /// # Errors
    /// [`Error::Truncated`] if `buf` is shorter than 12 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < 12 {
            return Err(Error::Truncated {
                need: 12,
                have: buf.len(),
            });
        }
        buf[..12].fill(0);
        let mut v = Bth::new_unchecked(buf);
        v.set_opcode(self.opcode);
        v.set_solicited(self.solicited);
        v.set_mig_req(self.mig_req);
        v.set_pad_count(self.pad_count);
        v.set_tver(self.tver);
        v.set_pkey(self.pkey);
        v.set_fecn(self.fecn);
        v.set_becn(self.becn);
        v.set_dest_qp(self.dest_qp);
        v.set_ack_req(self.ack_req);
        v.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // The BTH of frame 16 of tests/data/rxe-rc-ops.pcap: an RC ACK from Soft-RoCE.
    const RXE_ACK_BTH: [u8; 12] = [
        0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x2f, 0xeb, 0x69,
    ];

    #[test]
    fn parses_a_soft_roce_ack() {
        let bth = Bth::new_checked(&RXE_ACK_BTH[..]).unwrap();
        assert_eq!(bth.opcode(), Opcode::RcAcknowledge);
        assert_eq!(bth.pkey(), 0xFFFF);
        assert_eq!(bth.dest_qp(), 0x11);
        assert_eq!(bth.psn(), Psn::new(3_140_457));
        assert!(!bth.ack_req() && !bth.fecn() && !bth.becn() && !bth.solicited());
        assert_eq!((bth.pad_count(), bth.tver()), (0, 0));
    }

    #[test]
    fn flags_and_bit_positions() {
        let raw = [
            0x0A, 0xF3, 0x12, 0x34, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0xFF, 0xFF, 0xFF,
        ];
        let bth = Bth::new_checked(&raw[..]).unwrap();
        assert_eq!(bth.opcode(), Opcode::RcWriteOnly);
        assert!(bth.solicited() && bth.mig_req());
        assert_eq!(bth.pad_count(), 3);
        assert_eq!(bth.tver(), 3);
        assert_eq!(bth.pkey(), 0x1234);
        assert!(bth.fecn() && bth.becn());
        assert_eq!(bth.dest_qp(), 0xAB_CDEF);
        assert!(bth.ack_req());
        assert_eq!(bth.psn(), Psn::new(0xFF_FFFF));
        let mut out = [0u8; 12];
        BthRepr::parse(&bth).emit(&mut out).unwrap();
        assert_eq!(out, raw);
    }

    #[test]
    fn truncated_is_an_error_not_a_panic() {
        for n in 0..12 {
            assert_eq!(
                Bth::new_checked(&RXE_ACK_BTH[..n]),
                Err(Error::Truncated { need: 12, have: n })
            );
        }
        assert!(BthRepr::parse(&Bth::new_unchecked(&RXE_ACK_BTH[..]))
            .emit(&mut [0u8; 11])
            .is_err());
    }

    proptest! {
        #[test]
        fn emit_then_parse(op in any::<u8>(), se in any::<bool>(), m in any::<bool>(), pad in 0u8..4,
                           tver in 0u8..16, pkey in any::<u16>(), f in any::<bool>(), b in any::<bool>(),
                           qp in 0u32..1 << 24, a in any::<bool>(), psn in 0u32..1 << 24) {
            let repr = BthRepr { opcode: Opcode::from(op), solicited: se, mig_req: m, pad_count: pad,
                tver, pkey, fecn: f, becn: b, dest_qp: qp, ack_req: a, psn: Psn::new(psn) };
            let mut buf = [0xAAu8; 12];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(BthRepr::parse(&Bth::new_checked(&buf[..]).unwrap()), repr);
        }
    }
}
