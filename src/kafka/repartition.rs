//! The repartitioning stage's records (Kafka Streams' repartition topic), the default
//! (`input.partitioning = "repartition"`): producers key records however they like, so each input
//! record is read just far enough to find its project ([`crate::engine::Engine::project_of`])
//! and forwarded, its payload byte for byte, to `<group_id>-repartition`, keyed by the project,
//! with headers naming where it came from, to the partition [`crate::topics::partition_of`]
//! gives the project: all of a project's records are in one partition of that topic, in the
//! order they were forwarded (and a query for it knows which instance holds it), and the
//! state of each of its partitions is kept exactly as an input partition's is in `by_key` mode.
//!
//! The stage is stateless and shares the epochs of the stateful one: an input record's offset
//! is committed only once its forward is acknowledged. A crash after a forward and before that
//! commit forwards the record again; the copy carries the same origin, and the state it reaches
//! skips it (see [`crate::engine::Origins`]). A record whose project cannot be read has no
//! partition to go to and is dead-lettered by the stage, naming its own coordinates.
//!
//! Here: how a forwarded record names its origin (its headers) and how that is read back, and
//! the project a record goes to. The processing thread forwards (`Core::forward` in
//! `super::process`); the polling thread reads projects and origins (`super::poll`).

use std::ffi::CStr;

use rdkafka::message::{Header, OwnedHeaders};

use super::batch_queue::Consumed;
use crate::engine::contract::rejection::{ErrorCode, Rejection};
use crate::engine::{InputTopic, ProjectKey, Record};
use crate::topics::TopicTable;

/// The headers of a forwarded record: `jurystream.origin`, the JSON array `[topic, partition,
/// offset, timestamp]` (the timestamp in milliseconds, `null` if the record had none), and
/// `jurystream.key`, the record's key, absent if it had none. Two headers rather than one per
/// coordinate: librdkafka allocates, copies and frees every header of every record on both
/// sides, and five of them were a fifth of the processing thread's time.
const ORIGIN: &CStr = c"jurystream.origin";
const KEY: &CStr = c"jurystream.key";

/// Bytes allowed for a forwarded record's headers besides the original key: the header names
/// and the origin's topic name (at most 249 bytes) and numbers.
const FORWARD_OVERHEAD: usize = 512;

/// Where a repartition-topic record came from, read from its headers. A record that does not
/// name an input topic (not written by this stage) is dead-lettered as from no input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Origin {
    pub input: Option<InputTopic>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub timestamp_ms: Option<i64>,
}

/// The `jurystream.origin` header as written and read.
type OriginHeader<'a> = (&'a str, i32, i64, Option<i64>);

impl Origin {
    /// The origin `msg`'s headers name.
    pub fn read(msg: &Consumed<'_>, topics: &TopicTable) -> Origin {
        let header = msg
            .header(ORIGIN)
            .and_then(|v| serde_json::from_slice::<OriginHeader<'_>>(v).ok());
        match header {
            Some((topic, partition, offset, timestamp_ms)) => Origin {
                input: topics.input(topic),
                partition: Some(partition),
                offset: Some(offset),
                timestamp_ms,
            },
            None => Origin {
                input: None,
                partition: None,
                offset: None,
                timestamp_ms: None,
            },
        }
    }

    /// The engine's view of `msg`, a repartition-topic record from this origin: the input
    /// record it copies, at `msg`'s position in the repartition topic.
    pub fn record<'m>(&self, msg: &'m Consumed<'_>, topics: &'m TopicTable) -> Record<'m> {
        Record {
            topic: self
                .input
                .map_or(topics.repartition(), |t| topics.input_name(t)),
            input: self.input,
            partition: self.partition,
            offset: self.offset,
            position: Some(msg.offset()),
            key: msg.header(KEY),
            timestamp_ms: self.timestamp_ms,
            clock_ms: None,
            held_projects: 0,
            payload: msg.payload(),
        }
    }
}

/// A header name as the producer's API takes it.
fn name(header: &CStr) -> &str {
    header.to_str().unwrap_or_default()
}

/// The headers that name `record`'s origin.
pub(super) fn headers(record: &Record<'_>) -> OwnedHeaders {
    let origin: OriginHeader<'_> = (
        record.topic,
        record.partition.unwrap_or_default(),
        record.offset.unwrap_or_default(),
        record.timestamp_ms,
    );
    let origin = serde_json::to_vec(&origin).unwrap_or_default();
    let h = OwnedHeaders::new_with_capacity(2).insert(Header {
        key: name(ORIGIN),
        value: Some(&origin),
    });
    match record.key {
        Some(key) => h.insert(Header {
            key: name(KEY),
            value: Some(key),
        }),
        None => h,
    }
}

/// The project a forwarded record goes to, or why it has none: what the polling thread reads
/// of an input record when it has time to (see [`super::poll::Polled::routed`]).
pub(super) type Routed = Result<ProjectKey, Rejection>;

/// Refuses to forward `record` to `project`'s partition if it would be larger, with its key
/// in a header, than the `limit` the producer sends.
pub(super) fn check_size(
    record: &Record<'_>,
    project: &str,
    limit: usize,
) -> Result<(), Rejection> {
    // The project is the new key; the old key travels in a header.
    let size = record.payload.map_or(0, <[u8]>::len)
        + record.key.map_or(0, <[u8]>::len)
        + project.len()
        + FORWARD_OVERHEAD;
    if size > limit {
        return Err(Rejection::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the record and its key, forwarded to the partition of project {project:?}, \
                 would be {size} bytes, above the {limit} bytes the producer sends \
                 (message.max.bytes)"
            ),
        ));
    }
    Ok(())
}
