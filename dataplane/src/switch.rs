//! A running switch: worker threads over a set of ports, a table snapshot they all read, and the
//! handles to publish new snapshots, read counters and stop.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam::channel::{bounded, Sender};
use crossbeam::utils::CachePadded;

use crate::ids::PortId;
use crate::port::Port;
use crate::reorder::{DownlinkStage, Passthrough, StreamRow};
use crate::stats::{PortCounters, WorkerCounters};
pub use crate::stats::{PortStats, Stats};
use crate::tables::status::PortStatus;
use crate::tables::{Neighbor, Tables};
use crate::worker::{
    handoff_ring, HandoffRx, HandoffTx, Query, Wake, Worker, WorkerConfig, WorkerExit, WorkerShared,
};
use hdrhistogram::Histogram;
use std::sync::Mutex;
use std::time::Duration;

/// Why a switch could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The ports given do not match the tables' ports.
    #[error("port {index}: expected '{expected}', got '{got}'")]
    PortMismatch {
        /// Position.
        index: usize,
        /// Name in the tables.
        expected: String,
        /// Name of the port given.
        got: String,
    },
    /// Wrong number of ports.
    #[error("the tables name {expected} ports but {got} were given")]
    PortCount {
        /// In the tables.
        expected: usize,
        /// Given.
        got: usize,
    },
    /// A port was assigned to a worker that does not exist.
    #[error("port '{port}' is assigned to worker {worker}, but there are {workers} workers")]
    BadAssignment {
        /// Port name.
        port: String,
        /// Worker asked for.
        worker: usize,
        /// Workers.
        workers: usize,
    },
    /// A thread could not be spawned.
    #[error("cannot start worker thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// How to run the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// Number of worker threads.
    pub workers: usize,
    /// Worker of each port (by port index); `None`: round robin.
    pub assignment: Option<Vec<usize>>,
    /// Cores to pin worker `i` to (`cores[i]`), if any.
    pub cores: Option<Vec<usize>>,
    /// Worker loop settings.
    pub worker: WorkerConfig,
    /// Seed of the random spray policies (worker `i` uses `seed + i`).
    pub seed: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workers: 1,
            assignment: None,
            cores: None,
            worker: WorkerConfig::default(),
            seed: 1,
        }
    }
}

/// A running switch.
pub struct Switch {
    tables: Arc<Tables>,
    tables_tx: Vec<Sender<Arc<Tables>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<WorkerExit>>,
    counters: Vec<Arc<CachePadded<WorkerCounters>>>,
    port_counters: Arc<[CachePadded<PortCounters>]>,
    status: Arc<[CachePadded<PortStatus>]>,
    taps: Arc<crate::capture::CaptureTaps>,
    queries: Vec<Sender<Query>>,
    histograms: Vec<Arc<Mutex<Histogram<u64>>>>,
    detect_histograms: Vec<Arc<Mutex<Histogram<u64>>>>,
    /// Per port: the depths its egress queue saw, as its worker last published them.
    queue_depths: Arc<[Mutex<Histogram<u64>>]>,
    /// Per port: its path health, as its worker last published it.
    path_reports: Arc<[Mutex<crate::health::PathReport>]>,
    wakes: Arc<[Wake]>,
}

/// What [`Switch::stop`] returns.
pub struct Stopped {
    /// The ports, in table order, handed back by the workers.
    pub ports: Vec<Box<dyn Port>>,
    /// Final counters.
    pub stats: Stats,
    /// Packets still queued when the ports would take no more, and those handed to a worker
    /// after it had stopped.
    pub unsent: u64,
}

/// What the workers answered to a question from the control side.
#[derive(Debug, Clone, PartialEq)]
pub struct Gathered<T> {
    /// The answers of the workers that answered.
    pub items: Vec<T>,
    /// Workers that did not answer in time (busy, stuck, or not running): what they hold is
    /// missing from `items`.
    pub silent: Vec<usize>,
}

