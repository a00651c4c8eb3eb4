//! The bias audit: per session (length, position, calibration, self-votes, agreement) and rolled
//! up per project across sessions, where evidence accumulates until it is statistically sound.
//!
//! Session findings alert at once (a session is its own sample). Project findings pool every
//! session of the project and alert only with enough evidence and a 95% confidence interval that
//! excludes the healthy range; they alert when a finding *becomes* true and re-arm once it is no
//! longer true (hysteresis), so a persistent bias is one alert, not one per session.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::consensus::Analysis;
use super::record_bytes::{LONGEST_F64, json_bytes, json_str_at_most};
use super::stats::{self, Running};
use crate::engine::settings::Bias;

const Z95: f64 = 1.96;

/// One judge's calibration in a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration<'s> {
    pub judge: &'s str,
    pub mean: f64,
    pub std: f64,
    pub reviews: usize,
}

/// The session audit.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionAudit<'s> {
    pub length_r: f64,
    pub length_p: f64,
    /// Candidates with both `words` and a mean score.
    pub length_n: usize,
    /// Whether r was computable (>= 3 pairs, neither variable constant).
    pub length_defined: bool,
    pub position_variance: Option<f64>,
    /// Per display position: the counted scores of candidates shown there.
    pub position_scores: BTreeMap<u64, Running>,
    pub calibration: Vec<Calibration<'s>>,
    /// median and population std of the judges' means (None below two judges).
    pub calibration_center: Option<(f64, f64)>,
    /// (judge, candidate, own score - others' mean).
    pub self_inflation: Vec<(&'s str, &'s str, f64)>,
    pub length_bias: bool,
    pub position_bias: bool,
    pub harsh: Vec<&'s str>,
    pub generous: Vec<&'s str>,
    pub risk: &'static str,
}

/// A `jury.bias-alerts` record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BiasAlert {
    pub project_id: String,
    pub session_id: String,
    pub scope: &'static str,
    pub kind: &'static str,
    pub subject: Option<String>,
    pub value: f64,
    pub threshold: f64,
    pub p_value: Option<f64>,
    pub sample_size: u64,
    pub risk: &'static str,
    pub detail: String,
}

impl BiasAlert {
    /// A project-wide finding of one cause (a judge's or a reviewer's, a pairing that never
    /// forms, a score that stands still), found by the record of `by`: scope `project`, no
    /// p-value, the risk of one finding; `value` against `threshold` over `sample_size`.
    pub fn project_finding(
        (project, by): (&str, &str),
        (kind, subject): (&'static str, Option<String>),
        (value, threshold, sample_size): (f64, f64, u64),
        detail: String,
    ) -> BiasAlert {
        BiasAlert {
            project_id: project.to_owned(),
            session_id: by.to_owned(),
            scope: "project",
            kind,
            subject,
            value,
            threshold,
            p_value: None,
            sample_size,
            risk: risk_level(1),
            detail,
        }
    }
}

/// low / medium / high from the number of findings among length, position, harsh, generous.
pub fn risk_level(findings: usize) -> &'static str {
    match findings {
        0 => "low",
        1 | 2 => "medium",
        _ => "high",
    }
}

