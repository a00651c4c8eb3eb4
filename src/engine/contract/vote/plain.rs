//! The reader of valid `jury.votes` payloads: a serde-derived struct that borrows its strings
//! from the payload, read in one pass with no tree. Its votes are read into a `Vec` that it
//! drops itself (the batch keeps them inline): reading them into an inline `SmallVec` moved
//! about a kilobyte per payload and took a third longer than the allocation.
//!
//! It reads what nearly every producer sends, a valid batch whose strings carry no escapes, and
//! declines everything else (an escaped string, an unknown member, any invalid value), which the
//! reader of every topic ([`super::super::json`], then [`super::VoteBatch::from_json`]) then
//! reads and words the precise rejection for. It decides nothing of its own: every check after
//! serde's is the contract reader's own function or condition, and property tests hold the two
//! to the same batch.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::{Vote, VoteBatch, VoteLimits, Votes, vote_value};
use crate::engine::contract::fields::check_id;
use crate::engine::contract::json::Object;
use crate::engine::contract::time::EventTime;

/// A batch as serde reads it: every member known, strings borrowed (an escaped one fails),
/// itself and each vote from an object only ([`Object`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch<'a> {
    event_id: &'a str,
    project_id: &'a str,
    #[serde(default)]
    occurred_at: Option<Time>,
    #[serde(default)]
    item_id: Option<&'a str>,
    #[serde(borrow)]
    votes: Vec<Object<PlainVote<'a>>>,
}

/// A vote as serde reads it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainVote<'a> {
    voter_id: &'a str,
    #[serde(default)]
    verdict: Option<&'a str>,
    #[serde(default)]
    value: Option<f64>,
    #[serde(default)]
    reputation: Option<f64>,
}

/// `occurred_at` as the contract takes it: an RFC 3339 string or integer epoch milliseconds
/// ([`crate::engine::contract::fields::Fields::opt_time`] reads the same two).
struct Time(EventTime);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TimeVisitor)
    }
}

struct TimeVisitor;

impl Visitor<'_> for TimeVisitor {
    type Value = Time;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an RFC 3339 string or integer epoch milliseconds")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Time, E> {
        EventTime::parse_rfc3339(text)
            .map(Time)
            .map_err(|e| E::custom(e.to_string()))
    }

    fn visit_i64<E: de::Error>(self, ms: i64) -> Result<Time, E> {
        EventTime::from_contract_millis(ms)
            .map(Time)
            .map_err(|e| E::custom(e.to_string()))
    }

    fn visit_u64<E: de::Error>(self, ms: u64) -> Result<Time, E> {
        let ms = i64::try_from(ms).map_err(|_| E::custom("out of range"))?;
        self.visit_i64(ms)
    }
}

