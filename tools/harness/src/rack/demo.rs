//! The demo: one rack pair in one process, the same workloads under ECMP, spraying without
//! reordering, and spraying with sprayswitch's reordering, against Go-Back-N and selective-repeat
//! receivers; a table and an SVG plot of the results.
//!
//! Paths are rate-limited (the fabric's capacity) and have skewed delays, so that spraying can
//! use all of them and reorders packets while doing so.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use sprayswitch::engine::spray::flow_hash;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::reorder::{DownlinkMode, ReorderConfig};
use sprayswitch::rng::Rng;
use sprayswitch::tables::SprayPolicy;
use sprayswitch::wire::{IpSummary, L4Summary, Pmtu, Psn};

use crate::rack::topo::{DrivenRackPair, Host, PathSpec, RackPair, RackPairSpec};
use sprayswitch::port::fault::LossStep;
use sprayswitch_models::rnic::{Endpoint, ReceiverMode, Requester, Responder, Retransmit, Work};

/// What the fabric does with a QP's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Per-flow hashing: every packet of a QP on one path.
    Ecmp,
    /// Per-packet round robin, no reordering at the destination ToR.
    Spray,
    /// Per-packet round robin with sprayswitch's reorder engine.
    SprayReorder,
    /// Per-packet round robin; the destination ToR forwards at once and filters the hosts'
    /// spurious NAKs (`nak_filter` downlinks: selective-repeat RNICs only).
    SprayNakFilter,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 4] = [
        Mode::Ecmp,
        Mode::Spray,
        Mode::SprayReorder,
        Mode::SprayNakFilter,
    ];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ecmp => "ecmp",
            Mode::Spray => "spray",
            Mode::SprayReorder => "spray+reorder",
            Mode::SprayNakFilter => "spray+nak_filter",
        }
    }

    /// Whether the mode can serve `receiver`: NAK filtering needs selective repeat (the switch
    /// refuses it on a downlink declared Go-Back-N).
    pub fn serves(self, receiver: ReceiverMode) -> bool {
        self != Mode::SprayNakFilter || receiver != ReceiverMode::Gbn
    }

    /// What the destination ToR's downlinks do.
    pub fn downlink_mode(self) -> DownlinkMode {
        match self {
            Mode::SprayNakFilter => DownlinkMode::NakFilter,
            _ => DownlinkMode::Reorder,
        }
    }
}

/// A workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Name.
    pub name: &'static str,
    /// QPs per host (2 hosts per rack, host i of rack A writes to host i of rack B).
    pub qps_per_host: usize,
    /// Bytes per message (RDMA WRITE).
    pub message: u32,
    /// Messages per QP.
    pub messages: u32,
    /// Pick UDP source ports whose ECMP hashes all land on one path (the collision spraying
    /// exists for); otherwise random.
    pub colliding: bool,
    /// Each message is followed on its QP by an 8-byte WRITE, its flag (an application that
    /// polls the flag to know the data is in place): the responders record where each flag
    /// landed relative to its data ([`Outcome::flags_early`]).
    pub flag: bool,
    /// The QPs READ instead (host i of rack A reads from host i of rack B: the responses
    /// are what rack A's ToR orders).
    pub read: bool,
}

/// Demo settings (see `sprayswitch-demo --help`).
#[derive(Debug, Clone, PartialEq)]
pub struct DemoOpts {
    /// One-way delay of each fabric path, microseconds.
    pub path_delays_us: Vec<u64>,
    /// Rate of each fabric path, Mbit/s.
    pub path_rate_mbps: u64,
    /// Loss probability of each fabric path (both directions); empty: none.
    pub path_loss: Vec<f64>,
    /// Hold timeout of the destination ToRs' reorder stage, microseconds.
    pub hold_timeout_us: u64,
    /// Longest a scenario may run, seconds.
    pub deadline_s: f64,
    /// Requester window per QP, packets.
    pub window: u32,
    /// Seed.
    pub seed: u64,
    /// Run on the scenario's own clock, advanced this many ns per step (the ToRs' workers
    /// driven by it, as the simulator drives them): the same every run and on every machine.
    /// `None`: real time, the ToRs on threads of their own.
    pub virtual_step_ns: Option<u64>,
    /// Take each host's path stamps on their own (otherwise a rack's hosts are one source,
    /// [`crate::rack::topo::RackPairSpec::stamp_per_rack`]).
    pub stamp_per_host: bool,
    /// When `path_loss` applies: from the start, or a fault that begins mid-run.
    pub fault: FaultTiming,
    /// Path health on the ToRs' fabric group (probes, failing paths out of the spray set).
    pub health: bool,
    /// ToR B restarts: (when, how long it is down), ms from the start (virtual time only).
    pub restart_b_ms: Option<(f64, f64)>,
    /// Host b1 stops answering: (when, for how long), ms from the start; meanwhile its NIC
    /// drops whatever reaches it.
    pub silent_host_ms: Option<(f64, f64)>,
    /// Each ToR uplink receives into a pool of this many frames (as an AF_PACKET port does).
    pub uplink_pool_frames: Option<u32>,
}

/// When the paths' loss applies, counted from the start of a scenario (its RDMA CM handshake
/// takes well under a millisecond of it).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FaultTiming {
    /// The loss begins this long after the start.
    pub at_ms: f64,
    /// It ends this long after it began (the path is repaired); `None`: never.
    pub for_ms: Option<f64>,
    /// It comes and goes: on for the first value, off for the second, from `at_ms` on (a
    /// flapping path).
    pub flap_ms: Option<(f64, f64)>,
}

