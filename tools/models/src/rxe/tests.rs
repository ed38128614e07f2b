//! Two full QPs (A posts work, B answers; B may post work too) joined by an in-test channel
//! whose delivery order and losses each test chooses. Expected counts are traced by hand
//! through the rxe functions named in each test.

use std::net::{IpAddr, Ipv4Addr};

use sprayswitch::pkt::Pkt;
use sprayswitch::wire::{classify, NakCode, Opcode, Pmtu, Psn, RethRepr, Syndrome};

use super::*;

const QPN_A: u32 = 0x11;
const QPN_B: u32 = 0x22;
const HOP_NS: u64 = 1_000;

fn endpoints() -> (Endpoint, Endpoint) {
    let a = Endpoint {
        mac: [2, 0, 0, 0, 0, 1],
        gw_mac: [2, 0, 0, 0, 0, 9],
        ip: IpAddr::V4(Ipv4Addr::new(10, 1, 1, 2)),
        peer_ip: IpAddr::V4(Ipv4Addr::new(10, 2, 1, 2)),
        peer_qpn: QPN_B,
        sport: 0xC123,
    };
    let b = Endpoint {
        mac: [2, 0, 0, 0, 0, 2],
        ip: a.peer_ip,
        peer_ip: a.ip,
        peer_qpn: QPN_A,
        ..a
    };
    (a, b)
}

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    op: Opcode,
    psn: Psn,
    ack_req: bool,
    syn: Option<Syndrome>,
    reth: Option<RethRepr>,
    len: u16,
}

