//! The polling threads, one per stage's consumer (see [`super::stage::Stage`]): each reads
//! its consumer's records in batches, validates vote batches, and hands them to the processing
//! thread. The stage's rebalance callbacks run here, inside `poll`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};

use super::ServiceError;
use super::contexts::GroupContext;
use super::core::{lock, wall_ms};
use super::repartition::{Origin, Routed};
use crate::engine::{Engine, InputTopic, PreparedVotes, Record};
use crate::telemetry::http::{Health, Part, Trouble};
use crate::telemetry::metrics::Metrics;
use crate::topics::TopicTable;

/// Records per batch handed from the polling thread to the processing thread, which applies a
/// batch back to back before its periodic work (sealing, acknowledgements, the reputation table,
/// clocks) runs again: doing that work per record cost more than processing the record, and a
/// channel send per record would cost as much.
pub(super) const PASS_RECORDS: usize = 512;

/// How long a polling thread waits for a first record before it checks whether to stop (a
/// rebalance is served inside the wait).
const FIRST_RECORD_WAIT: Duration = Duration::from_millis(10);

/// Batches of up to [`PASS_RECORDS`] the polling thread may have waiting for the processing
/// thread (32,768 records, ~6 MB of ~200-byte records, ~50 ms of processing). With 8 the
/// processing thread ran dry whenever the polling thread was descheduled or waiting for a fetch
/// (on two cores, often: with 10,000 projects it slept a quarter of the time). A deeper queue
/// costs no handover time: queued records of a revoked partition are dropped unapplied (see
/// [`Polled::generation`]), and on shutdown the queue is dropped uncommitted.
pub(super) const BATCHES_IN_FLIGHT: usize = 64;

/// Queued batches from which on the polling thread validates what it polls. Below it the
/// processing thread is about to run dry, so the polling thread is the slower of the two (with one
/// busy project it is: reading records one `poll` call at a time, then parsing them). It then
/// hands records over unparsed, and the processing thread parses them itself
/// ([`Engine::process`], the same result as preparing and applying), which shares the parsing
/// between the threads in whatever proportion keeps both busy. When processing is the slower
/// (many projects) the queue stays deep and the polling thread parses everything, as before.
const PREPARE_FROM_QUEUED: usize = 2;

/// How long a polling thread whose consumer reported an error waits between two metadata
/// requests to the broker, and for each one's answer.
const REACH_CHECK: Duration = Duration::from_secs(1);

/// Whether a stage's consumer reaches the broker, for `/readyz` ([`Trouble::BrokerLost`]): lost
/// at a consumer error; found again at the next record, or the next metadata request the broker
/// answers, asked every [`REACH_CHECK`] while lost. An idle consumer gets no record to show that
/// the broker is back, and librdkafka need not report an error again while it is away, so
/// neither the next record nor the errors' silence alone would do.
struct BrokerWatch<'a> {
    health: &'a Health,
    metrics: &'a Metrics,
    part: Part,
    lost: bool,
    checked: Instant,
}

impl BrokerWatch<'_> {
    fn lost(&mut self) {
        if !self.lost {
            self.health
                .report(self.part, Trouble::BrokerLost, true, self.metrics);
        }
        self.lost = true;
        self.checked = Instant::now();
    }

    fn found(&mut self) {
        if self.lost {
            self.health
                .report(self.part, Trouble::BrokerLost, false, self.metrics);
        }
        self.lost = false;
    }

    /// While lost, asks the broker for `topic`'s metadata once every [`REACH_CHECK`].
    fn check(&mut self, consumer: &BaseConsumer<GroupContext>, topic: &str) {
        if !self.lost || self.checked.elapsed() < REACH_CHECK {
            return;
        }
        if consumer.fetch_metadata(Some(topic), REACH_CHECK).is_ok() {
            self.found();
        } else {
            self.checked = Instant::now();
        }
    }
}

/// What the processing thread does with a polled record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// An input record, forwarded to the repartition topic by its project (see
    /// [`super::repartition`]).
    Forward,
    /// An input record, applied to the state of its own partition (`by_key`).
    Input,
    /// A repartition-topic record, applied to the state of its partition as the input record
    /// it copies.
    Repartitioned(Origin),
}

/// A batch of records of one stage on its way to that stage's processing thread, which gives
/// it back to the polling thread to be emptied and filled again.
pub(super) type Batch<'c> = Vec<Polled<'c>>;

/// A record on its way from the polling thread to the processing thread.
pub(super) struct Polled<'c> {
    pub msg: BorrowedMessage<'c>,
    /// Its input topic (for a repartition-topic record, its origin's).
    pub topic: InputTopic,
    /// The message's partition, read while the polling thread has the message in cache.
    pub partition: i32,
    pub source: Source,
    /// Revocations before it was polled.
    pub generation: u64,
    /// The validated batch, for a valid vote record.
    pub votes: Option<PreparedVotes>,
    /// For a record to forward, its project as the polling thread read it.
    pub routed: Option<Routed>,
}

