//! The one-pass reader of valid `jury.votes` payloads of the plain shape nearly every producer
//! sends: one object of plain members, whose `votes` is an array of objects of plain members.
//! Plain means a string without escapes, an integer of at most 18 digits, a decimal without
//! exponent, `true`, `false` or `null`.
//!
//! Why it exists beside the one reader of every topic ([`super::super::json`] then
//! [`super::VoteBatch::from_json`]): serde_json's tree takes about twice as long per payload,
//! on the polling thread of every record, and without this reader the load benchmark with
//! 10,000 projects ran 10-16% slower end to end (docs/performance.md has the runs). It decides
//! nothing of its own: it declines everything but a valid plain batch, every check it makes is
//! the contract reader's own function or condition, and a property test holds the two to the
//! same batch. What it declines, the contract reader reads and words the rejection for.

use std::borrow::Cow;

use super::{BATCH_FIELDS, VOTE_FIELDS, Vote, VoteBatch, VoteLimits, Votes};
use crate::engine::contract::fields::check_id;
use crate::engine::contract::json::Json;
use crate::engine::contract::time::EventTime;

/// The batch in `text` if it is of the plain shape and valid under `limits`; `None` for
/// anything else, which the contract reader ([`VoteBatch::from_json`]) then reads and words the
/// rejection for (see the module doc for why both exist).
pub(super) fn valid_batch(text: &str, limits: VoteLimits) -> Option<VoteBatch<'_>> {
    let mut s = Scanner::new(text);
    s.ws();
    s.eat(b'{')?;
    let (mut event_id, mut project_id, mut occurred_at, mut item_id) = (None, None, None, None);
    let mut votes = None;
    s.known_members(b'}', &BATCH_FIELDS, |s, i| {
        match i {
            0 => event_id = s.opt_string()?,
            1 => project_id = s.opt_string()?,
            2 => occurred_at = s.opt_time()?,
            3 => item_id = s.opt_string()?,
            _ => votes = Some(s.valid_votes(limits)?),
        }
        Some(())
    })?;
    s.ws();
    if s.at != s.bytes.len() {
        return None;
    }
    let id = |v| check_id(v, limits.max_id_bytes).ok();
    Some(VoteBatch {
        event_id: id(event_id?)?,
        project_id: id(project_id?)?,
        occurred_at,
        item_id,
        votes: votes?,
    })
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Scanner {
            text,
            bytes: text.as_bytes(),
            at: 0,
        }
    }

    /// Skips JSON whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Consumes `b` if it comes next.
    fn eat(&mut self, b: u8) -> Option<()> {
        (self.bytes.get(self.at) == Some(&b)).then(|| self.at += 1)
    }

    /// The members of an object whose `{` is consumed, up to and including `close`: each name
    /// goes to `member`, which reads the value.
    fn members(
        &mut self,
        close: u8,
        mut member: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.ws();
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            let name = self.string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            member(self, name)?;
            if self.separator(close)? {
                return Some(());
            }
        }
    }

    /// After an object member or array element: `Some(false)` past a `,` (another follows),
    /// `Some(true)` past `close` (the last one), `None` for anything else.
    fn separator(&mut self, close: u8) -> Option<bool> {
        self.ws();
        let closed = match *self.bytes.get(self.at)? {
            b',' => false,
            b if b == close => true,
            _ => return None,
        };
        self.at += 1;
        self.ws();
        Some(closed)
    }

    /// The votes of a valid batch: between one and `limits.max_votes` objects, each valid.
    fn valid_votes(&mut self, limits: VoteLimits) -> Option<Votes<'a>> {
        self.eat(b'[')?;
        let mut votes = Votes::new();
        loop {
            self.ws();
            self.eat(b'{')?;
            votes.push(self.valid_vote(limits)?);
            if votes.len() > limits.max_votes {
                return None;
            }
            if self.separator(b']')? {
                return Some(votes);
            }
        }
    }

    /// A valid vote whose `{` is consumed: an id, exactly one of a known verdict or a value in
    /// `0..=1`, and no negative reputation (the full path's `read_vote_fields`).
    fn valid_vote(&mut self, limits: VoteLimits) -> Option<Vote<'a>> {
        let (mut voter_id, mut verdict, mut value, mut reputation) = (None, None, None, None);
        self.known_members(b'}', &VOTE_FIELDS, |s, i| {
            match i {
                0 => voter_id = s.opt_string()?,
                1 => verdict = s.opt_string()?,
                2 => value = s.opt_number()?,
                _ => reputation = s.opt_number()?,
            }
            Some(())
        })?;
        let value = match (verdict, value) {
            (Some("pass"), None) => 1.0,
            (Some("flag"), None) => 0.0,
            (None, Some(v)) if (0.0..=1.0).contains(&v) => v,
            _ => return None,
        };
        if reputation.is_some_and(|r| r < 0.0) {
            return None;
        }
        Some(Vote {
            voter_id: check_id(voter_id?, limits.max_id_bytes).ok()?,
            value,
            reputation,
        })
    }

    /// Like [`Scanner::members`] for an object whose fields are `names`: a known member goes
    /// to `member` with its index the first time it appears, and declines the second (the
    /// contract reader reports the duplicate); an unknown one declines (the contract reader
    /// ignores it, or refuses it if configured, and rejects it repeated).
    fn known_members(
        &mut self,
        close: u8,
        names: &[&str],
        mut member: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        let mut seen = 0u8;
        self.members(close, |s, name| {
            let i = names.iter().position(|k| *k == name)?;
            if seen & (1 << i) != 0 {
                return None;
            }
            seen |= 1 << i;
            member(s, i)
        })
    }

    /// A string, or `null` for none; anything else declines.
    fn opt_string(&mut self) -> Option<Option<&'a str>> {
        match self.scalar()? {
            Json::Str(Cow::Borrowed(s)) => Some(Some(s)),
            Json::Null => Some(None),
            _ => None,
        }
    }

    /// A number, or `null` for none; anything else declines.
    fn opt_number(&mut self) -> Option<Option<f64>> {
        match self.scalar()? {
            Json::Null => Some(None),
            n => n.as_f64().map(Some),
        }
    }

    /// An event time (an RFC 3339 string or integer epoch milliseconds), or `null` for none;
    /// anything else, or a time out of range, declines.
    fn opt_time(&mut self) -> Option<Option<EventTime>> {
        let time = match self.scalar()? {
            Json::Str(s) => EventTime::parse_rfc3339(&s),
            Json::Int(ms) => EventTime::from_epoch_millis(ms),
            Json::Null => return Some(None),
            _ => return None,
        };
        time.ok().map(Some)
    }

    /// A plain value: a string without escapes, a number, `true`, `false` or `null`.
    fn scalar(&mut self) -> Option<Json<'a>> {
        match *self.bytes.get(self.at)? {
            b'"' => self.string().map(|s| Json::Str(Cow::Borrowed(s))),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'n' => self.literal("null", Json::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &str, value: Json<'a>) -> Option<Json<'a>> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word.as_bytes()).then(|| {
            self.at = end;
            value
        })
    }

    /// A string without escapes or control characters, borrowed from the text.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let len = self.bytes[start..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if self.bytes[start + len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        self.text.get(start..start + len)
    }

    /// A number without exponent: an integer of at most 18 digits (it fits an `i64`), or a
    /// decimal, parsed with Rust's correctly rounded `f64` parser as serde_json's
    /// `float_roundtrip` parses it. `-0` and leading zeros are left to serde.
    fn number(&mut self) -> Option<Json<'a>> {
        let start = self.at;
        let negative = self.eat(b'-').is_some();
        let first = self.at;
        let digits = self.digits();
        if digits == 0 || (digits > 1 && self.bytes[first] == b'0') {
            return None;
        }
        let decimal = self.eat(b'.').is_some();
        if decimal && self.digits() == 0 {
            return None;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            return None;
        }
        let lexeme = self.text.get(start..self.at)?;
        if decimal {
            return lexeme.parse().ok().map(Json::Float);
        }
        if digits > 18 || (negative && self.bytes[first] == b'0') {
            return None;
        }
        lexeme.parse().ok().map(Json::Int)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
        self.at - start
    }
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
        let Some(fast) = valid_batch(text, LIMITS) else {
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
        let batch = valid_batch(EVENT, limits).expect("plain and valid");
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
            assert_eq!(valid_batch(EVENT, limits), None);
        }
    }

    /// Payloads the contract reader may accept but that are not of the plain shape.
    #[test]
    fn declines_what_is_not_plain() {
        for text in [
            r#"{"event_id":"e\"1","project_id":"p","votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1e-1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":-0,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":01,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":1000000000000000000,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","meta":{"a":1},"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","x":true,"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1,"x":1,"x":2}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":null}"#,
            r#"{"event_id":"e","project_id":"p","votes":[1]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1}],"votes":[{"voter_id":"v","value":1}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1}]} x"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1}],}"#,
            "{\"event_id\":\"a\tb\",\"votes\":[]}",
            r#"[{"event_id":"e"}]"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":.5}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1.}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":tru}]}"#,
            "",
        ] {
            assert!(valid_batch(text, LIMITS).is_none(), "accepted {text}");
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
            let fast = valid_batch(&text, limits).map(|b| format!("{b:?}"));
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
