//! The responder (`rxe_resp.c`): checks each request packet against ePSN, executes it,
//! answers it (ACK, NAK, RNR NAK, READ responses, atomic ACK), replays duplicates; and the
//! selective repeat variant of [`ResponderKind::SelectiveRepeat`](super::ResponderKind).

use std::collections::btree_map::Entry;

use sprayswitch::wire::{ExtRepr, NakCode, Opcode, Psn, Syndrome};

use super::{
    aeth_ext, atomic_ack_ext, Qp, QpError, ResKind, ResponderKind, Rx, Transport, ACK_UNLIMITED,
    M_ATOMIC, M_ATOMIC_WRITE, M_COMP, M_END, M_FLUSH, M_MIDDLE, M_PAYLOAD, M_READ, M_RETH, M_RWR,
    M_SEND, M_START, M_WRITE, OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_LAST_IMM, OP_SEND_LAST_INV,
    OP_SEND_MIDDLE, OP_WRITE_FIRST, OP_WRITE_LAST, OP_WRITE_LAST_IMM, OP_WRITE_MIDDLE, PAYLOAD,
    RXE_MAX_MSG_SIZE,
};

/// The responder's states (`enum resp_states`), those the model reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rs {
    ChkPsn,
    ChkOpSeq,
    ChkOpValid,
    ChkResource,
    ChkLength,
    ChkRkey,
    Execute,
    Complete,
    ReadReply,
    AtomicReply,
    AtomicWriteReply,
    ProcessFlush,
    Acknowledge,
    Cleanup,
    DuplicateRequest,
    ErrPsnOutOfSeq,
    /// Class C errors answered with NAK "invalid request": `ERR_TOO_MANY_RDMA_ATM_REQ`,
    /// `ERR_MISSING_OPCODE_FIRST`, `ERR_MISSING_OPCODE_LAST_C`.
    ErrInvalidRequest,
    ErrMissingOpcodeLastD1e,
    ErrRnr,
    ErrLength,
    Done,
}

impl Qp {
    /// A request packet, in the order it arrived; a selective repeat responder then takes the
    /// packets it kept as far as they are now in sequence.
    pub(super) fn handle_request(&mut self, rx: Rx) {
        self.responder(&rx);
        if self.cfg.device.responder != ResponderKind::SelectiveRepeat || !self.is_rc() {
            return;
        }
        while !self.is_error() {
            match self.resp.sr_store.remove(&self.resp.psn.value()) {
                Some(next) => self.responder(&next),
                None => break,
            }
        }
        let epsn = self.resp.psn;
        self.resp
            .sr_store
            .retain(|&k, _| Psn::new(k).distance(epsn) > 0);
    }

    /// `rxe_receiver` for one packet.
    fn responder(&mut self, rx: &Rx) {
        self.resp.aeth_syndrome = ACK_UNLIMITED;
        let mut st = Rs::ChkPsn;
        for _ in 0..64 {
            st = match st {
                Rs::ChkPsn => self.resp_check_psn(rx),
                Rs::ChkOpSeq => self.check_op_seq(rx),
                // `check_op_valid`: the model grants every access right.
                Rs::ChkOpValid => Rs::ChkResource,
                Rs::ChkResource => self.check_resource(rx),
                Rs::ChkLength => self.check_length(rx),
                Rs::ChkRkey => self.check_rkey(rx),
                Rs::Execute => self.execute(rx),
                Rs::Complete => self.resp_do_complete(),
                Rs::ReadReply => self.read_reply(rx),
                Rs::AtomicReply => self.atomic_reply(rx),
                Rs::AtomicWriteReply => self.atomic_write_reply(rx),
                Rs::ProcessFlush => self.process_flush(rx),
                Rs::Acknowledge => self.acknowledge(rx),
                Rs::DuplicateRequest => self.duplicate_request(rx),
                Rs::ErrPsnOutOfSeq => {
                    // RC only, class B: NAK ePSN, drop the packet.
                    let epsn = self.resp.psn;
                    self.send_ack(Syndrome::Nak(NakCode::PsnSequenceError), epsn);
                    Rs::Cleanup
                }
                Rs::ErrInvalidRequest => {
                    self.do_class_ac_error(Syndrome::Nak(NakCode::InvalidRequest));
                    Rs::Complete
                }
                Rs::ErrMissingOpcodeLastD1e => {
                    // UC class D1: the unfinished message is abandoned; rxe resets
                    // `resp.opcode` only when a receive WQE was being filled, and drops this
                    // packet too.
                    if self.resp.cur_wqe {
                        self.resp.opcode = None;
                    }
                    self.counters.uc_dropped += 1;
                    Rs::Cleanup
                }
                Rs::ErrRnr => {
                    if self.is_rc() {
                        self.counters.send_rnr_err += 1;
                        let timer = self.min_rnr_code;
                        self.send_ack(Syndrome::RnrNak { timer }, rx.psn);
                    } else {
                        self.resp.drop_msg = true;
                        self.counters.uc_dropped += 1;
                    }
                    Rs::Cleanup
                }
                Rs::ErrLength => {
                    if self.is_rc() {
                        self.do_class_ac_error(Syndrome::Nak(NakCode::InvalidRequest));
                        Rs::Complete
                    } else {
                        self.resp.drop_msg = true;
                        self.counters.uc_dropped += 1;
                        Rs::Cleanup
                    }
                }
                Rs::Cleanup => Rs::Done,
                Rs::Done => {
                    if std::mem::take(&mut self.resp.goto_error) {
                        self.qp_error(QpError::InvalidRequest);
                    }
                    return;
                }
            };
        }
    }

