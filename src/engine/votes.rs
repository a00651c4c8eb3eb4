//! The vote pipeline (`jury.votes`): a batch validated against the contract, weighed by its
//! voters' reputations, checked for a resent `event_id`, and applied to its project's
//! HumanJudge score; the `jury.scores` record, coalesced per project when the runtime has a clock.
//! A runtime with two threads validates on one ([`Engine::prepare_votes`]) and applies on the
//! other ([`Engine::apply_prepared`]); both paths share one weight rule and one apply.

use compact_str::CompactString;
use smallvec::SmallVec;

use super::contract::json::{self, Json};
use super::contract::rejection::{ErrorCode, Rejection};
use super::contract::time::EventTime;
use super::contract::vote::{self, VoteBatch, VoteLimits};
use super::ids::ProjectKey;
use super::journal::note_votes;
use super::model::dedupe;
use super::model::score::{ProjectScore, weighted_mean};
use super::output::{Output, OutputTopic, OutputValue, ScoreValue};
use super::reputation::ReputationTable;
use super::settings::ReputationSource;
use super::state::{Coalescing, PartitionState, VoteProject};
use super::{Engine, InputTopic, Outcome, Receipt, Record, parse_rejection};

/// A `jury.votes` record validated by [`Engine::prepare_votes`] and not yet applied: what
/// applying it takes from the batch, owned, so that it can cross to another thread and the
/// payload is not read again (see [`Engine::apply_prepared`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedVotes {
    votes: SmallVec<[PreparedVote; 4]>,
    at: EventTime,
    /// The project and the event id's dedupe fingerprint, computed on the polling thread.
    project: ProjectKey,
    fingerprint: u128,
    /// The batch's `item_id`, kept when judge scores pair with votes (see
    /// [`Engine::observe_votes`]).
    item: Option<CompactString>,
}

/// One vote of a [`PreparedVotes`]: its value, and its explicit reputation or else its voter,
/// whose reputation the table gives when the batch is applied (see [`vote::weight`]).
#[derive(Debug, Clone, PartialEq)]
struct PreparedVote {
    value: f64,
    reputation: Option<f64>,
    /// Kept when `reputation` is `None` (only then is it looked up), when the reviewer model
    /// learns from the batch's item, and when `scoring.reputation_source` weighs by it. Voter ids of up to 24 bytes are kept inline, so
    /// preparing a vote allocates nothing.
    voter: Option<CompactString>,
}

/// A batch's votes as `(weight, value)`, each vote's weight its explicit reputation or else its
/// voter's in the table ([`vote::weight`]): found once per batch, for the score's mean and for
/// the item's votes in judge quality.
pub type Weights = SmallVec<[(f64, f64); 4]>;

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

