//! Reviewer reliability: how far each human reviewer's pass/fail verdicts can be trusted,
//! learned from how reviewers agree on the same items, without gold answers: the two-coin
//! Dawid-Skene model, fitted in batch over the verdicts held (docs/reviewers.md has the model
//! with a worked example).
//!
//! The model. An item's true verdict is pass with probability `π`; reviewer `j` says pass on a
//! pass with probability `a_j` (its sensitivity) and fail on a fail with probability `b_j` (its
//! specificity). Given the coins, an item's posterior odds of being a pass are
//!
//! ```text
//! logit q_i = logit π + Σ_{j said pass} ln(a_j / (1 − b_j)) + Σ_{j said fail} ln((1 − a_j) / b_j)
//! ```
//!
//! and given every item's posterior, each coin is the expected share of the reviewer's verdicts
//! on items of its class that are right, under a Beta(`PRIOR_TRUE`, `PRIOR_FALSE`) prior, and
//! `π` the mean posterior under a Beta(1, 1) one:
//!
//! ```text
//! a_j = (PRIOR_TRUE + Σ_{i: j said pass} q_i) / (PRIOR_TRUE + PRIOR_FALSE + Σ_{i of j} q_i)
//! b_j = (PRIOR_TRUE + Σ_{i: j said fail} (1 − q_i)) / (PRIOR_TRUE + PRIOR_FALSE + Σ_{i of j} (1 − q_i))
//! π   = (1 + Σ_i q_i) / (2 + items)
//! ```
//!
//! A reviewer's reliability is its expected share of true verdicts under the same prior. [`fit`]
//! alternates the two steps over every held item (EM, as crowd-kit's `DawidSkene` does, with the
//! prior) from where the evidence points: each item's posterior starts at the weighted share of
//! its verdicts that say pass. Its sums are fixed point and each item's verdicts are kept in
//! reviewer order, so the fit is a function of the verdicts held, not of the order they arrived
//! in, to the last bit.
//!
//! What is state is only the facts: each item's verdicts (in its entry of the project's item
//! store, a [`Review`]), each reviewer's active findings ([`Findings`], the hysteresis of its
//! alerts) and the count of verdicts left out ([`Reviewers`]). The figures are derived: a fit
//! reads the project's held items where it is needed, when a record is published and at the
//! checkpoints of [`Reviewers::checkpoint_due`] that the alerts and the learned weights follow,
//! which are drawn from the items. So adding a verdict touches no reviewer's entry, however many
//! reviewers a project has, and forgetting an item touches nothing of its project. A
//! checkpoint's fit reads each item once after it changes, not at every checkpoint while it is
//! held: the project's places keep its pattern's tag in a [`Book`] of the project's patterns.
//!
//! The prior is as if every reviewer had begun with two true verdicts and one false: it keeps a
//! reviewer with few items near "probably careful" instead of at 0 or 1, and, with the start
//! from the majority, it tells the model which of its two mirror-image solutions (everyone
//! right, or everyone wrong) is meant.

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::bounded::UNREAD;
use crate::engine::contract::time::EventTime;
use crate::engine::ids::{IdMap, ProjectKey};
use crate::engine::settings;

/// A reviewer of a project: `(project, reviewer)`.
pub type ProjectReviewer = (ProjectKey, ProjectKey);

/// Pseudo-verdicts of the prior on a reliability: true ones and false ones.
pub const PRIOR_TRUE: f64 = 2.0;
pub const PRIOR_FALSE: f64 = 1.0;

/// Reliabilities are kept within `[CLIP, 1 - CLIP]` in the posterior, so that no single
/// reviewer's verdict makes an item certain.
pub const CLIP: f64 = 1e-3;

/// The fit stops once no reliability moved by more than this in an iteration...
pub const TOLERANCE: f64 = 1e-10;
/// ... or after this many iterations, which bounds a fit's cost per held verdict.
pub const MAX_ITERATIONS: usize = 200;

/// The scale of the fixed-point sums: 2^-32 of a verdict.
const ONE: f64 = 4_294_967_296.0;

fn fixed(x: f64) -> i64 {
    (x * ONE).round() as i64
}

fn float(x: i64) -> f64 {
    x as f64 / ONE
}

/// What a vote may add to a project's reviewer model. (How many reviewers a fit reads,
/// `reviewers.max_reviewers`, is the fit's own argument: see [`fit`].)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReviewerLimits {
    /// Reviewers' verdicts one item keeps; a new reviewer's verdict on an item that has them
    /// all is left out (its earlier reviewers can still change theirs).
    pub max_verdicts: usize,
    /// Shared items a reviewer needs before its findings and learned weight count.
    pub min_items: u64,
}

/// One reviewer's verdict on an item. Written as `[reviewer, pass, weight, at]`, the most
/// numerous record of the changelog's items; read in that form or as an object (as written
/// before).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Verdict {
    pub reviewer: ProjectKey,
    pub pass: bool,
    /// The vote's weight (its reputation), for the majority of the others and the fit's start.
    pub weight: f64,
    /// The event time of its batch.
    pub at: EventTime,
}

/// An item's verdicts, in reviewer order: held in the item itself up to two (most items have
/// one batch of a few votes), so that adding and forgetting an item touch no memory of their
/// own and a forgotten item's room is taken again at once.
pub type Verdicts = SmallVec<[Verdict; 2]>;

