//! Service load benchmark: in one run, against one broker, for 1, 10,000 and 100,000 projects:
//! (a) a raw rdkafka consume loop that only counts messages, (b) jurystream end to end (consume,
//! parse, apply, produce outputs and changelog, commit), and (c) raw consume and produce loops on
//! two threads that write as many records per event as jurystream did, each over the same
//! preloaded ~200-byte events; then event-to-publish latency at a fixed offered rate of 10,000
//! events/s.
//!
//! Run: `cargo bench --bench load` (uses `KAFKA_BOOTSTRAP_SERVERS`, else starts tansu). Set
//! `LOAD_EVENTS` to change the number of preloaded events per scenario (default 1000000),
//! `LOAD_ROUNDS` for the rounds of (a), (b), (c) per scenario (default 3; the table gives each
//! round and the medians), `LOAD_PROJECTS` to run only some scenarios (comma-separated project
//! counts, default `1,10000,100000`; empty for none), `LOAD_LATENCY=0` to skip the latency runs,
//! `LOAD_FETCH_WAIT_MS` for every consumer's `fetch.wait.max.ms` (default 10),
//! `LOAD_SERVICE_CONFIG` for TOML appended to the service's configuration (e.g.
//! `[kafka.producer]` settings to try), `LOAD_PARTITIONING` for the `input.partitioning` modes
//! (b) and (c) run in, each in every round (comma-separated, default `by_key,repartition`; the
//! latency runs use the first), `LOAD_IO_RECORDS` for the records per event (c) writes
//! instead of jurystream's, `LOAD_IO_VALIDATE=1` for a (c) whose polling thread also reads and
//! validates every event as the service's does (the least work any correct service does),
//! `LOAD_QUERIES=1` for a run of interactive queries while the service ingests 10,000 events/s.

#[allow(
    dead_code,
    reason = "the load benchmark times each event as it sends it (`event_at`)"
)]
#[path = "peers/event.rs"]
mod peers;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jurystream::engine::{InputTopic, PreparedVotes};
use jurystream::kafka::{self, clients};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use support::{Broker, Service, create_topics, free_port, write_config};

const PARTITIONS: i32 = 3;

/// Vote event `i` of the peers corpus over `projects` projects at `at_ms`, with its key.
fn event(i: usize, projects: usize, at_ms: i64) -> (String, String) {
    (
        peers::project(i, projects),
        peers::event_at(i, projects, at_ms),
    )
}

/// How long the broker may hold a fetch, for every consumer in the run (the raw loops, the
/// service, the score reader): `LOAD_FETCH_WAIT_MS`, default 10. tansu holds every fetch this
/// long and answers with what it had when the fetch arrived, so a record waits between one and
/// two of these before a consumer sees it: the floor of both latency paths.
fn fetch_wait_ms() -> String {
    std::env::var("LOAD_FETCH_WAIT_MS").unwrap_or_else(|_| "10".into())
}

/// A producer that batches for up to 5 ms: with 1 ms, tansu's per-request cost made the offered
/// load queue up in the producer (p99 of seconds, raw loop included).
fn producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer")
}

fn send(p: &BaseProducer, topic: &str, key: &str, payload: &str) {
    let partition = (xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % PARTITIONS as u64) as i32;
    let rec = BaseRecord::<str, str>::to(topic)
        .key(key)
        .payload(payload)
        .partition(partition);
    support::send_waiting(p, rec, Duration::from_millis(5));
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The settings of every consumer in the run (the raw loops, the score reader): the fetch wait
/// and the fetch-queue backoff the service uses. librdkafka's default backoff (1000 ms) stops
/// fetching a partition for a second once its local queue is full, so a loop slower than the
/// fetcher, like (c), sat idle for most of each second and measured the pause, not its I/O
/// (0.19-0.21 M events/s at 100,000 projects with it, 0.47 M without).
fn consumer_config(bootstrap: &str, group: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{group}-{}", free_port()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", fetch_wait_ms())
        .set("fetch.queue.backoff.ms", fetch_wait_ms());
    c
}

