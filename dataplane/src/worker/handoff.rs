//! Hand-off rings between workers: a packet whose egress port another worker owns goes into
//! that worker's ring; when the ring is full it waits here, per owner, in order.

use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use super::Worker;
use crate::engine::DropReason;
use crate::ids::PortId;
use crate::meta::RoceMeta;
use crate::pkt::Pkt;

/// Makes a hand-off ring of `capacity` packets: any number of producers (the other workers,
/// through clones of [`HandoffTx`]) and exactly one consumer (the owning worker, which alone
/// holds the [`HandoffRx`]: it is not `Clone`). The ring itself is crossbeam's lock-free
/// `ArrayQueue`.
pub fn handoff_ring(capacity: usize) -> (HandoffTx, HandoffRx) {
    let q = Arc::new(ArrayQueue::new(capacity.max(1)));
    (HandoffTx(q.clone()), HandoffRx(q))
}

/// The producing side of a worker's hand-off ring.
#[derive(Clone)]
pub struct HandoffTx(Arc<ArrayQueue<Handoff>>);

impl HandoffTx {
    /// Offers a packet; gives it back when the ring is full.
    ///
    /// # Errors
    /// The hand-off itself, when the ring is full.
    #[inline]
    // The refused hand-off comes back by value so that the caller keeps the packet; boxing it
    // would allocate per packet.
    #[allow(clippy::result_large_err)]
    pub fn push(&self, h: Handoff) -> Result<(), Handoff> {
        self.0.push(h)
    }
}

/// The consuming side of a worker's hand-off ring, owned by that worker alone.
pub struct HandoffRx(Arc<ArrayQueue<Handoff>>);

impl HandoffRx {
    /// Takes the oldest packet.
    #[inline]
    pub fn pop(&self) -> Option<Handoff> {
        self.0.pop()
    }

    /// True when no hand-off waits.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Hand-offs waiting now.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// A packet handed to the worker that owns its egress port.
#[derive(Debug)]
pub struct Handoff {
    /// Egress port.
    pub port: PortId,
    /// Its RoCE facts when it still goes through the reorder stage.
    pub reorder: Option<RoceMeta>,
    /// The packet.
    pub pkt: Pkt,
}

impl Worker {
    /// Gives `h` to the worker `owner`, or keeps it waiting behind what already waits for that
    /// owner.
    pub(super) fn hand_off(&mut self, owner: usize, h: Handoff) {
        let Some(q) = self.sh.handoff.get(owner) else {
            self.sh.counters.count_drop(DropReason::NoRoute, 1);
            return;
        };
        if self.handoff_wait.get(owner).is_some_and(|q| !q.is_empty()) {
            // Keep hand-offs to this owner in order behind those already waiting for it.
            self.wait_handoff(owner, h);
            return;
        }
        match q.push(h) {
            Ok(()) => {
                self.sh.counters.handoff_out.add(1);
                self.handed |= 1 << (owner % 64);
            }
            Err(h) => self.wait_handoff(owner, h),
        }
    }

    /// The owner's ring is full: keep the packet (bounded) and retry every iteration.
    pub(super) fn wait_handoff(&mut self, owner: usize, h: Handoff) {
        if self.waiting >= self.cfg.tx_queue_limit {
            self.sh.counters.count_drop(DropReason::TxQueueFull, 1);
            return;
        }
        match self.handoff_wait.get_mut(owner) {
            Some(q) => {
                q.push_back(h);
                self.waiting += 1;
            }
            None => self.sh.counters.count_drop(DropReason::NoRoute, 1),
        }
    }

    /// Retries waiting hand-offs, each owner's in order; an owner whose ring is still full
    /// keeps its own and holds up no other. True when any went.
    pub(super) fn retry_handoffs(&mut self) -> bool {
        let mut moved = false;
        for owner in 0..self.handoff_wait.len() {
            while let Some(h) = self.handoff_wait[owner].pop_front() {
                match self.sh.handoff[owner].push(h) {
                    Ok(()) => {
                        self.waiting -= 1;
                        self.sh.counters.handoff_out.add(1);
                        self.handed |= 1 << (owner % 64);
                        moved = true;
                    }
                    Err(h) => {
                        self.handoff_wait[owner].push_front(h);
                        break;
                    }
                }
            }
        }
        moved
    }
}

impl Worker {
    /// Step 2 of an iteration: hand-offs of ours that waited for room, then everything other
    /// workers queued for this one when the iteration began, before the reorder timers run: after
    /// a stall, the hand-offs that fill a gap come before its timeout. True when any moved.
    pub(super) fn take_handoffs(&mut self, now: u64) -> bool {
        let mut work = false;
        if self.waiting > 0 {
            work |= self.retry_handoffs();
        }
        let mut taken = 0;
        let due = self.sh.inbox.len().max(self.cfg.burst * 8);
        while taken < due {
            let Some(h) = self.sh.inbox.pop() else { break };
            taken += 1;
            if let Some(meta) = h.reorder {
                self.reorder
                    .insert(h.port, h.pkt, &meta, now, &mut self.released);
            } else {
                self.enqueue_local(h.port, h.pkt, now);
            }
        }
        if taken > 0 {
            self.sh.counters.handoff_in.add(taken as u64);
            work = true;
        }
        work
    }
}
