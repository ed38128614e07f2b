//! The reorder engine against real transports: Soft-RoCE QP models (`sprayswitch_models::rxe`,
//! written from rxe's state machines, not from the engine) behind a rack pair whose every
//! packet is sprayed over four skewed paths, on a virtual clock. When nothing is lost, no model
//! may count a sequence error, implied NAK, duplicate or retry, on any RC workload; without the
//! reorder stage the same workloads do (so the oracle can fail). With loss on a path every
//! transfer still completes.

use proptest::prelude::*;
use sprayswitch::reorder::ReorderConfig;
use sprayswitch::tables::SprayPolicy;
use sprayswitch::wire::{Pmtu, Psn};
use sprayswitch_harness::qp_rack::{run, Connection, RunReport, Step};
use sprayswitch_harness::rack::topo::{PathSpec, RackPairSpec};
use sprayswitch_models::rxe::{Device, QpConfig, Verb};

/// Four paths of 2 Gbit/s with 0/20/50/100 us of delay: 100 us of skew is about 25 packets of
/// 1 KiB per path, well within the reorder window.
fn fabric(reorder: bool, loss_on_path_1: f64, workers: usize) -> RackPairSpec {
    let paths = [0u64, 20_000, 50_000, 100_000]
        .iter()
        .enumerate()
        .map(|(i, d)| PathSpec {
            delay_ns: *d,
            jitter_ns: 0,
            loss: if i == 1 { loss_on_path_1 } else { 0.0 },
            loss_schedule: Vec::new(),
            rate_bps: Some(2_000_000_000),
        })
        .collect();
    RackPairSpec {
        paths,
        policy: SprayPolicy::RoundRobin,
        workers,
        link_capacity: 65_536,
        // Jumbo frames, so that QPs can run at path MTU 4096 (the ports' own path MTU is then
        // 4096 too: a QP at 1024 beside them is the mixed case).
        mtu: 9000,
        // The learning window and the hold timeout must exceed the paths' skew (100 us of
        // delay plus what queues on them); 64 QPs starting at once queue for about a ms.
        reorder: reorder.then(|| ReorderConfig {
            idle_evict_ns: 20_000_000,
            learn_ns: 2_000_000,
            hold_timeout_ns: 4_000_000,
            ..ReorderConfig::default()
        }),
        ..RackPairSpec::default()
    }
}

fn conn(i: u32, device: Device, pmtu: u32, script: Vec<Step>) -> Connection {
    let mut cfg = QpConfig::rc(device);
    cfg.pmtu = Pmtu::new(pmtu).unwrap();
    Connection {
        a_host: 0,
        b_host: 0,
        a_qpn: 0x100 + i,
        b_qpn: 0x900 + i,
        sport: 0xC000 | (0x1234 + i as u16 * 7) & 0x3FFF,
        a_cfg: cfg,
        b_cfg: cfg,
        a_psn: Psn::new(0xFF_FF00u32.wrapping_add(i * 0x35_791) & 0xFF_FFFF),
        b_psn: Psn::new(0x12_3400u32.wrapping_add(i * 0x51_337) & 0xFF_FFFF),
        cm: false,
        script,
        drop_requests: Vec::new(),
    }
}

/// 100 ms of virtual time in 1 us steps, at most.
fn go(spec: &RackPairSpec, conns: &[Connection]) -> RunReport {
    run(spec, conns, 1_000, 400_000_000, 2_000_000).unwrap()
}

fn assert_clean(r: &RunReport, what: &str) {
    for (i, c) in r.connections.iter().enumerate() {
        assert!(
            c.finished && !c.error,
            "{what}: connection {i} did not finish: {c:?}"
        );
        assert_eq!(c.failed, 0, "{what}: connection {i}");
        assert_eq!(c.completed, c.posted, "{what}: connection {i}");
        assert_eq!(
            (c.a.transport_errors(), c.b.transport_errors()),
            (0, 0),
            "{what}: connection {i}: requester {:?} responder {:?}",
            c.a,
            c.b
        );
    }
    for (name, t) in [("tor-a", &r.tor_a), ("tor-b", &r.tor_b)] {
        assert_eq!(t.drops_total(), 0, "{what}: {name} dropped");
        assert_eq!(t.reorder.held_now, 0, "{what}: {name} still holds packets");
    }
}

