//! The reorder stage for real packets: a [`ReorderCore`] over `(egress port, Pkt)`, fed by the
//! worker with the RoCE facts the engine extracted ([`RoceMeta`]).
//!
//! Each downlink has its mode ([`DownlinkMode`]): `reorder` holds through the core; `nak_filter`
//! forwards each packet at once and gives the core a mark in its place (an empty packet, which
//! the stage drops wherever the core releases it), so that the core keeps the stream's state
//! and judges the host's NAKs ([`super::nak_filter`]); `pass` forwards without the core.

use super::config::ReorderConfig;
use super::core::ReorderCore;
use super::stream::{DownlinkMode, PortReorder};
use super::totals::ReorderTotals;
use super::{Burst, DownlinkStage, RoceMeta, StreamRow};
use crate::ids::PortId;
use crate::pkt::Pkt;
use crate::tables::Tables;

/// How many packets ahead of its turn [`ReorderStage::insert_burst`] asks for a packet's
/// stream state: enough for the lines to arrive (a few packets' work), few enough that their
/// lines (four each) fit in what the core can have in flight.
const STREAMS_AHEAD: usize = 6;

/// From how many streams on [`ReorderStage::insert_burst`] loads state ahead (and the worker
/// queues packets for it): 2,048 streams of four lines each are half a megabyte, where a
/// core's own cache (1 MiB of L2 here) stops holding them with their index and packets.
const BURSTS_FROM: usize = 2048;

/// Whether two request-direction packets' facts name the same stream (its state is on its
/// way for the first).
#[inline]
fn same_qp(a: &RoceMeta, b: &RoceMeta) -> bool {
    a.qpn == b.qpn
        && a.local == b.local
        && matches!(a.kind, crate::meta::MetaKind::Request { .. })
        && matches!(b.kind, crate::meta::MetaKind::Request { .. })
}

/// Whether packet `i` of a burst (`facts`) starts loading its stream's state: the first, or one of
/// another stream than the packet before it (whose state is on its way already).
#[inline]
fn starts_a_qp(facts: &[(PortId, RoceMeta)], i: usize) -> bool {
    i == 0 || !same_qp(&facts[i - 1].1, &facts[i].1)
}

// The prefetch asks for a stream's first `MAX_LINES` lines: the stream of real packets fits.
const _: () = assert!(
    std::mem::size_of::<super::stream::Stream<(PortId, Pkt)>>() <= 64 * crate::prefetch::MAX_LINES
);

/// Reordering of one worker's downlinks.
pub struct ReorderStage {
    core: ReorderCore<(PortId, Pkt)>,
    /// Each port's mode, by port index.
    modes: Vec<DownlinkMode>,
    /// Whether any port filters NAKs (marks may come out of the core).
    marks: bool,
}

/// A mark in the core for a packet already forwarded (`nak_filter`): no bytes, no buffer.
#[inline]
fn mark(egress: PortId) -> (PortId, Pkt) {
    (egress, Pkt::with_capacity(0))
}

/// Drops the marks among what the core released into `out` from `from` on (in place, in one
/// pass, the order of the rest kept).
#[inline]
pub(super) fn drop_marks(out: &mut Vec<(PortId, Pkt)>, from: usize) {
    let from = from.min(out.len());
    let Some(first) = out[from..].iter().position(|(_, p)| p.is_empty()) else {
        return;
    };
    let mut kept = from + first;
    for i in kept + 1..out.len() {
        if !out[i].1.is_empty() {
            out.swap(kept, i);
            kept += 1;
        }
    }
    out.truncate(kept);
}

impl ReorderStage {
    /// A stage for the ports of `tables` with limits `cfg`. `per_port[i]` are the settings of
    /// streams towards port `i` (its own hold timeout, its loss recovery; the defaults for a
    /// port not listed).
    ///
    /// # Panics
    /// If `cfg` fails [`ReorderConfig::check`] (the control side checks it first).
    pub fn new(cfg: ReorderConfig, tables: &Tables, per_port: &[PortReorder]) -> ReorderStage {
        let mut core = ReorderCore::new(cfg);
        let mut modes = Vec::with_capacity(tables.ports.len());
        for i in 0..tables.ports.len() {
            let settings = per_port.get(i).copied().unwrap_or_default();
            core.set_port(i as PortId, settings);
            modes.push(settings.mode);
        }
        let marks = modes.contains(&DownlinkMode::NakFilter);
        ReorderStage { core, modes, marks }
    }

    #[inline]
    fn mode(&self, port: PortId) -> DownlinkMode {
        self.modes
            .get(usize::from(port))
            .copied()
            .unwrap_or_default()
    }

