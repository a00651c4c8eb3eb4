//! What a flush writes of itself: its offset, its origins, and the chunks of its redo record.

use serde::{Deserialize, Serialize};

use super::*;

/// See [`Slot::Offset`].
pub(in crate::changelog) struct OffsetStore;

/// The value of an offset record, `{"offset":N}`.
#[derive(Serialize, Deserialize)]
pub(in crate::changelog) struct OffsetValue {
    pub offset: i64,
}

impl Store for OffsetStore {
    const KIND: &'static str = "offset";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        from.at
            .is_some_and(|offset| push_json(out, &OffsetValue { offset }))
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        // An unreadable offset is no offset: the unit replays from its start.
        into.offset = read.value::<OffsetValue>().ok().map(|v| v.offset);
        Ok(())
    }
}

/// See [`Slot::Origins`].
pub(in crate::changelog) struct OriginsStore;

impl Store for OriginsStore {
    const KIND: &'static str = "origins";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        let origins = &from.state.origins;
        let entries: Vec<(&str, i32, i64)> = origins
            .entries()
            .into_iter()
            .map(|(t, p, o)| (super::tag(t), p, o))
            .collect();
        !entries.is_empty() && push_json(out, &entries)
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        let entries: Vec<(String, i32, i64)> = read.value()?;
        let mut all = Vec::with_capacity(entries.len());
        for (tag, partition, offset) in entries {
            let topic = super::topic_of(&tag)
                .ok_or_else(|| read.bad(&format!("origin topic {tag:?} is no input")))?;
            all.push((topic, partition, offset));
        }
        into.state.origins = Origins::restore(all);
        Ok(())
    }
}

/// See [`Slot::Redo`]. Its chunks are written by the renderer around a flush's other records
/// and taken out of what a restore read before the rest is restored (see the module doc), so
/// nothing renders or restores one as a piece of state.
pub(in crate::changelog) struct RedoStore;

impl Store for RedoStore {
    const KIND: &'static str = "redo";
    type Id<'a> = u64;
    fn render(_: &Source<'_>, _: u64, _: &mut Vec<u8>) -> bool {
        false
    }
    fn restore(_: &mut Restored, _: u64, _: &Read<'_>) -> Result<(), ChangelogError> {
        // What is left of a redo record when the rest is restored is a cut one.
        Ok(())
    }
}