/// A plain consumer of every partition of `topic`, from the beginning.
fn raw_consumer(bootstrap: &str, topic: &str) -> BaseConsumer {
    let c: BaseConsumer = consumer_config(bootstrap, "raw")
        .create()
        .expect("consumer");
    clients::assign_from_beginning(
        &c,
        (
            topic,
            clients::partition_count(&c, topic).expect("metadata"),
        ),
    )
    .expect("assign");
    c
}

/// (a): assign every partition from the beginning and count messages until `n` arrived.
fn raw_consume(bootstrap: &str, topic: &str, n: usize) -> f64 {
    let c = raw_consumer(bootstrap, topic);
    let mut count = 0;
    let mut started = None;
    while count < n {
        if let Some(Ok(_)) = c.poll(Duration::from_millis(100)) {
            started.get_or_insert_with(Instant::now);
            count += 1;
        }
    }
    count as f64 / started.map_or(1.0, |s| s.elapsed().as_secs_f64())
}

/// (c): the same I/O without jurystream, on jurystream's two threads: a polling thread consumes
/// like (a) and hands the messages over in batches of 512 (through a queue of 64, as the
/// service), and a producing thread writes `per_event` records per message (jurystream's
/// measured outputs and changelog records per event, the fraction carried over, or
/// `LOAD_IO_RECORDS`) through an idempotent producer set up like the service's (2 ms linger),
/// serving delivery reports after each batch, until every one is acknowledged. The records are
/// copies of the consumed message (jurystream's changelog records are larger), so this is a
/// lower bound on what writing jurystream's records costs on the same broker. Until the eighth
/// stop of 2026-11-22 one thread did both, and with 100,000 projects that thread, not the
/// machine, was the limit (557-594k events/s against 612-789k on two threads at 1.7 records
/// per event).
///
/// With `validate` the polling thread also reads and validates each event as the service's
/// polling thread does ([`jurystream::engine::Engine::prepare_votes`]) and hands the prepared
/// votes over with the message: the I/O plus the least a service that rejects bad input must
/// do per event, so a bound on any such service at this output volume, not only on jurystream.
fn raw_consume_produce(
    bootstrap: &str,
    topic: &str,
    out: &str,
    n: usize,
    per_event: f64,
    validate: bool,
) -> f64 {
    let config = jurystream::config::Config::default();
    let engine = jurystream::engine::Engine::new(config.engine_settings());
    let votes_topic = config.topics.votes.clone();
    let c = raw_consumer(bootstrap, topic);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .create()
        .expect("producer");
    // Connected and holding its producer id before the clock starts, as jurystream's producer
    // is by the time it handles its first record (otherwise a short run measures start-up).
    let warm = BaseRecord::<[u8], [u8]>::to(out).payload(b"warm-up".as_slice());
    support::send_waiting(&p, warm, Duration::from_millis(1));
    p.flush(Duration::from_secs(30)).expect("flush");
    type Batch<'a> = Vec<(BorrowedMessage<'a>, Option<PreparedVotes>)>;
    let (batches, received) = std::sync::mpsc::sync_channel::<Batch<'_>>(64);
    let started = std::thread::scope(|s| {
        let c = &c;
        let (engine, votes_topic) = (&engine, votes_topic.as_str());
        // The clock starts at the first message polled, as in (a).
        let polling = s.spawn(move || {
            let (mut count, mut started) = (0, None);
            while count < n {
                let mut batch = Vec::with_capacity(512);
                let mut next = c.poll(Duration::from_millis(100));
                while let Some(Ok(m)) = next {
                    started.get_or_insert_with(Instant::now);
                    let prepared = validate.then(|| {
                        engine.prepare_votes(&kafka::message_record(
                            &m,
                            InputTopic::Votes,
                            votes_topic,
                        ))
                    });
                    // Every preloaded event is valid: one that is not would make this loop
                    // skip work the service does.
                    assert!(
                        prepared.as_ref().is_none_or(Option::is_some),
                        "a preloaded event failed validation"
                    );
                    batch.push((m, prepared.flatten()));
                    count += 1;
                    if batch.len() == 512 || count == n {
                        break;
                    }
                    next = c.poll(Duration::ZERO);
                }
                if !batch.is_empty() && batches.send(batch).is_err() {
                    break;
                }
            }
            started
        });
        let mut owed = 0.0;
        for batch in received {
            for (m, _) in &batch {
                owed += per_event;
                while owed >= 1.0 {
                    owed -= 1.0;
                    let rec = BaseRecord::<[u8], [u8]>::to(out)
                        .partition(m.partition())
                        .key(m.key().unwrap_or_default())
                        .payload(m.payload().unwrap_or_default());
                    support::send_waiting(&p, rec, Duration::from_millis(1));
                }
            }
            p.poll(Duration::ZERO);
        }
        polling.join().ok().flatten()
    });
    p.flush(Duration::from_secs(120)).expect("flush");
    n as f64 / started.map_or(1.0, |s| s.elapsed().as_secs_f64())
}

