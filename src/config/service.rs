//! The sections of the configuration the runtimes read (the Kafka service, its outputs, HTTP,
//! logs, metrics, input partitioning, topic names), with their defaults and their checks. The
//! engine's own sections are [`crate::engine::settings`]'s; [`super::engine`] checks them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Problems, at_most, each_at_most, invalid, positive};

/// The Kafka service (`jurystream run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Kafka {
    pub bootstrap_servers: String,
    pub group_id: String,
    pub client_id: String,
    /// Create missing topics at start (with `partitions`, `replication_factor`, and
    /// `cleanup.policy=compact` for the tables); when false, a missing topic stops the service.
    pub create_topics: bool,
    pub partitions: i32,
    pub replication_factor: i32,
    /// How long the broker may hold a fetch; tansu holds every fetch this long, so keep it small.
    pub fetch_wait_max_ms: u64,
    /// Work is committed in epochs: outputs and changelog are flushed and acknowledged, then the
    /// input offsets are committed. This is the longest epoch (an epoch also ends once the input
    /// is quiet for two fetch waits). Longer epochs write a busy project's state less often; a
    /// crash re-reads up to one epoch of input. 250 ms by default: an epoch's changelog is
    /// rendered on the processing thread when it ends, a pause that grows with the epoch. In the
    /// load benchmark (10,000 events/s, 5 ms fetch wait) p99 was 22-35 ms with 1 s epochs (mean
    /// 29 over eight runs), 19-31 with 250 ms (mean 24 over four) and 18-33 with 100 ms (mean 23
    /// over four); with one busy project 250 ms gave 73-76% of the raw loop, 100 ms 61-78%.
    pub commit_interval_ms: u64,
    /// Seconds to finish in-flight work, flush and commit after SIGTERM/SIGINT.
    pub shutdown_timeout_secs: u64,
    /// Seconds to reach the brokers at start; beyond, `run` stops with an error naming
    /// `kafka.bootstrap_servers` instead of waiting on.
    pub connect_timeout_secs: u64,
    pub security_protocol: String,
    pub sasl_mechanism: String,
    pub sasl_username: String,
    /// Name of the environment variable holding the SASL password (never logged).
    pub sasl_password_env: String,
    /// File holding the SASL password (never logged).
    pub sasl_password_file: String,
    pub ssl_ca_location: String,
    pub ssl_certificate_location: String,
    pub ssl_key_location: String,
    /// This instance's stable identity in its consumer groups (`group.instance.id`, static
    /// membership, KIP-345), e.g. the pod name of a StatefulSet; empty: a new member at every
    /// start. With an identity, an instance restarted within `session_timeout_ms` gets its
    /// partitions back at once, without a rebalance; without one, its partitions move only once
    /// the broker has given up on its old self, `session_timeout_ms` after it died.
    pub instance_id: String,
    /// How long the group waits for a silent member before its partitions go to the others
    /// (librdkafka's `session.timeout.ms`): the bound on how long a dead instance's tasks stand
    /// still, and, with `instance_id`, how long a restart may take without moving them.
    pub session_timeout_ms: u64,
    /// Any librdkafka property for the consumers, e.g. `"heartbeat.interval.ms" = "1000"`.
    pub consumer: BTreeMap<String, String>,
    /// Any librdkafka property for the producer.
    pub producer: BTreeMap<String, String>,
}

impl Default for Kafka {
    fn default() -> Self {
        Kafka {
            bootstrap_servers: "127.0.0.1:9092".into(),
            group_id: "jurystream".into(),
            client_id: "jurystream".into(),
            create_topics: true,
            partitions: 6,
            replication_factor: 1,
            fetch_wait_max_ms: 20,
            commit_interval_ms: 250,
            shutdown_timeout_secs: 30,
            connect_timeout_secs: 15,
            instance_id: String::new(),
            session_timeout_ms: 45_000,
            security_protocol: "plaintext".into(),
            sasl_mechanism: String::new(),
            sasl_username: String::new(),
            sasl_password_env: String::new(),
            sasl_password_file: String::new(),
            ssl_ca_location: String::new(),
            ssl_certificate_location: String::new(),
            ssl_key_location: String::new(),
            consumer: BTreeMap::new(),
            producer: BTreeMap::new(),
        }
    }
}

