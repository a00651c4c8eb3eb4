//! The judge-quality pipeline, records in and records out, with hand-checked numbers.

use serde_json::Value;

use super::*;
use crate::config::{Config, Partitioning};
use crate::engine::model::judge_quality::ProjectQuality;
use crate::engine::reputation::ReputationTable;
use crate::engine::{InputTopic, Record};
use crate::topics::TopicTable;

/// An engine over `config`, one state, and everything published.
struct Run {
    engine: Engine,
    state: PartitionState,
    reps: ReputationTable,
    out: Vec<Output>,
    offset: i64,
}

impl Run {
    fn new(config: &Config) -> Run {
        Run {
            engine: Engine::new(config.engine_settings()),
            state: PartitionState::default(),
            reps: ReputationTable::default(),
            out: Vec::new(),
            offset: 0,
        }
    }

    /// Sends `payload` on `topic` as replay does.
    fn send(&mut self, topic: &str, payload: &str) -> Outcome {
        let record = Record::new(
            topic,
            TopicTable::default().input(topic),
            Some(payload.as_bytes()),
        )
        .at(Some(0), Some(self.offset));
        self.offset += 1;
        self.engine
            .process(&mut self.state, &mut self.reps, &record, &mut self.out)
    }

    /// The event time of the next record: a second per record from 2026-11-20T10:00:00Z, so
    /// pairs are ordered by when their last side arrived.
    fn at_ms(&self) -> i64 {
        1_795_168_800_000 + self.offset * 1000
    }

