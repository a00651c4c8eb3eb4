//! The pure core: event contract, validation, state and formulas. No I/O, no clock, no async.
//!
//! A runtime (the file [`replay`](crate::replay) or the Kafka service) hands the [`Engine`] one
//! input [`Record`] at a time together with the state it belongs to; the engine validates it,
//! updates that state and appends the records to publish. Because the engine sees nothing but
//! records, the same input always produces the same output, whichever runtime drives it.

pub mod bias;
pub mod consensus;
pub mod dedupe;
pub mod fields;
pub mod json;
pub mod judge;
pub mod leaderboard;
pub mod output;
pub mod rejection;
pub mod reputation;
pub mod score;
pub mod session;
pub mod stats;
pub mod time;
pub mod vote;

use std::collections::HashMap;
use std::ops::Range;

use serde::Serialize;

use crate::config::{Config, Method};
use bias::{ProjectAudit, audit_session, session_alerts};
use consensus::{Consensus, JudgeCounts, Ranked, analyze, interpretation};
use dedupe::{RecentIds, Remembered};
use json::ParseFailure;
use judge::{JudgeAction, JudgeEvent, JudgeLimits, Scale};
use leaderboard::Board;
use output::{DeadLetter, Output, OutputTopic, OutputValue, ScoreValue, Source};
use rejection::{ErrorCode, Rejection};
use reputation::{ReputationChange, ReputationTable};
use score::{ProjectScore, weighted_mean};
use session::{BookLimits, Completed, SessionBook};
use time::EventTime;
use vote::{RawBatch, VoteBatch, VoteLimits, VoteSpans};

/// One input record, as Kafka delivers it (or as a replay file describes it).
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub topic: &'a str,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub key: Option<&'a [u8]>,
    /// The record timestamp, used when the payload has no `occurred_at`.
    pub timestamp_ms: Option<i64>,
    /// `None` is a tombstone.
    pub payload: Option<&'a [u8]>,
    /// The runtime's monotonic clock in milliseconds when it processes the record. When set,
    /// a project's `jury.scores` updates within `output.scores_coalesce_ms` are coalesced (see
    /// [`Coalescing`]); `None` (replay) emits one score per applied batch.
    pub clock_ms: Option<u64>,
}

/// Where and when a runtime received a record, as far as applying a vote batch needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Receipt {
    /// The record's input offset: a batch at or below its project's
    /// [`VoteProject::applied_through`] is already in the state.
    pub offset: Option<i64>,
    /// The runtime's clock, for coalescing (see [`Record::clock_ms`]).
    pub clock_ms: Option<u64>,
}

impl<'a> Record<'a> {
    /// Where and when the record was received.
    pub fn receipt(&self) -> Receipt {
        Receipt {
            offset: self.offset,
            clock_ms: self.clock_ms,
        }
    }

    fn source(&self) -> Source<'a> {
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
    /// A vote batch the state already holds: its offset is at or below the last one applied to
    /// its project, which happens only when records are read again after a restore (see
    /// [`VoteProject::applied_through`]). Nothing changes and nothing is published: its outputs
    /// were published before the state that holds it was written.
    Replayed,
    /// Dead-lettered with this code; state is unchanged.
    Rejected(ErrorCode),
}

/// Which input a topic name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InputTopic {
    Votes,
    JudgeScores,
    Reputations,
}

/// The state of one project's votes.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteProject {
    pub score: ProjectScore,
    /// Accepted `event_id`s, for duplicate detection.
    pub seen: RecentIds,
    /// Where this project's change is in the journal, so its batches of one flush extend it.
    pub noted: JournalHint,
    /// Its score output held back by coalescing, if any.
    pub coalescing: Coalescing,
    /// The input offset of the last batch applied, when the runtime gives offsets. It is written
    /// with the score, so after a crash that cut a changelog flush short, a project whose record
    /// made it knows which of the records read again it already counts (they are
    /// [`Outcome::Replayed`], not duplicates), while the others apply them.
    pub applied_through: Option<i64>,
}

impl VoteProject {
    /// A project with no votes yet, at score `score`.
    pub fn new(score: ProjectScore) -> Self {
        VoteProject {
            score,
            seen: RecentIds::default(),
            noted: JournalHint::default(),
            coalescing: Coalescing::default(),
            applied_through: None,
        }
    }
}

