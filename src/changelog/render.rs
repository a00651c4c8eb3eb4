//! Rendering a flush: the changelog records of what a partition's journal says changed, each
//! key once, values read from the current state, into a buffer reused from flush to flush.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry as SlotEntry, HashTable};
use serde_json::value::RawValue;

use super::stores::{Recovery, Source, bucket_of_newest};
use super::*;

/// A record in a [`Records`] buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The changelog partition: the input partition whose state it is.
    pub partition: i32,
    pub key: &'a [u8],
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
}

/// Where a record is in [`Records::bytes`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    partition: i32,
    start: usize,
    key_end: usize,
    /// Where the value ends; `None` for a tombstone.
    end: Option<usize>,
}

/// Changelog records rendered into one buffer that is cleared and reused from flush to flush.
/// The runtime renders every flush's records and holds them until the flush's outputs are
/// acknowledged; with 10,000 busy projects that was about 15 MB in two allocations per record,
/// and the allocator served much of it from fresh pages (their page faults were 8% of the
/// processing thread). A reused buffer stays mapped.
#[derive(Debug, Default)]
pub struct Records {
    pub(super) bytes: Vec<u8>,
    pub(super) spans: Vec<Span>,
}

impl Records {
    /// The records in the order they were rendered (the order they must be written in).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> {
        self.spans.iter().map(|s| RecordRef {
            partition: s.partition,
            key: self.bytes.get(s.start..s.key_end).unwrap_or_default(),
            value: s
                .end
                .map(|end| self.bytes.get(s.key_end..end).unwrap_or_default()),
        })
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Empties the buffer for the next flush. It keeps its memory, unless that is more than
    /// eight times what this flush used: one burst does not hold its peak forever. An empty
    /// flush (outputs but no state, or a quiet partition) says nothing about the load and
    /// shrinks nothing.
    pub fn clear(&mut self) {
        let used = self.bytes.len();
        let records = self.spans.len();
        self.bytes.clear();
        self.spans.clear();
        if records > 0 && self.bytes.capacity() > 8 * used {
            self.bytes.shrink_to(used);
        }
        if records > 0 && self.spans.capacity() > 8 * records {
            self.spans.shrink_to(records);
        }
    }

    /// Appends the records a flush writes itself: the last input offset applied to `unit`'s
    /// state, or the last offset processed from each input partition that reached it (see
    /// [`Slot::Origins`]), unless there is none.
    pub(super) fn push_flush(
        &mut self,
        (unit, state): (Unit, &PartitionState),
        slot: Slot<'_>,
        at: i64,
    ) {
        let from = Source {
            unit,
            state,
            change: None,
            at: Some(at),
        };
        self.push_rendered(&from, slot);
    }

    /// Appends `slot`'s record, its value rendered from `from` (a tombstone if there is none).
    fn push_rendered(&mut self, from: &Source<'_>, slot: Slot<'_>) {
        self.push(from.unit, slot, |b| slot.render(from, b));
    }

    /// Appends `other`'s records.
    fn append(&mut self, other: &Records) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.spans.extend(other.spans.iter().map(|s| Span {
            partition: s.partition,
            start: s.start + base,
            key_end: s.key_end + base,
            end: s.end.map(|e| e + base),
        }));
    }

    /// Appends what a restore took from a cut flush's redo record (see
    /// [`PartitionState::carried`]): first, so that the flush's own records of the same keys
    /// follow and win.
    fn push_carried(&mut self, unit: Unit, state: &PartitionState) {
        for (key, value) in &state.carried.0 {
            let value = value.as_deref().map(str::as_bytes);
            self.push_raw(unit.partition, key.as_bytes(), value);
        }
    }

    /// Appends a record as it is written.
    fn push_raw(&mut self, partition: i32, key: &[u8], value: Option<&[u8]>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        let end = value.map(|v| {
            self.bytes.extend_from_slice(v);
            self.bytes.len()
        });
        self.spans.push(Span {
            partition,
            start,
            key_end,
            end,
        });
    }

    /// Appends a record: its key, then its value if `value` writes one (a tombstone if not).
    fn push(&mut self, unit: Unit, slot: Slot<'_>, value: impl FnOnce(&mut Vec<u8>) -> bool) {
        let start = self.bytes.len();
        push_json(&mut self.bytes, &Key { unit, slot });
        let key_end = self.bytes.len();
        let end = if value(&mut self.bytes) {
            Some(self.bytes.len())
        } else {
            self.bytes.truncate(key_end);
            None
        };
        self.spans.push(Span {
            partition: unit.partition,
            start,
            key_end,
            end,
        });
    }

    /// Appends the records of `slots` with their last changes, their values read from the
    /// current state (see [`Source`]): vote project records last, the others before them in
    /// their order (see the module doc).
    fn push_slots<'s, 'c: 's>(
        &mut self,
        (unit, state, at): (Unit, &PartitionState, Option<i64>),
        slots: impl Iterator<Item = &'s (Slot<'c>, &'c Change)> + Clone,
    ) {
        let is_project = |slot: &Slot<'_>| matches!(slot, Slot::Project(_));
        let others = slots.clone().filter(|(slot, _)| !is_project(slot));
        let projects = slots.filter(|(slot, _)| is_project(slot));
        for (slot, change) in others.chain(projects) {
            let from = Source {
                unit,
                state,
                change: Some(change),
                at,
            };
            self.push_rendered(&from, *slot);
        }
    }
}

