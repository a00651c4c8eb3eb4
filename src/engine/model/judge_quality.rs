//! Judge quality: how an LLM judge agrees with the humans, over pairs `(s, h)` of its
//! normalised score for an item and the humans' score for the same item (both in [0, 1]); and
//! how many independent judges a consensus rests on; and a project's state for both (the
//! pipeline that drives it is `engine::quality`).
//!
//! Every statistic is `None` where it is undefined (too few pairs, no variance), never NaN.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::effective_judges::{Basis, CandidateScores, Correlations};
use super::stats;
use crate::engine::contract::time::EventTime;
use crate::engine::ids::{IdMap, ProjectKey};

/// How a judge agrees with the humans over a window of pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    pub pairs: usize,
    /// Pearson's r of `s` and `h` (at least 2 pairs, both varying).
    pub pearson_r: Option<f64>,
    /// Its two-sided p-value from Student's t with `pairs - 2` degrees of freedom (at least 3
    /// pairs).
    pub p_value: Option<f64>,
    /// Mean `|s - h|`.
    pub mean_abs_diff: Option<f64>,
    /// Cohen's kappa of the decisions `s >= 0.5` and `h >= 0.5` (at least 2 pairs, and not
    /// both raters constant alike).
    pub kappa: Option<f64>,
    /// Krippendorff's alpha, interval metric, judge and humans as two coders of each item (at
    /// least 2 pairs, not all values equal).
    pub krippendorff_alpha: Option<f64>,
    /// Mean `s - h`: positive when the judge is more generous than the humans.
    pub bias: Option<f64>,
}

/// The agreement of the pairs `(s, h)`, whatever their order: they are summed in sorted order,
/// so the same pairs give the same bits however they arrived.
pub fn agreement(pairs: &[(f64, f64)]) -> Agreement {
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let pairs = sorted.as_slice();
    let n = pairs.len();
    let (s, h): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
    let varies = |xs: &[f64]| xs.iter().any(|x| *x != xs[0]);
    let (pearson_r, p_value) = if n >= 2 && varies(&s) && varies(&h) {
        let (r, p) = if n >= 3 {
            let (r, p) = stats::pearson(&s, &h);
            (r, Some(p))
        } else {
            // Two distinct points lie on a line: r is its direction.
            let slope = (s[1] - s[0]) * (h[1] - h[0]);
            (slope.signum(), None)
        };
        (Some(r), p)
    } else {
        (None, None)
    };
    let diffs: Vec<f64> = pairs.iter().map(|(s, h)| s - h).collect();
    let abs: Vec<f64> = diffs.iter().map(|d| d.abs()).collect();
    let units: Vec<Vec<f64>> = pairs.iter().map(|&(s, h)| vec![s, h]).collect();
    Agreement {
        pairs: n,
        pearson_r,
        p_value,
        mean_abs_diff: stats::mean(&abs),
        kappa: kappa(pairs),
        krippendorff_alpha: (n >= 2)
            .then(|| stats::krippendorff_alpha_interval(&units))
            .flatten(),
        bias: stats::mean(&diffs),
    }
}

/// Cohen's kappa of the binary decisions `s >= 0.5` and `h >= 0.5`:
/// `(p_o - p_e) / (1 - p_e)`, with `p_o` the share of agreeing decisions and `p_e` the agreement
/// chance gives from each rater's share of positives.
fn kappa(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 2 {
        return None;
    }
    let n = pairs.len() as f64;
    let yes = |x: f64| x >= 0.5;
    let agree = pairs.iter().filter(|(s, h)| yes(*s) == yes(*h)).count() as f64 / n;
    let s_yes = pairs.iter().filter(|(s, _)| yes(*s)).count() as f64 / n;
    let h_yes = pairs.iter().filter(|(_, h)| yes(*h)).count() as f64 / n;
    let chance = s_yes * h_yes + (1.0 - s_yes) * (1.0 - h_yes);
    (chance < 1.0).then(|| (agree - chance) / (1.0 - chance))
}

/// The bounds and thresholds of a project's judge-quality state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QualityLimits {
    /// Votes an item needs before its humans' score pairs with judge scores.
    pub min_human_votes: u64,
    /// Items a project remembers votes for, and items with judge scores waiting for votes
    /// (each bound on its own); the oldest is forgotten first.
    pub max_pending_items: usize,
    /// Pairs per judge the agreement is computed over, and candidates the effective number of
    /// judges is computed over.
    pub window: usize,
    /// Judges a project keeps a window for; the one seen first is forgotten first.
    pub max_judges: usize,
}

