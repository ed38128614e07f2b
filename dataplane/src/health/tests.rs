//! Two monitors, ToR A and ToR B, joined by four paths that lose what each test says, on a
//! clock of the test's own.

use std::net::IpAddr;

use crossbeam::utils::CachePadded;

use super::*;
use crate::tables::status::PortStatus;
use crate::tables::SprayPolicy;
use crate::testkit::tor_tables;
use crate::wire::probe::PROBE_UDP_PORT;

const A: &str = "10.0.0.1";
const B: &str = "10.9.0.1";
const PATHS: usize = 4;
/// Uplink `u0` is port 1 (one downlink first).
const U0: PortId = 1;

struct Side {
    t: Tables,
    mon: PathMonitor,
    board: HealthBoard,
    status: Vec<CachePadded<PortStatus>>,
    addr: IpAddr,
}

impl Side {
    fn new(addr: &str, peer: &str, seed: u64) -> Side {
        let mut t = tor_tables(1, PATHS, SprayPolicy::RoundRobin);
        let addr: IpAddr = addr.parse().unwrap();
        let mut spec = HealthSpec::new(vec![peer.parse().unwrap()]);
        spec.source_v4 = Some(addr);
        t.groups[0].health = Some(spec);
        let board = HealthBoard::new(t.ports.len());
        let status: Vec<_> = (0..t.ports.len())
            .map(|_| CachePadded::new(PortStatus::new_up()))
            .collect();
        let mut mon = PathMonitor::new(seed);
        let owned: Vec<PortId> = (0..t.ports.len() as PortId).collect();
        mon.configure(&t, &owned, &board, &status, 0);
        Side {
            t,
            mon,
            board,
            status,
            addr,
        }
    }

    fn sprayed(&self, path: usize) -> bool {
        self.status[usize::from(U0) + path].sprayable()
    }

    fn report(&self, path: usize, now: u64) -> PathReport {
        self.mon.report(U0 + path as PortId, &self.t, now).unwrap()
    }
}

/// The paths' loss at a time, per path (both directions alike).
type LossAt = dyn Fn(u64) -> [f64; PATHS];

struct Run {
    a: Side,
    b: Side,
    rng: Rng,
    now: u64,
    /// A port of B's that B's worker does not drain (it has fallen behind on it).
    b_behind: Option<PortId>,
    /// Probes of A's in flight: (due, port, payload), delivered to B at their time.
    late: Vec<(u64, PortId, [u8; 32])>,
    /// Extra delay of A's probes per path (a sender, or an emulated path, that fell behind).
    a_delay_ns: [u64; PATHS],
    /// A's thread does not run until then: it sends nothing.
    a_stalled_until: u64,
}

impl Run {
    fn new() -> Run {
        Run {
            a: Side::new(A, B, 1),
            b: Side::new(B, A, 2),
            rng: Rng::new(7),
            now: 0,
            b_behind: None,
            late: Vec::new(),
            a_delay_ns: [0; PATHS],
            a_stalled_until: 0,
        }
    }

    /// Runs until `end` in steps of 20 us; calls `each` after every step.
    fn until(&mut self, end: u64, loss: &LossAt, mut each: impl FnMut(&Run)) {
        while self.now < end {
            self.now += 20_000;
            let now = self.now;
            let l = loss(now);
            for from_a in [true, false] {
                if from_a && now < self.a_stalled_until {
                    continue;
                }
                let (tx, rx) = if from_a {
                    (&mut self.a, &mut self.b)
                } else {
                    (&mut self.b, &mut self.a)
                };
                let behind = if from_a { None } else { self.b_behind };
                for p in 0..PATHS as PortId {
                    tx.mon.note_rx(U0 + p, behind != Some(U0 + p), now);
                }
                tx.mon.poll(&tx.t, now, &tx.board, &tx.status);
                let src = tx.addr;
                let probes: Vec<ProbeFrame> = tx.mon.take_probes().collect();
                for p in probes {
                    let path = usize::from(p.port - U0);
                    if self.rng.chance(l[path]) {
                        continue;
                    }
                    let f = &p.bytes[..p.len];
                    // Ethernet, IPv4 (20), UDP: the payload at 42, to the probe port.
                    assert_eq!(u16::from_be_bytes([f[36], f[37]]), PROBE_UDP_PORT);
                    if from_a && self.a_delay_ns[path] > 0 {
                        let mut payload = [0u8; 32];
                        payload.copy_from_slice(&f[42..74]);
                        self.late
                            .push((now + self.a_delay_ns[path], p.port, payload));
                        continue;
                    }
                    assert!(rx.mon.handle(p.port, src, &f[42..], now));
                }
            }
            let (due, later): (Vec<_>, Vec<_>) =
                self.late.drain(..).partition(|(at, _, _)| *at <= now);
            self.late = later;
            for (_, port, payload) in due {
                self.b.mon.handle(port, self.a.addr, &payload, now);
            }
            each(self);
        }
    }
}

