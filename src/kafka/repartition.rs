//! The repartitioning stage's records (Kafka Streams' repartition topic), the default
//! (`input.partitioning = "repartition"`): producers key records however they like, so each input
//! record is read just far enough to find its project ([`crate::engine::Engine::project_of`])
//! and forwarded, its payload byte for byte, to `<group_id>-repartition`, keyed by where it came
//! from (its [`ForwardKey`]), to the partition [`crate::topics::partition_of`]
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
//! Here: how a forwarded record names its origin (its key) and how that is read back, and
//! the project a record goes to. The processing thread forwards (`Core::forward` in
//! `super::process`); the polling thread reads projects and origins (`super::poll`).

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};

use crate::engine::contract::rejection::{ErrorCode, Rejection};
use crate::engine::output::{DeadLetter, Output, Source};
use crate::engine::{InputTopic, ProjectKey, Record, TICK_TOPIC};
use crate::topics::TopicTable;

/// The key of a forwarded record: the JSON array `[topic, partition, offset, timestamp,
/// keyed]` (the timestamp in milliseconds, `null` if the record had none; `keyed` whether it had
/// a key), followed by the record's own key byte for byte if it had one. The origin travels in
/// the key, not in headers: librdkafka parses, allocates, copies and frees every header of every
/// record on both sides, which cost more than anything else the polling thread did but read the
/// votes (docs/performance-history.md). The partition is chosen by the project, so the key is
/// free to carry this.
pub(super) type ForwardKey<'a> = (&'a str, i32, i64, Option<i64>, bool);

/// The headers that named a forwarded record's origin before it travelled in the key, read from
/// records forwarded by an earlier version that may still be in the topic after an upgrade:
/// `jurystream.origin`, `[topic, partition, offset, timestamp]`, and `jurystream.key`, the
/// record's key, absent if it had none.
const ORIGIN: &str = "jurystream.origin";
const KEY: &str = "jurystream.key";

/// Bytes allowed for a forwarded record's key besides the original key: the origin's topic name
/// (at most 249 bytes) and numbers.
const FORWARD_OVERHEAD: usize = 512;

/// Where a repartition-topic record came from, read from its key (or an earlier version's
/// headers). A record that does not name an input topic (not written by this stage) is
/// dead-lettered as from no input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Origin {
    pub input: Option<InputTopic>,
    /// A tick this service wrote (see [`TICK_TOPIC`]), not a forwarded record.
    pub tick: bool,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    pub timestamp_ms: Option<i64>,
    /// Where the input record's key is.
    key: KeyAt,
}

/// Where a forwarded record carries its input record's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAt {
    /// It had none.
    Absent,
    /// In the forward's key, from this byte on (after the origin).
    From(usize),
    /// In the `jurystream.key` header (forwarded by an earlier version).
    Header,
}

/// The origin a forward's `key` names, and the byte where the input record's key starts in it
/// (`None` if it had none); `None` if `key` is not a forward key.
fn read_key(key: &[u8]) -> Option<(ForwardKey<'_>, Option<usize>)> {
    let mut values = serde_json::Deserializer::from_slice(key).into_iter::<ForwardKey<'_>>();
    let origin = values.next()?.ok()?;
    let at = values.byte_offset();
    match origin.4 {
        true => Some((origin, Some(at))),
        false if at == key.len() => Some((origin, None)),
        false => None,
    }
}

impl Origin {
    /// The origin `msg`'s key names, or, for a record forwarded by an earlier version, its
    /// headers. (A project id that is itself a forward key could be misread in a record of an
    /// earlier version; no such record is written any more.)
    pub fn read(msg: &impl Message, topics: &TopicTable) -> Origin {
        let (origin, key) = match msg.key().and_then(read_key) {
            Some(((topic, partition, offset, timestamp, _), at)) => {
                let key = at.map_or(KeyAt::Absent, KeyAt::From);
                (Some((topic, partition, offset, timestamp)), key)
            }
            None => {
                let header = header(msg, ORIGIN)
                    .and_then(|v| serde_json::from_slice::<(&str, i32, i64, Option<i64>)>(v).ok());
                (header, KeyAt::Header)
            }
        };
        let none = Origin {
            input: None,
            tick: false,
            partition: None,
            offset: None,
            timestamp_ms: None,
            key,
        };
        match origin {
            Some((topic, _, _, timestamp_ms)) if topic == TICK_TOPIC => Origin {
                tick: true,
                timestamp_ms,
                ..none
            },
            Some((topic, partition, offset, timestamp_ms)) => Origin {
                input: topics.input(topic),
                partition: Some(partition),
                offset: Some(offset),
                timestamp_ms,
                ..none
            },
            None => none,
        }
    }