fn writes_and_reads() -> Vec<Step> {
    vec![
        Step::Post(vec![Verb::Write { len: 65_536 }; 8]),
        Step::Post(vec![Verb::Read { len: 65_536 }; 4]),
        Step::Post(vec![Verb::Send { len: 4096 }; 8]),
    ]
}

#[test]
fn without_reorder_the_oracle_sees_the_spraying() {
    let r = go(
        &fabric(false, 0.0, 1),
        &[conn(0, Device::RXE, 1024, writes_and_reads())],
    );
    let c = &r.connections[0];
    assert!(
        c.a.transport_errors() + c.b.transport_errors() > 0,
        "spraying without reorder must show: {c:?}"
    );
}

#[test]
fn every_rc_verb_in_order_through_spray_and_reorder() {
    let script = vec![
        Step::Post(vec![Verb::Write { len: 65_536 }; 16]),
        Step::Post(vec![Verb::WriteImm { len: 8192 }; 8]),
        Step::Post(vec![Verb::Send { len: 10_000 }; 8]),
        Step::Post(vec![Verb::Read { len: 65_536 }; 8]),
        Step::Post(vec![Verb::CompareSwap, Verb::FetchAdd, Verb::CompareSwap]),
        Step::Post(vec![Verb::Flush, Verb::AtomicWrite, Verb::Flush]),
        Step::Post(vec![
            Verb::Write { len: 4096 },
            Verb::Read { len: 4096 },
            Verb::FetchAdd,
            Verb::Send { len: 100 },
            Verb::Read { len: 100 },
            Verb::AtomicWrite,
        ]),
    ];
    for device in [Device::RXE, Device::CONNECTX5, Device::CONNECTX6] {
        let r = go(
            &fabric(true, 0.0, 1),
            &[conn(0, device, 1024, script.clone())],
        );
        assert_clean(&r, device.name);
    }
}

#[test]
fn rxe_with_128_reads_outstanding_and_reads_larger_than_the_window() {
    let script = vec![
        Step::Post(vec![Verb::Read { len: 4096 }; 128]),
        Step::Post(vec![Verb::Read { len: 1 << 20 }; 3]),
        Step::Post(vec![
            Verb::Write { len: 1 << 20 },
            Verb::Read { len: 1 << 20 },
        ]),
    ];
    let r = go(&fabric(true, 0.0, 1), &[conn(0, Device::RXE, 1024, script)]);
    assert_clean(&r, "128 READs");
}

#[test]
fn sixty_four_qps_on_one_udp_port_and_mixed_path_mtus_on_two_workers() {
    let conns: Vec<Connection> = (0..64)
        .map(|i| {
            let mut c = conn(
                i,
                if i % 3 == 0 {
                    Device::CONNECTX6
                } else {
                    Device::RXE
                },
                if i % 2 == 0 { 1024 } else { 4096 },
                vec![
                    Step::Post(vec![
                        Verb::Write { len: 16_384 },
                        Verb::Read { len: 16_384 },
                    ]),
                    Step::Post(vec![Verb::Send { len: 2048 }, Verb::FetchAdd]),
                ],
            );
            c.sport = 0xC123;
            c
        })
        .collect();
    let r = go(&fabric(true, 0.0, 2), &conns);
    assert_clean(&r, "64 QPs");
}

