//! Remembering accepted event ids, so a producer's resend is not counted twice.
//!
//! Memory is bounded: each project keeps the most recent `capacity` accepted ids and forgets the
//! oldest first. Eviction depends only on the order of accepted events, so it is deterministic.
//!
//! Ids are kept as 128-bit XXH3 fingerprints rather than strings: 16 bytes each, no allocation,
//! and a stable function of the id, so snapshots restore across versions and machines. Two
//! distinct ids collide with probability about n²/2¹²⁹ (below 10⁻²⁸ for a million ids), which is
//! far below any other failure rate of the system.

use smallvec::SmallVec;

/// The largest window: an index slot holds a position in 24 bits, which is why the
/// configuration refuses a larger `limits.dedupe_window`. A window this size takes about
/// 700 MiB, far beyond any useful setting.
pub const MAX_WINDOW: usize = (1 << 24) - 1;
const _: () = assert!(MAX_WINDOW < 1 << 24);

/// The fingerprint of an event id.
pub fn fingerprint(id: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(id.as_bytes())
}

/// The most recently accepted event ids of one project, at most `capacity` of them.
///
/// Each accepted id gets a sequence number; the Kafka runtime writes `(seq, fingerprint)` to the
/// changelog and [`RecentIds::restore`] rebuilds the window from them in the same order.
///
/// With many projects every window access is a cache miss, so the layout is built to touch few
/// cache lines: the ids sit in a ring that a full window overwrites in place (the evicted id is
/// in the line the new one is written to), and an open-addressing index of 4-byte slots finds
/// them. An index slot is an 8-bit tag of the fingerprint and the id's ring position. Evicting
/// leaves the old slot in place, to be dropped when the index is next rebuilt: a slot is
/// trusted only if the ring entry at its position has the fingerprint sought, so a stale slot
/// can never make an id look known. Rebuilding happens when half the slots are used, and the
/// index has at least four slots per id, so rebuilds are rare and probes short. A hash set
/// beside an order queue touched six lines per accepted id (the set's control bytes and slot,
/// the queue's tail and head, the evicted id's control bytes and slot); this touches two.
#[derive(Debug, Clone, Default)]
pub struct RecentIds {
    /// The ids, oldest at `head`, in order round the ring.
    ring: Vec<Entry>,
    head: usize,
    /// `tag << 24 | (position + 1)`, 0 for an empty slot; its length is a power of two.
    index: Vec<u32>,
    /// Non-empty slots of `index`, stale ones included.
    filled: usize,
    next_seq: u64,
}

/// Two windows are equal when they remember the same ids in the same order and will number
/// the next id alike; where in the ring they sit and how stale the index is are not state.
impl PartialEq for RecentIds {
    fn eq(&self, other: &Self) -> bool {
        self.next_seq == other.next_seq
            && self.len() == other.len()
            && self.range(0, u64::MAX).eq(other.range(0, u64::MAX))
    }
}

/// One remembered id in a window's order: 24 bytes, where a `(u64, u128)` tuple takes 32 (a
/// `u128` is 16-byte aligned). Full windows are most of the service's memory, and with many
/// projects filling them, fresh memory was a tenth of the processing thread's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    seq: u64,
    /// The fingerprint's low and high halves.
    fingerprint: [u64; 2],
}

impl Entry {
    fn new(seq: u64, fingerprint: u128) -> Entry {
        Entry {
            seq,
            fingerprint: [fingerprint as u64, (fingerprint >> 64) as u64],
        }
    }

    fn fingerprint(self) -> u128 {
        let [low, high] = self.fingerprint;
        u128::from(low) | (u128::from(high) << 64)
    }

    fn pair(self) -> (u64, u128) {
        (self.seq, self.fingerprint())
    }
}

/// The tag an index slot keeps of a fingerprint: its top byte (the home slot comes from the
/// low bits, so the two are independent).
fn tag(fp: u128) -> u32 {
    (fp >> 120) as u32
}

const POSITION_BITS: u32 = 24;
const POSITION_MASK: u32 = (1 << POSITION_BITS) - 1;

