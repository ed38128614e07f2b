//! The engine end to end over an in-process rack pair: hosts that behave like Linux (ARP, ND,
//! ping, TCP, with nothing but a default route via the ToR), spraying that neither loses nor
//! duplicates (and with the reorder stage keeps each QP in PSN order), uplinks going down, and
//! drops counted by reason.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use sprayswitch::engine::DropReason;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::switch::Switch;
use sprayswitch::tables::SprayPolicy;
use sprayswitch::wire::{classify, FrameClass, L4Summary, Pmtu};
use sprayswitch_harness::rack::topo::{Host, PathSpec, RackPair, RackPairSpec};
use sprayswitch_tests::frames::*;
use sprayswitch_tests::wait_for;

fn send(h: &mut Host, p: Pkt) {
    let mut v = vec![p];
    while !v.is_empty() {
        h.port.tx_burst(0, &mut v);
    }
}

/// Receives frames at `h` until `pred` accepts one (others are returned too), or times out.
fn recv_until(h: &mut Host, secs: f64, mut pred: impl FnMut(&[u8]) -> bool) -> Option<Vec<u8>> {
    wait_for(secs, || {
        let mut got = Vec::new();
        h.port.rx_burst(0, &mut got, 64);
        got.into_iter().map(|p| p.data().to_vec()).find(|f| pred(f))
    })
}

fn recv_n(h: &mut Host, n: usize, secs: f64) -> Vec<Pkt> {
    let mut got = Vec::with_capacity(n);
    wait_for(secs, || {
        h.port.rx_burst(0, &mut got, 256);
        (got.len() >= n).then_some(())
    });
    got
}

fn icmp_type(f: &[u8]) -> Option<(IpAddr, IpAddr, u8, u8)> {
    let c = classify(f, Pmtu::DEFAULT).ok()?;
    let ip = c.ip()?;
    match ip.l4 {
        L4Summary::Icmpv4 { icmp_type, .. } | L4Summary::Icmpv6 { icmp_type, .. } => {
            Some((ip.src, ip.dst, icmp_type, ip.hop_limit))
        }
        _ => None,
    }
}

