//! The vote pipeline (`jury.votes`): a batch validated against the contract, weighed by its
//! voters' reputations, checked for a resent `event_id`, and applied to its project's
//! HumanJudge score; the `jury.scores` record, coalesced per project when the runtime has a clock.
//! A batch is read once into a [`PreparedVotes`] and applied by one applier
//! ([`Engine::apply_votes`]), whether the runtime read it ahead on another thread
//! ([`Engine::prepare_votes`], then [`Engine::process`] of the record carrying it) or not.

use compact_str::CompactString;
use smallvec::SmallVec;

use super::contract::json;
use super::contract::rejection::{ErrorCode, Rejection};
use super::contract::time::EventTime;
use super::contract::vote::{self, VoteBatch, VoteLimits};
use super::ids::ProjectKey;
use super::journal::{Change, note_votes};
use super::model::bias::BiasAlert;
use super::model::dedupe;
use super::model::score::{ProjectScore, weighted_mean};
use super::output::{Output, OutputTopic, OutputValue, ScoreValue};
use super::prepared::{PreparedVote, PreparedVotes};
use super::reputation::ReputationTable;
use super::state::{Coalescing, PartitionState, Project, VoteProject};
use super::{Engine, InputTopic, Outcome, Receipt, Record, parse_rejection};

/// A batch's votes as `(weight, value)`, each vote's weight its explicit reputation or else its
/// voter's in the table ([`vote::weight`]): found once per batch, for the score's mean and for
/// the item's votes in judge quality.
pub type Weights = SmallVec<[(f64, f64); 4]>;

/// What applying a vote batch to its project's score takes from it once its votes are weighed.
struct Weighed<'a> {
    project_id: &'a str,
    /// Its `event_id`, which an alert it raises names.
    event_id: &'a str,
    /// The event id's [`dedupe::fingerprint`].
    fingerprint: u128,
    /// The reputation-weighted mean vote.
    mean: f64,
    votes: usize,
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
        counted: None,
        shows: None,
    }
}

/// The alert of a project whose score `score` has not moved its event time for `batches`
/// batches in a row (`scoring.stalled_after_batches`), the last `batch`: said once a run, at
/// the batch that makes it that long. Its value and sample are the run, its threshold the
/// setting.
fn stalled_alert(batch: &Weighed<'_>, score: &ProjectScore, batches: u64) -> BiasAlert {
    let project = batch.project_id;
    let latest = score
        .last_update_at
        .map_or_else(|| "none".to_owned(), |t| t.to_string());
    BiasAlert::project_finding(
        (project, batch.event_id),
        ("score_stalled", None),
        (score.still as f64, batches as f64, score.still),
        format!(
            "the score of {project} has not moved for {batches} batches in a row \
             (scoring.stalled_after_batches): none came after its latest event time, {latest}, \
             so each had alpha 1. Only event time moves a score: a producer whose clock stands \
             still or went back, or that stamps every event with one time, freezes it. The \
             first batch after {latest} ends this."
        ),
    )
}

impl Engine {
    /// Reads a vote payload and checks it against the contract: a valid batch is read by the
    /// derived reader ([`VoteBatch::plain`]); anything else is parsed into the tree every topic
    /// is read into ([`json::parse`]), which words the rejection.
    pub(super) fn read_votes(
        &self,
        record: &Record<'_>,
        payload: &[u8],
    ) -> Result<PreparedVotes, Rejection> {
        let limits = self.vote_limits();
        let doc;
        let batch = match VoteBatch::plain(payload, limits) {
            Some(batch) => batch,
            None => {
                doc = json::parse(payload).map_err(parse_rejection)?;
                VoteBatch::from_json(&doc, limits)?
            }
        };
        self.check_key(record, batch.project_id)?;
        let at = self.event_time(batch.occurred_at, record)?;
        let votes = batch
            .votes
            .iter()
            .map(|v| PreparedVote {
                value: v.value,
                reputation: v.reputation,
                voter: CompactString::from(v.voter_id),
            })
            .collect();
        Ok(PreparedVotes {
            votes,
            at,
            project: ProjectKey::from(batch.project_id),
            event_id: CompactString::from(batch.event_id),
            fingerprint: dedupe::fingerprint(batch.event_id),
            item: batch
                .item_id
                .filter(|_| self.settings.pairs_judges)
                .map(CompactString::from),
        })
    }

