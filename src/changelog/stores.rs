//! The kinds of state a unit's changelog holds, each declared once: its name in keys, the ids
//! that name one of its records, how its value is written from the state and how it is read
//! back. Keys, rendering, restoring and the key tests all work from the registration at the
//! end of this file ([`Slot`]), so a new kind of state is one [`Store`] and one line there
//! (and, if the engine journals it, the change that names it, mapped to its slot in
//! `render.rs`).
//!
//! Values are read back in any order (the latest per key, as compaction keeps them): what a
//! kind needs from another (a vote project's ids from its closed buckets, a ranking's blocks)
//! is gathered in [`Restored`] and joined when the restore finishes.

use std::fmt::Debug;
use std::hash::Hash;
use std::ops::Range;

use serde::ser::SerializeSeq;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::restore::Restored;
use super::*;

/// One kind of a unit's state in the changelog.
pub(super) trait Store {
    /// The kind's name in keys: `["p",3,KIND,...ids]`.
    const KIND: &'static str;
    /// What names one record of this kind, written as the key's elements after the kind.
    type Id<'a>: Ids<'a>;
    /// Appends the value of record `id` as the state holds it now; false for a tombstone (the
    /// state holds none).
    fn render(from: &Source<'_>, id: Self::Id<'_>, out: &mut Vec<u8>) -> bool;
    /// How its records written by a flush that a crash cut short are read back (see
    /// [`Recovery`]).
    fn recovery(_unit: Unit) -> Recovery {
        Recovery::Redone
    }
    /// Puts a value read back into the state being restored.
    fn restore(
        into: &mut Restored,
        id: Self::Id<'_>,
        read: &Read<'_>,
    ) -> Result<(), ChangelogError>;
}

/// How a kind's records survive a flush that a crash cut short: where in the flush they are
/// written and how a restore reads them. A flush writes its counted records first, then its
/// undone ones, then its redo record and the redone records (a unit without a redo record
/// writes them all in one go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recovery {
    /// Each record says which input it counts (a vote project's last applied offset), so
    /// input replayed after a restore is skipped by it and applied to the rest of the state.
    Counted,
    /// Each record carries the flush's offset and what the flush found: a restore to an
    /// earlier offset reads it as it was before the flush (item buckets, [`ItemBucket`]).
    Undone,
    /// Written inside the flush's redo record, then on their own: a restore applies the redo
    /// record if it is complete and ignores it if not.
    Redone,
}

/// What a record is rendered from: the unit and its state, the slot's last change in the flush
/// (a completed-window entry's sequence number is not kept in the state), and the flush's last
/// input offset (which offset records and item buckets carry), if it has one.
pub(super) struct Source<'s> {
    pub unit: Unit,
    pub state: &'s PartitionState,
    pub change: Option<&'s Change>,
    pub at: Option<i64>,
}

/// A record read back: its key (for errors) and value.
pub(super) struct Read<'v> {
    pub key: &'v str,
    pub value: &'v [u8],
}

impl<'v> Read<'v> {
    /// The value as `T`.
    pub fn value<T: Deserialize<'v>>(&self) -> Result<T, ChangelogError> {
        serde_json::from_slice(self.value).map_err(|source| ChangelogError::Value {
            key: self.key.to_owned(),
            source,
        })
    }

    /// An error about this record's key.
    pub fn bad(&self, reason: &str) -> ChangelogError {
        ChangelogError::Key {
            key: self.key.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

/// The ids of a record after its kind, as a key writes them: each a JSON string.
pub(super) trait Ids<'a>: Copy + Eq + Hash + Debug + Sized {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error>;
    fn read(parts: &'a [Value]) -> Result<Self, &'static str>;
}

/// One id of a key: a string (project, session, ...) or a number written as a string.
pub(super) trait IdPart<'a>: Copy + Eq + Hash + Debug + Sized {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error>;
    fn read(part: &'a str) -> Result<Self, &'static str>;
}

impl<'a> IdPart<'a> for &'a str {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
        seq.serialize_element(self)
    }
    fn read(part: &'a str) -> Result<Self, &'static str> {
        Ok(part)
    }
}

/// A bucket or place, in decimal.
impl<'a> IdPart<'a> for u64 {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
        seq.serialize_element(&self.to_string())
    }
    fn read(part: &'a str) -> Result<Self, &'static str> {
        part.parse().map_err(|_| "an index is not a number")
    }
}

/// A dedupe fingerprint, as [`Hex`].
impl<'a> IdPart<'a> for u128 {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
        seq.serialize_element(&Hex(self))
    }
    fn read(part: &'a str) -> Result<Self, &'static str> {
        u128::from_str_radix(part, 16).map_err(|_| "fingerprint is not hex")
    }
}

/// A Bradley-Terry resampling block, `day.slot`.
impl<'a> IdPart<'a> for BlockId {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
        seq.serialize_element(&self.to_string())
    }
    fn read(part: &'a str) -> Result<Self, &'static str> {
        part.parse().map_err(|()| "a bad block")
    }
}

/// The key's elements after the kind, each a string, exactly `N` of them.
fn strings<const N: usize>(parts: &[Value]) -> Result<[&str; N], &'static str> {
    let mut out = [""; N];
    if parts.len() != N {
        return Err("the wrong number of ids for its kind");
    }
    for (o, p) in out.iter_mut().zip(parts) {
        *o = p.as_str().ok_or("an id is not a string")?;
    }
    Ok(out)
}

