//! Per-partition state: every project's votes and judge sessions, and the journal of what
//! changed (see [`super::journal`]), so that a partition's state moves between instances as a
//! unit.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::ids::{IdMap, ProjectKey};
use super::journal::{Change, JournalHint};
use super::model::bias::ProjectAudit;
use super::model::dedupe::{RecentIds, Remembered};
use super::model::judge_quality::{HoldsQuality, ProjectQuality, TaskQuality};
use super::model::leaderboard::Board;
use super::model::score::ProjectScore;
use super::model::session::{HoldsSessions, ProjectSessions, SessionBook};
use super::origins::Origins;

/// The state of one project's votes.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteProject {
    pub score: ProjectScore,
    /// Accepted `event_id`s, for duplicate detection.
    pub seen: RecentIds,
    /// Where this project's change is in the journal, so its batches of one flush extend it.
    pub noted: JournalHint,
    /// Its score output held back by coalescing, if any.
    pub coalescing: Coalescing,
    /// The input offset of the last batch applied, when the runtime gives offsets. It is written
    /// with the score, so after a crash that cut a changelog flush short, a project whose record
    /// made it knows which of the records read again it already counts (they are
    /// [`super::Outcome::Replayed`], not duplicates), while the others apply them.
    pub applied_through: Option<i64>,
}

impl VoteProject {
    /// A project with no votes yet, at score `score`.
    pub fn new(score: ProjectScore) -> Self {
        VoteProject {
            score,
            seen: RecentIds::default(),
            noted: JournalHint::default(),
            coalescing: Coalescing::default(),
            applied_through: None,
        }
    }
}

/// Coalescing of a vote project's `jury.scores` updates: `jury.scores` is a compacted table, so
/// the runtime publishes a project's first update at once and holds back later ones within
/// `output.scores_coalesce_ms`, keeping only the latest, which
/// [`super::Engine::release_held`] emits at the end of the runtime's cycle. It lives in the
/// project because the runtime used to keep it in a map of its own, and finding the project
/// there again was a cache miss per event with 10,000 busy projects. Like [`JournalHint`] it is
/// not state: never written or restored, and every two compare equal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Coalescing {
    /// The runtime clock (ms) when the project's last score was emitted at once.
    pub(super) emitted_ms: Option<u64>,
    /// The `alpha` of the held score's step (its freshness is `1 - alpha`), if one is held: the
    /// rest of the score is the project's current state.
    pub(super) held_alpha: Option<f64>,
}

impl PartialEq for Coalescing {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A project's judge-session state besides its open sessions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JudgeProject {
    /// Accepted judge-scores `event_id`s, for duplicate detection.
    pub seen: RecentIds,
    pub audit: ProjectAudit,
    pub board: Board,
    /// Its latest completed sessions' `jury.consensus` records.
    pub kept: KeptConsensus,
}

/// A project's latest completed sessions' `jury.consensus` records as published, oldest first,
/// at most `sessions.completed_records`: the interactive queries answer with them, and they
/// are state so that the answers survive a restart or a rebalance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptConsensus {
    pub records: VecDeque<Kept>,
}

/// One kept `jury.consensus` record.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    /// Its place in the project's completion order: a restore puts the records back by it.
    pub seq: u64,
    pub session: String,
    pub record: Arc<str>,
}

impl KeptConsensus {
    /// Keeps `record` of `session`, dropping the oldest beyond `limit`; returns the sessions
    /// dropped.
    pub fn keep(&mut self, session: &str, record: Arc<str>, limit: usize) -> Vec<String> {
        let seq = self.records.back().map_or(0, |k| k.seq + 1);
        self.records.retain(|k| k.session != session);
        self.records.push_back(Kept {
            seq,
            session: session.to_owned(),
            record,
        });
        let excess = self.records.len().saturating_sub(limit);
        self.records.drain(..excess).map(|k| k.session).collect()
    }

    /// Puts a restored record back in its place.
    pub fn restore(&mut self, kept: Kept) {
        self.records.retain(|k| k.session != kept.session);
        let at = self.records.partition_point(|k| k.seq < kept.seq);
        self.records.insert(at, kept);
    }

    /// The record of `session`, if kept.
    pub fn get(&self, session: &str) -> Option<&Kept> {
        self.records.iter().find(|k| k.session == session)
    }
}

