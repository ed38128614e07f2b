//! The reorder stage on the way to a downlink.
//!
//! Routed RC and UC RoCE packets towards a downlink pass through a [`DownlinkStage`] owned by the
//! worker that owns the downlink port, so that each stream's state has exactly one owner (other
//! workers hand such packets over through lock-free rings). [`ReorderStage`] holds packets and
//! releases them later, in order, around a [`ReorderCore`] (the per-stream state machine over
//! plain items); [`Passthrough`] releases everything at once.
//!
//! The core is built from parts that each own their state, each in its own file:
//!
//! - [`config`]: the limits and timers, and the bounds every part shares;
//! - [`stream`]: what is kept per stream (its key, phase, expected PSN, READ ranges);
//! - `table`: every stream by index, the free list, the streams whose timers run, eviction;
//!   `index`: which stream a key names (8-byte slots, the key compared in the stream);
//!   `timers`: when each holding or learning stream is next due;
//! - `pool`: where held packets live: rings of PSN slots, far lists, the bytes held;
//! - [`paths`]: what each fabric path delivered of a stream (path-order loss detection);
//! - [`sources`]: what each source host's path stamps showed (evidence for all its QPs);
//! - [`skew`]: how late the paths deliver (the hold timeout in force is never shorter);
//! - `evidence`: the fabric's evidence shared by every stream (paths up, sources, skew);
//! - [`pairing`]: which local QP a remote QP talks to (RDMA CM, UDP source port, PSN);
//! - `nak_filter`: the other road, judging a selective-repeat host's NAKs instead of holding;
//! - `held`: one stream at work over the pool; [`request`] and [`response`]: the two
//!   directions' operations on it; `loss`: when and how a stream gives up on its gap;
//! - [`core`]: [`ReorderCore`], the parts joined behind `handle_packet`, `handle_host`,
//!   `poll` and `poll_timeout`;
//! - [`totals`]: the counters, declared once;
//! - [`stage`]: [`ReorderStage`], the core over real packets (what it releases is paced by
//!   each downlink's egress queue, [`crate::egress`]).

pub mod config;
pub mod core;
pub(crate) mod evidence;
pub(crate) mod held;
pub(crate) mod loss;
pub mod nak_filter;
pub mod pairing;
pub mod paths;
pub(crate) mod pool;
pub mod request;
pub mod response;
pub mod skew;
pub mod sources;
pub mod stage;
pub mod stream;
pub(crate) mod index;
pub(crate) mod table;
pub(crate) mod timers;
pub mod totals;

pub use self::config::ReorderConfig;
pub use self::core::ReorderCore;
pub use self::pairing::CmEvent;
pub use self::response::{HostRequest, ResponseKind};
pub use self::stage::ReorderStage;
pub use self::stream::{
    DownlinkMode, Insert, LossRecovery, PortReorder, ReadRange, StreamKey, StreamStats,
};
pub use self::totals::{ReorderCounters, ReorderTotals};

pub use crate::meta::{MetaKind, QpRef, RoceMeta};

use crate::ids::PortId;
use crate::pkt::Pkt;
use crate::wire::Psn;

/// Packets queued for a [`DownlinkStage`] in the order they came, each with its egress and its
/// RoCE facts. The facts lie apart from the packets: handing a burst over moves each packet
/// (tens of bytes) once and reads its facts where they lie, instead of moving a record of both
/// (160 bytes) out of the queue first.
#[derive(Debug, Default)]
pub struct Burst {
    facts: Vec<(PortId, RoceMeta)>,
    pkts: Vec<Pkt>,
}

impl Burst {
    /// An empty burst with room for `n` packets.
    pub fn with_capacity(n: usize) -> Burst {
        Burst {
            facts: Vec::with_capacity(n),
            pkts: Vec::with_capacity(n),
        }
    }

    /// Queues `pkt`, bound for `egress`, with its facts.
    #[inline]
    pub fn push(&mut self, egress: PortId, pkt: Pkt, meta: RoceMeta) {
        self.facts.push((egress, meta));
        self.pkts.push(pkt);
    }

    /// Packets queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// The queued packets' egress ports and facts, in order.
    #[inline]
    pub fn facts(&self) -> &[(PortId, RoceMeta)] {
        &self.facts
    }

    /// Takes the queued packets out in order: `f` gets every packet's facts, the packet's
    /// index among them and the packet. The burst is left empty (also when `f` panics: the
    /// facts are taken out first, so the two never fall out of step).
    #[inline]
    pub fn take_each(&mut self, mut f: impl FnMut(&[(PortId, RoceMeta)], usize, Pkt)) {
        let mut facts = std::mem::take(&mut self.facts);
        debug_assert_eq!(facts.len(), self.pkts.len());
        for (i, pkt) in self.pkts.drain(..).enumerate() {
            f(&facts, i, pkt);
        }
        facts.clear();
        // Its allocation back, for the next burst.
        self.facts = facts;
    }
}

