//! Forwarding cost per packet on in-memory ports with one worker, in one run:
//!
//! - `port_to_port`: receive a burst on one port and transmit it on another, no worker at
//!   all (the l2fwd floor: the same `Port` calls and burst vectors the worker uses);
//! - `bare`: the worker's bare rx -> tx forward, a port cross-connect (`Tables::patch`, like
//!   VPP's l2patch): the whole worker loop, no lookup. All worker variants run the same
//!   six-port switch (two downlinks, four uplinks), so they differ only in the per-packet work;
//! - `routed`: the worker classifies, routes (LPM, neighbour, TTL and checksum, MAC rewrite)
//!   downlink to downlink, with the RoCE facts for the reorder stage (pass-through here);
//! - `routed_spray`: routed towards a 4-uplink group, sprayed round robin;
//! - `routed_spray_full`: the same with the engine's fast path off (every packet classified
//!   through etherparse and routed through the FIB), for comparison;
//! - `routed_spray_ecn`: `routed_spray` with ECN marking on every port at the ConWeave
//!   thresholds (Kmin 100 KB): the queues stay short, so this is the check every packet pays;
//! - `routed_spray_marking`: marking at Kmin = Kmax = 0, Pmax 1: every packet that finds
//!   another queued before it is marked CE (the IPv4 checksum updated): the whole cost of a
//!   mark. Both print their cost over `routed_spray`, the median of the per-round differences.
//!
//! Every variant pays the same harness cost (the generator refills 42 header bytes per packet
//! and moves buffers in and out of the rings). This shared machine drifts by 10-40% over
//! seconds, so the variants run interleaved: each round runs every variant for `--round-ms`,
//! and the table gives the median over rounds and the median of the per-round ratios.
//!
//! `cargo bench -p sprayswitch --bench forward [-- --rounds 15 --round-ms 200 --only NAME --alone]`
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sprayswitch::egress::EcnProfile;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::Port;
use sprayswitch::reorder::Passthrough;
use sprayswitch::tables::{SprayPolicy, Tables};
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

/// One variant: a closure that moves one burst through and returns packets delivered.
type Variant<'a> = (&'static str, Box<dyn FnMut() -> usize + 'a>);

fn variants(payload: usize) -> Vec<Variant<'static>> {
    let mut out: Vec<Variant<'static>> = Vec::new();

    // Port to port, no worker.
    let (mut host, mut sw_in) = mem::link("host", "in", 1024);
    let (mut sw_out, mut sink) = mem::link("out", "sink", 1024);
    let mut gen = Gen::new(Ipv4Addr::new(10, 0, 1, 2), payload);
    let mut rx: Vec<Pkt> = Vec::with_capacity(BURST);
    out.push((
        "port_to_port",
        Box::new(move || {
            gen.offer(&mut host);
            sw_in.rx_burst(0, &mut rx, BURST);
            while !rx.is_empty() {
                sw_out.tx_burst(0, &mut rx);
            }
            gen.collect(std::slice::from_mut(&mut sink))
        }),
    ));

    // Every worker variant runs the same switch (two downlinks, four uplinks in a group), so
    // that they pay the same per-iteration cost of polling and publishing six ports and differ
    // only in what the worker does per packet. The worker's bare forward: a cross-connect of
    // the two downlinks instead of routing.
    let mut tables = tor_tables(2, 4, SprayPolicy::RoundRobin);
    tables.patch = vec![Some(1), Some(0), None, None, None, None];
    out.push((
        "bare",
        worker_variant(tables, Ipv4Addr::new(10, 0, 1, 2), payload, true),
    ));
    out.push((
        "routed",
        worker_variant(
            tor_tables(2, 4, SprayPolicy::RoundRobin),
            Ipv4Addr::new(10, 0, 1, 2),
            payload,
            true,
        ),
    ));
    for (name, fast) in [("routed_spray", true), ("routed_spray_full", false)] {
        out.push((
            name,
            worker_variant(
                tor_tables(2, 4, SprayPolicy::RoundRobin),
                Ipv4Addr::new(10, 9, 1, 2),
                payload,
                fast,
            ),
        ));
    }
    let conweave = EcnProfile {
        kmin_bytes: 100_000,
        kmax_bytes: 400_000,
        pmax: 0.2,
    };
    let always = EcnProfile {
        kmin_bytes: 0,
        kmax_bytes: 0,
        pmax: 1.0,
    };
    for (name, ecn) in [
        ("routed_spray_ecn", conweave),
        ("routed_spray_marking", always),
    ] {
        let mut t = tor_tables(2, 4, SprayPolicy::RoundRobin);
        for p in &mut t.ports {
            p.ecn = Some(ecn);
        }
        out.push((
            name,
            worker_variant(t, Ipv4Addr::new(10, 9, 1, 2), payload, true),
        ));
    }
    out
}

