//! An RNIC model of one RC or UC queue pair that follows the Linux Soft-RoCE driver (rxe,
//! `drivers/infiniband/sw/rxe`) state machine by state machine, to serve as an oracle for the
//! switch's reorder engine that is independent of the engine's own algorithm.
//!
//! What it is: a whole QP (requester, completer and responder, as rxe runs them) that builds and
//! parses real RoCEv2 frames (ICRC included) and is driven with explicit time:
//! [`Qp::post`] and [`Qp::post_recv`] queue work, [`Qp::handle`] takes any frame addressed to the
//! QP, [`Qp::poll`] fires due timers and returns the frames the QP sends, [`Qp::next_timer_ns`]
//! says when `poll` next has something to do. It never reads a clock.
//!
//! Where each part lives in rxe (function names of the driver, as of Linux 6.x):
//!
//! - `req.rs`: `rxe_req.c` — `rxe_requester` (work queue walking, `next_opcode_rc/uc`, the
//!   `RXE_MAX_UNACKED_PSNS` window, `check_init_depth` for READ/atomic/ATOMIC WRITE against
//!   `max_rd_atomic`, AckReq every `RXE_MAX_PKT_PER_ACK` packets, `update_wqe_psn`,
//!   `update_state` arming the retransmit timer) and `req_retry` (rewind to `comp.psn`; a
//!   partly answered READ restarts at its first missing response).
//! - `comp.rs`: `rxe_comp.c` — `rxe_completer` with `get_wqe`, `check_psn`, `check_ack`,
//!   `do_read`, `do_atomic`, `complete_ack`, `complete_wqe`, `COMPST_ERROR_RETRY`,
//!   `COMPST_RNR_RETRY`, `reset_retry_timer`, `retransmit_timer`, `rnr_nak_timer`.
//! - `resp.rs`: `rxe_resp.c` — `rxe_receiver` with `check_psn`, `check_op_seq`,
//!   `check_resource`, `rxe_resp_check_length`, `check_rkey` (length part), `execute`,
//!   `read_reply`, `atomic_reply`, `atomic_write_reply`, `process_flush`, `acknowledge`,
//!   `duplicate_request`, `do_class_ac_error`, `do_class_d1e_error`.
//! - `mod.rs`: `rxe_recv.c` (`rxe_rcv`, `hdr_check`: what is dropped before the state
//!   machines, and where `rcvd_pkts` counts) and `rxe_hw_counters.c` (counter names).
//!
//! The [`Device`] chooses the responder: rxe's Go-Back-N, or a ConnectX-6/7 style selective
//! repeat responder ([`ResponderKind::SelectiveRepeat`]); the requester and completer are always
//! rxe's. What is not modelled, and why, is listed on [`Qp`].
//!
//! What it is not: a performance model. Packets are processed the instant they are handed in;
//! kernel jiffies, softirq batching and `RXE_INFLIGHT_SKBS_PER_QP_HIGH` are left out.

#![warn(missing_docs)]

use std::collections::{BTreeMap, VecDeque};

use sprayswitch::pkt::Pkt;
use sprayswitch::wire::{
    classify, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, ExtRepr, FethRepr, IpRepr,
    Opcode, Pmtu, Psn, RethRepr, RoceFrameRepr, Syndrome,
};

pub use crate::rnic::Endpoint;

mod comp;
mod req;
mod resp;
#[cfg(test)]
mod tests;

/// rxe's `RXE_MAX_UNACKED_PSNS`: the requester sends no new packet while its next PSN is more
/// than this far past the oldest unacknowledged one (`rxe_requester`).
pub const RXE_MAX_UNACKED_PSNS: u32 = 128;

/// rxe's `RXE_MAX_PKT_PER_ACK`: without a message end, AckReq is set once this many packets
/// (plus one) went without it (`init_req_packet`: `noack_pkts++ > RXE_MAX_PKT_PER_ACK`).
pub const RXE_MAX_PKT_PER_ACK: u32 = 64;

/// rxe's largest message (`RXE_MAX_MSG_SIZE`, 2 GiB); longer work requests are refused.
pub const RXE_MAX_MSG_SIZE: u32 = 1 << 31;

/// The RNR NAK timer for each 5-bit code, in microseconds (`rnrnak_usec` in `rxe_comp.c`,
/// including its value 61410 for code 25, where IBTA says 61.44 ms).
pub const RNR_TIMER_US: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_410, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The RNR NAK timer of a 5-bit code (bits above 5 are ignored), in nanoseconds.
pub const fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_US[(code & 0x1F) as usize] * 1_000
}

/// The smallest RNR timer code whose wait is at least `ns` (code 0, 655.36 ms, the longest,
/// when none is).
pub fn rnr_timer_code(ns: u64) -> u8 {
    (1u8..32)
        .filter(|&c| rnr_timer_ns(c) >= ns)
        .min_by_key(|&c| rnr_timer_ns(c))
        .unwrap_or(0)
}

/// The local ACK timeout of the IB `timeout` attribute: 4.096 µs × 2^`timeout` in nanoseconds
/// (`rxe_qp_from_attr`), 0 (no retransmit timer) for `timeout` 0. Values above 31 count as 31.
pub const fn ib_timeout_ns(timeout: u8) -> u64 {
    if timeout == 0 {
        0
    } else {
        let t = if timeout > 31 { 31 } else { timeout };
        4_096u64 << t
    }
}

/// The transport service of the QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected: ACKs, NAKs, retransmission, READ and atomics.
    Rc,
    /// Unreliable Connected: SEND and WRITE only, no ACKs, a gap loses the message.
    Uc,
}

/// How the responder treats a request packet beyond the expected PSN (ePSN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponderKind {
    /// rxe and ConnectX-5 default mode (`rxe_resp.c` `check_psn`): drop it; NAK (PSN sequence
    /// error, carrying ePSN) the first one only, until ePSN arrives.
    GoBackN,
    /// ConnectX-6 Dx / ConnectX-7 lossy mode ("selective repeat"), as modelled here: a packet up
    /// to [`Device::sr_window_psns`] ahead of ePSN is kept and executed once the gap before it
    /// fills, in PSN order; the first such packet is answered at once with a PSN sequence error
    /// NAK for ePSN (once per ePSN), which under pure reordering is spurious and makes the (rxe)
    /// requester go back and resend. A kept packet that arrives again counts as a duplicate.
    /// Not modelled: ConnectX's own ACK coalescing, NAK pacing, out-of-order READ responses and
    /// its requester.
    SelectiveRepeat,
}

