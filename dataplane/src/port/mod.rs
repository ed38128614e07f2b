//! Ports move frames; they decide nothing.
//!
//! A [`Port`] receives and transmits in bursts: `rx_burst` appends up to `max` received packets
//! to a caller-owned `Vec` (whose capacity the caller reserved once), and `tx_burst` takes
//! packets from the front of a caller-owned `Vec`, leaving what the port could not accept (a
//! full ring) for the caller to retry: nothing is dropped silently. Packets ([`Pkt`]) own
//! their buffer and move between ports without copying; in steady state nothing allocates.
//!
//! Backends: [`mem`] (a pair of bounded lock-free rings: tests, benchmarks, the demo) and
//! [`pcap`] (replays a capture, writes what it sends). Middleware that wraps any port:
//! [`fault::FaultInjector`] (seeded drop, delay with jitter, reorder, duplicate, corrupt, rate
//! limit) and [`tap::PcapTap`] (writes what passes to a pcap file).

pub mod fault;
pub mod mem;
pub mod pcap;
pub mod tap;

/// Largest frame a [`Pkt`] holds: a 9000-byte jumbo MTU plus Ethernet and two VLAN tags.
pub const MAX_FRAME: usize = 9216;

/// Buffer size of packets made by [`Pkt::from_slice`] for ordinary frames: RoCE MTU 4096 plus
/// every header fits.
pub const DEFAULT_BUF: usize = 4608;

/// A packet: an owned buffer, the frame's length, and where and when it was received.
#[derive(Debug, Clone)]
pub struct Pkt {
    buf: Box<[u8]>,
    len: usize,
    /// Index of the port it was received on (in the switch's port table).
    pub rx_port: u16,
    /// When it was received (monotonic ns).
    pub rx_ns: u64,
}

impl Pkt {
    /// An empty packet with room for `cap` bytes (at most [`MAX_FRAME`]).
    pub fn with_capacity(cap: usize) -> Pkt {
        Pkt {
            buf: vec![0u8; cap.min(MAX_FRAME)].into_boxed_slice(),
            len: 0,
            rx_port: 0,
            rx_ns: 0,
        }
    }

    /// A packet holding a copy of `frame` (cut at [`MAX_FRAME`]).
    pub fn from_slice(frame: &[u8]) -> Pkt {
        let mut p = Pkt::with_capacity(frame.len().max(DEFAULT_BUF));
        p.set_data(frame);
        p
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
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
        self.buf.len()
    }

    /// Sets the frame length (cut to the capacity) and returns the new frame, writable. Bytes
    /// past the old length keep whatever the buffer held.
    #[inline]
    pub fn resize(&mut self, len: usize) -> &mut [u8] {
        self.len = len.min(self.buf.len());
        &mut self.buf[..self.len]
    }

    /// Replaces the frame with a copy of `frame` (cut to the capacity).
    pub fn set_data(&mut self, frame: &[u8]) {
        let n = frame.len().min(self.buf.len());
        self.buf[..n].copy_from_slice(&frame[..n]);
        self.len = n;
    }
}

/// Whether a port can carry traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// Carrier up.
    Up,
    /// Carrier down (or administratively down).
    Down,
}

/// A network port driven in bursts by exactly one worker.
pub trait Port: Send {
    /// The port's name.
    fn name(&self) -> &str;

    /// Appends up to `max` received packets to `out` and returns how many. `now` is the
    /// worker's clock (monotonic ns), used by backends and middleware that pace or delay.
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize;

    /// Transmits packets from the front of `pkts`, removing the ones the port took, and returns
    /// how many. Packets it cannot take now (ring full) stay in `pkts`, in order.
    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize;

    /// Moves time-driven work along (delayed packets, paced replay). Called every loop
    /// iteration, also when nothing was received.
    fn poll(&mut self, _now: u64) {}

    /// Carrier state.
    fn link_state(&self) -> LinkState;

    /// Packets accepted by `tx_burst` but not yet delivered to the wire or the peer.
    fn tx_backlog(&self) -> usize;

    /// True when the port has nothing more to receive, ever (a replayed capture that ended).
    fn rx_finished(&self) -> bool {
        false
    }

    /// Flushes buffered output (capture files); called at shutdown.
    fn flush(&mut self) {}
}

impl<P: Port + ?Sized> Port for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        (**self).rx_burst(now, out, max)
    }
    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize {
        (**self).tx_burst(now, pkts)
    }
    fn poll(&mut self, now: u64) {
        (**self).poll(now)
    }
    fn link_state(&self) -> LinkState {
        (**self).link_state()
    }
    fn tx_backlog(&self) -> usize {
        (**self).tx_backlog()
    }
    fn rx_finished(&self) -> bool {
        (**self).rx_finished()
    }
    fn flush(&mut self) {
        (**self).flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
