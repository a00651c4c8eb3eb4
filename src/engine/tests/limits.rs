//! The limits on what a record may bring: event times, keys, projects, sessions and outputs.

use super::*;

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
    // Dated 2099 in a record stamped in 2026: beyond the default minute of skew.
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
            .is_some_and(|m| m.contains("60 s after the record timestamp")),
        "{}",
        h.last()
    );
    // Within the skew it is applied, and a record without a timestamp is not checked.
    let soon = votes(
        "e3",
        "2026-11-20T10:00:59Z",
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

/// An `occurred_at` left unset (0, 1970-01-01) or otherwise before 2000 on a record stamped
/// after it is dead-lettered `invalid_timestamp`, for votes and judge scores, and changes no
/// state: sent on every batch it would hold the project's score at one instant. 2000-01-01
/// itself is accepted (late here, after a batch of 2026), and so is an early time on a record
/// stamped before 2000 or without a timestamp, where nothing tells it from an old event.
#[test]
fn an_occurred_at_before_2000_on_a_record_stamped_after_is_dead_lettered() {
    let mut h = Harness::new();
    let stamped = |(topic, payload): (&str, &str), ms: Option<i64>, h: &mut Harness| {
        let mut r = rec(topic, None);
        r.payload = Some(payload.as_bytes());
        r.timestamp_ms = ms;
        h.send_record(r)
    };
    let now = Some(1_795_168_800_000);
    let vote = r#"{"voter_id": "u", "value": 1}"#;
    let ok = votes("e1", "2026-11-20T10:00:00Z", vote);
    assert_eq!(stamped(("jury.votes", &ok), now, &mut h), Outcome::Applied);
    let before = h.state.clone();
    let unset = r#"{"event_id": "e2", "project_id": "proj-42", "occurred_at": 0,
        "votes": [{"voter_id": "u", "value": 0}]}"#;
    assert_eq!(
        stamped(("jury.votes", unset), now, &mut h),
        Outcome::Rejected(ErrorCode::InvalidTimestamp)
    );
    assert_eq!(h.state, before);
    assert_eq!(
        h.last()["message"],
        "`occurred_at` 1970-01-01T00:00:00Z is before 2000-01-01T00:00:00Z, its record timestamp \
         2026-11-20T10:00:00Z after: a time left unset (0) or counted from another epoch; send \
         the event's time in epoch milliseconds or RFC 3339"
    );
    let old = votes("e3", "1999-12-31T23:59:59.999Z", vote);
    assert_eq!(
        stamped(("jury.votes", &old), now, &mut h),
        Outcome::Rejected(ErrorCode::InvalidTimestamp)
    );
    let judged = r#"{"event_id": "b1", "project_id": "proj-42", "session_id": "s",
        "occurred_at": -5, "judge": "j", "scores": {"A": 5}}"#;
    assert_eq!(
        stamped(("jury.judge-scores", judged), now, &mut h),
        Outcome::Rejected(ErrorCode::InvalidTimestamp)
    );
    assert_eq!(h.state, before);
    let y2k = votes("e4", "2000-01-01T00:00:00Z", vote);
    assert_eq!(stamped(("jury.votes", &y2k), now, &mut h), Outcome::Late);
    let then = Some(946_684_799_000);
    let old = votes("e5", "1999-12-31T23:59:59Z", vote);
    assert_eq!(stamped(("jury.votes", &old), then, &mut h), Outcome::Late);
    let unstamped = votes("e6", "1970-01-01T00:00:00Z", vote);
    assert_eq!(
        stamped(("jury.votes", &unstamped), None, &mut h),
        Outcome::Late
    );
}

