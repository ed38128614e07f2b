//! Zero allocations per packet in steady state: a worker routes and sprays bursts of RoCE
//! packets while a counting allocator watches the thread that drives it.

use std::net::Ipv4Addr;

use sprayswitch::pkt::Pkt;
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::Port;
use sprayswitch::reorder::Passthrough;
use sprayswitch::tables::SprayPolicy;
use sprayswitch::testkit::{roce_frame, tor_tables};
use sprayswitch::worker::{Worker, WorkerConfig};
use sprayswitch_tests::alloc_count;

#[global_allocator]
static GLOBAL: alloc_count::Counting = alloc_count::Counting;

fn run(policy: SprayPolicy, dst: Ipv4Addr, uplinks: usize) -> (usize, u64) {
    let tables = tor_tables(2, uplinks, policy);
    let mut far: Vec<MemPort> = Vec::new();
    let mut near: Vec<Box<dyn Port>> = Vec::new();
    for p in &tables.ports {
        let (a, b) = mem::link(&format!("far-{}", p.name), &p.name, 1024);
        far.push(a);
        near.push(Box::new(b));
    }
    let (mut w, counters) =
        Worker::standalone(tables, near, WorkerConfig::default(), Box::new(Passthrough));
    let template = roce_frame(0, dst, 0x11, 0, 1024);
    let mut pool: Vec<Pkt> = (0..64).map(|_| Pkt::from_slice(&template)).collect();
    let mut batch: Vec<Pkt> = Vec::with_capacity(64);
    let mut sink: Vec<Pkt> = Vec::with_capacity(256);
    let mut now = 1_000u64;
    let mut round = |measure: bool| {
        alloc_count::measure(measure);
        for _ in 0..32 {
            if let Some(mut p) = pool.pop() {
                p.data_mut()[..42].copy_from_slice(&template[..42]);
                batch.push(p);
            }
        }
        while !batch.is_empty() {
            far[0].tx_burst(now, &mut batch);
        }
        now += 1_000;
        w.iterate(now);
        w.iterate(now + 20_000);
        for f in far.iter_mut().skip(1) {
            f.rx_burst(now, &mut sink, 256);
        }
        pool.append(&mut sink);
        alloc_count::measure(false);
    };
    for _ in 0..200 {
        round(false);
    }
    let before = alloc_count::count();
    let tx_before = counters.tx_pkts.get();
    for _ in 0..2_000 {
        round(true);
    }
    (
        alloc_count::count() - before,
        counters.tx_pkts.get() - tx_before,
    )
}

#[test]
fn routing_and_spraying_allocate_nothing_per_packet() {
    for (policy, dst, uplinks) in [
        (SprayPolicy::RoundRobin, Ipv4Addr::new(10, 9, 1, 2), 4),
        (SprayPolicy::Flowlet, Ipv4Addr::new(10, 9, 1, 2), 4),
        (SprayPolicy::LeastLoaded, Ipv4Addr::new(10, 9, 1, 2), 4),
        (SprayPolicy::Ecmp, Ipv4Addr::new(10, 0, 1, 2), 0),
    ] {
        let (allocs, forwarded) = run(policy, dst, uplinks);
        assert_eq!(forwarded, 64_000, "{policy:?}: every packet forwarded");
        assert_eq!(
            allocs, 0,
            "{policy:?}: {allocs} allocations for {forwarded} packets"
        );
    }
}
