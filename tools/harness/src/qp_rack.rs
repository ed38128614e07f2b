//! Soft-RoCE QP models ([`sprayswitch_models::rxe`]) on the hosts of a [`DrivenRackPair`], on one virtual
//! clock: the oracle for the reorder engine. The switches are the real ones (workers, engine,
//! sprayer, reorder stage, the fabric emulator's delays and rates); the hosts are RNIC models
//! that follow rxe's state machines and count what rxe counts. When nothing is lost, a model
//! behind the rack must count no sequence error, implied NAK, duplicate or retry
//! ([`sprayswitch_models::rxe::RxeCounters::transport_errors`]); that is checked against the models, not
//! against the engine's own idea of order.
//!
//! A [`Connection`] is one QP on a rack A host and its peer on a rack B host, with a script of
//! [`Step`]s for the A side's requester: post a batch of work requests (all outstanding at
//! once), wait, or destroy both QPs and create them again with the same QPNs and new starting
//! PSNs (optionally announced by an RDMA CM exchange, as `rdma_cm` applications do). Each step
//! starts when everything before it has completed.

use std::net::IpAddr;

use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::switch::Stats;
use sprayswitch::wire::cm::CmMessage;
use sprayswitch::wire::{classify, Pmtu, Psn};

use crate::rack::topo::{DrivenRackPair, RackPairSpec};
use sprayswitch_models::rnic::Endpoint;
use sprayswitch_models::rxe::{Qp, QpConfig, QpState, RxeCounters, Verb};

/// One step of a connection's script.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Post these work requests on the A side at once (they are outstanding together, up to
    /// what the QP allows).
    Post(Vec<Verb>),
    /// Post these work requests on both sides at once, as perftest's `-b` does: each QP is then
    /// requester and responder together, with requests, responses and ACKs both ways.
    Both(Vec<Verb>),
    /// Do nothing for this long (an idle QP: the switch may evict its streams).
    Pause(u64),
    /// Destroy both QPs and create them again with the same QPNs, starting at these PSNs (A's
    /// requests, B's requests); `cm`: an RDMA CM REQ/REP exchange announces the new QPs first.
    Recreate {
        /// First PSN of A's requests.
        a_psn: Psn,
        /// First PSN of B's requests.
        b_psn: Psn,
        /// Announce the connection with RDMA CM.
        cm: bool,
    },
}

/// One QP pair between a rack A host and a rack B host.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// Rack A host index.
    pub a_host: usize,
    /// Rack B host index.
    pub b_host: usize,
    /// A's QPN.
    pub a_qpn: u32,
    /// B's QPN.
    pub b_qpn: u32,
    /// UDP source port of the pair (the same both ways).
    pub sport: u16,
    /// A's QP attributes.
    pub a_cfg: QpConfig,
    /// B's QP attributes.
    pub b_cfg: QpConfig,
    /// First PSN of A's requests.
    pub a_psn: Psn,
    /// First PSN of B's requests.
    pub b_psn: Psn,
    /// Announce the connection with RDMA CM before the first step.
    pub cm: bool,
    /// What A's requester does.
    pub script: Vec<Step>,
    /// Scripted loss: A's request packets of these PSNs are lost on A's link (before the
    /// source ToR, so the destination sees them missing as if a path had lost them), each the
    /// given number of times, its first sends: `(p, 2)` loses `p` and its first
    /// retransmission. The fabric's own loss is random; this makes one case happen for sure.
    pub drop_requests: Vec<(Psn, u32)>,
}

/// What one connection saw, summed over its QPs' lives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionReport {
    /// A's counters (requester of the script's work, responder of nothing).
    pub a: RxeCounters,
    /// B's counters.
    pub b: RxeCounters,
    /// Work requests posted.
    pub posted: u64,
    /// Work requests completed successfully.
    pub completed: u64,
    /// Work requests completed in error.
    pub failed: u64,
    /// The script ran to its end.
    pub finished: bool,
    /// A QP ended in the error state.
    pub error: bool,
    /// The first error state a QP of the connection ended in.
    pub first_error: Option<QpState>,
    /// Request packets lost as [`Connection::drop_requests`] scripted.
    pub scripted_drops: u64,
}

