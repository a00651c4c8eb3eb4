//! Restoring a partition's state from its changelog partition: the latest value per key, as
//! compaction would keep it, and the redo record of a flush a crash cut short.

use std::collections::HashMap;

use serde_json::Value;

use super::*;

/// A key read from the changelog and its latest value (`None`: deleted).
type Latest = (String, Option<Vec<u8>>);

/// Rebuilds a unit's state from its changelog partition.
#[derive(Debug)]
pub struct Restorer {
    unit: Unit,
    /// How this unit's keys begin (`["v",3,`), to tell its records from the partition's others.
    prefix: Vec<u8>,
    latest: HashMap<String, Option<Vec<u8>>>,
    /// How the keys of the other layout begin in this partition (see [`Layout`]), and the
    /// first such key read.
    other_prefixes: Vec<Vec<u8>>,
    other_key: Option<String>,
    /// Records read, for the restore-size metric.
    pub records: u64,
    pub bytes: u64,
}

impl Restorer {
    pub fn new(unit: Unit) -> Self {
        let others = match unit.kind {
            UnitKind::Projects => vec![
                Unit::input(InputTopic::Votes, unit.partition),
                Unit::input(InputTopic::JudgeScores, unit.partition),
            ],
            UnitKind::Input(_) => vec![Unit::projects(unit.partition)],
        };
        Restorer {
            unit,
            prefix: unit.prefix(),
            latest: HashMap::new(),
            other_prefixes: others.into_iter().map(Unit::prefix).collect(),
            other_key: None,
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
        if key.starts_with(&self.prefix) {
            self.latest.insert(
                String::from_utf8_lossy(key).into_owned(),
                value.map(<[u8]>::to_vec),
            );
        } else if self.other_key.is_none() && self.other_prefixes.iter().any(|p| key.starts_with(p))
        {
            self.other_key = Some(String::from_utf8_lossy(key).into_owned());
        }
    }

    /// Takes the unit's redo chunks out of the records read and returns what they hold if they
    /// are complete: the last input offset of the flush and its state records, in order. They
    /// are complete when chunk 0 and the chunks after it through the one marked last are all
    /// there and from one write (run and offset). Otherwise the last flush was cut inside its
    /// redo record, before any of its state records.
    fn take_redo(&mut self) -> Result<Option<(i64, Vec<Latest>)>, ChangelogError> {
        let mut prefix = self.prefix.clone();
        prefix.extend_from_slice(b"\"redo\",");
        let keys: Vec<String> = self
            .latest
            .keys()
            .filter(|k| k.as_bytes().starts_with(&prefix))
            .cloned()
            .collect();
        let mut chunks: HashMap<u64, (String, Vec<u8>)> = HashMap::new();
        for key in keys {
            let Some(value) = self.latest.remove(&key).flatten() else {
                continue;
            };
            let parts = key_parts(&key)?;
            let Ok(Slot::Redo(index)) = Slot::from_parts(parts.get(2..).unwrap_or_default()) else {
                return Err(ChangelogError::Key {
                    key,
                    reason: "a redo chunk's index is not a number".to_owned(),
                });
            };
            chunks.insert(index, (key, value));
        }
        let mut records = Vec::new();
        let mut write = None;
        for index in 0.. {
            let Some((key, bytes)) = chunks.get(&index) else {
                return Ok(None);
            };
            let chunk: RedoChunk<'_> =
                serde_json::from_slice(bytes).map_err(|e| ChangelogError::Value {
                    key: key.clone(),
                    source: e,
                })?;
            if *write.get_or_insert((chunk.run, chunk.offset)) != (chunk.run, chunk.offset) {
                return Ok(None);
            }
            for (k, v) in chunk.records {
                if !k.get().as_bytes().starts_with(&self.prefix) {
                    return Err(ChangelogError::Key {
                        key: k.get().to_owned(),
                        reason: format!("in redo chunk {key}: not a key of this unit"),
                    });
                }
                records.push((k.get().to_owned(), v.map(|v| v.get().as_bytes().to_vec())));
            }
            if chunk.last {
                return Ok(Some((chunk.offset, records)));
            }
        }
        Ok(None)
    }

    /// The restored state (journaling) and the last input offset it includes, if any.
    pub fn finish(mut self) -> Result<(PartitionState, Option<i64>), ChangelogError> {
        if let Some(key) = self.other_key.take() {
            return Err(ChangelogError::Layout {
                partition: self.unit.partition,
                key,
                expected: Layout::of(self.unit.kind),
            });
        }
        // The offset the state is restored to: the offset record's, or that of a complete redo
        // record newer than it, a flush that may have been cut after it, whose records go over
        // the state records read (see the module doc). Item buckets of a later flush (a cut
        // one) read as that flush found them.
        let offset_key = self.unit.key(Slot::Offset);
        let mut through = self
            .latest
            .get(&offset_key)
            .and_then(|v| serde_json::from_slice::<Value>(v.as_deref()?).ok())
            .and_then(|v| offset_in(&v));
        let mut carried = Vec::new();
        if let Some((redo_offset, records)) = self.take_redo()?
            && through.is_none_or(|w| w < redo_offset)
        {
            carried = records
                .iter()
                .map(|(k, v)| {
                    let v = v
                        .as_deref()
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                    (k.clone(), v)
                })
                .collect();
            self.latest.extend(records);
            let value = serde_json::to_vec(&OffsetValue {
                offset: redo_offset,
            });
            self.latest.insert(offset_key, value.ok());
            through = Some(redo_offset);
        }
        let mut restored = Restored::default();
        for (key, value) in self.latest {
            let Some(value) = value else { continue };
            let bad = |reason: &str| ChangelogError::Key {
                key: key.clone(),
                reason: reason.to_owned(),
            };
            let parts = key_parts(&key)?;
            let slot = Slot::from_parts(parts.get(2..).unwrap_or_default()).map_err(bad)?;
            let v: Value = from_value(&key, serde_json::from_slice(&value).unwrap_or(Value::Null))?;
            match slot {
                Slot::Offset => restored.offset = offset_in(&v),
                Slot::Origins => restored.state.origins = origins_in(&key, v)?,
                Slot::Project(p) => restored.project(p, from_value(&key, v)?).map_err(bad)?,
                Slot::Seen(p, _) if self.unit.holds_votes() => {
                    restored.seen(p, from_value(&key, v)?).map_err(bad)?
                }
                Slot::Seen(p, _) | Slot::Ballots(p, _) => {
                    restored.ballots(p, from_value(&key, v)?).map_err(bad)?
                }
                Slot::Completed(p, fp) => restored.completed(p, fp, from_value(&key, v)?),
                Slot::Session(p, session) => restored.session(p, session, from_value(&key, v)?),
                Slot::Audit(p) => restored.audit(p, from_value(&key, v)?),
                Slot::Consensus(p, session) => {
                    // Read from the bytes, so the record is restored as it was published.
                    let kept: KeptValue<'_> =
                        serde_json::from_slice(&value).map_err(|source| ChangelogError::Value {
                            key: key.clone(),
                            source,
                        })?;
                    restored.judge_project(p).kept.restore(Kept {
                        seq: kept.seq,
                        session: session.to_owned(),
                        record: kept.record.get().into(),
                    });
                }
                Slot::Board(p, category, model) => {
                    restored.board(p, category, model, from_value(&key, v)?)
                }
                Slot::Ranking(p, category) => {
                    let read: Ranking = from_value(&key, v)?;
                    let ranking = restored.ranking(p, category);
                    // Its blocks are records of their own, read before or after it.
                    let blocks = std::mem::take(&mut ranking.blocks);
                    *ranking = Ranking { blocks, ..read };
                }
                Slot::Block(p, category, block) => {
                    let pairs = from_value(&key, v)?;
                    restored.ranking(p, category).blocks.insert(block, pairs);
                }
                Slot::Watermark(p) => {
                    let value: WatermarkValue = from_value(&key, v)?;
                    restored.state.project(p).sessions.watermark = Some(value.watermark);
                }
                Slot::Items(bucket) => {
                    let items = match from_value(&key, v)? {
                        StoredItems::Items(items) => items,
                        StoredItems::Bucket(b) if b.at.is_some_and(|at| through < Some(at)) => {
                            // Written by a flush cut short: as that flush found it, and written
                            // again by the next.
                            restored.rerender.push(bucket * ITEM_BUCKET);
                            let mut items = b.items;
                            items.retain(|(seq, ..)| *seq < b.from);
                            for found in b.before {
                                items.retain(|(seq, ..)| *seq != found.0);
                                items.push(found);
                            }
                            items
                        }
                        StoredItems::Bucket(b) => b.items,
                    };
                    for (seq, project, item, votes) in items {
                        let state = &mut restored.state;
                        let projects = &mut state.projects;
                        state
                            .quality
                            .restore_item(projects, (&project, &item), seq, votes);
                    }
                }
                Slot::ItemsForgotten => {
                    let places: StoredPlaces = from_value(&key, v)?;
                    restored.items_forgotten = places.places();
                }
                Slot::Waits(_) => {
                    let waits: Vec<(u64, String, String, Vec<Waiting>)> = from_value(&key, v)?;
                    for (seq, project, item, waiting) in waits {
                        let state = &mut restored.state;
                        let projects = &mut state.projects;
                        state
                            .quality
                            .restore_waiting(projects, (&project, &item), seq, waiting);
                    }
                }
                Slot::Judge(p, judge) => place(&mut restored.quality(p).judges, judge, &key, v)?,
                Slot::Recent(p, seq) => {
                    let scores = from_value(&key, v)?;
                    restored.quality(p).recent.insert(seq, scores);
                }
                Slot::Forgotten(p) => {
                    let value: ForgottenValue = from_value(&key, v)?;
                    let q = restored.quality(p);
                    q.forgotten = value.forgotten;
                    q.reviewers.left_out = value.left_out;
                    q.reviewers.forgotten_verdicts = value.verdicts;
                }
                Slot::Reviewer(p, reviewer) => {
                    let kept = from_value(&key, v)?;
                    restored.quality(p).reviewers.restore(reviewer, kept);
                }
                Slot::Book => restored.book(from_value(&key, v)?),
                // Taken out above: what is left of a redo record is a cut one.
                Slot::Redo(_) => {}
            }
        }
        let (mut state, offset) = restored.finish();
        state.carried.0 = carried;
        Ok((state, offset))
    }
}

/// A unit's state as its changelog records are decoded, one function per kind of record, in
/// any order (the latest value per key, as compaction keeps it).
#[derive(Default)]
struct Restored {
    state: PartitionState,
    offset: Option<i64>,
    /// Dedupe ids per vote project, from project and seen records.
    seen: IdMap<String, Vec<(u64, u128)>>,
    /// Ballot ids per project.
    ballots: IdMap<String, Vec<(u64, u128)>>,
    /// Per vote project, the newest id its record counts (see the module doc).
    counted: IdMap<String, u64>,
    completed: IdMap<String, Vec<(u64, u128)>>,
    next_seq: u64,
    /// The places of items the restored flush forgot, still in their buckets.
    items_forgotten: Vec<u64>,
    /// Places in item buckets written by a flush cut short, to be written again.
    rerender: Vec<u64>,
}

/// Appends a bucket's ids, read as written (runs, see [`IdRun`]), to `entries`.
fn push_ids(entries: &mut Vec<(u64, u128)>, runs: Vec<(u64, String)>) -> Result<(), &'static str> {
    for (first, hex) in runs {
        for id in IdRun::ids(first, &hex) {
            entries.push(id?);
        }
    }
    Ok(())
}