/// The step judge scores are counted in ([`Review::judge`]): 2⁻²⁰, about a millionth. A sum of
/// such steps below 2³² (an item's count of scores is a `u32`) needs at most 52 bits, so every
/// partial sum is exact in an `f64`.
pub const JUDGED_STEP: f64 = 1.0 / (1u64 << 20) as f64;

/// An item's verdicts, in reviewer order, and the judges' scores paired with it: what the model
/// keeps of an item, in its entry of the item store. (A changelog written before the figures
/// were derived also holds a posterior and a refresh place here; they are not read.) Written
/// as `[verdicts]`, or `[verdicts, judged]` once a judge score is paired, each verdict without
/// its time when that is the verdict's before it (see `WrittenVerdicts`); read back from that
/// or from the object written before.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "StoredReview")]
pub struct Review {
    pub verdicts: Verdicts,
    /// Σ and number of the judge scores paired with the item (judge quality), each counted in
    /// steps of [`JUDGED_STEP`]: the judges' verdict is pass when their mean is at least ½.
    pub judged: Option<(f64, u32)>,
}

impl Serialize for Review {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.written(None).serialize(s)
    }
}

impl Review {
    /// The review as written inside an item whose verdicts' first time is `first` (the item's
    /// `ready_at`: the verdicts of the batch that made it ready), which is then left out.
    pub fn written(&self, first: Option<EventTime>) -> WrittenReview<'_> {
        WrittenReview(self, first)
    }
}

/// See [`Review::written`].
pub struct WrittenReview<'a>(&'a Review, Option<EventTime>);

impl Serialize for WrittenReview<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let WrittenReview(review, first) = *self;
        let verdicts = WrittenVerdicts(&review.verdicts, first);
        match review.judged {
            Some(judged) => (verdicts, judged).serialize(s),
            None => [verdicts].serialize(s),
        }
    }
}

/// An item's verdicts as written: `[reviewer, pass, weight, at]`, or `[reviewer, pass,
/// weight]` when `at` is the verdict's before it (the first's: the time given, if any). Items
/// are most of the changelog, and the verdicts of one batch share their time.
struct WrittenVerdicts<'a>(&'a [Verdict], Option<EventTime>);

/// One verdict of [`WrittenVerdicts`]: with its time or without.
struct WrittenVerdict<'a>(&'a Verdict, bool);

impl Serialize for WrittenVerdicts<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let before = std::iter::once(self.1).chain(self.0.iter().map(|v| Some(v.at)));
        s.collect_seq(
            self.0
                .iter()
                .zip(before)
                .map(|(v, before)| WrittenVerdict(v, before != Some(v.at))),
        )
    }
}

impl Serialize for WrittenVerdict<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let WrittenVerdict(v, timed) = *self;
        if timed {
            (&v.reviewer, v.pass, v.weight, v.at).serialize(s)
        } else {
            (&v.reviewer, v.pass, v.weight).serialize(s)
        }
    }
}

/// A [`Review`] as read: its verdicts' times may be left out (see `WrittenVerdicts`).
#[derive(Deserialize, Default)]
pub struct StoredReview {
    #[serde(default)]
    verdicts: Vec<StoredVerdict>,
    #[serde(default)]
    judged: Option<(f64, u32)>,
}

/// A verdict as read, `[reviewer, pass, weight]` or `[reviewer, pass, weight, at]` (or the
/// object written before).
#[derive(Deserialize)]
struct StoredVerdict {
    reviewer: ProjectKey,
    pass: bool,
    weight: f64,
    #[serde(default)]
    at: Option<EventTime>,
}

impl TryFrom<StoredReview> for Review {
    type Error = &'static str;

    fn try_from(stored: StoredReview) -> Result<Self, Self::Error> {
        stored.review(None)
    }
}

impl StoredReview {
    /// The review read, its first verdict at `first` if its time was left out.
    pub fn review(self, first: Option<EventTime>) -> Result<Review, &'static str> {
        let mut before = first;
        let mut verdicts = Verdicts::with_capacity(self.verdicts.len());
        for v in self.verdicts {
            let at =
                v.at.or(before)
                    .ok_or("an item's first verdict has no time")?;
            before = Some(at);
            verdicts.push(Verdict {
                reviewer: v.reviewer,
                pass: v.pass,
                weight: v.weight,
                at,
            });
        }
        Ok(Review {
            verdicts,
            judged: self.judged,
        })
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

    /// Pairs a judge score `s` with the item. The score is counted in steps of
    /// [`JUDGED_STEP`], so that the sum is exact and so the same whatever order the scores
    /// come in: sessions complete in an order no producer decides, and a mean of ½ summed in
    /// floating point one way and then another can fall on either side of it (⁰⁄₉, ³⁄₉, ⁶⁄₉
    /// and ⁹⁄₉ do).
    pub fn judge(&mut self, s: f64) {
        let (sum, n) = self.judged.unwrap_or_default();
        let counted = (s / JUDGED_STEP).round() * JUDGED_STEP;
        self.judged = Some((sum + counted, n.saturating_add(1)));
    }
}

/// A reviewer's findings, each active from when it becomes true until it no longer is (the
/// audit's hysteresis): an alert is raised when one becomes true. The only part of a reviewer
/// that is state of its own: the changelog's reviewer record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Findings {
    #[serde(default)]
    pub unreliable: bool,
    #[serde(default)]
    pub adversarial: bool,
    #[serde(default)]
    pub straight_lining: bool,
}

impl Findings {
    pub fn any(&self) -> bool {
        self.unreliable || self.adversarial || self.straight_lining
    }
}

/// A reviewer's changelog record: its findings. (Written before the figures were derived, it
/// also held a last event time, which is now read from the verdicts.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    #[serde(default)]
    pub findings: Findings,
}

