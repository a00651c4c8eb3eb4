//! The commit protocol (Kafka Streams' task commit), in **epochs** of at most
//! `kafka.commit_interval_ms`:
//! 1. records are processed as they arrive and their outputs produced at once;
//! 2. [`Core::seal`] ends an epoch: it publishes the held scores, renders the changelog of every
//!    partition that processed records, and notes the offsets to commit;
//! 3. [`Core::advance`] sends an epoch's changelog once the broker has acknowledged all of its
//!    outputs, and commits its offsets once the changelog is acknowledged, epochs strictly in
//!    order, while the next epochs fill. Commits are synchronous, as Kafka Streams' are: an
//!    asynchronous commit's result never reaches the application through rdkafka's
//!    `BaseConsumer` (rust-rdkafka issue 856), so a failed one would be lost unseen, and on a
//!    partition that gets no new record nothing would ever commit it again. A failed commit's
//!    offsets wait for the next attempt, a cycle later, for as long as the partition is owned;
//! 4. [`Core::drain`] seals and waits until everything is committed (revocation, shutdown, or
//!    too many epochs in flight).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::ServiceError;
use super::collector::{Destination, Tag};
use super::contexts::{Committers, GroupContext};
use super::core::{Core, Epoch, Offsets};
use super::stage::Stage;
use crate::engine::Outcome;
use crate::engine::contract::rejection::ErrorCode;
use crate::engine::output::OutputTopic;
use crate::telemetry::events::{
    ChangelogSent, EpochCommitted, InternalEvent, OffsetsCommitted, RecordsProcessed,
};
use crate::telemetry::http::Trouble;

/// Changelog buffers kept for reuse: an epoch takes one when it is sealed and gives it back
/// once its changelog is sent, so in steady state one or two circulate.
const SPARE_RECORD_BUFFERS: usize = 2;

/// How long a stage's oldest epoch, or a refused commit, may wait before `/readyz` says not
/// ready.
const BEHIND: Duration = Duration::from_secs(5);

