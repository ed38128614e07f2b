//! Minimal RNIC models for one RC QP pair: a requester that issues RDMA WRITEs and READs and
//! retransmits the way real RNICs do (go-back-N from a NAKed PSN, READ retry when a response is
//! out of order or an ACK implies it was lost, and on a timeout), and a Go-Back-N responder
//! (ConnectX-5 / Soft-RoCE: drop out-of-order packets, NAK the expected PSN once, re-ACK
//! duplicates, re-execute duplicate READs, coalesce ACKs).
//!
//! They build and parse real RoCEv2 frames (ICRC included) and talk through a [`Port`], so
//! they exercise the switch exactly as hosts would. The full traffic generator (many QPs,
//! SEND, selective-repeat receivers, rates, reports) builds on these.

use std::collections::VecDeque;
use std::net::IpAddr;

use sprayswitch::pkt::Pkt;
use sprayswitch::port::Port;
use sprayswitch::wire::ecn::{codepoint, Codepoint};

use crate::dcqcn::{DcqcnConfig, NotificationPoint, ReactionPoint};
use sprayswitch::wire::{
    classify, AethRepr, BthRepr, ExtRepr, IpRepr, NakCode, Opcode, Pmtu, Psn, RethRepr,
    RoceFrameRepr, Syndrome,
};

/// Addresses of one end of a QP pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// This host's MAC.
    pub mac: [u8; 6],
    /// Its gateway's MAC.
    pub gw_mac: [u8; 6],
    /// This host's address.
    pub ip: IpAddr,
    /// The peer's address.
    pub peer_ip: IpAddr,
    /// The peer's QPN (DestQP of what this end sends).
    pub peer_qpn: u32,
    /// UDP source port of the pair (the same both ways).
    pub sport: u16,
}

impl Endpoint {
    /// An RDMA CM REQ or REP from this end to its peer (UD SEND ONLY to QP1 with the GSI Q_Key),
    /// as an RDMA CM application exchanges before its QPs carry data.
    pub fn cm_frame(&self, msg: &sprayswitch::wire::cm::CmMessage) -> Pkt {
        use sprayswitch::wire::cm::{self, GSI_QKEY, MAD_LEN};
        let mut mad = [0u8; MAD_LEN];
        if cm::emit(msg, &mut mad).is_err() {
            return Pkt::with_capacity(0);
        }
        let gsi = Endpoint {
            peer_qpn: 1,
            ..*self
        };
        let ext = ExtRepr {
            deth: Some(sprayswitch::wire::DethRepr {
                qkey: GSI_QKEY,
                src_qp: 1,
            }),
            ..ExtRepr::default()
        };
        gsi.frame(Opcode::UdSendOnly, Psn::new(0), false, ext, &mad)
    }

    /// A CNP to the peer's QP (DestQP: the QP to slow down), as RoCE NICs send it: BECN set,
    /// 16 reserved bytes, DSCP 48 and not ECN-capable.
    pub fn cnp_frame(&self) -> Pkt {
        let Some(ip) = IpRepr::between(self.ip, self.peer_ip) else {
            return Pkt::with_capacity(0);
        };
        let bth = BthRepr {
            becn: true,
            ..BthRepr::new(Opcode::Cnp, self.peer_qpn, Psn::new(0))
        };
        let f = RoceFrameRepr {
            udp_src_port: self.sport,
            tos: 48 << 2,
            ..RoceFrameRepr::new(self.mac, self.gw_mac, ip, bth)
        }
        .to_vec()
        .unwrap_or_default();
        Pkt::from_slice(&f)
    }

    fn frame(&self, opcode: Opcode, psn: Psn, ack_req: bool, ext: ExtRepr, payload: &[u8]) -> Pkt {
        // Both ends of a QP pair use one address family; a mixed pair builds nothing.
        let Some(ip) = IpRepr::between(self.ip, self.peer_ip) else {
            return Pkt::with_capacity(0);
        };
        let bth = BthRepr {
            ack_req,
            ..BthRepr::new(opcode, self.peer_qpn, psn)
        };
        let f = RoceFrameRepr {
            udp_src_port: self.sport,
            ..RoceFrameRepr::new(self.mac, self.gw_mac, ip, bth)
        }
        .with_ext(ext)
        .with_payload(payload)
        .to_vec()
        .unwrap_or_default();
        Pkt::from_slice(&f)
    }
}

/// A work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// RDMA WRITE of this many bytes (one packet per path MTU).
    Write(u32),
    /// RDMA READ of this many bytes.
    Read(u32),
    /// SEND of this many bytes.
    Send(u32),
}

/// READs a requester keeps outstanding at once (`max_rd_atomic`; ConnectX and rxe allow 16).
pub const MAX_RD_ATOMIC: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Outstanding {
    work: Work,
    psn: Psn,
    span: u32,
    /// READ: response packets received in order so far.
    got: u32,
    /// READ at a selective-repeat requester: responses kept beyond `got` (bit `k`: response
    /// `got + 1 + k`), placed as they came.
    beyond: u128,
    /// When it was first sent (0: not yet).
    sent_ns: u64,
}

/// What a requester did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequesterStats {
    /// Packets sent, first transmissions and retransmissions.
    pub packets_sent: u64,
    /// Packets a transfer needed (first transmissions).
    pub packets_needed: u64,
    /// Packets sent again.
    pub retransmitted: u64,
    /// NAKs (PSN sequence error) received.
    pub naks: u64,
    /// READs retried because a response came out of order or an ACK passed them.
    pub read_retries: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Work requests completed.
    pub completed: u64,
    /// CNPs received.
    pub cnps: u64,
}

/// An RC requester.
pub struct Requester {
    ep: Endpoint,
    pmtu: Pmtu,
    pending: VecDeque<Work>,
    out: VecDeque<Outstanding>,
    next_psn: Psn,
    /// Index into `out` of the next packet to (re)send.
    cursor: usize,
    /// Within a multi-packet WRITE at `cursor`, the next segment.
    segment: u32,
    /// PSNs the requester may have sent and not had acknowledged (rxe: `RXE_MAX_UNACKED_PSNS`,
    /// 128, and one more: it stops only beyond it): checked per packet, as rxe's requester
    /// does, so a message's first packets go while the one before it is still being
    /// acknowledged. At least 1.
    window: u32,
    /// Packets sent since the last one that asked for an ACK.
    noack: u32,
    timeout_ns: u64,
    last_progress: u64,
    tx: Vec<Pkt>,
    payload: Vec<u8>,
    high: Psn,
    retrying: Option<Psn>,
    /// The last PSN an ACK covered inside the oldest outstanding WRITE or SEND (`None`: none
    /// of it yet): progress that restarts the timer, and where a timeout resends from.
    acked_within: Option<Psn>,
    retransmit: Retransmit,
    resend: VecDeque<Psn>,
    now: u64,
    rate_bps: Option<u64>,
    /// DCQCN's reaction point, when the QP runs it: its rate bounds `rate_bps`.
    dcqcn: Option<ReactionPoint>,
    /// Earliest time the next packet may leave under the rate.
    next_send_ns: u64,
    /// Packets built ahead of the port per poll (at most 32).
    burst: usize,
    /// Completion time (ns from first transmission) of every finished work request.
    pub completion_ns: Vec<u64>,
    /// Bytes of finished work requests.
    pub bytes_done: u64,
    /// Counters.
    pub stats: RequesterStats,
}

