//! Small, exact statistics used by consensus and the bias audit.
//!
//! Every function takes plain slices and returns `None` (or a documented neutral value) where a
//! statistic is undefined, instead of NaN: outputs must never carry NaN.

/// Arithmetic mean; `None` for no values.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        None
    } else {
        Some(xs.iter().sum::<f64>() / xs.len() as f64)
    }
}

/// Population variance (divides by n); `None` for no values.
pub fn var_pop(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    Some(xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64)
}

/// Population standard deviation; `None` for no values.
pub fn std_pop(xs: &[f64]) -> Option<f64> {
    var_pop(xs).map(f64::sqrt)
}

/// Sample variance (divides by n - 1); `None` for fewer than two values.
pub fn var_sample(xs: &[f64]) -> Option<f64> {
    if xs.len() < 2 {
        return None;
    }
    let m = mean(xs)?;
    Some(xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64)
}

/// Median (mean of the two middle values for an even count); `None` for no values.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Weighted mean `sum(w*x)/sum(w)`; `None` when the weights sum to 0.
pub fn weighted_mean(pairs: &[(f64, f64)]) -> Option<f64> {
    let den: f64 = pairs.iter().map(|(w, _)| w).sum();
    if den > 0.0 {
        Some(pairs.iter().map(|(w, x)| w * x).sum::<f64>() / den)
    } else {
        None
    }
}

/// Pearson's r and its two-sided p-value from Student's t with n - 2 degrees of freedom.
/// Fewer than 3 pairs, or a constant variable: r = 0, p = 1 (no evidence of correlation).
pub fn pearson(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len().min(ys.len());
    if n < 3 {
        return (0.0, 1.0);
    }
    let (xs, ys) = (&xs[..n], &ys[..n]);
    let (mx, my) = (
        xs.iter().sum::<f64>() / n as f64,
        ys.iter().sum::<f64>() / n as f64,
    );
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
        syy += (y - my) * (y - my);
    }
    if sxx <= 0.0 || syy <= 0.0 {
        return (0.0, 1.0);
    }
    let r = (sxy / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0);
    let df = (n - 2) as f64;
    if r.abs() >= 1.0 {
        return (r, 0.0);
    }
    let t = r * (df / (1.0 - r * r)).sqrt();
    (r, student_t_two_sided_p(t, df))
}

/// Two-sided p-value of Student's t: P(|T| >= |t|) = I_{df/(df+t²)}(df/2, 1/2).
pub fn student_t_two_sided_p(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return 0.0;
    }
    regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5).clamp(0.0, 1.0)
}

/// Two-sided p-value of a standard normal z: erfc(|z| / sqrt 2).
pub fn normal_two_sided_p(z: f64) -> f64 {
    erfc(z.abs() / std::f64::consts::SQRT_2).clamp(0.0, 1.0)
}

/// The regularized incomplete beta function I_x(a, b), by Lentz's continued fraction
/// (Numerical Recipes §6.4), accurate to ~1e-14 for the arguments used here.
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_continued_fraction(1.0 - x, b, a) / b
    }
}

fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, n = 9; relative error ~1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1-x) = π / sin(πx)
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Complementary error function: the Chebyshev fit of Numerical Recipes' `erfcc` (fractional
/// error < 1.2e-7), plenty for alert p-values.
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let ans = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { ans } else { 2.0 - ans }
}

/// Krippendorff's alpha with the interval metric. `units[u]` holds the values the coders gave
/// unit u (missing values simply absent). `None` when undefined: fewer than two pairable values
/// (values in units with at least two), or no expected disagreement.
pub fn krippendorff_alpha_interval(units: &[Vec<f64>]) -> Option<f64> {
    let pairable = || units.iter().filter(|u| u.len() >= 2);
    let n: usize = pairable().map(Vec::len).sum();
    if n < 2 {
        return None;
    }
    let nf = n as f64;
    // Observed disagreement: within units, each ordered pair weighted 1/(m_u - 1).
    // sum over ordered pairs of (a - b)^2 within a unit = 2 m Σ(v - mean_u)^2.
    let mut d_o = 0.0;
    let mut total = 0.0;
    for u in pairable() {
        let m = u.len() as f64;
        let mean = u.iter().sum::<f64>() / m;
        let ss: f64 = u.iter().map(|v| (v - mean) * (v - mean)).sum();
        d_o += 2.0 * m * ss / (m - 1.0);
        total += u.iter().sum::<f64>();
    }
    d_o /= nf;
    // Expected disagreement: all ordered pairs of pairable values, 2n Σ(v - mean)^2 / (n(n-1)).
    let mean = total / nf;
    let ss: f64 = pairable()
        .flat_map(|u| u.iter())
        .map(|v| (v - mean) * (v - mean))
        .sum();
    let d_e = 2.0 * ss / (nf - 1.0);
    if d_e <= 0.0 {
        return None;
    }
    Some(1.0 - d_o / d_e)
}

