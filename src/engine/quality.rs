//! The judge-quality pipeline: the humans' votes on an item and the judges' scores of the same
//! candidate, joined per project into pairs (see [`super::model::judge_quality`]); each pair
//! republishes its judge's `jury.judge-quality` record, may raise `judge_human_disagreement`
//! and `judge_drift` alerts and a `jury.review-requests` record; a completed session gets the
//! effective number of its judges. A project whose judges and humans name their items apart,
//! so that nothing pairs, gets a `judge_items_unmatched` alert; one whose judged items never
//! get `judge_quality.min_human_votes` votes, a `judge_items_short_of_votes` alert.
//!
//! The state lives in the project ([`super::state::Project::quality`]), beside its score and
//! its sessions: a vote batch joins it as it is applied (`Engine::observe_votes`), from the
//! batch as read once.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use smallvec::SmallVec;

use super::contract::time::EventTime;
use super::ids::ProjectKey;
use super::journal::Change;
use super::model::bias::BiasAlert;
use super::model::consensus::{Analysis, analyze};
use super::model::effective_judges::{Basis, CandidateScores};
use super::model::judge_quality::{
    Agreement, JudgeWindow, Observed, Pair, ProjectQuality, QualityLimits, Shortfall, Sides,
    TaskQuality, Unpaired, item_share,
};
use super::model::reviewers::{ReviewerLimits, Verdict, Verdicts};
use super::model::session::Session;
use super::output::{Output, OutputTopic, Shows};
use super::settings::Weighting;
use super::state::PartitionState;
use super::{Engine, Outcome};

