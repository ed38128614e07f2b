//! Forwarding cost per packet on in-memory ports with one worker, in one run:
//!
//! - `bare`: receive a burst on one port and transmit it on another, nothing else (the l2fwd
//!   baseline: the same `Port` calls and burst vectors the worker uses);
//! - `worker_patch`: the whole worker loop with a port cross-connect instead of routing;
//! - `routed`: the worker classifies, routes (LPM, neighbour, TTL and checksum, MAC rewrite)
//!   downlink to downlink;
//! - `routed_spray`: routed towards a 4-uplink group, sprayed round robin.
//!
//! Every variant pays the same harness cost (the generator refills 42 header bytes per packet
//! and moves buffers in and out of the rings). `cargo bench -p sprayswitch --bench forward`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sprayswitch::engine::{SprayPolicy, Tables};
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::{Pkt, Port};
use sprayswitch::reorder::Passthrough;
use sprayswitch::testkit::{roce_frame, tor_tables};
use sprayswitch::worker::{Worker, WorkerConfig};

const BURST: usize = 32;

struct Gen {
    template: Vec<u8>,
    pool: Vec<Pkt>,
    batch: Vec<Pkt>,
    sink: Vec<Pkt>,
}

impl Gen {
    fn new(dst: Ipv4Addr, payload: usize) -> Gen {
        let template = roce_frame(0, dst, 0x11, 0, payload);
        Gen {
            pool: (0..4 * BURST).map(|_| Pkt::from_slice(&template)).collect(),
            template,
            batch: Vec::with_capacity(BURST),
            sink: Vec::with_capacity(4 * BURST),
        }
    }

    fn offer(&mut self, into: &mut MemPort) {
        for _ in 0..BURST {
            if let Some(mut p) = self.pool.pop() {
                p.data_mut()[..42].copy_from_slice(&self.template[..42]);
                self.batch.push(p);
            }
        }
        while !self.batch.is_empty() {
            into.tx_burst(0, &mut self.batch);
        }
    }

    fn collect(&mut self, from: &mut [MemPort]) -> usize {
        let mut n = 0;
        for f in from {
            n += f.rx_burst(0, &mut self.sink, 4 * BURST);
        }
        self.pool.append(&mut self.sink);
        n
    }
}

/// A lone worker over `tables`, each port linked to a far end the bench drives.
fn worker_setup(tables: Tables) -> (Worker, Vec<MemPort>) {
    let mut far = Vec::new();
    let mut near: Vec<Box<dyn Port>> = Vec::new();
    for p in &tables.ports {
        let (a, b) = mem::link("far", &p.name, 1024);
        far.push(a);
        near.push(Box::new(b));
    }
    let cfg = WorkerConfig {
        burst: BURST,
        ..WorkerConfig::default()
    };
    let (w, _) = Worker::standalone(tables, near, cfg, Box::new(Passthrough));
    (w, far)
}

fn bench(c: &mut Criterion) {
    for payload in [64usize, 1024] {
        let mut g = c.benchmark_group(format!("forward_{payload}B"));
        g.throughput(Throughput::Elements(BURST as u64));

        // Bare: port to port.
        let (mut host, mut sw_in) = mem::link("host", "in", 1024);
        let (mut sw_out, mut sink) = mem::link("out", "sink", 1024);
        let mut gen = Gen::new(Ipv4Addr::new(10, 0, 1, 2), payload);
        let mut rx: Vec<Pkt> = Vec::with_capacity(BURST);
        g.bench_function("bare", |b| {
            b.iter(|| {
                gen.offer(&mut host);
                sw_in.rx_burst(0, &mut rx, BURST);
                while !rx.is_empty() {
                    sw_out.tx_burst(0, &mut rx);
                }
                black_box(gen.collect(std::slice::from_mut(&mut sink)))
            })
        });

        // The same worker loop with a cross-connect instead of routing: the fair baseline for the
        // cost of the engine itself.
        {
            let mut tables = tor_tables(2, 0, SprayPolicy::Ecmp);
            tables.patch = vec![Some(1), Some(0)];
            let (mut w, mut far) = worker_setup(tables);
            let mut gen = Gen::new(Ipv4Addr::new(10, 0, 1, 2), payload);
            let mut now = 0u64;
            g.bench_function("worker_patch", |b| {
                b.iter(|| {
                    gen.offer(&mut far[0]);
                    now += 1_000;
                    w.iterate(now);
                    black_box(gen.collect(&mut far[1..]))
                })
            });
        }

        for (name, policy, uplinks, dst) in [
            ("routed", SprayPolicy::Ecmp, 0, Ipv4Addr::new(10, 0, 1, 2)),
            (
                "routed_spray",
                SprayPolicy::RoundRobin,
                4,
                Ipv4Addr::new(10, 9, 1, 2),
            ),
        ] {
            let (mut w, mut far) = worker_setup(tor_tables(2, uplinks, policy));
            let mut gen = Gen::new(dst, payload);
            let mut now = 0u64;
            g.bench_function(name, |b| {
                b.iter(|| {
                    gen.offer(&mut far[0]);
                    now += 1_000;
                    w.iterate(now);
                    black_box(gen.collect(&mut far[1..]))
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
