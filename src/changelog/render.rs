//! Rendering a flush: the changelog records of what a partition's journal says changed, each
//! key once, values read from the current state, into a buffer reused from flush to flush.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry as SlotEntry, HashTable};
use serde_json::value::RawValue;

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

    /// Appends the record holding the last input offset applied to `unit`'s state.
    pub(super) fn push_offset(&mut self, unit: Unit, offset: i64) {
        self.push(unit, Slot::Offset, |b| {
            push_json(b, &OffsetValue { offset })
        });
    }

    /// Appends the record of the last offset processed from each input partition that reached
    /// `unit` (see [`Slot::Origins`]), unless there is none.
    fn push_origins(&mut self, unit: Unit, origins: &Origins) {
        if origins.is_empty() {
            return;
        }
        let entries: Vec<(&str, i32, i64)> = origins
            .entries()
            .into_iter()
            .map(|(t, p, o)| (super::tag(t), p, o))
            .collect();
        self.push(unit, Slot::Origins, |b| push_json(b, &entries));
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

    /// Appends a judge-quality value with its place (see [`Placed`]), or a tombstone.
    fn push_placed(&mut self, unit: Unit, slot: Slot<'_>, value: Option<(u64, &impl Serialize)>) {
        self.push(unit, slot, |b| {
            value.is_some_and(|(seq, value)| push_json(b, &Placed { seq, value }))
        });
    }

    /// Appends the record for one slot, its value read from the current state (`change` is the
    /// slot's last change: a completed-window entry's sequence number is not kept in the state;
    /// `at` the flush's last input offset, which item buckets carry).
    fn push_slot(
        &mut self,
        (unit, state): (Unit, &PartitionState),
        slot: Slot<'_>,
        change: &Change,
        at: Option<i64>,
    ) {
        match slot {
            Slot::Project(project) => self.push(unit, slot, |b| {
                state.votes(project).is_some_and(|p| push_project(b, p))
            }),
            Slot::Seen(project, bucket) | Slot::Ballots(project, bucket) => {
                // Buckets are rewritten whole when they change and deleted once every id in
                // them was forgotten.
                let window = if matches!(slot, Slot::Seen(..)) && unit.holds_votes() {
                    state.votes(project).map(|p| &p.seen)
                } else {
                    state.judges(project).map(|p| &p.seen)
                };
                self.push(unit, slot, |b| {
                    window.is_some_and(|w| {
                        push_bucket(b, w.range(bucket * SEEN_BUCKET, (bucket + 1) * SEEN_BUCKET))
                    })
                });
            }
            Slot::Session(project, session) => {
                let open = state
                    .projects
                    .get(project)
                    .and_then(|p| p.sessions.open.get(session));
                self.push(unit, slot, |b| open.is_some_and(|s| push_json(b, s)));
            }
            Slot::Completed(..) => {
                self.push(unit, slot, |b| match change {
                    Change::Completed { seq, .. } => push_json(b, &Seq { seq: *seq }),
                    _ => false,
                });
            }
            Slot::Audit(project) => {
                let audit = state.judges(project).map(|p| &p.audit);
                self.push(unit, slot, |b| audit.is_some_and(|a| push_json(b, a)));
            }
            Slot::Consensus(project, session) => {
                let kept = state.judges(project).and_then(|p| p.kept.get(session));
                self.push(unit, slot, |b| {
                    kept.is_some_and(|k| {
                        let record = serde_json::from_str::<&RawValue>(&k.record);
                        record.is_ok_and(|record| push_json(b, &KeptValue { seq: k.seq, record }))
                    })
                });
            }
            Slot::Board(project, category, model) => {
                let row = state
                    .judges(project)
                    .and_then(|p| p.board.rows.get(&(category.to_owned(), model.to_owned())));
                self.push(unit, slot, |b| row.is_some_and(|r| push_json(b, r)));
            }
            Slot::Ranking(project, category) => {
                let ranking = state
                    .judges(project)
                    .and_then(|p| p.board.ranked.get(category));
                self.push(unit, slot, |b| ranking.is_some_and(|r| push_json(b, r)));
            }
            Slot::Block(project, category, block) => {
                let pairs = state
                    .judges(project)
                    .and_then(|p| p.board.ranked.get(category))
                    .and_then(|r| r.blocks.get(&block));
                self.push(unit, slot, |b| pairs.is_some_and(|p| push_json(b, p)));
            }
            Slot::Watermark(project) => {
                let watermark = state
                    .projects
                    .get(project)
                    .and_then(|p| p.sessions.watermark);
                self.push(unit, slot, |b| {
                    watermark.is_some_and(|watermark| push_json(b, &WatermarkValue { watermark }))
                });
            }
            Slot::Items(bucket) => {
                let items: Vec<_> = state
                    .quality
                    .items_at(&state.projects, places(bucket))
                    .collect();
                let undo = state.quality.undo();
                // What the flush found is needed only if a restore can stop before it.
                let before: Vec<_> = undo
                    .filter(|_| at.is_some())
                    .map(|u| {
                        let found = u.before.range(places(bucket));
                        found
                            .map(|(&seq, (p, i, v))| (seq, p.as_str(), i.as_str(), v))
                            .collect()
                    })
                    .unwrap_or_default();
                let bucket = ItemBucket {
                    at,
                    from: undo.map_or(0, |u| u.from),
                    items,
                    before,
                };
                self.push(unit, slot, |b| {
                    !(bucket.items.is_empty() && bucket.before.is_empty()) && push_json(b, &bucket)
                });
            }
            Slot::ItemsForgotten => {
                let undo = state.quality.undo();
                let forgotten = undo.map(|u| &u.forgotten).filter(|f| !f.is_empty());
                self.push(unit, slot, |b| {
                    forgotten.is_some_and(|f| push_json(b, &place_runs(f)))
                });
            }
            Slot::Waits(bucket) => {
                let waits: Vec<_> = state
                    .quality
                    .waits_at(&state.projects, places(bucket))
                    .collect();
                self.push(unit, slot, |b| !waits.is_empty() && push_json(b, &waits));
            }
            Slot::Judge(project, judge) => {
                let q = state.quality(project);
                self.push_placed(unit, slot, q.and_then(|q| q.judges.get_with_seq(judge)));
            }
            Slot::Recent(project, seq) => {
                let q = state.quality(project);
                let scores = q.and_then(|q| q.recent.get(&seq));
                self.push(unit, slot, |b| scores.is_some_and(|s| push_json(b, s)));
            }
            Slot::Forgotten(project) => {
                let q = state.quality(project);
                self.push(unit, slot, |b| {
                    q.is_some_and(|q| {
                        push_json(
                            b,
                            &ForgottenValue {
                                forgotten: q.forgotten,
                                left_out: q.reviewers.left_out,
                                verdicts: q.reviewers.forgotten_verdicts,
                            },
                        )
                    })
                });
            }
            Slot::Reviewer(project, reviewer) => {
                let q = state.quality(project);
                let findings = q
                    .filter(|q| q.reviewers.holds(reviewer))
                    .map(|q| q.reviewers.findings(reviewer))
                    .filter(Findings::any);
                self.push(unit, slot, |b| {
                    findings.is_some_and(|findings| push_json(b, &ReviewerKept { findings }))
                });
            }
            Slot::Book => {
                let meta = BookMeta {
                    next_seq: state.sessions.next_seq(),
                };
                self.push(unit, slot, |b| push_json(b, &meta));
            }
            // Written by the flush itself (its offset, origins and redo records), never by a
            // change.
            Slot::Offset | Slot::Origins | Slot::Redo(_) => {}
        }
    }
}