/// The position of a vote project's change in the current journal, if it has one. With 10,000
/// busy projects a flush interleaves their batches, and joining only a batch that follows its
/// own project's made one change per event: the changelog then hashed six times the slots it
/// wrote. The hint may be stale (the runtime takes the journal at every flush); it is trusted
/// only when the change it points at is this project's. It is not state: it is never written
/// or restored, and every two hints compare equal, so a restored project equals a running one.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalHint(Option<usize>);

impl PartialEq for JournalHint {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The `jury.scores` record of a project whose score took a step with `alpha`, its last
/// event at `last_event_at`.
fn score_output(
    project_id: &str,
    score: &ProjectScore,
    alpha: f64,
    lambda: f64,
    last_event_at: EventTime,
) -> Output {
    let value = ScoreValue {
        score: score.score,
        freshness: 1.0 - alpha,
        alpha,
        lambda,
        evaluations: score.evaluations,
        votes: score.votes,
        last_event_at,
    };
    Output {
        topic: OutputTopic::Scores,
        key: Some(project_id.to_owned()),
        value: OutputValue::Score(value),
        alert: None,
    }
}

/// Coalescing of a vote project's `jury.scores` updates: `jury.scores` is a compacted table, so
/// the runtime publishes a project's first update at once and holds back later ones within
/// `output.scores_coalesce_ms`, keeping only the latest, which [`Engine::release_held`] emits
/// at the end of the runtime's cycle. It lives in the project because the runtime used to keep it
/// in a map of its own, and finding the project there again was a cache miss per event with
/// 10,000 busy projects. Like [`JournalHint`] it is not state: never written or restored, and
/// every two compare equal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Coalescing {
    /// The runtime clock (ms) when the project's last score was emitted at once.
    emitted_ms: Option<u64>,
    /// The `alpha` of the held score's step (its freshness is `1 - alpha`), if one is held: the
    /// rest of the score is the project's current state.
    held_alpha: Option<f64>,
}

impl PartialEq for Coalescing {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A project's judge-session state besides its open sessions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JudgeProject {
    /// Accepted judge-scores `event_id`s, for duplicate detection.
    pub seen: RecentIds,
    pub audit: ProjectAudit,
    pub board: Board,
}

/// The hash map for ids that arrive from outside (projects, sessions, fingerprints of them):
/// foldhash is several times faster than std's SipHash on short keys and still seeded per
/// process, so crafted ids cannot force collisions. Nothing may depend on its iteration order.
pub type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A project id as a map key. Ids of up to 24 bytes are stored in the key itself, so finding a
/// project compares bytes already in the table instead of following a pointer to them: with
/// 10,000 busy projects that pointer was a cache miss and half the time of finding a project.
pub type ProjectKey = compact_str::CompactString;

/// The state behind one input partition: everything a record can change, so that a partition's
/// state moves between instances as a unit (and replay keeps one per partition, like Kafka).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionState {
    /// `jury.votes`: project scores.
    pub projects: IdMap<ProjectKey, VoteProject>,
    /// `jury.judge-scores`: open sessions and the partition's watermark.
    pub sessions: SessionBook,
    /// `jury.judge-scores`: per-project dedupe, bias roll-up and leaderboard.
    pub judge_projects: IdMap<String, JudgeProject>,
    /// When set, every state change is noted here for the runtime's changelog.
    pub journal: Option<Vec<Change>>,
    /// Vote projects with a held score (see [`Coalescing`]), in the order they were first held;
    /// [`Engine::release_held`] empties it at every coalescing tick and at the end of every
    /// runtime epoch, and replay (no clock) never fills it.
    pub held: Vec<ProjectKey>,
}

