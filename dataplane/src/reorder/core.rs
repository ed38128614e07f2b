//! The reorder core: per-stream PSN rings over one preallocated slot pool, generic over what is
//! held, driven by the caller's clock. This file holds what both directions share (limits,
//! keys, the stream table, rings, timers, eviction) and the request direction; the response
//! direction is in [`super::response`], QP pairing and RDMA CM in [`super::pairing`].
//!
//! The request direction follows the architecture notes ("Reorder semantics"):
//!
//! | case (PSN `p`, expected `e`, window `W`) | action |
//! |---|---|
//! | `p == e` | release, advance `e` by the packet's PSN span, release every consecutive held packet |
//! | `e < p < e + W` | hold in slot `p mod W`; start the gap timer if it is not running |
//! | `p >= e + W` | hold in the stream's far list (sorted, up to `4 W` packets) |
//! | far list full | overflow: release held packets in order (skipping gaps) until `p` fits; when nothing is left to release, `e` moves to `p` |
//! | `p < e` (within 2^23) | late or retransmitted: release at once |
//! | `p` already held | keep one copy, discard the other |
//!
//! All comparisons are 24-bit serial arithmetic ([`Psn::distance`]); the window may straddle
//! the wrap at 2^24 anywhere (tested). The ring holds a window of PSNs, not of packets: a READ
//! REQUEST is one packet spanning up to thousands of PSNs, so the packets after a few READs lie
//! beyond the window while they are only a few packets later. They wait in the far list, and
//! the drain takes its front once the expected PSN reaches it.
//!
//! **Streams.** A request stream is keyed by (local host address, local QPN) and carries the
//! remote requester's PSNs (SEND, WRITE, READ REQUEST, atomics). A response stream is keyed by
//! (local host address, remote address, remote QPN): the QP the local requester sends its
//! READs to, which is what the switch sees first; the responses, addressed to the local QPN,
//! find it through the QP pairing.
//!
//! **First packets and restarts.** A new request stream does not know its starting PSN: it
//! holds what arrives for `learn_ns` and starts from the lowest PSN seen (or from the PSN a CM
//! exchange or the host's ACK or NAK names). A stream that holds nothing and has been idle for
//! `learn_ns` or longer starts over the same way when a packet arrives a window or more away
//! from its expected PSN: a QP destroyed and re-created with the same QPN, or a requester back
//! from a long stall, starts a new PSN sequence.
//!
//! **Loss.** A gap open longer than the stream's hold timeout is declared lost: everything held
//! is released in order so that the RNIC sees the gap and NAKs. The host's NAK then moves the
//! stream's expected PSN to the NAKed PSN ([`ReorderCore::observe_nak`]), so the retransmission
//! is reordered too.
//!
//! **Bounds.** Streams, rings (a stream takes a ring only while it holds packets) and held bytes
//! are capped by [`ReorderConfig`]; held packets live in one preallocated slot pool. A packet
//! that cannot be held (no stream or ring left, byte cap, slot taken) passes through and is
//! counted by reason. Idle streams are evicted a few at a time by [`ReorderCore::poll`].
//!
//! Single-owner and lock-free by construction: a `ReorderCore` is owned by one worker, every
//! change needs `&mut self`, and it is not `Clone`; other workers hand packets to that worker
//! through lock-free rings whose consuming end only the owner holds (`worker::HandoffRx`).

// The insert paths pass a packet's PSN, span, length and item separately down to the slot
// that stores them, so that the item is moved exactly once.
#![allow(clippy::too_many_arguments)]

use std::collections::VecDeque;

use super::pairing::Pairing;
use super::response::ReadRange;
use super::totals::ReorderTotals;
use crate::ids::IntMap;
use crate::wire::Psn;

/// PSNs ahead of a stream's expected PSN beyond which a packet starts a new sequence even
/// without an idle time (a QP re-created without CM at once).
const NEW_SEQUENCE_AHEAD: u32 = 1 << 22;

/// How many times `idle_evict_ns` a response stream with requests still unanswered is kept.
pub const READ_WAIT_FACTOR: u64 = 10;

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
    /// Responses towards a local requester, named by the QP its requests go to: (local
    /// address, remote address, remote QPN).
    Response {
        /// Local host address.
        local: u128,
        /// Remote host address.
        remote: u128,
        /// The remote QPN (DestQP of the local requester's READ REQUESTs).
        remote_qpn: u32,
    },
}

/// Folds an address to 64 bits for the one-word hashes of the tables.
#[inline]
pub(super) fn fold(a: u128) -> u64 {
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
                remote_qpn,
            } => state.write_u64(
                fold(local)
                    ^ fold(remote).rotate_left(29)
                    ^ u64::from(remote_qpn) << 36
                    ^ 0x5bd1_e995,
            ),
        }
    }
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
    /// An ACK or NAK of an earlier PSN sequence of the QP (it was re-created): discarded.
    Stale,
    /// Not reordered (no outstanding READ for a response, no room, ...): released as is.
    Passthrough,
}