/// The item places of judge-quality bucket `bucket` (see [`ITEM_BUCKET`]); a bucket is
/// written as `[[seq,project,item,value],...]`, or a tombstone when it holds none.
fn places(bucket: u64) -> std::ops::Range<u64> {
    bucket * ITEM_BUCKET..(bucket + 1) * ITEM_BUCKET
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
                let first_opened = seen.start.div_ceil(SEEN_BUCKET).max(1) * SEEN_BUCKET;
                for opened in (first_opened..seen.end).step_by(SEEN_BUCKET as usize) {
                    emit(Slot::Seen(project, opened / SEEN_BUCKET - 1));
                }
                let open = open_bucket(project);
                for ids in [seen, forgot].into_iter().filter(|r| !r.is_empty()) {
                    for bucket in ids.start / SEEN_BUCKET..=(ids.end - 1) / SEEN_BUCKET {
                        if open != Some(bucket) {
                            emit(Slot::Seen(project, bucket));
                        }
                    }
                }
                return;
            }
            Change::Seen { project, seq } | Change::Forgot { project, seq } => {
                if unit.kind == UnitKind::Projects {
                    Slot::Ballots(project, seq / SEEN_BUCKET)
                } else {
                    Slot::Seen(project, seq / SEEN_BUCKET)
                }
            }
            Change::Session { project, session } => Slot::Session(project, session),
            Change::Completed {
                project,
                fingerprint,
                ..
            }
            | Change::Uncompleted {
                project,
                fingerprint,
            } => Slot::Completed(project, *fingerprint),
            Change::Audit { project } => Slot::Audit(project),
            Change::Board {
                project,
                category,
                model,
            } => Slot::Board(project, category, model),
            Change::Watermark { project } => Slot::Watermark(project),
            Change::Ranking { project, category } => Slot::Ranking(project, category),
            Change::Consensus { project, session } => Slot::Consensus(project, session),
            Change::RankingBlock {
                project,
                category,
                block,
            } => Slot::Block(project, category, *block),
            Change::QualityItem { seq } => Slot::Items(seq / ITEM_BUCKET),
            Change::ItemsForgotten => Slot::ItemsForgotten,
            Change::QualityWaiting { seq } => Slot::Waits(seq / ITEM_BUCKET),
            Change::QualityJudge { project, judge } => Slot::Judge(project, judge),
            Change::QualityRecent { project, seq } => Slot::Recent(project, *seq),
            Change::QualityForgotten { project } => Slot::Forgotten(project),
            Change::Reviewer { project, reviewer } => Slot::Reviewer(project, reviewer),
            Change::Book => Slot::Book,
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
        match offset {
            Some(offset) if unit.redoes() => {
                let mut body = std::mem::take(&mut self.body);
                body.clear();
                // A projects unit's vote projects come first, as a votes unit writes them; the
                // rest of its state follows in the redo record (see the module doc).
                self.render_state((unit, state), changes, Part::Votes, None, out);
                self.render_state((unit, state), changes, Part::Items, Some(offset), out);
                body.push_carried(unit, state);
                self.render_state((unit, state), changes, Part::Redone, None, &mut body);
                body.push_origins(unit, &state.origins);
                if !body.is_empty() {
                    self.push_redo(unit, offset, &body, out);
                    out.append(&body);
                }
                self.body = body;
            }
            offset => {
                out.push_carried(unit, state);
                self.render_state((unit, state), changes, Part::All, offset, out);
                if offset.is_some() {
                    out.push_origins(unit, &state.origins);
                }
            }
        }
        if let Some(offset) = offset {
            out.push_offset(unit, offset);
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
                // The body's keys and values were written by serde just before.
                let raw = |bytes| serde_json::from_slice::<&RawValue>(bytes).ok();
                if let Some(key) = raw(r.key) {
                    chunk.records.push((key, r.value.and_then(raw)));
                }
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

    /// Appends the state records for `changes` to `state` to `out`, one per key (the last
    /// change wins): vote project records last, the others before them (see the module doc),
    /// each group in the order of its keys' first change, which is deterministic for a given
    /// input without sorting keys (a sort of a 10,000-project flush cost more than rendering
    /// it). Values are read from the current state, so several changes to one project in a flush
    /// cost one record, rendered once.
    fn render_state(
        &mut self,
        (unit, state): (Unit, &PartitionState),
        changes: &[Change],
        part: Part,
        at: Option<i64>,
        out: &mut Records,
    ) {
        let Renderer {
            hasher,
            index,
            slots,
            ..
        } = self;
        // Each slot once, in the order of its first change, with its last change.
        let mut slots: Vec<(Slot<'_>, &Change)> = std::mem::take(slots);
        index.clear();
        let mut open = open_buckets(state);
        let changes = changes.iter().filter(|c| match part {
            Part::All => true,
            other => Part::of(unit, c) == other,
        });
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
        let is_project = |slot: &Slot<'_>| matches!(slot, Slot::Project(_));
        let others = slots.iter().filter(|(slot, _)| !is_project(slot));
        let projects = slots.iter().filter(|(slot, _)| is_project(slot));
        for (slot, change) in others.chain(projects) {
            out.push_slot((unit, state), *slot, change, at);
        }
        self.slots = recycle(slots);
    }
}

/// Which of a flush's changes [`Renderer::render_state`] renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    All,
    /// A projects unit's vote projects (their records and dedupe buckets), written before its
    /// redo record.
    Votes,
    /// A projects unit's item buckets, written after its vote projects and before its redo
    /// record, each once (see [`ItemBucket`]).
    Items,
    /// The rest of a projects or judge-scores unit's state, inside its redo record.
    Redone,
}

