//! Configuration: `config/jurystream.toml`, overridden by `JURYSTREAM_SECTION__KEY` variables.
//!
//! Every key has a default, so an empty file is a valid configuration. Unknown keys and bad values
//! fail at start with an error naming the key: a typo must never silently fall back to a default.

use std::collections::BTreeMap;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The largest `limits.dedupe_window`: the engine's dedupe window indexes its ids with 24-bit
/// positions. A window this size takes about 700 MiB, far beyond any useful setting.
pub const MAX_DEDUPE_WINDOW: usize = (1 << 24) - 1;

/// A configuration that could not be loaded or is invalid; `key` is the dotted path, e.g. `scoring.lambda`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Load(Box<figment::Error>),
    #[error("configuration key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub input: Input,
    pub topics: Topics,
    pub limits: Limits,
    pub scoring: Scoring,
    pub sessions: Sessions,
    pub bias: Bias,
    pub leaderboard: Leaderboard,
    pub judge_quality: JudgeQuality,
    pub kafka: Kafka,
    pub output: OutputSettings,
    pub http: Http,
    pub log: Log,
    pub metrics: Metrics,
}

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
    /// Any librdkafka property for the consumers, e.g. `"session.timeout.ms" = "10000"`.
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
}

impl Default for OutputSettings {
    fn default() -> Self {
        OutputSettings {
            scores_coalesce_ms: 100,
        }
    }
}

/// The HTTP server: /metrics, /healthz, /readyz and the interactive queries under /v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http {
    pub bind: String,
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

/// Where a project's state lives in the Kafka service (see the README, "Partitioning").
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
            state: String::new(),
        }
    }
}

/// Input limits; anything beyond them is dead-lettered, never truncated silently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest accepted message value in bytes (also raises the Kafka clients' message size).
    pub max_message_bytes: usize,
    /// Most votes in one `jury.votes` batch.
    pub max_votes_per_event: usize,
    /// Longest `event_id`, `project_id`, `voter_id`, ... in bytes.
    pub max_id_bytes: usize,
    /// Dead letters carry at most this many bytes of the original payload.
    pub dead_letter_payload_bytes: usize,
    /// Accepted event ids remembered per project and topic for duplicate detection (oldest forgotten first).
    pub dedupe_window: usize,
    /// Reject events with fields the contract does not define (`unknown_field`) instead of ignoring them.
    pub reject_unknown_fields: bool,
    /// How far an event's `occurred_at` may lie after its record's timestamp, in seconds:
    /// beyond, it is dead-lettered (`occurred_at_in_future`) rather than pushing its project's
    /// last event time, and with it every later batch's decay, into the future.
    pub max_future_skew_secs: u64,
    /// Most projects one instance holds, over all its partitions (a project with both votes and
    /// judge sessions counts once; with `by_key` its two parts are two partitions' and count
    /// once each): a record that would add one more is dead-lettered
    /// (`project_limit`), so a flood of project ids costs dead letters, not memory.
    pub max_projects: usize,
}

impl Limits {
    /// The largest record the service reads or writes: an accepted payload plus its envelope
    /// (key, headers). The Kafka clients are configured with it, and no output may exceed it.
    pub fn max_record_bytes(&self) -> usize {
        self.max_message_bytes
            .saturating_add(64 << 10)
            .min(1_000_000_000)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 1 << 20,
            max_votes_per_event: 1000,
            max_id_bytes: 256,
            dead_letter_payload_bytes: 64 << 10,
            dedupe_window: 100_000,
            reject_unknown_fields: false,
            max_future_skew_secs: 3600,
            max_projects: 1_000_000,
        }
    }
}

/// The HumanJudge time-weighted score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Scoring {
    /// Decay rate per second: a batch `dt` seconds after the previous one keeps `exp(-lambda*dt)` of the old score.
    pub lambda: f64,
    /// Score reported for a project that has had no batch yet.
    pub initial_score: f64,
    /// Per-project `lambda` overrides, keyed by project id.
    pub project_lambda: BTreeMap<String, f64>,
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring {
            lambda: 0.01,
            initial_score: 0.5,
            project_lambda: BTreeMap::new(),
        }
    }
}

