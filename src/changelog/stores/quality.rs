//! Judge quality and reviewer reliability: the task's item and waiting buckets, judges'
//! windows of pairs, recent scores, and the counts and findings kept per project.

use serde::{Deserialize, Serialize};

use super::*;
use crate::engine::model::judge_quality::bucket_places;

/// See [`Slot::Items`].
pub(in crate::changelog) struct ItemsStore;

/// A bucket of a task's items with votes ([`Slot::Items`]), written in MessagePack
/// (`push_packed`) as the array `[at, from, [[n, project, item, votes], ...], [before...]]`
/// (the JSON of a version before: `{"at":O,"from":F,"items":[...],"before":[...]}`, read
/// alike), each item at place `n` from the bucket's first (written as the place itself before:
/// the two read alike, see [`ItemsStore`]'s restore). It is written before the flush's redo
/// record, not inside it, so once (see the module doc): `at` is the flush's last input offset
/// (nil from a flush that has none), `from` the first place the flush took and `before` the
/// items it changed or forgot that it found, as it found them (left out when none). A restore
/// to an offset below `at` reads the bucket as the flush found it: without the items at `from`
/// or after, with those of `before`. (A changelog written before this held the items alone,
/// `[[seq,...],...]`, in buckets its redo records kept whole.)
#[derive(Serialize, Deserialize)]
pub(in crate::changelog) struct ItemBucket<S, V> {
    at: Option<i64>,
    from: u64,
    items: Vec<(u64, S, S, V)>,
    #[serde(default = "Vec::new", skip_serializing_if = "Vec::is_empty")]
    before: Vec<(u64, S, S, V)>,
}

/// The most bytes an item with votes can take in its bucket (`ItemBucket`, MessagePack)
/// when ids are at most `max_id_bytes` and an item keeps at most `max_verdicts` verdicts:
/// `[n, project, item, [weighted, weight, votes, ready_at, [[verdict...], judged]]]`, each
/// verdict `[reviewer, pass, weight, at]`. Counted generously (an integer as 9 bytes, a
/// string's or array's head as 5, a time as `[secs, nanos]`): an item of the longest ids and
/// the most verdicts takes a little less.
pub fn largest_item_bytes(max_id_bytes: usize, max_verdicts: usize) -> usize {
    const HEAD: usize = 5;
    const NUMBER: usize = 9;
    const TIME: usize = 1 + 2 * NUMBER;
    let id = HEAD + max_id_bytes;
    let verdict = 1 + id + 1 + NUMBER + TIME;
    let review = 1 + HEAD + max_verdicts.saturating_mul(verdict) + (1 + 2 * NUMBER);
    let votes = 1 + 3 * NUMBER + TIME + review;
    (1 + NUMBER + 2 * id).saturating_add(votes)
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
            .items_at(bucket_places(bucket))
            .map(|(seq, p, i, v)| (seq - first, p, i, v))
            .collect();
        let undo = quality.undo();
        // What the flush found is needed only if a restore can stop before it.
        let before: Vec<_> = undo
            .filter(|_| from.at.is_some())
            .map(|u| {
                let found = u.found(bucket_places(bucket)).into_iter();
                found
                    .map(|(seq, (p, i, v))| (seq - first, p.as_str(), i.as_str(), v))
                    .collect()
            })
            .unwrap_or_default();
        let bucket = ItemBucket {
            at: from.at,
            from: undo.map_or(0, |u| u.from),
            items,
            before,
        };
        !(bucket.items.is_empty() && bucket.before.is_empty()) && push_packed(out, &bucket)
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
        let items = match read.packed()? {
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
        into.items.extend(items);
        Ok(())
    }
}

/// See [`Slot::ItemsForgotten`].
pub(in crate::changelog) struct ItemsForgottenStore;

/// The places of the items a flush forgot as written: runs of consecutive places,
/// `[[first,last],...]`. A task forgets its oldest items first, so a flush's places are one
/// run or few. Read in that form or as the places one by one (`[seq,...]`, written before).
#[derive(Deserialize)]
#[serde(untagged)]
pub(in crate::changelog) enum StoredPlaces {
    Runs(Vec<(u64, u64)>),
    Places(Vec<u64>),
}

