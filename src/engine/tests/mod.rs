//! Engine-level tests: whole records in, published records out. The harness is here; the
//! tests are by what they exercise.

mod coalescing;
mod judging;
mod limits;
mod routing;
mod votes;

use std::ops::Range;

use proptest::prelude::*;
use serde_json::Value;

use super::journal::note_votes;
use super::model::dedupe::Remembered;
use super::output::OutputTopic;
use super::*;
use crate::config::Config;
use crate::topics::TopicTable;

fn engine() -> Engine {
    Engine::new(Settings::default())
}

/// A record from `topic`, an input by its default name (or not an input at all).
fn rec<'a>(topic: &'a str, payload: Option<&'a [u8]>) -> Record<'a> {
    Record::new(topic, TopicTable::default().input(topic), payload).at(Some(0), None)
}

struct Harness {
    engine: Engine,
    state: PartitionState,
    reps: ReputationTable,
    out: Vec<Output>,
    /// The position of the next record sent in the log the state follows (see
    /// [`Record::position`]). Records carry no offset: what a copy's offset does is tested with
    /// [`crate::engine::Origins`] and in `a_copy_of_any_record_is_skipped_once`.
    next_offset: i64,
}

impl Harness {
    fn new() -> Self {
        Harness {
            engine: engine(),
            state: PartitionState::default(),
            reps: ReputationTable::default(),
            out: vec![],
            next_offset: 0,
        }
    }
    /// A harness whose engine runs `config`.
    fn with(config: &Config) -> Self {
        Harness {
            engine: Engine::new(config.engine_settings()),
            ..Harness::new()
        }
    }
    fn send(&mut self, topic: &str, payload: &str) -> Outcome {
        self.send_record(rec(topic, Some(payload.as_bytes())))
    }
    /// Processes `record` at the partition's next offset.
    fn send_record(&mut self, mut record: Record<'_>) -> Outcome {
        record.position = Some(self.next_offset);
        self.next_offset += 1;
        self.out.clear();
        self.engine
            .process(&mut self.state, &mut self.reps, &record, &mut self.out)
    }
    fn last(&self) -> Value {
        serde_json::from_str(&self.out.last().expect("an output").render()).unwrap()
    }
}

fn votes(event_id: &str, at: &str, votes: &str) -> String {
    format!(
        r#"{{"event_id": "{event_id}", "project_id": "proj-42", "occurred_at": "{at}", "votes": [{votes}]}}"#
    )
}

fn ballot(event: &str, session: &str, secs: i64, judge: &str, rest: &str) -> String {
    format!(
        r#"{{"event_id": "{event}", "project_id": "proj-42", "session_id": "{session}", "occurred_at": {}, "judge": "{judge}"{rest}}}"#,
        1_795_168_800_000 + secs * 1000
    )
}

fn topics(out: &[Output]) -> Vec<OutputTopic> {
    out.iter().map(|o| o.topic).collect()
}
