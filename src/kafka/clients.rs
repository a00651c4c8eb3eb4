//! librdkafka client configuration and topic management.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::ServiceError;
use super::stage::Stage;
use crate::config::{Config, ConfigError, Partitioning};
use crate::telemetry::events;
use crate::topics::TopicTable;

/// Readers poll to the end of partitions, so end-of-partition is expected, not an error.
pub struct QuietReader;

impl ClientContext for QuietReader {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        events::librdkafka_line(level, facility, message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || matches!(error, KafkaError::Global(RDKafkaErrorCode::PartitionEOF));
        if !eof {
            events::client_error("reader", &error, reason);
        }
    }
}

impl ConsumerContext for QuietReader {}

/// Settings every client shares: brokers, identity and security (the password is read from its
/// environment variable or file here and never logged).
pub fn base_config(cfg: &Config) -> Result<ClientConfig, ServiceError> {
    let k = &cfg.kafka;
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.bootstrap_servers)
        .set("client.id", &k.client_id)
        .set("security.protocol", &k.security_protocol);
    if !k.sasl_mechanism.is_empty() {
        c.set("sasl.mechanism", &k.sasl_mechanism)
            .set("sasl.username", &k.sasl_username);
        let password = if !k.sasl_password_env.is_empty() {
            std::env::var(&k.sasl_password_env).map_err(|_| {
                ServiceError::Config(format!(
                    "kafka.sasl_password_env: variable {} is not set",
                    k.sasl_password_env
                ))
            })?
        } else if !k.sasl_password_file.is_empty() {
            std::fs::read_to_string(&k.sasl_password_file)
                .map_err(|e| ServiceError::Config(format!("kafka.sasl_password_file: {e}")))?
                .trim_end()
                .to_owned()
        } else {
            String::new()
        };
        c.set("sasl.password", password);
    }
    for (key, value) in [
        ("ssl.ca.location", &k.ssl_ca_location),
        ("ssl.certificate.location", &k.ssl_certificate_location),
        ("ssl.key.location", &k.ssl_key_location),
    ] {
        if !value.is_empty() {
            c.set(key, value);
        }
    }
    Ok(c)
}

/// Checks that librdkafka takes every property the service's clients are given (each stage's
/// consumer and producer and the readers', with `kafka.consumer` and `kafka.producer`), one
/// property at a time and without creating a client, so without a broker: a name librdkafka
/// does not know or a value outside its range fails `check-config` and the start before
/// anything runs, naming the key of the configuration that set it, every such key at once.
/// (Properties that only conflict with each other are left to the client's creation.)
pub fn check_properties(cfg: &Config) -> Result<(), ServiceError> {
    let clients = [
        (
            "kafka.consumer",
            consumer_config(cfg, "check", Stage::Forward)?,
        ),
        (
            "kafka.consumer",
            consumer_config(cfg, "check", Stage::Apply)?,
        ),
        ("kafka.consumer", reader_config(cfg, "check")?),
        ("kafka.producer", producer_config(cfg, Stage::Forward)?),
        ("kafka.producer", producer_config(cfg, Stage::Apply)?),
    ];
    let mut refused: Vec<ConfigError> = Vec::new();
    for (overrides, client) in &clients {
        for (property, value) in client.config_map() {
            let mut alone = ClientConfig::new();
            alone.set(property, value);
            let Err(KafkaError::ClientConfig(_, why, ..)) = alone.create_native_config() else {
                continue;
            };
            let own = if *overrides == "kafka.consumer" {
                &cfg.kafka.consumer
            } else {
                &cfg.kafka.producer
            };
            let key = if own.contains_key(property) {
                format!("{overrides}.{property}")
            } else {
                setting_of(property)
            };
            let said =
                |p: &ConfigError| matches!(p, ConfigError::Invalid { key: k, .. } if *k == key);
            if !refused.iter().any(said) {
                let message = format!("librdkafka refuses it: {}", why.trim());
                refused.push(ConfigError::Invalid { key, message });
            }
        }
    }
    match refused.len() {
        0 => Ok(()),
        1 => Err(refused.remove(0).into()),
        _ => Err(ConfigError::Several(refused).into()),
    }
}

