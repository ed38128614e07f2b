//! Reorder costs, in one run:
//!
//! - `stage/depth_D/streams_S`: ns per packet through the reorder stage (`ReorderStage`:
//!   core, release, pacing check) when each stream's packets come in blocks of `D + 1` with the
//!   first one last (so `D` are held, then all go), for `S` = 1, 1k and 100k active streams,
//!   handed over as a worker does: in bursts of 32 (`insert_burst`) once the stage wants them
//!   (`wants_bursts`: thousands of streams), one by one before; `stage/harness/streams_100000`:
//!   the same loop (100k streams in order, bursts) into a pass-through stage, what the bench
//!   itself costs a packet (the stage's own cost is a row less this);
//! - `paths/*`: the same over four path-order paths, with and without path stamps;
//! - `pipeline/*`: the whole worker (classify, route, reorder, transmit) from an uplink to a
//!   downlink with pass-through against the reorder engine, next to the bare port-to-port move.
//!
//! `cargo bench -p sprayswitch --bench reorder`.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sprayswitch::ids::PortId;
use sprayswitch::pkt::Pkt;
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::Port;
use sprayswitch::reorder::{
    Burst, DownlinkStage, MetaKind, Passthrough, ReorderConfig, ReorderStage, RoceMeta,
};
use sprayswitch::tables::{ip_key, SprayPolicy};
use sprayswitch::testkit::{roce_frame, tor_tables};
use sprayswitch::wire::Psn;
use sprayswitch::worker::{Worker, WorkerConfig};

const BATCH: usize = 1024;
/// Packets a worker hands the stage at once (its receive burst).
const BURST: usize = 32;

