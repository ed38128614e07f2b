//! The reorder stage for real packets: a [`ReorderCore`] over `(egress port, Pkt)`, fed by the
//! worker with the RoCE facts the engine extracted ([`RoceMeta`]), with the hold-time and
//! detection-time histograms.

use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

use super::core::{ReorderConfig, ReorderCore};
use super::pairing::CmEvent;
use super::response::{HostRequest, ResponseKind};
use super::stream::{PortReorder, StreamKey};
use super::totals::ReorderTotals;
use super::{DownlinkStage, MetaKind, RoceMeta, StreamRow};
use crate::engine::Tables;
use crate::ids::PortId;
use crate::port::Pkt;

/// Reordering and statistics of one worker's downlinks.
pub struct ReorderStage {
    core: ReorderCore<(PortId, Pkt)>,
    released: Vec<(PortId, Pkt)>,
    ports: Vec<PortReorder>,
    hold_times: Vec<u64>,
    hist: Histogram<u64>,
    published: Arc<Mutex<Histogram<u64>>>,
    detect_hist: Histogram<u64>,
    detect_published: Arc<Mutex<Histogram<u64>>>,
    last_publish: u64,
    /// The path MTU a local responder showed last (local, remote, remote QPN, bytes): every
    /// READ RESPONSE it sends shows it again. Kept only once a stream took it, with the core's
    /// eviction count then: a stream created since (after an eviction) starts without one.
    last_pmtu: Option<((u128, u128, u32, u16), u64)>,
}

impl ReorderStage {
    /// A stage for the ports of `tables` with limits `cfg`. `per_port[i]` are the settings of
    /// streams towards port `i` (its own hold timeout, its loss recovery; the defaults for a
    /// port not listed).
    ///
    /// # Panics
    /// If `cfg` fails [`ReorderConfig::check`] (the control side checks it first).
    pub fn new(cfg: ReorderConfig, tables: &Tables, per_port: &[PortReorder]) -> ReorderStage {
        let hist =
            Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid histogram bounds");
        ReorderStage {
            core: ReorderCore::new(cfg),
            released: Vec::with_capacity(cfg.window as usize * 2),
            ports: (0..tables.ports.len())
                .map(|i| per_port.get(i).copied().unwrap_or_default())
                .collect(),
            hold_times: Vec::with_capacity(65_536),
            published: Arc::new(Mutex::new(hist.clone())),
            detect_published: Arc::new(Mutex::new(hist.clone())),
            detect_hist: hist.clone(),
            hist,
            last_publish: 0,
            last_pmtu: None,
        }
    }

    /// Where the hold-time histogram is published (every 100 ms, without ever blocking the
    /// worker: it skips a publication when a reader holds the lock).
    pub fn histogram(&self) -> Arc<Mutex<Histogram<u64>>> {
        self.published.clone()
    }

    /// The core, for inspection.
    pub fn core(&self) -> &ReorderCore<(PortId, Pkt)> {
        &self.core
    }

    /// Changes the switch-wide hold timeout.
    pub fn set_hold_timeout(&mut self, ns: u64) {
        self.core.set_hold_timeout(ns);
    }

    fn observe_cm(&mut self, meta: &RoceMeta, now: u64) {
        if let MetaKind::Cm {
            sender_local,
            receiver_local,
            msg,
        } = meta.kind
        {
            let ev = CmEvent {
                sender: meta.local,
                receiver: meta.remote,
                sender_local,
                receiver_local,
                msg,
            };
            self.core.observe_cm(&ev, now, &mut self.released);
        }
    }

    /// Streams created from now on belong to `port`: they get its settings.
    fn for_port(&mut self, port: PortId) {
        self.core.set_port_for_new_streams(
            port,
            self.ports
                .get(usize::from(port))
                .copied()
                .unwrap_or_default(),
        );
    }

    /// Sends on what the core released (the egress queue of each port holds it to the port's
    /// rate).
    fn emit(&mut self, out: &mut Vec<(PortId, Pkt)>) {
        out.append(&mut self.released);
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
        self.for_port(egress);
        let item = (egress, pkt);
        // (No stamp, or no path whose order counts: nothing seen, nobody to check.)
        let waiting = self.core.see_stamp(meta.remote, meta.path, meta.stamp, now);
        match meta.kind {
            MetaKind::Request { read_len } => {
                let key = StreamKey::Request {
                    local: meta.local,
                    qpn: meta.qpn,
                };
                if meta.full_payload > 0 {
                    self.core.learn_request_pmtu(
                        key,
                        u32::from(meta.full_payload),
                        now,
                        &mut self.released,
                    );
                }
                self.core.insert_request_read(
                    key,
                    meta.psn,
                    meta.span,
                    read_len,
                    Some((meta.remote, meta.sport)),
                    meta.path,
                    meta.stamp,
                    meta.len,
                    item,
                    now,
                    &mut self.released,
                );
            }
            MetaKind::Fill { .. } | MetaKind::Ack => {
                let kind = match meta.kind {
                    MetaKind::Fill { ends } => ResponseKind::Fill {
                        ends,
                        full_payload: u32::from(meta.full_payload),
                    },
                    _ => ResponseKind::Ack,
                };
                self.core.insert_response_from(
                    meta.local,
                    meta.remote,
                    meta.sport,
                    meta.qpn,
                    kind,
                    meta.psn,
                    meta.path,
                    meta.stamp,
                    meta.len,
                    item,
                    now,
                    &mut self.released,
                );
            }
            MetaKind::Cm { .. } => {
                self.observe_cm(meta, now);
                self.released.push(item);
            }
            _ => self.released.push(item),
        }
        if waiting {
            self.core.check_stamp_waiting(
                meta.remote,
                meta.path,
                meta.stamp,
                now,
                &mut self.released,
            );
        }
        self.emit(out);
    }