impl Scoring {
    /// The decay rate for one project.
    pub fn lambda_for(&self, project_id: &str) -> f64 {
        self.project_lambda
            .get(project_id)
            .copied()
            .unwrap_or(self.lambda)
    }
}

/// How a single-candidate session's judges are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    WeightedAverage,
    Median,
    Highest,
    Lowest,
    Majority,
    Unanimous,
}

/// How a multi-candidate session is ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    NormalizedScores,
    Borda,
}

/// Judge sessions: completion and consensus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sessions {
    /// Scale of ballots that give none.
    pub default_scale_min: f64,
    pub default_scale_max: f64,
    /// A session completes ("timeout") once its project's event-time watermark passes its last
    /// activity by this many seconds.
    pub timeout_secs: u64,
    /// Most open sessions per project and per partition's state; beyond, the oldest is
    /// "evicted".
    pub max_open_per_project: usize,
    pub max_open_total: usize,
    /// Completed session ids remembered per project, to dead-letter late ballots (`session_completed`).
    pub completed_window: usize,
    /// The latest completed sessions' `jury.consensus` records each project keeps, for the
    /// interactive queries (`GET .../sessions/{id}`).
    pub completed_records: usize,
    /// Most candidates and most judges in one session: a ballot that would bring its session
    /// beyond either is dead-lettered (`session_limit`), because a session's memory and its
    /// consensus record grow with their product.
    pub max_candidates: usize,
    pub max_judges: usize,
    pub strategy: Strategy,
    pub method: Method,
    /// Drop a judge's score and rank for a candidate it authored.
    pub exclude_self_votes: bool,
    /// Judge weights for weighted averages (default 1.0), keyed by judge id.
    pub judge_weights: BTreeMap<String, f64>,
    /// Where the weights come from: `judge_weights` ("configured"), or each judge's agreement
    /// with the humans, `max(0, kappa)` of its judge-quality window ("learned"; a judge
    /// without a kappa yet keeps its configured weight).
    pub judge_weighting: Weighting,
}

/// Where judge weights come from (`sessions.judge_weighting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    Configured,
    Learned,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            default_scale_min: 1.0,
            default_scale_max: 10.0,
            timeout_secs: 300,
            max_open_per_project: 1_000,
            max_open_total: 100_000,
            completed_window: 100_000,
            completed_records: 10,
            max_candidates: 1_000,
            max_judges: 100,
            strategy: Strategy::WeightedAverage,
            method: Method::NormalizedScores,
            exclude_self_votes: true,
            judge_weights: BTreeMap::new(),
            judge_weighting: Weighting::Configured,
        }
    }
}

impl Sessions {
    /// A judge's weight.
    pub fn weight(&self, judge: &str) -> f64 {
        self.judge_weights.get(judge).copied().unwrap_or(1.0)
    }
}

/// Bias-audit thresholds; values are on the normalized 0..1 scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Bias {
    /// Length bias: |r| above this ...
    pub length_r: f64,
    /// ... with a p-value below this.
    pub length_p: f64,
    /// Position bias: variance of per-position mean scores above this (0.0062 = 0.5 on 1..10).
    pub position_variance: f64,
    /// Self-vote inflation above this.
    pub self_vote_inflation: f64,
    /// Low agreement: agreement below this.
    pub low_agreement: f64,
    /// Project scope: minimum evidence before alerting.
    pub project_min_length_pairs: u64,
    pub project_min_judge_reviews: u64,
    pub project_min_position_sessions: u64,
    pub project_min_self_votes: u64,
    /// Project scope: a judge is harsh/generous when its mean's 95% CI lies entirely more than
    /// this far below/above the project's mean.
    pub project_calibration_margin: f64,
}