fn seen(p: &Pkt) -> Seen {
    let c = classify(p.data(), Pmtu::DEFAULT).expect("the model emits valid frames");
    let r = *c.roce().expect("RoCE");
    assert_eq!(r.verify_icrc(p.data(), c.eth.l3_offset), Ok(true));
    Seen {
        op: r.bth.opcode,
        psn: r.bth.psn,
        ack_req: r.bth.ack_req,
        syn: r.aeth.map(|a| a.syndrome),
        reth: r.reth,
        len: r.payload_len,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    AtoB,
    BtoA,
}

/// The channel: frames polled from one QP are handed to the other `HOP_NS` later, in the
/// order (and with the losses) a test's shaper chooses.
struct Net {
    a: Qp,
    b: Qp,
    now: u64,
    /// Every frame sent, with its direction and the time it was polled.
    log: Vec<(u64, Dir, Seen)>,
}

impl Net {
    fn new(cfg_a: QpConfig, cfg_b: QpConfig, psn_a: u32, psn_b: u32) -> Net {
        let (ea, eb) = endpoints();
        let (pa, pb) = (Psn::new(psn_a), Psn::new(psn_b));
        Net {
            a: Qp::new(ea, QPN_A, cfg_a, pa, pb),
            b: Qp::new(eb, QPN_B, cfg_b, pb, pa),
            now: 1_000_000,
            log: Vec::new(),
        }
    }

    fn rxe(psn_a: u32, psn_b: u32) -> Net {
        Net::new(
            QpConfig::rc(Device::RXE),
            QpConfig::rc(Device::RXE),
            psn_a,
            psn_b,
        )
    }

    fn poll_a(&mut self) -> Vec<Pkt> {
        let mut v = Vec::new();
        self.a.poll(self.now, &mut v);
        for p in &v {
            self.log.push((self.now, Dir::AtoB, seen(p)));
        }
        v
    }

    fn poll_b(&mut self) -> Vec<Pkt> {
        let mut v = Vec::new();
        self.b.poll(self.now, &mut v);
        for p in &v {
            self.log.push((self.now, Dir::BtoA, seen(p)));
        }
        v
    }

    fn deliver_a(&mut self, pkts: Vec<Pkt>) {
        for p in pkts {
            self.a.handle(p.data(), self.now);
        }
    }

    fn deliver_b(&mut self, pkts: Vec<Pkt>) {
        for p in pkts {
            self.b.handle(p.data(), self.now);
        }
    }

    /// Rounds of: poll both, shape, one hop, deliver. When nothing moves, time jumps to the
    /// earliest timer; it stops when no timer is left.
    fn run(&mut self, mut shape: impl FnMut(Dir, &mut Vec<Pkt>)) {
        for _ in 0..200_000 {
            let mut ab = self.poll_a();
            let mut ba = self.poll_b();
            let moved = !ab.is_empty() || !ba.is_empty();
            shape(Dir::AtoB, &mut ab);
            shape(Dir::BtoA, &mut ba);
            self.now += HOP_NS;
            self.deliver_b(ab);
            self.deliver_a(ba);
            if !moved {
                let next = [self.a.next_timer_ns(), self.b.next_timer_ns()]
                    .into_iter()
                    .flatten()
                    .min();
                match next {
                    Some(t) => self.now = self.now.max(t),
                    None => return,
                }
            }
        }
        panic!("the exchange did not settle");
    }

    fn run_clean(&mut self) {
        self.run(|_, _| {});
    }

    fn sent(&self, dir: Dir) -> Vec<(u64, Seen)> {
        self.log
            .iter()
            .filter(|(_, d, _)| *d == dir)
            .map(|&(t, _, s)| (t, s))
            .collect()
    }
}

fn all_verbs() -> Vec<Verb> {
    vec![
        Verb::Write { len: 0 },
        Verb::Write { len: 3000 },
        Verb::WriteImm { len: 2500 },
        Verb::Send { len: 5000 },
        Verb::Read { len: 100 },
        Verb::Read { len: 1 << 20 },
        Verb::CompareSwap,
        Verb::FetchAdd,
        Verb::Flush,
        Verb::AtomicWrite,
    ]
}

/// Every verb, delivered in order, both QPs busy, PSNs crossing 2^24: no transport error.
#[test]
fn every_verb_completes_in_order_without_transport_errors_across_the_psn_wrap() {
    for (da, db) in [
        (Device::RXE, Device::RXE),
        (Device::CONNECTX5, Device::CONNECTX6),
        (Device::RXE, Device::CONNECTX6),
    ] {
        let mut net = Net::new(QpConfig::rc(da), QpConfig::rc(db), 0xFF_FFF0, 0xFF_FFFA);
        net.b.post_recv(2);
        let verbs = all_verbs();
        for &v in &verbs {
            net.a.post(v);
        }
        net.b.post(Verb::Write { len: 4096 });
        net.b.post(Verb::Read { len: 4096 });
        net.b.post(Verb::FetchAdd);
        net.run_clean();
        let (a, b) = (&net.a, &net.b);
        assert_eq!((a.completed(), a.failed()), (10, 0), "{}", da.name);
        assert_eq!((b.completed(), b.failed()), (3, 0));
        let bytes: u64 = verbs.iter().map(|v| u64::from(v.len())).sum();
        assert_eq!(a.bytes_completed(), bytes);
        assert_eq!(b.bytes_completed(), 4096 + 4096 + 8);
        assert_eq!(a.completion_times_ns().len(), 10);
        for q in [a, b] {
            assert_eq!(q.counters().transport_errors(), 0, "{:?}", q.counters());
            assert_eq!(q.counters().stale_responses, 0);
            assert_eq!(q.counters().rx_dropped(), 0);
            assert_eq!(q.state(), QpState::Rts);
            assert!(q.idle());
        }
        // Everything sent arrived, and nothing else.
        assert_eq!(a.counters().sent_pkts, b.counters().rcvd_pkts);
        assert_eq!(b.counters().sent_pkts, a.counters().rcvd_pkts);
        assert_eq!(b.counters().rdma_recvs, 2);
        assert_eq!(a.counters().rdma_sends, 1);
        // 1 + 3 + 3 + 5 + 1 + 1024 + 4 single-PSN operations = 1041 PSNs, across the wrap.
        assert_eq!(a.sq_psn(), Psn::new(0xFF_FFF0).add(1041));
        assert!(a.sq_psn().value() < 0xFF_FFF0);
        assert_eq!(b.rq_psn(), a.sq_psn());
        assert_eq!(b.sq_psn(), Psn::new(0xFF_FFFA).add(4 + 4 + 1));
        assert_eq!(a.rq_psn(), b.sq_psn());
    }
}

/// FLUSH and ATOMIC WRITE get a zero-length READ RESPONSE ONLY (`acknowledge` ->
/// `send_read_response_ack`), atomics an ATOMIC ACKNOWLEDGE, a WRITE ONLY an ACK.
#[test]
fn responses_per_verb_are_the_opcodes_rxe_uses() {
    let mut net = Net::rxe(100, 900);
    for v in [
        Verb::Flush,
        Verb::AtomicWrite,
        Verb::CompareSwap,
        Verb::FetchAdd,
        Verb::Write { len: 10 },
    ] {
        net.a.post(v);
    }
    net.run_clean();
    let req: Vec<_> = net
        .sent(Dir::AtoB)
        .iter()
        .map(|(_, s)| (s.op, s.len))
        .collect();
    assert_eq!(
        req,
        [
            (Opcode::RcFlush, 0),
            (Opcode::RcAtomicWrite, 8),
            (Opcode::RcCompareSwap, 0),
            (Opcode::RcFetchAdd, 0),
            (Opcode::RcWriteOnly, 10),
        ]
    );
    let resp: Vec<_> = net
        .sent(Dir::BtoA)
        .iter()
        .map(|(_, s)| (s.op, s.psn.value(), s.len))
        .collect();
    assert_eq!(
        resp,
        [
            (Opcode::RcReadResponseOnly, 100, 0),
            (Opcode::RcReadResponseOnly, 101, 0),
            (Opcode::RcAtomicAcknowledge, 102, 0),
            (Opcode::RcAtomicAcknowledge, 103, 0),
            (Opcode::RcAcknowledge, 104, 0),
        ]
    );
    assert_eq!(net.a.completed(), 5);
    assert_eq!(net.b.counters().read_responses_sent, 2);
    assert_eq!(net.b.counters().atomic_acks_sent, 2);
    assert_eq!(net.b.counters().acks_sent, 1);
}

/// A 1 MiB READ at PMTU 1024 is one READ REQUEST for 1024 PSNs and 1024 responses.
#[test]
fn a_read_of_one_mib_is_one_request_and_1024_responses() {
    let mut net = Net::rxe(0xFF_FF00, 7);
    net.a.post(Verb::Read { len: 1 << 20 });
    net.run_clean();
    let req = net.sent(Dir::AtoB);
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].1.op, Opcode::RcReadRequest);
    assert_eq!(req[0].1.reth.map(|r| r.dma_len), Some(1 << 20));
    let resp = net.sent(Dir::BtoA);
    assert_eq!(resp.len(), 1024);
    for (i, (_, s)) in resp.iter().enumerate() {
        let want = match i {
            0 => Opcode::RcReadResponseFirst,
            1023 => Opcode::RcReadResponseLast,
            _ => Opcode::RcReadResponseMiddle,
        };
        assert_eq!(
            (s.op, s.psn, s.len),
            (want, Psn::new(0xFF_FF00).add(i as u32), 1024)
        );
    }
    assert_eq!(net.a.sq_psn(), Psn::new(0xFF_FF00).add(1024));
    assert_eq!(net.a.counters().ack_deferred, 1024);
    assert_eq!(net.a.bytes_completed(), 1 << 20);
    assert_eq!(net.a.counters().transport_errors(), 0);
}