/// A release-built service on `prefix`'s topics and group, reading its votes from `votes`,
/// logging warnings only, once it is ready. It runs the shipped cycle length (the default
/// `kafka.commit_interval_ms`, overridable through the usual `JURYSTREAM_KAFKA__COMMIT_INTERVAL_MS`),
/// not the tests' shorter one, and the same fetch wait as the raw loop ([`fetch_wait_ms`]).
fn start_service(
    bootstrap: &str,
    dir: &std::path::Path,
    (prefix, partitioning): (&str, &str),
    votes: &str,
) -> Service {
    let config = write_config(
        dir,
        prefix,
        bootstrap,
        free_port(),
        &format!(
            "[input]\npartitioning = \"{partitioning}\"\n\n[log]\nlevel = \"warn\"\n{}",
            std::env::var("LOAD_SERVICE_CONFIG").unwrap_or_default()
        ),
    );
    let cycle = std::env::var("JURYSTREAM_KAFKA__COMMIT_INTERVAL_MS").unwrap_or_else(|_| {
        jurystream::config::Config::default()
            .kafka
            .commit_interval_ms
            .to_string()
    });
    let service = Service::start_with(
        &config,
        dir.join(format!("{prefix}.log")),
        &[
            ("JURYSTREAM_KAFKA__COMMIT_INTERVAL_MS", &cycle),
            ("JURYSTREAM_KAFKA__FETCH_WAIT_MAX_MS", &fetch_wait_ms()),
            ("JURYSTREAM_TOPICS__VOTES", votes),
            // The allocator settings the deploy files give the service (docs/architecture.md).
            ("MIMALLOC_ALLOW_THP", "0"),
            (
                "GLIBC_TUNABLES",
                "glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=131072",
            ),
        ],
    );
    assert!(
        service.wait_ready(Duration::from_secs(120)),
        "{}",
        service.log_text()
    );
    service
}

