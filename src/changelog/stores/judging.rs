//! Judge scores: open and completed sessions, bias roll-ups, kept consensus records, the
//! leaderboard and its Bradley-Terry material, and the session book.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::*;

/// See [`Slot::Session`].
pub(in crate::changelog) struct SessionStore;

impl Store for SessionStore {
    const KIND: &'static str = "session";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, session): (&str, &str), out: &mut Vec<u8>) -> bool {
        let project = from.state.projects.get(project);
        let open = project.and_then(|p| p.sessions.open.get(session));
        open.is_some_and(|s| push_json(out, s))
    }
    fn restore(
        into: &mut Restored,
        (project, session): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let open = &mut into.state.project(project).sessions.open;
        open.insert(session.to_owned(), read.value::<Session>()?);
        Ok(())
    }
}

/// See [`Slot::Completed`].
pub(in crate::changelog) struct CompletedStore;

/// A completed session's place in its project's window, `{"seq":N}`.
#[derive(Serialize, Deserialize)]
struct Seq {
    seq: u64,
}

impl Store for CompletedStore {
    const KIND: &'static str = "completed";
    type Id<'a> = (&'a str, u128);
    fn render(from: &Source<'_>, _: (&str, u128), out: &mut Vec<u8>) -> bool {
        match from.change {
            Some(Change::Completed { seq, .. }) => push_json(out, &Seq { seq: *seq }),
            _ => false,
        }
    }
    fn restore(
        into: &mut Restored,
        (project, fingerprint): (&str, u128),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let Seq { seq } = read.value()?;
        let window = into.completed.entry(project.to_owned()).or_default();
        window.push((seq, fingerprint));
        Ok(())
    }
}

/// See [`Slot::Audit`].
pub(in crate::changelog) struct AuditStore;

impl Store for AuditStore {
    const KIND: &'static str = "audit";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let audit = from.state.judges(project).map(|p| &p.audit);
        audit.is_some_and(|a| push_json(out, a))
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        into.state.judges_mut(project).audit = read.value::<ProjectAudit>()?;
        Ok(())
    }
}

/// See [`Slot::Consensus`].
pub(in crate::changelog) struct ConsensusStore;

/// The value of a kept consensus record: the record as it was published.
#[derive(Serialize, Deserialize)]
struct KeptValue<'a> {
    seq: u64,
    #[serde(borrow)]
    record: &'a RawValue,
}

impl Store for ConsensusStore {
    const KIND: &'static str = "consensus";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, session): (&str, &str), out: &mut Vec<u8>) -> bool {
        let kept = from.state.judges(project).and_then(|p| p.kept.get(session));
        kept.is_some_and(|k| {
            let record = serde_json::from_str::<&RawValue>(&k.record);
            record.is_ok_and(|record| push_json(out, &KeptValue { seq: k.seq, record }))
        })
    }
    fn restore(
        into: &mut Restored,
        (project, session): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let kept: KeptValue<'_> = read.value()?;
        into.state.judges_mut(project).kept.restore(Kept {
            seq: kept.seq,
            session: session.to_owned(),
            record: kept.record.get().into(),
        });
        Ok(())
    }
}

/// See [`Slot::Board`].
pub(in crate::changelog) struct BoardStore;

impl Store for BoardStore {
    const KIND: &'static str = "board";
    type Id<'a> = (&'a str, &'a str, &'a str);
    fn render(
        from: &Source<'_>,
        (p, category, model): (&str, &str, &str),
        out: &mut Vec<u8>,
    ) -> bool {
        let row = from
            .state
            .judges(p)
            .and_then(|p| p.board.rows.get(&(category.to_owned(), model.to_owned())));
        row.is_some_and(|r| push_json(out, r))
    }
    fn restore(
        into: &mut Restored,
        (project, category, model): (&str, &str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let row: StoredRow = read.value()?;
        let key = (category.to_owned(), model.to_owned());
        let board = &mut into.state.judges_mut(project).board;
        board.rows.insert(key, row.into_row());
        Ok(())
    }
}

