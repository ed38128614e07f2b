//! The poll-mode worker: the only place that ties wire, engine, reorder and ports together.
//!
//! Each worker owns a set of ports (it alone receives and transmits on them) and loops:
//!
//! 1. take the newest table snapshot and neighbours learned by other workers, if any;
//! 2. take packets other workers handed over for its ports;
//! 3. receive a burst from each port, decide each packet's fate with the engine, and move it
//!    to the transmit buffer of its egress port (or hand it to the worker that owns that port);
//! 4. flush transmit buffers that are full, whose oldest packet waited `flush_ns`, or all of
//!    them when the iteration found nothing new, so a lone packet never waits;
//! 5. publish port state and backlog, then back off if there was no work.
//!
//! Packets move as owned buffers: no copy, no allocation in steady state (proved by a test
//! with a counting allocator). A full transmit ring keeps packets in the switch, bounded by
//! `tx_queue_limit` per port; beyond it they are dropped and counted.
//!
//! A routed packet whose next hop's address is not known yet is held while the engine asks
//! for it (ARP or neighbour solicitation, again every 100 ms while packets wait), as a host's
//! neighbour queue holds it: at most [`PARK_PER_HOP`] per next hop and [`PARK_MAX`] per
//! worker, for at most [`PARK_NS`]. When the neighbour is learned (from its answer here, or
//! from another worker) the held packets go on in the order they came; the rest are dropped
//! and counted `unresolved`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::{Receiver, Sender, TrySendError};
use crossbeam::queue::ArrayQueue;
use crossbeam::utils::CachePadded;

use crate::engine::forward::build_resolve;
use crate::engine::spray::PortStatus;
use crate::engine::{DropReason, Engine, Neighbor, PortId, ResolveRequest, Tables, Verdict};
use crate::port::{LinkState, Pkt, Port, DEFAULT_BUF};
use crate::reorder::{DownlinkStage, RoceMeta, StreamRow};
use crate::stats::{PortCounters, WorkerCounters};
use crate::time::now_ns;

pub use crate::idle::{IdlePolicy, IdleWaiter, Wake};

/// A question from the control side, answered by the worker between two bursts (so the
/// control thread never touches a worker's state).
#[derive(Debug)]
pub enum Query {
    /// Up to N reorder streams.
    Streams(usize, Sender<Vec<StreamRow>>),
    /// The neighbours this worker learned (address, MAC, port).
    Neighbors(Sender<Vec<(IpAddr, crate::engine::Neighbor)>>),
    /// Forget learned neighbours not confirmed for this many ns.
    AgeNeighbors(u64),
}

/// Routed packets a worker holds while their next hops resolve.
pub const PARK_MAX: usize = 64;
/// Of those, at most this many for one next hop.
pub const PARK_PER_HOP: usize = 16;
/// Longest a packet is held for its next hop (the engine asks again at most every 100 ms while
/// packets for it keep coming).
pub const PARK_NS: u64 = 300_000_000;

/// A routed packet waiting for its next hop's address.
struct Parked {
    port: PortId,
    next_hop: IpAddr,
    since_ns: u64,
    pkt: Pkt,
}

/// Worker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Packets per receive burst and transmit flush.
    pub burst: usize,
    /// Longest a packet waits in a transmit buffer before a flush.
    pub flush_ns: u64,
    /// Packets a port's transmit buffer holds in the switch when the port pushes back.
    pub tx_queue_limit: usize,
    /// Idle behaviour.
    pub idle: IdlePolicy,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            burst: 32,
            flush_ns: 10_000,
            tx_queue_limit: 4096,
            idle: IdlePolicy::default(),
        }
    }
}

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

/// Everything one worker shares with the rest of the switch.
pub struct WorkerShared {
    /// Worker index.
    pub id: usize,
    /// Live capture slots of every port.
    pub taps: Arc<crate::capture::CaptureTaps>,
    /// Owner worker of each port.
    pub owner: Arc<[usize]>,
    /// Producer handles of every worker's hand-off ring (indexed by worker).
    pub handoff: Arc<[HandoffTx]>,
    /// This worker's own hand-off ring, which only it consumes.
    pub inbox: HandoffRx,
    /// Port state board.
    pub status: Arc<[CachePadded<PortStatus>]>,
    /// This worker's counters.
    pub counters: Arc<CachePadded<WorkerCounters>>,
    /// Per-port counters (this worker writes those of its own ports).
    pub port_counters: Arc<[CachePadded<PortCounters>]>,
    /// New table snapshots.
    pub tables_rx: Receiver<Arc<Tables>>,
    /// Neighbours learned by other workers.
    pub neigh_rx: Receiver<(IpAddr, Neighbor)>,
    /// Where to tell other workers about neighbours learned here (one sender per other worker).
    pub neigh_tx: Vec<Sender<(IpAddr, Neighbor)>>,
    /// Set to stop; the worker then flushes and returns.
    pub stop: Arc<AtomicBool>,
    /// Requests for a snapshot of the reorder streams: (how many, where to answer).
    pub queries: Receiver<Query>,
    /// Every worker's wake-up (indexed by worker; this one's is `wakes[id]`): whoever queues
    /// work for a worker other than on its ports (hand-offs, tables, questions, stop) notifies
    /// it, so an idle worker can wait in `poll(2)` instead of waking on a timer.
    pub wakes: Arc<[Wake]>,
}