    /// Votes `(value, reputation)` on `item`.
    fn votes(&mut self, item: &str, votes: &[(f64, f64)]) {
        let votes: Vec<String> = votes
            .iter()
            .map(|(v, r)| format!(r#"{{"voter_id":"u","value":{v},"reputation":{r}}}"#))
            .collect();
        let payload = format!(
            r#"{{"event_id":"v{}","project_id":"p","item_id":"{item}","occurred_at":{},"votes":[{}]}}"#,
            self.offset,
            self.at_ms(),
            votes.join(",")
        );
        assert_eq!(self.send("jury.votes", &payload), Outcome::Applied);
    }

    /// A session of `scores`, each judge's scores of its candidates on 0..=10, complete once
    /// all of them reported.
    fn session(&mut self, session: &str, scores: &[(&str, &[(&str, f64)])]) {
        for (judge, candidates) in scores {
            let s: Vec<String> = candidates
                .iter()
                .map(|(c, x)| format!(r#""{c}":{x}"#))
                .collect();
            let payload = format!(
                r#"{{"event_id":"b{}","project_id":"p","session_id":"{session}","occurred_at":{},"judge":"{judge}","scale":{{"min":0,"max":10}},"scores":{{{}}},"expected_judges":{}}}"#,
                self.offset,
                self.at_ms(),
                s.join(","),
                scores.len()
            );
            assert_eq!(self.send("jury.judge-scores", &payload), Outcome::Applied);
        }
    }

    /// The published records of `topic`, as JSON.
    fn published(&self, topic: OutputTopic) -> Vec<Value> {
        self.out
            .iter()
            .filter(|o| o.topic == topic)
            .map(|o| serde_json::from_str(&o.render()).unwrap())
            .collect()
    }
}

/// The default configuration with judge quality on.
fn on() -> Config {
    let mut config = Config::default();
    config.judge_quality.enabled = true;
    config
}

fn close(v: &Value, x: f64) -> bool {
    v.as_f64().is_some_and(|v| (v - x).abs() < 1e-9)
}

#[test]
fn a_pair_forms_when_the_item_has_enough_votes_and_publishes_its_judge() {
    let mut run = Run::new(&on());
    // Two votes on A: not enough (min_human_votes = 3); the session's scores wait.
    run.votes("A", &[(1.0, 2.0), (0.0, 1.0)]);
    run.session("s1", &[("j1", &[("A", 8.0), ("B", 2.0)])]);
    assert!(run.published(OutputTopic::JudgeQuality).is_empty());
    // The third vote: h = (2*1 + 1*0 + 1*0.5) / 4 = 0.625, s = 0.8.
    run.votes("A", &[(0.5, 1.0)]);
    let records = run.published(OutputTopic::JudgeQuality);
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (r["project_id"].as_str(), r["judge"].as_str()),
        (Some("p"), Some("j1"))
    );
    assert_eq!(r["pairs"], 1);
    assert!(
        close(&r["mean_abs_diff"], 0.175) && close(&r["bias"], 0.175),
        "{r}"
    );
    // One pair: no correlation, no kappa, and they are null, not NaN.
    assert!(r["pearson_r"].is_null() && r["kappa"].is_null() && r["p_value"].is_null());
    // The pair's time: the later of the session's (10:00:01) and the humans' score's
    // (10:00:02, when its third vote came).
    assert_eq!(r["last_event_at"], "2026-11-20T10:00:02Z");
    let key = run
        .out
        .iter()
        .find(|o| o.topic == OutputTopic::JudgeQuality);
    assert_eq!(key.and_then(|o| o.key.as_deref()), Some("p/j1"));
    // B never got votes: its score still waits.
    let q = run.state.quality("p").unwrap();
    assert!(q.waiting.get("B").is_some() && q.waiting.get("A").is_none());
}

#[test]
fn a_judge_far_from_the_humans_asks_for_a_review_once_per_item() {
    let mut run = Run::new(&on());
    run.votes("A", &[(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]);
    // j1 says 10 (s = 1, gap 1), j2 says 4 (gap 0.4, within review_gap 0.5).
    run.session(
        "s1",
        &[
            ("j1", &[("A", 10.0), ("B", 0.0)]),
            ("j2", &[("A", 4.0), ("B", 1.0)]),
        ],
    );
    let requests = run.published(OutputTopic::ReviewRequests);
    let gaps: Vec<&Value> = requests
        .iter()
        .filter(|r| r["reason"] == "judge_human_gap")
        .collect();
    assert_eq!(gaps.len(), 1, "{requests:?}");
    let r = gaps[0];
    assert_eq!(
        (r["item_id"].as_str(), r["session_id"].as_str()),
        (Some("A"), Some("s1"))
    );
    assert_eq!(r["judges"], serde_json::json!(["j1"]));
    assert!(close(&r["gap"], 1.0));
    assert!(r.get("agreement").is_none());
}

#[test]
fn a_session_with_low_agreement_asks_for_a_review() {
    let mut run = Run::new(&on());
    // Scores 0 and 10 of one candidate: variance 0.25, agreement 1 - min(0.25 / 0.0625, 1) = 0.
    run.session("s1", &[("j1", &[("A", 0.0)]), ("j2", &[("A", 10.0)])]);
    let requests = run.published(OutputTopic::ReviewRequests);
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(
        (r["reason"].as_str(), r["session_id"].as_str()),
        (Some("low_agreement"), Some("s1"))
    );
    assert!(close(&r["agreement"], 0.0));
    assert_eq!(r["judges"], serde_json::json!(["j1", "j2"]));
    assert!(r.get("item_id").is_none());
}

#[test]
fn a_judge_that_inverts_the_humans_alerts_once_and_rearms() {
    let mut config = on();
    config.judge_quality.min_pairs = 4;
    config.judge_quality.min_human_votes = 1;
    let mut run = Run::new(&config);
    let alerts = |run: &Run| {
        run.published(OutputTopic::BiasAlerts)
            .into_iter()
            .filter(|a| a["kind"] == "judge_human_disagreement")
            .count()
    };
    // Humans: items i0..i5 alternately good and bad; the judge says the opposite.
    for i in 0..6 {
        let good = i % 2 == 0;
        run.votes(&format!("i{i}"), &[(if good { 1.0 } else { 0.0 }, 1.0)]);
        let score = if good { 1.0 } else { 9.0 };
        run.session(
            &format!("s{i}"),
            &[("j", &[(format!("i{i}").as_str(), score)])],
        );
    }
    // Kappa is -1 from the second pair on; the alert waits for 4 pairs and fires once.
    assert_eq!(alerts(&run), 1);
    let alert = run
        .published(OutputTopic::BiasAlerts)
        .into_iter()
        .find(|a| a["kind"] == "judge_human_disagreement")
        .unwrap();
    assert_eq!(
        (alert["subject"].as_str(), alert["session_id"].as_str()),
        (Some("j"), Some("s3"))
    );
    assert!(close(&alert["value"], -1.0) && alert["sample_size"] == 4);
    // It agrees from now on: the window (500) still holds the bad pairs, so no re-arm yet;
    // with a window of 4 it re-arms once the bad pairs are gone, and alerts again if it
    // inverts once more.
    config.judge_quality.window = 4;
    let mut run = Run::new(&config);
    let mut item = 0;
    let mut pair = |run: &mut Run, agree: bool| {
        let good = item % 2 == 0;
        let i = format!("i{item}");
        run.votes(&i, &[(if good { 1.0 } else { 0.0 }, 1.0)]);
        let score = if good == agree { 9.0 } else { 1.0 };
        run.session(&format!("s{item}"), &[("j", &[(i.as_str(), score)])]);
        item += 1;
    };
    for agree in [
        false, false, false, false, true, true, true, true, false, false, false, false,
    ] {
        pair(&mut run, agree);
    }
    assert_eq!(alerts(&run), 2);
    // And drift: kappa went from -1 to 1 and back to -1 over windows of 4.
    let drift = run
        .published(OutputTopic::BiasAlerts)
        .into_iter()
        .filter(|a| a["kind"] == "judge_drift")
        .count();
    assert_eq!(drift, 1);
}

#[test]
fn identical_judges_are_one_effective_judge_and_independent_ones_count() {
    let mut config = on();
    config.judge_quality.min_shared = 4;
    let mut run = Run::new(&config);
    let consensus = |run: &Run| {
        run.published(OutputTopic::Consensus)
            .last()
            .cloned()
            .unwrap()
    };
    // Three judges that always give the same scores.
    for s in 0..3 {
        let scores: Vec<(String, f64)> = (0..2)
            .map(|c| (format!("c{s}{c}"), ((s * 3 + c * 5) % 11) as f64))
            .collect();
        let scores: Vec<(&str, f64)> = scores.iter().map(|(c, x)| (c.as_str(), *x)).collect();
        run.session(
            &format!("s{s}"),
            &[("j1", &scores), ("j2", &scores), ("j3", &scores)],
        );
    }
    // Six shared candidates from the third session on (the first two sessions had 2 and 4).
    let last = consensus(&run);
    assert!(close(&last["effective_judges"], 1.0), "{last}");
    assert_eq!(last["effective_judges_basis"], "full");
    // A first session of a fresh project: 2 shared candidates, below min_shared: counted as
    // uncorrelated, and said to be partial.
    let mut fresh = Run::new(&config);
    fresh.session(
        "s",
        &[
            ("j1", &[("a", 1.0), ("b", 9.0)]),
            ("j2", &[("a", 1.0), ("b", 9.0)]),
        ],
    );
    let first = consensus(&fresh);
    assert!(close(&first["effective_judges"], 2.0) && first["effective_judges_basis"] == "partial");
}

/// Four sessions in which "good" agrees with the humans (kappa 1) and "bad" inverts them
/// (kappa -1: learned weight 0), each item voted on once.
fn good_and_bad(config: &Config) -> Run {
    let mut run = Run::new(config);
    for i in 0..4 {
        let good = i % 2 == 0;
        let item = format!("i{i}");
        run.votes(&item, &[(if good { 1.0 } else { 0.0 }, 1.0)]);
        let (g, b) = if good { (9.0, 1.0) } else { (1.0, 9.0) };
        run.session(
            &format!("s{i}"),
            &[
                ("good", &[(item.as_str(), g)]),
                ("bad", &[(item.as_str(), b)]),
            ],
        );
    }
    run
}

#[test]
fn learned_weights_follow_each_judges_kappa_after_min_pairs() {
    let mut config = on();
    config.judge_quality.min_human_votes = 1;
    config.judge_quality.min_pairs = 4;
    config.sessions.judge_weighting = Weighting::Learned;
    let mut run = good_and_bad(&config);
    // One candidate: the weighted average is good's score alone, 0.7.
    run.session("last", &[("good", &[("x", 7.0)]), ("bad", &[("x", 1.0)])]);
    let last = run.published(OutputTopic::Consensus).pop().unwrap();
    assert!(close(&last["consensus"]["value"], 0.7), "{last}");
    assert_eq!(last["weighting"], "learned");
    // Configured weights (1 each) average them: 0.4.
    config.sessions.judge_weighting = Weighting::Configured;
    let mut plain = Run::new(&config);
    plain.session("last", &[("good", &[("x", 7.0)]), ("bad", &[("x", 1.0)])]);
    let last = plain.published(OutputTopic::Consensus).pop().unwrap();
    assert!(close(&last["consensus"]["value"], 0.4), "{last}");
    assert_eq!(last["weighting"], "configured");
    // Below min_pairs (4 pairs each, 5 needed) the configured weights hold.
    config.sessions.judge_weighting = Weighting::Learned;
    config.judge_quality.min_pairs = 5;
    let mut early = good_and_bad(&config);
    early.session("last", &[("good", &[("x", 7.0)]), ("bad", &[("x", 1.0)])]);
    let last = early.published(OutputTopic::Consensus).pop().unwrap();
    assert!(close(&last["consensus"]["value"], 0.4), "{last}");
}

#[test]
fn a_consensus_whose_learned_weights_vanish_falls_back_to_the_configured_ones() {
    let mut config = on();
    config.judge_quality.min_human_votes = 1;
    config.judge_quality.min_pairs = 2;
    config.sessions.judge_weighting = Weighting::Learned;
    let mut run = good_and_bad(&config);
    // Only "bad" (weight 0) judges the next session: the learned weights leave no value, so
    // the configured weight (1) gives 2 on the 0..10 scale and the record says so, with a
    // counted marker.
    run.out.clear();
    run.session("only-bad", &[("bad", &[("x", 2.0)])]);
    let c = run
        .out
        .iter()
        .find(|o| o.topic == OutputTopic::Consensus)
        .expect("a consensus");
    assert_eq!(
        c.counted,
        Some(crate::engine::output::Counted::WeightsFallback)
    );
    let last = run.published(OutputTopic::Consensus).pop().unwrap();
    assert!(close(&last["consensus"]["value"], 0.2), "{last}");
    assert_eq!(last["weighting"], "configured_fallback");
    // Several candidates, all scored by bad alone: their mean scores come back too.
    run.session("two", &[("bad", &[("x", 2.0), ("y", 10.0)])]);
    let last = run.published(OutputTopic::Consensus).pop().unwrap();
    assert_eq!(last["weighting"], "configured_fallback");
    let means: Vec<f64> = last["rankings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mean_score"].as_f64().expect("a mean score"))
        .collect();
    assert_eq!(means.len(), 2);
}

#[test]
fn by_key_observes_no_votes() {
    let mut config = on();
    config.input.partitioning = Partitioning::ByKey;
    let mut run = Run::new(&config);
    // by_key wants records keyed by project: the votes are applied, not observed.
    let record = Record::new("jury.votes", Some(InputTopic::Votes), Some(br#"{"event_id":"v","project_id":"p","item_id":"A","occurred_at":"2026-11-20T10:00:00Z","votes":[{"voter_id":"u","value":1},{"voter_id":"w","value":1},{"voter_id":"x","value":1}]}"#)).at(Some(0), Some(0)).keyed(Some(b"p"), None);
    let outcome = run
        .engine
        .process(&mut run.state, &mut run.reps, &record, &mut run.out);
    assert_eq!(outcome, Outcome::Applied);
    assert!(run.state.projects.contains_key("p"));
    assert_eq!(run.state.quality("p"), Some(&ProjectQuality::default()));
}

#[test]
fn an_item_id_beyond_the_id_limit_is_not_kept() {
    let mut config = on();
    config.limits.max_id_bytes = 8;
    let mut run = Run::new(&config);
    run.votes("a-very-long-item", &[(1.0, 1.0)]);
    assert!(run.state.quality("p").is_none_or(|q| q.items.is_empty()));
}

/// What a run leaves for the comparison of interleavings: each judge's last record, each
/// reviewer's record as the state ends, and the review requests.
fn results(
    run: &Run,
) -> (
    std::collections::BTreeMap<String, String>,
    std::collections::BTreeSet<String>,
) {
    let mut table = std::collections::BTreeMap::new();
    if let Some(q) = run.state.quality("p") {
        let max_reviewers = run.engine.settings.reviewers.max_reviewers;
        let fitted = q.fit_reviewers(&run.state.quality, max_reviewers);
        for (reviewer, r) in &fitted.reviewers {
            let findings = q.reviewers.findings(reviewer);
            let min_items = run.engine.settings.reviewers.min_items;
            let record = crate::engine::reviewer_record("p", reviewer, r, (findings, min_items));
            table.insert(format!("reviewer {reviewer}"), record.render().into_owned());
        }
    }
    let mut requests = std::collections::BTreeSet::new();
    for o in &run.out {
        match o.topic {
            OutputTopic::JudgeQuality => {
                table.insert(o.key.clone().unwrap_or_default(), o.render().into_owned());
            }
            OutputTopic::ReviewRequests => {
                requests.insert(o.render().into_owned());
            }
            _ => {}
        }
    }
    (table, requests)
}

proptest::proptest! {
    /// Votes and judge scores arrive on two topics, and no producer decides how they
    /// interleave in a project's log: each topic's own order kept, any interleaving gives the
    /// same judge-quality table, reviewers' figures (agreement with the judges included) and
    /// review requests. With a window of 3 pairs and up to 20 sessions per judge, most judges
    /// have more pairs than their window.
    #[test]
    fn pairs_do_not_depend_on_how_votes_and_sessions_interleave(
        votes in proptest::collection::vec((0..4usize, 0..=4u8, 1..=3u8), 0..40),
        ballots in proptest::collection::vec((0..3usize, 0..4usize, 0..=10u8), 0..60),
        merge in proptest::collection::vec(proptest::bool::ANY, 100),
    ) {
        let vote = |(i, &(item, value, rep)): (usize, &(usize, u8, u8))| format!(
            r#"{{"event_id":"v{i}","project_id":"p","item_id":"i{item}","occurred_at":{},"votes":[{{"voter_id":"u","value":{},"reputation":{rep}}},{{"voter_id":"w{}","value":{}}}]}}"#,
            1_795_168_800_000 + i as i64 * 1000,
            f64::from(value) / 4.0,
            i % 3,
            f64::from(4 - value) / 4.0
        );
        let ballot = |(i, &(judge, item, score)): (usize, &(usize, usize, u8))| format!(
            r#"{{"event_id":"b{i}","project_id":"p","session_id":"s{i}","occurred_at":{},"judge":"j{judge}","scale":{{"min":0,"max":10}},"scores":{{"i{item}":{score}}},"expected_judges":1}}"#,
            1_795_168_800_000 + i as i64 * 1000
        );
        let votes: Vec<String> = votes.iter().enumerate().map(vote).collect();
        let ballots: Vec<String> = ballots.iter().enumerate().map(ballot).collect();
        let mut config = on();
        config.judge_quality.window = 3;
        let run = |take_vote: &dyn Fn(usize) -> bool| {
            let mut run = Run::new(&config);
            let (mut v, mut b) = (votes.iter().peekable(), ballots.iter().peekable());
            let mut step = 0;
            while v.peek().is_some() || b.peek().is_some() {
                let vote_next = b.peek().is_none() || (v.peek().is_some() && take_vote(step));
                if vote_next {
                    run.send("jury.votes", v.next().unwrap());
                } else {
                    run.send("jury.judge-scores", b.next().unwrap());
                }
                step += 1;
            }
            results(&run)
        };
        let merged = run(&|step| merge.get(step).copied().unwrap_or(true));
        let votes_first = run(&|_| true);
        let sessions_first = run(&|_| false);
        proptest::prop_assert_eq!(&merged, &votes_first);
        proptest::prop_assert_eq!(&merged, &sessions_first);
    }
}

/// The `judge_items_unmatched` alerts published so far.
fn unmatched(run: &Run) -> Vec<Value> {
    run.published(OutputTopic::BiasAlerts)
        .into_iter()
        .filter(|a| a["kind"] == "judge_items_unmatched")
        .collect()
}

/// The `judge_items_short_of_votes` alerts published so far.
fn short_of_votes(run: &Run) -> Vec<Value> {
    run.published(OutputTopic::BiasAlerts)
        .into_iter()
        .filter(|a| a["kind"] == "judge_items_short_of_votes")
        .collect()
}

/// Judge quality on, with a judge's alerts (and so the findings that none pairs) at 3 pairs.
/// Judge `j1` scores candidate `c{k}` 7 in session `s{k}` (its only one).
fn judge_scores(run: &mut Run, k: usize) {
    run.session(&format!("s{k}"), &[("j1", &[(&format!("c{k}"), 7.0)])]);
}

fn three_pairs() -> Config {
    let mut config = on();
    config.judge_quality.min_pairs = 3;
    config
}

#[test]
fn judges_and_humans_on_different_items_are_said_once_until_a_pair_forms() {
    let mut run = Run::new(&three_pairs());
    for k in 0..3 {
        judge_scores(&mut run, k);
        assert!(unmatched(&run).is_empty());
        run.votes(&format!("h{k}"), &[(1.0, 1.0)]);
    }
    // The third voted item: three items the judge scored wait, three hold votes, none both.
    let alerts = unmatched(&run);
    assert_eq!(alerts.len(), 1);
    let a = &alerts[0];
    assert_eq!(a["project_id"], "p");
    assert_eq!(a["session_id"], "h2");
    assert_eq!(a["scope"], "project");
    assert_eq!(a["subject"], Value::Null);
    assert!(close(&a["value"], 0.0) && close(&a["threshold"], 3.0));
    assert_eq!(a["sample_size"], 3);
    let detail = a["detail"].as_str().unwrap();
    assert!(
        detail.contains("none of the 3 items its judges scored")
            && detail.contains("among the 3 items with votes")
            && detail.contains(r#"candidate ids (such as "c0")"#)
            && detail.contains(r#"item_id (such as "h0")"#),
        "{detail}"
    );
    assert!(run.state.quality("p").is_some_and(|q| q.unmatched));
    // Said once: more of the same says nothing.
    run.session("s3", &[("j1", &[("c3", 7.0)])]);
    run.votes("h3", &[(1.0, 1.0)]);
    assert_eq!(unmatched(&run).len(), 1);
    // The humans vote on a judged item: a pair, and the finding is over.
    run.votes("c0", &[(1.0, 1.0), (1.0, 1.0), (1.0, 1.0)]);
    assert_eq!(run.published(OutputTopic::JudgeQuality).len(), 1);
    assert!(run.state.quality("p").is_some_and(|q| !q.unmatched));
    assert_eq!(unmatched(&run).len(), 1);
}

#[test]
fn judges_scoring_before_the_humans_vote_are_found_apart_at_the_vote_or_the_session() {
    // Every judge score first: found at the third voted item.
    let mut run = Run::new(&three_pairs());
    for k in 0..4 {
        judge_scores(&mut run, k);
    }
    for k in 0..3 {
        run.votes(&format!("h{k}"), &[(1.0, 1.0)]);
    }
    let alerts = unmatched(&run);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0]["session_id"], "h2");
    assert!(
        alerts[0]["detail"]
            .as_str()
            .unwrap()
            .contains("none of the 4 items")
    );
    // Every vote first: found at the third session, which names itself.
    let mut run = Run::new(&three_pairs());
    for k in 0..3 {
        run.votes(&format!("h{k}"), &[(1.0, 1.0)]);
    }
    for k in 0..3 {
        judge_scores(&mut run, k);
    }
    let alerts = unmatched(&run);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0]["session_id"], "s2");
}

#[test]
fn judges_and_humans_sharing_an_item_are_not_said_to_be_apart() {
    // The humans have voted on c0 once (a pair needs three votes): the ids meet, the votes are
    // not complete yet, and one judged item with votes is too few to say they never will be.
    let mut run = Run::new(&three_pairs());
    run.votes("c0", &[(1.0, 1.0)]);
    for k in 0..5 {
        judge_scores(&mut run, k);
        run.votes(&format!("h{k}"), &[(1.0, 1.0)]);
    }
    assert!(unmatched(&run).is_empty() && short_of_votes(&run).is_empty());
    assert!(run.state.quality("p").is_some_and(|q| !q.unmatched));
    // Below the threshold on either side, nothing is said either.
    let mut run = Run::new(&three_pairs());
    for k in 0..2 {
        judge_scores(&mut run, k);
    }
    for k in 0..10 {
        run.votes(&format!("h{k}"), &[(1.0, 1.0)]);
    }
    assert!(unmatched(&run).is_empty());
}

#[test]
fn judged_items_short_of_votes_are_said_once_until_a_pair_forms() {
    // Each item gets two votes (a frontend that asks two reviewers), where a humans' score
    // needs three (min_human_votes): the ids meet, and nothing can ever pair.
    let mut run = Run::new(&three_pairs());
    for k in 0..3 {
        judge_scores(&mut run, k);
        assert!(short_of_votes(&run).is_empty());
        run.votes(&format!("c{k}"), &[(1.0, 1.0), (0.0, 1.0)]);
    }
    // The third voted item: three judged items wait, all three with votes, none with three.
    let alerts = short_of_votes(&run);
    assert_eq!(alerts.len(), 1);
    assert!(unmatched(&run).is_empty());
    let a = &alerts[0];
    assert_eq!(a["project_id"], "p");
    assert_eq!(a["session_id"], "c2");
    assert_eq!(a["scope"], "project");
    assert_eq!(a["subject"], Value::Null);
    assert!(close(&a["value"], 2.0) && close(&a["threshold"], 3.0));
    assert_eq!(a["sample_size"], 3);
    assert_eq!(
        a["detail"],
        "no judge score of p has paired with the humans': 3 of the 3 items its judges scored \
         have votes, none the 3 votes carrying weight (judge_quality.min_human_votes) that make \
         an item's humans' score: the most is 2, on \"c0\". If each item is reviewed fewer \
         times, set judge_quality.min_human_votes to what it gets; if more votes are coming, \
         the first pair ends this. (A vote of reputation 0 carries no weight.)"
    );
    assert!(run.state.quality("p").is_some_and(|q| q.unmatched));
    // Said once: more of the same says nothing.
    run.session("s3", &[("j1", &[("c3", 7.0)])]);
    run.votes("c3", &[(1.0, 1.0)]);
    assert_eq!(short_of_votes(&run).len(), 1);
    // A third vote on a judged item: a pair, and the finding is over.
    run.votes("c0", &[(1.0, 1.0)]);
    assert_eq!(run.published(OutputTopic::JudgeQuality).len(), 1);
    assert!(run.state.quality("p").is_some_and(|q| !q.unmatched));
    assert_eq!(short_of_votes(&run).len(), 1);
}

#[test]
fn judged_items_short_of_votes_are_said_whatever_other_items_get() {
    // An item the judges did not score has three votes, the judged ones two each (a queue of
    // two reviewers for judged items): they never pair, and that is said. Of three votes on a
    // judged item, one of reputation 0: two carry weight, and the most the alert names counts
    // those.
    let mut run = Run::new(&three_pairs());
    run.votes("h0", &[(1.0, 1.0), (1.0, 1.0), (1.0, 1.0)]);
    for k in 0..3 {
        judge_scores(&mut run, k);
        run.votes(&format!("c{k}"), &[(1.0, 1.0), (1.0, 1.0), (1.0, 0.0)]);
    }
    let alerts = short_of_votes(&run);
    assert_eq!(alerts.len(), 1);
    assert!(close(&alerts[0]["value"], 2.0) && alerts[0]["sample_size"] == 3);
    assert!(unmatched(&run).is_empty());
    // Two judged items with votes, the third waiting for any: too few to say either.
    let mut run = Run::new(&three_pairs());
    for k in 0..3 {
        judge_scores(&mut run, k);
        run.votes(&format!("h{k}"), &[(1.0, 1.0)]);
        if k < 2 {
            run.votes(&format!("c{k}"), &[(1.0, 1.0)]);
        }
    }
    assert!(short_of_votes(&run).is_empty() && unmatched(&run).is_empty());
}

proptest::proptest! {
    /// Judges and humans on different items are said to be apart once, whichever order their
    /// records come in, once both sides reach the threshold; humans voting on the judged items
    /// (once each, so no pair forms) are said to be short of votes once, as soon as three
    /// judged items have votes; never both.
    #[test]
    fn unpaired_items_are_said_once_in_any_order(
        judged in 0..7usize,
        voted in 0..7usize,
        shared in proptest::bool::ANY,
        merge in proptest::collection::vec(proptest::bool::ANY, 14),
    ) {
        let mut run = Run::new(&three_pairs());
        let (mut s, mut v) = (0, 0);
        for &judge_first in merge.iter().take(judged + voted) {
            if v == voted || (s < judged && judge_first) {
                run.session(&format!("s{s}"), &[("j1", &[(&format!("c{s}"), 7.0)])]);
                s += 1;
            } else {
                // With `shared`, the humans vote on the judges' items (once each: no pair).
                let item = if shared { format!("c{v}") } else { format!("h{v}") };
                run.votes(&item, &[(1.0, 1.0)]);
                v += 1;
            }
        }
        // Shared ids: both sides begin at c0, so once each holds three items they share three.
        let found = judged >= 3 && voted >= 3;
        proptest::prop_assert_eq!(unmatched(&run).len(), usize::from(found && !shared));
        proptest::prop_assert_eq!(short_of_votes(&run).len(), usize::from(found && shared));
        let said = unmatched(&run).len() + short_of_votes(&run).len();
        let flagged = run.state.quality("p").is_some_and(|q| q.unmatched);
        proptest::prop_assert_eq!(flagged, said == 1);
    }
}