/// See [`Slot::Watermark`].
pub(in crate::changelog) struct WatermarkStore;

/// A project's watermark record.
#[derive(Serialize, Deserialize)]
struct WatermarkValue {
    watermark: EventTime,
}

impl Store for WatermarkStore {
    const KIND: &'static str = "watermark";
    type Id<'a> = &'a str;
    fn render(from: &Source<'_>, project: &str, out: &mut Vec<u8>) -> bool {
        let project = from.state.projects.get(project);
        let watermark = project.and_then(|p| p.sessions.watermark);
        watermark.is_some_and(|watermark| push_json(out, &WatermarkValue { watermark }))
    }
    fn restore(into: &mut Restored, project: &str, read: &Read<'_>) -> Result<(), ChangelogError> {
        let WatermarkValue { watermark } = read.value()?;
        into.state.project(project).sessions.watermark = Some(watermark);
        Ok(())
    }
}

/// A category's Bradley-Terry material, created empty if new.
fn ranking<'r>(into: &'r mut Restored, project: &str, category: &str) -> &'r mut Ranking {
    let ranked = &mut into.state.judges_mut(project).board.ranked;
    ranked.entry(category.to_owned()).or_default()
}

/// See [`Slot::Ranking`].
pub(in crate::changelog) struct RankingStore;

impl Store for RankingStore {
    const KIND: &'static str = "ranking";
    type Id<'a> = (&'a str, &'a str);
    fn render(from: &Source<'_>, (project, category): (&str, &str), out: &mut Vec<u8>) -> bool {
        let ranking = from
            .state
            .judges(project)
            .and_then(|p| p.board.ranked.get(category));
        ranking.is_some_and(|r| push_json(out, r))
    }
    fn restore(
        into: &mut Restored,
        (project, category): (&str, &str),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let read: Ranking = read.value()?;
        if read.unfitted {
            into.state.unfitted_boards.0.insert(project.into());
        }
        let ranking = ranking(into, project, category);
        // Its blocks are records of their own, read before or after it.
        let blocks = std::mem::take(&mut ranking.blocks);
        *ranking = Ranking { blocks, ..read };
        Ok(())
    }
}

/// See [`Slot::Block`].
pub(in crate::changelog) struct BlockStore;

impl Store for BlockStore {
    const KIND: &'static str = "block";
    type Id<'a> = (&'a str, &'a str, BlockId);
    fn render(
        from: &Source<'_>,
        (p, category, block): (&str, &str, BlockId),
        out: &mut Vec<u8>,
    ) -> bool {
        let pairs = from
            .state
            .judges(p)
            .and_then(|p| p.board.ranked.get(category))
            .and_then(|r| r.blocks.get(&block));
        pairs.is_some_and(|p| push_json(out, p))
    }
    fn restore(
        into: &mut Restored,
        (project, category, block): (&str, &str, BlockId),
        read: &Read<'_>,
    ) -> Result<(), ChangelogError> {
        let pairs = read.value()?;
        ranking(into, project, category).blocks.insert(block, pairs);
        Ok(())
    }
}

/// See [`Slot::Book`].
pub(in crate::changelog) struct BookStore;

/// The session book's record. (A changelog written before watermarks were per project also
/// holds the partition's `watermark` here, which restore ignores: the projects' own start with
/// their next event.)
#[derive(Serialize, Deserialize)]
struct BookMeta {
    next_seq: u64,
}

impl Store for BookStore {
    const KIND: &'static str = "book";
    type Id<'a> = ();
    fn render(from: &Source<'_>, (): (), out: &mut Vec<u8>) -> bool {
        let next_seq = from.state.sessions.next_seq();
        push_json(out, &BookMeta { next_seq })
    }
    fn restore(into: &mut Restored, (): (), read: &Read<'_>) -> Result<(), ChangelogError> {
        into.next_seq = read.value::<BookMeta>()?.next_seq;
        Ok(())
    }
}
