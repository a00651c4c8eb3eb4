use proptest::prelude::*;
use std::collections::BTreeSet;

use super::*;
use crate::engine::model::bounded::Bounded;
use crate::engine::model::judge_quality::{ItemVotes, item_mark};

const LIMITS: ReviewerLimits = ReviewerLimits {
    max_verdicts: 64,
    min_items: 20,
};

fn at(s: i64) -> EventTime {
    EventTime::new(1_795_168_800 + s, 0).expect("in range")
}

fn v(reviewer: &str, pass: bool) -> Verdict {
    Verdict {
        reviewer: reviewer.into(),
        pass,
        weight: 1.0,
        at: at(0),
    }
}

/// A batch's verdicts `(reviewer, pass, weight)`: reviewer `r{who}`, weight `w / 2` (0 to 2,
/// so that weights tie and split majorities).
fn weighed(votes: &[(u8, bool, u8)]) -> Vec<Verdict> {
    votes
        .iter()
        .map(|&(who, pass, w)| Verdict {
            weight: f64::from(w) / 2.0,
            ..v(&format!("r{who}"), pass)
        })
        .collect()
}

fn close(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() <= tolerance
}

/// A project's item store of at most `max_items` reviews and its reviewers, as judge quality
/// drives them: a new item forgets the oldest first.
#[derive(Debug, Clone, PartialEq)]
struct Crowd {
    items: Bounded<Review>,
    reviewers: Reviewers,
    max_items: usize,
    limits: ReviewerLimits,
    /// `reviewers.max_reviewers`: the reviewers a fit reads.
    max_reviewers: usize,
    forgotten: u64,
}

impl Crowd {
    fn new(max_items: usize, limits: ReviewerLimits) -> Crowd {
        Crowd {
            items: Bounded::default(),
            reviewers: Reviewers::default(),
            max_items,
            limits,
            max_reviewers: 1000,
            forgotten: 0,
        }
    }

    /// The crowd whose fits read at most `max_reviewers` reviewers.
    fn fitting(self, max_reviewers: usize) -> Crowd {
        Crowd {
            max_reviewers,
            ..self
        }
    }

    /// Adds a batch at `at`; returns whether it passed a checkpoint.
    fn add(&mut self, (item, verdicts): (&str, &[Verdict]), at: EventTime) -> bool {
        let verdicts: Vec<Verdict> = verdicts
            .iter()
            .map(|v| Verdict { at, ..v.clone() })
            .collect();
        let (added, _) = self.add_timed((item, &verdicts));
        let held = self.items.len() as u64;
        let mark = || item_mark(("p", item));
        added.admitted > 0 && Reviewers::checkpoint_due(mark, held, self.limits.min_items)
    }

    /// Adds a batch whose verdicts carry their own times; returns what it added.
    fn add_timed(&mut self, (item, verdicts): (&str, &[Verdict])) -> (Added, Vec<ProjectKey>) {
        let mut forgotten = Vec::new();
        let (_, review) = self.items.entry(item, self.max_items, &mut forgotten);
        self.forgotten += forgotten.len() as u64;
        let added = self
            .reviewers
            .add(review, verdicts.iter().cloned().collect(), self.limits);
        (added, Vec::new())
    }

    /// Pairs a judge score `s` with `item`, held.
    fn judge(&mut self, item: &str, s: f64) {
        self.items.get_mut(item).expect("held").1.judge(s);
    }

    fn fit(&self) -> Fit {
        fit(self.items.iter().map(|(_, r)| r), self.max_reviewers)
    }

    /// Fits the reviewers as a checkpoint does: returns the reviewers whose findings went.
    fn refit(&mut self) -> Vec<ProjectKey> {
        let fitted = self.fit();
        self.reviewers.note_fit(&fitted);
        self.reviewers.drop_unfitted(&fitted)
    }

    /// Whether the fit reads `reviewer`'s verdicts.
    fn fits(&self, reviewer: &str) -> bool {
        self.fit().reviewers.contains_key(reviewer)
    }

    fn figures(&self, reviewer: &str) -> Figures {
        self.fit().reviewers[reviewer].clone()
    }

    /// The reviewers as a restore rebuilds them from the findings and the count written.
    fn restored(&self) -> Reviewers {
        let mut again = Reviewers::default();
        for (k, &findings) in &self.reviewers.findings {
            again.restore(k, Kept { findings });
        }
        again.left_out = self.reviewers.left_out;
        again
    }
}