#[test]
fn eight_qps_reading_both_ways_at_once() {
    // perftest's ib_read_bw -o 64 -q 8 -b: each QP requester and responder together, 64 READs
    // outstanding each way, RoCE MTU 4096 and 1024.
    for pmtu in [4096, 1024] {
        let conns: Vec<Connection> = (0..8)
            .map(|i| {
                let mut c = conn(
                    i,
                    Device::RXE,
                    pmtu,
                    vec![Step::Both(vec![Verb::Read { len: 65_536 }; 64])],
                );
                c.a_cfg.max_rd_atomic = 64;
                c.b_cfg.max_rd_atomic = 64;
                // Two rxe devices number their QPs alike: both ends of a pair have one QPN.
                c.b_qpn = c.a_qpn;
                c
            })
            .collect();
        assert_clean(
            &go(&fabric(true, 0.0, 1), &conns),
            &format!("read both ways, pmtu {pmtu}"),
        );
    }
}

#[test]
fn a_qp_re_created_with_its_qpn_and_a_cm_reconnect() {
    let script = vec![
        Step::Post(vec![
            Verb::Write { len: 32_768 },
            Verb::Read { len: 32_768 },
        ]),
        Step::Recreate {
            a_psn: Psn::new(0x00_0010),
            b_psn: Psn::new(0x7F_0000),
            cm: false,
        },
        Step::Post(vec![
            Verb::Write { len: 32_768 },
            Verb::Read { len: 32_768 },
        ]),
        Step::Recreate {
            a_psn: Psn::new(0xAB_CDEF),
            b_psn: Psn::new(0x00_0001),
            cm: true,
        },
        Step::Post(vec![
            Verb::Write { len: 32_768 },
            Verb::Read { len: 32_768 },
        ]),
        // Idle past the switch's eviction (20 ms), then on.
        Step::Pause(30_000_000),
        Step::Post(vec![
            Verb::Write { len: 32_768 },
            Verb::Read { len: 32_768 },
        ]),
    ];
    let mut c = conn(0, Device::RXE, 1024, script);
    c.cm = true;
    let r = go(&fabric(true, 0.0, 1), &[c]);
    assert_clean(&r, "re-created");
    assert!(
        r.tor_b.reorder.evictions > 0,
        "the pause evicted the streams"
    );
}

#[test]
fn uc_writes_and_sends_arrive_whole() {
    let mut c = conn(
        0,
        Device::RXE,
        1024,
        vec![Step::Post(vec![
            Verb::Write { len: 65_536 },
            Verb::Send { len: 8192 },
            Verb::Write { len: 100 },
        ])],
    );
    c.a_cfg = QpConfig::uc(Device::RXE);
    c.b_cfg = c.a_cfg;
    let r = go(&fabric(true, 0.0, 1), &[c]);
    assert_clean(&r, "UC");
}

#[test]
fn with_loss_on_a_path_every_transfer_completes() {
    let conns: Vec<Connection> = (0..4)
        .map(|i| {
            let mut c = conn(i, Device::RXE, 1024, writes_and_reads());
            // rxe retries forever at 7; 6 makes a QP that exhausts it visible.
            c.a_cfg.retry_cnt = 6;
            c.b_cfg.retry_cnt = 6;
            c
        })
        .collect();
    let r = go(&fabric(true, 0.01, 1), &conns);
    for (i, c) in r.connections.iter().enumerate() {
        assert!(c.finished && !c.error, "connection {i}: {c:?}");
        assert_eq!(c.completed, c.posted);
        assert_eq!(c.a.retry_exceeded_err + c.b.retry_exceeded_err, 0);
    }
    let (a, b) = (&r.tor_a.reorder, &r.tor_b.reorder);
    assert!(
        a.timeouts + b.timeouts + a.path_losses + b.path_losses > 0,
        "loss was seen"
    );
}

