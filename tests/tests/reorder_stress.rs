//! Multi-threaded stress: 4 workers, 10 million packets in release builds (`scripts/test.sh`
//! runs it so; a debug build runs 1 million; `STRESS_PACKETS` overrides both),
//! 4000 streams towards 4 downlinks, every stream's PSNs shuffled within blocks of 16 and
//! spread over 4 uplinks owned by different workers, so that each stream's packets cross
//! workers through the lock-free hand-off rings before the downlink owner reorders them. The
//! uplinks do not keep order (the shuffle is per block, not per path), so loss detection is by
//! timeout here.
//! Nothing may be lost or duplicated, and every stream must come out in order.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{bounded, Receiver, Sender};
use sprayswitch::pkt::Pkt;
use sprayswitch::port::mem::{self, MemPort};
use sprayswitch::port::Port;
use sprayswitch::reorder::{DownlinkStage, ReorderConfig, ReorderStage};
use sprayswitch::rng::Rng;
use sprayswitch::switch::{RunConfig, Switch};
use sprayswitch::tables::SprayPolicy;
use sprayswitch::testkit::{roce_frame, tor_tables};
use sprayswitch::worker::{IdlePolicy, WorkerConfig};

const STREAMS: u32 = 4000;
const BLOCK: u32 = 16;

fn psn_start(s: u32) -> u32 {
    // Spread starts over the PSN space, some right before the wrap.
    (s.wrapping_mul(2_654_435_761) ^ 0xFF_FF00) & 0xFF_FFFF
}