/// `check_init_depth`: at most `max_rd_atomic` READs outstanding (rxe 128, ConnectX 16).
#[test]
fn reads_outstanding_stop_at_max_rd_atomic() {
    for (dev, depth) in [(Device::RXE, 128), (Device::CONNECTX5, 16)] {
        let mut net = Net::new(QpConfig::rc(dev), QpConfig::rc(Device::RXE), 5, 9);
        for _ in 0..130 {
            net.a.post(Verb::Read { len: 64 });
        }
        let first = net.poll_a();
        assert_eq!(first.len(), depth, "{}", dev.name);
        assert!(first.iter().all(|p| seen(p).op == Opcode::RcReadRequest));
        assert_eq!(net.a.max_rd_atomic(), depth as u32);
        net.now += HOP_NS;
        net.deliver_b(first);
        net.run_clean();
        assert_eq!(net.a.completed(), 130);
        assert_eq!(net.a.counters().transport_errors(), 0);
        assert_eq!(net.b.counters().transport_errors(), 0);
    }
}

/// `RXE_MAX_UNACKED_PSNS`: the requester waits once `req.psn` is more than 128 past
/// `comp.psn`, so 129 packets leave before the first ACK.
#[test]
fn rxe_sends_129_psns_before_the_first_ack() {
    let mut net = Net::rxe(0xFF_FFC0, 1);
    for _ in 0..200 {
        net.a.post(Verb::Write { len: 64 });
    }
    let first = net.poll_a();
    assert_eq!(first.len(), 129);
    assert!(net.poll_a().is_empty(), "blocked until an ACK");
    net.now += HOP_NS;
    net.deliver_b(first);
    net.run_clean();
    assert_eq!(net.a.completed(), 200);
    assert_eq!(net.a.counters().transport_errors(), 0);
}

/// `init_req_packet`: AckReq on a message's last packet and on the 66th packet without one.
#[test]
fn ack_req_on_the_last_packet_and_after_65_without() {
    let mut net = Net::rxe(10, 20);
    net.a.post(Verb::Write { len: 100 * 1024 });
    let f = net.poll_a();
    assert_eq!(f.len(), 100);
    let acked: Vec<usize> = (0..100).filter(|&i| seen(&f[i]).ack_req).collect();
    assert_eq!(acked, [65, 99]);
    net.now += HOP_NS;
    net.deliver_b(f);
    net.run_clean();
    assert_eq!(net.b.counters().acks_sent, 2);
    assert_eq!(net.a.completed(), 1);
}

/// UC: WRITE, SEND and WRITE with immediate complete when sent; the responder sends nothing;
/// READ is refused at post time.
#[test]
fn uc_write_and_send_complete_in_order() {
    let mut net = Net::new(
        QpConfig::uc(Device::RXE),
        QpConfig::uc(Device::RXE),
        0xFF_FFFE,
        3,
    );
    net.b.post_recv(2);
    net.a.post(Verb::Write { len: 3000 });
    net.a.post(Verb::Send { len: 2000 });
    net.a.post(Verb::WriteImm { len: 100 });
    net.a.post(Verb::Read { len: 10 });
    net.run_clean();
    assert_eq!(net.a.counters().post_rejected, 1);
    assert_eq!((net.a.completed(), net.a.failed()), (3, 0));
    assert_eq!(net.a.completion_times_ns(), [0, 0, 0]);
    assert_eq!(net.a.counters().sent_pkts, 3 + 2 + 1);
    assert!(net.sent(Dir::AtoB).iter().all(|(_, s)| !s.ack_req));
    assert_eq!(net.b.counters().sent_pkts, 0);
    assert_eq!(net.b.counters().rdma_recvs, 2);
    assert_eq!(net.b.rq_psn(), Psn::new(0xFF_FFFE).add(6));
    assert_eq!(net.a.counters().transport_errors(), 0);
    assert_eq!(net.b.counters().transport_errors(), 0);
}

