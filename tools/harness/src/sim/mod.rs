//! `sprayswitch-sim`: a leaf-spine fabric in virtual time whose switches are real sprayswitch
//! instances (the same workers, engine, sprayer, reorder stage and egress queues the binary
//! runs, driven with the simulated clock), with hosts running the RNIC models of
//! [`sprayswitch_models::rnic`] (Go-Back-N or selective repeat, DCQCN). Each flow is one RDMA WRITE
//! on its own QP, connected with RDMA CM first (the switches learn its PSNs from it, as they do
//! from a real application), its completion time measured from its first packet to its last
//! ACK; or (long-lived QPs) a message on the QP its pair of hosts keeps, timed from its posting
//! (or the QP's connection, if later) to its last ACK. Either is compared with the ideal: the
//! flow alone on the fabric.
//!
//! The clock advances in fixed steps (`step_ns`, 100 ns by default: about one 1 KB frame at
//! 100 Gbit/s); each step every host takes what arrived and polls its QPs, and every switch
//! runs one loop iteration. A host's NIC sends at most its line rate (a budget per step) and
//! serves its QPs round robin, as an RNIC's scheduler does: only QPs with something to send
//! now are polled, and only while the budget lasts (a QP held back by its rate waits in a
//! timer queue, one whose window is full until a response comes), so a step costs what is sent,
//! not the number of QPs. The QPs' timers (retransmission timeout, DCQCN) of QPs not polled run
//! every `TIMER_SWEEP_NS` (a timeout found up to that much late). The same seed gives the same
//! flows and the same results.
//!
//! The files: [`topo`] the fabric and its configurations, [`workload`] flow sizes and arrivals,
//! [`report`] slowdowns and the table, [`replay`] the demo's scenarios in the simulator (to
//! compare it with the real-time rack).

pub mod collective;
pub mod replay;
pub mod report;
pub mod topo;
pub mod workload;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::IpAddr;

use sprayswitch::pkt::Pkt;
use sprayswitch::port::{LinkState, Port};
use sprayswitch::wire::cm::{self, CmMessage};
use sprayswitch::wire::{classify, Psn};

use report::FlowResult;
use sprayswitch_models::dcqcn::DcqcnConfig;
use sprayswitch_models::rnic::{Endpoint, ReceiverMode, Requester, Responder, Retransmit, Work};
use topo::{Fabric, LeafReorder, Scheme, Topology};
use workload::Flow;

/// One simulation run.
#[derive(Debug, Clone)]
pub struct SimOpts {
    /// The fabric.
    pub topology: Topology,
    /// How the leaves spread RoCE.
    pub scheme: Scheme,
    /// The hosts' RNICs.
    pub receiver: ReceiverMode,
    /// DCQCN at the hosts (`None`: none).
    pub dcqcn: Option<DcqcnConfig>,
    /// Virtual time between steps.
    pub step_ns: u64,
    /// After the last arrival, how long flows may still run before the run ends (those not
    /// done are reported unfinished).
    pub drain_ns: u64,
    /// Each flow on its own QP (false), or one long-lived QP per pair of hosts carrying all
    /// their flows as messages, in order (true; flows that name their UDP source port: one QP
    /// per pair of hosts and port).
    pub long_lived: bool,
    /// Print progress to stderr (see [`run_reporting`] for another reporter).
    pub progress: bool,
    /// The hosts' QP settings.
    pub qp: QpParams,
    /// The leaves' reorder settings (spray + reorder).
    pub leaf: LeafReorder,
    /// Flows that start only when others have completed (collectives); `None`: every flow
    /// starts at its `start_ns`.
    pub gates: Option<std::sync::Arc<Gates>>,
}

/// Flows that wait for others (a collective's steps): flow `i` starts when the gate
/// `wait[i]` opens (and not before its `start_ns`); a gate opens when as many flows that
/// signal it have completed as its `count` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gates {
    /// Per flow: the gate it waits for.
    pub wait: Vec<Option<u32>>,
    /// Per flow: the gates its completion counts towards.
    pub signals: Vec<Vec<u32>>,
    /// Per gate: the completions it waits for.
    pub count: Vec<u32>,
}

