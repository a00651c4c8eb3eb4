//! The service's internal events, one type each: what happened, logged and counted in one place
//! (Vector's internal events). The runtime emits an event where it happens; how it shows in the
//! logs and which metrics it moves is decided here, so a newcomer finds a log line's metric, and a
//! metric's log line, side by side.
//!
//! Per-record outcomes are counted, never logged: at hundreds of thousands of records a second a
//! log line each would cost more than the record.

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

/// A consensus was published with the configured judge weights, as the learned ones of its
/// judges were all zero.
pub struct WeightsFellBack;

impl InternalEvent for WeightsFellBack {
    fn emit(self, metrics: &Metrics) {
        metrics.weights_fallbacks.inc();
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

/// An epoch's input offsets were committed (or the commit failed: the changelog holds them, so
/// a restart skips the work instead of repeating it, and the next commit supersedes this one).
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
/// now owns `owned`.
pub struct PartitionsRevoked<'a> {
    pub partitions: &'a [(String, i32)],
    pub owned: usize,
}

impl InternalEvent for PartitionsRevoked<'_> {
    fn emit(self, metrics: &Metrics) {
        tracing::info!(revoked = ?self.partitions, "partitions revoked: flushed and committed");
        metrics.partitions_owned.set(self.owned as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