/// A 5-packet WRITE delivered 0, 1, 3, 4, 2 to a Go-Back-N responder (`check_psn`): one NAK
/// for PSN 2 and `out_of_seq_request` 1 (for the NAKed packet only), packets 3 and 4 dropped;
/// the requester counts `rcvd_seq_err` (the NAK is past `comp.psn`) and retries from the NAKed
/// PSN (MIDDLE 2, MIDDLE 3, LAST 4); 2 is then a duplicate, re-ACKed at `ack_psn - 1`.
#[test]
fn one_reordered_request_go_back_n_naks_once_and_the_requester_goes_back() {
    let s = 0xFF_FFFF;
    let mut net = Net::rxe(s, 50);
    let s = Psn::new(s);
    net.a.post(Verb::Write { len: 5 * 1024 });
    let mut f = net.poll_a();
    assert_eq!(f.len(), 5);
    let late = f.remove(2);
    f.push(late);
    net.now += HOP_NS;
    net.deliver_b(f);
    let r = net.poll_b();
    let rs: Vec<_> = r.iter().map(|p| (seen(p).syn, seen(p).psn)).collect();
    assert_eq!(
        rs,
        [(Some(Syndrome::Nak(NakCode::PsnSequenceError)), s.add(2))]
    );
    net.now += HOP_NS;
    net.deliver_a(r);
    let f2 = net.poll_a();
    let again: Vec<_> = f2.iter().map(|p| (seen(p).op, seen(p).psn)).collect();
    assert_eq!(
        again,
        [
            (Opcode::RcWriteMiddle, s.add(2)),
            (Opcode::RcWriteMiddle, s.add(3)),
            (Opcode::RcWriteLast, s.add(4)),
        ]
    );
    net.now += HOP_NS;
    net.deliver_b(f2);
    let r2 = net.poll_b();
    let acks: Vec<_> = r2.iter().map(|p| (seen(p).syn, seen(p).psn)).collect();
    let ack = Some(Syndrome::Ack { credits: 31 });
    assert_eq!(acks, [(ack, s.add(2)), (ack, s.add(4))]);
    net.now += HOP_NS;
    net.deliver_a(r2);
    net.run_clean();

    let b = net.b.counters();
    assert_eq!(b.out_of_seq_request, 1);
    assert_eq!(b.out_of_seq_dropped, 2);
    assert_eq!(b.naks_sent, 1);
    assert_eq!(b.duplicate_request, 1);
    assert_eq!(b.acks_sent, 2);
    assert_eq!(b.sr_buffered, 0);
    let a = net.a.counters();
    assert_eq!(a.rcvd_seq_err, 1);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.retransmitted_pkts, 3);
    assert_eq!(a.sent_pkts, 8);
    assert_eq!((a.timeouts, a.implied_naks, a.stale_responses), (0, 0, 0));
    assert_eq!(a.transport_errors(), 1 + 1 + 3);
    assert_eq!((net.a.completed(), net.a.failed()), (1, 0));
}

/// Four single-packet WRITEs delivered 0, 1, 3, 2: the NAK for PSN 2 arrives when `comp.psn` is
/// already 2 (the ACKs for 0 and 1 came first), so `check_ack` counts no `rcvd_seq_err`, yet
/// still goes to `COMPST_ERROR_RETRY` and resends 2 and 3.
#[test]
fn a_nak_for_the_expected_psn_retries_without_rcvd_seq_err() {
    let mut net = Net::rxe(40, 50);
    for _ in 0..4 {
        net.a.post(Verb::Write { len: 1024 });
    }
    let mut f = net.poll_a();
    f.swap(2, 3);
    net.now += HOP_NS;
    net.deliver_b(f);
    net.run_clean();
    let a = net.a.counters();
    assert_eq!(a.rcvd_seq_err, 0);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.retransmitted_pkts, 2);
    assert_eq!(
        a.stale_responses, 1,
        "the re-ACK of duplicate 2 is old news"
    );
    let b = net.b.counters();
    assert_eq!(
        (b.out_of_seq_request, b.naks_sent, b.duplicate_request),
        (1, 1, 1)
    );
    assert_eq!(b.acks_sent, 5);
    assert_eq!(net.a.completed(), 4);
}

/// The same swap against a selective repeat responder (ConnectX-6 lossy mode): packet 3 is
/// kept, not dropped, and executed when 2 arrives, but PSN 2 is NAKed at once: the requester
/// resends 2 and 3 needlessly, both arrive as duplicates.
#[test]
fn one_reordered_request_selective_repeat_keeps_it_but_naks_at_once() {
    let mut net = Net::new(
        QpConfig::rc(Device::RXE),
        QpConfig::rc(Device::CONNECTX6),
        0xFF_FFFE,
        50,
    );
    let s = Psn::new(0xFF_FFFE);
    net.a.post(Verb::Write { len: 4096 });
    let mut f = net.poll_a();
    f.swap(2, 3);
    net.now += HOP_NS;
    net.deliver_b(f);
    let r = net.poll_b();
    let rs: Vec<_> = r.iter().map(|p| (seen(p).syn, seen(p).psn)).collect();
    assert_eq!(
        rs,
        [
            (Some(Syndrome::Nak(NakCode::PsnSequenceError)), s.add(2)),
            (Some(Syndrome::Ack { credits: 31 }), s.add(3)),
        ]
    );
    net.now += HOP_NS;
    net.deliver_a(r);
    net.run_clean();
    let b = net.b.counters();
    assert_eq!(b.out_of_seq_request, 1);
    assert_eq!(b.sr_buffered, 1);
    assert_eq!(b.out_of_seq_dropped, 0);
    assert_eq!(b.naks_sent, 1);
    assert_eq!(b.duplicate_request, 2);
    assert_eq!(b.acks_sent, 3);
    let a = net.a.counters();
    assert_eq!(a.rcvd_seq_err, 1);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.retransmitted_pkts, 2);
    assert_eq!(a.stale_responses, 2);
    assert_eq!(net.a.completed(), 1);
}