    /// What the core released since `from`, without marks.
    #[inline]
    fn unmarked(&self, out: &mut Vec<(PortId, Pkt)>, from: usize) {
        if self.marks {
            drop_marks(out, from);
        }
    }

    /// The core, for inspection.
    pub fn core(&self) -> &ReorderCore<(PortId, Pkt)> {
        &self.core
    }
}

impl DownlinkStage for ReorderStage {
    fn insert(
        &mut self,
        egress: PortId,
        pkt: Pkt,
        meta: &RoceMeta,
        now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    ) {
        match self.mode(egress) {
            DownlinkMode::Reorder => {
                // A packet of one downlink may settle streams of another (its source's stamp
                // proves their gaps): marks may come out too.
                let from = out.len();
                self.core
                    .handle_packet(egress, meta, (egress, pkt), now, out);
                self.unmarked(out, from);
            }
            DownlinkMode::NakFilter => {
                out.push((egress, pkt));
                let from = out.len();
                // A mark holds no bytes.
                let meta = RoceMeta { len: 0, ..*meta };
                self.core
                    .handle_packet(egress, &meta, mark(egress), now, out);
                drop_marks(out, from);
            }
            DownlinkMode::Pass => out.push((egress, pkt)),
        }
    }

    fn insert_burst(&mut self, burst: &mut Burst, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        // Ahead of the work: every index slot first, then each stream the slots name a few
        // packets before its turn. With many streams both miss the cache; issued ahead, the
        // misses overlap (VPP's and `rte_hash_lookup_bulk`'s way) instead of each packet
        // waiting for its own in turn. (All of a burst's streams at once asked for more lines
        // than the core can have in flight.) A packet of the same QP as the one before it
        // asks for nothing: its lines are on their way.
        let ahead = self.wants_bursts();
        if ahead {
            let facts = burst.facts();
            for i in 0..facts.len() {
                if starts_a_qp(facts, i) {
                    self.core.prefetch_index(&facts[i].1);
                }
            }
            for i in 0..facts.len().min(STREAMS_AHEAD) {
                if starts_a_qp(facts, i) {
                    self.core.prefetch_stream(&facts[i].1);
                }
            }
        }
        burst.take_each(|facts, i, pkt| {
            // Packet `i` goes in next: the one STREAMS_AHEAD after it starts loading.
            let later = i + STREAMS_AHEAD;
            if ahead && later < facts.len() && starts_a_qp(facts, later) {
                self.core.prefetch_stream(&facts[later].1);
            }
            let (egress, meta) = &facts[i];
            self.insert(*egress, pkt, meta, now, out);
        });
    }

    fn wants_bursts(&self) -> bool {
        self.core.stream_count() >= BURSTS_FROM
    }

    fn observe(&mut self, port: PortId, meta: &RoceMeta, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        let from = out.len();
        self.core.handle_host(port, meta, now, out);
        self.unmarked(out, from);
    }

    fn host_nak(
        &mut self,
        port: PortId,
        meta: &RoceMeta,
        nak: (PortId, Pkt),
        now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    ) -> Option<(PortId, Pkt)> {
        let mut nak = nak;
        if self.mode(port) == DownlinkMode::NakFilter {
            // It may be kept back and go out later, after newer stamps of this switch.
            crate::wire::stamp::clear(nak.1.data_mut());
        }
        let from = out.len();
        let passed = self.core.handle_host_nak(port, meta, nak, now, out);
        self.unmarked(out, from);
        passed
    }

    fn poll(&mut self, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        if self.core.poll_due(now) {
            let from = out.len();
            self.core.poll(now, out);
            self.unmarked(out, from);
        }
    }

    fn poll_timeout(&self) -> u64 {
        self.core.poll_timeout()
    }

    fn relieve(&mut self, packets: usize, now: u64, out: &mut Vec<(PortId, Pkt)>) -> usize {
        // Marks hold no buffer: the core never gives up a nak_filter stream's gap for one.
        self.core.relieve(packets, now, out)
    }

    fn held(&self) -> usize {
        self.core.held()
    }

    fn held_bytes_for(&self, port: PortId) -> u64 {
        self.core.held_bytes_for(port)
    }

    fn totals(&self) -> ReorderTotals {
        self.core.totals()
    }

    fn take_times(&mut self, hold: &mut Vec<u64>, detect: &mut Vec<u64>) {
        self.core.take_hold_times(hold);
        self.core.take_detection_times(detect);
    }

    fn set_hold_timeout(&mut self, ns: u64) {
        self.core.set_hold_timeout(ns);
    }