/// The RNIC whose limits and responder the QP takes. The requester and completer are rxe's for
/// every device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Device {
    /// A name for reports.
    pub name: &'static str,
    /// Largest READ/atomic depth it allows (`max_qp_rd_atom`; initiator depth and responder
    /// resources are clamped to it): rxe 128 (`RXE_MAX_QP_RD_ATOM`), ConnectX 16.
    pub max_rd_atomic: u32,
    /// How its responder treats packets beyond ePSN.
    pub responder: ResponderKind,
    /// Largest distance of the requester's next PSN past the oldest unacknowledged one:
    /// [`RXE_MAX_UNACKED_PSNS`] for rxe. ConnectX publishes no such limit (its send queue bounds
    /// it); the model then allows the IBTA maximum, 2^23 - 1.
    pub max_unacked_psns: u32,
    /// For [`ResponderKind::SelectiveRepeat`]: how far ahead of ePSN a packet is still kept (an
    /// assumption of the model; ConnectX does not publish its bitmap size).
    pub sr_window_psns: u32,
}

impl Device {
    /// Soft-RoCE.
    pub const RXE: Device = Device {
        name: "rxe",
        max_rd_atomic: 128,
        responder: ResponderKind::GoBackN,
        max_unacked_psns: RXE_MAX_UNACKED_PSNS,
        sr_window_psns: 0,
    };
    /// ConnectX-5 in its default (Go-Back-N) mode.
    pub const CONNECTX5: Device = Device {
        name: "ConnectX-5",
        max_rd_atomic: 16,
        responder: ResponderKind::GoBackN,
        max_unacked_psns: Psn::HALF - 1,
        sr_window_psns: 0,
    };
    /// ConnectX-6 Dx / ConnectX-7 in lossy (selective repeat) mode.
    pub const CONNECTX6: Device = Device {
        name: "ConnectX-6 Dx",
        max_rd_atomic: 16,
        responder: ResponderKind::SelectiveRepeat,
        max_unacked_psns: Psn::HALF - 1,
        sr_window_psns: 2048,
    };
}

/// The attributes of one QP, as `ibv_modify_qp` would set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpConfig {
    /// RC or UC.
    pub transport: Transport,
    /// Path MTU.
    pub pmtu: Pmtu,
    /// Initiator depth: READ/atomic/ATOMIC WRITE requests outstanding at once. Rounded up to a
    /// power of two and clamped to the device, as `rxe_qp_from_attr` and `rxe_qp_chk_attr` do.
    /// Keep it at most the peer's `max_dest_rd_atomic` (the RDMA CM negotiates the minimum):
    /// beyond that the peer recycles resources that a retried READ may still need.
    pub max_rd_atomic: u32,
    /// Responder resources: READ/atomic/FLUSH/ATOMIC WRITE operations the responder remembers
    /// for replay. Rounded up to a power of two and clamped to the device.
    pub max_dest_rd_atomic: u32,
    /// Transport retries after a timeout or NAK; rxe treats 7 as "retry forever"
    /// (`if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--`).
    pub retry_cnt: u8,
    /// RNR retries; 7 is "retry forever".
    pub rnr_retry: u8,
    /// Local ACK timeout in ns (see [`ib_timeout_ns`]); 0: no retransmit timer.
    pub timeout_ns: u64,
    /// The RNR timer this QP's responder asks for in its RNR NAKs, in ns; sent as the smallest
    /// IB code with at least this wait ([`rnr_timer_code`]).
    pub min_rnr_timer_ns: u64,
    /// The RNIC.
    pub device: Device,
    /// Pace request packets to this many bits per second (open loop; not an rxe feature, for
    /// load tests). `None`: as fast as the window allows.
    pub rate_bps: Option<u64>,
}

impl QpConfig {
    /// An RC QP on `device` with the usual perftest attributes: PMTU 1024, the device's full
    /// READ depth both ways, retry_cnt 7, rnr_retry 7, timeout 14 (67 ms), min_rnr_timer 12
    /// (0.64 ms).
    pub fn rc(device: Device) -> QpConfig {
        QpConfig {
            transport: Transport::Rc,
            pmtu: Pmtu::DEFAULT,
            max_rd_atomic: device.max_rd_atomic,
            max_dest_rd_atomic: device.max_rd_atomic,
            retry_cnt: 7,
            rnr_retry: 7,
            timeout_ns: ib_timeout_ns(14),
            min_rnr_timer_ns: rnr_timer_ns(12),
            device,
            rate_bps: None,
        }
    }

    /// A UC QP on `device`, otherwise as [`QpConfig::rc`].
    pub fn uc(device: Device) -> QpConfig {
        QpConfig {
            transport: Transport::Uc,
            ..QpConfig::rc(device)
        }
    }
}

/// A work request for the send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// RDMA WRITE of `len` bytes (RC, UC).
    Write {
        /// Bytes.
        len: u32,
    },
    /// RDMA WRITE with immediate (RC, UC); consumes a receive WQE at the responder.
    WriteImm {
        /// Bytes.
        len: u32,
    },
    /// SEND (RC, UC); consumes a receive WQE at the responder.
    Send {
        /// Bytes.
        len: u32,
    },
    /// RDMA READ of `len` bytes (RC): `max(1, ceil(len / pmtu))` PSNs.
    Read {
        /// Bytes.
        len: u32,
    },
    /// Atomic compare and swap (RC; compare 0, swap 1).
    CompareSwap,
    /// Atomic fetch and add (RC; add 1).
    FetchAdd,
    /// FLUSH (RC; global visibility, range of length 0). rxe answers it with a zero-length
    /// RDMA READ RESPONSE ONLY.
    Flush,
    /// ATOMIC WRITE of 8 bytes (RC). rxe answers it with a zero-length RDMA READ RESPONSE ONLY.
    AtomicWrite,
}

impl Verb {
    /// The bytes the work request moves (8 for atomics and ATOMIC WRITE, 0 for FLUSH).
    pub const fn len(self) -> u32 {
        match self {
            Verb::Write { len }
            | Verb::WriteImm { len }
            | Verb::Send { len }
            | Verb::Read { len } => len,
            Verb::CompareSwap | Verb::FetchAdd | Verb::AtomicWrite => 8,
            Verb::Flush => 0,
        }
    }