/// A producer whose host clock is a day ahead stamps its records and its `occurred_at` alike,
/// which the bound between the two cannot see: the service's clock when it first read the
/// record (`Record::read_at_ms`) bounds both, for votes and judge scores, whether the time is
/// `occurred_at` or the record timestamp. Replay, with no clock of its own, does not check.
#[test]
fn an_event_time_far_after_the_service_read_the_record_is_dead_lettered() {
    let mut h = Harness::new();
    let read = 1_795_168_800_000;
    let day = 86_400_000;
    let send = |h: &mut Harness, topic: &str, payload: &str, stamp: i64, read: Option<i64>| {
        let mut r = rec(topic, None);
        r.payload = Some(payload.as_bytes());
        r.timestamp_ms = Some(stamp);
        r.read_at_ms = read;
        h.send_record(r)
    };
    let at = |ms: i64| EventTime::from_epoch_millis(ms).unwrap().to_string();
    let vote = |event: &str, ms: i64| votes(event, &at(ms), r#"{"voter_id": "u", "value": 1}"#);
    assert_eq!(
        send(&mut h, "jury.votes", &vote("e0", read), read, Some(read)),
        Outcome::Applied
    );
    let before = h.state.clone();
    // A day ahead in `occurred_at` and in the record timestamp alike.
    assert_eq!(
        send(
            &mut h,
            "jury.votes",
            &vote("e1", read + day),
            read + day,
            Some(read)
        ),
        Outcome::Rejected(ErrorCode::EventTimeInFuture)
    );
    assert_eq!(h.state, before);
    let message = h.last()["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(&at(read + day))
            && message.contains(&at(read))
            && message.contains("`occurred_at`")
            && message.contains("60 s after the service first read the record"),
        "{message}"
    );
    // No `occurred_at`: the record timestamp is the event time, and is bounded the same.
    let unstated =
        r#"{"event_id": "e2", "project_id": "proj-42", "votes": [{"voter_id": "u", "value": 1}]}"#;
    assert_eq!(
        send(&mut h, "jury.votes", unstated, read + day, Some(read)),
        Outcome::Rejected(ErrorCode::EventTimeInFuture)
    );
    let message = h.last()["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("record timestamp"), "{message}");
    // Judge scores alike.
    let ballot_ahead = ballot("b1", "s1", 86_400, "j1", r#", "scores": {"A": 8}"#);
    assert_eq!(
        send(
            &mut h,
            "jury.judge-scores",
            &ballot_ahead,
            read + day,
            Some(read)
        ),
        Outcome::Rejected(ErrorCode::EventTimeInFuture)
    );
    // Within the minute of skew it is applied; unread by a service's clock (replay), too.
    assert_eq!(
        send(
            &mut h,
            "jury.votes",
            &vote("e3", read + 60_000),
            read + 60_000,
            Some(read)
        ),
        Outcome::Applied
    );
    assert_eq!(
        send(
            &mut h,
            "jury.votes",
            &vote("e4", read + day),
            read + day,
            None
        ),
        Outcome::Applied
    );
}

/// One producer with a wrong clock cannot silence a project: a vote dated 50 minutes after its
/// record (the case that froze a project for an hour when an hour of skew was the default) is
/// dead-lettered naming both times, and one just within the default minute makes the honest
/// votes after it `late` for less than that minute; from then on they move the score again.
#[test]
fn a_bad_clock_makes_honest_votes_late_for_at_most_the_skew() {
    let mut h = Harness::new();
    let stamped = |event: &str, at: i64, stamp: i64, h: &mut Harness| {
        let at = EventTime::from_epoch_millis(at).unwrap().to_string();
        let payload = votes(event, &at, r#"{"voter_id": "u", "value": 1}"#);
        let mut r = rec("jury.votes", None);
        r.payload = Some(payload.as_bytes());
        r.timestamp_ms = Some(stamp);
        h.send_record(r)
    };
    let t0 = 1_795_168_800_000;
    assert_eq!(stamped("e0", t0, t0, &mut h), Outcome::Applied);
    let fifty_minutes = t0 + 1000 + 50 * 60_000;
    assert_eq!(
        stamped("e1", fifty_minutes, t0 + 1000, &mut h),
        Outcome::Rejected(ErrorCode::OccurredAtInFuture)
    );
    let message = h.last()["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains("2026-11-20T10:50:01Z") && message.contains("2026-11-20T10:00:01Z"),
        "{message}"
    );
    // 59 s ahead is accepted; honest votes a second apart are late until their time passes it.
    assert_eq!(
        stamped("e2", t0 + 61_000, t0 + 2000, &mut h),
        Outcome::Applied
    );
    let late: Vec<i64> = (3..70)
        .filter(|s| {
            let at = t0 + s * 1000;
            stamped(&format!("e{s}"), at, at, &mut h) == Outcome::Late
        })
        .collect();
    assert_eq!(late, (3..61).collect::<Vec<i64>>());
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
                engine: Engine::new(strict.engine_settings()),
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

/// A ballot that would make its open session more than the session's changelog record holds
/// is dead-lettered, naming the limit; a judge's new ballot that takes no more room than its
/// old one is not.
#[test]
fn a_ballot_beyond_what_its_sessions_record_holds_is_dead_lettered() {
    let mut config = Config::default();
    // Records of at most 4,000 bytes: a session's takes at most 4,000 - 512 - 15 (its key's
    // project and session, `["proj-42","s"]`) = 3,473 bytes.
    let producer = &mut config.kafka.producer;
    producer.insert("message.max.bytes".into(), "4000".into());
    let mut h = Harness::with(&config);
    // Fifty scores of about 28 bytes each: a ballot takes about 1,450 bytes of the session.
    let scores: Vec<String> = (0..50)
        .map(|i| format!(r#""c{i:05}": {}"#, i % 10 + 1))
        .collect();
    let rest = format!(r#", "scores": {{{}}}"#, scores.join(", "));
    let b = |event: &str, judge: &str| ballot(event, "s", 0, judge, &rest);
    assert_eq!(
        h.send("jury.judge-scores", &b("e1", "j1")),
        Outcome::Applied
    );
    assert_eq!(
        h.send("jury.judge-scores", &b("e2", "j2")),
        Outcome::Applied
    );
    let before = h.state.clone();
    assert_eq!(
        h.send("jury.judge-scores", &b("e3", "j3")),
        Outcome::Rejected(ErrorCode::SessionLimit)
    );
    let message = h.last()["message"].as_str().unwrap_or("").to_owned();
    assert!(
        message.contains("more than the 3473 its changelog record holds"),
        "{message}"
    );
    assert_eq!(h.state, before);
    // j1 again: its ballot replaces one as large.
    assert_eq!(
        h.send("jury.judge-scores", &b("e4", "j1")),
        Outcome::Applied
    );
}

/// An output that would exceed the record limit is replaced by a dead letter that names it,
/// whatever the configuration lets through: here a consensus of three ballots of 1,500
/// candidates each under a 100 kB message limit, a session whose state fits its changelog
/// record (a score takes about 30 bytes there) and whose consensus does not (a candidate's
/// result takes several times that).
#[test]
fn an_output_beyond_the_record_limit_becomes_a_dead_letter() {
    let mut config = Config::default();
    config.limits.max_message_bytes = 100_000;
    config.sessions.max_candidates = 10_000;
    let max = config.limits.max_record_bytes();
    let mut h = Harness::with(&config);
    for judge in 0..3 {
        let scores: Vec<String> = (judge * 1500..judge * 1500 + 1500)
            .map(|i| format!(r#""c{i:05}": {}"#, i % 10 + 1))
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
/// the derived reader and the tree alike.
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
