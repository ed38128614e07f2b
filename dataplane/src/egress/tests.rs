use super::*;
use crate::wire::ecn::{codepoint, Codepoint};
use crate::wire::icrc;
use crate::wire::{BthRepr, IpRepr, Opcode, Psn, RoceFrameRepr};

/// A RoCE frame of `payload` bytes with TOS `tos` (DSCP in the top six bits, ECN in the low
/// two), PSN `psn`.
fn frame(tos: u8, payload: usize, psn: u32, v6: bool) -> Pkt {
    let ip = if v6 {
        IpRepr::V6 {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            flow_label: 7,
        }
    } else {
        IpRepr::V4 {
            src: "10.1.0.2".parse().unwrap(),
            dst: "10.2.0.2".parse().unwrap(),
            id: 0,
        }
    };
    let body = vec![0xab; payload];
    let f = RoceFrameRepr {
        tos,
        ..RoceFrameRepr::new(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            ip,
            BthRepr::new(Opcode::RcWriteMiddle, 0x11, Psn::new(psn)),
        )
    }
    .with_payload(&body)
    .to_vec()
    .unwrap();
    Pkt::from_slice(&f)
}

fn psn_of(p: &Pkt) -> u32 {
    crate::wire::classify(p.data(), crate::wire::Pmtu::DEFAULT)
        .ok()
        .and_then(|c| c.roce().map(|r| r.bth.psn.value()))
        .expect("a RoCEv2 frame")
}

