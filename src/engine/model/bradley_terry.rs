//! Bradley-Terry strengths from pairwise outcomes, with bootstrap confidence intervals: how
//! Chatbot Arena ranks models, here over the sessions of a leaderboard window.
//!
//! Model `i` beats model `j` with probability `p_i / (p_i + p_j)`; with `theta = ln p` the
//! log-likelihood is `sum_ij w_ij ln sigma(theta_i - theta_j)`, `w_ij` the score of `i` against
//! `j` (a win counts 1, a tie half).
//!
//! **The prior.** The maximum-likelihood estimate exists only where the comparisons are
//! strongly connected: a model that never lost has no finite maximum, nor one that never won,
//! nor two groups that never met. Those are the normal case early in a model's life, so each
//! model is also given one virtual tie ([`PRIOR_GAMES`] comparison scored half) against a
//! fixed reference model of strength 1, rated 1000. The posterior mode then always exists and
//! is unique (the prior term is strictly concave), every compared model gets a finite rating,
//! and ratings are on one scale relative to the reference, not re-centred per fit, so a model
//! missing from a bootstrap resample does not move the others. Its effect: each rating is
//! pulled towards 1000 by the weight of one comparison; an unbeaten model with `n` wins
//! against models at 1000 lands near `1000 + 400 log10(2n + 1)` instead of at infinity, and a
//! model with many comparisons hardly moves. This is the same estimate as an unregularised
//! fit on the data with one extra model that ties each model once (what the Python suite
//! checks against `choix`). [`Prior`] says when a rating rests mostly on the prior.
//!
//! Newton's method with backtracking finds the mode (the objective is concave), until no
//! `theta_i` moves by more than 1e-9: a few dozen steps of `O(n^3)` even on a long chain of
//! near-certain wins, where minorisation-maximisation needs a hundred thousand. Ratings are
//! reported on the Elo-like scale `400 * log10(p) + 1000`.
//!
//! Confidence intervals resample the window's sessions with replacement (a session's outcomes
//! stay together, as they are not independent), refit, and take the 2.5th and 97.5th
//! percentiles of each model's rating; a model a resample did not draw counts at the
//! reference (what that resample knows of it). The interval is joined with the rating plus or
//! minus 1.96 standard errors of its place among the others from the posterior's curvature,
//! which a window of very few
//! sessions needs (see [`bootstrap`]), so it always contains the rating. The resampling is seeded ([`seed_of`]
//! derives the seed from the outcomes), so the same window gives the same intervals: replay
//! stays byte-identical.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The outcomes of `games` comparisons of models `a` and `b` (indexes), and `a`'s total score
/// in them: a win counts 1, a tie 0.5, a loss 0. One comparison is `games: 1.0`; a leaderboard
/// block sums many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Games {
    pub a: usize,
    pub b: usize,
    pub score: f64,
    pub games: f64,
}

/// The weight of each model's virtual tie against the reference (see the module doc).
pub const PRIOR_GAMES: f64 = 1.0;

/// The rating of the reference model, and of a model with no evidence but the prior.
pub const REFERENCE: f64 = 1000.0;

/// Why a model's rating rests mostly on the prior rather than on its comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior {
    /// It won every comparison it was in: without the prior its rating is unbounded above.
    NeverLost,
    /// It lost every comparison it was in.
    NeverWon,
    /// Its comparisons do not connect it both ways with the largest group of models that
    /// do (won and lost among each other): its distance to that group rests on the prior.
    Separated,
}

impl Prior {
    /// The note a leaderboard row gives for it.
    pub fn note(self) -> &'static str {
        match self {
            Prior::NeverLost => "never lost a comparison: the rating rests mostly on the prior",
            Prior::NeverWon => "never won a comparison: the rating rests mostly on the prior",
            Prior::Separated => {
                "not compared both ways with the main group: its distance to it rests mostly on the prior"
            }
        }
    }
}

/// The outcomes' scores and counts by pair, `models * models` row by row.
struct Table {
    models: usize,
    /// `wins[i * models + j]`: the score of `i` against `j`.
    wins: Vec<f64>,
    /// `games[i * models + j]`: the comparisons of `i` and `j`.
    games: Vec<f64>,
}

