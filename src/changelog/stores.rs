//! The kinds of state a unit's changelog holds, each declared once: its name in keys, the ids
//! that name one of its records, how its value is written from the state and how it is read
//! back. Keys, rendering, restoring and the key tests all work from the registration in this
//! file ([`Slot`]), so a new kind of state is one [`Store`] (in the file of its part: `votes`,
//! `judging`, `quality`, or `flush` for what a flush writes of itself) and one line here (and,
//! if the engine journals it, the change that names it, mapped to its slot in `render.rs`).
//!
//! Values are read back in any order (the latest per key, as compaction keeps them): what a
//! kind needs from another (a vote project's ids from its closed buckets, a ranking's blocks)
//! is gathered in [`Restored`] and joined when the restore finishes.

mod flush;
mod judging;
mod quality;
mod votes;

use std::fmt::Debug;
use std::hash::Hash;

use serde::Deserialize;
use serde::ser::SerializeSeq;
use serde_json::Value;

pub(super) use super::restored::Restored;
use super::*;
pub(super) use flush::*;
pub(super) use judging::*;
pub use quality::largest_item_bytes;
pub(super) use quality::*;
pub(super) use votes::*;

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
        serde_json::from_slice(self.value).map_err(|e| self.unreadable(e))
    }

    /// The value as `T`, written with `push_packed` (MessagePack), or as JSON by a version
    /// before that: a JSON array or object begins with `[` or `{`, which no MessagePack array
    /// or map does.
    pub fn packed<T: Deserialize<'v>>(&self) -> Result<T, ChangelogError> {
        if matches!(self.value.first(), Some(b'[' | b'{')) {
            return self.value();
        }
        rmp_serde::from_slice(self.value).map_err(|e| self.unreadable(e))
    }

    /// An error about this record's value, in whichever form it was read.
    fn unreadable(&self, source: impl Into<ValueError>) -> ChangelogError {
        ChangelogError::Value {
            key: self.key.to_owned(),
            source: source.into(),
        }
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
    /// A closed bucket of `VOTE_BUCKET` (16) ids of a vote project's dedupe window:
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
    /// A project's count of verdicts its reviewer model left out: `["p",3,"left-out","proj-42"]`.
    LeftOut: LeftOutStore,
    /// The record [`Slot::LeftOut`] replaced, which also counted the project's items and
    /// verdicts forgotten, `[forgotten, left_out, verdicts]`: `["p",3,"forgotten","proj-42"]`.
    /// Read (its count of verdicts left out), and deleted by the next flush.
    Forgotten: ForgottenStore,
    /// A reviewer's kept part (its findings), `{"findings":...}`:
    /// `["p",3,"reviewer","proj-42","u-7"]`. Its figures are fitted again from the items.
    Reviewer: ReviewerStore,
    /// Whether no judge score of a project was found to pair (its `judge_items_unmatched` or
    /// `judge_items_short_of_votes` alert said) and no pair has formed since, `true`:
    /// `["p",3,"unmatched","proj-42"]`.
    Unmatched: UnmatchedStore,
    /// The session book's creation counter: `["j",3,"book"]`.
    Book: BookStore,
    /// Chunk `n` of a flush's redo record: `["j",3,"redo","0"]`.
    Redo: RedoStore,
}
