//! Engine-level tests: whole records in, published records out.

use std::ops::Range;

use proptest::prelude::*;
use serde_json::Value;

use super::journal::note_votes;
use super::model::dedupe::Remembered;
use super::output::OutputTopic;
use super::*;
use crate::config::Config;
use crate::topics::TopicTable;

fn engine() -> Engine {
    Engine::new(Settings::default())
}

/// A record from `topic`, an input by its default name (or not an input at all).
fn rec<'a>(topic: &'a str, payload: Option<&'a [u8]>) -> Record<'a> {
    Record::new(topic, TopicTable::default().input(topic), payload).at(Some(0), None)
}

struct Harness {
    engine: Engine,
    state: PartitionState,
    reps: ReputationTable,
    out: Vec<Output>,
    /// The position of the next record sent in the log the state follows (see
    /// [`Record::position`]). Records carry no offset: what a copy's offset does is tested with
    /// [`crate::engine::Origins`] and in `a_copy_of_any_record_is_skipped_once`.
    next_offset: i64,
}

impl Harness {
    fn new() -> Self {
        Harness {
            engine: engine(),
            state: PartitionState::default(),
            reps: ReputationTable::default(),
            out: vec![],
            next_offset: 0,
        }
    }
    /// A harness whose engine runs `config`.
    fn with(config: &Config) -> Self {
        Harness {
            engine: Engine::new(Settings::of(config)),
            ..Harness::new()
        }
    }
    fn send(&mut self, topic: &str, payload: &str) -> Outcome {
        self.send_record(rec(topic, Some(payload.as_bytes())))
    }
    /// Processes `record` at the partition's next offset.
    fn send_record(&mut self, mut record: Record<'_>) -> Outcome {
        record.position = Some(self.next_offset);
        self.next_offset += 1;
        self.out.clear();
        self.engine
            .process(&mut self.state, &mut self.reps, &record, &mut self.out)
    }
    fn last(&self) -> Value {
        serde_json::from_str(&self.out.last().expect("an output").render()).unwrap()
    }
}

fn votes(event_id: &str, at: &str, votes: &str) -> String {
    format!(
        r#"{{"event_id": "{event_id}", "project_id": "proj-42", "occurred_at": "{at}", "votes": [{votes}]}}"#
    )
}

#[test]
fn a_batch_at_or_below_its_projects_last_offset_is_replayed() {
    let mut h = Harness::new();
    let one = r#"{"voter_id": "u-1", "value": 1}"#;
    let (e1, e2) = (
        votes("e1", "2026-11-20T10:00:00Z", one),
        votes("e2", "2026-11-20T10:00:07Z", one),
    );
    assert_eq!(h.send("jury.votes", &e1), Outcome::Applied); // offset 0
    assert_eq!(h.send("jury.votes", &e2), Outcome::Applied); // offset 1
    assert_eq!(h.state.projects["proj-42"].applied_through, Some(1));
    // Read again from offset 0 after a restore: both are in the state already.
    let before = h.state.clone();
    h.next_offset = 0;
    for e in [&e1, &e2] {
        assert_eq!(h.send("jury.votes", e), Outcome::Replayed);
        assert!(h.out.is_empty(), "a replayed record publishes nothing");
    }
    assert_eq!(h.state, before);
    // The same event at a later offset is a resend: a duplicate, as before.
    assert_eq!(
        h.send("jury.votes", &e2),
        Outcome::Rejected(ErrorCode::DuplicateEventId)
    );
    // A new event below the project's last offset came out of order: dead-lettered, visibly,
    // through both the prepared and the plain path, and nothing changes.
    let before = h.state.clone();
    let e3 = votes("e3", "2026-11-20T10:00:09Z", one);
    for prepared in [false, true] {
        h.next_offset = 1;
        let outcome = if prepared {
            let mut record = rec("jury.votes", Some(e3.as_bytes()));
            record.position = Some(1);
            let p = h.engine.prepare_votes(&record).expect("a valid batch");
            h.out.clear();
            h.engine
                .apply_prepared(&mut h.state, &mut h.reps, &record, &p, &mut h.out)
        } else {
            h.send("jury.votes", &e3)
        };
        assert_eq!(outcome, Outcome::Rejected(ErrorCode::OffsetOutOfOrder));
        assert_eq!(h.out.len(), 1);
        let dl = h.last();
        let message = dl["message"].as_str().unwrap_or("");
        assert!(
            message.starts_with("offset 1 is at or below 1,"),
            "{message}"
        );
        assert!(message.contains(r#""e3""#), "{message}");
        assert_eq!(h.state, before);
    }
    // Another project's batch at a low offset is its own: applied.
    h.next_offset = 0;
    let other = e1.replace("proj-42", "proj-7");
    assert_eq!(h.send("jury.votes", &other), Outcome::Applied);
    assert_eq!(h.state.projects["proj-7"].applied_through, Some(0));
    // Without an offset (a replay file may have none) a batch is never taken for a replayed one.
    let mut out = Vec::new();
    let r = rec("jury.votes", Some(e2.as_bytes()));
    assert_eq!(
        h.engine.process(&mut h.state, &mut h.reps, &r, &mut out),
        Outcome::Rejected(ErrorCode::DuplicateEventId)
    );
}

#[test]
fn seed_example_end_to_end() {
    let mut h = Harness::new();
    let pass_flag =
        r#"{"voter_id": "u-1", "verdict": "pass"}, {"voter_id": "u-2", "verdict": "flag"}"#;
    assert_eq!(
        h.send(
            "jury.votes",
            &votes("e1", "2026-11-20T10:00:00Z", pass_flag)
        ),
        Outcome::Applied
    );
    assert_eq!(
        h.out[0].render(),
        r#"{"project_id":"proj-42","score":0.5,"freshness":1.0,"alpha":0.0,"lambda":0.01,"evaluations":1,"votes":2,"last_event_at":"2026-11-20T10:00:00Z"}"#
    );
    h.send(
        "jury.votes",
        &votes(
            "e2",
            "2026-11-20T10:00:07Z",
            r#"{"voter_id": "u-3", "verdict": "flag"}"#,
        ),
    );
    assert_eq!(
        h.out[0].render(),
        r#"{"project_id":"proj-42","score":0.46619690995297414,"freshness":0.06760618009405173,"alpha":0.9323938199059483,"lambda":0.01,"evaluations":2,"votes":3,"last_event_at":"2026-11-20T10:00:07Z"}"#
    );
    assert_eq!(h.out[0].key.as_deref(), Some("proj-42"));
}

#[test]
fn reputation_comes_from_vote_then_table_then_default() {
    let mut h = Harness::new();
    assert_eq!(
        h.send(
            "jury.reputations",
            r#"{"voter_id": "u-8", "reputation": 3}"#
        ),
        Outcome::Applied
    );
    // u-7 explicit 0.9 (pass), u-8 from the table 3 (flag), u-9 default 1 (0.75)
    h.send(
        "jury.votes",
        &votes(
            "e1",
            "2026-11-20T10:00:00Z",
            r#"{"voter_id": "u-7", "verdict": "pass", "reputation": 0.9}, {"voter_id": "u-8", "verdict": "flag"}, {"voter_id": "u-9", "value": 0.75}"#,
        ),
    );
    assert_eq!(h.last()["score"], (0.9 + 0.75) / (0.9 + 3.0 + 1.0));
    // A tombstone falls back to the default 1.0.
    assert_eq!(
        h.send_record(rec("jury.reputations", None).keyed(Some(b"u-8"), None)),
        Outcome::Applied
    );
    assert_eq!(h.reps.get("u-8"), None);
}

#[test]
fn record_timestamp_stands_in_for_occurred_at() {
    let mut h = Harness::new();
    let payload =
        r#"{"event_id": "e1", "project_id": "p", "votes": [{"voter_id": "u", "value": 1}]}"#;
    let r = rec("jury.votes", Some(payload.as_bytes())).keyed(None, Some(1_795_168_807_250));
    assert_eq!(h.send_record(r), Outcome::Applied);
    assert_eq!(h.last()["last_event_at"], "2026-11-20T10:00:07.250Z");
    let e2 = payload.replace("e1", "e2");
    assert_eq!(
        h.send("jury.votes", &e2),
        Outcome::Rejected(ErrorCode::MissingTimestamp)
    );
    let epoch = payload
        .replace("e1", "e3")
        .replace("\"votes\"", "\"occurred_at\": 1795168808250, \"votes\"");
    assert_eq!(h.send("jury.votes", &epoch), Outcome::Applied);
    assert_eq!(h.last()["last_event_at"], "2026-11-20T10:00:08.250Z");
}

#[test]
fn late_batch_is_counted_and_reported() {
    let mut h = Harness::new();
    let v = r#"{"voter_id": "u", "value": 1}"#;
    h.send("jury.votes", &votes("e1", "2026-11-20T10:00:10Z", v));
    assert_eq!(
        h.send(
            "jury.votes",
            &votes(
                "e2",
                "2026-11-20T10:00:05Z",
                r#"{"voter_id": "u", "value": 0}"#
            )
        ),
        Outcome::Late
    );
    let last = h.last();
    assert_eq!(
        (last["score"].as_f64(), last["alpha"].as_f64()),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(last["last_event_at"], "2026-11-20T10:00:10Z");
    assert_eq!(last["evaluations"], 2);
}

#[test]
fn duplicate_event_id_is_dead_lettered_and_not_applied() {
    let mut h = Harness::new();
    let v = r#"{"voter_id": "u", "value": 1}"#;
    h.send("jury.votes", &votes("e1", "2026-11-20T10:00:00Z", v));
    let before = h.state.clone();
    let dup = votes(
        "e1",
        "2026-11-20T10:00:09Z",
        r#"{"voter_id": "u", "value": 0}"#,
    );
    assert_eq!(
        h.send("jury.votes", &dup),
        Outcome::Rejected(ErrorCode::DuplicateEventId)
    );
    assert_eq!(h.state, before);
    let dl = h.last();
    assert_eq!(dl["error"], "duplicate_event_id");
    assert_eq!(dl["source_topic"], "jury.votes");
    // The same event id in another project is a different event.
    assert_eq!(
        h.send("jury.votes", &dup.replace("proj-42", "proj-43")),
        Outcome::Applied
    );
}

/// One payload per rejection class the contract names, with the code it must produce.
const REJECTIONS: &[(&str, &str, ErrorCode)] = &[
    ("jury.votes", "{not json", ErrorCode::InvalidJson),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": NaN}]}"#,
        ErrorCode::NonFiniteNumber,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": Infinity}]}"#,
        ErrorCode::NonFiniteNumber,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": 1e999}]}"#,
        ErrorCode::ValueOutOfRange,
    ),
    ("jury.votes", r#"["an", "array"]"#, ErrorCode::NotObject),
    (
        "jury.votes",
        r#"{"event_id": 1, "project_id": "p", "votes": []}"#,
        ErrorCode::WrongType,
    ),
    (
        "jury.votes",
        r#"{"project_id": "p", "votes": []}"#,
        ErrorCode::MissingField,
    ),
    (
        "jury.votes",
        r#"{"event_id": "", "project_id": "p", "votes": []}"#,
        ErrorCode::EmptyField,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": 2}]}"#,
        ErrorCode::ValueOutOfRange,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "verdict": "meh"}]}"#,
        ErrorCode::UnknownVerdict,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "verdict": "pass", "value": 1}]}"#,
        ErrorCode::VoteValueConflict,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u"}]}"#,
        ErrorCode::VoteValueMissing,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": 1, "reputation": -1}]}"#,
        ErrorCode::NegativeReputation,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1, "reputation": 0}]}"#,
        ErrorCode::ZeroTotalReputation,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "votes": []}"#,
        ErrorCode::NoVotes,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "event_id": "f", "project_id": "p", "votes": []}"#,
        ErrorCode::DuplicateField,
    ),
    (
        "jury.votes",
        r#"{"event_id": "e", "project_id": "p", "occurred_at": "soon", "votes": [{"voter_id": "u", "value": 1}]}"#,
        ErrorCode::InvalidTimestamp,
    ),
    (
        "jury.reputations",
        r#"{"voter_id": "u", "reputation": -3}"#,
        ErrorCode::NegativeReputation,
    ),
    (
        "jury.reputations",
        r#"{"voter_id": "u", "reputation": "high"}"#,
        ErrorCode::WrongType,
    ),
    ("jury.elsewhere", r#"{}"#, ErrorCode::UnknownTopic),
];