/// The reorder facts of a request of QP `qpn` from the source host 7 with `psn`, arrived on
/// `path` with path stamp `seq` as the source ToR wrote it (0: none).
fn request(qpn: u32, psn: u32, path: u8, seq: u16) -> RoceMeta {
    RoceMeta {
        local: ip_key(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        remote: 7,
        sport: 49152,
        qpn,
        psn: Psn::new(psn),
        span: 1,
        full_payload: 0,
        len: 100,
        kind: MetaKind::Request { read_len: None },
        path,
        stamp: sprayswitch::meta::PathStamp::read(seq, 3, 0),
    }
}

fn stage_bench(c: &mut Criterion) {
    let tables = tor_tables(2, 4, SprayPolicy::RoundRobin);
    let mut g = c.benchmark_group("stage");
    g.throughput(Throughput::Elements(BATCH as u64));
    let cfg = ReorderConfig {
        max_streams: 131_072,
        learn_ns: 0,
        ..ReorderConfig::default()
    };
    for streams in [1u32, 1_000, 100_000] {
        for depth in [0u32, 4, 16, 64] {
            let mut stage = ReorderStage::new(cfg, &tables, &[]);
            let mut drive = Driver::new(streams, depth);
            g.bench_function(format!("depth_{depth}/streams_{streams}"), |b| {
                b.iter(|| black_box(drive.batch(&mut stage, false)))
            });
        }
    }
    // What the loop above costs without a stage: the same packets, facts and bursts of 100k
    // streams in order into a stage that passes each at once. The reorder stage's own cost
    // is a row above less this.
    let mut pass = Passthrough;
    let mut drive = Driver::new(100_000, 0);
    g.bench_function("harness/streams_100000", |b| {
        b.iter(|| black_box(drive.batch(&mut pass, true)))
    });
    g.finish();
}

/// The `stage` bench's packets: each stream's in blocks of `depth + 1` with the first PSN
/// last, the streams in turn, handed over as a worker does.
struct Driver {
    pool: Vec<Pkt>,
    out: Vec<(PortId, Pkt)>,
    next_psn: Vec<u32>,
    stream: u32,
    block: u32,
    now: u64,
    order: Vec<u32>,
    burst: Burst,
    done: usize,
}

impl Driver {
    fn new(streams: u32, depth: u32) -> Driver {
        Driver {
            pool: (0..BATCH + 256).map(|_| Pkt::with_capacity(128)).collect(),
            out: Vec::with_capacity(BATCH * 2),
            next_psn: vec![0u32; streams as usize],
            stream: 0,
            block: depth + 1,
            now: 1,
            order: Vec::with_capacity(depth as usize + 1),
            burst: Burst::with_capacity(BURST),
            done: 0,
        }
    }

    /// Hands `BATCH` packets to `stage`: in bursts of `BURST` once it wants them (or always,
    /// `bursts`), one by one before. Returns how many went.
    fn batch<S: DownlinkStage>(&mut self, stage: &mut S, bursts: bool) -> usize {
        let streams = self.next_psn.len() as u32;
        let mut sent = 0;
        while sent < BATCH {
            // One block of one stream: the first PSN of the block comes last.
            let base = self.next_psn[self.stream as usize];
            self.order.clear();
            self.order.extend((1..self.block).map(|k| base + k));
            self.order.push(base);
            for &p in &self.order {
                let pkt = self.pool.pop().unwrap_or_else(|| Pkt::with_capacity(128));
                let meta = request(self.stream, p, sprayswitch::meta::NO_PATH, 0);
                if self.burst.is_empty() && !bursts && !stage.wants_bursts() {
                    stage.insert(0, pkt, &meta, self.now, &mut self.out);
                } else {
                    self.burst.push(0, pkt, meta);
                }
                self.done += 1;
                if self.done.is_multiple_of(BURST) {
                    stage.insert_burst(&mut self.burst, self.now, &mut self.out);
                    self.now += 100;
                    self.pool.extend(self.out.drain(..).map(|(_, p)| p));
                }
            }
            sent += self.block as usize;
            self.next_psn[self.stream as usize] = base + self.block;
            self.stream = (self.stream + 1) % streams;
        }
        sent
    }
}

/// `paths/depth_D/streams_S/{psns,stamps}`: as `stage`, with every packet from one source host
/// over four path-order paths, FIFO each (a block's first PSN, which comes last, on path 0, the
/// rest round paths 1-3), without path stamps (`psns`) and with them in send order (`stamps`):
/// the difference is what the stamp table costs, a gap on path 0 waiting for the source's
/// evidence and checked again on each of its packets.
fn paths_bench(c: &mut Criterion) {
    let tables = tor_tables(2, 4, SprayPolicy::RoundRobin);
    let mut g = c.benchmark_group("paths");
    g.throughput(Throughput::Elements(BATCH as u64));
    for streams in [1u32, 1_000] {
        for depth in [0u32, 4] {
            for stamped in [false, true] {
                let cfg = ReorderConfig {
                    max_streams: 131_072,
                    learn_ns: 0,
                    ..ReorderConfig::default()
                };
                let mut stage = ReorderStage::new(cfg, &tables, &[]);
                let mut pool: Vec<Pkt> =
                    (0..BATCH + 256).map(|_| Pkt::with_capacity(128)).collect();
                let mut out: Vec<(PortId, Pkt)> = Vec::with_capacity(BATCH * 2);
                // The four paths, all up (a worker tells its stage from its path table).
                stage.set_paths(4, 0, 0, &mut out);
                let mut next_psn = vec![0u32; streams as usize];
                let (mut stream, mut seq, mut now) = (0u32, 0u16, 1u64);
                let block = depth + 1;
                let mut order: Vec<(u32, u8, u16)> = Vec::with_capacity(block as usize);
                let name = if stamped { "stamps" } else { "psns" };
                g.bench_function(format!("depth_{depth}/streams_{streams}/{name}"), |b| {
                    b.iter(|| {
                        let mut sent = 0;
                        while sent < BATCH {
                            let base = next_psn[stream as usize];
                            order.clear();
                            // Stamps in send order (PSN order), 0 skipped.
                            let stamp_of = |k: u32| {
                                let s = seq.wrapping_add(k as u16 + 1);
                                if s == 0 || !stamped {
                                    0
                                } else {
                                    s
                                }
                            };
                            let first = (base, 0u8, stamp_of(0));
                            for k in 1..block {
                                order.push((base + k, 1 + ((k - 1) % 3) as u8, stamp_of(k)));
                            }
                            order.push(first);
                            seq = seq.wrapping_add(block as u16 + 1);
                            for &(p, path, st) in &order {
                                let pkt = pool.pop().unwrap_or_else(|| Pkt::with_capacity(128));
                                let meta = request(stream, p, path, st);
                                stage.insert(0, pkt, &meta, now, &mut out);
                            }
                            sent += block as usize;
                            next_psn[stream as usize] = base + block;
                            stream = (stream + 1) % streams;
                            now += 100;
                            pool.extend(out.drain(..).map(|(_, p)| p));
                        }
                        black_box(sent)
                    })
                });
            }
        }
    }
    g.finish();
}

struct Feed {
    template: Vec<u8>,
    pool: Vec<Pkt>,
    batch: Vec<Pkt>,
    psn: u32,
}

impl Feed {
    fn new() -> Feed {
        // From the fabric (uplink u0 = port 2) to the host behind downlink d0.
        let template = roce_frame(2, Ipv4Addr::new(10, 0, 0, 2), 0x11, 0, 1024);
        Feed {
            pool: (0..256).map(|_| Pkt::from_slice(&template)).collect(),
            template,
            batch: Vec::with_capacity(32),
            psn: 0,
        }
    }

    fn offer(&mut self, into: &mut MemPort) {
        for _ in 0..32 {
            if let Some(mut p) = self.pool.pop() {
                let f = p.data_mut();
                f[..54].copy_from_slice(&self.template[..54]);
                f[51..54].copy_from_slice(&self.psn.to_be_bytes()[1..]);
                self.psn = (self.psn + 1) & 0xFF_FFFF;
                self.batch.push(p);
            }
        }
        while !self.batch.is_empty() {
            into.tx_burst(0, &mut self.batch);
        }
    }

    fn collect(&mut self, from: &mut MemPort) -> usize {
        from.rx_burst(0, &mut self.pool, 256)
    }
}

fn pipeline(stage: Box<dyn DownlinkStage>) -> (Worker, Vec<MemPort>) {
    let tables = tor_tables(2, 4, SprayPolicy::RoundRobin);
    let mut far = Vec::new();
    let mut near: Vec<Box<dyn Port>> = Vec::new();
    for p in &tables.ports {
        let (a, b) = mem::link("far", &p.name, 1024);
        far.push(a);
        near.push(Box::new(b));
    }
    let (w, _) = Worker::standalone(tables, near, WorkerConfig::default(), stage);
    (w, far)
}

fn pipeline_bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pipeline_1KB");
    g.throughput(Throughput::Elements(32));
    let (mut host, mut sw_in) = mem::link("host", "in", 1024);
    let (mut sw_out, mut sink) = mem::link("out", "sink", 1024);
    let mut feed = Feed::new();
    let mut rx: Vec<Pkt> = Vec::with_capacity(32);
    g.bench_function("bare", |b| {
        b.iter(|| {
            feed.offer(&mut host);
            sw_in.rx_burst(0, &mut rx, 32);
            while !rx.is_empty() {
                sw_out.tx_burst(0, &mut rx);
            }
            black_box(feed.collect(&mut sink))
        })
    });
    let tables = tor_tables(2, 4, SprayPolicy::RoundRobin);
    let cfg = ReorderConfig {
        learn_ns: 0,
        ..ReorderConfig::default()
    };
    for (name, stage) in [
        (
            "routed_passthrough",
            Box::new(Passthrough) as Box<dyn DownlinkStage>,
        ),
        (
            "routed_reorder",
            Box::new(ReorderStage::new(cfg, &tables, &[])),
        ),
    ] {
        let (mut w, mut far) = pipeline(stage);
        let mut feed = Feed::new();
        let mut now = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                feed.offer(&mut far[2]);
                now += 1_000;
                w.iterate(now);
                black_box(feed.collect(&mut far[0]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, stage_bench, paths_bench, pipeline_bench);
criterion_main!(benches);