/// What one reviewer's verdicts on the held items say, as [`fit`] finds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Held items with its verdict.
    pub verdicts: u64,
    /// Of those, the ones it passed.
    pub passes: u64,
    /// Held items with its verdict and at least one other reviewer's.
    pub shared: u64,
    /// Σ P(its verdict is the true one) over its items.
    pub expected_true: f64,
    /// Its sensitivity and specificity.
    pub coins: Coins,
    /// Σ over its shared items of 1 where its verdict is the weighted majority of the others',
    /// ½ where they are tied.
    pub agreed: f64,
    /// Σ over its shared items of 1 where the others' weighted majority is pass, ½ where tied:
    /// whether the crowd's verdicts on its items are mixed.
    pub crowd_passes: f64,
    /// Its items with a judges' verdict, and of those the ones it agrees with.
    pub judged: u64,
    pub judge_agreed: u64,
    /// The latest event time of its held verdicts.
    pub last_event_at: Option<EventTime>,
}

impl Figures {
    /// The estimated probability that its verdict is the true one.
    pub fn reliability(&self) -> f64 {
        (PRIOR_TRUE + self.expected_true) / (PRIOR_TRUE + PRIOR_FALSE + self.verdicts as f64)
    }

    /// The reliability's standard error, as a Beta posterior's.
    pub fn standard_error(&self) -> f64 {
        let p = self.reliability();
        (p * (1.0 - p) / (PRIOR_TRUE + PRIOR_FALSE + self.verdicts as f64 + 1.0)).sqrt()
    }

    /// The share of its shared items where it sided with the others' weighted majority; `None`
    /// before it shares one.
    pub fn agreement(&self) -> Option<f64> {
        (self.shared > 0).then(|| self.agreed / self.shared as f64)
    }

    /// The share of its shared items where the others' weighted majority is pass; `None` before
    /// it shares one.
    pub fn crowd_pass_rate(&self) -> Option<f64> {
        (self.shared > 0).then(|| self.crowd_passes / self.shared as f64)
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

    /// Its weight for `scoring.reputation_source = "learned"` on a verdict of `pass` (or
    /// fail): the log-likelihood ratio that verdict carries for itself, clipped at 0. For a
    /// reviewer whose two coins are one, `p`, it is the log-odds of `p`; a straight-liner's
    /// verdict carries nothing (it says pass whatever the truth) and weighs 0.
    pub fn learned_weight(&self, pass: bool) -> f64 {
        let (for_pass, for_fail) = self.coins.log_ratios();
        if pass { for_pass } else { -for_fail }.max(0.0)
    }

    /// Its learned weights on a pass and on a fail, once it shares `min_items` items with
    /// other reviewers; `None` while they are withheld: fewer shared items are too little
    /// evidence for a weight, and its votes keep the table's.
    pub fn learned_weights(&self, min_items: u64) -> Option<LearnedWeights> {
        (self.shared >= min_items).then(|| LearnedWeights {
            pass: self.learned_weight(true),
            fail: self.learned_weight(false),
        })
    }
}

/// A reviewer's learned weights on each verdict (see [`Figures::learned_weights`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LearnedWeights {
    pub pass: f64,
    pub fail: f64,
}

/// A fit of a project's held verdicts: every reviewer's figures, by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fit {
    pub reviewers: BTreeMap<ProjectKey, Figures>,
    /// The estimated share of items whose true verdict is pass.
    pub class_prior: f64,
    /// Items with verdicts.
    pub items: usize,
    /// EM iterations run (at most [`MAX_ITERATIONS`]).
    pub iterations: usize,
    /// Verdicts of the reviewers beyond `reviewers.max_reviewers`, left out of the fit.
    pub left_out: u64,
}

/// The figures of a checkpoint's fit, by reviewer id: what the learned weights and the metrics
/// follow until the next checkpoint. Kept in every project, so in a sorted vector rather than the
/// fit's B-tree, whose node has room for eleven reviewers where most projects have a few.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checkpoint(Vec<(ProjectKey, Figures)>);

impl From<Fit> for Checkpoint {
    fn from(fit: Fit) -> Self {
        Checkpoint(fit.reviewers.into_iter().collect())
    }
}

impl Checkpoint {
    /// A reviewer's figures.
    pub fn get(&self, reviewer: &str) -> Option<&Figures> {
        let at = self
            .0
            .binary_search_by(|(id, _)| id.as_str().cmp(reviewer))
            .ok()?;
        Some(&self.0[at].1)
    }

    /// The `n` least reliable reviewers with at least `min_items` shared items, least
    /// reliable first (ties by id).
    pub fn least_reliable(&self, min_items: u64, n: usize) -> Vec<(&str, f64)> {
        let mut held: Vec<(&str, f64)> = self
            .0
            .iter()
            .filter(|(_, r)| r.shared >= min_items)
            .map(|(k, r)| (k.as_str(), r.reliability()))
            .collect();
        held.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
        held.truncate(n);
        held
    }
}

/// What one held item says of its reviewers: all that a fit and the figures read of it. Its
/// verdicts in reviewer order, each with its weight (which give its start, the weighted share of
/// its verdicts that say pass, and the side the others' weighted majority takes on each), and
/// the judges' verdict. Items alike have the same posterior at every iteration of the EM and
/// add the same to every count, so a [`fit`] counts how many items have each pattern: with a
/// few reviewers per project most items are alike, and the EM iterates over those counts
/// instead of every item.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    /// Each verdict's reviewer (its slot in the fit), pass and the bits of its weight, in
    /// reviewer order: the weights give the start and the others' majorities.
    verdicts: SmallVec<[(u32, bool, u64); 2]>,
    /// The judges' verdict, once a judge score is paired with the item.
    judges: Option<bool>,
}

