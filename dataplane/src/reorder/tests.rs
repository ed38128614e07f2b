//! Tests of the reorder core: every case of the table, the wrap at 2^24, learning, timeouts,
//! resync, the response direction, bounds, and a proptest consistency check against a simple
//! restatement of the table (`BTreeMap` per stream) over random interleavings. The behavioural
//! oracle (RNIC models that follow the real transports) is in `tests/tests/reorder_transport.rs`
//! and `tests/tests/reorder_rnic.rs`.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::config::{ReorderConfig, NAKED_WAIT_FACTOR};
use super::core::*;
use super::pairing::CmEvent;
use super::response::{HostRequest, ResponseKind};
use super::stream::*;
use crate::meta::{MetaKind, PathStamp, QpRef, RoceMeta, NO_PATH};
use crate::wire::Psn;

/// What the engine would hand over with a request-direction packet of stream `key`: `span`
/// PSNs from `psn`, `len` bytes, from no sender the pairing hears of (remote 0), over no
/// path whose order counts.
fn req(key: StreamKey, psn: Psn, span: u32, len: u32) -> RoceMeta {
    peer_req(key, psn, span, len, None)
}

/// [`req`] from `peer` (the sender's address and UDP source port), when given.
fn peer_req(key: StreamKey, psn: Psn, span: u32, len: u32, peer: Option<(u128, u16)>) -> RoceMeta {
    let StreamKey::Request { local, qpn } = key else {
        panic!("a request stream's key");
    };
    let (remote, sport) = peer.unwrap_or((0, 0));
    RoceMeta {
        local,
        remote,
        sport,
        qpn,
        psn,
        span,
        full_payload: 0,
        len,
        kind: MetaKind::Request { read_len: None },
        path: NO_PATH,
        stamp: PathStamp::NONE,
    }
}

/// A response-direction packet of `kind` with `psn` and `len` bytes, from `REMOTE` to the
/// local requester `LQ` at `LOCAL`.
fn response_meta(kind: ResponseKind, psn: Psn, len: u32) -> RoceMeta {
    let (kind, full_payload) = match kind {
        ResponseKind::Fill { ends, full_payload } => (MetaKind::Fill { ends }, full_payload as u16),
        ResponseKind::Ack => (MetaKind::Ack, 0),
    };
    RoceMeta {
        psn,
        full_payload,
        len,
        kind,
        qpn: LQ,
        ..host(MetaKind::Ack)
    }
}

/// What a local host sends of `kind`, at `LOCAL` to `REMOTE`'s QP `RQ`, PSN 0.
fn host(kind: MetaKind) -> RoceMeta {
    RoceMeta {
        local: LOCAL,
        remote: REMOTE,
        sport: 0,
        qpn: RQ,
        psn: Psn::new(0),
        span: 1,
        full_payload: 0,
        len: 60,
        kind,
        path: NO_PATH,
        stamp: PathStamp::NONE,
    }
}

/// A local host's READ, atomic or FLUSH request as the engine reports it.
fn host_request(r: HostRequest) -> RoceMeta {
    match r {
        HostRequest::Read { dma_len, span } => RoceMeta {
            span,
            ..host(MetaKind::HostRead { dma_len })
        },
        HostRequest::Single => host(MetaKind::HostSingle),
    }
}

/// An RDMA CM message passing the switch.
fn cm_meta(ev: &CmEvent) -> RoceMeta {
    RoceMeta {
        local: ev.sender,
        remote: ev.receiver,
        ..host(MetaKind::Cm {
            sender_local: ev.sender_local,
            receiver_local: ev.receiver_local,
            msg: ev.msg,
        })
    }
}

const LOCAL: u128 = 0xA;
const REMOTE: u128 = 0xB;

fn cfg() -> ReorderConfig {
    ReorderConfig {
        window: 64,
        max_streams: 16,
        max_rings: 8,
        max_held_bytes: 1 << 20,
        hold_timeout_ns: 1_000,
        learn_ns: 0,
        idle_evict_ns: u64::MAX,
        max_reads: 4,
        stamp_source_prefix: (32, 128),
    }
}

/// The local requester's QPN and the remote QPN it sends its READs to.
const LQ: u32 = 0x11;
const RQ: u32 = 0x22;

fn fill(ends: bool) -> ResponseKind {
    ResponseKind::Fill {
        ends,
        full_payload: 0,
    }
}

/// The local requester reads `n` PSNs from `psn` (what that releases goes where [`released`]
/// finds it).
fn read(c: &mut ReorderCore<u32>, sport: u16, psn: u32, n: u32, now: u64) {
    let mut out = Vec::new();
    c.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport,
            qpn: RQ,
            psn: Psn::new(psn),
            ..host_request(HostRequest::Read {
                dma_len: n * 1024,
                span: n,
            })
        },
        now,
        &mut out,
    );
    OUT.with(|o| o.borrow_mut().extend(out));
}

fn key(qpn: u32) -> StreamKey {
    StreamKey::Request { local: LOCAL, qpn }
}

struct H {
    core: ReorderCore<u32>,
    out: Vec<u32>,
}

impl H {
    fn new(cfg: ReorderConfig) -> H {
        H {
            core: ReorderCore::new(cfg),
            out: Vec::new(),
        }
    }
    fn ins(&mut self, qpn: u32, psn: u32, id: u32, now: u64) -> Insert {
        self.core.handle_packet(
            0,
            &req(key(qpn), Psn::new(psn), 1, 100),
            id,
            now,
            &mut self.out,
        )
    }
    fn take(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.out)
    }
}

#[test]
fn in_order_held_drained() {
    let mut h = H::new(cfg());
    assert_eq!(h.ins(1, 100, 0, 0), Insert::Released);
    assert_eq!(h.ins(1, 102, 2, 0), Insert::Held);
    assert_eq!(h.ins(1, 103, 3, 0), Insert::Held);
    assert_eq!(h.take(), vec![0]);
    assert_eq!(h.core.held(), 2);
    assert_eq!(h.ins(1, 101, 1, 0), Insert::Released);
    assert_eq!(h.take(), vec![1, 2, 3]);
    assert_eq!(h.core.held(), 0);
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(104)));
    assert_eq!(h.core.totals().released_in_order, 4);
}

#[test]
fn poll_timeout_is_the_hold_deadline_and_the_sweep_is_no_reason_to_wake() {
    let mut h = H::new(ReorderConfig {
        idle_evict_ns: 1_000_000,
        ..cfg()
    });
    h.core.poll(0, &mut h.out);
    assert_eq!(
        h.core.poll_timeout(),
        u64::MAX,
        "nothing held, nothing timed"
    );
    h.ins(1, 0, 0, 10);
    h.core.poll(10, &mut h.out); // its (empty) learning window ends
    assert_eq!(h.core.poll_timeout(), u64::MAX);
    assert_eq!(h.ins(1, 2, 2, 20), Insert::Held);
    // The gap at 1 opened at 20 and is held 1 us (cfg's hold timeout).
    assert_eq!(h.core.poll_timeout(), 1_020);
    // The sweep for idle streams (every 10 us at most) is upkeep: due, but no deadline.
    assert!(h.core.sweep_at() <= 10_000);
    h.core.poll(500, &mut h.out);
    assert_eq!(h.core.poll_timeout(), 1_020);
    assert!(h.core.poll_due(1_020));
    h.core.poll(1_019, &mut h.out);
    assert_eq!(h.take(), vec![0], "nothing before the deadline");
    h.core.poll(1_020, &mut h.out);
    assert_eq!(h.take(), vec![2], "the gap timed out at its deadline");
    assert_eq!(h.core.poll_timeout(), u64::MAX);
}

#[test]
fn packets_held_again_at_a_restart_start_their_gap_at_the_restart() {
    let mut h = H::new(cfg()); // hold timeout 1 us, no learning window
    assert_eq!(h.ins(1, 0, 0, 0), Insert::Released);
    // Far beyond the window: the far list.
    assert_eq!(h.ins(1, 100_001, 1, 0), Insert::Held);
    assert_eq!(h.ins(1, 100_003, 3, 0), Insert::Held);
    assert_eq!(h.take(), vec![0]);
    // A packet far from the old sequence with only that sequence's far packets held: a new
    // sequence starts at the lowest of them, and what is held is held again, from now.
    h.ins(1, 1 + (1 << 22) + 1000, 9, 500);
    assert_eq!(h.take(), vec![1]);
    h.core.poll(1_000, &mut h.out);
    assert_eq!(
        h.take(),
        Vec::<u32>::new(),
        "the gap opened at 500, not at 0"
    );
    h.core.poll(1_500, &mut h.out);
    assert_eq!(h.take(), vec![3, 9]);
    assert_eq!(h.core.totals().timeouts, 1);
}

#[test]
fn late_and_duplicate() {
    let mut h = H::new(cfg());
    h.ins(1, 10, 0, 0);
    assert_eq!(h.ins(1, 12, 2, 0), Insert::Held);
    assert_eq!(h.ins(1, 12, 99, 0), Insert::Duplicate);
    assert_eq!(h.ins(1, 9, 7, 0), Insert::Late);
    assert_eq!(
        h.ins(1, 10, 8, 0),
        Insert::Late,
        "a retransmission of a released PSN"
    );
    assert_eq!(h.take(), vec![0, 7, 8]);
    assert_eq!((h.core.totals().late, h.core.totals().duplicates), (2, 1));
}

#[test]
fn beyond_the_window_is_held_in_the_far_list_then_overflows() {
    let mut h = H::new(cfg()); // W = 64: the far list holds 256
    h.ins(1, 0, 0, 0);
    h.ins(1, 5, 5, 0);
    h.ins(1, 9, 9, 0);
    h.take();
    // 100 is 99 past e = 1: beyond the ring, held in the far list.
    assert_eq!(h.ins(1, 100, 100, 0), Insert::Held);
    for p in 101..356 {
        assert_eq!(h.ins(1, p, p, 0), Insert::Held, "{p}");
    }
    assert_eq!(h.core.held(), 2 + 256);
    // The far list is full: 400 overflows. Held packets go in order, gaps skipped, until 400
    // fits the window (from 337 on it does).
    assert_eq!(
        h.ins(1, 400, 400, 0),
        Insert::Overflowed { released: 2 + 237 }
    );
    // What follows the skipped gap without a gap of its own goes too (337..356).
    let mut want = vec![5, 9];
    want.extend(100..356);
    assert_eq!(h.take(), want);
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(356)));
    assert_eq!(h.core.totals().overflows, 1);
    for p in 357..400 {
        assert_eq!(h.ins(1, p, p, 0), Insert::Held);
    }
    assert_eq!(h.ins(1, 356, 356, 0), Insert::Released);
    assert_eq!(h.take(), (356..=400).collect::<Vec<_>>());
    assert_eq!(h.core.held(), 0);
    // Far beyond with nothing held: the packet itself is the expected PSN.
    assert_eq!(h.ins(1, 100_000, 7, 0), Insert::Held, "far list");
    h.core.poll(10_000, &mut h.out);
    assert_eq!(h.take(), vec![7], "given up after the hold timeout");
}

#[test]
fn wrap_around_2_pow_24() {
    for start in [0xFF_FFF0u32, 0xFF_FFFF, 0xFF_FFC1] {
        let mut h = H::new(cfg());
        h.ins(1, start, 0, 0);
        // Deliver start+1 .. start+40 reversed: all held across the wrap, then drained.
        for k in (2..=40u32).rev() {
            assert_eq!(
                h.ins(1, start.wrapping_add(k) & 0xFF_FFFF, k, 0),
                Insert::Held
            );
        }
        assert_eq!(
            h.ins(1, start.wrapping_add(1) & 0xFF_FFFF, 1, 0),
            Insert::Released
        );
        assert_eq!(h.take(), (0..=40).collect::<Vec<_>>());
        assert_eq!(
            h.core.expected(&key(1)),
            Some(Psn::new(start.wrapping_add(41)))
        );
        // Behind the wrap is late, not ahead.
        assert_eq!(h.ins(1, start, 77, 0), Insert::Late);
    }
}

#[test]
fn read_request_span_advances_by_its_psns() {
    let mut h = H::new(cfg());
    h.ins(1, 50, 0, 0);
    // A READ REQUEST at 51 spanning 4 PSNs: the next request is 55.
    assert_eq!(h.ins(1, 55, 55, 0), Insert::Held);
    assert_eq!(
        h.core
            .handle_packet(0, &req(key(1), Psn::new(51), 4, 60), 51, 0, &mut h.out),
        Insert::Released
    );
    assert_eq!(h.take(), vec![0, 51, 55]);
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(56)));
}

#[test]
fn gap_timeout_releases_in_order_and_nak_resyncs() {
    let mut h = H::new(cfg());
    h.core.learn_pair(&QpRef {
        local: LOCAL,
        remote: REMOTE,
        sport: 49152,
        qpn: 1,
    });
    h.ins(1, 0, 0, 0);
    h.ins(1, 2, 2, 100);
    h.ins(1, 3, 3, 200);
    h.take();
    h.core.poll(900, &mut h.out);
    assert!(h.take().is_empty(), "not yet");
    h.core.poll(1_100, &mut h.out);
    assert_eq!(h.take(), vec![2, 3], "PSN 1 declared lost");
    assert_eq!(h.core.totals().timeouts, 1);
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(4)));
    // More arrive after the timeout and are held behind 4's gap... then the RNIC NAKs 1.
    h.ins(1, 5, 5, 1_200);
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 49152,
            qpn: 0,
            psn: Psn::new(1),
            ..host(MetaKind::HostNak)
        },
        1_300,
        &mut h.out,
    );
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(1)));
    assert_eq!(h.core.totals().resyncs, 1);
    // The go-back-N retransmission 1, 2, 3, 4 is now in order; 5 was kept and follows.
    for p in 1..=4 {
        h.ins(1, p, 10 + p, 1_400);
    }
    assert_eq!(h.take(), vec![11, 12, 13, 14, 5]);
}

/// A worker that stops flushes with one poll at the end of time (`u64::MAX`): every gap is
/// given up and everything held comes out in order, with no look re-armed past the end of time
/// (a debug build once overflowed there, in CI's congestion test).
#[test]
fn a_poll_at_the_end_of_time_releases_everything() {
    let mut h = H::new(cfg());
    h.ins(1, 0, 0, 0);
    h.ins(1, 2, 2, 100);
    h.ins(2, 10, 10, 0);
    h.ins(2, 12, 12, 100);
    h.ins(2, 14, 14, 200);
    h.take();
    assert_eq!(h.core.held(), 3);
    h.core.poll(u64::MAX, &mut h.out);
    assert_eq!(h.take(), vec![2, 12, 14]);
    assert_eq!(h.core.held(), 0);
    h.core.poll(u64::MAX, &mut h.out);
    assert!(h.take().is_empty());
    assert_eq!(h.core.poll_timeout(), u64::MAX);
}

#[test]
fn nak_ahead_releases_what_is_behind_it() {
    let mut h = H::new(cfg());
    h.core.learn_pair(&QpRef {
        local: LOCAL,
        remote: REMOTE,
        sport: 7,
        qpn: 1,
    });
    h.ins(1, 0, 0, 0);
    h.ins(1, 3, 3, 0);
    h.ins(1, 6, 6, 0);
    h.take();
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0,
            psn: Psn::new(5),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut h.out,
    );
    assert_eq!(h.take(), vec![3]);
    assert_eq!(h.ins(1, 5, 5, 0), Insert::Released);
    assert_eq!(h.take(), vec![5, 6]);
    // An ACK through 20 moves a lagging stream forward.
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0,
            psn: Psn::new(20),
            ..host(MetaKind::HostAck)
        },
        0,
        &mut h.out,
    );
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(21)));
    // A NAK for another remote QP whose PSN fits no stream changes nothing.
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 8,
            qpn: 9,
            psn: Psn::new(0x80_0000),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut h.out,
    );
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(21)));
    assert_eq!(h.core.totals().host_naks_ignored, 1);
}

