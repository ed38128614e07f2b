//! The reorder core: per-stream PSN rings, generic over what is held, driven by the caller's
//! clock. It implements the semantics of the architecture notes ("Reorder semantics"):
//!
//! | case (PSN `p`, expected `e`, window `W`) | action |
//! |---|---|
//! | `p == e` | release, advance `e` by the packet's PSN span, release every consecutive held packet |
//! | `e < p < e + W` | hold in slot `p mod W`; start the gap timer if it is not running |
//! | `p >= e + W` | overflow: release held packets in order (skipping gaps) until `p` fits |
//! | `p < e` (within 2^23) | late or retransmitted: release at once |
//! | `p` already held | keep one copy, discard the other |
//!
//! All comparisons are 24-bit serial arithmetic ([`Psn::distance`]); the window may straddle
//! the wrap at 2^24 anywhere (tested).
//!
//! **Streams.** A request stream is keyed by (local host address, local QPN); it carries the
//! remote requester's PSNs (SEND, WRITE, READ REQUEST, atomics). A response stream is keyed by
//! (local host address, remote address, UDP source port): the QP pair as Linux and ConnectX
//! stacks identify it, the same in both directions; it carries the local requester's PSNs. Only
//! READ RESPONSEs and atomic ACKs fill known PSNs there, namely the ranges of the READ and atomic
//! requests the local host sent (registered with [`ReorderCore::observe_request`]); an ACK or NAK
//! waits only while a READ RESPONSE below its PSN is missing. With no outstanding range,
//! response-direction packets pass straight through.
//!
//! **First packets.** A new request stream does not know its starting PSN: it holds what
//! arrives for `learn_ns` and starts from the lowest PSN seen (or from the PSN the host ACKed or
//! NAKed, if that comes first).
//!
//! **Loss.** A gap open longer than `hold_timeout_ns` is declared lost: everything held is
//! released in order so that the RNIC sees the gap and NAKs. The host's NAK (PSN sequence error)
//! then moves the stream's expected PSN to the NAKed PSN ([`ReorderCore::observe_nak`]), so the
//! retransmission is reordered too.
//!
//! **Bounds.** Streams, rings (a stream takes a ring only while it holds packets) and held bytes
//! are capped by [`ReorderConfig`]; held packets live in one preallocated slot pool. A packet
//! that cannot be held (no stream or ring left, byte cap) passes through and is counted. Idle
//! streams are evicted a few at a time by [`ReorderCore::poll`].
//!
//! Single-owner and lock-free by construction: a `ReorderCore` is owned by one worker, every
//! change needs `&mut self`, and it is not `Clone`; other workers hand packets to that worker
//! through lock-free rings whose consuming end only the owner holds (`worker::HandoffRx`).

// The insert paths pass a packet's PSN, span, length and item separately down to the slot
// that stores them, so that the item is moved exactly once.
#![allow(clippy::too_many_arguments)]

use crate::engine::IntMap;
use crate::wire::cm::CmMessage;
use crate::wire::Psn;

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
    /// A stream idle this long is forgotten.
    pub idle_evict_ns: u64,
    /// Outstanding READ/atomic ranges remembered per QP pair.
    pub max_reads: usize,
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
            max_reads: 16,
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
        Ok(())
    }
}

/// Which PSN space a stream follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKey {
    /// Packets towards a local responder: (local address, local QPN).
    Request {
        /// Local host address (`ip_key`).
        local: u128,
        /// Local QPN (the packets' DestQP).
        qpn: u32,
    },
    /// Responses towards a local requester: (local address, remote address, UDP source port).
    Response {
        /// Local host address.
        local: u128,
        /// Remote host address.
        remote: u128,
        /// UDP source port shared by both directions of the QP pair.
        sport: u16,
    },
}

/// Folds an address to 64 bits for the one-word hashes below.
#[inline]
fn fold(a: u128) -> u64 {
    (a as u64) ^ ((a >> 64) as u64).rotate_left(17)
}

impl std::hash::Hash for StreamKey {
    /// One 64-bit word per key: the integer hasher mixes it once (a derived `Hash` would feed
    /// the enum discriminant byte by byte).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match *self {
            StreamKey::Request { local, qpn } => state.write_u64(fold(local) ^ u64::from(qpn) << 8),
            StreamKey::Response {
                local,
                remote,
                sport,
            } => state.write_u64(
                fold(local) ^ fold(remote).rotate_left(29) ^ u64::from(sport) << 40 ^ 0x5bd1_e995,
            ),
        }
    }
}

/// A QP pair as both directions see it: (local address, remote address, UDP source port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PairKey(u128, u128, u16);

impl std::hash::Hash for PairKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(fold(self.0) ^ fold(self.1).rotate_left(29) ^ u64::from(self.2) << 40);
    }
}

/// Two addresses and a 32-bit number (CM pairings and pending REQs), hashed as one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key3(u128, u128, u32);

impl std::hash::Hash for Key3 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(fold(self.0) ^ fold(self.1).rotate_left(29) ^ u64::from(self.2) << 32);
    }
}

