//! A generated input stream with every kind of record the service must handle: reputations
//! (including a tombstone and an invalid one), vote batches (late, resent, malformed, without
//! occurred_at), and judge ballots (complete, closed, timed out, late for a completed session).
//! Each project is keyed to one partition, and offsets are the ones a fresh topic assigns.

use std::collections::HashMap;

use super::Rec;

pub struct Shape {
    pub partitions: i32,
    pub projects: usize,
    pub batches_per_project: usize,
    pub sessions_per_project: usize,
}

const T0_MS: i64 = 1_795_168_800_000;

pub fn generate(prefix: &str, shape: &Shape) -> Vec<Rec> {
    let mut offsets: HashMap<(String, i32), i64> = HashMap::new();
    let mut out = Vec::new();
    let mut push =
        |topic: String, partition: i32, key: Option<String>, ts: i64, value: Option<String>| {
            let o = offsets.entry((topic.clone(), partition)).or_insert(0);
            out.push(Rec {
                topic,
                partition,
                offset: *o,
                key,
                timestamp_ms: ts,
                value,
            });
            *o += 1;
        };
    let reps = format!("{prefix}.reputations");
    for v in 0..10 {
        let voter = format!("u-{v}");
        let value = format!(
            r#"{{"voter_id": "{voter}", "reputation": {}}}"#,
            0.5 + v as f64 * 0.25
        );
        push(
            reps.clone(),
            v % shape.partitions,
            Some(voter),
            T0_MS,
            Some(value),
        );
    }
    push(reps.clone(), 0, Some("u-3".into()), T0_MS, None);
    push(
        reps.clone(),
        1,
        Some("u-bad".into()),
        T0_MS,
        Some(r#"{"voter_id": "u-bad", "reputation": -1}"#.into()),
    );

    let votes = format!("{prefix}.votes");
    let judges = format!("{prefix}.judge-scores");
    for b in 0..shape.batches_per_project {
        for p in 0..shape.projects {
            let project = format!("proj-{p}");
            let partition = (p as i32) % shape.partitions;
            let i = b * shape.projects + p;
            let secs = (b as i64) * 5 + (p as i64 % 3);
            let value = match i % 23 {
                7 => "{not json".to_owned(),
                11 => format!(
                    r#"{{"event_id": "v-{i}", "project_id": "{project}", "votes": [{{"voter_id": "u-1", "value": NaN}}]}}"#
                ),
                13 => format!(
                    r#"{{"event_id": "v-{i}", "project_id": "{project}", "occurred_at": {}, "votes": [{{"voter_id": "u-1", "value": 1.5}}]}}"#,
                    T0_MS + secs * 1000
                ),
                17 if b > 0 => {
                    // A producer resend of an earlier batch of this project.
                    let earlier = (b - 1) * shape.projects + p;
                    format!(
                        r#"{{"event_id": "v-{earlier}", "project_id": "{project}", "occurred_at": {}, "votes": [{{"voter_id": "u-2", "verdict": "pass"}}]}}"#,
                        T0_MS + secs * 1000
                    )
                }
                19 => format!(
                    r#"{{"event_id": "v-{i}", "project_id": "{project}", "occurred_at": {}, "votes": [{{"voter_id": "u-4", "verdict": "flag"}}]}}"#,
                    T0_MS + (secs - 30) * 1000
                ),
                5 => format!(
                    r#"{{"event_id": "v-{i}", "project_id": "{project}", "votes": [{{"voter_id": "u-5", "value": 0.6}}, {{"voter_id": "u-3", "verdict": "pass"}}]}}"#
                ),
                // Votes on the sessions' candidates, so judge scores pair with them.
                _ => format!(
                    r#"{{"event_id": "v-{i}", "project_id": "{project}", "occurred_at": "{}", "item_id": "{}", "votes": [{{"voter_id": "u-{}", "verdict": "{}"}}, {{"voter_id": "u-{}", "value": 0.{}}}]}}"#,
                    rfc3339(T0_MS + secs * 1000),
                    ["A", "B", "C"][b % 3],
                    i % 10,
                    if i.is_multiple_of(3) { "flag" } else { "pass" },
                    (i + 3) % 10,
                    (i * 7) % 10
                ),
            };
            push(
                votes.clone(),
                partition,
                Some(project.clone()),
                T0_MS + secs * 1000,
                Some(value),
            );
        }
    }
    for s in 0..shape.sessions_per_project {
        for p in 0..shape.projects {
            let project = format!("proj-{p}");
            let partition = (p as i32) % shape.partitions;
            let session = format!("sess-{p}-{s}");
            let base = T0_MS + (s as i64) * 60_000;
            let expected = if s % 4 == 3 { 5 } else { 3 };
            for j in 0..3 {
                let scores = format!(
                    r#"{{"A": {}, "B": {}, "C": {}}}"#,
                    1 + (s * 3 + j * 5 + p) % 10,
                    1 + (s * 7 + j * 2) % 10,
                    1 + (p + j * 3) % 10
                );
                let value = format!(
                    r#"{{"event_id": "b-{p}-{s}-{j}", "project_id": "{project}", "session_id": "{session}", "occurred_at": {}, "judge": "judge-{j}", "scores": {scores}, "candidates": {{"A": {{"author": "model-a", "words": {}, "position": 0}}, "B": {{"author": "judge-1", "words": {}, "position": 1}}, "C": {{"author": "model-c", "words": 90, "position": 2}}}}, "expected_judges": {expected}, "category": "cat-{}"}}"#,
                    base + j as i64 * 1000,
                    100 + s * 10,
                    200 + p,
                    s % 2
                );
                push(
                    judges.clone(),
                    partition,
                    Some(project.clone()),
                    base,
                    Some(value),
                );
            }
            if s % 4 == 1 {
                let late = format!(
                    r#"{{"event_id": "b-{p}-{s}-late", "project_id": "{project}", "session_id": "{session}", "occurred_at": {}, "judge": "judge-9", "scores": {{"A": 2}}}}"#,
                    base + 5000
                );
                push(
                    judges.clone(),
                    partition,
                    Some(project.clone()),
                    base,
                    Some(late),
                );
            }
            if s % 4 == 3 {
                let close = format!(
                    r#"{{"type": "session_close", "event_id": "b-{p}-{s}-close", "project_id": "{project}", "session_id": "{session}", "occurred_at": {}}}"#,
                    base + 9000
                );
                push(
                    judges.clone(),
                    partition,
                    Some(project.clone()),
                    base,
                    Some(close),
                );
            }
        }
    }
    out
}

fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    // 2026-11-20T10:00:00Z is T0; the stream stays within a day.
    let day_secs = secs - 1_795_168_800 + 10 * 3600;
    format!(
        "2026-11-20T{:02}:{:02}:{:02}.{millis:03}Z",
        day_secs / 3600,
        (day_secs / 60) % 60,
        day_secs % 60
    )
}

/// The stream as replay lines: reputations first (the service loads the whole table before it
/// processes anything), then the rest in order.
pub fn replay_lines(records: &[Rec]) -> String {
    let (reps, rest): (Vec<&Rec>, Vec<&Rec>) = records
        .iter()
        .partition(|r| r.topic.ends_with(".reputations"));
    reps.into_iter()
        .chain(rest)
        .map(|r| serde_json::to_string(r).expect("json") + "\n")
        .collect()
}