/// The humans' score of one item: `Σ r·v` and `Σ r` over its first `min_human_votes` votes that
/// carry weight (`votes` of them so far), not decayed, and the event time of the batch that
/// completed them. Only the first ones count, so the score a judge is paired with does not
/// depend on whether its session completed before or after later votes: the two arrive on two
/// topics, in an order no producer decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ItemVotes {
    pub weighted: f64,
    pub weight: f64,
    pub votes: u64,
    #[serde(default)]
    pub ready_at: Option<EventTime>,
}

impl ItemVotes {
    /// The reputation-weighted mean vote; `None` while no vote carries weight.
    pub fn score(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| (self.weighted / self.weight).clamp(0.0, 1.0))
    }

    /// The humans' score and when it was complete, once it is.
    fn ready(&self) -> Option<(f64, EventTime)> {
        Some((self.score()?, self.ready_at?))
    }
}

/// A completed session's judge score of an item, waiting for the item's votes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    pub session: String,
    pub judge: String,
    pub s: f64,
    /// When its session completed.
    pub at: EventTime,
}

/// A judge's score of an item and the humans' score of it, paired once both exist.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub judge: String,
    pub item: String,
    /// The session the judge's score came from.
    pub session: String,
    pub s: f64,
    pub h: f64,
    /// When both sides existed: the later of the session's completion and the humans' score's.
    pub at: EventTime,
}

/// Values by key, in order of arrival, at most a bound of them: the oldest goes first. Each
/// value carries its place in that order, so a restore puts it back where it was.
#[derive(Debug, Clone, Default)]
pub struct Bounded<V> {
    values: IdMap<ProjectKey, (u64, V)>,
    order: BTreeMap<u64, ProjectKey>,
    next: u64,
}

/// Two are equal when they hold the same values in the same order: the places themselves are
/// only relative (a restore cannot know the places of values already forgotten).
impl<V: PartialEq> PartialEq for Bounded<V> {
    fn eq(&self, other: &Self) -> bool {
        self.order.values().eq(other.order.values())
            && self.order.values().all(|k| self.get(k) == other.get(k))
    }
}

impl<V: Default> Bounded<V> {
    /// The value of `key` and its place, created if new; a new key forgets the oldest beyond
    /// `max`, whose places and keys are appended to `forgotten`.
    fn entry(
        &mut self,
        key: &str,
        max: usize,
        forgotten: &mut Vec<(u64, String)>,
    ) -> (u64, &mut V) {
        if !self.values.contains_key(key) {
            while self.values.len() >= max.max(1) {
                let Some((seq, oldest)) = self.order.pop_first() else {
                    break;
                };
                self.values.remove(&oldest);
                forgotten.push((seq, oldest.into()));
            }
            self.order.insert(self.next, ProjectKey::from(key));
            self.values
                .insert(ProjectKey::from(key), (self.next, V::default()));
            self.next += 1;
        }
        // Found without allocating the key (the common case: an item voted on again); the
        // borrow checker cannot yet return a borrow from a conditional first lookup.
        let (seq, value) = self
            .values
            .get_mut(key)
            .expect("present: found or inserted above");
        (*seq, value)
    }
}

impl<V> Bounded<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.values.get(key).map(|(_, v)| v)
    }

    /// The value of `key` with its place in the order, for the changelog.
    pub fn get_with_seq(&self, key: &str) -> Option<(u64, &V)> {
        self.values.get(key).map(|(seq, v)| (*seq, v))
    }

    /// Removes `key`, returning its place and value.
    fn remove(&mut self, key: &str) -> Option<(u64, V)> {
        let (seq, v) = self.values.remove(key)?;
        self.order.remove(&seq);
        Some((seq, v))
    }

    /// The values whose places are in `places`, in order: a changelog bucket.
    pub fn places(&self, places: Range<u64>) -> impl Iterator<Item = (u64, &str, &V)> {
        self.order
            .range(places)
            .filter_map(|(&seq, k)| Some((seq, k.as_str(), self.get(k)?)))
    }

    /// Puts a restored value back at its place `seq`.
    pub fn restore(&mut self, key: &str, seq: u64, value: V) {
        self.remove(key);
        self.order.insert(seq, ProjectKey::from(key));
        self.values.insert(ProjectKey::from(key), (seq, value));
        self.next = self.next.max(seq + 1);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values by key, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.order
            .values()
            .filter_map(|k| Some((k.as_str(), self.get(k)?)))
    }
}