impl FaultTiming {
    /// The loss schedule of a path losing `loss` while the fault is on, on a clock that reads
    /// `base` at the start, up to `until_ns` after it.
    pub fn schedule(&self, loss: f64, base: u64, until_ns: u64) -> Vec<LossStep> {
        let ms = |x: f64| (x * 1e6) as u64;
        let step = |at: u64, drop_rate: f64| LossStep {
            at_ns: base + at,
            drop_rate,
        };
        let start = ms(self.at_ms);
        let mut v = vec![step(start, loss)];
        match (self.flap_ms, self.for_ms) {
            (Some((on, off)), _) if on + off > 0.0 => {
                let mut t = start;
                while t < until_ns {
                    t += ms(on);
                    v.push(step(t, 0.0));
                    t += ms(off);
                    v.push(step(t, loss));
                }
            }
            (_, Some(d)) => v.push(step(start + ms(d), 0.0)),
            _ => {}
        }
        v
    }

    /// Whether the loss starts later than the scenario or stops.
    pub fn is_timed(&self) -> bool {
        self.at_ms > 0.0 || self.for_ms.is_some() || self.flap_ms.is_some()
    }
}

impl Default for DemoOpts {
    fn default() -> Self {
        DemoOpts {
            path_delays_us: vec![2, 10, 25, 50],
            path_rate_mbps: 250,
            path_loss: Vec::new(),
            hold_timeout_us: 5_000,
            deadline_s: 3.0,
            window: 32,
            seed: 7,
            virtual_step_ns: None,
            stamp_per_host: false,
            fault: FaultTiming::default(),
            health: true,
            restart_b_ms: None,
            silent_host_ms: None,
            uplink_pool_frames: None,
        }
    }
}

/// One scenario's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Workload name.
    pub workload: &'static str,
    /// Fabric mode.
    pub mode: Mode,
    /// Receiver model.
    pub receiver: ReceiverMode,
    /// Goodput, bits per second (completed message bytes over the time taken).
    pub goodput_bps: f64,
    /// Fraction of the fabric's capacity.
    pub of_capacity: f64,
    /// Messages completed and posted.
    pub completed: u64,
    /// Messages posted.
    pub posted: u64,
    /// Seconds until the last completion (or the deadline).
    pub seconds: f64,
    /// Message completion times, ns, sorted.
    pub completion_ns: Vec<u64>,
    /// NAKs received by requesters.
    pub naks: u64,
    /// NAKs the responders sent (what reached the requesters is `naks`; the difference is
    /// what the destination ToR filtered).
    pub naks_sent: u64,
    /// The most bytes either ToR's reorder stage held at once (rack B's orders the requests,
    /// rack A's the READ responses).
    pub peak_held_bytes: u64,
    /// READs the requesters asked for again (a response missing, overtaken or lost).
    pub read_retries: u64,
    /// Duplicate requests at the responders (retransmissions of what they had).
    pub responder_duplicates: u64,
    /// Rack A's ToR's reorder counters (READ responses, READ retries).
    pub tor_a_reorder: sprayswitch::reorder::ReorderTotals,
    /// With a flag after each message: flags whose data was all placed (the rest were lost
    /// or not yet), and of those the flags placed before the last of their data.
    pub flags_placed: u64,
    /// See `flags_placed`.
    pub flags_early: u64,
    /// Packets retransmitted.
    pub retransmitted: u64,
    /// Retransmission timeouts of the requesters (each resends from the first packet not
    /// acknowledged after waiting the 67 ms timer: what a loss costs when nothing after it
    /// makes the responder NAK it, or a retransmission is lost again).
    pub requester_timeouts: u64,
    /// Packets sent / packets needed.
    pub sent_ratio: f64,
    /// Out-of-sequence arrivals at responders.
    pub out_of_sequence: u64,
    /// Gaps the destination ToR declared lost after the hold timeout.
    pub reorder_timeouts: u64,
    /// Gaps the destination ToR declared lost by path order.
    pub path_losses: u64,
    /// The longest a gap stayed open at the destination ToR before its own packet came (the
    /// largest skew the switch saw), microseconds.
    pub skew_us: Option<f64>,
    /// The fabric's largest skew from rack A to rack B during the run, microseconds: the
    /// longest less the shortest one-way delay across the paths (propagation plus the queue a
    /// packet would find), sampled at every step of the demo's loop. The switch sees less of it
    /// when no gap happens to wait on the slow path at that moment.
    pub path_skew_us: f64,
    /// Path-order detection time (gap opened to declared), 99th percentile, microseconds.
    pub detect_p99_us: Option<f64>,
    /// Per-path loss of the fabric in this scenario.
    pub path_loss: Vec<f64>,
    /// How long after the fault began path health took the first lossy path out of ToR A's
    /// spray set, milliseconds (`None`: it did not, or there is no lossy path).
    pub path_out_ms: Option<f64>,
    /// Times path health took a path without loss out, at either ToR (false exclusions).
    pub healthy_outs: u64,
    /// Packets the two ToRs dropped (queues full, no route: anything but the fabric's loss).
    pub switch_drops: u64,
    /// Gaps the ToRs gave up early because a receive pool ran low.
    pub pool_give_ups: u64,
}

impl Outcome {
    /// A completion-time percentile in milliseconds.
    pub fn percentile_ms(&self, q: f64) -> f64 {
        let mut v = self.completion_ns.clone();
        v.sort_unstable();
        sprayswitch_packet::percentile::quantile(&v, q).map_or(f64::NAN, |ns| ns as f64 / 1e6)
    }
}

