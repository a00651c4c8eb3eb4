//! The reviewer pipeline: the reviewer model (see [`super::model::reviewers`]) learns from
//! the verdicts judge quality keeps per item. Its figures are derived, never state: a project's
//! reviewers are fitted when their records are published (coalesced: the projects whose
//! verdicts changed are held until the runtime's cycle ends, [`Engine::release_reviewers`]),
//! and at the checkpoints of the project's verdicts ([`Reviewers::checkpoint_due`]), where
//! their findings are brought up to date, those that just became true raised on
//! `jury.bias-alerts` (`reviewer_unreliable`, `reviewer_adversarial`,
//! `reviewer_straight_lining`), and the learned weights take the fit's reliabilities.
//!
//! [`Reviewers::checkpoint_due`]: super::model::reviewers::Reviewers::checkpoint_due

use serde::Serialize;

use super::Engine;
use super::journal::Change;
use super::model::bias::BiasAlert;
use super::model::judge_quality::{Observed, ProjectQuality};
use super::model::reviewers::{Figures, Findings, LearnedWeights};
use super::output::{Output, OutputTopic, Shows};
use super::settings::{ReputationSource, Reviewers};
use super::state::PartitionState;
use smallvec::SmallVec;

impl Engine {
    /// Whether the reviewer model learns: `reviewers.enabled` where judge quality keeps items.
    pub(super) fn learns_reviewers(&self) -> bool {
        self.settings.pairs_judges && self.settings.reviewers.enabled
    }

    /// After a record (of item or session `cause`) of `project` changed what `observed`
    /// says: the projects whose reviews changed are held for [`Engine::release_reviewers`], and
    /// at a checkpoint of `project` its reviewers are fitted on its held items: their findings
    /// brought up to date (a changelog record where they changed), those that just became true
    /// raised.
    pub(super) fn review(
        &self,
        state: &mut PartitionState,
        (project, cause): (&str, &str),
        observed: &mut Observed,
        out: &mut Vec<Output>,
    ) {
        state.held_reviewers.dirty.append(&mut observed.reviewed);
        if !std::mem::take(&mut observed.checkpoint) {
            return;
        }
        let Some(q) = state.projects.get_mut(project).map(|p| &mut p.quality) else {
            return;
        };
        let settings = &self.settings.reviewers;
        let fitted = q.checkpoint_fit(&state.quality, settings.max_reviewers);
        q.reviewers.note_fit(&fitted);
        let mut noted = q.reviewers.drop_unfitted(&fitted);
        for (reviewer, figures) in &fitted.reviewers {
            let before = q.reviewers.findings(reviewer);
            let now = figures.findings(before, settings);
            for alert in alerts((project, cause), reviewer, figures, (before, now), settings) {
                out.push(Output::alert(Some(project.to_owned()), &alert));
            }
            if q.reviewers.set_findings(reviewer, now) {
                noted.push(reviewer.clone());
            }
        }
        q.reviewers.keep_checkpoint(fitted);
        for reviewer in noted {
            state.note(|| Change::Reviewer {
                project: project.to_owned(),
                reviewer: reviewer.to_string(),
            });
        }
    }