/// What a run saw.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Per connection, in the order given.
    pub connections: Vec<ConnectionReport>,
    /// Virtual time the run took (ns).
    pub elapsed_ns: u64,
    /// ToR A's counters at the end.
    pub tor_a: Stats,
    /// ToR B's counters at the end.
    pub tor_b: Stats,
}

impl RunReport {
    /// Every connection finished its script without a QP in error.
    pub fn all_finished(&self) -> bool {
        self.connections.iter().all(|c| c.finished && !c.error)
    }

    /// The sum of both sides' transport errors over every connection.
    pub fn transport_errors(&self) -> u64 {
        self.connections
            .iter()
            .map(|c| c.a.transport_errors() + c.b.transport_errors())
            .sum()
    }
}

struct Live {
    conn: Connection,
    a: Qp,
    b: Qp,
    step: usize,
    /// When a `Pause` ends.
    wait_until: Option<u64>,
    /// Totals of QPs already destroyed.
    report: ConnectionReport,
    posted_now: u64,
    /// An RDMA CM exchange is under way: as an `rdma_cm` application, A posts nothing until
    /// the REP reached it.
    wait_rep: bool,
    /// The CM exchange's communication ID (the REQ's) and the REP B sends once the REQ
    /// reached it.
    cm_comm: u32,
    pending_rep: Option<Pkt>,
    /// What is left of the scripted loss: PSN value, sends still to lose.
    drops_left: Vec<(u32, u32)>,
}

impl Live {
    /// Removes from `frames` (what A just sent) the request packets the script loses.
    fn lose_scripted(&mut self, frames: &mut Vec<Pkt>) {
        if self.drops_left.iter().all(|d| d.1 == 0) {
            return;
        }
        let before = frames.len();
        frames.retain(|p| {
            let Some(psn) = classify(p.data(), Pmtu::DEFAULT).ok().and_then(|c| {
                c.roce()
                    .filter(|r| r.bth.dest_qp == self.conn.b_qpn && !r.bth.opcode.is_response())
                    .map(|r| r.bth.psn.value())
            }) else {
                return true;
            };
            match self.drops_left.iter_mut().find(|d| d.0 == psn && d.1 > 0) {
                Some(d) => {
                    d.1 -= 1;
                    false
                }
                None => true,
            }
        });
        self.report.scripted_drops += (before - frames.len()) as u64;
    }

    fn endpoints(conn: &Connection, rp: &DrivenRackPair) -> (Endpoint, Endpoint) {
        let (ha, hb) = (&rp.hosts_a[conn.a_host], &rp.hosts_b[conn.b_host]);
        let a = Endpoint {
            mac: ha.mac,
            gw_mac: ha.gw_mac,
            ip: IpAddr::V4(ha.ip4),
            peer_ip: IpAddr::V4(hb.ip4),
            peer_qpn: conn.b_qpn,
            sport: conn.sport,
        };
        let b = Endpoint {
            mac: hb.mac,
            gw_mac: hb.gw_mac,
            ip: IpAddr::V4(hb.ip4),
            peer_ip: IpAddr::V4(ha.ip4),
            peer_qpn: conn.a_qpn,
            sport: conn.sport,
        };
        (a, b)
    }

    fn qps(conn: &Connection, rp: &DrivenRackPair, a_psn: Psn, b_psn: Psn) -> (Qp, Qp) {
        let (ea, eb) = Self::endpoints(conn, rp);
        let a = Qp::new(ea, conn.a_qpn, conn.a_cfg, a_psn, b_psn);
        let mut b = Qp::new(eb, conn.b_qpn, conn.b_cfg, b_psn, a_psn);
        // Enough receive WQEs for every SEND of the script: RNR is not what is tested here.
        b.post_recv(1 << 20);
        (a, b)
    }

    /// The CM REQ (A to B) and REP (B to A) of the connection at these PSNs.
    fn cm_frames(
        &self,
        rp: &DrivenRackPair,
        a_psn: Psn,
        b_psn: Psn,
        comm: u32,
    ) -> [(bool, Pkt); 2] {
        let (ea, eb) = Self::endpoints(&self.conn, rp);
        let req = CmMessage::Req {
            local_comm_id: comm,
            qpn: self.conn.a_qpn,
            starting_psn: a_psn,
        };
        let rep = CmMessage::Rep {
            local_comm_id: comm + 1,
            remote_comm_id: comm,
            qpn: self.conn.b_qpn,
            starting_psn: b_psn,
        };
        [(true, ea.cm_frame(&req)), (false, eb.cm_frame(&rep))]
    }

