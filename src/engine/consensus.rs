//! Consensus of a completed judge session: single-candidate strategies, z-score rankings with
//! standard errors and ties, Borda counts, agreement and Krippendorff's alpha.
//!
//! [`analyze`] is a pure function of the session's ballots and metadata. Ballots and candidates
//! are kept in maps ordered by id, so the result does not depend on the order ballots arrived in.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::judge::{CandidateMeta, Status};
use super::session::Session;
use super::stats;
use crate::config::{Method, Sessions, Strategy};

/// Scores two judges may differ by before `unanimous` asks for review.
const UNANIMOUS_SPREAD: f64 = 0.1;
/// Sample variance at which agreement reaches 0 (a spread of ±0.25 on the 0..1 scale).
const AGREEMENT_VARIANCE: f64 = 0.0625;
/// Standard deviation below which a judge is "flat" and its z-scores are all 0.
const FLAT_JUDGE_STD: f64 = 0.001;
/// Two-sided 95% normal quantile for tie detection.
const Z95: f64 = 1.96;

/// The single-candidate consensus.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Consensus {
    pub strategy: &'static str,
    pub value: Option<f64>,
    pub needs_review: bool,
}

/// One ranked candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    pub candidate: String,
    pub rank: usize,
    pub mean_z: Option<f64>,
    pub std_error: f64,
    pub votes: usize,
    pub tied_with_next: bool,
    pub borda: Option<f64>,
    pub wins: usize,
    pub mean_score: Option<f64>,
    pub confidence: &'static str,
}

/// Judges by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JudgeCounts {
    pub ok: usize,
    pub failed: usize,
    pub abstained: usize,
}

/// Everything computed about a completed session, before the bias audit.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    pub judges: JudgeCounts,
    pub consensus: Option<Consensus>,
    pub agreement: Option<f64>,
    pub krippendorff_alpha: Option<f64>,
    pub rankings: Vec<Ranked>,
    /// Non-self normalized scores: candidate -> [(judge, score)], in judge order.
    pub scores: BTreeMap<String, Vec<(String, f64)>>,
    /// Self-scores: (judge, candidate, score) where the judge authored the candidate.
    pub self_scores: Vec<(String, String, f64)>,
    pub candidates: BTreeMap<String, CandidateMeta>,
}