impl Pattern {
    /// The pattern of `review`, each verdict's reviewer numbered by `number` (`None` if it
    /// has no number).
    fn of<'r>(
        review: &'r Review,
        mut number: impl FnMut(&'r Verdict) -> Option<u32>,
    ) -> Option<Pattern> {
        let verdicts = review
            .verdicts
            .iter()
            .map(|v| Some((number(v)?, v.pass, v.weight.to_bits())))
            .collect::<Option<_>>()?;
        Some(Pattern {
            verdicts,
            judges: review.judges_pass(),
        })
    }

    /// Each verdict's slot and pass.
    fn said(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.verdicts
            .iter()
            .map(|&(slot, pass, _)| (slot as usize, pass))
    }

    /// Each verdict's pass and weight.
    fn weighed(&self) -> impl Iterator<Item = (bool, f64)> + Clone + '_ {
        self.verdicts
            .iter()
            .map(|&(_, pass, weight)| (pass, f64::from_bits(weight)))
    }
}

/// The side the weighted majority of an item's other verdicts takes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    /// No other verdict.
    Alone,
    Fail,
    Tied,
    Pass,
}

impl Side {
    /// 1 for pass, 0 for fail, ½ when tied; `None` with no other verdict.
    fn others_pass(self) -> Option<f64> {
        match self {
            Side::Alone => None,
            Side::Fail => Some(0.0),
            Side::Tied => Some(0.5),
            Side::Pass => Some(1.0),
        }
    }
}

/// How many held items have each [`Pattern`]: the multiset a fit reads.
type Patterns = IdMap<Pattern, u64>;

/// Fits the model to `reviews` (the items of one project, in any order), with each reviewer's
/// latest event time: the fit a release publishes (a checkpoint fits the same from its tags,
/// [`Book::fit`]). At most
/// `max_reviewers` reviewers are fitted, those with the most verdicts (ties by id); the others'
/// verdicts are left out of it, as if the items did not hold them (counted in
/// [`Fit::left_out`]). Which reviewers are fitted is a function of the verdicts held, not of
/// the order they came in.
///
/// One pass over the items counts their patterns, each reviewer numbered as met: the items lie
/// wherever their task holds them, so each is read once, all of it at once. A number is only
/// where a reviewer's sums are kept (`fit_patterns` gives the same figures however the
/// reviewers are numbered), so the patterns are renumbered only when reviewers are left out,
/// pattern by pattern. `O(verdicts)` to count the patterns, then `O(patterns × iterations)`:
/// items alike (most, with a few reviewers per project) are fitted once, with their count.
pub fn fit<'a>(reviews: impl Iterator<Item = &'a Review>, max_reviewers: usize) -> Fit {
    // Each reviewer as met: its id, its count of verdicts and its latest.
    let mut numbers: IdMap<&str, u32> = IdMap::default();
    let mut met: Vec<Met> = Vec::new();
    let mut patterns = Patterns::default();
    for review in reviews.filter(|r| !r.verdicts.is_empty()) {
        let pattern = Pattern::of(review, |v| {
            let id = v.reviewer.as_str();
            let n = *numbers.entry(id).or_insert_with(|| {
                met.push((id, 0, Some(v.at)));
                (met.len() - 1) as u32
            });
            let (_, count, latest) = &mut met[n as usize];
            *count += 1;
            *latest = (*latest).max(Some(v.at));
            Some(n)
        });
        if let Some(pattern) = pattern {
            *patterns.entry(pattern).or_default() += 1;
        }
    }
    fit_counted(&met, patterns, max_reviewers)
}

/// A reviewer of a fit: its id, its count of verdicts and its latest verdict's time, where
/// known.
type Met<'a> = (&'a str, u64, Option<EventTime>);

/// Fits `patterns`, whose reviewers are numbered by their place in `met`: the `max_reviewers`
/// with the most verdicts (ties by id) of those with any, the others' verdicts left out of
/// the patterns (and counted in [`Fit::left_out`]).
fn fit_counted(met: &[Met], mut patterns: Patterns, max_reviewers: usize) -> Fit {
    let mut kept: Vec<usize> = (0..met.len()).filter(|&n| met[n].1 > 0).collect();
    let mut left_out = 0;
    if kept.len() > max_reviewers {
        kept.sort_unstable_by(|&a, &b| met[b].1.cmp(&met[a].1).then(met[a].0.cmp(met[b].0)));
        left_out = kept.iter().skip(max_reviewers).map(|&n| met[n].1).sum();
        kept.truncate(max_reviewers);
    }
    if kept.len() < met.len() {
        patterns = leave_out(patterns, &kept, met.len());
    }
    let ids: Vec<ProjectKey> = kept.iter().map(|&n| met[n].0.into()).collect();
    let mut fitted = fit_patterns(&patterns, &ids);
    fitted.left_out = left_out;
    for &n in &kept {
        let (id, _, latest) = met[n];
        if let Some(f) = fitted.reviewers.get_mut(id) {
            f.last_event_at = latest;
        }
    }
    fitted
}