/// Packets held behind a loss keep the receive buffers of the uplinks they came in on. With a
/// pool per uplink far smaller than what the QPs hold behind their gaps (128 frames, as an
/// AF_PACKET port has 4096) and a hold timeout too long to rescue anything in time (1 s), the
/// stage gives up its oldest gaps when a pool runs low, before the port stops receiving: the
/// retransmissions that fill the gaps keep coming in, and every transfer completes within the
/// run (without it the ports stop, and the transfers wait for the timeout, or for ever).
#[test]
fn a_receive_pool_smaller_than_what_losses_hold_never_stops_a_port() {
    let conns: Vec<Connection> = (0..16)
        .map(|i| {
            conn(
                i,
                Device::RXE,
                1024,
                vec![Step::Post(vec![Verb::Write { len: 65_536 }; 8])],
            )
        })
        .collect();
    let mut spec = fabric(true, 0.02, 1);
    spec.uplink_pool_frames = Some(128);
    spec.reorder = spec.reorder.map(|c| ReorderConfig {
        hold_timeout_ns: 1_000_000_000,
        ..c
    });
    let r = run(&spec, &conns, 1_000, 150_000_000, 2_000_000).unwrap();
    for (i, c) in r.connections.iter().enumerate() {
        assert!(c.finished && !c.error, "connection {i}: {c:?}");
        assert_eq!(c.completed, c.posted, "connection {i}");
    }
    let b = &r.tor_b.reorder;
    assert!(b.pool_give_ups > 0, "the pools ran low: {b:?}");
    assert_eq!(b.timeouts, 0, "no gap waited for its timeout");
}

// ------------------------------------------------------------------ the property

fn verb() -> impl Strategy<Value = Verb> {
    prop_oneof![
        4 => (1u32..70_000).prop_map(|len| Verb::Write { len }),
        2 => (1u32..20_000).prop_map(|len| Verb::Send { len }),
        4 => prop_oneof![1u32..70_000, Just(1 << 20)].prop_map(|len| Verb::Read { len }),
        1 => Just(Verb::CompareSwap),
        1 => Just(Verb::FetchAdd),
        1 => Just(Verb::Flush),
        1 => Just(Verb::AtomicWrite),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec(verb(), 1..40).prop_map(Step::Post),
        1 => (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(a, b, cm)| Step::Recreate {
            a_psn: Psn::new(a),
            b_psn: Psn::new(b),
            cm,
        }),
        1 => prop_oneof![Just(100_000u64), Just(25_000_000)].prop_map(Step::Pause),
    ]
}

#[derive(Debug, Clone)]
struct Mix {
    conns: Vec<(u8, bool, u32, u32, bool, Vec<Step>)>,
    collide: bool,
    workers: usize,
}

fn mix() -> impl Strategy<Value = Mix> {
    let one = (
        0u8..3,
        any::<bool>(),
        prop_oneof![Just(0xFF_FF80u32), any::<u32>()],
        any::<u32>(),
        any::<bool>(),
        proptest::collection::vec(step(), 1..4),
    );
    (
        proptest::collection::vec(one, 1..6),
        any::<bool>(),
        1usize..3,
    )
        .prop_map(|(conns, collide, workers)| Mix {
            conns,
            collide,
            workers,
        })
}

