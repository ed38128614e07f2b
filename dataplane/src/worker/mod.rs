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
//! 5. queue the hand-offs of the iteration (in batches of up to 32 per other worker) and wake
//!    their workers;
//! 6. publish port state and backlog, then back off if there was no work.
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
//!
//! The files: this one holds the worker's state and its loop; `handoff` the rings between
//! workers; `transmit` the transmit queues (the ports' egress queues, flushed in bursts); `neigh` next hops that are not resolved yet; `wait`
//! the idle coordination with [`crate::idle`].

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender};
use crossbeam::utils::CachePadded;

use crate::egress::EgressQueue;
use crate::engine::{DropReason, Engine, ResolveRequest, Verdict};
use crate::ids::PortId;
use crate::pkt::{Pkt, DEFAULT_BUF};
use crate::port::{LinkState, Port};
use crate::reorder::{Burst, DownlinkStage, StreamRow};
use crate::stats::{PortCounters, WorkerCounters};
use crate::tables::status::PortStatus;
use crate::tables::{Neighbor, Tables};
use crate::time::now_ns;

mod handoff;
mod neigh;
#[cfg(test)]
mod tests;
mod times;
mod transmit;
mod wait;

pub use crate::idle::{IdlePolicy, IdleWaiter, Wake};
pub use handoff::{handoff_ring, Handoff, HandoffRx, HandoffTx, HANDOFF_BATCH};
pub use neigh::{PARK_MAX, PARK_NS, PARK_PER_HOP};

use neigh::Parked;
use transmit::OwnedPort;

/// A question from the control side, answered by the worker between two bursts (so the
/// control thread never touches a worker's state).
#[derive(Debug)]
pub enum Query {
    /// Up to N reorder streams.
    Streams(usize, Sender<Vec<StreamRow>>),
    /// The neighbours this worker learned (address, MAC, port).
    Neighbors(Sender<Vec<(IpAddr, crate::tables::Neighbor)>>),
    /// Forget learned neighbours not confirmed for this many ns.
    AgeNeighbors(u64),
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
    /// Per port: where its owner publishes its egress queue's depth histogram.
    pub queue_depths: Arc<[std::sync::Mutex<hdrhistogram::Histogram<u64>>]>,
    /// Every path-health session's loss, for the monitors of all workers.
    pub health: Arc<crate::health::HealthBoard>,
    /// Per port: where its owner publishes its path health.
    pub path_reports: Arc<[std::sync::Mutex<crate::health::PathReport>]>,
    /// The receive pools of every port of the switch (once each): what this worker's reorder
    /// stage holds may pin buffers of any of them, its hand-offs included.
    pub rx_pools: Arc<[Arc<dyn crate::port::RxPool>]>,
}

/// The receive pools of `ports`, once each (ports that share one, an AF_XDP UMEM, list it
/// once).
pub fn rx_pools<'a>(
    ports: impl IntoIterator<Item = &'a dyn Port>,
) -> Vec<Arc<dyn crate::port::RxPool>> {
    let mut pools: Vec<Arc<dyn crate::port::RxPool>> = Vec::new();
    for p in ports {
        if let Some(pool) = p.rx_pool() {
            if !pools
                .iter()
                .any(|q| std::ptr::addr_eq(Arc::as_ptr(q), Arc::as_ptr(&pool)))
            {
                pools.push(pool);
            }
        }
    }
    pools
}

/// How often a worker whose reorder stage holds packets looks at the receive pools.
const POOL_CHECK_NS: u64 = 10_000;

/// How long a worker asked to stop goes on while its ports still bring work (it stops at its
/// first idle iteration otherwise): a switch stopped under load stops within this.
pub const STOP_GRACE_NS: u64 = 200_000_000;

/// What a worker returns when it stops: its ports (so that captures can be flushed and
/// in-memory ends inspected) and the packets it still held.
pub struct WorkerExit {
    /// Its ports, by id.
    pub ports: Vec<(PortId, Box<dyn Port>)>,
    /// Packets left in transmit buffers when the ports would take no more.
    pub unsent: u64,
    /// Its hand-off ring, which other workers may have filled after it stopped taking from it
    /// (a worker still under load when this one finished): see [`WorkerExit::handoffs_left`].
    pub inbox: HandoffRx,
}