    /// The engine's view of `msg`, a repartition-topic record from this origin: the input
    /// record it copies, at `msg`'s position in the repartition topic, first read by the
    /// service when the forwarding stage stamped `msg` (its own timestamp; see
    /// [`Record::read_at_ms`]).
    pub fn record<'m>(&self, msg: &'m impl Message, topics: &'m TopicTable) -> Record<'m> {
        let topic = match self.input {
            Some(t) => topics.input_name(t),
            None if self.tick => TICK_TOPIC,
            None => topics.repartition(),
        };
        let key = match self.key {
            KeyAt::Absent => None,
            KeyAt::From(at) => msg.key().and_then(|k| k.get(at..)),
            KeyAt::Header => header(msg, KEY),
        };
        Record::new(topic, self.input, msg.payload())
            .at(self.partition, self.offset)
            .positioned(Some(msg.offset()))
            .keyed(key, self.timestamp_ms)
            .read_at(msg.timestamp().to_millis())
    }
}

/// The value of `msg`'s last header named `name`, if it has one (a header without a value reads
/// as an empty one).
fn header<'m>(msg: &'m impl Message, name: &str) -> Option<&'m [u8]> {
    let headers = msg.headers()?;
    headers
        .iter()
        .filter(|h| h.key == name)
        .last()
        .map(|h| h.value.unwrap_or_default())
}

/// The key of a tick written at wall-clock time `now_ms` to a partition of the project log: an
/// origin naming [`TICK_TOPIC`], with the time as its timestamp.
pub(super) fn tick_key(now_ms: i64) -> Vec<u8> {
    let origin: ForwardKey<'_> = (TICK_TOPIC, 0, 0, Some(now_ms), false);
    serde_json::to_vec(&origin).unwrap_or_default()
}

/// The key that names `record`'s origin, its own key after it (see [`ForwardKey`]).
pub(super) fn forward_key(record: &Record<'_>) -> Vec<u8> {
    let origin: ForwardKey<'_> = (
        record.topic,
        record.partition.unwrap_or_default(),
        record.offset.unwrap_or_default(),
        record.timestamp_ms,
        record.key.is_some(),
    );
    let mut key = serde_json::to_vec(&origin).unwrap_or_default();
    key.extend_from_slice(record.key.unwrap_or_default());
    key
}

/// The project a forwarded record goes to, or why it has none: what the polling thread reads
/// of an input record when it has time to (see [`super::poll::Polled::routed`]).
pub(super) type Routed = Result<ProjectKey, Rejection>;

/// Refuses to forward `record` to `project`'s partition if it would be larger, with its key
/// after its origin in the forward's key, than the `limit` the producer sends.
pub(super) fn check_size(
    record: &Record<'_>,
    project: &str,
    limit: usize,
) -> Result<(), Rejection> {
    let size = record.payload.map_or(0, <[u8]>::len)
        + record.key.map_or(0, <[u8]>::len)
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
/// letter that stands in for its input record needs, read back from the forward's key.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refused {
    /// The epoch the forward belongs to: its dead letter is an output of the same epoch.
    pub epoch: u64,
    /// The input record's own topic, partition and offset (from the forward's key).
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// The input record's key (from the forward's key).
    pub key: Option<Vec<u8>>,
    /// The payload, `None` when its size was the reason.
    pub payload: Option<Vec<u8>>,
    pub payload_bytes: usize,
    /// The broker's or client's error.
    pub error: String,
    pub too_large: bool,
}