/// The one's complement sum of a header with its checksum: 0xffff when the checksum is right.
fn ipv4_sum(h: &[u8]) -> u16 {
    let mut acc: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

const ECT0: u8 = (26 << 2) | 2;

#[test]
fn an_unshaped_unpaused_queue_passes_packets_straight_to_ready() {
    let mut q = EgressQueue::new(EgressConfig::default(), 8, 1);
    for i in 0..8 {
        assert!(q.enqueue(frame(ECT0, 100, i, false), 0, 0));
    }
    assert_eq!(q.ready.len(), 8);
    assert!(!q.enqueue(frame(ECT0, 100, 9, false), 0, 0), "bound");
    let len = q.ready[0].len() as u64;
    assert_eq!(q.bytes(), 8 * len);
    q.ready.drain(..3);
    assert_eq!(q.sent(), 3 * len);
    assert_eq!(q.bytes(), 5 * len);
    assert_eq!(q.next_event_ns(0), None);
}

#[test]
fn a_shaped_queue_sends_its_rate_in_order() {
    // 8 Gbit/s: one byte per ns.
    let cfg = EgressConfig {
        rate_bps: Some(8_000_000_000),
        burst_bytes: None,
        ecn: None,
    };
    let mut q = EgressQueue::new(cfg, 10_000, 1);
    q.set_burst(32);
    for i in 0..1000 {
        assert!(q.enqueue(frame(ECT0, 964, i, false), 0, 0));
    }
    let len = q.ready[0].len();
    assert_eq!(q.ready.len(), 32, "at most a burst handed to the port");
    let burst = 65536 / len;
    let mut out = Vec::new();
    let mut now = 0;
    while out.len() < 1000 {
        q.service(now);
        assert!(q.ready.len() <= 32);
        out.append(&mut q.ready);
        q.sent();
        if out.len() < 1000 {
            let at = q.next_event_ns(now).expect("packets wait");
            assert!(at >= now);
            now = at;
        }
    }
    let psns: Vec<u32> = out.iter().map(psn_of).collect();
    assert_eq!(psns, (0..1000).collect::<Vec<_>>());
    // After the burst, one packet per `len` ns (less what the burst left in the bucket).
    let want = ((1000 - burst) * len) as u64;
    assert!(now.abs_diff(want) <= len as u64, "{now} vs {want}");
}

#[test]
fn marking_follows_the_configured_curve_within_two_percent() {
    let profile = EcnProfile {
        kmin_bytes: 100_000,
        kmax_bytes: 400_000,
        pmax: 0.2,
    };
    let cfg = EgressConfig {
        rate_bps: None,
        burst_bytes: None,
        ecn: Some(profile),
    };
    for depth in [50_000u64, 100_000, 175_000, 250_000, 400_000, 500_000] {
        let mut q = EgressQueue::new(cfg, 4, depth);
        let n = 100_000;
        let mut marked = 0u64;
        for i in 0..n {
            let mut p = frame(ECT0, 64, i, i % 2 == 0);
            q.mark(&mut p, depth);
            if codepoint(p.data()) == Some(Codepoint::Ce) {
                marked += 1;
            }
        }
        assert_eq!(q.counts.ecn_marked, marked);
        let want = profile.probability(depth);
        let got = marked as f64 / f64::from(n);
        assert!(
            (got - want).abs() <= 0.02 * want.max(0.05),
            "depth {depth}: {got} vs {want}"
        );
    }
}

#[test]
fn only_ect_packets_are_marked_and_marks_keep_the_icrc_and_checksum() {
    let cfg = EgressConfig {
        rate_bps: None,
        burst_bytes: None,
        ecn: Some(EcnProfile {
            kmin_bytes: 0,
            kmax_bytes: 0,
            pmax: 1.0,
        }),
    };
    let mut q = EgressQueue::new(cfg, 64, 1);
    // A packet not ECN-capable stays queued: every packet after it finds a depth above 0.
    assert!(q.enqueue(frame(26 << 2, 200, 0, false), 0, 0));
    for (tos, v6, want) in [
        (ECT0, false, Codepoint::Ce),
        ((26 << 2) | 1, true, Codepoint::Ce),
        (26 << 2, false, Codepoint::NotEct),
        (26 << 2, true, Codepoint::NotEct),
        ((26 << 2) | 3, false, Codepoint::Ce),
    ] {
        assert!(q.enqueue(frame(tos, 200, 1, v6), 0, 0));
        let p = q.ready.pop().unwrap();
        q.sent();
        assert_eq!(codepoint(p.data()), Some(want), "tos {tos:#x} v6 {v6}");
        let c = crate::wire::classify(p.data(), crate::wire::Pmtu::DEFAULT).unwrap();
        let ip = &p.data()[usize::from(c.eth.l3_offset)..];
        assert!(
            icrc::verify(ip).unwrap(),
            "tos {tos:#x}: the ICRC masks the ECN bits"
        );
        if !v6 {
            assert_eq!(ipv4_sum(&ip[..20]), 0xffff, "tos {tos:#x}: header checksum");
        }
    }
    assert_eq!(q.counts.ecn_marked, 2, "CE stays CE, not counted again");
}

#[test]
fn a_pause_stops_every_priority_for_its_quanta_and_zero_resumes() {
    let cfg = EgressConfig {
        rate_bps: Some(100_000_000_000),
        burst_bytes: None,
        ecn: None,
    };
    let mut q = EgressQueue::new(cfg, 64, 1);
    // 1000 quanta at 100 Gbit/s: 5.12 us.
    q.handle_pause(&PauseFrame::Pause { quanta: 1000 }, 1_000);
    assert!(q.paused(1_000));
    for i in 0..4 {
        assert!(q.enqueue(frame(i << 5, 100, u32::from(i), false), 2_000, 0));
    }
    q.service(3_000);
    assert!(q.ready.is_empty());
    assert_eq!(q.next_event_ns(3_000), Some(6_120));
    q.service(6_119);
    assert!(q.ready.is_empty());
    q.service(6_120);
    assert_eq!(q.ready.len(), 4);
    assert_eq!(q.counts.paused_ns, 5_120);
    // A second pause cut short by quanta 0 counts only the time it lasted.
    q.handle_pause(&PauseFrame::Pause { quanta: 0xffff }, 10_000);
    q.handle_pause(&PauseFrame::Pause { quanta: 0 }, 12_000);
    assert!(!q.paused(12_000));
    assert_eq!(q.counts.paused_ns, 5_120 + 2_000);
    assert_eq!(q.counts.pause_frames, 3);
}

#[test]
fn pfc_stops_only_the_priorities_it_names_and_keeps_their_order() {
    let mut q = EgressQueue::new(EgressConfig::default(), 64, 1);
    let mut quanta = [0u16; 8];
    quanta[3] = 2000; // 10.24 us at the default 100 Gbit/s
    q.handle_pause(
        &PauseFrame::Pfc {
            enable: 1 << 3,
            quanta,
        },
        0,
    );
    for i in 0..10u32 {
        let dscp = if i % 2 == 0 { 26 } else { 0 };
        assert!(q.enqueue(frame(dscp << 2, 100, i, false), 100, 0));
    }
    q.service(200);
    let got: Vec<u32> = q.ready.drain(..).map(|p| psn_of(&p)).collect();
    assert_eq!(got, vec![1, 3, 5, 7, 9], "priority 0 passes");
    q.sent();
    // More priority-3 packets arrive while the first ones wait: they queue behind them.
    assert!(q.enqueue(frame(26 << 2, 100, 10, false), 5_000, 0));
    q.service(5_000);
    assert!(q.ready.is_empty());
    assert_eq!(q.len(), 6);
    q.service(10_240);
    let got: Vec<u32> = q.ready.drain(..).map(|p| psn_of(&p)).collect();
    assert_eq!(got, vec![0, 2, 4, 6, 8, 10]);
    assert_eq!(q.counts.pfc_frames, 1);
}

#[test]
fn a_paused_queue_holds_up_to_its_bound_and_refuses_the_rest() {
    let mut q = EgressQueue::new(EgressConfig::default(), 16, 1);
    q.handle_pause(&PauseFrame::Pause { quanta: 0xffff }, 0);
    let mut refused = 0;
    for i in 0..20 {
        if !q.enqueue(frame(ECT0, 100, i, false), 10, 0) {
            refused += 1;
        }
        q.service(10);
    }
    assert_eq!((q.len(), refused), (16, 4));
    let psns: Vec<u32> = q.drain_all().map(|p| psn_of(&p)).collect();
    assert_eq!(psns, (0..16).collect::<Vec<_>>());
    assert_eq!(q.bytes(), 0);
}

/// What the caller holds elsewhere (the reorder stage, behind a gap) is no queue of the port's:
/// marked on, it slowed the very retransmission that would release it (the fabric simulator
/// with a dead spine: every flow to one host held at DCQCN's lowest rate behind 500 KB that
/// waited for a retransmission). It is recorded with the depth, not marked on.
#[test]
fn what_is_held_elsewhere_is_recorded_with_the_depth_but_not_marked_on() {
    let cfg = EgressConfig {
        rate_bps: None,
        burst_bytes: None,
        ecn: Some(EcnProfile {
            kmin_bytes: 1_000,
            kmax_bytes: 2_000,
            pmax: 1.0,
        }),
    };
    let mut q = EgressQueue::new(cfg, 16, 1);
    assert!(q.enqueue(frame(ECT0, 100, 0, false), 0, 1_000_000));
    assert_eq!(q.counts.ecn_marked, 0);
    assert!(q.depths.histogram().max() >= 1_000_000 * 15 / 16);
}

#[test]
fn depths_are_recorded_with_what_is_held_elsewhere() {
    let mut q = EgressQueue::new(EgressConfig::default(), 16, 1);
    assert!(q.enqueue(frame(ECT0, 100, 0, false), 0, 0));
    let len = q.bytes();
    assert!(q.enqueue(frame(ECT0, 100, 1, false), 0, 5_000));
    let h = q.depths.histogram();
    assert_eq!(h.len(), 2);
    assert!(h.max() >= (5_000 + len) * 15 / 16, "{}", h.max());
}

#[test]
fn a_pause_takes_back_what_a_port_that_pushed_back_was_handed_beyond_one_burst() {
    let mut q = EgressQueue::new(EgressConfig::default(), 256, 1);
    for i in 0..100 {
        assert!(q.enqueue(frame(ECT0, 100, i, false), 0, 0));
    }
    // The port took none of them: all 100 were handed over.
    assert_eq!(q.ready.len(), 100);
    q.handle_pause(&PauseFrame::Pause { quanta: 1000 }, 10);
    assert_eq!(q.ready.len(), PAUSE_SLACK_PKTS, "one burst still goes");
    assert_eq!(q.len(), 100);
    q.service(20);
    assert_eq!(
        q.ready.len(),
        PAUSE_SLACK_PKTS,
        "the rest waits for the pause"
    );
    q.service(10 + 5_120);
    let psns: Vec<u32> = q.ready.iter().map(psn_of).collect();
    assert_eq!(psns, (0..100).collect::<Vec<_>>(), "in order");
    assert_eq!(
        q.bytes(),
        q.ready.iter().map(|p| p.len() as u64).sum::<u64>()
    );
}