/// Audits one analyzed session.
pub fn audit_session<'s>(a: &Analysis<'s>, cfg: &Bias) -> SessionAudit<'s> {
    let (mut words, mut means) = (Vec::new(), Vec::new());
    for r in &a.rankings {
        if let (Some(w), Some(m)) = (
            a.candidates.get(r.candidate).and_then(|c| c.words),
            r.mean_score,
        ) {
            words.push(w);
            means.push(m);
        }
    }
    let (length_r, length_p) = stats::pearson(&words, &means);
    let length_defined = words.len() >= 3 && (length_r, length_p) != (0.0, 1.0);
    let length_bias = length_r.abs() > cfg.length_r && length_p < cfg.length_p;

    let mut position_scores: BTreeMap<u64, Running> = BTreeMap::new();
    for (c, scores) in &a.scores {
        if let Some(pos) = a.candidates.get(*c).and_then(|m| m.position)
            && !scores.is_empty()
        {
            let r = position_scores.entry(pos).or_default();
            scores.iter().for_each(|(_, n)| r.push(*n));
        }
    }
    let position_means: Vec<f64> = position_scores.values().map(|r| r.mean).collect();
    let position_variance = stats::var_pop(&position_means);
    let position_bias = position_variance.is_some_and(|v| v > cfg.position_variance);

    let mut per_judge: BTreeMap<&str, Running> = BTreeMap::new();
    for scores in a.scores.values() {
        for (j, n) in scores {
            per_judge.entry(*j).or_default().push(*n);
        }
    }
    let calibration: Vec<Calibration> = per_judge
        .iter()
        .map(|(j, r)| Calibration {
            judge: j,
            mean: r.mean,
            std: r.std_pop(),
            reviews: r.n as usize,
        })
        .collect();
    let judge_means: Vec<f64> = calibration.iter().map(|c| c.mean).collect();
    let calibration_center = (judge_means.len() >= 2).then(|| {
        (
            stats::median(&judge_means).unwrap_or(0.0),
            stats::std_pop(&judge_means).unwrap_or(0.0),
        )
    });
    let (mut harsh, mut generous) = (Vec::new(), Vec::new());
    if let Some((med, sd)) = calibration_center {
        for c in &calibration {
            if c.mean < med - sd {
                harsh.push(c.judge);
            } else if c.mean > med + sd {
                generous.push(c.judge);
            }
        }
    }

    let self_inflation = a
        .self_scores
        .iter()
        .filter_map(|(judge, c, own)| {
            let others: Vec<f64> = a
                .scores
                .get(*c)?
                .iter()
                .filter(|(j, _)| j != judge)
                .map(|(_, n)| *n)
                .collect();
            stats::mean(&others).map(|m| (*judge, *c, own - m))
        })
        .collect();

    let findings = [
        length_bias,
        position_bias,
        !harsh.is_empty(),
        !generous.is_empty(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    SessionAudit {
        length_r,
        length_p,
        length_n: words.len(),
        length_defined,
        position_variance,
        position_scores,
        calibration,
        calibration_center,
        self_inflation,
        length_bias,
        position_bias,
        harsh,
        generous,
        risk: risk_level(findings),
    }
}

/// The session-scope alerts of an audit. The numbers are in the typed fields; `detail` says in
/// words what was found.
pub fn session_alerts(
    project: &str,
    session: &str,
    a: &Analysis,
    audit: &SessionAudit,
    cfg: &Bias,
) -> Vec<BiasAlert> {
    let alert = |kind: &'static str,
                 subject: Option<&str>,
                 value: f64,
                 threshold: f64,
                 p_value: Option<f64>,
                 n: usize,
                 detail: String| BiasAlert {
        project_id: project.to_owned(),
        session_id: session.to_owned(),
        scope: "session",
        kind,
        subject: subject.map(str::to_owned),
        value,
        threshold,
        p_value,
        sample_size: n as u64,
        risk: audit.risk,
        detail,
    };
    let mut out = Vec::new();
    if audit.length_bias {
        out.push(alert(
            "length_bias",
            None,
            audit.length_r,
            cfg.length_r,
            Some(audit.length_p),
            audit.length_n,
            "scores correlate with answer length (value: Pearson r of words vs mean score)"
                .to_owned(),
        ));
    }
    if let (true, Some(v)) = (audit.position_bias, audit.position_variance) {
        out.push(alert(
            "position_bias",
            None,
            v,
            cfg.position_variance,
            None,
            audit.position_scores.len(),
            "mean scores differ by display position (value: variance of per-position means)"
                .to_owned(),
        ));
    }
    if let Some((med, sd)) = audit.calibration_center {
        for c in &audit.calibration {
            if audit.harsh.contains(&c.judge) {
                out.push(alert("harsh_reviewer", Some(c.judge), c.mean, med - sd, None, c.reviews,
                    format!("{} scores below the other judges (value: its mean; threshold: median - std of judge means)", c.judge)));
            } else if audit.generous.contains(&c.judge) {
                out.push(alert("generous_reviewer", Some(c.judge), c.mean, med + sd, None, c.reviews,
                    format!("{} scores above the other judges (value: its mean; threshold: median + std of judge means)", c.judge)));
            }
        }
    }
    for (judge, c, inflation) in &audit.self_inflation {
        if *inflation > cfg.self_vote_inflation {
            let n = a.scores.get(*c).map_or(0, Vec::len) + 1;
            out.push(alert("self_vote_inflation", Some(judge), *inflation, cfg.self_vote_inflation, None, n,
                format!("{judge} rated its own candidate {c} above the other judges (value: own score - their mean)")));
        }
    }
    if let Some(agreement) = a.agreement
        && agreement < cfg.low_agreement
    {
        out.push(alert(
            "low_agreement",
            None,
            agreement,
            cfg.low_agreement,
            None,
            a.judges.ok,
            "the judges agree weakly (value: session agreement)".to_owned(),
        ));
    }
    out
}

/// Fisher-z pooling of per-session correlations, weighted by n - 3.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FisherPool {
    pub weight: f64,
    pub weighted_z: f64,
    pub pairs: u64,
}