    /// True when it moves no bytes (FLUSH, zero-length WRITE/SEND/READ).
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// rxe's `wr_opcode_mask` bits of the verb.
    const fn wr_mask(self) -> u32 {
        match self {
            Verb::Write { .. } | Verb::WriteImm { .. } => WR_WRITE,
            Verb::Send { .. } => WR_SEND,
            Verb::Read { .. } => WR_READ,
            Verb::CompareSwap | Verb::FetchAdd => WR_ATOMIC,
            Verb::Flush => WR_FLUSH,
            Verb::AtomicWrite => WR_ATOMIC_WRITE,
        }
    }
}

/// Why a QP went to the error state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpError {
    /// The transport retry count ran out (`IB_WC_RETRY_EXC_ERR`, `retry_exceeded_err`).
    RetryExceeded,
    /// The RNR retry count ran out (`IB_WC_RNR_RETRY_EXC_ERR`, `retry_rnr_exceeded_err`).
    RnrRetryExceeded,
    /// The peer NAKed with "invalid request" (`IB_WC_REM_INV_REQ_ERR`).
    RemoteInvalidRequest,
    /// The peer NAKed with "remote access error" (`IB_WC_REM_ACCESS_ERR`).
    RemoteAccess,
    /// The peer NAKed with "remote operational error" or a reserved code (`IB_WC_REM_OP_ERR`).
    RemoteOperational,
    /// The completer's `check_ack` found a response out of its opcode sequence (a MIDDLE/LAST
    /// without a FIRST, a NAK syndrome in a READ response, a response opcode that does not fit
    /// the WQE). rxe posts such a completion with the status it happens to carry (often
    /// `IB_WC_SUCCESS`, under `WARN_ON_ONCE`) and moves the QP to the error state; the model
    /// counts it as failed.
    BadResponse,
    /// A READ response carried more bytes than the READ still expected (`IB_WC_LOC_PROT_ERR`).
    LocalProtection,
    /// The responder received an invalid request (class C: opcode sequence, length, too many
    /// READ/atomic), NAKed it with "invalid request" and moved the QP to the error state.
    InvalidRequest,
}

/// QP state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Ready to send (and receive).
    Rts,
    /// In the error state: nothing is sent any more, posted work completes in error.
    Error(QpError),
}

/// Counters. The first group has rxe's names (`rxe_hw_counters.c`) and counts exactly where rxe
/// calls `rxe_counter_inc`; the second group is the model's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RxeCounters {
    /// `sent_pkts`: every frame sent (requests, retransmissions, ACKs, NAKs, READ responses).
    pub sent_pkts: u64,
    /// `rcvd_pkts`: frames that passed `rxe_rcv`'s header, address, key and ICRC checks.
    pub rcvd_pkts: u64,
    /// `duplicate_request`: request packets with a PSN before ePSN (RC responder).
    pub duplicate_request: u64,
    /// `out_of_seq_request`: PSN sequence error NAKs the responder sent, one per episode; rxe
    /// increments it only for the packet it NAKs, not for the packets it drops after.
    pub out_of_seq_request: u64,
    /// `rcvd_rnr_err`: RNR NAKs the completer took.
    pub rcvd_rnr_err: u64,
    /// `send_rnr_err`: RNR NAKs the responder sent (no receive WQE for a SEND/WRITE with imm).
    pub send_rnr_err: u64,
    /// `rcvd_seq_err`: PSN sequence error NAKs the completer took whose PSN is past its
    /// expected response PSN (a NAK for exactly that PSN does not count, yet still retries).
    pub rcvd_seq_err: u64,
    /// `ack_deferred` (`RXE_CNT_SENDER_SCHED`): response packets queued to the completer.
    pub ack_deferred: u64,
    /// `retry_exceeded_err`: the transport retry count ran out.
    pub retry_exceeded_err: u64,
    /// `retry_rnr_exceeded_err`: the RNR retry count ran out.
    pub retry_rnr_exceeded_err: u64,
    /// `completer_retry_err`: retries the completer started (after a timeout, a sequence NAK or
    /// an implied NAK), counted only when something was outstanding to resend.
    pub completer_retry_err: u64,
    /// `send_err`: frames that could not be built (mixed address families in the endpoint).
    pub send_err: u64,
    /// `link_downed`: always 0 in the model.
    pub link_downed: u64,
    /// `rdma_sends`: SEND work requests the completer completed (also in error, as rxe's
    /// `do_complete` does; not those flushed when the QP is in the error state).
    pub rdma_sends: u64,
    /// `rdma_recvs`: receive WQEs completed successfully (SEND, WRITE with immediate).
    pub rdma_recvs: u64,

    /// Responses past the oldest WQE, a READ or atomic not fully answered (`check_psn` returns
    /// `COMPST_ERROR_RETRY`): an ACK, NAK or response that overtook that READ's responses.
    pub implied_naks: u64,
    /// READ/atomic responses above the expected response PSN inside the oldest WQE, dropped by
    /// `check_psn` (a READ RESPONSE that skipped a PSN). rxe recovers from these only through a
    /// later response past the READ (an implied NAK) or the retransmit timer.
    pub out_of_seq_responses: u64,
    /// Responses the completer ignored as old (PSN before the expected one, or no WQE waiting):
    /// normal when ACKs pass one another or after duplicates. Not in
    /// [`RxeCounters::transport_errors`].
    pub stale_responses: u64,
    /// Retries (`req_retry`) whose first WQE was a READ: it is asked again from its first
    /// missing response.
    pub read_retries: u64,
    /// Retransmit timer expiries that found a WQE waiting (`COMPST_ERROR_RETRY` on timeout).
    pub timeouts: u64,
    /// Request packets sent again (PSN before the highest PSN sent so far).
    pub retransmitted_pkts: u64,
    /// ACKNOWLEDGE packets with an ACK syndrome sent (re-ACKs of duplicates included).
    pub acks_sent: u64,
    /// ACKNOWLEDGE packets with a NAK or RNR NAK syndrome sent.
    pub naks_sent: u64,
    /// ATOMIC ACKNOWLEDGE packets sent.
    pub atomic_acks_sent: u64,
    /// RDMA READ RESPONSE packets sent (the zero-length ones answering FLUSH and ATOMIC WRITE
    /// included).
    pub read_responses_sent: u64,
    /// Request packets the responder dropped for being ahead of ePSN (Go-Back-N: the NAKed one
    /// and every later one; selective repeat: those beyond its window).
    pub out_of_seq_dropped: u64,
    /// Request packets the selective repeat responder kept ahead of ePSN.
    pub sr_buffered: u64,
    /// UC packets the responder dropped (a gap, a missing FIRST, an unfinished message, no
    /// receive WQE). rxe counts none of these.
    pub uc_dropped: u64,
    /// Frames that did not parse as RoCEv2 (truncated, unknown opcode, bad header).
    pub rx_malformed: u64,
    /// Frames for another IP address pair (`rxe_chk_dgid`, `check_addr`).
    pub rx_wrong_addr: u64,
    /// Frames for another QPN (`hdr_check`).
    pub rx_wrong_qpn: u64,
    /// Frames whose opcode's transport is not the QP's (`check_type_state`).
    pub rx_wrong_transport: u64,
    /// Frames with a P_Key other than the default (`check_keys`).
    pub rx_bad_pkey: u64,
    /// Frames with a wrong ICRC (`rxe_icrc_check`).
    pub rx_bad_icrc: u64,
    /// Frames received (and counted in `rcvd_pkts`) while the QP is in the error state.
    pub rx_in_error: u64,
    /// Work requests refused at post time (verb not valid for the transport, too long).
    pub post_rejected: u64,
}