/// The fixed point of the model with one verdict alone, by hand. With `q` the item's posterior,
/// the reviewer's sensitivity is `a = (2 + q) / (3 + q)` (the prior's two true and one false
/// pseudo-verdicts, and its pass on an item that is a pass with probability `q`), its
/// specificity `b = 2 / (4 − q)` (the prior alone, over the `1 − q` of the item that is a fail),
/// and `π = (1 + q) / 3`; `logit q = logit π + ln(a / (1 − b))` gives
/// `q (2 − q)² (3 + q) = (1 − q)(1 + q)(2 + q)(4 − q)`, whose one root in [0, 1] is found here
/// by bisection. Its reliability is `(2 + q) / 4`: the prior and the one verdict, true with
/// probability `q`.
#[test]
fn one_verdict_by_hand() {
    let mut r = Crowd::new(10_000, LIMITS);
    r.add(("i", &[v("ann", true)]), at(0));
    let f =
        |q: f64| q * (2.0 - q).powi(2) * (3.0 + q) - (1.0 - q) * (1.0 + q) * (2.0 + q) * (4.0 - q);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if f(mid) < 0.0 { lo = mid } else { hi = mid }
    }
    let q = lo;
    let fitted = r.fit();
    let ann = &fitted.reviewers["ann"];
    assert!(
        close(ann.coins.sensitivity, (2.0 + q) / (3.0 + q), 1e-8),
        "{ann:?} {q}"
    );
    assert!(
        close(ann.coins.specificity, 2.0 / (4.0 - q), 1e-8),
        "{ann:?} {q}"
    );
    assert!(
        close(ann.reliability(), (2.0 + q) / 4.0, 1e-8),
        "{}",
        ann.reliability()
    );
    assert!(close(fitted.class_prior, (1.0 + q) / 3.0, 1e-8));
    let p = ann.reliability();
    assert!(close(
        ann.standard_error(),
        (p * (1.0 - p) / 5.0).sqrt(),
        1e-12
    ));
    assert_eq!(ann.pass_rate(), Some(1.0));
    assert_eq!(ann.agreement(), None);
    assert_eq!(ann.last_event_at, Some(at(0)));
}

/// Forty items, half of them passes (even ones), each judged in one batch by three honest
/// reviewers, a contrarian who always gives the wrong verdict and a reviewer who always says
/// pass. By hand:
/// - agreement with the others' majority. An honest reviewer on a pass sees the other two
///   honest and "yes" pass against the contrarian (agrees); on a fail the other two honest
///   against the contrarian and "yes" (tied, ½): (20 + 10) / 40 = 0.75. The contrarian is
///   always outvoted: 0. "yes" agrees on passes and not on fails: 0.5.
/// - reliability: once the items' posteriors are near certain, an honest reviewer's 40 true
///   verdicts give (2 + 40) / 43 ≈ 0.98, "yes" (2 + 20) / 43 ≈ 0.51, the contrarian
///   (2 + 0) / 43 ≈ 0.05.
#[test]
fn honest_contrarian_and_yes_sayer_by_hand() {
    let mut r = Crowd::new(10_000, LIMITS);
    for i in 0..40 {
        let truth = i % 2 == 0;
        let batch = [
            v("h1", truth),
            v("h2", truth),
            v("h3", truth),
            v("contrarian", !truth),
            v("yes", true),
        ];
        r.add((&format!("item-{i}"), &batch), at(i));
    }
    let fitted = r.fit();
    let get = |k: &str| &fitted.reviewers[k];
    for h in ["h1", "h2", "h3"] {
        assert_eq!(get(h).agreement(), Some(0.75), "{h}");
        assert_eq!(get(h).pass_rate(), Some(0.5));
        assert!(close(get(h).reliability(), 42.0 / 43.0, 0.01), "{h}");
    }
    assert_eq!(get("contrarian").agreement(), Some(0.0));
    assert!(close(get("contrarian").reliability(), 2.0 / 43.0, 0.01));
    assert_eq!(get("yes").agreement(), Some(0.5));
    assert_eq!(get("yes").pass_rate(), Some(1.0));
    assert!(close(get("yes").reliability(), 22.0 / 43.0, 0.01));
    assert!(close(fitted.class_prior, 21.0 / 42.0, 0.01));
    assert_eq!(fitted.items, 40);
    assert!(fitted.iterations < MAX_ITERATIONS);
    assert_eq!(r.reviewers, r.restored());
}

/// A reviewer changing their verdict on an item replaces it, and a forgotten item takes its
/// verdicts back: a reviewer left with none is no longer fitted, and its findings go at the
/// next fit.
#[test]
fn replaced_and_forgotten_verdicts() {
    let limits = ReviewerLimits {
        max_verdicts: 2,
        min_items: 1,
    };
    let mut r = Crowd::new(2, limits).fitting(3);
    r.add(("a", &[v("ann", true), v("bob", true)]), at(0));
    r.add(("a", &[v("ann", false)]), at(1));
    assert_eq!(r.figures("ann").verdicts, 1);
    assert_eq!(r.figures("ann").pass_rate(), Some(0.0));
    // A third reviewer on a full item is left out.
    r.add(("a", &[v("cy", true)]), at(2));
    assert!(!r.fits("cy"));
    assert_eq!(r.reviewers.left_out, 1);
    // ann is found unreliable: once she goes, her findings go at the next checkpoint.
    assert!(r.reviewers.set_findings(
        &"ann".into(),
        Findings {
            unreliable: true,
            ..Findings::default()
        }
    ));
    r.add(("b", &[v("bob", true)]), at(3));
    r.add_timed((
        "c",
        &[Verdict {
            at: at(4),
            ..v("dee", false)
        }],
    ));
    // "a" went: ann had only it; bob keeps "b".
    assert_eq!(r.items.len(), 2);
    assert_eq!(r.forgotten, 1);
    assert!(!r.fits("ann"));
    assert_eq!(r.figures("bob").verdicts, 1);
    assert_eq!(r.reviewers, r.restored());
    assert_eq!(r.refit(), ["ann"]);
    assert_eq!(r.reviewers.findings("ann"), Findings::default());
    assert_eq!(r.reviewers, r.restored());
    // An item holds two verdicts: eve's is admitted beside dee's, fay's is left out.
    r.add(("c", &[v("fay", true), v("eve", true)]), at(5));
    assert!(r.fits("eve"));
    assert!(!r.fits("fay"));
    assert_eq!(r.reviewers.left_out, 2);
    assert_eq!(r.reviewers, r.restored());
    // bob goes with "b", but without findings: he has no changelog record to delete.
    r.add_timed(("d", &[v("dee", true)]));
    assert!(!r.fits("bob"));
    assert!(r.refit().is_empty());
    assert_eq!(r.reviewers, r.restored());
}