/// Everything a state holds about one project, each capability a part of it: a vote's batch,
/// a judge's ballot and the figures published of the project find all of it with one lookup.
/// A part is there once a record of its kind arrived (the vote and judge parts) or always, empty
/// until used (sessions, judge quality).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Project {
    /// `jury.votes`: its score and the dedupe window of its vote batches.
    pub votes: Option<VoteProject>,
    /// `jury.judge-scores`: its ballots' dedupe window, bias roll-up, leaderboard and kept
    /// consensus records.
    pub judges: Option<JudgeProject>,
    /// Its open and recently completed sessions, and its watermark.
    pub sessions: ProjectSessions,
    /// Judge quality and reviewer reliability: the humans' votes per item, judge scores
    /// waiting for them, each judge's window of pairs, its reviewers.
    pub quality: ProjectQuality,
}

impl HoldsSessions for Project {
    fn sessions(&self) -> &ProjectSessions {
        &self.sessions
    }
    fn sessions_mut(&mut self) -> &mut ProjectSessions {
        &mut self.sessions
    }
}

impl HoldsQuality for Project {
    fn quality(&self) -> &ProjectQuality {
        &self.quality
    }
    fn quality_mut(&mut self) -> &mut ProjectQuality {
        &mut self.quality
    }
}

/// The state of the projects one partition holds: everything a record can change, so that a
/// partition's state moves between instances as a unit. The Kafka service keeps one per
/// partition it owns (of the repartition topic, or of an input keyed by project); replay keeps
/// one for the whole file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionState {
    /// Every project, by id: the one place a project's state is.
    pub projects: IdMap<ProjectKey, Project>,
    /// What spans the projects' sessions: their creation counter and age order.
    pub sessions: SessionBook,
    /// What spans the projects' judge quality: the task's items in one order, within the
    /// task's bound, and what a flush changed of them.
    pub quality: TaskQuality,
    /// The last offset processed from each input partition, to recognise copies.
    pub origins: Origins,
    /// When set, every state change is noted here for the runtime's changelog.
    pub journal: Option<Vec<Change>>,
    /// Where the journal's last run of item places is (see [`PartitionState::note_item`]).
    pub items_noted: JournalHint,
    /// Vote projects with a held score (see [`Coalescing`]), in the order they were first held;
    /// [`super::Engine::release_held`] empties it at every coalescing tick and at the end of every
    /// runtime epoch, and replay (no clock) never fills it.
    pub held: Vec<ProjectKey>,
    /// Projects whose `jury.reviewer-quality` records are held back until the end of the
    /// runtime's cycle: [`super::Engine::release_reviewers`] publishes them as they then are.
    pub held_reviewers: HeldReviewers,
    /// Projects with a leaderboard category whose ratings lack a session, for the next tick's
    /// [`super::Engine::refit_leaderboards`].
    pub unfitted_boards: UnfittedBoards,
    /// Changelog records (key, value; `None` deletes) that a restore took from the redo record
    /// of a flush a crash cut after it: they reached the log only inside that redo record, which
    /// the next flush's replaces, so the next flush writes them again.
    pub carried: Carried,
}

/// See [`PartitionState::carried`]. Not state: every two compare equal.
#[derive(Debug, Clone, Default)]
pub struct Carried(pub Vec<(String, Option<String>)>);

impl PartialEq for Carried {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// See [`PartitionState::unfitted_boards`]: derived from the rankings (each says whether it is
/// [`unfitted`](super::model::leaderboard::Ranking::unfitted)), so that a tick finds them
/// without reading every project, and rebuilt by a restore from the rankings it reads. A
/// project may stay listed after a later session refitted it, which the tick then skips. Not
/// state: every two compare equal.
#[derive(Debug, Clone, Default)]
pub struct UnfittedBoards(pub BTreeSet<ProjectKey>);

impl PartialEq for UnfittedBoards {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The projects whose reviewers' records are held, in the order they were first held (they
/// are published in id order; each is listed once, as its reviewers mark it, see
/// [`super::model::reviewers::Reviewers::hold`]), and what was last published of each reviewer
/// (a hash of its record), so that a record equal to the last one is not published again.
/// Like [`Coalescing`] it is not state: never written or restored, and every two compare equal.
#[derive(Debug, Clone, Default)]
pub struct HeldReviewers {
    pub dirty: Vec<ProjectKey>,
    /// The projects of the release under way, the next to publish last (see
    /// [`super::Engine::begin_reviewer_release`]).
    pub releasing: Vec<ProjectKey>,
    pub published: IdMap<ProjectKey, IdMap<ProjectKey, u64>>,
}

impl PartialEq for HeldReviewers {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl PartitionState {
    /// A state that journals its changes.
    pub fn journaled() -> Self {
        let mut state = PartitionState {
            journal: Some(Vec::new()),
            ..PartitionState::default()
        };
        state.quality.start_undo([]);
        state
    }

