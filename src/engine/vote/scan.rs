//! A one-pass reader for the shape nearly every `jury.votes` payload has: one object of plain
//! members, whose `votes` is an array of objects of plain members. Plain means a string without
//! escapes, an integer of at most 18 digits, a decimal without exponent, `true`, `false` or
//! `null`.
//!
//! Why: reading a payload was the polling thread's largest cost, and most of it was serde's
//! generic machinery (a visitor per value, keys compared one known name at a time), not the
//! bytes. This reader fills the same [`RawBatch`] serde would, so validation stays in one place
//! ([`super::VoteBatch::from_raw`]); for anything else (escapes, nested values where a plain one
//! belongs, exponents, syntax errors) it gives up, and [`RawBatch::parse`] reads the payload
//! with serde as before, which also words any syntax error. A test holds it to serde's result
//! on every payload it accepts.

use std::borrow::Cow;

use super::{BATCH_FIELDS, RawBatch, RawVotes, VOTE_FIELDS};
use crate::engine::fields::Slots;
use crate::engine::json::Json;

/// Index of `votes` among [`BATCH_FIELDS`].
const VOTES: usize = 4;

/// The batch in `text`, or `None` when it is not of the plain shape (see the module doc).
pub(super) fn scan(text: &str) -> Option<RawBatch<'_>> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    s.ws();
    s.eat(b'{')?;
    let mut top = Slots::<5>::default();
    let mut votes = None;
    s.members(b'}', |s, name| {
        match BATCH_FIELDS.iter().position(|k| *k == name) {
            // A second `votes` is serde's business (it reports the duplicate).
            Some(VOTES) if votes.is_some() => return None,
            Some(VOTES) => {
                votes = Some(RawVotes::Array(s.votes()?));
                top.values[VOTES] = Some(Json::Null); // marks `votes` as seen, as serde's reader does
            }
            Some(i) => top.put(i, Cow::Borrowed(name), s.scalar()?),
            None => {
                s.scalar()?;
                top.unknown(Cow::Borrowed(name));
            }
        }
        Some(())
    })?;
    s.ws();
    (s.at == s.bytes.len()).then_some(RawBatch { top, votes })
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
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

    /// `votes`: an array of objects with plain members.
    fn votes(&mut self) -> Option<Vec<Slots<'a, 4>>> {
        self.eat(b'[')?;
        let mut votes = Vec::with_capacity(4);
        self.ws();
        if self.eat(b']').is_some() {
            return Some(votes);
        }
        loop {
            self.eat(b'{')?;
            let mut vote = Slots::<4>::default();
            self.members(b'}', |s, name| {
                let value = s.scalar()?;
                match VOTE_FIELDS.iter().position(|k| *k == name) {
                    Some(i) => vote.put(i, Cow::Borrowed(name), value),
                    None => vote.unknown(Cow::Borrowed(name)),
                }
                Some(())
            })?;
            votes.push(vote);
            if self.separator(b']')? {
                return Some(votes);
            }
        }
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
    use crate::engine::json::parse_as;

    /// serde's reading of `text`, which [`scan`] must equal whenever it accepts.
    fn serde(text: &str) -> Option<RawBatch<'_>> {
        parse_as::<RawBatch>(text.as_bytes()).ok()
    }

    /// `scan` either declines or reads exactly what serde reads (and never accepts what serde
    /// rejects).
    fn agrees(text: &str) {
        if let Some(fast) = scan(text) {
            assert_eq!(Some(fast), serde(text), "{text}");
        }
    }

    const EVENT: &str = r#"{"event_id":"ev-0000000001","project_id":"proj-000001","occurred_at":1795168800001,"item_id":"trace-00000001","votes":[{"voter_id":"u-0001","verdict":"pass","reputation":0.9},{"voter_id":"u-8","value":0.75}]}"#;

    #[test]
    fn reads_plain_payloads_as_serde_does() {
        for text in [
            EVENT,
            // Whitespace everywhere JSON allows it, an RFC 3339 time, negative and zero values.
            " {\n\t\"event_id\" : \"e\" ,\r\"project_id\":\"p\", \"occurred_at\": \"2026-11-22T10:00:00Z\",\"votes\" : [ { \"voter_id\" : \"v\" , \"value\" : 0 } ] } \n",
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":-0.5,"reputation":-3}]}"#,
            // Unknown members, duplicates, wrong types and literals are validation's business.
            r#"{"event_id":"e","x":true,"event_id":"f","project_id":null,"votes":[{"voter_id":1,"y":false,"voter_id":"w"}]}"#,
            r#"{"votes":[],"project_id":"p"}"#,
            r#"{}"#,
            // Non-ASCII text and the largest integer read here.
            r#"{"event_id":"é-日本","project_id":"p","occurred_at":999999999999999999,"votes":[{"voter_id":"v","verdict":"flag"}]}"#,
        ] {
            let fast = scan(text);
            assert!(fast.is_some(), "declined {text}");
            assert_eq!(fast, serde(text), "{text}");
        }
    }

    #[test]
    fn leaves_everything_else_to_serde() {
        for text in [
            r#"{"event_id":"e\"1","project_id":"p","votes":[]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1e-1}]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":-0,"votes":[]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":01,"votes":[]}"#,
            r#"{"event_id":"e","project_id":"p","occurred_at":1000000000000000000,"votes":[]}"#,
            r#"{"event_id":"e","project_id":"p","meta":{"a":1},"votes":[]}"#,
            r#"{"event_id":"e","project_id":"p","votes":null}"#,
            r#"{"event_id":"e","project_id":"p","votes":[1]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[],"votes":[]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[]} x"#,
            r#"{"event_id":"e","project_id":"p","votes":[],}"#,
            "{\"event_id\":\"a\tb\",\"votes\":[]}",
            r#"[{"event_id":"e"}]"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":.5}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":1.}]}"#,
            r#"{"event_id":"e","project_id":"p","votes":[{"voter_id":"v","value":tru}]}"#,
            "",
        ] {
            assert_eq!(scan(text), None, "accepted {text}");
        }
    }

    /// Every one-byte deletion, insertion and replacement of a plain payload, with the bytes
    /// that matter to JSON: whatever `scan` accepts, serde reads the same way.
    #[test]
    fn agrees_with_serde_on_every_one_byte_edit() {
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
                    accepted += usize::from(scan(text).is_some());
                    agrees(text);
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
        fn agrees_with_serde_on_generated_payloads(
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
}