#[test]
fn linux_hosts_resolve_ping_and_connect_through_two_tors() {
    let spec = RackPairSpec {
        static_neighbors: false,
        ..RackPairSpec::default()
    };
    let mut rp = RackPair::start(&spec).unwrap();
    let (a1, b1) = (&mut rp.hosts_a[0], &mut rp.hosts_b[0]);

    // ARP for the default gateway.
    send(a1, arp_who_has(a1, a1.gw4));
    let reply = recv_until(a1, 5.0, |f| f[12..14] == [0x08, 0x06]).expect("ARP reply");
    let FrameClass::Arp(arp) = classify(&reply, Pmtu::DEFAULT).unwrap().class else {
        panic!()
    };
    assert_eq!(
        (arp.operation, arp.sender_ip, arp.sender_mac),
        (2, a1.gw4, a1.gw_mac)
    );
    assert_eq!(arp.target_mac, a1.mac);

    // Ping the gateway, IPv4 and IPv6 (after neighbour discovery).
    send(a1, ping4(a1, a1.gw4, 1));
    let r = recv_until(a1, 5.0, |f| icmp_type(f).is_some()).expect("echo reply");
    assert_eq!(
        icmp_type(&r).unwrap(),
        (IpAddr::V4(a1.gw4), IpAddr::V4(a1.ip4), 0, 64)
    );
    assert!(sprayswitch::wire::checksum::ipv4_checksum_ok(&r[14..34]));
    send(a1, ns(a1, a1.gw6));
    let advert = recv_until(a1, 5.0, |f| icmp_type(f).is_some_and(|t| t.2 == 136)).expect("NA");
    assert_eq!(
        sprayswitch::wire::control::nd_lladdr(&advert, 54, 86, 2),
        Some(a1.gw_mac)
    );
    send(a1, ping6(a1, a1.gw6, 1));
    let r = recv_until(a1, 5.0, |f| icmp_type(f).is_some_and(|t| t.2 == 129)).expect("echo6 reply");
    assert_eq!(icmp_type(&r).unwrap().0, IpAddr::V6(a1.gw6));

    // Ping the remote host: tor-b does not know it yet, so it holds the ping and asks for b1
    // (as a host's neighbour queue does); b1's answer releases the held ping itself.
    send(a1, ping4(a1, b1.ip4, 2));
    let who = recv_until(b1, 5.0, |f| f[12..14] == [0x08, 0x06]).expect("tor-b asks for b1");
    let FrameClass::Arp(q) = classify(&who, Pmtu::DEFAULT).unwrap().class else {
        panic!()
    };
    assert_eq!(
        (q.operation, q.sender_ip, q.target_ip, q.sender_mac),
        (1, b1.gw4, b1.ip4, b1.gw_mac)
    );
    assert_eq!(rp.tor_b.stats().parked, 1, "the first ping waits for b1");
    send(b1, arp_reply(b1, b1.gw_mac, b1.gw4));
    let req = recv_until(b1, 5.0, |f| icmp_type(f).is_some_and(|t| t.2 == 8))
        .expect("the held echo request reaches b1");
    assert_eq!(
        icmp_type(&req).unwrap(),
        (IpAddr::V4(a1.ip4), IpAddr::V4(b1.ip4), 8, 62),
        "two routed hops"
    );
    // ICMP echo sequence number (Ethernet 14 + IPv4 20 + type, code, checksum, id).
    assert_eq!(
        u16::from_be_bytes([req[40], req[41]]),
        2,
        "the held ping, not a later one"
    );
    assert_eq!((&req[0..6], &req[6..12]), (&b1.mac[..], &b1.gw_mac[..]));
    assert!(sprayswitch::wire::checksum::ipv4_checksum_ok(&req[14..34]));
    assert_eq!(rp.tor_b.stats().dropped(DropReason::Unresolved), 0);
    assert!(rp.tor_b.stats().resolve_sent >= 1);

    // b1 answers; tor-a learned a1 from its ARP for the gateway.
    send(b1, ping4(b1, a1.ip4, 1));
    let back = recv_until(a1, 5.0, |f| icmp_type(f).is_some_and(|t| t.2 == 8)).expect("reply path");
    assert_eq!(icmp_type(&back).unwrap().3, 62);

    // IPv6 to the remote host: tor-b solicits b1, b1 advertises, the retry gets through.
    send(a1, ping6(a1, b1.ip6, 1));
    let sol = recv_until(b1, 5.0, |f| icmp_type(f).is_some_and(|t| t.2 == 135)).expect("NS for b1");
    assert_eq!(
        sprayswitch::wire::control::nd_target(&sol, 54),
        Some(b1.ip6)
    );
    send(b1, na(b1, b1.gw_mac, b1.gw6));
    let mut got6 = None;
    for seq in 2..50 {
        send(a1, ping6(a1, b1.ip6, seq));
        got6 = recv_until(b1, 0.2, |f| icmp_type(f).is_some_and(|t| t.2 == 128));
        if got6.is_some() {
            break;
        }
    }
    assert_eq!(icmp_type(&got6.expect("echo6 reaches b1")).unwrap().3, 62);

    // A TCP connection's segments stay on one uplink even though RoCE is sprayed.
    let before: Vec<u64> = (0..4)
        .map(|u| data_tx(rp.tor_a.stats().port(&format!("u{u}")).unwrap()))
        .collect();
    for i in 0..200u32 {
        send(
            a1,
            tcp4(
                a1,
                b1.ip4,
                40000,
                5201,
                i * 1000,
                if i == 0 { 0x02 } else { 0x10 },
            ),
        );
    }
    let segs = recv_n(b1, 200, 10.0);
    let seqs: Vec<u32> = segs
        .iter()
        .filter(|p| p.data()[23] == 6)
        .map(|p| u32::from_be_bytes(p.data()[38..42].try_into().unwrap()))
        .collect();
    assert_eq!(
        seqs,
        (0..200).map(|i| i * 1000).collect::<Vec<_>>(),
        "in order, none lost"
    );
    let after: Vec<u64> = (0..4)
        .map(|u| data_tx(rp.tor_a.stats().port(&format!("u{u}")).unwrap()))
        .collect();
    let used: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        used.iter().filter(|d| **d > 0).count(),
        1,
        "one uplink for one TCP flow: {used:?}"
    );
    assert!(rp.tor_a.stats().hashed >= 200);
    rp.stop();
}

