//! Reviewer reliability: how far each human reviewer's pass/fail verdicts can be trusted,
//! learned from how reviewers agree on the same items, without gold answers: the one-coin
//! Dawid-Skene model, fitted online.
//!
//! The model. An item's true verdict is pass with probability `π`; reviewer `j` gives the true
//! verdict with probability `p_j`, its reliability, whichever the truth. Given the reliabilities,
//! an item's posterior odds of being a pass are
//!
//! ```text
//! logit P(pass | verdicts) = logit π + Σ_{j said pass} logit p_j − Σ_{j said fail} logit p_j
//! ```
//!
//! and given every item's posterior `q_i`, a reliability is the expected share of the reviewer's
//! verdicts that are true, under a Beta(`PRIOR_TRUE`, `PRIOR_FALSE`) prior, and `π` the mean
//! posterior under a Beta(1, 1) one:
//!
//! ```text
//! p_j = (PRIOR_TRUE + Σ_i P(z_i = v_ij)) / (PRIOR_TRUE + PRIOR_FALSE + n_j)
//! π   = (1 + Σ_i q_i) / (2 + items)
//! ```
//!
//! Batch EM (crowd-kit's `OneCoinDawidSkene`, without the prior) alternates the two over every
//! item until they settle. Online, each item keeps its verdicts and its posterior (a [`Review`],
//! in the project's item store, the one judge quality keeps the humans' votes in), and each
//! reviewer the sums its figures are read from. When an item gains a verdict it is
//! *refreshed*: its reviewers' sums lose what its old posterior gave them, its posterior is
//! recomputed from the reliabilities as they are now, and the sums gain what the new one gives.
//! `SWEEP` more items, the least recently refreshed, are refreshed with it, so every held item
//! is refreshed again within `items / SWEEP` verdicts: an incremental EM whose fixed point is
//! the batch one.
//!
//! The prior is as if every reviewer had begun with two true verdicts and one false: it keeps a
//! reviewer with few items near "probably careful" instead of at 0 or 1, and, being above one
//! half, it tells the model which of its two mirror-image solutions (everyone right, or everyone
//! wrong) is meant. Against the same sums without it, it moves a reliability by
//! `(2 − 3x) / (n + 3)` for a reviewer with `n` verdicts, a share `x` of them true: with 40 items
//! at most 0.05 (a reviewer always wrong), under 0.025 for one right at least half the time.
//!
//! Sums are kept in fixed point, so taking a contribution back leaves exactly what was there
//! before it, and verdicts are kept in reviewer order, so neither rounding nor the order in which
//! votes arrived within an item can change a result. Every sum can so be counted again from the
//! items alone ([`Reviewers::recount`]): that is how a restore rebuilds them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bounded::Bounded;
use crate::engine::contract::time::EventTime;
use crate::engine::ids::{IdMap, ProjectKey};
use crate::engine::settings;

/// A reviewer of a project: `(project, reviewer)`.
pub type ProjectReviewer = (ProjectKey, ProjectKey);

/// Pseudo-verdicts of the prior on a reliability: true ones and false ones.
pub const PRIOR_TRUE: f64 = 2.0;
pub const PRIOR_FALSE: f64 = 1.0;

/// Items refreshed besides the one that gained a verdict.
pub const SWEEP: usize = 2;

/// Reliabilities are kept within `[CLIP, 1 - CLIP]` in the posterior, so that no single
/// reviewer's verdict makes an item certain.
pub const CLIP: f64 = 1e-3;

/// The scale of the fixed-point sums: 2^-32 of a verdict.
const ONE: f64 = 4_294_967_296.0;

fn fixed(x: f64) -> i64 {
    (x * ONE).round() as i64
}

fn float(x: i64) -> f64 {
    x as f64 / ONE
}

/// What a project's reviewer model may hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReviewerLimits {
    /// Reviewers with figures; a verdict of a new reviewer beyond them is left out (counted).
    pub max_reviewers: usize,
    /// Reviewers' verdicts one item keeps; a new reviewer's verdict on an item that has them
    /// all is left out (its earlier reviewers can still change theirs).
    pub max_verdicts: usize,
}

/// One reviewer's verdict on an item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub reviewer: ProjectKey,
    pub pass: bool,
    /// The vote's weight (its reputation), for the majority of the others.
    pub weight: f64,
    /// The event time of its batch.
    pub at: EventTime,
}

