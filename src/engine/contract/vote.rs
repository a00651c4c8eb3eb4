//! `jury.votes`: one event is one update batch of human (or automated) votes on a project.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use smallvec::SmallVec;

use super::fields::{Fields, Slots, SlotsSeed, wrong_type};
use super::json::{CowStr, Json, JsonVisitor, ParseFailure};
use super::rejection::{ErrorCode, Rejection};
use super::time::EventTime;

mod scan;

/// A validated vote batch, borrowing its strings from the payload.
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
/// batch is applied (as a [`VoteBatch`], and prepared: [`VoteSpans::weights`]).
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

const BATCH_FIELDS: [&str; 5] = ["event_id", "project_id", "occurred_at", "item_id", "votes"];
const VOTE_FIELDS: [&str; 4] = ["voter_id", "verdict", "value", "reputation"];

/// A `jury.votes` payload read straight into slots: the fast path that builds no JSON tree.
/// [`VoteBatch::from_raw`] then validates it.
#[derive(Debug, Clone, PartialEq)]
pub struct RawBatch<'a> {
    top: Slots<'a, 5>,
    votes: Option<RawVotes<'a>>,
}

#[derive(Debug, Clone, PartialEq)]
enum RawVotes<'a> {
    Array(Vec<Slots<'a, 4>>),
    Other(Json<'a>),
}

impl<'a> RawBatch<'a> {
    /// Reads a payload; fails only when it is not JSON at all. The common plain shape is read
    /// by `scan` in one pass; anything else by serde.
    pub fn parse(payload: &'a [u8]) -> Result<RawBatch<'a>, ParseFailure> {
        match std::str::from_utf8(payload).ok().and_then(scan::scan) {
            Some(raw) => Ok(raw),
            None => super::json::parse_as(payload),
        }
    }
}

impl<'de> serde::Deserialize<'de> for RawBatch<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BatchVisitor)
    }
}

struct BatchVisitor;

impl<'de> Visitor<'de> for BatchVisitor {
    type Value = RawBatch<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut top = Slots::<5>::default();
        let mut votes = None;
        while let Some(CowStr(name)) = map.next_key()? {
            match BATCH_FIELDS.iter().position(|k| *k == name.as_ref()) {
                Some(4) if votes.is_none() => {
                    votes = Some(map.next_value_seed(VotesSeed)?);
                    top.values[4] = Some(Json::Null); // marks `votes` as seen for duplicates
                }
                Some(i) => {
                    let value = map.next_value()?;
                    top.put(i, name, value);
                }
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    top.unknown(name);
                }
            }
        }
        Ok(RawBatch { top, votes })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let tree = JsonVisitor.visit_seq(seq)?;
        Ok(RawBatch {
            top: Slots {
                not_object: Some(tree.type_name()),
                ..Slots::default()
            },
            votes: None,
        })
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(not_object("null"))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(not_object("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(not_object("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(not_object("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(not_object("a number"))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(not_object("a string"))
    }
}

fn not_object<'a>(found: &'static str) -> RawBatch<'a> {
    RawBatch {
        top: Slots {
            not_object: Some(found),
            ..Slots::default()
        },
        votes: None,
    }
}

/// `votes`: an array read element by element into slots, or any other value kept for the message.
struct VotesSeed;

