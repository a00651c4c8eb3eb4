//! Configuration: `config/jurystream.toml`, overridden by `JURYSTREAM_SECTION__KEY` variables.
//!
//! Every key has a default, so an empty file is a valid configuration. Unknown keys and bad values
//! fail at start with an error naming the key: a typo must never silently fall back to a default.
//! The checks note every problem they find ([`ConfigError::Several`]), so that a deployment with
//! several mistakes learns of all of them from one refusal.
//!
//! The engine's sections (limits, scoring, sessions, bias, leaderboard, judge quality,
//! reviewers) are its
//! own types ([`crate::engine::settings`]), re-exported here; the runtimes' are in `service`;
//! each group's checks sit beside it (`engine`, `service`).

mod engine;
mod keys;
mod service;

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use self::service::{
    Http, Input, Kafka, Log, Metrics, OutputSettings, Partitioning, Topics, changelog_name,
    instances_name, is_host_and_port, log_filter_error, repartition_name,
};
pub use crate::engine::model::dedupe::MAX_WINDOW as MAX_DEDUPE_WINDOW;
pub use crate::engine::settings::{
    Bias, JudgeQuality, Leaderboard, Limits, Method, ReputationSource, Reviewers, Scoring,
    Sessions, Settings, Strategy, Weighting,
};

/// A configuration that could not be loaded or is invalid; `key` is the dotted path, e.g. `scoring.lambda`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}", load_message(.0))]
    Load(Box<figment::Error>),
    #[error("configuration key `{key}`: {message}")]
    Invalid { key: String, message: String },
    /// A `JURYSTREAM_` variable that names no setting.
    #[error(
        "environment variable {name} names no setting (a setting is JURYSTREAM_<SECTION>__<KEY>, two underscores between them); the nearest is {nearest}"
    )]
    Variable { name: String, nearest: String },
    /// A key of the configuration file that names no setting.
    #[error("configuration file {file}: `{key}` names no setting; the nearest is `{nearest}`")]
    FileKey {
        file: String,
        key: String,
        nearest: String,
    },
    /// More than one of the others, each on a line of its own: a refused start names every
    /// problem the checks found, not one per attempt.
    #[error("the configuration has {} problems:\n{}", .0.len(), lines(.0))]
    Several(Vec<ConfigError>),
}

/// A value that could not be read, in the words of the other refusals: its key, where the value
/// came from and what is wrong with it, a line for each (figment's own words name the key with
/// its profile, `"default.kafka.partitions"`, and where it came from last). An error of no key
/// (a file that is not TOML) keeps figment's words, which say where.
fn load_message(error: &figment::Error) -> String {
    let line = |e: figment::Error| {
        if e.path.is_empty() {
            return format!("configuration: {e}");
        }
        let key = e.path.join(".");
        let from = e.metadata.as_ref().map(|m| match &m.source {
            Some(figment::Source::File(path)) => format!(" (from file {})", path.display()),
            _ if m.name.contains("environment") => {
                format!(" (from environment variable {})", keys::variable(&key))
            }
            _ => format!(" (from {})", m.name),
        });
        // figment quotes a list of choices twice ("expected ``a` or `b``"): said here instead.
        let wrong = match &e.kind {
            figment::error::Kind::UnknownVariant(found, choices) => {
                keys::not_a_choice(found, choices)
            }
            kind => kind.to_string(),
        };
        format!(
            "configuration key `{key}`{}: {wrong}",
            from.unwrap_or_default()
        )
    };
    error
        .clone()
        .into_iter()
        .map(line)
        .collect::<Vec<_>>()
        .join("\n")
}

fn lines(problems: &[ConfigError]) -> String {
    let line = |p: &ConfigError| format!("- {p}");
    problems.iter().map(line).collect::<Vec<_>>().join("\n")
}

/// The problems the checks have found so far: each check notes its own and goes on, so that a
/// configuration with several mistakes is refused once, naming all of them.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<ConfigError>);

impl Problems {
    /// Notes what `check` found, if anything.
    pub(super) fn check(&mut self, check: Result<(), ConfigError>) {
        if let Err(problem) = check {
            self.push(problem);
        }
    }

