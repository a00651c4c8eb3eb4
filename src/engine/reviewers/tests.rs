//! The reviewer pipeline, records in and records out, with hand-checked numbers.

use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::config::Config;
use crate::engine::reputation::ReputationTable;
use crate::engine::{InputTopic, Outcome, Record};
use crate::topics::TopicTable;

/// An engine over `config`, one state, and everything published, as replay runs it (held
/// records released after each record).
struct Run {
    engine: Engine,
    state: PartitionState,
    reps: ReputationTable,
    out: Vec<Value>,
    offset: i64,
    /// The project of the next vote batches.
    project: &'static str,
}

impl Run {
    fn new(config: &Config) -> Run {
        Run {
            engine: Engine::new(config.engine_settings()),
            state: PartitionState::default(),
            reps: ReputationTable::default(),
            out: Vec::new(),
            offset: 0,
            project: "p",
        }
    }

    /// One vote batch on `item` at second `secs`: `(voter, value)`.
    fn votes(&mut self, item: &str, secs: i64, votes: &[(&str, f64)]) {
        let votes: Vec<String> = votes
            .iter()
            .map(|(voter, value)| format!(r#"{{"voter_id": "{voter}", "value": {value}}}"#))
            .collect();
        let payload = format!(
            r#"{{"event_id": "e{}", "project_id": "{}", "item_id": "{item}",
                "occurred_at": "2026-11-20T10:{:02}:{:02}Z", "votes": [{}]}}"#,
            self.offset,
            self.project,
            secs / 60,
            secs % 60,
            votes.join(",")
        );
        let record = Record::new(
            "jury.votes",
            Some(InputTopic::Votes),
            Some(payload.as_bytes()),
        )
        .at(Some(0), Some(self.offset));
        self.offset += 1;
        let mut out = Vec::new();
        let outcome = self
            .engine
            .process(&mut self.state, &mut self.reps, &record, &mut out);
        assert!(matches!(outcome, Outcome::Applied), "{outcome:?}");
        self.engine.release_reviewers(&mut self.state, &mut out);
        let topics = TopicTable::default();
        for o in &out {
            let value: Value = serde_json::from_str(&o.render()).expect("JSON");
            self.out
                .push(serde_json::json!({"topic": topics.output_name(o.topic), "value": value}));
        }
    }

    /// The last `jury.reviewer-quality` record of `voter`.
    fn record(&self, voter: &str) -> &Value {
        self.out
            .iter()
            .rev()
            .find(|o| o["topic"] == "jury.reviewer-quality" && o["value"]["voter_id"] == voter)
            .map(|o| &o["value"])
            .expect("a record")
    }

