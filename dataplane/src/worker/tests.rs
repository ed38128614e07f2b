//! The worker driven by hand: parking for unresolved next hops, idle waits.

use std::time::Duration;

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
