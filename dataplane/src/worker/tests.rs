//! The worker driven by hand, on the tests' own clock: parking for unresolved next hops, idle
//! waits, rates, ECN marking, pauses, carrier loss.

use std::time::Duration;

use super::*;
use crate::port::fault::{FaultConfig, FaultInjector};
use crate::port::mem::{self, MemPort};
use crate::reorder::Passthrough;
use crate::tables::SprayPolicy;
use crate::testkit::{roce_frame, tor_tables};

/// A ToR whose host behind `d1` (10.0.1.2) is not resolved yet, its far ends, and the
/// worker: the host behind `d0` sends to it.
fn unresolved_tor() -> (Worker, Arc<CachePadded<WorkerCounters>>, MemPort, MemPort) {
    let mut tables = tor_tables(2, 1, SprayPolicy::RoundRobin);
    tables
        .neighbors
        .remove(&crate::tables::ip_key("10.0.1.2".parse().unwrap()));
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
    crate::wire::control::arp_request(
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
    // release time can make the wait shorter. On the test's own clock: the wait's length is
    // exact, whatever else shares the machine's cores.
    const MS: u64 = 1_000_000;
    let tables = tor_tables(1, 1, SprayPolicy::RoundRobin);
    let (mut host, d0) = mem::link("host", "d0", 64);
    let (u0, mut far) = mem::link("u0", "far", 64);
    let delayed = FaultInjector::new(
        u0,
        FaultConfig {
            delay_ns: 2 * MS,
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
    assert_eq!(w.timed_wait(MS), None);

    // The worker forwards the packet at t0; the link holds it until t0 + 2 ms.
    let t0 = 5 * MS;
    let frame = roce_frame(0, "10.9.0.5".parse().unwrap(), 1, 0, 64);
    host.tx_burst(t0, &mut vec![Pkt::from_slice(&frame)]);
    while w.iterate(t0) {}
    // (`prepare_wait` reads the process's clock for the length: here only that it is timed.)
    assert!(
        matches!(w.prepare_wait(), Some(Some(_))),
        "the delayed packet is timed work"
    );
    w.end_wait();
    assert_eq!(
        w.timed_wait(t0),
        Some(Duration::from_millis(2)),
        "waits until the release, not the 10 ms short wait"
    );
    assert_eq!(
        w.timed_wait(t0 + MS / 2),
        Some(Duration::from_micros(1500)),
        "what is left of it"
    );

    // Not before it is due; once due, it leaves, and nothing is timed any more.
    let mut got = Vec::new();
    w.iterate(t0 + 2 * MS - 1);
    assert_eq!(far.rx_burst(0, &mut got, 8), 0, "not yet due");
    w.iterate(t0 + 2 * MS);
    assert_eq!(far.rx_burst(0, &mut got, 8), 1);
    assert_eq!(w.timed_wait(t0 + 2 * MS), None);
    assert_eq!(w.prepare_wait(), Some(None));
    w.end_wait();
}

/// A ToR with two hosts (d0, d1) whose port d1 has `rate_bps` and `ecn`, and the hosts' ends.
fn two_hosts(
    rate_bps: Option<u64>,
    ecn: Option<crate::egress::EcnProfile>,
) -> (Worker, Arc<CachePadded<WorkerCounters>>, MemPort, MemPort) {
    let mut tables = tor_tables(2, 0, SprayPolicy::RoundRobin);
    tables.ports[1].rate_bps = rate_bps;
    tables.ports[1].ecn = ecn;
    let (h0, d0) = mem::link("h0", "d0", 8192);
    let (h1, d1) = mem::link("h1", "d1", 8192);
    let (w, c) = Worker::standalone(
        tables,
        vec![Box::new(d0), Box::new(d1)],
        WorkerConfig::default(),
        Box::new(Passthrough),
    );
    (w, c, h0, h1)
}

fn send_to_h1(h0: &mut MemPort, psns: std::ops::Range<u32>, payload: usize) {
    let to = "10.0.1.2".parse().unwrap();
    let mut burst: Vec<Pkt> = psns
        .map(|psn| Pkt::from_slice(&roce_frame(0, to, 7, psn, payload)))
        .collect();
    while !burst.is_empty() {
        h0.tx_burst(0, &mut burst);
    }
}

fn drain(port: &mut MemPort) -> Vec<Pkt> {
    let mut got = Vec::new();
    while port.rx_burst(0, &mut got, 256) > 0 {}
    got
}

fn psn(p: &Pkt) -> u32 {
    crate::testkit::psn_of(p.data())
}

#[test]
fn a_rated_downlink_gets_no_more_than_its_rate_and_everything_in_order() {
    // 8 Gbit/s: a byte per ns; the bucket starts with 64 KiB.
    let (mut w, _, mut h0, mut h1) = two_hosts(Some(8_000_000_000), None);
    send_to_h1(&mut h0, 0..500, 1000);
    let mut got = Vec::new();
    let mut now = 1_000;
    while got.len() < 500 && now < 10_000_000 {
        while w.iterate(now) {}
        let new = drain(&mut h1);
        let bytes: usize = got.iter().chain(&new).map(|p: &Pkt| p.len()).sum();
        assert!(
            bytes as u64 <= 65_536 + (now - 1_000) + 1100,
            "{bytes} bytes by {now} ns"
        );
        got.extend(new);
        now += 5_000;
    }
    assert_eq!(
        got.iter().map(psn).collect::<Vec<_>>(),
        (0..500).collect::<Vec<_>>()
    );
    let bytes: u64 = got.iter().map(|p| p.len() as u64).sum();
    assert!(now >= bytes - 65_536, "took {now} ns for {bytes} bytes");
}

#[test]
fn the_egress_queue_marks_on_its_depth_through_the_worker() {
    let ecn = crate::egress::EcnProfile {
        kmin_bytes: 0,
        kmax_bytes: 0,
        pmax: 1.0,
    };
    let (mut w, _, mut h0, mut h1) = two_hosts(None, Some(ecn));
    send_to_h1(&mut h0, 0..10, 100);
    while w.iterate(1_000) {}
    let ce: Vec<bool> = drain(&mut h1)
        .iter()
        .map(|p| crate::wire::ecn::codepoint(p.data()) == Some(crate::wire::ecn::Codepoint::Ce))
        .collect();
    assert_eq!(ce.len(), 10);
    assert!(!ce[0], "the first found the queue empty");
    assert!(
        ce[1..].iter().all(|&c| c),
        "the rest found it above kmax: {ce:?}"
    );
}

#[test]
fn a_pause_from_the_host_stops_its_port_for_the_quanta_and_bad_ones_are_counted() {
    let (mut w, c, mut h0, mut h1) = two_hosts(Some(8_000_000_000), None);
    // 1000 quanta at 8 Gbit/s: 64 us.
    let pause = crate::wire::PauseFrame::Pause { quanta: 1000 }.to_frame([2, 0, 0, 0, 0, 9]);
    h1.tx_burst(0, &mut vec![Pkt::from_slice(&pause)]);
    w.iterate(1_000);
    send_to_h1(&mut h0, 0..20, 100);
    w.iterate(2_000);
    w.iterate(60_000);
    assert!(drain(&mut h1).is_empty(), "paused");
    assert!(w.iterate(65_001));
    let got = drain(&mut h1);
    assert_eq!(
        got.iter().map(psn).collect::<Vec<_>>(),
        (0..20).collect::<Vec<_>>()
    );
    // A PFC frame for priority 3 (RoCE's DSCP 26 maps to it; these frames have DSCP 0, so
    // priority 0) does not stop them.
    let mut quanta = [0u16; 8];
    quanta[3] = 0xffff;
    let pfc = crate::wire::PauseFrame::Pfc {
        enable: 1 << 3,
        quanta,
    }
    .to_frame([2, 0, 0, 0, 0, 9]);
    h1.tx_burst(0, &mut vec![Pkt::from_slice(&pfc)]);
    w.iterate(100_000);
    send_to_h1(&mut h0, 20..30, 100);
    while w.iterate(101_000) {}
    assert_eq!(drain(&mut h1).len(), 10);
    // An unknown opcode and a short frame: counted, ignored.
    let mut gate = pause;
    gate[15] = 2;
    h1.tx_burst(
        0,
        &mut vec![Pkt::from_slice(&gate), Pkt::from_slice(&pause[..16])],
    );
    w.iterate(200_000);
    assert_eq!(c.drops[DropReason::BadPause as usize].get(), 2);
    assert_eq!(c.consumed.get(), 2, "the two good frames");
}

/// An uplink whose carrier drops stops blocking path-order decisions only once what it
/// received before is through: its receive ring drained (and nothing of it waiting for a
/// hand-off), not as soon as its carrier is down. Packets still in the ring would otherwise
/// reach the reorder stage after it had released what they fill out of sequence (and a
/// Go-Back-N host NAKed needlessly).
#[test]
fn a_path_whose_carrier_drops_counts_as_down_only_once_its_ring_is_drained() {
    let tables = tor_tables(1, 2, SprayPolicy::RoundRobin);
    let (_h0, d0) = mem::link("h0", "d0", 256);
    let (u0, _far0) = mem::link("u0", "far0", 256);
    let (u1, mut far1) = mem::link("u1", "far1", 256);
    let u1_link = u1.control();
    let (mut w, _c) = Worker::standalone(
        tables,
        vec![Box::new(d0), Box::new(u0), Box::new(u1)],
        WorkerConfig::default(),
        Box::new(Passthrough),
    );
    let to = "10.0.0.2".parse().unwrap();
    let mut burst: Vec<Pkt> = (0..100)
        .map(|psn| Pkt::from_slice(&roce_frame(0, to, 7, psn, 64)))
        .collect();
    far1.tx_burst(0, &mut burst);
    u1_link.set_up(false);
    let u1_status = |w: &Worker| (w.sh.status[2].is_up(), w.sh.status[2].rx_dead());
    w.iterate(1_000);
    assert_eq!(
        u1_status(&w),
        (false, false),
        "down, but 68 packets still in its ring"
    );
    assert_eq!(w.paths_down_now(), 0, "path 1 still blocks decisions");
    w.iterate(2_000);
    w.iterate(3_000);
    assert_eq!(u1_status(&w), (false, false), "4 still in its ring");
    w.iterate(4_000);
    assert_eq!(u1_status(&w), (false, true), "drained: nothing more comes");
    assert_eq!(
        w.paths_down_now(),
        0b10,
        "path 1 no longer blocks decisions"
    );
    u1_link.set_up(true);
    w.iterate(5_000);
    assert_eq!(u1_status(&w), (true, false));
}

/// A port that always has another frame: what a line-rate source looks like to a worker.
struct Endless {
    frame: Vec<u8>,
}

impl Port for Endless {
    fn name(&self) -> &str {
        "endless"
    }
    fn rx_burst(&mut self, _now: u64, out: &mut Vec<Pkt>, max: usize) -> usize {
        for _ in 0..max {
            out.push(Pkt::from_slice(&self.frame));
        }
        max
    }
    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Pkt>) -> usize {
        let n = pkts.len();
        pkts.clear();
        n
    }
    fn link_state(&self) -> crate::port::LinkState {
        crate::port::LinkState::Up
    }
    fn tx_backlog(&self) -> usize {
        0
    }
}

#[test]
fn a_worker_stopped_under_endless_load_stops_after_its_grace() {
    let tables = tor_tables(2, 1, SprayPolicy::RoundRobin);
    let frame = roce_frame(0, "10.0.1.2".parse().unwrap(), 7, 1, 64);
    let ports: Vec<Box<dyn Port>> = vec![
        Box::new(Endless { frame }),
        Box::new(Endless { frame: Vec::new() }),
        Box::new(Endless { frame: Vec::new() }),
    ];
    let (w, c) = Worker::standalone(
        tables,
        ports,
        WorkerConfig::default(),
        Box::new(Passthrough),
    );
    let stop = w.sh.stop.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let exit = w.run();
        let _ = tx.send(());
        exit
    });
    while c.rx_pkts.get() < 10_000 {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    // A hang shows as no answer at all; the grace is 0.2 s.
    assert!(
        rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "the worker did not stop under load"
    );
    let exit = t.join().expect("worker thread");
    assert_eq!(exit.ports.len(), 3);
}
