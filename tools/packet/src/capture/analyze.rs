//! The capture analyser: per QP stream of a capture, how the PSNs arrived. `rocecap analyze`.
//!
//! A stream is (source, destination, DestQP, direction). For every packet, with `h` the highest
//! PSN seen so far in the stream:
//! - `p` right after `h` is in order;
//! - `p` further ahead opens a gap of the PSNs between (counted once each);
//! - `p` behind `h` that was never seen arrived *reordered*, `h - p` PSNs late (its depth);
//! - `p` seen before is a *retransmission* (or a duplicate).
//!
//! NAKs (AETH PSN sequence error and other NAK codes) are counted in the stream that carries them.
//! Response streams of ACKs are not contiguous (ACKs are cumulative and coalesced): their gaps
//! are normal.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use serde::Serialize;
use sprayswitch::wire::{classify, Direction, Pmtu, Psn, Syndrome};

/// The report of one stream.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamReport {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// Destination QP.
    pub dest_qp: u32,
    /// `request` or `response` (`cnp`/`ud` for those).
    pub direction: &'static str,
    /// Packets.
    pub packets: u64,
    /// First PSN seen.
    pub first_psn: u32,
    /// Highest PSN seen (serial order).
    pub highest_psn: u32,
    /// Gaps opened (a packet arriving more than one PSN ahead).
    pub gaps: u64,
    /// PSNs skipped by those gaps.
    pub gap_psns: u64,
    /// Packets that arrived behind the highest PSN, first time seen.
    pub reordered: u64,
    /// Reordering depth distribution: bucket upper bound (1, 2, 4, 8, ...) -> packets.
    pub reorder_depth: BTreeMap<u32, u64>,
    /// Largest reordering depth.
    pub max_depth: u32,
    /// Packets whose PSN had been seen before.
    pub retransmitted: u64,
    /// NAKs carried by this stream.
    pub naks: u64,
    /// Fraction of packets that arrived out of order (reordered / packets).
    pub out_of_order_fraction: f64,
}

#[derive(Default)]
struct State {
    report: Option<StreamReport>,
    high: Psn,
    seen: HashSet<u32>,
}

/// Accumulates streams over the frames of a capture.
#[derive(Default)]
pub struct Analyzer {
    streams: BTreeMap<(IpAddr, IpAddr, u32, &'static str), State>,
    /// Frames that were not RoCE or did not parse.
    pub other_frames: u64,
}

const MAX_SEEN: usize = 1 << 20;

impl Analyzer {
    /// Takes one frame.
    pub fn add(&mut self, frame: &[u8]) {
        let Ok(c) = classify(frame, Pmtu::DEFAULT) else {
            self.other_frames += 1;
            return;
        };
        let Some(r) = c.roce() else {
            self.other_frames += 1;
            return;
        };
        let dir = match r.direction {
            Some(Direction::Request) if r.transport == sprayswitch::wire::Transport::Ud => "ud",
            Some(Direction::Request) => "request",
            Some(Direction::Response) => "response",
            None => "cnp",
        };
        let key = (r.ip.src, r.ip.dst, r.bth.dest_qp, dir);
        let st = self.streams.entry(key).or_default();
        let p = r.bth.psn;
        let rep = st.report.get_or_insert_with(|| StreamReport {
            src: r.ip.src.to_string(),
            dst: r.ip.dst.to_string(),
            dest_qp: r.bth.dest_qp,
            direction: dir,
            packets: 0,
            first_psn: p.value(),
            highest_psn: p.value(),
            gaps: 0,
            gap_psns: 0,
            reordered: 0,
            reorder_depth: BTreeMap::new(),
            max_depth: 0,
            retransmitted: 0,
            naks: 0,
            out_of_order_fraction: 0.0,
        });
        rep.packets += 1;
        if matches!(r.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_))) {
            rep.naks += 1;
        }
        if rep.packets == 1 {
            st.high = p;
            st.seen.insert(p.value());
            return;
        }
        let d = p.distance(st.high);
        if d > 0 {
            if d > 1 {
                rep.gaps += 1;
                rep.gap_psns += (d - 1) as u64;
            }
            st.high = p;
            rep.highest_psn = p.value();
        } else if st.seen.contains(&p.value()) {
            rep.retransmitted += 1;
        } else {
            rep.reordered += 1;
            let depth = (-d) as u32;
            rep.max_depth = rep.max_depth.max(depth);
            *rep.reorder_depth
                .entry(depth.next_power_of_two())
                .or_default() += 1;
        }
        if st.seen.len() < MAX_SEEN {
            st.seen.insert(p.value());
        }
        rep.out_of_order_fraction = rep.reordered as f64 / rep.packets as f64;
    }

    /// The reports, in a stable order.
    pub fn reports(&self) -> Vec<StreamReport> {
        self.streams
            .values()
            .filter_map(|s| s.report.clone())
            .collect()
    }
}

/// One line of text per stream.
pub fn human(r: &StreamReport) -> String {
    let depths: Vec<String> = r
        .reorder_depth
        .iter()
        .map(|(b, n)| format!("<={b}:{n}"))
        .collect();
    format!(
        "{} > {} qp 0x{:06x} {}: {} pkts, psn {}..{}, gaps {} ({} psns), reordered {} ({:.1}%, depth {}{}), retransmitted {}, naks {}",
        r.src,
        r.dst,
        r.dest_qp,
        r.direction,
        r.packets,
        r.first_psn,
        r.highest_psn,
        r.gaps,
        r.gap_psns,
        r.reordered,
        100.0 * r.out_of_order_fraction,
        if depths.is_empty() { "-".to_string() } else { depths.join(" ") },
        if r.max_depth > 0 { format!(", max {}", r.max_depth) } else { String::new() },
        r.retransmitted,
        r.naks
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprayswitch::wire::{BthRepr, IpRepr, Opcode, RoceFrameRepr};
    use std::net::Ipv4Addr;

    fn write(psn: u32) -> Vec<u8> {
        let ip = IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            id: 0,
        };
        let bth = BthRepr::new(Opcode::RcWriteMiddle, 0x11, Psn::new(psn));
        RoceFrameRepr::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], ip, bth)
            .with_payload(&[0; 64])
            .to_vec()
            .unwrap()
    }

    #[test]
    fn a_hand_worked_sequence() {
        // 0 1 3 2 5 4 2 6 9 7: gap at 3 (2 skipped), at 5 (4), at 9 (7, 8);
        // reordered: 2 (depth 1), 4 (1), 7 (2); retransmitted: the second 2.
        let mut a = Analyzer::default();
        for p in [0xFF_FFFE, 0xFF_FFFF, 1, 0, 3, 2, 0, 4, 7, 5] {
            a.add(&write(p));
        }
        let r = &a.reports()[0];
        assert_eq!(r.packets, 10);
        assert_eq!((r.gaps, r.gap_psns), (3, 4));
        assert_eq!((r.reordered, r.max_depth, r.retransmitted), (3, 2, 1));
        assert_eq!(r.reorder_depth, BTreeMap::from([(1, 2), (2, 1)]));
        assert_eq!(r.highest_psn, 7, "across the wrap at 2^24");
    }
}
