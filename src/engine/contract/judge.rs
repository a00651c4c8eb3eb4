//! `jury.judge-scores`: LLM-judge ballots and session closes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::fields::{Fields, check_id, wrong_type};
use super::json::Json;
use super::rejection::{ErrorCode, Rejection};
use super::time::EventTime;

/// A judge's status for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Failed,
    Abstained,
}

/// A score scale; scores are normalized to `(s - min) / (max - min)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scale {
    pub min: f64,
    pub max: f64,
}

impl Scale {
    /// `(s - min) / (max - min)` in 0..=1, computed on halves: halving is exact, so the result
    /// is the same to the bit, and a scale as wide as `-1e308..=1e308`, whose width overflows an
    /// `f64`, still puts its middle at 0.5 instead of every score at 0.
    pub fn normalize(self, s: f64) -> f64 {
        let (s, min, max) = (s / 2.0, self.min / 2.0, self.max / 2.0);
        ((s - min) / (max - min)).clamp(0.0, 1.0)
    }
}

/// Candidate metadata; a later value of each field wins when ballots are merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CandidateMeta {
    pub author: Option<String>,
    pub words: Option<f64>,
    pub position: Option<u64>,
}

impl CandidateMeta {
    /// Overwrites the fields `newer` sets.
    pub fn merge(&mut self, newer: &CandidateMeta) {
        if newer.author.is_some() {
            self.author.clone_from(&newer.author);
        }
        if newer.words.is_some() {
            self.words = newer.words;
        }
        if newer.position.is_some() {
            self.position = newer.position;
        }
    }
}

/// A validated judge ballot, scores already normalized to 0..=1.
#[derive(Debug, Clone, PartialEq)]
pub struct BallotEvent<'d> {
    pub judge: &'d str,
    pub status: Status,
    /// Normalized scores by candidate (only for `ok` ballots).
    pub scores: BTreeMap<String, f64>,
    pub ranking: Option<Vec<String>>,
    pub candidates: BTreeMap<String, CandidateMeta>,
    pub expected_judges: Option<u32>,
    pub category: Option<&'d str>,
}

/// What a `jury.judge-scores` event asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeAction<'d> {
    Ballot(BallotEvent<'d>),
    Close,
}

/// A validated `jury.judge-scores` event.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeEvent<'d> {
    pub event_id: &'d str,
    pub project_id: &'d str,
    pub session_id: &'d str,
    pub occurred_at: Option<EventTime>,
    pub action: JudgeAction<'d>,
}

/// Limits and defaults that apply while reading.
#[derive(Debug, Clone, Copy)]
pub struct JudgeLimits {
    pub max_id_bytes: usize,
    pub reject_unknown_fields: bool,
    pub default_scale: Scale,
}

const BALLOT_FIELDS: [&str; 13] = [
    "type",
    "event_id",
    "project_id",
    "session_id",
    "occurred_at",
    "judge",
    "status",
    "scores",
    "scale",
    "ranking",
    "candidates",
    "expected_judges",
    "category",
];
const CLOSE_FIELDS: [&str; 5] = [
    "type",
    "event_id",
    "project_id",
    "session_id",
    "occurred_at",
];

impl<'d> JudgeEvent<'d> {
    /// Validates a parsed payload against the `jury.judge-scores` contract.
    pub fn from_json(doc: &'d Json<'_>, limits: JudgeLimits) -> Result<JudgeEvent<'d>, Rejection> {
        // Read `type` first: it decides which fields exist.
        let loose = Fields::of(doc, "", &BALLOT_FIELDS, false)?;
        let kind = loose.opt_str("type")?.unwrap_or("judge_score");
        let known: &[&str] = match kind {
            "judge_score" => &BALLOT_FIELDS,
            "session_close" => &CLOSE_FIELDS,
            other => {
                return Err(Rejection::new(
                    ErrorCode::UnknownType,
                    format!("`type` is {other:?}; expected \"judge_score\" or \"session_close\""),
                ));
            }
        };
        let f = Fields::of(doc, "", known, limits.reject_unknown_fields)?;
        let event_id = f.id("event_id", limits.max_id_bytes)?;
        let project_id = f.id("project_id", limits.max_id_bytes)?;
        let session_id = f.id("session_id", limits.max_id_bytes)?;
        let occurred_at = f.opt_time("occurred_at")?;
        let action = if kind == "session_close" {
            JudgeAction::Close
        } else {
            JudgeAction::Ballot(read_ballot(&f, limits)?)
        };
        Ok(JudgeEvent {
            event_id,
            project_id,
            session_id,
            occurred_at,
            action,
        })
    }
}