#[test]
fn every_rejection_class_has_its_code_and_a_dead_letter() {
    for (topic, payload, code) in REJECTIONS {
        let mut h = Harness::new();
        let outcome = h.send(topic, payload);
        assert_eq!(outcome, Outcome::Rejected(*code), "{payload}");
        assert_eq!(h.out.len(), 1, "{payload}");
        let dl = h.last();
        assert_eq!(dl["error"], code.as_str(), "{payload}");
        assert_eq!(dl["payload"], *payload);
        assert_eq!(dl["payload_bytes"], payload.len());
        assert!(!dl["message"].as_str().unwrap_or("").is_empty());
        assert_eq!(h.state, PartitionState::default(), "{payload}");
    }
}

#[test]
fn size_limits() {
    let mut small = Config::default();
    small.limits.max_message_bytes = 100;
    small.limits.max_votes_per_event = 2;
    small.limits.dead_letter_payload_bytes = 10;
    let mut h = Harness {
        engine: Engine::new(Settings::of(&small)),
        ..Harness::new()
    };
    let big = format!(
        r#"{{"event_id": "e", "project_id": "p", "pad": "{}"}}"#,
        "x".repeat(100)
    );
    assert_eq!(
        h.send("jury.votes", &big),
        Outcome::Rejected(ErrorCode::PayloadTooLarge)
    );
    let dl = h.last();
    assert_eq!(
        (dl["payload"].as_str(), dl["payload_bytes"].as_u64()),
        (Some(r#"{"event_id"#), Some(big.len() as u64))
    );
    let three = r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"u","value":1},1,2]}"#;
    assert_eq!(
        h.send("jury.votes", three),
        Outcome::Rejected(ErrorCode::TooManyVotes)
    );
    let long_id = format!(
        r#"{{"event_id": "{}", "project_id": "p", "votes": []}}"#,
        "e".repeat(257)
    );
    let mut h = Harness::new();
    assert_eq!(
        h.send("jury.votes", &long_id),
        Outcome::Rejected(ErrorCode::IdTooLong)
    );
}

#[test]
fn tombstone_and_invalid_utf8_on_votes() {
    let mut h = Harness::new();
    assert_eq!(
        h.send_record(rec("jury.votes", None)),
        Outcome::Rejected(ErrorCode::EmptyPayload)
    );
    assert_eq!(h.last()["payload"], Value::Null);
    assert_eq!(
        h.send_record(rec("jury.votes", Some(b"{\"event_id\": \"\xff\"}"))),
        Outcome::Rejected(ErrorCode::InvalidJson)
    );
    assert_eq!(h.last()["payload"], "{\"event_id\": \"\u{fffd}\"}");
}

