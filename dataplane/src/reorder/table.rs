//! The stream table: every stream by index ([`StreamId`]), its key's index, the free list, the
//! last lookup, the streams whose timers need checking and the eviction hand.
//!
//! Streams live in one `Vec` allocated up to `max_streams` and are reused through the free
//! list, so a stream's id stays valid until it is removed. Bursts mostly come from one QP: the
//! last stream looked up is remembered, and a lookup of the same key costs a comparison.

use super::index::{self, StreamIndex};
use super::stream::{Phase, Stream, StreamId, StreamKey};

/// Every stream of one core.
pub(super) struct StreamTable<T> {
    streams: Vec<Stream<T>>,
    index: StreamIndex,
    free: Vec<StreamId>,
    /// The stream found by the last lookup.
    last: Option<(StreamKey, StreamId)>,
    /// Streams that hold packets or are learning: their timers need checking.
    active: Vec<StreamId>,
    /// Each listed stream's place in `active`, by stream id (beside the streams, not in them:
    /// a `Stream` stays within four cache lines); grown to the highest id listed.
    active_pos: Vec<u32>,
    /// Where the eviction scan goes on from.
    evict_hand: usize,
    cap: usize,
}

impl<T> StreamTable<T> {
    /// A table for `cap` streams, its index and lists allocated up front.
    pub(super) fn new(cap: usize, active: usize) -> StreamTable<T> {
        StreamTable {
            streams: Vec::with_capacity(cap),
            index: StreamIndex::new(cap),
            free: Vec::with_capacity(cap),
            last: None,
            active: Vec::with_capacity(active),
            active_pos: Vec::new(),
            evict_hand: 0,
            cap,
        }
    }