impl RxeCounters {
    /// The sum that must be 0 when nothing is lost and nothing is reordered: sequence errors
    /// both ways (`out_of_seq_request`, `out_of_seq_dropped`, `rcvd_seq_err`,
    /// `out_of_seq_responses`, `sr_buffered`, `uc_dropped`), implied NAKs, duplicates
    /// (`duplicate_request`), retries (`completer_retry_err`, `read_retries`,
    /// `retry_exceeded_err`), timeouts and retransmitted packets. RNR events and stale responses
    /// are not transport errors and are left out.
    pub fn transport_errors(&self) -> u64 {
        self.out_of_seq_request
            + self.out_of_seq_dropped
            + self.duplicate_request
            + self.rcvd_seq_err
            + self.implied_naks
            + self.out_of_seq_responses
            + self.sr_buffered
            + self.uc_dropped
            + self.completer_retry_err
            + self.read_retries
            + self.retry_exceeded_err
            + self.timeouts
            + self.retransmitted_pkts
    }

    /// Adds every counter of `other` (to total the counters of many QPs).
    pub fn add(&mut self, other: &RxeCounters) {
        let RxeCounters {
            sent_pkts,
            rcvd_pkts,
            duplicate_request,
            out_of_seq_request,
            rcvd_rnr_err,
            send_rnr_err,
            rcvd_seq_err,
            ack_deferred,
            retry_exceeded_err,
            retry_rnr_exceeded_err,
            completer_retry_err,
            send_err,
            link_downed,
            rdma_sends,
            rdma_recvs,
            implied_naks,
            out_of_seq_responses,
            stale_responses,
            read_retries,
            timeouts,
            retransmitted_pkts,
            acks_sent,
            naks_sent,
            atomic_acks_sent,
            read_responses_sent,
            out_of_seq_dropped,
            sr_buffered,
            uc_dropped,
            rx_malformed,
            rx_wrong_addr,
            rx_wrong_qpn,
            rx_wrong_transport,
            rx_bad_pkey,
            rx_bad_icrc,
            rx_in_error,
            post_rejected,
        } = *other;
        self.sent_pkts += sent_pkts;
        self.rcvd_pkts += rcvd_pkts;
        self.duplicate_request += duplicate_request;
        self.out_of_seq_request += out_of_seq_request;
        self.rcvd_rnr_err += rcvd_rnr_err;
        self.send_rnr_err += send_rnr_err;
        self.rcvd_seq_err += rcvd_seq_err;
        self.ack_deferred += ack_deferred;
        self.retry_exceeded_err += retry_exceeded_err;
        self.retry_rnr_exceeded_err += retry_rnr_exceeded_err;
        self.completer_retry_err += completer_retry_err;
        self.send_err += send_err;
        self.link_downed += link_downed;
        self.rdma_sends += rdma_sends;
        self.rdma_recvs += rdma_recvs;
        self.implied_naks += implied_naks;
        self.out_of_seq_responses += out_of_seq_responses;
        self.stale_responses += stale_responses;
        self.read_retries += read_retries;
        self.timeouts += timeouts;
        self.retransmitted_pkts += retransmitted_pkts;
        self.acks_sent += acks_sent;
        self.naks_sent += naks_sent;
        self.atomic_acks_sent += atomic_acks_sent;
        self.read_responses_sent += read_responses_sent;
        self.out_of_seq_dropped += out_of_seq_dropped;
        self.sr_buffered += sr_buffered;
        self.uc_dropped += uc_dropped;
        self.rx_malformed += rx_malformed;
        self.rx_wrong_addr += rx_wrong_addr;
        self.rx_wrong_qpn += rx_wrong_qpn;
        self.rx_wrong_transport += rx_wrong_transport;
        self.rx_bad_pkey += rx_bad_pkey;
        self.rx_bad_icrc += rx_bad_icrc;
        self.rx_in_error += rx_in_error;
        self.post_rejected += post_rejected;
    }

    /// Frames dropped before the state machines (malformed, wrong address, QPN, transport,
    /// P_Key or ICRC).
    pub fn rx_dropped(&self) -> u64 {
        self.rx_malformed
            + self.rx_wrong_addr
            + self.rx_wrong_qpn
            + self.rx_wrong_transport
            + self.rx_bad_pkey
            + self.rx_bad_icrc
    }
}

// rxe's packet opcode masks (`rxe_opcode.h` `enum rxe_hdr_mask`), for the bits the state
// machines test.
const M_PAYLOAD: u32 = 1 << 0;
const M_REQ: u32 = 1 << 1;
const M_SEND: u32 = 1 << 2;
const M_WRITE: u32 = 1 << 3;
const M_READ: u32 = 1 << 4;
const M_ATOMIC: u32 = 1 << 5;
const M_FLUSH: u32 = 1 << 6;
const M_ATOMIC_WRITE: u32 = 1 << 7;
const M_RWR: u32 = 1 << 8;
const M_COMP: u32 = 1 << 9;
const M_START: u32 = 1 << 10;
const M_MIDDLE: u32 = 1 << 11;
const M_END: u32 = 1 << 12;
const M_RETH: u32 = 1 << 13;
const M_IMMDT: u32 = 1 << 14;

// rxe's work request masks (`enum rxe_wr_mask`). `WR_ATOMIC_OR_READ_MASK` is READ and the two
// classic atomics only: FLUSH and ATOMIC WRITE are not in it.
const WR_ATOMIC: u32 = 1 << 1;
const WR_SEND: u32 = 1 << 2;
const WR_READ: u32 = 1 << 3;
const WR_WRITE: u32 = 1 << 4;
const WR_FLUSH: u32 = 1 << 6;
const WR_ATOMIC_WRITE: u32 = 1 << 7;
const WR_ATOMIC_OR_READ: u32 = WR_ATOMIC | WR_READ;
const WR_WRITE_OR_SEND: u32 = WR_WRITE | WR_SEND;

