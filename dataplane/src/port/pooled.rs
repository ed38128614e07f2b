//! A middleware that gives any port a receive pool of its own, as the AF_PACKET backend has:
//! each packet received is copied into a frame of a [`FrameArea`] and keeps it for as long as
//! it lives, and while every frame is taken the port receives nothing (what arrives waits in
//! the wrapped port, as in a kernel ring). In-memory links with it behave like real ports whose
//! pool the switch can run dry by holding packets (the tests of that; the fabric emulator).

use std::sync::Arc;

use super::{LinkState, Port, RxPool};
use crate::pkt::area::FrameArea;
use crate::pkt::Pkt;

/// Wraps a port with a receive pool of `frames` frames.
pub struct PooledPort<P: Port> {
    inner: P,
    area: Arc<FrameArea>,
    /// A packet taken from the wrapped port that found no frame: the first to copy next.
    waiting: Option<Pkt>,
    scratch: Vec<Pkt>,
}

impl<P: Port> PooledPort<P> {
    /// `inner` with a pool of `frames` frames of `frame_size` bytes (a power of two, 2048 to
    /// 65536).
    ///
    /// # Errors
    /// The frame area's.
    pub fn new(inner: P, frames: u32, frame_size: u32) -> std::io::Result<PooledPort<P>> {
        Ok(PooledPort {
            inner,
            area: FrameArea::new(frames, frame_size)?,
            waiting: None,
            scratch: Vec::with_capacity(64),
        })
    }

    /// Its pool.
    pub fn area(&self) -> &Arc<FrameArea> {
        &self.area
    }

    /// Copies `p` into a frame of the pool, or gives it back when none is free.
    fn copy_in(&self, p: Pkt) -> Result<Pkt, Pkt> {
        let Some(mut f) = self.area.alloc() else {
            return Err(p);
        };
        let n = p.len().min(f.capacity());
        f.bytes_mut()[..n].copy_from_slice(&p.data()[..n]);
        let mut q = Pkt::in_frame(f, n);
        q.rx_ns = p.rx_ns;
        Ok(q)
    }
}

impl<P: Port> Port for PooledPort<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        let mut got = 0;
        if let Some(p) = self.waiting.take() {
            match self.copy_in(p) {
                Ok(q) => {
                    out.push(q);
                    got += 1;
                }
                Err(p) => {
                    self.waiting = Some(p);
                    return 0;
                }
            }
        }
        // No more than the free frames: the rest stays in the wrapped port.
        let room = max.saturating_sub(got).min(self.area.free_frames());
        if room == 0 {
            return got;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        self.inner.rx_burst(now, &mut scratch, room);
        for p in scratch.drain(..) {
            if self.waiting.is_some() {
                // Cannot happen with one consumer of the pool; kept safe all the same: the
                // packet would otherwise be lost.
                break;
            }
            match self.copy_in(p) {
                Ok(q) => {
                    out.push(q);
                    got += 1;
                }
                Err(p) => self.waiting = Some(p),
            }
        }
        self.scratch = scratch;
        got
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize {
        self.inner.tx_burst(now, pkts)
    }

    fn poll(&mut self, now: u64) {
        self.inner.poll(now);
    }

    fn link_state(&self) -> LinkState {
        self.inner.link_state()
    }

    fn tx_backlog(&self) -> usize {
        self.inner.tx_backlog()
    }

    fn next_release_ns(&self) -> Option<u64> {
        self.inner.next_release_ns()
    }

    fn rx_finished(&self) -> bool {
        self.waiting.is_none() && self.inner.rx_finished()
    }

    fn flush(&mut self) {
        self.inner.flush()
    }

    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    fn backend_counters(&self) -> super::BackendCounters {
        self.inner.backend_counters()
    }

    fn wait_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        self.inner.wait_fds(out)
    }

    fn rx_pool(&self) -> Option<Arc<dyn RxPool>> {
        Some(self.area.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::mem;

    #[test]
    fn it_receives_only_into_free_frames_and_the_rest_waits() {
        let (mut far, near) = mem::link("far", "near", 64);
        let mut p = PooledPort::new(near, 4, 2048).unwrap();
        let mut v: Vec<Pkt> = (0..10u8).map(|i| Pkt::from_slice(&[i; 60])).collect();
        far.tx_burst(0, &mut v);
        let mut held = Vec::new();
        assert_eq!(p.rx_burst(0, &mut held, 32), 4, "four frames");
        assert_eq!(p.rx_pool().unwrap().free(), 0);
        assert_eq!(
            p.rx_burst(0, &mut held, 32),
            0,
            "none free: nothing received"
        );
        // Two packets go (transmitted, dropped): two more come in, in order.
        held.drain(..2);
        let mut more = Vec::new();
        assert_eq!(p.rx_burst(0, &mut more, 32), 2);
        let firsts: Vec<u8> = held.iter().chain(&more).map(|p| p.data()[0]).collect();
        assert_eq!(firsts, vec![2, 3, 4, 5]);
        assert!(held.iter().all(|p| p.len() == 60));
        drop(held);
        drop(more);
        let mut rest = Vec::new();
        assert_eq!(p.rx_burst(0, &mut rest, 32), 4);
        assert_eq!(rest[0].data()[0], 6, "nothing lost");
    }
}
