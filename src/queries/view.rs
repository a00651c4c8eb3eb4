//! The view the queries read: per project, a snapshot of what the instance last published for
//! it (its `jury.scores` and `jury.leaderboard` records), of its open sessions and of the
//! consensus records its state keeps, in a concurrent map. The processing thread updates a
//! project's snapshot after each record it applies, under that project's shard lock, and the
//! HTTP handlers read it without ever taking the processing thread's lock: a reader sees a
//! project either before or after a record, never half of one. The view holds no more projects
//! than the state does, and shares its ballots and consensus records with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::changelog::{Unit, UnitKind};
use crate::engine::contract::time::{EventTime, rfc3339};
use crate::engine::model::session::{Ballot, Session};
use crate::engine::output::{Output, OutputTopic, OutputValue};
use crate::engine::quality::judge_record;
use crate::engine::{Change, InputTopic, JudgeProject, PartitionState, Settings};

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
    /// Wall-clock milliseconds of the last change.
    pub updated_ms: i64,
}

/// A partition this instance owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    /// Its state has not been read from the changelog yet.
    pub restoring: bool,
}

/// The fields of a published `jury.leaderboard` record that place it in the view.
#[derive(Deserialize)]
struct Placed<'a> {
    /// 0 for a row published once more as it left the window: the state forgets it.
    sessions: u64,
    #[serde(borrow)]
    category: Option<&'a str>,
    #[serde(borrow)]
    model: Option<&'a str>,
}