/// `PROPTEST_CASES` when set, else `default`.
fn cases_or(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    // 24 cases in the suite; `PROPTEST_CASES=800` for a long run.
    #![proptest_config(ProptestConfig { cases: cases_or(24), ..ProptestConfig::default() })]

    /// Any mix of RC workloads on Go-Back-N and selective-repeat RNICs, every packet sprayed,
    /// nothing lost: every transfer completes and no model counts a transport error; the
    /// switches drop nothing and hold nothing once idle.
    #[test]
    fn no_rnic_sees_a_transport_error_when_nothing_is_lost(m in mix()) {
        let conns: Vec<Connection> = m.conns.iter().enumerate().map(|(i, (dev, small, a, b, cm, script))| {
            let device = [Device::RXE, Device::CONNECTX5, Device::CONNECTX6][usize::from(*dev)];
            // Starting PSNs are random per QP; two QPs of one host pair whose UDP ports collide
            // and whose PSNs lie within the pairing's reach of each other (HOST_PSN_REACH, 64k,
            // either way) cannot be told apart without RDMA CM (pairing.rs), so QPs that start
            // near the wrap start 256k PSNs apart, also when re-created.
            let spread = |p: Psn| Psn::new(p.value().wrapping_add((i as u32) << 18));
            // A QP re-created without CM whose new PSNs start within 64k behind where the old
            // ones stopped looks like the old one's retransmission (README, known limits): the
            // new sequence starts outside what the old one can have reached (its scripts post
            // at most 120 verbs, about 123k PSNs), and 128k away from the other QPs' spreads.
            let mut prev = spread(Psn::new(*a));
            let script = script.iter().map(|st| match st {
                Step::Recreate { a_psn, b_psn, cm } => {
                    let mut a_psn = spread(*a_psn);
                    let from_prev = a_psn.distance(prev);
                    if !*cm && (-(1 << 17)..(1 << 17)).contains(&from_prev) {
                        a_psn = a_psn.add((1 << 19) + (1 << 17));
                    }
                    prev = a_psn;
                    Step::Recreate { a_psn, b_psn: spread(*b_psn), cm: *cm }
                }
                other => other.clone(),
            }).collect();
            let mut c = conn(i as u32, device, if *small { 1024 } else { 4096 }, script);
            c.a_psn = Psn::new(a.wrapping_add((i as u32) << 18));
            c.b_psn = Psn::new(b.wrapping_add((i as u32) << 18));
            c.cm = *cm;
            if m.collide {
                c.sport = 0xC777;
            }
            c
        }).collect();
        let r = go(&fabric(true, 0.0, m.workers), &conns);
        for (i, c) in r.connections.iter().enumerate() {
            prop_assert!(c.finished && !c.error, "connection {}: {:?}", i, c);
            prop_assert_eq!(c.completed, c.posted);
            prop_assert_eq!((c.a.transport_errors(), c.b.transport_errors()), (0, 0),
                "connection {}: requester {:?} responder {:?}", i, c.a, c.b);
        }
        prop_assert_eq!(r.tor_a.drops_total() + r.tor_b.drops_total(), 0);
        prop_assert_eq!(r.tor_a.reorder.held_now + r.tor_b.reorder.held_now, 0);
    }
}

// ------------------------------------------------------------------ loss by path order

/// The same loss (1% on one path of four) found by path order and by the hold timeout: path
/// order finds it within the paths' skew, so the same transfers take less (virtual) time, and
/// every transfer completes either way. Each variant's figures are printed (`--nocapture`).
#[test]
fn path_order_recovers_from_loss_sooner_than_the_timeout() {
    let runs = loss_by_path_order_against_the_timeout(
        "WRITEs",
        Device::RXE,
        Verb::Write { len: 65_536 },
        1,
    );
    assert_eq!(runs[0].1, 0, "timeout only");
    assert!(runs[0].2 > 0, "the loss was there");
    assert!(runs[1].1 > 0, "found by path order");
    // `nak_first` is the recovery for Go-Back-N; `release_run` (for selective repeat) is
    // measured, not held to it: against Go-Back-N it is slower than the timeout alone.
    assert!(
        runs[1].0 < runs[0].0,
        "path order is sooner than the timeout: {runs:?}"
    );
}

/// The same against ConnectX-6's selective-repeat responder, whose requester, as modelled,
/// resends from the NAKed PSN as rxe's does: `nak_first` is sooner than the timeout there
/// too. `release_run` (which expects the requester to resend the NAKed PSN alone) is measured,
/// not held to it: the requester's resent run passes unordered, and the responder NAKs again.
#[test]
fn against_selective_repeat_nak_first_is_sooner_than_the_timeout() {
    let runs = loss_by_path_order_against_the_timeout(
        "WRITEs to ConnectX-6",
        Device::CONNECTX6,
        Verb::Write { len: 65_536 },
        1,
    );
    assert!(runs[1].1 > 0, "found by path order: {runs:?}");
    assert!(runs[1].0 < runs[0].0, "nak_first: {runs:?}");
}

