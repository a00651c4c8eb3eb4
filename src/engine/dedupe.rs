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

use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "VecDeque<u128>", into = "VecDeque<u128>")]
pub struct RecentIds {
    order: VecDeque<u128>,
    set: HashSet<u128, BuildHasherDefault<PassThrough>>,
}

impl RecentIds {
    /// Whether `id` was accepted recently.
    pub fn contains(&self, id: &str) -> bool {
        self.set.contains(&fingerprint(id))
    }

    /// Remembers `id`, forgetting the oldest ids beyond `capacity`. Returns false if it was known.
    pub fn insert(&mut self, id: &str, capacity: usize) -> bool {
        let fp = fingerprint(id);
        if !self.set.insert(fp) {
            return false;
        }
        self.order.push_back(fp);
        while self.order.len() > capacity.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

impl From<VecDeque<u128>> for RecentIds {
    fn from(order: VecDeque<u128>) -> Self {
        let set = order.iter().copied().collect();
        RecentIds { order, set }
    }
}

impl From<RecentIds> for VecDeque<u128> {
    fn from(ids: RecentIds) -> Self {
        ids.order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_oldest_beyond_capacity() {
        let mut ids = RecentIds::default();
        assert!(ids.insert("a", 2));
        assert!(!ids.insert("a", 2));
        assert!(ids.insert("b", 2));
        assert!(ids.insert("c", 2));
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
    fn round_trips_through_json() {
        let mut ids = RecentIds::default();
        for id in ["x", "y", "z"] {
            ids.insert(id, 10);
        }
        let text = serde_json::to_string(&ids).unwrap();
        assert_eq!(
            text,
            format!(
                "[{},{},{}]",
                fingerprint("x"),
                fingerprint("y"),
                fingerprint("z")
            )
        );
        assert_eq!(serde_json::from_str::<RecentIds>(&text).unwrap(), ids);
    }
}