/// A 4-packet READ then a 1-packet READ; responses 1 and 2 of the first are swapped. rxe's
/// `check_psn` drops 2 and then 3 (above `comp.psn`), takes 1; response 4 belongs past the
/// first READ: an implied NAK. `req_retry` asks again from PSN 2 only (RETH address + 2048,
/// length 2048), and the responder replays from its resource (`duplicate_request`, MIDDLE and
/// LAST); the second READ is asked again whole.
#[test]
fn two_swapped_read_responses_retry_the_read_from_the_first_missing_response() {
    let mut net = Net::rxe(0xFF_FFFD, 50);
    let s = Psn::new(0xFF_FFFD);
    net.a.post(Verb::Read { len: 4096 });
    net.a.post(Verb::Read { len: 1024 });
    let f = net.poll_a();
    net.now += HOP_NS;
    net.deliver_b(f);
    let mut r = net.poll_b();
    assert_eq!(r.len(), 5);
    r.swap(1, 2);
    net.now += HOP_NS;
    net.deliver_a(r);
    net.run_clean();

    let a = net.a.counters();
    assert_eq!(a.out_of_seq_responses, 2);
    assert_eq!(a.implied_naks, 1);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.read_retries, 1);
    assert_eq!(a.retransmitted_pkts, 2);
    assert_eq!(a.timeouts, 0);
    assert_eq!((net.a.completed(), net.a.failed()), (2, 0));
    assert_eq!(net.a.bytes_completed(), 5120);
    let req: Vec<_> = net
        .sent(Dir::AtoB)
        .iter()
        .map(|(_, s)| (s.psn, s.reth.map(|r| (r.virtual_address, r.dma_len))))
        .collect();
    assert_eq!(
        req,
        [
            (s, Some((REMOTE_VA, 4096))),
            (s.add(4), Some((REMOTE_VA, 1024))),
            (s.add(2), Some((REMOTE_VA + 2048, 2048))),
            (s.add(4), Some((REMOTE_VA, 1024))),
        ]
    );
    let replay: Vec<_> = net.sent(Dir::BtoA)[5..]
        .iter()
        .map(|(_, x)| (x.op, x.psn))
        .collect();
    assert_eq!(
        replay,
        [
            (Opcode::RcReadResponseMiddle, s.add(2)),
            (Opcode::RcReadResponseLast, s.add(3)),
            (Opcode::RcReadResponseOnly, s.add(4)),
        ]
    );
    assert_eq!(net.b.counters().duplicate_request, 2);
    assert_eq!(net.b.counters().read_responses_sent, 8);
}

/// The same swap in the last READ: nothing comes after it, so no implied NAK; rxe waits for
/// the retransmit timer, which the completer pushed to a full timeout after the last response
/// arrived (`reset_retry_timer`), then retries from the first missing response.
#[test]
fn swapped_responses_of_the_last_read_wait_for_the_retransmit_timer() {
    let mut net = Net::rxe(1000, 50);
    let s = Psn::new(1000);
    net.a.post(Verb::Read { len: 4096 });
    let f = net.poll_a();
    net.now += HOP_NS;
    net.deliver_b(f);
    let mut r = net.poll_b();
    r.swap(1, 2);
    net.now += HOP_NS;
    let last_arrival = net.now;
    net.deliver_a(r);
    net.run_clean();
    let a = net.a.counters();
    assert_eq!(a.out_of_seq_responses, 2);
    assert_eq!(a.implied_naks, 0);
    assert_eq!(a.timeouts, 1);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.read_retries, 1);
    assert_eq!(a.retransmitted_pkts, 1);
    let req = net.sent(Dir::AtoB);
    assert_eq!(req.len(), 2);
    let timeout = net.a.config().timeout_ns;
    assert_eq!(req[1].0, last_arrival + timeout);
    assert_eq!(req[1].1.psn, s.add(2));
    assert_eq!(req[1].1.reth.map(|r| r.dma_len), Some(2048));
    assert_eq!(net.a.completed(), 1);
}

/// A READ then a WRITE; the WRITE's ACK overtakes the READ RESPONSE. The ACK is past the
/// unanswered READ: an implied NAK, both are sent again; the late original response then
/// completes the READ, and the replayed one is stale.
#[test]
fn an_ack_overtaking_a_read_response_below_it_is_an_implied_nak() {
    let mut net = Net::rxe(0xFF_FFFF, 50);
    net.a.post(Verb::Read { len: 1024 });
    net.a.post(Verb::Write { len: 1024 });
    let f = net.poll_a();
    net.now += HOP_NS;
    net.deliver_b(f);
    let mut r = net.poll_b();
    let ops: Vec<_> = r.iter().map(|p| seen(p).op).collect();
    assert_eq!(ops, [Opcode::RcReadResponseOnly, Opcode::RcAcknowledge]);
    r.swap(0, 1);
    net.now += HOP_NS;
    net.deliver_a(r);
    net.run_clean();
    let a = net.a.counters();
    assert_eq!(a.implied_naks, 1);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.read_retries, 1);
    assert_eq!(a.retransmitted_pkts, 2);
    assert_eq!(a.stale_responses, 1);
    assert_eq!(a.out_of_seq_responses, 0);
    assert_eq!((net.a.completed(), net.a.failed()), (2, 0));
    assert_eq!(net.b.counters().duplicate_request, 2);
}

/// Three WRITEs, the last packet lost with nothing after it: the retransmit timer fires a full
/// timeout after the last ACK arrived and the requester resends from `comp.psn`.
#[test]
fn a_lost_last_packet_is_recovered_by_the_retransmit_timer() {
    let mut net = Net::rxe(0xFF_FFFE, 50);
    let s = Psn::new(0xFF_FFFE);
    for _ in 0..3 {
        net.a.post(Verb::Write { len: 1024 });
    }
    let mut dropped = false;
    net.run(|dir, f| {
        if dir == Dir::AtoB && !dropped {
            if let Some(i) = f.iter().position(|p| seen(p).psn == s.add(2)) {
                f.remove(i);
                dropped = true;
            }
        }
    });
    let a = net.a.counters();
    assert_eq!(a.timeouts, 1);
    assert_eq!(a.completer_retry_err, 1);
    assert_eq!(a.retransmitted_pkts, 1);
    assert_eq!(a.sent_pkts, 4);
    assert_eq!(net.a.completed(), 3);
    let b = net.b.counters();
    assert_eq!((b.duplicate_request, b.out_of_seq_request), (0, 0));
    let acks = net.sent(Dir::BtoA);
    let second_ack_arrival = acks[1].0 + HOP_NS;
    let req = net.sent(Dir::AtoB);
    assert_eq!(req[3].1.psn, s.add(2));
    assert_eq!(req[3].0, second_ack_arrival + net.a.config().timeout_ns);
}

