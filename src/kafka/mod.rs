//! The Kafka runtime: consumes the inputs in one consumer group, drives the engine, publishes the
//! outputs, keeps state durable in the changelog, and commits only what is safely published.
//!
//! Work proceeds in **epochs** of at most `kafka.commit_interval_ms`, ended early once the input
//! is quiet (see `Clocks`):
//! 1. records are processed as they arrive; outputs are produced at once (scores coalesced per
//!    project within `output.scores_coalesce_ms`, the held ones published on a tick of that
//!    interval);
//! 2. at the end of an epoch the remaining scores are produced, and the epoch waits (while the
//!    next one fills) until the broker has acknowledged every output;
//! 3. then the changed state of each partition, with the last input offset it includes, is
//!    written to the changelog and acknowledged;
//! 4. only then are the input offsets committed.
//!
//! After a crash the consumer resumes at the last commit; a partition's state is restored from
//! the changelog the first time one of its records arrives, and records at or below the offset
//! the changelog holds are skipped, so state changes exactly once while outputs are published at
//! least once (a re-published output is identical). A partition taken away by a rebalance is
//! flushed, committed and dropped inside the revoke callback, before another instance owns it.
//!
//! Two threads share the work. The **polling thread** reads the group's records in batches
//! (from a queue of its own, see `queue`), validates vote batches (parsing is a third of a
//! record's cost) and destroys the messages of applied batches; the **processing thread**
//! applies them in order, prefetching a few records ahead (see [`crate::prefetch`]), produces,
//! seals, commits and serves the reputation table.
//! The rebalance callback runs on the polling thread and takes the processing thread's lock, so
//! state never changes while a partition is handed over. Records polled before their partition
//! was revoked and not applied yet are dropped: their offsets were never committed, so the next
//! owner reads them.

pub mod clients;
mod queue;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::changelog::{self, ChangelogError, Restorer, Unit};
use crate::config::Config;
use crate::engine::output::{Output, OutputTopic, OutputValue};
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, IdMap, InputTopic, Outcome, PartitionState, PreparedVotes, Record};
use crate::http::Health;
use crate::metrics::Metrics;
use crate::prefetch;
use queue::{Consumed, Fetched, ForwardTo};

/// Sealed epochs allowed in flight before processing waits for acknowledgements.
const MAX_EPOCHS_IN_FLIGHT: usize = 50;

/// Epochs whose acknowledgements [`Delivery`] counts, in a ring indexed by epoch: more than can
/// be live at once (the sealed ones, at most one past [`MAX_EPOCHS_IN_FLIGHT`] before processing
/// waits, and the one being filled), so no two live epochs share a counter.
const ACKED_EPOCHS: usize = 64;
const _: () = assert!(ACKED_EPOCHS > MAX_EPOCHS_IN_FLIGHT + 2);

/// Records per batch handed from the polling thread to the processing thread, which applies a
/// batch back to back before its periodic work (sealing, acknowledgements, the reputation table,
/// clocks) runs again: doing that work per record cost more than processing the record, and a
/// channel send per record would cost as much.
const PASS_RECORDS: usize = 512;

/// Changelog buffers kept for reuse: an epoch takes one when it is sealed and gives it back
/// once its changelog is sent, so in steady state one or two circulate.
const SPARE_RECORD_BUFFERS: usize = 2;

/// How long the polling thread waits for a record before it serves the consumer's events again
/// (a rebalance waits at most this long while no records come).
const FETCHED_WAIT: Duration = Duration::from_millis(10);

/// How many records ahead of the one it applies the processing thread prefetches state (see
/// [`Engine::prefetch`]): a record takes about a microsecond to apply, several times a cache
/// miss, so a few records ahead is early enough, and late enough that the line is still there.
const PREFETCH_AHEAD: usize = 4;

/// Batches of up to [`PASS_RECORDS`] the polling thread may have waiting for the processing
/// thread (32,768 records, ~6 MB of ~200-byte records, ~50 ms of processing). With 8 the
/// processing thread ran dry whenever the polling thread was descheduled or waiting for a fetch
/// (on two cores, often: with 10,000 projects it slept a quarter of the time). A deeper queue
/// costs no handover time: queued records of a revoked partition are dropped unapplied (see
/// [`Polled::generation`]), and on shutdown the queue is dropped uncommitted.
const BATCHES_IN_FLIGHT: usize = 64;

/// Queued batches from which on the polling thread validates what it polls. Below it the
/// processing thread is about to run dry, so the polling thread is the slower of the two (with one
/// busy project it is: reading records one `poll` call at a time, then parsing them). It then
/// hands records over unparsed, and the processing thread parses them itself
/// ([`Engine::process`], the same result as preparing and applying), which shares the parsing
/// between the threads in whatever proportion keeps both busy. When processing is the slower
/// (many projects) the queue stays deep and the polling thread parses everything, as before.
const PREPARE_FROM_QUEUED: usize = 2;

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("topics: {0}")]
    Topic(String),
    #[error("delivery failed, nothing committed: {0}")]
    Delivery(String),
    #[error("restoring {unit:?}: {source}")]
    Restore {
        unit: Unit,
        #[source]
        source: ChangelogError,
    },
    #[error("restoring {0:?}: the changelog did not reach its end in time")]
    RestoreTimeout(Unit),
    #[error("shutdown did not finish within {0} s")]
    ShutdownTimeout(u64),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// librdkafka could not give the queue of these assigned partitions, so their records would
    /// not reach the batch queue (see `queue`); the service stops rather than miss them.
    #[error("could not forward the records of assigned partitions {0:?}")]
    Unforwarded(Vec<(String, i32)>),
}

/// The metric label of every topic the service produces to, indexed by [`Tag::destination`].
const DESTINATIONS: [&str; 6] = [
    "scores",
    "consensus",
    "bias_alerts",
    "leaderboard",
    "dead_letters",
    "state",
];
const STATE_DESTINATION: usize = 5;