/// The setting a librdkafka property that jurystream sets comes from.
fn setting_of(property: &str) -> String {
    let setting = match property {
        "bootstrap.servers" => "kafka.bootstrap_servers",
        "client.id" => "kafka.client_id",
        "group.id" => "kafka.group_id",
        "group.instance.id" => "kafka.instance_id",
        "session.timeout.ms" => "kafka.session_timeout_ms",
        "fetch.wait.max.ms" | "fetch.queue.backoff.ms" => "kafka.fetch_wait_max_ms",
        "message.max.bytes" | "fetch.message.max.bytes" | "fetch.max.bytes" => {
            "limits.max_message_bytes"
        }
        "security.protocol" => "kafka.security_protocol",
        "sasl.mechanism" => "kafka.sasl_mechanism",
        "sasl.username" => "kafka.sasl_username",
        "ssl.ca.location" => "kafka.ssl_ca_location",
        "ssl.certificate.location" => "kafka.ssl_certificate_location",
        "ssl.key.location" => "kafka.ssl_key_location",
        other => return format!("librdkafka's {other}"),
    };
    setting.to_owned()
}

/// Assigns `consumer` every partition of `topic` (`partitions` of them), from the beginning.
pub fn assign_from_beginning<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    (topic, partitions): (&str, usize),
) -> Result<(), KafkaError> {
    consumer.assign(&from_beginning(topic, partitions)?)
}

/// Adds every partition of `topic` (`partitions` of them) to what `consumer` reads, from the
/// beginning.
pub fn add_from_beginning<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    (topic, partitions): (&str, usize),
) -> Result<(), KafkaError> {
    consumer.incremental_assign(&from_beginning(topic, partitions)?)
}

/// How many partitions `topic` has, from one metadata request (0 if it does not exist): for
/// clients that do not know it from the service's start.
pub fn partition_count<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
) -> Result<usize, KafkaError> {
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    Ok(md
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map_or(0, |t| t.partitions().len()))
}

/// Partitions `0..partitions` of `topic`, at their beginning.
fn from_beginning(topic: &str, partitions: usize) -> Result<TopicPartitionList, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for p in 0..i32::try_from(partitions).unwrap_or(i32::MAX) {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    Ok(tpl)
}

/// librdkafka's limit for a message must cover the largest accepted payload plus its envelope.
fn message_max(cfg: &Config) -> String {
    cfg.limits.max_record_bytes().to_string()
}

/// What every consumer of the service shares: no auto-commit, start at the earliest record, and
/// the fetch settings.
fn fetching_config(cfg: &Config) -> Result<ClientConfig, ServiceError> {
    let mut c = base_config(cfg)?;
    c.set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", cfg.kafka.fetch_wait_max_ms.to_string())
        // librdkafka pauses a partition's fetching for this long once its local queue is full
        // (default 1000 ms): the queue then runs dry long before the pause ends, and throughput
        // halves. A pause as short as a fetch keeps the queue fed.
        .set(
            "fetch.queue.backoff.ms",
            cfg.kafka.fetch_wait_max_ms.to_string(),
        )
        .set("message.max.bytes", message_max(cfg))
        .set("fetch.message.max.bytes", message_max(cfg));
    Ok(c)
}

/// Messages a stage's consumer prefetches per partition (see [`consumer_config`]); the
/// configuration's `kafka.consumer` can set another.
const QUEUED_MIN_MESSAGES: &str = "10000";