/// (b): jurystream, on `prefix`'s topics and group but reading `votes`, from its first handled
/// record until all `n` are handled and committed; returns events/s and the records it produced
/// per event (outputs, changelog).
fn service_throughput(
    bootstrap: &str,
    dir: &std::path::Path,
    (prefix, partitioning): (&str, &str),
    votes: &str,
    n: usize,
) -> (f64, f64, f64) {
    create_topics(bootstrap, prefix, PARTITIONS);
    let service = start_service(bootstrap, dir, (prefix, partitioning), votes);
    let mut first = None;
    loop {
        let m = service.metrics();
        let handled = support::metric_sum(&m, "jurystream_records_total");
        if handled > 0 {
            first.get_or_insert_with(Instant::now);
        }
        if handled >= n as u64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // ... and committed: the group's committed offsets, read from the broker, cover all `n`.
    let group = support::GroupOffsets::new(bootstrap, &format!("{prefix}-group"));
    let partitions: Vec<(&str, i32)> = (0..PARTITIONS).map(|p| (votes, p)).collect();
    while group.committed(&partitions).iter().flatten().sum::<i64>() < n as i64 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let secs = first.map_or(1.0, |f| f.elapsed().as_secs_f64());
    let m = service.metrics();
    let changelog = support::metric_sum(&m, "jurystream_changelog_records_total") as f64;
    // Changelog records are counted among the acknowledged outputs too (destination "state").
    let outputs = support::metric_sum(&m, "jurystream_output_records_total") as f64 - changelog;
    let _ = service.terminate();
    (n as f64 / secs, outputs / n as f64, changelog / n as f64)
}

/// Seconds of offered load before latency samples count: connections, metadata, group joins and
/// first fetches belong to start-up, not to the steady state being measured.
const WARMUP_SECS: usize = 2;

/// Offers `rate` records/s to `topic` for `WARMUP_SECS + secs` seconds, each made by `make(i,
/// now_ms)`; returns the wall-clock ms from which samples count.
fn offer(
    bootstrap: &str,
    topic: &str,
    rate: usize,
    secs: usize,
    make: impl Fn(usize, i64) -> (String, String),
) -> i64 {
    let p = producer(bootstrap);
    let total = rate * (WARMUP_SECS + secs);
    let started = Instant::now();
    let measured_from = now_ms() + 1000 * WARMUP_SECS as i64;
    for i in 0..total {
        let due = Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        let (key, payload) = make(i, now_ms());
        send(&p, topic, &key, &payload);
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(30)).expect("flush");
    measured_from
}

/// p50, p99 and max of the samples taken at or after `from` (pairs of (event ms, latency ms)).
fn summary(samples: &[(i64, i64)], from: i64) -> (i64, i64, i64, usize) {
    let mut lat: Vec<i64> = samples
        .iter()
        .filter(|(at, _)| *at >= from)
        .map(|(_, l)| *l)
        .collect();
    lat.sort_unstable();
    (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0),
        lat.len(),
    )
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Offered rate: `rate` events/s for `secs` seconds over `projects` projects while the service
/// runs; latency = the output record's publish timestamp minus the event's occurred_at.
fn latency(
    bootstrap: &str,
    dir: &std::path::Path,
    (prefix, partitioning): (&str, &str),
    rate: usize,
    secs: usize,
    projects: usize,
) -> (i64, i64, i64, usize) {
    create_topics(bootstrap, prefix, PARTITIONS);
    let topic = format!("{prefix}.votes");
    let service = start_service(bootstrap, dir, (prefix, partitioning), &topic);
    let measured_from = offer(bootstrap, &topic, rate, secs, |i, now| {
        event(i, projects, now)
    });
    let total = rate * (WARMUP_SECS + secs);
    let _ = service.wait_handled(total as u64, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(500));
    let _ = service.terminate();
    // Read the published scores with their timestamps.
    let c: BaseConsumer = consumer_config(bootstrap, "lat")
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let out_topic = format!("{prefix}.scores");
    let parts = clients::partition_count(&c, &out_topic).expect("metadata");
    clients::assign_from_beginning(&c, (&out_topic, parts)).expect("assign");
    let mut lat = Vec::new();
    let mut eof = 0;
    while eof < parts {
        match c.poll(Duration::from_secs(2)) {
            Some(Ok(m)) => {
                let published = match m.timestamp() {
                    Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) => t,
                    Timestamp::NotAvailable => continue,
                };
                let v: serde_json::Value =
                    serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or_default();
                let at = v["last_event_at"].as_str().and_then(chrono_ms);
                if let Some(at) = at {
                    lat.push((at, published - at));
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => eof += 1,
            Some(Err(_)) => {}
            None => break,
        }
    }
    summary(&lat, measured_from)
}

/// Interactive queries while the service ingests `rate` events/s over `projects` projects for
/// `secs` seconds: `clients` threads ask `GET /v1/projects/{id}` of random projects in a closed
/// loop, a new connection per request (HTTP/1.0, as the simplest client does). Returns
/// requests/s and the p50, p99 and max answer time (µs) from the end of warm-up, the answers
/// other than 200, and how many of the offered events the service had handled 2 s after the
/// last was offered (it keeps up if all).
fn queries_under_load(
    bootstrap: &str,
    dir: &std::path::Path,
    prefix: &str,
    (rate, secs, projects, clients): (usize, usize, usize, usize),
) -> (f64, [i64; 3], usize, (u64, usize)) {
    create_topics(bootstrap, prefix, PARTITIONS);
    let topic = format!("{prefix}.votes");
    let service = start_service(bootstrap, dir, (prefix, "repartition"), &topic);
    let port = service.http_port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let askers: Vec<_> = (0..clients)
        .map(|c| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ c as u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let path = format!("/v1/projects/proj-{:06}", x as usize % projects);
                    let asked = Instant::now();
                    let status = support::http_answer(port, &path).map_or(0, |a| a.status);
                    samples.push((now_ms(), asked.elapsed().as_micros() as i64, status));
                }
                samples
            })
        })
        .collect();
    let measured_from = offer(bootstrap, &topic, rate, secs, |i, now| {
        event(i, projects, now)
    });
    let measured_to = now_ms();
    let offered = rate * (WARMUP_SECS + secs);
    let handled = service.wait_handled(offered as u64, Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples: Vec<(i64, i64, u16)> = askers
        .into_iter()
        .flat_map(|t| t.join().expect("asker"))
        .filter(|(at, _, _)| (measured_from..=measured_to).contains(at))
        .collect();
    let _ = service.terminate();
    let not_ok = samples.iter().filter(|(_, _, s)| *s != 200).count();
    let timed: Vec<(i64, i64)> = samples.iter().map(|(at, us, _)| (*at, *us)).collect();
    let (p50, p99, max, n) = summary(&timed, measured_from);
    let span = (measured_to - measured_from).max(1) as f64 / 1000.0;
    (n as f64 / span, [p50, p99, max], not_ok, (handled, offered))
}