impl FisherPool {
    pub fn add(&mut self, r: f64, n: usize) {
        if n < 4 {
            return;
        }
        let w = (n - 3) as f64;
        self.weight += w;
        self.weighted_z += w * r.clamp(-0.999_999, 0.999_999).atanh();
        self.pairs += n as u64;
    }

    /// Pooled r with its 95% CI and two-sided p (normal approximation of z).
    pub fn pooled(&self) -> Option<(f64, f64, f64, f64)> {
        if self.weight <= 0.0 {
            return None;
        }
        let z = self.weighted_z / self.weight;
        let se = 1.0 / self.weight.sqrt();
        Some((
            z.tanh(),
            (z - Z95 * se).tanh(),
            (z + Z95 * se).tanh(),
            stats::normal_two_sided_p(z / se),
        ))
    }
}

/// A project's pooled audit state. It follows at most `bias.project_max_judges` judges and
/// pools `bias.project_max_positions` display positions, so that its changelog record stays
/// within [`largest_audit_bytes`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectAudit {
    pub length: FisherPool,
    pub reviews: Running,
    pub judges: BTreeMap<String, Running>,
    pub positions: BTreeMap<u64, Running>,
    pub position_sessions: u64,
    pub self_inflation: BTreeMap<String, Running>,
    /// Findings currently true ("kind" or "kind/subject"): alerts fire on entering this set.
    pub active: BTreeSet<String>,
    /// Sessions audited: the clock of `seen`.
    #[serde(default)]
    pub sessions: u64,
    /// The session (counted by `sessions`) each judge of `judges` or `self_inflation` was last
    /// seen in; one missing (restored from a record written before) counts as seen first.
    #[serde(default)]
    pub seen: BTreeMap<String, u64>,
    /// Judges forgotten beyond `bias.project_max_judges`.
    #[serde(default)]
    pub forgotten: u64,
}

impl ProjectAudit {
    /// Adds a session's evidence and returns the project alerts whose findings just became true.
    pub fn update(
        &mut self,
        project: &str,
        session: &str,
        a: &Analysis,
        audit: &SessionAudit,
        cfg: &Bias,
    ) -> Vec<BiasAlert> {
        self.sessions += 1;
        if audit.length_defined {
            self.length.add(audit.length_r, audit.length_n);
        }
        for scores in a.scores.values() {
            for (judge, n) in scores {
                self.judges.entry(judge.to_string()).or_default().push(*n);
                self.reviews.push(*n);
                self.see(judge);
            }
        }
        // Positions a larger bound pooled before (a restored audit) go.
        drop(self.positions.split_off(&cfg.project_max_positions));
        let pooled = audit.position_scores.range(..cfg.project_max_positions);
        if pooled.clone().next().is_some() {
            self.position_sessions += 1;
            for (pos, scores) in pooled {
                self.positions.entry(*pos).or_default().merge(scores);
            }
        }
        for (judge, _, inflation) in &audit.self_inflation {
            self.self_inflation
                .entry(judge.to_string())
                .or_default()
                .push(*inflation);
            self.see(judge);
        }
        self.forget_beyond(cfg.project_max_judges);
        self.findings(project, session, cfg)
    }

    /// Notes that `judge` was seen in the session being added.
    fn see(&mut self, judge: &str) {
        match self.seen.get_mut(judge) {
            Some(at) => *at = self.sessions,
            None => {
                self.seen.insert(judge.to_owned(), self.sessions);
            }
        }
    }