impl Core {
    /// Ends the current epoch: publishes held scores, renders the changelog of every partition
    /// that processed records (to be sent once the outputs are acknowledged) and notes the
    /// offsets to commit after that.
    pub(super) fn seal(&mut self) -> Result<(), ServiceError> {
        self.flush_tally();
        self.release_held()?;
        let keys = self.tasks.owned_keys();
        let mut changelog = self.epochs.spare_records.pop().unwrap_or_default();
        // The next offset to read of each partition consumed.
        let mut next = Offsets::new();
        for (&(topic, partition), &offset) in &self.tasks.forwarded {
            next.insert(
                (self.topics.input_name(topic).to_owned(), partition),
                offset + 1,
            );
        }
        self.tasks.forwarded.clear();
        for unit in keys {
            let Some(owned) = self.tasks.units.get_mut(&unit) else {
                continue;
            };
            let Some(offset) = owned.pending.take() else {
                continue;
            };
            let mut changes = owned
                .state
                .journal
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            // Records at or below the restored offset were skipped: the changelog has them.
            let new = owned.skip_through.is_none_or(|s| offset > s);
            self.epochs.renderer.render(
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
            owned.state.end_flush();
            let at = next
                .entry((self.unit_log(unit).to_owned(), unit.partition))
                .or_default();
            *at = (*at).max(offset + 1);
        }
        for ((topic, partition), offset) in &next {
            self.metrics
                .input_position
                .with_label_values(&[topic, &partition.to_string()])
                .set(*offset);
        }
        let c = &mut self.collector;
        if c.epoch_outputs > 0 || !next.is_empty() {
            self.epochs.sealed.push_back(Epoch {
                id: c.epoch,
                outputs: c.epoch_outputs,
                changelog,
                changelog_sent: false,
                commits: next,
                sealed_at: Instant::now(),
            });
            c.epoch += 1;
            c.epoch_outputs = 0;
        } else {
            // Nothing was processed: the (empty) buffer goes back.
            self.epochs.spare_records.push(changelog);
        }
        if self.stage == Stage::Apply && self.last_gauges.elapsed() > Duration::from_secs(1) {
            self.update_gauges();
        }
        Ok(())
    }

    /// Moves sealed epochs forward as far as acknowledgements allow: sends the changelog of the
    /// oldest epoch whose outputs are all acknowledged, commits the offsets of the oldest epoch
    /// whose changelog is acknowledged.
    pub(super) fn advance(&mut self, consumers: &Committers<'_>) -> Result<(), ServiceError> {
        self.collector.serve_delivery_reports();
        self.collector.check_delivery()?;
        self.replace_refused_forwards()?;
        while let Some(front) = self.epochs.sealed.front() {
            let (id, outputs) = (front.id, front.outputs);
            let acked = self.collector.acked(id);
            if !front.changelog_sent {
                if acked < outputs {
                    break;
                }
                let mut records = std::mem::take(&mut self.epochs.sealed[0].changelog);
                let cut = self.faults.changelog_cut(&records);
                for (i, r) in records.iter().enumerate() {
                    if cut == Some(i) {
                        self.faults.abort_mid_changelog(&self.collector.producer, i);
                    }
                    // A changelog record is never refused quietly (see `Collector::send`).
                    self.collector.send(
                        self.topics.state(),
                        Some(r.partition),
                        (Some(r.key), r.value),
                        Tag {
                            destination: Destination::State,
                            since_ms: None,
                            event_ms: None,
                            epoch: id,
                        },
                    )?;
                }
                let sent = records.len() as u64;
                ChangelogSent { records: sent }.emit(&self.metrics);
                let front = &mut self.epochs.sealed[0];
                front.changelog_sent = true;
                front.outputs += sent;
                // The producer copied the records: the buffer serves a later epoch.
                if self.epochs.spare_records.len() < SPARE_RECORD_BUFFERS {
                    records.clear();
                    self.epochs.spare_records.push(records);
                }
                continue;
            }
            if acked < outputs {
                break;
            }
            let Some(done) = self.epochs.sealed.pop_front() else {
                break;
            };
            self.faults.before_commit(done.commits.len());
            self.epochs.requeue(done.commits);
            // Every record of the epoch is acknowledged: its counter serves a later epoch.
            self.collector.forget(id);
            EpochCommitted {
                seconds: done.sealed_at.elapsed().as_secs_f64(),
            }
            .emit(&self.metrics);
        }
        if self
            .epochs
            .retry_commits_at
            .is_none_or(|at| Instant::now() >= at)
        {
            self.commit_uncommitted(consumers);
        }
        Ok(())
    }

    /// Reports to `/readyz` whether the stage is behind: its oldest epoch, or a commit the
    /// group refuses, has waited more than [`BEHIND`]. Called every pass, so that a stage
    /// that catches up says so even when it has nothing more to do.
    pub(super) fn report_progress(&self) {
        let waited_long = |since: Option<Instant>| since.is_some_and(|t| t.elapsed() > BEHIND);
        let behind = waited_long(self.epochs.sealed.front().map(|e| e.sealed_at))
            || waited_long(self.epochs.refused_since);
        self.health
            .report(self.stage.part(), Trouble::Behind, behind, &self.metrics);
    }

    /// Commits the offsets of committed epochs that wait in [`super::core::Epochs::uncommitted`],
    /// each to its stage's group, for the stages whose consumer is at hand. The offsets of a
    /// commit that fails go back to wait for the next attempt, which [`Core::advance`] makes a
    /// cycle later; [`Core::revoke`] drops those of a partition that goes.
    fn commit_uncommitted(&mut self, consumers: &Committers<'_>) {
        for stage in [Stage::Forward, Stage::Apply] {
            let Some(consumer) = consumers.of(stage) else {
                continue;
            };
            let (config, topics) = (&self.config, &self.topics);
            let (due, rest): (Offsets, Offsets) = std::mem::take(&mut self.epochs.uncommitted)
                .into_iter()
                .partition(|((topic, _), _)| Stage::of(topic, config, topics) == stage);
            self.epochs.uncommitted = rest;
            if due.is_empty() {
                continue;
            }
            let result = self.commit(consumer, &due);
            OffsetsCommitted {
                result: result.as_ref().copied(),
            }
            .emit(&self.metrics);
            if result.is_err() {
                self.epochs.requeue(due);
                let cycle = Duration::from_millis(self.config.kafka.commit_interval_ms);
                self.epochs.retry_commits_at = Some(Instant::now() + cycle);
                self.epochs.refused_since.get_or_insert_with(Instant::now);
            }
        }
        self.epochs.forget_refusals_if_settled();
    }

    /// Commits `offsets` with `consumer` and waits for the group's answer (or fails as the
    /// broker would, where the environment asks for it: see [`super::faults`]).
    fn commit(
        &mut self,
        consumer: &BaseConsumer<GroupContext>,
        offsets: &Offsets,
    ) -> Result<(), KafkaError> {
        if self.faults.fails_commit() {
            return Err(KafkaError::ConsumerCommit(
                RDKafkaErrorCode::RebalanceInProgress,
            ));
        }
        let mut commits = TopicPartitionList::new();
        for ((topic, partition), offset) in offsets {
            commits.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
        }
        consumer.commit(&commits, CommitMode::Sync)
    }

    /// Publishes a `forward_refused` dead letter for each forward refused for good, in the
    /// forward's own epoch: the forward is settled, and the epoch waits for its letter instead,
    /// so the input record's offset is committed only once the letter is acknowledged.
    fn replace_refused_forwards(&mut self) -> Result<(), ServiceError> {
        for refused in self.collector.take_refused() {
            let limits = &self.engine.settings().limits;
            let letter = refused.dead_letter(
                self.topics.repartition(),
                limits.dead_letter_payload_bytes,
                limits.max_record_bytes(),
            );
            let sent = self.collector.send(
                self.topics.output_name(OutputTopic::DeadLetters),
                None,
                (
                    letter.key.as_deref().map(str::as_bytes),
                    Some(letter.render().as_bytes()),
                ),
                Tag {
                    destination: Destination::Output(OutputTopic::DeadLetters),
                    since_ms: None,
                    event_ms: None,
                    epoch: refused.epoch,
                },
            )?;
            self.collector.settle(refused.epoch);
            if sent {
                if refused.epoch == self.collector.epoch {
                    self.collector.epoch_outputs += 1;
                } else if let Some(e) = self
                    .epochs
                    .sealed
                    .iter_mut()
                    .find(|e| e.id == refused.epoch)
                {
                    e.outputs += 1;
                }
            }
            let topic = refused
                .topic
                .as_deref()
                .unwrap_or(self.topics.repartition());
            RecordsProcessed {
                topic,
                outcome: Outcome::Rejected(ErrorCode::ForwardRefused),
                count: 1,
            }
            .emit(&self.metrics);
        }
        Ok(())
    }

    /// Seals the current epoch and waits until every epoch is committed (revocation, shutdown,
    /// or too many epochs in flight). During a broker outage this keeps waiting, not ready.
    /// The reviewer records held are published first, and leaderboard categories whose
    /// ratings lack a session refitted, so a clean stop leaves the tables whole.
    pub(super) fn drain(&mut self, consumers: &Committers<'_>) -> Result<(), ServiceError> {
        self.release_reviewers()?;
        self.refit_leaderboards()?;
        self.seal()?;
        let started = Instant::now();
        let limit = Duration::from_secs(self.config.kafka.shutdown_timeout_secs);
        while !self.epochs.sealed.is_empty() {
            self.collector.producer.poll(Duration::from_millis(10));
            self.advance(consumers)?;
            if self.stop.load(Ordering::Relaxed) && started.elapsed() > limit {
                return Err(ServiceError::ShutdownTimeout(limit.as_secs()));
            }
        }
        // Offsets an earlier epoch (or a failed commit) left for this consumer, at once: a
        // partition that goes, or a stop, leaves no later attempt.
        self.commit_uncommitted(consumers);
        Ok(())
    }
}
