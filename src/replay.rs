//! The file runtime: replays JSON lines of Kafka records through the engine.
//!
//! Each input line is one record, `{"topic", "partition"?, "offset"?, "key"?, "timestamp_ms"?,
//! "value"?}`, where `value` is an object (its JSON text is the payload), a string (its contents
//! are the payload: how malformed payloads are fed) or null/absent (a tombstone). A line of
//! `kcat -J` (`payload` for `value`, `ts` for `timestamp_ms`, its `tstype`, `broker` and
//! `headers` ignored) is read the same way, so a topic dumped with kcat replays as it is. Any
//! other field is refused: the line is dead-lettered naming it and the fields a line may have,
//! rather than read as something it is not. Each output line is `{"topic", "key", "value"}` in
//! processing order. The file is streamed, never loaded whole: a pass of lines at a time, read
//! before it is applied, as the service's polling thread reads ahead of its processing thread.

use std::borrow::Cow;
use std::io::{BufRead, Read, Write};
use std::ops::Range;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::engine::contract::rejection::{ErrorCode, Rejection};
use crate::engine::output::Output;
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, Outcome, PartitionState, PreparedVotes, Record};
use crate::topics::TopicTable;

/// The `source_topic` of dead letters for lines that are not records at all.
pub const REPLAY_SOURCE: &str = "replay";

/// A replay could not read its input or write its output.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("reading the input: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing the output: {0}")]
    Write(#[source] std::io::Error),
    /// A line longer than any record can be: replay reads a line whole, so it refuses one
    /// instead of exhausting memory on an endless one.
    #[error(
        "line {line} is longer than {max} bytes, more than any record can take (limits.max_message_bytes)"
    )]
    LineTooLong { line: i64, max: usize },
}

/// The longest line a replay reads: a payload of `limits.max_message_bytes` written as a JSON
/// string (every byte escaped as `\uXXXX` at worst) and the rest of its envelope.
pub fn max_line_bytes(max_message_bytes: usize) -> usize {
    max_message_bytes.saturating_mul(6).saturating_add(64 << 10)
}

/// Counts for the one-line summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    pub applied: u64,
    pub late: u64,
    pub dead_lettered: u64,
    /// Records at or below the last offset processed from their partition: the same records
    /// read again (see [`Outcome::Replayed`]).
    pub replayed: u64,
    pub outputs: u64,
}

impl Summary {
    fn count(&mut self, outcome: Outcome) {
        self.records += 1;
        match outcome {
            Outcome::Applied => self.applied += 1,
            Outcome::Late => {
                self.applied += 1;
                self.late += 1
            }
            Outcome::Rejected(_) => self.dead_lettered += 1,
            Outcome::Replayed => self.replayed += 1,
        }
    }
}

/// One input line. The aliases and the ignored fields are kcat's `-J` format.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    partition: Option<i32>,
    offset: Option<i64>,
    #[serde(borrow)]
    key: Option<Cow<'a, str>>,
    #[serde(alias = "ts")]
    timestamp_ms: Option<i64>,
    #[serde(borrow, alias = "payload")]
    value: Option<&'a RawValue>,
    #[serde(default, rename = "tstype")]
    _tstype: IgnoredAny,
    #[serde(default, rename = "broker")]
    _broker: IgnoredAny,
    #[serde(default, rename = "headers")]
    _headers: IgnoredAny,
}

/// How far a replay has come, for a progress report: the input lines read and the summary so
/// far.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub lines: i64,
    pub summary: &'a Summary,
}

/// How many lines a replay reads between two calls of its progress callback: often enough for
/// a report a second, rarely enough to cost nothing.
const PROGRESS_LINES: i64 = 4096;

/// Lines a replay reads before it applies them, as the service's polling thread reads a pass
/// of records ahead of its processing thread...
const PASS_LINES: usize = 512;
/// ... or fewer, once they hold this many bytes: a pass holds at most this and one line.
const PASS_BYTES: usize = 1 << 20;