impl SimOpts {
    /// `scheme` on `topology` towards `receiver` RNICs as `sprayswitch-sim` runs it by
    /// default: DCQCN's ConWeave profile at the hosts' rate, steps of 100 ns, 20 ms to drain,
    /// a QP per flow, default QP settings, the leaves' reorder settings for `receiver`.
    pub fn new(topology: Topology, scheme: Scheme, receiver: ReceiverMode) -> SimOpts {
        SimOpts {
            dcqcn: Some(DcqcnConfig::conweave(topology.host_bps())),
            topology,
            scheme,
            receiver,
            step_ns: 100,
            drain_ns: 20_000_000,
            long_lived: false,
            progress: false,
            qp: QpParams::default(),
            leaf: LeafReorder::towards(receiver),
            gates: None,
        }
    }
}

/// How the hosts' QPs are set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// Packets a requester may have unacknowledged (the default is no limit in practice:
    /// DCQCN and the NIC's line rate pace the senders).
    pub window: u32,
    /// A responder ACKs every this many packets (and a message's last).
    pub ack_every: u32,
    /// The requester's retransmission timeout, ns.
    pub timeout_ns: u64,
}

impl Default for QpParams {
    fn default() -> Self {
        QpParams {
            window: 1 << 20,
            ack_every: 16,
            timeout_ns: 4_000_000,
        }
    }
}

/// What a run gives.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    /// The scheme.
    pub scheme: Scheme,
    /// The receivers.
    pub receiver: ReceiverMode,
    /// Every flow, in id order.
    pub flows: Vec<FlowResult>,
    /// Packets the switches dropped, for any reason.
    pub drops: u64,
    /// NAKs the receivers sent.
    pub naks: u64,
    /// NAKs that reached the senders (the rest the leaves filtered: `spray+nak_filter`).
    pub naks_received: u64,
    /// Packets the receivers got out of sequence (sequence errors).
    pub out_of_sequence: u64,
    /// Packets the senders sent again.
    pub retransmitted: u64,
    /// Per leaf: the busiest uplink's bytes over the mean uplink's (1.0: even).
    pub uplink_imbalance: Vec<f64>,
    /// Per leaf: the most packets its reorder stage held at once in one stream.
    pub reorder_max_depth: Vec<u64>,
    /// Per leaf: the most bytes its reorder stage held at once (a leaf runs one worker here;
    /// with several, the largest worker's peak).
    pub reorder_peak_bytes: Vec<u64>,
    /// Per leaf: the most streams its reorder stage tracked at once (as above).
    pub reorder_peak_streams: Vec<u64>,
    /// Per leaf: reorder streams at the end.
    pub reorder_streams: Vec<u64>,
    /// Gaps the leaves declared lost by path order.
    pub path_losses: u64,
    /// Gaps the leaves declared lost after the hold timeout.
    pub reorder_timeouts: u64,
    /// Path-order detection time (gap opened to declared), 99th percentile over every leaf,
    /// ns (`None`: nothing declared by path order).
    pub detect_p99_ns: Option<u64>,
    /// Times path health took a leaf's uplink out of its spray set, over every leaf.
    pub path_outs: u64,
    /// Of those, uplinks to spines without a fault (false exclusions).
    pub false_outs: u64,
    /// Per leaf: how long after the first spine fault began it took that spine's uplink out
    /// of its spray set (`None`: it did not; empty without a fault).
    pub fault_out_ns: Vec<Option<u64>>,
    /// Virtual time simulated (ns).
    pub simulated_ns: u64,
    /// Frames the switches transmitted.
    pub switch_tx_pkts: u64,
    /// Wall-clock seconds the run took (not part of any output that must repeat).
    pub wall_s: f64,
}

/// A host NIC's send budget over the link: its line rate, shared by its QPs.
struct Nic<'a> {
    port: &'a mut dyn Port,
    budget: &'a mut i64,
}

impl Port for Nic<'_> {
    fn name(&self) -> &str {
        self.port.name()
    }
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        self.port.rx_burst(now, out, max)
    }
    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Pkt>) -> usize {
        let mut n = 0;
        while n < pkts.len() && *self.budget > 0 {
            *self.budget -= pkts[n].len() as i64;
            n += 1;
        }
        if n == 0 {
            return 0;
        }
        let mut rest = pkts.split_off(n);
        let sent = self.port.tx_burst(now, pkts);
        // What the link did not take goes back in front, in order.
        rest.splice(0..0, pkts.drain(..));
        *pkts = rest;
        sent
    }
    fn poll(&mut self, now: u64) {
        self.port.poll(now)
    }
    fn link_state(&self) -> LinkState {
        self.port.link_state()
    }
    fn tx_backlog(&self) -> usize {
        self.port.tx_backlog()
    }
}