fn clean(_: u64) -> [f64; PATHS] {
    [0.0; PATHS]
}

#[test]
fn clean_paths_stay_in_and_probes_flow_both_ways() {
    let mut r = Run::new();
    r.until(1_000_000_000, &clean, |r| {
        for p in 0..PATHS {
            assert!(
                r.a.sprayed(p) && r.b.sprayed(p),
                "path {p} out at {}",
                r.now
            );
        }
    });
    let rep = r.a.report(1, r.now);
    assert!(rep.monitored && rep.sprayed && rep.outs == 0);
    assert_eq!(rep.state, PathState::In);
    let peer = &rep.peers[0];
    assert_eq!(peer.peer, B.parse::<IpAddr>().unwrap());
    assert_eq!(peer.fast.unwrap().lost, 0);
    assert!(peer.peer_sprays);
    let c = r.a.mon.counts(U0 + 1, &r.a.t).unwrap();
    assert!(c.probes_tx >= 9_999 && c.probes_rx >= 9_999, "{c:?}");
}

#[test]
fn a_dead_path_is_out_within_twelve_intervals_and_only_it() {
    let mut r = Run::new();
    let fail = 50_000_000;
    let dead = move |now: u64| {
        let mut l = [0.0; PATHS];
        if now >= fail {
            l[1] = 1.0;
        }
        l
    };
    let mut out_at = None;
    r.until(fail + 50_000_000, &dead, |r| {
        if !r.a.sprayed(1) && out_at.is_none() {
            out_at = Some(r.now);
        }
        for p in [0, 2, 3] {
            assert!(r.a.sprayed(p) && r.b.sprayed(p), "healthy path {p} out");
        }
    });
    let took = out_at.expect("the dead path never left") - fail;
    // Five silent intervals after the last probe heard (50 us each), then the next judgement:
    // 0.3 ms in the demo; 12 intervals allow for the probes' phase against the failure.
    assert!(took <= 600_000, "out after {took} ns");
    assert!(!r.b.sprayed(1), "the other side takes it out too");
    assert!(r.a.report(1, r.now).reason.starts_with("dead"));
    assert!(
        r.b.mon.rx_dead(U0 + 1),
        "nothing arrives over it while the peer is heard elsewhere"
    );
    assert!(!r.b.mon.rx_dead(U0));
}

#[test]
fn a_path_losing_30_percent_is_out_within_10_ms_and_one_losing_1_percent_stays() {
    for seed in 0..8 {
        let mut r = Run::new();
        r.rng = Rng::new(seed);
        let fail = 100_000_000;
        let lossy = move |now: u64| {
            if now >= fail {
                [0.01, 0.3, 0.0, 0.0]
            } else {
                [0.01, 0.0, 0.0, 0.0]
            }
        };
        let mut out_at = None;
        r.until(fail + 300_000_000, &lossy, |r| {
            if !r.a.sprayed(1) && out_at.is_none() {
                out_at = Some(r.now);
            }
            assert!(
                r.a.sprayed(0),
                "seed {seed}: the 1% path went out at {}: {:?}",
                r.now,
                r.a.report(0, r.now)
            );
        });
        let took = out_at.expect("the lossy path never left") - fail;
        assert!(took <= 10_000_000, "seed {seed}: out after {took} ns");
        // A no longer sprays over it and says so, but its probes are no proof that nothing
        // sprayed before is still on the way: B keeps waiting for the path.
        assert!(!r.b.mon.rx_dead(U0 + 1), "seed {seed}");
        assert!(!r.b.mon.report(U0 + 1, &r.b.t, r.now).unwrap().peers[0].peer_sprays);
    }
}

#[test]
fn one_percent_loss_on_every_path_takes_none_out() {
    let mut r = Run::new();
    r.until(20_000_000_000, &|_| [0.01; PATHS], |r| {
        for p in 0..PATHS {
            assert!(
                r.a.sprayed(p) && r.b.sprayed(p),
                "path {p} out at {}",
                r.now
            );
        }
    });
    for p in 0..PATHS {
        assert_eq!(r.a.report(p, r.now).outs, 0);
    }
}

#[test]
fn a_path_losing_5_percent_goes_out_on_the_long_window() {
    let mut r = Run::new();
    let mut out_at = None;
    r.until(1_000_000_000, &|_| [0.0, 0.05, 0.0, 0.0], |r| {
        if !r.a.sprayed(1) && out_at.is_none() {
            out_at = Some(r.now);
        }
    });
    let at = out_at.expect("a 5% path stays in");
    assert!(at <= 300_000_000, "out after {at} ns");
    assert!(r.a.report(1, r.now).reason.contains("1024"));
}