impl<'a> Ids<'a> for () {
    fn write<S: SerializeSeq>(self, _: &mut S) -> Result<(), S::Error> {
        Ok(())
    }
    fn read(parts: &'a [Value]) -> Result<Self, &'static str> {
        strings::<0>(parts).map(|_| ())
    }
}

/// A single id, written as itself.
macro_rules! single_id {
    ($($t:ty),*) => {$(
        impl<'a> Ids<'a> for $t {
            fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
                IdPart::write(self, seq)
            }
            fn read(parts: &'a [Value]) -> Result<Self, &'static str> {
                let [a] = strings(parts)?;
                IdPart::read(a)
            }
        }
    )*};
}

single_id!(&'a str, u64);

impl<'a, A: IdPart<'a>, B: IdPart<'a>> Ids<'a> for (A, B) {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
        self.0.write(seq)?;
        self.1.write(seq)
    }
    fn read(parts: &'a [Value]) -> Result<Self, &'static str> {
        let [a, b] = strings(parts)?;
        Ok((A::read(a)?, B::read(b)?))
    }
}

impl<'a, A: IdPart<'a>, B: IdPart<'a>, C: IdPart<'a>> Ids<'a> for (A, B, C) {
    fn write<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
        self.0.write(seq)?;
        self.1.write(seq)?;
        self.2.write(seq)
    }
    fn read(parts: &'a [Value]) -> Result<Self, &'static str> {
        let [a, b, c] = strings(parts)?;
        Ok((A::read(a)?, B::read(b)?, C::read(c)?))
    }
}

/// Registers the kinds of state: `Variant: Store` makes `Slot::Variant(ids)` a record of that
/// store, and every piece of code that reads or writes records dispatches on it.
macro_rules! stores {
    ($($(#[$doc:meta])* $variant:ident: $store:ty,)*) => {
        /// The record of one piece of a unit's state: its kind (a registered [`Store`]) and
        /// the ids after it. It is the key without its unit (see [`Key`]).
        #[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
        pub(super) enum Slot<'a> {
            $($(#[$doc])* $variant(<$store as Store>::Id<'a>),)*
        }

        impl<'a> Slot<'a> {
            /// Every registered kind's name.
            #[cfg(test)]
            pub(super) const KINDS: &'static [&'static str] = &[$(<$store as Store>::KIND,)*];

            /// The kind's name in the key.
            pub(super) fn kind(self) -> &'static str {
                match self {
                    $(Slot::$variant(_) => <$store as Store>::KIND,)*
                }
            }

            /// Writes the ids after the kind.
            pub(super) fn write_ids<S: SerializeSeq>(self, seq: &mut S) -> Result<(), S::Error> {
                match self {
                    $(Slot::$variant(ids) => Ids::write(ids, seq),)*
                }
            }

            /// The slot named by a key's elements after its unit (`["project","proj-42"]`),
            /// or why they name none.
            pub(super) fn from_parts(parts: &'a [Value]) -> Result<Slot<'a>, &'static str> {
                let (kind, ids) = parts.split_first().ok_or("no kind of state")?;
                let kind = kind.as_str().unwrap_or_default();
                $(if kind == <$store as Store>::KIND {
                    return Ok(Slot::$variant(Ids::read(ids)?));
                })*
                Err("unknown kind of state")
            }

            /// Appends the slot's value (see [`Store::render`]).
            pub(super) fn render(self, from: &Source<'_>, out: &mut Vec<u8>) -> bool {
                match self {
                    $(Slot::$variant(ids) => <$store as Store>::render(from, ids, out),)*
                }
            }

            /// How a record of this slot survives a cut flush (see [`Store::recovery`]).
            pub(super) fn recovery(self, unit: Unit) -> Recovery {
                match self {
                    $(Slot::$variant(_) => <$store as Store>::recovery(unit),)*
                }
            }

            /// Puts a value read for this slot into the state being restored.
            pub(super) fn restore(
                self,
                into: &mut Restored,
                read: &Read<'_>,
            ) -> Result<(), ChangelogError> {
                match self {
                    $(Slot::$variant(ids) => <$store as Store>::restore(into, ids, read),)*
                }
            }
        }
    };
}

stores! {
    /// The last input offset the unit's state includes: `["v",3,"offset"]`.
    Offset: OffsetStore,
    /// The last offset processed from each input partition whose records reach the unit (see
    /// [`crate::engine::Origins`]), `[["v",0,41],["v",2,17]]`: written with every flush, after
    /// its state records (inside a judge-scores flush's redo record), so it never claims a
    /// record the restored state does not hold. `["v",3,"origins"]`.
    Origins: OriginsStore,
    /// A vote project: its score and its open dedupe bucket. `["v",3,"project","proj-42"]`.
    Project: ProjectStore,
    /// A closed bucket of `VOTE_BUCKET` ids of a vote project's dedupe window:
    /// `["v",3,"ids","proj-42","12"]`.
    Ids: IdsStore,
    /// A bucket of `SEEN_BUCKET` ballot ids of a judge-scores unit's project:
    /// `["j",3,"seen","proj-42","12"]`. (A votes or projects unit wrote its vote ids so before
    /// they had buckets of their own, [`Slot::Ids`]; a restore reads those and the next flush
    /// deletes them.)
    Seen: SeenStore,
    /// A bucket of a projects unit's window of ballot ids: `["p",3,"ballots","proj-42","12"]`.
    Ballots: BallotsStore,
    /// An open session: `["j",3,"session","proj-42","council-981"]`.
    Session: SessionStore,
    /// A completed session's id, by fingerprint: `["j",3,"completed","proj-42","<32 hex>"]`.
    Completed: CompletedStore,
    /// A project's bias roll-up: `["j",3,"audit","proj-42"]`.
    Audit: AuditStore,
    /// A completed session's kept `jury.consensus` record, `{"seq":N,"record":{...}}`:
    /// `["j",3,"consensus","proj-42","council-981"]`.
    Consensus: ConsensusStore,
    /// A leaderboard row: `["j",3,"board","proj-42","chat","gpt"]` (project, category, model).
    Board: BoardStore,
    /// A judge-scores project's watermark: `["j",3,"watermark","proj-42"]`.
    Watermark: WatermarkStore,
    /// A category's Bradley-Terry models and last fit: `["j",3,"ranking","proj-42","chat"]`.
    Ranking: RankingStore,
    /// One of a category's Bradley-Terry resampling blocks, by day and slot:
    /// `["j",3,"block","proj-42","chat","20417.3"]`.
    Block: BlockStore,
    /// A bucket of `ITEM_BUCKET` places of the task's items with votes, whatever their
    /// projects, `["p",3,"items","6"]` (see [`ItemBucket`]). One record per bucket and flush,
    /// not per item: with a new item per vote, per-item records were most of the changelog;
    /// and places of the task, not of each project, so that a flush's new items fill buckets
    /// rather than rewrite one per project.
    Items: ItemsStore,
    /// The places of the items the flush forgot, whose buckets the next flush rewrites
    /// (`[[first,last],...]`): `["p",3,"items-forgotten"]`. Inside the redo record, so that a
    /// restore drops the items of the flush it restores that are still in their buckets.
    ItemsForgotten: ItemsForgottenStore,
    /// A bucket of places of the task's items with judge scores waiting for votes,
    /// `[[seq,"proj-42","trace-100",[...]],...]`: `["p",3,"waits","6"]`.
    Waits: WaitsStore,
    /// A judge's window of pairs, `{"seq":N,"value":{...}}`: `["j",3,"judge","proj-42","gpt"]`.
    Judge: JudgeStore,
    /// One of a project's last candidates' judge scores, by its place:
    /// `["j",3,"recent","proj-42","17"]`.
    Recent: RecentStore,
    /// A project's count of judge-quality items forgotten: `["j",3,"forgotten","proj-42"]`.
    Forgotten: ForgottenStore,
    /// A reviewer's kept part (its findings), `{"findings":...}`:
    /// `["p",3,"reviewer","proj-42","u-7"]`. Its figures are fitted again from the items.
    Reviewer: ReviewerStore,
    /// The session book's creation counter: `["j",3,"book"]`.
    Book: BookStore,
    /// Chunk `n` of a flush's redo record: `["j",3,"redo","0"]`.
    Redo: RedoStore,
}

/// See [`Slot::Offset`].
pub(super) struct OffsetStore;

/// The value of an offset record, `{"offset":N}`.
#[derive(Serialize, Deserialize)]
pub(super) struct OffsetValue {
    pub offset: i64,
}

impl Store for OffsetStore {
    const KIND: &'static str = "offset";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        from.at
            .is_some_and(|offset| push_json(out, &OffsetValue { offset }))
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        // An unreadable offset is no offset: the unit replays from its start.
        into.offset = read.value::<OffsetValue>().ok().map(|v| v.offset);
        Ok(())
    }
}

/// See [`Slot::Origins`].
pub(super) struct OriginsStore;

impl Store for OriginsStore {
    const KIND: &'static str = "origins";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        let origins = &from.state.origins;
        let entries: Vec<(&str, i32, i64)> = origins
            .entries()
            .into_iter()
            .map(|(t, p, o)| (super::tag(t), p, o))
            .collect();
        !entries.is_empty() && push_json(out, &entries)
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        let entries: Vec<(String, i32, i64)> = read.value()?;
        let mut all = Vec::with_capacity(entries.len());
        for (tag, partition, offset) in entries {
            let topic = super::topic_of(&tag)
                .ok_or_else(|| read.bad(&format!("origin topic {tag:?} is no input")))?;
            all.push((topic, partition, offset));
        }
        into.state.origins = Origins::restore(all);
        Ok(())
    }
}

