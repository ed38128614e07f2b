//! What the core keeps per stream: its key, phase, expected PSN, ring, far list and (response
//! streams) READ ranges and waiting ACKs.
//!
//! **Streams.** A request stream is keyed by (local host address, local QPN) and carries the
//! remote requester's PSNs (SEND, WRITE, READ REQUEST, atomics). A response stream is keyed by
//! (local host address, remote address, remote QPN): the QP the local requester sends its
//! READs to, which is what the switch sees first; the responses, addressed to the local QPN,
//! find it through the QP pairing.

use std::collections::VecDeque;

use super::paths::PathTrack;
use crate::wire::Psn;

/// A stream's index in the table ([`super::table::StreamTable`]).
pub(super) type StreamId = u32;

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

impl StreamKey {
    /// The key folded to one 64-bit word, for hashing (not unique: tables compare the key).
    #[inline]
    pub(super) fn word(&self) -> u64 {
        match *self {
            StreamKey::Request { local, qpn } => fold(local) ^ u64::from(qpn) << 8,
            StreamKey::Response {
                local,
                remote,
                remote_qpn,
            } => {
                fold(local)
                    ^ fold(remote).rotate_left(29)
                    ^ u64::from(remote_qpn) << 36
                    ^ 0x5bd1_e995
            }
        }
    }
}

impl std::hash::Hash for StreamKey {
    /// One 64-bit word per key: the integer hasher mixes it once (a derived `Hash` would feed
    /// the enum discriminant byte by byte).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.word());
    }
}

/// What a downlink's streams do when they declare a gap lost (by path order or timeout), so that
/// the host's RNIC asks for the missing packet at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LossRecovery {
    /// Release the first held packet only: it is out of sequence, so a Go-Back-N responder NAKs
    /// the gap at once (and drops it); the rest stays held and follows the retransmission of
    /// the gap in order, so the RNIC drops nothing else.
    #[default]
    NakFirst,
    /// Release what follows the gap up to the next gap: a selective-repeat responder
    /// (ConnectX-6/7) keeps it and NAKs the gap at once, and resends only the gap. A later gap
    /// declared before the first one's retransmission passed waits for it (the RNIC NAKs one
    /// gap at a time), then goes the same way.
    ReleaseRun,
}

impl core::str::FromStr for LossRecovery {
    type Err = String;
    /// `nak_first` or `release_run`, as configuration files name them.
    fn from_str(s: &str) -> Result<LossRecovery, String> {
        match s {
            "nak_first" => Ok(LossRecovery::NakFirst),
            "release_run" => Ok(LossRecovery::ReleaseRun),
            other => Err(format!("'{other}': use 'nak_first' or 'release_run'")),
        }
    }
}

/// What a downlink does with the fabric's reordering of RoCE towards its hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DownlinkMode {
    /// Hold out-of-order packets and release them in PSN order: every RNIC sees an in-order
    /// stream (the only road for Go-Back-N RNICs, and the only one that keeps a WRITE's data
    /// placed before a later WRITE's).
    #[default]
    Reorder,
    /// Forward every packet as it comes and judge the host's sequence NAKs instead
    /// ([`super::nak_filter`]): a NAK for a PSN still in flight is dropped, one for a declared
    /// loss passes. For selective-repeat RNICs only, which keep what comes out of order.
    NakFilter,
    /// Forward everything as it comes and judge nothing (spraying without help: the RNIC sees
    /// the fabric's reordering).
    Pass,
}

impl DownlinkMode {
    /// The name configuration files use.
    pub fn text(self) -> &'static str {
        match self {
            DownlinkMode::Reorder => "reorder",
            DownlinkMode::NakFilter => "nak_filter",
            DownlinkMode::Pass => "pass",
        }
    }
}

impl core::str::FromStr for DownlinkMode {
    type Err = String;
    /// `reorder`, `nak_filter` or `pass`.
    fn from_str(s: &str) -> Result<DownlinkMode, String> {
        match s {
            "reorder" => Ok(DownlinkMode::Reorder),
            "nak_filter" => Ok(DownlinkMode::NakFilter),
            "pass" => Ok(DownlinkMode::Pass),
            other => Err(format!("'{other}': use 'reorder', 'nak_filter' or 'pass'")),
        }
    }
}