/// An RDMA CM message seen by the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmEvent {
    /// Sender's address (`ip_key`).
    pub sender: u128,
    /// Receiver's address.
    pub receiver: u128,
    /// The sender is a host of this rack.
    pub sender_local: bool,
    /// The receiver is a host of this rack.
    pub receiver_local: bool,
    /// What it says.
    pub msg: CmMessage,
}

/// What a response-direction packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponseKind {
    /// READ RESPONSE or atomic ACK: fills a known PSN.
    Fill,
    /// ACK or NAK: fills nothing; waits only behind a missing fill below it.
    Ack,
}

/// The outcome of an insert, after DPDK's `rte_reorder` (adapted to 24-bit PSNs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// In order: released, with any consecutive held packets.
    Released,
    /// Held until the gap before it fills or times out.
    Held,
    /// Beyond the window: held packets were released (in order, skipping gaps) to make room.
    Overflowed {
        /// Packets released to make room (not counting this one).
        released: u32,
    },
    /// Behind the expected PSN (retransmission, duplicate of a released packet): released.
    Late,
    /// A copy of a held packet: discarded.
    Duplicate,
    /// Not reordered (no outstanding READ for a response, no room, ...): released as is.
    Passthrough,
}

/// Totals of one core. Plain integers: the owner publishes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReorderTotals {
    /// Packets released in order (directly or from the ring).
    pub released_in_order: u64,
    /// Packets that were held at some point.
    pub held_total: u64,
    /// Packets held now.
    pub held_now: u64,
    /// Deepest any stream has been (packets held at once).
    pub max_depth: u64,
    /// Late or retransmitted packets released at once.
    pub late: u64,
    /// Duplicates of held packets discarded.
    pub duplicates: u64,
    /// Window overflows.
    pub overflows: u64,
    /// Gaps declared lost after the hold timeout.
    pub timeouts: u64,
    /// Expected PSNs moved by the host's NAKs.
    pub resyncs: u64,
    /// Expected PSNs moved forward by the host's ACKs.
    pub ack_advances: u64,
    /// Idle streams forgotten.
    pub evictions: u64,
    /// Packets passed through unreordered.
    pub passthrough: u64,
    /// Packets not reordered because the stream table was full.
    pub table_full: u64,
    /// Packets not held because no ring or byte budget was left.
    pub no_room: u64,
    /// Streams that chose their starting PSN by learning.
    pub learned: u64,
    /// QP pairings (and starting PSNs) learned from RDMA CM exchanges.
    pub cm_learned: u64,
    /// Streams now.
    pub streams: u64,
}

/// What one stream has seen (for `show streams`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Released in order.
    pub released: u32,
    /// Held now.
    pub held: u32,
    /// Deepest it has been.
    pub max_depth: u32,
    /// Late packets.
    pub late: u32,
    /// Duplicates discarded.
    pub duplicates: u32,
    /// Overflows.
    pub overflows: u32,
    /// Timeouts.
    pub timeouts: u32,
    /// Resyncs from NAKs.
    pub resyncs: u32,
}

struct Slot<T> {
    item: T,
    psn: Psn,
    span: u32,
    len: u32,
    arrived: u64,
    ack: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Learning { until: u64, min: Psn, max: Psn },
    Active,
}

#[derive(Debug, Clone)]
struct Stream {
    key: StreamKey,
    e: Psn,
    phase: Phase,
    ring: u32,
    held: u32,
    gap_since: u64,
    last_seen: u64,
    /// Hold timeout of this stream (the downlink's, or the switch's).
    timeout: u64,
    /// Listed in `active` (its timers need checking).
    in_active: bool,
    /// Response streams: outstanding ranges `[start, start + span)`, oldest first.
    reads: Vec<(Psn, u32)>,
    stats: StreamStats,
}

const NO_RING: u32 = u32::MAX;