impl WorkerExit {
    /// Takes the packets other workers handed this one after it stopped, and returns how many
    /// there were (they are dropped: the switch is stopping). Call it once every worker has
    /// stopped, so that none can hand over more: [`crate::switch::Switch::stop`] counts them in
    /// its `unsent`, which would otherwise miss them (a switch of two workers stopped under
    /// load received thousands of packets more than it sent or counted).
    pub fn handoffs_left(&self) -> u64 {
        let mut n = 0;
        while let Some(mut batch) = self.inbox.pop() {
            n += batch.len() as u64;
            batch.clear();
            self.inbox.give_back(batch);
        }
        n
    }
}

/// One poll-mode worker.
pub struct Worker {
    sh: WorkerShared,
    cfg: WorkerConfig,
    tables: Arc<Tables>,
    engine: Engine,
    reorder: Box<dyn DownlinkStage>,
    /// The reorder stage's hold and detection times, when it reorders.
    times: Option<times::StageTimes>,
    ports: Vec<OwnedPort>,
    /// Per port id of the switch: its index in `ports` when this worker owns it.
    owned_at: Vec<Option<usize>>,
    rx: Vec<Pkt>,
    /// Packets for the reorder stage, handed to it a burst at a time
    /// ([`DownlinkStage::insert_burst`]) so that their streams' state loads together; always
    /// empty between the steps of an iteration (see [`Worker::reorder_queued`]).
    to_reorder: Burst,
    /// Whether the reorder stage wants bursts ([`DownlinkStage::wants_bursts`]), asked when
    /// a burst is received and before hand-offs are taken, after what is queued went to it.
    reorder_bursts: bool,
    released: Vec<(PortId, Pkt)>,
    learned: Vec<(IpAddr, Neighbor)>,
    resolve: Vec<ResolveRequest>,
    spare: Vec<Pkt>,
    /// Hand-offs waiting for room in their owner's ring, one queue per owner so that a stalled
    /// owner delays only its own packets.
    handoff_wait: Vec<VecDeque<Handoff>>,
    /// Per owner, the batch of hand-offs this iteration is filling (empty, without a buffer,
    /// when none is), queued when full and at the iteration's end.
    outbox: Vec<Vec<Handoff>>,
    /// Hand-offs in `handoff_wait`, all owners together (bounded by `tx_queue_limit`).
    waiting: usize,
    /// Routed packets waiting for their next hop to resolve, oldest first (see the module
    /// docs). Capacity fixed at start: holding a packet allocates nothing.
    parked: VecDeque<Parked>,
    /// Workers this iteration handed packets to (bit per worker), woken at its end.
    handed: u64,
    /// A live capture runs on some port: tap packets this iteration.
    tapping: bool,
    /// The fabric paths ([`Tables::paths`]): their link state goes to the reorder stage.
    paths: Vec<PortId>,
    /// When the egress queues' depth histograms and path reports were last published.
    last_queue_publish: u64,
    /// Path health of the uplinks it owns.
    monitor: crate::health::PathMonitor,
    /// Probes to send, taken from the monitor (capacity kept).
    probe_frames: Vec<crate::health::ProbeFrame>,
    /// The fabric paths that no longer block path-order decisions, as read at the start of
    /// this iteration.
    paths_down: u64,
    /// When the receive pools were last looked at.
    last_pool_check: u64,
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
        let mut owned_at = vec![None; n];
        let cap = cfg.tx_queue_limit.max(cfg.burst);
        let ports: Vec<OwnedPort> = ports
            .into_iter()
            .enumerate()
            .map(|(i, (id, port))| {
                if let Some(s) = owned_at.get_mut(usize::from(id)) {
                    *s = Some(i);
                }
                let q = EgressQueue::new(
                    transmit::egress_config(&tables, id),
                    cap,
                    seed ^ (u64::from(id) << 32),
                );
                // The port is handed all the queue lets go, not one burst of it: with a
                // one-burst bound, AF_XDP multi-buffer frames queued behind a pause reached the
                // far ToR after its gap timers expired (the rack's multi-buffer test); why the
                // bound delays them that long was not found.
                OwnedPort {
                    id,
                    port,
                    q,
                    oldest_ns: 0,
                    reorder_held_bytes: 0,
                    rx_last: 0,
                }
            })
            .collect();
        let burst = cfg.burst.max(1);
        let sh_workers = sh.handoff.len();
        let paths = tables.paths();
        let mut engine = Engine::new(&tables, seed);
        engine.set_worker(sh.id);
        let owned: Vec<PortId> = ports.iter().map(|p| p.id).collect();
        // Session numbers differ at every start (a restarted switch is a new peer to the
        // others, as BFD's discriminators are drawn anew); nothing else depends on the draw.
        let mut monitor =
            crate::health::PathMonitor::new(seed ^ crate::time::wall_ns(crate::time::now_ns()));
        monitor.configure(&tables, &owned, &sh.health, &sh.status, 0);
        Worker {
            engine,
            sh,
            cfg: WorkerConfig { burst, ..cfg },
            tables,
            times: reorder.reorders().then(times::StageTimes::new),
            reorder,
            ports,
            owned_at,
            rx: Vec::with_capacity(burst),
            to_reorder: Burst::with_capacity(burst),
            reorder_bursts: false,
            released: Vec::with_capacity(burst * 4),
            learned: Vec::with_capacity(256),
            resolve: Vec::with_capacity(256),
            spare: (0..16).map(|_| Pkt::with_capacity(DEFAULT_BUF)).collect(),
            handoff_wait: (0..sh_workers)
                .map(|_| std::collections::VecDeque::with_capacity(cfg.tx_queue_limit))
                .collect(),
            outbox: (0..sh_workers).map(|_| Vec::new()).collect(),
            waiting: 0,
            parked: std::collections::VecDeque::with_capacity(PARK_MAX),
            handed: 0,
            tapping: false,
            paths,
            last_queue_publish: 0,
            monitor,
            probe_frames: Vec::with_capacity(64),
            paths_down: 0,
            last_pool_check: 0,
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
        let (tx, rx) = handoff_ring(1024, 0);
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
            queue_depths: (0..n)
                .map(|_| std::sync::Mutex::new(crate::egress::depth_histogram()))
                .collect(),
            health: Arc::new(crate::health::HealthBoard::new(n)),
            path_reports: (0..n)
                .map(|_| std::sync::Mutex::new(crate::health::PathReport::default()))
                .collect(),
            rx_pools: rx_pools(ports.iter().map(|p| &**p)).into(),
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

    /// Where this worker publishes its reorder stage's hold times, if the stage reorders.
    pub fn hold_histogram(&self) -> Option<Arc<std::sync::Mutex<hdrhistogram::Histogram<u64>>>> {
        self.times.as_ref().map(times::StageTimes::hold)
    }

    /// Where this worker publishes its reorder stage's path-order loss detection times, if
    /// the stage reorders.
    pub fn detection_histogram(
        &self,
    ) -> Option<Arc<std::sync::Mutex<hdrhistogram::Histogram<u64>>>> {
        self.times.as_ref().map(times::StageTimes::detect)
    }

    /// Runs until the stop flag is set, then flushes and returns the ports: once idle (what
    /// was under way has gone out), or [`STOP_GRACE_NS`] after the flag at the latest (a port
    /// that never falls silent, a switch stopped under load).
    pub fn run(mut self) -> WorkerExit {
        let mut idle_iters: u64 = 0;
        let mut waiter = self.idle_waiter();
        // Each iteration's time, from its start to the next one's (waits included), is busy
        // or idle by what it found: the per-core view of `show workers`.
        let (mut last, mut busy) = (now_ns(), false);
        let mut stop_seen: Option<u64> = None;
        loop {
            let now = now_ns();
            let spent = now.saturating_sub(last);
            if busy {
                self.sh.counters.busy_ns.add(spent);
            } else {
                self.sh.counters.idle_ns.add(spent);
            }
            last = now;
            let work = self.iterate(now);
            busy = work;
            if work {
                idle_iters = 0;
                if self.stop_requested() {
                    let since = *stop_seen.get_or_insert(now);
                    if now.saturating_sub(since) >= STOP_GRACE_NS {
                        break;
                    }
                }
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

    /// One loop iteration at time `now`; true when it found work. Public for tests that drive a
    /// worker by hand with a fake clock. The steps are those of the module docs.
    pub fn iterate(&mut self, now: u64) -> bool {
        self.sh.counters.loops.add(1);
        self.tapping = self.sh.taps.any_on();
        self.engine.begin_iteration();
        self.take_updates(now);
        // Which fabric paths deliver nothing more, read before the hand-offs are taken: what
        // their owners handed over before saying so is then taken in this iteration, before
        // the reorder stage stops waiting for those paths.
        self.paths_down = self.paths_down_now();
        let mut work = self.take_handoffs(now);
        // One reference-count bump each per iteration, not per packet or port.
        let tables = self.tables.clone();
        let counters = self.sh.counters.clone();
        let port_counters = self.sh.port_counters.clone();
        for i in 0..self.ports.len() {
            work |= self.receive(i, &tables, &counters, &port_counters, now);
        }
        work |= self.run_reorder(now);
        if self.monitor.next_due().is_some_and(|d| now >= d) {
            self.probe(&tables, now);
        }
        if !self.parked.is_empty() {
            self.expire_parked(now);
        }
        self.neighbour_effects(now);
        let s = self.engine.stats;
        let c = &self.sh.counters;
        c.sprayed.set(s.sprayed);
        c.hashed.set(s.hashed);
        c.fast_path.set(self.engine.fast_hits);
        c.neigh_learned.set(s.neigh_learned);
        let flush_all = !work;
        for i in 0..self.ports.len() {
            work |= self.flush(i, now, flush_all);
        }
        self.send_handoffs();
        if self.handed != 0 {
            self.wake_handed();
        }
        self.publish_ports(now);
        debug_assert!(
            self.to_reorder.is_empty(),
            "every step hands what it queued to the reorder stage"
        );
        work
    }

    /// Step 1: the newest table snapshot, neighbours other workers learned, and control-side
    /// questions, answered here between bursts so that the control thread never touches this
    /// worker's state.
    fn take_updates(&mut self, now: u64) {
        let mut newest = None;
        while let Ok(t) = self.sh.tables_rx.try_recv() {
            newest = Some(t);
        }
        if let Some(t) = newest {
            self.engine.on_tables(&t);
            let owned: Vec<PortId> = self.ports.iter().map(|p| p.id).collect();
            self.monitor
                .configure(&t, &owned, &self.sh.health, &self.sh.status, now);
            self.paths = t.paths();
            for op in &mut self.ports {
                op.q.configure(transmit::egress_config(&t, op.id));
            }
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
    }

    /// Step 3 for port `ports[i]`: receive a burst and decide each packet. True when any came.
    #[inline]
    fn receive(
        &mut self,
        i: usize,
        tables: &Tables,
        c: &WorkerCounters,
        port_counters: &[CachePadded<PortCounters>],
        now: u64,
    ) -> bool {
        self.ports[i].port.poll(now);
        let id = self.ports[i].id;
        let n = self.ports[i]
            .port
            .rx_burst(now, &mut self.rx, self.cfg.burst);
        self.ports[i].rx_last = n;
        self.monitor.note_rx(id, n < self.cfg.burst, now);
        if n == 0 {
            return false;
        }
        self.ask_reorder_bursts(now);
        let pc = &port_counters[usize::from(id)];
        pc.rx_pkts.add(n as u64);
        c.rx_pkts.add(n as u64);
        let mut rx = std::mem::take(&mut self.rx);
        // Stamp the burst in place first: writing these fields into a packet moved out of the
        // vector and then moving it on as a whole stalled on store forwarding (the single
        // hottest instruction of the loop in a profile).
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
            let d = self.engine.handle(tables, &self.sh.status, &mut pkt, now);
            // The steady state of both roles, straight to its queue: routed to a port of this
            // worker's, with nothing for the reorder stage to learn (no call through
            // `dispatch` and `route_to`, each of which moved the packet once more).
            if d.observed.is_none() && !d.host_cnp {
                match d.verdict {
                    Verdict::Forward(p) => {
                        if let Some(i) = self.owned_index(p) {
                            self.enqueue_at(i, pkt, now);
                            continue;
                        }
                    }
                    Verdict::Reorder(p, meta) if self.owned_index(p).is_some() => {
                        self.queue_reorder(p, pkt, meta, now);
                        continue;
                    }
                    _ => {}
                }
            }
            if let Some(obs) = &d.observed {
                use crate::meta::MetaKind;
                if matches!(obs.kind, MetaKind::HostNak | MetaKind::HostRnrNak) {
                    pc.host_naks.add(1);
                }
                let judged = matches!(
                    obs.kind,
                    MetaKind::HostNak | MetaKind::HostRead { .. } | MetaKind::HostSingle
                );
                // The stage sees every packet in the order they came.
                self.reorder_queued(now);
                if let (true, Verdict::Forward(p)) = (judged, d.verdict) {
                    // Judged with the packet itself: a nak_filter downlink may keep a NAK or
                    // a READ retry back.
                    let kept = self
                        .reorder
                        .host_nak(id, obs, (p, pkt), now, &mut self.released);
                    if let Some((p, pkt)) = kept {
                        self.route_to(p, pkt, None, now);
                    }
                    continue;
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
                self.release_parked(tables, now);
            }
        }
        self.reorder_queued(now);
        self.rx = rx;
        pc.rx_bytes.add(bytes);
        c.rx_bytes.add(bytes);
        true
    }

    /// The fabric paths (a bit per path) that no longer block path-order loss decisions: their
    /// owners say nothing more arrives over them (see [`PortStatus::rx_dead`]).
    fn paths_down_now(&self) -> u64 {
        let mut down = 0u64;
        for (i, p) in self.paths.iter().enumerate() {
            if self
                .sh
                .status
                .get(usize::from(*p))
                .is_none_or(|s| s.rx_dead())
            {
                down |= 1 << i;
            }
        }
        down
    }

    /// The reorder stage's timers, then whatever it released. True when it released any.
    fn run_reorder(&mut self, now: u64) -> bool {
        self.reorder_queued(now);
        self.reorder
            .set_paths(self.paths.len(), self.paths_down, now, &mut self.released);
        // The stage does nothing before its deadline or its sweep for idle streams.
        self.reorder.poll(now, &mut self.released);
        if self.reorder.held() > 0 && now.saturating_sub(self.last_pool_check) >= POOL_CHECK_NS {
            self.last_pool_check = now;
            self.relieve_pools(now);
        }
        let work = !self.released.is_empty();
        if work {
            let mut rel = std::mem::take(&mut self.released);
            for (p, pkt) in rel.drain(..) {
                // A downlink of this worker's; a NAK a nak_filter downlink kept back goes
                // towards the fabric (maybe another worker's uplink).
                self.route_to(p, pkt, None, now);
            }
            self.released = rel;
            // What that handed to other workers goes to them now (they may still be running
            // or finishing), or waits and is counted below.
            self.send_handoffs();
            if self.handed != 0 {
                self.wake_handed();
            }
        }
        if let Some(t) = self.times.as_mut() {
            t.collect(self.reorder.as_mut(), now);
        }
        let c = &self.sh.counters;
        c.reorder_held.set(self.reorder.held() as u64);
        c.publish_reorder(&self.reorder.totals());
        work
    }

    /// A receive pool that runs low (under an eighth free) has the reorder stage give up its
    /// oldest gaps until a quarter of the pool could be free again: a port whose pool is empty
    /// receives nothing, the retransmissions that would fill the gaps included, and the hold
    /// timeouts that would free it come only later. (The pool's own rings, and what other
    /// workers hold, count against it too: it is read as it is.)
    fn relieve_pools(&mut self, now: u64) {
        for i in 0..self.sh.rx_pools.len() {
            let pool = &self.sh.rx_pools[i];
            let (cap, free) = (pool.capacity(), pool.free());
            if free >= cap / 8 {
                continue;
            }
            let deficit = (cap / 4).saturating_sub(free).max(1);
            self.reorder.relieve(deficit, now, &mut self.released);
            if self.reorder.held() == 0 {
                break;
            }
        }
    }

    /// Step 6: port state and backlog for the spray policy and the control thread; the egress
    /// queues' counters, and their depth histograms every 100 ms (never blocking: a
    /// publication is skipped while a reader holds the lock).
    fn publish_ports(&mut self, now: u64) {
        for op in &self.ports {
            let st = &self.sh.status[usize::from(op.id)];
            let up = op.port.link_state() == LinkState::Up;
            st.set_up(up);
            // Nothing more from it reaches a reorder stage: path health says no peer's traffic
            // comes over it, or its carrier is down and what came before is through (its
            // receive ring empty, nothing of it waiting for another worker's hand-off ring).
            st.set_rx_dead(
                self.monitor.rx_dead(op.id)
                    || (!up && op.rx_last < self.cfg.burst && self.waiting == 0),
            );
            st.set_backlog(op.port.tx_backlog() + op.q.len());
            st.set_rx_done(op.port.rx_finished());
            let pc = &self.sh.port_counters[usize::from(op.id)];
            pc.backend_drops.set(op.port.dropped());
            let b = op.port.backend_counters();
            pc.backend_rx_dropped.set(b.rx_dropped);
            pc.backend_rx_ring_full.set(b.rx_ring_full);
            pc.backend_rx_no_buffer.set(b.rx_no_buffer);
            pc.backend_invalid.set(b.invalid);
            let c = op.q.counts;
            pc.ecn_marked.set(c.ecn_marked);
            pc.pause_frames.set(c.pause_frames);
            pc.pfc_frames.set(c.pfc_frames);
            pc.paused_ns.set(c.paused_ns);
            pc.queue_bytes.set(op.q.bytes() + op.reorder_held_bytes);
            if let Some(h) = self.monitor.counts(op.id, &self.tables) {
                pc.probes_tx.set(h.probes_tx);
                pc.probes_rx.set(h.probes_rx);
                pc.path_outs.set(h.outs);
                pc.path_state.set(h.state);
                pc.path_loss_ppm.set(h.loss_ppm);
            }
        }
        self.sh.counters.probes_unknown.set(self.monitor.unknown);
        if now.saturating_sub(self.last_queue_publish) >= 100_000_000 || self.monitor.take_changed()
        {
            self.last_queue_publish = now;
            self.publish_depths(false);
            self.publish_paths(now);
        }
    }

    /// Publishes the path health of its uplinks (skipped for a port whose report a reader
    /// holds).
    fn publish_paths(&self, now: u64) {
        for id in self.monitor.ports() {
            if let (Some(r), Some(slot)) = (
                self.monitor.report(id, &self.tables, now),
                self.sh.path_reports.get(usize::from(id)),
            ) {
                if let Ok(mut g) = slot.try_lock() {
                    *g = r;
                }
            }
        }
    }

    /// Sends the path probes that are due and judges the uplinks' health.
    fn probe(&mut self, tables: &Tables, now: u64) {
        self.monitor
            .poll(tables, now, &self.sh.health, &self.sh.status);
        let mut frames = std::mem::take(&mut self.probe_frames);
        frames.extend(self.monitor.take_probes());
        for f in frames.drain(..) {
            let mut pkt = self.spare.pop().unwrap_or_else(|| Pkt::with_capacity(128));
            pkt.set_data(&f.bytes[..f.len]);
            let Some(i) = self.owned_index(f.port) else {
                continue;
            };
            let Some(op) = self.ports.get_mut(i) else {
                continue;
            };
            if self.tapping {
                self.sh.taps.tap(op.id, &pkt, now);
            }
            if op.q.ready.is_empty() {
                op.oldest_ns = now;
            }
            if !op.q.enqueue_control(pkt) {
                self.sh.counters.count_drop(DropReason::TxQueueFull, 1);
                self.sh.port_counters[usize::from(op.id)]
                    .tx_queue_drops
                    .add(1);
            }
        }
        self.probe_frames = frames;
    }

    /// Publishes the egress queues' depth histograms (`wait`: also when a reader holds one).
    fn publish_depths(&self, wait: bool) {
        for op in &self.ports {
            if let Some(h) = self.sh.queue_depths.get(usize::from(op.id)) {
                let locked = if wait {
                    h.lock().ok()
                } else {
                    h.try_lock().ok()
                };
                if let Some(mut h) = locked {
                    op.q.depths.fill(&mut h);
                }
            }
        }
    }

    /// Forgets the depths recorded so far (a run measuring only after its warm-up).
    pub fn reset_queue_depths(&mut self) {
        for op in &mut self.ports {
            op.q.depths.reset();
        }
    }

    /// Port `id`'s index in `ports`, when this worker owns it.
    #[inline]
    fn owned_index(&self, id: PortId) -> Option<usize> {
        self.owned_at.get(usize::from(id)).copied().flatten()
    }

    /// The depths (bytes) packets found entering port `id`'s egress queue, if this worker owns
    /// it (for loops that drive workers themselves).
    pub fn queue_depth_histogram(&self, id: PortId) -> Option<hdrhistogram::Histogram<u64>> {
        let i = self.owned_index(id)?;
        self.ports.get(i).map(|p| p.q.depths.histogram())
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
            Verdict::Pause(frame) => {
                self.sh.counters.consumed.add(1);
                if let Some(i) = self.owned_index(pkt.rx_port) {
                    if let Some(op) = self.ports.get_mut(i) {
                        op.q.handle_pause(&frame, now);
                    }
                }
            }
            Verdict::Resolving { port, next_hop } => self.park(port, next_hop, pkt, now),
            Verdict::Probe { src, payload } => {
                self.sh.counters.consumed.add(1);
                let data = pkt.data();
                let at = usize::from(payload).min(data.len());
                self.monitor.handle(pkt.rx_port, src, &data[at..], now);
            }
            Verdict::Drop(r) => self.sh.counters.count_drop(r, 1),
        }
    }

    /// Flushes what the worker still holds (bounded in time) and hands its ports back: what
    /// [`Worker::run`] does once asked to stop, for loops that drive workers themselves.
    pub fn finish(self) -> WorkerExit {
        self.finish_by(None)
    }

    /// [`Worker::finish`] for a loop that drives its workers on a clock of its own (virtual
    /// time): one flush at `now`, nothing waited for in real time, so the same run always
    /// ends the same way.
    pub fn finish_at(self, now: u64) -> WorkerExit {
        self.finish_by(Some(now))
    }

    /// Stops at once, as a crashed or killed switch process does: its ports are handed back
    /// as they are (what they hold stays there: a port's receive ring, a link in flight), and
    /// what the worker itself held (reorder rings, transmit queues, hand-offs) is lost,
    /// counted in `unsent`.
    pub fn crash(mut self) -> WorkerExit {
        let unsent = self.ports.iter().map(|p| p.q.len()).sum::<usize>()
            + self.to_reorder.len()
            + self.waiting
            + self.outbox.iter().map(Vec::len).sum::<usize>()
            + self.reorder.held()
            + self.parked.len();
        let ports = self.ports.drain(..).map(|op| (op.id, op.port)).collect();
        WorkerExit {
            ports,
            unsent: unsent as u64,
            inbox: self.sh.inbox,
        }
    }

    fn finish_by(mut self, at: Option<u64>) -> WorkerExit {
        let clock = || at.unwrap_or_else(now_ns);
        // Drain what is still queued: hand-offs, reorder holds, transmit buffers, for a bounded
        // time (a peer that never reads must not hang shutdown).
        let deadline = clock() + 200_000_000;
        loop {
            let now = clock();
            while let Some(mut batch) = self.sh.inbox.pop() {
                for h in batch.drain(..) {
                    self.enqueue_local(h.port, h.pkt, now);
                }
                self.sh.inbox.give_back(batch);
            }
            self.reorder_queued(now);
            let mut rel = std::mem::take(&mut self.released);
            self.reorder.poll(u64::MAX, &mut rel);
            for (p, pkt) in rel.drain(..) {
                // A downlink of this worker's; a NAK a nak_filter downlink kept back goes
                // towards the fabric (maybe another worker's uplink).
                self.route_to(p, pkt, None, now);
            }
            self.released = rel;
            for i in 0..self.ports.len() {
                self.ports[i].port.poll(now);
                self.flush(i, now, true);
            }
            let left: usize =
                self.ports.iter().map(|p| p.q.len()).sum::<usize>() + self.reorder.held();
            if left == 0 || now > deadline || at.is_some() {
                break;
            }
            std::thread::yield_now();
        }
        // Packets still waiting for a next hop that never answered: counted as such.
        self.sh
            .counters
            .count_drop(DropReason::Unresolved, self.parked.len() as u64);
        self.parked.clear();
        self.publish_ports(clock());
        self.publish_depths(true);
        if let Some(t) = self.times.as_mut() {
            t.collect(self.reorder.as_mut(), u64::MAX);
        }
        let unsent: usize = self.ports.iter().map(|p| p.q.len()).sum::<usize>()
            + self.waiting
            + self.outbox.iter().map(Vec::len).sum::<usize>()
            + self.reorder.held();
        let mut ports = Vec::with_capacity(self.ports.len());
        for mut op in self.ports.drain(..) {
            op.port.flush();
            ports.push((op.id, op.port));
        }
        WorkerExit {
            ports,
            unsent: unsent as u64,
            inbox: self.sh.inbox,
        }
    }
}