/// The reorder settings of one downlink: what its streams get when they are created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortReorder {
    /// Hold timeout (`None`: the switch's).
    pub hold_timeout_ns: Option<u64>,
    /// What a declared loss releases.
    pub recovery: LossRecovery,
    /// Reorder, filter NAKs, or pass.
    pub mode: DownlinkMode,
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
    /// Gaps declared lost by path order.
    pub path_losses: u64,
    /// Resyncs from NAKs.
    pub resyncs: u64,
    /// Starts over at a far PSN.
    pub restarts: u64,
}

/// One outstanding READ, atomic or FLUSH of a local requester: its responses fill
/// `[start, start + span)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRange {
    /// First PSN.
    pub start: Psn,
    /// PSNs it spans: exact once `exact`, else the estimate from `dma_len` and the path MTU.
    pub span: u32,
    /// The READ's DMA length (0 for atomics and FLUSH).
    pub dma_len: u32,
    /// The end is known: a LAST or ONLY response came, the next request starts there, or the
    /// request has one response by definition (atomics, FLUSH, ATOMIC WRITE).
    pub exact: bool,
}

impl ReadRange {
    /// Its last PSN.
    pub(super) fn last(&self) -> Psn {
        self.start.add(self.span.max(1) - 1)
    }
}

/// A held packet: the item and what ordering it needs.
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

/// One stream's state: four cache lines, aligned to them (the table prefetches a stream's
/// lines for a burst before its packets are handled; a stream that straddled five lines would
/// leave one to miss).
#[repr(align(64))]
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
    /// What a declared loss releases (its downlink's choice).
    pub(super) recovery: LossRecovery,
    /// Its downlink (what it holds counts towards that port's queue).
    pub(super) port: u16,
    /// The fabric paths it arrived on (path-order loss detection).
    pub(super) paths: PathTrack,
    /// Listed in `active` (its timers need checking).
    pub(super) in_active: bool,
    /// Request streams: the QP pairing has heard of this QP's peer (once per stream life).
    pub(super) peer_seen: bool,
    /// Its downlink filters NAKs ([`DownlinkMode::NakFilter`]): what it holds are marks of
    /// PSNs already forwarded, not packets.
    pub(super) nak_filter: bool,
    /// Request streams: the PSN the local host last NAKed (a sequence NAK names the one it
    /// takes next, an RNR NAK the one it could not take), [`NOT_NAKED`] before any or after
    /// the stream started a new PSN sequence. A Go-Back-N host that NAKed the gap at the
    /// expected PSN takes nothing else until the gap comes (and after a sequence NAK says
    /// nothing more): [`super::core::ReorderCore`]'s `timeout` keeps the gap for it. A bare
    /// PSN value, not an `Option<Psn>`: its 4 bytes fit in the struct's padding, where an
    /// `Option` would grow every stream by 16 (100k streams must fit in 64 MiB).
    pub(super) host_naked_psn: u32,
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

impl<T> Stream<T> {
    /// A stream of `key` in `phase` expecting `expected`, seen first at `now`, holding
    /// nothing, with no downlink settings yet (port 0, no timeout, `nak_first`).
    pub(super) fn new(key: StreamKey, phase: Phase, expected: Psn, now: u64) -> Stream<T> {
        Stream {
            key,
            expected,
            phase,
            ring: NO_RING,
            held: 0,
            in_ring: 0,
            gap_since: now,
            last_seen: now,
            timeout: 0,
            recovery: LossRecovery::default(),
            port: 0,
            paths: PathTrack::default(),
            in_active: false,
            peer_seen: false,
            host_naked_psn: NOT_NAKED,
            far: LazyDeque::default(),
            reads: LazyDeque::default(),
            acks: LazyDeque::default(),
            pmtu: 0,
            est_read: None,
            nak_filter: false,
            stats: StreamStats::default(),
        }
    }