#[allow(clippy::too_many_arguments)]
fn generator(
    streams: Vec<u32>,
    per_stream: u32,
    mut uplinks: Vec<MemPort>,
    macs: Vec<[u8; 6]>,
    templates: Arc<Vec<Vec<u8>>>,
    recycle: Receiver<Pkt>,
    in_flight: Arc<AtomicU64>,
    seed: u64,
) -> Vec<MemPort> {
    let mut rng = Rng::new(seed);
    // Next block to send per stream, and the shuffled order inside the current block.
    let mut block = vec![0u32; streams.len()];
    let mut order: Vec<Vec<u32>> = vec![Vec::new(); streams.len()];
    let mut live: Vec<usize> = (0..streams.len()).collect();
    let mut cursor = 0usize;
    let mut out: Vec<Vec<Pkt>> = (0..uplinks.len()).map(|_| Vec::with_capacity(64)).collect();
    while !live.is_empty() {
        if in_flight.load(Ordering::Relaxed) > 20_000 {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        // One stream's next block of 16 PSNs, shuffled (the first block in order), in one go:
        // every gap it opens is filled within the same burst.
        for _ in 0..4 {
            if live.is_empty() {
                break;
            }
            // Streams take turns in rounds, in a new random order each round, so that one
            // stream never runs hundreds of PSNs ahead of its own delayed packets (with few
            // streams left, that would be a genuine window overflow, not a bug).
            if cursor == 0 {
                for i in (1..live.len()).rev() {
                    live.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
            let li = cursor;
            let k = live[li];
            let base = block[k] * BLOCK;
            let n = BLOCK.min(per_stream - base);
            let order = &mut order[k];
            order.clear();
            // PSN start+0 of every stream went out in the warm-up.
            order.extend(base.max(1)..base + n);
            if block[k] > 0 {
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
            block[k] += 1;
            cursor += 1;
            if cursor >= live.len() {
                cursor = 0;
                live.retain(|k| block[*k] * BLOCK < per_stream);
            }
            let s = streams[k];
            let t = &templates[(s % 4) as usize];
            for &idx in order.iter() {
                let mut p = recycle
                    .try_recv()
                    .unwrap_or_else(|_| Pkt::with_capacity(128));
                p.set_data(t);
                let f = p.data_mut();
                // UDP source port, DestQP and PSN (the switch does not check the ICRC).
                f[34..36].copy_from_slice(&(0xC000u16 | (s as u16 & 0x3FFF)).to_be_bytes());
                f[47..50].copy_from_slice(&s.to_be_bytes()[1..]);
                let psn = (psn_start(s) + idx) & 0xFF_FFFF;
                f[51..54].copy_from_slice(&psn.to_be_bytes()[1..]);
                let u = rng.below(uplinks.len() as u64) as usize;
                f[0..6].copy_from_slice(&macs[u]);
                out[u].push(p);
                in_flight.fetch_add(1, Ordering::Relaxed);
            }
        }
        for (u, q) in out.iter_mut().enumerate() {
            while !q.is_empty() {
                if uplinks[u].tx_burst(0, q) == 0 {
                    std::thread::yield_now();
                }
            }
        }
    }
    uplinks
}

#[test]
fn four_workers_ten_million_packets_in_order_nothing_lost() {
    let default = if cfg!(debug_assertions) {
        1_000_000
    } else {
        10_000_000
    };
    let total: u64 = std::env::var("STRESS_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let per_stream = (total / u64::from(STREAMS)).max(u64::from(BLOCK)) as u32;
    let total = u64::from(per_stream) * u64::from(STREAMS);

    let mut tables = tor_tables(4, 4, SprayPolicy::RoundRobin);
    // Uplink-to-downlink traffic only: routes for the hosts exist (connected, static).
    tables.policy = SprayPolicy::RoundRobin;
    // The generator shuffles PSNs within each uplink too, which no FIFO path does: loss is
    // told by the hold timeout here (path order is tested where the paths keep order).
    for g in &mut tables.groups {
        g.loss_detection = sprayswitch::tables::LossDetection::Timeout;
    }
    let mut far_up = Vec::new();
    let mut far_down = Vec::new();
    let mut near: Vec<Box<dyn Port>> = Vec::new();
    for p in &tables.ports {
        let (a, b) = mem::link("far", &p.name, 16_384);
        if p.name.starts_with('u') {
            far_up.push(a);
        } else {
            far_down.push(a);
        }
        near.push(Box::new(b));
    }
    let rcfg = ReorderConfig {
        window: 256,
        max_streams: 8192,
        max_rings: 4096,
        // Scheduling on 2 shared cores, not loss, decides how late a packet can be here.
        hold_timeout_ns: 2_000_000_000,
        // Streams start from the warm-up packet (learning is tested elsewhere; here queueing
        // on 2 shared cores can exceed any learning window).
        learn_ns: 0,
        ..ReorderConfig::default()
    };
    let t2 = tables.clone();
    let run = RunConfig {
        workers: 4,
        // d0..d3 are ports 0..3, u0..u3 ports 4..7: worker i owns d_i and u_i.
        assignment: Some(vec![0, 1, 2, 3, 0, 1, 2, 3]),
        cores: None,
        worker: WorkerConfig {
            burst: 32,
            flush_ns: 10_000,
            tx_queue_limit: 8192,
            idle: IdlePolicy::Backoff {
                spins: 50,
                yields: 50,
                sleep_us: 20,
            },
        },
        seed: 7,
    };
    let switch = Switch::start_with(tables, near, run, move |_| -> Box<dyn DownlinkStage> {
        Box::new(ReorderStage::new(rcfg, &t2, &[]))
    })
    .unwrap();

    // Frames from a remote host to each downlink host, patched per packet.
    let templates: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..4u8)
            .map(|d| {
                // From a remote host; the generator stamps the receiving uplink's MAC.
                roce_frame(0, Ipv4Addr::new(10, 0, d, 2), 1, 0, 16)
            })
            .collect(),
    );
    let in_flight = Arc::new(AtomicU64::new(0));
    let (tx_recycle, rx_recycle): (Sender<Pkt>, Receiver<Pkt>) = bounded(65_536);

    // Warm-up: PSN start+0 of every stream, in order, received before the shuffled traffic.
    let up_macs0: Vec<[u8; 6]> = (4..8).map(sprayswitch::testkit::port_mac).collect();
    let mut warm = Vec::with_capacity(STREAMS as usize);
    for s in 1..=STREAMS {
        let mut p = Pkt::with_capacity(128);
        p.set_data(&templates[(s % 4) as usize]);
        let f = p.data_mut();
        f[0..6].copy_from_slice(&up_macs0[0]);
        f[34..36].copy_from_slice(&(0xC000u16 | (s as u16 & 0x3FFF)).to_be_bytes());
        f[47..50].copy_from_slice(&s.to_be_bytes()[1..]);
        f[51..54].copy_from_slice(&psn_start(s).to_be_bytes()[1..]);
        warm.push(p);
    }
    while !warm.is_empty() {
        far_up[0].tx_burst(0, &mut warm);
    }
    let mut warmed = 0;
    let mut batch = Vec::with_capacity(256);
    let warm_deadline = Instant::now() + Duration::from_secs(60);
    while warmed < STREAMS && Instant::now() < warm_deadline {
        for d in far_down.iter_mut() {
            d.rx_burst(0, &mut batch, 256);
            for p in batch.drain(..) {
                let f = p.data();
                assert_eq!(
                    u32::from_be_bytes([0, f[51], f[52], f[53]]),
                    psn_start(u32::from_be_bytes([0, f[47], f[48], f[49]]))
                );
                warmed += 1;
            }
        }
    }
    assert_eq!(warmed, STREAMS, "every stream started");

    // Two generators, each owning two uplinks' far ends (a ring end has one producer).
    let up_macs: Vec<[u8; 6]> = (4..8).map(sprayswitch::testkit::port_mac).collect();
    let mut gens = Vec::new();
    let mut ups = far_up.into_iter();
    for g in 0..2u32 {
        let mine: Vec<MemPort> = (0..2).filter_map(|_| ups.next()).collect();
        let macs = vec![up_macs[(2 * g) as usize], up_macs[(2 * g + 1) as usize]];
        let streams: Vec<u32> = (0..STREAMS).filter(|s| s % 2 == g).map(|s| s + 1).collect();
        let (templates, rx, fl) = (templates.clone(), rx_recycle.clone(), in_flight.clone());
        gens.push(std::thread::spawn(move || {
            generator(
                streams,
                per_stream,
                mine,
                macs,
                templates,
                rx,
                fl,
                100 + u64::from(g),
            )
        }));
    }

    // Sink: every stream must arrive in order from its start, exactly once.
    let t0 = Instant::now();
    let mut next = vec![1u32; (STREAMS + 1) as usize];
    let mut received = u64::from(STREAMS);
    let mut violations = 0u64;
    let deadline = t0 + Duration::from_secs(600);
    while received < total && Instant::now() < deadline {
        let mut got = 0;
        for d in far_down.iter_mut() {
            got += d.rx_burst(0, &mut batch, 256);
            for p in batch.drain(..) {
                let f = p.data();
                let s = u32::from_be_bytes([0, f[47], f[48], f[49]]);
                let psn = u32::from_be_bytes([0, f[51], f[52], f[53]]);
                let want = (psn_start(s) + next[s as usize]) & 0xFF_FFFF;
                if psn != want {
                    if violations < 5 {
                        let off = psn.wrapping_sub(psn_start(s)) & 0xFF_FFFF;
                        eprintln!(
                            "stream {s}: got PSN start+{off}, want start+{}",
                            next[s as usize]
                        );
                    }
                    violations += 1;
                } else {
                    next[s as usize] += 1;
                }
                received += 1;
                let _ = tx_recycle.try_send(p);
            }
        }
        in_flight.fetch_sub(got as u64, Ordering::Relaxed);
        if got == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    for g in gens {
        g.join().unwrap();
    }
    let elapsed = t0.elapsed();
    let stopped = switch.stop();
    let r = stopped.stats.reorder;
    eprintln!(
        "stress: {received} of {total} packets in {:.1} s ({:.2} Mpps), violations {violations}, handoffs {}, held_total {}, max_depth {}, drops {} {r:?}",
        elapsed.as_secs_f64(),
        received as f64 / elapsed.as_secs_f64() / 1e6,
        stopped.stats.handoff_out,
        r.held_total,
        r.max_depth,
        stopped.stats.drops_total()
    );
    assert_eq!(violations, 0, "every stream in order");
    assert_eq!(received, total, "nothing lost");
    assert!(
        next[1..].iter().all(|n| *n == per_stream),
        "each stream complete, no duplicates"
    );
    assert_eq!(stopped.stats.drops_total(), 0);
    assert_eq!(
        (r.late, r.duplicates, r.timeouts, r.overflows),
        (0, 0, 0, 0),
        "{r:?}"
    );
    assert!(
        r.held_total > total / 10,
        "the shuffling made it hold packets: {r:?}"
    );
    assert!(
        stopped.stats.handoff_out > total / 4,
        "streams crossed workers"
    );
}
