//! The keys of the configuration, for what names them: the `JURYSTREAM_` variables and the
//! keys of the configuration file, each of which must name a key (or the start fails naming
//! the nearest one), and `jurystream check-config`, which lists every key's effective value
//! with where it came from.

use std::path::Path;

use figment::providers::{Format, Toml};
use figment::{Figment, Profile, Provider, Source};
use serde_json::Value;

use super::{Config, ConfigError, Problems};

/// The prefix of every variable jurystream reads.
const PREFIX: &str = "JURYSTREAM_";

/// The `JURYSTREAM_` variables that are not settings.
fn other_variables() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut names = vec!["JURYSTREAM_CONFIG", "JURYSTREAM_API_TOKENS"];
    #[cfg(feature = "fault-injection")]
    names.extend(FAULT_VARIABLES);
    names
}

/// The crash-injection variables of a build with `fault-injection` (`crate::kafka::faults`);
/// a build without it refuses them like any other variable that names nothing.
#[cfg(feature = "fault-injection")]
pub const FAULT_VARIABLES: [&str; 7] = [
    "JURYSTREAM_CLOCK_BEHIND_MS",
    "JURYSTREAM_CRASH_AFTER_CHANGELOG",
    "JURYSTREAM_CRASH_MID_CHANGELOG",
    "JURYSTREAM_FAIL_COMMITS",
    "JURYSTREAM_REFUSE_FORWARD",
    "JURYSTREAM_RESTORE_STOPS_SHORT",
    "JURYSTREAM_STEP_CLOCK_MS",
];

/// A key of the configuration: its dotted path, and whether it is a map whose own keys are
/// free (`kafka.producer`, `sessions.judge_weights`).
struct Key {
    path: String,
    map: bool,
}

impl Key {
    /// Whether `path` is this key, or an entry of it if it is a map.
    fn holds(&self, path: &str) -> bool {
        self.path == path || (self.map && below(path, &self.path))
    }
}

/// Whether dotted `path` lies below `prefix` (`kafka.consumer.linger.ms` below `kafka.consumer`).
fn below(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.starts_with('.'))
}

/// Every key of the configuration, from its defaults' leaves: a map is empty by default, so
/// it is a leaf whose value is an object.
fn keys() -> Vec<Key> {
    let mut leaves = Vec::new();
    let defaults = serde_json::to_value(Config::default()).unwrap_or(Value::Null);
    leaves_of("", &defaults, &mut leaves);
    leaves
        .into_iter()
        .map(|(path, value)| Key {
            map: value.is_object(),
            path,
        })
        .collect()
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The variable that sets `key`: `scoring.lambda` is `JURYSTREAM_SCORING__LAMBDA`.
pub fn variable(key: &str) -> String {
    format!("{PREFIX}{}", key.to_ascii_uppercase().replace('.', "__"))
}

/// Checks that every `JURYSTREAM_` variable among `names` names a key
/// (`JURYSTREAM_SECTION__KEY`) or is one of the few that are not settings. One that names
/// nothing fails the start, naming the nearest variable that would (every such variable, in
/// the order given): a mistyped variable must never leave a default in force.
pub fn check_environment(names: impl IntoIterator<Item = String>) -> Result<(), ConfigError> {
    let keys = keys();
    let others = other_variables();
    let mut problems = Problems::default();
    for name in names {
        if !name.starts_with(PREFIX) || others.contains(&name.as_str()) {
            continue;
        }
        let key = name[PREFIX.len()..].to_ascii_lowercase().replace("__", ".");
        let names_a_key = name.contains("__") && keys.iter().any(|k| k.holds(&key));
        if !names_a_key {
            problems.push(ConfigError::Variable {
                nearest: nearest(&name, &keys, &others),
                name,
            });
        }
    }
    problems.into_result()
}

/// The variable nearest to `name` by edit distance, underscores and dots alike (so that
/// `JURYSTREAM_SCORING_LAMBDA` finds `JURYSTREAM_SCORING__LAMBDA`), with its key if a setting.
fn nearest(name: &str, keys: &[Key], others: &[&str]) -> String {
    let settings = keys.iter().map(|k| {
        (
            k.path.as_str(),
            format!("{} ({})", variable(&k.path), k.path),
        )
    });
    let rest = others.iter().map(|o| (&o[PREFIX.len()..], (*o).to_owned()));
    closest(&name[PREFIX.len()..], settings.chain(rest))
}

/// What a value that is not one of its setting's `choices` (`found`) should read, in the
/// words of the other refusals: the choices, and the nearest to it.
pub fn not_a_choice(found: &str, choices: &[&str]) -> String {
    let listed: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
    let nearest = closest(found, choices.iter().map(|c| (*c, format!("`{c}`"))));
    format!(
        "`{found}` is not one of {}; the nearest is {nearest}",
        listed.join(", ")
    )
}

/// Of `candidates` (each a name and how to show it), the one whose name is nearest to `name` by
/// edit distance, without case, dots or underscores.
fn closest<'a>(name: &str, candidates: impl Iterator<Item = (&'a str, String)>) -> String {
    let plain = |text: &str| text.to_ascii_lowercase().replace(['.', '_'], "");
    let wanted = plain(name);
    candidates
        .min_by_key(|(candidate, _)| strsim::levenshtein(&plain(candidate), &wanted))
        .map(|(_, shown)| shown)
        .unwrap_or_default()
}

