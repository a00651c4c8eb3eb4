//! `jury.leaderboard`: how each candidate author model fares across sessions, per project and
//! session category, over a sliding event-time window.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::bradley_terry::{self, Games, Interval};
use super::consensus::Analysis;
use super::record_bytes::{LONGEST_F64, json_bytes, json_str_at_most};
use crate::engine::contract::time::EventTime;
use crate::engine::settings::Leaderboard;

/// A model's results in a category on one event-time day: the sums its row's figures are made
/// of. A row keeps one per day of the window, so it is bounded by the window, not by the
/// sessions in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Day {
    /// Days since the epoch.
    pub day: i64,
    /// The latest completion time among its sessions.
    pub last_at: EventTime,
    /// Candidate entries (a model with two candidates in one session counts twice).
    pub sessions: u64,
    /// Rank-1 finishes (with a vote).
    pub wins: u64,
    pub votes: u64,
    pub borda: Sum,
    pub mean_z: Sum,
    pub mean_score: Sum,
}

/// A sum of values and how many there were, for a mean over days.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sum {
    pub total: f64,
    pub n: u64,
}

impl Sum {
    fn add(&mut self, value: Option<f64>) {
        if let Some(v) = value {
            self.total += v;
            self.n += 1;
        }
    }

    /// The mean of the values of `sums`; `None` without any.
    fn mean<'a>(sums: impl Iterator<Item = &'a Sum>) -> Option<f64> {
        let (total, n) = sums.fold((0.0, 0), |(t, n), s| (t + s.total, n + s.n));
        (n > 0).then(|| total / n as f64)
    }
}

/// One candidate's result in one completed session, as rows were written before they were
/// kept by day: a changelog written then is read into days.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: EventTime,
    pub borda: Option<f64>,
    pub mean_z: Option<f64>,
    pub mean_score: Option<f64>,
    pub win: bool,
    pub votes: u64,
}

/// A row: its days in the window, oldest first.
pub type Row = VecDeque<Day>;

/// A row as the changelog holds it: by day, or (written before) by entry.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StoredRow {
    Days(Row),
    Entries(VecDeque<Entry>),
}

impl StoredRow {
    /// The row by day.
    pub fn into_row(self) -> Row {
        match self {
            StoredRow::Days(days) => days,
            StoredRow::Entries(entries) => {
                let mut row = Row::new();
                for e in &entries {
                    add_to_row(&mut row, e);
                }
                row
            }
        }
    }
}

/// The event-time day of `t`.
fn day_of(t: EventTime) -> i64 {
    t.parts().0.div_euclid(86_400)
}

/// Adds one candidate's result to its row's day.
fn add_to_row(row: &mut Row, e: &Entry) {
    let day = day_of(e.at);
    let at = row.partition_point(|d| d.day < day);
    if row.get(at).is_none_or(|d| d.day != day) {
        row.insert(
            at,
            Day {
                day,
                last_at: e.at,
                sessions: 0,
                wins: 0,
                votes: 0,
                borda: Sum::default(),
                mean_z: Sum::default(),
                mean_score: Sum::default(),
            },
        );
    }
    let d = &mut row[at];
    d.last_at = d.last_at.max(e.at);
    d.sessions += 1;
    d.wins += u64::from(e.win);
    d.votes += e.votes;
    d.borda.add(e.borda);
    d.mean_z.add(e.mean_z);
    d.mean_score.add(e.mean_score);
}

/// A project's board: (category, model) -> its row; and per category, the pairwise outcomes
/// its Bradley-Terry ratings are fitted from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Board {
    pub rows: BTreeMap<(String, String), Row>,
    pub ranked: BTreeMap<String, Ranking>,
}

/// Slots per day of a category's resampling blocks (see [`Ranking`]).
pub const BLOCK_SLOTS: u64 = 16;

/// A resampling block: the event-time day (since the epoch) its sessions completed on, and a
/// slot from the session id's hash. Written `"<day>.<slot>"` in changelog keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId {
    pub day: i64,
    pub slot: u8,
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.day, self.slot)
    }
}