fn destination(topic: OutputTopic) -> usize {
    match topic {
        OutputTopic::Scores => 0,
        OutputTopic::Consensus => 1,
        OutputTopic::BiasAlerts => 2,
        OutputTopic::Leaderboard => 3,
        OutputTopic::DeadLetters => 4,
    }
}

/// Which output a delivery report is for, and the event time it carries.
struct Tag {
    /// Index into [`DESTINATIONS`].
    destination: usize,
    event_ms: Option<i64>,
    /// The epoch the record belongs to (see [`Epoch`]).
    epoch: u64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Delivery reports: acknowledged outputs, latency, and failures (which stop the service before
/// anything is committed).
struct Delivery {
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
}

impl ClientContext for Delivery {
    fn stats(&self, stats: Statistics) {
        let retries: u64 = stats.brokers.values().map(|b| b.txretries).sum();
        self.metrics.producer_retries.set(retries as i64);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "producer");
    }
}

impl Delivery {
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
                if let Some((outputs, latency)) = self.per_destination.get(tag.destination) {
                    outputs.inc();
                    if let Some(ms) = tag.event_ms {
                        latency.observe((now_ms() - ms).max(0) as f64 / 1000.0);
                    }
                }
            }
            Err((e, _)) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.metrics.producer_errors.inc();
                let topic = DESTINATIONS.get(tag.destination).copied().unwrap_or("?");
                tracing::error!(error = %e, topic, "delivery failed");
                if let Ok(mut last) = self.last_failure.lock() {
                    *last = Some(e.to_string());
                }
            }
        }
    }
}

/// Where to cut an epoch's changelog for `JURYSTREAM_CRASH_MID_CHANGELOG`: in the middle of the
/// first flush of a `tag` unit (`v` votes, `j` judge scores) that has at least four records
/// (state records, a judge-scores flush's redo record first, its offset record last), so that
/// the flush is written in part and its offset record is not.
fn flush_cut(records: &changelog::Records, tag: &str) -> Option<usize> {
    let prefix = format!("[\"{tag}\",");
    let mut start = 0;
    for (i, key) in records.iter().map(|r| r.key).enumerate() {
        if !key.ends_with(b"\"offset\"]") {
            continue;
        }
        // The flush of one unit ends with its offset record and starts after the one before.
        let end = i + 1;
        if key.starts_with(prefix.as_bytes()) && end - start >= 4 {
            return Some(start + (end - start) / 2);
        }
        start = end;
    }
    None
}

/// An id for this start of the service, different from every earlier one: it names the
/// changelog's redo records (see [`changelog::Renderer::new`]).
fn run_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// The state of one owned input partition.
struct Owned {
    state: PartitionState,
    /// Records at or below this offset are already in the restored state.
    skip_through: Option<i64>,
    /// The last offset processed (or skipped) and not yet committed.
    pending: Option<i64>,
}

/// Everything the processing loop and the rebalance callback share.
struct Core {
    engine: Engine,
    producer: BaseProducer<Delivery>,
    units: IdMap<(InputTopic, i32), Owned>,
    reputations: ReputationTable,
    /// Renders each epoch's changelog, keeping its working memory.
    renderer: changelog::Renderer,
    /// Changelog buffers of sent epochs, for the next ones (see [`changelog::Records`]).
    spare_records: Vec<changelog::Records>,
    out: Vec<Output>,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
    last_gauges: Instant,
    /// The time at the start of the current pass (one clock read per pass, not per record).
    now: Instant,
    /// When the service started: records carry `now` as milliseconds since, for coalescing.
    started: Instant,
    /// Partitions assigned but not restored yet.
    assigned: Vec<(InputTopic, i32)>,
    /// Revoked partitions and the revocation that took them: a record of one polled before that
    /// revocation (see [`Polled::generation`]) is dropped, not applied.
    fences: IdMap<(InputTopic, i32), u64>,
    /// Set by the environment variable `JURYSTREAM_CRASH_AFTER_CHANGELOG` (tests only).
    crash_after_changelog: bool,
    /// Set by `JURYSTREAM_CRASH_MID_CHANGELOG` (tests only) to `v` or `j`: see [`flush_cut`].
    crash_mid_changelog: Option<String>,
    /// The epoch being filled, and how many outputs it has sent.
    epoch: u64,
    epoch_outputs: u64,
    /// Sealed epochs waiting for acknowledgements, oldest first.
    sealed: std::collections::VecDeque<Epoch>,
    /// Records processed, and their outcomes not yet added to the metrics.
    processed: u64,
    tally: Tally,
}

/// Outcome counts kept locally and added to the Prometheus counters once per pass (up to
/// [`PASS_RECORDS`] records): a labelled counter lookup per record would cost more than parsing
/// some records.
#[derive(Default)]
struct Tally {
    counts: IdMap<(InputTopic, Outcome), u64>,
}

impl Tally {
    fn count(&mut self, topic: InputTopic, outcome: Outcome) {
        *self.counts.entry((topic, outcome)).or_default() += 1;
    }

    fn flush(&mut self, engine: &Engine, metrics: &Metrics) {
        for ((topic, outcome), n) in self.counts.drain() {
            metrics.record_n(engine.input_topic_name(topic), outcome, n);
        }
    }
}

/// The work of one cycle on its way to being committed. Epochs move strictly in order: an
/// epoch's changelog is sent once all its outputs are acknowledged (and every earlier epoch is
/// committed), and its offsets are committed once its changelog is acknowledged. Consumption
/// never waits for this unless too many epochs are in flight.
struct Epoch {
    id: u64,
    outputs: u64,
    changelog: changelog::Records,
    changelog_sent: bool,
    commits: TopicPartitionList,
    sealed_at: Instant,
}