impl Part {
    /// The part of a redoing unit's flush that `change` belongs to.
    fn of(unit: Unit, change: &Change) -> Part {
        match change {
            Change::Votes { .. } if unit.holds_votes() => Part::Votes,
            Change::QualityItem { .. } => Part::Items,
            _ => Part::Redone,
        }
    }
}

/// An empty vector with `v`'s allocation, for elements that borrow for a shorter time: the
/// slots of a flush borrow its journal, which is dropped after it. Collecting a vector's
/// by-value iterator into a vector of a type of the same size and alignment reuses the
/// allocation.
fn recycle<T, U>(v: Vec<T>) -> Vec<U> {
    v.into_iter().filter_map(|_| None).collect()
}

/// A vote project's record: `{"score":{...},"seen":[[seq,"fingerprint"],...],"offset":N}` with
/// the ids of its open dedupe bucket and the offset of its last applied batch (when known).
fn push_project(b: &mut Vec<u8>, project: &VoteProject) -> bool {
    let open = bucket_of_newest(&project.seen).unwrap_or(0);
    let seen = project
        .seen
        .range(open * SEEN_BUCKET, (open + 1) * SEEN_BUCKET);
    push_json(
        b,
        &ProjectRecord {
            score: project.score.clone(),
            seen: bucket(seen),
            offset: project.applied_through,
        },
    )
}
