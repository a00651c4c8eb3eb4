//! The state changelog: partition state as compacted key/value records, and back.
//!
//! The state of every partition the service keeps state for (a [`Unit`]: a partition of the
//! repartition topic, or of an input with `by_key`) is written to the same-numbered partition of
//! the changelog topic (`<group_id>-state`). Keys are JSON arrays, so ids may contain any
//! character: `["p", 3, "project", "proj-42"]`, `["p", 3, "session", "proj-42", "council-981"]`.
//! The first two elements name the unit (`p` = a partition of the project log, holding each of
//! its projects whole; with `by_key`, `v` = votes and `j` = judge scores of an input partition),
//! the third the kind of state. A partition holding keys of the other layout is refused at
//! restore ([`ChangelogError::Layout`]), never misread. A tombstone (no value) deletes. Restoring reads the partition from the beginning and
//! keeps the latest value per key, exactly as compaction would. This module is pure: the Kafka
//! runtime does the reading and writing.
//!
//! Each kind of state is declared once, in `stores.rs`: its name in keys, the ids after it,
//! how its value is written from the state and read back, and how it survives a flush that a
//! crash cut short (its *recovery*: counted, undone or redone, below). Keys, rendering and
//! restoring dispatch on that registration; `render.rs` maps the engine's journal to the
//! records it rewrites, `restore.rs` joins what spans records.
//!
//! Dedupe windows are stored in buckets of consecutive ids (written as runs, `IdRun`):
//! `VOTE_BUCKET` of a vote project's, `SEEN_BUCKET` of ballots'. A vote project's record
//! carries its score *and* its newest (open) bucket, for two reasons: with many projects nearly
//! every event changes both, and one record instead of two is a third fewer produced records
//! per event; and the score and the ids it counts are then written atomically. A bucket gets an
//! `ids` record of its own once a newer one opens, and such records are written before the
//! project records of the same flush. So if a crash cuts a flush short, whatever part of it
//! reached the log restores to a state where every id in the window is counted in the score:
//! restore drops ids newer than the project record's newest, and the records replayed from the
//! last complete flush are applied exactly once (as long as the dedupe window holds a flush's
//! worth of the project's ids). The record also carries the offset of the project's last
//! applied batch, so the replayed records it already counts are skipped as replayed
//! ([`crate::engine::Outcome::Replayed`]) rather than dead-lettered as duplicates. These
//! records are *counted*: each says which input it counts.
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
//! before. Either way, each ballot counts once and replays from the restored offset. These
//! records are *redone*.
//!
//! A projects unit (`p`) holds both: its flush writes its vote projects first, exactly as a
//! votes unit does, then its judge-quality item buckets, then the redo record of everything
//! else (sessions, bias, leaderboard, the rest of judge quality, origins) and those records. A
//! crash that cuts the flush inside its vote projects, its item buckets or its redo record
//! restores the rest of the state to the flush before: a vote re-read then is skipped by the
//! score of a project whose record made it (its offset) and applied to the rest (its judge
//! quality), which is what `Engine::process` does with a batch at or below its project's last
//! applied offset.
//!
//! Item buckets are the bulk of a projects unit's state (with a new item per vote, one item per
//! event), so they are written once, not also inside the redo record: each carries its flush's
//! offset, the first place the flush took, and the items the flush changed or forgot as it
//! found them (`ItemBucket`), so a restore to an earlier offset reads it as the flush found
//! it: they are *undone*. Items a flush forgets are deleted by the next flush (their places are
//! in the redo record, `Slot::ItemsForgotten`, so a restore drops those still in their buckets), and
//! buckets a cut flush wrote are written again by the first flush after the restore.
//!
//! A restore that applies a redo record whose flush was cut after it carries the records it
//! took from it into the next flush ([`crate::engine::PartitionState::carried`]): until then
//! that redo record is their only copy, and the next flush's redo record replaces it.

mod render;
mod restore;
mod restored;
mod stores;

