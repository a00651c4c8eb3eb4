//! The state changelog: partition state as compacted key/value records, and back.
//!
//! Every input partition's state is written to the same-numbered partition of the changelog topic
//! (`jury.state`). Keys are JSON arrays, so ids may contain any character:
//! `["v", 3, "score", "proj-42"]`, `["j", 3, "session", "proj-42", "council-981"]`. The first two
//! elements name the unit (`v` = votes, `j` = judge-scores; the partition), the third the kind of
//! state. A tombstone (no value) deletes. Restoring reads the partition from the beginning and
//! keeps the latest value per key, exactly as compaction would. This module is pure: the Kafka
//! runtime does the reading and writing.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::bias::ProjectAudit;
use crate::engine::dedupe::RecentIds;
use crate::engine::leaderboard::Entry;
use crate::engine::score::ProjectScore;
use crate::engine::session::{ProjectSessions, Session, SessionBook};
use crate::engine::time::EventTime;
use crate::engine::{Change, IdMap, InputTopic, PartitionState, VoteProject};

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

    /// `["v",3,"score","proj-42"]`: written by hand because it is built for every changed key
    /// in every flush; ids are escaped by serde_json.
    fn key(self, kind: &str, ids: &[&str]) -> String {
        use std::fmt::Write;
        let mut key = String::with_capacity(32 + ids.iter().map(|s| s.len() + 3).sum::<usize>());
        let _ = write!(key, "[\"{}\",{},\"{kind}\"", self.tag(), self.partition);
        for id in ids {
            key.push(',');
            push_json_str(&mut key, id);
        }
        key.push(']');
        key
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
    let mut s = String::with_capacity(32);
    push_hex(&mut s, fp);
    s
}

/// Appends the 32 lowercase hex digits of `fp` (`format!("{fp:032x}")` costs several times more,
/// and dedupe buckets hold 32 fingerprints each).
fn push_hex(s: &mut String, fp: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..32).rev() {
        s.push(char::from(DIGITS[((fp >> (shift * 4)) & 0xf) as usize]));
    }
}

/// Appends `id` as a JSON string.
fn push_json_str(s: &mut String, id: &str) {
    if id
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
    {
        s.push('"');
        s.push_str(id);
        s.push('"');
    } else if let Ok(quoted) = serde_json::to_string(id) {
        s.push_str(&quoted);
    }
}

/// `[[seq,"fingerprint"],...]` for the ids of one dedupe bucket, or `None` when it is empty.
fn render_bucket(ids: impl Iterator<Item = (u64, u128)>) -> Option<String> {
    use std::fmt::Write;
    let mut s = String::from("[");
    for (seq, fp) in ids {
        if s.len() > 1 {
            s.push(',');
        }
        let _ = write!(s, "[{seq},\"");
        push_hex(&mut s, fp);
        s.push_str("\"]");
    }
    if s.len() == 1 {
        return None;
    }
    s.push(']');
    Some(s)
}

/// What a change rewrites: changes with the same slot in one flush produce one record.
#[derive(PartialEq, Eq, Hash)]
enum Slot<'a> {
    Score(&'a str),
    Seen(&'a str, u64),
    Session(&'a str, &'a str),
    Completed(&'a str, u128),
    Audit(&'a str),
    Board(&'a str, &'a str, &'a str),
    Book,
}

impl Change {
    fn slot(&self) -> Slot<'_> {
        match self {
            Change::Score { project } => Slot::Score(project),
            Change::Seen { project, seq } | Change::Forgot { project, seq } => {
                Slot::Seen(project, seq / SEEN_BUCKET)
            }
            Change::Session { project, session } => Slot::Session(project, session),
            Change::Completed {
                project,
                fingerprint,
                ..
            }
            | Change::Uncompleted {
                project,
                fingerprint,
            } => Slot::Completed(project, *fingerprint),
            Change::Audit { project } => Slot::Audit(project),
            Change::Board {
                project,
                category,
                model,
            } => Slot::Board(project, category, model),
            Change::Book => Slot::Book,
        }
    }
}

fn render(value: &impl Serialize) -> Option<String> {
    serde_json::to_string(value).ok()
}

/// The changelog records for `changes` to `state`, one per key (the last change wins), in key
/// order. Values are read from the current state, so several changes to one project in a
/// flush interval cost one record, rendered once.
pub fn records(unit: Unit, state: &PartitionState, changes: &[Change]) -> Vec<StateRecord> {
    // The last change of each slot; the records are put in key order below.
    let mut last: IdMap<Slot<'_>, &Change> = IdMap::default();
    last.reserve(changes.len().min(1 << 16));
    for change in changes {
        last.insert(change.slot(), change);
    }
    let mut out: Vec<StateRecord> = last
        .into_values()
        .map(|change| record(unit, state, change))
        .collect();
    out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The record for one change, its value read from the current state.
fn record(unit: Unit, state: &PartitionState, change: &Change) -> StateRecord {
    {
        let (key, value) = match change {
            Change::Score { project } => {
                let v = state.projects.get(project).and_then(|p| render(&p.score));
                (unit.key("score", &[project]), v)
            }
            Change::Seen { project, seq } | Change::Forgot { project, seq } => {
                // Dedupe windows are stored in buckets of SEEN_BUCKET consecutive ids, rewritten
                // whole when they change and deleted once every id in them was forgotten.
                let bucket = seq / SEEN_BUCKET;
                let window = match unit.topic {
                    InputTopic::Votes => state.projects.get(project).map(|p| &p.seen),
                    _ => state.judge_projects.get(project).map(|p| &p.seen),
                };
                let value = window.and_then(|w| {
                    render_bucket(w.range(bucket * SEEN_BUCKET, (bucket + 1) * SEEN_BUCKET))
                });
                (unit.key("seen", &[project, &bucket.to_string()]), value)
            }
            Change::Session { project, session } => {
                let v = state
                    .sessions
                    .projects
                    .get(project)
                    .and_then(|p| p.open.get(session))
                    .and_then(render);
                (unit.key("session", &[project, session]), v)
            }
            Change::Completed {
                project,
                fingerprint,
                seq,
            } => (
                unit.key("completed", &[project, &hex(*fingerprint)]),
                render(&Seq { seq: *seq }),
            ),
            Change::Uncompleted {
                project,
                fingerprint,
            } => (unit.key("completed", &[project, &hex(*fingerprint)]), None),
            Change::Audit { project } => {
                let v = state
                    .judge_projects
                    .get(project)
                    .and_then(|p| render(&p.audit));
                (unit.key("audit", &[project]), v)
            }
            Change::Board {
                project,
                category,
                model,
            } => {
                let row = state
                    .judge_projects
                    .get(project)
                    .and_then(|p| p.board.rows.get(&(category.clone(), model.clone())))
                    .and_then(render);
                (unit.key("board", &[project, category, model]), row)
            }
            Change::Book => {
                let meta = BookMeta {
                    watermark: state.sessions.watermark,
                    next_seq: state.sessions.next_seq(),
                };
                (unit.key("book", &[]), render(&meta))
            }
        };
        StateRecord { key, value }
    }
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
        let mut seen: IdMap<String, Vec<(u64, u128)>> = IdMap::default();
        let mut completed: IdMap<String, Vec<(u64, u128)>> = IdMap::default();
        let mut sessions: IdMap<String, ProjectSessions> = IdMap::default();
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
