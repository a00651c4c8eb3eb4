//! The state changelog: partition state as compacted key/value records, and back.
//!
//! Every input partition's state is written to the same-numbered partition of the changelog topic
//! (`jury.state`). Keys are JSON arrays, so ids may contain any character:
//! `["v", 3, "project", "proj-42"]`, `["j", 3, "session", "proj-42", "council-981"]`. The first two
//! elements name the unit (`v` = votes, `j` = judge-scores; the partition), the third the kind of
//! state. A tombstone (no value) deletes. Restoring reads the partition from the beginning and
//! keeps the latest value per key, exactly as compaction would. This module is pure: the Kafka
//! runtime does the reading and writing.
//!
//! Dedupe windows are stored in buckets of `SEEN_BUCKET` consecutive ids. A vote project's
//! record carries its score *and* its newest (open) bucket, for two reasons: with many projects
//! nearly every event changes both, and one record instead of two is a third fewer produced
//! records per event; and the score and the ids it counts are then written atomically. A bucket
//! gets a `seen` record of its own once a newer one opens, and such records are written before
//! the project records of the same flush. So if a crash cuts a flush short, whatever part of it
//! reached the log restores to a state where every id in the window is counted in the score:
//! restore drops ids newer than the project record's newest, and the records replayed from the
//! last complete flush are applied exactly once (as long as the dedupe window holds a flush's
//! worth of the project's ids). The record also carries the offset of the project's last
//! applied batch, so the replayed records it already counts are skipped as replayed
//! ([`crate::engine::Outcome::Replayed`]) rather than dead-lettered as duplicates.
//!
//! Judge-scores state has no such pairing: one ballot changes its session, the partition's
//! session book, its project's dedupe window, and (when it completes sessions) their completed
//! ids, bias roll-ups and leaderboard rows, under different keys. So a judge-scores flush is
//! made atomic with a *redo record*: before its state records, the flush writes all of them
//! again inside one record (`["j",3,"redo","0"]`, split into numbered chunks when it would
//! exceed the runtime's chunk size), naming the writer's run and the flush's last input offset.
//! A crash can cut the flush anywhere. If the redo record is complete (its chunks, from one
//! write, through the one marked last), restore applies it over whatever part of the state
//! records made it, and the state is the end of the flush, its offset the redo's; if it is not,
//! none of the flush's state records were written (they follow it), and the state is the flush
//! before. Either way, each ballot counts once and replays from the restored offset.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry as SlotEntry, HashTable};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::contract::time::EventTime;
use crate::engine::model::bias::ProjectAudit;
use crate::engine::model::dedupe::RecentIds;
use crate::engine::model::leaderboard::Entry;
use crate::engine::model::score::ProjectScore;
use crate::engine::model::session::{ProjectSessions, Session, SessionBook};
use crate::engine::{Change, IdMap, InputTopic, PartitionState, ProjectKey, VoteProject};

/// One changelog record, owned; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    pub key: String,
    pub value: Option<String>,
}

impl From<RecordRef<'_>> for StateRecord {
    fn from(r: RecordRef<'_>) -> Self {
        StateRecord {
            key: String::from_utf8_lossy(r.key).into_owned(),
            value: r.value.map(|v| String::from_utf8_lossy(v).into_owned()),
        }
    }
}

/// A changelog record that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    #[error("changelog key {key}: {reason}")]
    Key { key: String, reason: String },
    #[error("changelog value of {key}: {source}")]
    Value {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The state of one input partition in the changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unit {
    pub topic: InputTopic,
    pub partition: i32,
}

impl Unit {
    fn tag(self) -> &'static str {
        match self.topic {
            InputTopic::Votes => "v",
            InputTopic::JudgeScores => "j",
            InputTopic::Reputations => "r",
        }
    }

    /// How every key of this unit begins, `["v",3,`: what [`Restorer`] recognises its unit's
    /// records by. It is how serde writes the first two elements of a [`Key`].
    fn prefix(self) -> Vec<u8> {
        format!("[\"{}\",{},", self.tag(), self.partition).into_bytes()
    }

    /// The key of one of this unit's records, as text.
    fn key(self, kind: &str, ids: &[&str]) -> String {
        let mut b = Vec::new();
        push_json(
            &mut b,
            &Key {
                unit: self,
                kind,
                ids,
            },
        );
        String::from_utf8_lossy(&b).into_owned()
    }
}