impl Refused {
    /// The refused forward of `epoch` with key `key` and `payload`, refused with `error`.
    pub fn of(
        epoch: u64,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        error: &KafkaError,
    ) -> Refused {
        let read = key.and_then(|k| Some((read_key(k)?, k)));
        let origin = read.map(|((origin, _), _)| origin);
        let too_large = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize)
        );
        Refused {
            epoch,
            topic: origin.map(|(topic, ..)| topic.to_owned()),
            partition: origin.map(|(_, partition, ..)| partition),
            offset: origin.map(|(_, _, offset, ..)| offset),
            key: read.and_then(|((_, at), k)| Some(k.get(at?..)?.to_vec())),
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
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage, Timestamp};

    use super::*;
    use crate::engine::contract::rejection::ErrorCode;

    fn record(key: Option<&'static [u8]>) -> Record<'static> {
        let payload: &[u8] = br#"{"event_id":"x"}"#;
        Record::new("jury.votes", Some(InputTopic::Votes), Some(payload))
            .at(Some(3), Some(41))
            .keyed(key, Some(7))
    }

    fn forwarded(payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
        (
            forward_key(&record(Some(b"producer-key"))),
            payload.to_vec(),
        )
    }

    /// A repartition-topic message with `key` and `headers`, at offset 9 of partition 1.
    fn message(key: Option<Vec<u8>>, headers: Option<OwnedHeaders>) -> OwnedMessage {
        let payload = br#"{"event_id":"x"}"#.to_vec();
        let (topic, timestamp) = ("app-repartition".to_owned(), Timestamp::CreateTime(1));
        OwnedMessage::new(Some(payload), key, topic, timestamp, 1, 9, headers)
    }

    fn topics() -> TopicTable {
        TopicTable::default()
    }

    #[test]
    fn a_forward_key_names_the_origin_and_carries_the_key_byte_for_byte() {
        let topics = topics();
        let keys: [Option<&'static [u8]>; 6] = [
            Some(b"producer-key"),
            Some(b""),
            None,
            Some(b" spaced, \n"),
            Some(b"[\"jury.votes\",1,2,null,false]"),
            Some(&[0xff, 0x00, b']', b'"']),
        ];
        for key in keys {
            let forward = forward_key(&record(key));
            let msg = message(Some(forward), None);
            let origin = Origin::read(&msg, &topics);
            assert_eq!(
                (origin.input, origin.tick, origin.partition, origin.offset),
                (Some(InputTopic::Votes), false, Some(3), Some(41))
            );
            assert_eq!(origin.timestamp_ms, Some(7));
            let read = origin.record(&msg, &topics);
            assert_eq!(read.key, key, "{key:?}");
            assert_eq!((read.partition, read.offset), (Some(3), Some(41)));
            assert_eq!(read.topic, "jury.votes");
        }
    }

    #[test]
    fn a_tick_key_names_the_tick_topic_and_its_time() {
        let msg = message(Some(tick_key(1_234)), None);
        let origin = Origin::read(&msg, &topics());
        assert!(origin.tick && origin.input.is_none(), "{origin:?}");
        assert_eq!(origin.timestamp_ms, Some(1_234));
        assert_eq!(origin.record(&msg, &topics()).key, None);
    }

    #[test]
    fn a_record_forwarded_with_headers_by_an_earlier_version_is_read_from_them() {
        let topics = topics();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: ORIGIN,
                value: Some(br#"["jury.votes",2,17,5]"#),
            })
            .insert(Header {
                key: KEY,
                value: Some(b"producer-key"),
            });
        let msg = message(Some(b"project-a".to_vec()), Some(headers));
        let origin = Origin::read(&msg, &topics);
        assert_eq!(
            (
                origin.input,
                origin.partition,
                origin.offset,
                origin.timestamp_ms
            ),
            (Some(InputTopic::Votes), Some(2), Some(17), Some(5))
        );
        assert_eq!(origin.record(&msg, &topics).key, Some(&b"producer-key"[..]));
    }

    #[test]
    fn a_record_that_names_no_origin_is_from_no_input() {
        let topics = topics();
        for key in [
            None,
            Some(b"project-a".to_vec()),
            Some(b"[\"t\",1,2,null,false]x".to_vec()),
        ] {
            let msg = message(key.clone(), None);
            let origin = Origin::read(&msg, &topics);
            assert_eq!(
                (origin.input, origin.tick, origin.offset),
                (None, false, None),
                "{key:?}"
            );
            assert_eq!(origin.record(&msg, &topics).topic, topics.repartition());
        }
    }

    fn letter(refused: &Refused) -> serde_json::Value {
        let out = refused.dead_letter("app-repartition", 8, 1 << 20);
        serde_json::from_str(&out.render()).unwrap()
    }

    #[test]
    fn a_forward_refused_as_too_large_is_dead_lettered_at_its_origin_without_payload() {
        let (key, payload) = forwarded(br#"{"event_id":"x"}"#);
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let refused = Refused::of(5, Some(&key), Some(&payload), &error);
        assert_eq!(
            (refused.topic.as_deref(), refused.partition, refused.offset),
            (Some("jury.votes"), Some(3), Some(41))
        );
        assert_eq!(refused.key.as_deref(), Some(&b"producer-key"[..]));
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
        let (key, payload) = forwarded(br#"{"event_id":"x"}"#);
        let error = KafkaError::MessageProduction(RDKafkaErrorCode::PolicyViolation);
        let dl = letter(&Refused::of(5, Some(&key), Some(&payload), &error));
        assert_eq!(dl["payload"], r#"{"event_"#);
        // Without a forward key (not ours): named as from the repartition topic, never lost.
        let bare = Refused::of(5, Some(b"project-a"), Some(&payload), &error);
        assert_eq!(letter(&bare)["source_topic"], "app-repartition");
        assert!(bare.key.is_none() && bare.offset.is_none(), "{bare:?}");
    }
}
