//! Bradley-Terry strengths from pairwise outcomes, with bootstrap confidence intervals: how
//! Chatbot Arena ranks models, here over the sessions of a leaderboard window.
//!
//! Model `i` beats model `j` with probability `p_i / (p_i + p_j)`. The maximum-likelihood
//! strengths maximise `sum_ij w_ij ln(p_i / (p_i + p_j))`, with `w_ij` the score of `i` against
//! `j` (a win counts 1, a tie half). The log-likelihood is concave in `theta = ln p`, so
//! Newton's method with backtracking finds them, until no `ln p_i` moves by more than 1e-9: a
//! few dozen steps of `O(n^3)` even where minorisation-maximisation (Hunter 2004), linear per
//! step, needs a hundred thousand (a long chain of near-certain wins).
//! Strengths are fixed by their geometric mean, 1, and reported on the Elo-like scale
//! `400 * log10(p) + 1000`, so the rated models average 1000.
//!
//! The estimate exists only where every model has won and lost something against the others
//! (Zermelo's condition: the graph of "won at least a tie against" is strongly connected). A
//! model that never lost has an unbounded rating, one that never won an unbounded negative one:
//! they are reported `None` with the reason, never as an invented number, and the others are
//! rated without them (repeatedly, as removing one may leave another unbeaten). If the rest still
//! do not all compare with each other, none of them is rated.
//!
//! Confidence intervals resample the window's sessions with replacement (a session's outcomes
//! stay together, as they are not independent), refit, and take the 2.5th and 97.5th
//! percentiles of each model's rating. An unbounded rating in a resample counts as -inf or
//! +inf, so an interval may be open on one side (`None`). The resampling is seeded
//! ([`seed_of`] derives the seed from the outcomes), so the same window gives the same
//! intervals: replay stays byte-identical.

use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The outcomes of `games` comparisons of models `a` and `b` (indexes), and `a`'s total score
/// in them: a win counts 1, a tie 0.5, a loss 0. One comparison is `games: 1.0`; a leaderboard
/// block sums many.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub a: usize,
    pub b: usize,
    pub score: f64,
    pub games: f64,
}

/// Why a model has no rating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrated {
    /// It was in no comparison.
    NotCompared,
    /// It won every comparison it was in: its strength has no finite maximum.
    NeverLost,
    /// It lost every comparison it was in.
    NeverWon,
    /// The comparisons do not connect it with every other rated model.
    Disconnected,
}

impl Unrated {
    /// The note a leaderboard row gives for it.
    pub fn note(self) -> &'static str {
        match self {
            Unrated::NotCompared => "no comparisons",
            Unrated::NeverLost => "never lost a comparison: rating unbounded above",
            Unrated::NeverWon => "never won a comparison: rating unbounded below",
            Unrated::Disconnected => "comparisons do not connect it with the other models",
        }
    }
}

/// Each model's rating on the Elo-like scale, or why it has none.
pub type Ratings = Vec<Result<f64, Unrated>>;

/// The outcomes' scores and counts by pair.
struct Table {
    /// `wins[i][j]`: the score of `i` against `j`.
    wins: Vec<Vec<f64>>,
    /// `games[i][j]`: the comparisons of `i` and `j`.
    games: Vec<Vec<f64>>,
}

impl Table {
    fn of<'a>(models: usize, outcomes: impl Iterator<Item = &'a Outcome>) -> Table {
        let mut t = Table {
            wins: vec![vec![0.0; models]; models],
            games: vec![vec![0.0; models]; models],
        };
        for o in outcomes {
            if o.a == o.b || o.a >= models || o.b >= models || !(0.0..=o.games).contains(&o.score) {
                continue;
            }
            t.wins[o.a][o.b] += o.score;
            t.wins[o.b][o.a] += o.games - o.score;
            t.games[o.a][o.b] += o.games;
            t.games[o.b][o.a] += o.games;
        }
        t
    }
}

/// The most Newton steps a fit takes; a strongly connected table converges far sooner.
const MAX_ITERATIONS: usize = 200;