/// An item's verdicts, in reviewer order, its posterior, and the judges' scores paired with
/// it: what the model keeps of an item, in its entry of the item store.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Review {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
    /// P(the item's true verdict is pass), as of its last refresh.
    #[serde(default)]
    pub posterior: f64,
    /// Its place in its project's order of refreshes.
    #[serde(default)]
    pub refreshed: u64,
    /// Σ and number of the judge scores paired with the item (judge quality): the judges'
    /// verdict is pass when their mean is at least ½.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<(f64, u32)>,
}

/// Two are equal when their verdicts, posteriors and judge scores are: a refresh place is only
/// relative, and [`Reviewers`] compares the order of refreshes.
impl PartialEq for Review {
    fn eq(&self, other: &Self) -> bool {
        self.verdicts == other.verdicts
            && self.posterior == other.posterior
            && self.judged == other.judged
    }
}

impl Review {
    /// Whether there is nothing to keep: no verdict and no judge score.
    pub fn is_empty(&self) -> bool {
        self.verdicts.is_empty() && self.judged.is_none()
    }

    /// The judges' verdict on the item, once a judge score is paired with it.
    pub fn judges_pass(&self) -> Option<bool> {
        let (sum, n) = self.judged?;
        (n > 0).then(|| sum / f64::from(n) >= 0.5)
    }
}

/// An entry of the item store that carries a [`Review`].
pub trait Reviewed {
    fn review(&self) -> &Review;
    fn review_mut(&mut self) -> &mut Review;
}

impl Reviewed for Review {
    fn review(&self) -> &Review {
        self
    }

    fn review_mut(&mut self) -> &mut Review {
        self
    }
}

/// A reviewer's findings, each active from when it becomes true until it no longer is (the
/// audit's hysteresis): an alert is raised when one becomes true.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findings {
    #[serde(default)]
    pub unreliable: bool,
    #[serde(default)]
    pub adversarial: bool,
    #[serde(default)]
    pub straight_lining: bool,
}

/// What is kept of a reviewer beside its sums (which a restore counts again from the items):
/// the changelog's reviewer record, written when its findings change and when its last event
/// time can no longer be read from its held verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// The latest event time of its verdicts since it was first held: the latest of its held
    /// verdicts' unless the verdict that carried it has left (replaced or forgotten), which
    /// is when this part is written.
    pub last_event_at: Option<EventTime>,
    #[serde(default)]
    pub findings: Findings,
}

/// What one reviewer's verdicts on the held items add up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reviewer {
    /// Held items with its verdict.
    pub verdicts: u64,
    /// Of those, the ones it passed.
    pub passes: u64,
    /// Held items with its verdict and at least one other reviewer's.
    pub shared: u64,
    /// Σ P(its verdict is the true one) over its items, fixed point.
    expected_true: i64,
    /// Σ over its shared items of 1 where its verdict is the weighted majority of the others',
    /// ½ where they are tied, fixed point.
    agreed: i64,
    /// Σ over its shared items of 1 where the others' weighted majority is pass, ½ where tied,
    /// fixed point: whether the crowd's verdicts on its items are mixed.
    crowd_passes: i64,
    /// Its items with a judges' verdict, and of those the ones it agrees with.
    pub judged: u64,
    pub judge_agreed: u64,
    pub kept: Kept,
}

impl Reviewer {
    /// The estimated probability that its verdict is the true one.
    pub fn reliability(&self) -> f64 {
        (PRIOR_TRUE + float(self.expected_true)) / (PRIOR_TRUE + PRIOR_FALSE + self.verdicts as f64)
    }

    /// The reliability's standard error, as a Beta posterior's.
    pub fn standard_error(&self) -> f64 {
        let p = self.reliability();
        (p * (1.0 - p) / (PRIOR_TRUE + PRIOR_FALSE + self.verdicts as f64 + 1.0)).sqrt()
    }

    /// The share of its shared items where it sided with the others' weighted majority; `None`
    /// before it shares one.
    pub fn agreement(&self) -> Option<f64> {
        (self.shared > 0).then(|| float(self.agreed) / self.shared as f64)
    }

    /// The share of its shared items where the others' weighted majority is pass; `None` before
    /// it shares one.
    pub fn crowd_pass_rate(&self) -> Option<f64> {
        (self.shared > 0).then(|| float(self.crowd_passes) / self.shared as f64)
    }

