//! Which project a record belongs to, read for the stage that repartitions the inputs by it
//! before any state is touched (see `crate::kafka`).

use serde::Deserialize;

use super::contract::fields::{Fields, check_id};
use super::contract::json::{self, Object};
use super::contract::rejection::{ErrorCode, Rejection};
use super::{Engine, InputTopic, ProjectKey, Record, parse_rejection};

/// What routing reads of a record: its `project_id`, borrowed (an escaped one fails), every
/// other member skipped unread. serde still reads the payload to its end, so what is not one
/// JSON object ([`Object`]) with a `project_id` string fails here and goes to the contract
/// reader.
#[derive(Deserialize)]
struct Routed<'a> {
    project_id: &'a str,
}

impl Engine {
    /// The `project_id` of a `jury.votes` or `jury.judge-scores` record, read by the rules the
    /// full validation reads it by, and nothing more of the record: the rest is validated where
    /// the project's state is. A record whose project cannot be read has no partition to go to
    /// and is rejected here, with the code the full validation gives for the same fault. The
    /// project comes owned (inline up to 24 bytes), to go with the record to another thread.
    pub fn project_of(&self, record: &Record<'_>) -> Result<ProjectKey, Rejection> {
        let l = &self.settings.limits;
        if !matches!(
            record.input,
            Some(InputTopic::Votes | InputTopic::JudgeScores)
        ) {
            return Err(Rejection::new(
                ErrorCode::UnknownTopic,
                format!(
                    "topic {:?} is not an input partitioned by project",
                    record.topic
                ),
            ));
        }
        let payload = record.payload.ok_or_else(super::tombstone)?;
        self.check_size(payload)?;
        // The contract reader reads the same `project_id` from any payload this reads one
        // from (the same member, by serde; a duplicate fails both), so it is needed here only
        // to word a rejection. A payload with a project and faults elsewhere is dead-lettered
        // by the stage that holds the project, by the reader replay uses too.
        let read = std::str::from_utf8(payload).ok().and_then(|text| {
            let Object(routed): Object<Routed<'_>> = serde_json::from_str(text).ok()?;
            check_id(routed.project_id, l.max_id_bytes).ok()
        });
        if let Some(project) = read {
            return Ok(ProjectKey::from(project));
        }
        let doc = json::parse(payload).map_err(parse_rejection)?;
        let fields = Fields::of(&doc, "", &[], false)?;
        Ok(ProjectKey::from(fields.id("project_id", l.max_id_bytes)?))
    }
}