    /// The judges followed: those of `judges` and of `self_inflation`, each once.
    fn followed(&self) -> impl Iterator<Item = &String> {
        let inflating = self.self_inflation.keys();
        let only_inflating = inflating.filter(|j| !self.judges.contains_key(*j));
        self.judges.keys().chain(only_inflating)
    }

    /// How many judges it follows (at most `bias.project_max_judges`).
    pub fn judges_followed(&self) -> usize {
        self.followed().count()
    }

    /// Forgets the judges last seen longest ago (ties by id) until at most `max` are followed:
    /// their statistics go, and so do their findings, since `findings` recomputes the set.
    /// Their reviews stay in the project's mean.
    fn forget_beyond(&mut self, max: usize) {
        if self.judges.len() + self.self_inflation.len() <= max {
            return;
        }
        let mut followed: Vec<(u64, &String)> = self
            .followed()
            .map(|j| (self.seen.get(j).copied().unwrap_or(0), j))
            .collect();
        let excess = followed.len().saturating_sub(max);
        if excess == 0 {
            return;
        }
        followed.sort_unstable();
        let gone: Vec<String> = followed[..excess]
            .iter()
            .map(|(_, j)| (*j).clone())
            .collect();
        for judge in &gone {
            self.judges.remove(judge);
            self.self_inflation.remove(judge);
            self.seen.remove(judge);
        }
        self.forgotten += gone.len() as u64;
    }

    fn findings(&mut self, project: &str, session: &str, cfg: &Bias) -> Vec<BiasAlert> {
        // Each finding now true, keyed "kind" or "kind/subject"; risk is filled in at the end.
        let mut now: Vec<(String, BiasAlert)> = Vec::new();
        let mut push = |key: String,
                        kind: &'static str,
                        subject: Option<String>,
                        value: f64,
                        threshold: f64,
                        p_value: Option<f64>,
                        sample_size: u64,
                        detail: String| {
            now.push((
                key,
                BiasAlert {
                    project_id: project.to_owned(),
                    session_id: session.to_owned(),
                    scope: "project",
                    kind,
                    subject,
                    value,
                    threshold,
                    p_value,
                    sample_size,
                    risk: "low",
                    detail,
                },
            ));
        };
        if self.length.pairs >= cfg.project_min_length_pairs
            && let Some((r, lo, hi, p)) = self.length.pooled()
            && (lo > cfg.length_r || hi < -cfg.length_r)
        {
            push(
                "length_bias".into(),
                "length_bias",
                None,
                r,
                cfg.length_r,
                Some(p),
                self.length.pairs,
                format!(
                    "pooled r = {r:.3}, 95% CI [{lo:.3}, {hi:.3}] over {} length pairs",
                    self.length.pairs
                ),
            );
        }
        let center = self.reviews.mean;
        for (judge, r) in &self.judges {
            if r.n < cfg.project_min_judge_reviews {
                continue;
            }
            let (lo, hi) = (r.mean - Z95 * r.std_error(), r.mean + Z95 * r.std_error());
            let margin = cfg.project_calibration_margin;
            if hi < center - margin {
                push(
                    format!("harsh_reviewer/{judge}"),
                    "harsh_reviewer",
                    Some(judge.clone()),
                    r.mean,
                    center - margin,
                    None,
                    r.n,
                    format!(
                        "{judge} mean {:.3}, 95% CI [{lo:.3}, {hi:.3}], project mean {center:.3}",
                        r.mean
                    ),
                );
            } else if lo > center + margin {
                push(
                    format!("generous_reviewer/{judge}"),
                    "generous_reviewer",
                    Some(judge.clone()),
                    r.mean,
                    center + margin,
                    None,
                    r.n,
                    format!(
                        "{judge} mean {:.3}, 95% CI [{lo:.3}, {hi:.3}], project mean {center:.3}",
                        r.mean
                    ),
                );
            }
        }
        if self.position_sessions >= cfg.project_min_position_sessions {
            let pos: Vec<&Running> = self.positions.values().filter(|r| r.n >= 2).collect();
            let means: Vec<f64> = pos.iter().map(|r| r.mean).collect();
            if let (Some(var), Some(hi), Some(lo)) = (
                stats::var_pop(&means),
                pos.iter().max_by(|a, b| a.mean.total_cmp(&b.mean)),
                pos.iter().min_by(|a, b| a.mean.total_cmp(&b.mean)),
            ) {
                let gap = hi.mean
                    - lo.mean
                    - Z95 * (hi.std_error().powi(2) + lo.std_error().powi(2)).sqrt();
                if var > cfg.position_variance && gap > 0.0 {
                    push(
                        "position_bias".into(),
                        "position_bias",
                        None,
                        var,
                        cfg.position_variance,
                        None,
                        self.position_sessions,
                        format!(
                            "per-position means differ (variance {var:.5}) over {} sessions",
                            self.position_sessions
                        ),
                    );
                }
            }
        }
        for (judge, r) in &self.self_inflation {
            if r.n >= cfg.project_min_self_votes
                && r.mean - Z95 * r.std_error() > cfg.self_vote_inflation
            {
                push(
                    format!("self_vote_inflation/{judge}"),
                    "self_vote_inflation",
                    Some(judge.clone()),
                    r.mean,
                    cfg.self_vote_inflation,
                    None,
                    r.n,
                    format!(
                        "{judge} inflates its own candidates by {:.3} on average over {} self-votes",
                        r.mean, r.n
                    ),
                );
            }
        }
        let current: BTreeSet<String> = now.iter().map(|f| f.0.clone()).collect();
        let findings = [
            "length_bias",
            "position_bias",
            "harsh_reviewer/",
            "generous_reviewer/",
        ]
        .iter()
        .filter(|k| {
            current
                .iter()
                .any(|c| c == *k || (k.ends_with('/') && c.starts_with(*k)))
        })
        .count();
        let risk = risk_level(findings);
        let fresh: Vec<BiasAlert> = now
            .into_iter()
            .filter(|(key, _)| !self.active.contains(key))
            .map(|(_, alert)| BiasAlert { risk, ..alert })
            .collect();
        self.active = current;
        fresh
    }
}

