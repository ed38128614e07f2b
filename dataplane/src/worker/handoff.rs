//! Hand-off rings between workers: a packet whose egress port another worker owns goes into
//! that worker's ring, in batches of up to [`HANDOFF_BATCH`] (one ring operation per batch, not
//! per packet: with a push and a pop per packet, two workers forwarded less than one, as
//! BENCHMARKS.md shows); when the ring is full the packets wait here, per owner, in order.
//!
//! A batch is a `Vec` whose buffer never grows past [`HANDOFF_BATCH`] and goes round: a
//! producer takes an empty one from the owner's pool, fills it, queues it; the owner empties it
//! and gives it back to its pool. The pools are filled when the rings are made, so the packet
//! path allocates nothing; a producer that finds the pool empty (every batch in flight: the
//! ring is full anyway) keeps its packets waiting.

use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use super::Worker;
use crate::engine::DropReason;
use crate::ids::PortId;
use crate::meta::RoceMeta;
use crate::pkt::Pkt;

/// Hand-offs in one batch at most.
pub const HANDOFF_BATCH: usize = 32;

/// Batches queued for one worker at most, for a ring meant to hold `packets`: one per 8 of
/// them, at least 16. Full batches hold four times `packets`, quarter-full ones (a burst of 32
/// split four ways) `packets`, single packets (a light load) an eighth: then the rest waits on
/// the sending worker, bounded by `tx_queue_limit`. With one per 16 the two-worker peer
/// benchmark dropped hand-offs again (the sending worker's wait queue overflowed).
fn slots_for(packets: usize) -> usize {
    (packets / 8).max(16)
}

struct Ring {
    /// Batches queued for the owner, oldest first.
    queued: ArrayQueue<Vec<Handoff>>,
    /// Empty batches, for producers to fill.
    empty: ArrayQueue<Vec<Handoff>>,
}

impl Ring {
    /// Returns an emptied batch (its buffer kept) to the pool.
    #[inline]
    fn give_back(&self, mut batch: Vec<Handoff>) {
        batch.clear();
        let _ = self.empty.push(batch);
    }
}

/// Makes a hand-off ring meant to hold about `packets` packets (see `slots_for`) from up to
/// `producers` other workers: any number of producers (through clones of [`HandoffTx`]) and
/// exactly one consumer (the owning worker, which alone holds the [`HandoffRx`]: it is not
/// `Clone`). The rings themselves are crossbeam's lock-free `ArrayQueue`.
pub fn handoff_ring(packets: usize, producers: usize) -> (HandoffTx, HandoffRx) {
    let slots = slots_for(packets);
    // Every batch is queued, in the pool, being filled by a producer (one each at most) or
    // being emptied by the consumer (one): the pool runs dry only when the ring is full.
    let batches = slots + producers + 1;
    let ring = Arc::new(Ring {
        queued: ArrayQueue::new(slots),
        empty: ArrayQueue::new(batches),
    });
    for _ in 0..batches {
        let _ = ring.empty.push(Vec::with_capacity(HANDOFF_BATCH));
    }
    (HandoffTx(ring.clone()), HandoffRx(ring))
}

/// The producing side of a worker's hand-off ring.
#[derive(Clone)]
pub struct HandoffTx(Arc<Ring>);

impl HandoffTx {
    /// An empty batch to fill (`None`: every batch is in flight).
    #[inline]
    pub fn take_empty(&self) -> Option<Vec<Handoff>> {
        self.0.empty.pop()
    }

    /// Queues a batch; gives it back when the ring is full.
    ///
    /// # Errors
    /// The batch itself, when the ring is full.
    #[inline]
    pub fn push(&self, batch: Vec<Handoff>) -> Result<(), Vec<Handoff>> {
        self.0.queued.push(batch)
    }

    /// Gives an emptied batch back to the pool.
    #[inline]
    pub fn give_back(&self, batch: Vec<Handoff>) {
        self.0.give_back(batch);
    }
}

/// The consuming side of a worker's hand-off ring, owned by that worker alone.
pub struct HandoffRx(Arc<Ring>);

impl HandoffRx {
    /// Takes the oldest batch; give it back with [`HandoffRx::give_back`] once emptied.
    #[inline]
    pub fn pop(&self) -> Option<Vec<Handoff>> {
        self.0.queued.pop()
    }

    /// Returns an emptied batch to the pool producers take from.
    #[inline]
    pub fn give_back(&self, batch: Vec<Handoff>) {
        self.0.give_back(batch);
    }

    /// True when no hand-off waits.
    pub fn is_empty(&self) -> bool {
        self.0.queued.is_empty()
    }

