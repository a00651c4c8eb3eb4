//! The processing thread (Kafka Streams' processor): forwards input records to the repartition
//! topic by their project (see [`super::repartition`]) or applies polled records to their
//! partition's state through the engine, in order, publishes the outputs through the record
//! collector, keeps the reputation table current, and seals and commits epoch by epoch (see
//! [`super::epoch`]).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};

use super::ServiceError;
use super::clients::QuietReader;
use super::contexts::Committers;
use super::core::{Core, MAX_EPOCHS_IN_FLIGHT, REVIEWER_RELEASES_PER_PASS, lock, wall_ms};
use super::poll::{Batch, Polled, Source};
use super::repartition::{self, forward_key};
use crate::changelog::Unit;
use crate::config::Config;
use crate::engine::{InputTopic, Outcome, PartitionState, Record};
use crate::telemetry::events::{
    AdvertisedUrlConflict, ClocksDisagree, InternalEvent, RecordRevoked, RecordsProcessed,
};
use crate::topics::partition_of;

impl Core {
    /// Processes one input record of an owned partition, restoring its state first if needed.
    fn process(&mut self, polled: &Polled<'_>) -> Result<(), ServiceError> {
        if polled.source == Source::Forward {
            return self.forward(polled);
        }
        let msg = &polled.msg;
        let topic = polled.topic;
        let key = self.unit_of(polled);
        if !self.tasks.units.contains_key(&key) {
            if self.revoked(self.tasks.fences.get(&key).copied(), polled) {
                return Ok(());
            }
            self.tasks.assigned.push(key);
            self.restore_assigned()?;
        }
        self.check_position(polled)?;
        let Some(unit) = self.tasks.units.get_mut(&key) else {
            return Ok(());
        };
        let offset = msg.offset();
        unit.pending = Some(offset);
        let clock_ms =
            u64::try_from(self.now.duration_since(self.started).as_millis()).unwrap_or(u64::MAX);
        let record = polled
            .record(&self.topics, self.now_ms)
            .received(Some(clock_ms), self.tasks.held_projects);
        let arrived = record.read_at_ms.or(Some(self.now_ms));
        if let (Source::Repartitioned(_), Some(forwarded_ms)) = (polled.source, record.read_at_ms)
            && let Some(ahead_ms) = self
                .clock_watch
                .forwarded(forwarded_ms, self.now_ms, self.now)
        {
            ClocksDisagree { ahead_ms }.emit(&self.metrics);
        }
        self.out.clear();
        let outcome = if unit.skip_through.is_some_and(|s| offset <= s) {
            Outcome::Replayed
        } else {
            let before = unit.state.project_count();
            let journaled = unit.state.journal.as_ref().map_or(0, Vec::len);
            // Timing every record would cost more than some records take: sample one in 16.
            self.processed += 1;
            let started = self.processed.is_multiple_of(16).then(Instant::now);
            let outcome = self.engine.process(
                &mut unit.state,
                &mut self.reputations,
                &record,
                &mut self.out,
            );
            self.tasks.held_projects += unit.state.project_count().saturating_sub(before);
            self.view
                .applied_after(key, &unit.state, journaled, &self.out);
            if let Some(started) = started {
                self.metrics
                    .processing
                    .observe(started.elapsed().as_secs_f64());
            }
            outcome
        };
        // A tick is the service's own record, not an input's.
        if !record.is_tick() {
            self.tally.count(topic, outcome);
        }
        self.publish_out(arrived)
    }

    /// Fails if `polled`, a record of a partition still owned (its caller dropped any polled
    /// before a revocation), is the first read of its partition since assignment and lies
    /// below the group's committed offset (see `ServiceError::LogWentBack`).
    fn check_position(&mut self, polled: &Polled<'_>) -> Result<(), ServiceError> {
        if self.tasks.committed.is_empty() {
            return Ok(());
        }
        let topic = match polled.source {
            Source::Forward => self.topics.input_name(polled.topic),
            _ => self.log_name(polled.topic),
        };
        let Some(at) = self
            .tasks
            .committed
            .iter()
            .position(|(t, p, _)| t == topic && *p == polled.partition)
        else {
            return Ok(());
        };
        let (topic, _, committed) = self.tasks.committed.swap_remove(at);
        let offset = polled.msg.offset();
        if offset < committed {
            return Err(ServiceError::LogWentBack {
                topic,
                partition: polled.partition,
                offset,
                committed,
                group: self.config.kafka.group_id.clone(),
                state: self.topics.state().to_owned(),
            });
        }
        Ok(())
    }

    /// The unit whose state `polled` applies to: its partition of the project log, or with
    /// `by_key` its own input partition.
    fn unit_of(&self, polled: &Polled<'_>) -> Unit {
        match polled.source {
            Source::Repartitioned(_) => Unit::projects(polled.partition),
            Source::Input | Source::Forward => Unit::input(polled.topic, polled.partition),
        }
    }

