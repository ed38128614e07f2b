//! In-memory ports: two ends of a link joined by a pair of bounded lock-free rings
//! (`crossbeam::queue::ArrayQueue`, one per direction). Each end may live on a different thread.
//! A full ring refuses packets (`tx_burst` leaves them with the caller); a link can be taken down
//! from either end or from a test through [`LinkControl`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use super::{LinkState, Port};
use crate::pkt::Pkt;

/// Shared state of one link.
#[derive(Debug)]
struct Shared {
    a_to_b: ArrayQueue<Pkt>,
    b_to_a: ArrayQueue<Pkt>,
    up: AtomicBool,
    /// Packets a sender could not place because its ring was full.
    tx_full: AtomicU64,
}

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    name: String,
    shared: Arc<Shared>,
    is_a: bool,
}

/// Takes a link down or up from outside (tests, the fabric emulator).
#[derive(Debug, Clone)]
pub struct LinkControl {
    shared: Arc<Shared>,
}

impl LinkControl {
    /// Sets the link state. A down link delivers nothing: packets sent are discarded by the
    /// sender's `tx_burst` (and counted there as accepted, like frames sent into a dead cable).
    pub fn set_up(&self, up: bool) {
        // Relaxed: a standalone flag; ordering with packet data is not needed (a packet that
        // races the change may go either way, as on a real cable).
        self.shared.up.store(up, Ordering::Relaxed);
    }

    /// Current state.
    pub fn is_up(&self) -> bool {
        self.shared.up.load(Ordering::Relaxed)
    }

    /// Times a sender found its ring full.
    pub fn tx_full(&self) -> u64 {
        self.shared.tx_full.load(Ordering::Relaxed)
    }
}

/// Makes a link of two ports, `capacity` packets deep in each direction.
pub fn link(a: &str, b: &str, capacity: usize) -> (MemPort, MemPort) {
    let shared = Arc::new(Shared {
        a_to_b: ArrayQueue::new(capacity.max(1)),
        b_to_a: ArrayQueue::new(capacity.max(1)),
        up: AtomicBool::new(true),
        tx_full: AtomicU64::new(0),
    });
    (
        MemPort {
            name: a.to_string(),
            shared: shared.clone(),
            is_a: true,
        },
        MemPort {
            name: b.to_string(),
            shared,
            is_a: false,
        },
    )
}

impl MemPort {
    fn tx_ring(&self) -> &ArrayQueue<Pkt> {
        if self.is_a {
            &self.shared.a_to_b
        } else {
            &self.shared.b_to_a
        }
    }

    fn rx_ring(&self) -> &ArrayQueue<Pkt> {
        if self.is_a {
            &self.shared.b_to_a
        } else {
            &self.shared.a_to_b
        }
    }

    /// A handle that can take this link up or down.
    pub fn control(&self) -> LinkControl {
        LinkControl {
            shared: self.shared.clone(),
        }
    }

    /// Packets waiting to be received at this end.
    pub fn rx_pending(&self) -> usize {
        self.rx_ring().len()
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, _now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.rx_ring().pop() {
                Some(p) => {
                    out.push(p);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Pkt>) -> usize {
        if !self.shared.up.load(Ordering::Relaxed) {
            let n = pkts.len();
            pkts.clear();
            return n;
        }
        let ring = self.tx_ring();
        // This end is the ring's only producer (`MemPort` is not `Clone` and `tx_burst` takes
        // `&mut self`), and the consumer only frees slots, so the free space read here can only
        // grow before the pushes below: every one of them succeeds.
        let free = ring.capacity() - ring.len();
        let n = pkts.len().min(free);
        if n < pkts.len() {
            self.shared.tx_full.fetch_add(1, Ordering::Relaxed);
        }
        let mut sent = 0;
        for p in pkts.drain(..n) {
            if ring.push(p).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    fn link_state(&self) -> LinkState {
        if self.shared.up.load(Ordering::Relaxed) {
            LinkState::Up
        } else {
            LinkState::Down
        }
    }

    fn tx_backlog(&self) -> usize {
        self.tx_ring().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_and_backpressure() {
        let (mut a, mut b) = link("a", "b", 2);
        let mut out = Vec::with_capacity(8);
        let mut pkts: Vec<Pkt> = (0..3u8).map(|i| Pkt::from_slice(&[i])).collect();
        assert_eq!(a.tx_burst(0, &mut pkts), 2);
        assert_eq!(pkts.len(), 1, "the third waits with the caller");
        assert_eq!(pkts[0].data(), &[2]);
        assert_eq!(a.tx_backlog(), 2);
        assert_eq!(a.control().tx_full(), 1);
        assert_eq!(b.rx_burst(0, &mut out, 8), 2);
        assert_eq!(
            out.iter().map(|p| p.data()[0]).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(a.tx_burst(0, &mut pkts), 1);
        let mut back = vec![Pkt::from_slice(&[9])];
        assert_eq!(b.tx_burst(0, &mut back), 1);
        out.clear();
        assert_eq!(a.rx_burst(0, &mut out, 8), 1);
        assert_eq!(out[0].data(), &[9]);
    }

    #[test]
    fn a_down_link_delivers_nothing() {
        let (mut a, mut b) = link("a", "b", 4);
        a.control().set_up(false);
        assert_eq!(a.link_state(), LinkState::Down);
        let mut pkts = vec![Pkt::from_slice(&[1])];
        assert_eq!(a.tx_burst(0, &mut pkts), 1);
        let mut out = Vec::new();
        assert_eq!(b.rx_burst(0, &mut out, 4), 0);
        a.control().set_up(true);
        assert_eq!(b.link_state(), LinkState::Up);
    }
}
