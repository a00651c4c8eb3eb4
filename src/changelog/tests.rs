//! The changelog round trip: whatever a journaled state writes, a restore reads back to the same
//! state, which then processes the rest of the stream exactly as the original.

use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::engine::output::Output;
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, Record, Settings};

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

/// A vote batch on item `item` ("A" or "B", the candidates of [`ballot`]) of project `p/{project}`.
fn item_vote(i: usize, project: usize, item: &str, secs: i64) -> String {
    format!(
        r#"{{"event_id": "iv{i}", "project_id": "p/{project}", "item_id": "{item}", "occurred_at": {}, "votes": [{{"voter_id": "u", "value": 0.{}}}, {{"voter_id": "w", "value": 1}}]}}"#,
        1_795_168_800_000 + secs * 1000,
        (i * 3) % 10
    )
}

/// Run ids for the renderers of [`run`]: each call is a start of the runtime.
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

thread_local! {
    /// The redo chunk size of [`run`]'s renderers (a test may make it small).
    static CHUNK_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(DEFAULT_REDO_CHUNK_BYTES) };
}

/// Processes `payloads` on `topic` into `state`, appending the changelog records of each
/// `flush`-sized batch to `log` (as the runtime does at the end of each cycle). Returns each
/// record's outputs, rendered.
fn run(
    engine: &Engine,
    unit: Unit,
    state: &mut PartitionState,
    payloads: &[String],
    first_offset: usize,
    flush: usize,
    log: &mut Vec<StateRecord>,
) -> Vec<Vec<String>> {
    let mut reps = ReputationTable::default();
    let mut out: Vec<Output> = Vec::new();
    let mut rendered = Vec::new();
    let run_id = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let chunk_bytes = CHUNK_BYTES.get();
    let (mut renderer, mut flushed) = (Renderer::new(run_id, chunk_bytes), Records::default());
    for (i, p) in payloads.iter().enumerate() {
        let offset = (first_offset + i) as i64;
        let input = input_of(unit, p);
        let topic = match input {
            InputTopic::Votes => "jury.votes",
            _ => "jury.judge-scores",
        };
        let r = Record::new(topic, Some(input), Some(p.as_bytes()))
            .at(Some(unit.partition), Some(offset));
        out.clear();
        engine.process(state, &mut reps, &r, &mut out);
        rendered.push(out.iter().map(|o| o.render().into_owned()).collect());
        if (i + 1) % flush == 0 || i + 1 == payloads.len() {
            let changes = state
                .journal
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            // One renderer and one buffer serve every flush, as in the runtime; what they
            // render must not depend on the flushes before.
            flushed.clear();
            renderer.render(unit, state, &changes, Some(offset), &mut flushed);
            let flush_records: Vec<StateRecord> = flushed.iter().map(StateRecord::from).collect();
            let mut fresh = Records::default();
            Renderer::new(run_id, chunk_bytes).render(
                unit,
                state,
                &changes,
                Some(offset),
                &mut fresh,
            );
            let fresh: Vec<StateRecord> = fresh.iter().map(StateRecord::from).collect();
            // The same, but for the deletion of redo chunks an earlier flush wrote.
            let is_stale = |r: &StateRecord| r.key.contains("\"redo\"") && r.value.is_none();
            let live: Vec<StateRecord> = flush_records
                .iter()
                .filter(|r| !is_stale(r))
                .cloned()
                .collect();
            assert_eq!(live, fresh);
            // Without an offset, the state records alone. With it, the same records (a
            // projects unit's vote projects first, then the redo record and the rest), then
            // the origins and the offset. (No origins record while no record of the unit's own
            // input was processed.)
            let mut body = records(unit, state, &changes);
            let n = flush_records.len();
            let origins = usize::from(!state.origins.is_empty());
            let is_redo = |r: &StateRecord| r.key.contains("\"redo\"");
            let mut written: Vec<StateRecord> = flush_records[..n - 1 - origins]
                .iter()
                .filter(|r| !is_redo(r))
                .cloned()
                .collect();
            assert!(unit.redoes() || written.len() == n - 1 - origins);
            if unit.kind == UnitKind::Projects {
                // Vote projects before the redo record, everything else after it.
                let first_redo = flush_records.iter().position(is_redo).unwrap_or(n);
                let is_vote =
                    |r: &StateRecord| r.key.contains("\"project\"") || r.key.contains("\"seen\"");
                assert!(flush_records[..first_redo].iter().all(is_vote));
                assert!(flush_records[first_redo..].iter().all(|r| !is_vote(r)));
                let key = |r: &StateRecord| r.key.clone();
                body.sort_by_key(key);
                written.sort_by_key(key);
            }
            assert_eq!(written, body);
            if origins == 1 {
                assert_eq!(flush_records[n - 2], origins_record(unit, state));
            }
            assert_eq!(flush_records.last(), Some(&offset_record(unit, offset)));
            log.extend(flush_records);
        }
    }
    rendered
}