/// A judge's last `window` pairs by their own time, and which of its alerts are active (each
/// alerts when its finding becomes true and re-arms once it is no longer true).
///
/// The window is ordered by each pair's time ([`Pair::at`]) with a tie-break of its item and
/// session, not by when the pair formed: which pairs form first depends on how the votes and
/// judge-score topics interleave, which no producer decides. A pair older than every pair of a
/// full window never enters it, so the window is the last `window` of all the judge's pairs in
/// that order, whatever order they came in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeWindow {
    #[serde(deserialize_with = "timed_pairs")]
    pub pairs: VecDeque<TimedPair>,
    #[serde(default)]
    pub disagreeing: bool,
    #[serde(default)]
    pub drifting: bool,
    /// The latest of its pairs' times ([`Pair::at`]).
    pub last_event_at: Option<EventTime>,
}

/// A pair in a judge's window: its time, a tie-break (a hash of its item and session), the
/// judge's score and the humans'.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimedPair(pub EventTime, pub u64, pub f64, pub f64);

impl TimedPair {
    fn of(pair: &Pair) -> TimedPair {
        let mut key = xxhash_rust::xxh3::Xxh3::new();
        key.update(pair.item.as_bytes());
        key.update(&[0xFF]);
        key.update(pair.session.as_bytes());
        TimedPair(pair.at, key.digest(), pair.s, pair.h)
    }

    fn order(&self) -> (EventTime, u64) {
        (self.0, self.1)
    }
}

/// Reads a window's pairs, also as written before they carried their time (`[s, h]`, in the
/// order they formed): those count as older than any timed pair, in their order.
fn timed_pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<VecDeque<TimedPair>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Timed(TimedPair),
        Plain(f64, f64),
    }
    let stored = Vec::<Stored>::deserialize(d)?;
    Ok(stored
        .into_iter()
        .enumerate()
        .map(|(i, p)| match p {
            Stored::Timed(p) => p,
            Stored::Plain(s, h) => TimedPair(EventTime::MIN, i as u64, s, h),
        })
        .collect())
}

impl JudgeWindow {
    /// The agreement over the window.
    pub fn agreement(&self) -> Agreement {
        let pairs: Vec<(f64, f64)> = self.pairs.iter().map(|p| (p.2, p.3)).collect();
        agreement(&pairs)
    }

    /// How the kappa moved within a full window: the kappa of its newer half less that of its
    /// older half. `None` before the window holds `window` pairs, or where either kappa is
    /// undefined. Computed from the window alone, so it does not depend on the order in which
    /// the pairs formed.
    pub fn kappa_change(&self, window: usize) -> Option<f64> {
        let window = window.max(2);
        if self.pairs.len() < window {
            return None;
        }
        let half = self.pairs.len() / 2;
        let kappa_of = |pairs: &mut dyn Iterator<Item = &TimedPair>| {
            let pairs: Vec<(f64, f64)> = pairs.map(|p| (p.2, p.3)).collect();
            kappa(&pairs)
        };
        let older = kappa_of(&mut self.pairs.iter().take(half))?;
        let newer = kappa_of(&mut self.pairs.iter().skip(self.pairs.len() - half))?;
        Some(newer - older)
    }

    /// Adds `pair` in its place by time; beyond `window` the oldest leaves.
    fn insert(&mut self, pair: TimedPair, window: usize) {
        let at = self.pairs.partition_point(|p| p.order() <= pair.order());
        self.pairs.insert(at, pair);
        while self.pairs.len() > window {
            self.pairs.pop_front();
        }
    }
}

/// A judge's standing after a pair: its agreement over the window, and how far its kappa moved
/// since `window` pairs earlier (`None` before there were that many).
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeStanding {
    pub judge: String,
    pub agreement: Agreement,
    pub kappa_change: Option<f64>,
}

/// What a project's judge-quality state did with votes or a completed session: the pairs
/// formed, and the keys it changed or forgot (for the changelog).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The pairs formed, in order.
    pub pairs: Vec<Pair>,
    /// The places of items whose votes changed or were forgotten.
    pub items: Vec<u64>,
    /// The places of items whose waiting judge scores changed, paired or were forgotten.
    pub waiting: Vec<u64>,
    /// How many items (votes or waiting scores), or waiting scores of an item, were forgotten to
    /// stay in bounds.
    pub forgotten: usize,
}

