//! The state changelog: partition state as compacted key/value records, and back.
//!
//! Every input partition's state is written to the same-numbered partition of the changelog topic
//! (`jury.state`). Keys are JSON arrays, so ids may contain any character:
//! `["v", 3, "project", "proj-42"]`, `["j", 3, "session", "proj-42", "council-981"]`. The first two
//! elements name the unit (`v` = votes, `j` = judge-scores; the partition), the third the kind of
//! state. A tombstone (no value) deletes. Restoring reads the partition from the beginning and
//! keeps the latest value per key, exactly as compaction would. This module is pure: the Kafka
//! runtime does the reading and writing.
//!
//! Dedupe windows are stored in buckets of [`SEEN_BUCKET`] consecutive ids. A vote project's
//! record carries its score *and* its newest (open) bucket, for two reasons: with many projects
//! nearly every event changes both, and one record instead of two is a third fewer produced
//! records per event; and the score and the ids it counts are then written atomically. A bucket
//! gets a `seen` record of its own once a newer one opens, and such records are written before
//! the project records of the same flush. So if a crash cuts a flush short, whatever part of it
//! reached the log restores to a state where every id in the window is counted in the score:
//! restore drops ids newer than the project record's newest, and the records replayed from the
//! last complete flush are applied exactly once (as long as the dedupe window holds a flush's
//! worth of the project's ids). Judge-scores state does not have this property yet.

use std::collections::HashMap;
use std::collections::hash_map::Entry as SlotEntry;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::bias::ProjectAudit;
use crate::engine::dedupe::RecentIds;
use crate::engine::leaderboard::Entry;
use crate::engine::score::ProjectScore;
use crate::engine::session::{ProjectSessions, Session, SessionBook};
use crate::engine::time::EventTime;
use crate::engine::{Change, IdMap, InputTopic, PartitionState, ProjectKey, VoteProject};

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

    /// Appends how every key of this unit begins, `["v",3,`: the one definition that keys are
    /// written with and that [`Restorer`] recognises its unit's records by.
    fn push_prefix(self, s: &mut String) {
        s.push_str("[\"");
        s.push_str(self.tag());
        s.push_str("\",");
        if self.partition < 0 {
            s.push('-');
        }
        push_u64(s, u64::from(self.partition.unsigned_abs()));
        s.push(',');
    }

    /// `["v",3,"project","proj-42"]`: written by hand because it is built for every changed key
    /// in every flush; ids are escaped by serde_json.
    fn key(self, kind: &str, ids: &[&str]) -> String {
        let mut key = String::with_capacity(32 + ids.iter().map(|s| s.len() + 3).sum::<usize>());
        self.push_prefix(&mut key);
        key.push('"');
        key.push_str(kind);
        key.push('"');
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
/// and a project's record carries up to 32 fingerprints, rendered at every flush it changed in).
fn push_hex(s: &mut String, fp: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 32];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = DIGITS[((fp >> ((31 - i) * 4)) & 0xf) as usize];
    }
    s.push_str(std::str::from_utf8(&digits).unwrap_or_default());
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
fn render_bucket(ids: impl ExactSizeIterator<Item = (u64, u128)>) -> Option<String> {
    let mut s = String::new();
    push_bucket(&mut s, ids);
    (s.len() > 2).then_some(s)
}

/// Appends `[[seq,"fingerprint"],...]` (`[]` when there are no ids).
fn push_bucket(s: &mut String, ids: impl ExactSizeIterator<Item = (u64, u128)>) {
    // `[seq,"32 hex digits"],` is at most 59 bytes; a bucket's seqs are short in practice.
    s.reserve(2 + ids.len() * 45);
    s.push('[');
    for (i, (seq, fp)) in ids.enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push('[');
        push_u64(s, seq);
        s.push_str(",\"");
        push_hex(s, fp);
        s.push_str("\"]");
    }
    s.push(']');
}