/// The payload bytes an envelope's `value` stands for: a string's contents, or the JSON text.
fn payload_of<'a>(value: &'a RawValue) -> Result<Cow<'a, [u8]>, serde_json::Error> {
    let raw = value.get();
    if raw.starts_with('"') {
        let text: Cow<'a, str> = serde_json::from_str(raw)?;
        return Ok(match text {
            Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        });
    }
    Ok(Cow::Borrowed(raw.as_bytes()))
}

/// Replays `input` through `engine` into `output`, with fresh state; `topics` names the
/// records' inputs and the outputs' topics.
pub fn replay(
    engine: &Engine,
    topics: &TopicTable,
    input: impl BufRead,
    output: impl Write,
) -> Result<Summary, ReplayError> {
    replay_reporting(engine, topics, (input, output), |_| {})
}

/// [`replay`], calling `progress` every few thousand lines, once the lines read are applied
/// (the caller decides what to report, and how often: the replay itself reads no clock).
pub fn replay_reporting(
    engine: &Engine,
    topics: &TopicTable,
    (mut input, mut output): (impl BufRead, impl Write),
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Summary, ReplayError> {
    // One state for the whole file: a project's records are applied in file order wherever
    // their partitions say they were, which is the order the Kafka service applies them in
    // once they are repartitioned by project.
    let mut state = PartitionState::default();
    let mut reputations = ReputationTable::default();
    let mut summary = Summary::default();
    let mut line = Vec::with_capacity(1024);
    // A pass's lines, one after another, and each one's place in it and number.
    let mut pass: Vec<u8> = Vec::new();
    let mut lines: Vec<(Range<usize>, i64)> = Vec::with_capacity(PASS_LINES);
    let mut outs: Vec<Output> = Vec::new();
    let mut line_no: i64 = 0;
    // The lines read at the last progress report.
    let mut reported: i64 = 0;
    let max_line = max_line_bytes(engine.settings().limits.max_message_bytes);
    loop {
        pass.clear();
        lines.clear();
        let mut ended = None;
        while lines.len() < PASS_LINES && pass.len() < PASS_BYTES {
            line.clear();
            let read = (&mut input)
                .take(max_line as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(ReplayError::Read)?;
            if read == 0 {
                ended = Some(Ok(()));
                break;
            }
            line_no += 1;
            if line.strip_suffix(b"\n").unwrap_or(&line).len() > max_line {
                ended = Some(Err(ReplayError::LineTooLong {
                    line: line_no,
                    max: max_line,
                }));
                break;
            }
            let text = line.trim_ascii();
            if !text.is_empty() {
                let at = pass.len();
                pass.extend_from_slice(text);
                lines.push((at..pass.len(), line_no));
            }
        }
        // Every line of the pass is read before any is applied, as the service's polling
        // thread reads ahead of its processing thread: reading and applying in turn would keep
        // neither's code in the instruction cache.
        let read: Vec<_> = lines
            .iter()
            .map(|(at, _)| read_line(engine, topics, &pass[at.clone()]))
            .collect();
        for ((at, line_no), read) in lines.iter().zip(&read) {
            outs.clear();
            let outcome = match read {
                Ok((envelope, payload, prepared)) => {
                    let record = envelope
                        .record(topics, payload.as_deref())
                        .received(None, state.project_count())
                        .read_ahead(prepared.as_ref());
                    engine.process(&mut state, &mut reputations, &record, &mut outs)
                }
                Err(e) => reject_line(engine, *line_no, &pass[at.clone()], e, &mut outs),
            };
            summary.count(outcome);
            for out in &outs {
                write_output(topics, &mut output, out).map_err(ReplayError::Write)?;
            }
            summary.outputs += outs.len() as u64;
        }
        if line_no / PROGRESS_LINES > reported / PROGRESS_LINES {
            reported = line_no;
            progress(Progress {
                lines: line_no,
                summary: &summary,
            });
        }
        match ended {
            Some(Ok(())) => break,
            Some(Err(e)) => return Err(e),
            None => {}
        }
    }
    // Leaderboard categories whose ratings lack their last sessions are refitted, as the
    // service's next tick would. Reviewer records are derived from every verdict held: like the
    // service at the end of a coalescing cycle, replay publishes them once its input is done.
    outs.clear();
    engine.refit_leaderboards(&mut state, &mut outs);
    engine.release_reviewers(&mut state, &mut outs);
    for out in &outs {
        write_output(topics, &mut output, out).map_err(ReplayError::Write)?;
    }
    summary.outputs += outs.len() as u64;
    output.flush().map_err(ReplayError::Write)?;
    Ok(summary)
}

/// A line read: its envelope, its payload and, for a valid vote batch, the batch read
/// ([`Engine::prepare_votes`]); or why it is not a record.
type ReadLine<'a> =
    Result<(Envelope<'a>, Option<Cow<'a, [u8]>>, Option<PreparedVotes>), serde_json::Error>;

/// Reads one line of the input (`text`, trimmed): its envelope, payload and vote batch.
fn read_line<'a>(engine: &Engine, topics: &TopicTable, text: &'a [u8]) -> ReadLine<'a> {
    let envelope = serde_json::from_slice::<Envelope>(text)?;
    let payload = envelope.value.map(payload_of).transpose()?;
    let prepared = engine.prepare_votes(&envelope.record(topics, payload.as_deref()));
    Ok((envelope, payload, prepared))
}