/// What one stream has seen (for `show streams`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Released in order.
    pub released: u64,
    /// Held now.
    pub held: u64,
    /// Deepest it has been.
    pub max_depth: u64,
    /// Late packets.
    pub late: u64,
    /// Duplicates discarded.
    pub duplicates: u64,
    /// Overflows.
    pub overflows: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Resyncs from NAKs.
    pub resyncs: u64,
    /// Starts over at a far PSN.
    pub restarts: u64,
}

pub(super) struct Slot<T> {
    pub(super) item: T,
    pub(super) psn: Psn,
    pub(super) span: u32,
    /// A READ REQUEST's DMA length: its span is worked out again when it is released, with
    /// the QP's path MTU if that was learned meanwhile.
    pub(super) read: Option<u32>,
    pub(super) len: u32,
    pub(super) arrived: u64,
}

/// An ACK or NAK held behind a missing READ response (response streams).
pub(super) struct WaitingAck<T> {
    pub(super) item: T,
    pub(super) psn: Psn,
    pub(super) len: u32,
    pub(super) arrived: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Learning { until: u64, min: Psn, max: Psn },
    Active,
}

pub(super) struct Stream<T> {
    pub(super) key: StreamKey,
    /// The expected PSN: the next one to release in order (request streams), or the first
    /// missing READ response (response streams).
    pub(super) expected: Psn,
    pub(super) phase: Phase,
    pub(super) ring: u32,
    /// Packets held: in the ring, plus (response streams) waiting ACKs.
    pub(super) held: u32,
    /// Of those, in the ring.
    pub(super) in_ring: u32,
    pub(super) gap_since: u64,
    pub(super) last_seen: u64,
    /// Hold timeout of this stream (its downlink's, or the switch's).
    pub(super) timeout: u64,
    /// Listed in `active` (its timers need checking).
    pub(super) in_active: bool,
    /// Request streams: the QP pairing has heard of this QP's peer (once per stream life).
    pub(super) peer_seen: bool,
    /// Held packets a window or more beyond the expected PSN, in PSN order. PSNs are not
    /// packets: a READ REQUEST is one packet spanning many PSNs, and the responses a requester
    /// gets fill only the PSNs of its READs, not those of the WRITEs between them. So packets
    /// that are few apart can be far apart in PSNs (64 READs of 64 KiB at path MTU 1024 span
    /// 4096); the ring holds a window of PSNs, this list what lies beyond it.
    pub(super) far: LazyDeque<Slot<T>>,
    /// Response streams: outstanding READ/atomic ranges, in PSN order.
    pub(super) reads: LazyDeque<ReadRange>,
    /// Response streams: ACKs and NAKs waiting behind a missing READ response, in arrival order.
    pub(super) acks: LazyDeque<WaitingAck<T>>,
    /// The QP's path MTU as its own packets show it (0: not seen yet): FIRST and MIDDLE
    /// packets carry exactly one.
    pub(super) pmtu: u32,
    /// Request streams: the last READ REQUEST released in order whose span was estimated (no
    /// path MTU known yet): (PSN, DMA length, span used). When the QP's path MTU is learned
    /// and the READ spanned more, the expected PSN moves on.
    pub(super) est_read: Option<(Psn, u32, u32)>,
    pub(super) stats: StreamStats,
}

pub(super) const NO_RING: u32 = u32::MAX;

/// A deque allocated on first use. Most streams are request streams that never need a far
/// list, and request streams need no READ ranges or waiting ACKs: empty, each costs one word
/// instead of a `VecDeque`'s four (100k streams must fit in 64 MiB).
// The box is the point: an empty `Option<Box<_>>` is one word, an empty `VecDeque` four.
#[allow(clippy::box_collection)]
pub(super) struct LazyDeque<E>(Option<Box<VecDeque<E>>>);

impl<E> Default for LazyDeque<E> {
    fn default() -> Self {
        LazyDeque(None)
    }
}

impl<E> LazyDeque<E> {
    fn deque(&mut self) -> &mut VecDeque<E> {
        self.0.get_or_insert_with(Box::default)
    }
    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |d| d.len())
    }
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub(super) fn capacity(&self) -> usize {
        self.0.as_ref().map_or(0, |d| d.capacity())
    }
    pub(super) fn front(&self) -> Option<&E> {
        self.0.as_ref()?.front()
    }
    pub(super) fn back(&self) -> Option<&E> {
        self.0.as_ref()?.back()
    }
    pub(super) fn back_mut(&mut self) -> Option<&mut E> {
        self.0.as_mut()?.back_mut()
    }
    pub(super) fn get(&self, i: usize) -> Option<&E> {
        self.0.as_ref()?.get(i)
    }
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut E> {
        self.0.as_mut()?.get_mut(i)
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = &E> + '_ {
        self.0.iter().flat_map(|d| d.iter())
    }
    /// Index of the last element matching `f`.
    pub(super) fn rposition(&self, f: impl FnMut(&E) -> bool) -> Option<usize> {
        self.0.as_ref()?.iter().rposition(f)
    }
    pub(super) fn push_back(&mut self, e: E) {
        self.deque().push_back(e);
    }
    pub(super) fn insert(&mut self, at: usize, e: E) {
        self.deque().insert(at, e);
    }
    pub(super) fn pop_front(&mut self) -> Option<E> {
        self.0.as_mut()?.pop_front()
    }
    pub(super) fn pop_back(&mut self) -> Option<E> {
        self.0.as_mut()?.pop_back()
    }
    pub(super) fn remove(&mut self, at: usize) -> Option<E> {
        self.0.as_mut()?.remove(at)
    }
}