impl Switch {
    /// Starts workers over `ports` (in the same order as `tables.ports`) with pass-through
    /// reordering.
    ///
    /// # Errors
    /// [`StartError`] when ports and tables disagree or a thread cannot start.
    pub fn start(
        tables: Tables,
        ports: Vec<Box<dyn Port>>,
        run: RunConfig,
    ) -> Result<Switch, StartError> {
        Self::start_with(tables, ports, run, |_| Box::new(Passthrough))
    }

    /// As [`Switch::start`], with a reorder stage per worker made by `make_reorder(worker)`.
    ///
    /// # Errors
    /// [`StartError`] when ports and tables disagree or a thread cannot start.
    pub fn start_with(
        tables: Tables,
        ports: Vec<Box<dyn Port>>,
        run: RunConfig,
        make_reorder: impl Fn(usize) -> Box<dyn DownlinkStage>,
    ) -> Result<Switch, StartError> {
        let cores = run.cores.clone();
        let (mut switch, workers) = Self::build(tables, ports, run, make_reorder)?;
        for (w, worker) in workers.into_iter().enumerate() {
            let core = cores.as_ref().and_then(|c| c.get(w)).copied();
            let t = std::thread::Builder::new()
                .name(format!("ss-worker-{w}"))
                .spawn(move || {
                    crate::time::tighten_timer_slack();
                    if let Some(core) = core {
                        if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
                            log::warn!("worker {w}: could not pin to core {core}");
                        }
                    }
                    worker.run()
                });
            match t {
                Ok(t) => switch.threads.push(t),
                Err(e) => {
                    // Workers already running stop with the switch.
                    drop(switch.stop());
                    return Err(e.into());
                }
            }
        }
        Ok(switch)
    }

    /// As [`Switch::start_with`], but the workers are handed to the caller instead of running on
    /// threads of their own: a loop that drives several switches in one thread (the one-process
    /// rack of `sprayrackd`) calls [`Worker::iterate`] on each, waits with one
    /// [`crate::idle::IdleWaiter`] over all of their ports and wake-ups, and, once
    /// [`Worker::stop_requested`], hands [`Worker::finish`]'s result to
    /// [`Switch::stop_driven`]. The switch's control side (tables, counters, questions about
    /// streams, captures) works as with threads: the workers answer in `iterate`.
    ///
    /// # Errors
    /// [`StartError`] when ports and tables disagree.
    pub fn start_driven(
        tables: Tables,
        ports: Vec<Box<dyn Port>>,
        run: RunConfig,
        make_reorder: impl Fn(usize) -> Box<dyn DownlinkStage>,
    ) -> Result<(Switch, Vec<Worker>), StartError> {
        Self::build(tables, ports, run, make_reorder)
    }

    /// The switch and its workers, not yet running.
    fn build(
        tables: Tables,
        ports: Vec<Box<dyn Port>>,
        run: RunConfig,
        make_reorder: impl Fn(usize) -> Box<dyn DownlinkStage>,
    ) -> Result<(Switch, Vec<Worker>), StartError> {
        if ports.len() != tables.ports.len() {
            return Err(StartError::PortCount {
                expected: tables.ports.len(),
                got: ports.len(),
            });
        }
        for (i, (p, info)) in ports.iter().zip(&tables.ports).enumerate() {
            if p.name() != info.name {
                return Err(StartError::PortMismatch {
                    index: i,
                    expected: info.name.clone(),
                    got: p.name().to_string(),
                });
            }
        }
        let workers = run.workers.max(1);
        let owner: Vec<usize> = match &run.assignment {
            Some(a) => {
                for (i, w) in a.iter().enumerate() {
                    if *w >= workers {
                        return Err(StartError::BadAssignment {
                            port: tables
                                .ports
                                .get(i)
                                .map(|p| p.name.clone())
                                .unwrap_or_default(),
                            worker: *w,
                            workers,
                        });
                    }
                }
                (0..ports.len())
                    .map(|i| a.get(i).copied().unwrap_or(i % workers))
                    .collect()
            }
            None => (0..ports.len()).map(|i| i % workers).collect(),
        };
        let owner: Arc<[usize]> = owner.into();
        let (handoff_tx, handoff_rx): (Vec<HandoffTx>, Vec<HandoffRx>) = (0..workers)
            .map(|_| {
                handoff_ring(
                    run.worker.tx_queue_limit.max(1024),
                    workers.saturating_sub(1),
                )
            })
            .unzip();
        let handoff: Arc<[HandoffTx]> = handoff_tx.into();
        let mut inboxes = handoff_rx.into_iter();
        let status: Arc<[CachePadded<PortStatus>]> = (0..ports.len())
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect();
        let port_counters: Arc<[CachePadded<PortCounters>]> = (0..ports.len())
            .map(|_| CachePadded::new(PortCounters::default()))
            .collect();
        let queue_depths: Arc<[Mutex<Histogram<u64>>]> = (0..ports.len())
            .map(|_| Mutex::new(crate::egress::depth_histogram()))
            .collect();
        let path_reports: Arc<[Mutex<crate::health::PathReport>]> = (0..ports.len())
            .map(|_| Mutex::new(crate::health::PathReport::default()))
            .collect();
        let health = Arc::new(crate::health::HealthBoard::new(ports.len()));
        let pools: Arc<[Arc<dyn crate::port::RxPool>]> =
            crate::worker::rx_pools(ports.iter().map(|p| &**p)).into();
        let stop = Arc::new(AtomicBool::new(false));
        let tables = Arc::new(tables);
        let wakes: Arc<[Wake]> = (0..workers).map(|_| Wake::new()).collect();

        let mut per_worker: Vec<Vec<(PortId, Box<dyn Port>)>> =
            (0..workers).map(|_| Vec::new()).collect();
        for (i, p) in ports.into_iter().enumerate() {
            per_worker[owner[i]].push((i as PortId, p));
        }
        let mut neigh_txs = Vec::new();
        let mut neigh_rxs = Vec::new();
        for _ in 0..workers {
            let (tx, rx) = bounded::<(IpAddr, Neighbor)>(1024);
            neigh_txs.push(tx);
            neigh_rxs.push(rx);
        }
        let mut tables_tx = Vec::new();
        let mut counters = Vec::new();
        let mut workers_built = Vec::new();
        let mut queries = Vec::new();
        let taps = Arc::new(crate::capture::CaptureTaps::new(status.len()));
        let mut histograms = Vec::new();
        let mut detect_histograms = Vec::new();
        for (w, (my_ports, neigh_rx)) in per_worker.into_iter().zip(neigh_rxs).enumerate() {
            let (ttx, trx) = bounded::<Arc<Tables>>(4);
            tables_tx.push(ttx);
            let (stx, srx) = bounded(4);
            queries.push(stx);
            let c = Arc::new(CachePadded::new(WorkerCounters::default()));
            counters.push(c.clone());
            let sh = WorkerShared {
                id: w,
                taps: taps.clone(),
                owner: owner.clone(),
                handoff: handoff.clone(),
                inbox: inboxes.next().expect("one inbox per worker"),
                status: status.clone(),
                counters: c,
                port_counters: port_counters.clone(),
                tables_rx: trx,
                neigh_rx,
                neigh_tx: neigh_txs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != w)
                    .map(|(_, t)| t.clone())
                    .collect(),
                stop: stop.clone(),
                queries: srx,
                wakes: wakes.clone(),
                queue_depths: queue_depths.clone(),
                health: health.clone(),
                path_reports: path_reports.clone(),
                rx_pools: pools.clone(),
            };
            let worker = Worker::new(
                sh,
                run.worker,
                tables.clone(),
                my_ports,
                make_reorder(w),
                run.seed.wrapping_add(w as u64),
            );
            if let Some(h) = worker.hold_histogram() {
                histograms.push(h);
            }
            if let Some(h) = worker.detection_histogram() {
                detect_histograms.push(h);
            }
            workers_built.push(worker);
        }
        let switch = Switch {
            tables,
            tables_tx,
            stop,
            threads: Vec::new(),
            counters,
            port_counters,
            status,
            taps,
            queries,
            histograms,
            detect_histograms,
            wakes,
            queue_depths,
            path_reports,
        };
        Ok((switch, workers_built))
    }

    /// Up to `max` reorder streams from every worker, the busiest first. Each worker answers
    /// between two bursts; the workers that did not answer within `timeout` are named in the
    /// answer's `silent` and their streams are missing from it.
    pub fn streams(&self, max: usize, timeout: Duration) -> Gathered<StreamRow> {
        let mut g = self.gather(timeout, |tx| Query::Streams(max, tx));
        g.items.sort_by(|a, b| {
            (b.stats.held, b.stats.released).cmp(&(a.stats.held, a.stats.released))
        });
        g.items.truncate(max);
        g
    }

    /// Asks every worker at once with `question`, then collects the answers until `timeout`
    /// has passed since the asking: the workers answer in parallel, so a slow one costs the
    /// caller `timeout` once, not once per worker.
    fn gather<T>(
        &self,
        timeout: Duration,
        question: impl Fn(Sender<Vec<T>>) -> Query,
    ) -> Gathered<T> {
        let deadline = std::time::Instant::now() + timeout;
        let asked: Vec<_> = (0..self.queries.len())
            .map(|w| {
                let (tx, rx) = bounded(1);
                (w, self.ask(w, question(tx)).then_some(rx))
            })
            .collect();
        let mut g = Gathered {
            items: Vec::new(),
            silent: Vec::new(),
        };
        for (w, rx) in asked {
            match rx.and_then(|rx| rx.recv_deadline(deadline).ok()) {
                Some(mut v) => g.items.append(&mut v),
                None => g.silent.push(w),
            }
        }
        g
    }

    /// Queues a question for worker `w` and wakes it; false when its queue is full.
    fn ask(&self, w: usize, q: Query) -> bool {
        let ok = self.queries[w].try_send(q).is_ok();
        self.wakes[w].notify();
        ok
    }

    /// The neighbours the workers learned (from ARP, ND and replies to their resolution
    /// requests), deduplicated, sorted by address; the workers that did not answer within
    /// `timeout` are named in `silent`. Static neighbours are in the tables.
    pub fn learned_neighbors(&self, timeout: Duration) -> Gathered<(IpAddr, Neighbor)> {
        let g = self.gather(timeout, Query::Neighbors);
        let all: std::collections::BTreeMap<_, _> = g.items.into_iter().collect();
        Gathered {
            items: all.into_iter().collect(),
            silent: g.silent,
        }
    }

    /// The live capture slots of every port (the control thread turns them on and drains them).
    pub fn capture_taps(&self) -> Arc<crate::capture::CaptureTaps> {
        self.taps.clone()
    }

    /// Each worker's counters (rows, drops and reorder totals; no ports), in worker order.
    pub fn worker_stats(&self) -> Vec<Stats> {
        self.counters.iter().map(|c| c.snapshot()).collect()
    }

    /// Asks every worker to forget learned neighbours not confirmed (by ARP or ND from them)
    /// for `max_age`. Neighbours still in use are resolved again when traffic needs them.
    pub fn age_neighbors(&self, max_age: Duration) {
        for w in 0..self.queries.len() {
            self.ask(w, Query::AgeNeighbors(max_age.as_nanos() as u64));
        }
    }

    /// Transmit backlog of a port (in the port and the switch's queue), as its worker last saw it.
    pub fn port_backlog(&self, id: PortId) -> usize {
        self.status.get(usize::from(id)).map_or(0, |s| s.backlog())
    }

    /// The hold-time histogram (ns) of every worker merged, as last published (at most 100 ms
    /// old).
    pub fn hold_histogram(&self) -> Option<Histogram<u64>> {
        merged(&self.histograms)
    }

    /// The depths (bytes) packets found entering port `id`'s egress queue (with what the reorder
    /// stage held for the port), as last published (at most 100 ms old; complete once stopped).
    pub fn queue_depth_histogram(&self, id: PortId) -> Option<Histogram<u64>> {
        self.queue_depths
            .get(usize::from(id))?
            .lock()
            .ok()
            .map(|h| h.clone())
    }

    /// Port `id`'s path health, as its worker last published it (at most 100 ms old; the
    /// default report for a port that is no uplink of a group).
    pub fn path_report(&self, id: PortId) -> Option<crate::health::PathReport> {
        self.path_reports
            .get(usize::from(id))?
            .lock()
            .ok()
            .map(|r| r.clone())
    }

    /// The histogram (ns) of path-order loss detection times (gap opened to declared lost) of
    /// every worker merged, as last published (at most 100 ms old).
    pub fn detection_histogram(&self) -> Option<Histogram<u64>> {
        merged(&self.detect_histograms)
    }
}

