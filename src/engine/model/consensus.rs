//! Consensus of a completed judge session: single-candidate strategies, z-score rankings with
//! standard errors and ties, Borda counts, agreement and Krippendorff's alpha.
//!
//! [`analyze`] is a pure function of the session's ballots and metadata. Ballots and candidates
//! are kept in maps ordered by id, so the result does not depend on the order ballots arrived in.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::session::{Ballot, Session};
use super::stats;
use crate::engine::contract::judge::{CandidateMeta, Status};
use crate::engine::settings::{Method, Sessions, Strategy};

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
pub struct Ranked<'s> {
    pub candidate: &'s str,
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

/// Everything computed about a completed session, before the bias audit. Borrows its ids from
/// the session, so analysing one allocates little.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis<'s> {
    pub judges: JudgeCounts,
    pub consensus: Option<Consensus>,
    pub agreement: Option<f64>,
    pub krippendorff_alpha: Option<f64>,
    pub rankings: Vec<Ranked<'s>>,
    /// Counted (non-self) normalized scores: candidate -> [(judge, score)], in judge order.
    pub scores: BTreeMap<&'s str, Vec<(&'s str, f64)>>,
    /// Self-scores: (judge, candidate, score) where the judge authored the candidate.
    pub self_scores: Vec<(&'s str, &'s str, f64)>,
    pub candidates: &'s BTreeMap<String, CandidateMeta>,
}

/// Computes consensus and rankings for `session`.
pub fn analyze<'s>(session: &'s Session, cfg: &Sessions) -> Analysis<'s> {
    let mut judges = JudgeCounts::default();
    for b in session.ballots.values() {
        match b.status {
            Status::Ok => judges.ok += 1,
            Status::Failed => judges.failed += 1,
            Status::Abstained => judges.abstained += 1,
        }
    }
    let ok: Vec<(&'s str, &'s Ballot)> = session
        .ballots
        .iter()
        .filter(|(_, b)| b.status == Status::Ok)
        .map(|(j, b)| (j.as_str(), b))
        .collect();
    // The candidate set, sorted: ids scored in ok ballots plus ids with metadata.
    let mut set: BTreeSet<&'s str> = session.candidates.keys().map(String::as_str).collect();
    for (_, b) in &ok {
        set.extend(b.scores.keys().map(String::as_str));
    }
    let all: Vec<&'s str> = set.into_iter().collect();
    let n_all = all.len();
    let authors: Vec<Option<&str>> = all
        .iter()
        .map(|c| session.candidates.get(*c).and_then(|m| m.author.as_deref()))
        .collect();
    // Each ok judge's scores as (candidate index, score, is the judge its author).
    let ballots: Vec<Vec<(usize, f64, bool)>> = ok
        .iter()
        .map(|(judge, b)| {
            b.scores
                .iter()
                .filter_map(|(c, n)| {
                    let i = all.binary_search(&c.as_str()).ok()?;
                    Some((i, *n, authors[i] == Some(*judge)))
                })
                .collect()
        })
        .collect();
    let excluded = |is_self: bool| cfg.exclude_self_votes && is_self;

    // Counted scores and z-scores per candidate (index-aligned with `all`).
    let mut counted: Vec<Vec<(&'s str, f64)>> = vec![Vec::new(); n_all];
    let mut zs: Vec<Vec<f64>> = vec![Vec::new(); n_all];
    let mut self_scores = Vec::new();
    let mut any_nonzero_z = false;
    for ((judge, _), scores) in ok.iter().zip(&ballots) {
        let own = scores.iter().filter(|(_, _, is_self)| !excluded(*is_self));
        let k = own.clone().count() as f64;
        let m = own.clone().map(|(_, n, _)| n).sum::<f64>() / k.max(1.0);
        let sd = (own.clone().map(|(_, n, _)| (n - m) * (n - m)).sum::<f64>() / k.max(1.0)).sqrt();
        for (i, n, _) in own {
            let z = if sd < FLAT_JUDGE_STD {
                0.0
            } else {
                (n - m) / sd
            };
            any_nonzero_z |= z != 0.0;
            zs[*i].push(z);
            counted[*i].push((*judge, *n));
        }
        for (i, n, _) in scores.iter().filter(|(_, _, is_self)| *is_self) {
            self_scores.push((*judge, all[*i], *n));
        }
    }

    // Borda: each ok judge's ballot order, points (N-1-position)/(N-1), self-votes skipped.
    let mut points: Vec<Vec<f64>> = vec![Vec::new(); n_all];
    let mut wins = vec![0usize; n_all];
    let mut order = Vec::with_capacity(n_all);
    for ((judge, b), scores) in ok.iter().zip(&ballots) {
        ballot_order(b, scores, &all, &mut order);
        for (position, i) in order.iter().enumerate() {
            if excluded(authors[*i] == Some(*judge)) {
                continue;
            }
            points[*i].push(if n_all <= 1 {
                1.0
            } else {
                (n_all - 1 - position) as f64 / (n_all - 1) as f64
            });
            if position == 0 {
                wins[*i] += 1;
            }
        }
    }

    let mut rankings: Vec<Ranked<'s>> = all
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let k = zs[i].len();
            let possible = ok
                .iter()
                .filter(|(j, _)| !excluded(authors[i] == Some(*j)))
                .count();
            Ranked {
                candidate: c,
                rank: 0,
                mean_z: stats::mean(&zs[i]),
                std_error: if k > 1 {
                    stats::std_pop(&zs[i]).unwrap_or(0.0) / (k as f64).sqrt()
                } else {
                    0.0
                },
                votes: k,
                tied_with_next: false,
                borda: if k == 0 {
                    None
                } else {
                    stats::mean(&points[i])
                },
                wins: wins[i],
                mean_score: weighted_mean(&counted[i], cfg),
                confidence: confidence(k, possible, judges.ok),
            }
        })
        .collect();
    let by_borda = |a: &Ranked, b: &Ranked| {
        let key = |r: &Ranked| r.borda.unwrap_or(f64::NEG_INFINITY);
        key(b)
            .total_cmp(&key(a))
            .then(b.wins.cmp(&a.wins))
            .then(a.candidate.cmp(b.candidate))
    };
    // Scored candidates by mean_z (or Borda), then the unscored ones by id.
    let use_z = cfg.method == Method::NormalizedScores && any_nonzero_z;
    rankings.sort_by(|a, b| match (a.votes > 0, b.votes > 0) {
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        (false, false) => a.candidate.cmp(b.candidate),
        (true, true) if use_z => {
            let key = |r: &Ranked| r.mean_z.unwrap_or(f64::NEG_INFINITY);
            key(b).total_cmp(&key(a)).then(a.candidate.cmp(b.candidate))
        }
        (true, true) => by_borda(a, b),
    });
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

    let units: Vec<Vec<f64>> = counted
        .iter()
        .map(|v| v.iter().map(|(_, n)| *n).collect())
        .collect();
    let agreements: Vec<f64> = units.iter().map(|u| agreement(u)).collect();
    let consensus = (n_all <= 1).then(|| {
        let only: Vec<(f64, f64)> = counted
            .first()
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
        scores: all.iter().copied().zip(counted).collect(),
        self_scores,
        candidates: &session.candidates,
    }
}

