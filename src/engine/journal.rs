//! The journal: what changed in a partition's state, noted as records are applied, for the
//! runtime's changelog (see [`crate::changelog`]). Replay does not journal.

use std::ops::Range;

use super::ids::ProjectKey;
use super::model::dedupe::Remembered;
use super::model::leaderboard::BlockId;

/// One piece of partition state that changed. The Kafka runtime writes the current value of
/// each (or a tombstone, if it is gone) to the changelog; replay does not journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A vote project's score changed, the ids numbered `seen` entered its dedupe window and
    /// those numbered `forgot` left it. A project's batches in one flush extend one change
    /// (see [`JournalHint`]): a busy project costs one journal entry per flush, not one or
    /// three per event. With many projects that is one change per event, so the project id is
    /// kept inline (a [`ProjectKey`]) rather than allocated.
    Votes {
        project: ProjectKey,
        seen: Range<u64>,
        forgot: Range<u64>,
    },
    /// A bucket of a vote project's dedupe window in the changelog's layout before vote ids
    /// had buckets of their own size: a restore that read one deletes it with the next flush,
    /// after writing its ids again as they are laid out now.
    RetiredIds { project: String, bucket: u64 },
    /// A ballot id entered a judge-scores project's dedupe window (`seq` orders the window).
    Seen { project: String, seq: u64 },
    /// A ballot id left a judge-scores project's dedupe window.
    Forgot { project: String, seq: u64 },
    /// An open session changed, opened or completed.
    Session { project: String, session: String },
    /// A session id entered the completed window.
    Completed {
        project: String,
        fingerprint: u128,
        seq: u64,
    },
    /// A session id left the completed window.
    Uncompleted { project: String, fingerprint: u128 },
    /// A project's bias roll-up.
    Audit { project: String },
    /// A leaderboard row.
    Board {
        project: String,
        category: String,
        model: String,
    },
    /// A completed session's kept `jury.consensus` record was added or dropped.
    Consensus { project: String, session: String },
    /// A category's Bradley-Terry models and fit.
    Ranking { project: String, category: String },
    /// One of a category's Bradley-Terry resampling blocks.
    RankingBlock {
        project: String,
        category: String,
        block: BlockId,
    },
    /// A judge-scores project's watermark.
    Watermark { project: String },
    /// The humans' votes on the items at `places` (judge quality), by their places in their
    /// task's order (see [`super::model::judge_quality::TaskQuality`]): the changelog writes
    /// items in buckets of places. A flush's new items take consecutive places, as do the
    /// places it forgets, so one change covers a run of them (see
    /// [`super::state::PartitionState::note_item`]): with a new item per vote, a change per
    /// item was two changes per vote for the changelog to sort into buckets.
    QualityItems { places: Range<u64> },
    /// The places of the items a flush forgot (see
    /// [`super::model::judge_quality::ItemUndo`]).
    ItemsForgotten,
    /// The judge scores waiting for an item's votes, by the item's place.
    QualityWaiting { seq: u64 },
    /// A judge's window of pairs.
    QualityJudge { project: String, judge: String },
    /// One of the last candidates' judge scores, by its place.
    QualityRecent { project: String, seq: u64 },
    /// A project's count of verdicts its reviewer model left out.
    LeftOut { project: ProjectKey },
    /// A project's record of the layout before [`Change::LeftOut`] (its counts of items and
    /// verdicts forgotten, and of verdicts left out), read at a restore: deleted.
    RetiredForgotten { project: ProjectKey },
    /// A reviewer's kept part (its last event time, its findings) changed, or it was forgotten.
    Reviewer { project: String, reviewer: String },
    /// Whether no judge score of a project was found to pair (`ProjectQuality::unmatched`).
    Unmatched { project: ProjectKey },
    /// The session book's creation counter.
    Book,
}

/// The position of a change in the current journal that later notes extend: a vote project's
/// (if it has one), or the last run of item places. With 10,000 busy projects a flush
/// interleaves their batches, and joining only a batch that follows its own project's made one
/// change per event: the changelog then hashed six times the slots it wrote. The hint may be
/// stale (the runtime takes the journal at every flush); it is trusted only when the change it
/// points at is one it may extend (this project's; a run its place extends). It is not state:
/// it is never written or restored, and every two hints compare equal, so a restored project
/// equals a running one.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalHint(pub(super) Option<usize>);

impl PartialEq for JournalHint {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Notes an applied vote batch of `project` in `journal` (if the state journals): the score
/// changed, `r` says which id entered the window and which left it. It extends the project's
/// change in this flush (found through `noted`) when the ids join its ranges; otherwise (the
/// first batch in the flush, or a window restored with gaps) it adds a change.
pub(super) fn note_votes(
    journal: Option<&mut Vec<Change>>,
    noted: &mut JournalHint,
    project: &str,
    r: &Remembered,
) {
    let Some(journal) = journal else {
        return;
    };
    let mut forgot = r.evicted.iter().map(|(s, _)| *s..s + 1);
    extend_votes(
        journal,
        noted,
        project,
        r.seq..r.seq + 1,
        forgot.next().unwrap_or(0..0),
    );
    // More than one id leaves only when the window shrank; they join unless it has gaps.
    for f in forgot {
        extend_votes(journal, noted, project, 0..0, f);
    }
}

/// Adds ids to the project's change that `noted` points at when that is this project's and
/// both ranges join; else appends a change and points `noted` at it.
fn extend_votes(
    journal: &mut Vec<Change>,
    noted: &mut JournalHint,
    project: &str,
    seen: Range<u64>,
    forgot: Range<u64>,
) {
    if let Some(Change::Votes {
        project: p,
        seen: s,
        forgot: f,
    }) = noted.0.and_then(|at| journal.get_mut(at))
        && p == project
        && let (Some(s2), Some(f2)) = (join(s, &seen), join(f, &forgot))
    {
        (*s, *f) = (s2, f2);
        return;
    }
    *noted = JournalHint(Some(journal.len()));
    journal.push(Change::Votes {
        project: ProjectKey::from(project),
        seen,
        forgot,
    });
}

/// `a` followed by `b` as one range, if that is one (either is empty, or they are adjacent).
fn join(a: &Range<u64>, b: &Range<u64>) -> Option<Range<u64>> {
    if b.is_empty() {
        Some(a.clone())
    } else if a.is_empty() {
        Some(b.clone())
    } else {
        (a.end == b.start).then_some(a.start..b.end)
    }
}