    /// What the vote contract's limits are.
    pub(super) fn vote_limits(&self) -> VoteLimits {
        let l = &self.settings.limits;
        VoteLimits {
            max_votes: l.max_votes_per_event,
            max_id_bytes: l.max_id_bytes,
            reject_unknown_fields: l.reject_unknown_fields,
        }
    }

    /// Reads and validates a `jury.votes` record without applying it, for a runtime that reads
    /// records on one thread and applies them on another: [`Engine::process`] of the record
    /// carrying it ([`Record::read_ahead`]). `Some` for a valid batch; `None` for anything else
    /// (another topic, a rejection), which [`Engine::process`] then reads again and words the
    /// rejection for. Reading takes only the
    /// record and the configuration, so it can run ahead of state.
    pub fn prepare_votes(&self, record: &Record<'_>) -> Option<PreparedVotes> {
        if record.input != Some(InputTopic::Votes) {
            return None;
        }
        let payload = record.payload?;
        self.check_size(payload).ok()?;
        self.read_votes(record, payload).ok()
    }

    /// Applies a read vote batch: the one applier of every vote batch. Its votes are weighed
    /// (explicit reputation, else the table's, then the learned weights
    /// `scoring.reputation_source` asks for), its project's score takes the HumanJudge step
    /// (duplicate and order checks first, the `jury.scores` record held back if the receipt's
    /// clock says it comes within the coalescing interval of the project's last one), and judge
    /// quality observes it. A rejection changes nothing.
    pub(super) fn apply_votes(
        &self,
        state: &mut PartitionState,
        reputations: &ReputationTable,
        record: &Record<'_>,
        prepared: &PreparedVotes,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
        let table: Weights = prepared
            .votes
            .iter()
            .map(|v| {
                let table = || reputations.get(&v.voter);
                (vote::weight(v.reputation, table), v.value)
            })
            .collect();
        let project_id = prepared.project.as_str();
        if self.settings.pairs_judges {
            let max_task_items = self.settings.quality_task_items;
            state.quality.sweep(&mut state.projects, max_task_items);
        }
        // The batch's project is found once: every step below is handed it.
        let found = state.projects.get_mut(project_id);
        let mut weights = table.clone();
        let voters = prepared.votes.iter().map(|v| v.voter.as_str());
        let quality = found.as_deref().map(|p| &p.quality);
        self.learned_weights(quality, voters, &mut weights);
        let mean = weighted_mean(&weights).ok_or_else(|| {
            Rejection::new(
                ErrorCode::ZeroTotalReputation,
                "the votes' reputations sum to 0; the batch carries no weight",
            )
        })?;
        let receipt = record.receipt();
        let project = match found {
            Some(p) => p,
            None => {
                if receipt.held_projects >= self.settings.limits.max_projects {
                    return Err(self.declined(Declined::ProjectLimit, prepared, receipt));
                }
                state.projects.entry(prepared.project.clone()).or_default()
            }
        };
        let weighed = Weighed {
            project_id,
            event_id: prepared.event_id.as_str(),
            fingerprint: prepared.fingerprint,
            mean,
            votes: prepared.votes.len(),
        };
        let journal = (state.journal.as_mut(), &mut state.held);
        let outcome = self
            .apply_weighed(project, journal, &weighed, prepared.at, receipt, out)
            .map_err(|declined| self.declined(declined, prepared, receipt))?;
        let voters: SmallVec<[&str; 4]> = if self.learns_reviewers() {
            prepared.votes.iter().map(|v| v.voter.as_str()).collect()
        } else {
            SmallVec::new()
        };
        let votes = (weights.as_slice(), table.as_slice(), voters.as_slice());
        let task = (&mut state.quality, (project_id, &mut project.quality));
        let item = prepared.item.as_deref();
        if let Some((item, mut observed)) =
            self.observe_votes(task, item, votes, prepared.at, outcome)
        {
            self.review(state, (project_id, item), &mut observed, out);
            self.add_pairs(state, (project_id, item), observed, out);
        }
        Ok(outcome)
    }

