//! The group's records, consumed in batches from a queue of our own.
//!
//! Why not `BaseConsumer::poll`? It returns one message per call, and every call reads the clock
//! twice, takes the queue's lock, allocates an `Arc` for the message and tells librdkafka that the
//! application polled: a quarter of the polling thread's time with one busy project. librdkafka's
//! batch call, `rd_kafka_consume_batch_queue`, serves up to a whole batch per call. It cannot be
//! pointed at the consumer's own queue: that queue also carries the rebalance events, and the
//! batch call would serve those itself, without the application's rebalance callback, by
//! unassigning the partitions (`rd_kafka_poll_cb` in librdkafka 2.12). So each partition's fetch
//! queue is forwarded to a [`Fetched`] queue before the partition is assigned (from the rebalance
//! callback, see [`Fetched::forward`]), and rebalances, commit results and errors stay on the
//! consumer's queue, which `BaseConsumer::poll` keeps serving between batches.
//!
//! This is the crate's only FFI beside rdkafka. It uses librdkafka's
//! documented queue API: a forwarding set by the application survives later fetch starts
//! (`RD_KAFKA_Q_F_FWD_APP`) but not a fetch stop, so it is set at every assignment, and a batch
//! skips the messages of a partition's previous assignment, as `poll` does.

use std::ffi::{CStr, CString, c_int};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Where a consumer's context keeps the [`Fetched`] queue its rebalance callback forwards newly
/// assigned partitions to; null while there is none.
#[derive(Debug, Default)]
pub struct ForwardTo(AtomicPtr<rd::rd_kafka_queue_t>);

impl ForwardTo {
    /// Forwards the fetch queue of each `(topic, partition)` to the registered queue, so their
    /// records reach [`Fetched::batch`]. Called before the partitions are assigned, so no record
    /// of theirs can reach the consumer's own queue first, and at every assignment: librdkafka
    /// undoes the forwarding when it stops fetching a partition (`rd_kafka_toppar_fetch_stop`),
    /// so a partition revoked and assigned again would otherwise stall (the Kafka test that
    /// hands partitions back fails that way). Returns the partitions it could not forward (none
    /// unless librdkafka could not make the partition's queue).
    pub fn forward<'t, C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: impl IntoIterator<Item = (&'t str, i32)>,
    ) -> Vec<(String, i32)> {
        let to = self.0.load(Ordering::Acquire);
        let mut failed = Vec::new();
        for (topic, partition) in partitions {
            let Ok(name) = CString::new(topic) else {
                failed.push((topic.to_owned(), partition));
                continue;
            };
            if to.is_null() {
                failed.push((topic.to_owned(), partition));
                continue;
            }
            // SAFETY: the client pointer is live for `consumer`'s lifetime, `name` is a C string,
            // and `to` is a live queue: [`Fetched`] unregisters itself before destroying it, and
            // rebalance callbacks run on the thread that polls, which is done with it by then.
            // The partition's queue handle is released once the forwarding holds its own
            // reference.
            unsafe {
                let from = rd::rd_kafka_queue_get_partition(
                    consumer.client().native_ptr(),
                    name.as_ptr(),
                    partition,
                );
                if from.is_null() {
                    failed.push((topic.to_owned(), partition));
                    continue;
                }
                rd::rd_kafka_queue_forward(from, to);
                rd::rd_kafka_queue_destroy(from);
            }
        }
        failed
    }
}

/// The queue every assigned partition's records are forwarded to.
pub struct Fetched<'c> {
    queue: NonNull<rd::rd_kafka_queue_t>,
    registry: &'c ForwardTo,
}

// SAFETY: librdkafka queues are thread-safe; the handle is only used through librdkafka's API.
unsafe impl Send for Fetched<'_> {}
// SAFETY: as above: every operation on a queue takes the queue's own lock.
unsafe impl Sync for Fetched<'_> {}

impl<'c> Fetched<'c> {
    /// A new queue on `consumer`'s client, registered in `registry` (its context's) so that the
    /// rebalance callback forwards partitions to it from now on.
    pub fn new<C: ConsumerContext>(
        consumer: &'c BaseConsumer<C>,
        registry: &'c ForwardTo,
    ) -> Result<Self, KafkaError> {
        // SAFETY: the client pointer is live for `consumer`'s lifetime, which outlives the queue.
        let queue = NonNull::new(unsafe { rd::rd_kafka_queue_new(consumer.client().native_ptr()) })
            .ok_or(KafkaError::ClientCreation(
                "librdkafka could not create a queue".to_owned(),
            ))?;
        registry.0.store(queue.as_ptr(), Ordering::Release);
        Ok(Fetched { queue, registry })
    }