    /// `check_psn` (responder).
    fn resp_check_psn(&mut self, rx: &Rx) -> Rs {
        let diff = rx.psn.distance(self.resp.psn);
        match self.cfg.transport {
            Transport::Rc => {
                if diff > 0 {
                    if self.cfg.device.responder == ResponderKind::SelectiveRepeat {
                        return self.sr_ahead(rx, diff as u32);
                    }
                    self.counters.out_of_seq_dropped += 1;
                    if self.resp.sent_psn_nak {
                        return Rs::Cleanup;
                    }
                    self.resp.sent_psn_nak = true;
                    self.counters.out_of_seq_request += 1;
                    return Rs::ErrPsnOutOfSeq;
                } else if diff < 0 {
                    self.counters.duplicate_request += 1;
                    return Rs::DuplicateRequest;
                }
                self.resp.sent_psn_nak = false;
            }
            Transport::Uc => {
                if self.resp.drop_msg || diff != 0 {
                    if rx.mask & M_START != 0 {
                        self.resp.drop_msg = false;
                        return Rs::ChkOpSeq;
                    }
                    self.resp.drop_msg = true;
                    self.counters.uc_dropped += 1;
                    return Rs::Cleanup;
                }
            }
        }
        Rs::ChkOpSeq
    }

    /// Selective repeat: keep a packet ahead of ePSN (within the window) and NAK ePSN at once,
    /// once per ePSN.
    fn sr_ahead(&mut self, rx: &Rx, ahead: u32) -> Rs {
        let key = rx.psn.value();
        if ahead >= self.cfg.device.sr_window_psns {
            self.counters.out_of_seq_dropped += 1;
        } else {
            match self.resp.sr_store.entry(key) {
                Entry::Occupied(_) => self.counters.duplicate_request += 1,
                Entry::Vacant(v) => {
                    v.insert(*rx);
                    self.counters.sr_buffered += 1;
                }
            }
        }
        if !self.resp.sent_psn_nak {
            self.resp.sent_psn_nak = true;
            self.counters.out_of_seq_request += 1;
            let epsn = self.resp.psn;
            self.send_ack(Syndrome::Nak(NakCode::PsnSequenceError), epsn);
        }
        Rs::Cleanup
    }