/// Readers poll to the end of partitions, so end-of-partition is expected, not an error.
struct QuietReader;

impl ClientContext for QuietReader {
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF));
        if !eof {
            tracing::warn!(%error, reason, "reader");
        }
    }
}

impl ConsumerContext for QuietReader {}

/// The consumer context: lag from statistics, and the revoke callback.
struct GroupContext {
    core: Arc<Mutex<Core>>,
    metrics: Arc<Metrics>,
    /// The first failure outside the processing thread (see [`GroupContext::fail`]).
    failed: Mutex<Option<ServiceError>>,
    /// Revocations so far.
    generation: AtomicU64,
    /// The queue newly assigned partitions are forwarded to (see [`queue`]).
    forward_to: ForwardTo,
}

impl GroupContext {
    /// Keeps `e` unless a failure is already kept: the processing thread stops with the first
    /// after its pass, committing nothing past it.
    fn fail(&self, e: ServiceError) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert(e);
        }
    }
}

impl ClientContext for GroupContext {
    fn stats(&self, stats: Statistics) {
        for (topic, t) in &stats.topics {
            for (partition, p) in &t.partitions {
                if *partition >= 0 && p.consumer_lag >= 0 {
                    self.metrics
                        .consumer_lag
                        .with_label_values(&[topic, &partition.to_string()])
                        .set(p.consumer_lag);
                }
            }
        }
    }
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "consumer");
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let elements = tpl.elements();
            let unforwarded = self.forward_to.forward(
                consumer,
                elements.iter().map(|e| (e.topic(), e.partition())),
            );
            if !unforwarded.is_empty() {
                self.fail(ServiceError::Unforwarded(unforwarded));
            }
        }
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let mut core = lock(&self.core);
        let revoked: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        tracing::info!(?revoked, "partitions revoked: flushing and committing them");
        if let Err(e) = core.drain(consumer, CommitMode::Sync) {
            tracing::error!(error = %e, "could not finish the cycle before revocation");
            self.fail(e);
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        for (topic, partition) in revoked {
            if let Some(t) = core.engine.input_topic(&topic) {
                let key = (t, partition);
                core.units.remove(&key);
                core.assigned.retain(|k| *k != key);
                core.fences.insert(key, generation);
            }
        }
        core.metrics.partitions_owned.set(core.units.len() as i64);
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut core = lock(&self.core);
            let assigned: Vec<(String, i32)> = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_owned(), e.partition()))
                .collect();
            tracing::info!(?assigned, "partitions assigned");
            for (topic, partition) in assigned {
                if let Some(t) = core.engine.input_topic(&topic) {
                    core.assigned.push((t, partition));
                }
            }
        }
    }
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Core {
    fn config(&self) -> &Config {
        self.engine.config()
    }

    /// Produces one record, waiting for queue space if the local queue is full.
    fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        tag: Tag,
    ) -> Result<(), ServiceError> {
        let mut record = BaseRecord::<[u8], [u8], Box<Tag>>::with_opaque_to(topic, Box::new(tag));
        record.partition = partition;
        record.key = key;
        record.payload = payload;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    self.producer.poll(Duration::from_millis(10));
                    record = r;
                }
                Err((e, _)) => return Err(ServiceError::Delivery(e.to_string())),
            }
        }
    }

    fn publish(&mut self, out: &Output) -> Result<(), ServiceError> {
        let event_ms = match &out.value {
            OutputValue::Score(v) => Some(v.last_event_at.epoch_millis()),
            OutputValue::Json(_) => None,
        };
        if let Some((scope, kind)) = out.alert {
            self.metrics.alerts.with_label_values(&[scope, kind]).inc();
        }
        let value = out.render();
        self.epoch_outputs += 1;
        self.send(
            self.engine.topic_name(out.topic),
            None,
            out.key.as_deref().map(str::as_bytes),
            Some(value.as_bytes()),
            Tag {
                destination: destination(out.topic),
                event_ms,
                epoch: self.epoch,
            },
        )
    }

    /// Processes one input record of an owned partition, restoring its state first if needed.
    fn process(&mut self, polled: &Polled<'_>) -> Result<(), ServiceError> {
        let msg = &polled.msg;
        let topic = polled.topic;
        let key = (topic, polled.partition);
        if !self.units.contains_key(&key) {
            if self
                .fences
                .get(&key)
                .is_some_and(|&revoked| polled.generation < revoked)
            {
                self.metrics
                    .records
                    .with_label_values(&[self.engine.input_topic_name(topic), "revoked"])
                    .inc();
                return Ok(());
            }
            self.assigned.push(key);
            self.restore_assigned()?;
        }
        let Some(unit) = self.units.get_mut(&key) else {
            return Ok(());
        };
        let offset = msg.offset();
        unit.pending = Some(offset);
        if unit.skip_through.is_some_and(|s| offset <= s) {
            self.tally.count(topic, Outcome::Replayed);
            return Ok(());
        }
        let record = Record {
            clock_ms: Some(
                u64::try_from(self.now.duration_since(self.started).as_millis())
                    .unwrap_or(u64::MAX),
            ),
            ..record(msg, self.engine.input_topic_name(topic))
        };
        // Timing every record would cost more than some records take: sample one in 16.
        self.processed += 1;
        let started = self.processed.is_multiple_of(16).then(Instant::now);
        self.out.clear();
        let outcome = match &polled.votes {
            Some(prepared) => self.engine.apply_prepared(
                &mut unit.state,
                &self.reputations,
                &record,
                prepared,
                &mut self.out,
            ),
            None => self
                .engine
                .process(&mut unit.state, &self.reputations, &record, &mut self.out),
        };
        if let Some(started) = started {
            self.metrics
                .processing
                .observe(started.elapsed().as_secs_f64());
        }
        self.tally.count(topic, outcome);
        let outs = std::mem::take(&mut self.out);
        let result = outs.iter().try_for_each(|o| self.publish(o));
        self.out = outs;
        result
    }

    /// Starts loading what applying `polled` will touch: its payload, and its project's state
    /// (see [`Engine::prefetch`]). The message itself was prefetched a step earlier, so reading
    /// where its payload is does not stall.
    fn prefetch(&self, polled: &Polled<'_>) {
        let Some(prepared) = &polled.votes else {
            return;
        };
        if let Some(payload) = polled.msg.payload() {
            prefetch::bytes(payload);
        }
        if let Some(unit) = self.units.get(&(polled.topic, polled.partition)) {
            self.engine.prefetch(&unit.state, prepared);
        }
    }

    /// Applies a `jury.reputations` record to the global table.
    fn reputation(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), ServiceError> {
        let record = reputation_record(msg);
        self.out.clear();
        let mut scratch = PartitionState::default();
        let outcome = self
            .engine
            .process(&mut scratch, &self.reputations, &record, &mut self.out);
        self.metrics.record(msg.topic(), outcome);
        self.metrics.reputations.set(self.reputations.len() as i64);
        let outs = std::mem::take(&mut self.out);
        let result = outs.iter().try_for_each(|o| self.publish(o));
        self.out = outs;
        result
    }

    /// Restores every assigned partition not restored yet, reading all the changelog partitions
    /// they need in one pass (votes and judge-scores partition p share changelog partition p).
    fn restore_assigned(&mut self) -> Result<(), ServiceError> {
        let wanted: Vec<(InputTopic, i32)> = std::mem::take(&mut self.assigned)
            .into_iter()
            .filter(|key| !self.units.contains_key(key))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let cfg = self.config();
        let reader: BaseConsumer<QuietReader> =
            clients::reader_config(cfg, "restore")?.create_with_context(QuietReader)?;
        let mut tpl = TopicPartitionList::new();
        let partitions: std::collections::BTreeSet<i32> = wanted.iter().map(|(_, p)| *p).collect();
        for p in &partitions {
            tpl.add_partition_offset(&cfg.topics.state, *p, Offset::Beginning)?;
        }
        reader.assign(&tpl)?;
        let mut restorers: Vec<Restorer> = wanted
            .iter()
            .map(|(t, p)| {
                Restorer::new(Unit {
                    topic: *t,
                    partition: *p,
                })
            })
            .collect();
        let complete = read_to_end(&reader, partitions.len(), "restore read", |m| {
            for r in restorers
                .iter_mut()
                .filter(|r| r.unit().partition == m.partition())
            {
                r.accept(m.key().unwrap_or_default(), m.payload());
            }
            Ok(())
        })?;
        if !complete {
            return Err(ServiceError::RestoreTimeout(restorers[0].unit()));
        }
        for (restorer, key) in restorers.into_iter().zip(wanted) {
            let unit = restorer.unit();
            let (records, bytes) = (restorer.records, restorer.bytes);
            let (state, offset) = restorer
                .finish()
                .map_err(|source| ServiceError::Restore { unit, source })?;
            self.metrics.restore_records.inc_by(records);
            self.metrics.restore_bytes.inc_by(bytes);
            tracing::info!(?unit, records, bytes, offset, "restored partition state");
            self.units.insert(
                key,
                Owned {
                    state,
                    skip_through: offset,
                    pending: None,
                },
            );
        }
        self.metrics
            .restore_duration
            .observe(started.elapsed().as_secs_f64());
        self.metrics.partitions_owned.set(self.units.len() as i64);
        Ok(())
    }

    /// Serves every delivery report that has arrived. A zero-timeout poll serves at most one
    /// report event (one produce response): polling once per pass let acknowledgements pile up
    /// in the queue, and an idle service took seconds to commit what the broker had long
    /// acknowledged.
    fn serve_delivery_reports(&self) {
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
    fn check_delivery(&self) -> Result<(), ServiceError> {
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

    fn acked(&self, epoch: u64) -> u64 {
        self.producer
            .context()
            .acked_count(epoch)
            .load(Ordering::Relaxed)
    }

    /// The owned partitions, in order (epochs and releases go partition by partition, so what
    /// they produce does not depend on the map's order).
    fn owned_keys(&self) -> Vec<(InputTopic, i32)> {
        let mut keys: Vec<(InputTopic, i32)> = self.units.keys().copied().collect();
        keys.sort();
        keys
    }

    /// Publishes the scores held back by coalescing (see [`crate::engine::Coalescing`]) in the
    /// partitions `keys`, in that order. Runs every `output.scores_coalesce_ms` and when an epoch
    /// is sealed, so a held score waits at most one coalescing interval and is always in the
    /// epoch of the records that caused it.
    fn release_held(&mut self, keys: &[(InputTopic, i32)]) -> Result<(), ServiceError> {
        // Collected into the kept output buffer first (the units are borrowed while they
        // release them).
        let mut held = std::mem::take(&mut self.out);
        held.clear();
        for key in keys {
            if let Some(owned) = self.units.get_mut(key) {
                self.engine.release_held(&mut owned.state, &mut held);
            }
        }
        let released = held.iter().try_for_each(|out| self.publish(out));
        self.out = held;
        released
    }

    /// Adds the outcomes counted since the last call to the metrics.
    fn flush_tally(&mut self) {
        self.tally.flush(&self.engine, &self.metrics);
    }

    /// Whether the current epoch has anything to seal: records processed or outputs sent.
    fn epoch_pending(&self) -> bool {
        self.epoch_outputs > 0 || self.units.values().any(|u| u.pending.is_some())
    }

    /// Ends the current epoch: publishes held scores, renders the changelog of every partition
    /// that processed records (to be sent once the outputs are acknowledged) and notes the
    /// offsets to commit after that.
    fn seal(&mut self) -> Result<(), ServiceError> {
        self.flush_tally();
        let keys = self.owned_keys();
        self.release_held(&keys)?;
        let mut changelog = self.spare_records.pop().unwrap_or_default();
        let mut commits = TopicPartitionList::new();
        for key in keys {
            let Some(owned) = self.units.get_mut(&key) else {
                continue;
            };
            let Some(offset) = owned.pending.take() else {
                continue;
            };
            let unit = Unit {
                topic: key.0,
                partition: key.1,
            };
            let mut changes = owned
                .state
                .journal
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            // Records at or below the restored offset were skipped: the changelog has them.
            let new = owned.skip_through.is_none_or(|s| offset > s);
            self.renderer.render(
                unit,
                &owned.state,
                &changes,
                new.then_some(offset),
                &mut changelog,
            );
            // Hand the journal's allocation back for the next epoch.
            changes.clear();
            if let Some(j) = owned.state.journal.as_mut() {
                *j = changes;
            }
            let topic = self.engine.input_topic_name(key.0);
            commits.add_partition_offset(topic, key.1, Offset::Offset(offset + 1))?;
            self.metrics
                .input_position
                .with_label_values(&[topic, &key.1.to_string()])
                .set(offset + 1);
        }
        if self.epoch_outputs > 0 || commits.count() > 0 {
            self.sealed.push_back(Epoch {
                id: self.epoch,
                outputs: self.epoch_outputs,
                changelog,
                changelog_sent: false,
                commits,
                sealed_at: Instant::now(),
            });
            self.epoch += 1;
            self.epoch_outputs = 0;
        } else {
            // Nothing was processed: the (empty) buffer goes back.
            self.spare_records.push(changelog);
        }
        if self.last_gauges.elapsed() > Duration::from_secs(1) {
            self.update_gauges();
        }
        Ok(())
    }

    /// Moves sealed epochs forward as far as acknowledgements allow: sends the changelog of the
    /// oldest epoch whose outputs are all acknowledged, commits the offsets of the oldest epoch
    /// whose changelog is acknowledged.
    fn advance<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        mode: CommitMode,
    ) -> Result<(), ServiceError> {
        self.serve_delivery_reports();
        self.check_delivery()?;
        while let Some(front) = self.sealed.front() {
            let (id, outputs) = (front.id, front.outputs);
            let acked = self.acked(id);
            if !front.changelog_sent {
                if acked < outputs {
                    break;
                }
                let mut records = std::mem::take(&mut self.sealed[0].changelog);
                let cut = self
                    .crash_mid_changelog
                    .as_deref()
                    .and_then(|tag| flush_cut(&records, tag));
                for (i, r) in records.iter().enumerate() {
                    if cut == Some(i) {
                        // Fault injection for the recovery tests: die with a partition's flush
                        // written in part, its first records acknowledged.
                        let flushed = self.producer.flush(Duration::from_secs(30));
                        tracing::warn!(
                            records = i,
                            ?flushed,
                            "JURYSTREAM_CRASH_MID_CHANGELOG: aborting inside a changelog write"
                        );
                        std::process::abort();
                    }
                    self.send(
                        &self.config().topics.state,
                        Some(r.partition),
                        Some(r.key),
                        r.value,
                        Tag {
                            destination: STATE_DESTINATION,
                            event_ms: None,
                            epoch: id,
                        },
                    )?;
                }
                let sent = records.len() as u64;
                self.metrics.changelog_records.inc_by(sent);
                let front = &mut self.sealed[0];
                front.changelog_sent = true;
                front.outputs += sent;
                // The producer copied the records: the buffer serves a later epoch.
                if self.spare_records.len() < SPARE_RECORD_BUFFERS {
                    records.clear();
                    self.spare_records.push(records);
                }
                continue;
            }
            if acked < outputs {
                break;
            }
            let Some(done) = self.sealed.pop_front() else {
                break;
            };
            if self.crash_after_changelog && done.commits.count() > 0 {
                // Fault injection for the recovery tests: die in the window where the changelog
                // is ahead of the committed offsets.
                tracing::warn!("JURYSTREAM_CRASH_AFTER_CHANGELOG: aborting before the commit");
                std::process::abort();
            }
            if done.commits.count() > 0 {
                match consumer.commit(&done.commits, mode) {
                    Ok(()) => self.metrics.commits.with_label_values(&["ok"]).inc(),
                    Err(e) => {
                        // The changelog holds these offsets: a restart skips the work instead of
                        // repeating it, and the next commit supersedes this one.
                        self.metrics.commits.with_label_values(&["error"]).inc();
                        tracing::warn!(error = %e, "offset commit failed");
                    }
                }
            }
            // Every record of the epoch is acknowledged: its counter serves a later epoch.
            self.producer
                .context()
                .acked_count(id)
                .store(0, Ordering::Relaxed);
            self.metrics.cycles.inc();
            self.metrics
                .cycle_duration
                .observe(done.sealed_at.elapsed().as_secs_f64());
        }
        let stalled = self
            .sealed
            .front()
            .is_some_and(|e| e.sealed_at.elapsed() > Duration::from_secs(5));
        self.health.set_ready(!stalled, &self.metrics);
        Ok(())
    }

    /// Seals the current epoch and waits until every epoch is committed (revocation, shutdown,
    /// or too many epochs in flight). During a broker outage this keeps waiting, not ready.
    fn drain<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        mode: CommitMode,
    ) -> Result<(), ServiceError> {
        self.seal()?;
        let started = Instant::now();
        let limit = Duration::from_secs(self.config().kafka.shutdown_timeout_secs);
        while !self.sealed.is_empty() {
            self.producer.poll(Duration::from_millis(10));
            self.advance(consumer, mode)?;
            if self.stop.load(Ordering::Relaxed) && started.elapsed() > limit {
                return Err(ServiceError::ShutdownTimeout(limit.as_secs()));
            }
        }
        Ok(())
    }

    /// Open sessions, projects, and the bounded project-score view.
    fn update_gauges(&mut self) {
        self.last_gauges = Instant::now();
        let mut open = 0;
        let mut scores: Vec<(&str, u64, f64)> = Vec::new();
        for owned in self.units.values() {
            open += owned.state.sessions.open_sessions();
            scores.extend(
                owned
                    .state
                    .projects
                    .iter()
                    .map(|(p, v)| (p.as_str(), v.score.evaluations, v.score.score)),
            );
        }
        self.metrics.open_sessions.set(open as i64);
        self.metrics.projects.set(scores.len() as i64);
        let m = &self.config().metrics;
        let shown: Vec<(&str, u64, f64)> = if m.score_projects.is_empty() {
            // The top N by evaluations (ties by id), in linear time: with many projects a full
            // sort held up processing for milliseconds once a second.
            let by_rank =
                |a: &(&str, u64, f64), b: &(&str, u64, f64)| b.1.cmp(&a.1).then(a.0.cmp(b.0));
            if m.score_top_n < scores.len() {
                scores.select_nth_unstable_by(m.score_top_n, by_rank);
                scores.truncate(m.score_top_n);
            }
            scores
        } else {
            scores
                .into_iter()
                .filter(|(p, _, _)| m.score_projects.iter().any(|x| x == p))
                .collect()
        };
        self.metrics.project_score.reset();
        for (p, _, s) in shown {
            self.metrics.project_score.with_label_values(&[p]).set(s);
        }
    }
}

