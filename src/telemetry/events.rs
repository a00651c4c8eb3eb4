//! The service's internal events, one type each: what happened, logged and counted in one place
//! (Vector's internal events). The runtime emits an event where it happens; how it shows in the
//! logs and which metrics it moves is decided here, so a newcomer finds a log line's metric, and a
//! metric's log line, side by side.
//!
//! Per-record outcomes are counted, never logged: at hundreds of thousands of records a second a
//! log line each would cost more than the record.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

use super::metrics::Metrics;
use crate::engine::Outcome;
use crate::engine::contract::rejection::ErrorCode;

/// Something that happened in the service, to log and count.
pub trait InternalEvent {
    fn emit(self, metrics: &Metrics);
}

/// `count` input records of `topic` ended in `outcome`.
pub struct RecordsProcessed<'a> {
    pub topic: &'a str,
    pub outcome: Outcome,
    pub count: u64,
}

impl InternalEvent for RecordsProcessed<'_> {
    fn emit(self, metrics: &Metrics) {
        let (topic, n) = (self.topic, self.count);
        let result = match self.outcome {
            Outcome::Applied => "applied",
            Outcome::Late => "late",
            Outcome::Replayed => "replayed",
            Outcome::Rejected(ErrorCode::DuplicateEventId) => "duplicate",
            Outcome::Rejected(_) => "dead_lettered",
        };
        metrics
            .records
            .with_label_values(&[topic, result])
            .inc_by(n);
        if let Outcome::Rejected(code) = self.outcome {
            metrics
                .dead_letters
                .with_label_values(&[topic, code.as_str()])
                .inc_by(n);
        }
    }
}

/// Input records forwarded to the repartition topic by their project (they are counted again,
/// by outcome, when they are applied from there).
pub struct RecordsForwarded<'a> {
    pub topic: &'a str,
    pub count: u64,
}

impl InternalEvent for RecordsForwarded<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .forwarded
            .with_label_values(&[self.topic])
            .inc_by(self.count);
    }
}

/// A record polled before its partition was revoked, dropped unapplied: its offset was never
/// committed, so the partition's next owner reads it.
pub struct RecordRevoked<'a> {
    pub topic: &'a str,
}

impl InternalEvent for RecordRevoked<'_> {
    fn emit(self, metrics: &Metrics) {
        metrics
            .records
            .with_label_values(&[self.topic, "revoked"])
            .inc();
    }
}

/// The broker refused a produced record for good: the service stops before committing.
pub struct DeliveryFailed<'a> {
    /// The destination's metric label.
    pub topic: &'a str,
    pub error: &'a KafkaError,
}

impl InternalEvent for DeliveryFailed<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::error!(error = %self.error, topic = self.topic, "delivery failed");
        metrics.producer_errors.inc();
    }
}

/// The client or broker refused an output record for good (too large for the broker's limit,
/// invalid): it is dropped and its epoch goes on, so one record never wedges the service.
pub struct OutputRefused<'a> {
    /// The destination's metric label.
    pub topic: &'a str,
    pub error: &'a KafkaError,
}

impl InternalEvent for OutputRefused<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::error!(error = %self.error, topic = self.topic, "output refused, dropped");
        metrics
            .outputs_refused
            .with_label_values(&[self.topic])
            .inc();
    }
}

/// A bias alert was published.
pub struct AlertPublished {
    pub scope: &'static str,
    pub kind: &'static str,
}

impl InternalEvent for AlertPublished {
    fn emit(self, metrics: &Metrics) {
        metrics
            .alerts
            .with_label_values(&[self.scope, self.kind])
            .inc();
    }
}

/// Another instance announced this instance's advertised URL: two instances share one URL
/// (an unspecified or copied `http.advertised_url`), so queries reach the wrong one.
pub struct AdvertisedUrlConflict<'a> {
    pub url: &'a str,
    pub partition: i32,
}

impl InternalEvent for AdvertisedUrlConflict<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::error!(
            url = self.url,
            partition = self.partition,
            "another instance advertises this instance's URL: set a distinct http.advertised_url \
             on each instance"
        );
        metrics.advertised_url_conflicts.inc();
    }
}

/// The wall clock stepped `by_ms` (forward positive) against the monotonic clock between two of
/// the service's ticks. The ticks keep to the monotonic clock (see the Kafka runtime's ticks'
/// clock), so no idle session completes early or waits longer for it; said because the
/// publication latency and the next owner's ticks read the stepped clock.
pub struct ClockStepped {
    pub by_ms: i64,
}

