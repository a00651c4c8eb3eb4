//! How a judge agrees with the humans over pairs `(s, h)` of its normalised score for an item
//! and the humans' score for the same item (both in [0, 1]). Every statistic is `None` where it
//! is undefined (too few pairs, no variance), never NaN.

use serde::Serialize;

use super::stats;

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
pub fn judge_agreement(pairs: &[(f64, f64)]) -> Agreement {
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
pub(super) fn kappa(pairs: &[(f64, f64)]) -> Option<f64> {
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
        let a = judge_agreement(&pairs);
        assert!(close(a.pearson_r, 1.0) && close(a.p_value, 0.0));
        assert!(close(a.kappa, 1.0) && close(a.krippendorff_alpha, 1.0));
        assert!(close(a.mean_abs_diff, 0.0) && close(a.bias, 0.0));
    }

    #[test]
    fn a_judge_that_inverts_the_humans_disagrees() {
        let pairs: Vec<(f64, f64)> = [0.1, 0.3, 0.8, 0.9].iter().map(|&x| (x, 1.0 - x)).collect();
        let a = judge_agreement(&pairs);
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
        let a = judge_agreement(&pairs);
        assert!(close(a.kappa, 0.5), "{a:?}");
        // Differences 0.1, 0.4, -0.2, 0.2: bias 0.125, mean |d| 0.225.
        assert!(close(a.bias, 0.125) && close(a.mean_abs_diff, 0.225));
    }

    #[test]
    fn undefined_statistics_are_none() {
        let one = judge_agreement(&[(0.3, 0.4)]);
        assert_eq!((one.pearson_r, one.p_value, one.kappa), (None, None, None));
        assert!(one.krippendorff_alpha.is_none());
        assert!(close(one.bias, -0.1));
        // A constant judge has no correlation; constant alike raters no kappa.
        let flat = judge_agreement(&[(0.7, 0.6), (0.7, 0.9), (0.7, 0.8)]);
        assert_eq!((flat.pearson_r, flat.kappa), (None, None));
        let two = judge_agreement(&[(0.2, 0.1), (0.8, 0.3)]);
        assert_eq!((two.pearson_r, two.p_value), (Some(1.0), None));
        assert_eq!(judge_agreement(&[]).mean_abs_diff, None);
    }

    proptest! {
        /// No NaN, and the order of the pairs does not matter.
        #[test]
        fn agreement_is_finite_and_order_free(
            pairs in prop::collection::vec((0.0..=1.0f64, 0.0..=1.0f64), 0..40),
            seed in any::<u64>(),
        ) {
            let a = judge_agreement(&pairs);
            let mut shuffled = pairs.clone();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, rng.random_range(0..=i));
            }
            let b = judge_agreement(&shuffled);
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
    }
}