#[test]
fn learning_starts_from_the_lowest_psn() {
    let mut h = H::new(ReorderConfig {
        learn_ns: 500,
        ..cfg()
    });
    assert_eq!(h.ins(1, 12, 12, 0), Insert::Held);
    assert_eq!(h.ins(1, 10, 10, 100), Insert::Held);
    assert_eq!(h.ins(1, 13, 13, 200), Insert::Held);
    h.core.poll(499, &mut h.out);
    assert!(h.take().is_empty());
    h.core.poll(500, &mut h.out);
    assert_eq!(h.take(), vec![10], "starts at 10; 11 missing");
    assert_eq!(h.ins(1, 11, 11, 600), Insert::Released);
    assert_eq!(h.take(), vec![11, 12, 13]);
    assert_eq!(h.core.totals().learned, 1);
}

#[test]
fn response_direction_follows_read_ranges_and_holds_acks() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    let mut out = Vec::new();
    let sp = 49441;
    // Without outstanding READs, responses pass straight through.
    assert_eq!(
        c.handle_packet(
            0,
            &RoceMeta {
                local: LOCAL,
                remote: REMOTE,
                sport: sp,
                qpn: LQ,
                ..response_meta(ResponseKind::Ack, Psn::new(5), 60)
            },
            1,
            0,
            &mut out
        ),
        Insert::Passthrough
    );
    // The host reads 3 PSNs at 100 and 2 at 105 (a WRITE used 103, 104 in between).
    read(&mut c, sp, 100, 3, 0);
    read(&mut c, sp, 105, 2, 0);
    out.clear();
    let ins = |c: &mut ReorderCore<u32>, out: &mut Vec<u32>, kind, psn: u32, id| {
        c.handle_packet(
            0,
            &RoceMeta {
                local: LOCAL,
                remote: REMOTE,
                sport: sp,
                qpn: LQ,
                ..response_meta(kind, Psn::new(psn), 100)
            },
            id,
            0,
            out,
        )
    };
    assert_eq!(ins(&mut c, &mut out, fill(false), 101, 101), Insert::Held);
    // The ACK of the WRITE (PSN 104) overtook READ RESPONSE 100: it must wait.
    assert_eq!(
        ins(&mut c, &mut out, ResponseKind::Ack, 104, 1104),
        Insert::Held
    );
    assert_eq!(ins(&mut c, &mut out, fill(true), 106, 106), Insert::Held);
    assert_eq!(
        ins(&mut c, &mut out, fill(false), 100, 100),
        Insert::Released
    );
    assert_eq!(out, vec![100, 101]);
    assert_eq!(
        ins(&mut c, &mut out, fill(true), 102, 102),
        Insert::Released
    );
    // 102 ends the first READ; the next missing fill is 105, after the ACK at 104: it goes.
    assert_eq!(out, vec![100, 101, 102, 1104]);
    assert_eq!(
        ins(&mut c, &mut out, fill(false), 105, 105),
        Insert::Released
    );
    assert_eq!(out, vec![100, 101, 102, 1104, 105, 106]);
    // All READs answered: ACKs pass, stray responses are late.
    assert_eq!(
        ins(&mut c, &mut out, ResponseKind::Ack, 110, 110),
        Insert::Passthrough
    );
    read(&mut c, sp, 120, 1, 0);
    assert_eq!(ins(&mut c, &mut out, fill(true), 99, 99), Insert::Late);
    assert_eq!(c.held(), 0);
    assert_eq!(c.free_rings(), cfg().max_rings);
}

#[test]
fn response_gap_times_out() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    let mut out = Vec::new();
    read(&mut c, 1, 0, 4, 0);
    c.handle_packet(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 1,
            qpn: LQ,
            ..response_meta(fill(false), Psn::new(2), 10)
        },
        2,
        0,
        &mut out,
    );
    c.handle_packet(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 1,
            qpn: LQ,
            ..response_meta(ResponseKind::Ack, Psn::new(9), 10)
        },
        9,
        0,
        &mut out,
    );
    c.poll(2_000, &mut out);
    assert_eq!(out, vec![2, 9]);
    assert_eq!(c.totals().timeouts, 1);
    assert_eq!(c.held(), 0);
}

#[test]
fn bounds_hold_under_a_flood_of_streams() {
    let mut h = H::new(ReorderConfig {
        max_streams: 16,
        max_rings: 4,
        ..cfg()
    });
    for q in 0..1000u32 {
        h.ins(q, 0, q, 0);
        h.ins(q, 2, q + 10_000, 0);
    }
    assert_eq!(h.core.totals().streams, 16);
    assert!(h.core.held() <= 4, "one ring per holding stream, 4 rings");
    assert_eq!(h.core.totals().table_full, 2 * (1000 - 16));
    assert_eq!(h.take().len() + h.core.held(), 2000, "nothing lost");
    // Idle streams are forgotten and their room reused.
    let mut c2: ReorderCore<u32> = ReorderCore::new(ReorderConfig {
        idle_evict_ns: 1_000,
        ..cfg()
    });
    let mut out = Vec::new();
    for q in 0..16 {
        c2.handle_packet(0, &req(key(q), Psn::new(0), 1, 1), q, 0, &mut out);
    }
    for t in 1..10 {
        c2.poll(2_000 * t, &mut out);
    }
    assert_eq!(c2.totals().evictions, 16);
    assert_eq!(c2.totals().streams, 0);
}

#[test]
fn byte_cap_passes_packets_through() {
    let mut h = H::new(ReorderConfig {
        max_held_bytes: 250,
        ..cfg()
    });
    h.ins(1, 0, 0, 0);
    assert_eq!(h.ins(1, 2, 2, 0), Insert::Held);
    assert_eq!(h.ins(1, 3, 3, 0), Insert::Held);
    assert_eq!(
        h.ins(1, 4, 4, 0),
        Insert::Passthrough,
        "300 bytes would exceed 250"
    );
    assert_eq!(h.core.totals().no_room, 1);
}

// ---------------------------------------------- consistency check against a reference model

/// The reference: one `BTreeMap` of held packets per stream, ordered by forward distance from
/// the expected PSN, written from the semantics table without rings, slots or bitmaps.
#[derive(Default, Clone)]
struct ModelStream {
    e: Option<Psn>,
    held: BTreeMap<u32, (Psn, u32, u32)>, // psn value -> (psn, span, id)
    /// Held PSNs that were a window or more ahead when they came (the far list).
    far: std::collections::BTreeSet<u32>,
    gap_since: u64,
    last_seen: u64,
    /// The PSN the host last NAKed: a timeout of that gap keeps `e` there (Go-Back-N).
    naked: Option<Psn>,
}

struct Model {
    w: u32,
    timeout: u64,
    streams: Vec<ModelStream>,
}

impl ModelStream {
    fn ordered(&self, from: Psn) -> Vec<(Psn, u32, u32)> {
        let mut v: Vec<_> = self.held.values().copied().collect();
        v.sort_by_key(|(p, _, _)| p.forward_from(from));
        v
    }
}

impl Model {
    fn advance(&mut self, k: usize, span: u32, out: &mut Vec<u32>) {
        let w = self.w;
        let s = &mut self.streams[k];
        let e = s.e.unwrap();
        for j in 1..span.min(w) {
            if let Some((_, _, id)) = s.held.remove(&e.add(j).value()) {
                s.far.remove(&e.add(j).value());
                out.push(id);
            }
        }
        s.e = Some(e.add(span));
    }

    fn drain(&mut self, k: usize, now: u64, out: &mut Vec<u32>) {
        loop {
            let e = self.streams[k].e.unwrap();
            let Some((_, span, id)) = self.streams[k].held.remove(&e.value()) else {
                break;
            };
            self.streams[k].far.remove(&e.value());
            out.push(id);
            self.advance(k, span, out);
        }
        if !self.streams[k].held.is_empty() {
            self.streams[k].gap_since = now;
        }
    }

    fn insert(&mut self, k: usize, (p, span): (Psn, u32), id: u32, now: u64, out: &mut Vec<u32>) {
        let w = self.w;
        let mut e = *self.streams[k].e.get_or_insert(p);
        let idle = now > self.streams[k].last_seen;
        self.streams[k].last_seen = now;
        if self.streams[k].held.is_empty() && idle && p.distance(e).unsigned_abs() >= w {
            // Back from idle a window or more away: a new sequence starts at `p`.
            e = p;
            self.streams[k].e = Some(p);
            self.streams[k].naked = None;
        }
        let d = p.distance(e);
        if d == 0 {
            out.push(id);
            self.advance(k, span, out);
            self.drain(k, now, out);
            return;
        }
        if d < 0 {
            out.push(id);
            return;
        }
        if d as u32 >= w && self.streams[k].far.len() < 4 * w as usize {
            let s = &mut self.streams[k];
            if s.held.contains_key(&p.value()) {
                return; // duplicate
            }
            if s.held.is_empty() {
                s.gap_since = now;
            }
            s.held.insert(p.value(), (p, span, id));
            s.far.insert(p.value());
            return;
        }
        if d as u32 >= w {
            loop {
                let e = self.streams[k].e.unwrap();
                if (p.distance(e) as u32) < w {
                    break;
                }
                let first = self.streams[k].ordered(e).first().copied();
                match first {
                    Some((q, qspan, qid)) => {
                        self.streams[k].held.remove(&q.value());
                        self.streams[k].far.remove(&q.value());
                        self.streams[k].e = Some(q);
                        out.push(qid);
                        self.advance(k, qspan, out);
                    }
                    None => {
                        self.streams[k].e = Some(p);
                        break;
                    }
                }
            }
            self.drain(k, now, out);
            if self.streams[k].e == Some(p) {
                out.push(id);
                self.advance(k, span, out);
                self.drain(k, now, out);
                return;
            }
        }
        let s = &mut self.streams[k];
        if s.held.contains_key(&p.value()) {
            return; // duplicate
        }
        if s.held.is_empty() {
            s.gap_since = now;
        }
        s.held.insert(p.value(), (p, span, id));
    }

    fn poll(&mut self, now: u64, out: &mut Vec<u32>) {
        for s in &mut self.streams {
            if !s.held.is_empty() && now.saturating_sub(s.gap_since) >= self.timeout {
                let e = s.e.unwrap();
                let mut last = None;
                for (q, span, id) in s.ordered(e) {
                    out.push(id);
                    last = Some(q.add(span));
                }
                s.held.clear();
                s.far.clear();
                if s.naked != Some(e) {
                    s.e = last;
                }
            }
        }
    }

    fn nak(&mut self, k: usize, psn: Psn, now: u64, out: &mut Vec<u32>) {
        let w = self.w;
        let s = &mut self.streams[k];
        let Some(old) = s.e else { return };
        s.naked = Some(psn);
        for (q, _, id) in s.ordered(old) {
            if psn.is_after(old) && q.is_before(psn) {
                s.held.remove(&q.value());
                s.far.remove(&q.value());
                out.push(id);
            } else if (q.distance(psn) as u32) >= w {
                // Kept, beyond the new window: in the far list.
                s.far.insert(q.value());
            }
        }
        s.e = Some(psn);
        self.drain(k, now, out);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        stream: usize,
        offset: u32,
        span: u32,
    },
    Tick(u64),
    Poll,
    Nak {
        stream: usize,
        back: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..3, 0u32..160, prop_oneof![9 => Just(1u32), 1 => 2u32..4])
            .prop_map(|(stream, offset, span)| Op::Insert { stream, offset, span }),
        2 => (1u64..600).prop_map(Op::Tick),
        2 => Just(Op::Poll),
        1 => (0usize..3, 0u32..40).prop_map(|(stream, back)| Op::Nak { stream, back }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A unit consistency check, not a behavioural oracle: the core and [`Model`], a plain
    /// restatement of the same semantics table (one `BTreeMap` per stream instead of rings,
    /// slots and bitmaps), release the same packets in the same order and hold as many, over
    /// random interleavings, timeouts, NAKs and the PSN wrap. It proves the rings implement the
    /// table; it cannot show the table is what hosts need, since the model makes the core's own
    /// choices. The oracle for that is independent of this code: RNIC models that follow the
    /// real transports (`sprayswitch_models::rxe`, after the Linux rxe state machines;
    /// the Go-Back-N models of `tools/models/src/rnic.rs`) behind a sprayed rack, which must
    /// see no sequence error when nothing is lost. Those tests are
    /// `no_rnic_sees_a_transport_error_when_nothing_is_lost` and
    /// `every_rc_verb_in_order_through_spray_and_reorder` in `tests/tests/reorder_transport.rs`
    /// (where `without_reorder_the_oracle_sees_the_spraying` shows the oracle can fail), and
    /// `with_reorder_no_nak_no_retransmission_when_nothing_is_lost` in
    /// `tests/tests/reorder_rnic.rs`.
    #[test]
    fn agrees_with_its_reference_model(bases in proptest::collection::vec(prop_oneof![Just(0xFF_FFA0u32), any::<u32>()], 3),
                                   ops in proptest::collection::vec(op(), 1..300)) {
        let cfg = ReorderConfig { window: 64, hold_timeout_ns: 1_000, learn_ns: 0, ..cfg() };
        let mut core: ReorderCore<u32> = ReorderCore::new(cfg);
        let mut model = Model { w: 64, timeout: 1_000, streams: vec![ModelStream::default(); 3] };
        for k in 0..3 {
            core.learn_pair(&QpRef { local: LOCAL, remote: REMOTE, sport: k as u16, qpn: k as u32 });
        }
        // Each stream moves forward: offsets are relative to a base that follows the stream.
        let mut base: Vec<Psn> = bases.iter().map(|b| Psn::new(*b)).collect();
        let mut now = 0u64;
        let mut id = 0u32;
        // Release order matters within a stream; streams are independent of each other.
        let mut owner: Vec<usize> = Vec::new();
        let per_stream = |v: &[u32], owner: &[usize]| -> Vec<Vec<u32>> {
            (0..3).map(|k| v.iter().copied().filter(|i| owner[*i as usize] == k).collect()).collect()
        };
        for op in ops {
            let (mut got, mut want) = (Vec::new(), Vec::new());
            match op {
                Op::Insert { stream, offset, span } => {
                    let p = base[stream].add(offset);
                    owner.push(stream);
                    core.handle_packet(0, &req(key(stream as u32), p, span, 10), id, now, &mut got);
                    model.insert(stream, (p, span), id, now, &mut want);
                    id += 1;
                    if offset > 100 {
                        base[stream] = base[stream].add(offset - 100);
                    }
                }
                Op::Tick(dt) => now += dt,
                Op::Poll => {
                    core.poll(now, &mut got);
                    model.poll(now, &mut want);
                }
                Op::Nak { stream, back } => {
                    if let Some(e) = model.streams[stream].e {
                        let psn = e.sub(back).add(back / 2);
                        core.handle_host(0, &RoceMeta { local: LOCAL, remote: REMOTE, sport: stream as u16, qpn: 100 + stream as u32, psn, ..host(MetaKind::HostNak) }, now, &mut got);
                        model.nak(stream, psn, now, &mut want);
                    }
                }
            }
            prop_assert_eq!(per_stream(&got, &owner), per_stream(&want, &owner));
            let held: usize = model.streams.iter().map(|s| s.held.len()).sum();
            prop_assert_eq!(core.held(), held);
        }
        // At the end, a long wait releases everything: nothing is ever lost.
        let (mut got, mut want) = (Vec::new(), Vec::new());
        core.poll(now + 10_000, &mut got);
        model.poll(now + 10_000, &mut want);
        prop_assert_eq!(per_stream(&got, &owner), per_stream(&want, &owner));
        prop_assert_eq!(core.held(), 0);
    }
}

#[test]
fn learning_never_holds_two_psns_in_one_slot() {
    // Found by the fuzzer: PSNs held while learning spread over a whole window aliased a slot.
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000_000,
        ..cfg()
    }); // W = 64
    let mut n = 0;
    for p in [100u32, 162, 99, 96, 95, 94, 40, 300] {
        let r = h.ins(1, p, p, 0);
        assert_ne!(r, Insert::Duplicate);
        n += 1;
    }
    h.core.poll(10_000_000, &mut h.out);
    h.core.poll(20_000_000, &mut h.out);
    let mut got = h.take();
    assert_eq!(h.core.held(), 0);
    got.sort();
    assert_eq!(got.len(), n, "nothing lost: {got:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// With learning, timeouts, evictions, response streams and resyncs all in play: every packet
    /// comes out exactly once (or is discarded as a duplicate of a held copy, or as a stale ACK),
    /// and nothing stays held after the timers run out.
    #[test]
    fn conserves_packets_with_everything_enabled(ops in proptest::collection::vec(
        (0u8..6, 0u32..3, 0u32..300, 0u64..400), 1..400)) {
        let cfg = ReorderConfig { learn_ns: 200, idle_evict_ns: 5_000, max_streams: 4, max_rings: 3, ..cfg() };
        let mut core: ReorderCore<u32> = ReorderCore::new(cfg);
        let mut out = Vec::new();
        let (mut inserted, mut discarded) = (0u64, 0u64);
        let mut now = 0;
        let mut id = 0;
        for (kind, stream, psn, dt) in ops {
            now += dt;
            let p = Psn::new(0xFF_FF80 + psn);
            let r = match kind {
                0 | 1 => Some(core.handle_packet(0, &req(key(stream), p, 1 + u32::from(kind), 10), id, now, &mut out)),
                2 => Some(core.handle_packet(0, &RoceMeta { local: LOCAL, remote: REMOTE, sport: stream as u16, qpn: stream, ..response_meta(fill(psn % 3 == 0), p, 10) }, id, now, &mut out)),
                3 => Some(core.handle_packet(0, &RoceMeta { local: LOCAL, remote: REMOTE, sport: stream as u16, qpn: stream, ..response_meta(ResponseKind::Ack, p, 10) }, id, now, &mut out)),
                4 => {
                    let span = 1 + psn % 5;
                    core.handle_host(0, &RoceMeta { local: LOCAL, remote: REMOTE, sport: stream as u16, qpn: 100 + stream, psn: p, ..host_request(HostRequest::Read { dma_len: span * 1024, span }) }, now, &mut out);
                    None
                }
                _ => {
                    core.learn_pair(&QpRef { local: LOCAL, remote: REMOTE, sport: stream as u16, qpn: stream });
                    core.handle_host(0, &RoceMeta { local: LOCAL, remote: REMOTE, sport: stream as u16, qpn: 100 + stream, psn: p, ..host(MetaKind::HostNak) }, now, &mut out);
                    core.poll(now, &mut out);
                    None
                }
            };
            if let Some(r) = r {
                inserted += 1;
                id += 1;
                if r == Insert::Duplicate {
                    discarded += 1;
                }
            }
        }
        core.poll(now + 1_000_000, &mut out);
        core.poll(now + 2_000_000, &mut out);
        prop_assert_eq!(core.held(), 0);
        prop_assert_eq!(core.free_rings(), 3, "every ring back in the pool");
        prop_assert_eq!(core.held_bytes(), 0);
        let mut ids = out.clone();
        ids.sort();
        ids.dedup();
        prop_assert_eq!(ids.len(), out.len(), "no packet out twice");
        // Discarded: duplicates of held copies, and ACKs of no use to the requester (counted
        // stale, on arrival or while they waited).
        prop_assert_eq!(out.len() as u64 + discarded + core.totals().stale_acks, inserted);
    }
}