impl InternalEvent for ClockStepped {
    fn emit(self, metrics: &Metrics) {
        tracing::warn!(
            by_ms = self.by_ms,
            "the wall clock stepped {:+.3} s: the service's ticks keep to the monotonic clock, \
             so idle sessions still complete sessions.idle_timeout_secs after their last ballot; \
             check the host's time synchronisation (the clocks of the instances should agree)",
            self.by_ms as f64 / 1000.0
        );
        metrics.clock_steps.inc();
    }
}

/// A forward this processor applied was stamped by a clock `ahead_ms` ahead of its own: another
/// instance's clock is ahead (or this one's behind). Idle sessions complete by the clock of the
/// instance that owns their partition, so they complete early or late when a partition moves
/// between the two.
pub struct ClocksDisagree {
    pub ahead_ms: i64,
}

impl InternalEvent for ClocksDisagree {
    fn emit(self, metrics: &Metrics) {
        tracing::warn!(
            ahead_ms = self.ahead_ms,
            "a record was forwarded by an instance whose clock is {:.3} s ahead of this \
             instance's: idle sessions complete early or late when their partition moves \
             between the two; synchronise the instances' clocks",
            self.ahead_ms as f64 / 1000.0
        );
        metrics.clock_disagreements.inc();
    }
}

/// A consensus was published with the configured judge weights, as the learned ones of its
/// judges were all zero.
pub struct WeightsFellBack;

impl InternalEvent for WeightsFellBack {
    fn emit(self, metrics: &Metrics) {
        metrics.weights_fallbacks.inc();
    }
}

/// A pass of a release of reviewer records fitted `fitted` projects in `seconds`, and left
/// `pending` of the release for the passes after it.
pub struct ReviewersReleased {
    pub fitted: u64,
    pub pending: u64,
    pub seconds: f64,
}

impl InternalEvent for ReviewersReleased {
    fn emit(self, metrics: &Metrics) {
        metrics.reviewer_fits.inc_by(self.fitted);
        metrics.reviewer_release_pass.observe(self.seconds);
        metrics
            .reviewer_fits_pending
            .set(i64::try_from(self.pending).unwrap_or(i64::MAX));
    }
}

/// An epoch's changelog was sent: `records` state records.
pub struct ChangelogSent {
    pub records: u64,
}

impl InternalEvent for ChangelogSent {
    fn emit(self, metrics: &Metrics) {
        metrics.changelog_records.inc_by(self.records);
    }
}

/// Offsets were committed, or the group refused them (they are committed again a cycle later
/// while the partition is owned; until then the changelog holds the work, so a restart skips
/// it instead of repeating it).
pub struct OffsetsCommitted<'a> {
    pub result: Result<(), &'a KafkaError>,
}

impl InternalEvent for OffsetsCommitted<'_> {
    fn emit(self, metrics: &Metrics) {
        let result = match self.result {
            Ok(()) => "ok",
            Err(error) => {
                tracing::warn!(%error, "offset commit failed");
                "error"
            }
        };
        metrics.commits.with_label_values(&[result]).inc();
    }
}

/// An epoch was committed, `seconds` after it was sealed.
pub struct EpochCommitted {
    pub seconds: f64,
}

impl InternalEvent for EpochCommitted {
    fn emit(self, metrics: &Metrics) {
        metrics.cycles.inc();
        metrics.cycle_duration.observe(self.seconds);
    }
}

/// One partition's state was restored from the changelog.
pub struct PartitionRestored<'a, U: std::fmt::Debug> {
    pub unit: &'a U,
    pub records: u64,
    pub bytes: u64,
    pub offset: Option<i64>,
}

impl<U: std::fmt::Debug> InternalEvent for PartitionRestored<'_, U> {
    fn emit(self, metrics: &Metrics) {
        let (unit, records, bytes, offset) = (self.unit, self.records, self.bytes, self.offset);
        tracing::info!(?unit, records, bytes, offset, "restored partition state");
        metrics.restore_records.inc_by(records);
        metrics.restore_bytes.inc_by(bytes);
    }
}

/// A restore of newly assigned partitions finished in `seconds`; the instance now owns `owned`.
pub struct RestoreFinished {
    pub seconds: f64,
    pub owned: usize,
}

impl InternalEvent for RestoreFinished {
    fn emit(self, metrics: &Metrics) {
        metrics.restore_duration.observe(self.seconds);
        metrics.partitions_owned.set(self.owned as i64);
    }
}

/// Partitions were assigned to this instance.
pub struct PartitionsAssigned<'a> {
    pub partitions: &'a [(String, i32)],
}

impl InternalEvent for PartitionsAssigned<'_> {
    fn emit(self, _: &Metrics) {
        tracing::info!(assigned = ?self.partitions, "partitions assigned");
    }
}

/// Partitions were revoked from this instance, which flushed, committed and dropped them; it
/// now owns `owned` stateful tasks (`None`: the partitions were a stateless stage's, the
/// inputs the forwarding stage reads).
pub struct PartitionsRevoked<'a> {
    pub partitions: &'a [(String, i32)],
    pub owned: Option<usize>,
}