/// Checks that every key of the configuration file `path` names a setting, as
/// [`check_environment`] checks the variables: one that names nothing fails the start naming
/// the nearest key, every such key at once (the file's values are then read, and refused, as
/// they were). A file that is not TOML is left to the read that reports where.
pub fn check_file(path: &Path) -> Result<(), ConfigError> {
    match Toml::file(path).data() {
        Ok(data) => check_keys(&path.display().to_string(), &data),
        Err(_) => Ok(()),
    }
}

/// [`check_file`] of a file `file` whose values by profile are `data`.
fn check_keys(
    file: &str,
    data: &figment::value::Map<Profile, figment::value::Dict>,
) -> Result<(), ConfigError> {
    let keys = keys();
    let mut problems = Problems::default();
    for dict in data.values() {
        let mut leaves = Vec::new();
        leaves_of(
            "",
            &serde_json::to_value(dict).unwrap_or(Value::Null),
            &mut leaves,
        );
        // An empty file is one leaf, the root, of no key.
        for (key, _) in leaves.into_iter().filter(|(key, _)| !key.is_empty()) {
            // A bare section (`[http]` with nothing under it) is the start of a key.
            let names_a_key = keys.iter().any(|k| k.holds(&key) || below(&k.path, &key));
            if !names_a_key {
                let candidates = keys.iter().map(|k| (k.path.as_str(), k.path.clone()));
                problems.push(ConfigError::FileKey {
                    file: file.to_owned(),
                    nearest: closest(&key, candidates),
                    key,
                });
            }
        }
    }
    problems.into_result()
}

/// The effective configuration of `figment` (extracted and valid), one `key = value` line per
/// key in order, each with where its value came from: `default`, the file, or the variable.
/// The values of keys that hold secrets (passwords, tokens, private keys) are shown as
/// `"<redacted>"`.
pub fn effective(figment: &Figment, config: &Config) -> String {
    let mut lines = Vec::new();
    let value = serde_json::to_value(config).unwrap_or(Value::Null);
    let mut leaves = Vec::new();
    leaves_of("", &value, &mut leaves);
    for (key, value) in leaves {
        let shown = if secret(&key) {
            "\"<redacted>\"".to_owned()
        } else {
            value.to_string()
        };
        let source = match figment.find_metadata(&key) {
            Some(m) => match &m.source {
                Some(Source::File(path)) => format!("file {}", path.display()),
                _ if m.name.contains("environment") => variable(&key),
                _ => "default".to_owned(),
            },
            None => "default".to_owned(),
        };
        lines.push(format!("{key} = {shown}  # {source}"));
    }
    lines.join("\n") + "\n"
}

/// Every leaf of `value` with its dotted key; a map's entries are leaves of their own, and an
/// empty map is one leaf (`{}`).
fn leaves_of(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (name, value) in fields {
                leaves_of(&join(prefix, name), value, out);
            }
        }
        _ => out.push((prefix.to_owned(), value.clone())),
    }
}

