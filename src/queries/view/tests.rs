use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::engine::output::OutputTopic;
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, InputTopic, Record};

/// Vote batches and judge ballots of two projects (one with a `/` in its id) whose
/// sessions complete, time out or stay open, as (topic, payload).
fn events() -> Vec<(InputTopic, String)> {
    let mut out = Vec::new();
    for (p, project) in ["proj-a", "team/b"].into_iter().enumerate() {
        for i in 0..4 {
            out.push((
                InputTopic::Votes,
                format!(
                    r#"{{"event_id": "v{p}-{i}", "project_id": "{project}", "item_id": "i{}", "occurred_at": {}, "votes": [{{"voter_id": "u", "value": 0.{i}}}, {{"voter_id": "w{}", "value": 0.9}}]}}"#,
                    i % 3,
                    1_795_168_800_000i64 + i * 1000,
                    i % 2
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
    let engine = Engine::new(config.engine_settings());
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
        // The end of the runtime's cycle: what was held is published.
        let mut held = Vec::new();
        engine.release_reviewers(&mut state, &mut held);
        view.published(Unit::input(*topic, 0), &state, &held);
        published.extend(held);
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
        let open = &state.projects[project].sessions.open["s2"];
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
    let engine = Engine::new(config.engine_settings());
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
        .quality("p")
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
    let kept = &state.judges("proj-a").unwrap().kept.records;
    assert_eq!((kept.len(), kept[0].seq), (1, 1));
}

#[test]
fn records_are_filed_under_what_the_engine_says_they_show() {
    let view = View::default();
    let unit = Unit::projects(3);
    let row = |live: bool, text: &str| {
        Output::json(OutputTopic::Leaderboard, Some("any key".into()), &text).showing(Shows::Row {
            project: "team/b".into(),
            category: "c".into(),
            model: "m/a".into(),
            live,
        })
    };
    let judge = Output::json(OutputTopic::JudgeQuality, None, &"j").showing(Shows::Judge {
        project: "team/b".into(),
        judge: "gpt/4".into(),
    });
    // A record that shows nothing of a project's state (a consensus) changes no snapshot.
    let consensus = Output::json(OutputTopic::Consensus, Some("team/b".into()), &"c");
    view.published(
        unit,
        &PartitionState::default(),
        &[row(true, "live row"), consensus],
    );
    let key = ("c".to_owned(), "m/a".to_owned());
    {
        let p = view
            .projects
            .get("team/b")
            .expect("filed under its project");
        assert_eq!(p.leaderboard.get(&key).map(|r| &**r), Some(r#""live row""#));
        assert_eq!(p.partition, 3);
    }
    assert_eq!(view.projects.len(), 1);
    // The row published once more as it left the window leaves the view; a judge record the
    // state does not keep (this empty state keeps none) does not enter it.
    view.published(
        unit,
        &PartitionState::default(),
        &[row(false, "gone"), judge],
    );
    let p = view.projects.get("team/b").expect("still there");
    assert!(p.leaderboard.is_empty());
    assert!(p.judges.is_empty());
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
        let settings = config().engine_settings();
        restored.restored(Unit::projects(0), &state, &settings);
        for project in ["proj-a", "team/b"] {
            let (l, r) = (&live.projects.get(project).unwrap(), &restored.projects.get(project).unwrap());
            prop_assert_eq!(&l.score, &r.score);
            prop_assert_eq!(&l.open, &r.open);
            prop_assert_eq!(&l.leaderboard, &r.leaderboard);
            prop_assert_eq!(&l.completed, &r.completed);
            prop_assert_eq!(&l.reviewers, &r.reviewers);
            prop_assert_eq!(l.reviewers.len(), 3);
        }
        prop_assert!(!restored.owned.get(&0).unwrap().restoring);
    }
}

#[test]
fn a_page_is_the_next_ids_after_the_cursor_in_order() {
    let view = View::default();
    for id in ["d", "a", "c", "b", "e"] {
        view.hold(id, ProjectView::default());
    }
    let ids = |after, limit| {
        let (page, more) = view.page(after, limit, |id, _| Some(id.to_owned()));
        (page.join(","), more)
    };
    assert_eq!(ids(None, 2), ("a,b".to_owned(), true));
    assert_eq!(ids(Some("b"), 3), ("c,d,e".to_owned(), false));
    assert_eq!(ids(Some("bb"), 1), ("c".to_owned(), true));
    assert_eq!(ids(Some("e"), 3), (String::new(), false));
    assert_eq!(ids(None, 5), ("a,b,c,d,e".to_owned(), false));
    // Those the reader skips do not count towards the page.
    let (page, more) = view.page(None, 2, |id, _| (id != "b").then(|| id.to_owned()));
    assert_eq!((page.join(","), more), ("a,c".to_owned(), true));
}

#[test]
fn a_revoked_partitions_projects_leave_the_listing() {
    let view = View::default();
    let unit = Unit::projects(0);
    view.assigned(unit);
    for id in ["p1", "p2"] {
        view.hold(
            id,
            ProjectView {
                units: [unit].into(),
                ..ProjectView::default()
            },
        );
    }
    assert_eq!(
        view.page(None, 10, |id, _| Some(id.to_owned())).0,
        ["p1", "p2"]
    );
    view.revoked(unit);
    assert!(
        view.page(None, 10, |id, _| Some(id.to_owned()))
            .0
            .is_empty()
    );
    assert!(view.ids.read().unwrap().is_empty());
}