/// A stage that may hold packets for a downlink and release them later.
pub trait DownlinkStage: Send {
    /// Takes a packet bound for `egress`; appends what it releases now to `out`.
    fn insert(
        &mut self,
        egress: PortId,
        pkt: Pkt,
        meta: &RoceMeta,
        now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    );

    /// Takes a burst of packets, each bound for its egress with its RoCE facts, in order, as
    /// [`DownlinkStage::insert`] would one by one (the burst is left empty). A stage with
    /// per-stream state starts loading every packet's state before it handles the first, so
    /// that their cache misses overlap.
    fn insert_burst(&mut self, burst: &mut Burst, now: u64, out: &mut Vec<(PortId, Pkt)>) {
        burst.take_each(|facts, i, pkt| {
            let (egress, meta) = &facts[i];
            self.insert(*egress, pkt, meta, now, out);
        });
    }

    /// Whether packets are better handed over in bursts ([`DownlinkStage::insert_burst`]) than
    /// one by one now: a stage whose state no longer fits the caches says yes; below that,
    /// queueing them first only costs.
    fn wants_bursts(&self) -> bool {
        false
    }

    /// Learns from a packet a local host sent on the downlink `port` (READ requests, its NAKs
    /// and ACKs).
    fn observe(
        &mut self,
        _port: PortId,
        _meta: &RoceMeta,
        _now: u64,
        _out: &mut Vec<(PortId, Pkt)>,
    ) {
    }

    /// Judges a sequence NAK a local host on downlink `port` sent (`nak`, already routed
    /// towards the fabric): gives it back when it goes on now, keeps or drops it otherwise (a
    /// `nak_filter` downlink). Learns from it as [`DownlinkStage::observe`]
    /// does.
    fn host_nak(
        &mut self,
        port: PortId,
        meta: &RoceMeta,
        nak: (PortId, Pkt),
        now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    ) -> Option<(PortId, Pkt)> {
        self.observe(port, meta, now, out);
        Some(nak)
    }

    /// Releases what timers make due at `now` (nothing before [`DownlinkStage::poll_timeout`]).
    fn poll(&mut self, now: u64, out: &mut Vec<(PortId, Pkt)>);

    /// No timer is due before this time (`u64::MAX`: none runs): an idle worker holding
    /// packets waits no longer than that. A stage that does not know its timers keeps the
    /// default, due at once.
    fn poll_timeout(&self) -> u64 {
        0
    }

    /// Packets held right now.
    fn held(&self) -> usize;

    /// Gives up the oldest gaps until at least `packets` held packets are released (a receive
    /// pool runs low); returns how many went.
    fn relieve(&mut self, _packets: usize, _now: u64, _out: &mut Vec<(PortId, Pkt)>) -> usize {
        0
    }

    /// Bytes held right now for downlink `port` (they count towards its queue's depth).
    fn held_bytes_for(&self, _port: PortId) -> u64 {
        0
    }

    /// Totals for the counters.
    fn totals(&self) -> ReorderTotals {
        ReorderTotals::default()
    }

    /// Appends the hold times and the path-order detection times (ns) since the last call,
    /// for the owner's histograms.
    fn take_times(&mut self, _hold: &mut Vec<u64>, _detect: &mut Vec<u64>) {}

    /// Whether it reorders (and so has hold and detection times to show).
    fn reorders(&self) -> bool {
        false
    }

    /// Changes the switch-wide gap hold timeout (a stage without timers ignores it).
    fn set_hold_timeout(&mut self, _ns: u64) {}

    /// Up to `max` streams, the busiest (most held, then most released) first, for `show
    /// streams`.
    fn snapshot(&self, _max: usize) -> Vec<StreamRow> {
        Vec::new()
    }

    /// The fabric paths there are (numbered as [`RoceMeta::path`]) and those down now (a bit
    /// per path); appends what that releases.
    fn set_paths(&mut self, _count: usize, _down: u64, _now: u64, _out: &mut Vec<(PortId, Pkt)>) {}
}

/// One stream as `show streams` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRow {
    /// Its key.
    pub key: StreamKey,
    /// Expected PSN.
    pub expected: Psn,
    /// Its counters.
    pub stats: StreamStats,
}

/// Releases every packet as it arrives.
#[derive(Debug, Default, Clone, Copy)]
pub struct Passthrough;

impl DownlinkStage for Passthrough {
    fn insert(
        &mut self,
        egress: PortId,
        pkt: Pkt,
        _meta: &RoceMeta,
        _now: u64,
        out: &mut Vec<(PortId, Pkt)>,
    ) {
        out.push((egress, pkt));
    }

    fn poll(&mut self, _now: u64, _out: &mut Vec<(PortId, Pkt)>) {}

    fn held(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests;
