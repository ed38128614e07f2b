//! The smaller extension headers: ImmDt, IETH, AtomicETH, AtomicAckETH, DETH and FETH.
//!
//! ```text
//! ImmDt (4)        | Immediate data (32)                                            |
//! IETH (4)         | R_Key to invalidate (32)                                       |
//! AtomicAckETH (8) | Original remote data (64)                                      |
//! AtomicETH (28)   | Virtual address (64) | R_Key (32) | Swap/Add (64) | Compare (64) |
//! DETH (8)         | Q_Key (32) | reserved (8) | Source QP (24)                     |
//! FETH (4)         | reserved (26) | selectivity level (2) | placement type (4)     |
//! ```
//!
//! The FETH bit split follows the Linux Soft-RoCE driver (placement type in bits 3:0, selectivity
//! level in bits 5:4).

use super::{read_u24, read_u32, read_u64, write_u24, Result};

fixed_header_view!(
    /// A checked view of a 4-byte ImmDt.
    ImmDt,
    4
);
fixed_header_view!(
    /// A checked view of a 4-byte IETH.
    Ieth,
    4
);
fixed_header_view!(
    /// A checked view of a 28-byte AtomicETH.
    AtomicEth,
    28
);
fixed_header_view!(
    /// A checked view of an 8-byte AtomicAckETH.
    AtomicAckEth,
    8
);
fixed_header_view!(
    /// A checked view of an 8-byte DETH.
    Deth,
    8
);
fixed_header_view!(
    /// A checked view of a 4-byte FETH.
    Feth,
    4
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate data, as the 32-bit big-endian value on the wire.
    pub fn imm(&self) -> u32 {
        read_u32(self.buffer.as_ref())
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate data.
    pub fn set_imm(&mut self, v: u32) {
        self.buffer.as_mut()[..4].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        read_u32(self.buffer.as_ref())
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: u32) {
        self.buffer.as_mut()[..4].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Remote virtual address.
    pub fn virtual_address(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[0..8])
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[8..12])
    }
    /// Swap value (CmpSwap) or addend (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[12..20])
    }
    /// Compare value (CmpSwap).
    pub fn compare(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[20..28])
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets the remote virtual address.
    pub fn set_virtual_address(&mut self, v: u64) {
        self.buffer.as_mut()[0..8].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: u32) {
        self.buffer.as_mut()[8..12].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the swap value or addend.
    pub fn set_swap_add(&mut self, v: u64) {
        self.buffer.as_mut()[12..20].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the compare value.
    pub fn set_compare(&mut self, v: u64) {
        self.buffer.as_mut()[20..28].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// The remote data before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        read_u64(self.buffer.as_ref())
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original remote data.
    pub fn set_orig_data(&mut self, v: u64) {
        self.buffer.as_mut()[..8].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> Deth<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[0..4])
    }
    /// Source QP (24 bits).
    pub fn src_qp(&self) -> u32 {
        read_u24(&self.buffer.as_ref()[5..8])
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        self.buffer.as_mut()[0..4].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the source QP (low 24 bits) and zeroes the reserved byte.
    pub fn set_src_qp(&mut self, v: u32) {
        self.buffer.as_mut()[4] = 0;
        write_u24(&mut self.buffer.as_mut()[5..8], v);
    }
}

impl<T: AsRef<[u8]>> Feth<T> {
    /// The whole 32-bit word.
    pub fn raw(&self) -> u32 {
        read_u32(self.buffer.as_ref())
    }
    /// Placement type (bits 3:0).
    pub fn placement_type(&self) -> u8 {
        (self.raw() & 0xF) as u8
    }
    /// Selectivity level (bits 5:4).
    pub fn selectivity(&self) -> u8 {
        ((self.raw() >> 4) & 0x3) as u8
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets placement type and selectivity level, reserved bits zero.
    pub fn set_fields(&mut self, placement_type: u8, selectivity: u8) {
        let v = u32::from(placement_type & 0xF) | (u32::from(selectivity & 0x3) << 4);
        self.buffer.as_mut()[..4].copy_from_slice(&v.to_be_bytes());
    }
}

/// Emit-side ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDtRepr {
    /// Immediate data.
    pub imm: u32,
}
/// Emit-side IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IethRepr {
    /// R_Key to invalidate.
    pub rkey: u32,
}
/// Emit-side AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub virtual_address: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}
/// Emit-side AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// Original remote data.
    pub orig_data: u64,
}
/// Emit-side DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}
/// Emit-side FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Placement type (4 bits).
    pub placement_type: u8,
    /// Selectivity level (2 bits).
    pub selectivity: u8,
}