/// A vote batch as judge quality observes it: its `(weight, value)` as applied, as the
/// reputation table gives them, and its voters.
pub(super) type ObservedVotes<'a> = (&'a [(f64, f64)], &'a [(f64, f64)], &'a [&'a str]);

impl Engine {
    fn quality_limits(&self) -> QualityLimits {
        let q = &self.settings.judge_quality;
        QualityLimits {
            min_human_votes: q.min_human_votes,
            max_pending_items: q.max_pending_items,
            window: q.window,
            max_judges: q.max_judges,
            max_task_items: self.settings.quality_task_items,
            max_waiting_bytes: item_share(self.settings.record_bytes),
            reviewers: self.learns_reviewers().then_some(ReviewerLimits {
                max_verdicts: self.settings.reviewers.max_verdicts,
                min_items: self.settings.reviewers.min_items,
            }),
        }
    }

    /// Joins a vote batch of `project` (whose judge quality is `quality`, in the task's `task`)
    /// on `item` to the humans' score of that item, if judge scores pair with votes and the
    /// batch counted, and returns the item and what that changed, which the caller, holding the
    /// whole state again, reviews ([`Engine::review`]) and notes ([`Engine::add_pairs`]).
    /// The batch counted if `outcome` is applied or late, or replayed into a score that already
    /// counts it (see [`super::VoteProject::applied_through`]): a projects unit writes its vote
    /// projects before the rest of its state, so after a flush cut short the score may hold a
    /// batch its judge quality does not (see `crate::changelog`), and a batch re-read from the
    /// log is always one the judge quality does not hold. The
    /// judge scores waiting for the item pair with it once its score is complete. `votes` are
    /// the batch's `(weight, value)` as applied, `table` as the reputations give them, and
    /// `voters` its voters, whose verdicts (pass for a value of at least ½) the reviewer model
    /// learns from, each with its table weight: what the model starts from must not be its own
    /// output (learned weights), or one fit in the mirror solution would pull the next there.
    /// An `item_id` longer than `limits.max_id_bytes` is not kept (the id is informational for
    /// the score).
    pub(super) fn observe_votes<'i>(
        &self,
        (task, (project, quality)): (&mut TaskQuality, (&str, &mut ProjectQuality)),
        item: Option<&'i str>,
        (votes, table, voters): ObservedVotes<'_>,
        at: EventTime,
        outcome: Outcome,
    ) -> Option<(&'i str, Observed)> {
        if !self.settings.pairs_judges
            || !matches!(
                outcome,
                Outcome::Applied | Outcome::Late | Outcome::Replayed
            )
        {
            return None;
        }
        let item = item.filter(|i| i.len() <= self.settings.limits.max_id_bytes)?;
        let limits = self.quality_limits();
        let verdicts: Verdicts = if limits.reviewers.is_some() {
            voters
                .iter()
                .zip(table)
                .map(|(voter, &(weight, value))| Verdict {
                    reviewer: ProjectKey::from(*voter),
                    pass: value >= 0.5,
                    weight,
                    at,
                })
                .collect()
        } else {
            SmallVec::new()
        };
        let mut observed = task.votes_in((project, quality), item, (votes, verdicts), at, &limits);
        self.look_unpaired((task, (project, quality)), &mut observed);
        Some((item, observed))
    }

    /// Notes in `observed` whether what it observed of `project` (its judge quality `quality`,
    /// in `task`) just found that no judge score of the project pairs, and why
    /// ([`ProjectQuality::unpaired`], at `judge_quality.min_pairs` items each: as many as a
    /// judge's alerts need pairs), for [`Engine::add_pairs`] to say.
    fn look_unpaired(
        &self,
        (task, (project, quality)): (&TaskQuality, (&str, &mut ProjectQuality)),
        observed: &mut Observed,
    ) {
        let at_least = self.settings.judge_quality.min_pairs;
        if observed.pairs.is_empty() {
            observed.unpaired = quality.unpaired(project, task, at_least);
        }
    }

    /// A completed session of `project` analysed with its judges' weights: the configured
    /// ones, or with `sessions.judge_weighting = "learned"` each judge with at least
    /// `judge_quality.min_pairs` pairs weighted by `max(0, kappa)`. Where the learned weights
    /// lose a value the configured ones give (every judge of a candidate at weight 0), the
    /// configured analysis is published instead, and says so: a result is never erased by
    /// weights that vanished.
    pub(super) fn analyse<'s>(
        &self,
        state: &PartitionState,
        project: &str,
        session: &'s Session,
    ) -> (Analysis<'s>, Weights) {
        let sessions = &self.settings.sessions;
        let quality = state.quality(project);
        let (Weighting::Learned, Some(q)) = (sessions.judge_weighting, quality) else {
            return (analyze(session, sessions), Weights::Configured);
        };
        let mut learned = sessions.clone();
        let judges = session.ballots.keys().map(String::as_str);
        for (judge, weight) in q.learned_weights(judges, self.settings.judge_quality.min_pairs) {
            learned.judge_weights.insert(judge.to_owned(), weight);
        }
        let analysis = analyze(session, &learned);
        if values(&analysis) == possible_values(&analysis) {
            return (analysis, Weights::Learned);
        }
        let configured = analyze(session, sessions);
        if values(&configured) > values(&analysis) {
            (configured, Weights::ConfiguredFallback)
        } else {
            (analysis, Weights::Learned)
        }
    }

    /// A completed session's judge quality: its candidates' scores join the project's recent
    /// window, and the effective number of its judges over that window is returned (`None`
    /// without scores).
    pub(super) fn effective_judges(
        &self,
        state: &mut PartitionState,
        project: &str,
        analysis: &Analysis<'_>,
    ) -> Option<(f64, Basis)> {
        let judges = session_judges(analysis);
        if judges.is_empty() {
            return None;
        }
        let candidates: Vec<CandidateScores> = analysis
            .scores
            .values()
            .map(|scores| scores.iter().map(|(j, s)| ((*j).to_owned(), *s)).collect())
            .collect();
        let q = &self.settings.judge_quality;
        let quality = &mut state.project(project).quality;
        let changed = quality.remember(candidates, q.window);
        let judges: Vec<&str> = judges.into_iter().collect();
        let effective = quality.effective_judges(&judges, q.min_shared);
        for seq in changed {
            state.note(|| Change::QualityRecent {
                project: project.to_owned(),
                seq,
            });
        }
        effective
    }

    /// Pairs a completed session's judge scores with the humans' votes on the same items (those
    /// with enough votes at once, the rest when they get them), and asks for a review when the
    /// session's agreement is below `bias.low_agreement`.
    pub(super) fn pair_session(
        &self,
        state: &mut PartitionState,
        (project, session): (&str, &str),
        analysis: &Analysis<'_>,
        at: EventTime,
        out: &mut Vec<Output>,
    ) {
        if let Some(agreement) = analysis.agreement
            && agreement < self.settings.bias.low_agreement
        {
            let request = ReviewRequest {
                project_id: project,
                item_id: None,
                session_id: session,
                reason: "low_agreement",
                judges: session_judges(analysis).into_iter().collect(),
                gap: None,
                agreement: Some(agreement),
                last_event_at: at.to_string(),
            };
            out.push(request.output());
        }
        if !self.settings.pairs_judges {
            return;
        }
        let scores: Vec<(&str, &str, f64)> = analysis
            .scores
            .iter()
            .filter(|(item, _)| item.len() <= self.settings.limits.max_id_bytes)
            .flat_map(|(item, scores)| scores.iter().map(|(judge, s)| (*item, *judge, *s)))
            .collect();
        let limits = self.quality_limits();
        let mut observed = state.quality.completed(
            &mut state.projects,
            (project, session),
            &scores,
            at,
            &limits,
        );
        if let Some(p) = state.projects.get_mut(project) {
            self.look_unpaired((&state.quality, (project, &mut p.quality)), &mut observed);
        }
        self.review(state, (project, session), &mut observed, out);
        self.add_pairs(state, (project, session), observed, out);
    }

    /// Notes what `observed` changed, adds its pairs to their judges' windows, and publishes
    /// each judge's record, its alerts that just became true, and a review request per item and
    /// session where some judge's score differs from the humans' by more than
    /// `judge_quality.review_gap`; or, where it found that no judge score of the project pairs,
    /// the `judge_items_unmatched` or `judge_items_short_of_votes` alert, naming `by` (the
    /// session or the voted item whose record found it).
    pub(super) fn add_pairs(
        &self,
        state: &mut PartitionState,
        (project, by): (&str, &str),
        observed: Observed,
        out: &mut Vec<Output>,
    ) {
        let Observed {
            pairs,
            items,
            waiting,
            left_out,
            first_forgotten,
            unpaired,
            ..
        } = observed;
        if first_forgotten {
            state.note(|| Change::ItemsForgotten);
        }
        for seq in items {
            state.note_item(seq);
        }
        for seq in waiting {
            state.note(|| Change::QualityWaiting { seq });
        }
        if left_out {
            state.note(|| Change::LeftOut {
                project: ProjectKey::from(project),
            });
        }
        if let Some(unpaired) = unpaired
            && let Some(p) = state.projects.get(project)
        {
            let found = (&p.quality, &state.quality);
            let q = &self.settings.judge_quality;
            let alert = match unpaired {
                Unpaired::Apart => unmatched_alert((project, by), found, q),
                Unpaired::ShortOfVotes => short_of_votes_alert((project, by), found, q),
            };
            out.push(Output::alert(Some(project.to_owned()), &alert));
            state.note(|| Change::Unmatched {
                project: ProjectKey::from(project),
            });
        }
        if pairs.is_empty() {
            return;
        }
        let q = &self.settings.judge_quality;
        let limits = self.quality_limits();
        let Some(quality) = state.projects.get_mut(project).map(|p| &mut p.quality) else {
            return;
        };
        // A pair ends the finding that none pairs.
        let unpaired_before = std::mem::take(&mut quality.unmatched);
        let mut judges = Vec::new();
        let mut alerts = Vec::new();
        for pair in &pairs {
            let standing = quality.add(pair, &limits, &mut judges);
            judges.push(pair.judge.clone());
            let a = &standing.agreement;
            let disagreeing = a.pairs >= q.min_pairs && a.kappa.is_some_and(|k| k < q.min_kappa);
            let drifting = standing.kappa_change.is_some_and(|c| c < -q.max_kappa_drop);
            let fresh = quality.findings(&pair.judge, (disagreeing, drifting));
            if let Some(window) = quality.judges.get(&pair.judge) {
                out.push(judge_record(project, &pair.judge, window, q.window));
            }
            alerts.extend(judge_alerts(
                project,
                pair,
                &standing.agreement,
                standing.kappa_change,
                fresh,
                q,
            ));
        }
        for alert in &alerts {
            out.push(Output::alert(Some(project.to_owned()), alert));
        }
        if unpaired_before {
            state.note(|| Change::Unmatched {
                project: ProjectKey::from(project),
            });
        }
        for judge in judges {
            state.note(|| Change::QualityJudge {
                project: project.to_owned(),
                judge,
            });
        }
        // One request per item and session: which pairs form together depends on whether the
        // session or the item's votes came last, which no producer decides; what each pair is
        // does not.
        let mut gapped: BTreeMap<(&str, &str), Vec<&Pair>> = BTreeMap::new();
        for p in pairs.iter().filter(|p| (p.s - p.h).abs() > q.review_gap) {
            gapped.entry((&p.item, &p.session)).or_default().push(p);
        }
        for ((item, session), pairs) in gapped {
            let judges: BTreeSet<&str> = pairs.iter().map(|p| p.judge.as_str()).collect();
            let gap = pairs.iter().map(|p| (p.s - p.h).abs()).fold(0.0, f64::max);
            let at = pairs.iter().map(|p| p.at).max();
            let request = ReviewRequest {
                project_id: project,
                item_id: Some(item),
                session_id: session,
                reason: "judge_human_gap",
                judges: judges.into_iter().collect(),
                gap: Some(gap),
                agreement: None,
                last_event_at: at.map(|t| t.to_string()).unwrap_or_default(),
            };
            out.push(request.output());
        }
    }
}

