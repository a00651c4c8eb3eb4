//! Remembering accepted event ids, so a producer's resend is not counted twice.
//!
//! Memory is bounded: each project keeps the most recent `capacity` accepted ids and forgets the
//! oldest first. Eviction depends only on the order of accepted events, so it is deterministic.
//!
//! Ids are kept as 128-bit XXH3 fingerprints rather than strings: 16 bytes each, no allocation,
//! and a stable function of the id, so snapshots restore across versions and machines. Two
//! distinct ids collide with probability about n²/2¹²⁹ (below 10⁻²⁸ for a million ids), which is
//! far below any other failure rate of the system.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use smallvec::SmallVec;

/// The fingerprint of an event id.
pub fn fingerprint(id: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(id.as_bytes())
}

/// Fingerprints are already uniform hashes; hashing them again would only cost time.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(word);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

/// The most recently accepted event ids of one project, at most `capacity` of them.
///
/// Each accepted id gets a sequence number; the Kafka runtime writes `(seq, fingerprint)` to the
/// changelog and [`RecentIds::restore`] rebuilds the window from them in the same order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecentIds {
    order: VecDeque<Entry>,
    set: HashSet<u128, BuildHasherDefault<PassThrough>>,
    next_seq: u64,
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

    fn pair(self) -> (u64, u128) {
        let [low, high] = self.fingerprint;
        (self.seq, u128::from(low) | (u128::from(high) << 64))
    }
}

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
        self.set.contains(&fingerprint(id))
    }

    /// Remembers `id`, forgetting the oldest ids beyond `capacity`. `None` if it was known.
    pub fn insert(&mut self, id: &str, capacity: usize) -> Option<Remembered> {
        let fp = fingerprint(id);
        if !self.set.insert(fp) {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.push_back(Entry::new(seq, fp));
        let mut evicted = SmallVec::new();
        while self.order.len() > capacity.max(1) {
            if let Some((seq, old)) = self.order.pop_front().map(Entry::pair) {
                self.set.remove(&old);
                evicted.push((seq, old));
            }
        }
        Some(Remembered {
            fingerprint: fp,
            seq,
            evicted,
        })
    }

    /// Rebuilds a window from `(seq, fingerprint)` pairs in any order; a pair given twice counts
    /// once (a changelog flush cut short can hold a bucket both on its own and in its project's
    /// record).
    pub fn restore(mut entries: Vec<(u64, u128)>) -> Self {
        entries.sort_unstable();
        entries.dedup();
        let next_seq = entries.last().map_or(0, |(s, _)| s + 1);
        let set = entries.iter().map(|(_, fp)| *fp).collect();
        RecentIds {
            order: entries.iter().map(|&(s, fp)| Entry::new(s, fp)).collect(),
            set,
            next_seq,
        }
    }

    /// The remembered ids with `lo <= seq < hi`, in order (the window is sorted by seq).
    /// Exact-sized, so a renderer can reserve what the ids need.
    pub fn range(&self, lo: u64, hi: u64) -> impl ExactSizeIterator<Item = (u64, u128)> + '_ {
        let start = self.index(lo);
        let end = self.index(hi).max(start);
        self.order.range(start..end).map(|e| e.pair())
    }

    /// Where the first id with a sequence number of at least `seq` is (or would be). A window
    /// holds consecutive numbers unless it was restored from a changelog with gaps, so this is
    /// arithmetic almost always: a binary search per changelog record was a tenth of the
    /// changelog's cost.
    fn index(&self, seq: u64) -> usize {
        match (self.order.front(), self.order.back()) {
            (Some(&Entry { seq: first, .. }), Some(&Entry { seq: last, .. }))
                if last.checked_sub(first) == Some(self.order.len() as u64 - 1) =>
            {
                (seq.saturating_sub(first) as usize).min(self.order.len())
            }
            _ => self.order.partition_point(|e| e.seq < seq),
        }
    }

    /// The sequence number of the newest remembered id.
    pub fn newest_seq(&self) -> Option<u64> {
        self.order.back().map(|e| e.seq)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
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
        for ids in [&consecutive, &gaps] {
            for lo in 0..25 {
                for hi in 0..25 {
                    let expected: Vec<(u64, u128)> = ids
                        .order
                        .iter()
                        .map(|e| e.pair())
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
        /// order) however ids repeat and come back after being forgotten; a restore from its
        /// entries continues identically.
        #[test]
        fn matches_the_plain_definition(
            ids in proptest::collection::vec(0u16..300, 0..2000),
            capacity in 1usize..150,
        ) {
            let mut window = RecentIds::default();
            let mut plain: VecDeque<(u64, String)> = VecDeque::new();
            let mut next = 0;
            for id in ids.iter().map(|i| format!("ev-{i}")) {
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
