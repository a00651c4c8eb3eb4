//! The fuzzing harness of every input decoder: one function that takes arbitrary bytes, feeds
//! them to a decoder chosen by the first byte, and panics if an invariant breaks. The AFL++
//! target (`src/bin/decoders.rs`) drives it with coverage guidance; `tests/corpus.rs` replays
//! the committed corpus through it in CI.
//!
//! Invariants checked on every input, beyond "does not panic":
//! - a record the engine rejects leaves the state as it was (but for the note of its offset)
//!   and makes exactly one dead letter;
//! - the repartitioning stage's reading of a record's project agrees with the full reader: a
//!   record whose project it cannot read is rejected, and an applied one is its project's;
//! - the prepared path of a vote batch (the one-pass reader) agrees with the full reader: same
//!   outcome, same outputs, same state;
//! - every output renders to JSON within the record limit;
//! - replay of arbitrary bytes ends in a summary or an error, and changelog restore in a state
//!   or an error.

use jurystream::changelog::{Restorer, Unit};
use jurystream::engine::output::Output;
use jurystream::engine::reputation::ReputationTable;
use jurystream::engine::{Engine, InputTopic, Outcome, PartitionState, Record, Settings};
use jurystream::topics::TopicTable;

/// Runs one fuzz input. First byte: 0 votes, 1 judge-scores, 2 reputations (the rest is the
/// payload; a second record follows a 0xFF byte, so sequences are explored too), 3 a replay file,
/// 4 a changelog partition (records separated by 0xFE, key and value by 0xFD).
pub fn decoders(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 5 {
        0 => records(InputTopic::Votes, "jury.votes", rest),
        1 => records(InputTopic::JudgeScores, "jury.judge-scores", rest),
        2 => records(InputTopic::Reputations, "jury.reputations", rest),
        3 => replay(rest),
        _ => restore(rest),
    }
}

fn records(input: InputTopic, topic: &str, data: &[u8]) {
    let engine = Engine::new(Settings::default());
    let max = engine.settings().limits.max_record_bytes();
    let mut state = PartitionState::default();
    let mut reps = ReputationTable::default();
    let mut out: Vec<Output> = Vec::new();
    for (offset, payload) in data.split(|&b| b == 0xFF).enumerate() {
        let record = Record::new(topic, Some(input), Some(payload))
            .at(Some(0), Some(offset as i64))
            .keyed(payload.get(..4), Some(1_795_168_800_000))
            .received(None, state.project_count());
        let before = state.clone();
        out.clear();
        let outcome = engine.process(&mut state, &mut reps, &record, &mut out);
        if let Outcome::Rejected(_) = outcome {
            let noted = PartitionState {
                origins: state.origins.clone(),
                ..before.clone()
            };
            assert_eq!(state, noted, "a rejected record changed state");
            assert_eq!(out.len(), 1, "a rejection makes one dead letter");
        }
        if input != InputTopic::Reputations {
            match engine.project_of(&record) {
                Err(_) => assert!(
                    matches!(outcome, Outcome::Rejected(_)),
                    "a record whose project cannot be read was applied"
                ),
                Ok(project) if outcome == Outcome::Applied => assert!(
                    state.projects.contains_key(project.as_str()),
                    "applied to another project than {project:?}"
                ),
                Ok(_) => {}
            }
        }
        if let Some(prepared) = engine.prepare_votes(&record) {
            let (mut again, mut again_reps, mut again_out) =
                (before.clone(), ReputationTable::default(), Vec::new());
            let read = record.read_ahead(Some(&prepared));
            let fast = engine.process(&mut again, &mut again_reps, &read, &mut again_out);
            assert_eq!(
                fast, outcome,
                "a batch read ahead and one read in place disagree"
            );
            assert_eq!(again_out, out, "a batch read ahead publishes differently");
            assert_eq!(again, state, "a batch read ahead applies differently");
        }
        for o in &out {
            let text = o.render();
            assert!(text.len() <= max, "an output of {} bytes", text.len());
            assert!(
                serde_json::from_str::<serde_json::Value>(&text).is_ok(),
                "an output is not JSON"
            );
        }
    }
}

fn replay(data: &[u8]) {
    let (engine, topics) = (Engine::new(Settings::default()), TopicTable::default());
    let mut out = Vec::new();
    let _ = jurystream::replay::replay(&engine, &topics, data, &mut out);
}

/// Restores the records as a projects unit (`["p",0,...]`) and as a votes unit (`["v",0,...]`).
fn restore(data: &[u8]) {
    for unit in [Unit::projects(0), Unit::input(InputTopic::Votes, 0)] {
        let mut restorer = Restorer::new(unit);
        for record in data.split(|&b| b == 0xFE) {
            let mut parts = record.splitn(2, |&b| b == 0xFD);
            let key = parts.next().unwrap_or_default();
            restorer.accept(key, parts.next());
        }
        let _ = restorer.finish();
    }
}