/// What the service publishes and how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSettings {
    /// `jury.scores` is a table: a project's updates within this many milliseconds are coalesced
    /// (the first is published at once, the latest at the next tick of this interval or at the
    /// end of the epoch, whichever comes first); 0 publishes every update. Replay always
    /// publishes every update.
    pub scores_coalesce_ms: u64,
    /// `jury.reviewer-quality` is a table too: a project whose verdicts changed is fitted at the
    /// next tick of this interval and each of its reviewers whose record changed republished
    /// (and every reviewer of a partition once its state is restored, so a record held when an
    /// instance stopped is never missing); 0 publishes at the end of every epoch. Replay
    /// publishes at the end of its input.
    pub reviewers_coalesce_ms: u64,
}

impl Default for OutputSettings {
    fn default() -> Self {
        OutputSettings {
            scores_coalesce_ms: 100,
            reviewers_coalesce_ms: 5000,
        }
    }
}

/// The HTTP server: /metrics, /healthz, /readyz and the interactive queries under /v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http {
    pub bind: String,
    /// A listener of its own for `/metrics`, `/healthz` and `/readyz` (e.g. `0.0.0.0:9465`),
    /// which are then served there only: no flood of slow clients on `bind` can delay a probe
    /// or a scrape. Empty: everything on `bind`, with a few connections reserved for them.
    pub admin_bind: String,
    /// The URL other instances send a client to for the projects this one owns; empty:
    /// `http://<bind>`, or with an unspecified bind address the host name's reachable address
    /// (see `crate::queries::advertise`).
    pub advertised_url: String,
    /// Answer a query for a project owned by another instance with that instance's answer,
    /// fetched once, instead of a `307` (for load balancers that cannot follow redirects).
    pub proxy_queries: bool,
    /// How long a proxied query waits for the owner's answer before a `504`.
    pub proxy_timeout_ms: u64,
    /// Connections served at once (besides a few reserved for /metrics and the probes).
    pub max_connections: usize,
    /// How long a request's headers may take, and an idle keep-alive connection may wait.
    pub header_timeout_ms: u64,
    /// A file of bearer tokens, one per line, that `/v1` requires (with those of the
    /// `JURYSTREAM_API_TOKENS` variable, comma-separated); none: `/v1` is open. Tokens never
    /// go in this file: it names where they are.
    pub tokens_file: String,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            bind: "127.0.0.1:9464".into(),
            admin_bind: String::new(),
            advertised_url: String::new(),
            proxy_queries: false,
            proxy_timeout_ms: 5000,
            max_connections: 256,
            header_timeout_ms: 5000,
            tokens_file: String::new(),
        }
    }
}

impl Http {
    /// The URL this instance advertises, once `advertised_url` is decided at start.
    pub fn advertised(&self) -> String {
        if self.advertised_url.is_empty() {
            format!("http://{}", self.bind)
        } else {
            self.advertised_url.trim_end_matches('/').to_owned()
        }
    }
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// `text` or `json`.
    pub format: String,
    /// A tracing filter, e.g. `info` or `jurystream=debug,rdkafka=warn`; `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for Log {
    fn default() -> Self {
        Log {
            format: "text".into(),
            level: "info".into(),
        }
    }
}

/// Metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// Projects whose score is exported as `jurystream_project_score`; empty = the top
    /// `score_top_n` projects by evaluations. Never one series per project by default.
    pub score_projects: Vec<String>,
    pub score_top_n: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            score_projects: Vec::new(),
            score_top_n: 20,
        }
    }
}

/// How the service finds each record's project state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Input {
    pub partitioning: Partitioning,
}

impl Input {
    /// Whether input records are forwarded to the repartition topic and applied from there.
    pub fn repartitions(&self) -> bool {
        self.partitioning == Partitioning::Repartition
    }
}

/// Where a project's state lives in the Kafka service (docs/operations.md, "Partitioning").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Partitioning {
    /// Every input record is forwarded to `<group_id>-repartition`, keyed and partitioned by
    /// its `project_id`, and applied from there: correct whatever producers key by.
    #[default]
    Repartition,
    /// Records are applied from the partition they were produced to; a record not keyed by its
    /// `project_id` is dead-lettered (`key_not_project_id`).
    ByKey,
}

/// Topic names, input and output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topics {
    pub votes: String,
    pub judge_scores: String,
    pub reputations: String,
    pub scores: String,
    pub consensus: String,
    pub bias_alerts: String,
    pub leaderboard: String,
    pub dead_letters: String,
    pub judge_quality: String,
    pub review_requests: String,
    pub reviewer_quality: String,
    /// The state changelog; empty (the default) names it after the consumer group,
    /// `<group_id>-state`.
    pub state: String,
}

