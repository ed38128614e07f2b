//! Where an RC requester's ACK clock spends its time: `rocecap loop A B`.
//!
//! Capture A is taken near the requesters (their ToR's host port, or their tap), capture B near
//! the responders, on one machine (one clock). A requester may have only so many PSNs
//! unacknowledged (Soft-RoCE: 128, and its responder acknowledges a 64 KB WRITE at MTU 1024 once,
//! at its last packet), so its goodput is set by how fast acknowledgements come back once the
//! window is full. For every positive ACK matched to the request packet it acknowledges, the
//! round trip splits into four parts:
//! - `out`: that request packet from A to B (the network, requester side to responder side);
//! - `responder`: request at B to ACK at B (the responder host's turnaround);
//! - `back`: the ACK from B to A;
//! - `requester`: when the requester had sent nothing for at least the quiet threshold before
//!   the ACK reached A (it was waiting), the time from that ACK to its next request packet at A.
//!
//! And the requester's quiet spells at A (no request packet for at least the threshold), with
//! the PSNs it had in flight (sent past A, not yet acknowledged at A) when each began, as a
//! share of the most it ever had in flight: spells in the top quarter are the window binding.
//!
//! A request is identified by (requester, responder, PSN) and matched to an ACK of the same
//! address pair and PSN; an identity seen more than once in a capture (a retransmission, or two
//! QPs between the same hosts at the same PSN) is left out. READs are clocked by their
//! responses, not by ACKs: a READ-only capture reports no ACKs.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::Serialize;
use sprayswitch::wire::{classify, Direction, Opcode, Pmtu, Psn, Syndrome, Transport};

use super::CapturePair;
use crate::percentile::quantile_us;

/// A request packet's identity: (requester, responder, PSN).
type ReqKey = (IpAddr, IpAddr, u32);
/// A request stream: (requester, responder, DestQP).
type StreamKey = (IpAddr, IpAddr, u32);

/// A distribution of intervals, microseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Dist {
    /// Intervals measured.
    pub n: u64,
    /// 10th percentile.
    pub p10_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Dist {
    /// The distribution of `ns`, or None when it is empty.
    pub fn of(mut ns: Vec<u64>) -> Option<Dist> {
        if ns.is_empty() {
            return None;
        }
        ns.sort_unstable();
        Some(Dist {
            n: ns.len() as u64,
            p10_us: quantile_us(&ns, 0.1),
            p50_us: quantile_us(&ns, 0.5),
            p90_us: quantile_us(&ns, 0.9),
            max_us: quantile_us(&ns, 1.0),
        })
    }
}

/// What [`AckLoop::report`] found.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LoopReport {
    /// Positive ACKs at A matched to the request they acknowledge, in both captures.
    pub acks: u64,
    /// Positive ACKs at A left out: no single matching request at A and B, or not at B.
    pub unmatched_acks: u64,
    /// ACK at A minus the acknowledged request at A: the whole loop as A sees it.
    pub round_trip: Option<Dist>,
    /// The acknowledged request from A to B.
    pub out: Option<Dist>,
    /// Request at B to ACK at B.
    pub responder: Option<Dist>,
    /// The ACK from B to A.
    pub back: Option<Dist>,
    /// A waiting requester: first ACK at A in a quiet spell to its next request at A.
    pub requester: Option<Dist>,
    /// Quiet threshold, microseconds.
    pub quiet_us: f64,
    /// First to last request packet at A, milliseconds (summed over streams).
    pub active_ms: f64,
    /// Quiet spells of all streams.
    pub quiet_spells: u64,
    /// Their summed length, milliseconds.
    pub quiet_ms: f64,
    /// Most PSNs any stream had in flight at A.
    pub max_in_flight: u32,
    /// Quiet milliseconds by PSNs in flight when the spell began, as a share of the stream's
    /// most: below 1/4, 1/4 to 1/2, 1/2 to 3/4, 3/4 and above (the window binding).
    pub quiet_ms_by_in_flight: [f64; 4],
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    ts_ns: u64,
    count: u32,
}

fn see(map: &mut HashMap<ReqKey, Seen>, key: ReqKey, ts_ns: u64) {
    map.entry(key)
        .and_modify(|s| s.count += 1)
        .or_insert(Seen { ts_ns, count: 1 });
}

/// One RoCE packet of capture A, in capture order.
#[derive(Debug, Clone, Copy)]
enum Event {
    Request {
        ts_ns: u64,
        stream: StreamKey,
        psn: Psn,
    },
    Ack {
        ts_ns: u64,
        key: ReqKey,
    },
}

/// What a frame is to this analysis.
enum Kind {
    Request(StreamKey, Psn),
    /// A positive ACK: (requester, responder, acknowledged PSN).
    Ack(ReqKey),
    Other,
}