/// Whether a key holds a secret: a password, token, private key or credentials (librdkafka's
/// `sasl.password`, `ssl.key.password`, `ssl.key.pem`, `sasl.oauthbearer.client.secret`...).
fn secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "private", "key.pem", "credentials"]
        .iter()
        .any(|s| key.contains(s))
        || (key.contains("token") && !key.ends_with("tokens_file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_variable_that_names_no_key_fails_naming_the_nearest() {
        for (name, nearest) in [
            (
                "JURYSTREAM_SCORING_LAMBDA",
                "JURYSTREAM_SCORING__LAMBDA (scoring.lambda)",
            ),
            ("JURYSTREAM_HTTP_BIND", "JURYSTREAM_HTTP__BIND (http.bind)"),
            (
                "JURYSTREAM_SCORING__LAMBADA",
                "JURYSTREAM_SCORING__LAMBDA (scoring.lambda)",
            ),
            ("JURYSTREAM_CONFIG_FILE", "JURYSTREAM_CONFIG"),
        ] {
            match check_environment(vars(&[name])) {
                Err(ConfigError::Variable {
                    name: n,
                    nearest: found,
                }) => {
                    assert_eq!((n.as_str(), found.as_str()), (name, nearest));
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        let message = check_environment(vars(&["JURYSTREAM_HTTP_BIND"]))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("JURYSTREAM_HTTP_BIND") && message.contains("JURYSTREAM_HTTP__BIND"),
            "{message}"
        );
    }

    /// The keys of a file that name no setting, each with the nearest (a section misspelled
    /// too), every one at once; the keys of maps, sections alone and settings pass.
    #[test]
    fn a_file_key_that_names_no_setting_fails_naming_the_nearest() {
        let text = "[kafka]\npartitons = 3\nbootstrap_servers = \"b:9092\"\n\
                    [kafka.consumer]\n\"fetch.max.bytes\" = \"1\"\n\
                    [scoring.project_lambda]\nproj-1 = 0.1\n[scoring]\nlambda = 0.1\n\
                    [leaderbord]\nwindow_days = 3\n[http]\n";
        let data = Toml::string(text).data().expect("TOML");
        match check_keys("jurystream.toml", &data) {
            Err(ConfigError::Several(problems)) => {
                let named: Vec<(&str, &str)> = problems
                    .iter()
                    .map(|p| match p {
                        ConfigError::FileKey { key, nearest, .. } => {
                            (key.as_str(), nearest.as_str())
                        }
                        other => panic!("{other:?}"),
                    })
                    .collect();
                assert_eq!(
                    named,
                    [
                        ("kafka.partitons", "kafka.partitions"),
                        ("leaderbord.window_days", "leaderboard.window_days"),
                    ]
                );
                let message = ConfigError::Several(problems).to_string();
                assert!(
                    message.contains(
                        "configuration file jurystream.toml: `kafka.partitons` names no \
                         setting; the nearest is `kafka.partitions`"
                    ),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        let fine = Toml::string("[kafka]\npartitions = 3\n[kafka.producer]\nlinger_ms = \"5\"\n")
            .data()
            .expect("TOML");
        assert!(check_keys("jurystream.toml", &fine).is_ok());
        let empty = Toml::string("").data().expect("TOML");
        assert!(check_keys("jurystream.toml", &empty).is_ok());
    }

    #[test]
    fn every_variable_that_names_nothing_is_named_at_once() {
        let names = vars(&[
            "JURYSTREAM_SCORING_LAMBDA",
            "JURYSTREAM_SCORING__LAMBDA",
            "JURYSTREAM_HTTP_BIND",
        ]);
        match check_environment(names) {
            Err(ConfigError::Several(problems)) => {
                let named: Vec<_> = problems
                    .iter()
                    .map(|p| match p {
                        ConfigError::Variable { name, .. } => name.as_str(),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                assert_eq!(named, ["JURYSTREAM_SCORING_LAMBDA", "JURYSTREAM_HTTP_BIND"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_maps_and_the_variables_that_are_not_settings_pass() {
        check_environment(vars(&[
            "JURYSTREAM_SCORING__LAMBDA",
            "JURYSTREAM_KAFKA__BOOTSTRAP_SERVERS",
            "JURYSTREAM_KAFKA__PRODUCER__LINGER_MS",
            "JURYSTREAM_SESSIONS__JUDGE_WEIGHTS__GPT",
            "JURYSTREAM_CONFIG",
            "JURYSTREAM_API_TOKENS",
            "PATH",
            "RUST_LOG",
        ]))
        .unwrap();
        // A section is not a key, nor is a key below a value.
        assert!(check_environment(vars(&["JURYSTREAM_SCORING__LAMBDA__X"])).is_err());
        assert!(check_environment(vars(&["JURYSTREAM_SCORING"])).is_err());
    }

    #[test]
    fn a_variable_is_its_key_in_capitals_with_two_underscores() {
        assert_eq!(
            variable("kafka.bootstrap_servers"),
            "JURYSTREAM_KAFKA__BOOTSTRAP_SERVERS"
        );
    }

    #[test]
    fn secrets_are_recognised_and_a_tokens_file_is_not_one() {
        for key in [
            "kafka.producer.sasl.password",
            "kafka.consumer.ssl.key.pem",
            "kafka.consumer.sasl.oauthbearer.client.secret",
        ] {
            assert!(secret(key), "{key}");
        }
        for key in [
            "http.tokens_file",
            "kafka.bootstrap_servers",
            "scoring.lambda",
        ] {
            assert!(!secret(key), "{key}");
        }
    }
}
