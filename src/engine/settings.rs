//! All the engine may know of the configuration: the sections that shape its formulas and its
//! input limits. A runtime hands the engine these ([`Settings::of`]), never the whole
//! configuration, and tells it which input each record comes from ([`super::Record::input`]),
//! so the engine knows nothing of Kafka, topic names, HTTP or logging.

use crate::config::{Bias, Config, JudgeQuality, Leaderboard, Limits, Scoring, Sessions};

/// The engine's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub limits: Limits,
    pub scoring: Scoring,
    pub sessions: Sessions,
    pub bias: Bias,
    pub leaderboard: Leaderboard,
    pub judge_quality: JudgeQuality,
    /// Whether judge scores pair with the humans' votes (see [`Settings::pairs_judges`]).
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
    /// The longest `jury.consensus` record a project keeps (see
    /// [`super::state::KeptConsensus`]): a quarter of the largest record the runtime's producer
    /// sends, so the changelog record that holds it, and the redo chunk around that, fit.
    pub kept_record_bytes: usize,
}

impl Settings {
    /// The engine's part of `config`.
    pub fn of(config: &Config) -> Settings {
        Settings {
            limits: config.limits.clone(),
            scoring: config.scoring.clone(),
            sessions: config.sessions.clone(),
            bias: config.bias.clone(),
            leaderboard: config.leaderboard.clone(),
            judge_quality: config.judge_quality.clone(),
            pairs_judges: Settings::pairs_judges(config),
            quality_task_items: config
                .judge_quality
                .max_items
                .div_ceil(config.kafka.partitions.max(1) as usize),
            scores_coalesce_ms: config.output.scores_coalesce_ms,
            key_is_project: !config.input.repartitions(),
            kept_record_bytes: config.producer_record_limit() / 4,
        }
    }
}

impl Settings {
    /// The settings of a runtime whose one state holds every project (replay): it holds all
    /// of `judge_quality.max_items`.
    pub fn one_task(mut self) -> Settings {
        self.quality_task_items = self.judge_quality.max_items;
        self
    }

    /// Whether judge scores pair with the humans' votes: `judge_quality.enabled`, and a
    /// project's votes and judge scores in one log (`input.partitioning = "repartition"`).
    /// With `by_key` they are partitions of two topics, perhaps on two instances, and no state
    /// sees both.
    pub fn pairs_judges(config: &Config) -> bool {
        config.judge_quality.enabled && config.input.repartitions()
    }
}

impl Default for Settings {
    /// The engine's part of the default configuration.
    fn default() -> Self {
        Settings::of(&Config::default())
    }
}