    /// The reviewer alerts raised, as (kind, subject, sample size).
    fn alerts(&self) -> Vec<(String, String, u64)> {
        self.out
            .iter()
            .filter(|o| o["topic"] == "jury.bias-alerts")
            .map(|o| &o["value"])
            .filter(|a| {
                a["kind"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("reviewer_"))
            })
            .map(|a| {
                let s = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
                (
                    s("kind"),
                    s("subject"),
                    a["sample_size"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }
}

fn close(v: &Value, expected: f64, tolerance: f64) -> bool {
    v.as_f64()
        .is_some_and(|x| (x - expected).abs() <= tolerance)
}

/// `items` items of the hand case below, one batch each: pass and fail alternating, three
/// honest reviewers, a contrarian, "yes" (always pass) and "coin" (pass on items 0, 1 mod 4).
fn six_reviewers(run: &mut Run, items: i64) {
    for i in 0..items {
        let truth = if i % 2 == 0 { 1.0 } else { 0.0 };
        let coin = if i % 4 < 2 { 1.0 } else { 0.0 };
        let votes = [
            ("h1", truth),
            ("h2", truth),
            ("h3", truth),
            ("contrarian", 1.0 - truth),
            ("yes", 1.0),
            ("coin", coin),
        ];
        run.votes(&format!("item-{i}"), i, &votes);
    }
}

/// Items alternate pass (even) and fail (odd); on each, three honest reviewers give the true
/// verdict, a contrarian the other, "yes" always pass and "coin" pass on items 0, 1 (mod 4),
/// right half the time and independent of the truth. By hand, item kinds by `i mod 4`
/// (pass/fail votes of the other five):
/// - an honest reviewer: 0 pass 4/1 (agrees), 2 pass 3/2 (agrees), 1 pass 3/2 against its
///   fail, 3 fail 3/2 (agrees): agreement 3/4;
/// - the contrarian is outvoted on every item: 0;
/// - "yes" sides with the others on the pass items (4/1, 3/2) and not on the fail ones: ½;
/// - "coin": 0 pass with 4/1 (agrees), 1 pass against 2/3, 2 fail against 4/1, 3 fail with
///   2/3 (agrees): ½.
///
/// Reliability, once the items' posteriors are near certain, over 80 items: honest
/// (2 + 80)/83 ≈ 0.988, contrarian 2/83 ≈ 0.024, "yes" and "coin" (2 + 40)/83 ≈ 0.506.
/// Alerts (min 20 shared items, min reliability 0.6, same verdict 0.95), each once and at the
/// project's first checkpoint, at or after its 20th item: the contrarian unreliable and
/// adversarial; "yes" unreliable and straight-lining (pass on every item while the others'
/// majority passes half of them); "coin" unreliable. Which item that is, is drawn by the
/// items' marks ([`Reviewers::checkpoint_due`]).
///
/// [`Reviewers::checkpoint_due`]: crate::engine::model::reviewers::Reviewers::checkpoint_due
#[test]
fn honest_contrarian_yes_sayer_and_coin_by_hand() {
    let mut run = Run::new(&Config::default());
    six_reviewers(&mut run, 80);
    for h in ["h1", "h2", "h3"] {
        let r = run.record(h);
        assert_eq!(r["agreement"], 0.75, "{h}");
        assert_eq!(r["items"], 80);
        assert_eq!(r["pass_rate"], 0.5);
        assert!(close(&r["reliability"], 82.0 / 83.0, 0.01), "{h}: {r}");
        assert_eq!(r["findings"], serde_json::json!([]));
    }
    let c = run.record("contrarian");
    assert_eq!(c["agreement"], 0.0);
    assert!(close(&c["reliability"], 2.0 / 83.0, 0.01), "{c}");
    assert_eq!(
        c["findings"],
        serde_json::json!(["unreliable", "adversarial"])
    );
    let yes = run.record("yes");
    assert_eq!(yes["agreement"], 0.5);
    assert_eq!(yes["pass_rate"], 1.0);
    assert!(close(&yes["reliability"], 42.0 / 83.0, 0.01), "{yes}");
    assert_eq!(
        yes["findings"],
        serde_json::json!(["unreliable", "straight_lining"])
    );
    let coin = run.record("coin");
    assert_eq!(coin["agreement"], 0.5);
    assert!(close(&coin["reliability"], 42.0 / 83.0, 0.01), "{coin}");
    assert_eq!(coin["findings"], serde_json::json!(["unreliable"]));
    // Interval: reliability ± 1.96 standard errors, sqrt(p(1-p)/(n + 4)).
    let p = c["reliability"].as_f64().unwrap_or(0.0);
    let se = (p * (1.0 - p) / 84.0).sqrt();
    assert!(close(&c["standard_error"], se, 1e-12));
    assert!(close(&c["interval"][0], (p - 1.96 * se).max(0.0), 1e-12));
    let mut alerts = run.alerts();
    alerts.sort();
    let expected = [
        ("reviewer_adversarial", "contrarian"),
        ("reviewer_straight_lining", "yes"),
        ("reviewer_unreliable", "coin"),
        ("reviewer_unreliable", "contrarian"),
        ("reviewer_unreliable", "yes"),
    ];
    let kinds: Vec<(&str, &str)> = alerts
        .iter()
        .map(|(k, s, _)| (k.as_str(), s.as_str()))
        .collect();
    assert_eq!(kinds, expected);
    let first = first_checkpoint("p", 20);
    assert!(alerts.iter().all(|(_, _, n)| *n == first), "{alerts:?}");
}

/// The items held at the first checkpoint of a project of `project` whose items are
/// `item-0`, `item-1`, ... with `min_items` 20, as [`Reviewers::checkpoint_due`] draws it.
///
/// [`Reviewers::checkpoint_due`]: crate::engine::model::reviewers::Reviewers::checkpoint_due
fn first_checkpoint(project: &str, min_items: u64) -> u64 {
    use crate::engine::model::judge_quality::item_mark;
    use crate::engine::model::reviewers::Reviewers as Model;
    (1..)
        .find(|&held: &u64| {
            let item = format!("item-{}", held - 1);
            Model::checkpoint_due(|| item_mark((project, &item)), held, min_items)
        })
        .unwrap_or(0)
}

/// A finding re-arms once it is no longer true, and alerts again when it is: a reviewer who
/// always says pass alerts once while it straight-lines, stops straight-lining once it gives
/// the true verdict long enough (its findings clear at a checkpoint, without an alert), and
/// alerts again when it goes back to passing everything. (Where the checkpoints fall is drawn
/// by the items, so each phase runs until its checkpoint has come.)
#[test]
fn a_finding_rearms_once_it_is_no_longer_true() {
    let config =
        Config::from_toml("[reviewers]\nmin_items = 4\nmax_same_verdict = 0.8\n").expect("valid");
    let mut run = Run::new(&config);
    let mut item = 0;
    let mut batch = |run: &mut Run, yes: Option<f64>| {
        let truth = if item % 2 == 0 { 1.0 } else { 0.0 };
        let votes = [
            ("a", truth),
            ("b", truth),
            ("c", truth),
            ("yes", yes.unwrap_or(truth)),
        ];
        run.votes(&format!("i{item}"), item, &votes);
        item += 1;
    };
    let straight = |run: &Run| {
        run.alerts()
            .iter()
            .filter(|(k, s, _)| k == "reviewer_straight_lining" && s == "yes")
            .count()
    };
    let lining = |run: &Run| {
        let findings = run.record("yes")["findings"].clone();
        findings
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "straight_lining"))
    };
    for _ in 0..200 {
        batch(&mut run, Some(1.0));
        if straight(&run) > 0 {
            break;
        }
    }
    assert_eq!(straight(&run), 1);
    // Still straight-lining: no second alert, however many checkpoints come.
    for _ in 0..40 {
        batch(&mut run, Some(1.0));
    }
    assert_eq!(straight(&run), 1);
    assert!(lining(&run));
    // The true verdict, until a checkpoint finds its pass rate under 2 * 0.8 - 1: re-armed,
    // with no alert.
    for _ in 0..400 {
        batch(&mut run, None);
        if !lining(&run) {
            break;
        }
    }
    assert!(!lining(&run));
    assert_eq!(straight(&run), 1);
    // Passing everything again: at 0.8 of its items it is straight-lining again.
    for _ in 0..2_000 {
        batch(&mut run, Some(1.0));
        if straight(&run) > 1 {
            break;
        }
    }
    assert_eq!(straight(&run), 2);
}

/// A project whose items the task forgets to make room for another project's is not touched:
/// its reviewers' records stand as published until its own next change, which publishes them
/// as its verdicts now leave them (the task's oldest forgotten again to make room). (A task of
/// three items allows `reviewers.min_items` of three at most.)
#[test]
fn a_project_whose_items_another_forgets_publishes_at_its_next_change() {
    let config = Config::from_toml(
        "[judge_quality]\nmax_items = 3\n[kafka]\npartitions = 1\n[reviewers]\nmin_items = 3\n",
    )
    .expect("valid");
    let mut run = Run::new(&config);
    for i in 0..3 {
        run.votes(&format!("p{i}"), i, &[("a", 1.0), ("b", 0.0)]);
    }
    let verdicts =
        |run: &Run| -> Vec<(String, u64)> {
            let mut last = std::collections::BTreeMap::new();
            for o in run.out.iter().filter(|o| {
                o["topic"] == "jury.reviewer-quality" && o["value"]["project_id"] == "p"
            }) {
                let voter = o["value"]["voter_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                last.insert(voter, o["value"]["verdicts"].as_u64().unwrap_or(0));
            }
            last.into_iter().collect()
        };
    let held = |n| vec![("a".to_owned(), n), ("b".to_owned(), n)];
    assert_eq!(verdicts(&run), held(3));
    let records = |run: &Run| run.out.len();
    // Each new item of q forgets p's oldest; p publishes nothing.
    run.project = "q";
    run.votes("q0", 3, &[("c", 1.0)]);
    let before = records(&run);
    run.votes("q1", 4, &[("c", 1.0)]);
    assert_eq!(verdicts(&run), held(3));
    assert!(
        run.out[before..]
            .iter()
            .all(|o| o["value"]["project_id"] != "p")
    );
    // p's next item forgets its last old one: its records go out with that item's verdicts.
    run.project = "p";
    run.votes("p3", 5, &[("a", 1.0), ("b", 0.0)]);
    assert_eq!(verdicts(&run), held(1));
}

/// With `reviewers.enabled = false` no record or alert is published and no verdict is kept.
#[test]
fn off_publishes_nothing() {
    let config = Config::from_toml("[reviewers]\nenabled = false\n").expect("valid");
    let mut run = Run::new(&config);
    for i in 0..30 {
        run.votes(&format!("i{i}"), i, &[("a", 1.0), ("b", 0.0)]);
    }
    assert!(
        run.out
            .iter()
            .all(|o| o["topic"] != "jury.reviewer-quality")
    );
    assert!(run.alerts().is_empty());
    let q = run
        .state
        .quality("p")
        .expect("judge quality keeps the items");
    assert!(!q.has_verdicts(&run.state.quality));
    assert!(!q.items.is_empty());
    assert!(run.state.quality.reviews(&q.items).all(|r| r.is_empty()));
}

/// The batch mean a `jury.scores` record's step moved towards: score = alpha * before +
/// (1 - alpha) * mean.
fn step_mean(before: f64, record: &Value) -> f64 {
    let (score, alpha) = (
        record["score"].as_f64().unwrap_or(f64::NAN),
        record["alpha"].as_f64().unwrap_or(f64::NAN),
    );
    (score - alpha * before) / (1.0 - alpha)
}

/// With `scoring.reputation_source = "learned"`, once the reviewers have `reviewers.min_items`
/// shared items a vote weighs the log-likelihood ratio its verdict carries, clipped at 0: after
/// the crowd of the hand case, an honest reviewer's pass (each coin ≈ 42/43, weight ≈
/// ln 42 ≈ 3.7) against the contrarian's fail (worse than chance, weight 0) is a batch mean
/// of 1, where the table's equal weights make it ½. `both` multiplies by the table (an
/// explicit reputation of 2 for the honest reviewer changes nothing here: the other weight is
/// 0). A batch whose learned weights are all 0 keeps the table's rather than be dropped.
#[test]
fn learned_weights_follow_the_reliabilities() {
    for (source, expected) in [("table", 0.5), ("learned", 1.0), ("both", 1.0)] {
        let config = Config::from_toml(&format!("[scoring]\nreputation_source = \"{source}\"\n"))
            .expect("valid");
        let mut run = Run::new(&config);
        six_reviewers(&mut run, 80);
        let score = |run: &Run| {
            run.out
                .iter()
                .rev()
                .find(|o| o["topic"] == "jury.scores")
                .map(|o| o["value"].clone())
                .expect("a score")
        };
        let before = score(&run)["score"].as_f64().unwrap_or(f64::NAN);
        run.votes("new", 100, &[("h1", 1.0), ("contrarian", 0.0)]);
        let mean = step_mean(before, &score(&run));
        assert!((mean - expected).abs() < 1e-9, "{source}: {mean}");
        // The contrarian alone: learned weight 0, so the table's weight 1 applies.
        let before = score(&run)["score"].as_f64().unwrap_or(f64::NAN);
        run.votes("alone", 110, &[("contrarian", 0.0)]);
        let mean = step_mean(before, &score(&run));
        assert!(mean.abs() < 1e-9, "{source}: {mean}");
    }
    let h1 = {
        let mut run = Run::new(&Config::default());
        for i in 0..80 {
            let truth = if i % 2 == 0 { 1.0 } else { 0.0 };
            run.votes(
                &format!("item-{i}"),
                i,
                &[("h1", truth), ("h2", truth), ("c", 1.0 - truth)],
            );
        }
        run.state
            .quality("p")
            .and_then(|q| q.reviewers.checkpoint()?.get("h1").cloned())
    };
    let h1 = h1.expect("held");
    let (a, b) = (h1.coins.sensitivity, h1.coins.specificity);
    assert!(a > 0.9 && b > 0.9, "{h1:?}");
    assert!((h1.learned_weight(true) - (a / (1.0 - b)).ln()).abs() < 1e-12);
    assert!((h1.learned_weight(false) - (b / (1.0 - a)).ln()).abs() < 1e-12);
}

/// A record says which weights a reviewer's verdicts get with learned reputations: `null`
/// while withheld (fewer than `reviewers.min_items` = 20 shared items: after 19 items of the
/// hand case each reviewer shares 19), then the log-likelihood ratios of its own published
/// coins, clipped at 0: an honest reviewer's near `ln 42` both ways (each coin near 42/43: 40
/// items of each class under the Beta(2, 1) prior), the contrarian's 0 both ways (worse than
/// chance), and the yes-sayer's pass, which says nothing, near 0.
#[test]
fn a_record_publishes_its_learned_weights_once_they_are_no_longer_withheld() {
    let mut run = Run::new(&Config::default());
    six_reviewers(&mut run, 19);
    for voter in ["h1", "contrarian", "yes", "coin"] {
        let record = run.record(voter);
        assert_eq!(record["items"], 19, "{record}");
        assert!(record["learned_weights"].is_null(), "{record}");
    }
    let mut run = Run::new(&Config::default());
    six_reviewers(&mut run, 80);
    let weights = |voter: &str| {
        let r = run.record(voter);
        let (a, b) = (
            r["sensitivity"].as_f64().unwrap_or(f64::NAN),
            r["specificity"].as_f64().unwrap_or(f64::NAN),
        );
        let by_hand = ((a / (1.0 - b)).ln().max(0.0), (b / (1.0 - a)).ln().max(0.0));
        let w = &r["learned_weights"];
        assert!(close(&w["pass"], by_hand.0, 1e-9), "{voter}: {r}");
        assert!(close(&w["fail"], by_hand.1, 1e-9), "{voter}: {r}");
        by_hand
    };
    let (pass, fail) = weights("h1");
    assert!(((pass - 42f64.ln()).abs() < 0.01) && (fail - 42f64.ln()).abs() < 0.01);
    assert_eq!(weights("contrarian"), (0.0, 0.0));
    let (pass, _) = weights("yes");
    assert!(pass < 0.1, "{pass}");
    weights("coin");
}

#[test]
fn learned_weights_need_reviewer_reliability() {
    let err = Config::from_toml(
        "[scoring]\nreputation_source = \"learned\"\n[reviewers]\nenabled = false\n",
    )
    .expect_err("refused");
    assert!(
        err.to_string().contains("scoring.reputation_source"),
        "{err}"
    );
}

/// A vote batch of the order-independence test: `(project, item, second, [(voter, pass,
/// reputation)])`.
type Batch = (u8, u8, u8, Vec<(u8, bool, u8)>);

/// A record of the order-independence test: a vote batch, or a judge's score in ninths of an
/// item, `(project, item, ninths)`, in a session of its own that it completes.
#[derive(Debug, Clone)]
enum Event {
    Votes(Batch),
    Score(u8, u8, u8),
}

impl Event {
    /// The record's topic and payload; `n` numbers its event and session.
    fn payload(&self, n: usize) -> (&'static str, InputTopic, String) {
        match self {
            Event::Votes((project, item, second, votes)) => {
                let votes: Vec<String> = votes
                    .iter()
                    .map(|(voter, pass, r)| {
                        let verdict = if *pass { "pass" } else { "flag" };
                        format!(
                            r#"{{"voter_id":"v{voter}","verdict":"{verdict}","reputation":{}}}"#,
                            f64::from(*r) / 4.0
                        )
                    })
                    .collect();
                let payload = format!(
                    r#"{{"event_id":"e{project}-{item}-{second}","project_id":"p{project}","item_id":"i{item}","occurred_at":"2026-11-20T10:{:02}:{:02}Z","votes":[{}]}}"#,
                    second / 60,
                    second % 60,
                    votes.join(",")
                );
                ("jury.votes", InputTopic::Votes, payload)
            }
            Event::Score(project, item, ninths) => {
                let payload = format!(
                    r#"{{"event_id":"b{n}","project_id":"p{project}","session_id":"s{n}","occurred_at":"2026-11-20T11:00:00Z","judge":"j","scale":{{"min":0,"max":9}},"scores":{{"i{item}":{ninths}}},"expected_judges":1}}"#
                );
                ("jury.judge-scores", InputTopic::JudgeScores, payload)
            }
        }
    }
}

/// Applies `events` in the order given, each record on one of three input partitions (as
/// producers keyed anyhow spread them), starting a release of the held reviewer records after
/// every `release_every` records (as coalescing cycles end anywhere) and publishing
/// `per_record` projects of it after each record (as the service's passes do), and releasing
/// the rest at the end; returns the final `jury.reviewer-quality` table.
fn reviewer_table(
    events: &[(usize, Event)],
    partitions: &[u8],
    (release_every, per_record): (usize, usize),
) -> std::collections::BTreeMap<String, String> {
    let engine = Engine::new(Config::default().engine_settings());
    let mut state = PartitionState::default();
    let mut reps = ReputationTable::default();
    let mut offsets = [0i64; 3];
    let mut out = Vec::new();
    for (k, ((n, event), &partition)) in events.iter().zip(partitions.iter().cycle()).enumerate() {
        let (topic, input, payload) = event.payload(*n);
        let p = usize::from(partition % 3);
        let record = Record::new(topic, Some(input), Some(payload.as_bytes()))
            .at(Some(p as i32), Some(offsets[p]))
            // Records of several partitions in one state: no one log position, as in replay.
            .positioned(None);
        offsets[p] += 1;
        let outcome = engine.process(&mut state, &mut reps, &record, &mut out);
        assert!(
            matches!(outcome, Outcome::Applied | Outcome::Late),
            "{outcome:?}"
        );
        if (k + 1) % release_every == 0 {
            engine.begin_reviewer_release(&mut state);
        }
        engine.release_some_reviewers(&mut state, &mut out, per_record);
    }
    engine.release_reviewers(&mut state, &mut out);
    out.iter()
        .filter(|o| o.topic == OutputTopic::ReviewerQuality)
        .map(|o| (o.key.clone().unwrap_or_default(), o.render().into_owned()))
        .collect()
}

/// Vote batches whose verdicts are each given once (an item's voters split over one or two
/// batches at distinct seconds), then judges' scores of each project's first four items, in
/// ninths (whose sums in floating point can depend on their order), each numbered.
fn arb_events() -> impl Strategy<Value = Vec<(usize, Event)>> {
    let batches = prop::collection::btree_map(
        (0u8..2, 0u8..10),
        prop::collection::btree_map(0u8..6, (any::<bool>(), 1u8..5, any::<bool>()), 1..6),
        1..16,
    );
    let scores = prop::collection::vec((0u8..2, 0u8..4, 0u8..10), 0..40);
    (batches, scores).prop_map(|(items, scores)| {
        let mut events = Vec::new();
        for (n, ((project, item), voters)) in items.into_iter().enumerate() {
            for half in [false, true] {
                let votes: Vec<(u8, bool, u8)> = voters
                    .iter()
                    .filter(|(_, (_, _, second))| *second == half)
                    .map(|(v, (pass, r, _))| (*v, *pass, *r))
                    .collect();
                if !votes.is_empty() {
                    let second = u8::try_from(2 * n + usize::from(half)).unwrap_or(u8::MAX);
                    events.push(Event::Votes((project, item, second, votes)));
                }
            }
        }
        events.extend(scores.into_iter().map(|(p, i, s)| Event::Score(p, i, s)));
        events.into_iter().enumerate().collect()
    })
}

proptest! {
    /// The same verdicts and judge scores in any arrival order, over any keying and whatever
    /// the coalescing cycles and however a release is spread over them, publish the same final
    /// `jury.reviewer-quality` table, to the last bit.
    #[test]
    fn reviewer_records_do_not_depend_on_arrival_order_or_keying(
        events in arb_events(),
        seed in any::<u64>(),
        partitions in prop::collection::vec(any::<u8>(), 64),
        release_every in 1usize..8,
        per_record in 0usize..3,
    ) {
        let mut shuffled = events.clone();
        let mut state = seed;
        for k in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            shuffled.swap(k, usize::try_from((state >> 33) % (k as u64 + 1)).unwrap_or(0));
        }
        let in_order = reviewer_table(&events, &[0], (usize::MAX, 0));
        let reordered = reviewer_table(&shuffled, &partitions, (release_every, per_record));
        prop_assert!(!in_order.is_empty());
        prop_assert_eq!(in_order, reordered);
    }
}

/// A release spread over calls publishes what one call would, in the same order, and leaves
/// the projects held meanwhile for the next release.
#[test]
fn a_release_in_slices_publishes_what_one_release_does() {
    let engine = Engine::new(Config::default().engine_settings());
    let vote = |state: &mut PartitionState, (project, item, n): (&str, u32, i64)| {
        let payload = format!(
            r#"{{"event_id":"e{n}","project_id":"{project}","item_id":"i{item}","occurred_at":"2026-11-20T10:00:{:02}Z","votes":[{{"voter_id":"a","value":1}},{{"voter_id":"b","value":1}},{{"voter_id":"c","value":0}}]}}"#,
            n % 60
        );
        let record = Record::new(
            "jury.votes",
            Some(InputTopic::Votes),
            Some(payload.as_bytes()),
        )
        .at(Some(0), Some(n));
        let mut out = Vec::new();
        let outcome = engine.process(state, &mut ReputationTable::default(), &record, &mut out);
        assert!(matches!(outcome, Outcome::Applied), "{outcome:?}");
    };
    let votes = |state: &mut PartitionState| {
        let mut n = 0;
        for project in ["p3", "p1", "p2"] {
            for item in 0..4 {
                vote(state, (project, item, n));
                n += 1;
            }
        }
    };
    let rendered = |out: &[Output]| -> Vec<String> {
        out.iter()
            .filter(|o| o.topic == OutputTopic::ReviewerQuality)
            .map(|o| o.render().into_owned())
            .collect()
    };
    let mut whole = PartitionState::default();
    votes(&mut whole);
    let mut once = Vec::new();
    engine.release_reviewers(&mut whole, &mut once);
    let mut sliced = PartitionState::default();
    votes(&mut sliced);
    engine.begin_reviewer_release(&mut sliced);
    let mut parts = Vec::new();
    let left: Vec<usize> = (0..3)
        .map(|_| engine.release_some_reviewers(&mut sliced, &mut parts, 1))
        .collect();
    assert_eq!(left, [2, 1, 0]);
    assert!(!rendered(&once).is_empty());
    assert_eq!(rendered(&once), rendered(&parts));
    // A project held while a release is under way waits for the next one.
    vote(&mut sliced, ("p4", 0, 100));
    engine.begin_reviewer_release(&mut sliced);
    vote(&mut sliced, ("p5", 0, 101));
    assert_eq!(sliced.held_reviewers.releasing.len(), 1);
    let mut next = Vec::new();
    assert_eq!(engine.release_some_reviewers(&mut sliced, &mut next, 5), 0);
    assert_eq!(sliced.held_reviewers.dirty.len(), 1);
    assert!(!rendered(&next).is_empty());
    assert!(rendered(&next).iter().all(|r| r.contains("\"p4\"")));
}