impl Restored {
    /// A vote project's record: its score, offset and the ids of its open bucket.
    fn project(
        &mut self,
        project: &str,
        record: ProjectRecord<(u64, String)>,
    ) -> Result<(), &'static str> {
        let entries = self.seen.entry(project.to_owned()).or_default();
        let before = entries.len();
        push_ids(entries, record.seen)?;
        if let Some(newest) = entries[before..].iter().map(|(s, _)| *s).max() {
            self.counted.insert(project.to_owned(), newest);
        }
        let mut restored = VoteProject::new(record.score);
        restored.applied_through = record.offset;
        self.state.project(project).votes = Some(restored);
        Ok(())
    }

    /// A closed bucket of a vote project's dedupe window.
    fn seen(&mut self, project: &str, ids: Vec<(u64, String)>) -> Result<(), &'static str> {
        push_ids(self.seen.entry(project.to_owned()).or_default(), ids)
    }

    /// A bucket of a project's window of ballot ids.
    fn ballots(&mut self, project: &str, ids: Vec<(u64, String)>) -> Result<(), &'static str> {
        push_ids(self.ballots.entry(project.to_owned()).or_default(), ids)
    }

    /// A completed session's id.
    fn completed(&mut self, project: &str, fingerprint: u128, s: Seq) {
        self.completed
            .entry(project.to_owned())
            .or_default()
            .push((s.seq, fingerprint));
    }

    /// An open session.
    fn session(&mut self, project: &str, session: &str, s: Session) {
        let open = &mut self.state.project(project).sessions.open;
        open.insert(session.to_owned(), s);
    }

    /// A judge-scores project, created empty if new.
    fn judge_project(&mut self, project: &str) -> &mut JudgeProject {
        self.state.judges_mut(project)
    }

    /// A project's bias roll-up.
    fn audit(&mut self, project: &str, audit: ProjectAudit) {
        self.judge_project(project).audit = audit;
    }

    /// A leaderboard row.
    fn board(&mut self, project: &str, category: &str, model: &str, row: StoredRow) {
        let key = (category.to_owned(), model.to_owned());
        self.judge_project(project)
            .board
            .rows
            .insert(key, row.into_row());
    }

    /// A category's Bradley-Terry material, created empty if new.
    fn ranking(&mut self, project: &str, category: &str) -> &mut Ranking {
        let ranked = &mut self.judge_project(project).board.ranked;
        ranked.entry(category.to_owned()).or_default()
    }

    /// A project's judge quality, created empty if new.
    fn quality(&mut self, project: &str) -> &mut ProjectQuality {
        &mut self.state.project(project).quality
    }

    /// The session book's creation counter.
    fn book(&mut self, meta: BookMeta) {
        self.next_seq = meta.next_seq;
    }

    /// The state (journaling) and the last input offset it includes.
    fn finish(self) -> (PartitionState, Option<i64>) {
        let Restored {
            mut state,
            offset,
            seen,
            ballots,
            counted,
            completed,
            next_seq,
            items_forgotten,
            rerender,
        } = self;
        // Buckets that hold what the restored state does not are written again by the next
        // flush (see `ItemBucket`).
        state.journal = Some(Vec::new());
        for &seq in &items_forgotten {
            state.quality.drop_restored(&mut state.projects, seq);
        }
        state.note_items_forgotten(items_forgotten);
        for seq in rerender {
            state.note_item(seq);
        }
        state.quality.start_undo();
        for (project, mut entries) in seen {
            // Ids newer than the project record's are from a flush cut short: their events are
            // not in the score and will be replayed. (Ids written twice by a cut flush are
            // merged by `RecentIds::restore`.)
            let newest = counted.get(&project).copied();
            entries.retain(|(s, _)| newest.is_some_and(|n| *s <= n));
            if let Some(p) = state.projects.get_mut(project.as_str())
                && let Some(votes) = &mut p.votes
            {
                votes.seen = RecentIds::restore(entries);
            }
        }
        for (project, entries) in ballots {
            let window = RecentIds::restore(entries);
            state.judges_mut(&project).seen = window;
        }
        for (project, entries) in completed {
            state.project(&project).sessions.completed = RecentIds::restore(entries);
        }
        state.sessions = SessionBook::restore(&mut state.projects, next_seq);
        for p in state.projects.values_mut() {
            p.quality.rebuild();
        }
        (state, offset)
    }
}