// Opcode low 5 bits (shared by RC and UC).
const OP_SEND_FIRST: u8 = 0x00;
const OP_SEND_MIDDLE: u8 = 0x01;
const OP_SEND_LAST: u8 = 0x02;
const OP_SEND_LAST_IMM: u8 = 0x03;
const OP_WRITE_FIRST: u8 = 0x06;
const OP_WRITE_MIDDLE: u8 = 0x07;
const OP_WRITE_LAST: u8 = 0x08;
const OP_WRITE_LAST_IMM: u8 = 0x09;
const OP_WRITE_ONLY_IMM: u8 = 0x0B;
const OP_SEND_LAST_INV: u8 = 0x16;

/// rxe's `rxe_opcode[op].mask`, for the opcodes of the QP's transport (0 for others).
fn op_mask(op: Opcode, transport: Transport) -> u32 {
    let raw = u8::from(op);
    let base = match transport {
        Transport::Rc => 0x00,
        Transport::Uc => 0x20,
    };
    if raw & 0xE0 != base {
        return 0;
    }
    let o = raw & 0x1F;
    if transport == Transport::Uc && o > OP_WRITE_ONLY_IMM {
        return 0;
    }
    match o {
        0x00 => M_PAYLOAD | M_REQ | M_RWR | M_SEND | M_START,
        0x01 => M_PAYLOAD | M_REQ | M_SEND | M_MIDDLE,
        0x02 => M_PAYLOAD | M_REQ | M_COMP | M_SEND | M_END,
        0x03 => M_IMMDT | M_PAYLOAD | M_REQ | M_COMP | M_SEND | M_END,
        0x04 => M_PAYLOAD | M_REQ | M_COMP | M_RWR | M_SEND | M_START | M_END,
        0x05 => M_IMMDT | M_PAYLOAD | M_REQ | M_COMP | M_RWR | M_SEND | M_START | M_END,
        0x06 => M_RETH | M_PAYLOAD | M_REQ | M_WRITE | M_START,
        0x07 => M_PAYLOAD | M_REQ | M_WRITE | M_MIDDLE,
        0x08 => M_PAYLOAD | M_REQ | M_WRITE | M_END,
        0x09 => M_IMMDT | M_PAYLOAD | M_REQ | M_WRITE | M_COMP | M_RWR | M_END,
        0x0A => M_RETH | M_PAYLOAD | M_REQ | M_WRITE | M_START | M_END,
        0x0B => M_RETH | M_IMMDT | M_PAYLOAD | M_REQ | M_WRITE | M_COMP | M_RWR | M_START | M_END,
        0x0C => M_RETH | M_REQ | M_READ | M_START | M_END,
        0x0D => M_PAYLOAD | M_START,
        0x0E => M_PAYLOAD | M_MIDDLE,
        0x0F => M_PAYLOAD | M_END,
        0x10 => M_PAYLOAD | M_START | M_END,
        0x11 | 0x12 => M_START | M_END,
        0x13 | 0x14 => M_REQ | M_ATOMIC | M_START | M_END,
        0x16 => M_PAYLOAD | M_REQ | M_COMP | M_SEND | M_END,
        0x17 => M_PAYLOAD | M_REQ | M_COMP | M_RWR | M_SEND | M_START | M_END,
        0x1C => M_RETH | M_REQ | M_FLUSH | M_START | M_END,
        0x1D => M_RETH | M_PAYLOAD | M_REQ | M_ATOMIC_WRITE | M_START | M_END,
        _ => 0,
    }
}

/// The remote address every WRITE/READ targets, and the keys (the model has no memory regions:
/// every key is valid).
const REMOTE_VA: u64 = 0x10_0000_0000;
const RKEY: u32 = 0x1234;
/// Payload bytes (contents are not modelled, lengths are).
static PAYLOAD: [u8; 4096] = [0x5A; 4096];
/// The value an ATOMIC WRITE stores.
const ATOMIC_WRITE_VALUE: u64 = 0x0123_4567_89AB_CDEF;
/// Bound on one run of the send task (rxe's task loop likewise yields and reschedules itself).
const SEND_TASK_MAX_ROUNDS: usize = 1 << 16;

/// A send WQE's state (`enum wqe_state`; `wqe_state_error` marks local errors, which the
/// model has none of).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WqeState {
    Posted,
    Processing,
    Pending,
    Done,
}

/// A send queue entry (`struct rxe_send_wqe`, the fields the state machines use).
#[derive(Debug, Clone, Copy)]
struct SendWqe {
    verb: Verb,
    state: WqeState,
    first_psn: Psn,
    last_psn: Psn,
    /// `dma.length`.
    length: u32,
    /// `dma.resid`: bytes still to send (WRITE/SEND) or still to receive (READ).
    resid: u32,
    /// `iova - remote_addr`.
    iova_off: u64,
    has_rd_atomic: bool,
    first_sent_ns: Option<u64>,
    /// Completion status (`None`: success).
    status: Option<QpError>,
}

impl SendWqe {
    fn wr_mask(&self) -> u32 {
        self.verb.wr_mask()
    }
}

/// A parsed, checked incoming frame (`struct rxe_pkt_info` and the headers it points at).
#[derive(Debug, Clone, Copy)]
struct Rx {
    opcode: Opcode,
    mask: u32,
    psn: Psn,
    ack_req: bool,
    pad: u8,
    reth: Option<RethRepr>,
    aeth: Option<AethRepr>,
    atomic_eth: Option<AtomicEthRepr>,
    payload_len: u32,
    /// The first 8 payload bytes, big-endian (the ATOMIC WRITE value), 0 if shorter.
    value: u64,
}

impl Rx {
    /// The low 5 opcode bits.
    fn op(&self) -> u8 {
        u8::from(self.opcode) & 0x1F
    }
}

/// Result of one requester or completer invocation: rxe's 0 ("run me again") or `-EAGAIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Again,
    Exit,
}

