//! The changelog round trip: whatever a journaled state writes, a restore reads back to the same
//! state, which then processes the rest of the stream exactly as the original.

use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::engine::output::Output;
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, Record};

fn vote(i: usize, project: usize, secs: i64) -> String {
    format!(
        r#"{{"event_id": "e{i}", "project_id": "p/{project}", "occurred_at": {}, "votes": [{{"voter_id": "u", "value": 0.{}}}]}}"#,
        1_795_168_800_000 + secs * 1000,
        i % 10
    )
}

fn ballot(i: usize, session: usize, judge: usize, secs: i64) -> String {
    format!(
        r#"{{"event_id": "b{i}", "project_id": "p/{}", "session_id": "s{session}", "occurred_at": {}, "judge": "openai/j{judge}", "scores": {{"A": {}, "B": {}}}, "candidates": {{"A": {{"author": "m/a", "words": {}, "position": 0}}, "B": {{"author": "openai/j0", "position": 1}}}}, "expected_judges": 3, "category": "c"}}"#,
        session % 2,
        1_795_168_800_000 + secs * 1000,
        1 + (i * 7) % 10,
        1 + (i * 3) % 10,
        100 + i
    )
}

/// Processes `payloads` on `topic` into `state`, appending the changelog records of each
/// `flush`-sized batch to `log` (as the runtime does at the end of each cycle).
fn run(
    engine: &Engine,
    unit: Unit,
    state: &mut PartitionState,
    payloads: &[String],
    first_offset: usize,
    flush: usize,
    log: &mut Vec<StateRecord>,
) -> Vec<String> {
    let topic = match unit.topic {
        InputTopic::Votes => "jury.votes",
        _ => "jury.judge-scores",
    };
    let reps = ReputationTable::default();
    let mut out: Vec<Output> = Vec::new();
    let mut rendered = Vec::new();
    let (mut renderer, mut flushed) = (Renderer::default(), Records::default());
    for (i, p) in payloads.iter().enumerate() {
        let offset = (first_offset + i) as i64;
        let r = Record {
            topic,
            partition: Some(unit.partition),
            offset: Some(offset),
            key: None,
            timestamp_ms: None,
            clock_ms: None,
            payload: Some(p.as_bytes()),
        };
        out.clear();
        engine.process(state, &reps, &r, &mut out);
        rendered.extend(out.iter().map(|o| o.render().into_owned()));
        if (i + 1) % flush == 0 || i + 1 == payloads.len() {
            let changes = state
                .journal
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            // One renderer and one buffer serve every flush, as in the runtime; what they
            // render must not depend on the flushes before.
            flushed.clear();
            renderer.render(unit, state, &changes, &mut flushed);
            let flush_records: Vec<StateRecord> = flushed.iter().map(StateRecord::from).collect();
            assert_eq!(flush_records, records(unit, state, &changes));
            log.extend(flush_records);
            log.push(offset_record(unit, offset));
        }
    }
    rendered
}

fn restore(unit: Unit, log: &[StateRecord]) -> (PartitionState, Option<i64>) {
    let mut r = Restorer::new(unit);
    // Another unit's records on the same changelog partition must be ignored.
    let other = Unit {
        topic: InputTopic::Votes,
        partition: unit.partition + 1,
    };
    r.accept(
        offset_record(other, 99).key.as_bytes(),
        Some(b"{\"offset\": 99}"),
    );
    for rec in log {
        r.accept(rec.key.as_bytes(), rec.value.as_deref().map(str::as_bytes));
    }
    r.finish().unwrap()
}

/// The records for one flush's `changes`, owned.
fn records(unit: Unit, state: &PartitionState, changes: &[Change]) -> Vec<StateRecord> {
    let mut out = Records::default();
    Renderer::default().render(unit, state, changes, &mut out);
    out.iter().map(StateRecord::from).collect()
}