    /// The share of its verdicts that are pass; `None` before it has one.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.verdicts > 0).then(|| self.passes as f64 / self.verdicts as f64)
    }

    /// The share of its items with a judges' verdict where it gave the same verdict; `None`
    /// before one of its items is paired with a judge score.
    pub fn judge_agreement(&self) -> Option<f64> {
        (self.judged > 0).then(|| self.judge_agreed as f64 / self.judged as f64)
    }

    /// Its findings now, given those it had `before`, under the `reviewers` thresholds, once it
    /// has `min_items` shared items. Each begins when its condition holds and ends only once
    /// the reviewer is clearly past it (hysteresis), so a reviewer near a threshold is one
    /// alert, not one per crossing:
    /// - unreliable: begins with a reliability below `min_reliability`, ends at
    ///   `min_reliability` plus one standard error;
    /// - adversarial: begins when the reliability is below ½ by more than two standard errors
    ///   (it gives the true verdict less often than chance would), ends when it is no longer
    ///   below ½ by one;
    /// - straight-lining: begins with the same verdict on at least `max_same_verdict` of its
    ///   items while the others' majority on them is mixed (passes a share strictly between
    ///   `1 - max_same_verdict` and `max_same_verdict`), ends when its share of the same verdict
    ///   falls below `2 max_same_verdict - 1` or the others' verdicts are no longer mixed.
    pub fn findings(&self, before: Findings, thresholds: &settings::Reviewers) -> Findings {
        if self.shared < thresholds.min_items.max(1) {
            return Findings::default();
        }
        let (p, se) = (self.reliability(), self.standard_error());
        let m = thresholds.max_same_verdict;
        let same = self.pass_rate().map_or(0.0, |x| x.max(1.0 - x));
        let mixed = self.crowd_pass_rate().is_some_and(|x| x > 1.0 - m && x < m);
        let min = thresholds.min_reliability;
        Findings {
            unreliable: if before.unreliable {
                p < min + se
            } else {
                p < min
            },
            adversarial: if before.adversarial {
                p + se < 0.5
            } else {
                p + 2.0 * se < 0.5
            },
            straight_lining: mixed
                && if before.straight_lining {
                    same >= 2.0 * m - 1.0
                } else {
                    same >= m
                },
        }
    }

    /// Its weight for `scoring.reputation_source = "learned"`: the log-odds of its reliability,
    /// clipped at 0.
    pub fn learned_weight(&self) -> f64 {
        let p = self.reliability();
        (p / (1.0 - p)).ln().max(0.0)
    }

    /// Its reliability clipped for the posterior.
    fn clipped(&self) -> f64 {
        self.reliability().clamp(CLIP, 1.0 - CLIP)
    }
}

/// What a change to the model touched: reviewers whose figures changed (in order, once each;
/// the model may no longer hold some), the places of items whose review changed, and the
/// reviewers whose kept part must be written: their last event time left with a verdict, or
/// they were forgotten.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Touched {
    pub reviewers: Vec<ProjectKey>,
    pub items: Vec<u64>,
    pub kept: Vec<ProjectKey>,
}

/// A project's reviewers: their sums over the items of the project's item store, and the
/// order the items were last refreshed in.
#[derive(Debug, Clone, Default)]
pub struct Reviewers {
    reviewers: IdMap<ProjectKey, Reviewer>,
    /// The items with verdicts, by their last refresh.
    refreshes: BTreeMap<u64, ProjectKey>,
    /// Σ of those items' posteriors, fixed point.
    posteriors: i64,
    next: u64,
    /// Verdicts left out to stay within the bounds.
    pub left_out: u64,
}

/// Two are equal when they hold the same reviewers and refresh their items in the same order:
/// the refresh places themselves are only relative.
impl PartialEq for Reviewers {
    fn eq(&self, other: &Self) -> bool {
        self.reviewers == other.reviewers
            && self.refreshes.values().eq(other.refreshes.values())
            && self.posteriors == other.posteriors
            && self.left_out == other.left_out
    }
}