/// A SEND without a receive WQE: RNR NAK with the responder's `min_rnr_timer` code
/// (`send_rnr_err`); the completer waits the RNR time (`rcvd_rnr_err`, `COMPST_RNR_RETRY`),
/// then retries; the receive posted meanwhile takes it.
#[test]
fn send_without_receive_wqe_is_rnr_naked_and_retried_after_the_rnr_timer() {
    let mut net = Net::rxe(77, 50);
    net.a.post(Verb::Send { len: 1024 });
    let f = net.poll_a();
    net.now += HOP_NS;
    net.deliver_b(f);
    let r = net.poll_b();
    assert_eq!(r.len(), 1);
    assert_eq!(seen(&r[0]).syn, Some(Syndrome::RnrNak { timer: 12 }));
    assert_eq!(seen(&r[0]).psn, Psn::new(77));
    net.b.post_recv(1);
    net.now += HOP_NS;
    let nak_arrival = net.now;
    net.deliver_a(r);
    assert_eq!(net.a.next_timer_ns(), Some(nak_arrival + 640_000));
    net.run_clean();
    let req = net.sent(Dir::AtoB);
    assert_eq!(req.len(), 2);
    assert_eq!(req[1].0, nak_arrival + 640_000);
    let a = net.a.counters();
    assert_eq!(a.rcvd_rnr_err, 1);
    assert_eq!(a.retransmitted_pkts, 1);
    assert_eq!((a.completer_retry_err, a.timeouts), (0, 0));
    assert_eq!(net.b.counters().send_rnr_err, 1);
    assert_eq!(net.b.counters().rdma_recvs, 1);
    assert_eq!(net.a.completed(), 1);
}

/// rnr_retry 2 and never a receive WQE: two RNR retries, the third RNR NAK exceeds the count.
#[test]
fn rnr_retry_exhausted_moves_the_qp_to_error() {
    let mut cfg = QpConfig::rc(Device::RXE);
    cfg.rnr_retry = 2;
    let mut net = Net::new(cfg, QpConfig::rc(Device::RXE), 5, 6);
    net.a.post(Verb::Send { len: 1 });
    net.a.post(Verb::Write { len: 1 });
    net.run_clean();
    assert_eq!(net.a.state(), QpState::Error(QpError::RnrRetryExceeded));
    let a = net.a.counters();
    assert_eq!(a.rcvd_rnr_err, 3);
    assert_eq!(a.retry_rnr_exceeded_err, 1);
    assert_eq!(a.rdma_sends, 1);
    assert_eq!(net.b.counters().send_rnr_err, 3);
    assert_eq!((net.a.completed(), net.a.failed()), (0, 2));
    assert!(net.a.idle());
}

/// A path that drops everything, retry_cnt 3: three timeouts each resend both WRITEs, the
/// fourth exceeds the count (`retry_exceeded_err`); the QP is in error and sends nothing more.
#[test]
fn a_black_hole_exhausts_retry_cnt_and_the_qp_stops() {
    let mut cfg = QpConfig::rc(Device::RXE);
    cfg.retry_cnt = 3;
    let mut net = Net::new(cfg, QpConfig::rc(Device::RXE), 0xFF_FFFF, 6);
    net.a.post(Verb::Write { len: 1024 });
    net.a.post(Verb::Write { len: 1024 });
    let t0 = net.now;
    net.run(|dir, f| {
        if dir == Dir::AtoB {
            f.clear();
        }
    });
    assert_eq!(net.a.state(), QpState::Error(QpError::RetryExceeded));
    let a = *net.a.counters();
    assert_eq!(a.timeouts, 4);
    assert_eq!(a.completer_retry_err, 3);
    assert_eq!(a.retry_exceeded_err, 1);
    assert_eq!(a.sent_pkts, 8);
    assert_eq!(a.retransmitted_pkts, 6);
    assert_eq!((net.a.completed(), net.a.failed()), (0, 2));
    let t = net.a.config().timeout_ns;
    let times: Vec<u64> = net.sent(Dir::AtoB).iter().map(|&(at, _)| at).collect();
    assert_eq!(
        times,
        [
            t0,
            t0,
            t0 + t,
            t0 + t,
            t0 + 2 * t,
            t0 + 2 * t,
            t0 + 3 * t,
            t0 + 3 * t
        ]
    );
    // It stays silent.
    assert_eq!(net.a.next_timer_ns(), None);
    net.a.post(Verb::Write { len: 1 });
    let mut out = Vec::new();
    net.a.poll(net.now + 10 * t, &mut out);
    assert!(out.is_empty());
    assert_eq!(net.a.failed(), 3);
    assert_eq!(net.a.counters().sent_pkts, 8);
}

/// rxe never decrements a retry count of 7 (`if (qp->comp.retry_cnt != 7)`): it retries
/// forever.
#[test]
fn retry_cnt_7_retries_forever_as_rxe_does() {
    let mut net = Net::rxe(0, 1);
    net.a.post(Verb::Write { len: 1 });
    let _ = net.poll_a();
    for _ in 0..20 {
        let t = net
            .a
            .next_timer_ns()
            .expect("the retransmit timer is armed");
        net.now = t;
        let _ = net.poll_a();
    }
    let a = net.a.counters();
    assert_eq!((a.timeouts, a.completer_retry_err), (20, 20));
    assert_eq!(a.retry_exceeded_err, 0);
    assert_eq!(net.a.state(), QpState::Rts);
}