    /// Whether `polled` was polled before its partition was revoked by revocation number
    /// `revoked` (if ever): then it is dropped unapplied, and counted (its offset was never
    /// committed; the next owner reads it).
    pub(super) fn revoked(&self, revoked: Option<u64>, polled: &Polled<'_>) -> bool {
        let revoked = revoked.is_some_and(|revoked| polled.generation < revoked);
        if revoked {
            RecordRevoked {
                topic: self.topics.input_name(polled.topic),
            }
            .emit(&self.metrics);
        }
        revoked
    }

    /// Applies a record of a table every instance reads whole: the instance directory's or the
    /// reputations'.
    pub(super) fn global(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), ServiceError> {
        if msg.topic() == self.topics.instances() {
            self.instance(msg);
            return Ok(());
        }
        self.reputation(msg)
    }

    /// Notes an instance's announcement that it owns a repartition-topic partition. Another
    /// instance announcing this one's URL since it started is reported: clients sent there
    /// would reach the wrong instance (or none).
    fn instance(&self, msg: &BorrowedMessage<'_>) {
        #[derive(serde::Deserialize)]
        struct Announced {
            url: String,
            instance: Option<String>,
        }
        let partition = std::str::from_utf8(msg.key().unwrap_or_default())
            .ok()
            .and_then(|k| k.parse::<i32>().ok());
        let announced = msg
            .payload()
            .and_then(|p| serde_json::from_slice::<Announced>(p).ok());
        match (partition, announced) {
            (Some(partition), Some(a)) => {
                let since = msg
                    .timestamp()
                    .to_millis()
                    .is_some_and(|t| t >= self.started_ms);
                let other = a.instance.as_ref().is_some_and(|i| *i != self.instance);
                if since && other && a.url == self.config.http.advertised() {
                    AdvertisedUrlConflict {
                        url: &a.url,
                        partition,
                    }
                    .emit(&self.metrics);
                }
                self.view.directory.insert(partition, a.url);
            }
            _ => tracing::warn!(
                offset = msg.offset(),
                "ignoring a malformed record of the instance directory"
            ),
        }
    }

    /// Applies a `jury.reputations` record to the global table.
    fn reputation(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), ServiceError> {
        let record = reputation_record(msg);
        self.out.clear();
        let mut scratch = PartitionState::default();
        let outcome =
            self.engine
                .process(&mut scratch, &mut self.reputations, &record, &mut self.out);
        RecordsProcessed {
            topic: msg.topic(),
            outcome,
            count: 1,
        }
        .emit(&self.metrics);
        self.metrics.reputations.set(self.reputations.len() as i64);
        self.publish_out(Some(wall_ms()))
    }
}

impl Core {
    /// Forwards one input record to the repartition topic by its project, or dead-letters it
    /// if its project cannot be read or it would not fit a record forwarded with its key.
    pub(super) fn forward(&mut self, polled: &Polled<'_>) -> Result<(), ServiceError> {
        let key = (polled.topic, polled.partition);
        let fence = self.tasks.forward_fences.get(&key).copied();
        if self.revoked(fence, polled) {
            return Ok(());
        }
        self.check_position(polled)?;
        let msg = &polled.msg;
        self.tasks.forwarded.insert(key, msg.offset());
        let record = polled.record(&self.topics, self.now_ms);
        let limit = self.forward_limit;
        let routed = match &polled.routed {
            Some(routed) => routed.clone(),
            None => self.engine.project_of(&record),
        };
        let routed = routed.and_then(|project| {
            repartition::check_size(&record, &project, limit)?;
            Ok(project)
        });
        match routed {
            Ok(project) => {
                let payload = record.payload.unwrap_or_default();
                let partition = partition_of(&project, self.config.kafka.partitions);
                if self.faults.refuses_forward(payload) {
                    let error = KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge,
                    );
                    self.collector
                        .refuse_forward(&forward_key(&record), payload, &error);
                    self.tally.forwarded(polled.topic);
                    return Ok(());
                }
                self.collector.forward(
                    (self.topics.repartition(), partition),
                    &forward_key(&record),
                    payload,
                )?;
                self.tally.forwarded(polled.topic);
                Ok(())
            }
            Err(rejection) => {
                self.out.clear();
                let outcome = self.engine.reject(&record, &rejection, &mut self.out);
                self.tally.count(polled.topic, outcome);
                self.publish_out(record.read_at_ms)
            }
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
    /// `output.reviewers_coalesce_ms`: held reviewer records are published this often; `None`
    /// (0) at the end of every epoch.
    reviewers: Option<Duration>,
    /// How often a tick goes to each owned partition of the project log: a tenth of
    /// `sessions.idle_timeout_secs`, within 1..=60 s (60 s when that is 0: the ticks also
    /// refit the leaderboard categories whose ratings lack a session, so a quiet category's
    /// waits at most a minute); `None` when there is no project log (`by_key`).
    tick: Option<Duration>,
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
            reviewers: match config.output.reviewers_coalesce_ms {
                0 => None,
                r => Some(ms(r)),
            },
            tick: match config.sessions.idle_timeout_secs {
                _ if !config.input.repartitions() => None,
                0 => Some(MAX_TICK),
                idle => Some(ms(idle.saturating_mul(100)).clamp(ms(1000), MAX_TICK)),
            },
        }
    }
}

