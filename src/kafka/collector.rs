//! The record collector: produces the engine's outputs and the changelog, and counts what the
//! broker acknowledges per epoch (see [`super::epoch`]).
//!
//! Every record carries a [`Tag`] as its delivery opaque: the destination it counts under, the
//! event time its latency is measured from, and the epoch it belongs to. Delivery reports come
//! back on the processing thread (it polls the producer), so the counters need no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;

use super::ServiceError;
use super::clients;
use super::repartition::Refused;
use super::stage::Stage;
use crate::config::Config;
use crate::engine::output::{Counted, Output, OutputTopic, OutputValue};
use crate::telemetry::events::{
    self, AlertPublished, DeliveryFailed, InternalEvent, OutputRefused, WeightsFellBack,
};
use crate::telemetry::metrics::Metrics;

/// Epochs whose acknowledgements [`Delivery`] counts, in a ring indexed by epoch: more than can
/// be live at once (`super::core::MAX_EPOCHS_IN_FLIGHT` sealed, checked there, and the one
/// being filled), so no two live epochs share a counter.
pub(super) const ACKED_EPOCHS: usize = 64;

/// Where a produced record goes: an output topic, the state changelog, or the repartition
/// topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Destination {
    Output(OutputTopic),
    State,
    Repartition,
    Instances,
}

impl Destination {
    /// Every destination, in the order of [`Destination::index`].
    fn all() -> impl Iterator<Item = Destination> {
        OutputTopic::ALL
            .into_iter()
            .map(Destination::Output)
            .chain([
                Destination::State,
                Destination::Repartition,
                Destination::Instances,
            ])
    }

    /// Its position among [`Destination::all`].
    fn index(self) -> usize {
        match self {
            Destination::Output(t) => t as usize,
            Destination::State => OutputTopic::ALL.len(),
            Destination::Repartition => OutputTopic::ALL.len() + 1,
            Destination::Instances => OutputTopic::ALL.len() + 2,
        }
    }

    /// Its metric label.
    fn label(self) -> &'static str {
        match self {
            Destination::Output(t) => t.label(),
            Destination::State => "state",
            Destination::Repartition => "repartition",
            Destination::Instances => "instances",
        }
    }
}

/// Which output a delivery report is for, and the times its latencies run from.
pub(super) struct Tag {
    pub destination: Destination,
    /// The timestamp of the input record that caused it (wall-clock milliseconds), when it was
    /// published while that record was processed.
    pub since_ms: Option<i64>,
    /// A score's event time, for the event-time lag.
    pub event_ms: Option<i64>,
    /// The epoch the record belongs to (see [`Epoch`]).
    pub epoch: u64,
}

/// Whether `e` refuses one record for good (too large, invalid, against the topic's policy):
/// producing it again would fail again. An output refused so is counted and logged, and its
/// epoch goes on without it, so one record can never wedge the service; a changelog record
/// refused so still stops it, because the state it carries cannot be left out. A forwarded
/// input record is kept within the producer's limit by the forwarding stage (see
/// `super::repartition`), which dead-letters a larger one; one the broker still refuses (a
/// repartition topic with a lower `max.message.bytes`) is replaced by a `forward_refused`
/// dead letter in its epoch ([`Collector::take_refused`]), so its input offset is committed only
/// once that letter is acknowledged.
fn refused_for_good(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::PolicyViolation
        )
    )
}