/// See [`Slot::Project`].
pub(super) struct ProjectStore;

/// A vote project's record, `{"score":{...},"seen":[[seq,"fingerprints"],...],"offset":N}`:
/// its score, the ids of its open dedupe bucket (in runs, [`IdRun`]; read back as strings)
/// and the offset of its last applied batch (when known).
#[derive(Serialize, Deserialize)]
struct ProjectRecord<Ids> {
    score: ProjectScore,
    seen: Vec<Ids>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
}

/// The bucket of a window's newest id: a vote project's open bucket, carried in its record.
pub(super) fn bucket_of_newest(window: &RecentIds) -> Option<u64> {
    window.newest_seq().map(|s| s / VOTE_BUCKET)
}

/// The ids of a vote project's dedupe bucket `bucket`.
fn vote_ids(bucket: u64) -> Range<u64> {
    bucket * VOTE_BUCKET..(bucket + 1) * VOTE_BUCKET
}

/// The ids of a ballot dedupe bucket `bucket`.
fn seen_ids(bucket: u64) -> Range<u64> {
    bucket * SEEN_BUCKET..(bucket + 1) * SEEN_BUCKET
}

impl Store for ProjectStore {
    const KIND: &'static str = "project";
    type Id<'a> = &'a str;
    fn recovery(_: Unit) -> Recovery {
        Recovery::Counted
    }
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let Some(project) = from.state.votes(project) else {
            return false;
        };
        let open = vote_ids(bucket_of_newest(&project.seen).unwrap_or(0));
        let record = ProjectRecord {
            score: project.score.clone(),
            seen: bucket(project.seen.range(open.start, open.end)),
            offset: project.applied_through,
        };
        push_json(out, &record)
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        let record: ProjectRecord<(u64, String)> = read.value()?;
        let entries = into.seen.entry(project.to_owned()).or_default();
        let before = entries.len();
        push_ids(entries, record.seen).map_err(|r| read.bad(r))?;
        if let Some(newest) = entries[before..].iter().map(|(s, _)| *s).max() {
            into.counted.insert(project.to_owned(), newest);
        }
        let mut restored = VoteProject::new(record.score);
        restored.applied_through = record.offset;
        into.state.project(project).votes = Some(restored);
        Ok(())
    }
}