fn read_ballot<'d>(
    f: &Fields<'d, '_, '_>,
    limits: JudgeLimits,
) -> Result<BallotEvent<'d>, Rejection> {
    let judge = f.id("judge", limits.max_id_bytes)?;
    let status = match f.opt_str("status")?.unwrap_or("ok") {
        "ok" => Status::Ok,
        "failed" => Status::Failed,
        "abstained" => Status::Abstained,
        other => {
            return Err(Rejection::new(
                ErrorCode::UnknownStatus,
                format!("`status` is {other:?}; expected \"ok\", \"failed\" or \"abstained\""),
            ));
        }
    };
    let (scale, defaulted) = read_scale(f, limits.default_scale)?;
    let scores = match (status, f.get("scores")) {
        (Status::Ok, None) => {
            return Err(Rejection::new(
                ErrorCode::MissingField,
                "`scores` is required when `status` is \"ok\"",
            ));
        }
        (Status::Ok, Some(value)) => read_scores(value, (scale, defaulted), limits.max_id_bytes)?,
        // A failed or abstaining judge carries no scores; any it sent are not used.
        _ => BTreeMap::new(),
    };
    let ranking = match f.get("ranking") {
        None => None,
        Some(Json::Array(items)) => Some(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Json::Str(s) => Ok(s.to_string()),
                    other => Err(wrong_type(&format!("ranking[{i}]"), "a string", other)),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(other) => return Err(wrong_type("ranking", "an array of candidate ids", other)),
    };
    let candidates = match f.get("candidates") {
        None => BTreeMap::new(),
        Some(value) => read_candidates(value, limits)?,
    };
    let expected_judges = match f.get("expected_judges") {
        None => None,
        Some(Json::Int(n)) if (1..=100_000).contains(n) => Some(*n as u32),
        Some(Json::Int(_) | Json::UInt(_)) => {
            return Err(Rejection::new(
                ErrorCode::ValueOutOfRange,
                "`expected_judges` must be within 1..=100000",
            ));
        }
        Some(other) => return Err(wrong_type("expected_judges", "an integer", other)),
    };
    let category = f.opt_id("category", limits.max_id_bytes)?;
    Ok(BallotEvent {
        judge,
        status,
        scores,
        ranking,
        candidates,
        expected_judges,
        category,
    })
}

/// Reads a ballot's `scale`, each end missing taken from `default` (`sessions.default_scale_*`),
/// with a note naming the ends so taken: a judge that sends scores of 0..1 and no scale is told
/// where its 1..10 came from, not only that its scores lie outside it.
fn read_scale(f: &Fields<'_, '_, '_>, default: Scale) -> Result<(Scale, &'static str), Rejection> {
    let Some(value) = f.get("scale") else {
        return Ok((
            default,
            " (sessions.default_scale_min and default_scale_max: the ballot has no `scale`)",
        ));
    };
    let s = Fields::of(value, "scale", &["min", "max"], false)?;
    let (min, max) = (s.opt_number("min")?, s.opt_number("max")?);
    let defaulted = match (min, max) {
        (Some(_), Some(_)) => "",
        (None, Some(_)) => " (`scale.min` from sessions.default_scale_min)",
        (Some(_), None) => " (`scale.max` from sessions.default_scale_max)",
        (None, None) => " (both ends from sessions.default_scale_min and default_scale_max)",
    };
    let (min, max) = (min.unwrap_or(default.min), max.unwrap_or(default.max));
    if min >= max {
        return Err(Rejection::new(
            ErrorCode::InvalidScale,
            format!("`scale` min {min} must be below max {max}{defaulted}"),
        ));
    }
    Ok((Scale { min, max }, defaulted))
}

