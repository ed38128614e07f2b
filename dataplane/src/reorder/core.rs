//! The reorder core: per-stream PSN rings over one preallocated slot pool, generic over what is
//! held, driven by the caller's clock. This file holds the limits, the stream table, timers and
//! eviction; [`super::stream`] the per-stream state, [`super::ring`] the rings and far lists,
//! [`super::request`] the request direction, [`super::response`] the response direction and
//! [`super::pairing`] QP pairing and RDMA CM.
//!
//! **Bounds.** Streams, rings (a stream takes a ring only while it holds packets) and held bytes
//! are capped by [`ReorderConfig`]; held packets live in one preallocated slot pool. A packet
//! that cannot be held (no stream or ring left, byte cap, slot taken) passes through and is
//! counted by reason. Idle streams are evicted a few at a time by [`ReorderCore::poll`].
//!
//! Single-owner and lock-free by construction: a `ReorderCore` is owned by one worker, every
//! change needs `&mut self`, and it is not `Clone`; other workers hand packets to that worker
//! through lock-free rings whose consuming end only the owner holds (`worker::HandoffRx`).

use super::pairing::Pairing;
use super::paths::Proof;
use super::response::ReadRange;
use super::skew::{SkewWindow, SKEW_TIMEOUT_FACTOR};
use super::sources::{SourceStamps, StampSeen, MAX_SOURCES};
use super::stream::{
    LazyDeque, LossRecovery, Phase, PortReorder, Slot, Stream, StreamKey, StreamStats, WaitingAck,
    NOT_NAKED, NO_RING,
};
use super::totals::ReorderTotals;
use crate::ids::IntMap;
use crate::meta::PathStamp;
use crate::wire::Psn;

/// How many times `idle_evict_ns` a response stream with requests still unanswered is kept.
pub const READ_WAIT_FACTOR: u64 = 10;

/// How many hold timeouts a Go-Back-N host's gap is held once the host has NAKed it (see
/// `ReorderCore::hold_limit`).
pub const NAKED_WAIT_FACTOR: u64 = 64;

/// Limits and timers of a reorder core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReorderConfig {
    /// Ring size `W` in PSNs (a power of two, 64 to 4096).
    pub window: u32,
    /// Streams tracked at once.
    pub max_streams: usize,
    /// Streams that may hold packets at once (each holding stream uses one ring of `window`
    /// slots).
    pub max_rings: usize,
    /// Bytes held at once, all streams together.
    pub max_held_bytes: usize,
    /// How long a gap may stay open before its PSN is declared lost.
    pub hold_timeout_ns: u64,
    /// How long a new stream collects packets before choosing its starting PSN.
    pub learn_ns: u64,
    /// A stream idle this long is forgotten; one with READ, atomic or FLUSH requests still
    /// unanswered, `READ_WAIT_FACTOR` (10) times as long.
    pub idle_evict_ns: u64,
    /// Outstanding READ/atomic ranges tracked per QP. Above what any requester may have
    /// outstanding (Soft-RoCE allows 128, ConnectX 16), so that no range is forgotten while its
    /// responses can still come.
    pub max_reads: usize,
    /// The prefix lengths (IPv4, IPv6) of a sender's address that all hosts behind one
    /// source ToR share: path stamps ([`crate::engine::stamp`]) of those hosts are taken as
    /// one counter's (per lane and priority), so each proves the others' gaps. (32, 128):
    /// each host on its own.
    pub stamp_source_prefix: (u8, u8),
}

impl Default for ReorderConfig {
    fn default() -> Self {
        ReorderConfig {
            window: 256,
            max_streams: 131_072,
            max_rings: 1024,
            max_held_bytes: 64 << 20,
            hold_timeout_ns: 500_000,
            learn_ns: 100_000,
            idle_evict_ns: 2_000_000_000,
            max_reads: 256,
            stamp_source_prefix: (32, 128),
        }
    }
}

