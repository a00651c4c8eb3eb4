//! The changelog round trip: whatever a journaled state writes, a restore reads back to the same
//! state, which then processes the rest of the stream exactly as the original. The helpers that
//! run a stream, cut it and restore are here; the tests are by what they exercise.

mod cuts;
mod keys;
mod round_trips;
mod sizes;

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

/// A payload of [`run`] that stands for a tick: `tick:` and its time in milliseconds.
const TICK: &str = "tick:";

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

/// A vote of `voter` on item `i{item}` of project `p/{project}`: items voted on again and
/// again, by reviewers old and new, in flush after flush.
fn reviewer_vote(i: usize, (project, item, voter): (usize, usize, usize), secs: i64) -> String {
    format!(
        r#"{{"event_id": "rv{i}", "project_id": "p/{project}", "item_id": "i{item}", "occurred_at": {}, "votes": [{{"voter_id": "r{voter}", "value": 0.{}}}]}}"#,
        1_795_168_800_000 + secs * 1000,
        (i * 7) % 10
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
        let r = match p.strip_prefix(TICK) {
            // A tick of the service's clock at the milliseconds that follow.
            Some(ms) => Record::new(crate::engine::TICK_TOPIC, None, None)
                .keyed(None, ms.parse().ok())
                .at(Some(unit.partition), Some(offset)),
            None => Record::new(topic, Some(input), Some(p.as_bytes()))
                .at(Some(unit.partition), Some(offset)),
        };
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
            // What a restore carried from a cut flush's redo record comes first in both.
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
                // Vote projects, then item buckets before the redo record, everything else
                // after it.
                let first_redo = flush_records.iter().position(is_redo).unwrap_or(n);
                let is_vote = |r: &StateRecord| {
                    ["\"project\"", "\"ids\"", "\"seen\""]
                        .iter()
                        .any(|kind| r.key.contains(kind))
                };
                let is_items = |r: &StateRecord| r.key.contains("\"items\"");
                let votes = flush_records.iter().take_while(|r| is_vote(r)).count();
                let items = flush_records[votes..].iter().take_while(|r| is_items(r));
                assert_eq!(votes + items.count(), first_redo);
                assert!(
                    flush_records[first_redo..]
                        .iter()
                        .all(|r| !is_vote(r) && !is_items(r))
                );
                let key = |r: &StateRecord| r.key.clone();
                body.sort_by_key(key);
                written.sort_by_key(key);
                // Item buckets carry their flush, and what it found of items it forgot (see
                // `ItemBucket`): compared by key.
                for r in body.iter_mut().chain(&mut written).filter(|r| is_items(r)) {
                    r.value = None;
                }
            }
            assert_eq!(written, body);
            if origins == 1 {
                assert_eq!(flush_records[n - 2], origins_record(unit, state));
            }
            assert_eq!(flush_records.last(), Some(&offset_record(unit, offset)));
            state.end_flush();
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
        r.accept(rec.key.as_bytes(), rec.value.as_deref());
    }
    // What the runtime reads on to (the group's committed offset) is where the state restores
    // to, wherever the log was cut.
    let through = r.through().unwrap();
    let (state, offset) = r.finish().unwrap();
    assert_eq!(through, offset, "Restorer::through");
    (state, offset)
}

/// The records for one flush's `changes`, owned.
fn records(unit: Unit, state: &PartitionState, changes: &[Change]) -> Vec<StateRecord> {
    let mut out = Records::default();
    Renderer::default().render(unit, state, changes, None, &mut out);
    out.iter().map(StateRecord::from).collect()
}

fn offset_record(unit: Unit, offset: i64) -> StateRecord {
    let mut out = Records::default();
    out.push_flush((unit, &PartitionState::default()), Slot::Offset(()), offset);
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
        key: unit.key(Slot::Origins(())),
        value: Some(serde_json::to_vec(&entries).unwrap()),
    }
}