fn read_scores(
    value: &Json<'_>,
    (scale, defaulted): (Scale, &str),
    max_id_bytes: usize,
) -> Result<BTreeMap<String, f64>, Rejection> {
    let Json::Object(members) = value else {
        return Err(wrong_type(
            "scores",
            "an object of candidate id -> score",
            value,
        ));
    };
    if members.is_empty() {
        return Err(Rejection::new(
            ErrorCode::EmptyField,
            "`scores` needs at least one score when `status` is \"ok\"",
        ));
    }
    let mut scores = BTreeMap::new();
    for (id, v) in members {
        let path = format!("scores.{id}");
        check_id(id, max_id_bytes).map_err(|e| e.at(&path))?;
        let s = v.as_f64().ok_or_else(|| wrong_type(&path, "a number", v))?;
        if !(scale.min..=scale.max).contains(&s) {
            return Err(Rejection::new(
                ErrorCode::ScoreOutOfScale,
                format!(
                    "`{path}` is {s}; the scale is {}..={}{defaulted}",
                    scale.min, scale.max
                ),
            ));
        }
        let n = scale.normalize(s);
        if scores.insert(id.to_string(), n).is_some() {
            return Err(Rejection::new(
                ErrorCode::DuplicateField,
                format!("`{path}` appears more than once"),
            ));
        }
    }
    Ok(scores)
}