/// One piece of partition state that changed. The Kafka runtime writes the current value of
/// each (or a tombstone, if it is gone) to the changelog; replay does not journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A vote project's score changed, the ids numbered `seen` entered its dedupe window and
    /// those numbered `forgot` left it. A project's batches in one flush extend one change
    /// (see [`JournalHint`]): a busy project costs one journal entry per flush, not one or
    /// three per event. With many projects that is one change per event, so the project id is
    /// kept inline (a [`ProjectKey`]) rather than allocated.
    Votes {
        project: ProjectKey,
        seen: Range<u64>,
        forgot: Range<u64>,
    },
    /// A ballot id entered a judge-scores project's dedupe window (`seq` orders the window).
    Seen { project: String, seq: u64 },
    /// A ballot id left a judge-scores project's dedupe window.
    Forgot { project: String, seq: u64 },
    /// An open session changed, opened or completed.
    Session { project: String, session: String },
    /// A session id entered the completed window.
    Completed {
        project: String,
        fingerprint: u128,
        seq: u64,
    },
    /// A session id left the completed window.
    Uncompleted { project: String, fingerprint: u128 },
    /// A project's bias roll-up.
    Audit { project: String },
    /// A leaderboard row.
    Board {
        project: String,
        category: String,
        model: String,
    },
    /// The session book's watermark and creation counter.
    Book,
}

impl PartitionState {
    /// A state that journals its changes.
    pub fn journaled() -> Self {
        PartitionState {
            journal: Some(Vec::new()),
            ..PartitionState::default()
        }
    }

    fn note(&mut self, change: impl FnOnce() -> Change) {
        if let Some(j) = &mut self.journal {
            j.push(change());
        }
    }

    /// Notes a judge-scores window change: a ballot id (`completed` false) or a completed
    /// session id entered the project's window, and the ids `r` evicted left it.
    fn note_window(&mut self, project: &str, r: &Remembered, completed: bool) {
        if self.journal.is_none() {
            return;
        }
        let project = project.to_owned();
        let (fingerprint, seq) = (r.fingerprint, r.seq);
        self.note(|| {
            if completed {
                Change::Completed {
                    project: project.clone(),
                    fingerprint,
                    seq,
                }
            } else {
                Change::Seen {
                    project: project.clone(),
                    seq,
                }
            }
        });
        for &(seq, fingerprint) in &r.evicted {
            self.note(|| {
                if completed {
                    Change::Uncompleted {
                        project: project.clone(),
                        fingerprint,
                    }
                } else {
                    Change::Forgot {
                        project: project.clone(),
                        seq,
                    }
                }
            });
        }
    }
}

/// Notes an applied vote batch of `project` in `journal` (if the state journals): the score
/// changed, `r` says which id entered the window and which left it. It extends the project's
/// change in this flush (found through `noted`) when the ids join its ranges; otherwise (the
/// first batch in the flush, or a window restored with gaps) it adds a change.
fn note_votes(
    journal: Option<&mut Vec<Change>>,
    noted: &mut JournalHint,
    project: &str,
    r: &Remembered,
) {
    let Some(journal) = journal else {
        return;
    };
    let mut forgot = r.evicted.iter().map(|(s, _)| *s..s + 1);
    extend_votes(
        journal,
        noted,
        project,
        r.seq..r.seq + 1,
        forgot.next().unwrap_or(0..0),
    );
    // More than one id leaves only when the window shrank; they join unless it has gaps.
    for f in forgot {
        extend_votes(journal, noted, project, 0..0, f);
    }
}

/// Adds ids to the project's change that `noted` points at when that is this project's and
/// both ranges join; else appends a change and points `noted` at it.
fn extend_votes(
    journal: &mut Vec<Change>,
    noted: &mut JournalHint,
    project: &str,
    seen: Range<u64>,
    forgot: Range<u64>,
) {
    if let Some(Change::Votes {
        project: p,
        seen: s,
        forgot: f,
    }) = noted.0.and_then(|at| journal.get_mut(at))
        && p == project
        && let (Some(s2), Some(f2)) = (join(s, &seen), join(f, &forgot))
    {
        (*s, *f) = (s2, f2);
        return;
    }
    *noted = JournalHint(Some(journal.len()));
    journal.push(Change::Votes {
        project: ProjectKey::from(project),
        seen,
        forgot,
    });
}

/// `a` followed by `b` as one range, if that is one (either is empty, or they are adjacent).
fn join(a: &Range<u64>, b: &Range<u64>) -> Option<Range<u64>> {
    if b.is_empty() {
        Some(a.clone())
    } else if a.is_empty() {
        Some(b.clone())
    } else {
        (a.end == b.start).then_some(a.start..b.end)
    }
}

