//! The Kafka runtime: consumes the inputs, drives the engine, publishes the
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
//! With `input.partitioning = "repartition"` (the default) the same loop runs two stages, like a
//! Kafka Streams topology with a repartition topic: input records are forwarded, keyed by their
//! project, to `<group_id>-repartition` (`repartition`), and that topic's records are applied;
//! a forward is an output of its epoch, so an input offset is committed only once its record is
//! in the repartition topic. With `by_key` input records are applied where they are.
//!
//! Each stage has a consumer of its own in a consumer group of its own (`stage`): the
//! forwarding stage reads the inputs in `kafka.group_id`, and the tasks (the repartition topic's
//! partitions, with every project's state) are shared in `<group_id>-tasks`, so the broker
//! spreads the tasks over the instances whatever they own of the inputs. With
//! `kafka.instance_id` both consumers are static members (KIP-345): a restarted instance gets
//! its partitions back without a rebalance.
//!
//! The threads: a **polling thread** per stage (`poll`) reads its consumer's records in
//! batches, validates vote batches (parsing is a third of a record's cost) and destroys the
//! messages of applied batches; a **processing thread** per stage (`process`) applies them in
//! order, publishes through its record collector (`collector`), seals and commits its epochs
//! (`epoch`), and the applying stage's serves the reputation table. Each stage is a processor
//! of its own, as a Kafka Streams application's sub-topologies are tasks of their own: its
//! state, behind its own lock, is a `core` (the forwarding stage's has no partitions' state,
//! and a producer and epochs of its own), so forwarding never waits for applying. The owned
//! partitions' state lives in `tasks`; the rebalance callbacks (`contexts`) run on the polling
//! threads and take their stage's lock, so state never changes while a partition is handed
//! over. Records polled before their partition was revoked and not applied yet are dropped:
//! their offsets were never committed, so the next owner reads them.

pub mod clients;
mod collector;
mod contexts;
mod core;
mod epoch;
mod faults;
mod poll;
mod process;
mod repartition;
mod stage;
mod tasks;
mod wall_clock;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::changelog::{self, ChangelogError, Unit};
use crate::config::Config;
use crate::engine::Engine;
use crate::queries::view::View;
use crate::telemetry::http::Health;
use crate::telemetry::metrics::Metrics;
use crate::topics::TopicTable;
use clients::QuietReader;
use collector::Collector;
use contexts::{Committers, GroupContext};
use core::{Core, Epochs, lock};
use poll::{BATCHES_IN_FLIGHT, poll_records};
pub use process::message_record;
use process::process_records;
use stage::Stage;
use tasks::{Read, read_to_end};

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error(
        "cannot reach Kafka at kafka.bootstrap_servers = {servers:?} within {secs} s ({error}); \
         is a broker running there?"
    )]
    Unreachable {
        servers: String,
        secs: u64,
        error: KafkaError,
    },
    #[error("configuration: {0}")]
    Config(String),
    /// Settings refused in the words of the configuration's own refusals.
    #[error(transparent)]
    Settings(#[from] crate::config::ConfigError),
    #[error("topics: {0}")]
    Topic(String),
    #[error("delivery failed, nothing committed: {0}")]
    Delivery(String),
    /// A changelog record this version cannot read (see [`ChangelogError`]): going on without
    /// it would lose state without a word.
    #[error(
        "restoring {unit:?}: {source}. {}",
        changelog::start_over(group, state)
    )]
    Restore {
        unit: Unit,
        #[source]
        source: ChangelogError,
        group: String,
        /// The changelog's name.
        state: String,
    },
    #[error("restoring {0:?}: the changelog did not reach its end in time")]
    RestoreTimeout(Unit),
    /// A restored state stops short of what its group committed, and reading on did not bring
    /// it there: the changelog lost flushes whose input the group had consumed (its topic was
    /// deleted or its records expired). Going on from the commit without them would publish
    /// figures that miss those records, without a word.
    #[error(
        "restoring {unit:?}: the changelog holds the state through input offset {restored:?}, \
         but the group committed offset {committed} of that partition, and a commit follows its \
         state's changelog: the changelog lost records (the topic `{state}` was deleted or its \
         records expired). {}",
        changelog::start_over(group, state)
    )]
    RestoreBehind {
        unit: Unit,
        restored: Option<i64>,
        committed: i64,
        group: String,
        /// The changelog's name.
        state: String,
    },
    /// librdkafka's fatal error: the client cannot go on.
    #[error(
        "kafka: a fatal error ({code:?}): {reason}{}",
        if *code == RDKafkaErrorCode::FencedInstanceId {
            format!(
                "; another instance joined with kafka.instance_id = {instance_id:?}: each needs \
                 its own"
            )
        } else {
            String::new()
        }
    )]
    Fatal {
        code: RDKafkaErrorCode,
        reason: String,
        instance_id: String,
    },
    #[error("shutdown did not finish within {0} s")]
    ShutdownTimeout(u64),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A partition's log went back below what this group already consumed: the first record
    /// read after assignment lies below the group's committed offset, so the broker reset the
    /// position (the topic was deleted and recreated, or truncated). Going on would skip every
    /// record as already seen, or count old ones twice.
    #[error(
        "partition {partition} of {topic} went back: the first record read is at offset {offset}, \
         below the group's committed offset {committed}, so the topic was deleted and recreated \
         or truncated. Its old state no longer matches it. {}",
        changelog::start_over(group, state)
    )]
    LogWentBack {
        topic: String,
        partition: i32,
        offset: i64,
        committed: i64,
        group: String,
        /// The changelog's name.
        state: String,
    },
}