/// Packets one request stream holds beyond its ring's window, in windows: 4 (1024 packets at
/// the default window of 256).
const FAR_WINDOWS: usize = 4;

/// Per-stream PSN rings over a shared, preallocated slot pool.
pub struct ReorderCore<T> {
    pub(super) cfg: ReorderConfig,
    pub(super) mask: u32,
    pub(super) streams: Vec<Stream<T>>,
    pub(super) index: IntMap<StreamKey, u32>,
    free_streams: Vec<u32>,
    slots: Vec<Option<Slot<T>>>,
    bitmaps: Vec<u64>,
    free_rings: Vec<u32>,
    /// Streams that hold packets or are learning (their timers need checking).
    active: Vec<u32>,
    pub(super) pairing: Pairing,
    pub(super) held_bytes: usize,
    evict_hand: usize,
    next_timeout: Option<u64>,
    /// The stream found by the last lookup.
    last: Option<(StreamKey, u32)>,
    /// Totals.
    pub totals: ReorderTotals,
    hold_ns: Vec<u64>,
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

    /// The hold timeout that streams created from now on get (their downlink's own timeout);
    /// `None`: the configured one. The stage sets it before every call that may create a
    /// stream.
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
            timeout: self.next_timeout.unwrap_or(self.cfg.hold_timeout_ns),
            in_active: false,
            peer_seen: false,
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
    pub(super) fn mark_active(&mut self, si: u32) {
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

    /// Whether a packet of `len` bytes with `psn` can be held by stream `si` now. Takes
    /// nothing: a refusal leaves no ring behind.
    pub(super) fn can_hold(&self, si: u32, psn: Psn, len: u32) -> Result<(), NoHold> {
        if self.slot_of(si, psn).is_some() {
            return Err(NoHold::Collision);
        }
        if self.held_bytes + len as usize > self.cfg.max_held_bytes {
            return Err(NoHold::NoRoom);
        }
        if self.streams[si as usize].ring == NO_RING && self.free_rings.is_empty() {
            return Err(NoHold::NoRoom);
        }
        Ok(())
    }

    /// Counts a refusal to hold.
    pub(super) fn count_no_hold(&mut self, why: NoHold) {
        match why {
            NoHold::Collision => self.totals.slot_collisions += 1,
            NoHold::NoRoom => self.totals.no_room += 1,
        }
        self.totals.passthrough += 1;
    }

    /// Puts `item` in its slot. The caller checked [`Self::can_hold`].
    pub(super) fn put(
        &mut self,
        si: u32,
        item: T,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        len: u32,
        now: u64,
    ) {
        if self.streams[si as usize].ring == NO_RING {
            let Some(r) = self.free_rings.pop() else {
                // `can_hold` said there was one; keep the packet moving rather than lose it.
                debug_assert!(false, "put without a free ring");
                return;
            };
            self.streams[si as usize].ring = r;
        }
        self.mark_active(si);
        let s = &mut self.streams[si as usize];
        let ring = s.ring;
        if s.held == 0 {
            s.gap_since = now;
        }
        s.held += 1;
        s.in_ring += 1;
        s.stats.held = u64::from(s.held);
        s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
        let depth = u64::from(s.held);
        let idx = self.slot_index(ring, psn);
        self.slots[idx] = Some(Slot {
            item,
            psn,
            span,
            read,
            len,
            arrived: now,
        });
        self.bitmaps[idx / 64] |= 1 << (idx % 64);
        self.held_bytes += len as usize;
        self.totals.held_total += 1;
        self.totals.held_now += 1;
        self.totals.max_depth = self.totals.max_depth.max(depth);
    }

    /// The held packet with exactly this PSN.
    pub(super) fn occupied(&self, si: u32, psn: Psn) -> Option<&Slot<T>> {
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

    /// Takes the packet in `psn`'s slot; returns the ring to the pool when the stream's ring
    /// is empty.
    pub(super) fn take(&mut self, si: u32, psn: Psn, now: u64) -> Option<Slot<T>> {
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
        s.in_ring -= 1;
        s.stats.held = u64::from(s.held);
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(slot.arrived));
        }
        if s.in_ring == 0 {
            self.free_rings.push(s.ring);
            s.ring = NO_RING;
        }
        Some(slot)
    }