/// The broker's own latency for comparison: the same offered rate, consumed by a raw loop;
/// latency = receive time minus the time the event was produced.
fn raw_latency(bootstrap: &str, prefix: &str, rate: usize, secs: usize) -> (i64, i64, i64, usize) {
    create_topics(bootstrap, prefix, PARTITIONS);
    let topic = format!("{prefix}.votes");
    let c: BaseConsumer = consumer_config(bootstrap, "rawlat")
        .create()
        .expect("consumer");
    clients::assign_from_beginning(
        &c,
        (
            &topic,
            clients::partition_count(&c, &topic).expect("metadata"),
        ),
    )
    .expect("assign");
    let total = rate * (WARMUP_SECS + secs);
    let reader = std::thread::spawn(move || {
        let mut lat = Vec::with_capacity(total);
        let deadline = Instant::now() + Duration::from_secs((WARMUP_SECS + secs) as u64 + 30);
        while lat.len() < total && Instant::now() < deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                let sent: i64 = std::str::from_utf8(m.payload().unwrap_or_default())
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                lat.push((sent, now_ms() - sent));
            }
        }
        lat
    });
    let measured_from = offer(bootstrap, &topic, rate, secs, |i, now| {
        (format!("k{}", i % 10_000), now.to_string())
    });
    summary(&reader.join().unwrap_or_default(), measured_from)
}

/// Records per event for (c) instead of jurystream's measured ones: `LOAD_IO_RECORDS`, to
/// measure what the I/O alone reaches at a given output volume (e.g. the least the contract
/// allows).
fn io_records() -> Option<f64> {
    std::env::var("LOAD_IO_RECORDS").ok()?.parse().ok()
}

/// Whether (c) also validates every event (`LOAD_IO_VALIDATE=1`; see [`raw_consume_produce`]).
fn io_validate() -> bool {
    std::env::var("LOAD_IO_VALIDATE").is_ok_and(|v| v == "1")
}