/// What remembering one id did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    pub fingerprint: u128,
    pub seq: u64,
    /// (seq, fingerprint) of the ids forgotten to stay within capacity: none while the window
    /// fills, one once it is full, more only when the capacity shrank. Inline, because a full
    /// window evicts on every insert and a heap allocation each time showed in the profile.
    pub evicted: SmallVec<[(u64, u128); 1]>,
}

impl RecentIds {
    /// Whether `id` was accepted recently.
    pub fn contains(&self, id: &str) -> bool {
        self.find(fingerprint(id))
    }

    /// Remembers `id`, forgetting the oldest ids beyond `capacity` (at most [`MAX_WINDOW`]).
    /// `None` if it was known.
    pub fn insert(&mut self, id: &str, capacity: usize) -> Option<Remembered> {
        self.insert_fingerprint(fingerprint(id), capacity)
    }

    /// [`RecentIds::insert`] of the id whose [`fingerprint`] is `fp`, for a caller that has it
    /// already (the Kafka runtime's polling thread computes it while it validates a batch).
    pub fn insert_fingerprint(&mut self, fp: u128, capacity: usize) -> Option<Remembered> {
        if self.find(fp) {
            return None;
        }
        let capacity = capacity.clamp(1, MAX_WINDOW);
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = Entry::new(seq, fp);
        let mut evicted = SmallVec::new();
        let mut reindex = false;
        let position = if self.ring.len() == capacity {
            // Full: the oldest id gives its place to the new one.
            let position = self.head;
            evicted.push(self.ring[position].pair());
            self.ring[position] = entry;
            self.head = (position + 1) % capacity;
            position
        } else {
            if self.head != 0 || self.ring.len() > capacity {
                // The capacity changed since the ring wrapped: straighten it, drop the oldest
                // ids beyond the new capacity, and index the positions anew.
                self.ring.rotate_left(self.head);
                self.head = 0;
                let excess = (self.ring.len() + 1).saturating_sub(capacity);
                evicted.extend(self.ring.drain(..excess).map(Entry::pair));
                reindex = true;
            }
            self.ring.push(entry);
            if self.ring.len() == capacity {
                // Full from now on: give back what the ring's doubling growth reserved beyond
                // it (a quarter of a default window's ring).
                self.ring.shrink_to_fit();
            }
            self.ring.len() - 1
        };
        if reindex || (self.filled + 1) * 2 > self.index.len() {
            self.rebuild();
        } else {
            self.place(fp, position);
            self.filled += 1;
        }
        Some(Remembered {
            fingerprint: fp,
            seq,
            evicted,
        })
    }

