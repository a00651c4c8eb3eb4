//! The view the queries read: per project, a snapshot of what the instance last published for
//! it (its `jury.scores` and `jury.leaderboard` records), of its open sessions and of the
//! consensus records its state keeps, in a concurrent map. The processing thread updates a
//! project's snapshot after each record it applies, under that project's shard lock, and the
//! HTTP handlers read it without ever taking the processing thread's lock: a reader sees a
//! project either before or after a record, never half of one. The view holds no more projects
//! than the state does, and shares its ballots and consensus records with it.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use serde::Serialize;

use crate::changelog::{Unit, UnitKind};
use crate::engine::contract::time::{EventTime, rfc3339};
use crate::engine::model::session::{Ballot, Session};
use crate::engine::output::{Output, OutputValue, Shows};
use crate::engine::quality::judge_record;
use crate::engine::{
    Change, InputTopic, JudgeProject, PartitionState, Settings, leaderboard_record, reviewer_record,
};

/// A project's `jury.scores` numbers as last published; `freshness` and `alpha` describe the
/// last batch's step, which a state restored from a changelog written before it was kept
/// does not know.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreView {
    pub score: f64,
    pub freshness: Option<f64>,
    pub alpha: Option<f64>,
    pub lambda: Option<f64>,
    pub evaluations: u64,
    pub votes: u64,
    #[serde(serialize_with = "rfc3339")]
    pub last_event_at: EventTime,
}

/// An open session as the queries show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    pub session_id: String,
    pub category: Option<String>,
    pub expected_judges: Option<u32>,
    #[serde(serialize_with = "rfc3339")]
    pub last_activity: EventTime,
    /// Each judge's latest ballot, shared with the snapshots that did not change it.
    pub ballots: BTreeMap<String, Arc<Ballot>>,
}

impl SessionView {
    /// The view of `session`, reusing the ballots of `before` that did not change.
    fn of(session_id: &str, session: &Session, before: Option<&SessionView>) -> SessionView {
        let ballots = session
            .ballots
            .iter()
            .map(|(judge, ballot)| {
                let kept = before
                    .and_then(|b| b.ballots.get(judge))
                    .filter(|b| ***b == *ballot);
                let ballot = kept.map_or_else(|| Arc::new(ballot.clone()), Arc::clone);
                (judge.clone(), ballot)
            })
            .collect();
        SessionView {
            session_id: session_id.to_owned(),
            category: session.category.clone(),
            expected_judges: session.expected_judges,
            last_activity: session.last_activity,
            ballots,
        }
    }
}

/// What the view holds of one project.
#[derive(Debug, Clone, Default)]
pub struct ProjectView {
    /// The partition whose state holds it.
    pub partition: i32,
    /// The units its parts come from: one projects unit, or with `by_key` its score from a
    /// votes unit and the rest from a judge-scores unit, perhaps of different partitions, one
    /// revoked while the other stays.
    pub units: BTreeSet<Unit>,
    pub score: Option<ScoreView>,
    pub open: BTreeMap<String, SessionView>,
    /// The consensus records of the latest completed sessions, by session, as the state
    /// keeps them.
    pub completed: BTreeMap<String, Arc<str>>,
    /// `jury.leaderboard` records by (category, model).
    pub leaderboard: BTreeMap<(String, String), Arc<str>>,
    /// `jury.judge-quality` records by judge.
    pub judges: BTreeMap<String, Arc<str>>,
    /// `jury.reviewer-quality` records by reviewer.
    pub reviewers: BTreeMap<String, Arc<str>>,
    /// Wall-clock milliseconds of the last change.
    pub updated_ms: i64,
}

/// A partition this instance owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    /// Its state has not been read from the changelog yet.
    pub restoring: bool,
}