/// Reads a reader's assigned partitions (`partitions` of them) from where they are to their ends,
/// handing every record to `accept`. `Ok(false)` if they did not all reach their end within five
/// minutes.
fn read_to_end(
    reader: &BaseConsumer<QuietReader>,
    partitions: usize,
    what: &str,
    mut accept: impl FnMut(&BorrowedMessage<'_>) -> Result<(), ServiceError>,
) -> Result<bool, ServiceError> {
    let mut at_end = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while at_end.len() < partitions {
        if Instant::now() > deadline {
            return Ok(false);
        }
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => accept(&m)?,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => tracing::warn!(error = %e, "{what}"),
            None => {}
        }
    }
    Ok(true)
}

/// Reads the whole reputation table (every partition to its end) before processing starts, like
/// a Kafka Streams GlobalKTable; afterwards the same consumer keeps the table current.
fn bootstrap_reputations(
    core: &Arc<Mutex<Core>>,
    reader: &BaseConsumer<QuietReader>,
    cfg: &Config,
) -> Result<(), ServiceError> {
    let partitions = clients::assign_from_beginning(reader, &cfg.topics.reputations)?;
    let complete = read_to_end(reader, partitions, "reputation bootstrap", |m| {
        lock(core).reputation(m)
    })?;
    if !complete {
        // As before: start with what was read; the same consumer keeps reading the rest.
        tracing::warn!("the reputation table did not reach its end in time");
    }
    tracing::info!(
        entries = lock(core).reputations.len(),
        "reputation table loaded"
    );
    Ok(())
}

