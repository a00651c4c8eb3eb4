//! `jury.votes`: one event is one update batch of human (or automated) votes on a project.

use smallvec::SmallVec;

use super::fields::{Fields, wrong_type};
use super::json::Json;
use super::rejection::{ErrorCode, Rejection};
use super::time::EventTime;

mod plain;

/// A validated vote batch, borrowing its strings from the parsed payload.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteBatch<'a> {
    pub event_id: &'a str,
    pub project_id: &'a str,
    /// `None` when the payload has no `occurred_at`; the record timestamp is used then.
    pub occurred_at: Option<EventTime>,
    pub item_id: Option<&'a str>,
    pub votes: Votes<'a>,
}

/// A batch's votes. Batches carry a few votes, and up to four stay inline: the polling thread
/// builds a batch for every record and the processing thread frees it, and a heap allocation
/// freed on another thread is the expensive kind.
pub type Votes<'a> = SmallVec<[Vote<'a>; 4]>;

/// One vote: a value in 0..=1 (`pass` = 1, `flag` = 0) and an optional explicit reputation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vote<'a> {
    pub voter_id: &'a str,
    pub value: f64,
    pub reputation: Option<f64>,
}

/// A vote's weight in its batch's mean: its explicit reputation, else its voter's current one
/// in the reputation table (`table`, asked only then), else 1. The one rule for both ways a
/// batch is applied (as a [`VoteBatch`], and prepared on another thread).
pub fn weight(explicit: Option<f64>, table: impl FnOnce() -> Option<f64>) -> f64 {
    explicit.or_else(table).unwrap_or(1.0)
}

/// Limits that apply while reading a batch.
#[derive(Debug, Clone, Copy)]
pub struct VoteLimits {
    pub max_votes: usize,
    pub max_id_bytes: usize,
    pub reject_unknown_fields: bool,
}

/// The members of a batch and of a vote (the derived reader's are its structs' fields).
const BATCH_FIELDS: [&str; 5] = ["event_id", "project_id", "occurred_at", "item_id", "votes"];
const VOTE_FIELDS: [&str; 4] = ["voter_id", "verdict", "value", "reputation"];

impl<'d> VoteBatch<'d> {
    /// A valid batch read from `payload` by a serde-derived struct that borrows from it (see
    /// `plain`): the hot path. `None` for anything else, which [`super::json::parse`] and
    /// [`VoteBatch::from_json`] then read and word the rejection for.
    pub fn plain(payload: &'d [u8], limits: VoteLimits) -> Option<VoteBatch<'d>> {
        plain::valid_batch(payload, limits)
    }

    /// Validates a parsed payload ([`super::json::parse`], the one reader of every topic)
    /// against the `jury.votes` contract.
    pub fn from_json(doc: &'d Json<'_>, limits: VoteLimits) -> Result<VoteBatch<'d>, Rejection> {
        let f = Fields::of(doc, "", &BATCH_FIELDS, limits.reject_unknown_fields)?;
        let (event_id, project_id, occurred_at, item_id) = read_header(&f, limits)?;
        let items = match f.required("votes") {
            Ok(Json::Array(items)) => items,
            Ok(other) => return Err(wrong_type("votes", "an array", other)),
            Err(missing) => return Err(missing),
        };
        check_vote_count(items.len(), limits)?;
        let votes = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let f = Fields::element(
                    item,
                    "votes",
                    Some(i),
                    &VOTE_FIELDS,
                    limits.reject_unknown_fields,
                )?;
                read_vote_fields(&f, limits)
            })
            .collect::<Result<Votes<'_>, _>>()?;
        Ok(VoteBatch {
            event_id,
            project_id,
            occurred_at,
            item_id,
            votes,
        })
    }
}

type Header<'d> = (&'d str, &'d str, Option<EventTime>, Option<&'d str>);

fn read_header<'d>(f: &Fields<'d, '_, '_>, limits: VoteLimits) -> Result<Header<'d>, Rejection> {
    let event_id = f.id("event_id", limits.max_id_bytes)?;
    let project_id = f.id("project_id", limits.max_id_bytes)?;
    let occurred_at = f.opt_time("occurred_at")?;
    // Informational (it names what was voted on, nothing is keyed by it), so it is bounded by
    // the message size, not by `limits.max_id_bytes`: a long trace id must not cost a vote.
    let item_id = f.opt_str("item_id")?;
    Ok((event_id, project_id, occurred_at, item_id))
}

