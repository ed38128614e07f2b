//! The stream table's index: which stream a key names, in one array of 8-byte slots.
//!
//! **Why not a `HashMap<StreamKey, StreamId>`.** Its buckets hold the whole key (48 bytes; 64
//! with the id and padding: a cache line each), so 131k streams made an index of 16 MiB, and on a
//! switch with many QPs each packet's lookup missed the cache in a random line of it: 68% of
//! the reorder stage's time on 100k streams in order (`cargo bench --bench reorder`,
//! `stage/depth_0/streams_100000`, in `HashMap::get`). A slot here is 32 bits of the key's
//! hash and the stream's id; the key itself is compared in the stream, whose state the packet
//! reads next anyway. 131k streams take 2 MiB of slots.
//!
//! **Layout.** Open addressing with linear probing, at most half full (the table sizes it for
//! its `max_streams` and never inserts beyond), so every probe ends at an empty slot within a
//! few steps. A slot's home is its hash's tag modulo the slot count: the tag alone finds it
//! again, which is what removal by backward shift needs (no tombstones: a table that lives for
//! months of stream churn never slows down with dead slots).

use super::stream::{StreamId, StreamKey};

/// A slot with no stream.
const EMPTY: u64 = u64::MAX;

/// The most streams an index holds (`max_streams` is checked against it): ids stay far below
/// `u32::MAX`, so no slot is ever `EMPTY`, and the slot count fits any `usize`.
pub(crate) const MAX_STREAMS: usize = 1 << 26;