/// Runs the service until `stop` is set, then finishes the cycle, commits and returns.
pub fn run(
    config: Config,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
) -> Result<(), ServiceError> {
    clients::ensure_topics(&config)?;
    let producer: BaseProducer<Delivery> =
        clients::producer_config(&config)?.create_with_context(Delivery {
            metrics: Arc::clone(&metrics),
            per_destination: DESTINATIONS
                .iter()
                .map(|d| {
                    (
                        metrics.outputs.with_label_values(&[d]),
                        metrics.event_to_publish.with_label_values(&[d]),
                    )
                })
                .collect(),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            acked: std::array::from_fn(|_| AtomicU64::new(0)),
            reports: AtomicU64::new(0),
        })?;
    // The polling thread validates with its own copy of the (stateless) engine.
    let engine = Engine::new(config.clone());
    let core = Arc::new(Mutex::new(Core {
        engine: engine.clone(),
        producer,
        units: IdMap::default(),
        reputations: ReputationTable::default(),
        renderer: changelog::Renderer::new(run_id(), config.limits.max_message_bytes / 2),
        spare_records: Vec::new(),
        out: Vec::new(),
        metrics: Arc::clone(&metrics),
        health: Arc::clone(&health),
        stop: Arc::clone(&stop),
        last_gauges: Instant::now(),
        now: Instant::now(),
        started: Instant::now(),
        assigned: Vec::new(),
        fences: IdMap::default(),
        crash_after_changelog: std::env::var_os("JURYSTREAM_CRASH_AFTER_CHANGELOG").is_some(),
        crash_mid_changelog: std::env::var("JURYSTREAM_CRASH_MID_CHANGELOG").ok(),
        epoch: 0,
        epoch_outputs: 0,
        sealed: std::collections::VecDeque::new(),
        processed: 0,
        tally: Tally::default(),
    }));
    let reputations: BaseConsumer<QuietReader> =
        clients::reader_config(&config, "reputations")?.create_with_context(QuietReader)?;
    bootstrap_reputations(&core, &reputations, &config)?;
    let consumer: BaseConsumer<GroupContext> = clients::consumer_config(&config)?
        .create_with_context(GroupContext {
            core: Arc::clone(&core),
            metrics: Arc::clone(&metrics),
            failed: Mutex::new(None),
            generation: AtomicU64::new(0),
            forward_to: ForwardTo::default(),
        })?;
    let fetched = Fetched::new(&consumer, &consumer.context().forward_to)?;
    consumer.subscribe(&[&config.topics.votes, &config.topics.judge_scores])?;
    health.set_ready(true, &metrics);
    metrics.up.set(1.0);
    tracing::info!(group = %config.kafka.group_id, "consuming");
    let halt = AtomicBool::new(false);
    let queued = AtomicUsize::new(0);
    let result = std::thread::scope(|s| {
        let (sender, receiver) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        // Applied batches go back to be emptied and filled again. A new one each pass (512
        // records of ~280 bytes) kept coming from fresh pages: their zeroing was 7% of the
        // polling thread's samples with 10,000 projects, and a third of the service's page
        // faults. Emptying them destroys their messages, glibc memory librdkafka's broker
        // thread allocated: ~10% of the processing thread's samples with 10,000 projects, where
        // processing is the slower thread and polling waits for queue space.
        let (recycle, recycled) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
        let (consumer, fetched, engine, halt, health, metrics, queued) = (
            &consumer, &fetched, &engine, &halt, &*health, &*metrics, &queued,
        );
        let poller = std::thread::Builder::new()
            .name("jurystream-poll".to_owned())
            .spawn_scoped(s, move || {
                poll_records(
                    (consumer, fetched),
                    engine,
                    (&sender, &recycled, queued),
                    halt,
                    health,
                    metrics,
                )
            })?;
        let result = process_records(
            &core,
            consumer,
            (receiver, recycle, queued),
            &reputations,
            &stop,
        );
        halt.store(true, Ordering::Relaxed);
        if let Err(panic) = poller.join() {
            std::panic::resume_unwind(panic);
        }
        result
    });
    let result = result.and_then(|()| {
        tracing::info!("stopping: finishing the cycle");
        lock(&core).drain(&consumer, CommitMode::Sync)
    });
    health.set_ready(false, &metrics);
    metrics.up.set(0.0);
    consumer.unsubscribe();
    result
}