/// A changelog key, written as the JSON array `["v",3,"project","proj-42"]`: the unit's tag and
/// partition, the kind of state, then the ids that name it.
struct Key<'a> {
    unit: Unit,
    kind: &'a str,
    ids: &'a [&'a str],
}

impl Serialize for Key<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(3 + self.ids.len()))?;
        seq.serialize_element(self.unit.tag())?;
        seq.serialize_element(&self.unit.partition)?;
        seq.serialize_element(self.kind)?;
        for id in self.ids {
            seq.serialize_element(id)?;
        }
        seq.end()
    }
}

#[derive(Serialize, Deserialize)]
struct Seq {
    seq: u64,
}

#[derive(Serialize, Deserialize)]
struct BookMeta {
    watermark: Option<EventTime>,
    next_seq: u64,
}

/// Ids per dedupe-window changelog record.
const SEEN_BUCKET: u64 = 32;

/// A dedupe fingerprint as it is written: 32 lowercase hex digits.
struct Hex(u128);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{:032x}", self.0))
    }
}

/// A dedupe bucket as it is written: `[[seq,"fingerprint"],...]`.
fn bucket(ids: impl Iterator<Item = (u64, u128)>) -> Vec<(u64, Hex)> {
    ids.map(|(seq, fp)| (seq, Hex(fp))).collect()
}

/// Appends `value` as JSON; false if it could not be serialized.
fn push_json(b: &mut Vec<u8>, value: &impl Serialize) -> bool {
    serde_json::to_writer(b, value).is_ok()
}

/// Appends a dedupe bucket (see [`bucket`]); false when it has no ids (then nothing is written).
fn push_bucket(b: &mut Vec<u8>, ids: impl Iterator<Item = (u64, u128)>) -> bool {
    let ids = bucket(ids);
    !ids.is_empty() && push_json(b, &ids)
}

/// The value of an offset record, `{"offset":N}`.
#[derive(Serialize)]
struct OffsetValue {
    offset: i64,
}

/// How a redo chunk reads back: the write it belongs to (the writer's run and the flush's last
/// input offset), whether it is the flush's last chunk, and the state records it carries, each
/// a key and a value (`null` for a tombstone), as written.
#[derive(Serialize, Deserialize)]
struct RedoChunk<'a> {
    run: u64,
    offset: i64,
    #[serde(borrow)]
    records: Vec<(&'a RawValue, Option<&'a RawValue>)>,
    last: bool,
}