#[test]
fn a_cm_exchange_gives_the_starting_psn_and_the_pairing() {
    use crate::wire::cm::CmMessage;
    // Learning would hold the first packets for 1 ms; the CM exchange makes it unnecessary.
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000_000,
        ..cfg()
    });
    // The remote host (REMOTE) connects to the local one (LOCAL): REQ in, REP out.
    h.core.handle_host(
        0,
        &cm_meta(&super::pairing::CmEvent {
            sender: REMOTE,
            receiver: LOCAL,
            sender_local: false,
            receiver_local: true,
            msg: CmMessage::Req {
                local_comm_id: 77,
                qpn: 0x500,
                starting_psn: Psn::new(1000),
            },
        }),
        0,
        &mut h.out,
    );
    h.core.handle_host(
        0,
        &cm_meta(&super::pairing::CmEvent {
            sender: LOCAL,
            receiver: REMOTE,
            sender_local: true,
            receiver_local: false,
            msg: CmMessage::Rep {
                local_comm_id: 88,
                remote_comm_id: 77,
                qpn: 0x33,
                starting_psn: Psn::new(5),
            },
        }),
        0,
        &mut h.out,
    );
    assert_eq!(h.core.totals().cm_learned, 1);
    // The remote requester's first packets arrive out of order: no learning delay, PSN 1000 is
    // known to come first.
    assert_eq!(h.ins(0x33, 1001, 1, 0), Insert::Held);
    assert_eq!(h.ins(0x33, 1000, 0, 0), Insert::Released);
    assert_eq!(h.take(), vec![0, 1]);
    // A NAK from the local host (to QPN 0x500 of the remote) finds the stream without any UDP
    // source port pairing.
    h.ins(0x33, 1003, 3, 0);
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 9999,
            qpn: 0x500,
            psn: Psn::new(1003),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut h.out,
    );
    assert_eq!(h.core.totals().host_naks_ignored, 0);
    assert_eq!(h.core.totals().resyncs, 1);
    assert_eq!(h.take(), vec![3]);
}

// ------------------------------------------------- what real requesters and responders do

/// A response towards the local requester `LQ` (sport 1).
fn resp(c: &mut ReorderCore<u32>, kind: ResponseKind, psn: u32, id: u32, now: u64) -> Insert {
    let mut out = Vec::new();
    let r = c.handle_packet(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 1,
            qpn: LQ,
            ..response_meta(kind, Psn::new(psn), 100)
        },
        id,
        now,
        &mut out,
    );
    OUT.with(|o| o.borrow_mut().extend(out));
    r
}

thread_local! {
    static OUT: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn released() -> Vec<u32> {
    OUT.with(|o| std::mem::take(&mut *o.borrow_mut()))
}

#[test]
fn a_requester_with_128_reads_outstanding_gets_every_response_in_order() {
    // Soft-RoCE allows 128 READs outstanding and perftest posts that many.
    let mut c: ReorderCore<u32> = ReorderCore::new(ReorderConfig {
        window: 256,
        max_reads: 256,
        ..cfg()
    });
    let base = 0xFF_FF00u32;
    for k in 0..128 {
        read(&mut c, 1, (base + 2 * k) & 0xFF_FFFF, 2, 0);
    }
    released();
    // The first READ's two responses come last (a slow path); everything else is held.
    for k in 2..256u32 {
        let ends = k % 2 == 1;
        resp(&mut c, fill(ends), (base + k) & 0xFF_FFFF, k, 1);
    }
    assert!(released().is_empty(), "nothing passes the first READ");
    resp(&mut c, fill(false), base, 0, 2);
    resp(&mut c, fill(true), base + 1, 1, 2);
    assert_eq!(released(), (0..256).collect::<Vec<_>>());
    assert_eq!(c.totals().late, 0);
    assert_eq!(c.held(), 0);
}

#[test]
fn a_read_retried_from_its_first_missing_response_is_ordered_from_there() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    read(&mut c, 1, 100, 4, 0);
    resp(&mut c, fill(false), 100, 100, 0);
    resp(&mut c, fill(false), 101, 101, 0);
    released();
    // 102 was lost; rxe asks again from it, for what is left (2 PSNs).
    read(&mut c, 1, 102, 2, 10);
    assert_eq!(c.totals().read_retries_seen, 1);
    assert_eq!(resp(&mut c, fill(false), 102, 102, 11), Insert::Released);
    assert_eq!(resp(&mut c, fill(true), 103, 103, 11), Insert::Released);
    // The next READ is ordered as usual: the expected PSN did not move back to 102.
    read(&mut c, 1, 104, 1, 12);
    assert_eq!(resp(&mut c, fill(true), 104, 104, 13), Insert::Released);
    assert_eq!(released(), vec![102, 103, 104]);
    assert_eq!(c.held(), 0);
}

#[test]
fn an_ack_after_a_read_larger_than_the_window_waits_for_all_of_it() {
    // W = 64; a READ of 1 MiB at path MTU 1024 spans 1024 PSNs.
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    read(&mut c, 1, 1000, 1024, 0);
    // The WRITE after it (PSN 2024) is ACKed; the ACK overtakes the READ's responses.
    assert_eq!(resp(&mut c, ResponseKind::Ack, 2024, 9999, 0), Insert::Held);
    for k in 0..1024u32 {
        let r = resp(&mut c, fill(k == 1023), 1000 + k, k, 0);
        assert_eq!(r, Insert::Released, "response {k}");
    }
    let mut want: Vec<u32> = (0..1024).collect();
    want.push(9999);
    assert_eq!(released(), want, "the ACK comes after the last response");
    assert_eq!(c.totals().overflows, 0);
}

#[test]
fn spans_follow_the_qps_own_path_mtu() {
    // The engine sized the READ at the port's 4096 (16 PSNs for 64 KiB), but this QP runs at
    // 1024: its responses span 64 PSNs, and a reordered one beyond the first 16 is held.
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    c.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 1,
            qpn: RQ,
            psn: Psn::new(0),
            ..host_request(HostRequest::Read {
                dma_len: 65_536,
                span: 16,
            })
        },
        0,
        &mut Vec::new(),
    );
    let full = ResponseKind::Fill {
        ends: false,
        full_payload: 1024,
    };
    for k in 0..17u32 {
        assert_eq!(resp(&mut c, full, k, k, 0), Insert::Released);
    }
    // 17 is late (a slow path): 18, beyond the engine's 16, is still this READ's and waits.
    assert_eq!(resp(&mut c, full, 18, 18, 0), Insert::Held);
    assert_eq!(resp(&mut c, full, 17, 17, 0), Insert::Released);
    for k in 19..63 {
        assert_eq!(resp(&mut c, full, k, k, 0), Insert::Released);
    }
    // An ACK beyond the READ waits for its last response.
    assert_eq!(resp(&mut c, ResponseKind::Ack, 64, 64, 0), Insert::Held);
    assert_eq!(resp(&mut c, fill(true), 63, 63, 0), Insert::Released);
    let got = released();
    assert_eq!(got.last(), Some(&64));
    assert_eq!(c.held(), 0);
}

#[test]
fn two_qps_on_one_udp_port_keep_their_own_streams() {
    // Two local requesters (0x11, 0x12) read from two remote QPs (0x22, 0x23) of one host,
    // both with UDP source port 7: their PSN spaces are far apart, as random starts make them.
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    let mut out = Vec::new();
    let rd = |c: &mut ReorderCore<u32>, rq, psn| {
        c.handle_host(
            0,
            &RoceMeta {
                local: LOCAL,
                remote: REMOTE,
                sport: 7,
                qpn: rq,
                psn: Psn::new(psn),
                ..host_request(HostRequest::Read {
                    dma_len: 2048,
                    span: 2,
                })
            },
            0,
            &mut Vec::new(),
        )
    };
    rd(&mut c, 0x22, 1000);
    rd(&mut c, 0x23, 500_000);
    let mut ins = |c: &mut ReorderCore<u32>, lq, psn: u32, ends, id| {
        c.handle_packet(
            0,
            &RoceMeta {
                local: LOCAL,
                remote: REMOTE,
                sport: 7,
                qpn: lq,
                ..response_meta(fill(ends), Psn::new(psn), 100)
            },
            id,
            0,
            &mut out,
        )
    };
    assert_eq!(ins(&mut c, 0x12, 500_001, true, 21), Insert::Held);
    assert_eq!(ins(&mut c, 0x11, 1001, true, 11), Insert::Held);
    assert_eq!(ins(&mut c, 0x11, 1000, false, 10), Insert::Released);
    assert_eq!(ins(&mut c, 0x12, 500_000, false, 20), Insert::Released);
    assert_eq!(out, vec![10, 11, 20, 21]);
    assert_eq!(c.totals().pairs_hinted, 2);
    assert_eq!(c.totals().pairs_ambiguous, 0);
    // Request side: two local responders on port 7; a NAK to one remote QP moves only its
    // stream.
    out.clear();
    for (lq, base) in [(0x31u32, 7000u32), (0x32, 900_000)] {
        c.learn_pair(&QpRef {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: lq,
        });
        c.handle_packet(
            0,
            &req(
                StreamKey::Request {
                    local: LOCAL,
                    qpn: lq,
                },
                Psn::new(base),
                1,
                10,
            ),
            1,
            0,
            &mut out,
        );
        c.handle_packet(
            0,
            &req(
                StreamKey::Request {
                    local: LOCAL,
                    qpn: lq,
                },
                Psn::new(base + 2),
                1,
                10,
            ),
            2,
            0,
            &mut out,
        );
    }
    c.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x41,
            psn: Psn::new(900_001),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut out,
    );
    assert_eq!(
        c.expected(&StreamKey::Request {
            local: LOCAL,
            qpn: 0x31
        }),
        Some(Psn::new(7001))
    );
    assert_eq!(
        c.expected(&StreamKey::Request {
            local: LOCAL,
            qpn: 0x32
        }),
        Some(Psn::new(900_001))
    );
    assert_eq!(
        c.totals().resyncs,
        0,
        "the NAK named the PSN the stream already expected"
    );
    c.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x41,
            psn: Psn::new(900_000),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut out,
    );
    assert_eq!(c.totals().resyncs, 1);
    assert_eq!(
        c.expected(&StreamKey::Request {
            local: LOCAL,
            qpn: 0x31
        }),
        Some(Psn::new(7001))
    );
}

#[test]
fn rings_come_back_after_byte_cap_refusals_while_learning() {
    // A refused packet must not leave its stream holding an empty ring.
    let mut h = H::new(ReorderConfig {
        max_held_bytes: 50,
        learn_ns: 1_000,
        max_rings: 4,
        max_streams: 64,
        ..cfg()
    });
    for q in 0..16 {
        assert_eq!(
            h.ins(q, 10, q, 0),
            Insert::Released,
            "100 bytes never fit 50"
        );
    }
    assert_eq!(h.core.free_rings(), 4);
    let mut c = H::new(ReorderConfig {
        learn_ns: 0,
        max_rings: 4,
        max_streams: 64,
        max_held_bytes: 250,
        ..cfg()
    });
    for q in 0..16 {
        c.ins(q, 0, q, 0);
        c.ins(q, 2, q, 0);
        c.ins(q, 3, q, 0);
        c.ins(q, 4, q, 0); // over the byte cap: passes
        c.ins(q, 1, q, 0); // fills the gap: all go
        c.take();
    }
    assert_eq!(c.core.free_rings(), 4);
    assert_eq!(c.ins(99, 0, 0, 0), Insert::Released);
    assert_eq!(
        c.ins(99, 2, 0, 0),
        Insert::Held,
        "a ring is still to be had"
    );
}