use serde::ser::{Error as _, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::engine::contract::time::EventTime;
use crate::engine::model::bias::ProjectAudit;
use crate::engine::model::dedupe::RecentIds;
use crate::engine::model::judge_quality::ProjectQuality;
use crate::engine::model::judge_quality::{ITEM_BUCKET, ItemVotes, Waiting};
use crate::engine::model::leaderboard::{BlockId, Ranking, StoredRow};
use crate::engine::model::reviewers::{Findings, Kept as ReviewerKept};
use crate::engine::model::score::ProjectScore;
use crate::engine::model::session::{Session, SessionBook};
use crate::engine::{
    Change, IdMap, InputTopic, Kept, Origins, PartitionState, ProjectKey, VoteProject,
};
use stores::Slot;

pub use render::{RecordRef, Records, Renderer};
pub use restore::Restorer;
pub use stores::largest_item_bytes;

/// One changelog record, owned; `value: None` is a tombstone. Keys are JSON; values are JSON
/// or, for the task's buckets of places, MessagePack (see `push_packed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

impl From<RecordRef<'_>> for StateRecord {
    fn from(r: RecordRef<'_>) -> Self {
        StateRecord {
            key: String::from_utf8_lossy(r.key).into_owned(),
            value: r.value.map(<[u8]>::to_vec),
        }
    }
}

/// A changelog record that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    /// The partition holds state of the other layout: one state per project (a projects unit,
    /// `input.partitioning = "repartition"`) against one per input topic (`by_key`, or a
    /// version before one state per project). Read as this layout it would be misread (its
    /// records ignored, the state lost), so it is refused.
    #[error(
        "changelog partition {partition} holds state of another layout (key {key}), not the \
         {expected} this configuration keeps: written with the other input.partitioning, or by \
         a version that kept votes and judge scores in separate states"
    )]
    Layout {
        partition: i32,
        key: String,
        expected: Layout,
    },
    /// A key this version cannot read: of a kind it does not know (written by a newer
    /// version) or damaged. Skipping it would lose state without a word.
    #[error(
        "changelog key {key}: {reason}; it was written by another version of jurystream or is \
         damaged, and is not read as anything else"
    )]
    Key { key: String, reason: String },
    /// A value this version cannot read, for the same reasons.
    #[error(
        "changelog value of {key}: {source}; it was written by another version of jurystream \
         or is damaged, and is not read as anything else"
    )]
    Value {
        key: String,
        #[source]
        source: ValueError,
    },
}

/// Why a changelog value could not be read, in the form its kind is written in (JSON, or
/// MessagePack for item buckets: see `push_packed`).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// Of a kind written as JSON (or an item bucket written by a version before).
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Of an item bucket, written in MessagePack.
    #[error(transparent)]
    Packed(#[from] rmp_serde::decode::Error),
}

/// How to start a group over from its inputs, when its state cannot be used: what every restore
/// error says, naming consumer group `group` and its changelog `state` (`topics.state`, by
/// default `<group_id>-state`). One text, so that no error leaves out one of the group's topics
/// or consumer groups.
pub fn start_over(group: &str, state: &str) -> String {
    format!(
        "To start over from the inputs: stop every instance, delete the consumer groups \
         `{group}` and `{group}-tasks` and the topics `{state}` and `{group}-repartition` \
         (or set a new kafka.group_id), and start again; the inputs are then read again from \
         their earliest retained records"
    )
}

/// The state of one task in the changelog: the state of one partition of the log it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Unit {
    pub kind: UnitKind,
    pub partition: i32,
}

/// Which records a [`Unit`]'s state holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitKind {
    /// Every record of a partition of the repartition topic, whose partitions hold every record
    /// of their projects: votes and judge scores in one order, one state per project.
    Projects,
    /// One input topic's records of an input partition (`input.partitioning = "by_key"`).
    Input(InputTopic),
}

impl Unit {
    /// The unit of partition `partition` of the project log (the repartition topic).
    pub fn projects(partition: i32) -> Unit {
        Unit {
            kind: UnitKind::Projects,
            partition,
        }
    }