/// The patterns of a project's items, each under a tag that the project keeps beside the
/// item's place ([`Held`](super::bounded::Held)): what a checkpoint's fit counts
/// ([`Book::fit`]), reading its project's places in order instead of every held item
/// wherever its task holds it, out of the caches. Derived, not state: a place whose item's
/// review changed (or was restored) is untagged, and the next fit reads the item and tags it.
///
/// Tags are only ever added, so a tag a place keeps stays right while the book grows; it is
/// rebuilt from the tags in use ([`Book::compact`]) once it holds over twice as many patterns
/// as its project holds places, and a few, which bounds it by the items held.
///
/// Each reviewer and pattern is held once, in order of number; a table of numbers finds one
/// by its hash, as [`Items`](super::bounded::Items) finds its keys.
#[derive(Debug, Clone, Default)]
pub struct Book {
    /// Reviewers by number, and their numbers by the hash of the id.
    reviewers: Vec<ProjectKey>,
    numbers: HashTable<u32>,
    /// Patterns by tag (their verdicts name reviewers by number), and their tags by the hash
    /// of the pattern.
    patterns: Vec<Pattern>,
    tags: HashTable<u32>,
    /// Seeded per process, as [`IdMap`]'s: crafted ids cannot force collisions.
    hasher: foldhash::fast::RandomState,
}

impl Book {
    /// The tag of `review`'s pattern, added if new.
    pub fn tag(&mut self, review: &Review) -> u32 {
        let pattern = Pattern::of(review, |v| Some(self.number(&v.reviewer)))
            .expect("every verdict is given a number");
        self.add(pattern)
    }

    /// Whether `tag` is `review`'s pattern (for tests of the invariants).
    pub fn tags(&self, tag: u32, review: &Review) -> bool {
        let pattern = Pattern::of(review, |v| self.find(&v.reviewer));
        pattern.is_some_and(|p| self.patterns.get(tag as usize) == Some(&p))
    }

    /// Patterns held, in use or not.
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Rebuilds the book from the patterns of `tags` (every tag its project's places hold),
    /// which take their new tags: what the places no longer name is forgotten.
    pub fn compact<'t>(&mut self, tags: impl Iterator<Item = &'t mut u32>) {
        let old = std::mem::take(self);
        let mut renamed = vec![UNREAD; old.patterns.len()];
        for tag in tags {
            let Some(pattern) = old.patterns.get(*tag as usize) else {
                continue;
            };
            let new = &mut renamed[*tag as usize];
            if *new == UNREAD {
                let mut verdicts = SmallVec::with_capacity(pattern.verdicts.len());
                for &(n, pass, weight) in &pattern.verdicts {
                    verdicts.push((self.number(&old.reviewers[n as usize]), pass, weight));
                }
                let judges = pattern.judges;
                *new = self.add(Pattern { verdicts, judges });
            }
            *tag = *new;
        }
    }

    /// Fits the model to the items whose patterns' tags are counted in `counts` (by tag), as
    /// [`fit`] fits the same items, without the reviewers' latest times (which only the items
    /// hold).
    pub fn fit(&self, counts: &[u64], max_reviewers: usize) -> Fit {
        let mut met: Vec<Met> = self
            .reviewers
            .iter()
            .map(|r| (r.as_str(), 0, None))
            .collect();
        let mut patterns = Patterns::default();
        let counted = self.patterns.iter().zip(counts);
        for (pattern, &n) in counted.filter(|(p, n)| **n > 0 && !p.verdicts.is_empty()) {
            for &(r, _, _) in &pattern.verdicts {
                met[r as usize].1 += n;
            }
            patterns.insert(pattern.clone(), n);
        }
        fit_counted(&met, patterns, max_reviewers)
    }

    /// The number of `reviewer`, if it has one.
    fn find(&self, reviewer: &ProjectKey) -> Option<u32> {
        let hash = self.hasher.hash_one(reviewer.as_str());
        let reviewers = &self.reviewers;
        self.numbers
            .find(hash, |&n| reviewers[n as usize] == *reviewer)
            .copied()
    }

    /// The number of `reviewer`, added if new.
    fn number(&mut self, reviewer: &ProjectKey) -> u32 {
        if let Some(n) = self.find(reviewer) {
            return n;
        }
        let Book {
            reviewers,
            numbers,
            hasher,
            ..
        } = self;
        let n = reviewers.len() as u32;
        reviewers.push(reviewer.clone());
        let rehash = |&n: &u32| hasher.hash_one(reviewers[n as usize].as_str());
        numbers.insert_unique(hasher.hash_one(reviewer.as_str()), n, rehash);
        n
    }

    /// The tag of `pattern`, added if new.
    fn add(&mut self, pattern: Pattern) -> u32 {
        let Book {
            patterns,
            tags,
            hasher,
            ..
        } = self;
        let hash = hasher.hash_one(&pattern);
        if let Some(&tag) = tags.find(hash, |&t| patterns[t as usize] == pattern) {
            return tag;
        }
        let tag = patterns.len() as u32;
        patterns.push(pattern);
        let rehash = |&t: &u32| hasher.hash_one(&patterns[t as usize]);
        tags.insert_unique(hash, tag, rehash);
        tag
    }
}