    /// `check_op_seq`: the packet must continue the message in progress, or start one.
    fn check_op_seq(&mut self, rx: &Rx) -> Rs {
        let cur = self.resp.opcode.map(|o| u8::from(o) & 0x1F);
        let op = rx.op();
        let rc = self.is_rc();
        let send_cont = [
            OP_SEND_MIDDLE,
            OP_SEND_LAST,
            OP_SEND_LAST_IMM,
            OP_SEND_LAST_INV,
        ];
        let write_cont = [OP_WRITE_MIDDLE, OP_WRITE_LAST, OP_WRITE_LAST_IMM];
        let missing_last = if rc {
            Rs::ErrInvalidRequest
        } else {
            Rs::ErrMissingOpcodeLastD1e
        };
        match cur {
            Some(OP_SEND_FIRST | OP_SEND_MIDDLE) => {
                if send_cont.contains(&op) {
                    Rs::ChkOpValid
                } else {
                    missing_last
                }
            }
            Some(OP_WRITE_FIRST | OP_WRITE_MIDDLE) => {
                if write_cont.contains(&op) {
                    Rs::ChkOpValid
                } else {
                    missing_last
                }
            }
            _ => {
                if send_cont.contains(&op) || write_cont.contains(&op) {
                    if rc {
                        Rs::ErrInvalidRequest
                    } else {
                        self.resp.drop_msg = true;
                        self.counters.uc_dropped += 1;
                        Rs::Cleanup
                    }
                } else {
                    Rs::ChkOpValid
                }
            }
        }
    }

    /// `check_resource`: READ/atomic need responder resources; SEND and WRITE with immediate
    /// need a receive WQE (else RNR).
    fn check_resource(&mut self, rx: &Rx) -> Rs {
        if rx.mask & (M_READ | M_ATOMIC | M_ATOMIC_WRITE) != 0 {
            // It is the requester's job not to send too many; the resources are recycled.
            return if self.max_dest_rd_atomic > 0 {
                Rs::ChkLength
            } else {
                Rs::ErrInvalidRequest
            };
        }
        if rx.mask & M_RWR != 0 {
            self.resp.cur_wqe = self.resp.recv_wqes > 0;
            return if self.resp.cur_wqe {
                Rs::ChkLength
            } else {
                Rs::ErrRnr
            };
        }
        Rs::ChkLength
    }

    /// `rxe_resp_check_length`.
    fn check_length(&mut self, rx: &Rx) -> Rs {
        let mtu = self.mtu();
        if rx.mask & M_PAYLOAD != 0 {
            let start = rx.mask & M_START != 0;
            let end = rx.mask & M_END != 0;
            let len = rx.payload_len;
            let bad = if start && end {
                len > mtu
            } else if start || rx.mask & M_MIDDLE != 0 {
                len != mtu
            } else if end {
                len == 0 || len > mtu
            } else {
                false
            };
            if bad {
                return Rs::ErrLength;
            }
        }
        if rx.mask & M_RETH != 0 && rx.reth.is_some_and(|r| r.dma_len > RXE_MAX_MSG_SIZE) {
            return Rs::ErrLength;
        }
        if rx.mask & (M_READ | M_WRITE | M_ATOMIC_WRITE | M_FLUSH | M_ATOMIC) != 0 {
            Rs::ChkRkey
        } else {
            Rs::Execute
        }
    }

    /// `check_rkey`, the parts that do not need memory regions: take the RETH/AtomicETH into
    /// the responder state and check the WRITE packet lengths against what is left.
    fn check_rkey(&mut self, rx: &Rx) -> Rs {
        if rx.mask & (M_READ | M_WRITE | M_ATOMIC_WRITE | M_FLUSH) != 0 {
            if let Some(r) = rx.reth {
                self.resp.va = r.virtual_address;
                self.resp.resid = r.dma_len;
                self.resp.length = r.dma_len;
                self.resp.rkey = if rx.mask & (M_READ | M_WRITE) != 0 && r.dma_len == 0 {
                    0
                } else {
                    r.rkey
                };
            }
        } else if rx.mask & M_ATOMIC != 0 {
            if let Some(a) = rx.atomic_eth {
                self.resp.va = a.virtual_address;
                self.resp.rkey = a.rkey;
            }
            self.resp.resid = 8;
        }
        // A zero-byte READ or WRITE needs no address or key (C9-88).
        if rx.mask & (M_READ | M_WRITE) != 0 && rx.reth.is_some_and(|r| r.dma_len == 0) {
            return Rs::Execute;
        }
        if rx.mask & (M_WRITE | M_ATOMIC_WRITE) != 0 {
            let resid = self.resp.resid;
            let len = rx.payload_len;
            let mtu = self.mtu();
            let bad = if resid > mtu {
                len != mtu || rx.pad != 0
            } else {
                len != resid || u32::from(rx.pad) != (4 - resid % 4) % 4
            };
            if bad {
                return Rs::ErrLength;
            }
        }
        Rs::Execute
    }

