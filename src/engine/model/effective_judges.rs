//! The effective number of independent judges behind a consensus, `n² / Σ_ij ρ_ij`, over a
//! project's recent candidates, kept incrementally.
//!
//! Recomputing every judge pair's correlation over the whole window for each completed session
//! cost `O(judges² × window)` on the processing thread. Instead each pair of judges keeps
//! running sums over the recent candidates both scored (`n, Σa, Σb, Σa², Σb², Σab`), added to
//! when a candidate joins the window and subtracted from when it leaves; a session then costs
//! `O(judges²)` per candidate to update and `O(judges²)` to evaluate, whatever the window.
//! The sums are of scores in fixed point (multiples of 2^-20), so subtraction is exact: the
//! sums, and so every published figure, are the same however many candidates came and went,
//! and the same as rebuilt from the window after a restore. A correlation then differs from
//! one of the unrounded scores by about the rounding (2^-21) over the smaller of the two
//! judges' standard deviations over the window: about 1e-6 for judges whose scores spread over
//! the scale, more for one whose scores hardly move (1e-4 at a deviation of 0.005).

use std::collections::HashMap;

use serde::Serialize;

use super::agreement::judge_agreement;

/// The judge scores of one candidate.
pub type CandidateScores = Vec<(String, f64)>;

/// Whether every judge pair's correlation rested on enough shared candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    Full,
    /// Some pair shared fewer than `min_shared` candidates and counted as uncorrelated.
    Partial,
}

/// The effective number of judges `n² / Σ_ij ρ_ij` of judges whose scores are `scores[j][c]`
/// (`None` where judge `j` did not score candidate `c`): `ρ_ij` is the Pearson correlation of
/// judges `i` and `j` over the candidates both scored, negative ones clipped to 0, `ρ_ii = 1`.
/// Judges that always agree count as one, independent ones as `n`; the result is in `[1, n]`.
/// A pair with fewer than `min_shared` shared candidates, or one that does not vary over them,
/// counts as uncorrelated (`Basis::Partial` says the first happened). `None` without judges.
/// The direct computation, which [`Correlations`] keeps incrementally.
pub fn effective_judges(scores: &[Vec<Option<f64>>], min_shared: usize) -> Option<(f64, Basis)> {
    let n = scores.len();
    let rho = |i: usize, j: usize| {
        let pairs: Vec<(f64, f64)> = scores[i]
            .iter()
            .zip(&scores[j])
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        (pairs.len(), judge_agreement(&pairs).pearson_r)
    };
    combine(n, min_shared, rho)
}

/// `n² / (n + 2 Σ_{i<j} max(0, ρ_ij))` from each pair's shared count and correlation.
fn combine(
    n: usize,
    min_shared: usize,
    rho: impl Fn(usize, usize) -> (usize, Option<f64>),
) -> Option<(f64, Basis)> {
    if n == 0 {
        return None;
    }
    let mut basis = Basis::Full;
    let mut total = n as f64;
    for i in 0..n {
        for j in i + 1..n {
            let (shared, r) = rho(i, j);
            if shared < min_shared.max(2) {
                basis = Basis::Partial;
                continue;
            }
            total += 2.0 * r.unwrap_or(0.0).max(0.0);
        }
    }
    let n = n as f64;
    Some(((n * n / total).clamp(1.0, n), basis))
}

/// Fixed-point units per score unit.
const FIXED: f64 = (1u64 << 20) as f64;

/// Two judges' running sums over the candidates both scored, in fixed point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sums {
    n: i64,
    a: i128,
    b: i128,
    aa: i128,
    bb: i128,
    ab: i128,
}

impl Sums {
    fn apply(&mut self, a: i128, b: i128, sign: i64) {
        let s = i128::from(sign);
        self.n += sign;
        self.a += s * a;
        self.b += s * b;
        self.aa += s * a * a;
        self.bb += s * b * b;
        self.ab += s * a * b;
    }