/// Every project snapshot of this instance, the partitions it owns, and the directory of the
/// instances that own the rest.
#[derive(Debug, Default)]
pub struct View {
    pub projects: DashMap<Arc<str>, ProjectView>,
    /// The ids of `projects` (the same allocations), in order: a listing's page is a range of
    /// it, so a page costs its own length, not a pass over every project. An id enters before
    /// its snapshot and leaves after it, and the index is never locked while a snapshot is
    /// held (a listing holds the index while it reads snapshots).
    ids: RwLock<BTreeSet<Arc<str>>>,
    /// The partitions with at least one unit owned here, restoring while any of them is.
    pub owned: DashMap<i32, Owned>,
    /// The units owned here, and whether each is restoring.
    units: DashMap<Unit, bool>,
    /// Partition -> advertised URL of its owner, as the instances announced.
    pub directory: DashMap<i32, String>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl View {
    /// `unit` is assigned to this instance: restoring until [`View::restored`].
    pub fn assigned(&self, unit: Unit) {
        self.units.insert(unit, true);
        self.owned.insert(unit.partition, Owned { restoring: true });
    }

    /// Notes whether partition `partition` is still owned, and restoring.
    fn own(&self, partition: i32) {
        let units: Vec<bool> = self
            .units
            .iter()
            .filter(|u| u.key().partition == partition)
            .map(|u| *u.value())
            .collect();
        if units.is_empty() {
            self.owned.remove(&partition);
        } else {
            let restoring = units.into_iter().any(|r| r);
            self.owned.insert(partition, Owned { restoring });
        }
    }

    /// `unit` was taken away: what its state gave its projects leaves the view (a project
    /// whose other part another unit holds stays, with that part).
    pub fn revoked(&self, unit: Unit) {
        self.units.remove(&unit);
        self.own(unit.partition);
        let mut gone = Vec::new();
        self.projects.retain(|id, p| {
            if !p.units.remove(&unit) {
                return true;
            }
            if unit.kind != UnitKind::Input(InputTopic::JudgeScores) {
                p.score = None;
            }
            if unit.kind != UnitKind::Input(InputTopic::Votes) {
                p.open.clear();
                p.completed.clear();
                p.leaderboard.clear();
                p.judges.clear();
            }
            if p.units.is_empty() {
                gone.push(Arc::clone(id));
            }
            !p.units.is_empty()
        });
        let mut ids = self.ids.write().unwrap_or_else(PoisonError::into_inner);
        for id in gone {
            ids.remove(&id);
        }
    }

    /// Up to `limit` of `read(id, snapshot)` over the projects whose ids come after `after`,
    /// in the order of their ids, skipping those it gives `None` for; and whether there are
    /// more.
    pub fn page<T>(
        &self,
        after: Option<&str>,
        limit: usize,
        mut read: impl FnMut(&str, &ProjectView) -> Option<T>,
    ) -> (Vec<T>, bool) {
        let ids = self.ids.read().unwrap_or_else(PoisonError::into_inner);
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut page = Vec::with_capacity(limit.min(1024));
        for id in ids.range::<str, _>((from, Bound::Unbounded)) {
            let Some(project) = self.projects.get(id.as_ref()) else {
                continue;
            };
            if let Some(t) = read(id, &project) {
                if page.len() == limit {
                    return (page, true);
                }
                page.push(t);
            }
        }
        (page, false)
    }

    /// Project `id` as the key of a new snapshot, in the ordered index already (so it is
    /// indexed before its snapshot exists, and without a snapshot held).
    fn index(&self, id: &str) -> Arc<str> {
        let id: Arc<str> = Arc::from(id);
        self.ids
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(Arc::clone(&id));
        id
    }

    /// Holds `snapshot` as project `id`'s, as the processing thread's updates would.
    #[cfg(test)]
    pub fn hold(&self, id: &str, snapshot: ProjectView) {
        self.projects.insert(self.index(id), snapshot);
    }

    /// `unit`'s state was restored as `state`: its projects enter the view as the state holds
    /// them, their records as the engine's `settings` render them.
    pub fn restored(&self, unit: Unit, state: &PartitionState, settings: &Settings) {
        let lambda = |p: &str| settings.scoring.lambda_for(p);
        let leaderboard = &settings.leaderboard;
        let now = now_ms();
        for (project, v) in &state.projects {
            let Some((v, last)) = v
                .votes
                .as_ref()
                .and_then(|v| Some((v, v.score.last_update_at?)))
            else {
                continue;
            };
            let mut p = self.entry(project.as_str(), unit, now);
            let alpha = v.score.last_alpha;
            p.score = Some(ScoreView {
                score: v.score.score,
                freshness: alpha.map(|a| 1.0 - a),
                alpha,
                lambda: Some(lambda(project.as_str())),
                evaluations: v.score.evaluations,
                votes: v.score.votes,
                last_event_at: last,
            });
        }
        let judged = state.projects.iter().filter(|(_, p)| {
            p.judges.is_some() || !p.sessions.open.is_empty() || p.sessions.watermark.is_some()
        });
        for (project, sessions) in judged.map(|(id, p)| (id, &p.sessions)) {
            let mut p = self.entry(project, unit, now);
            p.open = sessions
                .open
                .iter()
                .map(|(id, s)| (id.clone(), SessionView::of(id, s, None)))
                .collect();
        }
        let judges = state.projects.iter();
        for (project, j) in judges.filter_map(|(id, p)| Some((id, p.judges.as_ref()?))) {
            let standings = j.board.standings(project, leaderboard);
            if standings.is_empty() && j.kept.records.is_empty() {
                continue;
            }
            let mut p = self.entry(project, unit, now);
            p.completed = kept(j);
            for s in &standings {
                let record = leaderboard_record(s).render().into();
                let key = (s.category.clone().unwrap_or_default(), s.model.clone());
                p.leaderboard.insert(key, record);
            }
        }
        for (project, q) in state
            .projects
            .iter()
            .map(|(id, p)| (id.as_str(), &p.quality))
        {
            if q.judges.is_empty() && !q.has_verdicts(&state.quality) {
                continue;
            }
            let mut p = self.entry(project, unit, now);
            let window = settings.judge_quality.window;
            for (judge, w) in q.judges.iter() {
                let record = judge_record(project, judge, w, window);
                p.judges.insert(judge.to_owned(), record.render().into());
            }
            let fitted = q.fit_reviewers(&state.quality, settings.reviewers.max_reviewers);
            for (reviewer, r) in &fitted.reviewers {
                let findings = q.reviewers.findings(reviewer);
                let kept = (findings, settings.reviewers.min_items);
                let record = reviewer_record(project, reviewer, r, kept);
                p.reviewers
                    .insert(reviewer.to_string(), record.render().into());
            }
        }
        self.units.insert(unit, false);
        self.own(unit.partition);
    }

    /// A record of `unit` was applied to `state`: `changes` are its journal entries, `out`
    /// what it published. Each project it touched is updated under one hold of its entry, so a
    /// reader sees the project before or after the record, never half of it.
    pub fn applied<'a>(
        &self,
        unit: Unit,
        state: &PartitionState,
        changes: &'a [Change],
        out: &'a [Output],
    ) {
        let mut updates: Vec<(&'a str, Update<'a>)> = Vec::new();
        for change in changes {
            match change {
                Change::Session { project, session } => {
                    updates.push((project, Update::Session(session)));
                }
                Change::Consensus { project, .. } => updates.push((project, Update::Completed)),
                Change::QualityJudge { project, judge } => {
                    updates.push((project, Update::JudgeKept(judge)));
                }
                Change::Reviewer { project, reviewer } => {
                    updates.push((project, Update::ReviewerKept(reviewer)));
                }
                _ => {}
            }
        }
        updates.extend(out.iter().filter_map(update_of));
        if updates.is_empty() {
            return;
        }
        // Grouped by project, each project's updates in their order.
        updates.sort_by_key(|(project, _)| *project);
        let now = now_ms();
        for group in updates.chunk_by(|a, b| a.0 == b.0) {
            let project = group[0].0;
            let mut p = self.entry(project, unit, now);
            for (_, update) in group {
                p.apply(project, update, state);
            }
        }
    }

