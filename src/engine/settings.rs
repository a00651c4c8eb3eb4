//! All the engine may know of the configuration: the sections that shape its formulas and its
//! input limits, which are the engine's own types (the configuration loads them, re-exports
//! them and checks them: `crate::config`). A runtime hands the engine its [`Settings`]
//! (`Config::engine_settings`), never the whole configuration, and tells it which input each
//! record comes from ([`super::Record::input`]), so the engine knows nothing of Kafka, topic
//! names, HTTP or logging.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The engine's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub limits: Limits,
    pub scoring: Scoring,
    pub sessions: Sessions,
    pub bias: Bias,
    pub leaderboard: Leaderboard,
    pub judge_quality: JudgeQuality,
    pub reviewers: Reviewers,
    /// Whether judge scores pair with the humans' votes: `judge_quality.enabled`, and a
    /// project's votes and judge scores in one log (`input.partitioning = "repartition"`).
    /// With `by_key` they are partitions of two topics, perhaps on two instances, and no state
    /// sees both.
    pub pairs_judges: bool,
    /// Items a task's judge quality holds (with votes, and as many with waiting scores):
    /// `judge_quality.max_items` split over the `kafka.partitions` tasks of an instance, or all
    /// of it where one state holds every project ([`Settings::one_task`]).
    pub quality_task_items: usize,
    /// `output.scores_coalesce_ms`: a project's `jury.scores` updates within this many
    /// milliseconds of the runtime's clock are coalesced (see [`super::Coalescing`]).
    pub scores_coalesce_ms: u64,
    /// `input.partitioning = "by_key"`: the runtime keeps each project's state in the partition
    /// its records are keyed to, so a record must be keyed by its project
    /// (`key_not_project_id`).
    pub key_is_project: bool,
    /// The largest record the runtime's producer sends (`limits.max_message_bytes` and room
    /// for its envelope, or `kafka.producer`'s `message.max.bytes`). What the engine keeps is
    /// bounded so that its changelog record, and a redo chunk around it, fit: a kept
    /// `jury.consensus` record takes at most a quarter of it (see
    /// [`super::state::KeptConsensus`]), an open session's ballots at most what its record
    /// holds ([`super::model::session::Session::bytes_with`]), a judge-quality item its share
    /// of a bucket ([`super::model::judge_quality::item_share`]).
    pub record_bytes: usize,
}

impl Settings {
    /// The settings of a runtime whose one state holds every project (replay): it holds all
    /// of `judge_quality.max_items`.
    pub fn one_task(mut self) -> Settings {
        self.quality_task_items = self.judge_quality.max_items;
        self
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
    /// last event time, and with it every later batch's decay, into the future. And how far an
    /// event time may lie after the service's clock when it first read the record
    /// (`event_time_in_future`), which a producer's host clock cannot move. It is also the
    /// longest an accepted record can make its project's honest records `late` (they change
    /// nothing until their time passes the project's), so the default is a minute: clocks kept
    /// by NTP are within a second, and a producer whose clock is wrong by more is told so.
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
            max_future_skew_secs: 60,
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
    /// Where a vote's weight comes from: `table` (its explicit reputation, else
    /// `jury.reputations`, else 1), `learned` (its voter's learned weight, `max(0, logit
    /// reliability)`, once the voter has `reviewers.min_items` shared items; the table's
    /// before), or `both` (their product).
    pub reputation_source: ReputationSource,
    /// A project whose last this many batches in a row did not move its event time forward
    /// (each at or before its latest, so none moved its score) is said once a run, alert
    /// `score_stalled`: a clock that stands still never freezes a score unseen. 0: never.
    pub stalled_after_batches: u64,
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring {
            lambda: 0.01,
            initial_score: 0.5,
            project_lambda: BTreeMap::new(),
            reputation_source: ReputationSource::Table,
            stalled_after_batches: 1000,
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
    /// A session completes ("idle") once it had no ballot for this many seconds of the
    /// service's wall clock, as the ticks it writes to the project log carry it, even while its
    /// project receives nothing; 0: never. See `SessionBook::tick`.
    pub idle_timeout_secs: u64,
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
            idle_timeout_secs: 600,
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
    /// Project scope: judges a project's audit follows. Beyond, the judge last seen longest ago
    /// is forgotten (its statistics and findings), so that the audit's changelog record stays
    /// within the largest record the producer sends (the configuration checks that it can).
    pub project_max_judges: usize,
    /// Project scope: display positions pooled, `0..project_max_positions`; a score shown at a
    /// later position counts in its session's audit only.
    pub project_max_positions: u64,
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
            project_max_judges: 100,
            project_max_positions: 1_000,
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
    /// Judges per project with a window; the one seen first is forgotten first. Also the most
    /// judge scores waiting per item: the newest, within the item's share of a changelog record
    /// ([`super::model::judge_quality::item_share`]).
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

/// Reviewer reliability: each human reviewer's reliability learned from how reviewers agree on
/// the same items (the two-coin Dawid-Skene model, fitted from the verdicts held), reported on
/// `jury.reviewer-quality` with alerts on `jury.bias-alerts`. It learns from the verdicts kept
/// in judge quality's item store, so it is on when that is (`input.partitioning =
/// "repartition"`, `judge_quality.enabled`) and holds the same items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Reviewers {
    pub enabled: bool,
    /// Shared items (with another reviewer's verdict too) a reviewer needs before it can be
    /// alerted on, or weighed by its learned reliability.
    pub min_items: u64,
    /// `reviewer_unreliable`: reliability below this.
    pub min_reliability: f64,
    /// `reviewer_straight_lining`: the same verdict on at least this share of its items while
    /// the others' majority on them is mixed (passes on a share strictly between
    /// `1 - max_same_verdict` and `max_same_verdict`).
    pub max_same_verdict: f64,
    /// Reviewers per project a fit reads, those with the most verdicts held; the others'
    /// verdicts are left out of it.
    pub max_reviewers: usize,
    /// Reviewers' verdicts kept per item; a new reviewer's verdict beyond them is left out. The
    /// configuration refuses more than an item's share of a changelog record holds
    /// ([`super::model::judge_quality::item_share`]) with ids of `limits.max_id_bytes`.
    pub max_verdicts: usize,
}

impl Default for Reviewers {
    fn default() -> Self {
        Reviewers {
            enabled: true,
            min_items: 20,
            min_reliability: 0.6,
            max_same_verdict: 0.95,
            max_reviewers: 10_000,
            max_verdicts: 32,
        }
    }
}

/// Where a vote's weight in the HumanJudge score comes from (`scoring.reputation_source`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReputationSource {
    /// The vote's explicit reputation, else `jury.reputations`, else 1.
    #[default]
    Table,
    /// The voter's learned weight once it has `reviewers.min_items` shared items, the table's
    /// before.
    Learned,
    /// The table's weight times the learned one.
    Both,
}