/// The input a payload of [`run`] is: its unit's, or in a projects unit, a vote batch's or a
/// ballot's by its fields.
fn input_of(unit: Unit, payload: &str) -> InputTopic {
    match unit.kind {
        UnitKind::Input(topic) => topic,
        UnitKind::Projects if payload.contains("\"votes\"") => InputTopic::Votes,
        UnitKind::Projects => InputTopic::JudgeScores,
    }
}

fn restore(unit: Unit, log: &[StateRecord]) -> (PartitionState, Option<i64>) {
    let mut r = Restorer::new(unit);
    // Another unit's records (of another partition) must be ignored.
    let other = Unit {
        partition: unit.partition + 1,
        ..unit
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
    Renderer::default().render(unit, state, changes, None, &mut out);
    out.iter().map(StateRecord::from).collect()
}

fn offset_record(unit: Unit, offset: i64) -> StateRecord {
    let mut out = Records::default();
    out.push_offset(unit, offset);
    let rendered: Vec<StateRecord> = out.iter().map(StateRecord::from).collect();
    assert_eq!(rendered.len(), 1);
    rendered[0].clone()
}

/// The origins record of `unit`'s `state`, as documented: `[["v",3,41],...]`.
fn origins_record(unit: Unit, state: &PartitionState) -> StateRecord {
    let entries: Vec<(&str, i32, i64)> = state
        .origins
        .entries()
        .into_iter()
        .map(|(t, p, o)| (tag(t), p, o))
        .collect();
    StateRecord {
        key: unit.key(Slot::Origins),
        value: Some(serde_json::to_string(&entries).unwrap()),
    }
}

/// Small windows and limits, so short streams evict, complete and time out.
fn engine(dedupe_window: usize) -> Engine {
    let mut config = Config::default();
    config.limits.dedupe_window = dedupe_window;
    config.sessions.completed_window = 3;
    config.sessions.max_open_per_project = 2;
    config.sessions.timeout_secs = 20;
    config.judge_quality.enabled = true;
    // Three items of each kind per task (a sixth of `max_items` over the six partitions): the
    // streams below name four, so the task forgets items of one project for another's.
    config.judge_quality.max_items = 18;
    let settings = Settings::of(&config);
    assert_eq!(settings.quality_task_items, 3);
    Engine::new(settings)
}

/// A run without interruption: its final state and outputs.
fn clean_run(
    engine: &Engine,
    unit: Unit,
    payloads: &[String],
    flush: usize,
) -> (PartitionState, Vec<Vec<String>>) {
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
        kind: UnitKind::Input(InputTopic::JudgeScores),
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
                kind: UnitKind::Input(InputTopic::Votes),
                partition: 0,
            },
            &payloads,
            cut,
            4,
        );
    }
}

const PROJECTS: Unit = Unit {
    kind: UnitKind::Projects,
    partition: 0,
};

