//! Vote batches: applied, weighed, replayed, deduplicated and rejected.

use super::*;

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
    assert_eq!(h.state.votes("proj-42").unwrap().applied_through, Some(1));
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
            let record = record.read_ahead(Some(&p));
            h.engine
                .process(&mut h.state, &mut h.reps, &record, &mut h.out)
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
    assert_eq!(h.state.votes("proj-7").unwrap().applied_through, Some(0));
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
        engine: Engine::new(small.engine_settings()),
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
    let record = record.read_ahead(Some(&p));
    let outcome = e.process(&mut h.state, &mut h.reps, &record, &mut h.out);
    assert_eq!(outcome, Outcome::Rejected(ErrorCode::ZeroTotalReputation));
}

/// A record carrying its batch read ahead ([`Record::read_ahead`]) is applied from that batch:
/// its payload is not read again, which is what reading ahead on another thread saves.
#[test]
fn a_batch_read_ahead_is_applied_without_reading_the_payload_again() {
    let e = engine();
    let valid = votes(
        "e1",
        "2026-11-20T10:00:00Z",
        r#"{"voter_id": "u-1", "value": 1}"#,
    );
    let read = e
        .prepare_votes(&rec("jury.votes", Some(valid.as_bytes())))
        .expect("a valid batch");
    let not_json = b"not json".as_slice();
    let (mut ahead, mut alone) = (Harness::new(), Harness::new());
    let record = rec("jury.votes", Some(not_json)).read_ahead(Some(&read));
    assert_eq!(ahead.send_record(record), Outcome::Applied);
    assert_eq!(ahead.last()["score"].as_f64(), Some(1.0));
    let record = rec("jury.votes", Some(not_json));
    assert_eq!(
        alone.send_record(record),
        Outcome::Rejected(ErrorCode::InvalidJson)
    );
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
    /// [`Engine::process`] of the record carrying the batch) is the same as processing the
    /// record alone: same outcomes, same
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
            let read = split.engine.prepare_votes(&record);
            prepared += usize::from(read.is_some());
            let record = record.read_ahead(read.as_ref());
            let outcome = split.engine.process(&mut split.state, &mut split.reps, &record, &mut split.out);
            prop_assert_eq!(outcome, expected);
            let render = |h: &Harness| h.out.iter().map(|o| o.render().into_owned()).collect::<Vec<String>>();
            prop_assert_eq!(render(&split), render(&plain));
            prop_assert_eq!(&split.state, &plain.state);
        }
        // The generator's valid, unescaped batches (with their record timestamps: an
        // occurred_at beyond the skew is no valid batch) take the prepared path.
        let valid = payloads
            .iter()
            .filter(|(p, secs)| {
                let mut record = rec("jury.votes", Some(p.as_bytes()));
                record.timestamp_ms = secs.map(|s| 1_700_000_000_000 + s * 1000);
                !p.contains('\\') && plain.engine.prepare_votes(&record).is_some()
            })
            .count();
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

/// A run of `scoring.stalled_after_batches` batches that do not move the project's event time
/// (at its latest instant or before it) is said once, at the batch that makes it that long,
/// with every field; a batch after the latest time ends the run, and the next such run is said
/// again; 0 says nothing.
#[test]
fn a_score_that_time_stopped_moving_is_said_once_a_run() {
    let mut config = Config::default();
    config.scoring.stalled_after_batches = 3;
    let mut h = Harness::with(&config);
    let one = r#"{"voter_id": "u-1", "value": 1}"#;
    let stalled = |h: &mut Harness, event: &str, at: &str| -> Option<Value> {
        let outcome = h.send("jury.votes", &votes(event, at, one));
        assert!(
            matches!(outcome, Outcome::Applied | Outcome::Late),
            "{outcome:?}"
        );
        h.out
            .iter()
            .map(|o| serde_json::from_str::<Value>(&o.render()).unwrap())
            .find(|v| v["kind"] == "score_stalled")
    };
    let (t0, before, after) = (
        "2026-11-20T10:00:00Z",
        "2026-11-20T09:59:00Z",
        "2026-11-20T10:00:07Z",
    );
    assert!(stalled(&mut h, "e0", t0).is_none()); // the first batch moves time
    assert!(stalled(&mut h, "e1", t0).is_none()); // 1: same instant
    assert!(stalled(&mut h, "e2", before).is_none()); // 2: late
    let alert = stalled(&mut h, "e3", t0).expect("the third in a row is said");
    assert_eq!(alert["project_id"], "proj-42");
    assert_eq!(alert["session_id"], "e3");
    assert_eq!(alert["scope"], "project");
    assert_eq!(alert["subject"], Value::Null);
    assert_eq!(
        (alert["value"].as_f64(), alert["threshold"].as_f64()),
        (Some(3.0), Some(3.0))
    );
    assert_eq!(alert["sample_size"], 3);
    assert_eq!(
        alert["detail"],
        "the score of proj-42 has not moved for 3 batches in a row \
         (scoring.stalled_after_batches): none came after its latest event time, \
         2026-11-20T10:00:00Z, so each had alpha 1. Only event time moves a score: a producer \
         whose clock stands still or went back, or that stamps every event with one time, \
         freezes it. The first batch after 2026-11-20T10:00:00Z ends this."
    );
    assert!(stalled(&mut h, "e4", t0).is_none(), "said once a run");
    assert_eq!(h.state.votes("proj-42").map(|p| p.score.still), Some(4));
    assert!(stalled(&mut h, "e5", after).is_none()); // time moves: over
    assert_eq!(h.state.votes("proj-42").map(|p| p.score.still), Some(0));
    for e in ["e6", "e7"] {
        assert!(stalled(&mut h, e, after).is_none());
    }
    let again = stalled(&mut h, "e8", after).expect("a new run is said again");
    assert_eq!(again["session_id"], "e8");
    assert!(
        again["detail"]
            .as_str()
            .is_some_and(|d| d.contains("2026-11-20T10:00:07Z"))
    );

    config.scoring.stalled_after_batches = 0;
    let mut h = Harness::with(&config);
    for i in 0..20 {
        assert!(stalled(&mut h, &format!("n{i}"), t0).is_none(), "0: never");
    }
}