/// A `jury.votes` record validated by [`Engine::prepare_votes`] and not yet applied: what
/// applying it takes from the batch, so that the payload is not read again (see
/// [`Engine::apply_prepared`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedVotes {
    votes: VoteSpans,
    at: EventTime,
    /// The project and the event id's dedupe fingerprint, also for [`Engine::prefetch`], which
    /// must find them without reading the payload (that would be the miss it is there to hide).
    project: ProjectKey,
    fingerprint: u128,
}

/// What applying a vote batch takes from it once its votes are weighed: the same whether the
/// batch was read in full ([`Engine::apply_batch`]) or prepared ([`Engine::apply_prepared`]).
struct Weighed<'a> {
    project_id: &'a str,
    /// The event id's [`dedupe::fingerprint`].
    fingerprint: u128,
    /// The reputation-weighted mean vote.
    mean: f64,
    votes: usize,
}

/// The stateless processor: configuration plus the code that applies records to state.
#[derive(Debug, Clone)]
pub struct Engine {
    config: Config,
}

impl Engine {
    pub fn new(config: Config) -> Self {
        Engine { config }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Which input `topic` is, if any.
    pub fn input_topic(&self, topic: &str) -> Option<InputTopic> {
        let t = &self.config.topics;
        if topic == t.votes {
            Some(InputTopic::Votes)
        } else if topic == t.judge_scores {
            Some(InputTopic::JudgeScores)
        } else if topic == t.reputations {
            Some(InputTopic::Reputations)
        } else {
            None
        }
    }

    /// The configured name of an input topic.
    pub fn input_topic_name(&self, topic: InputTopic) -> &str {
        let t = &self.config.topics;
        match topic {
            InputTopic::Votes => &t.votes,
            InputTopic::JudgeScores => &t.judge_scores,
            InputTopic::Reputations => &t.reputations,
        }
    }

    /// The configured name of an output topic.
    pub fn topic_name(&self, topic: OutputTopic) -> &str {
        let t = &self.config.topics;
        match topic {
            OutputTopic::Scores => &t.scores,
            OutputTopic::Consensus => &t.consensus,
            OutputTopic::BiasAlerts => &t.bias_alerts,
            OutputTopic::Leaderboard => &t.leaderboard,
            OutputTopic::DeadLetters => &t.dead_letters,
        }
    }

    /// Processes one record: validates it, applies it to `state` (or to `reputations`), and
    /// appends what to publish to `out`. A rejected record leaves all state unchanged and
    /// appends exactly one dead letter.
    pub fn process(
        &self,
        state: &mut PartitionState,
        reputations: &ReputationTable,
        record: &Record<'_>,
        out: &mut Vec<Output>,
    ) -> Outcome {
        match self.try_process(state, reputations, record, out) {
            Ok(outcome) => outcome,
            Err(rejection) => self.reject(record, &rejection, out),
        }
    }

    /// Appends the dead letter for `rejection` and returns its outcome.
    pub fn reject(
        &self,
        record: &Record<'_>,
        rejection: &Rejection,
        out: &mut Vec<Output>,
    ) -> Outcome {
        let letter = DeadLetter::new(
            record.source(),
            rejection,
            self.config.limits.dead_letter_payload_bytes,
        );
        out.push(letter.into_output());
        Outcome::Rejected(rejection.code)
    }

    fn try_process(
        &self,
        state: &mut PartitionState,
        reputations: &ReputationTable,
        record: &Record<'_>,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        let topic = self.input_topic(record.topic).ok_or_else(|| {
            Rejection::new(
                ErrorCode::UnknownTopic,
                format!("topic {:?} is not an input of jurystream", record.topic),
            )
        })?;
        let Some(payload) = record.payload else {
            if topic == InputTopic::Reputations {
                reputations.apply(&ReputationChange::tombstone(record.key)?);
                return Ok(Outcome::Applied);
            }
            return Err(Rejection::new(
                ErrorCode::EmptyPayload,
                "a tombstone (null value) is not an event",
            ));
        };
        self.check_size(payload)?;
        match topic {
            InputTopic::Votes => {
                let mut raw = None;
                let (batch, at) = self.validate_votes(record, payload, &mut raw)?;
                self.apply_batch(state, reputations, &batch, at, record.receipt(), out)
            }
            InputTopic::Reputations => {
                let doc = json::parse(payload).map_err(parse_rejection)?;
                let l = &self.config.limits;
                let change = ReputationChange::from_json(
                    &doc,
                    record.key,
                    l.max_id_bytes,
                    l.reject_unknown_fields,
                )?;
                reputations.apply(&change);
                Ok(Outcome::Applied)
            }
            InputTopic::JudgeScores => {
                let doc = json::parse(payload).map_err(parse_rejection)?;
                self.apply_judge(state, record, &doc, out)
            }
        }
    }

    fn check_size(&self, payload: &[u8]) -> Result<(), Rejection> {
        let max = self.config.limits.max_message_bytes;
        if payload.len() > max {
            return Err(Rejection::new(
                ErrorCode::PayloadTooLarge,
                format!("payload is {} bytes, at most {max} allowed", payload.len()),
            ));
        }
        Ok(())
    }

    fn event_time(
        &self,
        occurred_at: Option<EventTime>,
        record: &Record<'_>,
    ) -> Result<EventTime, Rejection> {
        if let Some(t) = occurred_at {
            return Ok(t);
        }
        let ms = record.timestamp_ms.ok_or_else(|| {
            Rejection::new(
                ErrorCode::MissingTimestamp,
                "no `occurred_at` and no record timestamp",
            )
        })?;
        EventTime::from_epoch_millis(ms).map_err(|e| {
            Rejection::new(
                ErrorCode::ValueOutOfRange,
                format!("record timestamp {ms} ms: {e}"),
            )
        })
    }

    /// A vote payload read and checked against the contract, with the time it is observed at:
    /// the validation both [`Engine::process`] and [`Engine::prepare_votes`] do. A valid payload
    /// of the plain shape is read in one pass ([`VoteBatch::scan`]); anything else is read in
    /// full into `raw`, which the batch then borrows from.
    fn validate_votes<'d>(
        &self,
        record: &Record<'_>,
        payload: &'d [u8],
        raw: &'d mut Option<RawBatch<'d>>,
    ) -> Result<(VoteBatch<'d>, EventTime), Rejection> {
        let l = &self.config.limits;
        let limits = VoteLimits {
            max_votes: l.max_votes_per_event,
            max_id_bytes: l.max_id_bytes,
            reject_unknown_fields: l.reject_unknown_fields,
        };
        let batch = match VoteBatch::scan(payload, limits) {
            Some(batch) => batch,
            None => {
                let raw = raw.insert(RawBatch::parse(payload).map_err(parse_rejection)?);
                VoteBatch::from_raw(raw, limits)?
            }
        };
        let at = self.event_time(batch.occurred_at, record)?;
        Ok((batch, at))
    }

    /// Validates a `jury.votes` record without applying it, for a runtime that reads and
    /// validates records on one thread and applies them on another. `Some` for a valid batch
    /// whose voter ids are slices of the payload; `None` for anything else (another topic, a
    /// rejection, an escaped voter id), which [`Engine::process`] then handles from the start.
    /// Validation reads only the record and the configuration, so it can run ahead of state.
    pub fn prepare_votes(&self, record: &Record<'_>) -> Option<PreparedVotes> {
        if self.input_topic(record.topic) != Some(InputTopic::Votes) {
            return None;
        }
        let payload = record.payload?;
        self.check_size(payload).ok()?;
        let mut raw = None;
        let (batch, at) = self.validate_votes(record, payload, &mut raw).ok()?;
        Some(PreparedVotes {
            votes: batch.vote_spans(payload)?,
            at,
            project: ProjectKey::from(batch.project_id),
            fingerprint: dedupe::fingerprint(batch.event_id),
        })
    }

    /// Gets the CPU to fetch what applying `prepared` to `state` will touch first: the project
    /// and the line of its dedupe window where the event id is looked up (see
    /// [`RecentIds::prefetch`]). The runtime calls it a few records ahead of applying them, so
    /// the memory latency overlaps other records' work (see [`crate::prefetch`]).
    pub fn prefetch(&self, state: &PartitionState, prepared: &PreparedVotes) {
        if let Some(project) = state.projects.get(prepared.project.as_str()) {
            project.seen.prefetch(prepared.fingerprint);
        }
    }

    /// Applies `record`, prepared by [`Engine::prepare_votes`]: exactly what
    /// [`Engine::process`] does with it. The batch is not rebuilt: applying it takes its
    /// project and event id fingerprint, kept when it was prepared, and its votes' weights and
    /// values ([`VoteSpans::weights`]): only the voter ids it looks up in the reputation table
    /// are read from the payload again, so `record` must be the record prepared. A batch that
    /// this cannot apply (its weights sum to 0, its event id is a resend, a payload without
    /// those voter ids) goes through [`Engine::process`], which words the rejection: the
    /// weighed path declines before it changes anything.
    pub fn apply_prepared(
        &self,
        state: &mut PartitionState,
        reputations: &ReputationTable,
        record: &Record<'_>,
        prepared: &PreparedVotes,
        out: &mut Vec<Output>,
    ) -> Outcome {
        let applied = record
            .payload
            .and_then(|p| prepared.votes.weights(p, |voter| reputations.get(voter)))
            .and_then(|weights| weighted_mean(weights.iter().copied()))
            .and_then(|mean| {
                let weighed = Weighed {
                    project_id: prepared.project.as_str(),
                    fingerprint: prepared.fingerprint,
                    mean,
                    votes: prepared.votes.count(),
                };
                self.apply_weighed(state, &weighed, prepared.at, record.receipt(), out)
            });
        applied.unwrap_or_else(|| self.process(state, reputations, record, out))
    }

    /// Applies a validated vote batch observed at `at`: the HumanJudge update, duplicate
    /// detection and the `jury.scores` record (held back if the receipt's clock says it comes
    /// within the coalescing interval of the project's last one). Public so benchmarks can time
    /// it without parsing.
    pub fn apply_batch(
        &self,
        state: &mut PartitionState,
        reputations: &ReputationTable,
        batch: &VoteBatch<'_>,
        at: EventTime,
        receipt: Receipt,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        let weights = batch.votes.iter().map(|v| {
            (
                vote::weight(v.reputation, || reputations.get(v.voter_id)),
                v.value,
            )
        });
        let mean = weighted_mean(weights).ok_or_else(|| {
            Rejection::new(
                ErrorCode::ZeroTotalReputation,
                "the votes' reputations sum to 0; the batch carries no weight",
            )
        })?;
        let weighed = Weighed {
            project_id: batch.project_id,
            fingerprint: dedupe::fingerprint(batch.event_id),
            mean,
            votes: batch.votes.len(),
        };
        self.apply_weighed(state, &weighed, at, receipt, out)
            .ok_or_else(|| {
                Rejection::new(
                    ErrorCode::DuplicateEventId,
                    format!(
                        "`event_id` {:?} was already applied to project {:?}",
                        batch.event_id, batch.project_id
                    ),
                )
            })
    }

    /// [`Engine::apply_batch`] once the batch's votes are weighed. `None` if its event id is a
    /// resend, and then nothing has changed: a project it would create cannot have seen the
    /// id, and the window's probe that finds it changes nothing.
    fn apply_weighed(
        &self,
        state: &mut PartitionState,
        batch: &Weighed<'_>,
        at: EventTime,
        receipt: Receipt,
        out: &mut Vec<Output>,
    ) -> Option<Outcome> {
        let project = match state.projects.get_mut(batch.project_id) {
            Some(p) => p,
            None => state
                .projects
                .entry(ProjectKey::from(batch.project_id))
                .or_insert_with(|| {
                    VoteProject::new(ProjectScore::new(self.config.scoring.initial_score))
                }),
        };
        if let (Some(offset), Some(through)) = (receipt.offset, project.applied_through)
            && offset <= through
        {
            return Some(Outcome::Replayed);
        }
        // One probe of the window both detects a resend and remembers the id (nothing below
        // can reject the batch): with a full window each probe is a cache miss.
        let remembered = project
            .seen
            .insert_fingerprint(batch.fingerprint, self.config.limits.dedupe_window)?;
        if receipt.offset.is_some() {
            project.applied_through = receipt.offset;
        }
        let lambda = self.config.scoring.lambda_for(batch.project_id);
        let step = project
            .score
            .apply(at, batch.mean, batch.votes as u64, lambda);
        let interval = self.config.output.scores_coalesce_ms;
        let c = &mut project.coalescing;
        let clock_ms = receipt.clock_ms;
        match clock_ms {
            Some(now)
                if c.emitted_ms
                    .is_some_and(|t| now.saturating_sub(t) < interval) =>
            {
                if c.held_alpha.is_none() {
                    state.held.push(ProjectKey::from(batch.project_id));
                }
                c.held_alpha = Some(step.alpha);
            }
            _ => {
                // Emitted now: a score held before is superseded.
                *c = Coalescing {
                    emitted_ms: clock_ms,
                    held_alpha: None,
                };
                let last = project.score.last_update_at.unwrap_or(at);
                out.push(score_output(
                    batch.project_id,
                    &project.score,
                    step.alpha,
                    lambda,
                    last,
                ));
            }
        }
        note_votes(
            state.journal.as_mut(),
            &mut project.noted,
            batch.project_id,
            &remembered,
        );
        Some(if step.late {
            Outcome::Late
        } else {
            Outcome::Applied
        })
    }
}