fn offset_record(unit: Unit, offset: i64) -> StateRecord {
    let mut out = Records::default();
    out.push_offset(unit, offset);
    let rendered: Vec<StateRecord> = out.iter().map(StateRecord::from).collect();
    assert_eq!(rendered.len(), 1);
    rendered[0].clone()
}

/// Small windows and limits, so short streams evict, complete and time out.
fn engine(dedupe_window: usize) -> Engine {
    let mut config = Config::default();
    config.limits.dedupe_window = dedupe_window;
    config.sessions.completed_window = 3;
    config.sessions.max_open_per_project = 2;
    config.sessions.timeout_secs = 20;
    Engine::new(config)
}

/// A run without interruption: its final state and outputs.
fn clean_run(
    engine: &Engine,
    unit: Unit,
    payloads: &[String],
    flush: usize,
) -> (PartitionState, Vec<String>) {
    let mut state = PartitionState::journaled();
    let out = run(
        engine,
        unit,
        &mut state,
        payloads,
        0,
        flush,
        &mut Vec::new(),
    );
    (state, out)
}

fn check_round_trip(unit: Unit, payloads: &[String], cut: usize, flush: usize) {
    check_round_trip_with(&engine(5), unit, payloads, cut, flush);
}

fn check_round_trip_with(
    engine: &Engine,
    unit: Unit,
    payloads: &[String],
    cut: usize,
    flush: usize,
) {
    let (mut clean, clean_out) = clean_run(engine, unit, payloads, flush);
    // A run that stops after `cut` records and restores from its changelog.
    let mut log = Vec::new();
    let mut first = PartitionState::journaled();
    let mut out = run(
        engine,
        unit,
        &mut first,
        &payloads[..cut],
        0,
        flush,
        &mut log,
    );
    let (mut restored, offset) = restore(unit, &log);
    assert_eq!(offset, cut.checked_sub(1).map(|o| o as i64));
    let mut expect = first.clone();
    expect.journal = Some(Vec::new());
    restored.journal = Some(Vec::new());
    assert_eq!(restored, expect, "restored state differs");
    out.extend(run(
        engine,
        unit,
        &mut restored,
        &payloads[cut..],
        cut,
        flush,
        &mut log,
    ));
    assert_eq!(out, clean_out, "outputs after restore differ");
    clean.journal = None;
    restored.journal = None;
    assert_eq!(restored, clean);
}

