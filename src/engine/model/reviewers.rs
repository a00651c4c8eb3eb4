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
//! item until they settle. Online, each item keeps its posterior and each reviewer the sums its
//! reliability is read from. When an item gains a verdict it is *refreshed*: its reviewers' sums
//! lose what its old posterior gave them, its posterior is recomputed from the reliabilities as
//! they are now, and the sums gain what the new one gives. `SWEEP` more items, the least recently
//! refreshed, are refreshed with it, so every held item is refreshed again within
//! `items / SWEEP` verdicts: an incremental EM whose fixed point is the batch one.
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
//! votes arrived within an item can change a result.

use std::collections::BTreeMap;

use crate::engine::contract::time::EventTime;
use crate::engine::ids::{IdMap, ProjectKey};

/// Pseudo-verdicts of the prior on a reliability: true ones and false ones.
pub const PRIOR_TRUE: f64 = 2.0;
pub const PRIOR_FALSE: f64 = 1.0;

/// Items refreshed besides the one that gained a verdict.
pub const SWEEP: usize = 2;

/// Reliabilities are kept within `[CLIP, 1 - CLIP]` in the posterior, so that no single
/// reviewer's verdict makes an item certain.
const CLIP: f64 = 1e-3;

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
    /// Items held; a new one beyond them forgets the oldest.
    pub max_items: usize,
    /// Reviewers' verdicts one item keeps; a new reviewer's verdict on an item that has them
    /// all is left out (its earlier reviewers can still change theirs).
    pub max_verdicts: usize,
}

/// One reviewer's verdict on an item.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub reviewer: ProjectKey,
    pub pass: bool,
    /// The vote's weight (its reputation), for the majority of the others.
    pub weight: f64,
}

/// An item's verdicts, in reviewer order, and its posterior.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    verdicts: Vec<Verdict>,
    /// P(the item's true verdict is pass), as of its last refresh.
    posterior: f64,
    /// Its place in the order of refreshes.
    refreshed: u64,
    /// Its place in the order of arrival (the oldest is forgotten first).
    added: u64,
}

/// What one reviewer's verdicts on the held items add up to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reviewer {
    /// Held items with its verdict.
    pub items: u64,
    /// Of those, the ones it passed.
    pub passes: u64,
    /// Held items with its verdict and at least one other reviewer's.
    pub shared: u64,
    /// Σ P(its verdict is the true one) over its items, fixed point.
    expected_true: i64,
    /// Σ over its shared items of 1 where its verdict is the weighted majority of the others',
    /// ½ where they are tied, fixed point.
    agreed: i64,
    pub last_event_at: Option<EventTime>,
}

impl Reviewer {
    /// The estimated probability that its verdict is the true one.
    pub fn reliability(&self) -> f64 {
        (PRIOR_TRUE + float(self.expected_true)) / (PRIOR_TRUE + PRIOR_FALSE + self.items as f64)
    }

    /// The reliability's standard error, as a Beta posterior's.
    pub fn standard_error(&self) -> f64 {
        let p = self.reliability();
        (p * (1.0 - p) / (PRIOR_TRUE + PRIOR_FALSE + self.items as f64 + 1.0)).sqrt()
    }

    /// The share of its shared items where it sided with the others' weighted majority; `None`
    /// before it shares one.
    pub fn agreement(&self) -> Option<f64> {
        (self.shared > 0).then(|| float(self.agreed) / self.shared as f64)
    }

    /// The share of its verdicts that are pass; `None` before it has one.
    pub fn pass_rate(&self) -> Option<f64> {
        (self.items > 0).then(|| self.passes as f64 / self.items as f64)
    }

    /// Its reliability clipped for the posterior.
    fn clipped(&self) -> f64 {
        self.reliability().clamp(CLIP, 1.0 - CLIP)
    }
}

/// A project's reviewers and the items their verdicts are on, at most `max_items` items (the
/// oldest forgotten first, its verdicts taken back from its reviewers' sums).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reviewers {
    items: IdMap<ProjectKey, Item>,
    arrival: BTreeMap<u64, ProjectKey>,
    refreshes: BTreeMap<u64, ProjectKey>,
    reviewers: BTreeMap<ProjectKey, Reviewer>,
    /// Σ of the held items' posteriors, fixed point.
    posteriors: i64,
    next: u64,
    /// Items forgotten to stay within the bound.
    pub forgotten: u64,
}

impl Reviewers {
    /// A vote batch's verdicts on `item` at `at`, each replacing any earlier one of the same
    /// reviewer on it (of one reviewer in the batch, the last counts), within `limits`. Returns
    /// the reviewers whose figures changed, in order.
    pub fn add(
        &mut self,
        (item, verdicts): (&str, &[Verdict]),
        at: EventTime,
        limits: ReviewerLimits,
    ) -> Vec<ProjectKey> {
        let mut changed = Vec::new();
        if verdicts.is_empty() {
            return changed;
        }
        if !self.items.contains_key(item) {
            while self.items.len() >= limits.max_items.max(1) {
                let Some((_, oldest)) = self.arrival.pop_first() else {
                    break;
                };
                self.forget(&oldest, &mut changed);
                self.forgotten += 1;
            }
            let added = self.next;
            self.next += 1;
            let posterior = self.class_prior();
            self.arrival.insert(added, item.into());
            self.refreshes.insert(added, item.into());
            self.posteriors += fixed(posterior);
            let fresh = Item {
                verdicts: Vec::new(),
                posterior,
                refreshed: added,
                added,
            };
            self.items.insert(item.into(), fresh);
        }
        self.take_back(item);
        if let Some(it) = self.items.get_mut(item) {
            for verdict in verdicts {
                let at = it
                    .verdicts
                    .binary_search_by(|v| v.reviewer.as_str().cmp(verdict.reviewer.as_str()));
                match at {
                    Ok(i) => it.verdicts[i] = verdict.clone(),
                    Err(i) if it.verdicts.len() < limits.max_verdicts => {
                        it.verdicts.insert(i, verdict.clone());
                    }
                    Err(_) => {}
                }
            }
        }
        self.give(item, &mut changed);
        for verdict in verdicts {
            // A reviewer whose verdict was left out has no figures to date.
            if let Some(r) = self.reviewers.get_mut(&verdict.reviewer) {
                r.last_event_at = r.last_event_at.max(Some(at));
            }
        }
        let sweep: Vec<ProjectKey> = self
            .refreshes
            .values()
            .filter(|k| k.as_str() != item)
            .take(SWEEP)
            .cloned()
            .collect();
        for other in sweep {
            self.take_back(&other);
            self.give(&other, &mut changed);
        }
        changed.sort();
        changed.dedup();
        changed
    }