impl std::str::FromStr for BlockId {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let (day, slot) = s.split_once('.').ok_or(())?;
        Ok(BlockId {
            day: day.parse().map_err(|_| ())?,
            slot: slot.parse().map_err(|_| ())?,
        })
    }
}

/// The summed comparisons of two models in a block: `a < b` (indexes into
/// [`Ranking::models`]), `a`'s score, and the comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BlockPair(pub u32, pub u32, pub f64, pub f64);

/// One category's Bradley-Terry material and its last fit.
///
/// The window's sessions are summed into blocks of pairwise totals, one per (day, slot of the
/// session id's hash), and the bootstrap resamples blocks rather than sessions: a cluster
/// bootstrap, valid as the blocks are independent groups of sessions. A refit then costs the
/// blocks' pairs, at most `(window_days + 1) * BLOCK_SLOTS` blocks of at most
/// `max_models * (max_models - 1) / 2` pairs, however many sessions the window holds; the
/// window is counted in whole days. Each block is a changelog record of its own, so none
/// outgrows the broker's limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// The models the blocks index, in order of arrival, at most `leaderboard.max_models`.
    pub models: Vec<String>,
    /// Pairwise totals by block, sorted by pair. Written as records of their own.
    #[serde(skip)]
    pub blocks: BTreeMap<BlockId, Vec<BlockPair>>,
    /// The completion time of the session after which the ratings were last fitted.
    pub fitted_at: Option<EventTime>,
    /// The last fit, by model.
    pub fitted: BTreeMap<String, BtStanding>,
    /// Whether a session changed the blocks since the last fit: the ratings lack it until the
    /// next refit, which a later session makes once `leaderboard.bt_interval_secs` have passed,
    /// or the next tick of the service's clock (see [`Board::refit_unfitted`]), so that the
    /// ratings of a category whose sessions stop are never left without its last ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unfitted: bool,
}

/// The most bytes a block of a category of `max_models` models takes in its changelog record
/// (JSON), counted from above: every pair of models compared, every total at its longest. It
/// grows with the square of the models, so it bounds `leaderboard.max_models` by the largest
/// record the producer sends, as the configuration checks.
pub fn largest_block_bytes(max_models: usize) -> usize {
    let last = u32::try_from(max_models.saturating_sub(1)).unwrap_or(u32::MAX);
    let pair = json_bytes(&BlockPair(last, last, LONGEST_F64, LONGEST_F64)) + 1;
    let pairs = max_models.saturating_mul(max_models.saturating_sub(1)) / 2;
    pairs.saturating_mul(pair).saturating_add(2)
}

/// The most bytes a category's [`Ranking`] record takes with `max_models` models of ids of
/// `max_id_bytes`, counted from above: every id of control characters (six bytes each), named
/// twice (its place and its standing), every standing with the longest note and numbers.
pub fn largest_ranking_bytes(max_id_bytes: usize, max_models: usize) -> usize {
    let fixed = json_bytes(&Ranking {
        fitted_at: Some(EventTime::LONGEST),
        unfitted: true,
        ..Ranking::default()
    });
    use bradley_terry::Prior;
    let notes = [Prior::NeverLost, Prior::NeverWon, Prior::Separated].map(Prior::note);
    let longest_note = notes.iter().chain([&NOT_COMPARED]).map(|n| n.len()).max();
    let standing = json_bytes(&BtStanding {
        rating: Some(LONGEST_F64),
        interval: Some((Some(LONGEST_F64), Some(LONGEST_F64))),
        rank: Some(usize::MAX),
        comparisons: LONGEST_F64,
        note: Some("n".repeat(longest_note.unwrap_or(0))),
    });
    let id = json_str_at_most(max_id_bytes);
    // `"id",` in `models`, `"id":{..},` in `fitted`.
    let model = (id + 1) + (id + 1 + standing + 1);
    fixed.saturating_add(max_models.saturating_mul(model))
}

/// The note of a model in the category's table without a comparison in the window.
const NOT_COMPARED: &str = "no comparisons";