fn segments(work: Work, pmtu: Pmtu) -> u32 {
    match work {
        Work::Write(len) | Work::Read(len) | Work::Send(len) => pmtu.read_span(len),
    }
}

/// How far behind its schedule a paced sender may be and still catch up (see `count_send`).
const PACING_SLACK_NS: u64 = 1_000;

/// How a requester retransmits after a NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retransmit {
    /// Everything from the NAKed PSN on (against Go-Back-N responders).
    GoBackN,
    /// Only the NAKed packet (against selective-repeat responders).
    Selective,
}

impl Requester {
    /// A requester starting at `psn` with at most `window` PSNs outstanding.
    pub fn new(ep: Endpoint, psn: Psn, pmtu: Pmtu, window: u32, timeout_ns: u64) -> Requester {
        Requester {
            ep,
            pmtu,
            pending: VecDeque::new(),
            out: VecDeque::new(),
            next_psn: psn,
            cursor: 0,
            segment: 0,
            window: window.max(1),
            noack: 0,
            timeout_ns,
            last_progress: 0,
            tx: Vec::with_capacity(64),
            payload: vec![0x3C; pmtu.bytes() as usize],
            high: psn,
            retrying: None,
            acked_within: None,
            retransmit: Retransmit::GoBackN,
            resend: VecDeque::new(),
            now: 0,
            rate_bps: None,
            dcqcn: None,
            next_send_ns: 0,
            burst: 32,
            completion_ns: Vec::new(),
            bytes_done: 0,
            stats: RequesterStats::default(),
        }
    }

    /// Retransmits only NAKed packets (for selective-repeat responders).
    pub fn set_retransmit(&mut self, r: Retransmit) {
        self.retransmit = r;
    }

    /// Sends at most `bps` bits per second (open loop; the window still bounds what is
    /// outstanding). `None`: as fast as the window allows.
    pub fn set_rate(&mut self, bps: Option<u64>) {
        self.rate_bps = bps;
    }

    /// Runs DCQCN (`None`: no congestion control): the QP starts at the profile's line rate
    /// and slows down on CNPs.
    pub fn set_dcqcn(&mut self, cfg: Option<DcqcnConfig>) {
        self.dcqcn = cfg.map(ReactionPoint::new);
    }

    /// Builds at most `n` packets (1 to 32) ahead of what the port takes in a poll: a sender
    /// whose port takes a packet or two per poll (a NIC shared by many QPs) counts a packet as
    /// sent, for its rate and DCQCN's byte counter, near when it leaves.
    pub fn set_burst(&mut self, n: usize) {
        self.burst = n.clamp(1, 32);
    }

    /// The DCQCN reaction point, when the QP runs it.
    pub fn dcqcn(&self) -> Option<&ReactionPoint> {
        self.dcqcn.as_ref()
    }

    /// The rate the QP sends at now (`None`: as fast as the window allows).
    pub fn send_rate(&self) -> Option<u64> {
        match (self.rate_bps, &self.dcqcn) {
            (Some(r), Some(d)) => Some(r.min(d.rate_bps())),
            (r, d) => r.or(d.as_ref().map(ReactionPoint::rate_bps)),
        }
    }

    /// Queues work.
    pub fn post(&mut self, w: Work) {
        if let Work::Read(_) = w {
            self.stats.packets_needed += 1;
        } else {
            self.stats.packets_needed += u64::from(segments(w, self.pmtu));
        }
        self.pending.push_back(w);
    }

    /// True when everything posted has completed.
    pub fn done(&self) -> bool {
        self.pending.is_empty() && self.out.is_empty()
    }

    /// The first PSN not acknowledged yet (rxe's `comp.psn`), when anything is outstanding.
    fn first_unacked(&self) -> Option<Psn> {
        let o = self.out.front()?;
        Some(match (o.work, self.acked_within) {
            (Work::Read(_), _) => o.psn.add(o.got),
            (_, Some(a)) => a.add(1),
            (_, None) => o.psn,
        })
    }

    /// Whether `psn` is beyond the window: `window` PSNs from the first not acknowledged.
    fn beyond_window(&self, psn: Psn) -> bool {
        self.first_unacked().is_some_and(|f| {
            let d = psn.distance(f);
            d >= 0 && d as u32 >= self.window
        })
    }

    /// Whether the packet about to go asks for an ACK: the last of its message, and one in
    /// every half window besides (rxe: the packet after `RXE_MAX_PKT_PER_ACK`, 64, of its 128),
    /// so that a responder that coalesces ACKs still opens the window.
    fn ack_request(&mut self, last: bool) -> bool {
        self.noack += 1;
        if last || self.noack >= (self.window / 2).max(1) {
            self.noack = 0;
            true
        } else {
            false
        }
    }

    fn complete_front(&mut self) {
        self.acked_within = None;
        if let Some(o) = self.out.pop_front() {
            self.stats.completed += 1;
            self.cursor = self.cursor.saturating_sub(1);
            let len = match o.work {
                Work::Write(l) | Work::Read(l) | Work::Send(l) => l,
            };
            self.bytes_done += u64::from(len);
            if o.sent_ns > 0 {
                self.completion_ns.push(self.now.saturating_sub(o.sent_ns));
            }
        }
    }

    /// Rewinds to the operation containing `psn` (go-back-N); READs from there on start over.
    fn go_back_to(&mut self, psn: Psn) {
        let at = self.out.iter().position(|o| {
            let d = psn.distance(o.psn);
            d >= 0 && (d as u32) < o.span
        });
        let (i, seg) = match at {
            Some(i) => {
                let o = self.out[i];
                let d = psn.distance(o.psn) as u32;
                (
                    i,
                    if matches!(o.work, Work::Write(_) | Work::Send(_)) {
                        d
                    } else {
                        0
                    },
                )
            }
            None => (0, 0),
        };
        self.cursor = i;
        self.segment = seg;
        for o in self.out.iter_mut().skip(i) {
            o.got = 0;
            o.beyond = 0;
        }
    }

    /// Runs the timers due by `now` (DCQCN's, the retransmission timeout) without sending. A
    /// caller that polls only QPs with something to send (see [`Requester::next_send_at`])
    /// runs them for the others now and then: a timeout is found that much late, DCQCN's
    /// timers run in time order whenever they are run.
    pub fn run_timers(&mut self, now: u64) {
        self.now = now;
        if let Some(rp) = self.dcqcn.as_mut() {
            rp.poll(now);
        }
        if self.last_progress == 0 {
            self.last_progress = now;
        }
        if !self.out.is_empty() && now.saturating_sub(self.last_progress) > self.timeout_ns {
            self.stats.timeouts += 1;
            self.last_progress = now;
            // From the first PSN not acknowledged, mid-message for a WRITE or SEND, as rxe's
            // req_retry does.
            let first = self.acked_within.map_or(self.out[0].psn, |a| a.add(1));
            self.go_back_to(first);
        }
    }

    /// The PSN of the next packet to (re)send from the cursor: a WRITE's or SEND's segment, a
    /// READ's request. `None` when everything outstanding has been sent.
    fn cursor_psn(&self) -> Option<Psn> {
        self.out.get(self.cursor).map(|o| match o.work {
            Work::Write(_) | Work::Send(_) => o.psn.add(self.segment),
            Work::Read(_) => o.psn,
        })
    }

