//! The orders judge quality (and reviewer reliability with it) keeps its state in: a project's
//! values by key, oldest first ([`Bounded`]: waiting judge scores, judges' windows); every item
//! a task holds, whatever its project, in order of arrival ([`Places`]), so that a task, not
//! only a project, stays within a bound; the items with votes themselves, with one table for
//! the task that finds each by its project and key ([`Items`]); and each project's places of
//! its items in that order ([`Held`]). Each keeps its values in an [`Ordered`] run of places.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};
use std::ops::Range;

use hashbrown::HashTable;

use crate::engine::ids::ProjectKey;

/// The room below which [`Bounded`] never shrinks its table: a few values' worth, which a table
/// would allocate again at once.
const MIN_ROOM: usize = 16;

/// Whether a run or table holding `len` with room for `room` gives room back (to `2 · len`):
/// once it holds less than a quarter of its room, above [`MIN_ROOM`]. Halving at a quarter keeps
/// the cost amortised: it grows back only after as many insertions as it shrank by.
fn gives_back(len: usize, room: usize) -> bool {
    room > MIN_ROOM && len * 4 < room
}

/// Values by place, oldest first: the order [`Bounded`] and [`Places`] keep. Places only grow
/// as values arrive, so a new value joins at the back and the oldest leaves from the front,
/// and values of consecutive places lie side by side, so that a bucket of the changelog reads
/// them in one sweep. (The B-trees this replaced shifted a leaf's values on every removal from
/// its front.) A value taken from the middle leaves a gap, dropped once it reaches either end
/// or once the gaps are half the run; a place is found at an end or, between them, where it
/// would be with no gaps dropped before it, else by a binary search.
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
            (Some(&(first, _)), _) => {
                // Places ascend and are unique, so place `seq` is at most `seq - first` slots
                // in, and exactly there until gaps are dropped from between: one read, not a
                // search, for a value in the middle of a long run (a task's items).
                let guess = usize::try_from(seq - first).map_or(len - 1, |g| g.min(len - 1));
                if self.slots[guess].0 == seq {
                    return Ok(guess);
                }
                self.slots.binary_search_by_key(&seq, |(s, _)| *s)
            }
            _ => Err(0),
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

    /// Makes room for one more slot, doubling the room as a `VecDeque` does but never past
    /// `max` slots while below it: a run that holds up to `max` values (a task's items, within
    /// their bound) then ends with room for exactly those, not up to twice.
    fn reserve_within(&mut self, max: usize) {
        let (len, room) = (self.slots.len(), self.slots.capacity());
        if len < room {
            return;
        }
        let want = if room < max {
            (2 * room).max(MIN_ROOM).min(max)
        } else {
            2 * room
        };
        self.slots.reserve_exact(want.max(len + 1) - len);
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
        if gives_back(len, room) {
            self.slots.shrink_to(len * 2);
        }
    }

    /// The oldest place held (the front slot always holds a value: gaps there are dropped).
    pub fn first(&self) -> Option<u64> {
        self.slots.front().map(|&(seq, _)| seq)
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

/// Keys' places, each found by the key's hash and the key at that place in an order the table
/// does not hold (`key_of` a place): what [`Bounded`] and [`Items`] find their keys with. A
/// table keeps room for up to twice the places it holds ([`PlaceTable::fit`]).
#[derive(Debug, Clone, Default)]
struct PlaceTable {
    places: HashTable<u64>,
    /// Seeded per process, as [`crate::engine::ids::IdMap`]'s: crafted keys cannot force
    /// collisions.
    hasher: foldhash::fast::RandomState,
}

impl PlaceTable {
    fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The place whose key hashes to `hash` and is the key sought (`is_key` of the place).
    fn find(&self, hash: u64, is_key: impl Fn(u64) -> bool) -> Option<u64> {
        self.places.find(hash, |seq| is_key(*seq)).copied()
    }

    /// Adds place `seq` of a key whose hash is `hash` and that the table does not hold; every
    /// place it holds must have its key in `key_of`, for the table to move them as it grows.
    fn add<K: Hash>(&mut self, hash: u64, seq: u64, key_of: impl Fn(u64) -> Option<K>) {
        let hasher = &self.hasher;
        let rehash = |seq: &u64| key_of(*seq).map_or(0, |k| hasher.hash_one(k));
        self.places.insert_unique(hash, seq, rehash);
    }

    /// Moves a key whose hash is `hash` from place `from` to place `to`.
    fn repoint(&mut self, hash: u64, from: u64, to: u64) {
        if let Ok(mut place) = self.places.find_entry(hash, |s| *s == from) {
            *place.get_mut() = to;
        }
    }

    /// Drops place `seq` of a key whose hash is `hash`; whether it was held.
    fn remove(&mut self, hash: u64, seq: u64) -> bool {
        let Ok(place) = self.places.find_entry(hash, |s| *s == seq) else {
            return false;
        };
        place.remove();
        true
    }

    /// Gives back the table's room once it holds less than a quarter of it ([`gives_back`]). A
    /// table keeps the room of the most places it ever held, and a project holds many for a
    /// while when its records arrive in a run (the task's bound then forgets them). Every place
    /// held must have its key in `key_of`.
    fn fit<K: Hash>(&mut self, key_of: impl Fn(u64) -> Option<K>) {
        let (len, room) = (self.places.len(), self.places.capacity());
        if gives_back(len, room) {
            let hasher = &self.hasher;
            let rehash = |seq: &u64| key_of(*seq).map_or(0, |k| hasher.hash_one(k));
            self.places.shrink_to(len * 2, rehash);
        }
    }

    fn len(&self) -> usize {
        self.places.len()
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.places.capacity()
    }
}

/// Values by key, in order of arrival, at most a bound of them: the oldest goes first. Each
/// value has a place in that order, so a restore puts it back where it was. The places are the
/// bounded's own ([`Bounded::entry`]) or given to it ([`Bounded::insert`]): an item's place
/// (of a waiting judge score) is its place in its task's [`Places`].
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
    places: PlaceTable,
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
        let key_at = key_in(&self.order);
        self.places
            .find(self.places.hash(key), |seq| key_at(seq) == Some(key))
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

    /// Forgets the oldest values until there is room for one more within `max`, appending
    /// their places, keys and values to `forgotten`.
    pub fn make_room(&mut self, max: usize, forgotten: &mut Vec<(u64, ProjectKey, V)>) {
        while self.places.len() >= max.max(1) {
            let Some((seq, (oldest, value))) = self.order.pop_first() else {
                break;
            };
            self.places.remove(self.places.hash(oldest.as_str()), seq);
            forgotten.push((seq, oldest, value));
        }
        self.fit();
    }

    /// Puts `value` at place `seq`, replacing what `key` held, and returns the place it held;
    /// later places of its own follow it. A restore puts values back this way.
    pub fn insert(&mut self, key: &str, seq: u64, value: V) -> Option<u64> {
        let hash = self.places.hash(key);
        let held = self.place(key);
        match held {
            Some(held) if held != seq => {
                self.places.repoint(hash, held, seq);
                self.order.remove(held);
            }
            Some(_) => {}
            None => self.places.add(hash, seq, key_in(&self.order)),
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
        self.places.remove(self.places.hash(key.as_str()), seq);
        self.fit();
        Some((key, v))
    }

    /// Gives back the table's room ([`PlaceTable::fit`]).
    fn fit(&mut self) {
        self.places.fit(key_in(&self.order));
    }

    pub fn len(&self) -> usize {
        self.places.len()
    }

    pub fn is_empty(&self) -> bool {
        self.places.len() == 0
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

/// The key at each place of a [`Bounded`]'s `order`, for its [`PlaceTable`].
fn key_in<'a, V>(order: &'a Ordered<(ProjectKey, V)>) -> impl Fn(u64) -> Option<&'a str> {
    move |seq| order.get(seq).map(|(k, _)| k.as_str())
}

/// The items a task holds, over all its projects, in order of arrival: each place's project and
/// value, so that the task forgets its oldest item first, whatever its project. A place is the
/// item's place among its project's ([`Held`]) too, and the changelog writes items in buckets of
/// places. The values live here, in the task's order, not in their projects: the item forgotten
/// next is at the front, read in the order it was written rather than from wherever its project's
/// memory lies, and a bucket of the changelog is one sweep of the run. (Waiting judge scores keep
/// their values in their projects, and `V` is `()` for them.)
#[derive(Debug, Clone)]
pub struct Places<V = ()> {
    order: Ordered<(ProjectKey, V)>,
    next: u64,
}

impl<V> Default for Places<V> {
    fn default() -> Self {
        Places {
            order: Ordered::default(),
            next: 0,
        }
    }
}

/// Equal when the same projects hold the same values in the same order (places are only
/// relative, as in [`Bounded`]).
impl<V: PartialEq> PartialEq for Places<V> {
    fn eq(&self, other: &Self) -> bool {
        self.order.values().eq(other.order.values())
    }
}

/// A task's items with their keys: each place's project, and its item's key and value.
pub type Keyed<V> = Places<(ProjectKey, V)>;

impl<V> Places<V> {
    /// The next place, taken by `value` of `project`, in a task that holds at most `max`.
    pub fn push(&mut self, project: &str, value: V, max: usize) -> u64 {
        let seq = self.next;
        self.order.reserve_within(max);
        self.restore(seq, project, value);
        seq
    }

    /// Puts a restored `value` of `project` back at place `seq`.
    pub fn restore(&mut self, seq: u64, project: &str, value: V) {
        self.order.insert(seq, (ProjectKey::from(project), value));
        self.next = self.next.max(seq + 1);
    }

    /// Takes the value at place `seq`, with its project.
    pub fn remove(&mut self, seq: u64) -> Option<(ProjectKey, V)> {
        self.order.remove(seq)
    }

    /// The project of the item at place `seq`.
    pub fn project_at(&self, seq: u64) -> Option<&ProjectKey> {
        self.order.get(seq).map(|(p, _)| p)
    }

    /// The value at place `seq`.
    pub fn get(&self, seq: u64) -> Option<&V> {
        self.order.get(seq).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut V> {
        self.order.get_mut(seq).map(|(_, v)| v)
    }

    /// The place the next item takes.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The oldest place held.
    pub fn first(&self) -> Option<u64> {
        self.order.first()
    }

    /// The oldest place, removed, with its project and value.
    pub fn pop_oldest(&mut self) -> Option<(u64, (ProjectKey, V))> {
        self.order.pop_first()
    }

    /// The places in `places`, their projects and values, in order: a changelog bucket.
    pub fn range(&self, places: Range<u64>) -> impl Iterator<Item = (u64, &str, &V)> {
        self.order
            .range(places)
            .map(|(seq, (p, v))| (seq, p.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// The project and key of each place of a task's items, for their [`PlaceTable`].
fn item_in<'a, V>(keyed: &'a Keyed<V>) -> impl Fn(u64) -> Option<(&'a str, &'a str)> {
    move |seq| {
        keyed
            .order
            .get(seq)
            .map(|(p, (k, _))| (p.as_str(), k.as_str()))
    }
}

/// A task's items ([`Keyed`]: in order of arrival, each with its project and key) and one table
/// that finds an item's place by its project and key. One table for the task, not one for each
/// project: a task's many small projects would each hold a table of their own, a few cache
/// lines apart from everything else they touch, which a vote on a new item reads, grows and
/// prunes; one table the size of the task's bound is a fraction of their memory in one piece,
/// and forgetting the task's oldest item drops its place here without touching its project.
/// Each project keeps only its places in order ([`Held`]).
#[derive(Debug, Clone)]
pub struct Items<V> {
    keyed: Keyed<V>,
    table: PlaceTable,
}

impl<V> Default for Items<V> {
    fn default() -> Self {
        Items {
            keyed: Keyed::default(),
            table: PlaceTable::default(),
        }
    }
}

/// Equal when their items are ([`Places`]' equality): the table only finds them.
impl<V: PartialEq> PartialEq for Items<V> {
    fn eq(&self, other: &Self) -> bool {
        self.keyed == other.keyed
    }
}

/// An item as a task's [`Items`] holds it: its project, and its key and value.
pub type Item<V> = (ProjectKey, (ProjectKey, V));

/// An item [`Items::find`] did not find: its hash in that table, for [`Items::push`] on the
/// same table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unheld(u64);

impl<V> Items<V> {
    /// The place of `project`'s `key`, if held, or else its hash, for [`Items::push`]: what a
    /// caller that adds the key when it is not held reads, so that the key is hashed once.
    pub fn find(&self, project: &str, key: &str) -> Result<u64, Unheld> {
        let hash = self.table.hash(&(project, key));
        let item_at = item_in(&self.keyed);
        self.table
            .find(hash, |seq| item_at(seq) == Some((project, key)))
            .ok_or(Unheld(hash))
    }

    /// The place of `project`'s `key`, if held.
    pub fn place(&self, project: &str, key: &str) -> Option<u64> {
        self.find(project, key).ok()
    }

    /// The next place, taken by `project`'s `key` with `value`, in a task that holds at most
    /// `max`: a key [`Items::find`] found unheld, which nothing added since.
    pub fn push(
        &mut self,
        (project, key): (&str, &str),
        unheld: Unheld,
        value: V,
        max: usize,
    ) -> u64 {
        let seq = self
            .keyed
            .push(project, (ProjectKey::from(key), value), max);
        self.table.add(unheld.0, seq, item_in(&self.keyed));
        seq
    }

    /// Puts a restored `value` of `project`'s `key` back at place `seq`, and returns the place
    /// the key held, if another, which it takes out.
    pub fn restore(&mut self, seq: u64, (project, key): (&str, &str), value: V) -> Option<u64> {
        let found = self.find(project, key);
        self.keyed
            .restore(seq, project, (ProjectKey::from(key), value));
        match found {
            Ok(held) if held == seq => None,
            Ok(held) => {
                self.table
                    .repoint(self.table.hash(&(project, key)), held, seq);
                self.keyed.remove(held);
                Some(held)
            }
            Err(Unheld(hash)) => {
                self.table.add(hash, seq, item_in(&self.keyed));
                None
            }
        }
    }

    /// Drops the place of the item `(project, (key, _))` taken out of place `seq`.
    fn unplace(&mut self, seq: u64, (project, (key, _)): &Item<V>) {
        let hash = self.table.hash(&(project.as_str(), key.as_str()));
        self.table.remove(hash, seq);
    }

    /// Takes the item at place `seq`, with its project and key.
    pub fn remove(&mut self, seq: u64) -> Option<Item<V>> {
        let item = self.keyed.remove(seq)?;
        self.unplace(seq, &item);
        self.table.fit(item_in(&self.keyed));
        Some(item)
    }

    /// The oldest item, removed, with its place, project and key.
    pub fn pop_oldest(&mut self) -> Option<(u64, Item<V>)> {
        let (seq, item) = self.keyed.pop_oldest()?;
        self.unplace(seq, &item);
        Some((seq, item))
    }

    /// The project of the item at place `seq`.
    pub fn project_at(&self, seq: u64) -> Option<&ProjectKey> {
        self.keyed.project_at(seq)
    }

    /// The key and value at place `seq`.
    pub fn get(&self, seq: u64) -> Option<&(ProjectKey, V)> {
        self.keyed.get(seq)
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut (ProjectKey, V)> {
        self.keyed.get_mut(seq)
    }

    /// The place the next item takes.
    pub fn next(&self) -> u64 {
        self.keyed.next()
    }

    /// The oldest place held.
    pub fn first(&self) -> Option<u64> {
        self.keyed.first()
    }

    /// The items at `places`, their projects, keys and values, in order: a changelog bucket.
    pub fn range(&self, places: Range<u64>) -> impl Iterator<Item = (u64, &str, &(ProjectKey, V))> {
        self.keyed.range(places)
    }

    pub fn len(&self) -> usize {
        self.keyed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty()
    }

    /// Whether its table finds every item at its place, and holds nothing else (for tests of
    /// the invariants).
    pub fn consistent(&self) -> bool {
        self.keyed.order.consistent()
            && self.table.len() == self.keyed.len()
            && self
                .keyed
                .order
                .iter()
                .all(|(seq, (p, (k, _)))| self.place(p, k) == Some(seq))
    }
}

/// A project's items: their places in its task's [`Items`], oldest first (a project's own
/// bound forgets its oldest, and its reviewers' fits read them in order), each with a tag. The
/// items themselves, and the table that finds one by its key, are the task's.
///
/// The task forgets its oldest item without touching the item's project (as a rule another
/// project than the one whose vote made room, and out of the caches): the place stays here
/// until the project's own next change drops every place the task no longer holds
/// ([`Held::prune`]). The task forgets oldest first, so those places are the oldest the project
/// holds, and until then a place forgotten finds no item in the task, so it is never read
/// ([`Held::places`] are read through the task).
///
/// The tag is what the project knows of the item there without reading it, which a project's
/// reviewers set to the item's pattern (see [`Book`](super::reviewers::Book)), so that a fit
/// reads the places in order instead of every item wherever the task holds it. A place starts,
/// and is written again, [`UNREAD`].
#[derive(Debug, Clone, Default)]
pub struct Held {
    own: VecDeque<Owned>,
}

/// The tag of a place whose item its project has not read since it was written.
pub const UNREAD: u32 = u32::MAX;

/// A place a project holds: its place in the task and its tag.
#[derive(Debug, Clone, Copy)]
struct Owned {
    seq: u64,
    tag: u32,
}

/// Always equal: which items a project holds, and their order, are the task's ([`Places`]'s
/// equality), and [`TaskQuality::consistent`](super::judge_quality::TaskQuality) checks that the
/// two agree. (A project may still hold places its task forgot, which its next change drops.)
impl PartialEq for Held {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Held {
    /// Notes place `seq`, unread, among the places in order (the newest, as a rule; a restore
    /// may put one back before it, or write one again). `items` are the task's: the places it
    /// forgot go first.
    pub fn push<V>(&mut self, items: &Items<V>, seq: u64) {
        self.prune(items);
        let owned = Owned { seq, tag: UNREAD };
        match self.own.back() {
            Some(last) if last.seq >= seq => {
                let at = self.own.partition_point(|o| o.seq < seq);
                match self.own.get_mut(at) {
                    Some(held) if held.seq == seq => held.tag = UNREAD,
                    _ => self.own.insert(at, owned),
                }
            }
            _ => self.own.push_back(owned),
        }
    }

    /// Sets the tag of place `seq`, if held: the newest, as a rule.
    pub fn set_tag(&mut self, seq: u64, tag: u32) {
        let at = match self.own.back() {
            Some(last) if last.seq == seq => Some(self.own.len() - 1),
            _ => self.own.binary_search_by_key(&seq, |o| o.seq).ok(),
        };
        if let Some(owned) = at.and_then(|at| self.own.get_mut(at)) {
            owned.tag = tag;
        }
    }

    /// The places held that the task (`items`) holds too, oldest first, each with its tag.
    pub fn held_tags_mut<V>(&mut self, items: &Items<V>) -> impl Iterator<Item = (u64, &mut u32)> {
        let gone = self.own.len() - self.held(items);
        self.own.iter_mut().skip(gone).map(|o| (o.seq, &mut o.tag))
    }

    /// [`Held::held_tags_mut`], to read.
    pub fn held_tags<V>(&self, items: &Items<V>) -> impl Iterator<Item = (u64, u32)> + '_ {
        let gone = self.own.len() - self.held(items);
        self.own.iter().skip(gone).map(|o| (o.seq, o.tag))
    }

    /// The tags of every place held, with any the task forgot since the last change.
    pub fn tags_mut(&mut self) -> impl Iterator<Item = &mut u32> {
        self.own.iter_mut().map(|o| &mut o.tag)
    }

    /// Drops place `seq` (the oldest, as a rule); whether it was held.
    pub fn remove(&mut self, seq: u64) -> bool {
        let at = if self.own.front().is_some_and(|o| o.seq == seq) {
            Some(0)
        } else {
            self.own.binary_search_by_key(&seq, |o| o.seq).ok()
        };
        let held = at.and_then(|at| self.own.remove(at)).is_some();
        self.give_back();
        held
    }

    /// Drops the places the task (`items`) no longer holds: those before its oldest, as it
    /// forgets its oldest first.
    pub fn prune<V>(&mut self, items: &Items<V>) {
        let first = items.first();
        let forgotten = |o: &Owned| first.is_none_or(|first| o.seq < first);
        // One at a time from the front, not a search: as a rule one or none is forgotten, and
        // the front is what the change reads anyway.
        let mut dropped = false;
        while self.own.front().is_some_and(forgotten) {
            self.own.pop_front();
            dropped = true;
        }
        if dropped {
            self.give_back();
        }
    }

    /// Gives back the room of places in order that shrank to a quarter of it.
    fn give_back(&mut self) {
        let (len, room) = (self.own.len(), self.own.capacity());
        if gives_back(len, room) {
            self.own.shrink_to(len * 2);
        }
    }

    /// The oldest place held, once [`Held::prune`] has run.
    pub fn oldest(&self) -> Option<u64> {
        self.own.front().map(|o| o.seq)
    }

    /// The places held, oldest first, with any the task forgot since the last change (which
    /// the task no longer finds).
    pub fn places(&self) -> impl Iterator<Item = u64> + '_ {
        self.own.iter().map(|o| o.seq)
    }

    /// The places held that the task (`items`) holds too. Every change prunes first, so as a
    /// rule the oldest place is held and so is every other: one read at the front, which the
    /// change touched, instead of a search through places out of the caches.
    pub fn held<V>(&self, items: &Items<V>) -> usize {
        let first = items.first();
        let forgotten = |o: &Owned| first.is_none_or(|first| o.seq < first);
        if self.own.front().is_none_or(|o| !forgotten(o)) {
            return self.own.len();
        }
        self.own.len() - self.own.partition_point(forgotten)
    }

    /// Places held, with any the task forgot since the last change ([`Held::held`] leaves
    /// those out).
    pub fn len(&self) -> usize {
        self.own.len()
    }

    pub fn is_empty(&self) -> bool {
        self.own.is_empty()
    }

    /// Whether its places agree with `items`, its project's being `project` (for tests of the
    /// invariants): they ascend, the places the task forgot since the last change are the
    /// oldest, and every other is the task's, an item of `project`.
    pub fn consistent<V>(&self, items: &Items<V>, project: &str) -> bool {
        let ascending = self
            .own
            .iter()
            .zip(self.own.iter().skip(1))
            .all(|(a, b)| a.seq < b.seq);
        let gone = self.own.len() - self.held(items);
        ascending
            && self
                .own
                .iter()
                .skip(gone)
                .all(|o| items.project_at(o.seq).is_some_and(|p| p == project))
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

    /// What a task's [`Items`] and its projects' [`Held`] places are asked to do, over a few
    /// projects and keys so that they come back.
    #[derive(Debug, Clone)]
    enum Item {
        /// A key of a project at the next place, replacing the place it held.
        Push(u8, u8),
        /// A key of a project at any place free, as a restore puts one back.
        Restore(u8, u8, u64),
        /// The task's oldest item forgotten.
        PopOldest,
        /// A project's oldest item forgotten.
        ProjectOldest(u8),
    }

    fn item() -> impl proptest::strategy::Strategy<Value = Item> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..3, 0u8..8).prop_map(|(p, k)| Item::Push(p, k)),
            1 => (0u8..3, 0u8..8, 0u64..300).prop_map(|(p, k, s)| Item::Restore(p, k, s)),
            2 => Just(Item::PopOldest),
            1 => (0u8..3).prop_map(Item::ProjectOldest),
        ]
    }

    proptest::proptest! {
        /// A task's items and its projects' places find, add, replace and forget as a plain
        /// list of (place, project, key, value) in order of place does, and always agree: the
        /// task forgets its oldest without its project, which drops the place itself.
        #[test]
        fn the_task_items_and_their_projects_hold_what_a_list_in_order_of_place_holds(
            ops in proptest::collection::vec(item(), 0..300),
        ) {
            let mut items: Items<u64> = Items::default();
            let mut projects: [Held; 3] = Default::default();
            let mut model: Vec<(u64, u8, String, u64)> = Vec::new();
            let mut popped_through = None;
            for (i, op) in ops.into_iter().enumerate() {
                let i = i as u64;
                let (project, key, seq) = match op {
                    Item::Push(p, k) => (p, format!("key-{k}"), items.next()),
                    Item::Restore(p, k, seq) => {
                        // A restore fills a fresh state: never below a place already forgotten,
                        // and a place is given again only to the key it holds (written again).
                        let key = format!("key-{k}");
                        let taken = model
                            .iter()
                            .any(|(s, mp, mk, _)| *s == seq && (*mp != p || *mk != key));
                        if taken || popped_through >= Some(seq) {
                            continue;
                        }
                        (p, key, seq)
                    }
                    Item::PopOldest => {
                        // The item's project is not told: it drops the place itself.
                        let expected = (!model.is_empty()).then(|| model.remove(0));
                        let popped = items.pop_oldest();
                        popped_through = popped_through.max(popped.as_ref().map(|(s, _)| *s));
                        let popped = popped.map(|(s, (p, (k, v)))| (s, p.to_string(), k.to_string(), v));
                        let expected = expected.map(|(s, p, k, v)| (s, format!("p{p}"), k, v));
                        proptest::prop_assert_eq!(popped, expected);
                        continue;
                    }
                    Item::ProjectOldest(p) => {
                        let held = &mut projects[usize::from(p)];
                        held.prune(&items);
                        let at = model.iter().position(|(_, mp, ..)| *mp == p);
                        proptest::prop_assert_eq!(held.oldest(), at.map(|at| model[at].0));
                        if let Some(at) = at {
                            let (seq, ..) = model.remove(at);
                            proptest::prop_assert!(items.remove(seq).is_some());
                            proptest::prop_assert!(held.remove(seq));
                        }
                        continue;
                    }
                };
                let name = format!("p{project}");
                // A new item is looked for before it takes its place, as a vote's is: one
                // not held then goes in by its hash (`push`).
                let found = items.find(&name, &key);
                let held = model.iter().position(|(_, p, k, _)| *p == project && *k == key);
                let was = held.map(|at| model.remove(at).0);
                proptest::prop_assert_eq!(found.ok(), was);
                let own = &mut projects[usize::from(project)];
                match found {
                    Err(unheld) if matches!(op, Item::Push(..)) => {
                        let pushed = items.push((&name, &key), unheld, i, usize::MAX);
                        proptest::prop_assert_eq!(pushed, seq);
                    }
                    _ => {
                        let displaced = items.restore(seq, (&name, &key), i);
                        proptest::prop_assert_eq!(displaced, was.filter(|&was| was != seq));
                        if let Some(displaced) = displaced {
                            proptest::prop_assert!(own.remove(displaced));
                        }
                    }
                }
                own.push(&items, seq);
                let at = model.partition_point(|(s, ..)| *s < seq);
                model.insert(at, (seq, project, key, i));
                proptest::prop_assert!(items.consistent());
                for (p, held) in projects.iter().enumerate() {
                    let name = format!("p{p}");
                    proptest::prop_assert!(held.consistent(&items, &name));
                    let own: Vec<u64> = model
                        .iter()
                        .filter(|(_, mp, ..)| usize::from(*mp) == p)
                        .map(|(s, ..)| *s)
                        .collect();
                    let still: Vec<u64> =
                        held.places().filter(|&s| items.get(s).is_some()).collect();
                    proptest::prop_assert_eq!(held.held(&items), own.len());
                    proptest::prop_assert_eq!(still, own);
                    for k in 0..8 {
                        let key = format!("key-{k}");
                        let expected = model
                            .iter()
                            .find(|(_, mp, mk, _)| usize::from(*mp) == p && *mk == key)
                            .map(|(s, ..)| *s);
                        proptest::prop_assert_eq!(items.place(&name, &key), expected);
                    }
                }
                let held: Vec<(u64, String, String, u64)> = items
                    .range(0..u64::MAX)
                    .map(|(s, p, (k, v))| (s, p.to_owned(), k.to_string(), *v))
                    .collect();
                let expected: Vec<(u64, String, String, u64)> = model
                    .iter()
                    .map(|(s, p, k, v)| (*s, format!("p{p}"), k.clone(), *v))
                    .collect();
                proptest::prop_assert_eq!(held, expected);
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