impl<'de> DeserializeSeed<'de> for VotesSeed {
    type Value = RawVotes<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for VotesSeed {
    type Value = RawVotes<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut votes = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(1024));
        while let Some(vote) = seq.next_element_seed(SlotsSeed::new(&VOTE_FIELDS))? {
            votes.push(vote);
        }
        Ok(RawVotes::Array(votes))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        JsonVisitor.visit_map(map).map(RawVotes::Other)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(RawVotes::Other(Json::Null))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(RawVotes::Other(Json::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(RawVotes::Other(Json::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(RawVotes::Other(Json::UInt(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(RawVotes::Other(Json::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(RawVotes::Other(Json::Str(Cow::Owned(v.to_owned()))))
    }
}

impl<'a> VoteBatch<'a> {
    /// A valid batch read from `payload` in one pass: the hot path. `None` when the payload is
    /// not of the plain shape (the `scan` module says which) or not valid; [`RawBatch::parse`]
    /// and [`VoteBatch::from_raw`] then read it and word the rejection, if any.
    pub fn scan(payload: &'a [u8], limits: VoteLimits) -> Option<VoteBatch<'a>> {
        scan::valid_batch(std::str::from_utf8(payload).ok()?, limits)
    }

    /// Validates a payload read by [`RawBatch::parse`] against the `jury.votes` contract.
    pub fn from_raw<'d>(
        raw: &'d RawBatch<'a>,
        limits: VoteLimits,
    ) -> Result<VoteBatch<'d>, Rejection> {
        let f = Fields::from_slots(
            &raw.top,
            &BATCH_FIELDS,
            "",
            None,
            limits.reject_unknown_fields,
        )?;
        let (event_id, project_id, occurred_at, item_id) = read_header(&f, limits)?;
        let raw_votes = match &raw.votes {
            Some(RawVotes::Array(items)) => items,
            Some(RawVotes::Other(Json::Null)) | None => {
                return Err(f.required("votes").err().unwrap_or_else(missing_votes));
            }
            Some(RawVotes::Other(other)) => return Err(wrong_type("votes", "an array", other)),
        };
        check_vote_count(raw_votes.len(), limits)?;
        let votes = raw_votes
            .iter()
            .enumerate()
            .map(|(i, slots)| {
                let f = Fields::from_slots(
                    slots,
                    &VOTE_FIELDS,
                    "votes",
                    Some(i),
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
    let item_id = f.opt_id("item_id", limits.max_id_bytes)?;
    Ok((event_id, project_id, occurred_at, item_id))
}

fn missing_votes() -> Rejection {
    Rejection::new(ErrorCode::MissingField, "`votes` is required")
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

fn read_vote_fields<'d>(f: &Fields<'d, '_, '_>, limits: VoteLimits) -> Result<Vote<'d>, Rejection> {
    let voter_id = f.id("voter_id", limits.max_id_bytes)?;
    let verdict = f.opt_str("verdict")?;
    let value = f.opt_number("value")?;
    let value = match (verdict, value) {
        (Some(_), Some(_)) => {
            return Err(Rejection::new(
                ErrorCode::VoteValueConflict,
                format!(
                    "`{}` has both `verdict` and `value`; exactly one is allowed",
                    f.own_path()
                ),
            ));
        }
        (None, None) => {
            return Err(Rejection::new(
                ErrorCode::VoteValueMissing,
                format!(
                    "`{}` needs exactly one of `verdict` or `value`",
                    f.own_path()
                ),
            ));
        }
        (Some("pass"), None) => 1.0,
        (Some("flag"), None) => 0.0,
        (Some(other), None) => {
            return Err(Rejection::new(
                ErrorCode::UnknownVerdict,
                format!(
                    "`{}` is {other:?}; expected \"pass\" or \"flag\"",
                    f.path("verdict")
                ),
            ));
        }
        (None, Some(v)) => {
            if !(0.0..=1.0).contains(&v) {
                return Err(Rejection::new(
                    ErrorCode::ValueOutOfRange,
                    format!("`{}` is {v}; must be within 0..=1", f.path("value")),
                ));
            }
            v
        }
    };
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

/// Where a string lies in its payload: `start..end` in bytes.
type Span = (u32, u32);

/// A validated batch's votes, each voter id as its position in the payload instead of a
/// borrowed string. Positions carry no lifetime, so the Kafka runtime validates a batch on its
/// polling thread and sends its votes, with the message that owns the payload, to the
/// processing thread, which weighs them ([`VoteSpans::weights`]) without parsing anything.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteSpans {
    votes: SmallVec<[(Span, f64, Option<f64>); 4]>,
}

/// The position of `s` in `payload`, if `s` is a slice of it (a string with JSON escapes is a
/// copy, not a slice).
fn span(payload: &[u8], s: &str) -> Option<Span> {
    let start = (s.as_ptr() as usize).checked_sub(payload.as_ptr() as usize)?;
    let end = start.checked_add(s.len())?;
    (end <= payload.len()).then_some((u32::try_from(start).ok()?, u32::try_from(end).ok()?))
}

impl VoteBatch<'_> {
    /// The batch's votes with their voter ids as positions in `payload`; `None` if one of them
    /// is not a slice of `payload` (it had escapes), and then the batch has to be read again
    /// from the payload.
    pub fn vote_spans(&self, payload: &[u8]) -> Option<VoteSpans> {
        Some(VoteSpans {
            votes: self
                .votes
                .iter()
                .map(|v| Some((span(payload, v.voter_id)?, v.value, v.reputation)))
                .collect::<Option<_>>()?,
        })
    }
}

impl VoteSpans {
    /// How many votes the batch has.
    pub fn count(&self) -> usize {
        self.votes.len()
    }

    /// Each vote's weight (see [`weight`]) and value, in order, without rebuilding the batch:
    /// `table` gets the voter id of each vote without an explicit reputation, read from
    /// `payload` only then, so applying a prepared batch reads nothing else of it. `None` if
    /// such an id is not a UTF-8 slice of `payload` (not the payload the batch was validated in).
    pub fn weights(
        &self,
        payload: &[u8],
        table: impl Fn(&str) -> Option<f64>,
    ) -> Option<SmallVec<[(f64, f64); 4]>> {
        self.votes
            .iter()
            .map(|&(voter, value, reputation)| {
                // The voter id, read only for a vote the table has to weigh.
                let id = match reputation {
                    Some(_) => None,
                    None => {
                        let id = payload.get(voter.0 as usize..voter.1 as usize)?;
                        Some(std::str::from_utf8(id).ok()?)
                    }
                };
                Some((weight(reputation, || id.and_then(&table)), value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const LIMITS: VoteLimits = VoteLimits {
        max_votes: 3,
        max_id_bytes: 16,
        reject_unknown_fields: false,
    };

    fn read_with(payload: &str, limits: VoteLimits) -> Result<usize, Rejection> {
        let raw = RawBatch::parse(payload.as_bytes()).unwrap();
        VoteBatch::from_raw(&raw, limits).map(|b| b.votes.len())
    }

    fn read(payload: &str) -> Result<usize, Rejection> {
        read_with(payload, LIMITS)
    }

    fn code(payload: &str) -> ErrorCode {
        read(payload).unwrap_err().code
    }

    #[test]
    fn reads_the_contract_example() {
        let raw = RawBatch::parse(
            br#"{"event_id": "ev-0001", "project_id": "proj-42", "occurred_at": "2026-11-20T10:00:07.250Z",
                 "item_id": "trace-123",
                 "votes": [{"voter_id": "u-7", "verdict": "pass", "reputation": 0.9},
                           {"voter_id": "u-8", "verdict": "flag"},
                           {"voter_id": "u-9", "value": 0.75}]}"#,
        )
        .unwrap();
        let b = VoteBatch::from_raw(&raw, LIMITS).unwrap();
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
