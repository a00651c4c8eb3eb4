//! Restoring a partition's state from its changelog partition: the latest value per key, as
//! compaction would keep it, and the redo record of a flush a crash cut short.

use std::collections::HashMap;

use serde_json::Value;

use super::restored::Restored;
use super::stores::{OffsetValue, Read};
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

    /// The keys of the unit's redo chunks among the records read.
    fn redo_keys(&self) -> Vec<String> {
        let mut prefix = self.prefix.clone();
        prefix.extend_from_slice(b"\"redo\",");
        self.latest
            .keys()
            .filter(|k| k.as_bytes().starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// The unit's redo chunks among the records read, in order, if they are complete: chunk 0
    /// and the chunks after it through the one marked last are all there and from one write
    /// (run and offset). Otherwise the last flush was cut inside its redo record, before any of
    /// its state records.
    fn redo(&self) -> Result<Option<Vec<(&str, RedoChunk<'_>)>>, ChangelogError> {
        let mut chunks: HashMap<u64, (&str, &[u8])> = HashMap::new();
        for key in self.redo_keys() {
            let Some((key, Some(value))) = self.latest.get_key_value(&key) else {
                continue;
            };
            let parts = key_parts(key)?;
            let Ok(Slot::Redo(index)) = Slot::from_parts(parts.get(2..).unwrap_or_default()) else {
                return Err(ChangelogError::Key {
                    key: key.clone(),
                    reason: "a redo chunk's index is not a number".to_owned(),
                });
            };
            chunks.insert(index, (key, value));
        }
        let mut read = Vec::new();
        for index in 0.. {
            let Some(&(key, bytes)) = chunks.get(&index) else {
                return Ok(None);
            };
            let chunk: RedoChunk<'_> = Read { key, value: bytes }.value()?;
            let write = |c: &RedoChunk<'_>| (c.run, c.offset);
            if read
                .first()
                .is_some_and(|(_, first)| write(first) != write(&chunk))
            {
                return Ok(None);
            }
            let last = chunk.last;
            read.push((key, chunk));
            if last {
                return Ok(Some(read));
            }
        }
        Ok(None)
    }

    /// The last input offset of the flush of a complete redo record (see [`Restorer::redo`])
    /// and its state records, in order.
    fn redo_records(&self) -> Result<Option<(i64, Vec<Latest>)>, ChangelogError> {
        let Some(chunks) = self.redo()? else {
            return Ok(None);
        };
        let mut records = Vec::new();
        let mut offset = None;
        for (key, chunk) in chunks {
            offset = Some(chunk.offset);
            for (k, v) in chunk.records {
                if !k.get().as_bytes().starts_with(&self.prefix) {
                    return Err(ChangelogError::Key {
                        key: k.get().to_owned(),
                        reason: format!("in redo chunk {key}: not a key of this unit"),
                    });
                }
                records.push((k.get().to_owned(), v.map(|v| v.get().as_bytes().to_vec())));
            }
        }
        Ok(offset.map(|offset| (offset, records)))
    }

    /// The offset record's offset among the records read.
    fn offset_written(&self) -> Option<i64> {
        let value = self.latest.get(&self.unit.key(Slot::Offset(())))?;
        serde_json::from_slice::<OffsetValue>(value.as_deref()?)
            .ok()
            .map(|v| v.offset)
    }

    /// The last input offset the state would include if the changelog ended with the records
    /// read so far: the offset record's, or that of a complete redo record newer than it (the
    /// rule [`Restorer::finish`] restores by). The runtime reads on until this reaches what its
    /// group committed: a commit follows its flush's changelog.
    pub fn through(&self) -> Result<Option<i64>, ChangelogError> {
        let redo = self
            .redo()?
            .and_then(|chunks| Some(chunks.first()?.1.offset));
        let written = self.offset_written();
        Ok(newer_redo(written, redo).or(written))
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
        // A complete redo record newer than the offset record goes over the state records
        // read (see [`newer_redo`]). Item buckets of a later flush (a cut one) read as
        // that flush found them.
        let offset_key = self.unit.key(Slot::Offset(()));
        let written = self.offset_written();
        let redo = self.redo_records()?;
        for key in self.redo_keys() {
            self.latest.remove(&key);
        }
        let mut through = written;
        let mut carried = Vec::new();
        if let Some((redo_offset, records)) = redo
            && newer_redo(written, Some(redo_offset)).is_some()
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
        let mut restored = Restored::new(self.unit, through);
        for (key, value) in self.latest {
            let Some(value) = value else { continue };
            let read = Read {
                key: &key,
                value: &value,
            };
            let parts = key_parts(&key)?;
            let slot = Slot::from_parts(parts.get(2..).unwrap_or_default())
                .map_err(|reason| read.bad(reason))?;
            slot.restore(&mut restored, &read)?;
        }
        let (mut state, offset) = restored.finish();
        state.carried.0 = carried;
        Ok((state, offset))
    }
}

/// The offset of a complete redo record (`redo`) if it is newer than the offset record's
/// (`written`): a flush that may have been cut after it, which a restore applies over the state
/// records and restores to (see the module doc); else the state restores to `written`. The one
/// rule [`Restorer::finish`] follows and [`Restorer::through`] reports.
fn newer_redo(written: Option<i64>, redo: Option<i64>) -> Option<i64> {
    redo.filter(|&redo| written.is_none_or(|w| w < redo))
}

/// A changelog key's elements: `["v",3,"project","proj-42"]`.
fn key_parts(key: &str) -> Result<Vec<Value>, ChangelogError> {
    serde_json::from_str(key).map_err(|e| ChangelogError::Key {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}
