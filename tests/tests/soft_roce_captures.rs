//! Frames captured from two Linux Soft-RoCE (rdma_rxe) hosts running perftest: an independent
//! RoCEv2 implementation. We must parse every frame, agree with its ICRC, and our emitter must
//! rebuild each frame byte for byte from what our parser read out of it.

use std::collections::BTreeMap;

use sprayswitch::wire::{classify, Direction, Opcode, Pmtu, Syndrome, Transport};
use sprayswitch_tests::{data, read_capture, rebuild};

fn opcode_counts(name: &str) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for f in read_capture(&data(name)) {
        let c = classify(&f, Pmtu::DEFAULT).unwrap();
        let r = c.roce().unwrap();
        assert_eq!(r.verify_icrc(&f, c.eth.l3_offset), Ok(true));
        *counts.entry(r.bth.opcode.name()).or_default() += 1;
    }
    counts
}

#[test]
fn rc_operations_parse_and_verify() {
    let counts = opcode_counts("rxe-rc-ops.pcap");
    let expect = [
        ("RC_WRITE_FIRST", 5),
        ("RC_WRITE_MIDDLE", 5),
        ("RC_WRITE_LAST", 5),
        ("RC_READ_REQUEST", 5),
        ("RC_READ_RESPONSE_FIRST", 5),
        ("RC_READ_RESPONSE_MIDDLE", 5),
        ("RC_READ_RESPONSE_LAST", 5),
        ("RC_SEND_FIRST", 5),
        ("RC_SEND_MIDDLE", 5),
        ("RC_SEND_LAST", 5),
        ("RC_FETCH_ADD", 5),
        ("RC_ATOMIC_ACK", 5),
        ("RC_ACK", 10),
    ];
    assert_eq!(counts, expect.into_iter().collect());
}

#[test]
fn read_requests_span_three_psns_and_responses_fill_them() {
    // ib_read_bw -s 3000 at path MTU 1024: each READ REQUEST consumes 3 PSNs and is answered by
    // FIRST, MIDDLE, LAST at exactly those PSNs, in the response direction of the same QP.
    let frames = read_capture(&data("rxe-rc-ops.pcap"));
    let mut reqs = Vec::new();
    let mut resps = Vec::new();
    for f in &frames {
        let c = classify(f, Pmtu::DEFAULT).unwrap();
        let r = *c.roce().unwrap();
        if r.bth.opcode == Opcode::RcReadRequest {
            assert_eq!(r.psn_span, 3);
            assert_eq!(r.direction, Some(Direction::Request));
            reqs.push(r.bth.psn);
        }
        if r.bth.opcode.is_read_response() {
            assert_eq!(r.direction, Some(Direction::Response));
            resps.push(r.bth.psn);
        }
    }
    let expected: Vec<_> = reqs.iter().flat_map(|p| [*p, p.add(1), p.add(2)]).collect();
    assert_eq!(resps, expected);
}

#[test]
fn go_back_n_naks_from_a_reordering_path() {
    // Soft-RoCE behind netem reordering: the responder sent PSN-sequence-error NAKs. Over IPv6
    // (global address GID) the same QP traffic parses too.
    let mut naks = 0;
    let mut v6 = 0;
    for f in read_capture(&data("rxe-reorder-nak-ipv6.pcap")) {
        let c = classify(&f, Pmtu::DEFAULT).unwrap();
        let r = c.roce().unwrap();
        assert_eq!(r.verify_icrc(&f, c.eth.l3_offset), Ok(true));
        if r.aeth.is_some_and(|a| a.syndrome.is_sequence_nak()) {
            naks += 1;
            assert_eq!(r.bth.opcode, Opcode::RcAcknowledge);
        }
        if r.ip.src.is_ipv6() {
            v6 += 1;
        }
        if let Some(a) = r.aeth {
            assert!(matches!(
                a.syndrome,
                Syndrome::Ack { credits: 31 } | Syndrome::Nak(_)
            ));
        }
    }
    assert_eq!(naks, 4);
    assert_eq!(v6, 15);
}

#[test]
fn ud_and_uc_parse() {
    let frames = read_capture(&data("rxe-ud-uc.pcap"));
    let mut transports = BTreeMap::new();
    for f in &frames {
        let c = classify(f, Pmtu::DEFAULT).unwrap();
        let r = c.roce().unwrap();
        assert_eq!(r.verify_icrc(f, c.eth.l3_offset), Ok(true));
        *transports.entry(format!("{:?}", r.transport)).or_insert(0) += 1;
        if r.transport == Transport::Ud {
            assert_eq!(r.payload_len, 512);
        }
    }
    assert_eq!(transports.get("Ud"), Some(&5));
    assert_eq!(transports.get("Uc"), Some(&10));
}

#[test]
fn our_emitter_rebuilds_every_captured_frame_byte_for_byte() {
    let mut n = 0;
    for name in [
        "rxe-rc-ops.pcap",
        "rxe-reorder-nak-ipv6.pcap",
        "rxe-ud-uc.pcap",
    ] {
        for (i, f) in read_capture(&data(name)).iter().enumerate() {
            assert_eq!(&rebuild(f), f, "{name} frame {}", i + 1);
            n += 1;
        }
    }
    assert_eq!(n, 230);
}