/// A CM REQ from the remote host's QP 0x500 (communication ID `comm`) to the local host.
fn remote_req(comm: u32, start: u32) -> super::pairing::CmEvent {
    super::pairing::CmEvent {
        sender: REMOTE,
        receiver: LOCAL,
        sender_local: false,
        receiver_local: true,
        msg: crate::wire::cm::CmMessage::Req {
            local_comm_id: comm,
            qpn: 0x500,
            starting_psn: Psn::new(start),
        },
    }
}

/// The local host's REP to [`remote_req`] `comm`: its QP 0x33, starting at PSN 5.
fn local_rep(comm: u32) -> super::pairing::CmEvent {
    super::pairing::CmEvent {
        sender: LOCAL,
        receiver: REMOTE,
        sender_local: true,
        receiver_local: false,
        msg: crate::wire::cm::CmMessage::Rep {
            local_comm_id: comm + 1,
            remote_comm_id: comm,
            qpn: 0x33,
            starting_psn: Psn::new(5),
        },
    }
}

#[test]
fn a_cm_start_is_used_once_and_a_reused_qpn_starts_over() {
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000,
        idle_evict_ns: 10_000,
        ..cfg()
    });
    let mut out = Vec::new();
    let connect = |h: &mut H, comm: u32, start: u32, now: u64, out: &mut Vec<u32>| {
        h.core
            .handle_host(0, &cm_meta(&remote_req(comm, start)), now, out);
        h.core.handle_host(0, &cm_meta(&local_rep(comm)), now, out);
    };
    connect(&mut h, 1, 1000, 0, &mut out);
    assert_eq!(h.ins(0x33, 1000, 0, 0), Insert::Released);
    assert_eq!(h.ins(0x33, 1001, 1, 0), Insert::Released);
    // The same QPN, a new connection starting at 70000: no learning delay, no stale state.
    connect(&mut h, 3, 70_000, 100, &mut out);
    assert_eq!(h.ins(0x33, 70_001, 2, 100), Insert::Held);
    assert_eq!(h.ins(0x33, 70_000, 3, 100), Insert::Released);
    assert_eq!(h.take(), vec![0, 1, 3, 2]);
    // Evicted when idle; coming back, it learns instead of starting at a CM PSN of the past.
    for t in 1..40 {
        h.core.poll(100 + t * 1_000, &mut out);
    }
    assert_eq!(h.core.totals().evictions, 1);
    assert_eq!(h.ins(0x33, 90_001, 5, 50_000), Insert::Held, "learning");
    assert_eq!(h.ins(0x33, 90_000, 4, 50_000), Insert::Held, "learning");
    h.core.poll(51_000, &mut out);
    assert_eq!(out, vec![4, 5]);
}

#[test]
fn a_resent_req_and_its_resent_rep_after_data_began_do_not_restart_the_stream() {
    // The active side resends its REQ when the REP is slow (its MAD retry timer), and the copy
    // can pass the ToR after the REP did; the passive side resends the same REP when no RTU
    // comes back in time (Linux: ib_send_cm_rep's MAD retries). That REP can pass the ToR
    // after the requester, which started sending on the first REP, has data in flight: it is
    // the same connection and must not move `e` back.
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000,
        ..cfg()
    });
    let mut out = Vec::new();
    let (req, rep) = (remote_req, local_rep);
    h.core.handle_host(0, &cm_meta(&req(1, 1000)), 0, &mut out);
    h.core.handle_host(0, &cm_meta(&rep(1)), 0, &mut out);
    for (i, psn) in (1000..1004).enumerate() {
        assert_eq!(h.ins(0x33, psn, i as u32, 10), Insert::Released);
    }
    // The resent REQ and its REP, with data in flight.
    h.core.handle_host(0, &cm_meta(&req(1, 1000)), 20, &mut out);
    h.core.handle_host(0, &cm_meta(&rep(1)), 30, &mut out);
    assert_eq!(
        h.ins(0x33, 1004, 4, 40),
        Insert::Released,
        "the stream goes on"
    );
    assert_eq!(h.core.totals().restarts, 0);
    assert_eq!(h.core.totals().cm_repeated, 1);
    assert_eq!(h.take(), vec![0, 1, 2, 3, 4]);
    // A REQ with the same communication ID but another QP or starting PSN is a new
    // connection (a reused ID), and its REP starts the stream over.
    h.core
        .handle_host(0, &cm_meta(&req(1, 80_000)), 50, &mut out);
    h.core.handle_host(0, &cm_meta(&rep(1)), 60, &mut out);
    assert_eq!(h.core.totals().restarts, 1);
    assert_eq!(h.ins(0x33, 80_000, 5, 70), Insert::Released);
}

#[test]
fn a_cm_reply_during_learning_times_gaps_from_now() {
    use crate::wire::cm::CmMessage;
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000_000,
        hold_timeout_ns: 1_000,
        ..cfg()
    });
    let t = 10_000_000;
    h.ins(0x33, 1001, 1, t);
    let mut out = Vec::new();
    for (sender, receiver, sl, rl, msg) in [
        (
            REMOTE,
            LOCAL,
            false,
            true,
            CmMessage::Req {
                local_comm_id: 1,
                qpn: 0x500,
                starting_psn: Psn::new(1000),
            },
        ),
        (
            LOCAL,
            REMOTE,
            true,
            false,
            CmMessage::Rep {
                local_comm_id: 2,
                remote_comm_id: 1,
                qpn: 0x33,
                starting_psn: Psn::new(5),
            },
        ),
    ] {
        h.core.handle_host(
            0,
            &cm_meta(&super::pairing::CmEvent {
                sender,
                receiver,
                sender_local: sl,
                receiver_local: rl,
                msg,
            }),
            t + 10,
            &mut out,
        );
    }
    h.core.poll(t + 20, &mut out);
    assert!(
        out.is_empty(),
        "the gap at 1000 is 10 ns old, not since time 0"
    );
    assert_eq!(h.ins(0x33, 1000, 0, t + 30), Insert::Released);
    assert_eq!(h.take(), vec![0, 1]);
}

#[test]
fn a_qp_re_created_with_its_qpn_after_idle_is_learned_again() {
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000,
        ..cfg()
    });
    h.ins(1, 100, 0, 0);
    h.core.poll(2_000, &mut h.out);
    assert_eq!(h.ins(1, 101, 1, 2_000), Insert::Released);
    // Destroyed, re-created with a new starting PSN; its first two packets swap on the way.
    assert_eq!(h.ins(1, 5_001, 3, 50_000), Insert::Held);
    assert_eq!(h.ins(1, 5_000, 2, 50_010), Insert::Held);
    h.core.poll(51_000, &mut h.out);
    assert_eq!(h.take(), vec![0, 1, 2, 3]);
    assert_eq!(h.core.totals().restarts, 1);
    assert_eq!(h.core.totals().late, 0);
}

#[test]
fn forged_or_stale_naks_do_not_move_a_stream() {
    let mut h = H::new(cfg());
    h.core.learn_pair(&QpRef {
        local: LOCAL,
        remote: REMOTE,
        sport: 7,
        qpn: 1,
    });
    h.ins(1, 1000, 0, 0);
    h.ins(1, 1002, 2, 0);
    let mut out = Vec::new();
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x9,
            psn: Psn::new(1001 + 0x40_0000),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut out,
    );
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x9,
            psn: Psn::new(1001 + 100),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut out,
    );
    assert!(out.is_empty());
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(1001)));
    assert_eq!(h.core.totals().host_naks_ignored, 2);
    assert_eq!(h.core.totals().resyncs, 0);
    // A garbage PSN far ahead is held, then given up with the gap; the stream follows it, and
    // the host's NAK (its QP is paired now) brings it back.
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x9,
            psn: Psn::new(1001),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut out,
    );
    assert_eq!(h.ins(1, 0x70_0000, 9, 0), Insert::Held);
    h.core.poll(1_000_000, &mut out);
    assert_eq!(out, vec![2, 9]);
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x9,
            psn: Psn::new(1001),
            ..host(MetaKind::HostNak)
        },
        0,
        &mut out,
    );
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(1001)));
    assert_eq!(h.ins(1, 1001, 1, 0), Insert::Released);
}

#[test]
fn responses_of_reads_far_apart_in_psns_are_still_ordered() {
    // W = 64. READs of 2 PSNs each, with 100 PSNs of WRITEs between them: the responses are
    // few packets apart but hundreds of PSNs.
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    for k in 0..4 {
        read(&mut c, 1, 1000 + k * 102, 2, 0);
    }
    released();
    // Every response but the first READ's first comes early.
    for k in (0..4u32).rev() {
        for j in (0..2u32).rev() {
            if k == 0 && j == 0 {
                continue;
            }
            let psn = 1000 + k * 102 + j;
            assert_eq!(
                resp(&mut c, fill(j == 1), psn, psn, 0),
                Insert::Held,
                "{psn}"
            );
        }
    }
    assert_eq!(resp(&mut c, fill(false), 1000, 1000, 0), Insert::Released);
    let want: Vec<u32> = (0..4u32)
        .flat_map(|k| [1000 + k * 102, 1001 + k * 102])
        .collect();
    assert_eq!(released(), want);
    assert_eq!((c.totals().overflows, c.totals().late, c.held()), (0, 0, 0));
}

/// A READ whose response queues behind other traffic for longer than the idle time: the stream
/// waits for it (an ACK after it still waits behind it); a READ never answered is forgotten
/// after `READ_WAIT_FACTOR` idle times. The proptest of `tests/reorder_transport.rs` found a
/// ConnectX-5 requester's 1-byte READ answered 20 ms late behind 17 MiB of other QPs' READ
/// responses, its stream evicted meanwhile, and the WRITE's ACK after it passing it (an
/// implied NAK and a retry).
#[test]
fn a_stream_waiting_for_a_read_response_is_not_idle() {
    use super::config::READ_WAIT_FACTOR;
    let idle = 10_000;
    let mut c: ReorderCore<u32> = ReorderCore::new(ReorderConfig {
        idle_evict_ns: idle,
        ..cfg()
    });
    let mut out = Vec::new();
    read(&mut c, 1, 100, 1, 0);
    // Five idle times: more than enough to forget an idle stream.
    let waited = 5;
    for t in 1..=waited {
        c.poll(t * idle, &mut out);
    }
    assert_eq!(c.totals().evictions, 0, "waiting, not idle");
    let now = waited * idle + 1;
    assert_eq!(
        resp(&mut c, ResponseKind::Ack, 102, 1102, now),
        Insert::Held
    );
    assert_eq!(resp(&mut c, fill(true), 100, 100, now), Insert::Released);
    assert_eq!(OUT.with(|o| o.take()), vec![100, 1102]);
    // Answered: idle again, and forgotten after the idle time.
    for t in 1..=4 {
        c.poll(now + t * idle, &mut out);
    }
    assert_eq!(c.totals().evictions, 1);
    // A READ never answered (its QP destroyed): forgotten after READ_WAIT_FACTOR idle times.
    let start = now + 10 * idle;
    read(&mut c, 1, 500, 1, start);
    for t in 1..=(READ_WAIT_FACTOR + 2) {
        c.poll(start + t * idle, &mut out);
    }
    assert_eq!(c.totals().evictions, 2);
    assert!(out.is_empty());
}

/// A QP re-created without CM right after its last packet (no idle time) starts a new PSN
/// sequence half the PSN space away: its first packets, sprayed, arrive some "ahead" and some
/// "behind" the old expected PSN (the modular comparison flips at half the space). They are
/// learned as a new stream's and released in order. The transport proptest found the
/// responder NAKing when the "behind" ones went out at once as late.
#[test]
fn a_new_psn_sequence_half_the_space_away_is_learned_without_an_idle_time() {
    let mut h = H::new(ReorderConfig {
        learn_ns: 1_000,
        ..cfg()
    });
    h.ins(0x33, 998, 998, 0);
    h.ins(0x33, 999, 999, 0);
    h.core.poll(1_500, &mut h.out);
    h.ins(0x33, 1000, 1000, 1_600);
    assert_eq!(h.take(), vec![998, 999, 1000]);
    // The old stream expects 1001; the new one starts at 1001 + 2^23 - 2.
    let b = 1001 + (1 << 23) - 2;
    h.ins(0x33, b + 1, 1, 1_700); // 2^23 - 1 ahead
    h.ins(0x33, b + 2, 2, 1_700); // 2^23 ahead: "behind"
    h.ins(0x33, b + 3, 3, 1_750);
    h.ins(0x33, b, 0, 1_800);
    assert!(h.take().is_empty(), "learning the new sequence");
    h.core.poll(3_000, &mut h.out);
    assert_eq!(h.take(), vec![0, 1, 2, 3]);
    assert_eq!(h.ins(0x33, b + 4, 4, 3_100), Insert::Released);
    assert_eq!(h.core.totals().restarts, 1);
    assert_eq!(h.core.totals().late, 0);
}

/// Without CM, an ACK of another QP of the host pair whose PSN lies near this QP's READ fits
/// its stream loosely: it is ordered there but pairs nothing, so this QP's own READ responses
/// still find their stream. The transport proptest found the ACK binding the other QP to the
/// stream for good, and this QP's responses passing unordered (a requester in error).
#[test]
fn an_ack_does_not_pair_a_qp_by_a_loose_fit() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    let mut out = Vec::new();
    read(&mut c, 1, 100, 3, 0);
    let other = LQ + 1;
    let ack = c.handle_packet(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: other,
            ..response_meta(ResponseKind::Ack, Psn::new(60_100), 60)
        },
        9,
        0,
        &mut out,
    );
    assert_eq!(ack, Insert::Held, "ordered by the stream it fits");
    assert_eq!(resp(&mut c, fill(false), 101, 101, 1), Insert::Held);
    assert_eq!(resp(&mut c, fill(false), 100, 100, 1), Insert::Released);
    assert_eq!(resp(&mut c, fill(true), 102, 102, 1), Insert::Released);
    assert_eq!(OUT.with(|o| o.take()), vec![100, 101, 102, 9]);
}

/// An ACK of a QP's earlier incarnation (it was re-created without CM), overtaken on a slower
/// path, arrives while the new QP's READ is outstanding, its PSN far from the READ: discarded
/// (counted), since rxe takes a PSN past an outstanding READ as that READ's loss. An ACK within
/// reach of the READs (a WRITE after them) still waits for them. The transport proptest found
/// the stale ACK, held, then released by the hold timeout, costing the new QP a READ retry.
#[test]
fn an_ack_of_an_earlier_psn_sequence_is_discarded() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    read(&mut c, 1, 100, 3, 0);
    // The first response pairs the QPs.
    assert_eq!(resp(&mut c, fill(false), 100, 100, 1), Insert::Released);
    let stale = resp(&mut c, ResponseKind::Ack, 100 + (1 << 23) - 5, 7, 1);
    assert_eq!(stale, Insert::Stale);
    assert_eq!(c.totals().stale_acks, 1);
    let after = resp(&mut c, ResponseKind::Ack, 103 + 60_000, 8, 1);
    assert_eq!(
        after,
        Insert::Held,
        "a WRITE's ACK after the READ waits for it"
    );
    assert_eq!(resp(&mut c, fill(false), 101, 101, 1), Insert::Released);
    assert_eq!(resp(&mut c, fill(true), 102, 102, 1), Insert::Released);
    assert_eq!(OUT.with(|o| o.take()), vec![100, 101, 102, 8]);
}

// ------------------------------------------------------------------ path-order loss detection