/// Rounds per scenario: `LOAD_ROUNDS`, default 3. This shared machine's speed drifts by ±20%
/// within minutes, so one (a) and one (b) measure the drift as much as jurystream; a round runs
/// (a), (b) and (c) back to back, and the ratios are taken within a round, then their median.
fn rounds() -> usize {
    std::env::var("LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// The `input.partitioning` modes the service runs in (`LOAD_PARTITIONING`).
fn partitionings() -> Vec<String> {
    std::env::var("LOAD_PARTITIONING")
        .unwrap_or_else(|_| "by_key,repartition".into())
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// One round's measurements (or their medians).
struct Row {
    /// (a) msg/s.
    raw: f64,
    /// (b) events/s.
    svc: f64,
    /// Output and changelog records per event, as (b) produced them.
    outputs: f64,
    changelog: f64,
    /// (c) events/s.
    io: f64,
}

impl Row {
    /// The table cells after the round column, with the two ratios given (a round's own, or the
    /// median of the rounds' ratios, which is not the ratio of the medians).
    fn cells(&self, to_raw: f64, to_io: f64) -> String {
        format!(
            "{:.0} | {:.0} | {:.0}% | {:.2} | {:.2} | {:.0} | {:.0}%",
            self.raw,
            self.svc,
            100.0 * to_raw,
            self.outputs,
            self.changelog,
            self.io,
            100.0 * to_io
        )
    }
}

/// The median (the mean of the middle two for an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn chrono_ms(s: &str) -> Option<i64> {
    jurystream::engine::contract::time::EventTime::parse_rfc3339(s)
        .ok()
        .map(|t| t.epoch_millis())
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this binary without it, and
    // a minutes-long load run does not belong in the test suite.
    if !std::env::args().any(|a| a == "--bench") {
        println!("load benchmark: run with `cargo bench --bench load`");
        return;
    }
    let n: usize = std::env::var("LOAD_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        // A million: at 600,000 events/s a run of 200,000 lasted a third of a second, and the
        // commit at its end and the 20 ms metric polling were a visible part of it.
        .unwrap_or(1_000_000);
    let broker = Broker::shared();
    let run = std::process::id();
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "load: {n} events of ~200 bytes per scenario, {PARTITIONS} partitions, broker {}",
        broker.bootstrap
    );
    // What the last two columns measure, when a knob changed it.
    if let Some(r) = io_records() {
        println!("(c) writes {r} records per event (LOAD_IO_RECORDS)");
    }
    if io_validate() {
        println!("(c) also reads and validates every event (LOAD_IO_VALIDATE=1)");
    }
    let rounds = rounds();
    println!(
        "| projects | partitioning | round | raw consume (msg/s) | jurystream end to end (events/s) | ratio | outputs per event | changelog records per event | raw consume + produce as many records (events/s) | jurystream / that |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let modes = partitionings();
    let scenarios: Vec<usize> = std::env::var("LOAD_PROJECTS")
        .unwrap_or_else(|_| "1,10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    for projects in scenarios {
        // Topic names unique to this run: a broker reused through KAFKA_BOOTSTRAP_SERVERS may
        // still hold an earlier run's topics.
        let prefix = format!("load{projects}-{run}");
        create_topics(&broker.bootstrap, &prefix, PARTITIONS);
        let p = producer(&broker.bootstrap);
        let topic = format!("{prefix}.votes");
        let base = 1_795_168_800_000;
        for i in 0..n {
            let (key, payload) = event(i, projects, base + i as i64);
            send(&p, &topic, &key, &payload);
        }
        p.flush(Duration::from_secs(120)).expect("flush");
        let mut rows: Vec<Vec<Row>> = modes.iter().map(|_| Vec::new()).collect();
        for round in 1..=rounds {
            let raw = raw_consume(&broker.bootstrap, &topic, n);
            for (mode, partitioning) in modes.iter().enumerate() {
                // A fresh service per round and mode: its own group, outputs and changelog,
                // the same input.
                let own = format!("{prefix}-{partitioning}-r{round}");
                let (svc, outputs, changelog) = service_throughput(
                    &broker.bootstrap,
                    dir.path(),
                    (&own, partitioning),
                    &topic,
                    n,
                );
                // A topic this vote-only load leaves empty.
                let out = format!("{own}.consensus");
                let per_event = io_records().unwrap_or(outputs + changelog);
                let io = raw_consume_produce(
                    &broker.bootstrap,
                    &topic,
                    &out,
                    n,
                    per_event,
                    io_validate(),
                );
                let row = Row {
                    raw,
                    svc,
                    outputs,
                    changelog,
                    io,
                };
                println!(
                    "| {projects} | {partitioning} | {round} | {} |",
                    row.cells(svc / raw, svc / io)
                );
                rows[mode].push(row);
                // The broker keeps every record in memory, and with 100,000 projects a round
                // writes over a million: later rounds ran slower on the leftovers (26%, 23%,
                // 17% of (a)).
                support::delete_topics(&broker.bootstrap, &own);
                support::delete_topic(&broker.bootstrap, &format!("{own}-group-repartition"));
            }
        }
        for (rows, partitioning) in rows.iter().zip(&modes) {
            if rounds > 1 {
                let m = |f: fn(&Row) -> f64| median(rows.iter().map(f));
                let row = Row {
                    raw: m(|r| r.raw),
                    svc: m(|r| r.svc),
                    outputs: m(|r| r.outputs),
                    changelog: m(|r| r.changelog),
                    io: m(|r| r.io),
                };
                println!(
                    "| {projects} | {partitioning} | **median** | {} |",
                    row.cells(m(|r| r.svc / r.raw), m(|r| r.svc / r.io))
                );
            }
        }
    }
    if std::env::var("LOAD_QUERIES").is_ok_and(|v| v == "1") {
        println!(
            "\ninteractive queries while ingesting 10,000 events/s (10,000 projects, repartition, 10 s after {WARMUP_SECS} s warm-up):"
        );
        println!(
            "| clients | requests/s | p50 (µs) | p99 (µs) | max (µs) | answers other than 200 | events handled 2 s after the last offered |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for clients in [1, 4] {
            let (rps, [p50, p99, max], not_ok, (handled, offered)) = queries_under_load(
                &broker.bootstrap,
                dir.path(),
                &format!("queries{clients}-{run}"),
                (10_000, 10, 10_000, clients),
            );
            println!(
                "| {clients} | {rps:.0} | {p50} | {p99} | {max} | {not_ok} | {handled} of {offered} |"
            );
        }
    }
    if std::env::var("LOAD_LATENCY").is_ok_and(|v| v == "0") {
        return;
    }
    let (r50, r99, rmax, raw_samples) =
        raw_latency(&broker.bootstrap, &format!("rawlatency-{run}"), 10_000, 10);
    let measured: Vec<(String, (i64, i64, i64, usize))> = modes
        .iter()
        .map(|partitioning| {
            let l = latency(
                &broker.bootstrap,
                dir.path(),
                (&format!("latency-{partitioning}-{run}"), partitioning),
                10_000,
                10,
                10_000,
            );
            (partitioning.clone(), l)
        })
        .collect();
    println!(
        "\nlatency at 10,000 events/s offered for {WARMUP_SECS} s warm-up + 10 s measured (10,000 projects, fetch.wait.max.ms = {}):",
        fetch_wait_ms()
    );
    println!("| path | samples | p50 (ms) | p99 (ms) | max (ms) |");
    println!("|---|---:|---:|---:|---:|");
    println!("| raw: produce -> consume loop | {raw_samples} | {r50} | {r99} | {rmax} |");
    for (partitioning, (p50, p99, max, samples)) in measured {
        println!(
            "| jurystream ({partitioning}): event time -> score published | {samples} | {p50} | {p99} | {max} |"
        );
    }
}
