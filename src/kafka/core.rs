//! The processor's state, shared by the processing thread ([`super::process`]), the commit
//! protocol ([`super::epoch`]) and the rebalance callbacks ([`super::contexts`]), which take it
//! through one lock: the engine, the owned partitions, the record collector and the sealed
//! epochs, with the few operations all of them use.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::ServiceError;
use super::collector::{ACKED_EPOCHS, Collector};
use super::faults::Faults;
use super::repartition;
use super::stage::Stage;
use super::tasks::Tasks;
use super::wall_clock::{ClockWatch, TickClock};
use crate::changelog::{self, Unit, UnitKind};
use crate::config::Config;
use crate::engine::output::Output;
use crate::engine::reputation::ReputationTable;
use crate::engine::{Engine, IdMap, InputTopic, Outcome, PartitionState};
use crate::queries::view::View;
use crate::telemetry::events::{
    ClockStepped, InternalEvent, RecordsForwarded, RecordsProcessed, ReviewersReleased,
};
use crate::telemetry::http::Health;
use crate::telemetry::metrics::Metrics;
use crate::topics::TopicTable;

/// Sealed epochs allowed in flight before processing waits for acknowledgements.
pub(super) const MAX_EPOCHS_IN_FLIGHT: usize = 50;

const _: () = assert!(ACKED_EPOCHS > MAX_EPOCHS_IN_FLIGHT + 2);

/// Projects whose reviewer records one pass of the processing loop fits and publishes while a
/// release is under way (see [`Core::release_some_reviewers`]): a small share of a pass, so
/// that the records behind a release wait for a few projects' fits, not for every project's.
pub(super) const REVIEWER_RELEASES_PER_PASS: usize = 256;

/// Everything the processing loop and the rebalance callback share.
pub(super) struct Core {
    /// The stage whose records it processes: the applying stage's holds the partitions' state,
    /// and only it sets the gauges of that state.
    pub stage: Stage,
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
    pub out: Vec<Output>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub stop: Arc<AtomicBool>,
    pub last_gauges: Instant,
    /// The time at the start of the current pass (one clock read per pass, not per record),
    /// and the wall clock then.
    pub now: Instant,
    pub now_ms: i64,
    /// When the service started: records carry `now` as milliseconds since, for coalescing.
    pub started: Instant,
    /// Crash injection for the recovery tests (see [`super::faults`]).
    pub faults: Faults,
    /// The largest record the forwarding stage may produce (see
    /// [`Config::producer_record_limit`]).
    pub forward_limit: usize,
    /// Records processed, and their outcomes not yet added to the metrics.
    pub processed: u64,
    pub tally: Tally,
    /// What the interactive queries read (see [`crate::queries`]).
    pub view: Arc<View>,
    /// This process among the instances: its id in its announcements, and when it started
    /// (wall clock, ms), so that only announcements made since count as conflicts.
    pub instance: String,
    pub started_ms: i64,
    /// The time the ticks this processor writes carry.
    pub tick_clock: TickClock,
    /// Whether the forwards it applies come from a clock ahead of its own.
    pub clock_watch: ClockWatch,
}

/// Outcome counts kept locally and added to the Prometheus counters once per pass (up to
/// [`PASS_RECORDS`] records): a labelled counter lookup per record would cost more than parsing
/// some records.
#[derive(Default)]
pub(super) struct Tally {
    counts: IdMap<(InputTopic, Outcome), u64>,
    forwarded: IdMap<InputTopic, u64>,
}

impl Tally {
    pub fn count(&mut self, topic: InputTopic, outcome: Outcome) {
        *self.counts.entry((topic, outcome)).or_default() += 1;
    }

    pub fn forwarded(&mut self, topic: InputTopic) {
        *self.forwarded.entry(topic).or_default() += 1;
    }

