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
    for (i, p) in payloads.iter().enumerate() {
        let offset = (first_offset + i) as i64;
        let r = Record {
            topic,
            partition: Some(unit.partition),
            offset: Some(offset),
            key: None,
            timestamp_ms: None,
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
            log.extend(records(unit, state, &changes));
            log.push(unit.offset_record(offset));
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
        other.offset_record(99).key.as_bytes(),
        Some(b"{\"offset\": 99}"),
    );
    for rec in log {
        r.accept(rec.key.as_bytes(), rec.value.as_deref().map(str::as_bytes));
    }
    r.finish().unwrap()
}

fn check_round_trip(unit: Unit, payloads: &[String], cut: usize, flush: usize) {
    let mut config = Config::default();
    config.limits.dedupe_window = 5;
    config.sessions.completed_window = 3;
    config.sessions.max_open_per_project = 2;
    config.sessions.timeout_secs = 20;
    let engine = Engine::new(config);
    // A run without interruption.
    let mut clean = PartitionState::journaled();
    let clean_out = run(
        &engine,
        unit,
        &mut clean,
        payloads,
        0,
        flush,
        &mut Vec::new(),
    );
    // A run that stops after `cut` records and restores from its changelog.
    let mut log = Vec::new();
    let mut first = PartitionState::journaled();
    let mut out = run(
        &engine,
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
        &engine,
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
        unit.offset_record(7).value.as_deref(),
        Some(r#"{"offset":7}"#)
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
fn hand_written_hex_matches_format() {
    for fp in [
        0u128,
        1,
        0xdead_beef,
        u128::MAX,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ] {
        assert_eq!(super::hex(fp), format!("{fp:032x}"));
    }
}
