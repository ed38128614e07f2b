//! Incast on a rack pair in virtual time: `senders` hosts of rack A each write to the one host of
//! rack B, at 100 Gbit/s-class rates that no real-time run on a small machine reaches. The ToRs
//! are the real switches of a [`DrivenRackPair`] (spray and reorder, their egress queues with
//! their rates and ECN marking); the hosts run the RNIC models of [`sprayswitch_models::rnic`]: each
//! sender one RC QP writing back to back with DCQCN's reaction point, the receiver a Go-Back-N
//! responder per QP with DCQCN's notification point. Optionally the receiving host pauses its
//! ToR port with 802.3x PAUSE frames for part of the run (a host whose PCIe path backs up).
//!
//! What it reports is what the congestion work has to show: goodput at the receiver, the depth
//! of the receiver's ToR port (p50, p99, max, in bytes, with what the reorder stage holds for
//! it), CE marks, CNPs, drops anywhere, retransmissions, and the time the host kept its port
//! paused. Goodput and depths are measured after a warm-up (the first 2 ms: every sender starts
//! at line rate at once, DCQCN cuts them all to its minimum rate and takes that long to settle).

use std::net::IpAddr;

use sprayswitch::egress::EcnProfile;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::reorder::ReorderConfig;
use sprayswitch::rng::Rng;
use sprayswitch::tables::SprayPolicy;
use sprayswitch::wire::{classify, PauseFrame, Pmtu, Psn};

use crate::rack::topo::{DrivenRackPair, PathSpec, RackPairSpec};
use sprayswitch_models::dcqcn::DcqcnConfig;
use sprayswitch_models::rnic::{Endpoint, Requester, Responder, Work};

/// One incast run.
#[derive(Debug, Clone, PartialEq)]
pub struct IncastOpts {
    /// Name in the table.
    pub name: String,
    /// Senders in rack A (each one QP to the one receiver in rack B).
    pub senders: usize,
    /// Rate of every host port and every fabric path.
    pub port_rate_bps: u64,
    /// Fabric paths.
    pub paths: usize,
    /// One-way delay of each path.
    pub path_delay_ns: u64,
    /// Virtual time the run lasts.
    pub duration_ns: u64,
    /// Goodput is measured from here to the end (the start is the senders' first burst).
    pub warmup_ns: u64,
    /// Virtual time between two steps of the switches and hosts.
    pub step_ns: u64,
    /// Bytes per RDMA WRITE (RoCE path MTU 1024).
    pub message: u32,
    /// ECN marking on every ToR port (`None`: none).
    pub ecn: Option<EcnProfile>,
    /// DCQCN at the hosts (`None`: the senders send at line rate whatever happens).
    pub dcqcn: Option<DcqcnConfig>,
    /// Packets each ToR port's egress queue holds.
    pub tx_queue_limit: usize,
    /// The receiving host pauses its port now and then.
    pub pause: Option<PausePattern>,
    /// Seed.
    pub seed: u64,
}

impl IncastOpts {
    /// 8:1 incast at 100 Gbit/s over four paths of 1 us, 20 ms measured after the first 2,
    /// ConWeave's ECN thresholds and DCQCN profile.
    pub fn default_100g() -> IncastOpts {
        let rate = 100_000_000_000;
        IncastOpts {
            name: "ecn".into(),
            senders: 8,
            port_rate_bps: rate,
            paths: 4,
            path_delay_ns: 1_000,
            duration_ns: 20_000_000,
            warmup_ns: 2_000_000,
            step_ns: 100,
            message: 64 * 1024,
            ecn: Some(EcnProfile {
                kmin_bytes: 100_000,
                kmax_bytes: 400_000,
                pmax: 0.2,
            }),
            dcqcn: Some(DcqcnConfig::conweave(rate)),
            tx_queue_limit: 4096,
            pause: None,
            seed: 7,
        }
    }
}

/// When the receiving host pauses its ToR port: a PAUSE frame of `length_ns` every `every_ns`
/// from `from_ns` to `to_ns` (a host whose PCIe path or memory backs up now and then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PausePattern {
    /// First pause.
    pub from_ns: u64,
    /// No pause starts after this.
    pub to_ns: u64,
    /// Time between the starts of two pauses.
    pub every_ns: u64,
    /// How long each lasts.
    pub length_ns: u64,
}