    pub(super) fn push(&mut self, problem: ConfigError) {
        match problem {
            ConfigError::Several(problems) => self.0.extend(problems),
            problem => self.0.push(problem),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// The refusal of `last` and of every problem noted before it.
    pub(super) fn refuse(mut self, last: ConfigError) -> ConfigError {
        self.push(last);
        match self.0.len() {
            1 => self.0.remove(0),
            _ => ConfigError::Several(self.0),
        }
    }

    /// None, the one, or [`ConfigError::Several`].
    pub(super) fn into_result(mut self) -> Result<(), ConfigError> {
        match self.0.len() {
            0 => Ok(()),
            1 => Err(self.0.remove(0)),
            _ => Err(ConfigError::Several(self.0)),
        }
    }
}

/// The value of the key at `path` in `defaults`, if it is one.
fn default_at(defaults: &serde_json::Value, path: &[String]) -> Option<serde_json::Value> {
    if path.is_empty() {
        return None;
    }
    let mut value = defaults;
    for name in path {
        value = value.get(name)?;
    }
    Some(value.clone())
}

/// The most values of the wrong type one refusal names, more than the configuration has keys:
/// a bound on reading again should a default not mend its key.
const MAX_UNREADABLE: usize = 200;

pub(super) fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
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
    pub reviewers: Reviewers,
    pub kafka: Kafka,
    pub output: OutputSettings,
    pub http: Http,
    pub log: Log,
    pub metrics: Metrics,
}

impl Config {
    /// The engine's part of the configuration: its sections, and what it needs of the rest.
    pub fn engine_settings(&self) -> Settings {
        Settings {
            limits: self.limits.clone(),
            scoring: self.scoring.clone(),
            sessions: self.sessions.clone(),
            bias: self.bias.clone(),
            leaderboard: self.leaderboard.clone(),
            judge_quality: self.judge_quality.clone(),
            reviewers: self.reviewers.clone(),
            pairs_judges: self.pairs_judges(),
            quality_task_items: self.quality_task_items(),
            scores_coalesce_ms: self.output.scores_coalesce_ms,
            key_is_project: !self.input.repartitions(),
            record_bytes: self.producer_record_limit(),
        }
    }

    /// The items a task's judge quality holds: `judge_quality.max_items` split over the
    /// `kafka.partitions` tasks (the engine's `Settings::quality_task_items`).
    pub fn quality_task_items(&self) -> usize {
        self.judge_quality
            .max_items
            .div_ceil(self.kafka.partitions.max(1) as usize)
    }

    /// Whether judge scores pair with votes (the engine's `Settings::pairs_judges`): judge
    /// quality on, with every record of a project in one state.
    pub fn pairs_judges(&self) -> bool {
        self.judge_quality.enabled && self.input.repartitions()
    }

    /// Whether reviewer reliability learns: on, where judge scores pair with votes (it learns
    /// from the items judge quality keeps).
    pub fn learns_reviewers(&self) -> bool {
        self.reviewers.enabled && self.pairs_judges()
    }

    /// The settings that ask for something another setting leaves out, each with why and what
    /// to set instead: judge quality and reviewer reliability need every record of a project in
    /// one state (`input.partitioning = "repartition"`), reviewer reliability learns from the
    /// items judge quality keeps, and the service's idle ticks go to the project log, which
    /// only `repartition` has (`in_service`: replay reads its ticks from its file, whatever the
    /// partitioning). Valid, as the defaults with `by_key` are, so not refused; said at start
    /// and by check-config, so that statistics a configuration asks for are never missing
    /// unsaid. Each is `(key, what to say)`.
    pub fn without_effect(&self, in_service: bool) -> Vec<(&'static str, String)> {
        const BY_KEY: &str = "with input.partitioning = \"by_key\"";
        let by_key = !self.input.repartitions();
        let mut said = Vec::new();
        if self.judge_quality.enabled && !self.pairs_judges() {
            said.push((
                "judge_quality.enabled",
                format!(
                    "judge_quality.enabled = true has no effect {BY_KEY}: judge quality pairs a \
                     project's votes with its judge scores, which by_key applies in two \
                     partitions; nothing is published on jury.judge-quality or \
                     jury.review-requests (set it to false, or use \"repartition\")"
                ),
            ));
        }
        if self.reviewers.enabled && !self.learns_reviewers() {
            let (why, instead) = if by_key {
                (BY_KEY, "use \"repartition\"")
            } else {
                (
                    "with judge_quality.enabled = false",
                    "judge_quality.enabled to true",
                )
            };
            said.push((
                "reviewers.enabled",
                format!(
                    "reviewers.enabled = true has no effect {why}: reviewer reliability learns \
                     from the items judge quality keeps; nothing is published on \
                     jury.reviewer-quality (set it to false, or {instead})"
                ),
            ));
        }
        if in_service && by_key && self.sessions.idle_timeout_secs > 0 {
            said.push((
                "sessions.idle_timeout_secs",
                format!(
                    "sessions.idle_timeout_secs has no effect {BY_KEY}: there is \
                     no project log to write ticks to, so sessions complete only by their \
                     judges, a close, the event-time timeout or eviction, and a leaderboard \
                     category's ratings take in the sessions after their last fit only at its \
                     next session or when its partition goes (set it to 0, or use \
                     \"repartition\")"
                ),
            ));
        }
        said
    }

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
        Config::from_figment(Config::sources(path)?)
    }

