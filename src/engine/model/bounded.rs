//! The two orders a project's item store (judge quality, reviewer reliability) keeps its
//! state in: a project's values by key, oldest first ([`Bounded`]), and the places of every
//! item a task holds, whatever its project ([`Places`]), so that a task, not only a project,
//! stays within a bound.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::engine::ids::{IdMap, ProjectKey};

/// The room below which [`Bounded`] never shrinks its map: a few values' worth, which a map
/// would allocate again at once.
const MIN_ROOM: usize = 16;

/// Values by key, in order of arrival, at most a bound of them: the oldest goes first. Each
/// value has a place in that order, so a restore puts it back where it was. The places are the
/// bounded's own ([`Bounded::entry`]) or given to it ([`Bounded::insert`]): an item's place is
/// its place in its task's [`Places`].
///
/// The values live in the order, the map holds only each key's place. A hash map keeps room for
/// up to twice the values it holds, and the many small maps of a task's projects, whose items
/// the task's bound keeps replacing, settle there (their removals leave tombstones, and the map
/// grows rather than rehash in place while more than half full): in the map, that room cost a
/// whole item per empty slot.
#[derive(Debug, Clone, Default)]
pub struct Bounded<V> {
    places: IdMap<ProjectKey, u64>,
    order: BTreeMap<u64, (ProjectKey, V)>,
    next: u64,
}

/// Two are equal when they hold the same values in the same order: the places themselves are
/// only relative (a restore cannot know the places of values already forgotten).
impl<V: PartialEq> PartialEq for Bounded<V> {
    fn eq(&self, other: &Self) -> bool {
        self.order.values().eq(other.order.values())
    }
}

impl<V: Default> Bounded<V> {
    /// The value of `key` and its place, created if new at the next place of its own; a new
    /// key forgets the oldest beyond `max`, whose places, keys and values are appended to
    /// `forgotten`.
    pub fn entry(
        &mut self,
        key: &str,
        max: usize,
        forgotten: &mut Vec<(u64, ProjectKey, V)>,
    ) -> (u64, &mut V) {
        if !self.places.contains_key(key) {
            self.make_room(max, forgotten);
            self.insert(key, self.next, V::default());
        }
        self.get_mut(key).expect("present: found or inserted above")
    }
}

impl<V> Bounded<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.get_with_seq(key).map(|(_, v)| v)
    }

    /// The value of `key` and its place.
    pub fn get_mut(&mut self, key: &str) -> Option<(u64, &mut V)> {
        let seq = *self.places.get(key)?;
        self.order.get_mut(&seq).map(|(_, v)| (seq, v))
    }

    /// The value of `key` with its place in the order, for the changelog.
    pub fn get_with_seq(&self, key: &str) -> Option<(u64, &V)> {
        let seq = *self.places.get(key)?;
        self.order.get(&seq).map(|(_, v)| (seq, v))
    }

    /// The key and value at place `seq`.
    pub fn at(&self, seq: u64) -> Option<(&str, &V)> {
        self.order.get(&seq).map(|(k, v)| (k.as_str(), v))
    }

    /// Forgets the oldest values until there is room for one more within `max`, appending
    /// their places, keys and values to `forgotten`.
    pub fn make_room(&mut self, max: usize, forgotten: &mut Vec<(u64, ProjectKey, V)>) {
        while self.places.len() >= max.max(1) {
            let Some((seq, (oldest, value))) = self.order.pop_first() else {
                break;
            };
            self.places.remove(&oldest);
            forgotten.push((seq, oldest, value));
        }
        self.fit();
    }

    /// Puts `value` at place `seq`, replacing what `key` held, and returns the place it held;
    /// later places of its own follow it. A restore puts values back this way.
    pub fn insert(&mut self, key: &str, seq: u64, value: V) -> Option<u64> {
        let key = ProjectKey::from(key);
        // One probe: a new key (the common case) has no place to give up.
        let held = self.places.insert(key.clone(), seq);
        if let Some(held) = held
            && held != seq
        {
            self.order.remove(&held);
        }
        self.order.insert(seq, (key, value));
        self.next = self.next.max(seq + 1);
        held
    }

    /// Removes `key`, returning its place and value.
    pub fn remove(&mut self, key: &str) -> Option<(u64, V)> {
        let seq = self.places.remove(key)?;
        let (_, v) = self.order.remove(&seq)?;
        self.fit();
        Some((seq, v))
    }

    /// Removes the value at place `seq`, returning its key and value.
    pub fn remove_at(&mut self, seq: u64) -> Option<(ProjectKey, V)> {
        let (key, v) = self.order.remove(&seq)?;
        self.places.remove(&key);
        self.fit();
        Some((key, v))
    }

    /// Gives back the map's room once it holds less than a quarter of it. A hash map keeps the
    /// room of the most values it ever held, and a project holds many for a while when its
    /// records arrive in a run (the task's bound then forgets them). Halving at a quarter keeps
    /// the cost amortised: a map grows back only after as many insertions as it shrank by.
    fn fit(&mut self) {
        let (len, room) = (self.places.len(), self.places.capacity());
        if room > MIN_ROOM && len * 4 < room {
            self.places.shrink_to(len * 2);
        }
    }

    pub fn len(&self) -> usize {
        self.places.len()
    }

    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }

    /// The values, oldest first.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.order.values().map(|(_, v)| v)
    }

    /// The values by key, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.order.values().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether its order and its places agree (for tests of the invariants).
    pub fn consistent(&self) -> bool {
        self.order.len() == self.places.len()
            && self
                .order
                .iter()
                .all(|(seq, (k, _))| self.places.get(k) == Some(seq))
    }
}