/// A model's Bradley-Terry standing in its category.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BtStanding {
    /// `400 * log10(p) + 1000` against the prior's reference; `None` without comparisons.
    pub rating: Option<f64>,
    /// The 95% bootstrap interval; `None` without one. Both bounds are always written; a
    /// `null` bound comes from a changelog written before the prior (no finite interval then)
    /// and counts as no interval.
    pub interval: Option<(Option<f64>, Option<f64>)>,
    /// 1 for the highest rating among the rated models.
    pub rank: Option<usize>,
    /// Pairwise comparisons it was in.
    pub comparisons: f64,
    /// Why it has no rating, or why the rating rests mostly on the prior.
    pub note: Option<String>,
}

impl BtStanding {
    fn bounds(&self) -> Option<Interval> {
        match self.interval {
            Some((Some(low), Some(high))) => Some(Interval { low, high }),
            _ => None,
        }
    }
}

/// What adding a session changed in a category's ranking: the blocks written or dropped.
pub type Blocks = Vec<BlockId>;

impl Ranking {
    /// Adds a session's ranks (model, rank) to its block. A model new to the category when it
    /// already has `max_models` is left out of the comparisons.
    pub fn add(&mut self, block: BlockId, ranks: &[(String, usize)], max_models: usize) {
        let mut indexed: Vec<(u32, usize)> = Vec::with_capacity(ranks.len());
        for (model, rank) in ranks {
            let index = match self.models.iter().position(|m| m == model) {
                Some(i) => i,
                None if self.models.len() < max_models => {
                    self.models.push(model.clone());
                    self.models.len() - 1
                }
                None => continue,
            };
            indexed.push((index as u32, *rank));
        }
        let pairs = self.blocks.entry(block).or_default();
        for (i, &(ma, ra)) in indexed.iter().enumerate() {
            for &(mb, rb) in &indexed[i + 1..] {
                if ma == mb {
                    continue;
                }
                let score = match ra.cmp(&rb) {
                    std::cmp::Ordering::Less => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Greater => 0.0,
                };
                let (a, b, score) = if ma < mb {
                    (ma, mb, score)
                } else {
                    (mb, ma, 1.0 - score)
                };
                match pairs.binary_search_by(|p| (p.0, p.1).cmp(&(a, b))) {
                    Ok(at) => {
                        pairs[at].2 += score;
                        pairs[at].3 += 1.0;
                    }
                    Err(at) => pairs.insert(at, BlockPair(a, b, score, 1.0)),
                }
            }
        }
    }

    /// Drops the blocks of days before `from_day` and forgets the models no block still
    /// names (renumbering the rest, which rewrites every block). Returns the blocks changed.
    fn expire(&mut self, from_day: i64) -> Blocks {
        let expired: Blocks = self
            .blocks
            .range(
                ..BlockId {
                    day: from_day,
                    slot: 0,
                },
            )
            .map(|(id, _)| *id)
            .collect();
        if expired.is_empty() {
            return expired;
        }
        for id in &expired {
            self.blocks.remove(id);
        }
        let mut used = vec![false; self.models.len()];
        for p in self.blocks.values().flatten() {
            used[p.0 as usize] = true;
            used[p.1 as usize] = true;
        }
        if used.iter().all(|&u| u) {
            return expired;
        }
        let mut renumbered = vec![0u32; self.models.len()];
        let mut next = 0u32;
        for (i, &u) in used.iter().enumerate() {
            renumbered[i] = next;
            next += u32::from(u);
        }
        let mut i = 0;
        self.models.retain(|_| {
            i += 1;
            used[i - 1]
        });
        for pairs in self.blocks.values_mut() {
            for p in pairs.iter_mut() {
                (p.0, p.1) = (renumbered[p.0 as usize], renumbered[p.1 as usize]);
            }
        }
        expired
            .into_iter()
            .chain(self.blocks.keys().copied())
            .collect()
    }