/// The most bytes a project's audit takes in its changelog record (JSON), with `judges` judges
/// and `positions` positions and ids of `max_id_bytes`, counted from above: every number at
/// its longest, every id of control characters (six bytes each), and each judge in both maps,
/// in `seen`, and in two findings (one of harsh and generous, and self-vote inflation). The
/// configuration refuses settings under which it exceeds a record.
pub fn largest_audit_bytes(max_id_bytes: usize, judges: usize, positions: u64) -> usize {
    const LONGEST: f64 = LONGEST_F64;
    let running = Running {
        n: u64::MAX,
        mean: LONGEST,
        m2: LONGEST,
    };
    let fixed = json_bytes(&ProjectAudit {
        length: FisherPool {
            weight: LONGEST,
            weighted_z: LONGEST,
            pairs: u64::MAX,
        },
        reviews: running,
        position_sessions: u64::MAX,
        sessions: u64::MAX,
        forgotten: u64::MAX,
        ..ProjectAudit::default()
    });
    let id = json_str_at_most(max_id_bytes);
    // `"id":{..},` in `judges` and in `self_inflation`, `"id":N,` in `seen`.
    let entries = 2 * (id + json_bytes(&running) + 2) + id + json_bytes(&u64::MAX) + 2;
    let findings = ["self_vote_inflation/", "generous_reviewer/"]
        .iter()
        .map(|kind| id + kind.len() + 1)
        .sum::<usize>();
    let position = json_bytes(&u64::MAX.to_string()) + json_bytes(&running) + 2;
    let positions = usize::try_from(positions).unwrap_or(usize::MAX);
    fixed
        .saturating_add(judges.saturating_mul(entries + findings))
        .saturating_add(positions.saturating_mul(position))
}

#[cfg(test)]
impl ProjectAudit {
    /// Test helper: feeds `session` up to `limit` times and counts length alerts until the first.
    fn findings_after(
        &mut self,
        a: &Analysis,
        audit: &SessionAudit,
        cfg: &Bias,
        limit: usize,
    ) -> usize {
        (0..limit)
            .map(|i| {
                self.update("p", &format!("again{i}"), a, audit, cfg)
                    .iter()
                    .filter(|x| x.kind == "length_bias")
                    .count()
            })
            .find(|n| *n > 0)
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