/// A request stream sprayed round robin over paths with `delays` (ns), one packet every
/// `gap_ns` from t = 0, PSNs `0..n`, minus `lost`: the arrivals in time order as (time, path,
/// PSN). Each path keeps order.
fn sprayed(delays: &[u64], gap_ns: u64, n: u32, lost: &[u32]) -> Vec<(u64, u8, u32)> {
    let mut v: Vec<(u64, u8, u32)> = (0..n)
        .filter(|p| !lost.contains(p))
        .map(|p| {
            let path = (p as usize % delays.len()) as u8;
            (u64::from(p) * gap_ns + delays[usize::from(path)], path, p)
        })
        .collect();
    v.sort();
    v
}

fn path_cfg(recovery: LossRecovery) -> (ReorderConfig, PortReorder) {
    (
        ReorderConfig {
            window: 256,
            hold_timeout_ns: 5_000_000,
            ..cfg()
        },
        PortReorder {
            recovery,
            ..PortReorder::default()
        },
    )
}

impl H {
    fn with_paths(recovery: LossRecovery) -> H {
        let (c, p) = path_cfg(recovery);
        let mut h = H::new(c);
        h.core.set_port(0, p);
        let mut none = Vec::new();
        h.core.set_paths(4, 0, 0, &mut none);
        h
    }
    /// Inserts PSN `psn` arriving on `path` (item = PSN), polling timers first.
    fn arrive(&mut self, path: u8, psn: u32, now: u64) {
        self.core.poll(now, &mut self.out);
        self.core.handle_packet(
            0,
            &RoceMeta {
                kind: MetaKind::Request { read_len: None },
                path,
                stamp: PathStamp::NONE,
                ..peer_req(key(1), Psn::new(psn), 1, 100, None)
            },
            psn,
            now,
            &mut self.out,
        );
    }
}

/// A lane-0 path stamp `seq` in priority `class`.
fn stamp_in(class: u8, seq: u16) -> PathStamp {
    PathStamp {
        seq,
        class,
        lane: 0,
    }
}

impl H {
    /// What the stage does with a packet of QP `qpn` of the source `REMOTE` that arrived on
    /// `path` with path stamp `stamp` (item = `qpn * 1000 + psn`), timers polled first.
    fn arrive_stamped(&mut self, qpn: u32, path: u8, psn: u32, seq: u16, now: u64) {
        self.arrive_stamped_in(stamp_in(3, seq), qpn, path, psn, now);
    }

    /// `arrive_stamped` with `stamp` (its priority class and sequence).
    fn arrive_stamped_in(&mut self, stamp: PathStamp, qpn: u32, path: u8, psn: u32, now: u64) {
        self.arrive_from((REMOTE, stamp), qpn, path, psn, now);
    }

    /// `arrive_stamped` from sender `remote` with `stamp`.
    fn arrive_from(
        &mut self,
        (remote, stamp): (u128, PathStamp),
        qpn: u32,
        path: u8,
        psn: u32,
        now: u64,
    ) {
        self.core.poll(now, &mut self.out);
        self.core.handle_packet(
            0,
            &RoceMeta {
                kind: MetaKind::Request { read_len: None },
                path,
                stamp,
                ..peer_req(
                    key(qpn),
                    Psn::new(psn),
                    1,
                    100,
                    Some((remote, 0xC000 + qpn as u16)),
                )
            },
            qpn * 1000 + psn,
            now,
            &mut self.out,
        );
    }
}

/// Two QPs of one source host over four paths, one packet per microsecond, stamped in the
/// order the source ToR sent them: QP 1 sends PSNs 0-7 on paths `psn % 4` and stops (its
/// window is full), QP 2 goes on, its PSN `i` on path `(i + 1) % 4`, interleaved. `arrives`
/// says when (and whether) QP 1's packet `psn` arrives, given when it was sent.
fn two_qps(h: &mut H, arrives: impl Fn(u32, u64) -> Option<u64>) -> Vec<(u64, u32, u8, u32, u16)> {
    let mut sent = Vec::new();
    let mut stamp = 0u16;
    let mut t = 0u64;
    for i in 0..24u32 {
        if i < 8 {
            stamp += 1;
            if let Some(at) = arrives(i, t) {
                sent.push((at, 1, (i % 4) as u8, i, stamp));
            }
            t += 1_000;
        }
        stamp += 1;
        sent.push((t, 2, ((i + 1) % 4) as u8, i, stamp));
        t += 1_000;
    }
    sent.sort_by_key(|a| a.0);
    for &(at, qp, path, psn, st) in &sent {
        h.arrive_stamped(qp, path, psn, st, at);
    }
    sent
}

#[test]
fn another_qp_of_the_source_proves_a_loss_its_own_qp_cannot() {
    // QP 1's PSN 5 (path 1) is lost. QP 1 sends nothing more on paths 0 and 1, so its own PSNs
    // never prove the gap; QP 2's packets, sent after QP 1's 6, do once they come over paths 0
    // and 1 (QP 2's 7 on path 0 at 15 us, its 8 on path 1 at 16 us).
    let mut h = H::with_paths(LossRecovery::NakFirst);
    two_qps(&mut h, |psn, t| (psn != 5).then_some(t));
    assert_eq!(h.core.totals().path_losses, 1);
    assert_eq!(h.core.totals().stamp_losses, 1);
    assert_eq!(h.core.totals().timeouts, 0);
    let mut d = Vec::new();
    h.core.take_detection_times(&mut d);
    // The gap opened when QP 1's 6 arrived (12 us); declared at 16 us.
    assert_eq!(d, vec![4_000]);
    // nak_first: QP 1's 6 went alone (the RNIC NAKs 5), 7 waits for the retransmission.
    let qp1: Vec<u32> = h.take().into_iter().filter(|i| *i < 2000).collect();
    assert_eq!(qp1, vec![1000, 1001, 1002, 1003, 1004, 1006]);
}

#[test]
fn stamps_do_not_declare_a_late_packet_on_a_path_that_has_not_passed_it() {
    // QP 1's 5 is late on path 1 (50 us): QP 2's packets on path 1 queue behind it (a FIFO
    // path), so path 1 shows nothing newer until 5 arrives; the other paths' newer stamps
    // prove nothing about path 1.
    let mut h = H::with_paths(LossRecovery::NakFirst);
    let late = |psn: u32, t: u64| Some(if psn == 5 { t + 50_000 } else { t });
    // Path 1's later packets of QP 2 come after QP 1's 5: hold them back with it.
    let mut sent = Vec::new();
    let mut stamp = 0u16;
    let mut t = 0u64;
    for i in 0..24u32 {
        if i < 8 {
            stamp += 1;
            sent.push((late(i, t).unwrap(), 1, (i % 4) as u8, i, stamp));
            t += 1_000;
        }
        stamp += 1;
        let path = ((i + 1) % 4) as u8;
        let at = if path == 1 && t > 10_000 {
            t + 50_000
        } else {
            t
        };
        sent.push((at, 2, path, i, stamp));
        t += 1_000;
    }
    sent.sort_by_key(|a| (a.0, a.4));
    for &(at, qp, path, psn, st) in &sent {
        h.arrive_stamped(qp, path, psn, st, at);
    }
    assert_eq!(h.core.totals().path_losses, 0);
    assert_eq!(h.core.totals().timeouts, 0);
    let qp1: Vec<u32> = h.take().into_iter().filter(|i| *i < 2000).collect();
    assert_eq!(
        qp1,
        (1000..1008).collect::<Vec<u32>>(),
        "in order, nothing declared"
    );
}

/// QP 1 of the source `REMOTE` sends PSNs 0-7 on paths `psn % 4`, stamped 1-6 and 8-9, one a
/// microsecond; its 5 (stamp 6, path 1) is lost. Paths 0 and 1 have not delivered above it.
fn qp1_with_a_gap_at_5() -> H {
    let mut h = H::with_paths(LossRecovery::NakFirst);
    for (i, (psn, st)) in [(0u32, 1u16), (1, 2), (2, 3), (3, 4), (4, 5), (6, 8), (7, 9)]
        .into_iter()
        .enumerate()
    {
        h.arrive_stamped(1, (psn % 4) as u8, psn, st, i as u64 * 1_000);
    }
    h
}

#[test]
fn a_stamp_sent_before_the_packets_above_the_gap_proves_nothing() {
    // QP 1's 0-7 on paths psn % 4 with stamps 1-6 and 8-9, its 5 (stamp 6, path 1) lost; QP 2
    // sent one packet between QP 1's 5 and 6 (stamp 7), on path 1, which comes late. It was
    // sent after the lost packet, but nothing says the lost packet went on path 1: only a
    // stamp from after QP 1's 6 (the first packet above the gap) proves path 1.
    let mut h = qp1_with_a_gap_at_5();
    h.arrive_stamped(2, 0, 0, 10, 8_000);
    h.arrive_stamped(2, 1, 1, 7, 9_000);
    assert_eq!(h.core.totals().path_losses, 0, "path 1 showed only stamp 7");
    h.arrive_stamped(2, 1, 2, 11, 10_000);
    assert_eq!(
        (h.core.totals().path_losses, h.core.totals().stamp_losses),
        (1, 1)
    );
    assert_eq!(h.core.totals().stamp_disorder, 0);
}

/// 10.2.1.2 and 10.2.2.2, hosts of one rack (IPv4-mapped), and 10.3.1.2 of another.
const RACK2_HOST1: u128 = 0xFFFF_0A02_0102;
const RACK2_HOST2: u128 = 0xFFFF_0A02_0202;
const RACK3_HOST1: u128 = 0xFFFF_0A03_0102;

/// Host 10.2.1.2's QP 1 sends PSNs 0-7 on paths `psn % 4` with stamps 1-6 and 8-9 (lane 0)
/// and stops (its window); its 5 (stamp 6, path 1) is lost. Then one packet of `other`'s QP
/// 2 with stamp `lane`/10 on path 0 and one with `lane`/11 on path 1: does it prove the gap
/// when the reorder stage takes sources by `prefix`?
fn proven_by_another_host(prefix: (u8, u8), other: u128, lane: u8) -> (u64, u64) {
    let (c, p) = path_cfg(LossRecovery::NakFirst);
    let mut h = H::new(ReorderConfig {
        stamp_source_prefix: prefix,
        ..c
    });
    h.core.set_port(0, p);
    h.core.set_paths(4, 0, 0, &mut Vec::new());
    let st = |seq, lane| PathStamp {
        seq,
        class: 3,
        lane,
    };
    for (i, (psn, seq)) in [(0u32, 1u16), (1, 2), (2, 3), (3, 4), (4, 5), (6, 8), (7, 9)]
        .into_iter()
        .enumerate()
    {
        h.arrive_from(
            (RACK2_HOST1, st(seq, 0)),
            1,
            (psn % 4) as u8,
            psn,
            i as u64 * 1_000,
        );
    }
    h.arrive_from((other, st(10, lane)), 2, 0, 0, 8_000);
    h.arrive_from((other, st(11, lane)), 2, 1, 1, 9_000);
    (h.core.totals().stamp_losses, h.core.totals().stamp_disorder)
}

#[test]
fn a_host_of_the_same_rack_proves_the_loss_of_a_host_that_stopped_sending() {
    // The source ToR stamps both hosts with one counter: with the rack's prefix, the other
    // host's later packets on paths 0 and 1 prove the stopped QP's gap.
    assert_eq!(proven_by_another_host((16, 32), RACK2_HOST2, 0), (1, 0));
    // Each host on its own: nothing proves it until the timeout.
    assert_eq!(proven_by_another_host((32, 128), RACK2_HOST2, 0), (0, 0));
    // Another lane (another worker's counter) or another rack: not the same sequence.
    assert_eq!(proven_by_another_host((16, 32), RACK2_HOST2, 1), (0, 0));
    assert_eq!(proven_by_another_host((16, 32), RACK3_HOST1, 0), (0, 0));
    // Sources are prefixes of the address: /24 keeps 10.2.1.x and 10.2.2.x apart.
    assert_eq!(proven_by_another_host((24, 64), RACK2_HOST2, 0), (0, 0));
}

#[test]
fn stamps_of_another_priority_prove_nothing() {
    // As in `a_stamp_sent_before_the_packets_above_the_gap_proves_nothing`, but the later
    // packets on paths 0 and 1 are of another priority (a path is FIFO within a priority
    // only: a paused one waits while the others pass).
    let mut h = qp1_with_a_gap_at_5();
    h.arrive_stamped_in(stamp_in(6, 10), 2, 0, 0, 8_000);
    h.arrive_stamped_in(stamp_in(6, 11), 2, 1, 1, 9_000);
    assert_eq!(h.core.totals().path_losses, 0);
    // The same in the stream's own priority.
    h.arrive_stamped(3, 0, 0, 12, 10_000);
    h.arrive_stamped(3, 1, 1, 13, 11_000);
    assert_eq!(
        (h.core.totals().path_losses, h.core.totals().stamp_losses),
        (1, 1)
    );
}

#[test]
fn stamps_going_backwards_on_a_path_are_counted_and_prove_nothing() {
    // Two stamp counters behind one address (or a path that reorders): the source's stamps
    // are set aside, and the gap waits for the stream's own PSNs.
    let mut h = qp1_with_a_gap_at_5();
    h.arrive_stamped(2, 0, 0, 3, 8_000);
    assert_eq!(h.core.totals().stamp_disorder, 1);
    h.arrive_stamped(2, 0, 1, 20, 9_000);
    h.arrive_stamped(2, 1, 2, 21, 10_000);
    assert_eq!(
        h.core.totals().path_losses,
        0,
        "the source's stamps are set aside"
    );
    h.arrive_stamped(1, 0, 8, 22, 11_000);
    h.arrive_stamped(1, 1, 9, 23, 12_000);
    assert_eq!(
        (h.core.totals().path_losses, h.core.totals().stamp_losses),
        (1, 0)
    );
}

/// A Go-Back-N responder's view of what the switch released: the NAKs it sends (one per
/// sequence error until the expected PSN arrives, as rxe's `sent_psn_nak` does) and what it
/// accepts.
fn gbn_naks(released: &[u32]) -> (u32, u32) {
    let (mut e, mut naks, mut nak_sent) = (0u32, 0u32, false);
    for &p in released {
        if p == e {
            e += 1;
            nak_sent = false;
        } else if p > e && !nak_sent {
            naks += 1;
            nak_sent = true;
        }
    }
    (naks, e)
}

#[test]
fn a_lost_packet_is_declared_within_one_path_skew_on_four_paths() {
    // 0/20/40/60 us paths, one packet per us: PSN 10 (path 2) is lost.
    let delays = [0, 20_000, 40_000, 60_000];
    let mut h = H::with_paths(LossRecovery::NakFirst);
    let mut last = 0;
    for (t, path, psn) in sprayed(&delays, 1_000, 200, &[10]) {
        h.arrive(path, psn, t);
        last = t;
    }
    assert_eq!(h.core.totals().path_losses, 1);
    assert_eq!(h.core.totals().timeouts, 0);
    let mut d = Vec::new();
    h.core.take_detection_times(&mut d);
    assert_eq!(d.len(), 1);
    // The gap opened when PSN 11 arrived (t = 11 us + 60 us on path 3); every path has shown
    // a PSN above 10 once path 2 delivers PSN 14 (t = 14 us + 40 us)... path 3's 11 came
    // last: declared at once then. Whatever the order, within the largest skew.
    assert!(d[0] <= 60_000, "detected after {} ns", d[0]);
    // nak_first: one packet above the gap went out alone, everything else waits.
    let out = h.take();
    let (naks, accepted) = gbn_naks(&out);
    assert_eq!((naks, accepted), (1, 10), "{out:?}");
    assert_eq!(out.iter().filter(|p| **p > 10).count(), 1);
    // The retransmission from 10 (Go-Back-N resends everything from the gap): 10 comes, and
    // what was held goes with it in order; the resent copies of what was held are duplicates.
    let t = last + 10_000;
    for (i, psn) in (10..200).enumerate() {
        h.arrive((psn % 4) as u8, psn, t + i as u64 * 1_000);
    }
    let out = h.take();
    let mut all = vec![];
    all.extend(0..10);
    all.extend(out.iter().copied());
    let (naks, accepted) = gbn_naks(&all);
    assert_eq!(
        naks, 0,
        "after the retransmission nothing is out of sequence: {out:?}"
    );
    assert_eq!(accepted, 200);
    assert_eq!(h.core.held(), 0);
    assert_eq!(h.core.totals().path_losses, 1, "no second decision");
}