fn check_vote_count(n: usize, limits: VoteLimits) -> Result<(), Rejection> {
    if n == 0 {
        return Err(Rejection::new(
            ErrorCode::NoVotes,
            "`votes` must hold at least one vote",
        ));
    }
    if n > limits.max_votes {
        return Err(Rejection::new(
            ErrorCode::TooManyVotes,
            format!(
                "`votes` holds {n} votes, at most {} allowed",
                limits.max_votes
            ),
        ));
    }
    Ok(())
}

/// Why a vote has no value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ValueError<'d> {
    Conflict,
    Missing,
    UnknownVerdict(&'d str),
    OutOfRange(f64),
}

/// A vote's value from its `verdict` (`pass` = 1, `flag` = 0) or its `value` in 0..=1: exactly
/// one of the two. The one rule of both readers.
fn vote_value<'d>(verdict: Option<&'d str>, value: Option<f64>) -> Result<f64, ValueError<'d>> {
    match (verdict, value) {
        (Some(_), Some(_)) => Err(ValueError::Conflict),
        (None, None) => Err(ValueError::Missing),
        (Some("pass"), None) => Ok(1.0),
        (Some("flag"), None) => Ok(0.0),
        (Some(other), None) => Err(ValueError::UnknownVerdict(other)),
        (None, Some(v)) if (0.0..=1.0).contains(&v) => Ok(v),
        (None, Some(v)) => Err(ValueError::OutOfRange(v)),
    }
}

