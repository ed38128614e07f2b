//! The traffic generator over any port (`rocegen` runs it on a real interface): RC requesters
//! with many QPs and responders that behave like real RNICs, from [`sprayswitch_models::rnic`].
//!
//! The two sides meet as RDMA CM applications do: the requester sends a CM REQ per QP (its QPN
//! and starting PSN) to QP1 of the peer, the responder answers with a REP carrying its own QPN,
//! then WRITEs, READs or SENDs flow. Both sides find their gateway's MAC with ARP. This module
//! decides nothing about the network: it is a host.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::wire::classify::L4Summary;
use sprayswitch::wire::cm::{self, CmMessage};
use sprayswitch::wire::control::arp_request;
use sprayswitch::wire::{classify, Pmtu, Psn};

use sprayswitch_models::dcqcn::DcqcnConfig;
use sprayswitch_models::rnic::{Endpoint, ReceiverMode, Requester, Responder, Retransmit, Work};

/// This host on its interface.
#[derive(Debug, Clone, Copy)]
pub struct Local {
    /// The interface's MAC.
    pub mac: [u8; 6],
    /// This host's IPv4 address.
    pub ip: Ipv4Addr,
    /// The default gateway (the ToR).
    pub gateway: Ipv4Addr,
}

/// Which operation the requester posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND.
    Send,
}

/// What the requester does.
#[derive(Debug, Clone)]
pub struct GenOpts {
    /// Queue pairs.
    pub qps: u32,
    /// Operation.
    pub op: Op,
    /// Message size, bytes.
    pub size: u32,
    /// Messages per QP.
    pub messages: u32,
    /// Packets in flight per QP (closed loop).
    pub window: u32,
    /// Open-loop rate per QP, bits/s (`None`: as fast as the window allows).
    pub rate_bps: Option<u64>,
    /// Path MTU.
    pub pmtu: Pmtu,
    /// Retransmit only NAKed packets (against a selective-repeat responder).
    pub selective: bool,
    /// Retransmission timeout.
    pub timeout: Duration,
    /// Give up after this long.
    pub deadline: Duration,
    /// First UDP source port (QP i uses base + i).
    pub sport_base: u16,
    /// DCQCN on every QP (`None`: none; `rate_bps` still bounds the rate).
    pub dcqcn: Option<DcqcnConfig>,
}

/// How the responder behaves.
#[derive(Debug, Clone)]
pub struct ResponderOpts {
    /// RNIC behaviour towards packets beyond the expected PSN.
    pub mode: ReceiverMode,
    /// One ACK per this many requests (and at message ends).
    pub ack_every: u32,
    /// Path MTU.
    pub pmtu: Pmtu,
    /// Exit once a QP connected and nothing arrived for this long.
    pub idle_exit: Duration,
    /// DCQCN's notification point: a CNP for a CE-marked request at most once per this many
    /// ns per QP (`None`: no CNPs).
    pub cnp_interval_ns: Option<u64>,
}

/// The requester's report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GenReport {
    /// Messages posted.
    pub posted: u64,
    /// Messages completed.
    pub completed: u64,
    /// Seconds from the first packet to the last completion (or the deadline).
    pub seconds: f64,
    /// Payload bits per second completed.
    pub goodput_bps: f64,
    /// Message completion time percentiles, microseconds: p50, p90, p99, p99.9, max.
    pub completion_us: [f64; 5],
    /// NAKs received.
    pub naks: u64,
    /// Packets retransmitted.
    pub retransmitted: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Packets sent / packets the messages needed.
    pub sent_ratio: f64,
    /// CNPs received.
    pub cnps: u64,
    /// DCQCN rate cuts.
    pub rate_cuts: u64,
    /// The lowest rate a QP sent at when the run ended, bits/s (`None`: no DCQCN, no rate).
    pub min_rate_bps: Option<u64>,
}

/// The responder's report.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct ResponderReport {
    /// QPs connected.
    pub qps: u64,
    /// Requests accepted in order.
    pub accepted: u64,
    /// Requests that arrived out of sequence (PSN ahead of the expected one).
    pub out_of_sequence: u64,
    /// Duplicates (PSN behind).
    pub duplicates: u64,
    /// NAKs sent.
    pub naks: u64,
    /// Requests that arrived marked CE.
    pub ce_marked: u64,
    /// CNPs sent.
    pub cnps_sent: u64,
}