fn arb_payload() -> impl Strategy<Value = String> {
    let vote = prop_oneof![
        (0.0..=1.0f64).prop_map(|v| format!(r#"{{"voter_id": "u", "value": {v}}}"#)),
        Just(r#"{"voter_id": "u", "verdict": "pass"}"#.to_owned()),
        Just(r#"{"voter_id": "u", "verdict": "nope"}"#.to_owned()),
        (-2.0..3.0f64)
            .prop_map(|v| format!(r#"{{"voter_id": "u", "value": 1, "reputation": {v}}}"#)),
        Just(r#"{"voter_id": "u", "value": 1, "reputation": 0}"#.to_owned()),
        (-1.0..2.0f64).prop_map(|v| format!(r#"{{"voter_id": "v", "value": {v}}}"#)),
    ];
    (0u8..6, 0i64..100, prop::collection::vec(vote, 0..4)).prop_map(|(id, secs, votes)| {
        format!(
            r#"{{"event_id": "e{id}", "project_id": "p{}", "occurred_at": {}, "votes": [{}]}}"#,
            id % 2,
            1_700_000_000_000 + secs * 1000,
            votes.join(",")
        )
    })
}

/// Batches whose ids carry JSON escapes (their strings are copies, not slices of the payload),
/// some with an item id and some without `occurred_at`.
fn arb_escaped_payload() -> impl Strategy<Value = String> {
    let flags = (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>());
    (0u8..6, flags, 0.0..=1.0f64).prop_map(|(id, (escape, timed, event, project), v)| {
        let voter = if escape { r"u\u0041" } else { "u" };
        let at = if timed { r#""occurred_at": 1700000050000, "#.to_owned() } else { String::new() };
        // An escaped id is the same id as its plain spelling: `e\u0033` is `e3`.
        let event_id = if event { format!(r"e\u003{id}") } else { format!("e{id}") };
        let project = if project { format!(r"p\u003{}", id % 2) } else { format!("p{}", id % 2) };
        format!(
            r#"{{"event_id": "{event_id}", "project_id": "{project}", {at}"item_id": "i\n{id}", "votes": [{{"voter_id": "{voter}", "value": {v}}}]}}"#
        )
    })
}

#[test]
fn prepare_votes_takes_valid_batches_and_leaves_the_rest_to_process() {
    let e = engine();
    let plain = votes(
        "e1",
        "2026-01-01T00:00:00Z",
        r#"{"voter_id": "u", "value": 1}"#,
    );
    // Escapes anywhere make no difference: the prepared batch owns what it keeps.
    let escaped = votes(
        "e\\u0031",
        "2026-01-01T00:00:00Z",
        r#"{"voter_id": "\u0075", "value": 1}"#,
    );
    let invalid = votes(
        "e1",
        "2026-01-01T00:00:00Z",
        r#"{"voter_id": "u", "value": 2}"#,
    );
    for valid in [&plain, &escaped] {
        assert!(
            e.prepare_votes(&rec("jury.votes", Some(valid.as_bytes())))
                .is_some()
        );
    }
    assert!(
        e.prepare_votes(&rec("jury.votes", Some(invalid.as_bytes())))
            .is_none()
    );
    assert!(
        e.prepare_votes(&rec("jury.judge-scores", Some(plain.as_bytes())))
            .is_none()
    );
    // The escaped voter id is the voter `u`: its reputation in the table weighs the vote.
    let mut h = Harness::new();
    h.reps.apply(&ReputationChange::Upsert {
        voter_id: "u",
        reputation: 0.0,
    });
    let record = rec("jury.votes", Some(escaped.as_bytes()));
    let p = e.prepare_votes(&record).expect("prepared");
    let outcome = e.apply_prepared(&mut h.state, &mut h.reps, &record, &p, &mut h.out);
    assert_eq!(outcome, Outcome::Rejected(ErrorCode::ZeroTotalReputation));
}

proptest! {
    /// Rejecting an event leaves state unchanged; accepting one keeps every score in [0, 1].
    #[test]
    fn rejection_never_changes_state(payloads in prop::collection::vec(arb_payload(), 1..40)) {
        let mut h = Harness::new();
        for p in &payloads {
            let before = h.state.clone();
            let outcome = h.send("jury.votes", p);
            prop_assert_eq!(h.out.len(), 1);
            match outcome {
                Outcome::Rejected(code) => {
                    prop_assert_eq!(&h.state, &before);
                    prop_assert_eq!(h.out[0].topic, OutputTopic::DeadLetters);
                    let dl = h.last();
                    prop_assert_eq!(dl["error"].as_str(), Some(code.as_str()));
                }
                Outcome::Applied | Outcome::Late => {
                    prop_assert_eq!(h.out[0].topic, OutputTopic::Scores);
                    let s = h.last()["score"].as_f64().unwrap_or(f64::NAN);
                    prop_assert!((0.0..=1.0).contains(&s));
                }
                Outcome::Replayed => prop_assert!(false, "offsets only grow: nothing is replayed"),
            }
        }
    }

    /// Validating on one thread and applying on another ([`Engine::prepare_votes`], then
    /// [`Engine::apply_prepared`]) is the same as [`Engine::process`]: same outcomes, same
    /// records, same state, including for rejections, escaped strings and record timestamps.
    #[test]
    fn prepared_votes_apply_like_process(
        payloads in prop::collection::vec(
            (prop_oneof![arb_payload(), arb_escaped_payload()], prop::option::of(0i64..100)),
            1..40,
        ),
        table in prop::collection::vec((prop::sample::select(vec!["u", "v", "uA"]), 0.0..3.0f64), 0..3),
    ) {
        let (mut plain, mut split) = (Harness::new(), Harness::new());
        // Votes without an explicit reputation weigh their voter's in the table, if any.
        for &(voter_id, reputation) in &table {
            let change = ReputationChange::Upsert { voter_id, reputation };
            plain.reps.apply(&change);
            split.reps.apply(&change);
        }
        let mut prepared = 0;
        for (payload, secs) in &payloads {
            let mut record = rec("jury.votes", Some(payload.as_bytes()));
            record.timestamp_ms = secs.map(|s| 1_700_000_000_000 + s * 1000);
            record.position = Some(plain.next_offset);
            let expected = plain.send_record(record);
            split.out.clear();
            let outcome = match split.engine.prepare_votes(&record) {
                Some(p) => {
                    prepared += 1;
                    split.engine.apply_prepared(&mut split.state, &mut split.reps, &record, &p, &mut split.out)
                }
                None => split.engine.process(&mut split.state, &mut split.reps, &record, &mut split.out),
            };
            prop_assert_eq!(outcome, expected);
            let render = |h: &Harness| h.out.iter().map(|o| o.render().into_owned()).collect::<Vec<String>>();
            prop_assert_eq!(render(&split), render(&plain));
            prop_assert_eq!(&split.state, &plain.state);
        }
        // The generator's valid, unescaped batches take the prepared path.
        let valid = payloads.iter().filter(|(p, _)| !p.contains('\\') && plain.engine.prepare_votes(&rec("jury.votes", Some(p.as_bytes()))).is_some()).count();
        prop_assert!(prepared >= valid);
    }

    /// Arbitrary bytes never panic and always end in exactly one output.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut h = Harness::new();
        h.send_record(rec("jury.votes", Some(&bytes)));
        prop_assert_eq!(h.out.len(), 1);
    }
}

fn ballot(event: &str, session: &str, secs: i64, judge: &str, rest: &str) -> String {
    format!(
        r#"{{"event_id": "{event}", "project_id": "proj-42", "session_id": "{session}", "occurred_at": {}, "judge": "{judge}"{rest}}}"#,
        1_795_168_800_000 + secs * 1000
    )
}

fn topics(out: &[Output]) -> Vec<OutputTopic> {
    out.iter().map(|o| o.topic).collect()
}

fn consensus_of(h: &Harness) -> Value {
    let c = h
        .out
        .iter()
        .find(|o| o.topic == OutputTopic::Consensus)
        .expect("a consensus record");
    serde_json::from_str(&c.render()).unwrap()
}

#[test]
fn session_completes_when_all_expected_judges_reported() {
    let mut h = Harness::new();
    let meta = r#", "scores": {"A": 8, "B": 3}, "expected_judges": 3, "candidates": {"A": {"author": "m-a"}, "B": {"author": "m-b"}}, "category": "coding""#;
    assert_eq!(
        h.send("jury.judge-scores", &ballot("e1", "s1", 0, "j1", meta)),
        Outcome::Applied
    );
    assert!(h.out.is_empty());
    h.send(
        "jury.judge-scores",
        &ballot("e2", "s1", 1, "j2", r#", "scores": {"A": 7, "B": 4}"#),
    );
    assert!(h.out.is_empty());
    h.send(
        "jury.judge-scores",
        &ballot("e3", "s1", 2, "j3", r#", "status": "abstained""#),
    );
    assert_eq!(
        topics(&h.out),
        [
            OutputTopic::Consensus,
            OutputTopic::Leaderboard,
            OutputTopic::Leaderboard
        ]
    );
    let c = consensus_of(&h);
    assert_eq!(c["completed_by"], "all_judges");
    assert_eq!(
        c["judges"],
        serde_json::json!({"ok": 2, "failed": 0, "abstained": 1})
    );
    assert_eq!(c["rankings"][0]["candidate"], "A");
    assert_eq!(c["consensus"], Value::Null);
    assert_eq!(c["category"], "coding");
    let board: Value = serde_json::from_str(&h.out[1].render()).unwrap();
    assert_eq!(h.out[1].key.as_deref(), Some("proj-42/coding/m-a"));
    assert_eq!(
        (board["wins"].as_u64(), board["sessions"].as_u64()),
        (Some(1), Some(1))
    );
    // A late ballot for the completed session is dead-lettered and changes nothing.
    let before = h.state.clone();
    assert_eq!(
        h.send(
            "jury.judge-scores",
            &ballot("e4", "s1", 3, "j4", r#", "scores": {"A": 1}"#)
        ),
        Outcome::Rejected(ErrorCode::SessionCompleted)
    );
    assert_eq!(h.state, before);
}

#[test]
fn session_close_and_unknown_session_close() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "s1", 0, "j1", r#", "scores": {"A": 8}"#),
    );
    let close = |id: &str, s: &str| {
        format!(
            r#"{{"type": "session_close", "event_id": "{id}", "project_id": "proj-42", "session_id": "{s}", "occurred_at": 1795168805000}}"#
        )
    };
    h.send("jury.judge-scores", &close("c1", "s1"));
    let c = consensus_of(&h);
    assert_eq!(
        (c["completed_by"].as_str(), c["consensus"]["value"].as_f64()),
        (Some("session_close"), Some(7.0 / 9.0))
    );
    assert_eq!(c["consensus"]["strategy"], "weighted_average");
    h.send("jury.judge-scores", &close("c2", "never-seen"));
    let c = consensus_of(&h);
    assert_eq!(
        (
            c["session_id"].as_str(),
            c["consensus"]["strategy"].as_str()
        ),
        (Some("never-seen"), Some("none"))
    );
    assert_eq!(
        h.send("jury.judge-scores", &close("c3", "s1")),
        Outcome::Rejected(ErrorCode::SessionCompleted)
    );
    assert_eq!(
        h.send("jury.judge-scores", &close("c1", "s9")),
        Outcome::Rejected(ErrorCode::DuplicateEventId)
    );
}

#[test]
fn watermark_times_sessions_out() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "old", 0, "j1", r#", "scores": {"A": 5}"#),
    );
    // 300 s later exactly: not yet past the timeout.
    h.send(
        "jury.judge-scores",
        &ballot("e2", "new", 300, "j1", r#", "scores": {"A": 5}"#),
    );
    assert!(h.out.is_empty());
    h.send(
        "jury.judge-scores",
        &ballot("e3", "new", 301, "j2", r#", "scores": {"A": 6}"#),
    );
    let c = consensus_of(&h);
    assert_eq!(
        (c["session_id"].as_str(), c["completed_by"].as_str()),
        (Some("old"), Some("timeout"))
    );
    assert_eq!(c["last_event_at"], "2026-11-20T10:05:01Z");
    assert_eq!(h.state.sessions.open_sessions(), 1);
}

#[test]
fn a_session_times_out_by_its_own_projects_event_time_only() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "old", 0, "j1", r#", "scores": {"A": 5}"#),
    );
    // Another project's events, however late, are not this project's clock: whichever other
    // projects share its partition, and in whatever order partitions were interleaved, its
    // session completes at the same point of its own records.
    let other =
        ballot("e2", "s", 10_000, "j1", r#", "scores": {"A": 5}"#).replace("proj-42", "proj-7");
    assert_eq!(h.send("jury.judge-scores", &other), Outcome::Applied);
    assert!(h.out.is_empty());
    assert_eq!(h.state.sessions.open_sessions(), 2);
    // Its own next event, past the timeout, completes it.
    h.send(
        "jury.judge-scores",
        &ballot("e3", "new", 301, "j1", r#", "scores": {"A": 6}"#),
    );
    let c = consensus_of(&h);
    assert_eq!(
        (c["session_id"].as_str(), c["completed_by"].as_str()),
        (Some("old"), Some("timeout"))
    );
}

/// A session's candidates: (id, author, score).
type Candidates<'a> = &'a [(&'a str, &'a str, u32)];

/// A single-judge session at `secs` with `candidates` in `category`.
fn board_ballot(i: usize, secs: i64, candidates: Candidates<'_>, category: &str) -> String {
    let scores: Vec<String> = candidates
        .iter()
        .map(|(c, _, s)| format!(r#""{c}": {s}"#))
        .collect();
    let authors: Vec<String> = candidates
        .iter()
        .map(|(c, a, _)| format!(r#""{c}": {{"author": "{a}"}}"#))
        .collect();
    let rest = format!(
        r#", "scores": {{{}}}, "candidates": {{{}}}, "expected_judges": 1, "category": "{category}""#,
        scores.join(", "),
        authors.join(", ")
    );
    ballot(&format!("e{i}"), &format!("s{i}"), secs, "j1", &rest)
}

/// The `jury.leaderboard` records of the last record sent, by model.
fn board_rows(h: &Harness) -> std::collections::BTreeMap<String, Value> {
    h.out
        .iter()
        .filter(|o| o.topic == OutputTopic::Leaderboard)
        .map(|o| serde_json::from_str::<Value>(&o.render()).unwrap())
        .map(|v| (v["model"].as_str().unwrap().to_owned(), v))
        .collect()
}

#[test]
fn leaderboard_rows_count_whole_days_and_an_emptied_row_is_published_then_forgotten() {
    let mut config = Config::default();
    config.leaderboard.window_days = 1;
    config.leaderboard.bt_interval_secs = 0;
    let mut h = Harness::with(&config);
    // Days d, d, d+1 (m-x only on day d), then d+2: the window of one day keeps d+1 and d+2.
    let day = 86_400;
    let sessions: [(i64, Candidates<'_>); 4] = [
        (0, &[("A", "m-a", 9), ("X", "m-x", 2)]),
        (60, &[("A", "m-a", 3), ("X", "m-x", 8)]),
        (day, &[("A", "m-a", 7), ("B", "m-b", 4)]),
        (2 * day, &[("A", "m-a", 2), ("B", "m-b", 6)]),
    ];
    let mut seen = Vec::new();
    for (i, (secs, candidates)) in sessions.into_iter().enumerate() {
        assert_eq!(
            h.send("jury.judge-scores", &board_ballot(i, secs, candidates, "c")),
            Outcome::Applied
        );
        let rows = board_rows(&h);
        let count = |m: &str| {
            rows.get(m)
                .map(|r| (r["sessions"].as_u64(), r["wins"].as_u64()))
        };
        seen.push((count("m-a"), count("m-x")));
    }
    assert_eq!(
        seen,
        [
            (Some((Some(1), Some(1))), Some((Some(1), Some(0)))),
            (Some((Some(2), Some(1))), Some((Some(2), Some(1)))),
            // Day d is still in the window (it starts one day before d+1's session).
            (Some((Some(3), Some(2))), Some((Some(2), Some(1)))),
            // Day d leaves: m-x is published with nothing in the window, then forgotten.
            (Some((Some(2), Some(1))), Some((Some(0), Some(0)))),
        ]
    );
    let board = &h.state.judge_projects["proj-42"].board;
    let models: Vec<&str> = board.rows.keys().map(|(_, m)| m.as_str()).collect();
    assert_eq!(models, ["m-a", "m-b"]);
    // The means are over the sessions of the days kept: m-a's Borda was 1 then 0.
    assert_eq!(board_rows(&h)["m-a"]["mean_borda"].as_f64(), Some(0.5));
}

#[test]
fn consensus_records_are_kept_unless_too_long_for_the_changelog() {
    let two: Candidates<'_> = &[("A", "m-a", 9), ("B", "m-b", 5)];
    let mut h = Harness::new();
    h.send("jury.judge-scores", &board_ballot(0, 0, two, "c"));
    let consensus = h
        .out
        .iter()
        .find(|o| o.topic == OutputTopic::Consensus)
        .unwrap();
    let kept = &h.state.judge_projects["proj-42"].kept;
    assert_eq!(
        kept.get("s0").map(|k| &*k.record),
        Some(&*consensus.render())
    );
    // A producer limit four times smaller than the record: not kept.
    let mut config = Config::default();
    let limit = 4 * consensus.render().len() - 4;
    config
        .kafka
        .producer
        .insert("message.max.bytes".into(), limit.to_string());
    let mut h = Harness::with(&config);
    h.send("jury.judge-scores", &board_ballot(0, 0, two, "c"));
    assert!(h.out.iter().any(|o| o.topic == OutputTopic::Consensus));
    assert!(h.state.judge_projects["proj-42"].kept.records.is_empty());
}

#[test]
fn a_board_holds_at_most_its_categories_and_models() {
    let mut config = Config::default();
    config.leaderboard.max_categories = 1;
    config.leaderboard.max_models = 2;
    let mut h = Harness::with(&config);
    let three: Candidates<'_> = &[("A", "m-a", 9), ("B", "m-b", 5), ("C", "m-c", 1)];
    h.send("jury.judge-scores", &board_ballot(0, 0, three, "c1"));
    let rows = board_rows(&h);
    assert_eq!(
        rows.keys().collect::<Vec<_>>(),
        ["m-a", "m-b"],
        "two models of c1"
    );
    // A second category is left off the board; the session itself is published.
    h.send("jury.judge-scores", &board_ballot(1, 10, three, "c2"));
    assert!(board_rows(&h).is_empty());
    assert!(h.out.iter().any(|o| o.topic == OutputTopic::Consensus));
    assert_eq!(h.state.judge_projects["proj-42"].board.rows.len(), 2);
}

#[test]
fn the_leaderboard_rates_models_by_bradley_terry_over_its_window() {
    let mut config = Config::default();
    config.leaderboard.bt_interval_secs = 0;
    let mut h = Harness::with(&config);
    // Three single-judge sessions of one category: m-a's candidate ranks first twice, m-b's
    // once. With each model's virtual tie against the reference (1000), by symmetry
    // theta = +-x where 2 - 3 sigma(2x) + 1/2 - sigma(x) = 0 (a little short of the MLE's
    // 400 * log10(sqrt 2) = 60.206 points).
    for (i, (a, b)) in [(8, 3), (8, 3), (3, 8)].into_iter().enumerate() {
        let rest = format!(
            r#", "scores": {{"A": {a}, "B": {b}}}, "candidates": {{"A": {{"author": "m-a"}}, "B": {{"author": "m-b"}}}}, "expected_judges": 1, "category": "c""#
        );
        let e = format!("e{i}");
        let s = format!("s{i}");
        assert_eq!(
            h.send("jury.judge-scores", &ballot(&e, &s, i as i64, "j1", &rest)),
            Outcome::Applied
        );
    }
    let rows: Vec<Value> = h
        .out
        .iter()
        .filter(|o| o.topic == OutputTopic::Leaderboard)
        .map(|o| serde_json::from_str(&o.render()).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "both models' rows after a refit");
    let sigma = |x: f64| 1.0 / (1.0 + (-x).exp());
    let (mut lo, mut hi) = (0.0, 5.0);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if 2.5 - 3.0 * sigma(2.0 * mid) - sigma(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let shift = 400.0 * lo / std::f64::consts::LN_10;
    assert!(shift > 40.0 && shift < 60.206, "{shift}");
    for (row, model, rating, rank) in [
        (&rows[0], "m-a", 1000.0 + shift, 1),
        (&rows[1], "m-b", 1000.0 - shift, 2),
    ] {
        assert_eq!(row["model"], model);
        let got = row["bt_rating"].as_f64().expect("rated");
        assert!((got - rating).abs() < 1e-6, "{row}");
        assert_eq!(row["bt_rank"], rank);
        assert_eq!(row["comparisons"], 3);
        assert!(row["bt_note"].is_null());
        // Three sessions are little evidence: finite intervals around the ratings that overlap.
        let (low, high) = (row["bt_ci_low"].as_f64(), row["bt_ci_high"].as_f64());
        assert!(
            low.zip(high).is_some_and(|(l, h)| l <= got && got <= h),
            "{row}"
        );
        assert_eq!(
            row["bt_tied_with"].as_array().map(Vec::len),
            Some(1),
            "{row}"
        );
    }
}

#[test]
fn rows_between_bradley_terry_refits_carry_the_last_fit() {
    // The default refits a category at most once a minute of event time: sessions at 0, 30 and
    // 61 s refit after the first and the third.
    let mut h = Harness::new();
    let mut fits = Vec::new();
    for (i, at) in [0, 30, 61].into_iter().enumerate() {
        let rest = r#", "scores": {"A": 8, "B": 3}, "candidates": {"A": {"author": "m-a"}, "B": {"author": "m-b"}}, "expected_judges": 1"#;
        let (e, s) = (format!("e{i}"), format!("s{i}"));
        h.out.clear();
        h.send("jury.judge-scores", &ballot(&e, &s, at, "j1", rest));
        let rows: Vec<Value> = h
            .out
            .iter()
            .filter(|o| o.topic == OutputTopic::Leaderboard)
            .map(|o| serde_json::from_str(&o.render()).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        fits.push((
            rows[0]["bt_fitted_at"].clone(),
            rows[0]["comparisons"].clone(),
        ));
    }
    let at = |s: &str| Value::String(s.to_owned());
    assert_eq!(
        fits,
        [
            (at("2026-11-20T10:00:00Z"), Value::from(1)),
            (at("2026-11-20T10:00:00Z"), Value::from(1)),
            (at("2026-11-20T10:01:01Z"), Value::from(3)),
        ]
    );
}

#[test]
fn open_session_bounds_evict_the_oldest() {
    let mut config = Config::default();
    config.sessions.max_open_per_project = 2;
    let mut h = Harness::with(&config);
    for (i, s) in ["s1", "s2", "s3"].iter().enumerate() {
        h.send(
            "jury.judge-scores",
            &ballot(
                &format!("e{i}"),
                s,
                i as i64,
                "j1",
                r#", "scores": {"A": 5}"#,
            ),
        );
    }
    let c = consensus_of(&h);
    assert_eq!(
        (c["session_id"].as_str(), c["completed_by"].as_str()),
        (Some("s1"), Some("evicted"))
    );
    assert_eq!(h.state.sessions.open_sessions(), 2);
}

#[test]
fn judge_score_rejections_leave_state_unchanged() {
    let mut h = Harness::new();
    h.send(
        "jury.judge-scores",
        &ballot("e1", "s1", 0, "j1", r#", "scores": {"A": 5}"#),
    );
    let before = h.state.clone();
    for (payload, code) in [
        (
            ballot("e2", "s1", 1, "j2", r#", "scores": {"A": 50}"#),
            ErrorCode::ScoreOutOfScale,
        ),
        (
            ballot("e2", "s1", 1, "j2", r#", "status": "asleep""#),
            ErrorCode::UnknownStatus,
        ),
        (
            ballot("e2", "s1", 1, "j2", r#", "type": "judge_vote""#),
            ErrorCode::UnknownType,
        ),
        (
            ballot(
                "e2",
                "s1",
                1,
                "j2",
                r#", "scores": {"A": 5}, "scale": {"min": 3, "max": 2}"#,
            ),
            ErrorCode::InvalidScale,
        ),
        (
            ballot("e1", "s1", 1, "j2", r#", "scores": {"A": 5}"#),
            ErrorCode::DuplicateEventId,
        ),
    ] {
        assert_eq!(
            h.send("jury.judge-scores", &payload),
            Outcome::Rejected(code),
            "{payload}"
        );
        assert_eq!(h.state, before);
    }
}

#[test]
fn biased_session_emits_alerts_after_consensus() {
    let mut h = Harness::new();
    // Longer answers score higher for every judge; positions favour the first slot.
    let meta = r#", "expected_judges": 3, "candidates": {"A": {"words": 100, "position": 2}, "B": {"words": 200, "position": 1}, "C": {"words": 300, "position": 0}, "D": {"words": 400, "position": 3}}"#;
    h.send(
        "jury.judge-scores",
        &ballot(
            "e1",
            "s",
            0,
            "j1",
            &format!(r#", "scores": {{"A": 1, "B": 4, "C": 7, "D": 10}}{meta}"#),
        ),
    );
    h.send(
        "jury.judge-scores",
        &ballot(
            "e2",
            "s",
            1,
            "j2",
            r#", "scores": {"A": 2, "B": 4, "C": 7, "D": 9}"#,
        ),
    );
    h.send(
        "jury.judge-scores",
        &ballot(
            "e3",
            "s",
            2,
            "j3",
            r#", "scores": {"A": 1, "B": 5, "C": 6, "D": 10}"#,
        ),
    );
    assert_eq!(h.out[0].topic, OutputTopic::Consensus);
    let kinds: Vec<String> = h
        .out
        .iter()
        .filter(|o| o.topic == OutputTopic::BiasAlerts)
        .map(|o| {
            serde_json::from_str::<Value>(&o.render()).unwrap()["kind"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert!(kinds.contains(&"length_bias".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"position_bias".to_owned()), "{kinds:?}");
    let c = consensus_of(&h);
    assert!(c["bias"]["length_r"].as_f64().unwrap() > 0.95);
    assert_eq!(c["bias"]["risk"], "medium");
}

/// A project's batches in one flush share one journal entry, also with other projects' in
/// between; a gap in the evicted ids (a window restored with gaps) starts a new one, which
/// later batches extend; a hint left from an earlier journal is not trusted.
#[test]
fn vote_journal_joins_a_projects_batches() {
    let mut journal = Vec::new();
    let (mut a, mut b) = (JournalHint::default(), JournalHint::default());
    let remembered = |seq: u64, evicted: &[u64]| Remembered {
        fingerprint: u128::from(seq),
        seq,
        evicted: evicted.iter().map(|s| (*s, u128::from(*s))).collect(),
    };
    let note = |journal: &mut Vec<Change>, hint: &mut JournalHint, project, seq, evicted| {
        note_votes(Some(journal), hint, project, &remembered(seq, evicted));
    };
    let votes = |project: &str, seen: Range<u64>, forgot: Range<u64>| Change::Votes {
        project: project.into(),
        seen,
        forgot,
    };
    for (seq, evicted) in [(0, &[][..]), (1, &[]), (2, &[0]), (3, &[1])] {
        note(&mut journal, &mut a, "a", seq, evicted);
    }
    assert_eq!(journal, vec![votes("a", 0..4, 0..2)]);
    note(&mut journal, &mut b, "b", 0, &[]);
    note(&mut journal, &mut a, "a", 4, &[2]);
    note(&mut journal, &mut a, "a", 5, &[4]);
    note(&mut journal, &mut a, "a", 6, &[5, 7]);
    note(&mut journal, &mut b, "b", 1, &[]);
    assert_eq!(
        journal,
        vec![
            votes("a", 0..5, 0..3),
            votes("b", 0..2, 0..0),
            votes("a", 5..7, 4..6),
            votes("a", 0..0, 7..8),
        ]
    );
    // The next flush: a's hint points past the new journal, c's (left from an earlier one) at
    // b's change.
    journal.clear();
    let mut c = JournalHint(Some(0));
    note(&mut journal, &mut b, "b", 2, &[]);
    note(&mut journal, &mut a, "a", 7, &[]);
    note(&mut journal, &mut c, "c", 0, &[]);
    note(&mut journal, &mut a, "a", 8, &[]);
    assert_eq!(
        journal,
        vec![
            votes("b", 2..3, 0..0),
            votes("a", 7..9, 0..0),
            votes("c", 0..1, 0..0)
        ]
    );
    // Without a journal nothing is noted.
    note_votes(None, &mut a, "a", &remembered(9, &[]));
    assert_eq!(journal.len(), 3);
}

/// A vote batch of one vote for project `p{project}`, its event `n` seconds into the stream.
fn coalesce_vote(n: usize, project: usize, value: f64) -> String {
    format!(
        r#"{{"event_id": "c{n}", "project_id": "p{project}", "occurred_at": {}, "votes": [{{"voter_id": "u", "value": {value}}}]}}"#,
        1_795_168_800_000 + n as i64 * 1000
    )
}

/// Applies `batches` (project, clock ms, value) with the runtime's clock, releasing held scores
/// after the batches at the indexes in `cycles` (as the runtime does when it ends a cycle), and
/// without a clock, as replay does. Returns the rendered scores of both, in order.
fn coalesced_and_plain(
    batches: &[(usize, u64, f64)],
    cycles: &[usize],
) -> (Vec<String>, Vec<String>) {
    let e = engine();
    let mut reps = ReputationTable::default();
    let (mut coalesced, mut plain) = (PartitionState::default(), PartitionState::default());
    let (mut c_out, mut p_out) = (Vec::new(), Vec::new());
    for (n, (project, clock, value)) in batches.iter().enumerate() {
        let payload = coalesce_vote(n, *project, *value);
        let mut r = rec("jury.votes", Some(payload.as_bytes()));
        e.process(&mut plain, &mut reps, &r, &mut p_out);
        r.clock_ms = Some(*clock);
        e.process(&mut coalesced, &mut reps, &r, &mut c_out);
        if cycles.contains(&n) {
            e.release_held(&mut coalesced, &mut c_out);
        }
    }
    e.release_held(&mut coalesced, &mut c_out);
    assert!(coalesced.held.is_empty());
    let render = |o: &[Output]| {
        o.iter()
            .map(|o| o.render().into_owned())
            .collect::<Vec<_>>()
    };
    (render(&c_out), render(&p_out))
}

#[test]
fn scores_within_the_interval_are_held_and_the_latest_released() {
    // Default interval 100 ms. p0 at 0 ms (emitted), 40 and 90 ms (held, latest kept), then
    // p1 at 95 ms (its first: emitted), p0 at 150 ms (interval over: emitted, nothing held).
    let batches = [
        (0, 0, 1.0),
        (0, 40, 0.0),
        (0, 90, 1.0),
        (1, 95, 0.5),
        (0, 150, 0.0),
        (0, 160, 1.0),
    ];
    let (coalesced, plain) = coalesced_and_plain(&batches, &[2]);
    // Emitted: batch 0; at the cycle after batch 2, batch 2's score (40 ms's was superseded);
    // batch 3; batch 4; and the end's release gives batch 5's.
    assert_eq!(
        coalesced,
        vec![
            plain[0].clone(),
            plain[2].clone(),
            plain[3].clone(),
            plain[4].clone(),
            plain[5].clone()
        ]
    );
    let held: Value = serde_json::from_str(&coalesced[1]).unwrap();
    assert_eq!(held["evaluations"], 3);
    // Without a release between them, a score emitted at once supersedes the one held.
    let (coalesced, plain) = coalesced_and_plain(&[(0, 0, 1.0), (0, 50, 0.0), (0, 100, 1.0)], &[]);
    assert_eq!(coalesced, vec![plain[0].clone(), plain[2].clone()]);
}

proptest! {
    /// Coalescing only leaves scores out: what it emits for a project is what replay emits for
    /// it, in the same order (held scores of different projects come out at the end of a cycle,
    /// so the interleaving of projects differs), and every project's latest score is emitted.
    #[test]
    fn coalescing_keeps_each_projects_latest_score(
        steps in prop::collection::vec((0usize..4, 0u64..80, 0.0..=1.0f64), 1..60),
        cycle_every in 1usize..10,
    ) {
        let mut clock = 0;
        let batches: Vec<(usize, u64, f64)> = steps
            .iter()
            .map(|(p, dt, v)| {
                clock += dt;
                (*p, clock, *v)
            })
            .collect();
        let cycles: Vec<usize> = (0..batches.len()).filter(|n| n % cycle_every == 0).collect();
        let (coalesced, plain) = coalesced_and_plain(&batches, &cycles);
        let by_project = |scores: &[String]| {
            let mut by_project = std::collections::BTreeMap::<String, Vec<String>>::new();
            for s in scores {
                let v: Value = serde_json::from_str(s).unwrap();
                let project = v["project_id"].as_str().unwrap_or_default().to_owned();
                by_project.entry(project).or_default().push(s.clone());
            }
            by_project
        };
        let (coalesced, plain) = (by_project(&coalesced), by_project(&plain));
        prop_assert_eq!(coalesced.keys().collect::<Vec<_>>(), plain.keys().collect::<Vec<_>>());
        for (project, scores) in &coalesced {
            let mut rest = plain[project].iter();
            for c in scores {
                prop_assert!(rest.any(|p| p == c), "{} is not in replay's order", c);
            }
            prop_assert_eq!(scores.last(), plain[project].last());
        }
    }
}

#[test]
fn an_occurred_at_far_after_its_record_timestamp_is_dead_lettered_and_moves_nothing() {
    let mut h = Harness::new();
    let stamped = |payload: &str, ms: i64, h: &mut Harness| {
        let mut r = rec("jury.votes", None);
        r.payload = Some(payload.as_bytes());
        r.timestamp_ms = Some(ms);
        h.send_record(r)
    };
    let at = |secs: i64| 1_795_168_800_000 + secs * 1000;
    let ok = votes(
        "e1",
        "2026-11-20T10:00:00Z",
        r#"{"voter_id": "u", "value": 1}"#,
    );
    assert_eq!(stamped(&ok, at(0), &mut h), Outcome::Applied);
    let before = h.state.clone();
    // Dated 2099 in a record stamped in 2026: beyond the default hour of skew.
    let future = votes(
        "e2",
        "2099-01-01T00:00:00Z",
        r#"{"voter_id": "u", "value": 0}"#,
    );
    assert_eq!(
        stamped(&future, at(1), &mut h),
        Outcome::Rejected(ErrorCode::OccurredAtInFuture)
    );
    assert_eq!(h.state, before);
    assert!(
        h.last()["message"]
            .as_str()
            .is_some_and(|m| m.contains("3600 s after the record timestamp")),
        "{}",
        h.last()
    );
    // Within the skew it is applied, and a record without a timestamp is not checked.
    let soon = votes(
        "e3",
        "2026-11-20T10:59:00Z",
        r#"{"voter_id": "u", "value": 1}"#,
    );
    assert_eq!(stamped(&soon, at(0), &mut h), Outcome::Applied);
    let unstamped = votes(
        "e4",
        "2099-01-01T00:00:00Z",
        r#"{"voter_id": "u", "value": 1}"#,
    );
    assert_eq!(h.send("jury.votes", &unstamped), Outcome::Applied);
}

/// One rule for every input topic: the same hostile member, at the top of the event or inside a
/// nested object (a vote, a candidate), gets the same code on `jury.votes`, `jury.judge-scores`
/// and `jury.reputations`; without it each event applies.
#[test]
fn every_input_topic_reads_by_one_rule() {
    // (topic, the event up to its last member, the same around a nested object ending in `{}`)
    let events = [
        (
            "jury.votes",
            r#"{"event_id": "e", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1}]"#,
            r#"{"event_id": "e", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1{}}]}"#,
        ),
        (
            "jury.judge-scores",
            r#"{"event_id": "e", "project_id": "p", "session_id": "s", "occurred_at": 0, "judge": "j", "scores": {"A": 5}, "candidates": {"A": {"author": "m"}}"#,
            r#"{"event_id": "e", "project_id": "p", "session_id": "s", "occurred_at": 0, "judge": "j", "scores": {"A": 5}, "candidates": {"A": {"author": "m"{}}}}"#,
        ),
        (
            "jury.reputations",
            r#"{"voter_id": "u", "reputation": 2"#,
            r#"{"voter_id": "u", "reputation": 2{}}"#,
        ),
    ];
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let hostile = [
        (r#", "x": 1, "x": 2"#.to_string(), ErrorCode::DuplicateField),
        (r#", "x": "\ud800""#.to_string(), ErrorCode::InvalidJson),
        (
            r#", "x": "\udc00\ud800""#.to_string(),
            ErrorCode::InvalidJson,
        ),
        (format!(r#", "x": {deep}"#), ErrorCode::InvalidJson),
        (r#", "x": 1e400"#.to_string(), ErrorCode::ValueOutOfRange),
        (r#", "x": NaN"#.to_string(), ErrorCode::NonFiniteNumber),
    ];
    let mut strict = Config::default();
    strict.limits.reject_unknown_fields = true;
    for (topic, top, nested) in events {
        let plain = [format!("{top}}}"), nested.replace("{}", "")];
        for payload in &plain {
            assert_eq!(
                Harness::new().send(topic, payload),
                Outcome::Applied,
                "{payload}"
            );
            let mut h = Harness {
                engine: Engine::new(Settings::of(&strict)),
                ..Harness::new()
            };
            assert_eq!(h.send(topic, payload), Outcome::Applied, "{payload}");
            let unknown = payload.replacen(r#""p""#, r#""p", "x": 1"#, 1);
            let unknown = if unknown == *payload {
                payload.replacen(r#""u""#, r#""u", "x": 1"#, 1)
            } else {
                unknown
            };
            assert_eq!(
                h.send(topic, &unknown),
                Outcome::Rejected(ErrorCode::UnknownField),
                "{unknown}"
            );
        }
        for (member, code) in &hostile {
            for payload in [format!("{top}{member}}}"), nested.replace("{}", member)] {
                let mut h = Harness::new();
                let shown = &payload[..payload.len().min(200)];
                assert_eq!(h.send(topic, &payload), Outcome::Rejected(*code), "{shown}");
                assert_eq!(h.state, PartitionState::default(), "{shown}");
                assert_eq!(h.reps, ReputationTable::default(), "{shown}");
            }
        }
    }
}

/// An instance at `limits.max_projects` refuses a record that would add a project, on either
/// topic, and keeps applying to the projects it holds.
#[test]
fn a_new_project_beyond_max_projects_is_dead_lettered() {
    let mut config = Config::default();
    config.limits.max_projects = 2;
    let mut h = Harness::with(&config);
    let one = r#"{"voter_id": "u", "value": 1}"#;
    let vote = |event: &str, project: &str| {
        votes(event, "2026-11-20T10:00:00Z", one).replace("proj-42", project)
    };
    let judge = |event: &str, project: &str| {
        ballot(event, "s", 0, "j", r#", "scores": {"A": 5}"#).replace("proj-42", project)
    };
    // What the runtime passes: the projects held before each record.
    let send = |h: &mut Harness, topic: &str, payload: &str| {
        let held = h.state.project_count();
        h.send_record(rec(topic, Some(payload.as_bytes())).received(None, held))
    };
    assert_eq!(
        send(&mut h, "jury.votes", &vote("e1", "a")),
        Outcome::Applied
    );
    assert_eq!(
        send(&mut h, "jury.judge-scores", &judge("e2", "a")),
        Outcome::Applied
    );
    // Votes and judge scores of one project: one project.
    assert_eq!(h.state.project_count(), 1);
    assert_eq!(
        send(&mut h, "jury.judge-scores", &judge("e7", "z")),
        Outcome::Applied
    );
    assert_eq!(h.state.project_count(), 2);
    let before = h.state.clone();
    for (topic, payload) in [
        ("jury.votes", vote("e3", "b")),
        ("jury.judge-scores", judge("e4", "b")),
    ] {
        assert_eq!(
            send(&mut h, topic, &payload),
            Outcome::Rejected(ErrorCode::ProjectLimit)
        );
        let message = h.last()["message"].as_str().unwrap_or("").to_owned();
        assert!(message.contains(r#"project "b""#), "{message}");
        assert!(message.contains("2 this instance holds"), "{message}");
        assert_eq!(h.state, before);
    }
    // The projects it holds go on, also with their other part.
    assert_eq!(
        send(&mut h, "jury.votes", &vote("e5", "a")),
        Outcome::Applied
    );
    assert_eq!(
        send(&mut h, "jury.votes", &vote("e8", "z")),
        Outcome::Applied
    );
    assert_eq!(h.state.project_count(), 2);
    assert_eq!(
        send(
            &mut h,
            "jury.judge-scores",
            &judge("e6", "a").replace(r#""j""#, r#""k""#)
        ),
        Outcome::Applied
    );
}

/// A ballot that would bring its session beyond `sessions.max_judges` judges or
/// `sessions.max_candidates` candidates is dead-lettered; a judge's new ballot within them
/// replaces its old one as before.
#[test]
fn a_ballot_beyond_the_session_limits_is_dead_lettered() {
    let mut config = Config::default();
    config.sessions.max_judges = 2;
    config.sessions.max_candidates = 3;
    let mut h = Harness::with(&config);
    let b = |event: &str, judge: &str, rest: &str| ballot(event, "s", 0, judge, rest);
    assert_eq!(
        h.send(
            "jury.judge-scores",
            &b("e1", "j1", r#", "scores": {"A": 5, "B": 6}"#)
        ),
        Outcome::Applied
    );
    // Candidates count over scores, rankings and metadata, old and new.
    for (event, rest) in [
        ("e2", r#", "scores": {"C": 5, "D": 6}"#),
        (
            "e3",
            r#", "scores": {"A": 5}, "candidates": {"C": {}, "D": {}}"#,
        ),
        (
            "e4",
            r#", "scores": {"A": 5}, "ranking": ["A", "B", "C", "D"]"#,
        ),
    ] {
        let before = h.state.clone();
        assert_eq!(
            h.send("jury.judge-scores", &b(event, "j2", rest)),
            Outcome::Rejected(ErrorCode::SessionLimit),
            "{rest}"
        );
        let message = h.last()["message"].as_str().unwrap_or("").to_owned();
        assert!(
            message.contains("4 candidates, more than 3 (sessions.max_candidates)"),
            "{message}"
        );
        assert_eq!(h.state, before);
    }
    assert_eq!(
        h.send(
            "jury.judge-scores",
            &b("e5", "j2", r#", "scores": {"A": 5, "C": 6}"#)
        ),
        Outcome::Applied
    );
    let before = h.state.clone();
    assert_eq!(
        h.send(
            "jury.judge-scores",
            &b("e6", "j3", r#", "scores": {"A": 5}"#)
        ),
        Outcome::Rejected(ErrorCode::SessionLimit)
    );
    let message = h.last()["message"].as_str().unwrap_or("").to_owned();
    assert!(
        message.contains("3 judges, more than 2 (sessions.max_judges)"),
        "{message}"
    );
    assert_eq!(h.state, before);
    // j1 again: a replacement, still two judges.
    assert_eq!(
        h.send(
            "jury.judge-scores",
            &b("e7", "j1", r#", "scores": {"A": 7}"#)
        ),
        Outcome::Applied
    );
}

/// An output that would exceed the record limit is replaced by a dead letter that names it,
/// whatever the configuration lets through: here a consensus of three ballots of 300
/// candidates each, with 250-byte ids, under a 100 kB message limit.
#[test]
fn an_output_beyond_the_record_limit_becomes_a_dead_letter() {
    let mut config = Config::default();
    config.limits.max_message_bytes = 100_000;
    config.sessions.max_candidates = 10_000;
    let max = config.limits.max_record_bytes();
    let mut h = Harness::with(&config);
    for judge in 0..3 {
        let scores: Vec<String> = (judge * 300..judge * 300 + 300)
            .map(|i| format!(r#""{}{i:05}": {}"#, "c".repeat(245), i % 10 + 1))
            .collect();
        let rest = format!(
            r#", "expected_judges": 3, "scores": {{{}}}"#,
            scores.join(", ")
        );
        let payload = ballot(&format!("e{judge}"), "s", 0, &format!("j{judge}"), &rest);
        assert!(payload.len() < 100_000);
        assert_eq!(h.send("jury.judge-scores", &payload), Outcome::Applied);
    }
    assert!(!h.out.is_empty());
    let mut letters = 0;
    for o in &h.out {
        let text = o.render();
        assert!(text.len() <= max, "{} bytes", text.len());
        if o.topic == OutputTopic::DeadLetters {
            letters += 1;
            let dl: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(dl["error"], "output_too_large");
            let message = dl["message"].as_str().unwrap_or("");
            assert!(
                message.contains("its consensus output would be"),
                "{message}"
            );
        }
    }
    assert_eq!(letters, 1, "{:?}", topics(&h.out));
}

/// `item_id` is informational: one of tens of kB (within the message limit) costs no vote, on
/// the full reader and the one-pass one alike.
#[test]
fn a_long_item_id_costs_no_vote() {
    let long = format!(
        r#"{{"event_id": "e1", "project_id": "p", "occurred_at": 0, "item_id": "{}", "votes": [{{"voter_id": "u", "value": 1}}]}}"#,
        "t".repeat(50_000)
    );
    let mut h = Harness::new();
    assert_eq!(h.send("jury.votes", &long), Outcome::Applied);
    let record = rec("jury.votes", Some(long.as_bytes()));
    assert!(h.engine.prepare_votes(&record).is_some());
    let empty = long.replace(&"t".repeat(50_000), "").replace("e1", "e2");
    assert_eq!(h.send("jury.votes", &empty), Outcome::Applied);
}