impl Default for Topics {
    fn default() -> Self {
        Topics {
            votes: "jury.votes".into(),
            judge_scores: "jury.judge-scores".into(),
            reputations: "jury.reputations".into(),
            scores: "jury.scores".into(),
            consensus: "jury.consensus".into(),
            bias_alerts: "jury.bias-alerts".into(),
            leaderboard: "jury.leaderboard".into(),
            dead_letters: "jury.dead-letters".into(),
            judge_quality: "jury.judge-quality".into(),
            review_requests: "jury.review-requests".into(),
            reviewer_quality: "jury.reviewer-quality".into(),
            state: String::new(),
        }
    }
}

impl Topics {
    fn validate(&self, group_id: &str, p: &mut Problems) {
        let t = self;
        for (key, name) in [
            ("topics.votes", &t.votes),
            ("topics.judge_scores", &t.judge_scores),
            ("topics.reputations", &t.reputations),
            ("topics.scores", &t.scores),
            ("topics.consensus", &t.consensus),
            ("topics.bias_alerts", &t.bias_alerts),
            ("topics.leaderboard", &t.leaderboard),
            ("topics.dead_letters", &t.dead_letters),
            ("topics.judge_quality", &t.judge_quality),
            ("topics.review_requests", &t.review_requests),
            ("topics.reviewer_quality", &t.reviewer_quality),
        ] {
            if name.is_empty() || name.len() > 249 {
                p.push(invalid(key, "a topic name has 1 to 249 characters"));
            }
        }
        if t.state.len() > 249 {
            p.push(invalid(
                "topics.state",
                "a topic name has 1 to 249 characters",
            ));
        }
        t.validate_roles(group_id, p);
    }

    /// Each topic has one role: an output that is also an input would be read back (its
    /// records dead-lettered, and the letters read back again), two outputs on one topic would
    /// mix their tables, and a changelog or repartition topic beside anything else would be
    /// misread. Every name given a second role is named, with the first.
    fn validate_roles(&self, group_id: &str, p: &mut Problems) {
        let t = self;
        let roles = [
            ("topics.votes", t.votes.clone()),
            ("topics.judge_scores", t.judge_scores.clone()),
            ("topics.reputations", t.reputations.clone()),
            ("topics.scores", t.scores.clone()),
            ("topics.consensus", t.consensus.clone()),
            ("topics.bias_alerts", t.bias_alerts.clone()),
            ("topics.leaderboard", t.leaderboard.clone()),
            ("topics.dead_letters", t.dead_letters.clone()),
            ("topics.judge_quality", t.judge_quality.clone()),
            ("topics.review_requests", t.review_requests.clone()),
            ("topics.reviewer_quality", t.reviewer_quality.clone()),
            ("topics.state", changelog_name(&t.state, group_id)),
            ("kafka.group_id", repartition_name(group_id)),
            ("kafka.group_id", instances_name(group_id)),
        ];
        for (at, (key, name)) in roles.iter().enumerate() {
            if let Some((first, _)) = roles[..at].iter().find(|(_, n)| n == name) {
                p.push(invalid(
                    key,
                    format!(
                        "names the topic {name:?}, which {first} names too: each topic has one \
                         role"
                    ),
                ));
            }
        }
    }
}

/// The changelog's name: `topics.state` (`state`), or `<group_id>-state` where that is empty.
pub fn changelog_name(state: &str, group_id: &str) -> String {
    if state.is_empty() {
        format!("{group_id}-state")
    } else {
        state.to_owned()
    }
}

/// The topic every input record is forwarded to, named after consumer group `group_id` as
/// Kafka Streams names its internal topics after the application, so that two deployments with
/// different groups never share one.
pub fn repartition_name(group_id: &str) -> String {
    format!("{group_id}-repartition")
}

/// The topic instances advertise their query addresses on, named as [`repartition_name`].
pub fn instances_name(group_id: &str) -> String {
    format!("{group_id}-instances")
}