/// A QP the switch saw no CM exchange for learns where it starts as soon as every path has
/// delivered a packet of it, not when the learning window (2 ms here) ends: one 64 KiB WRITE
/// takes about as long as with a CM exchange (which names the starting PSN), and the RNICs see
/// it in order. Over `timeout` uplinks (no path information) the window decides.
#[test]
fn a_qp_without_cm_starts_once_the_paths_show_where_not_after_the_learning_window() {
    use sprayswitch::tables::LossDetection;
    let write = |cm: bool| {
        let mut c = conn(
            0,
            Device::RXE,
            1024,
            vec![Step::Post(vec![Verb::Write { len: 65_536 }])],
        );
        c.cm = cm;
        [c]
    };
    let spec = |loss_detection| RackPairSpec {
        loss_detection,
        ..fabric(true, 0.0, 1)
    };
    let learn_ns = spec(LossDetection::PathOrder).reorder.unwrap().learn_ns;
    let took = |cm: bool, detection: LossDetection| {
        let r = go(&spec(detection), &write(cm));
        assert_clean(&r, &format!("CM {cm}, {detection:?}"));
        let t = &r.tor_b.reorder;
        (r.elapsed_ns, t.learned, t.learned_by_paths)
    };
    let with_cm = took(true, LossDetection::PathOrder);
    let by_paths = took(false, LossDetection::PathOrder);
    let by_window = took(false, LossDetection::Timeout);
    let all = [with_cm, by_paths, by_window];
    assert_eq!((with_cm.1, by_paths.1, by_window.1), (0, 1, 1), "{all:?}");
    assert_eq!((by_paths.2, by_window.2), (1, 0), "{all:?}");
    // No longer than the CM run (whose handshake comes first); the window costs its length.
    assert!(by_paths.0 <= with_cm.0, "{all:?}");
    assert!(by_window.0 >= by_paths.0 + learn_ns - 200_000, "{all:?}");
}

/// The same for READs, where most lost packets are READ responses: path order finds those
/// too, and releases a later READ's response so that the requester retries at once. A lost
/// response of a QP's last READ has nothing after it that would make the requester retry, and
/// costs its retransmit timer (tens of ms) either way: whether a run has one is luck, so the
/// comparison is over four seeds' loss patterns.
#[test]
fn with_reads_path_order_is_sooner_than_the_timeout() {
    let (mut timeout, mut path_order, mut found) = (0, 0, 0);
    for seed in 1..=4 {
        let runs = loss_by_path_order_against_the_timeout(
            "READs",
            Device::RXE,
            Verb::Read { len: 65_536 },
            seed,
        );
        timeout += runs[0].0;
        path_order += runs[1].0;
        found += runs[1].1;
    }
    assert!(found > 0, "READ responses found lost by path order");
    assert!(
        path_order < timeout,
        "path order {path_order} ns against the timeout's {timeout} ns"
    );
}

