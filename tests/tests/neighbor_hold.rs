//! Packets towards a host the switch has not resolved yet wait for it, across workers: the
//! worker that routes them holds them, the worker that owns the host's port hears the host's
//! answer and tells the first, which then sends the held packets on in order.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use sprayswitch::engine::DropReason;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::Port;
use sprayswitch::switch::{RunConfig, Switch};
use sprayswitch::tables::{ip_key, SprayPolicy};
use sprayswitch::testkit::{peer_mac, roce_frame, tor_tables};
use sprayswitch::wire::{classify, FrameClass, Pmtu};
use sprayswitch::worker::WorkerConfig;

/// Frames `port` receives within `secs` until `done` says enough.
fn read_until(
    port: &mut MemPort,
    secs: f64,
    mut done: impl FnMut(&[Vec<u8>]) -> bool,
) -> Vec<Vec<u8>> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut got = Vec::new();
    let mut burst = Vec::new();
    while Instant::now() < end && !done(&got) {
        burst.clear();
        if port.rx_burst(0, &mut burst, 64) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        got.extend(burst.iter().map(|p| p.data().to_vec()));
    }
    got
}

fn psns(frames: &[Vec<u8>]) -> Vec<u32> {
    frames
        .iter()
        .filter_map(|f| match classify(f, Pmtu::DEFAULT).ok()?.class {
            FrameClass::Roce(r) => Some(r.bth.psn.value()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_holds_packets_until_another_worker_learns_their_next_hop() {
    let host = Ipv4Addr::new(10, 0, 1, 2);
    let mut tables = tor_tables(2, 0, SprayPolicy::RoundRobin);
    tables.neighbors.remove(&ip_key(IpAddr::V4(host)));
    let (mut h0, d0) = mem::link("h0", "d0", 256);
    let (mut h1, d1) = mem::link("h1", "d1", 256);
    let run = RunConfig {
        workers: 2,
        assignment: Some(vec![0, 1]),
        cores: None,
        worker: WorkerConfig::default(),
        seed: 1,
    };
    let switch = Switch::start(tables, vec![Box::new(d0), Box::new(d1)], run).unwrap();

    // Worker 0 routes towards d1 (worker 1's port): it holds the packets and asks for the host.
    let mut burst: Vec<Pkt> = (0..5)
        .map(|psn| {
            Pkt::from_slice(&roce_frame(
                0,
                IpAddr::V4(host).to_string().parse().unwrap(),
                7,
                psn,
                64,
            ))
        })
        .collect();
    h0.tx_burst(0, &mut burst);
    let asked = read_until(&mut h1, 5.0, |g| !g.is_empty());
    assert_eq!(asked.len(), 1, "one ARP request for the host");
    assert_eq!(&asked[0][12..14], &[0x08, 0x06]);
    assert!(
        psns(&asked).is_empty(),
        "nothing sent before the host answered"
    );

    // The host asks for its gateway on d1: worker 1 learns it and tells worker 0.
    let mut arp = vec![0u8; 60];
    sprayswitch::wire::control::arp_request(
        &mut arp,
        peer_mac(1),
        host,
        Ipv4Addr::new(10, 0, 1, 1),
    );
    h1.tx_burst(0, &mut vec![Pkt::from_slice(&arp)]);
    let got = read_until(&mut h1, 5.0, |g| psns(g).len() >= 5);
    assert_eq!(
        psns(&got),
        vec![0, 1, 2, 3, 4],
        "the held packets, in the order they came"
    );

    let stopped = switch.stop();
    assert_eq!(stopped.stats.parked, 5);
    assert_eq!(stopped.stats.dropped(DropReason::Unresolved), 0);
    assert!(
        stopped.stats.handoff_out >= 5,
        "routed by worker 0, sent by worker 1"
    );
}