/// The consumer of `stage`, in the service's consumer group `group` (one per stage, see
/// `super::stage`), with this instance's static identity in it if it has one
/// (`kafka.instance_id`).
pub(super) fn consumer_config(
    cfg: &Config,
    group: &str,
    stage: Stage,
) -> Result<ClientConfig, ServiceError> {
    let mut c = fetching_config(cfg)?;
    c.set("group.id", group)
        .set(
            "session.timeout.ms",
            cfg.kafka.session_timeout_ms.to_string(),
        )
        .set("enable.auto.offset.store", "false")
        // With `range`, tansu never hands a killed member's partitions to the survivors.
        .set("partition.assignment.strategy", "cooperative-sticky")
        // librdkafka prefetches until each partition's local queue holds this many messages
        // (default 100,000): over every partition of both stages, more memory than the state.
        // 10,000 per partition is still far more than a cycle takes from one.
        .set("queued.min.messages", QUEUED_MIN_MESSAGES)
        .set("statistics.interval.ms", "5000");
    if stage == Stage::Apply && cfg.input.repartitions() {
        // The repartition topic is compressed (see [`producer_config`]), and librdkafka
        // checks the bound above only before it fetches: whatever a fetch brings joins the
        // queue, and compressed batches decompress to several times the fetch's bytes. So the
        // fetch's size sets how far past the bound the queue goes. The smallest librdkafka
        // allows, the largest record, still brings thousands of records a fetch.
        c.set("fetch.max.bytes", message_max(cfg));
    }
    if !cfg.kafka.instance_id.is_empty() {
        c.set("group.instance.id", &cfg.kafka.instance_id);
    }
    for (k, v) in &cfg.kafka.consumer {
        c.set(k, v);
    }
    Ok(c)
}

/// A consumer that reads assigned partitions to their end (state restore, the reputation table).
pub fn reader_config(cfg: &Config, purpose: &str) -> Result<ClientConfig, ServiceError> {
    let mut c = fetching_config(cfg)?;
    c.set("group.id", format!("{}-{purpose}", cfg.kafka.group_id))
        .set("enable.partition.eof", "true");
    for (k, v) in &cfg.kafka.consumer {
        if k != "group.id" && k != "partition.assignment.strategy" {
            c.set(k, v);
        }
    }
    Ok(c)
}

/// Records the producer queues before a send waits for the broker's acknowledgements (see
/// [`producer_config`]); the configuration's `kafka.producer` can set another.
const QUEUE_BUFFERING_MAX_MESSAGES: &str = "20000";

/// How the forwarding stage compresses the repartition topic (see [`producer_config`]).
const FORWARD_COMPRESSION: &str = "lz4";

/// The idempotent producer of `stage`: forwards, or outputs and changelog. Delivery never times
/// out: during a broker outage librdkafka keeps retrying, and the cycle that waits for it does
/// not commit.
///
/// The forwarding stage compresses what it writes: every input record crosses the broker a
/// second time through the repartition topic, and batches of JSON records compress well, so
/// the broker stores and serves a fraction of the bytes. (The tasks' outputs and changelog
/// gained nothing measurable from it: docs/performance.md.)
pub(super) fn producer_config(cfg: &Config, stage: Stage) -> Result<ClientConfig, ServiceError> {
    let mut c = base_config(cfg)?;
    if stage == Stage::Forward {
        c.set("compression.type", FORWARD_COMPRESSION);
    }
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "0")
        .set("message.max.bytes", message_max(cfg))
        // librdkafka queues up to 100,000 records by default (its byte bound, 1 GB, does not
        // count a record's own bookkeeping). The forwarding stage has nothing else to do, so
        // with a backlog it fills that queue and holds it, at about 500 bytes a record: tens of
        // MB that only make the repartition topic run further ahead of the tasks. With fewer
        // the stage waits (the collector retries a full queue), and the tasks keep pace.
        .set("queue.buffering.max.messages", QUEUE_BUFFERING_MAX_MESSAGES)
        .set("statistics.interval.ms", "5000");
    for (k, v) in &cfg.kafka.producer {
        c.set(k, v);
    }
    Ok(c)
}

/// Topics and whether they are compacted tables: the configured ones and the group's internal
/// ones (the repartition topic only when records are repartitioned).
fn topics<'a>(cfg: &'a Config, names: &'a TopicTable) -> Vec<(&'a str, bool)> {
    let t = &cfg.topics;
    let mut all = vec![
        (t.votes.as_str(), false),
        (t.judge_scores.as_str(), false),
        (t.reputations.as_str(), true),
        (t.scores.as_str(), true),
        (t.consensus.as_str(), false),
        (t.bias_alerts.as_str(), false),
        (t.leaderboard.as_str(), true),
        (t.dead_letters.as_str(), false),
        (t.judge_quality.as_str(), true),
        (t.review_requests.as_str(), false),
        (t.reviewer_quality.as_str(), true),
        (names.state(), true),
    ];
    if cfg.input.repartitions() {
        all.push((names.repartition(), false));
        all.push((names.instances(), true));
    }
    all
}