#[test]
fn when_every_path_loses_alike_none_goes_out() {
    // The peer is gone (every path silent), or every path loses alike: no member is worse.
    let mut r = Run::new();
    r.until(
        500_000_000,
        &|now| [if now > 10_000_000 { 1.0 } else { 0.0 }; PATHS],
        |r| {
            for p in 0..PATHS {
                assert!(r.a.sprayed(p), "path {p} out at {}", r.now);
                assert!(!r.b.mon.rx_dead(U0 + p as PortId));
            }
        },
    );
    let mut r = Run::new();
    r.until(500_000_000, &|_| [0.2; PATHS], |r| {
        for p in 0..PATHS {
            assert!(
                r.a.sprayed(p),
                "path {p} out at {}: {:?}",
                r.now,
                r.a.report(p, r.now)
            );
        }
    });
}

#[test]
fn a_repaired_path_comes_back_after_the_restore_time_not_at_the_first_good_probe() {
    let mut r = Run::new();
    let (fail, repair) = (50_000_000, 100_000_000);
    let outage = move |now: u64| {
        let mut l = [0.0; PATHS];
        if (fail..repair).contains(&now) {
            l[2] = 1.0;
        }
        l
    };
    let mut back_at = None;
    r.until(repair + 400_000_000, &outage, |r| {
        if r.now > fail + 1_000_000 && r.now < repair {
            assert!(!r.a.sprayed(2));
        }
        if r.now > repair && r.a.sprayed(2) && back_at.is_none() {
            back_at = Some(r.now);
        }
    });
    let back = back_at.expect("never came back") - repair;
    assert!(
        (200_000_000..=201_000_000).contains(&back),
        "back {back} ns after the repair"
    );
    assert_eq!(r.a.report(2, r.now).state, PathState::In);
}

#[test]
fn a_flapping_path_stays_out_longer_each_time() {
    let mut r = Run::new();
    // Dead for 5 ms in every 300 ms: clean for longer than one restore time, not two.
    let flap = |now: u64| {
        let mut l = [0.0; PATHS];
        if now % 300_000_000 < 5_000_000 && now > 1_000_000 {
            l[3] = 1.0;
        }
        l
    };
    let mut in_time = 0u64;
    r.until(3_000_000_000, &flap, |r| {
        if r.a.sprayed(3) && r.now > 600_000_000 {
            in_time += 20_000;
        }
    });
    let rep = r.a.report(3, r.now);
    assert!(rep.outs >= 2, "{rep:?}");
    assert!(rep.restore_ns >= 400_000_000, "damped: {rep:?}");
    // After its second failure the path stays out: it never has 400 ms clean.
    assert!(
        in_time < 300_000_000,
        "in for {in_time} ns after its second failure"
    );
}

#[test]
fn a_worker_behind_on_its_ports_does_not_take_silence_for_death() {
    for behind in [true, false] {
        let mut r = Run::new();
        r.until(50_000_000, &clean, |_| {});
        // For 2 ms nothing of path 3 reaches B: its probes wait in a port B's worker has not
        // drained (it fell behind), or (the control) the path is dead.
        r.b_behind = behind.then_some(U0 + 3);
        let start = r.now;
        let mut out = false;
        r.until(start + 2_000_000, &|_| [0.0, 0.0, 0.0, 1.0], |r| {
            out |= !r.b.sprayed(3);
        });
        assert_eq!(out, !behind, "behind: {behind}");
    }
}

#[test]
fn a_sender_that_stalls_is_not_a_dead_path() {
    for stall_ns in [300_000, 2_000_000, 20_000_000] {
        let mut r = Run::new();
        r.until(50_000_000, &clean, |_| {});
        // A's thread stalls right after its probes over path 0 left it, while those over paths
        // 1 to 3 (longer emulated paths, released later by the same thread) did not: B hears
        // them, and nothing else of A's, only when A runs again.
        r.a_delay_ns = [0, stall_ns, stall_ns, stall_ns];
        r.until(50_020_000, &clean, |_| {});
        r.a_delay_ns = [0; PATHS];
        r.a_stalled_until = r.now + stall_ns;
        r.until(60_000_000 + stall_ns, &clean, |r| {
            for p in 0..PATHS {
                assert!(
                    r.b.sprayed(p),
                    "stall {stall_ns}: path {p} out at {}",
                    r.now
                );
                assert!(!r.b.mon.rx_dead(U0 + p as PortId));
            }
        });
    }
}