/// The judges with counted scores in a session, in order.
/// How a consensus record's judges were weighted (its `weighting` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Weights {
    /// `sessions.judge_weights`.
    Configured,
    /// Learned from judge quality where a judge has enough pairs, configured otherwise.
    Learned,
    /// The learned weights lost a value, so the configured ones were used.
    ConfiguredFallback,
}

/// The values a weighted analysis gives: the single-candidate consensus value and the
/// candidates' weighted mean scores.
fn values(a: &Analysis<'_>) -> usize {
    let consensus = a.consensus.as_ref().is_some_and(|c| c.value.is_some());
    usize::from(consensus) + a.rankings.iter().filter(|r| r.mean_score.is_some()).count()
}

/// The most [`values`] could be: a value for every candidate with a vote, and for a
/// single-candidate consensus unless it asks for review.
fn possible_values(a: &Analysis<'_>) -> usize {
    let consensus = a
        .consensus
        .as_ref()
        .is_some_and(|c| !c.needs_review && c.strategy != "none");
    usize::from(consensus) + a.rankings.iter().filter(|r| r.votes > 0).count()
}

fn session_judges<'s>(analysis: &Analysis<'s>) -> BTreeSet<&'s str> {
    analysis
        .scores
        .values()
        .flat_map(|scores| scores.iter().map(|(j, _)| *j))
        .collect()
}