/// The maximum-likelihood ratings of `models` models from `outcomes` (see the module doc).
pub fn fit<'a>(models: usize, outcomes: impl Iterator<Item = &'a Outcome>) -> Ratings {
    let t = Table::of(models, outcomes);
    let mut ratings: Ratings = vec![Err(Unrated::NotCompared); models];
    let mut rated: Vec<usize> = (0..models)
        .filter(|&i| t.games[i].iter().sum::<f64>() > 0.0)
        .collect();
    // Drop the unbeaten and the winless, again until none is left among the rest.
    loop {
        let dropped: Vec<(usize, Unrated)> = rated
            .iter()
            .filter_map(|&i| {
                let (won, played) = rated.iter().fold((0.0, 0.0), |(w, n), &j| {
                    (w + t.wins[i][j], n + t.games[i][j])
                });
                let unrated = if played == 0.0 {
                    Unrated::Disconnected
                } else if won == 0.0 {
                    Unrated::NeverWon
                } else if won == played {
                    Unrated::NeverLost
                } else {
                    return None;
                };
                Some((i, unrated))
            })
            .collect();
        if dropped.is_empty() {
            break;
        }
        for (i, unrated) in dropped {
            ratings[i] = Err(unrated);
            rated.retain(|&r| r != i);
        }
    }
    if !strongly_connected(&t, &rated) {
        for &i in &rated {
            ratings[i] = Err(Unrated::Disconnected);
        }
        return ratings;
    }
    let p = strengths(&t, &rated);
    for (&i, p) in rated.iter().zip(p) {
        ratings[i] = Ok(400.0 * p.log10() + 1000.0);
    }
    ratings
}