    /// The unit of input partition `partition` of `topic` (`by_key`).
    pub fn input(topic: InputTopic, partition: i32) -> Unit {
        Unit {
            kind: UnitKind::Input(topic),
            partition,
        }
    }

    fn tag(self) -> &'static str {
        match self.kind {
            UnitKind::Projects => PROJECTS_TAG,
            UnitKind::Input(topic) => tag(topic),
        }
    }

    /// Whether this unit's judge state follows the redo protocol (see the module doc): a
    /// judge-scores unit, and a projects unit.
    fn redoes(self) -> bool {
        self.kind != UnitKind::Input(InputTopic::Votes)
    }

    /// Whether this unit holds vote projects, whose dedupe windows are its `ids` records (a
    /// votes or projects unit); a judge-scores unit's `seen` records are its ballot ids.
    fn holds_votes(self) -> bool {
        self.kind != UnitKind::Input(InputTopic::JudgeScores)
    }

    /// How every key of this unit begins, `["v",3,`: what [`Restorer`] recognises its unit's
    /// records by. It is how serde writes the first two elements of a [`Key`].
    fn prefix(self) -> Vec<u8> {
        format!("[\"{}\",{},", self.tag(), self.partition).into_bytes()
    }

    /// The key of one of this unit's records, as text.
    fn key(self, slot: Slot<'_>) -> String {
        let mut b = Vec::new();
        push_json(&mut b, &Key { unit: self, slot });
        String::from_utf8_lossy(&b).into_owned()
    }
}

/// How a partition's state is laid out in the changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One state per project, of every record of a partition of the project log.
    Projects,
    /// One state per input topic and partition.
    PerInput,
}

impl Layout {
    fn of(kind: UnitKind) -> Layout {
        match kind {
            UnitKind::Projects => Layout::Projects,
            UnitKind::Input(_) => Layout::PerInput,
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Projects => "one state per project (input.partitioning = \"repartition\")",
            Layout::PerInput => "one state per input partition (input.partitioning = \"by_key\")",
        })
    }
}

/// How a projects unit is named in changelog keys.
const PROJECTS_TAG: &str = "p";

/// How an input topic is named in changelog keys and values.
fn tag(topic: InputTopic) -> &'static str {
    match topic {
        InputTopic::Votes => "v",
        InputTopic::JudgeScores => "j",
        InputTopic::Reputations => "r",
    }
}

/// The input topic a [`tag`] names.
fn topic_of(tag: &str) -> Option<InputTopic> {
    InputTopic::ALL.into_iter().find(|t| self::tag(*t) == tag)
}

/// A changelog key, written as the JSON array `["v",3,"project","proj-42"]`: the unit's tag and
/// partition, the slot's kind, then the ids that name it (numbers as decimal strings,
/// fingerprints as [`Hex`]).
struct Key<'a> {
    unit: Unit,
    slot: Slot<'a>,
}

impl Serialize for Key<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        seq.serialize_element(self.unit.tag())?;
        seq.serialize_element(&self.unit.partition)?;
        seq.serialize_element(self.slot.kind())?;
        self.slot.write_ids(&mut seq)?;
        seq.end()
    }
}

/// Ballot ids per dedupe-window changelog record (and vote ids', in the layout written before
/// [`VOTE_BUCKET`]).
const SEEN_BUCKET: u64 = 32;

/// Vote ids per dedupe-window changelog record ([`Slot::Ids`]). A busy project's record
/// carries its open bucket, rewritten with every flush, and a project gets a few ids per flush:
/// with buckets of 32 the open buckets' ids were a quarter of the changelog. Smaller buckets
/// cost a record per few ids where one project gets them all (buckets of 8 cost a single busy
/// project 7% of its events/s; see docs/performance-history.md).
const VOTE_BUCKET: u64 = 16;