/// `reviewers.max_reviewers` applies at the fit: it reads the verdicts of the reviewers with the
/// most (ties by id) and leaves the others' out, counted, whatever order they came in. Here ann
/// has three verdicts, bob and cy two each, dee one; with two fitted, ann and bob (before cy by
/// id) are, and cy's and dee's three verdicts are left out.
#[test]
fn the_fit_reads_the_reviewers_with_the_most_verdicts() {
    let batches: [(&str, &[Verdict]); 4] = [
        ("a", &[v("dee", true), v("cy", true), v("ann", true)]),
        ("b", &[v("cy", false), v("ann", true)]),
        ("c", &[v("bob", true), v("ann", false)]),
        ("d", &[v("bob", false)]),
    ];
    let mut forward = Crowd::new(10, LIMITS).fitting(2);
    let mut backward = Crowd::new(10, LIMITS).fitting(2);
    for (t, batch) in batches.iter().enumerate() {
        forward.add(*batch, at(t as i64));
    }
    for (t, batch) in batches.iter().rev().enumerate() {
        backward.add(*batch, at(t as i64));
    }
    let fitted = forward.fit();
    let ids: Vec<&str> = fitted.reviewers.keys().map(|k| k.as_str()).collect();
    assert_eq!(ids, ["ann", "bob"]);
    assert_eq!(fitted.left_out, 3);
    // ann shares "c" with bob alone: cy's verdicts on "a" and "b" are not read.
    assert_eq!(fitted.reviewers["ann"].verdicts, 3);
    assert_eq!(fitted.reviewers["ann"].shared, 1);
    assert_eq!(fitted.items, 4);
    forward.refit();
    assert_eq!(
        (forward.reviewers.fitted(), forward.reviewers.left_out()),
        (2, 3)
    );
    let mut by_time = backward.fit();
    by_time
        .reviewers
        .values_mut()
        .for_each(|f| f.last_event_at = None);
    let mut fitted = fitted;
    fitted
        .reviewers
        .values_mut()
        .for_each(|f| f.last_event_at = None);
    assert_eq!(fitted, by_time);
}

/// A judge score paired with an item sets the judges' verdict on it: its reviewers' agreement
/// with the judges counts it, and a second score moves the judges' mean.
#[test]
fn agreement_with_the_judges() {
    let mut r = Crowd::new(10, LIMITS);
    r.add(("a", &[v("ann", true), v("bob", false)]), at(0));
    assert_eq!(r.figures("ann").judge_agreement(), None);
    r.judge("a", 0.8);
    assert_eq!(r.figures("ann").judge_agreement(), Some(1.0));
    assert_eq!(r.figures("bob").judge_agreement(), Some(0.0));
    // Mean (0.8 + 0.0) / 2 = 0.4: the judges now say fail.
    r.judge("a", 0.0);
    assert_eq!(r.figures("ann").judge_agreement(), Some(0.0));
    assert_eq!(r.figures("bob").judge_agreement(), Some(1.0));
    assert_eq!(r.figures("bob").judged, 1);
}

/// The judges' verdict does not depend on the order their scores are paired in: ⁰⁄₉, ³⁄₉, ⁶⁄₉
/// and ⁹⁄₉ have a mean of exactly ½ (pass), though summed in floating point in some orders
/// they fall below it; a score a millionth below makes it fail in every order.
#[test]
fn the_judges_verdict_is_the_same_in_every_order() {
    let ninths = [0.0, 3.0 / 9.0, 6.0 / 9.0, 1.0];
    let naive: BTreeSet<bool> = orders(&ninths)
        .iter()
        .map(|o| o.iter().sum::<f64>() / 4.0 >= 0.5)
        .collect();
    assert_eq!(
        naive.len(),
        2,
        "the plain sums disagree: the case is a real one"
    );
    for scores in [ninths, [0.0, 3.0 / 9.0, 6.0 / 9.0, 1.0 - 4e-6]] {
        let judged: BTreeSet<(u64, Option<bool>)> = orders(&scores)
            .iter()
            .map(|order| {
                let mut review = Review::default();
                order.iter().for_each(|&s| review.judge(s));
                let (sum, _) = review.judged.expect("judged");
                (sum.to_bits(), review.judges_pass())
            })
            .collect();
        let expected = Some(scores[3] == 1.0);
        assert_eq!(judged.len(), 1, "{scores:?}: {judged:?}");
        assert!(
            judged.iter().all(|&(_, pass)| pass == expected),
            "{judged:?}"
        );
    }
}

/// Every order of `xs`.
fn orders(xs: &[f64]) -> Vec<Vec<f64>> {
    if xs.len() <= 1 {
        return vec![xs.to_vec()];
    }
    (0..xs.len())
        .flat_map(|i| {
            let mut rest = xs.to_vec();
            let first = rest.remove(i);
            orders(&rest).into_iter().map(move |mut o| {
                o.insert(0, first);
                o
            })
        })
        .collect()
}

