//! Remembering accepted event ids, so a producer's resend is not counted twice.
//!
//! Memory is bounded: each project keeps the most recent `capacity` accepted ids and forgets the
//! oldest first. Eviction depends only on the order of accepted events, so it is deterministic.

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

/// The most recently accepted event ids of one project, at most `capacity` of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "VecDeque<Box<str>>", into = "VecDeque<Box<str>>")]
pub struct RecentIds {
    order: VecDeque<Box<str>>,
    set: HashSet<Box<str>>,
}

impl RecentIds {
    /// Whether `id` was accepted recently.
    pub fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    /// Remembers `id`, forgetting the oldest ids beyond `capacity`. Returns false if it was known.
    pub fn insert(&mut self, id: &str, capacity: usize) -> bool {
        if self.set.contains(id) {
            return false;
        }
        self.set.insert(id.into());
        self.order.push_back(id.into());
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

impl From<VecDeque<Box<str>>> for RecentIds {
    fn from(order: VecDeque<Box<str>>) -> Self {
        let set = order.iter().cloned().collect();
        RecentIds { order, set }
    }
}

impl From<RecentIds> for VecDeque<Box<str>> {
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
    fn round_trips_through_json() {
        let mut ids = RecentIds::default();
        for id in ["x", "y", "z"] {
            ids.insert(id, 10);
        }
        let text = serde_json::to_string(&ids).unwrap();
        assert_eq!(text, r#"["x","y","z"]"#);
        assert_eq!(serde_json::from_str::<RecentIds>(&text).unwrap(), ids);
    }
}