/// A record on its way from the polling thread to the processing thread.
struct Polled<'c> {
    msg: Consumed<'c>,
    topic: InputTopic,
    /// The message's partition, read while the polling thread has the message in cache.
    partition: i32,
    /// Revocations before it was polled.
    generation: u64,
    /// The validated batch, for a valid vote record.
    votes: Option<PreparedVotes>,
}

/// The polling thread: reads the group's records in batches and validates vote batches, so that
/// the processing thread only applies them (unless it is waiting for work, see
/// [`PREPARE_FROM_QUEUED`]). `queued` counts the batches sent and not yet received; `recycled`
/// gives back applied batches, emptied here (their messages destroyed) and filled again.
/// Returns when `halt` is set or the processing thread is gone. Rebalance callbacks run here,
/// inside `poll`.
fn poll_records<'c>(
    (consumer, fetched): (&BaseConsumer<GroupContext>, &'c Fetched<'_>),
    engine: &Engine,
    (batches, recycled, queued): (
        &SyncSender<Vec<Polled<'c>>>,
        &Receiver<Vec<Polled<'c>>>,
        &AtomicUsize,
    ),
    halt: &AtomicBool,
    health: &Health,
    metrics: &Metrics,
) {
    let mut consumed = Vec::with_capacity(PASS_RECORDS);
    while !halt.load(Ordering::Relaxed) {
        // Rebalances (their callbacks run here), commit results and client errors, one per pass
        // (a pass takes at most `FETCHED_WAIT` when no records come); the records themselves
        // come from `fetched`. A record here belongs to a partition that was not forwarded: the
        // service stops without committing it, to read it again after a restart.
        match consumer.poll(Duration::ZERO) {
            Some(Ok(msg)) => {
                let partition = (msg.topic().to_owned(), msg.partition());
                consumer
                    .context()
                    .fail(ServiceError::Unforwarded(vec![partition]));
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "consumer");
                health.set_ready(false, metrics);
            }
            None => {}
        }
        let prepare = queued.load(Ordering::Relaxed) >= PREPARE_FROM_QUEUED;
        fetched.batch(FETCHED_WAIT, PASS_RECORDS, &mut consumed);
        // Read after the batch: a revocation (inside `poll` above) came before these records.
        let generation = consumer.context().generation.load(Ordering::Acquire);
        let mut batch = recycled.try_recv().map_or_else(
            |_| Vec::with_capacity(PASS_RECORDS),
            |mut done| {
                done.clear();
                done
            },
        );
        for msg in consumed.drain(..) {
            if let Some(e) = msg.error() {
                tracing::warn!(error = %e, "consumer");
                health.set_ready(false, metrics);
                continue;
            }
            let Some(topic) = engine.input_topic(msg.topic()) else {
                continue;
            };
            let votes = prepare
                .then(|| engine.prepare_votes(&record(&msg, engine.input_topic_name(topic))))
                .flatten();
            batch.push(Polled {
                partition: msg.partition(),
                msg,
                topic,
                generation,
                votes,
            });
        }
        if batch.is_empty() {
            continue;
        }
        // Counted before it is sent, so the receiver's decrement never comes first.
        queued.fetch_add(1, Ordering::Relaxed);
        if batches.send(batch).is_err() {
            return;
        }
    }
}