impl<'a> Envelope<'a> {
    /// The engine's view of the record, whose payload is `payload`.
    fn record<'r>(&'r self, topics: &TopicTable, payload: Option<&'r [u8]>) -> Record<'r> {
        let key = self.key.as_deref().map(str::as_bytes);
        Record::new(&self.topic, topics.input(&self.topic), payload)
            .at(self.partition, self.offset)
            // No changelog: only offsets identify a record read again.
            .positioned(None)
            .keyed(key, self.timestamp_ms)
    }
}

fn reject_line(
    engine: &Engine,
    line_no: i64,
    text: &[u8],
    e: &serde_json::Error,
    outs: &mut Vec<Output>,
) -> Outcome {
    let record = Record::new(REPLAY_SOURCE, None, Some(text))
        .at(None, Some(line_no))
        .positioned(None);
    let rejection = Rejection::new(
        ErrorCode::InvalidEnvelope,
        format!("line {line_no} is not a replay record: {e}"),
    );
    engine.reject(&record, &rejection, outs)
}

/// Writes one output envelope line: `{"topic":…,"key":…,"value":…}`.
pub fn write_output(topics: &TopicTable, w: &mut impl Write, out: &Output) -> std::io::Result<()> {
    w.write_all(b"{\"topic\":")?;
    serde_json::to_writer(&mut *w, topics.output_name(out.topic))?;
    w.write_all(b",\"key\":")?;
    serde_json::to_writer(&mut *w, &out.key)?;
    w.write_all(b",\"value\":")?;
    w.write_all(out.render().as_bytes())?;
    w.write_all(b"}\n")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::engine::Settings;

    fn run(input: &str) -> (Summary, String) {
        let mut out = Vec::new();
        let settings = Settings {
            pairs_judges: true,
            ..Settings::default()
        };
        let (engine, topics) = (Engine::new(settings), TopicTable::default());
        let summary = replay(&engine, &topics, input.as_bytes(), &mut out).unwrap();
        (summary, String::from_utf8(out).unwrap())
    }

    /// Reading a pass of lines before applying any gives what reading and applying each line
    /// in turn gives: across passes, with lines that are no record among them.
    #[test]
    fn a_replay_read_in_passes_is_the_replay_read_line_by_line() {
        let settings = Settings {
            pairs_judges: true,
            ..Settings::default()
        };
        let (engine, topics) = (Engine::new(settings), TopicTable::default());
        let lines: Vec<String> = (0..3 * PASS_LINES + 7)
            .map(|i| match i % 97 {
                0 => "not a record".to_owned(),
                _ => format!(
                    r#"{{"topic": "jury.votes", "partition": 0, "offset": {i}, "value": {{"event_id": "e{i}", "project_id": "p{}", "item_id": "i{}", "occurred_at": {i}, "votes": [{{"voter_id": "u{}", "value": {}}}, {{"voter_id": "u9", "value": 1}}]}}}}"#,
                    i % 5,
                    i % 40,
                    i % 7,
                    (i % 3) as f64 / 2.0
                ),
            })
            .collect();
        let mut out = Vec::new();
        replay(&engine, &topics, lines.join("\n").as_bytes(), &mut out).unwrap();
        let mut expected = Vec::new();
        let mut state = PartitionState::default();
        let (mut reputations, mut outs) = (ReputationTable::default(), Vec::new());
        for (i, line) in lines.iter().enumerate() {
            match read_line(&engine, &topics, line.as_bytes()) {
                Ok((envelope, payload, _)) => {
                    let record = envelope
                        .record(&topics, payload.as_deref())
                        .received(None, state.project_count());
                    engine.process(&mut state, &mut reputations, &record, &mut outs)
                }
                Err(e) => reject_line(&engine, i as i64 + 1, line.as_bytes(), &e, &mut outs),
            };
        }
        engine.refit_leaderboards(&mut state, &mut outs);
        engine.release_reviewers(&mut state, &mut outs);
        for o in &outs {
            write_output(&topics, &mut expected, o).unwrap();
        }
        let (out, expected) = (
            String::from_utf8(out).unwrap(),
            String::from_utf8(expected).unwrap(),
        );
        assert!(
            out.contains("jury.scores") && out.contains("invalid_envelope"),
            "{out}"
        );
        assert!(out.contains("jury.reviewer-quality"), "{out}");
        assert_eq!(out, expected);
    }

    #[test]
    fn a_line_longer_than_any_record_stops_the_replay_naming_it() {
        let mut settings = Settings::default();
        settings.limits.max_message_bytes = 10;
        let (engine, topics) = (Engine::new(settings), TopicTable::default());
        let max = max_line_bytes(10);
        let at_most = format!("{}\n", "x".repeat(max));
        let longer = "y".repeat(max + 1);
        let input = format!("{at_most}{longer}");
        let mut out = Vec::new();
        let result = replay(&engine, &topics, input.as_bytes(), &mut out);
        assert!(
            matches!(result, Err(ReplayError::LineTooLong { line: 2, max: m }) if m == max),
            "{result:?}"
        );
        // The line within the bound was read, and dead-lettered as no record.
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("invalid_envelope"), "{text}");
    }

    #[test]
    fn string_values_are_raw_payloads_and_objects_are_json() {
        let input = concat!(
            r#"{"topic": "jury.votes", "value": {"event_id": "e1", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1}]}}"#,
            "\n\n",
            r#"{"topic": "jury.votes", "offset": 5, "key": "p", "value": "{\"event_id\": \"e2\", \"project_id\": \"p\", \"occurred_at\": 1000, \"votes\": [{\"voter_id\": \"u\", \"value\": 0}]}"}"#,
            "\n",
            r#"{"topic": "jury.votes", "partition": 1, "offset": 6, "key": "p", "value": "not json"}"#,
            "\n",
            "this line is not a record\n",
        );
        let (summary, out) = run(input);
        assert_eq!(
            summary,
            Summary {
                records: 4,
                applied: 2,
                late: 0,
                dead_lettered: 2,
                replayed: 0,
                outputs: 4
            }
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[0].starts_with(
                r#"{"topic":"jury.scores","key":"p","value":{"project_id":"p","score":1.0,"#
            ),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains(r#""evaluations":2"#));
        assert!(lines[2].starts_with(r#"{"topic":"jury.dead-letters","key":"p","value":{"source_topic":"jury.votes","partition":1,"offset":6,"key":"p","key_bytes":1,"error":"invalid_json""#), "{}", lines[2]);
        assert!(lines[3].contains(r#""source_topic":"replay","partition":null,"offset":5,"key":null,"key_bytes":0,"error":"invalid_envelope""#), "{}", lines[3]);
    }

    /// A field a line may not have is dead-lettered naming the line, the field and the fields a
    /// line may have; the rest of the file goes on.
    #[test]
    fn an_unknown_envelope_field_is_dead_lettered_naming_the_line_and_the_field() {
        let input = concat!(
            r#"{"topic": "jury.votes", "vaule": {"event_id": "e1", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1}]}}"#,
            "\n",
            r#"{"topic": "jury.votes", "value": {"event_id": "e2", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1}]}}"#,
            "\n",
        );
        let (summary, out) = run(input);
        assert_eq!(
            (summary.records, summary.applied, summary.dead_lettered),
            (2, 1, 1)
        );
        let letter: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(letter["value"]["error"], "invalid_envelope");
        let reason = letter["value"]["message"].as_str().unwrap();
        assert!(
            reason.starts_with(
                "line 1 is not a replay record: unknown field `vaule`, expected one of `topic`"
            ),
            "{reason}"
        );
        assert!(reason.contains("`value`"), "{reason}");
    }

    /// A topic dumped with `kcat -J` replays as the same records written natively.
    #[test]
    fn a_kcat_dump_replays_as_its_records() {
        let payload = r#"{\"event_id\": \"e1\", \"project_id\": \"p\", \"votes\": [{\"voter_id\": \"u\", \"value\": 1}]}"#;
        let kcat = format!(
            r#"{{"topic":"jury.votes","partition":0,"offset":7,"tstype":"create","ts":1795700000000,"broker":1,"headers":["h","v"],"key":"p","payload":"{payload}"}}"#
        );
        let native = format!(
            r#"{{"topic":"jury.votes","partition":0,"offset":7,"timestamp_ms":1795700000000,"key":"p","value":"{payload}"}}"#
        );
        let (kcat_summary, kcat_out) = run(&kcat);
        let (native_summary, native_out) = run(&native);
        assert_eq!(kcat_summary.applied, 1, "{kcat_out}");
        assert_eq!((kcat_summary, kcat_out), (native_summary, native_out));
    }

    /// Ticks in a replay file complete an idle session as the service's ticks do.
    #[test]
    fn tick_lines_complete_idle_sessions() {
        let ballot = r#"{"topic": "jury.judge-scores", "value": {"event_id": "b1", "project_id": "p", "session_id": "s1", "occurred_at": 0, "judge": "j", "scores": {"A": 8}}}"#;
        let tick = |ms: i64| format!(r#"{{"topic": "jurystream.tick", "timestamp_ms": {ms}}}"#);
        let input = [ballot.to_owned(), tick(0), tick(599_999), tick(600_000)].join("\n");
        let (summary, out) = run(&input);
        assert_eq!(
            (summary.records, summary.applied, summary.dead_lettered),
            (4, 4, 0)
        );
        let consensus: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("jury.consensus"))
            .collect();
        assert_eq!(consensus.len(), 1, "{out}");
        assert!(consensus[0].contains(r#""completed_by":"idle""#), "{out}");
    }

    /// Sessions within `leaderboard.bt_interval_secs` of their category's last fit are in its
    /// ratings at the end of the input, as the service's next tick would fit them: the last
    /// leaderboard rows are fitted as of the last session, where m-b won three of four.
    #[test]
    fn the_last_sessions_are_in_the_ratings_at_the_end_of_the_input() {
        let session = |i: usize, a: u8, b: u8| {
            format!(
                r#"{{"topic": "jury.judge-scores", "value": {{"event_id": "b{i}", "project_id": "p", "session_id": "s{i}", "occurred_at": {}, "judge": "j", "scores": {{"A{i}": {a}, "B{i}": {b}}}, "candidates": {{"A{i}": {{"author": "m-a"}}, "B{i}": {{"author": "m-b"}}}}, "expected_judges": 1}}}}"#,
                1_795_168_800_000_u64 + 10_000 * i as u64
            )
        };
        let input = [session(0, 9, 5), session(1, 2, 5), session(2, 2, 5)].join("\n");
        let (_, out) = run(&input);
        let rows: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["topic"] == "jury.leaderboard")
            .map(|r| r["value"].clone())
            .collect();
        // Two rows a session, then both refitted at the end.
        assert_eq!(rows.len(), 8, "{out}");
        let (a, b) = (&rows[6], &rows[7]);
        assert_eq!((&a["model"], &b["model"]), (&"m-a".into(), &"m-b".into()));
        for row in [a, b] {
            assert_eq!(row["bt_fitted_at"], "2026-11-20T10:00:20Z", "{row}");
        }
        assert!(b["bt_rating"].as_f64() > a["bt_rating"].as_f64(), "{out}");
    }

    /// The progress callback sees the lines read and the records counted so far.
    #[test]
    fn progress_is_reported_every_few_thousand_lines() {
        let line = r#"{"topic": "jury.votes", "value": {"event_id": "e", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1}]}}"#;
        let input = format!("{line}\n").repeat(2 * PROGRESS_LINES as usize + 1);
        let (engine, topics) = (Engine::new(Settings::default()), TopicTable::default());
        let mut seen = Vec::new();
        let mut out = Vec::new();
        replay_reporting(&engine, &topics, (input.as_bytes(), &mut out), |p| {
            seen.push((p.lines, p.summary.records))
        })
        .unwrap();
        let n = PROGRESS_LINES;
        // Reported once a pass of lines is applied: its summary counts every line read.
        assert_eq!(seen, vec![(n, n as u64), (2 * n, 2 * n as u64)]);
    }

    #[test]
    fn a_record_read_again_at_its_offset_is_replayed_once() {
        let vote = |offset: i64, event: &str| {
            format!(
                r#"{{"topic": "jury.votes", "partition": 2, "offset": {offset}, "value": {{"event_id": "{event}", "project_id": "p", "occurred_at": 0, "votes": [{{"voter_id": "u", "value": 1}}]}}}}"#
            )
        };
        let bad = |offset: i64| {
            format!(
                r#"{{"topic": "jury.judge-scores", "partition": 0, "offset": {offset}, "value": "not json"}}"#
            )
        };
        // Offsets 3 and 4, then 4 again (the same record: replayed, no output), then event e1
        // at a new offset (a resend: a duplicate), then offset 2 (below the partition's last:
        // a record read again, whatever it holds). A rejected record read again is not
        // dead-lettered twice, and each partition is its own sequence.
        let input = [
            vote(3, "e1"),
            vote(4, "e2"),
            vote(4, "e2"),
            vote(5, "e1"),
            vote(2, "e3"),
            bad(4),
            bad(4),
            vote(0, "e4").replace("\"partition\": 2", "\"partition\": 1"),
        ]
        .join("\n");
        let (summary, out) = run(&input);
        assert_eq!(
            (summary.applied, summary.replayed, summary.dead_lettered),
            (3, 3, 2),
            "{out}"
        );
        let errors: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split(r#""error":""#).nth(1)?.split('"').next())
            .collect();
        assert_eq!(errors, ["duplicate_event_id", "invalid_json"], "{out}");
    }

    #[test]
    fn max_projects_counts_every_project_once_wherever_its_records_are() {
        let mut settings = Settings::default();
        settings.limits.max_projects = 2;
        let (engine, topics) = (Engine::new(settings), TopicTable::default());
        let line = |partition: i32, event: &str, project: &str| {
            format!(
                r#"{{"topic": "jury.votes", "partition": {partition}, "value": {{"event_id": "{event}", "project_id": "{project}", "occurred_at": 0, "votes": [{{"voter_id": "u", "value": 1}}]}}}}"#
            )
        };
        let input = [
            line(0, "e1", "a"),
            line(1, "e2", "b"),
            line(2, "e3", "c"),
            line(2, "e4", "a"),
        ]
        .join("\n");
        let mut out = Vec::new();
        let summary = replay(&engine, &topics, input.as_bytes(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        // a and b fill the instance; c is refused; a in another partition is still project a.
        assert_eq!((summary.applied, summary.dead_lettered), (3, 1), "{out}");
        assert_eq!(out.matches("project_limit").count(), 1, "{out}");
        assert!(out.contains(r#""evaluations":2"#), "{out}");
    }

    #[test]
    fn a_project_with_votes_and_judge_scores_counts_once() {
        let mut settings = Settings::default();
        settings.limits.max_projects = 2;
        let (engine, topics) = (Engine::new(settings), TopicTable::default());
        let vote = |event: &str, project: &str| {
            format!(
                r#"{{"topic": "jury.votes", "value": {{"event_id": "{event}", "project_id": "{project}", "occurred_at": 0, "votes": [{{"voter_id": "u", "value": 1}}]}}}}"#
            )
        };
        let ballot = |event: &str, project: &str| {
            format!(
                r#"{{"topic": "jury.judge-scores", "value": {{"event_id": "{event}", "project_id": "{project}", "session_id": "s", "occurred_at": 0, "judge": "j", "scores": {{"A": 5}}}}}}"#
            )
        };
        // a has both parts, b only judge scores: two projects, so c is refused on either topic.
        let input = [
            vote("e1", "a"),
            ballot("b1", "a"),
            ballot("b2", "b"),
            vote("e2", "b"),
            vote("e3", "c"),
            ballot("b3", "c"),
        ]
        .join("\n");
        let mut out = Vec::new();
        let summary = replay(&engine, &topics, input.as_bytes(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!((summary.applied, summary.dead_lettered), (4, 2), "{out}");
        assert_eq!(out.matches("project_limit").count(), 2, "{out}");
    }

    #[test]
    fn null_value_is_a_tombstone() {
        let input = concat!(
            r#"{"topic": "jury.reputations", "key": "u", "value": {"voter_id": "u", "reputation": 0}}"#,
            "\n",
            r#"{"topic": "jury.reputations", "key": "u", "value": null}"#,
            "\n",
            r#"{"topic": "jury.votes", "value": {"event_id": "e1", "project_id": "p", "occurred_at": 0, "votes": [{"voter_id": "u", "value": 1}]}}"#,
        );
        let (summary, out) = run(input);
        assert_eq!(summary.applied, 3, "{out}");
        assert!(out.contains(r#""score":1.0"#));
    }

    /// One generated event of a stream: a vote batch, a judge ballot, or a record no reader
    /// accepts, with the key and partition a producer gave it.
    #[derive(Debug, Clone)]
    enum Event {
        Votes {
            project: u8,
            event: u8,
            secs: u16,
            values: Vec<u8>,
            /// 0: no `item_id`; 1, 2: the ballots' candidates "A", "B" (judge quality).
            item: u8,
        },
        Ballot {
            project: u8,
            session: u8,
            judge: u8,
            secs: u16,
            a: u8,
            b: u8,
        },
        Bad {
            project: u8,
        },
    }

    fn arb_event() -> impl proptest::strategy::Strategy<Value = Event> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..4u8, 0..40u8, 0..600u16, prop::collection::vec(0..2u8, 1..4), 0..3u8)
                .prop_map(|(project, event, secs, values, item)| Event::Votes { project, event, secs, values, item }),
            3 => (0..3u8, 0..3u8, 0..3u8, 0..600u16, 1..10u8, 1..10u8)
                .prop_map(|(project, session, judge, secs, a, b)| Event::Ballot { project, session, judge, secs, a, b }),
            1 => (0..4u8).prop_map(|project| Event::Bad { project }),
        ]
    }

    impl Event {
        fn project(&self) -> u8 {
            match self {
                Event::Votes { project, .. }
                | Event::Ballot { project, .. }
                | Event::Bad { project } => *project,
            }
        }

        /// The replay line of this event as the `seq`-th record of the stream, produced with
        /// `key` to `partition` at `offset`.
        fn line(&self, seq: usize, key: Option<&str>, partition: i32, offset: i64) -> String {
            let t = |secs: u16| format!("2026-11-20T10:{:02}:{:02}Z", secs / 60, secs % 60);
            let (topic, value) = match self {
                Event::Votes {
                    project,
                    event,
                    secs,
                    values,
                    item,
                } => {
                    let item = ["", r#""item_id": "A", "#, r#""item_id": "B", "#][*item as usize];
                    let votes: Vec<String> = values
                        .iter()
                        .enumerate()
                        .map(|(i, v)| format!(r#"{{"voter_id": "u{i}", "value": {v}}}"#))
                        .collect();
                    (
                        "jury.votes",
                        format!(
                            r#"{{"event_id": "v{event}", "project_id": "p{project}", {item}"occurred_at": "{}", "votes": [{}]}}"#,
                            t(*secs),
                            votes.join(", ")
                        ),
                    )
                }
                Event::Ballot {
                    project,
                    session,
                    judge,
                    secs,
                    a,
                    b,
                } => (
                    "jury.judge-scores",
                    format!(
                        r#"{{"event_id": "b{seq}", "project_id": "p{project}", "session_id": "s{session}", "occurred_at": "{}", "judge": "j{judge}", "scores": {{"A": {a}, "B": {b}}}, "candidates": {{"A": {{"author": "m1"}}, "B": {{"author": "m2"}}}}, "expected_judges": 3, "category": "c"}}"#,
                        t(*secs)
                    ),
                ),
                Event::Bad { project } => (
                    "jury.votes",
                    format!(r#""{{\"project_id\": \"p{project}\", oops""#),
                ),
            };
            let key = key.map_or("null".to_owned(), |k| format!("{k:?}"));
            format!(
                r#"{{"topic": "{topic}", "partition": {partition}, "offset": {offset}, "key": {key}, "value": {value}}}"#
            )
        }
    }

    /// The stream's replay file, each record produced with the key and partition `place`
    /// gives it, at the next offset of its topic's partition.
    fn file(events: &[Event], place: impl Fn(usize, &Event) -> (Option<String>, i32)) -> String {
        let mut next: HashMap<(bool, i32), i64> = HashMap::new();
        let mut lines = Vec::new();
        for (seq, e) in events.iter().enumerate() {
            let (key, partition) = place(seq, e);
            let offset = next
                .entry((matches!(e, Event::Ballot { .. }), partition))
                .or_default();
            lines.push(e.line(seq, key.as_deref(), partition, *offset));
            *offset += 1;
        }
        lines.join("\n")
    }

    /// The output lines but dead letters, which name the record's own partition and offset.
    fn results(out: &str) -> Vec<&str> {
        out.lines()
            .filter(|l| !l.starts_with(r#"{"topic":"jury.dead-letters""#))
            .collect()
    }

    proptest::proptest! {
        /// Results never depend on how producers key or partition: any assignment of keys and
        /// partitions to a stream, file order kept, gives the outputs of the same stream keyed
        /// and partitioned by project.
        #[test]
        fn any_keys_and_partitions_give_the_results_of_keying_by_project(
            events in proptest::collection::vec(arb_event(), 1..120),
            places in proptest::collection::vec((proptest::option::of(0..50u16), 0..4i32), 120),
        ) {
            let by_project = file(&events, |_, e| (Some(format!("p{}", e.project())), i32::from(e.project() % 2)));
            let mis_keyed = file(&events, |seq, _| {
                let (key, partition) = places[seq];
                (key.map(|k| format!("k{k}")), partition)
            });
            let (expected, got) = (run(&by_project), run(&mis_keyed));
            proptest::prop_assert_eq!(results(&got.1), results(&expected.1));
            proptest::prop_assert_eq!(got.0, expected.0);
        }
    }
}