/// A QP under way: one flow's, or (long-lived QPs) a pair of hosts'.
struct Live {
    src: u32,
    dst: u32,
    /// Its UDP source port.
    sport: u16,
    req: Requester,
    /// The REP came: messages are posted.
    connected: bool,
    /// When the CM REQ last went out.
    req_at: u64,
    /// It.
    req_frame: Pkt,
    /// Flows posted, not complete yet, oldest first (RC completes in order).
    posted: VecDeque<u32>,
    /// Flows waiting for the connection.
    waiting: Vec<u32>,
    /// Completions already taken from `req.completion_ns`.
    seen: usize,
    /// When the REP came.
    connected_at: u64,
    /// Where the NIC's scheduler has it.
    sched: Sched,
}

/// Where a sender QP is in its NIC's scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sched {
    /// Nothing to send (or not connected yet).
    Idle,
    /// In the round robin: something to send now.
    Ready,
    /// Held back by its rate until then.
    Later(u64),
}

/// Per host: its QPs by QPN, and its NIC's scheduler.
#[derive(Default)]
struct HostQps {
    /// Sender QPs (indices into `live`).
    senders: Vec<usize>,
    /// QPN -> QP index, for what arrives for a sender.
    sender_qpn: HashMap<u32, u32>,
    /// QPN -> responder.
    receivers: HashMap<u32, Responder>,
    /// The NIC's budget left this step (bytes; negative: owed from a packet that overran).
    budget: i64,
    /// Sender QPs with something to send now, in round-robin order.
    ready: VecDeque<usize>,
    /// Sender QPs held back by their rate, by when they may send (stale entries skipped).
    later: BinaryHeap<Reverse<(u64, usize)>>,
    /// Sender QPs a response reached this step, for their completions.
    touched: Vec<usize>,
}

impl HostQps {
    /// Puts sender QP `i` where its next send puts it: in the round robin, the timer queue, or
    /// nowhere (it waits for a response, or has nothing posted).
    fn schedule(&mut self, i: usize, l: &mut Live, now: u64) {
        if !l.connected {
            return;
        }
        match l.req.next_send_at() {
            Some(at) if at <= now && l.sched != Sched::Ready => {
                l.sched = Sched::Ready;
                self.ready.push_back(i);
            }
            Some(at)
                if at > now
                    && (l.sched == Sched::Idle || matches!(l.sched, Sched::Later(t) if t > at)) =>
            {
                l.sched = Sched::Later(at);
                self.later.push(Reverse((at, i)));
            }
            // Nothing it may send (a response or the timeout changes that), or already where
            // it belongs.
            _ => {}
        }
    }
}

/// How often the timers of QPs not polled run (their retransmission timeouts and CM REQ
/// retries are found up to this late; DCQCN's timers run in order whenever they run).
const TIMER_SWEEP_NS: u64 = 10_000;

fn sender_qpn(q: u32) -> u32 {
    0x10 + (q & 0x7f_ffff)
}

fn receiver_qpn(q: u32) -> u32 {
    0x80_0000 | (q & 0x7f_ffff)
}

/// Bytes on the wire of one packet around `payload` bytes (Ethernet, IPv4, UDP, BTH, ICRC).
const HEADERS: u64 = 14 + 20 + 8 + 12 + 4;

/// The ideal completion time of `bytes` alone on the fabric: its bytes with headers at the
/// slowest link's rate, then the last packet stored and forwarded again by every switch on the
/// way (between racks: the leaf, the spine and the far leaf, at the fabric, fabric and host
/// rates; within a rack: the leaf, at the host rate), a link's delay per hop each way (four
/// links between racks, two within one; with spines of their own delays, the shortest
/// spine's), and the ACK's serialisation at every transmitter on the way back.
pub fn ideal_fct_ns(t: &Topology, bytes: u64, pmtu: u64, same_rack: bool) -> u64 {
    let (host, fabric) = (t.host_bps() as f64, t.fabric_bps() as f64);
    let packets = bytes.div_ceil(pmtu).max(1);
    let wire = (bytes + packets * HEADERS + 16) as f64;
    let last = (bytes - (packets - 1) * pmtu + HEADERS + if packets == 1 { 16 } else { 0 }) as f64;
    let ack = (HEADERS + 4) as f64;
    let ns = |b: f64, rate: f64| b * 8e9 / rate;
    let base = if same_rack {
        4.0 * t.link_delay_ns as f64 + ns(last, host) + ns(ack, host) * 2.0
    } else {
        4.0 * t.link_delay_ns as f64
            + 4.0 * t.shortest_spine_delay_ns() as f64
            + ns(last, fabric) * 2.0
            + ns(last, host)
            + ns(ack, host) * 2.0
            + ns(ack, fabric) * 2.0
    };
    let slowest = if same_rack { host } else { host.min(fabric) };
    (base + ns(wire, slowest)) as u64
}