/// The librdkafka consumer properties that jurystream's guarantees rest on, with the values
/// `kafka.consumer` may give them (none: jurystream sets it for each consumer) and why: an
/// override that would change one is refused at start, not left to lose records or to wait.
const CONSUMER_GUARANTEES: [(&str, &[&str], &str); 4] = [
    (
        "enable.auto.commit",
        &["false"],
        "jurystream commits offsets itself, each once the results it covers are acknowledged, \
         not on a timer",
    ),
    (
        "enable.auto.offset.store",
        &["false"],
        "jurystream commits offsets itself, each once the results it covers are acknowledged, \
         not as records are read",
    ),
    (
        "auto.offset.reset",
        &["earliest", "smallest", "beginning"],
        "a group new to a topic must read it from its start, or the repartition topic's records \
         forwarded before the tasks' first commit would be skipped",
    ),
    (
        "enable.partition.eof",
        &[],
        "jurystream sets it for each consumer: a restore reads the changelog until every \
         partition says it has ended",
    ),
];

impl Kafka {
    fn validate(&self, p: &mut Problems) {
        let k = self;
        if k.bootstrap_servers.is_empty() {
            p.push(invalid("kafka.bootstrap_servers", "must not be empty"));
        }
        if k.group_id.is_empty() {
            p.push(invalid("kafka.group_id", "must not be empty"));
        }
        p.check(positive("kafka.partitions", k.partitions.max(0) as usize));
        p.check(positive(
            "kafka.replication_factor",
            k.replication_factor.max(0) as usize,
        ));
        p.check(positive(
            "kafka.commit_interval_ms",
            k.commit_interval_ms as usize,
        ));
        p.check(at_most(
            "kafka.commit_interval_ms",
            k.commit_interval_ms as usize,
            MAX_WAIT_MS,
            "ms (ten minutes; under load an epoch's commit, changelog and end-of-epoch outputs \
             wait this long)",
        ));
        p.check(positive(
            "kafka.session_timeout_ms",
            k.session_timeout_ms as usize,
        ));
        for (key, setting) in [
            ("group.id", "kafka.group_id"),
            ("group.instance.id", "kafka.instance_id"),
            ("session.timeout.ms", "kafka.session_timeout_ms"),
        ] {
            if self.consumer.contains_key(key) {
                p.push(invalid(
                    &format!("kafka.consumer.{key}"),
                    format!("is set by {setting}; set that instead"),
                ));
            }
        }
        const MECHANISMS: [&str; 5] = [
            "PLAIN",
            "SCRAM-SHA-256",
            "SCRAM-SHA-512",
            "GSSAPI",
            "OAUTHBEARER",
        ];
        if !k.sasl_mechanism.is_empty() && !MECHANISMS.contains(&k.sasl_mechanism.as_str()) {
            p.push(invalid(
                "kafka.sasl_mechanism",
                super::keys::not_a_choice(&k.sasl_mechanism, &MECHANISMS),
            ));
        }
        p.check(positive(
            "kafka.connect_timeout_secs",
            k.connect_timeout_secs as usize,
        ));
        let deadlines = [
            ("kafka.connect_timeout_secs", k.connect_timeout_secs),
            ("kafka.shutdown_timeout_secs", k.shutdown_timeout_secs),
        ];
        let why = "s (ten minutes; a start waits this long for an unreachable broker before it \
                   fails, a stop for its last deliveries)";
        each_at_most(p, deadlines, MAX_WAIT_MS / 1000, why);
        for (key, allowed, why) in CONSUMER_GUARANTEES {
            if let Some(v) = self.consumer.get(key)
                && !allowed.contains(&v.trim().to_ascii_lowercase().as_str())
            {
                p.push(invalid(
                    &format!("kafka.consumer.{key}"),
                    format!("{why}: {key} = {v:?} cannot be set (remove the override)"),
                ));
            }
        }
        // The repartition stage's copy detection (`engine::Origins`) and the changelog assume
        // a retried produce never writes a record twice: the idempotent producer, acks=all.
        for (key, allowed) in [
            ("enable.idempotence", &["true"][..]),
            ("acks", &["all", "-1"][..]),
        ] {
            if let Some(v) = self.producer.get(key)
                && !allowed.contains(&v.trim().to_ascii_lowercase().as_str())
            {
                p.push(invalid(
                    &format!("kafka.producer.{key}"),
                    format!(
                        "jurystream's exactly-once counting relies on the idempotent producer \
                         with acks=all; {key} = {v:?} would turn it off (remove the override)"
                    ),
                ));
            }
        }
    }
}