/// A project's judge-quality state: the humans' votes per item, the judge scores of completed
/// sessions waiting for them, each judge's window of pairs, and the judge scores of its last
/// candidates (for the effective number of judges).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectQuality {
    pub items: Bounded<ItemVotes>,
    pub waiting: Bounded<Vec<Waiting>>,
    pub judges: Bounded<JudgeWindow>,
    /// The last candidates' judge scores, by their place in the project's order.
    pub recent: BTreeMap<u64, CandidateScores>,
    /// The running correlations of judge pairs over `recent`, kept with it.
    pub correlations: Correlations,
    /// Items forgotten so far to stay in bounds.
    pub forgotten: u64,
}

impl ProjectQuality {
    /// The humans' votes on `item` so far.
    pub fn item(&self, item: &str) -> Option<&ItemVotes> {
        self.items.get(item)
    }

    /// Applied votes `(reputation, value)` on `item`, of a batch at event time `at`. The first
    /// `min_human_votes` that carry weight make the item's score; once it has them, the judge
    /// scores waiting for it pair with it. Later votes change nothing.
    pub fn votes(
        &mut self,
        item: &str,
        votes: &[(f64, f64)],
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        let mut observed = Observed::default();
        let mut forgotten = Vec::new();
        let (seq, agg) = self
            .items
            .entry(item, limits.max_pending_items, &mut forgotten);
        let needed = limits.min_human_votes.max(1);
        for &(r, v) in votes.iter().filter(|(r, _)| *r > 0.0) {
            if agg.votes < needed {
                agg.weighted += r * v;
                agg.weight += r;
                agg.votes += 1;
                if agg.votes == needed {
                    agg.ready_at = Some(at);
                }
            }
        }
        let ready = agg.ready();
        observed.forgotten = forgotten.len();
        observed
            .items
            .extend(forgotten.into_iter().map(|(seq, _)| seq));
        observed.items.push(seq);
        if let Some((h, ready_at)) = ready
            && let Some((waited, waiting)) = self.waiting.remove(item)
        {
            observed.waiting.push(waited);
            observed.pairs = waiting
                .into_iter()
                .map(|w| Pair {
                    judge: w.judge,
                    item: item.to_owned(),
                    session: w.session,
                    s: w.s,
                    h,
                    at: w.at.max(ready_at),
                })
                .collect();
        }
        self.forgotten += observed.forgotten as u64;
        observed
    }

    /// A completed session's judge scores `(item, judge, s)`, completed at `at`: each pairs now
    /// if its item has
    /// `min_human_votes`, or waits for them (at most `max_judges` scores per item, the oldest
    /// dropped first and counted as forgotten).
    pub fn completed(
        &mut self,
        session: &str,
        scores: &[(&str, &str, f64)],
        at: EventTime,
        limits: &QualityLimits,
    ) -> Observed {
        let mut observed = Observed::default();
        let mut forgotten = Vec::new();
        let mut dropped = 0;
        for &(item, judge, s) in scores {
            match self.items.get(item).and_then(ItemVotes::ready) {
                Some((h, ready_at)) => observed.pairs.push(Pair {
                    judge: judge.to_owned(),
                    item: item.to_owned(),
                    session: session.to_owned(),
                    s,
                    h,
                    at: at.max(ready_at),
                }),
                None => {
                    let (seq, waiting) =
                        self.waiting
                            .entry(item, limits.max_pending_items, &mut forgotten);
                    waiting.push(Waiting {
                        session: session.to_owned(),
                        judge: judge.to_owned(),
                        s,
                        at,
                    });
                    // An item scored in session after session without votes keeps only its
                    // last `max_judges` scores.
                    let excess = waiting.len().saturating_sub(limits.max_judges.max(1));
                    waiting.drain(..excess);
                    dropped += excess;
                    if observed.waiting.last() != Some(&seq) {
                        observed.waiting.push(seq);
                    }
                }
            }
        }
        observed.forgotten = forgotten.len() + dropped;
        self.forgotten += observed.forgotten as u64;
        observed
            .waiting
            .extend(forgotten.into_iter().map(|(seq, _)| seq));
        observed
    }