impl Reviewers {
    /// A vote batch's verdicts on `item` (held in `items`) at `at`, each replacing any earlier
    /// one of the same reviewer on it (of one reviewer in the batch, the last counts), within
    /// `limits`; then `SWEEP` more items refreshed. What changed is appended to `touched`.
    pub fn add<V: Reviewed>(
        &mut self,
        items: &mut Bounded<V>,
        (item, verdicts): (&str, &[Verdict]),
        limits: ReviewerLimits,
        touched: &mut Touched,
    ) {
        let Some((seq, entry)) = items.get_mut(item) else {
            return;
        };
        let review = entry.review_mut();
        self.uncount(review);
        let mut new = 0;
        for verdict in verdicts {
            let at = review
                .verdicts
                .binary_search_by(|v| v.reviewer.as_str().cmp(verdict.reviewer.as_str()));
            let known = self.reviewers.contains_key(&verdict.reviewer);
            match at {
                Ok(i) => {
                    let old = &review.verdicts[i];
                    if old.at != verdict.at && self.carried_last_event(old) {
                        touched.kept.push(old.reviewer.clone());
                    }
                    review.verdicts[i] = verdict.clone();
                }
                Err(i)
                    if review.verdicts.len() < limits.max_verdicts
                        && (known || self.reviewers.len() + new < limits.max_reviewers) =>
                {
                    new += usize::from(!known);
                    review.verdicts.insert(i, verdict.clone());
                }
                Err(_) => self.left_out += 1,
            }
        }
        if review.verdicts.is_empty() {
            return;
        }
        self.refresh(item, review);
        self.count(review, 1, Some(touched));
        touched.items.push(seq);
        let sweep: Vec<ProjectKey> = self
            .refreshes
            .values()
            .filter(|k| k.as_str() != item)
            .take(SWEEP)
            .cloned()
            .collect();
        for other in sweep {
            let Some((seq, entry)) = items.get_mut(&other) else {
                continue;
            };
            let review = entry.review_mut();
            self.uncount(review);
            self.refresh(&other, review);
            self.count(review, 1, Some(touched));
            touched.items.push(seq);
        }
        touched.reviewers.sort();
        touched.reviewers.dedup();
    }

    /// A judge score `s` of `item` paired with the humans' votes on it (judge quality): the
    /// item's judges' verdict, and with it its reviewers' agreement with the judges, changes.
    pub fn judged<V: Reviewed>(
        &mut self,
        items: &mut Bounded<V>,
        item: &str,
        s: f64,
        touched: &mut Touched,
    ) {
        let Some((seq, entry)) = items.get_mut(item) else {
            return;
        };
        let review = entry.review_mut();
        let counted = !review.verdicts.is_empty();
        if counted {
            self.count(review, -1, Some(touched));
        }
        let (sum, n) = review.judged.unwrap_or_default();
        review.judged = Some((sum + s, n.saturating_add(1)));
        if counted {
            self.count(review, 1, Some(touched));
        }
        touched.items.push(seq);
        touched.reviewers.sort();
        touched.reviewers.dedup();
    }

    /// `review`, of an item the store forgot: its verdicts leave their reviewers' sums, and a
    /// reviewer left with no item is forgotten too.
    pub fn forget(&mut self, review: &Review, touched: &mut Touched) {
        if review.verdicts.is_empty() {
            return;
        }
        self.refreshes.remove(&review.refreshed);
        self.count(review, -1, Some(touched));
        for v in &review.verdicts {
            let held = self
                .reviewers
                .get(&v.reviewer)
                .is_some_and(|r| r.verdicts > 0);
            if !held {
                // Its record goes too (or, should it come back within the same record, is
                // written again from nothing).
                self.reviewers.remove(&v.reviewer);
                touched.kept.push(v.reviewer.clone());
            } else if self.carried_last_event(v) {
                touched.kept.push(v.reviewer.clone());
            }
        }
    }

    /// Puts a restored reviewer's kept part back; its sums, and its last event time where its
    /// held verdicts say a later one, come from [`Reviewers::recount`].
    pub fn restore(&mut self, reviewer: &str, kept: Kept) {
        self.reviewers.entry(reviewer.into()).or_default().kept = kept;
    }

    /// Counts every sum again from `items` and their refresh places, after a restore wrote
    /// them (and the reviewers' kept parts) directly. A reviewer with no item is dropped.
    pub fn recount<V: Reviewed>(&mut self, items: &Bounded<V>) {
        self.posteriors = 0;
        self.refreshes.clear();
        for r in self.reviewers.values_mut() {
            *r = Reviewer {
                kept: r.kept,
                ..Reviewer::default()
            };
        }
        for (key, entry) in items.iter() {
            let review = entry.review();
            if review.verdicts.is_empty() {
                continue;
            }
            self.refreshes.insert(review.refreshed, key.into());
            self.next = self.next.max(review.refreshed + 1);
            self.count(review, 1, None);
        }
        self.reviewers.retain(|_, r| r.verdicts > 0);
    }

    /// The reviewers, by id (in no order).
    pub fn reviewers(&self) -> &IdMap<ProjectKey, Reviewer> {
        &self.reviewers
    }

    pub fn get_mut(&mut self, reviewer: &str) -> Option<&mut Reviewer> {
        self.reviewers.get_mut(reviewer)
    }

    /// The `n` least reliable reviewers with at least `min_items` shared items, least
    /// reliable first (ties by id).
    pub fn least_reliable(&self, min_items: u64, n: usize) -> Vec<(&str, f64)> {
        let mut held: Vec<(&str, f64)> = self
            .reviewers
            .iter()
            .filter(|(_, r)| r.shared >= min_items)
            .map(|(k, r)| (k.as_str(), r.reliability()))
            .collect();
        held.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
        held.truncate(n);
        held
    }

