//! Field-level validation of JSON objects, producing rejections that name the field.
//!
//! Every event type is read the same way: look the object's members up by name, refuse
//! duplicates (and, if configured, unknown names), then read each field with a typed getter
//! whose error says which field was wrong and why.

use std::borrow::Cow;

use super::json::Json;
use super::rejection::{ErrorCode, Rejection};
use super::time::{EventTime, TimeError};

/// The members of one JSON object, checked against the names the contract defines.
pub struct Fields<'d, 'a, 'p> {
    members: &'d [(Cow<'a, str>, Json<'a>)],
    path: &'p str,
    /// Set for an array element: the object is `path[index]`. Kept apart so the path string is
    /// only built when a message needs it.
    index: Option<usize>,
}

/// Joins a parent path and a field name: `votes[2]` + `value` -> `votes[2].value`.
pub fn field_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

impl<'d, 'a, 'p> Fields<'d, 'a, 'p> {
    /// Checks that `value` is an object whose members appear once each; unknown names are
    /// ignored, or rejected when `reject_unknown` is set. `path` prefixes field names in messages.
    pub fn of(
        value: &'d Json<'a>,
        path: &'p str,
        known: &[&str],
        reject_unknown: bool,
    ) -> Result<Self, Rejection> {
        Fields::element(value, path, None, known, reject_unknown)
    }

    /// [`Fields::of`] for element `index` of the array at `path` (`votes[2]`), or for the value
    /// at `path` itself when `index` is `None`: the one rule every object of every topic is
    /// read by.
    pub fn element(
        value: &'d Json<'a>,
        path: &'p str,
        index: Option<usize>,
        known: &[&str],
        reject_unknown: bool,
    ) -> Result<Self, Rejection> {
        let Json::Object(members) = value else {
            let at = Fields {
                members: &[],
                path,
                index,
            };
            return Err(not_object(&at.own_path(), value.type_name()));
        };
        let f = Fields {
            members,
            path,
            index,
        };
        let mut seen = 0u64;
        for (i, (name, _)) in members.iter().enumerate() {
            match known.iter().position(|k| *k == name.as_ref()) {
                Some(bit) => {
                    if seen & (1 << bit) != 0 {
                        return Err(duplicate(&f.own_path(), name));
                    }
                    seen |= 1 << bit;
                }
                None if reject_unknown => {
                    return Err(Rejection::new(
                        ErrorCode::UnknownField,
                        format!("`{}` is not a field of this event", f.path(name)),
                    ));
                }
                None => {
                    if members[..i].iter().any(|(other, _)| other == name) {
                        return Err(duplicate(&f.own_path(), name));
                    }
                }
            }
        }
        Ok(f)
    }

    /// The object's own path, e.g. `votes[2]`.
    pub fn own_path(&self) -> String {
        match self.index {
            Some(i) => format!("{}[{i}]", self.path),
            None => self.path.to_owned(),
        }
    }

    /// The field's value; JSON `null` counts as absent.
    pub fn get(&self, name: &str) -> Option<&'d Json<'a>> {
        self.members
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .filter(|v| !matches!(v, Json::Null))
    }

    /// The dotted path of a field, for messages.
    pub fn path(&self, name: &str) -> String {
        field_path(&self.own_path(), name)
    }

    /// A required field.
    pub fn required(&self, name: &str) -> Result<&'d Json<'a>, Rejection> {
        self.get(name).ok_or_else(|| {
            Rejection::new(
                ErrorCode::MissingField,
                format!("`{}` is required", self.path(name)),
            )
        })
    }

    /// An optional string.
    pub fn opt_str(&self, name: &str) -> Result<Option<&'d str>, Rejection> {
        self.get(name).map(|v| self.as_str(name, v)).transpose()
    }

    /// A required identifier: a non-empty string of at most `max_bytes` bytes.
    pub fn id(&self, name: &str, max_bytes: usize) -> Result<&'d str, Rejection> {
        let value = self.as_str(name, self.required(name)?)?;
        check_id(value, max_bytes).map_err(|e| e.at(&self.path(name)))
    }

    /// An optional identifier (absent or null -> `None`).
    pub fn opt_id(&self, name: &str, max_bytes: usize) -> Result<Option<&'d str>, Rejection> {
        match self.opt_str(name)? {
            Some(v) => check_id(v, max_bytes)
                .map(Some)
                .map_err(|e| e.at(&self.path(name))),
            None => Ok(None),
        }
    }

    /// An optional number.
    pub fn opt_number(&self, name: &str) -> Result<Option<f64>, Rejection> {
        self.get(name).map(|v| self.as_number(name, v)).transpose()
    }

    /// A string value or a `wrong_type` rejection naming the field.
    pub fn as_str(&self, name: &str, value: &'d Json<'a>) -> Result<&'d str, Rejection> {
        match value {
            Json::Str(s) => Ok(s.as_ref()),
            other => Err(wrong_type(&self.path(name), "a string", other)),
        }
    }

    /// A number value or a `wrong_type` rejection naming the field.
    pub fn as_number(&self, name: &str, value: &Json<'a>) -> Result<f64, Rejection> {
        value
            .as_f64()
            .ok_or_else(|| wrong_type(&self.path(name), "a number", value))
    }

    /// An optional event time: RFC 3339 string or integer epoch milliseconds.
    pub fn opt_time(&self, name: &str) -> Result<Option<EventTime>, Rejection> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        // The path is built only for a message: every vote event has a time.
        let parsed = match value {
            Json::Str(s) => EventTime::parse_rfc3339(s),
            Json::Int(ms) => EventTime::from_contract_millis(*ms),
            Json::UInt(_) => Err(TimeError::OutOfRange),
            other => {
                return Err(wrong_type(
                    &self.path(name),
                    "an RFC 3339 string or integer epoch milliseconds",
                    other,
                ));
            }
        };
        parsed.map(Some).map_err(|e| {
            let code = match e {
                TimeError::OutOfRange => ErrorCode::ValueOutOfRange,
                TimeError::Syntax(_) | TimeError::NoOffset | TimeError::Unit { .. } => {
                    ErrorCode::InvalidTimestamp
                }
            };
            let shown = match value {
                Json::Str(s) => format!("{:?}", excerpt(s)),
                Json::Int(n) => n.to_string(),
                Json::UInt(n) => n.to_string(),
                _ => String::new(),
            };
            Rejection::new(code, format!("`{}` {shown} {e}", self.path(name)))
        })
    }
}

