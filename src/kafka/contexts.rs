//! The context of each stage's consumer (see [`super::stage`]): lag from statistics, and the
//! rebalance callbacks that hand partitions over; and the consumers at hand to commit with
//! ([`Committers`]). The readers' context is [`super::clients::QuietReader`]; the
//! producer's is the record collector's [`super::collector::Delivery`].
//!
//! The rebalance callbacks run on the stage's polling thread and take the processing thread's
//! lock, so state never changes while a partition is handed over: a revoked partition is
//! flushed, committed and dropped inside the callback, before another instance owns it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::ServiceError;
use super::core::{Core, lock};
use super::stage::Stage;
use crate::telemetry::events::{self, InternalEvent, PartitionsAssigned, PartitionsRevoked};
use crate::telemetry::metrics::Metrics;

/// A stage consumer's context: lag from statistics, and the rebalance callbacks.
pub(super) struct GroupContext {
    pub stage: Stage,
    pub core: Arc<Mutex<Core>>,
    pub metrics: Arc<Metrics>,
    /// The first failure outside the processing thread (see [`GroupContext::fail`]), shared by
    /// the stages.
    pub failed: Arc<Mutex<Option<ServiceError>>>,
    /// Revocations of this stage's partitions so far.
    pub generation: AtomicU64,
}

impl GroupContext {
    /// Keeps `e` unless a failure is already kept: the processing thread stops with the first
    /// after its pass, committing nothing past it.
    pub fn fail(&self, e: ServiceError) {
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
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        events::librdkafka_line(level, facility, message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        events::client_error("consumer", &error, reason);
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let mut core = lock(&self.core);
        let revoked = partitions(tpl);
        // This stage's offsets are committed before its partitions go; the other stage's wait
        // for its own consumer (see `Committers`).
        if let Err(e) = core.drain(&Committers::only(consumer)) {
            tracing::error!(error = %e, "could not finish the cycle before revocation");
            self.fail(e);
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        for (topic, partition) in &revoked {
            core.revoke(topic, *partition, generation);
        }
        PartitionsRevoked {
            partitions: &revoked,
            // The forwarding stage's processor holds no partitions' state.
            owned: (self.stage == Stage::Apply).then(|| core.tasks.units.len()),
        }
        .emit(&self.metrics);
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // The group's committed offsets, asked before the lock: the first record read of
            // each partition is checked against them.
            let committed = consumer
                .committed_offsets(TopicPartitionList::clone(tpl), Duration::from_secs(10))
                .map_err(|e| tracing::warn!(error = %e, "committed offsets unknown: not checked"))
                .ok();
            let mut core = lock(&self.core);
            for e in committed.iter().flat_map(TopicPartitionList::elements) {
                if let Offset::Offset(c) = e.offset() {
                    let key = (e.topic(), e.partition());
                    core.tasks
                        .committed
                        .retain(|(t, p, _)| (t.as_str(), *p) != key);
                    core.tasks.committed.push((key.0.to_owned(), key.1, c));
                }
            }
            let assigned = partitions(tpl);
            PartitionsAssigned {
                partitions: &assigned,
            }
            .emit(&self.metrics);
            for (topic, partition) in assigned {
                if let Err(e) = core.assign(&topic, partition) {
                    self.fail(e);
                }
            }
            if self.stage == Stage::Apply {
                core.republish_owned_reviewers();
            }
        }
    }
}

/// The topics and partitions of a rebalance's list.
fn partitions(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

/// The stage consumers at hand to commit with: both on the processing thread; in a rebalance
/// callback only the one whose partitions move, whose offsets must be committed before they go.
/// A committed epoch's offsets of a stage whose consumer is not at hand wait in
/// [`super::core::Epochs::uncommitted`] for the next commit that has it: the other stage's
/// partitions are not moving, so their offsets can wait, and a crash meanwhile reads those
/// records again, which the state they reach skips (see [`crate::engine::Origins`] and the
/// changelog's offsets).
#[derive(Clone, Copy, Default)]
pub(super) struct Committers<'a> {
    pub forward: Option<&'a BaseConsumer<GroupContext>>,
    pub apply: Option<&'a BaseConsumer<GroupContext>>,
}

impl<'a> Committers<'a> {
    /// Only `consumer`.
    pub fn only(consumer: &'a BaseConsumer<GroupContext>) -> Committers<'a> {
        let mut c = Committers::default();
        c.add(consumer);
        c
    }

    /// Adds `consumer` as the consumer of its stage.
    pub fn add(&mut self, consumer: &'a BaseConsumer<GroupContext>) {
        match consumer.context().stage {
            Stage::Forward => self.forward = Some(consumer),
            Stage::Apply => self.apply = Some(consumer),
        }
    }

    /// The consumer of `stage`, if at hand.
    pub fn of(&self, stage: Stage) -> Option<&'a BaseConsumer<GroupContext>> {
        match stage {
            Stage::Forward => self.forward,
            Stage::Apply => self.apply,
        }
    }
}
