//! Output records: what the engine asks its runtime to publish.
//!
//! Values are rendered to JSON here, once, with a fixed field order and the shortest float
//! spelling that round-trips, so the same input always yields byte-identical output.

use std::borrow::Cow;

use serde::Serialize;

use super::contract::rejection::Rejection;
use super::contract::time::EventTime;

/// The logical output topics; the runtime maps them to configured names (see `crate::topics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutputTopic {
    Scores,
    Consensus,
    BiasAlerts,
    Leaderboard,
    DeadLetters,
    JudgeQuality,
    ReviewRequests,
    ReviewerQuality,
}

impl OutputTopic {
    pub const ALL: [OutputTopic; 8] = [
        OutputTopic::Scores,
        OutputTopic::Consensus,
        OutputTopic::BiasAlerts,
        OutputTopic::Leaderboard,
        OutputTopic::DeadLetters,
        OutputTopic::JudgeQuality,
        OutputTopic::ReviewRequests,
        OutputTopic::ReviewerQuality,
    ];

    /// Its name in metric labels, whatever its configured topic name.
    pub fn label(self) -> &'static str {
        match self {
            OutputTopic::Scores => "scores",
            OutputTopic::Consensus => "consensus",
            OutputTopic::BiasAlerts => "bias_alerts",
            OutputTopic::Leaderboard => "leaderboard",
            OutputTopic::DeadLetters => "dead_letters",
            OutputTopic::JudgeQuality => "judge_quality",
            OutputTopic::ReviewRequests => "review_requests",
            OutputTopic::ReviewerQuality => "reviewer_quality",
        }
    }
}

/// One record to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub topic: OutputTopic,
    pub key: Option<String>,
    pub value: OutputValue,
    /// What a runtime counts it as, without parsing it.
    pub counted: Option<Counted>,
    /// The part of a project's state it shows, for the queries' view, without parsing it.
    pub shows: Option<Shows>,
}

/// The part of a project's state an output record shows: the queries' view files the record
/// under it (a score record is filed under its key, the project).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shows {
    /// A `jury.leaderboard` row of (category, model), `""` for no category; `live` is false
    /// for a row published once more as it left the window, which the state forgets.
    Row {
        project: String,
        category: String,
        model: String,
        live: bool,
    },
    /// A judge's `jury.judge-quality` record.
    Judge { project: String, judge: String },
    /// A reviewer's `jury.reviewer-quality` record.
    Reviewer { project: String, reviewer: String },
}

/// What an output is counted as in the runtimes' metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// A bias alert of (scope, kind).
    Alert(&'static str, &'static str),
    /// A consensus published with the configured judge weights because the learned ones of
    /// its judges were all zero.
    WeightsFallback,
}

/// An output value. Scores stay typed until rendered, because the Kafka runtime coalesces them
/// per project and renders only the latest; everything else is rendered when it is made.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputValue {
    Json(String),
    Score(ScoreValue),
}

impl Output {
    /// Renders `value` as JSON. Rendering our own plain structs cannot fail; if it ever did, the
    /// error text is published instead of panicking, so the anomaly is visible downstream.
    pub fn json(topic: OutputTopic, key: Option<String>, value: &impl Serialize) -> Output {
        Output {
            topic,
            key,
            value: OutputValue::Json(render(value)),
            counted: None,
            shows: None,
        }
    }

    /// The record, noting which part of a project's state it shows.
    pub fn showing(self, shows: Shows) -> Output {
        Output {
            shows: Some(shows),
            ..self
        }
    }

    /// A `jury.bias-alerts` record.
    pub fn alert(key: Option<String>, alert: &super::model::bias::BiasAlert) -> Output {
        Output {
            counted: Some(Counted::Alert(alert.scope, alert.kind)),
            ..Output::json(OutputTopic::BiasAlerts, key, alert)
        }
    }