/// The processing thread's periods.
struct Clocks {
    /// `kafka.commit_interval_ms`: an epoch ends (is sealed) at the latest this long after the
    /// last one.
    cycle: Duration,
    /// `output.scores_coalesce_ms` (the cycle when coalescing is off): held scores are published
    /// this often, so coalescing delays a score by at most this much whatever the cycle.
    coalesce: Duration,
    /// An epoch also ends once no record has arrived for two fetch waits (the consumer has
    /// caught up), so that commits follow a quiet input at once instead of a cycle later.
    idle: Duration,
}

impl Clocks {
    fn of(config: &Config) -> Clocks {
        let ms = Duration::from_millis;
        let cycle = ms(config.kafka.commit_interval_ms);
        Clocks {
            cycle,
            coalesce: match config.output.scores_coalesce_ms {
                0 => cycle,
                c => ms(c).min(cycle),
            },
            idle: ms(2 * config.kafka.fetch_wait_max_ms).max(ms(1)),
        }
    }
}

/// The engine's view of a consumed record from input topic `topic` (its configured name: the
/// record's own is read through librdkafka, a `strlen` and a UTF-8 check, once per record, to
/// know which input it is).
fn record<'m>(msg: &'m Consumed<'_>, topic: &'m str) -> Record<'m> {
    Record {
        topic,
        partition: Some(msg.partition()),
        offset: Some(msg.offset()),
        key: msg.key(),
        timestamp_ms: msg.timestamp_ms(),
        clock_ms: None,
        payload: msg.payload(),
    }
}