    /// `execute`: a new request in sequence.
    fn execute(&mut self, rx: &Rx) -> Rs {
        if rx.mask & M_SEND != 0 {
            // `send_data_in`: the receive WQE takes any length in the model.
        } else if rx.mask & M_WRITE != 0 {
            // `write_data_in`.
            self.resp.va = self.resp.va.wrapping_add(u64::from(rx.payload_len));
            self.resp.resid = self.resp.resid.saturating_sub(rx.payload_len);
        } else if rx.mask & M_READ != 0 {
            // For RDMA Read the MSN is incremented now (C9-148).
            self.resp.msn = self.resp.msn.wrapping_add(1);
            return Rs::ReadReply;
        } else if rx.mask & M_ATOMIC != 0 {
            return Rs::AtomicReply;
        } else if rx.mask & M_ATOMIC_WRITE != 0 {
            return Rs::AtomicWriteReply;
        } else if rx.mask & M_FLUSH != 0 {
            return Rs::ProcessFlush;
        }
        if rx.mask & M_END != 0 {
            self.resp.msn = self.resp.msn.wrapping_add(1);
        }
        self.resp_advance(rx);
        if rx.mask & M_COMP != 0 {
            Rs::Complete
        } else if self.is_rc() {
            Rs::Acknowledge
        } else {
            Rs::Cleanup
        }
    }

    /// ePSN moves past a request that executed (all but READ, which moves it when its last
    /// response is sent).
    fn resp_advance(&mut self, rx: &Rx) {
        self.resp.psn = rx.psn.add(1);
        self.resp.ack_psn = self.resp.psn;
        self.resp.opcode = Some(rx.opcode);
        self.resp.status_ok = true;
    }

    /// `do_complete` (responder): a receive WQE completes (SEND, WRITE with immediate).
    fn resp_do_complete(&mut self) -> Rs {
        if self.resp.cur_wqe {
            self.resp.cur_wqe = false;
            self.resp.recv_wqes = self.resp.recv_wqes.saturating_sub(1);
            if self.resp.status_ok {
                self.counters.rdma_recvs += 1;
            }
        }
        if self.is_rc() {
            Rs::Acknowledge
        } else {
            Rs::Cleanup
        }
    }

    /// `rxe_prepare_res`: takes the next responder resource (recycling the oldest).
    fn prepare_res(&mut self, kind: ResKind, rx: &Rx) -> Option<usize> {
        let n = self.resp.resources.len();
        if n == 0 {
            return None;
        }
        let i = self.resp.res_head % n;
        self.resp.res_head = (i + 1) % n;
        let mtu = self.mtu();
        let (va, resid, rkey) = (self.resp.va, self.resp.resid, self.resp.rkey);
        let res = self.resp.resources.get_mut(i)?;
        res.kind = kind;
        res.replay = false;
        match kind {
            ResKind::Read => {
                res.va = va;
                res.va_org = va;
                res.resid = resid;
                res.length = resid;
                res.rkey = rkey;
                let pkts = rx.reth.map_or(0, |r| r.dma_len).div_ceil(mtu).max(1);
                res.first_psn = rx.psn;
                res.cur_psn = rx.psn;
                res.last_psn = rx.psn.add(pkts - 1);
                res.state_new = true;
            }
            ResKind::Atomic | ResKind::AtomicWrite => {
                res.first_psn = rx.psn;
                res.last_psn = rx.psn;
                res.cur_psn = rx.psn;
            }
            // rxe sets no PSN range for a FLUSH resource: it keeps the slot's old one, so a
            // duplicate FLUSH is rarely found.
            ResKind::Flush | ResKind::Free => {}
        }
        Some(i)
    }

    /// `find_resource`: the remembered operation whose PSN range holds `psn`.
    fn find_resource(&self, psn: Psn) -> Option<usize> {
        self.resp.resources.iter().position(|r| {
            r.kind != ResKind::Free
                && psn.distance(r.first_psn) >= 0
                && psn.distance(r.last_psn) <= 0
        })
    }

