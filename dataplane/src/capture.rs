//! Live packet capture on a port of a running switch (`sprayctl capture start PORT FILE`).
//!
//! One slot per port. While every slot is off, a worker pays one relaxed load per loop
//! iteration ([`CaptureTaps::any_on`]); while one is on, workers copy each packet received on
//! a capturing port or queued to it into the slot's bounded queue (a copy, so the packet itself
//! moves on untouched) and count what does not fit. The control thread drains the queues into
//! pcap files. Nothing here blocks a worker.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam::queue::ArrayQueue;

use crate::pkt::Pkt;

/// Packets a slot holds between two drains by the control thread.
pub const TAP_QUEUE: usize = 8192;

/// One port's capture slot.
#[derive(Debug)]
pub struct TapSlot {
    on: AtomicBool,
    queue: ArrayQueue<(u64, Pkt)>,
    dropped: AtomicU64,
}

/// The capture slots of every port.
#[derive(Debug)]
pub struct CaptureTaps {
    slots: Box<[TapSlot]>,
    /// Slots that are on.
    active: AtomicUsize,
}

impl CaptureTaps {
    /// Slots for `ports` ports, all off.
    pub fn new(ports: usize) -> CaptureTaps {
        CaptureTaps {
            slots: (0..ports)
                .map(|_| TapSlot {
                    on: AtomicBool::new(false),
                    queue: ArrayQueue::new(TAP_QUEUE),
                    dropped: AtomicU64::new(0),
                })
                .collect(),
            active: AtomicUsize::new(0),
        }
    }

    /// True while a capture runs on any port. Workers look once per loop iteration and call
    /// [`CaptureTaps::tap`] only then.
    #[inline]
    pub fn any_on(&self) -> bool {
        // Relaxed, as for each slot's flag: a capture may start an iteration late.
        self.active.load(Ordering::Relaxed) != 0
    }

    /// Called by workers for each packet received on or queued to `port` at `now`.
    #[inline]
    pub fn tap(&self, port: u16, pkt: &Pkt, now: u64) {
        if let Some(s) = self.slots.get(usize::from(port)) {
            // Relaxed: a capture that starts a few packets late is fine; the queue itself
            // synchronises the packets it carries.
            if s.on.load(Ordering::Relaxed) && s.queue.push((now, pkt.clone())).is_err() {
                s.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Turns capture on `port` on or off. Returns false for an unknown port.
    pub fn set(&self, port: u16, on: bool) -> bool {
        match self.slots.get(usize::from(port)) {
            Some(s) => {
                if on {
                    s.dropped.store(0, Ordering::Relaxed);
                }
                // Relaxed: `active` only counts slots; it orders nothing else.
                match (s.on.swap(on, Ordering::Relaxed), on) {
                    (false, true) => {
                        self.active.fetch_add(1, Ordering::Relaxed);
                    }
                    (true, false) => {
                        self.active.fetch_sub(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
                true
            }
            None => false,
        }
    }

    /// Hands every queued packet of `port` (monotonic ns, packet) to `f`; returns how many.
    pub fn drain(&self, port: u16, mut f: impl FnMut(u64, &Pkt)) -> usize {
        let Some(s) = self.slots.get(usize::from(port)) else {
            return 0;
        };
        let mut n = 0;
        while let Some((t, p)) = s.queue.pop() {
            f(t, &p);
            n += 1;
        }
        n
    }

    /// Packets that did not fit the queue since capture started on `port`.
    pub fn dropped(&self, port: u16) -> u64 {
        self.slots
            .get(usize::from(port))
            .map_or(0, |s| s.dropped.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_captures_while_on_and_counts_overflow() {
        let t = CaptureTaps::new(2);
        let p = Pkt::from_slice(&[1, 2, 3]);
        t.tap(0, &p, 1);
        assert_eq!(t.drain(0, |_, _| {}), 0);
        assert!(t.set(0, true));
        assert!(!t.set(5, true));
        for i in 0..TAP_QUEUE + 3 {
            t.tap(0, &p, i as u64);
        }
        t.tap(1, &p, 0);
        let mut first = None;
        assert_eq!(
            t.drain(0, |ts, q| {
                first.get_or_insert(ts);
                assert_eq!(q.data(), &[1, 2, 3]);
            }),
            TAP_QUEUE
        );
        assert_eq!(first, Some(0));
        assert_eq!(t.dropped(0), 3);
        assert_eq!(t.drain(1, |_, _| {}), 0, "port 1 was off");
        t.set(0, false);
        t.tap(0, &p, 0);
        assert_eq!(t.drain(0, |_, _| {}), 0);
    }
}