fn kind(frame: &[u8]) -> Kind {
    let Ok(c) = classify(frame, Pmtu::DEFAULT) else {
        return Kind::Other;
    };
    let Some(r) = c.roce() else {
        return Kind::Other;
    };
    if r.transport != Transport::Rc {
        return Kind::Other;
    }
    match r.direction {
        Some(Direction::Request) => Kind::Request((r.ip.src, r.ip.dst, r.bth.dest_qp), r.bth.psn),
        Some(Direction::Response)
            if r.bth.opcode == Opcode::RcAcknowledge
                && matches!(r.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. })) =>
        {
            Kind::Ack((r.ip.dst, r.ip.src, r.bth.psn.value()))
        }
        _ => Kind::Other,
    }
}

/// Per-stream state while walking capture A.
#[derive(Debug, Default)]
struct StreamState {
    first_ns: u64,
    last_req_ns: u64,
    first: Option<Psn>,
    high: Option<Psn>,
    acked: Option<Psn>,
    /// PSNs in flight right after the last request.
    in_flight_at_last: u32,
    max_in_flight: u32,
    /// First ACK that reached the requester in the current quiet spell.
    waiting_since: Option<u64>,
    /// (spell length, PSNs in flight when it began).
    spells: Vec<(u64, u32)>,
}

/// Collects two captures' RoCE packets.
#[derive(Debug, Default)]
pub struct AckLoop {
    events: Vec<Event>,
    req_a: HashMap<ReqKey, Seen>,
    req_b: HashMap<ReqKey, Seen>,
    ack_b: HashMap<ReqKey, Seen>,
    /// Frames that were not RC requests or positive ACKs (NAKs, READ responses, other traffic).
    pub other_frames: u64,
}

/// A: near the requesters; B: near the responders.
impl CapturePair for AckLoop {
    fn add_a(&mut self, ts_ns: u64, frame: &[u8]) {
        match kind(frame) {
            Kind::Request(stream, psn) => {
                see(&mut self.req_a, (stream.0, stream.1, psn.value()), ts_ns);
                self.events.push(Event::Request { ts_ns, stream, psn });
            }
            Kind::Ack(key) => self.events.push(Event::Ack { ts_ns, key }),
            Kind::Other => self.other_frames += 1,
        }
    }

    fn add_b(&mut self, ts_ns: u64, frame: &[u8]) {
        match kind(frame) {
            Kind::Request(stream, psn) => {
                see(&mut self.req_b, (stream.0, stream.1, psn.value()), ts_ns)
            }
            Kind::Ack(key) => see(&mut self.ack_b, key, ts_ns),
            Kind::Other => self.other_frames += 1,
        }
    }
}