    /// Moves up to `max` records into `out`: waits up to `wait` for the first, then takes what
    /// is already there without waiting (the batch call alone would wait for a full batch).
    pub fn batch<'s>(&'s self, wait: Duration, max: usize, out: &mut Vec<Consumed<'s>>) {
        let mut raw: Vec<*mut rd::rd_kafka_message_t> = vec![ptr::null_mut(); max];
        let wait_ms = c_int::try_from(wait.as_millis()).unwrap_or(c_int::MAX);
        let mut taken = self.consume(wait_ms, &mut raw[..max.min(1)]);
        if taken > 0 {
            taken += self.consume(0, &mut raw[taken..]);
        }
        out.extend(
            raw[..taken]
                .iter()
                .filter_map(|&m| NonNull::new(m))
                .map(|ptr| Consumed {
                    ptr,
                    _queue: PhantomData,
                }),
        );
    }

    /// One batch call: up to `into.len()` messages, waiting up to `timeout_ms` for them all.
    fn consume(&self, timeout_ms: c_int, into: &mut [*mut rd::rd_kafka_message_t]) -> usize {
        if into.is_empty() {
            return 0;
        }
        // SAFETY: `into` has room for `into.len()` pointers, and the queue is live.
        let n = unsafe {
            rd::rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                timeout_ms,
                into.as_mut_ptr(),
                into.len(),
            )
        };
        usize::try_from(n).unwrap_or(0).min(into.len())
    }
}

impl Drop for Fetched<'_> {
    fn drop(&mut self) {
        self.registry.0.store(ptr::null_mut(), Ordering::Release);
        // SAFETY: the queue is live and this is its last use; partitions still forwarded to it
        // hold their own references, and what it still holds is destroyed with it.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}

/// One consumed message (or a fetch error), owned until dropped.
pub struct Consumed<'q> {
    ptr: NonNull<rd::rd_kafka_message_t>,
    _queue: PhantomData<&'q ()>,
}

// SAFETY: a librdkafka message may be read and destroyed on any thread.
unsafe impl Send for Consumed<'_> {}

impl Consumed<'_> {
    fn raw(&self) -> &rd::rd_kafka_message_t {
        // SAFETY: the message is live until `drop`, and librdkafka does not change it meanwhile.
        unsafe { self.ptr.as_ref() }
    }

    /// The message itself, for a prefetch hint.
    pub fn ptr(&self) -> *const rd::rd_kafka_message_t {
        self.ptr.as_ptr()
    }

    /// A fetch error in place of a message, if this is one. Reaching the end of a partition is
    /// not an error (only reported if a user sets `enable.partition.eof` for the consumer).
    pub fn error(&self) -> Option<KafkaError> {
        use rd::rd_kafka_resp_err_t::{
            RD_KAFKA_RESP_ERR__PARTITION_EOF, RD_KAFKA_RESP_ERR_NO_ERROR,
        };
        let err = self.raw().err;
        (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            .then(|| KafkaError::MessageConsumption(RDKafkaErrorCode::from(err)))
    }

    /// The topic's name ("" if librdkafka gave none that is UTF-8, which Kafka's rules exclude).
    pub fn topic(&self) -> &str {
        let rkt = self.raw().rkt;
        if rkt.is_null() {
            return "";
        }
        // SAFETY: the message holds a reference to its topic, whose name is a C string.
        unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(rkt)) }
            .to_str()
            .unwrap_or("")
    }

    pub fn partition(&self) -> i32 {
        self.raw().partition
    }

    pub fn offset(&self) -> i64 {
        self.raw().offset
    }

    pub fn payload(&self) -> Option<&[u8]> {
        bytes(self.raw().payload, self.raw().len)
    }

    pub fn key(&self) -> Option<&[u8]> {
        bytes(self.raw().key, self.raw().key_len)
    }

    /// The value of the record's last header named `name` (a C string), if it has one: how the
    /// repartition topic's records carry the coordinates of the input record they copy.
    pub fn header(&self, name: &CStr) -> Option<&[u8]> {
        let mut headers = ptr::null_mut();
        let mut value = ptr::null();
        let mut size = 0;
        // SAFETY: the message is live and owns its headers (librdkafka parses them into it on
        // the first call); the value found is owned by them, so it lives as long as the
        // message, to which `bytes` ties the slice.
        unsafe {
            if rd::rd_kafka_message_headers(self.ptr.as_ptr(), &mut headers)
                != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                || rd::rd_kafka_header_get_last(headers, name.as_ptr(), &mut value, &mut size)
                    != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                return None;
            }
        }
        // A header without a value reads as an empty one.
        Some(bytes(value.cast_mut(), size).unwrap_or_default())
    }

    /// The record's timestamp in milliseconds, if it has one.
    pub fn timestamp_ms(&self) -> Option<i64> {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is live; librdkafka writes the type through the pointer.
        let ms = unsafe { rd::rd_kafka_message_timestamp(self.ptr.as_ptr(), &mut kind) };
        (kind != rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ms >= 0)
            .then_some(ms)
    }
}

impl Drop for Consumed<'_> {
    fn drop(&mut self) {
        // SAFETY: the message came from `rd_kafka_consume_batch_queue` and is destroyed once.
        unsafe { rd::rd_kafka_message_destroy(self.ptr.as_ptr()) }
    }
}

/// The bytes at `data`, `len` long, borrowed for as long as the message that owns them.
fn bytes<'m>(data: *mut std::ffi::c_void, len: usize) -> Option<&'m [u8]> {
    // SAFETY: librdkafka's message owns `len` bytes at `data` (or `data` is null) until it is
    // destroyed, and the caller ties the slice to the message's borrow.
    (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}