/// The `jury.judge-quality` record of `judge` in `project`: its agreement over its window.
/// Also how the interactive queries' view is seeded from restored state.
pub fn judge_record(project: &str, judge: &str, window: &JudgeWindow, size: usize) -> Output {
    let record = JudgeQualityRecord {
        project_id: project,
        judge,
        agreement: window.agreement_with_humans(),
        kappa_change: window.kappa_change(size),
        last_event_at: window.last_event_at.map(|t| t.to_string()),
    };
    Output::json(
        OutputTopic::JudgeQuality,
        Some(format!("{project}/{judge}")),
        &record,
    )
    .showing(Shows::Judge {
        project: project.to_owned(),
        judge: judge.to_owned(),
    })
}

/// The alerts of a judge's findings that just became true (`fresh`: disagreement, drift).
fn judge_alerts(
    project: &str,
    pair: &Pair,
    a: &Agreement,
    kappa_change: Option<f64>,
    fresh: (bool, bool),
    q: &super::settings::JudgeQuality,
) -> Vec<BiasAlert> {
    let judge = &pair.judge;
    let alert = |kind, value: f64, threshold, detail| {
        let sample = a.pairs as u64;
        let found = (project, pair.session.as_str());
        BiasAlert::project_finding(
            found,
            (kind, Some(judge.clone())),
            (value, threshold, sample),
            detail,
        )
    };
    let mut alerts = Vec::new();
    if fresh.0
        && let Some(kappa) = a.kappa
    {
        alerts.push(alert(
            "judge_human_disagreement",
            kappa,
            q.min_kappa,
            format!(
                "{judge} agrees with the humans at kappa {kappa:.3} over its last {} pairs",
                a.pairs
            ),
        ));
    }
    if fresh.1
        && let Some(change) = kappa_change
    {
        alerts.push(alert(
            "judge_drift",
            change,
            -q.max_kappa_drop,
            format!(
                "{judge}'s kappa with the humans moved by {change:.3} over its last {} pairs",
                q.window
            ),
        ));
    }
    alerts
}