/// The batch in `payload` if it is valid under `limits` and serde reads it as it is; `None` for
/// anything else, which the contract reader then reads and words the rejection for.
pub(super) fn valid_batch(payload: &[u8], limits: VoteLimits) -> Option<VoteBatch<'_>> {
    // One check of the whole payload's UTF-8, rather than serde_json's of each string.
    let Object(batch): Object<Batch<'_>> =
        serde_json::from_str(std::str::from_utf8(payload).ok()?).ok()?;
    let n = batch.votes.len();
    if n == 0 || n > limits.max_votes {
        return None;
    }
    let id = |v| check_id(v, limits.max_id_bytes).ok();
    let votes = batch
        .votes
        .iter()
        .map(|Object(v)| {
            if v.reputation.is_some_and(|r| r < 0.0) {
                return None;
            }
            Some(Vote {
                voter_id: id(v.voter_id)?,
                value: vote_value(v.verdict, v.value).ok()?,
                reputation: v.reputation,
            })
        })
        .collect::<Option<Votes<'_>>>()?;
    Some(VoteBatch {
        event_id: id(batch.event_id)?,
        project_id: id(batch.project_id)?,
        occurred_at: batch.occurred_at.map(|t| t.0),
        item_id: batch.item_id,
        votes,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::engine::contract::json::parse;

    /// The default limits.
    const LIMITS: VoteLimits = VoteLimits {
        max_votes: 1000,
        max_id_bytes: 256,
        reject_unknown_fields: false,
    };

    /// The contract reader's batch for `text` under `limits`, as text (the two readers' batches
    /// borrow from different places).
    fn full(text: &str, limits: VoteLimits) -> Option<String> {
        let doc = parse(text.as_bytes()).ok()?;
        VoteBatch::from_json(&doc, limits)
            .ok()
            .map(|b| format!("{b:?}"))
    }

    /// [`valid_batch`] either declines or reads exactly the contract reader's batch.
    fn agrees(text: &str) -> bool {
        let Some(fast) = valid_batch(text.as_bytes(), LIMITS) else {
            return false;
        };
        assert_eq!(Some(format!("{fast:?}")), full(text, LIMITS), "{text}");
        true
    }

    const EVENT: &str = r#"{"event_id":"ev-0000000001","project_id":"proj-000001","occurred_at":1795168800001,"item_id":"trace-00000001","votes":[{"voter_id":"u-0001","verdict":"pass","reputation":0.9},{"voter_id":"u-8","value":0.75}]}"#;

    #[test]
    fn reads_plain_valid_payloads_as_the_contract_reader_does() {
        for text in [
            EVENT,
            // Whitespace everywhere JSON allows it, an RFC 3339 time, non-ASCII text, nulls.
            " {\n\t\"event_id\" : \"é-日本\" ,\r\"project_id\":\"p\", \"occurred_at\": \"2026-11-22T10:00:00Z\",\"item_id\":null,\"votes\" : [ { \"voter_id\" : \"v\" , \"value\" : 0, \"reputation\": null } ] } \n",
        ] {
            assert!(agrees(text), "declined {text}");
        }
    }

    #[test]
    fn valid_batch_reads_a_plain_event_in_one_pass() {
        let limits = VoteLimits {
            max_votes: 2,
            max_id_bytes: 14,
            reject_unknown_fields: true,
        };
        let batch = valid_batch(EVENT.as_bytes(), limits).expect("plain and valid");
        assert_eq!(
            (batch.event_id, batch.project_id, batch.item_id),
            ("ev-0000000001", "proj-000001", Some("trace-00000001"))
        );
        assert_eq!(
            batch.occurred_at,
            EventTime::from_epoch_millis(1_795_168_800_001).ok()
        );
        let votes: Vec<_> = batch
            .votes
            .iter()
            .map(|v| (v.voter_id, v.value, v.reputation))
            .collect();
        assert_eq!(votes, [("u-0001", 1.0, Some(0.9)), ("u-8", 0.75, None)]);
        // One vote or one event-id byte fewer allowed: the full path words the rejection. (The
        // 14-byte item_id is informational, not bound by max_id_bytes.)
        let tighter = [
            VoteLimits {
                max_votes: 1,
                ..limits
            },
            VoteLimits {
                max_id_bytes: 12,
                ..limits
            },
        ];
        for limits in tighter {
            assert_eq!(valid_batch(EVENT.as_bytes(), limits), None);
        }
    }

    /// Payloads the derived reader declines, whether the contract reader accepts them (an
    /// escaped string, an unknown member: it words nothing) or rejects them.
    #[test]
    fn declines_escapes_unknown_members_and_everything_invalid() {
        for text in [
            r#"{"event_id":"e\"1","project_id":"p","votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":01,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":1000000000000000000,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":1.5,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":-0,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","meta":{"a":1},"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","x":true,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1,"x":1,"x":2}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":null}"#,
            r#"{"event_id":"e","project_id":"p","votes":[1]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1}],"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1,"value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1}]} x"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1}],}"#,
            "{\"event_id\":\"a\tb\",\"votes\":[]}",
            r#"[{"event_id":"e"}]"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":.5}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1.}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":tru}]}"#,
            "",
        ] {
            assert!(
                valid_batch(text.as_bytes(), LIMITS).is_none(),
                "accepted {text}"
            );
        }
        // Numbers in any JSON spelling are read by serde_json for both readers alike (`-0` is a
        // float to serde_json, so not a time, to both).
        for text in [
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1e-1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1,"reputation":2E0}]}"#,
        ] {
            assert!(agrees(text), "declined {text}");
        }
    }

    /// Every one-byte deletion, insertion and replacement of a plain payload, with the bytes
    /// that matter to JSON: whatever [`valid_batch`] accepts, the contract reader reads the
    /// same way.
    #[test]
    fn agrees_with_the_contract_reader_on_every_one_byte_edit() {
        let bytes = EVENT.as_bytes();
        let alphabet = b"{}[],:\"\\01-.eE+tn \n\tx\x01";
        let mut accepted = 0;
        for at in 0..=bytes.len() {
            let mut edits = vec![[&bytes[..at], &bytes[(at + 1).min(bytes.len())..]].concat()];
            for &b in alphabet {
                edits.push([&bytes[..at], &[b], &bytes[at..]].concat());
                if at < bytes.len() {
                    edits.push([&bytes[..at], &[b], &bytes[at + 1..]].concat());
                }
            }
            for edit in edits {
                if let Ok(text) = std::str::from_utf8(&edit) {
                    accepted += usize::from(agrees(text));
                }
            }
        }
        // Edits inside strings and numbers keep most of them plain: the check has teeth.
        assert!(accepted > 1000, "{accepted}");
    }

    /// A JSON value for the property test: plain scalars most of the time, and now and then
    /// something `scan` must decline.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-z0-9_é\\-]{0,6}".prop_map(|s| format!("\"{s}\"")),
            1 => "[a-z\\\\\"]{0,4}".prop_map(|s| format!("\"{s}\"")),
            3 => any::<f64>().prop_map(|f| format!("{f}")),
            2 => (-1e12..1e12f64).prop_map(|f| format!("{f}")),
            2 => any::<i64>().prop_map(|i| i.to_string()),
            1 => any::<f64>().prop_map(|f| format!("{f:e}")),
            1 => Just("true".to_owned()),
            1 => Just("null".to_owned()),
            1 => Just("{\"k\":1}".to_owned()),
        ]
    }

    fn ws() -> impl Strategy<Value = &'static str> {
        prop_oneof![6 => Just(""), 1 => Just(" "), 1 => Just("\n\t")]
    }

    fn member(names: &'static [&'static str]) -> impl Strategy<Value = String> {
        (prop::sample::select(names), ws(), value(), ws())
            .prop_map(|(n, w1, v, w2)| format!("{w1}\"{n}\"{w2}:{w1}{v}{w2}"))
    }

    fn object(
        names: &'static [&'static str],
        extra: Option<String>,
    ) -> impl Strategy<Value = String> {
        prop::collection::vec(member(names), 0..6).prop_map(move |mut members| {
            members.extend(extra.clone());
            format!("{{{}}}", members.join(","))
        })
    }

    proptest! {
        #[test]
        fn agrees_with_the_contract_reader_on_generated_payloads(
            votes in prop::collection::vec(
                object(&["voter_id", "verdict", "value", "reputation", "x"], None),
                0..4,
            ),
            top in prop::collection::vec(
                member(&["event_id", "project_id", "occurred_at", "item_id", "y"]),
                0..6,
            ),
            at in 0usize..6,
            ws in ws(),
        ) {
            let mut members = top;
            let votes = format!("{ws}\"votes\"{ws}:{ws}[{}]", votes.join(&format!("{ws},")));
            members.insert(at.min(members.len()), votes);
            let text = format!("{ws}{{{}}}{ws}", members.join(","));
            agrees(&text);
        }
    }

    proptest! {
        // Each case has a few percent chance of one given defect alone: many cases, so that
        // every check is exercised (a removed check fails the test).
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// On plain payloads the one-pass reader accepts exactly the batches the full path
        /// accepts, and reads them alike; everything it declines the full path rejects.
        #[test]
        fn valid_batch_accepts_exactly_what_the_full_path_accepts(
            text in batch_payload(),
            max_votes in 1usize..4,
            max_id_bytes in 1usize..6,
            reject_unknown_fields in any::<bool>(),
        ) {
            let limits = VoteLimits { max_votes, max_id_bytes, reject_unknown_fields };
            let fast = valid_batch(text.as_bytes(), limits).map(|b| format!("{b:?}"));
            // Unknown members (`x`) are left to the contract reader.
            let expected = if text.contains("\"x\":") { None } else { full(&text, limits) };
            prop_assert_eq!(fast, expected, "{}", text);
        }
    }

    /// A member's value: one of `valid` nine times in ten, else one of `invalid`.
    fn pick(
        valid: &'static [&'static str],
        invalid: &'static [&'static str],
    ) -> impl Strategy<Value = String> {
        prop_oneof![9 => prop::sample::select(valid), 1 => prop::sample::select(invalid)]
            .prop_map(str::to_owned)
    }

    /// An object of `members` (name, value; `None` leaves it out) in any order, now and then
    /// with its first member repeated or an unknown one added.
    fn object_of(
        members: impl Strategy<Value = Vec<(&'static str, Option<String>)>>,
    ) -> impl Strategy<Value = String> {
        (
            members,
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(members, repeat, unknown)| {
                let mut members: Vec<String> = members
                    .into_iter()
                    .filter_map(|(name, value)| Some(format!("\"{name}\":{}", value?)))
                    .collect();
                if repeat && let Some(first) = members.first().cloned() {
                    members.push(first);
                }
                if unknown {
                    members.push("\"x\":1".to_owned());
                }
                members
            })
            .prop_shuffle()
            .prop_map(|members| format!("{{{}}}", members.join(",")))
    }

    /// Present 19 times in 20.
    fn mostly<T: std::fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
        prop::option::weighted(0.95, s)
    }

    /// A `jury.votes` payload of plain values, mostly valid, with every way of being invalid
    /// that validation knows now and then.
    fn batch_payload() -> impl Strategy<Value = String> {
        let vote = (
            mostly(pick(
                &[r#""u""#, r#""u-12""#],
                &[r#""""#, r#""u-123456""#, "null", "7"],
            )),
            // A verdict, a value, both or neither.
            prop_oneof![
                4 => pick(&[r#""pass""#, r#""flag""#], &[r#""maybe""#, "null", "1"])
                    .prop_map(|v| (Some(v), None)),
                4 => pick(&["0.5", "1", "0", "0.125"], &["1.5", "-0.25", "null", r#""0.5""#])
                    .prop_map(|v| (None, Some(v))),
                1 => Just((Some(r#""pass""#.to_owned()), Some("0.5".to_owned()))),
                1 => Just((None, None)),
            ],
            prop::option::weighted(0.5, pick(&["0.9", "0", "2"], &["-1", "null", "true"])),
        )
            .prop_map(|(voter, (verdict, value), reputation)| {
                vec![
                    ("voter_id", voter),
                    ("verdict", verdict),
                    ("value", value),
                    ("reputation", reputation),
                ]
            });
        let votes = prop_oneof![
            18 => prop::collection::vec(object_of(vote), 0..5)
                .prop_map(|v| format!("[{}]", v.join(","))),
            1 => Just("null".to_owned()),
            1 => Just("{}".to_owned()),
        ];
        let top = (
            mostly(pick(
                &[r#""e""#, r#""ev-12""#],
                &[r#""""#, r#""ev-12345""#, "null", "1"],
            )),
            mostly(pick(&[r#""p""#], &[r#""""#, "null", "false"])),
            prop::option::weighted(
                0.7,
                pick(
                    &["1795168800000", r#""2026-11-22T10:00:00Z""#],
                    &[r#""yesterday""#, "1.5", "null", "-999999999999999999"],
                ),
            ),
            prop::option::weighted(0.5, pick(&[r#""i""#], &[r#""""#, "null", "3"])),
            mostly(votes),
        );
        object_of(top.prop_map(|(event, project, at, item, votes)| {
            vec![
                ("event_id", event),
                ("project_id", project),
                ("occurred_at", at),
                ("item_id", item),
                ("votes", votes),
            ]
        }))
    }
}