impl ImmDtRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &ImmDt<T>) -> Self {
        Self { imm: v.imm() }
    }
    /// Writes the header at the start of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        ImmDt::new_checked(buf)?.set_imm(self.imm);
        Ok(())
    }
}
impl IethRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Ieth<T>) -> Self {
        Self { rkey: v.rkey() }
    }
    /// Writes the header at the start of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        Ieth::new_checked(buf)?.set_rkey(self.rkey);
        Ok(())
    }
}
impl AtomicEthRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicEth<T>) -> Self {
        Self {
            virtual_address: v.virtual_address(),
            rkey: v.rkey(),
            swap_add: v.swap_add(),
            compare: v.compare(),
        }
    }
    /// Writes the header at the start of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut v = AtomicEth::new_checked(buf)?;
        v.set_virtual_address(self.virtual_address);
        v.set_rkey(self.rkey);
        v.set_swap_add(self.swap_add);
        v.set_compare(self.compare);
        Ok(())
    }
}
impl AtomicAckEthRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &AtomicAckEth<T>) -> Self {
        Self {
            orig_data: v.orig_data(),
        }
    }
    /// Writes the header at the start of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        AtomicAckEth::new_checked(buf)?.set_orig_data(self.orig_data);
        Ok(())
    }
}
impl DethRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Deth<T>) -> Self {
        Self {
            qkey: v.qkey(),
            src_qp: v.src_qp(),
        }
    }
    /// Writes the header at the start of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut v = Deth::new_checked(buf)?;
        v.set_qkey(self.qkey);
        v.set_src_qp(self.src_qp);
        Ok(())
    }
}
impl FethRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Feth<T>) -> Self {
        Self {
            placement_type: v.placement_type(),
            selectivity: v.selectivity(),
        }
    }
    /// Writes the header at the start of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        Feth::new_checked(buf)?.set_fields(self.placement_type, self.selectivity);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn byte_vectors() {
        // FetchAdd AtomicETH as Soft-RoCE sent it (tests/data/rxe-rc-ops.pcap frame 61 layout):
        // va, rkey, add 1, compare 0.
        let mut raw = [0u8; 28];
        raw[..8].copy_from_slice(&0x5566_7788_99aa_0000u64.to_be_bytes());
        raw[8..12].copy_from_slice(&0x0000_1234u32.to_be_bytes());
        raw[12..20].copy_from_slice(&1u64.to_be_bytes());
        let a = AtomicEth::new_checked(&raw[..]).unwrap();
        assert_eq!(a.virtual_address(), 0x5566_7788_99aa_0000);
        assert_eq!((a.rkey(), a.swap_add(), a.compare()), (0x1234, 1, 0));

        let d = Deth::new_checked(&[0x80, 0x01, 0x02, 0x03, 0xEE, 0x00, 0x00, 0x12][..]).unwrap();
        assert_eq!(d.qkey(), 0x8001_0203);
        assert_eq!(
            d.src_qp(),
            0x12,
            "the reserved byte is not part of the source QP"
        );

        let f = Feth::new_checked(&[0, 0, 0, 0x21][..]).unwrap();
        assert_eq!((f.placement_type(), f.selectivity()), (1, 2));
        assert_eq!(
            ImmDt::new_checked(&[1, 2, 3, 4][..]).unwrap().imm(),
            0x0102_0304
        );
        assert_eq!(Ieth::new_checked(&[0, 0, 1, 0][..]).unwrap().rkey(), 256);
        assert_eq!(
            AtomicAckEth::new_checked(&[0, 0, 0, 0, 0, 0, 0, 9][..])
                .unwrap()
                .orig_data(),
            9
        );
        assert!(AtomicEth::new_checked(&raw[..27]).is_err());
        assert!(Deth::new_checked(&[0u8; 7][..]).is_err());
    }

    proptest! {
        #[test]
        fn emit_then_parse(a in any::<u64>(), b in any::<u32>(), c in any::<u64>(), d in any::<u64>(),
                           qp in 0u32..1 << 24, pt in 0u8..16, sel in 0u8..4) {
            let mut buf = [0u8; 28];
            let imm = ImmDtRepr { imm: b };
            imm.emit(&mut buf).unwrap();
            prop_assert_eq!(ImmDtRepr::parse(&ImmDt::new_checked(&buf[..]).unwrap()), imm);
            let ieth = IethRepr { rkey: b };
            ieth.emit(&mut buf).unwrap();
            prop_assert_eq!(IethRepr::parse(&Ieth::new_checked(&buf[..]).unwrap()), ieth);
            let at = AtomicEthRepr { virtual_address: a, rkey: b, swap_add: c, compare: d };
            at.emit(&mut buf).unwrap();
            prop_assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&buf[..]).unwrap()), at);
            let ack = AtomicAckEthRepr { orig_data: c };
            ack.emit(&mut buf).unwrap();
            prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&buf[..]).unwrap()), ack);
            let deth = DethRepr { qkey: b, src_qp: qp };
            deth.emit(&mut buf).unwrap();
            prop_assert_eq!(DethRepr::parse(&Deth::new_checked(&buf[..]).unwrap()), deth);
            let feth = FethRepr { placement_type: pt, selectivity: sel };
            feth.emit(&mut buf).unwrap();
            prop_assert_eq!(FethRepr::parse(&Feth::new_checked(&buf[..]).unwrap()), feth);
            prop_assert!(at.emit(&mut [0u8; 27]).is_err());
        }
    }
}