    /// When a poll would next send something: `now` of the last poll or handle (or earlier)
    /// when it has packets to send now, a later time when only its rate holds it back, `None`
    /// when it has nothing it may send (nothing posted, or the window full: a response or the
    /// timeout changes that).
    pub fn next_send_at(&self) -> Option<u64> {
        if !self.tx.is_empty() || !self.resend.is_empty() {
            return Some(self.now);
        }
        let window_open = match self.cursor_psn() {
            Some(psn) => !self.beyond_window(psn),
            None => !self.pending.is_empty() && !self.beyond_window(self.next_psn),
        };
        if !window_open {
            return None;
        }
        Some(match self.send_rate() {
            Some(_) => self.next_send_ns.max(self.now),
            None => self.now,
        })
    }

    /// Sends what the window (and the rate, if set) allows; retransmits after a timeout.
    pub fn poll(&mut self, now: u64, port: &mut dyn Port) {
        self.run_timers(now);
        // New work into the window; at most `MAX_RD_ATOMIC` READs outstanding, as RNICs limit.
        // The timer starts with the first packet outstanding, not at the last progress before
        // the QP went idle (a QP idle longer than the timeout would time out at once).
        if self.out.is_empty() && !self.pending.is_empty() {
            self.last_progress = now;
        }
        while let Some(w) = self.pending.front().copied() {
            let span = segments(w, self.pmtu);
            // The next message is taken when its first packet is inside the window.
            if self.beyond_window(self.next_psn) {
                break;
            }
            let reads = self
                .out
                .iter()
                .filter(|o| matches!(o.work, Work::Read(_)))
                .count();
            if matches!(w, Work::Read(_)) && reads >= MAX_RD_ATOMIC {
                break;
            }
            self.pending.pop_front();
            self.out.push_back(Outstanding {
                work: w,
                psn: self.next_psn,
                span,
                got: 0,
                beyond: 0,
                sent_ns: 0,
            });
            self.next_psn = self.next_psn.add(span);
        }
        // Single packets a selective-repeat responder NAKed.
        while let Some(psn) = self.resend.pop_front() {
            let at = self.out.iter().position(|o| {
                let d = psn.distance(o.psn);
                d >= 0 && (d as u32) < o.span
            });
            if let Some(i) = at {
                let o = self.out[i];
                if !matches!(o.work, Work::Read(_)) {
                    // A hole filled: asking for the ACK opens the window at once (the packets
                    // after the hole are with the responder already).
                    let k = psn.forward_from(o.psn);
                    self.noack = 0;
                    let pkt = self.segment_packet(&o, k, true);
                    self.tx.push(pkt);
                    self.count_send(psn);
                }
            }
        }
        // (Re)send from the cursor.
        while self.cursor < self.out.len() && self.tx.len() < self.burst {
            if self.send_rate().is_some() && now < self.next_send_ns {
                break;
            }
            let o = self.out[self.cursor];
            let next = self.cursor_psn().unwrap_or(o.psn);
            if self.beyond_window(next) {
                break;
            }
            if o.sent_ns == 0 {
                self.out[self.cursor].sent_ns = now;
            }
            match o.work {
                Work::Write(_) | Work::Send(_) => {
                    let k = self.segment;
                    let psn = o.psn.add(k);
                    let last = k + 1 == o.span;
                    let ack_req = self.ack_request(last);
                    let pkt = self.segment_packet(&o, k, ack_req);
                    self.tx.push(pkt);
                    self.count_send(psn);
                    if last {
                        self.cursor += 1;
                        self.segment = 0;
                    } else {
                        self.segment += 1;
                    }
                }
                Work::Read(len) => {
                    let ext = ExtRepr {
                        reth: Some(RethRepr {
                            virtual_address: 0x2000,
                            rkey: 6,
                            dma_len: len,
                        }),
                        ..ExtRepr::default()
                    };
                    self.noack = 0;
                    let pkt = self.ep.frame(Opcode::RcReadRequest, o.psn, true, ext, &[]);
                    self.tx.push(pkt);
                    self.count_send(o.psn);
                    // The READ spans its responses' PSNs: asking for any of them again is a
                    // retransmission.
                    let end = o.psn.add(o.span);
                    if end.is_after(self.high) {
                        self.high = end;
                    }
                    self.cursor += 1;
                    self.segment = 0;
                }
            }
        }
        while !self.tx.is_empty() {
            if port.tx_burst(now, &mut self.tx) == 0 {
                break;
            }
        }
    }

    /// A READ response at a selective-repeat requester (ConnectX, as Mellanox's US10430374
    /// describes it): kept and placed wherever it falls, in its own READ or a later one;
    /// completions still in order. One that came after a response still missing makes it ask
    /// at once, with a new READ request, for the missing run before the next response it has:
    /// once per missing PSN.
    fn selective_read_response(&mut self, psn: Psn, now: u64) {
        let within = |o: &Outstanding| {
            let d = psn.distance(o.psn);
            matches!(o.work, Work::Read(_)) && d >= 0 && (d as u32) < o.span
        };
        let Some(j) = self.out.iter().position(within) else {
            return;
        };
        let o = self.out[j];
        let k = psn.distance(o.psn.add(o.got));
        if k < 0 {
            return;
        }
        if k == 0 {
            let f = &mut self.out[j];
            f.got += 1;
            while f.beyond & 1 == 1 {
                f.beyond >>= 1;
                f.got += 1;
            }
            f.beyond >>= 1;
            self.last_progress = now;
        } else if k <= 128 {
            self.out[j].beyond |= 1u128 << (k - 1);
        }
        // RC ordering: a response of READ `j` means everything before it was executed; READs
        // complete in order, when all their responses are in.
        let mut before = j + 1;
        while let Some(f) = self.out.front().copied() {
            let done = match f.work {
                Work::Read(_) => f.got >= f.span,
                _ => before > 0,
            };
            if !done {
                break;
            }
            self.complete_front();
            before = before.saturating_sub(1);
        }
        // The first response missing, and whether anything came after it.
        let Some(i) = self
            .out
            .iter()
            .position(|o| matches!(o.work, Work::Read(_)) && o.got < o.span)
        else {
            self.retrying = None;
            return;
        };
        let f = self.out[i];
        let first = f.psn.add(f.got);
        if psn.is_after(first) && self.retrying != Some(first) {
            self.retrying = Some(first);
            self.stats.read_retries += 1;
            let run = (f.beyond.trailing_zeros() + 1).min(f.span - f.got);
            self.read_again(i, first, run);
        }
    }

    /// Asks again for `n` responses of the READ `out[i]` from `from` (a selective-repeat
    /// requester's READ retry: a READ request for just those PSNs).
    fn read_again(&mut self, i: usize, from: Psn, n: u32) {
        let o = self.out[i];
        let Work::Read(len) = o.work else {
            return;
        };
        let k = from.forward_from(o.psn);
        let offset = k * self.pmtu.bytes();
        let ext = ExtRepr {
            reth: Some(RethRepr {
                virtual_address: 0x2000 + u64::from(offset),
                rkey: 6,
                dma_len: (n * self.pmtu.bytes())
                    .min(len.saturating_sub(offset))
                    .max(1),
            }),
            ..ExtRepr::default()
        };
        let pkt = self.ep.frame(Opcode::RcReadRequest, from, true, ext, &[]);
        self.tx.push(pkt);
        self.count_send(from);
    }