    /// Items with verdicts.
    pub fn items(&self) -> usize {
        self.refreshes.len()
    }

    /// The estimated share of items whose true verdict is pass.
    pub fn class_prior(&self) -> f64 {
        (1.0 + float(self.posteriors)) / (2.0 + self.refreshes.len() as f64)
    }

    /// Whether `verdict` carries its reviewer's last event time: once it leaves, that time can
    /// no longer be read from the held verdicts.
    fn carried_last_event(&self, verdict: &Verdict) -> bool {
        self.reviewers
            .get(&verdict.reviewer)
            .is_some_and(|r| r.kept.last_event_at == Some(verdict.at))
    }

    /// Takes what `review`'s verdicts gave its reviewers' sums, before they change.
    fn uncount(&mut self, review: &Review) {
        if !review.verdicts.is_empty() {
            self.refreshes.remove(&review.refreshed);
            self.count(review, -1, None);
        }
    }

    /// Recomputes the posterior of `item` (not counted in the sums) from its reviewers'
    /// reliabilities as they are and the class prior of the other items, and marks it the
    /// most recently refreshed.
    fn refresh(&mut self, item: &str, review: &mut Review) {
        let others = self.refreshes.len() as f64;
        let prior = (1.0 + float(self.posteriors)) / (2.0 + others);
        let logit = |p: f64| (p / (1.0 - p)).ln();
        let mut odds = logit(prior.clamp(CLIP, 1.0 - CLIP));
        for v in &review.verdicts {
            let p = self
                .reviewers
                .get(&v.reviewer)
                .map_or_else(|| Reviewer::default().clipped(), Reviewer::clipped);
            odds += if v.pass { logit(p) } else { -logit(p) };
        }
        review.posterior = 1.0 / (1.0 + (-odds).exp());
        review.refreshed = self.next;
        self.next += 1;
        self.refreshes.insert(review.refreshed, item.into());
    }

    /// Adds (`sign` 1) or takes back (-1) what `review` gives its reviewers' sums and the class
    /// prior's; the only place the sums change, so a take-back leaves exactly what was there.
    fn count(&mut self, review: &Review, sign: i64, mut touched: Option<&mut Touched>) {
        self.posteriors += sign * fixed(review.posterior);
        let judges = review.judges_pass();
        for (v, crowd) in review.verdicts.iter().zip(majorities(&review.verdicts)) {
            let r = match self.reviewers.get_mut(&v.reviewer) {
                Some(r) => r,
                None => self.reviewers.entry(v.reviewer.clone()).or_default(),
            };
            let step = |n: &mut u64, by: bool| {
                if by {
                    *n = n.wrapping_add_signed(sign);
                }
            };
            step(&mut r.verdicts, true);
            step(&mut r.passes, v.pass);
            if sign > 0 {
                r.kept.last_event_at = r.kept.last_event_at.max(Some(v.at));
            }
            r.expected_true += sign * fixed(truth(review.posterior, v.pass));
            if let Some(others_pass) = crowd {
                step(&mut r.shared, true);
                r.crowd_passes += sign * fixed(others_pass);
                r.agreed += sign * fixed(truth(others_pass, v.pass));
            }
            if let Some(judges) = judges {
                step(&mut r.judged, true);
                step(&mut r.judge_agreed, judges == v.pass);
            }
            if let Some(t) = touched.as_deref_mut() {
                t.reviewers.push(v.reviewer.clone());
            }
        }
    }
}

/// P(a verdict of `pass` is the true one) for an item whose posterior of being a pass is `q`;
/// also whether a verdict sides with the others' majority, given that majority's side.
fn truth(q: f64, pass: bool) -> f64 {
    if pass { q } else { 1.0 - q }
}

/// For each verdict, the side of the weighted majority of the item's other verdicts: 1 for
/// pass, 0 for fail, ½ when they are tied; `None` when it is the item's only verdict.
fn majorities(verdicts: &[Verdict]) -> impl Iterator<Item = Option<f64>> + '_ {
    let signed = |v: &Verdict| if v.pass { v.weight } else { -v.weight };
    let total: f64 = verdicts.iter().map(signed).sum();
    let alone = verdicts.len() < 2;
    verdicts.iter().map(move |v| {
        if alone {
            return None;
        }
        let others = total - signed(v);
        Some(if others.abs() < 1e-12 {
            0.5
        } else if others > 0.0 {
            1.0
        } else {
            0.0
        })
    })
}

#[cfg(test)]
mod tests;