/// What one run showed.
#[derive(Debug, Clone, PartialEq)]
pub struct IncastOutcome {
    /// The run's name.
    pub name: String,
    /// Payload delivered in order to the receiver after the warm-up, bit/s.
    pub goodput_bps: f64,
    /// The receiver's ToR port rate.
    pub port_rate_bps: u64,
    /// Depth of the receiver's ToR port that packets found (bytes): p50, p99, max.
    pub queue_p50: u64,
    /// p99 of the same.
    pub queue_p99: u64,
    /// Largest.
    pub queue_max: u64,
    /// Packets the receiver's ToR port marked CE.
    pub marked_host_port: u64,
    /// Packets every ToR port marked.
    pub marked_all: u64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// Packets dropped anywhere (by the ToRs, for any reason, and by the fabric).
    pub drops: u64,
    /// Packets the senders sent again.
    pub retransmitted: u64,
    /// NAKs the receiver sent.
    pub naks: u64,
    /// Time the receiving host kept its port paused (ns).
    pub paused_ns: u64,
    /// The round-trip bandwidth-delay product (bytes): the port rate times the unloaded RTT.
    pub bdp_bytes: u64,
}

/// The receiving host's index in rack B.
const RECEIVER: usize = 0;

/// Runs one incast.
///
/// # Errors
/// When the rack pair cannot be built.
pub fn run(o: &IncastOpts) -> anyhow::Result<IncastOutcome> {
    let spec = RackPairSpec {
        hosts: o.senders.max(1),
        paths: (0..o.paths)
            .map(|_| PathSpec {
                delay_ns: o.path_delay_ns,
                jitter_ns: 0,
                loss: 0.0,
                loss_schedule: Vec::new(),
                // The ToR's uplink holds the path to its rate; the link itself does not queue.
                rate_bps: None,
            })
            .collect(),
        policy: SprayPolicy::RoundRobin,
        reorder: Some(ReorderConfig {
            learn_ns: 5_000,
            ..ReorderConfig::default()
        }),
        link_capacity: 1 << 16,
        seed: o.seed,
        host_rate_bps: Some(o.port_rate_bps),
        uplink_rate_bps: Some(o.port_rate_bps),
        ecn: o.ecn,
        tx_queue_limit: Some(o.tx_queue_limit),
        flush_ns: Some(0),
        ..RackPairSpec::default()
    };
    let mut rp = DrivenRackPair::start(&spec)?;
    let pmtu = Pmtu::DEFAULT;
    let mut rng = Rng::new(o.seed);
    let rx_host = &rp.hosts_b[RECEIVER];
    let (rx_mac, rx_gw, rx_ip) = (rx_host.mac, rx_host.gw_mac, IpAddr::V4(rx_host.ip4));
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for i in 0..o.senders {
        let a = &rp.hosts_a[i];
        let sport = 0xC000 | (rng.below(0x3FFF) as u16);
        let (qpn_a, qpn_b) = (0x100 + i as u32, 0x800 + i as u32);
        let ea = Endpoint {
            mac: a.mac,
            gw_mac: a.gw_mac,
            ip: IpAddr::V4(a.ip4),
            peer_ip: rx_ip,
            peer_qpn: qpn_b,
            sport,
        };
        let eb = Endpoint {
            mac: rx_mac,
            gw_mac: rx_gw,
            ip: rx_ip,
            peer_ip: IpAddr::V4(a.ip4),
            peer_qpn: qpn_a,
            sport,
        };
        let start = Psn::new(rng.below(1 << 24) as u32);
        let mut req = Requester::new(ea, start, pmtu, 1 << 20, 4_000_000);
        req.set_dcqcn(o.dcqcn);
        let messages = (o.duration_ns as f64 * o.port_rate_bps as f64 / 8e9 / f64::from(o.message))
            .ceil() as usize
            + 16;
        for _ in 0..messages {
            req.post(Work::Write(o.message));
        }
        let mut resp = Responder::new(eb, start, pmtu, 16);
        resp.set_cnp_interval(o.dcqcn.map(|d| d.cnp_interval_ns));
        senders.push(req);
        receivers.push((qpn_b, resp));
    }
    let mut rx: Vec<Pkt> = Vec::with_capacity(256);
    let mut now = 0u64;
    let mut accepted_at_warmup = 0u64;
    let mut next_pause = o.pause.map_or(u64::MAX, |p| p.from_ns);
    while now < o.duration_ns {
        for (i, req) in senders.iter_mut().enumerate() {
            let port = &mut rp.hosts_a[i].port;
            req.poll(now, port);
            port.rx_burst(now, &mut rx, 256);
            for p in rx.drain(..) {
                req.handle(p.data(), now);
            }
        }
        rp.step(now);
        let port = &mut rp.hosts_b[RECEIVER].port;
        if let Some(p) = o.pause {
            if now >= next_pause && now < p.to_ns {
                // Quanta of 512 bit times at the port's rate.
                let bits = u128::from(p.length_ns) * u128::from(o.port_rate_bps) / 1_000_000_000;
                let quanta = (bits / 512).min(0xffff) as u16;
                let f = PauseFrame::Pause { quanta };
                let mut v = vec![Pkt::from_slice(&f.to_frame(rx_mac))];
                port.tx_burst(now, &mut v);
                next_pause += p.every_ns.max(1);
            }
        }
        port.rx_burst(now, &mut rx, 256);
        for p in rx.drain(..) {
            let qpn = classify(p.data(), pmtu)
                .ok()
                .and_then(|c| c.roce().map(|r| r.bth.dest_qp));
            if let Some((_, resp)) = receivers.iter_mut().find(|(q, _)| Some(*q) == qpn) {
                resp.handle(p.data(), now, port);
            }
        }
        if now < o.warmup_ns {
            accepted_at_warmup = receivers.iter().map(|(_, r)| r.stats.accepted).sum();
            if now + o.step_ns.max(1) >= o.warmup_ns {
                // Depths, as goodput, from the end of the warm-up.
                for w in &mut rp.workers[1] {
                    w.reset_queue_depths();
                }
            }
        }
        now += o.step_ns.max(1);
    }
    let accepted: u64 = receivers.iter().map(|(_, r)| r.stats.accepted).sum();
    let bytes = (accepted - accepted_at_warmup) * u64::from(pmtu.bytes());
    let goodput_bps = bytes as f64 * 8e9 / (o.duration_ns - o.warmup_ns.min(o.duration_ns)) as f64;
    let hist = rp.workers[1]
        .first()
        .and_then(|w| w.queue_depth_histogram(RECEIVER as u16));
    let q = |f: f64| hist.as_ref().map_or(0, |h| h.value_at_quantile(f));
    let fabric_drops: u64 = rp
        .path_stats
        .iter()
        .map(|(a, b)| {
            a.dropped.load(std::sync::atomic::Ordering::Relaxed)
                + b.dropped.load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    let (sa, sb) = rp.stop();
    let host_port = sb.stats.ports.get(RECEIVER).cloned().unwrap_or_default();
    let marked_all: u64 = sa
        .stats
        .ports
        .iter()
        .chain(&sb.stats.ports)
        .map(|p| p.ecn_marked)
        .sum();
    // Unloaded RTT: a data packet and its ACK each cross a path and are serialised at the host
    // ports; the steps add one step per hop.
    let frame_ns = (1100.0 * 8e9 / o.port_rate_bps as f64) as u64;
    let rtt_ns = 2 * o.path_delay_ns + 4 * frame_ns + 8 * o.step_ns;
    Ok(IncastOutcome {
        name: o.name.clone(),
        goodput_bps,
        port_rate_bps: o.port_rate_bps,
        queue_p50: q(0.5),
        queue_p99: q(0.99),
        queue_max: hist.as_ref().map_or(0, |h| h.max()),
        marked_host_port: host_port.ecn_marked,
        marked_all,
        cnps: receivers.iter().map(|(_, r)| r.stats.cnps_sent).sum(),
        drops: sa.stats.drops_total() + sb.stats.drops_total() + fabric_drops,
        retransmitted: senders.iter().map(|s| s.stats.retransmitted).sum(),
        naks: receivers.iter().map(|(_, r)| r.stats.naks).sum(),
        paused_ns: host_port.paused_ns,
        bdp_bytes: (rtt_ns as f64 * o.port_rate_bps as f64 / 8e9) as u64,
    })
}

/// The incast runs the demo shows: with ECN marking and DCQCN, without marking (DCQCN senders
/// that hear nothing), and with marking while the receiving host pauses its port for 20 us
/// every 200 us from 4 to 16 ms (it takes 90% of the port then).
pub fn scenarios() -> Vec<IncastOpts> {
    let base = IncastOpts::default_100g();
    vec![
        base.clone(),
        IncastOpts {
            name: "no ecn".into(),
            ecn: None,
            ..base.clone()
        },
        IncastOpts {
            name: "ecn, host pauses 10%".into(),
            pause: Some(PausePattern {
                from_ns: 4_000_000,
                to_ns: 16_000_000,
                every_ns: 200_000,
                length_ns: 20_000,
            }),
            ..base
        },
    ]
}

/// The incast table.
pub fn table(rows: &[IncastOutcome]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<26} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7} {:>8} {:>9}",
        "incast 8:1 (100G)",
        "goodput",
        "of port",
        "q p50 KB",
        "q p99 KB",
        "q max KB",
        "marks",
        "cnps",
        "drops",
        "retrans",
        "paused ms"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<26} {:>7.1}G {:>6.1}% {:>9.1} {:>9.1} {:>9.1} {:>8} {:>7} {:>7} {:>8} {:>9.2}",
            r.name,
            r.goodput_bps / 1e9,
            100.0 * r.goodput_bps / r.port_rate_bps as f64,
            r.queue_p50 as f64 / 1000.0,
            r.queue_p99 as f64 / 1000.0,
            r.queue_max as f64 / 1000.0,
            r.marked_all,
            r.cnps,
            r.drops,
            r.retransmitted,
            r.paused_ns as f64 / 1e6
        );
    }
    s
}
