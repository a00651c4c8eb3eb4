//! The reviewer pipeline: the reviewer model (see [`super::model::reviewers`]) learns from
//! the verdicts judge quality keeps per item; every reviewer whose figures a record changed is
//! republished on `jury.reviewer-quality` (coalesced: held until the runtime's cycle ends,
//! [`Engine::release_held`]), and its findings that just became true are raised on
//! `jury.bias-alerts` (`reviewer_unreliable`, `reviewer_adversarial`,
//! `reviewer_straight_lining`).

use serde::Serialize;

use super::Engine;
use super::ids::ProjectKey;
use super::journal::Change;
use super::model::bias::{BiasAlert, risk_level};
use super::model::reviewers::{Findings, ProjectReviewer, Reviewer};
use super::output::{Output, OutputTopic, Shows};
use super::settings::{ReputationSource, Reviewers};
use super::state::PartitionState;
use smallvec::SmallVec;

impl Engine {
    /// Whether the reviewer model learns: `reviewers.enabled` where judge quality keeps items.
    pub(super) fn learns_reviewers(&self) -> bool {
        self.settings.pairs_judges && self.settings.reviewers.enabled
    }

    /// After a record (of the item or session `cause`) changed the `touched`
    /// reviewers: their findings are brought up to date, those that just became true raised,
    /// their records held for [`Engine::release_reviewers`]. A reviewer's changelog record is
    /// written when its findings change, when it is forgotten (a tombstone), and when its last
    /// event time left with a verdict (`kept`).
    pub(super) fn review(
        &self,
        state: &mut PartitionState,
        cause: &str,
        (mut touched, kept): (Vec<ProjectReviewer>, Vec<ProjectReviewer>),
        out: &mut Vec<Output>,
    ) {
        if touched.is_empty() {
            return;
        }
        touched.sort();
        touched.dedup();
        let settings = &self.settings.reviewers;
        let mut noted: Vec<ProjectReviewer> = kept;
        for (owner, reviewer) in touched {
            let held = state
                .quality
                .get_mut(&owner)
                .and_then(|q| q.reviewers.get_mut(&reviewer));
            let Some(r) = held else {
                state
                    .held_reviewers
                    .0
                    .remove(&(owner.clone(), reviewer.clone()));
                noted.push((owner, reviewer));
                continue;
            };
            let before = r.kept.findings;
            let now = r.findings(before, settings);
            r.kept.findings = now;
            for alert in alerts((&owner, cause), &reviewer, r, (before, now), settings) {
                out.push(Output::alert(Some(owner.to_string()), &alert));
            }
            if now != before {
                noted.push((owner.clone(), reviewer.clone()));
            }
            state.held_reviewers.0.insert((owner, reviewer));
        }
        noted.sort();
        noted.dedup();
        for (project, reviewer) in noted {
            state.note(|| Change::Reviewer {
                project: project.to_string(),
                reviewer: reviewer.to_string(),
            });
        }
    }

    /// Weighs a vote batch of `project` by its `voters`' learned weights, as
    /// `scoring.reputation_source` asks: `weights` come in as the table's `(weight, value)` and
    /// leave as the ones to apply. A voter's learned weight is `max(0, logit reliability)` once
    /// it has `reviewers.min_items` shared items (the log-odds is the weight with which
    /// independent verdicts combine into the most likely truth; below ½ a verdict is worse than
    /// none and counts nothing rather than against itself); before that, the table's. With
    /// `both` the two multiply. A batch whose learned weights sum to 0 keeps the table's: a
    /// batch is never dropped because its voters' weights vanished.
    pub(super) fn learned_weights<'v>(
        &self,
        state: &PartitionState,
        project: &str,
        voters: impl Iterator<Item = Option<&'v str>>,
        weights: &mut [(f64, f64)],
    ) {
        let source = self.settings.scoring.reputation_source;
        let Some(q) = state.quality.get(project) else {
            return;
        };
        if source == ReputationSource::Table || q.reviewers.reviewers().is_empty() {
            return;
        }
        let min_items = self.settings.reviewers.min_items;
        let learned: SmallVec<[f64; 4]> = voters
            .zip(weights.iter())
            .map(|(voter, &(table, _))| {
                let r = voter.and_then(|v| q.reviewers.reviewers().get(v));
                match r.filter(|r| r.shared >= min_items) {
                    Some(r) if source == ReputationSource::Both => table * r.learned_weight(),
                    Some(r) => r.learned_weight(),
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
    /// record twice changes nothing).
    pub fn republish_reviewers(&self, state: &mut PartitionState) {
        let all: Vec<ProjectReviewer> = state
            .quality
            .iter()
            .flat_map(|(project, q)| {
                let project = ProjectKey::from(project);
                q.reviewers
                    .reviewers()
                    .keys()
                    .map(move |r| (project.clone(), r.clone()))
            })
            .collect();
        state.held_reviewers.0.extend(all);
    }

    /// Publishes the held reviewer records (those a record changed) as the state now has them:
    /// the service every `output.reviewers_coalesce_ms`, replay after every record.
    pub fn release_reviewers(&self, state: &mut PartitionState, out: &mut Vec<Output>) {
        let mut held: Vec<ProjectReviewer> = state.held_reviewers.0.drain().collect();
        held.sort_unstable();
        for (project, reviewer) in held {
            let held = state
                .quality
                .get(&project)
                .and_then(|q| q.reviewers.reviewers().get(&reviewer));
            if let Some(r) = held {
                out.push(reviewer_record(&project, &reviewer, r));
            }
        }
    }
}

/// The alerts of `reviewer`'s findings that went from `before` to `now`, in `project`, caused
/// by a record of item or session `cause`.
fn alerts(
    (project, cause): (&str, &str),
    reviewer: &str,
    r: &Reviewer,
    (before, now): (Findings, Findings),
    settings: &Reviewers,
) -> Vec<BiasAlert> {
    let alert = |kind, value: f64, threshold, detail| BiasAlert {
        project_id: project.to_owned(),
        session_id: cause.to_owned(),
        scope: "project",
        kind,
        subject: Some(reviewer.to_owned()),
        value,
        threshold,
        p_value: None,
        sample_size: r.shared,
        risk: risk_level(1),
        detail,
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

/// The `jury.reviewer-quality` record of `reviewer` in `project`. Also how the interactive
/// queries' view is seeded from restored state.
pub fn reviewer_record(project: &str, reviewer: &str, r: &Reviewer) -> Output {
    let p = r.reliability();
    let se = r.standard_error();
    let f = r.kept.findings;
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
        standard_error: se,
        interval: [(p - 1.96 * se).max(0.0), (p + 1.96 * se).min(1.0)],
        pass_rate: r.pass_rate(),
        judge_agreement: r.judge_agreement(),
        judged_items: r.judged,
        findings: findings
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect(),
        last_event_at: r.kept.last_event_at.map(|t| t.to_string()),
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
    standard_error: f64,
    /// reliability ± 1.96 standard errors, within [0, 1].
    interval: [f64; 2],
    pass_rate: Option<f64>,
    judge_agreement: Option<f64>,
    judged_items: u64,
    findings: Vec<&'static str>,
    last_event_at: Option<String>,
}

#[cfg(test)]
mod tests;