    /// Packet `k` of a WRITE or SEND.
    fn segment_packet(&self, o: &Outstanding, k: u32, ack_req: bool) -> Pkt {
        let (len, write) = match o.work {
            Work::Write(len) => (len, true),
            Work::Send(len) | Work::Read(len) => (len, false),
        };
        let psn = o.psn.add(k);
        let opcode = match (write, o.span, k) {
            (true, 1, _) => Opcode::RcWriteOnly,
            (true, _, 0) => Opcode::RcWriteFirst,
            (true, s, k) if k + 1 == s => Opcode::RcWriteLast,
            (true, _, _) => Opcode::RcWriteMiddle,
            (false, 1, _) => Opcode::RcSendOnly,
            (false, _, 0) => Opcode::RcSendFirst,
            (false, s, k) if k + 1 == s => Opcode::RcSendLast,
            (false, _, _) => Opcode::RcSendMiddle,
        };
        let bytes = (len.saturating_sub(k * self.pmtu.bytes())).min(self.pmtu.bytes()) as usize;
        let ext = ExtRepr {
            reth: matches!(opcode, Opcode::RcWriteOnly | Opcode::RcWriteFirst).then_some(
                RethRepr {
                    virtual_address: 0x1000,
                    rkey: 5,
                    dma_len: len,
                },
            ),
            ..ExtRepr::default()
        };
        self.ep
            .frame(opcode, psn, ack_req, ext, &self.payload[..bytes])
    }

    fn count_send(&mut self, psn: Psn) {
        let len = self.tx.last().map_or(0, Pkt::len);
        if let Some(bps) = self.send_rate() {
            let wire_ns = (len as u128 * 8 * 1_000_000_000 / u128::from(bps.max(1))) as u64;
            // A sender polled late (a coarse clock, a busy loop) may catch up on up to
            // `PACING_SLACK_NS` of its rate, so that polling granularity does not lower it.
            let from = self
                .next_send_ns
                .max(self.now.saturating_sub(PACING_SLACK_NS));
            self.next_send_ns = from + wire_ns;
        }
        if let Some(rp) = self.dcqcn.as_mut() {
            rp.on_sent(len, self.now);
        }
        self.stats.packets_sent += 1;
        if psn.is_before(self.high) {
            self.stats.retransmitted += 1;
        } else {
            self.high = psn.add(1);
        }
    }

    /// Handles a response frame.
    pub fn handle(&mut self, frame: &[u8], now: u64) {
        self.now = now;
        let Ok(c) = classify(frame, self.pmtu) else {
            return;
        };
        let Some(r) = c.roce() else { return };
        let psn = r.bth.psn;
        let op = r.bth.opcode;
        if op == Opcode::Cnp {
            self.stats.cnps += 1;
            if let Some(rp) = self.dcqcn.as_mut() {
                // Timers due before it first, for a caller that polls this QP late.
                rp.poll(now);
                rp.on_cnp(now);
            }
            return;
        }
        if op.is_read_response() && self.retransmit == Retransmit::Selective {
            self.selective_read_response(psn, now);
            return;
        }
        if op.is_read_response() {
            let Some(i) = self
                .out
                .iter()
                .position(|o| matches!(o.work, Work::Read(_)))
            else {
                return;
            };
            let o = self.out[i];
            let expected = o.psn.add(o.got);
            if psn == expected {
                // RC ordering: a response to this READ means every earlier WRITE was executed.
                for _ in 0..i {
                    self.complete_front();
                }
                let f = &mut self.out[0];
                f.got += 1;
                // What a selective-repeat requester kept beyond it follows.
                while f.beyond & 1 == 1 {
                    f.beyond >>= 1;
                    f.got += 1;
                }
                f.beyond >>= 1;
                self.last_progress = now;
                self.retrying = None;
                if self.out[0].got >= o.span {
                    self.complete_front();
                }
            } else if psn.is_after(expected) && self.retrying != Some(o.psn) {
                // A later response overtook the expected one: the completer retries the READ.
                self.stats.read_retries += 1;
                self.retrying = Some(o.psn);
                self.go_back_to(o.psn);
            }
            return;
        }
        let Some(aeth) = r.aeth else { return };
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                // Completes everything up to `psn`; an outstanding READ below it was passed.
                while let Some(o) = self.out.front().copied() {
                    let end = o.psn.add(o.span - 1);
                    if end.is_after(psn) {
                        break;
                    }
                    if let Work::Read(_) = o.work {
                        if o.got < o.span {
                            // An ACK beyond an unanswered READ: its responses were lost.
                            if self.retrying != Some(o.psn) {
                                self.stats.read_retries += 1;
                                self.retrying = Some(o.psn);
                                self.go_back_to(o.psn);
                            }
                            return;
                        }
                    }
                    self.complete_front();
                    self.last_progress = now;
                }
                // An ACK inside a multi-packet WRITE or SEND is progress too: it restarts the
                // retransmission timer (rxe's completer restarts it after every batch of
                // responses while anything is outstanding; here only ACKs that move do), so a
                // message longer than the timeout is not resent while it is acknowledged.
                if let Some(o) = self.out.front().copied() {
                    let d = psn.distance(o.psn);
                    let inside = d >= 0 && (d as u32) < o.span;
                    let moved = self.acked_within.is_none_or(|a| psn.is_after(a));
                    if inside && moved && !matches!(o.work, Work::Read(_)) {
                        self.acked_within = Some(psn);
                        self.last_progress = now;
                    }
                }
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                self.stats.naks += 1;
                // A NAK older than what an ACK already covered (overtaken on another path) asks
                // for nothing: rxe's completer drops a response below its PSN (check_psn).
                let front = self.out.front().map(|o| o.psn);
                let stale = match (front, self.acked_within) {
                    (None, _) => true,
                    (Some(f), _) if psn.is_before(f) => true,
                    (_, Some(a)) => !psn.is_after(a),
                    _ => false,
                };
                if stale {
                    return;
                }
                // Everything before the NAKed PSN arrived: rxe's completer takes the NAK as an
                // ACK of what precedes it (`comp.psn` moves to the NAKed PSN), which opens the
                // window for the retransmission.
                while let Some(o) = self.out.front().copied() {
                    if !o.psn.add(o.span - 1).is_before(psn) || matches!(o.work, Work::Read(_)) {
                        break;
                    }
                    self.complete_front();
                }
                if let Some(o) = self.out.front().copied() {
                    if psn.is_after(o.psn) && !matches!(o.work, Work::Read(_)) {
                        self.acked_within = Some(psn.sub(1));
                    }
                }
                self.last_progress = now;
                // Selective repeat resends the NAKed packet alone for WRITEs and READs, but
                // goes back N for a SEND (Mellanox's US11870590, claims 3 and 6: a SEND's
                // receive WQE is consumed in order).
                let send = self.out.iter().any(|o| {
                    let d = psn.distance(o.psn);
                    matches!(o.work, Work::Send(_)) && d >= 0 && (d as u32) < o.span
                });
                match self.retransmit {
                    Retransmit::Selective if !send => self.resend.push_back(psn),
                    _ => self.go_back_to(psn),
                }
            }
            _ => {}
        }
    }
}

/// What a responder saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Request packets accepted in order.
    pub accepted: u64,
    /// Packets dropped for being out of sequence (rxe's `out_of_seq_request`).
    pub out_of_sequence: u64,
    /// Duplicates (PSN below the expected one; rxe's `duplicate_request`).
    pub duplicates: u64,
    /// NAKs sent.
    pub naks: u64,
    /// ACKs sent.
    pub acks: u64,
    /// READ response packets sent.
    pub read_responses: u64,
    /// Request packets that arrived marked CE.
    pub ce_marked: u64,
    /// CNPs sent.
    pub cnps_sent: u64,
}