fn summary(src: Ipv4Addr, dst: Ipv4Addr, sport: u16) -> IpSummary {
    IpSummary {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        hop_limit: 64,
        tos: 0,
        protocol: 17,
        l4_offset: 34,
        end_offset: 0,
        l4: L4Summary::Udp {
            src_port: sport,
            dst_port: 4791,
        },
    }
}

/// UDP source ports for the QPs of one host pair: colliding ones hash onto uplink 0 of 4.
fn sports(src: Ipv4Addr, dst: Ipv4Addr, n: usize, colliding: bool, rng: &mut Rng) -> Vec<u16> {
    let mut out = Vec::new();
    let mut p = 0xC000u16 | (rng.below(0x3000) as u16);
    while out.len() < n {
        p = 0xC000 | (p.wrapping_add(1) & 0x3FFF);
        if !colliding || flow_hash(&summary(src, dst, p)).is_multiple_of(4) {
            out.push(p);
        }
    }
    out
}

/// One QP of a demo workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedQp {
    /// Its pair of hosts: host `pair` of rack A writes to host `pair` of rack B.
    pub pair: usize,
    /// Its place among the pair's QPs.
    pub k: usize,
    /// UDP source port (a colliding workload's ports all hash onto one of four paths).
    pub sport: u16,
    /// Starting PSN.
    pub start: Psn,
}

/// The QPs of `w` with `seed` between the pairs of hosts `pairs` (each: its rack A and rack B
/// address): the demo's, and the simulator's when it replays the demo
/// ([`crate::sim::replay`]).
pub fn plan_qps(seed: u64, w: &Workload, pairs: &[(Ipv4Addr, Ipv4Addr)]) -> Vec<PlannedQp> {
    let mut rng = Rng::new(seed ^ u64::from(w.colliding));
    let mut out = Vec::new();
    for (pair, (a, b)) in pairs.iter().enumerate() {
        for (k, sport) in sports(*a, *b, w.qps_per_host, w.colliding, &mut rng)
            .into_iter()
            .enumerate()
        {
            let start = Psn::new(rng.next_u64() as u32);
            out.push(PlannedQp {
                pair,
                k,
                sport,
                start,
            });
        }
    }
    out
}

struct Qp {
    req: Requester,
    resp: Responder,
    host: usize,
    qpn_a: u32,
    qpn_b: u32,
}

type Start = (usize, u32, u32, Psn, Endpoint, Endpoint);

/// RDMA CM handshake of every QP (REQ from rack A, REP from rack B) before any data, as an
/// RDMA CM application does: the ToRs learn each QP pair and its starting PSNs from it.
/// The rack pair a scenario runs on: in real time, or on the scenario's clock.
enum Rig {
    Real(Box<RackPair>),
    Virtual(Box<DrivenRackPair>),
}

impl Rig {
    fn hosts(&mut self) -> (&mut [Host], &mut [Host]) {
        match self {
            Rig::Real(r) => (&mut r.hosts_a, &mut r.hosts_b),
            Rig::Virtual(v) => (&mut v.hosts_a, &mut v.hosts_b),
        }
    }

    /// The fabric's skew A->B at `now` (the clock the ToRs run on: `clock` in virtual time,
    /// the monotonic clock otherwise): the largest less the smallest of each path's delay plus
    /// the queue a packet offered now would find.
    fn path_skew_ns(&self, delays_ns: &[u64], clock: u64) -> u64 {
        let (stats, now) = match self {
            Rig::Real(r) => (&r.path_stats, sprayswitch::time::now_ns()),
            Rig::Virtual(v) => (&v.path_stats, clock),
        };
        let one_way = stats
            .iter()
            .zip(delays_ns)
            .map(|((a_to_b, _), d)| d + a_to_b.queue_ns(now));
        let (lo, hi) = one_way.fold((u64::MAX, 0), |(lo, hi), d| (lo.min(d), hi.max(d)));
        hi.saturating_sub(lo)
    }
}

/// A scenario's clock: real (ns since it started), or virtual (advanced a step at a time, the
/// ToRs iterating at each).
struct Clock {
    start: Instant,
    virtual_now: Option<(u64, u64)>,
}

impl Clock {
    fn new(step_ns: Option<u64>) -> Clock {
        Clock {
            start: Instant::now(),
            virtual_now: step_ns.map(|s| (1, s.max(1))),
        }
    }

    fn now(&self) -> u64 {
        match self.virtual_now {
            Some((now, _)) => now,
            None => self.start.elapsed().as_nanos() as u64 + 1,
        }
    }

    /// Lets time pass: one step of the ToRs in virtual time; in real time a sleep of `idle`
    /// when nothing came.
    fn pass(&mut self, rig: &mut Rig, worked: bool, idle: Duration) {
        match (&mut self.virtual_now, rig) {
            (Some((now, step)), Rig::Virtual(v)) => {
                *now += *step;
                v.step(*now);
            }
            _ => {
                if !worked {
                    std::thread::sleep(idle);
                }
            }
        }
    }
}

/// How long a CM REQ waits for its REP before it is sent again (RDMA CM retries a REQ after
/// its response timeout, up to 15 times; the demo's fabric may lose either).
const CM_RETRY_NS: u64 = 2_000_000;