    /// Drops the far list, READ ranges and waiting ACKs (the stream is forgotten).
    pub(super) fn forget_lists(&mut self) {
        self.far = LazyDeque::default();
        self.reads = LazyDeque::default();
        self.acks = LazyDeque::default();
    }

    /// Whether it is learning where its PSNs start.
    #[inline]
    pub(super) fn learning(&self) -> bool {
        matches!(self.phase, Phase::Learning { .. })
    }

    /// Heap bytes of its lists.
    pub(super) fn heap_bytes(&self) -> usize {
        self.reads.capacity() * std::mem::size_of::<ReadRange>()
            + self.far.capacity() * std::mem::size_of::<Slot<T>>()
            + self.acks.capacity() * std::mem::size_of::<WaitingAck<T>>()
            + self.paths.heap_bytes()
    }
}

/// When a `nak_filter` stream's expected PSN moved: samples it keeps (one per eighth of its
/// hold timeout at most, so that they span at least one hold timeout).
pub(super) const PASSES: usize = 8;
/// Losses a `nak_filter` stream remembers declaring.
pub(super) const DECLARED: usize = 4;
/// PSNs behind the expected one whose front-gap fills a `nak_filter` stream remembers (a bit
/// each).
pub(super) const FILL_BITS: usize = 1024;

/// What a `nak_filter` stream keeps to judge its host's NAKs ([`super::nak_filter`]).
pub(super) struct NakJudge<T> {
    /// A NAK or READ retry kept back: the first PSN it asks for that has not come, how many
    /// it still covers from there, and the packet itself (already routed).
    pub(super) pending: Option<(Psn, u32, T)>,
    /// The expected PSN as it moved on, and when (ring): when the stream passed a PSN, which a
    /// NAK naming it may have crossed.
    pub(super) passed: [(Psn, u64); PASSES],
    pub(super) next_pass: usize,
    /// PSN ranges `[from, to)` the stream moved past declaring a loss (path order, timeout,
    /// overflow), ring: NAKs naming them pass.
    pub(super) declared: [(Psn, Psn); DECLARED],
    pub(super) next_declared: usize,
    /// Which of the last [`FILL_BITS`] PSNs behind the expected one filled the front gap (a
    /// bit per PSN, by `psn % FILL_BITS`): only such a packet went out after a later one of
    /// its stream, so only a NAK naming one can have crossed it.
    pub(super) fills: [u64; FILL_BITS / 64],
    /// The expected PSN, the stream's losses declared (path order, timeouts, overflows) and
    /// its restarts, when last looked at.
    pub(super) last_e: Psn,
    pub(super) last_losses: u64,
    pub(super) last_restarts: u64,
}

impl<T> NakJudge<T> {
    /// A stream expecting `e` that has declared `losses` losses and started over `restarts`
    /// times so far.
    pub(super) fn new(e: Psn, losses: u64, restarts: u64) -> NakJudge<T> {
        NakJudge {
            pending: None,
            passed: [(Psn::new(0), 0); PASSES],
            next_pass: 0,
            declared: [(Psn::new(0), Psn::new(0)); DECLARED],
            next_declared: 0,
            fills: [0; FILL_BITS / 64],
            last_e: e,
            last_losses: losses,
            last_restarts: restarts,
        }
    }

    /// Whether `psn` filled the front gap (among the last [`FILL_BITS`] PSNs).
    pub(super) fn filled(&self, psn: Psn) -> bool {
        let b = psn.value() as usize % FILL_BITS;
        self.fills[b / 64] >> (b % 64) & 1 == 1
    }

    /// Marks (or clears) `psn` as a front-gap fill.
    pub(super) fn set_filled(&mut self, psn: Psn, on: bool) {
        let b = psn.value() as usize % FILL_BITS;
        if on {
            self.fills[b / 64] |= 1 << (b % 64);
        } else {
            self.fills[b / 64] &= !(1 << (b % 64));
        }
    }
}

pub(super) const NO_RING: u32 = u32::MAX;

/// [`Stream::host_naked_psn`] before the host NAKed anything (no PSN has this value).
pub(super) const NOT_NAKED: u32 = u32::MAX;

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
    pub(super) fn deque(&mut self) -> &mut VecDeque<E> {
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
