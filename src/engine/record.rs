//! What a runtime hands the engine: one input [`Record`], which input it is, and what became of
//! it ([`Outcome`]). A record is also the source a dead letter names.

use super::contract::rejection::ErrorCode;
use super::output::Source;
use super::prepared::PreparedVotes;

/// One input record, as Kafka delivers it (or as a replay file describes it).
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The name of the topic it was read from, as a dead letter names it.
    pub topic: &'a str,
    /// Which input that topic is; `None` for a topic that is no input of jurystream (a replay
    /// file may name any), which is dead-lettered.
    pub input: Option<InputTopic>,
    /// The partition and offset of the record in its topic: where it came from, as outputs and
    /// dead letters name it, and how a copy of it is recognised (see [`super::Origins`]).
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// The record's offset in the log the state it is applied to follows, which the state's
    /// changelog counts in: the internal repartition topic's offset when the Kafka service
    /// repartitions, the input's own offset when it does not, and `None` in replay, which keeps
    /// no changelog (see [`Receipt::position`]).
    pub position: Option<i64>,
    pub key: Option<&'a [u8]>,
    /// The record timestamp, used when the payload has no `occurred_at`.
    pub timestamp_ms: Option<i64>,
    /// `None` is a tombstone.
    pub payload: Option<&'a [u8]>,
    /// The runtime's monotonic clock in milliseconds when it processes the record. When set,
    /// a project's `jury.scores` updates within `output.scores_coalesce_ms` are coalesced (see
    /// [`super::Coalescing`]); `None` (replay) emits one score per applied batch.
    pub clock_ms: Option<u64>,
    /// The service's wall clock, in milliseconds since the epoch, when it first read the record
    /// from its input: the forward's own timestamp for a record of the project log (the
    /// forwarding stage's clock stamped it as it read the input record), with `by_key` the
    /// clock when the batch holding it was polled (read ahead) or processed. An event time more than `limits.max_future_skew_secs`
    /// after it is dead-lettered (`event_time_in_future`): a producer whose host clock is ahead
    /// stamps its record timestamps and `occurred_at` alike, which the bound between the two
    /// cannot see. `None` in replay, which has no clock of its own.
    pub read_at_ms: Option<i64>,
    /// How many projects the runtime's instance holds before this record, over all its
    /// partitions (see [`super::PartitionState::project_count`]): at `limits.max_projects` a
    /// record that would add one is dead-lettered (`project_limit`). The runtime counts, as only
    /// it sees every partition it owns.
    pub held_projects: usize,
    /// Its vote batch, if the runtime read it ahead ([`super::Engine::prepare_votes`] of this
    /// record): applying it then does not read the payload again. `None` for every other
    /// record, and for a vote record the engine is to read itself.
    pub votes: Option<&'a PreparedVotes>,
}

/// Where and when a runtime received a record, as far as applying a vote batch needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    /// The record's [`Record::position`]: a batch at or below its project's
    /// [`super::VoteProject::applied_through`] is already in the state.
    pub position: Option<i64>,
    /// The runtime's clock, for coalescing (see [`Record::clock_ms`]).
    pub clock_ms: Option<u64>,
    /// See [`Record::held_projects`].
    pub held_projects: usize,
}

impl<'a> Record<'a> {
    /// A record of `topic` (`input` says which input that is, if any) carrying `payload`
    /// (`None`: a tombstone), with nothing else known: what a runtime knows of it, it adds with
    /// the methods below. The one way to make a record, so a field added here is set everywhere.
    pub fn new(topic: &'a str, input: Option<InputTopic>, payload: Option<&'a [u8]>) -> Self {
        Record {
            topic,
            input,
            partition: None,
            offset: None,
            position: None,
            key: None,
            timestamp_ms: None,
            payload,
            clock_ms: None,
            read_at_ms: None,
            held_projects: 0,
            votes: None,
        }
    }

    /// The record read from `partition` at `offset`: also its [`Record::position`] unless
    /// [`Record::positioned`] says otherwise (it is, but for a repartitioned record).
    pub fn at(self, partition: Option<i32>, offset: Option<i64>) -> Self {
        Record {
            partition,
            offset,
            position: offset,
            ..self
        }
    }

    /// The record at `position` in the log its state follows (see [`Record::position`]).
    pub fn positioned(self, position: Option<i64>) -> Self {
        Record { position, ..self }
    }

    /// The record with key `key` and record timestamp `timestamp_ms`.
    pub fn keyed(self, key: Option<&'a [u8]>, timestamp_ms: Option<i64>) -> Self {
        Record {
            key,
            timestamp_ms,
            ..self
        }
    }

    /// Whether it is a tick (see [`TICK_TOPIC`]).
    pub fn is_tick(&self) -> bool {
        self.input.is_none() && self.topic == TICK_TOPIC
    }

    /// The record as received at `clock_ms` by an instance holding `held_projects` projects
    /// (see [`Record::clock_ms`], [`Record::held_projects`]).
    pub fn received(self, clock_ms: Option<u64>, held_projects: usize) -> Self {
        Record {
            clock_ms,
            held_projects,
            ..self
        }
    }

    /// The record as first read by the service at wall-clock `read_at_ms` (see
    /// [`Record::read_at_ms`]).
    pub fn read_at(self, read_at_ms: Option<i64>) -> Self {
        Record { read_at_ms, ..self }
    }

    /// The record whose vote batch was read ahead as `votes` (see [`Record::votes`]).
    pub fn read_ahead(self, votes: Option<&'a PreparedVotes>) -> Self {
        Record { votes, ..self }
    }

    /// Where and when the record was received.
    pub fn receipt(&self) -> Receipt {
        Receipt {
            position: self.position,
            clock_ms: self.clock_ms,
            held_projects: self.held_projects,
        }
    }

    pub(super) fn source(&self) -> Source<'a> {
        Source {
            topic: self.topic,
            partition: self.partition,
            offset: self.offset,
            key: self.key,
            payload: self.payload,
        }
    }
}

/// What became of one record; runtimes count these in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The record changed state (a vote batch, a reputation change).
    Applied,
    /// A vote batch older than the project's latest: counted, but the score did not move.
    Late,
    /// A record the state already holds, read again: its offset is at or below the last one
    /// processed from its partition (see [`super::Origins`]), or, for a vote batch, its position
    /// is at or below the last one applied to its project (see
    /// [`super::VoteProject::applied_through`]). Nothing changes and nothing is published: its
    /// outputs were published when it was first processed.
    Replayed,
    /// Dead-lettered with this code; state is unchanged.
    Rejected(ErrorCode),
}

/// The topic name of a tick: a record of the passage of wall-clock time, written by the
/// service to every partition of its project log (its timestamp is the time) and read in order
/// with the records there, so that what waits for time (a session's idle timeout) depends on
/// the log alone and replay reproduces it. In a replay file, a line
/// `{"topic": "jurystream.tick", "timestamp_ms": T}`.
pub const TICK_TOPIC: &str = "jurystream.tick";

/// The engine's inputs; a runtime maps topic names to them (see `crate::topics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InputTopic {
    Votes,
    JudgeScores,
    Reputations,
}

impl InputTopic {
    pub const ALL: [InputTopic; 3] = [
        InputTopic::Votes,
        InputTopic::JudgeScores,
        InputTopic::Reputations,
    ];
}