fn connect(rp: &mut Rig, clock: &mut Clock, _qps: &[Qp], starts: &[Start]) -> anyhow::Result<()> {
    use sprayswitch::wire::cm::{self, CmMessage};
    let req = |i: usize| {
        let (_, qpn_a, _, start, ea, _) = starts[i];
        ea.cm_frame(&CmMessage::Req {
            local_comm_id: 0x1000 + i as u32,
            qpn: qpn_a,
            starting_psn: start,
        })
    };
    // Per connection: whether its REP came back.
    let mut connected = vec![false; starts.len()];
    let deadline = clock.now() + 5_000_000_000;
    let mut next_try = clock.now();
    let mut rx = Vec::with_capacity(256);
    while connected.iter().any(|c| !c) {
        anyhow::ensure!(clock.now() < deadline, "CM handshake did not complete");
        if clock.now() >= next_try {
            for (i, done) in connected.iter().enumerate() {
                if !done {
                    let mut v = vec![req(i)];
                    while !v.is_empty() {
                        rp.hosts().0[starts[i].0].port.tx_burst(0, &mut v);
                    }
                }
            }
            next_try = clock.now() + CM_RETRY_NS;
        }
        for host in 0..2 {
            // The passive side answers every REQ, a repeated one too (its REP may be lost).
            rp.hosts().1[host].port.rx_burst(0, &mut rx, 256);
            for p in rx.drain(..) {
                let Ok(c) = sprayswitch::wire::classify(p.data(), Pmtu::DEFAULT) else {
                    continue;
                };
                let Some(r) = c.roce() else { continue };
                if let Ok(CmMessage::Req { local_comm_id, .. }) = cm::parse(r.payload(p.data())) {
                    let i = local_comm_id.wrapping_sub(0x1000) as usize;
                    if i < starts.len() {
                        let (_, _, qpn_b, start, _, eb) = starts[i];
                        let rep = CmMessage::Rep {
                            local_comm_id: 0x2000 + i as u32,
                            remote_comm_id: local_comm_id,
                            qpn: qpn_b,
                            starting_psn: start,
                        };
                        let mut v = vec![eb.cm_frame(&rep)];
                        while !v.is_empty() {
                            rp.hosts().1[host].port.tx_burst(0, &mut v);
                        }
                    }
                }
            }
            rp.hosts().0[host].port.rx_burst(0, &mut rx, 256);
            for p in rx.drain(..) {
                let Ok(c) = sprayswitch::wire::classify(p.data(), Pmtu::DEFAULT) else {
                    continue;
                };
                let Some(r) = c.roce() else { continue };
                if let Ok(CmMessage::Rep { remote_comm_id, .. }) = cm::parse(r.payload(p.data())) {
                    if let Some(done) =
                        connected.get_mut(remote_comm_id.wrapping_sub(0x1000) as usize)
                    {
                        *done = true;
                    }
                }
            }
        }
        clock.pass(rp, false, Duration::from_micros(100));
    }
    Ok(())
}

