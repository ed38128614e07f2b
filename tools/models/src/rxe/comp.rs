//! The completer (`rxe_comp.c`): takes READ responses, ACKs, NAKs and atomic ACKs in the order
//! they arrive, completes send WQEs, and starts retries (NAK, implied NAK, retransmit timer) and
//! RNR waits.

use sprayswitch::wire::{NakCode, Opcode, Syndrome};

use super::{
    rnr_timer_ns, Qp, QpError, Rx, Step, Verb, WqeState, M_END, M_START, WR_ATOMIC_OR_READ,
};

/// The completer's states (`enum comp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cs {
    GetAck,
    GetWqe,
    CompWqe,
    CompAck,
    CheckPsn,
    CheckAck,
    Read,
    Atomic,
    WriteSend,
    UpdateComp,
    ErrorRetry,
    RnrRetry,
    Error,
    Exit,
    Done,
}

impl Qp {
    /// One invocation of `rxe_completer`: handles at most one response packet.
    pub(super) fn completer(&mut self) -> Step {
        self.req.again = false;
        if self.is_error() {
            // `drain_resp_pkts` and `flush_send_queue`: `qp_error` did both.
            return Step::Exit;
        }
        self.comp.timeout_retry = std::mem::take(&mut self.comp.timeout);
        if self.req.need_retry {
            return self.exit_step();
        }
        let mut pkt: Option<Rx> = None;
        let mut st = Cs::GetAck;
        for _ in 0..1024 {
            st = match st {
                Cs::GetAck => {
                    pkt = self.resp_q.pop_front();
                    if pkt.is_some() {
                        self.comp.timeout_retry = false;
                    }
                    Cs::GetWqe
                }
                Cs::GetWqe => self.get_wqe(pkt.is_some()),
                Cs::CheckPsn => match pkt {
                    Some(p) => self.check_psn(&p),
                    None => Cs::Done,
                },
                Cs::CheckAck => match pkt {
                    Some(p) => self.check_ack(&p),
                    None => Cs::Done,
                },
                Cs::Read => match pkt {
                    Some(p) => self.do_read(&p),
                    None => Cs::Done,
                },
                // `do_atomic`: the original value lands in the local buffer.
                Cs::Atomic => Cs::CompAck,
                Cs::WriteSend => match (pkt, self.sq.front()) {
                    (Some(p), Some(w)) if w.state == WqeState::Pending && w.last_psn == p.psn => {
                        Cs::CompAck
                    }
                    _ => Cs::UpdateComp,
                },
                Cs::CompAck => match pkt {
                    Some(p) => self.complete_ack(&p),
                    None => Cs::Done,
                },
                Cs::CompWqe => {
                    self.complete_wqe(pkt.is_some());
                    Cs::GetWqe
                }
                Cs::UpdateComp => {
                    if let Some(p) = pkt {
                        self.comp.opcode = if p.mask & M_END != 0 {
                            None
                        } else {
                            Some(p.opcode)
                        };
                        if p.psn.distance(self.comp.psn) >= 0 {
                            self.comp.psn = p.psn.add(1);
                        }
                    }
                    self.wake_wait_psn();
                    Cs::Done
                }
                Cs::Done => return Step::Again,
                Cs::Exit => {
                    let waiting = self.sq.front().is_some();
                    if self.comp.timeout_retry && waiting {
                        Cs::ErrorRetry
                    } else {
                        self.reset_retry_timer();
                        return self.exit_step();
                    }
                }
                Cs::ErrorRetry => {
                    // There is nothing to retry.
                    match self.sq.front() {
                        None => return self.exit_step(),
                        Some(w) if w.state == WqeState::Posted => return self.exit_step(),
                        Some(_) => {}
                    }
                    if self.comp.timeout_retry {
                        self.counters.timeouts += 1;
                    }
                    // One retry sequence at a time, unless this is a timeout.
                    if self.comp.started_retry && !self.comp.timeout_retry {
                        return Step::Again;
                    }
                    if self.comp.retry_cnt > 0 {
                        if self.comp.retry_cnt != 7 {
                            self.comp.retry_cnt -= 1;
                        }
                        // No point in retrying if the last ACK the requester could cause was
                        // seen.
                        if self.req.psn.is_after(self.comp.psn) {
                            self.counters.completer_retry_err += 1;
                            self.req.need_retry = true;
                            self.comp.started_retry = true;
                            self.req.again = true;
                        }
                        return Step::Again;
                    }
                    self.counters.retry_exceeded_err += 1;
                    self.set_front_status(QpError::RetryExceeded);
                    Cs::Error
                }
                Cs::RnrRetry => {
                    if self.comp.rnr_retry > 0 {
                        if self.comp.rnr_retry != 7 {
                            self.comp.rnr_retry -= 1;
                        }
                        // Don't start a retry flow until the RNR timer has fired.
                        self.req.wait_for_rnr_timer = true;
                        let code = match pkt.and_then(|p| p.aeth).map(|a| a.syndrome) {
                            Some(Syndrome::RnrNak { timer }) => timer,
                            _ => 0,
                        };
                        self.rnr_at = Some(self.now.saturating_add(rnr_timer_ns(code)));
                        return self.exit_step();
                    }
                    self.counters.retry_rnr_exceeded_err += 1;
                    self.set_front_status(QpError::RnrRetryExceeded);
                    Cs::Error
                }
                Cs::Error => {
                    let why = self
                        .sq
                        .front()
                        .and_then(|w| w.status)
                        .unwrap_or(QpError::BadResponse);
                    self.set_front_status(why);
                    self.do_complete();
                    self.qp_error(why);
                    return self.exit_step();
                }
            };
        }
        Step::Again
    }

