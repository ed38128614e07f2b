//! The requester (`rxe_req.c`): walks the send queue, assigns PSNs, builds request packets,
//! and on a retry rewinds to the completer's PSN (`req_retry`).

use sprayswitch::wire::{AtomicEthRepr, ExtRepr, ImmDtRepr, Opcode, RethRepr};

use super::{
    Qp, Step, Transport, Verb, WqeState, ATOMIC_WRITE_VALUE, FLUSH_FETH, M_ATOMIC, M_ATOMIC_WRITE,
    M_END, M_FLUSH, M_IMMDT, M_READ, M_RETH, M_SEND, M_START, M_WRITE, OP_SEND_FIRST,
    OP_SEND_MIDDLE, OP_WRITE_FIRST, OP_WRITE_MIDDLE, PAYLOAD, REMOTE_VA, RKEY, RXE_MAX_PKT_PER_ACK,
    WR_READ, WR_WRITE_OR_SEND,
};

/// `next_opcode_rc` / `next_opcode_uc`: the opcode of the next packet of `verb`, given the
/// opcode of the previous packet sent (`req.opcode`) and whether the rest fits one packet.
/// `None` for a verb the transport lacks (refused at post time, so not reached).
pub(super) fn next_opcode(
    transport: Transport,
    verb: Verb,
    prev: Option<Opcode>,
    fits: bool,
) -> Option<Opcode> {
    let base = match transport {
        Transport::Rc => 0x00u8,
        Transport::Uc => 0x20u8,
    };
    let prev = prev.map(u8::from);
    let in_write = prev == Some(base | OP_WRITE_FIRST) || prev == Some(base | OP_WRITE_MIDDLE);
    let in_send = prev == Some(base | OP_SEND_FIRST) || prev == Some(base | OP_SEND_MIDDLE);
    let pick = |in_msg: bool, last: u8, middle: u8, only: u8, first: u8| match (in_msg, fits) {
        (true, true) => last,
        (true, false) => middle,
        (false, true) => only,
        (false, false) => first,
    };
    let op = match verb {
        Verb::Write { .. } => pick(in_write, 0x08, 0x07, 0x0A, 0x06),
        Verb::WriteImm { .. } => pick(in_write, 0x09, 0x07, 0x0B, 0x06),
        Verb::Send { .. } => pick(in_send, 0x02, 0x01, 0x04, 0x00),
        _ if transport == Transport::Uc => return None,
        Verb::Read { .. } => 0x0C,
        Verb::CompareSwap => 0x13,
        Verb::FetchAdd => 0x14,
        Verb::Flush => 0x1C,
        Verb::AtomicWrite => 0x1D,
    };
    Some(Opcode::from(base | op))
}