/// Puts a judge-quality value read as [`Placed`] back at its place in `bounded`.
fn place<V: serde::de::DeserializeOwned>(
    bounded: &mut Bounded<V>,
    id: &str,
    key: &str,
    v: Value,
) -> Result<(), ChangelogError> {
    let placed: Placed<V> = from_value(key, v)?;
    bounded.insert(id, placed.seq, placed.value);
    Ok(())
}

/// A changelog key's elements: `["v",3,"project","proj-42"]`.
fn key_parts(key: &str) -> Result<Vec<Value>, ChangelogError> {
    serde_json::from_str(key).map_err(|e| ChangelogError::Key {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// The input offset an offset record's value holds (see [`OffsetValue`]).
fn offset_in(value: &Value) -> Option<i64> {
    value.get("offset")?.as_i64()
}

/// The origins an origins record's value holds (see [`Slot::Origins`]).
fn origins_in(key: &str, value: Value) -> Result<Origins, ChangelogError> {
    let entries: Vec<(String, i32, i64)> = from_value(key, value)?;
    let mut all = Vec::with_capacity(entries.len());
    for (tag, partition, offset) in entries {
        let topic = super::topic_of(&tag).ok_or_else(|| ChangelogError::Key {
            key: key.to_owned(),
            reason: format!("origin topic {tag:?} is no input"),
        })?;
        all.push((topic, partition, offset));
    }
    Ok(Origins::restore(all))
}

fn from_value<T: serde::de::DeserializeOwned>(key: &str, v: Value) -> Result<T, ChangelogError> {
    serde_json::from_value(v).map_err(|e| ChangelogError::Value {
        key: key.to_owned(),
        source: e,
    })
}
