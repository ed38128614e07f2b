//! RDMA Extended Transport Header (WRITE FIRST/ONLY, READ REQUEST, FLUSH, ATOMIC WRITE).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                   Virtual Address (63:32)                     |
//! |                   Virtual Address (31:0)                      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          R_Key                                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        DMA Length                             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```

use super::{read_u32, read_u64, Result};

mod field {
    pub(super) const VA: core::ops::Range<usize> = 0..8;
    pub(super) const RKEY: core::ops::Range<usize> = 8..12;
    pub(super) const DMA_LEN: core::ops::Range<usize> = 12..16;
}

fixed_header_view!(
    /// A checked view of a 16-byte RETH.
    Reth,
    16
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Remote virtual address.
    pub fn virtual_address(&self) -> u64 {
        read_u64(&self.buffer.as_ref()[field::VA])
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::RKEY])
    }
    /// Length of the whole transfer in bytes (for a READ REQUEST: of the data to return).
    pub fn dma_len(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::DMA_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets the remote virtual address.
    pub fn set_virtual_address(&mut self, va: u64) {
        self.buffer.as_mut()[field::VA].copy_from_slice(&va.to_be_bytes());
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, rkey: u32) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&rkey.to_be_bytes());
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, len: u32) {
        self.buffer.as_mut()[field::DMA_LEN].copy_from_slice(&len.to_be_bytes());
    }
}

/// Emit-side RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub virtual_address: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Reth<T>) -> RethRepr {
        RethRepr {
            virtual_address: v.virtual_address(),
            rkey: v.rkey(),
            dma_len: v.dma_len(),
        }
    }

    /// Writes the header into the first 16 bytes of `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut v = Reth::new_checked(buf)?;
        v.set_virtual_address(self.virtual_address);
        v.set_rkey(self.rkey);
        v.set_dma_len(self.dma_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Error;
    use proptest::prelude::*;

    #[test]
    fn parses_fields_big_endian() {
        let raw = [
            0x00, 0x00, 0x55, 0x8e, 0x3c, 0x2a, 0x10, 0x00, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00,
            0x0b, 0xb8,
        ];
        let r = Reth::new_checked(&raw[..]).unwrap();
        assert_eq!(r.virtual_address(), 0x0000_558e_3c2a_1000);
        assert_eq!(r.rkey(), 0x17f);
        assert_eq!(r.dma_len(), 3000);
        assert!(Reth::new_checked(&raw[..15]).is_err());
    }

    proptest! {
        #[test]
        fn emit_then_parse(va in any::<u64>(), rkey in any::<u32>(), len in any::<u32>()) {
            let repr = RethRepr { virtual_address: va, rkey, dma_len: len };
            let mut buf = [0u8; 16];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(RethRepr::parse(&Reth::new_checked(&buf[..]).unwrap()), repr);
            prop_assert_eq!(repr.emit(&mut [0u8; 15]), Err(Error::Truncated { need: 16, have: 15 }));
        }
    }
}