impl Default for Bias {
    fn default() -> Self {
        Bias {
            length_r: 0.3,
            length_p: 0.05,
            position_variance: 0.0062,
            self_vote_inflation: 0.1,
            low_agreement: 0.5,
            project_min_length_pairs: 30,
            project_min_judge_reviews: 50,
            project_min_position_sessions: 20,
            project_min_self_votes: 20,
            project_calibration_margin: 0.1,
        }
    }
}

/// The cross-session leaderboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Leaderboard {
    /// Sliding event-time window in days.
    pub window_days: u64,
    /// Bootstrap resamples of the window's session blocks behind each Bradley-Terry interval.
    pub bootstrap_rounds: usize,
    /// Models a category's rows and Bradley-Terry fit hold: a refit costs the square of it.
    pub max_models: usize,
    /// Categories a project's board holds.
    pub max_categories: usize,
    /// The Bradley-Terry ratings of a project's category are refitted at most this often, in
    /// seconds of event time (0: after every session); rows in between carry the last fit.
    pub bt_interval_secs: u64,
}

impl Default for Leaderboard {
    fn default() -> Self {
        Leaderboard {
            window_days: 30,
            bootstrap_rounds: 200,
            max_models: 50,
            max_categories: 100,
            bt_interval_secs: 60,
        }
    }
}

/// Judge quality: each judge's agreement with the humans over (judge score, humans' score)
/// pairs of the same item, and the alerts and review requests it raises. It needs a project's
/// votes and judge scores in one state, so it works with `input.partitioning = "repartition"`
/// (the default) and is off with `by_key`. A vote joins its item's votes in the project's state
/// as it is applied, from the batch as read once (docs/performance.md measures what it costs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JudgeQuality {
    pub enabled: bool,
    /// Votes an item needs before its humans' score pairs with judge scores.
    pub min_human_votes: u64,
    /// Items per project whose votes are remembered, and items whose judge scores wait for
    /// votes (each bound on its own); the oldest is forgotten first.
    pub max_pending_items: usize,
    /// Items one instance remembers votes for, over all its projects, and as many whose judge
    /// scores wait for votes: split evenly over the `kafka.partitions` tasks, each of which
    /// forgets its oldest item first whatever its project. A split bound, not a shared one, so
    /// what a task forgets does not depend on which instance holds which partitions.
    pub max_items: usize,
    /// Pairs per judge its agreement is computed over; candidates the effective number of
    /// judges is computed over.
    pub window: usize,
    /// Judges per project with a window; the one seen first is forgotten first.
    pub max_judges: usize,
    /// Shared candidates a judge pair needs for its correlation to count.
    pub min_shared: usize,
    /// `judge_human_disagreement`: kappa below this ...
    pub min_kappa: f64,
    /// ... over at least this many pairs.
    pub min_pairs: usize,
    /// `judge_drift`: kappa fell by more than this since `window` pairs earlier.
    pub max_kappa_drop: f64,
    /// A review request when a judge's score and the humans' differ by more than this.
    pub review_gap: f64,
}

impl Default for JudgeQuality {
    fn default() -> Self {
        JudgeQuality {
            enabled: true,
            min_human_votes: 3,
            max_pending_items: 10_000,
            max_items: 100_000,
            window: 500,
            max_judges: 100,
            min_shared: 10,
            min_kappa: 0.4,
            min_pairs: 30,
            max_kappa_drop: 0.2,
            review_gap: 0.5,
        }
    }
}

