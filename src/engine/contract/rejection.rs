//! Why a record was rejected: a stable machine-readable code and a readable message.
//!
//! The code is part of the public contract (it is the `error` field of `jury.dead-letters` and a
//! metric label), so variants are only ever added, never renamed.

use std::fmt;

/// Stable error codes of the dead-letter contract; see docs/events.md for the full table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    InvalidEnvelope,
    UnknownTopic,
    EmptyPayload,
    PayloadTooLarge,
    InvalidJson,
    NonFiniteNumber,
    NotObject,
    MissingField,
    EmptyField,
    IdTooLong,
    WrongType,
    UnknownField,
    DuplicateField,
    ValueOutOfRange,
    InvalidTimestamp,
    MissingTimestamp,
    NoVotes,
    TooManyVotes,
    UnknownVerdict,
    VoteValueConflict,
    VoteValueMissing,
    NegativeReputation,
    ZeroTotalReputation,
    DuplicateEventId,
    MissingKey,
    KeyMismatch,
    UnknownType,
    UnknownStatus,
    InvalidScale,
    ScoreOutOfScale,
    SessionCompleted,
    OccurredAtInFuture,
    OffsetOutOfOrder,
    ProjectLimit,
    SessionLimit,
    OutputTooLarge,
    KeyNotProjectId,
    ForwardRefused,
    EventTimeInFuture,
}

impl ErrorCode {
    /// Every code, for documentation tests and metric pre-registration.
    pub const ALL: [ErrorCode; 39] = [
        ErrorCode::InvalidEnvelope,
        ErrorCode::UnknownTopic,
        ErrorCode::EmptyPayload,
        ErrorCode::PayloadTooLarge,
        ErrorCode::InvalidJson,
        ErrorCode::NonFiniteNumber,
        ErrorCode::NotObject,
        ErrorCode::MissingField,
        ErrorCode::EmptyField,
        ErrorCode::IdTooLong,
        ErrorCode::WrongType,
        ErrorCode::UnknownField,
        ErrorCode::DuplicateField,
        ErrorCode::ValueOutOfRange,
        ErrorCode::InvalidTimestamp,
        ErrorCode::MissingTimestamp,
        ErrorCode::NoVotes,
        ErrorCode::TooManyVotes,
        ErrorCode::UnknownVerdict,
        ErrorCode::VoteValueConflict,
        ErrorCode::VoteValueMissing,
        ErrorCode::NegativeReputation,
        ErrorCode::ZeroTotalReputation,
        ErrorCode::DuplicateEventId,
        ErrorCode::MissingKey,
        ErrorCode::KeyMismatch,
        ErrorCode::UnknownType,
        ErrorCode::UnknownStatus,
        ErrorCode::InvalidScale,
        ErrorCode::ScoreOutOfScale,
        ErrorCode::SessionCompleted,
        ErrorCode::OccurredAtInFuture,
        ErrorCode::OffsetOutOfOrder,
        ErrorCode::ProjectLimit,
        ErrorCode::SessionLimit,
        ErrorCode::OutputTooLarge,
        ErrorCode::KeyNotProjectId,
        ErrorCode::ForwardRefused,
        ErrorCode::EventTimeInFuture,
    ];

    /// The wire spelling, e.g. `duplicate_event_id`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidEnvelope => "invalid_envelope",
            ErrorCode::UnknownTopic => "unknown_topic",
            ErrorCode::EmptyPayload => "empty_payload",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::NonFiniteNumber => "non_finite_number",
            ErrorCode::NotObject => "not_object",
            ErrorCode::MissingField => "missing_field",
            ErrorCode::EmptyField => "empty_field",
            ErrorCode::IdTooLong => "id_too_long",
            ErrorCode::WrongType => "wrong_type",
            ErrorCode::UnknownField => "unknown_field",
            ErrorCode::DuplicateField => "duplicate_field",
            ErrorCode::ValueOutOfRange => "value_out_of_range",
            ErrorCode::InvalidTimestamp => "invalid_timestamp",
            ErrorCode::MissingTimestamp => "missing_timestamp",
            ErrorCode::NoVotes => "no_votes",
            ErrorCode::TooManyVotes => "too_many_votes",
            ErrorCode::UnknownVerdict => "unknown_verdict",
            ErrorCode::VoteValueConflict => "vote_value_conflict",
            ErrorCode::VoteValueMissing => "vote_value_missing",
            ErrorCode::NegativeReputation => "negative_reputation",
            ErrorCode::ZeroTotalReputation => "zero_total_reputation",
            ErrorCode::DuplicateEventId => "duplicate_event_id",
            ErrorCode::MissingKey => "missing_key",
            ErrorCode::KeyMismatch => "key_mismatch",
            ErrorCode::UnknownType => "unknown_type",
            ErrorCode::UnknownStatus => "unknown_status",
            ErrorCode::InvalidScale => "invalid_scale",
            ErrorCode::ScoreOutOfScale => "score_out_of_scale",
            ErrorCode::SessionCompleted => "session_completed",
            ErrorCode::OccurredAtInFuture => "occurred_at_in_future",
            ErrorCode::OffsetOutOfOrder => "offset_out_of_order",
            ErrorCode::ProjectLimit => "project_limit",
            ErrorCode::SessionLimit => "session_limit",
            ErrorCode::OutputTooLarge => "output_too_large",
            ErrorCode::KeyNotProjectId => "key_not_project_id",
            ErrorCode::ForwardRefused => "forward_refused",
            ErrorCode::EventTimeInFuture => "event_time_in_future",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected record: the code plus a message that names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: String,
}

impl Rejection {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Rejection {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ErrorCode::ALL {
            let s = code.as_str();
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s}");
            assert!(seen.insert(s), "duplicate code {s}");
        }
    }
}
