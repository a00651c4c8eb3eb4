//! The pure core: event contract, validation, state and formulas. No I/O, no clock, no async.
//!
//! A runtime (the file [`replay`](crate::replay) or the Kafka service) hands the [`Engine`] one
//! input [`Record`] at a time together with the state it belongs to; the engine validates it,
//! updates that state and appends the records to publish. Because the engine sees nothing but
//! records, the same input always produces the same output, whichever runtime drives it.

pub mod contract;
pub mod ids;
pub mod journal;
mod judging;
pub mod model;
pub mod origins;
pub mod output;
mod prepared;
pub mod quality;
pub mod record;
pub mod reputation;
mod reviewers;
mod routing;
pub mod settings;
pub mod state;
mod votes;

use contract::json::{self, ParseFailure};
use contract::rejection::{ErrorCode, Rejection};
use contract::time::EventTime;
use output::{DeadLetter, Output, OutputValue};
use reputation::{ReputationChange, ReputationTable};

pub use ids::{IdMap, ProjectKey};
pub use journal::{Change, JournalHint};
pub use judging::leaderboard_record;
pub use origins::Origins;
pub use prepared::PreparedVotes;
pub use record::{InputTopic, Outcome, Receipt, Record, TICK_TOPIC};
pub use reviewers::reviewer_record;
pub use settings::Settings;
pub use state::{Coalescing, JudgeProject, Kept, KeptConsensus, PartitionState, VoteProject};

/// The stateless processor: its settings plus the code that applies records to state.
#[derive(Debug, Clone)]
pub struct Engine {
    settings: Settings,
}

impl Engine {
    pub fn new(settings: Settings) -> Self {
        Engine { settings }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Processes one record: validates it, applies it to `state` (or to `reputations`), and
    /// appends what to publish to `out`. The one applier of every record, whether the runtime
    /// read its vote batch ahead ([`Record::votes`]) or not. A rejected record leaves all state
    /// unchanged but for the note that its offset was processed ([`Origins`]), and appends
    /// exactly one dead letter. A record at or below the last offset processed from its
    /// partition is a copy of one processed before and is skipped ([`Outcome::Replayed`]).
    pub fn process(
        &self,
        state: &mut PartitionState,
        reputations: &mut ReputationTable,
        record: &Record<'_>,
        out: &mut Vec<Output>,
    ) -> Outcome {
        if state.origins.is_copy(record) {
            return Outcome::Replayed;
        }
        let start = out.len();
        let outcome = match self.try_process(state, reputations, record, out) {
            Ok(outcome) => {
                self.bound_outputs(record, &mut out[start..]);
                outcome
            }
            Err(rejection) => self.reject(record, &rejection, out),
        };
        state.origins.advance(record);
        outcome
    }

    /// Replaces each of `record`'s outputs that would exceed the record limit with a dead letter
    /// that says so (`output_too_large`), so no input, however hostile, makes a record the
    /// producer refuses. The session limits keep consensus records well within it; this is what
    /// holds whatever the ids' escaping or the configuration.
    fn bound_outputs(&self, record: &Record<'_>, outs: &mut [Output]) {
        let max = self.settings.limits.max_record_bytes();
        for o in outs {
            let OutputValue::Json(text) = &o.value else {
                continue;
            };
            let size = text.len() + o.key.as_ref().map_or(0, String::len);
            if size > max {
                let rejection = Rejection::new(
                    ErrorCode::OutputTooLarge,
                    format!(
                        "the record was applied, but its {} output would be {size} bytes, above \
                         the {max}-byte record limit, and is not published",
                        o.topic.label()
                    ),
                );
                let letter = DeadLetter::new(
                    record.source(),
                    &rejection,
                    self.settings.limits.dead_letter_payload_bytes,
                );
                *o = letter.into_output(max);
            }
        }
    }

    /// Appends the dead letter for `rejection` and returns its outcome.
    pub fn reject(
        &self,
        record: &Record<'_>,
        rejection: &Rejection,
        out: &mut Vec<Output>,
    ) -> Outcome {
        let letter = DeadLetter::new(
            record.source(),
            rejection,
            self.settings.limits.dead_letter_payload_bytes,
        );
        out.push(letter.into_output(self.settings.limits.max_record_bytes()));
        Outcome::Rejected(rejection.code)
    }

    fn try_process(
        &self,
        state: &mut PartitionState,
        reputations: &mut ReputationTable,
        record: &Record<'_>,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        if let Some(prepared) = record.votes {
            return self.apply_votes(state, reputations, record, prepared, out);
        }
        if record.is_tick() {
            return self.apply_tick(state, record, out);
        }
        let topic = record.input.ok_or_else(|| {
            Rejection::new(
                ErrorCode::UnknownTopic,
                format!("topic {:?} is not an input of jurystream", record.topic),
            )
        })?;
        let Some(payload) = record.payload else {
            if topic == InputTopic::Reputations {
                reputations.apply(&ReputationChange::tombstone(record.key)?);
                return Ok(Outcome::Applied);
            }
            return Err(tombstone());
        };
        self.check_size(payload)?;
        match topic {
            InputTopic::Votes => {
                let prepared = self.read_votes(record, payload)?;
                self.apply_votes(state, reputations, record, &prepared, out)
            }
            InputTopic::Reputations => {
                let doc = json::parse(payload).map_err(parse_rejection)?;
                let l = &self.settings.limits;
                let change = ReputationChange::from_json(
                    &doc,
                    record.key,
                    l.max_id_bytes,
                    l.reject_unknown_fields,
                )?;
                reputations.apply(&change);
                Ok(Outcome::Applied)
            }
            InputTopic::JudgeScores => {
                let doc = json::parse(payload).map_err(parse_rejection)?;
                self.apply_judge(state, record, &doc, out)
            }
        }
    }