impl Http {
    fn validate(&self, p: &mut Problems) {
        p.check(positive("http.max_connections", self.max_connections));
        p.check(positive(
            "http.header_timeout_ms",
            usize::try_from(self.header_timeout_ms).unwrap_or(usize::MAX),
        ));
        let waits = [
            ("http.proxy_timeout_ms", self.proxy_timeout_ms),
            ("http.header_timeout_ms", self.header_timeout_ms),
        ];
        let why = "ms (ten minutes; a query or a connection holds its slot this long)";
        each_at_most(p, waits, MAX_WAIT_MS, why);
        if !is_host_and_port(&self.bind) {
            p.push(invalid(
                "http.bind",
                format!(
                    "{:?} is not a host and port like 127.0.0.1:9464 or localhost:9464",
                    self.bind
                ),
            ));
        }
        if !self.admin_bind.is_empty() {
            if !is_host_and_port(&self.admin_bind) {
                p.push(invalid(
                    "http.admin_bind",
                    format!(
                        "{:?} is not a host and port like 127.0.0.1:9465 or localhost:9465",
                        self.admin_bind
                    ),
                ));
            }
            if self.admin_bind == self.bind {
                p.push(invalid(
                    "http.admin_bind",
                    "must differ from http.bind (leave it empty to serve everything there)",
                ));
            }
        }
    }
}

/// Whether `text` is an address to listen on: an IP address and port (`127.0.0.1:9464`,
/// `[::]:9464`) or a host name and port (`localhost:9464`), which is resolved when the
/// listener binds.
pub fn is_host_and_port(text: &str) -> bool {
    if text.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return false;
    };
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    port.parse::<u16>().is_ok() && host.len() <= 253 && host.split('.').all(label)
}

/// Why `filter` is not a log filter that says what it means, if it is not: a comma-separated
/// list of levels (`trace`, `debug`, `info`, `warn`, `error`, `off`) and `target=level`
/// directives. A bare word that is not a level is refused although tracing would read it as a
/// target to log everything of: `verbose` is a mistyped level far more often than a target,
/// and as a target it silences every other line.
pub fn log_filter_error(filter: &str) -> Option<String> {
    use std::str::FromStr;
    use tracing::level_filters::LevelFilter;
    const LEVELS: &str = "trace, debug, info, warn, error or off";
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = match directive.rsplit_once('=') {
            // A span or field filter (`target[span{field=value}]=level`): tracing's own syntax.
            _ if directive.contains('[') => continue,
            Some((target, level)) if !target.is_empty() => level,
            _ => directive,
        };
        if LevelFilter::from_str(level).is_err() {
            return Some(if level == directive {
                format!("{directive:?} is neither a level ({LEVELS}) nor `target=level`")
            } else {
                format!("{directive:?}: {level:?} is not a level ({LEVELS})")
            });
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter)
        .err()
        .map(|e| format!("{filter:?} is not a log filter: {e}"))
}

impl Log {
    fn validate(&self, p: &mut Problems) {
        if !["text", "json"].contains(&self.format.as_str()) {
            p.push(invalid("log.format", "must be \"text\" or \"json\""));
        }
        if let Some(error) = log_filter_error(&self.level) {
            p.push(invalid("log.level", error));
        }
    }
}

/// The longest the runtime's own waits may be: the epoch, the coalescing intervals, and the
/// deadlines of a start, a stop, a proxied query and a request's headers. A figure waits for
/// the end of an epoch or for the next coalescing tick, a start for its broker, a stop for its
/// deliveries, a query for its owner: a value of hours (a key typed in seconds, a zero too
/// many) would leave a figure stale, or a start, stop or query hanging, that long without a
/// word. Refused at start instead.
const MAX_WAIT_MS: usize = 600_000;

impl OutputSettings {
    fn validate(&self, p: &mut Problems) {
        let waits = [
            ("output.scores_coalesce_ms", self.scores_coalesce_ms),
            ("output.reviewers_coalesce_ms", self.reviewers_coalesce_ms),
        ];
        let why = "ms (ten minutes; a figure waits this long for its update)";
        each_at_most(p, waits, MAX_WAIT_MS, why);
    }
}

/// Checks the runtimes' sections, noting every problem in `p`.
pub(super) fn validate(c: &super::Config, p: &mut Problems) {
    c.topics.validate(&c.kafka.group_id, p);
    c.kafka.validate(p);
    c.output.validate(p);
    c.http.validate(p);
    c.log.validate(p);
}