/// Whether `e`, for a record bound for `destination`, is an output (or a forwarded input
/// record) refused for good (see [`refused_for_good`]).
fn output_refused(destination: Destination, e: &KafkaError) -> bool {
    destination != Destination::State && refused_for_good(e)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Delivery reports: acknowledged outputs, latency, and failures (which stop the service before
/// anything is committed).
pub(super) struct Delivery {
    metrics: Arc<Metrics>,
    /// Per destination: records acknowledged, event-to-publish latency. Resolved once: a
    /// labelled lookup per delivery report cost more than producing the record.
    per_destination: Vec<(prometheus::IntCounter, prometheus::Histogram)>,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
    /// Acknowledged records per epoch, at `epoch % ACKED_EPOCHS`; reset when the epoch is
    /// committed. Counters, not a locked map: there is a report per produced record, and with
    /// 100,000 projects nearly a record per event.
    acked: [AtomicU64; ACKED_EPOCHS],
    /// Delivery reports served so far, acknowledged or failed.
    reports: AtomicU64,
    /// Produce requests retried as of the last statistics.
    retries: AtomicU64,
    /// Forwards refused for good, waiting to be replaced by their dead letters. Each still
    /// counts as unacknowledged in its epoch until then.
    refused: Mutex<Vec<Refused>>,
}

impl ClientContext for Delivery {
    fn stats(&self, stats: Statistics) {
        // Each stage has a producer: each adds what it retried since its last statistics.
        let retries: u64 = stats.brokers.values().map(|b| b.txretries).sum();
        let before = self.retries.swap(retries, Ordering::Relaxed);
        let more = i64::try_from(retries.saturating_sub(before)).unwrap_or(i64::MAX);
        self.metrics.producer_retries.add(more);
    }
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        events::librdkafka_line(level, facility, message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        events::client_error("producer", &error, reason);
    }
}

impl Delivery {
    /// Keeps a forward refused for good until [`Collector::take_refused`] replaces it.
    fn refuse(&self, refused: Refused) {
        if let Ok(mut all) = self.refused.lock() {
            all.push(refused);
        }
    }

    /// The acknowledgement counter of `epoch` (see [`ACKED_EPOCHS`]).
    fn acked_count(&self, epoch: u64) -> &AtomicU64 {
        &self.acked[(epoch % ACKED_EPOCHS as u64) as usize]
    }
}

impl ProducerContext for Delivery {
    type DeliveryOpaque = Box<Tag>;

    fn delivery(&self, result: &DeliveryResult<'_>, tag: Box<Tag>) {
        self.reports.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(_) => {
                self.acked_count(tag.epoch).fetch_add(1, Ordering::Relaxed);
                if let Some((outputs, latency)) = self.per_destination.get(tag.destination.index())
                {
                    outputs.inc();
                    // The clock is read only for an output that has a latency to measure: most
                    // reports are of forwards and changelog records.
                    if tag.since_ms.is_some() || tag.event_ms.is_some() {
                        let now = now_ms();
                        let seconds = |since: i64| (now - since).max(0) as f64 / 1000.0;
                        if let Some(ms) = tag.since_ms {
                            latency.observe(seconds(ms));
                        }
                        if let Some(ms) = tag.event_ms {
                            self.metrics.event_time_lag.observe(seconds(ms));
                        }
                    }
                }
            }
            Err((e, msg)) if tag.destination == Destination::Repartition && refused_for_good(e) => {
                self.refuse(Refused::of(tag.epoch, msg.key(), msg.payload(), e));
            }
            Err((e, _)) if output_refused(tag.destination, e) => {
                // Settled: the epoch waits for no report of it any more.
                self.acked_count(tag.epoch).fetch_add(1, Ordering::Relaxed);
                OutputRefused {
                    topic: tag.destination.label(),
                    error: e,
                }
                .emit(&self.metrics);
            }
            Err((e, _)) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                DeliveryFailed {
                    topic: tag.destination.label(),
                    error: e,
                }
                .emit(&self.metrics);
                if let Ok(mut last) = self.last_failure.lock() {
                    *last = Some(e.to_string());
                }
            }
        }
    }
}

/// The producer of every output and changelog record, and the epoch it fills.
pub(super) struct Collector {
    pub producer: BaseProducer<Delivery>,
    metrics: Arc<Metrics>,
    /// The epoch being filled, and how many records it has sent.
    pub epoch: u64,
    pub epoch_outputs: u64,
    /// Score records are written here, one after the other (the producer copies each).
    buffer: Vec<u8>,
}