/// What an uplink sent besides the path probes the two ToRs exchange over it.
fn data_tx(p: &sprayswitch::stats::PortStats) -> u64 {
    p.tx_pkts - p.probes_tx
}

/// What host b1 received of a spray run: one RoCE WRITE's QP, PSN and tag.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    qp: u32,
    psn: u32,
    tag: u32,
}

/// QPs of a spray run, and how many consecutive PSNs a QP sends before the next QP's turn.
const SPRAY_QPS: u32 = 8;
const SPRAY_RUN: u32 = 4;

/// The QP (index from 0) and PSN of the packet tagged `tag` in a spray run: QPs take turns
/// sending `SPRAY_RUN` consecutive PSNs each, so that every QP's PSNs count up from 0 without a
/// gap, and a round-robin ToR puts the packets of each run on as many different uplinks.
fn spray_qp_psn(tag: u32) -> (u32, u32) {
    let turn = tag / SPRAY_RUN;
    (
        turn % SPRAY_QPS,
        turn / SPRAY_QPS * SPRAY_RUN + tag % SPRAY_RUN,
    )
}

/// Sends `n` tagged RoCE packets from a1 to b1 over [`SPRAY_QPS`] QPs (see [`spray_qp_psn`])
/// and collects what b1 receives, in arrival order.
fn spray_run(rp: &mut RackPair, n: u32, first_tag: u32) -> Vec<Arrival> {
    let dst = IpAddr::V4(rp.hosts_b[0].ip4);
    let mut got = Vec::with_capacity(n as usize);
    let mut sent = 0u32;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut rx = Vec::with_capacity(512);
    while (got.len() as u32) < n && std::time::Instant::now() < deadline {
        if sent < n {
            let chunk: Vec<Pkt> = (sent..(sent + 256).min(n))
                .map(|i| {
                    let tag = first_tag + i;
                    let (qp, psn) = spray_qp_psn(tag);
                    roce_write(
                        &rp.hosts_a[0],
                        dst,
                        0x100 + qp,
                        psn,
                        49152 + qp as u16,
                        256,
                        tag,
                    )
                })
                .collect();
            let mut v = chunk;
            let k = v.len() as u32;
            while !v.is_empty() {
                rp.hosts_a[0].port.tx_burst(0, &mut v);
            }
            sent += k;
        }
        rp.hosts_b[0].port.rx_burst(0, &mut rx, 512);
        got.extend(rx.drain(..).map(|p| {
            let f = p.data();
            let bth = classify(f, Pmtu::DEFAULT)
                .expect("RoCE")
                .roce()
                .expect("RoCE")
                .bth;
            Arrival {
                qp: bth.dest_qp - 0x100,
                psn: bth.psn.value(),
                tag: tag_of(f),
            }
        }));
        if sent >= n {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    got
}

/// The tags of a spray run's arrivals.
fn tags(got: &[Arrival]) -> Vec<u32> {
    got.iter().map(|a| a.tag).collect()
}

/// Each QP's PSNs in the order b1 received them.
fn psns_by_qp(got: &[Arrival]) -> BTreeMap<u32, Vec<u32>> {
    let mut by = BTreeMap::new();
    for a in got {
        by.entry(a.qp).or_insert_with(Vec::new).push(a.psn);
    }
    by
}

/// Turns on capture at ToR B's uplinks, where the fabric delivers; returns their port ids. A
/// capture holds 8192 packets a port ([`sprayswitch::capture::TAP_QUEUE`]): a spray run of
/// 20,000 packets puts at most 8000 on one uplink.
fn capture_uplinks(tor: &Switch) -> Vec<u16> {
    let t = tor.tables();
    let ids: Vec<u16> = (0..).map_while(|u| t.port_id(&format!("u{u}"))).collect();
    for id in &ids {
        assert!(tor.capture_taps().set(*id, true));
    }
    ids
}

/// Whether the fabric delivered some QP's packets to ToR B out of PSN order, from the captures
/// [`capture_uplinks`] started: in the order ToR B's workers took them from its uplinks (by
/// the time of the worker iteration, then, within one iteration, by port as a worker polls its
/// ports, then as each port delivered them), some PSN came before a lower PSN of its QP.
fn reordered_on_the_way(tor: &Switch, uplinks: &[u16]) -> bool {
    let taps = tor.capture_taps();
    // (iteration time, uplink, position on it, QP, PSN)
    let mut taken: Vec<(u64, usize, usize, u32, u32)> = Vec::new();
    for (u, id) in uplinks.iter().enumerate() {
        taps.set(*id, false);
        assert_eq!(taps.dropped(*id), 0, "the capture kept every packet");
        let mut k = 0;
        taps.drain(*id, |at, p| {
            if let Some(bth) = classify(p.data(), Pmtu::DEFAULT)
                .ok()
                .and_then(|c| c.roce().map(|r| r.bth))
            {
                taken.push((at, u, k, bth.dest_qp, bth.psn.value()));
                k += 1;
            }
        });
    }
    taken.sort_unstable();
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    taken
        .iter()
        .any(|&(.., qp, psn)| last.insert(qp, psn).is_some_and(|before| psn < before))
}

/// Sprays 20,000 packets of 8 QPs (each QP's PSNs consecutive) over four paths of 0 to 100 us,
/// with or without the reorder stage at ToR B. Every packet arrives exactly once either way.
/// Without the stage some QP's packets reach b1 out of PSN order (the paths reorder them); with
/// it every QP's do in PSN order. Either way the paths reordered the QPs on their way to ToR B
/// (seen in captures of its uplinks), so that the order at b1 is the stage's work.
fn spray_delivers_every_packet_once(workers: usize, reorder: bool) {
    let spec = RackPairSpec {
        paths: [0, 20_000, 50_000, 100_000].map(PathSpec::delay).to_vec(),
        workers,
        // Nothing is lost here, so long timers cost nothing: only a gap's own packet ends it,
        // and the paths' order (not a timer) ends a stream's learning, never a thread kept off
        // a shared core: beside two busy loops on 2 cores, two workers per ToR kept gaps open
        // for 20-75 ms on these 100 us paths (the stage's longest gap).
        reorder: reorder.then(|| sprayswitch::reorder::ReorderConfig {
            hold_timeout_ns: 2_000_000_000,
            learn_ns: 2_000_000_000,
            ..sprayswitch::reorder::ReorderConfig::default()
        }),
        ..RackPairSpec::default()
    };
    let mut rp = RackPair::start(&spec).unwrap();
    let uplinks = capture_uplinks(&rp.tor_b);
    let n = 20_000;
    let got = spray_run(&mut rp, n, 0);
    assert!(
        reordered_on_the_way(&rp.tor_b, &uplinks),
        "the skewed paths deliver some QP's packets to tor-b out of PSN order"
    );
    let tags = tags(&got);
    let unique: HashSet<u32> = tags.iter().copied().collect();
    assert_eq!(tags.len(), n as usize, "every packet arrived exactly once");
    assert_eq!(unique.len(), n as usize, "no duplicates");
    let by_qp = psns_by_qp(&got);
    assert_eq!(by_qp.len(), SPRAY_QPS as usize);
    let in_psn_order = |psns: &[u32]| psns.windows(2).all(|w| w[0] < w[1]);
    let b = rp.tor_b.stats();
    let r = &b.reorder;
    let stage = format!(
        "tor-b's stage: held {}, late {}, overflows {}, hold timeouts {}, path-order losses {}, \
         longest gap {} us",
        r.held_total,
        r.late,
        r.overflows,
        r.timeouts,
        r.path_losses,
        r.peak_path_skew_ns / 1000
    );
    if reorder {
        for (qp, psns) in &by_qp {
            assert!(
                in_psn_order(psns) && psns.len() == (n / SPRAY_QPS) as usize,
                "QP {qp}: its {} packets reach b1 once each, in PSN order ({stage})",
                n / SPRAY_QPS
            );
        }
    } else {
        assert!(
            by_qp.values().any(|p| !in_psn_order(p)),
            "without the stage some QP reaches b1 out of PSN order"
        );
    }
    let s = rp.tor_a.stats();
    assert_eq!(s.sprayed, u64::from(n));
    assert_eq!(s.drops_total(), 0);
    let per_uplink: Vec<u64> = (0..4)
        .map(|u| data_tx(s.port(&format!("u{u}")).unwrap()))
        .collect();
    if workers == 1 {
        assert_eq!(per_uplink, vec![5000; 4], "round robin is exact");
        assert_eq!((s.handoff_out, b.handoff_out), (0, 0), "one worker");
    } else {
        assert!(per_uplink.iter().all(|c| *c >= 4000), "{per_uplink:?}");
        // ToR B's uplinks are spread over its two workers, b1's port is one worker's: what
        // arrives on the other worker's uplinks is handed to the owner of b1's port (and its
        // reorder stage), and ToR A hands what it sprays to the owners of the uplinks.
        assert!(
            s.handoff_out > 0 && b.handoff_out > 0,
            "hand-offs at tor-a {}, tor-b {}",
            s.handoff_out,
            b.handoff_out
        );
    }
    let (a, b) = rp.stop();
    assert_eq!(a.unsent + b.unsent, 0);
}

#[test]
fn spray_without_reorder_delivers_every_packet_once_out_of_order() {
    spray_delivers_every_packet_once(1, false);
}

#[test]
fn spray_with_reorder_delivers_every_packet_once_in_order() {
    spray_delivers_every_packet_once(1, true);
}

#[test]
fn spray_with_two_workers_hands_off_and_delivers_every_packet_once_in_order() {
    spray_delivers_every_packet_once(2, true);
}

#[test]
fn down_uplinks_get_nothing_and_spraying_continues() {
    let mut rp = RackPair::start(&RackPairSpec::default()).unwrap();
    let tx = |rp: &RackPair| -> Vec<u64> {
        (0..4)
            .map(|u| data_tx(rp.tor_a.stats().port(&format!("u{u}")).unwrap()))
            .collect()
    };
    // Administratively down.
    rp.tor_a.set_port_admin("u2", false).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let before = tx(&rp);
    let tags = spray_run(&mut rp, 3000, 0);
    assert_eq!(tags.len(), 3000);
    let d: Vec<u64> = tx(&rp).iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(d, vec![1000, 1000, 0, 1000]);

    // Carrier down on path 1 as well.
    rp.path_links[1].set_up(false);
    let u1 = rp.tor_a.tables().port_id("u1").unwrap();
    assert!(wait_for(5.0, || (!rp.tor_a.port_up(u1)).then_some(())).is_some());
    let before = tx(&rp);
    let tags = spray_run(&mut rp, 2000, 10_000);
    assert_eq!(tags.len(), 2000);
    let d: Vec<u64> = tx(&rp).iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(d, vec![1000, 0, 0, 1000]);

    // Everything down: dropped and counted.
    for u in ["u0", "u1", "u3"] {
        rp.tor_a.set_port_admin(u, false).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let dst = IpAddr::V4(rp.hosts_b[0].ip4);
    for i in 0..100 {
        let p = roce_write(&rp.hosts_a[0], dst, 1, i, 49152, 64, i);
        send(&mut rp.hosts_a[0], p);
    }
    assert!(wait_for(5.0, || (rp
        .tor_a
        .stats()
        .dropped(DropReason::AllUplinksDown)
        == 100)
        .then_some(()))
    .is_some());
    // And back up: traffic flows again.
    rp.path_links[1].set_up(true);
    for u in ["u0", "u1", "u2", "u3"] {
        rp.tor_a.set_port_admin(u, true).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(spray_run(&mut rp, 400, 50_000).len(), 400);
    rp.stop();
}

#[test]
fn drops_are_counted_by_reason() {
    let mut rp = RackPair::start(&RackPairSpec::default()).unwrap();
    let a1 = &mut rp.hosts_a[0];
    send(
        a1,
        roce_write(a1, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 1, 1, 1, 64, 1),
    );
    let mut ttl1 = roce_write(a1, IpAddr::V4(Ipv4Addr::new(10, 2, 1, 2)), 1, 2, 1, 64, 2);
    ttl1.data_mut()[22] = 1;
    ttl1.data_mut()[24..26].fill(0);
    let c = sprayswitch::wire::frame::ipv4_header_checksum(&ttl1.data()[14..34]);
    ttl1.data_mut()[24..26].copy_from_slice(&c.to_be_bytes());
    send(a1, ttl1);
    let mut wrong_mac = roce_write(a1, IpAddr::V4(Ipv4Addr::new(10, 2, 1, 2)), 1, 3, 1, 64, 3);
    wrong_mac.data_mut()[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    send(a1, wrong_mac);
    let mut bad = roce_write(a1, IpAddr::V4(Ipv4Addr::new(10, 2, 1, 2)), 1, 4, 1, 64, 4);
    bad.resize(30);
    send(a1, bad);
    let mut bad_csum = roce_write(a1, IpAddr::V4(Ipv4Addr::new(10, 2, 1, 2)), 1, 5, 1, 64, 5);
    bad_csum.data_mut()[24] ^= 0xFF;
    send(a1, bad_csum);
    send(a1, tcp4(a1, a1.gw4, 40000, 22, 0, 0x02));
    let want = [
        DropReason::NoRoute,
        DropReason::TtlExpired,
        DropReason::NotForUs,
        DropReason::Malformed,
        DropReason::BadIpChecksum,
        DropReason::LocalUnsupported,
    ];
    let ok = wait_for(5.0, || {
        let s = rp.tor_a.stats();
        want.iter().all(|r| s.dropped(*r) == 1).then_some(())
    });
    let s = rp.tor_a.stats();
    assert!(
        ok.is_some(),
        "{:?}",
        DropReason::ALL.map(|r| (r.name(), s.dropped(r)))
    );
    assert_eq!(s.drops_total(), 6);
    rp.stop();
}

#[test]
fn every_policy_delivers_everything() {
    for policy in SprayPolicy::ALL {
        let spec = RackPairSpec {
            policy,
            paths: [0, 10_000, 30_000, 60_000].map(PathSpec::delay).to_vec(),
            ..RackPairSpec::default()
        };
        let mut rp = RackPair::start(&spec).unwrap();
        let tags = tags(&spray_run(&mut rp, 4000, 0));
        let unique: HashSet<u32> = tags.iter().copied().collect();
        assert_eq!((tags.len(), unique.len()), (4000, 4000), "{policy:?}");
        let s = rp.tor_a.stats();
        let used = (0..4)
            .filter(|u| data_tx(s.port(&format!("u{u}")).unwrap()) > 0)
            .count();
        // 8 QPs: even ECMP spreads them over more than one uplink; per-packet policies use all.
        assert!(used >= 2, "{policy:?} used {used} uplinks");
        if policy.sprays() && policy != SprayPolicy::Flowlet && policy != SprayPolicy::LeastLoaded {
            assert_eq!(used, 4, "{policy:?}");
        }
        rp.stop();
    }
}