    /// Weighs a vote batch by its `voters`' learned weights in its project (whose judge quality
    /// is `quality`, if the project is held), as
    /// `scoring.reputation_source` asks: `weights` come in as the table's `(weight, value)` and
    /// leave as the ones to apply. A vote's learned weight is the log-likelihood ratio its
    /// verdict carries for itself, clipped at 0 (for a reviewer right with probability `p`
    /// whatever the truth, `logit p`: the weight with which independent verdicts combine into
    /// the most likely truth; a verdict that says nothing, or worse than nothing, counts
    /// nothing rather than against itself), as of the project's last checkpoint, once its voter
    /// had `reviewers.min_items` shared items; before that, the table's. With `both` the two
    /// multiply. A batch whose learned weights sum to 0 keeps the table's: a batch is never
    /// dropped because its voters' weights vanished.
    pub(super) fn learned_weights<'v>(
        &self,
        quality: Option<&ProjectQuality>,
        voters: impl Iterator<Item = &'v str>,
        weights: &mut [(f64, f64)],
    ) {
        let source = self.settings.scoring.reputation_source;
        if source == ReputationSource::Table {
            return;
        }
        let Some(fitted) = quality.and_then(|q| q.reviewers.checkpoint()) else {
            return;
        };
        let min_items = self.settings.reviewers.min_items;
        let learned: SmallVec<[f64; 4]> = voters
            .zip(weights.iter())
            .map(|(voter, &(table, value))| {
                let learned = fitted.get(voter).and_then(|r| r.learned_weights(min_items));
                let pick = |w: LearnedWeights| if value >= 0.5 { w.pass } else { w.fail };
                match learned {
                    Some(w) if source == ReputationSource::Both => table * pick(w),
                    Some(w) => pick(w),
                    None => table,
                }
            })
            .collect();
        if learned.iter().sum::<f64>() > 0.0 {
            for (w, l) in weights.iter_mut().zip(learned) {
                w.0 = l;
            }
        }
    }

    /// Holds every reviewer's record of `state` for the next [`Engine::release_reviewers`]: a
    /// runtime calls it once it has restored a state, so a record that was held when the
    /// state's last owner stopped is published all the same (the topic is a table: the same
    /// record twice changes nothing). Each project's reviewers are fitted for the learned
    /// weights until its next checkpoint.
    pub fn republish_reviewers(&self, state: &mut PartitionState) {
        let held = &mut state.held_reviewers;
        held.published.clear();
        let max_reviewers = self.settings.reviewers.max_reviewers;
        for (project, p) in &mut state.projects {
            let q = &mut p.quality;
            if !q.has_verdicts(&state.quality) {
                continue;
            }
            let fitted = q.checkpoint_fit(&state.quality, max_reviewers);
            q.reviewers.note_fit(&fitted);
            q.reviewers.keep_checkpoint(fitted);
            if q.reviewers.hold() {
                held.dirty.push(project.clone());
            }
        }
    }

    /// Publishes the reviewer records of the held projects (those whose reviews a record
    /// changed), fitted on their verdicts as they now are; a record equal to the one last
    /// published for its reviewer is not published again. Replay calls it at the end of its
    /// input, the service when it stops or hands partitions over.
    pub fn release_reviewers(&self, state: &mut PartitionState, out: &mut Vec<Output>) {
        self.begin_reviewer_release(state);
        self.release_some_reviewers(state, out, usize::MAX);
    }

    /// Starts a release of the held projects' reviewer records, which
    /// [`Engine::release_some_reviewers`] then publishes a few projects at a time: the service
    /// starts one every `output.reviewers_coalesce_ms`, and fitting every project held at once
    /// would hold up the records behind it for as long (the p99 latency, with many projects).
    /// Projects held from now on wait for the next release.
    pub fn begin_reviewer_release(&self, state: &mut PartitionState) {
        let held = &mut state.held_reviewers;
        held.releasing.append(&mut held.dirty);
        held.releasing.sort_unstable_by(|a, b| b.cmp(a));
        held.releasing.dedup();
    }

    /// Publishes the reviewer records of at most `max` projects of the release under way, in
    /// order of project id, as [`Engine::release_reviewers`] does; returns how many are left.
    pub fn release_some_reviewers(
        &self,
        state: &mut PartitionState,
        out: &mut Vec<Output>,
        max: usize,
    ) -> usize {
        let settings = &self.settings.reviewers;
        let held = &mut state.held_reviewers;
        for _ in 0..max {
            let Some(project) = held.releasing.pop() else {
                break;
            };
            let Some(q) = state.projects.get_mut(&project).map(|p| &mut p.quality) else {
                held.published.remove(&project);
                continue;
            };
            q.reviewers.release();
            let fitted = q.fit_reviewers(&state.quality, settings.max_reviewers);
            q.reviewers.note_fit(&fitted);
            let published = held.published.entry(project.clone()).or_default();
            published.retain(|r, _| fitted.reviewers.contains_key(r));
            for (reviewer, figures) in &fitted.reviewers {
                let findings = q.reviewers.findings(reviewer);
                let kept = (findings, settings.min_items);
                let record = reviewer_record(&project, reviewer, figures, kept);
                let hash = xxhash_rust::xxh3::xxh3_64(record.render().as_bytes());
                if published.insert(reviewer.clone(), hash) != Some(hash) {
                    out.push(record);
                }
            }
            if published.is_empty() {
                held.published.remove(&project);
            }
        }
        held.releasing.len()
    }
}