impl Engine {
    /// Emits the held-back score of every project in `state` (see [`Coalescing`]), in the
    /// order they were first held. The runtime calls it at the end of every cycle, before it
    /// writes the cycle's changelog.
    pub fn release_held(&self, state: &mut PartitionState, out: &mut Vec<Output>) {
        for key in state.held.drain(..) {
            let Some(project) = state.projects.get_mut(key.as_str()) else {
                continue;
            };
            // A held score's project has taken a step, so it has a last event time.
            if let (Some(alpha), Some(last)) = (
                project.coalescing.held_alpha.take(),
                project.score.last_update_at,
            ) {
                let lambda = self.config.scoring.lambda_for(&key);
                out.push(score_output(&key, &project.score, alpha, lambda, last));
            }
        }
    }

    fn judge_limits(&self) -> JudgeLimits {
        let (l, s) = (&self.config.limits, &self.config.sessions);
        JudgeLimits {
            max_id_bytes: l.max_id_bytes,
            reject_unknown_fields: l.reject_unknown_fields,
            default_scale: Scale {
                min: s.default_scale_min,
                max: s.default_scale_max,
            },
        }
    }

    fn book_limits(&self) -> BookLimits {
        let s = &self.config.sessions;
        BookLimits {
            timeout_secs: s.timeout_secs,
            max_open_per_project: s.max_open_per_project,
            max_open_total: s.max_open_total,
            completed_window: s.completed_window,
        }
    }