    /// Fits the window's ratings and intervals (see [`super::bradley_terry`]).
    pub fn fit(&mut self, at: EventTime, rounds: usize) {
        let models = &self.models;
        let units: Vec<Vec<Games>> = self
            .blocks
            .values()
            .map(|pairs| {
                pairs
                    .iter()
                    .map(|p| Games {
                        a: p.0 as usize,
                        b: p.1 as usize,
                        score: p.2,
                        games: p.3,
                    })
                    .collect()
            })
            .collect();
        let fit = bradley_terry::fit(models.len(), units.iter().flatten());
        let seed = bradley_terry::seed_of(&units);
        let intervals = bradley_terry::bootstrap(&fit, &units, rounds, seed);
        let (ratings, priors) = (&fit.ratings, &fit.priors);
        let mut comparisons = vec![0.0; models.len()];
        for o in units.iter().flatten() {
            comparisons[o.a] += o.games;
            comparisons[o.b] += o.games;
        }
        let mut order: Vec<usize> = (0..models.len())
            .filter(|&i| ratings[i].is_some())
            .collect();
        order.sort_by(|&a, &b| {
            let r = |i: usize| ratings[i].unwrap_or(f64::NEG_INFINITY);
            r(b).total_cmp(&r(a)).then(models[a].cmp(&models[b]))
        });
        self.fitted = models
            .iter()
            .enumerate()
            .map(|(i, model)| {
                let note = match (ratings[i], priors[i]) {
                    (None, _) => Some(NOT_COMPARED.to_owned()),
                    (Some(_), prior) => prior.map(|p| p.note().to_owned()),
                };
                let standing = BtStanding {
                    rating: ratings[i],
                    interval: intervals[i].map(|v| (Some(v.low), Some(v.high))),
                    rank: order.iter().position(|&o| o == i).map(|p| p + 1),
                    comparisons: comparisons[i],
                    note,
                };
                (model.clone(), standing)
            })
            .collect();
        self.fitted_at = Some(at);
        self.unfitted = false;
    }

    /// The models whose intervals overlap `model`'s, in name order.
    fn tied_with(&self, model: &str) -> Vec<String> {
        let Some(mine) = self.fitted.get(model).and_then(BtStanding::bounds) else {
            return Vec::new();
        };
        self.fitted
            .iter()
            .filter(|(other, s)| {
                other.as_str() != model && s.bounds().is_some_and(|o| mine.overlaps(&o))
            })
            .map(|(other, _)| other.clone())
            .collect()
    }
}

/// A `jury.leaderboard` record (compacted, key `project_id/category/model`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Standing {
    pub project_id: String,
    /// The session category, `null` for sessions without one.
    pub category: Option<String>,
    pub model: String,
    pub window_days: u64,
    /// Candidates of this model in completed sessions within the window.
    pub sessions: u64,
    pub wins: u64,
    pub votes: u64,
    pub mean_borda: Option<f64>,
    pub mean_mean_z: Option<f64>,
    pub mean_score: Option<f64>,
    /// Its Bradley-Terry standing in the category as last fitted (see [`Ranking`]).
    pub bt_rating: Option<f64>,
    pub bt_ci_low: Option<f64>,
    pub bt_ci_high: Option<f64>,
    pub bt_rank: Option<usize>,
    pub bt_tied_with: Vec<String>,
    pub bt_note: Option<String>,
    pub comparisons: u64,
    /// The completion time of the session after which the ratings were fitted.
    pub bt_fitted_at: Option<String>,
    /// The completion time the window ends at.
    pub as_of: String,
}

impl Standing {
    /// The compaction key.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.project_id,
            self.category.as_deref().unwrap_or(""),
            self.model
        )
    }
}

/// What a completed session changed on a board.
#[derive(Debug, Default)]
pub struct BoardUpdate {
    /// The rows it changed, in key order.
    pub standings: Vec<Standing>,
    /// The category's resampling blocks it wrote or dropped.
    pub blocks: Blocks,
    /// Whether the category's ranking record (its models and last fit, see [`Ranking`])
    /// changed: a session that neither refits nor adds or forgets a model leaves it as it was,
    /// so the changelog writes the fit when it is computed, not with every session.
    pub ranking: bool,
}