struct OwnedPort {
    id: PortId,
    port: Box<dyn Port>,
    txq: Vec<Pkt>,
    /// Bytes in `txq`.
    txq_bytes: u64,
    oldest_ns: u64,
}

/// What a worker returns when it stops: its ports (so that captures can be flushed and
/// in-memory ends inspected) and the packets it still held.
pub struct WorkerExit {
    /// Its ports, by id.
    pub ports: Vec<(PortId, Box<dyn Port>)>,
    /// Packets left in transmit buffers when the ports would take no more.
    pub unsent: u64,
}

/// One poll-mode worker.
pub struct Worker {
    sh: WorkerShared,
    cfg: WorkerConfig,
    tables: Arc<Tables>,
    engine: Engine,
    reorder: Box<dyn DownlinkStage>,
    ports: Vec<OwnedPort>,
    /// Index into `ports` for each port id (usize::MAX when not owned here).
    slot: Vec<usize>,
    rx: Vec<Pkt>,
    released: Vec<(PortId, Pkt)>,
    learned: Vec<(IpAddr, Neighbor)>,
    resolve: Vec<ResolveRequest>,
    spare: Vec<Pkt>,
    /// Hand-offs waiting for room in their owner's ring, one queue per owner so that a stalled
    /// owner delays only its own packets.
    handoff_wait: Vec<std::collections::VecDeque<Handoff>>,
    /// Hand-offs in `handoff_wait`, all owners together (bounded by `tx_queue_limit`).
    waiting: usize,
    /// Routed packets waiting for their next hop to resolve, oldest first (see the module
    /// docs). Capacity fixed at start: holding a packet allocates nothing.
    parked: std::collections::VecDeque<Parked>,
    /// Workers this iteration handed packets to (bit per worker), woken at its end.
    handed: u64,
    /// A live capture runs on some port: tap packets this iteration.
    tapping: bool,
}

impl Worker {
    /// A worker over `ports` (id, port) with the current tables.
    pub fn new(
        sh: WorkerShared,
        cfg: WorkerConfig,
        tables: Arc<Tables>,
        ports: Vec<(PortId, Box<dyn Port>)>,
        reorder: Box<dyn DownlinkStage>,
        seed: u64,
    ) -> Worker {
        let n = tables.ports.len();
        let mut slot = vec![usize::MAX; n];
        let cap = cfg.tx_queue_limit.max(cfg.burst) + cfg.burst;
        let ports: Vec<OwnedPort> = ports
            .into_iter()
            .enumerate()
            .map(|(i, (id, port))| {
                if let Some(s) = slot.get_mut(usize::from(id)) {
                    *s = i;
                }
                OwnedPort {
                    id,
                    port,
                    txq: Vec::with_capacity(cap),
                    txq_bytes: 0,
                    oldest_ns: 0,
                }
            })
            .collect();
        let burst = cfg.burst.max(1);
        let sh_workers = sh.handoff.len();
        Worker {
            engine: Engine::new(&tables, seed),
            sh,
            cfg: WorkerConfig { burst, ..cfg },
            tables,
            reorder,
            ports,
            slot,
            rx: Vec::with_capacity(burst),
            released: Vec::with_capacity(burst * 4),
            learned: Vec::with_capacity(256),
            resolve: Vec::with_capacity(256),
            spare: (0..16).map(|_| Pkt::with_capacity(DEFAULT_BUF)).collect(),
            handoff_wait: (0..sh_workers)
                .map(|_| std::collections::VecDeque::with_capacity(cfg.tx_queue_limit))
                .collect(),
            waiting: 0,
            parked: std::collections::VecDeque::with_capacity(PARK_MAX),
            handed: 0,
            tapping: false,
        }
    }