/// Runs one scenario.
///
/// # Errors
/// When the rack pair cannot be built.
pub fn run(
    opts: &DemoOpts,
    w: &Workload,
    mode: Mode,
    receiver: ReceiverMode,
) -> anyhow::Result<Outcome> {
    let rate = opts.path_rate_mbps * 1_000_000;
    // The switches' clock at the start: the virtual clock starts at 1, the real one is the
    // monotonic clock.
    let base = match opts.virtual_step_ns {
        Some(_) => 1,
        None => sprayswitch::time::now_ns(),
    };
    let until = (opts.deadline_s * 1e9) as u64 + 1_000_000_000;
    let paths: Vec<PathSpec> = opts
        .path_delays_us
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let loss = opts.path_loss.get(i).copied().unwrap_or(0.0);
            let timed = loss > 0.0 && opts.fault.is_timed();
            PathSpec {
                delay_ns: d * 1000,
                jitter_ns: 0,
                loss: if timed { 0.0 } else { loss },
                loss_schedule: if timed {
                    opts.fault.schedule(loss, base, until)
                } else {
                    Vec::new()
                },
                rate_bps: Some(rate),
            }
        })
        .collect();
    let spec = RackPairSpec {
        paths,
        policy: if mode == Mode::Ecmp {
            SprayPolicy::Ecmp
        } else {
            SprayPolicy::RoundRobin
        },
        reorder: matches!(mode, Mode::SprayReorder | Mode::SprayNakFilter).then(|| ReorderConfig {
            // Timers above the path skew and above scheduling stalls of a shared 2-core box.
            hold_timeout_ns: opts.hold_timeout_us * 1000,
            learn_ns: 5_000_000,
            ..ReorderConfig::default()
        }),
        seed: opts.seed,
        stamp_per_rack: !opts.stamp_per_host,
        // As a downlink towards such an RNIC is configured.
        loss_recovery: receiver.loss_recovery(),
        downlink_mode: mode.downlink_mode(),
        // On the scenario's own clock, the switch's default interval; in real time, the rack
        // pair's (its emulated paths are late by as much as its threads wake late).
        health_interval_us: match (opts.health, opts.virtual_step_ns) {
            (false, _) => None,
            (true, Some(_)) => {
                Some(sprayswitch::tables::HealthSpec::new(Vec::new()).interval_ns / 1000)
            }
            (true, None) => Some(crate::rack::topo::REAL_TIME_PROBE_US),
        },
        uplink_pool_frames: opts.uplink_pool_frames,
        ..RackPairSpec::default()
    };
    let mut clock = Clock::new(opts.virtual_step_ns);
    let mut rp = if opts.virtual_step_ns.is_some() {
        Rig::Virtual(Box::new(DrivenRackPair::start(&spec)?))
    } else {
        anyhow::ensure!(
            opts.restart_b_ms.is_none(),
            "a ToR restart needs --virtual-time"
        );
        Rig::Real(Box::new(RackPair::start(&spec)?))
    };
    if let (Some((at, down)), Rig::Virtual(v)) = (opts.restart_b_ms, &mut rp) {
        v.restart_b_at(base + (at * 1e6) as u64, (down * 1e6) as u64);
    }
    let silent = opts.silent_host_ms.map(|(at, d)| {
        let from = base + (at * 1e6) as u64;
        from..from + (d * 1e6) as u64
    });
    let pmtu = Pmtu::DEFAULT;
    let mut qps: Vec<Qp> = Vec::new();
    let mut starts = Vec::new();
    let pairs: Vec<(Ipv4Addr, Ipv4Addr)> = (0..2)
        .map(|h| (rp.hosts().0[h].ip4, rp.hosts().1[h].ip4))
        .collect();
    for planned in plan_qps(opts.seed, w, &pairs) {
        let (host, k, sport, start) = (planned.pair, planned.k, planned.sport, planned.start);
        let (hosts_a, hosts_b) = rp.hosts();
        let (a, b) = (&hosts_a[host], &hosts_b[host]);
        let qpn_a = 0x100 + (host * 64 + k) as u32;
        let qpn_b = 0x800 + (host * 64 + k) as u32;
        let ea = Endpoint {
            mac: a.mac,
            gw_mac: a.gw_mac,
            ip: IpAddr::V4(a.ip4),
            peer_ip: IpAddr::V4(b.ip4),
            peer_qpn: qpn_b,
            sport,
        };
        let eb = Endpoint {
            mac: b.mac,
            gw_mac: b.gw_mac,
            ip: IpAddr::V4(b.ip4),
            peer_ip: IpAddr::V4(a.ip4),
            peer_qpn: qpn_a,
            sport,
        };
        starts.push((host, qpn_a, qpn_b, start, ea, eb));
        // Retransmission timeout 67 ms, perftest's default.
        let mut req = Requester::new(ea, start, pmtu, opts.window, 67_000_000);
        let mut resp = Responder::new(eb, start, pmtu, 8);
        resp.set_mode(receiver);
        if receiver == ReceiverMode::Sr {
            req.set_retransmit(Retransmit::Selective);
        }
        for _ in 0..w.messages {
            req.post(if w.read {
                Work::Read(w.message)
            } else {
                Work::Write(w.message)
            });
            if w.flag {
                req.post(Work::Write(FLAG_BYTES));
            }
        }
        if w.flag {
            resp.record_placement();
        }
        qps.push(Qp {
            req,
            resp,
            host,
            qpn_a,
            qpn_b,
        });
    }
    let posted = qps.len() as u64 * u64::from(w.messages) * if w.flag { 2 } else { 1 };
    connect(&mut rp, &mut clock, &qps, &starts)?;
    let t0 = clock.now();
    let deadline = t0 + (opts.deadline_s * 1e9) as u64;
    let mut rx: Vec<Pkt> = Vec::with_capacity(512);
    let mut finished_at = None;
    let delays_ns: Vec<u64> = spec.paths.iter().map(|p| p.delay_ns).collect();
    let mut path_skew_ns = 0;
    while clock.now() < deadline {
        path_skew_ns = path_skew_ns.max(rp.path_skew_ns(&delays_ns, clock.now()));
        let now = clock.now() - t0 + 1;
        let mut work = 0;
        let (hosts_a, hosts_b) = rp.hosts();
        for q in qps.iter_mut() {
            q.req.poll(now, &mut hosts_a[q.host].port);
        }
        for host in 0..2 {
            hosts_a[host].port.rx_burst(now, &mut rx, 512);
            work += rx.len();
            for p in rx.drain(..) {
                let qpn = u32::from_be_bytes([0, p.data()[47], p.data()[48], p.data()[49]]);
                if let Some(q) = qps.iter_mut().find(|q| q.qpn_a == qpn) {
                    q.req.handle(p.data(), now);
                }
            }
            hosts_b[host].port.rx_burst(now, &mut rx, 512);
            work += rx.len();
            if host == 0 && silent.as_ref().is_some_and(|s| s.contains(&clock.now())) {
                // The host does not answer: its NIC drops what comes.
                rx.clear();
            }
            for p in rx.drain(..) {
                let qpn = u32::from_be_bytes([0, p.data()[47], p.data()[48], p.data()[49]]);
                if let Some(q) = qps.iter_mut().find(|q| q.qpn_b == qpn) {
                    q.resp.handle(p.data(), now, &mut hosts_b[host].port);
                }
            }
        }
        if qps.iter().all(|q| q.req.done()) {
            finished_at = Some(clock.now() - t0);
            break;
        }
        clock.pass(&mut rp, work > 0, Duration::from_micros(20));
    }
    let seconds = finished_at.unwrap_or_else(|| clock.now() - t0) as f64 / 1e9;
    // Path health (read before the last step below, whose jump in time every probe session
    // would see as silence): when ToR A took the first lossy path out, and what it (or B) took out of
    // the paths without loss.
    let fault_start = base + (opts.fault.at_ms * 1e6) as u64;
    let (tor_a_sw, tor_b_sw) = match &rp {
        Rig::Real(r) => (&r.tor_a, &r.tor_b),
        Rig::Virtual(v) => (&v.tor_a, &v.tor_b),
    };
    let uplink = |sw: &sprayswitch::switch::Switch, p: usize| {
        sw.tables()
            .port_id(&format!("u{p}"))
            .and_then(|id| sw.path_report(id))
            .unwrap_or_default()
    };
    let lossy = |p: usize| opts.path_loss.get(p).is_some_and(|l| *l > 0.0);
    let path_out_ms = (0..spec.paths.len())
        .filter(|p| lossy(*p))
        .filter_map(|p| {
            uplink(tor_a_sw, p)
                .events
                .iter()
                .find(|(at, out)| *out && *at >= fault_start)
                .map(|(at, _)| (at - fault_start) as f64 / 1e6)
        })
        .reduce(f64::min);
    let healthy_outs = (0..spec.paths.len())
        .filter(|p| !lossy(*p))
        .map(|p| uplink(tor_a_sw, p).outs + uplink(tor_b_sw, p).outs)
        .sum();
    // The workers publish their histograms every 100 ms of their clock: wait for the last one
    // (in virtual time, one more step that much later, with nothing left to do).
    let (tor_a, tor_b, detection) = match &mut rp {
        Rig::Real(r) => {
            std::thread::sleep(Duration::from_millis(150));
            (
                r.tor_a.stats(),
                r.tor_b.stats(),
                r.tor_b.detection_histogram(),
            )
        }
        Rig::Virtual(v) => {
            v.step(clock.now() + 150_000_000);
            (
                v.tor_a.stats(),
                v.tor_b.stats(),
                v.tor_b.detection_histogram(),
            )
        }
    };
    let detect_p99_us = detection
        .filter(|h| !h.is_empty())
        .map(|h| h.value_at_quantile(0.99) as f64 / 1e3);

    match rp {
        Rig::Real(r) => drop(r.stop()),
        Rig::Virtual(v) => drop(v.stop_at(clock.now() + 150_000_000)),
    }
    let flag_order = if w.flag {
        qps.iter()
            .zip(&starts)
            .map(|(q, st)| flags_before_data(q.resp.placed().unwrap_or(&[]), st.3, w, pmtu))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    } else {
        (0, 0)
    };
    let bytes: u64 = qps.iter().map(|q| q.req.bytes_done).sum();
    let mut completion_ns: Vec<u64> = qps
        .iter()
        .flat_map(|q| q.req.completion_ns.iter().copied())
        .collect();
    completion_ns.sort_unstable();
    let sent: u64 = qps.iter().map(|q| q.req.stats.packets_sent).sum();
    let needed: u64 = qps.iter().map(|q| q.req.stats.packets_needed).sum();
    let goodput_bps = bytes as f64 * 8.0 / seconds.max(1e-9);
    Ok(Outcome {
        workload: w.name,
        mode,
        receiver,
        goodput_bps,
        of_capacity: goodput_bps / (rate as f64 * opts.path_delays_us.len() as f64),
        completed: qps.iter().map(|q| q.req.stats.completed).sum(),
        posted,
        seconds,
        completion_ns,
        naks: qps.iter().map(|q| q.req.stats.naks).sum(),
        naks_sent: qps.iter().map(|q| q.resp.stats.naks).sum(),
        flags_placed: flag_order.0,
        flags_early: flag_order.1,
        peak_held_bytes: tor_a
            .reorder
            .peak_held_bytes
            .max(tor_b.reorder.peak_held_bytes),
        read_retries: qps.iter().map(|q| q.req.stats.read_retries).sum(),
        responder_duplicates: qps.iter().map(|q| q.resp.stats.duplicates).sum(),
        tor_a_reorder: tor_a.reorder,
        retransmitted: qps.iter().map(|q| q.req.stats.retransmitted).sum(),
        requester_timeouts: qps.iter().map(|q| q.req.stats.timeouts).sum(),
        sent_ratio: sent as f64 / needed.max(1) as f64,
        out_of_sequence: qps.iter().map(|q| q.resp.stats.out_of_sequence).sum(),
        reorder_timeouts: tor_b.reorder.timeouts,
        path_losses: tor_b.reorder.path_losses,
        skew_us: (tor_b.reorder.peak_path_skew_ns > 0)
            .then(|| tor_b.reorder.peak_path_skew_ns as f64 / 1e3),
        path_skew_us: path_skew_ns as f64 / 1e3,
        detect_p99_us,
        path_loss: opts.path_loss.clone(),
        path_out_ms,
        healthy_outs,
        switch_drops: tor_a.drops_total() + tor_b.drops_total(),
        pool_give_ups: tor_a.reorder.pool_give_ups + tor_b.reorder.pool_give_ups,
    })
}