    /// Whether the id whose [`fingerprint`] is `fp` was accepted recently.
    pub fn find(&self, fp: u128) -> bool {
        if self.index.is_empty() {
            return false;
        }
        let mask = self.index.len() - 1;
        let tag = tag(fp);
        let mut i = fp as usize & mask;
        loop {
            let slot = self.index[i];
            if slot == 0 {
                return false;
            }
            if slot >> POSITION_BITS == tag {
                let position = (slot & POSITION_MASK) as usize - 1;
                if self
                    .ring
                    .get(position)
                    .is_some_and(|e| e.fingerprint() == fp)
                {
                    return true;
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Indexes the id at ring `position`; the index has an empty slot (at most half is used).
    fn place(&mut self, fp: u128, position: usize) {
        let mask = self.index.len() - 1;
        let mut i = fp as usize & mask;
        while self.index[i] != 0 {
            i = (i + 1) & mask;
        }
        self.index[i] = tag(fp) << POSITION_BITS | (position as u32 + 1);
    }

    /// Indexes the ring afresh, at four slots per id (at least 8), dropping stale slots.
    fn rebuild(&mut self) {
        let size = (self.ring.len() * 4).max(8).next_power_of_two();
        self.index.clear();
        self.index.resize(size, 0);
        for position in 0..self.ring.len() {
            self.place(self.ring[position].fingerprint(), position);
        }
        self.filled = self.ring.len();
    }

    /// Rebuilds a window from `(seq, fingerprint)` pairs in any order; a pair given twice counts
    /// once (a changelog flush cut short can hold a bucket both on its own and in its project's
    /// record). Beyond [`MAX_WINDOW`] pairs, the newest are kept.
    pub fn restore(mut entries: Vec<(u64, u128)>) -> Self {
        entries.sort_unstable();
        entries.dedup();
        let next_seq = entries.last().map_or(0, |(s, _)| s + 1);
        let keep = entries.len().saturating_sub(MAX_WINDOW);
        let mut window = RecentIds {
            ring: entries[keep..]
                .iter()
                .map(|&(s, fp)| Entry::new(s, fp))
                .collect(),
            head: 0,
            index: Vec::new(),
            filled: 0,
            next_seq,
        };
        window.rebuild();
        window
    }

    /// The entry `i`-th oldest.
    fn nth(&self, i: usize) -> Entry {
        let position = self.head + i;
        let len = self.ring.len();
        self.ring[if position >= len {
            position - len
        } else {
            position
        }]
    }

    /// The remembered ids with `lo <= seq < hi`, in order (the window is sorted by seq).
    /// Exact-sized, so a renderer can reserve what the ids need.
    pub fn range(&self, lo: u64, hi: u64) -> impl ExactSizeIterator<Item = (u64, u128)> + '_ {
        let start = self.index_of(lo);
        let end = self.index_of(hi).max(start);
        (start..end).map(|i| self.nth(i).pair())
    }

    /// How many ids are older than the first with a sequence number of at least `seq`. A
    /// window holds consecutive numbers unless it was restored from a changelog with gaps, so
    /// this is arithmetic almost always: a binary search per changelog record was a tenth of
    /// the changelog's cost.
    fn index_of(&self, seq: u64) -> usize {
        let len = self.ring.len();
        if len == 0 {
            return 0;
        }
        let (first, last) = (self.nth(0).seq, self.nth(len - 1).seq);
        if last.checked_sub(first) == Some(len as u64 - 1) {
            return (seq.saturating_sub(first) as usize).min(len);
        }
        // The ring holds two sorted runs: the oldest ids from `head` on, then the newest.
        let (newest, oldest) = self.ring.split_at(self.head);
        match oldest.partition_point(|e| e.seq < seq) {
            i if i < oldest.len() => i,
            i => i + newest.partition_point(|e| e.seq < seq),
        }
    }

    /// The sequence number of the newest remembered id.
    pub fn newest_seq(&self) -> Option<u64> {
        let len = self.ring.len();
        (len > 0).then(|| self.nth(len - 1).seq)
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    #[test]
    fn forgets_oldest_beyond_capacity() {
        let mut ids = RecentIds::default();
        assert_eq!(ids.insert("a", 2).map(|r| r.seq), Some(0));
        assert!(ids.insert("a", 2).is_none());
        assert!(ids.insert("b", 2).is_some());
        assert_eq!(
            ids.insert("c", 2).map(|r| r.evicted.to_vec()),
            Some(vec![(0, fingerprint("a"))])
        );
        assert_eq!(ids.range(0, 10).map(|(s, _)| s).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(ids.range(2, 3).collect::<Vec<_>>(), [(2, fingerprint("c"))]);
        assert!(!ids.contains("a"));
        assert!(ids.contains("b") && ids.contains("c"));
        assert_eq!(ids.len(), 2);
    }

    /// An entry is 24 bytes and gives back the pair it was made from, at both halves' extremes.
    #[test]
    fn entries_are_24_bytes_and_round_trip() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
        for fp in [
            0,
            1,
            u128::from(u64::MAX),
            1 << 64,
            u128::MAX,
            fingerprint("ev-1"),
        ] {
            assert_eq!(Entry::new(7, fp).pair(), (7, fp));
        }
    }

    #[test]
    fn fingerprint_is_stable() {
        // XXH3-128 of the empty input, as the xxHash reference gives it; a change of function
        // would silently break every restored dedupe window.
        assert_ne!(fingerprint("ev-0001"), fingerprint("ev-0002"));
        assert_eq!(fingerprint(""), 0x99aa06d3014798d86001c324468d497f);
    }

    /// `range` agrees with filtering by sequence number, for a window of consecutive numbers
    /// (arithmetic) and one with gaps (binary search), at every bound.
    #[test]
    fn range_selects_by_sequence_number() {
        let consecutive = RecentIds::restore((10..20).map(|s| (s, s as u128)).collect());
        let gaps = RecentIds::restore([3, 4, 7, 8, 9, 15].map(|s| (s, s as u128)).to_vec());
        // Gaps in a ring that has wrapped: seqs 8, 9, 15, 16, 17, 18 with the oldest mid-ring.
        let mut wrapped = gaps.clone();
        for id in ["x", "y", "z"] {
            wrapped.insert(id, 6);
        }
        assert_ne!(wrapped.head, 0);
        for ids in [&consecutive, &gaps, &wrapped] {
            for lo in 0..25 {
                for hi in 0..25 {
                    let expected: Vec<(u64, u128)> = (0..ids.len())
                        .map(|i| ids.nth(i).pair())
                        .filter(|(s, _)| lo <= *s && *s < hi)
                        .collect();
                    let got = ids.range(lo, hi);
                    assert_eq!(got.len(), expected.len(), "{lo}..{hi}");
                    assert_eq!(got.collect::<Vec<_>>(), expected, "{lo}..{hi}");
                }
            }
        }
    }

    proptest::proptest! {
        /// The window behaves like the plain definition (the last `capacity` accepted ids, in
        /// order) however ids repeat and come back after being forgotten, and however the
        /// capacity changes between phases of the run (the ring then straightens); a restore
        /// from its entries continues identically.
        #[test]
        fn matches_the_plain_definition(
            ids in proptest::collection::vec(0u16..300, 0..2000),
            capacities in proptest::collection::vec(1usize..150, 1..4),
        ) {
            let mut window = RecentIds::default();
            let mut plain: VecDeque<(u64, String)> = VecDeque::new();
            let mut next = 0;
            let mut capacity = capacities[0];
            for (step, id) in ids.iter().map(|i| format!("ev-{i}")).enumerate() {
                capacity = capacities[step * capacities.len() / ids.len()];
                let known = plain.iter().any(|(_, p)| *p == id);
                proptest::prop_assert_eq!(window.contains(&id), known);
                let got = window.insert(&id, capacity);
                if known {
                    proptest::prop_assert!(got.is_none());
                    continue;
                }
                plain.push_back((next, id.clone()));
                let mut evicted = SmallVec::new();
                while plain.len() > capacity {
                    if let Some((s, p)) = plain.pop_front() {
                        evicted.push((s, fingerprint(&p)));
                    }
                }
                let expected = Remembered { fingerprint: fingerprint(&id), seq: next, evicted };
                proptest::prop_assert_eq!(got, Some(expected));
                next += 1;
            }
            let entries: Vec<(u64, u128)> = window.range(0, u64::MAX).collect();
            let plain_entries: Vec<(u64, u128)> =
                plain.iter().map(|(s, p)| (*s, fingerprint(p))).collect();
            proptest::prop_assert_eq!(&entries, &plain_entries);
            let mut restored = RecentIds::restore(entries);
            proptest::prop_assert_eq!(&restored, &window);
            for id in ["ev-0", "ev-1", "ev-new"] {
                proptest::prop_assert_eq!(restored.insert(id, capacity), window.insert(id, capacity));
            }
        }
    }

    #[test]
    fn restores_in_sequence_order() {
        let mut ids = RecentIds::default();
        let mut entries = Vec::new();
        for id in ["x", "y", "z"] {
            let r = ids.insert(id, 10).unwrap();
            entries.push((r.seq, r.fingerprint));
        }
        entries.reverse();
        // Pairs given twice count once.
        let doubled = [entries.clone(), entries.clone()].concat();
        assert_eq!(RecentIds::restore(doubled), ids);
        let restored = RecentIds::restore(entries);
        assert_eq!(restored, ids);
        let mut a = restored.clone();
        let mut b = ids.clone();
        assert_eq!(a.insert("w", 3), b.insert("w", 3));
    }
}