/// Drops a client on a thread of its own: librdkafka's destroy waits for its threads' next tick
/// (up to 100 ms each for the admin and the probe), which the start-up need not wait for.
pub fn drop_aside<T: Send + 'static>(client: T) {
    std::thread::spawn(move || drop(client));
}

/// How long the first attempt to reach the brokers waits before saying it is waiting, and
/// then how often it says so again.
const FIRST_REACH: Duration = Duration::from_secs(1);
const REACH_REPORT: Duration = Duration::from_secs(5);

/// A client for the cluster's metadata, once a broker answered: fails within
/// `kafka.connect_timeout_secs` with an error naming the brokers if none of them does (without
/// this the admin client waits a minute and names neither setting nor address). Meanwhile one
/// line says, within a second, which address it is waiting for, and another every few
/// seconds, so a wrong address is seen at once, not after the whole wait.
pub fn reach(cfg: &Config) -> Result<BaseConsumer<QuietReader>, ServiceError> {
    let secs = cfg.kafka.connect_timeout_secs;
    let servers = &cfg.kafka.bootstrap_servers;
    let probe: BaseConsumer<QuietReader> =
        reader_config(cfg, "probe")?.create_with_context(QuietReader)?;
    let started = std::time::Instant::now();
    let give_up = Duration::from_secs(secs);
    let mut wait = FIRST_REACH;
    loop {
        let attempt = wait.min(give_up.saturating_sub(started.elapsed()));
        match probe.fetch_metadata(None, attempt) {
            Ok(_) => return Ok(probe),
            // The attempt that waited out the rest of the time. Not a check of the clock:
            // librdkafka counts its timeout in whole milliseconds, so attempts in the last one
            // return at once, and each would have said again that it was still trying.
            Err(error) if attempt < wait => {
                return Err(ServiceError::Unreachable {
                    servers: servers.clone(),
                    secs,
                    error,
                });
            }
            Err(error) => tracing::warn!(
                %error,
                waited_secs = started.elapsed().as_secs(),
                gives_up_after_secs = secs,
                "no answer yet from Kafka at kafka.bootstrap_servers = {servers:?}; still trying"
            ),
        }
        wait = REACH_REPORT;
    }
}