/// Bytes of the flag written after each message of a [`Workload::flag`] workload.
const FLAG_BYTES: u32 = 8;

/// Of the flags of a QP that started at `start` and ran `w` (message, flag, message, flag, ...
/// at path MTU `pmtu`), whose responder placed data in the order `placed` shows: how many were
/// placed with all their data, and how many of those before the last of their data.
pub fn flags_before_data(placed: &[u32], start: Psn, w: &Workload, pmtu: Pmtu) -> (u64, u64) {
    let mut at = std::collections::HashMap::with_capacity(placed.len());
    for (i, &p) in placed.iter().enumerate() {
        at.entry(p).or_insert(i);
    }
    let span = pmtu.read_span(w.message);
    let (mut placed_flags, mut early) = (0, 0);
    let mut psn = start;
    for _ in 0..w.messages {
        let data: Option<Vec<usize>> = (0..span)
            .map(|k| at.get(&psn.add(k).value()).copied())
            .collect();
        let flag = at.get(&psn.add(span).value()).copied();
        if let (Some(data), Some(flag)) = (data, flag) {
            placed_flags += 1;
            if data.iter().any(|&d| d > flag) {
                early += 1;
            }
        }
        psn = psn.add(span + 1);
    }
    (placed_flags, early)
}

/// The ordering table: how often a flag was in memory before the data it follows, per fabric
/// and receiver, with what each costs (peak bytes the ToR held, completion times).
pub fn ordering_table(rows: &[Outcome]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:<6} {:>22} {:>9} {:>9} {:>9} {:>9}",
        "fabric", "rnic", "flags before data", "p50 ms", "p99 ms", "held KB", "NAKs s/r"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<16} {:<6} {:>22} {:>9.2} {:>9.2} {:>9.1} {:>9}",
            r.mode.name(),
            receiver_name(r.receiver),
            format!(
                "{} of {} ({:.1}%)",
                r.flags_early,
                r.flags_placed,
                100.0 * r.flags_early as f64 / r.flags_placed.max(1) as f64
            ),
            r.percentile_ms(0.5),
            r.percentile_ms(0.99),
            r.peak_held_bytes as f64 / 1e3,
            format!("{}/{}", r.naks_sent, r.naks),
        );
    }
    s
}