impl Config {
    /// The largest record the service's producer sends: `message.max.bytes` as configured for
    /// it, or the record limit it is given by default.
    pub fn producer_record_limit(&self) -> usize {
        self.kafka
            .producer
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| self.limits.max_record_bytes())
    }

    /// Loads `path` (if given) over the defaults, then the `JURYSTREAM_*` environment, then validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = path {
            if !path.exists() {
                return Err(invalid(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            figment = figment.merge(Toml::file(path));
        }
        Config::from_figment(figment.merge(env_overrides()))
    }

    /// Parses a TOML document over the defaults (no environment); for tests and embedded configs.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::from_figment(
            Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(text)),
        )
    }

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Load(Box::new(e)))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value a type cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.topics;
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
        ] {
            if name.is_empty() || name.len() > 249 {
                return Err(invalid(key, "a topic name has 1 to 249 characters"));
            }
        }
        if t.state.len() > 249 {
            return Err(invalid(
                "topics.state",
                "a topic name has 1 to 249 characters",
            ));
        }
        // The repartition stage's copy detection (`engine::Origins`) and the changelog assume
        // a retried produce never writes a record twice: the idempotent producer, acks=all.
        for (key, allowed) in [
            ("enable.idempotence", &["true"][..]),
            ("acks", &["all", "-1"][..]),
        ] {
            if let Some(v) = self.kafka.producer.get(key)
                && !allowed.contains(&v.trim().to_ascii_lowercase().as_str())
            {
                return Err(invalid(
                    &format!("kafka.producer.{key}"),
                    format!(
                        "jurystream's exactly-once counting relies on the idempotent producer \
                         with acks=all; {key} = {v:?} would turn it off (remove the override)"
                    ),
                ));
            }
        }
        positive("http.max_connections", self.http.max_connections)?;
        positive(
            "http.header_timeout_ms",
            usize::try_from(self.http.header_timeout_ms).unwrap_or(usize::MAX),
        )?;
        let inputs = [&t.votes, &t.judge_scores, &t.reputations];
        if inputs[0] == inputs[1] || inputs[0] == inputs[2] || inputs[1] == inputs[2] {
            return Err(invalid("topics", "the three input topics must be distinct"));
        }
        let l = &self.limits;
        positive("limits.max_message_bytes", l.max_message_bytes)?;
        positive("limits.max_votes_per_event", l.max_votes_per_event)?;
        positive("limits.max_id_bytes", l.max_id_bytes)?;
        positive(
            "limits.dead_letter_payload_bytes",
            l.dead_letter_payload_bytes,
        )?;
        positive("limits.dedupe_window", l.dedupe_window)?;
        positive("limits.max_projects", l.max_projects)?;
        at_most(
            "limits.dedupe_window",
            l.dedupe_window,
            MAX_DEDUPE_WINDOW,
            "ids per project (the window's index limit)",
        )?;
        at_most(
            "limits.max_message_bytes",
            l.max_message_bytes,
            1_000_000_000,
            "(librdkafka's limit)",
        )?;
        rate("scoring.lambda", self.scoring.lambda)?;
        for (project, lambda) in &self.scoring.project_lambda {
            rate(&format!("scoring.project_lambda.{project}"), *lambda)?;
        }
        unit_interval("scoring.initial_score", self.scoring.initial_score)?;
        let se = &self.sessions;
        if !se.default_scale_min.is_finite()
            || !se.default_scale_max.is_finite()
            || se.default_scale_min >= se.default_scale_max
        {
            return Err(invalid(
                "sessions.default_scale_min",
                "must be finite and below sessions.default_scale_max",
            ));
        }
        positive("sessions.timeout_secs", se.timeout_secs as usize)?;
        positive("sessions.max_open_per_project", se.max_open_per_project)?;
        positive("sessions.max_open_total", se.max_open_total)?;
        positive("sessions.completed_window", se.completed_window)?;
        positive("sessions.max_candidates", se.max_candidates)?;
        positive("sessions.max_judges", se.max_judges)?;
        for (judge, w) in &se.judge_weights {
            if !w.is_finite() || *w <= 0.0 {
                return Err(invalid(
                    &format!("sessions.judge_weights.{judge}"),
                    format!("must be a finite number > 0, got {w}"),
                ));
            }
        }
        let b = &self.bias;
        for (key, v) in [
            ("bias.length_r", b.length_r),
            ("bias.length_p", b.length_p),
            ("bias.position_variance", b.position_variance),
            ("bias.low_agreement", b.low_agreement),
            (
                "bias.project_calibration_margin",
                b.project_calibration_margin,
            ),
        ] {
            unit_interval(key, v)?;
        }
        if !b.self_vote_inflation.is_finite() {
            return Err(invalid("bias.self_vote_inflation", "must be finite"));
        }
        positive(
            "leaderboard.window_days",
            self.leaderboard.window_days as usize,
        )?;
        at_most(
            "leaderboard.window_days",
            self.leaderboard.window_days as usize,
            366,
            "days (a category keeps resampling blocks for each)",
        )?;
        at_most(
            "leaderboard.bootstrap_rounds",
            self.leaderboard.bootstrap_rounds,
            10_000,
            "resamples (each refits the window)",
        )?;
        positive("leaderboard.max_models", self.leaderboard.max_models)?;
        positive(
            "leaderboard.max_categories",
            self.leaderboard.max_categories,
        )?;
        at_most(
            "leaderboard.max_models",
            self.leaderboard.max_models,
            1_000,
            "models per category (a refit costs their square)",
        )?;
        let q = &self.judge_quality;
        positive("judge_quality.min_human_votes", q.min_human_votes as usize)?;
        positive("judge_quality.max_pending_items", q.max_pending_items)?;
        positive("judge_quality.max_items", q.max_items)?;
        positive("judge_quality.window", q.window)?;
        at_most(
            "judge_quality.window",
            q.window,
            10_000,
            "pairs (each pair recomputes the window's statistics)",
        )?;
        positive("judge_quality.max_judges", q.max_judges)?;
        for (key, v) in [
            ("judge_quality.max_kappa_drop", q.max_kappa_drop),
            ("judge_quality.review_gap", q.review_gap),
        ] {
            unit_interval(key, v)?;
        }
        if !(-1.0..=1.0).contains(&q.min_kappa) {
            return Err(invalid("judge_quality.min_kappa", "must be in [-1, 1]"));
        }
        let k = &self.kafka;
        if k.bootstrap_servers.is_empty() {
            return Err(invalid("kafka.bootstrap_servers", "must not be empty"));
        }
        if k.group_id.is_empty() {
            return Err(invalid("kafka.group_id", "must not be empty"));
        }
        positive("kafka.partitions", k.partitions.max(0) as usize)?;
        positive(
            "kafka.replication_factor",
            k.replication_factor.max(0) as usize,
        )?;
        positive("kafka.commit_interval_ms", k.commit_interval_ms as usize)?;
        positive(
            "kafka.connect_timeout_secs",
            k.connect_timeout_secs as usize,
        )?;
        if !["text", "json"].contains(&self.log.format.as_str()) {
            return Err(invalid("log.format", "must be \"text\" or \"json\""));
        }
        at_most(
            "sessions.completed_records",
            self.sessions.completed_records,
            1_000,
            "per project",
        )?;
        if self.http.bind.parse::<std::net::SocketAddr>().is_err() {
            return Err(invalid(
                "http.bind",
                format!("{:?} is not an address like 127.0.0.1:9464", self.http.bind),
            ));
        }
        Ok(())
    }
}