/// The places of the items a task holds, over all its projects, in order of arrival: the task
/// forgets its oldest item first, whatever its project. A place is the item's place in its
/// project's [`Bounded`] too, and the changelog writes items in buckets of places.
#[derive(Debug, Clone, Default)]
pub struct Places {
    order: BTreeMap<u64, ProjectKey>,
    next: u64,
}

/// Equal when the same projects hold places in the same order (places are only relative, as in
/// [`Bounded`]).
impl PartialEq for Places {
    fn eq(&self, other: &Self) -> bool {
        self.order.values().eq(other.order.values())
    }
}

impl Places {
    /// The next place, taken by an item of `project`.
    pub fn take(&mut self, project: &str) -> u64 {
        let seq = self.next;
        self.restore(seq, project);
        seq
    }

    /// Puts a restored item of `project` back at place `seq`.
    pub fn restore(&mut self, seq: u64, project: &str) {
        self.order.insert(seq, ProjectKey::from(project));
        self.next = self.next.max(seq + 1);
    }

    pub fn remove(&mut self, seq: u64) {
        self.order.remove(&seq);
    }

    /// The project of the item at place `seq`.
    pub fn project_at(&self, seq: u64) -> Option<&ProjectKey> {
        self.order.get(&seq)
    }

    /// The place the next item takes.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The oldest place and its project, removed.
    pub fn pop_oldest(&mut self) -> Option<(u64, ProjectKey)> {
        self.order.pop_first()
    }

    /// The places in `places` and their projects, in order: a changelog bucket.
    pub fn range(&self, places: Range<u64>) -> impl Iterator<Item = (u64, &str)> {
        self.order.range(places).map(|(&seq, p)| (seq, p.as_str()))
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

    /// A map that held many values gives their room back once it holds few, and keeps its
    /// values and their order.
    #[test]
    fn a_bounded_gives_back_the_room_of_values_it_no_longer_holds() {
        let mut b: Bounded<u64> = Bounded::default();
        for i in 0..200 {
            b.insert(&format!("k{i}"), i, i);
        }
        assert!(b.places.capacity() >= 200);
        let mut forgotten = Vec::new();
        b.make_room(6, &mut forgotten);
        assert_eq!(forgotten.len(), 195);
        assert_eq!(b.len(), 5);
        assert!(b.places.capacity() <= MIN_ROOM, "{}", b.places.capacity());
        let kept: Vec<(&str, &u64)> = b.iter().collect();
        assert_eq!(
            kept,
            [
                ("k195", &195),
                ("k196", &196),
                ("k197", &197),
                ("k198", &198),
                ("k199", &199)
            ]
        );
        // One at a time, as an item's votes come and go: each removal below a quarter of the
        // room halves it, never below the floor.
        for i in 0..40 {
            b.insert(&format!("n{i}"), 200 + i, i);
        }
        while b.len() > 1 {
            let room = b.places.capacity();
            let oldest = b.order.keys().next().copied().expect("held");
            b.remove_at(oldest);
            assert!(room <= MIN_ROOM || b.len() * 4 >= room || b.places.capacity() < room);
        }
        assert!(b.places.capacity() <= MIN_ROOM);
        assert_eq!(b.iter().count(), 1);
    }
}