/// The alerts of `reviewer`'s findings that went from `before` to `now`, in `project`, caused
/// by a record of item or session `cause`.
fn alerts(
    (project, cause): (&str, &str),
    reviewer: &str,
    r: &Figures,
    (before, now): (Findings, Findings),
    settings: &Reviewers,
) -> Vec<BiasAlert> {
    let alert = |kind, value: f64, threshold, detail| {
        let subject = Some(reviewer.to_owned());
        let figures = (value, threshold, r.shared);
        BiasAlert::project_finding((project, cause), (kind, subject), figures, detail)
    };
    let p = r.reliability();
    let mut alerts = Vec::new();
    if now.unreliable && !before.unreliable {
        alerts.push(alert(
            "reviewer_unreliable",
            p,
            settings.min_reliability,
            format!(
                "{reviewer}'s verdicts are estimated right {:.0}% of the time over {} shared items",
                100.0 * p,
                r.shared
            ),
        ));
    }
    if now.adversarial && !before.adversarial {
        alerts.push(alert(
            "reviewer_adversarial",
            p,
            0.5,
            format!(
                "{reviewer} gives the true verdict less often than chance: reliability {p:.3} ± \
                 {:.3} over {} shared items",
                2.0 * r.standard_error(),
                r.shared
            ),
        ));
    }
    if now.straight_lining && !before.straight_lining {
        let same = r.pass_rate().map_or(0.0, |x| x.max(1.0 - x));
        alerts.push(alert(
            "reviewer_straight_lining",
            same,
            settings.max_same_verdict,
            format!(
                "{reviewer} gives the same verdict on {:.0}% of its items while the others pass \
                 {:.0}% of them",
                100.0 * same,
                100.0 * r.crowd_pass_rate().unwrap_or(0.0)
            ),
        ));
    }
    alerts
}

/// The `jury.reviewer-quality` record of `reviewer` in `project`, with its figures `r`, its
/// active findings `f` and `reviewers.min_items` (before which its learned weights are
/// withheld). Also how the interactive queries' view is seeded from restored state.
pub fn reviewer_record(
    project: &str,
    reviewer: &str,
    r: &Figures,
    (f, min_items): (Findings, u64),
) -> Output {
    let p = r.reliability();
    let se = r.standard_error();
    let findings = [
        (f.unreliable, "unreliable"),
        (f.adversarial, "adversarial"),
        (f.straight_lining, "straight_lining"),
    ];
    let record = ReviewerQualityRecord {
        project_id: project,
        voter_id: reviewer,
        items: r.shared,
        verdicts: r.verdicts,
        agreement: r.agreement(),
        reliability: p,
        sensitivity: r.coins.sensitivity,
        specificity: r.coins.specificity,
        standard_error: se,
        interval: [(p - 1.96 * se).max(0.0), (p + 1.96 * se).min(1.0)],
        pass_rate: r.pass_rate(),
        judge_agreement: r.judge_agreement(),
        judged_items: r.judged,
        learned_weights: r.learned_weights(min_items),
        findings: findings
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect(),
        last_event_at: r.last_event_at.map(|t| t.to_string()),
    };
    Output::json(
        OutputTopic::ReviewerQuality,
        Some(format!("{project}/{reviewer}")),
        &record,
    )
    .showing(Shows::Reviewer {
        project: project.to_owned(),
        reviewer: reviewer.to_owned(),
    })
}

/// `jury.reviewer-quality`: a reviewer's reliability (key `<project_id>/<voter_id>`).
#[derive(Debug, Serialize)]
struct ReviewerQualityRecord<'a> {
    project_id: &'a str,
    voter_id: &'a str,
    /// Held items it voted on that also have another reviewer's vote.
    items: u64,
    /// Held items it voted on.
    verdicts: u64,
    agreement: Option<f64>,
    reliability: f64,
    /// P(it says pass | the truth is pass) and P(it says fail | the truth is fail).
    sensitivity: f64,
    specificity: f64,
    standard_error: f64,
    /// reliability ± 1.96 standard errors, within [0, 1].
    interval: [f64; 2],
    pass_rate: Option<f64>,
    judge_agreement: Option<f64>,
    judged_items: u64,
    /// The weights its pass and its fail verdicts get with `scoring.reputation_source =
    /// "learned"` (see [`Figures::learned_weights`]); `null` while withheld.
    learned_weights: Option<LearnedWeights>,
    findings: Vec<&'static str>,
    last_event_at: Option<String>,
}

#[cfg(test)]
mod tests;