/// The largest redo chunk a [`Renderer::default`] writes (records' keys and values).
pub const DEFAULT_REDO_CHUNK_BYTES: usize = 512 * 1024;

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
struct Span {
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
    bytes: Vec<u8>,
    spans: Vec<Span>,
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
    fn push_offset(&mut self, unit: Unit, offset: i64) {
        self.push(unit, "offset", &[], |b| {
            push_json(b, &OffsetValue { offset })
        });
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

    /// Appends a record: its key, then its value if `value` writes one (a tombstone if not).
    fn push(
        &mut self,
        unit: Unit,
        kind: &str,
        ids: &[&str],
        value: impl FnOnce(&mut Vec<u8>) -> bool,
    ) {
        let start = self.bytes.len();
        push_json(&mut self.bytes, &Key { unit, kind, ids });
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

    /// Appends the record for one slot, its value read from the current state (`change` is the
    /// slot's last change: a completed-window entry's sequence number is not kept in the state).
    fn push_slot(&mut self, unit: Unit, state: &PartitionState, slot: Slot<'_>, change: &Change) {
        match slot {
            Slot::Project(project) => self.push(unit, "project", &[project], |b| {
                state
                    .projects
                    .get(project)
                    .is_some_and(|p| push_project(b, p))
            }),
            Slot::Seen(project, bucket) => {
                // Buckets are rewritten whole when they change and deleted once every id in
                // them was forgotten.
                let window = match unit.topic {
                    InputTopic::Votes => state.projects.get(project).map(|p| &p.seen),
                    _ => state.judge_projects.get(project).map(|p| &p.seen),
                };
                self.push(unit, "seen", &[project, &bucket.to_string()], |b| {
                    window.is_some_and(|w| {
                        push_bucket(b, w.range(bucket * SEEN_BUCKET, (bucket + 1) * SEEN_BUCKET))
                    })
                });
            }
            Slot::Session(project, session) => {
                let open = state
                    .sessions
                    .projects
                    .get(project)
                    .and_then(|p| p.open.get(session));
                self.push(unit, "session", &[project, session], |b| {
                    open.is_some_and(|s| push_json(b, s))
                });
            }
            Slot::Completed(project, fingerprint) => {
                let hex = format!("{fingerprint:032x}");
                self.push(unit, "completed", &[project, &hex], |b| match change {
                    Change::Completed { seq, .. } => push_json(b, &Seq { seq: *seq }),
                    _ => false,
                });
            }
            Slot::Audit(project) => {
                let audit = state.judge_projects.get(project).map(|p| &p.audit);
                self.push(unit, "audit", &[project], |b| {
                    audit.is_some_and(|a| push_json(b, a))
                });
            }
            Slot::Board(project, category, model) => {
                let row = state
                    .judge_projects
                    .get(project)
                    .and_then(|p| p.board.rows.get(&(category.to_owned(), model.to_owned())));
                self.push(unit, "board", &[project, category, model], |b| {
                    row.is_some_and(|r| push_json(b, r))
                });
            }
            Slot::Book => {
                let meta = BookMeta {
                    watermark: state.sessions.watermark,
                    next_seq: state.sessions.next_seq(),
                };
                self.push(unit, "book", &[], |b| push_json(b, &meta));
            }
        }
    }
}

/// What a change rewrites: changes with the same slot in one flush produce one record.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Slot<'a> {
    /// A vote project: its score and its open dedupe bucket.
    Project(&'a str),
    Seen(&'a str, u64),
    Session(&'a str, &'a str),
    Completed(&'a str, u128),
    Audit(&'a str),
    Board(&'a str, &'a str, &'a str),
    Book,
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
    state
        .projects
        .get(project)
        .and_then(|p| bucket_of_newest(&p.seen))
}

/// The bucket of a window's newest id: a vote project's open bucket, carried in its record.
fn bucket_of_newest(window: &RecentIds) -> Option<u64> {
    window.newest_seq().map(|s| s / SEEN_BUCKET)
}

impl Change {
    /// The slots this change rewrites, given the open bucket of each vote project after the
    /// flush's changes.
    fn slots<'a>(
        &'a self,
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
                Slot::Seen(project, seq / SEEN_BUCKET)
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
    slots: Vec<(Slot<'static>, &'static Change)>,
    /// Names this writer in its redo records, so that a restore never takes chunks of two
    /// writes for one (see the module doc): the runtime picks a different one at every start.
    run: u64,
    /// The most key and value bytes in one redo chunk.
    redo_chunk_bytes: usize,
    /// How many redo chunks each unit last wrote: when a flush needs fewer, the rest are
    /// deleted.
    redo_chunks: HashMap<Unit, usize>,
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
        match (unit.topic, offset) {
            (InputTopic::JudgeScores, Some(offset)) => {
                let mut body = std::mem::take(&mut self.body);
                body.clear();
                self.render_state(unit, state, changes, &mut body);
                if !body.is_empty() {
                    self.push_redo(unit, offset, &body, out);
                    out.append(&body);
                }
                self.body = body;
            }
            _ => self.render_state(unit, state, changes, out),
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
            out.push(unit, "redo", &[&chunks.to_string()], |b| {
                push_json(b, &chunk)
            });
            chunks += 1;
        }
        let before = self.redo_chunks.insert(unit, chunks).unwrap_or(0);
        for stale in chunks..before {
            out.push(unit, "redo", &[&stale.to_string()], |_| false);
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
        unit: Unit,
        state: &PartitionState,
        changes: &[Change],
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
        for change in changes {
            change.slots(&mut open, |slot| {
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
            out.push_slot(unit, state, *slot, change);
        }
        self.slots = recycle(slots);
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

/// A vote project's record; written with the ids as [`Hex`], read back as strings.
#[derive(Serialize, Deserialize)]
struct ProjectRecord<Fingerprint> {
    score: ProjectScore,
    seen: Vec<(u64, Fingerprint)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
}

/// A key read from the changelog and its latest value (`None`: deleted).
type Latest = (String, Option<Vec<u8>>);

/// Rebuilds a unit's state from its changelog partition.
#[derive(Debug)]
pub struct Restorer {
    unit: Unit,
    /// How this unit's keys begin (`["v",3,`), to tell its records from the partition's others.
    prefix: Vec<u8>,
    latest: HashMap<String, Option<Vec<u8>>>,
    /// Records read, for the restore-size metric.
    pub records: u64,
    pub bytes: u64,
}

impl Restorer {
    pub fn new(unit: Unit) -> Self {
        Restorer {
            unit,
            prefix: unit.prefix(),
            latest: HashMap::new(),
            records: 0,
            bytes: 0,
        }
    }

    /// The unit being restored.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// Takes one changelog record in log order; records of other units are ignored.
    pub fn accept(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.records += 1;
        self.bytes += (key.len() + value.map_or(0, <[u8]>::len)) as u64;
        if key.starts_with(&self.prefix) {
            self.latest.insert(
                String::from_utf8_lossy(key).into_owned(),
                value.map(<[u8]>::to_vec),
            );
        }
    }

    /// Takes the unit's redo chunks out of the records read and returns what they hold if they
    /// are complete: the last input offset of the flush and its state records, in order. They
    /// are complete when chunk 0 and the chunks after it through the one marked last are all
    /// there and from one write (run and offset). Otherwise the last flush was cut inside its
    /// redo record, before any of its state records.
    fn take_redo(&mut self) -> Result<Option<(i64, Vec<Latest>)>, ChangelogError> {
        let mut prefix = self.prefix.clone();
        prefix.extend_from_slice(b"\"redo\",");
        let keys: Vec<String> = self
            .latest
            .keys()
            .filter(|k| k.as_bytes().starts_with(&prefix))
            .cloned()
            .collect();
        let mut chunks: HashMap<u64, (String, Vec<u8>)> = HashMap::new();
        for key in keys {
            let Some(value) = self.latest.remove(&key).flatten() else {
                continue;
            };
            let parts = key_parts(&key)?;
            let Some(index) = parts
                .get(3)
                .and_then(Value::as_str)
                .and_then(|i| i.parse().ok())
            else {
                return Err(ChangelogError::Key {
                    key,
                    reason: "a redo chunk's index is not a number".to_owned(),
                });
            };
            chunks.insert(index, (key, value));
        }
        let mut records = Vec::new();
        let mut write = None;
        for index in 0.. {
            let Some((key, bytes)) = chunks.get(&index) else {
                return Ok(None);
            };
            let chunk: RedoChunk<'_> =
                serde_json::from_slice(bytes).map_err(|e| ChangelogError::Value {
                    key: key.clone(),
                    source: e,
                })?;
            if *write.get_or_insert((chunk.run, chunk.offset)) != (chunk.run, chunk.offset) {
                return Ok(None);
            }
            for (k, v) in chunk.records {
                if !k.get().as_bytes().starts_with(&self.prefix) {
                    return Err(ChangelogError::Key {
                        key: k.get().to_owned(),
                        reason: format!("in redo chunk {key}: not a key of this unit"),
                    });
                }
                records.push((k.get().to_owned(), v.map(|v| v.get().as_bytes().to_vec())));
            }
            if chunk.last {
                return Ok(Some((chunk.offset, records)));
            }
        }
        Ok(None)
    }

    /// The restored state (journaling) and the last input offset it includes, if any.
    pub fn finish(mut self) -> Result<(PartitionState, Option<i64>), ChangelogError> {
        // A complete redo record newer than the offset record is a flush that may have been cut
        // after it: its records go over the state records read (see the module doc).
        if let Some((redo_offset, records)) = self.take_redo()? {
            let offset_key = self.unit.key("offset", &[]);
            let written = self
                .latest
                .get(&offset_key)
                .and_then(|v| serde_json::from_slice::<Value>(v.as_deref()?).ok())
                .and_then(|v| offset_in(&v));
            if written.is_none_or(|w| w < redo_offset) {
                self.latest.extend(records);
                let value = serde_json::to_vec(&OffsetValue {
                    offset: redo_offset,
                });
                self.latest.insert(offset_key, value.ok());
            }
        }
        let mut state = PartitionState::journaled();
        let mut offset = None;
        let mut seen: IdMap<String, Vec<(u64, u128)>> = IdMap::default();
        // Per vote project, the newest id its record counts (see the module doc).
        let mut counted: IdMap<String, u64> = IdMap::default();
        let mut completed: IdMap<String, Vec<(u64, u128)>> = IdMap::default();
        let mut sessions: IdMap<String, ProjectSessions> = IdMap::default();
        let (mut watermark, mut next_seq) = (None, 0);
        for (key, value) in self.latest {
            let Some(value) = value else { continue };
            let parts = key_parts(&key)?;
            let ids: Vec<&str> = parts.iter().skip(3).filter_map(Value::as_str).collect();
            let kind = parts.get(2).and_then(Value::as_str).unwrap_or_default();
            let bad = |reason: &str| ChangelogError::Key {
                key: key.clone(),
                reason: reason.to_owned(),
            };
            let v: Value = from_value(&key, serde_json::from_slice(&value).unwrap_or(Value::Null))?;
            let fp =
                |s: &str| u128::from_str_radix(s, 16).map_err(|_| bad("fingerprint is not hex"));
            match (kind, ids.as_slice()) {
                ("offset", []) => offset = offset_in(&v),
                ("project", [project]) => {
                    let record: ProjectRecord<String> = from_value(&key, v)?;
                    if let Some(newest) = record.seen.iter().map(|(s, _)| *s).max() {
                        counted.insert(project.to_string(), newest);
                    }
                    let entries = seen.entry(project.to_string()).or_default();
                    for (seq, f) in record.seen {
                        entries.push((seq, fp(&f)?));
                    }
                    let mut restored = VoteProject::new(record.score);
                    restored.applied_through = record.offset;
                    state.projects.insert(ProjectKey::from(*project), restored);
                }
                ("seen", [project, _bucket]) => {
                    let ids: Vec<(u64, String)> = from_value(&key, v)?;
                    let entries = seen.entry(project.to_string()).or_default();
                    for (seq, f) in ids {
                        entries.push((seq, fp(&f)?));
                    }
                }
                ("completed", [project, f]) => {
                    let s: Seq = from_value(&key, v)?;
                    completed
                        .entry(project.to_string())
                        .or_default()
                        .push((s.seq, fp(f)?));
                }
                ("session", [project, session]) => {
                    let s: Session = from_value(&key, v)?;
                    sessions
                        .entry(project.to_string())
                        .or_default()
                        .open
                        .insert(session.to_string(), s);
                }
                ("audit", [project]) => {
                    let audit: ProjectAudit = from_value(&key, v)?;
                    state
                        .judge_projects
                        .entry(project.to_string())
                        .or_default()
                        .audit = audit;
                }
                ("board", [project, category, model]) => {
                    let row: std::collections::VecDeque<Entry> = from_value(&key, v)?;
                    let p = state.judge_projects.entry(project.to_string()).or_default();
                    p.board
                        .rows
                        .insert((category.to_string(), model.to_string()), row);
                }
                ("book", []) => {
                    let meta: BookMeta = from_value(&key, v)?;
                    (watermark, next_seq) = (meta.watermark, meta.next_seq);
                }
                _ => return Err(bad("unknown kind of state")),
            }
        }
        for (project, mut entries) in seen {
            match self.unit.topic {
                InputTopic::Votes => {
                    // Ids newer than the project record's are from a flush cut short: their
                    // events are not in the score and will be replayed. (Ids written twice by
                    // a cut flush are merged by `RecentIds::restore`.)
                    let newest = counted.get(&project).copied();
                    entries.retain(|(s, _)| newest.is_some_and(|n| *s <= n));
                    if let Some(p) = state.projects.get_mut(project.as_str()) {
                        p.seen = RecentIds::restore(entries);
                    }
                }
                _ => {
                    let window = RecentIds::restore(entries);
                    state.judge_projects.entry(project).or_default().seen = window;
                }
            }
        }
        for (project, entries) in completed {
            sessions.entry(project).or_default().completed = RecentIds::restore(entries);
        }
        state.sessions = SessionBook::restore(sessions, watermark, next_seq);
        Ok((state, offset))
    }
}

/// A changelog key's elements: `["v",3,"project","proj-42"]`.
fn key_parts(key: &str) -> Result<Vec<Value>, ChangelogError> {
    serde_json::from_str(key).map_err(|e| ChangelogError::Key {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// The input offset an offset record's value holds (see [`OffsetValue`]).
fn offset_in(value: &Value) -> Option<i64> {
    value.get("offset")?.as_i64()
}

fn from_value<T: serde::de::DeserializeOwned>(key: &str, v: Value) -> Result<T, ChangelogError> {
    serde_json::from_value(v).map_err(|e| ChangelogError::Value {
        key: key.to_owned(),
        source: e,
    })
}

#[cfg(test)]
mod tests;