/// `patterns`, whose reviewers are numbered as met (`met` of them), with only the reviewers of
/// `kept`, numbered by their place in it: the others' verdicts taken out of every pattern, and
/// the patterns left with none dropped. Patterns that become alike are counted together.
fn leave_out(patterns: Patterns, kept: &[usize], met: usize) -> Patterns {
    let mut slots = vec![u32::MAX; met];
    for (slot, &n) in kept.iter().enumerate() {
        slots[n] = slot as u32;
    }
    let mut left = Patterns::default();
    for (pattern, count) in patterns {
        let verdicts: SmallVec<[(u32, bool, u64); 2]> = pattern
            .verdicts
            .iter()
            .filter_map(|&(n, pass, weight)| {
                let slot = slots[n as usize];
                (slot != u32::MAX).then_some((slot, pass, weight))
            })
            .collect();
        if !verdicts.is_empty() {
            let judges = pattern.judges;
            *left.entry(Pattern { verdicts, judges }).or_default() += count;
        }
    }
    left
}

/// Fits the model to the items of `patterns`, whose reviewers are `ids` by slot: EM
/// from each item's weighted share of pass verdicts, until no reliability moves by more than
/// [`TOLERANCE`] or [`MAX_ITERATIONS`]. `O(verdicts)` per iteration, of patterns: items alike
/// are fitted once, with their count. The sums are integers, so counting an item `n` times is
/// exactly adding it `n` times.
///
/// The result is the same to the last bit whatever the order the patterns are read in and
/// however the reviewers are numbered: a slot is only where a reviewer's sums are kept, the sums
/// are fixed point, each pattern's verdicts are in reviewer order, and the figures are counts
/// and sums of halves.
fn fit_patterns(patterns: &Patterns, ids: &[ProjectKey]) -> Fit {
    let slots = ids.len();
    let mut figures = vec![Figures::default(); slots];
    let mut kinds: Vec<Kind> = Vec::with_capacity(patterns.len());
    let mut items = 0;
    for (pattern, &n) in patterns {
        let weighed = pattern.weighed();
        for ((j, pass), side) in pattern.said().zip(majorities(weighed.clone())) {
            count(&mut figures[j], (pass, side, pattern.judges), n);
        }
        items += n;
        kinds.push(Kind {
            pattern,
            count: i64::try_from(n).unwrap_or(i64::MAX),
            q: pass_share(weighed),
        });
    }
    let mut coins = vec![Coins::default(); slots];
    let mut sums = vec![Sums::default(); slots];
    let mut ratios: Vec<(f64, f64)> = Vec::with_capacity(slots);
    let mut iterations = 0;
    let prior = loop {
        // M-step, in fixed point so that the sums do not depend on the items' order.
        sums.fill(Sums::default());
        let mut posteriors = 0i64;
        for kind in &kinds {
            let n = kind.count;
            let (pass, fail) = (n * fixed(kind.q), n * fixed(1.0 - kind.q));
            posteriors += pass;
            for (j, said_pass) in kind.pattern.said() {
                let s = &mut sums[j];
                s.passes += pass;
                if said_pass {
                    s.true_passes += pass;
                } else {
                    s.true_fails += fail;
                }
            }
        }
        let mut moved: f64 = 0.0;
        for ((c, s), f) in coins.iter_mut().zip(&sums).zip(figures.iter_mut()) {
            let new = s.coins(f.verdicts);
            moved = moved
                .max((new.sensitivity - c.sensitivity).abs())
                .max((new.specificity - c.specificity).abs());
            *c = new;
            f.expected_true = float(s.true_passes) + float(s.true_fails);
            f.coins = new;
        }
        let prior = (1.0 + float(posteriors)) / (2.0 + items as f64);
        iterations += 1;
        if moved <= TOLERANCE || iterations >= MAX_ITERATIONS {
            break prior;
        }
        // E-step: each verdict's log-likelihood ratio of pass against fail.
        let base = logit(prior.clamp(CLIP, 1.0 - CLIP));
        ratios.clear();
        ratios.extend(coins.iter().map(Coins::log_ratios));
        for kind in &mut kinds {
            let odds = kind.pattern.said().fold(base, |odds, (j, pass)| {
                odds + if pass { ratios[j].0 } else { ratios[j].1 }
            });
            kind.q = 1.0 / (1.0 + (-odds).exp());
        }
    };
    Fit {
        reviewers: ids.iter().cloned().zip(figures).collect(),
        class_prior: prior,
        items: usize::try_from(items).unwrap_or(usize::MAX),
        iterations,
        left_out: 0,
    }
}

/// Items of a fit alike: their pattern, how many there are and their posterior of being a
/// pass.
struct Kind<'a> {
    pattern: &'a Pattern,
    count: i64,
    q: f64,
}

fn logit(x: f64) -> f64 {
    (x / (1.0 - x)).ln()
}

/// A reviewer's two coins: the probability that it says pass when the truth is pass
/// (sensitivity) and fail when the truth is fail (specificity).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Coins {
    pub sensitivity: f64,
    pub specificity: f64,
}

impl Coins {
    /// The log-likelihood ratio of pass against fail that its pass verdict carries, and its
    /// fail verdict, with both coins clipped to `[CLIP, 1 - CLIP]`.
    pub fn log_ratios(&self) -> (f64, f64) {
        let (a, b) = (
            self.sensitivity.clamp(CLIP, 1.0 - CLIP),
            self.specificity.clamp(CLIP, 1.0 - CLIP),
        );
        ((a / (1.0 - b)).ln(), ((1.0 - a) / b).ln())
    }
}

/// One reviewer's sums of an M-step, fixed point: the items it voted on weighted by their
/// posterior of being a pass, and of those the passes it said pass to, and of the fails the
/// fails it said fail to.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    passes: i64,
    true_passes: i64,
    true_fails: i64,
}