/// A judge's ballot order as candidate indices: its explicit ranking (known candidates, first
/// occurrence) if that names any known candidate, else its scores descending with ties by id.
fn ballot_order(b: &Ballot, scores: &[(usize, f64, bool)], all: &[&str], order: &mut Vec<usize>) {
    order.clear();
    if let Some(ranking) = &b.ranking {
        for c in ranking {
            if let Ok(i) = all.binary_search(&c.as_str())
                && !order.contains(&i)
            {
                order.push(i);
            }
        }
        if !order.is_empty() {
            return;
        }
    }
    // `scores` is in id order, so a stable sort by score keeps ties by id.
    let mut by_score: Vec<(usize, f64)> = scores.iter().map(|(i, n, _)| (*i, *n)).collect();
    by_score.sort_by(|a, b| b.1.total_cmp(&a.1));
    order.extend(by_score.into_iter().map(|(i, _)| i));
}

/// The judge-weighted mean of counted scores; `None` without scores.
fn weighted_mean(scores: &[(&str, f64)], cfg: &Sessions) -> Option<f64> {
    let (mut num, mut den) = (0.0, 0.0);
    for (judge, n) in scores {
        let w = cfg.weight(judge);
        num += w * n;
        den += w;
    }
    if den > 0.0 { Some(num / den) } else { None }
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
        let who = a.rankings.first().map_or("the candidate", |r| r.candidate);
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
    let mut groups: Vec<Vec<&str>> = vec![vec![scored[0].candidate]];
    for w in scored.windows(2) {
        if let (true, Some(group)) = (w[0].tied_with_next, groups.last_mut()) {
            group.push(w[1].candidate);
        } else {
            groups.push(vec![w[1].candidate]);
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