const VOTES: Unit = Unit {
    kind: UnitKind::Input(InputTopic::Votes),
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
    assert_eq!(log[1].value.as_deref(), Some(r#"[["v",0,9]]"#));
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
            r#"["v",0,"origins"]"#,
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
/// does not. Restoring that and replaying from the restored offset must end in the clean run's
/// state, every record counted once, and re-publish exactly the clean run's outputs for the
/// records it replays. Votes need the dedupe window to hold at least a flush's worth of a
/// project's ids (the default window is 100,000 per project, a flush 100 ms); judge scores need
/// nothing (their flush starts with its redo record).
fn check_cut_flush(
    unit: Unit,
    payloads: &[String],
    window: usize,
    flush: usize,
    cut: usize,
    keep: usize,
) {
    let engine = engine(window);
    let (mut clean, clean_out) = clean_run(&engine, unit, payloads, flush);
    // Flushes complete through record `cut` (a multiple of `flush`), then one more is cut.
    let mut log = Vec::new();
    let mut first = PartitionState::journaled();
    run(
        &engine,
        unit,
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
        unit,
        &mut first,
        &payloads[cut..end],
        cut,
        flush,
        &mut torn,
    );
    torn.pop(); // the offset record is written last: it never made it
    let keep = keep.min(torn.len());
    // A judge-scores flush starts with its redo record, a projects flush with its vote
    // projects and then its redo record: once all its chunks are out, the flush is restored
    // whole.
    let is_chunk = |r: &StateRecord| r.key.contains("\"redo\"") && r.value.is_some();
    let votes_first = torn.iter().take_while(|r| !is_chunk(r)).count();
    let chunks = torn[votes_first..]
        .iter()
        .take_while(|r| is_chunk(r))
        .count();
    assert!(chunks > 0 || !unit.redoes() || torn.is_empty() || votes_first == torn.len());
    log.extend(torn.into_iter().take(keep));
    let (mut restored, offset) = restore(unit, &log);
    let before = cut.checked_sub(1).map(|o| o as i64);
    let redone = chunks > 0 && keep >= votes_first + chunks;
    let expect = if redone { Some(end as i64 - 1) } else { before };
    assert_eq!(
        offset, expect,
        "cut after {keep} records of the flush at {cut}"
    );
    // The runtime skips records at or below the restored offset and replays the rest.
    let next = offset.map_or(0, |o| o as usize + 1);
    let replayed = run(
        &engine,
        unit,
        &mut restored,
        &payloads[next..],
        next,
        flush,
        &mut log,
    );
    // A replayed record publishes what the clean run did, or, when its vote project's record
    // made it, all but its score (counted already, and published before).
    for (i, (again, first)) in replayed.iter().zip(&clean_out[next..]).enumerate() {
        let unscored: Vec<&String> = first
            .iter()
            .filter(|o| !o.contains("\"freshness\""))
            .collect();
        assert!(
            again == first || again.iter().eq(unscored.iter().copied()),
            "record {}: {again:?} published again, the clean run published {first:?} \
             (cut after {keep} records of the flush at {cut})",
            next + i
        );
    }
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
                check_cut_flush(VOTES, &payloads, window, 20, cut, keep);
            }
        }
    }
}

const JUDGES: Unit = Unit {
    kind: UnitKind::Input(InputTopic::JudgeScores),
    partition: 2,
};

#[test]
fn a_judge_flush_cut_anywhere_counts_every_ballot_once() {
    // Sessions of 3 expected judges over 2 projects: flushes of 9 ballots complete sessions,
    // evict (2 open per project), time them out and turn the completed window over.
    let payloads: Vec<String> = (0..54)
        .map(|i| ballot(i, i / 2 + (i % 5) / 4, i % 4, (i * 3) as i64))
        .collect();
    for cut in [0, 9, 27, 45] {
        let flush_records = {
            let mut log = Vec::new();
            run(
                &engine(5),
                JUDGES,
                &mut PartitionState::journaled(),
                &payloads[..(cut + 9).min(payloads.len())],
                0,
                9,
                &mut log,
            );
            log.iter()
                .rev()
                .skip(1)
                .take_while(|r| !r.key.ends_with("\"offset\"]"))
                .count()
        };
        assert!(flush_records >= 4, "a flush of many keys: {flush_records}");
        for keep in 0..=flush_records {
            check_cut_flush(JUDGES, &payloads, 5, 9, cut, keep);
        }
    }
}