    fn check_size(&self, payload: &[u8]) -> Result<(), Rejection> {
        let max = self.settings.limits.max_message_bytes;
        if payload.len() > max {
            return Err(Rejection::new(
                ErrorCode::PayloadTooLarge,
                format!("payload is {} bytes, at most {max} allowed", payload.len()),
            ));
        }
        Ok(())
    }

    /// With `input.partitioning = "by_key"` the service keeps a project's state in the
    /// partition its records are keyed to, so a record keyed by anything but its project would
    /// split the project's state: it is refused instead (`key_not_project_id`).
    fn check_key(&self, record: &Record<'_>, project: &str) -> Result<(), Rejection> {
        if !self.settings.key_is_project || record.key == Some(project.as_bytes()) {
            return Ok(());
        }
        let key = match record.key {
            Some(k) => format!("key {:?}", String::from_utf8_lossy(k)),
            None => "no key".to_owned(),
        };
        Err(Rejection::new(
            ErrorCode::KeyNotProjectId,
            format!(
                "the record has {key}, not its project_id {project:?}: with input.partitioning = \
                 \"by_key\" every record must be keyed by its project, or the project's state \
                 would split across partitions"
            ),
        ))
    }

    /// The event time of `record` (its `occurred_at`, or else its record timestamp), within
    /// `limits.max_future_skew_secs` of the clocks that can tell it is ahead (see
    /// [`Engine::check_ahead_of_reading`]).
    fn event_time(
        &self,
        occurred_at: Option<EventTime>,
        record: &Record<'_>,
    ) -> Result<EventTime, Rejection> {
        let t = self.stated_time(occurred_at, record)?;
        self.check_ahead_of_reading(t, occurred_at.is_some(), record)?;
        Ok(t)
    }