/// Histograms merged, each as last published.
fn merged(histograms: &[Arc<Mutex<Histogram<u64>>>]) -> Option<Histogram<u64>> {
    let mut all: Option<Histogram<u64>> = None;
    for h in histograms {
        let h = h.lock().ok()?;
        match all.as_mut() {
            Some(a) => {
                let _ = a.add(&*h);
            }
            None => all = Some(h.clone()),
        }
    }
    all
}

impl Switch {
    /// The tables the workers use now.
    pub fn tables(&self) -> Arc<Tables> {
        self.tables.clone()
    }

    /// Publishes new tables to every worker. Each picks them up at its next loop iteration.
    pub fn publish(&mut self, mut tables: Tables) {
        tables.generation = self.tables.generation + 1;
        let t = Arc::new(tables);
        for (tx, wake) in self.tables_tx.iter().zip(self.wakes.iter()) {
            // Blocking send: the channel holds 4 snapshots and a worker drains it every
            // iteration (woken for it), so this waits at most one iteration.
            let _ = tx.send(t.clone());
            wake.notify();
        }
        self.tables = t;
    }

    /// Administratively brings a port up or down (a down uplink receives nothing; spraying
    /// continues over the rest).
    ///
    /// # Errors
    /// The name, when no port has it.
    pub fn set_port_admin(&mut self, name: &str, up: bool) -> Result<(), String> {
        let mut t = (*self.tables).clone();
        let id = t
            .port_id(name)
            .ok_or_else(|| format!("no port named '{name}'"))?;
        t.ports[usize::from(id)].admin_up = up;
        self.publish(t);
        Ok(())
    }