#[test]
fn a_redo_record_cut_between_its_chunks_is_ignored() {
    // Chunks of at most 300 bytes: a flush's redo record takes several, and a cut can fall
    // between them (the flush before is restored) or after them (the flush is redone).
    let payloads: Vec<String> = (0..27)
        .map(|i| ballot(i, i / 3, i % 3, (i * 3) as i64))
        .collect();
    CHUNK_BYTES.set(300);
    let mut log = Vec::new();
    run(
        &engine(5),
        JUDGES,
        &mut PartitionState::journaled(),
        &payloads[..9],
        0,
        9,
        &mut log,
    );
    let chunks = log.iter().filter(|r| r.key.contains("\"redo\"")).count();
    assert!(chunks >= 3, "{chunks} chunks");
    for cut in [0, 9, 18] {
        for keep in 0..=chunks + 2 {
            check_cut_flush(JUDGES, &payloads, 5, 9, cut, keep.min(chunks));
        }
    }
    CHUNK_BYTES.set(DEFAULT_REDO_CHUNK_BYTES);
}

/// The values of the redo chunk records in `log`, parsed.
fn redo_chunks(log: &[StateRecord]) -> Vec<(String, Option<serde_json::Value>)> {
    log.iter()
        .filter(|r| r.key.contains("\"redo\""))
        .map(|r| {
            let v = r
                .value
                .as_deref()
                .map(|v| serde_json::from_str(v).expect("json"));
            (r.key.clone(), v)
        })
        .collect()
}

/// A judge-scores state after `payloads` at offsets 0, 1, ..., and its journal.
fn judged(payloads: &[String]) -> (PartitionState, Vec<Change>) {
    let engine = engine(5);
    let mut state = PartitionState::journaled();
    for (i, p) in payloads.iter().enumerate() {
        let r = Record::new(
            "jury.judge-scores",
            Some(InputTopic::JudgeScores),
            Some(p.as_bytes()),
        )
        .at(Some(JUDGES.partition), Some(i as i64));
        engine.process(
            &mut state,
            &mut ReputationTable::default(),
            &r,
            &mut Vec::new(),
        );
    }
    let changes = state.journal.replace(Vec::new()).unwrap_or_default();
    (state, changes)
}