/// Checkpoints: none before the project holds `min_items` items, then one item in
/// `max(2^⌊log2 h⌋ / 4, min_items)` (`h` the items held), those whose mark that divides. With
/// `min_items` 4: held 3, none; held 8, a step of 4 (a quarter of 8 is below the floor); held
/// 64, 16; held 1,000, 128 (2^9 / 4).
#[test]
fn checkpoints_by_hand() {
    let due = |mark: u64, held| Reviewers::checkpoint_due(|| mark, held, 4);
    assert!(!due(0, 3));
    assert_eq!(
        (0..12).filter(|&m| due(m, 8)).collect::<Vec<_>>(),
        [0, 4, 8]
    );
    assert!(due(16, 64) && due(48, 64) && !due(8, 64) && !due(4, 64));
    assert!(due(128, 1_000) && due(256, 1_000) && !due(64, 1_000));
    // `min_items` 0 counts as 1: with 3 items held the step is 1 (2^⌊log2 3⌋ / 4 rounded
    // up), so every item is a checkpoint.
    assert!((0..5).all(|m| Reviewers::checkpoint_due(|| m, 3, 0)));
    // Below `min_items` the item is not even hashed.
    assert!(!Reviewers::checkpoint_due(|| unreachable!("hashed"), 3, 4));
    // Through a crowd: a replaced verdict admits none, so it is never a checkpoint, and
    // about one item in a step is.
    let limits = ReviewerLimits {
        min_items: 4,
        ..LIMITS
    };
    let mut r = Crowd::new(10_000, limits);
    let due: Vec<i64> = (1..=2_000)
        .filter(|&i| r.add((&format!("i{i}"), &[v("ann", true)]), at(i)))
        .collect();
    // Held 512 to 1,023 (a step of 128) and 1,024 to 2,000 (256): about 4 and 4.
    let late = due.iter().filter(|&&i| i >= 512).count();
    assert!((3..=20).contains(&late), "{due:?}");
    assert!(due.iter().all(|&i| i >= 4));
    let marked = (1..=2_000)
        .find(|i| due.contains(i))
        .expect("some checkpoint");
    assert!(!r.add((&format!("i{marked}"), &[v("ann", false)]), at(2_001)));
}

/// A small deterministic generator (splitmix64), so the crowd below is the same every run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The batch EM of the same model in plain floating point, written apart from [`fit`]: the
/// same priors and the same start (each item's share of pass verdicts), iterated until nothing
/// moves. Returns each reviewer's (reliability, sensitivity, specificity).
fn batch_em(items: &[Vec<(usize, bool)>], reviewers: usize) -> Vec<(f64, f64, f64)> {
    let mut q: Vec<f64> = items
        .iter()
        .map(|vs| vs.iter().filter(|(_, p)| *p).count() as f64 / vs.len() as f64)
        .collect();
    let mut out = vec![(0.0, 0.0, 0.0); reviewers];
    for _ in 0..5000 {
        // Per reviewer: Σ q over its items, Σ q where it said pass, Σ (1 − q) where it said
        // fail, its verdicts.
        let mut s = vec![(0.0, 0.0, 0.0, 0.0); reviewers];
        for (vs, qi) in items.iter().zip(&q) {
            for &(j, pass) in vs {
                s[j].0 += qi;
                if pass {
                    s[j].1 += qi;
                } else {
                    s[j].2 += 1.0 - qi;
                }
                s[j].3 += 1.0;
            }
        }
        let coins: Vec<(f64, f64)> = s
            .iter()
            .map(|&(passes, tp, tf, n)| {
                ((2.0 + tp) / (3.0 + passes), (2.0 + tf) / (3.0 + n - passes))
            })
            .collect();
        for (j, &(_, tp, tf, n)) in s.iter().enumerate() {
            out[j] = ((2.0 + tp + tf) / (3.0 + n), coins[j].0, coins[j].1);
        }
        let prior = (1.0 + q.iter().sum::<f64>()) / (2.0 + q.len() as f64);
        let clip = |x: f64| x.clamp(CLIP, 1.0 - CLIP);
        for (vs, qi) in items.iter().zip(q.iter_mut()) {
            let mut odds = (clip(prior) / (1.0 - clip(prior))).ln();
            for &(j, pass) in vs {
                let (a, b) = (clip(coins[j].0), clip(coins[j].1));
                odds += if pass {
                    (a / (1.0 - b)).ln()
                } else {
                    ((1.0 - a) / b).ln()
                };
            }
            *qi = 1.0 / (1.0 + (-odds).exp());
        }
    }
    out
}

/// A generated crowd with known accuracies (honest reviewers from 0.95 down to 0.6, a random
/// clicker, an adversary at 0.2 and a straight-liner who always says pass), five of them on
/// each of `n` items, as `(reviewer, pass)` per item.
fn crowd(mix: &mut Mix, n: usize) -> Vec<Vec<(usize, bool)>> {
    let accuracy = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.2, -1.0];
    (0..n)
        .map(|_| {
            let truth = mix.unit() < 0.4;
            let mut chosen: Vec<usize> = Vec::new();
            while chosen.len() < 5 {
                let j = (mix.next() % accuracy.len() as u64) as usize;
                if !chosen.contains(&j) {
                    chosen.push(j);
                }
            }
            chosen
                .iter()
                .map(|&j| {
                    let pass = if accuracy[j] < 0.0 {
                        true
                    } else if mix.unit() < accuracy[j] {
                        truth
                    } else {
                        !truth
                    };
                    (j, pass)
                })
                .collect()
        })
        .collect()
}