impl Sums {
    /// The coins these sums give a reviewer of `verdicts` verdicts, each under the Beta(2, 1)
    /// prior.
    fn coins(&self, verdicts: u64) -> Coins {
        let passes = float(self.passes);
        let fails = verdicts as f64 - passes;
        let prior = PRIOR_TRUE + PRIOR_FALSE;
        Coins {
            sensitivity: (PRIOR_TRUE + float(self.true_passes)) / (prior + passes),
            specificity: (PRIOR_TRUE + float(self.true_fails)) / (prior + fails),
        }
    }
}

/// Adds what `n` items alike say of one of their reviewers, besides the EM's sums: its
/// verdict (`pass`), the side of the others' weighted majority and the judges' verdict.
fn count(f: &mut Figures, (pass, side, judges): (bool, Side, Option<bool>), n: u64) {
    f.verdicts += n;
    if pass {
        f.passes += n;
    }
    if let Some(others_pass) = side.others_pass() {
        f.shared += n;
        // Halves times a count below 2^53: exact, as adding them one by one is.
        let m = n as f64;
        f.crowd_passes += m * others_pass;
        f.agreed += m * if pass { others_pass } else { 1.0 - others_pass };
    }
    if let Some(judges) = judges {
        f.judged += n;
        if judges == pass {
            f.judge_agreed += n;
        }
    }
}

/// The weighted share of an item's verdicts (each its pass and weight) that say pass; ½ where
/// none has weight.
fn pass_share(verdicts: impl Iterator<Item = (bool, f64)>) -> f64 {
    let (pass, all) = verdicts.fold((0.0, 0.0), |(p, a), (said_pass, weight)| {
        let w = weight.max(0.0);
        (if said_pass { p + w } else { p }, a + w)
    });
    if all > 0.0 { pass / all } else { 0.5 }
}

/// For each of an item's verdicts (each its pass and weight), the side of the weighted majority
/// of the item's other verdicts.
fn majorities(verdicts: impl Iterator<Item = (bool, f64)> + Clone) -> impl Iterator<Item = Side> {
    let signed = |(pass, weight): (bool, f64)| if pass { weight } else { -weight };
    let total: f64 = verdicts.clone().map(signed).sum();
    let alone = verdicts.clone().nth(1).is_none();
    verdicts.map(move |v| {
        if alone {
            return Side::Alone;
        }
        let others = total - signed(v);
        if others.abs() < 1e-12 {
            Side::Tied
        } else if others > 0.0 {
            Side::Pass
        } else {
            Side::Fail
        }
    })
}

/// What adding verdicts to an item did to a project's reviewers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Added {
    /// Verdicts of reviewers new to the item (a replaced verdict is not one).
    pub admitted: u64,
    /// Whether the item's verdicts changed at all.
    pub changed: bool,
}

/// A project's reviewers: what of them is state (their findings, and the count of verdicts
/// left out) and the fit of the last checkpoint. What the verdicts say is derived: a [`fit`]
/// reads the project's held items where a record is published and at a checkpoint, so adding
/// and forgetting a verdict touches no reviewer, whichever reviewer gave it.
#[derive(Debug, Clone, Default)]
pub struct Reviewers {
    /// Reviewers with an active finding.
    findings: IdMap<ProjectKey, Findings>,
    /// Verdicts left out at the vote to stay within `reviewers.max_verdicts`.
    pub left_out: u64,
    /// The fit at the last checkpoint (or restore): derived, not state.
    checkpoint: Option<Checkpoint>,
    /// The patterns of the project's items, for the checkpoints' fits, once one ran: derived,
    /// not state (boxed: most of a project's memory stays in the cache lines its votes touch).
    book: Option<Box<Book>>,
    /// Reviewers fitted, and verdicts left out of the fit, by the project's last fit: derived,
    /// for the metrics.
    last_fit: (usize, u64),
    /// Whether the project waits for the next publication of its reviewers' records (see
    /// [`Reviewers::hold`]): the runtime's, not state.
    held_for_release: bool,
}

/// Two are equal when they hold the same findings and count: the fits are derived, and
/// whether the project waits for publication is the runtime's.
impl PartialEq for Reviewers {
    fn eq(&self, other: &Self) -> bool {
        self.findings == other.findings && self.left_out == other.left_out
    }
}

impl Reviewers {
    /// A vote batch's `verdicts` on an item held in the project's store (its `review`), each
    /// replacing any earlier one of the same reviewer on it (of one reviewer in the batch, the
    /// last counts), within `limits.max_verdicts`. A batch's verdicts are admitted in reviewer
    /// order, not in the order its votes are listed: where the bound leaves some out, which
    /// ones is a function of the batch, not of how a frontend happened to list its votes.
    /// `O(verdicts on the item)`: nothing of the project but its count left out is touched.
    pub fn add(
        &mut self,
        review: &mut Review,
        verdicts: Verdicts,
        limits: ReviewerLimits,
    ) -> Added {
        let mut added = Added::default();
        // Most items get all their verdicts in their first batch: room for exactly those (beyond
        // the two held inline), not the doubling growth's slack, in each of the task's many
        // items (later batches grow it by doubling, so a verdict stays O(1) amortised).
        if review.verdicts.is_empty() {
            review.verdicts.reserve_exact(verdicts.len());
        }
        let mut in_order = verdicts;
        // Stable: of one reviewer's verdicts in the batch, the last listed still counts.
        in_order.sort_by(|a, b| a.reviewer.as_str().cmp(b.reviewer.as_str()));
        for verdict in in_order {
            let at = review
                .verdicts
                .binary_search_by(|v| v.reviewer.as_str().cmp(verdict.reviewer.as_str()));
            match at {
                Ok(i) => {
                    added.changed |= review.verdicts[i] != verdict;
                    review.verdicts[i] = verdict;
                }
                Err(i) if review.verdicts.len() < limits.max_verdicts => {
                    review.verdicts.insert(i, verdict);
                    added.admitted += 1;
                    added.changed = true;
                }
                Err(_) => self.left_out += 1,
            }
        }
        added
    }