impl Board {
    /// Adds completed session `session`'s candidates (those with an `author`). A category new
    /// to a project that has `leaderboard.max_categories`, and a model new to a category whose
    /// rows number `leaderboard.max_models`, are left off the board.
    pub fn add(
        &mut self,
        project: &str,
        session: &str,
        category: Option<&str>,
        at: EventTime,
        a: &Analysis,
        cfg: &Leaderboard,
    ) -> BoardUpdate {
        let window = i64::try_from(cfg.window_days.saturating_mul(86_400)).unwrap_or(i64::MAX);
        let from_day = day_of(at.plus_seconds(-window));
        let cat = category.unwrap_or("").to_owned();
        if !self.ranked.contains_key(&cat) && self.ranked.len() >= cfg.max_categories {
            return BoardUpdate::default();
        }
        let mut touched = BTreeSet::new();
        let mut ranks = Vec::new();
        for r in &a.rankings {
            let Some(model) = a.candidates.get(r.candidate).and_then(|c| c.author.clone()) else {
                continue;
            };
            if r.votes > 0 {
                ranks.push((model.clone(), r.rank));
            }
            let key = (cat.clone(), model);
            if !self.rows.contains_key(&key) && self.rows_of(&cat).count() >= cfg.max_models {
                continue;
            }
            let entry = Entry {
                at,
                borda: r.borda,
                mean_z: r.mean_z,
                mean_score: r.mean_score,
                win: r.rank == 1 && r.votes > 0,
                votes: r.votes as u64,
            };
            add_to_row(self.rows.entry(key.clone()).or_default(), &entry);
            touched.insert(key);
        }
        let ranking = self.ranked.entry(cat.clone()).or_default();
        let models = ranking.models.clone();
        let mut blocks = ranking.expire(from_day);
        if !ranks.is_empty() {
            let slot = (xxhash_rust::xxh3::xxh3_64(session.as_bytes()) % BLOCK_SLOTS) as u8;
            let block = BlockId {
                day: day_of(at),
                slot,
            };
            ranking.add(block, &ranks, cfg.max_models);
            blocks.push(block);
        }
        let due = ranking.fitted_at.is_none_or(|last| {
            let interval = i64::try_from(cfg.bt_interval_secs).unwrap_or(i64::MAX);
            at >= last.plus_seconds(interval)
        });
        let mut changed = due || ranking.models != models;
        if due {
            ranking.fit(at, cfg.bootstrap_rounds);
            // Every model's rating moved: the category's rows are all republished.
            touched.extend(self.rows_of(&cat).cloned().collect::<Vec<_>>());
        } else if !blocks.is_empty() && !ranking.unfitted {
            ranking.unfitted = true;
            changed = true;
        }
        let standings = self.republish(project, touched, cfg, at);
        if self.rows_of(&cat).next().is_none()
            && self.ranked.get(&cat).is_some_and(|r| r.blocks.is_empty())
        {
            self.ranked.remove(&cat);
            changed = true;
        }
        BoardUpdate {
            standings,
            blocks,
            ranking: changed,
        }
    }

    /// Refits every category whose ratings lack a session (see [`Ranking::unfitted`]), as of
    /// its latest session, and republishes its rows: what a tick of the service's clock does,
    /// and replay at the end of its input. Returns each category refitted with its rows.
    pub fn refit_unfitted(
        &mut self,
        project: &str,
        cfg: &Leaderboard,
    ) -> Vec<(String, Vec<Standing>)> {
        let unfitted: Vec<String> = self
            .ranked
            .iter()
            .filter(|(_, r)| r.unfitted)
            .map(|(cat, _)| cat.clone())
            .collect();
        let mut refitted = Vec::with_capacity(unfitted.len());
        for cat in unfitted {
            let rows: Vec<(String, String)> = self.rows_of(&cat).cloned().collect();
            // The latest session's completion: the one a refit at a session would be as of.
            let latest = rows
                .iter()
                .filter_map(|key| Some(self.rows.get(key)?.back()?.last_at))
                .max();
            let Some(ranking) = self.ranked.get_mut(&cat) else {
                continue;
            };
            let Some(at) = latest else {
                ranking.unfitted = false;
                refitted.push((cat, Vec::new()));
                continue;
            };
            ranking.fit(at, cfg.bootstrap_rounds);
            refitted.push((cat, self.republish(project, rows, cfg, at)));
        }
        refitted
    }