/// The two workloads of the demo.
pub fn workloads(scale: f64) -> Vec<Workload> {
    let s = |n: f64| ((n * scale).round() as u32).max(1);
    vec![
        Workload {
            name: "few-large-qps",
            qps_per_host: 2,
            message: 64 * 1024,
            messages: s(128.0),
            colliding: true,
            flag: false,
            read: false,
        },
        Workload {
            name: "many-qps",
            qps_per_host: 16,
            message: 16 * 1024,
            messages: s(64.0),
            colliding: false,
            flag: false,
            read: false,
        },
    ]
}

/// The ordering workload: 8 QPs per host pair, each writing 16 KiB and then an 8-byte flag,
/// 32 times (`scale` times as many).
pub fn ordering_workload(scale: f64) -> Workload {
    Workload {
        name: "write+flag",
        qps_per_host: 8,
        message: 16 * 1024,
        messages: ((32.0 * scale).round() as u32).max(1),
        colliding: false,
        flag: true,
        read: false,
    }
}

/// The scenario of a row: its workload, and the fabric's loss when it has any
/// (`few-large-qps, loss 0/1/0/0%`).
pub fn scenario(r: &Outcome) -> String {
    if r.path_loss.iter().all(|l| *l == 0.0) {
        return r.workload.to_string();
    }
    let l: Vec<String> = r
        .path_loss
        .iter()
        .map(|l| format!("{}", (l * 1e4).round() / 1e2))
        .collect();
    format!("{}, loss {}%", r.workload, l.join("/"))
}

/// The results as a text table.
pub fn table(rows: &[Outcome]) -> String {
    let mut s = String::new();
    let width = rows
        .iter()
        .map(|r| scenario(r).len())
        .max()
        .unwrap_or(8)
        .max(8);
    let _ = writeln!(
        s,
        "{:<width$} {:<16} {:<6} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>5} {:>7} {:>11} {:>9} {:>9} {:>9} {:>8} {:>6} {:>7} {:>4} {:>6} {:>5}",
        "scenario",
        "fabric",
        "rnic",
        "goodput",
        "of cap",
        "p50 ms",
        "p99 ms",
        "NAKs s/r",
        "retrans",
        "RTOs",
        "sent/ne",
        "lost po/to",
        "det p99",
        "seen skew",
        "path skew",
        "held KB",
        "done",
        "out ms",
        "fex",
        "drops",
        "gvup"
    );
    for r in rows {
        let det = r
            .detect_p99_us
            .map_or("-".to_string(), |us| format!("{us:.0} us"));
        let _ = writeln!(
            s,
            "{:<width$} {:<16} {:<6} {:>6.0} Mb {:>6.0}% {:>9.2} {:>9.2} {:>9} {:>9} {:>5} {:>7.2} {:>11} {:>9} {:>9} {:>9} {:>8.1} {:>5.0}% {:>7} {:>4} {:>6} {:>5}",
            scenario(r),
            r.mode.name(),
            receiver_name(r.receiver),
            r.goodput_bps / 1e6,
            r.of_capacity * 100.0,
            r.percentile_ms(0.5),
            r.percentile_ms(0.99),
            format!("{}/{}", r.naks_sent, r.naks),
            r.retransmitted,
            r.requester_timeouts,
            r.sent_ratio,
            format!("{}/{}", r.path_losses, r.reorder_timeouts),
            det,
            r.skew_us.map_or("-".to_string(), |us| format!("{us:.0} us")),
            format!("{:.0} us", r.path_skew_us),
            r.peak_held_bytes as f64 / 1e3,
            100.0 * r.completed as f64 / r.posted.max(1) as f64,
            r.path_out_ms
                .map_or("-".to_string(), |ms| format!("{ms:.2}")),
            r.healthy_outs,
            r.switch_drops,
            r.pool_give_ups
        );
    }
    s
}

/// Short name of a receiver model.
pub fn receiver_name(r: ReceiverMode) -> &'static str {
    match r {
        ReceiverMode::Gbn => "gbn",
        ReceiverMode::Sr => "sr",
        ReceiverMode::Ideal => "ideal",
    }
}

/// Colour of a fabric mode in the plot: ecmp red, spray orange, spray+reorder green.
fn color(m: Mode) -> &'static str {
    match m {
        Mode::Ecmp => "#d62728",
        Mode::Spray => "#ff7f0e",
        Mode::SprayReorder => "#2ca02c",
        Mode::SprayNakFilter => "#1f77b4",
    }
}

/// Dash pattern of a row's line: selective repeat dashed, a lossy scenario dotted.
fn dash(r: &Outcome) -> &'static str {
    let lossy = r.path_loss.iter().any(|l| *l > 0.0);
    match (r.receiver == ReceiverMode::Sr, lossy) {
        (false, false) => "",
        (true, false) => " stroke-dasharray=\"6,3\"",
        (false, true) => " stroke-dasharray=\"2,2\"",
        (true, true) => " stroke-dasharray=\"6,2,2,2\"",
    }
}

