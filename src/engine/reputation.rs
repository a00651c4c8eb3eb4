//! `jury.reputations`: the compacted table of voter reputations.
//!
//! It is a table, not a stream: the latest record per voter wins and a tombstone deletes. Votes
//! without an explicit reputation read it at the moment they are processed. The table is shared
//! by every partition an instance owns (like a Kafka Streams GlobalKTable); the one thread that
//! applies records owns it, so it is a plain map changed through `&mut`.

use super::contract::fields::Fields;
use super::contract::json::Json;
use super::contract::rejection::{ErrorCode, Rejection};

/// Voter id -> reputation. Hashed with foldhash, like the state's maps (see
/// [`super::IdMap`]): every vote without an explicit reputation looks its voter up here, and
/// std's SipHash was most of that lookup.
#[derive(Debug, Default, PartialEq)]
pub struct ReputationTable {
    entries: super::IdMap<String, f64>,
}

/// A validated change to the table.
#[derive(Debug, Clone, PartialEq)]
pub enum ReputationChange<'a> {
    Upsert { voter_id: &'a str, reputation: f64 },
    Delete { voter_id: &'a str },
}

impl<'a> ReputationChange<'a> {
    /// A tombstone: the record key names the voter to delete.
    pub fn tombstone(key: Option<&'a [u8]>) -> Result<Self, Rejection> {
        let voter_id = utf8_key(key)?.ok_or_else(|| {
            Rejection::new(
                ErrorCode::MissingKey,
                "a tombstone needs the voter id as record key",
            )
        })?;
        Ok(ReputationChange::Delete { voter_id })
    }

    /// An upsert `{"voter_id": "u-7", "reputation": 0.9}`; a record key, if any, must equal `voter_id`.
    pub fn from_json<'d>(
        doc: &'d Json<'a>,
        key: Option<&'d [u8]>,
        max_id_bytes: usize,
        reject_unknown: bool,
    ) -> Result<ReputationChange<'d>, Rejection> {
        let f = Fields::of(doc, "", &["voter_id", "reputation"], reject_unknown)?;
        let voter_id = f.id("voter_id", max_id_bytes)?;
        let reputation = f.as_number("reputation", f.required("reputation")?)?;
        if reputation < 0.0 {
            return Err(Rejection::new(
                ErrorCode::NegativeReputation,
                format!("`reputation` is {reputation}; must be >= 0"),
            ));
        }
        if let Some(k) = utf8_key(key)?
            && k != voter_id
        {
            return Err(Rejection::new(
                ErrorCode::KeyMismatch,
                format!(
                    "record key {k:?} differs from `voter_id` {voter_id:?}; compaction would keep the wrong record"
                ),
            ));
        }
        Ok(ReputationChange::Upsert {
            voter_id,
            reputation,
        })
    }
}

fn utf8_key(key: Option<&[u8]>) -> Result<Option<&str>, Rejection> {
    key.filter(|k| !k.is_empty())
        .map(|k| {
            std::str::from_utf8(k)
                .map_err(|_| Rejection::new(ErrorCode::KeyMismatch, "record key is not UTF-8"))
        })
        .transpose()
}

impl ReputationTable {
    /// The voter's current reputation, if the table has one.
    pub fn get(&self, voter_id: &str) -> Option<f64> {
        self.entries.get(voter_id).copied()
    }

    pub fn apply(&mut self, change: &ReputationChange<'_>) {
        match *change {
            ReputationChange::Upsert {
                voter_id,
                reputation,
            } => {
                self.entries.insert(voter_id.to_owned(), reputation);
            }
            ReputationChange::Delete { voter_id } => {
                self.entries.remove(voter_id);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::contract::json::parse;

    fn change<'a>(
        doc: &'a Json<'a>,
        key: Option<&'a [u8]>,
    ) -> Result<ReputationChange<'a>, Rejection> {
        ReputationChange::from_json(doc, key, 256, false)
    }

    #[test]
    fn upsert_then_tombstone() {
        let mut table = ReputationTable::default();
        let doc = parse(br#"{"voter_id": "u-7", "reputation": 0.9}"#).unwrap();
        table.apply(&change(&doc, Some(b"u-7")).unwrap());
        assert_eq!(table.get("u-7"), Some(0.9));
        let doc = parse(br#"{"voter_id": "u-7", "reputation": 2}"#).unwrap();
        table.apply(&change(&doc, None).unwrap());
        assert_eq!(table.get("u-7"), Some(2.0));
        table.apply(&ReputationChange::tombstone(Some(b"u-7")).unwrap());
        assert_eq!(table.get("u-7"), None);
    }

    #[test]
    fn rejections() {
        let doc = parse(br#"{"voter_id": "u-7", "reputation": -0.5}"#).unwrap();
        assert_eq!(
            change(&doc, None).unwrap_err().code,
            ErrorCode::NegativeReputation
        );
        let doc = parse(br#"{"voter_id": "u-7", "reputation": 1}"#).unwrap();
        assert_eq!(
            change(&doc, Some(b"u-8")).unwrap_err().code,
            ErrorCode::KeyMismatch
        );
        let doc = parse(br#"{"voter_id": "u-7"}"#).unwrap();
        assert_eq!(
            change(&doc, None).unwrap_err().code,
            ErrorCode::MissingField
        );
        assert_eq!(
            ReputationChange::tombstone(None).unwrap_err().code,
            ErrorCode::MissingKey
        );
    }
}
