use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use super::*;

fn outcome(a: usize, b: usize, score: f64) -> Games {
    Games {
        a,
        b,
        score,
        games: 1.0,
    }
}

/// `n` copies of an outcome.
fn times(n: usize, o: Games) -> impl Iterator<Item = Games> {
    std::iter::repeat_n(o, n)
}

fn rating(r: &Option<f64>) -> f64 {
    r.expect("a rating")
}

/// The root in `[lo, hi]` of an increasing `f`, by bisection.
fn root(f: impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if f(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

#[test]
fn one_win_is_finite_and_solves_the_stationary_equation() {
    // A beat B once. By symmetry theta_B = -theta_A = -x, and A's gradient
    // (1 - sigma(2x)) + (1/2 - sigma(x)) = 0 becomes, with s = e^x, s^3 - s^2 - s - 3 = 0.
    let r = fit(2, [outcome(0, 1, 1.0)].iter()).ratings;
    let s = root(|s| s * s * s - s * s - s - 3.0, 1.0, 3.0);
    assert!((s - 2.130_395).abs() < 1e-5, "{s}");
    let shift = 400.0 * s.log10();
    assert!((rating(&r[0]) - (1000.0 + shift)).abs() < 1e-6, "{r:?}");
    assert!((rating(&r[1]) - (1000.0 - shift)).abs() < 1e-6, "{r:?}");
}

#[test]
fn two_models_three_to_one_are_pulled_a_little_towards_the_reference() {
    // Without the prior p_A / p_B = 3: 1000 +- 95.4. With it, by symmetry theta = +-x and
    // 3 - 4 sigma(2x) + 1/2 - sigma(x) = 0.
    let outcomes: Vec<Games> = times(3, outcome(0, 1, 1.0))
        .chain(times(1, outcome(0, 1, 0.0)))
        .collect();
    let r = fit(2, outcomes.iter()).ratings;
    let sigma = |x: f64| 1.0 / (1.0 + (-x).exp());
    let x = root(|x| -(3.5 - 4.0 * sigma(2.0 * x) - sigma(x)), 0.0, 5.0);
    let shift = 400.0 * x / std::f64::consts::LN_10;
    assert!(shift < 95.424 && shift > 70.0, "{shift}");
    assert!((rating(&r[0]) - (1000.0 + shift)).abs() < 1e-6, "{r:?}");
    assert!((rating(&r[1]) - (1000.0 - shift)).abs() < 1e-6, "{r:?}");
}

#[test]
fn a_balanced_cycle_rates_everyone_equal_and_ties_count_half() {
    // A beats B, B beats C, C beats A, two to one each: symmetric, so all 1000.
    let mut outcomes = Vec::new();
    for (a, b) in [(0, 1), (1, 2), (2, 0)] {
        outcomes.extend(times(2, outcome(a, b, 1.0)));
        outcomes.push(outcome(a, b, 0.0));
    }
    for r in fit(3, outcomes.iter()).ratings {
        assert!((rating(&r) - 1000.0).abs() < 1e-6);
    }
    assert_eq!(fit(3, outcomes.iter()).priors, vec![None; 3]);
    // A tie is half a win each: one win each and one tie is even.
    let even = [outcome(0, 1, 1.0), outcome(0, 1, 0.0), outcome(1, 0, 0.5)];
    for r in fit(2, even.iter()).ratings {
        assert!((rating(&r) - 1000.0).abs() < 1e-9);
    }
}

#[test]
fn unbeaten_winless_and_separated_models_are_rated_and_noted() {
    // D beats everyone, E loses to everyone, F never plays; A, B, C play a cycle among them.
    let mut outcomes = Vec::new();
    for (a, b) in [(0, 1), (1, 2), (2, 0)] {
        outcomes.push(outcome(a, b, 1.0));
        outcomes.push(outcome(b, a, 0.5));
    }
    for x in 0..3 {
        outcomes.push(outcome(3, x, 1.0));
        outcomes.push(outcome(4, x, 0.0));
    }
    let r = fit(6, outcomes.iter()).ratings;
    let notes = fit(6, outcomes.iter()).priors;
    assert_eq!(r[5], None);
    assert_eq!(
        notes,
        [
            None,
            None,
            None,
            Some(Prior::NeverLost),
            Some(Prior::NeverWon),
            None
        ]
    );
    // D above the cycle, E below it, the cycle symmetric between them (D and E mirror).
    let (a, d, e) = (rating(&r[0]), rating(&r[3]), rating(&r[4]));
    assert!(d > a + 100.0 && e < a - 100.0, "{r:?}");
    assert!((rating(&r[1]) - a).abs() < 1e-6 && (rating(&r[2]) - a).abs() < 1e-6);
    assert!(((d - 1000.0) + (e - 1000.0)).abs() < 1e-6, "{r:?}");
    // A chain A > B > C: every model finite and in order; B is between and separated.
    let chain = [outcome(0, 1, 1.0), outcome(1, 2, 1.0), outcome(1, 2, 1.0)];
    let r = fit(3, chain.iter()).ratings;
    assert!(
        rating(&r[0]) > rating(&r[1]) && rating(&r[1]) > rating(&r[2]),
        "{r:?}"
    );
    assert_eq!(
        fit(3, chain.iter()).priors,
        [
            Some(Prior::NeverLost),
            Some(Prior::Separated),
            Some(Prior::NeverWon)
        ]
    );
    // Two groups that never meet: each is placed against the reference alone.
    let apart = [
        outcome(0, 1, 1.0),
        outcome(0, 1, 0.0),
        outcome(2, 3, 1.0),
        outcome(2, 3, 0.0),
    ];
    for r in fit(4, apart.iter()).ratings {
        assert!((rating(&r) - 1000.0).abs() < 1e-9);
    }
    assert_eq!(fit(4, apart.iter()).priors, vec![Some(Prior::Separated); 4]);
}

/// The tournament: one model wins all its 21 comparisons, the others mixed.
#[test]
fn an_unbeaten_model_is_rated_first_with_a_finite_interval() {
    let mut sessions: Vec<Vec<Games>> = Vec::new();
    for round in 0..7 {
        for other in 1..4 {
            sessions.push(vec![outcome(0, other, 1.0)]);
            let (a, b) = (other, 1 + other % 3);
            sessions.push(vec![outcome(a, b, if round % 2 == 0 { 1.0 } else { 0.0 })]);
        }
    }
    let point = fit(4, sessions.iter().flatten());
    let intervals = bootstrap(&point, &sessions, 200, seed_of(&sessions));
    let top = rating(&point.ratings[0]);
    for (i, (r, interval)) in point.ratings.iter().zip(&intervals).enumerate() {
        let (r, interval) = (rating(r), interval.expect("an interval"));
        assert!(interval.low.is_finite() && interval.high.is_finite());
        assert!(interval.low <= r && r <= interval.high, "{interval:?} {r}");
        if i > 0 {
            assert!(top > r + 300.0, "{point:?}");
            assert_eq!(point.priors[i], None);
        }
    }
    // Clearly above the rest: its interval meets none of theirs.
    for other in &intervals[1..] {
        assert!(
            !intervals[0].unwrap().overlaps(&other.unwrap()),
            "{intervals:?}"
        );
    }
}

#[test]
fn the_bootstrap_is_seeded_and_brackets_the_estimate() {
    let sessions: Vec<Vec<Games>> = (0..60)
        .map(|i| {
            vec![outcome(
                i % 3,
                (i + 1) % 3,
                if i % 4 == 0 { 0.0 } else { 1.0 },
            )]
        })
        .collect();
    let seed = seed_of(&sessions);
    assert_eq!(seed, seed_of(&sessions.clone()));
    let point = fit(3, sessions.iter().flatten());
    let a = bootstrap(&point, &sessions, 200, seed);
    assert_eq!(
        a,
        bootstrap(&point, &sessions, 200, seed),
        "same seed, same intervals"
    );
    for (interval, r) in a.iter().zip(&point.ratings) {
        let i = interval.expect("an interval");
        assert!(i.low.is_finite() && i.high.is_finite(), "{i:?}");
        assert!(i.low <= rating(r) && rating(r) <= i.high, "{i:?} {r:?}");
        assert!(i.low < i.high, "{i:?}");
    }
    let x = Interval {
        low: 1.0,
        high: 2.0,
    };
    let touching = Interval {
        low: 2.0,
        high: 3.0,
    };
    let apart = Interval {
        low: 2.5,
        high: 3.0,
    };
    assert!(x.overlaps(&touching) && touching.overlaps(&x));
    assert!(!x.overlaps(&apart) && !apart.overlaps(&x));
    assert_eq!(bootstrap(&fit(2, [].iter()), &[], 10, 1), vec![None, None]);
    assert_eq!(bootstrap(&point, &sessions, 0, 1), vec![None; 3]);
}

#[test]
fn models_that_never_meet_others_do_not_move_them() {
    // Ratings are relative to the fixed reference, not re-centred per fit: a resample that
    // draws a group of models or not rates the others the same. (With a geometric-mean
    // centre, the lopsided pair 2, 3 would shift 0 and 1.)
    let sessions: Vec<Games> = (0..40)
        .map(|i| outcome(0, 1, if i % 3 == 0 { 0.0 } else { 1.0 }))
        .collect();
    let without = fit(4, sessions.iter()).ratings;
    let with = fit(4, sessions.iter().chain(&[outcome(2, 3, 1.0); 5])).ratings;
    for m in [0, 1] {
        assert!(
            (rating(&without[m]) - rating(&with[m])).abs() < 1e-9,
            "{with:?}"
        );
    }
    assert!(rating(&with[2]) > rating(&with[3]));
}

/// A tournament between models of known strengths: how often each true rating falls inside its
/// 95% interval. `runs` seeded tournaments of `sessions` random pairings each.
fn coverage(runs: u64, sessions: usize, rounds: usize) -> f64 {
    let truth = [1200.0, 1100.0, 1050.0, 1000.0, 950.0, 700.0];
    // True ratings average 1000, where the prior's reference sits.
    let mean = truth.iter().sum::<f64>() / truth.len() as f64;
    let truth: Vec<f64> = truth.iter().map(|r| r - mean + 1000.0).collect();
    let p = |r: f64| 10f64.powf((r - 1000.0) / 400.0);
    let (mut inside, mut total) = (0, 0);
    for run in 0..runs {
        let mut rng = ChaCha8Rng::seed_from_u64(run);
        let games: Vec<Vec<Games>> = (0..sessions)
            .map(|_| {
                let a = rng.random_range(0..truth.len());
                let b = (a + rng.random_range(1..truth.len())) % truth.len();
                let win = rng.random::<f64>() < p(truth[a]) / (p(truth[a]) + p(truth[b]));
                vec![outcome(a, b, if win { 1.0 } else { 0.0 })]
            })
            .collect();
        let point = fit(truth.len(), games.iter().flatten());
        let intervals = bootstrap(&point, &games, rounds, seed_of(&games));
        for (t, i) in truth.iter().zip(intervals) {
            let i = i.expect("every model compared");
            total += 1;
            inside += usize::from(i.low <= *t && *t <= i.high);
        }
    }
    inside as f64 / total as f64
}

#[test]
fn intervals_cover_known_strengths_about_95_percent_of_the_time() {
    // 40 tournaments of 600 games, 200 resamples each: 240 intervals.
    let c = coverage(40, 600, 200);
    println!("coverage of 95% intervals: {c:.3}");
    assert!((0.88..=0.995).contains(&c), "coverage {c}");
}

proptest! {
    /// No NaN; every compared model finite; the order of outcomes is irrelevant; a win never
    /// lowers the winner.
    #[test]
    fn ratings_are_finite_order_free_and_monotone(
        outcomes in prop::collection::vec((0..5usize, 0..5usize, prop::sample::select(vec![0.0, 0.5, 1.0])), 0..60),
        extra in (0..5usize, 0..5usize),
    ) {
        let outcomes: Vec<Games> = outcomes.into_iter().map(|(a, b, s)| outcome(a, b, s)).collect();
        let r = fit(5, outcomes.iter()).ratings;
        let rev = fit(5, outcomes.iter().rev()).ratings;
        let t = Table::of(5, outcomes.iter());
        for (i, (x, y)) in r.iter().zip(&rev).enumerate() {
            let compared = t.row(i).1.iter().sum::<f64>() > 0.0;
            prop_assert_eq!(x.is_some(), compared);
            if let (Some(x), Some(y)) = (x, y) {
                prop_assert!(x.is_finite() && (x - y).abs() < 1e-6);
            }
        }
        let (w, l) = extra;
        if w != l {
            let more: Vec<Games> = outcomes.iter().copied().chain([outcome(w, l, 1.0)]).collect();
            let after = fit(5, more.iter()).ratings;
            prop_assert!(rating(&after[w]) >= r[w].unwrap_or(REFERENCE) - 1e-6);
            prop_assert!(rating(&after[l]) <= r[l].unwrap_or(REFERENCE) + 1e-6);
        }
    }
}

/// `softplus_both(x)` is `(ln(1 + e^-x), ln(1 + e^x))` from one logarithm, to the last bit of
/// each written out on its own, and without overflow: `ln 2` at zero, `ln(1 + e)` at one.
#[test]
fn softplus_both_is_each_side_to_the_bit() {
    let alone = |x: f64| {
        if x > 0.0 {
            x + (-x).exp().ln_1p()
        } else {
            x.exp().ln_1p()
        }
    };
    for x in [
        -800.0, -30.0, -1.5, -1e-300, -0.0, 0.0, 1e-300, 1.0, 2.0, 40.0, 800.0,
    ] {
        let (minus, plus) = softplus_both(x);
        assert_eq!(minus.to_bits(), alone(-x).to_bits(), "{x}");
        assert_eq!(plus.to_bits(), alone(x).to_bits(), "{x}");
        assert!(minus.is_finite() && plus.is_finite(), "{x}");
    }
    assert_eq!(softplus_both(0.0), (2f64.ln(), 2f64.ln()));
    let (minus, plus) = softplus_both(1.0);
    assert!((plus - 1.313_261_687_518_222_8).abs() < 1e-15, "{plus}");
    assert!((minus - 0.313_261_687_518_222_8).abs() < 1e-15, "{minus}");
}