/// Requester state (`qp->req`).
#[derive(Debug, Clone, Copy)]
struct ReqState {
    /// `req.wqe_index`, relative to the send queue's consumer (the front of `sq`).
    wqe_index: usize,
    psn: Psn,
    opcode: Option<Opcode>,
    noack_pkts: u32,
    /// `req.rd_atomic`: READ/atomic credits left.
    rd_atomic: u32,
    need_rd_atomic: bool,
    wait_psn: bool,
    need_retry: bool,
    wait_for_rnr_timer: bool,
    again: bool,
    /// One past the highest request PSN sent (model: to count retransmissions).
    high: Option<Psn>,
}

/// Completer state (`qp->comp`).
#[derive(Debug, Clone, Copy)]
struct CompState {
    psn: Psn,
    opcode: Option<Opcode>,
    retry_cnt: u8,
    rnr_retry: u8,
    started_retry: bool,
    timeout: bool,
    timeout_retry: bool,
}

/// What a responder resource holds (`res->type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResKind {
    Free,
    Read,
    Atomic,
    AtomicWrite,
    Flush,
}

/// A responder resource (`struct resp_res`).
#[derive(Debug, Clone, Copy)]
struct Res {
    kind: ResKind,
    replay: bool,
    /// `rdatm_res_state_new` (else `next`/`replay`).
    state_new: bool,
    first_psn: Psn,
    last_psn: Psn,
    cur_psn: Psn,
    va_org: u64,
    va: u64,
    resid: u32,
    length: u32,
    rkey: u32,
    orig_val: u64,
}

impl Res {
    const FREE: Res = Res {
        kind: ResKind::Free,
        replay: false,
        state_new: false,
        first_psn: Psn::new(0),
        last_psn: Psn::new(0),
        cur_psn: Psn::new(0),
        va_org: 0,
        va: 0,
        resid: 0,
        length: 0,
        rkey: 0,
        orig_val: 0,
    };
}

/// Responder state (`qp->resp`).
#[derive(Debug, Clone)]
struct RespState {
    psn: Psn,
    /// `resp.ack_psn`: like rxe, zero until the first SEND/WRITE/atomic/FLUSH executes (READ
    /// never sets it).
    ack_psn: Psn,
    msn: u32,
    opcode: Option<Opcode>,
    sent_psn_nak: bool,
    drop_msg: bool,
    /// Receive WQEs posted and not consumed.
    recv_wqes: u64,
    /// `resp.wqe` is set (a receive WQE is being filled).
    cur_wqe: bool,
    va: u64,
    rkey: u32,
    resid: u32,
    length: u32,
    aeth_syndrome: Syndrome,
    status_ok: bool,
    goto_error: bool,
    resources: Vec<Res>,
    res_head: usize,
    /// `resp.res`: the resource being replied from.
    cur_res: Option<usize>,
    /// The 8 bytes the atomics work on.
    mem: u64,
    /// Selective repeat: packets kept ahead of ePSN, by PSN value.
    sr_store: BTreeMap<u32, Rx>,
}

/// One RC or UC queue pair modelled on rxe.
///
/// Not modelled, and why: memory regions and keys (every R_Key is valid, so no remote access
/// errors), receive buffer sizes (a receive WQE takes any SEND), SRQ, fences and local
/// operations, `IB_SEND_INLINE`, solicited events, SEND with invalidate and READ with
/// invalidate (no verbs for them), alternate paths and migration, the QP state machine before
/// RTS and drain (the QP starts in RTS), `RXE_INFLIGHT_SKBS_PER_QP_HIGH` (the netdev frees
/// skbs at once here), timer granularity (rxe rounds timers to jiffies, at least one), and the
/// retransmit timer of UC QPs (rxe arms it, but its expiry finds nothing to do).
pub struct Qp {
    ep: Endpoint,
    local_qpn: u32,
    cfg: QpConfig,
    max_rd_atomic: u32,
    max_dest_rd_atomic: u32,
    min_rnr_code: u8,
    state: QpState,
    counters: RxeCounters,
    sq: VecDeque<SendWqe>,
    req: ReqState,
    comp: CompState,
    resp: RespState,
    /// Response packets waiting for the completer (`qp->resp_pkts`).
    resp_q: VecDeque<Rx>,
    /// Frames to send.
    tx: VecDeque<Pkt>,
    /// The last time seen.
    now: u64,
    /// Retransmit timer expiry (`qp->retrans_timer`).
    retrans_at: Option<u64>,
    /// RNR NAK timer expiry (`qp->rnr_nak_timer`).
    rnr_at: Option<u64>,
    /// Pacing: when the requester may send again, if it is waiting for it.
    pace_at: Option<u64>,
    next_send_ns: u64,
    /// The send task must run at the next poll.
    task_scheduled: bool,
    completed: u64,
    failed: u64,
    bytes_completed: u64,
    completion_times_ns: Vec<u64>,
}

impl Qp {
    /// A QP in RTS. `ep` gives addresses, MACs, the peer QPN and the UDP source port;
    /// `local_qpn` is the DestQP of the frames meant for it; `sq_psn` is the first PSN of its
    /// requests and `rq_psn` the first PSN it expects from the peer's requests.
    pub fn new(ep: Endpoint, local_qpn: u32, cfg: QpConfig, sq_psn: Psn, rq_psn: Psn) -> Qp {
        let round = |n: u32| -> u32 {
            if n == 0 {
                0
            } else {
                n.checked_next_power_of_two().unwrap_or(1 << 31)
            }
        };
        let max_rd_atomic = round(cfg.max_rd_atomic).min(cfg.device.max_rd_atomic);
        let max_dest_rd_atomic = round(cfg.max_dest_rd_atomic).min(cfg.device.max_rd_atomic);
        Qp {
            ep,
            local_qpn: local_qpn & Psn::MASK,
            cfg,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_code: rnr_timer_code(cfg.min_rnr_timer_ns),
            state: QpState::Rts,
            counters: RxeCounters::default(),
            sq: VecDeque::new(),
            req: ReqState {
                wqe_index: 0,
                psn: sq_psn,
                opcode: None,
                noack_pkts: 0,
                rd_atomic: max_rd_atomic,
                need_rd_atomic: false,
                wait_psn: false,
                need_retry: false,
                wait_for_rnr_timer: false,
                again: false,
                high: None,
            },
            comp: CompState {
                psn: sq_psn,
                opcode: None,
                retry_cnt: cfg.retry_cnt,
                rnr_retry: cfg.rnr_retry,
                started_retry: false,
                timeout: false,
                timeout_retry: false,
            },
            resp: RespState {
                psn: rq_psn,
                ack_psn: Psn::new(0),
                msn: 0,
                opcode: None,
                sent_psn_nak: false,
                drop_msg: false,
                recv_wqes: 0,
                cur_wqe: false,
                va: 0,
                rkey: 0,
                resid: 0,
                length: 0,
                aeth_syndrome: Syndrome::Ack { credits: 0x1F },
                status_ok: true,
                goto_error: false,
                resources: vec![Res::FREE; max_dest_rd_atomic as usize],
                res_head: 0,
                cur_res: None,
                mem: 0,
                sr_store: BTreeMap::new(),
            },
            resp_q: VecDeque::new(),
            tx: VecDeque::new(),
            now: 0,
            retrans_at: None,
            rnr_at: None,
            pace_at: None,
            next_send_ns: 0,
            task_scheduled: false,
            completed: 0,
            failed: 0,
            bytes_completed: 0,
            completion_times_ns: Vec::new(),
        }
    }

