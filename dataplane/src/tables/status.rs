//! The status board: the live state of each port that every worker reads and one writes
//! (carrier, transmit backlog, an uplink's place in the spray set). The sprayer reads it per
//! packet; path health ([`crate::health`]) takes failing uplinks out of the spray set through it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam::utils::CachePadded;

/// Live state of a port that every worker may read: carrier, transmit backlog for
/// `least_loaded`, an uplink's place in the spray set. Written only by the worker that owns the
/// port.
#[derive(Debug)]
pub struct PortStatus {
    up: AtomicBool,
    backlog: AtomicUsize,
    rx_done: AtomicBool,
    /// An uplink's place in the spray set: its path health and the operator's pin.
    sprayable: AtomicBool,
    /// Nothing more arrives over it for a reorder stage ([`PortStatus::rx_dead`]).
    rx_dead: AtomicBool,
}

impl Default for PortStatus {
    fn default() -> Self {
        PortStatus::new_up()
    }
}

impl PortStatus {
    /// A status that starts up, in the spray set, with an empty backlog.
    pub fn new_up() -> Self {
        PortStatus {
            up: AtomicBool::new(true),
            backlog: AtomicUsize::new(0),
            rx_done: AtomicBool::new(false),
            sprayable: AtomicBool::new(true),
            rx_dead: AtomicBool::new(false),
        }
    }
    /// In the spray set (an uplink: its path health and pin allow it)? Relaxed, as
    /// [`PortStatus::is_up`].
    #[inline]
    pub fn sprayable(&self) -> bool {
        self.sprayable.load(Ordering::Relaxed)
    }
    /// Sets spray eligibility (owner only).
    #[inline]
    pub fn set_sprayable(&self, on: bool) {
        self.sprayable.store(on, Ordering::Relaxed);
    }
    /// Nothing more arrives over this port for a reorder stage: its carrier is down and what
    /// it received before has been handed on, or path health finds that no peer's traffic
    /// comes over it ([`crate::health`]). Path-order loss detection stops waiting for it.
    /// Acquire, paired with the owner's Release store: a worker that reads it true and then
    /// takes its hand-off ring finds there every packet of the port the owner handed over
    /// before saying so.
    #[inline]
    pub fn rx_dead(&self) -> bool {
        self.rx_dead.load(Ordering::Acquire)
    }
    /// Sets it (owner only; Release: see [`PortStatus::rx_dead`]).
    #[inline]
    pub fn set_rx_dead(&self, dead: bool) {
        self.rx_dead.store(dead, Ordering::Release);
    }
    /// Carrier up? Relaxed: a hint for choosing a path; a packet that races a change is sent
    /// into a link that just went down, as it would be on real hardware.
    #[inline]
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
    /// Sets carrier state (owner only).
    #[inline]
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }
    /// Packets queued towards the port. Relaxed: a load estimate, not a synchronisation point.
    #[inline]
    pub fn backlog(&self) -> usize {
        self.backlog.load(Ordering::Relaxed)
    }
    /// True once the port will never receive again (a replayed capture ended).
    #[inline]
    pub fn rx_done(&self) -> bool {
        self.rx_done.load(Ordering::Relaxed)
    }
    /// Publishes end of input (owner only).
    #[inline]
    pub fn set_rx_done(&self, done: bool) {
        self.rx_done.store(done, Ordering::Relaxed);
    }
    /// Publishes the backlog (owner only).
    #[inline]
    pub fn set_backlog(&self, n: usize) {
        self.backlog.store(n, Ordering::Relaxed);
    }
}

/// The status board: one cache-padded [`PortStatus`] per port.
pub type StatusBoard = [CachePadded<PortStatus>];