/// UC SEND: a lost MIDDLE drops the rest of that message (`check_psn`: `drop_msg`), and the
/// next message too: its first packet finds the old message unfinished (`check_op_seq` ->
/// class D1, `do_class_d1e_error` drops it). The one after is received. No NAK, no resend.
#[test]
fn uc_send_gap_drops_the_rest_of_the_message_and_the_next_one() {
    let mut net = Net::new(
        QpConfig::uc(Device::RXE),
        QpConfig::uc(Device::RXE),
        0xFF_FFFD,
        9,
    );
    let s = Psn::new(0xFF_FFFD);
    net.b.post_recv(3);
    net.a.post(Verb::Send { len: 4096 });
    net.a.post(Verb::Send { len: 1024 });
    net.a.post(Verb::Send { len: 1024 });
    net.run(|dir, f| {
        if dir == Dir::AtoB {
            f.retain(|p| seen(p).psn != s.add(1));
        }
    });
    let b = net.b.counters();
    assert_eq!(b.uc_dropped, 3);
    assert_eq!(b.rdma_recvs, 1);
    assert_eq!(b.sent_pkts, 0);
    assert_eq!(net.b.recv_posted(), 2);
    assert_eq!(net.b.rq_psn(), s.add(6));
    let a = net.a.counters();
    assert_eq!((a.sent_pkts, a.retransmitted_pkts), (6, 0));
    assert_eq!(net.a.completed(), 3);
}

/// UC WRITE: after a lost MIDDLE, rxe's `do_class_d1e_error` leaves `resp.opcode` at WRITE
/// FIRST (it resets it only when a receive WQE was being filled), so every later message
/// fails `check_op_seq` and is dropped: the QP's receive side stays dead.
#[test]
fn uc_write_gap_leaves_rxe_dropping_every_later_message() {
    let mut net = Net::new(QpConfig::uc(Device::RXE), QpConfig::uc(Device::RXE), 100, 9);
    let s = Psn::new(100);
    net.b.post_recv(1);
    net.a.post(Verb::Write { len: 4096 });
    net.a.post(Verb::Write { len: 1024 });
    net.a.post(Verb::Write { len: 1024 });
    net.a.post(Verb::Send { len: 10 });
    net.run(|dir, f| {
        if dir == Dir::AtoB {
            f.retain(|p| seen(p).psn != s.add(1));
        }
    });
    let b = net.b.counters();
    assert_eq!(b.uc_dropped, 2 + 3);
    assert_eq!(b.rdma_recvs, 0);
    assert_eq!(net.b.rq_psn(), s.add(1));
    assert_eq!(b.sent_pkts, 0);
    assert_eq!(net.a.completed(), 4);
    assert_eq!(net.a.counters().retransmitted_pkts, 0);
}

/// An old ACK that a READ RESPONSE FIRST overtook arrives inside the READ's responses: rxe's
/// `check_psn` lets it through to `check_ack` (for its NAK code), `COMPST_UPDATE_COMP` resets
/// `comp.opcode` (an ACK is an END packet), and the next READ RESPONSE MIDDLE fails the
/// opcode sequence: `COMPST_ERROR`, the QP goes to the error state.
#[test]
fn an_old_ack_inside_a_read_response_stream_breaks_the_qp() {
    let mut net = Net::rxe(300, 50);
    net.a.post(Verb::Write { len: 1024 });
    net.a.post(Verb::Read { len: 3072 });
    let f = net.poll_a();
    net.now += HOP_NS;
    net.deliver_b(f);
    let mut r = net.poll_b();
    let ops: Vec<_> = r.iter().map(|p| seen(p).op).collect();
    assert_eq!(
        ops,
        [
            Opcode::RcAcknowledge,
            Opcode::RcReadResponseFirst,
            Opcode::RcReadResponseMiddle,
            Opcode::RcReadResponseLast,
        ]
    );
    r.swap(0, 1);
    net.now += HOP_NS;
    net.deliver_a(r);
    assert_eq!(net.a.state(), QpState::Error(QpError::BadResponse));
    assert_eq!((net.a.completed(), net.a.failed()), (1, 1));
    assert_eq!(net.a.counters().rx_in_error, 1);
    assert_eq!(net.a.counters().transport_errors(), 0);
}