#[test]
fn redo_chunks_name_their_write_and_stale_ones_are_deleted() {
    let payloads: Vec<String> = (0..12)
        .map(|i| ballot(i, i / 3, i % 3, (i * 3) as i64))
        .collect();
    let (state, changes) = judged(&payloads);
    let mut renderer = Renderer::new(7, 300);
    let render = |renderer: &mut Renderer, changes: &[Change]| {
        let mut out = Records::default();
        renderer.render(JUDGES, &state, changes, Some(11), &mut out);
        out.iter().map(StateRecord::from).collect::<Vec<_>>()
    };
    let many = redo_chunks(&render(&mut renderer, &changes));
    let n = many.len();
    assert!(n >= 3, "{n} chunks");
    for (i, (key, value)) in many.iter().enumerate() {
        assert_eq!(key, &format!(r#"["j",2,"redo","{i}"]"#));
        let value = value.as_ref().expect("a chunk");
        assert_eq!((&value["run"], &value["offset"]), (&7.into(), &11.into()));
        assert_eq!(value["last"], i + 1 == n);
        assert!(!value["records"].as_array().is_some_and(Vec::is_empty));
    }
    // A smaller flush: one chunk, and the stale ones are deleted.
    let few = redo_chunks(&render(&mut renderer, &changes[..1]));
    assert_eq!(few.len(), n);
    assert_eq!(
        few[0].1.as_ref().map(|v| v["last"].clone()),
        Some(true.into())
    );
    assert!(few[1..].iter().all(|(_, v)| v.is_none()));
}

#[test]
fn chunks_of_two_writes_are_not_one_redo_record() {
    // Run 1 wrote a flush through offset 3 in two chunks and got only its first out; after a
    // restart, run 2 wrote a flush through the same offset and got only its first chunk out.
    // Chunk 0 (run 2) and chunk 1 (run 1) must not be taken for a whole.
    let payloads: Vec<String> = (0..4).map(|i| ballot(i, 0, i, i as i64)).collect();
    let (state, changes) = judged(&payloads);
    let flush = |run: u64| {
        let mut out = Records::default();
        Renderer::new(run, 200).render(JUDGES, &state, &changes, Some(3), &mut out);
        out.iter().map(StateRecord::from).collect::<Vec<_>>()
    };
    let (first, second) = (flush(1), flush(2));
    assert!(redo_chunks(&first).len() >= 2);
    let mut log = vec![first[1].clone(), second[0].clone()];
    let (restored, offset) = restore(JUDGES, &log);
    assert_eq!(offset, None);
    assert_eq!(restored.sessions, PartitionState::journaled().sessions);
    // With all of the second write's chunks, it is whole.
    log.extend(
        second
            .iter()
            .take_while(|r| r.key.contains("\"redo\""))
            .cloned(),
    );
    let (restored, offset) = restore(JUDGES, &log);
    assert_eq!(offset, Some(3));
    assert_eq!(restored.sessions, state.sessions);
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

/// Ballots of two projects with votes on their candidates in between: the judge-quality state
/// (items, waiting scores, judge windows, recent candidates) round-trips and pairs form alike.
fn judged_with_votes(events: &[(usize, usize, i64, bool)]) -> Vec<String> {
    events
        .iter()
        .enumerate()
        .map(|(i, &(s, j, t, is_vote))| {
            if is_vote {
                item_vote(i, s % 2, if j % 2 == 0 { "A" } else { "B" }, t)
            } else {
                ballot(i, s, j, t)
            }
        })
        .collect()
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
            .quality
            .iter()
            .any(|(_, q)| !q.judges.is_empty() && !q.recent.is_empty())
    );
    // ... and the task's bound forgot items on the way.
    assert!(clean.quality.iter().any(|(_, q)| q.forgotten > 0));
    for cut in [0, 7, 31, 50, 80] {
        check_round_trip(PROJECTS, &payloads, cut, 4);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// A projects unit's votes count once in its scores and once in its judge quality however
    /// its flush is cut.
    #[test]
    fn any_cut_flush_with_votes_observes_each_vote_once(
        events in prop::collection::vec((0usize..5, 0usize..4, 0i64..60, any::<bool>()), 1..60),
        flush in 1usize..12,
        cut_flushes in 0usize..6,
        keep in 0usize..40,
    ) {
        let payloads = judged_with_votes(&events);
        let cut = (cut_flushes * flush).min(payloads.len());
        check_cut_flush(PROJECTS, &payloads, 5 + flush, flush, cut, keep);
    }

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
        check_cut_flush(VOTES, &payloads, flush + spare, flush, cut, keep);
    }

    #[test]
    fn any_cut_judge_flush_restores_every_ballot_once(
        events in prop::collection::vec((0usize..5, 0usize..4, 0i64..60), 1..60),
        flush in 1usize..12,
        cut_flushes in 0usize..6,
        keep in 0usize..40,
        chunk_bytes in prop_oneof![Just(DEFAULT_REDO_CHUNK_BYTES), 100usize..2000],
    ) {
        let payloads: Vec<String> = events.iter().enumerate().map(|(i, (s, j, t))| ballot(i, *s, *j, *t)).collect();
        let cut = (cut_flushes * flush).min(payloads.len());
        CHUNK_BYTES.set(chunk_bytes);
        check_cut_flush(JUDGES, &payloads, 5, flush, cut, keep);
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
        check_round_trip(Unit::input(InputTopic::JudgeScores, 1), &judges, cut, flush);
        check_round_trip(Unit::input(InputTopic::Votes, 1), &votes, cut, flush);
        let mixed: Vec<String> = judges.iter().zip(&votes).flat_map(|(j, v)| [j.clone(), v.clone()]).collect();
        check_round_trip(Unit::projects(1), &mixed, cut, flush);
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

#[test]
fn fingerprints_and_buckets_are_spelled_as_documented() {
    for fp in [
        0u128,
        1,
        0xdead_beef,
        u128::MAX,
        0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
    ] {
        let spelled = serde_json::to_string(&super::Hex(fp)).unwrap();
        assert_eq!(spelled, format!("\"{fp:032x}\""));
        assert_eq!(u128::from_str_radix(spelled.trim_matches('"'), 16), Ok(fp));
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
    assert!(empty.is_empty());
    let negative = Unit {
        kind: UnitKind::Input(InputTopic::Votes),
        partition: -1,
    };
    assert_eq!(offset_record(negative, 1).key, r#"["v",-1,"offset"]"#);
}

#[test]
fn a_changelog_written_before_origins_and_project_watermarks_restores() {
    // `jury.state` as earlier versions wrote it: the book with the partition's watermark, no
    // origins, no project watermarks. Read on with `by_key`, the records it holds are skipped by
    // its offset; its sessions time out by their project's next event.
    let unit = Unit {
        kind: UnitKind::Input(InputTopic::JudgeScores),
        partition: 2,
    };
    let mut r = Restorer::new(unit);
    r.accept(
        br#"["j",2,"book"]"#,
        Some(br#"{"watermark":"2026-11-20T10:00:00Z","next_seq":7}"#),
    );
    r.accept(br#"["j",2,"offset"]"#, Some(br#"{"offset":41}"#));
    let (state, offset) = r.finish().expect("an old changelog restores");
    assert_eq!(offset, Some(41));
    assert_eq!(state.sessions.next_seq(), 7);
    assert!(state.origins.is_empty());
}

#[test]
fn every_kind_of_key_is_written_and_read_back() {
    let unit = Unit {
        kind: UnitKind::Input(InputTopic::JudgeScores),
        partition: 3,
    };
    for (slot, text) in [
        (Slot::Offset, r#"["j",3,"offset"]"#),
        (Slot::Origins, r#"["j",3,"origins"]"#),
        (Slot::Watermark("p"), r#"["j",3,"watermark","p"]"#),
        (Slot::Ranking("p", "c"), r#"["j",3,"ranking","p","c"]"#),
        (
            Slot::Block("p", "c", BlockId { day: -2, slot: 15 }),
            r#"["j",3,"block","p","c","-2.15"]"#,
        ),
        (Slot::Project("p/1"), r#"["j",3,"project","p/1"]"#),
        (Slot::Seen("p", 12), r#"["j",3,"seen","p","12"]"#),
        (
            Slot::Session("p", "s\"1"),
            r#"["j",3,"session","p","s\"1"]"#,
        ),
        (
            Slot::Completed("p", 0xab),
            r#"["j",3,"completed","p","000000000000000000000000000000ab"]"#,
        ),
        (Slot::Audit("p"), r#"["j",3,"audit","p"]"#),
        (
            Slot::Consensus("p", "s/1"),
            r#"["j",3,"consensus","p","s/1"]"#,
        ),
        (Slot::Board("p", "", "m"), r#"["j",3,"board","p","","m"]"#),
        (Slot::Items(6), r#"["j",3,"items","6"]"#),
        (Slot::Waits(0), r#"["j",3,"waits","0"]"#),
        (Slot::Ballots("p", 2), r#"["j",3,"ballots","p","2"]"#),
        (
            Slot::Judge("p", "openai/j"),
            r#"["j",3,"judge","p","openai/j"]"#,
        ),
        (Slot::Recent("p", 17), r#"["j",3,"recent","p","17"]"#),
        (Slot::Forgotten("p"), r#"["j",3,"forgotten","p"]"#),
        (Slot::Book, r#"["j",3,"book"]"#),
        (Slot::Redo(2), r#"["j",3,"redo","2"]"#),
    ] {
        assert_eq!(unit.key(slot), text);
        let parts: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
        assert_eq!(Slot::from_parts(&parts[2..]), Ok(slot), "{text}");
    }
    let parts: Vec<serde_json::Value> = serde_json::from_str(r#"["j",3,"seen","p","x"]"#).unwrap();
    assert_eq!(
        Slot::from_parts(&parts[2..]),
        Err("an index is not a number")
    );
    let parts: Vec<serde_json::Value> = serde_json::from_str(r#"["j",3,"nope"]"#).unwrap();
    assert_eq!(Slot::from_parts(&parts[2..]), Err("unknown kind of state"));
}