    fn apply_judge(
        &self,
        state: &mut PartitionState,
        record: &Record<'_>,
        doc: &json::Json<'_>,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        let event = JudgeEvent::from_json(doc, self.judge_limits())?;
        let at = self.event_time(event.occurred_at, record)?;
        let (project, session) = (event.project_id, event.session_id);
        if state
            .judge_projects
            .get(project)
            .is_some_and(|p| p.seen.contains(event.event_id))
        {
            return Err(Rejection::new(
                ErrorCode::DuplicateEventId,
                format!(
                    "`event_id` {:?} was already applied to project {project:?}",
                    event.event_id
                ),
            ));
        }
        if state.sessions.is_completed(project, session) {
            return Err(Rejection::new(
                ErrorCode::SessionCompleted,
                format!("session {session:?} of project {project:?} has already completed"),
            ));
        }
        let remembered = state
            .judge_projects
            .entry(project.to_owned())
            .or_default()
            .seen
            .insert(event.event_id, self.config.limits.dedupe_window);
        if let Some(r) = &remembered {
            state.note_window(project, r, false);
        }
        let mut done = Vec::new();
        match &event.action {
            JudgeAction::Ballot(ballot) => {
                state
                    .sessions
                    .ballot(project, session, ballot, at, self.book_limits(), &mut done)
            }
            JudgeAction::Close => {
                state
                    .sessions
                    .close(project, session, at, self.book_limits(), &mut done)
            }
        }
        state.note(|| Change::Session {
            project: project.to_owned(),
            session: session.to_owned(),
        });
        state.note(|| Change::Book);
        for completed in done {
            self.finish_session(state, completed, out);
        }
        Ok(Outcome::Applied)
    }