/// Appends a bucket's ids, read as written (runs, see [`IdRun`]), to `entries`.
fn push_ids(entries: &mut Vec<(u64, u128)>, runs: Vec<(u64, String)>) -> Result<(), &'static str> {
    for (first, hex) in runs {
        for id in IdRun::ids(first, &hex) {
            entries.push(id?);
        }
    }
    Ok(())
}

/// See [`Slot::Ids`]. Buckets are rewritten whole when they change and deleted once every id
/// in them was forgotten.
pub(super) struct IdsStore;

impl Store for IdsStore {
    const KIND: &'static str = "ids";
    type Id<'a> = (&'a str, u64);
    /// A vote project's closed buckets go with its record.
    fn recovery(_: Unit) -> Recovery {
        Recovery::Counted
    }
    fn render(from: &Source<'_>, (project, bucket): (&str, u64), out: &mut Vec<u8>) -> bool {
        let window = from.state.votes(project).map(|p| &p.seen);
        let ids = vote_ids(bucket);
        window.is_some_and(|w| push_bucket(out, w.range(ids.start, ids.end)))
    }
    fn restore(
        into: &mut Restored,
        (project, _): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let entries = into.seen.entry(project.to_owned()).or_default();
        push_ids(entries, read.value()?).map_err(|r| read.bad(r))
    }
}

/// See [`Slot::Seen`].
pub(super) struct SeenStore;

