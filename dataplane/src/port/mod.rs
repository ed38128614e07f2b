//! Ports move frames; they decide nothing.
//!
//! A [`Port`] receives and transmits in bursts: `rx_burst` appends up to `max` received packets
//! to a caller-owned `Vec` (whose capacity the caller reserved once), and `tx_burst` takes
//! packets from the front of a caller-owned `Vec`, leaving what the port could not accept (a
//! full ring) for the caller to retry: nothing is dropped silently. Packets ([`Pkt`]) own
//! their buffer and move between ports without copying; in steady state nothing allocates.
//!
//! Backends: [`mem`] (a pair of bounded lock-free rings: tests, benchmarks, the demo),
//! [`pcap`] (replays a capture, writes what it sends), and on Linux the real ports [`xdp`]
//! (AF_XDP, the fast path) and [`afpacket`] (AF_PACKET, the portable fallback). Middleware that wraps any port:
//! [`fault::FaultInjector`] (seeded drop, delay with jitter, reorder, duplicate, corrupt, rate
//! limit) and [`tap::PcapTap`] (writes what passes to a pcap file).

#[cfg(target_os = "linux")]
pub mod afpacket;
#[cfg(all(feature = "dpdk", target_os = "linux"))]
pub mod dpdk;
pub mod fault;
pub mod mem;
pub mod pcap;
pub mod pooled;
#[cfg(target_os = "linux")]
pub mod sys;
pub mod tap;
#[cfg(target_os = "linux")]
pub mod xdp;

use crate::pkt::area::FrameArea;
use crate::pkt::Pkt;

/// What a port's backend counts below the switch (published as the port's `backend_*`
/// counters): where an operator looks first when frames go missing between wire and switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendCounters {
    /// Frames dropped before they reached a ring (AF_XDP `rx_dropped`, DPDK `imissed`).
    pub rx_dropped: u64,
    /// Frames dropped because the receive ring was full (AF_XDP `rx_ring_full`).
    pub rx_ring_full: u64,
    /// Times a frame found no buffer to go into (AF_XDP fill ring empty, DPDK `rx_nombuf`):
    /// the fill ring or pool is too small for the bursts.
    pub rx_no_buffer: u64,
    /// Invalid descriptors (AF_XDP, both directions) or erroneous frames (DPDK `ierrors`).
    pub invalid: u64,
}

/// Whether a port can carry traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkState {
    /// Carrier up.
    Up,
    /// Carrier down (or administratively down).
    Down,
}

/// A pool of receive buffers: what a port receives into, and what a packet keeps for as long
/// as it lives (an AF_PACKET or AF_XDP frame area, a DPDK mempool). A packet the reorder stage
/// holds keeps its buffer, so holding can empty the pool and stop the port from receiving,
/// the retransmissions that would fill the gaps included: the worker watches each pool's fill
/// and has the stage give up its oldest gaps before that.
pub trait RxPool: Send + Sync + std::fmt::Debug {
    /// Buffers in all.
    fn capacity(&self) -> usize;
    /// Buffers free now (an estimate read without a lock).
    fn free(&self) -> usize;
}

impl RxPool for FrameArea {
    fn capacity(&self) -> usize {
        self.frames() as usize
    }
    fn free(&self) -> usize {
        self.free_frames()
    }
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

    /// When that backlog next moves on its own clock (a delayed or rate-limited packet's
    /// release, worker clock ns; a time in the past: now), for ports that hold packets until a
    /// time rather than until a ring has room. `None`: the port does not know (its worker
    /// comes back after its idle policy's short wait).
    fn next_release_ns(&self) -> Option<u64> {
        None
    }

    /// True when the port has nothing more to receive, ever (a replayed capture that ended).
    fn rx_finished(&self) -> bool {
        false
    }

    /// Flushes buffered output (capture files); called at shutdown.
    fn flush(&mut self) {}

    /// Frames the backend itself lost so far (kernel-side receive drops, frames too large for
    /// it). Cheap: a cached value, read every loop iteration.
    fn dropped(&self) -> u64 {
        0
    }

    /// What the backend's own layer counted (the kernel's AF_XDP statistics, a DPDK device's
    /// counters), cumulative. Cheap: cached values, read every loop iteration.
    fn backend_counters(&self) -> BackendCounters {
        BackendCounters::default()
    }

    /// Appends the file descriptors that become readable when this port has packets to
    /// receive, so an idle worker can sleep in `poll(2)` until traffic arrives instead of
    /// waking on a timer (see `worker::IdleWaiter`). Ports without one (in-memory, pcap) add
    /// nothing: their worker sleeps for the idle policy's interval.
    fn wait_fds(&self, _out: &mut Vec<std::os::fd::RawFd>) {}

    /// The pool the packets it receives keep their buffers in (`None`: each packet owns its
    /// own heap buffer).
    fn rx_pool(&self) -> Option<std::sync::Arc<dyn RxPool>> {
        None
    }
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
    fn next_release_ns(&self) -> Option<u64> {
        (**self).next_release_ns()
    }
    fn rx_finished(&self) -> bool {
        (**self).rx_finished()
    }
    fn flush(&mut self) {
        (**self).flush()
    }
    fn dropped(&self) -> u64 {
        (**self).dropped()
    }
    fn backend_counters(&self) -> BackendCounters {
        (**self).backend_counters()
    }
    fn wait_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        (**self).wait_fds(out)
    }
    fn rx_pool(&self) -> Option<std::sync::Arc<dyn RxPool>> {
        (**self).rx_pool()
    }
}