impl Qp {
    /// One invocation of `rxe_requester`: sends at most one packet.
    pub(super) fn requester(&mut self) -> Step {
        if self.is_error() {
            // rxe completes the WQE at `wqe_index` with a flush error; `qp_error` already
            // flushed the whole queue.
            return Step::Exit;
        }
        // The retransmit or RNR timer fired: retry, but not while an RNR wait is running.
        if self.req.need_retry && !self.req.wait_for_rnr_timer {
            self.req_retry();
            self.req.need_retry = false;
        }
        let idx = self.req.wqe_index;
        let Some(wqe) = self.sq.get(idx).copied() else {
            return Step::Exit;
        };
        if self.is_rc()
            && self
                .req
                .psn
                .is_after(self.comp.psn.add(self.cfg.device.max_unacked_psns))
        {
            self.req.wait_psn = true;
            return Step::Exit;
        }
        let mtu = self.mtu();
        let Some(opcode) = next_opcode(
            self.cfg.transport,
            wqe.verb,
            self.req.opcode,
            wqe.resid <= mtu,
        ) else {
            return Step::Exit;
        };
        let mask = super::op_mask(opcode, self.cfg.transport);
        if mask & (M_READ | M_ATOMIC | M_ATOMIC_WRITE) != 0 && !self.check_init_depth(idx) {
            return Step::Exit;
        }
        if self.cfg.rate_bps.is_some() && self.now < self.next_send_ns {
            self.pace_at = Some(self.next_send_ns);
            return Step::Exit;
        }
        let payload = if mask & (M_WRITE | M_SEND | M_ATOMIC_WRITE) != 0 {
            wqe.resid.min(mtu)
        } else {
            0
        };
        let psn = self.req.psn;

        // `init_req_packet`: AckReq on the last packet of a message, or when the requester went
        // `RXE_MAX_PKT_PER_ACK` + 1 packets without one (RC only).
        let mut ack_req = false;
        if self.is_rc() {
            ack_req = mask & M_END != 0 || {
                let n = self.req.noack_pkts;
                self.req.noack_pkts += 1;
                n > RXE_MAX_PKT_PER_ACK
            };
            if ack_req {
                self.req.noack_pkts = 0;
            }
        }
        let mut ext = ExtRepr::default();
        if mask & M_RETH != 0 {
            ext.reth = Some(RethRepr {
                virtual_address: REMOTE_VA + wqe.iova_off,
                rkey: RKEY,
                dma_len: wqe.resid,
            });
        }
        if mask & M_FLUSH != 0 {
            ext.feth = Some(FLUSH_FETH);
        }
        if mask & M_IMMDT != 0 {
            ext.immdt = Some(ImmDtRepr { imm: 0xC0FF_EE00 });
        }
        if mask & M_ATOMIC != 0 {
            // CmpSwap: compare 0, swap 1; FetchAdd: add 1.
            let (swap_add, compare) = (1, 0);
            ext.atomic_eth = Some(AtomicEthRepr {
                virtual_address: REMOTE_VA,
                rkey: RKEY,
                swap_add,
                compare,
            });
        }
        let value = ATOMIC_WRITE_VALUE.to_be_bytes();
        let body: &[u8] = if mask & M_ATOMIC_WRITE != 0 {
            &value[..payload.min(8) as usize]
        } else {
            &PAYLOAD[..(payload as usize).min(PAYLOAD.len())]
        };
        let len = self.xmit(opcode, psn, ack_req, ext, body);
        self.pace(len);

        // Retransmission accounting (model): a PSN before the highest sent is a resend.
        let span = if mask & M_READ != 0 {
            self.cfg.pmtu.read_span(wqe.resid)
        } else {
            1
        };
        match self.req.high {
            Some(h) if psn.is_before(h) => {
                self.counters.retransmitted_pkts += 1;
                if psn.add(span).is_after(h) {
                    self.req.high = Some(psn.add(span));
                }
            }
            _ => self.req.high = Some(psn.add(span)),
        }

        let now = self.now;
        let is_rc = self.is_rc();
        let Some(w) = self.sq.get_mut(idx) else {
            return Step::Exit;
        };
        if w.first_sent_ns.is_none() {
            w.first_sent_ns = Some(now);
        }
        // `finish_packet`.
        if mask & (M_WRITE | M_SEND | M_ATOMIC_WRITE) != 0 {
            w.resid -= payload;
        } else if mask & M_FLUSH != 0 {
            w.resid = 0;
        }
        // `update_wqe_state` (`rxe_xmit_packet` marks a UC WQE done when its end is sent).
        w.state = if mask & M_END != 0 {
            if is_rc {
                WqeState::Pending
            } else {
                WqeState::Done
            }
        } else {
            WqeState::Processing
        };
        // `update_wqe_psn`.
        let mtu64 = u64::from(mtu);
        let num_pkt = (u64::from(w.resid) + u64::from(payload))
            .div_ceil(mtu64)
            .max(1);
        let num_pkt = num_pkt as u32;
        if mask & M_START != 0 {
            w.first_psn = psn;
            w.last_psn = psn.add(num_pkt - 1);
        }
        self.req.psn = if mask & M_READ != 0 {
            w.first_psn.add(num_pkt)
        } else {
            psn.add(1)
        };
        // `update_state`.
        self.req.opcode = Some(opcode);
        if mask & M_END != 0 {
            self.req.wqe_index += 1;
        }
        if is_rc && self.cfg.timeout_ns != 0 && self.retrans_at.is_none() {
            self.retrans_at = Some(now.saturating_add(self.cfg.timeout_ns));
        }
        Step::Again
    }

    /// `check_init_depth`: takes a READ/atomic credit for the WQE unless it holds one.
    fn check_init_depth(&mut self, idx: usize) -> bool {
        let Some(w) = self.sq.get_mut(idx) else {
            return false;
        };
        if w.has_rd_atomic {
            return true;
        }
        self.req.need_rd_atomic = true;
        if self.req.rd_atomic > 0 {
            self.req.rd_atomic -= 1;
            self.req.need_rd_atomic = false;
            w.has_rd_atomic = true;
            return true;
        }
        false
    }