/// The 64-bit hash of a key: its one-word fold ([`StreamKey::word`]) through a full-avalanche
/// finalizer (MurmurHash3's fmix64), so that the upper 32 bits, the tag, depend on every bit.
#[inline]
pub(super) fn hash(key: &StreamKey) -> u64 {
    let mut x = key.word();
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The tag of a hash: what a slot keeps of it, and where its probe starts.
#[inline]
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// Key to stream id, for up to the capacity it was made with.
pub(super) struct StreamIndex {
    /// `EMPTY`, or the tag in the upper 32 bits and the stream id in the lower.
    slots: Vec<u64>,
    mask: usize,
    len: usize,
}

impl StreamIndex {
    /// An index for up to `cap` streams (at most [`MAX_STREAMS`]): at least twice as many
    /// slots, allocated now.
    pub(super) fn new(cap: usize) -> StreamIndex {
        let n = (2 * cap.min(MAX_STREAMS)).next_power_of_two().max(16);
        StreamIndex {
            slots: vec![EMPTY; n],
            mask: n - 1,
            len: 0,
        }
    }

    /// Streams indexed.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The stream of the key with hash `h`: the first slot with its tag whose stream `is` the
    /// key (the caller compares the stream's own key).
    #[inline]
    pub(super) fn get(&self, h: u64, is: impl Fn(StreamId) -> bool) -> Option<StreamId> {
        let t = tag(h);
        let mut i = t as usize & self.mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == t && is(s as StreamId) {
                return Some(s as StreamId);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The stream the key with hash `h` most likely names: the first slot with its tag, the
    /// key not compared (for a prefetch of the stream's state, which the comparison would
    /// have to wait for).
    #[inline]
    pub(super) fn likely(&self, h: u64) -> Option<StreamId> {
        self.get(h, |_| true)
    }

    /// Starts loading the slot where the probe for hash `h` begins (a lookup soon after finds
    /// it in the cache).
    #[inline]
    pub(super) fn prefetch(&self, h: u64) {
        let i = tag(h) as usize & self.mask;
        crate::prefetch::line(&self.slots[i]);
    }

    /// Indexes stream `id` under hash `h` (the caller checked that its key is not indexed and
    /// that there is room: the table never holds more than its capacity).
    #[inline]
    pub(super) fn insert(&mut self, h: u64, id: StreamId) {
        debug_assert!(
            2 * (self.len + 1) <= self.slots.len(),
            "index over its capacity"
        );
        let t = tag(h);
        let mut i = t as usize & self.mask;
        while self.slots[i] != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = u64::from(t) << 32 | u64::from(id);
        self.len += 1;
    }

    /// Removes stream `id`, indexed under hash `h`; false when it is not there.
    pub(super) fn remove(&mut self, h: u64, id: StreamId) -> bool {
        let want = u64::from(tag(h)) << 32 | u64::from(id);
        let mut i = tag(h) as usize & self.mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return false;
            }
            if s == want {
                break;
            }
            i = (i + 1) & self.mask;
        }
        // Backward shift: each later slot of the run whose home is not between the hole and
        // itself (cyclically) moves into the hole, so every probe still reaches its slot
        // before an empty one.
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let home = (s >> 32) as usize & self.mask;
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Every stream indexed, in slot order.
    pub(super) fn ids(&self) -> impl Iterator<Item = StreamId> + '_ {
        self.slots
            .iter()
            .filter(|&&s| s != EMPTY)
            .map(|&s| s as StreamId)
    }

    /// Bytes of its slots.
    pub(super) fn state_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(qpn: u32) -> StreamKey {
        StreamKey::Request { local: 7, qpn }
    }

    /// An index over `keys[id]`, as the table keeps them.
    fn find(ix: &StreamIndex, keys: &[StreamKey], k: &StreamKey) -> Option<StreamId> {
        ix.get(hash(k), |id| keys[id as usize] == *k)
    }

    #[test]
    fn keys_are_found_and_gone_once_removed() {
        let keys: Vec<_> = (0..100).map(key).collect();
        let mut ix = StreamIndex::new(100);
        for (id, k) in keys.iter().enumerate() {
            ix.insert(hash(k), id as StreamId);
        }
        assert_eq!(ix.len(), 100);
        for (id, k) in keys.iter().enumerate() {
            assert_eq!(find(&ix, &keys, k), Some(id as StreamId));
        }
        assert_eq!(find(&ix, &keys, &key(1000)), None);
        assert!(ix.remove(hash(&keys[5]), 5));
        assert!(!ix.remove(hash(&keys[5]), 5), "not there twice");
        assert_eq!(find(&ix, &keys, &keys[5]), None);
        assert_eq!(ix.len(), 99);
        let mut ids: Vec<_> = ix.ids().collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..100).filter(|&i| i != 5).collect::<Vec<_>>());
    }

    #[test]
    fn equal_tags_are_told_apart_by_the_key() {
        // Every key on one tag: the probe runs through them all and the key decides.
        let mut ix = StreamIndex::new(8);
        let keys: Vec<_> = (0..8).map(key).collect();
        for id in 0..8 {
            ix.insert(42, id);
        }
        let find = |ix: &StreamIndex, k: &StreamKey| ix.get(42, |id| keys[id as usize] == *k);
        assert_eq!(find(&ix, &keys[6]), Some(6));
        assert!(ix.remove(42, 2));
        for id in [0u32, 1, 3, 4, 5, 6, 7] {
            assert_eq!(find(&ix, &keys[id as usize]), Some(id), "after a shift");
        }
        assert_eq!(find(&ix, &keys[2]), None);
    }

    #[test]
    fn runs_that_wrap_round_the_end_shift_back_correctly() {
        // Tags whose home is the last slot and the first: runs across the wrap.
        let mut ix = StreamIndex::new(8);
        let n = ix.slots.len() as u64;
        let last = (n - 1) << 32;
        let first = 0u64;
        let keys: Vec<_> = (0..6).map(key).collect();
        let hashes = [last, last, first, last, first, first];
        for (id, &h) in hashes.iter().enumerate() {
            ix.insert(h, id as StreamId);
        }
        let find =
            |ix: &StreamIndex, id: usize| ix.get(hashes[id], |i| keys[i as usize] == keys[id]);
        assert!(ix.remove(hashes[0], 0));
        assert!(ix.remove(hashes[2], 2));
        for id in [1, 3, 4, 5] {
            assert_eq!(find(&ix, id), Some(id as StreamId));
        }
        assert_eq!(find(&ix, 0), None);
        assert_eq!(find(&ix, 2), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
    }

    proptest! {
        /// Any sequence of inserts and removes of a few keys (crowded on few tags, so that
        /// runs form and wrap) leaves the index finding exactly what a `HashMap` holds.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec(
            prop_oneof![(0u32..40).prop_map(Op::Insert), (0u32..40).prop_map(Op::Remove)],
            1..300,
        ), tags in 1u64..64) {
            let cap = 40;
            let mut ix = StreamIndex::new(cap);
            let mut map: HashMap<u32, StreamId> = HashMap::new();
            // The stream ids given out: keys[id] is the qpn of stream id.
            let mut keys: Vec<StreamKey> = Vec::new();
            let mut free: Vec<StreamId> = Vec::new();
            // Few distinct hashes, home slots near the end: long runs that wrap.
            let h = |q: u32| ((u64::from(q) % tags) + ix_len_hint(cap) - 8) << 32;
            for op in ops {
                match op {
                    Op::Insert(q) if !map.contains_key(&q) => {
                        let id = match free.pop() {
                            Some(id) => { keys[id as usize] = key(q); id }
                            None => { keys.push(key(q)); (keys.len() - 1) as StreamId }
                        };
                        ix.insert(h(q), id);
                        map.insert(q, id);
                    }
                    Op::Remove(q) => {
                        let removed = map.remove(&q);
                        prop_assert_eq!(removed.is_some(), removed.is_some_and(|id| ix.remove(h(q), id)));
                        if let Some(id) = removed { free.push(id); }
                    }
                    Op::Insert(_) => {}
                }
                prop_assert_eq!(ix.len(), map.len());
                for q in 0..40 {
                    let got = ix.get(h(q), |id| keys[id as usize] == key(q));
                    prop_assert_eq!(got, map.get(&q).copied());
                }
            }
        }
    }

    /// The slot count an index of `cap` streams has.
    fn ix_len_hint(cap: usize) -> u64 {
        StreamIndex::new(cap).slots.len() as u64
    }
}
