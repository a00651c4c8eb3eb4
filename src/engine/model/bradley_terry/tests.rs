use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use super::*;

fn outcome(a: usize, b: usize, score: f64) -> Outcome {
    Outcome {
        a,
        b,
        score,
        games: 1.0,
    }
}

/// `n` copies of an outcome.
fn times(n: usize, o: Outcome) -> impl Iterator<Item = Outcome> {
    std::iter::repeat_n(o, n)
}

fn rating(r: &Result<f64, Unrated>) -> f64 {
    *r.as_ref().expect("a rating")
}

#[test]
fn two_models_three_to_one() {
    // p_A / p_B = 3 (the MLE of 3 wins in 4), geometric mean 1: p_A = sqrt(3), p_B = 1/sqrt(3).
    let outcomes: Vec<Outcome> = times(3, outcome(0, 1, 1.0))
        .chain(times(1, outcome(0, 1, 0.0)))
        .collect();
    let r = fit(2, outcomes.iter());
    let shift = 400.0 * 3f64.sqrt().log10(); // 95.424...
    assert!((rating(&r[0]) - (1000.0 + shift)).abs() < 1e-6, "{r:?}");
    assert!((rating(&r[1]) - (1000.0 - shift)).abs() < 1e-6, "{r:?}");
    assert!((shift - 95.424_250_943_932_5).abs() < 1e-9);
}

#[test]
fn a_balanced_cycle_rates_everyone_equal_and_ties_count_half() {
    // A beats B, B beats C, C beats A, two to one each: symmetric, so all 1000.
    let mut outcomes = Vec::new();
    for (a, b) in [(0, 1), (1, 2), (2, 0)] {
        outcomes.extend(times(2, outcome(a, b, 1.0)));
        outcomes.push(outcome(a, b, 0.0));
    }
    for r in fit(3, outcomes.iter()) {
        assert!((rating(&r) - 1000.0).abs() < 1e-6);
    }
    // A tie is half a win each: one win each and one tie is even.
    let even = [outcome(0, 1, 1.0), outcome(0, 1, 0.0), outcome(1, 0, 0.5)];
    for r in fit(2, even.iter()) {
        assert!((rating(&r) - 1000.0).abs() < 1e-9);
    }
}

#[test]
fn unbounded_models_are_not_rated_and_the_rest_are() {
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
    let r = fit(6, outcomes.iter());
    assert_eq!(r[3], Err(Unrated::NeverLost));
    assert_eq!(r[4], Err(Unrated::NeverWon));
    assert_eq!(r[5], Err(Unrated::NotCompared));
    for i in 0..3 {
        assert!((rating(&r[i]) - 1000.0).abs() < 1e-6, "{r:?}");
    }
    // Two groups that never meet cannot be put on one scale.
    let apart = [
        outcome(0, 1, 1.0),
        outcome(0, 1, 0.0),
        outcome(2, 3, 1.0),
        outcome(2, 3, 0.0),
    ];
    assert!(
        fit(4, apart.iter())
            .iter()
            .all(|r| *r == Err(Unrated::Disconnected))
    );
    // Removing the unbeaten may leave another unbeaten: D beat A, whose only loss that was;
    // A beat B and C, who beat each other once. Without D, A never lost; without A, B and C
    // are even.
    let peel = [
        outcome(3, 0, 1.0),
        outcome(0, 1, 1.0),
        outcome(0, 2, 1.0),
        outcome(1, 2, 1.0),
        outcome(2, 1, 1.0),
    ];
    let r = fit(4, peel.iter());
    assert_eq!(
        (r[3], r[0]),
        (Err(Unrated::NeverLost), Err(Unrated::NeverLost))
    );
    for i in [1, 2] {
        assert!((rating(&r[i]) - 1000.0).abs() < 1e-9, "{r:?}");
    }
    // A chain A > B > C: A unbounded above, C below, and B left with no one to be rated
    // against.
    let chain = [outcome(0, 1, 1.0), outcome(1, 2, 1.0), outcome(1, 2, 1.0)];
    let r = fit(3, chain.iter());
    assert_eq!(
        r,
        vec![
            Err(Unrated::NeverLost),
            Err(Unrated::Disconnected),
            Err(Unrated::NeverWon)
        ]
    );
}