    /// The `max` busiest streams without sorting them all: one pass keeping the best `max` in
    /// a heap, so that a table of 131k streams costs the packet thread one scan.
    fn snapshot(&self, max: usize) -> Vec<StreamRow> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        if max == 0 {
            return Vec::new();
        }
        let rank = |s: &super::StreamStats| (s.held, s.released);
        let mut best: BinaryHeap<Reverse<((u64, u64), usize)>> = BinaryHeap::with_capacity(max + 1);
        let mut kept: Vec<StreamRow> = Vec::with_capacity(max);
        for (key, expected, stats) in self.core.streams() {
            let r = rank(&stats);
            if best.len() == max {
                match best.peek() {
                    Some(Reverse((low, _))) if r > *low => {}
                    _ => continue,
                }
            }
            let row = StreamRow {
                key,
                expected,
                stats,
            };
            let slot = if best.len() == max {
                let Some(Reverse((_, i))) = best.pop() else {
                    continue;
                };
                kept[i] = row;
                i
            } else {
                kept.push(row);
                kept.len() - 1
            };
            best.push(Reverse((r, slot)));
        }
        kept.sort_by_key(|r| std::cmp::Reverse(rank(&r.stats)));
        kept
    }

    fn reorders(&self) -> bool {
        true
    }

    fn set_paths(&mut self, count: usize, down: u64, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        let from = out.len();
        self.core.set_paths(count, down, now, out);
        self.unmarked(out, from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::MetaKind;
    use crate::tables::SprayPolicy;
    use crate::testkit::tor_tables;
    use crate::wire::Psn;

    /// A stage whose port 0 has a 10 us hold timeout, the switch's being 1 ms.
    fn port_0_at_10_us(t: &Tables) -> ReorderStage {
        let cfg = ReorderConfig {
            learn_ns: 0,
            hold_timeout_ns: 1_000_000,
            ..ReorderConfig::default()
        };
        let port_0 = PortReorder {
            hold_timeout_ns: Some(10_000),
            ..PortReorder::default()
        };
        ReorderStage::new(cfg, t, &[port_0, PortReorder::default()])
    }

    fn meta(qpn: u32, psn: u32, len: u32) -> RoceMeta {
        RoceMeta {
            local: 1,
            remote: 2,
            sport: 3,
            qpn,
            psn: Psn::new(psn),
            span: 1,
            full_payload: 0,
            len,
            kind: MetaKind::Request { read_len: None },
            path: crate::meta::NO_PATH,
            stamp: crate::meta::PathStamp::NONE,
        }
    }

    fn pkt(len: usize) -> Pkt {
        let mut p = Pkt::with_capacity(len);
        p.resize(len);
        p
    }

    #[test]
    fn bytes_held_count_towards_their_own_downlink() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let cfg = ReorderConfig {
            learn_ns: 0,
            ..ReorderConfig::default()
        };
        let mut s = ReorderStage::new(cfg, &t, &[]);
        let mut out = Vec::new();
        // PSN 0 starts each stream; 10 packets of 1000 bytes wait behind PSN 1 towards port 1.
        s.insert(1, pkt(1000), &meta(1, 0, 1000), 0, &mut out);
        s.insert(0, pkt(500), &meta(2, 0, 500), 0, &mut out);
        for p in 2..12 {
            s.insert(1, pkt(1000), &meta(1, p, 1000), 0, &mut out);
        }
        s.insert(0, pkt(500), &meta(2, 2, 500), 0, &mut out);
        assert_eq!((s.held_bytes_for(1), s.held_bytes_for(0)), (10_000, 500));
        assert_eq!(s.held_bytes_for(7), 0, "a port with no streams");
        s.insert(1, pkt(1000), &meta(1, 1, 1000), 0, &mut out);
        assert_eq!((s.held_bytes_for(1), s.held_bytes_for(0)), (0, 500));
        s.poll(10_000_000_000, &mut out);
        assert_eq!(s.held_bytes_for(0), 0, "released by the timeout");
        assert_eq!(out.len(), 14);
        // A worker that stops polls once at the end of time (twice: nothing overflows).
        s.poll(u64::MAX, &mut out);
        s.poll(u64::MAX, &mut out);
    }

    #[test]
    fn marks_are_dropped_in_place_and_the_rest_keeps_its_order() {
        let p = |n: usize| {
            let mut k = Pkt::with_capacity(n);
            k.resize(n);
            k
        };
        let mut out: Vec<(PortId, Pkt)> = vec![(0, p(10)), (0, p(0)), (1, p(11)), (0, p(0))];
        out.push((2, p(12)));
        drop_marks(&mut out, 1);
        let lens: Vec<usize> = out.iter().map(|(_, k)| k.len()).collect();
        assert_eq!(lens, vec![10, 11, 12]);
    }

    #[test]
    fn each_downlink_has_its_mode() {
        let t = tor_tables(3, 0, SprayPolicy::Ecmp);
        let cfg = ReorderConfig {
            learn_ns: 0,
            ..ReorderConfig::default()
        };
        let mode = |mode| PortReorder {
            mode,
            ..PortReorder::default()
        };
        let ports = [
            mode(DownlinkMode::Reorder),
            mode(DownlinkMode::NakFilter),
            mode(DownlinkMode::Pass),
        ];
        let mut s = ReorderStage::new(cfg, &t, &ports);
        let mut out = Vec::new();
        // PSNs 0, 2, 1 of one QP towards each port.
        for port in [0u16, 1, 2] {
            let q = u32::from(port) + 10;
            for p in [0, 2, 1] {
                s.insert(port, pkt(100 + p as usize), &meta(q, p, 100), 0, &mut out);
            }
        }
        let lens = |out: &[(PortId, Pkt)], port| {
            out.iter()
                .filter(|(p, _)| *p == port)
                .map(|(_, k)| k.len())
                .collect::<Vec<_>>()
        };
        assert_eq!(lens(&out, 0), vec![100, 101, 102], "reordered");
        assert_eq!(lens(&out, 1), vec![100, 102, 101], "as they came");
        assert_eq!(lens(&out, 2), vec![100, 102, 101], "as they came");
        // Only the reorder port held a byte; the pass port has no stream at all.
        assert_eq!(s.totals().peak_held_bytes, 100);
        assert_eq!(s.totals().streams, 2);
    }

    #[test]
    fn a_downlink_can_have_its_own_hold_timeout() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let mut s = port_0_at_10_us(&t);
        let mut out = Vec::new();
        for port in [0u16, 1] {
            let q = u32::from(port) + 10;
            s.insert(port, pkt(100), &meta(q, 0, 100), 0, &mut out);
            s.insert(port, pkt(100), &meta(q, 2, 100), 0, &mut out);
        }
        out.clear();
        s.poll(20_000, &mut out);
        assert_eq!(out.len(), 1, "port 0's stream timed out after 10 us");
        assert_eq!(out[0].0, 0);
        s.poll(2_000_000, &mut out);
        assert_eq!(out.len(), 2, "port 1's stream after the switch's 1 ms");
        assert_eq!(s.totals().timeouts, 2);
    }

    #[test]
    fn a_response_stream_gets_the_hold_timeout_of_its_own_downlink() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let mut s = port_0_at_10_us(&t);
        let mut out = Vec::new();
        // Port 1 (the switch's 1 ms) saw a request last; then the host on port 0 reads.
        s.insert(1, pkt(100), &meta(9, 0, 100), 0, &mut out);
        let read = RoceMeta {
            kind: MetaKind::HostRead { dma_len: 4096 },
            span: 4,
            qpn: 0x22,
            ..meta(0, 50, 100)
        };
        s.observe(0, &read, 0, &mut out);
        let fill = RoceMeta {
            kind: MetaKind::Fill { ends: false },
            full_payload: 1024,
            qpn: 0x11,
            ..meta(0, 51, 1100)
        };
        s.insert(0, pkt(1100), &fill, 0, &mut out);
        out.clear();
        s.poll(20_000, &mut out);
        assert_eq!(out.len(), 1, "port 0's 10 us, not port 1's 1 ms");
        assert_eq!(s.totals().timeouts, 1);
    }

    /// A READ stream evicted and re-created learns its QP's path MTU again from the local
    /// responder's READ RESPONSEs, which show the same path MTU as before: without it, its
    /// READ REQUESTs are spanned at the engine's estimate and the next request waits for PSNs
    /// that never come, a hold timeout per READ.
    #[test]
    fn a_read_stream_re_created_after_eviction_learns_the_path_mtu_again() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let cfg = ReorderConfig {
            learn_ns: 0,
            idle_evict_ns: 1_000_000,
            hold_timeout_ns: 1_000_000_000,
            ..ReorderConfig::default()
        };
        let mut s = ReorderStage::new(cfg, &t, &[]);
        let mut out = Vec::new();
        // A READ of 64 KiB: the engine sized it at 4096 bytes (16 PSNs); the QP runs at 1024.
        let read = |psn| RoceMeta {
            kind: MetaKind::Request {
                read_len: Some(65_536),
            },
            span: 16,
            ..meta(9, psn, 60)
        };
        // The local responder's READ RESPONSE MIDDLE to the remote QP 0x77: its path MTU.
        let shows_pmtu = |psn| RoceMeta {
            kind: MetaKind::HostPmtu,
            full_payload: 1024,
            qpn: 0x77,
            ..meta(0, psn, 1100)
        };
        // First life: the READ at 1 spans 1..=64, so the SEND at 65 is next.
        s.insert(0, pkt(100), &meta(9, 0, 100), 0, &mut out);
        s.insert(0, pkt(60), &read(1), 0, &mut out);
        s.observe(0, &shows_pmtu(1), 0, &mut out);
        s.insert(0, pkt(100), &meta(9, 65, 100), 0, &mut out);
        assert_eq!((out.len(), s.held()), (3, 0));
        s.poll(2_000_000, &mut out);
        assert_eq!(s.totals().evictions, 1, "idle: the stream is forgotten");
        // Second life: the same QP reads again, its responses show the same path MTU.
        out.clear();
        s.insert(0, pkt(60), &read(66), 3_000_000, &mut out);
        s.observe(0, &shows_pmtu(66), 3_000_000, &mut out);
        s.insert(0, pkt(100), &meta(9, 130, 100), 3_000_000, &mut out);
        assert_eq!(
            s.held(),
            0,
            "the SEND after the READ waits for no PSN that never comes"
        );
        assert_eq!(out.len(), 2);
    }

    /// Bursts change nothing but when state loads: a stage fed in bursts (prefetching, past
    /// `BURSTS_FROM` streams) releases the same packets in the same order as one fed one by
    /// one, holding, filling gaps and timing out alike.
    #[test]
    fn bursts_release_what_one_by_one_releases() {
        let t = tor_tables(2, 0, SprayPolicy::Ecmp);
        let cfg = ReorderConfig {
            learn_ns: 0,
            hold_timeout_ns: 50_000,
            max_streams: 8192,
            ..ReorderConfig::default()
        };
        let mut single = ReorderStage::new(cfg, &t, &[]);
        let mut bursty = ReorderStage::new(cfg, &t, &[]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let (mut burst, mut copies) = (Burst::default(), Vec::new());
        let streams = 3000u32;
        let mut tag = 0u32;
        let mut now = 1u64;
        // Each stream's packets in a block of 3 with the first last, every 7th stream's
        // first one lost (its gap times out), blocks of neighbouring streams interleaved.
        for round in 0..4u32 {
            for q in 0..streams {
                let base = round * 3;
                for (k, p) in [base + 1, base + 2, base].into_iter().enumerate() {
                    if p == base && q % 7 == 0 && round == 1 {
                        continue;
                    }
                    tag += 1;
                    let mut pkt = pkt(8);
                    pkt.data_mut()[..4].copy_from_slice(&tag.to_be_bytes());
                    let m = meta(q + 1, p, 8);
                    copies.push((1, Pkt::from_slice(pkt.data()), m));
                    burst.push(1, pkt, m);
                    if burst.len() == 32 || (k == 2 && q % 97 == 0) {
                        // One clock reading per burst, as a worker has.
                        for (e, p, m) in copies.drain(..) {
                            single.insert(e, p, &m, now, &mut a);
                        }
                        bursty.insert_burst(&mut burst, now, &mut b);
                        assert!(burst.is_empty());
                    }
                }
                now += 20;
            }
            for (e, p, m) in copies.drain(..) {
                single.insert(e, p, &m, now, &mut a);
            }
            bursty.insert_burst(&mut burst, now, &mut b);
            single.poll(now, &mut a);
            bursty.poll(now, &mut b);
        }
        now += 1_000_000;
        single.poll(now, &mut a);
        bursty.poll(now, &mut b);
        assert!(bursty.wants_bursts(), "past BURSTS_FROM streams");
        let tags = |v: &Vec<(PortId, Pkt)>| -> Vec<u32> {
            v.iter()
                .map(|(_, p)| u32::from_be_bytes(p.data()[..4].try_into().unwrap()))
                .collect()
        };
        assert_eq!(a.len() as u32, tag, "everything came out");
        let (ta, tb) = (tags(&a), tags(&b));
        let first = ta.iter().zip(&tb).position(|(x, y)| x != y);
        assert_eq!(
            (ta.len(), first),
            (tb.len(), None),
            "the same packets in the same order"
        );
        assert_eq!(single.totals(), bursty.totals());
        assert!(single.totals().timeouts > 0, "gaps timed out");
    }
}
