//! Which project a record belongs to, read for the stage that repartitions the inputs by it
//! before any state is touched (see `crate::kafka`).

use super::contract::fields::Fields;
use super::contract::json;
use super::contract::rejection::{ErrorCode, Rejection};
use super::contract::vote::VoteBatch;
use super::{Engine, InputTopic, ProjectKey, Record, parse_rejection};

impl Engine {
    /// The `project_id` of a `jury.votes` or `jury.judge-scores` record, read by the rules the
    /// full validation reads it by, and nothing more of the record: the rest is validated where
    /// the project's state is. A record whose project cannot be read has no partition to go to
    /// and is rejected here, with the code the full validation gives for the same fault. The
    /// project comes owned (inline up to 24 bytes), to go with the record to another thread.
    pub fn project_of(&self, record: &Record<'_>) -> Result<ProjectKey, Rejection> {
        let l = &self.settings.limits;
        let input = match record.input {
            Some(t @ (InputTopic::Votes | InputTopic::JudgeScores)) => t,
            _ => {
                return Err(Rejection::new(
                    ErrorCode::UnknownTopic,
                    format!(
                        "topic {:?} is not an input partitioned by project",
                        record.topic
                    ),
                ));
            }
        };
        let payload = record.payload.ok_or_else(super::tombstone)?;
        self.check_size(payload)?;
        if input == InputTopic::Votes
            && let Some(batch) = VoteBatch::plain(payload, self.vote_limits())
        {
            return Ok(ProjectKey::from(batch.project_id));
        }
        let doc = json::parse(payload).map_err(parse_rejection)?;
        let fields = Fields::of(&doc, "", &[], false)?;
        Ok(ProjectKey::from(fields.id("project_id", l.max_id_bytes)?))
    }
}