/// Computes consensus and rankings for `session`.
pub fn analyze(session: &Session, cfg: &Sessions) -> Analysis {
    let mut judges = JudgeCounts::default();
    for b in session.ballots.values() {
        match b.status {
            Status::Ok => judges.ok += 1,
            Status::Failed => judges.failed += 1,
            Status::Abstained => judges.abstained += 1,
        }
    }
    let ok: Vec<(&String, &super::session::Ballot)> = session
        .ballots
        .iter()
        .filter(|(_, b)| b.status == Status::Ok)
        .collect();
    let author = |c: &str| session.candidates.get(c).and_then(|m| m.author.as_deref());
    let is_self = |judge: &str, c: &str| author(c) == Some(judge);
    let excluded = |judge: &str, c: &str| cfg.exclude_self_votes && is_self(judge, c);

    // The candidate set: ids scored in ok ballots plus ids with metadata.
    let mut all: BTreeSet<&str> = session.candidates.keys().map(String::as_str).collect();
    for (_, b) in &ok {
        all.extend(b.scores.keys().map(String::as_str));
    }
    let mut scores: BTreeMap<String, Vec<(String, f64)>> =
        all.iter().map(|c| (c.to_string(), Vec::new())).collect();
    let mut self_scores = Vec::new();
    for (judge, b) in &ok {
        for (c, n) in &b.scores {
            if is_self(judge, c) {
                self_scores.push((judge.to_string(), c.clone(), *n));
            }
            if !excluded(judge, c)
                && let Some(v) = scores.get_mut(c)
            {
                v.push((judge.to_string(), *n));
            }
        }
    }

    // z-scores per judge over its counted scores.
    let mut zs: BTreeMap<&str, Vec<f64>> = all.iter().map(|c| (*c, Vec::new())).collect();
    let mut any_nonzero_z = false;
    for (judge, b) in &ok {
        let own: Vec<(&str, f64)> = b
            .scores
            .iter()
            .filter(|(c, _)| !excluded(judge, c))
            .map(|(c, n)| (c.as_str(), *n))
            .collect();
        let values: Vec<f64> = own.iter().map(|(_, n)| *n).collect();
        let (m, sd) = (
            stats::mean(&values).unwrap_or(0.0),
            stats::std_pop(&values).unwrap_or(0.0),
        );
        for (c, n) in own {
            let z = if sd < FLAT_JUDGE_STD {
                0.0
            } else {
                (n - m) / sd
            };
            any_nonzero_z |= z != 0.0;
            if let Some(v) = zs.get_mut(c) {
                v.push(z);
            }
        }
    }

    // Borda: each ok judge's ballot order, points (N-1-position)/(N-1), self-votes skipped.
    let n_all = all.len();
    let mut points: BTreeMap<&str, Vec<f64>> = all.iter().map(|c| (*c, Vec::new())).collect();
    let mut wins: BTreeMap<&str, usize> = all.iter().map(|c| (*c, 0)).collect();
    for (judge, b) in &ok {
        for (position, c) in ballot_order(b, &all).into_iter().enumerate() {
            if excluded(judge, c) {
                continue;
            }
            let p = if n_all <= 1 {
                1.0
            } else {
                (n_all - 1 - position) as f64 / (n_all - 1) as f64
            };
            if let Some(v) = points.get_mut(c) {
                v.push(p);
            }
            if position == 0 {
                *wins.entry(c).or_default() += 1;
            }
        }
    }

    let mut rankings: Vec<Ranked> = all
        .iter()
        .map(|c| {
            let z = &zs[c];
            let k = z.len();
            let weighted: Vec<(f64, f64)> = scores[*c]
                .iter()
                .map(|(j, n)| (cfg.weight(j), *n))
                .collect();
            let possible = ok
                .iter()
                .filter(|(j, _)| !(cfg.exclude_self_votes && author(c) == Some(j.as_str())))
                .count();
            Ranked {
                candidate: c.to_string(),
                rank: 0,
                mean_z: stats::mean(z),
                std_error: if k > 1 {
                    stats::std_pop(z).unwrap_or(0.0) / (k as f64).sqrt()
                } else {
                    0.0
                },
                votes: k,
                tied_with_next: false,
                borda: if k == 0 {
                    None
                } else {
                    stats::mean(&points[c])
                },
                wins: wins[c],
                mean_score: stats::weighted_mean(&weighted),
                confidence: confidence(k, possible, judges.ok),
            }
        })
        .collect();
    let by_borda = |a: &Ranked, b: &Ranked| {
        let key = |r: &Ranked| r.borda.unwrap_or(f64::NEG_INFINITY);
        key(b)
            .total_cmp(&key(a))
            .then(b.wins.cmp(&a.wins))
            .then(a.candidate.cmp(&b.candidate))
    };
    let (mut scored, unscored): (Vec<Ranked>, Vec<Ranked>) =
        rankings.drain(..).partition(|r| r.votes > 0);
    match cfg.method {
        Method::NormalizedScores if any_nonzero_z => scored.sort_by(|a, b| {
            let key = |r: &Ranked| r.mean_z.unwrap_or(f64::NEG_INFINITY);
            key(b)
                .total_cmp(&key(a))
                .then(a.candidate.cmp(&b.candidate))
        }),
        _ => scored.sort_by(by_borda),
    }
    rankings = scored;
    rankings.extend(unscored);
    for i in 0..rankings.len() {
        rankings[i].rank = i + 1;
        if let (Some(a), Some(b)) = (
            rankings[i].mean_z,
            rankings.get(i + 1).and_then(|r| r.mean_z),
        ) {
            let (sa, sb) = (rankings[i].std_error, rankings[i + 1].std_error);
            rankings[i].tied_with_next = a - Z95 * sa < b + Z95 * sb;
        }
    }

    let agreements: Vec<f64> = scores
        .values()
        .map(|v| agreement(&v.iter().map(|(_, n)| *n).collect::<Vec<_>>()))
        .collect();
    let units: Vec<Vec<f64>> = scores
        .values()
        .map(|v| v.iter().map(|(_, n)| *n).collect())
        .collect();
    let consensus = (n_all <= 1).then(|| {
        let only: Vec<(f64, f64)> = scores
            .values()
            .next()
            .map(|v| v.iter().map(|(j, n)| (cfg.weight(j), *n)).collect())
            .unwrap_or_default();
        single_consensus(&only, cfg.strategy, judges.failed > 0)
    });
    Analysis {
        judges,
        consensus,
        agreement: stats::mean(&agreements),
        krippendorff_alpha: stats::krippendorff_alpha_interval(&units),
        rankings,
        scores,
        self_scores,
        candidates: session.candidates.clone(),
    }
}