    /// The value as JSON text.
    pub fn render(&self) -> Cow<'_, str> {
        match &self.value {
            OutputValue::Json(text) => Cow::Borrowed(text),
            OutputValue::Score(v) => Cow::Owned(v.render(self.key.as_deref().unwrap_or_default())),
        }
    }

    /// The value as JSON bytes, for a runtime that publishes many: one rendered when it was made
    /// as it is, a score written into `buffer`, which the runtime keeps from record to record.
    pub fn value_bytes<'b>(&'b self, buffer: &'b mut Vec<u8>) -> &'b [u8] {
        match &self.value {
            OutputValue::Json(text) => text.as_bytes(),
            OutputValue::Score(v) => {
                buffer.clear();
                v.write(self.key.as_deref().unwrap_or_default(), buffer);
                buffer
            }
        }
    }
}

impl ScoreValue {
    /// The `jury.scores` record of `project_id`.
    pub fn render(&self, project_id: &str) -> String {
        let mut b = Vec::new();
        self.write(project_id, &mut b);
        String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Appends the `jury.scores` record of `project_id` to `b`.
    pub fn write(&self, project_id: &str, b: &mut Vec<u8>) {
        let record = ScoreRecord {
            project_id,
            score: self.score,
            freshness: self.freshness,
            alpha: self.alpha,
            lambda: self.lambda,
            evaluations: self.evaluations,
            votes: self.votes,
            last_event_at: self.last_event_at,
        };
        // Writing our own plain struct into a vector cannot fail; if it ever did, the error
        // text is published instead, as `render` does for every other record.
        if let Err(e) = serde_json::to_writer(&mut *b, &record) {
            b.clear();
            b.extend_from_slice(format!("{{\"render_error\":{:?}}}", e.to_string()).as_bytes());
        }
    }
}

/// `jury.scores`: a project's score, in the contract's field order.
#[derive(Serialize)]
struct ScoreRecord<'a> {
    project_id: &'a str,
    score: f64,
    freshness: f64,
    alpha: f64,
    lambda: f64,
    evaluations: u64,
    votes: u64,
    #[serde(serialize_with = "super::contract::time::rfc3339")]
    last_event_at: EventTime,
}

fn render(value: &impl Serialize) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"render_error\":{:?}}}", e.to_string()))
}

/// The numbers of a `jury.scores` record; the project id is the output key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreValue {
    pub score: f64,
    pub freshness: f64,
    pub alpha: f64,
    pub lambda: f64,
    pub evaluations: u64,
    pub votes: u64,
    pub last_event_at: EventTime,
}

/// Where a rejected record came from.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub topic: &'a str,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
}

/// The most bytes of a rejection's message a dead letter carries: messages echo offending
/// values, and a hostile value must not make a dead letter too large to publish.
pub const DEAD_LETTER_MESSAGE_BYTES: usize = 512;

/// `jury.dead-letters`: a rejected record with the reason and (a prefix of) the original key and
/// payload. Every field is bounded, so a dead letter can always be published.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetter<'a> {
    pub source_topic: &'a str,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// The original key as text, cut like the payload.
    pub key: Option<Cow<'a, str>>,
    /// The original key's length in bytes.
    pub key_bytes: usize,
    pub error: &'static str,
    /// The rejection's message, cut to [`DEAD_LETTER_MESSAGE_BYTES`] (with its length then).
    pub message: Cow<'a, str>,
    /// The original payload as text (invalid UTF-8 replaced by U+FFFD), cut at a character
    /// boundary to at most the configured number of bytes; `null` for a tombstone.
    pub payload: Option<Cow<'a, str>>,
    /// The original payload's length in bytes.
    pub payload_bytes: usize,
}