impl ReorderConfig {
    /// Checks the limits.
    ///
    /// # Errors
    /// A message naming the field.
    pub fn check(&self) -> Result<(), String> {
        if !self.window.is_power_of_two() || !(64..=4096).contains(&self.window) {
            return Err(format!(
                "window {}: a power of two from 64 to 4096",
                self.window
            ));
        }
        if self.max_streams == 0 || self.max_rings == 0 || self.max_reads == 0 {
            return Err("max_streams, max_rings and max_reads must be at least 1".into());
        }
        let (v4, v6) = self.stamp_source_prefix;
        if v4 > 32 || v6 > 128 {
            return Err(format!(
                "stamp_source_prefix [{v4}, {v6}]: at most 32 (IPv4) and 128 (IPv6) bits"
            ));
        }
        Ok(())
    }
}

/// Packets one request stream holds beyond its ring's window, in windows: 4 (1024 packets at
/// the default window of 256).
pub(super) const FAR_WINDOWS: usize = 4;

/// Per-stream PSN rings over a shared, preallocated slot pool.
pub struct ReorderCore<T> {
    pub(super) cfg: ReorderConfig,
    pub(super) mask: u32,
    /// Every stream, by index: the `stream: u32` the methods of every file take.
    pub(super) streams: Vec<Stream<T>>,
    pub(super) index: IntMap<StreamKey, u32>,
    pub(super) free_streams: Vec<u32>,
    pub(super) slots: Vec<Option<Slot<T>>>,
    pub(super) bitmaps: Vec<u64>,
    pub(super) free_rings: Vec<u32>,
    /// Streams that hold packets or are learning (their timers need checking).
    pub(super) active: Vec<u32>,
    pub(super) pairing: Pairing,
    pub(super) held_bytes: usize,
    /// Bytes held per downlink (indexed by the port streams were created for).
    pub(super) port_held: Vec<u64>,
    pub(super) evict_hand: usize,
    /// When idle streams are next looked for (the scan is paced in time, not per poll: a
    /// worker polls every iteration, and 32 lookups per iteration were the largest cost of a
    /// worker's idle loop in the fabric simulator's profile).
    pub(super) next_evict_scan: u64,
    /// What streams created from now on get (their downlink's settings), and that downlink.
    pub(super) next_port: PortReorder,
    pub(super) next_port_id: u16,
    /// Fabric paths there are, and those down now (a bit per path: they do not block a
    /// path-order decision).
    pub(super) paths: usize,
    pub(super) paths_down: u64,
    /// The stream found by the last lookup.
    pub(super) last: Option<(StreamKey, u32)>,
    /// Totals.
    pub totals: ReorderTotals,
    pub(super) hold_ns: Vec<u64>,
    pub(super) detect_ns: Vec<u64>,
    /// How late the paths have delivered lately ([`super::skew`]).
    pub(super) skew: SkewWindow,
    /// Each source host's path stamps, per priority ([`super::sources`]).
    pub(super) sources: IntMap<(u128, u8), SourceStamps>,
    /// The waiting streams being checked (kept to reuse its allocation).
    pub(super) stamp_scratch: Vec<u32>,
}

/// Why a packet cannot be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoHold {
    /// Its slot holds a PSN one window apart.
    Collision,
    /// No ring or byte budget left.
    NoRoom,
}

impl<T> ReorderCore<T> {
    /// A core with every structure allocated up front.
    ///
    /// # Panics
    /// If `cfg` fails [`ReorderConfig::check`].
    pub fn new(cfg: ReorderConfig) -> Self {
        if let Err(e) = cfg.check() {
            panic!("invalid reorder configuration: {e}");
        }
        let w = cfg.window as usize;
        let mut slots = Vec::with_capacity(cfg.max_rings * w);
        slots.resize_with(cfg.max_rings * w, || None);
        let mut index = IntMap::default();
        index.reserve(cfg.max_streams);
        ReorderCore {
            mask: cfg.window - 1,
            streams: Vec::with_capacity(cfg.max_streams),
            index,
            free_streams: Vec::with_capacity(cfg.max_streams),
            slots,
            bitmaps: vec![0; cfg.max_rings * w / 64],
            free_rings: (0..cfg.max_rings as u32).rev().collect(),
            active: Vec::with_capacity(cfg.max_rings + 64),
            pairing: Pairing::new(cfg.max_streams),
            held_bytes: 0,
            port_held: vec![0],
            next_evict_scan: 0,
            evict_hand: 0,
            next_port: PortReorder::default(),
            next_port_id: 0,
            paths: 0,
            paths_down: 0,
            last: None,
            totals: ReorderTotals::default(),
            hold_ns: Vec::with_capacity(1024),
            detect_ns: Vec::with_capacity(64),
            skew: SkewWindow::default(),
            sources: IntMap::default(),
            stamp_scratch: Vec::with_capacity(super::sources::WAITING_MAX),
            cfg,
        }
    }