    /// Queues a work request on the send queue; [`Qp::poll`] sends it. A verb the transport
    /// does not offer (READ, atomics, FLUSH, ATOMIC WRITE on UC) or longer than
    /// [`RXE_MAX_MSG_SIZE`] is refused and counted in `post_rejected`, as `rxe_post_send`
    /// refuses it. In the error state the work request completes at once in error (flushed).
    pub fn post(&mut self, v: Verb) {
        let rc_only = matches!(
            v,
            Verb::Read { .. }
                | Verb::CompareSwap
                | Verb::FetchAdd
                | Verb::Flush
                | Verb::AtomicWrite
        );
        if (self.cfg.transport == Transport::Uc && rc_only) || v.len() > RXE_MAX_MSG_SIZE {
            self.counters.post_rejected += 1;
            return;
        }
        if self.is_error() {
            self.failed += 1;
            return;
        }
        self.sq.push_back(SendWqe {
            verb: v,
            state: WqeState::Posted,
            first_psn: self.req.psn,
            last_psn: self.req.psn,
            length: v.len(),
            resid: v.len(),
            iova_off: 0,
            has_rd_atomic: false,
            first_sent_ns: None,
            status: None,
        });
        self.task_scheduled = true;
    }

    /// Posts `n` receive WQEs (a SEND or WRITE with immediate consumes one; without one the RC
    /// responder sends an RNR NAK).
    pub fn post_recv(&mut self, n: u32) {
        if !self.is_error() {
            self.resp.recv_wqes = self.resp.recv_wqes.saturating_add(u64::from(n));
        }
    }

    /// Takes a frame addressed to this QP at time `now` (ns): a request from the peer's
    /// requester (answered by the responder) or a response to this QP's requests (taken by the
    /// completer, which may make the requester send more). Replies are returned by the next
    /// [`Qp::poll`]. A malformed or unexpected frame is counted and ignored; timers due by
    /// `now` fire first.
    pub fn handle(&mut self, frame: &[u8], now: u64) {
        self.fire_timers(now);
        self.now = self.now.max(now);
        let Some(rx) = self.parse(frame) else {
            return;
        };
        self.counters.rcvd_pkts += 1;
        if self.is_error() {
            self.counters.rx_in_error += 1;
            return;
        }
        if rx.mask & M_REQ != 0 {
            self.handle_request(rx);
        } else {
            self.counters.ack_deferred += 1;
            self.resp_q.push_back(rx);
            let t = self.now;
            self.run_send_task(t);
        }
    }

    /// Fires the timers due by `now` (each at its own expiry time), runs the send task if work
    /// was posted, and moves every frame the QP wants to send into `out`.
    pub fn poll(&mut self, now: u64, out: &mut Vec<Pkt>) {
        self.fire_timers(now);
        self.now = self.now.max(now);
        if self.task_scheduled {
            self.task_scheduled = false;
            let t = self.now;
            self.run_send_task(t);
        }
        out.extend(self.tx.drain(..));
    }

