//! The two orders a project's item store (judge quality, reviewer reliability) keeps its
//! state in: a project's values by key, oldest first ([`Bounded`]), and the places of every
//! item a task holds, whatever its project ([`Places`]), so that a task, not only a project,
//! stays within a bound. Both keep their values in an [`Ordered`] run of places.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;

use crate::engine::ids::ProjectKey;

/// The room below which [`Bounded`] never shrinks its table: a few values' worth, which a table
/// would allocate again at once.
const MIN_ROOM: usize = 16;

/// Values by place, oldest first: the order [`Bounded`] and [`Places`] keep. Places only grow
/// as values arrive, so a new value joins at the back and the oldest leaves from the front,
/// and a project's values lie side by side, so that a fit or a bucket of the changelog reads
/// them in one sweep. (The B-trees this replaced shifted a leaf's values on every removal from
/// its front, and spread a project's few items over nodes of their own.) A value taken from the
/// middle leaves a gap, dropped once it reaches either end or once the gaps are half the run;
/// a place is found at an end or, between them, by a binary search.
#[derive(Debug, Clone)]
pub struct Ordered<T> {
    slots: VecDeque<(u64, Option<T>)>,
    held: usize,
}

impl<T> Default for Ordered<T> {
    fn default() -> Self {
        Ordered {
            slots: VecDeque::new(),
            held: 0,
        }
    }
}

impl<T> Ordered<T> {
    /// Where place `seq` is, or would go, among the slots. The newest value (just added, or
    /// read again by the record that added it) and the oldest (forgotten first) are most of the
    /// lookups, and a run is rarely in the cache when they come: each is found by reading one
    /// slot at an end, where a search reads several.
    fn find(&self, seq: u64) -> Result<usize, usize> {
        let len = self.slots.len();
        match (self.slots.front(), self.slots.back()) {
            (Some(&(first, _)), _) if seq <= first => {
                if seq == first {
                    Ok(0)
                } else {
                    Err(0)
                }
            }
            (_, Some(&(last, _))) if seq >= last => {
                if seq == last {
                    Ok(len - 1)
                } else {
                    Err(len)
                }
            }
            _ => self.slots.binary_search_by_key(&seq, |(s, _)| *s),
        }
    }

    pub fn get(&self, seq: u64) -> Option<&T> {
        let i = self.find(seq).ok()?;
        self.slots[i].1.as_ref()
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        let i = self.find(seq).ok()?;
        self.slots[i].1.as_mut()
    }

    /// Puts `value` at place `seq`, returning what was there. A place after the last goes in
    /// at the back, `O(1)` (`find` reads it there); one before it shifts the later values,
    /// `O(n)`: a restore puts items back in order of place, and only a project's judges (at
    /// most `judge_quality.max_judges`) come back in any order.
    pub fn insert(&mut self, seq: u64, value: T) -> Option<T> {
        match self.find(seq) {
            Ok(i) => {
                let was = self.slots[i].1.replace(value);
                self.held += usize::from(was.is_none());
                was
            }
            Err(i) => {
                self.slots.insert(i, (seq, Some(value)));
                self.held += 1;
                None
            }
        }
    }

    /// Takes the value at place `seq`.
    pub fn remove(&mut self, seq: u64) -> Option<T> {
        let i = self.find(seq).ok()?;
        let value = self.slots[i].1.take()?;
        self.held -= 1;
        self.tidy();
        Some(value)
    }

    /// Takes the oldest value and its place.
    pub fn pop_first(&mut self) -> Option<(u64, T)> {
        while let Some((seq, slot)) = self.slots.pop_front() {
            if let Some(value) = slot {
                self.held -= 1;
                self.tidy();
                return Some((seq, value));
            }
        }
        None
    }

    /// Drops the gaps at either end, and all of them once they are half the slots; gives back
    /// the room of a run that shrank to a quarter of it.
    fn tidy(&mut self) {
        while self.slots.front().is_some_and(|(_, v)| v.is_none()) {
            self.slots.pop_front();
        }
        while self.slots.back().is_some_and(|(_, v)| v.is_none()) {
            self.slots.pop_back();
        }
        if self.slots.len() > 2 * self.held {
            self.slots.retain(|(_, v)| v.is_some());
        }
        let (len, room) = (self.slots.len(), self.slots.capacity());
        if room > MIN_ROOM && len * 4 < room {
            self.slots.shrink_to(len * 2);
        }
    }