/// The engine's view of a `jury.reputations` record, read by its own consumer.
fn reputation_record<'m>(msg: &'m BorrowedMessage<'_>) -> Record<'m> {
    message_record(msg, msg.topic())
}

/// The engine's view of a message read through an rdkafka consumer (not the service's own
/// queue, see `record`), as input topic `topic`: the reputation table's records, and the load
/// benchmark's loop that validates events as the polling thread does.
pub fn message_record<'m>(msg: &'m impl Message, topic: &'m str) -> Record<'m> {
    Record {
        topic,
        partition: Some(msg.partition()),
        offset: Some(msg.offset()),
        key: msg.key(),
        timestamp_ms: msg.timestamp().to_millis(),
        clock_ms: None,
        payload: msg.payload(),
    }
}

/// The processing thread: applies polled batches in order, keeps the reputation table current,
/// and seals, produces and commits cycle by cycle, until `stop` is set or polling ends.
fn process_records<'c>(
    core: &Mutex<Core>,
    consumer: &BaseConsumer<GroupContext>,
    (batches, recycle, queued): (
        Receiver<Vec<Polled<'c>>>,
        SyncSender<Vec<Polled<'c>>>,
        &AtomicUsize,
    ),
    reputations: &BaseConsumer<QuietReader>,
    stop: &AtomicBool,
) -> Result<(), ServiceError> {
    let clocks = Clocks::of(lock(core).config());
    let mut cycle_started = Instant::now();
    let mut coalesced = Instant::now();
    let mut last_batch = Instant::now();
    let mut last_reputations = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let wait = clocks
            .cycle
            .saturating_sub(cycle_started.elapsed())
            .min(clocks.coalesce.saturating_sub(coalesced.elapsed()))
            .min(Duration::from_millis(50));
        let batch = match batches.recv_timeout(wait) {
            Ok(batch) => {
                queued.fetch_sub(1, Ordering::Relaxed);
                Some(batch)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Held for the whole pass: the rebalance callback waits for the pass to end.
        let mut c = lock(core);
        c.now = Instant::now();
        if !c.assigned.is_empty() {
            c.restore_assigned()?;
        }
        if let Some(batch) = &batch {
            last_batch = c.now;
            for (i, polled) in batch.iter().enumerate() {
                if let Some(ahead) = batch.get(i + 2 * PREFETCH_AHEAD) {
                    prefetch::address(ahead.msg.ptr());
                }
                if let Some(ahead) = batch.get(i + PREFETCH_AHEAD) {
                    c.prefetch(ahead);
                }
                c.process(polled)?;
            }
            c.flush_tally();
        }
        if let Some(batch) = batch {
            // Back to the polling thread, which destroys its messages as it empties it (or, if
            // it has enough batches, here on drop).
            let _ = recycle.try_send(batch);
        }
        if let Some(e) = consumer
            .context()
            .failed
            .lock()
            .ok()
            .and_then(|mut f| f.take())
        {
            return Err(e);
        }
        if last_reputations.elapsed() >= Duration::from_millis(10) {
            last_reputations = Instant::now();
            for _ in 0..1024 {
                match reputations.poll(Duration::ZERO) {
                    Some(Ok(m)) => c.reputation(&m)?,
                    Some(Err(KafkaError::PartitionEOF(_))) | None => break,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "reputations");
                        break;
                    }
                }
            }
        }
        let idle = last_batch.elapsed() >= clocks.idle && c.epoch_pending();
        if cycle_started.elapsed() >= clocks.cycle || idle {
            c.seal()?;
            cycle_started = Instant::now();
            coalesced = cycle_started;
        } else if coalesced.elapsed() >= clocks.coalesce {
            let keys = c.owned_keys();
            c.release_held(&keys)?;
            coalesced = Instant::now();
        }
        if c.sealed.len() > MAX_EPOCHS_IN_FLIGHT {
            c.drain(consumer, CommitMode::Async)?;
        } else if !c.sealed.is_empty() {
            c.advance(consumer, CommitMode::Async)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clocks(commit: u64, coalesce: u64, fetch_wait: u64) -> Clocks {
        let mut config = Config::default();
        config.kafka.commit_interval_ms = commit;
        config.output.scores_coalesce_ms = coalesce;
        config.kafka.fetch_wait_max_ms = fetch_wait;
        Clocks::of(&config)
    }

    #[test]
    fn the_coalescing_tick_never_outlasts_an_epoch() {
        let ms = Duration::from_millis;
        let c = clocks(1000, 100, 20);
        assert_eq!((c.cycle, c.coalesce, c.idle), (ms(1000), ms(100), ms(40)));
        // A coalescing interval longer than the epoch: the epoch's end releases them first.
        assert_eq!(clocks(1000, 5000, 20).coalesce, ms(1000));
        // Coalescing off: nothing is held, the tick only follows the epoch.
        assert_eq!(clocks(250, 0, 20).coalesce, ms(250));
        // A zero fetch wait still needs some quiet before an epoch ends early.
        assert_eq!(clocks(1000, 100, 0).idle, ms(1));
    }
}