    fn retire(&mut self) {
        self.report.a.add(self.a.counters());
        self.report.b.add(self.b.counters());
        self.report.completed += self.a.completed() + self.b.completed();
        self.report.failed += self.a.failed() + self.b.failed();
        for st in [self.a.state(), self.b.state()] {
            if !matches!(st, QpState::Rts) {
                self.report.error = true;
                self.report.first_error.get_or_insert(st);
            }
        }
    }
}

fn send(port: &mut dyn Port, now: u64, pkts: &mut Vec<Pkt>) {
    // The in-memory host links hold far more than a burst; a full one is retried next step.
    let _ = port.tx_burst(now, pkts);
}

/// Runs `conns` over a driven rack pair built from `spec`, in steps of `step_ns` of virtual
/// time, for at most `limit_ns`; stops early once every script has finished and no host has
/// sent or received anything for `settle_ns`.
///
/// # Errors
/// When the rack pair cannot be built.
pub fn run(
    spec: &RackPairSpec,
    conns: &[Connection],
    step_ns: u64,
    limit_ns: u64,
    settle_ns: u64,
) -> anyhow::Result<RunReport> {
    let mut rp = DrivenRackPair::start(spec)?;
    let mut live: Vec<Live> = conns
        .iter()
        .map(|c| {
            let (a, b) = Live::qps(c, &rp, c.a_psn, c.b_psn);
            Live {
                conn: c.clone(),
                a,
                b,
                step: 0,
                wait_until: None,
                report: ConnectionReport::default(),
                posted_now: 0,
                wait_rep: false,
                cm_comm: 0,
                pending_rep: None,
                drops_left: c
                    .drop_requests
                    .iter()
                    .map(|&(p, n)| (p.value(), n))
                    .collect(),
            }
        })
        .collect();
    // Frames waiting to enter each host's link, per rack.
    let mut outq: [Vec<Vec<Pkt>>; 2] = [
        (0..rp.hosts_a.len()).map(|_| Vec::new()).collect(),
        (0..rp.hosts_b.len()).map(|_| Vec::new()).collect(),
    ];
    let mut comm = 0x1000u32;
    for l in &mut live {
        if l.conn.cm {
            let [(_, req), (_, reply)] = l.cm_frames(&rp, l.conn.a_psn, l.conn.b_psn, comm);
            outq[0][l.conn.a_host].push(req);
            l.pending_rep = Some(reply);
            l.cm_comm = comm;
            l.wait_rep = true;
            comm += 2;
        }
    }
    let mut now = 1u64;
    let mut quiet_since: Option<u64> = None;
    let mut rx: Vec<Pkt> = Vec::with_capacity(256);
    let mut frames: Vec<Pkt> = Vec::with_capacity(256);
    while now < limit_ns {
        // Scripts: start the next step of every connection whose work is done.
        let mut pending = false;
        for l in live.iter_mut() {
            loop {
                if l.step >= l.conn.script.len() {
                    break;
                }
                if let Some(t) = l.wait_until {
                    if now < t {
                        break;
                    }
                    l.wait_until = None;
                    l.step += 1;
                    continue;
                }
                if l.wait_rep || !(l.a.idle() && l.b.idle()) {
                    break;
                }
                match l.conn.script[l.step].clone() {
                    Step::Post(verbs) => {
                        for v in verbs {
                            l.a.post(v);
                            l.report.posted += 1;
                            l.posted_now += 1;
                        }
                        l.step += 1;
                        break;
                    }
                    Step::Both(verbs) => {
                        for v in verbs {
                            l.a.post(v);
                            l.b.post(v);
                            l.report.posted += 2;
                            l.posted_now += 2;
                        }
                        l.step += 1;
                        break;
                    }
                    Step::Pause(ns) => l.wait_until = Some(now + ns),
                    Step::Recreate { a_psn, b_psn, cm } => {
                        l.retire();
                        let (a, b) = Live::qps(&l.conn, &rp, a_psn, b_psn);
                        l.a = a;
                        l.b = b;
                        if cm {
                            let [(_, req), (_, reply)] = l.cm_frames(&rp, a_psn, b_psn, comm);
                            outq[0][l.conn.a_host].push(req);
                            l.pending_rep = Some(reply);
                            l.cm_comm = comm;
                            l.wait_rep = true;
                            comm += 2;
                        }
                        l.step += 1;
                    }
                }
            }
            pending |= l.step < l.conn.script.len() || !(l.a.idle() && l.b.idle());
        }
        // The switches. (What they do alone, path probes among them, is no work of the
        // hosts': the run is quiet once the hosts are.)
        rp.step(now);
        let mut work = false;
        // Hosts: what arrived goes to the QP it is addressed to; what the QPs send goes out.
        let racks = [&mut rp.hosts_a, &mut rp.hosts_b];
        for (side, (hosts, queues)) in racks.into_iter().zip(outq.iter_mut()).enumerate() {
            for (h, (host, q)) in hosts.iter_mut().zip(queues.iter_mut()).enumerate() {
                host.port.rx_burst(now, &mut rx, 256);
                work |= !rx.is_empty();
                for p in rx.drain(..) {
                    let Ok(c) = classify(p.data(), Pmtu::DEFAULT) else {
                        continue;
                    };
                    let Some(r) = c.roce() else { continue };
                    let qpn = r.bth.dest_qp;
                    if qpn == 1 {
                        // RDMA CM: B replies once the REQ reached it; A starts once the REP
                        // reached it (as rdma_cm applications do).
                        let msg = sprayswitch::wire::cm::parse(r.payload(p.data())).ok();
                        for l in live.iter_mut() {
                            match msg {
                                Some(CmMessage::Req { local_comm_id, .. })
                                    if side == 1
                                        && l.conn.b_host == h
                                        && l.cm_comm == local_comm_id =>
                                {
                                    if let Some(f) = l.pending_rep.take() {
                                        q.push(f);
                                    }
                                }
                                Some(CmMessage::Rep { remote_comm_id, .. })
                                    if side == 0
                                        && l.conn.a_host == h
                                        && l.cm_comm == remote_comm_id =>
                                {
                                    l.wait_rep = false;
                                }
                                _ => {}
                            }
                        }
                        continue;
                    }
                    for l in live.iter_mut() {
                        let (host_of, mine, qp) = if side == 0 {
                            (l.conn.a_host, l.conn.a_qpn, &mut l.a)
                        } else {
                            (l.conn.b_host, l.conn.b_qpn, &mut l.b)
                        };
                        if host_of == h && mine == qpn {
                            qp.handle(p.data(), now);
                        }
                    }
                }
                for l in live.iter_mut() {
                    let (host_of, qp) = if side == 0 {
                        (l.conn.a_host, &mut l.a)
                    } else {
                        (l.conn.b_host, &mut l.b)
                    };
                    if host_of == h {
                        qp.poll(now, &mut frames);
                        if side == 0 {
                            l.lose_scripted(&mut frames);
                        }
                        q.append(&mut frames);
                    }
                }
                if !q.is_empty() {
                    work = true;
                    send(&mut host.port, now, q);
                }
            }
        }
        if !pending && !work {
            let since = *quiet_since.get_or_insert(now);
            if now - since >= settle_ns {
                break;
            }
        } else {
            quiet_since = None;
        }
        now += step_ns;
    }
    // Let the switches finish what they hold (timers, idle eviction) before reading them.
    for _ in 0..8 {
        now += settle_ns.max(step_ns);
        rp.step(now);
    }
    let tor_a = rp.tor_a.stats();
    let tor_b = rp.tor_b.stats();
    let mut connections = Vec::with_capacity(live.len());
    for mut l in live {
        let finished = l.step >= l.conn.script.len() && l.a.idle() && l.b.idle();
        l.retire();
        l.report.finished = finished;
        connections.push(l.report);
    }
    drop(rp.stop());
    Ok(RunReport {
        connections,
        elapsed_ns: now,
        tor_a,
        tor_b,
    })
}