    /// Streams tracked now.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there is room for another stream.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.index.len() >= self.cap
    }

    /// The stream of `key`, remembered for the next lookup.
    #[inline]
    pub(super) fn lookup(&mut self, key: &StreamKey) -> Option<StreamId> {
        if let Some((k, i)) = self.last {
            if k == *key {
                return Some(i);
            }
        }
        let i = self.indexed(key)?;
        self.last = Some((*key, i));
        Some(i)
    }

    /// The stream of `key` in the index.
    #[inline]
    fn indexed(&self, key: &StreamKey) -> Option<StreamId> {
        let streams = &self.streams;
        self.index
            .get(index::hash(key), |id| streams[id as usize].key == *key)
    }

    /// Starts loading what a lookup of `key` reads first: its index slot.
    #[inline]
    pub(super) fn prefetch_slot(&self, key: &StreamKey) {
        self.index.prefetch(index::hash(key));
    }

    /// Starts loading the state of the stream of `key`, if there is one (its index slot is
    /// read now: prefetched with [`StreamTable::prefetch_slot`] some time before, it is in
    /// the cache). The first stream with the key's tag: comparing the key would wait for the
    /// very line this asks for.
    #[inline]
    pub(super) fn prefetch_stream(&self, key: &StreamKey) {
        if let Some(id) = self.index.likely(index::hash(key)) {
            crate::prefetch::all(&self.streams[id as usize]);
        }
    }

    /// The stream of `key`, without remembering it.
    #[inline]
    pub(super) fn find(&self, key: &StreamKey) -> Option<StreamId> {
        if let Some((k, i)) = self.last {
            if k == *key {
                return Some(i);
            }
        }
        self.indexed(key)
    }

    /// Stream slots, live or free (what the eviction scan goes round).
    pub(super) fn slots(&self) -> usize {
        self.streams.len()
    }

    /// Whether a stream of `key` exists.
    pub(super) fn contains(&self, key: &StreamKey) -> bool {
        self.indexed(key).is_some()
    }

    /// Adds `stream` (the caller checked [`StreamTable::is_full`]); it is listed for its
    /// timer when the core settles it after its first packet ([`StreamTable::track`]).
    pub(super) fn insert(&mut self, stream: Stream<T>) -> StreamId {
        let key = stream.key;
        let i = match self.free.pop() {
            Some(i) => {
                // A free slot is never listed (`remove` unlisted it); should anything have
                // listed it since, it leaves the list before the new stream takes it, so that
                // the list and the streams' flags always agree.
                self.unlist_stream(i);
                self.streams[i as usize] = stream;
                i
            }
            None => {
                self.streams.push(stream);
                (self.streams.len() - 1) as StreamId
            }
        };
        debug_assert!(self.indexed(&key).is_none(), "a key is indexed once");
        self.index.insert(index::hash(&key), i);
        self.last = Some((key, i));
        i
    }

    /// Removes stream `id` (the caller released what it held): its slot goes back to the free
    /// list and its per-stream lists are dropped.
    pub(super) fn remove(&mut self, id: StreamId) {
        let s = &mut self.streams[id as usize];
        let key = s.key;
        s.forget_lists();
        self.index.remove(index::hash(&key), id);
        self.last = None;
        self.free.push(id);
        self.unlist_stream(id);
    }

    #[inline]
    pub(super) fn get(&self, id: StreamId) -> &Stream<T> {
        &self.streams[id as usize]
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: StreamId) -> &mut Stream<T> {
        &mut self.streams[id as usize]
    }

    /// Every stream slot, live or free (free ones are never looked up again).
    pub(super) fn all_mut(&mut self) -> impl Iterator<Item = &mut Stream<T>> + '_ {
        self.streams.iter_mut()
    }

    /// Every live stream.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Stream<T>> + '_ {
        self.index.ids().map(move |i| &self.streams[i as usize])
    }

    /// Lists `id` for timer checks (once).
    #[inline]
    pub(super) fn mark_active(&mut self, id: StreamId) {
        let s = &mut self.streams[id as usize];
        if !s.in_active {
            s.in_active = true;
            let i = id as usize;
            if self.active_pos.len() <= i {
                self.active_pos.resize(i + 1, 0);
            }
            self.active_pos[i] = self.active.len() as u32;
            self.active.push(id);
        }
    }

    /// Lists `id` for timer checks if it holds packets or is learning.
    #[inline]
    pub(super) fn track(&mut self, id: StreamId) {
        let s = &self.streams[id as usize];
        if !s.in_active && (s.held > 0 || matches!(s.phase, Phase::Learning { .. })) {
            self.mark_active(id);
        }
    }

    /// The streams listed for timer checks.
    #[inline]
    pub(super) fn active(&self) -> &[StreamId] {
        &self.active
    }

    /// The `i`th listed stream.
    #[inline]
    pub(super) fn active_at(&self, i: usize) -> Option<StreamId> {
        self.active.get(i).copied()
    }

    /// Unlists stream `id` if it is listed (the last listed takes its place).
    #[inline]
    pub(super) fn unlist_stream(&mut self, id: StreamId) {
        let s = &mut self.streams[id as usize];
        if !s.in_active {
            return;
        }
        s.in_active = false;
        let pos = self.active_pos[id as usize] as usize;
        self.active.swap_remove(pos);
        if let Some(&moved) = self.active.get(pos) {
            self.active_pos[moved as usize] = pos as u32;
        }
    }

    /// The next live stream of the eviction scan, or `None` when the table is empty.
    pub(super) fn next_to_scan(&mut self) -> Option<StreamId> {
        let n = self.streams.len();
        if n == 0 {
            return None;
        }
        self.evict_hand = (self.evict_hand + 1) % n;
        let id = self.evict_hand as StreamId;
        let live = self.indexed(&self.streams[id as usize].key) == Some(id);
        live.then_some(id)
    }

    /// Approximate bytes of the table, the streams' own lists included (`extra`: a stream's
    /// heap beyond the `Stream` itself).
    pub(super) fn state_bytes(&self, extra: impl Fn(&Stream<T>) -> usize) -> usize {
        self.streams.capacity() * std::mem::size_of::<Stream<T>>()
            + self.streams.iter().map(extra).sum::<usize>()
            + self.index.state_bytes()
            + self.free.capacity() * 4
            + self.active.capacity() * 4
            + self.active_pos.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Psn;

    fn stream(qpn: u32, learning: bool) -> Stream<u32> {
        let phase = if learning {
            Phase::Learning {
                until: 10,
                min: Psn::new(0),
                max: Psn::new(0),
            }
        } else {
            Phase::Active
        };
        Stream::new(StreamKey::Request { local: 1, qpn }, phase, Psn::new(0), 0)
    }

    fn key(qpn: u32) -> StreamKey {
        StreamKey::Request { local: 1, qpn }
    }

    #[test]
    fn a_removed_stream_is_found_no_more_and_its_slot_is_reused() {
        let mut t = StreamTable::new(2, 4);
        let a = t.insert(stream(1, false));
        let b = t.insert(stream(2, false));
        assert!(t.is_full());
        assert_eq!((t.lookup(&key(1)), t.find(&key(2))), (Some(a), Some(b)));
        t.remove(a);
        assert_eq!(t.find(&key(1)), None, "the last lookup is forgotten too");
        assert_eq!(t.lookup(&key(1)), None);
        let c = t.insert(stream(3, false));
        assert_eq!(c, a, "the free slot is taken again");
        assert_eq!(t.get(c).key, key(3));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn learning_streams_are_listed_for_their_timer_and_unlisted_once() {
        let mut t = StreamTable::new(4, 4);
        let a = t.insert(stream(1, true));
        let b = t.insert(stream(2, false));
        assert!(
            t.active().is_empty(),
            "listed when settled, not when inserted"
        );
        t.track(a);
        assert_eq!(t.active(), &[a]);
        t.track(b);
        assert_eq!(t.active(), &[a], "nothing held, not learning: not listed");
        t.get_mut(b).held = 1;
        t.track(b);
        t.mark_active(b);
        assert_eq!(t.active(), &[a, b], "listed once");
        t.unlist_stream(a);
        assert_eq!(t.active(), &[b]);
        assert!(!t.get(a).in_active);
        t.remove(b);
        assert!(t.active().is_empty(), "a removed stream is unlisted");
    }

    #[test]
    fn the_eviction_scan_visits_live_streams_only() {
        let mut t = StreamTable::new(4, 4);
        let a = t.insert(stream(1, false));
        let b = t.insert(stream(2, false));
        t.remove(a);
        let seen: Vec<_> = (0..4).filter_map(|_| t.next_to_scan()).collect();
        assert_eq!(seen, vec![b, b]);
    }
}