    pub fn len(&self) -> usize {
        self.held
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// The values and their places, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots
            .iter()
            .filter_map(|(seq, v)| v.as_ref().map(|v| (*seq, v)))
    }

    /// The values, oldest first.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
    }

    /// The values at `places` and their places, in order.
    pub fn range(&self, places: Range<u64>) -> impl Iterator<Item = (u64, &T)> {
        let from = self.find(places.start).unwrap_or_else(|i| i);
        self.slots
            .range(from..)
            .take_while(move |(seq, _)| *seq < places.end)
            .filter_map(|(seq, v)| v.as_ref().map(|v| (*seq, v)))
    }

    /// Whether the places ascend and the count of values is right (for tests).
    fn consistent(&self) -> bool {
        let ascending = self
            .slots
            .iter()
            .zip(self.slots.iter().skip(1))
            .all(|(a, b)| a.0 < b.0);
        ascending && self.held == self.slots.iter().filter(|(_, v)| v.is_some()).count()
    }
}

/// Values by key, in order of arrival, at most a bound of them: the oldest goes first. Each
/// value has a place in that order, so a restore puts it back where it was. The places are the
/// bounded's own ([`Bounded::entry`]) or given to it ([`Bounded::insert`]): an item's place is
/// its place in its task's [`Places`].
///
/// The values live in the order; the table holds only each key's place, and finds a key by
/// its hash and the key in the order at that place. A project's table is then a few cache
/// lines of places, which adding an item, finding it and forgetting the oldest all touch,
/// rather than a copy of every key. A table keeps room for up to twice the values it holds,
/// and the many small tables of a task's projects, whose items the task's bound keeps
/// replacing, settle there (their removals leave tombstones, and a table grows rather than
/// rehash in place while more than half full): room that once held a whole item per empty slot,
/// and then a key.
#[derive(Debug, Clone, Default)]
pub struct Bounded<V> {
    places: HashTable<u64>,
    /// Seeded per process, as [`crate::engine::ids::IdMap`]'s: crafted keys cannot force
    /// collisions.
    hasher: foldhash::fast::RandomState,
    order: Ordered<(ProjectKey, V)>,
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
        if self.place(key).is_none() {
            self.make_room(max, forgotten);
            self.insert(key, self.next, V::default());
        }
        self.get_mut(key).expect("present: found or inserted above")
    }
}

impl<V> Bounded<V> {
    /// The place of `key`, if held.
    fn place(&self, key: &str) -> Option<u64> {
        self.place_hashed(self.hasher.hash_one(key), key)
    }

    /// [`Bounded::place`] of `key`, whose hash is `hash`.
    fn place_hashed(&self, hash: u64, key: &str) -> Option<u64> {
        let order = &self.order;
        let held = |seq: &u64| order.get(*seq).is_some_and(|(k, _)| k == key);
        self.places.find(hash, held).copied()
    }

    /// Drops place `seq` of `key` from the table.
    fn unplace(&mut self, key: &str, seq: u64) {
        let hash = self.hasher.hash_one(key);
        if let Ok(place) = self.places.find_entry(hash, |s| *s == seq) {
            place.remove();
        }
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.get_with_seq(key).map(|(_, v)| v)
    }

    /// The value of `key` and its place.
    pub fn get_mut(&mut self, key: &str) -> Option<(u64, &mut V)> {
        let seq = self.place(key)?;
        self.order.get_mut(seq).map(|(_, v)| (seq, v))
    }

    /// The value of `key` with its place in the order, for the changelog.
    pub fn get_with_seq(&self, key: &str) -> Option<(u64, &V)> {
        let seq = self.place(key)?;
        self.order.get(seq).map(|(_, v)| (seq, v))
    }

    /// The key and value at place `seq`.
    pub fn at(&self, seq: u64) -> Option<(&str, &V)> {
        self.order.get(seq).map(|(k, v)| (k.as_str(), v))
    }