/// Per-stream PSN rings over a shared, preallocated slot pool.
pub struct ReorderCore<T> {
    cfg: ReorderConfig,
    mask: u32,
    streams: Vec<Stream>,
    index: IntMap<StreamKey, u32>,
    free_streams: Vec<u32>,
    slots: Vec<Option<Slot<T>>>,
    bitmaps: Vec<u64>,
    free_rings: Vec<u32>,
    /// Streams that hold packets or are learning (their timers need checking).
    active: Vec<u32>,
    pairs: IntMap<PairKey, u32>,
    cm_req: IntMap<Key3, (u32, Psn)>,
    cm_pairs: IntMap<Key3, u32>,
    cm_start: IntMap<StreamKey, Psn>,
    pending_release: Vec<T>,
    held_bytes: usize,
    evict_hand: usize,
    next_timeout: Option<u64>,
    /// The stream found by the last lookup.
    last: Option<(StreamKey, u32)>,
    /// Totals.
    pub totals: ReorderTotals,
    hold_ns: Vec<u64>,
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
        let mut pairs = IntMap::default();
        pairs.reserve(cfg.max_streams);
        ReorderCore {
            mask: cfg.window - 1,
            streams: Vec::with_capacity(cfg.max_streams),
            index,
            free_streams: Vec::with_capacity(cfg.max_streams),
            slots,
            bitmaps: vec![0; cfg.max_rings * w / 64],
            free_rings: (0..cfg.max_rings as u32).rev().collect(),
            active: Vec::with_capacity(cfg.max_rings + 64),
            pairs,
            cm_req: IntMap::default(),
            cm_pairs: IntMap::default(),
            cm_start: IntMap::default(),
            pending_release: Vec::new(),
            held_bytes: 0,
            evict_hand: 0,
            next_timeout: None,
            last: None,
            totals: ReorderTotals::default(),
            hold_ns: Vec::with_capacity(1024),
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

    /// The hold timeout that streams created from now on get (a downlink's own timeout);
    /// `None`: the configured one.
    #[inline]
    pub fn set_timeout_for_new_streams(&mut self, ns: Option<u64>) {
        self.next_timeout = ns;
    }

    /// Hold times (ns) of packets released since the last call, for the owner's histogram.
    pub fn take_hold_times(&mut self, out: &mut Vec<u64>) {
        out.append(&mut self.hold_ns);
    }

    /// Packets held now.
    pub fn held(&self) -> usize {
        self.totals.held_now as usize
    }

    /// Per-stream statistics, for inspection (not on the packet path).
    pub fn streams(&self) -> impl Iterator<Item = (StreamKey, Psn, StreamStats)> + '_ {
        self.index.iter().map(move |(k, i)| {
            let s = &self.streams[*i as usize];
            (*k, s.e, s.stats)
        })
    }

    /// The expected PSN of a stream, if it is known.
    pub fn expected(&self, key: &StreamKey) -> Option<Psn> {
        let s = &self.streams[*self.index.get(key)? as usize];
        match s.phase {
            Phase::Active => Some(s.e),
            Phase::Learning { .. } => None,
        }
    }

    /// Approximate bytes of state excluding packets: streams, index, slot pool, pairs.
    pub fn state_bytes(&self) -> usize {
        self.streams.capacity() * std::mem::size_of::<Stream>()
            + self
                .streams
                .iter()
                .map(|s| s.reads.capacity() * 8)
                .sum::<usize>()
            + self.index.capacity() * (std::mem::size_of::<(StreamKey, u32)>() + 1)
            + self.slots.capacity() * std::mem::size_of::<Option<Slot<T>>>()
            + self.bitmaps.capacity() * 8
            + self.pairs.capacity() * (std::mem::size_of::<(PairKey, u32)>() + 1)
            + self.free_streams.capacity() * 4
            + self.active.capacity() * 4
    }