    /// Counts an ACK taken off a response stream's waiting list.
    pub(super) fn ack_taken(&mut self, si: u32, a: &WaitingAck<T>, now: u64) {
        self.held_bytes -= a.len as usize;
        self.totals.held_now -= 1;
        let s = &mut self.streams[si as usize];
        s.held -= 1;
        s.stats.held = u64::from(s.held);
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(a.arrived));
        }
    }

    /// Counts an ACK put on a response stream's waiting list.
    pub(super) fn ack_held(&mut self, si: u32, len: u32, now: u64) {
        self.mark_active(si);
        let s = &mut self.streams[si as usize];
        if s.held == 0 {
            s.gap_since = now;
        }
        s.held += 1;
        s.stats.held = u64::from(s.held);
        s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
        let depth = u64::from(s.held);
        self.held_bytes += len as usize;
        self.totals.held_total += 1;
        self.totals.held_now += 1;
        self.totals.acks_held += 1;
        self.totals.max_depth = self.totals.max_depth.max(depth);
    }

    /// Offset (0..W) from `from` of the next held slot of stream `si`, scanning the ring's
    /// bitmap word by word.
    pub(super) fn next_held(&self, si: u32, from: Psn) -> Option<u32> {
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

    pub(super) fn count_in_order(&mut self, si: u32) {
        self.streams[si as usize].stats.released += 1;
        self.totals.released_in_order += 1;
    }

    pub(super) fn count_late(&mut self, si: u32) {
        self.streams[si as usize].stats.late += 1;
        self.totals.late += 1;
    }

    /// Counts a copy of a held packet, which is discarded.
    pub(super) fn duplicate(&mut self, si: u32) -> Insert {
        self.streams[si as usize].stats.duplicates += 1;
        self.totals.duplicates += 1;
        Insert::Duplicate
    }

    /// The first held packet of stream `si` at or after `from` (ring or far list), or one of
    /// the far list behind `from`.
    pub(super) fn next_held_psn(&self, si: u32, from: Psn) -> Option<Psn> {
        // The PSN the slot really holds (the bitmap finds the slot; a slot of `from + off` can
        // hold a PSN a window apart when the expected PSN moved back).
        let ring = self
            .next_held(si, from)
            .and_then(|off| self.slot_of(si, from.add(off)).map(|sl| sl.psn));
        let far = self.streams[si as usize].far.front().map(|f| f.psn);
        match (ring, far) {
            (Some(r), Some(f)) => Some(
                if f.forward_from(from) < r.forward_from(from) || f.is_before(from) {
                    f
                } else {
                    r
                },
            ),
            (r, f) => r.or(f),
        }
    }

    /// Takes the held packet with exactly `psn`, from the ring or the far list.
    pub(super) fn take_held(&mut self, si: u32, psn: Psn, now: u64) -> Option<Slot<T>> {
        if self.occupied(si, psn).is_some() {
            return self.take(si, psn, now);
        }
        let s = &mut self.streams[si as usize];
        let at = s.far.iter().position(|f| f.psn == psn)?;
        let slot = s.far.remove(at)?;
        s.held -= 1;
        s.stats.held = u64::from(s.held);
        self.held_bytes -= slot.len as usize;
        self.totals.held_now -= 1;
        if self.hold_ns.len() < 65_536 {
            self.hold_ns.push(now.saturating_sub(slot.arrived));
        }
        Some(slot)
    }

    /// Whether stream `si` holds a packet with exactly `psn`.
    fn holds(&self, si: u32, psn: Psn) -> bool {
        self.occupied(si, psn).is_some()
            || self.streams[si as usize].far.iter().any(|f| f.psn == psn)
    }

    /// Holds a packet beyond the ring's window, in PSN order; false when the list or the byte
    /// budget is full.
    pub(super) fn put_far(&mut self, si: u32, slot: Slot<T>, counted: bool) -> Result<(), Slot<T>> {
        let s = &mut self.streams[si as usize];
        if s.far.len() >= FAR_WINDOWS * (self.mask as usize + 1)
            || (!counted && self.held_bytes + slot.len as usize > self.cfg.max_held_bytes)
        {
            return Err(slot);
        }
        let at = s
            .far
            .rposition(|f| f.psn.is_before(slot.psn))
            .map_or(0, |i| i + 1);
        if !counted {
            if s.held == 0 {
                s.gap_since = slot.arrived;
            }
            s.held += 1;
            s.stats.held = u64::from(s.held);
            s.stats.max_depth = s.stats.max_depth.max(u64::from(s.held));
            let depth = u64::from(s.held);
            self.held_bytes += slot.len as usize;
            self.totals.held_total += 1;
            self.totals.held_now += 1;
            self.totals.max_depth = self.totals.max_depth.max(depth);
        }
        let s = &mut self.streams[si as usize];
        s.far.insert(at, slot);
        self.mark_active(si);
        Ok(())
    }

    /// Moves ring entries outside `[e, e + W)` to the far list (after the expected PSN moved
    /// back or was chosen by learning), so that the ring's scan order is PSN order again.
    /// Entries that do not fit the far list are released (late).
    fn normalize_ring(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        let ring = self.streams[si as usize].ring;
        if ring == NO_RING {
            return;
        }
        let e = self.streams[si as usize].expected;
        let w = self.mask + 1;
        let base = ring as usize * w as usize;
        for pos in 0..w as usize {
            let idx = base + pos;
            if self.bitmaps[idx / 64] & (1 << (idx % 64)) == 0 {
                continue;
            }
            let Some(psn) = self.slots[idx].as_ref().map(|sl| sl.psn) else {
                continue;
            };
            let d = psn.distance(e);
            if d >= 0 && (d as u32) <= self.mask {
                continue;
            }
            // Out of the ring without counting a release: it is still held.
            let Some(slot) = self.slots[idx].take() else {
                continue;
            };
            self.bitmaps[idx / 64] &= !(1 << (idx % 64));
            let st = &mut self.streams[si as usize];
            st.in_ring -= 1;
            if st.in_ring == 0 {
                self.free_rings.push(st.ring);
                st.ring = NO_RING;
            }
            if let Err(slot) = self.put_far(si, slot, true) {
                let st = &mut self.streams[si as usize];
                st.held -= 1;
                st.stats.held = u64::from(st.held);
                self.held_bytes -= slot.len as usize;
                self.totals.held_now -= 1;
                if self.hold_ns.len() < 65_536 {
                    self.hold_ns.push(now.saturating_sub(slot.arrived));
                }
                self.count_late(si);
                out.push(slot.item);
            }
            if self.streams[si as usize].ring == NO_RING {
                break;
            }
        }
    }

    /// Releases every packet stream `si` holds (ring and far list), in PSN order from its
    /// expected PSN; returns the PSN after the last one released.
    pub(super) fn flush_ring(&mut self, si: u32, now: u64, out: &mut Vec<T>) -> Option<Psn> {
        let mut after = None;
        let mut from = self.streams[si as usize].expected;
        while let Some(q) = self.next_held_psn(si, from) {
            let Some(slot) = self.take_held(si, q, now) else {
                break;
            };
            after = Some(slot.psn.add(slot.span));
            out.push(slot.item);
            if !q.is_before(from) {
                from = q.add(1);
            }
        }
        after
    }

    // ------------------------------------------------------------------ request direction

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
        self.insert_request_read(key, psn, span, None, None, len, item, now, out)
    }

    /// Inserts a request-direction packet; a READ REQUEST (`read`: its DMA length) spans what
    /// the QP's path MTU makes of it once that is known, `span` (the engine's estimate at the
    /// largest path MTU the port allows, never too long) until then. `peer`: the sender's
    /// address and UDP source port, which the QP pairing hears of once per stream.
    pub fn insert_request_read(
        &mut self,
        key: StreamKey,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        peer: Option<(u128, u16)>,
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
        if let (Some((remote, sport)), StreamKey::Request { local, qpn }) = (peer, key) {
            if !self.streams[si as usize].peer_seen {
                self.streams[si as usize].peer_seen = true;
                self.learn_pair(local, remote, sport, qpn);
            }
        }
        let idle_for = now.saturating_sub(self.streams[si as usize].last_seen);
        self.streams[si as usize].last_seen = now;
        if let Phase::Learning { until, min, max } = self.streams[si as usize].phase {
            if now < until {
                return self.learn_hold(si, psn, span, read, len, item, now, out, until, min, max);
            }
            if self.streams[si as usize].held == 0 {
                // Nothing collected (learning disabled, or its window passed empty): this
                // packet starts the stream.
                self.start_at(si, psn);
            } else {
                self.finish_learning(si, now, out);
            }
        } else if self.starts_over(si, psn, idle_for) {
            // Back from idle far from where it left off: a new PSN sequence (a re-created QP,
            // a requester retransmitting after a long stall); or a stream that never released
            // a packet, started at a CM exchange's PSN, whose first packet is far from it (the
            // QP was re-created without CM); or a packet too far from the old sequence to be of
            // it (a QP re-created without CM at once). The new sequence is learned as a new
            // stream's is; whatever is held is of it (see `starts_over`) and is learned again
            // with it.
            let mut again = Vec::new();
            while let Some(f) = self.streams[si as usize].far.front().map(|f| f.psn) {
                match self.take_held(si, f, now) {
                    Some(slot) => again.push(slot),
                    None => break,
                }
            }
            self.restart(si, now);
            if self.cfg.learn_ns > 0 {
                for sl in again {
                    let Phase::Learning { until, min, max } = self.streams[si as usize].phase
                    else {
                        // Learning ended early (no room): the rest goes the normal way.
                        self.insert_active(si, sl.psn, sl.span, sl.read, sl.len, sl.item, now, out);
                        continue;
                    };
                    self.learn_hold(
                        si, sl.psn, sl.span, sl.read, sl.len, sl.item, now, out, until, min, max,
                    );
                }
                if let Phase::Learning { until, min, max } = self.streams[si as usize].phase {
                    return self
                        .learn_hold(si, psn, span, read, len, item, now, out, until, min, max);
                }
            } else {
                let first =
                    again
                        .iter()
                        .map(|sl| sl.psn)
                        .fold(psn, |m, p| if p.is_before(m) { p } else { m });
                self.start_at(si, first);
                for sl in again {
                    self.insert_active(si, sl.psn, sl.span, sl.read, sl.len, sl.item, now, out);
                }
            }
        }
        self.insert_active(si, psn, span, read, len, item, now, out)
    }

    /// Whether a packet with `psn`, after the stream was `idle_for` ns without one, starts a
    /// new PSN sequence (see [`ReorderCore::insert_request_read`]).
    fn starts_over(&self, si: u32, psn: Psn, idle_for: u64) -> bool {
        let s = &self.streams[si as usize];
        let d = psn.distance(s.expected);
        // A requester retransmits from its oldest unacknowledged PSN, which the switch has
        // seen within what a host keeps in flight (`HOST_PSN_REACH`); further behind, the PSN
        // belongs to another sequence.
        // Far ahead takes more: one READ REQUEST may span thousands of PSNs, and what follows
        // it overtakes it; a quarter of the PSN space is beyond any READs in flight.
        let reach = super::pairing::HOST_PSN_REACH;
        let far_behind = d < 0 && d.unsigned_abs() > reach;
        let far_ahead = d > 0 && d as u32 > NEW_SEQUENCE_AHEAD;
        // What is held must all be as far from the old sequence (the new one's first packets,
        // in the far list); packets of the old sequence held in the ring keep it going. (Only
        // looked at for a far packet: the far list is not walked on the packet path.)
        if (far_behind || far_ahead)
            && s.held as usize == s.far.len()
            && s.far
                .iter()
                .all(|f| f.psn.distance(s.expected).unsigned_abs() > reach)
        {
            return true;
        }
        s.held == 0
            && (idle_for >= self.cfg.learn_ns.max(1) || s.stats.released == 0)
            && d.unsigned_abs() > self.mask
    }

    /// Ends learning (or a restart) with `psn` as the first expected PSN.
    fn start_at(&mut self, si: u32, psn: Psn) {
        let s = &mut self.streams[si as usize];
        s.phase = Phase::Active;
        s.expected = psn;
        self.totals.learned += 1;
    }

    /// Puts an idle stream (holding nothing) back into learning.
    fn restart(&mut self, si: u32, now: u64) {
        let s = &mut self.streams[si as usize];
        s.stats.restarts += 1;
        s.phase = Phase::Learning {
            until: now.saturating_add(self.cfg.learn_ns),
            min: s.expected,
            max: s.expected,
        };
        self.totals.restarts += 1;
        self.mark_active(si);
    }

    fn learn_hold(
        &mut self,
        si: u32,
        psn: Psn,
        span: u32,
        read: Option<u32>,
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
        if self.holds(si, psn) {
            return self.duplicate(si);
        }
        // A packet whose ring slot is taken (a PSN a window apart: READ REQUESTs span many
        // PSNs) waits in the far list; when neither has room, learning ends here and this
        // packet goes the normal way.
        match self.can_hold(si, psn, len) {
            Ok(()) => self.put(si, item, psn, span, read, len, now),
            Err(why) => {
                let slot = Slot {
                    item,
                    psn,
                    span,
                    read,
                    len,
                    arrived: now,
                };
                if let Err(slot) = if why == NoHold::Collision {
                    self.put_far(si, slot, false)
                } else {
                    Err(slot)
                } {
                    if first {
                        self.start_at(si, psn);
                    } else {
                        self.finish_learning(si, now, out);
                    }
                    return self.insert_active(si, psn, span, read, len, slot.item, now, out);
                }
            }
        }
        self.streams[si as usize].phase = Phase::Learning {
            until,
            min: new_min,
            max: new_max,
        };
        Insert::Held
    }

    pub(super) fn finish_learning(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        let learn_ns = self.cfg.learn_ns;
        let s = &mut self.streams[si as usize];
        if let Phase::Learning { min, until, .. } = s.phase {
            s.phase = Phase::Active;
            let held = s.held;
            if held > 0 {
                s.expected = min;
            }
            self.totals.learned += 1;
            self.normalize_ring(si, now, out);
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
        read: Option<u32>,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let e = self.streams[si as usize].expected;
        let d = psn.distance(e);
        if d == 0 {
            out.push(item);
            self.count_in_order(si);
            self.advance(si, span, read, now, out);
            self.drain_request(si, now, out);
            return Insert::Released;
        }
        if d < 0 {
            out.push(item);
            self.count_late(si);
            return Insert::Late;
        }
        if self.holds(si, psn) {
            return self.duplicate(si);
        }
        if d as u32 > self.mask {
            // Beyond the ring's window: the far list holds it if it can.
            let slot = Slot {
                item,
                psn,
                span,
                read,
                len,
                arrived: now,
            };
            return match self.put_far(si, slot, false) {
                Ok(()) => Insert::Held,
                Err(slot) => self.overflow(si, psn, span, read, len, slot.item, now, out),
            };
        }
        match self.can_hold(si, psn, len) {
            Ok(()) => {
                self.put(si, item, psn, span, read, len, now);
                Insert::Held
            }
            Err(why) => {
                out.push(item);
                self.count_no_hold(why);
                Insert::Passthrough
            }
        }
    }

    /// A packet beyond the window that the far list cannot hold: release held packets in
    /// order, skipping gaps, until it fits.
    fn overflow(
        &mut self,
        si: u32,
        psn: Psn,
        span: u32,
        read: Option<u32>,
        len: u32,
        item: T,
        now: u64,
        out: &mut Vec<T>,
    ) -> Insert {
        let released = self.make_room(si, psn, now, out);
        self.streams[si as usize].stats.overflows += 1;
        self.totals.overflows += 1;
        let e = self.streams[si as usize].expected;
        if e == psn {
            out.push(item);
            self.count_in_order(si);
            self.advance(si, span, read, now, out);
            self.drain_request(si, now, out);
            return Insert::Overflowed { released };
        }
        if psn.is_before(e) || self.holds(si, psn) {
            // Released on the way, or a copy now: it goes as late.
            out.push(item);
            self.count_late(si);
            return Insert::Overflowed { released };
        }
        match self.can_hold(si, psn, len) {
            Ok(()) => self.put(si, item, psn, span, read, len, now),
            Err(why) => {
                out.push(item);
                self.count_no_hold(why);
            }
        }
        Insert::Overflowed { released }
    }

    /// Moves `e` past a packet of `span` PSNs (a READ REQUEST: of its DMA length at the QP's
    /// path MTU, once known); held packets inside the span are late.
    fn advance(&mut self, si: u32, span: u32, read: Option<u32>, now: u64, out: &mut Vec<T>) {
        let e = self.streams[si as usize].expected;
        let s = &mut self.streams[si as usize];
        let span = match read {
            Some(l) if s.pmtu > 0 => l.div_ceil(s.pmtu).max(1),
            _ => span,
        };
        s.est_read = match read {
            Some(l) if s.pmtu == 0 => Some((e, l, span)),
            _ => None,
        };
        if span > 1 {
            // Held packets inside the span are late (nothing is sent there): released in PSN
            // order, the far list's with the ring's.
            let end = e.add(span);
            for k in 1..span.min(self.mask + 1) {
                let q = e.add(k);
                self.release_far_before(si, q.add(1), now, out);
                if self.occupied(si, q).is_some() {
                    if let Some(slot) = self.take(si, q, now) {
                        self.count_late(si);
                        out.push(slot.item);
                    }
                }
            }
            self.release_far_before(si, end, now, out);
        }
        self.streams[si as usize].expected = e.add(span);
    }

    /// Releases (late) the far list's packets before `end`.
    fn release_far_before(&mut self, si: u32, end: Psn, now: u64, out: &mut Vec<T>) {
        while let Some(f) = self.streams[si as usize].far.front().map(|f| f.psn) {
            if !f.is_before(end) {
                break;
            }
            let Some(slot) = self.take_held(si, f, now) else {
                break;
            };
            self.count_late(si);
            out.push(slot.item);
        }
    }

    /// Releases consecutive held packets from `e` on.
    fn drain_request(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        loop {
            let e = self.streams[si as usize].expected;
            // The far list's front, once the expected PSN reached it (or passed it: a READ's
            // span covered it, and it is late).
            if let Some(f) = self.streams[si as usize].far.front().map(|f| f.psn) {
                if !f.is_after(e) {
                    let Some(slot) = self.take_held(si, f, now) else {
                        break;
                    };
                    if f == e && self.occupied(si, e).is_none() {
                        let (span, read) = (slot.span, slot.read);
                        out.push(slot.item);
                        self.count_in_order(si);
                        self.advance(si, span, read, now, out);
                    } else {
                        out.push(slot.item);
                        self.count_late(si);
                    }
                    continue;
                }
            }
            if self.occupied(si, e).is_none() {
                break;
            }
            if let Some(slot) = self.take(si, e, now) {
                let (span, read) = (slot.span, slot.read);
                out.push(slot.item);
                self.count_in_order(si);
                self.advance(si, span, read, now, out);
            }
        }
        let s = &mut self.streams[si as usize];
        if s.held > 0 {
            // A new gap opens at the front: time it from now.
            s.gap_since = now;
        }
    }

    /// Releases held packets in PSN order, skipping gaps, until `psn` fits the window; when
    /// nothing is left to release and it still does not fit, `psn` becomes the expected PSN
    /// (the packets between are more than a window behind it: lost, or too late to order).
    fn make_room(&mut self, si: u32, psn: Psn, now: u64, out: &mut Vec<T>) -> u32 {
        let mut released = 0;
        loop {
            let e = self.streams[si as usize].expected;
            if (psn.distance(e) as u32) <= self.mask {
                break;
            }
            match self.next_held_psn(si, e) {
                Some(q) => {
                    // Give up on the gap before the next held packet and release it.
                    let Some(slot) = self.take_held(si, q, now) else {
                        break;
                    };
                    out.push(slot.item);
                    released += 1;
                    if q.is_before(e) {
                        self.count_late(si);
                        continue;
                    }
                    self.streams[si as usize].expected = q;
                    let (span, read) = (slot.span, slot.read);
                    self.count_in_order(si);
                    self.advance(si, span, read, now, out);
                }
                None => {
                    self.streams[si as usize].expected = psn;
                    break;
                }
            }
        }
        self.drain_request(si, now, out);
        released
    }

    /// Moves a request stream's expected PSN to `psn` (the host's NAK, RNR NAK, ACK or a CM
    /// exchange named it) and releases what that makes due. True when anything changed.
    pub(super) fn resync(&mut self, si: u32, psn: Psn, now: u64, out: &mut Vec<T>) -> bool {
        let s = &mut self.streams[si as usize];
        let learning = matches!(s.phase, Phase::Learning { .. });
        let old = match s.phase {
            Phase::Learning { min, .. } if s.held > 0 => min,
            _ => s.expected,
        };
        if !learning && old == psn {
            // Nothing moves, but the host asked for the gap again: its retransmission is on the
            // way, so the gap gets a full timeout from now.
            if s.held > 0 {
                s.gap_since = now;
            }
            return false;
        }
        s.phase = Phase::Active;
        s.expected = old;
        if s.held > 0 {
            self.normalize_ring(si, now, out);
            if psn.is_after(old) {
                // Held packets below the new expected PSN are behind it now: release them.
                while let Some(q) = self.next_held_psn(si, old) {
                    if !q.is_before(psn) {
                        break;
                    }
                    let Some(slot) = self.take_held(si, q, now) else {
                        break;
                    };
                    out.push(slot.item);
                    self.count_late(si);
                }
            }
            // Moving back (the RNIC dropped what a timeout released), everything held is kept:
            // retransmitted copies of it are discarded as duplicates and the held originals go
            // out in order. What no longer fits the ring's window waits in the far list.
            self.streams[si as usize].expected = psn;
            self.normalize_ring(si, now, out);
        }
        self.streams[si as usize].expected = psn;
        self.drain_request(si, now, out);
        if self.streams[si as usize].held > 0 {
            self.mark_active(si);
        }
        true
    }

    /// The QP of request stream `key` runs at path MTU `pmtu` (a FIRST or MIDDLE packet of it,
    /// or the local responder's READ RESPONSE, showed it). If the last READ REQUEST released
    /// was sized at a larger path MTU, the PSNs it really spans are not coming: move on.
    pub fn learn_request_pmtu(&mut self, key: StreamKey, pmtu: u32, now: u64, out: &mut Vec<T>) {
        if let Some(si) = self.find(&key) {
            self.learn_stream_pmtu(si, pmtu, now, out);
        }
    }

    pub(super) fn learn_stream_pmtu(&mut self, si: u32, pmtu: u32, now: u64, out: &mut Vec<T>) {
        if !(256..=4096).contains(&pmtu) || !pmtu.is_power_of_two() {
            return;
        }
        let s = &mut self.streams[si as usize];
        if s.pmtu == pmtu {
            return;
        }
        s.pmtu = pmtu;
        if let Some((q, l, used)) = s.est_read.take() {
            let real = l.div_ceil(pmtu).max(1);
            if real > used && s.expected == q.add(used) && matches!(s.phase, Phase::Active) {
                s.expected = q.add(real);
                // Held packets inside the READ's real span are copies of nothing: late.
                for k in used..real.min(self.mask + 1) {
                    let p = q.add(k);
                    if self.occupied(si, p).is_some() {
                        if let Some(slot) = self.take(si, p, now) {
                            self.count_late(si);
                            out.push(slot.item);
                        }
                    }
                }
                self.drain_request(si, now, out);
            }
        }
    }

    // ------------------------------------------------------------------ timers and eviction

    /// Checks timers at `now`: ends learning windows, declares timed-out gaps lost (releasing
    /// what is held, in order), and evicts a few idle streams.
    pub fn poll(&mut self, now: u64, out: &mut Vec<T>) {
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
                if let Some(after) = self.flush_ring(si, now, out) {
                    self.streams[si as usize].expected = after;
                }
            }
            StreamKey::Response { .. } => self.response_timeout(si, now, out),
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
            // A response stream with READs outstanding is waiting, not idle: their responses
            // can queue behind other traffic far longer than a stream's packets are apart, and
            // forgetting the ranges would let the ACKs after them pass the responses.
            let after = if s.reads.is_empty() {
                self.cfg.idle_evict_ns
            } else {
                self.cfg.idle_evict_ns.saturating_mul(READ_WAIT_FACTOR)
            };
            if live && now.saturating_sub(s.last_seen) >= after {
                self.free_stream(si, now, out);
                self.totals.evictions += 1;
            }
        }
    }

    /// Forgets stream `si`, releasing (in order) whatever it still holds.
    pub(super) fn free_stream(&mut self, si: u32, now: u64, out: &mut Vec<T>) {
        self.flush_ring(si, now, out);
        while let Some(a) = self.streams[si as usize].acks.pop_front() {
            self.ack_taken(si, &a, now);
            out.push(a.item);
        }
        let s = &mut self.streams[si as usize];
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
        self.free_streams.push(si);
        if self.streams[si as usize].in_active {
            self.streams[si as usize].in_active = false;
            self.active.retain(|a| *a != si);
        }
        self.totals.streams = self.index.len() as u64;
    }
}