/// An id for this start of the service, different from every earlier one: it names the
/// changelog's redo records (see [`changelog::Renderer::new`]).
fn run_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// The most records' bytes one redo chunk carries (see [`changelog::Renderer::new`]): half of
/// the largest record, the input's (`limits.max_message_bytes`) or the producer's when that is
/// lower, so that a chunk of many records fits what the producer sends.
fn redo_chunk_bytes(config: &Config) -> usize {
    let largest = config.limits.max_message_bytes;
    largest.min(config.producer_record_limit()) / 2
}

/// Reads the whole reputation table (every partition to its end; `partitions` says how many each
/// topic has) before processing starts, like a Kafka Streams GlobalKTable; afterwards the same
/// consumer keeps the table current.
fn bootstrap_reputations(
    core: &Arc<Mutex<Core>>,
    reader: &BaseConsumer<QuietReader>,
    (cfg, topics, partitions): (&Config, &TopicTable, &HashMap<String, usize>),
) -> Result<(), ServiceError> {
    let count = |topic: &str| partitions.get(topic).copied().unwrap_or_default();
    let table = cfg.topics.reputations.as_str();
    clients::assign_from_beginning(reader, (table, count(table)))?;
    let stop = Arc::clone(&lock(core).stop);
    let read = read_to_end(reader, (count(table), &stop), "reputation bootstrap", |m| {
        lock(core).global(m)
    })?;
    match read {
        Read::Whole => {}
        // As before: start with what was read; the same consumer keeps reading the rest.
        Read::TimedOut => tracing::warn!("the reputation table did not reach its end in time"),
        // The processing loop sees the stop as it starts, and ends.
        Read::Stopped => tracing::info!("stopping: the reputation table's read left unfinished"),
    }
    // The instance directory is read by the same consumer from here on (see
    // `crate::queries`): until an owner's announcement arrives, a query for its projects is
    // answered 503.
    if cfg.input.repartitions() {
        clients::add_from_beginning(reader, (topics.instances(), count(topics.instances())))?;
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
    (metrics, health): (Arc<Metrics>, Arc<Health>),
    view: Arc<View>,
    stop: Arc<AtomicBool>,
) -> Result<(), ServiceError> {
    let topics = TopicTable::new(&config.topics, &config.kafka.group_id);
    // The polling thread validates with its own copy of the (stateless) engine.
    let engine = Engine::new(config.engine_settings());
    // Every client is made before the first request: each connects to the brokers (and the
    // producer gets its idempotent producer id, a round trip librdkafka retries only after
    // 500 ms) while the topics are checked, instead of one after another. Made in turn, they
    // put a second between the start and the first score on an empty broker. Each stage has a
    // processor of its own (its core, producer and epochs), as two sub-topologies of a Kafka
    // Streams application run as tasks of their own.
    let failed = Arc::new(Mutex::new(None));
    let mut consumers = Vec::new();
    for &stage in Stage::all(&config) {
        let core = Core::new(
            stage,
            &config,
            (engine.clone(), topics.clone()),
            Collector::new(&config, stage, &metrics)?,
            Epochs::new(run_id(), redo_chunk_bytes(&config)),
            (&metrics, &health, &stop),
            Arc::clone(&view),
        );
        // The consumer's context holds its stage's processor: the rebalance callbacks take its
        // lock, and the processing thread finds it there.
        let consumer: BaseConsumer<GroupContext> =
            clients::consumer_config(&config, stage.group(&config, &topics), stage)?
                .create_with_context(GroupContext {
                    stage,
                    core: Arc::new(Mutex::new(core)),
                    metrics: Arc::clone(&metrics),
                    failed: Arc::clone(&failed),
                    generation: AtomicU64::new(0),
                })?;
        consumers.push(consumer);
    }
    let applier = consumers
        .iter()
        .map(BaseConsumer::context)
        .find(|c| c.stage == Stage::Apply)
        .map(|c| Arc::clone(&c.core))
        .ok_or_else(|| ServiceError::Config("no stage applies records".to_owned()))?;
    let reputations: BaseConsumer<QuietReader> =
        clients::reader_config(&config, "reputations")?.create_with_context(QuietReader)?;
    let probe = clients::reach(&config)?;
    let partitions = clients::ensure_topics(&config, &topics, &probe)?;
    clients::drop_aside(probe);
    bootstrap_reputations(&applier, &reputations, (&config, &topics, &partitions))?;
    let repartition = config.input.repartitions();
    let mut committers = Committers::default();
    for consumer in &consumers {
        consumer.subscribe(&consumer.context().stage.topics(&config, &topics))?;
        committers.add(consumer);
    }
    health.set_consuming(true, &metrics);
    metrics.up.set(1.0);
    tracing::info!(
        group = %config.kafka.group_id,
        stages = ?Stage::all(&config),
        "consuming"
    );
    let halt = AtomicBool::new(false);
    let queued: Vec<AtomicUsize> = consumers.iter().map(|_| AtomicUsize::new(0)).collect();
    let result = std::thread::scope(|s| {
        let mut pollers = Vec::new();
        let mut forwarding = None;
        let mut applying = None;
        for (consumer, queued) in consumers.iter().zip(&queued) {
            let stage = consumer.context().stage;
            let (sender, receiver) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
            // Applied batches go back to their polling thread to be emptied and filled again.
            // A new one each pass (512 records of ~280 bytes) kept coming from fresh pages:
            // their zeroing was 7% of the polling thread's samples with 10,000 projects, and a
            // third of the service's page faults. Emptying them destroys their messages, memory
            // librdkafka's broker thread allocated: ~10% of the processing thread's samples
            // with 10,000 projects, where processing is the slower thread and polling waits for
            // queue space.
            let (back, recycled) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
            let (engine, topics, halt, health, metrics) =
                (&engine, &topics, &halt, &*health, &*metrics);
            let name = match stage {
                Stage::Forward => "jurystream-poll-forward",
                Stage::Apply => "jurystream-poll",
            };
            pollers.push(
                std::thread::Builder::new()
                    .name(name.to_owned())
                    .spawn_scoped(s, move || {
                        poll_records(
                            consumer,
                            (engine, topics, repartition),
                            (&sender, &recycled, queued),
                            halt,
                            health,
                            metrics,
                        );
                    })?,
            );
            // The poller holds the only sender: the channel closes when it is gone. The
            // forwarding stage's processor runs on a thread of its own, the applying stage's
            // on this one: neither waits for the other's records.
            let core = &*consumer.context().core;
            match stage {
                Stage::Forward => {
                    let (committers, failed, stop) = (&committers, &*failed, &*stop);
                    let forward = move || {
                        let result = process_records(
                            core,
                            (committers, failed),
                            (receiver, &back, queued),
                            None,
                            stop,
                        );
                        halt.store(true, Ordering::Relaxed);
                        result
                    };
                    forwarding = Some(
                        std::thread::Builder::new()
                            .name("jurystream-forward".to_owned())
                            .spawn_scoped(s, forward)?,
                    );
                }
                Stage::Apply => applying = Some((core, receiver, back, queued)),
            }
        }
        let applied = applying.map_or(Ok(()), |(core, receiver, back, queued)| {
            process_records(
                core,
                (&committers, &failed),
                (receiver, &back, queued),
                Some(&reputations),
                &stop,
            )
        });
        halt.store(true, Ordering::Relaxed);
        let forwarded = forwarding.map_or(Ok(()), |forwarder| {
            forwarder
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        for poller in pollers {
            if let Err(panic) = poller.join() {
                std::panic::resume_unwind(panic);
            }
        }
        applied.and(forwarded)
    });
    let result = result.and_then(|()| {
        tracing::info!("stopping: finishing the cycle");
        consumers
            .iter()
            .try_for_each(|c| lock(&c.context().core).drain(&committers))
    });
    health.set_consuming(false, &metrics);
    metrics.up.set(0.0);
    for consumer in &consumers {
        consumer.unsubscribe();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changelog::UnitKind;

    /// A fatal error stops the service with librdkafka's words, and a fenced identity names the
    /// setting two instances share.
    #[test]
    fn a_fatal_error_says_what_to_fix_where_it_can() {
        let fenced = ServiceError::Fatal {
            code: RDKafkaErrorCode::FencedInstanceId,
            reason: "Broker: Static consumer fenced by other consumer with same group.instance.id"
                .into(),
            instance_id: "pod-0".into(),
        }
        .to_string();
        assert!(
            fenced.ends_with(
                "same group.instance.id; another instance joined with kafka.instance_id = \
                 \"pod-0\": each needs its own"
            ),
            "{fenced}"
        );
        let other = ServiceError::Fatal {
            code: RDKafkaErrorCode::OutOfOrderSequenceNumber,
            reason: "gap".into(),
            instance_id: String::new(),
        }
        .to_string();
        assert_eq!(
            other,
            "kafka: a fatal error (OutOfOrderSequenceNumber): gap"
        );
    }

    /// The errors that end in starting over say it whole, in one wording: both of the group's
    /// consumer groups and both of its topics, the changelog by the name it has (`topics.state`
    /// where set), and no run of spaces from a broken line.
    #[test]
    fn errors_that_start_over_name_every_group_and_topic() {
        let unit = Unit {
            kind: UnitKind::Projects,
            partition: 2,
        };
        let errors = [
            ServiceError::RestoreBehind {
                unit,
                restored: Some(7),
                committed: 12,
                group: "jury".into(),
                state: "jury-state".into(),
            },
            ServiceError::LogWentBack {
                topic: "jury.votes".into(),
                partition: 2,
                offset: 0,
                committed: 12,
                group: "jury".into(),
                state: "jury-state".into(),
            },
            ServiceError::RestoreBehind {
                unit,
                restored: None,
                committed: 12,
                group: "jury".into(),
                state: "evals.changelog".into(),
            },
            ServiceError::Restore {
                unit,
                source: ChangelogError::Key {
                    key: "[\"p\",2,\"sketch\",\"proj-1\"]".into(),
                    reason: "unknown kind of state".into(),
                },
                group: "jury".into(),
                state: "evals.changelog".into(),
            },
        ];
        for error in errors {
            let text = error.to_string();
            let state = match &error {
                ServiceError::RestoreBehind { state, .. }
                | ServiceError::LogWentBack { state, .. }
                | ServiceError::Restore { state, .. } => {
                    format!("`{state}`")
                }
                _ => unreachable!("only the errors above"),
            };
            for name in ["`jury`", "`jury-tasks`", &state, "`jury-repartition`"] {
                assert!(text.contains(name), "{name} missing from: {text}");
            }
            let other_state = ["`jury-state`", "`evals.changelog`"]
                .into_iter()
                .find(|n| *n != state);
            assert!(
                other_state.is_none_or(|n| !text.contains(n)),
                "another changelog's name in: {text}"
            );
            assert!(text.contains("To start over from the inputs"), "{text}");
            assert!(!text.contains("  "), "a run of spaces in: {text}");
        }
    }

    /// A redo chunk of many records is half the largest record: the input's by default, the
    /// producer's where it is set lower, so that no chunk of many records is refused.
    #[test]
    fn redo_chunks_are_half_the_largest_record_the_producer_sends() {
        let mut config = Config::default();
        assert_eq!(redo_chunk_bytes(&config), 512 << 10);
        config
            .kafka
            .producer
            .insert("message.max.bytes".into(), "150000".into());
        assert_eq!(redo_chunk_bytes(&config), 75_000);
    }
}