    /// Publishes a completed session: consensus, session and project bias alerts, leaderboard.
    fn finish_session(&self, state: &mut PartitionState, c: Completed, out: &mut Vec<Output>) {
        let cfg = &self.config;
        state.note(|| Change::Session {
            project: c.project_id.clone(),
            session: c.session_id.clone(),
        });
        if let Some(r) = &c.remembered {
            state.note_window(&c.project_id, r, true);
        }
        state.note(|| Change::Audit {
            project: c.project_id.clone(),
        });
        let analysis = analyze(&c.session, &cfg.sessions);
        let audit = audit_session(&analysis, &cfg.bias);
        let key = Some(c.project_id.clone());
        let record = ConsensusRecord {
            project_id: &c.project_id,
            session_id: &c.session_id,
            completed_by: c.by.as_str(),
            method: match cfg.sessions.method {
                Method::NormalizedScores => "normalized_scores",
                Method::Borda => "borda",
            },
            category: c.session.category.as_deref(),
            last_event_at: c.at.to_string(),
            judges: analysis.judges,
            consensus: analysis.consensus.as_ref(),
            agreement: analysis.agreement,
            krippendorff_alpha: analysis.krippendorff_alpha,
            rankings: &analysis.rankings,
            bias: SessionBias {
                length_r: audit.length_r,
                length_p: audit.length_p,
                position_variance: audit.position_variance,
                risk: audit.risk,
            },
            interpretation: interpretation(&analysis),
        };
        out.push(Output::json(OutputTopic::Consensus, key.clone(), &record));
        for alert in session_alerts(&c.project_id, &c.session_id, &analysis, &audit, &cfg.bias) {
            out.push(Output::alert(key.clone(), &alert));
        }
        let project = state
            .judge_projects
            .entry(c.project_id.clone())
            .or_default();
        for alert in
            project
                .audit
                .update(&c.project_id, &c.session_id, &analysis, &audit, &cfg.bias)
        {
            out.push(Output::alert(key.clone(), &alert));
        }
        let category = c.session.category.as_deref();
        let standings = project.board.add(
            &c.project_id,
            category,
            c.at,
            &analysis,
            cfg.leaderboard.window_days,
        );
        for standing in standings {
            state.note(|| Change::Board {
                project: standing.project_id.clone(),
                category: standing.category.clone().unwrap_or_default(),
                model: standing.model.clone(),
            });
            out.push(Output::json(
                OutputTopic::Leaderboard,
                Some(standing.key()),
                &standing,
            ));
        }
    }
}