    fn flush(&mut self, topics: &TopicTable, metrics: &Metrics) {
        for (topic, n) in self.forwarded.drain() {
            RecordsForwarded {
                topic: topics.input_name(topic),
                count: n,
            }
            .emit(metrics);
        }
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

/// The work of one cycle on its way to being committed. Epochs move strictly in order: an
/// epoch's changelog is sent once all its outputs are acknowledged (and every earlier epoch is
/// committed), and its offsets are committed once its changelog is acknowledged. Consumption
/// never waits for this unless too many epochs are in flight.
pub(super) struct Epoch {
    pub id: u64,
    pub outputs: u64,
    pub changelog: changelog::Records,
    pub changelog_sent: bool,
    /// The next offset to read of each partition it consumed, by topic and partition.
    pub commits: Offsets,
    pub sealed_at: Instant,
}

/// Offsets to commit: the next offset to read, by topic and partition.
pub(super) type Offsets = BTreeMap<(String, i32), i64>;

/// The sealed epochs and what sealing them needs.
pub(super) struct Epochs {
    /// Sealed epochs waiting for acknowledgements, oldest first.
    pub sealed: VecDeque<Epoch>,
    /// Renders each epoch's changelog, keeping its working memory.
    pub renderer: changelog::Renderer,
    /// Changelog buffers of sent epochs, for the next ones (see [`changelog::Records`]).
    pub spare_records: Vec<changelog::Records>,
    /// Offsets of committed epochs not yet committed to their stage's group (see
    /// [`super::contexts::Committers`]), or whose commit failed.
    pub uncommitted: Offsets,
    /// After a failed commit, when to try again.
    pub retry_commits_at: Option<Instant>,
    /// Since when commits have been refused, until the offsets waiting are committed or gone.
    pub refused_since: Option<Instant>,
}

impl Epochs {
    /// Epochs whose changelog redo records name `run` (see [`changelog::Renderer::new`]).
    pub fn new(run: u64, redo_chunk_bytes: usize) -> Epochs {
        Epochs {
            sealed: VecDeque::new(),
            renderer: changelog::Renderer::new(run, redo_chunk_bytes),
            spare_records: Vec::new(),
            uncommitted: Offsets::new(),
            retry_commits_at: None,
            refused_since: None,
        }
    }

    /// Adds `offsets` to those waiting to be committed (a committed epoch's, or a failed
    /// commit's put back), keeping the later of two offsets of a partition.
    pub fn requeue(&mut self, offsets: Offsets) {
        for (at, offset) in offsets {
            let next = self.uncommitted.entry(at).or_default();
            *next = (*next).max(offset);
        }
    }

    /// Once no offsets wait (all committed, or their partitions revoked), no commit is refused
    /// and none is to be made again.
    pub fn forget_refusals_if_settled(&mut self) {
        if self.uncommitted.is_empty() {
            self.retry_commits_at = None;
            self.refused_since = None;
        }
    }
}

impl Core {
    /// A processor of `stage` with no partitions that runs `config`, whose records go out
    /// through `collector` and whose epochs are sealed into `epochs`.
    pub(super) fn new(
        stage: Stage,
        config: &Config,
        (engine, topics): (Engine, TopicTable),
        collector: Collector,
        epochs: Epochs,
        (metrics, health, stop): (&Arc<Metrics>, &Arc<Health>, &Arc<AtomicBool>),
        view: Arc<View>,
    ) -> Core {
        // A setting, not a reading: shown once, beside the `jurystream_projects` it bounds.
        metrics
            .projects_limit
            .set(i64::try_from(config.limits.max_projects).unwrap_or(i64::MAX));
        metrics
            .judge_items_limit
            .set(i64::try_from(config.judge_quality.max_items).unwrap_or(i64::MAX));
        metrics
            .reviewers_limit
            .set(i64::try_from(config.reviewers.max_reviewers).unwrap_or(i64::MAX));
        metrics
            .audit_judges_limit
            .set(i64::try_from(config.bias.project_max_judges).unwrap_or(i64::MAX));
        Core {
            stage,
            engine,
            config: config.clone(),
            topics,
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
            now_ms: wall_ms(),
            started: Instant::now(),
            faults: Faults::from_env(),
            forward_limit: config.producer_record_limit(),
            processed: 0,
            tally: Tally::default(),
            view,
            instance: format!("{}-{}", std::process::id(), wall_ms()),
            started_ms: wall_ms(),
            tick_clock: TickClock::start(wall_ms(), Instant::now()),
            clock_watch: ClockWatch::default(),
        }
    }

    /// Publishes the records in the output buffer (`out`) in order, caused by an input record
    /// the service first read at wall-clock `since_ms` if any ([`Record::read_at_ms`], for the
    /// publication latency; see [`Collector::publish`]); the buffer keeps its allocation for the
    /// next record.
    ///
    /// [`Record::read_at_ms`]: crate::engine::Record::read_at_ms
    pub(super) fn publish_out(&mut self, since_ms: Option<i64>) -> Result<(), ServiceError> {
        let outs = std::mem::take(&mut self.out);
        let result = outs.iter().try_for_each(|o| {
            let topic = self.topics.output_name(o.topic);
            self.collector.publish(topic, o, since_ms)
        });
        self.out = outs;
        result
    }

    /// Restores every assigned partition not restored yet (see [`Tasks::restore_assigned`]).
    pub(super) fn restore_assigned(&mut self) -> Result<(), ServiceError> {
        if self.tasks.assigned.is_empty() {
            return Ok(());
        }
        let restored = self.tasks.restore_assigned(
            (&self.config, &self.topics, &self.metrics),
            (self.faults.restore_stops_short, &self.stop),
        )?;
        for key in restored {
            if let Some(owned) = self.tasks.units.get_mut(&key) {
                self.view
                    .restored(key, &owned.state, self.engine.settings());
                self.engine.republish_reviewers(&mut owned.state);
            }
        }
        Ok(())
    }

    /// Holds every reviewer record of the owned partitions for the next release (see
    /// [`crate::engine::Engine::republish_reviewers`]): the applying stage calls it once a
    /// rebalance ends. A member the group coordinator left out of a generation while it still
    /// ran (a zombie) may have restored one of these partitions meanwhile and published its
    /// reviewer records as they were at the last commit, after this owner's newer ones; an
    /// owner publishes only records that changed, so without this the table would keep the
    /// zombie's. Its last writes come in its revocation callback, which waits for their
    /// acknowledgements before it rejoins; the rebalance its rejoining starts ends with this
    /// call on the owner, after them.
    pub(super) fn republish_owned_reviewers(&mut self) {
        for owned in self.tasks.units.values_mut() {
            self.engine.republish_reviewers(&mut owned.state);
        }
    }

    /// Refits the leaderboard categories of the owned partitions whose ratings lack a session
    /// (see [`crate::engine::Engine::refit_leaderboards`]) and publishes their rows: before
    /// partitions go or the service stops, so that a clean stop or a handover leaves the
    /// ratings with every session applied, as the next tick would. The refits are noted in the
    /// state's journal and reach the changelog with the partition's next flush (one that applied
    /// records): a partition that goes or stops before one keeps the category's flag there, and
    /// its next owner refits it again at its first tick, to the same ratings (a fit as of the
    /// category's latest session, from the facts).
    pub(super) fn refit_leaderboards(&mut self) -> Result<(), ServiceError> {
        self.publish_from_owned(|engine, state, out| {
            engine.refit_leaderboards(state, out);
            true
        })
    }

    /// Publishes what `each` appends for the owned partitions' states, in partition order, and
    /// shows it to the queries' view: the outputs the service makes outside a record (held
    /// scores, a drain's refits, a release of reviewer records). `each` returns whether to go
    /// on to the next.
    fn publish_from_owned(
        &mut self,
        mut each: impl FnMut(&Engine, &mut PartitionState, &mut Vec<Output>) -> bool,
    ) -> Result<(), ServiceError> {
        self.out.clear();
        for key in self.tasks.owned_keys() {
            let Some(owned) = self.tasks.units.get_mut(&key) else {
                continue;
            };
            let from = self.out.len();
            let go_on = each(&self.engine, &mut owned.state, &mut self.out);
            self.view.published(key, &owned.state, &self.out[from..]);
            if !go_on {
                break;
            }
        }
        if self.out.is_empty() {
            return Ok(());
        }
        self.publish_out(None)
    }

    /// Publishes every reviewer record held in the partitions this instance owns (see
    /// [`crate::engine::Engine::release_reviewers`]), a release under way included: before
    /// partitions go or the service stops, and at the end of every epoch when
    /// `output.reviewers_coalesce_ms` is 0.
    pub(super) fn release_reviewers(&mut self) -> Result<(), ServiceError> {
        self.begin_reviewer_release();
        self.release_some_reviewers(usize::MAX)
    }

    /// Starts a release of the reviewer records held in the partitions this instance owns,
    /// which [`Core::release_some_reviewers`] publishes pass by pass (see
    /// [`crate::engine::Engine::begin_reviewer_release`]).
    pub(super) fn begin_reviewer_release(&mut self) {
        for owned in self.tasks.units.values_mut() {
            self.engine.begin_reviewer_release(&mut owned.state);
        }
    }

    /// Publishes the reviewer records of at most `budget` projects of the release under way, in
    /// the order of the partitions (each pass of the processing loop,
    /// [`REVIEWER_RELEASES_PER_PASS`]). Most passes have no release under way and return at once,
    /// without listing the partitions.
    pub(super) fn release_some_reviewers(&mut self, mut budget: usize) -> Result<(), ServiceError> {
        let idle = |t: &super::tasks::Task| t.state.held_reviewers.releasing.is_empty();
        if self.tasks.units.values().all(idle) {
            return Ok(());
        }
        let (started, asked) = (Instant::now(), budget);
        self.publish_from_owned(|engine, state, out| {
            let before = state.held_reviewers.releasing.len();
            if before > 0 {
                let left = engine.release_some_reviewers(state, out, budget);
                budget -= before - left;
            }
            budget > 0
        })?;
        let pending = self.tasks.units.values();
        ReviewersReleased {
            fitted: (asked - budget) as u64,
            pending: pending
                .map(|t| t.state.held_reviewers.releasing.len() as u64)
                .sum(),
            seconds: started.elapsed().as_secs_f64(),
        }
        .emit(&self.metrics);
        Ok(())
    }

    /// Writes a tick (see [`crate::engine::TICK_TOPIC`]) to every partition of the project log
    /// this instance owns, in the current epoch: the sessions there learn that time passed even
    /// while their projects receive nothing. Its time is the ticks' clock's (see
    /// [`super::wall_clock`]), and a step of the wall clock is said.
    ///
    /// Only a processor that owns some writes ticks and reads their clock: the forwarding
    /// stage's never does, so a step is said once.
    pub(super) fn write_ticks(&mut self) -> Result<(), ServiceError> {
        let mut owned = self.tasks.owned_keys();
        owned.retain(|key| key.kind == UnitKind::Projects);
        if owned.is_empty() {
            return Ok(());
        }
        let wall = wall_ms().saturating_add(self.faults.clock_step_ms());
        let read = self.tick_clock.read(wall, Instant::now());
        if let Some(by_ms) = read.stepped_ms {
            ClockStepped { by_ms }.emit(&self.metrics);
        }
        let key = repartition::tick_key(read.ms);
        for unit in owned {
            self.collector
                .forward((self.topics.repartition(), unit.partition), &key, b"")?;
        }
        Ok(())
    }

    /// Publishes the scores held back by coalescing (see [`crate::engine::Coalescing`]) in the
    /// owned partitions, in order. Runs every `output.scores_coalesce_ms` and when an epoch is
    /// sealed, so a held score waits at most one coalescing interval and is always in the epoch
    /// of the records that caused it.
    pub(super) fn release_held(&mut self) -> Result<(), ServiceError> {
        self.publish_from_owned(|engine, state, out| {
            engine.release_held(state, out);
            true
        })
    }

    /// Adds the outcomes counted since the last call to the metrics.
    pub(super) fn flush_tally(&mut self) {
        self.tally.flush(&self.topics, &self.metrics);
    }

    /// Whether the current epoch has anything to seal: records processed or outputs sent.
    pub(super) fn epoch_pending(&self) -> bool {
        self.collector.epoch_outputs > 0
            || !self.tasks.forwarded.is_empty()
            || self.tasks.units.values().any(|u| u.pending.is_some())
    }

    /// The topic whose partitions the state of `topic`'s records follows: the repartition
    /// topic, or with `by_key` the input itself.
    pub(super) fn log_name(&self, topic: InputTopic) -> &str {
        if self.config.input.repartitions() {
            self.topics.repartition()
        } else {
            self.topics.input_name(topic)
        }
    }

    /// The topic whose partition `unit` is.
    pub(super) fn unit_log(&self, unit: Unit) -> &str {
        super::tasks::unit_log(&self.topics, unit)
    }

    /// The unit of partition `partition` of topic `topic` (see [`Tasks`]): a partition of the
    /// repartition topic, or of an input with `by_key`; none for an input partition that is
    /// forwarded.
    fn unit_named(&self, topic: &str, partition: i32) -> Option<Unit> {
        if topic == self.topics.repartition() {
            return Some(Unit::projects(partition));
        }
        match self.topics.input(topic) {
            Some(t) if !self.config.input.repartitions() => Some(Unit::input(t, partition)),
            _ => None,
        }
    }

    /// Takes partition `partition` of `topic`: its state is restored when its first record
    /// arrives.
    pub(super) fn assign(&mut self, topic: &str, partition: i32) -> Result<(), ServiceError> {
        if let Some(unit) = self.unit_named(topic, partition) {
            self.view.assigned(unit);
            self.tasks.assigned.push(unit);
        }
        if topic == self.topics.repartition() {
            let url = self.config.http.advertised();
            self.collector
                .announce(self.topics.instances(), partition, (&url, &self.instance))?;
        }
        Ok(())
    }

    /// Drops partition `partition` of `topic`, taken by revocation number `generation`, after
    /// everything it processed is committed.
    pub(super) fn revoke(&mut self, topic: &str, partition: i32, generation: u64) {
        // Its next owner commits it from now on; a late commit of ours could only go back.
        self.epochs
            .uncommitted
            .remove(&(topic.to_owned(), partition));
        self.epochs.forget_refusals_if_settled();
        if let Some(unit) = self.unit_named(topic, partition) {
            self.view.revoked(unit);
            self.tasks.revoke(unit, generation);
        }
        if let Some(t) = self.topics.input(topic)
            && self.config.input.repartitions()
        {
            self.tasks.revoke_forwarding((t, partition), generation);
        }
    }

    /// Open sessions, projects, and the bounded project-score view.
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
                    .filter_map(|(p, v)| Some((p.as_str(), &v.votes.as_ref()?.score)))
                    .map(|(p, s)| (p, s.evaluations, s.score)),
            );
        }
        self.metrics.open_sessions.set(open as i64);
        self.metrics
            .query_projects
            .set(self.view.projects.len() as i64);
        self.metrics.projects.set(self.tasks.held_projects as i64);
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
        self.metrics.judge_kappa.reset();
        self.metrics.reviewer_reliability.reset();
        let min_items = self.config.reviewers.min_items;
        for (p, _, s) in shown {
            self.metrics.project_score.with_label_values(&[p]).set(s);
            let quality = self.tasks.units.values().filter_map(|o| o.state.quality(p));
            for q in quality {
                for (judge, kappa) in q.kappas() {
                    self.metrics
                        .judge_kappa
                        .with_label_values(&[p, judge])
                        .set(kappa);
                }
                let fitted = q.reviewers.checkpoint();
                let least = fitted.map(|f| f.least_reliable(min_items, 5));
                for (reviewer, reliability) in least.unwrap_or_default() {
                    self.metrics
                        .reviewer_reliability
                        .with_label_values(&[p, reviewer])
                        .set(reliability);
                }
            }
        }
        let (mut votes, mut waiting, mut forgotten) = (0, 0, 0);
        let (mut reviewers, mut largest, mut left_out) = (0, 0, 0);
        let (mut audit_largest, mut audit_forgotten) = (0, 0);
        for state in self.tasks.units.values().map(|o| &o.state) {
            let (items, waits) = state.quality.held();
            votes += items;
            waiting += waits;
            forgotten += state.quality.forgotten();
            for project in state.projects.values() {
                let q = &project.quality;
                let held = q.reviewers.fitted();
                reviewers += held;
                largest = largest.max(held);
                left_out += q.reviewers.left_out();
                if let Some(audit) = project.judges.as_ref().map(|j| &j.audit) {
                    audit_largest = audit_largest.max(audit.judges_followed());
                    audit_forgotten += audit.forgotten;
                }
            }
        }
        let m = &self.metrics;
        m.reviewers.set(reviewers as i64);
        m.reviewers_in_largest_project.set(largest as i64);
        m.reviewer_verdicts_left_out
            .set(i64::try_from(left_out).unwrap_or(i64::MAX));
        m.audit_judges_in_largest_project
            .set(i64::try_from(audit_largest).unwrap_or(i64::MAX));
        m.audit_judges_forgotten
            .set(i64::try_from(audit_forgotten).unwrap_or(i64::MAX));
        let items = &self.metrics.judge_items;
        items.with_label_values(&["votes"]).set(votes as i64);
        items.with_label_values(&["waiting"]).set(waiting as i64);
        self.metrics
            .judge_items_forgotten
            .set(i64::try_from(forgotten).unwrap_or(i64::MAX));
    }
}

/// Now, in milliseconds since the epoch.
pub(super) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The processor, whatever a panic elsewhere left it in: its state is only changed whole.
pub(super) fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
