//! The HumanJudge time-weighted quality score of a project.
//!
//! Each applied batch moves the score towards the batch's reputation-weighted mean vote by
//! `1 - alpha`, where `alpha = exp(-lambda * dt)` is how much of the old score survives `dt`
//! seconds of event time. Recent evidence therefore dominates, and a burst of votes in the same
//! instant (dt = 0) cannot move the score at all once a project has history: only time does.
//! So a producer whose clock stands still, or stamps every event with one time, would freeze its
//! project's score unseen; the score counts the batches in a row that did not move its event
//! time forward ([`ProjectScore::still`]), so that a long run is said ([`Step::still`]).

use serde::{Deserialize, Serialize};

use crate::engine::contract::time::EventTime;

/// The running score of one project. Written to the changelog with every flush that changes
/// it, so as an array, `[score, last_update_at, evaluations, votes, last_alpha, still]` (`still`
/// left out when 0, as every changelog written before it reads); read in that form or as the
/// object written before.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ProjectScore {
    pub score: f64,
    /// The latest event time applied so far; `None` before the first batch.
    pub last_update_at: Option<EventTime>,
    /// Applied batches, including late ones.
    pub evaluations: u64,
    /// Votes in applied batches.
    pub votes: u64,
    /// The `alpha` of the last batch's step: with it the state gives the project's last
    /// `jury.scores` record whole (the interactive queries answer from a restored state).
    /// Absent from changelogs written before it.
    #[serde(default)]
    pub last_alpha: Option<f64>,
    /// Batches in a row, the latest included, that did not move `last_update_at` forward (at
    /// its instant or before it, so with alpha 1): 0 after a batch that did. Durable, so that
    /// a run is said once however the service restarts within it.
    #[serde(default)]
    pub still: u64,
}

impl Serialize for ProjectScore {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ProjectScore {
            score,
            last_update_at,
            evaluations,
            votes,
            last_alpha,
            still,
        } = self;
        if *still == 0 {
            (score, last_update_at, evaluations, votes, last_alpha).serialize(s)
        } else {
            (score, last_update_at, evaluations, votes, last_alpha, still).serialize(s)
        }
    }
}

/// What one batch did to the score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub alpha: f64,
    pub freshness: f64,
    /// The batch was older than the latest one applied: `alpha` is 1 and the score did not move.
    pub late: bool,
    /// [`ProjectScore::still`] after the batch.
    pub still: u64,
}

/// The reputation-weighted mean of `(reputation, value)` pairs: `sum(r*v) / sum(r)`.
///
/// `None` when the total reputation is 0 (no vote carries any weight). Values must be in 0..=1
/// and reputations finite and >= 0, which validation guarantees; the result is then in 0..=1.
/// Reputations so large that their sum overflows are rescaled by the largest one first, which
/// leaves the mean mathematically unchanged.
pub fn weighted_mean(votes: &[(f64, f64)]) -> Option<f64> {
    let (mut num, mut den) = (0.0, 0.0);
    for &(r, v) in votes {
        num += r * v;
        den += r;
    }
    if !den.is_finite() {
        let max = votes.iter().fold(0.0_f64, |m, (r, _)| m.max(*r));
        (num, den) = (0.0, 0.0);
        for &(r, v) in votes {
            num += (r / max) * v;
            den += r / max;
        }
    }
    if den > 0.0 {
        Some((num / den).clamp(0.0, 1.0))
    } else {
        None
    }
}

impl ProjectScore {
    /// A project with no batch yet, reporting `initial_score`.
    pub fn new(initial_score: f64) -> Self {
        ProjectScore {
            score: initial_score,
            last_update_at: None,
            evaluations: 0,
            votes: 0,
            last_alpha: None,
            still: 0,
        }
    }