/// Running mean and variance (Welford), mergeable and serializable for state snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Running {
    pub n: u64,
    pub mean: f64,
    /// Sum of squared deviations from the mean.
    pub m2: f64,
}

impl Running {
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    /// Folds another summary in (Chan et al.'s parallel update), as if its values were pushed.
    pub fn merge(&mut self, other: &Running) {
        if other.n == 0 {
            return;
        }
        let n = self.n + other.n;
        let d = other.mean - self.mean;
        self.mean += d * other.n as f64 / n as f64;
        self.m2 += other.m2 + d * d * (self.n as f64) * (other.n as f64) / n as f64;
        self.n = n;
    }

    /// Population standard deviation; 0 without values.
    pub fn std_pop(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            (self.m2 / self.n as f64).max(0.0).sqrt()
        }
    }

    /// Sample variance; 0 below two values.
    pub fn var_sample(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / (self.n - 1) as f64).max(0.0)
        }
    }

    /// Standard error of the mean; infinite below two values (no evidence yet).
    pub fn std_error(&self) -> f64 {
        if self.n < 2 {
            f64::INFINITY
        } else {
            (self.var_sample() / self.n as f64).sqrt()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn basic_moments() {
        let xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&xs), Some(5.0));
        assert_eq!(var_pop(&xs), Some(4.0));
        assert_eq!(std_pop(&xs), Some(2.0));
        assert_eq!(var_sample(&xs), Some(32.0 / 7.0));
        assert_eq!(median(&xs), Some(4.5));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(var_sample(&[1.0]), None);
        assert_eq!(mean(&[]), None);
        assert_eq!(weighted_mean(&[(1.0, 0.0), (3.0, 1.0)]), Some(0.75));
    }

    #[test]
    fn pearson_matches_scipy_documentation_example() {
        // scipy.stats.pearsonr([1, 2, 3, 4, 5], [10, 9, 2.5, 6, 4]) documents
        // r = -0.7426106572325057, p = 0.15055580885344558.
        let (r, p) = pearson(&[1.0, 2.0, 3.0, 4.0, 5.0], &[10.0, 9.0, 2.5, 6.0, 4.0]);
        assert!(close(r, -0.7426106572325057, 1e-15), "{r}");
        assert!(close(p, 0.15055580885344558, 1e-12), "{p}");
    }

    #[test]
    fn t_distribution_matches_published_critical_values() {
        // Two-sided 5% critical values of Student's t (standard tables): df 1 -> 12.706204736,
        // df 8 -> 2.306004135, df 10 -> 2.228138852, df 30 -> 2.042272456.
        for (df, t) in [
            (1.0, 12.706204736174707),
            (8.0, 2.306004135204166),
            (10.0, 2.2281388519649385),
            (30.0, 2.0422724563012373),
        ] {
            let p = student_t_two_sided_p(t, df);
            assert!(close(p, 0.05, 1e-10), "df {df}: {p}");
        }
        // Two-sided 1% at df 5: 4.032142983557536.
        assert!(close(
            student_t_two_sided_p(4.032142983557536, 5.0),
            0.01,
            1e-10
        ));
        assert_eq!(student_t_two_sided_p(0.0, 5.0), 1.0);
    }

    #[test]
    fn pearson_degenerate_cases() {
        assert_eq!(pearson(&[1.0, 2.0], &[2.0, 1.0]), (0.0, 1.0));
        assert_eq!(pearson(&[1.0, 1.0, 1.0], &[2.0, 1.0, 3.0]), (0.0, 1.0));
        let (r, p) = pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]);
        assert!(close(r, 1.0, 1e-15) && p < 1e-6, "{r} {p}");
    }

    #[test]
    fn normal_p_values() {
        assert!(close(normal_two_sided_p(1.959963984540054), 0.05, 1e-6));
        assert!(close(normal_two_sided_p(0.0), 1.0, 1e-6));
        assert!(close(normal_two_sided_p(-2.5758293035489), 0.01, 1e-6));
    }

    #[test]
    fn krippendorff_reference_example() {
        // Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 coders x 12
        // units example with missing values: interval alpha = 0.849.
        let a = [
            Some(1.),
            Some(2.),
            Some(3.),
            Some(3.),
            Some(2.),
            Some(1.),
            Some(4.),
            Some(1.),
            Some(2.),
            None,
            None,
            None,
        ];
        let b = [
            Some(1.),
            Some(2.),
            Some(3.),
            Some(3.),
            Some(2.),
            Some(2.),
            Some(4.),
            Some(1.),
            Some(2.),
            Some(5.),
            None,
            Some(3.),
        ];
        let c = [
            None,
            Some(3.),
            Some(3.),
            Some(3.),
            Some(2.),
            Some(3.),
            Some(4.),
            Some(2.),
            Some(2.),
            Some(5.),
            Some(1.),
            None,
        ];
        let d = [
            Some(1.),
            Some(2.),
            Some(3.),
            Some(3.),
            Some(2.),
            Some(4.),
            Some(4.),
            Some(1.),
            Some(2.),
            Some(5.),
            Some(1.),
            None,
        ];
        let units: Vec<Vec<f64>> = (0..12)
            .map(|u| [a[u], b[u], c[u], d[u]].into_iter().flatten().collect())
            .collect();
        let alpha = krippendorff_alpha_interval(&units).unwrap();
        assert!(close(alpha, 0.849, 0.0005), "{alpha}");
    }

    #[test]
    fn krippendorff_undefined_and_perfect() {
        assert_eq!(krippendorff_alpha_interval(&[vec![1.0], vec![2.0]]), None);
        assert_eq!(
            krippendorff_alpha_interval(&[vec![1.0, 1.0], vec![1.0, 1.0]]),
            None
        );
        assert_eq!(
            krippendorff_alpha_interval(&[vec![1.0, 1.0], vec![2.0, 2.0]]),
            Some(1.0)
        );
    }

    #[test]
    fn running_matches_batch() {
        let xs = [0.1, 0.5, 0.9, 0.3];
        let mut r = Running::default();
        xs.iter().for_each(|x| r.push(*x));
        assert!(close(r.mean, mean(&xs).unwrap(), 1e-15));
        assert!(close(r.var_sample(), var_sample(&xs).unwrap(), 1e-15));
    }

    #[test]
    fn merge_equals_pushing_everything() {
        let (xs, ys) = ([0.1, 0.5, 0.9], [0.3, 0.2]);
        let (mut a, mut b, mut all) = (Running::default(), Running::default(), Running::default());
        xs.iter().for_each(|x| a.push(*x));
        ys.iter().for_each(|y| b.push(*y));
        xs.iter().chain(&ys).for_each(|v| all.push(*v));
        a.merge(&b);
        assert_eq!(a.n, all.n);
        assert!(close(a.mean, all.mean, 1e-15) && close(a.m2, all.m2, 1e-15));
        assert!(close(
            all.std_pop(),
            std_pop(&[0.1, 0.5, 0.9, 0.3, 0.2]).unwrap(),
            1e-15
        ));
    }

    proptest! {
        #[test]
        fn p_values_are_probabilities(xs in prop::collection::vec(-1e6..1e6f64, 3..30), ys in prop::collection::vec(-1e6..1e6f64, 3..30)) {
            let (r, p) = pearson(&xs, &ys);
            prop_assert!((-1.0..=1.0).contains(&r) && (0.0..=1.0).contains(&p));
        }

        #[test]
        fn alpha_is_affine_invariant(units in prop::collection::vec(prop::collection::vec(0.0..1.0f64, 0..5), 1..8), a in 0.1..10.0f64, b in -5.0..5.0f64) {
            let moved: Vec<Vec<f64>> = units.iter().map(|u| u.iter().map(|v| a * v + b).collect()).collect();
            match (krippendorff_alpha_interval(&units), krippendorff_alpha_interval(&moved)) {
                (Some(x), Some(y)) => prop_assert!((x - y).abs() < 1e-6, "{x} {y}"),
                (None, None) => {}
                (x, y) => prop_assert!(x.is_none() || y.is_none(), "{x:?} {y:?}"),
            }
        }
    }
}