#[test]
fn probes_late_on_one_path_only_count_as_lost_until_they_come() {
    // A's probes over path 1 alone take 2 ms longer (a queue in the network-control class):
    // from B that is silence while A is heard elsewhere, like loss.
    let mut r = Run::new();
    r.until(50_000_000, &clean, |_| {});
    r.a_delay_ns = [0, 2_000_000, 0, 0];
    r.until(53_000_000, &clean, |_| {});
    assert!(!r.b.sprayed(1));
}

#[test]
fn pins_override_health_and_work_without_it() {
    let mut r = Run::new();
    r.a.t.ports[usize::from(U0)].path_pin = PathPin::Out;
    let owned: Vec<PortId> = (0..r.a.t.ports.len() as PortId).collect();
    r.a.mon
        .configure(&r.a.t, &owned, &r.a.board, &r.a.status, r.now);
    assert!(!r.a.sprayed(0));
    // Pinned in while dead: stays in.
    r.a.t.ports[usize::from(U0)].path_pin = PathPin::In;
    r.a.mon
        .configure(&r.a.t, &owned, &r.a.board, &r.a.status, r.now);
    r.until(100_000_000, &|_| [1.0, 0.0, 0.0, 0.0], |r| {
        assert!(r.a.sprayed(0));
    });
    assert_eq!(
        r.a.report(0, r.now).state,
        PathState::Out,
        "its health says out"
    );
    // A group without health: the pin alone.
    let mut t = tor_tables(1, PATHS, SprayPolicy::RoundRobin);
    t.ports[2].path_pin = PathPin::Out;
    let board = HealthBoard::new(t.ports.len());
    let status: Vec<_> = (0..t.ports.len())
        .map(|_| CachePadded::new(PortStatus::new_up()))
        .collect();
    let mut m = PathMonitor::new(3);
    m.configure(&t, &owned, &board, &status, 0);
    assert!(m.next_due().is_none(), "nothing to probe");
    assert!(!status[2].sprayable() && status[1].sprayable());
}

#[test]
fn a_restarted_peer_is_not_a_failure() {
    // Another session number, or the same one drawn again (its counts start over).
    for seed in [99, 2] {
        let mut r = Run::new();
        r.until(100_000_000, &clean, |_| {});
        r.b = Side::new(B, A, seed);
        r.until(300_000_000, &clean, |r| {
            for p in 0..PATHS {
                assert!(r.a.sprayed(p), "seed {seed}: path {p} out at {}", r.now);
            }
        });
    }
}

#[test]
fn probes_from_strangers_and_garbage_are_counted_not_taken() {
    let mut r = Run::new();
    let stranger: IpAddr = "10.9.9.9".parse().unwrap();
    let mut payload = [0u8; 32];
    ProbeRepr::default().emit(&mut payload).unwrap();
    assert!(!r.a.mon.handle(U0, stranger, &payload, 1));
    assert!(!r.a.mon.handle(U0, B.parse().unwrap(), &payload[..10], 1));
    assert!(
        !r.a.mon.handle(0, B.parse().unwrap(), &payload, 1),
        "a downlink"
    );
    assert_eq!(r.a.mon.unknown, 3);
    r.now = 0;
}

#[test]
fn cells_round_trip_through_the_board() {
    let b = HealthBoard::new(3);
    assert_eq!(b.get(2, 5), None);
    let c = Cell {
        silent: true,
        fast: Some(0.25),
        slow: None,
        peer_sent: None,
    };
    b.set(2, 5, c);
    assert_eq!(b.get(2, 5), Some(c));
    let c = Cell {
        silent: false,
        fast: Some(1.0),
        slow: Some(0.031_25),
        peer_sent: Some((7, 0xffff_fff0)),
    };
    b.set(2, 5, c);
    assert_eq!(b.get(2, 5), Some(c));
    b.clear(2);
    assert_eq!(b.get(2, 5), None);
    b.set(9, 0, c); // out of range: ignored
}

#[test]
#[ignore]
fn detection_time_distribution() {
    let mut v = Vec::new();
    for seed in 0..200 {
        let mut r = Run::new();
        r.rng = Rng::new(seed);
        let fail = 100_000_000;
        let lossy = move |now: u64| {
            if now >= fail {
                [0.0, 0.3, 0.0, 0.0]
            } else {
                [0.0; 4]
            }
        };
        let mut out_at = None;
        r.until(fail + 50_000_000, &lossy, |r| {
            if !r.a.sprayed(1) && out_at.is_none() {
                out_at = Some(r.now);
            }
        });
        v.push(out_at.map_or(99.0, |t| (t - fail) as f64 / 1e6));
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!(
        "p50 {} p90 {} p99 {} max {}",
        v[100], v[180], v[198], v[199]
    );
}