fn send(port: &mut dyn Port, pkt: Pkt) -> anyhow::Result<()> {
    let mut v = vec![pkt];
    let t = Instant::now();
    while !v.is_empty() {
        if t.elapsed() > Duration::from_secs(1) {
            bail!("port {} does not take frames", port.name());
        }
        port.tx_burst(0, &mut v);
        port.poll(0);
    }
    Ok(())
}

/// Finds `target`'s MAC with ARP (requests every 200 ms, up to `timeout`).
///
/// # Errors
/// When nobody answers.
pub fn resolve(
    port: &mut dyn Port,
    local: &Local,
    target: Ipv4Addr,
    timeout: Duration,
) -> anyhow::Result<[u8; 6]> {
    let t0 = Instant::now();
    let mut next = t0;
    let mut rx = Vec::with_capacity(64);
    while t0.elapsed() < timeout {
        if Instant::now() >= next {
            let mut p = Pkt::with_capacity(64);
            let n = arp_request(p.resize(64), local.mac, local.ip, target);
            p.resize(n);
            send(port, p)?;
            next = Instant::now() + Duration::from_millis(200);
        }
        port.rx_burst(0, &mut rx, 64);
        for p in rx.drain(..) {
            let f = p.data();
            // An ARP reply (op 2) from `target`.
            if f.len() >= 42
                && f[12..14] == [8, 6]
                && f[20..22] == [0, 2]
                && f[28..32] == target.octets()
            {
                let mut m = [0u8; 6];
                m.copy_from_slice(&f[22..28]);
                return Ok(m);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    bail!("no ARP reply from {target} within {timeout:?}")
}

fn dest_qp(f: &[u8]) -> Option<u32> {
    // IPv4, no VLAN: the BTH starts at 42; DestQP is its bytes 5..8.
    (f.len() >= 54 && f[12..14] == [8, 0] && f[23] == 17 && f[36..38] == 4791u16.to_be_bytes())
        .then(|| u32::from_be_bytes([0, f[47], f[48], f[49]]))
}

fn percentiles(mut v: Vec<u64>) -> [f64; 5] {
    v.sort_unstable();
    [0.5, 0.9, 0.99, 0.999, 1.0].map(|q| crate::percentile::quantile_us(&v, q))
}

/// Connects `o.qps` QPs to `peer` and runs the workload to completion or the deadline.
///
/// # Errors
/// When the gateway does not answer ARP or the responder does not answer the CM REQs.
pub fn run_requester(
    port: &mut dyn Port,
    local: &Local,
    peer: Ipv4Addr,
    o: &GenOpts,
) -> anyhow::Result<GenReport> {
    let gw_mac = resolve(port, local, local.gateway, Duration::from_secs(5))
        .with_context(|| format!("resolving the gateway {}", local.gateway))?;
    struct Qp {
        qpn: u32,
        comm: u32,
        start: Psn,
        sport: u16,
        req: Option<Requester>,
    }
    let mut qps: Vec<Qp> = (0..o.qps)
        .map(|i| Qp {
            qpn: 0x100 + i,
            comm: 0x5000 + i,
            start: Psn::new(0x1000 * (i + 1) + 7),
            sport: o.sport_base.wrapping_add(i as u16),
            req: None,
        })
        .collect();
    let ep = |q: &Qp, peer_qpn: u32| Endpoint {
        mac: local.mac,
        gw_mac,
        ip: IpAddr::V4(local.ip),
        peer_ip: IpAddr::V4(peer),
        peer_qpn,
        sport: q.sport,
    };
    // RDMA CM: a REQ per QP until its REP arrives.
    let t0 = Instant::now();
    let mut next = t0;
    let mut rx = Vec::with_capacity(256);
    while qps.iter().any(|q| q.req.is_none()) {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("no CM REP from {peer} for some QPs within 10 s: is a responder running?");
        }
        if Instant::now() >= next {
            for q in qps.iter().filter(|q| q.req.is_none()) {
                let req = CmMessage::Req {
                    local_comm_id: q.comm,
                    qpn: q.qpn,
                    starting_psn: q.start,
                };
                send(port, ep(q, 1).cm_frame(&req))?;
            }
            next = Instant::now() + Duration::from_millis(200);
        }
        port.rx_burst(0, &mut rx, 256);
        for p in rx.drain(..) {
            let Ok(c) = classify(p.data(), o.pmtu) else {
                continue;
            };
            let Some(r) = c.roce() else { continue };
            let mad = r.payload(p.data());
            if let Ok(CmMessage::Rep {
                remote_comm_id,
                qpn,
                ..
            }) = cm::parse(mad)
            {
                if let Some(i) = qps
                    .iter()
                    .position(|q| q.comm == remote_comm_id && q.req.is_none())
                {
                    let mut req = Requester::new(
                        ep(&qps[i], qpn),
                        qps[i].start,
                        o.pmtu,
                        o.window,
                        o.timeout.as_nanos() as u64,
                    );
                    if o.selective {
                        req.set_retransmit(Retransmit::Selective);
                    }
                    req.set_rate(o.rate_bps);
                    req.set_dcqcn(o.dcqcn);
                    for _ in 0..o.messages {
                        req.post(match o.op {
                            Op::Write => Work::Write(o.size),
                            Op::Read => Work::Read(o.size),
                            Op::Send => Work::Send(o.size),
                        });
                    }
                    qps[i].req = Some(req);
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut reqs: Vec<(u32, Requester)> = qps
        .into_iter()
        .filter_map(|q| q.req.map(|r| (q.qpn, r)))
        .collect();
    let t0 = Instant::now();
    let mut finished = None;
    while t0.elapsed() < o.deadline {
        let now = t0.elapsed().as_nanos() as u64 + 1;
        for (_, r) in reqs.iter_mut() {
            r.poll(now, port);
        }
        port.poll(now);
        let n = port.rx_burst(now, &mut rx, 256);
        for p in rx.drain(..) {
            if let Some(qpn) = dest_qp(p.data()) {
                if let Some((_, r)) = reqs.iter_mut().find(|(q, _)| *q == qpn) {
                    r.handle(p.data(), now);
                }
            }
        }
        if reqs.iter().all(|(_, r)| r.done()) {
            finished = Some(t0.elapsed());
            break;
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let seconds = finished.unwrap_or_else(|| t0.elapsed()).as_secs_f64();
    let bytes: u64 = reqs.iter().map(|(_, r)| r.bytes_done).sum();
    let sent: u64 = reqs.iter().map(|(_, r)| r.stats.packets_sent).sum();
    let needed: u64 = reqs.iter().map(|(_, r)| r.stats.packets_needed).sum();
    Ok(GenReport {
        posted: u64::from(o.qps) * u64::from(o.messages),
        completed: reqs.iter().map(|(_, r)| r.stats.completed).sum(),
        seconds,
        goodput_bps: bytes as f64 * 8.0 / seconds.max(1e-9),
        completion_us: percentiles(
            reqs.iter()
                .flat_map(|(_, r)| r.completion_ns.iter().copied())
                .collect(),
        ),
        naks: reqs.iter().map(|(_, r)| r.stats.naks).sum(),
        retransmitted: reqs.iter().map(|(_, r)| r.stats.retransmitted).sum(),
        timeouts: reqs.iter().map(|(_, r)| r.stats.timeouts).sum(),
        sent_ratio: sent as f64 / needed.max(1) as f64,
        cnps: reqs.iter().map(|(_, r)| r.stats.cnps).sum(),
        rate_cuts: reqs
            .iter()
            .filter_map(|(_, r)| r.dcqcn().map(|d| d.stats.cuts))
            .sum(),
        min_rate_bps: reqs.iter().filter_map(|(_, r)| r.send_rate()).min(),
    })
}

/// Answers CM REQs and serves every QP that connects, as an RNIC in `o.mode`, until `stop` is
/// set or, once a QP connected, nothing arrived for `o.idle_exit`.
///
/// # Errors
/// When the gateway does not answer ARP.
pub fn run_responder(
    port: &mut dyn Port,
    local: &Local,
    o: &ResponderOpts,
    stop: &AtomicBool,
) -> anyhow::Result<ResponderReport> {
    let (mode, ack_every, pmtu, idle_exit) = (o.mode, o.ack_every, o.pmtu, o.idle_exit);
    let gw_mac = resolve(port, local, local.gateway, Duration::from_secs(5))
        .with_context(|| format!("resolving the gateway {}", local.gateway))?;
    // (requester comm id, requester address) -> index; QPN 0x800 + index.
    let mut peers: Vec<(u32, IpAddr)> = Vec::new();
    let mut resps: Vec<Responder> = Vec::new();
    let mut rx = Vec::with_capacity(256);
    let t0 = Instant::now();
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if !resps.is_empty() && last.elapsed() > idle_exit {
            break;
        }
        let now = t0.elapsed().as_nanos() as u64 + 1;
        port.poll(now);
        let n = port.rx_burst(now, &mut rx, 256);
        if n > 0 {
            last = Instant::now();
        }
        for p in rx.drain(..) {
            let Some(qpn) = dest_qp(p.data()) else {
                continue;
            };
            if qpn == 1 {
                let Ok(c) = classify(p.data(), pmtu) else {
                    continue;
                };
                let Some(r) = c.roce() else { continue };
                let L4Summary::Udp { src_port, .. } = r.ip.l4 else {
                    continue;
                };
                let mad = r.payload(p.data());
                let Ok(CmMessage::Req {
                    local_comm_id,
                    qpn: peer_qpn,
                    starting_psn,
                }) = cm::parse(mad)
                else {
                    continue;
                };
                let i = match peers
                    .iter()
                    .position(|&(c, a)| c == local_comm_id && a == r.ip.src)
                {
                    Some(i) => i,
                    None => {
                        peers.push((local_comm_id, r.ip.src));
                        let ep = Endpoint {
                            mac: local.mac,
                            gw_mac,
                            ip: IpAddr::V4(local.ip),
                            peer_ip: r.ip.src,
                            peer_qpn,
                            sport: src_port,
                        };
                        let mut resp = Responder::new(ep, starting_psn, pmtu, ack_every);
                        resp.set_mode(mode);
                        resp.set_cnp_interval(o.cnp_interval_ns);
                        resps.push(resp);
                        peers.len() - 1
                    }
                };
                let ep = Endpoint {
                    mac: local.mac,
                    gw_mac,
                    ip: IpAddr::V4(local.ip),
                    peer_ip: r.ip.src,
                    peer_qpn: 1,
                    sport: src_port,
                };
                let rep = CmMessage::Rep {
                    local_comm_id: 0x9000 + i as u32,
                    remote_comm_id: local_comm_id,
                    qpn: 0x800 + i as u32,
                    starting_psn,
                };
                send(port, ep.cm_frame(&rep))?;
            } else if let Some(resp) = qpn
                .checked_sub(0x800)
                .and_then(|i| resps.get_mut(i as usize))
            {
                resp.handle(p.data(), now, port);
            }
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let mut r = ResponderReport {
        qps: resps.len() as u64,
        ..ResponderReport::default()
    };
    for x in &resps {
        r.accepted += x.stats.accepted;
        r.out_of_sequence += x.stats.out_of_sequence;
        r.duplicates += x.stats.duplicates;
        r.naks += x.stats.naks;
        r.ce_marked += x.stats.ce_marked;
        r.cnps_sent += x.stats.cnps_sent;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::port::mem;

    /// Moves frames `from` -> `to`, answering ARP requests back on `from` as the gateway.
    /// `mark`: mark ECN-capable frames CE on the way, as a congested switch would.
    fn pass(from: &mut mem::MemPort, to: &mut mem::MemPort, gw_mac: [u8; 6], mark: bool) {
        let mut rx = Vec::new();
        from.rx_burst(0, &mut rx, 64);
        let mut out = Vec::new();
        let mut back = Vec::new();
        for mut p in rx.drain(..) {
            let f = p.data_mut();
            if f[12..14] == [8, 6] {
                let mut smac = [0u8; 6];
                smac.copy_from_slice(&f[22..28]);
                let mut sip = [0u8; 4];
                sip.copy_from_slice(&f[28..32]);
                let mut tip = [0u8; 4];
                tip.copy_from_slice(&f[38..42]);
                f[0..6].copy_from_slice(&smac);
                f[6..12].copy_from_slice(&gw_mac);
                f[20..22].copy_from_slice(&[0, 2]);
                f[22..28].copy_from_slice(&gw_mac);
                f[28..32].copy_from_slice(&tip);
                f[32..38].copy_from_slice(&smac);
                f[38..42].copy_from_slice(&sip);
                back.push(p);
            } else {
                if mark {
                    sprayswitch::wire::ecn::mark_ce(f);
                }
                out.push(p);
            }
        }
        while !out.is_empty() {
            to.tx_burst(0, &mut out);
        }
        while !back.is_empty() {
            from.tx_burst(0, &mut back);
        }
    }

    /// A gateway between two hosts' links.
    fn gateway(
        a: &mut mem::MemPort,
        b: &mut mem::MemPort,
        gw_mac: [u8; 6],
        stop: &AtomicBool,
        mark: bool,
    ) {
        while !stop.load(Ordering::Relaxed) {
            pass(a, b, gw_mac, mark);
            pass(b, a, gw_mac, false);
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// 3 QPs of 20 WRITEs of 8 KiB through a gateway that marks every request CE when `mark`.
    fn connect_and_run(dcqcn: Option<DcqcnConfig>, mark: bool) -> (GenReport, ResponderReport) {
        let (mut ha, mut ga) = mem::link("ha", "ga", 4096);
        let (mut hb, mut gb) = mem::link("hb", "gb", 4096);
        let stop = AtomicBool::new(false);
        let gw = [2, 0, 0, 0, 0, 0xfe];
        let la = Local {
            mac: [2, 0, 0, 0, 0, 1],
            ip: Ipv4Addr::new(10, 0, 0, 1),
            gateway: Ipv4Addr::new(10, 0, 0, 254),
        };
        let lb = Local {
            mac: [2, 0, 0, 0, 0, 2],
            ip: Ipv4Addr::new(10, 0, 1, 1),
            gateway: Ipv4Addr::new(10, 0, 1, 254),
        };
        let o = GenOpts {
            qps: 3,
            op: Op::Write,
            size: 8192,
            messages: 20,
            window: 16,
            rate_bps: None,
            pmtu: Pmtu::DEFAULT,
            selective: false,
            timeout: Duration::from_millis(67),
            deadline: Duration::from_secs(20),
            sport_base: 50000,
            dcqcn,
        };
        std::thread::scope(|s| {
            s.spawn(|| gateway(&mut ga, &mut gb, gw, &stop, mark));
            let resp = s.spawn(|| {
                let ro = ResponderOpts {
                    mode: ReceiverMode::Gbn,
                    ack_every: 8,
                    pmtu: Pmtu::DEFAULT,
                    idle_exit: Duration::from_millis(500),
                    cnp_interval_ns: Some(50_000),
                };
                run_responder(&mut hb, &lb, &ro, &stop)
            });
            let rep = run_requester(&mut ha, &la, lb.ip, &o).unwrap();
            let resp = resp.join().unwrap().unwrap();
            stop.store(true, Ordering::Relaxed);
            (rep, resp)
        })
    }

    #[test]
    fn requester_and_responder_connect_and_finish() {
        let (rep, resp) = connect_and_run(None, false);
        assert_eq!(rep.completed, 60);
        assert_eq!(rep.posted, 60);
        assert_eq!(rep.naks, 0);
        assert!((rep.sent_ratio - 1.0).abs() < 1e-9, "{}", rep.sent_ratio);
        assert_eq!(resp.qps, 3);
        assert_eq!(resp.accepted, 60 * 8);
        assert_eq!(resp.out_of_sequence, 0);
    }

    #[test]
    fn marked_requests_come_back_as_cnps_that_slow_dcqcn_requesters_down() {
        let line = 10_000_000_000;
        let (rep, resp) = connect_and_run(Some(DcqcnConfig::conweave(line)), true);
        assert_eq!(rep.completed, 60, "everything completes at the lower rate");
        assert_eq!(resp.ce_marked, 60 * 8);
        assert!(resp.cnps_sent >= 3, "{resp:?}");
        assert_eq!(rep.cnps, resp.cnps_sent);
        assert!(rep.rate_cuts > 0, "{rep:?}");
        assert!(rep.min_rate_bps.is_some_and(|r| r < line), "{rep:?}");
    }
}
