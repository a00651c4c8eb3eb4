//! `jury.leaderboard`: how each candidate author model fares across sessions, per project and
//! session category, over a sliding event-time window.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::consensus::Analysis;
use super::stats;
use crate::engine::contract::time::EventTime;

/// One candidate's result in one completed session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub at: EventTime,
    pub borda: Option<f64>,
    pub mean_z: Option<f64>,
    pub mean_score: Option<f64>,
    pub win: bool,
    pub votes: u64,
}

/// A project's board: (category, model) -> entries inside the window, in completion order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Board {
    pub rows: BTreeMap<(String, String), VecDeque<Entry>>,
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
    pub sessions: usize,
    pub wins: usize,
    pub votes: u64,
    pub mean_borda: Option<f64>,
    pub mean_mean_z: Option<f64>,
    pub mean_score: Option<f64>,
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

impl Board {
    /// Adds a completed session's candidates (those with an `author`) and returns the standings
    /// it changed, in key order.
    pub fn add(
        &mut self,
        project: &str,
        category: Option<&str>,
        at: EventTime,
        a: &Analysis,
        window_days: u64,
    ) -> Vec<Standing> {
        let window = i64::try_from(window_days.saturating_mul(86_400)).unwrap_or(i64::MAX);
        let from = at.plus_seconds(-window);
        let mut touched = BTreeSet::new();
        for r in &a.rankings {
            let Some(model) = a.candidates.get(r.candidate).and_then(|c| c.author.clone()) else {
                continue;
            };
            let key = (category.unwrap_or("").to_owned(), model);
            self.rows.entry(key.clone()).or_default().push_back(Entry {
                at,
                borda: r.borda,
                mean_z: r.mean_z,
                mean_score: r.mean_score,
                win: r.rank == 1 && r.votes > 0,
                votes: r.votes as u64,
            });
            touched.insert(key);
        }
        touched
            .into_iter()
            .filter_map(|key| {
                let entries = self.rows.get_mut(&key)?;
                entries.retain(|e| e.at >= from);
                let of = |f: fn(&Entry) -> Option<f64>| {
                    stats::mean(&entries.iter().filter_map(f).collect::<Vec<_>>())
                };
                Some(Standing {
                    project_id: project.to_owned(),
                    category: category.map(str::to_owned),
                    model: key.1.clone(),
                    window_days,
                    sessions: entries.len(),
                    wins: entries.iter().filter(|e| e.win).count(),
                    votes: entries.iter().map(|e| e.votes).sum(),
                    mean_borda: of(|e| e.borda),
                    mean_mean_z: of(|e| e.mean_z),
                    mean_score: of(|e| e.mean_score),
                    as_of: at.to_string(),
                })
            })
            .collect()
    }
}
