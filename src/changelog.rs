//! The state changelog: partition state as compacted key/value records, and back.
//!
//! Every input partition's state is written to the same-numbered partition of the changelog topic
//! (`jury.state`). Keys are JSON arrays, so ids may contain any character:
//! `["v", 3, "score", "proj-42"]`, `["j", 3, "session", "proj-42", "council-981"]`. The first two
//! elements name the unit (`v` = votes, `j` = judge-scores; the partition), the third the kind of
//! state. A tombstone (no value) deletes. Restoring reads the partition from the beginning and
//! keeps the latest value per key, exactly as compaction would. This module is pure: the Kafka
//! runtime does the reading and writing.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::bias::ProjectAudit;
use crate::engine::dedupe::RecentIds;
use crate::engine::leaderboard::Entry;
use crate::engine::score::ProjectScore;
use crate::engine::session::{ProjectSessions, Session, SessionBook};
use crate::engine::time::EventTime;
use crate::engine::{Change, InputTopic, PartitionState, VoteProject};

/// One changelog record; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    pub key: String,
    pub value: Option<String>,
}

/// A changelog record that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    #[error("changelog key {key}: {reason}")]
    Key { key: String, reason: String },
    #[error("changelog value of {key}: {source}")]
    Value {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

/// The state of one input partition in the changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unit {
    pub topic: InputTopic,
    pub partition: i32,
}