impl Collector {
    pub fn new(
        config: &Config,
        stage: Stage,
        metrics: &Arc<Metrics>,
    ) -> Result<Collector, ServiceError> {
        let producer = clients::producer_config(config, stage)?.create_with_context(Delivery {
            metrics: Arc::clone(metrics),
            per_destination: Destination::all()
                .map(|d| {
                    (
                        metrics.outputs.with_label_values(&[d.label()]),
                        metrics.publish_latency.with_label_values(&[d.label()]),
                    )
                })
                .collect(),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            acked: std::array::from_fn(|_| AtomicU64::new(0)),
            reports: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            refused: Mutex::new(Vec::new()),
        })?;
        Ok(Collector {
            producer,
            metrics: Arc::clone(metrics),
            epoch: 0,
            epoch_outputs: 0,
            buffer: Vec::new(),
        })
    }

    /// Produces one record, waiting for queue space if the local queue is full. `Ok(false)`: an
    /// output the client refused for good before queueing it (see [`refused_for_good`]),
    /// counted and logged; no delivery report will come for it. A forward refused so is
    /// `Ok(true)`: it waits, like one the broker refused, for its dead letter.
    pub fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        (key, payload): (Option<&[u8]>, Option<&[u8]>),
        tag: Tag,
    ) -> Result<bool, ServiceError> {
        let destination = tag.destination;
        let mut record = BaseRecord::<[u8], [u8], Box<Tag>>::with_opaque_to(topic, Box::new(tag));
        record.partition = partition;
        record.key = key;
        record.payload = payload;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(true),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    self.producer.poll(Duration::from_millis(10));
                    record = r;
                }
                Err((e, r)) if destination == Destination::Repartition && refused_for_good(&e) => {
                    let epoch = r.delivery_opaque.epoch;
                    let refused = Refused::of(epoch, r.key, r.payload, &e);
                    self.producer.context().refuse(refused);
                    return Ok(true);
                }
                Err((e, _)) if output_refused(destination, &e) => {
                    OutputRefused {
                        topic: destination.label(),
                        error: &e,
                    }
                    .emit(&self.metrics);
                    return Ok(false);
                }
                Err((e, _)) => return Err(ServiceError::Delivery(e.to_string())),
            }
        }
    }

    /// Produces `out` to `topic`, its configured name, in the current epoch; `since_ms` is when
    /// the service first read the input record that caused it, if published while that record
    /// was processed: not the record's own timestamp, as reading a topic from an old offset, or
    /// a backfill, would count the data's age as the service's latency.
    pub fn publish(
        &mut self,
        topic: &str,
        out: &Output,
        since_ms: Option<i64>,
    ) -> Result<(), ServiceError> {
        let event_ms = match &out.value {
            OutputValue::Score(v) => Some(v.last_event_at.epoch_millis()),
            OutputValue::Json(_) => None,
        };
        match out.counted {
            Some(Counted::Alert(scope, kind)) => AlertPublished { scope, kind }.emit(&self.metrics),
            Some(Counted::WeightsFallback) => WeightsFellBack.emit(&self.metrics),
            None => {}
        }
        let mut buffer = std::mem::take(&mut self.buffer);
        let sent = self.send(
            topic,
            None,
            (
                out.key.as_deref().map(str::as_bytes),
                Some(out.value_bytes(&mut buffer)),
            ),
            Tag {
                destination: Destination::Output(out.topic),
                since_ms,
                event_ms,
                epoch: self.epoch,
            },
        );
        self.buffer = buffer;
        if sent? {
            self.epoch_outputs += 1;
        }
        Ok(())
    }

    /// Produces a forwarded input record to partition `partition` of the repartition topic
    /// `topic`, with the key that names its origin (see `super::repartition::ForwardKey`), in
    /// the current epoch: the epoch's input offsets are committed only once it is acknowledged.
    pub fn forward(
        &mut self,
        (topic, partition): (&str, i32),
        key: &[u8],
        payload: &[u8],
    ) -> Result<(), ServiceError> {
        self.send_in_epoch(
            (topic, Some(partition)),
            (Some(key), Some(payload)),
            Destination::Repartition,
        )
    }

    /// Notes a forward as refused for good by the broker with `error` without producing it (the
    /// delivery report a broker would send, for fault injection): it counts in the current
    /// epoch until its dead letter stands in for it.
    pub fn refuse_forward(&mut self, key: &[u8], payload: &[u8], error: &KafkaError) {
        let refused = Refused::of(self.epoch, Some(key), Some(payload), error);
        self.producer.context().refuse(refused);
        self.epoch_outputs += 1;
    }

    /// Announces on `topic` (`<group_id>-instances`) that this instance (`instance`, unique
    /// per process), reachable at `url`, owns repartition-topic partition `partition`. It is
    /// an output of the current epoch.
    pub fn announce(
        &mut self,
        topic: &str,
        partition: i32,
        (url, instance): (&str, &str),
    ) -> Result<(), ServiceError> {
        let key = partition.to_string();
        let value = serde_json::json!({ "url": url, "instance": instance }).to_string();
        self.send_in_epoch(
            (topic, None),
            (Some(key.as_bytes()), Some(value.as_bytes())),
            Destination::Instances,
        )
    }

    /// Produces a record that carries no event time as an output of the current epoch.
    fn send_in_epoch(
        &mut self,
        (topic, partition): (&str, Option<i32>),
        record: (Option<&[u8]>, Option<&[u8]>),
        destination: Destination,
    ) -> Result<(), ServiceError> {
        let tag = Tag {
            destination,
            since_ms: None,
            event_ms: None,
            epoch: self.epoch,
        };
        // Refused at once: counted and logged by `send`, and no report will come.
        if self.send(topic, partition, record, tag)? {
            self.epoch_outputs += 1;
        }
        Ok(())
    }

    /// Serves every delivery report that has arrived. A zero-timeout poll serves at most one
    /// report event (one produce response): polling once per pass let acknowledgements pile up
    /// in the queue, and an idle service took seconds to commit what the broker had long
    /// acknowledged.
    pub fn serve_delivery_reports(&self) {
        let reports = &self.producer.context().reports;
        loop {
            let before = reports.load(Ordering::Relaxed);
            self.producer.poll(Duration::ZERO);
            if reports.load(Ordering::Relaxed) == before {
                return;
            }
        }
    }

    /// Fails if the producer reported an undeliverable record: nothing after it may be committed.
    pub fn check_delivery(&self) -> Result<(), ServiceError> {
        let ctx = self.producer.context();
        if ctx.failures.load(Ordering::Relaxed) > 0 {
            let last = ctx
                .last_failure
                .lock()
                .ok()
                .and_then(|l| l.clone())
                .unwrap_or_default();
            return Err(ServiceError::Delivery(last));
        }
        Ok(())
    }

    /// How many of `epoch`'s records the broker has acknowledged.
    pub fn acked(&self, epoch: u64) -> u64 {
        self.producer
            .context()
            .acked_count(epoch)
            .load(Ordering::Relaxed)
    }

    /// The forwards refused for good since the last call: each is still unacknowledged in its
    /// epoch until [`Collector::settle`] is called for it.
    pub fn take_refused(&self) -> Vec<Refused> {
        self.producer
            .context()
            .refused
            .lock()
            .map(|mut all| std::mem::take(&mut *all))
            .unwrap_or_default()
    }

    /// Counts one record of `epoch` as settled without an acknowledgement: a refused forward
    /// whose dead letter now stands in for it.
    pub fn settle(&self, epoch: u64) {
        self.producer
            .context()
            .acked_count(epoch)
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Frees `epoch`'s acknowledgement counter for a later epoch once it is committed.
    pub fn forget(&self, epoch: u64) {
        self.producer
            .context()
            .acked_count(epoch)
            .store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_outputs_refused_for_good_are_dropped() {
        let output = Destination::Output(OutputTopic::Consensus);
        let too_large = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let timed_out = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert!(output_refused(output, &too_large));
        assert!(output_refused(Destination::Repartition, &too_large));
        assert!(!output_refused(Destination::State, &too_large));
        assert!(!output_refused(output, &timed_out));
        assert!(!output_refused(
            output,
            &KafkaError::MessageProduction(RDKafkaErrorCode::BrokerTransportFailure)
        ));
    }
}