    /// `read_reply`: sends every response packet of the READ (new or replayed) at once.
    fn read_reply(&mut self, rx: &Rx) -> Rs {
        let i = match self.resp.cur_res {
            Some(i) => i,
            None => match self.prepare_res(ResKind::Read, rx) {
                Some(i) => {
                    self.resp.cur_res = Some(i);
                    i
                }
                None => return Rs::Cleanup,
            },
        };
        let mtu = self.mtu();
        let msn = self.resp.msn;
        loop {
            let Some(res) = self.resp.resources.get_mut(i).copied() else {
                self.resp.cur_res = None;
                return Rs::Cleanup;
            };
            let opcode = if res.state_new {
                if res.resid <= mtu {
                    Opcode::RcReadResponseOnly
                } else {
                    Opcode::RcReadResponseFirst
                }
            } else if res.resid > mtu {
                Opcode::RcReadResponseMiddle
            } else {
                Opcode::RcReadResponseLast
            };
            let payload = res.resid.min(mtu);
            let ext = if opcode == Opcode::RcReadResponseMiddle {
                ExtRepr::default()
            } else {
                aeth_ext(ACK_UNLIMITED, msn)
            };
            let body = &PAYLOAD[..(payload as usize).min(PAYLOAD.len())];
            self.xmit(opcode, res.cur_psn, false, ext, body);
            self.counters.read_responses_sent += 1;
            let Some(r) = self.resp.resources.get_mut(i) else {
                return Rs::Cleanup;
            };
            r.state_new = false;
            r.va = r.va.wrapping_add(u64::from(payload));
            r.resid -= payload;
            r.cur_psn = r.cur_psn.add(1);
            if r.resid == 0 {
                let (replay, cur) = (r.replay, r.cur_psn);
                self.resp.cur_res = None;
                if !replay {
                    self.resp.opcode = None;
                }
                if cur.distance(self.resp.psn) >= 0 {
                    self.resp.psn = cur;
                }
                return Rs::Cleanup;
            }
        }
    }

    /// `atomic_reply`: executes a new atomic (not a replayed one) and answers it.
    fn atomic_reply(&mut self, rx: &Rx) -> Rs {
        let i = match self.resp.cur_res {
            Some(i) => i,
            None => match self.prepare_res(ResKind::Atomic, rx) {
                Some(i) => {
                    self.resp.cur_res = Some(i);
                    i
                }
                None => return Rs::Cleanup,
            },
        };
        let replay = self.resp.resources.get(i).is_some_and(|r| r.replay);
        if !replay {
            let orig = self.resp.mem;
            let (swap_add, compare) = rx.atomic_eth.map_or((0, 0), |a| (a.swap_add, a.compare));
            self.resp.mem = if rx.opcode == Opcode::RcCompareSwap {
                if orig == compare {
                    swap_add
                } else {
                    orig
                }
            } else {
                orig.wrapping_add(swap_add)
            };
            if let Some(r) = self.resp.resources.get_mut(i) {
                r.orig_val = orig;
            }
            self.resp.msn = self.resp.msn.wrapping_add(1);
            self.resp_advance(rx);
        }
        Rs::Acknowledge
    }

    /// `atomic_write_reply`.
    fn atomic_write_reply(&mut self, rx: &Rx) -> Rs {
        let i = match self.resp.cur_res {
            Some(i) => Some(i),
            None => {
                let i = self.prepare_res(ResKind::AtomicWrite, rx);
                self.resp.cur_res = i;
                i
            }
        };
        if i.and_then(|i| self.resp.resources.get(i))
            .is_some_and(|r| r.replay)
        {
            return Rs::Acknowledge;
        }
        self.resp.mem = rx.value;
        self.resp.resid = 0;
        self.resp.msn = self.resp.msn.wrapping_add(1);
        self.resp_advance(rx);
        Rs::Acknowledge
    }

    /// `process_flush`.
    fn process_flush(&mut self, rx: &Rx) -> Rs {
        match self.resp.cur_res {
            Some(i) if self.resp.resources.get(i).is_some_and(|r| r.replay) => {
                return Rs::Acknowledge;
            }
            Some(_) => {}
            None => self.resp.cur_res = self.prepare_res(ResKind::Flush, rx),
        }
        self.resp.msn = self.resp.msn.wrapping_add(1);
        self.resp_advance(rx);
        Rs::Acknowledge
    }