    /// The Pearson correlation, `None` where either side does not vary.
    fn pearson(&self) -> Option<f64> {
        let n = i128::from(self.n);
        let cov = n * self.ab - self.a * self.b;
        let var_a = n * self.aa - self.a * self.a;
        let var_b = n * self.bb - self.b * self.b;
        if var_a <= 0 || var_b <= 0 {
            return None;
        }
        let r = cov as f64 / ((var_a as f64).sqrt() * (var_b as f64).sqrt());
        Some(r.clamp(-1.0, 1.0))
    }
}

/// The running sums of every pair of judges over a window of candidates.
#[derive(Debug, Clone, Default)]
pub struct Correlations {
    /// By judge pair, the smaller name first; a pair whose count falls to 0 is removed.
    pairs: HashMap<(String, String), Sums>,
}

impl Correlations {
    /// The sums of the candidates `recent` (what a restore rebuilds from).
    pub fn of<'a>(recent: impl Iterator<Item = &'a CandidateScores>) -> Correlations {
        let mut c = Correlations::default();
        for scores in recent {
            c.apply(scores, 1);
        }
        c
    }

    /// Adds (`sign` 1) or removes (`sign` -1) one candidate's scores.
    pub fn apply(&mut self, scores: &CandidateScores, sign: i64) {
        let fixed: Vec<(&str, i128)> = scores
            .iter()
            .map(|(j, s)| (j.as_str(), (s * FIXED).round() as i128))
            .collect();
        for (x, &(ja, a)) in fixed.iter().enumerate() {
            for &(jb, b) in &fixed[x + 1..] {
                if ja == jb {
                    continue;
                }
                let (key, a, b) = if ja < jb {
                    ((ja, jb), a, b)
                } else {
                    ((jb, ja), b, a)
                };
                let owned = (key.0.to_owned(), key.1.to_owned());
                let sums = self.pairs.entry(owned).or_default();
                sums.apply(a, b, sign);
                if sums.n == 0 {
                    self.pairs.remove(&(key.0.to_owned(), key.1.to_owned()));
                }
            }
        }
    }

    /// Judge pairs held.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The effective number of `judges` (see [`effective_judges`]), in `O(judges²)`.
    pub fn effective_judges(&self, judges: &[&str], min_shared: usize) -> Option<(f64, Basis)> {
        combine(judges.len(), min_shared, |i, j| {
            let (a, b) = (judges[i], judges[j]);
            let key = if a < b { (a, b) } else { (b, a) };
            self.pairs
                .get(&(key.0.to_owned(), key.1.to_owned()))
                .map_or((0, None), |s| (s.n as usize, s.pearson()))
        })
    }
}

/// Two are equal when they hold the same sums: a cache of the window it was built from.
impl PartialEq for Correlations {
    fn eq(&self, other: &Self) -> bool {
        self.pairs == other.pairs
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn identical_judges_count_once_and_independent_ones_nearly_in_full() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let candidates = 400;
        let one: Vec<Option<f64>> = (0..candidates).map(|_| Some(rng.random())).collect();
        let same = vec![one.clone(), one.clone(), one];
        assert_eq!(effective_judges(&same, 10), Some((1.0, Basis::Full)));
        let independent: Vec<Vec<Option<f64>>> = (0..3)
            .map(|_| (0..candidates).map(|_| Some(rng.random())).collect())
            .collect();
        let (n_eff, basis) = effective_judges(&independent, 10).unwrap();
        assert!(n_eff > 2.7 && n_eff <= 3.0, "{n_eff}");
        assert_eq!(basis, Basis::Full);
        // Two that never scored the same candidate: uncorrelated, and said to be partial.
        let apart = vec![vec![Some(0.1), None], vec![None, Some(0.2)]];
        assert_eq!(effective_judges(&apart, 10), Some((2.0, Basis::Partial)));
        assert_eq!(effective_judges(&[], 10), None);
    }