impl Store for SeenStore {
    const KIND: &'static str = "seen";
    type Id<'a> = (&'a str, u64);
    /// A judge-scores unit's ballot ids go with the rest of its state; a bucket of vote ids of
    /// the layout before is deleted with the vote projects' records (see [`IdsStore`]).
    fn recovery(unit: Unit) -> Recovery {
        if unit.holds_votes() {
            Recovery::Counted
        } else {
            Recovery::Redone
        }
    }
    /// Of a votes or projects unit, a bucket of the layout before: always deleted.
    fn render(from: &Source<'_>, (project, bucket): (&str, u64), out: &mut Vec<u8>) -> bool {
        if from.unit.holds_votes() {
            return false;
        }
        let window = from.state.judges(project).map(|p| &p.seen);
        let ids = seen_ids(bucket);
        window.is_some_and(|w| push_bucket(out, w.range(ids.start, ids.end)))
    }
    fn restore(
        into: &mut Restored,
        (project, bucket): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let windows = if into.unit.holds_votes() {
            into.retired.push((project.to_owned(), bucket));
            &mut into.seen
        } else {
            &mut into.ballots
        };
        let entries = windows.entry(project.to_owned()).or_default();
        push_ids(entries, read.value()?).map_err(|r| read.bad(r))
    }
}

/// See [`Slot::Ballots`].
pub(super) struct BallotsStore;

impl Store for BallotsStore {
    const KIND: &'static str = "ballots";
    type Id<'a> = (&'a str, u64);
    fn render(from: &Source<'_>, (project, bucket): (&str, u64), out: &mut Vec<u8>) -> bool {
        let ids = seen_ids(bucket);
        let window = from.state.judges(project).map(|p| &p.seen);
        window.is_some_and(|w| push_bucket(out, w.range(ids.start, ids.end)))
    }
    fn restore(
        into: &mut Restored,
        (project, _): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let entries = into.ballots.entry(project.to_owned()).or_default();
        push_ids(entries, read.value()?).map_err(|r| read.bad(r))
    }
}

/// See [`Slot::Session`].
pub(super) struct SessionStore;

impl Store for SessionStore {
    const KIND: &'static str = "session";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, session): (&str, &str), out: &mut Vec<u8>) -> bool {
        let project = from.state.projects.get(project);
        let open = project.and_then(|p| p.sessions.open.get(session));
        open.is_some_and(|s| push_json(out, s))
    }
    fn restore(
        into: &mut Restored,
        (project, session): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let open = &mut into.state.project(project).sessions.open;
        open.insert(session.to_owned(), read.value::<Session>()?);
        Ok(())
    }
}

/// See [`Slot::Completed`].
pub(super) struct CompletedStore;

/// A completed session's place in its project's window, `{"seq":N}`.
#[derive(Serialize, Deserialize)]
struct Seq {
    seq: u64,
}

impl Store for CompletedStore {
    const KIND: &'static str = "completed";
    type Id<'a> = (&'a str, u128);
    fn render(from: &Source<'_>, _: (&str, u128), out: &mut Vec<u8>) -> bool {
        match from.change {
            Some(Change::Completed { seq, .. }) => push_json(out, &Seq { seq: *seq }),
            _ => false,
        }
    }
    fn restore(
        into: &mut Restored,
        (project, fingerprint): (&str, u128),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let Seq { seq } = read.value()?;
        let window = into.completed.entry(project.to_owned()).or_default();
        window.push((seq, fingerprint));
        Ok(())
    }
}

/// See [`Slot::Audit`].
pub(super) struct AuditStore;

impl Store for AuditStore {
    const KIND: &'static str = "audit";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let audit = from.state.judges(project).map(|p| &p.audit);
        audit.is_some_and(|a| push_json(out, a))
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        into.state.judges_mut(project).audit = read.value::<ProjectAudit>()?;
        Ok(())
    }
}

/// See [`Slot::Consensus`].
pub(super) struct ConsensusStore;

/// The value of a kept consensus record: the record as it was published.
#[derive(Serialize, Deserialize)]
struct KeptValue<'a> {
    seq: u64,
    #[serde(borrow)]
    record: &'a RawValue,
}

impl Store for ConsensusStore {
    const KIND: &'static str = "consensus";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, session): (&str, &str), out: &mut Vec<u8>) -> bool {
        let kept = from.state.judges(project).and_then(|p| p.kept.get(session));
        kept.is_some_and(|k| {
            let record = serde_json::from_str::<&RawValue>(&k.record);
            record.is_ok_and(|record| push_json(out, &KeptValue { seq: k.seq, record }))
        })
    }
    fn restore(
        into: &mut Restored,
        (project, session): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let kept: KeptValue<'_> = read.value()?;
        into.state.judges_mut(project).kept.restore(Kept {
            seq: kept.seq,
            session: session.to_owned(),
            record: kept.record.get().into(),
        });
        Ok(())
    }
}

/// See [`Slot::Board`].
pub(super) struct BoardStore;