/// A stage's polling thread: reads its consumer's records in batches and validates vote
/// batches, so that the processing thread only applies them (unless it is waiting for work, see
/// [`PREPARE_FROM_QUEUED`]). `queued` counts the batches sent and not yet received by the
/// stage's processing thread; `recycled` gives back the applied batches, emptied here (their
/// messages destroyed) and filled again. Returns when `halt` is set or the processing thread is
/// gone.
pub(super) fn poll_records<'c>(
    consumer: &'c BaseConsumer<GroupContext>,
    (engine, topics, repartition): (&Engine, &TopicTable, bool),
    (batches, recycled, queued): (&SyncSender<Batch<'c>>, &Receiver<Batch<'c>>, &AtomicUsize),
    halt: &AtomicBool,
    health: &Health,
    metrics: &Metrics,
) {
    let mut broker = BrokerWatch {
        health,
        metrics,
        part: consumer.context().stage.part(),
        lost: false,
        checked: Instant::now(),
    };
    let any_topic = topics.input_name(InputTopic::Votes);
    while !halt.load(Ordering::Relaxed) {
        broker.check(consumer, any_topic);
        let prepare = queued.load(Ordering::Relaxed) >= PREPARE_FROM_QUEUED;
        let mut batch = recycled.try_recv().map_or_else(
            |_| Vec::with_capacity(PASS_RECORDS),
            |mut done| {
                done.clear();
                done
            },
        );
        // Waits for the first record, then takes what is there. Rebalances, commit results and
        // client errors are served inside `poll`.
        let mut wait = FIRST_RECORD_WAIT;
        // When the batch's input records are first read (see `Record::read_at_ms`).
        let now_ms = wall_ms();
        while batch.len() < PASS_RECORDS {
            let msg = match consumer.poll(wait) {
                Some(Ok(msg)) => msg,
                Some(Err(e)) => {
                    // A fatal error leaves the consumer unusable for good (a member that joined
                    // with this one's `kafka.instance_id` fenced it, say): the service stops
                    // with it rather than poll on, ready to no one.
                    if let Some((code, reason)) = consumer.client().fatal_error() {
                        let context = consumer.context();
                        let instance_id = lock(&context.core).config.kafka.instance_id.clone();
                        let fatal = ServiceError::Fatal {
                            code,
                            reason,
                            instance_id,
                        };
                        context.fail(fatal);
                    }
                    tracing::warn!(error = %e, "consumer");
                    broker.lost();
                    break;
                }
                None => break,
            };
            broker.found();
            wait = Duration::ZERO;
            // Read after the record: a revocation (inside an earlier `poll`) came before it.
            let generation = consumer.context().generation.load(Ordering::Acquire);
            let name = msg.topic();
            let (topic, source) = match topics.input(name) {
                Some(topic) if repartition => (topic, Source::Forward),
                Some(topic) => (topic, Source::Input),
                None if name == topics.repartition() => {
                    let origin = Origin::read(&msg, topics);
                    // One without an input topic is dead-lettered by the engine; the votes
                    // state is as good as any to count it in.
                    let topic = origin.input.unwrap_or(InputTopic::Votes);
                    (topic, Source::Repartitioned(origin))
                }
                None => continue,
            };
            let polled = Polled {
                partition: msg.partition(),
                msg,
                topic,
                source,
                generation,
                votes: None,
                routed: None,
            };
            // What the processing thread would read first, read here while the queue is deep
            // (see `PREPARE_FROM_QUEUED`).
            let (votes, routed) = match source {
                _ if !prepare => (None, None),
                Source::Forward => (
                    None,
                    Some(engine.project_of(&polled.record(topics, now_ms))),
                ),
                _ => (engine.prepare_votes(&polled.record(topics, now_ms)), None),
            };
            batch.push(Polled {
                votes,
                routed,
                ..polled
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

impl Polled<'_> {
    /// The engine's view of the record, with its vote batch if that was read here; an input
    /// record is first read now, at wall-clock `now_ms` (see [`Record::read_at_ms`]).
    pub fn record<'m>(&'m self, topics: &'m TopicTable, now_ms: i64) -> Record<'m> {
        let record = match &self.source {
            Source::Repartitioned(origin) => origin.record(&self.msg, topics),
            Source::Forward | Source::Input => {
                own_record(&self.msg, self.topic, topics.input_name(self.topic))
                    .read_at(Some(now_ms))
            }
        };
        record.read_ahead(self.votes.as_ref())
    }
}

/// The engine's view of a consumed record from input topic `input`, named `topic` (its
/// configured name).
fn own_record<'m>(msg: &'m BorrowedMessage<'_>, input: InputTopic, topic: &'m str) -> Record<'m> {
    Record::new(topic, Some(input), msg.payload())
        .at(Some(msg.partition()), Some(msg.offset()))
        .keyed(msg.key(), msg.timestamp().to_millis())
}