/// On 50 generated crowds the fit equals the batch EM of the same model within 1e-6, for
/// every reviewer: the fixed point, not an approximation of it.
#[test]
fn the_fit_is_the_batch_em() {
    for seed in 0..50 {
        let mut mix = Mix(seed);
        let items = crowd(&mut mix, 300);
        let mut r = Crowd::new(10_000, LIMITS);
        for (i, votes) in items.iter().enumerate() {
            let batch: Vec<Verdict> = votes
                .iter()
                .map(|&(j, pass)| v(&format!("r{j}"), pass))
                .collect();
            r.add((&format!("item-{i}"), &batch), at(i as i64));
        }
        let fitted = r.fit();
        assert!(
            fitted.iterations < MAX_ITERATIONS,
            "seed {seed}: {}",
            fitted.iterations
        );
        for (j, &(p, a, b)) in batch_em(&items, 9).iter().enumerate() {
            let got = &fitted.reviewers[format!("r{j}").as_str()];
            let fit = (
                got.reliability(),
                got.coins.sensitivity,
                got.coins.specificity,
            );
            assert!(
                close(fit.0, p, 1e-6) && close(fit.1, a, 1e-6) && close(fit.2, b, 1e-6),
                "seed {seed}, r{j}: fit {fit:?}, batch {:?}",
                (p, a, b)
            );
        }
    }
}

/// Batches of distinct `(item, reviewer)` verdicts: each verdict is applied once, so every
/// order of the batches applies the same verdicts.
fn arb_verdicts() -> impl Strategy<Value = Vec<(u8, u8, bool, u8)>> {
    prop::collection::btree_map((0u8..12, 0u8..6), (any::<bool>(), 1u8..5), 1..50)
        .prop_map(|m| m.into_iter().map(|((i, r), (p, w))| (i, r, p, w)).collect())
}

/// Applies `verdicts` (`(item, reviewer, pass, weight)`) in the order given, one batch each.
fn applied(verdicts: &[(u8, u8, bool, u8)], limits: ReviewerLimits) -> Crowd {
    let mut r = Crowd::new(10_000, limits);
    for &(item, who, pass, w) in verdicts {
        let verdict = Verdict {
            reviewer: format!("r{who}").into(),
            pass,
            weight: f64::from(w) / 2.0,
            at: at(i64::from(item)),
        };
        r.add_timed((&format!("i{item}"), &[verdict]));
    }
    r
}