/// How a responder treats packets beyond the expected PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverMode {
    /// Go-Back-N (ConnectX-5, Soft-RoCE): drop them, NAK the expected PSN once.
    Gbn,
    /// Selective repeat (ConnectX-6 Dx/7 lossy mode, IRN): keep them within the window and
    /// place their data at once, NAK the expected PSN on the first one (once per expected PSN,
    /// and again at once when a filled hole leaves the next one open). Its requester resends
    /// the NAKed PSN alone (a SEND: from there on), and asks again at once, with a READ
    /// request, for READ responses missing before one that came.
    Sr,
    /// Keep them and never NAK.
    Ideal,
}

impl ReceiverMode {
    /// What a declared loss releases on a downlink towards such an RNIC: one packet to make a
    /// Go-Back-N responder NAK (the rest follows the retransmission), the whole run for
    /// selective repeat (which keeps it, and resends only the gap).
    pub fn loss_recovery(self) -> sprayswitch::reorder::LossRecovery {
        use sprayswitch::reorder::LossRecovery;
        if self == ReceiverMode::Sr {
            LossRecovery::ReleaseRun
        } else {
            LossRecovery::NakFirst
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Stored {
    read_len: Option<u32>,
    ends_message: bool,
    ack_req: bool,
}

/// An RC responder (Go-Back-N by default).
pub struct Responder {
    ep: Endpoint,
    pmtu: Pmtu,
    epsn: Psn,
    nak_sent: bool,
    msn: u32,
    since_ack: u32,
    ack_every: u32,
    mode: ReceiverMode,
    ooo: std::collections::BTreeMap<u32, Stored>,
    tx: Vec<Pkt>,
    payload: Vec<u8>,
    /// DCQCN's notification point, when the QP runs it.
    np: Option<NotificationPoint>,
    /// PSNs in the order their data was placed, when recorded.
    placed: Option<Vec<u32>>,
    /// Counters.
    pub stats: ResponderStats,
}

impl Responder {
    /// A responder expecting `psn` first, ACKing every `ack_every` packets (and AckReq).
    pub fn new(ep: Endpoint, psn: Psn, pmtu: Pmtu, ack_every: u32) -> Responder {
        Responder {
            ep,
            pmtu,
            epsn: psn,
            nak_sent: false,
            msn: 0,
            since_ack: 0,
            ack_every: ack_every.max(1),
            mode: ReceiverMode::Gbn,
            ooo: std::collections::BTreeMap::new(),
            tx: Vec::with_capacity(64),
            payload: vec![0x7E; pmtu.bytes() as usize],
            np: None,
            placed: None,
            stats: ResponderStats::default(),
        }
    }

    fn ack(&mut self, syndrome: Syndrome, psn: Psn) {
        let ext = ExtRepr {
            aeth: Some(AethRepr {
                syndrome,
                msn: self.msn,
            }),
            ..ExtRepr::default()
        };
        let pkt = self.ep.frame(Opcode::RcAcknowledge, psn, false, ext, &[]);
        self.tx.push(pkt);
    }

    fn read_responses(&mut self, psn: Psn, len: u32) {
        let span = self.pmtu.read_span(len);
        for k in 0..span {
            let opcode = match (span, k) {
                (1, _) => Opcode::RcReadResponseOnly,
                (_, 0) => Opcode::RcReadResponseFirst,
                (s, k) if k + 1 == s => Opcode::RcReadResponseLast,
                _ => Opcode::RcReadResponseMiddle,
            };
            let aeth = (opcode != Opcode::RcReadResponseMiddle).then_some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: self.msn,
            });
            let bytes = (len.saturating_sub(k * self.pmtu.bytes())).min(self.pmtu.bytes()) as usize;
            let ext = ExtRepr {
                aeth,
                ..ExtRepr::default()
            };
            let payload = &self.payload[..bytes];
            let pkt = self.ep.frame(opcode, psn.add(k), false, ext, payload);
            self.tx.push(pkt);
            self.stats.read_responses += 1;
        }
    }

    /// Answers CE-marked requests with CNPs, at most one per `interval_ns` (`None`: never).
    pub fn set_cnp_interval(&mut self, interval_ns: Option<u64>) {
        self.np = interval_ns.map(NotificationPoint::new);
    }

    /// Records the PSNs whose data is placed, in the order it is ([`Responder::placed`]).
    pub fn record_placement(&mut self) {
        self.placed = Some(Vec::new());
    }

    /// The PSNs whose data was placed, in placement order, when recorded: a Go-Back-N or
    /// in-order receiver places in PSN order; a selective-repeat one places what it keeps out
    /// of order as it arrives (ConnectX's out-of-order data placement, IRN), so a later
    /// WRITE's data can be in memory before an earlier one's.
    pub fn placed(&self) -> Option<&[u32]> {
        self.placed.as_deref()
    }

    fn place(&mut self, psn: Psn) {
        if let Some(p) = self.placed.as_mut() {
            p.push(psn.value());
        }
    }

    /// Sets how packets beyond the expected PSN are treated.
    pub fn set_mode(&mut self, mode: ReceiverMode) {
        self.mode = mode;
    }

    /// Executes the request at `epsn` and advances past it.
    fn accept(&mut self, psn: Psn, st: Stored) {
        self.stats.accepted += 1;
        match st.read_len {
            Some(len) => {
                self.msn += 1;
                self.epsn = self.epsn.add(self.pmtu.read_span(len));
                self.since_ack = 0;
                self.read_responses(psn, len);
            }
            None => {
                self.epsn = self.epsn.add(1);
                if st.ends_message {
                    self.msn += 1;
                }
                self.since_ack += 1;
                if st.ack_req || self.since_ack >= self.ack_every {
                    self.since_ack = 0;
                    self.stats.acks += 1;
                    self.ack(Syndrome::Ack { credits: 31 }, self.epsn.sub(1));
                }
            }
        }
    }

    /// Handles a request frame; replies go out through `port`.
    pub fn handle(&mut self, frame: &[u8], now: u64, port: &mut dyn Port) {
        let Ok(c) = classify(frame, self.pmtu) else {
            return;
        };
        let Some(r) = c.roce() else { return };
        if codepoint(frame) == Some(Codepoint::Ce) {
            self.stats.ce_marked += 1;
            if self.np.as_mut().is_some_and(|np| np.on_ce(now)) {
                self.stats.cnps_sent += 1;
                self.tx.push(self.ep.cnp_frame());
            }
        }
        let psn = r.bth.psn;
        let op = r.bth.opcode;
        let st = Stored {
            read_len: (op == Opcode::RcReadRequest).then(|| r.reth.map_or(0, |x| x.dma_len)),
            ends_message: matches!(
                op.segment(),
                sprayswitch::wire::Segment::Last | sprayswitch::wire::Segment::Only
            ),
            ack_req: r.bth.ack_req,
        };
        let d = psn.distance(self.epsn);
        if d == 0 {
            self.nak_sent = false;
            self.place(psn);
            self.accept(psn, st);
            // Selective repeat and ideal receivers kept what came early: take it now.
            while let Some(next) = self.ooo.remove(&self.epsn.value()) {
                let at = self.epsn;
                self.accept(at, next);
            }
            if self.mode == ReceiverMode::Sr && !self.ooo.is_empty() {
                // The hole filled and the expected PSN moved to the next one, with packets
                // kept beyond it: NAK it at once (as IRN's receiver does, ConWeave's ns-3
                // model; ConnectX is not documented here and is assumed to do the same).
                self.nak_sent = true;
                self.stats.naks += 1;
                let e = self.epsn;
                self.ack(Syndrome::Nak(NakCode::PsnSequenceError), e);
            }
        } else if d > 0 {
            self.stats.out_of_sequence += 1;
            if self.mode != ReceiverMode::Gbn && d < 4096 && !self.ooo.contains_key(&psn.value()) {
                // Kept, and its data placed now (out-of-order placement).
                self.place(psn);
                self.ooo.insert(psn.value(), st);
            }
            if self.mode != ReceiverMode::Ideal && !self.nak_sent {
                self.nak_sent = true;
                self.stats.naks += 1;
                let e = self.epsn;
                self.ack(Syndrome::Nak(NakCode::PsnSequenceError), e);
            }
        } else {
            self.stats.duplicates += 1;
            if let Some(len) = st.read_len {
                self.read_responses(psn, len);
            } else {
                self.stats.acks += 1;
                let last = self.epsn.sub(1);
                self.ack(Syndrome::Ack { credits: 31 }, last);
            }
        }
        while !self.tx.is_empty() {
            if port.tx_burst(now, &mut self.tx) == 0 {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::port::mem;
    use std::net::Ipv4Addr;

    fn endpoints() -> (Endpoint, Endpoint) {
        let a = Endpoint {
            mac: [2, 0, 0, 0, 0, 1],
            gw_mac: [2, 0, 0, 0, 0, 9],
            ip: IpAddr::V4(Ipv4Addr::new(10, 1, 1, 2)),
            peer_ip: IpAddr::V4(Ipv4Addr::new(10, 2, 1, 2)),
            peer_qpn: 0x22,
            sport: 49152,
        };
        let b = Endpoint {
            mac: [2, 0, 0, 0, 0, 2],
            ip: a.peer_ip,
            peer_ip: a.ip,
            peer_qpn: 0x11,
            ..a
        };
        (a, b)
    }

    /// Sends 4 single-packet WRITEs, delivers them as 0, 1, 3, 2 (one reorder), and runs the
    /// exchange to completion. Returns (requester, responder) stats.
    fn one_reorder(mode: ReceiverMode) -> (RequesterStats, ResponderStats) {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 64);
        let mut req = Requester::new(ea, Psn::new(0xFF_FFFE), Pmtu::DEFAULT, 64, u64::MAX / 4);
        if mode == ReceiverMode::Sr {
            req.set_retransmit(Retransmit::Selective);
        }
        let mut resp = Responder::new(eb, Psn::new(0xFF_FFFE), Pmtu::DEFAULT, 1);
        resp.set_mode(mode);
        for _ in 0..4 {
            req.post(Work::Write(1024));
        }
        req.poll(1, &mut req_port);
        let mut sent = Vec::new();
        wire_a.rx_burst(0, &mut sent, 64);
        assert_eq!(sent.len(), 4);
        sent.swap(2, 3);
        for round in 0..10 {
            for p in sent.drain(..) {
                resp.handle(p.data(), 2, &mut resp_port);
            }
            // Replies one at a time, the requester acting on each at once (as an RNIC does).
            let mut back = Vec::new();
            wire_b.rx_burst(0, &mut back, 64);
            for p in back {
                req.handle(p.data(), 3);
                req.poll(4, &mut req_port);
            }
            req.poll(4, &mut req_port);
            wire_a.rx_burst(0, &mut sent, 64);
            if req.done() && sent.is_empty() {
                break;
            }
            assert!(round < 9, "did not finish");
        }
        (req.stats, resp.stats)
    }

    #[test]
    fn one_reorder_under_go_back_n_is_one_nak_and_a_go_back() {
        let (req, resp) = one_reorder(ReceiverMode::Gbn);
        assert_eq!((resp.naks, req.naks), (1, 1));
        assert_eq!(resp.out_of_sequence, 1, "PSN 3 dropped");
        // Go back to the NAKed PSN (2): 2 and 3 again; the original 2 had arrived meanwhile.
        assert_eq!(req.retransmitted, 2);
        assert_eq!(resp.duplicates, 1);
        assert_eq!(req.completed, 4);
        assert_eq!(req.packets_sent, 6);
    }

    #[test]
    fn one_reorder_under_selective_repeat_is_a_spurious_nak() {
        let (req, resp) = one_reorder(ReceiverMode::Sr);
        assert_eq!(resp.naks, 1, "NAKed at once although nothing was lost");
        assert_eq!(resp.accepted, 4, "3 was kept, not dropped");
        assert_eq!(
            req.retransmitted, 1,
            "only the NAKed packet again: a needless retransmission"
        );
        assert_eq!(resp.duplicates, 1);
        assert_eq!(req.completed, 4);
    }

    /// A WRITE of 64 packets, delivered 8 at a time, one virtual ms apart, to a responder
    /// that ACKs every 8: the transfer lasts longer than the requester's 3 ms timeout, yet
    /// every ACK restarts the timer, so nothing is resent; after the responder stops
    /// answering, the timeout resends from the first PSN not acknowledged (as rxe's
    /// req_retry does), not from the WRITE's start.
    #[test]
    fn acks_inside_a_long_write_restart_the_timer_and_a_timeout_resends_from_the_first_unacked() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 128);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 128);
        let mut req = Requester::new(ea, Psn::new(100), Pmtu::DEFAULT, 1000, 3_000_000);
        let mut resp = Responder::new(eb, Psn::new(100), Pmtu::DEFAULT, 8);
        req.post(Work::Write(64 * 1024));
        req.poll(1, &mut req_port);
        req.poll(2, &mut req_port);
        let mut sent = Vec::new();
        wire_a.rx_burst(0, &mut sent, 128);
        assert_eq!(sent.len(), 64);
        let mut back = Vec::new();
        // 5 ms for the first 40 packets: longer than the timeout.
        for (k, chunk) in sent.chunks(8).take(5).enumerate() {
            let now = 1_000_000 * (k as u64 + 1);
            for p in chunk {
                resp.handle(p.data(), now, &mut resp_port);
            }
            wire_b.rx_burst(0, &mut back, 128);
            for p in back.drain(..) {
                req.handle(p.data(), now);
            }
            req.poll(now, &mut req_port);
        }
        assert_eq!((req.stats.timeouts, req.stats.retransmitted), (0, 0));
        // Silence: the timeout resends the 24 packets after the last ACK (PSN 139).
        req.poll(9_000_000, &mut req_port);
        let mut again = Vec::new();
        wire_a.rx_burst(0, &mut again, 128);
        assert_eq!(req.stats.timeouts, 1);
        assert_eq!(again.len(), 24, "from PSN 140 on");
        let first = sprayswitch::wire::classify(again[0].data(), Pmtu::DEFAULT).unwrap();
        assert_eq!(first.roce().unwrap().bth.psn, Psn::new(140));
    }