    /// The reviewers, by id.
    pub fn reviewers(&self) -> &BTreeMap<ProjectKey, Reviewer> {
        &self.reviewers
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The estimated share of items whose true verdict is pass.
    pub fn class_prior(&self) -> f64 {
        (1.0 + float(self.posteriors)) / (2.0 + self.items.len() as f64)
    }

    /// The posterior of `item` being a pass, as of its last refresh.
    pub fn posterior(&self, item: &str) -> Option<f64> {
        self.items.get(item).map(|i| i.posterior)
    }

    /// Takes what `item`'s verdicts gave its reviewers' sums (and its posterior the class's).
    fn take_back(&mut self, item: &str) {
        let Some(it) = self.items.get(item) else {
            return;
        };
        self.posteriors -= fixed(it.posterior);
        for (v, agreed) in it.verdicts.iter().zip(majorities(&it.verdicts)) {
            let Some(r) = self.reviewers.get_mut(&v.reviewer) else {
                continue;
            };
            r.items -= 1;
            r.passes -= u64::from(v.pass);
            r.expected_true -= fixed(truth(it.posterior, v.pass));
            if let Some(a) = agreed {
                r.shared -= 1;
                r.agreed -= fixed(a);
            }
        }
    }

    /// Recomputes `item`'s posterior from its reviewers' reliabilities as they are (and the
    /// class prior of the other items), and adds what its verdicts give their sums. Marks it
    /// the most recently refreshed. Called right after [`Reviewers::take_back`] of `item`.
    fn give(&mut self, item: &str, changed: &mut Vec<ProjectKey>) {
        let others = self.items.len().saturating_sub(1) as f64;
        let prior = (1.0 + float(self.posteriors)) / (2.0 + others);
        let Some(it) = self.items.get_mut(item) else {
            return;
        };
        let logit = |p: f64| (p / (1.0 - p)).ln();
        let mut odds = logit(prior.clamp(CLIP, 1.0 - CLIP));
        for v in &it.verdicts {
            let p = self
                .reviewers
                .get(&v.reviewer)
                .map_or_else(|| Reviewer::default().clipped(), Reviewer::clipped);
            odds += if v.pass { logit(p) } else { -logit(p) };
        }
        it.posterior = 1.0 / (1.0 + (-odds).exp());
        self.refreshes.remove(&it.refreshed);
        it.refreshed = self.next;
        self.next += 1;
        self.refreshes.insert(it.refreshed, item.into());
        self.posteriors += fixed(it.posterior);
        for (v, agreed) in it.verdicts.iter().zip(majorities(&it.verdicts)) {
            let r = self.reviewers.entry(v.reviewer.clone()).or_default();
            r.items += 1;
            r.passes += u64::from(v.pass);
            r.expected_true += fixed(truth(it.posterior, v.pass));
            if let Some(a) = agreed {
                r.shared += 1;
                r.agreed += fixed(a);
            }
            changed.push(v.reviewer.clone());
        }
    }

    /// Forgets `item`: its verdicts leave their reviewers' sums, and a reviewer left with no
    /// item is forgotten too.
    fn forget(&mut self, item: &str, changed: &mut Vec<ProjectKey>) {
        self.take_back(item);
        if let Some(it) = self.items.remove(item) {
            self.refreshes.remove(&it.refreshed);
            self.arrival.remove(&it.added);
            for v in it.verdicts {
                if self
                    .reviewers
                    .get(&v.reviewer)
                    .is_some_and(|r| r.items == 0)
                {
                    self.reviewers.remove(&v.reviewer);
                }
                changed.push(v.reviewer);
            }
        }
    }
}

/// P(a verdict of `pass` is the true one) for an item whose posterior of being a pass is `q`.
fn truth(q: f64, pass: bool) -> f64 {
    if pass { q } else { 1.0 - q }
}

/// For each verdict, whether it sides with the weighted majority of the item's other verdicts
/// (1), against it (0) or the others are tied (½); `None` when it is the item's only verdict.
fn majorities(verdicts: &[Verdict]) -> impl Iterator<Item = Option<f64>> + '_ {
    let signed = |v: &Verdict| if v.pass { v.weight } else { -v.weight };
    let total: f64 = verdicts.iter().map(signed).sum();
    let alone = verdicts.len() < 2;
    verdicts.iter().map(move |v| {
        if alone {
            return None;
        }
        let others = total - signed(v);
        let side = if v.pass { others } else { -others };
        Some(if side.abs() < 1e-12 {
            0.5
        } else if side > 0.0 {
            1.0
        } else {
            0.0
        })
    })
}

#[cfg(test)]
mod tests;