/// The longest a project-log partition goes without a tick (see [`Clocks::tick`]).
const MAX_TICK: Duration = Duration::from_secs(60);

/// The engine's view of a `jury.reputations` record, read by its own consumer.
pub(super) fn reputation_record<'m>(msg: &'m BorrowedMessage<'_>) -> Record<'m> {
    message_record(msg, InputTopic::Reputations, msg.topic())
}

/// The engine's view of a message read through an rdkafka consumer (not the service's own
/// queue, see `record`), as input topic `input` named `topic`: the reputation table's records,
/// and the load benchmark's loop that validates events as the polling thread does.
pub fn message_record<'m>(msg: &'m impl Message, input: InputTopic, topic: &'m str) -> Record<'m> {
    Record::new(topic, Some(input), msg.payload())
        .at(Some(msg.partition()), Some(msg.offset()))
        .keyed(msg.key(), msg.timestamp().to_millis())
}

/// A stage's processing thread: applies (or forwards) polled batches in order, keeps the
/// reputation table current if given its reader (the applying stage), and seals, produces and
/// commits cycle by cycle, until `stop` is set or polling ends. Applied batches go back to the
/// stage's polling thread through `recycle`.
pub(super) fn process_records<'c>(
    core: &Mutex<Core>,
    (consumers, failed): (&Committers<'_>, &Mutex<Option<ServiceError>>),
    (batches, recycle, queued): (Receiver<Batch<'c>>, &SyncSender<Batch<'c>>, &AtomicUsize),
    reputations: Option<&BaseConsumer<QuietReader>>,
    stop: &AtomicBool,
) -> Result<(), ServiceError> {
    let clocks = Clocks::of(&lock(core).config);
    let mut cycle_started = Instant::now();
    let mut coalesced = Instant::now();
    let mut reviewers_released = Instant::now();
    let mut ticked = Instant::now();
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
        c.now_ms = wall_ms().saturating_sub(c.faults.clock_behind_ms);
        c.restore_assigned()?;
        if let Some(records) = &batch {
            last_batch = c.now;
            for polled in records {
                c.process(polled)?;
            }
            c.flush_tally();
        }
        if let Some(batch) = batch {
            // Back to its polling thread, which destroys its messages as it empties it (or, if
            // it has enough batches, here on drop).
            let _ = recycle.try_send(batch);
        }
        // The first failure outside this thread (see `contexts::GroupContext::fail`).
        if let Some(e) = failed.lock().ok().and_then(|mut f| f.take()) {
            return Err(e);
        }
        if let Some(reputations) = reputations
            && last_reputations.elapsed() >= Duration::from_millis(10)
        {
            last_reputations = Instant::now();
            for _ in 0..1024 {
                match reputations.poll(Duration::ZERO) {
                    Some(Ok(m)) => c.global(&m)?,
                    Some(Err(KafkaError::PartitionEOF(_))) | None => break,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "reputations");
                        break;
                    }
                }
            }
        }
        let idle = last_batch.elapsed() >= clocks.idle && c.epoch_pending();
        let sealing = cycle_started.elapsed() >= clocks.cycle || idle;
        let reviewers_due = clocks
            .reviewers
            .is_none_or(|every| reviewers_released.elapsed() >= every);
        if reviewers_due && clocks.reviewers.is_some() {
            c.begin_reviewer_release();
            reviewers_released = Instant::now();
        } else if reviewers_due && sealing {
            c.release_reviewers()?;
        }
        c.release_some_reviewers(REVIEWER_RELEASES_PER_PASS)?;
        if clocks.tick.is_some_and(|every| ticked.elapsed() >= every) {
            c.write_ticks()?;
            ticked = Instant::now();
        }
        if sealing {
            c.seal()?;
            cycle_started = Instant::now();
            coalesced = cycle_started;
        } else if coalesced.elapsed() >= clocks.coalesce {
            c.release_held()?;
            coalesced = Instant::now();
        }
        if c.epochs.sealed.len() > MAX_EPOCHS_IN_FLIGHT {
            c.drain(consumers)?;
        } else if !c.epochs.sealed.is_empty() || !c.epochs.uncommitted.is_empty() {
            c.advance(consumers)?;
        }
        c.report_progress();
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

    /// Ticks come every tenth of the idle timeout, within 1–60 s, and every minute with idle
    /// completion off (they also refit leaderboards); never without a project log.
    #[test]
    fn ticks_come_within_a_minute_and_only_with_a_project_log() {
        use crate::config::Partitioning;
        let tick = |idle: u64, partitioning: Partitioning| {
            let mut config = Config::default();
            config.sessions.idle_timeout_secs = idle;
            config.input.partitioning = partitioning;
            Clocks::of(&config).tick
        };
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(tick(6000, Partitioning::Repartition), secs(60));
        assert_eq!(tick(600, Partitioning::Repartition), secs(60));
        assert_eq!(tick(30, Partitioning::Repartition), secs(3));
        assert_eq!(tick(2, Partitioning::Repartition), secs(1));
        assert_eq!(tick(0, Partitioning::Repartition), secs(60));
        assert_eq!(tick(600, Partitioning::ByKey), None);
    }
}