    /// [`View::applied`] for a record just applied to `state`, whose journal held `journaled`
    /// entries before it: the record's own changes are the ones after those.
    pub fn applied_after(
        &self,
        unit: Unit,
        state: &PartitionState,
        journaled: usize,
        out: &[Output],
    ) {
        let changes = state.journal.as_deref().unwrap_or_default();
        self.applied(
            unit,
            state,
            changes.get(journaled..).unwrap_or_default(),
            out,
        );
    }

    /// `unit`, whose state is `state`, published `out` outside any record (held scores and
    /// reviewer records released).
    pub fn published(&self, unit: Unit, state: &PartitionState, out: &[Output]) {
        self.applied(unit, state, &[], out);
    }

    /// Project `project`'s snapshot, created if new, marked changed at `now` by `unit`.
    fn entry(
        &self,
        project: &str,
        unit: Unit,
        now: i64,
    ) -> dashmap::mapref::one::RefMut<'_, Arc<str>, ProjectView> {
        let mut p = match self.projects.get_mut(project) {
            Some(p) => p,
            None => self.projects.entry(self.index(project)).or_default(),
        };
        p.partition = unit.partition;
        p.units.insert(unit);
        p.updated_ms = now;
        p
    }
}

/// One change to a project's snapshot.
enum Update<'a> {
    /// Its `jury.scores` record.
    Score(ScoreView),
    /// A `jury.leaderboard` record for (category, model); `None` for a row that left the window.
    Row((String, String), Option<Arc<str>>),
    /// An open session changed, opened or completed: read it again from the state.
    Session(&'a str),
    /// Its kept consensus records changed: read them again from the state.
    Completed,
    /// A judge's `jury.judge-quality` record.
    Judge(&'a str, Arc<str>),
    /// A judge's window changed or was forgotten: drop its record if the state has no window.
    JudgeKept(&'a str),
    /// A reviewer's `jury.reviewer-quality` record.
    Reviewer(&'a str, Arc<str>),
    /// A reviewer changed or was forgotten: drop its record if the state has no figures.
    ReviewerKept(&'a str),
}

/// The project a published record updates, and how: a score record is filed under its key,
/// the project; the others under the part of the state the engine says they show.
fn update_of(o: &Output) -> Option<(&str, Update<'_>)> {
    let json = || match &o.value {
        OutputValue::Json(text) => Some(Arc::from(text.as_str())),
        OutputValue::Score(_) => None,
    };
    match (&o.value, &o.shows) {
        (OutputValue::Score(v), _) => Some((
            o.key.as_deref()?,
            Update::Score(ScoreView {
                score: v.score,
                freshness: Some(v.freshness),
                alpha: Some(v.alpha),
                lambda: Some(v.lambda),
                evaluations: v.evaluations,
                votes: v.votes,
                last_event_at: v.last_event_at,
            }),
        )),
        (
            _,
            Some(Shows::Row {
                project,
                category,
                model,
                live,
            }),
        ) => {
            let record = if *live { Some(json()?) } else { None };
            let row = (category.clone(), model.clone());
            Some((project, Update::Row(row, record)))
        }
        (_, Some(Shows::Judge { project, judge })) => {
            Some((project, Update::Judge(judge, json()?)))
        }
        (_, Some(Shows::Reviewer { project, reviewer })) => {
            Some((project, Update::Reviewer(reviewer, json()?)))
        }
        (OutputValue::Json(_), None) => None,
    }
}

impl ProjectView {
    /// Applies `update` of `project`, reading what changed from `state`.
    fn apply(&mut self, project: &str, update: &Update<'_>, state: &PartitionState) {
        match update {
            Update::Score(score) => self.score = Some(score.clone()),
            Update::Row(key, Some(record)) => {
                self.leaderboard.insert(key.clone(), Arc::clone(record));
            }
            Update::Row(key, None) => {
                self.leaderboard.remove(key);
            }
            Update::Session(session) => {
                let open = state
                    .projects
                    .get(project)
                    .and_then(|p| p.sessions.open.get(*session));
                match open {
                    Some(s) => {
                        let view = SessionView::of(session, s, self.open.get(*session));
                        self.open.insert((*session).to_owned(), view);
                    }
                    None => {
                        self.open.remove(*session);
                    }
                }
            }
            Update::Judge(judge, record) => {
                // A judge the state forgot later in the same record (a new judge beyond
                // judge_quality.max_judges) must not come back with its earlier record.
                let kept = state
                    .quality(project)
                    .is_some_and(|q| q.judges.get(judge).is_some());
                if kept {
                    self.judges.insert((*judge).to_owned(), Arc::clone(record));
                } else {
                    self.judges.remove(*judge);
                }
            }
            Update::JudgeKept(judge) => {
                let kept = state
                    .quality(project)
                    .is_some_and(|q| q.judges.get(judge).is_some());
                if !kept {
                    self.judges.remove(*judge);
                }
            }
            Update::Reviewer(reviewer, record) => {
                // Published from a fit of the items held now: the reviewer has verdicts.
                self.reviewers
                    .insert((*reviewer).to_owned(), Arc::clone(record));
            }
            Update::ReviewerKept(reviewer) => {
                if !reviewer_held(state, project, reviewer) {
                    self.reviewers.remove(*reviewer);
                }
            }
            Update::Completed => {
                self.completed = state.judges(project).map(kept).unwrap_or_default();
            }
        }
    }
}

/// Whether `state` holds verdicts of `reviewer` in `project`: read from its items, when its
/// findings changed or went (rarely).
fn reviewer_held(state: &PartitionState, project: &str, reviewer: &str) -> bool {
    state.quality(project).is_some_and(|q| {
        let mut verdicts = state.quality.reviews(&q.items).flat_map(|r| &r.verdicts);
        verdicts.any(|v| v.reviewer.as_str() == reviewer)
    })
}

/// A judge project's kept consensus records, by session.
fn kept(j: &JudgeProject) -> BTreeMap<String, Arc<str>> {
    j.kept
        .records
        .iter()
        .map(|k| (k.session.clone(), Arc::clone(&k.record)))
        .collect()
}

#[cfg(test)]
mod tests;
