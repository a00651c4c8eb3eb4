//! The tasks: the engine state of each partition this instance owns of the log its state
//! follows, restored from the changelog the first time one of its records arrives, and dropped
//! when it is revoked.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::ServiceError;
use super::clients;
use super::clients::QuietReader;
use crate::changelog::{ChangelogError, Restorer, Unit, UnitKind};
use crate::config::Config;
use crate::engine::{IdMap, InputTopic, PartitionState};
use crate::telemetry::events::{InternalEvent, PartitionRestored, RestoreFinished};
use crate::telemetry::metrics::Metrics;
use crate::topics::TopicTable;

/// A task: the state of one owned partition of the log its state follows (as Kafka Streams'
/// task owns every store of its partition), and where its input stands.
pub(super) struct Task {
    pub state: PartitionState,
    /// Records at or below this offset are already in the restored state.
    pub skip_through: Option<i64>,
    /// The last offset processed (or skipped) and not yet committed.
    pub pending: Option<i64>,
}

/// The owned partitions, and those assigned and not restored yet or revoked.
///
/// A task (Kafka Streams' word) is a [`Unit`]: the state of one partition of the log the state
/// follows, with every store of that partition inside it. With `repartition` that is a partition
/// of the repartition topic, which holds every record of its projects, votes and judge scores in
/// one order, and its state holds each project whole. With `by_key` it is an input partition,
/// one input topic's records. An input partition whose records are forwarded to the repartition
/// topic keeps no state: only the offset to commit once its forwards are acknowledged.
#[derive(Default)]
pub(super) struct Tasks {
    pub units: IdMap<Unit, Task>,
    /// Input partitions forwarded to the repartition topic, and the last offset forwarded (or
    /// dead-lettered) since the last sealed epoch.
    pub forwarded: IdMap<(InputTopic, i32), i64>,
    /// Like `fences`, for forwarded input partitions.
    pub forward_fences: IdMap<(InputTopic, i32), u64>,
    /// Units assigned but not restored yet.
    pub assigned: Vec<Unit>,
    /// Revoked partitions and the revocation that took them: a record of one polled before that
    /// revocation (see [`super::poll::Polled::generation`]) is dropped, not applied.
    pub fences: IdMap<Unit, u64>,
    /// Projects held over all owned partitions, for `limits.max_projects` (see
    /// [`crate::engine::Record::held_projects`]).
    pub held_projects: usize,
    /// The group's committed offset (topic, partition, offset) of each partition assigned
    /// since, until its first record is read: that record must not lie below it (see
    /// `ServiceError::LogWentBack`). A few entries, scanned without allocating.
    pub committed: Vec<(String, i32, i64)>,
}

impl Tasks {
    /// The owned partitions, in order (epochs and releases go partition by partition, so what
    /// they produce does not depend on the map's order).
    pub fn owned_keys(&self) -> Vec<Unit> {
        let mut keys: Vec<Unit> = self.units.keys().copied().collect();
        keys.sort();
        keys
    }

    /// Drops the unit `key`, taken by revocation number `generation`.
    pub fn revoke(&mut self, key: Unit, generation: u64) {
        if let Some(owned) = self.units.remove(&key) {
            self.held_projects = self
                .held_projects
                .saturating_sub(owned.state.project_count());
        }
        self.assigned.retain(|k| *k != key);
        self.fences.insert(key, generation);
    }

    /// Stops forwarding input partition `key`, taken by revocation number `generation`.
    pub fn revoke_forwarding(&mut self, key: (InputTopic, i32), generation: u64) {
        self.forwarded.remove(&key);
        self.forward_fences.insert(key, generation);
    }