impl Store for BoardStore {
    const KIND: &'static str = "board";
    type Id<'a> = (&'a str, &'a str, &'a str);
    fn render(
        from: &Source<'_>,
        (p, category, model): (&str, &str, &str),
        out: &mut Vec<u8>,
    ) -> bool {
        let row = from
            .state
            .judges(p)
            .and_then(|p| p.board.rows.get(&(category.to_owned(), model.to_owned())));
        row.is_some_and(|r| push_json(out, r))
    }
    fn restore(
        into: &mut Restored,
        (project, category, model): (&str, &str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let row: StoredRow = read.value()?;
        let key = (category.to_owned(), model.to_owned());
        let board = &mut into.state.judges_mut(project).board;
        board.rows.insert(key, row.into_row());
        Ok(())
    }
}

/// See [`Slot::Watermark`].
pub(super) struct WatermarkStore;

/// A project's watermark record.
#[derive(Serialize, Deserialize)]
struct WatermarkValue {
    watermark: EventTime,
}

impl Store for WatermarkStore {
    const KIND: &'static str = "watermark";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let project = from.state.projects.get(project);
        let watermark = project.and_then(|p| p.sessions.watermark);
        watermark.is_some_and(|watermark| push_json(out, &WatermarkValue { watermark }))
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        let WatermarkValue { watermark } = read.value()?;
        into.state.project(project).sessions.watermark = Some(watermark);
        Ok(())
    }
}

/// A category's Bradley-Terry material, created empty if new.
fn ranking<'r>(into: &'r mut Restored, project: &str, category: &str) -> &'r mut Ranking {
    let ranked = &mut into.state.judges_mut(project).board.ranked;
    ranked.entry(category.to_owned()).or_default()
}

/// See [`Slot::Ranking`].
pub(super) struct RankingStore;

impl Store for RankingStore {
    const KIND: &'static str = "ranking";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, category): (&str, &str), out: &mut Vec<u8>) -> bool {
        let ranking = from
            .state
            .judges(project)
            .and_then(|p| p.board.ranked.get(category));
        ranking.is_some_and(|r| push_json(out, r))
    }
    fn restore(
        into: &mut Restored,
        (project, category): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let read: Ranking = read.value()?;
        let ranking = ranking(into, project, category);
        // Its blocks are records of their own, read before or after it.
        let blocks = std::mem::take(&mut ranking.blocks);
        *ranking = Ranking { blocks, ..read };
        Ok(())
    }
}

/// See [`Slot::Block`].
pub(super) struct BlockStore;

impl Store for BlockStore {
    const KIND: &'static str = "block";
    type Id<'a> = (&'a str, &'a str, BlockId);
    fn render(
        from: &Source<'_>,
        (p, category, block): (&str, &str, BlockId),
        out: &mut Vec<u8>,
    ) -> bool {
        let pairs = from
            .state
            .judges(p)
            .and_then(|p| p.board.ranked.get(category))
            .and_then(|r| r.blocks.get(&block));
        pairs.is_some_and(|p| push_json(out, p))
    }
    fn restore(
        into: &mut Restored,
        (project, category, block): (&str, &str, BlockId),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let pairs = read.value()?;
        ranking(into, project, category).blocks.insert(block, pairs);
        Ok(())
    }
}

/// The item places of judge-quality bucket `bucket` (see [`ITEM_BUCKET`]).
pub(super) fn places(bucket: u64) -> Range<u64> {
    bucket * ITEM_BUCKET..(bucket + 1) * ITEM_BUCKET
}

/// See [`Slot::Items`].
pub(super) struct ItemsStore;

/// A bucket of a task's items with votes ([`Slot::Items`]), `{"at":O,"from":F,"items":[[n,
/// project,item,votes],...],"before":[...]}`, each item at place `n` from the bucket's first
/// (written as the place itself before: the two read alike, see [`ItemsStore`]'s restore). It is written before the flush's redo record,
/// not inside it, so once (see the module doc): `at` is the flush's last input offset (`null`
/// from a flush that has none), `from` the first place the flush took and `before` the items
/// it changed or forgot that it found, as it found them. A restore to an offset below `at`
/// reads the bucket as the flush found it: without the items at `from` or after, with those of
/// `before`. (A changelog written before this held the items alone, `[[seq,...],...]`, in
/// buckets its redo records kept whole.)
#[derive(Serialize, Deserialize)]
pub(super) struct ItemBucket<S, V> {
    at: Option<i64>,
    from: u64,
    items: Vec<(u64, S, S, V)>,
    #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
    before: Vec<(u64, S, S, V)>,
}

/// An item as read: its place, project, id and votes.
type StoredItem = (u64, String, String, ItemVotes);

/// An item bucket as read: as written now, or before it carried its flush.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredItems {
    Bucket(ItemBucket<String, ItemVotes>),
    Items(Vec<StoredItem>),
}