proptest! {
    /// An item's first batch is admitted as one verdict at a time would be, whatever order it
    /// comes in: in reviewer order, the last of a reviewer's verdicts counting, the first
    /// `max_verdicts` reviewers admitted and every verdict of the others left out.
    #[test]
    fn a_first_batch_is_admitted_as_one_verdict_at_a_time(
        votes in prop::collection::vec((0u8..6, any::<bool>(), 0u8..4), 0..7),
        max_verdicts in 0usize..5,
    ) {
        let limits = ReviewerLimits { max_verdicts, min_items: 1 };
        let batch = weighed(&votes);
        let (mut reviewers, mut review) = (Reviewers::default(), Review::default());
        let added = reviewers.add(&mut review, batch.iter().cloned().collect(), limits);
        let mut in_order: Vec<&Verdict> = batch.iter().collect();
        in_order.sort_by(|a, b| a.reviewer.cmp(&b.reviewer));
        let (mut expected, mut admitted, mut left_out) = (BTreeMap::new(), 0, 0);
        for verdict in in_order {
            if expected.contains_key(&verdict.reviewer) {
                expected.insert(verdict.reviewer.clone(), verdict.clone());
            } else if expected.len() < max_verdicts {
                expected.insert(verdict.reviewer.clone(), verdict.clone());
                admitted += 1;
            } else {
                left_out += 1;
            }
        }
        let expected: Vec<Verdict> = expected.into_values().collect();
        prop_assert_eq!(review.verdicts.as_slice(), expected.as_slice());
        prop_assert_eq!(added.admitted, admitted);
        prop_assert_eq!(added.changed, !expected.is_empty());
        prop_assert_eq!(reviewers.left_out, left_out);
    }

    /// The same verdicts in any order (or keying: the order is all a keying changes within a
    /// project) give the same fit, to the last bit, and the same counts.
    #[test]
    fn the_fit_does_not_depend_on_arrival_order(verdicts in arb_verdicts(), seed in any::<u64>()) {
        let mut shuffled = verdicts.clone();
        let mut mix = Mix(seed);
        for k in (1..shuffled.len()).rev() {
            shuffled.swap(k, (mix.next() % (k as u64 + 1)) as usize);
        }
        let (a, b) = (applied(&verdicts, LIMITS), applied(&shuffled, LIMITS));
        prop_assert_eq!(a.fit(), b.fit());
        prop_assert_eq!(&a.reviewers, &b.reviewers);
    }

    /// Reviewers are numbered as they are first counted: the items in reverse order (every
    /// reviewer numbered otherwise, the patterns read in another order) give the same fit, to
    /// the last bit.
    #[test]
    fn the_fit_does_not_depend_on_the_order_it_reads_the_items_in(verdicts in arb_verdicts()) {
        let crowd = applied(&verdicts, LIMITS);
        let reviews: Vec<&Review> = crowd.items.iter().map(|(_, r)| r).collect();
        let max = crowd.max_reviewers;
        prop_assert_eq!(fit(reviews.iter().copied(), max), fit(reviews.iter().rev().copied(), max));
    }

    /// A restore from the items, the findings and the counters written equals the live
    /// reviewers, and keeps the same checkpoints from then on, however verdicts come and go.
    #[test]
    fn a_restore_is_exact_and_keeps_the_checkpoints(
        batches in prop::collection::vec((0u8..8, prop::collection::vec((0u8..5, any::<bool>(), 0u8..20), 1..4)), 2..60),
        cut in any::<prop::sample::Index>(),
    ) {
        let limits = ReviewerLimits { max_verdicts: 3, min_items: 1 };
        let mut live = Crowd::new(4, limits).fitting(4);
        let cut = cut.index(batches.len());
        let mut restored: Option<Crowd> = None;
        for (t, (item, votes)) in batches.iter().enumerate() {
            if t == cut {
                let mut again = live.clone();
                again.reviewers = live.restored();
                prop_assert_eq!(&again.reviewers, &live.reviewers);
                restored = Some(again);
            }
            let verdicts: Vec<Verdict> = votes
                .iter()
                .map(|&(who, pass, s)| Verdict { at: at(i64::from(s)), ..v(&format!("r{who}"), pass) })
                .collect();
            let item = format!("i{item}");
            let due = live.add((&item, &verdicts), at(t as i64));
            if let Some(again) = restored.as_mut() {
                prop_assert_eq!(again.add((&item, &verdicts), at(t as i64)), due);
            }
            // Findings come and go, as the checkpoints set them.
            if due {
                let fitted = live.fit();
                live.reviewers.drop_unfitted(&fitted);
                if let Some(again) = restored.as_mut() {
                    again.reviewers.drop_unfitted(&fitted);
                }
                for (k, f) in &fitted.reviewers {
                    let now = Findings { unreliable: f.reliability() < 0.6, ..Findings::default() };
                    live.reviewers.set_findings(k, now);
                    if let Some(again) = restored.as_mut() {
                        again.reviewers.set_findings(k, now);
                    }
                }
            }
        }
        if let Some(again) = restored {
            prop_assert_eq!(&again.reviewers, &live.reviewers);
            prop_assert_eq!(again.fit(), live.fit());
        }
        prop_assert_eq!(&live.restored(), &live.reviewers);
    }

    /// The order in which a batch lists its votes changes nothing, with bounds small enough
    /// that batches reach them (two reviewers a project, two verdicts an item): the same
    /// verdicts are admitted and left out, and the fit is the same to the last bit. (Of one
    /// reviewer's verdicts in a batch the last listed counts, by design: each batch here names
    /// a reviewer once.)
    #[test]
    fn the_order_within_a_batch_changes_nothing_at_the_bounds(
        batches in prop::collection::vec((0u8..6, prop::collection::btree_map(0u8..5, any::<bool>(), 1..5)), 1..30),
        seed in any::<u64>(),
    ) {
        let limits = ReviewerLimits { max_verdicts: 2, min_items: 1 };
        let crowd = Crowd::new(4, limits).fitting(2);
        let (mut listed, mut shuffled) = (crowd.clone(), crowd);
        let mut mix = Mix(seed);
        for (t, (item, votes)) in batches.iter().enumerate() {
            let verdicts: Vec<Verdict> =
                votes.iter().map(|(&who, &pass)| v(&format!("r{who}"), pass)).collect();
            let mut reordered = verdicts.clone();
            for k in (1..reordered.len()).rev() {
                reordered.swap(k, (mix.next() % (k as u64 + 1)) as usize);
            }
            let item = format!("i{item}");
            listed.add((&item, &verdicts), at(t as i64));
            shuffled.add((&item, &reordered), at(t as i64));
        }
        prop_assert_eq!(listed.reviewers.left_out, shuffled.reviewers.left_out);
        prop_assert_eq!(&listed.reviewers, &shuffled.reviewers);
        prop_assert_eq!(listed.fit(), shuffled.fit());
    }

    /// Leaving reviewers out at the fit is the fit of the items without their verdicts: the
    /// `max_reviewers` with the most verdicts (ties by id) are read, and the rest are as if
    /// never given, with bounds small enough that batches reach them, weights that tie and split
    /// majorities, and the judges' verdict turning.
    #[test]
    fn leaving_reviewers_out_is_fitting_the_items_without_them(
        batches in prop::collection::vec((0u8..8, prop::collection::vec((0u8..6, any::<bool>(), 0u8..4), 1..5), prop::option::of(0u8..5)), 1..80),
        max_reviewers in 1usize..5,
    ) {
        let limits = ReviewerLimits { max_verdicts: 3, min_items: 1 };
        let mut r = Crowd::new(5, limits).fitting(max_reviewers);
        for (t, (item, votes, judge)) in batches.iter().enumerate() {
            let item = format!("i{item}");
            r.add((&item, &weighed(votes)), at(t as i64));
            if let Some(s) = judge {
                r.judge(&item, f64::from(*s) / 4.0);
            }
        }
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for v in r.items.values().flat_map(|review| &review.verdicts) {
            *counts.entry(v.reviewer.as_str()).or_default() += 1;
        }
        let mut ranked: Vec<(&str, u64)> = counts.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let kept: Vec<&str> = ranked.iter().take(max_reviewers).map(|(id, _)| *id).collect();
        let without: Vec<Review> = r
            .items
            .values()
            .map(|review| {
                let mut review = review.clone();
                review.verdicts.retain(|v| kept.contains(&v.reviewer.as_str()));
                review
            })
            .collect();
        let mut fitted = r.fit();
        let all = fit(without.iter(), usize::MAX);
        let left: u64 = ranked.iter().skip(max_reviewers).map(|(_, n)| n).sum();
        prop_assert_eq!(fitted.left_out, left);
        fitted.left_out = 0;
        prop_assert_eq!(fitted, all);
    }

    /// A book's fit of the items' tags is their fit (without the latest times), whichever
    /// reviewers it leaves out, however many patterns it held before, and after it is rebuilt
    /// from the tags in use: tags stay with their patterns.
    #[test]
    fn a_books_fit_of_the_tags_is_the_fit_of_the_items(
        batches in prop::collection::vec((0u8..8, prop::collection::vec((0u8..6, any::<bool>(), 0u8..4), 1..5), prop::option::of(0u8..5)), 1..80),
        max_reviewers in 1usize..7,
        stale in prop::collection::vec(prop::collection::vec((0u8..6, any::<bool>(), 0u8..4), 1..4), 0..10),
    ) {
        let limits = ReviewerLimits { max_verdicts: 3, min_items: 1 };
        let mut r = Crowd::new(5, limits);
        for (t, (item, votes, judge)) in batches.iter().enumerate() {
            let item = format!("i{item}");
            r.add((&item, &weighed(votes)), at(t as i64));
            if let Some(s) = judge {
                r.judge(&item, f64::from(*s) / 4.0);
            }
        }
        let mut expected = fit(r.items.values(), max_reviewers);
        for f in expected.reviewers.values_mut() {
            f.last_event_at = None;
        }
        // Patterns no held item has any more: the book keeps them until it is rebuilt.
        let mut book = Book::default();
        for votes in &stale {
            book.tag(&Review { verdicts: weighed(votes).into_iter().collect(), judged: None });
        }
        let mut tags: Vec<u32> = r.items.values().map(|review| book.tag(review)).collect();
        let counted = |book: &Book, tags: &[u32]| {
            let mut counts = vec![0; book.len()];
            for &t in tags {
                counts[t as usize] += 1;
            }
            book.fit(&counts, max_reviewers)
        };
        prop_assert_eq!(&counted(&book, &tags), &expected);
        book.compact(tags.iter_mut());
        for (review, &t) in r.items.values().zip(&tags) {
            prop_assert!(book.tags(t, review));
        }
        let distinct: BTreeSet<u32> = tags.iter().copied().collect();
        prop_assert_eq!(book.len(), distinct.len());
        prop_assert_eq!(&counted(&book, &tags), &expected);
    }

    /// However verdicts come, with small bounds that they reach, every figure is finite and in
    /// bounds, and the items, reviewers and verdicts per item stay within their bounds.
    #[test]
    fn figures_stay_in_bounds(
        batches in prop::collection::vec((0u8..12, prop::collection::vec((0u8..6, any::<bool>(), 0u8..5), 1..5)), 1..60),
    ) {
        let limits = ReviewerLimits { max_verdicts: 3, min_items: 1 };
        let mut r = Crowd::new(5, limits).fitting(4);
        for (t, (item, votes)) in batches.iter().enumerate() {
            let item = format!("i{item}");
            r.add((&item, &weighed(votes)), at(t as i64));
            if t % 3 == 0 {
                r.judge(&item, f64::from(votes[0].2) / 4.0);
            }
            prop_assert!(r.items.len() <= 5);
            prop_assert!(r.fit().reviewers.len() <= r.max_reviewers);
            prop_assert!(r.items.iter().all(|(_, i)| i.verdicts.len() <= limits.max_verdicts));
        }
        let fitted = r.fit();
        for f in fitted.reviewers.values() {
            let p = f.reliability();
            prop_assert!(p.is_finite() && (0.0..=1.0).contains(&p));
            prop_assert!(f.standard_error().is_finite());
            let shares = [f.agreement(), f.pass_rate(), f.crowd_pass_rate(), f.judge_agreement()];
            for share in shares.into_iter().flatten() {
                prop_assert!((0.0..=1.0).contains(&share));
            }
            prop_assert!(f.verdicts > 0);
        }
        prop_assert!(fitted.class_prior.is_finite() && (0.0..=1.0).contains(&fitted.class_prior));
        prop_assert_eq!(&r.restored(), &r.reviewers);
    }
}