    fn stream_for(&mut self, key: StreamKey, now: u64, create: bool) -> Option<u32> {
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
        let start = self.cm_start.get(&key).copied();
        let phase = match key {
            StreamKey::Request { .. } if start.is_some() => Phase::Active,
            StreamKey::Request { .. } => Phase::Learning {
                until: now.saturating_add(self.cfg.learn_ns),
                min: Psn::new(0),
                max: Psn::new(0),
            },
            StreamKey::Response { .. } => Phase::Active,
        };
        let s = Stream {
            key,
            e: start.unwrap_or(Psn::new(0)),
            phase,
            ring: NO_RING,
            held: 0,
            gap_since: now,
            last_seen: now,
            timeout: self.next_timeout.unwrap_or(self.cfg.hold_timeout_ns),
            in_active: false,
            reads: Vec::new(),
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
        self.totals.streams = self.index.len() as u64;
        if matches!(phase, Phase::Learning { .. }) {
            self.mark_active(i);
        }
        Some(i)
    }

    /// Lists a stream for timer checks (once).
    fn mark_active(&mut self, si: u32) {
        let s = &mut self.streams[si as usize];
        if !s.in_active {
            s.in_active = true;
            self.active.push(si);
        }
    }

    #[inline]
    fn slot_index(&self, ring: u32, psn: Psn) -> usize {
        ring as usize * (self.mask as usize + 1) + (psn.value() & self.mask) as usize
    }

    fn ensure_ring(&mut self, si: u32) -> bool {
        if self.streams[si as usize].ring != NO_RING {
            return true;
        }
        match self.free_rings.pop() {
            Some(r) => {
                self.streams[si as usize].ring = r;
                self.mark_active(si);
                true
            }
            None => false,
        }
    }

    /// Puts `item` in its slot. The caller checked that the stream has a ring and the slot is
    /// free.
    fn put(&mut self, si: u32, item: T, psn: Psn, span: u32, len: u32, now: u64, ack: bool) {
        let s = &mut self.streams[si as usize];
        let ring = s.ring;
        if s.held == 0 {
            s.gap_since = now;
        }
        s.held += 1;
        s.stats.held = s.held;
        s.stats.max_depth = s.stats.max_depth.max(s.held);
        let depth = u64::from(s.held);
        let idx = self.slot_index(ring, psn);
        self.slots[idx] = Some(Slot {
            item,
            psn,
            span,
            len,
            arrived: now,
            ack,
        });
        self.bitmaps[idx / 64] |= 1 << (idx % 64);
        self.held_bytes += len as usize;
        self.totals.held_total += 1;
        self.totals.held_now += 1;
        self.totals.max_depth = self.totals.max_depth.max(depth);
    }

    /// The held packet with exactly this PSN.
    fn occupied(&self, si: u32, psn: Psn) -> Option<&Slot<T>> {
        self.slot_of(si, psn).filter(|s| s.psn == psn)
    }

    /// Whatever holds the slot `psn` maps to (possibly another PSN, `W` apart).
    fn slot_of(&self, si: u32, psn: Psn) -> Option<&Slot<T>> {
        let ring = self.streams[si as usize].ring;
        if ring == NO_RING {
            return None;
        }
        self.slots[self.slot_index(ring, psn)].as_ref()
    }

    fn take(&mut self, si: u32, psn: Psn, now: u64) -> Option<Slot<T>> {
        let ring = self.streams[si as usize].ring;
        if ring == NO_RING {
            return None;
        }
        let idx = self.slot_index(ring, psn);
        let slot = self.slots[idx].take()?;
        self.bitmaps[idx / 64] &= !(1 << (idx % 64));
        self.held_bytes -= slot.len as usize;
        self.totals.held_now -= 1;
        let s = &mut self.streams[si as usize];
        s.held -= 1;
        s.stats.held = s.held;
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(slot.arrived));
        }
        if s.held == 0 {
            self.free_rings.push(s.ring);
            s.ring = NO_RING;
        }
        Some(slot)
    }

    /// Offset (0..W) from `from` of the next held slot of stream `si`, scanning the ring's
    /// bitmap word by word.
    fn next_held(&self, si: u32, from: Psn) -> Option<u32> {
        let ring = self.streams[si as usize].ring;
        if ring == NO_RING {
            return None;
        }
        let w = self.mask + 1;
        let base = ring as usize * w as usize;
        let start = from.value() & self.mask;
        let mut off = 0u32;
        while off < w {
            let pos = (start + off) & self.mask;
            let bit = base + pos as usize;
            let word = self.bitmaps[bit / 64] >> (bit % 64);
            // Bits left in this word before the ring wraps or the word ends.
            let room = (64 - (bit % 64) as u32).min(w - pos);
            let masked = if room >= 64 {
                word
            } else {
                word & ((1u64 << room) - 1)
            };
            if masked != 0 {
                let o = off + masked.trailing_zeros();
                return (o < w).then_some(o);
            }
            off += room;
        }
        None
    }

    fn release(&mut self, slot: Slot<T>, out: &mut Vec<T>) {
        out.push(slot.item);
    }

    /// Inserts a request-direction packet for `key` with PSN `psn` spanning `span` PSNs.
    pub fn insert_request(
        &mut self,
        key: StreamKey,
        psn: Psn,
        span: u32,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let span = span.max(1);
        let Some(si) = self.stream_for(key, now, true) else {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        };
        self.streams[si as usize].last_seen = now;
        if let Phase::Learning { until, min, max } = self.streams[si as usize].phase {
            if now < until {
                return self.learn_hold(si, psn, span, len, item, now, out, until, min, max);
            }
            if self.streams[si as usize].held == 0 {
                // Nothing collected (learning disabled, or its window passed empty): this
                // packet starts the stream.
                let s = &mut self.streams[si as usize];
                s.phase = Phase::Active;
                s.e = psn;
                self.totals.learned += 1;
            } else {
                self.finish_learning(si, now, out);
            }
        }
        self.insert_active(si, psn, span, len, item, now, out)
    }

    fn learn_hold(
        &mut self,
        si: u32,
        psn: Psn,
        span: u32,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
        until: u64,
        min: Psn,
        max: Psn,
    ) -> Insert {
        let first = self.streams[si as usize].held == 0;
        let new_min = if first || psn.is_before(min) {
            psn
        } else {
            min
        };
        let new_max = if first || psn.is_after(max) { psn } else { max };
        let exact = self.occupied(si, psn).is_some();
        // Everything held while learning must fit one window (slots are `psn mod W`); when it
        // would not, or there is no room, learning ends here and this packet goes the normal way.
        let fits = first || (new_max.distance(new_min) as u32) < self.mask;
        if !exact
            && (!fits
                || self.slot_of(si, psn).is_some()
                || !self.ensure_ring(si)
                || self.held_bytes + len as usize > self.cfg.max_held_bytes)
        {
            if first {
                let s = &mut self.streams[si as usize];
                s.phase = Phase::Active;
                s.e = psn;
                self.totals.learned += 1;
            } else {
                self.finish_learning(si, now, out);
            }
            return self.insert_active(si, psn, span, len, item, now, out);
        }
        if exact {
            return self.duplicate(si);
        }
        self.put(si, item, psn, span, len, now, false);
        self.streams[si as usize].phase = Phase::Learning {
            until,
            min: new_min,
            max: new_max,
        };
        Insert::Held
    }

    fn finish_learning(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        let learn_ns = self.cfg.learn_ns;
        let s = &mut self.streams[si as usize];
        if let Phase::Learning { min, until, .. } = s.phase {
            s.phase = Phase::Active;
            let held = s.held;
            if held > 0 {
                s.e = min;
            }
            self.totals.learned += 1;
            self.drain_request(si, now, out);
            let s = &mut self.streams[si as usize];
            if s.held > 0 && s.held == held {
                // Nothing came out: the gap in front has been open since learning began.
                s.gap_since = until.saturating_sub(learn_ns).min(now);
            }
        }
    }

    fn insert_active(
        &mut self,
        si: u32,
        psn: Psn,
        span: u32,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let e = self.streams[si as usize].e;
        let d = psn.distance(e);
        if d == 0 {
            out.push(item);
            self.count_in_order(si);
            self.advance(si, span, now, out);
            self.drain_request(si, now, out);
            return Insert::Released;
        }
        if d < 0 {
            out.push(item);
            self.streams[si as usize].stats.late += 1;
            self.totals.late += 1;
            return Insert::Late;
        }
        let mut released = 0u32;
        let overflow = d as u32 > self.mask;
        if overflow {
            released = self.make_room(si, psn, now, out);
            self.streams[si as usize].stats.overflows += 1;
            self.totals.overflows += 1;
            if self.streams[si as usize].e == psn {
                out.push(item);
                self.count_in_order(si);
                self.advance(si, span, now, out);
                self.drain_request(si, now, out);
                return Insert::Overflowed { released };
            }
        }
        if self.occupied(si, psn).is_some() {
            return self.duplicate(si);
        }
        if !self.hold_or_pass(si, item, psn, span, len, now, false, out) {
            return Insert::Passthrough;
        }
        if overflow {
            Insert::Overflowed { released }
        } else {
            Insert::Held
        }
    }

    /// Counts a copy of a held packet, which is discarded.
    fn duplicate(&mut self, si: u32) -> Insert {
        self.streams[si as usize].stats.duplicates += 1;
        self.totals.duplicates += 1;
        Insert::Duplicate
    }

    /// Holds `item` in its slot; when it cannot (the slot holds a PSN a window away, no ring is
    /// left, the byte cap is reached) releases it at once, counts it, and returns false.
    fn hold_or_pass(
        &mut self,
        si: u32,
        item: T,
        psn: Psn,
        span: u32,
        len: u32,
        now: u64,
        ack: bool,
        out: &mut Vec<T>,
    ) -> bool {
        if self.slot_of(si, psn).is_some()
            || !self.ensure_ring(si)
            || self.held_bytes + len as usize > self.cfg.max_held_bytes
        {
            out.push(item);
            self.totals.no_room += 1;
            self.totals.passthrough += 1;
            return false;
        }
        self.put(si, item, psn, span, len, now, ack);
        true
    }

    fn count_in_order(&mut self, si: u32) {
        self.streams[si as usize].stats.released += 1;
        self.totals.released_in_order += 1;
    }

    /// Moves `e` past a packet of `span` PSNs; held packets inside the span are late.
    fn advance(&mut self, si: u32, span: u32, now: u64, out: &mut Vec<T>) {
        let e = self.streams[si as usize].e;
        if span > 1 {
            for k in 1..span.min(self.mask + 1) {
                let q = e.add(k);
                if self.occupied(si, q).is_some_and(|s| s.psn == q) {
                    if let Some(slot) = self.take(si, q, now) {
                        self.streams[si as usize].stats.late += 1;
                        self.totals.late += 1;
                        self.release(slot, out);
                    }
                }
            }
        }
        self.streams[si as usize].e = e.add(span);
    }

    /// Releases consecutive held packets from `e` on.
    fn drain_request(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        loop {
            let e = self.streams[si as usize].e;
            let hit = matches!(self.occupied(si, e), Some(s) if s.psn == e);
            if !hit {
                break;
            }
            if let Some(slot) = self.take(si, e, now) {
                let span = slot.span;
                self.release(slot, out);
                self.count_in_order(si);
                self.advance(si, span, now, out);
            }
        }
        let s = &mut self.streams[si as usize];
        if s.held > 0 {
            // A new gap opens at the front: time it from now.
            s.gap_since = now;
        }
    }

    /// Releases held packets in PSN order, skipping gaps, until `psn` fits the window.
    fn make_room(&mut self, si: u32, psn: Psn, now: u64, out: &mut Vec<T>) -> u32 {
        let mut released = 0;
        loop {
            let e = self.streams[si as usize].e;
            if (psn.distance(e) as u32) <= self.mask {
                break;
            }
            match self.next_held(si, e) {
                Some(off) => {
                    // Give up on the gap before the next held packet and release it.
                    let q = e.add(off);
                    self.streams[si as usize].e = q;
                    if let Some(slot) = self.take(si, q, now) {
                        let span = slot.span;
                        self.release(slot, out);
                        released += 1;
                        self.count_in_order(si);
                        self.advance(si, span, now, out);
                    }
                }
                // Nothing held: jump so that `psn` is the last PSN of the window.
                None => self.streams[si as usize].e = psn.sub(self.mask),
            }
        }
        self.drain_request(si, now, out);
        released
    }

    /// Releases everything a stream holds, in PSN order, starting at `from`; returns the PSN
    /// after the last one released.
    fn flush_stream(&mut self, si: u32, now: u64, out: &mut Vec<T>) -> Option<Psn> {
        let mut after = None;
        let mut from = self.streams[si as usize].e;
        while let Some(off) = self.next_held(si, from) {
            let q = from.add(off);
            let Some(slot) = self.take(si, q, now) else {
                break;
            };
            let (sp, psn) = (slot.span, slot.psn);
            self.release(slot, out);
            after = Some(psn.add(sp));
            from = q.add(1);
        }
        after
    }

    /// Checks timers at `now`: ends learning windows, declares timed-out gaps lost (releasing
    /// what is held, in order), and evicts a few idle streams.
    pub fn poll(&mut self, now: u64, out: &mut Vec<T>) {
        self.flush_pending(out);
        let mut i = 0;
        while i < self.active.len() {
            let si = self.active[i];
            if let Phase::Learning { until, .. } = self.streams[si as usize].phase {
                if now >= until {
                    self.finish_learning(si, now, out);
                }
            }
            let s = &self.streams[si as usize];
            if matches!(s.phase, Phase::Active)
                && s.held > 0
                && now.saturating_sub(s.gap_since) >= s.timeout
            {
                self.timeout(si, now, out);
            }
            let s = &self.streams[si as usize];
            if s.held == 0 && matches!(s.phase, Phase::Active) {
                self.streams[si as usize].in_active = false;
                self.active.swap_remove(i);
            } else {
                i += 1;
            }
        }
        self.evict_some(now, out, 32);
    }

    fn timeout(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        self.streams[si as usize].stats.timeouts += 1;
        self.totals.timeouts += 1;
        match self.streams[si as usize].key {
            StreamKey::Request { .. } => {
                // Give up on the gap: release everything held, in order. The RNIC sees the gap
                // and NAKs; its NAK resyncs `e` so that the retransmission is reordered.
                if let Some(after) = self.flush_stream(si, now, out) {
                    self.streams[si as usize].e = after;
                }
            }
            StreamKey::Response { .. } => {
                // The missing responses are written off with the ranges they belonged to.
                self.flush_stream(si, now, out);
                self.streams[si as usize].reads.clear();
            }
        }
    }

    fn evict_some(&mut self, now: u64, out: &mut Vec<T>, budget: usize) {
        let n = self.streams.len();
        if n == 0 {
            return;
        }
        for _ in 0..budget.min(n) {
            self.evict_hand = (self.evict_hand + 1) % n;
            let si = self.evict_hand as u32;
            let s = &self.streams[si as usize];
            let live = self.index.get(&s.key) == Some(&si);
            if live && now.saturating_sub(s.last_seen) >= self.cfg.idle_evict_ns {
                self.flush_stream(si, now, out);
                let key = self.streams[si as usize].key;
                self.index.remove(&key);
                self.last = None;
                self.streams[si as usize].reads = Vec::new();
                self.free_streams.push(si);
                if self.streams[si as usize].in_active {
                    self.streams[si as usize].in_active = false;
                    self.active.retain(|a| *a != si);
                }
                self.totals.evictions += 1;
                self.totals.streams = self.index.len() as u64;
            }
        }
    }

    /// Records which local QPN a QP pair uses, from a packet towards the local host
    /// (`local` = its destination, `remote` = its source, `qpn` = its DestQP).
    pub fn learn_pair(&mut self, local: u128, remote: u128, sport: u16, qpn: u32) {
        let k = PairKey(local, remote, sport);
        if self.pairs.get(&k) == Some(&qpn) {
            return;
        }
        if self.pairs.len() >= self.cfg.max_streams {
            self.pairs.clear();
        }
        self.pairs.insert(k, qpn);
    }

    /// The request stream a packet from the local host on this QP pair concerns: by the pairing
    /// a CM exchange taught (local, remote, remote QPN), else by the UDP source port.
    fn request_stream_of_pair(
        &self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
    ) -> Option<u32> {
        let qpn = match self.cm_pairs.get(&Key3(local, remote, remote_qpn)) {
            Some(q) => *q,
            None => *self.pairs.get(&PairKey(local, remote, sport))?,
        };
        self.index.get(&StreamKey::Request { local, qpn }).copied()
    }

    /// Learns from an RDMA CM REQ or REP passing the switch. `sender_local`/`receiver_local` say
    /// which end is a local host. A REQ is remembered until its REP; the REP completes the
    /// picture: both QPNs and the starting PSN the local host's responder will see first.
    pub fn observe_cm(&mut self, ev: &CmEvent) {
        if self.cm_req.len() >= self.cfg.max_streams {
            self.cm_req.clear();
        }
        if self.cm_pairs.len() >= self.cfg.max_streams {
            self.cm_pairs.clear();
            self.cm_start.clear();
        }
        match ev.msg {
            CmMessage::Req {
                local_comm_id,
                qpn,
                starting_psn,
            } => {
                self.cm_req
                    .insert(Key3(ev.sender, 0, local_comm_id), (qpn, starting_psn));
            }
            CmMessage::Rep {
                remote_comm_id,
                qpn: rep_qpn,
                starting_psn: rep_psn,
                ..
            } => {
                // The REP goes back to the requester: its receiver sent the REQ.
                let requester = ev.receiver;
                let Some((req_qpn, req_psn)) =
                    self.cm_req.remove(&Key3(requester, 0, remote_comm_id))
                else {
                    return;
                };
                if ev.receiver_local {
                    // Local requester: its responder sees the replier's PSNs first.
                    self.learn_cm(requester, ev.sender, req_qpn, rep_qpn, rep_psn);
                }
                if ev.sender_local {
                    self.learn_cm(ev.sender, requester, rep_qpn, req_qpn, req_psn);
                }
            }
        }
    }

    fn learn_cm(&mut self, local: u128, remote: u128, local_qpn: u32, remote_qpn: u32, start: Psn) {
        self.cm_pairs
            .insert(Key3(local, remote, remote_qpn), local_qpn);
        let key = StreamKey::Request {
            local,
            qpn: local_qpn,
        };
        self.cm_start.insert(key, start);
        self.totals.cm_learned += 1;
        // A stream already learning takes the PSN now.
        if let Some(&si) = self.index.get(&key) {
            if matches!(self.streams[si as usize].phase, Phase::Learning { .. }) {
                let mut out = Vec::new();
                self.resync(si, start, 0, &mut out);
                self.pending_release.append(&mut out);
            }
        }
    }

    /// Packets released outside an insert or poll call (a CM reply that ended a learning
    /// phase); the next `poll` hands them out.
    fn flush_pending(&mut self, out: &mut Vec<T>) {
        out.append(&mut self.pending_release);
    }

    /// The local host NAKed (PSN sequence error) with `psn`, the PSN it expects next, on the QP
    /// pair (`local`, `remote`, `sport`): move that request stream's expected PSN there, so the
    /// retransmission that follows is reordered. Held packets below it are released as late.
    pub fn observe_nak(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
        psn: Psn,
        now: u64,
        out: &mut Vec<T>,
    ) {
        let Some(si) = self.request_stream_of_pair(local, remote, sport, remote_qpn) else {
            return;
        };
        self.resync(si, psn, now, out);
        self.streams[si as usize].stats.resyncs += 1;
        self.totals.resyncs += 1;
    }

    /// The local host ACKed through `psn`: a stream still expecting an earlier PSN (after a
    /// timeout, or while learning) moves to `psn + 1`.
    pub fn observe_ack(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        remote_qpn: u32,
        psn: Psn,
        now: u64,
        out: &mut Vec<T>,
    ) {
        let Some(si) = self.request_stream_of_pair(local, remote, sport, remote_qpn) else {
            return;
        };
        let next = psn.add(1);
        let s = &self.streams[si as usize];
        let behind = match s.phase {
            Phase::Learning { .. } => true,
            Phase::Active => next.is_after(s.e),
        };
        if behind {
            self.resync(si, next, now, out);
            self.totals.ack_advances += 1;
        }
    }

    fn resync(&mut self, si: u32, psn: Psn, now: u64, out: &mut Vec<T>) {
        let s = &mut self.streams[si as usize];
        let old = match s.phase {
            Phase::Learning { min, .. } if s.held > 0 => min,
            _ => s.e,
        };
        s.phase = Phase::Active;
        if s.held > 0 {
            if psn.is_after(old) {
                // Held packets below the new expected PSN are behind it now: release them.
                let mut from = old;
                while let Some(off) = self.next_held(si, from) {
                    let q = from.add(off);
                    if !q.is_before(psn) {
                        break;
                    }
                    let Some(slot) = self.take(si, q, now) else {
                        break;
                    };
                    self.release(slot, out);
                    self.streams[si as usize].stats.late += 1;
                    self.totals.late += 1;
                    from = q.add(1);
                }
            } else {
                // Moving back (the RNIC dropped what a timeout released): keep what fits the new
                // window, so that retransmitted copies of it are discarded as duplicates and the
                // held originals go out in order; release (late) what lies beyond.
                let mut from = old;
                let mut scanned = 0u32;
                while let Some(off) = self.next_held(si, from) {
                    // Each held packet is visited once: stop after one turn of the ring.
                    scanned += off + 1;
                    if scanned > self.mask + 1 {
                        break;
                    }
                    let q = from.add(off);
                    if (q.distance(psn) as u32) <= self.mask {
                        from = q.add(1);
                        continue;
                    }
                    let Some(slot) = self.take(si, q, now) else {
                        break;
                    };
                    self.release(slot, out);
                    self.streams[si as usize].stats.late += 1;
                    self.totals.late += 1;
                    from = q.add(1);
                }
            }
        }
        self.streams[si as usize].e = psn;
        self.drain_request(si, now, out);
        if self.streams[si as usize].held > 0 {
            self.mark_active(si);
        }
    }

    /// The local host sent a READ REQUEST (or, with `span` 1, an atomic request) with `psn` to
    /// `remote` on UDP source port `sport`: its responses will fill `[psn, psn + span)`.
    pub fn observe_request(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        psn: Psn,
        span: u32,
        now: u64,
    ) {
        let key = StreamKey::Response {
            local,
            remote,
            sport,
        };
        let Some(si) = self.stream_for(key, now, true) else {
            return;
        };
        let max = self.cfg.max_reads;
        let s = &mut self.streams[si as usize];
        s.last_seen = now;
        // A READ at or before a range we know is a retry: the requester went back to `psn` and
        // will ask again for everything from there, so those ranges start over.
        s.reads.retain(|(q, _)| q.is_before(psn));
        if s.reads.len() >= max {
            s.reads.remove(0);
        }
        s.reads.push((psn, span.max(1)));
        if !Self::in_reads(s, s.e) {
            s.e = s.reads[0].0;
        }
    }

    fn in_reads(s: &Stream, psn: Psn) -> bool {
        s.reads.iter().any(|(p, sp)| {
            let d = psn.distance(*p);
            d >= 0 && (d as u32) < *sp
        })
    }

    /// Advances a response stream's `e` past a filled PSN: the next PSN of the same range, or
    /// the start of the next outstanding range.
    fn advance_response(&mut self, si: u32) {
        let s = &mut self.streams[si as usize];
        let next = s.e.add(1);
        if let Some((p, sp)) = s.reads.first().copied() {
            let d = next.distance(p);
            if d >= 0 && (d as u32) < sp {
                s.e = next;
                return;
            }
            s.reads.remove(0);
        }
        if let Some((p, _)) = s.reads.first() {
            s.e = *p;
        } else {
            s.e = next;
        }
    }

    /// Inserts a response-direction packet.
    pub fn insert_response(
        &mut self,
        local: u128,
        remote: u128,
        sport: u16,
        kind: ResponseKind,
        psn: Psn,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let key = StreamKey::Response {
            local,
            remote,
            sport,
        };
        let Some(si) = self.stream_for(key, now, false) else {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        };
        self.streams[si as usize].last_seen = now;
        let s = &self.streams[si as usize];
        if s.reads.is_empty() && s.held == 0 {
            out.push(item);
            self.totals.passthrough += 1;
            return Insert::Passthrough;
        }
        let e = s.e;
        let pending = !s.reads.is_empty();
        match kind {
            ResponseKind::Fill => {
                if pending && psn == e {
                    out.push(item);
                    self.count_in_order(si);
                    self.advance_response(si);
                    self.drain_response(si, e, now, out);
                    return Insert::Released;
                }
                let ahead = psn.distance(e);
                if !pending || ahead < 0 || !Self::in_reads(&self.streams[si as usize], psn) {
                    out.push(item);
                    self.streams[si as usize].stats.late += 1;
                    self.totals.late += 1;
                    return Insert::Late;
                }
                self.hold_response(si, psn, len, item, now, out, false)
            }
            ResponseKind::Ack => {
                // Wait only while a fill below this PSN is missing.
                if !pending || !e.is_before(psn) {
                    out.push(item);
                    self.count_in_order(si);
                    return Insert::Released;
                }
                self.hold_response(si, psn, len, item, now, out, true)
            }
        }
    }

    fn hold_response(
        &mut self,
        si: u32,
        psn: Psn,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
        ack: bool,
    ) -> Insert {
        let e = self.streams[si as usize].e;
        if psn.distance(e) as u32 > self.mask {
            // Too far ahead to hold: give up on what is missing before it.
            self.streams[si as usize].stats.overflows += 1;
            self.totals.overflows += 1;
            let before = out.len();
            self.flush_stream(si, now, out);
            self.streams[si as usize].reads.clear();
            out.push(item);
            return Insert::Overflowed {
                released: (out.len() - before - 1) as u32,
            };
        }
        if self.occupied(si, psn).is_some() {
            if ack {
                // Two ACKs with one PSN (a coalesced ACK repeated): keep the newer one moving.
                out.push(item);
                self.totals.passthrough += 1;
                return Insert::Passthrough;
            }
            return self.duplicate(si);
        }
        if !self.hold_or_pass(si, item, psn, 1, len, now, ack, out) {
            return Insert::Passthrough;
        }
        Insert::Held
    }

    /// Releases, in PSN order from `from`, the held responses that are no longer blocked.
    fn drain_response(&mut self, si: u32, from: Psn, now: u64, out: &mut Vec<T>) {
        let mut from = from;
        while let Some(off) = self.next_held(si, from) {
            let q = from.add(off);
            let (is_ack, e, pending) = {
                let s = &self.streams[si as usize];
                let Some(slot) = self.occupied(si, q) else {
                    break;
                };
                (slot.ack, s.e, !s.reads.is_empty())
            };
            let go = if is_ack {
                !pending || !e.is_before(q)
            } else {
                q == e || q.is_before(e)
            };
            if !go {
                break;
            }
            let Some(slot) = self.take(si, q, now) else {
                break;
            };
            self.release(slot, out);
            if is_ack {
                self.count_in_order(si);
            } else if q == e {
                self.count_in_order(si);
                self.advance_response(si);
            } else {
                self.streams[si as usize].stats.late += 1;
                self.totals.late += 1;
            }
            from = q.add(1);
        }
        let s = &mut self.streams[si as usize];
        if s.held > 0 {
            s.gap_since = now;
        }
    }
}