/// Frames to B that are not for it or not valid are counted and ignored; B stays in RTS and
/// then takes the genuine frame.
#[test]
fn garbage_frames_are_counted_and_ignored() {
    let mut net = Net::rxe(500, 60);
    net.a.post(Verb::Write { len: 64 });
    let good = net.poll_a().remove(0).data().to_vec();
    // Ethernet 14 + IPv4 20 + UDP 8: the BTH starts at 42, the payload after the RETH at 70.
    let bth = 42;
    let mut bad_opcode = good.clone();
    bad_opcode[bth] = 0x1F;
    let mut wrong_qpn = good.clone();
    wrong_qpn[bth + 7] ^= 0x40;
    let mut bad_icrc = good.clone();
    bad_icrc[bth + 12 + 16 + 3] ^= 1;
    let mut uc_opcode = good.clone();
    uc_opcode[bth] = 0x2A;
    let mut bad_pkey = good.clone();
    bad_pkey[bth + 2] = 0x12;
    let random: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8).collect();
    let b = &mut net.b;
    let t = 2_000_000;
    b.handle(&[], t);
    b.handle(&good[..40], t);
    b.handle(&good[..bth + 20], t);
    b.handle(&good[..good.len() - 2], t);
    b.handle(&bad_opcode, t);
    b.handle(&random, t);
    assert_eq!(b.counters().rx_malformed, 6);
    b.handle(&wrong_qpn, t);
    assert_eq!(b.counters().rx_wrong_qpn, 1);
    b.handle(&bad_icrc, t);
    assert_eq!(b.counters().rx_bad_icrc, 1);
    b.handle(&uc_opcode, t);
    assert_eq!(b.counters().rx_wrong_transport, 1);
    b.handle(&bad_pkey, t);
    assert_eq!(b.counters().rx_bad_pkey, 1);
    // A's own frame handed back to A: the addresses are the wrong way round.
    net.a.handle(&good, t);
    assert_eq!(net.a.counters().rx_wrong_addr, 1);
    let b = &mut net.b;
    assert_eq!(b.counters().rcvd_pkts, 0);
    assert_eq!(b.counters().rx_dropped(), 10);
    assert_eq!(b.state(), QpState::Rts);
    assert_eq!(b.rq_psn(), Psn::new(500));
    assert_eq!(b.next_timer_ns(), None);
    b.handle(&good, t);
    assert_eq!(b.counters().rcvd_pkts, 1);
    assert_eq!(b.rq_psn(), Psn::new(501));
    let mut acks = Vec::new();
    b.poll(t, &mut acks);
    assert_eq!(acks.len(), 1);
    net.a.handle(acks[0].data(), t + 1);
    assert_eq!(net.a.completed(), 1);
    // The same ACK again: no WQE waits for it.
    net.a.handle(acks[0].data(), t + 2);
    assert_eq!(net.a.counters().stale_responses, 1);
    assert_eq!(net.a.counters().transport_errors(), 0);
    assert_eq!(net.b.counters().transport_errors(), 0);
}

/// Every byte of valid frames flipped and every truncation: nothing panics, and every frame is
/// either dropped before the state machines or counted in `rcvd_pkts`.
#[test]
fn every_mutation_of_valid_frames_is_counted_once_and_never_panics() {
    let mut frames = Vec::new();
    let mut src = Net::rxe(0xFF_FFF0, 60);
    src.b.post_recv(1);
    for v in all_verbs() {
        src.a.post(v);
    }
    src.a.poll(src.now, &mut frames);
    let mut fed = 0u64;
    let mut b = Qp::new(
        endpoints().1,
        QPN_B,
        QpConfig::rc(Device::RXE),
        Psn::new(60),
        Psn::new(0xFF_FFF0),
    );
    for f in frames.iter().take(12) {
        let d = f.data();
        for cut in 0..d.len() {
            b.handle(&d[..cut], 5);
            fed += 1;
        }
        for i in 0..d.len() {
            let mut m = d.to_vec();
            m[i] ^= 0xA5;
            b.handle(&m, 5);
            fed += 1;
        }
        let mut out = Vec::new();
        b.poll(6, &mut out);
    }
    let c = b.counters();
    assert_eq!(c.rcvd_pkts + c.rx_dropped(), fed);
    assert!(c.rx_dropped() > fed / 2);
}

/// `next_timer_ns` and `idle` describe what `poll` will do.
#[test]
fn next_timer_and_idle_follow_the_work() {
    let mut net = Net::rxe(1, 2);
    assert_eq!(net.a.next_timer_ns(), None);
    assert!(net.a.idle());
    net.a.post(Verb::Write { len: 1 });
    assert!(!net.a.idle());
    assert_eq!(net.a.next_timer_ns(), Some(0));
    let f = net.poll_a();
    assert_eq!(f.len(), 1);
    let armed = net.now + net.a.config().timeout_ns;
    assert_eq!(net.a.next_timer_ns(), Some(armed));
    net.run_clean();
    assert!(net.a.idle() && net.b.idle());
    assert_eq!(net.a.next_timer_ns(), None);
    assert_eq!(rnr_timer_code(640_000), 12);
    assert_eq!(rnr_timer_code(1), 1);
    assert_eq!(rnr_timer_code(10_000_000_000), 0);
    assert_eq!(ib_timeout_ns(14), 67_108_864);
    assert_eq!(ib_timeout_ns(0), 0);
}

/// `rate_bps` spaces request packets by their wire time; `next_timer_ns` names the next slot.
#[test]
fn a_rate_spaces_request_packets() {
    let mut cfg = QpConfig::rc(Device::RXE);
    cfg.rate_bps = Some(88_000_000);
    let mut net = Net::new(cfg, QpConfig::rc(Device::RXE), 3, 4);
    for _ in 0..5 {
        net.a.post(Verb::Write { len: 1024 });
    }
    let first = net.poll_a();
    assert_eq!(first.len(), 1);
    // 14 + 20 + 8 + 12 + 16 (RETH) + 1024 + 4 (ICRC) = 1098 bytes = 8784 bits at 88 Mbit/s.
    let gap = 8784 * 1_000_000_000 / 88_000_000;
    let t0 = net.now;
    assert_eq!(net.a.next_timer_ns(), Some(t0 + gap));
    net.now += HOP_NS;
    net.deliver_b(first);
    net.run_clean();
    let times: Vec<u64> = net.sent(Dir::AtoB).iter().map(|&(t, _)| t).collect();
    assert_eq!(times.len(), 5);
    for w in times.windows(2) {
        assert!(
            w[1] - w[0] >= gap && w[1] - w[0] < gap + HOP_NS,
            "{times:?}"
        );
    }
    assert_eq!(net.a.completed(), 5);
    assert_eq!(net.a.counters().transport_errors(), 0);
}
