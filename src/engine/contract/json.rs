//! The one reader of every input topic: a payload parsed by serde_json into a borrowed,
//! order-preserving JSON tree, which each topic's contract then validates (see
//! [`super::fields`]).
//!
//! Why not `serde_json::Value`? Validation must name the offending field and tell a wrong type from
//! a missing one, which a derived struct cannot do, and `Value` allocates a `String` for every key
//! and value. [`Json`] borrows strings from the payload whenever they carry no escapes and keeps an
//! object as a `Vec` of pairs, so a ~200-byte event parses with a handful of small allocations.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value, borrowing from the payload where it can.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    /// A number written without fraction or exponent that fits an `i64`.
    Int(i64),
    /// A non-negative integer above `i64::MAX`.
    UInt(u64),
    /// Any other number (always finite: JSON has no NaN or Infinity).
    Float(f64),
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Members in document order; duplicates are kept so validation can reject them.
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'a> Json<'a> {
    /// The JSON type name, for error messages ("expected a string, found an array").
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Int(_) | Json::UInt(_) | Json::Float(_) => "a number",
            Json::Str(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }

    /// The value as an `f64` if it is a number of any kind.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Json::Int(i) => Some(i as f64),
            Json::UInt(u) => Some(u as f64),
            Json::Float(f) => Some(f),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

/// Builds a [`Json`] from whatever value comes.
struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Json::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or(Json::UInt(v), Json::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Json::Float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Json::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(6).min(64));
        while let Some(key) = map.next_key::<CowStr<'de>>()? {
            members.push((key.0, map.next_value()?));
        }
        Ok(Json::Object(members))
    }
}

/// A map key that borrows when the key has no escapes.
struct CowStr<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for CowStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Why a payload is not a JSON document at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseFailure {
    /// `NaN`, `Infinity` or `-Infinity` where a value belongs (what Python's `json.dumps` emits).
    NonFinite(String),
    /// A number too large for an `f64`, such as `1e400`.
    NumberOutOfRange(String),
    /// Anything else: syntax, truncation, invalid UTF-8, trailing characters.
    Invalid(String),
}

/// A serde-derived struct read from a JSON object only. serde_json also reads a struct from an
/// array of its members' values in order (`["e1", "proj-42", ...]`), which no topic's contract
/// allows: the readers that borrow a derived struct straight from a payload (the vote batch's,
/// routing's) read it through this, and decline an array as the contract rejects it.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Members<T> {
            type Value = T;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(Members(std::marker::PhantomData))
            .map(Object)
    }
}

/// Parses a whole payload into a [`Json`] tree.
pub fn parse(payload: &[u8]) -> Result<Json<'_>, ParseFailure> {
    // The payload is checked for UTF-8 once, as a whole (JSON text is UTF-8 by RFC 8259), which
    // is much cheaper than serde_json's check of every string one by one.
    let text = std::str::from_utf8(payload)
        .map_err(|e| ParseFailure::Invalid(format!("payload is not UTF-8: {e}")))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Json::deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    value.map_err(|e| classify(payload, &e))
}

fn classify(payload: &[u8], e: &serde_json::Error) -> ParseFailure {
    let text = e.to_string();
    if text.starts_with("number out of range") {
        return ParseFailure::NumberOutOfRange(text);
    }
    // serde_json reports line and byte column of the token it could not read; look there.
    let at = line_start(payload, e.line()) + e.column().saturating_sub(1);
    let rest = payload.get(at..).unwrap_or_default();
    let rest = rest.strip_prefix(b"-").unwrap_or(rest);
    if rest.starts_with(b"NaN") || rest.starts_with(b"Infinity") {
        return ParseFailure::NonFinite(text);
    }
    ParseFailure::Invalid(text)
}

fn line_start(payload: &[u8], line: usize) -> usize {
    if line <= 1 {
        return 0;
    }
    payload
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(line - 2)
        .map_or(payload.len(), |(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_borrows_plain_strings() {
        let doc =
            parse(br#"{"a": "x", "b": [1, -2, 2.5, 18446744073709551615, null, true]}"#).unwrap();
        let Json::Object(members) = doc else {
            panic!("not an object")
        };
        assert_eq!(members[0].0, "a");
        assert!(matches!(members[0].1, Json::Str(Cow::Borrowed("x"))));
        assert_eq!(
            members[1].1,
            Json::Array(vec![
                Json::Int(1),
                Json::Int(-2),
                Json::Float(2.5),
                Json::UInt(u64::MAX),
                Json::Null,
                Json::Bool(true)
            ])
        );
    }

    #[test]
    fn escaped_strings_are_owned_and_decoded() {
        let doc = parse(br#"{"k\u0041": "a\nb"}"#).unwrap();
        let Json::Object(members) = doc else {
            panic!("not an object")
        };
        assert_eq!(members[0].0, "kA");
        assert_eq!(members[0].1, Json::Str(Cow::Owned("a\nb".into())));
    }

    #[test]
    fn keeps_duplicate_members() {
        let Json::Object(m) = parse(br#"{"a":1,"a":2}"#).unwrap() else {
            panic!()
        };
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn classifies_failures() {
        assert!(matches!(
            parse(br#"{"v": NaN}"#),
            Err(ParseFailure::NonFinite(_))
        ));
        assert!(matches!(
            parse(b"{\n \"v\": -Infinity}"),
            Err(ParseFailure::NonFinite(_))
        ));
        assert!(matches!(
            parse(br#"{"v": 1e400}"#),
            Err(ParseFailure::NumberOutOfRange(_))
        ));
        assert!(matches!(
            parse(br#"{"v": 1"#),
            Err(ParseFailure::Invalid(_))
        ));
        assert!(matches!(parse(br#"{} x"#), Err(ParseFailure::Invalid(_))));
        assert!(matches!(parse(b"\"\xff\""), Err(ParseFailure::Invalid(_))));
    }
}