fn read_vote_fields<'d>(f: &Fields<'d, '_, '_>, limits: VoteLimits) -> Result<Vote<'d>, Rejection> {
    let voter_id = f.id("voter_id", limits.max_id_bytes)?;
    let verdict = f.opt_str("verdict")?;
    let value = f.opt_number("value")?;
    let value = vote_value(verdict, value).map_err(|e| match e {
        ValueError::Conflict => Rejection::new(
            ErrorCode::VoteValueConflict,
            format!(
                "`{}` has both `verdict` and `value`; exactly one is allowed",
                f.own_path()
            ),
        ),
        ValueError::Missing => Rejection::new(
            ErrorCode::VoteValueMissing,
            format!(
                "`{}` needs exactly one of `verdict` or `value`",
                f.own_path()
            ),
        ),
        ValueError::UnknownVerdict(other) => Rejection::new(
            ErrorCode::UnknownVerdict,
            format!(
                "`{}` is {other:?}; expected \"pass\" or \"flag\"",
                f.path("verdict")
            ),
        ),
        ValueError::OutOfRange(v) => Rejection::new(
            ErrorCode::ValueOutOfRange,
            format!("`{}` is {v}; must be within 0..=1", f.path("value")),
        ),
    })?;
    let reputation = f.opt_number("reputation")?;
    if let Some(r) = reputation
        && r < 0.0
    {
        return Err(Rejection::new(
            ErrorCode::NegativeReputation,
            format!("`{}` is {r}; must be >= 0", f.path("reputation")),
        ));
    }
    Ok(Vote {
        voter_id,
        value,
        reputation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::contract::json::parse;
    const LIMITS: VoteLimits = VoteLimits {
        max_votes: 3,
        max_id_bytes: 16,
        reject_unknown_fields: false,
    };

    fn read_with(payload: &str, limits: VoteLimits) -> Result<usize, Rejection> {
        let doc = parse(payload.as_bytes()).unwrap();
        VoteBatch::from_json(&doc, limits).map(|b| b.votes.len())
    }

    fn read(payload: &str) -> Result<usize, Rejection> {
        read_with(payload, LIMITS)
    }

    fn code(payload: &str) -> ErrorCode {
        read(payload).unwrap_err().code
    }

    #[test]
    fn reads_the_contract_example() {
        let doc = parse(
            br#"{"event_id": "ev-0001", "project_id": "proj-42", "occurred_at": "2026-11-20T10:00:07.250Z",
                 "item_id": "trace-123",
                 "votes": [{"voter_id": "u-7", "verdict": "pass", "reputation": 0.9},
                           {"voter_id": "u-8", "verdict": "flag"},
                           {"voter_id": "u-9", "value": 0.75}]}"#,
        )
        .unwrap();
        let b = VoteBatch::from_json(&doc, LIMITS).unwrap();
        assert_eq!(
            (b.event_id, b.project_id, b.item_id),
            ("ev-0001", "proj-42", Some("trace-123"))
        );
        assert_eq!(b.occurred_at.unwrap().epoch_millis(), 1_795_168_807_250);
        assert_eq!(
            b.votes[..],
            [
                Vote {
                    voter_id: "u-7",
                    value: 1.0,
                    reputation: Some(0.9)
                },
                Vote {
                    voter_id: "u-8",
                    value: 0.0,
                    reputation: None
                },
                Vote {
                    voter_id: "u-9",
                    value: 0.75,
                    reputation: None
                },
            ]
        );
    }

    #[test]
    fn each_rejection_has_its_code() {
        let ok_vote = r#"{"voter_id": "u", "value": 1}"#;
        let batch =
            |votes: &str| format!(r#"{{"event_id": "e", "project_id": "p", "votes": [{votes}]}}"#);
        assert_eq!(read(&batch(ok_vote)), Ok(1));
        assert_eq!(
            code(r#"{"project_id": "p", "votes": []}"#),
            ErrorCode::MissingField
        );
        assert_eq!(
            code(r#"{"event_id": "", "project_id": "p"}"#),
            ErrorCode::EmptyField
        );
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "0123456789abcdefX"}"#),
            ErrorCode::IdTooLong
        );
        assert_eq!(
            code(r#"{"event_id": 7, "project_id": "p"}"#),
            ErrorCode::WrongType
        );
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "votes": {}}"#),
            ErrorCode::WrongType
        );
        assert_eq!(code(&batch("")), ErrorCode::NoVotes);
        assert_eq!(
            code(&batch(&[ok_vote; 4].join(","))),
            ErrorCode::TooManyVotes
        );
        assert_eq!(
            code(&batch(r#"{"voter_id": "u", "value": 1.5}"#)),
            ErrorCode::ValueOutOfRange
        );
        assert_eq!(
            code(&batch(r#"{"voter_id": "u", "value": -0.1}"#)),
            ErrorCode::ValueOutOfRange
        );
        assert_eq!(
            code(&batch(r#"{"voter_id": "u", "value": "0.5"}"#)),
            ErrorCode::WrongType
        );
        assert_eq!(
            code(&batch(r#"{"voter_id": "u", "verdict": "maybe"}"#)),
            ErrorCode::UnknownVerdict
        );
        assert_eq!(
            code(&batch(
                r#"{"voter_id": "u", "verdict": "pass", "value": 1}"#
            )),
            ErrorCode::VoteValueConflict
        );
        assert_eq!(
            code(&batch(r#"{"voter_id": "u"}"#)),
            ErrorCode::VoteValueMissing
        );
        assert_eq!(
            code(&batch(r#"{"voter_id": "u", "value": 1, "reputation": -1}"#)),
            ErrorCode::NegativeReputation
        );
        assert_eq!(code(&batch(r#"{"value": 1}"#)), ErrorCode::MissingField);
        assert_eq!(
            code(&batch(r#"{"voter_id": "u", "value": 1, "value": 0}"#)),
            ErrorCode::DuplicateField
        );
        assert_eq!(code(&batch("3")), ErrorCode::NotObject);
        assert_eq!(
            read(&batch(r#"{"voter_id": "u", "value": 1}, [1]"#))
                .unwrap_err()
                .message,
            "`votes[1]` must be a JSON object, found an array"
        );
        assert_eq!(code("[1, 2]"), ErrorCode::NotObject);
        assert_eq!(code(r#""text""#), ErrorCode::NotObject);
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "votes": null}"#),
            ErrorCode::MissingField
        );
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "votes": "many"}"#),
            ErrorCode::WrongType
        );
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "votes": [], "votes": []}"#),
            ErrorCode::DuplicateField
        );
        // Repeated unknown members too, as in every topic's objects.
        assert_eq!(
            code(&batch(
                r#"{"voter_id": "u", "value": 1, "why": 1, "why": 2}"#
            )),
            ErrorCode::DuplicateField
        );
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "occurred_at": "noon", "votes": []}"#),
            ErrorCode::InvalidTimestamp
        );
        assert_eq!(
            code(r#"{"event_id": "e", "project_id": "p", "occurred_at": 1.5, "votes": []}"#),
            ErrorCode::WrongType
        );
        assert_eq!(
            code(
                r#"{"event_id": "e", "project_id": "p", "occurred_at": 9223372036854775807, "votes": []}"#
            ),
            ErrorCode::ValueOutOfRange
        );
    }

    /// Every timestamp rejection names the field and the value, and says what is wrong with it
    /// in words a producer can act on; the fast reader declines the same payloads.
    #[test]
    fn timestamp_rejections_name_the_field_the_value_and_the_fix() {
        let payload = |at: &str| {
            format!(
                r#"{{"event_id": "e", "project_id": "p", "occurred_at": {at}, "votes": [{{"voter_id": "u", "value": 1}}]}}"#
            )
        };
        for (at, message) in [
            (
                "1795700000",
                "`occurred_at` 1795700000 looks like epoch seconds (2026-11-26T13:33:20Z), not milliseconds: send epoch milliseconds (1795700000000) or an RFC 3339 string",
            ),
            (
                "1795700000000000",
                "`occurred_at` 1795700000000000 looks like epoch microseconds (2026-11-26T13:33:20Z), not milliseconds: send epoch milliseconds (1795700000000) or an RFC 3339 string",
            ),
            (
                r#""2026-11-27T10:00:00.123456""#,
                "`occurred_at` \"2026-11-27T10:00:00.123456\" has no UTC offset: add `Z` for UTC, or the offset it was taken in, such as `+02:00`",
            ),
            (
                r#""noon""#,
                "`occurred_at` \"noon\" is not an RFC 3339 timestamp such as `2026-11-20T10:00:07Z` (premature end of input)",
            ),
        ] {
            let text = payload(at);
            let e = read(&text).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidTimestamp, "{at}");
            assert_eq!(e.message, message);
            assert!(
                plain::valid_batch(text.as_bytes(), LIMITS).is_none(),
                "{at}"
            );
        }
        // Milliseconds read as before.
        assert_eq!(read(&payload("1795700000000")), Ok(1));
    }

    /// serde reads a derived struct from an array of its members' values too; the fast reader
    /// declines a batch or a vote written so, which the contract rejects.
    #[test]
    fn the_fast_reader_reads_objects_only() {
        for payload in [
            r#"["e", "p", null, null, [{"voter_id": "u", "value": 1}]]"#,
            r#"{"event_id": "e", "project_id": "p", "votes": [["u", null, 1, null]]}"#,
        ] {
            assert!(
                plain::valid_batch(payload.as_bytes(), LIMITS).is_none(),
                "{payload}"
            );
            assert_eq!(code(payload), ErrorCode::NotObject, "{payload}");
        }
        let object =
            r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": 1}]}"#;
        assert!(plain::valid_batch(object.as_bytes(), LIMITS).is_some());
    }

    #[test]
    fn messages_name_the_vote() {
        let e = read(r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": 1}, {"voter_id": "v", "value": 2}]}"#)
            .unwrap_err();
        assert_eq!(e.message, "`votes[1].value` is 2; must be within 0..=1");
    }

    #[test]
    fn unknown_fields_are_ignored_unless_configured() {
        let p = r#"{"event_id": "e", "project_id": "p", "extra": {"x": [1]}, "votes": [{"voter_id": "u", "value": 1, "why": "ok"}]}"#;
        assert_eq!(read(p), Ok(1));
        let strict = VoteLimits {
            reject_unknown_fields: true,
            ..LIMITS
        };
        assert_eq!(
            read_with(p, strict).unwrap_err().code,
            ErrorCode::UnknownField
        );
        let e = read_with(r#"{"event_id": "e", "project_id": "p", "votes": [{"voter_id": "u", "value": 1, "why": 1}]}"#, strict).unwrap_err();
        assert_eq!(e.message, "`votes[0].why` is not a field of this event");
    }
}