    /// Restores every assigned unit not restored yet, reading all the changelog partitions
    /// they need in one pass (with `by_key`, votes and judge-scores partition p share changelog
    /// partition p), then reading on until each state reaches its group's commit (see
    /// [`catch_up`]; `stops_short`: the first read takes every end as reached at once, a fault
    /// the tests inject). Returns the units restored.
    ///
    /// Once `stop` is set nothing more is restored, and a restore under way is left where it
    /// is, its units assigned and unrestored: the service is stopping, its records of those
    /// units are neither applied nor committed, and their next owner restores them anyway. A
    /// large changelog, or one that stops short of the commit, would otherwise hold a stop for
    /// as long as the restore may take, past a deployment's grace period to its `kill -9`.
    pub fn restore_assigned(
        &mut self,
        (cfg, topics, metrics): (&Config, &TopicTable, &Metrics),
        (stops_short, stop): (bool, &AtomicBool),
    ) -> Result<Vec<Unit>, ServiceError> {
        let mut wanted: Vec<Unit> = std::mem::take(&mut self.assigned)
            .into_iter()
            .filter(|key| !self.units.contains_key(key))
            .collect();
        // A unit assigned and also wanted by a record is restored once.
        wanted.sort();
        wanted.dedup();
        if wanted.is_empty() || stop.load(Ordering::Relaxed) {
            self.assigned = wanted;
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let reader: BaseConsumer<QuietReader> =
            clients::reader_config(cfg, "restore")?.create_with_context(QuietReader)?;
        let mut tpl = TopicPartitionList::new();
        let partitions: BTreeSet<i32> = wanted.iter().map(|u| u.partition).collect();
        for p in &partitions {
            tpl.add_partition_offset(topics.state(), *p, Offset::Beginning)?;
        }
        reader.assign(&tpl)?;
        let mut restorers: Vec<Restorer> = wanted.iter().map(|&u| Restorer::new(u)).collect();
        let read = if stops_short {
            Read::Whole
        } else {
            read_to_end(&reader, (partitions.len(), stop), "restore read", |m| {
                accept(&mut restorers, m);
                Ok(())
            })?
        };
        let names = (cfg.kafka.group_id.as_str(), topics.state());
        let committed = |unit: Unit| {
            let log = unit_log(topics, unit);
            let mut at = self.committed.iter();
            at.find(|(t, p, _)| t == log && *p == unit.partition)
                .map(|&(_, _, offset)| offset)
        };
        let read = match read {
            Read::TimedOut => return Err(ServiceError::RestoreTimeout(restorers[0].unit())),
            Read::Stopped => Read::Stopped,
            Read::Whole => catch_up(&reader, &mut restorers, (committed, stop), names)?,
        };
        if read == Read::Stopped {
            tracing::info!(
                tasks = wanted.len(),
                seconds = started.elapsed().as_secs_f64(),
                "stopping: a restore under way left unfinished"
            );
            self.assigned = wanted;
            return Ok(Vec::new());
        }
        for (restorer, &key) in restorers.into_iter().zip(&wanted) {
            let unit = restorer.unit();
            let (records, bytes) = (restorer.records, restorer.bytes);
            let (state, offset) = restorer
                .finish()
                .map_err(|source| restore_error(unit, source, names))?;
            PartitionRestored {
                unit: &unit,
                records,
                bytes,
                offset,
            }
            .emit(metrics);
            self.held_projects += state.project_count();
            self.units.insert(
                key,
                Task {
                    state,
                    skip_through: offset,
                    pending: None,
                },
            );
        }
        RestoreFinished {
            seconds: started.elapsed().as_secs_f64(),
            owned: self.units.len(),
        }
        .emit(metrics);
        Ok(wanted)
    }
}

/// The partitions assigned to `reader` that hold no record, whose end is known at once: an
/// empty changelog partition or reputation table would otherwise wait for a fetch to report its
/// end, which made a start on an empty broker take a second. A partition is empty when its high
/// watermark is at or below its low one. (Tansu's high watermark can lag the records readable,
/// but was never 0 for a partition holding one, so no partition with records is taken for
/// empty; a watermark that cannot be read leaves the partition to the fetch.)
fn empty_partitions(reader: &BaseConsumer<QuietReader>) -> BTreeSet<i32> {
    // One ListOffsets request for every assigned partition's first offset and one for their
    // ends, not two per partition. ListOffsets takes the logical offsets `Beginning` and `End`
    // as the timestamps that ask for them.
    let offsets = |at: Offset| -> BTreeMap<i32, i64> {
        let asked = reader.assignment().and_then(|mut tpl| {
            tpl.set_all_offsets(at)?;
            reader.offsets_for_times(tpl, Duration::from_secs(5))
        });
        let Ok(found) = asked else {
            return BTreeMap::new();
        };
        found
            .elements()
            .iter()
            .filter(|e| e.error().is_ok())
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect()
    };
    let (low, high) = (offsets(Offset::Beginning), offsets(Offset::End));
    high.into_iter()
        .filter(|(p, high)| low.get(p).is_some_and(|low| high <= low))
        .map(|(p, _)| p)
        .collect()
}

/// Hands changelog record `m` to the restorers of its partition's units.
fn accept(restorers: &mut [Restorer], m: &BorrowedMessage<'_>) {
    let of_partition = |r: &&mut Restorer| r.unit().partition == m.partition();
    for r in restorers.iter_mut().filter(of_partition) {
        r.accept(m.key().unwrap_or_default(), m.payload());
    }
}

/// The topic whose partition `unit` is: the repartition topic, or an input with `by_key`.
pub(super) fn unit_log(topics: &TopicTable, unit: Unit) -> &str {
    match unit.kind {
        UnitKind::Projects => topics.repartition(),
        UnitKind::Input(topic) => topics.input_name(topic),
    }
}

/// How long a restore reads on for a state that stops short of its group's commit.
const CATCH_UP_WAIT: Duration = Duration::from_secs(30);

/// Reads on, after a partition's end was reported, until every restorer's state reaches the
/// offset its group committed (`committed`; the state must hold input through the offset
/// before it, as a commit follows its flush's changelog). A broker can report an end below
/// records it has acknowledged (tansu's high watermark is its last batch's first offset + 1): a
/// state restored from there would lack the last flushes of the partition's previous owner,
/// and its new owner would go on from the commit without them, its figures silently wrong. A
/// state still short after [`CATCH_UP_WAIT`] fails the restore
/// ([`ServiceError::RestoreBehind`]); `Read::Stopped` once `stop` is set, never `TimedOut`.
fn catch_up(
    reader: &BaseConsumer<QuietReader>,
    restorers: &mut [Restorer],
    (committed, stop): (impl Fn(Unit) -> Option<i64>, &AtomicBool),
    (group, state): (&str, &str),
) -> Result<Read, ServiceError> {
    let deadline = Instant::now() + CATCH_UP_WAIT;
    let mut reading_on = false;
    loop {
        let mut short = None;
        for r in restorers.iter() {
            let unit = r.unit();
            let Some(commit) = committed(unit).filter(|&c| c > 0) else {
                continue;
            };
            let restored = r
                .through()
                .map_err(|source| restore_error(unit, source, (group, state)))?;
            if restored.is_none_or(|t| t < commit - 1) {
                short = Some((unit, restored, commit));
                break;
            }
        }
        let Some((unit, restored, committed)) = short else {
            return Ok(Read::Whole);
        };
        if stop.load(Ordering::Relaxed) {
            return Ok(Read::Stopped);
        }
        if Instant::now() > deadline {
            return Err(ServiceError::RestoreBehind {
                unit,
                restored,
                committed,
                group: group.to_owned(),
                state: state.to_owned(),
            });
        }
        if !reading_on {
            reading_on = true;
            tracing::info!(
                ?unit,
                ?restored,
                committed,
                "the changelog's end was reported below the group's commit: reading on"
            );
        }
        // Whatever arrives until the fetches go quiet, then the states are checked again.
        while let Some(polled) = reader.poll(Duration::from_millis(100)) {
            match polled {
                Ok(m) => accept(restorers, &m),
                Err(KafkaError::PartitionEOF(_)) => {}
                Err(e) => tracing::warn!(error = %e, "restore read"),
            }
            if Instant::now() > deadline || stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
}

/// [`ServiceError::Restore`] of `unit`, whose changelog of group `group` is `state`.
fn restore_error(unit: Unit, source: ChangelogError, (group, state): (&str, &str)) -> ServiceError {
    ServiceError::Restore {
        unit,
        source,
        group: group.to_owned(),
        state: state.to_owned(),
    }
}

/// How a read that a stop can cut short ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// Every partition reached its end (reading on: every state its group's commit).
    Whole,
    /// The time allowed ran out first.
    TimedOut,
    /// The service was told to stop first.
    Stopped,
}

/// Reads a reader's assigned partitions (`partitions` of them) from where they are to their ends,
/// handing every record to `accept`, unless they do not all reach their end within five minutes
/// (`Read::TimedOut`) or `stop` is set first (`Read::Stopped`).
pub(super) fn read_to_end(
    reader: &BaseConsumer<QuietReader>,
    (partitions, stop): (usize, &AtomicBool),
    what: &str,
    mut accept: impl FnMut(&BorrowedMessage<'_>) -> Result<(), ServiceError>,
) -> Result<Read, ServiceError> {
    let mut at_end = empty_partitions(reader);
    let deadline = Instant::now() + Duration::from_secs(300);
    while at_end.len() < partitions {
        if stop.load(Ordering::Relaxed) {
            return Ok(Read::Stopped);
        }
        if Instant::now() > deadline {
            return Ok(Read::TimedOut);
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
    Ok(Read::Whole)
}