    /// rxe's `exit:` label: run again only if someone asked for it.
    fn exit_step(&mut self) -> Step {
        let again = std::mem::take(&mut self.req.again);
        if again {
            Step::Again
        } else {
            Step::Exit
        }
    }

    /// `get_wqe`.
    fn get_wqe(&mut self, have_pkt: bool) -> Cs {
        match self.sq.front().map(|w| w.state) {
            None | Some(WqeState::Posted) => {
                if have_pkt {
                    // A response with no WQE waiting for it.
                    self.counters.stale_responses += 1;
                    Cs::Done
                } else {
                    Cs::Exit
                }
            }
            Some(WqeState::Done) => Cs::CompWqe,
            Some(_) => {
                if have_pkt {
                    Cs::CheckPsn
                } else {
                    Cs::Exit
                }
            }
        }
    }

    /// `reset_retry_counters`.
    fn reset_retry_counters(&mut self) {
        self.comp.retry_cnt = self.cfg.retry_cnt;
        self.comp.rnr_retry = self.cfg.rnr_retry;
        self.comp.started_retry = false;
    }

    /// `check_psn`.
    fn check_psn(&mut self, p: &Rx) -> Cs {
        let Some(w) = self.sq.front().copied() else {
            return Cs::Done;
        };
        let read_or_atomic = w.wr_mask() & WR_ATOMIC_OR_READ != 0;
        // A response past the oldest WQE: complete a SEND/WRITE (the response implies its
        // ACK), retry a READ/atomic (its responses were lost: an implied NAK).
        if p.psn.is_after(w.last_psn) {
            if w.state == WqeState::Pending {
                if read_or_atomic {
                    self.counters.implied_naks += 1;
                    return Cs::ErrorRetry;
                }
                self.reset_retry_counters();
                return Cs::CompWqe;
            }
            self.counters.stale_responses += 1;
            return Cs::Done;
        }
        let diff = p.psn.distance(self.comp.psn);
        if diff < 0 {
            // Most likely a retried response: if it ends the WQE complete it, else ignore it
            // (but let an ACK inside a READ's responses through, for its NAK code).
            if p.psn == w.last_psn {
                return Cs::CompAck;
            }
            if p.opcode == Opcode::RcAcknowledge
                && matches!(
                    self.comp.opcode,
                    Some(Opcode::RcReadResponseFirst | Opcode::RcReadResponseMiddle)
                )
            {
                return Cs::CheckAck;
            }
            self.counters.stale_responses += 1;
            Cs::Done
        } else if diff > 0 && read_or_atomic {
            // A READ/atomic response that skipped a PSN: dropped.
            self.counters.out_of_seq_responses += 1;
            Cs::Done
        } else {
            Cs::CheckAck
        }
    }

