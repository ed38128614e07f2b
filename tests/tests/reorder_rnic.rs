//! The reason sprayswitch exists, in one process: a Go-Back-N RNIC behind a ToR, traffic sprayed
//! over four paths with skewed delays. Without reordering the responder sees out-of-sequence
//! packets, NAKs and retransmissions; with the reorder stage it sees none when nothing is lost,
//! every transfer completes when a path loses 1%, and no READ is retried because an ACK
//! overtook its responses.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::switch::Stats;
use sprayswitch::wire::{Pmtu, Psn};
use sprayswitch_harness::rack::topo::{PathSpec, RackPair, RackPairSpec};
use sprayswitch_models::rnic::{
    Endpoint, Requester, RequesterStats, Responder, ResponderStats, Work,
};

struct Outcome {
    streams_b: Vec<sprayswitch::reorder::StreamRow>,
    hold_count_b: u64,
    hold_max_ns_b: u64,
    done: bool,
    req: RequesterStats,
    resp: ResponderStats,
    tor_a: Stats,
    tor_b: Stats,
}

/// The machine has 2 cores: run one rack pair at a time so that the ToRs' workers are not
/// starved for longer than a hold timeout by other tests' threads.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(spec: RackPairSpec, works: &[Work], secs: u64) -> Outcome {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut rp = RackPair::start(&spec).unwrap();
    let (a1, b1) = (&rp.hosts_a[0], &rp.hosts_b[0]);
    let ep_a = Endpoint {
        mac: a1.mac,
        gw_mac: a1.gw_mac,
        ip: IpAddr::V4(a1.ip4),
        peer_ip: IpAddr::V4(b1.ip4),
        peer_qpn: 0x22,
        sport: 49441,
    };
    let ep_b = Endpoint {
        mac: b1.mac,
        gw_mac: b1.gw_mac,
        ip: IpAddr::V4(b1.ip4),
        peer_ip: IpAddr::V4(a1.ip4),
        peer_qpn: 0x11,
        sport: 49441,
    };
    // Start near the wrap at 2^24, as random starting PSNs do.
    let start = Psn::new(0xFF_FF00);
    // Retransmission timeout 67 ms: perftest's default (timeout 14: 4.096 us x 2^14).
    let mut req = Requester::new(ep_a, start, Pmtu::DEFAULT, 128, 67_000_000);
    let mut resp = Responder::new(ep_b, start, Pmtu::DEFAULT, 8);
    for w in works {
        req.post(*w);
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let mut rx: Vec<Pkt> = Vec::with_capacity(256);
    while !req.done() && Instant::now() < deadline {
        let now = t0.elapsed().as_nanos() as u64 + 1;
        req.poll(now, &mut rp.hosts_a[0].port);
        let mut work = 0;
        rp.hosts_a[0].port.rx_burst(now, &mut rx, 256);
        work += rx.len();
        for p in rx.drain(..) {
            req.handle(p.data(), now);
        }
        rp.hosts_b[0].port.rx_burst(now, &mut rx, 256);
        work += rx.len();
        for p in rx.drain(..) {
            resp.handle(p.data(), now, &mut rp.hosts_b[0].port);
        }
        if work == 0 {
            std::thread::sleep(Duration::from_micros(30));
        }
    }
    let done = req.done();
    // Read what the control side can read while the workers run: streams and hold times
    // (published every 100 ms).
    std::thread::sleep(Duration::from_millis(250));
    let streams_b = rp.tor_b.streams(10, Duration::from_secs(1));
    assert_eq!(
        streams_b.silent,
        Vec::<usize>::new(),
        "every running worker answers"
    );
    let streams_b = streams_b.items;
    let (hold_count_b, hold_max_ns_b) = rp
        .tor_b
        .hold_histogram()
        .map_or((0, 0), |h| (h.len(), h.max()));
    let out = Outcome {
        streams_b,
        hold_count_b,
        hold_max_ns_b,
        done,
        req: req.stats,
        resp: resp.stats,
        tor_a: rp.tor_a.stats(),
        tor_b: rp.tor_b.stats(),
    };
    rp.stop();
    out
}

fn skewed(loss_on_path_2: f64, reorder: bool) -> RackPairSpec {
    let mut paths: Vec<PathSpec> = [0, 20_000, 50_000, 100_000].map(PathSpec::delay).to_vec();
    paths[2].loss = loss_on_path_2;
    RackPairSpec {
        paths,
        reorder: reorder.then(sprayswitch_tests::shared_cpu_reorder),
        ..RackPairSpec::default()
    }
}