/// `items` items each voted by `honest` reviewers right with probability 0.95 and `adversaries`
/// right with probability 0.1, half of them passes.
fn honest_against_adversaries(seed: u64, honest: usize, adversaries: usize, items: usize) -> Crowd {
    let mut mix = Mix(seed);
    let mut r = Crowd::new(10_000, LIMITS);
    for i in 0..items {
        let truth = mix.unit() < 0.5;
        let mut batch = Vec::new();
        for (k, accuracy) in std::iter::repeat_n(0.95, honest)
            .chain(std::iter::repeat_n(0.1, adversaries))
            .enumerate()
        {
            let right = mix.unit() < accuracy;
            batch.push(v(&format!("r{k}"), if right { truth } else { !truth }));
        }
        r.add((&format!("item-{i}"), &batch), at(i as i64));
    }
    r
}

/// The mirror solution, where the docs say it is reached: from the weighted majority the fit
/// ends in the solution where that majority is mostly right. With honest reviewers in the
/// majority on every item it finds them (over 20 seeds); with adversaries in the majority it
/// finds the mirror, honest reviewers below one half and adversaries above, which no model
/// without gold answers can tell from the truth.
#[test]
fn the_fit_ends_where_the_majority_points() {
    for seed in 0..20 {
        let right = honest_against_adversaries(seed, 3, 2, 200).fit();
        let mirror = honest_against_adversaries(seed, 2, 3, 200).fit();
        for k in 0..5 {
            let (r, m) = (
                right.reviewers[format!("r{k}").as_str()].reliability(),
                mirror.reviewers[format!("r{k}").as_str()].reliability(),
            );
            // Honest are r0..r2 in the first crowd, r0..r1 in the second.
            assert_eq!(r > 0.5, k < 3, "seed {seed}: r{k} {r}");
            assert_eq!(m > 0.5, k >= 2, "seed {seed}: r{k} {m}");
        }
    }
}

