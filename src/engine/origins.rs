//! Which records a state already holds, by where they came from: the last offset processed from
//! each input partition.
//!
//! Kafka names a record by its topic, partition and offset, and a state receives each input
//! partition's records in their order: directly, or through the repartition topic, whose
//! forwarding stage reads each input partition in order and produces to each internal partition
//! in order. So a record at or below the last offset processed from its partition is one the
//! state has already seen, read again: a copy the forwarding stage sent twice because it
//! crashed before committing, or a line of a replay file that repeats an earlier record. It is
//! skipped whole ([`super::Outcome::Replayed`]): counted once, dead-lettered at most once, and
//! never applied twice. The map is written to the changelog with the state it describes (see
//! `crate::changelog`), so copies are recognised across restarts too.

use super::ids::IdMap;
use super::record::{InputTopic, Record};

/// The last offset processed from each input partition whose records reach this state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origins {
    last: IdMap<(InputTopic, i32), i64>,
}

impl Origins {
    /// Whether `record` is at or below the last offset processed from its partition. A record
    /// without its topic, partition or offset cannot be told apart and is never a copy.
    pub fn is_copy(&self, record: &Record<'_>) -> bool {
        let (Some(input), Some(partition), Some(offset)) =
            (record.input, record.partition, record.offset)
        else {
            return false;
        };
        self.last
            .get(&(input, partition))
            .is_some_and(|&last| offset <= last)
    }

    /// Notes that `record` was processed, whatever became of it.
    pub fn advance(&mut self, record: &Record<'_>) {
        if let (Some(input), Some(partition), Some(offset)) =
            (record.input, record.partition, record.offset)
        {
            let last = self.last.entry((input, partition)).or_insert(offset);
            *last = (*last).max(offset);
        }
    }

    /// Every partition's last offset, in order (for the changelog).
    pub fn entries(&self) -> Vec<(InputTopic, i32, i64)> {
        let mut all: Vec<_> = self.last.iter().map(|(&(t, p), &o)| (t, p, o)).collect();
        all.sort_unstable();
        all
    }

    /// The map holding `entries`, as [`Origins::entries`] gave them.
    pub fn restore(entries: impl IntoIterator<Item = (InputTopic, i32, i64)>) -> Origins {
        Origins {
            last: entries.into_iter().map(|(t, p, o)| ((t, p), o)).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(input: InputTopic, partition: i32, offset: i64) -> Record<'static> {
        Record::new("t", Some(input), None)
            .at(Some(partition), Some(offset))
            .positioned(None)
    }

    #[test]
    fn a_record_at_or_below_its_partitions_last_offset_is_a_copy() {
        let mut o = Origins::default();
        let v = InputTopic::Votes;
        assert!(!o.is_copy(&at(v, 0, 5)));
        o.advance(&at(v, 0, 5));
        assert!(o.is_copy(&at(v, 0, 5)));
        assert!(o.is_copy(&at(v, 0, 3)));
        assert!(!o.is_copy(&at(v, 0, 6)));
        // Other partitions and topics are their own sequences.
        assert!(!o.is_copy(&at(v, 1, 0)));
        assert!(!o.is_copy(&at(InputTopic::JudgeScores, 0, 1)));
        // Advancing never moves back.
        o.advance(&at(v, 0, 2));
        assert!(o.is_copy(&at(v, 0, 5)));
        // Without coordinates nothing is a copy, and nothing is noted.
        let bare = at(v, 0, 1).at(Some(0), None);
        assert!(!o.is_copy(&bare));
        o.advance(&bare);
        assert_eq!(o.entries(), vec![(v, 0, 5)]);
        assert_eq!(Origins::restore(o.entries()), o);
    }
}