    /// Batches waiting now.
    pub fn len(&self) -> usize {
        self.0.queued.len()
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
    /// Gives `h` to the worker `owner`: into this iteration's batch for it (queued when full
    /// and at the end of the iteration), or behind what already waits for that owner.
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
        let batch = &mut self.outbox[owner];
        if batch.capacity() == 0 {
            match q.take_empty() {
                Some(b) => *batch = b,
                None => {
                    self.wait_handoff(owner, h);
                    return;
                }
            }
        }
        batch.push(h);
        if batch.len() >= HANDOFF_BATCH {
            self.send_batch(owner);
        }
    }

    /// Queues this iteration's batch for `owner`; when its ring is full, the packets wait in
    /// order (the batch goes back to the pool).
    fn send_batch(&mut self, owner: usize) {
        let batch = std::mem::take(&mut self.outbox[owner]);
        if batch.is_empty() {
            self.outbox[owner] = batch;
            return;
        }
        let q = &self.sh.handoff[owner];
        let n = batch.len() as u64;
        match q.push(batch) {
            Ok(()) => {
                self.sh.counters.handoff_out.add(n);
                self.handed |= 1 << (owner % 64);
            }
            Err(mut batch) => {
                let q = q.clone();
                for h in batch.drain(..) {
                    self.wait_handoff(owner, h);
                }
                q.give_back(batch);
            }
        }
    }

    /// Step 5 of an iteration: the batches still being filled go to their owners.
    pub(super) fn send_handoffs(&mut self) {
        for owner in 0..self.outbox.len() {
            if !self.outbox[owner].is_empty() {
                self.send_batch(owner);
            }
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

    /// Retries waiting hand-offs, each owner's in order, a batch at a time; an owner whose ring
    /// is still full keeps its own and holds up no other. True when any went.
    pub(super) fn retry_handoffs(&mut self) -> bool {
        let mut moved = false;
        for owner in 0..self.handoff_wait.len() {
            let q = &self.sh.handoff[owner];
            while !self.handoff_wait[owner].is_empty() {
                let Some(mut batch) = q.take_empty() else {
                    break;
                };
                let wait = &mut self.handoff_wait[owner];
                while batch.len() < HANDOFF_BATCH {
                    let Some(h) = wait.pop_front() else { break };
                    batch.push(h);
                }
                let n = batch.len();
                match q.push(batch) {
                    Ok(()) => {
                        self.waiting -= n;
                        self.sh.counters.handoff_out.add(n as u64);
                        self.handed |= 1 << (owner % 64);
                        moved = true;
                    }
                    Err(mut batch) => {
                        // Back in front, in order.
                        for h in batch.drain(..).rev() {
                            wait.push_front(h);
                        }
                        q.give_back(batch);
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
        self.ask_reorder_bursts(now);
        let due = self.sh.inbox.len().max(8);
        for _ in 0..due {
            let Some(mut batch) = self.sh.inbox.pop() else {
                break;
            };
            taken += batch.len();
            for h in batch.drain(..) {
                if let Some(meta) = h.reorder {
                    self.queue_reorder(h.port, h.pkt, meta, now);
                } else {
                    self.enqueue_local(h.port, h.pkt, now);
                }
            }
            self.sh.inbox.give_back(batch);
        }
        self.reorder_queued(now);
        if taken > 0 {
            self.sh.counters.handoff_in.add(taken as u64);
            work = true;
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handoff(port: PortId) -> Handoff {
        Handoff {
            port,
            reorder: None,
            pkt: Pkt::from_slice(&[0u8; 60]),
        }
    }

    #[test]
    fn batches_arrive_in_order_go_round_and_a_full_ring_refuses() {
        let (tx, rx) = handoff_ring(128, 3);
        let slots = slots_for(128);
        let mut queued: u16 = 0;
        loop {
            let mut b = tx.take_empty().expect("a batch in the pool");
            assert!(b.is_empty() && b.capacity() >= HANDOFF_BATCH);
            b.push(handoff(queued));
            b.push(handoff(queued + 1000));
            match tx.push(b) {
                Ok(()) => queued += 1,
                Err(b) => {
                    tx.give_back(b);
                    break;
                }
            }
        }
        assert_eq!(usize::from(queued), slots);
        for k in 0..queued {
            let b = rx.pop().expect("queued batch");
            let ports: Vec<PortId> = b.iter().map(|h| h.port).collect();
            assert_eq!(ports, vec![k, k + 1000]);
            rx.give_back(b);
        }
        assert!(rx.pop().is_none() && rx.is_empty());
        // Every batch is back in the pool, empty, with its buffer.
        let mut pool = Vec::new();
        while let Some(b) = tx.take_empty() {
            assert!(b.is_empty() && b.capacity() >= HANDOFF_BATCH);
            pool.push(b);
        }
        assert_eq!(pool.len(), slots + 3 + 1);
    }
}