    /// Adds `pair` to its judge's window and returns the judge's standing; a judge new beyond
    /// `max_judges` forgets the one seen first, whose name is appended to `forgotten`.
    pub fn add(
        &mut self,
        pair: &Pair,
        limits: &QualityLimits,
        forgotten: &mut Vec<String>,
    ) -> JudgeStanding {
        let window = limits.window.max(1);
        let mut gone = Vec::new();
        let (_, w) = self.judges.entry(&pair.judge, limits.max_judges, &mut gone);
        w.insert(TimedPair::of(pair), window);
        let agreement = w.agreement();
        w.last_event_at = w.last_event_at.max(Some(pair.at));
        let kappa_change = w.kappa_change(window);
        forgotten.extend(gone.into_iter().map(|(_, judge)| judge));
        JudgeStanding {
            judge: pair.judge.clone(),
            agreement,
            kappa_change,
        }
    }

    /// Whether `judge`'s findings are true now, and which of them just became true: sets the
    /// judge's active flags to `(disagreeing, drifting)` and returns those that were not set.
    pub fn findings(&mut self, judge: &str, now: (bool, bool)) -> (bool, bool) {
        let Some((_, w)) = self.judges.values.get_mut(judge) else {
            return (false, false);
        };
        let fresh = (now.0 && !w.disagreeing, now.1 && !w.drifting);
        (w.disagreeing, w.drifting) = now;
        fresh
    }

    /// Adds a session's candidates (each its judges' scores) to the recent window, forgetting
    /// the oldest beyond `window`; returns the places added and forgotten.
    pub fn remember(&mut self, candidates: Vec<CandidateScores>, window: usize) -> Vec<u64> {
        let mut changed = Vec::new();
        let first = self.recent.last_key_value().map_or(0, |(k, _)| k + 1);
        let scored = candidates.into_iter().filter(|s| !s.is_empty());
        for (seq, scores) in (first..).zip(scored) {
            self.correlations.apply(&scores, 1);
            self.recent.insert(seq, scores);
            changed.push(seq);
        }
        while self.recent.len() > window.max(1) {
            if let Some((seq, scores)) = self.recent.pop_first() {
                self.correlations.apply(&scores, -1);
                changed.push(seq);
            }
        }
        changed
    }

    /// Rebuilds the correlations from `recent`, after a restore wrote it directly.
    pub fn rebuild_correlations(&mut self) {
        self.correlations = Correlations::of(self.recent.values());
    }

    /// The effective number of `judges` over the recent candidates (see
    /// [`super::effective_judges`]), from the running correlations: `O(judges²)`.
    pub fn effective_judges(&self, judges: &[&str], min_shared: usize) -> Option<(f64, Basis)> {
        self.correlations.effective_judges(judges, min_shared)
    }

    /// The kappa of each judge's window, where defined.
    pub fn kappas(&self) -> impl Iterator<Item = (&str, f64)> {
        self.judges
            .iter()
            .filter_map(|(j, w)| Some((j, w.agreement().kappa?)))
    }