/// Appends the decimal digits of `n` (without the formatting machinery).
fn push_u64(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// What a change rewrites: changes with the same slot in one flush produce one record.
#[derive(PartialEq, Eq, Hash, Clone, Copy)]
enum Slot<'a> {
    /// A vote project: its score and its open dedupe bucket.
    Project(&'a str),
    Seen(&'a str, u64),
    Session(&'a str, &'a str),
    Completed(&'a str, u128),
    Audit(&'a str),
    Board(&'a str, &'a str, &'a str),
    Book,
}

/// [`open_bucket`] for a flush's changes in order: a vote event's changes name the same project
/// one after another, and one lookup serves them.
fn open_buckets<'a>(state: &PartitionState) -> impl FnMut(&'a str) -> Option<u64> {
    let mut last: Option<(&'a str, Option<u64>)> = None;
    move |project| match last {
        Some((p, bucket)) if p == project => bucket,
        _ => {
            let bucket = open_bucket(state, project);
            last = Some((project, bucket));
            bucket
        }
    }
}

/// The open dedupe bucket of a vote project: the one holding its newest id.
fn open_bucket(state: &PartitionState, project: &str) -> Option<u64> {
    state
        .projects
        .get(project)
        .and_then(|p| bucket_of_newest(&p.seen))
}

/// The bucket of a window's newest id: a vote project's open bucket, carried in its record.
fn bucket_of_newest(window: &RecentIds) -> Option<u64> {
    window.newest_seq().map(|s| s / SEEN_BUCKET)
}

impl Change {
    /// The slots this change rewrites, given the open bucket of each vote project after the
    /// flush's changes.
    fn slots<'a>(
        &'a self,
        open_bucket: &mut impl FnMut(&'a str) -> Option<u64>,
        mut emit: impl FnMut(Slot<'a>),
    ) {
        let slot = match self {
            Change::Votes {
                project,
                seen,
                forgot,
            } => {
                // The open bucket lives in the project record.
                emit(Slot::Project(project));
                // The first id of a bucket closes the previous one, which until now lived only
                // in the project record: it gets a record of its own.
                let first_opened = seen.start.div_ceil(SEEN_BUCKET).max(1) * SEEN_BUCKET;
                for opened in (first_opened..seen.end).step_by(SEEN_BUCKET as usize) {
                    emit(Slot::Seen(project, opened / SEEN_BUCKET - 1));
                }
                let open = open_bucket(project);
                for ids in [seen, forgot].into_iter().filter(|r| !r.is_empty()) {
                    for bucket in ids.start / SEEN_BUCKET..=(ids.end - 1) / SEEN_BUCKET {
                        if open != Some(bucket) {
                            emit(Slot::Seen(project, bucket));
                        }
                    }
                }
                return;
            }
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
        };
        emit(slot);
    }
}

fn render(value: &impl Serialize) -> Option<String> {
    serde_json::to_string(value).ok()
}

/// The changelog records for `changes` to `state`, one per key (the last change wins): vote
/// project records last, the others before them (see the module doc), each group in the order of
/// its keys' first change, which is deterministic for a given input without sorting keys (a sort
/// of a 10,000-project flush cost more than rendering it). Values are read from the current
/// state, so several changes to one project in a flush interval cost one record, rendered once.
pub fn records(unit: Unit, state: &PartitionState, changes: &[Change]) -> Vec<StateRecord> {
    // Each slot once, in the order of its first change, with its last change.
    let mut index: IdMap<Slot<'_>, usize> = IdMap::default();
    // Grown as slots appear, not reserved per change: a project changes several times per
    // flush, and a table sized for every change was megabytes of fresh memory per flush.
    let mut slots: Vec<(Slot<'_>, &Change)> = Vec::new();
    let mut open = open_buckets(state);
    for change in changes {
        change.slots(&mut open, |slot| match index.entry(slot) {
            SlotEntry::Occupied(at) => slots[*at.get()].1 = change,
            SlotEntry::Vacant(at) => {
                at.insert(slots.len());
                slots.push((slot, change));
            }
        });
    }
    let is_project = |slot: &Slot<'_>| matches!(slot, Slot::Project(_));
    let others = slots.iter().filter(|(slot, _)| !is_project(slot));
    let projects = slots.iter().filter(|(slot, _)| is_project(slot));
    others
        .chain(projects)
        .map(|(slot, change)| record(unit, state, *slot, change))
        .collect()
}

/// A vote project's record: `{"score":{...},"seen":[[seq,"fingerprint"],...]}` with the ids of
/// its open dedupe bucket.
fn render_project(project: &VoteProject) -> Option<String> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"score\":");
    serde_json::to_writer(&mut out, &project.score).ok()?;
    out.extend_from_slice(b",\"seen\":");
    let mut s = String::from_utf8(out).ok()?;
    let bucket = bucket_of_newest(&project.seen).unwrap_or(0);
    push_bucket(
        &mut s,
        project
            .seen
            .range(bucket * SEEN_BUCKET, (bucket + 1) * SEEN_BUCKET),
    );
    s.push('}');
    Some(s)
}

/// How a vote project's record reads back.
#[derive(Deserialize)]
struct ProjectRecord {
    score: ProjectScore,
    seen: Vec<(u64, String)>,
}

/// The record for one slot, its value read from the current state (`change` is the slot's last
/// change: a completed-window entry's sequence number is not kept in the state).
fn record(unit: Unit, state: &PartitionState, slot: Slot<'_>, change: &Change) -> StateRecord {
    let (key, value) = match slot {
        Slot::Project(project) => {
            let v = state.projects.get(project).and_then(render_project);
            (unit.key("project", &[project]), v)
        }
        Slot::Seen(project, bucket) => {
            // Buckets are rewritten whole when they change and deleted once every id in them
            // was forgotten.
            let window = match unit.topic {
                InputTopic::Votes => state.projects.get(project).map(|p| &p.seen),
                _ => state.judge_projects.get(project).map(|p| &p.seen),
            };
            let value = window.and_then(|w| {
                render_bucket(w.range(bucket * SEEN_BUCKET, (bucket + 1) * SEEN_BUCKET))
            });
            (unit.key("seen", &[project, &bucket.to_string()]), value)
        }
        Slot::Session(project, session) => {
            let v = state
                .sessions
                .projects
                .get(project)
                .and_then(|p| p.open.get(session))
                .and_then(render);
            (unit.key("session", &[project, session]), v)
        }
        Slot::Completed(project, fingerprint) => {
            let v = match change {
                Change::Completed { seq, .. } => render(&Seq { seq: *seq }),
                _ => None,
            };
            (unit.key("completed", &[project, &hex(fingerprint)]), v)
        }
        Slot::Audit(project) => {
            let v = state
                .judge_projects
                .get(project)
                .and_then(|p| render(&p.audit));
            (unit.key("audit", &[project]), v)
        }
        Slot::Board(project, category, model) => {
            let row = state
                .judge_projects
                .get(project)
                .and_then(|p| p.board.rows.get(&(category.to_owned(), model.to_owned())))
                .and_then(render);
            (unit.key("board", &[project, category, model]), row)
        }
        Slot::Book => {
            let meta = BookMeta {
                watermark: state.sessions.watermark,
                next_seq: state.sessions.next_seq(),
            };
            (unit.key("book", &[]), render(&meta))
        }
    };
    StateRecord { key, value }
}

/// Rebuilds a unit's state from its changelog partition.
#[derive(Debug)]
pub struct Restorer {
    unit: Unit,
    /// How this unit's keys begin (`["v",3,`), to tell its records from the partition's others.
    prefix: String,
    latest: HashMap<String, Option<Vec<u8>>>,
    /// Records read, for the restore-size metric.
    pub records: u64,
    pub bytes: u64,
}

impl Restorer {
    pub fn new(unit: Unit) -> Self {
        Restorer {
            unit,
            prefix: {
                let mut prefix = String::new();
                unit.push_prefix(&mut prefix);
                prefix
            },
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
        if key.starts_with(self.prefix.as_bytes()) {
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
        // Per vote project, the newest id its record counts (see the module doc).
        let mut counted: IdMap<String, u64> = IdMap::default();
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
                ("project", [project]) => {
                    let record: ProjectRecord = from_value(&key, v)?;
                    if let Some(newest) = record.seen.iter().map(|(s, _)| *s).max() {
                        counted.insert(project.to_string(), newest);
                    }
                    let entries = seen.entry(project.to_string()).or_default();
                    for (seq, f) in record.seen {
                        entries.push((seq, fp(&f)?));
                    }
                    state
                        .projects
                        .insert(ProjectKey::from(*project), VoteProject::new(record.score));
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
        for (project, mut entries) in seen {
            match self.unit.topic {
                InputTopic::Votes => {
                    // Ids newer than the project record's are from a flush cut short: their
                    // events are not in the score and will be replayed. (Ids written twice by
                    // a cut flush are merged by `RecentIds::restore`.)
                    let newest = counted.get(&project).copied();
                    entries.retain(|(s, _)| newest.is_some_and(|n| *s <= n));
                    if let Some(p) = state.projects.get_mut(project.as_str()) {
                        p.seen = RecentIds::restore(entries);
                    }
                }
                _ => {
                    let window = RecentIds::restore(entries);
                    state.judge_projects.entry(project).or_default().seen = window;
                }
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
