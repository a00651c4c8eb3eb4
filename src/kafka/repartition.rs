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

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};

use crate::engine::contract::rejection::{ErrorCode, Rejection};
use crate::engine::output::{DeadLetter, Output, Source};
use crate::engine::{InputTopic, ProjectKey, Record, TICK_TOPIC};
use crate::topics::TopicTable;

/// The headers of a forwarded record: `jurystream.origin`, the JSON array `[topic, partition,
/// offset, timestamp]` (the timestamp in milliseconds, `null` if the record had none), and
/// `jurystream.key`, the record's key, absent if it had none. Two headers rather than one per
/// coordinate: librdkafka allocates, copies and frees every header of every record on both
/// sides, and five of them were a fifth of the processing thread's time.
const ORIGIN: &str = "jurystream.origin";
const KEY: &str = "jurystream.key";

/// Bytes allowed for a forwarded record's headers besides the original key: the header names
/// and the origin's topic name (at most 249 bytes) and numbers.
const FORWARD_OVERHEAD: usize = 512;

/// Where a repartition-topic record came from, read from its headers. A record that does not
/// name an input topic (not written by this stage) is dead-lettered as from no input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Origin {
    pub input: Option<InputTopic>,
    /// A tick this service wrote (see [`TICK_TOPIC`]), not a forwarded record.
    pub tick: bool,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub timestamp_ms: Option<i64>,
}

/// The `jurystream.origin` header as written and read.
type OriginHeader<'a> = (&'a str, i32, i64, Option<i64>);

impl Origin {
    /// The origin `msg`'s headers name.
    pub fn read(msg: &BorrowedMessage<'_>, topics: &TopicTable) -> Origin {
        let header =
            header(msg, ORIGIN).and_then(|v| serde_json::from_slice::<OriginHeader<'_>>(v).ok());
        match header {
            Some((topic, _, _, timestamp_ms)) if topic == TICK_TOPIC => Origin {
                input: None,
                tick: true,
                partition: None,
                offset: None,
                timestamp_ms,
            },
            Some((topic, partition, offset, timestamp_ms)) => Origin {
                input: topics.input(topic),
                tick: false,
                partition: Some(partition),
                offset: Some(offset),
                timestamp_ms,
            },
            None => Origin {
                input: None,
                tick: false,
                partition: None,
                offset: None,
                timestamp_ms: None,
            },
        }
    }

    /// The engine's view of `msg`, a repartition-topic record from this origin: the input
    /// record it copies, at `msg`'s position in the repartition topic.
    pub fn record<'m>(&self, msg: &'m BorrowedMessage<'_>, topics: &'m TopicTable) -> Record<'m> {
        let topic = match self.input {
            Some(t) => topics.input_name(t),
            None if self.tick => TICK_TOPIC,
            None => topics.repartition(),
        };
        Record::new(topic, self.input, msg.payload())
            .at(self.partition, self.offset)
            .positioned(Some(msg.offset()))
            .keyed(header(msg, KEY), self.timestamp_ms)
    }
}

/// The value of `msg`'s last header named `name`, if it has one (a header without a value reads
/// as an empty one).
fn header<'m>(msg: &'m BorrowedMessage<'_>, name: &str) -> Option<&'m [u8]> {
    let headers = msg.headers()?;
    headers
        .iter()
        .filter(|h| h.key == name)
        .last()
        .map(|h| h.value.unwrap_or_default())
}