    #[test]
    fn running_sums_give_the_hand_checked_correlation() {
        // a = (0, 0.5, 1), b = (0, 0.25, 1): the deviations from the means 0.5 and 5/12
        // give S_ab = 0.5, S_aa = 0.5, S_bb = 0.541667, so r = 0.5 / sqrt(0.270833) = 0.960769.
        let mut c = Correlations::default();
        for (a, b) in [(0.0, 0.0), (0.5, 0.25), (1.0, 1.0)] {
            c.apply(&vec![("a".into(), a), ("b".into(), b)], 1);
        }
        let key = ("a".to_owned(), "b".to_owned());
        let r = c.pairs[&key].pearson().unwrap();
        assert!((r - 0.960_768_923).abs() < 1e-6, "{r}");
        // Removing what was added leaves nothing.
        for (a, b) in [(0.0, 0.0), (0.5, 0.25), (1.0, 1.0)] {
            c.apply(&vec![("b".into(), b), ("a".into(), a)], -1);
        }
        assert!(c.is_empty());
    }

    fn window_of(candidates: &[Vec<(usize, u16)>]) -> Vec<CandidateScores> {
        candidates
            .iter()
            .map(|c| {
                c.iter()
                    .map(|&(j, s)| (format!("j{j}"), f64::from(s) / 1000.0))
                    .collect()
            })
            .collect()
    }

    proptest! {
        /// The effective number of judges lies in [1, n].
        #[test]
        fn effective_judges_lie_between_one_and_n(
            scores in prop::collection::vec(prop::collection::vec(prop::option::of(0.0..=1.0f64), 12), 1..6),
        ) {
            let (n_eff, _) = effective_judges(&scores, 3).unwrap();
            prop_assert!(n_eff.is_finite() && n_eff >= 1.0 && n_eff <= scores.len() as f64, "{}", n_eff);
        }

        /// Kept incrementally over a sliding window, the sums equal those rebuilt from the
        /// window, and the effective number equals the direct computation over the same scores
        /// rounded to 2^-20 (what the sums hold), within [1, n]. (Against the unrounded scores
        /// the difference follows how little a judge's scores move: see the module doc.)
        #[test]
        fn incremental_equals_direct(
            candidates in prop::collection::vec(
                prop::collection::btree_map(0..5usize, 0..=1000u16, 0..5)
                    .prop_map(|m| m.into_iter().collect::<Vec<_>>()),
                0..60,
            ),
            window in 1..20usize,
            min_shared in 0..5usize,
        ) {
            let all = window_of(&candidates);
            let mut kept = Correlations::default();
            let mut recent: BTreeMap<u64, CandidateScores> = BTreeMap::new();
            for (seq, c) in all.iter().enumerate() {
                kept.apply(c, 1);
                recent.insert(seq as u64, c.clone());
                while recent.len() > window {
                    let (_, gone) = recent.pop_first().unwrap();
                    kept.apply(&gone, -1);
                }
            }
            prop_assert_eq!(&kept, &Correlations::of(recent.values()));
            let judges = ["j0", "j1", "j2", "j3", "j4"];
            let rounded = |s: f64| (s * FIXED).round() / FIXED;
            let scores: Vec<Vec<Option<f64>>> = judges
                .iter()
                .map(|j| recent.values().map(|c| c.iter().find(|(x, _)| x == j).map(|(_, s)| rounded(*s))).collect())
                .collect();
            let direct = effective_judges(&scores, min_shared);
            let incremental = kept.effective_judges(&judges, min_shared);
            match (direct, incremental) {
                (Some((d, db)), Some((i, ib))) => {
                    prop_assert_eq!(db, ib);
                    prop_assert!((d - i).abs() < 1e-9, "{} {}", d, i);
                    prop_assert!((1.0..=5.0).contains(&i));
                }
                (d, i) => prop_assert_eq!(d, i),
            }
        }
    }
}