#[test]
fn a_late_packet_on_a_slow_path_is_never_declared_lost_before_that_path_passes_it() {
    // Path 3 is 2 ms slower than the others: every fourth packet is late by far more than the
    // others' spacing, and none is lost.
    let delays = [0, 1_000, 2_000, 2_000_000];
    let mut h = H::with_paths(LossRecovery::NakFirst);
    for (t, path, psn) in sprayed(&delays, 1_000, 400, &[]) {
        h.arrive(path, psn, t);
    }
    h.core.poll(10_000_000, &mut h.out);
    assert_eq!(h.core.totals().path_losses, 0);
    assert_eq!(h.core.totals().timeouts, 0);
    assert_eq!(h.take(), (0..400).collect::<Vec<_>>());
}

#[test]
fn a_path_that_goes_down_mid_gap_does_not_stall_the_decision() {
    // PSN 10 is lost on path 2, which then goes down: the sprayer uses paths 0, 1, 3 only.
    let mut h = H::with_paths(LossRecovery::ReleaseRun);
    let mut t = 0;
    let mut next_path = 0u8;
    for psn in 0..40u32 {
        t += 1_000;
        let path = if psn <= 10 {
            (psn % 4) as u8
        } else {
            next_path = match next_path {
                0 => 1,
                1 => 3,
                _ => 0,
            };
            next_path
        };
        if psn != 10 {
            h.arrive(path, psn, t);
        }
    }
    // Path 2's last PSN is 6: it blocks the decision while it counts as up.
    assert_eq!(h.core.totals().path_losses, 0);
    assert_eq!(h.core.held(), 29);
    h.core.set_paths(4, 1 << 2, t + 1, &mut h.out);
    assert_eq!(h.core.totals().path_losses, 1);
    assert_eq!(h.core.totals().timeouts, 0);
    // release_run: everything held went, in order, at once.
    let out = h.take();
    let expect: Vec<u32> = (0..40).filter(|p| *p != 10).collect();
    assert_eq!(out, expect);
    assert_eq!(h.core.held(), 0);
}

#[test]
fn a_false_decision_costs_at_most_the_one_nak_a_timeout_would() {
    // Path 1 is not FIFO after all: PSN 5 on it is overtaken by PSN 9 (same path) and comes
    // 30 us late. The switch takes 9 on path 1 as proof and declares 5 lost; 5 then comes.
    let mut h = H::with_paths(LossRecovery::NakFirst);
    let mut t = 0;
    for psn in 0..40u32 {
        t += 1_000;
        if psn == 5 {
            continue;
        }
        h.arrive((psn % 4) as u8, psn, t);
        if psn == 30 {
            h.arrive(1, 5, t);
        }
    }
    assert_eq!(h.core.totals().path_losses, 1, "the false decision");
    // The one packet released ahead of 5 made the RNIC NAK 5, as the timeout would have; the
    // host resends from 5 (Go-Back-N).
    for psn in 5..40u32 {
        t += 1_000;
        h.arrive((psn % 4) as u8, psn, t);
    }
    let out = h.take();
    let (naks, accepted) = gbn_naks(&out);
    assert_eq!(naks, 1, "one NAK, no more: {out:?}");
    assert_eq!(accepted, 40, "{out:?}");
    assert_eq!(h.core.held(), 0);
    assert_eq!(h.core.totals().path_losses, 1, "no second decision");
}

/// PSN 10 lost on path 2; path order declares it, one packet goes ahead and the Go-Back-N host
/// NAKs 10. Returns the harness and the time of the last arrival.
fn a_loss_the_host_naked(recovery: LossRecovery) -> (H, u64) {
    let mut h = H::with_paths(recovery);
    h.core.learn_pair(&QpRef {
        local: LOCAL,
        remote: REMOTE,
        sport: 49152,
        qpn: 1,
    });
    let mut t_end = 0;
    for (t, path, psn) in sprayed(&[0, 20_000, 40_000, 60_000], 1_000, 40, &[10]) {
        h.arrive(path, psn, t);
        t_end = t;
    }
    assert_eq!(h.core.totals().path_losses, 1);
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 49152,
            qpn: 0,
            psn: Psn::new(10),
            ..host(MetaKind::HostNak)
        },
        t_end + 10,
        &mut h.out,
    );
    (h, t_end)
}

#[test]
fn a_gap_the_go_back_n_host_naked_waits_for_its_retransmission_past_the_hold_timeout() {
    // The sender's retransmission of 10 is queued behind what its NIC sent before (in the
    // demo's 32-QP workload: 9 ms): the hold timeout (5 ms) must not flush what is held, or
    // the host, which takes nothing out of sequence, drops it all and it must come again.
    let (mut h, t_end) = a_loss_the_host_naked(LossRecovery::NakFirst);
    let before = h.take();
    h.core.poll(t_end + 9_000_000, &mut h.out);
    assert_eq!(h.core.totals().timeouts, 0, "the host NAKed the gap");
    assert!(h.take().is_empty());
    // The retransmission from 10 on (Go-Back-N): the held originals follow it in order.
    let mut t = t_end + 9_000_000;
    for psn in 10..40u32 {
        t += 1_000;
        h.arrive((psn % 4) as u8, psn, t);
    }
    let all: Vec<u32> = before.into_iter().chain(h.take()).collect();
    assert_eq!(
        gbn_naks(&all),
        (1, 40),
        "one NAK (the declared loss), everything taken"
    );
    assert_eq!(h.core.held(), 0);
}

#[test]
fn a_naked_gap_is_still_given_up_at_last_and_an_un_naked_one_at_its_hold_timeout() {
    // Nothing comes for 10: after NAKED_WAIT_FACTOR hold timeouts the gap is given up.
    let (mut h, t_end) = a_loss_the_host_naked(LossRecovery::NakFirst);
    h.core.poll(
        t_end + 5_000_000 * NAKED_WAIT_FACTOR - 1_000_000,
        &mut h.out,
    );
    assert_eq!(h.core.totals().timeouts, 0);
    h.core.poll(
        t_end + 5_000_000 * NAKED_WAIT_FACTOR + 1_000_000,
        &mut h.out,
    );
    assert_eq!(h.core.totals().timeouts, 1);
    assert_eq!(h.core.held(), 0);
    // A selective-repeat host's NAK changes nothing: its stream moved past the gap at once
    // (release_run), and the next gap, if any, keeps the plain hold timeout.
    let (mut h, t_end) = a_loss_the_host_naked(LossRecovery::ReleaseRun);
    assert_eq!(h.core.held(), 0, "release_run let everything go");
    h.arrive(1, 45, t_end + 20);
    h.core.poll(t_end + 5_000_000 + 1_000, &mut h.out);
    assert_eq!(
        h.core.totals().timeouts,
        1,
        "an un-NAKed gap: the hold timeout"
    );
}

#[test]
fn a_go_back_n_hosts_pass_after_its_retransmission_timer_is_ordered_like_the_first() {
    // The host NAKed 10 (a declared loss, or a timeout in `timeout` mode); the resend of 10 is
    // lost again, so the host (which NAKs once per gap) says nothing more, the switch gives
    // the gap up at last, and the sender's retransmission timer sends everything from 10 again.
    // That pass must be ordered too: 11 overtakes 10 on a faster path, and passed on as late
    // it would reach the host first, be dropped, and cost a second NAK round.
    for paths in [true, false] {
        // The path a packet comes over, or none whose order counts (`timeout` mode).
        let on = |path: u8| if paths { path } else { crate::meta::NO_PATH };
        let mut h = if paths {
            a_loss_the_host_naked(LossRecovery::NakFirst).0
        } else {
            let mut h = H::with_paths(LossRecovery::NakFirst);
            h.core.learn_pair(&QpRef {
                local: LOCAL,
                remote: REMOTE,
                sport: 49152,
                qpn: 1,
            });
            for psn in (0..40u32).filter(|p| *p != 10) {
                h.arrive(on(0), psn, u64::from(psn) * 1_000);
            }
            // The hold timeout releases everything; the host NAKs 10.
            h.core.poll(40_000 + 5_000_000, &mut h.out);
            assert_eq!(h.core.totals().timeouts, 1);
            h.core.handle_host(
                0,
                &RoceMeta {
                    local: LOCAL,
                    remote: REMOTE,
                    sport: 49152,
                    qpn: 0,
                    psn: Psn::new(10),
                    ..host(MetaKind::HostNak)
                },
                5_100_000,
                &mut h.out,
            );
            h
        };
        let mut t = 6_000_000;
        // The resend from 10, with 10 lost again.
        for psn in 11..40u32 {
            t += 1_000;
            h.arrive(on((psn % 4) as u8), psn, t);
        }
        let give_up = if paths { NAKED_WAIT_FACTOR } else { 1 } * 5_000_000;
        t += give_up + 1_000_000;
        h.core.poll(t, &mut h.out);
        assert_eq!(h.core.totals().naked_gaps_kept, 1, "paths {paths}");
        assert_eq!(h.core.held(), 0);
        assert_eq!(h.core.expected(&key(1)), Some(Psn::new(10)));
        // The timer's pass, 11 ahead of 10.
        t += 60_000_000;
        h.arrive(on(0), 11, t);
        h.arrive(on(3), 10, t + 60_000);
        for psn in 12..40u32 {
            h.arrive(
                on((psn % 4) as u8),
                psn,
                t + 60_000 + u64::from(psn) * 1_000,
            );
        }
        let all = h.take();
        // The host's view: everything it was given, in that order.
        assert_eq!(
            gbn_naks(&all),
            (1, 40),
            "paths {paths}: one NAK, everything taken: {all:?}"
        );
        assert_eq!(h.core.held(), 0);
    }
}

#[test]
fn a_hold_timeout_shorter_than_the_paths_skew_does_not_give_up_on_late_packets() {
    // One packet per ms; path 3's queue grows, so its packets come later and later, up to 2
    // ms behind (a gap waits up to 1 ms for them), and nothing is lost. The hold timeout is
    // 500 us. The gaps its packets fill teach the switch the skew as it grows, and the timeout
    // in force follows it (twice the skew).
    let run = |path: u8| {
        let mut h = H::with_paths(LossRecovery::NakFirst);
        h.core.set_hold_timeout(500_000);
        let n = 4_000u32;
        let mut v: Vec<(u64, u8, u32)> = (0..n)
            .map(|p| {
                let lag = if p % 4 == 3 { u64::from(p) * 500 } else { 0 };
                (u64::from(p) * 1_000_000 + lag, (p % 4) as u8, p)
            })
            .collect();
        v.sort();
        for (t, p, psn) in v {
            h.arrive(if path == 0 { p } else { crate::meta::NO_PATH }, psn, t);
        }
        h
    };
    let h = run(0);
    assert_eq!(h.core.totals().timeouts, 0);
    assert!(h.core.totals().peak_path_skew_ns >= 900_000);
    assert_eq!(h.out, (0..4_000).collect::<Vec<_>>());
    // Without path information (no skew learned) the 500 us timeout gives up on them.
    let h = run(1);
    assert!(h.core.totals().timeouts > 0);
}

#[test]
fn without_path_information_only_the_timeout_declares_loss() {
    let mut h = H::with_paths(LossRecovery::NakFirst);
    for (t, _, psn) in sprayed(&[0, 20_000, 40_000, 60_000], 1_000, 100, &[10]) {
        h.arrive(crate::meta::NO_PATH, psn, t);
    }
    assert_eq!(h.core.totals().path_losses, 0);
    h.core.poll(6_000_000, &mut h.out);
    assert_eq!(h.core.totals().timeouts, 1);
}

#[test]
fn with_release_run_a_selective_host_keeps_path_order_after_a_loss() {
    // Selective repeat: the host resends only the lost packet; path order must still find the
    // next loss (a pass that only Go-Back-N's resent PSNs could join would wait for timeouts).
    let mut h = H::with_paths(LossRecovery::ReleaseRun);
    let delays = [0, 20_000, 40_000, 60_000];
    let mut t_end = 0;
    for (t, path, psn) in sprayed(&delays, 1_000, 200, &[10]) {
        h.arrive(path, psn, t);
        t_end = t;
    }
    assert_eq!(h.core.totals().path_losses, 1);
    // The resent 10 (late: everything after it went out), then more, with 150 lost.
    h.arrive(0, 10, t_end + 1_000);
    for (t, path, psn) in sprayed(&delays, 1_000, 200, &[150]) {
        h.arrive(path, 200 + psn, t_end + 2_000 + t);
    }
    assert_eq!(
        h.core.totals().path_losses,
        2,
        "the second loss by path order too"
    );
    assert_eq!(h.core.totals().timeouts, 0);
}

/// PSNs 0..60 sprayed over 0/20/40/60 us paths towards a `release_run` downlink, 10 and 30
/// lost: both declared. Returns the harness and the last arrival's time.
fn two_losses_to_a_selective_rnic() -> (H, u64) {
    let mut h = H::with_paths(LossRecovery::ReleaseRun);
    let delays = [0, 20_000, 40_000, 60_000];
    let mut t_end = 0;
    for (t, path, psn) in sprayed(&delays, 1_000, 60, &[10, 30]) {
        h.arrive(path, psn, t);
        t_end = t;
    }
    assert_eq!(h.core.totals().path_losses, 2);
    (h, t_end)
}

#[test]
fn a_second_gap_waits_for_the_first_ones_retransmission_before_a_selective_rnic_sees_it() {
    // Two losses inside one window: 10 and 30. A selective-repeat RNIC NAKs 10 on the first
    // packet after it; released before 10's retransmission, 31.. would get no NAK for 30.
    let (mut h, t_end) = two_losses_to_a_selective_rnic();
    let out = h.take();
    assert!(
        out.contains(&29) && !out.contains(&31),
        "30's successors wait: {out:?}"
    );
    // 10 comes again (selective: only it): 31.. go out after it.
    h.arrive(2, 10, t_end + 1_000);
    let out = h.take();
    assert_eq!(out.first(), Some(&10));
    assert!(out.contains(&31) && out.contains(&59), "{out:?}");
    assert_eq!(h.core.held(), 0);
    assert_eq!(h.core.totals().timeouts, 0);
}

#[test]
fn a_selective_host_s_nak_does_not_move_e_back_and_the_second_gap_still_goes() {
    // As above, but the selective-repeat RNIC's NAK for 10 passes the switch first: `e` stays
    // (the RNIC has 11..29 and the host resends 10 alone), and the resent 10 releases 31...
    let (mut h, t_end) = two_losses_to_a_selective_rnic();
    h.core.learn_pair(&QpRef {
        local: LOCAL,
        remote: REMOTE,
        sport: 1,
        qpn: 1,
    });
    let nak = RoceMeta {
        sport: 1,
        psn: Psn::new(10),
        ..host(MetaKind::HostNak)
    };
    let mut out = Vec::new();
    h.core.handle_host(0, &nak, t_end + 500, &mut out);
    assert!(out.is_empty());
    assert_eq!(h.core.totals().resyncs, 0, "the expected PSN stays");
    assert_eq!(
        h.core.totals().host_naks_ignored,
        0,
        "the NAK found the stream"
    );
    h.take();
    h.arrive(2, 10, t_end + 1_000);
    let out = h.take();
    assert!(out.contains(&31) && out.contains(&59), "{out:?}");
    assert_eq!(h.core.held(), 0);
}

