//! The packet: a buffer it owns, the frame's length, and where and when it was received. The
//! one vocabulary every layer above moves (ports receive and transmit it, the engine rewrites
//! it, the reorder stage holds it). Its buffer is on the heap, a frame of an [`area::FrameArea`]
//! (AF_XDP's UMEM, AF_PACKET's pool) or a DPDK mbuf (`mbuf`).

pub mod area;
#[cfg(all(feature = "dpdk", target_os = "linux"))]
pub(crate) mod mbuf;

use area::FrameArea;

/// Largest frame a [`Pkt`] holds: a 9000-byte jumbo MTU plus Ethernet and two VLAN tags.
pub const MAX_FRAME: usize = 9216;

/// Buffer size of packets made by [`Pkt::from_slice`] for ordinary frames: RoCE MTU 4096 plus
/// every header fits.
pub const DEFAULT_BUF: usize = 4608;

/// A packet: a buffer it owns, the frame's length, and where and when it was received.
///
/// The buffer is either on the heap or a frame of an AF_XDP UMEM ([`FrameArea`]); a UMEM
/// packet goes back to its area's free list when dropped, and an AF_XDP port sharing that
/// area transmits it as a descriptor, without a copy. Everything else sees the same slice.
#[derive(Debug)]
pub struct Pkt {
    buf: Buf,
    len: usize,
    /// Index of the port it was received on (in the switch's port table).
    pub rx_port: u16,
    /// When it was received (monotonic ns).
    pub rx_ns: u64,
}

#[derive(Debug)]
enum Buf {
    Heap(Box<[u8]>),
    Frame(area::Frame),
    #[cfg(all(feature = "dpdk", target_os = "linux"))]
    Mbuf(mbuf::Mbuf),
}

impl Clone for Pkt {
    /// A clone always lives on the heap (a UMEM frame has one owner).
    fn clone(&self) -> Pkt {
        let mut p = Pkt::with_capacity(self.capacity());
        p.set_data(self.data());
        p.rx_port = self.rx_port;
        p.rx_ns = self.rx_ns;
        p
    }
}

impl Pkt {
    /// An empty packet with room for `cap` bytes (at most [`MAX_FRAME`]).
    pub fn with_capacity(cap: usize) -> Pkt {
        Pkt {
            buf: Buf::Heap(vec![0u8; cap.min(MAX_FRAME)].into_boxed_slice()),
            len: 0,
            rx_port: 0,
            rx_ns: 0,
        }
    }

    /// A packet in a frame of a [`FrameArea`], `len` bytes long.
    pub fn in_frame(frame: area::Frame, len: usize) -> Pkt {
        let len = len.min(frame.capacity());
        Pkt {
            buf: Buf::Frame(frame),
            len,
            rx_port: 0,
            rx_ns: 0,
        }
    }

    /// A packet in a DPDK mbuf, `len` bytes long.
    #[cfg(all(feature = "dpdk", target_os = "linux"))]
    pub(crate) fn in_mbuf(m: mbuf::Mbuf, len: usize) -> Pkt {
        let len = len.min(m.bytes().len());
        Pkt {
            buf: Buf::Mbuf(m),
            len,
            rx_port: 0,
            rx_ns: 0,
        }
    }

    /// True when the packet lives in a DPDK mbuf.
    #[cfg(all(feature = "dpdk", target_os = "linux"))]
    pub(crate) fn is_mbuf(&self) -> bool {
        matches!(self.buf, Buf::Mbuf(_))
    }

    /// The mbuf it lives in, if any (still owned by the packet).
    #[cfg(all(feature = "dpdk", target_os = "linux"))]
    pub(crate) fn mbuf_ptr(&self) -> Option<*mut std::ffi::c_void> {
        match &self.buf {
            Buf::Mbuf(m) => Some(m.as_ptr()),
            _ => None,
        }
    }

    /// Gives up the mbuf it lives in (for a DPDK transmit ring); otherwise returns the packet.
    #[cfg(all(feature = "dpdk", target_os = "linux"))]
    pub(crate) fn into_mbuf(self) -> Result<mbuf::Mbuf, Pkt> {
        match self.buf {
            Buf::Mbuf(m) => Ok(m),
            buf => Err(Pkt {
                buf,
                len: self.len,
                rx_port: self.rx_port,
                rx_ns: self.rx_ns,
            }),
        }
    }

    /// A packet holding a copy of `frame` (cut at [`MAX_FRAME`]).
    pub fn from_slice(frame: &[u8]) -> Pkt {
        let mut p = Pkt::with_capacity(frame.len().max(DEFAULT_BUF));
        p.set_data(frame);
        p
    }