    /// A QP idle for longer than its timeout (a long-lived QP between messages) does not
    /// time out on its next message: the timer starts when something is outstanding again.
    #[test]
    fn an_idle_qp_does_not_time_out_on_its_next_message() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 64);
        let mut req = Requester::new(ea, Psn::new(7), Pmtu::DEFAULT, 64, 1_000_000);
        let mut resp = Responder::new(eb, Psn::new(7), Pmtu::DEFAULT, 1);
        let mut pkts = Vec::new();
        for (k, start) in [1_000u64, 10_000_000].into_iter().enumerate() {
            req.post(Work::Write(1024));
            req.poll(start, &mut req_port);
            // Polled again before the ACK is back, as a NIC's scheduler does.
            req.poll(start + 5_000, &mut req_port);
            wire_a.rx_burst(0, &mut pkts, 64);
            assert_eq!(pkts.len(), 1, "message {k}: sent once");
            for p in pkts.drain(..) {
                resp.handle(p.data(), start + 10_000, &mut resp_port);
            }
            wire_b.rx_burst(0, &mut pkts, 64);
            for p in pkts.drain(..) {
                req.handle(p.data(), start + 20_000);
            }
            req.poll(start + 20_000, &mut req_port);
            assert!(req.done(), "message {k}");
        }
        assert_eq!((req.stats.timeouts, req.stats.retransmitted), (0, 0));
    }

    /// A NAK overtaken by a later ACK (ACKs and NAKs of a sprayed return path are not ordered)
    /// asks for nothing: only a NAK beyond what was acknowledged makes the requester go back.
    #[test]
    fn a_nak_older_than_an_ack_is_ignored() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let start = Psn::new(0xFF_FFFC);
        let mut req = Requester::new(ea, start, Pmtu::DEFAULT, 64, u64::MAX / 4);
        req.post(Work::Write(8 * 1024));
        req.poll(1, &mut req_port);
        let mut sent = Vec::new();
        wire_a.rx_burst(0, &mut sent, 64);
        assert_eq!(sent.len(), 8);
        let reply = |syndrome: Syndrome, k: u32| {
            let ext = ExtRepr {
                aeth: Some(AethRepr { syndrome, msn: 0 }),
                ..ExtRepr::default()
            };
            eb.frame(Opcode::RcAcknowledge, start.add(k), false, ext, &[])
        };
        let nak = Syndrome::Nak(NakCode::PsnSequenceError);
        req.handle(reply(Syndrome::Ack { credits: 31 }, 5).data(), 10);
        req.handle(reply(nak, 3).data(), 11);
        req.poll(12, &mut req_port);
        assert_eq!(req.stats.retransmitted, 0, "PSN 3 was acknowledged already");
        req.handle(reply(nak, 6).data(), 13);
        req.poll(14, &mut req_port);
        sent.clear();
        wire_a.rx_burst(0, &mut sent, 64);
        assert_eq!(
            (req.stats.retransmitted, sent.len()),
            (2, 2),
            "6 and 7 again"
        );
    }

    /// rxe's requester checks its window per packet (`req.psn` against `comp.psn` +
    /// `RXE_MAX_UNACKED_PSNS`): a message longer than the window goes as ACKs open it, and the
    /// next message's first packets follow the last one's tail without waiting for its
    /// completion.
    #[test]
    fn the_window_is_counted_in_packets_and_the_next_message_follows_the_tail() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 256);
        let start = Psn::new(0xFF_FFF0);
        let reply = |syndrome: Syndrome, k: u32| {
            let ext = ExtRepr {
                aeth: Some(AethRepr { syndrome, msn: 0 }),
                ..ExtRepr::default()
            };
            eb.frame(Opcode::RcAcknowledge, start.add(k), false, ext, &[])
        };
        // A window of 16 (a poll sends at most 32 packets: the window, not that, stops it).
        let mut req = Requester::new(ea, start, Pmtu::DEFAULT, 16, u64::MAX / 4);
        req.post(Work::Write(40 * 1024));
        req.post(Work::Write(40 * 1024));
        let mut sent = Vec::new();
        let psns = |sent: &mut Vec<Pkt>, wire: &mut dyn Port| {
            wire.rx_burst(0, sent, 256);
            let v: Vec<(u32, bool)> = sent
                .iter()
                .map(|p| {
                    let c = classify(p.data(), Pmtu::DEFAULT).unwrap();
                    let b = c.roce().unwrap().bth;
                    (b.psn.forward_from(start), b.ack_req)
                })
                .collect();
            sent.clear();
            v
        };
        let asked =
            |v: &[(u32, bool)]| -> Vec<u32> { v.iter().filter(|p| p.1).map(|p| p.0).collect() };
        let only = |v: &[(u32, bool)]| -> Vec<u32> { v.iter().map(|p| p.0).collect() };
        req.poll(1, &mut req_port);
        let first = psns(&mut sent, &mut wire_a);
        assert_eq!(only(&first), (0..16).collect::<Vec<_>>(), "one window");
        assert_eq!(
            asked(&first),
            vec![7, 15],
            "an ACK asked for every half window"
        );
        req.poll(2, &mut req_port);
        assert!(
            psns(&mut sent, &mut wire_a).is_empty(),
            "the window is closed"
        );
        // ACKs up to PSN 35 (relative) open it to 51, past the first message's end (39): its
        // tail (AckReq on 39, its last) and the second message's first packets follow.
        req.handle(reply(Syndrome::Ack { credits: 31 }, 15).data(), 10);
        req.poll(11, &mut req_port);
        assert_eq!(
            only(&psns(&mut sent, &mut wire_a)),
            (16..32).collect::<Vec<_>>()
        );
        req.handle(reply(Syndrome::Ack { credits: 31 }, 35).data(), 20);
        req.poll(21, &mut req_port);
        let more = psns(&mut sent, &mut wire_a);
        assert_eq!(only(&more), (32..52).collect::<Vec<_>>());
        assert!(
            asked(&more).contains(&39),
            "the first message's last asks for an ACK"
        );
        assert_eq!(req.stats.completed, 0);
        // A sequence NAK at 44 acknowledges 40-43 (rxe's completer moves comp.psn to it): the
        // first message completes and the go-back from 44 may run to 44 + 16.
        let nak = Syndrome::Nak(NakCode::PsnSequenceError);
        req.handle(reply(nak, 44).data(), 30);
        req.poll(31, &mut req_port);
        assert_eq!(req.stats.completed, 1);
        assert_eq!(
            only(&psns(&mut sent, &mut wire_a)),
            (44..60).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_rate_spaces_transmissions() {
        let (ea, _) = endpoints();
        let (mut port, mut wire) = mem::link("a", "wire", 1024);
        let mut req = Requester::new(ea, Psn::new(0), Pmtu::DEFAULT, 1000, u64::MAX / 4);
        // About 1.1 KB frames at 88 Mbit/s: one every ~100 us.
        req.set_rate(Some(88_000_000));
        for _ in 0..100 {
            req.post(Work::Write(1024));
        }
        let mut got = Vec::new();
        for t in 0..=10u64 {
            req.poll(1 + t * 100_000, &mut port);
        }
        wire.rx_burst(0, &mut got, 1024);
        assert!(
            (10..=12).contains(&got.len()),
            "{} packets in 1 ms",
            got.len()
        );
        req.set_rate(None);
        for t in 0..5 {
            req.poll(2_000_000 + t, &mut port);
        }
        wire.rx_burst(0, &mut got, 1024);
        assert_eq!(got.len(), 100, "the window alone lets the rest go");
    }

    #[test]
    fn one_reorder_under_an_ideal_receiver_costs_nothing() {
        let (req, resp) = one_reorder(ReceiverMode::Ideal);
        assert_eq!((resp.naks, req.retransmitted, resp.duplicates), (0, 0, 0));
        assert_eq!(req.completed, 4);
    }

    #[test]
    fn a_ce_mark_comes_back_as_a_cnp_that_slows_the_requester() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 64);
        let line = 100_000_000_000;
        let mut req = Requester::new(ea, Psn::new(10), Pmtu::DEFAULT, 64, u64::MAX / 4);
        req.set_dcqcn(Some(DcqcnConfig::conweave(line)));
        let mut resp = Responder::new(eb, Psn::new(10), Pmtu::DEFAULT, 1);
        resp.set_cnp_interval(Some(50_000));
        for _ in 0..3 {
            req.post(Work::Write(1024));
        }
        for t in [1, 1_000, 2_000] {
            req.poll(t, &mut req_port);
        }
        let mut sent = Vec::new();
        wire_a.rx_burst(0, &mut sent, 64);
        assert_eq!(sent.len(), 3, "paced at line rate");
        for p in &mut sent {
            assert_eq!(
                codepoint(p.data()),
                Some(Codepoint::Ect0),
                "sent ECN-capable"
            );
            assert_eq!(
                sprayswitch::wire::ecn::mark_ce(p.data_mut()),
                sprayswitch::wire::ecn::Mark::Marked
            );
        }
        for p in &sent {
            resp.handle(p.data(), 3_000, &mut resp_port);
        }
        assert_eq!(
            (resp.stats.ce_marked, resp.stats.cnps_sent),
            (3, 1),
            "one per 50 us"
        );
        let mut back = Vec::new();
        wire_b.rx_burst(0, &mut back, 64);
        let cnps: Vec<_> = back
            .iter()
            .filter_map(|p| {
                let c = classify(p.data(), Pmtu::DEFAULT).ok()?;
                let r = c.roce()?;
                (r.bth.opcode == Opcode::Cnp).then_some((r.bth.dest_qp, codepoint(p.data())))
            })
            .collect();
        assert_eq!(cnps, vec![(0x11, Some(Codepoint::NotEct))]);
        for p in &back {
            req.handle(p.data(), 4_000);
        }
        assert_eq!(req.stats.cnps, 1);
        req.poll(4_000 + 4_000, &mut req_port);
        assert!(
            req.send_rate().unwrap() < line * 6 / 10,
            "{:?}",
            req.send_rate()
        );
    }

    /// The opcodes and PSNs (and, for a NAK, its PSN) of the frames a port got.
    fn seen(wire: &mut dyn Port) -> Vec<(Opcode, u32, Option<u32>)> {
        let mut got = Vec::new();
        wire.rx_burst(0, &mut got, 64);
        got.iter()
            .filter_map(|p| {
                let c = classify(p.data(), Pmtu::DEFAULT).ok()?;
                let r = c.roce()?;
                let reth = r.reth.map(|x| x.dma_len);
                Some((r.bth.opcode, r.bth.psn.value(), reth))
            })
            .collect()
    }

    #[test]
    fn selective_repeat_naks_the_next_hole_at_once_and_places_out_of_order() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 64);
        for mode in [ReceiverMode::Sr, ReceiverMode::Gbn] {
            let mut req = Requester::new(ea, Psn::new(0), Pmtu::DEFAULT, 64, u64::MAX / 4);
            let mut resp = Responder::new(eb, Psn::new(0), Pmtu::DEFAULT, 64);
            resp.set_mode(mode);
            resp.record_placement();
            for _ in 0..5 {
                req.post(Work::Write(1024));
            }
            req.poll(1, &mut req_port);
            let mut sent = Vec::new();
            wire_a.rx_burst(0, &mut sent, 64);
            // 0, 2, 4, then 1 (3 still on its way), then 3.
            for k in [0, 2, 4, 1, 3] {
                resp.handle(sent[k].data(), 2, &mut resp_port);
            }
            let mut back = Vec::new();
            wire_b.rx_burst(0, &mut back, 64);
            let naks: Vec<u32> = back
                .iter()
                .filter_map(|p| {
                    let c = classify(p.data(), Pmtu::DEFAULT).ok()?;
                    let r = c.roce()?;
                    let nak = matches!(r.aeth?.syndrome, Syndrome::Nak(_));
                    nak.then_some(r.bth.psn.value())
                })
                .collect();
            match mode {
                ReceiverMode::Sr => {
                    // NAK 1 on 2's arrival; when 1 fills, 3 is the hole, and 4 is kept: NAK 3.
                    assert_eq!(resp.stats.naks, 2);
                    assert_eq!(naks, vec![1, 3]);
                    assert_eq!(resp.placed(), Some(&[0, 2, 4, 1, 3][..]));
                }
                _ => {
                    // Go-Back-N drops 2, 4 and 3 (NAKing 1, then 2) and places in PSN order.
                    assert_eq!(naks, vec![1, 2]);
                    assert_eq!(resp.placed(), Some(&[0, 1][..]));
                }
            }
        }
    }

    #[test]
    fn a_selective_repeat_requester_asks_again_for_a_missing_read_response_at_once() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 64);
        let mut req = Requester::new(ea, Psn::new(10), Pmtu::DEFAULT, 64, u64::MAX / 4);
        req.set_retransmit(Retransmit::Selective);
        let mut resp = Responder::new(eb, Psn::new(10), Pmtu::DEFAULT, 8);
        req.post(Work::Read(4 * 1024));
        req.poll(1, &mut req_port);
        let mut sent = Vec::new();
        wire_a.rx_burst(0, &mut sent, 64);
        resp.handle(sent[0].data(), 2, &mut resp_port);
        let mut responses = Vec::new();
        wire_b.rx_burst(0, &mut responses, 64);
        assert_eq!(responses.len(), 4);
        // Responses 10, 12, 13 come; 11 is late.
        for k in [0, 2, 3] {
            req.handle(responses[k].data(), 3);
        }
        req.poll(4, &mut req_port);
        // One READ request for 11 alone, one path MTU long.
        assert_eq!(
            seen(&mut wire_a),
            vec![(Opcode::RcReadRequest, 11, Some(1024))]
        );
        assert_eq!((req.stats.read_retries, req.stats.retransmitted), (1, 1));
        // The late original completes the READ with what was kept.
        req.handle(responses[1].data(), 5);
        assert!(req.done());
        assert_eq!(req.stats.completed, 1);
    }

    #[test]
    fn a_selective_repeat_requester_goes_back_n_for_a_send() {
        let (ea, eb) = endpoints();
        let (mut req_port, mut wire_a) = mem::link("a", "wire-a", 64);
        let (mut resp_port, mut wire_b) = mem::link("b", "wire-b", 64);
        let mut req = Requester::new(ea, Psn::new(0), Pmtu::DEFAULT, 64, u64::MAX / 4);
        req.set_retransmit(Retransmit::Selective);
        let mut resp = Responder::new(eb, Psn::new(0), Pmtu::DEFAULT, 64);
        resp.set_mode(ReceiverMode::Sr);
        req.post(Work::Send(4 * 1024));
        req.poll(1, &mut req_port);
        let mut sent = Vec::new();
        wire_a.rx_burst(0, &mut sent, 64);
        resp.handle(sent[0].data(), 2, &mut resp_port);
        resp.handle(sent[2].data(), 2, &mut resp_port);
        let mut back = Vec::new();
        wire_b.rx_burst(0, &mut back, 64);
        for p in &back {
            req.handle(p.data(), 3);
        }
        req.poll(4, &mut req_port);
        let again: Vec<u32> = seen(&mut wire_a).iter().map(|(_, psn, _)| *psn).collect();
        assert_eq!(again, vec![1, 2, 3], "from the NAKed PSN on");
    }
}