    /// The earliest time at which [`Qp::poll`] has something to do if no frame arrives: now
    /// (the last time seen) when frames or posted work wait, else the retransmit timer, the RNR
    /// timer or the pacing deadline. `None` when nothing is pending.
    pub fn next_timer_ns(&self) -> Option<u64> {
        if !self.tx.is_empty() || self.task_scheduled {
            return Some(self.now);
        }
        [self.retrans_at, self.rnr_at, self.pace_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The counters.
    pub fn counters(&self) -> &RxeCounters {
        &self.counters
    }

    /// RTS, or the error state with the reason.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// True when every posted work request completed (successfully or in error) and no frame
    /// waits to be sent.
    pub fn idle(&self) -> bool {
        self.sq.is_empty() && self.tx.is_empty()
    }

    /// Work requests completed successfully.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Work requests completed in error (including those flushed by the error state).
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// For each successful completion, in order: ns from the work request's first packet to
    /// its completion (0 for a UC work request, complete when sent).
    pub fn completion_times_ns(&self) -> &[u64] {
        &self.completion_times_ns
    }

    /// Bytes of the work requests completed successfully ([`Verb::len`]).
    pub fn bytes_completed(&self) -> u64 {
        self.bytes_completed
    }

    /// The PSN the requester sends next (`req.psn`).
    pub fn sq_psn(&self) -> Psn {
        self.req.psn
    }

    /// The PSN the responder expects next (`resp.psn`, ePSN).
    pub fn rq_psn(&self) -> Psn {
        self.resp.psn
    }

    /// Receive WQEs posted and not yet consumed.
    pub fn recv_posted(&self) -> u64 {
        self.resp.recv_wqes
    }

    /// The initiator depth in force: [`QpConfig::max_rd_atomic`] rounded up to a power of two
    /// and clamped to the device.
    pub fn max_rd_atomic(&self) -> u32 {
        self.max_rd_atomic
    }

    /// The responder resources in force, rounded and clamped likewise.
    pub fn max_dest_rd_atomic(&self) -> u32 {
        self.max_dest_rd_atomic
    }

    /// The configuration.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    fn is_error(&self) -> bool {
        matches!(self.state, QpState::Error(_))
    }

    fn is_rc(&self) -> bool {
        self.cfg.transport == Transport::Rc
    }

    fn mtu(&self) -> u32 {
        self.cfg.pmtu.bytes()
    }

    /// `rxe_qp_error`: the QP enters the error state; the completer's and responder's drains
    /// (`flush_send_queue`, `flush_recv_queue`, `drain_*_pkts`) follow at once: every WQE still
    /// queued completes with a flush error, queued frames are dropped, timers stop.
    fn qp_error(&mut self, why: QpError) {
        if !self.is_error() {
            self.state = QpState::Error(why);
        }
        self.failed += self.sq.len() as u64;
        self.sq.clear();
        self.req.wqe_index = 0;
        self.resp_q.clear();
        self.resp.recv_wqes = 0;
        self.resp.sr_store.clear();
        self.retrans_at = None;
        self.rnr_at = None;
        self.pace_at = None;
    }

    /// Fires every timer due by `now`, earliest first, each at its own expiry time.
    fn fire_timers(&mut self, now: u64) {
        for _ in 0..1024 {
            let due = [
                (self.retrans_at, 0u8),
                (self.rnr_at, 1u8),
                (self.pace_at, 2u8),
            ]
            .into_iter()
            .filter_map(|(t, k)| t.filter(|&t| t <= now).map(|t| (t, k)))
            .min();
            let Some((t, which)) = due else {
                return;
            };
            self.now = self.now.max(t);
            match which {
                0 => {
                    // `retransmit_timer`.
                    self.retrans_at = None;
                    self.comp.timeout = true;
                }
                1 => {
                    // `rnr_nak_timer`: request a send queue retry.
                    self.rnr_at = None;
                    self.req.need_retry = true;
                    self.req.wait_for_rnr_timer = false;
                }
                _ => self.pace_at = None,
            }
            if !self.is_error() {
                let t = self.now;
                self.run_send_task(t);
            }
        }
    }

    /// The send task (`rxe_sender`): requester then completer, again while either wants to.
    fn run_send_task(&mut self, now: u64) {
        self.now = self.now.max(now);
        for _ in 0..SEND_TASK_MAX_ROUNDS {
            let r = self.requester();
            let c = self.completer();
            if r == Step::Exit && c == Step::Exit {
                return;
            }
        }
        self.task_scheduled = true;
    }

    /// `rxe_rcv` and `hdr_check`: parses and checks a frame; counts and drops what fails.
    fn parse(&mut self, frame: &[u8]) -> Option<Rx> {
        let Ok(c) = classify(frame, self.cfg.pmtu) else {
            self.counters.rx_malformed += 1;
            return None;
        };
        let Some(r) = c.roce() else {
            self.counters.rx_malformed += 1;
            return None;
        };
        if r.ip.dst != self.ep.ip || r.ip.src != self.ep.peer_ip {
            self.counters.rx_wrong_addr += 1;
            return None;
        }
        if r.bth.dest_qp != self.local_qpn {
            self.counters.rx_wrong_qpn += 1;
            return None;
        }
        let mask = op_mask(r.bth.opcode, self.cfg.transport);
        if mask == 0 {
            self.counters.rx_wrong_transport += 1;
            return None;
        }
        if r.bth.pkey & 0x7FFF != 0x7FFF {
            self.counters.rx_bad_pkey += 1;
            return None;
        }
        if !matches!(r.verify_icrc(frame, c.eth.l3_offset), Ok(true)) {
            self.counters.rx_bad_icrc += 1;
            return None;
        }
        let ext_at = usize::from(r.bth_offset) + 12;
        let pay_at = usize::from(r.payload_offset);
        let ext = frame
            .get(ext_at..pay_at)
            .and_then(|e| ExtRepr::parse(r.bth.opcode, e).ok());
        let Some(ext) = ext else {
            self.counters.rx_malformed += 1;
            return None;
        };
        let payload = frame
            .get(pay_at..pay_at + usize::from(r.payload_len))
            .unwrap_or(&[]);
        let value = payload
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_be_bytes);
        Some(Rx {
            opcode: r.bth.opcode,
            mask,
            psn: r.bth.psn,
            ack_req: r.bth.ack_req,
            pad: r.bth.pad_count,
            reth: ext.reth,
            aeth: ext.aeth,
            atomic_eth: ext.atomic_eth,
            payload_len: u32::from(r.payload_len),
            value,
        })
    }

    /// `rxe_xmit_packet`: builds a frame and queues it; returns its length (0 if it could not
    /// be built, counted in `send_err`).
    fn xmit(
        &mut self,
        opcode: Opcode,
        psn: Psn,
        ack_req: bool,
        ext: ExtRepr,
        payload: &[u8],
    ) -> usize {
        let Some(ip) = IpRepr::between(self.ep.ip, self.ep.peer_ip) else {
            self.counters.send_err += 1;
            return 0;
        };
        let bth = BthRepr {
            ack_req,
            ..BthRepr::new(opcode, self.ep.peer_qpn, psn)
        };
        let repr = RoceFrameRepr {
            udp_src_port: self.ep.sport,
            ..RoceFrameRepr::new(self.ep.mac, self.ep.gw_mac, ip, bth)
        }
        .with_ext(ext)
        .with_payload(payload);
        match repr.to_vec() {
            Ok(v) => {
                self.counters.sent_pkts += 1;
                let len = v.len();
                self.tx.push_back(Pkt::from_slice(&v));
                len
            }
            Err(_) => {
                self.counters.send_err += 1;
                0
            }
        }
    }

    /// Records the completion of the send queue's front WQE (`do_complete`).
    fn do_complete(&mut self) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        self.req.wqe_index = self.req.wqe_index.saturating_sub(1);
        if w.status.is_none() {
            self.completed += 1;
            self.bytes_completed += u64::from(w.length);
            let t0 = w.first_sent_ns.unwrap_or(self.now);
            self.completion_times_ns.push(self.now.saturating_sub(t0));
        } else {
            self.failed += 1;
        }
        if matches!(w.verb, Verb::Send { .. }) {
            self.counters.rdma_sends += 1;
        }
    }
}

/// AETH syndrome byte of an ACK with unlimited credits (`AETH_ACK_UNLIMITED`).
const ACK_UNLIMITED: Syndrome = Syndrome::Ack { credits: 0x1F };

/// The extension headers of an ACKNOWLEDGE-class packet.
fn aeth_ext(syndrome: Syndrome, msn: u32) -> ExtRepr {
    ExtRepr {
        aeth: Some(AethRepr {
            syndrome,
            msn: msn & Psn::MASK,
        }),
        ..ExtRepr::default()
    }
}

/// An ATOMIC ACKNOWLEDGE's extension headers.
fn atomic_ack_ext(msn: u32, orig: u64) -> ExtRepr {
    ExtRepr {
        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: orig }),
        ..aeth_ext(ACK_UNLIMITED, msn)
    }
}

/// A FLUSH's FETH: global visibility (`IB_FLUSH_GLOBAL`), range selectivity.
const FLUSH_FETH: FethRepr = FethRepr {
    placement_type: 1,
    selectivity: 0,
};