    fn observe(&mut self, port: PortId, meta: &RoceMeta, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        self.for_port(port);
        let read = match meta.kind {
            MetaKind::HostRead { dma_len } => Some(HostRequest::Read {
                dma_len,
                span: meta.span,
            }),
            MetaKind::HostSingle => Some(HostRequest::Single),
            _ => None,
        };
        if let Some(req) = read {
            self.core.observe_read(
                meta.local,
                meta.remote,
                meta.sport,
                meta.qpn,
                meta.psn,
                req,
                now,
                &mut self.released,
            );
            self.emit(out);
            return;
        }
        match meta.kind {
            MetaKind::HostNak => self.core.observe_nak(
                meta.local,
                meta.remote,
                meta.sport,
                meta.qpn,
                meta.psn,
                now,
                &mut self.released,
            ),
            MetaKind::HostPmtu => {
                let seen = (meta.local, meta.remote, meta.qpn, meta.full_payload);
                let epoch = self.core.totals.evictions;
                if self.last_pmtu != Some((seen, epoch)) {
                    let applied = self.core.observe_host_pmtu(
                        meta.local,
                        meta.remote,
                        meta.sport,
                        meta.qpn,
                        meta.psn,
                        u32::from(meta.full_payload),
                        now,
                        &mut self.released,
                    );
                    self.last_pmtu = applied.then_some((seen, epoch));
                }
            }
            MetaKind::HostAck => self.core.observe_ack(
                meta.local,
                meta.remote,
                meta.sport,
                meta.qpn,
                meta.psn,
                now,
                &mut self.released,
            ),
            MetaKind::Cm { .. } => self.observe_cm(meta, now),
            _ => {}
        }
        self.emit(out);
    }

    fn poll(&mut self, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        self.core.poll(now, &mut self.released);
        self.emit(out);
        self.core.take_hold_times(&mut self.hold_times);
        for t in self.hold_times.drain(..) {
            let _ = self.hist.record(t.max(1));
        }
        self.core.take_detection_times(&mut self.hold_times);
        for t in self.hold_times.drain(..) {
            let _ = self.detect_hist.record(t.max(1));
        }
        if now.saturating_sub(self.last_publish) >= 100_000_000 {
            self.last_publish = now;
            if let Ok(mut h) = self.published.try_lock() {
                h.clone_from(&self.hist);
            }
            if let Ok(mut h) = self.detect_published.try_lock() {
                h.clone_from(&self.detect_hist);
            }
        }
    }

    fn relieve(&mut self, packets: usize, now: u64, out: &mut Vec<(PortId, Pkt)>) -> usize {
        let n = self.core.relieve(packets, now, &mut self.released);
        self.emit(out);
        n
    }

    fn held(&self) -> usize {
        self.core.held()
    }

    fn held_bytes_for(&self, port: PortId) -> u64 {
        self.core.held_bytes_for(port)
    }

    fn totals(&self) -> ReorderTotals {
        let mut t = self.core.totals;
        t.held_now = self.held() as u64;
        t
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
            let slot = if best.len() == max {
                let Some(Reverse((_, i))) = best.pop() else {
                    continue;
                };
                kept[i] = StreamRow {
                    key,
                    expected,
                    stats,
                };
                i
            } else {
                kept.push(StreamRow {
                    key,
                    expected,
                    stats,
                });
                kept.len() - 1
            };
            best.push(Reverse((r, slot)));
        }
        kept.sort_by_key(|r| std::cmp::Reverse(rank(&r.stats)));
        kept
    }

    fn hold_histogram(&self) -> Option<Arc<Mutex<Histogram<u64>>>> {
        Some(self.published.clone())
    }

    fn detection_histogram(&self) -> Option<Arc<Mutex<Histogram<u64>>>> {
        Some(self.detect_published.clone())
    }

    fn set_paths(&mut self, count: usize, down: u64, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        self.core.set_paths(count, down, now, &mut self.released);
        self.emit(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::SprayPolicy;
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
}