impl Store for ItemsStore {
    const KIND: &'static str = "items";
    type Id<'a> = u64;
    fn recovery(_: Unit) -> Recovery {
        Recovery::Undone
    }
    fn render(from: &Source<'_>, bucket: u64, out: &mut Vec<u8>) -> bool {
        let quality = &from.state.quality;
        let first = bucket * ITEM_BUCKET;
        let items: Vec<_> = quality
            .items_at(&from.state.projects, places(bucket))
            .map(|(seq, p, i, v)| (seq - first, p, i, v))
            .collect();
        let undo = quality.undo();
        // What the flush found is needed only if a restore can stop before it.
        let before: Vec<_> = undo
            .filter(|_| from.at.is_some())
            .map(|u| {
                let found = u.before.range(places(bucket));
                found
                    .map(|(&seq, (p, i, v))| (seq - first, p.as_str(), i.as_str(), v))
                    .collect()
            })
            .unwrap_or_default();
        let bucket = ItemBucket {
            at: from.at,
            from: undo.map_or(0, |u| u.from),
            items,
            before,
        };
        !(bucket.items.is_empty() && bucket.before.is_empty()) && push_json(out, &bucket)
    }
    fn restore(into: &mut Restored, bucket: u64, read: &Read<'_>) -> Result<(), ChangelogError> {
        // Places are written from the bucket's first (before, whole: those read the same in
        // bucket 0, and are at least `ITEM_BUCKET` in any other).
        let placed = |items: Vec<StoredItem>| -> Vec<StoredItem> {
            let place = |seq: u64| {
                if seq < ITEM_BUCKET {
                    bucket * ITEM_BUCKET + seq
                } else {
                    seq
                }
            };
            let placed = items
                .into_iter()
                .map(|(seq, p, i, v)| (place(seq), p, i, v));
            placed.collect()
        };
        let items = match read.value()? {
            StoredItems::Items(items) => placed(items),
            StoredItems::Bucket(b) if b.at.is_some_and(|at| into.through < Some(at)) => {
                // Written by a flush cut short: as that flush found it, and written again by
                // the next.
                into.rerender.push(bucket * ITEM_BUCKET);
                let mut items = placed(b.items);
                items.retain(|(seq, ..)| *seq < b.from);
                for found in placed(b.before) {
                    items.retain(|(seq, ..)| *seq != found.0);
                    items.push(found);
                }
                items
            }
            StoredItems::Bucket(b) => placed(b.items),
        };
        let state = &mut into.state;
        for (seq, project, item, votes) in items {
            let projects = &mut state.projects;
            state
                .quality
                .restore_item(projects, (&project, &item), seq, votes);
        }
        Ok(())
    }
}

/// See [`Slot::ItemsForgotten`].
pub(super) struct ItemsForgottenStore;

/// The places of the items a flush forgot as written: runs of consecutive places,
/// `[[first,last],...]`. A task forgets its oldest items first, so a flush's places are one
/// run or few. Read in that form or as the places one by one (`[seq,...]`, written before).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum StoredPlaces {
    Runs(Vec<(u64, u64)>),
    Places(Vec<u64>),
}

impl StoredPlaces {
    /// The places, in the order written.
    pub(super) fn places(self) -> Vec<u64> {
        match self {
            StoredPlaces::Runs(runs) => runs.into_iter().flat_map(|(a, b)| a..=b).collect(),
            StoredPlaces::Places(places) => places,
        }
    }
}

/// `places` as runs of consecutive places, in their order (see [`StoredPlaces`]).
pub(super) fn place_runs(places: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &seq in places {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(seq) => *last = seq,
            _ => runs.push((seq, seq)),
        }
    }
    runs
}

impl Store for ItemsForgottenStore {
    const KIND: &'static str = "items-forgotten";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        let undo = from.state.quality.undo();
        let forgotten = undo.map(|u| &u.forgotten).filter(|f| !f.is_empty());
        forgotten.is_some_and(|f| push_json(out, &place_runs(f)))
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        into.items_forgotten = read.value::<StoredPlaces>()?.places();
        Ok(())
    }
}

/// See [`Slot::Waits`].
pub(super) struct WaitsStore;

impl Store for WaitsStore {
    const KIND: &'static str = "waits";
    type Id<'a> = u64;
    fn render(from: &Source<'_>, bucket: u64, out: &mut Vec<u8>) -> bool {
        let quality = &from.state.quality;
        let waits: Vec<_> = quality
            .waits_at(&from.state.projects, places(bucket))
            .collect();
        !waits.is_empty() && push_json(out, &waits)
    }
    fn restore(into: &mut Restored, _: u64, read: &Read<'_>) -> Result<(), ChangelogError> {
        let waits: Vec<(u64, String, String, Vec<Waiting>)> = read.value()?;
        let state = &mut into.state;
        for (seq, project, item, waiting) in waits {
            let projects = &mut state.projects;
            state
                .quality
                .restore_waiting(projects, (&project, &item), seq, waiting);
        }
        Ok(())
    }
}