impl StoredPlaces {
    /// The places, in the order written.
    pub(in crate::changelog) fn places(self) -> Vec<u64> {
        match self {
            StoredPlaces::Runs(runs) => runs.into_iter().flat_map(|(a, b)| a..=b).collect(),
            StoredPlaces::Places(places) => places,
        }
    }
}

/// `places` as runs of consecutive places, in their order (see [`StoredPlaces`]).
pub(in crate::changelog) fn place_runs(places: &[u64]) -> Vec<(u64, u64)> {
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
pub(in crate::changelog) struct WaitsStore;

impl Store for WaitsStore {
    const KIND: &'static str = "waits";
    type Id<'a> = u64;
    fn render(from: &Source<'_>, bucket: u64, out: &mut Vec<u8>) -> bool {
        let quality = &from.state.quality;
        let waits: Vec<_> = quality
            .waits_at(&from.state.projects, bucket_places(bucket))
            .collect();
        !waits.is_empty() && push_json(out, &waits)
    }
    fn restore(into: &mut Restored, _: u64, read: &Read<'_>) -> Result<(), ChangelogError> {
        let waits: Vec<(u64, String, String, Vec<Waiting>)> = read.value()?;
        into.waits.extend(waits);
        Ok(())
    }
}

/// See [`Slot::Judge`].
pub(in crate::changelog) struct JudgeStore;

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
pub(in crate::changelog) struct RecentStore;

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

/// See [`Slot::LeftOut`].
pub(in crate::changelog) struct LeftOutStore;

impl Store for LeftOutStore {
    const KIND: &'static str = "left-out";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let left_out = from.state.quality(project).map(|q| q.reviewers.left_out);
        left_out.is_some_and(|n| n > 0 && push_json(out, &n))
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        let left_out: u64 = read.value()?;
        let q = into.quality(project);
        q.reviewers.left_out = q.reviewers.left_out.max(left_out);
        Ok(())
    }
}

/// See [`Slot::Unmatched`].
pub(in crate::changelog) struct UnmatchedStore;

impl Store for UnmatchedStore {
    const KIND: &'static str = "unmatched";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let unmatched = from.state.quality(project).is_some_and(|q| q.unmatched);
        unmatched && push_json(out, &true)
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        into.quality(project).unmatched = read.value()?;
        Ok(())
    }
}

/// See [`Slot::Forgotten`].
pub(in crate::changelog) struct ForgottenStore;

/// A project's record before [`Slot::LeftOut`]: `[forgotten, left_out, verdicts]`, or the
/// object written before that. Only its count of verdicts left out is still state.
#[derive(Deserialize)]
struct ForgottenValue {
    #[serde(default)]
    left_out: u64,
}

/// A [`ForgottenValue`] as written: `[forgotten, left_out, verdicts]` or an object.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredForgotten {
    Counts(serde::de::IgnoredAny, u64, serde::de::IgnoredAny),
    Object(ForgottenValue),
}

impl Store for ForgottenStore {
    const KIND: &'static str = "forgotten";
    type Id<'a> = &'a str;
    /// Never written again: a restore that reads one deletes it.
    fn render(_: &Source<'_>, _: &str, _: &mut Vec<u8>) -> bool {
        false
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        let left_out = match read.value()? {
            StoredForgotten::Counts(_, left_out, _) => left_out,
            StoredForgotten::Object(value) => value.left_out,
        };
        let q = into.quality(project);
        // The larger of it and the record that replaced it, if both are read (a restore read
        // this one, and the flush that deleted it was cut short): a count only grows.
        q.reviewers.left_out = q.reviewers.left_out.max(left_out);
        into.retired_forgotten.push(ProjectKey::from(project));
        Ok(())
    }
}

/// See [`Slot::Reviewer`].
pub(in crate::changelog) struct ReviewerStore;

impl Store for ReviewerStore {
    const KIND: &'static str = "reviewer";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, reviewer): (&str, &str), out: &mut Vec<u8>) -> bool {
        let findings = from
            .state
            .quality(project)
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