    /// The limits in force.
    pub fn config(&self) -> ReorderConfig {
        self.cfg
    }

    /// Changes the hold timeout (and nothing else) from now on.
    pub fn set_hold_timeout(&mut self, ns: u64) {
        let old = self.cfg.hold_timeout_ns;
        self.cfg.hold_timeout_ns = ns;
        for s in &mut self.streams {
            if s.timeout == old {
                s.timeout = ns;
            }
        }
    }

    /// The downlink streams created from now on belong to (`id`: the bytes they hold count
    /// towards its queue) and its settings (its own hold timeout and loss recovery). The stage
    /// sets them before every call that may create a stream.
    #[inline]
    pub fn set_port_for_new_streams(&mut self, id: u16, port: PortReorder) {
        self.next_port = port;
        self.next_port_id = id;
        if self.port_held.len() <= usize::from(id) {
            self.port_held.resize(usize::from(id) + 1, 0);
        }
    }

    /// Bytes held now for downlink `id`.
    #[inline]
    pub fn held_bytes_for(&self, id: u16) -> u64 {
        self.port_held.get(usize::from(id)).copied().unwrap_or(0)
    }

    /// Hold times (ns) of packets released since the last call, for the owner's histogram.
    pub fn take_hold_times(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.hold_ns);
    }

    /// Detection times (ns: gap opened to declared lost by path order) since the last call.
    pub fn take_detection_times(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.detect_ns);
    }

    /// The fabric paths there are (`count`, numbered as [`crate::meta::RoceMeta::path`]) and
    /// those down now (`down`, a bit per path): a path that is down no longer blocks a
    /// path-order decision, so on a change every stream holding packets is checked again.
    pub fn set_paths(&mut self, count: usize, down: u64, now: u64, out: &mut Vec<T>) {
        if (count, down) == (self.paths, self.paths_down) {
            return;
        }
        self.paths = count;
        self.paths_down = down;
        if down != 0 {
            for src in self.sources.values_mut() {
                src.forget_down(down);
            }
        }
        for i in 0..self.active.len() {
            if let Some(&stream) = self.active.get(i) {
                self.check_path_loss(stream, now, out);
            }
        }
    }

    /// Packets held now.
    pub fn held(&self) -> usize {
        self.totals.held_now as usize
    }

    /// Rings free now (every ring returns when its stream holds nothing).
    pub fn free_rings(&self) -> usize {
        self.free_rings.len()
    }

    /// Bytes held now.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Per-stream statistics, for inspection (not on the packet path).
    pub fn streams(&self) -> impl Iterator<Item = (StreamKey, Psn, StreamStats)> + '_ {
        self.index.iter().map(move |(k, i)| {
            let s = &self.streams[*i as usize];
            (*k, s.expected, s.stats)
        })
    }

    /// The expected PSN of a stream, if it is known.
    pub fn expected(&self, key: &StreamKey) -> Option<Psn> {
        let s = &self.streams[*self.index.get(key)? as usize];
        match s.phase {
            Phase::Active => Some(s.expected),
            Phase::Learning { .. } => None,
        }
    }

    /// Approximate bytes of state excluding packets: streams, index, slot pool, pairs.
    pub fn state_bytes(&self) -> usize {
        self.streams.capacity() * std::mem::size_of::<Stream<T>>()
            + self
                .streams
                .iter()
                .map(|s| {
                    s.reads.capacity() * std::mem::size_of::<ReadRange>()
                        + s.far.capacity() * std::mem::size_of::<Slot<T>>()
                        + s.acks.capacity() * std::mem::size_of::<WaitingAck<T>>()
                        + s.paths.heap_bytes()
                })
                .sum::<usize>()
            + self.index.capacity() * (std::mem::size_of::<(StreamKey, u32)>() + 1)
            + self.slots.capacity() * std::mem::size_of::<Option<Slot<T>>>()
            + self.bitmaps.capacity() * 8
            + self.pairing.state_bytes()
            + self.free_streams.capacity() * 4
            + self.active.capacity() * 4
    }

    /// The stream of `key`, created (Learning for request streams without a known start,
    /// Active otherwise) when `create` and there is room.
    pub(super) fn stream_for(&mut self, key: StreamKey, now: u64, create: bool) -> Option<u32> {
        // Bursts mostly come from one QP: remember the last stream looked up.
        if let Some((k, i)) = self.last {
            if k == key {
                return Some(i);
            }
        }
        if let Some(i) = self.index.get(&key) {
            self.last = Some((key, *i));
            return Some(*i);
        }
        if !create {
            return None;
        }
        if self.index.len() >= self.cfg.max_streams {
            self.totals.table_full += 1;
            return None;
        }
        let start = self.pairing.take_start(&key);
        let phase = match key {
            StreamKey::Request { .. } if start.is_none() => Phase::Learning {
                until: now.saturating_add(self.cfg.learn_ns),
                min: Psn::new(0),
                max: Psn::new(0),
            },
            _ => Phase::Active,
        };
        let s = Stream {
            key,
            expected: start.unwrap_or(Psn::new(0)),
            phase,
            ring: NO_RING,
            held: 0,
            in_ring: 0,
            gap_since: now,
            last_seen: now,
            timeout: self
                .next_port
                .hold_timeout_ns
                .unwrap_or(self.cfg.hold_timeout_ns),
            recovery: self.next_port.recovery,
            port: self.next_port_id,
            paths: Default::default(),
            in_active: false,
            peer_seen: false,
            host_naked: NOT_NAKED,
            far: LazyDeque::default(),
            reads: LazyDeque::default(),
            acks: LazyDeque::default(),
            pmtu: 0,
            est_read: None,
            stats: StreamStats::default(),
        };
        let i = match self.free_streams.pop() {
            Some(i) => {
                self.streams[i as usize] = s;
                i
            }
            None => {
                self.streams.push(s);
                (self.streams.len() - 1) as u32
            }
        };
        self.index.insert(key, i);
        self.last = Some((key, i));
        self.totals.streams = self.index.len() as u64;
        self.totals.peak_streams = self.totals.peak_streams.max(self.totals.streams);
        if matches!(phase, Phase::Learning { .. }) {
            self.mark_active(i);
        }
        Some(i)
    }

    /// The stream of `key` if it exists.
    pub(super) fn find(&self, key: &StreamKey) -> Option<u32> {
        if let Some((k, i)) = self.last {
            if k == *key {
                return Some(i);
            }
        }
        self.index.get(key).copied()
    }

    /// Lists a stream for timer checks (once).
    pub(super) fn mark_active(&mut self, stream: u32) {
        let s = &mut self.streams[stream as usize];
        if !s.in_active {
            s.in_active = true;
            self.active.push(stream);
        }
    }

    // ------------------------------------------------------------------ timers and eviction

    /// Checks timers at `now`: ends learning windows, declares timed-out gaps lost (releasing
    /// what is held, in order), and evicts a few idle streams.
    pub fn poll(&mut self, now: u64, out: &mut Vec<T>) {
        let skew = self.skew.largest(now);
        let mut i = 0;
        while i < self.active.len() {
            let stream = self.active[i];
            if let Phase::Learning { until, .. } = self.streams[stream as usize].phase {
                if now >= until {
                    self.finish_learning(stream, now, out);
                }
            }
            let s = &self.streams[stream as usize];
            if matches!(s.phase, Phase::Active)
                && s.held > 0
                && now.saturating_sub(s.gap_since) >= self.hold_limit(stream, skew)
            {
                self.timeout(stream, now, out);
            }
            let s = &self.streams[stream as usize];
            if s.held == 0 && matches!(s.phase, Phase::Active) {
                self.streams[stream as usize].in_active = false;
                self.active.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if now >= self.next_evict_scan {
            // 32 streams per period: a table of 131k streams is swept in 4096 periods, well
            // within the idle time that evicts (the period is at most 1/8192 of it, 10 us).
            self.next_evict_scan = now.saturating_add((self.cfg.idle_evict_ns / 8192).min(10_000));
            self.evict_some(now, out, 32);
            if self.pairing.entries() > 2 * self.index.len() + super::pairing::SEEN_SLACK {
                // The QPs of streams gone are of no use to the pairing any more.
                self.prune_pairing();
            }
        }
    }

    /// How long the gap of `stream` may stay open before it is given up: its hold timeout, but
    /// for a stream over path-order paths at least [`SKEW_TIMEOUT_FACTOR`] times the paths'
    /// `skew` ([`super::skew`]: a shorter timeout gives up on packets still on their way); and
    /// a Go-Back-N host that has NAKed the gap (the switch saw its NAK go out, over a fabric
    /// path) gets [`NAKED_WAIT_FACTOR`] times as long. Its sender has been told and resends
    /// from the gap, after whatever its own send queue holds (the RNIC models' hosts and
    /// Soft-RoCE guests take milliseconds under load); releasing what is held before that
    /// gains nothing, because the host drops every packet out of sequence, and costs what
    /// the switch held for it: each packet must then come again. The idle eviction and the
    /// window bound what the stream may hold meanwhile.
    pub(super) fn hold_limit(&self, stream: u32, skew: Option<u64>) -> u64 {
        let s = &self.streams[stream as usize];
        let limit = match skew {
            Some(k) if s.paths.tracked() => s.timeout.max(k.saturating_mul(SKEW_TIMEOUT_FACTOR)),
            _ => s.timeout,
        };
        if s.recovery == LossRecovery::NakFirst && s.paths.host_naked(s.expected) {
            limit.saturating_mul(NAKED_WAIT_FACTOR)
        } else {
            limit
        }
    }

    /// A packet of `psn` was released in order at `now`; `gap`: the stream's expected PSN and
    /// when its gap opened, if it held packets before. A packet that fills that gap and is not
    /// a retransmission shows how late the paths deliver ([`super::skew`]).
    pub(super) fn learn_skew(&mut self, stream: u32, psn: Psn, gap: Option<(Psn, u64)>, now: u64) {
        let Some((e, since)) = gap else { return };
        if e == psn && self.streams[stream as usize].paths.fill_is_sample(psn) {
            let late = now.saturating_sub(since);
            self.skew.record(now, late);
            self.totals.peak_path_skew_ns = self.totals.peak_path_skew_ns.max(late);
        }
    }

    /// The largest time a gap stayed open before its own packet came, lately (ns), once
    /// learned ([`super::skew`]).
    pub fn path_skew(&self, now: u64) -> Option<u64> {
        self.skew.largest(now)
    }

    pub(super) fn timeout(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        self.streams[stream as usize].stats.timeouts += 1;
        self.totals.timeouts += 1;
        self.give_up(stream, now, out);
    }

    /// Gives up the receive buffers held behind the oldest gaps until at least `packets` are
    /// released (or nothing is held): a receive pool runs low, and a port whose pool is empty
    /// receives nothing, the retransmissions that would fill those gaps included. Each gap
    /// goes as a hold timeout would let it go (what is held released in PSN order), oldest
    /// first; counted in `pool_give_ups`. Spraying spreads every stream's packets over every
    /// uplink, so each stream that holds behind a gap pins buffers of every uplink's pool:
    /// which one runs low does not change which gaps are the oldest. Returns what was released.
    pub fn relieve(&mut self, packets: usize, now: u64, out: &mut Vec<T>) -> usize {
        let before = out.len();
        while out.len() - before < packets {
            let oldest = self
                .active
                .iter()
                .copied()
                .filter(|&i| self.streams[i as usize].held > 0)
                .min_by_key(|&i| self.streams[i as usize].gap_since);
            let Some(stream) = oldest else { break };
            if matches!(self.streams[stream as usize].phase, Phase::Learning { .. }) {
                self.finish_learning(stream, now, out);
                if self.streams[stream as usize].held == 0 {
                    continue;
                }
            }
            let held = self.streams[stream as usize].held;
            self.totals.pool_give_ups += 1;
            self.give_up(stream, now, out);
            if self.streams[stream as usize].held >= held {
                // Nothing could go (cannot happen: a give-up releases what is held); never
                // spin on it.
                break;
            }
        }
        out.len() - before
    }

    /// Gives up on the gap of `stream` (its hold timed out, or its buffers are needed).
    fn give_up(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        match self.streams[stream as usize].key {
            StreamKey::Request { .. } => {
                // Give up on the gap: release everything held, in order. The RNIC sees the gap
                // and NAKs; its NAK resyncs `e` so that the retransmission is reordered (and
                // starts a new pass of the paths' evidence). A timeout after a path-order
                // decision is the backstop: the retransmission did not come either, so nothing
                // is kept back any longer.
                //
                // A Go-Back-N host that NAKed this very gap is the exception: it drops what is
                // released now without a word (it NAKs once per gap, rxe's `sent_psn_nak`) and
                // takes only the gap next, which its sender resends, with everything after it,
                // when its retransmission timer fires. The expected PSN stays at the gap, so
                // that pass is ordered like the first (passed as late, its packets would race
                // each other over the paths, and the host would drop and NAK again). The
                // downlink's `nak_first` says the host is Go-Back-N; a selective-repeat host
                // left on it keeps what is released, and its ACK moves the stream on
                // (`observe_ack`).
                let s = &mut self.streams[stream as usize];
                s.paths.forget_pending();
                let stuck =
                    s.recovery == LossRecovery::NakFirst && s.host_naked == s.expected.value();
                let after = self.flush_ring(stream, now, out);
                let s = &mut self.streams[stream as usize];
                if stuck {
                    s.paths.new_pass(false);
                    self.totals.naked_gaps_kept += 1;
                } else if let Some(after) = after {
                    s.expected = after;
                }
            }
            StreamKey::Response { .. } => self.response_timeout(stream, now, out),
        }
    }

    /// What proves the gap at `stream`'s expected PSN lost, with its source's stamps.
    pub(super) fn proof(&self, stream: u32, now: u64) -> (Proof, Option<(u8, u16)>) {
        let s = &self.streams[stream as usize];
        self.proof_at(stream, s.expected, now)
    }

    /// What proves that nothing at or below `gap` of `stream` is still in flight.
    pub(super) fn proof_at(&self, stream: u32, gap: Psn, now: u64) -> (Proof, Option<(u8, u16)>) {
        let s = &self.streams[stream as usize];
        let src = s.paths.source().and_then(|a| self.sources.get(&a));
        s.paths.proof(gap, self.paths, self.paths_down, src, now)
    }

    /// Notes that `stream` waits for stamp `need` of its source on `path`.
    pub(super) fn wait_for_stamp(&mut self, stream: u32, (path, need): (u8, u16), learning: bool) {
        let s = &self.streams[stream as usize];
        if let Some(src) = s.paths.source().and_then(|a| self.sources.get_mut(&a)) {
            src.wait(stream, path, need, learning);
        }
    }

    /// The source a sender's stamps count for: its address, or the prefix of it that the
    /// hosts of one source ToR share ([`ReorderConfig::stamp_source_prefix`]).
    #[inline]
    pub(super) fn stamp_source(&self, addr: u128) -> u128 {
        let (v4, v6) = self.cfg.stamp_source_prefix;
        if addr >> 32 == 0xFFFF {
            // IPv4-mapped: the prefix counts in the low 32 bits.
            let keep = u32::MAX
                .checked_shl(32 - u32::from(v4.min(32)))
                .unwrap_or(0);
            addr & !u128::from(!keep)
        } else {
            addr & u128::MAX
                .checked_shl(128 - u32::from(v6.min(128)))
                .unwrap_or(0)
        }
    }

    /// A packet of `source` with path stamp `stamp` arrived on fabric `path`
    /// ([`super::sources`]). True when streams of the source wait for stamps: then call
    /// [`ReorderCore::check_stamp_waiting`] after inserting the packet.
    pub fn see_stamp(&mut self, source: u128, path: u8, stamp: PathStamp, now: u64) -> bool {
        if stamp.seq == 0 || usize::from(path) >= crate::meta::MAX_PATHS {
            return false;
        }
        let key = (self.stamp_source(source), stamp.counter());
        if self.sources.len() >= MAX_SOURCES && !self.sources.contains_key(&key) {
            self.sources.clear();
        }
        let src = self.sources.entry(key).or_default();
        let seen = src.see(path, stamp.seq, now);
        let waiting = !src.waiting.is_empty();
        if seen == (StampSeen::Disorder { first: true }) {
            self.totals.stamp_disorder += 1;
        }
        waiting
    }

    /// Checks again the gaps of `source`'s streams that waited for the stamp a packet of it
    /// just brought on `path` (those waiting for that path and at most that stamp).
    pub fn check_stamp_waiting(
        &mut self,
        source: u128,
        path: u8,
        stamp: PathStamp,
        now: u64,
        out: &mut Vec<T>,
    ) {
        let key = (self.stamp_source(source), stamp.counter());
        let Some(src) = self.sources.get_mut(&key) else {
            return;
        };
        if src.waiting.is_empty() {
            return;
        }
        // The scratch list keeps its allocation; a stream still waiting registers again.
        let mut due = std::mem::take(&mut self.stamp_scratch);
        src.take_due(path, stamp.seq, &mut due);
        for &stream in &due {
            self.check_path_loss(stream, now, out);
        }
        due.clear();
        self.stamp_scratch = due;
    }

    /// Declares the gap at a stream's expected PSN lost if every fabric path the stream uses
    /// has delivered above it ([`super::paths`]), and recovers as its downlink chose.
    ///
    /// A response stream's requester retries a READ or atomic only when a response or ACK
    /// comes whose PSN is past that request's last (rxe's completer, `check_psn`: a response
    /// out of sequence within the READ is dropped without a word; ConnectX as modelled does
    /// the same). So a lost response is acted on once a fill of a later request is held: that
    /// one goes out at once, out of sequence, and the requester retries from the first
    /// response it is missing. The rest stays; the retry's first response releases it in order
    /// (the retry's copies of what is held are dropped here as duplicates). Until a later
    /// request's fill comes nothing would make the requester retry sooner, so the gap waits
    /// (the hold timeout is the backstop). The responder answers the retry from the gap again,
    /// below what the paths delivered: that starts the paths' new pass.
    pub(super) fn check_path_loss(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        let Some(s) = self.streams.get(stream as usize) else {
            return;
        };
        if s.held == 0 {
            return;
        }
        if let Phase::Learning { min, until, .. } = s.phase {
            // Once learning ends, the gap now in front (a packet of the first burst lost) may
            // be proven already.
            self.learn_from_paths(stream, min, until, now, out);
            let s = &self.streams[stream as usize];
            if s.held == 0 || !matches!(s.phase, Phase::Active) {
                return;
            }
        }
        let (proof, wait) = self.proof(stream, now);
        if proof == Proof::Missing {
            // A stamp of its source on the path that blocks may prove it: wait for one.
            if let Some(wait) = wait {
                self.wait_for_stamp(stream, wait, false);
            }
            return;
        }
        let s = &self.streams[stream as usize];
        if s.paths.is_deferred() {
            // Declared already; it waits for an earlier gap's retransmission.
            return;
        }
        let response = matches!(s.key, StreamKey::Response { .. });
        let e = s.expected;
        let trigger = if response {
            match self.response_trigger(stream) {
                Some(q) => Some(q),
                None => return,
            }
        } else {
            None
        };
        let detected = now.saturating_sub(s.paths.opened(s.gap_since));
        self.detect_ns.push(detected);
        self.totals.path_losses += 1;
        if proof == Proof::Stamps {
            self.totals.stamp_losses += 1;
        }
        let s = &mut self.streams[stream as usize];
        s.stats.path_losses += 1;
        s.paths.declared(e);
        if let Some(trigger) = trigger {
            s.paths.new_pass(false);
            s.gap_since = now;
            self.release_trigger(stream, trigger, now, out);
            return;
        }
        match s.recovery {
            LossRecovery::ReleaseRun => {
                // A selective-repeat RNIC NAKs the first out-of-sequence packet after a gap,
                // once, until the gap fills: a second gap released before the first one's
                // retransmission passed would get no NAK, and wait for the requester's
                // timeout. So it waits here until then (see `insert_request_read`).
                if s.paths.defer() {
                    return;
                }
                self.release_run(stream, now, out);
            }
            LossRecovery::NakFirst => {
                // The first held packet goes out of sequence: the RNIC NAKs the gap. The rest
                // waits for the retransmission, a new pass; the gap gets a full hold timeout
                // from now.
                s.paths.new_pass(false);
                if let Some(q) = self.next_held_psn(stream, e) {
                    if let Some(slot) = self.take_held(stream, q, now) {
                        out.push(slot.item);
                        self.totals.nak_releases += 1;
                    }
                }
                let s = &mut self.streams[stream as usize];
                s.gap_since = now;
            }
        }
    }

    /// Releases what follows a stream's gap, up to the next gap (for a selective-repeat RNIC,
    /// which keeps it and NAKs the gap): `e` moves to that next gap. The gaps to come lie
    /// above what the paths delivered, so their evidence stands (the host's NAK, if it moves
    /// `e` back, starts a new pass).
    pub(super) fn release_run(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        let gap = self.streams[stream as usize].expected;
        let Some(q) = self.next_held_psn(stream, gap) else {
            return;
        };
        self.streams[stream as usize].expected = q;
        self.drain_request(stream, now, out);
        self.streams[stream as usize].paths.nak_pending(gap);
    }

    pub(super) fn evict_some(&mut self, now: u64, out: &mut Vec<T>, budget: usize) {
        let n = self.streams.len();
        if n == 0 {
            return;
        }
        for _ in 0..budget.min(n) {
            self.evict_hand = (self.evict_hand + 1) % n;
            let stream = self.evict_hand as u32;
            let s = &self.streams[stream as usize];
            let live = self.index.get(&s.key) == Some(&stream);
            // A response stream with READs outstanding is waiting, not idle: their responses
            // can queue behind other traffic far longer than a stream's packets are apart, and
            // forgetting the ranges would let the ACKs after them pass the responses.
            let after = if s.reads.is_empty() {
                self.cfg.idle_evict_ns
            } else {
                self.cfg.idle_evict_ns.saturating_mul(READ_WAIT_FACTOR)
            };
            if live && now.saturating_sub(s.last_seen) >= after {
                self.free_stream(stream, now, out);
                self.totals.evictions += 1;
            }
        }
    }

    /// Forgets `stream`, releasing (in order) whatever it still holds.
    pub(super) fn free_stream(&mut self, stream: u32, now: u64, out: &mut Vec<T>) {
        self.flush_ring(stream, now, out);
        while let Some(a) = self.streams[stream as usize].acks.pop_front() {
            self.ack_taken(stream, &a, now);
            out.push(a.item);
        }
        let s = &mut self.streams[stream as usize];
        if s.ring != NO_RING {
            // Only reachable if a ring was taken without a packet; never keep it from the pool.
            self.free_rings.push(s.ring);
            s.ring = NO_RING;
        }
        let key = s.key;
        s.far = LazyDeque::default();
        s.reads = LazyDeque::default();
        s.acks = LazyDeque::default();
        self.index.remove(&key);
        self.last = None;
        self.free_streams.push(stream);
        if self.streams[stream as usize].in_active {
            self.streams[stream as usize].in_active = false;
            self.active.retain(|a| *a != stream);
        }
        self.totals.streams = self.index.len() as u64;
    }
}