    /// The learned weight of each of `judges` whose window holds at least `min_pairs` pairs:
    /// `max(0, kappa)` of its window. Fewer pairs are too little evidence to override the
    /// configured weight (two unlucky pairs give kappa -1).
    pub fn learned_weights<'a>(
        &'a self,
        judges: impl Iterator<Item = &'a str> + 'a,
        min_pairs: usize,
    ) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        judges.filter_map(move |j| {
            let w = self.judges.get(j)?;
            if w.pairs.len() < min_pairs {
                return None;
            }
            Some((j, w.agreement().kappa?.max(0.0)))
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn a_judge_that_equals_the_humans_agrees_fully() {
        let pairs: Vec<(f64, f64)> = [0.1, 0.4, 0.6, 0.9, 0.7].iter().map(|&x| (x, x)).collect();
        let a = agreement(&pairs);
        assert!(close(a.pearson_r, 1.0) && close(a.p_value, 0.0));
        assert!(close(a.kappa, 1.0) && close(a.krippendorff_alpha, 1.0));
        assert!(close(a.mean_abs_diff, 0.0) && close(a.bias, 0.0));
    }

    #[test]
    fn a_judge_that_inverts_the_humans_disagrees() {
        let pairs: Vec<(f64, f64)> = [0.1, 0.3, 0.8, 0.9].iter().map(|&x| (x, 1.0 - x)).collect();
        let a = agreement(&pairs);
        assert!(close(a.pearson_r, -1.0));
        // Every decision differs: p_o = 0, p_e = 0.5, kappa = -1.
        assert!(close(a.kappa, -1.0), "{a:?}");
        assert!(a.krippendorff_alpha.is_some_and(|x| x < 0.0));
        // s - h: -0.8, -0.4, 0.6, 0.8: mean |d| 2.6 / 4, bias 0.2 / 4.
        assert!(close(a.mean_abs_diff, 0.65) && close(a.bias, 0.05), "{a:?}");
    }

    #[test]
    fn hand_checked_kappa_and_bias() {
        // Decisions (s, h): (1,1), (1,0), (0,0), (1,1): p_o = 3/4; s says yes 3/4, h 1/2:
        // p_e = 3/8 + 1/8 = 1/2; kappa = (3/4 - 1/2) / (1/2) = 0.5.
        let pairs = [(0.9, 0.8), (0.6, 0.2), (0.1, 0.3), (0.7, 0.5)];
        let a = agreement(&pairs);
        assert!(close(a.kappa, 0.5), "{a:?}");
        // Differences 0.1, 0.4, -0.2, 0.2: bias 0.125, mean |d| 0.225.
        assert!(close(a.bias, 0.125) && close(a.mean_abs_diff, 0.225));
    }

    #[test]
    fn undefined_statistics_are_none() {
        let one = agreement(&[(0.3, 0.4)]);
        assert_eq!((one.pearson_r, one.p_value, one.kappa), (None, None, None));
        assert!(one.krippendorff_alpha.is_none());
        assert!(close(one.bias, -0.1));
        // A constant judge has no correlation; constant alike raters no kappa.
        let flat = agreement(&[(0.7, 0.6), (0.7, 0.9), (0.7, 0.8)]);
        assert_eq!((flat.pearson_r, flat.kappa), (None, None));
        let two = agreement(&[(0.2, 0.1), (0.8, 0.3)]);
        assert_eq!((two.pearson_r, two.p_value), (Some(1.0), None));
        assert_eq!(agreement(&[]).mean_abs_diff, None);
    }

    const LIMITS: QualityLimits = QualityLimits {
        min_human_votes: 3,
        max_pending_items: 3,
        window: 4,
        max_judges: 3,
    };

    fn at() -> EventTime {
        EventTime::from_epoch_millis(1_795_168_800_000).unwrap()
    }

    fn pairs(o: &Observed) -> Vec<(&str, &str, f64, f64)> {
        o.pairs
            .iter()
            .map(|p| (p.judge.as_str(), p.item.as_str(), p.s, p.h))
            .collect()
    }

    #[test]
    fn a_pair_forms_when_both_sides_exist_and_later_votes_leave_it() {
        let mut q = ProjectQuality::default();
        // Votes first: two are not enough; the session waits, and the third vote pairs it with
        // the reputation-weighted mean of the three: (2*1 + 1*0 + 1*0.5) / 4 = 0.625.
        assert!(
            q.votes("i1", &[(2.0, 1.0), (1.0, 0.0)], at(), &LIMITS)
                .pairs
                .is_empty()
        );
        assert!(
            q.completed("s", &[("i1", "j1", 0.8), ("i1", "j2", 0.3)], at(), &LIMITS)
                .pairs
                .is_empty()
        );
        let third = q.votes("i1", &[(1.0, 0.5)], at(), &LIMITS);
        assert_eq!(
            pairs(&third),
            [("j1", "i1", 0.8, 0.625), ("j2", "i1", 0.3, 0.625)]
        );
        // A later vote forms nothing and changes nothing: a later session pairs at once with
        // the same score.
        assert!(q.votes("i1", &[(4.0, 0.0)], at(), &LIMITS).pairs.is_empty());
        let later = q.completed("s", &[("i1", "j3", 0.1)], at(), &LIMITS);
        assert_eq!(pairs(&later), [("j3", "i1", 0.1, 0.625)]);
        assert_eq!(q.item("i1").map(|v| v.votes), Some(3));
    }

    #[test]
    fn votes_without_weight_do_not_count_towards_the_score() {
        let mut q = ProjectQuality::default();
        q.completed("s", &[("i", "j", 0.4)], at(), &LIMITS);
        assert!(
            q.votes("i", &[(0.0, 1.0); 3], at(), &LIMITS)
                .pairs
                .is_empty()
        );
        assert!(
            q.votes("i", &[(1.0, 0.25); 2], at(), &LIMITS)
                .pairs
                .is_empty()
        );
        let third = q.votes("i", &[(1.0, 0.25), (9.0, 1.0)], at(), &LIMITS);
        assert_eq!(pairs(&third), [("j", "i", 0.4, 0.25)]);
    }

    #[test]
    fn a_pair_is_the_same_whether_the_session_or_the_votes_come_last() {
        let t = |secs: i64| EventTime::from_epoch_millis(1_795_168_800_000 + secs * 1000).unwrap();
        let votes = [(1.0, 1.0), (1.0, 0.0), (2.0, 1.0), (5.0, 0.0)];
        // Session at 10 s, votes at 20 s and 30 s (the last batch after the score is complete).
        let mut first = ProjectQuality::default();
        first.completed("s", &[("i", "j", 0.7)], t(10), &LIMITS);
        assert!(
            first
                .votes("i", &votes[..2], t(20), &LIMITS)
                .pairs
                .is_empty()
        );
        let a = first.votes("i", &votes[2..], t(30), &LIMITS).pairs;
        // The votes first, then the session.
        let mut second = ProjectQuality::default();
        second.votes("i", &votes[..2], t(20), &LIMITS);
        second.votes("i", &votes[2..], t(30), &LIMITS);
        let b = second
            .completed("s", &[("i", "j", 0.7)], t(10), &LIMITS)
            .pairs;
        // h = (1 + 0 + 2) / 4 over the first three votes; the fourth does not count.
        assert_eq!(a, b);
        assert_eq!((a[0].h, a[0].at), (0.75, t(30)));
    }

    #[test]
    fn items_and_waiting_scores_are_bounded_oldest_first() {
        let mut q = ProjectQuality::default();
        for item in ["a", "b", "c"] {
            assert_eq!(q.votes(item, &[(1.0, 1.0)], at(), &LIMITS).forgotten, 0);
        }
        // A fourth item forgets "a"'s votes: its count starts again.
        let fourth = q.votes("d", &[(1.0, 1.0)], at(), &LIMITS);
        // (By their places: "a" was the first, "d" the fourth.)
        assert_eq!(
            (fourth.forgotten, fourth.items.as_slice()),
            (1, [0, 3].as_slice())
        );
        assert!(q.item("a").is_none());
        q.votes("a", &[(1.0, 1.0)], at(), &LIMITS);
        assert_eq!(q.item("a").map(|v| v.votes), Some(1));
        // Waiting judge scores are bounded the same way.
        for item in ["x", "y", "z"] {
            assert_eq!(
                q.completed("s", &[(item, "j", 0.5)], at(), &LIMITS)
                    .forgotten,
                0
            );
        }
        assert_eq!(
            q.completed("s", &[("w", "j", 0.5)], at(), &LIMITS)
                .forgotten,
            1
        );
        // "a", then "b" (when "a" came back), then "x".
        assert_eq!(q.forgotten, 3);
        // "x" no longer waits: its votes reaching three pair nothing.
        let votes = [(1.0, 1.0); 3];
        assert!(q.votes("x", &votes, at(), &LIMITS).pairs.is_empty());
        assert_eq!(q.votes("y", &votes, at(), &LIMITS).pairs.len(), 1);
    }

    #[test]
    fn a_window_written_before_pairs_had_times_reads_back_oldest_first() {
        let old = r#"{"pairs":[[0.9,0.8],[0.1,0.2]],"kappas":[null,1.0],"disagreeing":true,"drifting":false,"last_event_at":null}"#;
        let w: JudgeWindow = serde_json::from_str(old).unwrap();
        assert_eq!(
            w.pairs,
            [
                TimedPair(EventTime::MIN, 0, 0.9, 0.8),
                TimedPair(EventTime::MIN, 1, 0.1, 0.2)
            ]
        );
        assert!(w.disagreeing);
        let again: JudgeWindow = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert_eq!(again, w);
    }

    #[test]
    fn a_judge_window_keeps_its_last_pairs_by_time_and_kappa_change_compares_its_halves() {
        let pair = |n: i64, s: f64, h: f64| Pair {
            judge: "j".into(),
            item: format!("i{n}"),
            session: "s".into(),
            s,
            h,
            at: EventTime::new(1_000 + n, 0).unwrap(),
        };
        // At times 0..4 four agreeing pairs (kappa 1), at 4..6 two inverted ones.
        let agreeing = [(0.9, 0.8), (0.1, 0.2), (0.8, 0.9), (0.2, 0.1)];
        let mut pairs: Vec<Pair> = agreeing
            .iter()
            .enumerate()
            .map(|(n, &(s, h))| pair(n as i64, s, h))
            .collect();
        pairs.push(pair(4, 0.9, 0.2));
        pairs.push(pair(5, 0.1, 0.8));
        let mut q = ProjectQuality::default();
        let mut last = None;
        for (n, p) in pairs.iter().take(4).enumerate() {
            last = Some(q.add(p, &LIMITS, &mut Vec::new()));
            if n < 3 {
                assert_eq!(last.as_ref().unwrap().kappa_change, None, "window not full");
            }
        }
        let last = last.unwrap();
        assert_eq!((last.agreement.pairs, last.agreement.kappa), (4, Some(1.0)));
        assert_eq!(last.kappa_change, Some(0.0));
        // The window of 4 is now times 2..6: the older half agrees (kappa 1), the newer half
        // inverts (kappa -1): a change of -2.
        let mut last = None;
        for p in &pairs[4..] {
            last = Some(q.add(p, &LIMITS, &mut Vec::new()));
        }
        let last = last.unwrap();
        assert_eq!(last.agreement.pairs, 4);
        assert_eq!(last.kappa_change, Some(-2.0));
        let window = &q.judges.get("j").unwrap().pairs;
        let times: Vec<i64> = window.iter().map(|p| p.0.parts().0 - 1_000).collect();
        assert_eq!(times, [2, 3, 4, 5]);
        // Every order of the six pairs leaves the same window and figures; a pair older than a
        // full window never enters it.
        for rotation in 0..pairs.len() {
            let mut order = pairs.clone();
            order.rotate_left(rotation);
            order.reverse();
            let mut other = ProjectQuality::default();
            let mut standing = None;
            for p in &order {
                standing = Some(other.add(p, &LIMITS, &mut Vec::new()));
            }
            let w = other.judges.get("j").unwrap();
            assert_eq!(&w.pairs, window);
            assert_eq!(w.kappa_change(LIMITS.window), Some(-2.0));
            assert_eq!(standing.unwrap().agreement.pairs, 4);
        }
    }

    proptest! {
        /// No NaN, and the order of the pairs does not matter.
        #[test]
        fn agreement_is_finite_and_order_free(
            pairs in prop::collection::vec((0.0..=1.0f64, 0.0..=1.0f64), 0..40),
            seed in any::<u64>(),
        ) {
            let a = agreement(&pairs);
            let mut shuffled = pairs.clone();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, rng.random_range(0..=i));
            }
            let b = agreement(&shuffled);
            let fields = |a: &Agreement| [a.pearson_r, a.p_value, a.mean_abs_diff, a.kappa, a.krippendorff_alpha, a.bias];
            for (x, y) in fields(&a).into_iter().zip(fields(&b)) {
                prop_assert!(x.is_none_or(f64::is_finite));
                prop_assert_eq!(x.is_some(), y.is_some());
                if let (Some(x), Some(y)) = (x, y) {
                    prop_assert!((x - y).abs() < 1e-9, "{} vs {}", x, y);
                }
            }
            prop_assert!(a.pearson_r.is_none_or(|r| (-1.0..=1.0).contains(&r)));
            prop_assert!(a.kappa.is_none_or(|k| (-1.0..=1.0).contains(&k)));
        }

        /// Whatever arrives in whatever order: every pair is in [0, 1] and forms once, and
        /// the state stays within its bounds.
        #[test]
        fn pairs_form_once_and_the_state_stays_bounded(
            steps in prop::collection::vec(
                (any::<bool>(), 0..6usize, 0.0..=1.0f64, 0.0..=5.0f64), 0..80),
        ) {
            let mut q = ProjectQuality::default();
            let mut scored = 0;
            let mut formed = 0;
            for (i, (is_vote, item, value, reputation)) in steps.into_iter().enumerate() {
                let item = format!("i{item}");
                let observed = if is_vote {
                    q.votes(&item, &[(reputation, value)], at(), &LIMITS)
                } else {
                    scored += 1;
                    let judge = format!("j{i}");
                    q.completed("s", &[(item.as_str(), judge.as_str(), value)], at(), &LIMITS)
                };
                for p in &observed.pairs {
                    prop_assert!((0.0..=1.0).contains(&p.s) && (0.0..=1.0).contains(&p.h));
                    let standing = q.add(p, &LIMITS, &mut Vec::new());
                    prop_assert!(standing.agreement.pairs <= LIMITS.window);
                }
                formed += observed.pairs.len();
                prop_assert!(q.items.values.len() <= LIMITS.max_pending_items);
                prop_assert!(q.waiting.values.len() <= LIMITS.max_pending_items);
                prop_assert_eq!(q.items.values.len(), q.items.order.len());
                prop_assert!(q.judges.len() <= LIMITS.max_judges);
            }
            // Each judge score pairs at most once (every judge here scores once).
            prop_assert!(formed <= scored);
        }
    }
}