    /// `check_ack`.
    fn check_ack(&mut self, p: &Rx) -> Cs {
        let Some(w) = self.sq.front().copied() else {
            return Cs::Done;
        };
        // The opcode sequence only.
        match self.comp.opcode {
            None => {
                if p.mask & M_START == 0 {
                    return Cs::Error;
                }
            }
            Some(Opcode::RcReadResponseFirst | Opcode::RcReadResponseMiddle) => {
                let ok = p.opcode == Opcode::RcAcknowledge
                    || p.opcode == Opcode::RcReadResponseMiddle
                    || p.opcode == Opcode::RcReadResponseLast
                    // READ retries of partial data may restart with FIRST or ONLY.
                    || (p.psn == w.first_psn && p.opcode == Opcode::RcReadResponseFirst)
                    || (w.first_psn == w.last_psn && p.opcode == Opcode::RcReadResponseOnly);
                if !ok {
                    return Cs::Error;
                }
            }
            // rxe: WARN_ON_ONCE(1); never set to anything else.
            Some(_) => {}
        }
        let syn = p.aeth.map(|a| a.syndrome);
        let is_read_like = matches!(w.verb, Verb::Read { .. } | Verb::Flush);
        match p.opcode {
            Opcode::RcReadResponseFirst
            | Opcode::RcReadResponseLast
            | Opcode::RcReadResponseOnly
            | Opcode::RcReadResponseMiddle => {
                if p.opcode != Opcode::RcReadResponseMiddle {
                    if !matches!(syn, Some(Syndrome::Ack { .. })) {
                        return Cs::Error;
                    }
                    if w.verb == Verb::AtomicWrite {
                        return Cs::WriteSend;
                    }
                }
                if !is_read_like {
                    return Cs::Error;
                }
                self.reset_retry_counters();
                Cs::Read
            }
            Opcode::RcAtomicAcknowledge => {
                if !matches!(syn, Some(Syndrome::Ack { .. })) {
                    return Cs::Error;
                }
                if !matches!(w.verb, Verb::CompareSwap | Verb::FetchAdd) {
                    return Cs::Error;
                }
                self.reset_retry_counters();
                Cs::Atomic
            }
            Opcode::RcAcknowledge => match syn {
                Some(Syndrome::Ack { .. }) => {
                    self.reset_retry_counters();
                    Cs::WriteSend
                }
                Some(Syndrome::RnrNak { .. }) => {
                    self.counters.rcvd_rnr_err += 1;
                    Cs::RnrRetry
                }
                Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
                    // A NAK implicitly acks every packet before its PSN.
                    if p.psn.is_after(self.comp.psn) {
                        self.counters.rcvd_seq_err += 1;
                        self.comp.psn = p.psn;
                        self.wake_wait_psn();
                    }
                    Cs::ErrorRetry
                }
                Some(Syndrome::Nak(NakCode::InvalidRequest)) => {
                    self.set_front_status(QpError::RemoteInvalidRequest);
                    Cs::Error
                }
                Some(Syndrome::Nak(NakCode::RemoteAccessError)) => {
                    self.set_front_status(QpError::RemoteAccess);
                    Cs::Error
                }
                Some(Syndrome::Nak(_)) => {
                    self.set_front_status(QpError::RemoteOperational);
                    Cs::Error
                }
                _ => Cs::Error,
            },
            _ => Cs::Error,
        }
    }

    /// `do_read`: the response's payload lands in the READ's buffer.
    fn do_read(&mut self, p: &Rx) -> Cs {
        let Some(w) = self.sq.front_mut() else {
            return Cs::Done;
        };
        if p.payload_len > w.resid {
            w.status = Some(QpError::LocalProtection);
            return Cs::Error;
        }
        w.resid -= p.payload_len;
        if w.resid == 0 && p.mask & M_END != 0 {
            Cs::CompAck
        } else {
            Cs::UpdateComp
        }
    }

    /// `complete_ack`: completes the front WQE on its own response and returns its
    /// READ/atomic credit.
    fn complete_ack(&mut self, p: &Rx) -> Cs {
        if let Some(w) = self.sq.front_mut() {
            if w.has_rd_atomic {
                w.has_rd_atomic = false;
                self.req.rd_atomic += 1;
                if self.req.need_rd_atomic {
                    self.comp.timeout_retry = false;
                    self.req.need_rd_atomic = false;
                    self.req.again = true;
                }
            }
        }
        self.do_complete();
        if p.psn.distance(self.comp.psn) >= 0 {
            Cs::UpdateComp
        } else {
            Cs::Done
        }
    }

    /// `complete_wqe`: completes the front WQE because a later response implied its ACK (or,
    /// without a packet, because it needs none). Unlike `complete_ack` it does not return a
    /// READ/atomic credit: an ATOMIC WRITE completed this way keeps its credit forever, as in
    /// rxe.
    fn complete_wqe(&mut self, have_pkt: bool) {
        if let Some(w) = self.sq.front().copied() {
            if have_pkt && w.state == WqeState::Pending {
                if w.last_psn.distance(self.comp.psn) >= 0 {
                    self.comp.psn = w.last_psn.add(1);
                    self.comp.opcode = None;
                }
                self.wake_wait_psn();
            }
        }
        self.do_complete();
    }

    /// The completer moved `comp.psn`: a requester waiting on the PSN window may go on.
    fn wake_wait_psn(&mut self) {
        if self.req.wait_psn {
            self.req.wait_psn = false;
            self.req.again = true;
        }
    }

    /// Sets the completion status of the front WQE, unless it has one.
    fn set_front_status(&mut self, why: QpError) {
        if let Some(w) = self.sq.front_mut() {
            if w.status.is_none() {
                w.status = Some(why);
            }
        }
    }

    /// `reset_retry_timer`: while requests are unanswered, push the retransmit timer out to a
    /// full timeout from now (rxe "kicks it down the road" on every completer run).
    fn reset_retry_timer(&mut self) {
        if self.is_rc()
            && self.cfg.timeout_ns != 0
            && !self.is_error()
            && self.req.psn.is_after(self.comp.psn)
        {
            self.retrans_at = Some(self.now.saturating_add(self.cfg.timeout_ns));
        }
    }
}