/// Creates missing topics (when configured) and checks, with `probe`'s metadata, that every
/// topic exists and that the changelog has a partition for every input partition. Returns how
/// many partitions each topic has.
pub fn ensure_topics(
    cfg: &Config,
    names: &TopicTable,
    probe: &BaseConsumer<QuietReader>,
) -> Result<HashMap<String, usize>, ServiceError> {
    let wanted = topics(cfg, names);
    if cfg.kafka.create_topics {
        let admin: AdminClient<QuietReader> = base_config(cfg)?.create_with_context(QuietReader)?;
        let new: Vec<NewTopic> = wanted
            .iter()
            .map(|(name, compact)| {
                let t = NewTopic::new(
                    name,
                    cfg.kafka.partitions,
                    TopicReplication::Fixed(cfg.kafka.replication_factor),
                );
                if *compact {
                    t.set("cleanup.policy", "compact")
                } else {
                    t
                }
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = futures_block(admin.create_topics(&new, &opts))??;
        for result in results {
            match result {
                Ok(name) => tracing::info!(topic = %name, "created topic"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(ServiceError::Topic(format!("creating {name}: {code}")));
                }
            }
        }
        drop_aside(admin);
    }
    // One metadata request for every topic, again while a topic just created is not in it yet.
    let mut partitions: HashMap<&str, usize> = HashMap::new();
    for attempt in 0..20 {
        let md = probe.fetch_metadata(None, Duration::from_secs(10))?;
        partitions = wanted
            .iter()
            .filter_map(|(name, _)| {
                let t = md.topics().iter().find(|t| t.name() == *name)?;
                let found = t.partitions().len();
                (t.error().is_none() && found > 0).then_some((*name, found))
            })
            .collect();
        if partitions.len() == wanted.len() || !cfg.kafka.create_topics || attempt == 19 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if let Some((name, _)) = wanted
        .iter()
        .find(|(name, _)| !partitions.contains_key(name))
    {
        return Err(ServiceError::Topic(format!(
            "topic {name} does not exist (create it, or set kafka.create_topics = true)"
        )));
    }
    // Each partition of the log state is kept for has its state in the changelog's partition
    // of the same number.
    let (logs, named) = match cfg.input.partitioning {
        Partitioning::Repartition => (
            partitions[names.repartition()],
            format!("the repartition topic {}", names.repartition()),
        ),
        Partitioning::ByKey => (
            partitions[cfg.topics.votes.as_str()].max(partitions[cfg.topics.judge_scores.as_str()]),
            "the inputs".to_owned(),
        ),
    };
    // The forwarding stage and the queries place a project by `kafka.partitions`.
    if cfg.input.repartitions() && logs != cfg.kafka.partitions.max(0) as usize {
        return Err(ServiceError::Topic(format!(
            "{named} has {logs} partitions but kafka.partitions is {}; they must match (projects \
             are placed in its partitions by kafka.partitions)",
            cfg.kafka.partitions
        )));
    }
    let state = partitions[names.state()];
    if state < logs {
        return Err(ServiceError::Topic(format!(
            "changelog {} has {state} partitions but {named} has {logs}; it needs at least as many",
            names.state()
        )));
    }
    Ok(partitions
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect())
}

/// Waits for a future on a small runtime of its own (the admin API is async; the service loop
/// is not).
fn futures_block<F: std::future::Future>(f: F) -> Result<F::Output, ServiceError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The producer's queue is bounded by default, and `kafka.producer` sets another bound.
    #[test]
    fn the_producer_queue_is_bounded_unless_configured_otherwise() {
        let mut cfg = Config::default();
        let bound = |cfg: &Config| {
            producer_config(cfg, Stage::Apply)
                .expect("a valid configuration")
                .get("queue.buffering.max.messages")
                .map(str::to_owned)
        };
        assert_eq!(bound(&cfg).as_deref(), Some(QUEUE_BUFFERING_MAX_MESSAGES));
        cfg.kafka
            .producer
            .insert("queue.buffering.max.messages".into(), "50000".into());
        assert_eq!(bound(&cfg).as_deref(), Some("50000"));
    }

    /// Only the forwarding stage compresses, and `kafka.producer` chooses otherwise for all.
    #[test]
    fn the_repartition_topic_is_compressed_unless_configured_otherwise() {
        let mut cfg = Config::default();
        let codec = |cfg: &Config, stage| {
            producer_config(cfg, stage)
                .expect("a valid configuration")
                .get("compression.type")
                .map(str::to_owned)
        };
        assert_eq!(codec(&cfg, Stage::Forward).as_deref(), Some("lz4"));
        assert_eq!(codec(&cfg, Stage::Apply), None);
        cfg.kafka
            .producer
            .insert("compression.type".into(), "none".into());
        assert_eq!(codec(&cfg, Stage::Forward).as_deref(), Some("none"));
    }

    /// The tasks' fetches from the compressed repartition topic are as small as librdkafka
    /// allows (it refuses a client whose fetch is smaller than its largest record); with
    /// `by_key`, where the tasks read the inputs, they keep librdkafka's default.
    #[test]
    fn the_tasks_fetch_little_of_the_compressed_repartition_topic() {
        let mut cfg = Config::default();
        let fetch = |cfg: &Config, stage| {
            consumer_config(cfg, "g", stage)
                .expect("a valid configuration")
                .get("fetch.max.bytes")
                .map(str::to_owned)
        };
        assert!(cfg.input.repartitions());
        assert_eq!(fetch(&cfg, Stage::Apply), Some(message_max(&cfg)));
        assert_eq!(fetch(&cfg, Stage::Forward), None);
        cfg.limits.max_message_bytes = 4 << 20;
        let fetched = fetch(&cfg, Stage::Apply).expect("set");
        assert_eq!(fetched, message_max(&cfg));
        assert!(fetched.parse::<usize>().expect("a number") > 4 << 20);
        let made = consumer_config(&cfg, "g", Stage::Apply)
            .expect("a valid configuration")
            .create::<BaseConsumer>();
        assert!(made.is_ok(), "librdkafka refused it: {:?}", made.err());
        cfg.input.partitioning = Partitioning::ByKey;
        assert_eq!(fetch(&cfg, Stage::Apply), None);
    }
}