/// `jury.consensus`: one record per completed session.
#[derive(Debug, Serialize)]
struct ConsensusRecord<'a> {
    project_id: &'a str,
    session_id: &'a str,
    completed_by: &'static str,
    method: &'static str,
    category: Option<&'a str>,
    last_event_at: String,
    judges: JudgeCounts,
    consensus: Option<&'a Consensus>,
    agreement: Option<f64>,
    krippendorff_alpha: Option<f64>,
    rankings: &'a [Ranked<'a>],
    bias: SessionBias,
    interpretation: String,
}

#[derive(Debug, Serialize)]
struct SessionBias {
    length_r: f64,
    length_p: f64,
    position_variance: Option<f64>,
    risk: &'static str,
}

/// The rejection for a payload that is not JSON at all.
fn parse_rejection(e: ParseFailure) -> Rejection {
    match e {
        ParseFailure::NonFinite(m) => Rejection::new(
            ErrorCode::NonFiniteNumber,
            format!("NaN and Infinity are not JSON numbers ({m})"),
        ),
        ParseFailure::NumberOutOfRange(m) => Rejection::new(ErrorCode::ValueOutOfRange, m),
        ParseFailure::Invalid(m) => Rejection::new(ErrorCode::InvalidJson, m),
    }
}

#[cfg(test)]
mod tests;