    /// The value at place `seq`: found by its place, at an end of the order or by a search,
    /// with no hash of its key, for a caller that has just found or taken that place.
    pub fn at_mut(&mut self, seq: u64) -> Option<&mut V> {
        self.order.get_mut(seq).map(|(_, v)| v)
    }

    /// Forgets the oldest values until there is room for one more within `max`, appending
    /// their places, keys and values to `forgotten`.
    pub fn make_room(&mut self, max: usize, forgotten: &mut Vec<(u64, ProjectKey, V)>) {
        while self.places.len() >= max.max(1) {
            let Some((seq, (oldest, value))) = self.order.pop_first() else {
                break;
            };
            self.unplace(&oldest, seq);
            forgotten.push((seq, oldest, value));
        }
        self.fit();
    }

    /// Puts `value` at place `seq`, replacing what `key` held, and returns the place it held;
    /// later places of its own follow it. A restore puts values back this way.
    pub fn insert(&mut self, key: &str, seq: u64, value: V) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        let held = self.place_hashed(hash, key);
        match held {
            Some(held) if held != seq => {
                if let Ok(mut place) = self.places.find_entry(hash, |s| *s == held) {
                    *place.get_mut() = seq;
                }
                self.order.remove(held);
            }
            Some(_) => {}
            None => {
                let rehash = rehash(&self.order, &self.hasher);
                self.places.insert_unique(hash, seq, rehash);
            }
        }
        self.order.insert(seq, (ProjectKey::from(key), value));
        self.next = self.next.max(seq + 1);
        held
    }

    /// Removes `key`, returning its place and value.
    pub fn remove(&mut self, key: &str) -> Option<(u64, V)> {
        let seq = self.place(key)?;
        self.remove_at(seq).map(|(_, v)| (seq, v))
    }

    /// Removes the value at place `seq`, returning its key and value.
    pub fn remove_at(&mut self, seq: u64) -> Option<(ProjectKey, V)> {
        let (key, v) = self.order.remove(seq)?;
        self.unplace(&key, seq);
        self.fit();
        Some((key, v))
    }

    /// Gives back the table's room once it holds less than a quarter of it. A table keeps the
    /// room of the most values it ever held, and a project holds many for a while when its
    /// records arrive in a run (the task's bound then forgets them). Halving at a quarter keeps
    /// the cost amortised: a table grows back only after as many insertions as it shrank by.
    fn fit(&mut self) {
        let (len, room) = (self.places.len(), self.places.capacity());
        if room > MIN_ROOM && len * 4 < room {
            let rehash = rehash(&self.order, &self.hasher);
            self.places.shrink_to(len * 2, rehash);
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
        self.order.consistent()
            && self.order.len() == self.places.len()
            && self
                .order
                .iter()
                .all(|(seq, (k, _))| self.place(k) == Some(seq))
    }
}

/// The hash of the key at a place of `order`, for a [`Bounded`]'s table to move its places
/// when it grows or shrinks (every place it holds is in the order).
fn rehash<'a, V>(
    order: &'a Ordered<(ProjectKey, V)>,
    hasher: &'a foldhash::fast::RandomState,
) -> impl Fn(&u64) -> u64 + 'a {
    move |seq| hasher.hash_one(order.get(*seq).map_or("", |(k, _)| k.as_str()))
}