    /// `acknowledge`: RC only. A NAK/RNR syndrome set by an error, else an atomic ACK, a
    /// zero-length READ RESPONSE ONLY for FLUSH and ATOMIC WRITE, or an ACK if AckReq is set.
    fn acknowledge(&mut self, rx: &Rx) -> Rs {
        if !self.is_rc() {
            return Rs::Cleanup;
        }
        if self.resp.aeth_syndrome != ACK_UNLIMITED {
            let syn = self.resp.aeth_syndrome;
            self.send_ack(syn, rx.psn);
        } else if rx.mask & M_ATOMIC != 0 {
            let orig = self
                .resp
                .cur_res
                .and_then(|i| self.resp.resources.get(i))
                .map_or(0, |r| r.orig_val);
            let ext = atomic_ack_ext(self.resp.msn, orig);
            self.xmit(Opcode::RcAtomicAcknowledge, rx.psn, false, ext, &[]);
            self.counters.atomic_acks_sent += 1;
            self.resp.cur_res = None;
        } else if rx.mask & (M_FLUSH | M_ATOMIC_WRITE) != 0 {
            let ext = aeth_ext(ACK_UNLIMITED, self.resp.msn);
            self.xmit(Opcode::RcReadResponseOnly, rx.psn, false, ext, &[]);
            self.counters.read_responses_sent += 1;
            self.resp.cur_res = None;
        } else if rx.ack_req {
            self.send_ack(ACK_UNLIMITED, rx.psn);
        }
        Rs::Cleanup
    }

    /// `duplicate_request`: a request before ePSN. SEND/WRITE are re-ACKed (at `ack_psn - 1`,
    /// whatever the duplicate's PSN and AckReq); READ, atomics, FLUSH and ATOMIC WRITE are
    /// replayed from their responder resource, if it is still there, else dropped.
    fn duplicate_request(&mut self, rx: &Rx) -> Rs {
        let prev_psn = self.resp.ack_psn.sub(1);
        if rx.mask & (M_SEND | M_WRITE) != 0 {
            self.send_ack(ACK_UNLIMITED, prev_psn);
            return Rs::Cleanup;
        }
        let Some(i) = self.find_resource(rx.psn) else {
            // Resource not found: class D error, drop the request.
            return Rs::Cleanup;
        };
        if rx.mask & M_FLUSH != 0 {
            if let Some(r) = self.resp.resources.get_mut(i) {
                r.replay = true;
                r.cur_psn = rx.psn;
            }
            self.resp.cur_res = Some(i);
            return Rs::ProcessFlush;
        }
        if rx.mask & M_READ != 0 {
            let Some(reth) = rx.reth else {
                return Rs::Cleanup;
            };
            let Some(r) = self.resp.resources.get_mut(i) else {
                return Rs::Cleanup;
            };
            // The new request must be the old one or a part of it.
            let (va, len) = (reth.virtual_address, reth.dma_len);
            let end_org = r.va_org.saturating_add(u64::from(r.length));
            if va < r.va_org || len > r.length || va.saturating_add(u64::from(len)) > end_org {
                return Rs::Cleanup;
            }
            if reth.rkey != r.rkey {
                return Rs::Cleanup;
            }
            r.cur_psn = rx.psn;
            r.state_new = rx.psn == r.first_psn;
            r.replay = true;
            r.va_org = va;
            r.va = va;
            r.resid = len;
            self.resp.cur_res = Some(i);
            return Rs::ReadReply;
        }
        if let Some(r) = self.resp.resources.get_mut(i) {
            r.replay = true;
            r.cur_psn = rx.psn;
        }
        self.resp.cur_res = Some(i);
        if rx.mask & M_ATOMIC != 0 {
            Rs::AtomicReply
        } else {
            Rs::AtomicWriteReply
        }
    }

    /// `do_class_ac_error`: answer with `syndrome` and take the QP to the error state once the
    /// packet is done.
    fn do_class_ac_error(&mut self, syndrome: Syndrome) {
        self.resp.aeth_syndrome = syndrome;
        self.resp.status_ok = false;
        self.resp.goto_error = true;
    }

    /// `send_ack`: an ACKNOWLEDGE with `syndrome` and the current MSN.
    fn send_ack(&mut self, syndrome: Syndrome, psn: Psn) {
        let ext = aeth_ext(syndrome, self.resp.msn);
        self.xmit(Opcode::RcAcknowledge, psn, false, ext, &[]);
        match syndrome {
            Syndrome::Ack { .. } => self.counters.acks_sent += 1,
            _ => self.counters.naks_sent += 1,
        }
    }
}