#[test]
fn without_reorder_go_back_n_naks_and_retransmits() {
    let o = run(skewed(0.0, false), &vec![Work::Write(1024); 600], 30);
    eprintln!("no reorder: {:?} {:?}", o.req, o.resp);
    assert!(o.resp.out_of_sequence > 0, "{:?}", o.resp);
    assert!(o.resp.naks > 0 && o.req.naks > 0);
    assert!(o.req.retransmitted > 0, "{:?}", o.req);
    assert!(o.req.packets_sent > o.req.packets_needed);
}

#[test]
fn with_reorder_no_nak_no_retransmission_when_nothing_is_lost() {
    let o = run(skewed(0.0, true), &vec![Work::Write(1024); 3000], 60);
    eprintln!("reorder: {:?} {:?} {:?}", o.req, o.resp, o.tor_b.reorder);
    assert!(o.done, "{:?}", o.req);
    assert_eq!(o.resp.out_of_sequence, 0, "{:?}", o.resp);
    assert_eq!(
        (o.resp.naks, o.req.naks, o.req.retransmitted, o.req.timeouts),
        (0, 0, 0, 0)
    );
    assert_eq!(o.req.packets_sent, o.req.packets_needed);
    assert!(
        o.tor_b.reorder.held_total > 0,
        "the skewed paths did reorder: {:?}",
        o.tor_b.reorder
    );
    assert_eq!(o.tor_b.reorder.timeouts, 0);
    assert!(o.tor_a.sprayed >= 3000);
    // Observability from the control side, workers running.
    let row = o.streams_b.first().expect("tor-b reports its stream");
    assert_eq!(row.stats.released, 3000);
    assert_eq!(row.stats.held, 0);
    assert!(row.stats.max_depth > 0);
    assert_eq!(
        o.hold_count_b, o.tor_b.reorder.held_total,
        "one hold time per held packet"
    );
    // A stream's first packets wait out the learning window; a packet whose gap is still open
    // when learning ends waits at most one hold timeout more, or a timeout is counted (there
    // was none). The margin is for the worker's timer check on a shared machine.
    let cfg = sprayswitch_tests::shared_cpu_reorder();
    let bound = cfg.learn_ns + cfg.hold_timeout_ns + 2_000_000;
    assert!(
        o.hold_max_ns_b > 0 && o.hold_max_ns_b <= bound,
        "held {} ns, longer than the learning window and hold timeout allow ({bound} ns)",
        o.hold_max_ns_b
    );
}

#[test]
fn with_reorder_one_percent_loss_every_transfer_completes() {
    let o = run(skewed(0.01, true), &vec![Work::Write(1024); 3000], 90);
    eprintln!("loss: {:?} {:?} {:?}", o.req, o.resp, o.tor_b.reorder);
    assert!(o.done, "{:?}", o.req);
    assert_eq!(o.req.completed, 3000);
    assert!(
        o.req.retransmitted > 0,
        "losses were recovered by retransmission"
    );
    assert!(
        o.tor_b.reorder.timeouts + o.tor_b.reorder.path_losses > 0,
        "gaps were declared lost: {:?}",
        o.tor_b.reorder
    );
}

#[test]
fn read_heavy_no_read_retried_because_an_ack_overtook_it() {
    let works: Vec<Work> = (0..600)
        .map(|i| {
            if i % 2 == 0 {
                Work::Read(4096)
            } else {
                Work::Write(1024)
            }
        })
        .collect();
    let o = run(skewed(0.0, true), &works, 60);
    eprintln!("reads: {:?} {:?} {:?}", o.req, o.resp, o.tor_a.reorder);
    assert!(o.done, "{:?}", o.req);
    assert_eq!(o.req.read_retries, 0, "{:?}", o.req);
    assert_eq!(
        (o.resp.out_of_sequence, o.req.naks, o.req.retransmitted),
        (0, 0, 0)
    );
    assert!(
        o.tor_a.reorder.held_total > 0,
        "responses were reordered at the requester's ToR"
    );

    // The same traffic without reordering retries READs.
    let o = run(skewed(0.0, false), &works, 8);
    eprintln!("reads, no reorder: {:?} {:?}", o.req, o.resp);
    assert!(o.req.read_retries > 0 || o.req.naks > 0, "{:?}", o.req);
}