/// A dedupe fingerprint as it is written: 32 lowercase hex digits.
struct Hex(u128);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut digits = [0u8; 32];
        hex_digits(self.0, &mut digits)?;
        s.serialize_str(std::str::from_utf8(&digits).map_err(S::Error::custom)?)
    }
}

/// Writes `fingerprint`'s 32 hex digits into `digits`. The hex crate, not `format!("{:032x}")`:
/// a project record carries up to 32 of these and `fmt`'s integer formatting was a seventh of
/// rendering a flush.
fn hex_digits<E: serde::ser::Error>(fingerprint: u128, digits: &mut [u8]) -> Result<(), E> {
    hex::encode_to_slice(fingerprint.to_be_bytes(), digits).map_err(E::custom)
}

/// Consecutive ids of a dedupe window as they are written: `[first_seq, "fingerprints"]`, the
/// 32 hex digits of each id one after the other. A bucket is a list of runs, one unless its
/// ids skip a number; a run of one id is the `[seq, "fingerprint"]` that a changelog written
/// before holds for every id, so both read alike ([`IdRun::ids`]).
struct IdRun {
    first: u64,
    fingerprints: Vec<u128>,
}

impl Serialize for IdRun {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut digits = vec![0u8; 32 * self.fingerprints.len()];
        for (f, chunk) in self.fingerprints.iter().zip(digits.chunks_exact_mut(32)) {
            hex_digits(*f, chunk)?;
        }
        let text = std::str::from_utf8(&digits).map_err(S::Error::custom)?;
        (self.first, text).serialize(s)
    }
}

impl IdRun {
    /// The `(seq, fingerprint)` of each id of a run as read, `[first_seq, "fingerprints"]`.
    fn ids(first: u64, hex: &str) -> impl Iterator<Item = Result<(u64, u128), &'static str>> {
        let whole = !hex.is_empty() && hex.len().is_multiple_of(32);
        let digits = if whole { hex.as_bytes() } else { b"-" };
        (first..).zip(digits.chunks(32)).map(|(seq, d)| {
            let d = std::str::from_utf8(d).map_err(|_| "fingerprint is not hex")?;
            if d.len() != 32 {
                return Err("fingerprints are not 32 hex digits each");
            }
            Ok((
                seq,
                u128::from_str_radix(d, 16).map_err(|_| "fingerprint is not hex")?,
            ))
        })
    }
}

/// A dedupe bucket as it is written: its ids in runs of consecutive ones (see [`IdRun`]).
fn bucket(ids: impl Iterator<Item = (u64, u128)>) -> Vec<IdRun> {
    let mut runs: Vec<IdRun> = Vec::new();
    for (seq, fingerprint) in ids {
        match runs.last_mut() {
            Some(run) if run.first + run.fingerprints.len() as u64 == seq => {
                run.fingerprints.push(fingerprint);
            }
            _ => runs.push(IdRun {
                first: seq,
                fingerprints: vec![fingerprint],
            }),
        }
    }
    runs
}

/// Appends `value` as JSON; false if it could not be serialized.
fn push_json(b: &mut Vec<u8>, value: &impl Serialize) -> bool {
    serde_json::to_writer(b, value).is_ok()
}

/// Appends `value` as MessagePack, its sequences and structs as arrays; false if it could not
/// be serialized. For the records most of the changelog is made of (item buckets): the same
/// shape as their JSON, read by the same types, in fewer bytes and three fifths of the work to
/// write (no escaping, floats as their bits). Read with [`Read::packed`](stores::Read::packed).
/// Only for kinds written on their own: a redo record carries its records as JSON.
fn push_packed(b: &mut Vec<u8>, value: &impl Serialize) -> bool {
    rmp_serde::encode::write(b, value).is_ok()
}

/// Appends a dedupe bucket (see [`bucket`]); false when it has no ids (then nothing is written).
fn push_bucket(b: &mut Vec<u8>, ids: impl Iterator<Item = (u64, u128)>) -> bool {
    let ids = bucket(ids);
    !ids.is_empty() && push_json(b, &ids)
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

#[cfg(test)]
mod tests;