/// The `judge_items_unmatched` alert of `project`, found by the record of `by` (a session or
/// a voted item) on its judge quality `quality` (in `task`): each side's count and oldest id.
/// Its value is the items they share (none), its threshold the items each side reached
/// (`judge_quality.min_pairs`).
fn unmatched_alert(
    (project, by): (&str, &str),
    (quality, task): (&ProjectQuality, &TaskQuality),
    q: &super::settings::JudgeQuality,
) -> BiasAlert {
    let Sides { waiting, voted } = quality.sides(task);
    let (judged, voted_on) = quality.oldest_of_sides(task);
    let (judged, voted_on) = (judged.unwrap_or_default(), voted_on.unwrap_or_default());
    BiasAlert::project_finding(
        (project, by),
        ("judge_items_unmatched", None),
        (0.0, q.min_pairs as f64, waiting.min(voted) as u64),
        format!(
            "no judge score of {project} has paired with the humans': none of the {waiting} \
             items its judges scored, waiting for votes, is among the {voted} items with votes \
             it holds. A judge's score of a candidate pairs with the votes on the item of the \
             same id: do the judges' candidate ids (such as {judged:?}) equal the votes' \
             item_id (such as {voted_on:?})? (Or the items' votes were forgotten, \
             judge_quality.max_items, before their judge scores came.)"
        ),
    )
}

/// The `judge_items_short_of_votes` alert of `project`, found by the record of `by` (a
/// session or a voted item) on its judge quality `quality` (in `task`): the judged items with
/// votes, and the most votes one has. Its value is that most, its threshold the votes a humans'
/// score needs (`judge_quality.min_human_votes`).
fn short_of_votes_alert(
    (project, by): (&str, &str),
    (quality, task): (&ProjectQuality, &TaskQuality),
    q: &super::settings::JudgeQuality,
) -> BiasAlert {
    let waiting = quality.sides(task).waiting;
    let Shortfall { shared, most } = quality.shortfall(project, task);
    let (most, item) = most.unwrap_or_default();
    let needed = q.min_human_votes.max(1);
    BiasAlert::project_finding(
        (project, by),
        ("judge_items_short_of_votes", None),
        (most as f64, needed as f64, shared as u64),
        format!(
            "no judge score of {project} has paired with the humans': {shared} of the {waiting} \
             items its judges scored have votes, none the {needed} votes carrying weight \
             (judge_quality.min_human_votes) that make an item's humans' score: the most is \
             {most}, on {item:?}. If each item is reviewed fewer times, set \
             judge_quality.min_human_votes to what it gets; if more votes are coming, the first \
             pair ends this. (A vote of reputation 0 carries no weight.)"
        ),
    )
}

/// `jury.judge-quality`: a judge's agreement with the humans (key `<project_id>/<judge>`).
#[derive(Debug, Serialize)]
struct JudgeQualityRecord<'a> {
    project_id: &'a str,
    judge: &'a str,
    #[serde(flatten)]
    agreement: Agreement,
    /// How far its kappa moved since `judge_quality.window` pairs earlier.
    kappa_change: Option<f64>,
    last_event_at: Option<String>,
}

/// `jury.review-requests`: an item or a session a human should look at (key `project_id`).
#[derive(Debug, Serialize)]
struct ReviewRequest<'a> {
    project_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    item_id: Option<&'a str>,
    session_id: &'a str,
    reason: &'static str,
    judges: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gap: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agreement: Option<f64>,
    last_event_at: String,
}

impl ReviewRequest<'_> {
    fn output(&self) -> Output {
        Output::json(
            OutputTopic::ReviewRequests,
            Some(self.project_id.to_owned()),
            self,
        )
    }
}

#[cfg(test)]
mod tests;