/// An SVG: goodput bars (left) and message completion-time CDFs (right, log time axis), each
/// row named in the bars' labels and in a legend under the CDF panel.
pub fn svg(rows: &[Outcome]) -> String {
    let bar_h = 22.0;
    let bars_h = 40.0 + rows.len() as f64 * bar_h;
    let (x0, y0, pw, ph) = (640.0, 40.0, 440.0, 300.0);
    let legend_y = y0 + ph + 50.0;
    let legend_h = 16.0 + rows.len() as f64 * 15.0;
    let w = 1120.0;
    let h = bars_h.max(legend_y + legend_h) + 20.0;
    let mut s = crate::svg::begin(w, h);
    // Left: goodput bars.
    let _ = writeln!(
        s,
        "<text x=\"20\" y=\"20\" font-size=\"14\">Goodput (Mbit/s)</text>"
    );
    let max = rows.iter().map(|r| r.goodput_bps).fold(1.0, f64::max);
    for (i, r) in rows.iter().enumerate() {
        let y = 35.0 + i as f64 * bar_h;
        let len = 250.0 * r.goodput_bps / max;
        let _ = writeln!(
            s,
            "<text x=\"20\" y=\"{}\">{} {} {}</text><rect x=\"320\" y=\"{}\" width=\"{len:.1}\" height=\"16\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{:.0}</text>",
            y + 12.0,
            scenario(r),
            r.mode.name(),
            receiver_name(r.receiver),
            y,
            color(r.mode),
            325.0 + len,
            y + 12.0,
            r.goodput_bps / 1e6
        );
    }
    // Right: completion-time CDFs (log x), with axes.
    let _ = writeln!(
        s,
        "<text x=\"{x0}\" y=\"20\" font-size=\"14\">Message completion time CDF</text>"
    );
    let _ = writeln!(s, "<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"black\"/>");
    let all: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.completion_ns.iter().map(|v| (*v).max(1) as f64))
        .collect();
    let lo = all
        .iter()
        .copied()
        .fold(f64::MAX, f64::min)
        .max(1e3)
        .log10()
        .floor();
    let hi = all
        .iter()
        .copied()
        .fold(1.0, f64::max)
        .log10()
        .ceil()
        .max(lo + 1.0);
    for decade in (lo as i32)..=(hi as i32) {
        let x = x0 + pw * (f64::from(decade) - lo) / (hi - lo);
        let _ = writeln!(s, "<line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", y0 + ph, y0 + ph + 14.0, 10f64.powi(decade) / 1e6);
    }
    for k in 0..=4 {
        let f = f64::from(k) / 4.0;
        let y = y0 + ph - ph * f;
        let _ = writeln!(s, "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{f}</text>", x0 + pw, x0 - 4.0, y + 4.0);
    }
    crate::svg::axis_titles(
        &mut s,
        (x0, y0, pw, ph),
        "completion time (ms, log scale)",
        30.0,
        "fraction of messages",
        30.0,
    );
    for r in rows {
        if r.completion_ns.is_empty() {
            continue;
        }
        let n = r.completion_ns.len() as f64;
        let step = (r.completion_ns.len() / 200).max(1);
        let pts: Vec<String> = r
            .completion_ns
            .iter()
            .enumerate()
            .step_by(step)
            .map(|(k, v)| {
                let x = x0 + pw * (((*v).max(1) as f64).log10() - lo) / (hi - lo);
                let y = y0 + ph - ph * (k as f64 + 1.0) / n;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>",
            color(r.mode),
            dash(r),
            pts.join(" ")
        );
    }
    // Legend under the CDF panel: one line per row, its stroke as drawn.
    let _ = writeln!(s, "<text x=\"{x0}\" y=\"{legend_y}\" font-size=\"12\">Legend (colour: fabric; dashed: selective repeat; dotted: lossy fabric)</text>");
    for (i, r) in rows.iter().enumerate() {
        let y = legend_y + 16.0 + i as f64 * 15.0;
        let label = format!(
            "{} {} {}",
            scenario(r),
            r.mode.name(),
            receiver_name(r.receiver)
        );
        crate::svg::legend_entry(&mut s, (x0, y), color(r.mode), dash(r), &label);
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_in_virtual_time_is_the_same_every_run() {
        let opts = DemoOpts {
            virtual_step_ns: Some(500),
            ..DemoOpts::default()
        };
        let w = &workloads(0.05)[0];
        for mode in [Mode::Ecmp, Mode::SprayReorder] {
            let a = run(&opts, w, mode, ReceiverMode::Gbn).unwrap();
            let b = run(&opts, w, mode, ReceiverMode::Gbn).unwrap();
            assert_eq!(a.completed, a.posted);
            assert_eq!(a.completion_ns, b.completion_ns, "{mode:?}");
            assert_eq!(a.seconds, b.seconds, "{mode:?}");
            assert_eq!((a.naks, a.retransmitted), (0, 0), "{mode:?}");
        }
    }

    #[test]
    fn the_cm_handshake_completes_over_a_fabric_that_loses_cm_messages() {
        // A third of every path's packets lost: of the 8 REQs and 8 REPs some are lost on
        // every seed tried here, and each is sent again until its REP comes.
        let opts = DemoOpts {
            virtual_step_ns: Some(500),
            path_loss: vec![0.3; 4],
            deadline_s: 0.05,
            ..DemoOpts::default()
        };
        let w = &workloads(0.02)[1];
        for seed in 1..=3 {
            let o = run(
                &DemoOpts {
                    seed,
                    ..opts.clone()
                },
                w,
                Mode::Spray,
                ReceiverMode::Gbn,
            );
            assert!(o.is_ok(), "seed {seed}: {o:?}");
        }
    }
}