impl<'a> DeadLetter<'a> {
    pub fn new(source: Source<'a>, rejection: &'a Rejection, max_payload_bytes: usize) -> Self {
        let message = &rejection.message;
        DeadLetter {
            source_topic: source.topic,
            partition: source.partition,
            offset: source.offset,
            key: source.key.map(|k| truncate_text(k, max_payload_bytes)),
            key_bytes: source.key.map_or(0, <[u8]>::len),
            error: rejection.code.as_str(),
            message: match truncate_text(message.as_bytes(), DEAD_LETTER_MESSAGE_BYTES) {
                Cow::Borrowed(m) if m.len() == message.len() => Cow::Borrowed(m),
                cut => Cow::Owned(format!("{cut}... ({} bytes)", message.len())),
            },
            payload: source.payload.map(|p| truncate_text(p, max_payload_bytes)),
            payload_bytes: source.payload.map_or(0, <[u8]>::len),
        }
    }

    /// The dead letter as an output record, keyed like its source record (its key as cut). If
    /// key and value together would still exceed `max_record_bytes` (escaping can make a
    /// payload of control characters six times longer), it goes without key and payload, which
    /// its lengths still describe.
    pub fn into_output(mut self, max_record_bytes: usize) -> Output {
        let key = self.key.as_deref().map(str::to_owned);
        let out = Output::json(OutputTopic::DeadLetters, key, &self);
        let size = out.key.as_ref().map_or(0, String::len) + out.render().len();
        if size <= max_record_bytes {
            return out;
        }
        (self.key, self.payload) = (None, None);
        Output::json(OutputTopic::DeadLetters, None, &self)
    }
}