fn worker_variant(
    tables: Tables,
    dst: Ipv4Addr,
    payload: usize,
    fast: bool,
) -> Box<dyn FnMut() -> usize> {
    let (mut w, mut far) = worker_setup(tables);
    w.set_fast_path(fast);
    let mut gen = Gen::new(dst, payload);
    let mut now = 0u64;
    Box::new(move || {
        gen.offer(&mut far[0]);
        now += 1_000;
        w.iterate(now);
        gen.collect(&mut far[1..])
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rounds = arg("--rounds", 15).max(1) as usize;
    let round = Duration::from_millis(arg("--round-ms", 200).max(1));
    println!(
        "forward bench: {rounds} interleaved rounds of {} ms per variant, burst {BURST}",
        round.as_millis()
    );
    for payload in [64usize, 1024] {
        let mut vs = variants(payload);
        // `--only NAME` (for profiling): that variant and the two baselines (`--alone`: not them).
        if let Some(only) = std::env::args().skip_while(|a| a != "--only").nth(1) {
            let alone = std::env::args().any(|a| a == "--alone");
            vs.retain(|(n, _)| *n == only || (!alone && (*n == "bare" || *n == "port_to_port")));
        }
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); vs.len()];
        // Warm-up: one short pass of each.
        for (_, f) in vs.iter_mut() {
            for _ in 0..10_000 {
                black_box(f());
            }
        }
        for _ in 0..rounds {
            for (i, (_, f)) in vs.iter_mut().enumerate() {
                let start = Instant::now();
                let mut pkts = 0usize;
                while start.elapsed() < round {
                    for _ in 0..64 {
                        pkts += black_box(f());
                    }
                }
                ns[i].push(start.elapsed().as_nanos() as f64 / pkts.max(1) as f64);
            }
        }
        let bare = vs.iter().position(|(n, _)| *n == "bare").unwrap_or(0);
        let floor = vs
            .iter()
            .position(|(n, _)| *n == "port_to_port")
            .unwrap_or(0);
        println!();
        println!("payload {payload} B");
        println!(
            "{:<20} {:>9} {:>9} {:>9} {:>15}  {:>15}",
            "variant", "ns/pkt", "Mpps", "x bare", "x port_to_port", "ns/pkt min-max"
        );
        for (i, (name, _)) in vs.iter().enumerate() {
            let ratio = |base: usize| {
                let mut r: Vec<f64> = ns[i].iter().zip(&ns[base]).map(|(a, b)| a / b).collect();
                median(&mut r)
            };
            let (rb, rf) = (ratio(bare), ratio(floor));
            let mut v = ns[i].clone();
            let m = median(&mut v);
            println!(
                "{:<20} {:>9.1} {:>9.2} {:>8.2}x {:>14.2}x  {:>15}",
                name,
                m,
                1_000.0 / m,
                rb,
                rf,
                format!("{:.1}-{:.1}", v[0], v[v.len() - 1])
            );
        }
        if let Some(base) = vs.iter().position(|(n, _)| *n == "routed_spray") {
            for (i, (name, _)) in vs.iter().enumerate() {
                if name.starts_with("routed_spray_ecn") || *name == "routed_spray_marking" {
                    let mut d: Vec<f64> = ns[i].iter().zip(&ns[base]).map(|(a, b)| a - b).collect();
                    println!(
                        "{name}: {:+.1} ns/pkt over routed_spray (median of per-round differences)",
                        median(&mut d)
                    );
                }
            }
        }
    }
}
