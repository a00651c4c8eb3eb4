//! Vote projects: their score records and the buckets of their dedupe windows, and the
//! ballot ids' buckets.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::*;

/// See [`Slot::Project`].
pub(in crate::changelog) struct ProjectStore;

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
pub(in crate::changelog) fn bucket_of_newest(window: &RecentIds) -> Option<u64> {
    window.newest_seq().map(|s| s / VOTE_BUCKET)
}

/// The ids of dedupe bucket `bucket`, buckets holding `size` ids.
fn bucket_ids(bucket: u64, size: u64) -> Range<u64> {
    bucket * size..(bucket + 1) * size
}

/// Appends the ids of `window` in `ids` as a bucket is written (see [`push_bucket`]); false (a
/// tombstone) when the window is gone or holds none of them.
fn push_window(out: &mut Vec<u8>, window: Option<&RecentIds>, ids: Range<u64>) -> bool {
    window.is_some_and(|w| push_bucket(out, w.range(ids.start, ids.end)))
}

/// Adds the ids of a bucket read back to `project`'s in `windows`.
fn read_bucket(
    windows: &mut IdMap<String, Vec<(u64, u128)>>,
    project: &str,
    read: &Read<'_>,
) -> Result<(), ChangelogError> {
    let entries = windows.entry(project.to_owned()).or_default();
    push_ids(entries, read.value()?).map_err(|r| read.bad(r))
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
        let open = bucket_ids(bucket_of_newest(&project.seen).unwrap_or(0), VOTE_BUCKET);
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
pub(in crate::changelog) struct IdsStore;

impl Store for IdsStore {
    const KIND: &'static str = "ids";
    type Id<'a> = (&'a str, u64);
    /// A vote project's closed buckets go with its record.
    fn recovery(_: Unit) -> Recovery {
        Recovery::Counted
    }
    fn render(from: &Source<'_>, (project, bucket): (&str, u64), out: &mut Vec<u8>) -> bool {
        let window = from.state.votes(project).map(|p| &p.seen);
        push_window(out, window, bucket_ids(bucket, VOTE_BUCKET))
    }
    fn restore(
        into: &mut Restored,
        (project, _): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        read_bucket(&mut into.seen, project, read)
    }
}

/// See [`Slot::Seen`].
pub(in crate::changelog) struct SeenStore;

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
    /// A judge-scores unit's bucket of ballot ids, written as a projects unit writes its
    /// `ballots`; of a votes or projects unit, a bucket of the layout before: always deleted.
    fn render(from: &Source<'_>, id: (&str, u64), out: &mut Vec<u8>) -> bool {
        !from.unit.holds_votes() && BallotsStore::render(from, id, out)
    }
    fn restore(
        into: &mut Restored,
        (project, bucket): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        if !into.unit.holds_votes() {
            return BallotsStore::restore(into, (project, bucket), read);
        }
        into.retired.push((project.to_owned(), bucket));
        read_bucket(&mut into.seen, project, read)
    }
}

/// See [`Slot::Ballots`].
pub(in crate::changelog) struct BallotsStore;

impl Store for BallotsStore {
    const KIND: &'static str = "ballots";
    type Id<'a> = (&'a str, u64);
    fn render(from: &Source<'_>, (project, bucket): (&str, u64), out: &mut Vec<u8>) -> bool {
        let window = from.state.judges(project).map(|p| &p.seen);
        push_window(out, window, bucket_ids(bucket, SEEN_BUCKET))
    }
    fn restore(
        into: &mut Restored,
        (project, _): (&str, u64),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        read_bucket(&mut into.ballots, project, read)
    }
}
