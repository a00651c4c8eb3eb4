//! The state being restored: what each kind of record puts in it, and what spans records,
//! joined once every record is read.

use super::*;

/// A unit's state as its changelog records are decoded, each by its kind's [`Store`](super::stores::Store), in any
/// order (the latest value per key, as compaction keeps it); what spans records is gathered
/// here and joined by [`Restored::finish`].
pub(super) struct Restored {
    pub unit: Unit,
    /// The last input offset the restored state includes, as the restore found it before
    /// reading the records (item buckets of a later flush read as that flush found them).
    pub through: Option<i64>,
    pub state: PartitionState,
    pub offset: Option<i64>,
    /// Dedupe ids per vote project, from project and seen records.
    pub seen: IdMap<String, Vec<(u64, u128)>>,
    /// Ballot ids per project.
    pub ballots: IdMap<String, Vec<(u64, u128)>>,
    /// Per vote project, the newest id its record counts (see the module doc).
    pub counted: IdMap<String, u64>,
    pub completed: IdMap<String, Vec<(u64, u128)>>,
    pub next_seq: u64,
    /// Judge quality's items with votes and with waiting judge scores, as read from their
    /// buckets: put back in order of place once every bucket is read, whatever order the
    /// buckets came in. An item a flush forgot and took again at a new place is in two buckets
    /// until the next flush deletes its old place; put back in place order, the new place
    /// replaces the old, which the record of the places forgotten then drops.
    pub items: Vec<(u64, String, String, ItemVotes)>,
    pub waits: Vec<(u64, String, String, Vec<Waiting>)>,
    /// The places of items the restored flush forgot, still in their buckets.
    pub items_forgotten: Vec<u64>,
    /// Places in item buckets written by a flush cut short, to be written again.
    pub rerender: Vec<u64>,
    /// Buckets of vote ids in the layout before [`VOTE_BUCKET`], to be deleted.
    pub retired: Vec<(String, u64)>,
    /// Projects with a record of the layout before `Slot::LeftOut`, to be deleted.
    pub retired_forgotten: Vec<ProjectKey>,
}

impl Restored {
    pub(super) fn new(unit: Unit, through: Option<i64>) -> Self {
        Restored {
            unit,
            through,
            state: PartitionState::default(),
            offset: None,
            seen: IdMap::default(),
            ballots: IdMap::default(),
            counted: IdMap::default(),
            completed: IdMap::default(),
            next_seq: 0,
            items: Vec::new(),
            waits: Vec::new(),
            items_forgotten: Vec::new(),
            rerender: Vec::new(),
            retired: Vec::new(),
            retired_forgotten: Vec::new(),
        }
    }

    /// A project's judge quality, created empty if new.
    pub fn quality(&mut self, project: &str) -> &mut ProjectQuality {
        &mut self.state.project(project).quality
    }

    /// The state (journaling) and the last input offset it includes.
    pub(super) fn finish(self) -> (PartitionState, Option<i64>) {
        let Restored {
            unit: _,
            through: _,
            mut state,
            offset,
            seen,
            ballots,
            counted,
            completed,
            next_seq,
            mut items,
            mut waits,
            items_forgotten,
            rerender,
            mut retired,
            retired_forgotten,
        } = self;
        // Buckets that hold what the restored state does not are written again by the next
        // flush (see `ItemBucket`).
        state.journal = Some(Vec::new());
        items.sort_unstable_by_key(|(seq, ..)| *seq);
        for (seq, project, item, votes) in items {
            let projects = &mut state.projects;
            let at = (project.as_str(), item.as_str());
            state.quality.restore_item(projects, at, seq, votes);
        }
        waits.sort_unstable_by_key(|(seq, ..)| *seq);
        for (seq, project, item, waiting) in waits {
            let projects = &mut state.projects;
            let at = (project.as_str(), item.as_str());
            state.quality.restore_waiting(projects, at, seq, waiting);
        }
        for &seq in &items_forgotten {
            state.quality.drop_restored(&mut state.projects, seq);
        }
        // The next flush writes these buckets whatever else it changes, so its undo keeps the
        // items it forgets from them.
        let written = items_forgotten.iter().chain(&rerender).copied();
        state.quality.start_undo(written);
        state.note_items_forgotten(items_forgotten);
        for seq in rerender {
            state.note_item(seq);
        }
        for (project, mut entries) in seen {
            // Ids newer than the project record's are from a flush cut short: their events are
            // not in the score and will be replayed. (Ids written twice by a cut flush are
            // merged by `RecentIds::restore`.)
            let newest = counted.get(&project).copied();
            entries.retain(|(s, _)| newest.is_some_and(|n| *s <= n));
            if let Some(p) = state.projects.get_mut(project.as_str())
                && let Some(votes) = &mut p.votes
            {
                votes.seen = RecentIds::restore(entries);
            }
        }
        // Vote ids read from buckets of the layout before are written again as laid out now,
        // then those buckets deleted, by the next flush (a cut between the two reads both).
        retired.sort_unstable();
        let mut relaid = Vec::new();
        for buckets in retired.chunk_by(|a, b| a.0 == b.0) {
            let project = buckets[0].0.as_str();
            if let Some(window) = state.votes(project).map(|v| &v.seen)
                && let (Some((oldest, _)), Some(newest)) =
                    (window.range(0, u64::MAX).next(), window.newest_seq())
            {
                relaid.push(Change::Votes {
                    project: ProjectKey::from(project),
                    seen: oldest..newest + 1,
                    forgot: 0..0,
                });
            }
            relaid.extend(buckets.iter().map(|(project, bucket)| Change::RetiredIds {
                project: project.clone(),
                bucket: *bucket,
            }));
        }
        // A project's count of verdicts left out read from the record of the layout before is
        // written as laid out now, then that record deleted, by the next flush.
        for project in retired_forgotten {
            relaid.push(Change::LeftOut {
                project: project.clone(),
            });
            relaid.push(Change::RetiredForgotten { project });
        }
        state.journal.get_or_insert_with(Vec::new).extend(relaid);
        for (project, entries) in ballots {
            let window = RecentIds::restore(entries);
            state.judges_mut(&project).seen = window;
        }
        for (project, entries) in completed {
            state.project(&project).sessions.completed = RecentIds::restore(entries);
        }
        state.sessions = SessionBook::restore(&mut state.projects, next_seq);
        for p in state.projects.values_mut() {
            p.quality.rebuild();
        }
        (state, offset)
    }
}