/// At most the first 64 characters of a value shown in a rejection: a dead letter's reason
/// stays short however long the value.
fn excerpt(text: &str) -> String {
    const SHOWN: usize = 64;
    match text.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Why an identifier is not acceptable; [`IdError::at`] names the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdError {
    Empty,
    TooLong { len: usize, max: usize },
}

impl IdError {
    /// The rejection, naming the field at `path`.
    pub fn at(self, path: &str) -> Rejection {
        match self {
            IdError::Empty => {
                Rejection::new(ErrorCode::EmptyField, format!("`{path}` must not be empty"))
            }
            IdError::TooLong { len, max } => Rejection::new(
                ErrorCode::IdTooLong,
                format!("`{path}` is {len} bytes, at most {max} allowed"),
            ),
        }
    }
}

/// Checks an identifier: non-empty and at most `max_bytes` bytes.
pub fn check_id(value: &str, max_bytes: usize) -> Result<&str, IdError> {
    if value.is_empty() {
        return Err(IdError::Empty);
    }
    if value.len() > max_bytes {
        return Err(IdError::TooLong {
            len: value.len(),
            max: max_bytes,
        });
    }
    Ok(value)
}

/// A `wrong_type` rejection: "`votes[0].value` must be a number, found a string".
pub fn wrong_type(path: &str, expected: &str, found: &Json<'_>) -> Rejection {
    Rejection::new(
        ErrorCode::WrongType,
        format!("`{path}` must be {expected}, found {}", found.type_name()),
    )
}

fn not_object(path: &str, found: &str) -> Rejection {
    let what = if path.is_empty() {
        "the payload".to_owned()
    } else {
        format!("`{path}`")
    };
    Rejection::new(
        ErrorCode::NotObject,
        format!("{what} must be a JSON object, found {found}"),
    )
}

fn duplicate(path: &str, name: &str) -> Rejection {
    Rejection::new(
        ErrorCode::DuplicateField,
        format!("`{}` appears more than once", field_path(path, name)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::contract::json::parse;

    #[test]
    fn getters_name_the_field() {
        let doc = parse(br#"{"a": 1, "b": "x", "c": "", "d": null}"#).unwrap();
        let f = Fields::of(&doc, "votes[3]", &["a", "b", "c", "d"], false).unwrap();
        let e = f.id("a", 10).unwrap_err();
        assert_eq!(e.code, ErrorCode::WrongType);
        assert_eq!(e.message, "`votes[3].a` must be a string, found a number");
        assert_eq!(f.id("c", 10).unwrap_err().code, ErrorCode::EmptyField);
        assert_eq!(f.id("d", 10).unwrap_err().code, ErrorCode::MissingField);
        assert_eq!(f.id("b", 0).unwrap_err().code, ErrorCode::IdTooLong);
        assert_eq!(f.opt_number("d").unwrap(), None);
        assert_eq!(f.opt_number("a").unwrap(), Some(1.0));
    }

    #[test]
    fn duplicates_and_unknowns() {
        let doc = parse(br#"{"a": 1, "z": 2, "a": 3}"#).unwrap();
        assert_eq!(
            Fields::of(&doc, "", &["a"], false).err().unwrap().code,
            ErrorCode::DuplicateField
        );
        let doc = parse(br#"{"a": 1, "z": 2, "z": 3}"#).unwrap();
        assert_eq!(
            Fields::of(&doc, "", &["a"], false).err().unwrap().code,
            ErrorCode::DuplicateField
        );
        let doc = parse(br#"{"a": 1, "z": 2}"#).unwrap();
        assert!(Fields::of(&doc, "", &["a"], false).is_ok());
        let e = Fields::of(&doc, "", &["a"], true).err().unwrap();
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::UnknownField, "`z` is not a field of this event")
        );
        let doc = parse(b"[1]").unwrap();
        assert_eq!(
            Fields::of(&doc, "", &["a"], false).err().unwrap().code,
            ErrorCode::NotObject
        );
    }
}