impl AckLoop {
    /// The loop's parts and the requesters' quiet spells, with `quiet_ns` as the threshold.
    pub fn report(&self, quiet_ns: u64) -> LoopReport {
        let once = |m: &HashMap<ReqKey, Seen>, k: &ReqKey| {
            m.get(k).filter(|s| s.count == 1).map(|s| s.ts_ns)
        };
        let (mut round_trip, mut out, mut responder, mut back) = (vec![], vec![], vec![], vec![]);
        let (mut acks, mut unmatched) = (0u64, 0u64);
        let mut acked_streams: HashMap<ReqKey, StreamKey> = HashMap::new();
        let mut streams: HashMap<StreamKey, StreamState> = HashMap::new();
        let mut requester = vec![];
        let mut seen_acks: HashMap<ReqKey, u32> = HashMap::new();
        // In time order, whatever order the capture wrote them in (a switch's capture may
        // interleave its ports' packets a little out of order); stable, so ties keep theirs.
        let mut events = self.events.clone();
        events.sort_by_key(|e| match *e {
            Event::Request { ts_ns, .. } | Event::Ack { ts_ns, .. } => ts_ns,
        });
        for ev in &events {
            match *ev {
                Event::Request { ts_ns, stream, psn } => {
                    acked_streams.insert((stream.0, stream.1, psn.value()), stream);
                    let st = streams.entry(stream).or_insert_with(|| StreamState {
                        first_ns: ts_ns,
                        last_req_ns: ts_ns,
                        ..StreamState::default()
                    });
                    let gap = ts_ns.saturating_sub(st.last_req_ns);
                    if gap >= quiet_ns {
                        st.spells.push((gap, st.in_flight_at_last));
                        if let Some(t) = st.waiting_since.take() {
                            requester.push(ts_ns.saturating_sub(t));
                        }
                    }
                    st.waiting_since = None;
                    st.last_req_ns = ts_ns;
                    if st.high.is_none_or(|h| psn.distance(h) > 0) {
                        st.high = Some(psn);
                    }
                    st.first.get_or_insert(psn);
                    st.in_flight_at_last = in_flight(st.first, st.high, st.acked);
                    st.max_in_flight = st.max_in_flight.max(st.in_flight_at_last);
                }
                Event::Ack { ts_ns, key } => {
                    let first = {
                        let n = seen_acks.entry(key).or_default();
                        *n += 1;
                        *n == 1
                    };
                    if let Some(st) = acked_streams.get(&key).and_then(|s| streams.get_mut(s)) {
                        let psn = Psn::new(key.2);
                        if st.acked.is_none_or(|a| psn.distance(a) > 0) {
                            st.acked = Some(psn);
                        }
                        if st.waiting_since.is_none()
                            && ts_ns.saturating_sub(st.last_req_ns) >= quiet_ns
                        {
                            st.waiting_since = Some(ts_ns);
                        }
                    }
                    if !first {
                        continue;
                    }
                    let parts = (
                        once(&self.req_a, &key),
                        once(&self.req_b, &key),
                        once(&self.ack_b, &key),
                    );
                    match parts {
                        (Some(ra), Some(rb), Some(ab)) if ra <= rb && rb <= ab && ab <= ts_ns => {
                            acks += 1;
                            round_trip.push(ts_ns - ra);
                            out.push(rb - ra);
                            responder.push(ab - rb);
                            back.push(ts_ns - ab);
                        }
                        _ => unmatched += 1,
                    }
                }
            }
        }
        let mut by_in_flight = [0u64; 4];
        let (mut spells, mut quiet, mut active, mut max_in_flight) = (0u64, 0u64, 0u64, 0u32);
        for st in streams.values() {
            active += st.last_req_ns.saturating_sub(st.first_ns);
            max_in_flight = max_in_flight.max(st.max_in_flight);
            for &(len, inf) in &st.spells {
                spells += 1;
                quiet += len;
                let quarter = if st.max_in_flight == 0 {
                    0
                } else {
                    ((inf as u64 * 4) / st.max_in_flight as u64).min(3) as usize
                };
                by_in_flight[quarter] += len;
            }
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        LoopReport {
            acks,
            unmatched_acks: unmatched,
            round_trip: Dist::of(round_trip),
            out: Dist::of(out),
            responder: Dist::of(responder),
            back: Dist::of(back),
            requester: Dist::of(requester),
            quiet_us: quiet_ns as f64 / 1e3,
            active_ms: ms(active),
            quiet_spells: spells,
            quiet_ms: ms(quiet),
            max_in_flight,
            quiet_ms_by_in_flight: by_in_flight.map(ms),
        }
    }
}

/// PSNs sent and not yet acknowledged: from the one after `acked` (before any ACK: from
/// `first`) through `high`.
fn in_flight(first: Option<Psn>, high: Option<Psn>, acked: Option<Psn>) -> u32 {
    match (first, high, acked) {
        (_, Some(h), Some(a)) => h.distance(a).max(0) as u32,
        (Some(f), Some(h), None) => h.distance(f).max(0) as u32 + 1,
        _ => 0,
    }
}

/// The report as text.
pub fn human(r: &LoopReport) -> String {
    let mut s = format!(
        "{} ACKs matched to their request at both points ({} left out)\n",
        r.acks, r.unmatched_acks
    );
    for (name, d) in [
        ("round trip at A", &r.round_trip),
        ("  out (A to B)", &r.out),
        ("  responder (at B)", &r.responder),
        ("  back (B to A)", &r.back),
        ("requester resume", &r.requester),
    ] {
        match d {
            Some(d) => s.push_str(&format!(
                "{name:<20} n {:>6}  p10 {:>9.1} us  p50 {:>9.1} us  p90 {:>9.1} us  max {:>9.1} us\n",
                d.n, d.p10_us, d.p50_us, d.p90_us, d.max_us
            )),
            None => s.push_str(&format!("{name:<20} none\n")),
        }
    }
    let q = &r.quiet_ms_by_in_flight;
    s.push_str(&format!(
        "requesters quiet {:.1} of {:.1} ms active in {} spells of {:.0} us or more; most in flight {} PSNs; \
         quiet ms by in flight at the start: <1/4 {:.1}, <1/2 {:.1}, <3/4 {:.1}, >=3/4 {:.1}",
        r.quiet_ms, r.active_ms, r.quiet_spells, r.quiet_us, r.max_in_flight, q[0], q[1], q[2], q[3]
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::testkit::roce_frame;
    use sprayswitch::wire::{AethRepr, BthRepr, ExtRepr, IpRepr, NakCode, RoceFrameRepr};
    use std::net::Ipv4Addr;

    const US: u64 = 1_000;

    /// An RC ACKNOWLEDGE from the responder 10.0.1.2 to the requester 10.0.0.2.
    fn ack(psn: u32, syndrome: Syndrome) -> Vec<u8> {
        let ip = IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 1, 2),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            id: 0,
        };
        let bth = BthRepr::new(Opcode::RcAcknowledge, 0x33, Psn::new(psn));
        RoceFrameRepr::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], ip, bth)
            .with_ext(ExtRepr {
                aeth: Some(AethRepr { syndrome, msn: 1 }),
                ..ExtRepr::default()
            })
            .to_vec()
            .unwrap()
    }

    /// A WRITE from the requester 10.0.0.2 to the responder's QP 7.
    fn req(psn: u32) -> Vec<u8> {
        roce_frame(0, Ipv4Addr::new(10, 0, 1, 2), 7, psn, 256)
    }

    /// Four rounds of a requester with an 8-PSN window, acknowledged every 4 PSNs: 8 requests
    /// 1 us apart, 10 us to B, the responder acknowledging 100 us after the packet reached it,
    /// 5 us back, and the next round 50 us after the second ACK reached A. PSN 27 is
    /// retransmitted (seen twice at A), so its ACK cannot be matched.
    fn rounds() -> AckLoop {
        let mut l = AckLoop::default();
        let ok = Syndrome::Ack { credits: 0x1F };
        let mut t = 1_000 * US;
        for k in 0..4u32 {
            for i in 0..8u32 {
                let psn = 8 * k + i;
                let at = t + u64::from(i) * US;
                l.add_a(at, &req(psn));
                l.add_b(at + 10 * US, &req(psn));
                if psn == 27 {
                    l.add_a(at + 2 * US, &req(psn));
                }
            }
            for i in [3u32, 7] {
                let at_b = t + u64::from(i) * US + 110 * US;
                l.add_b(at_b, &ack(8 * k + i, ok));
            }
            // Capture A in time order: the ACKs after the round's requests.
            for i in [3u32, 7] {
                l.add_a(t + u64::from(i) * US + 115 * US, &ack(8 * k + i, ok));
            }
            t += 7 * US + 115 * US + 50 * US;
        }
        // Neither requests nor positive ACKs: counted apart.
        l.add_a(t, &ack(40, Syndrome::Nak(NakCode::PsnSequenceError)));
        l.add_b(t, &[0u8; 60]);
        l
    }

    #[test]
    fn the_loop_splits_into_network_responder_and_requester() {
        let l = rounds();
        assert_eq!(l.other_frames, 2);
        let r = l.report(50 * US);
        assert_eq!((r.acks, r.unmatched_acks), (7, 1));
        let d = |x: &Option<Dist>| x.clone().map(|d| (d.n, d.p50_us, d.max_us));
        assert_eq!(d(&r.round_trip), Some((7, 115.0, 115.0)));
        assert_eq!(d(&r.out), Some((7, 10.0, 10.0)));
        assert_eq!(d(&r.responder), Some((7, 100.0, 100.0)));
        assert_eq!(d(&r.back), Some((7, 5.0, 5.0)));
        // The first ACK of a spell reaches A 118 us after the round began; the next round
        // begins at 172 us.
        assert_eq!(d(&r.requester), Some((3, 54.0, 54.0)));
        // Three spells of 165 us, each begun with the whole window (8 PSNs) in flight.
        assert_eq!((r.quiet_spells, r.max_in_flight), (3, 8));
        assert!((r.quiet_ms - 0.495).abs() < 1e-9, "{}", r.quiet_ms);
        assert_eq!(r.quiet_ms_by_in_flight[..3], [0.0, 0.0, 0.0]);
        assert!((r.quiet_ms_by_in_flight[3] - 0.495).abs() < 1e-9);
        let text = human(&r);
        assert!(
            text.contains("7 ACKs matched to their request at both points (1 left out)"),
            "{text}"
        );
        assert!(text.contains("most in flight 8 PSNs"), "{text}");
    }

    #[test]
    fn capture_order_does_not_matter_only_timestamps_do() {
        let mut l = rounds();
        let want = l.report(50 * US);
        l.events.reverse();
        assert_eq!(l.report(50 * US), want);
    }

    #[test]
    fn a_longer_quiet_threshold_sees_no_waiting() {
        let r = rounds().report(1_000 * US);
        assert_eq!((r.quiet_spells, r.requester), (0, None));
        assert_eq!(r.acks, 7);
    }

    #[test]
    fn acks_without_their_requests_are_left_out() {
        let mut l = AckLoop::default();
        l.add_a(5 * US, &ack(3, Syndrome::Ack { credits: 0 }));
        l.add_b(4 * US, &ack(3, Syndrome::Ack { credits: 0 }));
        let r = l.report(500 * US);
        assert_eq!((r.acks, r.unmatched_acks), (0, 1));
        assert!(r.round_trip.is_none() && r.requester.is_none());
        assert!(human(&r).contains("round trip at A      none"));
    }
}