impl Unit {
    fn tag(self) -> &'static str {
        match self.topic {
            InputTopic::Votes => "v",
            InputTopic::JudgeScores => "j",
            InputTopic::Reputations => "r",
        }
    }

    fn key(self, kind: &str, ids: &[&str]) -> String {
        let mut parts: Vec<Value> = vec![self.tag().into(), self.partition.into(), kind.into()];
        parts.extend(ids.iter().map(|s| Value::from(*s)));
        Value::Array(parts).to_string()
    }

    /// The record holding the last input offset applied to this unit's state.
    pub fn offset_record(self, offset: i64) -> StateRecord {
        StateRecord {
            key: self.key("offset", &[]),
            value: Some(serde_json::json!({ "offset": offset }).to_string()),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Seq {
    seq: u64,
}

#[derive(Serialize, Deserialize)]
struct BookMeta {
    watermark: Option<EventTime>,
    next_seq: u64,
}

/// Ids per dedupe-window changelog record.
const SEEN_BUCKET: u64 = 32;

fn hex(fp: u128) -> String {
    format!("{fp:032x}")
}

fn render(value: &impl Serialize) -> Option<String> {
    serde_json::to_string(value).ok()
}

/// The changelog records for `changes` to `state`, one per key (the last change wins), in key
/// order. Values are read from the current state, so several changes to one project in a
/// flush interval cost one record.
pub fn records(
    unit: Unit,
    state: &PartitionState,
    changes: impl IntoIterator<Item = Change>,
) -> Vec<StateRecord> {
    let mut out: BTreeMap<String, Option<String>> = BTreeMap::new();
    for change in changes {
        let (key, value) = match change {
            Change::Score { project } => {
                let v = state.projects.get(&project).and_then(|p| render(&p.score));
                (unit.key("score", &[&project]), v)
            }
            Change::Seen { project, seq } | Change::Forgot { project, seq } => {
                // Dedupe windows are stored in buckets of SEEN_BUCKET consecutive ids, rewritten
                // whole when they change and deleted once every id in them was forgotten.
                let bucket = seq / SEEN_BUCKET;
                let window = match unit.topic {
                    InputTopic::Votes => state.projects.get(&project).map(|p| &p.seen),
                    _ => state.judge_projects.get(&project).map(|p| &p.seen),
                };
                let ids: Vec<(u64, String)> = window
                    .map(|w| {
                        w.range(bucket * SEEN_BUCKET, (bucket + 1) * SEEN_BUCKET)
                            .map(|(s, fp)| (s, hex(fp)))
                            .collect()
                    })
                    .unwrap_or_default();
                let value = if ids.is_empty() { None } else { render(&ids) };
                (unit.key("seen", &[&project, &bucket.to_string()]), value)
            }
            Change::Session { project, session } => {
                let v = state
                    .sessions
                    .projects
                    .get(&project)
                    .and_then(|p| p.open.get(&session))
                    .and_then(render);
                (unit.key("session", &[&project, &session]), v)
            }
            Change::Completed {
                project,
                fingerprint,
                seq,
            } => (
                unit.key("completed", &[&project, &hex(fingerprint)]),
                render(&Seq { seq }),
            ),
            Change::Uncompleted {
                project,
                fingerprint,
            } => (unit.key("completed", &[&project, &hex(fingerprint)]), None),
            Change::Audit { project } => {
                let v = state
                    .judge_projects
                    .get(&project)
                    .and_then(|p| render(&p.audit));
                (unit.key("audit", &[&project]), v)
            }
            Change::Board {
                project,
                category,
                model,
            } => {
                let row = state
                    .judge_projects
                    .get(&project)
                    .and_then(|p| p.board.rows.get(&(category.clone(), model.clone())))
                    .and_then(render);
                (unit.key("board", &[&project, &category, &model]), row)
            }
            Change::Book => {
                let meta = BookMeta {
                    watermark: state.sessions.watermark,
                    next_seq: state.sessions.next_seq(),
                };
                (unit.key("book", &[]), render(&meta))
            }
        };
        out.insert(key, value);
    }
    out.into_iter()
        .map(|(key, value)| StateRecord { key, value })
        .collect()
}

/// Rebuilds a unit's state from its changelog partition.
#[derive(Debug)]
pub struct Restorer {
    unit: Unit,
    latest: HashMap<String, Option<Vec<u8>>>,
    /// Records read, for the restore-size metric.
    pub records: u64,
    pub bytes: u64,
}

impl Restorer {
    pub fn new(unit: Unit) -> Self {
        Restorer {
            unit,
            latest: HashMap::new(),
            records: 0,
            bytes: 0,
        }
    }

    /// The unit being restored.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// Takes one changelog record in log order; records of other units are ignored.
    pub fn accept(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.records += 1;
        self.bytes += (key.len() + value.map_or(0, <[u8]>::len)) as u64;
        let prefix = format!("[\"{}\",{},", self.unit.tag(), self.unit.partition);
        if key.starts_with(prefix.as_bytes()) {
            self.latest.insert(
                String::from_utf8_lossy(key).into_owned(),
                value.map(<[u8]>::to_vec),
            );
        }
    }

    /// The restored state (journaling) and the last input offset it includes, if any.
    pub fn finish(self) -> Result<(PartitionState, Option<i64>), ChangelogError> {
        let mut state = PartitionState::journaled();
        let mut offset = None;
        let mut seen: HashMap<String, Vec<(u64, u128)>> = HashMap::new();
        let mut completed: HashMap<String, Vec<(u64, u128)>> = HashMap::new();
        let mut sessions: HashMap<String, ProjectSessions> = HashMap::new();
        let (mut watermark, mut next_seq) = (None, 0);
        for (key, value) in self.latest {
            let Some(value) = value else { continue };
            let parts: Vec<Value> =
                serde_json::from_str(&key).map_err(|e| ChangelogError::Key {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
            let ids: Vec<&str> = parts.iter().skip(3).filter_map(Value::as_str).collect();
            let kind = parts.get(2).and_then(Value::as_str).unwrap_or_default();
            let bad = |reason: &str| ChangelogError::Key {
                key: key.clone(),
                reason: reason.to_owned(),
            };
            let v: Value = from_value(&key, serde_json::from_slice(&value).unwrap_or(Value::Null))?;
            let fp =
                |s: &str| u128::from_str_radix(s, 16).map_err(|_| bad("fingerprint is not hex"));
            match (kind, ids.as_slice()) {
                ("offset", []) => offset = v.get("offset").and_then(Value::as_i64),
                ("score", [project]) => {
                    let score: ProjectScore = from_value(&key, v)?;
                    state.projects.insert(
                        project.to_string(),
                        VoteProject {
                            score,
                            seen: RecentIds::default(),
                        },
                    );
                }
                ("seen", [project, _bucket]) => {
                    let ids: Vec<(u64, String)> = from_value(&key, v)?;
                    let entries = seen.entry(project.to_string()).or_default();
                    for (seq, f) in ids {
                        entries.push((seq, fp(&f)?));
                    }
                }
                ("completed", [project, f]) => {
                    let s: Seq = from_value(&key, v)?;
                    completed
                        .entry(project.to_string())
                        .or_default()
                        .push((s.seq, fp(f)?));
                }
                ("session", [project, session]) => {
                    let s: Session = from_value(&key, v)?;
                    sessions
                        .entry(project.to_string())
                        .or_default()
                        .open
                        .insert(session.to_string(), s);
                }
                ("audit", [project]) => {
                    let audit: ProjectAudit = from_value(&key, v)?;
                    state
                        .judge_projects
                        .entry(project.to_string())
                        .or_default()
                        .audit = audit;
                }
                ("board", [project, category, model]) => {
                    let row: std::collections::VecDeque<Entry> = from_value(&key, v)?;
                    let p = state.judge_projects.entry(project.to_string()).or_default();
                    p.board
                        .rows
                        .insert((category.to_string(), model.to_string()), row);
                }
                ("book", []) => {
                    let meta: BookMeta = from_value(&key, v)?;
                    (watermark, next_seq) = (meta.watermark, meta.next_seq);
                }
                _ => return Err(bad("unknown kind of state")),
            }
        }
        for (project, entries) in seen {
            let window = RecentIds::restore(entries);
            match self.unit.topic {
                InputTopic::Votes => {
                    if let Some(p) = state.projects.get_mut(&project) {
                        p.seen = window;
                    }
                }
                _ => state.judge_projects.entry(project).or_default().seen = window,
            }
        }
        for (project, entries) in completed {
            sessions.entry(project).or_default().completed = RecentIds::restore(entries);
        }
        state.sessions = SessionBook::restore(sessions, watermark, next_seq);
        Ok((state, offset))
    }
}

fn from_value<T: serde::de::DeserializeOwned>(key: &str, v: Value) -> Result<T, ChangelogError> {
    serde_json::from_value(v).map_err(|e| ChangelogError::Value {
        key: key.to_owned(),
        source: e,
    })
}

#[cfg(test)]
mod tests;