    /// A lone worker owning every port, for benchmarks and tests that drive [`Worker::iterate`]
    /// by hand. Returns it with its counters.
    pub fn standalone(
        tables: Tables,
        ports: Vec<Box<dyn Port>>,
        cfg: WorkerConfig,
        reorder: Box<dyn DownlinkStage>,
    ) -> (Worker, Arc<CachePadded<WorkerCounters>>) {
        let n = ports.len();
        let counters = Arc::new(CachePadded::new(WorkerCounters::default()));
        let (tx, rx) = handoff_ring(1024);
        let (_ttx, trx) = crossbeam::channel::bounded(1);
        let (_ntx, nrx) = crossbeam::channel::bounded(1);
        let (_stx, srx) = crossbeam::channel::bounded(1);
        let sh = WorkerShared {
            id: 0,
            taps: Arc::new(crate::capture::CaptureTaps::new(n)),
            owner: vec![0; n].into(),
            handoff: vec![tx].into(),
            inbox: rx,
            status: (0..n)
                .map(|_| CachePadded::new(PortStatus::new_up()))
                .collect(),
            counters: counters.clone(),
            port_counters: (0..n)
                .map(|_| CachePadded::new(PortCounters::default()))
                .collect(),
            tables_rx: trx,
            neigh_rx: nrx,
            neigh_tx: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            queries: srx,
            wakes: vec![Wake::new()].into(),
        };
        let ports = ports
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i as PortId, p))
            .collect();
        (
            Worker::new(sh, cfg, Arc::new(tables), ports, reorder, 1),
            counters,
        )
    }

    /// Turns the engine's fast path on or off (benchmarks compare both; decisions are the
    /// same either way).
    pub fn set_fast_path(&mut self, on: bool) {
        self.engine.set_fast_path(on);
    }

    /// The reorder stage's hold-time histogram, if it keeps one.
    pub fn hold_histogram(&self) -> Option<Arc<std::sync::Mutex<hdrhistogram::Histogram<u64>>>> {
        self.reorder.hold_histogram()
    }

    /// Runs until the stop flag is set, then flushes and returns the ports.
    pub fn run(mut self) -> WorkerExit {
        let mut idle_iters: u64 = 0;
        let mut waiter = self.idle_waiter();
        loop {
            let now = now_ns();
            let work = self.iterate(now);
            if work {
                idle_iters = 0;
                continue;
            }
            idle_iters += 1;
            self.note_idle();
            if self.stop_requested() {
                break;
            }
            if !self.cfg.idle.waits(idle_iters) {
                self.cfg.idle.back_off(idle_iters, &mut waiter, None);
                continue;
            }
            let Some(timed) = self.prepare_wait() else {
                continue;
            };
            self.cfg.idle.back_off(idle_iters, &mut waiter, timed);
            self.end_wait();
        }
        self.finish()
    }

    /// Where this worker waits when idle: its ports' descriptors and its wake-up.
    fn idle_waiter(&self) -> IdleWaiter {
        IdleWaiter::for_ports(self.wait_ports(), [self.wake()])
    }

    /// Its ports, for a loop that drives several workers and builds one [`IdleWaiter`] over
    /// all of theirs (with [`Worker::wake`] of each).
    pub fn wait_ports(&self) -> impl Iterator<Item = &dyn Port> {
        self.ports.iter().map(|p| &*p.port)
    }

    /// Its wake-up: notified when work reaches it other than through its ports.
    pub fn wake(&self) -> &Wake {
        &self.sh.wakes[self.sh.id]
    }

    /// Its idle policy.
    pub fn idle_policy(&self) -> IdlePolicy {
        self.cfg.idle
    }

    /// Counts an iteration that found nothing to do.
    pub fn note_idle(&self) {
        self.sh.counters.idle_loops.add(1);
    }

    /// True once the switch asked its workers to stop ([`Worker::finish`] then flushes).
    pub fn stop_requested(&self) -> bool {
        // Acquire pairs with the Release store in `Switch::stop`: everything the stopper did
        // before asking (last publications) is visible here.
        self.sh.stop.load(Ordering::Acquire)
    }

    /// The first half of an idle wait: arms the wake-up, then looks one last time at what
    /// arrives other than on the ports, so that whatever is queued after this look also ends
    /// the wait. `None`: work is already queued (the wake-up is disarmed again), do not wait.
    /// `Some(timed)`: wait, at most `timed` when the worker has timed work (hold timers live in
    /// the reorder stage, so that is the policy's short wait); then call [`Worker::end_wait`].
    pub fn prepare_wait(&self) -> Option<Option<Duration>> {
        let wake = self.wake();
        wake.arm();
        if self.inputs_waiting() {
            wake.disarm();
            return None;
        }
        Some(self.timed_wait(now_ns()))
    }

    /// The second half of an idle wait (see [`Worker::prepare_wait`]).
    pub fn end_wait(&self) {
        self.wake().disarm();
    }

    /// Work queued for this worker other than on its ports.
    fn inputs_waiting(&self) -> bool {
        !self.sh.inbox.is_empty()
            || !self.sh.tables_rx.is_empty()
            || !self.sh.queries.is_empty()
            || self.sh.stop.load(Ordering::Acquire)
    }

    /// How long an idle wait may last when something must happen at a time rather than on an
    /// arrival (`None`: nothing is timed). Packets held for reordering (hold timers live in the
    /// reorder stage), waiting for room in a transmit ring or a peer's hand-off ring, or in a
    /// port's backlog whose release time the port does not tell: the policy's short wait
    /// (`sleep_us`). A port that tells when its backlog moves (a fault-injected link's next
    /// delayed packet): until then, at most the short wait.
    fn timed_wait(&self, now: u64) -> Option<Duration> {
        let short = self.cfg.idle.short_wait();
        if self.reorder.held() > 0 || self.waiting > 0 {
            return Some(short);
        }
        let mut next: Option<Duration> = None;
        for p in &self.ports {
            let d = if !p.txq.is_empty() {
                short
            } else if p.port.tx_backlog() > 0 {
                p.port
                    .next_release_ns()
                    .map_or(short, |at| Duration::from_nanos(at.saturating_sub(now)))
            } else {
                continue;
            };
            next = Some(next.map_or(d, |n| n.min(d)));
        }
        next.map(|d| d.min(short))
    }

    /// Wakes the workers this iteration handed packets to.
    fn wake_handed(&mut self) {
        let mut m = std::mem::take(&mut self.handed);
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(wk) = self.sh.wakes.get(w) {
                wk.notify();
            }
        }
    }

    /// One loop iteration at time `now`; true when it found work. Public for tests that drive a
    /// worker by hand with a fake clock.
    pub fn iterate(&mut self, now: u64) -> bool {
        let c = self.sh.counters.clone();
        c.loops.add(1);
        let mut work = false;
        self.tapping = self.sh.taps.any_on();
        self.engine.begin_iteration();

        // 1. Newest tables; neighbours from other workers.
        let mut newest = None;
        while let Ok(t) = self.sh.tables_rx.try_recv() {
            newest = Some(t);
        }
        if let Some(t) = newest {
            self.engine.on_tables(&t);
            if let (Some(ns), true) = (
                t.hold_timeout_ns,
                t.hold_timeout_ns != self.tables.hold_timeout_ns,
            ) {
                self.reorder.set_hold_timeout(ns);
            }
            self.tables = t;
        }
        let mut told = false;
        while let Ok((ip, n)) = self.sh.neigh_rx.try_recv() {
            self.engine.learn_remote(ip, n, now);
            told = true;
        }
        if told && !self.parked.is_empty() {
            let tables = self.tables.clone();
            self.release_parked(&tables, now);
        }
        // A control-side question about streams: answered here, between bursts, so that the
        // control thread never touches this worker's state.
        while let Ok(q) = self.sh.queries.try_recv() {
            match q {
                Query::Streams(max, answer) => {
                    let _ = answer.try_send(self.reorder.snapshot(max));
                }
                Query::Neighbors(answer) => {
                    let _ = answer.try_send(self.engine.learned_neighbors());
                }
                Query::AgeNeighbors(max_age_ns) => {
                    let gone = self.engine.age_neighbors(now, max_age_ns);
                    self.sh.counters.neigh_aged.add(gone as u64);
                }
            }
        }

        // 2. Hand-offs: ours that waited for room, then those from other workers.
        if self.waiting > 0 {
            work |= self.retry_handoffs();
        }
        // Everything queued when the iteration began is taken before the reorder timers run
        // (step 3): after a stall, the hand-offs that fill a gap come before its timeout.
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
            c.handoff_in.add(taken as u64);
            work = true;
        }

        // 3. Receive and decide. One reference-count bump per iteration, not per packet.
        let tables = self.tables.clone();
        for i in 0..self.ports.len() {
            self.ports[i].port.poll(now);
            let id = self.ports[i].id;
            let n = self.ports[i]
                .port
                .rx_burst(now, &mut self.rx, self.cfg.burst);
            if n == 0 {
                continue;
            }
            work = true;
            let port_counters = self.sh.port_counters.clone();
            let pc = &port_counters[usize::from(id)];
            pc.rx_pkts.add(n as u64);
            c.rx_pkts.add(n as u64);
            let mut rx = std::mem::take(&mut self.rx);
            // Stamp the burst in place first: writing these fields into a packet moved out of
            // the vector and then moving it on as a whole stalled on store forwarding (the
            // single hottest instruction of the loop in a profile).
            let mut bytes = 0u64;
            for pkt in rx.iter_mut() {
                bytes += pkt.len() as u64;
                pkt.rx_port = id;
                pkt.rx_ns = now;
            }
            for mut pkt in rx.drain(..) {
                if self.tapping {
                    self.sh.taps.tap(id, &pkt, now);
                }
                let d = self.engine.handle(&tables, &self.sh.status, &mut pkt, now);
                if let Some(obs) = &d.observed {
                    if obs.kind == crate::meta::MetaKind::HostNak {
                        pc.host_naks.add(1);
                    }
                    self.reorder.observe(id, obs, now, &mut self.released);
                }
                if d.host_cnp {
                    pc.host_cnps.add(1);
                }
                // ARP and ND are answered or consumed: what may have taught us a neighbour.
                let learns = matches!(d.verdict, Verdict::Consumed | Verdict::Reply(_));
                self.dispatch(d.verdict, pkt, now);
                if learns && !self.parked.is_empty() {
                    self.release_parked(&tables, now);
                }
            }
            self.rx = rx;
            pc.rx_bytes.add(bytes);
            c.rx_bytes.add(bytes);
        }

        // Reorder stage timers, then whatever it released.
        self.reorder.poll(now, &mut self.released);
        if !self.released.is_empty() {
            work = true;
            let mut rel = std::mem::take(&mut self.released);
            for (p, pkt) in rel.drain(..) {
                self.enqueue_local(p, pkt, now);
            }
            self.released = rel;
        }
        c.reorder_held.set(self.reorder.held() as u64);
        c.publish_reorder(&self.reorder.totals());

        if !self.parked.is_empty() {
            self.expire_parked(now);
        }

        // Control-plane side effects of this iteration.
        self.engine.take_resolve(&mut self.resolve);
        if !self.resolve.is_empty() {
            let reqs = std::mem::take(&mut self.resolve);
            for r in &reqs {
                self.send_resolve(r, now);
            }
            self.resolve = reqs;
            self.resolve.clear();
        }
        self.engine.take_learned(&mut self.learned);
        for (ip, n) in self.learned.drain(..) {
            for tx in &self.sh.neigh_tx {
                // A full channel only delays the other worker's learning until it sees the
                // neighbour's next ARP; never block the packet path for it.
                if let Err(TrySendError::Disconnected(_)) = tx.try_send((ip, n)) {
                    continue;
                }
            }
        }
        let s = self.engine.stats;
        c.sprayed.set(s.sprayed);
        c.hashed.set(s.hashed);
        c.fast_path.set(self.engine.fast_hits);
        c.neigh_learned.set(s.neigh_learned);

        // 4. Flush.
        let flush_all = !work;
        for i in 0..self.ports.len() {
            work |= self.flush(i, now, flush_all);
        }

        if self.handed != 0 {
            self.wake_handed();
        }

        // 5. Publish port state.
        for op in &self.ports {
            let st = &self.sh.status[usize::from(op.id)];
            st.set_up(op.port.link_state() == LinkState::Up);
            st.set_backlog(op.port.tx_backlog() + op.txq.len());
            st.set_rx_done(op.port.rx_finished());
            self.sh.port_counters[usize::from(op.id)]
                .backend_drops
                .set(op.port.dropped());
        }
        work
    }

    /// Sends a decided packet on its way (or holds it for its next hop, or counts its drop).
    #[inline]
    fn dispatch(&mut self, verdict: Verdict, pkt: Pkt, now: u64) {
        match verdict {
            Verdict::Forward(p) => self.route_to(p, pkt, None, now),
            Verdict::Reorder(p, meta) => self.route_to(p, pkt, Some(meta), now),
            Verdict::Reply(p) => {
                self.sh.counters.replies.add(1);
                self.route_to(p, pkt, None, now);
            }
            Verdict::Consumed => self.sh.counters.consumed.add(1),
            Verdict::Resolving { port, next_hop } => self.park(port, next_hop, pkt, now),
            Verdict::Drop(r) => self.sh.counters.count_drop(r, 1),
        }
    }

    /// Holds a routed packet until `next_hop` resolves, within the bounds of the module docs.
    fn park(&mut self, port: PortId, next_hop: IpAddr, pkt: Pkt, now: u64) {
        let same = self
            .parked
            .iter()
            .filter(|p| p.next_hop == next_hop)
            .count();
        if self.parked.len() >= PARK_MAX || same >= PARK_PER_HOP {
            self.sh.counters.count_drop(DropReason::Unresolved, 1);
            return;
        }
        self.sh.counters.parked.add(1);
        self.parked.push_back(Parked {
            port,
            next_hop,
            since_ns: now,
            pkt,
        });
    }

    /// Sends on, in the order they came, the held packets whose next hop is now known.
    fn release_parked(&mut self, tables: &Tables, now: u64) {
        let mut i = 0;
        while i < self.parked.len() {
            if self
                .engine
                .neighbor(tables, self.parked[i].next_hop)
                .is_none()
            {
                i += 1;
                continue;
            }
            let Some(mut p) = self.parked.remove(i) else {
                break;
            };
            // What the packet told the reorder stage was taken when it first arrived: only its
            // verdict counts now.
            let verdict = self
                .engine
                .handle(tables, &self.sh.status, &mut p.pkt, now)
                .verdict;
            if let Verdict::Resolving { .. } = verdict {
                // Known, yet not usable (learned on another port than the route's): held once.
                self.sh.counters.count_drop(DropReason::Unresolved, 1);
            } else {
                self.dispatch(verdict, p.pkt, now);
            }
        }
    }

    /// Drops (counted `unresolved`) held packets whose next hop did not answer in time, and
    /// asks again for the next hops of the others (the engine sends at most one request per
    /// next hop per 100 ms: a neighbour gets three within [`PARK_NS`], as a host's neighbour
    /// table gives it).
    fn expire_parked(&mut self, now: u64) {
        while let Some(p) = self.parked.front() {
            if now.saturating_sub(p.since_ns) < PARK_NS {
                break;
            }
            self.parked.pop_front();
            self.sh.counters.count_drop(DropReason::Unresolved, 1);
        }
        // Packets for one next hop mostly sit next to each other: one question per run of them.
        let mut last = None;
        for p in &self.parked {
            if last != Some((p.port, p.next_hop)) {
                self.engine.ask_again(p.port, p.next_hop, now);
                last = Some((p.port, p.next_hop));
            }
        }
    }

    fn send_resolve(&mut self, r: &ResolveRequest, now: u64) {
        let mut pkt = self.spare.pop().unwrap_or_else(|| Pkt::with_capacity(128));
        if build_resolve(&self.tables, r, &mut pkt) {
            self.sh.counters.resolve_sent.add(1);
            self.route_to(r.port, pkt, None, now);
        } else {
            self.spare.push(pkt);
        }
    }

    fn route_to(&mut self, port: PortId, pkt: Pkt, reorder: Option<RoceMeta>, now: u64) {
        if let Some(&i) = self.slot.get(usize::from(port)) {
            if i != usize::MAX {
                // One of this worker's ports.
                match reorder {
                    Some(meta) => self
                        .reorder
                        .insert(port, pkt, &meta, now, &mut self.released),
                    None => self.enqueue_at(i, pkt, now),
                }
                return;
            }
        }
        let owner = self
            .sh
            .owner
            .get(usize::from(port))
            .copied()
            .unwrap_or(usize::MAX);
        if owner == self.sh.id {
            if let Some(meta) = reorder {
                self.reorder
                    .insert(port, pkt, &meta, now, &mut self.released);
            } else {
                self.enqueue_local(port, pkt, now);
            }
            return;
        }
        let Some(q) = self.sh.handoff.get(owner) else {
            self.sh.counters.count_drop(DropReason::NoRoute, 1);
            return;
        };
        let h = Handoff { port, reorder, pkt };
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
    fn wait_handoff(&mut self, owner: usize, h: Handoff) {
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
    fn retry_handoffs(&mut self) -> bool {
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

    fn enqueue_local(&mut self, port: PortId, pkt: Pkt, now: u64) {
        match self.slot.get(usize::from(port)) {
            Some(&i) if i != usize::MAX => self.enqueue_at(i, pkt, now),
            _ => self.sh.counters.count_drop(DropReason::NoRoute, 1),
        }
    }

    /// Queues `pkt` on this worker's port `ports[i]`.
    #[inline]
    fn enqueue_at(&mut self, i: usize, pkt: Pkt, now: u64) {
        let Some(op) = self.ports.get_mut(i) else {
            self.sh.counters.count_drop(DropReason::NoRoute, 1);
            return;
        };
        if op.txq.len() >= self.cfg.tx_queue_limit {
            self.sh.counters.count_drop(DropReason::TxQueueFull, 1);
            self.sh.port_counters[usize::from(op.id)]
                .tx_queue_drops
                .add(1);
            return;
        }
        if op.txq.is_empty() {
            op.oldest_ns = now;
        }
        if self.tapping {
            self.sh.taps.tap(op.id, &pkt, now);
        }
        op.txq_bytes += pkt.len() as u64;
        op.txq.push(pkt);
        if op.txq.len() >= self.cfg.burst {
            self.flush(i, now, true);
        }
    }

    fn flush(&mut self, i: usize, now: u64, force: bool) -> bool {
        let burst = self.cfg.burst;
        let flush_ns = self.cfg.flush_ns;
        let op = &mut self.ports[i];
        if op.txq.is_empty() {
            return false;
        }
        let due = force || op.txq.len() >= burst || now.saturating_sub(op.oldest_ns) >= flush_ns;
        if !due {
            return false;
        }
        let before = op.txq.len();
        let sent = op.port.tx_burst(now, &mut op.txq);
        // What stays is usually nothing: sum it rather than what went.
        let bytes_after: u64 = op.txq.iter().map(|p| p.len() as u64).sum();
        let bytes = op.txq_bytes.saturating_sub(bytes_after);
        op.txq_bytes = bytes_after;
        let pc = &self.sh.port_counters[usize::from(op.id)];
        pc.tx_pkts.add(sent as u64);
        pc.tx_bytes.add(bytes);
        self.sh.counters.tx_pkts.add(sent as u64);
        self.sh.counters.tx_bytes.add(bytes);
        if sent < before {
            pc.tx_busy.add(1);
        }
        if !op.txq.is_empty() {
            op.oldest_ns = now;
        }
        sent > 0
    }

    /// Flushes what the worker still holds (bounded in time) and hands its ports back: what
    /// [`Worker::run`] does once asked to stop, for loops that drive workers themselves.
    pub fn finish(mut self) -> WorkerExit {
        // Drain what is still queued: hand-offs, reorder holds, transmit buffers, for a bounded
        // time (a peer that never reads must not hang shutdown).
        let deadline = now_ns() + 200_000_000;
        loop {
            let now = now_ns();
            while let Some(h) = self.sh.inbox.pop() {
                self.enqueue_local(h.port, h.pkt, now);
            }
            let mut rel = std::mem::take(&mut self.released);
            self.reorder.poll(u64::MAX, &mut rel);
            for (p, pkt) in rel.drain(..) {
                self.enqueue_local(p, pkt, now);
            }
            self.released = rel;
            for i in 0..self.ports.len() {
                self.ports[i].port.poll(now);
                self.flush(i, now, true);
            }
            let left: usize =
                self.ports.iter().map(|p| p.txq.len()).sum::<usize>() + self.reorder.held();
            if left == 0 || now > deadline {
                break;
            }
            std::thread::yield_now();
        }
        // Packets still waiting for a next hop that never answered: counted as such.
        self.sh
            .counters
            .count_drop(DropReason::Unresolved, self.parked.len() as u64);
        self.parked.clear();
        let unsent: usize = self.ports.iter().map(|p| p.txq.len()).sum::<usize>()
            + self.waiting
            + self.reorder.held();
        let mut ports = Vec::with_capacity(self.ports.len());
        for mut op in self.ports.drain(..) {
            op.port.flush();
            ports.push((op.id, op.port));
        }
        WorkerExit {
            ports,
            unsent: unsent as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SprayPolicy;
    use crate::port::fault::{FaultConfig, FaultInjector};
    use crate::port::mem::{self, MemPort};
    use crate::reorder::Passthrough;
    use crate::testkit::{roce_frame, tor_tables};

    /// A ToR whose host behind `d1` (10.0.1.2) is not resolved yet, its far ends, and the
    /// worker: the host behind `d0` sends to it.
    fn unresolved_tor() -> (Worker, Arc<CachePadded<WorkerCounters>>, MemPort, MemPort) {
        let mut tables = tor_tables(2, 1, SprayPolicy::RoundRobin);
        tables
            .neighbors
            .remove(&crate::engine::ip_key("10.0.1.2".parse().unwrap()));
        let (h0, d0) = mem::link("h0", "d0", 256);
        let (h1, d1) = mem::link("h1", "d1", 256);
        let (u0, _far) = mem::link("u0", "far", 256);
        let (w, c) = Worker::standalone(
            tables,
            vec![Box::new(d0), Box::new(d1), Box::new(u0)],
            WorkerConfig::default(),
            Box::new(Passthrough),
        );
        (w, c, h0, h1)
    }

    /// The host behind `d0` sends RC WRITEs with these PSNs to the unresolved host.
    fn send_to_unresolved(h0: &mut MemPort, psns: std::ops::Range<u32>) {
        let to = "10.0.1.2".parse().unwrap();
        let mut burst: Vec<Pkt> = psns
            .map(|psn| Pkt::from_slice(&roce_frame(0, to, 7, psn, 64)))
            .collect();
        h0.tx_burst(0, &mut burst);
    }

    fn psns_received(port: &mut MemPort) -> Vec<u32> {
        let mut got = Vec::new();
        port.rx_burst(0, &mut got, 256);
        got.iter()
            .filter_map(|p| {
                crate::wire::classify(p.data(), crate::wire::Pmtu::DEFAULT)
                    .ok()
                    .and_then(|c| c.roce().map(|r| r.bth.psn.value()))
            })
            .collect()
    }

    #[test]
    fn packets_to_an_unresolved_host_wait_for_its_answer_in_order() {
        let (mut w, c, mut h0, mut h1) = unresolved_tor();
        send_to_unresolved(&mut h0, 0..20);
        w.iterate(1_000);
        w.iterate(1_000 + 20_000);
        // The switch asks for the host once and holds what fits for one next hop.
        let mut asked = Vec::new();
        h1.rx_burst(0, &mut asked, 16);
        assert_eq!(asked.len(), 1);
        assert_eq!(&asked[0].data()[12..14], &[0x08, 0x06]);
        assert_eq!(c.parked.get(), PARK_PER_HOP as u64);
        assert_eq!(c.drops[DropReason::Unresolved as usize].get(), 4);
        assert!(psns_received(&mut h1).is_empty());

        // The host asks for its gateway: the switch learns it from that and sends the held
        // packets on, first to last.
        let mut arp = vec![0u8; 60];
        crate::engine::local::arp_request(
            &mut arp,
            crate::testkit::peer_mac(1),
            "10.0.1.2".parse().unwrap(),
            "10.0.1.1".parse().unwrap(),
        );
        h1.tx_burst(0, &mut vec![Pkt::from_slice(&arp)]);
        w.iterate(2_000);
        w.iterate(2_000 + 20_000);
        assert_eq!(psns_received(&mut h1), (0..16).collect::<Vec<u32>>());
        assert_eq!(c.drops[DropReason::Unresolved as usize].get(), 4);

        // Later packets go straight through.
        send_to_unresolved(&mut h0, 20..21);
        w.iterate(3_000);
        w.iterate(3_000 + 20_000);
        assert_eq!(psns_received(&mut h1), vec![20]);
        assert_eq!(c.parked.get(), PARK_PER_HOP as u64);
    }

    #[test]
    fn a_host_that_never_answers_is_asked_three_times_then_its_held_packets_are_dropped() {
        let (mut w, c, mut h0, mut h1) = unresolved_tor();
        // ARP requests the switch sent to the host's port by time `t` (two iterations, so that
        // whatever the first queued is sent).
        let mut asked_by = |w: &mut Worker, t: u64| {
            w.iterate(t);
            w.iterate(t + 20_000);
            let mut got = Vec::new();
            h1.rx_burst(0, &mut got, 16);
            assert!(got.iter().all(|p| p.data()[12..14] == [0x08, 0x06]));
            got.len()
        };
        const MS: u64 = 1_000_000;
        send_to_unresolved(&mut h0, 0..3);
        assert_eq!(asked_by(&mut w, 1_000), 1);
        assert_eq!(c.parked.get(), 3);
        assert_eq!(asked_by(&mut w, 1_000 + 50 * MS), 0, "not before 100 ms");
        assert_eq!(asked_by(&mut w, 1_000 + 100 * MS), 1, "asked again");
        assert_eq!(asked_by(&mut w, 1_000 + 200 * MS), 1, "and a third time");
        assert_eq!(asked_by(&mut w, 1_000 + PARK_NS - 30_000), 0);
        assert_eq!(c.drops[DropReason::Unresolved as usize].get(), 0, "not yet");
        assert_eq!(asked_by(&mut w, 1_000 + PARK_NS), 0);
        assert_eq!(c.drops[DropReason::Unresolved as usize].get(), 3);
        assert!(w.parked.is_empty());
        assert_eq!(
            asked_by(&mut w, 1_000 + PARK_NS + 200 * MS),
            0,
            "nothing held: quiet"
        );
        assert!(psns_received(&mut h1).is_empty());
    }

    #[test]
    fn an_idle_wait_lasts_until_a_delayed_packet_is_due() {
        // A worker whose uplink delays packets by 2 ms (a fault-injected link) waits until the
        // held packet is due, not a fixed tick: here the short wait is 10 ms, so only the
        // release time can make the wait shorter.
        let tables = tor_tables(1, 1, SprayPolicy::RoundRobin);
        let (mut host, d0) = mem::link("host", "d0", 64);
        let (u0, mut far) = mem::link("u0", "far", 64);
        let delayed = FaultInjector::new(
            u0,
            FaultConfig {
                delay_ns: 2_000_000,
                ..FaultConfig::default()
            },
        );
        let cfg = WorkerConfig {
            idle: IdlePolicy::wait(10_000),
            ..WorkerConfig::default()
        };
        let (mut w, _) = Worker::standalone(
            tables,
            vec![Box::new(d0), Box::new(delayed)],
            cfg,
            Box::new(Passthrough),
        );
        assert_eq!(w.prepare_wait(), Some(None), "nothing timed yet");
        w.end_wait();

        let frame = roce_frame(0, "10.9.0.5".parse().unwrap(), 1, 0, 64);
        host.tx_burst(0, &mut vec![Pkt::from_slice(&frame)]);
        while w.iterate(now_ns()) {}
        let timed = w
            .prepare_wait()
            .expect("nothing else is queued")
            .expect("the delayed packet is timed work");
        w.end_wait();
        assert!(
            timed <= Duration::from_millis(2) && timed > Duration::from_millis(1),
            "waits until the release, not the 10 ms short wait: {timed:?}"
        );

        // Once due, it leaves, and nothing is timed any more.
        std::thread::sleep(Duration::from_millis(3));
        w.iterate(now_ns());
        let mut got = Vec::new();
        assert_eq!(far.rx_burst(0, &mut got, 8), 1);
        assert_eq!(w.prepare_wait(), Some(None));
        w.end_wait();
    }
}