/// A packet and its first retransmission both lost. rxe's Go-Back-N responder NAKs once per
/// gap (`sent_psn_nak`), so after the second loss it drops what follows without a word and the
/// requester's retransmit timer (67 ms) resends from the gap. The switch gives the gap up before
/// that (64 hold timeouts of 500 us after the host's NAK, or one in `timeout` mode), yet the
/// host is still at the gap: the timer's pass must be ordered as the first was, or the packet
/// after the gap, on a faster path, reaches the host first and costs a second NAK round. The
/// lost PSN is moved over four places so that its resend starts on each path.
#[test]
fn the_pass_after_the_requesters_retransmit_timer_is_ordered_too() {
    use sprayswitch::tables::LossDetection;
    for detection in [LossDetection::PathOrder, LossDetection::Timeout] {
        for k in 0..4u32 {
            let mut c = conn(
                0,
                Device::RXE,
                1024,
                vec![Step::Post(vec![Verb::Write { len: 65_536 }; 8])],
            );
            c.drop_requests = vec![(c.a_psn.add(100 + k), 2)];
            let mut spec = RackPairSpec {
                loss_detection: detection,
                ..fabric(true, 0.0, 1)
            };
            if let Some(cfg) = spec.reorder.as_mut() {
                // The stream must outlive the timer (forgotten and learned anew, it would be
                // ordered from its lowest PSN anyway), as with the default idle eviction.
                cfg.hold_timeout_ns = 500_000;
                cfg.idle_evict_ns = 1_000_000_000;
            }
            let r = go(&spec, &[c]);
            let c = &r.connections[0];
            let what = format!("{detection:?}, lost PSN +{}: {c:?}", 100 + k);
            assert!(c.finished && !c.error && c.completed == c.posted, "{what}");
            assert_eq!(c.scripted_drops, 2, "{what}");
            assert_eq!(c.a.timeouts, 1, "the requester's timer resent: {what}");
            assert_eq!(
                (c.b.out_of_seq_request, c.b.naks_sent),
                (1, 1),
                "one sequence NAK, for the first loss: {what}"
            );
            assert_eq!(r.tor_b.reorder.naked_gaps_kept, 1, "{what}");
            assert_eq!(r.tor_b.reorder.held_now, 0, "{what}");
        }
    }
}

/// Runs `verb` x 16 on 4 QPs with 1% loss on a path (its pattern drawn from `seed`): timeout
/// alone, path order with each recovery; prints and returns (virtual ns, path-order losses,
/// timeouts) per run.
fn loss_by_path_order_against_the_timeout(
    what: &str,
    device: Device,
    verb: Verb,
    seed: u64,
) -> Vec<(u64, u64, u64)> {
    use sprayswitch::reorder::LossRecovery;
    use sprayswitch::tables::LossDetection;
    let conns: Vec<Connection> = (0..4)
        .map(|i| {
            let mut c = conn(i, device, 1024, vec![Step::Post(vec![verb; 16])]);
            c.a_cfg.retry_cnt = 6;
            c.b_cfg.retry_cnt = 6;
            c
        })
        .collect();
    let mut runs = Vec::new();
    for (detection, recovery) in [
        (LossDetection::Timeout, LossRecovery::NakFirst),
        (LossDetection::PathOrder, LossRecovery::NakFirst),
        (LossDetection::PathOrder, LossRecovery::ReleaseRun),
    ] {
        let spec = RackPairSpec {
            seed,
            loss_detection: detection,
            loss_recovery: recovery,
            ..fabric(true, 0.01, 1)
        };
        let r = go(&spec, &conns);
        for (i, c) in r.connections.iter().enumerate() {
            assert!(
                c.finished && !c.error,
                "{detection:?}, seed {seed}: connection {i}: {c:?}"
            );
            assert_eq!(c.a.retry_exceeded_err + c.b.retry_exceeded_err, 0);
        }
        let (a, b) = (&r.tor_a.reorder, &r.tor_b.reorder);
        let retries: u64 = r.connections.iter().map(|c| c.a.completer_retry_err).sum();
        let (po, to) = (a.path_losses + b.path_losses, a.timeouts + b.timeouts);
        println!(
            "{what} (seed {seed}) {detection:?}/{recovery:?}: {:.2} ms, path-order losses {po}, timeouts {to}, requester retries {retries}",
            r.elapsed_ns as f64 / 1e6,
        );
        runs.push((r.elapsed_ns, po, to));
    }
    let clean = go(&fabric(true, 0.0, 1), &conns);
    assert!(clean.all_finished());
    for (how, r) in [
        "timeout",
        "path order, nak_first",
        "path order, release_run",
    ]
    .iter()
    .zip(&runs)
    {
        println!(
            "{what} (seed {seed}) {how}: {:.0}% of the loss-free goodput ({:.2} ms)",
            clean.elapsed_ns as f64 * 100.0 / r.0 as f64,
            clean.elapsed_ns as f64 / 1e6
        );
    }
    runs
}
