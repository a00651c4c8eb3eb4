//! The processing thread (Kafka Streams' processor): applies polled records to their partition's
//! state through the engine, in order, prefetching a few records ahead (see
//! [`crate::prefetch`]), publishes the outputs through the record collector, keeps the
//! reputation table current, and seals and commits epoch by epoch (see [`super::epoch`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};

use super::ServiceError;
use super::collector::Collector;
use super::contexts::{GroupContext, QuietReader, lock};
use super::epoch::{Epochs, MAX_EPOCHS_IN_FLIGHT};
use super::faults::Faults;
use super::poll::{Polled, record};
use super::tasks::Tasks;
use crate::config::Config;
use crate::engine::output::Output;
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, IdMap, InputTopic, Outcome, PartitionState, Record, Settings};
use crate::prefetch;
use crate::telemetry::events::{InternalEvent, RecordRevoked, RecordsProcessed};
use crate::telemetry::http::Health;
use crate::telemetry::metrics::Metrics;
use crate::topics::TopicTable;

/// How many records ahead of the one it applies the processing thread prefetches state (see
/// [`Engine::prefetch`]): a record takes about a microsecond to apply, several times a cache
/// miss, so a few records ahead is early enough, and late enough that the line is still there.
const PREFETCH_AHEAD: usize = 4;

/// Everything the processing loop and the rebalance callback share.
pub(super) struct Core {
    pub engine: Engine,
    /// The service's configuration (the engine has its own part of it).
    pub config: Config,
    pub topics: TopicTable,
    /// The producer and the epoch it fills.
    pub collector: Collector,
    /// The owned partitions' state.
    pub tasks: Tasks,
    /// The sealed epochs.
    pub epochs: Epochs,
    pub reputations: ReputationTable,
    out: Vec<Output>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub stop: Arc<AtomicBool>,
    pub last_gauges: Instant,
    /// The time at the start of the current pass (one clock read per pass, not per record).
    now: Instant,
    /// When the service started: records carry `now` as milliseconds since, for coalescing.
    started: Instant,
    /// Crash injection for the recovery tests (see [`super::faults`]).
    pub faults: Faults,
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

    fn flush(&mut self, topics: &TopicTable, metrics: &Metrics) {
        for ((topic, outcome), n) in self.counts.drain() {
            RecordsProcessed {
                topic: topics.input_name(topic),
                outcome,
                count: n,
            }
            .emit(metrics);
        }
    }
}

impl Core {
    /// A processor with no partitions that runs `config`, whose records go out through
    /// `collector` and whose epochs are sealed into `epochs`.
    pub(super) fn new(
        config: &Config,
        collector: Collector,
        epochs: Epochs,
        (metrics, health, stop): (&Arc<Metrics>, &Arc<Health>, &Arc<AtomicBool>),
    ) -> Core {
        Core {
            engine: Engine::new(Settings::of(config)),
            config: config.clone(),
            topics: TopicTable::new(&config.topics),
            collector,
            tasks: Tasks::default(),
            epochs,
            reputations: ReputationTable::default(),
            out: Vec::new(),
            metrics: Arc::clone(metrics),
            health: Arc::clone(health),
            stop: Arc::clone(stop),
            last_gauges: Instant::now(),
            now: Instant::now(),
            started: Instant::now(),
            faults: Faults::from_env(),
            processed: 0,
            tally: Tally::default(),
        }
    }

    /// Publishes `outs` in order.
    fn publish(&mut self, outs: &[Output]) -> Result<(), ServiceError> {
        outs.iter().try_for_each(|o| {
            let topic = self.topics.output_name(o.topic);
            self.collector.publish(topic, o)
        })
    }

    /// Restores every assigned partition not restored yet (see [`Tasks::restore_assigned`]).
    pub(super) fn restore_assigned(&mut self) -> Result<(), ServiceError> {
        if self.tasks.assigned.is_empty() {
            return Ok(());
        }
        self.tasks
            .restore_assigned(&self.config, &self.topics, &self.metrics)
    }