/// [`open_bucket`] for a flush's changes in order: a vote event's changes name the same project
/// one after another, and one lookup serves them.
fn open_buckets<'a>(state: &PartitionState) -> impl FnMut(&'a str) -> Option<u64> {
    let mut last: Option<(&'a str, Option<u64>)> = None;
    move |project| match last {
        Some((p, bucket)) if p == project => bucket,
        _ => {
            let bucket = open_bucket(state, project);
            last = Some((project, bucket));
            bucket
        }
    }
}

/// The open dedupe bucket of a vote project: the one holding its newest id.
fn open_bucket(state: &PartitionState, project: &str) -> Option<u64> {
    state.votes(project).and_then(|p| bucket_of_newest(&p.seen))
}

impl Change {
    /// The slots this change rewrites, given the open bucket of each vote project after the
    /// flush's changes.
    fn slots<'a>(
        &'a self,
        unit: Unit,
        open_bucket: &mut impl FnMut(&'a str) -> Option<u64>,
        mut emit: impl FnMut(Slot<'a>),
    ) {
        let slot = match self {
            Change::Votes {
                project,
                seen,
                forgot,
            } => {
                // The open bucket lives in the project record.
                emit(Slot::Project(project));
                // The first id of a bucket closes the previous one, which until now lived only
                // in the project record: it gets a record of its own.
                let first_opened = seen.start.div_ceil(VOTE_BUCKET).max(1) * VOTE_BUCKET;
                for opened in (first_opened..seen.end).step_by(VOTE_BUCKET as usize) {
                    emit(Slot::Ids((project, opened / VOTE_BUCKET - 1)));
                }
                let open = open_bucket(project);
                for ids in [seen, forgot].into_iter().filter(|r| !r.is_empty()) {
                    for bucket in ids.start / VOTE_BUCKET..=(ids.end - 1) / VOTE_BUCKET {
                        if open != Some(bucket) {
                            emit(Slot::Ids((project, bucket)));
                        }
                    }
                }
                return;
            }
            Change::RetiredIds { project, bucket } => Slot::Seen((project, *bucket)),
            Change::Seen { project, seq } | Change::Forgot { project, seq } => {
                if unit.kind == UnitKind::Projects {
                    Slot::Ballots((project, seq / SEEN_BUCKET))
                } else {
                    Slot::Seen((project, seq / SEEN_BUCKET))
                }
            }
            Change::Session { project, session } => Slot::Session((project, session)),
            Change::Completed {
                project,
                fingerprint,
                ..
            }
            | Change::Uncompleted {
                project,
                fingerprint,
            } => Slot::Completed((project, *fingerprint)),
            Change::Audit { project } => Slot::Audit(project),
            Change::Board {
                project,
                category,
                model,
            } => Slot::Board((project, category, model)),
            Change::Watermark { project } => Slot::Watermark(project),
            Change::Ranking { project, category } => Slot::Ranking((project, category)),
            Change::Consensus { project, session } => Slot::Consensus((project, session)),
            Change::RankingBlock {
                project,
                category,
                block,
            } => Slot::Block((project, category, *block)),
            Change::QualityItems { places } => {
                if !places.is_empty() {
                    let (first, last) = (places.start, places.end - 1);
                    for bucket in first / ITEM_BUCKET..=last / ITEM_BUCKET {
                        emit(Slot::Items(bucket));
                    }
                }
                return;
            }
            Change::ItemsForgotten => Slot::ItemsForgotten(()),
            Change::QualityWaiting { seq } => Slot::Waits(seq / ITEM_BUCKET),
            Change::QualityJudge { project, judge } => Slot::Judge((project, judge)),
            Change::QualityRecent { project, seq } => Slot::Recent((project, *seq)),
            Change::LeftOut { project } => Slot::LeftOut(project),
            Change::RetiredForgotten { project } => Slot::Forgotten(project),
            Change::Reviewer { project, reviewer } => Slot::Reviewer((project, reviewer)),
            Change::Unmatched { project } => Slot::Unmatched(project),
            Change::Book => Slot::Book(()),
        };
        emit(slot);
    }
}

/// Renders flushes' changelog records, keeping its table of slots from flush to flush (rebuilt
/// from nothing, it was megabytes of fresh memory per flush with 10,000 busy projects).
#[derive(Debug)]
pub struct Renderer {
    hasher: foldhash::fast::RandomState,
    /// Positions in `slots`, found by their slot.
    index: HashTable<usize>,
    /// Empty between flushes: kept for its allocation.
    pub(super) slots: Vec<(Slot<'static>, &'static Change)>,
    /// Names this writer in its redo records, so that a restore never takes chunks of two
    /// writes for one (see the module doc): the runtime picks a different one at every start.
    run: u64,
    /// The most key and value bytes in one redo chunk.
    redo_chunk_bytes: usize,
    /// How many redo chunks each unit last wrote: when a flush needs fewer, the rest are
    /// deleted.
    redo_chunks: HashMap<Unit, u64>,
    /// A judge-scores flush's state records, before they are written after their redo record.
    body: Records,
}

impl Default for Renderer {
    fn default() -> Self {
        Renderer::new(0, DEFAULT_REDO_CHUNK_BYTES)
    }
}

impl Renderer {
    /// A renderer whose redo records name `run` (distinct for every start of the runtime) and
    /// carry at most `redo_chunk_bytes` of records each (at least one record).
    pub fn new(run: u64, redo_chunk_bytes: usize) -> Self {
        Renderer {
            hasher: foldhash::fast::RandomState::default(),
            index: HashTable::new(),
            slots: Vec::new(),
            run,
            redo_chunk_bytes,
            redo_chunks: HashMap::new(),
            body: Records::default(),
        }
    }

    /// Appends a flush of `unit` to `out`: the records for `changes` to `state`, then, when
    /// `offset` is given, the record saying the state includes input through `offset`. A
    /// judge-scores flush with changes and an offset starts with its redo record (see the module
    /// doc).
    pub fn render(
        &mut self,
        unit: Unit,
        state: &PartitionState,
        changes: &[Change],
        offset: Option<i64>,
        out: &mut Records,
    ) {
        // Each slot once, in the order of its first change, with its last change.
        let slots = self.collect(unit, state, changes);
        let part = |recovery| {
            let is = move |slot: &Slot<'_>| slot.recovery(unit) == recovery;
            slots.iter().filter(move |(slot, _)| is(slot))
        };
        let source = (unit, state, offset);
        match offset {
            Some(offset) if unit.redoes() => {
                let mut body = std::mem::take(&mut self.body);
                body.clear();
                // A projects unit's vote projects come first, as a votes unit writes them, then
                // its item buckets; the rest of its state follows in the redo record (see the
                // module doc).
                out.push_slots(source, part(Recovery::Counted));
                out.push_slots(source, part(Recovery::Undone));
                body.push_carried(unit, state);
                body.push_slots(source, part(Recovery::Redone));
                body.push_flush((unit, state), Slot::Origins(()), offset);
                if !body.is_empty() {
                    self.push_redo(unit, offset, &body, out);
                    out.append(&body);
                }
                self.body = body;
            }
            offset => {
                out.push_carried(unit, state);
                out.push_slots(source, slots.iter());
                if let Some(offset) = offset {
                    out.push_flush((unit, state), Slot::Origins(()), offset);
                }
            }
        }
        self.slots = recycle(slots);
        if let Some(offset) = offset {
            out.push_flush((unit, state), Slot::Offset(()), offset);
        }
    }

    /// Appends the redo record of a flush of `unit` through `offset` whose state records are
    /// `body`: chunks `["j",3,"redo","0"]`, `"1"`, ... of `{"run":R,"offset":O,"records":
    /// [[key,value],...],"last":bool}`, and tombstones for chunks the unit wrote before and no
    /// longer needs.
    fn push_redo(&mut self, unit: Unit, offset: i64, body: &Records, out: &mut Records) {
        let (run, budget) = (self.run, self.redo_chunk_bytes);
        let size = |r: &RecordRef<'_>| r.key.len() + r.value.map_or(4, <[u8]>::len) + 4;
        let mut records = body.iter().peekable();
        let mut chunks = 0;
        while records.peek().is_some() {
            let mut chunk = RedoChunk {
                run,
                offset,
                records: Vec::new(),
                last: false,
            };
            let mut used = 0;
            while let Some(r) = records.next_if(|r| used == 0 || used + size(r) <= budget) {
                used += size(&r);
                // The body's keys and values were written by serde_json just before: a redone
                // kind is never written with `push_packed`. One that was would be a tombstone
                // here and lose its state at the next cut flush, so it stops the flush instead.
                let raw = |bytes| {
                    serde_json::from_slice::<&RawValue>(bytes)
                        .expect("a redone record's key and value are JSON (see `push_packed`)")
                };
                chunk.records.push((raw(r.key), r.value.map(raw)));
            }
            chunk.last = records.peek().is_none();
            out.push(unit, Slot::Redo(chunks), |b| push_json(b, &chunk));
            chunks += 1;
        }
        let before = self.redo_chunks.insert(unit, chunks).unwrap_or(0);
        for stale in chunks..before {
            out.push(unit, Slot::Redo(stale), |_| false);
        }
    }

    /// The slots `changes` rewrite, one per key (the last change wins), in the order of their
    /// keys' first change, which is deterministic for a given input without sorting keys (a
    /// sort of a 10,000-project flush cost more than rendering it). Values are read from the
    /// current state when they are written, so several changes to one project in a flush cost
    /// one record, rendered once.
    fn collect<'c>(
        &mut self,
        unit: Unit,
        state: &PartitionState,
        changes: &'c [Change],
    ) -> Vec<(Slot<'c>, &'c Change)> {
        let Renderer {
            hasher,
            index,
            slots,
            ..
        } = self;
        let mut slots: Vec<(Slot<'c>, &'c Change)> = recycle(std::mem::take(slots));
        index.clear();
        let mut open = open_buckets(state);
        for change in changes {
            change.slots(unit, &mut open, |slot| {
                let hash = hasher.hash_one(slot);
                let found = index.entry(
                    hash,
                    |&at| slots[at].0 == slot,
                    |&at| hasher.hash_one(slots[at].0),
                );
                match found {
                    SlotEntry::Occupied(at) => slots[*at.get()].1 = change,
                    SlotEntry::Vacant(at) => {
                        at.insert(slots.len());
                        slots.push((slot, change));
                    }
                }
            });
        }
        slots
    }
}

/// An empty vector with `v`'s allocation, for elements that borrow for a shorter time: the
/// slots of a flush borrow its journal, which is dropped after it. Collecting a vector's
/// by-value iterator into a vector of a type of the same size and alignment reuses the
/// allocation.
fn recycle<T, U>(v: Vec<T>) -> Vec<U> {
    v.into_iter().filter_map(|_| None).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A redo record carries its records as JSON: one whose key and value are JSON is carried
    /// as written, and a value in MessagePack (a kind wrongly made redone) stops the flush
    /// rather than becoming a tombstone that a restore would apply.
    #[test]
    fn a_redo_record_carries_json_and_refuses_anything_else() {
        let unit = Unit::projects(0);
        let mut body = Records::default();
        body.push_raw(0, br#"["p",0,"x","a"]"#, Some(br#"{"n":1}"#));
        body.push_raw(0, br#"["p",0,"x","b"]"#, None);
        let mut out = Records::default();
        Renderer::new(7, 1 << 20).push_redo(unit, 42, &body, &mut out);
        let values: Vec<&[u8]> = out.iter().filter_map(|r| r.value).collect();
        assert_eq!(
            values,
            [&br#"{"run":7,"offset":42,"records":[[["p",0,"x","a"],{"n":1}],[["p",0,"x","b"],null]],"last":true}"#[..]]
        );
        let mut packed = Records::default();
        packed.push_raw(0, br#"["p",0,"x","a"]"#, Some(&[0x91, 0x01]));
        let refused = std::panic::catch_unwind(|| {
            Renderer::new(7, 1 << 20).push_redo(unit, 42, &packed, &mut Records::default());
        });
        assert!(
            refused.is_err(),
            "a MessagePack value was carried as a tombstone"
        );
    }
}