/// At most `max` bytes of `bytes` as text, never splitting a character.
pub fn truncate_text(bytes: &[u8], max: usize) -> Cow<'_, str> {
    let mut end = bytes.len().min(max);
    if let Ok(text) = std::str::from_utf8(bytes) {
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        return Cow::Borrowed(&text[..end]);
    }
    String::from_utf8_lossy(&bytes[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::contract::rejection::ErrorCode;

    #[test]
    fn score_record_shape() {
        let v = ScoreValue {
            score: 0.75,
            freshness: 0.25,
            alpha: 0.75,
            lambda: 0.01,
            evaluations: 3,
            votes: 7,
            last_event_at: EventTime::new(1_795_168_807, 250_000_000).unwrap(),
        };
        assert_eq!(
            v.render("proj-42"),
            r#"{"project_id":"proj-42","score":0.75,"freshness":0.25,"alpha":0.75,"lambda":0.01,"evaluations":3,"votes":7,"last_event_at":"2026-11-20T10:00:07.250Z"}"#
        );
        // Published through a buffer that held an earlier record: the same bytes.
        let out = Output {
            topic: OutputTopic::Scores,
            key: Some("proj-42".to_owned()),
            value: OutputValue::Score(v),
            counted: None,
            shows: None,
        };
        let mut buffer = b"an earlier, longer record".to_vec();
        assert_eq!(out.value_bytes(&mut buffer), out.render().as_bytes());
        let letter = Output::json(OutputTopic::DeadLetters, None, &[1, 2]);
        assert_eq!(letter.value_bytes(&mut buffer), b"[1,2]");
    }

    proptest::proptest! {
        /// A score record reads back as the values it was rendered from: every float to the
        /// bit (non-finite ones as `null`) and the time to the nanosecond.
        #[test]
        fn score_record_reads_back(
            project_id in ".{0,30}",
            (score, freshness, alpha, lambda) in proptest::prelude::any::<(f64, f64, f64, f64)>(),
            (evaluations, votes) in proptest::prelude::any::<(u64, u64)>(),
            (secs, nanos) in (-62_167_219_200i64..=253_402_300_799, 0u32..1_000_000_000),
        ) {
            let last_event_at = EventTime::new(secs, nanos).unwrap();
            let v = ScoreValue { score, freshness, alpha, lambda, evaluations, votes, last_event_at };
            let back: serde_json::Value = serde_json::from_str(&v.render(&project_id)).unwrap();
            let float = |name: &str, x: f64| {
                let read = back[name].as_f64();
                if x.is_finite() { read == Some(x) } else { back[name].is_null() }
            };
            proptest::prop_assert_eq!(back["project_id"].as_str(), Some(project_id.as_str()));
            proptest::prop_assert!(float("score", score) && float("freshness", freshness));
            proptest::prop_assert!(float("alpha", alpha) && float("lambda", lambda));
            proptest::prop_assert_eq!(back["evaluations"].as_u64(), Some(evaluations));
            proptest::prop_assert_eq!(back["votes"].as_u64(), Some(votes));
            let at = back["last_event_at"].as_str().map(EventTime::parse_rfc3339);
            proptest::prop_assert_eq!(at, Some(Ok(last_event_at)));
            proptest::prop_assert_eq!(back.as_object().map(|o| o.len()), Some(8));
        }
    }

    #[test]
    fn truncates_at_char_boundaries() {
        assert_eq!(truncate_text("héllo".as_bytes(), 2), "h");
        assert_eq!(truncate_text("héllo".as_bytes(), 3), "hé");
        assert_eq!(truncate_text(b"abc", 10), "abc");
        assert_eq!(truncate_text(b"a\xffb", 10), "a\u{fffd}b");
    }

    #[test]
    fn dead_letter_shape() {
        let r = Rejection::new(ErrorCode::InvalidJson, "expected value at line 1 column 1");
        let source = Source {
            topic: "jury.votes",
            partition: Some(3),
            offset: Some(17),
            key: Some(b"proj-42"),
            payload: Some(b"not json at all"),
        };
        let out = DeadLetter::new(source, &r, 8).into_output(1 << 20);
        assert_eq!(out.topic, OutputTopic::DeadLetters);
        assert_eq!(out.key.as_deref(), Some("proj-42"));
        assert_eq!(
            out.render(),
            r#"{"source_topic":"jury.votes","partition":3,"offset":17,"key":"proj-42","key_bytes":7,"error":"invalid_json","message":"expected value at line 1 column 1","payload":"not json","payload_bytes":15}"#
        );
    }

    /// A hostile record: a 200 KB key and a 150,000-character value echoed in the message,
    /// all control characters (each escaped to six bytes in JSON).
    #[test]
    fn every_field_of_a_dead_letter_is_bounded() {
        let key = vec![1u8; 200_000];
        let value = "\u{1}".repeat(150_000);
        let r = Rejection::new(
            ErrorCode::UnknownVerdict,
            format!("`votes[0].verdict` is {value:?}; expected \"pass\" or \"flag\""),
        );
        let payload = vec![2u8; 300_000];
        let source = Source {
            topic: "jury.votes",
            partition: Some(0),
            offset: Some(9),
            key: Some(&key),
            payload: Some(&payload),
        };
        let out = DeadLetter::new(source, &r, 64 << 10).into_output(1 << 20);
        let value: serde_json::Value = serde_json::from_str(&out.render()).unwrap();
        assert_eq!(out.key.as_ref().map(String::len), Some(64 << 10));
        assert_eq!(value["key_bytes"], 200_000);
        assert_eq!(value["payload_bytes"], 300_000);
        let message = value["message"].as_str().unwrap();
        assert!(
            message.len() <= DEAD_LETTER_MESSAGE_BYTES + 40,
            "{}",
            message.len()
        );
        assert!(message.ends_with(&format!("... ({} bytes)", r.message.len())));
        assert!(out.key.as_ref().map_or(0, String::len) + out.render().len() <= 1 << 20);
        // Under a limit the cut fields still exceed, the letter goes without key and payload.
        let small = DeadLetter::new(source, &r, 64 << 10).into_output(100_000);
        let value: serde_json::Value = serde_json::from_str(&small.render()).unwrap();
        assert_eq!(
            (small.key.as_ref(), &value["payload"]),
            (None, &serde_json::Value::Null)
        );
        assert_eq!(value["key_bytes"], 200_000);
        assert!(small.render().len() <= 100_000);
    }
}