/// A review and an item are written as arrays, a verdict without its time when that is the
/// verdict's before it, and read back in that form, or as the objects and full verdicts a
/// changelog written before holds.
#[test]
fn verdicts_reviews_and_items_are_written_as_arrays_and_read_in_both_forms() {
    let verdict = Verdict {
        weight: 0.5,
        ..v("ann", true)
    };
    let later = Verdict {
        at: verdict.at.plus_seconds(1),
        ..v("cy", true)
    };
    let three = Review {
        verdicts: smallvec::smallvec![verdict.clone(), v("bob", false), later],
        judged: None,
    };
    let text = serde_json::to_string(&three).expect("serializes");
    assert_eq!(
        text,
        r#"[[["ann",true,0.5,1795168800000],["bob",false,1.0],["cy",true,1.0,1795168801000]]]"#
    );
    let read_review = |text: &str| serde_json::from_str::<Review>(text);
    assert_eq!(read_review(&text).expect("written now"), three);
    let whole = r#"[[["ann",true,0.5,1795168800000],["bob",false,1.0,1795168800000],["cy",true,1.0,1795168801000]]]"#;
    assert_eq!(read_review(whole).expect("every time written"), three);
    let untimed = r#"[[["ann",true,0.5],["bob",false,1.0]]]"#;
    let error = read_review(untimed).expect_err("a first verdict needs its time");
    assert!(
        error.to_string().contains("first verdict has no time"),
        "{error}"
    );
    let object =
        r#"{"reviewer":"ann","pass":true,"weight":0.5,"at":{"secs":1795168800,"nanos":0}}"#;
    assert_eq!(
        serde_json::from_str::<Verdict>(object).expect("object"),
        verdict
    );
    let old_review = r#"{"verdicts":[{"reviewer":"ann","pass":true,"weight":0.5,"at":{"secs":1795168800,"nanos":0}}],"posterior":0.7,"refreshed":3}"#;
    let review: Review = serde_json::from_str(old_review).expect("a review written before");
    assert_eq!(review.verdicts.as_slice(), std::slice::from_ref(&verdict));

    let mut review = Review {
        verdicts: smallvec::smallvec![verdict.clone()],
        judged: None,
    };
    let read = |text: &str| serde_json::from_str::<ItemVotes>(text).expect("an item");
    let mut item = ItemVotes {
        weighted: 0.75,
        weight: 1.5,
        votes: 2,
        ready_at: None,
        review: Review::default(),
    };
    let text = serde_json::to_string(&item).expect("serializes");
    assert_eq!(text, "[0.75,1.5,2,null]");
    assert_eq!(read(&text), item);
    item.review = review.clone();
    item.ready_at = Some(verdict.at);
    let text = serde_json::to_string(&item).expect("serializes");
    // The first verdict's time is the item's `ready_at`, so it is left out.
    assert_eq!(text, r#"[0.75,1.5,2,1795168800000,[[["ann",true,0.5]]]]"#);
    assert_eq!(read(&text), item);
    assert_eq!(
        read(r#"[0.75,1.5,2,1795168800000,[[["ann",true,0.5,1795168800000]]]]"#),
        item,
        "as written before"
    );
    // A verdict of another time than `ready_at` keeps it.
    let not_ready = ItemVotes {
        ready_at: None,
        ..item.clone()
    };
    let text = serde_json::to_string(&not_ready).expect("serializes");
    assert_eq!(
        text,
        r#"[0.75,1.5,2,null,[[["ann",true,0.5,1795168800000]]]]"#
    );
    assert_eq!(read(&text), not_ready);
    review.judge(0.25);
    item.review = review;
    let text = serde_json::to_string(&item).expect("serializes");
    assert!(text.ends_with(r#"0.5]],[0.25,1]]]"#), "{text}");
    assert_eq!(read(&text), item);
    let old_item = r#"{"weighted":0.75,"weight":1.5,"votes":2,"ready_at":{"secs":1795168800,"nanos":0},"review":{"verdicts":[["ann",true,0.5,{"secs":1795168800,"nanos":0}]],"judged":[0.25,1]}}"#;
    assert_eq!(read(old_item), item);
}
