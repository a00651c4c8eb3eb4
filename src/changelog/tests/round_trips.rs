//! Whole streams written and restored: the restored state equals the live one.

use super::*;

#[test]
fn votes_round_trip_with_evictions() {
    let payloads: Vec<String> = (0..40).map(|i| vote(i, i % 3, i as i64)).collect();
    for cut in [0, 1, 7, 20, 39, 40] {
        check_round_trip(
            Unit {
                kind: UnitKind::Input(InputTopic::Votes),
                partition: 0,
            },
            &payloads,
            cut,
            4,
        );
    }
}

#[test]
fn votes_round_trip_across_dedupe_buckets() {
    // 150 events over 2 projects: windows span several 32-id buckets, whole (window 1000) or
    // evicting across bucket boundaries (window 40).
    let payloads: Vec<String> = (0..150).map(|i| vote(i, i % 2, i as i64)).collect();
    for window in [40, 1000] {
        for (cut, flush) in [(0, 7), (63, 1), (64, 5), (65, 32), (101, 13), (150, 64)] {
            check_round_trip_with(&engine(window), VOTES, &payloads, cut, flush);
        }
    }
}

#[test]
fn one_record_per_vote_project_per_flush() {
    let engine = engine(1000);
    let mut state = PartitionState::journaled();
    let payloads: Vec<String> = (0..33).map(|i| vote(i, 0, i as i64)).collect();
    let mut log = Vec::new();
    // 10 events of one project in one flush: one record, the score with its 10 ids (then the
    // flush's origins and offset).
    run(&engine, VOTES, &mut state, &payloads[..10], 0, 10, &mut log);
    let keys: Vec<&str> = log.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            r#"["v",0,"project","p/0"]"#,
            r#"["v",0,"origins"]"#,
            r#"["v",0,"offset"]"#
        ]
    );
    assert_eq!(log[1].value.as_deref(), Some(&br#"[["v",0,9]]"#[..]));
    let value: serde_json::Value =
        serde_json::from_slice(log[0].value.as_deref().unwrap_or_default()).expect("json");
    // The ids are consecutive: one run of ten fingerprints.
    let ids = &value["seen"][0];
    assert_eq!(value["seen"].as_array().map(Vec::len), Some(1));
    assert_eq!(ids[0], 0);
    assert_eq!(ids[1].as_str().map(str::len), Some(10 * 32));
    assert_eq!(value["score"][2], 10, "evaluations");
    // Ids 10..33 close buckets 0 and 1 of 16 ids (32 is the first of bucket 2): each gets its
    // own record, written before the project's.
    log.clear();
    run(
        &engine,
        VOTES,
        &mut state,
        &payloads[10..],
        10,
        23,
        &mut log,
    );
    let keys: Vec<&str> = log.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            r#"["v",0,"ids","p/0","0"]"#,
            r#"["v",0,"ids","p/0","1"]"#,
            r#"["v",0,"project","p/0"]"#,
            r#"["v",0,"origins"]"#,
            r#"["v",0,"offset"]"#
        ]
    );
    for (k, record) in log[..2].iter().enumerate() {
        let bucket: Vec<(u64, String)> =
            serde_json::from_slice(record.value.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(bucket.len(), 1, "one run");
        assert_eq!((bucket[0].0, bucket[0].1.len()), (16 * k as u64, 16 * 32));
    }
    let value: serde_json::Value =
        serde_json::from_slice(log[2].value.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(value["seen"][0][0], 32);
}

#[test]
fn vote_ids_in_buckets_of_the_layout_before_are_read_then_laid_out_anew() {
    // A project's 40 ids as the layout before wrote them: bucket 0 of 32 ids in a `seen`
    // record, ids 32..40 in the project record (its open bucket of 32).
    let engine = engine(1000);
    let unit = VOTES;
    let mut live = PartitionState::journaled();
    let payloads: Vec<String> = (0..41).map(|i| vote(i, 0, i as i64)).collect();
    let mut log = Vec::new();
    run(&engine, unit, &mut live, &payloads[..40], 0, 40, &mut log);
    let ids: Vec<(u64, u128)> = live
        .votes("p/0")
        .expect("votes")
        .seen
        .range(0, 40)
        .collect();
    let runs = |ids: &[(u64, u128)]| {
        let hex: String = ids.iter().map(|(_, f)| format!("{f:032x}")).collect();
        serde_json::json!([[ids[0].0, hex]])
    };
    let project = log
        .iter()
        .find(|r| r.key.contains("\"project\""))
        .and_then(|r| r.value.clone())
        .expect("a project record");
    let mut record: serde_json::Value = serde_json::from_slice(&project).expect("json");
    record["seen"] = runs(&ids[32..]);
    let before = [
        (
            r#"["v",0,"seen","p/0","0"]"#.to_owned(),
            runs(&ids[..32]).to_string(),
        ),
        (r#"["v",0,"project","p/0"]"#.to_owned(), record.to_string()),
        (
            r#"["v",0,"origins"]"#.to_owned(),
            r#"[["v",0,39]]"#.to_owned(),
        ),
        (
            r#"["v",0,"offset"]"#.to_owned(),
            r#"{"offset":39}"#.to_owned(),
        ),
    ];
    let mut r = Restorer::new(unit);
    for (key, value) in &before {
        r.accept(key.as_bytes(), Some(value.as_bytes()));
    }
    let (mut state, offset) = r.finish().expect("the layout before restores");
    assert_eq!(offset, Some(39));
    let without_journal = |s: &PartitionState| PartitionState {
        journal: None,
        ..s.clone()
    };
    assert_eq!(without_journal(&state), without_journal(&live));
    // The next flush (one more vote, id 40) writes ids 0..32 in closed buckets of 16 (32..41
    // are the open one, in the project record), then deletes the old bucket, then writes the
    // project.
    let mut next = Vec::new();
    run(&engine, unit, &mut state, &payloads[40..], 40, 1, &mut next);
    let keys: Vec<(&str, bool)> = next
        .iter()
        .map(|r| (r.key.as_str(), r.value.is_some()))
        .collect();
    assert_eq!(
        keys,
        [
            (r#"["v",0,"ids","p/0","0"]"#, true),
            (r#"["v",0,"ids","p/0","1"]"#, true),
            (r#"["v",0,"seen","p/0","0"]"#, false),
            (r#"["v",0,"project","p/0"]"#, true),
            (r#"["v",0,"origins"]"#, true),
            (r#"["v",0,"offset"]"#, true),
        ]
    );
    // The log as compaction keeps it restores to the live state, with no bucket of the layout
    // before left.
    run(
        &engine,
        unit,
        &mut live,
        &payloads[40..],
        40,
        1,
        &mut Vec::new(),
    );
    let mut latest = std::collections::BTreeMap::new();
    for (key, value) in before
        .iter()
        .cloned()
        .map(|(k, v)| (k, Some(v.into_bytes())))
    {
        latest.insert(key, value);
    }
    for r in &next {
        latest.insert(r.key.clone(), r.value.clone());
    }
    assert!(
        latest
            .iter()
            .all(|(k, v)| !k.contains("\"seen\"") || v.is_none())
    );
    let mut r = Restorer::new(unit);
    for (key, value) in &latest {
        r.accept(key.as_bytes(), value.as_deref());
    }
    let (restored, _) = r.finish().expect("restores");
    assert_eq!(without_journal(&restored), without_journal(&live));
}

#[test]
fn judge_sessions_round_trip() {
    let payloads: Vec<String> = (0..60)
        .map(|i| ballot(i, i / 2, i % 4, (i * 3) as i64))
        .collect();
    for cut in [0, 5, 13, 30, 59, 60] {
        check_round_trip(JUDGES, &payloads, cut, 3);
    }
}

#[test]
fn judge_quality_round_trips() {
    let events: Vec<(usize, usize, i64, bool)> = (0..80)
        .map(|i| (i / 3 % 6, i % 4, (i * 2) as i64, i % 3 == 1))
        .collect();
    let mut payloads = judged_with_votes(&events);
    // Then votes on eight more items over both projects: beyond the task's three.
    payloads.extend((0..8).map(|k| item_vote(80 + k, k % 2, &format!("X{k}"), 170 + k as i64)));
    let (clean, out) = clean_run(&engine(5), PROJECTS, &payloads, 4);
    // The stream forms pairs, so the state the round trip compares holds judge windows.
    assert!(
        out.iter()
            .flatten()
            .any(|o| o.contains("\"mean_abs_diff\""))
    );
    assert!(
        clean
            .projects
            .values()
            .any(|p| !p.quality.judges.is_empty() && !p.quality.recent.is_empty())
    );
    // ... and the task's bound forgot items on the way.
    assert!(clean.quality.forgotten() > 0);
    for cut in [0, 7, 31, 50, 80] {
        check_round_trip(PROJECTS, &payloads, cut, 4);
    }
}

#[test]
fn renderer_and_buffers_keep_their_memory() {
    let unit = Unit {
        kind: UnitKind::Input(InputTopic::Votes),
        partition: 0,
    };
    let engine = engine(10);
    let mut state = PartitionState::journaled();
    let payloads: Vec<String> = (0..300).map(|i| vote(i, i % 100, 1)).collect();
    let mut log = Vec::new();
    run(&engine, unit, &mut state, &payloads, 0, 300, &mut log);
    let changes = state
        .journal
        .as_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    assert!(changes.is_empty(), "run took the journal");
    // A flush of 100 projects' changes, twice through the same renderer and buffer.
    let changes: Vec<Change> = (0..100)
        .map(|p| Change::Votes {
            project: format!("p/{p}").into(),
            seen: 0..0,
            forgot: 0..0,
        })
        .collect();
    let (mut renderer, mut records) = (Renderer::default(), Records::default());
    renderer.render(unit, &state, &changes, None, &mut records);
    assert_eq!(records.len(), 100);
    assert!(renderer.slots.is_empty() && renderer.slots.capacity() >= 100);
    let (bytes, spans) = (records.bytes.capacity(), records.spans.capacity());
    records.clear();
    assert!(records.is_empty());
    assert_eq!(
        (records.bytes.capacity(), records.spans.capacity()),
        (bytes, spans)
    );
    renderer.render(unit, &state, &changes, None, &mut records);
    assert_eq!(records.iter().count(), 100);
    // An empty flush keeps the memory; after a flush of one record, the buffer gives back
    // what it held for a hundred.
    records.clear();
    records.clear();
    assert_eq!(records.bytes.capacity(), bytes);
    records.clear();
    renderer.render(unit, &state, &changes[..1], None, &mut records);
    records.clear();
    assert!(records.bytes.capacity() < bytes / 8);
}

/// An item forgotten and voted on again in one flush is held at its new place, while the bucket
/// of its old place, which that flush leaves to the next, still holds it (the flush's record of
/// the places it forgot names the old one): the two buckets come back in any order, and the
/// restore keeps the item at its new place, as the run that wrote them did.
#[test]
fn an_item_forgotten_and_voted_again_in_one_flush_restores_at_its_new_place() {
    // Twenty items a task; buckets of 16 places; a flush of 32 records (places 0-31), then one
    // whose items 32-36 forget places 12-16 (the item "X" at 16 among them) and whose vote on
    // "X" gives it place 37.
    let item = |k: usize| {
        if k == 16 {
            "X".to_owned()
        } else {
            format!("I{k}")
        }
    };
    let mut payloads: Vec<String> = (0..37)
        .map(|k| item_vote(k, 0, &item(k), k as i64))
        .collect();
    payloads.push(item_vote(37, 0, "X", 37));
    payloads.extend((38..40).map(|k| item_vote(k, 0, &item(k), k as i64)));
    let engine = engine_with_items(5, 20);
    let (clean, _) = clean_run(&engine, PROJECTS, &payloads, 32);
    let held = |s: &PartitionState| s.quality.items().place("p/0", "X");
    assert_eq!(held(&clean), Some(37));
    // The restore reads the buckets in the order of a hash map: a few times over.
    for _ in 0..8 {
        check_round_trip_with(&engine, PROJECTS, &payloads, 38, 32);
    }
}

/// A project whose judges and humans were found on different items, or whose judged items
/// were found short of votes, keeps that finding through a restore, so the restored instance
/// does not say it again; a pair after the restore ends it (its record deleted). Every cut and
/// flush size, and flushes cut anywhere.
#[test]
fn items_found_unpaired_are_restored_and_said_once() {
    let mut config = Config::default();
    config.limits.dedupe_window = 100;
    config.judge_quality.enabled = true;
    config.judge_quality.min_pairs = 2;
    let engine = Engine::new(config.engine_settings());
    let at = |i: usize| 1_795_168_800_000 + i as i64 * 1000;
    let ballot = |i: usize, item: &str| {
        format!(
            r#"{{"event_id": "ub{i}", "project_id": "p/0", "session_id": "us{i}", "occurred_at": {}, "judge": "openai/j0", "scale": {{"min": 0, "max": 10}}, "scores": {{"{item}": 7}}, "expected_judges": 1}}"#,
            at(i)
        )
    };
    let votes = |i: usize, item: &str, n: usize| {
        let votes: Vec<String> = (0..n)
            .map(|v| format!(r#"{{"voter_id": "u{v}", "value": 1}}"#))
            .collect();
        format!(
            r#"{{"event_id": "uv{i}", "project_id": "p/0", "item_id": "{item}", "occurred_at": {}, "votes": [{}]}}"#,
            at(i),
            votes.join(", ")
        )
    };
    // Apart: the humans vote on Y items, the judge scores X items. Short: the humans vote on
    // the X items, once each (a pair needs three).
    for (voted, kind) in [
        ("Y", "judge_items_unmatched"),
        ("X", "judge_items_short_of_votes"),
    ] {
        let payloads = vec![
            ballot(0, "X0"),
            votes(1, &format!("{voted}0"), 1),
            ballot(2, "X1"),
            votes(3, &format!("{voted}1"), 1), // two of each: said
            ballot(4, "X2"),
            votes(5, &format!("{voted}2"), 1),
            votes(6, "X0", 3), // a pair: over
            ballot(7, "X3"),
            votes(8, &format!("{voted}3"), 1),
        ];
        let said = |out: &[Vec<String>]| {
            out.iter()
                .flatten()
                .filter(|o| o.contains("\"judge_items_"))
                .map(|o| o.contains(&format!("\"{kind}\"")))
                .collect::<Vec<_>>()
        };
        let (clean, out) = clean_run(&engine, PROJECTS, &payloads, 1);
        assert_eq!(said(&out), [true], "{kind}");
        assert!(said(&out[3..4]) == [true] && clean.quality("p/0").is_some_and(|q| !q.unmatched));
        check_every_cut(&engine, &payloads);
    }
}

/// A project whose score has stopped moving keeps its run through a restore: the run is said
/// once, at the same batch, however the service restarts within it, and a new run after time
/// moves is said again. Every cut and flush size, and flushes cut anywhere.
#[test]
fn a_stalled_score_is_restored_and_said_once_a_run() {
    let mut config = Config::default();
    config.limits.dedupe_window = 100;
    config.scoring.stalled_after_batches = 3;
    let engine = Engine::new(config.engine_settings());
    let votes = |i: usize, secs: i64| {
        format!(
            r#"{{"event_id": "sv{i}", "project_id": "p/0", "occurred_at": {}, "votes": [{{"voter_id": "u{i}", "value": 1}}]}}"#,
            1_795_168_800_000 + secs * 1000
        )
    };
    // Said at the fourth batch (three in a row at or before 10 s) and at the ninth.
    let times = [10, 10, 9, 10, 10, 20, 20, 20, 20, 20, 30];
    let payloads: Vec<String> = times
        .iter()
        .enumerate()
        .map(|(i, &s)| votes(i, s))
        .collect();
    let said = |out: &[Vec<String>]| {
        out.iter()
            .enumerate()
            .filter(|(_, o)| o.iter().any(|o| o.contains("\"score_stalled\"")))
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    let (clean, out) = clean_run(&engine, PROJECTS, &payloads, 1);
    assert_eq!(said(&out), [3, 8]);
    assert_eq!(clean.votes("p/0").map(|p| p.score.still), Some(0));
    check_every_cut(&engine, &payloads);
}

/// `payloads` through `engine` (one project log's task), cut after every record and restored,
/// with flushes of one to three records, and with flushes cut after any of their records.
fn check_every_cut(engine: &Engine, payloads: &[String]) {
    for flush in 1..=3 {
        for cut in 0..=payloads.len() {
            check_round_trip_with(engine, PROJECTS, payloads, cut, flush);
        }
        for cut in (0..payloads.len()).step_by(flush) {
            for keep in 0..8 {
                check_cut_flush_with(engine, PROJECTS, payloads, (flush, cut, keep));
            }
        }
    }
}