fn env_overrides() -> Env {
    // Only SECTION__KEY variables are settings; JURYSTREAM_CONFIG and the like are not.
    Env::prefixed("JURYSTREAM_")
        .filter(|k| k.as_str().contains("__"))
        .split("__")
}

fn positive(key: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(invalid(key, "must be at least 1"));
    }
    Ok(())
}

/// `value` may be at most `max`; the message reads "at most {max} {why}".
fn at_most(key: &str, value: usize, max: usize, why: &str) -> Result<(), ConfigError> {
    if value > max {
        return Err(invalid(key, format!("at most {max} {why}")));
    }
    Ok(())
}

pub(crate) fn rate(key: &str, value: f64) -> Result<(), ConfigError> {
    if !value.is_finite() || value < 0.0 {
        return Err(invalid(
            key,
            format!("must be a finite number >= 0, got {value}"),
        ));
    }
    Ok(())
}

pub(crate) fn unit_interval(key: &str, value: f64) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(invalid(key, format!("must be within 0..=1, got {value}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_file_is_valid_and_equals_defaults() {
        let text = include_str!("../config/jurystream.toml");
        assert_eq!(Config::from_toml(text).unwrap(), Config::default());
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::from_toml("[scoring]\nlambda = -1.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scoring.lambda"), "{e}");
        let e = Config::from_toml("[scoring]\nlambdaa = 1.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lambdaa"), "{e}");
        let e = Config::from_toml("[limits]\nmax_votes_per_event = \"many\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_votes_per_event"), "{e}");
        let e = Config::from_toml("[scoring.project_lambda]\n\"p-1\" = -2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scoring.project_lambda.p-1"), "{e}");
        // Upper bounds: the largest value is accepted, one more is refused by name. The
        // window's index holds positions in 24 bits; librdkafka limits message sizes.
        let bounded = |key: &str, max: u64, message: &str| {
            let toml = |v: u64| format!("[limits]\n{key} = {v}");
            assert!(Config::from_toml(&toml(max)).is_ok(), "{key} = {max}");
            let e = Config::from_toml(&toml(max + 1)).unwrap_err().to_string();
            assert!(e.contains(&format!("limits.{key}")), "{e}");
            assert!(e.contains(message), "{e}");
        };
        bounded(
            "dedupe_window",
            16777215,
            "at most 16777215 ids per project",
        );
        bounded(
            "max_message_bytes",
            1000000000,
            "at most 1000000000 (librdkafka's limit)",
        );
    }

    #[test]
    fn producer_overrides_cannot_turn_idempotence_off() {
        for (text, key) in [
            (
                "[kafka.producer]\n\"enable.idempotence\" = \"false\"\n",
                "kafka.producer.enable.idempotence",
            ),
            ("[kafka.producer]\nacks = \"1\"\n", "kafka.producer.acks"),
        ] {
            match Config::from_toml(text) {
                Err(ConfigError::Invalid { key: k, message }) => {
                    assert_eq!(k, key);
                    assert!(message.contains("idempotent"), "{message}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        for ok in [
            "[kafka.producer]\n\"enable.idempotence\" = \"true\"\nacks = \"all\"\n",
            "[kafka.producer]\nacks = \"-1\"\n\"linger.ms\" = \"5\"\n",
        ] {
            assert!(Config::from_toml(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn session_settings_are_validated() {
        let e = Config::from_toml("[sessions]\nstrategy = \"loudest\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("strategy"), "{e}");
        let e = Config::from_toml("[sessions.judge_weights]\n\"openai/gpt-4o\" = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sessions.judge_weights.openai/gpt-4o"), "{e}");
        let c = Config::from_toml("[sessions]\nstrategy = \"median\"\nmethod = \"borda\"").unwrap();
        assert_eq!(
            (c.sessions.strategy, c.sessions.method),
            (Strategy::Median, Method::Borda)
        );
        let e = Config::from_toml("[sessions]\ndefault_scale_min = 10")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sessions.default_scale_min"), "{e}");
        for (toml, key) in [
            ("[sessions]\nmax_candidates = 0", "sessions.max_candidates"),
            ("[sessions]\nmax_judges = 0", "sessions.max_judges"),
            ("[limits]\nmax_projects = 0", "limits.max_projects"),
        ] {
            let e = Config::from_toml(toml).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    #[test]
    fn project_lambda_overrides() {
        let c = Config::from_toml("[scoring.project_lambda]\n\"p-1\" = 0.5").unwrap();
        assert_eq!(c.scoring.lambda_for("p-1"), 0.5);
        assert_eq!(c.scoring.lambda_for("p-2"), 0.01);
    }
}