    /// Whether verdicts just admitted on an item marked `mark()` (a hash of its project and id,
    /// the same in every run) make a checkpoint, with `held` items held: one item in
    /// `max(2^⌊log2 held⌋ / 4, min_items)`, the items whose mark that divides; none before the
    /// project holds `min_items` items, as no reviewer can share `min_items` items before
    /// (`min_items` counts as at least 1 here, as in the findings), and the item is not hashed
    /// then: most of a small project's votes.
    ///
    /// A quarter of the items held makes the checkpoints' fits read `O(4)` held verdicts per
    /// verdict admitted on average, and bounds how far a large project's alerts and learned
    /// weights lag on average: the gap between two checkpoints is `n` such steps or more with
    /// probability about `e^-n`. The floor is for the many small projects whose items the
    /// task's bound keeps forgetting: their items held stay few while their verdicts keep
    /// coming, and a fit every few verdicts would cost more than everything else a vote does.
    ///
    /// Drawn from the item, not counted: a function of the item and the items held, both
    /// restored exactly, so that a restored project keeps the same checkpoints with no count
    /// of its own to write whenever an item is forgotten, and which items are checkpoints does
    /// not depend on the order they came in.
    pub fn checkpoint_due(mark: impl FnOnce() -> u64, held: u64, min_items: u64) -> bool {
        let first = min_items.max(1);
        if held < first {
            return false;
        }
        let step = (1u64 << held.ilog2()).div_ceil(4).max(first);
        mark().is_multiple_of(step)
    }

    /// Notes `fit`, the project's newest, for the metrics ([`Reviewers::fitted`],
    /// [`Reviewers::left_out`]).
    pub fn note_fit(&mut self, fit: &Fit) {
        self.last_fit = (fit.reviewers.len(), fit.left_out);
    }

    /// At a checkpoint, whose fit is `fit`: the findings of the reviewers it did not fit (their
    /// verdicts forgotten, or beyond `reviewers.max_reviewers`) go, and those reviewers are
    /// returned: their changelog records are deleted. Only here, where the verdicts decide, not
    /// where a record is published, which the runtime's timing decides: so which findings a
    /// reviewer comes back with is the same in a replay and in the service.
    pub fn drop_unfitted(&mut self, fit: &Fit) -> Vec<ProjectKey> {
        let mut gone: Vec<ProjectKey> = self
            .findings
            .keys()
            .filter(|k| !fit.reviewers.contains_key(*k))
            .cloned()
            .collect();
        gone.sort_unstable();
        for k in &gone {
            self.findings.remove(k);
        }
        gone
    }

    /// The book of the project's patterns, if a checkpoint's fit made one.
    pub fn book(&self) -> Option<&Book> {
        self.book.as_deref()
    }

    /// The book of the project's patterns, made if none.
    pub fn book_mut(&mut self) -> &mut Book {
        self.book.get_or_insert_with(Box::default)
    }

    /// Keeps `fit` as the one the alerts and learned weights follow.
    pub fn keep_checkpoint(&mut self, fit: Fit) {
        self.checkpoint = Some(Checkpoint::from(fit));
    }

    /// The fit of the last checkpoint (or restore).
    pub fn checkpoint(&self) -> Option<&Checkpoint> {
        self.checkpoint.as_ref()
    }

    /// A reviewer's active findings.
    pub fn findings(&self, reviewer: &str) -> Findings {
        self.findings.get(reviewer).copied().unwrap_or_default()
    }

    /// Sets a fitted reviewer's findings; returns whether they changed.
    pub fn set_findings(&mut self, reviewer: &ProjectKey, now: Findings) -> bool {
        if self.findings(reviewer) == now {
            return false;
        }
        if now.any() {
            self.findings.insert(reviewer.clone(), now);
        } else {
            self.findings.remove(reviewer);
        }
        true
    }

    /// Puts a restored reviewer's findings back.
    pub fn restore(&mut self, reviewer: &str, kept: Kept) {
        if kept.findings.any() {
            self.findings.insert(reviewer.into(), kept.findings);
        }
    }

    /// Forgets the last checkpoint's fit, after a restore wrote the items and findings
    /// directly: the runtime fits again (`Engine::republish_reviewers`).
    pub fn forget_checkpoint(&mut self) {
        self.checkpoint = None;
    }

    /// Marks the project as waiting for the next publication of its reviewers' records;
    /// `true` if it was not already, when the caller adds it to the state's list of them. A
    /// mark in the project, found with it, rather than a set of the projects: with many busy
    /// projects every insert into that set was a cache miss.
    pub fn hold(&mut self) -> bool {
        !std::mem::replace(&mut self.held_for_release, true)
    }

    /// Clears the mark of [`Reviewers::hold`], once the records are published.
    pub fn release(&mut self) {
        self.held_for_release = false;
    }

    /// Reviewers fitted by the project's last fit (not those with verdicts held now).
    pub fn fitted(&self) -> usize {
        self.last_fit.0
    }

    /// Verdicts left out so far at the vote, and by the project's last fit.
    pub fn left_out(&self) -> u64 {
        self.left_out + self.last_fit.1
    }
}

#[cfg(test)]
mod tests;