    #[inline]
    fn buf(&self) -> &[u8] {
        match &self.buf {
            Buf::Heap(b) => b,
            Buf::Frame(f) => f.bytes(),
            #[cfg(all(feature = "dpdk", target_os = "linux"))]
            Buf::Mbuf(m) => m.bytes(),
        }
    }

    #[inline]
    fn buf_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Buf::Heap(b) => b,
            Buf::Frame(f) => f.bytes_mut(),
            #[cfg(all(feature = "dpdk", target_os = "linux"))]
            Buf::Mbuf(m) => m.bytes_mut(),
        }
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf()[..self.len]
    }

    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.buf_mut()[..len]
    }

    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Buffer size.
    #[inline]
    pub fn capacity(&self) -> usize {
        match &self.buf {
            Buf::Heap(b) => b.len(),
            Buf::Frame(f) => f.capacity(),
            #[cfg(all(feature = "dpdk", target_os = "linux"))]
            Buf::Mbuf(m) => m.bytes().len(),
        }
    }

    /// Sets the frame length (cut to the capacity) and returns the new frame, writable. Bytes
    /// past the old length keep whatever the buffer held.
    #[inline]
    pub fn resize(&mut self, len: usize) -> &mut [u8] {
        self.len = len.min(self.capacity());
        let len = self.len;
        &mut self.buf_mut()[..len]
    }

    /// Replaces the frame with a copy of `frame` (cut to the capacity).
    pub fn set_data(&mut self, frame: &[u8]) {
        let n = frame.len().min(self.capacity());
        self.buf_mut()[..n].copy_from_slice(&frame[..n]);
        self.len = n;
    }

    /// True when the packet lives in a frame of `area`.
    pub fn in_frame_of(&self, area: &FrameArea) -> bool {
        matches!(&self.buf, Buf::Frame(f) if f.belongs_to(area))
    }

    /// When the packet lives in a frame of `area`: gives the frame up and returns its UMEM
    /// address and the frame's length, for an AF_XDP transmit descriptor (the kernel owns the
    /// frame until the completion ring hands it back). Otherwise returns the packet.
    pub(crate) fn into_frame_of(self, area: &FrameArea) -> Result<(u64, u32), Pkt> {
        let Pkt {
            buf,
            len,
            rx_port,
            rx_ns,
        } = self;
        match buf {
            Buf::Frame(f) if f.belongs_to(area) => Ok((f.into_addr(), len as u32)),
            buf => Err(Pkt {
                buf,
                len,
                rx_port,
                rx_ns,
            }),
        }
    }
}

/// Appends the packet `make` builds to `out`, built in the vector's next slot, and returns it
/// there. A receive path's packet built on the stack and then pushed (`push` may grow the
/// vector in between) was copied with wide loads over the narrow stores that built it, which
/// stalled on store forwarding: two thirds of the DPDK port's receive time in a profile.
#[inline(always)]
pub(crate) fn push_built(out: &mut Vec<Pkt>, make: impl FnOnce() -> Pkt) -> &mut Pkt {
    if out.len() == out.capacity() {
        out.reserve(1);
    }
    let at = out.len();
    out.spare_capacity_mut()[0].write(make());
    // SAFETY: the element at `at`, the first past the length and inside the capacity (reserved
    // above), was just written.
    unsafe { out.set_len(at + 1) };
    &mut out[at]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_packet_is_appended_whether_or_not_the_vector_has_room() {
        // No room at all (a new vector), then exactly full, then room to spare: each packet
        // lands at the end with its bytes, and those before it stay as they were.
        let mut out: Vec<Pkt> = Vec::new();
        let mut n = 0u8;
        let mut add = |out: &mut Vec<Pkt>| {
            push_built(out, || Pkt::from_slice(&[n, n.wrapping_add(1)])).rx_port = u16::from(n);
            n += 1;
            assert_eq!(out.len(), usize::from(n));
        };
        add(&mut out);
        while out.len() < out.capacity() {
            add(&mut out);
        }
        assert_eq!(out.len(), out.capacity());
        add(&mut out);
        out.reserve(8);
        add(&mut out);
        for (i, p) in out.iter().enumerate() {
            assert_eq!(p.data(), &[i as u8, (i as u8).wrapping_add(1)]);
            assert_eq!(p.rx_port, i as u16);
        }
    }

    #[test]
    fn pkt_buffers() {
        let mut p = Pkt::from_slice(&[1, 2, 3]);
        assert_eq!(p.data(), &[1, 2, 3]);
        assert_eq!(p.capacity(), DEFAULT_BUF);
        p.resize(5)[3..].copy_from_slice(&[4, 5]);
        assert_eq!(p.len(), 5);
        p.resize(usize::MAX);
        assert_eq!(p.len(), DEFAULT_BUF);
        let big = Pkt::from_slice(&vec![7u8; MAX_FRAME + 10]);
        assert_eq!(big.len(), MAX_FRAME);
    }
}
