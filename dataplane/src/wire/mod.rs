//! The RoCEv2 wire layer: checked, zero-copy views over the InfiniBand transport headers that
//! RoCEv2 carries in UDP (destination port 4791), their emit-side `Repr` types, the ICRC, 24-bit
//! PSN arithmetic, and [`classify()`], which turns a raw Ethernet frame into a small `Copy`
//! summary.
//!
//! What it is: byte views that work on any buffer (`&[u8]`, `Vec<u8>`, UMEM frames). Once a view's
//! length check has passed, no accessor can panic. What it is not: it performs no I/O, keeps no
//! state, reads no clock and never allocates on the parse path.
//!
//! Sources: InfiniBand Architecture Specification vol. 1 ch. 9 and annex A17 (RoCEv2); the Linux
//! Soft-RoCE driver; captures from Soft-RoCE hosts under `tests/data/`.

#[macro_use]
mod macros;

pub mod aeth;
pub mod bth;
pub mod checksum;
pub mod classify;
pub mod cm;
pub mod cnp;
pub mod ecn;
pub mod ext;
pub mod control;
pub mod frame;
pub mod icrc;
pub mod mac;
pub mod opcode;
pub mod pause;
pub mod probe;
pub mod psn;
pub mod reth;
pub mod stamp;

pub use aeth::{Aeth, AethRepr, NakCode, Syndrome};
pub use bth::{Bth, BthRepr};
pub use classify::{
    classify, ArpSummary, Classified, EthSummary, FrameClass, IpSummary, L4Summary, Layer,
    ParseError, ParseReason, RoceSummary, VlanTag,
};
pub use cnp::{Cnp, CnpRepr};
pub use ext::{
    AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, Deth, DethRepr, Feth, FethRepr, Ieth,
    IethRepr, ImmDt, ImmDtRepr,
};
pub use frame::{ExtRepr, IpRepr, RoceFrameRepr};
pub use mac::{format_mac, parse_mac};
pub use opcode::{Direction, ExtLayout, Opcode, Segment, Transport};
pub use pause::{PauseError, PauseFrame};
pub use psn::{Pmtu, Psn};
pub use reth::{Reth, RethRepr};

/// UDP destination port that marks a RoCEv2 packet (IANA "roce").
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Length of the invariant CRC that ends every RoCEv2 packet.
pub const ICRC_LEN: usize = 4;

/// Why a header view could not be made or emitted. Small and `Copy`: it is returned per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header needs.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the header needs.
        need: usize,
        /// Bytes the buffer has.
        have: usize,
    },
    /// A field holds a value the header does not allow (for example an opcode whose layout is
    /// unknown, so the extension headers cannot be located).
    #[error("malformed header")]
    Malformed,
}

/// Shorthand for results of this module.
pub type Result<T> = core::result::Result<T, Error>;

/// Read a big-endian 24-bit field from exactly three bytes.
#[inline]
pub(crate) fn read_u24(b: &[u8]) -> u32 {
    (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2])
}

/// Write the low 24 bits of `v` big-endian into exactly three bytes.
#[inline]
pub(crate) fn write_u24(b: &mut [u8], v: u32) {
    b[0] = (v >> 16) as u8;
    b[1] = (v >> 8) as u8;
    b[2] = v as u8;
}

#[inline]
pub(crate) fn read_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[inline]
pub(crate) fn read_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
pub(crate) fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