/// Whether every model of `rated` reaches every other through "won at least a tie against".
fn strongly_connected(t: &Table, rated: &[usize]) -> bool {
    let Some(&first) = rated.first() else {
        return true;
    };
    // From the first model, along wins and along losses: both must reach everyone.
    [true, false].into_iter().all(|forward| {
        let mut seen = vec![false; t.wins.len()];
        seen[first] = true;
        let mut stack = vec![first];
        while let Some(i) = stack.pop() {
            for &j in rated {
                let edge = if forward { t.wins[i][j] } else { t.wins[j][i] };
                if !seen[j] && edge > 0.0 {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        rated.iter().all(|&i| seen[i])
    })
}

/// The strengths of `rated` (strongly connected), geometric mean 1, by Newton's method on the
/// log-likelihood in `theta = ln p` (see the module doc).
fn strengths(t: &Table, rated: &[usize]) -> Vec<f64> {
    let n = rated.len();
    let mut theta = vec![0.0; n];
    if n < 2 {
        return vec![1.0; n];
    }
    let log_likelihood = |theta: &[f64]| {
        let mut l = 0.0;
        for a in 0..n {
            for b in a + 1..n {
                let (i, j) = (rated[a], rated[b]);
                let d = theta[a] - theta[b];
                // w_ij ln sigma(d) + w_ji ln sigma(-d), with ln sigma(x) = -ln(1 + e^-x).
                l -= t.wins[i][j] * softplus(-d) + t.wins[j][i] * softplus(d);
            }
        }
        l
    };
    let mut current = log_likelihood(&theta);
    for _ in 0..MAX_ITERATIONS {
        // Gradient and the negated Hessian, with the last model's theta held at 0 (the scale
        // has one free constant) so the system is positive definite.
        let m = n - 1;
        let mut gradient = vec![0.0; m];
        let mut hessian = vec![vec![0.0; m]; m];
        for a in 0..n {
            for b in 0..n {
                let (i, j) = (rated[a], rated[b]);
                if a == b || t.games[i][j] == 0.0 {
                    continue;
                }
                let p = 1.0 / (1.0 + (theta[b] - theta[a]).exp());
                if a < m {
                    gradient[a] += t.wins[i][j] - t.games[i][j] * p;
                    hessian[a][a] += t.games[i][j] * p * (1.0 - p);
                    if b < m {
                        hessian[a][b] -= t.games[i][j] * p * (1.0 - p);
                    }
                }
            }
        }
        let Some(step) = solve(hessian, gradient) else {
            break;
        };
        // Backtrack until the likelihood does not fall: it is concave, so this converges.
        let mut scale = 1.0;
        let mut next = theta.clone();
        loop {
            for (x, (old, d)) in next.iter_mut().zip(theta.iter().zip(&step)) {
                *x = old + scale * d;
            }
            let l = log_likelihood(&next);
            if l >= current || scale < 1e-12 {
                current = l;
                break;
            }
            scale /= 2.0;
        }
        let moved = step.iter().map(|d| (scale * d).abs()).fold(0.0, f64::max);
        theta = next;
        if moved < 1e-9 {
            break;
        }
    }
    let mean = theta.iter().sum::<f64>() / n as f64;
    theta.iter().map(|x| (x - mean).exp()).collect()
}

/// `ln(1 + e^x)` without overflow.
fn softplus(x: f64) -> f64 {
    if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// The solution of `a x = b` for a symmetric positive-definite `a` (Cholesky), or `None` if
/// `a` is not (numerically) positive definite.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    // a = L L^T, L written over a's lower triangle.
    for j in 0..n {
        let d = a[j][j] - (0..j).map(|k| a[j][k] * a[j][k]).sum::<f64>();
        if d.is_nan() || d <= 0.0 {
            return None;
        }
        a[j][j] = d.sqrt();
        for i in j + 1..n {
            let s = a[i][j] - (0..j).map(|k| a[i][k] * a[j][k]).sum::<f64>();
            a[i][j] = s / a[j][j];
        }
    }
    for i in 0..n {
        b[i] = (b[i] - (0..i).map(|k| a[i][k] * b[k]).sum::<f64>()) / a[i][i];
    }
    for i in (0..n).rev() {
        b[i] = (b[i] - (i + 1..n).map(|k| a[k][i] * b[k]).sum::<f64>()) / a[i][i];
    }
    Some(b)
}

/// A 95% confidence interval of a rating. A bound is infinite where the resamples put the
/// rating unbounded there: `-inf` for one that never won in them, `+inf` for one that never
/// lost (both bounds at `+inf` for a model unbeaten in nearly every resample).
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

    /// A bound as reported: `None` where it is unbounded.
    pub fn finite(bound: f64) -> Option<f64> {
        bound.is_finite().then_some(bound)
    }
}

/// Each model's 95% interval from `rounds` resamples of `sessions` (each a list of outcomes:
/// a session's, or a block of sessions' summed),
/// drawn with the generator seeded by `seed`; `None` for a model rated in no resample. It costs
/// `rounds` times the outcomes in `sessions`: a caller on the processing thread bounds what it
/// passes.
pub fn bootstrap(
    models: usize,
    sessions: &[Vec<Outcome>],
    rounds: usize,
    seed: u64,
) -> Vec<Option<Interval>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); models];
    if sessions.is_empty() {
        return vec![None; models];
    }
    let mut drawn: Vec<&Vec<Outcome>> = Vec::with_capacity(sessions.len());
    for _ in 0..rounds {
        drawn.clear();
        for _ in 0..sessions.len() {
            drawn.push(&sessions[rng.random_range(0..sessions.len())]);
        }
        let ratings = fit(models, drawn.iter().flat_map(|s| s.iter()));
        for (model, rating) in ratings.into_iter().enumerate() {
            let value = match rating {
                Ok(r) => r,
                Err(Unrated::NeverLost) => f64::INFINITY,
                Err(Unrated::NeverWon) => f64::NEG_INFINITY,
                Err(Unrated::NotCompared | Unrated::Disconnected) => continue,
            };
            samples[model].push(value);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            if s.is_empty() {
                return None;
            }
            s.sort_by(f64::total_cmp);
            let at = |q: f64| {
                let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
                s[rank - 1]
            };
            Some(Interval {
                low: at(0.025),
                high: at(0.975),
            })
        })
        .collect()
}

/// A bootstrap seed that is a function of the outcomes alone, so that a window gives the same
/// intervals in every run.
pub fn seed_of(sessions: &[Vec<Outcome>]) -> u64 {
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