/// The headers of a tick written at wall-clock time `now_ms` to a partition of the project
/// log: an origin naming [`TICK_TOPIC`], with the time as its timestamp.
pub(super) fn tick_headers(now_ms: i64) -> OwnedHeaders {
    let origin: OriginHeader<'_> = (TICK_TOPIC, 0, 0, Some(now_ms));
    let origin = serde_json::to_vec(&origin).unwrap_or_default();
    OwnedHeaders::new_with_capacity(1).insert(Header {
        key: ORIGIN,
        value: Some(&origin),
    })
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
        key: ORIGIN,
        value: Some(&origin),
    });
    match record.key {
        Some(key) => h.insert(Header {
            key: KEY,
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

/// A forward the client or broker refused for good (see `super::collector`): what the dead
/// letter that stands in for its input record needs, read back from the forward's headers.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refused {
    /// The epoch the forward belongs to: its dead letter is an output of the same epoch.
    pub epoch: u64,
    /// The input record's own topic, partition and offset (from `jurystream.origin`).
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// The input record's key (from `jurystream.key`).
    pub key: Option<Vec<u8>>,
    /// The payload, `None` when its size was the reason.
    pub payload: Option<Vec<u8>>,
    pub payload_bytes: usize,
    /// The broker's or client's error.
    pub error: String,
    pub too_large: bool,
}

impl Refused {
    /// The refused forward of `epoch` with `headers` and `payload`, refused with `error`.
    pub fn of(
        epoch: u64,
        headers: Option<&impl Headers>,
        payload: Option<&[u8]>,
        error: &KafkaError,
    ) -> Refused {
        let header = |wanted: &str| {
            let headers = headers?;
            headers
                .iter()
                .find(|h| h.key == wanted)
                .and_then(|h| h.value.map(<[u8]>::to_vec))
        };
        let origin = header(ORIGIN)
            .and_then(|v| serde_json::from_slice::<(String, i32, i64, Option<i64>)>(&v).ok());
        let too_large = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize)
        );
        Refused {
            epoch,
            topic: origin.as_ref().map(|o| o.0.clone()),
            partition: origin.as_ref().map(|o| o.1),
            offset: origin.as_ref().map(|o| o.2),
            key: header(KEY),
            payload: (!too_large).then(|| payload.map(<[u8]>::to_vec)).flatten(),
            payload_bytes: payload.map_or(0, <[u8]>::len),
            error: error.to_string(),
            too_large,
        }
    }

    /// The `forward_refused` dead letter of its input record, within `max_record_bytes`, with
    /// at most `max_payload_bytes` of key and payload.
    pub fn dead_letter(
        &self,
        repartition_topic: &str,
        max_payload_bytes: usize,
        max_record_bytes: usize,
    ) -> Output {
        let topic = self.topic.as_deref().unwrap_or(repartition_topic);
        let why = if self.too_large {
            " (the payload, too large, is left out)"
        } else {
            ""
        };
        let rejection = Rejection::new(
            ErrorCode::ForwardRefused,
            format!(
                "the broker refused for good to take the record into {repartition_topic}: {}; \
                 it was not applied{why}",
                self.error
            ),
        );
        let source = Source {
            topic,
            partition: self.partition,
            offset: self.offset,
            key: self.key.as_deref(),
            payload: self.payload.as_deref(),
        };
        let mut letter = DeadLetter::new(source, &rejection, max_payload_bytes);
        letter.payload_bytes = self.payload_bytes;
        letter.into_output(max_record_bytes)
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::OwnedHeaders;

    use super::*;
    use crate::engine::contract::rejection::ErrorCode;

    fn forwarded(payload: &[u8]) -> (OwnedHeaders, Vec<u8>) {
        let record = Record::new("jury.votes", Some(InputTopic::Votes), Some(payload))
            .at(Some(3), Some(41))
            .keyed(Some(b"producer-key"), Some(7));
        (headers(&record), payload.to_vec())
    }

    fn letter(refused: &Refused) -> serde_json::Value {
        let out = refused.dead_letter("app-repartition", 8, 1 << 20);
        serde_json::from_str(&out.render()).unwrap()
    }

    #[test]
    fn a_forward_refused_as_too_large_is_dead_lettered_at_its_origin_without_payload() {
        let (h, payload) = forwarded(br#"{"event_id":"x"}"#);
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let refused = Refused::of(5, Some(&h), Some(&payload), &error);
        assert_eq!(
            (refused.topic.as_deref(), refused.partition, refused.offset),
            (Some("jury.votes"), Some(3), Some(41))
        );
        let dl = letter(&refused);
        assert_eq!(dl["error"], ErrorCode::ForwardRefused.as_str());
        assert_eq!(
            (
                dl["source_topic"].as_str(),
                dl["partition"].as_i64(),
                dl["offset"].as_i64()
            ),
            (Some("jury.votes"), Some(3), Some(41))
        );
        assert!(dl["payload"].is_null(), "{dl}");
        assert_eq!(dl["payload_bytes"], payload.len());
        assert_eq!(dl["key"], "producer"); // cut to 8 bytes
        assert!(
            dl["message"].as_str().unwrap().contains("app-repartition"),
            "{dl}"
        );
    }

    #[test]
    fn a_forward_refused_for_another_reason_keeps_its_payload() {
        let (h, payload) = forwarded(br#"{"event_id":"x"}"#);
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::PolicyViolation);
        let dl = letter(&Refused::of(5, Some(&h), Some(&payload), &error));
        assert_eq!(dl["payload"], r#"{"event_"#);
        // Without headers (not ours): named as from the repartition topic, never lost.
        let bare = Refused::of(5, None::<&OwnedHeaders>, Some(&payload), &error);
        assert_eq!(letter(&bare)["source_topic"], "app-repartition");
    }
}