/// Every project snapshot of this instance, the partitions it owns, and the directory of the
/// instances that own the rest.
#[derive(Debug, Default)]
pub struct View {
    pub projects: DashMap<String, ProjectView>,
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
        self.projects.retain(|_, p| {
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
            !p.units.is_empty()
        });
    }

    /// `unit`'s state was restored as `state`: its projects enter the view as the state holds
    /// them, their records as the engine's `settings` render them.
    pub fn restored(&self, unit: Unit, state: &PartitionState, settings: &Settings) {
        let lambda = |p: &str| settings.scoring.lambda_for(p);
        let leaderboard = &settings.leaderboard;
        let now = now_ms();
        for (project, v) in &state.projects {
            let Some(last) = v.score.last_update_at else {
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
        for (project, sessions) in &state.sessions.projects {
            let mut p = self.entry(project, unit, now);
            p.open = sessions
                .open
                .iter()
                .map(|(id, s)| (id.clone(), SessionView::of(id, s, None)))
                .collect();
        }
        for (project, j) in &state.judge_projects {
            let standings = j.board.standings(project, leaderboard);
            if standings.is_empty() && j.kept.records.is_empty() {
                continue;
            }
            let mut p = self.entry(project, unit, now);
            p.completed = kept(j);
            for s in standings {
                let record = Output::json(OutputTopic::Leaderboard, None, &s)
                    .render()
                    .into();
                let key = (s.category.unwrap_or_default(), s.model);
                p.leaderboard.insert(key, record);
            }
        }
        for (project, q) in state.quality.iter() {
            if q.judges.is_empty() {
                continue;
            }
            let mut p = self.entry(project, unit, now);
            let window = settings.judge_quality.window;
            for (judge, w) in q.judges.iter() {
                let record = judge_record(project, judge, w, window);
                p.judges.insert(judge.to_owned(), record.render().into());
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

    /// `unit` published `out` outside any record (held scores released, which read nothing
    /// from the state).
    pub fn published(&self, unit: Unit, out: &[Output]) {
        self.applied(unit, &PartitionState::default(), &[], out);
    }

    /// Project `project`'s snapshot, created if new, marked changed at `now` by `unit`.
    fn entry(
        &self,
        project: &str,
        unit: Unit,
        now: i64,
    ) -> dashmap::mapref::one::RefMut<'_, String, ProjectView> {
        let mut p = match self.projects.get_mut(project) {
            Some(p) => p,
            None => self.projects.entry(project.to_owned()).or_default(),
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
}

/// The fields of a published `jury.judge-quality` record that place it in the view.
#[derive(Deserialize)]
struct JudgeOf<'a> {
    #[serde(borrow)]
    project_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    judge: std::borrow::Cow<'a, str>,
}

/// The project a published record updates, and how.
fn update_of<'a>(o: &'a Output) -> Option<(&'a str, Update<'a>)> {
    let key = o.key.as_deref()?;
    match (&o.value, o.topic) {
        (OutputValue::Score(v), OutputTopic::Scores) => Some((
            key,
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
        (OutputValue::Json(text), OutputTopic::Leaderboard) => {
            let placed: Placed<'_> = serde_json::from_str(text).ok()?;
            let model = placed.model?;
            // The key is project/category/model: the project is the record's own.
            let project = leaderboard_project(key, placed.category, model)?;
            let row = (placed.category.unwrap_or("").to_owned(), model.to_owned());
            let record = (placed.sessions > 0).then(|| Arc::from(text.as_str()));
            Some((project, Update::Row(row, record)))
        }
        (OutputValue::Json(text), OutputTopic::JudgeQuality) => {
            let of: JudgeOf<'_> = serde_json::from_str(text).ok()?;
            // The key is project/judge, both the record's own.
            let (project, judge) = key.split_at_checked(of.project_id.len())?;
            let judge = judge.strip_prefix('/')?;
            (project == of.project_id && judge == of.judge).then_some(())?;
            Some((project, Update::Judge(judge, Arc::from(text.as_str()))))
        }
        _ => None,
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
                    .sessions
                    .projects
                    .get(project)
                    .and_then(|p| p.open.get(*session));
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
                    .quality
                    .get(project)
                    .is_some_and(|q| q.judges.get(judge).is_some());
                if kept {
                    self.judges.insert((*judge).to_owned(), Arc::clone(record));
                } else {
                    self.judges.remove(*judge);
                }
            }
            Update::JudgeKept(judge) => {
                let kept = state
                    .quality
                    .get(project)
                    .is_some_and(|q| q.judges.get(judge).is_some());
                if !kept {
                    self.judges.remove(*judge);
                }
            }
            Update::Completed => {
                self.completed = state
                    .judge_projects
                    .get(project)
                    .map(kept)
                    .unwrap_or_default();
            }
        }
    }
}

/// A judge project's kept consensus records, by session.
fn kept(j: &JudgeProject) -> BTreeMap<String, Arc<str>> {
    j.kept
        .records
        .iter()
        .map(|k| (k.session.clone(), Arc::clone(&k.record)))
        .collect()
}

/// The project of a `jury.leaderboard` key `project/category/model`, given its category and
/// model.
fn leaderboard_project<'k>(key: &'k str, category: Option<&str>, model: &str) -> Option<&'k str> {
    let rest = format!("/{}/{model}", category.unwrap_or(""));
    key.strip_suffix(rest.as_str())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::config::Config;
    use crate::engine::reputation::ReputationTable;
    use crate::engine::{Engine, InputTopic, Record, Settings};

    /// Vote batches and judge ballots of two projects (one with a `/` in its id) whose
    /// sessions complete, time out or stay open, as (topic, payload).
    fn events() -> Vec<(InputTopic, String)> {
        let mut out = Vec::new();
        for (p, project) in ["proj-a", "team/b"].into_iter().enumerate() {
            for i in 0..4 {
                out.push((
                    InputTopic::Votes,
                    format!(
                        r#"{{"event_id": "v{p}-{i}", "project_id": "{project}", "occurred_at": {}, "votes": [{{"voter_id": "u", "value": 0.{i}}}]}}"#,
                        1_795_168_800_000i64 + i * 1000
                    ),
                ));
            }
            for s in 0..3 {
                for judge in 0..2 {
                    let expected = if s == 2 { 3 } else { 2 };
                    out.push((
                        InputTopic::JudgeScores,
                        format!(
                            r#"{{"event_id": "b{p}-{s}-{judge}", "project_id": "{project}", "session_id": "s{s}", "occurred_at": {}, "judge": "j{judge}", "scores": {{"A": {}, "B": 5{}}}, "candidates": {{"A": {{"author": "m/a"}}, "B": {{"author": "m/b"}}{}}}, "expected_judges": {expected}, "category": "c"}}"#,
                            1_795_168_800_000i64 + s * 1000,
                            3 + 2 * judge + s,
                            // Only the first session scores m/c: a later refit republishes its
                            // row as of the refit.
                            if s == 0 { ", \"C\": 1" } else { "" },
                            if s == 0 { r#", "C": {"author": "m/c"}"# } else { "" }
                        ),
                    ));
                }
            }
        }
        out
    }

    /// Refits Bradley-Terry after every session, so rows are republished by refits.
    fn config() -> Config {
        let mut c = Config::default();
        c.leaderboard.bt_interval_secs = 0;
        c
    }

    /// Applies `events` in order to one journaled state as the service does, updating `view`.
    fn run(events: &[(InputTopic, String)], view: &View) -> (PartitionState, Vec<Output>) {
        run_with(&config(), events, view)
    }

    fn run_with(
        config: &Config,
        events: &[(InputTopic, String)],
        view: &View,
    ) -> (PartitionState, Vec<Output>) {
        let engine = Engine::new(Settings::of(config));
        let mut state = PartitionState::journaled();
        let mut reps = ReputationTable::default();
        let mut published = Vec::new();
        for (offset, (topic, payload)) in events.iter().enumerate() {
            let name = match topic {
                InputTopic::Votes => "jury.votes",
                _ => "jury.judge-scores",
            };
            let record = Record::new(name, Some(*topic), Some(payload.as_bytes()))
                .at(Some(0), Some(offset as i64));
            let mut out = Vec::new();
            let journaled = state.journal.as_ref().map_or(0, Vec::len);
            engine.process(&mut state, &mut reps, &record, &mut out);
            let changes = state.journal.clone().unwrap_or_default();
            view.applied(Unit::input(*topic, 0), &state, &changes[journaled..], &out);
            published.extend(out);
        }
        (state, published)
    }

    #[test]
    fn the_view_holds_what_was_last_published_and_the_open_sessions() {
        let view = View::default();
        view.assigned(Unit::input(InputTopic::Votes, 0));
        view.assigned(Unit::input(InputTopic::JudgeScores, 0));
        let (state, published) = run(&events(), &view);
        for project in ["proj-a", "team/b"] {
            let p = view.projects.get(project).expect("in the view");
            let last_score = published
                .iter()
                .rev()
                .find(|o| o.topic == OutputTopic::Scores && o.key.as_deref() == Some(project))
                .expect("a score");
            let OutputValue::Score(v) = &last_score.value else {
                panic!("a score value")
            };
            let score = p.score.as_ref().expect("a score");
            assert_eq!(
                (score.score, score.alpha, score.votes),
                (v.score, Some(v.alpha), v.votes)
            );
            // s0 and s1 completed (two of two judges), s2 waits for a third.
            let completed: Vec<&str> = p.completed.keys().map(String::as_str).collect();
            assert_eq!(completed, ["s0", "s1"]);
            let published_consensus = published
                .iter()
                .find(|o| o.topic == OutputTopic::Consensus && o.key.as_deref() == Some(project))
                .expect("a consensus");
            assert_eq!(&*p.completed["s0"], published_consensus.render());
            assert_eq!(p.open.keys().collect::<Vec<_>>(), ["s2"]);
            assert_eq!(p.open["s2"].ballots.len(), 2);
            let open = &state.sessions.projects[project].open["s2"];
            assert_eq!(*p.open["s2"].ballots["j1"], open.ballots["j1"]);
            // One row per model, the latest published.
            let keys: Vec<_> = p.leaderboard.keys().cloned().collect();
            let row = |m: &str| ("c".to_owned(), m.to_owned());
            assert_eq!(keys, [row("m/a"), row("m/b"), row("m/c")]);
            let last_row = published
                .iter()
                .rev()
                .find(|o| {
                    o.topic == OutputTopic::Leaderboard
                        && o.key.as_deref() == Some(&format!("{project}/c/m/a"))
                })
                .expect("a row");
            assert_eq!(&*p.leaderboard[&keys[0]], last_row.render());
        }
        view.revoked(Unit::input(InputTopic::Votes, 0));
        view.revoked(Unit::input(InputTopic::JudgeScores, 0));
        assert!(view.projects.is_empty() && view.owned.is_empty());
    }

    #[test]
    fn revoking_one_topics_partition_keeps_what_the_other_gave() {
        // With by_key a partition's votes and judge scores are two units, revoked apart.
        let view = View::default();
        view.assigned(Unit::input(InputTopic::Votes, 0));
        view.assigned(Unit::input(InputTopic::JudgeScores, 0));
        run(&events(), &view);
        view.revoked(Unit::input(InputTopic::Votes, 0));
        for project in ["proj-a", "team/b"] {
            let p = view.projects.get(project).expect("still in the view");
            assert!(p.score.is_none(), "the votes unit's part is gone");
            assert_eq!(p.completed.len(), 2, "the judge-scores unit's part stays");
            assert!(!p.leaderboard.is_empty());
        }
        assert!(
            view.owned.get(&0).is_some(),
            "partition 0 is still partly owned"
        );
        view.revoked(Unit::input(InputTopic::JudgeScores, 0));
        assert!(view.projects.is_empty() && view.owned.is_empty());
        // And the other way round: the scores stay.
        let view = View::default();
        run(&events(), &view);
        view.revoked(Unit::input(InputTopic::JudgeScores, 0));
        let p = view.projects.get("proj-a").expect("still in the view");
        assert!(p.score.is_some() && p.completed.is_empty() && p.open.is_empty());
    }

    #[test]
    fn a_judge_the_state_forgot_does_not_come_back() {
        // judge_quality.max_judges = 1: the item has its vote; the ballot that completes a
        // session of two judges pairs both in one record, and the second forgets the first.
        // The view holds what the state holds: the second alone.
        let mut config = config();
        config.judge_quality.enabled = true;
        config.judge_quality.max_judges = 1;
        config.judge_quality.min_human_votes = 1;
        let engine = Engine::new(Settings::of(&config));
        let mut state = PartitionState::journaled();
        let mut reps = ReputationTable::default();
        let view = View::default();
        let mut offset = 0;
        let mut send = |topic: InputTopic, payload: String| {
            let name = match topic {
                InputTopic::Votes => "jury.votes",
                _ => "jury.judge-scores",
            };
            let record =
                Record::new(name, Some(topic), Some(payload.as_bytes())).at(Some(0), Some(offset));
            offset += 1;
            let mut out = Vec::new();
            let journaled = state.journal.as_ref().map_or(0, Vec::len);
            engine.process(&mut state, &mut reps, &record, &mut out);
            let changes = state.journal.clone().unwrap_or_default();
            view.applied(Unit::projects(0), &state, &changes[journaled..], &out);
            out
        };
        send(
            InputTopic::Votes,
            r#"{"event_id": "v", "project_id": "p", "item_id": "X", "occurred_at": 1795168800000, "votes": [{"voter_id": "u", "value": 1}]}"#.to_owned(),
        );
        let mut out = Vec::new();
        for judge in ["j1", "j2"] {
            out = send(
                InputTopic::JudgeScores,
                format!(
                    r#"{{"event_id": "b-{judge}", "project_id": "p", "session_id": "s", "occurred_at": 1795168801000, "judge": "{judge}", "scores": {{"X": 7}}, "expected_judges": 2}}"#
                ),
            );
        }
        let published: Vec<&str> = out
            .iter()
            .filter(|o| o.topic == OutputTopic::JudgeQuality)
            .filter_map(|o| o.key.as_deref())
            .collect();
        assert_eq!(published, ["p/j1", "p/j2"], "both paired in the record");
        let kept: Vec<String> = state
            .quality
            .get("p")
            .unwrap()
            .judges
            .iter()
            .map(|(j, _)| j.to_owned())
            .collect();
        assert_eq!(kept, ["j2"]);
        let p = view.projects.get("p").expect("in the view");
        assert_eq!(p.judges.keys().collect::<Vec<_>>(), ["j2"]);
    }

    #[test]
    fn only_the_latest_completed_sessions_are_kept() {
        let view = View::default();
        let mut config = config();
        config.sessions.completed_records = 1;
        let (state, _) = run_with(&config, &events(), &view);
        let p = view.projects.get("proj-a").expect("in the view");
        let completed: Vec<&str> = p.completed.keys().map(String::as_str).collect();
        assert_eq!(completed, ["s1"]);
        let kept = &state.judge_projects["proj-a"].kept.records;
        assert_eq!((kept.len(), kept[0].seq), (1, 1));
    }

    #[test]
    fn a_leaderboard_key_names_its_project_whatever_its_slashes() {
        assert_eq!(
            leaderboard_project("team/b/c/m/a", Some("c"), "m/a"),
            Some("team/b")
        );
        assert_eq!(leaderboard_project("p//m", None, "m"), Some("p"));
        assert_eq!(leaderboard_project("p/c/m", Some("d"), "m"), None);
    }

    proptest! {
        /// A view filled from a restored state answers as the view kept live did: the same
        /// scores (all of `jury.scores`), open sessions and leaderboard rows, whatever order the
        /// projects' records interleaved in.
        #[test]
        fn a_restored_view_answers_as_the_live_one(seed in any::<u64>()) {
            let mut events = events();
            // Interleave the two projects' records, each project's kept in order.
            let (a, b): (Vec<_>, Vec<_>) = events.drain(..).partition(|(_, e)| e.contains("proj-a"));
            let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
            let mut bits = seed;
            while a.peek().is_some() || b.peek().is_some() {
                let take_a = b.peek().is_none() || (a.peek().is_some() && bits & 1 == 1);
                bits = bits.rotate_right(1);
                events.extend(if take_a { a.next() } else { b.next() });
            }
            let live = View::default();
            let (state, _) = run(&events, &live);
            let restored = View::default();
            let settings = Settings::of(&config());
            restored.restored(Unit::projects(0), &state, &settings);
            for project in ["proj-a", "team/b"] {
                let (l, r) = (&live.projects.get(project).unwrap(), &restored.projects.get(project).unwrap());
                prop_assert_eq!(&l.score, &r.score);
                prop_assert_eq!(&l.open, &r.open);
                prop_assert_eq!(&l.leaderboard, &r.leaderboard);
                prop_assert_eq!(&l.completed, &r.completed);
            }
            prop_assert!(!restored.owned.get(&0).unwrap().restoring);
        }
    }
}
