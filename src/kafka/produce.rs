//! Producing through topic handles made once, instead of naming the topic in every record.
//!
//! Why: rdkafka's `BaseProducer::send` copies the topic's name into a new C string for every
//! record, and librdkafka then looks the topic up by that name (a lock and a search of the
//! client's topics) and drops the reference again. With 10,000 projects the processing thread
//! produces a record every few events, and the C string alone was ~4% of its samples. A
//! [`Topic`] is librdkafka's own handle (`rd_kafka_topic_t`), made once with the client's
//! default topic configuration, which is what producing by name uses, so records go out
//! exactly as before.
//!
//! Like [`super::queue`], this is FFI to librdkafka's documented API; the two are the crate's
//! only FFI beside rdkafka.

use std::ffi::{CString, c_void};
use std::ptr::{self, NonNull};

use rdkafka::IntoOpaque;
use rdkafka::bindings as rd;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

use crate::engine::Engine;
use crate::engine::output::OutputTopic;

/// A producer's handle for one topic.
///
/// It must be dropped before the producer it was made for: librdkafka's termination sequence
/// destroys topic handles before the client. [`super::Core`] declares its topics first for that.
pub struct Topic {
    rkt: NonNull<rd::rd_kafka_topic_t>,
}

// SAFETY: librdkafka's topic handles are thread-safe (reference counted, with their own locks),
// and this type only produces through the handle and destroys it once.
unsafe impl Send for Topic {}
// SAFETY: as above; producing through a shared handle from several threads is supported.
unsafe impl Sync for Topic {}

impl Topic {
    /// The handle for topic `name` on `producer`'s client.
    pub fn new<C: ProducerContext>(
        producer: &BaseProducer<C>,
        name: &str,
    ) -> Result<Topic, KafkaError> {
        let name = CString::new(name)?;
        // SAFETY: the client pointer is live for `producer`'s lifetime, `name` is a C string, and
        // a null configuration asks for the client's default topic configuration.
        let rkt = unsafe {
            rd::rd_kafka_topic_new(
                producer.client().native_ptr(),
                name.as_ptr(),
                ptr::null_mut(),
            )
        };
        NonNull::new(rkt).map(|rkt| Topic { rkt }).ok_or_else(|| {
            // SAFETY: reads the calling thread's last librdkafka error; no arguments.
            let code = unsafe { rd::rd_kafka_last_error() };
            KafkaError::ClientCreation(format!(
                "no topic handle for {name:?}: {}",
                RDKafkaErrorCode::from(code)
            ))
        })
    }

    /// Produces one record (key and payload copied), as `BaseProducer::send` does with the
    /// same fields: on `partition`, or the configured partitioner's choice by key, with
    /// `opaque` handed to the delivery report. On failure the error and `opaque` come back, so
    /// the caller can retry (`QueueFull`) without making it again.
    pub fn produce<C: ProducerContext>(
        &self,
        producer: &BaseProducer<C>,
        partition: Option<i32>,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        opaque: C::DeliveryOpaque,
    ) -> Result<(), (RDKafkaErrorCode, C::DeliveryOpaque)> {
        fn raw(bytes: Option<&[u8]>) -> (*mut c_void, usize) {
            bytes.map_or((ptr::null_mut(), 0), |b| {
                (b.as_ptr() as *mut c_void, b.len())
            })
        }
        let (key_ptr, key_len) = raw(key);
        let (payload_ptr, payload_len) = raw(payload);
        let opaque = opaque.into_ptr();
        use rd::rd_kafka_vtype_t::*;
        // SAFETY: the client and the topic handle are live (the handle is dropped before the
        // client); every value is followed by the type its tag announces, and the list ends with
        // RD_KAFKA_VTYPE_END. With RD_KAFKA_MSG_F_COPY librdkafka copies key and payload before
        // returning; it owns `opaque` only if it accepts the record.
        let err = unsafe {
            rd::rd_kafka_producev(
                producer.client().native_ptr(),
                RD_KAFKA_VTYPE_RKT,
                self.rkt.as_ptr(),
                RD_KAFKA_VTYPE_PARTITION,
                partition.unwrap_or(-1),
                RD_KAFKA_VTYPE_MSGFLAGS,
                rd::RD_KAFKA_MSG_F_COPY,
                RD_KAFKA_VTYPE_VALUE,
                payload_ptr,
                payload_len,
                RD_KAFKA_VTYPE_KEY,
                key_ptr,
                key_len,
                RD_KAFKA_VTYPE_OPAQUE,
                opaque,
                RD_KAFKA_VTYPE_END,
            )
        };
        if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Ok(());
        }
        // SAFETY: librdkafka refused the record, so `opaque` is still ours, made by `into_ptr`
        // above and taken back once.
        Err((err.into(), unsafe { C::DeliveryOpaque::from_ptr(opaque) }))
    }
}

impl Drop for Topic {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_topic_new` and is destroyed once, before its
        // client (see the type's doc).
        unsafe { rd::rd_kafka_topic_destroy(self.rkt.as_ptr()) }
    }
}

/// The service's producer topics: each output topic's handle and the changelog's.
pub struct Topics {
    scores: Topic,
    consensus: Topic,
    bias_alerts: Topic,
    leaderboard: Topic,
    dead_letters: Topic,
    /// The state changelog.
    pub state: Topic,
}

impl Topics {
    /// Handles for `engine`'s configured output topics and changelog on `producer`'s client.
    pub fn new<C: ProducerContext>(
        producer: &BaseProducer<C>,
        engine: &Engine,
    ) -> Result<Topics, KafkaError> {
        let output = |t| Topic::new(producer, engine.topic_name(t));
        Ok(Topics {
            scores: output(OutputTopic::Scores)?,
            consensus: output(OutputTopic::Consensus)?,
            bias_alerts: output(OutputTopic::BiasAlerts)?,
            leaderboard: output(OutputTopic::Leaderboard)?,
            dead_letters: output(OutputTopic::DeadLetters)?,
            state: Topic::new(producer, &engine.config().topics.state)?,
        })
    }

    /// The handle of output topic `topic`.
    pub fn output(&self, topic: OutputTopic) -> &Topic {
        match topic {
            OutputTopic::Scores => &self.scores,
            OutputTopic::Consensus => &self.consensus,
            OutputTopic::BiasAlerts => &self.bias_alerts,
            OutputTopic::Leaderboard => &self.leaderboard,
            OutputTopic::DeadLetters => &self.dead_letters,
        }
    }
}