impl Table {
    fn of<'a>(models: usize, outcomes: impl Iterator<Item = &'a Games>) -> Table {
        let mut t = Table {
            models,
            wins: vec![0.0; models * models],
            games: vec![0.0; models * models],
        };
        for o in outcomes {
            if o.a == o.b || o.a >= models || o.b >= models || !(0.0..=o.games).contains(&o.score) {
                continue;
            }
            let (ab, ba) = (o.a * models + o.b, o.b * models + o.a);
            t.wins[ab] += o.score;
            t.wins[ba] += o.games - o.score;
            t.games[ab] += o.games;
            t.games[ba] += o.games;
        }
        t
    }

    /// The score of `i` against `j`.
    fn wins(&self, i: usize, j: usize) -> f64 {
        self.wins[i * self.models + j]
    }

    /// The comparisons of `i` and `j`.
    fn games(&self, i: usize, j: usize) -> f64 {
        self.games[i * self.models + j]
    }

    /// The score of `i` against every model, and its comparisons with every model.
    fn row(&self, i: usize) -> (&[f64], &[f64]) {
        let at = i * self.models..(i + 1) * self.models;
        (&self.wins[at.clone()], &self.games[at])
    }

    /// The models in at least one comparison.
    fn compared(&self) -> Vec<usize> {
        (0..self.models)
            .filter(|&i| self.row(i).1.iter().sum::<f64>() > 0.0)
            .collect()
    }
}

/// The most Newton steps a fit takes; it converges far sooner.
const MAX_ITERATIONS: usize = 200;

/// A fit: each model's rating, the standard error of its place among the others from the
/// curvature of the posterior at its mode (both `None` for a model in no comparison), and
/// whether it rests mostly on the prior.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub ratings: Vec<Option<f64>>,
    pub errors: Vec<Option<f64>>,
    pub priors: Vec<Option<Prior>>,
}

/// Rating points per unit of `theta`.
const SCALE: f64 = 400.0 / std::f64::consts::LN_10;

/// Fits `models` models to `outcomes` (see the module doc).
pub fn fit<'a>(models: usize, outcomes: impl Iterator<Item = &'a Games>) -> Fit {
    let t = Table::of(models, outcomes);
    let compared = t.compared();
    let theta = thetas(&t, &compared);
    let n = compared.len();
    let mut hessian = vec![0.0; n * n];
    derivatives(&t, &compared, &theta, (&mut vec![0.0; n], &mut hessian));
    let mut fit = Fit {
        ratings: vec![None; models],
        errors: vec![None; models],
        priors: priors(&t, &compared),
    };
    let errors = contrast_errors(&hessian, n);
    for (a, &i) in compared.iter().enumerate() {
        fit.ratings[i] = Some(REFERENCE + SCALE * theta[a]);
        fit.errors[i] = errors.as_ref().map(|e| SCALE * e[a]);
    }
    fit
}

/// The standard error of each `theta_a - mean(theta)` from the posterior's curvature (the
/// inverse of the negated Hessian `h`, `n * n`, as covariance): a model's place among the
/// others, which is what a comparison of two intervals asks. Its level against the reference
/// alone is known only as well as the weak prior says, which no comparison needs.
fn contrast_errors(h: &[f64], n: usize) -> Option<Vec<f64>> {
    let columns: Vec<Vec<f64>> = (0..n)
        .map(|a| {
            let mut unit = vec![0.0; n];
            unit[a] = 1.0;
            solve(&mut h.to_vec(), &mut unit).then_some(unit)
        })
        .collect::<Option<_>>()?;
    let nf = n as f64;
    let row_means: Vec<f64> = columns.iter().map(|c| c.iter().sum::<f64>() / nf).collect();
    let total = row_means.iter().sum::<f64>() / nf;
    Some(
        (0..n)
            .map(|a| (columns[a][a] - 2.0 * row_means[a] + total).max(0.0).sqrt())
            .collect(),
    )
}

/// The ratings alone, as each bootstrap resample needs them.
fn ratings<'a>(models: usize, outcomes: impl Iterator<Item = &'a Games>) -> Vec<Option<f64>> {
    let t = Table::of(models, outcomes);
    let compared = t.compared();
    let mut ratings = vec![None; models];
    for (&i, theta) in compared.iter().zip(thetas(&t, &compared)) {
        ratings[i] = Some(REFERENCE + SCALE * theta);
    }
    ratings
}

/// For each model in a comparison, whether its rating rests mostly on the prior ([`Prior`]).
fn priors(t: &Table, compared: &[usize]) -> Vec<Option<Prior>> {
    let models = t.models;
    let components = strong_components(t, compared);
    let largest = components
        .iter()
        .max_by_key(|c| c.len())
        .map(Vec::len)
        .unwrap_or(0);
    let mut notes = vec![None; models];
    for component in &components {
        for &i in component {
            let (wins, games) = t.row(i);
            let won: f64 = wins.iter().sum();
            let played: f64 = games.iter().sum();
            notes[i] = if won == 0.0 {
                Some(Prior::NeverWon)
            } else if won == played {
                Some(Prior::NeverLost)
            } else if component.len() < largest
                || components.iter().filter(|c| c.len() == largest).count() > 1
            {
                Some(Prior::Separated)
            } else {
                None
            };
        }
    }
    notes
}