// ------------------------------------------------------------------ path order towards a requester

impl H {
    /// The local requester reads `n` PSNs from `psn` (item ids are PSNs).
    fn reads(&mut self, psn: u32, n: u32, now: u64) {
        read(&mut self.core, 7, psn, n, now);
    }
    /// A READ RESPONSE (or, `ack`, an ACK) with `psn` arrives on `path`, timers polled first.
    fn respond(&mut self, path: u8, psn: u32, ack: bool, now: u64) -> Insert {
        self.core.poll(now, &mut self.out);
        let kind = if ack { ResponseKind::Ack } else { fill(false) };
        let id = if ack { 10_000 + psn } else { psn };
        self.core.handle_packet(
            0,
            &RoceMeta {
                local: LOCAL,
                remote: REMOTE,
                sport: 7,
                qpn: LQ,
                path,
                stamp: PathStamp::NONE,
                ..response_meta(kind, Psn::new(psn), 100)
            },
            id,
            now,
            &mut self.out,
        )
    }
}

/// rxe's completer over what the switch released towards it: a response at its expected PSN
/// is taken; one below it is an old copy (dropped); one above it within the READ being
/// answered is dropped silently, and one past that READ (`ends`: where each READ ends) makes
/// it retry from its expected PSN (counted; none again until the expected PSN comes, as
/// `started_retry` does). Returns (retries, PSNs taken).
fn rxe_completer(released: &[u32], ends: &[u32]) -> (u32, u32) {
    let (mut e, mut retries, mut retrying) = (0u32, 0u32, false);
    for &p in released {
        if p == e {
            e += 1;
            retrying = false;
        } else if p > e {
            let last = ends
                .iter()
                .copied()
                .find(|end| e < *end)
                .unwrap_or(u32::MAX);
            if p >= last && !retrying {
                retries += 1;
                retrying = true;
            }
        }
    }
    (retries, e)
}

#[test]
fn a_re_created_qps_responses_are_not_judged_by_the_old_sequences_paths() {
    // Found by the transport proptest. The requester's QP reads 0..40, its responses come over
    // all four paths; then it is re-created with a PSN sequence below the old one (3.9M
    // below, within 2^22, so by distance the old PSNs lie above the new ones; or just 1000
    // below), reads 4 PSNs and sends a WRITE after it, whose ACK comes before the READ's
    // responses (on a faster path). The ACK waits behind the READ; the old sequence's PSNs
    // prove nothing about the READ's responses.
    for below in [3_900_000, 1_000] {
        let mut h = H::with_paths(LossRecovery::NakFirst);
        h.reads(0, 40, 0);
        for psn in 0..40 {
            h.respond((psn % 4) as u8, psn, false, u64::from(psn) * 1_000);
        }
        assert_eq!(h.take(), (0..40).collect::<Vec<_>>());
        let n = Psn::new(0).sub(below).value();
        let t = 1_000_000;
        h.reads(n, 4, t);
        h.respond(1, n + 4, true, t + 1_000);
        assert_eq!(
            h.core.totals().path_losses,
            0,
            "{below} below: the READ's responses may be on any path"
        );
        assert!(h.take().is_empty(), "the ACK waits behind the READ");
        for (i, psn) in (n..n + 4).enumerate() {
            h.respond(i as u8, psn, false, t + 50_000 + 1_000 * i as u64);
        }
        let out = h.take();
        assert_eq!(out[..4], (n..n + 4).collect::<Vec<_>>(), "{out:?}");
        assert_eq!(out.len(), 5, "then the ACK: {out:?}");
        assert_eq!(h.core.totals().path_losses, 0);
    }
}

#[test]
fn a_lost_read_response_is_declared_by_path_order_and_a_later_read_s_response_starts_the_retry() {
    // Two READs of 40 PSNs (0..40, 40..80), their responses sprayed over 0/20/40/60 us paths
    // one per us; PSN 10 (path 2) is lost.
    let mut h = H::with_paths(LossRecovery::NakFirst);
    h.reads(0, 40, 0);
    h.reads(40, 40, 0);
    let mut before = 0;
    for (t, path, psn) in sprayed(&[0, 20_000, 40_000, 60_000], 1_000, 80, &[10]) {
        if psn >= 40 && h.core.totals().path_losses == 0 {
            before = t;
        }
        h.respond(path, psn, false, t);
    }
    assert_eq!(h.core.totals().path_losses, 1);
    assert_eq!(h.core.totals().timeouts, 0);
    assert!(
        before >= 40_000,
        "not declared before a fill of READ 2 came"
    );
    let out = h.take();
    // 0..10 in order, then one fill of the second READ, alone: the rest waits.
    assert_eq!(&out[..10], &(0..10).collect::<Vec<_>>()[..]);
    assert_eq!(out.len(), 11, "{out:?}");
    assert!(out[10] >= 40);
    assert_eq!(rxe_completer(&out, &[40, 80]), (1, 10));
    // The requester retries from 10 (and asks for READ 2 again); the responder replays from
    // 10 on one path. What was held goes out in order behind 10; the replay's copies of it
    // are late (the requester drops them).
    let t = 1_000_000;
    h.reads(10, 30, t);
    h.reads(40, 40, t);
    for psn in 10..80 {
        h.respond(0, psn, false, t + u64::from(psn) * 1_000);
    }
    let mut all = out.clone();
    all.extend(h.take());
    assert_eq!(
        rxe_completer(&all, &[40, 80]),
        (1, 80),
        "one retry: {all:?}"
    );
    assert_eq!(h.core.held(), 0);
    assert_eq!(h.core.totals().path_losses, 1, "no second decision");
}

#[test]
fn a_lost_response_of_the_last_read_waits_for_an_ack_past_it_or_the_timeout() {
    // One READ of 40 PSNs; 10 is lost. Every path passes it, but nothing released would make
    // the requester retry: the stream waits.
    let mut h = H::with_paths(LossRecovery::NakFirst);
    h.reads(0, 40, 0);
    let arrivals = sprayed(&[0, 20_000, 40_000, 60_000], 1_000, 40, &[10]);
    let end = arrivals.last().map_or(0, |a| a.0);
    for (t, path, psn) in arrivals {
        h.respond(path, psn, false, t);
    }
    assert_eq!(h.core.totals().path_losses, 0);
    assert_eq!(h.take(), (0..10).collect::<Vec<_>>());
    // The ACK of a WRITE after the READ (PSN 40) comes: it goes out alone, and the requester
    // retries the READ (an ACK past a READ's last response is its loss to rxe).
    assert_eq!(h.respond(0, 40, true, end + 1_000), Insert::Held);
    assert_eq!(h.core.totals().path_losses, 1);
    assert_eq!(h.take(), vec![10_040]);
    assert_eq!(h.core.held(), 29);
    // Without the ACK the hold timeout would have released the rest; it still backs the
    // retry up.
    h.core.poll(end + 1_000 + 5_000_000, &mut h.out);
    assert_eq!(h.core.totals().timeouts, 1);
    assert_eq!(h.take().len(), 29);
    assert_eq!(h.core.held(), 0);
}

// ------------------------------------------------------------------ learning by path order

impl H {
    /// Four path-order paths (`down`: a bit per path that is down) and a 10 ms learning
    /// window: new request streams learn where they start.
    fn learning_on_paths(down: u64) -> H {
        let (c, p) = path_cfg(LossRecovery::NakFirst);
        let mut h = H::new(ReorderConfig {
            learn_ns: 10_000_000,
            ..c
        });
        h.core.set_port(0, p);
        let mut none = Vec::new();
        h.core.set_paths(4, down, 0, &mut none);
        h
    }
}

#[test]
fn learning_ends_once_every_path_has_delivered_a_packet_of_the_stream() {
    // A stream the switch saw no CM exchange for, sprayed over paths 0/20/40/60 us: until path
    // 3 delivers its first packet (PSN 3 at 63 us) a lower PSN may still be on it, so all is
    // held; then nothing below PSN 0 can come, and the stream starts there, long before its
    // 10 ms window ends.
    let mut h = H::learning_on_paths(0);
    let mut released_before_path_3 = None;
    for (t, path, psn) in sprayed(&[0, 20_000, 40_000, 60_000], 1_000, 200, &[]) {
        if path == 3 && released_before_path_3.is_none() {
            released_before_path_3 = Some((h.take(), h.core.held()));
        }
        h.arrive(path, psn, t);
    }
    let (before, held) = released_before_path_3.unwrap();
    assert!(
        before.is_empty(),
        "released before path 3 showed: {before:?}"
    );
    // By 63 us path 0 delivered PSNs 0-60, path 1 1-41 and path 2 2-22 (every fourth).
    assert_eq!(held, 16 + 11 + 6);
    assert_eq!(h.take(), (0..200).collect::<Vec<_>>());
    assert_eq!(h.core.held(), 0);
    assert_eq!(
        (h.core.totals().learned, h.core.totals().learned_by_paths),
        (1, 1)
    );
    assert_eq!(h.core.totals().late, 0);
}

#[test]
fn learning_waits_for_a_path_whose_first_packet_is_the_lowest() {
    // The lowest PSN on the slowest path: whatever the other paths deliver meanwhile, the
    // stream does not start above it.
    let mut h = H::learning_on_paths(0);
    h.arrive(1, 11, 1_000);
    h.arrive(2, 12, 2_000);
    for psn in (13..60).filter(|p| p % 4 != 0) {
        h.arrive((psn % 4) as u8, psn, u64::from(psn) * 1_000);
    }
    assert!(h.take().is_empty(), "path 0 has delivered nothing yet");
    // Path 0's first packet: PSN 10 (the stream's first), then what followed it on path 0.
    h.arrive(0, 10, 70_000);
    for psn in (16..60).step_by(4) {
        h.arrive(0, psn, 70_000 + u64::from(psn));
    }
    assert_eq!(h.take(), (10..60).collect::<Vec<_>>());
    assert_eq!(h.core.totals().learned_by_paths, 1);
}

#[test]
fn a_later_stamp_of_the_source_proves_a_path_the_learning_stream_has_not_used() {
    // QP 1's PSNs 10-12 on paths 0-2 (stamps 3-5); path 3 has shown only QP 2's stamp 1, sent
    // before them: QP 1's PSN 9 (stamp 2) may still be on path 3.
    let mut h = H::learning_on_paths(0);
    h.arrive_stamped(2, 3, 500, 1, 0);
    for (i, psn) in (10..13u32).enumerate() {
        h.arrive_stamped(1, i as u8, psn, 3 + i as u16, 1_000 + i as u64);
    }
    let qp1 = |out: Vec<u32>| out.into_iter().filter(|i| *i < 2000).collect::<Vec<_>>();
    assert!(qp1(h.take()).is_empty(), "path 3 may carry a lower PSN");
    h.arrive_stamped(1, 3, 9, 2, 10_000);
    assert_eq!(qp1(h.take()), vec![1009, 1010, 1011, 1012]);

    // The same, but path 3's next packet is QP 2's, stamped after QP 1's: nothing of QP 1 is
    // behind it, and QP 1 starts at once (the stamp's arrival wakes it).
    let mut h = H::learning_on_paths(0);
    h.arrive_stamped(2, 3, 500, 1, 0);
    for (i, psn) in (10..13u32).enumerate() {
        h.arrive_stamped(1, i as u8, psn, 3 + i as u16, 1_000 + i as u64);
    }
    assert!(qp1(h.take()).is_empty());
    h.arrive_stamped(2, 3, 501, 6, 10_000);
    assert_eq!(qp1(h.take()), vec![1010, 1011, 1012]);
    assert!(h.core.totals().learned_by_paths >= 1);
}

#[test]
fn a_path_that_is_down_does_not_hold_learning() {
    // Path 3 down from the start: three paths decide.
    let mut h = H::learning_on_paths(1 << 3);
    h.arrive(1, 11, 1_000);
    h.arrive(2, 12, 2_000);
    assert!(h.take().is_empty());
    h.arrive(0, 10, 30_000);
    assert_eq!(h.take(), vec![10, 11, 12]);
    // Path 3 goes down while a stream learns: it stops waiting for it.
    let mut h = H::learning_on_paths(0);
    h.arrive(0, 10, 1_000);
    h.arrive(1, 11, 2_000);
    h.arrive(2, 12, 3_000);
    assert!(h.take().is_empty());
    h.core.set_paths(4, 1 << 3, 4_000, &mut h.out);
    assert_eq!(h.take(), vec![10, 11, 12]);
    assert_eq!(h.core.totals().learned_by_paths, 1);
}

#[test]
fn a_loss_in_the_first_burst_is_declared_when_learning_ends() {
    // PSN 2 (path 2) is lost; path 3 is slow. When its 3 arrives learning ends at 0, and by
    // then every path has delivered above 2: lost, with nothing more to come.
    let mut h = H::learning_on_paths(0);
    for (path, psn, t) in [(0, 0, 1_000), (1, 1, 2_000), (0, 4, 5_000), (1, 5, 6_000)] {
        h.arrive(path, psn, t);
    }
    h.arrive(2, 6, 7_000);
    assert!(h.take().is_empty());
    h.arrive(3, 3, 50_000);
    assert_eq!(h.core.totals().learned_by_paths, 1);
    assert_eq!(h.core.totals().path_losses, 1);
    // nak_first: 0 and 1 in order, then 3 alone so that the host NAKs 2.
    assert_eq!(h.take(), vec![0, 1, 3]);
}

#[test]
fn a_stream_back_on_a_new_psn_sequence_learns_it_by_its_paths_too() {
    let mut h = H::learning_on_paths(0);
    for psn in 0..8 {
        h.arrive((psn % 4) as u8, psn, 1_000 * u64::from(psn + 1));
    }
    assert_eq!(h.take(), (0..8).collect::<Vec<_>>());
    // Idle past the learning window, then a new sequence (a QP re-created with its QPN): its
    // first packet restarts the stream and is the first evidence of the new sequence.
    let t = 20_000_000;
    for (i, psn) in (5000..5004u32).enumerate() {
        h.arrive(i as u8, psn, t + i as u64 * 1_000);
    }
    assert_eq!(h.core.totals().restarts, 1);
    assert_eq!(h.take(), (5000..5004).collect::<Vec<_>>());
    assert_eq!(h.core.totals().learned_by_paths, 2);
}

#[test]
fn without_path_information_learning_keeps_its_window() {
    let mut h = H::learning_on_paths(0);
    for psn in 10..20 {
        h.core.handle_packet(
            0,
            &req(key(1), Psn::new(psn), 1, 100),
            psn,
            u64::from(psn),
            &mut h.out,
        );
    }
    h.core.poll(9_999_999, &mut h.out);
    assert!(h.take().is_empty(), "no path, no proof: the window decides");
    h.core.poll(10_000_010, &mut h.out);
    assert_eq!(h.take(), (10..20).collect::<Vec<_>>());
    assert_eq!(h.core.totals().learned_by_paths, 0);
}

#[test]
fn nothing_is_proven_before_the_paths_are_known() {
    // A worker's first packets come before its path table: no path, no proof.
    let (c, p) = path_cfg(LossRecovery::NakFirst);
    let mut h = H::new(ReorderConfig {
        learn_ns: 10_000_000,
        ..c
    });
    h.core.set_port(0, p);
    h.arrive(0, 11, 1_000);
    assert!(h.take().is_empty(), "learning until the paths are known");
    let mut none = Vec::new();
    h.core.set_paths(1, 0, 2_000, &mut none);
    assert_eq!(none, vec![11], "one path: its first packet is the lowest");
}