impl InternalEvent for PartitionsRevoked<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::info!(revoked = ?self.partitions, "partitions revoked: flushed and committed");
        if let Some(owned) = self.owned {
            metrics.partitions_owned.set(owned as i64);
        }
    }
}

/// How often one kind of client line is logged at most: a broker down makes every librdkafka
/// client say the same thing many times a second, and hundreds of identical lines bury the one
/// that says what to do.
const CLIENT_LINE_PERIOD: Duration = Duration::from_secs(5);

/// When each kind of client line was last logged and how many were held back since. The kinds
/// are librdkafka's facilities at a level and the client errors by kind: a few dozen at most.
static CLIENT_LINES: Mutex<BTreeMap<String, (Instant, u64)>> = Mutex::new(BTreeMap::new());

/// Whether a client line of `kind` is logged now (the first of its kind, then one every
/// [`CLIENT_LINE_PERIOD`]), with how many of its kind were held back since the last.
fn client_line(kind: &str, now: Instant) -> Option<u64> {
    let mut lines = CLIENT_LINES.lock().unwrap_or_else(PoisonError::into_inner);
    match lines.get_mut(kind) {
        Some((last, held)) if now.duration_since(*last) < CLIENT_LINE_PERIOD => {
            *held += 1;
            None
        }
        Some((last, held)) => {
            *last = now;
            Some(std::mem::take(held))
        }
        None => {
            lines.insert(kind.to_owned(), (now, 0));
            Some(0)
        }
    }
}

/// A line librdkafka logs (`facility` at `level`), rate-limited by kind.
pub fn librdkafka_line(level: RDKafkaLogLevel, facility: &str, message: &str) {
    let Some(held) = client_line(&format!("{level:?} {facility}"), Instant::now()) else {
        return;
    };
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", facility, held_back = held, "{message}");
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", facility, held_back = held, "{message}");
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", facility, held_back = held, "{message}");
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", facility, held_back = held, "{message}");
        }
    }
}

/// An error a Kafka client (`client`: consumer, producer, reader) reports, rate-limited by
/// kind.
pub fn client_error(client: &str, error: &KafkaError, reason: &str) {
    if let Some(held) = client_line(&format!("{client} {error}"), Instant::now()) {
        tracing::warn!(%error, reason, held_back = held, "{client}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_of_client_line_is_logged_at_most_once_a_period_counting_the_rest() {
        let t0 = Instant::now();
        let kind = "test a_kind_of_client_line";
        assert_eq!(client_line(kind, t0), Some(0));
        for ms in [1, 100, 4_999] {
            assert_eq!(client_line(kind, t0 + Duration::from_millis(ms)), None);
        }
        // Another kind is not held back by this one.
        assert_eq!(client_line("test another kind", t0), Some(0));
        assert_eq!(client_line(kind, t0 + CLIENT_LINE_PERIOD), Some(3));
        assert_eq!(client_line(kind, t0 + CLIENT_LINE_PERIOD * 2), Some(0));
    }

    #[test]
    fn processed_records_are_counted_by_result_and_code() {
        let m = Metrics::new();
        for outcome in [
            Outcome::Applied,
            Outcome::Rejected(ErrorCode::DuplicateEventId),
            Outcome::Rejected(ErrorCode::InvalidJson),
        ] {
            RecordsProcessed {
                topic: "jury.votes",
                outcome,
                count: 1,
            }
            .emit(&m);
        }
        RecordRevoked {
            topic: "jury.votes",
        }
        .emit(&m);
        let text = m.render();
        for line in [
            r#"jurystream_records_total{result="applied",topic="jury.votes"} 1"#,
            r#"jurystream_records_total{result="duplicate",topic="jury.votes"} 1"#,
            r#"jurystream_records_total{result="revoked",topic="jury.votes"} 1"#,
            r#"jurystream_dead_letters_total{error="invalid_json",topic="jury.votes"} 1"#,
            r#"jurystream_dead_letters_total{error="duplicate_event_id",topic="jury.votes"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn commits_and_epochs_are_counted() {
        let m = Metrics::new();
        OffsetsCommitted { result: Ok(()) }.emit(&m);
        let error = KafkaError::Canceled;
        OffsetsCommitted {
            result: Err(&error),
        }
        .emit(&m);
        EpochCommitted { seconds: 0.5 }.emit(&m);
        let text = m.render();
        assert!(
            text.contains(r#"jurystream_commits_total{result="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"jurystream_commits_total{result="error"} 1"#),
            "{text}"
        );
        assert!(text.contains("jurystream_commit_cycles_total 1"), "{text}");
    }
}