    /// Carrier state of a port as its worker last saw it.
    pub fn port_up(&self, id: PortId) -> bool {
        self.status.get(usize::from(id)).is_some_and(|s| s.is_up())
    }

    /// True when every port in `ports` has no more input and nothing queued towards it.
    pub fn drained(&self, ports: &[PortId]) -> bool {
        ports.iter().all(|p| {
            self.status
                .get(usize::from(*p))
                .is_some_and(|s| s.rx_done() && s.backlog() == 0)
        })
    }

    /// Reads every counter without stopping the workers.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for c in &self.counters {
            s.add_worker(&c.snapshot());
        }
        s.ports = self
            .tables
            .ports
            .iter()
            .zip(self.port_counters.iter())
            .map(|(info, pc)| PortStats {
                name: info.name.clone(),
                ..pc.read()
            })
            .collect();
        s
    }

    /// Asks the workers to stop (they flush what they hold first). [`Switch::stop`] does this
    /// and waits; a loop driving the workers itself sees [`Worker::stop_requested`].
    pub fn request_stop(&self) {
        // Release pairs with the workers' Acquire load of the flag.
        self.stop.store(true, Ordering::Release);
        for w in self.wakes.iter() {
            w.notify();
        }
    }

    /// Stops the workers after they flush what they hold, and hands the ports back.
    pub fn stop(mut self) -> Stopped {
        self.request_stop();
        let mut exits = Vec::new();
        for t in std::mem::take(&mut self.threads) {
            match t.join() {
                Ok(exit) => exits.push(exit),
                Err(_) => log::error!("a worker thread panicked"),
            }
        }
        self.stopped(exits)
    }

    /// Stops a switch whose workers a caller drove ([`Switch::start_driven`]): `exits` are what
    /// [`Worker::finish`] returned for each.
    pub fn stop_driven(self, exits: Vec<WorkerExit>) -> Stopped {
        self.request_stop();
        self.stopped(exits)
    }

    fn stopped(self, exits: Vec<WorkerExit>) -> Stopped {
        let mut ports: Vec<Option<Box<dyn Port>>> =
            (0..self.tables.ports.len()).map(|_| None).collect();
        let mut unsent = 0;
        // Every worker has stopped: what one handed another after that one finished is
        // still in its ring, never sent.
        for exit in exits {
            unsent += exit.unsent + exit.handoffs_left();
            for (id, p) in exit.ports {
                if let Some(slot) = ports.get_mut(usize::from(id)) {
                    *slot = Some(p);
                }
            }
        }
        let stats = Switch {
            tables: self.tables.clone(),
            tables_tx: Vec::new(),
            stop: self.stop.clone(),
            threads: Vec::new(),
            counters: self.counters.clone(),
            port_counters: self.port_counters.clone(),
            status: self.status.clone(),
            taps: self.taps.clone(),
            queries: Vec::new(),
            histograms: Vec::new(),
            detect_histograms: Vec::new(),
            wakes: self.wakes.clone(),
            queue_depths: self.queue_depths.clone(),
            path_reports: self.path_reports.clone(),
        }
        .stats();
        Stopped {
            ports: ports.into_iter().flatten().collect(),
            stats,
            unsent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pkt::Pkt;
    use crate::port::mem;
    use crate::tables::SprayPolicy;
    use crate::testkit::{peer_mac, tor_tables};

    #[test]
    fn a_worker_that_does_not_answer_is_named_and_the_others_answers_are_kept() {
        let (mut h0, d0) = mem::link("h0", "d0", 64);
        let (_h1, d1) = mem::link("h1", "d1", 64);
        let (u0, _far) = mem::link("u0", "far", 64);
        let run = RunConfig {
            workers: 2,
            ..RunConfig::default()
        };
        // Ports by round robin: d0 and u0 on worker 0, d1 on worker 1.
        let (switch, mut workers) = Switch::start_driven(
            tor_tables(2, 1, SprayPolicy::RoundRobin),
            vec![Box::new(d0), Box::new(d1), Box::new(u0)],
            run,
            |_| Box::new(Passthrough),
        )
        .unwrap();
        // A host behind d0 asks for its gateway: worker 0 learns it.
        let mut arp = vec![0u8; 60];
        crate::wire::control::arp_request(
            &mut arp,
            peer_mac(0),
            "10.0.0.9".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
        );
        h0.tx_burst(0, &mut vec![Pkt::from_slice(&arp)]);
        // Worker 0 runs; worker 1 never does.
        let silent_one = workers.pop().unwrap();
        let mut w0 = workers.pop().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let driver = {
            let done = done.clone();
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    w0.iterate(crate::time::now_ns());
                    std::thread::sleep(Duration::from_millis(1));
                }
                w0
            })
        };
        let mut learned = Vec::new();
        for _ in 0..50 {
            let g = switch.learned_neighbors(Duration::from_millis(100));
            assert_eq!(g.silent, vec![1], "worker 1 is named every time");
            learned = g.items;
            if !learned.is_empty() {
                break;
            }
        }
        assert_eq!(learned.len(), 1);
        assert_eq!(learned[0].0, "10.0.0.9".parse::<IpAddr>().unwrap());
        let streams = switch.streams(10, Duration::from_millis(100));
        assert_eq!(streams.silent, vec![1]);
        done.store(true, Ordering::Relaxed);
        let w0 = driver.join().unwrap();
        drop(switch.stop_driven(vec![w0.finish(), silent_one.finish()]));
    }

    #[test]
    fn packets_handed_to_a_worker_that_already_stopped_are_counted_unsent() {
        use crate::testkit::roce_frame;
        let (mut h0, d0) = mem::link("h0", "d0", 4096);
        let (u0, mut fabric) = mem::link("u0", "fabric", 4096);
        // The host's port on worker 0, the uplink on worker 1: every packet is handed over.
        let run = RunConfig {
            workers: 2,
            assignment: Some(vec![0, 1]),
            ..RunConfig::default()
        };
        let (switch, mut workers) = Switch::start_driven(
            tor_tables(1, 1, SprayPolicy::RoundRobin),
            vec![Box::new(d0), Box::new(u0)],
            run,
            |_| Box::new(Passthrough),
        )
        .unwrap();
        let mut w1 = workers.pop().unwrap();
        let mut w0 = workers.pop().unwrap();
        let send = |h0: &mut mem::MemPort, from: u32, n: u32| {
            let mut burst: Vec<Pkt> = (from..from + n)
                .map(|k| Pkt::from_slice(&roce_frame(0, "10.9.0.2".parse().unwrap(), 7, k, 64)))
                .collect();
            h0.tx_burst(0, &mut burst);
        };
        // Some go through while both run; then worker 1 stops, and worker 0, still under
        // load, hands it more before it stops too (as two workers stopped under load do).
        let mut now = 1;
        send(&mut h0, 0, 64);
        for _ in 0..4 {
            now += 1_000;
            w0.iterate(now);
        }
        for _ in 0..4 {
            now += 1_000;
            w1.iterate(now);
        }
        let e1 = w1.finish_at(now);
        send(&mut h0, 64, 96);
        for _ in 0..4 {
            now += 1_000;
            w0.iterate(now);
        }
        let e0 = w0.finish_at(now);
        let stopped = switch.stop_driven(vec![e0, e1]);
        let mut out = Vec::new();
        fabric.rx_burst(now, &mut out, 4096);
        assert_eq!(out.len(), 64, "what worker 1 sent before it stopped");
        assert_eq!(stopped.stats.rx_pkts, 160);
        assert_eq!(stopped.stats.tx_pkts, 64);
        assert_eq!(stopped.stats.drops.iter().sum::<u64>(), 0);
        assert_eq!(
            stopped.unsent, 96,
            "the packets handed over after worker 1 stopped"
        );
    }

    #[test]
    fn a_stalled_worker_delays_only_the_packets_it_owns() {
        use crate::testkit::roce_frame;
        let (mut h0, d0) = mem::link("h0", "d0", 16384);
        let (_h1, d1) = mem::link("h1", "d1", 16384);
        let (u0, mut fabric) = mem::link("u0", "fabric", 16384);
        // d0 on worker 1, d1 on worker 2 (which never runs), u0 on worker 0.
        let run = RunConfig {
            workers: 3,
            assignment: Some(vec![1, 2, 0]),
            ..RunConfig::default()
        };
        let (switch, mut workers) = Switch::start_driven(
            tor_tables(2, 1, SprayPolicy::RoundRobin),
            vec![Box::new(d0), Box::new(d1), Box::new(u0)],
            run,
            |_| Box::new(Passthrough),
        )
        .unwrap();
        let stalled = workers.pop().unwrap();
        let mut w1 = workers.pop().unwrap();
        let mut w0 = workers.pop().unwrap();
        // 6000 packets for each host, interleaved, arrive from the fabric: worker 2's ring
        // (4096 hand-offs) fills, and what waits for it must not hold up worker 1's.
        let mut got = Vec::new();
        let mut now = 1;
        for k in 0..6000u32 {
            let mut burst = vec![
                Pkt::from_slice(&roce_frame(2, "10.0.0.2".parse().unwrap(), 7, k, 64)),
                Pkt::from_slice(&roce_frame(2, "10.0.1.2".parse().unwrap(), 8, k, 64)),
            ];
            fabric.tx_burst(now, &mut burst);
            if k % 16 == 0 {
                for _ in 0..4 {
                    now += 1_000;
                    w0.iterate(now);
                    w1.iterate(now);
                }
                h0.rx_burst(now, &mut got, 8192);
            }
        }
        for _ in 0..100 {
            now += 1_000;
            w0.iterate(now);
            w1.iterate(now);
            h0.rx_burst(now, &mut got, 8192);
        }
        assert_eq!(got.len(), 6000, "every packet of the running worker's host");
        drop(switch.stop_driven(vec![w0.finish(), w1.finish(), stalled.finish()]));
    }
}