    fn process(&mut self, polled: &Polled<'_>) -> Result<(), ServiceError> {
        let msg = &polled.msg;
        let topic = polled.topic;
        let key = (topic, polled.partition);
        if !self.tasks.units.contains_key(&key) {
            if self
                .tasks
                .fences
                .get(&key)
                .is_some_and(|&revoked| polled.generation < revoked)
            {
                RecordRevoked {
                    topic: self.topics.input_name(topic),
                }
                .emit(&self.metrics);
                return Ok(());
            }
            self.tasks.assigned.push(key);
            self.restore_assigned()?;
        }
        let Some(unit) = self.tasks.units.get_mut(&key) else {
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
            ..record(msg, topic, self.topics.input_name(topic))
        };
        // Timing every record would cost more than some records take: sample one in 16.
        self.processed += 1;
        let started = self.processed.is_multiple_of(16).then(Instant::now);
        self.out.clear();
        let outcome = match &polled.votes {
            Some(prepared) => self.engine.apply_prepared(
                &mut unit.state,
                &mut self.reputations,
                &record,
                prepared,
                &mut self.out,
            ),
            None => self.engine.process(
                &mut unit.state,
                &mut self.reputations,
                &record,
                &mut self.out,
            ),
        };
        if let Some(started) = started {
            self.metrics
                .processing
                .observe(started.elapsed().as_secs_f64());
        }
        self.tally.count(topic, outcome);
        let outs = std::mem::take(&mut self.out);
        let result = self.publish(&outs);
        self.out = outs;
        result
    }

    fn prefetch(&self, polled: &Polled<'_>) {
        let Some(prepared) = &polled.votes else {
            return;
        };
        if let Some(payload) = polled.msg.payload() {
            prefetch::bytes(payload);
        }
        if let Some(unit) = self.tasks.units.get(&(polled.topic, polled.partition)) {
            self.engine.prefetch(&unit.state, prepared);
        }
    }

    pub(super) fn reputation(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), ServiceError> {
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
        let outs = std::mem::take(&mut self.out);
        let result = self.publish(&outs);
        self.out = outs;
        result
    }

    pub(super) fn release_held(&mut self, keys: &[(InputTopic, i32)]) -> Result<(), ServiceError> {
        // Collected into the kept output buffer first (the units are borrowed while they
        // release them).
        let mut held = std::mem::take(&mut self.out);
        held.clear();
        for key in keys {
            if let Some(owned) = self.tasks.units.get_mut(key) {
                self.engine.release_held(&mut owned.state, &mut held);
            }
        }
        let released = self.publish(&held);
        self.out = held;
        released
    }

    pub(super) fn flush_tally(&mut self) {
        self.tally.flush(&self.topics, &self.metrics);
    }

    pub(super) fn update_gauges(&mut self) {
        self.last_gauges = Instant::now();
        let mut open = 0;
        let mut scores: Vec<(&str, u64, f64)> = Vec::new();
        for owned in self.tasks.units.values() {
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
        let m = &self.config.metrics;
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

/// The engine's view of a `jury.reputations` record, read by its own consumer.
pub(super) fn reputation_record<'m>(msg: &'m BorrowedMessage<'_>) -> Record<'m> {
    message_record(msg, InputTopic::Reputations, msg.topic())
}

/// The engine's view of a message read through an rdkafka consumer (not the service's own
/// queue, see `record`), as input topic `input` named `topic`: the reputation table's records,
/// and the load benchmark's loop that validates events as the polling thread does.
pub fn message_record<'m>(msg: &'m impl Message, input: InputTopic, topic: &'m str) -> Record<'m> {
    Record {
        topic,
        input: Some(input),
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
pub(super) fn process_records<'c>(
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
    let clocks = Clocks::of(&lock(core).config);
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
        c.restore_assigned()?;
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
            let keys = c.tasks.owned_keys();
            c.release_held(&keys)?;
            coalesced = Instant::now();
        }
        if c.epochs.sealed.len() > MAX_EPOCHS_IN_FLIGHT {
            c.drain(consumer, CommitMode::Async)?;
        } else if !c.epochs.sealed.is_empty() {
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