/// A judge's ballot order: its explicit ranking (known candidates, first occurrence) if that
/// names any known candidate, else its scores descending with ties by id.
fn ballot_order<'a>(b: &'a super::session::Ballot, known: &BTreeSet<&'a str>) -> Vec<&'a str> {
    if let Some(ranking) = &b.ranking {
        let mut seen = BTreeSet::new();
        let order: Vec<&str> = ranking
            .iter()
            .map(String::as_str)
            .filter(|c| known.contains(c) && seen.insert(*c))
            .collect();
        if !order.is_empty() {
            return order;
        }
    }
    let mut by_score: Vec<(&str, f64)> = b.scores.iter().map(|(c, n)| (c.as_str(), *n)).collect();
    by_score.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    by_score.into_iter().map(|(c, _)| c).collect()
}

/// Agreement of one candidate's scores: 1 with fewer than two, else 1 - min(var/0.0625, 1).
pub fn agreement(scores: &[f64]) -> f64 {
    match stats::var_sample(scores) {
        None => 1.0,
        Some(v) => (1.0 - (v / AGREEMENT_VARIANCE).min(1.0)).max(0.0),
    }
}

fn confidence(votes: usize, possible: usize, ok_judges: usize) -> &'static str {
    if votes == 0 || possible == 0 || ok_judges <= 1 {
        return "low";
    }
    let ratio = votes as f64 / possible as f64;
    if ratio >= 0.8 {
        "high"
    } else if ratio >= 0.5 {
        "medium"
    } else {
        "low"
    }
}

/// The single-candidate consensus from (weight, normalized score) pairs.
pub fn single_consensus(scores: &[(f64, f64)], strategy: Strategy, any_failed: bool) -> Consensus {
    let values: Vec<f64> = scores.iter().map(|(_, n)| *n).collect();
    if values.is_empty() {
        return Consensus {
            strategy: "none",
            value: None,
            needs_review: false,
        };
    }
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let (strategy, value, needs_review) = match strategy {
        Strategy::WeightedAverage if any_failed => ("median", stats::median(&values), false),
        Strategy::WeightedAverage => ("weighted_average", stats::weighted_mean(scores), false),
        Strategy::Median => ("median", stats::median(&values), false),
        Strategy::Highest => ("highest", Some(max), false),
        Strategy::Lowest => ("lowest", Some(min), false),
        Strategy::Majority => {
            let high = values.iter().filter(|n| **n >= 0.5).count();
            (
                "majority",
                Some(if 2 * high > values.len() { 1.0 } else { 0.0 }),
                false,
            )
        }
        Strategy::Unanimous if max - min <= UNANIMOUS_SPREAD => {
            ("unanimous", stats::mean(&values), false)
        }
        Strategy::Unanimous => ("unanimous", None, true),
    };
    Consensus {
        strategy,
        value,
        needs_review,
    }
}

/// One plain sentence about the outcome, e.g. "resp-A is the clear winner; resp-B and resp-C
/// are statistically tied."
pub fn interpretation(a: &Analysis) -> String {
    if let Some(c) = &a.consensus {
        let who = a
            .rankings
            .first()
            .map_or("the candidate", |r| r.candidate.as_str());
        return match (c.value, c.needs_review) {
            (_, true) => format!("The judges disagree on {who}; it needs human review."),
            (Some(v), _) => format!(
                "Consensus on {who} is {v:.2} ({} from {} judges).",
                c.strategy, a.judges.ok
            ),
            (None, _) => "No judge returned a score.".to_owned(),
        };
    }
    let scored: Vec<&Ranked> = a.rankings.iter().filter(|r| r.votes > 0).collect();
    if scored.is_empty() {
        return "No judge returned a score.".to_owned();
    }
    // Chain tied_with_next into groups.
    let mut groups: Vec<Vec<&str>> = vec![vec![scored[0].candidate.as_str()]];
    for w in scored.windows(2) {
        if let (true, Some(group)) = (w[0].tied_with_next, groups.last_mut()) {
            group.push(w[1].candidate.as_str());
        } else {
            groups.push(vec![w[1].candidate.as_str()]);
        }
    }
    let list = |g: &[&str]| match g {
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
        [] => String::new(),
    };
    let mut parts = Vec::new();
    if groups[0].len() == 1 {
        parts.push(format!("{} is the clear winner", groups[0][0]));
    } else {
        parts.push(format!(
            "{} are statistically tied for first",
            list(&groups[0])
        ));
    }
    for g in groups.iter().skip(1).filter(|g| g.len() > 1) {
        parts.push(format!("{} are statistically tied", list(g)));
    }
    format!("{}.", parts.join("; "))
}

#[cfg(test)]
mod tests;