    /// Refuses an event time `t` more than `limits.max_future_skew_secs` after the service
    /// first read `record` ([`Record::read_at_ms`]). Accepted, it would become its project's
    /// latest time, and every honest batch `late` (changing nothing) until the world's clock
    /// caught up with it: a producer whose host clock is a day ahead would freeze its project's
    /// score for a day. Replay has no clock to check by.
    fn check_ahead_of_reading(
        &self,
        t: EventTime,
        stated: bool,
        record: &Record<'_>,
    ) -> Result<(), Rejection> {
        let skew = self.settings.limits.max_future_skew_secs;
        let Some(read) = record
            .read_at_ms
            .and_then(|ms| EventTime::from_epoch_millis(ms).ok())
        else {
            return Ok(());
        };
        if t <= read.plus_seconds(i64::try_from(skew).unwrap_or(i64::MAX)) {
            return Ok(());
        }
        let from = if stated {
            "`occurred_at`"
        } else {
            "record timestamp, as it has no `occurred_at`"
        };
        Err(Rejection::new(
            ErrorCode::EventTimeInFuture,
            format!(
                "the event time {t} (its {from}) is more than {skew} s after the service first \
                 read the record, at {read}: the producer's clock is ahead (or this instance's \
                 behind)"
            ),
        ))
    }

    /// The event time `record` states: its `occurred_at` within `limits.max_future_skew_secs`
    /// of its record timestamp, and not before [`EventTime::EARLIEST_STATED`] when that
    /// timestamp is after it; or else that timestamp.
    fn stated_time(
        &self,
        occurred_at: Option<EventTime>,
        record: &Record<'_>,
    ) -> Result<EventTime, Rejection> {
        if let Some(t) = occurred_at {
            // Checked against the record's own timestamp, the runtime's only clock of the
            // producer's: far enough ahead, it would freeze its project's decay until then.
            let skew = self.settings.limits.max_future_skew_secs;
            let stamped = record
                .timestamp_ms
                .and_then(|ms| EventTime::from_epoch_millis(ms).ok());
            if let Some(stamped) = stamped
                && t > stamped.plus_seconds(i64::try_from(skew).unwrap_or(i64::MAX))
            {
                return Err(Rejection::new(
                    ErrorCode::OccurredAtInFuture,
                    format!(
                        "`occurred_at` {t} is more than {skew} s after the record timestamp {stamped}"
                    ),
                ));
            }
            if let Some(stamped) = stamped
                && t < EventTime::EARLIEST_STATED
                && stamped >= EventTime::EARLIEST_STATED
            {
                return Err(Rejection::new(
                    ErrorCode::InvalidTimestamp,
                    format!(
                        "`occurred_at` {t} is before {}, its record timestamp \
                         {stamped} after: a time left unset (0) or counted from another \
                         epoch; send the event's time in epoch milliseconds or RFC 3339",
                        EventTime::EARLIEST_STATED
                    ),
                ));
            }
            return Ok(t);
        }
        let ms = record.timestamp_ms.ok_or_else(|| {
            Rejection::new(
                ErrorCode::MissingTimestamp,
                "no `occurred_at` and no record timestamp",
            )
        })?;
        EventTime::from_epoch_millis(ms).map_err(|e| {
            Rejection::new(
                ErrorCode::ValueOutOfRange,
                format!("record timestamp {ms} ms: {e}"),
            )
        })
    }
}

/// The rejection of a record that would add `project` to an instance holding `max` projects
/// (`limits.max_projects`), on either topic that creates projects.
fn project_limit(project: &str, max: usize) -> Rejection {
    Rejection::new(
        ErrorCode::ProjectLimit,
        format!(
            "project {project:?} would be one more than the {max} this instance holds \
             (limits.max_projects)"
        ),
    )
}

/// The rejection of a tombstone on a topic of events.
fn tombstone() -> Rejection {
    Rejection::new(
        ErrorCode::EmptyPayload,
        "a tombstone (null value) is not an event",
    )
}

/// The rejection for a payload that is not JSON at all.
fn parse_rejection(e: ParseFailure) -> Rejection {
    match e {
        ParseFailure::NonFinite(m) => Rejection::new(
            ErrorCode::NonFiniteNumber,
            format!("NaN and Infinity are not JSON numbers ({m})"),
        ),
        ParseFailure::NumberOutOfRange(m) => Rejection::new(ErrorCode::ValueOutOfRange, m),
        ParseFailure::Invalid(m) => Rejection::new(ErrorCode::InvalidJson, m),
    }
}

#[cfg(test)]
mod tests;