/// The strongly connected components of `models` under "won at least a tie against", each
/// sorted; a model reaches another of its component both along wins and along losses.
fn strong_components(t: &Table, models: &[usize]) -> Vec<Vec<usize>> {
    let reach = |from: usize, forward: bool| {
        let mut seen = vec![false; t.models];
        seen[from] = true;
        let mut stack = vec![from];
        while let Some(i) = stack.pop() {
            for &j in models {
                let edge = if forward { t.wins(i, j) } else { t.wins(j, i) };
                if !seen[j] && edge > 0.0 {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        seen
    };
    let mut placed = vec![false; t.models];
    let mut components = Vec::new();
    for &i in models {
        if placed[i] {
            continue;
        }
        let (down, up) = (reach(i, true), reach(i, false));
        let component: Vec<usize> = models
            .iter()
            .copied()
            .filter(|&j| down[j] && up[j])
            .collect();
        for &j in &component {
            placed[j] = true;
        }
        components.push(component);
    }
    components
}

/// The posterior mode of `theta` for `models` (see the module doc), by Newton's method.
fn thetas(t: &Table, models: &[usize]) -> Vec<f64> {
    let n = models.len();
    let mut theta = vec![0.0; n];
    let objective = |theta: &[f64]| {
        let mut l = 0.0;
        for a in 0..n {
            // The virtual tie: PRIOR_GAMES / 2 (ln sigma(theta) + ln sigma(-theta)).
            let (minus, plus) = softplus_both(theta[a]);
            l -= PRIOR_GAMES / 2.0 * (minus + plus);
            for b in a + 1..n {
                let (i, j) = (models[a], models[b]);
                // A pair never compared adds nothing.
                if t.games(i, j) == 0.0 {
                    continue;
                }
                // w_ij ln sigma(d) + w_ji ln sigma(-d), with ln sigma(x) = -ln(1 + e^-x).
                let (minus, plus) = softplus_both(theta[a] - theta[b]);
                l -= t.wins(i, j) * minus + t.wins(j, i) * plus;
            }
        }
        l
    };
    let mut current = objective(&theta);
    // Each step's buffers, reused: a fit takes hundreds of steps in a refit's resamples.
    let (mut gradient, mut hessian) = (vec![0.0; n], vec![0.0; n * n]);
    let (mut step, mut next) = (vec![0.0; n], vec![0.0; n]);
    for _ in 0..MAX_ITERATIONS {
        derivatives(t, models, &theta, (&mut gradient, &mut hessian));
        step.copy_from_slice(&gradient);
        if !solve(&mut hessian, &mut step) {
            break;
        }
        // The Newton decrement, twice the gain the step promises. Below what rounding can
        // tell apart in the objective, the full step is taken without a line search (whose
        // comparisons would be noise, halving the step forty times for nothing).
        let decrement: f64 = gradient.iter().zip(&step).map(|(g, d)| g * d).sum();
        let settled = decrement < 1e-12 * current.abs().max(1.0);
        // Backtrack until the objective does not fall: it is concave, so this converges.
        let mut scale = 1.0;
        loop {
            for (x, (old, d)) in next.iter_mut().zip(theta.iter().zip(&step)) {
                *x = old + scale * d;
            }
            let l = objective(&next);
            if settled || l >= current || scale < 1e-12 {
                current = l;
                break;
            }
            scale /= 2.0;
        }
        let moved = step.iter().map(|d| (scale * d).abs()).fold(0.0, f64::max);
        std::mem::swap(&mut theta, &mut next);
        if moved < 1e-9 {
            break;
        }
    }
    theta
}

/// The objective's gradient and negated Hessian at `theta` (positive definite thanks to the
/// prior), written over `gradient` and `hessian` (row by row, `n * n`).
fn derivatives(
    t: &Table,
    models: &[usize],
    theta: &[f64],
    (gradient, hessian): (&mut [f64], &mut [f64]),
) {
    let n = models.len();
    gradient.fill(0.0);
    hessian.fill(0.0);
    for a in 0..n {
        let s = sigmoid(theta[a]);
        gradient[a] += PRIOR_GAMES * (0.5 - s);
        hessian[a * n + a] += PRIOR_GAMES * s * (1.0 - s);
        for b in 0..n {
            let (i, j) = (models[a], models[b]);
            if a == b || t.games(i, j) == 0.0 {
                continue;
            }
            let (wins, games) = (t.wins(i, j), t.games(i, j));
            let p = sigmoid(theta[a] - theta[b]);
            gradient[a] += wins - games * p;
            hessian[a * n + a] += games * p * (1.0 - p);
            hessian[a * n + b] -= games * p * (1.0 - p);
        }
    }
}

/// `1 / (1 + e^-x)`.
fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `ln(1 + e^-x)` and `ln(1 + e^x)` without overflow: each is `ln(1 + e^-|x|)`, plus `|x|` for
/// the one whose exponent is positive, so one logarithm gives both.
fn softplus_both(x: f64) -> (f64, f64) {
    let tail = (-x.abs()).exp().ln_1p();
    if x > 0.0 {
        (tail, x + tail)
    } else if x < 0.0 {
        (-x + tail, tail)
    } else {
        (tail, tail)
    }
}

/// Solves `a x = b` for a symmetric positive-definite `a` (`n * n`, row by row) by Cholesky,
/// writing `x` over `b` and the factor over `a`; `false` if `a` is not (numerically) positive
/// definite.
fn solve(a: &mut [f64], b: &mut [f64]) -> bool {
    let n = b.len();
    // a = L L^T, L written over a's lower triangle.
    for j in 0..n {
        let d = a[j * n + j] - (0..j).map(|k| a[j * n + k] * a[j * n + k]).sum::<f64>();
        if d.is_nan() || d <= 0.0 {
            return false;
        }
        a[j * n + j] = d.sqrt();
        for i in j + 1..n {
            let s = a[i * n + j] - (0..j).map(|k| a[i * n + k] * a[j * n + k]).sum::<f64>();
            a[i * n + j] = s / a[j * n + j];
        }
    }
    for i in 0..n {
        b[i] = (b[i] - (0..i).map(|k| a[i * n + k] * b[k]).sum::<f64>()) / a[i * n + i];
    }
    for i in (0..n).rev() {
        b[i] = (b[i] - (i + 1..n).map(|k| a[k * n + i] * b[k]).sum::<f64>()) / a[i * n + i];
    }
    true
}

/// A 95% confidence interval of a rating, finite (the prior keeps every resample's ratings
/// finite).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// Whether the two intervals share a point.
    pub fn overlaps(&self, other: &Interval) -> bool {
        self.low <= other.high && other.low <= self.high
    }
}

/// Each model's 95% interval: the 2.5th to 97.5th percentile of its rating over `rounds`
/// resamples of `sessions` (each a list of outcomes: a session's, or a block of sessions'
/// summed), drawn with the generator seeded by `seed`, joined with `point`'s `rating +- 1.96`
/// standard errors (`point` is the fit of all of `sessions`). Each covers the other's blind
/// spot: a window of one or two resampling units resamples to itself (an interval of width
/// zero), and the curvature cannot see that a session's outcomes move together. `None` for a
/// model `point` does not rate, or for every model when `rounds` is 0. It costs `rounds` fits
/// of the outcomes in `sessions`: a caller on the processing thread bounds what it passes.
pub fn bootstrap(
    point: &Fit,
    sessions: &[Vec<Games>],
    rounds: usize,
    seed: u64,
) -> Vec<Option<Interval>> {
    let models = point.ratings.len();
    if sessions.is_empty() || rounds == 0 {
        return vec![None; models];
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); models];
    let mut drawn: Vec<&Vec<Games>> = Vec::with_capacity(sessions.len());
    for _ in 0..rounds {
        drawn.clear();
        for _ in 0..sessions.len() {
            drawn.push(&sessions[rng.random_range(0..sessions.len())]);
        }
        let ratings = ratings(models, drawn.iter().flat_map(|s| s.iter()));
        for (model, rating) in ratings.into_iter().enumerate() {
            samples[model].push(rating.unwrap_or(REFERENCE));
        }
    }
    samples
        .into_iter()
        .enumerate()
        .map(|(model, mut s)| {
            let rating = point.ratings[model]?;
            let error = point.errors[model].unwrap_or(0.0);
            s.sort_by(f64::total_cmp);
            let at = |q: f64| {
                let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
                s[rank - 1]
            };
            Some(Interval {
                low: at(0.025).min(rating - 1.96 * error),
                high: at(0.975).max(rating + 1.96 * error),
            })
        })
        .collect()
}

/// A bootstrap seed that is a function of the outcomes alone, so that a window gives the same
/// intervals in every run.
pub fn seed_of(sessions: &[Vec<Games>]) -> u64 {
    let mut bytes = Vec::with_capacity(sessions.len() * 24);
    for s in sessions {
        for o in s {
            bytes.extend_from_slice(&(o.a as u64).to_le_bytes());
            bytes.extend_from_slice(&(o.b as u64).to_le_bytes());
            bytes.extend_from_slice(&o.score.to_bits().to_le_bytes());
            bytes.extend_from_slice(&o.games.to_bits().to_le_bytes());
        }
        bytes.push(0xFF);
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

#[cfg(test)]
mod tests;