    /// [`Config::load`], and the configuration it gives as text: one `key = value` line per
    /// key with where its value came from (`jurystream check-config`), secrets redacted.
    pub fn load_shown(path: Option<&Path>) -> Result<(Config, String), ConfigError> {
        let figment = Config::sources(path)?;
        let config = Config::from_figment(figment.clone())?;
        let shown = keys::effective(&figment, &config);
        Ok((config, shown))
    }

    /// The defaults, `path` over them and the environment over both; every `JURYSTREAM_`
    /// variable and every key of the file must name a setting.
    fn sources(path: Option<&Path>) -> Result<Figment, ConfigError> {
        let mut problems = Problems::default();
        problems.check(keys::check_environment(
            std::env::vars_os().map(|(name, _)| name.to_string_lossy().into_owned()),
        ));
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = path {
            if !path.exists() {
                return Err(invalid(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            problems.check(keys::check_file(path));
            figment = figment.merge(Toml::file(path));
        }
        problems.into_result()?;
        Ok(figment.merge(env_overrides()))
    }

    /// Parses a TOML document over the defaults (no environment); for tests and embedded configs.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::from_figment(
            Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(text)),
        )
    }

    /// Reads and validates `figment`, refusing every value it cannot read and every value out of
    /// range in one refusal. Reading stops at the first value of the wrong type, so each one
    /// refused is put back to its default and the rest read again, until they read; then the
    /// values read are validated too (those put back are valid).
    fn from_figment(mut figment: Figment) -> Result<Config, ConfigError> {
        let defaults = serde_json::to_value(Config::default()).unwrap_or_default();
        let mut problems = Problems::default();
        let config = loop {
            let error = match figment.extract::<Config>() {
                Ok(config) => break config,
                Err(error) => error,
            };
            let key = error.path.join(".");
            let default = default_at(&defaults, &error.path);
            let refused = ConfigError::Load(Box::new(error));
            match default {
                // Not a key with a default (a map's entry, a file that is not TOML): the
                // refusal is what was found so far.
                Some(default) if problems.len() < MAX_UNREADABLE => {
                    problems.push(refused);
                    figment = figment.merge(Serialized::default(&key, default));
                }
                _ => return Err(problems.refuse(refused)),
            }
        };
        problems.check(config.validate());
        problems.into_result()?;
        Ok(config)
    }

    /// Checks every value a type cannot express; refused, it names every value refused.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Problems::default();
        service::validate(self, &mut problems);
        engine::validate(self, &mut problems);
        problems.into_result()
    }
}

fn env_overrides() -> Env {
    // Only SECTION__KEY variables are settings; JURYSTREAM_CONFIG and the like are not.
    Env::prefixed("JURYSTREAM_")
        .filter(|k| k.as_str().contains("__"))
        .split("__")
}

pub(super) fn positive(key: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(invalid(key, "must be at least 1"));
    }
    Ok(())
}

/// `value` may be at most `max`; the message reads "at most {max} {why}".
pub(super) fn at_most(key: &str, value: usize, max: usize, why: &str) -> Result<(), ConfigError> {
    if value > max {
        return Err(invalid(key, format!("at most {max} {why}")));
    }
    Ok(())
}

/// [`at_most`] of each of `keys`' values, noted in `p`.
pub(super) fn each_at_most(p: &mut Problems, keys: [(&str, u64); 2], max: usize, why: &str) {
    for (key, value) in keys {
        p.check(at_most(
            key,
            usize::try_from(value).unwrap_or(usize::MAX),
            max,
            why,
        ));
    }
}

/// A decay rate per second (`scoring.lambda`): finite and above 0. At 0 every `alpha` is 1,
/// so no batch after a project's first would move its score: a score frozen for good, most
/// likely meant as "no decay", which this formula cannot give.
pub(super) fn decay_rate(key: &str, value: f64) -> Result<(), ConfigError> {
    if !value.is_finite() || value <= 0.0 {
        return Err(invalid(
            key,
            format!(
                "must be a finite number > 0, got {value} (with 0 no batch after a project's \
                 first would move its score: alpha = exp(-lambda * dt) = 1)"
            ),
        ));
    }
    Ok(())
}

pub(super) fn unit_interval(key: &str, value: f64) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(invalid(key, format!("must be within 0..=1, got {value}")));
    }
    Ok(())
}

impl Default for Settings {
    /// The engine's part of the default configuration.
    fn default() -> Self {
        Config::default().engine_settings()
    }
}

#[cfg(test)]
mod tests;
