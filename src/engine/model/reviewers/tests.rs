use proptest::prelude::*;

use super::*;

const LIMITS: ReviewerLimits = ReviewerLimits {
    max_reviewers: 1000,
    max_verdicts: 64,
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

/// `v` at second `s`.
fn v_at(reviewer: &str, pass: bool, s: i64) -> Verdict {
    Verdict {
        at: at(s),
        ..v(reviewer, pass)
    }
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
    forgotten: u64,
}

impl Crowd {
    fn new(max_items: usize, limits: ReviewerLimits) -> Crowd {
        Crowd {
            items: Bounded::default(),
            reviewers: Reviewers::default(),
            max_items,
            limits,
            forgotten: 0,
        }
    }

    /// Adds a batch; returns the reviewers it touched.
    fn add(&mut self, (item, verdicts): (&str, &[Verdict]), at: EventTime) -> Vec<ProjectKey> {
        let verdicts: Vec<Verdict> = verdicts
            .iter()
            .map(|v| Verdict { at, ..v.clone() })
            .collect();
        self.add_touching((item, &verdicts)).reviewers
    }

    /// Adds a batch whose verdicts carry their own times; returns what it touched.
    fn add_touching(&mut self, (item, verdicts): (&str, &[Verdict])) -> Touched {
        let mut touched = Touched::default();
        let mut gone = Vec::new();
        let _ = self.items.entry(item, self.max_items, &mut gone);
        for (_, _, review) in gone {
            self.reviewers.forget(&review, &mut touched);
            self.forgotten += 1;
        }
        let limits = self.limits;
        self.reviewers
            .add(&mut self.items, (item, verdicts), limits, &mut touched);
        touched.reviewers.sort();
        touched.reviewers.dedup();
        touched
    }

    fn reviewers(&self) -> &IdMap<ProjectKey, Reviewer> {
        self.reviewers.reviewers()
    }

    fn posterior(&self, item: &str) -> Option<f64> {
        self.items.get(item).map(|r| r.posterior)
    }

    /// Every reviewer's sums counted again from the items as they stand: what refreshing,
    /// replacing and forgetting kept must equal it exactly.
    fn recounted(&self) -> Reviewers {
        let mut again = Reviewers::default();
        for (k, r) in self.reviewers() {
            again.restore(k, r.kept);
        }
        again.recount(&self.items);
        again.left_out = self.reviewers.left_out;
        again
    }
}

/// One verdict alone: the item's prior is even, the reviewer's reliability the prior's 2/3, so
/// the item is a pass with probability 2/3, which is the share of the verdict that is true:
/// (2 + 2/3) / (3 + 1) = 2/3.
#[test]
fn one_verdict_by_hand() {
    let mut r = Crowd::new(10_000, LIMITS);
    let changed = r.add(("i", &[v("ann", true)]), at(0));
    assert_eq!(changed, ["ann"]);
    assert!(close(r.posterior("i").unwrap(), 2.0 / 3.0, 1e-12));
    let ann = &r.reviewers()["ann"];
    assert!(close(ann.reliability(), 2.0 / 3.0, 1e-9));
    assert!(close(
        ann.standard_error(),
        (2.0f64 / 3.0 * (1.0 / 3.0) / 5.0).sqrt(),
        1e-9
    ));
    assert_eq!(ann.pass_rate(), Some(1.0));
    assert_eq!(ann.agreement(), None);
    assert_eq!(ann.kept.last_event_at, Some(at(0)));
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
    let get = |k: &str| &r.reviewers()[k];
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
    assert!(close(r.reviewers.class_prior(), 21.0 / 42.0, 0.01));
    assert_eq!(r.reviewers, r.recounted());
}

/// A reviewer changing their verdict on an item replaces it, and a forgotten item takes its
/// verdicts back: a reviewer left with none is forgotten, and the count says how many items
/// went.
#[test]
fn replaced_and_forgotten_verdicts() {
    let limits = ReviewerLimits {
        max_reviewers: 3,
        max_verdicts: 2,
    };
    let mut r = Crowd::new(2, limits);
    r.add(("a", &[v("ann", true), v("bob", true)]), at(0));
    r.add(("a", &[v("ann", false)]), at(1));
    assert_eq!(r.reviewers()["ann"].verdicts, 1);
    assert_eq!(r.reviewers()["ann"].pass_rate(), Some(0.0));
    // A third reviewer on a full item is left out.
    r.add(("a", &[v("cy", true)]), at(2));
    assert!(!r.reviewers().contains_key("cy"));
    assert_eq!(r.reviewers.left_out, 1);
    r.add(("b", &[v("bob", true)]), at(3));
    let changed = r.add(("c", &[v("dee", false)]), at(4));
    // "a" went: ann had only it; bob keeps "b".
    assert_eq!(r.items.len(), 2);
    assert_eq!(r.forgotten, 1);
    assert!(!r.reviewers().contains_key("ann"));
    assert_eq!(r.reviewers()["bob"].verdicts, 1);
    assert!(changed.iter().any(|k| k == "ann"));
    assert_eq!(r.reviewers, r.recounted());
    // bob and dee are held: a third is still room, a fourth is not.
    r.add(("c", &[v("eve", true), v("fay", true)]), at(5));
    assert!(r.reviewers().contains_key("eve"));
    assert!(!r.reviewers().contains_key("fay"));
    assert_eq!(r.reviewers.left_out, 2);
    assert_eq!(r.reviewers, r.recounted());
}

/// A judge score paired with an item sets the judges' verdict on it: its reviewers' agreement
/// with the judges counts it, and a second score moves the judges' mean.
#[test]
fn agreement_with_the_judges() {
    let mut r = Crowd::new(10, LIMITS);
    r.add(("a", &[v("ann", true), v("bob", false)]), at(0));
    assert_eq!(r.reviewers()["ann"].judge_agreement(), None);
    let mut touched = Touched::default();
    r.reviewers.judged(&mut r.items, "a", 0.8, &mut touched);
    assert_eq!(touched.reviewers, ["ann", "bob"]);
    assert_eq!(r.reviewers()["ann"].judge_agreement(), Some(1.0));
    assert_eq!(r.reviewers()["bob"].judge_agreement(), Some(0.0));
    // Mean (0.8 + 0.0) / 2 = 0.4: the judges now say fail.
    r.reviewers.judged(&mut r.items, "a", 0.0, &mut touched);
    assert_eq!(r.reviewers()["ann"].judge_agreement(), Some(0.0));
    assert_eq!(r.reviewers()["bob"].judge_agreement(), Some(1.0));
    assert_eq!(r.reviewers()["bob"].judged, 1);
    assert_eq!(r.reviewers, r.recounted());
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

/// The batch EM of the same model (same prior, majority-vote start), iterated until nothing
/// moves: what the online fit must converge to.
fn batch_em(items: &[Vec<(usize, bool)>], reviewers: usize) -> Vec<f64> {
    let mut q: Vec<f64> = items
        .iter()
        .map(|vs| {
            let pass = vs.iter().filter(|(_, p)| *p).count() as f64;
            let n = vs.len() as f64;
            if 2.0 * pass > n {
                1.0
            } else if 2.0 * pass < n {
                0.0
            } else {
                0.5
            }
        })
        .collect();
    let mut p = vec![0.0; reviewers];
    for _ in 0..500 {
        let mut right = vec![PRIOR_TRUE; reviewers];
        let mut total = vec![PRIOR_TRUE + PRIOR_FALSE; reviewers];
        for (vs, qi) in items.iter().zip(&q) {
            for &(j, pass) in vs {
                right[j] += truth(*qi, pass);
                total[j] += 1.0;
            }
        }
        for j in 0..reviewers {
            p[j] = right[j] / total[j];
        }
        let prior = (1.0 + q.iter().sum::<f64>()) / (2.0 + q.len() as f64);
        let logit = |x: f64| {
            let x = x.clamp(CLIP, 1.0 - CLIP);
            (x / (1.0 - x)).ln()
        };
        for (vs, qi) in items.iter().zip(q.iter_mut()) {
            let mut odds = logit(prior);
            for &(j, pass) in vs {
                odds += if pass { logit(p[j]) } else { -logit(p[j]) };
            }
            *qi = 1.0 / (1.0 + (-odds).exp());
        }
    }
    p
}

/// A generated crowd with known accuracies (honest reviewers from 0.95 down to 0.6, a random
/// clicker, an adversary at 0.2 and a straight-liner who always says pass), five of them on
/// each of 400 items: the online fit ends within 0.02 of the batch EM for every reviewer, and
/// ranks the honest ones by their true accuracy.
#[test]
fn online_fit_converges_to_the_batch_one() {
    let accuracy = [0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.2, -1.0];
    let mut mix = Mix(7);
    let mut items: Vec<Vec<(usize, bool)>> = Vec::new();
    let mut r = Crowd::new(10_000, LIMITS);
    for i in 0..400 {
        let truth = mix.unit() < 0.4;
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < 5 {
            let j = (mix.next() % accuracy.len() as u64) as usize;
            if !chosen.contains(&j) {
                chosen.push(j);
            }
        }
        let votes: Vec<(usize, bool)> = chosen
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
            .collect();
        let batch: Vec<Verdict> = votes
            .iter()
            .map(|&(j, pass)| v(&format!("r{j}"), pass))
            .collect();
        r.add((&format!("item-{i}"), &batch), at(i));
        items.push(votes);
    }
    let batch = batch_em(&items, accuracy.len());
    for (j, expected) in batch.iter().enumerate() {
        let online = r.reviewers()[format!("r{j}").as_str()].reliability();
        assert!(
            close(online, *expected, 0.02),
            "r{j}: online {online}, batch {expected}"
        );
    }
    let honest: Vec<f64> = (0..6)
        .map(|j| r.reviewers()[format!("r{j}").as_str()].reliability())
        .collect();
    assert!(honest.windows(2).all(|w| w[0] > w[1]), "{honest:?}");
    assert!(r.reviewers()["r7"].reliability() < 0.35);
    assert_eq!(r.reviewers, r.recounted());
}

fn arb_batch() -> impl Strategy<Value = (u8, Vec<(u8, bool, u8)>)> {
    (
        0u8..12,
        prop::collection::vec((0u8..6, any::<bool>(), 1u8..5), 1..5),
    )
}

/// A reviewer's last event time is the latest of its held verdicts' unless the verdict that
/// carried it left: then its kept part is to be written. ann votes late (second 9) on the
/// oldest item, which is then forgotten: her last event time stays 9 and must be written.
#[test]
fn a_last_event_time_that_leaves_with_its_verdict_is_written() {
    let mut r = Crowd::new(2, LIMITS);
    r.add_touching(("a", &[v_at("ann", true, 1), v_at("bo", true, 1)]));
    r.add_touching(("b", &[v_at("ann", true, 2)]));
    let late = r.add_touching(("a", &[v_at("ann", false, 9)]));
    assert!(late.kept.is_empty());
    assert_eq!(r.reviewers()["ann"].kept.last_event_at, Some(at(9)));
    // "c" forgets "a", the oldest: bo goes with it (his record too), ann keeps "b" (second 2)
    // and her 9, which no held verdict carries now.
    let forgot = r.add_touching(("c", &[v_at("cy", true, 10)]));
    assert_eq!(forgot.kept, ["ann", "bo"]);
    assert!(!r.reviewers().contains_key("bo"));
    assert_eq!(r.reviewers()["ann"].kept.last_event_at, Some(at(9)));
    // Replacing the verdict that carries it: written too.
    let again = r.add_touching(("b", &[v_at("ann", true, 3)]));
    assert!(again.kept.is_empty(), "9 left already; 3 is not her last");
    let replaced = r.add_touching(("c", &[v_at("cy", false, 4)]));
    assert_eq!(replaced.kept, ["cy"]);
}

proptest! {
    /// A restore from the items and the kept parts written when [`Touched::kept`] asked
    /// equals the live state, last event times included, however verdicts come and go.
    #[test]
    fn restoring_from_the_items_and_the_written_kept_parts_is_exact(
        batches in prop::collection::vec((0u8..8, prop::collection::vec((0u8..5, any::<bool>(), 0u8..20), 1..4)), 1..60),
    ) {
        let limits = ReviewerLimits { max_reviewers: 4, max_verdicts: 3 };
        let mut r = Crowd::new(4, limits);
        let mut written: BTreeMap<ProjectKey, Kept> = BTreeMap::new();
        for (item, votes) in &batches {
            let verdicts: Vec<Verdict> = votes
                .iter()
                .map(|&(who, pass, s)| v_at(&format!("r{who}"), pass, i64::from(s)))
                .collect();
            let touched = r.add_touching((&format!("i{item}"), &verdicts));
            for k in touched.kept {
                if let Some(rev) = r.reviewers().get(&k) {
                    written.insert(k, rev.kept);
                }
            }
            // A reviewer forgotten takes its record with it (a tombstone).
            written.retain(|k, _| r.reviewers().contains_key(k));
        }
        let mut restored = Reviewers::default();
        for (k, kept) in &written {
            restored.restore(k, *kept);
        }
        restored.recount(&r.items);
        restored.left_out = r.reviewers.left_out;
        prop_assert_eq!(&restored, &r.reviewers);
    }

    /// However batches come, every figure is finite and in bounds, the items and reviewers
    /// stay within their bounds, and the kept sums equal a recount from the items.
    #[test]
    fn figures_stay_in_bounds(batches in prop::collection::vec(arb_batch(), 1..60)) {
        let limits = ReviewerLimits { max_reviewers: 4, max_verdicts: 3 };
        let mut r = Crowd::new(5, limits);
        for (t, (item, votes)) in batches.iter().enumerate() {
            let verdicts: Vec<Verdict> = votes
                .iter()
                .map(|&(who, pass, w)| Verdict {
                    reviewer: format!("r{who}").into(),
                    pass,
                    weight: f64::from(w) / 2.0,
                    at: at(t as i64),
                })
                .collect();
            let item = format!("i{item}");
            r.add((&item, &verdicts), at(t as i64));
            if t % 3 == 0 {
                let mut touched = Touched::default();
                r.reviewers.judged(&mut r.items, &item, f64::from(votes[0].2) / 4.0, &mut touched);
            }
            prop_assert!(r.items.len() <= 5);
            prop_assert!(r.reviewers().len() <= limits.max_reviewers);
        }
        for rev in r.reviewers().values() {
            let p = rev.reliability();
            prop_assert!(p.is_finite() && (0.0..=1.0).contains(&p));
            prop_assert!(rev.standard_error().is_finite());
            let shares = [rev.agreement(), rev.pass_rate(), rev.crowd_pass_rate(), rev.judge_agreement()];
            for share in shares.into_iter().flatten() {
                prop_assert!((0.0..=1.0).contains(&share));
            }
            prop_assert!(rev.verdicts > 0);
        }
        let prior = r.reviewers.class_prior();
        prop_assert!(prior.is_finite() && (0.0..=1.0).contains(&prior));
        prop_assert_eq!(&r.reviewers, &r.recounted());
    }

    /// The order of the verdicts within a batch changes nothing.
    #[test]
    fn order_within_a_batch_does_not_matter(
        batches in prop::collection::vec(arb_batch(), 1..30),
        seed in any::<u64>(),
    ) {
        let mut a = Crowd::new(6, LIMITS);
        let mut b = Crowd::new(6, LIMITS);
        let mut mix = Mix(seed);
        for (t, (item, votes)) in batches.iter().enumerate() {
            // One verdict per reviewer, so the batch is a set.
            let mut verdicts: Vec<Verdict> = Vec::new();
            for &(who, pass, w) in votes {
                let reviewer: ProjectKey = format!("r{who}").into();
                if verdicts.iter().all(|x| x.reviewer != reviewer) {
                    verdicts.push(Verdict { reviewer, pass, weight: f64::from(w), at: at(t as i64) });
                }
            }
            let item = format!("i{item}");
            let ca = a.add((&item, &verdicts), at(t as i64));
            for k in (1..verdicts.len()).rev() {
                verdicts.swap(k, (mix.next() % (k as u64 + 1)) as usize);
            }
            let cb = b.add((&item, &verdicts), at(t as i64));
            prop_assert_eq!(ca, cb);
        }
        prop_assert_eq!(a, b);
    }
}