/// How long a sender waits for the REP of its RDMA CM REQ before sending it again.
const CM_RETRY_NS: u64 = 200_000;

/// Where a run is: virtual time now and at the end, flows done and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Virtual time now, ns.
    pub now_ns: u64,
    /// When the run ends at the latest, ns.
    pub end_ns: u64,
    /// Flows complete.
    pub done: usize,
    /// Flows in all.
    pub flows: usize,
}

/// Runs `flows` over a fresh fabric.
///
/// # Errors
/// When the flows are not numbered in start order, or the fabric cannot be built.
pub fn run(o: &SimOpts, flows: &[Flow]) -> anyhow::Result<SimOutcome> {
    let name = format!(
        "{} {}",
        o.scheme.name(),
        crate::rack::demo::receiver_name(o.receiver)
    );
    let report = |p: Progress| {
        if o.progress {
            eprint!(
                "\r{name}: {:>5.1} of {:.1} ms, {}/{} flows",
                p.now_ns as f64 / 1e6,
                p.end_ns as f64 / 1e6,
                p.done,
                p.flows
            );
        }
    };
    let out = run_reporting(o, flows, &report);
    if o.progress {
        eprintln!();
    }
    out
}

/// Runs `flows` over a fresh fabric, telling `report` where it is about a hundred times
/// (whatever `o.progress` says).
///
/// # Errors
/// As [`run`].
pub fn run_reporting(
    o: &SimOpts,
    flows: &[Flow],
    report: &dyn Fn(Progress),
) -> anyhow::Result<SimOutcome> {
    let wall = std::time::Instant::now();
    let t = &o.topology;
    let hosts = t.hosts();
    for (i, f) in flows.iter().enumerate() {
        anyhow::ensure!(
            f.id as usize == i && f.src < hosts && f.dst < hosts && f.src != f.dst,
            "flow {i}: ids must number the flows from 0, between two distinct hosts of the {hosts}"
        );
        anyhow::ensure!(
            i == 0 || flows[i - 1].start_ns <= f.start_ns,
            "flow {i}: flows must come in start order"
        );
        anyhow::ensure!(
            f.bytes >= 1 && f.bytes <= u64::from(u32::MAX),
            "flow {i}: 1 byte to 4 GiB"
        );
    }
    if let Some(g) = &o.gates {
        anyhow::ensure!(
            g.wait.len() == flows.len() && g.signals.len() == flows.len(),
            "gates: one wait and one signal list per flow"
        );
        let gates = g.count.len();
        anyhow::ensure!(
            g.wait
                .iter()
                .flatten()
                .chain(g.signals.iter().flatten())
                .all(|&x| (x as usize) < gates),
            "gates: a flow names a gate that does not exist"
        );
    }
    anyhow::ensure!(
        flows.len() < 0x7f_fff0,
        "{} flows: at most 8 million per run (QPNs are 24 bits)",
        flows.len()
    );
    anyhow::ensure!(
        t.host_bps() as f64 * o.step_ns.max(1) as f64 / 8e9 >= 1.0,
        "step {} ns: too short for a host to send a byte per step",
        o.step_ns
    );
    let mut fabric = Fabric::start(t, o.scheme, o.step_ns.max(1), &o.leaf)?;
    let pmtu = t.path_mtu();
    let nhosts = fabric.hosts.len();
    let rack_of = |h: u32| h / t.hosts_per_leaf;
    let mut qps: Vec<HostQps> = (0..nhosts).map(|_| HostQps::default()).collect();
    let mut live: Vec<Option<Live>> = Vec::new();
    // Long-lived QPs: the QP of each (sender, receiver) pair, or of each pair and UDP source
    // port when the flows name one.
    let mut pair_qp: HashMap<(u32, u32, Option<u16>), u32> = HashMap::new();
    let mut results: Vec<FlowResult> = flows
        .iter()
        .map(|f| FlowResult {
            id: f.id,
            src: f.src,
            dst: f.dst,
            bytes: f.bytes,
            start_ns: f.start_ns,
            fct_ns: None,
            ideal_ns: ideal_fct_ns(
                t,
                f.bytes,
                u64::from(pmtu.bytes()),
                rack_of(f.src) == rack_of(f.dst),
            ),
        })
        .collect();
    let host_bytes_per_step = (t.host_bps() as f64 * o.step_ns as f64 / 8e9) as i64;
    // Gated flows start when their gate opens: the run lasts until the drain after the last
    // flow started.
    let gated = |i: usize| o.gates.as_ref().is_some_and(|g| g.wait[i].is_some());
    let mut remaining: Vec<u32> = o.gates.as_ref().map_or(Vec::new(), |g| g.count.clone());
    let mut waiters: Vec<Vec<u32>> = vec![Vec::new(); remaining.len()];
    let mut ready: VecDeque<u32> = VecDeque::new();
    if let Some(g) = &o.gates {
        for (i, w) in g.wait.iter().enumerate() {
            if let Some(w) = w {
                waiters[*w as usize].push(i as u32);
            }
        }
        for (k, &c) in g.count.iter().enumerate() {
            if c == 0 {
                ready.extend(std::mem::take(&mut waiters[k]));
            }
        }
    }
    let last_start = (0..flows.len())
        .filter(|&i| !gated(i))
        .map(|i| flows[i].start_ns)
        .max()
        .unwrap_or(0);
    let mut end = last_start + o.drain_ns;
    let mut to_start: Vec<usize> = Vec::new();
    let mut next_flow = 0usize;
    let mut done = 0usize;
    let mut rx: Vec<Pkt> = Vec::with_capacity(256);
    let mut finished: Vec<usize> = Vec::new();
    let mut next_sweep = 0u64;
    // Packets a QP builds ahead in a poll: what the NIC's budget may take at most.
    let burst = (4 * host_bytes_per_step as u64).div_ceil(u64::from(pmtu.bytes())) as usize + 1;
    let (mut naks, mut retransmitted, mut naks_received) = (0u64, 0u64, 0u64);
    let mut out_of_sequence = 0u64;
    let mut now = 0u64;
    let mut next_progress = 0u64;
    let addrs: Vec<([u8; 6], [u8; 6], std::net::Ipv4Addr)> = fabric
        .hosts
        .iter()
        .map(|h| (h.mac, h.gw_mac, h.ip))
        .collect();
    let endpoint = |from: u32, to: u32, peer_qpn: u32, sport: u16| {
        let (a, b) = (addrs[from as usize], addrs[to as usize]);
        Endpoint {
            mac: a.0,
            gw_mac: a.1,
            ip: IpAddr::V4(a.2),
            peer_ip: IpAddr::V4(b.2),
            peer_qpn,
            sport,
        }
    };
    let sport_of = |q: u32| 0xC000 | ((q.wrapping_mul(2_654_435_761) >> 18) as u16 & 0x3FFF);
    while now < end && done < flows.len() {
        if now >= next_progress {
            report(Progress {
                now_ns: now,
                end_ns: end,
                done,
                flows: flows.len(),
            });
            next_progress = now + end / 100 + 1;
        }
        // New flows: on a QP of their own (its RDMA CM REQ announces it), or on their pair's
        // long-lived QP (connected the first time).
        to_start.clear();
        while next_flow < flows.len() && flows[next_flow].start_ns <= now {
            if !gated(next_flow) {
                to_start.push(next_flow);
            }
            next_flow += 1;
        }
        while let Some(&i) = ready.front() {
            if flows[i as usize].start_ns > now {
                break;
            }
            ready.pop_front();
            to_start.push(i as usize);
            results[i as usize].start_ns = now;
            end = end.max(now + o.drain_ns);
        }
        for &i in &to_start {
            let f = flows[i];
            let existing = if o.long_lived {
                pair_qp.get(&(f.src, f.dst, f.sport)).copied()
            } else {
                None
            };
            if let Some(q) = existing {
                if let Some(l) = live[q as usize].as_mut() {
                    if l.connected {
                        l.req.post(Work::Write(f.bytes as u32));
                        l.posted.push_back(f.id);
                        qps[f.src as usize].schedule(q as usize, l, now);
                    } else {
                        l.waiting.push(f.id);
                    }
                }
                continue;
            }
            let q = live.len() as u32;
            if o.long_lived {
                pair_qp.insert((f.src, f.dst, f.sport), q);
            }
            let sport = f.sport.unwrap_or_else(|| sport_of(q));
            let ea = endpoint(f.src, f.dst, receiver_qpn(q), sport);
            let start = Psn::new(q.wrapping_mul(7919) & 0xff_ffff);
            let mut req = Requester::new(ea, start, pmtu, o.qp.window, o.qp.timeout_ns);
            req.set_dcqcn(o.dcqcn);
            req.set_burst(burst);
            if o.receiver == ReceiverMode::Sr {
                req.set_retransmit(Retransmit::Selective);
            }
            let msg = CmMessage::Req {
                local_comm_id: q,
                qpn: sender_qpn(q),
                starting_psn: start,
            };
            let frame = ea.cm_frame(&msg);
            let mut v = vec![frame.clone()];
            fabric.hosts[f.src as usize].port.tx_burst(now, &mut v);
            let h = &mut qps[f.src as usize];
            h.senders.push(live.len());
            h.sender_qpn.insert(sender_qpn(q), q);
            live.push(Some(Live {
                src: f.src,
                dst: f.dst,
                sport,
                req,
                connected: false,
                req_at: now,
                req_frame: frame,
                posted: VecDeque::new(),
                waiting: vec![f.id],
                seen: 0,
                connected_at: 0,
                sched: Sched::Idle,
            }));
        }
        let sweep = now >= next_sweep;
        if sweep {
            next_sweep = now + TIMER_SWEEP_NS.max(o.step_ns);
        }
        // Hosts: what arrived, then their QPs within the NIC's budget.
        for hi in 0..nhosts {
            let h = &mut qps[hi];
            // The line rate, with up to four steps' worth saved while the QPs had nothing to
            // send (a NIC's burst).
            h.budget = (h.budget + host_bytes_per_step).min(4 * host_bytes_per_step);
            let host = &mut fabric.hosts[hi];
            host.port.poll(now);
            host.port.rx_burst(now, &mut rx, 256);
            h.touched.clear();
            for p in rx.drain(..) {
                let Ok(c) = classify(p.data(), pmtu) else {
                    continue;
                };
                let Some(r) = c.roce() else { continue };
                let qpn = r.bth.dest_qp;
                if qpn == 1 {
                    match cm::parse(r.payload(p.data())) {
                        Ok(CmMessage::Req {
                            local_comm_id: q,
                            qpn: peer,
                            starting_psn,
                        }) => {
                            let Some(Some(l)) = live.get(q as usize) else {
                                continue;
                            };
                            let eb = endpoint(l.dst, l.src, peer, l.sport);
                            // A REQ sent again (its REP lost or on its way) gets the REP
                            // again; the responder stays as it is.
                            h.receivers.entry(receiver_qpn(q)).or_insert_with(|| {
                                let mut resp =
                                    Responder::new(eb, starting_psn, pmtu, o.qp.ack_every);
                                resp.set_mode(o.receiver);
                                resp.set_cnp_interval(o.dcqcn.map(|d| d.cnp_interval_ns));
                                resp
                            });
                            let rep = CmMessage::Rep {
                                local_comm_id: receiver_qpn(q),
                                remote_comm_id: q,
                                qpn: receiver_qpn(q),
                                starting_psn: Psn::new(0),
                            };
                            let mut v = vec![eb.cm_frame(&rep)];
                            host.port.tx_burst(now, &mut v);
                        }
                        Ok(CmMessage::Rep { remote_comm_id, .. }) => {
                            let i = remote_comm_id as usize;
                            if let Some(Some(l)) = live.get_mut(i) {
                                if !l.connected {
                                    l.connected = true;
                                    l.connected_at = now;
                                    for id in std::mem::take(&mut l.waiting) {
                                        let bytes = flows[id as usize].bytes as u32;
                                        l.req.post(Work::Write(bytes));
                                        l.posted.push_back(id);
                                    }
                                    h.schedule(i, l, now);
                                }
                            }
                        }
                        _ => {}
                    }
                } else if let Some(resp) = h.receivers.get_mut(&qpn) {
                    // ACKs, NAKs and CNPs go out at once: small, and a reply held back would
                    // wait for the QP's next packet (after the last one, the sender's timeout).
                    resp.handle(p.data(), now, host.port.as_mut());
                } else if let Some(&q) = h.sender_qpn.get(&qpn) {
                    if let Some(Some(l)) = live.get_mut(q as usize) {
                        l.req.handle(p.data(), now);
                        h.touched.push(q as usize);
                    }
                }
            }
            // Completions, in posting order: a flow on its own QP is timed from its first
            // packet to its last ACK (its connection set up before), a message on a
            // long-lived QP from when it was posted (waiting behind the QP's earlier messages
            // included), or from when the QP connected if that was later (a long-lived QP
            // exists before its messages; its setup is no message's).
            finished.clear();
            for k in 0..h.touched.len() {
                let i = h.touched[k];
                let Some(l) = live[i].as_mut() else { continue };
                while l.seen < l.req.completion_ns.len() {
                    let Some(id) = l.posted.pop_front() else {
                        break;
                    };
                    let fct = if o.long_lived {
                        now.saturating_sub(results[id as usize].start_ns.max(l.connected_at))
                    } else {
                        l.req.completion_ns[l.seen]
                    };
                    results[id as usize].fct_ns = Some(fct);
                    l.seen += 1;
                    done += 1;
                    if let Some(g) = &o.gates {
                        for &k in &g.signals[id as usize] {
                            let r = &mut remaining[k as usize];
                            *r = r.saturating_sub(1);
                            if *r == 0 {
                                ready.extend(std::mem::take(&mut waiters[k as usize]));
                            }
                        }
                    }
                }
                if !o.long_lived && l.req.done() && l.posted.is_empty() {
                    if !finished.contains(&i) {
                        finished.push(i);
                    }
                } else {
                    // A response may open the window (or a NAK ask for a packet again).
                    h.schedule(i, l, now);
                }
            }
            for &i in &finished {
                let Some(l) = live[i].take() else { continue };
                let q = i as u32;
                retransmitted += l.req.stats.retransmitted;
                naks_received += l.req.stats.naks;
                let h = &mut qps[hi];
                h.senders.retain(|&x| x != i);
                h.sender_qpn.remove(&sender_qpn(q));
                if let Some(r) = qps[l.dst as usize].receivers.remove(&receiver_qpn(q)) {
                    naks += r.stats.naks;
                    out_of_sequence += r.stats.out_of_sequence;
                }
            }
            let h = &mut qps[hi];
            // Now and then the timers of every QP: CM REQs not answered go again, timeouts
            // rewind, DCQCN's timers run.
            if sweep {
                for k in 0..h.senders.len() {
                    let i = h.senders[k];
                    let Some(l) = live[i].as_mut() else { continue };
                    if !l.connected {
                        if now.saturating_sub(l.req_at) >= CM_RETRY_NS {
                            l.req_at = now;
                            let mut v = vec![l.req_frame.clone()];
                            host.port.tx_burst(now, &mut v);
                        }
                        continue;
                    }
                    l.req.run_timers(now);
                    h.schedule(i, l, now);
                }
            }
            // The NIC's scheduler: QPs whose rate lets them send again join the round robin;
            // each QP in it is polled once at most, while the budget lasts, and goes to its
            // back (or out of it) after.
            while let Some(&Reverse((at, i))) = h.later.peek() {
                if at > now {
                    break;
                }
                h.later.pop();
                if let Some(l) = live[i].as_mut() {
                    if l.sched == Sched::Later(at) {
                        l.sched = Sched::Idle;
                        h.schedule(i, l, now);
                    }
                }
            }
            let mut turns = h.ready.len();
            while turns > 0 && h.budget > 0 {
                turns -= 1;
                let Some(i) = h.ready.pop_front() else { break };
                let Some(l) = live[i].as_mut() else { continue };
                l.sched = Sched::Idle;
                let mut nic = Nic {
                    port: host.port.as_mut(),
                    budget: &mut h.budget,
                };
                l.req.poll(now, &mut nic);
                h.schedule(i, l, now);
            }
        }
        fabric.step(now);
        now += o.step_ns.max(1);
    }
    report(Progress {
        now_ns: now,
        end_ns: end,
        done,
        flows: flows.len(),
    });
    for h in &qps {
        naks += h.receivers.values().map(|r| r.stats.naks).sum::<u64>();
        out_of_sequence += h
            .receivers
            .values()
            .map(|r| r.stats.out_of_sequence)
            .sum::<u64>();
    }
    retransmitted += live
        .iter()
        .flatten()
        .map(|l| l.req.stats.retransmitted)
        .sum::<u64>();
    naks_received += live.iter().flatten().map(|l| l.req.stats.naks).sum::<u64>();
    let mut out = SimOutcome {
        scheme: o.scheme,
        receiver: o.receiver,
        flows: results,
        drops: 0,
        naks,
        naks_received,
        out_of_sequence,
        retransmitted,
        uplink_imbalance: Vec::new(),
        reorder_max_depth: Vec::new(),
        reorder_peak_bytes: Vec::new(),
        reorder_peak_streams: Vec::new(),
        reorder_streams: Vec::new(),
        path_losses: 0,
        reorder_timeouts: 0,
        detect_p99_ns: None,
        path_outs: 0,
        false_outs: 0,
        fault_out_ns: Vec::new(),
        simulated_ns: now,
        switch_tx_pkts: 0,
        wall_s: 0.0,
    };
    let leaves = t.leaves as usize;
    let mut detection: Option<hdrhistogram::Histogram<u64>> = None;
    for (k, (sw, ws)) in fabric.switches.into_iter().enumerate() {
        let exits = ws.into_iter().map(|w| w.finish_at(now)).collect();
        if k < leaves {
            let first_fault = t.spine_faults.first();
            for sp in 0..t.spines {
                let id = (t.hosts_per_leaf + sp) as u16;
                let r = sw.path_report(id).unwrap_or_default();
                out.path_outs += r.outs;
                if !t.spine_faults.iter().any(|f| f.spine == sp) {
                    out.false_outs += r.outs;
                }
                if let Some(f) = first_fault.filter(|f| f.spine == sp) {
                    let at = (f.at_ms * 1e6) as u64;
                    out.fault_out_ns.push(
                        r.events
                            .iter()
                            .find(|(t, out)| *out && *t >= at)
                            .map(|(t, _)| t - at),
                    );
                }
            }
        }
        // Complete once the workers finished (their last poll publishes it).
        if let Some(h) = sw.detection_histogram() {
            match detection.as_mut() {
                Some(all) => {
                    let _ = all.add(&h);
                }
                None => detection = Some(h),
            }
        }
        let s = sw.stop_driven(exits).stats;
        out.path_losses += s.reorder.path_losses;
        out.reorder_timeouts += s.reorder.timeouts;
        out.drops += s.drops_total();
        out.switch_tx_pkts += s.tx_pkts;
        if k < leaves {
            let up: Vec<f64> = s.ports[t.hosts_per_leaf as usize..]
                .iter()
                .map(|p| p.tx_bytes as f64)
                .collect();
            let mean = up.iter().sum::<f64>() / up.len().max(1) as f64;
            let max = up.iter().copied().fold(0.0, f64::max);
            out.uplink_imbalance
                .push(if mean > 0.0 { max / mean } else { 1.0 });
            out.reorder_max_depth.push(s.reorder.max_depth);
            out.reorder_peak_bytes.push(s.reorder.peak_held_bytes);
            out.reorder_peak_streams.push(s.reorder.peak_streams);
            out.reorder_streams.push(s.reorder.streams);
        }
    }
    out.detect_p99_ns = detection
        .filter(|h| !h.is_empty())
        .map(|h| h.value_at_quantile(0.99));
    out.wall_s = wall.elapsed().as_secs_f64();
    Ok(out)
}

/// Runs every one of `runs` over the same `flows`, `jobs` at a time on threads of their own
/// (each run is independent and deterministic: the outcomes are the same for any `jobs`), in
/// the order given. `report` hears each run's progress with its index.
///
/// # Errors
/// The first run's error, in `runs` order. A run that panics panics the caller.
pub fn run_all(
    runs: &[SimOpts],
    flows: &[Flow],
    jobs: usize,
    report: &(dyn Fn(usize, Progress) + Sync),
) -> anyhow::Result<Vec<SimOutcome>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Vec<std::sync::Mutex<Option<anyhow::Result<SimOutcome>>>> =
        runs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, runs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(o) = runs.get(i) else { break };
                let r = run_reporting(o, flows, &|p| report(i, p));
                *outcomes[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    outcomes
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err(anyhow::anyhow!("run did not report")))
        })
        .collect()
}