    /// Pacing (model): the next request may leave once this one's wire time has passed.
    fn pace(&mut self, frame_len: usize) {
        if let Some(bps) = self.cfg.rate_bps {
            let wire_ns = (frame_len as u128 * 8 * 1_000_000_000 / u128::from(bps.max(1))) as u64;
            self.next_send_ns = self.next_send_ns.max(self.now).saturating_add(wire_ns);
        }
    }

    /// `req_retry`: rewinds the requester to `comp.psn`. Every WQE started and not done goes
    /// back to posted; the first one resumes where the completer stands: a WRITE/SEND skips the
    /// packets before `comp.psn` (`retry_first_write_send`), a READ asks only for the bytes it
    /// has not received (its RETH address and length move on by whole MTUs).
    pub(super) fn req_retry(&mut self) {
        self.req.wqe_index = 0;
        self.req.psn = self.comp.psn;
        self.req.opcode = None;
        let mtu = self.mtu();
        let comp_psn = self.comp.psn;
        let transport = self.cfg.transport;
        let mut first = true;
        let mut first_is_read = false;
        let mut req_opcode = None;
        for w in self.sq.iter_mut() {
            if w.state == WqeState::Posted {
                break;
            }
            if w.state == WqeState::Done {
                continue;
            }
            w.iova_off = 0;
            let mask = w.wr_mask();
            if !first || mask & WR_READ == 0 {
                w.resid = w.length;
            }
            if first {
                first = false;
                if mask & WR_WRITE_OR_SEND != 0 {
                    // `retry_first_write_send`: replay the opcodes of the packets already
                    // answered, so the next packet is a MIDDLE or LAST.
                    let npsn = comp_psn.forward_from(w.first_psn);
                    let span = w.length.div_ceil(mtu).max(1);
                    for _ in 0..npsn.min(span) {
                        let to_send = w.resid.min(mtu);
                        req_opcode = next_opcode(transport, w.verb, req_opcode, w.resid <= mtu);
                        w.resid -= to_send;
                    }
                }
                if mask & WR_READ != 0 {
                    first_is_read = true;
                    let npsn = (w.length - w.resid) / mtu;
                    w.iova_off = u64::from(npsn) * u64::from(mtu);
                }
            }
            w.state = WqeState::Posted;
        }
        self.req.opcode = req_opcode;
        if first_is_read {
            self.counters.read_retries += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::wire::Psn;

    #[test]
    fn opcodes_follow_rxe_next_opcode_tables() {
        let rc = Transport::Rc;
        let w = Verb::Write { len: 0 };
        assert_eq!(next_opcode(rc, w, None, true), Some(Opcode::RcWriteOnly));
        assert_eq!(next_opcode(rc, w, None, false), Some(Opcode::RcWriteFirst));
        let first = Some(Opcode::RcWriteFirst);
        assert_eq!(
            next_opcode(rc, w, first, false),
            Some(Opcode::RcWriteMiddle)
        );
        assert_eq!(next_opcode(rc, w, first, true), Some(Opcode::RcWriteLast));
        let wi = Verb::WriteImm { len: 0 };
        assert_eq!(
            next_opcode(rc, wi, first, true),
            Some(Opcode::RcWriteLastImm)
        );
        assert_eq!(
            next_opcode(rc, wi, None, true),
            Some(Opcode::RcWriteOnlyImm)
        );
        let s = Verb::Send { len: 0 };
        assert_eq!(
            next_opcode(rc, s, Some(Opcode::RcSendMiddle), true),
            Some(Opcode::RcSendLast)
        );
        // A SEND after a WRITE's last packet starts afresh.
        assert_eq!(
            next_opcode(rc, s, Some(Opcode::RcWriteLast), false),
            Some(Opcode::RcSendFirst)
        );
        assert_eq!(
            next_opcode(rc, Verb::Flush, None, true),
            Some(Opcode::RcFlush)
        );
        assert_eq!(
            next_opcode(rc, Verb::AtomicWrite, None, true),
            Some(Opcode::RcAtomicWrite)
        );
        let uc = Transport::Uc;
        assert_eq!(
            next_opcode(uc, s, Some(Opcode::UcSendFirst), false),
            Some(Opcode::UcSendMiddle)
        );
        assert_eq!(next_opcode(uc, Verb::Read { len: 1 }, None, true), None);
        assert_eq!(Psn::new(3).add(0), Psn::new(3));
    }
}
