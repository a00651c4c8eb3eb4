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
    order: VecDeque<(u64, u128)>,
    set: HashSet<u128, BuildHasherDefault<PassThrough>>,
    next_seq: u64,
}

/// What remembering one id did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    pub fingerprint: u128,
    pub seq: u64,
    /// (seq, fingerprint) of the ids forgotten to stay within capacity.
    pub evicted: Vec<(u64, u128)>,
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
        self.order.push_back((seq, fp));
        let mut evicted = Vec::new();
        while self.order.len() > capacity.max(1) {
            if let Some((seq, old)) = self.order.pop_front() {
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

    /// Rebuilds a window from `(seq, fingerprint)` pairs in any order.
    pub fn restore(mut entries: Vec<(u64, u128)>) -> Self {
        entries.sort_unstable();
        let next_seq = entries.last().map_or(0, |(s, _)| s + 1);
        let set = entries.iter().map(|(_, fp)| *fp).collect();
        RecentIds {
            order: entries.into(),
            set,
            next_seq,
        }
    }

    /// The remembered ids with `lo <= seq < hi`, in order (the window is sorted by seq).
    pub fn range(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, u128)> + '_ {
        let start = self.order.partition_point(|(s, _)| *s < lo);
        self.order
            .range(start..)
            .take_while(move |(s, _)| *s < hi)
            .copied()
    }

    /// The sequence number of the newest remembered id.
    pub fn newest_seq(&self) -> Option<u64> {
        self.order.back().map(|(s, _)| *s)
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
            ids.insert("c", 2).map(|r| r.evicted),
            Some(vec![(0, fingerprint("a"))])
        );
        assert_eq!(ids.range(0, 10).map(|(s, _)| s).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(ids.range(2, 3).collect::<Vec<_>>(), [(2, fingerprint("c"))]);
        assert!(!ids.contains("a"));
        assert!(ids.contains("b") && ids.contains("c"));
        assert_eq!(ids.len(), 2);
    }

    #[test]
    fn fingerprint_is_stable() {
        // XXH3-128 of the empty input, as the xxHash reference gives it; a change of function
        // would silently break every restored dedupe window.
        assert_ne!(fingerprint("ev-0001"), fingerprint("ev-0002"));
        assert_eq!(fingerprint(""), 0x99aa06d3014798d86001c324468d497f);
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
        let restored = RecentIds::restore(entries);
        assert_eq!(restored, ids);
        let mut a = restored.clone();
        let mut b = ids.clone();
        assert_eq!(a.insert("w", 3), b.insert("w", 3));
    }
}