/// See [`Slot::Judge`].
pub(super) struct JudgeStore;

/// A judge-quality value with its place in its project's order of arrival (see
/// [`crate::engine::model::judge_quality::Bounded`]).
#[derive(Serialize, Deserialize)]
struct Placed<T> {
    seq: u64,
    value: T,
}

impl Store for JudgeStore {
    const KIND: &'static str = "judge";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, judge): (&str, &str), out: &mut Vec<u8>) -> bool {
        let window = from
            .state
            .quality(project)
            .and_then(|q| q.judges.get_with_seq(judge));
        window.is_some_and(|(seq, value)| push_json(out, &Placed { seq, value }))
    }
    fn restore(
        into: &mut Restored,
        (project, judge): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let Placed { seq, value } = read.value()?;
        into.quality(project).judges.insert(judge, seq, value);
        Ok(())
    }
}

/// See [`Slot::Recent`].
pub(super) struct RecentStore;

impl Store for RecentStore {
    const KIND: &'static str = "recent";
    type Id<'a> = (&'a str, u64);
    fn render(from: &Source<'_>, (project, seq): (&str, u64), out: &mut Vec<u8>) -> bool {
        let scores = from.state.quality(project).and_then(|q| q.recent.get(&seq));
        scores.is_some_and(|s| push_json(out, s))
    }
    fn restore(
        into: &mut Restored,
        (project, seq): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let scores = read.value()?;
        into.quality(project).recent.insert(seq, scores);
        Ok(())
    }
}

/// See [`Slot::Forgotten`].
pub(super) struct ForgottenStore;

/// A project's count of judge-quality items forgotten, and of verdicts its reviewer model left
/// out: written `[forgotten, left_out, verdicts]` (nearly every project's changes with every
/// flush while the task's items turn over), read in that form or as the object written before.
#[derive(Deserialize)]
pub(super) struct ForgottenValue {
    pub forgotten: u64,
    #[serde(default)]
    pub left_out: u64,
    /// Verdicts forgotten with their items: with the held ones, the verdicts ever admitted,
    /// which the reviewer model's checkpoints follow.
    #[serde(default)]
    pub verdicts: u64,
}

impl Serialize for ForgottenValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.forgotten, self.left_out, self.verdicts).serialize(s)
    }
}

impl Store for ForgottenStore {
    const KIND: &'static str = "forgotten";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        from.state.quality(project).is_some_and(|q| {
            let value = ForgottenValue {
                forgotten: q.forgotten,
                left_out: q.reviewers.left_out,
                verdicts: q.reviewers.forgotten_verdicts,
            };
            push_json(out, &value)
        })
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        let value: ForgottenValue = read.value()?;
        let q = into.quality(project);
        q.forgotten = value.forgotten;
        q.reviewers.left_out = value.left_out;
        q.reviewers.forgotten_verdicts = value.verdicts;
        Ok(())
    }
}

/// See [`Slot::Reviewer`].
pub(super) struct ReviewerStore;

impl Store for ReviewerStore {
    const KIND: &'static str = "reviewer";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, reviewer): (&str, &str), out: &mut Vec<u8>) -> bool {
        let findings = from
            .state
            .quality(project)
            .filter(|q| q.reviewers.holds(reviewer))
            .map(|q| q.reviewers.findings(reviewer))
            .filter(Findings::any);
        findings.is_some_and(|findings| push_json(out, &ReviewerKept { findings }))
    }
    fn restore(
        into: &mut Restored,
        (project, reviewer): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let kept = read.value()?;
        into.quality(project).reviewers.restore(reviewer, kept);
        Ok(())
    }
}

/// See [`Slot::Book`].
pub(super) struct BookStore;

/// The session book's record. (A changelog written before watermarks were per project also
/// holds the partition's `watermark` here, which restore ignores: the projects' own start with
/// their next event.)
#[derive(Serialize, Deserialize)]
struct BookMeta {
    next_seq: u64,
}

impl Store for BookStore {
    const KIND: &'static str = "book";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        let next_seq = from.state.sessions.next_seq();
        push_json(out, &BookMeta { next_seq })
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        into.next_seq = read.value::<BookMeta>()?.next_seq;
        Ok(())
    }
}

/// See [`Slot::Redo`]. Its chunks are written by the renderer around a flush's other records
/// and taken out of what a restore read before the rest is restored (see the module doc), so
/// nothing renders or restores one as a piece of state.
pub(super) struct RedoStore;

impl Store for RedoStore {
    const KIND: &'static str = "redo";
    type Id<'a> = u64;
    fn render(_: &Source<'_>, _: u64, _: &mut Vec<u8>) -> bool {
        false
    }
    fn restore(_: &mut Restored, _: u64, _: &Read<'_>) -> Result<(), ChangelogError> {
        // What is left of a redo record when the rest is restored is a cut one.
        Ok(())
    }
}