    /// Ends a flush, once the runtime rendered its changelog from the journal: the judge-quality
    /// items it forgot are deleted by the next flush (see `crate::changelog`), so their buckets
    /// and the record of them go into the journal again.
    pub fn end_flush(&mut self) {
        self.carried.0.clear();
        let forgotten = self.quality.end_flush();
        self.note_items_forgotten(forgotten);
    }

    /// Notes that the items at `places` were forgotten by the last flush (the one that ended,
    /// or the one a restore went back to): the next flush deletes them from their buckets, and
    /// its record of the places forgotten says none are left to drop.
    pub fn note_items_forgotten(&mut self, places: Vec<u64>) {
        if places.is_empty() {
            return;
        }
        self.note(|| Change::ItemsForgotten);
        for seq in places {
            self.note_item(seq);
        }
    }

    /// Notes that the item bucket holding place `seq` is written again by the next flush: the
    /// run of places the last such change covers takes it if it is the run's next place (or in
    /// it), else a change of its own starts a run.
    pub fn note_item(&mut self, seq: u64) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        if let Some(Change::QualityItems { places }) =
            self.items_noted.0.and_then(|at| journal.get_mut(at))
        {
            if places.contains(&seq) {
                return;
            }
            if places.end == seq {
                places.end += 1;
                return;
            }
        }
        self.items_noted = JournalHint(Some(journal.len()));
        journal.push(Change::QualityItems {
            places: seq..seq + 1,
        });
    }

    /// The projects this state holds (as `limits.max_projects` counts them).
    pub fn project_count(&self) -> usize {
        self.projects.len()
    }

    /// The vote part of `project`, if it has votes.
    pub fn votes(&self, project: &str) -> Option<&VoteProject> {
        self.projects.get(project)?.votes.as_ref()
    }

    /// The judge part of `project`, if it has judge scores.
    pub fn judges(&self, project: &str) -> Option<&JudgeProject> {
        self.projects.get(project)?.judges.as_ref()
    }

    /// The judge part of `project`, created if new.
    pub fn judges_mut(&mut self, project: &str) -> &mut JudgeProject {
        self.project(project).judges.get_or_insert_default()
    }

    /// The judge quality of `project`, if held.
    pub fn quality(&self, project: &str) -> Option<&ProjectQuality> {
        self.projects.get(project).map(|p| &p.quality)
    }

    /// `project`, created if new (a key of up to 24 bytes allocates nothing).
    pub fn project(&mut self, project: &str) -> &mut Project {
        self.projects.entry(ProjectKey::from(project)).or_default()
    }

    pub(super) fn note(&mut self, change: impl FnOnce() -> Change) {
        if let Some(j) = &mut self.journal {
            j.push(change());
        }
    }

    /// Notes a judge-scores window change: a ballot id (`completed` false) or a completed
    /// session id entered the project's window, and the ids `r` evicted left it.
    pub(super) fn note_window(&mut self, project: &str, r: &Remembered, completed: bool) {
        if self.journal.is_none() {
            return;
        }
        let project = project.to_owned();
        let (fingerprint, seq) = (r.fingerprint, r.seq);
        self.note(|| {
            if completed {
                Change::Completed {
                    project: project.clone(),
                    fingerprint,
                    seq,
                }
            } else {
                Change::Seen {
                    project: project.clone(),
                    seq,
                }
            }
        });
        for &(seq, fingerprint) in &r.evicted {
            self.note(|| {
                if completed {
                    Change::Uncompleted {
                        project: project.clone(),
                        fingerprint,
                    }
                } else {
                    Change::Forgot {
                        project: project.clone(),
                        seq,
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(k: &KeptConsensus) -> Vec<(u64, &str)> {
        k.records
            .iter()
            .map(|k| (k.seq, k.session.as_str()))
            .collect()
    }

    #[test]
    fn kept_consensus_records_drop_the_oldest_and_restore_in_order() {
        let mut k = KeptConsensus::default();
        let record = |s: &str| Arc::<str>::from(format!("{{\"session_id\":\"{s}\"}}"));
        assert!(k.keep("a", record("a"), 2).is_empty());
        assert!(k.keep("b", record("b"), 2).is_empty());
        assert_eq!(k.keep("c", record("c"), 2), ["a"]);
        assert_eq!(sessions(&k), [(1, "b"), (2, "c")]);
        // A session completed again (its id left the completed window) is kept once.
        assert!(k.keep("b", record("b"), 2).is_empty());
        assert_eq!(sessions(&k), [(2, "c"), (3, "b")]);
        assert_eq!(
            k.get("b").map(|k| &*k.record),
            Some(r#"{"session_id":"b"}"#)
        );
        // The changelog gives records back in any order.
        let mut restored = KeptConsensus::default();
        for kept in k.records.iter().rev() {
            restored.restore(kept.clone());
        }
        assert_eq!(restored, k);
    }
}