/// [`engine`] whose tasks hold `task_items` judge-quality items each (a sixth of `max_items`
/// over the six partitions).
fn engine_with_items(dedupe_window: usize, task_items: usize) -> Engine {
    let mut config = Config::default();
    config.limits.dedupe_window = dedupe_window;
    config.sessions.completed_window = 3;
    config.sessions.max_open_per_project = 2;
    config.sessions.timeout_secs = 20;
    config.judge_quality.enabled = true;
    config.judge_quality.max_items = 6 * task_items;
    let settings = config.engine_settings();
    assert_eq!(settings.quality_task_items, task_items);
    Engine::new(settings)
}

/// Small windows and limits, so short streams evict, complete and time out. Three items of each
/// kind per task: the streams below name four, so the task forgets items of one project for
/// another's.
fn engine(dedupe_window: usize) -> Engine {
    engine_with_items(dedupe_window, 3)
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
    // Equal states hold the same items in the same order; each project must also find them.
    assert!(restored.quality.consistent(&restored.projects));
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

const PROJECTS: Unit = Unit {
    kind: UnitKind::Projects,
    partition: 0,
};

const VOTES: Unit = Unit {
    kind: UnitKind::Input(InputTopic::Votes),
    partition: 0,
};

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
    check_cut_flush_with(&engine(window), unit, payloads, (flush, cut, keep));
}

/// [`check_cut_flush`] with `engine`. The log the recovery leaves restores the clean state
/// once more: nothing of the cut flush stays in it, and nothing the restore took only from its
/// redo record is lost when the next flush replaces that record.
fn check_cut_flush_with(
    engine: &Engine,
    unit: Unit,
    payloads: &[String],
    (flush, cut, keep): (usize, usize, usize),
) {
    let (mut clean, clean_out) = clean_run(engine, unit, payloads, flush);
    // Flushes complete through record `cut` (a multiple of `flush`), then one more is cut.
    let mut log = Vec::new();
    let mut first = PartitionState::journaled();
    run(
        engine,
        unit,
        &mut first,
        &payloads[..cut],
        0,
        flush,
        &mut log,
    );
    let at_cut = first.quality.items().clone();
    let mut torn = Vec::new();
    let end = (cut + flush).min(payloads.len());
    run(
        engine,
        unit,
        &mut first,
        &payloads[cut..end],
        cut,
        flush,
        &mut torn,
    );
    let at_end = first.quality.items().clone();
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
    assert!(restored.quality.consistent(&restored.projects));
    let before = cut.checked_sub(1).map(|o| o as i64);
    let redone = chunks > 0 && keep >= votes_first + chunks;
    let expect = if redone { Some(end as i64 - 1) } else { before };
    assert_eq!(
        offset, expect,
        "cut after {keep} records of the flush at {cut}"
    );
    // The judge-quality items are the flush's whole or as it found them: those it changed or
    // forgot as they were, those it took dropped.
    assert!(
        restored.quality.items() == if redone { &at_end } else { &at_cut },
        "items cut after {keep} records of the flush at {cut}"
    );
    // The runtime skips records at or below the restored offset and replays the rest.
    let next = offset.map_or(0, |o| o as usize + 1);
    let replayed = run(
        engine,
        unit,
        &mut restored,
        &payloads[next..],
        next,
        flush,
        &mut log,
    );
    // A replayed record publishes what the clean run did, or, when its vote project's record
    // made it, all but what its score's step published (counted already, and published
    // before): the score, and the alert of a run of batches that did not move it.
    for (i, (again, first)) in replayed.iter().zip(&clean_out[next..]).enumerate() {
        let unscored: Vec<&String> = first
            .iter()
            .filter(|o| !o.contains("\"freshness\"") && !o.contains("\"score_stalled\""))
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
    // What the recovery wrote leaves no trace of the cut flush in the log.
    let (mut again, offset) = restore(unit, &log);
    assert_eq!(offset, payloads.len().checked_sub(1).map(|o| o as i64));
    assert!(again.quality.consistent(&again.projects));
    again.journal = None;
    assert_eq!(
        again, clean,
        "the log after the recovery, cut after {keep} records of the flush at {cut}"
    );
}

const JUDGES: Unit = Unit {
    kind: UnitKind::Input(InputTopic::JudgeScores),
    partition: 2,
};

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