impl Engine {
    /// A vote payload read and checked against the contract, with the time it is observed at:
    /// the validation both [`Engine::process`] and [`Engine::prepare_votes`] do. A valid payload
    /// of the plain shape is read in one pass ([`VoteBatch::scan`]); anything else is parsed into
    /// `doc`, which the batch then borrows from.
    pub(super) fn validate_votes<'d>(
        &self,
        record: &Record<'_>,
        payload: &'d [u8],
        doc: &'d mut Option<Json<'d>>,
    ) -> Result<(VoteBatch<'d>, EventTime), Rejection> {
        let limits = self.vote_limits();
        let batch = match VoteBatch::scan(payload, limits) {
            Some(batch) => batch,
            None => {
                let doc = doc.insert(json::parse(payload).map_err(parse_rejection)?);
                VoteBatch::from_json(doc, limits)?
            }
        };
        self.check_key(record, batch.project_id)?;
        let at = self.event_time(batch.occurred_at, record)?;
        Ok((batch, at))
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

    /// Validates a `jury.votes` record without applying it, for a runtime that reads and
    /// validates records on one thread and applies them on another. `Some` for a valid batch;
    /// `None` for anything else (another topic, a rejection), which [`Engine::process`] then
    /// handles from the start and words the rejection for. Validation reads only the record
    /// and the configuration, so it can run ahead of state.
    pub fn prepare_votes(&self, record: &Record<'_>) -> Option<PreparedVotes> {
        if record.input != Some(InputTopic::Votes) {
            return None;
        }
        let payload = record.payload?;
        self.check_size(payload).ok()?;
        let mut doc = None;
        let (batch, at) = self.validate_votes(record, payload, &mut doc).ok()?;
        let item = batch
            .item_id
            .filter(|_| self.settings.pairs_judges)
            .map(CompactString::from);
        let learned = self.settings.scoring.reputation_source != ReputationSource::Table;
        let all_voters = (item.is_some() && self.learns_reviewers()) || learned;
        let votes = batch
            .votes
            .iter()
            .map(|v| PreparedVote {
                value: v.value,
                reputation: v.reputation,
                voter: (all_voters || v.reputation.is_none())
                    .then(|| CompactString::from(v.voter_id)),
            })
            .collect();
        Some(PreparedVotes {
            votes,
            at,
            project: ProjectKey::from(batch.project_id),
            fingerprint: dedupe::fingerprint(batch.event_id),
            item,
        })
    }

    /// Applies `record`, prepared by [`Engine::prepare_votes`]: exactly what
    /// [`Engine::process`] does with it, without reading the payload again. A batch that this
    /// cannot apply (its weights sum to 0, its event id is a resend) goes through
    /// [`Engine::process`], which words the rejection: the weighed path declines before it
    /// changes anything.
    pub fn apply_prepared(
        &self,
        state: &mut PartitionState,
        reputations: &mut ReputationTable,
        record: &Record<'_>,
        prepared: &PreparedVotes,
        out: &mut Vec<Output>,
    ) -> Outcome {
        if state.origins.is_copy(record) {
            return Outcome::Replayed;
        }
        let table: Weights = prepared
            .votes
            .iter()
            .map(|v| {
                let table = || v.voter.as_deref().and_then(|id| reputations.get(id));
                (vote::weight(v.reputation, table), v.value)
            })
            .collect();
        let mut weights = table.clone();
        let voters = prepared.votes.iter().map(|v| v.voter.as_deref());
        self.learned_weights(state, prepared.project.as_str(), voters, &mut weights);
        let start = out.len();
        let applied = weighted_mean(&weights).and_then(|mean| {
            let weighed = Weighed {
                project_id: prepared.project.as_str(),
                fingerprint: prepared.fingerprint,
                mean,
                votes: prepared.votes.len(),
            };
            self.apply_weighed(state, &weighed, prepared.at, record.receipt(), out)
                .ok()
        });
        let outcome = match applied {
            Some(outcome) => {
                let project = (prepared.project.as_str(), prepared.item.as_deref());
                let voters: SmallVec<[&str; 4]> = prepared
                    .votes
                    .iter()
                    .map(|v| v.voter.as_deref().unwrap_or_default())
                    .collect();
                let votes = (weights.as_slice(), table.as_slice(), voters.as_slice());
                self.observe_votes(state, project, votes, prepared.at, outcome, out);
                self.bound_outputs(record, &mut out[start..]);
                outcome
            }
            None => self.process_new(state, reputations, record, out),
        };
        state.origins.advance(record);
        outcome
    }

    /// The `(weight, value)` of `batch`'s votes.
    pub fn weigh(&self, batch: &VoteBatch<'_>, reputations: &ReputationTable) -> Weights {
        batch
            .votes
            .iter()
            .map(|v| {
                let table = || reputations.get(v.voter_id);
                (vote::weight(v.reputation, table), v.value)
            })
            .collect()
    }

    /// Applies a validated vote batch observed at `at`, its votes weighed as `weights`
    /// ([`Engine::weigh`]): the HumanJudge update, duplicate detection and the `jury.scores`
    /// record (held back if the receipt's clock says it comes within the coalescing interval of
    /// the project's last one). Public so benchmarks can time it without parsing.
    pub fn apply_batch(
        &self,
        state: &mut PartitionState,
        (batch, weights): (&VoteBatch<'_>, &[(f64, f64)]),
        at: EventTime,
        receipt: Receipt,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Rejection> {
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
            .map_err(|declined| match declined {
                Declined::Resend => Rejection::new(
                    ErrorCode::DuplicateEventId,
                    format!(
                        "`event_id` {:?} was already applied to project {:?}",
                        batch.event_id, batch.project_id
                    ),
                ),
                Declined::OutOfOrder { through } => Rejection::new(
                    ErrorCode::OffsetOutOfOrder,
                    format!(
                        "offset {} is at or below {through}, the offset of project {:?}'s last \
                         applied batch in the log its state follows, and `event_id` {:?} is not \
                         one it remembers: offsets only grow within a partition",
                        receipt.position.unwrap_or(through),
                        batch.project_id,
                        batch.event_id
                    ),
                ),
                Declined::ProjectLimit => {
                    super::project_limit(batch.project_id, self.settings.limits.max_projects)
                }
            })
    }

    /// [`Engine::apply_batch`] once the batch's votes are weighed. Declined if its event id is
    /// a resend or it comes out of order, and then nothing has changed: a project it would
    /// create cannot have seen the id, and the window's probe that finds it changes nothing.
    ///
    /// A batch at or below its project's last applied position is the same record read again
    /// (after a crash cut a changelog flush short) when the project remembers its id: it is
    /// [`Outcome::Replayed`], silently. One whose id it does not remember cannot be told from a
    /// new event that came out of order, so it is declined rather than dropped unseen or
    /// counted a second time.
    fn apply_weighed(
        &self,
        state: &mut PartitionState,
        batch: &Weighed<'_>,
        at: EventTime,
        receipt: Receipt,
        out: &mut Vec<Output>,
    ) -> Result<Outcome, Declined> {
        let project = match state.projects.get_mut(batch.project_id) {
            Some(p) => p,
            None => {
                if receipt.held_projects >= self.settings.limits.max_projects {
                    return Err(Declined::ProjectLimit);
                }
                let key = ProjectKey::from(batch.project_id);
                state.projects.entry(key).or_default()
            }
        };
        let project = project.votes.get_or_insert_with(|| {
            VoteProject::new(ProjectScore::new(self.settings.scoring.initial_score))
        });
        if let (Some(offset), Some(through)) = (receipt.position, project.applied_through)
            && offset <= through
        {
            return if project.seen.find(batch.fingerprint) {
                Ok(Outcome::Replayed)
            } else {
                Err(Declined::OutOfOrder { through })
            };
        }
        // One probe of the window both detects a resend and remembers the id (nothing below
        // can reject the batch): with a full window each probe is a cache miss.
        let remembered = project
            .seen
            .insert_fingerprint(batch.fingerprint, self.settings.limits.dedupe_window)
            .ok_or(Declined::Resend)?;
        if receipt.position.is_some() {
            project.applied_through = receipt.position;
        }
        let lambda = self.settings.scoring.lambda_for(batch.project_id);
        let step = project
            .score
            .apply(at, batch.mean, batch.votes as u64, lambda);
        let interval = self.settings.scores_coalesce_ms;
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
        Ok(if step.late {
            Outcome::Late
        } else {
            Outcome::Applied
        })
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