fn read_candidates(
    value: &Json<'_>,
    limits: JudgeLimits,
) -> Result<BTreeMap<String, CandidateMeta>, Rejection> {
    let Json::Object(members) = value else {
        return Err(wrong_type(
            "candidates",
            "an object of candidate id -> metadata",
            value,
        ));
    };
    let mut out = BTreeMap::new();
    for (id, meta) in members {
        let path = format!("candidates.{id}");
        check_id(id, limits.max_id_bytes).map_err(|e| e.at(&path))?;
        let m = Fields::of(
            meta,
            &path,
            &["author", "words", "position"],
            limits.reject_unknown_fields,
        )?;
        let author = m.opt_id("author", limits.max_id_bytes)?.map(str::to_owned);
        let words = m.opt_number("words")?;
        if let Some(w) = words
            && w < 0.0
        {
            return Err(Rejection::new(
                ErrorCode::ValueOutOfRange,
                format!("`{path}.words` is {w}; must be >= 0"),
            ));
        }
        let position = match m.get("position") {
            None => None,
            Some(Json::Int(p)) if *p >= 0 => Some(*p as u64),
            Some(Json::Int(p)) => {
                return Err(Rejection::new(
                    ErrorCode::ValueOutOfRange,
                    format!("`{path}.position` is {p}; must be >= 0"),
                ));
            }
            Some(other) => {
                return Err(wrong_type(
                    &m.path("position"),
                    "a non-negative integer",
                    other,
                ));
            }
        };
        if out
            .insert(
                id.to_string(),
                CandidateMeta {
                    author,
                    words,
                    position,
                },
            )
            .is_some()
        {
            return Err(Rejection::new(
                ErrorCode::DuplicateField,
                format!("`{path}` appears more than once"),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::contract::json::parse;

    const LIMITS: JudgeLimits = JudgeLimits {
        max_id_bytes: 64,
        reject_unknown_fields: false,
        default_scale: Scale {
            min: 1.0,
            max: 10.0,
        },
    };

    fn read(payload: &str) -> Result<JudgeEvent<'static>, Rejection> {
        let doc: &'static Json<'static> = Box::leak(Box::new(
            parse(Box::leak(payload.to_owned().into_boxed_str()).as_bytes()).unwrap(),
        ));
        JudgeEvent::from_json(doc, LIMITS)
    }

    fn code(payload: &str) -> ErrorCode {
        read(payload).unwrap_err().code
    }

    #[test]
    fn reads_the_contract_example() {
        let e = read(
            r#"{"type": "judge_score", "event_id": "js-0001", "project_id": "proj-42", "session_id": "council-981",
                "occurred_at": "2026-11-20T10:00:09Z", "judge": "openai/gpt-4o", "status": "ok",
                "scores": {"resp-A": 8, "resp-B": 6.5}, "scale": {"min": 1, "max": 10},
                "ranking": ["resp-A", "resp-B"],
                "candidates": {"resp-A": {"author": "anthropic/claude", "words": 312, "position": 0}},
                "expected_judges": 4, "category": "coding"}"#,
        )
        .unwrap();
        assert_eq!(
            (e.event_id, e.project_id, e.session_id),
            ("js-0001", "proj-42", "council-981")
        );
        let JudgeAction::Ballot(b) = e.action else {
            panic!("not a ballot")
        };
        assert_eq!(b.judge, "openai/gpt-4o");
        assert_eq!(b.scores["resp-A"], 7.0 / 9.0);
        assert_eq!(b.scores["resp-B"], 5.5 / 9.0);
        assert_eq!(
            b.ranking.as_deref(),
            Some(&["resp-A".to_owned(), "resp-B".to_owned()][..])
        );
        assert_eq!(
            b.candidates["resp-A"],
            CandidateMeta {
                author: Some("anthropic/claude".into()),
                words: Some(312.0),
                position: Some(0)
            }
        );
        assert_eq!((b.expected_judges, b.category), (Some(4), Some("coding")));
    }

    #[test]
    fn defaults_and_close() {
        let e = read(r#"{"event_id": "e", "project_id": "p", "session_id": "s", "judge": "j", "scores": {"a": 10}}"#).unwrap();
        let JudgeAction::Ballot(b) = e.action else {
            panic!()
        };
        assert_eq!((b.status, b.scores["a"]), (Status::Ok, 1.0));
        let e = read(
            r#"{"type": "session_close", "event_id": "e", "project_id": "p", "session_id": "s"}"#,
        )
        .unwrap();
        assert_eq!(e.action, JudgeAction::Close);
        let e = read(r#"{"event_id": "e", "project_id": "p", "session_id": "s", "judge": "j", "status": "failed"}"#).unwrap();
        let JudgeAction::Ballot(b) = e.action else {
            panic!()
        };
        assert!(b.scores.is_empty());
    }

    #[test]
    fn rejections() {
        let base = r#""event_id": "e", "project_id": "p", "session_id": "s", "judge": "j""#;
        let with = |rest: &str| format!("{{{base}, {rest}}}");
        assert_eq!(code(&with(r#""type": "vote""#)), ErrorCode::UnknownType);
        assert_eq!(
            code(&with(r#""status": "sleepy", "scores": {"a": 1}"#)),
            ErrorCode::UnknownStatus
        );
        assert_eq!(code(&format!("{{{base}}}")), ErrorCode::MissingField);
        assert_eq!(code(&with(r#""scores": {}"#)), ErrorCode::EmptyField);
        assert_eq!(
            code(&with(r#""scores": {"a": 11}"#)),
            ErrorCode::ScoreOutOfScale
        );
        assert_eq!(
            code(&with(r#""scores": {"a": 0.5}"#)),
            ErrorCode::ScoreOutOfScale
        );
        assert_eq!(
            code(&with(
                r#""scores": {"a": 5}, "scale": {"min": 5, "max": 5}"#
            )),
            ErrorCode::InvalidScale
        );
        assert_eq!(
            code(&with(r#""scores": {"a": "high"}"#)),
            ErrorCode::WrongType
        );
        assert_eq!(code(&with(r#""scores": [1, 2]"#)), ErrorCode::WrongType);
        assert_eq!(
            code(&with(r#""scores": {"a": 1, "a": 2}"#)),
            ErrorCode::DuplicateField
        );
        assert_eq!(
            code(&with(r#""scores": {"a": 1}, "ranking": [1]"#)),
            ErrorCode::WrongType
        );
        assert_eq!(
            code(&with(r#""scores": {"a": 1}, "expected_judges": 0"#)),
            ErrorCode::ValueOutOfRange
        );
        assert_eq!(
            code(&with(r#""scores": {"a": 1}, "expected_judges": 2.5"#)),
            ErrorCode::WrongType
        );
        assert_eq!(
            code(&with(
                r#""scores": {"a": 1}, "candidates": {"a": {"words": -1}}"#
            )),
            ErrorCode::ValueOutOfRange
        );
        assert_eq!(
            code(&with(
                r#""scores": {"a": 1}, "candidates": {"a": {"position": "top"}}"#
            )),
            ErrorCode::WrongType
        );
        assert_eq!(code(&with(r#""scores": {"": 1}"#)), ErrorCode::EmptyField);
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "judge": "j", "scores": {"a": 1}}"#),
            ErrorCode::MissingField
        );
    }

    /// A score outside a scale the ballot did not give in full says which ends came from
    /// `sessions.default_scale_*`; one outside a scale it gave says nothing more.
    #[test]
    fn a_score_outside_a_default_scale_names_where_the_scale_came_from() {
        let base = r#""event_id": "e", "project_id": "p", "session_id": "s", "judge": "j""#;
        let message = |rest: &str| read(&format!("{{{base}, {rest}}}")).unwrap_err().message;
        assert_eq!(
            message(r#""scores": {"a": 0.7}"#),
            "`scores.a` is 0.7; the scale is 1..=10 (sessions.default_scale_min and \
             default_scale_max: the ballot has no `scale`)"
        );
        assert_eq!(
            message(r#""scores": {"a": 0.5}, "scale": {"max": 5}"#),
            "`scores.a` is 0.5; the scale is 1..=5 (`scale.min` from sessions.default_scale_min)"
        );
        assert_eq!(
            message(r#""scores": {"a": 0.5}, "scale": {}"#),
            "`scores.a` is 0.5; the scale is 1..=10 (both ends from \
             sessions.default_scale_min and default_scale_max)"
        );
        assert_eq!(
            message(r#""scores": {"a": 12}, "scale": {"min": 11}"#),
            "`scale` min 11 must be below max 10 (`scale.max` from sessions.default_scale_max)"
        );
        assert_eq!(
            message(r#""scores": {"a": 6}, "scale": {"min": 0, "max": 5}"#),
            "`scores.a` is 6; the scale is 0..=5"
        );
    }

    #[test]
    fn merge_keeps_later_values() {
        let mut m = CandidateMeta {
            author: Some("a".into()),
            words: Some(1.0),
            position: None,
        };
        m.merge(&CandidateMeta {
            author: None,
            words: Some(2.0),
            position: Some(3),
        });
        assert_eq!(
            m,
            CandidateMeta {
                author: Some("a".into()),
                words: Some(2.0),
                position: Some(3)
            }
        );
    }

    #[test]
    fn normalizing_survives_a_scale_whose_width_overflows() {
        let wide = Scale {
            min: -1e308,
            max: 1e308,
        };
        assert_eq!(wide.normalize(5.0), 0.5);
        assert_eq!(wide.normalize(1e308), 1.0);
        assert_eq!(wide.normalize(-1e308), 0.0);
        let usual = Scale {
            min: 1.0,
            max: 10.0,
        };
        assert_eq!(usual.normalize(5.5), 0.5);
        assert_eq!(usual.normalize(10.0), 1.0);
    }

    proptest::proptest! {
        /// On every finite scale and score within it, the normalized score is in 0..=1 and
        /// equals `(s - min) / (max - min)` wherever that does not overflow.
        #[test]
        fn normalized_scores_are_bounded_and_exact(
            a in proptest::num::f64::NORMAL | proptest::num::f64::ZERO,
            b in proptest::num::f64::NORMAL | proptest::num::f64::ZERO,
            t in 0.0..=1.0f64,
        ) {
            // Two equal ends (both zero, as a rule) make a scale of the one and its half, or
            // 0..1: assuming them away rejected too many cases for a long run.
            let (min, max) = if a != b {
                (a.min(b), a.max(b))
            } else if a > 0.0 {
                (a / 2.0, a)
            } else if a < 0.0 {
                (a, a / 2.0)
            } else {
                (0.0, 1.0)
            };
            proptest::prop_assert!(min < max);
            let s = (min + t * (max / 2.0 - min / 2.0) * 2.0).clamp(min, max);
            let n = Scale { min, max }.normalize(s);
            proptest::prop_assert!((0.0..=1.0).contains(&n), "{n}");
            if (max - min).is_finite() && (max - min).abs() > f64::MIN_POSITIVE * 4.0 {
                let plain = ((s - min) / (max - min)).clamp(0.0, 1.0);
                proptest::prop_assert_eq!(n, plain);
            }
        }
    }
}