    /// The rejection of a batch [`Engine::apply_weighed`] declined.
    fn declined(&self, declined: Declined, batch: &PreparedVotes, receipt: Receipt) -> Rejection {
        let (event_id, project) = (batch.event_id.as_str(), batch.project.as_str());
        match declined {
            Declined::Resend => Rejection::new(
                ErrorCode::DuplicateEventId,
                format!("`event_id` {event_id:?} was already applied to project {project:?}"),
            ),
            Declined::OutOfOrder { through } => Rejection::new(
                ErrorCode::OffsetOutOfOrder,
                format!(
                    "offset {} is at or below {through}, the offset of project {project:?}'s last \
                     applied batch in the log its state follows, and `event_id` {event_id:?} is \
                     not one it remembers: offsets only grow within a partition",
                    receipt.position.unwrap_or(through),
                ),
            ),
            Declined::ProjectLimit => {
                super::project_limit(project, self.settings.limits.max_projects)
            }
        }
    }

    /// The score's step of [`Engine::apply_votes`] on the batch's `project`: takes its step
    /// ([`VoteProject::step`]) and publishes, holds (in `held`) and journals what it says.
    /// Declined if its event id is a resend or it comes out of order, and then nothing has
    /// changed: the window's probe that finds it changes nothing.
    ///
    /// A batch at or below its project's last applied position is the same record read again
    /// (after a crash cut a changelog flush short) when the project remembers its id: it is
    /// [`Outcome::Replayed`], silently. One whose id it does not remember cannot be told from a
    /// new event that came out of order, so it is declined rather than dropped unseen or
    /// counted a second time.
    fn apply_weighed(
        &self,
        project: &mut Project,
        (journal, held): (Option<&mut Vec<Change>>, &mut Vec<ProjectKey>),
        batch: &Weighed<'_>,
        at: EventTime,
        receipt: Receipt,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Declined> {
        let project = project.votes.get_or_insert_with(|| {
            VoteProject::new(ProjectScore::new(self.settings.scoring.initial_score))
        });
        let settings = StepSettings {
            dedupe_window: self.settings.limits.dedupe_window,
            lambda: self.settings.scoring.lambda_for(batch.project_id),
            coalesce_ms: self.settings.scores_coalesce_ms,
        };
        let Some(step) = project.step(batch, at, receipt, settings)? else {
            return Ok(Outcome::Replayed);
        };
        let stalled_after = self.settings.scoring.stalled_after_batches;
        if stalled_after > 0 && step.still == stalled_after {
            let alert = stalled_alert(batch, &project.score, stalled_after);
            out.push(Output::alert(Some(batch.project_id.to_owned()), &alert));
        }
        match step.publish {
            Publish::Now { alpha } => {
                let last = project.score.last_update_at.unwrap_or(at);
                let score = &project.score;
                let output = score_output(batch.project_id, score, alpha, settings.lambda, last);
                out.push(output);
            }
            Publish::Held { first: true } => held.push(ProjectKey::from(batch.project_id)),
            Publish::Held { first: false } => {}
        }
        note_votes(
            journal,
            &mut project.noted,
            batch.project_id,
            &step.remembered,
        );
        Ok(if step.late {
            Outcome::Late
        } else {
            Outcome::Applied
        })
    }
}

/// What a vote project's step applies besides its batch: its part of the settings.
#[derive(Debug, Clone, Copy)]
struct StepSettings {
    /// `limits.dedupe_window`.
    dedupe_window: usize,
    /// The project's decay rate (`scoring.lambda`, or its own).
    lambda: f64,
    /// `output.scores_coalesce_ms`.
    coalesce_ms: u64,
}

/// A vote project's step: whether the batch came late, how many batches in a row have not
/// moved the project's event time ([`ProjectScore::still`]), when its `jury.scores` record goes
/// out, and what its dedupe window remembered and forgot (for the journal).
struct Step {
    late: bool,
    still: u64,
    publish: Publish,
    remembered: dedupe::Remembered,
}

/// When a step's `jury.scores` record goes out.
enum Publish {
    /// Now, for a step with `alpha`.
    Now { alpha: f64 },
    /// At the end of the runtime's cycle ([`Engine::release_held`]); `first` when the project
    /// held nothing before, so it joins the state's held projects.
    Held { first: bool },
}

impl VoteProject {
    /// Takes the HumanJudge step of a weighed batch at `at`: remembers its event id, moves the
    /// score and says when its record goes out (now, or held back when the runtime's clock
    /// says it comes within `coalesce_ms` of the project's last one, only the latest kept).
    /// `None` for a batch the project already counts (at or below its last applied position,
    /// its id remembered); declined, with nothing changed, for a resend or a batch out of
    /// order (see [`Engine::apply_weighed`]).
    fn step(
        &mut self,
        batch: &Weighed<'_>,
        at: EventTime,
        receipt: Receipt,
        settings: StepSettings,
    ) -> Result<Option<Step>, Declined> {
        if let (Some(offset), Some(through)) = (receipt.position, self.applied_through)
            && offset <= through
        {
            return if self.seen.find(batch.fingerprint) {
                Ok(None)
            } else {
                Err(Declined::OutOfOrder { through })
            };
        }
        // One probe of the window both detects a resend and remembers the id (nothing below
        // can reject the batch): with a full window each probe is a cache miss.
        let remembered = self
            .seen
            .insert_fingerprint(batch.fingerprint, settings.dedupe_window)
            .ok_or(Declined::Resend)?;
        if receipt.position.is_some() {
            self.applied_through = receipt.position;
        }
        let step = self
            .score
            .apply(at, batch.mean, batch.votes as u64, settings.lambda);
        let c = &mut self.coalescing;
        let publish = match receipt.clock_ms {
            Some(now)
                if c.emitted_ms
                    .is_some_and(|t| now.saturating_sub(t) < settings.coalesce_ms) =>
            {
                let first = c.held_alpha.is_none();
                c.held_alpha = Some(step.alpha);
                Publish::Held { first }
            }
            clock_ms => {
                // Published now: a score held before is superseded.
                *c = Coalescing {
                    emitted_ms: clock_ms,
                    held_alpha: None,
                };
                Publish::Now { alpha: step.alpha }
            }
        };
        Ok(Some(Step {
            late: step.late,
            still: step.still,
            publish,
            remembered,
        }))
    }
}

/// Why [`Engine::apply_weighed`] declined a batch.
enum Declined {
    /// Its event id was applied to the project before.
    Resend,
    /// Its offset is at or below `through`, the project's last applied one, and its id is not
    /// remembered.
    OutOfOrder { through: i64 },
    /// It would add a project to an instance at `limits.max_projects`.
    ProjectLimit,
}

impl Engine {
    /// Emits the held-back score of every project in `state` (see [`Coalescing`]), in the
    /// order they were first held. The runtime calls it at the end of every cycle, before it
    /// writes the cycle's changelog.
    pub fn release_held(&self, state: &mut PartitionState, out: &mut Vec<Output>) {
        for key in state.held.drain(..) {
            let Some(project) = state
                .projects
                .get_mut(key.as_str())
                .and_then(|p| p.votes.as_mut())
            else {
                continue;
            };
            // A held score's project has taken a step, so it has a last event time.
            if let (Some(alpha), Some(last)) = (
                project.coalescing.held_alpha.take(),
                project.score.last_update_at,
            ) {
                let lambda = self.settings.scoring.lambda_for(&key);
                out.push(score_output(&key, &project.score, alpha, lambda, last));
            }
        }
    }
}