#[test]
fn keys_are_json_arrays_that_survive_slashes() {
    let unit = Unit {
        topic: InputTopic::JudgeScores,
        partition: 3,
    };
    let state = PartitionState::default();
    let recs = records(
        unit,
        &state,
        &[Change::Board {
            project: "p/1".into(),
            category: "".into(),
            model: "openai/gpt-4o".into(),
        }],
    );
    assert_eq!(recs[0].key, r#"["j",3,"board","p/1","","openai/gpt-4o"]"#);
    // Keys with characters JSON escapes read back as the same ids.
    let odd = "p\"1\\\u{1}é";
    let key = &records(
        unit,
        &state,
        &[Change::Audit {
            project: odd.into(),
        }],
    )[0]
    .key;
    let parts: Vec<serde_json::Value> = serde_json::from_str(key).expect("json key");
    assert_eq!(parts[3], serde_json::Value::from(odd));
    assert_eq!(recs[0].value, None);
    assert_eq!(
        offset_record(unit, 7).value.as_deref(),
        Some(r#"{"offset":7}"#)
    );
    assert_eq!(
        offset_record(unit, -2).value.as_deref(),
        Some(r#"{"offset":-2}"#)
    );
}

#[test]
fn votes_round_trip_with_evictions() {
    let payloads: Vec<String> = (0..40).map(|i| vote(i, i % 3, i as i64)).collect();
    for cut in [0, 1, 7, 20, 39, 40] {
        check_round_trip(
            Unit {
                topic: InputTopic::Votes,
                partition: 0,
            },
            &payloads,
            cut,
            4,
        );
    }
}

const VOTES: Unit = Unit {
    topic: InputTopic::Votes,
    partition: 0,
};

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
    // 10 events of one project in one flush: one record, the score with its 10 ids.
    run(&engine, VOTES, &mut state, &payloads[..10], 0, 10, &mut log);
    let keys: Vec<&str> = log.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, [r#"["v",0,"project","p/0"]"#, r#"["v",0,"offset"]"#]);
    let value: serde_json::Value =
        serde_json::from_str(log[0].value.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(value["seen"].as_array().map(Vec::len), Some(10));
    assert_eq!(value["score"]["evaluations"], 10);
    // The 33rd id opens bucket 1: bucket 0 gets its own record, written before the project's.
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
            r#"["v",0,"seen","p/0","0"]"#,
            r#"["v",0,"project","p/0"]"#,
            r#"["v",0,"offset"]"#
        ]
    );
    let bucket: Vec<(u64, String)> =
        serde_json::from_str(log[0].value.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(bucket.len(), 32);
    let value: serde_json::Value =
        serde_json::from_str(log[1].value.as_deref().unwrap_or_default()).expect("json");
    assert_eq!(value["seen"][0][0], 32);
}

/// A crash can cut a flush short: a prefix of its records reaches the log, its offset record
/// does not. Restoring that and replaying from the last complete flush must end in the clean
/// run's state, every vote counted once, as long as the dedupe window holds at least a flush's
/// worth of a project's ids (the default window is 100,000 per project, a flush 100 ms).
fn check_cut_flush(payloads: &[String], window: usize, flush: usize, cut: usize, keep: usize) {
    let engine = engine(window);
    let (mut clean, _) = clean_run(&engine, VOTES, payloads, flush);
    // Flushes complete through record `cut` (a multiple of `flush`), then one more is cut.
    let mut log = Vec::new();
    let mut first = PartitionState::journaled();
    run(
        &engine,
        VOTES,
        &mut first,
        &payloads[..cut],
        0,
        flush,
        &mut log,
    );
    let mut torn = Vec::new();
    let end = (cut + flush).min(payloads.len());
    run(
        &engine,
        VOTES,
        &mut first,
        &payloads[cut..end],
        cut,
        flush,
        &mut torn,
    );
    torn.pop(); // the offset record is written last: it never made it
    let keep = keep.min(torn.len());
    log.extend(torn.into_iter().take(keep));
    let (mut restored, offset) = restore(VOTES, &log);
    assert_eq!(offset, cut.checked_sub(1).map(|o| o as i64));
    // The runtime skips records at or below the restored offset and replays the rest.
    run(
        &engine,
        VOTES,
        &mut restored,
        &payloads[cut..],
        cut,
        flush,
        &mut log,
    );
    clean.journal = None;
    restored.journal = None;
    assert_eq!(
        restored, clean,
        "cut after {keep} records of the flush at {cut}"
    );
}

#[test]
fn a_flush_cut_short_restores_to_counted_ids() {
    // 3 projects, 40 events each, flushes of 20 events that cross bucket boundaries.
    let payloads: Vec<String> = (0..120).map(|i| vote(i, i % 3, i as i64)).collect();
    for window in [10, 1000] {
        for cut in [0, 20, 40, 80] {
            for keep in 0..6 {
                check_cut_flush(&payloads, window, 20, cut, keep);
            }
        }
    }
}

#[test]
fn judge_sessions_round_trip() {
    let payloads: Vec<String> = (0..60)
        .map(|i| ballot(i, i / 2, i % 4, (i * 3) as i64))
        .collect();
    for cut in [0, 5, 13, 30, 59, 60] {
        check_round_trip(
            Unit {
                topic: InputTopic::JudgeScores,
                partition: 2,
            },
            &payloads,
            cut,
            3,
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn any_cut_flush_restores_votes_exactly_once(
        projects in prop::collection::vec(0usize..3, 1..150),
        flush in 1usize..50,
        spare in 0usize..40,
        cut_flushes in 0usize..10,
        keep in 0usize..8,
    ) {
        let payloads: Vec<String> = projects.iter().enumerate().map(|(i, p)| vote(i, *p, i as i64)).collect();
        let cut = (cut_flushes * flush).min(payloads.len());
        // Replayed events are recognised by id only while the window holds a flush's worth.
        check_cut_flush(&payloads, flush + spare, flush, cut, keep);
    }

    #[test]
    fn any_cut_and_flush_size_restores_exactly(
        events in prop::collection::vec((0usize..4, 0usize..6, 0usize..3, 0i64..50), 1..40),
        cut_frac in 0.0..=1.0f64,
        flush in 1usize..6,
    ) {
        let judges: Vec<String> = events.iter().enumerate().map(|(i, (s, j, _, t))| ballot(i, *s, *j, *t)).collect();
        let votes: Vec<String> = events.iter().enumerate().map(|(i, (_, _, p, t))| vote(i % 7, *p, *t)).collect();
        let cut = ((events.len() as f64) * cut_frac) as usize;
        check_round_trip(Unit { topic: InputTopic::JudgeScores, partition: 1 }, &judges, cut, flush);
        check_round_trip(Unit { topic: InputTopic::Votes, partition: 1 }, &votes, cut, flush);
    }
}

#[test]
fn renderer_and_buffers_keep_their_memory() {
    let unit = Unit {
        topic: InputTopic::Votes,
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
            project: format!("p/{p}"),
            seen: 0..0,
            forgot: 0..0,
        })
        .collect();
    let (mut renderer, mut records) = (Renderer::default(), Records::default());
    renderer.render(unit, &state, &changes, &mut records);
    assert_eq!(records.len(), 100);
    assert!(renderer.slots.is_empty() && renderer.slots.capacity() >= 100);
    let (bytes, spans) = (records.bytes.capacity(), records.spans.capacity());
    records.clear();
    assert!(records.is_empty());
    assert_eq!(
        (records.bytes.capacity(), records.spans.capacity()),
        (bytes, spans)
    );
    renderer.render(unit, &state, &changes, &mut records);
    assert_eq!(records.iter().count(), 100);
    // An empty flush keeps the memory; after a flush of one record, the buffer gives back
    // what it held for a hundred.
    records.clear();
    records.clear();
    assert_eq!(records.bytes.capacity(), bytes);
    records.clear();
    renderer.render(unit, &state, &changes[..1], &mut records);
    records.clear();
    assert!(records.bytes.capacity() < bytes / 8);
}

proptest! {
    #[test]
    fn hex_digits_match_format(fp in any::<u128>(), n in any::<u64>()) {
        let mut b = Vec::new();
        super::push_hex(&mut b, fp);
        super::push_u64(&mut b, n);
        prop_assert_eq!(String::from_utf8_lossy(&b), format!("{fp:032x}{n}"));
    }
}

#[test]
fn hand_written_numbers_match_format() {
    for fp in [
        0u128,
        1,
        0xdead_beef,
        u128::MAX,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ] {
        let mut b = b"x".to_vec();
        super::push_hex(&mut b, fp);
        assert_eq!(b, format!("x{fp:032x}").into_bytes());
    }
    for n in [0u64, 7, 10, 32, 1_000_000, u64::MAX] {
        let mut b = b"x".to_vec();
        super::push_u64(&mut b, n);
        assert_eq!(b, format!("x{n}").into_bytes());
    }
    let mut bucket = Vec::new();
    assert!(super::push_bucket(
        &mut bucket,
        [(3, 0xab), (40, u128::MAX)].into_iter()
    ));
    assert_eq!(
        String::from_utf8_lossy(&bucket),
        format!(r#"[[3,"{:032x}"],[40,"{:032x}"]]"#, 0xab, u128::MAX)
    );
    let mut empty = Vec::new();
    assert!(!super::push_bucket(&mut empty, std::iter::empty()));
    assert_eq!(empty, b"[]");
    let negative = Unit {
        topic: InputTopic::Votes,
        partition: -1,
    };
    assert_eq!(offset_record(negative, 1).key, r#"["v",-1,"offset"]"#);
}