    /// Applies one batch observed at `at` with the given mean vote and vote count:
    /// `score = alpha * score + (1 - alpha) * mean_vote` exactly as written
    /// (freshness is the literal `1 - alpha`, so users can reproduce every digit).
    pub fn apply(&mut self, at: EventTime, mean_vote: f64, votes: u64, lambda: f64) -> Step {
        let (alpha, late) = match self.last_update_at {
            None => (0.0, false),
            Some(last) => {
                let dt = at.seconds_since(last).max(0.0);
                ((-lambda * dt).exp(), at < last)
            }
        };
        let moved_on = self.last_update_at.is_none_or(|last| at > last);
        self.still = if moved_on {
            0
        } else {
            self.still.saturating_add(1)
        };
        let freshness = 1.0 - alpha;
        self.score = (alpha * self.score + freshness * mean_vote).clamp(0.0, 1.0);
        self.last_update_at = Some(self.last_update_at.map_or(at, |last| last.max(at)));
        self.evaluations += 1;
        self.votes += votes;
        self.last_alpha = Some(alpha);
        Step {
            alpha,
            freshness,
            late,
            still: self.still,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(ms: i64) -> EventTime {
        EventTime::from_epoch_millis(ms).unwrap()
    }

    #[test]
    fn seed_example_from_the_contract() {
        // First batch at t0 with pass + flag -> 0.5; a flag 7 s later -> 0.5 * exp(-0.07).
        let mut s = ProjectScore::new(0.5);
        let t0 = 1_795_168_807_250;
        let first = s.apply(
            at(t0),
            weighted_mean(&[(1.0, 1.0), (1.0, 0.0)]).unwrap(),
            2,
            0.01,
        );
        assert_eq!((s.score, first.alpha, first.freshness), (0.5, 0.0, 1.0));
        let second = s.apply(at(t0 + 7000), 0.0, 1, 0.01);
        assert_eq!(s.score, 0.46619690995297414);
        // The contract prints freshness to 16 decimals: 0.0676061800940517.
        assert_eq!(second.freshness, 1.0 - second.alpha);
        assert!((second.freshness - 0.0676061800940517).abs() < 1e-16);
        assert_eq!(second.alpha, (-0.07f64).exp());
        assert_eq!((s.evaluations, s.votes), (2, 3));
    }

    #[test]
    fn reputation_weighting() {
        // 0.9 * 1 + 1 * 0 + 1 * 0.75 = 1.65 over 2.9
        assert_eq!(
            weighted_mean(&[(0.9, 1.0), (1.0, 0.0), (1.0, 0.75)]),
            Some(1.65 / 2.9)
        );
        assert_eq!(weighted_mean(&[(3.0, 1.0), (1.0, 0.0)]), Some(0.75));
        // A zero-reputation vote carries no weight at all.
        assert_eq!(weighted_mean(&[(0.0, 0.0), (2.0, 1.0)]), Some(1.0));
        assert_eq!(weighted_mean(&[(0.0, 1.0), (0.0, 0.0)]), None);
        // Overflowing totals are rescaled, not NaN.
        assert_eq!(
            weighted_mean(&[(f64::MAX, 1.0), (f64::MAX, 0.0)]),
            Some(0.5)
        );
    }

    #[test]
    fn late_batch_keeps_score_and_time() {
        let mut s = ProjectScore::new(0.5);
        s.apply(at(10_000), 1.0, 1, 0.01);
        let step = s.apply(at(5_000), 0.0, 4, 0.01);
        assert!(step.late);
        assert_eq!((step.alpha, step.freshness, s.score), (1.0, 0.0, 1.0));
        assert_eq!(s.last_update_at, Some(at(10_000)));
        assert_eq!((s.evaluations, s.votes), (2, 5));
    }

    #[test]
    fn same_instant_and_zero_lambda_do_not_move_the_score() {
        let mut s = ProjectScore::new(0.5);
        s.apply(at(0), 0.2, 1, 0.01);
        let step = s.apply(at(0), 1.0, 1, 0.01);
        assert!(!step.late);
        assert_eq!((step.alpha, s.score), (1.0, 0.2));
        s.apply(at(1_000_000), 1.0, 1, 0.0);
        assert_eq!(s.score, 0.2);
    }

    #[test]
    fn batches_that_do_not_move_time_forward_are_counted_in_a_row() {
        let mut s = ProjectScore::new(0.5);
        let first = s.apply(at(10_000), 0.2, 1, 0.01);
        assert_eq!((first.still, s.still), (0, 0));
        // At the same instant, then before it: neither moves time, so both count.
        assert_eq!(s.apply(at(10_000), 1.0, 1, 0.01).still, 1);
        assert_eq!(s.apply(at(9_000), 1.0, 1, 0.01).still, 2);
        assert_eq!(s.score, 0.2);
        // A batch after the latest time ends the run, even one whose lambda keeps the score.
        assert_eq!(s.apply(at(10_001), 1.0, 1, 0.0).still, 0);
        assert_eq!(s.apply(at(10_001), 1.0, 1, 0.01).still, 1);
        assert_eq!((s.evaluations, s.votes), (5, 5));
    }

    #[test]
    fn a_run_is_written_only_while_it_lasts() {
        let mut s = ProjectScore::new(0.5);
        s.apply(at(1_500), 1.0, 2, 0.01);
        s.apply(at(1_500), 0.0, 1, 0.01);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(text, "[1.0,1500,2,3,1.0,1]");
        assert_eq!(
            serde_json::from_str::<ProjectScore>(&text).ok(),
            Some(s.clone())
        );
        s.apply(at(1_501), 1.0, 1, 0.01);
        let text = serde_json::to_string(&s).unwrap();
        // Five elements again, as every changelog written before the run was counted.
        assert_eq!(text.matches(',').count(), 4, "{text}");
        assert_eq!(serde_json::from_str::<ProjectScore>(&text).ok(), Some(s));
    }

    #[test]
    fn long_gap_forgets_history() {
        let mut s = ProjectScore::new(0.5);
        s.apply(at(0), 0.0, 1, 0.01);
        s.apply(at(100_000_000), 1.0, 1, 0.01); // 1e5 s -> alpha = exp(-1000) = 0
        assert_eq!(s.score, 1.0);
    }

    #[test]
    fn a_score_is_written_as_an_array_and_reads_the_objects_written_before() {
        let p: ProjectScore = serde_json::from_str(
            r#"{"score":0.5,"last_update_at":null,"evaluations":0,"votes":0}"#,
        )
        .unwrap();
        assert_eq!(p, ProjectScore::new(0.5));
        let mut p = ProjectScore::new(0.5);
        p.apply(at(1_500), 1.0, 2, 0.01);
        let text = serde_json::to_string(&p).unwrap();
        // The first batch sets the score to its mean vote (alpha 0).
        assert_eq!(text, "[1.0,1500,1,2,0.0]");
        assert_eq!(serde_json::from_str::<ProjectScore>(&text).ok(), Some(p));
    }

    proptest! {
        /// A score's changelog form reads back as the same score, every float to the bit.
        #[test]
        fn serialized_score_reads_back(
            score in any::<f64>().prop_filter("finite", |x| x.is_finite()),
            at in prop::option::of((-62_167_219_200i64..=253_402_300_799, 0u32..1_000_000_000)),
            evaluations in any::<u64>(),
            votes in any::<u64>(),
            last_alpha in prop::option::of(0.0..=1.0f64),
            still in prop_oneof![Just(0u64), any::<u64>()],
        ) {
            let last_update_at = at.map(|(s, n)| EventTime::new(s, n).unwrap());
            let p = ProjectScore { score, last_update_at, evaluations, votes, last_alpha, still };
            let back: ProjectScore = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
            prop_assert_eq!(back, p);
        }
    }

    proptest! {
        #[test]
        fn score_stays_in_unit_interval_and_time_never_goes_back(
            initial in 0.0..=1.0f64,
            lambda in prop_oneof![Just(0.0), 0.0..10.0f64, Just(1e300)],
            batches in prop::collection::vec((-1_000_000_000i64..1_000_000_000, prop::collection::vec((0.0..1e308f64, 0.0..=1.0f64), 1..20)), 1..50),
        ) {
            let mut s = ProjectScore::new(initial);
            let mut latest: Option<EventTime> = None;
            for (ms, votes) in batches {
                let Some(mean) = weighted_mean(&votes) else { continue };
                prop_assert!((0.0..=1.0).contains(&mean));
                let step = s.apply(at(ms), mean, votes.len() as u64, lambda);
                prop_assert!((0.0..=1.0).contains(&s.score), "score {}", s.score);
                prop_assert!((0.0..=1.0).contains(&step.alpha) && (0.0..=1.0).contains(&step.freshness));
                latest = Some(latest.map_or(at(ms), |l| l.max(at(ms))));
                prop_assert_eq!(s.last_update_at, latest);
            }
        }

        /// `still` is the length of the batches' tail that never passed the latest time before
        /// it: counted from the sequence, not from the score.
        #[test]
        fn still_counts_the_batches_since_time_last_moved(
            times in prop::collection::vec(0i64..20, 1..60),
        ) {
            let mut s = ProjectScore::new(0.5);
            for (n, &ms) in times.iter().enumerate() {
                let step = s.apply(at(ms), 0.5, 1, 0.01);
                let moved = |i: usize| i == 0 || times[i] > times[..i].iter().copied().max().unwrap_or(ms);
                let since = (0..=n).rev().take_while(|&i| !moved(i)).count() as u64;
                prop_assert_eq!(step.still, since);
                prop_assert_eq!(s.still, since);
            }
        }

        #[test]
        fn weighted_mean_is_order_independent_up_to_rounding(votes in prop::collection::vec((0.0..1e6f64, 0.0..=1.0f64), 1..30)) {
            let mut reversed = votes.clone();
            reversed.reverse();
            match (weighted_mean(&votes), weighted_mean(&reversed)) {
                (Some(a), Some(b)) => prop_assert!((a - b).abs() < 1e-12),
                (a, b) => prop_assert_eq!(a, b),
            }
        }
    }
}