/// The places of the items a task holds, over all its projects, in order of arrival: the task
/// forgets its oldest item first, whatever its project. A place is the item's place in its
/// project's [`Bounded`] too, and the changelog writes items in buckets of places.
#[derive(Debug, Clone, Default)]
pub struct Places {
    order: Ordered<ProjectKey>,
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
        self.order.remove(seq);
    }

    /// The project of the item at place `seq`.
    pub fn project_at(&self, seq: u64) -> Option<&ProjectKey> {
        self.order.get(seq)
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
        self.order.range(places).map(|(seq, p)| (seq, p.as_str()))
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

    /// A table that held many places gives their room back once it holds few, and keeps its
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
            let oldest = b.order.iter().next().map(|(seq, _)| seq).expect("held");
            b.remove_at(oldest);
            assert!(room <= MIN_ROOM || b.len() * 4 >= room || b.places.capacity() < room);
        }
        assert!(b.places.capacity() <= MIN_ROOM);
        assert_eq!(b.iter().count(), 1);
    }

    /// Looking at the ends first finds every place, held or not, where a binary search of the
    /// whole run does, in runs of every length from empty.
    #[test]
    fn finding_a_place_at_the_ends_first_agrees_with_a_binary_search() {
        for len in 0..70u64 {
            let mut run: Ordered<u64> = Ordered::default();
            for i in 0..len {
                run.insert(3 * i + 1, i);
            }
            for seq in 0..3 * len + 3 {
                let expected = run.slots.binary_search_by_key(&seq, |(s, _)| *s);
                assert_eq!(run.find(seq), expected, "{seq} in a run of {len}");
            }
        }
    }

    /// Values taken from the middle leave gaps that are dropped once they are half the run,
    /// and the run gives back the room of values it no longer holds.
    #[test]
    fn an_ordered_run_drops_its_gaps_and_gives_back_its_room() {
        let mut run: Ordered<u64> = Ordered::default();
        for seq in 0..256 {
            run.insert(seq, seq);
        }
        for seq in (1..255).filter(|s| s % 16 != 0) {
            assert_eq!(run.remove(seq), Some(seq));
            assert!(
                run.slots.len() <= 2 * run.len(),
                "{} slots",
                run.slots.len()
            );
        }
        let held: Vec<u64> = run.iter().map(|(seq, _)| seq).collect();
        let expected: Vec<u64> = (0..256).filter(|s| s % 16 == 0).chain([255]).collect();
        assert_eq!(held, expected);
        assert!(run.slots.capacity() <= 4 * run.len().max(MIN_ROOM));
        assert_eq!(run.get(16), Some(&16));
        assert_eq!(run.get(17), None);
    }

    /// One step of [`an_ordered_run_holds_what_a_sorted_map_holds`].
    #[derive(Debug, Clone)]
    enum Step {
        /// A new value at the next place.
        Push,
        /// A value at any place, as a restore puts one back.
        Insert(u64),
        Remove(u64),
        PopFirst,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => Just(Step::Push),
            1 => (0u64..80).prop_map(Step::Insert),
            3 => (0u64..80).prop_map(Step::Remove),
            2 => Just(Step::PopFirst),
        ]
    }

    proptest::proptest! {
        /// Whatever is pushed, put back at any place, taken from the middle or forgotten from
        /// the front, the run holds what a sorted map holds, in its order, by place and in
        /// every range, and never more than twice its values in slots (the gaps are dropped).
        #[test]
        fn an_ordered_run_holds_what_a_sorted_map_holds(
            steps in proptest::collection::vec(step(), 0..300),
        ) {
            let mut run: Ordered<u64> = Ordered::default();
            let mut model: std::collections::BTreeMap<u64, u64> = Default::default();
            let mut next = 0;
            for (i, step) in steps.into_iter().enumerate() {
                let i = i as u64;
                match step {
                    Step::Push => {
                        proptest::prop_assert_eq!(run.insert(next, i), model.insert(next, i));
                        next += 1;
                    }
                    Step::Insert(seq) => {
                        proptest::prop_assert_eq!(run.insert(seq, i), model.insert(seq, i));
                        next = next.max(seq + 1);
                    }
                    Step::Remove(seq) => {
                        proptest::prop_assert_eq!(run.remove(seq), model.remove(&seq));
                    }
                    Step::PopFirst => {
                        proptest::prop_assert_eq!(run.pop_first(), model.pop_first());
                    }
                }
                proptest::prop_assert!(run.consistent());
                proptest::prop_assert_eq!(run.len(), model.len());
                proptest::prop_assert!(run.slots.len() <= 2 * run.len().max(1));
                let held: Vec<(u64, u64)> = run.iter().map(|(s, v)| (s, *v)).collect();
                let expected: Vec<(u64, u64)> = model.iter().map(|(s, v)| (*s, *v)).collect();
                proptest::prop_assert_eq!(held, expected);
                for seq in 0..next + 1 {
                    proptest::prop_assert_eq!(run.get(seq), model.get(&seq));
                }
                let (a, b) = (next / 3, next / 3 + 10);
                let ranged: Vec<u64> = run.range(a..b).map(|(s, _)| s).collect();
                let expected: Vec<u64> = model.range(a..b).map(|(s, _)| *s).collect();
                proptest::prop_assert_eq!(ranged, expected);
            }
        }
    }

    /// What a [`Bounded`] is asked to do, over a few keys so that they come back.
    #[derive(Debug, Clone)]
    enum Op {
        Entry(u8, usize),
        Insert(u8, u64),
        Remove(u8),
        RemoveAt(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..24, 1usize..12).prop_map(|(k, max)| Op::Entry(k, max)),
            1 => (0u8..24, 0u64..400).prop_map(|(k, seq)| Op::Insert(k, seq)),
            2 => (0u8..24).prop_map(Op::Remove),
            1 => (0u64..400).prop_map(Op::RemoveAt),
        ]
    }

    proptest::proptest! {
        /// A bounded finds, adds, forgets and removes as a plain list of (place, key, value) in
        /// order of place does, its table of places always agreeing with its order.
        #[test]
        fn a_bounded_holds_what_a_list_in_order_of_place_holds(
            ops in proptest::collection::vec(op(), 0..300),
        ) {
            let mut b: Bounded<u64> = Bounded::default();
            let mut model: Vec<(u64, String, u64)> = Vec::new();
            let mut next = 0;
            for (i, op) in ops.into_iter().enumerate() {
                let i = i as u64;
                match op {
                    Op::Entry(k, max) => {
                        let key = format!("key-{k}");
                        let mut forgotten = Vec::new();
                        let (seq, v) = b.entry(&key, max, &mut forgotten);
                        *v += i;
                        let mut expected = Vec::new();
                        let held = model.iter().position(|(_, k, _)| *k == key);
                        let at = match held {
                            Some(at) => at,
                            None => {
                                while model.len() >= max {
                                    let (s, k, v) = model.remove(0);
                                    expected.push((s, ProjectKey::from(k), v));
                                }
                                model.push((next, key.clone(), 0));
                                next += 1;
                                model.len() - 1
                            }
                        };
                        model[at].2 += i;
                        proptest::prop_assert_eq!(seq, model[at].0);
                        proptest::prop_assert_eq!(forgotten, expected);
                    }
                    Op::Insert(k, seq) => {
                        let key = format!("key-{k}");
                        // A place another key holds is not given again (as in a restore).
                        if model.iter().any(|(s, other, _)| *s == seq && *other != key) {
                            continue;
                        }
                        let held = model.iter().position(|(_, k, _)| *k == key);
                        let was = held.map(|at| model.remove(at).0);
                        proptest::prop_assert_eq!(b.insert(&key, seq, i), was);
                        let at = model.partition_point(|(s, ..)| *s < seq);
                        model.insert(at, (seq, key, i));
                        next = next.max(seq + 1);
                    }
                    Op::Remove(k) => {
                        let key = format!("key-{k}");
                        let held = model.iter().position(|(_, k, _)| *k == key);
                        let expected = held.map(|at| model.remove(at)).map(|(s, _, v)| (s, v));
                        proptest::prop_assert_eq!(b.remove(&key), expected);
                    }
                    Op::RemoveAt(seq) => {
                        let held = model.iter().position(|(s, ..)| *s == seq);
                        let expected = held
                            .map(|at| model.remove(at))
                            .map(|(_, k, v)| (ProjectKey::from(k), v));
                        proptest::prop_assert_eq!(b.remove_at(seq), expected);
                    }
                }
                proptest::prop_assert!(b.consistent());
                proptest::prop_assert_eq!(b.len(), model.len());
                let held: Vec<(&str, u64)> = b.iter().map(|(k, v)| (k, *v)).collect();
                let expected: Vec<(&str, u64)> =
                    model.iter().map(|(_, k, v)| (k.as_str(), *v)).collect();
                proptest::prop_assert_eq!(held, expected);
                for k in 0..24 {
                    let key = format!("key-{k}");
                    let expected = model.iter().find(|(_, m, _)| *m == key).map(|(s, _, v)| (*s, v));
                    proptest::prop_assert_eq!(b.get_with_seq(&key), expected);
                }
            }
        }
    }
}