// ------------------------------------------------------------------ review findings

/// A selective-repeat host's NAK after a run longer than the window was released (the ring and
/// the far list: up to five windows) is still of this sequence: the host kept the run and
/// resends the NAKed PSN alone, so `e` stays. Moved back, the stage waited on the PSN after the
/// NAKed one, which the host had, declared it lost, and held the next real loss for a hold
/// timeout waiting for that declared gap's retransmission.
#[test]
fn a_selective_host_s_nak_after_a_run_longer_than_the_window_does_not_move_e_back() {
    // 10 and 30 lost among PSNs 0..400 (W = 256): 30 waits for 10's retransmission, then
    // 31..399 (369 PSNs, ring and far list) go out as one run.
    let mut h = H::with_paths(LossRecovery::ReleaseRun);
    h.core.learn_pair(&QpRef {
        local: LOCAL,
        remote: REMOTE,
        sport: 7,
        qpn: 1,
    });
    let delays = [0, 20_000, 40_000, 60_000];
    let mut t_end = 0;
    for (t, path, psn) in sprayed(&delays, 1_000, 400, &[10, 30]) {
        h.arrive(path, psn, t);
        t_end = t;
    }
    assert_eq!(h.core.totals().path_losses, 2);
    h.arrive(2, 10, t_end + 1_000);
    assert_eq!(
        h.core.held(),
        0,
        "10's retransmission let the run 31..399 go"
    );
    assert_eq!(h.core.expected(&key(1)), Some(Psn::new(400)));
    // The sender goes on (400..800, 600 lost). The host's NAK for 30 and the resent 30 come
    // while later PSNs arrive.
    let t0 = t_end + 2_000;
    let (nak_at, resend_at) = (t0 + 4_500, t0 + 5_000);
    let (mut naked, mut resent) = (false, false);
    for (t, path, psn) in sprayed(&delays, 1_000, 400, &[200]) {
        let now = t0 + t;
        if !naked && now > nak_at {
            let e = h.core.expected(&key(1)).unwrap();
            h.core.handle_host(
                0,
                &RoceMeta {
                    local: LOCAL,
                    remote: REMOTE,
                    sport: 7,
                    qpn: RQ,
                    psn: Psn::new(30),
                    ..host(MetaKind::HostNak)
                },
                nak_at,
                &mut h.out,
            );
            assert_eq!(
                h.core.expected(&key(1)),
                Some(e),
                "the host has 31..399: e stays"
            );
            naked = true;
        }
        if !resent && now > resend_at {
            h.arrive(2, 30, resend_at);
            resent = true;
        }
        h.arrive(path, 400 + psn, now);
    }
    assert!(naked && resent);
    assert_eq!(
        h.core.totals().path_losses,
        3,
        "600's loss, and no gap declared at 31"
    );
    assert_eq!(
        h.core.held(),
        0,
        "600 went by path order at once, not after a hold timeout"
    );
    assert_eq!(h.core.totals().timeouts, 0);
}

/// Requests to ever-new local QPNs of one host pair, each QP's stream evicted once idle: what
/// the pairing remembers of the QPs it saw stays within the streams tracked (it kept up to
/// 4096 per host pair and side, for as many host pairs as streams, and a clear at 4096 wiped
/// the live QPs' entries too), and the live QP is still found by its host's NAK.
#[test]
fn the_qps_seen_of_a_host_pair_are_forgotten_with_their_streams() {
    let mut h = H::new(ReorderConfig {
        idle_evict_ns: 1_000,
        ..cfg()
    });
    let mut now = 0;
    for q in 0..10_000u32 {
        now = u64::from(q) * 2_000;
        h.core.poll(now, &mut h.out);
        h.core.handle_packet(
            0,
            &RoceMeta {
                kind: MetaKind::Request { read_len: None },
                path: crate::meta::NO_PATH,
                stamp: PathStamp::NONE,
                ..peer_req(key(q), Psn::new(0), 1, 100, Some((REMOTE, 7)))
            },
            q,
            now,
            &mut h.out,
        );
    }
    assert!(h.core.totals().evictions >= 9_990);
    let seen = h.core.pairing().locals(LOCAL, REMOTE).count();
    assert!(
        seen <= 2 * cfg().max_streams + super::pairing::SEEN_SLACK,
        "{seen} QPs remembered"
    );
    // The live QP (9999) is still found by its host's NAK.
    h.core.handle_host(
        0,
        &RoceMeta {
            local: LOCAL,
            remote: REMOTE,
            sport: 7,
            qpn: 0x9000,
            psn: Psn::new(1),
            ..host(MetaKind::HostNak)
        },
        now,
        &mut h.out,
    );
    assert_eq!(h.core.totals().host_naks_ignored, 0);
}

/// An ACK older than a READ whose first responses went out (the WRITE before it, ACKed late)
/// never reaches the requester in the middle of the READ's responses: when the stage gives a
/// missing response of that READ up (hold timeout) and releases its LAST, the READ's range goes
/// and a held ACK would follow; rxe's completer (a MIDDLE taken, its opcode MIDDLE) takes an
/// older ACK to `check_ack`, resets its opcode sequence, and the retry's MIDDLE response then
/// moves the QP to the error state. The ACK is redundant: discarded.
#[test]
fn an_ack_older_than_a_read_under_way_never_follows_a_given_up_response() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    read(&mut c, 1, 100, 4, 0);
    assert_eq!(resp(&mut c, fill(false), 100, 100, 0), Insert::Released);
    assert_eq!(resp(&mut c, fill(false), 101, 101, 0), Insert::Released);
    assert_eq!(resp(&mut c, ResponseKind::Ack, 99, 1099, 1), Insert::Stale);
    // 102 is lost; the LAST (103) waits; the gap times out.
    assert_eq!(resp(&mut c, fill(true), 103, 103, 2), Insert::Held);
    let mut out = Vec::new();
    c.poll(10_000, &mut out);
    OUT.with(|o| o.borrow_mut().extend(out));
    let got = released();
    assert_eq!(
        got,
        vec![100, 101, 103],
        "no ACK older than the READ: {got:?}"
    );
    assert_eq!(c.held(), 0);
}

/// The same ACK queued behind a later one before the READ began (held in arrival order): the
/// later ACK (past the READ) goes out after the given-up LAST (so that the requester retries),
/// the older one does not.
#[test]
fn an_older_ack_queued_behind_a_later_one_is_dropped_when_a_response_is_given_up() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg());
    read(&mut c, 1, 100, 4, 0);
    assert_eq!(resp(&mut c, ResponseKind::Ack, 110, 1110, 0), Insert::Held);
    assert_eq!(resp(&mut c, ResponseKind::Ack, 99, 1099, 0), Insert::Held);
    assert_eq!(resp(&mut c, fill(false), 100, 100, 1), Insert::Released);
    assert_eq!(resp(&mut c, fill(false), 101, 101, 1), Insert::Released);
    assert_eq!(resp(&mut c, fill(true), 103, 103, 2), Insert::Held);
    let mut out = Vec::new();
    c.poll(10_000, &mut out);
    OUT.with(|o| o.borrow_mut().extend(out));
    assert_eq!(released(), vec![100, 101, 103, 1110]);
    assert_eq!(c.totals().stale_acks, 1);
    assert_eq!(c.held(), 0);
}

/// A READ retried from a gap the stage gave up (rxe dropped everything after it) moves the
/// expected PSN back behind what the ring holds of the first pass, a window or more ahead:
/// those entries move to the far list, or the retry's responses collide with their slots (and
/// pass unordered) and the next scan from the expected PSN releases them out of order.
#[test]
fn a_read_retried_behind_what_is_held_keeps_the_ring_in_psn_order() {
    let mut c: ReorderCore<u32> = ReorderCore::new(cfg()); // W = 64
    let mut out = Vec::new();
    read(&mut c, 1, 0, 256, 0);
    for p in 0..10 {
        assert_eq!(resp(&mut c, fill(false), p, p, 0), Insert::Released);
    }
    // 10 is lost; 11..=73 wait and go at the hold timeout.
    for p in 11..74 {
        assert_eq!(resp(&mut c, fill(false), p, p, 0), Insert::Held);
    }
    c.poll(2_000, &mut out);
    assert_eq!(out, (11..74).collect::<Vec<_>>());
    out.clear();
    // The READ goes on: 74..=79 in order, 80 missing, 81..=143 wait (ring slots 17..63, 0..15).
    for p in 74..80 {
        assert_eq!(resp(&mut c, fill(false), p, p, 3_000), Insert::Released);
    }
    for p in 81..144 {
        assert_eq!(resp(&mut c, fill(false), p, p, 3_000), Insert::Held, "{p}");
    }
    released();
    // rxe took nothing after 9 and retries from 10 (246 PSNs left): the expected PSN goes back.
    read(&mut c, 1, 10, 246, 4_000);
    assert_eq!(c.totals().read_retries_seen, 1);
    // The retry's 12 comes first (a faster path); its slot held 140 of the first pass.
    assert_eq!(resp(&mut c, fill(false), 12, 12, 4_100), Insert::Held);
    // The gap at 10 times out again: what is held goes out in PSN order.
    c.poll(10_000, &mut out);
    assert!(out.windows(2).all(|w| w[0] < w[1]), "{out:?}");
    assert_eq!(out.len(), 64);
    assert_eq!(c.held(), 0);
}

/// A receive pool running low has the stage give up its oldest gaps, in the order their gaps
/// opened, as a hold timeout would (what each holds released in PSN order), until enough is
/// released; counted apart from timeouts.
#[test]
fn relieving_a_pool_gives_up_the_oldest_gaps_first() {
    let mut h = H::new(ReorderConfig {
        hold_timeout_ns: 1_000_000_000,
        ..cfg()
    });
    // Three streams, each missing its first PSN after 0: gaps opened at 10, 20 and 30 ns.
    for (qpn, t) in [(2, 20), (1, 10), (3, 30)] {
        h.ins(qpn, 0, qpn * 100, t);
        for p in 2..6 {
            assert_eq!(h.ins(qpn, p, qpn * 100 + p, t), Insert::Held);
        }
    }
    h.take();
    // Five packets wanted: the two oldest gaps go (4 each).
    assert_eq!(h.core.relieve(5, 100, &mut h.out), 8);
    assert_eq!(h.take(), vec![102, 103, 104, 105, 202, 203, 204, 205]);
    assert_eq!(h.core.totals().pool_give_ups, 2);
    assert_eq!(h.core.totals().timeouts, 0);
    assert_eq!(
        h.core.expected(&key(1)),
        Some(Psn::new(6)),
        "as a timeout leaves it"
    );
    assert_eq!(h.core.held(), 4);
    // The late packet that fills stream 1's old gap passes as late.
    assert_eq!(h.ins(1, 1, 101, 200), Insert::Late);
    assert_eq!(h.core.relieve(100, 300, &mut h.out), 4);
    assert_eq!(h.core.held(), 0);
    assert_eq!(
        h.core.relieve(1, 400, &mut h.out),
        0,
        "nothing held: nothing to give"
    );
}

#[test]
fn thousands_of_holding_streams_time_out_each_at_its_own_deadline_and_a_poll_looks_only_at_those_due(
) {
    const N: u32 = 4000;
    let mut h = H::new(ReorderConfig {
        max_streams: 2 * N as usize,
        max_rings: 2 * N as usize,
        max_held_bytes: 1 << 30,
        ..cfg()
    });
    // Every stream starts at PSN 0 at time 0, then (stream i) holds PSN 2 from 10 + 10 i:
    // its gap at 1 runs out at 1,010 + 10 i. Odd streams get PSN 1 before that.
    for q in 0..N {
        h.ins(q, 0, q, 0);
    }
    h.core.poll(0, &mut h.out);
    h.take();
    let mut t = 0;
    let mut timed_out = Vec::new();
    let mut polls = 0u64;
    let (_, looks_before) = h.core.timer_usage();
    while t < 10 * u64::from(N) + 2_000 {
        t += 5;
        if t % 10 == 0 && t >= 10 && (t - 10) / 10 < u64::from(N) {
            let q = ((t - 10) / 10) as u32;
            assert_eq!(h.ins(q, 2, 100_000 + q, t), Insert::Held);
        }
        // Odd streams' gaps fill 500 ns after they open.
        if t >= 510 && (t - 510) % 10 == 0 && (t - 510) / 10 < u64::from(N) {
            let q = ((t - 510) / 10) as u32;
            if q % 2 == 1 {
                h.ins(q, 1, 200_000 + q, t);
            }
        }
        if h.core.poll_due(t) {
            h.core.poll(t, &mut h.out);
            polls += 1;
        }
        for id in h.take() {
            if (100_000..200_000).contains(&id) {
                let q = id - 100_000;
                match q % 2 {
                    // Only its hold timing out releases an even stream's PSN 2.
                    0 => timed_out.push((q, t)),
                    _ => assert_eq!(t, 510 + 10 * u64::from(q), "released by its fill"),
                }
            }
        }
    }
    assert_eq!(
        h.core.totals().timeouts,
        u64::from(N / 2),
        "each even stream timed out once"
    );
    assert_eq!(timed_out.len(), (N / 2) as usize);
    for (q, at) in timed_out {
        let due = 1_010 + 10 * u64::from(q);
        assert!(
            (due..due + 5).contains(&at),
            "stream {q} timed out at {at}, due {due}"
        );
    }
    let (entries, looks) = h.core.timer_usage();
    // A walk of every listed stream per poll would take about N / 2 looks per poll.
    assert!(polls > u64::from(N) / 4, "{polls} polls");
    assert!(
        looks - looks_before < 4 * u64::from(N),
        "{} looks in {polls} polls",
        looks - looks_before
    );
    assert!(entries <= 4 * N as usize + 1024, "{entries} timer entries");
}

/// A burst gives its packets back in the order they were queued, each with its own egress
/// and facts, and is empty (and ready for the next) afterwards.
#[test]
fn a_burst_keeps_each_packet_with_its_own_facts() {
    use super::{Burst, DownlinkStage, Passthrough};
    use crate::pkt::Pkt;
    let mut burst = Burst::with_capacity(2);
    let mut seen = Vec::new();
    for round in 0..2u32 {
        for i in 0..5u32 {
            let tag = round * 10 + i;
            let pkt = Pkt::from_slice(&tag.to_be_bytes());
            burst.push(i as u16, pkt, req(key(100 + tag), Psn::new(tag), 1, 64));
        }
        assert_eq!(burst.len(), 5);
        burst.take_each(|facts, i, pkt| {
            let (egress, meta) = &facts[i];
            let tag = u32::from_be_bytes(pkt.data().try_into().unwrap());
            seen.push((tag, *egress, meta.qpn, meta.psn.value()));
        });
        assert!(burst.is_empty() && burst.facts().is_empty());
    }
    let want: Vec<_> = (0..2u32)
        .flat_map(|r| (0..5u32).map(move |i| (r * 10 + i, i as u16, 100 + r * 10 + i, r * 10 + i)))
        .collect();
    assert_eq!(seen, want);
    // The default hand-over (a stage without per-stream state) keeps the pairs too.
    for i in 0..3u32 {
        burst.push(
            i as u16 + 7,
            Pkt::from_slice(&i.to_be_bytes()),
            req(key(i), Psn::new(i), 1, 64),
        );
    }
    let mut out = Vec::new();
    let mut stage = Passthrough;
    stage.insert_burst(&mut burst, 0, &mut out);
    let got: Vec<_> = out
        .iter()
        .map(|(e, p)| (*e, u32::from_be_bytes(p.data().try_into().unwrap())))
        .collect();
    assert_eq!(got, vec![(7, 0), (8, 1), (9, 2)]);
    assert!(burst.is_empty());
}