    /// The standings of the rows `keys` as of `at`, each row's days before the window first
    /// dropped: a row left with none is published once more, then forgotten.
    fn republish(
        &mut self,
        project: &str,
        keys: impl IntoIterator<Item = (String, String)>,
        cfg: &Leaderboard,
        at: EventTime,
    ) -> Vec<Standing> {
        let window = i64::try_from(cfg.window_days.saturating_mul(86_400)).unwrap_or(i64::MAX);
        let from_day = day_of(at.plus_seconds(-window));
        let mut standings = Vec::new();
        for key in keys {
            let Some(row) = self.rows.get_mut(&key) else {
                continue;
            };
            row.retain(|d| d.day >= from_day);
            let emptied = row.is_empty();
            standings.extend(self.standing(project, &key, cfg, at));
            if emptied {
                self.rows.remove(&key);
            }
        }
        standings
    }

    /// The keys of category `category`'s rows.
    fn rows_of<'a>(&'a self, category: &'a str) -> impl Iterator<Item = &'a (String, String)> {
        self.rows
            .range((category.to_owned(), String::new())..)
            .map(|(key, _)| key)
            .take_while(move |(c, _)| c == category)
    }

    /// Every row's standing as last published: as of its latest session or its category's
    /// last refit, whichever came later (a refit republishes every row of its category).
    pub fn standings(&self, project: &str, cfg: &Leaderboard) -> Vec<Standing> {
        self.rows
            .iter()
            .filter_map(|(key, row)| {
                let fitted = self.ranked.get(&key.0).and_then(|r| r.fitted_at);
                let at = row.back()?.last_at.max(fitted.unwrap_or(EventTime::MIN));
                self.standing(project, key, cfg, at)
            })
            .collect()
    }

    /// The `jury.leaderboard` record of row `key` (category, model) as of `at`.
    fn standing(
        &self,
        project: &str,
        key: &(String, String),
        cfg: &Leaderboard,
        at: EventTime,
    ) -> Option<Standing> {
        let row = self.rows.get(key)?;
        let (category, model) = key;
        let empty = Ranking::default();
        let ranking = self.ranked.get(category).unwrap_or(&empty);
        let bt = ranking.fitted.get(model).cloned().unwrap_or_default();
        let full = ranking.models.len() >= cfg.max_models;
        let note = bt.note.or_else(|| {
            (full && !ranking.models.contains(model))
                .then(|| "not rated: its category has leaderboard.max_models models".into())
        });
        let (ci_low, ci_high) = bt.interval.unwrap_or((None, None));
        let total = |f: fn(&Day) -> u64| row.iter().map(f).sum::<u64>();
        Some(Standing {
            project_id: project.to_owned(),
            category: (!category.is_empty()).then(|| category.clone()),
            model: model.clone(),
            window_days: cfg.window_days,
            sessions: total(|d| d.sessions),
            wins: total(|d| d.wins),
            votes: total(|d| d.votes),
            mean_borda: Sum::mean(row.iter().map(|d| &d.borda)),
            mean_mean_z: Sum::mean(row.iter().map(|d| &d.mean_z)),
            mean_score: Sum::mean(row.iter().map(|d| &d.mean_score)),
            bt_rating: bt.rating,
            bt_ci_low: ci_low,
            bt_ci_high: ci_high,
            bt_rank: bt.rank,
            bt_tied_with: ranking.tied_with(model),
            bt_note: note,
            comparisons: bt.comparisons as u64,
            bt_fitted_at: ranking.fitted_at.map(|t| t.to_string()),
            as_of: at.to_string(),
        })
    }
}

#[cfg(test)]
mod tests;