#[test]
fn the_bootstrap_is_seeded_and_brackets_the_estimate() {
    let sessions: Vec<Vec<Outcome>> = (0..60)
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
    let a = bootstrap(3, &sessions, 200, seed);
    assert_eq!(
        a,
        bootstrap(3, &sessions, 200, seed),
        "same seed, same intervals"
    );
    let point = fit(3, sessions.iter().flatten());
    for (interval, r) in a.iter().zip(&point) {
        let i = interval.expect("an interval");
        let (low, high) = (i.low, i.high);
        assert!(low.is_finite() && high.is_finite(), "{i:?}");
        assert!(low <= rating(r) && rating(r) <= high, "{i:?} {r:?}");
    }
    assert!(a[0].unwrap().overlaps(&a[1].unwrap()) || !a[1].unwrap().overlaps(&a[0].unwrap()));
    let open = Interval {
        low: 1100.0,
        high: f64::INFINITY,
    };
    assert!(open.overlaps(&Interval {
        low: 5000.0,
        high: 6000.0
    }));
    assert!(!open.overlaps(&Interval {
        low: f64::NEG_INFINITY,
        high: 1099.0
    }));
    // Unbeaten and winless in every resample: at +inf and at -inf, apart.
    let (up, down) = (
        Interval {
            low: f64::INFINITY,
            high: f64::INFINITY,
        },
        Interval {
            low: f64::NEG_INFINITY,
            high: f64::NEG_INFINITY,
        },
    );
    assert!(!up.overlaps(&down) && up.overlaps(&up));
    assert_eq!(
        (Interval::finite(up.low), Interval::finite(1.5)),
        (None, Some(1.5))
    );
    assert_eq!(bootstrap(2, &[], 10, 1), vec![None, None]);
}

/// A tournament between models of known strengths: how often each true rating falls inside its
/// 95% interval. `runs` seeded tournaments of `sessions` random pairings each.
fn coverage(runs: u64, sessions: usize, rounds: usize) -> f64 {
    let truth = [1200.0, 1100.0, 1050.0, 1000.0, 950.0, 700.0];
    // Make the true ratings average 1000, as the fit's do.
    let mean = truth.iter().sum::<f64>() / truth.len() as f64;
    let truth: Vec<f64> = truth.iter().map(|r| r - mean + 1000.0).collect();
    let p = |r: f64| 10f64.powf((r - 1000.0) / 400.0);
    let (mut inside, mut total) = (0, 0);
    for run in 0..runs {
        let mut rng = ChaCha8Rng::seed_from_u64(run);
        let games: Vec<Vec<Outcome>> = (0..sessions)
            .map(|_| {
                let a = rng.random_range(0..truth.len());
                let b = (a + rng.random_range(1..truth.len())) % truth.len();
                let win = rng.random::<f64>() < p(truth[a]) / (p(truth[a]) + p(truth[b]));
                vec![outcome(a, b, if win { 1.0 } else { 0.0 })]
            })
            .collect();
        let intervals = bootstrap(truth.len(), &games, rounds, seed_of(&games));
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
    /// No NaN; the order of outcomes is irrelevant; rated models average 1000.
    #[test]
    fn ratings_are_finite_order_free_and_centred(
        outcomes in prop::collection::vec((0..5usize, 0..5usize, prop::sample::select(vec![0.0, 0.5, 1.0])), 0..60),
    ) {
        let outcomes: Vec<Outcome> = outcomes.into_iter().map(|(a, b, s)| outcome(a, b, s)).collect();
        let r = fit(5, outcomes.iter());
        let rev = fit(5, outcomes.iter().rev());
        let rated: Vec<f64> = r.iter().filter_map(|x| x.as_ref().ok().copied()).collect();
        for (x, y) in r.iter().zip(&rev) {
            match (x, y) {
                (Ok(x), Ok(y)) => prop_assert!((x - y).abs() < 1e-6),
                (x, y) => prop_assert_eq!(x, y),
            }
        }
        prop_assert!(rated.iter().all(|x| x.is_finite()));
        if !rated.is_empty() {
            let mean = rated.iter().sum::<f64>() / rated.len() as f64;
            prop_assert!((mean - 1000.0).abs() < 1e-6, "{:?}", r);
        }
    }
}
